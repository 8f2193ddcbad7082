//! The geometric layout in meta (docs/geometric.md, docs/meta-api.md "Geometric"): geometric
//! buckets, their placement groups, the packer's plan and commit, and what a read of a packed
//! object needs to know.
//!
//! Data flow of a pack: `POST /v1/geometric/{bucket}/plan` picks warm objects, partitions each
//! (Algorithm 1), puts it on its placement group (hash of bucket and key) at the group's
//! least-filled data disk, forms bin stripes (per group and bin, round j takes the j-th chunk
//! of every data member that has one) and begins each stripe as a write of the internal bucket
//! [`GEOMETRIC_BUCKET`] → the packer reads the warm copies, writes the stripes' units →
//! `POST .../commit` commits the stripes and swaps the objects in one store transaction
//! ([`crate::MetaStore::commit_pack`]) → the packer deletes the warm units it was answered.
//!
//! Invariants:
//! - A bucket's geometric state (record `geometric/<bucket>`: its placement groups, the bytes
//!   on each data member, the next stripe number of each bin) changes only under
//!   `Meta::geometric`'s lock, read-modify-write; stripe numbers are never handed out twice,
//!   so a plan that crashed leaves gaps, never clashes.
//! - A packed object is readable from its stripes the moment its commit returns, and its
//!   warm copy stays referenced until then: the swap is one transaction, so an object is
//!   never without either, and never counted in both.
//! - A stripe's data blocks are on distinct data members of its group (one chunk per disk),
//!   its parity on the group's parity members; stripes are ordinary objects of
//!   [`GEOMETRIC_BUCKET`] from there on: repaired, scrubbed, collected like any other.
//! - Placement groups are made once, when the bucket is made (or first packed), over the disks
//!   usable then, at meta's failure-domain level.
//! - A committed stripe carries one owner tag per data block (meta derives them from the
//!   commit's objects, never from the caller): a repair that moves a data block sends it to
//!   the disk its owner ranks first, so an object's chunks are rebuilt onto one disk and a
//!   failed disk's objects onto many ([`repair_destination`]).
//! - A deleted geometric bucket's stripes are dropped after it ([`drop_stripes`]): the
//!   bucket had to be empty, so no live object has a chunk in them. Each stripe's record
//!   goes first, then its units are queued on the deletions queue (a crash between leaves
//!   them to the gc sweep); the bucket's state record goes last, so while it outlives its
//!   bucket there is work left, which the repair detector's ticks finish and which makes a
//!   bucket of that name wait (409 `bucket_being_dropped`) rather than share stripe keys
//!   with the old one.

use std::collections::BTreeMap;

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use weft_codes::CodeSpec;
use weft_layout::geometric::{
    placement_groups, ChunkRef, FrontRef, GeoPlace, GeometricPolicy, DEFAULT_CHUNK_MAX, DEFAULT_PGS,
};
use weft_layout::{DiskLocation, FailureDomain, Placement, StripedLayout, Topology};

use super::liveness::Liveness;
use super::objects::{object_json, topology_of, units_json};
use super::{blocking, now_ms, ApiError, Shared};
use crate::records::owner_tag;
use crate::store::{PackedObject, StripeCommit, GEOMETRIC};
use crate::{
    BucketRecord, MetaError, MetaStore, NodeRecord, ObjectRecord, GEOMETRIC_BUCKET, MAX_LIST_LIMIT,
};

/// Most stripes one call of [`drop_stripes`] drops (a request's or a detector tick's share).
pub(crate) const MAX_STRIPES_DROPPED: usize = 4096;

/// Drops up to `max` bin stripes of `bucket`, a geometric bucket already deleted: each
/// stripe's record, then its units onto the deletions queue (the repair executors delete
/// them from their nodes). Once none is left, the bucket's state record goes too. Answers
/// the stripes dropped and whether the bucket is done (true at once for a name that was
/// never a geometric bucket).
pub(crate) fn drop_stripes(
    store: &dyn MetaStore,
    bucket: &str,
    max: usize,
) -> Result<(usize, bool), MetaError> {
    if store.get_record(GEOMETRIC, bucket)?.is_none() {
        return Ok((0, true));
    }
    match store.get_bucket(bucket) {
        Err(MetaError::NoSuchBucket { .. }) => {}
        Ok(_) => return Ok((0, false)), // still (or again) a bucket: nothing is dead
        Err(other) => return Err(other),
    }
    let prefix = format!("{bucket}/");
    let mut dropped = 0;
    while dropped < max {
        let limit = (max - dropped).min(MAX_LIST_LIMIT);
        let page = match store.list_objects(GEOMETRIC_BUCKET, &prefix, None, limit) {
            Ok(page) => page,
            Err(MetaError::NoSuchBucket { .. }) => break, // nothing was ever packed
            Err(other) => return Err(other),
        };
        if page.objects.is_empty() {
            break;
        }
        for stripe in page.objects {
            let record = match store.delete_object(GEOMETRIC_BUCKET, &stripe.key) {
                Ok(record) => record,
                Err(MetaError::NoSuchKey { .. }) => continue,
                Err(other) => return Err(other),
            };
            for (unit, disk) in record.placement.units() {
                super::deletions::queue_replaced_copy(store, &record, unit, disk)?;
            }
            dropped += 1;
        }
    }
    if dropped < max {
        store.delete_record(GEOMETRIC, bucket)?;
        if dropped > 0 {
            tracing::info!(%bucket, dropped, "stripes of a deleted geometric bucket dropped");
        }
        return Ok((dropped, true));
    }
    Ok((dropped, false))
}

/// Finishes the drops [`drop_stripes`] left (deleted geometric buckets whose state record
/// is still there), up to [`MAX_STRIPES_DROPPED`] stripes in all; the repair detector calls
/// it every tick. Answers the stripes dropped.
pub(crate) fn drop_deleted_buckets_stripes(store: &dyn MetaStore) -> Result<usize, MetaError> {
    let mut dropped = 0;
    let mut after: Option<String> = None;
    loop {
        let page = store.list_records(GEOMETRIC, "", after.as_deref(), MAX_LIST_LIMIT)?;
        for (bucket, _) in &page {
            if dropped >= MAX_STRIPES_DROPPED {
                return Ok(dropped);
            }
            dropped += drop_stripes(store, bucket, MAX_STRIPES_DROPPED - dropped)?.0;
        }
        if page.len() < MAX_LIST_LIMIT {
            return Ok(dropped);
        }
        after = page.last().map(|(name, _)| name.clone());
    }
}

/// The owner tag of a block several objects share (fronts in the small bin) while a commit
/// gathers tags; stored as 0 (no one). [`owner_tag`] never answers it.
const SHARED_BLOCK: u32 = u32::MAX;

/// Most chunks one object may be cut into; larger objects (for their policy) stay warm.
pub const MAX_CHUNKS_PER_OBJECT: usize = 1 << 16;
/// Most chunks and fronts one plan takes (at least one object's, however many): bounds its
/// stripes, so its commit, which names every stripe's unit digests, stays under
/// [`MAX_COMMIT_BYTES`] (about 700 bytes a stripe).
pub const MAX_PLAN_CHUNKS: usize = 1 << 16;
/// Largest commit body meta takes.
pub const MAX_COMMIT_BYTES: usize = 64 << 20;
/// Most bytes of fronts one small-bin stripe puts on one disk.
pub const SMALL_REGION_BYTES: u64 = 64 << 20;
/// Most objects one plan takes.
pub const MAX_PLAN_OBJECTS: usize = 1000;
/// Bytes one plan takes unless asked otherwise.
pub const DEFAULT_PLAN_BYTES: u64 = 4 << 30;

/// A bucket's geometric state, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct GeoState {
    pub(crate) pgs: Vec<PgState>,
    /// The record as read from the store (`None`: not stored yet): a save replaces exactly
    /// that, or fails with `RecordChanged` when another meta replica saved in between.
    #[serde(skip)]
    pub(crate) stored: Option<serde_json::Value>,
}

/// One placement group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PgState {
    /// k data members, then r parity members.
    pub(crate) members: Vec<DiskLocation>,
    /// Bytes packed onto each data member.
    pub(crate) fill: Vec<u64>,
    /// The next stripe number of each bin (`s`: the small bin, `c<i>`: chunk class i).
    #[serde(default)]
    pub(crate) next: BTreeMap<String, u64>,
    /// Members replaced after a failure: (old disk, new disk); repairs of the group's
    /// stripes rebuild the old disk's units on the new one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) replaced: Vec<(DiskLocation, DiskLocation)>,
}

/// The name of a bin: `s` for the small bin, `c<i>` for chunk class i.
pub fn bin_name(class: Option<usize>) -> String {
    match class {
        None => "s".into(),
        Some(i) => format!("c{i}"),
    }
}

/// The key of a stripe in [`GEOMETRIC_BUCKET`].
pub fn stripe_key(bucket: &str, pg: u32, class: Option<usize>, seq: u64) -> String {
    format!("{bucket}/{pg:05}/{}/{seq:012}", bin_name(class))
}

/// The placement group of a key: FNV-1a of bucket and key, mod the group count.
pub fn pg_of(bucket: &str, key: &str, pgs: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bucket.bytes().chain([0u8]).chain(key.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(pgs.max(1))) as u32
}

fn corrupt(bucket: &str, e: impl ToString) -> MetaError {
    MetaError::Corrupt {
        table: "records",
        key: format!("{GEOMETRIC}/{bucket}"),
        reason: e.to_string(),
    }
}

pub(crate) fn load(store: &dyn MetaStore, bucket: &str) -> Result<Option<GeoState>, MetaError> {
    let Some(value) = store.get_record(GEOMETRIC, bucket)? else { return Ok(None) };
    let mut state: GeoState =
        serde_json::from_value(value.clone()).map_err(|e| corrupt(bucket, e))?;
    state.stored = Some(value);
    Ok(Some(state))
}

/// Stores `state` over the record it was read from (see [`GeoState::stored`]).
fn save(store: &dyn MetaStore, bucket: &str, state: &mut GeoState) -> Result<(), MetaError> {
    let value = serde_json::to_value(&*state).expect("geometric state serializes");
    store.replace_record(GEOMETRIC, bucket, state.stored.as_ref(), &value)?;
    state.stored = Some(value);
    Ok(())
}

fn invalid(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_policy", message)
}

/// What a bucket body asking for the geometric layout says (`{"layout":"geometric", ...}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GeoAsk {
    #[allow(dead_code)]
    layout: String,
    code: Option<String>,
    small_code: Option<String>,
    s0: Option<u64>,
    q: Option<u64>,
    chunk_max: Option<u64>,
    pgs: Option<u32>,
    /// The warm tier's code: `rep(n)` (default rep(3), or fewer copies on a smaller cluster).
    warm: Option<String>,
}

/// The geometric bucket a body asks for, or None when it does not ask for one.
pub(crate) fn request(body: &[u8]) -> Result<Option<GeoAsk>, ApiError> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok(None);
    };
    if fields.get("layout").and_then(Value::as_str) != Some("geometric") {
        if let Some(other) = fields.get("layout") {
            if other.as_str() != Some("striped") {
                return Err(invalid(format!(
                    "layout {other}: a bucket's layout is \"striped\" or \"geometric\""
                )));
            }
        }
        return Ok(None);
    }
    serde_json::from_value(Value::Object(fields)).map(Some).map_err(|e| {
        invalid(format!(
            "a geometric bucket takes layout, code, small_code, s0, q, chunk_max, pgs and warm: {e}"
        ))
    })
}

/// The policy a [`GeoAsk`] makes, checked.
fn policy_of(ask: &GeoAsk) -> Result<GeometricPolicy, ApiError> {
    let parse = |text: &str, what: &str| {
        CodeSpec::parse(text).map_err(|e| invalid(format!("{what} {text:?}: {e}")))
    };
    let code = parse(ask.code.as_deref().unwrap_or("clay(10,4)"), "code")?;
    let small_code = match &ask.small_code {
        Some(text) => parse(text, "small code")?,
        None => CodeSpec::Rs { k: code.k(), r: code.r() },
    };
    let policy = GeometricPolicy {
        code,
        small_code,
        s0: ask.s0.unwrap_or(4 << 20),
        q: ask.q.unwrap_or(2),
        chunk_max: ask.chunk_max.unwrap_or(DEFAULT_CHUNK_MAX),
        pgs: ask.pgs.unwrap_or(DEFAULT_PGS),
    };
    policy.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(policy)
}

/// The placement groups of a new state over the disks usable now.
fn new_state(
    policy: &GeometricPolicy,
    nodes: &[NodeRecord],
    live: &Liveness,
    level: FailureDomain,
    seed: u64,
) -> Result<GeoState, ApiError> {
    let (disks, nodes_up) = topology_of(nodes, live);
    let too_few = |available: usize| {
        super::objects::too_few_nodes(level, nodes_up, nodes_up, available, policy.n())
    };
    let topology = Topology::new(disks).map_err(|_| too_few(0))?;
    let groups =
        placement_groups(&topology, level, policy.n(), policy.r(), policy.pgs as usize, seed)
            .map_err(|e| match e {
                weft_layout::LayoutError::TooFewDomains { available, .. } => too_few(available),
                other => invalid(other.to_string()),
            })?;
    let k = policy.k();
    Ok(GeoState {
        stored: None,
        pgs: groups
            .into_iter()
            .map(|members| PgState {
                members,
                fill: vec![0; k],
                next: BTreeMap::new(),
                replaced: Vec::new(),
            })
            .collect(),
    })
}

/// Creates a geometric bucket: its warm policy (replicated) takes the writes, its placement
/// groups are made now.
pub(crate) async fn create_bucket(
    meta: Shared,
    name: String,
    ask: GeoAsk,
    domains: usize,
) -> Result<BucketRecord, ApiError> {
    let policy = policy_of(&ask)?;
    let level = meta.failure_domain;
    if domains < policy.n() {
        let mut error = ApiError::new(
            StatusCode::CONFLICT,
            "policy_too_wide",
            format!(
                "{} needs placement groups of k + r = {} disks on distinct {}, but the cluster \
                 has {domains}; start more nodes or choose a smaller k or r",
                policy.code,
                policy.n(),
                super::objects::domains_name(level)
            ),
        );
        error.body["needed"] = json!(policy.n());
        error.body["domains"] = json!(domains);
        return Err(error);
    }
    let copies = match &ask.warm {
        None => 3.min(domains.max(1)),
        Some(text) => match CodeSpec::parse(text) {
            Ok(CodeSpec::Rep { n }) if n >= 1 => n,
            _ => {
                return Err(invalid(format!(
                    "warm {text:?}: the warm tier of a geometric bucket is replicated, rep(n)"
                )))
            }
        },
    };
    let warm_body = json!({ "code": format!("rep({copies})"), "stripe_width": 1 });
    let warm =
        super::parse_policy_over(warm_body.to_string().as_bytes(), super::default_policy_json())?;
    let live = meta.liveness();
    let _lock = meta.geometric.lock().await;
    let record = blocking(&meta, move |store| {
        let nodes = store.list_nodes()?;
        let mut state = match new_state(&policy, &nodes, &live, level, seed_of(&name)) {
            Ok(state) => state,
            Err(api) => return Ok(Err(api)),
        };
        let record = store.create_bucket_with(&name, warm, None, Some(policy), now_ms())?;
        // The bucket is new (its creation was exclusive): whatever state a bucket of that
        // name left behind is replaced.
        state.stored = store.get_record(GEOMETRIC, &name)?;
        save(store, &name, &mut state)?;
        Ok(Ok(record))
    })
    .await??;
    tracing::info!(bucket = %record.name, "geometric bucket created");
    Ok(record)
}

fn seed_of(bucket: &str) -> u64 {
    u64::from(pg_of(bucket, "", u32::MAX)) << 32 | u64::from(pg_of("", bucket, u32::MAX))
}

/// The bucket's policy, or 409 `not_geometric`.
fn geometric_policy(bucket: &BucketRecord) -> Result<GeometricPolicy, ApiError> {
    bucket.geometric.ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "not_geometric",
            format!(
                "bucket {:?} is not a geometric bucket (weft bucket create NAME --layout \
                 geometric)",
                bucket.name
            ),
        )
    })
}

/// The state of a geometric bucket, made now when missing.
fn state_of(
    store: &dyn MetaStore,
    bucket: &str,
    policy: &GeometricPolicy,
    nodes: &[NodeRecord],
    live: &Liveness,
    level: FailureDomain,
) -> Result<Result<GeoState, ApiError>, MetaError> {
    if let Some(state) = load(store, bucket)? {
        return Ok(Ok(state));
    }
    let mut state = match new_state(policy, nodes, live, level, seed_of(bucket)) {
        Ok(state) => state,
        Err(api) => return Ok(Err(api)),
    };
    match save(store, bucket, &mut state) {
        Ok(()) => Ok(Ok(state)),
        // Another meta made the bucket's state first: it is that one.
        Err(MetaError::RecordChanged { .. }) => match load(store, bucket)? {
            Some(made) => Ok(Ok(made)),
            None => {
                Err(MetaError::RecordChanged { namespace: GEOMETRIC.into(), name: bucket.into() })
            }
        },
        Err(error) => Err(error),
    }
}

/// Why a disk cannot take new chunks now, or None.
fn unusable(
    nodes: &BTreeMap<u32, &NodeRecord>,
    disk: DiskLocation,
    live: &Liveness,
) -> Option<String> {
    let Some(node) = nodes.get(&disk.node) else {
        return Some(format!("node {} is unknown", disk.node));
    };
    if live.is_down(node) {
        return Some(format!("node {} is down", disk.node));
    }
    match node.disks.iter().find(|d| d.index == disk.disk) {
        None => Some(format!("disk {}/{} is not reported", disk.node, disk.disk)),
        Some(d) if d.failed.is_some() => Some(format!("disk {}/{} failed", disk.node, disk.disk)),
        Some(d) if d.state == weft_wire::DiskState::Full => {
            Some(format!("disk {}/{} is full", disk.node, disk.disk))
        }
        Some(_) => None,
    }
}

fn disk_json(disk: &DiskLocation) -> Value {
    json!({ "node": disk.node, "disk": disk.disk })
}

/// Where the repair of a unit of bin stripe `stripe` (an object of [`GEOMETRIC_BUCKET`])
/// now on `current` goes: back to `current` when `in_place` (only damaged, its disk healthy).
/// Else the group first gets a disk replacing `current` as its member — chosen once per
/// (group, disk) and kept in the bucket's state; new stripes use it. A data block with an
/// owner tag (one packed object's) then goes to the usable disk outside the group's and the
/// stripe's failure domains that ranks first for that tag (rendezvous hashing): every chunk
/// of one object lands on one disk, and the objects of a failed disk spread over every
/// eligible disk, so their recovery writes do too. Parity blocks and blocks with no owner
/// go to the group's replacement. None when the stripe is not a known group's (the generic
/// choice applies), or no disk outside the group's failure domains is usable. The caller
/// holds `Meta::geometric`.
pub(crate) fn repair_destination(
    store: &dyn MetaStore,
    stripe: &ObjectRecord,
    current: DiskLocation,
    in_place: bool,
    nodes: &[NodeRecord],
    live: &Liveness,
) -> Result<Option<DiskLocation>, MetaError> {
    if in_place {
        return Ok(Some(current));
    }
    let mut parts = stripe.key.split('/');
    let (Some(bucket), Some(pg)) =
        (parts.next(), parts.next().and_then(|p| p.parse::<usize>().ok()))
    else {
        return Ok(None);
    };
    let Some(mut state) = load(store, bucket)? else { return Ok(None) };
    let Some(group) = state.pgs.get_mut(pg) else { return Ok(None) };
    let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
    let level = stripe.placement.failure_domain();
    // The group's domains, the one being replaced left out; and the stripe's own units.
    let taken: std::collections::BTreeSet<weft_layout::DomainId> = group
        .members
        .iter()
        .copied()
        .chain(stripe.placement.units().map(|(_, d)| d))
        .filter(|d| *d != current)
        .map(|d| d.domain(level))
        .collect();
    let (disks, _) = topology_of(nodes, live);
    let owner = stripe
        .placement
        .units()
        .find(|(_, d)| *d == current)
        .and_then(|(unit, _)| match unit {
            weft_layout::UnitId::Data(x) => stripe.owners.get(x).copied(),
            _ => None,
        })
        .filter(|tag| *tag != 0);
    let spread = owner.and_then(|tag| {
        disks
            .iter()
            .filter(|d| !taken.contains(&d.domain(level)) && **d != current)
            .max_by_key(|d| pg_of(&format!("{}/{}", d.node, d.disk), &tag.to_string(), u32::MAX))
            .copied()
    });
    if let Some((_, to)) = group.replaced.iter().find(|(from, _)| *from == current) {
        if unusable(&by_id, *to, live).is_none() {
            return Ok(spread.or(Some(*to)));
        }
    }
    let chosen = disks
        .iter()
        .filter(|d| !taken.contains(&d.domain(level)) && **d != current)
        .min_by_key(|d| {
            let used = group.replaced.iter().filter(|(_, to)| to == *d).count();
            (used, pg_of(&format!("{}/{}", d.node, d.disk), &format!("{bucket}/{pg}"), u32::MAX))
        })
        .copied();
    let Some(to) = chosen else { return Ok(None) };
    group.replaced.retain(|(from, _)| *from != current);
    group.replaced.push((current, to));
    for member in group.members.iter_mut().filter(|m| **m == current) {
        *member = to;
    }
    save(store, bucket, &mut state)?;
    tracing::info!(bucket, pg, from = ?current, to = ?to, "placement group member replaced");
    Ok(spread.or(Some(to)))
}

/// `GET /v1/geometric/{bucket}`: the policy and the placement groups (members, their state,
/// bytes packed on each data member, stripes per bin).
pub(crate) async fn groups(
    State(meta): State<Shared>,
    Path(bucket): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let live = meta.liveness();
    let level = meta.failure_domain;
    let _lock = meta.geometric.lock().await;
    let (record, state, nodes) = blocking(&meta, move |store| {
        let record = store.get_bucket(&bucket)?;
        let policy = match geometric_policy(&record) {
            Ok(policy) => policy,
            Err(api) => return Ok(Err(api)),
        };
        let nodes = store.list_nodes()?;
        let state = match state_of(store, &bucket, &policy, &nodes, &live, level)? {
            Ok(state) => state,
            Err(api) => return Ok(Err(api)),
        };
        Ok(Ok((record, state, nodes)))
    })
    .await??;
    let policy = record.geometric.expect("checked");
    let live = meta.liveness();
    let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
    let k = policy.k();
    let pgs: Vec<Value> = state
        .pgs
        .iter()
        .enumerate()
        .map(|(pg, group)| {
            let members: Vec<Value> = group
                .members
                .iter()
                .enumerate()
                .map(|(i, disk)| {
                    let mut member = disk_json(disk);
                    member["role"] = json!(if i < k { "data" } else { "parity" });
                    member["state"] = json!(match unusable(&by_id, *disk, &live) {
                        None => "up".to_string(),
                        Some(why) => why,
                    });
                    if i < k {
                        member["bytes"] = json!(group.fill[i]);
                    }
                    member
                })
                .collect();
            json!({ "pg": pg, "members": members, "stripes": group.next })
        })
        .collect();
    Ok(Json(json!({
        "bucket": record.name,
        "policy": policy,
        "warm": record.default_policy,
        "failure_domain": level.to_string(),
        "pgs": pgs,
    })))
}

/// The body of a plan request.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    /// Most objects to take (≤ [`MAX_PLAN_OBJECTS`]).
    max_objects: Option<usize>,
    /// Most bytes of objects to take (at least one object is taken if any is due).
    max_bytes: Option<u64>,
    /// Only objects committed at least this long ago.
    #[serde(default)]
    min_age_ms: u64,
    /// Objects after this key only (the previous plan's `next_start_after`).
    start_after: Option<String>,
    /// Exactly these objects (a transition of one object), when given; at most
    /// [`MAX_PLAN_OBJECTS`].
    keys: Option<Vec<String>>,
}

/// One piece of a stripe's data block: `len` bytes of object `key` (generation) from
/// `object_offset`, at `block_offset` of the block.
#[derive(Debug, Clone, Serialize)]
struct Piece {
    key: String,
    generation: u64,
    object_offset: u64,
    len: u64,
    block_offset: u64,
}

/// A chunk (or front) waiting for its stripe: (object index, chunk index — `usize::MAX` for
/// the front —, object offset, bytes).
type Pending = (usize, usize, u64, u64);
/// A [`Pending`] piece with its offset in its block.
type Placed = (usize, usize, u64, u64, u64);

/// A stripe being planned: per data block, its member and its pieces.
struct PlannedStripe {
    pg: u32,
    class: Option<usize>,
    seq: u64,
    block_bytes: u64,
    blocks: Vec<(usize, Vec<Piece>)>,
}

/// An object being planned.
struct PlannedObject {
    key: String,
    generation: u64,
    place: GeoPlace,
}

/// `POST /v1/geometric/{bucket}/plan`: picks warm objects and plans their pack (see the
/// module's data flow). Answers `{"stripes": [...], "objects": [...], "deferred": [...],
/// "next_start_after"}`.
pub(crate) async fn plan(
    State(meta): State<Shared>,
    Path(bucket): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: PlanBody = if body.iter().all(u8::is_ascii_whitespace) {
        PlanBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body must be {{\"max_objects\", \"max_bytes\", \"min_age_ms\", \
                 \"start_after\"}} (all optional): {e}"
            ))
        })?
    };
    let max_objects = body.max_objects.unwrap_or(MAX_PLAN_OBJECTS).clamp(1, MAX_PLAN_OBJECTS);
    let max_bytes = body.max_bytes.unwrap_or(DEFAULT_PLAN_BYTES).max(1);
    let live = meta.liveness();
    let level = meta.failure_domain;
    let _lock = meta.geometric.lock().await;
    let planned = blocking(&meta, move |store| {
        let record = store.get_bucket(&bucket)?;
        let policy = match geometric_policy(&record) {
            Ok(policy) => policy,
            Err(api) => return Ok(Err(api)),
        };
        let nodes = store.list_nodes()?;
        let mut state = match state_of(store, &bucket, &policy, &nodes, &live, level)? {
            Ok(state) => state,
            Err(api) => return Ok(Err(api)),
        };
        if state.pgs.len() != policy.pgs as usize {
            return Err(corrupt(&bucket, format!("{} groups, the policy says {}", state.pgs.len(), policy.pgs)));
        }
        let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
        let now = now_ms();
        // Pick the objects.
        let mut picked: Vec<ObjectRecord> = Vec::new();
        let mut deferred: Vec<Value> = Vec::new();
        let mut bytes = 0u64;
        let mut after = body.start_after.clone();
        let mut next_start_after = None;
        let named = body.keys.is_some();
        let mut planned_chunks = 0usize;
        for key in body.keys.iter().flatten().take(MAX_PLAN_OBJECTS) {
            let object = store.get_object(&bucket, key)?;
            let chunks = policy.partition(object.size()).chunk_count();
            if chunks > MAX_CHUNKS_PER_OBJECT {
                deferred.push(json!({
                    "key": object.key,
                    "reason": format!("{chunks} chunks under this policy, more than {MAX_CHUNKS_PER_OBJECT}"),
                }));
            } else if !picked.is_empty() && planned_chunks + chunks + 1 > MAX_PLAN_CHUNKS {
                deferred.push(json!({
                    "key": object.key,
                    "reason": "this plan is full (its chunks); ask for it in another",
                }));
            } else if object.geometric.is_none() && object.raidp.is_none() {
                planned_chunks += chunks + 1;
                bytes = bytes.saturating_add(object.size());
                picked.push(object);
            }
        }
        'pages: loop {
            if named {
                break;
            }
            let page = store.list_objects(&bucket, "", after.as_deref(), MAX_LIST_LIMIT)?;
            for object in page.objects {
                after = Some(object.key.clone());
                if object.geometric.is_some() || object.raidp.is_some() {
                    continue;
                }
                if now.saturating_sub(object.created_ms) < body.min_age_ms {
                    continue;
                }
                let chunks = policy.partition(object.size()).chunk_count();
                if chunks > MAX_CHUNKS_PER_OBJECT {
                    deferred.push(json!({
                        "key": object.key,
                        "reason": format!("{chunks} chunks under this policy, more than {MAX_CHUNKS_PER_OBJECT}"),
                    }));
                    continue;
                }
                let full = picked.len() >= max_objects
                    || bytes >= max_bytes
                    || planned_chunks + chunks + 1 > MAX_PLAN_CHUNKS;
                if full && !picked.is_empty() {
                    // This object and those after it wait for the next plan.
                    next_start_after = picked.last().map(|o| o.key.clone());
                    break 'pages;
                }
                planned_chunks += chunks + 1;
                bytes = bytes.saturating_add(object.size());
                picked.push(object);
            }
            if page.next_start_after.is_none() {
                break;
            }
        }
        // Place them: group by hash, then its least-filled usable data member.
        let k = policy.k();
        let mut objects: Vec<PlannedObject> = Vec::new();
        // (pg, class) → member → chunks (object index, chunk index, span)
        let mut bins: BTreeMap<(u32, Option<usize>), BTreeMap<usize, Vec<Pending>>> =
            BTreeMap::new();
        for object in &picked {
            let pg = pg_of(&bucket, &object.key, policy.pgs);
            let group = &state.pgs[pg as usize];
            let parity_down: Vec<String> = group.members[k..]
                .iter()
                .filter_map(|d| unusable(&by_id, *d, &live))
                .collect();
            if !parity_down.is_empty() {
                deferred.push(json!({
                    "key": object.key,
                    "reason": format!("placement group {pg}: a parity disk is unusable ({})", parity_down.join("; ")),
                }));
                continue;
            }
            let member = (0..k)
                .filter(|&m| unusable(&by_id, group.members[m], &live).is_none())
                .min_by_key(|&m| (group.fill[m], m));
            let Some(member) = member else {
                deferred.push(json!({
                    "key": object.key,
                    "reason": format!("placement group {pg}: no data disk is usable"),
                }));
                continue;
            };
            state.pgs[pg as usize].fill[member] += object.size();
            let partition = policy.partition(object.size());
            let index = objects.len();
            if partition.front > 0 {
                bins.entry((pg, None)).or_default().entry(member).or_default().push((
                    index,
                    usize::MAX,
                    0,
                    partition.front,
                ));
            }
            for (i, span) in partition.chunks().iter().enumerate() {
                bins.entry((pg, Some(span.class))).or_default().entry(member).or_default().push(
                    (index, i, span.object_offset, span.bytes),
                );
            }
            objects.push(PlannedObject {
                key: object.key.clone(),
                generation: object.generation,
                place: GeoPlace {
                    pg,
                    member: member as u32,
                    size: object.size(),
                    crc32c: 0,
                    front: None,
                    chunks: vec![ChunkRef { stripe: 0, block: 0 }; partition.chunk_count()],
                },
            });
        }
        // Form the stripes: round j takes the j-th chunk (or region of fronts) of each member.
        let small_multiple = policy
            .small_code
            .build()
            .map(|c| c.unit_len_multiple() as u64)
            .map_err(|e| corrupt(&bucket, e))?;
        let mut stripes: Vec<PlannedStripe> = Vec::new();
        for ((pg, class), members) in bins {
            // Per member, its pieces cut into rounds (one chunk per round for chunk bins,
            // regions of up to SMALL_REGION_BYTES for the small bin).
            let mut rounds: BTreeMap<usize, Vec<Vec<Placed>>> = BTreeMap::new();
            for (member, pieces) in members {
                let mut cut: Vec<Vec<Placed>> = Vec::new();
                let mut used = SMALL_REGION_BYTES;
                for (object, chunk, offset, len) in pieces {
                    if class.is_some() || used + len > SMALL_REGION_BYTES {
                        cut.push(Vec::new());
                        used = 0;
                    }
                    cut.last_mut().expect("pushed").push((object, chunk, offset, len, used));
                    used += len;
                }
                rounds.insert(member, cut);
            }
            let depth = rounds.values().map(Vec::len).max().unwrap_or(0);
            for j in 0..depth {
                let blocks: Vec<(usize, Vec<Placed>)> = rounds
                    .iter()
                    .filter_map(|(member, cut)| cut.get(j).map(|r| (*member, r.clone())))
                    .collect();
                // A region is as long as its longest member's, rounded up to the code's unit
                // multiple (a chunk already is one).
                let multiple = match class {
                    Some(_) => 1,
                    None => small_multiple,
                };
                let block_bytes = blocks
                    .iter()
                    .map(|(_, r)| r.iter().map(|p| p.4 + p.3).max().unwrap_or(0))
                    .max()
                    .unwrap_or(0)
                    .max(1)
                    .div_ceil(multiple)
                    * multiple;
                let group = &mut state.pgs[pg as usize];
                let next = group.next.entry(bin_name(class)).or_insert(0);
                let seq = *next;
                *next += 1;
                let mut planned =
                    PlannedStripe { pg, class, seq, block_bytes, blocks: Vec::new() };
                for (x, (member, pieces)) in blocks.into_iter().enumerate() {
                    let mut out = Vec::new();
                    for (object, chunk, offset, len, at) in pieces {
                        let place = &mut objects[object].place;
                        if chunk == usize::MAX {
                            place.front = Some(FrontRef { stripe: seq, block: x as u32, offset: at });
                        } else {
                            place.chunks[chunk] = ChunkRef { stripe: seq, block: x as u32 };
                        }
                        out.push(Piece {
                            key: objects[object].key.clone(),
                            generation: objects[object].generation,
                            object_offset: offset,
                            len,
                            block_offset: at,
                        });
                    }
                    planned.blocks.push((member, out));
                }
                stripes.push(planned);
            }
        }
        // Begin each stripe as a write of the internal bucket.
        match store.get_bucket(GEOMETRIC_BUCKET) {
            Ok(_) => {}
            Err(MetaError::NoSuchBucket { .. }) => {
                match store.create_bucket(GEOMETRIC_BUCKET, record.default_policy, now) {
                    Ok(_) | Err(MetaError::BucketExists { .. }) => {}
                    Err(other) => return Err(other),
                }
            }
            Err(other) => return Err(other),
        }
        let mut answers = Vec::new();
        for stripe in &stripes {
            let group = &state.pgs[stripe.pg as usize];
            let code = if stripe.class.is_some() { policy.code } else { policy.small_code };
            let layout = StripedLayout {
                code,
                stripe_width: k,
                cell_bytes: stripe.block_bytes,
                block_bytes: stripe.block_bytes,
            };
            let data: Vec<DiskLocation> =
                stripe.blocks.iter().map(|(member, _)| group.members[*member]).collect();
            let size = stripe.block_bytes * data.len() as u64;
            let placement = Placement::from_parts(
                layout,
                size,
                level,
                0,
                data,
                group.members[k..].to_vec(),
            )
            .map_err(|e| corrupt(&bucket, format!("stripe placement: {e}")))?;
            let key = stripe_key(&bucket, stripe.pg, stripe.class, stripe.seq);
            let write = store.begin_object(GEOMETRIC_BUCKET, &key, placement, now)?;
            answers.push((key, write));
        }
        // Saved last: a plan that failed hands out nothing (its begun writes expire).
        save(store, &bucket, &mut state)?;
        Ok(Ok((stripes, answers, objects, deferred, next_start_after, nodes, policy)))
    })
    .await??;
    let (stripes, answers, objects, deferred, next_start_after, nodes, policy) = planned;
    let stripes: Vec<Value> = stripes
        .iter()
        .zip(&answers)
        .map(|(stripe, (key, write))| {
            let units = units_json(write, &nodes, None)?;
            Ok(json!({
                "key": key,
                "pg": stripe.pg,
                "bin": bin_name(stripe.class),
                "seq": stripe.seq,
                "block_bytes": stripe.block_bytes,
                "object": object_json(write, units),
                "blocks": stripe.blocks.iter().map(|(_, pieces)| json!(pieces)).collect::<Vec<_>>(),
            }))
        })
        .collect::<Result<_, ApiError>>()?;
    let objects: Vec<Value> = objects
        .iter()
        .map(|o| json!({ "key": o.key, "generation": o.generation, "size": o.place.size, "place": o.place }))
        .collect();
    tracing::info!(stripes = stripes.len(), objects = objects.len(), "pack planned");
    Ok(Json(json!({
        "policy": policy,
        "stripe_bucket": GEOMETRIC_BUCKET,
        "stripes": stripes,
        "objects": objects,
        "deferred": deferred,
        "next_start_after": next_start_after,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitStripe {
    key: String,
    generation: u64,
    #[serde(default)]
    digests: BTreeMap<String, weft_wire::UnitDigest>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitObject {
    key: String,
    generation: u64,
    place: GeoPlace,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    stripes: Vec<CommitStripe>,
    objects: Vec<CommitObject>,
}

/// `POST /v1/geometric/{bucket}/commit`: commits a plan's stripes and swaps its objects, in
/// one transaction. Answers `{"packed": [{"key", "replaced": <warm object>}], "skipped":
/// [{"key", "reason"}]}`; the caller deletes the replaced units.
pub(crate) async fn commit(
    State(meta): State<Shared>,
    Path(bucket): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: CommitBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"stripes\": [{{\"key\", \"generation\", \"digests\"}}], \
             \"objects\": [{{\"key\", \"generation\", \"place\"}}]}}: {e}"
        ))
    })?;
    let mut stripes = Vec::with_capacity(body.stripes.len());
    for stripe in body.stripes {
        if !stripe.key.starts_with(&format!("{bucket}/")) {
            return Err(ApiError::bad_request(format!(
                "stripe {:?} is not one of bucket {bucket:?}",
                stripe.key
            )));
        }
        stripes.push(StripeCommit {
            key: stripe.key,
            generation: stripe.generation,
            digests: super::objects::digests_by_unit(stripe.digests)?,
            owners: Vec::new(),
        });
    }
    let wanted = bucket.clone();
    let record = blocking(&meta, move |store| store.get_bucket(&wanted)).await?;
    let policy = geometric_policy(&record)?;
    let mut objects = Vec::with_capacity(body.objects.len());
    let mut owners: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for object in body.objects {
        let place = &object.place;
        let partition = policy.partition(place.size);
        let problem = if place.pg >= policy.pgs {
            Some(format!("placement group {} of {}", place.pg, policy.pgs))
        } else if place.member as usize >= policy.k() {
            Some(format!("data member {} of {}", place.member, policy.k()))
        } else if place.chunks.len() != partition.chunk_count() {
            Some(format!(
                "{} chunks where the partition has {}",
                place.chunks.len(),
                partition.chunk_count()
            ))
        } else if place.front.is_some() != (partition.front > 0) {
            Some("a front where the partition has none, or none where it has one".into())
        } else if place.pg != pg_of(&bucket, &object.key, policy.pgs) {
            Some(format!("placement group {} is not the key's", place.pg))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(ApiError::bad_request(format!("object {:?}: {problem}", object.key)));
        }
        // Each block the object's chunks and front sit in is tagged with it (a block of
        // several objects' fronts with no one).
        let tag = owner_tag(&bucket, &object.key);
        let front = place.front.map(|f| (None, f.stripe, f.block));
        let chunks = partition.chunks();
        let blocks =
            place.chunks.iter().zip(&chunks).map(|(c, span)| (Some(span.class), c.stripe, c.block));
        for (class, seq, block) in front.into_iter().chain(blocks) {
            let key = stripe_key(&bucket, place.pg, class, seq);
            let tags = owners.entry(key).or_insert_with(|| vec![0; policy.k()]);
            if let Some(slot) = tags.get_mut(block as usize) {
                *slot = if *slot == 0 || *slot == tag { tag } else { SHARED_BLOCK };
            }
        }
        objects.push(PackedObject {
            key: object.key,
            generation: object.generation,
            place: object.place.encode(),
        });
    }
    for stripe in &mut stripes {
        if let Some(tags) = owners.remove(&stripe.key) {
            let mut tags: Vec<u32> =
                tags.into_iter().map(|t| if t == SHARED_BLOCK { 0 } else { t }).collect();
            while tags.last() == Some(&0) {
                tags.pop();
            }
            stripe.owners = tags;
        }
    }
    for object in &objects {
        meta.changes.note(&bucket, &object.key);
    }
    for stripe in &stripes {
        meta.changes.note(GEOMETRIC_BUCKET, &stripe.key);
    }
    let (outcome, nodes) = blocking(&meta, move |store| {
        let outcome = store.commit_pack(GEOMETRIC_BUCKET, &stripes, &bucket, &objects)?;
        Ok((outcome, store.list_nodes()?))
    })
    .await?;
    let packed: Vec<Value> = outcome
        .packed
        .iter()
        .map(|old| {
            Ok(json!({ "key": old.key, "replaced": object_json(old, units_json(old, &nodes, None)?) }))
        })
        .collect::<Result<_, ApiError>>()?;
    let skipped: Vec<Value> =
        outcome.skipped.iter().map(|(key, why)| json!({ "key": key, "reason": why })).collect();
    tracing::info!(packed = packed.len(), skipped = skipped.len(), "pack committed");
    Ok(Json(json!({ "packed": packed, "skipped": skipped })))
}

/// The geometric fields of a packed object's reply: `front_bytes`, `chunks` (bin, bytes,
/// disk, in object order), `layout_bytes` (its compact record), and under `geometric` the
/// stripes a reader needs (their units, like any object's).
pub(crate) fn object_fields(
    store: &dyn MetaStore,
    record: &ObjectRecord,
    nodes: &[NodeRecord],
    live: Option<&Liveness>,
    value: &mut Value,
) -> Result<(), MetaError> {
    let Some(bytes) = &record.geometric else { return Ok(()) };
    let bucket = store.get_bucket(&record.bucket)?;
    let Some(policy) = bucket.geometric else {
        return Err(MetaError::Corrupt {
            table: "objects",
            key: format!("{}/{}", record.bucket, record.key),
            reason: "a packed object in a bucket that is not geometric".into(),
        });
    };
    let place = GeoPlace::decode(bytes, &policy).map_err(|reason| MetaError::Corrupt {
        table: "objects",
        key: format!("{}/{}", record.bucket, record.key),
        reason,
    })?;
    let partition = policy.partition(place.size);
    let mut stripes = BTreeMap::new();
    let mut stripe_json = |class: Option<usize>, seq: u64| -> Result<String, MetaError> {
        let key = stripe_key(&record.bucket, place.pg, class, seq);
        if !stripes.contains_key(&key) {
            let stripe = store.get_object(GEOMETRIC_BUCKET, &key)?;
            let units = units_json(&stripe, nodes, live).map_err(|e| MetaError::Corrupt {
                table: "objects",
                key: key.clone(),
                reason: e.body.to_string(),
            })?;
            stripes.insert(key.clone(), (object_json(&stripe, units), stripe));
        }
        Ok(key)
    };
    let mut chunks = Vec::new();
    let mut front = Value::Null;
    if let Some(f) = &place.front {
        let key = stripe_json(None, f.stripe)?;
        front = json!({ "stripe": key, "block": f.block, "offset": f.offset, "bytes": partition.front });
    }
    for (chunk, span) in place.chunks.iter().zip(partition.chunks()) {
        let key = stripe_json(Some(span.class), chunk.stripe)?;
        chunks.push((key, chunk.block, span));
    }
    let disk_of = |key: &str, block: u32| -> Value {
        stripes
            .get(key)
            .and_then(|(_, s)| s.placement.disk_of(weft_layout::UnitId::Data(block as usize)))
            .map_or(Value::Null, |d| disk_json(&d))
    };
    value["front_bytes"] = json!(partition.front);
    value["chunks"] = json!(chunks
        .iter()
        .map(|(key, block, span)| json!({
            "bin": span.class,
            "bytes": span.bytes,
            "disk": disk_of(key, *block),
            "stripe": key,
            "block": block,
            "object_offset": span.object_offset,
        }))
        .collect::<Vec<_>>());
    value["layout_bytes"] = json!(bytes.len());
    let member_disk = front
        .get("stripe")
        .and_then(Value::as_str)
        .map(|key| disk_of(key, place.front.as_ref().map_or(0, |f| f.block)))
        .or_else(|| chunks.first().map(|(key, block, _)| disk_of(key, *block)))
        .unwrap_or(Value::Null);
    value["geometric"] = json!({
        "policy": policy,
        "pg": place.pg,
        "member": place.member,
        "disk": member_disk,
        "crc32c": place.crc32c,
        "front": front,
        "stripes": stripes.into_iter().map(|(k, (json, _))| (k, json)).collect::<BTreeMap<_, _>>(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DELETIONS;
    use crate::MemStore;

    const MIB: u64 = 1 << 20;

    fn layout() -> StripedLayout {
        StripedLayout {
            code: CodeSpec::parse("rs(2,1)").unwrap(),
            stripe_width: 2,
            cell_bytes: MIB,
            block_bytes: MIB,
        }
    }

    /// Commits a stripe object `key` of the internal bucket; answers its unit count.
    fn stripe(store: &dyn MetaStore, key: &str, seed: u64) -> usize {
        let disks = (0..6).map(|node| DiskLocation { rack: node, node, disk: 0 }).collect();
        let topology = Topology::new(disks).unwrap();
        let placement =
            weft_layout::place(&layout(), 2 * MIB, &topology, seed, FailureDomain::Node).unwrap();
        let write = store.begin_object(GEOMETRIC_BUCKET, key, placement, 1).unwrap();
        store.commit_object(GEOMETRIC_BUCKET, key, write.generation, &Default::default()).unwrap();
        write.placement.units().count()
    }

    fn queued(store: &dyn MetaStore) -> usize {
        store.list_records(DELETIONS, "", None, MAX_LIST_LIMIT).unwrap().len()
    }

    /// A deleted geometric bucket's stripes go, a bounded number per call, each one's units
    /// onto the deletions queue; another bucket's stripes (even one whose name begins the
    /// same) stay; the state record goes with the last; a live bucket's are never touched.
    #[test]
    fn a_deleted_buckets_stripes_are_dropped_in_bounded_steps() {
        let store = MemStore::new();
        store.create_bucket(GEOMETRIC_BUCKET, layout(), 0).unwrap();
        store.create_bucket("cold", layout(), 0).unwrap();
        store.put_record(GEOMETRIC, "cold", &json!({}), false).unwrap();
        let mut units = 0;
        for seq in 0..3 {
            units += stripe(&store, &stripe_key("cold", 0, Some(seq), 0), seq as u64);
        }
        stripe(&store, &stripe_key("cold2", 0, None, 0), 9);
        // The bucket still exists: nothing is dead.
        assert_eq!(drop_stripes(&store, "cold", 10).unwrap(), (0, false));
        assert_eq!(drop_deleted_buckets_stripes(&store).unwrap(), 0);
        store.delete_bucket("cold").unwrap();
        assert_eq!(drop_stripes(&store, "cold", 2).unwrap(), (2, false));
        assert!(store.get_record(GEOMETRIC, "cold").unwrap().is_some(), "work left, marked");
        // The detector's tick finishes it.
        assert_eq!(drop_deleted_buckets_stripes(&store).unwrap(), 1);
        assert!(store.get_record(GEOMETRIC, "cold").unwrap().is_none());
        let left = store.list_objects(GEOMETRIC_BUCKET, "", None, MAX_LIST_LIMIT).unwrap();
        let keys: Vec<&str> = left.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, vec![stripe_key("cold2", 0, None, 0)]);
        assert_eq!(queued(&store), units, "every unit of the dropped stripes queued");
        assert_eq!(drop_deleted_buckets_stripes(&store).unwrap(), 0);
    }
}
