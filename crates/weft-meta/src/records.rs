//! Records kept by the metadata store and their stored encoding.
//!
//! Invariants:
//! - Every stored value is the JSON envelope `{"v":FORMAT_VERSION,"r":<record>}`; a value with
//!   any other version is refused with [`MetaError::UnsupportedVersion`], never half-read.
//! - Groups are never stored: an object stores its layout, its size and one disk per unit
//!   (data blocks in order, then the r parities of each group); the group of data block x is
//!   `x / k`, computed by `weft-layout`.
//! - The placement of an object is stored compactly: a table of the distinct disks it uses
//!   and, per unit, an index into that table.
//! - An object's data units have unit generation 0 and its parity units `parity_generation`
//!   (0 until a transition commits; then the transition's id, unique store-wide), so parity
//!   written by a transition never shares a key with the parity it replaces.
//! - Fields added after a record's first version have serde defaults that read old values
//!   as before (and are left out when they hold the default), so the format stays version 1.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use weft_layout::{
    DiskLocation, FailureDomain, GeometricPolicy, Placement, Relocation, StripedLayout,
    TransitionMode, UnitId,
};

use crate::MetaError;

/// Format version of every stored value (the `v` of the envelope).
pub const FORMAT_VERSION: u64 = 1;

/// Longest bucket name, in bytes (S3's limit).
pub const MAX_BUCKET_NAME_BYTES: usize = 63;
/// Shortest name a new bucket may have, in bytes (S3's limit; buckets created earlier may be
/// shorter).
pub const MIN_NEW_BUCKET_NAME_BYTES: usize = 3;
/// How the names of weft's own internal buckets begin (the S3 gateway's `.weft-s3-parts`): with a
/// '.', which no S3 bucket name may, so S3 clients cannot reach them.
pub const INTERNAL_BUCKET_PREFIX: &str = ".weft-";

pub use weft_wire::MAX_KEY_BYTES;

/// What an object is stored with: the striped layout (code by name, stripe width, cell and
/// block sizes).
pub type Policy = StripedLayout;

/// A bucket: a namespace of objects with a default policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub name: String,
    /// The striped policy of new objects; for a RAIDP bucket, two copies (rep(2)), which is
    /// what RAIDP keeps, as a transition out of the tier would start from.
    pub default_policy: Policy,
    pub created_ms: u64,
    /// Set for a RAIDP bucket (`--code raidp`): new objects go to superchunks, not units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raidp: Option<RaidpPolicy>,
    /// Set for a geometric bucket (`--layout geometric`): new objects are written under
    /// `default_policy` (the warm tier, replicated) and the packer moves them into the
    /// bucket's bins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometric: Option<GeometricPolicy>,
    /// S3 versioning: absent until it is first enabled, then enabled or suspended, never
    /// absent again (S3 has no way back); see [`crate::versions`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<Versioning>,
    /// S3 object lock: absent until enabled, then never absent again; see [`crate::lock`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::lock::BucketLock>,
}

/// A bucket's S3 versioning state, once it was ever enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Versioning {
    /// Every write gets a version of its own; replaced and deleted objects stay as older
    /// versions, a delete leaves a delete marker.
    Enabled,
    /// Writes and deletes make the key's "null" version (replacing the previous null one);
    /// versions made while enabled stay.
    Suspended,
}

impl Versioning {
    /// `enabled` / `suspended`.
    pub fn as_str(self) -> &'static str {
        match self {
            Versioning::Enabled => "enabled",
            Versioning::Suspended => "suspended",
        }
    }
}

/// The RAIDP tier's geometry, one for the whole cluster (its superchunk map): the size of a
/// superchunk and how many parities each disk's Lstor keeps (1: XOR, survives any two disk
/// failures; 2: XOR and a Reed-Solomon parity, any three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaidpPolicy {
    pub superchunk_bytes: u64,
    pub lstors: u32,
}

/// A run of a RAIDP object's bytes: `bytes` bytes at `offset` of superchunk `superchunk`
/// (the same offset on both its replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaidpExtent {
    pub superchunk: u64,
    pub offset: u64,
    pub bytes: u64,
}

/// Whether an object's units are all durable yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectState {
    /// Blocks allocated, units being written; not visible to reads or listings.
    Writing,
    /// Every unit durable; the object is visible.
    Committed,
}

/// One object: where each of its units lives, and its lifecycle state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRecord {
    pub bucket: String,
    pub key: String,
    /// Layout, size and the disk of every unit (groups are inferred from it).
    pub placement: Placement,
    pub state: ObjectState,
    pub created_ms: u64,
    /// Unique across the store and increasing: tells a write from the one that replaced it.
    pub generation: u64,
    /// The unit generation of the parity units: 0 as written, the id of the last committed
    /// transition after one (data units always have generation 0).
    pub parity_generation: u64,
    /// The writer's digest of every unit (end-to-end checksums), or empty: objects written
    /// before digests existed, or by a client that sent none. Never partial
    /// ([`crate::store::check_digests`]).
    pub digests: Digests,
    /// A RAIDP object's bytes, in object order, in superchunks; `None` for a striped one. A
    /// RAIDP object has no units: its placement is an empty one (size 0) of its bucket's
    /// default policy, so nothing that walks units (repair, gc, scrub) meets it.
    pub raidp: Option<Vec<RaidpExtent>>,
    /// A packed object's place in its bucket's bins: the compact record of
    /// `weft_layout::GeoPlace::encode` (decoded with the bucket's geometric policy); `None`
    /// otherwise. A packed object has no units of its own either (an empty placement, as
    /// RAIDP's): its bytes are data blocks of the bucket's bin stripes, which are objects of
    /// [`GEOMETRIC_BUCKET`].
    pub geometric: Option<Vec<u8>>,
    /// A bin stripe's owner tags, one per data block: a hash of the key of the packed object
    /// whose chunk (or front) the block holds, 0 for an empty place or a block of several
    /// objects' fronts ([`owner_tag`]). Repair sends each object's lost chunks to one disk by
    /// it. Empty for every other object, and for stripes packed before tags existed.
    pub owners: Vec<u32>,
    /// What the writer attached at commit (the S3 gateway: ETag, Content-Type, user
    /// metadata...): a JSON object meta keeps with the object and never interprets, at most
    /// [`MAX_ATTRIBUTES_BYTES`] encoded. `None` when the writer sent none.
    pub attributes: Option<serde_json::Value>,
    /// Written while its bucket's versioning was enabled: its version id is its generation
    /// (else it is the key's "null" version). See [`crate::versions`].
    pub versioned: bool,
    /// A delete marker of a versioned bucket: no units (an empty placement), no bytes.
    pub delete_marker: bool,
    /// Its S3 object lock (retention, legal hold); none for most objects. See [`crate::lock`].
    pub lock: crate::lock::ObjectLock,
}

/// Largest encoded `attributes` of an object (S3 allows 2 KiB of user metadata plus a few
/// standard headers; this leaves room without letting a record grow without bound).
pub const MAX_ATTRIBUTES_BYTES: usize = 16 * 1024;

/// The owner tag of `key` in geometric bucket `bucket`: never 0 (no one) nor `u32::MAX`.
pub fn owner_tag(bucket: &str, key: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in bucket.bytes().chain([0u8]).chain(key.bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.clamp(1, u32::MAX - 1)
}

/// The internal bucket of every geometric bucket's bin stripes: one object per stripe, named
/// `<bucket>/<pg>/<bin>/<seq>`, whose data blocks are chunks (or small-bin regions) of packed
/// objects. Being objects, stripes are repaired, scrubbed and collected like any other.
pub const GEOMETRIC_BUCKET: &str = ".weft-geo";

/// Unit digests by unit.
pub type Digests = std::collections::BTreeMap<UnitId, weft_wire::UnitDigest>;

impl ObjectRecord {
    /// The object's policy.
    pub fn layout(&self) -> &StripedLayout {
        self.placement.layout()
    }

    /// The object's size in bytes.
    pub fn size(&self) -> u64 {
        if let Some(place) = &self.geometric {
            return weft_layout::geometric::encoded_size(place).unwrap_or(0);
        }
        match &self.raidp {
            Some(extents) => extents.iter().map(|e| e.bytes).sum(),
            None => self.placement.object_size(),
        }
    }

    /// The object's S3 version id: its generation in decimal when it was written with
    /// versioning enabled, else `null`.
    pub fn version_id(&self) -> String {
        match self.versioned {
            true => self.generation.to_string(),
            false => crate::versions::NULL_VERSION.to_string(),
        }
    }
}

/// A (bucket, key) pair naming an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectName {
    pub bucket: String,
    pub key: String,
}

/// Where a listing of writes in progress resumes: the (bucket, key) and generation of the
/// last write seen (a key may have several writes in progress at once).
pub type WriteCursor = (ObjectName, u64);

impl ObjectRecord {
    /// The cursor that resumes a listing of writes after this one.
    pub fn write_cursor(&self) -> WriteCursor {
        (ObjectName { bucket: self.bucket.clone(), key: self.key.clone() }, self.generation)
    }
}

pub use weft_wire::{DiskReport, Heartbeat};

/// A node as meta last heard of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node_id: u32,
    pub endpoint: String,
    pub pid: u32,
    pub last_heartbeat_ms: u64,
    pub disks: Vec<DiskReport>,
    /// The rack the node's last heartbeat named; None (also in records stored before racks
    /// existed): the node is its own rack (see [`NodeRecord::rack_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<u32>,
}

impl NodeRecord {
    /// The rack placement puts this node in: the rack it reported, else its own node id.
    /// (A node without a rack whose id equals another node's rack number shares that rack:
    /// placement is then stricter than needed, never looser.)
    pub fn rack_id(&self) -> u32 {
        self.rack.unwrap_or(self.node_id)
    }

    /// Where disk `disk` of this node sits.
    pub fn disk_location(&self, disk: u32) -> DiskLocation {
        DiskLocation { rack: self.rack_id(), node: self.node_id, disk }
    }

    /// Whether the node has been silent for more than `timeout_ms` at `now_ms`.
    pub fn is_down(&self, now_ms: u64, timeout_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_heartbeat_ms) > timeout_ms
    }
}

pub use weft_wire::repair::RepairKind;

/// A unit of an object to rebuild.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairTask {
    pub object: ObjectName,
    /// The generation of the committed object when the task was queued. A task whose object
    /// has since been deleted or replaced is stale: it is dropped, never carried out. (0 in
    /// tasks written before generations were recorded: stale, since generations start at 1.)
    #[serde(default)]
    pub generation: u64,
    pub unit: UnitId,
    /// Why the unit needs repair; tasks of kind `Unavailable` are dropped when the unit's disk
    /// is available again before the repair starts.
    #[serde(default)]
    pub kind: RepairKind,
    pub reason: String,
    pub enqueued_ms: u64,
    /// How many times the task has been leased.
    pub attempts: u32,
    /// Until when the current lease holds; None when the task is free to take.
    pub lease_deadline_ms: Option<u64>,
    /// The error the last failed attempt reported.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Back-off: the task is not taken before this time (set when an attempt fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<u64>,
    /// The last attempt found too few units of the group readable (see
    /// `weft_wire::repair::FailCause::Unrecoverable`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub unfound: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// A repair task leased to one executor until `deadline_ms`. (`task_id`, `deadline_ms`) names
/// the lease: a task is never leased twice with the same deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairLease {
    /// Queue position of the task; names it in `complete_repair` / `fail_repair`.
    pub task_id: u64,
    pub task: RepairTask,
    pub deadline_ms: u64,
}

/// A request to queue the repair of one unit of one committed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairRequest {
    pub object: ObjectName,
    /// The generation the caller saw; the request is stale unless the committed object still
    /// has it.
    pub generation: u64,
    pub unit: UnitId,
    pub kind: RepairKind,
    pub reason: String,
    /// When set, the request is stale unless the unit is still on this disk (the detector
    /// saw it there; a repair may have moved it since).
    pub seen_on: Option<DiskLocation>,
}

/// What `enqueue_repair` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new task was queued, or the queued task of the unit became a `Damaged` repair.
    Queued,
    /// That unit of that generation is already queued; nothing changed.
    AlreadyQueued,
    /// The object is not committed with that generation (deleted, replaced, never committed),
    /// or the unit is no longer on `seen_on`; nothing changed.
    Stale,
}

/// What completing a repair by relocation did.
// Returned once per completed repair: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The unit now lives on the new disk; the updated object.
    Relocated(ObjectRecord),
    /// The object was deleted or replaced (another generation): the task was removed and
    /// nothing else changed.
    Stale,
}

/// A transition to begin: the plan meta computed for one committed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTransition {
    pub bucket: String,
    pub key: String,
    /// The generation of the committed object the plan was made for.
    pub object_generation: u64,
    pub mode: TransitionMode,
    /// The object's layout when the plan was made.
    pub old_layout: StripedLayout,
    /// The placement after the transition as planned: the new layout, the data blocks where
    /// they were (relocated ones at their destination), the new parity disks.
    pub new_placement: Placement,
    /// Data blocks to move, in block order.
    pub relocations: Vec<Relocation>,
    /// How long the executor holds the transition from its begin: the record's
    /// `lease_deadline_ms` is `now_ms + lease_ms` (see [`TransitionRecord`]).
    pub lease_ms: u64,
}

/// The lease of a transition stored without one (written before leases existed): its
/// deadline is `created_ms` + this.
pub const DEFAULT_TRANSITION_LEASE_MS: u64 = 60_000;

/// A transition in progress: at most one per object, stored until it is committed or
/// aborted, replaced by a newer begin, or dropped with its object (overwrite or delete), or
/// expired (aborted once its lease deadline passed: its executor is presumed dead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredTransition")]
pub struct TransitionRecord {
    pub bucket: String,
    pub key: String,
    /// The generation of the committed object it transitions; a commit is refused unless the
    /// object still has it.
    pub object_generation: u64,
    /// From a store-wide counter, never reused; the object's parity generation once committed.
    pub id: u64,
    pub mode: TransitionMode,
    pub old_layout: StripedLayout,
    /// As planned. A commit keeps the data disks of the object *at commit* (a repair may have
    /// moved blocks since) with `relocations` applied, and takes the parity disks from here.
    pub new_placement: Placement,
    pub relocations: Vec<Relocation>,
    pub created_ms: u64,
    /// The executor's lease: set at begin, moved by renewals; once meta's clock passes it the
    /// transition may be expired (aborted). Records stored without one read as
    /// `created_ms + DEFAULT_TRANSITION_LEASE_MS`.
    pub lease_deadline_ms: u64,
}

/// How a [`TransitionRecord`] is read: `lease_deadline_ms` may be missing (older records).
#[derive(Deserialize)]
struct StoredTransition {
    bucket: String,
    key: String,
    object_generation: u64,
    id: u64,
    mode: TransitionMode,
    old_layout: StripedLayout,
    new_placement: Placement,
    relocations: Vec<Relocation>,
    created_ms: u64,
    #[serde(default)]
    lease_deadline_ms: Option<u64>,
}

impl From<StoredTransition> for TransitionRecord {
    fn from(s: StoredTransition) -> TransitionRecord {
        TransitionRecord {
            lease_deadline_ms: s
                .lease_deadline_ms
                .unwrap_or_else(|| s.created_ms.saturating_add(DEFAULT_TRANSITION_LEASE_MS)),
            bucket: s.bucket,
            key: s.key,
            object_generation: s.object_generation,
            id: s.id,
            mode: s.mode,
            old_layout: s.old_layout,
            new_placement: s.new_placement,
            relocations: s.relocations,
            created_ms: s.created_ms,
        }
    }
}

impl TransitionRecord {
    /// The record of `plan` begun at `created_ms`, leased until `created_ms + plan.lease_ms`.
    pub fn new(plan: NewTransition, id: u64, created_ms: u64) -> TransitionRecord {
        TransitionRecord {
            lease_deadline_ms: created_ms.saturating_add(plan.lease_ms),
            bucket: plan.bucket,
            key: plan.key,
            object_generation: plan.object_generation,
            id,
            mode: plan.mode,
            old_layout: plan.old_layout,
            new_placement: plan.new_placement,
            relocations: plan.relocations,
            created_ms,
        }
    }

    /// Whether its lease has expired at `now_ms`.
    pub fn lease_expired(&self, now_ms: u64) -> bool {
        self.lease_deadline_ms <= now_ms
    }

    /// The new layout.
    pub fn new_layout(&self) -> &StripedLayout {
        self.new_placement.layout()
    }
}

#[derive(Serialize)]
struct EnvelopeOut<'a, T> {
    v: u64,
    r: &'a T,
}

#[derive(Deserialize)]
struct Probe {
    v: u64,
}

#[derive(Deserialize)]
struct EnvelopeIn<T> {
    r: T,
}

/// Encodes a value for storage in its versioned envelope.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(&EnvelopeOut { v: FORMAT_VERSION, r: value })
        .expect("records serialize to JSON infallibly")
}

/// Decodes a stored value, refusing unknown format versions.
pub(crate) fn decode<T: DeserializeOwned>(
    table: &'static str,
    key: &dyn Fn() -> String,
    bytes: &[u8],
) -> Result<T, MetaError> {
    let corrupt =
        |e: serde_json::Error| MetaError::Corrupt { table, key: key(), reason: e.to_string() };
    let probe: Probe = serde_json::from_slice(bytes).map_err(corrupt)?;
    if probe.v != FORMAT_VERSION {
        return Err(MetaError::UnsupportedVersion {
            table,
            key: key(),
            found: probe.v,
            supported: FORMAT_VERSION,
        });
    }
    let envelope: EnvelopeIn<T> = serde_json::from_slice(bytes).map_err(corrupt)?;
    Ok(envelope.r)
}

/// The stored form of an [`ObjectRecord`]; bucket and key are the table key. Its placement is
/// the placement's pattern ([`Placement::pattern`]): one entry per unit for objects of up to a
/// few thousand units, one period plus each moved unit for larger ones, so the record does not
/// grow with the object (its digests do: 16 bytes per unit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredObject {
    layout: StripedLayout,
    size: u64,
    level: FailureDomain,
    seed: u64,
    /// The distinct disks the object uses, in first-use order.
    disks: Vec<DiskLocation>,
    /// Groups per period of a tiled placement; absent when `data` and `parity` list every unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    period: Option<usize>,
    /// Index into `disks` of the pattern's data block x, at x.
    data: Vec<u32>,
    /// Index into `disks` of the pattern's parity i of group g, at g·r + i.
    parity: Vec<u32>,
    /// Units of a tiled placement off their pattern's disk: (unit, index into `disks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    moved: Vec<(UnitId, u32)>,
    state: ObjectState,
    created_ms: u64,
    generation: u64,
    /// Absent in objects stored before transitions existed, and whenever it is 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    parity_generation: u64,
    /// The unit digests' text forms (32 hex digits, `k` first when keyed), concatenated in
    /// the order of [`Placement::units`]; absent when
    /// the object has none (so objects stored before digests existed read unchanged).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    digests: String,
    /// A RAIDP object's extents; absent for striped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raidp: Option<Vec<RaidpExtent>>,
    /// A packed object's compact geometric record, hex; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    geo: Option<String>,
    /// A bin stripe's owner tags; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    own: Vec<u32>,
    /// The writer's attributes; absent when it sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attr: Option<serde_json::Value>,
    /// Written with versioning enabled; absent when not.
    #[serde(default, skip_serializing_if = "is_false")]
    ver: bool,
    /// A delete marker; absent otherwise.
    #[serde(default, skip_serializing_if = "is_false")]
    dm: bool,
    /// Its object lock; absent when it has none.
    #[serde(default, skip_serializing_if = "crate::lock::ObjectLock::is_none")]
    lock: crate::lock::ObjectLock,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl StoredObject {
    pub(crate) fn from_record(record: &ObjectRecord) -> StoredObject {
        let placement = &record.placement;
        let (period, data, parity, moved) = placement.pattern();
        let mut disks: Vec<DiskLocation> = Vec::new();
        let mut index: std::collections::BTreeMap<DiskLocation, u32> = Default::default();
        let mut at = |disk: &DiskLocation| -> u32 {
            *index.entry(*disk).or_insert_with(|| {
                disks.push(*disk);
                u32::try_from(disks.len() - 1).expect("an object uses fewer than 2^32 disks")
            })
        };
        let data = data.iter().map(&mut at).collect();
        let parity = parity.iter().map(&mut at).collect();
        let moved = moved.iter().map(|(unit, disk)| (*unit, at(disk))).collect();
        StoredObject {
            layout: *placement.layout(),
            size: placement.object_size(),
            level: placement.failure_domain(),
            seed: placement.seed(),
            disks,
            period,
            data,
            parity,
            moved,
            state: record.state,
            created_ms: record.created_ms,
            generation: record.generation,
            parity_generation: record.parity_generation,
            digests: match record.digests.is_empty() {
                true => String::new(),
                false => placement
                    .units()
                    .map(|(unit, _)| {
                        record.digests.get(&unit).map_or(String::new(), |d| d.to_string())
                    })
                    .collect(),
            },
            raidp: record.raidp.clone(),
            geo: record.geometric.as_ref().map(|bytes| weft_auth::hex(bytes)),
            own: record.owners.clone(),
            attr: record.attributes.clone(),
            ver: record.versioned,
            dm: record.delete_marker,
            lock: record.lock,
        }
    }

    pub(crate) fn into_record(self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError> {
        let corrupt = |reason: String| MetaError::Corrupt {
            table: "objects",
            key: format!("{bucket}/{key}"),
            reason,
        };
        let disk = |i: u32| {
            self.disks
                .get(i as usize)
                .copied()
                .ok_or_else(|| corrupt(format!("disk index {i} out of {} disks", self.disks.len())))
        };
        let lookup = |indices: &[u32]| -> Result<Vec<DiskLocation>, MetaError> {
            indices.iter().map(|&i| disk(i)).collect()
        };
        let mut moved = std::collections::BTreeMap::new();
        for (unit, i) in &self.moved {
            if moved.insert(*unit, disk(*i)?).is_some() {
                return Err(corrupt(format!("{unit} is moved twice")));
            }
        }
        let placement = Placement::from_pattern(
            self.layout,
            self.size,
            self.level,
            self.seed,
            self.period,
            lookup(&self.data)?,
            lookup(&self.parity)?,
            moved,
        )
        .map_err(|e| corrupt(e.to_string()))?;
        let mut digests = Digests::new();
        if !self.digests.is_empty() {
            // Each digest is 32 hex digits, or 33 characters when keyed (`k` first).
            let units = placement.unit_count();
            let mut rest = self.digests.as_str();
            for (unit, _) in placement.units() {
                let (digest, after) = weft_wire::UnitDigest::split_first(rest)
                    .map_err(|e| corrupt(format!("digests for {units} units: {e}")))?;
                digests.insert(unit, digest);
                rest = after;
            }
            if !rest.is_empty() {
                return Err(corrupt(format!(
                    "{} characters of digests past the {units} units'",
                    rest.len()
                )));
            }
        }
        Ok(ObjectRecord {
            bucket: bucket.to_string(),
            key: key.to_string(),
            placement,
            state: self.state,
            created_ms: self.created_ms,
            generation: self.generation,
            parity_generation: self.parity_generation,
            digests,
            raidp: self.raidp,
            owners: self.own,
            attributes: self.attr,
            versioned: self.ver,
            delete_marker: self.dm,
            lock: self.lock,
            geometric: match self.geo {
                None => None,
                Some(text) => {
                    Some(weft_auth::unhex(&text).ok_or_else(|| {
                        corrupt(format!("the geometric record {text:?} is not hex"))
                    })?)
                }
            },
        })
    }
}

/// Metadata bytes one object costs: its stored value plus its table key (bucket and key).
pub fn metadata_bytes(object: &ObjectRecord) -> usize {
    encode(&StoredObject::from_record(object)).len() + object.bucket.len() + object.key.len()
}

/// The lenient check every bucket name passes through on its way in (object writes, lookups):
/// 1 to 63 bytes of lowercase letters, digits, '-' and '.'. Buckets created before the stricter
/// [`check_new_bucket_name`] keep working under it.
pub(crate) fn check_bucket_name(name: &str) -> Result<(), MetaError> {
    let refuse = |reason| Err(MetaError::InvalidName { what: "bucket", name: name.into(), reason });
    if name.is_empty() {
        return refuse("empty");
    }
    if name.len() > MAX_BUCKET_NAME_BYTES {
        return refuse("longer than 63 bytes");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return refuse("only lowercase letters, digits, '-' and '.' are allowed");
    }
    Ok(())
}

/// The check a bucket name must pass to be created: S3's bucket naming rules.
///
/// - 3 to 63 bytes long;
/// - only lowercase letters, digits, '-' and '.';
/// - begins and ends with a letter or a digit;
/// - no two adjacent periods, and no period next to a hyphen (each dot-separated label
///   begins and ends with a letter or a digit, as DNS names do);
/// - not formatted like an IPv4 address (`192.168.5.4`).
///
/// One exception: weft's own internal buckets, named [`INTERNAL_BUCKET_PREFIX`] (`.weft-`) and
/// more, such as the S3 gateway's `.weft-s3-parts`. The leading '.' keeps them out of reach of
/// S3 clients (no S3 name may begin with one); after it the name follows the rules above.
///
/// Only bucket creation applies it; everywhere else [`check_bucket_name`] is enough, so buckets
/// created under the older, looser rule (1 byte and up) keep working.
pub(crate) fn check_new_bucket_name(name: &str) -> Result<(), MetaError> {
    let refuse = |reason| Err(MetaError::InvalidName { what: "bucket", name: name.into(), reason });
    if name.len() < MIN_NEW_BUCKET_NAME_BYTES || name.len() > MAX_BUCKET_NAME_BYTES {
        return refuse("a bucket name must be 3 to 63 characters long");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return refuse("only lowercase letters, digits, '-' and '.' are allowed");
    }
    let s3_name = match name.strip_prefix('.') {
        Some(rest) if name.starts_with(INTERNAL_BUCKET_PREFIX) => rest,
        _ => name,
    };
    let letter_or_digit = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = s3_name.as_bytes();
    if !letter_or_digit(bytes[0]) || !letter_or_digit(bytes[bytes.len() - 1]) {
        return refuse("a bucket name must begin and end with a letter or a digit");
    }
    if s3_name.contains("..") {
        return refuse("a bucket name must not contain two adjacent periods");
    }
    if s3_name.contains(".-") || s3_name.contains("-.") {
        return refuse("no part of a bucket name between periods may begin or end with '-'");
    }
    if looks_like_ipv4(s3_name) {
        return refuse("a bucket name must not be formatted as an IP address");
    }
    Ok(())
}

/// Four dot-separated runs of 1 to 3 digits: `192.168.5.4`, and also shapes such as `999.1.1.1`
/// that are no real address but still read as one.
fn looks_like_ipv4(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

pub(crate) fn check_key(key: &str) -> Result<(), MetaError> {
    let refuse =
        |reason| Err(MetaError::InvalidName { what: "object key", name: key.into(), reason });
    match weft_wire::object_key_problem(key) {
        Some(reason) => refuse(reason),
        None => Ok(()),
    }
}

/// `d<x>` or `p<group>.<index>`: the unit's name on the wire (`UnitId::short_name`).
pub fn unit_name(unit: UnitId) -> String {
    unit.short_name()
}

/// Parses a [`unit_name`] (canonical form only; `UnitId::parse_short_name`).
pub fn parse_unit_name(name: &str) -> Option<UnitId> {
    UnitId::parse_short_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_bucket_names_follow_s3_rules() {
        let longest = "a".repeat(63);
        for name in ["abc", "a-b.c1", longest.as_str(), "1bucket", "my.bucket-2", "1.2.3"] {
            assert_eq!(check_new_bucket_name(name), Ok(()), "{name:?}");
            assert_eq!(check_bucket_name(name), Ok(()), "{name:?}");
        }
        let too_long = "a".repeat(64);
        let refused = [
            ("", "3 to 63 characters"),
            ("a", "3 to 63 characters"),
            ("ab", "3 to 63 characters"),
            (too_long.as_str(), "3 to 63 characters"),
            ("-ab", "begin and end with a letter or a digit"),
            ("ab-", "begin and end with a letter or a digit"),
            (".ab", "begin and end with a letter or a digit"),
            ("a..b", "two adjacent periods"),
            ("ab.-cd", "begin or end with '-'"),
            ("ab-.cd", "begin or end with '-'"),
            ("192.168.5.4", "IP address"),
            ("999.1.1.1", "IP address"),
            ("Abc", "only lowercase letters, digits, '-' and '.'"),
            ("a_b", "only lowercase letters, digits, '-' and '.'"),
        ];
        for (name, why) in refused {
            match check_new_bucket_name(name) {
                Err(MetaError::InvalidName { what: "bucket", name: got, reason }) => {
                    assert_eq!(got, name);
                    assert!(reason.contains(why), "{name:?}: {reason:?} should say {why:?}");
                }
                other => panic!("{name:?} should be refused, got {other:?}"),
            }
        }
        // weft's internal buckets: ".weft-" and an otherwise valid name; no other leading '.'.
        assert_eq!(check_new_bucket_name(".weft-s3-parts"), Ok(()));
        for name in [".weft-", ".weft-a..b", ".weft-x-", ".web-parts", "..weft-x"] {
            assert!(check_new_bucket_name(name).is_err(), "{name:?}");
        }
        // Names a new bucket may not take but an existing one keeps working under.
        for name in ["a", "ab", "-ab", "ab-", "a..b", "192.168.5.4"] {
            assert_eq!(check_bucket_name(name), Ok(()), "{name:?}");
        }
    }

    #[test]
    fn node_records_stored_before_racks_still_decode() {
        let old = concat!(
            r#"{"v":1,"r":{"node_id":3,"endpoint":"http://e","pid":9,"#,
            r#""last_heartbeat_ms":5,"disks":[]}}"#
        )
        .as_bytes();
        let node: NodeRecord = decode("nodes", &|| "3".into(), old).unwrap();
        assert_eq!((node.rack, node.rack_id()), (None, 3));
        // Without a rack the stored shape is the old one; with one, "rack" is added.
        assert_eq!(encode(&node), old.to_vec());
        let racked = NodeRecord { rack: Some(1), ..node };
        let bytes = encode(&racked);
        assert!(String::from_utf8_lossy(&bytes).contains(r#""rack":1"#));
        assert_eq!(decode::<NodeRecord>("nodes", &|| "3".into(), &bytes).unwrap(), racked);
    }

    /// An rs(2,1) object as stored before transitions and digests existed.
    const OLD_OBJECT: &str = concat!(
        r#"{"v":1,"r":{"layout":{"code":"rs(2,1)","stripe_width":2,"cell_bytes":4,"#,
        r#""block_bytes":4},"size":8,"level":"Node","seed":7,"disks":[{"rack":1,"node":1,"#,
        r#""disk":0},{"rack":2,"node":2,"disk":0},{"rack":3,"node":3,"disk":0}],"#,
        r#""data":[0,1],"parity":[2],"state":"Committed","created_ms":5,"generation":4}}"#
    );

    #[test]
    fn objects_stored_before_transitions_read_parity_generation_0() {
        let old = OLD_OBJECT.as_bytes();
        let stored: StoredObject = decode("objects", &|| "b/k".into(), old).unwrap();
        let record = stored.into_record("b", "k").unwrap();
        assert_eq!((record.generation, record.parity_generation), (4, 0));
        // Untransitioned objects keep the old stored shape; transitioned ones add the field.
        assert_eq!(encode(&StoredObject::from_record(&record)), old.to_vec());
        let moved = ObjectRecord { parity_generation: 9, ..record };
        let bytes = encode(&StoredObject::from_record(&moved));
        assert!(String::from_utf8_lossy(&bytes).contains(r#""parity_generation":9"#));
        let back: StoredObject = decode("objects", &|| "b/k".into(), &bytes).unwrap();
        assert_eq!(back.into_record("b", "k").unwrap(), moved);
    }

    #[test]
    fn digests_of_both_kinds_are_stored_in_place_and_a_cut_list_is_corrupt() {
        use weft_wire::{DigestKind, UnitDigest};
        let old = OLD_OBJECT.as_bytes();
        let stored: StoredObject = decode("objects", &|| "b/k".into(), old).unwrap();
        let mut record = stored.into_record("b", "k").unwrap();
        // A transitioned object written with BLAKE3 digests: keyed digests for new parity.
        let kinds = [DigestKind::Blake3, DigestKind::Keyed, DigestKind::Keyed];
        let units: Vec<UnitId> = record.placement.units().map(|(unit, _)| unit).collect();
        assert_eq!(units.len(), 3);
        for (i, unit) in units.iter().enumerate() {
            record.digests.insert(*unit, UnitDigest::new(kinds[i], [i as u8 + 1; 16]));
        }
        let bytes = encode(&StoredObject::from_record(&record));
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains(&format!(
                "\"digests\":\"{}k{}k{}\"",
                "01".repeat(16),
                "02".repeat(16),
                "03".repeat(16)
            )),
            "{text}"
        );
        let back: StoredObject = decode("objects", &|| "b/k".into(), &bytes).unwrap();
        assert_eq!(back.into_record("b", "k").unwrap(), record);
        // One character short, one unit too many, and a stray character: corrupt, not guessed.
        let digests = format!("{}k{}k{}", "01".repeat(16), "02".repeat(16), "03".repeat(16));
        for bad in [
            &digests[..digests.len() - 1],
            &format!("{digests}k{}", "04".repeat(16)),
            &format!("{digests}0"),
        ] {
            let broken = text.replace(&digests, bad);
            let back: StoredObject =
                decode("objects", &|| "b/k".into(), broken.as_bytes()).unwrap();
            match back.into_record("b", "k") {
                Err(MetaError::Corrupt { reason, .. }) => {
                    assert!(reason.contains("digests"), "{reason}")
                }
                other => panic!("{bad:?} read as {other:?}"),
            }
        }
    }
}
