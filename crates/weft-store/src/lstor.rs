//! The Lstor of a RAIDP disk (paper §3.2, §3.4): beside each disk, a small store that fails
//! independently of it, holding one superchunk-sized parity of every slot of the disk (two with
//! `--lstors 2`) and an append-only journal of the writes in flight.
//!
//! Parity: parity 0 is the XOR of the disk's slots, byte by byte at the same offset within
//! the slot; parity 1 (stacked) is Σ g^slot · slot over GF(2^8) (g = 2), so two lost slots of
//! one disk are solved from both ([`solve_two`]). Unwritten bytes are zeros on the disk and in
//! the parity alike, so a fresh append folds new data in without reading the disk.
//!
//! The write protocol, per write of `new` over `old` at (slot, offset) of the disk:
//! 1. [`Lstor::begin`] takes the Lstor's update lock, computes the new parity bytes from the
//!    current ones, appends a journal record and syncs it — for an update (slot, offset, new
//!    data, new parity), for a fresh append (slot, offset, length, parity before it);
//! 2. the caller writes `new` to the disk and syncs it;
//! 3. [`Pending::commit`] writes the new parity bytes and releases the lock;
//! 4. once the partner replica acknowledges its own write, [`Lstor::clear`] marks the record
//!    done.
//!
//! Invariants:
//! - A journal record never holds a delta, so replaying it after a crash at any step is
//!   idempotent: [`Lstor::pending`] lists the records not cleared, in order; for an update
//!   the caller rewrites its data and [`Lstor::replay`] its parity; for an append (the bytes
//!   it replaced were zeros) the caller keeps what landed on the disk and [`Lstor::replay`]
//!   sets the parity to the one before ⊕ those bytes.
//! - Parity updates are serialized by one lock per Lstor: a record's parity was computed from
//!   the parity every earlier record left, so replaying records in order ends where the
//!   writes did.
//! - A record is valid only whole (crc32c over it): a torn record at the journal's tail (a
//!   crash while appending, before step 2 could start) is ignored; a bad record before the
//!   tail means the journal is corrupt, and opening refuses (`LstorError::Corrupt`).
//! - The journal is a head (magic, epoch) and entries of that epoch. Emptying it
//!   ([`Lstor::compact`], nothing pending) writes a new epoch into the head and starts over
//!   at its first entry: the file keeps its length and its pages, and what lies past the
//!   last entry of the current epoch is ignored. Under load that never leaves it empty, a
//!   journal past [`JOURNAL_REWRITE_BYTES`] is rewritten with its pending records only, so it
//!   stays bounded.
//! - A journal record is written straight from the caller's data and the new parity kept in
//!   reusable scratch buffers: no allocation of the write's size per write.
//! - An Lstor belongs to one disk: its header names the disk's identity, and opening it for
//!   another disk refuses (`LstorError::WrongDisk`). A missing Lstor is `LstorError::Missing`.
//!
//! The Lstor is a device (NVRAM, an NVMe namespace, or a file under /dev/shm in `weft up`):
//! its files are opened read-write with std IO, not through the disk's [`crate::Fs`].

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Most parities one Lstor stack keeps (`--lstors`).
pub const MAX_PARITIES: usize = 2;

/// Most slots a disk may have when it keeps the second (Reed-Solomon) parity: the slots'
/// coefficients g^slot must differ.
pub const MAX_RS_SLOTS: u32 = 255;

/// Largest single write one journal record holds.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

const HEADER_FILE: &str = "lstor.header";
const JOURNAL_FILE: &str = "journal";
const HEADER_MAGIC: &[u8; 8] = b"WEFTLST1";
const JOURNAL_MAGIC: u32 = 0x5754_4a48; // "WTJH"
const RECORD_MAGIC: u32 = 0x5754_4a52; // "WTJR"
const KIND_WRITE: u8 = 1;
const KIND_APPEND: u8 = 3;
const KIND_CLEAR: u8 = 2;

/// Bytes of the journal's head: magic, epoch, crc32c. Entries follow.
const JOURNAL_HEAD_BYTES: u64 = 16;

/// A journal longer than this while records stay pending is rewritten with only those.
const JOURNAL_REWRITE_BYTES: u64 = 256 << 20;

fn parity_file(index: usize) -> String {
    format!("parity-{index}")
}

/// Why an Lstor could not be used.
#[derive(Debug)]
pub enum LstorError {
    /// No Lstor at the path (never created, or lost).
    Missing { dir: PathBuf },
    /// The Lstor's files do not read as an Lstor.
    Corrupt { dir: PathBuf, reason: String },
    /// The Lstor belongs to another disk.
    WrongDisk { dir: PathBuf, expected: String, found: String },
    /// A write the Lstor cannot take (outside the superchunk, too large, bad slot).
    BadWrite { reason: String },
    /// The device failed.
    Io { dir: PathBuf, source: io::Error },
}

impl std::fmt::Display for LstorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LstorError::Missing { dir } => write!(f, "no Lstor at {}", dir.display()),
            LstorError::Corrupt { dir, reason } => {
                write!(f, "the Lstor at {} is corrupt: {reason}", dir.display())
            }
            LstorError::WrongDisk { dir, expected, found } => {
                write!(f, "the Lstor at {} belongs to disk {found}, not {expected}", dir.display())
            }
            LstorError::BadWrite { reason } => write!(f, "Lstor write refused: {reason}"),
            LstorError::Io { dir, source } => write!(f, "Lstor {}: {source}", dir.display()),
        }
    }
}

impl std::error::Error for LstorError {}

/// One journaled write at (slot, offset) of `len` bytes.
///
/// An update (a write over bytes that may be non-zero) keeps its data and the parity it
/// leaves: replay writes both. A fresh append (over zeros) keeps only the parity *before* it
/// (`append`, no data): whatever a crash left of the append on the disk, the parity is that
/// one plus the disk's bytes now ([`JournalRecord::appended_parity`]) — half the journal's
/// bytes, and the data is on the partner replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    pub seq: u64,
    pub slot: u32,
    pub offset: u64,
    pub len: usize,
    /// A fresh append: `data` is empty and `parity` is the parity before the write.
    pub append: bool,
    /// The written bytes (updates only).
    pub data: Vec<u8>,
    /// One per parity, each `len` bytes: after the write (updates), before it (appends).
    pub parity: Vec<Vec<u8>>,
}

impl JournalRecord {
    /// For an append record: the parity that makes `disk` (the range's bytes on the disk
    /// now, zeros where nothing landed) true — the parity before the write plus `disk`.
    pub fn appended_parity(&self, disk: &[u8]) -> Vec<Vec<u8>> {
        debug_assert!(self.append && disk.len() == self.len);
        let mut out = self.parity.clone();
        for (index, bytes) in out.iter_mut().enumerate() {
            weft_gf::mul_add_region(coefficient(index, self.slot), disk, bytes);
        }
        out
    }
}

/// Bytes every journal entry starts with: magic, kind, epoch, seq.
const ENTRY_PREFIX_BYTES: usize = 21;

/// Bytes of a write record's head (the prefix, then slot, offset, length, parities); the
/// data, each parity and a crc32c of all of it follow.
const WRITE_HEAD_BYTES: usize = ENTRY_PREFIX_BYTES + 17;

/// Bytes of a clear entry (the prefix and its crc32c).
const CLEAR_BYTES: usize = ENTRY_PREFIX_BYTES + 4;

fn entry_prefix(out: &mut [u8], kind: u8, epoch: u64, seq: u64) {
    out[..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    out[4] = kind;
    out[5..13].copy_from_slice(&epoch.to_le_bytes());
    out[13..21].copy_from_slice(&seq.to_le_bytes());
}

#[allow(clippy::too_many_arguments)]
fn write_head(
    append: bool,
    epoch: u64,
    seq: u64,
    slot: u32,
    offset: u64,
    len: usize,
    parities: usize,
) -> [u8; WRITE_HEAD_BYTES] {
    let mut head = [0u8; WRITE_HEAD_BYTES];
    let kind = if append { KIND_APPEND } else { KIND_WRITE };
    entry_prefix(&mut head, kind, epoch, seq);
    head[21..25].copy_from_slice(&slot.to_le_bytes());
    head[25..33].copy_from_slice(&offset.to_le_bytes());
    head[33..37].copy_from_slice(&(len as u32).to_le_bytes());
    head[37] = parities as u8;
    head
}

impl JournalRecord {
    /// The record as a journal entry of `epoch`.
    fn encode(&self, epoch: u64) -> Vec<u8> {
        let head = write_head(
            self.append,
            epoch,
            self.seq,
            self.slot,
            self.offset,
            self.len,
            self.parity.len(),
        );
        let mut out = head.to_vec();
        out.extend_from_slice(&self.data);
        self.parity.iter().for_each(|p| out.extend_from_slice(p));
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

fn encode_clear(epoch: u64, seq: u64) -> [u8; CLEAR_BYTES] {
    let mut out = [0u8; CLEAR_BYTES];
    entry_prefix(&mut out, KIND_CLEAR, epoch, seq);
    let crc = crc32c::crc32c(&out[..ENTRY_PREFIX_BYTES]);
    out[ENTRY_PREFIX_BYTES..].copy_from_slice(&crc.to_le_bytes());
    out
}

fn journal_head(epoch: u64) -> [u8; JOURNAL_HEAD_BYTES as usize] {
    let mut head = [0u8; JOURNAL_HEAD_BYTES as usize];
    head[..4].copy_from_slice(&JOURNAL_MAGIC.to_le_bytes());
    head[4..12].copy_from_slice(&epoch.to_le_bytes());
    let crc = crc32c::crc32c(&head[..12]);
    head[12..].copy_from_slice(&crc.to_le_bytes());
    head
}

/// What the journal holds: its epoch, the write records not cleared, in order, and where
/// its valid entries end.
struct Scanned {
    epoch: u64,
    pending: Vec<JournalRecord>,
    valid_len: u64,
    next_seq: u64,
}

/// One journal entry of `epoch` parsed at the start of `rest`: its length, and the write
/// record or the cleared sequence number. None when no whole, valid entry of that epoch
/// starts there.
fn parse(rest: &[u8], epoch: u64) -> Option<(usize, Result<JournalRecord, u64>)> {
    let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().unwrap());
    if rest.len() < CLEAR_BYTES || u32_at(0) != RECORD_MAGIC || u64_at(5) != epoch {
        return None;
    }
    let seq = u64_at(13);
    match rest[4] {
        KIND_CLEAR => (crc32c::crc32c(&rest[..ENTRY_PREFIX_BYTES]) == u32_at(ENTRY_PREFIX_BYTES))
            .then_some((CLEAR_BYTES, Err(seq))),
        kind @ (KIND_WRITE | KIND_APPEND) if rest.len() >= WRITE_HEAD_BYTES => {
            let append = kind == KIND_APPEND;
            let len = u32_at(33) as usize;
            let parities = rest[37] as usize;
            if len > MAX_RECORD_BYTES || parities == 0 || parities > MAX_PARITIES {
                return None;
            }
            let pieces = parities + usize::from(!append);
            let body = WRITE_HEAD_BYTES + len * pieces;
            if rest.len() < body + 4 || crc32c::crc32c(&rest[..body]) != u32_at(body) {
                return None;
            }
            let at = |i: usize| WRITE_HEAD_BYTES + len * i;
            let first_parity = usize::from(!append);
            let record = JournalRecord {
                seq,
                slot: u32_at(21),
                offset: u64_at(25),
                len,
                append,
                data: if append { Vec::new() } else { rest[at(0)..at(1)].to_vec() },
                parity: (first_parity..pieces).map(|p| rest[at(p)..at(p + 1)].to_vec()).collect(),
            };
            Some((body + 4, Ok(record)))
        }
        _ => None,
    }
}

/// Reads a journal: its head, then records and clears of its epoch until the end, a torn
/// tail, or the entries a compaction left behind (an older epoch's).
fn scan(bytes: &[u8]) -> Result<Scanned, String> {
    if bytes.is_empty() {
        return Ok(Scanned { epoch: 0, pending: Vec::new(), valid_len: 0, next_seq: 0 });
    }
    let head = JOURNAL_HEAD_BYTES as usize;
    if bytes.len() < head
        || u32::from_le_bytes(bytes[..4].try_into().unwrap()) != JOURNAL_MAGIC
        || crc32c::crc32c(&bytes[..12]) != u32::from_le_bytes(bytes[12..16].try_into().unwrap())
    {
        return Err("the journal's head is damaged".into());
    }
    let epoch = u64::from_le_bytes(bytes[4..12].try_into().unwrap());
    let mut at = head;
    let mut open: std::collections::BTreeMap<u64, JournalRecord> = Default::default();
    let mut next_seq = 0;
    while at < bytes.len() {
        match parse(&bytes[at..], epoch) {
            Some((length, entry)) => {
                match entry {
                    Ok(record) => {
                        next_seq = next_seq.max(record.seq + 1);
                        open.insert(record.seq, record);
                    }
                    Err(cleared) => {
                        open.remove(&cleared);
                    }
                }
                at += length;
            }
            None => {
                // A torn tail (a crash while appending) has nothing of this epoch after it;
                // a valid entry of this epoch further on means this one was damaged.
                if (at + 1..bytes.len()).any(|i| parse(&bytes[i..], epoch).is_some()) {
                    return Err(format!("journal record at byte {at} is damaged"));
                }
                break;
            }
        }
    }
    Ok(Scanned { epoch, pending: open.into_values().collect(), valid_len: at as u64, next_seq })
}

/// The journal's state, behind the Lstor's update lock (held across a write's steps 1–3).
#[derive(Debug)]
struct Journal {
    file: File,
    /// Entries of this epoch are the journal's; older ones past `end` are left-overs of a
    /// compaction (read as the end).
    epoch: u64,
    /// The next record's sequence number.
    next_seq: u64,
    /// Where the next entry goes.
    end: u64,
    /// One buffer per parity: the new parity bytes of the write in progress. Kept from write
    /// to write, so a write allocates (and faults in) no fresh memory.
    scratch: Vec<Vec<u8>>,
}

/// The Lstor of one disk.
#[derive(Debug)]
pub struct Lstor {
    dir: PathBuf,
    superchunk_bytes: u64,
    parity: Vec<File>,
    journal: Mutex<Journal>,
    /// The sequence numbers of the records pending now (what a scan of the journal would
    /// find), kept so that counting them and emptying the journal read nothing.
    open_seqs: Mutex<std::collections::BTreeSet<u64>>,
    /// Bytes written to the device since it was opened (journal and parity).
    written: std::sync::atomic::AtomicU64,
}

/// A write between its journal record and its parity update (steps 1–3): holds the Lstor's
/// update lock. Dropping it without [`Pending::commit`] leaves the record pending, as a crash
/// would.
pub struct Pending<'a> {
    lstor: &'a Lstor,
    seq: u64,
    offset: u64,
    len: usize,
    /// The new parity bytes wait in the journal's scratch buffers.
    journal: MutexGuard<'a, Journal>,
}

impl std::fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("seq", &self.seq)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl Pending<'_> {
    /// The journal record's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Step 3: writes the record's parity bytes (durable by the journal record until
    /// [`Lstor::sync_parity`]); returns its sequence number for [`Lstor::clear`].
    pub fn commit(self) -> Result<u64, LstorError> {
        for (file, bytes) in self.lstor.parity.iter().zip(&self.journal.scratch) {
            file.write_all_at(&bytes[..self.len], self.offset).map_err(|e| self.lstor.io(e))?;
        }
        self.lstor.count((self.len * self.lstor.parity.len()) as u64);
        Ok(self.seq)
    }
}

impl Lstor {
    fn io(&self, source: io::Error) -> LstorError {
        LstorError::Io { dir: self.dir.clone(), source }
    }

    /// Creates the Lstor of disk `disk_id` in `dir`: zero parity (`parities` of them, each
    /// `superchunk_bytes`) and an empty journal. Refuses when one is there already.
    pub fn create(
        dir: &Path,
        disk_id: &str,
        superchunk_bytes: u64,
        parities: usize,
    ) -> Result<Lstor, LstorError> {
        let io = |source| LstorError::Io { dir: dir.to_path_buf(), source };
        if parities == 0 || parities > MAX_PARITIES {
            return Err(LstorError::BadWrite {
                reason: format!("{parities} parities; an Lstor stack keeps 1 to {MAX_PARITIES}"),
            });
        }
        if superchunk_bytes == 0 || disk_id.is_empty() || disk_id.len() > 255 {
            return Err(LstorError::BadWrite {
                reason: "the superchunk size must be positive and the disk named".into(),
            });
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        if dir.join(HEADER_FILE).exists() {
            return Err(LstorError::Corrupt {
                dir: dir.to_path_buf(),
                reason: "an Lstor is already there; open it instead".into(),
            });
        }
        for index in 0..parities {
            let file = File::create(dir.join(parity_file(index))).map_err(io)?;
            file.set_len(superchunk_bytes).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        File::create(dir.join(JOURNAL_FILE)).and_then(|f| f.sync_all()).map_err(io)?;
        // The header last: an Lstor is complete once it is there.
        let mut header = Vec::new();
        header.extend_from_slice(HEADER_MAGIC);
        header.extend_from_slice(&superchunk_bytes.to_le_bytes());
        header.push(parities as u8);
        header.push(disk_id.len() as u8);
        header.extend_from_slice(disk_id.as_bytes());
        let crc = crc32c::crc32c(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        let temp = dir.join(format!("{HEADER_FILE}.tmp"));
        let mut file = File::create(&temp).map_err(io)?;
        file.write_all(&header).and_then(|_| file.sync_all()).map_err(io)?;
        std::fs::rename(&temp, dir.join(HEADER_FILE)).map_err(io)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        Lstor::open(dir, disk_id)
    }

    /// Opens the Lstor in `dir`, which must belong to disk `disk_id`. Checks its header and
    /// journal (a torn tail is dropped); pending records stay for [`Lstor::pending`].
    pub fn open(dir: &Path, disk_id: &str) -> Result<Lstor, LstorError> {
        let io = |source| LstorError::Io { dir: dir.to_path_buf(), source };
        let corrupt = |reason: String| LstorError::Corrupt { dir: dir.to_path_buf(), reason };
        let mut header = Vec::new();
        match File::open(dir.join(HEADER_FILE)) {
            Ok(mut file) => file.read_to_end(&mut header).map_err(io)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(LstorError::Missing { dir: dir.to_path_buf() })
            }
            Err(e) => return Err(io(e)),
        };
        if header.len() < 22 || &header[..8] != HEADER_MAGIC {
            return Err(corrupt("the header is not an Lstor header".into()));
        }
        let body = header.len() - 4;
        if crc32c::crc32c(&header[..body]) != u32::from_le_bytes(header[body..].try_into().unwrap())
        {
            return Err(corrupt("the header's checksum does not match".into()));
        }
        let superchunk_bytes = u64::from_le_bytes(header[8..16].try_into().unwrap());
        let parities = header[16] as usize;
        let id_len = header[17] as usize;
        if 18 + id_len != body || parities == 0 || parities > MAX_PARITIES {
            return Err(corrupt("the header's fields do not add up".into()));
        }
        let found = String::from_utf8_lossy(&header[18..18 + id_len]).into_owned();
        if found != disk_id {
            return Err(LstorError::WrongDisk {
                dir: dir.to_path_buf(),
                expected: disk_id.to_string(),
                found,
            });
        }
        let mut parity = Vec::new();
        for index in 0..parities {
            let path = dir.join(parity_file(index));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| corrupt(format!("parity {index} cannot be opened: {e}")))?;
            let len = file.metadata().map_err(io)?.len();
            if len != superchunk_bytes {
                return Err(corrupt(format!(
                    "parity {index} holds {len} bytes, not one superchunk ({superchunk_bytes})"
                )));
            }
            parity.push(file);
        }
        let journal_path = dir.join(JOURNAL_FILE);
        let mut journal = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&journal_path)
            .map_err(|e| corrupt(format!("the journal cannot be opened: {e}")))?;
        let mut bytes = Vec::new();
        journal.read_to_end(&mut bytes).map_err(io)?;
        let mut scanned = scan(&bytes).map_err(corrupt)?;
        if bytes.is_empty() {
            // A new journal: its head first.
            journal
                .write_all_at(&journal_head(0), 0)
                .and_then(|_| journal.sync_data())
                .map_err(io)?;
            scanned.valid_len = JOURNAL_HEAD_BYTES;
        } else if scanned.valid_len < bytes.len() as u64 {
            journal.set_len(scanned.valid_len).and_then(|_| journal.sync_all()).map_err(io)?;
        }
        Ok(Lstor {
            dir: dir.to_path_buf(),
            superchunk_bytes,
            parity,
            journal: Mutex::new(Journal {
                file: journal,
                epoch: scanned.epoch,
                next_seq: scanned.next_seq,
                end: scanned.valid_len,
                scratch: Vec::new(),
            }),
            open_seqs: Mutex::new(scanned.pending.iter().map(|r| r.seq).collect()),
            written: Default::default(),
        })
    }

    pub fn superchunk_bytes(&self) -> u64 {
        self.superchunk_bytes
    }

    /// Bytes written to the Lstor's device since it was opened: journal records and parity.
    pub fn bytes_written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self, bytes: u64) {
        self.written.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn parities(&self) -> usize {
        self.parity.len()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `len` bytes of parity `index` from `offset`.
    pub fn parity(&self, index: usize, offset: u64, len: usize) -> Result<Vec<u8>, LstorError> {
        self.check_range(offset, len)?;
        let file = self.parity.get(index).ok_or_else(|| LstorError::BadWrite {
            reason: format!("no parity {index} (the stack keeps {})", self.parity.len()),
        })?;
        let mut out = vec![0u8; len];
        file.read_exact_at(&mut out, offset).map_err(|e| self.io(e))?;
        Ok(out)
    }

    fn check_range(&self, offset: u64, len: usize) -> Result<(), LstorError> {
        if len > MAX_RECORD_BYTES || offset.saturating_add(len as u64) > self.superchunk_bytes {
            return Err(LstorError::BadWrite {
                reason: format!(
                    "{len} bytes at offset {offset} do not fit a superchunk of {} bytes \
                     (or exceed {MAX_RECORD_BYTES} in one write)",
                    self.superchunk_bytes
                ),
            });
        }
        Ok(())
    }

    /// Step 1 of a write of `new` over `old` (zeros for a fresh append: pass None) at
    /// (`slot`, `offset`): computes the new parity, journals it durably, and returns the
    /// pending write holding the update lock.
    pub fn begin(
        &self,
        slot: u32,
        offset: u64,
        old: Option<&[u8]>,
        new: &[u8],
    ) -> Result<Pending<'_>, LstorError> {
        self.check_range(offset, new.len())?;
        if old.is_some_and(|old| old.len() != new.len()) {
            return Err(LstorError::BadWrite {
                reason: "old and new data differ in length".into(),
            });
        }
        if self.parity.len() > 1 && slot >= MAX_RS_SLOTS {
            return Err(LstorError::BadWrite {
                reason: format!(
                    "slot {slot}: with two parities a disk has at most {MAX_RS_SLOTS} slots"
                ),
            });
        }
        let mut guard = self.lock();
        let journal = &mut *guard;
        let len = new.len();
        let append = old.is_none();
        journal.scratch.resize_with(self.parity.len(), Vec::new);
        // The parity now; an update's new parity = old parity + g·old + g·new (over GF(2^8),
        // + is XOR): no delta buffer.
        for (index, bytes) in journal.scratch.iter_mut().enumerate() {
            if bytes.len() < len {
                bytes.resize(len, 0);
            }
            let bytes = &mut bytes[..len];
            self.parity[index].read_exact_at(bytes, offset).map_err(|e| self.io(e))?;
            if let Some(old) = old {
                let g = coefficient(index, slot);
                weft_gf::mul_add_region(g, old, bytes);
                weft_gf::mul_add_region(g, new, bytes);
            }
        }
        // The record goes to the journal piece by piece, straight from the caller's data
        // and the scratch parity: no encoded copy. An append's record is its head and the
        // parity before it; an update's, its head, data and the parity after it.
        let seq = journal.next_seq;
        let head = write_head(append, journal.epoch, seq, slot, offset, len, self.parity.len());
        let mut crc = crc32c::crc32c(&head);
        let mut at = journal.end;
        let put = |bytes: &[u8], at: &mut u64| -> Result<(), LstorError> {
            journal.file.write_all_at(bytes, *at).map_err(|e| self.io(e))?;
            *at += bytes.len() as u64;
            Ok(())
        };
        put(&head, &mut at)?;
        if !append {
            crc = crc32c::crc32c_append(crc, new);
            put(new, &mut at)?;
        }
        for bytes in &journal.scratch {
            crc = crc32c::crc32c_append(crc, &bytes[..len]);
            put(&bytes[..len], &mut at)?;
        }
        put(&crc.to_le_bytes(), &mut at)?;
        journal.file.sync_data().map_err(|e| self.io(e))?;
        self.count(at - journal.end);
        journal.end = at;
        journal.next_seq += 1;
        if append {
            // Now the parity after it, for step 3.
            for (index, bytes) in journal.scratch.iter_mut().enumerate() {
                weft_gf::mul_add_region(coefficient(index, slot), new, &mut bytes[..len]);
            }
        }
        self.open_seqs().insert(seq);
        Ok(Pending { lstor: self, seq, offset, len, journal: guard })
    }

    fn write_parity(&self, offset: u64, parity: &[Vec<u8>]) -> Result<(), LstorError> {
        for (file, bytes) in self.parity.iter().zip(parity) {
            file.write_all_at(bytes, offset).map_err(|e| self.io(e))?;
            self.count(bytes.len() as u64);
        }
        self.sync_parity()
    }

    /// Makes every parity write so far durable: before a record is cleared, its parity must
    /// be (the record is what made it durable until then).
    pub fn sync_parity(&self) -> Result<(), LstorError> {
        for file in &self.parity {
            file.sync_data().map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    /// Step 4: the partner acknowledged; record `seq` is done.
    pub fn clear(&self, seq: u64) -> Result<(), LstorError> {
        let mut journal = self.lock();
        let entry = encode_clear(journal.epoch, seq);
        journal.file.write_all_at(&entry, journal.end).map_err(|e| self.io(e))?;
        journal.end += entry.len() as u64;
        self.open_seqs().remove(&seq);
        Ok(())
    }

    fn open_seqs(&self) -> MutexGuard<'_, std::collections::BTreeSet<u64>> {
        self.open_seqs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many records are pending (none read from the journal).
    pub fn pending_count(&self) -> usize {
        self.open_seqs().len()
    }

    /// The journaled writes not cleared, in order (after a crash: the writes whose data and
    /// parity the caller must make true again, and whose partner must be asked).
    pub fn pending(&self) -> Result<Vec<JournalRecord>, LstorError> {
        self.pending_in(&self.lock())
    }

    /// The pending records of `journal` (the caller holds the lock): its entries up to its
    /// end, not the left-overs of older epochs past it.
    fn pending_in(&self, journal: &Journal) -> Result<Vec<JournalRecord>, LstorError> {
        let mut bytes = vec![0u8; journal.end as usize];
        journal.file.read_exact_at(&mut bytes, 0).map_err(|e| self.io(e))?;
        let scanned =
            scan(&bytes).map_err(|reason| LstorError::Corrupt { dir: self.dir.clone(), reason })?;
        Ok(scanned.pending)
    }

    /// Makes the parity what `record` says (idempotent: replay pending records in order).
    ///
    /// An append record needs `disk`: the range's bytes on the disk now (zeros where nothing
    /// landed); an update record's data is on the disk again before this.
    pub fn replay(&self, record: &JournalRecord, disk: Option<&[u8]>) -> Result<(), LstorError> {
        self.check_range(record.offset, record.len)?;
        if record.parity.len() != self.parity.len() {
            return Err(LstorError::Corrupt {
                dir: self.dir.clone(),
                reason: format!(
                    "record {} carries {} parities, the stack keeps {}",
                    record.seq,
                    record.parity.len(),
                    self.parity.len()
                ),
            });
        }
        let appended;
        let parity = match (record.append, disk) {
            (false, _) => &record.parity,
            (true, Some(disk)) if disk.len() == record.len => {
                appended = record.appended_parity(disk);
                &appended
            }
            (true, _) => {
                return Err(LstorError::BadWrite {
                    reason: format!(
                        "append record {} replayed without its range's bytes",
                        record.seq
                    ),
                })
            }
        };
        let _guard = self.lock();
        self.write_parity(record.offset, parity)
    }

    /// Empties the journal when no record is pending (call after a replay, or when idle):
    /// a new epoch in its head, so the entries after it are left-overs, and the next entry
    /// goes where the first did (the device's pages are reused, not freed and faulted in
    /// again). A journal grown past [`JOURNAL_REWRITE_BYTES`] while records stay pending is
    /// rewritten with those records only. Returns whether the journal was emptied.
    pub fn compact(&self) -> Result<bool, LstorError> {
        // One lock for the check and the reset: a write begun between them would lose its
        // record.
        let mut journal = self.lock();
        let journal = &mut *journal;
        if self.open_seqs().is_empty() {
            let epoch = journal.epoch + 1;
            journal
                .file
                .write_all_at(&journal_head(epoch), 0)
                .and_then(|_| journal.file.sync_data())
                .map_err(|e| self.io(e))?;
            journal.epoch = epoch;
            journal.end = JOURNAL_HEAD_BYTES;
            return Ok(true);
        }
        if journal.end > JOURNAL_REWRITE_BYTES {
            self.rewrite(journal)?;
        }
        Ok(false)
    }

    /// Replaces the journal by one of a new epoch holding only its pending records.
    fn rewrite(&self, journal: &mut Journal) -> Result<(), LstorError> {
        let pending = self.pending_in(journal)?;
        let epoch = journal.epoch + 1;
        let mut bytes = journal_head(epoch).to_vec();
        for record in &pending {
            bytes.extend_from_slice(&record.encode(epoch));
        }
        let (path, temp) = (self.dir.join(JOURNAL_FILE), self.dir.join("journal.new"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()).map(|_| f))
            .map_err(|e| self.io(e))?;
        std::fs::rename(&temp, &path)
            .and_then(|_| File::open(&self.dir)?.sync_all())
            .map_err(|e| self.io(e))?;
        journal.file = file;
        journal.epoch = epoch;
        journal.end = bytes.len() as u64;
        Ok(())
    }

    /// Folds a whole slot's bytes into running parities `acc` (one per parity of this stack):
    /// what a scrub compares with [`Lstor::parity`].
    pub fn fold(&self, slot: u32, data: &[u8], acc: &mut [Vec<u8>]) {
        for (index, parity) in acc.iter_mut().enumerate().take(self.parity.len()) {
            weft_gf::mul_add_region(coefficient(index, slot), data, parity);
        }
    }
}

/// Coefficient of `slot` in parity `index`: 1 for the XOR parity, g^slot for the second
/// (`weft_gf::pq`).
pub use weft_gf::pq::{coefficient, solve_two};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An in-memory disk of `slots` slots beside an Lstor, written through the protocol.
    struct Bench {
        lstor: Lstor,
        slots: Vec<Vec<u8>>,
        _dir: tempfile::TempDir,
        dir: PathBuf,
    }

    fn bench(slots: usize, bytes: u64, parities: usize) -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lstor");
        let lstor = Lstor::create(&path, "node-1/disk-0", bytes, parities).unwrap();
        Bench { lstor, slots: vec![vec![0; bytes as usize]; slots], _dir: dir, dir: path }
    }

    /// `len` pseudo-random bytes from `seed` (the crate's RAIDP tests share it).
    pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect()
    }

    impl Bench {
        fn write(&mut self, slot: u32, offset: u64, new: &[u8], fresh: bool) {
            let range = offset as usize..offset as usize + new.len();
            let old = self.slots[slot as usize][range.clone()].to_vec();
            let pending =
                self.lstor.begin(slot, offset, (!fresh).then_some(&old[..]), new).unwrap();
            self.slots[slot as usize][range].copy_from_slice(new);
            let seq = pending.commit().unwrap();
            self.lstor.clear(seq).unwrap();
        }

        fn expected(&self) -> Vec<Vec<u8>> {
            let mut acc =
                vec![vec![0u8; self.lstor.superchunk_bytes() as usize]; self.lstor.parities()];
            for (slot, data) in self.slots.iter().enumerate() {
                self.lstor.fold(slot as u32, data, &mut acc);
            }
            acc
        }

        fn check(&self) {
            let len = self.lstor.superchunk_bytes() as usize;
            for (index, expected) in self.expected().iter().enumerate() {
                assert_eq!(&self.lstor.parity(index, 0, len).unwrap(), expected, "parity {index}");
            }
        }
    }

    #[test]
    fn parity_follows_appends_and_updates_and_solves_lost_slots() {
        let mut b = bench(6, 4096, 2);
        // Fresh appends fold in without old data; updates read-modify-write.
        for slot in 0..6u32 {
            b.write(slot, 0, &pattern(1024, slot as u64), true);
        }
        b.check();
        b.write(2, 512, &pattern(1000, 99), false);
        b.write(4, 3000, &pattern(1096, 7), true);
        b.check();
        // One lost slot: parity 0 ⊕ the others.
        let mut p = b.lstor.parity(0, 0, 4096).unwrap();
        for (_, data) in b.slots.iter().enumerate().filter(|(s, _)| *s != 3) {
            weft_gf::xor_region(data, &mut p);
        }
        assert_eq!(p, b.slots[3]);
        // Two lost slots of one disk (stacked Lstors): both parities.
        let (i, j) = (1u32, 4u32);
        let mut p = b.lstor.parity(0, 0, 4096).unwrap();
        let mut q = b.lstor.parity(1, 0, 4096).unwrap();
        for (slot, data) in b.slots.iter().enumerate() {
            if slot as u32 != i && slot as u32 != j {
                weft_gf::xor_region(data, &mut p);
                weft_gf::mul_add_region(coefficient(1, slot as u32), data, &mut q);
            }
        }
        let (x, y) = solve_two(&p, &q, i, j);
        assert_eq!((x, y), (b.slots[1].clone(), b.slots[4].clone()));
    }

    #[test]
    fn a_crash_at_every_step_replays_to_the_same_parity() {
        for crash_after in ["journal", "disk", "parity"] {
            let mut b = bench(3, 2048, 1);
            b.write(0, 0, &pattern(2048, 1), true);
            b.write(1, 100, &pattern(500, 2), true);
            let new = pattern(700, 3);
            let old = b.slots[0][200..900].to_vec();
            let pending = b.lstor.begin(0, 200, Some(&old), &new).unwrap();
            let seq = pending.seq();
            match crash_after {
                "journal" => drop(pending),
                "disk" => {
                    b.slots[0][200..900].copy_from_slice(&new);
                    drop(pending);
                }
                _ => {
                    b.slots[0][200..900].copy_from_slice(&new);
                    pending.commit().unwrap();
                }
            }
            // Restart: the record is pending; the caller rewrites its data, the Lstor its
            // parity (twice even: idempotent).
            drop(b.lstor);
            b.lstor = Lstor::open(&b.dir, "node-1/disk-0").unwrap();
            let pending = b.lstor.pending().unwrap();
            assert_eq!(pending.len(), 1, "after a crash past the {crash_after}");
            let record = &pending[0];
            assert_eq!((record.seq, record.slot, record.offset), (seq, 0, 200));
            assert_eq!(record.data, new);
            assert_eq!(record.parity.len(), 1);
            // (The parity it leaves is checked below: replayed, it must equal the fold.)
            for record in &pending {
                let at = record.offset as usize;
                b.slots[record.slot as usize][at..at + record.data.len()]
                    .copy_from_slice(&record.data);
                b.lstor.replay(record, None).unwrap();
                b.lstor.replay(record, None).unwrap();
                b.lstor.clear(record.seq).unwrap();
            }
            b.check();
            assert!(b.lstor.compact().unwrap());
            assert!(b.lstor.pending().unwrap().is_empty());
            // Writes go on after the replay.
            b.write(2, 0, &pattern(100, 4), true);
            b.check();
        }
    }

    #[test]
    fn a_crash_during_a_fresh_append_replays_from_the_disk_as_it_is() {
        // Nothing of the append landed, part of it (torn), all of it; parity written or not.
        for (landed, commit) in [(0, false), (300, false), (700, false), (700, true)] {
            let mut b = bench(3, 2048, 2);
            b.write(0, 0, &pattern(2048, 1), true);
            b.write(1, 0, &pattern(600, 2), true);
            let new = pattern(700, 3);
            let pending = b.lstor.begin(1, 600, None, &new).unwrap();
            let seq = pending.seq();
            b.slots[1][600..600 + landed].copy_from_slice(&new[..landed]);
            if commit {
                pending.commit().unwrap();
            } else {
                drop(pending);
            }
            drop(b.lstor);
            b.lstor = Lstor::open(&b.dir, "node-1/disk-0").unwrap();
            let pending = b.lstor.pending().unwrap();
            assert_eq!(pending.len(), 1);
            let record = &pending[0];
            assert!(record.append && record.data.is_empty(), "an append keeps no data");
            assert_eq!((record.seq, record.slot, record.offset, record.len), (seq, 1, 600, 700));
            assert!(b.lstor.replay(record, None).is_err(), "an append needs the disk's bytes");
            let disk = b.slots[1][600..1300].to_vec();
            b.lstor.replay(record, Some(&disk)).unwrap();
            b.lstor.replay(record, Some(&disk)).unwrap();
            b.lstor.clear(seq).unwrap();
            b.check();
            // The partner's bytes settle it: written as an update, the parity follows.
            b.write(1, 600, &new, false);
            b.check();
        }
    }

    #[test]
    fn a_torn_tail_is_dropped_and_damage_before_it_is_refused() {
        let mut b = bench(2, 1024, 1);
        b.write(0, 0, &pattern(64, 1), true);
        let journal = b.dir.join(JOURNAL_FILE);
        // A record torn by a crash while appending: dropped at open.
        let good = std::fs::read(&journal).unwrap();
        let torn = JournalRecord {
            seq: 9,
            slot: 1,
            offset: 0,
            len: 32,
            append: false,
            data: vec![1; 32],
            parity: vec![vec![1; 32]],
        };
        let mut bytes = good.clone();
        bytes.extend_from_slice(&torn.encode(0)[..40]);
        std::fs::write(&journal, &bytes).unwrap();
        drop(b.lstor);
        b.lstor = Lstor::open(&b.dir, "node-1/disk-0").unwrap();
        assert!(b.lstor.pending().unwrap().is_empty());
        assert_eq!(std::fs::read(&journal).unwrap(), good, "the torn tail is cut off");
        // A damaged record followed by valid ones: corrupt, refused with the byte named.
        let mut bytes = good.clone();
        bytes[JOURNAL_HEAD_BYTES as usize + 10] ^= 0xff;
        std::fs::write(&journal, &bytes).unwrap();
        drop(b.lstor);
        let error = Lstor::open(&b.dir, "node-1/disk-0").unwrap_err();
        assert!(matches!(error, LstorError::Corrupt { .. }), "{error}");
        assert!(error.to_string().contains("byte 16"), "{error}");
        // A damaged head: refused.
        let mut bytes = good.clone();
        bytes[5] ^= 0xff;
        std::fs::write(&journal, &bytes).unwrap();
        let error = Lstor::open(&b.dir, "node-1/disk-0").unwrap_err();
        assert!(error.to_string().contains("head is damaged"), "{error}");
    }

    #[test]
    fn compaction_reuses_the_journal_and_a_rewrite_keeps_only_pending_records() {
        let mut b = bench(3, 4096, 2);
        for round in 0..3 {
            b.write(0, 0, &pattern(4096, round), false);
            b.write(1, 512, &pattern(1000, round + 10), round == 0);
            assert!(b.lstor.compact().unwrap(), "nothing pending: emptied");
        }
        // Emptied in place: the file keeps its length (the left-overs of older epochs), and
        // a reopen reads none of them.
        let journal = b.dir.join(JOURNAL_FILE);
        let len = std::fs::metadata(&journal).unwrap().len();
        assert!(len > 2 * 4096, "the journal's pages are kept: {len} bytes");
        drop(b.lstor);
        b.lstor = Lstor::open(&b.dir, "node-1/disk-0").unwrap();
        assert!(b.lstor.pending().unwrap().is_empty());
        b.check();
        // A record left pending survives a compaction (not emptied) and a rewrite; cleared
        // ones do not come back.
        b.write(2, 0, &pattern(2048, 7), true);
        let pending = b.lstor.begin(2, 2048, None, &pattern(100, 8)).unwrap();
        let seq = pending.commit().unwrap();
        assert!(!b.lstor.compact().unwrap());
        b.lstor.rewrite(&mut b.lstor.lock()).unwrap();
        let left = b.lstor.pending().unwrap();
        assert_eq!(left.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![seq]);
        assert!(left[0].append && left[0].len == 100, "{:?}", left[0]);
        assert!(std::fs::metadata(&journal).unwrap().len() < 1000, "only that record is kept");
        drop(b.lstor);
        b.lstor = Lstor::open(&b.dir, "node-1/disk-0").unwrap();
        assert_eq!(b.lstor.pending().unwrap(), left, "the rewritten journal reads back");
        b.lstor.clear(seq).unwrap();
        assert!(b.lstor.compact().unwrap());
        b.slots[2][2048..2148].copy_from_slice(&pattern(100, 8));
        b.check();
    }

    #[test]
    fn a_missing_foreign_or_damaged_lstor_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        assert!(matches!(Lstor::open(&path, "d"), Err(LstorError::Missing { .. })));
        Lstor::create(&path, "node-1/disk-0", 4096, 1).unwrap();
        assert!(Lstor::create(&path, "node-1/disk-0", 4096, 1).is_err(), "no second create");
        let error = Lstor::open(&path, "node-2/disk-0").unwrap_err();
        assert!(error.to_string().contains("belongs to disk node-1/disk-0"), "{error}");
        std::fs::OpenOptions::new()
            .write(true)
            .open(path.join("parity-0"))
            .unwrap()
            .set_len(100)
            .unwrap();
        let error = Lstor::open(&path, "node-1/disk-0").unwrap_err();
        assert!(error.to_string().contains("not one superchunk"), "{error}");
        let mut header = std::fs::read(path.join(HEADER_FILE)).unwrap();
        header[9] ^= 1;
        std::fs::write(path.join(HEADER_FILE), header).unwrap();
        let error = Lstor::open(&path, "node-1/disk-0").unwrap_err();
        assert!(error.to_string().contains("checksum"), "{error}");
        // Bad writes are refused before anything is journaled.
        let other = dir.path().join("m");
        let lstor = Lstor::create(&other, "x", 1024, 2).unwrap();
        assert!(lstor.begin(0, 1000, None, &[0; 100]).is_err(), "past the superchunk");
        assert!(lstor.begin(300, 0, None, &[0; 10]).is_err(), "slot past the RS limit");
        assert!(lstor.begin(0, 0, Some(&[0; 3]), &[0; 10]).is_err(), "old and new differ");
        assert!(lstor.pending().unwrap().is_empty());
    }
}
