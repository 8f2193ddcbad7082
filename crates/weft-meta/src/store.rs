//! The [`MetaStore`] trait: every operation the metadata service needs.
//!
//! Invariants every implementation keeps:
//! - Each operation is atomic: it takes effect entirely or not at all, and a refused
//!   operation changes nothing.
//! - No clocks: time comes in as `now_ms`, so runs are deterministic and simulable.
//! - A bucket is deleted only when it holds no committed object and no write in progress.
//! - An object key has at most one committed record (its current object) and any number of
//!   writes in progress, each under its generation; committing a write replaces the committed
//!   record in the same transaction, which keeps the replaced one as a noncurrent version
//!   when the bucket is versioned ([`crate::versions`], whose invariants every store keeps)
//!   and returns it as garbage otherwise. A write in progress ends only by its commit or by
//!   `abort_write` of its own generation (how abandoned writes are expired).
//! - A bucket is deleted only when no version of its keys is left in
//!   [`crate::VERSIONS_BUCKET`] either.
//! - Generations and repair task ids come from store-wide counters that never go back.
//! - The repair queue holds at most one task per (object, unit); tasks are taken in the order
//!   they were enqueued, skipping those whose back-off (`not_before_ms`, set by the caller
//!   when it fails a task) has not passed, and a leased task returns to the queue when its
//!   lease expires.
//! - A task is queued only for a unit of a committed object, with that object's generation,
//!   checked in the enqueue's own transaction; a task whose object was deleted or replaced
//!   since is stale and is removed, never carried out.
//! - A task is never leased twice with the same deadline, so (task id, deadline) names a lease
//!   and an executor whose lease expired can neither complete nor fail the next one's work.
//! - Completing a repair by relocation checks the lease, the generation and the placement
//!   rules, moves the unit and removes the task in one transaction.
//! - An object has at most one transition pending; overwriting or deleting the object drops
//!   it in the same transaction. Transition ids come from a store-wide counter that never
//!   goes back, and become the object's parity generation on commit.
//! - Committing a transition checks the object's generation and that the transition is the
//!   pending one, builds the new placement from the object's data disks *at commit* with the
//!   planned relocations applied (each checked against its planned origin) and the planned
//!   parity disks, checks the placement rules, stores the object with the new layout and
//!   parity generation, removes the transition and the object's queued parity repairs (they
//!   name units of the old parity) — all in one transaction, or nothing.
//! - A pending transition has a lease deadline, set at begin and moved only by a renewal of
//!   that same transition; expiring removes it only if, in the same transaction, it is still
//!   the pending one and its deadline is at or before the `now_ms` given.
//! - Gateway records (the S3 gateway's access keys, uploads and object attributes) are
//!   opaque JSON under (namespace, name), in a fixed set of namespaces; meta checks nothing
//!   in them but keeps them atomically like every other record.

use std::collections::BTreeSet;

use weft_layout::{DiskLocation, GeometricPolicy, LayoutError, Placement, UnitId};

use crate::error::TransitionConflict;
use crate::records::{
    check_bucket_name, check_key, BucketRecord, Enqueued, Heartbeat, NewTransition, NodeRecord,
    ObjectName, ObjectRecord, Policy, RaidpExtent, RaidpPolicy, RepairKind, RepairLease,
    RepairOutcome, RepairRequest, RepairTask, TransitionRecord, WriteCursor, MAX_ATTRIBUTES_BYTES,
};
use crate::{Digests, MetaError};
use serde::{Deserialize, Serialize};

/// One bin-stripe write a pack commits (see [`MetaStore::commit_pack`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeCommit {
    pub key: String,
    pub generation: u64,
    pub digests: Digests,
    /// The stripe's owner tags, one per data block ([`crate::records::owner_tag`]).
    pub owners: Vec<u32>,
}

/// One object a pack moves into its bucket's bins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedObject {
    pub key: String,
    /// The generation the packer read.
    pub generation: u64,
    /// Its `weft_layout::GeoPlace` record, encoded.
    pub place: Vec<u8>,
}

/// What a pack commit did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackOutcome {
    /// The records the packed objects had before (their units are garbage now).
    pub packed: Vec<ObjectRecord>,
    /// Objects not packed, with why.
    pub skipped: Vec<(String, String)>,
}

/// Why `current` (the committed record of a key, if any) cannot be packed as the object of
/// `generation` the packer read; None when it can.
pub(crate) fn pack_refusal(current: Option<&ObjectRecord>, generation: u64) -> Option<String> {
    match current {
        None => Some("deleted since it was read".into()),
        Some(c) if c.generation != generation => {
            Some(format!("replaced since it was read (generation {} now)", c.generation))
        }
        Some(c) if c.geometric.is_some() => Some("already packed".into()),
        Some(c) if c.raidp.is_some() => Some("a RAIDP object".into()),
        Some(_) => None,
    }
}

/// The record of `old` once packed with `place` (see [`MetaStore::commit_pack`]).
pub(crate) fn packed_record(old: &ObjectRecord, place: &[u8]) -> Result<ObjectRecord, MetaError> {
    let placement =
        Placement::from_parts(*old.layout(), 0, old.placement.failure_domain(), 0, vec![], vec![])
            .map_err(|e| MetaError::InvalidRecord {
                bucket: old.bucket.clone(),
                key: old.key.clone(),
                reason: e.to_string(),
            })?;
    Ok(ObjectRecord {
        placement,
        parity_generation: 0,
        digests: Digests::new(),
        raidp: None,
        geometric: Some(place.to_vec()),
        ..old.clone()
    })
}

/// A unit of a committed object and where it is: an entry of the placed-units index
/// ([`MetaStore::placed_units`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PlacedUnit {
    pub disk: DiskLocation,
    pub object: crate::ObjectName,
    pub unit: weft_layout::UnitId,
    /// The object's generation.
    pub generation: u64,
}

/// The committed objects of the whole store (every bucket, noncurrent versions included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObjectTotals {
    pub objects: u64,
    /// The sum of their sizes.
    pub bytes: u64,
    /// The striped objects among them ([`usage_of`]) by size class ([`SIZE_CLASS_BOUNDS`]):
    /// what each class stores for the bytes it holds.
    pub by_size: [SizeUsage; SIZE_CLASSES],
}

/// Upper bounds (exclusive) of the object size classes of [`ObjectTotals::by_size`]: under
/// 64 KiB, under 1 MiB, 16 MiB, 256 MiB, 4 GiB, and the rest.
pub const SIZE_CLASS_BOUNDS: [u64; 5] = [64 << 10, 1 << 20, 16 << 20, 256 << 20, 4 << 30];

/// Number of size classes: one per bound, and one above the last.
pub const SIZE_CLASSES: usize = SIZE_CLASS_BOUNDS.len() + 1;

/// The striped objects of one size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SizeUsage {
    pub objects: u64,
    /// The sum of their sizes.
    pub bytes: u64,
    /// The sum of the lengths of their stored units (data blocks at their real length,
    /// parity blocks at their group's unit length; unit headers not counted).
    pub stored_bytes: u64,
}

/// The size class of an object of `size` bytes: the first bound above it.
pub fn size_class(size: u64) -> usize {
    SIZE_CLASS_BOUNDS.iter().position(|&bound| size < bound).unwrap_or(SIZE_CLASS_BOUNDS.len())
}

/// (size class, size, stored bytes) of an object the usage by size counts: a striped object
/// (not a delete marker, nor a RAIDP or packed object, whose bytes are stored elsewhere:
/// replicas with per-disk parity, bin stripes).
pub fn usage_of(record: &ObjectRecord) -> Option<(usize, u64, u64)> {
    if record.delete_marker || record.raidp.is_some() || record.geometric.is_some() {
        return None;
    }
    let size = record.placement.object_size();
    Some((size_class(size), size, record.placement.layout().stored_bytes(size)))
}

/// A lease on a duty several meta processes could do: held by one `holder` until
/// `deadline_ms` ([`MetaStore::hold_lease`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub deadline_ms: u64,
}

/// One meta process of the cluster as it last recorded itself ([`MetaStore::record_replica`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaRecord {
    /// Its endpoint (`http://host:port`), which names it.
    pub endpoint: String,
    pub pid: u32,
    pub started_ms: u64,
    /// When it last recorded itself (every second or so while it runs).
    pub seen_ms: u64,
}

/// Most objects one listing returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// What a commit or a delete requires of the object committed under its key, checked in
/// its transaction (S3's `If-None-Match: *` and `If-Match` on writes and deletes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precondition {
    /// No object is committed under the key.
    Absent,
    /// The committed object has this generation.
    Generation(u64),
}

/// What a commit carries besides its digests (see [`MetaStore::commit_object_with`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommitTerms {
    /// The writer's attributes, kept with the object ([`ObjectRecord::attributes`]).
    pub attributes: Option<serde_json::Value>,
    /// Refuse the commit unless this holds.
    pub precondition: Option<Precondition>,
    /// The object lock the writer asks for (S3's object lock headers); None takes the
    /// bucket's default retention, if any ([`crate::lock`]). Refused with
    /// [`MetaError::ObjectLockNotEnabled`] in a bucket without object lock.
    pub lock: Option<crate::lock::ObjectLock>,
}

/// Refuses `precondition` unless it holds for `current`, the object committed under
/// (bucket, key) if any.
pub fn check_precondition(
    current: Option<&ObjectRecord>,
    precondition: Option<Precondition>,
    bucket: &str,
    key: &str,
) -> Result<(), MetaError> {
    let holds = match precondition {
        None => true,
        Some(Precondition::Absent) => current.is_none(),
        Some(Precondition::Generation(generation)) => {
            current.is_some_and(|c| c.generation == generation)
        }
    };
    match holds {
        true => Ok(()),
        false => Err(MetaError::PreconditionFailed {
            bucket: bucket.into(),
            key: key.into(),
            current: current.map(|c| c.generation),
        }),
    }
}

/// Refuses attributes that are not a JSON object or encode to more than
/// [`MAX_ATTRIBUTES_BYTES`].
pub fn check_attributes(
    attributes: Option<&serde_json::Value>,
    bucket: &str,
    key: &str,
) -> Result<(), MetaError> {
    let Some(value) = attributes else { return Ok(()) };
    let invalid = |reason: String| MetaError::InvalidAttributes {
        bucket: bucket.into(),
        key: key.into(),
        reason,
    };
    if !value.is_object() {
        return Err(invalid("attributes must be a JSON object".into()));
    }
    let bytes = serde_json::to_vec(value).map(|v| v.len()).unwrap_or(usize::MAX);
    if bytes > MAX_ATTRIBUTES_BYTES {
        return Err(invalid(format!(
            "attributes are {bytes} bytes encoded; at most {MAX_ATTRIBUTES_BYTES}"
        )));
    }
    Ok(())
}

/// Namespaces of gateway records (see [`MetaStore::put_record`]): access keys of the S3
/// gateway, its multipart uploads (and their parts), S3 attributes of objects, and buckets'
/// S3 configurations ([`BUCKET_CONFIG`]).
pub const GATEWAY_NAMESPACES: &[&str] =
    &["access_keys", "uploads", "object_attributes", BUCKET_CONFIG, "kms_keys"];

/// The gateway-record namespace of a bucket's S3 configurations: name
/// `<bucket>/<subresource>` (e.g. `media/cors`), value the gateway's own JSON. Deleting a
/// bucket deletes its records here.
pub const BUCKET_CONFIG: &str = "bucket_config";

/// Most of a bucket's [`BUCKET_CONFIG`] records one bucket deletion removes (a bucket has
/// one per S3 subresource weft keeps, a handful).
pub const MAX_BUCKET_CONFIG_RECORDS: usize = 100;

/// Record namespaces meta keeps for itself (node enrolment), in the same table as the
/// gateway's but never reachable through the records routes.
pub const INTERNAL_NAMESPACES: &[&str] =
    &[ENROLLED_NODES, LOST_OBJECTS, DELETIONS, WRITE_DIGESTS, RAIDP, GEOMETRIC];

/// Meta's geometric states: one record per geometric bucket, named by the bucket (its
/// placement groups, the bytes on each data member, the next stripe number of each bin).
pub const GEOMETRIC: &str = "geometric";

/// Meta's RAIDP state (one record, [`RAIDP_STATE`]): the superchunk map and how far each
/// superchunk is filled.
pub const RAIDP: &str = "raidp";
/// The name of the RAIDP state's record.
pub const RAIDP_STATE: &str = "state";

/// The namespace of unit digests sent ahead of a commit (`POST .../objects/{key}/digests`):
/// name `<generation, 20 digits>/<index of the page's first unit, 10 digits>`, value `{unit
/// name: hex digest}`. The commit of that generation takes them and deletes them; an expired
/// write's are deleted with it.
pub const WRITE_DIGESTS: &str = "write_digests";

/// The namespace of objects marked lost (`POST /v1/repairs/lost`): name `bucket/key`, value
/// a `weft_wire::repair::LostObject`.
pub const LOST_OBJECTS: &str = "lost_objects";

/// The namespace of replaced unit copies still to delete (`GET /v1/deletions`): name
/// `<node id, 10 digits>/<disk>/<unit key>`, value `{"bucket","key","generation","unit",
/// "queued_ms"}`.
pub const DELETIONS: &str = "deletions";

/// The namespace of enrolled nodes: name = node id in decimal, value =
/// `{"enrolled_ms":u64}`; plus the marker [`ENROLMENT_MIGRATED`].
pub const ENROLLED_NODES: &str = "enrolled_nodes";

/// The record (in [`ENROLLED_NODES`]) that says the nodes known before enrolment existed
/// were enrolled once, so a node removed later is not enrolled again at restart.
pub const ENROLMENT_MIGRATED: &str = "migrated";

/// Refuses namespaces outside [`GATEWAY_NAMESPACES`] and [`INTERNAL_NAMESPACES`], so a typo
/// is an error, not a new table.
/// The lease after [`MetaStore::hold_lease`]'s rule, given the one stored (if any).
pub(crate) fn leased(
    current: Option<Lease>,
    name: &str,
    holder: &str,
    now_ms: u64,
    lease_ms: u64,
) -> (Lease, bool) {
    match current {
        Some(lease) if lease.holder != holder && lease.deadline_ms > now_ms => (lease, false),
        _ => {
            let lease = Lease {
                name: name.into(),
                holder: holder.into(),
                deadline_ms: now_ms.saturating_add(lease_ms),
            };
            (lease, true)
        }
    }
}

pub(crate) fn check_namespace(namespace: &str) -> Result<(), MetaError> {
    if GATEWAY_NAMESPACES.contains(&namespace) || INTERNAL_NAMESPACES.contains(&namespace) {
        Ok(())
    } else {
        Err(MetaError::NoSuchNamespace { namespace: namespace.into() })
    }
}

/// One page of gateway records: (name, value) in name order.
pub type RecordPage = Vec<(String, serde_json::Value)>;

/// One page of an object listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPage {
    /// Committed objects in key order.
    pub objects: Vec<ObjectRecord>,
    /// When more objects match, the key to pass as `start_after` for the next page.
    pub next_start_after: Option<String>,
}

/// The metadata operations of weft, over an embedded store ([`crate::RedbStore`]), an
/// in-memory one ([`crate::MemStore`]) or, at scale, an existing distributed store.
pub trait MetaStore: Send + Sync {
    /// Stores a gateway record (JSON) under (namespace, name); with `if_absent` refused with
    /// [`MetaError::RecordExists`] when one exists, else it replaces it. Gateway records are
    /// opaque to meta: the S3 gateway keeps its access keys, uploads and object attributes
    /// here so that meta stays the one owner of cluster state.
    fn put_record(
        &self,
        namespace: &str,
        name: &str,
        value: &serde_json::Value,
        if_absent: bool,
    ) -> Result<(), MetaError>;
    /// Replaces the record (namespace, name) with `value` only if it still is `expected`
    /// (`None`: absent), in one transaction; else [`MetaError::RecordChanged`] and nothing
    /// is written. meta's own read-modify-write records (the RAIDP map, geometric buckets'
    /// state) are saved this way, so two meta replicas never lose each other's changes.
    fn replace_record(
        &self,
        namespace: &str,
        name: &str,
        expected: Option<&serde_json::Value>,
        value: &serde_json::Value,
    ) -> Result<(), MetaError>;
    /// The gateway record (namespace, name), if any.
    fn get_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError>;
    /// Removes a gateway record; returns it, None when there was none.
    fn delete_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError>;
    /// Up to `min(limit, MAX_LIST_LIMIT)` records of a namespace whose name starts with
    /// `prefix`, after `start_after`, in name order (bytewise).
    fn list_records(
        &self,
        namespace: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RecordPage, MetaError>;

    /// Creates an empty bucket.
    fn create_bucket(
        &self,
        name: &str,
        default_policy: Policy,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        self.create_bucket_with(name, default_policy, None, None, now_ms)
    }
    /// Creates an empty bucket, a RAIDP one when `raidp` is set, a geometric one when
    /// `geometric` is.
    fn create_bucket_with(
        &self,
        name: &str,
        default_policy: Policy,
        raidp: Option<RaidpPolicy>,
        geometric: Option<GeometricPolicy>,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError>;
    fn get_bucket(&self, name: &str) -> Result<BucketRecord, MetaError>;
    /// Replaces a bucket's default policy (objects already stored keep theirs; `weft
    /// transition` changes those). Returns the updated record.
    fn set_bucket_policy(&self, name: &str, policy: Policy) -> Result<BucketRecord, MetaError>;
    /// Sets a bucket's S3 versioning (see [`crate::versions`]); creates the internal
    /// [`crate::VERSIONS_BUCKET`] the first time. Refused with [`MetaError::NotVersionable`]
    /// for buckets that cannot be versioned (RAIDP, geometric, internal).
    fn set_bucket_versioning(
        &self,
        name: &str,
        versioning: crate::Versioning,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError>;
    /// Enables S3 object lock on a bucket, or replaces its configuration (its default
    /// retention): refused with [`MetaError::InvalidBucketState`] unless the bucket's
    /// versioning is enabled, [`MetaError::InvalidLock`] for an invalid default retention.
    /// Object lock, once enabled, stays ([`crate::lock`]).
    fn set_bucket_object_lock(
        &self,
        name: &str,
        lock: crate::lock::BucketLock,
    ) -> Result<BucketRecord, MetaError>;
    /// Changes the object lock of one version (its retention or its legal hold) at `now_ms`
    /// by the rules of [`crate::lock::changed`]; returns the version as stored.
    fn set_version_lock(
        &self,
        bucket: &str,
        key: &str,
        version: crate::VersionRef,
        change: crate::lock::LockChange,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError>;
    /// Replaces the attributes of one version of (bucket, key), current or not (the S3
    /// gateway's ACL changes); returns the version as stored. Checked as a commit's are
    /// ([`check_attributes`]); a delete marker has none.
    fn set_version_attributes(
        &self,
        bucket: &str,
        key: &str,
        version: crate::VersionRef,
        attributes: serde_json::Value,
    ) -> Result<ObjectRecord, MetaError>;
    /// How many times an object moved between its bucket and [`crate::VERSIONS_BUCKET`]
    /// (store-wide, never goes back): a walk of every object that read the same count before
    /// and after saw every object with units once at least.
    fn version_moves(&self) -> Result<u64, MetaError>;
    /// Every bucket, by name.
    fn list_buckets(&self) -> Result<Vec<BucketRecord>, MetaError>;
    /// Deletes a bucket; refused with [`MetaError::BucketNotEmpty`] unless it is empty.
    fn delete_bucket(&self, name: &str) -> Result<(), MetaError>;

    /// Begins writing an object: records its placement as a write in progress, invisible to
    /// reads, with a fresh generation. Other writes in progress of the same key stay: each
    /// commits on its own, the last commit's object is the key's (S3: concurrent PUTs all
    /// succeed, the last one wins).
    fn begin_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError> {
        self.begin_raidp_object(bucket, key, placement, None, now_ms)
    }
    /// [`MetaStore::begin_object`] of a RAIDP object: `placement` is its empty one (size 0),
    /// `raidp` its extents in superchunks (allocated by the caller).
    fn begin_raidp_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        raidp: Option<Vec<RaidpExtent>>,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError>;
    /// Commits the write of `generation` once all its units are durable, with the writer's
    /// unit digests (none, or one for every unit: [`check_digests`]). Returns the new
    /// record and the committed record it replaced, if any (its units are now garbage).
    fn commit_object(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
        digests: &Digests,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>), MetaError> {
        self.commit_object_with(bucket, key, generation, digests, &CommitTerms::default())
    }
    /// [`MetaStore::commit_object`] with the writer's attributes and a precondition on the
    /// object it replaces, checked in the same transaction: when it does not hold the commit
    /// is refused with [`MetaError::PreconditionFailed`] and nothing changes (the write stays
    /// in progress, for its writer to abort). Attributes over [`MAX_ATTRIBUTES_BYTES`] or
    /// not a JSON object are refused with [`MetaError::InvalidAttributes`].
    fn commit_object_with(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
        digests: &Digests,
        terms: &CommitTerms,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>), MetaError>;
    /// Commits a pack, all of it in one transaction or nothing: the bin-stripe writes of
    /// `stripes` (objects of `stripe_bucket`, each as [`MetaStore::commit_object`] would),
    /// then each of `objects` that is still committed in `bucket` with the generation given
    /// and still has units of its own becomes a packed object: same generation and creation
    /// time, no units, `place` its geometric record; its pending transition is dropped.
    /// Objects that changed meanwhile are skipped (their chunks are then dead bytes of the
    /// stripes). Refused with [`MetaError::NoSuchWrite`], changing nothing, when a stripe's
    /// write is not in progress with its generation.
    fn commit_pack(
        &self,
        stripe_bucket: &str,
        stripes: &[StripeCommit],
        bucket: &str,
        objects: &[PackedObject],
    ) -> Result<PackOutcome, MetaError>;
    /// The committed object under `key`.
    fn get_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError>;
    /// Committed objects whose key starts with `prefix` and sorts after `start_after`, in key
    /// order, at most `min(limit, MAX_LIST_LIMIT)` of them.
    fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectPage, MetaError>;
    /// Deletes (bucket, key) as an S3 DELETE naming no version does, by the bucket's
    /// versioning ([`crate::versions::delete_latest`]): unversioned, the current object goes;
    /// versioned, it stays as a version and a delete marker becomes the newest. All in one
    /// transaction.
    fn delete_latest(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
        now_ms: u64,
    ) -> Result<crate::Deleted, MetaError>;
    /// Removes one version of (bucket, key) for good, current or not, and returns its record
    /// as it was stored (its units are garbage); a key left with no current object gets its
    /// newest version back when that is an object ([`crate::versions::delete_version`]). A
    /// locked version is refused with [`MetaError::ObjectLocked`].
    fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version: crate::VersionRef,
        terms: crate::versions::VersionDelete,
    ) -> Result<ObjectRecord, MetaError>;
    /// The record of one version of (bucket, key), as stored: the current object, or a
    /// noncurrent version or delete marker in [`crate::VERSIONS_BUCKET`].
    /// [`MetaError::NoSuchVersion`] when there is none.
    fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version: crate::VersionRef,
    ) -> Result<ObjectRecord, MetaError>;
    /// Removes the committed object under (bucket, key) and returns its record (the caller
    /// deletes its units). Versioning is not applied: this is for weft's internal buckets
    /// and unversioned ones; S3 deletes go through [`MetaStore::delete_latest`]. An object
    /// with any lock is refused ([`MetaError::ObjectLocked`]): only `delete_version` weighs
    /// a lock against the clock.
    fn delete_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError> {
        self.delete_object_if(bucket, key, None)
    }
    /// [`MetaStore::delete_object`] when `precondition` holds for the committed object
    /// (checked in the same transaction), else [`MetaError::PreconditionFailed`], nothing
    /// deleted. [`Precondition::Absent`] can never hold for a delete of an existing object.
    fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
    ) -> Result<ObjectRecord, MetaError>;
    /// The write in progress of `generation` under (bucket, key), if any.
    fn get_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<Option<ObjectRecord>, MetaError>;
    /// Writes in progress (every bucket) whose (bucket, key, generation) sorts after
    /// `after`, in that order, at most `min(limit, MAX_LIST_LIMIT)` of them; one transaction.
    fn list_writes(
        &self,
        after: Option<&WriteCursor>,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError>;
    /// Removes the write in progress of `generation` under (bucket, key) and returns it (its
    /// units are the caller's to delete; a later commit of it is refused). Refused with
    /// [`MetaError::NoSuchWrite`], changing nothing, unless that generation is in progress.
    fn abort_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<ObjectRecord, MetaError>;

    /// Records a heartbeat: creates or replaces the node's record.
    /// The units of committed objects on `node` (only on its disk `disk` when given), in
    /// (disk, bucket, key, unit name) order, after `after`, at most `min(limit,
    /// MAX_LIST_LIMIT)`: what a failed disk or node loses, read from an index kept in each
    /// commit's transaction — its cost is those units, not the cluster's objects.
    fn placed_units(
        &self,
        node: u32,
        disk: Option<u32>,
        after: Option<&PlacedUnit>,
        limit: usize,
    ) -> Result<Vec<PlacedUnit>, MetaError>;

    /// Every (node, disk) holding a unit of a committed object, in order.
    fn placed_disks(&self) -> Result<Vec<(u32, u32)>, MetaError>;

    /// The number and total size of committed objects, kept by every commit and delete.
    fn object_totals(&self) -> Result<ObjectTotals, MetaError>;

    /// Takes the lease `name` for `holder` until `now_ms + lease_ms` when nobody holds it,
    /// its deadline is at or before `now_ms`, or `holder` holds it already (a renewal);
    /// otherwise changes nothing. Returns the lease as it stands afterwards: `holder` holds
    /// it exactly when its `holder` is `holder`.
    fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Lease, MetaError>;

    /// The lease `name` as stored (it may have lapsed: compare its deadline with the time).
    fn get_lease(&self, name: &str) -> Result<Option<Lease>, MetaError>;

    /// Ends `holder`'s lease `name` at once (nothing when another holds it).
    fn release_lease(&self, name: &str, holder: &str) -> Result<(), MetaError>;

    /// Records (or refreshes) one meta process.
    fn record_replica(&self, replica: &ReplicaRecord) -> Result<(), MetaError>;

    /// Every meta process ever recorded (callers judge freshness by `seen_ms`); at most
    /// [`MAX_LIST_LIMIT`].
    fn list_replicas(&self) -> Result<Vec<ReplicaRecord>, MetaError>;

    /// Forgets a meta process (one that stopped for good).
    fn forget_replica(&self, endpoint: &str) -> Result<(), MetaError>;

    fn record_heartbeat(&self, heartbeat: &Heartbeat, now_ms: u64)
        -> Result<NodeRecord, MetaError>;
    /// Every node ever heard of, by id.
    fn list_nodes(&self) -> Result<Vec<NodeRecord>, MetaError>;
    /// Ids of the nodes silent for more than `timeout_ms` at `now_ms`, ascending.
    fn down_nodes(&self, now_ms: u64, timeout_ms: u64) -> Result<Vec<u32>, MetaError> {
        Ok(self
            .list_nodes()?
            .into_iter()
            .filter(|n| n.is_down(now_ms, timeout_ms))
            .map(|n| n.node_id)
            .collect())
    }

    /// Queues a repair of `request.unit` of `request.object`, checked in the same transaction
    /// against the committed object: [`Enqueued::Stale`] (changing nothing) unless it is
    /// committed with `request.generation` and, when `seen_on` is set, the unit is still on
    /// that disk; [`MetaError::NoSuchUnit`] when the object has no such unit. Idempotent per
    /// (object, unit): [`Enqueued::AlreadyQueued`] when that unit of that generation is queued,
    /// except that a `Damaged` request turns a queued `Unavailable` task into a `Damaged` one
    /// in place (same id, same lease). A queued task of an older generation is replaced by a
    /// new task at the back of the queue.
    fn enqueue_repair(&self, request: &RepairRequest, now_ms: u64) -> Result<Enqueued, MetaError>;
    /// [`MetaStore::enqueue_repair`] for many units in one transaction; returns how many were
    /// [`Enqueued::Queued`]. Any error refuses the whole batch.
    fn enqueue_repairs(&self, requests: &[RepairRequest], now_ms: u64) -> Result<usize, MetaError>;
    /// Leases the oldest task that is not leased (or whose lease expired) until
    /// `now_ms + lease_ms` (or one past the task's previous deadline, if that is later);
    /// None when there is none.
    fn take_repair(&self, now_ms: u64, lease_ms: u64) -> Result<Option<RepairLease>, MetaError>;
    /// Removes a leased task without touching its object (the task was not needed, or its
    /// object is gone). Refused with [`MetaError::LeaseLost`] when the lease is no longer the
    /// task's current one (the caller must not assume its work counted).
    fn complete_repair(&self, lease: &RepairLease) -> Result<(), MetaError>;
    /// Completes a leased repair whose unit was rebuilt on `disk`: when the committed object
    /// still has the task's generation, moves the unit there (refused with
    /// [`MetaError::PlacementRefused`], changing nothing, if that breaks a placement rule) and
    /// removes the task; when the object was deleted or replaced, only removes the task and
    /// returns [`RepairOutcome::Stale`]. [`MetaError::LeaseLost`] as for `complete_repair`.
    fn relocate_repaired(
        &self,
        lease: &RepairLease,
        disk: DiskLocation,
    ) -> Result<RepairOutcome, MetaError>;
    /// Returns a task whose repair failed to the back of the queue, free to take, recording
    /// `error`; returns its new task id. [`MetaError::LeaseLost`] as for `complete_repair`.
    fn fail_repair(&self, lease: &RepairLease, error: &str) -> Result<u64, MetaError> {
        self.fail_repair_until(lease, error, None, false)
    }
    /// [`MetaStore::fail_repair`], the task not to be taken before `not_before_ms` (its
    /// back-off) and marked `unfound` or not.
    fn fail_repair_until(
        &self,
        lease: &RepairLease,
        error: &str,
        not_before_ms: Option<u64>,
        unfound: bool,
    ) -> Result<u64, MetaError>;
    /// Makes every unfound task due at once (clears its back-off); returns how many. Called
    /// when a node returns, which may make a group readable again.
    fn wake_unfound_repairs(&self) -> Result<usize, MetaError>;
    /// Removes every queued task of (bucket, key), leased or not (its object was given up);
    /// returns how many. A lease on one is lost.
    fn drop_repairs_of(&self, bucket: &str, key: &str) -> Result<usize, MetaError>;
    /// The queued tasks of (bucket, key), any generation, by unit name.
    fn repairs_of(&self, bucket: &str, key: &str) -> Result<Vec<(u64, RepairTask)>, MetaError>;
    /// The queued task `task_id`, leased or not.
    fn get_repair(&self, task_id: u64) -> Result<Option<RepairTask>, MetaError>;
    /// Queued tasks with an id above `after`, oldest first, at most
    /// `min(limit, MAX_LIST_LIMIT)` of them.
    fn list_repairs(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, RepairTask)>, MetaError>;
    /// Tasks queued, leased or not.
    fn repair_queue_len(&self) -> Result<usize, MetaError>;

    /// Records the transition `plan` of a committed object under a fresh id. Refused
    /// ([`MetaError::NoSuchKey`] / [`MetaError::NoSuchBucket`], or
    /// [`TransitionConflict::ObjectReplaced`] with id 0) unless the object is committed with
    /// `plan.object_generation`; [`MetaError::InvalidRecord`] when the plan does not fit the
    /// object (another layout or size, striping changed, a placement rule broken, a
    /// relocation not from the block's current disk). Replaces the object's pending
    /// transition, which it returns (its units are the caller's to delete).
    fn begin_transition(
        &self,
        plan: NewTransition,
        now_ms: u64,
    ) -> Result<(TransitionRecord, Option<TransitionRecord>), MetaError>;
    /// Commits the pending transition `id` of (bucket, key) as the store invariants say;
    /// returns the object after and before. Refused with [`MetaError::TransitionConflict`]
    /// (changing nothing) when the object is gone or replaced, the transition is not the
    /// pending one, a relocated block is no longer on its planned origin, or the new
    /// placement breaks a rule. The transition stays pending after a relocation or placement
    /// conflict (abort it). Data units keep their digests; the new parity units get
    /// `parity_digests` (none, or one for each of them), and lose the old ones.
    fn commit_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        parity_digests: &Digests,
    ) -> Result<(ObjectRecord, ObjectRecord), MetaError>;
    /// Removes the pending transition `id` of (bucket, key) and returns it;
    /// [`MetaError::NoSuchTransition`] when it is not the pending one.
    fn abort_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
    ) -> Result<TransitionRecord, MetaError>;
    /// The pending transition of (bucket, key), if any.
    fn get_transition(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<TransitionRecord>, MetaError>;
    /// Pending transitions whose (bucket, key) sorts after `after`, in that order, at most
    /// `min(limit, MAX_LIST_LIMIT)` of them.
    fn list_transitions(
        &self,
        after: Option<&ObjectName>,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, MetaError>;
    /// Transitions pending.
    fn transition_count(&self) -> Result<usize, MetaError>;
    /// Moves the lease deadline of the pending transition `id` of (bucket, key) to
    /// `deadline_ms` and returns the record. Refused with [`MetaError::TransitionConflict`]
    /// (reason as for a commit: object gone, already committed, superseded, not pending),
    /// changing nothing, when it is not the pending one. A transition whose lease passed but
    /// that nobody expired yet is still pending, and renewed.
    fn renew_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        deadline_ms: u64,
    ) -> Result<TransitionRecord, MetaError>;
    /// Removes the pending transition `id` of (bucket, key) if its lease expired at `now_ms`
    /// (checked in the same transaction, so a renewal that got in first keeps it) and
    /// returns it; None, changing nothing, when it is not pending or its lease holds.
    fn expire_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        now_ms: u64,
    ) -> Result<Option<TransitionRecord>, MetaError>;
}

/// Checks a transition plan against the committed object (see `begin_transition`).
pub(crate) fn check_new_transition(
    committed: Option<&ObjectRecord>,
    plan: &NewTransition,
) -> Result<(), MetaError> {
    let (bucket, key) = (plan.bucket.as_str(), plan.key.as_str());
    let Some(object) = committed else {
        return Err(MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() });
    };
    if object.generation != plan.object_generation {
        return Err(MetaError::TransitionConflict {
            bucket: bucket.into(),
            key: key.into(),
            id: 0,
            conflict: TransitionConflict::ObjectReplaced {
                planned: plan.object_generation,
                current: object.generation,
            },
        });
    }
    let invalid = |reason: String| MetaError::InvalidRecord {
        bucket: bucket.into(),
        key: key.into(),
        reason: format!("transition plan: {reason}"),
    };
    let (old, new) = (object.layout(), plan.new_placement.layout());
    if plan.old_layout != *old {
        return Err(invalid(format!(
            "planned from layout {} but the object now has {}; plan again",
            plan.old_layout.code, old.code
        )));
    }
    if (old.stripe_width, old.cell_bytes, old.block_bytes)
        != (new.stripe_width, new.cell_bytes, new.block_bytes)
    {
        return Err(invalid("a regroup keeps the striping; restripe instead".into()));
    }
    let placement = &plan.new_placement;
    if placement.object_size() != object.size()
        || placement.failure_domain() != object.placement.failure_domain()
    {
        return Err(invalid("the new placement is for another size or failure domain".into()));
    }
    new.validate().map_err(|e| invalid(e.to_string()))?;
    placement.verify().map_err(|e| invalid(e.to_string()))?;
    for relocation in &plan.relocations {
        let unit = UnitId::Data(relocation.block);
        if object.placement.disk_of(unit) != Some(relocation.from)
            || placement.disk_of(unit) != Some(relocation.to)
        {
            return Err(invalid(format!(
                "the relocation of d{} is not from its current disk to its planned one",
                relocation.block
            )));
        }
    }
    Ok(())
}

/// The pending transition `id`, or why it is not (the conflicts a commit or a renewal
/// reports, in that order: object gone, already committed, superseded, not pending).
pub(crate) fn pending_one<'a>(
    committed: Option<&ObjectRecord>,
    pending: Option<&'a TransitionRecord>,
    bucket: &str,
    key: &str,
    id: u64,
) -> Result<&'a TransitionRecord, MetaError> {
    let conflict = |conflict: TransitionConflict| MetaError::TransitionConflict {
        bucket: bucket.into(),
        key: key.into(),
        id,
        conflict,
    };
    let Some(object) = committed else {
        return Err(conflict(TransitionConflict::ObjectGone));
    };
    if object.parity_generation == id {
        return Err(conflict(TransitionConflict::AlreadyCommitted));
    }
    match pending {
        Some(t) if t.id == id => Ok(t),
        Some(t) if t.id > id => Err(conflict(TransitionConflict::Superseded { current: t.id })),
        _ => Err(conflict(TransitionConflict::NotPending)),
    }
}

/// The object after committing transition `id`, or why not (see `commit_transition`).
pub(crate) fn transitioned(
    committed: Option<&ObjectRecord>,
    pending: Option<&TransitionRecord>,
    bucket: &str,
    key: &str,
    id: u64,
    parity_digests: &Digests,
) -> Result<ObjectRecord, MetaError> {
    let conflict = |conflict: TransitionConflict| MetaError::TransitionConflict {
        bucket: bucket.into(),
        key: key.into(),
        id,
        conflict,
    };
    let transition = pending_one(committed, pending, bucket, key, id)?;
    let object = committed.expect("checked by pending_one");
    if transition.object_generation != object.generation {
        return Err(conflict(TransitionConflict::ObjectReplaced {
            planned: transition.object_generation,
            current: object.generation,
        }));
    }
    let current = &object.placement;
    let mut data: Vec<DiskLocation> = current
        .units()
        .filter(|(unit, _)| matches!(unit, UnitId::Data(_)))
        .map(|(_, disk)| disk)
        .collect();
    for relocation in &transition.relocations {
        let Some(now) = data.get_mut(relocation.block) else {
            return Err(conflict(TransitionConflict::Placement {
                reason: format!("the object has no block d{}", relocation.block),
            }));
        };
        if *now != relocation.from {
            return Err(conflict(TransitionConflict::Relocation {
                block: u32::try_from(relocation.block).expect("blocks of a placement fit in u32"),
                planned_from: relocation.from,
                current: *now,
            }));
        }
        *now = relocation.to;
    }
    let parity: Vec<DiskLocation> = transition
        .new_placement
        .units()
        .filter(|(unit, _)| matches!(unit, UnitId::Parity { .. }))
        .map(|(_, disk)| disk)
        .collect();
    // The planned placement when every data block is where it planned (its compact pattern
    // kept); else one listing each unit where it is now.
    let planned = &transition.new_placement;
    let as_planned =
        data.iter().enumerate().all(|(x, disk)| planned.disk_of(UnitId::Data(x)) == Some(*disk));
    let placement = match as_planned {
        true => planned.clone(),
        false => Placement::from_parts(
            *transition.new_layout(),
            current.object_size(),
            current.failure_domain(),
            current.seed(),
            data,
            parity,
        )
        .map_err(|e| conflict(TransitionConflict::Placement { reason: e.to_string() }))?,
    };
    // Data bytes are unchanged by a regroup (relocated blocks are copies): their digests
    // stay. Parity is new: the executor's digests, all or none. Digests are kept only when
    // every unit has one.
    let mut digests: Digests = object
        .digests
        .iter()
        .filter(|(unit, _)| matches!(unit, UnitId::Data(_)))
        .map(|(unit, digest)| (*unit, *digest))
        .collect();
    digests.extend(parity_digests.iter().map(|(unit, digest)| (*unit, *digest)));
    let new = ObjectRecord {
        placement,
        parity_generation: id,
        digests: Digests::new(),
        ..object.clone()
    };
    check_digests(&new, parity_digests, |unit| matches!(unit, UnitId::Parity { .. }))?;
    let complete = check_digests(&new, &digests, |_| true).is_ok();
    Ok(ObjectRecord { digests: if complete { digests } else { Digests::new() }, ..new })
}

/// Refuses `digests` unless empty or naming exactly the units of `record` that `wanted`
/// selects: a record's digests are never partial, so a reader can tell "unverified object"
/// from "unit without a digest".
pub fn check_digests(
    record: &ObjectRecord,
    digests: &Digests,
    wanted: impl Fn(&UnitId) -> bool,
) -> Result<(), MetaError> {
    if digests.is_empty() {
        return Ok(());
    }
    let units: BTreeSet<UnitId> =
        record.placement.units().map(|(unit, _)| unit).filter(|u| wanted(u)).collect();
    let invalid = |reason: String| MetaError::InvalidDigests {
        bucket: record.bucket.clone(),
        key: record.key.clone(),
        reason,
    };
    if let Some(unit) = digests.keys().find(|unit| !units.contains(unit)) {
        return Err(invalid(format!(
            "a digest for {}, which is not a unit here",
            unit.short_name()
        )));
    }
    if let Some(unit) = units.iter().find(|unit| !digests.contains_key(unit)) {
        return Err(invalid(format!(
            "no digest for {}: give one for every unit or none",
            unit.short_name()
        )));
    }
    Ok(())
}

/// What an enqueue does to the queue, decided from the committed object and the task already
/// queued for the unit; shared by every store so they cannot drift apart.
#[derive(Debug)]
pub(crate) enum EnqueueStep {
    /// Nothing changes.
    Keep(Enqueued),
    /// Queue this task at the back, removing the unit's older task if there is one.
    Append(RepairTask),
    /// Replace the unit's queued task in place (same id) with this one.
    Update(RepairTask),
}

pub(crate) fn enqueue_step(
    committed: Option<&ObjectRecord>,
    queued: Option<&RepairTask>,
    request: &RepairRequest,
    now_ms: u64,
) -> Result<EnqueueStep, MetaError> {
    let Some(object) = committed.filter(|o| o.generation == request.generation) else {
        return Ok(EnqueueStep::Keep(Enqueued::Stale));
    };
    let Some(disk) = object.placement.disk_of(request.unit) else {
        return Err(MetaError::NoSuchUnit {
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            unit: request.unit,
        });
    };
    if request.seen_on.is_some_and(|seen| seen != disk) {
        return Ok(EnqueueStep::Keep(Enqueued::Stale));
    }
    Ok(match queued {
        // Generations only grow, so a queued task of another generation is older: stale.
        None => EnqueueStep::Append(new_task(request, now_ms)),
        Some(task) if task.generation != request.generation => {
            EnqueueStep::Append(new_task(request, now_ms))
        }
        Some(task)
            if task.kind == RepairKind::Unavailable && request.kind == RepairKind::Damaged =>
        {
            EnqueueStep::Update(RepairTask {
                kind: RepairKind::Damaged,
                reason: request.reason.clone(),
                ..task.clone()
            })
        }
        Some(_) => EnqueueStep::Keep(Enqueued::AlreadyQueued),
    })
}

fn new_task(request: &RepairRequest, now_ms: u64) -> RepairTask {
    RepairTask {
        object: request.object.clone(),
        generation: request.generation,
        unit: request.unit,
        kind: request.kind,
        reason: request.reason.clone(),
        enqueued_ms: now_ms,
        attempts: 0,
        lease_deadline_ms: None,
        last_error: None,
        not_before_ms: None,
        unfound: false,
    }
}

/// Whether a task is free to take at `now_ms`: not leased (or its lease expired) and past
/// its back-off.
pub(crate) fn is_free(task: &RepairTask, now_ms: u64) -> bool {
    task.lease_deadline_ms.is_none_or(|deadline| deadline <= now_ms)
        && task.not_before_ms.is_none_or(|not_before| not_before <= now_ms)
}

/// The deadline of a new lease of `task`: `now_ms + lease_ms`, but always after the task's
/// previous deadline, so that no two leases of a task share one.
pub(crate) fn lease_deadline(task: &RepairTask, now_ms: u64, lease_ms: u64) -> u64 {
    let deadline = now_ms.saturating_add(lease_ms);
    match task.lease_deadline_ms {
        Some(previous) if deadline <= previous => previous.saturating_add(1),
        _ => deadline,
    }
}

/// Whether `lease` is still the current lease of `task` (the task stored under its id).
pub(crate) fn holds(task: &RepairTask, lease: &RepairLease) -> bool {
    task.attempts == lease.task.attempts && task.lease_deadline_ms == Some(lease.deadline_ms)
}

pub(crate) fn lease_lost(lease: &RepairLease) -> MetaError {
    MetaError::LeaseLost {
        task_id: lease.task_id,
        bucket: lease.task.object.bucket.clone(),
        key: lease.task.object.key.clone(),
        unit: lease.task.unit,
    }
}

/// The committed object with the task's unit moved to `disk`, or None when the task is stale
/// (`committed` is absent or of another generation). Refuses a move that breaks a rule.
pub(crate) fn relocated(
    committed: Option<ObjectRecord>,
    task: &RepairTask,
    disk: DiskLocation,
) -> Result<Option<ObjectRecord>, MetaError> {
    let Some(mut object) = committed.filter(|o| o.generation == task.generation) else {
        return Ok(None);
    };
    let refused = |error: LayoutError| match error {
        LayoutError::UnknownUnit { unit } => MetaError::NoSuchUnit {
            bucket: task.object.bucket.clone(),
            key: task.object.key.clone(),
            unit,
        },
        other => MetaError::PlacementRefused {
            bucket: task.object.bucket.clone(),
            key: task.object.key.clone(),
            unit: task.unit,
            reason: other.to_string(),
        },
    };
    object.placement.relocate(task.unit, disk).map_err(refused)?;
    // relocate checks the unit's peers; verify re-checks the whole object, which is cheap next
    // to a rebuilt unit and catches a rule broken anywhere before it is stored.
    object.placement.verify().map_err(refused)?;
    Ok(Some(object))
}

/// Checks the arguments of `begin_object` that need no stored state.
pub(crate) fn check_new_object(
    bucket: &str,
    key: &str,
    placement: &Placement,
) -> Result<(), MetaError> {
    check_bucket_name(bucket)?;
    check_key(key)?;
    let invalid = |reason: String| MetaError::InvalidAttributes {
        bucket: bucket.into(),
        key: key.into(),
        reason,
    };
    placement.layout().validate().map_err(|e| invalid(e.to_string()))?;
    placement.verify().map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

/// Where a listing starts: at `prefix`, or just after `start_after` when that sorts later.
pub(crate) fn list_start<'a>(prefix: &'a str, start_after: Option<&'a str>) -> (&'a str, bool) {
    match start_after {
        Some(after) if after >= prefix => (after, false),
        _ => (prefix, true),
    }
}
