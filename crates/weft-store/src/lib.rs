//! weft-store: node-local storage of units as files on disks.
//!
//! A [`Disk`] is a directory. Each unit is one immutable file: a versioned header with a
//! crc32c per 64 KiB segment, then the data (byte-level format: docs/store-format.md).
//!
//! Invariants kept by this crate:
//! - Atomic create: a unit is visible only when complete and durable (temp file, fsync,
//!   no-replace rename, directory fsync).
//! - Verified reads: every byte returned was covered by a checksum checked during that call;
//!   range reads touch only the segments they need, so repair reads stay small.
//! - Sticky failure: after a failed create, write, fsync, rename or remove a disk refuses all work
//!   until reopened.
//! - The filesystem is a parameter ([`Fs`]); [`FaultyFs`] injects faults in tests.
//!
//! Synchronous std IO: callers in async code use blocking tasks.

mod disk;
mod error;
pub mod format;
pub mod fs;
pub mod inventory;
mod key;

pub use disk::{
    Disk, ListedUnit, Result, ScrubProgress, ScrubReport, UnitCheck, UnitInfo, UnitWriter, Usage,
    DISK_MARKER, DISK_MARKER_FILE, FANOUT_DIRS,
};
pub use error::StoreError;
pub use format::{ChecksumKind, FORMAT_VERSION, MAX_UNIT_BYTES, SEGMENT_BYTES};
pub use fs::{FaultyFs, Fs, FsFile, FsOp, RealFs};
pub use inventory::Inventory;
pub use key::{UnitIndex, UnitKey};
