//! The one error type of weft-store. Every variant names the disk (its directory) and, where
//! there is one, the unit, so a log line says where to look.
//!
//! Invariants:
//! - `Io` from a mutating call (create, write, fsync, rename, remove) means the disk has just entered
//!   the failed state; every later call on it returns `DiskFailed` until `Disk::open` again.
//! - `Io` from a read leaves the disk usable: reading does not dirty the page cache.
//! - `Full` (no space or quota: ENOSPC, EDQUOT, or the disk at or above its full ratio) is not
//!   a disk failure: the unit was not stored, its temp file was removed, and the disk keeps
//!   serving reads and deletes. It is read-only until a later capacity check finds space.

use std::{fmt, io, path::PathBuf};

use weft_wire::key::UnitKey;

/// Why a store operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// No unit with this key on this disk.
    NotFound { dir: PathBuf, key: UnitKey },
    /// A unit with this key exists; units are immutable, store a new generation instead.
    AlreadyExists { dir: PathBuf, key: UnitKey },
    /// The requested byte range is not inside the unit.
    OutOfRange { dir: PathBuf, key: UnitKey, offset: u64, len_bytes: u64, unit_bytes: u64 },
    /// A segment's data does not match its stored checksum.
    Corrupt { dir: PathBuf, key: UnitKey, segment: u64 },
    /// The unit file's header is not a valid version-1 header (or names another unit).
    BadHeader { dir: PathBuf, key: UnitKey, reason: String },
    /// The unit file is not as long as its header says (truncated or extended).
    BadFileLength { dir: PathBuf, key: UnitKey, expected_bytes: u64, actual_bytes: u64 },
    /// A unit writer was given more or fewer bytes than the length it was created with.
    LengthMismatch { dir: PathBuf, key: UnitKey, expected_bytes: u64, written_bytes: u64 },
    /// The unit is larger than `MAX_UNIT_BYTES`.
    TooLarge { dir: PathBuf, key: UnitKey, len_bytes: u64, max_bytes: u64 },
    /// The directory holds a disk layout this build does not understand.
    UnsupportedDisk { dir: PathBuf, reason: String },
    /// An earlier create, write, fsync, rename or remove failed; the disk refuses all work
    /// until reopened.
    DiskFailed { dir: PathBuf, cause: String },
    /// The unit was not stored because the disk is full (`reason`: the ENOSPC / EDQUOT the
    /// filesystem returned, or the used ratio at or above the full ratio). Not a failure: the
    /// disk stays usable for reads and deletes; store the unit on another disk.
    Full { dir: PathBuf, key: UnitKey, reason: String },
    /// A filesystem call failed. `key` is the unit concerned, if any.
    Io { dir: PathBuf, key: Option<UnitKey>, op: &'static str, path: PathBuf, source: io::Error },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound { dir, key } => {
                write!(f, "disk {}: unit {key} not found", dir.display())
            }
            StoreError::AlreadyExists { dir, key } => write!(
                f,
                "disk {}: unit {key} already exists (units are immutable: store a new generation)",
                dir.display()
            ),
            StoreError::OutOfRange { dir, key, offset, len_bytes, unit_bytes } => write!(
                f,
                "disk {}: unit {key}: range {offset}+{len_bytes} is beyond the unit's {unit_bytes} bytes",
                dir.display()
            ),
            StoreError::Corrupt { dir, key, segment } => write!(
                f,
                "disk {}: unit {key}: segment {segment} does not match its checksum",
                dir.display()
            ),
            StoreError::BadHeader { dir, key, reason } => {
                write!(f, "disk {}: unit {key}: bad header: {reason}", dir.display())
            }
            StoreError::BadFileLength { dir, key, expected_bytes, actual_bytes } => write!(
                f,
                "disk {}: unit {key}: file is {actual_bytes} bytes, its header says {expected_bytes}",
                dir.display()
            ),
            StoreError::LengthMismatch { dir, key, expected_bytes, written_bytes } => write!(
                f,
                "disk {}: unit {key}: created with {expected_bytes} bytes, given {written_bytes}",
                dir.display()
            ),
            StoreError::TooLarge { dir, key, len_bytes, max_bytes } => write!(
                f,
                "disk {}: unit {key}: {len_bytes} bytes exceeds the maximum unit size {max_bytes}",
                dir.display()
            ),
            StoreError::UnsupportedDisk { dir, reason } => {
                write!(f, "disk {}: unsupported disk layout: {reason}", dir.display())
            }
            StoreError::DiskFailed { dir, cause } => write!(
                f,
                "disk {}: refusing work after an earlier IO failure ({cause}); reopen the disk",
                dir.display()
            ),
            StoreError::Full { dir, key, reason } => write!(
                f,
                "disk {}: unit {key}: disk full ({reason}); the disk is read-only until space \
                 is freed: store the unit elsewhere",
                dir.display()
            ),
            StoreError::Io { dir, key, op, path, source } => {
                write!(f, "disk {}: ", dir.display())?;
                if let Some(key) = key {
                    write!(f, "unit {key}: ")?;
                }
                write!(f, "{op} {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
