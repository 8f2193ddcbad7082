//! [`RedbStore`]: the metadata store on an embedded redb database (one file).
//!
//! Invariants:
//! - Every operation runs in one redb transaction; every multi-record change (commit moves a
//!   write to the committed table, counters advance with the records they number) is in one
//!   write transaction, so a crash leaves either all of it or none.
//! - Write transactions commit with redb's default durability (fsync before returning), so a
//!   returned `Ok` survives a crash.
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
use weft_layout::{DiskLocation, GeometricPolicy, Placement};

use crate::records::{
    check_new_bucket_name, decode, encode, unit_name, BucketRecord, Enqueued, Heartbeat,
    NewTransition, NodeRecord, ObjectName, ObjectRecord, ObjectState, Policy, RaidpExtent,
    RaidpPolicy, RepairLease, RepairOutcome, RepairRequest, RepairTask, StoredObject,
    TransitionRecord, FORMAT_VERSION,
};
use crate::store::{check_attributes, check_precondition, CommitTerms, Precondition};
use crate::store::{
    check_digests, check_namespace, check_new_object, check_new_transition, enqueue_step, holds,
    is_free, lease_deadline, lease_lost, list_start, pack_refusal, packed_record, pending_one,
    relocated, transitioned, EnqueueStep, ObjectPage, PackOutcome, PackedObject, RecordPage,
    StripeCommit, MAX_LIST_LIMIT,
};
use crate::versions::{self, VersionReads, VersionTables};
use crate::{Deleted, Digests, MetaError, MetaStore, VersionRef, Versioning, WriteCursor};

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

/// Version of the set of tables and their keys: 2 added `transitions` (and objects'
/// `parity_generation`, which an older build would ignore, hence the new version); 3 added
/// `gateway` (the S3 gateway's keys, uploads and object attributes, which an older build
/// would lose track of: an upload's parts would look like garbage to it); 4 keeps writes in
/// progress by (bucket, key, generation) in `pending_writes` (several per key), where 3 had
/// one per key in `writes`; 5 adds S3 versioning (buckets' `versioning`, objects' `ver` and
/// `dm`, versions kept in the bucket `.weft-versions`), which an older build would ignore:
/// its commits and deletes in a versioned bucket would drop the versions they must keep; 6
/// adds S3 object lock (buckets' `object_lock`, objects' `lock`), which an older build would
/// neither enforce nor keep when it rewrites a record (a repair's relocation would drop it).
pub const SCHEMA_VERSION: u64 = 6;

/// The schema versions upgraded in place at open: they lack tables (`transitions` for 1,
/// `gateway` for 1 and 2, `pending_writes` for all), which open creates, and their writes in
/// progress move from `writes` to `pending_writes` unchanged (values are not rewritten); 4
/// and 5 need nothing (no bucket of 4 is versioned, none of 5 has object lock).
const UPGRADED_SCHEMA_VERSIONS: [u64; 5] = [1, 2, 3, 4, 5];

const SCHEMA_VERSION_KEY: &str = "schema_version";
const NEXT_GENERATION_KEY: &str = "next_generation";
const NEXT_REPAIR_ID_KEY: &str = "next_repair_id";
const NEXT_TRANSITION_ID_KEY: &str = "next_transition_id";
const VERSION_MOVES_KEY: &str = "version_moves";

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
    db: RwLock<Option<Database>>,
    /// The IO failure of the open database, if it had one.
    health: Arc<Health>,
    faults: StoreFaults,
}

/// The open database, held (read side of [`RedbStore::db`]) for one operation.
struct OpenDb<'a>(RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for OpenDb<'_> {
    type Target = Database;

    fn deref(&self) -> &Database {
        self.0.as_ref().expect("OpenDb holds an open database")
    }
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

fn decode_object(bucket: &str, key: &str, bytes: &[u8]) -> Result<ObjectRecord, MetaError> {
    let stored: StoredObject = decode("objects", &|| format!("{bucket}/{key}"), bytes)?;
    stored.into_record(bucket, key)
}

fn decode_task(id: u64, bytes: &[u8]) -> Result<RepairTask, MetaError> {
    decode("repairs", &|| id.to_string(), bytes)
}

fn decode_transition(bucket: &str, key: &str, bytes: &[u8]) -> Result<TransitionRecord, MetaError> {
    decode("transitions", &|| format!("{bucket}/{key}"), bytes)
}

/// The pending transition of (bucket, key), if any.
fn read_transition(
    transitions: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    bucket: &str,
    key: &str,
) -> Result<Option<TransitionRecord>, MetaError> {
    match transitions.get((bucket, key)).map_err(store)? {
        Some(bytes) => Ok(Some(decode_transition(bucket, key, bytes.value())?)),
        None => Ok(None),
    }
}

/// Removes every queued repair of a parity unit of (bucket, key): their index entries are
/// `p…` names, contiguous in `repair_index`.
fn drop_parity_repairs(
    txn: &redb::WriteTransaction,
    bucket: &str,
    key: &str,
) -> Result<(), MetaError> {
    let mut index = txn.open_table(REPAIR_INDEX).map_err(store)?;
    let mut repairs = txn.open_table(REPAIRS).map_err(store)?;
    let mut doomed: Vec<(String, u64)> = Vec::new();
    for entry in index.range((bucket, key, "p")..(bucket, key, "q")).map_err(store)? {
        let (name, id) = entry.map_err(store)?;
        doomed.push((name.value().2.to_string(), id.value()));
    }
    for (unit, id) in doomed {
        index.remove((bucket, key, unit.as_str())).map_err(store)?;
        repairs.remove(id).map_err(store)?;
    }
    Ok(())
}

/// Whether any key of `table` belongs to `bucket`.
fn bucket_has_rows(
    table: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    bucket: &str,
) -> Result<bool, MetaError> {
    let mut range = table.range((bucket, "")..).map_err(store)?;
    match range.next() {
        Some(entry) => Ok(entry.map_err(store)?.0.value().0 == bucket),
        None => Ok(false),
    }
}

fn next_counter(meta: &mut redb::Table<&str, u64>, name: &str) -> Result<u64, MetaError> {
    let next = meta.get(name).map_err(store)?.map(|v| v.value()).unwrap_or(0) + 1;
    meta.insert(name, next).map_err(store)?;
    Ok(next)
}

/// The committed object under (bucket, key), if any.
fn read_object(
    objects: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    match objects.get((bucket, key)).map_err(store)? {
        Some(bytes) => Ok(Some(decode_object(bucket, key, bytes.value())?)),
        None => Ok(None),
    }
}

/// The tables the versioning rules ([`crate::versions`]) work on, open in one write
/// transaction.
struct Tables<'t> {
    buckets: redb::Table<'t, &'static str, &'static [u8]>,
    objects: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    transitions: redb::Table<'t, (&'static str, &'static str), &'static [u8]>,
    meta: redb::Table<'t, &'static str, u64>,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t redb::WriteTransaction) -> Result<Tables<'t>, MetaError> {
        Ok(Tables {
            buckets: txn.open_table(BUCKETS).map_err(store)?,
            objects: txn.open_table(OBJECTS).map_err(store)?,
            transitions: txn.open_table(TRANSITIONS).map_err(store)?,
            meta: txn.open_table(META).map_err(store)?,
        })
    }
}

/// The same tables, open for reading only.
struct ReadTables {
    buckets: redb::ReadOnlyTable<&'static str, &'static [u8]>,
    objects: redb::ReadOnlyTable<(&'static str, &'static str), &'static [u8]>,
}

/// The bucket's record in a `buckets` table, [`MetaError::NoSuchBucket`] when none.
fn bucket_in(
    buckets: &impl ReadableTable<&'static str, &'static [u8]>,
    bucket: &str,
) -> Result<BucketRecord, MetaError> {
    RedbStore::read_bucket(buckets, bucket)?
        .ok_or_else(|| MetaError::NoSuchBucket { bucket: bucket.into() })
}

fn scan_objects(
    objects: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    bucket: &str,
    prefix: &str,
    limit: usize,
) -> Result<Vec<ObjectRecord>, MetaError> {
    let mut out = Vec::new();
    for entry in objects.range((bucket, prefix)..).map_err(store)? {
        if out.len() >= limit {
            break;
        }
        let (name, bytes) = entry.map_err(store)?;
        let (b, k) = name.value();
        if b != bucket || !k.starts_with(prefix) {
            break;
        }
        out.push(decode_object(b, k, bytes.value())?);
    }
    Ok(out)
}

/// [`VersionReads`] of a type with `buckets` and `objects` tables, read-only or writable.
macro_rules! version_reads {
    ($tables:ty) => {
        impl VersionReads for $tables {
            fn bucket(&self, bucket: &str) -> Result<BucketRecord, MetaError> {
                bucket_in(&self.buckets, bucket)
            }

            fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
                read_object(&self.objects, bucket, key)
            }

            fn scan(
                &self,
                bucket: &str,
                prefix: &str,
                limit: usize,
            ) -> Result<Vec<ObjectRecord>, MetaError> {
                scan_objects(&self.objects, bucket, prefix, limit)
            }
        }
    };
}

version_reads!(ReadTables);
version_reads!(Tables<'_>);

impl VersionTables for Tables<'_> {
    fn insert_object(&mut self, record: &ObjectRecord) -> Result<(), MetaError> {
        let bytes = encode(&StoredObject::from_record(record));
        self.objects
            .insert((record.bucket.as_str(), record.key.as_str()), bytes.as_slice())
            .map_err(store)?;
        Ok(())
    }

    fn remove_object(
        &mut self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        self.transitions.remove((bucket, key)).map_err(store)?;
        let removed = self.objects.remove((bucket, key)).map_err(store)?;
        match removed {
            Some(bytes) => Ok(Some(decode_object(bucket, key, bytes.value())?)),
            None => Ok(None),
        }
    }

    fn next_generation(&mut self) -> Result<u64, MetaError> {
        next_counter(&mut self.meta, NEXT_GENERATION_KEY)
    }

    fn note_move(&mut self) -> Result<(), MetaError> {
        next_counter(&mut self.meta, VERSION_MOVES_KEY).map(drop)
    }
}

/// One enqueue inside a write transaction (see `MetaStore::enqueue_repair`).
fn enqueue_in(
    txn: &redb::WriteTransaction,
    request: &RepairRequest,
    now_ms: u64,
) -> Result<Enqueued, MetaError> {
    let (bucket, key) = (request.object.bucket.as_str(), request.object.key.as_str());
    let unit_text = unit_name(request.unit);
    let index_key = (bucket, key, unit_text.as_str());
    let mut index = txn.open_table(REPAIR_INDEX).map_err(store)?;
    let mut repairs = txn.open_table(REPAIRS).map_err(store)?;
    let queued_id = index.get(index_key).map_err(store)?.map(|id| id.value());
    let queued = match queued_id {
        Some(id) => match repairs.get(id).map_err(store)? {
            Some(bytes) => Some(decode_task(id, bytes.value())?),
            None => {
                return Err(MetaError::Corrupt {
                    table: "repair_index",
                    key: format!("{bucket}/{key}/{unit_text}"),
                    reason: format!("names task {id}, which is not in the repairs table"),
                })
            }
        },
        None => None,
    };
    let committed = read_object(&txn.open_table(OBJECTS).map_err(store)?, bucket, key)?;
    match enqueue_step(committed.as_ref(), queued.as_ref(), request, now_ms)? {
        EnqueueStep::Keep(outcome) => Ok(outcome),
        EnqueueStep::Update(task) => {
            let id = queued_id.expect("an update replaces a queued task");
            repairs.insert(id, encode(&task).as_slice()).map_err(store)?;
            Ok(Enqueued::Queued)
        }
        EnqueueStep::Append(task) => {
            if let Some(old) = queued_id {
                repairs.remove(old).map_err(store)?;
            }
            let mut meta = txn.open_table(META).map_err(store)?;
            let id = next_counter(&mut meta, NEXT_REPAIR_ID_KEY)?;
            repairs.insert(id, encode(&task).as_slice()).map_err(store)?;
            index.insert(index_key, id).map_err(store)?;
            Ok(Enqueued::Queued)
        }
    }
}

/// The task of `lease` inside a write transaction, if the lease is still its current one.
fn leased_task(txn: &redb::WriteTransaction, lease: &RepairLease) -> Result<RepairTask, MetaError> {
    let repairs = txn.open_table(REPAIRS).map_err(store)?;
    let task = match repairs.get(lease.task_id).map_err(store)? {
        Some(bytes) => decode_task(lease.task_id, bytes.value())?,
        None => return Err(lease_lost(lease)),
    };
    if !holds(&task, lease) {
        return Err(lease_lost(lease));
    }
    Ok(task)
}

/// Removes task `task_id` (known to exist) and its index entry.
fn remove_task(
    txn: &redb::WriteTransaction,
    task_id: u64,
    task: &RepairTask,
) -> Result<(), MetaError> {
    txn.open_table(REPAIRS).map_err(store)?.remove(task_id).map_err(store)?;
    let unit_text = unit_name(task.unit);
    let index_key = (task.object.bucket.as_str(), task.object.key.as_str(), unit_text.as_str());
    txn.open_table(REPAIR_INDEX).map_err(store)?.remove(index_key).map_err(store)?;
    Ok(())
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
        let db = open_database(path.as_ref(), &health, &faults)?;
        Ok(RedbStore { path: path.as_ref().to_owned(), db: RwLock::new(Some(db)), health, faults })
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
        match open_database(&self.path, &self.health, &self.faults) {
            Ok(reopened) => {
                tracing::warn!(store = %self.path.display(), after = %cause, "meta's store reopened");
                *db = Some(reopened);
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
        let generation = decode_object(bucket, key, bytes)?.generation;
        writes
            .insert((bucket.as_str(), key.as_str(), generation), bytes.as_slice())
            .map_err(store)?;
    }
    drop(writes);
    txn.delete_table(OLD_WRITES).map_err(store)?;
    Ok(())
}

impl RedbStore {
    /// Runs `change` (the versioning rules) on the tables of one write transaction and
    /// commits it when `change` succeeds; nothing changes when it fails.
    fn in_version_tables<T>(
        &self,
        change: impl FnOnce(&mut Tables<'_>) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let done = change(&mut Tables::open(&txn)?)?;
        txn.commit().map_err(store)?;
        Ok(done)
    }

    fn read_bucket(
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        name: &str,
    ) -> Result<Option<BucketRecord>, MetaError> {
        match table.get(name).map_err(store)? {
            Some(bytes) => Ok(Some(decode("buckets", &|| name.into(), bytes.value())?)),
            None => Ok(None),
        }
    }
}

fn decode_record(
    namespace: &str,
    name: &str,
    bytes: &[u8],
) -> Result<serde_json::Value, MetaError> {
    decode("gateway", &|| format!("{namespace}/{name}"), bytes)
}

impl MetaStore for RedbStore {
    fn set_bucket_policy(&self, name: &str, policy: Policy) -> Result<BucketRecord, MetaError> {
        policy.validate().map_err(|e| MetaError::InvalidRecord {
            bucket: name.into(),
            key: String::new(),
            reason: e.to_string(),
        })?;
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record = {
            let mut buckets = txn.open_table(BUCKETS).map_err(store)?;
            let mut record = RedbStore::read_bucket(&buckets, name)?
                .ok_or_else(|| MetaError::NoSuchBucket { bucket: name.into() })?;
            record.default_policy = policy;
            buckets.insert(name, encode(&record).as_slice()).map_err(store)?;
            record
        };
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn version_moves(&self) -> Result<u64, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let meta = txn.open_table(META).map_err(store)?;
        Ok(meta.get(VERSION_MOVES_KEY).map_err(store)?.map_or(0, |v| v.value()))
    }

    fn set_bucket_versioning(
        &self,
        name: &str,
        versioning: Versioning,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record = {
            let mut buckets = txn.open_table(BUCKETS).map_err(store)?;
            let mut record = RedbStore::read_bucket(&buckets, name)?
                .ok_or_else(|| MetaError::NoSuchBucket { bucket: name.into() })?;
            versions::check_versioning(&record, versioning)?;
            record.versioning = Some(versioning);
            buckets.insert(name, encode(&record).as_slice()).map_err(store)?;
            if buckets.get(crate::VERSIONS_BUCKET).map_err(store)?.is_none() {
                let internal = versions::versions_bucket(&record, now_ms);
                buckets
                    .insert(crate::VERSIONS_BUCKET, encode(&internal).as_slice())
                    .map_err(store)?;
            }
            record
        };
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn set_bucket_object_lock(
        &self,
        name: &str,
        lock: crate::lock::BucketLock,
    ) -> Result<BucketRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record = {
            let mut buckets = txn.open_table(BUCKETS).map_err(store)?;
            let record = bucket_in(&buckets, name)?;
            let record = crate::lock::locked_bucket(record, lock)?;
            buckets.insert(name, encode(&record).as_slice()).map_err(store)?;
            record
        };
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn set_version_lock(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        change: crate::lock::LockChange,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError> {
        self.in_version_tables(|tables| {
            crate::lock::set_version_lock(
                tables,
                bucket,
                key,
                version,
                change,
                bypass_governance,
                now_ms,
            )
        })
    }

    fn set_version_attributes(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        attributes: serde_json::Value,
    ) -> Result<ObjectRecord, MetaError> {
        self.in_version_tables(|tables| {
            versions::set_version_attributes(tables, bucket, key, version, attributes)
        })
    }

    fn put_record(
        &self,
        namespace: &str,
        name: &str,
        value: &serde_json::Value,
        if_absent: bool,
    ) -> Result<(), MetaError> {
        check_namespace(namespace)?;
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        {
            let mut table = txn.open_table(GATEWAY).map_err(store)?;
            if if_absent && table.get((namespace, name)).map_err(store)?.is_some() {
                return Err(MetaError::RecordExists {
                    namespace: namespace.into(),
                    name: name.into(),
                });
            }
            table.insert((namespace, name), encode(value).as_slice()).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(())
    }

    fn get_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError> {
        check_namespace(namespace)?;
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let table = txn.open_table(GATEWAY).map_err(store)?;
        let found = table.get((namespace, name)).map_err(store)?;
        found.map(|bytes| decode_record(namespace, name, bytes.value())).transpose()
    }

    fn delete_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError> {
        check_namespace(namespace)?;
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let removed = {
            let mut table = txn.open_table(GATEWAY).map_err(store)?;
            let removed = table.remove((namespace, name)).map_err(store)?;
            removed.map(|bytes| decode_record(namespace, name, bytes.value())).transpose()?
        };
        txn.commit().map_err(store)?;
        Ok(removed)
    }

    fn list_records(
        &self,
        namespace: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RecordPage, MetaError> {
        check_namespace(namespace)?;
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let table = txn.open_table(GATEWAY).map_err(store)?;
        let limit = limit.min(MAX_LIST_LIMIT);
        let (start, inclusive) = list_start(prefix, start_after);
        let lower = if inclusive {
            Bound::Included((namespace, start))
        } else {
            Bound::Excluded((namespace, start))
        };
        let mut out = Vec::new();
        for entry in table.range::<(&str, &str)>((lower, Bound::Unbounded)).map_err(store)? {
            let (key, bytes) = entry.map_err(store)?;
            let (n, name) = key.value();
            if n != namespace || !name.starts_with(prefix) || out.len() == limit {
                break;
            }
            out.push((name.to_string(), decode_record(namespace, name, bytes.value())?));
        }
        Ok(out)
    }

    fn create_bucket_with(
        &self,
        name: &str,
        default_policy: Policy,
        raidp: Option<RaidpPolicy>,
        geometric: Option<GeometricPolicy>,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        check_new_bucket_name(name)?;
        default_policy.validate().map_err(|e| MetaError::InvalidRecord {
            bucket: name.into(),
            key: String::new(),
            reason: e.to_string(),
        })?;
        let record = BucketRecord {
            name: name.into(),
            default_policy,
            created_ms: now_ms,
            raidp,
            geometric,
            versioning: None,
            object_lock: None,
        };
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        {
            let mut buckets = txn.open_table(BUCKETS).map_err(store)?;
            if buckets.get(name).map_err(store)?.is_some() {
                return Err(MetaError::BucketExists { bucket: name.into() });
            }
            buckets.insert(name, encode(&record).as_slice()).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn get_bucket(&self, name: &str) -> Result<BucketRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let buckets = txn.open_table(BUCKETS).map_err(store)?;
        RedbStore::read_bucket(&buckets, name)?
            .ok_or_else(|| MetaError::NoSuchBucket { bucket: name.into() })
    }

    fn list_buckets(&self) -> Result<Vec<BucketRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let buckets = txn.open_table(BUCKETS).map_err(store)?;
        let mut out = Vec::new();
        for entry in buckets.iter().map_err(store)? {
            let (name, bytes) = entry.map_err(store)?;
            out.push(decode("buckets", &|| name.value().into(), bytes.value())?);
        }
        Ok(out)
    }

    fn delete_bucket(&self, name: &str) -> Result<(), MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        {
            let mut buckets = txn.open_table(BUCKETS).map_err(store)?;
            if buckets.get(name).map_err(store)?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: name.into() });
            }
            let objects = txn.open_table(OBJECTS).map_err(store)?;
            let writes = txn.open_table(WRITES).map_err(store)?;
            let mut pending = writes.range((name, "", 0)..).map_err(store)?;
            let has_writes = match pending.next() {
                Some(entry) => entry.map_err(store)?.0.value().0 == name,
                None => false,
            };
            let versions = versions::bucket_versions_prefix(name, "");
            let has_versions = match objects
                .range((crate::VERSIONS_BUCKET, versions.as_str())..)
                .map_err(store)?
                .next()
            {
                Some(entry) => {
                    let entry = entry.map_err(store)?;
                    let (bucket, key) = entry.0.value();
                    bucket == crate::VERSIONS_BUCKET && key.starts_with(versions.as_str())
                }
                None => false,
            };
            if bucket_has_rows(&objects, name)? || has_writes || has_versions {
                return Err(MetaError::BucketNotEmpty { bucket: name.into() });
            }
            buckets.remove(name).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(())
    }

    fn begin_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError> {
        self.begin_raidp_object(bucket, key, placement, None, now_ms)
    }

    fn begin_raidp_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        raidp: Option<Vec<RaidpExtent>>,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError> {
        check_new_object(bucket, key, &placement)?;
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record;
        {
            let buckets = txn.open_table(BUCKETS).map_err(store)?;
            if buckets.get(bucket).map_err(store)?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
            }
            let mut meta = txn.open_table(META).map_err(store)?;
            let generation = next_counter(&mut meta, NEXT_GENERATION_KEY)?;
            record = ObjectRecord {
                bucket: bucket.into(),
                key: key.into(),
                placement,
                state: ObjectState::Writing,
                created_ms: now_ms,
                generation,
                parity_generation: 0,
                digests: Digests::new(),
                raidp,
                geometric: None,
                owners: Vec::new(),
                attributes: None,
                versioned: false,
                delete_marker: false,
                lock: Default::default(),
            };
            let mut writes = txn.open_table(WRITES).map_err(store)?;
            let bytes = encode(&StoredObject::from_record(&record));
            writes.insert((bucket, key, generation), bytes.as_slice()).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn commit_object_with(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
        digests: &Digests,
        terms: &CommitTerms,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>), MetaError> {
        check_attributes(terms.attributes.as_ref(), bucket, key)?;
        let no_write =
            || MetaError::NoSuchWrite { bucket: bucket.into(), key: key.into(), generation };
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let (record, replaced);
        {
            let mut writes = txn.open_table(WRITES).map_err(store)?;
            let write = match writes.get((bucket, key, generation)).map_err(store)? {
                Some(bytes) => decode_object(bucket, key, bytes.value())?,
                None => return Err(no_write()),
            };
            check_digests(&write, digests, |_| true)?;
            let mut tables = Tables::open(&txn)?;
            if terms.precondition.is_some() {
                let current = tables.object(bucket, key)?;
                check_precondition(current.as_ref(), terms.precondition, bucket, key)?;
            }
            let bucket_record = tables.bucket(bucket)?;
            let mut committed = ObjectRecord {
                state: ObjectState::Committed,
                digests: digests.clone(),
                attributes: terms.attributes.clone(),
                ..write
            };
            crate::lock::on_commit(&bucket_record, &mut committed, terms.lock)?;
            let versioning = bucket_record.versioning;
            writes.remove((bucket, key, generation)).map_err(store)?;
            let current = tables.remove_object(bucket, key)?;
            replaced = versions::on_commit(&mut tables, versioning, &mut committed, current)?;
            tables.insert_object(&committed)?;
            record = committed;
        }
        txn.commit().map_err(store)?;
        Ok((record, replaced))
    }

    fn commit_pack(
        &self,
        stripe_bucket: &str,
        stripes: &[StripeCommit],
        bucket: &str,
        objects: &[PackedObject],
    ) -> Result<PackOutcome, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let mut outcome = PackOutcome::default();
        {
            let mut writes = txn.open_table(WRITES).map_err(store)?;
            let mut objects_table = txn.open_table(OBJECTS).map_err(store)?;
            let mut transitions = txn.open_table(TRANSITIONS).map_err(store)?;
            for stripe in stripes {
                let key = stripe.key.as_str();
                let no_write = || MetaError::NoSuchWrite {
                    bucket: stripe_bucket.into(),
                    key: key.into(),
                    generation: stripe.generation,
                };
                let name = (stripe_bucket, key, stripe.generation);
                let write = match writes.get(name).map_err(store)? {
                    Some(bytes) => decode_object(stripe_bucket, key, bytes.value())?,
                    None => return Err(no_write()),
                };
                check_digests(&write, &stripe.digests, |_| true)?;
                writes.remove(name).map_err(store)?;
                let record = ObjectRecord {
                    state: ObjectState::Committed,
                    digests: stripe.digests.clone(),
                    owners: stripe.owners.clone(),
                    ..write
                };
                let bytes = encode(&StoredObject::from_record(&record));
                objects_table.insert((stripe_bucket, key), bytes.as_slice()).map_err(store)?;
                transitions.remove((stripe_bucket, key)).map_err(store)?;
            }
            for object in objects {
                let key = object.key.as_str();
                let current = match objects_table.get((bucket, key)).map_err(store)? {
                    Some(bytes) => Some(decode_object(bucket, key, bytes.value())?),
                    None => None,
                };
                if let Some(why) = pack_refusal(current.as_ref(), object.generation) {
                    outcome.skipped.push((object.key.clone(), why));
                    continue;
                }
                let old = current.expect("pack_refusal checked it");
                let packed = packed_record(&old, &object.place)?;
                let bytes = encode(&StoredObject::from_record(&packed));
                objects_table.insert((bucket, key), bytes.as_slice()).map_err(store)?;
                transitions.remove((bucket, key)).map_err(store)?;
                outcome.packed.push(old);
            }
        }
        txn.commit().map_err(store)?;
        Ok(outcome)
    }

    fn get_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let writes = txn.open_table(WRITES).map_err(store)?;
        let found = writes.get((bucket, key, generation)).map_err(store)?;
        found.map(|bytes| decode_object(bucket, key, bytes.value())).transpose()
    }

    fn get_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let buckets = txn.open_table(BUCKETS).map_err(store)?;
        if buckets.get(bucket).map_err(store)?.is_none() {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        let objects = txn.open_table(OBJECTS).map_err(store)?;
        match objects.get((bucket, key)).map_err(store)? {
            Some(bytes) => decode_object(bucket, key, bytes.value()),
            None => Err(MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() }),
        }
    }

    fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectPage, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let buckets = txn.open_table(BUCKETS).map_err(store)?;
        if buckets.get(bucket).map_err(store)?.is_none() {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        let objects = txn.open_table(OBJECTS).map_err(store)?;
        let limit = limit.min(MAX_LIST_LIMIT);
        let (start, inclusive) = list_start(prefix, start_after);
        let lower = if inclusive {
            Bound::Included((bucket, start))
        } else {
            Bound::Excluded((bucket, start))
        };
        let mut out = Vec::new();
        let mut next_start_after = None;
        for entry in objects.range::<(&str, &str)>((lower, Bound::Unbounded)).map_err(store)? {
            let (name, bytes) = entry.map_err(store)?;
            let (b, k) = name.value();
            if b != bucket || !k.starts_with(prefix) {
                break;
            }
            if out.len() == limit {
                next_start_after = out.last().map(|r: &ObjectRecord| r.key.clone());
                break;
            }
            out.push(decode_object(b, k, bytes.value())?);
        }
        Ok(ObjectPage { objects: out, next_start_after })
    }

    fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
    ) -> Result<ObjectRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record;
        {
            let buckets = txn.open_table(BUCKETS).map_err(store)?;
            if buckets.get(bucket).map_err(store)?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
            }
            let mut objects = txn.open_table(OBJECTS).map_err(store)?;
            if let Some(current) = read_object(&objects, bucket, key)? {
                check_precondition(Some(&current), precondition, bucket, key)?;
                crate::lock::check_unlocked(&current)?;
            }
            record = match objects.remove((bucket, key)).map_err(store)? {
                Some(bytes) => decode_object(bucket, key, bytes.value())?,
                None => {
                    return Err(MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() })
                }
            };
            txn.open_table(TRANSITIONS).map_err(store)?.remove((bucket, key)).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn delete_latest(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
        now_ms: u64,
    ) -> Result<Deleted, MetaError> {
        self.in_version_tables(|tables| {
            versions::delete_latest(tables, bucket, key, precondition, now_ms)
        })
    }

    fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        terms: versions::VersionDelete,
    ) -> Result<ObjectRecord, MetaError> {
        self.in_version_tables(|tables| {
            versions::delete_version(tables, bucket, key, version, terms)
        })
    }

    fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
    ) -> Result<ObjectRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let tables = ReadTables {
            buckets: txn.open_table(BUCKETS).map_err(store)?,
            objects: txn.open_table(OBJECTS).map_err(store)?,
        };
        tables.bucket(bucket)?;
        let found = versions::find_version(&tables, bucket, key, version)?;
        found.ok_or_else(|| versions::no_such_version(bucket, key, version))
    }

    fn list_writes(
        &self,
        after: Option<&WriteCursor>,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let writes = txn.open_table(WRITES).map_err(store)?;
        let lower = match after {
            Some((name, generation)) => {
                Bound::Excluded((name.bucket.as_str(), name.key.as_str(), *generation))
            }
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for entry in writes.range::<(&str, &str, u64)>((lower, Bound::Unbounded)).map_err(store)? {
            if out.len() == limit.min(MAX_LIST_LIMIT) {
                break;
            }
            let (name, bytes) = entry.map_err(store)?;
            let (bucket, key, _) = name.value();
            out.push(decode_object(bucket, key, bytes.value())?);
        }
        Ok(out)
    }

    fn abort_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<ObjectRecord, MetaError> {
        let no_write =
            || MetaError::NoSuchWrite { bucket: bucket.into(), key: key.into(), generation };
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let write;
        {
            let mut writes = txn.open_table(WRITES).map_err(store)?;
            write = match writes.remove((bucket, key, generation)).map_err(store)? {
                Some(bytes) => decode_object(bucket, key, bytes.value())?,
                None => return Err(no_write()),
            };
        }
        txn.commit().map_err(store)?;
        Ok(write)
    }

    fn record_heartbeat(
        &self,
        heartbeat: &Heartbeat,
        now_ms: u64,
    ) -> Result<NodeRecord, MetaError> {
        let record = NodeRecord {
            node_id: heartbeat.node_id,
            endpoint: heartbeat.endpoint.clone(),
            pid: heartbeat.pid,
            last_heartbeat_ms: now_ms,
            disks: heartbeat.disks.clone(),
            rack: heartbeat.rack,
        };
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        {
            let mut nodes = txn.open_table(NODES).map_err(store)?;
            nodes.insert(record.node_id, encode(&record).as_slice()).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn list_nodes(&self) -> Result<Vec<NodeRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let nodes = txn.open_table(NODES).map_err(store)?;
        let mut out = Vec::new();
        for entry in nodes.iter().map_err(store)? {
            let (id, bytes) = entry.map_err(store)?;
            out.push(decode("nodes", &|| id.value().to_string(), bytes.value())?);
        }
        Ok(out)
    }

    fn enqueue_repair(&self, request: &RepairRequest, now_ms: u64) -> Result<Enqueued, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let outcome = enqueue_in(&txn, request, now_ms)?;
        // Committing an unchanged transaction would cost an fsync for nothing.
        if outcome == Enqueued::Queued {
            txn.commit().map_err(store)?;
        } else {
            txn.abort().map_err(store)?;
        }
        Ok(outcome)
    }

    fn enqueue_repairs(&self, requests: &[RepairRequest], now_ms: u64) -> Result<usize, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let mut queued = 0;
        for request in requests {
            if enqueue_in(&txn, request, now_ms)? == Enqueued::Queued {
                queued += 1;
            }
        }
        if queued > 0 {
            txn.commit().map_err(store)?;
        } else {
            txn.abort().map_err(store)?;
        }
        Ok(queued)
    }

    fn take_repair(&self, now_ms: u64, lease_ms: u64) -> Result<Option<RepairLease>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let lease;
        {
            let mut repairs = txn.open_table(REPAIRS).map_err(store)?;
            // Oldest first; the scan is bounded by the queue length.
            let mut found = None;
            for entry in repairs.iter().map_err(store)? {
                let (id, bytes) = entry.map_err(store)?;
                let task = decode_task(id.value(), bytes.value())?;
                if is_free(&task, now_ms) {
                    found = Some((id.value(), task));
                    break;
                }
            }
            let Some((task_id, mut task)) = found else {
                return Ok(None);
            };
            let deadline_ms = lease_deadline(&task, now_ms, lease_ms);
            task.attempts += 1;
            task.lease_deadline_ms = Some(deadline_ms);
            repairs.insert(task_id, encode(&task).as_slice()).map_err(store)?;
            lease = RepairLease { task_id, task, deadline_ms };
        }
        txn.commit().map_err(store)?;
        Ok(Some(lease))
    }

    fn complete_repair(&self, lease: &RepairLease) -> Result<(), MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let task = leased_task(&txn, lease)?;
        remove_task(&txn, lease.task_id, &task)?;
        txn.commit().map_err(store)?;
        Ok(())
    }

    fn relocate_repaired(
        &self,
        lease: &RepairLease,
        disk: DiskLocation,
    ) -> Result<RepairOutcome, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let task = leased_task(&txn, lease)?;
        let (bucket, key) = (task.object.bucket.as_str(), task.object.key.as_str());
        let outcome;
        {
            let mut objects = txn.open_table(OBJECTS).map_err(store)?;
            let committed = read_object(&objects, bucket, key)?;
            outcome = match relocated(committed, &task, disk)? {
                Some(object) => {
                    let bytes = encode(&StoredObject::from_record(&object));
                    objects.insert((bucket, key), bytes.as_slice()).map_err(store)?;
                    RepairOutcome::Relocated(object)
                }
                None => RepairOutcome::Stale,
            };
        }
        remove_task(&txn, lease.task_id, &task)?;
        txn.commit().map_err(store)?;
        Ok(outcome)
    }

    fn fail_repair_until(
        &self,
        lease: &RepairLease,
        error: &str,
        not_before_ms: Option<u64>,
        unfound: bool,
    ) -> Result<u64, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let mut task = leased_task(&txn, lease)?;
        remove_task(&txn, lease.task_id, &task)?;
        let id;
        {
            let mut meta = txn.open_table(META).map_err(store)?;
            id = next_counter(&mut meta, NEXT_REPAIR_ID_KEY)?;
            let unit_text = unit_name(task.unit);
            let index_key =
                (task.object.bucket.as_str(), task.object.key.as_str(), unit_text.as_str());
            txn.open_table(REPAIR_INDEX).map_err(store)?.insert(index_key, id).map_err(store)?;
            task.lease_deadline_ms = None;
            task.last_error = Some(error.to_string());
            task.not_before_ms = not_before_ms;
            task.unfound = unfound;
            let mut repairs = txn.open_table(REPAIRS).map_err(store)?;
            repairs.insert(id, encode(&task).as_slice()).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(id)
    }

    fn wake_unfound_repairs(&self) -> Result<usize, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let mut woken = Vec::new();
        {
            let repairs = txn.open_table(REPAIRS).map_err(store)?;
            // Bounded by the queue length.
            for entry in repairs.iter().map_err(store)? {
                let (id, bytes) = entry.map_err(store)?;
                let task = decode_task(id.value(), bytes.value())?;
                if task.unfound && task.not_before_ms.is_some() {
                    woken.push((id.value(), RepairTask { not_before_ms: None, ..task }));
                }
            }
        }
        if woken.is_empty() {
            txn.abort().map_err(store)?;
            return Ok(0);
        }
        {
            let mut repairs = txn.open_table(REPAIRS).map_err(store)?;
            for (id, task) in &woken {
                repairs.insert(*id, encode(task).as_slice()).map_err(store)?;
            }
        }
        txn.commit().map_err(store)?;
        Ok(woken.len())
    }

    fn drop_repairs_of(&self, bucket: &str, key: &str) -> Result<usize, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let mut doomed: Vec<(String, u64)> = Vec::new();
        {
            let index = txn.open_table(REPAIR_INDEX).map_err(store)?;
            // At most one entry per unit of the object.
            for entry in index.range((bucket, key, "")..).map_err(store)? {
                let (name, id) = entry.map_err(store)?;
                let (b, k, unit) = name.value();
                if (b, k) != (bucket, key) {
                    break;
                }
                doomed.push((unit.to_string(), id.value()));
            }
        }
        if doomed.is_empty() {
            txn.abort().map_err(store)?;
            return Ok(0);
        }
        {
            let mut index = txn.open_table(REPAIR_INDEX).map_err(store)?;
            let mut repairs = txn.open_table(REPAIRS).map_err(store)?;
            for (unit, id) in &doomed {
                index.remove((bucket, key, unit.as_str())).map_err(store)?;
                repairs.remove(*id).map_err(store)?;
            }
        }
        txn.commit().map_err(store)?;
        Ok(doomed.len())
    }

    fn repairs_of(&self, bucket: &str, key: &str) -> Result<Vec<(u64, RepairTask)>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let index = txn.open_table(REPAIR_INDEX).map_err(store)?;
        let repairs = txn.open_table(REPAIRS).map_err(store)?;
        let mut out = Vec::new();
        // At most one entry per unit of the object.
        for entry in index.range((bucket, key, "")..).map_err(store)? {
            let (name, id) = entry.map_err(store)?;
            let (b, k, _) = name.value();
            if (b, k) != (bucket, key) {
                break;
            }
            if let Some(bytes) = repairs.get(id.value()).map_err(store)? {
                out.push((id.value(), decode_task(id.value(), bytes.value())?));
            }
        }
        Ok(out)
    }

    fn get_repair(&self, task_id: u64) -> Result<Option<RepairTask>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let repairs = txn.open_table(REPAIRS).map_err(store)?;
        match repairs.get(task_id).map_err(store)? {
            Some(bytes) => Ok(Some(decode_task(task_id, bytes.value())?)),
            None => Ok(None),
        }
    }

    fn list_repairs(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, RepairTask)>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let repairs = txn.open_table(REPAIRS).map_err(store)?;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        for entry in repairs.range::<u64>((lower, Bound::Unbounded)).map_err(store)? {
            if out.len() == limit.min(MAX_LIST_LIMIT) {
                break;
            }
            let (id, bytes) = entry.map_err(store)?;
            out.push((id.value(), decode_task(id.value(), bytes.value())?));
        }
        Ok(out)
    }

    fn repair_queue_len(&self) -> Result<usize, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let repairs = txn.open_table(REPAIRS).map_err(store)?;
        let len = repairs.len().map_err(store)?;
        Ok(usize::try_from(len).expect("queue length fits in memory"))
    }

    fn begin_transition(
        &self,
        plan: NewTransition,
        now_ms: u64,
    ) -> Result<(TransitionRecord, Option<TransitionRecord>), MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let (record, replaced);
        {
            let buckets = txn.open_table(BUCKETS).map_err(store)?;
            if buckets.get(plan.bucket.as_str()).map_err(store)?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: plan.bucket });
            }
            let objects = txn.open_table(OBJECTS).map_err(store)?;
            let committed = read_object(&objects, &plan.bucket, &plan.key)?;
            check_new_transition(committed.as_ref(), &plan)?;
            let mut meta = txn.open_table(META).map_err(store)?;
            let id = next_counter(&mut meta, NEXT_TRANSITION_ID_KEY)?;
            record = TransitionRecord::new(plan, id, now_ms);
            let (bucket, key) = (record.bucket.as_str(), record.key.as_str());
            let mut transitions = txn.open_table(TRANSITIONS).map_err(store)?;
            replaced = match transitions
                .insert((bucket, key), encode(&record).as_slice())
                .map_err(store)?
            {
                Some(old) => Some(decode_transition(bucket, key, old.value())?),
                None => None,
            };
        }
        txn.commit().map_err(store)?;
        Ok((record, replaced))
    }

    fn commit_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        parity_digests: &Digests,
    ) -> Result<(ObjectRecord, ObjectRecord), MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let (new, old);
        {
            let mut objects = txn.open_table(OBJECTS).map_err(store)?;
            let mut transitions = txn.open_table(TRANSITIONS).map_err(store)?;
            let committed = read_object(&objects, bucket, key)?;
            let pending = read_transition(&transitions, bucket, key)?;
            new = transitioned(
                committed.as_ref(),
                pending.as_ref(),
                bucket,
                key,
                id,
                parity_digests,
            )?;
            old = committed.expect("checked by transitioned");
            let bytes = encode(&StoredObject::from_record(&new));
            objects.insert((bucket, key), bytes.as_slice()).map_err(store)?;
            transitions.remove((bucket, key)).map_err(store)?;
        }
        drop_parity_repairs(&txn, bucket, key)?;
        txn.commit().map_err(store)?;
        Ok((new, old))
    }

    fn abort_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
    ) -> Result<TransitionRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record;
        {
            let mut transitions = txn.open_table(TRANSITIONS).map_err(store)?;
            record = match read_transition(&transitions, bucket, key)? {
                Some(pending) if pending.id == id => pending,
                pending => {
                    return Err(MetaError::NoSuchTransition {
                        bucket: bucket.into(),
                        key: key.into(),
                        id,
                        pending: pending.map(|t| t.id),
                    })
                }
            };
            transitions.remove((bucket, key)).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn get_transition(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<TransitionRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let transitions = txn.open_table(TRANSITIONS).map_err(store)?;
        read_transition(&transitions, bucket, key)
    }

    fn list_transitions(
        &self,
        after: Option<&ObjectName>,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let transitions = txn.open_table(TRANSITIONS).map_err(store)?;
        page_after(&transitions, after, limit, decode_transition)
    }

    fn renew_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        deadline_ms: u64,
    ) -> Result<TransitionRecord, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let mut record;
        {
            let objects = txn.open_table(OBJECTS).map_err(store)?;
            let mut transitions = txn.open_table(TRANSITIONS).map_err(store)?;
            let committed = read_object(&objects, bucket, key)?;
            let pending = read_transition(&transitions, bucket, key)?;
            record = pending_one(committed.as_ref(), pending.as_ref(), bucket, key, id)?.clone();
            record.lease_deadline_ms = deadline_ms;
            transitions.insert((bucket, key), encode(&record).as_slice()).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(record)
    }

    fn expire_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        now_ms: u64,
    ) -> Result<Option<TransitionRecord>, MetaError> {
        let db = self.db()?;
        let txn = db.begin_write().map_err(store)?;
        let record;
        {
            let mut transitions = txn.open_table(TRANSITIONS).map_err(store)?;
            record = match read_transition(&transitions, bucket, key)? {
                Some(pending) if pending.id == id && pending.lease_expired(now_ms) => pending,
                _ => return Ok(None),
            };
            transitions.remove((bucket, key)).map_err(store)?;
        }
        txn.commit().map_err(store)?;
        Ok(Some(record))
    }

    fn transition_count(&self) -> Result<usize, MetaError> {
        let db = self.db()?;
        let txn = db.begin_read().map_err(store)?;
        let transitions = txn.open_table(TRANSITIONS).map_err(store)?;
        let len = transitions.len().map_err(store)?;
        Ok(usize::try_from(len).expect("transition count fits in memory"))
    }
}

// Keeps the format version visible next to the schema version for readers of this file.
const _: () = assert!(FORMAT_VERSION == 1 && SCHEMA_VERSION == 6);

/// Up to `min(limit, MAX_LIST_LIMIT)` values of a (bucket, key) table in key order, after
/// `after`, decoded.
fn page_after<T>(
    table: &redb::ReadOnlyTable<(&'static str, &'static str), &'static [u8]>,
    after: Option<&ObjectName>,
    limit: usize,
    decode: impl Fn(&str, &str, &[u8]) -> Result<T, MetaError>,
) -> Result<Vec<T>, MetaError> {
    let lower = match after {
        Some(name) => Bound::Excluded((name.bucket.as_str(), name.key.as_str())),
        None => Bound::Unbounded,
    };
    let mut out = Vec::new();
    for entry in table.range::<(&str, &str)>((lower, Bound::Unbounded)).map_err(store)? {
        if out.len() == limit.min(MAX_LIST_LIMIT) {
            break;
        }
        let (name, bytes) = entry.map_err(store)?;
        let (bucket, key) = name.value();
        out.push(decode(bucket, key, bytes.value())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_versions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        let store = RedbStore::open(&path).unwrap();
        let policy = weft_layout::StripedLayout {
            code: "rs(2,1)".parse().unwrap(),
            stripe_width: 2,
            cell_bytes: 1 << 20,
            block_bytes: 1 << 20,
        };
        store.create_bucket("old", policy, 1).unwrap();
        // A value written by a future build: same shape, version 2.
        let txn = store.db().unwrap().begin_write().unwrap();
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
        let txn = store.db().unwrap().begin_write().unwrap();
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
        let policy = weft_layout::StripedLayout {
            code: "rs(2,1)".parse().unwrap(),
            stripe_width: 2,
            cell_bytes: 1 << 20,
            block_bytes: 1 << 20,
        };
        store.create_bucket("old", policy, 1).unwrap();
        // What a version-1 build left: no transitions table, schema version 1.
        let txn = store.db().unwrap().begin_write().unwrap();
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
        let txn = store.db().unwrap().begin_write().unwrap();
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
        let policy = weft_layout::StripedLayout {
            code: "rs(2,1)".parse().unwrap(),
            stripe_width: 2,
            cell_bytes: 1 << 20,
            block_bytes: 1 << 20,
        };
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
        let txn = store.db().unwrap().begin_write().unwrap();
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
        let txn = store.db().unwrap().begin_write().unwrap();
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
