//! A RAIDP disk: its superchunk slots as files, beside its [`Lstor`].
//!
//! Each slot the disk holds is one file `superchunks/slot-NNNNNN` that grows as data is
//! appended (bytes past its length read as zeros, the state of a never-written slot), with a
//! sidecar `slot-NNNNNN.crc` of one crc32c per 64 KiB segment. Every write goes through the
//! Lstor's protocol ([`RaidpDisk::write`]): journal (new data, new parity) → slot file →
//! parity; the caller clears the record once the partner replica acknowledged.
//!
//! Invariants:
//! - Verified reads: every byte [`RaidpDisk::read`] returns was covered by a segment checksum
//!   checked in that call; a mismatch is `RaidpError::Corrupt` naming slot and segment (the
//!   caller reads the partner instead and rewrites the range).
//! - The parity is the fold of the slot files: a write whose range lies wholly past the slot's
//!   length is *fresh* (old bytes are zeros) and reads nothing from the disk; any other write
//!   reads the old bytes it replaces (read-modify-write). [`RaidpDisk::verify`] recomputes
//!   the fold from every slot and compares it with the Lstor (the tier's scrub).
//! - Writes to one disk are serialized from reading the old bytes to the parity update, so
//!   every parity is computed from the bytes its write replaced.
//! - Crash safety: data and checksums of a write can be torn by a crash only while its
//!   journal record is pending; [`RaidpDisk::open`] rewrites the data (and checksums) of
//!   every pending record and replays its parity, then hands the records to the caller to
//!   resolve with the partner. A missing or corrupt Lstor makes `open` fail: no RAIDP write
//!   may be taken on a disk whose parity cannot be kept.
//! - Group commit: a write leaves its slot files (and a new slot's name) unsynced, only its
//!   writeback started; [`RaidpDisk::clear`] syncs everything written since the last clear,
//!   then the parity, before it drops any record. Clears run one at a time, so a record is
//!   never dropped while another clear is still syncing the bytes it journaled.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::lstor::{JournalRecord, Lstor, LstorError};
use crate::SEGMENT_BYTES;

const SEGMENT: u64 = SEGMENT_BYTES as u64;

/// Bytes of a slot a trim folds out of the parity per journal record (a multiple of the
/// checksum segment, so the cut files keep whole segments).
pub const TRIM_WINDOW: u64 = 4 << 20;

/// Bytes of every slot a verify folds at a time.
pub const VERIFY_WINDOW: u64 = 4 << 20;

fn slot_file(dir: &Path, slot: u32) -> PathBuf {
    dir.join(format!("slot-{slot:06}"))
}

fn crc_file(dir: &Path, slot: u32) -> PathBuf {
    dir.join(format!("slot-{slot:06}.crc"))
}

/// Asks the kernel to start writing `len` bytes at `offset` of `file` back to the disk,
/// without waiting (a later sync then waits for less). Only a hint: errors are ignored, and
/// on systems without `sync_file_range` it does nothing.
fn start_writeback(file: &File, offset: u64, len: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on an open descriptor; no memory is passed.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Why a RAIDP disk refused.
#[derive(Debug)]
pub enum RaidpError {
    /// The Lstor is missing, corrupt, foreign or failing: RAIDP writes are refused.
    Lstor(LstorError),
    /// A segment of a slot does not match its checksum.
    Corrupt { slot: u32, segment: u64 },
    /// A range outside the superchunk.
    OutOfRange { slot: u32, offset: u64, len: usize, superchunk_bytes: u64 },
    /// A filesystem call on the disk failed.
    Io { path: PathBuf, source: std::io::Error },
}

impl std::fmt::Display for RaidpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RaidpError::Lstor(e) => write!(f, "{e}; this disk takes no RAIDP write"),
            RaidpError::Corrupt { slot, segment } => write!(
                f,
                "slot {slot} segment {segment} does not match its checksum (read the partner \
                 replica)"
            ),
            RaidpError::OutOfRange { slot, offset, len, superchunk_bytes } => write!(
                f,
                "{len} bytes at offset {offset} of slot {slot} fall outside a superchunk of \
                 {superchunk_bytes} bytes"
            ),
            RaidpError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for RaidpError {}

impl From<LstorError> for RaidpError {
    fn from(e: LstorError) -> RaidpError {
        RaidpError::Lstor(e)
    }
}

/// A step of the write protocol, done ([`RaidpDisk::write_observed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteStep {
    /// The journal record (new data, new parity) is durable.
    Journaled,
    /// The slot's bytes and checksums are durable.
    DiskWritten,
    /// The parity is updated (the write is acknowledged next).
    ParityUpdated,
}

/// What [`RaidpDisk::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Slots folded.
    pub slots: usize,
    /// Per parity: whether the Lstor equals the fold of the slots.
    pub parity_matches: Vec<bool>,
    /// Slots with a segment that failed its checksum (their bytes were folded as read).
    pub corrupt_slots: Vec<u32>,
    /// Per slot, the crc32c of its whole superchunk (zeros past its end).
    pub slot_crcs: Vec<(u32, u32)>,
}

impl VerifyReport {
    pub fn clean(&self) -> bool {
        self.parity_matches.iter().all(|&m| m) && self.corrupt_slots.is_empty()
    }
}

/// A disk's superchunk slots and its Lstor.
#[derive(Debug)]
pub struct RaidpDisk {
    dir: PathBuf,
    lstor: std::sync::Arc<Lstor>,
    /// Held across a whole write, from reading the old bytes to the parity update: the old
    /// bytes a parity is computed from must be the ones the write replaces.
    writes: std::sync::Mutex<()>,
    /// What was written since the last sync: a write is durable by its journal record until
    /// [`RaidpDisk::clear`] syncs it (group commit).
    dirty: std::sync::Mutex<Dirty>,
    /// Held across a whole clear: a clear that found nothing dirty must not drop its records
    /// while another clear is still syncing the files they were written to.
    clears: std::sync::Mutex<()>,
}

/// Files written and not synced yet.
#[derive(Debug, Default)]
struct Dirty {
    /// Slots whose files (data and checksums) were written.
    slots: std::collections::BTreeSet<u32>,
    /// Whether a slot's files were created (the directory must be synced for their names).
    names: bool,
}

impl RaidpDisk {
    /// Opens the slots under `disk_dir` and the Lstor in `lstor_dir` (of disk `disk_id`),
    /// creating an empty Lstor of `superchunk_bytes` × `parities` when `create` is set and
    /// the disk holds no slot yet. Pending journal records are made true on disk and in the
    /// parity and returned (the caller resolves them with the partner, then clears them).
    pub fn open(
        disk_dir: &Path,
        lstor_dir: &Path,
        disk_id: &str,
        create: Option<(u64, usize)>,
    ) -> Result<(RaidpDisk, Vec<JournalRecord>), RaidpError> {
        let dir = disk_dir.join("superchunks");
        std::fs::create_dir_all(&dir)
            .map_err(|source| RaidpError::Io { path: dir.clone(), source })?;
        let lstor = match (Lstor::open(lstor_dir, disk_id), create) {
            (Ok(lstor), _) => lstor,
            (Err(LstorError::Missing { .. }), Some((bytes, parities))) => {
                let empty = std::fs::read_dir(&dir)
                    .map_err(|source| RaidpError::Io { path: dir.clone(), source })?
                    .next()
                    .is_none();
                if !empty {
                    // Slots without their parity: creating a zero Lstor would be a lie.
                    return Err(RaidpError::Lstor(LstorError::Missing { dir: lstor_dir.into() }));
                }
                Lstor::create(lstor_dir, disk_id, bytes, parities)?
            }
            (Err(e), _) => return Err(e.into()),
        };
        let disk = RaidpDisk {
            dir,
            lstor: lstor.into(),
            writes: std::sync::Mutex::new(()),
            dirty: Default::default(),
            clears: std::sync::Mutex::new(()),
        };
        let pending = disk.lstor.pending()?;
        for record in &pending {
            if record.append {
                // Whatever of the append reached the disk stays (the partner settles the
                // rest), checksummed afresh; the parity is made to match it.
                let now = disk.read_raw(record.slot, record.offset, record.len)?;
                let landed = disk.slot_len(record.slot)?.saturating_sub(record.offset);
                let landed = landed.min(record.len as u64) as usize;
                if landed > 0 {
                    disk.write_slot(record.slot, record.offset, &now[..landed], true)?;
                }
                disk.lstor.replay(record, Some(&now))?;
                continue;
            }
            disk.write_slot(record.slot, record.offset, &record.data, true)?;
            disk.lstor.replay(record, None)?;
        }
        Ok((disk, pending))
    }

    /// Step 4 for records `seqs` (their partners have the bytes): every slot written since
    /// the last clear, and the parity, are synced first — a record is dropped only once what
    /// it made durable is durable on its own. Then the records are cleared, and the journal
    /// emptied when nothing is left pending. Returns whether it was.
    pub fn clear(&self, seqs: &[u64]) -> Result<bool, RaidpError> {
        let _clearing = self.clears.lock().unwrap_or_else(|p| p.into_inner());
        let dirty = std::mem::take(&mut *self.dirty());
        // On failure the files stay dirty: the next clear syncs them again.
        let resync = |dirty: Dirty| {
            let mut now = self.dirty();
            now.slots.extend(dirty.slots);
            now.names |= dirty.names;
        };
        let mut paths: Vec<PathBuf> = dirty
            .slots
            .iter()
            .flat_map(|&slot| [self.slot_path(slot), self.crc_path(slot)])
            .collect();
        if dirty.names {
            paths.push(self.dir.clone());
        }
        for path in paths {
            let synced = match File::open(&path) {
                // Trimmed since (compaction): nothing of it to sync.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                opened => opened.and_then(|f| f.sync_data()),
            };
            if let Err(source) = synced {
                resync(dirty);
                return Err(RaidpError::Io { path, source });
            }
        }
        if let Err(e) = self.lstor.sync_parity() {
            resync(dirty);
            return Err(e.into());
        }
        for &seq in seqs {
            self.lstor.clear(seq)?;
        }
        Ok(self.lstor.compact()?)
    }

    /// Whether `disk_dir` holds any RAIDP slot (a disk whose Lstor is missing while this is
    /// true lost its parity: it must not be given a fresh, zero one).
    pub fn has_slots(disk_dir: &Path) -> Result<bool, RaidpError> {
        let dir = disk_dir.join("superchunks");
        match std::fs::read_dir(&dir) {
            Ok(mut entries) => Ok(entries.next().is_some()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(RaidpError::Io { path: dir, source }),
        }
    }

    fn dirty(&self) -> std::sync::MutexGuard<'_, Dirty> {
        self.dirty.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn lstor(&self) -> &Lstor {
        &self.lstor
    }

    /// The Lstor, to keep once the disk is gone (its parity outlives the disk).
    pub fn shared_lstor(&self) -> std::sync::Arc<Lstor> {
        self.lstor.clone()
    }

    fn slot_path(&self, slot: u32) -> PathBuf {
        slot_file(&self.dir, slot)
    }

    fn crc_path(&self, slot: u32) -> PathBuf {
        crc_file(&self.dir, slot)
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RaidpError + '_ {
        move |source| RaidpError::Io { path: path.to_path_buf(), source }
    }

    fn check(&self, slot: u32, offset: u64, len: usize) -> Result<(), RaidpError> {
        let superchunk_bytes = self.lstor.superchunk_bytes();
        if offset.saturating_add(len as u64) > superchunk_bytes {
            return Err(RaidpError::OutOfRange { slot, offset, len, superchunk_bytes });
        }
        Ok(())
    }

    /// Bytes of `slot` written so far (its file's length; 0 for a slot never written).
    pub fn slot_len(&self, slot: u32) -> Result<u64, RaidpError> {
        let path = self.slot_path(slot);
        match std::fs::metadata(&path) {
            Ok(meta) => Ok(meta.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(RaidpError::Io { path, source: e }),
        }
    }

    /// The slots this disk has written, in order.
    pub fn slots(&self) -> Result<Vec<u32>, RaidpError> {
        let mut slots = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(Self::io(&self.dir))? {
            let name = entry.map_err(Self::io(&self.dir))?.file_name();
            let name = name.to_string_lossy();
            if let Some(slot) = name.strip_prefix("slot-").filter(|n| !n.contains('.')) {
                if let Ok(slot) = slot.parse() {
                    slots.push(slot);
                }
            }
        }
        slots.sort_unstable();
        Ok(slots)
    }

    /// Writes `data` at `offset` of `slot` through the Lstor protocol (steps 1–3) and returns
    /// the journal record's sequence number, to [`Lstor::clear`] once the partner has it.
    pub fn write(&self, slot: u32, offset: u64, data: &[u8]) -> Result<u64, RaidpError> {
        self.write_observed(slot, offset, data, &|_| {})
    }

    /// [`RaidpDisk::write`], calling `at` after each step of the protocol (crash drills stop
    /// the process there).
    pub fn write_observed(
        &self,
        slot: u32,
        offset: u64,
        data: &[u8],
        at: &dyn Fn(WriteStep),
    ) -> Result<u64, RaidpError> {
        self.check(slot, offset, data.len())?;
        let _write = self.writes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let written = self.slot_len(slot)?;
        // Old bytes: those before the slot's end are read (and checked); past it, zeros.
        let old = if offset >= written {
            None
        } else {
            let stored = (written - offset).min(data.len() as u64) as usize;
            let mut old = self.read(slot, offset, stored)?;
            old.resize(data.len(), 0);
            Some(old)
        };
        let pending = self.lstor.begin(slot, offset, old.as_deref(), data)?;
        at(WriteStep::Journaled);
        let created = self.write_slot(slot, offset, data, false)?;
        let mut dirty = self.dirty();
        dirty.slots.insert(slot);
        dirty.names |= created;
        drop(dirty);
        at(WriteStep::DiskWritten);
        let seq = pending.commit()?;
        at(WriteStep::ParityUpdated);
        Ok(seq)
    }

    /// Writes bytes and their segment checksums to the slot's files; durably (names too)
    /// when `sync`, else left to [`RaidpDisk::clear`] (the journal record holds them
    /// meanwhile), the disk's writeback started at once so that the clear finds little left
    /// to wait for. Returns whether the slot's file was created.
    fn write_slot(
        &self,
        slot: u32,
        offset: u64,
        data: &[u8],
        sync: bool,
    ) -> Result<bool, RaidpError> {
        let (path, crc_path) = (self.slot_path(slot), self.crc_path(slot));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(Self::io(&path))?;
        let crcs = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&crc_path)
            .map_err(Self::io(&crc_path))?;
        let before = file.metadata().map_err(Self::io(&path))?.len();
        file.write_all_at(data, offset).map_err(Self::io(&path))?;
        // The segments the write touched — and those it extended the file over, zeros now —
        // whole (up to the file's end), checksummed again.
        let len = file.metadata().map_err(Self::io(&path))?.len();
        let first = offset.min(before) / SEGMENT;
        let last = (offset + data.len() as u64).div_ceil(SEGMENT).max(first + 1);
        for segment in first..last {
            let start = segment * SEGMENT;
            let bytes = (len.saturating_sub(start)).min(SEGMENT) as usize;
            let end = offset + data.len() as u64;
            let crc = if start >= offset && start + bytes as u64 <= end {
                // Wholly the new bytes: no need to read them back.
                let from = (start - offset) as usize;
                crc32c::crc32c(&data[from..from + bytes])
            } else {
                let mut buffer = vec![0u8; bytes];
                file.read_exact_at(&mut buffer, start).map_err(Self::io(&path))?;
                crc32c::crc32c(&buffer)
            };
            crcs.write_all_at(&crc.to_le_bytes(), segment * 4).map_err(Self::io(&crc_path))?;
        }
        if sync {
            file.sync_data().map_err(Self::io(&path))?;
            crcs.sync_data().map_err(Self::io(&crc_path))?;
            if before == 0 {
                // A new slot's files: their names must be durable too.
                File::open(&self.dir).and_then(|d| d.sync_all()).map_err(Self::io(&self.dir))?;
            }
        } else {
            start_writeback(&file, offset, data.len());
        }
        Ok(before == 0)
    }

    /// Empties `slot` (compaction reclaims its superchunk): its bytes are folded out of the
    /// parity (read-modify-write: each window of [`TRIM_WINDOW`] bytes, from the end, is
    /// journaled as a write of zeros, cut off the file, and its parity updated), then its
    /// files are removed. Returns the bytes it held. Idempotent (a slot never written, or
    /// removed already, holds 0); a crash midway leaves a shorter slot whose parity
    /// matches, or a pending record that the next open makes true. A segment failing its
    /// checksum stops it (`RaidpError::Corrupt`): its bytes cannot be folded out.
    pub fn trim(&self, slot: u32) -> Result<u64, RaidpError> {
        self.trim_in_windows(slot, TRIM_WINDOW)
    }

    /// [`RaidpDisk::trim`] in windows of `window` bytes (a multiple of the segment).
    fn trim_in_windows(&self, slot: u32, window: u64) -> Result<u64, RaidpError> {
        debug_assert!(window > 0 && window.is_multiple_of(SEGMENT));
        let _write = self.writes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _clearing = self.clears.lock().unwrap_or_else(|p| p.into_inner());
        let written = self.slot_len(slot)?;
        let (path, crc_path) = (self.slot_path(slot), self.crc_path(slot));
        let mut end = written;
        let mut seqs = Vec::new();
        let mut zeros = Vec::new();
        while end > 0 {
            let start = (end - 1) / window * window;
            let len = (end - start) as usize;
            let old = self.read(slot, start, len)?;
            zeros.resize(len, 0);
            let pending = self.lstor.begin(slot, start, Some(&old), &zeros[..len])?;
            let file = OpenOptions::new().write(true).open(&path).map_err(Self::io(&path))?;
            file.set_len(start).map_err(Self::io(&path))?;
            let crcs =
                OpenOptions::new().write(true).open(&crc_path).map_err(Self::io(&crc_path))?;
            crcs.set_len(start / SEGMENT * 4).map_err(Self::io(&crc_path))?;
            seqs.push(pending.commit()?);
            end = start;
        }
        for path in [&path, &crc_path] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(RaidpError::Io { path: path.clone(), source }),
            }
        }
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(Self::io(&self.dir))?;
        self.lstor.sync_parity()?;
        for seq in seqs {
            self.lstor.clear(seq)?;
        }
        self.lstor.compact()?;
        Ok(written)
    }

    /// `len` bytes of `slot` from `offset`, checked against the segment checksums (zeros past
    /// what was written).
    pub fn read(&self, slot: u32, offset: u64, len: usize) -> Result<Vec<u8>, RaidpError> {
        self.check(slot, offset, len)?;
        Self::read_in(&self.dir, slot, offset, len)
    }

    /// [`RaidpDisk::read`] on a disk whose Lstor is refused: its slots stay readable (their
    /// checksums still guard them), only writes need the parity.
    pub fn read_without_lstor(
        disk_dir: &Path,
        slot: u32,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, RaidpError> {
        Self::read_in(&disk_dir.join("superchunks"), slot, offset, len)
    }

    fn read_in(dir: &Path, slot: u32, offset: u64, len: usize) -> Result<Vec<u8>, RaidpError> {
        let mut out = vec![0u8; len];
        let (path, crc_path) = (slot_file(dir, slot), crc_file(dir, slot));
        let written = match std::fs::metadata(&path) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(RaidpError::Io { path, source: e }),
        };
        if offset >= written || len == 0 {
            return Ok(out);
        }
        let file = File::open(&path).map_err(Self::io(&path))?;
        let crcs = File::open(&crc_path).map_err(Self::io(&crc_path))?;
        let end = (offset + len as u64).min(written);
        for segment in offset / SEGMENT..end.div_ceil(SEGMENT) {
            let start = segment * SEGMENT;
            let mut buffer = vec![0u8; (written - start).min(SEGMENT) as usize];
            file.read_exact_at(&mut buffer, start).map_err(Self::io(&path))?;
            let mut stored = [0u8; 4];
            crcs.read_exact_at(&mut stored, segment * 4)
                .map_err(|_| RaidpError::Corrupt { slot, segment })?;
            if crc32c::crc32c(&buffer) != u32::from_le_bytes(stored) {
                return Err(RaidpError::Corrupt { slot, segment });
            }
            // Copy the part of this segment inside the asked range.
            let from = offset.max(start);
            let to = end.min(start + buffer.len() as u64);
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&buffer[(from - start) as usize..(to - start) as usize]);
        }
        Ok(out)
    }

    /// Folds every slot into fresh parities and compares them with the Lstor's, a window of
    /// [`VERIFY_WINDOW`] bytes at a time (memory stays bounded whatever the superchunk size);
    /// also returns each slot's crc32c over the whole superchunk (zeros past its end), which
    /// must equal its partner replica's.
    pub fn verify(&self) -> Result<VerifyReport, RaidpError> {
        let bytes = self.lstor.superchunk_bytes();
        let slots = self.slots()?;
        let mut corrupt_slots = Vec::new();
        let mut crcs = vec![0u32; slots.len()];
        let mut parity_matches = vec![true; self.lstor.parities()];
        let mut at = 0u64;
        while at < bytes {
            let len = VERIFY_WINDOW.min(bytes - at) as usize;
            let mut acc = vec![vec![0u8; len]; self.lstor.parities()];
            for (i, &slot) in slots.iter().enumerate() {
                let data = match self.read(slot, at, len) {
                    Ok(data) => data,
                    Err(RaidpError::Corrupt { .. }) => {
                        if !corrupt_slots.contains(&slot) {
                            corrupt_slots.push(slot);
                        }
                        self.read_raw(slot, at, len)?
                    }
                    Err(e) => return Err(e),
                };
                crcs[i] = crc32c::crc32c_append(crcs[i], &data);
                self.lstor.fold(slot, &data, &mut acc);
            }
            for (index, expected) in acc.iter().enumerate() {
                if self.lstor.parity(index, at, len)? != *expected {
                    parity_matches[index] = false;
                }
            }
            at += len as u64;
        }
        let slot_crcs = slots.iter().copied().zip(crcs).collect();
        Ok(VerifyReport { slots: slots.len(), parity_matches, corrupt_slots, slot_crcs })
    }

    /// Bytes of a slot as they are on disk, unchecked (zeros past its end): what a verify
    /// folds when a segment is corrupt.
    /// `len` bytes of `slot` from `offset` as they are on the disk, unchecked (zeros past
    /// its end, or for a slot never written).
    fn read_raw(&self, slot: u32, offset: u64, len: usize) -> Result<Vec<u8>, RaidpError> {
        let path = self.slot_path(slot);
        let mut out = vec![0u8; len];
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(RaidpError::Io { path, source: e }),
        };
        let mut done = 0;
        while done < len {
            match file.read_at(&mut out[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => return Err(RaidpError::Io { path, source: e }),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lstor::tests::pattern;

    const BYTES: u64 = 300_000; // not a whole number of segments

    fn open(dir: &Path) -> (RaidpDisk, Vec<JournalRecord>) {
        RaidpDisk::open(&dir.join("disk"), &dir.join("lstor"), "node-3/disk-1", Some((BYTES, 2)))
            .unwrap()
    }

    #[test]
    fn appends_and_updates_read_back_verified_and_keep_the_parity_true() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, pending) = open(dir.path());
        assert!(pending.is_empty());
        let mut model = vec![vec![0u8; BYTES as usize]; 4];
        let mut put = |slot: u32, offset: u64, data: Vec<u8>| {
            let seq = disk.write(slot, offset, &data).unwrap();
            disk.lstor().clear(seq).unwrap();
            model[slot as usize][offset as usize..offset as usize + data.len()]
                .copy_from_slice(&data);
        };
        put(0, 0, pattern(100_000, 1));
        put(0, 100_000, pattern(90_000, 2)); // an append
        put(3, 0, pattern(200_000, 3));
        put(0, 50_000, pattern(120_000, 4)); // an update across the end of what was written
        put(1, 250_000, pattern(50_000, 5)); // a sparse append: zeros before it
        put(3, 65_530, pattern(20, 6)); // across a segment boundary
        for slot in 0..4u32 {
            assert_eq!(disk.read(slot, 0, BYTES as usize).unwrap(), model[slot as usize]);
        }
        assert_eq!(disk.read(0, 65_000, 1000).unwrap(), model[0][65_000..66_000]);
        assert_eq!(disk.slots().unwrap(), [0, 1, 3]);
        let report = disk.verify().unwrap();
        assert!(report.clean(), "{report:?}");
        assert_eq!(report.slots, 3);
        // A flipped byte on the disk: the read names the segment, verify the slot.
        let path = dir.path().join("disk/superchunks/slot-000003");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[70_000] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        match disk.read(3, 69_000, 2000) {
            Err(RaidpError::Corrupt { slot: 3, segment: 1 }) => {}
            other => panic!("{other:?}"),
        }
        let report = disk.verify().unwrap();
        assert_eq!(report.corrupt_slots, [3]);
        assert!(!report.clean());
        assert!(disk.write(0, BYTES - 10, &[0; 11]).is_err(), "past the superchunk");
    }

    #[test]
    fn a_trim_folds_the_slot_out_of_the_parity_and_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = open(dir.path());
        for (slot, seed) in [(0u32, 1u64), (1, 2), (2, 3)] {
            let seq = disk.write(slot, 0, &pattern(250_000 + slot as usize * 7, seed)).unwrap();
            disk.clear(&[seq]).unwrap();
        }
        // Several windows, the last one short.
        assert_eq!(disk.trim_in_windows(1, 2 * SEGMENT).unwrap(), 250_007);
        assert_eq!(disk.slots().unwrap(), [0, 2], "the slot's files are gone");
        assert_eq!(disk.read(1, 0, 1000).unwrap(), vec![0; 1000], "a trimmed slot reads zeros");
        let report = disk.verify().unwrap();
        assert!(report.clean(), "the parity is the fold of what is left: {report:?}");
        assert_eq!(disk.lstor().pending_count(), 0);
        assert_eq!(disk.trim(1).unwrap(), 0, "again: nothing to do");
        // The slot takes appends again, as a fresh one.
        let seq = disk.write(1, 0, &pattern(10_000, 9)).unwrap();
        disk.clear(&[seq]).unwrap();
        assert!(disk.verify().unwrap().clean());
        // A corrupt segment stops the trim (its bytes cannot be folded out), parity intact.
        let path = dir.path().join("disk/superchunks/slot-000000");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[200_000] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(disk.trim(0), Err(RaidpError::Corrupt { slot: 0, .. })));
        bytes[200_000] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(disk.verify().unwrap().clean());
        assert_eq!(disk.trim(0).unwrap(), 250_000);
        assert!(disk.verify().unwrap().clean());
    }

    #[test]
    fn a_crash_mid_write_is_made_true_at_open_and_a_lost_lstor_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = open(dir.path());
        let first = disk.write(2, 0, &pattern(150_000, 7)).unwrap();
        disk.lstor().clear(first).unwrap();
        // Journal written, then the crash: neither disk nor parity saw the write.
        let new = pattern(80_000, 8);
        let old = disk.read(2, 40_000, 80_000).unwrap();
        let pending = disk.lstor().begin(2, 40_000, Some(&old), &new).unwrap();
        drop(pending);
        drop(disk);
        let (disk, pending) = open(dir.path());
        assert_eq!(pending.len(), 1, "the record is handed back to resolve with the partner");
        assert_eq!(disk.read(2, 40_000, 80_000).unwrap(), new, "the data is rewritten");
        assert!(disk.verify().unwrap().clean(), "and the parity replayed");
        disk.lstor().clear(pending[0].seq).unwrap();
        drop(disk);
        // The Lstor is gone (its device died): the disk refuses RAIDP work, slots or not.
        std::fs::remove_dir_all(dir.path().join("lstor")).unwrap();
        let error = RaidpDisk::open(
            &dir.path().join("disk"),
            &dir.path().join("lstor"),
            "node-3/disk-1",
            Some((BYTES, 2)),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("no Lstor") && error.to_string().contains("no RAIDP write"),
            "{error}"
        );
    }
}
