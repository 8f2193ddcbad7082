//! The object routes of the meta service: begin / commit a write, read, list and delete
//! objects. Routes, bodies and statuses: docs/meta-api.md ("Objects").
//!
//! Invariants:
//! - Placement uses only nodes that are up at the time of `begin`, and only their disks that
//!   are neither failed nor full (a full disk is read-only: it keeps its units, which stay
//!   readable and repair sources, but takes no new one); a placement that fails for want of
//!   disks with space answers `507 disks_full`, not `too_few_nodes`; a node is in the rack
//!   its heartbeats name, else in a rack of its own (`NodeRecord::rack_id`), and the failure
//!   domain is meta's configured level.
//! - Successive writes take successive turns of the placement round-robin
//!   (`weft_layout::seed_for_turn`): their first units start on successive domains, so even a
//!   few hundred objects of one shape load every disk alike.
//! - The object id of a write is its generation widened to u128 (generations are unique
//!   store-wide and never reused), so unit keys of two writes never collide. Unit keys are
//!   `UnitKey::data(object_id, block, 0)` and `UnitKey::parity(object_id, group, index,
//!   parity_generation)` (0 until a transition commits, then its id: see `unit_key`).
//! - Every store call runs on a blocking task (see `blocking`).
//! - `GET` of an object names its unfound units; `GET` of a key whose object was marked lost
//!   answers `410 object_lost`, and `DELETE` of the key forgets that (see `lost`).
//! - Whether a node is up is `Liveness::is_down`, the one judgement (see `liveness`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use axum::{
    body::Bytes,
    extract::{Path, Query, State},
    http::StatusCode,
    Json,
};
use serde::Deserialize;
use serde_json::{json, Value};
use weft_layout::{
    place, seed_for_turn, DiskLocation, FailureDomain, LayoutError, Topology, UnitId,
};
use weft_store::UnitKey;

use super::digest_pages;
use super::liveness::Liveness;
use super::{blocking, node_state, now_ms, ApiError, Shared};
use crate::{unit_name, MetaError, NodeRecord, ObjectRecord, Policy};
use weft_wire::DiskState;

/// Suffix of the path that begins a write.
const BEGIN: &str = "/begin";
/// Suffix of the path that commits a write.
const COMMIT: &str = "/commit";
/// Suffix of the path that sends a page of a write's digests ahead of its commit.
const DIGESTS: &str = "/digests";
/// Suffix of the path that abandons a write in progress (its writer failed).
const ABORT: &str = "/abort";

/// The object id of the write of `generation` (see the module invariants).
pub(crate) fn object_id(generation: u64) -> u128 {
    u128::from(generation)
}

/// FNV-1a of the bytes: the placement seed of a write. Stored with the placement, so it need
/// only spread objects, not be reproducible from its inputs.
fn seed_of(bucket: &str, key: &str, now_ms: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes =
        bucket.bytes().chain([0u8]).chain(key.bytes()).chain([0u8]).chain(now_ms.to_le_bytes());
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The key of `unit` of the object of id `object` whose parity units have unit generation
/// `parity_generation` (data units always have generation 0).
pub(crate) fn unit_key(
    object: u128,
    unit: UnitId,
    parity_generation: u64,
) -> Result<UnitKey, ApiError> {
    let too_big =
        || ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "unit index out of range");
    Ok(match unit {
        UnitId::Data(x) => UnitKey::data(object, u32::try_from(x).map_err(|_| too_big())?, 0),
        UnitId::Parity { group, index } => UnitKey::parity(
            object,
            u32::try_from(group).map_err(|_| too_big())?,
            u16::try_from(index).map_err(|_| too_big())?,
            parity_generation,
        ),
    })
}

/// The key of `unit` of `record` (see [`unit_key`]).
pub(crate) fn record_unit_key(record: &ObjectRecord, unit: UnitId) -> Result<UnitKey, ApiError> {
    unit_key(object_id(record.generation), unit, record.parity_generation)
}

/// `{"unit","node_id","endpoint","disk","unit_key","len"}` of one unit on `disk`.
/// One unit as meta's replies show it; `"digest"` (last) only when the object has digests.
pub(crate) fn unit_json(
    nodes: &BTreeMap<u32, &NodeRecord>,
    unit: UnitId,
    disk: DiskLocation,
    key: UnitKey,
    len: u64,
    digest: Option<&weft_wire::UnitDigest>,
) -> Value {
    let mut value = json!({
        "unit": unit_name(unit),
        "node_id": disk.node,
        "endpoint": nodes.get(&disk.node).map(|n| n.endpoint.clone()),
        "disk": disk.disk,
        "unit_key": key.to_string(),
        "len": len,
    });
    if let Some(digest) = digest {
        value["digest"] = json!(digest);
    }
    value
}

/// Most units one object reply lists: an object with more is answered with its first units,
/// its placement pattern and its nodes (clients compute the rest), and pages of units on
/// request (`GET ...?units_from=N&units_limit=M`). Keeps every reply's size bounded whatever
/// the object's size.
pub const MAX_LISTED_UNITS: usize = 4096;

/// A page of an object's unit list ([`units_json`]).
pub(crate) struct UnitsPage {
    /// Index (in [`weft_layout::Placement::units`] order) of the first unit listed.
    from: usize,
    list: Vec<Value>,
    /// Node id → endpoint and state, of every node the placement uses; kept only when the
    /// list leaves units out.
    nodes: BTreeMap<u32, Value>,
}

/// The first page of an object's unit list; with `states`, each unit also says whether its
/// node is up.
pub(crate) fn units_json(
    record: &ObjectRecord,
    nodes: &[NodeRecord],
    states: Option<&Liveness>,
) -> Result<UnitsPage, ApiError> {
    units_page_json(record, nodes, states, 0, MAX_LISTED_UNITS)
}

/// Units `from..from + limit` (at most [`MAX_LISTED_UNITS`]) of an object's unit list.
pub(crate) fn units_page_json(
    record: &ObjectRecord,
    nodes: &[NodeRecord],
    states: Option<&Liveness>,
    from: usize,
    limit: usize,
) -> Result<UnitsPage, ApiError> {
    let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
    let layout = record.layout();
    let size = record.size();
    let state = |node: u32| {
        let live = states?;
        Some(by_id.get(&node).map_or("unknown", |n| node_state(n, live)))
    };
    let list = record
        .placement
        .units()
        .skip(from)
        .take(limit.min(MAX_LISTED_UNITS))
        .map(|(unit, disk)| {
            let key = record_unit_key(record, unit)?;
            let len = layout.stored_len(size, unit);
            let mut value = unit_json(&by_id, unit, disk, key, len, record.digests.get(&unit));
            if let Some(state) = state(disk.node) {
                value["state"] = json!(state);
            }
            Ok(value)
        })
        .collect::<Result<Vec<Value>, ApiError>>()?;
    let mut used = BTreeMap::new();
    if from > 0 || list.len() < record.placement.unit_count() {
        let (_, data, parity, moved) = record.placement.pattern();
        for disk in data.iter().chain(parity).chain(moved.values()) {
            used.entry(disk.node).or_insert_with(|| {
                let endpoint = by_id.get(&disk.node).map(|n| n.endpoint.clone());
                let mut node = json!({ "endpoint": endpoint });
                if let Some(state) = state(disk.node) {
                    node["state"] = json!(state);
                }
                node
            });
        }
    }
    Ok(UnitsPage { from, list, nodes: used })
}

/// An object as meta's replies show it. When `units` leaves units out, the reply also has
/// `units_from`, `units_next` (null after the last page), `placement` (the pattern: see
/// [`weft_layout::Placement`]), `nodes` (id → endpoint, state) and `digests` (whether units
/// have digests, fetched by pages), so a client can name every unit without a list of them.
pub(crate) fn object_json(record: &ObjectRecord, units: UnitsPage) -> Value {
    let total = record.placement.unit_count();
    let listed = units.list.len();
    let mut value = json!({
        "bucket": record.bucket,
        "key": record.key,
        "generation": record.generation,
        "parity_generation": record.parity_generation,
        "object_id": format!("{:032x}", object_id(record.generation)),
        "state": match record.state {
            crate::ObjectState::Writing => "writing",
            crate::ObjectState::Committed => "committed",
        },
        "created_ms": record.created_ms,
        "layout": record.layout(),
        "size": record.size(),
        "metadata_bytes": crate::metadata_bytes(record),
        "units_total": total,
        "units": units.list,
    });
    if let Some(attributes) = &record.attributes {
        value["attributes"] = attributes.clone();
    }
    // S3 versioning: a version written with versioning enabled names its id (routes that
    // know the bucket is versioned add `"version_id": "null"` for the others).
    if record.versioned {
        value["version_id"] = json!(record.version_id());
    }
    if record.delete_marker {
        value["delete_marker"] = json!(true);
    }
    if !record.lock.is_none() {
        value["lock"] = json!(record.lock);
    }
    if let Some(extents) = &record.raidp {
        // The record's own facts; replies that know the map add slots and replicas.
        value["raidp"] = json!({ "extents": extents });
    }
    if record.geometric.is_some() {
        // Packed: no units of its own; a GET adds where its bytes are (see `geometric`).
        value["packed"] = json!(true);
    }
    if units.from > 0 || listed < total {
        let next = units.from + listed;
        value["units_from"] = json!(units.from);
        value["units_next"] = json!((next < total).then_some(next));
        value["placement"] = json!(record.placement);
        value["nodes"] = json!(units.nodes);
        value["digests"] = json!(!record.digests.is_empty());
    }
    value
}

/// How messages name the failure domains of `level`: "failure domains (racks)".
pub(crate) fn domains_name(level: FailureDomain) -> String {
    format!("failure domains ({level}s)")
}

/// The disks placement may use: every disk neither failed nor full of every node that is up;
/// and how many nodes are up.
pub(crate) fn topology_of(nodes: &[NodeRecord], live: &Liveness) -> (Vec<DiskLocation>, usize) {
    let up: Vec<&NodeRecord> = nodes.iter().filter(|n| !live.is_down(n)).collect();
    let disks = up
        .iter()
        .flat_map(|n| {
            n.disks
                .iter()
                .filter(|d| d.failed.is_none() && d.state != DiskState::Full)
                .map(|d| n.disk_location(d.index))
        })
        .collect();
    (disks, up.len())
}

/// The full (read-only) disks of the nodes that are up, failed ones left out.
pub(crate) fn full_disks_of(nodes: &[NodeRecord], live: &Liveness) -> Vec<DiskLocation> {
    nodes
        .iter()
        .filter(|n| !live.is_down(n))
        .flat_map(|n| {
            n.disks
                .iter()
                .filter(|d| d.failed.is_none() && d.state == DiskState::Full)
                .map(|d| n.disk_location(d.index))
        })
        .collect()
}

/// The error of a placement that found `available` failure domains with usable disks where
/// it needs `needed`: `507 disks_full` when the `full` disks of up nodes would have made up
/// the difference (so the cause is space, not nodes), else `503 too_few_nodes` (with
/// `full_disks` counted).
pub(crate) fn too_few_or_full(
    level: FailureDomain,
    nodes_up: usize,
    usable: &[DiskLocation],
    full: &[DiskLocation],
    available: usize,
    needed: usize,
) -> ApiError {
    let usable_nodes = usable.iter().map(|d| d.node).collect::<BTreeSet<u32>>().len();
    let with_full: BTreeSet<_> = usable.iter().chain(full).map(|d| d.domain(level)).collect();
    if full.is_empty() || with_full.len() < needed {
        let mut error = too_few_nodes(level, nodes_up, usable_nodes, available, needed);
        error.body["full_disks"] = json!(full.len());
        return error;
    }
    let domains = domains_name(level);
    let names: Vec<String> = full.iter().map(|d| format!("{}/{}", d.node, d.disk)).collect();
    let mut error = ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "disks_full",
        format!(
            "{} disks of up nodes are full (read-only: at or above their node's full ratio, \
             or out of space): {}; the disks with space span {available} {domains} but the \
             policy needs {needed}. Free space or add disks, or use a smaller code or stripe \
             width",
            full.len(),
            names.join(", ")
        ),
    );
    error.body["full_disks"] = json!(names);
    error.body["nodes_up"] = json!(nodes_up);
    error.body["usable_nodes"] = json!(usable_nodes);
    error.body["failure_domain"] = json!(level.to_string());
    error.body["usable_domains"] = json!(available);
    error.body["needed"] = json!(needed);
    error
}

/// `503 too_few_nodes`: the up nodes' usable disks span `usable_domains` failure domains
/// of `level`, fewer than the `needed` the policy asks for.
pub(crate) fn too_few_nodes(
    level: FailureDomain,
    nodes_up: usize,
    usable_nodes: usize,
    usable_domains: usize,
    needed: usize,
) -> ApiError {
    let domains = domains_name(level);
    let more = match level {
        FailureDomain::Disk => "start more nodes or give them more disks",
        FailureDomain::Node => "start more nodes",
        FailureDomain::Rack => "start nodes in more racks (weft serve node --rack)",
    };
    let mut error = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_few_nodes",
        format!(
            "{nodes_up} nodes are up ({usable_nodes} with a usable disk, in {usable_domains} \
             {domains}) but the policy needs {needed} distinct {domains}; {more}, or use a \
             smaller code or stripe width"
        ),
    );
    error.body["nodes_up"] = json!(nodes_up);
    error.body["usable_nodes"] = json!(usable_nodes);
    error.body["failure_domain"] = json!(level.to_string());
    error.body["usable_domains"] = json!(usable_domains);
    error.body["needed"] = json!(needed);
    error
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BeginBody {
    size: u64,
    #[serde(default)]
    policy: Option<Policy>,
    /// Nodes the client just failed to reach: placed on as if they were down (a client
    /// retrying a write need not wait for meta's down timeout).
    #[serde(default)]
    avoid_nodes: Vec<u32>,
    /// Store the object in the RAIDP tier whatever the bucket's policy (a transition into
    /// it); refused with a policy.
    #[serde(default)]
    raidp: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AbortBody {
    generation: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    generation: u64,
    /// The writer's digest of every unit by unit name (`d<x>`, `p<g>.<i>`), or none.
    #[serde(default)]
    digests: BTreeMap<String, weft_wire::UnitDigest>,
    /// Kept with the object, uninterpreted (a JSON object; see `ObjectRecord::attributes`).
    #[serde(default)]
    attributes: Option<Value>,
    /// Commit only if no object is committed under the key (`"absent"`) or the committed
    /// one has this generation (`{"generation": G}`); else 412 `precondition_failed`.
    #[serde(default, rename = "if")]
    precondition: Option<crate::Precondition>,
    /// S3 object lock of the new version (`{"retention": {"mode", "until_ms"}, "legal_hold"}`);
    /// absent: the bucket's default retention, if any.
    #[serde(default)]
    lock: Option<crate::ObjectLock>,
}

/// Digests named by unit name, by unit; a name that is no unit name is 400.
pub(crate) fn digests_by_unit(
    named: BTreeMap<String, weft_wire::UnitDigest>,
) -> Result<crate::Digests, ApiError> {
    named
        .into_iter()
        .map(|(name, digest)| match UnitId::parse_short_name(&name) {
            Some(unit) => Ok((unit, digest)),
            None => Err(ApiError::bad_request(format!(
                "digests are named by unit (d<x> or p<group>.<index>), not {name:?}"
            ))),
        })
        .collect()
}

/// `POST /v1/buckets/{bucket}/objects/{key}/begin` and `.../commit`.
pub(crate) async fn post_object(
    State(meta): State<Shared>,
    Path((bucket, rest)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    if let Some(key) = rest.strip_suffix(BEGIN).filter(|k| !k.is_empty()) {
        super::refuse_internal_change(&bucket, "write an object")?;
        begin(meta, bucket, key.to_string(), &body).await
    } else if let Some(key) = rest.strip_suffix(COMMIT).filter(|k| !k.is_empty()) {
        super::refuse_internal_change(&bucket, "commit an object")?;
        commit(meta, bucket, key.to_string(), &body).await
    } else if let Some(key) = rest.strip_suffix(DIGESTS).filter(|k| !k.is_empty()) {
        digests_page(meta, bucket, key.to_string(), &body).await
    } else if let Some(key) = rest.strip_suffix(ABORT).filter(|k| !k.is_empty()) {
        abort(meta, bucket, key.to_string(), &body).await
    } else {
        let mut error = ApiError::new(
            StatusCode::NOT_FOUND,
            "no_route",
            "POST to an object path must end in /begin, /digests, /commit or /abort",
        );
        error.body["path"] = json!(format!("/v1/buckets/{bucket}/objects/{rest}"));
        Err(error)
    }
}

async fn begin(
    meta: Shared,
    bucket: String,
    key: String,
    body: &[u8],
) -> Result<Json<Value>, ApiError> {
    let body: BeginBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"size\": bytes, \"policy\": optional layout, \"avoid_nodes\": optional [node ids]}}: {e}"
        ))
    })?;
    if let Some(policy) = &body.policy {
        super::check_policy(policy)?;
    }
    if body.raidp && body.policy.is_some() {
        return Err(ApiError::bad_request("give a policy or \"raidp\": true, not both"));
    }
    if body.policy.is_none() {
        let wanted = bucket.clone();
        let found = blocking(&meta, move |store| store.get_bucket(&wanted)).await?;
        if found.raidp.is_some() || body.raidp {
            let two_copies = Policy {
                code: weft_codes::CodeSpec::Rep { n: 2 },
                stripe_width: 1,
                ..found.default_policy
            };
            let layout = if found.raidp.is_some() { found.default_policy } else { two_copies };
            return begin_raidp(meta, bucket, key, layout, body).await;
        }
    }
    let (live, level) = (meta.liveness(), meta.failure_domain);
    let turn = meta.placement_turn.fetch_add(1, Ordering::Relaxed);
    let (record, nodes) = blocking(&meta, move |store| {
        let default = store.get_bucket(&bucket)?.default_policy;
        let nodes = store.list_nodes()?;
        // A small object gets the layout that spreads it over k blocks (weft-layout's
        // `fitted`): the client writes, and readers read, the layout recorded here.
        let layout = body.policy.unwrap_or(default).fitted(body.size);
        let now = now_ms();
        let (mut disks, nodes_up) = topology_of(&nodes, &live);
        disks.retain(|d| !body.avoid_nodes.contains(&d.node));
        let mut full = full_disks_of(&nodes, &live);
        full.retain(|d| !body.avoid_nodes.contains(&d.node));
        let needed = layout.n().max(layout.stripe_width);
        let usable = disks.iter().map(|d| d.node).collect::<BTreeSet<_>>().len();
        let placement = match Topology::new(disks.clone()) {
            Err(_) if usable == 0 => Err(too_few_or_full(level, nodes_up, &[], &full, 0, needed)),
            Err(e) => {
                Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))
            }
            Ok(topology) => {
                let seed = seed_for_turn(&topology, level, seed_of(&bucket, &key, now), turn);
                place(&layout, body.size, &topology, seed, level).map_err(|e| match e {
                    LayoutError::TooFewDomains { available, needed, .. } => {
                        too_few_or_full(level, nodes_up, &disks, &full, available, needed)
                    }
                    other => {
                        ApiError::new(StatusCode::BAD_REQUEST, "invalid_object", other.to_string())
                    }
                })
            }
        };
        let placement = match placement {
            Ok(p) => p,
            Err(api) => return Ok(Err(api)),
        };
        let record = store.begin_object(&bucket, &key, placement, now)?;
        Ok(Ok((record, nodes)))
    })
    .await?
    .map_err(|error| meta.unless_heartbeats_failed(error))?;
    tracing::info!(bucket = %record.bucket, key = %record.key, generation = record.generation, "write begun");
    let units = units_json(&record, &nodes, None)?;
    Ok(Json(object_json(&record, units)))
}

/// Begins a write to a RAIDP bucket: its bytes get extents at the ends of superchunks
/// (`super::raidp::allocate`); the record's placement is an empty one of the bucket's default
/// (two-copy) policy.
async fn begin_raidp(
    meta: Shared,
    bucket: String,
    key: String,
    layout: Policy,
    body: BeginBody,
) -> Result<Json<Value>, ApiError> {
    let live = meta.liveness();
    let level = meta.failure_domain;
    let _raidp = meta.raidp.lock().await;
    let (record, state, nodes) = blocking(&meta, move |store| {
        let nodes = store.list_nodes()?;
        let (extents, state) =
            match super::raidp::allocate(store, body.size, &nodes, &live, &body.avoid_nodes)? {
                Ok(allocated) => allocated,
                Err(api) => return Ok(Err(api)),
            };
        let placement =
            match weft_layout::Placement::from_parts(layout, 0, level, 0, vec![], vec![]) {
                Ok(placement) => placement,
                Err(e) => {
                    return Ok(Err(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        e.to_string(),
                    )))
                }
            };
        let record = store.begin_raidp_object(&bucket, &key, placement, Some(extents), now_ms())?;
        Ok(Ok((record, state, nodes)))
    })
    .await??;
    tracing::info!(bucket = %record.bucket, key = %record.key, generation = record.generation, "RAIDP write begun");
    let units = units_json(&record, &nodes, None)?;
    let mut value = object_json(&record, units);
    let extents = record.raidp.as_deref().unwrap_or_default();
    value["raidp"] =
        super::raidp::object_raidp_json(extents, &state, &nodes, Some(&meta.liveness()));
    Ok(Json(value))
}

/// Adds the `raidp` field to the JSON of a RAIDP object (no-op for striped ones).
fn with_raidp(
    store: &dyn crate::MetaStore,
    record: &ObjectRecord,
    nodes: &[NodeRecord],
    live: Option<&Liveness>,
    value: &mut Value,
) -> Result<(), MetaError> {
    if let Some(extents) = &record.raidp {
        if let Some(state) = super::raidp::load(store)? {
            value["raidp"] = super::raidp::object_raidp_json(extents, &state, nodes, live);
        }
    }
    Ok(())
}

async fn commit(
    meta: Shared,
    bucket: String,
    key: String,
    body: &[u8],
) -> Result<Json<Value>, ApiError> {
    let body: CommitBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"generation\": u64, \"digests\": optional {{unit: hex}}, \
             \"attributes\": optional object, \"if\": optional \"absent\" or {{\"generation\": u64}}}}: {e}"
        ))
    })?;
    let mut digests = digests_by_unit(body.digests)?;
    let terms = crate::CommitTerms {
        attributes: body.attributes,
        precondition: body.precondition,
        lock: body.lock,
    };
    meta.changes.note(&bucket, &key);
    let ((record, replaced), nodes, bucket_versioned) = blocking(&meta, move |store| {
        let owner = digest_pages::of_write(body.generation);
        let invalid =
            |reason| MetaError::InvalidDigests { bucket: bucket.clone(), key: key.clone(), reason };
        digest_pages::take(store, &owner, &mut digests, invalid)?;
        let committed =
            store.commit_object_with(&bucket, &key, body.generation, &digests, &terms)?;
        digest_pages::delete(store, &owner)?;
        let versioned = store.get_bucket(&bucket)?.versioning.is_some();
        Ok((committed, store.list_nodes()?, versioned))
    })
    .await?;
    tracing::info!(bucket = %record.bucket, key = %record.key, generation = record.generation, "write committed");
    let mut value = object_json(&record, units_json(&record, &nodes, None)?);
    if bucket_versioned {
        value["version_id"] = json!(record.version_id());
    }
    value["replaced"] = match &replaced {
        Some(old) => object_json(old, units_json(old, &nodes, None)?),
        None => Value::Null,
    };
    Ok(Json(value))
}

/// `POST .../objects/{key}/abort`: body `{"generation"}`. The writer gives up its write in
/// progress (after deleting the units it wrote): the write and its digest pages are removed
/// at once instead of at expiry. Answers the removed write (its units, so a caller that could
/// not delete them knows what the sweeper will collect); `409 no_such_write` when that
/// generation is not in progress (committed, superseded, expired).
async fn abort(
    meta: Shared,
    bucket: String,
    key: String,
    body: &[u8],
) -> Result<Json<Value>, ApiError> {
    let body: AbortBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body must be {{\"generation\": u64}}: {e}"))
    })?;
    let (removed, nodes) = blocking(&meta, move |store| {
        let removed = store.abort_write(&bucket, &key, body.generation)?;
        digest_pages::delete(store, &digest_pages::of_write(removed.generation))?;
        Ok((removed, store.list_nodes()?))
    })
    .await?;
    tracing::info!(bucket = %removed.bucket, key = %removed.key, generation = removed.generation, "write aborted by its writer");
    Ok(Json(object_json(&removed, units_json(&removed, &nodes, None)?)))
}

/// `POST .../objects/{key}/digests`: body `{"generation", "digests": {unit: hex}}`, 1 to
/// [`digest_pages::MAX_DIGESTS_PER_REQUEST`] digests of units of that write in progress, kept until its
/// commit (which takes them with its own) or its expiry. Sending a page again replaces it.
async fn digests_page(
    meta: Shared,
    bucket: String,
    key: String,
    body: &[u8],
) -> Result<Json<Value>, ApiError> {
    let body: CommitBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"generation\": u64, \"digests\": {{unit: hex}}}}: {e}"
        ))
    })?;
    let count = body.digests.len();
    digest_pages::check_count(count)?;
    let named = json!(body.digests);
    let digests = digests_by_unit(body.digests)?;
    let generation = body.generation;
    blocking(&meta, move |store| {
        let write = store.get_write(&bucket, &key, generation)?;
        let write = write.ok_or_else(|| MetaError::NoSuchWrite {
            bucket: bucket.clone(),
            key: key.clone(),
            generation,
        })?;
        let owner = digest_pages::of_write(generation);
        let missing =
            |unit| MetaError::NoSuchUnit { bucket: bucket.clone(), key: key.clone(), unit };
        digest_pages::put(store, &owner, &write.placement, &digests, &named, missing)
    })
    .await?;
    Ok(Json(json!({ "generation": generation, "digests": count })))
}

/// Which units a `GET` of an object lists: `units_from` (default 0) and `units_limit`
/// (default and most [`MAX_LISTED_UNITS`]).
#[derive(Deserialize, Default)]
pub(crate) struct UnitsQuery {
    units_from: Option<usize>,
    units_limit: Option<usize>,
}

/// `GET /v1/buckets/{bucket}/objects/{key}[?units_from=N&units_limit=M]`.
pub(crate) async fn get_object(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
    Query(page): Query<UnitsQuery>,
) -> Result<Json<Value>, ApiError> {
    let live = meta.liveness();
    let found = blocking(&meta, move |store| {
        let record = match store.get_object(&bucket, &key) {
            Ok(record) => record,
            Err(MetaError::NoSuchKey { .. }) => {
                match super::lost::lost_error(store, &bucket, &key)? {
                    Some(lost) => return Ok(Err(lost)),
                    None => return Err(MetaError::NoSuchKey { bucket, key }),
                }
            }
            Err(other) => return Err(other),
        };
        let unfound = super::lost::unfound_units(store, &record)?;
        let nodes = store.list_nodes()?;
        let mut raidp = Value::Null;
        if !record.versioned && store.get_bucket(&bucket)?.versioning.is_some() {
            raidp = json!({ "version_id": record.version_id() });
        }
        with_raidp(store, &record, &nodes, Some(&live), &mut raidp)?;
        super::geometric::object_fields(store, &record, &nodes, Some(&live), &mut raidp)?;
        Ok(Ok((record, nodes, unfound, raidp)))
    })
    .await??;
    let (record, nodes, unfound, raidp) = found;
    let (from, limit) =
        (page.units_from.unwrap_or(0), page.units_limit.unwrap_or(MAX_LISTED_UNITS));
    let units = units_page_json(&record, &nodes, Some(&meta.liveness()), from, limit)?;
    let mut value = object_json(&record, units);
    if let Value::Object(extra) = raidp {
        for (name, field) in extra {
            value[name] = field;
        }
    }
    // Only when there are some, so that a healthy object's body is the same everywhere.
    if !unfound.is_empty() {
        value["unfound_units"] = json!(unfound);
    }
    Ok(Json(value))
}

/// What a `DELETE` of an object requires: `if_generation=G` deletes only generation G
/// (412 `precondition_failed` otherwise; a missing key is 404 as always).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteQuery {
    if_generation: Option<u64>,
}

/// `DELETE /v1/buckets/{bucket}/objects/{key}[?if_generation=G]`: an S3 DELETE naming no
/// version (`MetaStore::delete_latest`). Answers the object removed for good (its units
/// are the caller's to delete), with `delete_marker` (the marker's version JSON) in a
/// versioned bucket; when nothing was removed for good (the object stays as a version, or
/// the key had none) the answer is `{"bucket", "key", "removed": false, "delete_marker"}`.
pub(crate) async fn delete_object(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
    Query(query): Query<DeleteQuery>,
) -> Result<Json<Value>, ApiError> {
    super::refuse_internal_change(&bucket, "delete an object")?;
    let precondition = query.if_generation.map(crate::Precondition::Generation);
    let changed = (bucket.clone(), key.clone());
    let (deleted, nodes) = blocking(&meta, move |store| {
        // An object of the key marked lost is forgotten with it (read first: a delete is a
        // write transaction, and most keys were never lost).
        let lost = super::lost::lost_name(&bucket, &key);
        let forget = || -> Result<(), MetaError> {
            if store.get_record(crate::store::LOST_OBJECTS, &lost)?.is_some() {
                store.delete_record(crate::store::LOST_OBJECTS, &lost)?;
            }
            Ok(())
        };
        let deleted = match store.delete_latest(&bucket, &key, precondition, now_ms()) {
            Ok(deleted) => deleted,
            Err(error @ MetaError::NoSuchKey { .. }) => {
                forget()?;
                return Err(error);
            }
            Err(other) => return Err(other),
        };
        if deleted.removed.is_some() {
            // The object's S3 attributes go with it (they name its generation, so one left
            // behind by a crash here would never be mistaken for a later object's).
            store.delete_record("object_attributes", &format!("{bucket}/{key}"))?;
        }
        forget()?;
        Ok((deleted, store.list_nodes()?))
    })
    .await?;
    meta.changes.note(&changed.0, &changed.1);
    let marker = match &deleted.marker {
        Some(marker) => {
            let units = units_json(marker, &nodes, None)?;
            super::versions::version_json(marker, object_json(marker, units), true)
        }
        None => Value::Null,
    };
    let mut value = match &deleted.removed {
        Some(record) => {
            tracing::info!(bucket = %record.bucket, key = %record.key, generation = record.generation, "object deleted");
            let units = units_json(record, &nodes, Some(&meta.liveness()))?;
            object_json(record, units)
        }
        None => json!({ "bucket": changed.0, "key": changed.1, "removed": false }),
    };
    if !marker.is_null() {
        tracing::info!(bucket = %changed.0, key = %changed.1, "delete marker made");
        value["delete_marker"] = marker;
    }
    Ok(Json(value))
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    prefix: String,
    start_after: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/buckets/{bucket}/objects?prefix=&start_after=&limit=`.
pub(crate) async fn list_objects(
    State(meta): State<Shared>,
    Path(bucket): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = query.limit.unwrap_or(crate::MAX_LIST_LIMIT);
    let page = blocking(&meta, move |store| {
        store.list_objects(&bucket, &query.prefix, query.start_after.as_deref(), limit)
    })
    .await?;
    let objects: Vec<Value> = page
        .objects
        .iter()
        .map(|o| {
            let mut entry = json!({"key": o.key, "size": o.size(), "generation": o.generation, "created_ms": o.created_ms});
            if o.geometric.is_some() {
                entry["packed"] = json!(true);
            }
            if let Some(attributes) = &o.attributes {
                entry["attributes"] = attributes.clone();
            }
            entry
        })
        .collect();
    Ok(Json(json!({ "objects": objects, "next_start_after": page.next_start_after })))
}
