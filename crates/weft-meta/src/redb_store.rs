//! [`RedbStore`]: the metadata store on an embedded redb database (one file).
//!
//! Invariants:
//! - Every operation is one transaction: a read sees one snapshot (the tree file's under
//!   the pending overlay, taken together), a write's changes happen all together or not at
//!   all. Write transactions run one at a time (the store's writer lock).
//! - A write transaction's changes are one record of the redo log (`<file>.log`, see
//!   `redb_log`), fdatasynced before the write returns `Ok` (a deferred write, a begin or a
//!   heartbeat: by the next synced record); then they join the pending overlay (`overlay`), where
//!   reads see them. A checkpoint (every 1024 records or 2 MiB of them, and at a clean close)
//!   writes the overlay into the tree file in one durable redb commit, with `meta.wal_lsn`
//!   naming the last record it holds, and empties log and overlay. A transaction too large
//!   for the log goes into the tree file with a checkpoint instead. Open replays the records
//!   after `wal_lsn` and, when the log is not new, moves the generation counter past any a
//!   crash may have lost with deferred begins. Locks are taken in one order: the writer
//!   lock, the log's, the overlay's (readers take the overlay's, then a redb snapshot).
//! - The database carries `meta.schema_version`; a database of another version is refused
//!   at open — except versions 1 and 2, which differ only by missing tables (`transitions`,
//!   `gateway`) and are upgraded in place at open (no value is rewritten) — and every value
//!   carries its own format version (see `records`).
//! - Table layout and encodings are described in docs/meta-schema.md; change both together.
//! - An IO error of the file (a full disk: ENOSPC, a failed fsync) makes redb refuse every
//!   later operation with its sticky `PreviousIo` until the database is reopened. The store
//!   sees every IO error itself (its [`WatchedFile`] backend records the first one) and
//!   answers it as [`MetaError::StoreUnavailable`] naming that error; the next operation
//!   closes and reopens the database under the store's lock (redb recovers the file at open)
//!   before it runs, so meta serves again as soon as the disk works, without a restart. An
//!   operation holds the lock's read side for its whole length, so a reopen never closes the
//!   database under a transaction in flight.
//! - [`StoreFaults`] lets a test make the file's writes fail with an errno of its choice
//!   (e.g. ENOSPC) and succeed again: the same code path as a real full disk.

use std::cell::RefCell;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{
    atomic::{AtomicI32, Ordering},
    Arc, Mutex, RwLock, RwLockReadGuard,
};

use redb::{
    backends::FileBackend, Database, ReadableTable, ReadableTableMetadata, StorageBackend,
    TableDefinition,
};

use crate::kv::{self, End, Entry, Key, KvBackend, Table, Txn, SCHEMA_VERSION_KEY};
use crate::overlay::{Found, Layers, Overlay};
use crate::records::{decode, StoredObject, FORMAT_VERSION};
use crate::redb_log::{self, RedoLog};
use crate::MetaError;

pub(crate) const BUCKETS: TableDefinition<&str, &[u8]> = TableDefinition::new("buckets");
pub(crate) const OBJECTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("objects");
/// Writes in progress by (bucket, key, generation): a key may have several at once.
pub(crate) const WRITES: TableDefinition<(&str, &str, u64), &[u8]> =
    TableDefinition::new("pending_writes");
/// Schema 3's writes in progress, one per (bucket, key): moved into [`WRITES`] at open.
const OLD_WRITES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("writes");
pub(crate) const NODES: TableDefinition<u32, &[u8]> = TableDefinition::new("nodes");
pub(crate) const REPAIRS: TableDefinition<u64, &[u8]> = TableDefinition::new("repairs");
pub(crate) const REPAIR_INDEX: TableDefinition<(&str, &str, &str), u64> =
    TableDefinition::new("repair_index");
pub(crate) const TRANSITIONS: TableDefinition<(&str, &str), &[u8]> =
    TableDefinition::new("transitions");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(crate) const GATEWAY: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("gateway");
/// The placed-units index (schema 7): (node, disk, bucket, key, unit name) → generation and
/// rack.
pub(crate) const PLACED: TableDefinition<(u32, u32, &str, &str, &str), &[u8]> =
    TableDefinition::new("placed_units");

/// Version of the set of tables and their keys: 2 added `transitions` (and objects'
/// `parity_generation`, which an older build would ignore, hence the new version); 3 added
/// `gateway` (the S3 gateway's keys, uploads and object attributes, which an older build
/// would lose track of: an upload's parts would look like garbage to it); 4 keeps writes in
/// progress by (bucket, key, generation) in `pending_writes` (several per key), where 3 had
/// one per key in `writes`; 5 adds S3 versioning (buckets' `versioning`, objects' `ver` and
/// `dm`, versions kept in the bucket `.weft-versions`), which an older build would ignore:
/// its commits and deletes in a versioned bucket would drop the versions they must keep; 6
/// adds S3 object lock (buckets' `object_lock`, objects' `lock`), which an older build would
/// neither enforce nor keep when it rewrites a record (a repair's relocation would drop it);
/// 7 adds `placed_units`, the index of units by disk, and the object totals in `meta`, which
/// an older build would not keep up to date as it commits and deletes; 8 puts the redo log
/// (`redb_log`) in front of the file, whose records since the last checkpoint an older build
/// would not replay after a crash (acknowledged writes would be lost).
pub const SCHEMA_VERSION: u64 = 8;

/// The schema versions upgraded in place at open: they lack tables (`transitions` for 1,
/// `gateway` for 1 and 2, `pending_writes` for all), which open creates, and their writes in
/// progress move from `writes` to `pending_writes` unchanged (values are not rewritten); 4
/// and 5 need nothing (no bucket of 4 is versioned, none of 5 has object lock); 6 gets the
/// placed-units index and totals built at open; 7 needs nothing (the log is created at open).
const UPGRADED_SCHEMA_VERSIONS: [u64; 7] = [1, 2, 3, 4, 5, 6, 7];

/// A redb error as a [`MetaError`]: IO errors (and redb's refusal after one) make the store
/// unavailable until it is reopened; anything else is a plain store failure.
fn store<E: Into<redb::Error>>(e: E) -> MetaError {
    match e.into() {
        redb::Error::Io(io) => MetaError::StoreUnavailable { reason: io.to_string() },
        redb::Error::PreviousIo => MetaError::StoreUnavailable {
            reason: "an earlier IO error of the store's file (see meta's log)".into(),
        },
        other => MetaError::Store { reason: other.to_string() },
    }
}

/// Errors [`StoreFaults`] can inject: no errno (0) means "work normally".
const NO_FAULT: i32 = 0;

/// A test's switch over the store file's writes: [`StoreFaults::fail_writes`] makes every
/// write, resize and fsync of the file fail with an OS error (e.g. `libc::ENOSPC`, what a
/// full disk returns) until [`StoreFaults::heal`]. Reads keep working, as on a full disk.
/// Clones share one switch.
#[derive(Debug, Clone, Default)]
pub struct StoreFaults {
    errno: Arc<AtomicI32>,
}

impl StoreFaults {
    pub fn new() -> StoreFaults {
        StoreFaults::default()
    }

    /// From now on, writes fail with OS error `errno` (must not be 0).
    pub fn fail_writes(&self, errno: i32) {
        assert_ne!(errno, NO_FAULT, "errno 0 is not an error");
        self.errno.store(errno, Ordering::SeqCst);
    }

    /// From now on, writes work again.
    pub fn heal(&self) {
        self.errno.store(NO_FAULT, Ordering::SeqCst);
    }

    fn check(&self) -> std::io::Result<()> {
        match self.errno.load(Ordering::SeqCst) {
            NO_FAULT => Ok(()),
            errno => Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}

/// The first IO error of the open database, shared by the store and its file backend.
#[derive(Debug, Default)]
struct Health {
    failure: Mutex<Option<String>>,
}

impl Health {
    fn record(&self, error: &std::io::Error) {
        let mut failure = self.failure.lock().expect("health lock");
        if failure.is_none() {
            tracing::error!(%error, "meta's store file failed an IO; the store reopens on the next request");
            *failure = Some(error.to_string());
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure.lock().expect("health lock").clone()
    }
}

/// redb's file backend, watched: every IO error is recorded in [`Health`] (redb itself
/// keeps only "an IO error happened"), and [`StoreFaults`] may fail writes on purpose.
#[derive(Debug)]
struct WatchedFile {
    file: FileBackend,
    health: Arc<Health>,
    faults: StoreFaults,
}

impl WatchedFile {
    fn watch<T>(&self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(error) = &result {
            self.health.record(error);
        }
        result
    }
}

impl StorageBackend for WatchedFile {
    fn len(&self) -> std::io::Result<u64> {
        self.watch(self.file.len())
    }

    fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.watch(self.file.read(offset, len))
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let result = self.faults.check().and_then(|()| self.file.set_len(len));
        self.watch(result)
    }

    fn sync_data(&self, eventual: bool) -> std::io::Result<()> {
        let result = self.faults.check().and_then(|()| self.file.sync_data(eventual));
        self.watch(result)
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let result = self.faults.check().and_then(|()| self.file.write(offset, data));
        self.watch(result)
    }
}

/// The metadata store in one redb file.
pub struct RedbStore {
    path: PathBuf,
    /// The open database; `None` after a failed reopen (the next operation tries again).
    /// (Boxed: the overlay makes it large, and a store is moved around by value.)
    db: RwLock<Option<Box<Opened>>>,
    /// The IO failure of the open database, if it had one.
    health: Arc<Health>,
    faults: StoreFaults,
}

/// The open database, its redo log and the changes logged since the last checkpoint.
struct Opened {
    db: Database,
    log: Mutex<RedoLog>,
    /// The changes of the log's records since the last checkpoint, above the tree file.
    pending: RwLock<Overlay>,
    /// Held by a write transaction from its first read to its end.
    writer: Mutex<()>,
}

/// The open database, held (read side of [`RedbStore::db`]) for one operation.
struct OpenDb<'a>(RwLockReadGuard<'a, Option<Box<Opened>>>);

impl OpenDb<'_> {
    fn opened(&self) -> &Opened {
        self.0.as_ref().expect("OpenDb holds an open database")
    }
}

impl std::ops::Deref for OpenDb<'_> {
    type Target = Database;

    fn deref(&self) -> &Database {
        &self.0.as_ref().expect("OpenDb holds an open database").db
    }
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the database at `path`, creating it (and every table) if it does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<RedbStore, MetaError> {
        RedbStore::open_with_faults(path, StoreFaults::new())
    }

    /// [`RedbStore::open`] with the file's writes under `faults` (for fault-injection tests).
    pub fn open_with_faults(
        path: impl AsRef<Path>,
        faults: StoreFaults,
    ) -> Result<RedbStore, MetaError> {
        let health = Arc::new(Health::default());
        let db = open_store(path.as_ref(), &health, &faults)?;
        let store = RedbStore {
            path: path.as_ref().to_owned(),
            db: RwLock::new(Some(Box::new(db))),
            health,
            faults,
        };
        kv::build_indexes(&store)?;
        Ok(store)
    }

    /// The IO error that made the store unavailable, while it is (until a reopen works).
    pub fn failure(&self) -> Option<String> {
        self.health.failure()
    }

    /// The open database for one operation; reopens it first when an IO error made redb
    /// refuse work (or a reopen failed before).
    fn db(&self) -> Result<OpenDb<'_>, MetaError> {
        {
            let db = self.db.read().expect("store lock");
            if db.is_some() && self.health.failure().is_none() {
                return Ok(OpenDb(db));
            }
        }
        self.reopen()?;
        let db = self.db.read().expect("store lock");
        match db.as_ref() {
            Some(_) => Ok(OpenDb(db)),
            // Another thread's reopen failed in between.
            None => Err(MetaError::StoreUnavailable {
                reason: self.health.failure().unwrap_or_else(|| "the store is closed".into()),
            }),
        }
    }

    /// Closes the database (waiting for operations in flight) and opens it again; on
    /// failure the store stays closed and names the first IO error and the reopen's error.
    fn reopen(&self) -> Result<(), MetaError> {
        let mut db = self.db.write().expect("store lock");
        let Some(cause) = self.health.failure().or_else(|| db.is_none().then(String::new)) else {
            return Ok(()); // Another thread reopened it meanwhile.
        };
        // Drop the old database first: it holds the file's lock.
        drop(db.take());
        *self.health.failure.lock().expect("health lock") = None;
        match open_store(&self.path, &self.health, &self.faults) {
            Ok(reopened) => {
                tracing::warn!(store = %self.path.display(), after = %cause, "meta's store reopened");
                *db = Some(Box::new(reopened));
                Ok(())
            }
            Err(error) => {
                // Keep the first cause (not this reopen's message, which would grow with
                // every failed reopen); the answer names both.
                let first = if cause.is_empty() { String::new() } else { format!("{cause}; ") };
                let error = match error {
                    MetaError::StoreUnavailable { reason } | MetaError::Store { reason } => reason,
                    other => other.to_string(),
                };
                let reason = format!("{first}reopening {} failed: {error}", self.path.display());
                let kept = if cause.is_empty() { reason.clone() } else { cause };
                *self.health.failure.lock().expect("health lock") = Some(kept);
                Err(MetaError::StoreUnavailable { reason })
            }
        }
    }
}

/// The key of `meta` that holds the last redo record the tree file holds ([`redb_log`]).
const WAL_LSN_KEY: &str = "wal_lsn";
/// A checkpoint (a durable redb commit, after which the redo log starts again) follows this
/// many logged commits, or this many bytes of records: redb frees the pages that commits
/// without its fsync replaced only at its next durable commit, so the tree file grows until
/// then.
const CHECKPOINT_COMMITS: u64 = 1024;
const CHECKPOINT_BYTES: u64 = 2 << 20;
/// How far the generation counter moves at every open after the first: past any generation
/// a crash may have lost with a deferred begin (one per record, at most
/// [`CHECKPOINT_COMMITS`] records between checkpoints).
const LOST_GENERATIONS: u64 = 4096;
const _: () = assert!(LOST_GENERATIONS > CHECKPOINT_COMMITS);
/// The key of `meta` that is 1 while the file is closed cleanly (its last opening's final
/// checkpoint holds everything it acknowledged or began), 0 while it is open.
const CLOSED_CLEANLY_KEY: &str = "closed_cleanly";

/// Opens the database at `path` ([`open_database`]) and its redo log, and replays the
/// records the tree file may lack, then checkpoints.
fn open_store(
    path: &Path,
    health: &Arc<Health>,
    faults: &StoreFaults,
) -> Result<Opened, MetaError> {
    let db = open_database(path, health, faults)?;
    let durable = {
        let txn = db.begin_read().map_err(store)?;
        let meta = txn.open_table(META).map_err(store)?;
        let lsn = meta.get(WAL_LSN_KEY).map_err(store)?.map(|v| v.value());
        lsn.unwrap_or(0)
    };
    let (mut log, found) = RedoLog::open(&redb_log::log_path(path), durable)?;
    let closed_cleanly = {
        let txn = db.begin_read().map_err(store)?;
        let meta = txn.open_table(META).map_err(store)?;
        meta.get(CLOSED_CLEANLY_KEY).map_err(store)?.is_some_and(|v| v.value() == 1)
    };
    if !log.created() {
        // Replay what the log kept; after a crash (not closed cleanly), skip the generations
        // the last opening's lost deferred begins may have taken (at most one per record
        // since its last checkpoint). The file is not clean again until this opening closes.
        let last = found.last().map_or(durable, |f| f.lsn);
        let txn = RedbTxn::Direct(Box::new(db.begin_write().map_err(store)?));
        for record in &found {
            redb_log::replay(&record.payload, &txn)?;
        }
        if !closed_cleanly {
            kv::skip_generations(&txn, LOST_GENERATIONS)?;
        }
        let RedbTxn::Direct(txn) = txn else { unreachable!("begun as a write") };
        let mut meta = txn.open_table(META).map_err(store)?;
        meta.insert(WAL_LSN_KEY, last).map_err(store)?;
        meta.insert(CLOSED_CLEANLY_KEY, 0).map_err(store)?;
        drop(meta);
        txn.commit().map_err(store)?;
        if !found.is_empty() {
            tracing::info!(
                log = %log.path().display(), records = found.len(), last,
                "meta's store replayed its redo log"
            );
        }
        log.checkpointed(last);
    }
    Ok(Opened {
        db,
        log: Mutex::new(log),
        pending: RwLock::new(Overlay::default()),
        writer: Mutex::new(()),
    })
}

/// Opens (creating if missing) the database at `path` on a watched file and makes sure every
/// table exists and the schema version is one this build reads.
fn open_database(
    path: &Path,
    health: &Arc<Health>,
    faults: &StoreFaults,
) -> Result<Database, MetaError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| MetaError::Store { reason: format!("cannot open {}: {e}", path.display()) })?;
    let file = FileBackend::new(file).map_err(store)?;
    let backend = WatchedFile { file, health: health.clone(), faults: faults.clone() };
    let db = Database::builder().create_with_backend(backend).map_err(store)?;
    {
        let txn = db.begin_write().map_err(store)?;
        {
            txn.open_table(BUCKETS).map_err(store)?;
            txn.open_table(OBJECTS).map_err(store)?;
            txn.open_table(WRITES).map_err(store)?;
            txn.open_table(NODES).map_err(store)?;
            txn.open_table(REPAIRS).map_err(store)?;
            txn.open_table(REPAIR_INDEX).map_err(store)?;
            txn.open_table(TRANSITIONS).map_err(store)?;
            txn.open_table(GATEWAY).map_err(store)?;
            txn.open_table(PLACED).map_err(store)?;
            let mut meta = txn.open_table(META).map_err(store)?;
            let found = meta.get(SCHEMA_VERSION_KEY).map_err(store)?.map(|v| v.value());
            match found {
                Some(SCHEMA_VERSION) => {}
                // New, or an older file now that its missing tables exist.
                None => {
                    meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION).map_err(store)?;
                }
                Some(old) if UPGRADED_SCHEMA_VERSIONS.contains(&old) => {
                    move_old_writes(&txn)?;
                    meta.insert(SCHEMA_VERSION_KEY, SCHEMA_VERSION).map_err(store)?;
                }
                Some(found) => {
                    return Err(MetaError::UnsupportedVersion {
                        table: "meta",
                        key: SCHEMA_VERSION_KEY.into(),
                        found,
                        supported: SCHEMA_VERSION,
                    })
                }
            }
        }
        txn.commit().map_err(store)?;
    }
    Ok(db)
}

/// Moves schema 3's writes in progress (one per key, table `writes`) into `pending_writes`
/// and deletes the old table; nothing to do for a file that never had it.
fn move_old_writes(txn: &redb::WriteTransaction) -> Result<(), MetaError> {
    let mut moved: Vec<(String, String, Vec<u8>)> = Vec::new();
    {
        let old = match txn.open_table(OLD_WRITES) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(error) => return Err(store(error)),
        };
        for entry in old.iter().map_err(store)? {
            let (name, bytes) = entry.map_err(store)?;
            let (bucket, key) = name.value();
            moved.push((bucket.to_string(), key.to_string(), bytes.value().to_vec()));
        }
    }
    let mut writes = txn.open_table(WRITES).map_err(store)?;
    for (bucket, key, bytes) in &moved {
        let stored: StoredObject = decode("writes", &|| format!("{bucket}/{key}"), bytes)?;
        let generation = stored.into_record(bucket, key)?.generation;
        writes
            .insert((bucket.as_str(), key.as_str(), generation), bytes.as_slice())
            .map_err(store)?;
    }
    drop(writes);
    txn.delete_table(OLD_WRITES).map_err(store)?;
    Ok(())
}

/// A key of `table` as its typed redb key, or a store error naming the misuse.
fn typed_key<K: KeyOf>(table: Table, key: &Key) -> Result<K::SelfType<'_>, MetaError> {
    K::typed(key).ok_or_else(|| kv::wrong_shape(table, key))
}

/// redb's typed keys of the tables, seen as [`Key`]s.
trait KeyOf: redb::Key + 'static {
    fn typed(key: &Key) -> Option<Self::SelfType<'_>>;
    fn untyped(key: Self::SelfType<'_>) -> Key;
}

impl KeyOf for &'static str {
    fn typed(key: &Key) -> Option<&str> {
        match key {
            Key::Name(name) => Some(name),
            _ => None,
        }
    }

    fn untyped(key: &str) -> Key {
        Key::name(key)
    }
}

impl KeyOf for (&'static str, &'static str) {
    fn typed(key: &Key) -> Option<(&str, &str)> {
        match key {
            Key::Pair(a, b) => Some((a, b)),
            _ => None,
        }
    }

    fn untyped((a, b): (&str, &str)) -> Key {
        Key::pair(a, b)
    }
}

impl KeyOf for (&'static str, &'static str, u64) {
    fn typed(key: &Key) -> Option<(&str, &str, u64)> {
        match key {
            Key::Write(a, b, n) => Some((a, b, *n)),
            _ => None,
        }
    }

    fn untyped((a, b, n): (&str, &str, u64)) -> Key {
        Key::write(a, b, n)
    }
}

impl KeyOf for (&'static str, &'static str, &'static str) {
    fn typed(key: &Key) -> Option<(&str, &str, &str)> {
        match key {
            Key::Unit(a, b, c) => Some((a, b, c)),
            _ => None,
        }
    }

    fn untyped((a, b, c): (&str, &str, &str)) -> Key {
        Key::unit(a, b, c)
    }
}

impl KeyOf for u32 {
    fn typed(key: &Key) -> Option<u32> {
        match key {
            Key::Node(n) => Some(*n),
            _ => None,
        }
    }

    fn untyped(key: u32) -> Key {
        Key::Node(key)
    }
}

impl KeyOf for u64 {
    fn typed(key: &Key) -> Option<u64> {
        match key {
            Key::Task(n) => Some(*n),
            _ => None,
        }
    }

    fn untyped(key: u64) -> Key {
        Key::Task(key)
    }
}

impl KeyOf for (u32, u32, &'static str, &'static str, &'static str) {
    fn typed(key: &Key) -> Option<(u32, u32, &str, &str, &str)> {
        match key {
            Key::Placed(node, disk, a, b, c) => Some((*node, *disk, a, b, c)),
            _ => None,
        }
    }

    fn untyped((node, disk, a, b, c): (u32, u32, &str, &str, &str)) -> Key {
        Key::Placed(node, disk, a.into(), b.into(), c.into())
    }
}

/// redb's typed values of the tables as bytes: records as they are, numbers big-endian.
trait ValueOf: redb::Value + 'static {
    fn bytes(value: Self::SelfType<'_>) -> Vec<u8>;
    fn typed<'b>(table: Table, key: &Key, bytes: &'b [u8])
        -> Result<Self::SelfType<'b>, MetaError>;
}

impl ValueOf for &'static [u8] {
    fn bytes(value: &[u8]) -> Vec<u8> {
        value.to_vec()
    }

    fn typed<'b>(_: Table, _: &Key, bytes: &'b [u8]) -> Result<&'b [u8], MetaError> {
        Ok(bytes)
    }
}

impl ValueOf for u64 {
    fn bytes(value: u64) -> Vec<u8> {
        value.to_be_bytes().to_vec()
    }

    fn typed(table: Table, key: &Key, bytes: &[u8]) -> Result<u64, MetaError> {
        kv::number(table, key, bytes)
    }
}

/// Runs `$body` with `$def` bound to the redb definition of `$table`.
macro_rules! with_table {
    ($table:expr, $def:ident => $body:expr) => {
        match $table {
            Table::Buckets => {
                let $def = BUCKETS;
                $body
            }
            Table::Objects => {
                let $def = OBJECTS;
                $body
            }
            Table::Writes => {
                let $def = WRITES;
                $body
            }
            Table::Nodes => {
                let $def = NODES;
                $body
            }
            Table::Repairs => {
                let $def = REPAIRS;
                $body
            }
            Table::RepairIndex => {
                let $def = REPAIR_INDEX;
                $body
            }
            Table::Transitions => {
                let $def = TRANSITIONS;
                $body
            }
            Table::Meta => {
                let $def = META;
                $body
            }
            Table::Gateway => {
                let $def = GATEWAY;
                $body
            }
            Table::Placed => {
                let $def = PLACED;
                $body
            }
        }
    };
}

fn get_in<K: KeyOf, V: ValueOf>(
    table: &impl ReadableTable<K, V>,
    name: Table,
    key: &Key,
) -> Result<Option<Vec<u8>>, MetaError> {
    let found = table.get(typed_key::<K>(name, key)?).map_err(store)?;
    Ok(found.map(|value| V::bytes(value.value())))
}

fn put_in<K: KeyOf, V: ValueOf>(
    open: &mut redb::Table<'_, K, V>,
    table: Table,
    key: &Key,
    value: &[u8],
) -> Result<(), MetaError> {
    open.insert(typed_key::<K>(table, key)?, V::typed(table, key, value)?).map_err(store)?;
    Ok(())
}

fn remove_in<K: KeyOf, V: ValueOf>(
    open: &mut redb::Table<'_, K, V>,
    table: Table,
    key: &Key,
) -> Result<Option<Vec<u8>>, MetaError> {
    let removed = open.remove(typed_key::<K>(table, key)?).map_err(store)?;
    Ok(removed.map(|value| V::bytes(value.value())))
}

/// The tree file's entries of `table` from `lower` on, in key order, as [`Entry`]s, handed to
/// `with` (which stops reading when it has enough).
fn base_range<K: KeyOf, V: ValueOf, T>(
    table: &impl ReadableTable<K, V>,
    name: Table,
    lower: Bound<&Key>,
    with: impl FnOnce(&mut dyn Iterator<Item = Result<Entry, MetaError>>) -> T,
) -> Result<T, MetaError> {
    let lower = match lower {
        Bound::Included(key) => Bound::Included(typed_key::<K>(name, key)?),
        Bound::Excluded(key) => Bound::Excluded(typed_key::<K>(name, key)?),
        Bound::Unbounded => Bound::Unbounded,
    };
    let range = table.range::<K::SelfType<'_>>((lower, Bound::Unbounded)).map_err(store)?;
    let mut entries = range.map(|entry| {
        let (key, value) = entry.map_err(store)?;
        Ok((K::untyped(key.value()), V::bytes(value.value())))
    });
    Ok(with(&mut entries))
}

/// Checks that `key` and `value` have the shape of `table`'s (the redb types of `_def`), as
/// an insert into the tree file would, so a misshapen change is refused when it is made, not
/// at the checkpoint.
fn check_in<K: KeyOf, V: ValueOf>(
    _def: TableDefinition<'_, K, V>,
    table: Table,
    key: &Key,
    value: &[u8],
) -> Result<(), MetaError> {
    typed_key::<K>(table, key)?;
    V::typed(table, key, value)?;
    Ok(())
}

/// One transaction of a [`RedbStore`].
// One per transaction, on the stack: the larger variant's size costs nothing.
#[allow(clippy::large_enum_variant)]
enum RedbTxn<'a> {
    /// Straight into the tree file: the replay of the redo log at open.
    Direct(Box<redb::WriteTransaction>),
    /// A snapshot of the tree file under the pending overlay (the changes logged since the
    /// last checkpoint) and, in a write transaction, the transaction's own changes (`local`)
    /// above it (`overlay`).
    View { base: redb::ReadTransaction, pending: &'a Overlay, local: Option<RefCell<Overlay>> },
}

impl RedbTxn<'_> {
    /// Runs `with` on the view's layers, newest first.
    fn layers<T>(&self, with: impl FnOnce(Layers<'_>) -> T) -> T {
        match self {
            RedbTxn::View { pending, local: Some(local), .. } => {
                let local = local.borrow();
                with(Layers(&[&*local, pending]))
            }
            RedbTxn::View { pending, local: None, .. } => with(Layers(&[pending])),
            RedbTxn::Direct(_) => with(Layers(&[])),
        }
    }

    /// The write transaction's own changes, or an error in a read-only one.
    fn local(&self) -> Result<std::cell::RefMut<'_, Overlay>, MetaError> {
        match self {
            RedbTxn::View { local: Some(local), .. } => Ok(local.borrow_mut()),
            _ => Err(MetaError::Store { reason: "a write in a read-only transaction".into() }),
        }
    }
}

impl Txn for RedbTxn<'_> {
    fn get(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError> {
        let base = match self {
            RedbTxn::Direct(txn) => {
                return with_table!(table, def => get_in(&txn.open_table(def).map_err(store)?, table, key));
            }
            RedbTxn::View { base, .. } => base,
        };
        match self.layers(|layers| match layers.get(table, key) {
            Found::Below => None,
            Found::Removed => Some(None),
            Found::Value(value) => Some(Some(value.to_vec())),
        }) {
            Some(held) => Ok(held),
            None => {
                with_table!(table, def => get_in(&base.open_table(def).map_err(store)?, table, key))
            }
        }
    }

    fn put(&self, table: Table, key: &Key, value: &[u8]) -> Result<(), MetaError> {
        if let RedbTxn::Direct(txn) = self {
            return with_table!(table, def => put_in(&mut txn.open_table(def).map_err(store)?, table, key, value));
        }
        with_table!(table, def => check_in(def, table, key, value))?;
        self.local()?.set(table, key, Some(value.to_vec()));
        Ok(())
    }

    fn remove(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError> {
        if let RedbTxn::Direct(txn) = self {
            return with_table!(table, def => remove_in(&mut txn.open_table(def).map_err(store)?, table, key));
        }
        self.local()?;
        let old = self.get(table, key)?;
        if old.is_some() {
            self.local()?.set(table, key, None);
        }
        Ok(old)
    }

    /// Blind removals (`overlay`): no read of what they remove.
    fn remove_many(&self, table: Table, keys: &[Key]) -> Result<(), MetaError> {
        if let RedbTxn::Direct(_) = self {
            return keys.iter().try_for_each(|key| self.remove(table, key).map(drop));
        }
        let mut local = self.local()?;
        for key in keys {
            key.fitting(table)?;
            local.set(table, key, None);
        }
        Ok(())
    }

    fn range(
        &self,
        table: Table,
        lower: Bound<&Key>,
        end: End<'_>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError> {
        let merged = |base: &mut dyn Iterator<Item = Result<Entry, MetaError>>| {
            self.layers(|layers| layers.range(table, base, lower, end, limit))
        };
        with_table!(table, def => match self {
            RedbTxn::Direct(txn) => {
                base_range(&txn.open_table(def).map_err(store)?, table, lower, merged)?
            }
            RedbTxn::View { base, .. } => {
                base_range(&base.open_table(def).map_err(store)?, table, lower, merged)?
            }
        })
    }

    fn count(&self, table: Table) -> Result<u64, MetaError> {
        let base = match self {
            RedbTxn::Direct(txn) => {
                return with_table!(table, def => txn.open_table(def).map_err(store)?.len().map_err(store));
            }
            RedbTxn::View { base, .. } => base,
        };
        with_table!(table, def => {
            let open = base.open_table(def).map_err(store)?;
            let len = open.len().map_err(store)?;
            let delta = self.layers(|layers| {
                layers.count_delta(table, |key| Ok(get_in(&open, table, key)?.is_some()))
            })?;
            Ok(len.checked_add_signed(delta).unwrap_or(0))
        })
    }
}

impl KvBackend for RedbStore {
    fn read<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        let db = self.db()?;
        // The overlay first, then the snapshot: a checkpoint commits the tree file before it
        // empties the overlay, so this pair never misses a change (module invariants).
        let pending = db.opened().pending.read().expect("pending lock");
        let txn =
            RedbTxn::View { base: db.begin_read().map_err(store)?, pending: &pending, local: None };
        op(&txn)
    }

    fn write<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.write_synced(true, op)
    }

    /// A begin's record is written without its own fdatasync: the commit's carries it.
    fn write_deferred<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.write_synced(false, op)
    }
}

impl RedbStore {
    /// A write transaction ([`KvBackend::write`]): durable when it returns if `sync`, else
    /// with the next synced record or checkpoint.
    fn write_synced<T>(
        &self,
        sync: bool,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        let db = self.db()?;
        let opened = db.opened();
        // Write transactions run one at a time, from their first read to their end.
        let _writer = opened.writer.lock().expect("writer lock");
        let (done, local) = {
            let pending = opened.pending.read().expect("pending lock");
            let txn = RedbTxn::View {
                base: db.begin_read().map_err(store)?,
                pending: &pending,
                local: Some(RefCell::new(Overlay::default())),
            };
            // An error drops the transaction's own changes: nothing happened.
            let done = op(&txn)?;
            let RedbTxn::View { local: Some(local), .. } = txn else {
                unreachable!("begun as a write")
            };
            (done, local.into_inner())
        };
        if local.is_empty() {
            return Ok(done);
        }
        let changes = local.changes();
        let mut log = opened.log.lock().expect("redo log lock");
        if !log.fits(changes.len()) {
            // Too large for the log (a bulk load, a commit of thousands of units): into the
            // tree file with everything pending, in one durable commit.
            checkpoint(&db, &opened.pending, &mut log, Some(&local))?;
            return Ok(done);
        }
        if let Err(error) = log.append(&changes, sync, || self.faults.check()) {
            // The record may be whole on disk: the store reopens (replaying what is) before
            // it serves again.
            self.health.record(&error);
            return Err(MetaError::StoreUnavailable {
                reason: format!("writing meta's redo log: {error}"),
            });
        }
        let due = {
            let mut pending = opened.pending.write().expect("pending lock");
            pending.absorb(local);
            log.records() >= CHECKPOINT_COMMITS || log.used() >= CHECKPOINT_BYTES
        };
        if due {
            if let Err(error) = checkpoint(&db, &opened.pending, &mut log, None) {
                // This write is durable (its record is) and visible: it stands. The store
                // reopens, replaying the log, before the next operation.
                tracing::warn!(%error, "meta's store could not checkpoint");
                if self.health.failure().is_none() {
                    self.health.record(&std::io::Error::other(error.to_string()));
                }
            }
        }
        Ok(done)
    }
}

/// A checkpoint: one durable redb commit of every pending change (and then of `extra`, a
/// transaction too large for the log), recording that the tree file holds every record so
/// far; the log starts again and the overlay empties. The caller holds the writer lock and
/// the log's.
fn checkpoint(
    db: &Database,
    pending: &RwLock<Overlay>,
    log: &mut RedoLog,
    extra: Option<&Overlay>,
) -> Result<(), MetaError> {
    checkpoint_closing(db, pending, log, extra, false)
}

/// [`checkpoint`], marking the file closed cleanly when `closing` (the store's last).
fn checkpoint_closing(
    db: &Database,
    pending: &RwLock<Overlay>,
    log: &mut RedoLog,
    extra: Option<&Overlay>,
    closing: bool,
) -> Result<(), MetaError> {
    let lsn = log.next_lsn() - 1;
    let txn = db.begin_write().map_err(store)?;
    {
        let held = pending.read().expect("pending lock");
        apply(&txn, &held)?;
        if let Some(extra) = extra {
            apply(&txn, extra)?;
        }
    }
    {
        let mut meta = txn.open_table(META).map_err(store)?;
        meta.insert(WAL_LSN_KEY, lsn).map_err(store)?;
        if closing {
            meta.insert(CLOSED_CLEANLY_KEY, 1).map_err(store)?;
        }
    }
    txn.commit().map_err(store)?;
    log.checkpointed(lsn);
    pending.write().expect("pending lock").clear();
    Ok(())
}

/// Writes an overlay's changes into the tree file, one opening of each table they touch.
fn apply(txn: &redb::WriteTransaction, overlay: &Overlay) -> Result<(), MetaError> {
    for table in Table::ALL {
        let mut changes = overlay.changes_of(table).peekable();
        if changes.peek().is_none() {
            continue;
        }
        with_table!(table, def => {
            let mut open = txn.open_table(def).map_err(store)?;
            for (key, value) in changes {
                match value {
                    Some(value) => put_in(&mut open, table, key, value)?,
                    None => drop(remove_in(&mut open, table, key)?),
                }
            }
        });
    }
    Ok(())
}

#[cfg(test)]
impl RedbStore {
    /// The database with every pending change checkpointed into the tree file, for tests
    /// that edit the file directly (as an older or newer build would have left it).
    fn tree(&self) -> OpenDb<'_> {
        let db = self.db().expect("an open store");
        {
            let opened = db.opened();
            let _writer = opened.writer.lock().expect("writer lock");
            let mut log = opened.log.lock().expect("redo log lock");
            checkpoint(&db, &opened.pending, &mut log, None).expect("a checkpoint");
        }
        db
    }
}

impl Drop for RedbStore {
    /// A clean close leaves the tree file holding everything (and the log with nothing to
    /// replay); if it cannot, the next open replays the log.
    fn drop(&mut self) {
        let opened = self.db.get_mut().map(Option::take).unwrap_or(None);
        if let Some(opened) = opened {
            if self.health.failure().is_none() {
                let mut log = opened.log.lock().unwrap_or_else(|p| p.into_inner());
                let closed = checkpoint_closing(&opened.db, &opened.pending, &mut log, None, true);
                if let Err(error) = closed {
                    tracing::warn!(%error, "meta's store could not checkpoint as it closed");
                }
            }
        }
    }
}

// Keeps the format version visible next to the schema version for readers of this file.
const _: () = assert!(FORMAT_VERSION == 1 && SCHEMA_VERSION == 8);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{encode, BucketRecord};
    use crate::{Digests, MetaStore};
    use weft_layout::DiskLocation;

    /// rs(2,1), stripe width 2, 1 MiB cells and blocks.
    fn rs21() -> weft_layout::StripedLayout {
        weft_layout::StripedLayout {
            code: "rs(2,1)".parse().unwrap(),
            stripe_width: 2,
            cell_bytes: 1 << 20,
            block_bytes: 1 << 20,
        }
    }

    #[test]
    fn heartbeats_do_not_sync_the_log_and_the_next_synced_write_carries_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path().join("meta.redb")).unwrap();
        let syncs = || store.db().unwrap().opened().log.lock().unwrap().syncs();
        let before = syncs();
        for id in 1..=5u32 {
            let heartbeat = weft_wire::Heartbeat {
                node_id: id,
                endpoint: format!("http://127.0.0.1:{}", 9000 + id),
                pid: 7,
                disks: Vec::new(),
                rack: None,
            };
            store.record_heartbeat(&heartbeat, 1000 + u64::from(id)).unwrap();
        }
        assert_eq!(syncs(), before, "heartbeats wait for the next synced record");
        let nodes = store.list_nodes().unwrap();
        let seen: Vec<(u32, u64)> =
            nodes.iter().map(|n| (n.node_id, n.last_heartbeat_ms)).collect();
        assert_eq!(seen, (1..=5).map(|id| (id, 1000 + u64::from(id))).collect::<Vec<_>>());
        let policy = rs21();
        store.create_bucket("bkt", policy, 1).unwrap();
        assert_eq!(syncs(), before + 1, "a bucket's creation is synced, carrying them");
    }

    #[test]
    fn unknown_versions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store = RedbStore::open(&path).unwrap();
        let policy = rs21();
        store.create_bucket("old", policy, 1).unwrap();
        // A value written by a future build: same shape, version 2.
        let txn = store.tree().begin_write().unwrap();
        {
            let mut buckets = txn.open_table(BUCKETS).unwrap();
            let current = buckets.get("old").unwrap().unwrap().value().to_vec();
            let future = String::from_utf8(current).unwrap().replacen("{\"v\":1,", "{\"v\":2,", 1);
            buckets.insert("future", future.as_bytes()).unwrap();
        }
        txn.commit().unwrap();
        let refused = store.get_bucket("future").unwrap_err();
        assert_eq!(
            refused,
            MetaError::UnsupportedVersion {
                table: "buckets",
                key: "future".into(),
                found: 2,
                supported: FORMAT_VERSION
            }
        );
        assert!(refused.to_string().contains("version 2"), "{refused}");
        assert!(store.list_buckets().is_err(), "a listing must not skip the value silently");
        assert!(store.get_bucket("old").is_ok());

        // A database of a future schema is refused at open.
        let txn = store.tree().begin_write().unwrap();
        txn.open_table(META).unwrap().insert(SCHEMA_VERSION_KEY, 9).unwrap();
        txn.commit().unwrap();
        drop(store);
        let refused = RedbStore::open(&path).unwrap_err();
        assert!(matches!(refused, MetaError::UnsupportedVersion { found: 9, .. }), "{refused}");
    }

    #[test]
    fn a_version_1_database_is_upgraded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store = RedbStore::open(&path).unwrap();
        let policy = rs21();
        store.create_bucket("old", policy, 1).unwrap();
        // What a version-1 build left: no transitions table, schema version 1.
        let txn = store.tree().begin_write().unwrap();
        assert!(txn.delete_table(TRANSITIONS).unwrap());
        txn.open_table(META).unwrap().insert(SCHEMA_VERSION_KEY, 1).unwrap();
        txn.commit().unwrap();
        drop(store);
        let store = RedbStore::open(&path).unwrap();
        let txn = store.db().unwrap().begin_read().unwrap();
        let version = txn.open_table(META).unwrap().get(SCHEMA_VERSION_KEY).unwrap().unwrap();
        assert_eq!(version.value(), SCHEMA_VERSION);
        assert_eq!(store.transition_count(), Ok(0));
        assert_eq!(store.list_buckets().unwrap().len(), 1, "nothing else changed");
    }

    #[test]
    fn a_version_2_database_gains_the_gateway_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store = RedbStore::open(&path).unwrap();
        let txn = store.tree().begin_write().unwrap();
        assert!(txn.delete_table(GATEWAY).unwrap());
        txn.open_table(META).unwrap().insert(SCHEMA_VERSION_KEY, 2).unwrap();
        txn.commit().unwrap();
        drop(store);
        let store = RedbStore::open(&path).unwrap();
        let txn = store.db().unwrap().begin_read().unwrap();
        let version = txn.open_table(META).unwrap().get(SCHEMA_VERSION_KEY).unwrap().unwrap();
        assert_eq!(version.value(), SCHEMA_VERSION);
        assert_eq!(store.get_record("uploads", "x"), Ok(None));
    }

    #[test]
    fn a_version_3_database_moves_its_writes_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store = RedbStore::open(&path).unwrap();
        let policy = rs21();
        store.create_bucket("old", policy, 1).unwrap();
        let topology = weft_layout::Topology::new(
            (0..3).map(|node| DiskLocation { rack: node, node, disk: 0 }).collect(),
        )
        .unwrap();
        let placement =
            weft_layout::place(&policy, 1 << 20, &topology, 7, weft_layout::FailureDomain::Node)
                .unwrap();
        let write = store.begin_object("old", "k", placement, 2).unwrap();
        // What a version-3 build left: the write in `writes` keyed (bucket, key) only.
        let txn = store.tree().begin_write().unwrap();
        {
            let mut pending = txn.open_table(WRITES).unwrap();
            let bytes = pending.remove(("old", "k", write.generation)).unwrap().unwrap();
            let bytes = bytes.value().to_vec();
            txn.open_table(OLD_WRITES).unwrap().insert(("old", "k"), bytes.as_slice()).unwrap();
        }
        assert!(txn.delete_table(WRITES).unwrap());
        txn.open_table(META).unwrap().insert(SCHEMA_VERSION_KEY, 3).unwrap();
        txn.commit().unwrap();
        drop(store);
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.get_write("old", "k", write.generation).unwrap(), Some(write.clone()));
        let txn = store.db().unwrap().begin_read().unwrap();
        let version = txn.open_table(META).unwrap().get(SCHEMA_VERSION_KEY).unwrap().unwrap();
        assert_eq!(version.value(), SCHEMA_VERSION);
        assert!(txn.open_table(OLD_WRITES).is_err(), "the old table is gone");
        drop(txn);
        let (committed, _) =
            store.commit_object("old", "k", write.generation, &Digests::new()).unwrap();
        assert_eq!(committed.generation, write.generation, "the moved write commits");
    }

    #[test]
    fn a_version_6_database_gets_its_placed_units_index_and_totals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store = RedbStore::open(&path).unwrap();
        let policy = rs21();
        store.create_bucket("old", policy, 1).unwrap();
        let topology = weft_layout::Topology::new(
            (0..3).map(|node| DiskLocation { rack: node, node, disk: 0 }).collect(),
        )
        .unwrap();
        for (i, key) in ["a", "b"].iter().enumerate() {
            let placement = weft_layout::place(
                &policy,
                3 << 20,
                &topology,
                i as u64,
                weft_layout::FailureDomain::Node,
            )
            .unwrap();
            let write = store.begin_object("old", key, placement, 2).unwrap();
            store.commit_object("old", key, write.generation, &Digests::new()).unwrap();
        }
        let units: Vec<_> =
            (0..3).flat_map(|node| store.placed_units(node, None, None, 100).unwrap()).collect();
        let totals = store.object_totals().unwrap();
        assert_eq!((units.len(), totals.objects, totals.bytes), (10, 2, 6 << 20));
        // What a schema-6 build left: no index, no totals.
        let txn = store.tree().begin_write().unwrap();
        assert!(txn.delete_table(PLACED).unwrap());
        {
            let mut meta = txn.open_table(META).unwrap();
            let derived: Vec<String> = meta
                .iter()
                .unwrap()
                .map(|entry| entry.unwrap().0.value().to_string())
                .filter(|name| name.starts_with("object_") || name == "indexes_built")
                .collect();
            assert!(derived.len() > 2, "{derived:?}");
            for name in derived {
                meta.remove(name.as_str()).unwrap();
            }
            meta.insert(SCHEMA_VERSION_KEY, 6).unwrap();
        }
        txn.commit().unwrap();
        drop(store);
        let store = RedbStore::open(&path).unwrap();
        let rebuilt: Vec<_> =
            (0..3).flat_map(|node| store.placed_units(node, None, None, 100).unwrap()).collect();
        assert_eq!(rebuilt, units, "the index is rebuilt from the objects at open");
        assert_eq!(store.object_totals().unwrap(), totals);
        assert_eq!(store.placed_disks().unwrap(), vec![(0, 0), (1, 0), (2, 0)]);
    }

    #[test]
    fn a_bucket_policy_change_is_stored_and_checked_in_both_stores() {
        let dir = tempfile::tempdir().unwrap();
        let redb = RedbStore::open(dir.path().join("meta.redb")).unwrap();
        let mem = crate::MemStore::new();
        let stores: [&dyn MetaStore; 2] = [&redb, &mem];
        let policy = |width: usize| weft_layout::StripedLayout {
            code: "rs(2,1)".parse().unwrap(),
            stripe_width: width,
            cell_bytes: 1 << 20,
            block_bytes: 1 << 20,
        };
        for store in stores {
            store.create_bucket("bkt", policy(2), 1).unwrap();
            assert_eq!(
                store.set_bucket_policy("bkt", policy(1)).unwrap().default_policy,
                policy(1)
            );
            assert_eq!(store.get_bucket("bkt").unwrap().default_policy, policy(1));
            let mut bad = policy(1);
            bad.block_bytes = 3 << 19; // not a multiple of the cell
            assert!(matches!(
                store.set_bucket_policy("bkt", bad),
                Err(MetaError::InvalidRecord { .. })
            ));
            assert!(matches!(
                store.set_bucket_policy("nope", policy(1)),
                Err(MetaError::NoSuchBucket { .. })
            ));
            assert_eq!(store.get_bucket("bkt").unwrap().default_policy, policy(1));
        }
    }

    #[test]
    fn a_bucket_named_under_the_old_rule_keeps_working() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path().join("meta.redb")).unwrap();
        let policy = |width: usize| weft_layout::StripedLayout {
            code: "rs(2,1)".parse().unwrap(),
            stripe_width: width,
            cell_bytes: 1 << 20,
            block_bytes: 1 << 20,
        };
        // "b" is too short for a new bucket, but an older build created it.
        let refused = store.create_bucket("b", policy(2), 1).unwrap_err();
        assert!(matches!(refused, MetaError::InvalidName { what: "bucket", .. }), "{refused}");
        assert!(refused.to_string().contains("3 to 63 characters"), "{refused}");
        let old = BucketRecord {
            name: "b".into(),
            default_policy: policy(2),
            created_ms: 1,
            raidp: None,
            geometric: None,
            versioning: None,
            object_lock: None,
        };
        let txn = store.tree().begin_write().unwrap();
        txn.open_table(BUCKETS).unwrap().insert("b", encode(&old).as_slice()).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.get_bucket("b"), Ok(old.clone()));
        assert_eq!(store.list_buckets(), Ok(vec![old]));
        assert_eq!(store.set_bucket_policy("b", policy(1)).unwrap().default_policy, policy(1));
        assert!(store.list_objects("b", "", None, 10).unwrap().objects.is_empty());
        assert_eq!(store.delete_bucket("b"), Ok(()));
        assert!(matches!(store.get_bucket("b"), Err(MetaError::NoSuchBucket { .. })));
    }

    #[test]
    fn gateway_records_behave_alike_in_both_stores() {
        let dir = tempfile::tempdir().unwrap();
        let redb = RedbStore::open(dir.path().join("meta.redb")).unwrap();
        let mem = crate::MemStore::new();
        let stores: [&dyn MetaStore; 2] = [&redb, &mem];
        for store in stores {
            let value = serde_json::json!({ "secret_key": "s" });
            store.put_record("access_keys", "AK1", &value, true).unwrap();
            assert!(matches!(
                store.put_record("access_keys", "AK1", &value, true),
                Err(MetaError::RecordExists { .. })
            ));
            assert!(matches!(
                store.put_record("nope", "AK1", &value, false),
                Err(MetaError::NoSuchNamespace { .. })
            ));
            for name in ["b/a", "b/b", "b/c", "c/a"] {
                store
                    .put_record("object_attributes", name, &serde_json::json!(name), false)
                    .unwrap();
            }
            let page = store.list_records("object_attributes", "b/", Some("b/a"), 10).unwrap();
            let names: Vec<&str> = page.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["b/b", "b/c"]);
            assert_eq!(store.list_records("object_attributes", "", None, 2).unwrap().len(), 2);
            assert_eq!(store.get_record("access_keys", "AK1"), Ok(Some(value.clone())));
            assert_eq!(store.delete_record("access_keys", "AK1"), Ok(Some(value)));
            assert_eq!(store.get_record("access_keys", "AK1"), Ok(None));
            assert_eq!(store.list_records("uploads", "", None, 10), Ok(Vec::new()));
        }
    }
}
