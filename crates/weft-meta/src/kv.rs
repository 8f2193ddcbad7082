//! The metadata operations written once, over any transactional ordered key-value store.
//!
//! A backend ([`KvBackend`]) gives transactions ([`Txn`]) over a fixed set of tables
//! ([`Table`]), each an ordered map from a [`Key`] to bytes; every [`MetaStore`] operation is
//! one closure run inside one such transaction (`impl<B: KvBackend> MetaStore for B`, below).
//! redb ([`crate::RedbStore`], its typed tables unchanged on disk) and PostgreSQL
//! ([`crate::PgStore`]) are backends; [`crate::MemStore`] is not: it stays the independent
//! model the backends are tested against.
//!
//! Invariants a backend keeps:
//! - A write transaction's effects happen all together when its closure returns `Ok`, or not
//!   at all; a closure that returns `Err` changes nothing. Transactions are serializable.
//! - A backend may run a write closure more than once (PostgreSQL retries a transaction that
//!   lost a serialization conflict); closures therefore have no effect outside the
//!   transaction and read everything they decide on through it.
//! - Keys order as their [`Key::encode`] bytes order (strings by their UTF-8 bytes, numbers
//!   by value), the order redb's typed tuple keys have too: every range below means the same
//!   in every backend.
//! - A range returns at most `limit` entries, in key order, from its lower bound up to its
//!   [`End`]; a `Prefix` end keeps exactly the keys whose encoding starts with the prefix.
//! - Numbers stored as values (counters, the repair index's task ids) are 8 bytes, big-endian.

use std::ops::Bound;

use weft_layout::{DiskLocation, GeometricPolicy, Placement};

use crate::records::{
    check_new_bucket_name, decode, encode, parse_unit_name, unit_name, BucketRecord, Enqueued,
    Heartbeat, NewTransition, NodeRecord, ObjectName, ObjectRecord, ObjectState, Policy,
    RaidpExtent, RaidpPolicy, RepairLease, RepairOutcome, RepairRequest, RepairTask, StoredObject,
    TransitionRecord,
};
use crate::store::{check_attributes, check_precondition, CommitTerms, Precondition};
use crate::store::{
    check_digests, check_namespace, check_new_object, check_new_transition, enqueue_step, holds,
    is_free, lease_deadline, lease_lost, list_start, pack_refusal, packed_record, pending_one,
    relocated, transitioned, usage_of, EnqueueStep, ObjectPage, ObjectTotals, PackOutcome,
    PackedObject, PlacedUnit, RecordPage, SizeUsage, StripeCommit, MAX_LIST_LIMIT, SIZE_CLASSES,
};
use crate::store::{leased, Lease, ReplicaRecord};
use crate::versions::{self, VersionReads, VersionTables};
use crate::{Deleted, Digests, MetaError, MetaStore, VersionRef, Versioning, WriteCursor};

/// The tables of the metadata, with the shape of their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// Bucket records by name ([`Key::Name`]).
    Buckets,
    /// Committed objects by (bucket, key) ([`Key::Pair`]).
    Objects,
    /// Writes in progress by (bucket, key, generation) ([`Key::Write`]).
    Writes,
    /// Node records by id ([`Key::Node`]).
    Nodes,
    /// Repair tasks by id, in queue order ([`Key::Task`]).
    Repairs,
    /// The queued task id (a number) of each (bucket, key, unit name) ([`Key::Unit`]).
    RepairIndex,
    /// Pending transitions by (bucket, key) ([`Key::Pair`]).
    Transitions,
    /// Store-wide numbers by name ([`Key::Name`]): the schema version and the counters.
    Meta,
    /// Gateway records by (namespace, name) ([`Key::Pair`]).
    Gateway,
    /// The placed-units index: every unit of every committed object by where it is (node,
    /// disk, bucket, key, unit name) ([`Key::Placed`]); the value is the object's generation
    /// (8 bytes) and the disk's rack (4), both big-endian.
    Placed,
}

impl Table {
    /// Every table, in a fixed order.
    pub const ALL: [Table; 10] = [
        Table::Buckets,
        Table::Objects,
        Table::Writes,
        Table::Nodes,
        Table::Repairs,
        Table::RepairIndex,
        Table::Transitions,
        Table::Meta,
        Table::Gateway,
        Table::Placed,
    ];

    /// The table's place in [`Table::ALL`].
    pub fn index(self) -> usize {
        match self {
            Table::Buckets => 0,
            Table::Objects => 1,
            Table::Writes => 2,
            Table::Nodes => 3,
            Table::Repairs => 4,
            Table::RepairIndex => 5,
            Table::Transitions => 6,
            Table::Meta => 7,
            Table::Gateway => 8,
            Table::Placed => 9,
        }
    }

    /// The table's name (redb's table name; PostgreSQL's is `weft_` and this).
    pub fn name(self) -> &'static str {
        match self {
            Table::Buckets => "buckets",
            Table::Objects => "objects",
            Table::Writes => "pending_writes",
            Table::Nodes => "nodes",
            Table::Repairs => "repairs",
            Table::RepairIndex => "repair_index",
            Table::Transitions => "transitions",
            Table::Meta => "meta",
            Table::Gateway => "gateway",
            Table::Placed => "placed_units",
        }
    }

    fn shape(self) -> Shape {
        match self {
            Table::Buckets | Table::Meta => Shape::Name,
            Table::Objects | Table::Transitions | Table::Gateway => Shape::Pair,
            Table::Writes => Shape::Write,
            Table::RepairIndex => Shape::Unit,
            Table::Nodes => Shape::Node,
            Table::Repairs => Shape::Task,
            Table::Placed => Shape::Placed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Name,
    Pair,
    Write,
    Unit,
    Node,
    Task,
    Placed,
}

/// A key of one of the [`Table`]s.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Name(String),
    Pair(String, String),
    Write(String, String, u64),
    Unit(String, String, String),
    Node(u32),
    Task(u64),
    /// (node, disk, bucket, key, unit name).
    Placed(u32, u32, String, String, String),
}

/// Appends `text` escaped (NUL as NUL 0xFF), without its terminator.
fn escape_into(out: &mut Vec<u8>, text: &str) {
    for &byte in text.as_bytes() {
        out.push(byte);
        if byte == 0 {
            out.push(0xFF);
        }
    }
}

/// Appends `text` escaped and terminated (NUL 0x01): the terminator sorts below every
/// continuation, so a string sorts before every longer string it begins.
fn string_into(out: &mut Vec<u8>, text: &str) {
    escape_into(out, text);
    out.extend_from_slice(&[0, 1]);
}

impl Key {
    pub fn name(name: &str) -> Key {
        Key::Name(name.into())
    }

    pub fn pair(first: &str, second: &str) -> Key {
        Key::Pair(first.into(), second.into())
    }

    pub fn write(bucket: &str, key: &str, generation: u64) -> Key {
        Key::Write(bucket.into(), key.into(), generation)
    }

    pub fn unit(bucket: &str, key: &str, unit: &str) -> Key {
        Key::Unit(bucket.into(), key.into(), unit.into())
    }

    /// The key's bytes: they sort as the keys do.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Key::Name(a) => string_into(&mut out, a),
            Key::Pair(a, b) => {
                string_into(&mut out, a);
                string_into(&mut out, b);
            }
            Key::Write(a, b, n) => {
                string_into(&mut out, a);
                string_into(&mut out, b);
                out.extend_from_slice(&n.to_be_bytes());
            }
            Key::Unit(a, b, c) => {
                string_into(&mut out, a);
                string_into(&mut out, b);
                string_into(&mut out, c);
            }
            Key::Node(n) => out.extend_from_slice(&n.to_be_bytes()),
            Key::Task(n) => out.extend_from_slice(&n.to_be_bytes()),
            Key::Placed(node, disk, a, b, c) => {
                out.extend_from_slice(&node.to_be_bytes());
                out.extend_from_slice(&disk.to_be_bytes());
                string_into(&mut out, a);
                string_into(&mut out, b);
                string_into(&mut out, c);
            }
        }
        out
    }

    /// The key of `table` whose [`Key::encode`] is `bytes`.
    pub fn decode(table: Table, bytes: &[u8]) -> Result<Key, MetaError> {
        let corrupt = |reason: &str| MetaError::Corrupt {
            table: table.name(),
            key: format!("{bytes:02x?}"),
            reason: reason.into(),
        };
        let mut rest = bytes;
        let string = |rest: &mut &[u8]| -> Result<String, MetaError> {
            let mut text = Vec::new();
            let mut i = 0;
            loop {
                match (rest.get(i), rest.get(i + 1)) {
                    (Some(0), Some(0xFF)) => {
                        text.push(0);
                        i += 2;
                    }
                    (Some(0), Some(1)) => break,
                    (Some(0), _) | (None, _) => return Err(corrupt("an unterminated string")),
                    (Some(&byte), _) => {
                        text.push(byte);
                        i += 1;
                    }
                }
            }
            *rest = &rest[i + 2..];
            String::from_utf8(text).map_err(|_| corrupt("a string that is not UTF-8"))
        };
        let key = match table.shape() {
            Shape::Name => Key::Name(string(&mut rest)?),
            Shape::Pair => Key::Pair(string(&mut rest)?, string(&mut rest)?),
            Shape::Write => {
                let (a, b) = (string(&mut rest)?, string(&mut rest)?);
                let n: [u8; 8] = rest.try_into().map_err(|_| corrupt("not 8 bytes"))?;
                rest = &[];
                Key::Write(a, b, u64::from_be_bytes(n))
            }
            Shape::Unit => Key::Unit(string(&mut rest)?, string(&mut rest)?, string(&mut rest)?),
            Shape::Node => {
                let n: [u8; 4] = rest.try_into().map_err(|_| corrupt("not 4 bytes"))?;
                rest = &[];
                Key::Node(u32::from_be_bytes(n))
            }
            Shape::Task => {
                let n: [u8; 8] = rest.try_into().map_err(|_| corrupt("not 8 bytes"))?;
                rest = &[];
                Key::Task(u64::from_be_bytes(n))
            }
            Shape::Placed => {
                if rest.len() < 8 {
                    return Err(corrupt("shorter than a node and a disk"));
                }
                let node = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes"));
                let disk = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
                rest = &rest[8..];
                let (a, b, c) = (string(&mut rest)?, string(&mut rest)?, string(&mut rest)?);
                Key::Placed(node, disk, a, b, c)
            }
        };
        match rest.is_empty() {
            true => Ok(key),
            false => Err(corrupt("bytes after the key")),
        }
    }

    /// [`Key::fits`], as an error naming the misuse when not.
    pub fn fitting(&self, table: Table) -> Result<(), MetaError> {
        match self.fits(table) {
            true => Ok(()),
            false => Err(wrong_shape(table, self)),
        }
    }

    /// Whether this key has the shape of `table`'s keys.
    pub fn fits(&self, table: Table) -> bool {
        matches!(
            (self, table.shape()),
            (Key::Name(_), Shape::Name)
                | (Key::Pair(..), Shape::Pair)
                | (Key::Write(..), Shape::Write)
                | (Key::Unit(..), Shape::Unit)
                | (Key::Node(_), Shape::Node)
                | (Key::Task(_), Shape::Task)
                | (Key::Placed(..), Shape::Placed)
        )
    }
}

/// A backend asked to use `key` in `table`, whose keys have another shape (a bug of the
/// caller, not a corrupt store).
pub(crate) fn wrong_shape(table: Table, key: &Key) -> MetaError {
    MetaError::Store {
        reason: format!("a key of the wrong shape for table {}: {key:?}", table.name()),
    }
}

/// The encoded prefix of the keys whose first string is `first` and whose next string starts
/// with `partial` (for a [`End::Prefix`]).
pub fn prefix_after(first: &str, partial: &str) -> Vec<u8> {
    let mut out = Vec::new();
    string_into(&mut out, first);
    escape_into(&mut out, partial);
    out
}

/// The encoded prefix of the keys whose first two strings are `first` and `second` and whose
/// third starts with `partial`.
fn prefix_after_two(first: &str, second: &str, partial: &str) -> Vec<u8> {
    let mut out = Vec::new();
    string_into(&mut out, first);
    string_into(&mut out, second);
    escape_into(&mut out, partial);
    out
}

/// The smallest byte string above every string that starts with `prefix`, if there is one:
/// the prefix without its trailing 0xFF bytes, its last byte plus one.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut end = prefix[..=keep].to_vec();
    end[keep] += 1;
    Some(end)
}

/// Where a range stops.
#[derive(Debug, Clone, Copy)]
pub enum End<'a> {
    /// At the end of the table.
    Open,
    /// Before this key (excluded).
    Before(&'a Key),
    /// After the last key whose encoding starts with these bytes.
    Prefix(&'a [u8]),
}

impl End<'_> {
    /// Whether `key` (reached going up from the range's lower bound) is still inside.
    pub fn admits(&self, key: &Key) -> bool {
        match self {
            End::Open => true,
            End::Before(end) => key < end,
            End::Prefix(prefix) => key.encode().starts_with(prefix),
        }
    }
}

/// One entry of a range: a key and its value.
pub type Entry = (Key, Vec<u8>);

/// One transaction of a backend. Methods take `&self`: a transaction is used by one thread,
/// and backends keep their connection in a cell.
pub trait Txn {
    fn get(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError>;
    /// Inserts or replaces.
    fn put(&self, table: Table, key: &Key, value: &[u8]) -> Result<(), MetaError>;
    /// Removes, returning the value removed.
    fn remove(&self, table: Table, key: &Key) -> Result<Option<Vec<u8>>, MetaError>;
    /// At most `limit` entries from `lower` up to `end`, in key order.
    fn range(
        &self,
        table: Table,
        lower: Bound<&Key>,
        end: End<'_>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError>;
    /// The number of entries of `table`.
    fn count(&self, table: Table) -> Result<u64, MetaError>;
    /// A hint: the transaction is about to read these keys. A backend with a round trip per
    /// read (PostgreSQL) may fetch them all in one; the reads then answer from it. Changes
    /// nothing; by default, nothing.
    fn prefetch(&self, keys: &[(Table, Key)]) -> Result<(), MetaError> {
        let _ = keys;
        Ok(())
    }
    /// Inserts or replaces every entry (a backend may do it in one statement).
    fn put_many(&self, table: Table, entries: &[Entry]) -> Result<(), MetaError> {
        entries.iter().try_for_each(|(key, value)| self.put(table, key, value))
    }
    /// Removes every key (a backend may do it in one statement).
    fn remove_many(&self, table: Table, keys: &[Key]) -> Result<(), MetaError> {
        keys.iter().try_for_each(|key| self.remove(table, key).map(drop))
    }
}

/// A transactional store of the [`Table`]s: every backend of this trait is a [`MetaStore`].
pub trait KvBackend: Send + Sync {
    /// Runs `op` in a read-only transaction (a consistent snapshot).
    fn read<T>(&self, op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>)
        -> Result<T, MetaError>;
    /// Runs `op` in a serializable write transaction and commits what it did when it
    /// returns `Ok` (see the module's invariants: `op` may run more than once).
    fn write<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError>;
    /// [`KvBackend::write`] whose durability may wait for the next write that does not
    /// (whose sync then carries it): a crash may lose it, and with it only later deferred
    /// writes. Only writes whose loss nobody was promised against are deferred:
    /// - begins: a lost write in progress makes its commit fail with
    ///   [`MetaError::NoSuchWrite`] (the put was never acknowledged) and leaves its units to
    ///   gc. A backend that defers never hands out again a generation a lost begin took
    ///   ([`skip_generations`] at open);
    /// - heartbeats: a lost one leaves the node's stored heartbeat older. A restarted meta
    ///   judges silence for repair only after it has run longer than `down_after_ms`, and a
    ///   live node heartbeats again long before (service `liveness`), so nothing is queued
    ///   for it; an idle cluster then syncs meta's log for no heartbeat at all.
    ///
    /// By default, a plain write.
    fn write_deferred<T>(
        &self,
        op: &mut dyn FnMut(&dyn Txn) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.write(op)
    }
}

pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";
const NEXT_GENERATION_KEY: &str = "next_generation";
const NEXT_REPAIR_ID_KEY: &str = "next_repair_id";
const NEXT_TRANSITION_ID_KEY: &str = "next_transition_id";
const VERSION_MOVES_KEY: &str = "version_moves";
/// Committed objects (records of `objects`), and the sum of their sizes, each kept as
/// [`TOTAL_SHARDS`] numbers (`object_count/07`…) summed when read: a commit changes the shard
/// of its key only, so concurrent commits of different keys rarely touch the same row (on
/// PostgreSQL one row for all would make every pair of concurrent commits conflict).
const OBJECT_COUNT_KEY: &str = "object_count";
const OBJECT_BYTES_KEY: &str = "object_bytes";
const TOTAL_SHARDS: u64 = 16;

/// The shard of the totals that (bucket, key) counts in (FNV-1a of both).
fn total_shard(bucket: &str, key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bucket.bytes().chain([0]).chain(key.bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash % TOTAL_SHARDS
}

fn shard_name(total: &str, shard: u64) -> String {
    format!("{total}/{shard:02}")
}

/// The sum of every shard of `total`.
fn read_total(tx: &dyn Txn, total: &str) -> Result<u64, MetaError> {
    let first = Key::name(&shard_name(total, 0));
    let within = {
        let mut prefix = Vec::new();
        escape_into(&mut prefix, &format!("{total}/"));
        prefix
    };
    let mut sum: u64 = 0;
    for (key, value) in
        tx.range(Table::Meta, Bound::Included(&first), End::Prefix(&within), 1000)?
    {
        sum = sum.wrapping_add(number(Table::Meta, &key, &value)?);
    }
    Ok(sum)
}
/// 1 once the placed-units index and the object totals cover every object (set when a
/// store is created, or by [`build_indexes`] for a store from before them).
const INDEXES_BUILT_KEY: &str = "indexes_built";

/// 1 once the usage by size ([`USAGE_KEY`]) covers every object (set when a store is
/// created, or by [`build_indexes`] for a store from before it).
const USAGE_BUILT_KEY: &str = "usage_built";

/// The prefix of the usage totals ([`USAGE_FIELDS`]).
const USAGE_KEY: &str = "usage";

/// Meta's own records in the gateway table, under namespaces no gateway record can have
/// (their names start with a dot): leases of duties, and the meta processes.
const LEASES: &str = ".leases";
const REPLICAS: &str = ".meta-replicas";

/// A number stored as a value (8 bytes, big-endian).
pub fn number(table: Table, key: &Key, bytes: &[u8]) -> Result<u64, MetaError> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| MetaError::Corrupt {
        table: table.name(),
        key: format!("{key:?}"),
        reason: format!("a number of {} bytes, not 8", bytes.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// The value of the store-wide number `name` (0 when never set).
pub(crate) fn read_number(tx: &dyn Txn, name: &str) -> Result<u64, MetaError> {
    let key = Key::name(name);
    match tx.get(Table::Meta, &key)? {
        Some(bytes) => number(Table::Meta, &key, &bytes),
        None => Ok(0),
    }
}

pub(crate) fn write_number(tx: &dyn Txn, name: &str, value: u64) -> Result<(), MetaError> {
    tx.put(Table::Meta, &Key::name(name), &value.to_be_bytes())
}

/// Moves the generation counter `gap` past where it is: the generations a crash may have
/// lost with deferred begins ([`KvBackend::write_deferred`]) are never handed out again.
pub(crate) fn skip_generations(tx: &dyn Txn, gap: u64) -> Result<(), MetaError> {
    let next = read_number(tx, NEXT_GENERATION_KEY)?.saturating_add(gap);
    write_number(tx, NEXT_GENERATION_KEY, next)
}

fn next_counter(tx: &dyn Txn, name: &str) -> Result<u64, MetaError> {
    let next = read_number(tx, name)? + 1;
    write_number(tx, name, next)?;
    Ok(next)
}

fn decode_object(bucket: &str, key: &str, bytes: &[u8]) -> Result<ObjectRecord, MetaError> {
    let stored: StoredObject = decode("objects", &|| format!("{bucket}/{key}"), bytes)?;
    stored.into_record(bucket, key)
}

fn encode_object(record: &ObjectRecord) -> Vec<u8> {
    encode(&StoredObject::from_record(record))
}

fn decode_task(id: u64, bytes: &[u8]) -> Result<RepairTask, MetaError> {
    decode("repairs", &|| id.to_string(), bytes)
}

fn decode_transition(bucket: &str, key: &str, bytes: &[u8]) -> Result<TransitionRecord, MetaError> {
    decode("transitions", &|| format!("{bucket}/{key}"), bytes)
}

fn decode_record(
    namespace: &str,
    name: &str,
    bytes: &[u8],
) -> Result<serde_json::Value, MetaError> {
    decode("gateway", &|| format!("{namespace}/{name}"), bytes)
}

/// A key of a table the caller knows the shape of, of another shape: a corrupt backend.
fn misshapen(table: Table, key: &Key) -> MetaError {
    MetaError::Corrupt {
        table: table.name(),
        key: format!("{key:?}"),
        reason: "a key of another table's shape".into(),
    }
}

fn read_bucket(tx: &dyn Txn, name: &str) -> Result<Option<BucketRecord>, MetaError> {
    match tx.get(Table::Buckets, &Key::name(name))? {
        Some(bytes) => Ok(Some(decode("buckets", &|| name.into(), &bytes)?)),
        None => Ok(None),
    }
}

fn bucket_in(tx: &dyn Txn, name: &str) -> Result<BucketRecord, MetaError> {
    read_bucket(tx, name)?.ok_or_else(|| MetaError::NoSuchBucket { bucket: name.into() })
}

fn read_object(tx: &dyn Txn, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
    match tx.get(Table::Objects, &Key::pair(bucket, key))? {
        Some(bytes) => Ok(Some(decode_object(bucket, key, &bytes)?)),
        None => Ok(None),
    }
}

/// The placed-units index entries of a committed object.
fn placed_entries(record: &ObjectRecord) -> Vec<Entry> {
    record
        .placement
        .units()
        .map(|(unit, disk)| {
            let key = Key::Placed(
                disk.node,
                disk.disk,
                record.bucket.clone(),
                record.key.clone(),
                unit_name(unit),
            );
            let mut value = record.generation.to_be_bytes().to_vec();
            value.extend_from_slice(&disk.rack.to_be_bytes());
            (key, value)
        })
        .collect()
}

/// The keys of `meta` holding (bucket, key)'s totals shard: object count and bytes, then
/// the usage by size ([`usage_keys`]).
fn total_keys(bucket: &str, key: &str) -> Vec<Key> {
    let shard = total_shard(bucket, key);
    let mut keys: Vec<Key> = [OBJECT_COUNT_KEY, OBJECT_BYTES_KEY]
        .map(|total| Key::name(&shard_name(total, shard)))
        .into();
    keys.extend(usage_keys(shard).into_iter().flatten());
    keys
}

/// The usage by size of striped objects ([`usage_of`]) is three totals per size class,
/// sharded as the others: `usage/<class>/objects`, `…/bytes` and `…/stored`.
const USAGE_FIELDS: [&str; 3] = ["objects", "bytes", "stored"];

fn usage_total(class: usize, field: &str) -> String {
    format!("{USAGE_KEY}/{class}/{field}")
}

/// The usage keys of one shard, by class and field.
fn usage_keys(shard: u64) -> [[Key; 3]; SIZE_CLASSES] {
    std::array::from_fn(|class| {
        USAGE_FIELDS.map(|field| Key::name(&shard_name(&usage_total(class, field), shard)))
    })
}

/// Per size class, the (objects, bytes, stored bytes) of one shard or one change.
type Usage = [[i128; 3]; SIZE_CLASSES];

/// Adds `sign` times `record`'s usage (when it counts: [`usage_of`]) to `usage`.
fn add_usage(usage: &mut Usage, record: &ObjectRecord, sign: i128) {
    if let Some((class, size, stored)) = usage_of(record) {
        let [objects, bytes, stored_bytes] = &mut usage[class];
        *objects += sign;
        *bytes += sign * i128::from(size);
        *stored_bytes += sign * i128::from(stored);
    }
}

/// Adds `delta` to the store-wide number `name` (two's complement: a shard may go below
/// zero, since a key counted in one shard is never in another, so the sum never does;
/// sums wrap back).
fn add_to_number(tx: &dyn Txn, name: &str, delta: i128) -> Result<(), MetaError> {
    if delta == 0 {
        return Ok(());
    }
    let value = read_number(tx, name)?.wrapping_add(delta as u64);
    write_number(tx, name, value)
}

/// Adds `usage` to the usage totals of `shard`.
fn add_usage_to_shard(tx: &dyn Txn, shard: u64, usage: &Usage) -> Result<(), MetaError> {
    for (class, deltas) in usage.iter().enumerate() {
        for (field, delta) in USAGE_FIELDS.iter().zip(deltas) {
            add_to_number(tx, &shard_name(&usage_total(class, field), shard), *delta)?;
        }
    }
    Ok(())
}

/// Moves the object totals of (bucket, key)'s shard from `old` (the record the change
/// replaces or removes) to `new` (the record it stores): count, bytes and usage by size.
fn count_change(
    tx: &dyn Txn,
    bucket: &str,
    key: &str,
    old: Option<&ObjectRecord>,
    new: Option<&ObjectRecord>,
) -> Result<(), MetaError> {
    let shard = total_shard(bucket, key);
    let mut usage: Usage = [[0; 3]; SIZE_CLASSES];
    if let Some(old) = old {
        add_usage(&mut usage, old, -1);
    }
    if let Some(new) = new {
        add_usage(&mut usage, new, 1);
    }
    // Every number this changes, read in one go (a commit prefetched them already).
    let keys = usage_keys(shard);
    let mut wanted: Vec<(Table, Key)> = [OBJECT_COUNT_KEY, OBJECT_BYTES_KEY]
        .map(|total| (Table::Meta, Key::name(&shard_name(total, shard))))
        .into();
    for (class, deltas) in usage.iter().enumerate() {
        for (field, delta) in deltas.iter().enumerate() {
            if *delta != 0 {
                wanted.push((Table::Meta, keys[class][field].clone()));
            }
        }
    }
    tx.prefetch(&wanted)?;
    let objects = i128::from(new.is_some()) - i128::from(old.is_some());
    let bytes = new.map_or(0, |r| i128::from(r.size())) - old.map_or(0, |r| i128::from(r.size()));
    add_to_number(tx, &shard_name(OBJECT_COUNT_KEY, shard), objects)?;
    add_to_number(tx, &shard_name(OBJECT_BYTES_KEY, shard), bytes)?;
    add_usage_to_shard(tx, shard, &usage)
}

/// The usage by size, every shard summed.
fn read_usage(tx: &dyn Txn) -> Result<[SizeUsage; SIZE_CLASSES], MetaError> {
    let mut usage = [SizeUsage::default(); SIZE_CLASSES];
    for (class, found) in usage.iter_mut().enumerate() {
        let [objects, bytes, stored] = USAGE_FIELDS;
        found.objects = read_total(tx, &usage_total(class, objects))?;
        found.bytes = read_total(tx, &usage_total(class, bytes))?;
        found.stored_bytes = read_total(tx, &usage_total(class, stored))?;
    }
    Ok(usage)
}

/// Stores `record` as the committed object of its (bucket, key), keeping the placed-units
/// index and the totals; returns the record it replaced.
fn put_object(tx: &dyn Txn, record: &ObjectRecord) -> Result<Option<ObjectRecord>, MetaError> {
    let name = Key::pair(&record.bucket, &record.key);
    let old = match tx.get(Table::Objects, &name)? {
        Some(bytes) => Some(decode_object(&record.bucket, &record.key, &bytes)?),
        None => None,
    };
    if let Some(old) = &old {
        let stale: Vec<Key> = placed_entries(old).into_iter().map(|(k, _)| k).collect();
        tx.remove_many(Table::Placed, &stale)?;
    }
    tx.put(Table::Objects, &name, &encode_object(record))?;
    tx.put_many(Table::Placed, &placed_entries(record))?;
    count_change(tx, &record.bucket, &record.key, old.as_ref(), Some(record))?;
    Ok(old)
}

/// Removes the committed object of (bucket, key), its index entries and its share of the
/// totals; returns it.
fn remove_object(tx: &dyn Txn, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
    let Some(bytes) = tx.remove(Table::Objects, &Key::pair(bucket, key))? else {
        return Ok(None);
    };
    let old = decode_object(bucket, key, &bytes)?;
    let stale: Vec<Key> = placed_entries(&old).into_iter().map(|(k, _)| k).collect();
    tx.remove_many(Table::Placed, &stale)?;
    count_change(tx, bucket, key, Some(&old), None)?;
    Ok(Some(old))
}

/// Stores committed object records as they are (new keys only), with their index entries
/// and totals, in one transaction, and moves the generation counter past theirs: for bulk
/// loads (`weft bench meta` fills a store with it). A key that already has an object is
/// refused, with nothing stored.
pub fn load_objects<B: KvBackend>(backend: &B, records: &[ObjectRecord]) -> Result<(), MetaError> {
    backend.write(&mut |tx| {
        let mut objects = Vec::with_capacity(records.len());
        let mut placed = Vec::new();
        for record in records {
            let name = Key::pair(&record.bucket, &record.key);
            if tx.get(Table::Objects, &name)?.is_some() {
                return Err(MetaError::Store {
                    reason: format!(
                        "a bulk load over {}/{}, which exists",
                        record.bucket, record.key
                    ),
                });
            }
            objects.push((name, encode_object(record)));
            placed.extend(placed_entries(record));
        }
        tx.put_many(Table::Objects, &objects)?;
        tx.put_many(Table::Placed, &placed)?;
        let mut shards = [(0i128, 0i128, [[0i128; 3]; SIZE_CLASSES]); TOTAL_SHARDS as usize];
        for record in records {
            let shard = &mut shards[total_shard(&record.bucket, &record.key) as usize];
            shard.0 += 1;
            shard.1 += i128::from(record.size());
            add_usage(&mut shard.2, record, 1);
        }
        for (at, (objects, bytes, usage)) in shards.into_iter().enumerate() {
            add_to_number(tx, &shard_name(OBJECT_COUNT_KEY, at as u64), objects)?;
            add_to_number(tx, &shard_name(OBJECT_BYTES_KEY, at as u64), bytes)?;
            add_usage_to_shard(tx, at as u64, &usage)?;
        }
        let top = records.iter().map(|r| r.generation).max().unwrap_or(0);
        if top > read_number(tx, NEXT_GENERATION_KEY)? {
            write_number(tx, NEXT_GENERATION_KEY, top)?;
        }
        Ok(())
    })
}

/// Builds the placed-units index and the object totals of a store whose objects predate
/// them (a redb file of schema 6 or older, a PostgreSQL database before migration 2), and
/// the usage by size of a store whose objects predate it, in one transaction; marks a new
/// store built. Does nothing once both are built.
pub fn build_indexes<B: KvBackend>(backend: &B) -> Result<(), MetaError> {
    backend.write(&mut |tx| {
        let indexes = read_number(tx, INDEXES_BUILT_KEY)? != 1;
        let usage = read_number(tx, USAGE_BUILT_KEY)? != 1;
        if !indexes && !usage {
            return Ok(());
        }
        const PAGE: usize = 1000;
        let (mut objects, mut units) = (0u64, 0u64);
        let mut shards = [(0u64, 0u64, [[0i128; 3]; SIZE_CLASSES]); TOTAL_SHARDS as usize];
        let mut after: Option<Key> = None;
        loop {
            let lower = after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
            let page = tx.range(Table::Objects, lower, End::Open, PAGE)?;
            let full = page.len() == PAGE;
            for (name, value) in page {
                let Key::Pair(bucket, key) = &name else {
                    return Err(misshapen(Table::Objects, &name));
                };
                let record = decode_object(bucket, key, &value)?;
                let shard = &mut shards[total_shard(bucket, key) as usize];
                if indexes {
                    let entries = placed_entries(&record);
                    units += entries.len() as u64;
                    tx.put_many(Table::Placed, &entries)?;
                    shard.0 += 1;
                    shard.1 = shard.1.wrapping_add(record.size());
                }
                add_usage(&mut shard.2, &record, 1);
                objects += 1;
                after = Some(name);
            }
            if !full {
                break;
            }
        }
        for (at, (count, bytes, usage_shard)) in shards.into_iter().enumerate() {
            if indexes {
                write_number(tx, &shard_name(OBJECT_COUNT_KEY, at as u64), count)?;
                write_number(tx, &shard_name(OBJECT_BYTES_KEY, at as u64), bytes)?;
            }
            if usage {
                for (class, totals) in usage_shard.iter().enumerate() {
                    for (field, total) in USAGE_FIELDS.iter().zip(totals) {
                        let name = shard_name(&usage_total(class, field), at as u64);
                        write_number(tx, &name, *total as u64)?;
                    }
                }
            }
        }
        write_number(tx, INDEXES_BUILT_KEY, 1)?;
        write_number(tx, USAGE_BUILT_KEY, 1)?;
        if objects > 0 {
            tracing::info!(
                objects,
                units,
                indexes,
                usage,
                "built the object totals (and, when asked, the placed-units index)"
            );
        }
        Ok(())
    })
}

fn read_transition(
    tx: &dyn Txn,
    bucket: &str,
    key: &str,
) -> Result<Option<TransitionRecord>, MetaError> {
    match tx.get(Table::Transitions, &Key::pair(bucket, key))? {
        Some(bytes) => Ok(Some(decode_transition(bucket, key, &bytes)?)),
        None => Ok(None),
    }
}

/// Whether `table` has a key at or above `lower` whose encoding starts with `prefix`.
fn any_in(tx: &dyn Txn, table: Table, lower: &Key, prefix: &[u8]) -> Result<bool, MetaError> {
    Ok(!tx.range(table, Bound::Included(lower), End::Prefix(prefix), 1)?.is_empty())
}

/// Objects of `bucket` whose key starts with `prefix`, in key order, at most `limit`.
fn scan_objects(
    tx: &dyn Txn,
    bucket: &str,
    prefix: &str,
    limit: usize,
) -> Result<Vec<ObjectRecord>, MetaError> {
    let lower = Key::pair(bucket, prefix);
    let entries = tx.range(
        Table::Objects,
        Bound::Included(&lower),
        End::Prefix(&prefix_after(bucket, prefix)),
        limit,
    )?;
    entries
        .into_iter()
        .map(|(name, bytes)| match name {
            Key::Pair(b, k) => decode_object(&b, &k, &bytes),
            other => Err(misshapen(Table::Objects, &other)),
        })
        .collect()
}

/// A transaction seen by the versioning rules ([`crate::versions`]).
struct Tables<'a>(&'a dyn Txn);

impl VersionReads for Tables<'_> {
    fn bucket(&self, bucket: &str) -> Result<BucketRecord, MetaError> {
        bucket_in(self.0, bucket)
    }

    fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        read_object(self.0, bucket, key)
    }

    fn scan(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError> {
        scan_objects(self.0, bucket, prefix, limit)
    }
}

impl VersionTables for Tables<'_> {
    fn insert_object(&mut self, record: &ObjectRecord) -> Result<(), MetaError> {
        put_object(self.0, record).map(drop)
    }

    fn remove_object(
        &mut self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        self.0.remove(Table::Transitions, &Key::pair(bucket, key))?;
        remove_object(self.0, bucket, key)
    }

    fn next_generation(&mut self) -> Result<u64, MetaError> {
        next_counter(self.0, NEXT_GENERATION_KEY)
    }

    fn note_move(&mut self) -> Result<(), MetaError> {
        next_counter(self.0, VERSION_MOVES_KEY).map(drop)
    }
}

/// The queued task id of (bucket, key, unit), if any.
fn indexed_task(tx: &dyn Txn, index_key: &Key) -> Result<Option<u64>, MetaError> {
    match tx.get(Table::RepairIndex, index_key)? {
        Some(bytes) => Ok(Some(number(Table::RepairIndex, index_key, &bytes)?)),
        None => Ok(None),
    }
}

/// The index entries (unit name, task id) of (bucket, key) whose unit name starts with
/// `unit_prefix`: at most one per unit of the object.
fn indexed_tasks_of(
    tx: &dyn Txn,
    bucket: &str,
    key: &str,
    unit_prefix: &str,
) -> Result<Vec<(Key, u64)>, MetaError> {
    let lower = Key::unit(bucket, key, unit_prefix);
    let prefix = prefix_after_two(bucket, key, unit_prefix);
    let entries =
        tx.range(Table::RepairIndex, Bound::Included(&lower), End::Prefix(&prefix), usize::MAX)?;
    entries
        .into_iter()
        .map(|(name, bytes)| {
            let id = number(Table::RepairIndex, &name, &bytes)?;
            Ok((name, id))
        })
        .collect()
}

/// Removes every queued repair of a parity unit of (bucket, key): their index entries are
/// `p…` names.
fn drop_parity_repairs(tx: &dyn Txn, bucket: &str, key: &str) -> Result<(), MetaError> {
    for (name, id) in indexed_tasks_of(tx, bucket, key, "p")? {
        tx.remove(Table::RepairIndex, &name)?;
        tx.remove(Table::Repairs, &Key::Task(id))?;
    }
    Ok(())
}

/// One enqueue inside a write transaction (see `MetaStore::enqueue_repair`).
fn enqueue_in(tx: &dyn Txn, request: &RepairRequest, now_ms: u64) -> Result<Enqueued, MetaError> {
    let (bucket, key) = (request.object.bucket.as_str(), request.object.key.as_str());
    let unit_text = unit_name(request.unit);
    let index_key = Key::unit(bucket, key, &unit_text);
    let queued_id = indexed_task(tx, &index_key)?;
    let queued = match queued_id {
        Some(id) => match tx.get(Table::Repairs, &Key::Task(id))? {
            Some(bytes) => Some(decode_task(id, &bytes)?),
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
    let committed = read_object(tx, bucket, key)?;
    match enqueue_step(committed.as_ref(), queued.as_ref(), request, now_ms)? {
        EnqueueStep::Keep(outcome) => Ok(outcome),
        EnqueueStep::Update(task) => {
            let id = queued_id.expect("an update replaces a queued task");
            tx.put(Table::Repairs, &Key::Task(id), &encode(&task))?;
            Ok(Enqueued::Queued)
        }
        EnqueueStep::Append(task) => {
            if let Some(old) = queued_id {
                tx.remove(Table::Repairs, &Key::Task(old))?;
            }
            let id = next_counter(tx, NEXT_REPAIR_ID_KEY)?;
            tx.put(Table::Repairs, &Key::Task(id), &encode(&task))?;
            tx.put(Table::RepairIndex, &index_key, &id.to_be_bytes())?;
            Ok(Enqueued::Queued)
        }
    }
}

/// The task of `lease`, if the lease is still its current one.
fn leased_task(tx: &dyn Txn, lease: &RepairLease) -> Result<RepairTask, MetaError> {
    let task = match tx.get(Table::Repairs, &Key::Task(lease.task_id))? {
        Some(bytes) => decode_task(lease.task_id, &bytes)?,
        None => return Err(lease_lost(lease)),
    };
    if !holds(&task, lease) {
        return Err(lease_lost(lease));
    }
    Ok(task)
}

/// Removes task `task_id` (known to exist) and its index entry.
fn remove_task(tx: &dyn Txn, task_id: u64, task: &RepairTask) -> Result<(), MetaError> {
    tx.remove(Table::Repairs, &Key::Task(task_id))?;
    let unit_text = unit_name(task.unit);
    tx.remove(Table::RepairIndex, &Key::unit(&task.object.bucket, &task.object.key, &unit_text))?;
    Ok(())
}

/// The tasks of the queue, in order, a page at a time, until `visit` returns false.
fn each_task(
    tx: &dyn Txn,
    mut visit: impl FnMut(u64, RepairTask) -> Result<bool, MetaError>,
) -> Result<(), MetaError> {
    const PAGE: usize = 256;
    let mut after: Option<Key> = None;
    loop {
        let lower = after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
        let page = tx.range(Table::Repairs, lower, End::Open, PAGE)?;
        let full = page.len() == PAGE;
        for (name, bytes) in page {
            let Key::Task(id) = name else { return Err(misshapen(Table::Repairs, &name)) };
            if !visit(id, decode_task(id, &bytes)?)? {
                return Ok(());
            }
            after = Some(name);
        }
        if !full {
            return Ok(());
        }
    }
}

/// Up to `min(limit, MAX_LIST_LIMIT)` values of a (bucket, key) table in key order, after
/// `after`, decoded.
fn page_after<T>(
    tx: &dyn Txn,
    table: Table,
    after: Option<&ObjectName>,
    limit: usize,
    decode: impl Fn(&str, &str, &[u8]) -> Result<T, MetaError>,
) -> Result<Vec<T>, MetaError> {
    let after = after.map(|name| Key::pair(&name.bucket, &name.key));
    let lower = after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
    let entries = tx.range(table, lower, End::Open, limit.min(MAX_LIST_LIMIT))?;
    entries
        .into_iter()
        .map(|(name, bytes)| match name {
            Key::Pair(bucket, key) => decode(&bucket, &key, &bytes),
            other => Err(misshapen(table, &other)),
        })
        .collect()
}

/// An entry of the placed-units index as a [`PlacedUnit`].
fn placed_unit(key: Key, value: &[u8]) -> Result<PlacedUnit, MetaError> {
    let corrupt = |reason: &str| MetaError::Corrupt {
        table: Table::Placed.name(),
        key: format!("{key:?}"),
        reason: reason.into(),
    };
    let Key::Placed(node, disk, bucket, object_key, unit) = &key else {
        return Err(misshapen(Table::Placed, &key));
    };
    let unit = parse_unit_name(unit).ok_or_else(|| corrupt("not a unit name"))?;
    let (generation, rack) = match value.len() {
        12 => (
            u64::from_be_bytes(value[..8].try_into().expect("8 bytes")),
            u32::from_be_bytes(value[8..].try_into().expect("4 bytes")),
        ),
        _ => return Err(corrupt("a value that is not 12 bytes")),
    };
    Ok(PlacedUnit {
        disk: DiskLocation { rack, node: *node, disk: *disk },
        object: ObjectName { bucket: bucket.clone(), key: object_key.clone() },
        unit,
        generation,
    })
}

fn invalid_policy(bucket: &str, error: impl ToString) -> MetaError {
    MetaError::InvalidRecord {
        bucket: bucket.into(),
        key: String::new(),
        reason: error.to_string(),
    }
}

impl<B: KvBackend> MetaStore for B {
    fn set_bucket_policy(&self, name: &str, policy: Policy) -> Result<BucketRecord, MetaError> {
        policy.validate().map_err(|e| invalid_policy(name, e))?;
        self.write(&mut |tx| {
            let mut record = bucket_in(tx, name)?;
            record.default_policy = policy;
            tx.put(Table::Buckets, &Key::name(name), &encode(&record))?;
            Ok(record)
        })
    }

    fn version_moves(&self) -> Result<u64, MetaError> {
        self.read(&mut |tx| read_number(tx, VERSION_MOVES_KEY))
    }

    fn set_bucket_versioning(
        &self,
        name: &str,
        versioning: Versioning,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        self.write(&mut |tx| {
            let mut record = bucket_in(tx, name)?;
            versions::check_versioning(&record, versioning)?;
            record.versioning = Some(versioning);
            tx.put(Table::Buckets, &Key::name(name), &encode(&record))?;
            if read_bucket(tx, crate::VERSIONS_BUCKET)?.is_none() {
                let internal = versions::versions_bucket(&record, now_ms);
                tx.put(Table::Buckets, &Key::name(crate::VERSIONS_BUCKET), &encode(&internal))?;
            }
            Ok(record)
        })
    }

    fn set_bucket_object_lock(
        &self,
        name: &str,
        lock: crate::lock::BucketLock,
    ) -> Result<BucketRecord, MetaError> {
        self.write(&mut |tx| {
            let record = crate::lock::locked_bucket(bucket_in(tx, name)?, lock)?;
            tx.put(Table::Buckets, &Key::name(name), &encode(&record))?;
            Ok(record)
        })
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
        self.write(&mut |tx| {
            crate::lock::set_version_lock(
                &mut Tables(tx),
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
        self.write(&mut |tx| {
            versions::set_version_attributes(
                &mut Tables(tx),
                bucket,
                key,
                version,
                attributes.clone(),
            )
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
        let record_key = Key::pair(namespace, name);
        let bytes = encode(value);
        self.write(&mut |tx| {
            if if_absent && tx.get(Table::Gateway, &record_key)?.is_some() {
                return Err(MetaError::RecordExists {
                    namespace: namespace.into(),
                    name: name.into(),
                });
            }
            tx.put(Table::Gateway, &record_key, &bytes)
        })
    }

    fn replace_record(
        &self,
        namespace: &str,
        name: &str,
        expected: Option<&serde_json::Value>,
        value: &serde_json::Value,
    ) -> Result<(), MetaError> {
        check_namespace(namespace)?;
        let record_key = Key::pair(namespace, name);
        let bytes = encode(value);
        self.write(&mut |tx| {
            let found = tx.get(Table::Gateway, &record_key)?;
            let found = found.map(|b| decode_record(namespace, name, &b)).transpose()?;
            if found.as_ref() != expected {
                return Err(MetaError::RecordChanged {
                    namespace: namespace.into(),
                    name: name.into(),
                });
            }
            tx.put(Table::Gateway, &record_key, &bytes)
        })
    }

    fn get_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError> {
        check_namespace(namespace)?;
        let found = self.read(&mut |tx| tx.get(Table::Gateway, &Key::pair(namespace, name)))?;
        found.map(|bytes| decode_record(namespace, name, &bytes)).transpose()
    }

    fn delete_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError> {
        check_namespace(namespace)?;
        self.write(&mut |tx| {
            let removed = tx.remove(Table::Gateway, &Key::pair(namespace, name))?;
            removed.map(|bytes| decode_record(namespace, name, &bytes)).transpose()
        })
    }

    fn list_records(
        &self,
        namespace: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RecordPage, MetaError> {
        check_namespace(namespace)?;
        let limit = limit.min(MAX_LIST_LIMIT);
        let (start, inclusive) = list_start(prefix, start_after);
        let start = Key::pair(namespace, start);
        let lower = if inclusive { Bound::Included(&start) } else { Bound::Excluded(&start) };
        let within = prefix_after(namespace, prefix);
        let entries =
            self.read(&mut |tx| tx.range(Table::Gateway, lower, End::Prefix(&within), limit))?;
        entries
            .into_iter()
            .map(|(name, bytes)| match name {
                Key::Pair(n, name) => {
                    let value = decode_record(&n, &name, &bytes)?;
                    Ok((name, value))
                }
                other => Err(misshapen(Table::Gateway, &other)),
            })
            .collect()
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
        default_policy.validate().map_err(|e| invalid_policy(name, e))?;
        let record = BucketRecord {
            name: name.into(),
            default_policy,
            created_ms: now_ms,
            raidp,
            geometric,
            versioning: None,
            object_lock: None,
        };
        let bytes = encode(&record);
        self.write(&mut |tx| {
            if tx.get(Table::Buckets, &Key::name(name))?.is_some() {
                return Err(MetaError::BucketExists { bucket: name.into() });
            }
            tx.put(Table::Buckets, &Key::name(name), &bytes)
        })?;
        Ok(record)
    }

    fn get_bucket(&self, name: &str) -> Result<BucketRecord, MetaError> {
        self.read(&mut |tx| bucket_in(tx, name))
    }

    fn list_buckets(&self) -> Result<Vec<BucketRecord>, MetaError> {
        let entries =
            self.read(&mut |tx| tx.range(Table::Buckets, Bound::Unbounded, End::Open, usize::MAX))?;
        entries
            .into_iter()
            .map(|(name, bytes)| match name {
                Key::Name(name) => decode("buckets", &|| name.clone(), &bytes),
                other => Err(misshapen(Table::Buckets, &other)),
            })
            .collect()
    }

    fn delete_bucket(&self, name: &str) -> Result<(), MetaError> {
        let versions = versions::bucket_versions_prefix(name, "");
        let first_write = Key::write(name, "", 0);
        let first_object = Key::pair(name, "");
        let first_version = Key::pair(crate::VERSIONS_BUCKET, &versions);
        let (in_bucket, in_versions) =
            (prefix_after(name, ""), prefix_after(crate::VERSIONS_BUCKET, &versions));
        let mut bucket_only = Vec::new();
        string_into(&mut bucket_only, name);
        self.write(&mut |tx| {
            if tx.get(Table::Buckets, &Key::name(name))?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: name.into() });
            }
            if any_in(tx, Table::Objects, &first_object, &in_bucket)?
                || any_in(tx, Table::Writes, &first_write, &bucket_only)?
                || any_in(tx, Table::Objects, &first_version, &in_versions)?
            {
                return Err(MetaError::BucketNotEmpty { bucket: name.into() });
            }
            tx.remove(Table::Buckets, &Key::name(name)).map(drop)
        })
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
        self.write_deferred(&mut |tx| {
            tx.prefetch(&[
                (Table::Buckets, Key::name(bucket)),
                (Table::Meta, Key::name(NEXT_GENERATION_KEY)),
            ])?;
            if tx.get(Table::Buckets, &Key::name(bucket))?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
            }
            let generation = next_counter(tx, NEXT_GENERATION_KEY)?;
            let record = ObjectRecord {
                bucket: bucket.into(),
                key: key.into(),
                placement: placement.clone(),
                state: ObjectState::Writing,
                created_ms: now_ms,
                generation,
                parity_generation: 0,
                digests: Digests::new(),
                raidp: raidp.clone(),
                geometric: None,
                owners: Vec::new(),
                attributes: None,
                versioned: false,
                delete_marker: false,
                lock: Default::default(),
            };
            tx.put(Table::Writes, &Key::write(bucket, key, generation), &encode_object(&record))?;
            Ok(record)
        })
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
        let name = Key::write(bucket, key, generation);
        let totals = total_keys(bucket, key);
        self.write(&mut |tx| {
            // What a commit reads (the object it replaces, its transition, the totals).
            let mut wanted = vec![
                (Table::Writes, name.clone()),
                (Table::Buckets, Key::name(bucket)),
                (Table::Objects, Key::pair(bucket, key)),
                (Table::Transitions, Key::pair(bucket, key)),
            ];
            wanted.extend(totals.iter().map(|total| (Table::Meta, total.clone())));
            tx.prefetch(&wanted)?;
            let write = match tx.get(Table::Writes, &name)? {
                Some(bytes) => decode_object(bucket, key, &bytes)?,
                None => {
                    return Err(MetaError::NoSuchWrite {
                        bucket: bucket.into(),
                        key: key.into(),
                        generation,
                    })
                }
            };
            check_digests(&write, digests, |_| true)?;
            let mut tables = Tables(tx);
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
            tx.remove(Table::Writes, &name)?;
            let current = tables.remove_object(bucket, key)?;
            let replaced = versions::on_commit(
                &mut tables,
                bucket_record.versioning,
                &mut committed,
                current,
            )?;
            tables.insert_object(&committed)?;
            Ok((committed, replaced))
        })
    }

    fn commit_pack(
        &self,
        stripe_bucket: &str,
        stripes: &[StripeCommit],
        bucket: &str,
        objects: &[PackedObject],
    ) -> Result<PackOutcome, MetaError> {
        self.write(&mut |tx| {
            let mut outcome = PackOutcome::default();
            for stripe in stripes {
                let key = stripe.key.as_str();
                let name = Key::write(stripe_bucket, key, stripe.generation);
                let write = match tx.get(Table::Writes, &name)? {
                    Some(bytes) => decode_object(stripe_bucket, key, &bytes)?,
                    None => {
                        return Err(MetaError::NoSuchWrite {
                            bucket: stripe_bucket.into(),
                            key: key.into(),
                            generation: stripe.generation,
                        })
                    }
                };
                check_digests(&write, &stripe.digests, |_| true)?;
                tx.remove(Table::Writes, &name)?;
                let record = ObjectRecord {
                    state: ObjectState::Committed,
                    digests: stripe.digests.clone(),
                    owners: stripe.owners.clone(),
                    ..write
                };
                put_object(tx, &record)?;
                tx.remove(Table::Transitions, &Key::pair(stripe_bucket, key))?;
            }
            for object in objects {
                let key = object.key.as_str();
                let current = read_object(tx, bucket, key)?;
                if let Some(why) = pack_refusal(current.as_ref(), object.generation) {
                    outcome.skipped.push((object.key.clone(), why));
                    continue;
                }
                let old = current.expect("pack_refusal checked it");
                put_object(tx, &packed_record(&old, &object.place)?)?;
                tx.remove(Table::Transitions, &Key::pair(bucket, key))?;
                outcome.packed.push(old);
            }
            Ok(outcome)
        })
    }

    fn get_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        let found =
            self.read(&mut |tx| tx.get(Table::Writes, &Key::write(bucket, key, generation)))?;
        found.map(|bytes| decode_object(bucket, key, &bytes)).transpose()
    }

    fn get_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError> {
        self.read(&mut |tx| {
            if tx.get(Table::Buckets, &Key::name(bucket))?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
            }
            read_object(tx, bucket, key)?
                .ok_or_else(|| MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() })
        })
    }

    fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectPage, MetaError> {
        let limit = limit.min(MAX_LIST_LIMIT);
        let (start, inclusive) = list_start(prefix, start_after);
        let start = Key::pair(bucket, start);
        let lower = if inclusive { Bound::Included(&start) } else { Bound::Excluded(&start) };
        let within = prefix_after(bucket, prefix);
        let entries = self.read(&mut |tx| {
            if tx.get(Table::Buckets, &Key::name(bucket))?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
            }
            // One more than a page tells whether another page follows.
            tx.range(Table::Objects, lower, End::Prefix(&within), limit + 1)
        })?;
        let mut objects = Vec::with_capacity(entries.len().min(limit));
        let more = entries.len() > limit;
        for (name, bytes) in entries.into_iter().take(limit) {
            match name {
                Key::Pair(b, k) => objects.push(decode_object(&b, &k, &bytes)?),
                other => return Err(misshapen(Table::Objects, &other)),
            }
        }
        let next_start_after = match more {
            true => objects.last().map(|r| r.key.clone()),
            false => None,
        };
        Ok(ObjectPage { objects, next_start_after })
    }

    fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
    ) -> Result<ObjectRecord, MetaError> {
        self.write(&mut |tx| {
            if tx.get(Table::Buckets, &Key::name(bucket))?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
            }
            if let Some(current) = read_object(tx, bucket, key)? {
                check_precondition(Some(&current), precondition, bucket, key)?;
                crate::lock::check_unlocked(&current)?;
            }
            let Some(record) = remove_object(tx, bucket, key)? else {
                return Err(MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() });
            };
            tx.remove(Table::Transitions, &Key::pair(bucket, key))?;
            Ok(record)
        })
    }

    fn delete_latest(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
        now_ms: u64,
    ) -> Result<Deleted, MetaError> {
        self.write(&mut |tx| {
            versions::delete_latest(&mut Tables(tx), bucket, key, precondition, now_ms)
        })
    }

    fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        terms: versions::VersionDelete,
    ) -> Result<ObjectRecord, MetaError> {
        self.write(&mut |tx| versions::delete_version(&mut Tables(tx), bucket, key, version, terms))
    }

    fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
    ) -> Result<ObjectRecord, MetaError> {
        self.read(&mut |tx| {
            let tables = Tables(tx);
            tables.bucket(bucket)?;
            let found = versions::find_version(&tables, bucket, key, version)?;
            found.ok_or_else(|| versions::no_such_version(bucket, key, version))
        })
    }

    fn list_writes(
        &self,
        after: Option<&WriteCursor>,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError> {
        let after =
            after.map(|(name, generation)| Key::write(&name.bucket, &name.key, *generation));
        let lower = after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
        let entries = self
            .read(&mut |tx| tx.range(Table::Writes, lower, End::Open, limit.min(MAX_LIST_LIMIT)))?;
        entries
            .into_iter()
            .map(|(name, bytes)| match name {
                Key::Write(bucket, key, _) => decode_object(&bucket, &key, &bytes),
                other => Err(misshapen(Table::Writes, &other)),
            })
            .collect()
    }

    fn abort_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<ObjectRecord, MetaError> {
        self.write(
            &mut |tx| match tx.remove(Table::Writes, &Key::write(bucket, key, generation))? {
                Some(bytes) => decode_object(bucket, key, &bytes),
                None => Err(MetaError::NoSuchWrite {
                    bucket: bucket.into(),
                    key: key.into(),
                    generation,
                }),
            },
        )
    }

    fn placed_units(
        &self,
        node: u32,
        disk: Option<u32>,
        after: Option<&PlacedUnit>,
        limit: usize,
    ) -> Result<Vec<PlacedUnit>, MetaError> {
        let mut prefix = node.to_be_bytes().to_vec();
        if let Some(disk) = disk {
            prefix.extend_from_slice(&disk.to_be_bytes());
        }
        let start = match after {
            Some(after) => Key::Placed(
                after.disk.node,
                after.disk.disk,
                after.object.bucket.clone(),
                after.object.key.clone(),
                unit_name(after.unit),
            ),
            None => {
                Key::Placed(node, disk.unwrap_or(0), String::new(), String::new(), String::new())
            }
        };
        let lower = match after {
            Some(_) => Bound::Excluded(&start),
            None => Bound::Included(&start),
        };
        let limit = limit.min(MAX_LIST_LIMIT);
        let entries =
            self.read(&mut |tx| tx.range(Table::Placed, lower, End::Prefix(&prefix), limit))?;
        entries.into_iter().map(|(key, value)| placed_unit(key, &value)).collect()
    }

    fn placed_disks(&self) -> Result<Vec<(u32, u32)>, MetaError> {
        self.read(&mut |tx| {
            let mut disks = Vec::new();
            let mut next = Some((0u32, 0u32));
            while let Some((node, disk)) = next {
                let from = Key::Placed(node, disk, String::new(), String::new(), String::new());
                let Some((key, _)) =
                    tx.range(Table::Placed, Bound::Included(&from), End::Open, 1)?.pop()
                else {
                    break;
                };
                let Key::Placed(node, disk, ..) = key else {
                    return Err(misshapen(Table::Placed, &key));
                };
                disks.push((node, disk));
                next = match disk.checked_add(1) {
                    Some(disk) => Some((node, disk)),
                    None => node.checked_add(1).map(|node| (node, 0)),
                };
            }
            Ok(disks)
        })
    }

    fn object_totals(&self) -> Result<ObjectTotals, MetaError> {
        self.read(&mut |tx| {
            Ok(ObjectTotals {
                objects: read_total(tx, OBJECT_COUNT_KEY)?,
                bytes: read_total(tx, OBJECT_BYTES_KEY)?,
                by_size: read_usage(tx)?,
            })
        })
    }

    fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Lease, MetaError> {
        let slot = Key::pair(LEASES, name);
        self.write(&mut |tx| {
            let current = match tx.get(Table::Gateway, &slot)? {
                Some(bytes) => Some(decode("gateway", &|| format!("{LEASES}/{name}"), &bytes)?),
                None => None,
            };
            let (lease, changed) = leased(current, name, holder, now_ms, lease_ms);
            if changed {
                tx.put(Table::Gateway, &slot, &encode(&lease))?;
            }
            Ok(lease)
        })
    }

    fn get_lease(&self, name: &str) -> Result<Option<Lease>, MetaError> {
        let slot = Key::pair(LEASES, name);
        let found = self.read(&mut |tx| tx.get(Table::Gateway, &slot))?;
        found.map(|bytes| decode("gateway", &|| format!("{LEASES}/{name}"), &bytes)).transpose()
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<(), MetaError> {
        let slot = Key::pair(LEASES, name);
        self.write(&mut |tx| {
            if let Some(bytes) = tx.get(Table::Gateway, &slot)? {
                let lease: Lease = decode("gateway", &|| format!("{LEASES}/{name}"), &bytes)?;
                if lease.holder == holder {
                    tx.remove(Table::Gateway, &slot)?;
                }
            }
            Ok(())
        })
    }

    fn record_replica(&self, replica: &ReplicaRecord) -> Result<(), MetaError> {
        let slot = Key::pair(REPLICAS, &replica.endpoint);
        let bytes = encode(replica);
        self.write(&mut |tx| tx.put(Table::Gateway, &slot, &bytes))
    }

    fn list_replicas(&self) -> Result<Vec<ReplicaRecord>, MetaError> {
        let first = Key::pair(REPLICAS, "");
        let within = prefix_after(REPLICAS, "");
        let entries = self.read(&mut |tx| {
            tx.range(Table::Gateway, Bound::Included(&first), End::Prefix(&within), MAX_LIST_LIMIT)
        })?;
        entries
            .into_iter()
            .map(|(key, bytes)| decode("gateway", &|| format!("{key:?}"), &bytes))
            .collect()
    }

    fn forget_replica(&self, endpoint: &str) -> Result<(), MetaError> {
        let slot = Key::pair(REPLICAS, endpoint);
        self.write(&mut |tx| tx.remove(Table::Gateway, &slot).map(drop))
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
        let bytes = encode(&record);
        // Deferred: a heartbeat lost in a crash only makes the node's stored heartbeat older,
        // and its next one (a second later) records it again (KvBackend::write_deferred).
        self.write_deferred(&mut |tx| tx.put(Table::Nodes, &Key::Node(record.node_id), &bytes))?;
        Ok(record)
    }

    fn list_nodes(&self) -> Result<Vec<NodeRecord>, MetaError> {
        let entries =
            self.read(&mut |tx| tx.range(Table::Nodes, Bound::Unbounded, End::Open, usize::MAX))?;
        entries
            .into_iter()
            .map(|(name, bytes)| match name {
                Key::Node(id) => decode("nodes", &|| id.to_string(), &bytes),
                other => Err(misshapen(Table::Nodes, &other)),
            })
            .collect()
    }

    fn enqueue_repair(&self, request: &RepairRequest, now_ms: u64) -> Result<Enqueued, MetaError> {
        self.write(&mut |tx| enqueue_in(tx, request, now_ms))
    }

    fn enqueue_repairs(&self, requests: &[RepairRequest], now_ms: u64) -> Result<usize, MetaError> {
        self.write(&mut |tx| {
            let mut queued = 0;
            for request in requests {
                if enqueue_in(tx, request, now_ms)? == Enqueued::Queued {
                    queued += 1;
                }
            }
            Ok(queued)
        })
    }

    fn take_repair(&self, now_ms: u64, lease_ms: u64) -> Result<Option<RepairLease>, MetaError> {
        self.write(&mut |tx| {
            // Oldest first; the scan is bounded by the queue length.
            let mut found = None;
            each_task(tx, |id, task| {
                if is_free(&task, now_ms) {
                    found = Some((id, task));
                    return Ok(false);
                }
                Ok(true)
            })?;
            let Some((task_id, mut task)) = found else {
                return Ok(None);
            };
            let deadline_ms = lease_deadline(&task, now_ms, lease_ms);
            task.attempts += 1;
            task.lease_deadline_ms = Some(deadline_ms);
            tx.put(Table::Repairs, &Key::Task(task_id), &encode(&task))?;
            Ok(Some(RepairLease { task_id, task, deadline_ms }))
        })
    }

    fn complete_repair(&self, lease: &RepairLease) -> Result<(), MetaError> {
        self.write(&mut |tx| {
            let task = leased_task(tx, lease)?;
            remove_task(tx, lease.task_id, &task)
        })
    }

    fn relocate_repaired(
        &self,
        lease: &RepairLease,
        disk: DiskLocation,
    ) -> Result<RepairOutcome, MetaError> {
        self.write(&mut |tx| {
            let task = leased_task(tx, lease)?;
            let committed = read_object(tx, &task.object.bucket, &task.object.key)?;
            let outcome = match relocated(committed, &task, disk)? {
                Some(object) => {
                    put_object(tx, &object)?;
                    RepairOutcome::Relocated(object)
                }
                None => RepairOutcome::Stale,
            };
            remove_task(tx, lease.task_id, &task)?;
            Ok(outcome)
        })
    }

    fn fail_repair_until(
        &self,
        lease: &RepairLease,
        error: &str,
        not_before_ms: Option<u64>,
        unfound: bool,
    ) -> Result<u64, MetaError> {
        self.write(&mut |tx| {
            let mut task = leased_task(tx, lease)?;
            remove_task(tx, lease.task_id, &task)?;
            let id = next_counter(tx, NEXT_REPAIR_ID_KEY)?;
            let unit_text = unit_name(task.unit);
            let index_key = Key::unit(&task.object.bucket, &task.object.key, &unit_text);
            tx.put(Table::RepairIndex, &index_key, &id.to_be_bytes())?;
            task.lease_deadline_ms = None;
            task.last_error = Some(error.to_string());
            task.not_before_ms = not_before_ms;
            task.unfound = unfound;
            tx.put(Table::Repairs, &Key::Task(id), &encode(&task))?;
            Ok(id)
        })
    }

    fn wake_unfound_repairs(&self) -> Result<usize, MetaError> {
        self.write(&mut |tx| {
            // Bounded by the queue length.
            let mut woken = Vec::new();
            each_task(tx, |id, task| {
                if task.unfound && task.not_before_ms.is_some() {
                    woken.push((id, RepairTask { not_before_ms: None, ..task }));
                }
                Ok(true)
            })?;
            for (id, task) in &woken {
                tx.put(Table::Repairs, &Key::Task(*id), &encode(task))?;
            }
            Ok(woken.len())
        })
    }

    fn drop_repairs_of(&self, bucket: &str, key: &str) -> Result<usize, MetaError> {
        self.write(&mut |tx| {
            let doomed = indexed_tasks_of(tx, bucket, key, "")?;
            for (name, id) in &doomed {
                tx.remove(Table::RepairIndex, name)?;
                tx.remove(Table::Repairs, &Key::Task(*id))?;
            }
            Ok(doomed.len())
        })
    }

    fn repairs_of(&self, bucket: &str, key: &str) -> Result<Vec<(u64, RepairTask)>, MetaError> {
        self.read(&mut |tx| {
            let mut out = Vec::new();
            for (_, id) in indexed_tasks_of(tx, bucket, key, "")? {
                if let Some(bytes) = tx.get(Table::Repairs, &Key::Task(id))? {
                    out.push((id, decode_task(id, &bytes)?));
                }
            }
            Ok(out)
        })
    }

    fn get_repair(&self, task_id: u64) -> Result<Option<RepairTask>, MetaError> {
        let found = self.read(&mut |tx| tx.get(Table::Repairs, &Key::Task(task_id)))?;
        found.map(|bytes| decode_task(task_id, &bytes)).transpose()
    }

    fn list_repairs(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, RepairTask)>, MetaError> {
        let after = after.map(Key::Task);
        let lower = after.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
        let entries = self.read(&mut |tx| {
            tx.range(Table::Repairs, lower, End::Open, limit.min(MAX_LIST_LIMIT))
        })?;
        entries
            .into_iter()
            .map(|(name, bytes)| match name {
                Key::Task(id) => Ok((id, decode_task(id, &bytes)?)),
                other => Err(misshapen(Table::Repairs, &other)),
            })
            .collect()
    }

    fn repair_queue_len(&self) -> Result<usize, MetaError> {
        let len = self.read(&mut |tx| tx.count(Table::Repairs))?;
        Ok(usize::try_from(len).expect("queue length fits in memory"))
    }

    fn begin_transition(
        &self,
        plan: NewTransition,
        now_ms: u64,
    ) -> Result<(TransitionRecord, Option<TransitionRecord>), MetaError> {
        self.write(&mut |tx| {
            if tx.get(Table::Buckets, &Key::name(&plan.bucket))?.is_none() {
                return Err(MetaError::NoSuchBucket { bucket: plan.bucket.clone() });
            }
            let committed = read_object(tx, &plan.bucket, &plan.key)?;
            check_new_transition(committed.as_ref(), &plan)?;
            let id = next_counter(tx, NEXT_TRANSITION_ID_KEY)?;
            let record = TransitionRecord::new(plan.clone(), id, now_ms);
            let (bucket, key) = (record.bucket.as_str(), record.key.as_str());
            let replaced = read_transition(tx, bucket, key)?;
            tx.put(Table::Transitions, &Key::pair(bucket, key), &encode(&record))?;
            Ok((record, replaced))
        })
    }

    fn commit_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        parity_digests: &Digests,
    ) -> Result<(ObjectRecord, ObjectRecord), MetaError> {
        self.write(&mut |tx| {
            let committed = read_object(tx, bucket, key)?;
            let pending = read_transition(tx, bucket, key)?;
            let new = transitioned(
                committed.as_ref(),
                pending.as_ref(),
                bucket,
                key,
                id,
                parity_digests,
            )?;
            let old = committed.expect("checked by transitioned");
            put_object(tx, &new)?;
            tx.remove(Table::Transitions, &Key::pair(bucket, key))?;
            drop_parity_repairs(tx, bucket, key)?;
            Ok((new, old))
        })
    }

    fn abort_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
    ) -> Result<TransitionRecord, MetaError> {
        self.write(&mut |tx| {
            let record = match read_transition(tx, bucket, key)? {
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
            tx.remove(Table::Transitions, &Key::pair(bucket, key))?;
            Ok(record)
        })
    }

    fn get_transition(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<TransitionRecord>, MetaError> {
        self.read(&mut |tx| read_transition(tx, bucket, key))
    }

    fn list_transitions(
        &self,
        after: Option<&ObjectName>,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, MetaError> {
        self.read(&mut |tx| page_after(tx, Table::Transitions, after, limit, decode_transition))
    }

    fn renew_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        deadline_ms: u64,
    ) -> Result<TransitionRecord, MetaError> {
        self.write(&mut |tx| {
            let committed = read_object(tx, bucket, key)?;
            let pending = read_transition(tx, bucket, key)?;
            let mut record =
                pending_one(committed.as_ref(), pending.as_ref(), bucket, key, id)?.clone();
            record.lease_deadline_ms = deadline_ms;
            tx.put(Table::Transitions, &Key::pair(bucket, key), &encode(&record))?;
            Ok(record)
        })
    }

    fn expire_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        now_ms: u64,
    ) -> Result<Option<TransitionRecord>, MetaError> {
        self.write(&mut |tx| {
            let record = match read_transition(tx, bucket, key)? {
                Some(pending) if pending.id == id && pending.lease_expired(now_ms) => pending,
                _ => return Ok(None),
            };
            tx.remove(Table::Transitions, &Key::pair(bucket, key))?;
            Ok(Some(record))
        })
    }

    fn transition_count(&self) -> Result<usize, MetaError> {
        let len = self.read(&mut |tx| tx.count(Table::Transitions))?;
        Ok(usize::try_from(len).expect("transition count fits in memory"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<Key> {
        let texts = ["", "a", "a\0", "a\0b", "a\u{1}", "ab", "b", "\u{7f}", "é", "\u{10FFFF}"];
        let mut out = Vec::new();
        for a in texts {
            out.push(Key::name(a));
            for b in texts {
                out.push(Key::pair(a, b));
                for n in [0, 1, 255, 256, u64::MAX] {
                    out.push(Key::write(a, b, n));
                }
                for c in ["", "d0", "p1.0"] {
                    out.push(Key::unit(a, b, c));
                }
            }
        }
        out.extend([0, 1, 256, u32::MAX].map(Key::Node));
        out.extend([0, 1, 256, u64::MAX].map(Key::Task));
        for (node, disk) in [(0, 0), (0, 1), (1, 0), (256, u32::MAX)] {
            for a in ["", "a", "a\0"] {
                out.push(Key::Placed(node, disk, a.into(), "k".into(), "d0".into()));
                out.push(Key::Placed(node, disk, "b".into(), a.into(), "p0.1".into()));
            }
        }
        out
    }

    fn table_of(key: &Key) -> Table {
        match key {
            Key::Name(_) => Table::Buckets,
            Key::Pair(..) => Table::Objects,
            Key::Write(..) => Table::Writes,
            Key::Unit(..) => Table::RepairIndex,
            Key::Node(_) => Table::Nodes,
            Key::Task(_) => Table::Repairs,
            Key::Placed(..) => Table::Placed,
        }
    }

    #[test]
    fn encodings_sort_as_keys_and_decode_back() {
        let keys = keys();
        for a in &keys {
            let table = table_of(a);
            assert!(a.fits(table));
            assert_eq!(Key::decode(table, &a.encode()).as_ref(), Ok(a), "{a:?}");
            for b in keys.iter().filter(|b| table_of(b) == table) {
                assert_eq!(a.encode().cmp(&b.encode()), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
        assert!(Key::decode(Table::Objects, &Key::name("a").encode()).is_err());
        assert!(Key::decode(Table::Buckets, b"a\0").is_err());
        assert!(Key::decode(Table::Buckets, &[0xC3, 0, 1]).is_err(), "not UTF-8");
    }

    #[test]
    fn a_prefix_and_its_end_bound_exactly_the_keys_it_begins() {
        let keys = keys();
        for (first, partial) in [("a", ""), ("a", "a"), ("a", "a\0"), ("", ""), ("é", "\u{10FFFF}")]
        {
            let prefix = prefix_after(first, partial);
            let end = prefix_end(&prefix).expect("a prefix of a string key has an end");
            for key in &keys {
                let bytes = key.encode();
                let inside = bytes.as_slice() >= prefix.as_slice() && bytes < end;
                let expected = match key {
                    Key::Pair(a, b) | Key::Write(a, b, _) | Key::Unit(a, b, _) => {
                        a == first && b.starts_with(partial)
                    }
                    _ => false,
                };
                if matches!(key, Key::Pair(..) | Key::Write(..) | Key::Unit(..)) {
                    assert_eq!(inside, expected, "{first:?}/{partial:?} and {key:?}");
                    assert_eq!(End::Prefix(&prefix).admits(key), expected);
                }
            }
        }
        assert_eq!(prefix_end(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF]), None);
    }
}
