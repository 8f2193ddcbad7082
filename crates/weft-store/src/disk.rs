//! A disk: one directory holding unit files, with atomic create, verified range reads, scrub,
//! and a sticky failed state.
//!
//! Layout of a disk directory (see docs/store-format.md):
//! `weft-disk` (layout marker), `tmp/` (files being written), `units/<xx>/<unit file name>`,
//! where `<xx>` is [`UnitKey::fanout`].
//!
//! Invariants:
//! - A unit file is visible under `units/` only once complete: header and data are written to
//!   `tmp/`, fsynced, then moved into place without replacing anything, and the directory is
//!   fsynced. A reader never sees a partial unit; after a crash a unit is whole or absent.
//! - A unit file is written in whole aligned blocks ([`DIRECT_ALIGN`]) through a stage of at
//!   most [`STAGE_BYTES`], to a file opened with O_DIRECT where the filesystem takes it
//!   (`Fs::create_new_direct`): no copy into the page cache. Units of at most
//!   [`BUFFERED_UNIT_BYTES`] are written the same way to a plain file (their reads soon
//!   after find them in the page cache). Its first aligned blocks (the
//!   header's place) are written last, with the header; a padded tail is cut back to the
//!   unit's exact length before the fsync.
//! - A unit's data may reach the device early (every stage write on a direct file; on a plain
//!   one, writes of at least `WRITEBACK_HINT_BYTES` start their writeback at once,
//!   sync_file_range without waiting) but it is durable only through `UnitWriter::finish`'s
//!   fsync, which reports any error of that early writeback too (the kernel keeps it for the
//!   file's next fsync).
//! - Units are immutable. A key names at most one file; storing an existing key fails with
//!   `AlreadyExists` (a rewrite is a new generation).
//! - Every byte returned by a read lies in a segment whose checksum was verified by that read.
//!   The one exception is [`UnitReader::whole_segments`], which hands out a file descriptor
//!   and the stored checksums of whole segments so their bytes can be moved inside the kernel
//!   (sendfile): whoever receives those bytes verifies them against those checksums.
//! - After any failed create, write, fsync, rename or remove, every call returns `DiskFailed`
//!   until the disk is reopened. Why: after a failed fsync, Linux may mark the dirty pages
//!   clean and drop the error, so what the page cache and the device hold is unknown; retrying
//!   could report success for data that never reached the device ("fsyncgate"; redb's sticky
//!   `PreviousIo`). Reopening is the point where the operator (or the node) decides the disk
//!   is trustworthy; open then removes leftovers in `tmp/`, and every read still verifies.
//! - Running out of space is not a failure. ENOSPC or EDQUOT while creating, writing, fsyncing
//!   or linking a unit's temp file answers `Full`, removes the temp file and leaves the disk
//!   healthy for reads and deletes (the error concerns that one file, which is discarded: no
//!   other data's fate is unknown). The disk is then read-only: creates answer `Full` for at
//!   least [`FULL_HOLD_MS`] and until a capacity check finds the filesystem below its full
//!   ratio. A disk at or above its full ratio (or with no free inode) is read-only too, so
//!   the last few percent stay free for what must still write (deletes, the filesystem's own
//!   metadata). ENOSPC from the final directory fsync, after the unit became visible, still
//!   fails the disk: that unit's durability is unknown.
//! - [`Disk::usage`] is counted, not scanned, between scans at most [`USAGE_RESCAN`] apart:
//!   `finish` adds each unit it makes visible and `delete` takes off each it removes, so a
//!   heartbeat a second costs no listing of every unit file (it cost the nodes a third of
//!   their CPU under S3 puts). A rescan corrects what changed behind the disk's back (a file
//!   removed by hand). A unit finished or deleted while a rescan lists the files counts as
//!   its last state, whether or not the listing saw it (by key: never twice, never
//!   missed); one rescan runs at a time, and a wipe during one leaves the count to the next.
//! - `tmp/` holds only files of writes in progress, so `Disk::open` deletes everything in it:
//!   those writes cannot complete once their process is gone. Hence: one open `Disk` (and its
//!   clones) per directory at a time.

use std::{
    collections::HashMap,
    mem::MaybeUninit,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime},
};
use weft_wire::key::UnitKey;

use crate::{
    error::StoreError,
    format::{
        decode_fixed, header_bytes, segment_count, ChecksumKind, Header, FIXED_HEADER_BYTES,
        FORMAT_VERSION, MAX_UNIT_BYTES, SEGMENT_BYTES,
    },
    fs::{Fs, FsFile, RealFs, Space, DIRECT_ALIGN},
};

/// Result of this crate's operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Name of the layout marker file at the top of a disk directory.
pub const DISK_MARKER_FILE: &str = "weft-disk";
/// A file whose presence (its text the cause) keeps a disk failed across restarts: a drill's
/// failure (`weft disk fail`, [`Disk::drill_fail`]) until [`Disk::drill_replace`].
pub const DRILL_FAILED_FILE: &str = "drill-failed";
/// Contents of the layout marker for the layout this build writes and reads.
pub const DISK_MARKER: &str = "weft-store disk layout 1\n";
/// Number of fan-out directories under `units/` (two hex digits).
pub const FANOUT_DIRS: u32 = 256;

/// How long a disk that hit ENOSPC or EDQUOT stays read-only at least, whatever statvfs says
/// (quotas and inode exhaustion do not show in the used ratio): a minute, so a full disk is
/// not probed by a failing write at every request, yet space freed is used again soon.
pub const FULL_HOLD_MS: u64 = 60_000;

/// The used ratios at which a disk is reported nearfull and turns full (read-only), as in
/// Ceph: 85% and 95% by default. The ratio is `df`'s: used / (used + free to unprivileged).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    nearfull_ratio: f64,
    full_ratio: f64,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds { nearfull_ratio: 0.85, full_ratio: 0.95 }
    }
}

impl Thresholds {
    /// Checks `0 ≤ nearfull_ratio ≤ full_ratio ≤ 1`.
    pub fn new(nearfull_ratio: f64, full_ratio: f64) -> Result<Thresholds, String> {
        let in_range = |r: f64| r.is_finite() && (0.0..=1.0).contains(&r);
        if !in_range(nearfull_ratio) || !in_range(full_ratio) {
            return Err(format!(
                "the nearfull ratio ({nearfull_ratio}) and the full ratio ({full_ratio}) must \
                 be fractions between 0 and 1, like 0.85 and 0.95"
            ));
        }
        if nearfull_ratio > full_ratio {
            return Err(format!(
                "the nearfull ratio ({nearfull_ratio}) must not exceed the full ratio \
                 ({full_ratio})"
            ));
        }
        Ok(Thresholds { nearfull_ratio, full_ratio })
    }

    /// Used ratio at which a disk is reported nearfull.
    pub fn nearfull_ratio(&self) -> f64 {
        self.nearfull_ratio
    }

    /// Used ratio at which a disk turns full (read-only).
    pub fn full_ratio(&self) -> f64 {
        self.full_ratio
    }
}

/// How full a disk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, PartialOrd, Ord)]
pub enum CapacityState {
    /// Below the nearfull ratio.
    #[default]
    Ok,
    /// At or above the nearfull ratio: still writable, reported.
    Nearfull,
    /// At or above the full ratio, no free inode, or ENOSPC/EDQUOT seen recently: read-only.
    Full,
}

/// A disk's capacity now ([`Disk::capacity`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Capacity {
    /// Bytes still writable (statvfs `f_bavail`); `None` when statvfs failed.
    pub free_bytes: Option<u64>,
    /// Size of the filesystem; `None` when statvfs failed.
    pub total_bytes: Option<u64>,
    pub state: CapacityState,
    /// Why the disk is nearfull or full.
    pub reason: Option<String>,
}

/// The disk hit ENOSPC or EDQUOT.
#[derive(Debug)]
struct FullMark {
    since: Instant,
    reason: String,
}

/// Whether an IO error means no space (or no quota) is left.
fn is_no_space(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || error.kind() == std::io::ErrorKind::StorageFull
        || error.kind() == std::io::ErrorKind::QuotaExceeded
}

/// The state `space` puts a disk in under `thresholds`, with the reason when not ok.
fn state_of(space: &Space, thresholds: &Thresholds) -> (CapacityState, Option<String>) {
    let ratio = space.used_ratio();
    let percent = ratio * 100.0;
    if space.free_inodes == Some(0) {
        (CapacityState::Full, Some("no free inode left on the filesystem".into()))
    } else if ratio >= thresholds.full_ratio {
        let reason = format!(
            "filesystem {percent:.1}% used, at or above the full ratio {}",
            thresholds.full_ratio
        );
        (CapacityState::Full, Some(reason))
    } else if ratio >= thresholds.nearfull_ratio {
        let reason = format!(
            "filesystem {percent:.1}% used, at or above the nearfull ratio {}",
            thresholds.nearfull_ratio
        );
        (CapacityState::Nearfull, Some(reason))
    } else {
        (CapacityState::Ok, None)
    }
}

/// What a disk knows about one stored unit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnitInfo {
    pub key: UnitKey,
    /// Length of the unit's data.
    pub len_bytes: u64,
    /// Same as `key.generation()`.
    pub generation: u64,
    pub segment_bytes: u32,
    pub segment_count: u64,
    pub checksum_kind: ChecksumKind,
    pub format_version: u16,
    /// Length of the file: header plus data.
    pub file_bytes: u64,
}

/// One unit of a detailed listing ([`Disk::list_detailed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedUnit {
    pub key: UnitKey,
    /// Length of the file: header plus data.
    pub file_bytes: u64,
    /// The file's modification time: when the unit's last byte was written, just before it
    /// became visible (the file is renamed into place, which keeps it, and never written
    /// again).
    pub modified: SystemTime,
}

/// Units on a disk and the bytes their files take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Usage {
    pub units: u64,
    pub file_bytes: u64,
}

/// Where a scrub is; passed to the progress callback before each unit.
#[derive(Clone, Copy, Debug)]
pub struct ScrubProgress {
    pub unit: UnitKey,
    pub units_checked: u64,
    pub units_total: u64,
    pub bytes_checked: u64,
}

/// What checking one unit found ([`Disk::scrub_unit`]).
#[derive(Debug)]
pub enum UnitCheck {
    /// Every segment was read; `corrupt_segments` lists those whose checksum did not match
    /// (empty: the unit is intact). `bytes`: data bytes read.
    Checked { bytes: u64, corrupt_segments: Vec<u64> },
    /// The unit could not be checked (bad header, wrong length, read error).
    Unreadable(StoreError),
    /// The unit was deleted before it could be checked.
    Gone,
}

/// What a scrub found.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ScrubReport {
    /// Units whose every segment was read (corrupt or not).
    pub checked: u64,
    /// Data bytes read and verified.
    pub bytes_checked: u64,
    /// Every segment whose checksum did not match, in key then segment order.
    pub corrupt: Vec<(UnitKey, u64)>,
    /// Units that could not be checked at all (bad header, wrong length, read errors).
    pub unreadable: Vec<(UnitKey, StoreError)>,
    /// Files under `units/` that are not unit files of their directory.
    pub unrecognised: Vec<PathBuf>,
}

/// One disk directory. Cheap to clone; clones share the failed state. Blocking calls.
#[derive(Clone, Debug)]
pub struct Disk {
    inner: Arc<DiskInner>,
}

#[derive(Debug)]
struct DiskInner {
    dir: PathBuf,
    units_dir: PathBuf,
    tmp_dir: PathBuf,
    fs: Arc<dyn Fs>,
    /// Why the disk refuses work, once something failed.
    failed: Mutex<Option<String>>,
    /// When and why the disk last ran out of space (cleared by a capacity check).
    full: Mutex<Option<FullMark>>,
    thresholds: Mutex<Thresholds>,
    /// Distinguishes temp names of this open from any other.
    instance: u64,
    next_nonce: AtomicU64,
    removed_temp_files: u64,
    usage: Mutex<UsageCount>,
    /// Held by the one [`Disk::usage`] rescan running.
    usage_scan: Mutex<()>,
}

/// Longest time [`Disk::usage`] answers from its count before it lists the units again.
pub const USAGE_RESCAN: Duration = Duration::from_secs(60);

/// [`Disk::usage`]'s running count.
#[derive(Debug)]
struct UsageCount {
    /// The count and when its scan ended; None until the first scan (and after a wipe).
    counted: Option<(Usage, Instant)>,
    /// While a scan runs: the last state of each unit finished (its file bytes) or deleted
    /// (None) since it began, which replaces whatever the scan saw of that unit.
    during_scan: Option<HashMap<UnitKey, Option<u64>>>,
    /// Bumped when the count is dropped (a wipe, a delete of unknown size): a scan that
    /// began before does not store its result.
    generation: u64,
    /// Rescan interval ([`USAGE_RESCAN`]; tests shorten it).
    rescan: Duration,
}

impl Usage {
    /// This usage with `units` units and `bytes` bytes added (negative: taken off).
    fn plus(self, units: i64, bytes: i64) -> Usage {
        Usage {
            units: self.units.saturating_add_signed(units),
            file_bytes: self.file_bytes.saturating_add_signed(bytes),
        }
    }
}

impl UsageCount {
    /// Unit `key` made visible with `file_bytes`.
    fn finished(&mut self, key: UnitKey, file_bytes: u64) {
        if let Some((usage, _)) = &mut self.counted {
            *usage = usage.plus(1, file_bytes as i64);
        }
        if let Some(changed) = &mut self.during_scan {
            changed.insert(key, Some(file_bytes));
        }
    }

    /// Unit `key` removed; its file's bytes when known (else the count is dropped).
    fn deleted(&mut self, key: UnitKey, file_bytes: Option<u64>) {
        match (file_bytes, &mut self.counted) {
            (Some(bytes), Some((usage, _))) => *usage = usage.plus(-1, -(bytes as i64)),
            (Some(_), None) => {}
            (None, _) => self.drop_count(),
        }
        if let Some(changed) = &mut self.during_scan {
            changed.insert(key, None);
        }
    }

    /// Forgets the count: the next [`Disk::usage`] lists the units again.
    fn drop_count(&mut self) {
        self.counted = None;
        self.generation += 1;
    }

    /// The count, unless it is older than the rescan interval (or there is none).
    fn fresh(&self) -> Option<Usage> {
        self.counted.and_then(|(usage, at)| (at.elapsed() < self.rescan).then_some(usage))
    }
}

fn is_not_found(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::NotFound
}

impl Disk {
    /// Opens (creating if needed) the disk at `dir` on the real filesystem.
    pub fn open(dir: impl AsRef<Path>) -> Result<Disk> {
        Disk::open_with(dir, Arc::new(RealFs))
    }

    /// Opens the disk at `dir` through `fs`. Creates the directory, its marker, `tmp/` and the
    /// fan-out directories if missing; refuses a non-empty directory that is not a weft disk;
    /// removes every file left in `tmp/` by writes that did not finish.
    pub fn open_with(dir: impl AsRef<Path>, fs: Arc<dyn Fs>) -> Result<Disk> {
        let dir = dir.as_ref().to_path_buf();
        let units_dir = dir.join("units");
        let tmp_dir = dir.join("tmp");
        let io = |op: &'static str, path: &Path, source| StoreError::Io {
            dir: dir.clone(),
            key: None,
            op,
            path: path.to_path_buf(),
            source,
        };
        fs.create_dir_all(&dir).map_err(|e| io("create directory", &dir, e))?;
        let marker = dir.join(DISK_MARKER_FILE);
        let has_marker = match fs.file_len(&marker) {
            Ok(_) => true,
            Err(e) if is_not_found(&e) => false,
            Err(e) => return Err(io("stat", &marker, e)),
        };
        if has_marker {
            let file = fs.open_read(&marker).map_err(|e| io("open", &marker, e))?;
            let len = file.len_bytes().map_err(|e| io("stat", &marker, e))?;
            let mut text = vec![0u8; len.min(256) as usize];
            file.read_exact_at(&mut text, 0).map_err(|e| io("read", &marker, e))?;
            if text != DISK_MARKER.as_bytes() {
                return Err(StoreError::UnsupportedDisk {
                    dir,
                    reason: format!(
                        "marker {DISK_MARKER_FILE} says {:?}, expected {DISK_MARKER:?}",
                        String::from_utf8_lossy(&text)
                    ),
                });
            }
        } else {
            let entries = fs.list_dir(&dir).map_err(|e| io("list", &dir, e))?;
            if let Some(other) = entries.iter().find(|name| *name != "tmp" && *name != "units") {
                return Err(StoreError::UnsupportedDisk {
                    dir: dir.clone(),
                    reason: format!(
                        "directory is not empty ({other:?}) and has no {DISK_MARKER_FILE} marker; \
                         refusing to use it"
                    ),
                });
            }
        }
        fs.create_dir_all(&tmp_dir).map_err(|e| io("create directory", &tmp_dir, e))?;
        for fanout in 0..FANOUT_DIRS {
            let path = units_dir.join(format!("{fanout:02x}"));
            fs.create_dir_all(&path).map_err(|e| io("create directory", &path, e))?;
        }
        fs.sync_dir(&units_dir).map_err(|e| io("fsync directory", &units_dir, e))?;
        let mut removed_temp_files = 0;
        let leftovers = fs.list_dir(&tmp_dir).map_err(|e| io("list", &tmp_dir, e))?;
        for name in leftovers {
            let path = tmp_dir.join(name);
            fs.remove_file(&path).map_err(|e| io("remove stale temp file", &path, e))?;
            removed_temp_files += 1;
        }
        if removed_temp_files > 0 {
            fs.sync_dir(&tmp_dir).map_err(|e| io("fsync directory", &tmp_dir, e))?;
        }
        if !has_marker {
            let temp = tmp_dir.join(DISK_MARKER_FILE);
            let file = fs.create_new(&temp).map_err(|e| io("create", &temp, e))?;
            file.write_all_at(DISK_MARKER.as_bytes(), 0).map_err(|e| io("write", &temp, e))?;
            file.sync_all().map_err(|e| io("fsync", &temp, e))?;
            fs.rename_no_replace(&temp, &marker).map_err(|e| io("rename", &marker, e))?;
        }
        fs.sync_dir(&dir).map_err(|e| io("fsync directory", &dir, e))?;
        let instance = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 32);
        let drilled = std::fs::read_to_string(dir.join(DRILL_FAILED_FILE)).ok();
        Ok(Disk {
            inner: Arc::new(DiskInner {
                dir,
                units_dir,
                tmp_dir,
                fs,
                failed: Mutex::new(drilled),
                full: Mutex::new(None),
                thresholds: Mutex::new(Thresholds::default()),
                instance,
                next_nonce: AtomicU64::new(0),
                removed_temp_files,
                usage: Mutex::new(UsageCount {
                    counted: None,
                    during_scan: None,
                    generation: 0,
                    rescan: USAGE_RESCAN,
                }),
                usage_scan: Mutex::new(()),
            }),
        })
    }

    /// The disk's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// How many stale temp files `open` removed.
    pub fn removed_temp_files(&self) -> u64 {
        self.inner.removed_temp_files
    }

    /// Why the disk refuses work, if it does.
    pub fn failure(&self) -> Option<String> {
        self.inner.failed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A drill: the disk dies. Everything on it (units, RAIDP slots, temp files) is removed,
    /// it turns failed with `cause`, and stays failed across restarts until
    /// [`Disk::drill_replace`].
    pub fn drill_fail(&self, cause: &str) -> Result<()> {
        let dir = self.inner.dir.clone();
        let io = |op, path: &Path, source| self.drill_io(op, path, source);
        let marker = dir.join(DRILL_FAILED_FILE);
        std::fs::write(&marker, cause).map_err(|e| io("write", &marker, e))?;
        *self.inner.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause.to_owned());
        self.wipe()
    }

    /// A drill: an empty disk takes the failed one's place (same directory). Its content is
    /// removed again, the failure cleared.
    pub fn drill_replace(&self) -> Result<()> {
        self.wipe()?;
        let dir = self.inner.dir.clone();
        let io = |op, path: &Path, source| self.drill_io(op, path, source);
        let fs = &self.inner.fs;
        fs.create_dir_all(&self.inner.tmp_dir)
            .map_err(|e| io("create directory", &self.inner.tmp_dir, e))?;
        for fanout in 0..FANOUT_DIRS {
            let path = self.inner.units_dir.join(format!("{fanout:02x}"));
            fs.create_dir_all(&path).map_err(|e| io("create directory", &path, e))?;
        }
        let marker = dir.join(DRILL_FAILED_FILE);
        match std::fs::remove_file(&marker) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(io("remove", &marker, e)),
        }
        fs.sync_dir(&dir).map_err(|e| io("fsync directory", &dir, e))?;
        *self.inner.failed.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self.inner.full.lock().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
    }

    /// The error of a drill's filesystem call.
    fn drill_io(&self, op: &'static str, path: &Path, source: std::io::Error) -> StoreError {
        StoreError::Io {
            dir: self.inner.dir.clone(),
            key: None,
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Removes the disk's units, temp files and RAIDP slots (its marker stays).
    fn wipe(&self) -> Result<()> {
        self.usage_count().drop_count();
        let dir = &self.inner.dir;
        for sub in [&self.inner.units_dir, &self.inner.tmp_dir, &dir.join("superchunks")] {
            match std::fs::remove_dir_all(sub) {
                Ok(()) => {}
                Err(e) if is_not_found(&e) => {}
                Err(source) => return Err(self.drill_io("remove", sub, source)),
            }
        }
        Ok(())
    }

    /// Sets the ratios at which the disk is nearfull and full (default: 0.85 and 0.95).
    pub fn set_thresholds(&self, thresholds: Thresholds) {
        *self.inner.thresholds.lock().unwrap_or_else(|p| p.into_inner()) = thresholds;
    }

    /// The ratios at which the disk is nearfull and full.
    pub fn thresholds(&self) -> Thresholds {
        *self.inner.thresholds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The disk's free and total space and whether it is nearfull or full (statvfs of its
    /// filesystem). A disk that hit ENOSPC or EDQUOT stays full for [`FULL_HOLD_MS`], and then
    /// until a check finds the filesystem below the full ratio: that check clears the mark.
    /// Works on a failed disk too (it only asks the filesystem). A statvfs error reports no
    /// sizes and judges by the ENOSPC mark alone.
    pub fn capacity(&self) -> Capacity {
        let thresholds = self.thresholds();
        let (free_bytes, total_bytes, mut state, mut reason) =
            match self.inner.fs.space(&self.inner.dir) {
                Ok(space) => {
                    let (state, reason) = state_of(&space, &thresholds);
                    (Some(space.free_bytes), Some(space.total_bytes), state, reason)
                }
                Err(_) => (None, None, CapacityState::Ok, None),
            };
        let mut mark = self.inner.full.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(full) = mark.as_ref() {
            let held = full.since.elapsed() < Duration::from_millis(FULL_HOLD_MS);
            if held || state == CapacityState::Full {
                if state != CapacityState::Full {
                    reason = Some(full.reason.clone());
                }
                state = CapacityState::Full;
            } else {
                *mark = None;
            }
        }
        Capacity { free_bytes, total_bytes, state, reason }
    }

    /// Path of a unit's file.
    pub fn unit_path(&self, key: &UnitKey) -> PathBuf {
        self.inner.units_dir.join(key.fanout()).join(key.file_name())
    }

    fn check(&self) -> Result<()> {
        match self.failure() {
            Some(cause) => Err(StoreError::DiskFailed { dir: self.inner.dir.clone(), cause }),
            None => Ok(()),
        }
    }

    /// A mutating call failed: the disk enters the failed state. Returns the error for it.
    fn fail(
        &self,
        op: &'static str,
        key: Option<UnitKey>,
        path: &Path,
        source: std::io::Error,
    ) -> StoreError {
        let mut failed = self.inner.failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_none() {
            *failed = Some(format!("{op} {}: {source}", path.display()));
        }
        StoreError::Io { dir: self.inner.dir.clone(), key, op, path: path.to_path_buf(), source }
    }

    /// A write of `key` found no space: the disk turns full (read-only), not failed.
    fn no_space(
        &self,
        op: &'static str,
        key: UnitKey,
        path: &Path,
        source: std::io::Error,
    ) -> StoreError {
        let reason = format!("{op} {}: {source}", path.display());
        let mut mark = self.inner.full.lock().unwrap_or_else(|p| p.into_inner());
        *mark = Some(FullMark { since: Instant::now(), reason: reason.clone() });
        StoreError::Full { dir: self.inner.dir.clone(), key, reason }
    }

    /// A mutating call on the temp file of `key` failed: `Full` when it found no space (the
    /// disk stays healthy), else the disk fails.
    fn write_failed(
        &self,
        op: &'static str,
        key: UnitKey,
        path: &Path,
        source: std::io::Error,
    ) -> StoreError {
        if is_no_space(&source) {
            self.no_space(op, key, path, source)
        } else {
            self.fail(op, Some(key), path, source)
        }
    }

    /// A reading call failed: the disk stays usable.
    fn io(
        &self,
        op: &'static str,
        key: UnitKey,
        path: &Path,
        source: std::io::Error,
    ) -> StoreError {
        StoreError::Io {
            dir: self.inner.dir.clone(),
            key: Some(key),
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Stores `bytes` as unit `key`. Durable when this returns `Ok`.
    pub fn put(&self, key: UnitKey, bytes: &[u8]) -> Result<UnitInfo> {
        let mut writer = self.create(key, bytes.len() as u64)?;
        writer.write_all(bytes)?;
        writer.finish()
    }

    /// Starts storing unit `key` of exactly `len_bytes` bytes, to be given with
    /// [`UnitWriter::write_all`] and committed with [`UnitWriter::finish`]. Nothing is visible
    /// until `finish` returns `Ok`; dropping the writer abandons the unit.
    ///
    /// A full disk (see [`Disk::capacity`]) answers `Full` and writes nothing.
    pub fn create(&self, key: UnitKey, len_bytes: u64) -> Result<UnitWriter> {
        self.check()?;
        let dir = self.inner.dir.clone();
        if len_bytes > MAX_UNIT_BYTES {
            return Err(StoreError::TooLarge { dir, key, len_bytes, max_bytes: MAX_UNIT_BYTES });
        }
        let capacity = self.capacity();
        if capacity.state == CapacityState::Full {
            let reason = capacity.reason.unwrap_or_else(|| "disk full".into());
            return Err(StoreError::Full { dir, key, reason });
        }
        let path = self.unit_path(&key);
        match self.inner.fs.file_len(&path) {
            Ok(_) => return Err(StoreError::AlreadyExists { dir, key }),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(self.io("stat", key, &path, e)),
        }
        let nonce = self.inner.next_nonce.fetch_add(1, Ordering::Relaxed);
        let tmp_path =
            self.inner.tmp_dir.join(format!("{key}.{:016x}-{nonce}.tmp", self.inner.instance));
        // Small units go through the page cache: their copy is cheap, and the reads that
        // follow a write (small objects are read whole, soon) find them there instead of
        // waiting on the device; large ones skip it (docs/store-format.md, "Creating a unit").
        let created = match len_bytes <= BUFFERED_UNIT_BYTES {
            true => self.inner.fs.create_new(&tmp_path),
            false => self.inner.fs.create_new_direct(&tmp_path),
        };
        let file = created.map_err(|e| self.write_failed("create", key, &tmp_path, e))?;
        let header_bytes = header_bytes(len_bytes);
        let file_bytes = (header_bytes + len_bytes).next_multiple_of(DIRECT_ALIGN as u64);
        let mut stage = Stage::new(file_bytes.min(STAGE_BYTES as u64) as usize);
        stage.zeros(header_bytes as usize); // the header's place, written by `finish`
        Ok(UnitWriter {
            disk: self.clone(),
            key,
            len_bytes,
            header_bytes,
            written_bytes: 0,
            segment_checksum: 0,
            checksums: Vec::with_capacity(segment_count(len_bytes) as usize),
            file: Some(file),
            stage,
            head: None,
            tmp_path,
            settled: false,
            full: None,
            shared_tail: false,
        })
    }

    /// Opens a unit and checks its header and file length.
    fn open_unit(&self, key: UnitKey) -> Result<(Box<dyn FsFile>, Header)> {
        let dir = || self.inner.dir.clone();
        let path = self.unit_path(&key);
        let file = self.inner.fs.open_read(&path).map_err(|e| {
            if is_not_found(&e) {
                StoreError::NotFound { dir: dir(), key }
            } else {
                self.io("open", key, &path, e)
            }
        })?;
        let file_bytes = file.len_bytes().map_err(|e| self.io("stat", key, &path, e))?;
        let bad = |reason: String| StoreError::BadHeader { dir: dir(), key, reason };
        if file_bytes < FIXED_HEADER_BYTES as u64 + 4 {
            return Err(bad(format!("file is {file_bytes} bytes, shorter than any header")));
        }
        let mut fixed = [0u8; FIXED_HEADER_BYTES];
        file.read_exact_at(&mut fixed, 0).map_err(|e| self.io("read", key, &path, e))?;
        let fixed = decode_fixed(&fixed).map_err(bad)?;
        let expected_bytes = fixed.header_bytes + fixed.len_bytes;
        if fixed.header_bytes > file_bytes {
            return Err(StoreError::BadFileLength {
                dir: dir(),
                key,
                expected_bytes,
                actual_bytes: file_bytes,
            });
        }
        let mut bytes = vec![0u8; fixed.header_bytes as usize];
        file.read_exact_at(&mut bytes, 0).map_err(|e| self.io("read", key, &path, e))?;
        let header = Header::decode(&bytes).map_err(bad)?;
        if header.key != key {
            return Err(bad(format!("file holds unit {}", header.key)));
        }
        if file_bytes != expected_bytes {
            return Err(StoreError::BadFileLength {
                dir: dir(),
                key,
                expected_bytes,
                actual_bytes: file_bytes,
            });
        }
        Ok((file, header))
    }

    fn info(key: UnitKey, len_bytes: u64) -> UnitInfo {
        UnitInfo {
            key,
            len_bytes,
            generation: key.generation(),
            segment_bytes: SEGMENT_BYTES,
            segment_count: segment_count(len_bytes),
            checksum_kind: ChecksumKind::Crc32c,
            format_version: FORMAT_VERSION,
            file_bytes: header_bytes(len_bytes) + len_bytes,
        }
    }

    /// The unit's header information (header verified; data not read).
    pub fn stat(&self, key: UnitKey) -> Result<UnitInfo> {
        self.check()?;
        let (_, header) = self.open_unit(key)?;
        Ok(Disk::info(key, header.len_bytes))
    }

    /// Reads `len_bytes` bytes of unit `key` from `offset`.
    pub fn read(&self, key: UnitKey, offset: u64, len_bytes: usize) -> Result<Vec<u8>> {
        self.open_reader(key)?.read(offset, len_bytes)
    }

    /// Fills `buf` with bytes of unit `key` from `offset`. Reads and verifies only the
    /// segments that the range touches; `OutOfRange` if it does not lie inside the unit.
    /// On error, `buf` may hold some of the range.
    pub fn read_into(&self, key: UnitKey, offset: u64, buf: &mut [u8]) -> Result<()> {
        // SAFETY: `read_opened` writes only initialized bytes into the buffer, so it stays
        // initialized, as `buf`'s type promises its owner.
        let buf = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.check()?;
        let (file, header) = self.open_unit(key)?;
        self.read_opened(key, file.as_ref(), &header, offset, buf)
    }

    /// Opens unit `key` once for several reads: [`UnitReader::read`] reads and verifies as
    /// [`Disk::read`] does, without opening the file and decoding its header again.
    pub fn open_reader(&self, key: UnitKey) -> Result<UnitReader> {
        self.check()?;
        let (file, header) = self.open_unit(key)?;
        Ok(UnitReader { disk: self.clone(), key, file, header })
    }

    /// Reads and verifies `[offset, offset + buf.len())` of the opened unit `key` into
    /// memory that need not be initialized: every byte of `buf` is written (with verified
    /// bytes) when it returns `Ok`.
    fn read_opened(
        &self,
        key: UnitKey,
        file: &dyn FsFile,
        header: &Header,
        offset: u64,
        buf: &mut [MaybeUninit<u8>],
    ) -> Result<()> {
        let unit_bytes = header.len_bytes;
        let end = offset.checked_add(buf.len() as u64).filter(|&end| end <= unit_bytes);
        let Some(end) = end else {
            return Err(StoreError::OutOfRange {
                dir: self.inner.dir.clone(),
                key,
                offset,
                len_bytes: buf.len() as u64,
                unit_bytes,
            });
        };
        if buf.is_empty() {
            return Ok(());
        }
        let path = self.unit_path(&key);
        let segment_bytes = u64::from(SEGMENT_BYTES);
        let data_start = header_bytes(unit_bytes);
        let mut scratch = Vec::new();
        for segment in offset / segment_bytes..=(end - 1) / segment_bytes {
            let segment_start = segment * segment_bytes;
            let segment_end = (segment_start + segment_bytes).min(unit_bytes);
            let copy_start = offset.max(segment_start);
            let copy_end = end.min(segment_end);
            let dest = &mut buf[(copy_start - offset) as usize..(copy_end - offset) as usize];
            let whole = copy_start == segment_start && copy_end == segment_end;
            let data: &[u8] = if whole {
                file.read_exact_at_uninit(dest, data_start + segment_start)
                    .map_err(|e| self.io("read", key, &path, e))?;
                // SAFETY: read_exact_at_uninit returned Ok: it wrote all of `dest`.
                unsafe { crate::fs::assume_init_mut(dest) }
            } else {
                scratch.resize((segment_end - segment_start) as usize, 0);
                file.read_exact_at(&mut scratch, data_start + segment_start)
                    .map_err(|e| self.io("read", key, &path, e))?;
                &scratch
            };
            if weft_wire::checksum::crc32c(data) != header.checksums[segment as usize] {
                return Err(StoreError::Corrupt { dir: self.inner.dir.clone(), key, segment });
            }
            if !whole {
                let from = (copy_start - segment_start) as usize;
                let to = (copy_end - segment_start) as usize;
                for (slot, &byte) in dest.iter_mut().zip(&scratch[from..to]) {
                    slot.write(byte);
                }
            }
        }
        Ok(())
    }

    /// Deletes unit `key`; durable when this returns `Ok`.
    pub fn delete(&self, key: UnitKey) -> Result<()> {
        self.check()?;
        let path = self.unit_path(&key);
        // Its size, for the usage count (unknown: the next usage() lists the units again).
        let file_bytes = self.inner.fs.file_len(&path).ok();
        match self.inner.fs.remove_file(&path) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {
                return Err(StoreError::NotFound { dir: self.inner.dir.clone(), key })
            }
            Err(e) => return Err(self.fail("remove", Some(key), &path, e)),
        }
        self.usage_count().deleted(key, file_bytes);
        let parent = path.parent().expect("unit files live in a fan-out directory");
        self.inner
            .fs
            .sync_dir(parent)
            .map_err(|e| self.fail("fsync directory", Some(key), parent, e))
    }

    /// Unit files by key, and files under `units/` that are not unit files of their directory.
    fn scan(&self) -> Result<(Vec<UnitKey>, Vec<PathBuf>)> {
        let mut keys = Vec::new();
        let mut unrecognised = Vec::new();
        for fanout in 0..FANOUT_DIRS {
            let fanout = format!("{fanout:02x}");
            let dir = self.inner.units_dir.join(&fanout);
            let names = self.inner.fs.list_dir(&dir).map_err(|source| StoreError::Io {
                dir: self.inner.dir.clone(),
                key: None,
                op: "list",
                path: dir.clone(),
                source,
            })?;
            for name in names {
                match name.to_str().and_then(UnitKey::from_file_name) {
                    Some(key) if key.fanout() == fanout => keys.push(key),
                    _ => unrecognised.push(dir.join(name)),
                }
            }
        }
        keys.sort_unstable();
        unrecognised.sort_unstable();
        Ok((keys, unrecognised))
    }

    /// Every unit on the disk, sorted by key. Files that are not unit files are skipped
    /// (`scrub` reports them).
    pub fn list(&self) -> Result<Vec<UnitKey>> {
        self.check()?;
        Ok(self.scan()?.0)
    }

    /// Every unit on the disk with its file length and modification time, sorted by key.
    /// Units deleted between the directory scan and their stat are left out.
    pub fn list_detailed(&self) -> Result<Vec<ListedUnit>> {
        self.check()?;
        let mut out = Vec::new();
        for key in self.scan()?.0 {
            let path = self.unit_path(&key);
            match self.inner.fs.file_meta(&path) {
                Ok((file_bytes, modified)) => out.push(ListedUnit { key, file_bytes, modified }),
                Err(e) if is_not_found(&e) => {} // deleted since the scan
                Err(e) => return Err(self.io("stat", key, &path, e)),
            }
        }
        Ok(out)
    }

    /// Number of units and the bytes their files take (headers included): counted since the
    /// last scan, which is repeated when older than [`USAGE_RESCAN`] (see the invariants).
    pub fn usage(&self) -> Result<Usage> {
        self.check()?;
        if let Some(usage) = self.usage_count().fresh() {
            return Ok(usage);
        }
        let _one_scan = self.inner.usage_scan.lock().unwrap_or_else(|p| p.into_inner());
        let generation = {
            let mut count = self.usage_count();
            // Another caller may have scanned while this one waited.
            if let Some(usage) = count.fresh() {
                return Ok(usage);
            }
            count.during_scan = Some(HashMap::new());
            count.generation
        };
        let listed = self.list_detailed();
        let mut count = self.usage_count();
        let changed = count.during_scan.take().unwrap_or_default();
        let mut files: HashMap<UnitKey, u64> =
            listed?.into_iter().map(|unit| (unit.key, unit.file_bytes)).collect();
        for (key, state) in changed {
            match state {
                Some(file_bytes) => files.insert(key, file_bytes),
                None => files.remove(&key),
            };
        }
        let usage = Usage { units: files.len() as u64, file_bytes: files.values().sum() };
        if count.generation == generation {
            count.counted = Some((usage, Instant::now()));
        }
        Ok(usage)
    }

    /// Sets how often [`Disk::usage`] lists the units again (tests; [`USAGE_RESCAN`] else).
    pub fn set_usage_rescan(&self, every: Duration) {
        self.usage_count().rescan = every;
    }

    fn usage_count(&self) -> std::sync::MutexGuard<'_, UsageCount> {
        self.inner.usage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads and verifies every segment of every unit. `progress` is called before each unit
    /// (a caller that wants to throttle can sleep there). Units deleted during the scrub are
    /// skipped. Only listing errors and the failed state stop a scrub.
    pub fn scrub(&self, mut progress: impl FnMut(&ScrubProgress)) -> Result<ScrubReport> {
        self.check()?;
        let (keys, unrecognised) = self.scan()?;
        let mut report = ScrubReport { unrecognised, ..ScrubReport::default() };
        for &key in &keys {
            progress(&ScrubProgress {
                unit: key,
                units_checked: report.checked,
                units_total: keys.len() as u64,
                bytes_checked: report.bytes_checked,
            });
            match self.scrub_unit(key) {
                UnitCheck::Gone => {}
                UnitCheck::Unreadable(error) => report.unreadable.push((key, error)),
                UnitCheck::Checked { bytes, corrupt_segments } => {
                    report.checked += 1;
                    report.bytes_checked += bytes;
                    report.corrupt.extend(corrupt_segments.into_iter().map(|s| (key, s)));
                }
            }
        }
        Ok(report)
    }

    /// Reads and verifies every segment of one unit against the checksums in its header.
    pub fn scrub_unit(&self, key: UnitKey) -> UnitCheck {
        let (file, header) = match self.open_unit(key) {
            Ok(opened) => opened,
            Err(StoreError::NotFound { .. }) => return UnitCheck::Gone,
            Err(error) => return UnitCheck::Unreadable(error),
        };
        let data_start = header_bytes(header.len_bytes);
        let segment_bytes = u64::from(SEGMENT_BYTES);
        let mut scratch = vec![0u8; SEGMENT_BYTES as usize];
        let mut bytes = 0;
        let mut corrupt_segments = Vec::new();
        for (segment, &checksum) in header.checksums.iter().enumerate() {
            let start = segment as u64 * segment_bytes;
            let len = (header.len_bytes - start).min(segment_bytes) as usize;
            if let Err(e) = file.read_exact_at(&mut scratch[..len], data_start + start) {
                return UnitCheck::Unreadable(self.io("read", key, &self.unit_path(&key), e));
            }
            bytes += len as u64;
            if weft_wire::checksum::crc32c(&scratch[..len]) != checksum {
                corrupt_segments.push(segment as u64);
            }
        }
        UnitCheck::Checked { bytes, corrupt_segments }
    }
}

/// Most bytes of a unit a writer holds before writing them: the file is written in whole
/// stages (the last one padded, then cut to length), so every write is aligned for the
/// direct file it goes to ([`Fs::create_new_direct`]). At least the largest header rounded
/// up to [`DIRECT_ALIGN`], so the header's place lies in the first stage.
pub const STAGE_BYTES: usize = 1 << 20;
const _: () = assert!(
    (FIXED_HEADER_BYTES as u64 + 4 * MAX_UNIT_BYTES.div_ceil(SEGMENT_BYTES as u64) + 4)
        .next_multiple_of(DIRECT_ALIGN as u64)
        <= STAGE_BYTES as u64
);

/// An aligned buffer of file bytes to write at `at` ([`DIRECT_ALIGN`] for its address and
/// capacity): `buf[start..]` holds them, `start` aligning the first.
#[derive(Debug)]
struct Stage {
    buf: Vec<u8>,
    start: usize,
    capacity: usize,
    /// The file offset of the stage's first byte (a multiple of DIRECT_ALIGN).
    at: u64,
}

impl Stage {
    /// A stage of `capacity` bytes (rounded up to DIRECT_ALIGN), at file offset 0. Its bytes
    /// are not cleared: only what is pushed is ever read.
    fn new(capacity: usize) -> Stage {
        let capacity = capacity.next_multiple_of(DIRECT_ALIGN);
        let mut buf: Vec<u8> = Vec::with_capacity(capacity + DIRECT_ALIGN);
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
        buf.resize(start, 0);
        Stage { buf, start, capacity, at: 0 }
    }

    fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    fn room(&self) -> usize {
        self.capacity - self.len()
    }

    /// Appends as much of `bytes` as fits; returns how much did. Never reallocates (the
    /// capacity was reserved), so the buffer stays aligned.
    fn push(&mut self, bytes: &[u8]) -> usize {
        let taken = bytes.len().min(self.room());
        self.buf.extend_from_slice(&bytes[..taken]);
        taken
    }

    fn zeros(&mut self, count: usize) {
        assert!(count <= self.room(), "{count} zeros in a stage with room for {}", self.room());
        self.buf.resize(self.buf.len() + count, 0);
    }

    /// The staged bytes, zero-padded to a whole number of aligned blocks.
    fn padded(&mut self) -> &mut [u8] {
        let padded = self.len().next_multiple_of(DIRECT_ALIGN);
        self.buf.resize(self.start + padded, 0);
        &mut self.buf[self.start..]
    }

    /// Empties the stage, which then starts at file offset `at`.
    fn restart(&mut self, at: u64) {
        self.buf.truncate(self.start);
        self.at = at;
    }
}

/// Streams one unit onto a disk; checksums are computed as bytes arrive, so the caller never
/// needs the whole unit in memory. Created by [`Disk::create`].
///
/// The file is written through an aligned stage of at most [`STAGE_BYTES`]: the header's
/// place (zeros) and the first data bytes, written when the stage fills (all but the
/// aligned block holding the header, kept in `head`) or at `finish` (the header filled in,
/// the tail padded to an aligned block and the file then cut to its length).
#[derive(Debug)]
pub struct UnitWriter {
    disk: Disk,
    key: UnitKey,
    len_bytes: u64,
    header_bytes: u64,
    written_bytes: u64,
    /// crc32c of the bytes of the current, unfinished segment.
    segment_checksum: u32,
    checksums: Vec<u32>,
    file: Option<Box<dyn FsFile>>,
    /// File bytes not written yet.
    stage: Stage,
    /// The file's first aligned blocks (the header's place and the data after it up to an
    /// aligned offset) once the stage has moved past them: `finish` writes them with the
    /// header. None until then.
    head: Option<Stage>,
    tmp_path: PathBuf,
    /// The temp file has been moved into place or removed: nothing for `Drop` to clean.
    settled: bool,
    /// Why the unit could not be stored: the disk ran out of space (the temp file is gone).
    full: Option<String>,
    /// The data past the head was written by another process ([`UnitWriter::finish_shared`]):
    /// `checksums` is complete and the file's length may exceed the unit's (its last
    /// aligned block padded).
    shared_tail: bool,
}

/// A unit opened for reading ([`Disk::open_reader`]): its file and its decoded header, for
/// several reads of one request. A unit deleted meanwhile stays readable through it (the
/// open file outlives its name); the disk's failed state is checked on every read.
#[derive(Debug)]
pub struct UnitReader {
    disk: Disk,
    key: UnitKey,
    file: Box<dyn FsFile>,
    header: Header,
}

/// The whole segments of a range of an opened unit ([`UnitReader::whole_segments`]), to be
/// sent from the file inside the kernel and verified by their receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WholeSegments {
    /// Unit bytes `[start, end)` covered: whole segments, end to end (empty when the range
    /// holds none; then `start == end` is the range's end).
    pub start: u64,
    pub end: u64,
    /// The stored CRC-32C of each of those segments, in order.
    pub checksums: Vec<u32>,
    /// Where unit byte `start` lies in the file.
    pub file_offset: u64,
    /// The open file (valid while its [`UnitReader`] lives).
    pub fd: std::os::fd::RawFd,
}

impl UnitReader {
    /// What [`Disk::stat`] says of the unit.
    pub fn info(&self) -> UnitInfo {
        Disk::info(self.key, self.header.len_bytes)
    }

    /// The whole segments inside `[offset, end)` of the unit, for a reader that sends them
    /// from the file descriptor (sendfile) and lets the receiver verify them: their range,
    /// their stored checksums and where they start in the file. The partial segments at the
    /// range's edges (`[offset, start)` and `[end', end)`) are left to [`UnitReader::read`],
    /// which verifies them here. None when the unit's file has no descriptor to send from
    /// (a test filesystem injecting faults). A segment is whole when the range covers it from
    /// its first byte to its last (the unit's last segment may be short).
    pub fn whole_segments(&self, offset: u64, end: u64) -> Result<Option<WholeSegments>> {
        self.disk.check()?;
        let unit_bytes = self.header.len_bytes;
        if offset > end || end > unit_bytes {
            return Err(StoreError::OutOfRange {
                dir: self.disk.inner.dir.clone(),
                key: self.key,
                offset,
                len_bytes: end.saturating_sub(offset),
                unit_bytes,
            });
        }
        let Some(fd) = self.file.raw_fd() else {
            return Ok(None);
        };
        let segment = u64::from(SEGMENT_BYTES);
        let first = offset.div_ceil(segment);
        let last = match end == unit_bytes {
            true => segment_count(unit_bytes),
            false => end / segment,
        };
        let (start, stop, checksums) = match first < last {
            true => {
                let stop = (last * segment).min(unit_bytes);
                let sums = self.header.checksums[first as usize..last as usize].to_vec();
                (first * segment, stop, sums)
            }
            false => (end, end, Vec::new()),
        };
        let file_offset = header_bytes(unit_bytes) + start;
        Ok(Some(WholeSegments { start, end: stop, checksums, file_offset, fd }))
    }

    /// Reads `len_bytes` bytes from `offset`, as [`Disk::read`].
    pub fn read(&self, offset: u64, len_bytes: usize) -> Result<Vec<u8>> {
        self.disk.check()?;
        let mut out = Vec::with_capacity(len_bytes);
        let buf = &mut out.spare_capacity_mut()[..len_bytes];
        self.disk.read_opened(self.key, self.file.as_ref(), &self.header, offset, buf)?;
        // SAFETY: `read_opened` returned Ok, so it wrote all `len_bytes` bytes.
        unsafe { out.set_len(len_bytes) };
        Ok(out)
    }
}

/// Where a writer in another process puts a unit's data ([`UnitWriter::shared`]): unit byte
/// `i` goes to file offset `data_offset + i`, written in whole [`DIRECT_ALIGN`] blocks at
/// aligned offsets from aligned memory (the file may be open with O_DIRECT, and the
/// descriptor shares that open file). The first `head_bytes` unit bytes share the file's
/// first aligned block with the header: the writer does not write them but hands them to
/// [`UnitWriter::finish_shared`], with the CRC-32C of every segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedWrite {
    /// The temp file's descriptor (valid while its [`UnitWriter`] lives).
    pub fd: std::os::fd::RawFd,
    pub data_offset: u64,
    pub head_bytes: u64,
    pub len_bytes: u64,
}

/// Units of at most this many bytes are written through the page cache; longer ones with
/// O_DIRECT where the filesystem takes it.
pub const BUFFERED_UNIT_BYTES: u64 = 1 << 20;

/// Writes of at least this many bytes ask the kernel to start their writeback at once.
const WRITEBACK_HINT_BYTES: u64 = 256 * 1024;

impl UnitWriter {
    /// The unit being written.
    pub fn key(&self) -> UnitKey {
        self.key
    }

    /// Appends `bytes` to the unit. More bytes than the unit's length is `LengthMismatch`.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_all_pieces(&[bytes])
    }

    /// Appends `pieces`, one after the other, in one vectored write (pieces received apart
    /// need not be gathered into one buffer first). More bytes than the unit's length is
    /// `LengthMismatch`, and nothing of them is written.
    pub fn write_all_pieces(&mut self, pieces: &[&[u8]]) -> Result<()> {
        self.disk.check()?;
        let added: u64 = pieces.iter().map(|piece| piece.len() as u64).sum();
        let total = self.written_bytes + added;
        if total > self.len_bytes {
            return Err(self.length_mismatch(total));
        }
        if let Some(reason) = &self.full {
            let dir = self.disk.inner.dir.clone();
            return Err(StoreError::Full { dir, key: self.key, reason: reason.clone() });
        }
        for piece in pieces {
            let mut rest = *piece;
            while !rest.is_empty() {
                let taken = self.stage.push(rest);
                rest = &rest[taken..];
                if self.stage.room() == 0 {
                    if let Err(e) = self.write_stage() {
                        return Err(self.abandon(self.disk.write_failed(
                            "write",
                            self.key,
                            &self.tmp_path,
                            e,
                        )));
                    }
                }
            }
        }
        let segment_bytes = u64::from(SEGMENT_BYTES);
        for piece in pieces {
            let mut rest = *piece;
            while !rest.is_empty() {
                let room = (segment_bytes - self.written_bytes % segment_bytes) as usize;
                let (now, later) = rest.split_at(room.min(rest.len()));
                self.segment_checksum =
                    weft_wire::checksum::crc32c_append(self.segment_checksum, now);
                self.written_bytes += now.len() as u64;
                if self.written_bytes.is_multiple_of(segment_bytes) {
                    self.checksums.push(self.segment_checksum);
                    self.segment_checksum = 0;
                }
                rest = later;
            }
        }
        Ok(())
    }

    /// The temp file for a writer in another process ([`SharedWrite`]), before any byte was
    /// given here; None when the file has no descriptor to hand out (a test filesystem
    /// injecting faults) or bytes were written through [`UnitWriter::write_all`] already.
    pub fn shared(&self) -> Option<SharedWrite> {
        let fd = self.file.as_ref()?.raw_fd()?;
        if self.written_bytes > 0 || self.stage.at > 0 {
            return None;
        }
        let head_room = self.header_bytes.next_multiple_of(DIRECT_ALIGN as u64) - self.header_bytes;
        Some(SharedWrite {
            fd,
            data_offset: self.header_bytes,
            head_bytes: head_room.min(self.len_bytes),
            len_bytes: self.len_bytes,
        })
    }

    /// Completes a unit whose data a writer in another process put into the file
    /// ([`UnitWriter::shared`]): `head` is its first `head_bytes` bytes and `checksums` the
    /// CRC-32C of each segment, as that writer computed them (the node cannot read the
    /// bytes back without reading the device; a wrong checksum is found by the first read,
    /// as corruption). Then as [`UnitWriter::finish`]: header, fsync, rename, directory
    /// fsync. A `head` or checksum table that does not fit the unit is `LengthMismatch`.
    pub fn finish_shared(mut self, head: &[u8], checksums: Vec<u32>) -> Result<UnitInfo> {
        self.disk.check()?;
        let Some(shared) = self.shared() else {
            return Err(self.length_mismatch(self.written_bytes));
        };
        if head.len() as u64 != shared.head_bytes {
            return Err(self.length_mismatch(head.len() as u64));
        }
        if checksums.len() as u64 != segment_count(self.len_bytes) {
            let implied = checksums.len() as u64 * u64::from(SEGMENT_BYTES);
            return Err(self.length_mismatch(implied));
        }
        let taken = self.stage.push(head);
        debug_assert_eq!(taken, head.len(), "the head fits the header's aligned block");
        // The bytes past the head are in the file already; finish writes the header's block.
        self.written_bytes = self.len_bytes;
        self.checksums = checksums;
        self.segment_checksum = 0;
        self.shared_tail = true;
        self.finish()
    }

    /// Abandons a unit whose writer in another process met `error` writing the file: ENOSPC
    /// and EDQUOT as if this process had met them (`Full`, the temp file removed), EIO fails
    /// the disk as any failed write does; anything else (a writer's own mistake, such as a
    /// misaligned write) drops the unit and leaves the disk alone. Returns the error to
    /// answer.
    pub fn fail_shared(mut self, error: std::io::Error) -> StoreError {
        let code = error.raw_os_error();
        let disk_said = matches!(code, Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EIO));
        if disk_said {
            let failed = self.disk.write_failed("write", self.key, &self.tmp_path, error);
            return self.abandon(failed);
        }
        let path = self.tmp_path.clone();
        StoreError::Io {
            dir: self.disk.inner.dir.clone(),
            key: Some(self.key),
            op: "write",
            path,
            source: error,
        }
    }

    /// Writes the full stage and empties it. The stage at offset 0 keeps back its first
    /// aligned blocks (the header's place), which `finish` writes with the header.
    fn write_stage(&mut self) -> std::io::Result<()> {
        let file = self.file.as_ref().expect("the file stays open until finish or full");
        let at = self.stage.at;
        let len = self.stage.len();
        let bytes = self.stage.padded();
        let skip = if at == 0 {
            let head_len = (self.header_bytes as usize).next_multiple_of(DIRECT_ALIGN);
            let mut head = Stage::new(head_len);
            head.push(&bytes[..head_len]);
            self.head = Some(head);
            head_len
        } else {
            0
        };
        if skip < len {
            file.write_all_at(&bytes[skip..], at + skip as u64)?;
        }
        // Large writes start their writeback now (a plain file's; a direct one has none), so
        // `finish`'s fsync waits for the tail only (a hint: durability is still that fsync).
        if (len - skip) as u64 >= WRITEBACK_HINT_BYTES {
            file.start_writeback(at + skip as u64, (len - skip) as u64);
        }
        self.stage.restart(at + len as u64);
        Ok(())
    }

    /// Writes what is staged and the header, and cuts the file to its length (the last
    /// write was padded to an aligned block).
    fn write_rest(&mut self, header: &[u8]) -> std::io::Result<()> {
        let file = self.file.as_ref().expect("the file stays open until finish");
        let at = self.stage.at;
        if at == 0 {
            // Everything is still staged: one write, header included.
            let bytes = self.stage.padded();
            bytes[..header.len()].copy_from_slice(header);
            file.write_all_at(bytes, 0)?;
        } else {
            if self.stage.len() > 0 {
                file.write_all_at(self.stage.padded(), at)?;
            }
            let head = self.head.as_mut().expect("a stage past offset 0 kept the head");
            let bytes = head.padded();
            bytes[..header.len()].copy_from_slice(header);
            file.write_all_at(bytes, 0)?;
        }
        let file_bytes = self.header_bytes + self.len_bytes;
        if self.shared_tail || !file_bytes.is_multiple_of(DIRECT_ALIGN as u64) {
            file.set_len(file_bytes)?;
        }
        Ok(())
    }

    /// After `error` from a write to the temp file: if it is `Full`, removes the temp file now
    /// (a full disk needs the space back; a failed one is left alone, see `Drop`), so later
    /// calls answer `Full` again. Returns `error`, or the failure to remove.
    fn abandon(&mut self, error: StoreError) -> StoreError {
        let StoreError::Full { reason, .. } = &error else {
            return error;
        };
        self.full = Some(reason.clone());
        self.file = None;
        self.settled = true;
        match self.disk.inner.fs.remove_file(&self.tmp_path) {
            Ok(()) => error,
            Err(e) if is_not_found(&e) => error,
            Err(e) => self.disk.fail("remove", Some(self.key), &self.tmp_path, e),
        }
    }

    fn length_mismatch(&self, written_bytes: u64) -> StoreError {
        StoreError::LengthMismatch {
            dir: self.disk.inner.dir.clone(),
            key: self.key,
            expected_bytes: self.len_bytes,
            written_bytes,
        }
    }

    /// Writes the header, fsyncs, moves the unit into place and fsyncs its directory. The unit
    /// is durable and visible when this returns `Ok`.
    pub fn finish(mut self) -> Result<UnitInfo> {
        self.disk.check()?;
        if let Some(reason) = &self.full {
            let dir = self.disk.inner.dir.clone();
            return Err(StoreError::Full { dir, key: self.key, reason: reason.clone() });
        }
        if self.written_bytes != self.len_bytes {
            return Err(self.length_mismatch(self.written_bytes));
        }
        if !self.shared_tail && !self.written_bytes.is_multiple_of(u64::from(SEGMENT_BYTES)) {
            self.checksums.push(self.segment_checksum);
        }
        let (disk, key, tmp) = (self.disk.clone(), self.key, self.tmp_path.clone());
        let header = Header {
            key,
            len_bytes: self.len_bytes,
            checksums: std::mem::take(&mut self.checksums),
        };
        let written = self.write_rest(&header.encode());
        let file = self.file.take().expect("the file stays open until finish");
        let written = written
            .map_err(|e| disk.write_failed("write", key, &tmp, e))
            .and_then(|()| file.sync_all().map_err(|e| disk.write_failed("fsync", key, &tmp, e)));
        drop(file);
        if let Err(error) = written {
            return Err(self.abandon(error));
        }
        let path = disk.unit_path(&key);
        match disk.inner.fs.rename_no_replace(&tmp, &path) {
            Ok(()) => self.settled = true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                disk.inner
                    .fs
                    .remove_file(&tmp)
                    .map_err(|e| disk.fail("remove", Some(key), &tmp, e))?;
                self.settled = true;
                return Err(StoreError::AlreadyExists { dir: disk.inner.dir.clone(), key });
            }
            Err(e) => return Err(self.abandon(disk.write_failed("rename", key, &path, e))),
        }
        let parent = path.parent().expect("unit files live in a fan-out directory");
        disk.inner
            .fs
            .sync_dir(parent)
            .map_err(|e| disk.fail("fsync directory", Some(key), parent, e))?;
        let info = Disk::info(key, self.len_bytes);
        disk.usage_count().finished(key, info.file_bytes);
        Ok(info)
    }
}

impl Drop for UnitWriter {
    /// Removes the temp file of an abandoned unit. Best effort: on a failed disk nothing more
    /// is written, and whatever is left in `tmp/` goes at the next `Disk::open`.
    fn drop(&mut self) {
        if !self.settled && self.disk.failure().is_none() {
            self.file = None;
            let _ = self.disk.inner.fs.remove_file(&self.tmp_path);
        }
    }
}
