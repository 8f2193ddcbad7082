//! Errors of the metadata store.
//!
//! Invariants:
//! - Every operating error names what it is about (bucket, key, node, task) so a user sees
//!   what was wrong without reading logs.
//! - A refused operation changes nothing: errors are returned before a transaction commits.

use std::fmt;

use weft_layout::UnitId;

/// Why a metadata operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetaError {
    /// No bucket of that name.
    NoSuchBucket { bucket: String },
    /// A bucket of that name already exists.
    BucketExists { bucket: String },
    /// The bucket still holds committed objects or writes in progress.
    BucketNotEmpty { bucket: String },
    /// No committed object under that key.
    NoSuchKey { bucket: String, key: String },
    /// No write in progress with that generation (never begun, committed or superseded).
    NoSuchWrite { bucket: String, key: String, generation: u64 },
    /// A bucket name or object key breaks the naming rules.
    InvalidName { what: &'static str, name: String, reason: &'static str },
    /// A policy or placement given to the store is not valid.
    InvalidRecord { bucket: String, key: String, reason: String },
    /// The object has no such unit (a data block past its end, a parity of a missing group).
    NoSuchUnit { bucket: String, key: String, unit: UnitId },
    /// Moving the unit to that disk would break a placement rule (two units of one group or
    /// stripe in one failure domain); nothing changed.
    PlacementRefused { bucket: String, key: String, unit: UnitId, reason: String },
    /// The repair lease is gone: completed, failed, or expired and taken by another executor.
    LeaseLost { task_id: u64, bucket: String, key: String, unit: UnitId },
    /// A stored value (or the database) has a format version this build does not read.
    UnsupportedVersion { table: &'static str, key: String, found: u64, supported: u64 },
    /// A stored value could not be decoded.
    Corrupt { table: &'static str, key: String, reason: String },
    /// The underlying store failed (IO, transaction); the operation did not take effect.
    Store { reason: String },
}

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaError::NoSuchBucket { bucket } => write!(f, "bucket {bucket:?} does not exist"),
            MetaError::BucketExists { bucket } => write!(f, "bucket {bucket:?} already exists"),
            MetaError::BucketNotEmpty { bucket } => write!(
                f,
                "bucket {bucket:?} is not empty: delete its objects (and finish or abandon its \
                 writes) first"
            ),
            MetaError::NoSuchKey { bucket, key } => {
                write!(f, "object {key:?} does not exist in bucket {bucket:?}")
            }
            MetaError::NoSuchWrite { bucket, key, generation } => write!(
                f,
                "no write of generation {generation} in progress for object {key:?} in bucket \
                 {bucket:?} (already committed, or superseded by a newer write)"
            ),
            MetaError::InvalidName { what, name, reason } => {
                write!(f, "invalid {what} name {name:?}: {reason}")
            }
            MetaError::InvalidRecord { bucket, key, reason } => {
                write!(f, "invalid record for object {key:?} in bucket {bucket:?}: {reason}")
            }
            MetaError::NoSuchUnit { bucket, key, unit } => {
                write!(f, "object {key:?} in bucket {bucket:?} has no {unit}")
            }
            MetaError::PlacementRefused { bucket, key, unit, reason } => {
                write!(f, "cannot move {unit} of object {key:?} in bucket {bucket:?}: {reason}")
            }
            MetaError::LeaseLost { task_id, bucket, key, unit } => write!(
                f,
                "lease on repair task {task_id} ({unit} of object {key:?} in bucket {bucket:?}) \
                 was lost: it expired or the task was already finished"
            ),
            MetaError::UnsupportedVersion { table, key, found, supported } => write!(
                f,
                "value {key:?} in table {table:?} has format version {found}, this build reads \
                 only version {supported}: upgrade weft"
            ),
            MetaError::Corrupt { table, key, reason } => {
                write!(f, "value {key:?} in table {table:?} is corrupt: {reason}")
            }
            MetaError::Store { reason } => write!(f, "metadata store failed: {reason}"),
        }
    }
}

impl std::error::Error for MetaError {}
