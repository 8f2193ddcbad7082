//! The redo log in front of [`crate::RedbStore`]: one fdatasync of one small, preallocated
//! file per write operation, instead of a durable redb commit (which rewrote and synced some
//! twenty scattered pages of the tree file).
//!
//! Invariants:
//! - A record is the final puts and removes of one write transaction, each numbered by a log
//!   sequence number (LSN) that grows by one per record over the store's whole life (it is
//!   never reused; the store keeps the last one in its `meta` table as `wal_lsn`).
//! - A write is acknowledged only after its record is written and fdatasynced; a deferred
//!   write (a begin: `KvBackend::write_deferred`) after its record is written, the next
//!   synced record's fdatasync carrying it to disk. Records reach the tree file at the next
//!   checkpoint (`overlay`); a checkpoint writes its last LSN as `wal_lsn`, so the tree
//!   file says exactly which records it holds.
//! - A checkpoint is a durable redb commit: everything up to `wal_lsn` is then in the tree
//!   file, and the log starts again at offset 0 (with the next LSN). So the records that may
//!   be missing from the tree file are always a prefix of the log, numbered `wal_lsn + 1`,
//!   `+ 2`, … in order.
//! - Recovery reads the log from offset 0 and replays records while each is whole (its
//!   CRC-32C checks) and numbered one past the previous (the first: `wal_lsn + 1`). It stops
//!   at the first that is not: a torn write's tail, or a stale record of an earlier round of
//!   the file (its LSN is lower). Replaying a record sets each key to its final value, so it
//!   is the same whether or not redb had kept that transaction.
//! - The file is written whole (zeros) when created and never grows or shrinks afterwards,
//!   so an fdatasync has no file metadata to journal.
//! - An IO error of the log is the store's IO error: the operation fails and the store
//!   reopens (which recovers from the log) before serving again; a record whose write
//!   failed may or may not be replayed then, as a commit in flight at a crash.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::kv::{Key, Table, Txn};
use crate::MetaError;

/// The log file's size: records go round it, a checkpoint whenever the next would not fit.
pub(crate) const LOG_BYTES: u64 = 4 << 20;
/// A transaction whose record is larger than this commits durably in redb instead (a bulk
/// load, a commit of thousands of units): the log stays small and its rounds long.
pub(crate) const MAX_RECORD_BYTES: usize = 1 << 20;
/// Header of a record: CRC-32C (of all that follows it), payload length, LSN.
const HEADER: usize = 4 + 4 + 8;

const PUT: u8 = 1;
const REMOVE: u8 = 2;

/// The log file of the store at `db_path`: `<db_path>.log`.
pub(crate) fn log_path(db_path: &Path) -> PathBuf {
    let mut name = db_path.as_os_str().to_owned();
    name.push(".log");
    PathBuf::from(name)
}

/// The changes one write transaction made, in order, as a record's payload.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    bytes: Vec<u8>,
}

impl Changes {
    /// A change whose key is already encoded: a put of `value`, or a removal (`None`).
    pub(crate) fn push(&mut self, table: Table, encoded: &[u8], value: Option<&[u8]>) {
        self.op_encoded(if value.is_some() { PUT } else { REMOVE }, table, encoded);
        if let Some(value) = value {
            self.bytes.extend_from_slice(&len32(value.len()).to_le_bytes());
            self.bytes.extend_from_slice(value);
        }
    }

    fn op_encoded(&mut self, op: u8, table: Table, encoded: &[u8]) {
        self.bytes.push(op);
        self.bytes.push(table_number(table));
        self.bytes.extend_from_slice(&len32(encoded.len()).to_le_bytes());
        self.bytes.extend_from_slice(encoded);
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn put(&mut self, table: Table, key: &Key, value: &[u8]) {
        self.push(table, &key.encode(), Some(value));
    }

    #[cfg(test)]
    pub(crate) fn remove(&mut self, table: Table, key: &Key) {
        self.push(table, &key.encode(), None);
    }
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).expect("a record's parts are below 4 GiB (MAX_RECORD_BYTES)")
}

fn table_number(table: Table) -> u8 {
    u8::try_from(table.index()).expect("fewer than 256 tables")
}

/// Applies a record's payload to `txn`, in order.
pub(crate) fn replay(payload: &[u8], txn: &dyn Txn) -> Result<(), MetaError> {
    let mut rest = Cursor(payload);
    while !rest.0.is_empty() {
        let [op, table] = rest.take(2)? else { unreachable!("two bytes taken") };
        let table =
            *Table::ALL.get(usize::from(*table)).ok_or_else(|| corrupt("names no table"))?;
        let key_len = rest.len32()?;
        let key = Key::decode(table, rest.take(key_len)?)?;
        match *op {
            PUT => {
                let len = rest.len32()?;
                txn.put(table, &key, rest.take(len)?)?;
            }
            REMOVE => {
                txn.remove(table, &key)?;
            }
            _ => return Err(corrupt("has an unknown change")),
        }
    }
    Ok(())
}

fn corrupt(what: &str) -> MetaError {
    MetaError::Store { reason: format!("meta's redo log: a record {what}") }
}

/// The unread part of a record's payload.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MetaError> {
        if self.0.len() < n {
            return Err(corrupt("ends inside a change"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn len32(&mut self) -> Result<usize, MetaError> {
        let bytes = self.take(4)?.try_into().expect("4 bytes");
        Ok(u32::from_le_bytes(bytes) as usize)
    }
}

/// The open log file, and where its next record goes.
#[derive(Debug)]
pub(crate) struct RedoLog {
    file: File,
    path: PathBuf,
    /// Offset of the next record.
    end: u64,
    /// The last LSN given out (in a record or a checkpoint).
    last_lsn: u64,
    /// Records written since the last checkpoint.
    records: u64,
    /// Records fdatasynced by this opening (synced appends).
    syncs: u64,
    /// Whether this opening created the file (no record was ever written to it).
    created: bool,
}

/// A record found by [`RedoLog::open`] that the tree file may lack.
pub(crate) struct Found {
    pub(crate) lsn: u64,
    pub(crate) payload: Vec<u8>,
}

impl RedoLog {
    /// Opens (creating and zero-filling if missing) the log at `path`, and reads the records
    /// after `durable_lsn`, the last one the tree file holds for certain. The log's next
    /// record will follow them; the caller replays them and then checkpoints.
    pub(crate) fn open(path: &Path, durable_lsn: u64) -> Result<(RedoLog, Vec<Found>), MetaError> {
        let failed = |what: &str, e: std::io::Error| MetaError::StoreUnavailable {
            reason: format!("{what} meta's redo log {}: {e}", path.display()),
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| failed("cannot open", e))?;
        let len = file.metadata().map_err(|e| failed("cannot stat", e))?.len();
        let created = len == 0;
        if len < LOG_BYTES {
            // Written, not just sized: an fdatasync of a sparse or unwritten extent would
            // journal its allocation on every record.
            let zeros = vec![0u8; 1 << 20];
            let mut at = len;
            while at < LOG_BYTES {
                let n = zeros.len().min((LOG_BYTES - at) as usize);
                file.write_all_at(&zeros[..n], at).map_err(|e| failed("cannot fill", e))?;
                at += n as u64;
            }
            file.sync_all().map_err(|e| failed("cannot sync", e))?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir).and_then(|d| d.sync_all()).map_err(|e| failed("cannot sync", e))?;
            }
        }
        let mut log = RedoLog {
            file,
            path: path.to_owned(),
            end: 0,
            last_lsn: durable_lsn,
            records: 0,
            syncs: 0,
            created,
        };
        let found = log.scan(durable_lsn).map_err(|e| failed("cannot read", e))?;
        if let Some(last) = found.last() {
            log.last_lsn = last.lsn;
            log.records = found.len() as u64;
        }
        Ok((log, found))
    }

    /// The records numbered `after + 1`, `after + 2`, … from offset 0, up to the first that
    /// is torn, stale or absent.
    fn scan(&mut self, after: u64) -> std::io::Result<Vec<Found>> {
        let mut found = Vec::new();
        let mut at = 0u64;
        let mut header = [0u8; HEADER];
        while at + HEADER as u64 <= LOG_BYTES {
            self.file.read_exact_at(&mut header, at)?;
            let crc = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
            let len = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes")) as u64;
            let lsn = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
            let fits = at + HEADER as u64 + len <= LOG_BYTES && len as usize <= MAX_RECORD_BYTES;
            if lsn != after + found.len() as u64 + 1 || !fits {
                break;
            }
            let mut payload = vec![0u8; len as usize];
            self.file.read_exact_at(&mut payload, at + HEADER as u64)?;
            let mut hasher = crc32c::crc32c(&header[4..]);
            hasher = crc32c::crc32c_append(hasher, &payload);
            if hasher != crc {
                break;
            }
            found.push(Found { lsn, payload });
            at += HEADER as u64 + len;
        }
        self.end = at;
        Ok(found)
    }

    /// The LSN the next record (or checkpoint) takes.
    pub(crate) fn next_lsn(&self) -> u64 {
        self.last_lsn + 1
    }

    /// Whether a record of `payload_len` bytes fits after the ones written since the last
    /// checkpoint.
    pub(crate) fn fits(&self, payload_len: usize) -> bool {
        payload_len <= MAX_RECORD_BYTES && self.end + (HEADER + payload_len) as u64 <= LOG_BYTES
    }

    /// Writes `changes` as the record numbered [`RedoLog::next_lsn`] and, when `sync`, waits
    /// until it is on disk, with every record before it (a deferred one is carried by the
    /// next synced record's fdatasync, or lost in a crash before it). `check` runs before
    /// the write (the store's fault switch for tests).
    pub(crate) fn append(
        &mut self,
        changes: &Changes,
        sync: bool,
        check: impl Fn() -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let lsn = self.next_lsn();
        let mut record = Vec::with_capacity(HEADER + changes.len());
        record.extend_from_slice(&[0; 4]);
        record.extend_from_slice(&len32(changes.len()).to_le_bytes());
        record.extend_from_slice(&lsn.to_le_bytes());
        record.extend_from_slice(&changes.bytes);
        let crc = crc32c::crc32c(&record[4..]);
        record[0..4].copy_from_slice(&crc.to_le_bytes());
        check()?;
        self.file.write_all_at(&record, self.end)?;
        if sync {
            check()?;
            self.file.sync_data()?;
            self.syncs += 1;
        }
        self.end += record.len() as u64;
        self.last_lsn = lsn;
        self.records += 1;
        Ok(lsn)
    }

    /// After a durable commit that holds every record up to `lsn`: the log starts again at
    /// offset 0, the next record numbered `lsn + 1`.
    pub(crate) fn checkpointed(&mut self, lsn: u64) {
        self.end = 0;
        self.records = 0;
        self.last_lsn = self.last_lsn.max(lsn);
    }

    /// Whether this opening created the file: no record of an earlier opening can be lost.
    pub(crate) fn created(&self) -> bool {
        self.created
    }

    /// Records written since the last checkpoint.
    /// Synced appends by this opening.
    #[cfg(test)]
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs
    }

    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Bytes of records written since the last checkpoint.
    pub(crate) fn used(&self) -> u64 {
        self.end
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(i: u64) -> Changes {
        let mut changes = Changes::default();
        changes.put(
            Table::Buckets,
            &Key::name(&format!("bucket-{i}")),
            &vec![i as u8; 40 + i as usize],
        );
        changes.remove(Table::Objects, &Key::pair("bucket", &format!("key-{i}")));
        changes
    }

    fn lsns(found: &[Found]) -> Vec<u64> {
        found.iter().map(|f| f.lsn).collect()
    }

    #[test]
    fn records_are_found_in_order_up_to_a_torn_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(&dir.path().join("meta.redb"));
        let (mut log, found) = RedoLog::open(&path, 0).unwrap();
        assert!(found.is_empty());
        for i in 1..=3 {
            assert_eq!(log.append(&changes(i), true, || Ok(())).unwrap(), i);
        }
        let torn_at = log.used() - 1;
        drop(log);
        let (log, found) = RedoLog::open(&path, 0).unwrap();
        assert_eq!(lsns(&found), [1, 2, 3]);
        assert_eq!(found[1].payload, changes(2).bytes);
        assert_eq!((log.next_lsn(), log.records()), (4, 3));
        // The last record's last byte torn: the first two are all there is.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0xAA], torn_at).unwrap();
        let (log, found) = RedoLog::open(&path, 0).unwrap();
        assert_eq!(lsns(&found), [1, 2]);
        assert_eq!(log.next_lsn(), 3);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LOG_BYTES);
    }

    #[test]
    fn after_a_checkpoint_only_the_new_round_is_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(&dir.path().join("meta.redb"));
        let (mut log, _) = RedoLog::open(&path, 0).unwrap();
        for i in 1..=5 {
            log.append(&changes(i), true, || Ok(())).unwrap();
        }
        log.checkpointed(5);
        assert_eq!((log.used(), log.records()), (0, 0));
        // Shorter records over the old ones: the old ones after them are stale (lower LSNs).
        let mut small = Changes::default();
        small.remove(Table::Nodes, &Key::Node(1));
        assert_eq!(log.append(&small, true, || Ok(())).unwrap(), 6);
        assert_eq!(log.append(&small, true, || Ok(())).unwrap(), 7);
        drop(log);
        assert_eq!(lsns(&RedoLog::open(&path, 5).unwrap().1), [6, 7]);
        // The tree file holds them all (a checkpoint at 7 before the crash): nothing.
        let (log, found) = RedoLog::open(&path, 7).unwrap();
        assert!(found.is_empty());
        assert_eq!(log.next_lsn(), 8);
        // Crashed right after the checkpoint at 5, before record 6: the old round is stale.
        let (mut log, _) = RedoLog::open(&path, 7).unwrap();
        log.checkpointed(7);
        drop(log);
        assert!(RedoLog::open(&path, 10).unwrap().1.is_empty());
    }

    #[test]
    fn a_failed_write_takes_no_lsn() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(&dir.path().join("meta.redb"));
        let (mut log, _) = RedoLog::open(&path, 41).unwrap();
        let full = || Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(log.append(&changes(1), true, full).is_err());
        assert_eq!((log.next_lsn(), log.used()), (42, 0));
        assert_eq!(log.append(&changes(1), true, || Ok(())).unwrap(), 42);
        assert!(log.fits(MAX_RECORD_BYTES - 1000) && !log.fits(MAX_RECORD_BYTES + 1));
    }
}
