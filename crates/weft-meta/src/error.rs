//! Errors of the metadata store.
//!
//! Invariants:
//! - Every operating error names what it is about (bucket, key, node, task) so a user sees
//!   what was wrong without reading logs.
//! - A refused operation changes nothing: errors are returned before a transaction commits.

use std::fmt;

use weft_layout::{DiskLocation, UnitId};

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
    /// The key has no version of that id (`latest`: no version at all).
    NoSuchVersion { bucket: String, key: String, version: String },
    /// The bucket cannot be versioned (RAIDP, geometric, internal).
    NotVersionable { bucket: String, reason: &'static str },
    /// The bucket's state refuses the change (object lock without versioning enabled,
    /// suspending versioning of a bucket with object lock).
    InvalidBucketState { bucket: String, reason: &'static str },
    /// An object lock was asked of a bucket without object lock.
    ObjectLockNotEnabled { bucket: String },
    /// An object lock (or a bucket's lock configuration) that cannot be.
    InvalidLock { bucket: String, reason: String },
    /// The version's lock refuses the removal or the change (see `crate::lock`).
    ObjectLocked { bucket: String, key: String, version: String, reason: &'static str },
    /// No write in progress with that generation (never begun, committed, aborted or
    /// expired).
    NoSuchWrite { bucket: String, key: String, generation: u64 },
    /// A commit's or delete's precondition on the key's committed object does not hold;
    /// `current` is that object's generation, if one is committed. Nothing changed.
    PreconditionFailed { bucket: String, key: String, current: Option<u64> },
    /// A commit's attributes are not a JSON object, or too large.
    InvalidAttributes { bucket: String, key: String, reason: String },
    /// A bucket name or object key breaks the naming rules.
    InvalidName { what: &'static str, name: String, reason: &'static str },
    /// A policy or placement given to the store is not valid.
    InvalidRecord { bucket: String, key: String, reason: String },
    /// Unit digests given at a commit do not name exactly the units they must.
    InvalidDigests { bucket: String, key: String, reason: String },
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
    /// The store's disk failed an IO (e.g. "No space left on device"): the operation did not
    /// take effect, and the store refuses work until it is reopened, which the store does by
    /// itself on the next operation once the disk works again. `reason` is the IO error.
    /// For PostgreSQL: the server could not be reached or the connection broke (`reason`
    /// starts with "PostgreSQL"); the next operation connects anew.
    StoreUnavailable { reason: String },
    /// No transition `id` is pending for the object (never begun, committed, aborted,
    /// replaced by a newer begin, or dropped with the object); `pending` is the one that is.
    NoSuchTransition { bucket: String, key: String, id: u64, pending: Option<u64> },
    /// A transition cannot begin or commit as asked; nothing changed. `id` is 0 for a begin
    /// refused before an id was handed out (ids start at 1).
    TransitionConflict { bucket: String, key: String, id: u64, conflict: TransitionConflict },
    /// A gateway record of that name already exists (a create-only put was refused).
    RecordExists { namespace: String, name: String },
    /// A gateway record namespace this build does not know.
    NoSuchNamespace { namespace: String },
    /// A record changed between this operation's read and its write (another meta replica
    /// changed it): nothing was written; the operation may be asked again.
    RecordChanged { namespace: String, name: String },
}

/// Why a transition was refused at begin or commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionConflict {
    /// The object is no longer committed (deleted, or its bucket is gone).
    ObjectGone,
    /// The committed object is another write than the one the transition was planned for.
    ObjectReplaced { planned: u64, current: u64 },
    /// The transition already committed: the object's parity generation is its id.
    AlreadyCommitted,
    /// No transition of that id is pending (never begun, aborted, or dropped when the object
    /// was overwritten or deleted).
    NotPending,
    /// A newer begin replaced it; `current` is the pending transition's id.
    Superseded { current: u64 },
    /// A block to relocate is no longer on the disk it was planned to move from (a repair
    /// moved it): the copy the executor made is of the right data but from the wrong place.
    /// (`block` is a u32, as unit keys number blocks, to keep [`MetaError`] small.)
    Relocation { block: u32, planned_from: DiskLocation, current: DiskLocation },
    /// The new placement breaks a placement rule over the object's current disks (a repair
    /// moved a block into a domain the new plan uses).
    Placement { reason: String },
}

impl TransitionConflict {
    /// The machine-readable name of the conflict (the `reason` of a 409 body).
    pub fn code(&self) -> &'static str {
        match self {
            TransitionConflict::ObjectGone => "object_gone",
            TransitionConflict::ObjectReplaced { .. } => "object_replaced",
            TransitionConflict::AlreadyCommitted => "already_committed",
            TransitionConflict::NotPending => "not_pending",
            TransitionConflict::Superseded { .. } => "superseded",
            TransitionConflict::Relocation { .. } => "relocation_conflict",
            TransitionConflict::Placement { .. } => "placement_conflict",
        }
    }
}

impl fmt::Display for TransitionConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionConflict::ObjectGone => f.write_str("the object was deleted"),
            TransitionConflict::ObjectReplaced { planned, current } => write!(
                f,
                "the object was overwritten: it was planned for generation {planned}, the \
                 committed object is generation {current}"
            ),
            TransitionConflict::AlreadyCommitted => {
                f.write_str("it is already committed (the object's parity generation is its id)")
            }
            TransitionConflict::NotPending => f.write_str(
                "it is not pending: never begun, aborted, expired (its lease passed), or dropped \
                 when the object was overwritten or deleted",
            ),
            TransitionConflict::Superseded { current } => {
                write!(f, "a newer begin replaced it: transition {current} is pending")
            }
            TransitionConflict::Relocation { block, planned_from, current } => write!(
                f,
                "block d{block} was to move from disk {} of node {} but is now on disk {} of \
                 node {} (a repair moved it); abort and begin again",
                planned_from.disk, planned_from.node, current.disk, current.node
            ),
            TransitionConflict::Placement { reason } => write!(
                f,
                "the new placement over the object's current disks breaks a rule ({reason}); \
                 abort and begin again"
            ),
        }
    }
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
            MetaError::NotVersionable { bucket, reason } => {
                write!(f, "bucket {bucket:?} cannot be versioned: {reason}")
            }
            MetaError::InvalidBucketState { bucket, reason } => {
                write!(f, "bucket {bucket:?} refuses that: {reason}")
            }
            MetaError::ObjectLockNotEnabled { bucket } => write!(
                f,
                "bucket {bucket:?} does not have object lock (it is enabled when the bucket is \
                 created, or on a bucket with versioning enabled)"
            ),
            MetaError::InvalidLock { bucket, reason } => {
                write!(f, "invalid object lock in bucket {bucket:?}: {reason}")
            }
            MetaError::ObjectLocked { bucket, key, version, reason } => write!(
                f,
                "version {version:?} of object {key:?} in bucket {bucket:?} is locked: {reason}"
            ),
            MetaError::NoSuchVersion { bucket, key, version } => {
                write!(f, "object {key:?} in bucket {bucket:?} has no version {version:?}")
            }
            MetaError::NoSuchWrite { bucket, key, generation } => write!(
                f,
                "no write of generation {generation} in progress for object {key:?} in bucket \
                 {bucket:?} (already committed, aborted or expired)"
            ),
            MetaError::InvalidAttributes { bucket, key, reason } => {
                write!(f, "bad attributes for object {key:?} in bucket {bucket:?}: {reason}")
            }
            MetaError::PreconditionFailed { bucket, key, current } => match current {
                Some(generation) => write!(
                    f,
                    "precondition failed: object {key:?} in bucket {bucket:?} is at generation \
                     {generation}"
                ),
                None => write!(
                    f,
                    "precondition failed: no object {key:?} is committed in bucket {bucket:?}"
                ),
            },
            MetaError::InvalidName { what, name, reason } => {
                write!(f, "invalid {what} name {name:?}: {reason}")
            }
            MetaError::InvalidRecord { bucket, key, reason } => {
                write!(f, "invalid record for object {key:?} in bucket {bucket:?}: {reason}")
            }
            MetaError::InvalidDigests { bucket, key, reason } => {
                write!(f, "bad unit digests for object {key:?} in bucket {bucket:?}: {reason}")
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
            MetaError::StoreUnavailable { reason } if reason.starts_with("PostgreSQL") => write!(
                f,
                "meta's store is unavailable: {reason}; the operation did not take effect \
                 (or, if the connection broke during its commit, may have: read before \
                 retrying), and meta connects again on the next request once PostgreSQL answers"
            ),
            MetaError::StoreUnavailable { reason } => write!(
                f,
                "meta's store is unavailable: {reason}; meta reopens it on the next request \
                 once its disk works again (free space on meta's --dir)"
            ),
            MetaError::NoSuchTransition { bucket, key, id, pending } => {
                write!(f, "no transition {id} is pending for object {key:?} in bucket {bucket:?}")?;
                match pending {
                    Some(current) => write!(f, " (transition {current} is)"),
                    None => write!(f, " (none is)"),
                }
            }
            MetaError::TransitionConflict { bucket, key, id, conflict } => {
                // Id 0 is never handed out: a begin refused before numbering the transition.
                match id {
                    0 => write!(f, "a transition")?,
                    id => write!(f, "transition {id}")?,
                }
                write!(f, " of object {key:?} in bucket {bucket:?} refused: {conflict}")
            }
            MetaError::RecordExists { namespace, name } => {
                write!(f, "record {name:?} already exists in {namespace:?}")
            }
            MetaError::RecordChanged { namespace, name } => write!(
                f,
                "record {name:?} in {namespace:?} was changed by another meta while this \
                 operation ran; nothing was written: ask again"
            ),
            MetaError::NoSuchNamespace { namespace } => write!(
                f,
                "no record namespace {namespace:?} (known: {})",
                crate::store::GATEWAY_NAMESPACES.join(", ")
            ),
        }
    }
}

impl std::error::Error for MetaError {}
