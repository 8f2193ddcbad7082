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
//! - Full is not failed: ENOSPC/EDQUOT on a unit write answers `StoreError::Full`, removes the
//!   temp file and leaves the disk serving reads and deletes; a disk out of space or at or
//!   above its full ratio ([`Thresholds`], default 95% used) refuses new units (read-only).
//! - The filesystem is a parameter ([`Fs`]); [`FaultyFs`] injects faults in tests.
//!
//! [`lstor`]: the Lstor of a RAIDP disk (parity of its slots and a write journal);
//! [`raidp`]: a RAIDP disk's superchunk slots, written through its Lstor.
//!
//! Synchronous std IO: callers in async code use blocking tasks.

mod disk;
mod error;
pub mod format;
pub mod fs;
pub mod inventory;
pub mod lstor;
pub mod raidp;

pub use disk::{
    Capacity, CapacityState, Disk, ListedUnit, Result, ScrubProgress, ScrubReport, SharedWrite,
    Thresholds, UnitCheck, UnitInfo, UnitReader, UnitWriter, Usage, WholeSegments, DISK_MARKER,
    DISK_MARKER_FILE, FANOUT_DIRS, FULL_HOLD_MS, STAGE_BYTES, USAGE_RESCAN,
};
pub use error::StoreError;
pub use format::{ChecksumKind, FORMAT_VERSION, MAX_UNIT_BYTES, SEGMENT_BYTES};
pub use fs::{FaultyFs, Fs, FsFile, FsOp, RealFs, Space, DIRECT_ALIGN};
pub use inventory::Inventory;
pub use weft_wire::key::{UnitIndex, UnitKey};
