//! weft-meta: the metadata of a weft cluster — buckets, objects and where their units live,
//! nodes and their disks, the repair queue and pending transitions — behind one [`MetaStore`]
//! trait.
//!
//! - [`RedbStore`]: the default, on an embedded transactional redb file.
//! - [`PgStore`]: on PostgreSQL, for metadata that must outlive one machine and for several
//!   meta processes on one database.
//! - [`MemStore`]: in memory, for the simulator and as the model tests check the others against.
//!
//! redb and PostgreSQL share one implementation of every operation ([`kv`]): only their
//! transactions differ.
//!
//! Invariants kept by the whole crate:
//! - Synchronous and clock-free: every time is a `now_ms` argument.
//! - Groups are never stored: an object keeps its layout and one disk per unit, and the
//!   group of a block is computed by `weft-layout` (Okapi §4.2).
//! - Every stored value carries a format version; unknown versions are refused, never guessed.

pub mod error;
pub mod kv;
pub mod lock;
pub mod mem;
mod overlay;
pub mod pg_local;
pub mod pg_store;
pub mod records;
mod redb_log;
pub mod redb_store;
pub mod service;
pub mod store;
pub mod versions;

pub use error::{MetaError, TransitionConflict};
pub use lock::{BucketLock, DefaultRetention, LockChange, ObjectLock, Retention, RetentionMode};
pub use mem::MemStore;
pub use pg_store::PgStore;
pub use records::{
    metadata_bytes, parse_unit_name, unit_name, BucketRecord, Digests, DiskReport, Enqueued,
    Heartbeat, NewTransition, NodeRecord, ObjectName, ObjectRecord, ObjectState, Policy,
    RaidpExtent, RaidpPolicy, RepairKind, RepairLease, RepairOutcome, RepairRequest, RepairTask,
    TransitionRecord, Versioning, WriteCursor, DEFAULT_TRANSITION_LEASE_MS, FORMAT_VERSION,
    GEOMETRIC_BUCKET, INTERNAL_BUCKET_PREFIX, MAX_ATTRIBUTES_BYTES, MAX_BUCKET_NAME_BYTES,
    MAX_KEY_BYTES, MIN_NEW_BUCKET_NAME_BYTES,
};
pub use redb_store::{RedbStore, StoreFaults, SCHEMA_VERSION};
pub use store::{
    check_attributes, check_digests, check_precondition, size_class, usage_of, CommitTerms, Lease,
    MetaStore, ObjectPage, ObjectTotals, PackOutcome, PackedObject, PlacedUnit, Precondition,
    ReplicaRecord, SizeUsage, StripeCommit, MAX_LIST_LIMIT, SIZE_CLASSES, SIZE_CLASS_BOUNDS,
};
pub use versions::{Deleted, VersionDelete, VersionRef, NULL_VERSION, VERSIONS_BUCKET};
