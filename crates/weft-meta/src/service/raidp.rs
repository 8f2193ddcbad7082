//! RAIDP in meta (docs/raidp.md, docs/meta-api.md "RAIDP"): the cluster's one superchunk map,
//! the RAIDP bucket policy, and where RAIDP objects' bytes go.
//!
//! Invariants:
//! - One RAIDP state per cluster (the internal record `raidp/state`): the geometry (superchunk
//!   size, Lstors per disk), the superchunk map (`weft_layout::superchunk`, both rules
//!   checked on every load) and each superchunk's fill (bytes appended so far). It is made
//!   by the first RAIDP bucket; a bucket asking for another geometry is refused (409
//!   `raidp_geometry`).
//! - Every change of the state is made under `Meta::raidp`'s lock, read-modify-write, so
//!   two writes never get the same bytes of a superchunk.
//! - Appends only (log-structured): an object's bytes go to the end of open superchunks
//!   whose both replicas are usable now, then to new superchunks on usable disks; a
//!   superchunk's bytes once handed out are never handed out again, so a write that crashed
//!   after allocation leaves a gap, never a clash. Writes to a superchunk with a replica on
//!   a down, failed or refused disk are diverted to others.
//! - A disk is usable for RAIDP when its node is up, it is neither failed nor full, and its
//!   node reports an Lstor that is `ready` or `unformatted` with no other geometry. Disks
//!   that become usable later join the map (growth) at their next allocation.

use std::collections::{BTreeMap, BTreeSet};

use axum::{extract::State, http::StatusCode, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use weft_layout::superchunk::{SuperchunkId, SuperchunkMap, MAX_SLOTS_PER_DISK};
use weft_layout::{DiskLocation, FailureDomain};
use weft_wire::DiskState;

use super::liveness::Liveness;
use super::{blocking, ApiError, Shared};
use crate::store::{RAIDP, RAIDP_STATE};
use crate::{MetaError, MetaStore, NodeRecord, RaidpExtent, RaidpPolicy};

/// Smallest superchunk: 64 KiB (one checksum segment).
pub const MIN_SUPERCHUNK_BYTES: u64 = 64 << 10;
/// Largest superchunk: 64 GiB.
pub const MAX_SUPERCHUNK_BYTES: u64 = 64 << 30;
/// Slots a disk offers when its node does not say how large it is.
const DEFAULT_SLOTS: u32 = 64;
/// Most slots per disk with two parities (their coefficients 2^slot must be distinct in
/// GF(2^8)).
const MAX_SLOTS_TWO_PARITIES: u32 = 255;

/// The superchunk size and Lstor count a RAIDP bucket asks for (each optional).
pub(crate) type RaidpAsk = (Option<u64>, Option<u32>);

/// The cluster's RAIDP state, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RaidpState {
    pub(crate) policy: RaidpPolicy,
    pub(crate) map: SuperchunkMap,
    /// Per superchunk, the bytes appended so far: the next append's offset.
    #[serde(default)]
    pub(crate) fill: BTreeMap<SuperchunkId, u64>,
    /// Superchunks compaction is emptying: no append goes to them until it is done.
    #[serde(default)]
    pub(crate) reclaiming: BTreeSet<SuperchunkId>,
    /// In-place updates under way: lease id → (superchunks, until when in ms since the
    /// epoch). Compaction leaves their superchunks alone until the lease ends or lapses.
    #[serde(default)]
    pub(crate) leases: BTreeMap<u64, (Vec<SuperchunkId>, u64)>,
    #[serde(default)]
    pub(crate) next_lease: u64,
    /// The record as read from the store (`None`: not stored yet): a save replaces exactly
    /// that, or fails with `RecordChanged` when another meta replica saved in between.
    #[serde(skip)]
    pub(crate) stored: Option<serde_json::Value>,
}

impl RaidpState {
    /// Whether an update lease on `id` lasts at `now`.
    fn busy(&self, id: SuperchunkId, now: u64) -> bool {
        self.leases.values().any(|(ids, until)| *until > now && ids.contains(&id))
    }
}

/// How long an in-place update may write after meta granted it (`POST /v1/raidp/update`).
pub const UPDATE_LEASE_MS: u64 = 10 * 60 * 1000;

/// Checks a RAIDP policy's numbers.
pub(crate) fn check_policy(policy: &RaidpPolicy) -> Result<(), ApiError> {
    let invalid =
        |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_policy", message);
    if !(MIN_SUPERCHUNK_BYTES..=MAX_SUPERCHUNK_BYTES).contains(&policy.superchunk_bytes)
        || !policy.superchunk_bytes.is_multiple_of(4096)
    {
        return Err(invalid(format!(
            "a superchunk of {} bytes: give a multiple of 4 KiB from {MIN_SUPERCHUNK_BYTES} \
             to {MAX_SUPERCHUNK_BYTES} bytes",
            policy.superchunk_bytes
        )));
    }
    if !(1..=2).contains(&policy.lstors) {
        return Err(invalid(format!(
            "--lstors {}: each disk keeps 1 parity (XOR: any two disk failures) or 2 (XOR and \
             Reed-Solomon: any three)",
            policy.lstors
        )));
    }
    Ok(())
}

pub(crate) fn load(store: &dyn MetaStore) -> Result<Option<RaidpState>, MetaError> {
    let Some(value) = store.get_record(RAIDP, RAIDP_STATE)? else { return Ok(None) };
    let mut state: RaidpState =
        serde_json::from_value(value.clone()).map_err(|e| MetaError::Corrupt {
            table: "records",
            key: format!("{RAIDP}/{RAIDP_STATE}"),
            reason: e.to_string(),
        })?;
    state.stored = Some(value);
    Ok(Some(state))
}

/// The RAIDP state, or the 409 `no_raidp_map` that a call needing one answers.
fn load_or_refuse(store: &dyn MetaStore) -> Result<Result<RaidpState, ApiError>, MetaError> {
    Ok(load(store)?.ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_raidp_map",
            "no RAIDP map yet: create a RAIDP bucket first (weft bucket create NAME --code raidp)",
        )
    }))
}

/// Stores `state` over the record it was read from (see [`RaidpState::stored`]).
fn save(store: &dyn MetaStore, state: &mut RaidpState) -> Result<(), MetaError> {
    let value = serde_json::to_value(&*state).expect("RAIDP state serializes");
    store.replace_record(RAIDP, RAIDP_STATE, state.stored.as_ref(), &value)?;
    state.stored = Some(value);
    Ok(())
}

/// Why a disk is not usable for RAIDP now, or None when it is.
fn unusable(
    node: &NodeRecord,
    disk: &crate::DiskReport,
    live: &Liveness,
    policy: &RaidpPolicy,
) -> Option<String> {
    if live.is_down(node) {
        return Some("node down".into());
    }
    if let Some(failed) = &disk.failed {
        return Some(format!("disk failed: {failed}"));
    }
    if disk.state == DiskState::Full {
        return Some("disk full".into());
    }
    let Some(report) = &disk.raidp else {
        return Some("no Lstor (weft serve node --lstor)".into());
    };
    if !report.usable() {
        return Some(format!(
            "Lstor {}: {}",
            report.state,
            report.reason.as_deref().unwrap_or("no reason given")
        ));
    }
    let other = report.superchunk_bytes.is_some_and(|b| b != policy.superchunk_bytes)
        || report.parities.is_some_and(|p| p != policy.lstors);
    if other {
        return Some(format!(
            "its Lstor keeps {:?} parities of {:?}-byte superchunks, not the cluster's",
            report.parities, report.superchunk_bytes
        ));
    }
    None
}

/// The usable disks of up nodes, with their slot counts.
fn usable_disks(
    nodes: &[NodeRecord],
    live: &Liveness,
    policy: &RaidpPolicy,
) -> Vec<(DiskLocation, u32)> {
    let most = match policy.lstors {
        1 => MAX_SLOTS_PER_DISK,
        _ => MAX_SLOTS_TWO_PARITIES,
    };
    nodes
        .iter()
        .flat_map(|node| {
            node.disks.iter().filter(|d| unusable(node, d, live, policy).is_none()).map(|d| {
                let slots = d
                    .total_bytes
                    .map_or(DEFAULT_SLOTS as u64, |total| total / policy.superchunk_bytes)
                    .min(u64::from(most)) as u32;
                (node.disk_location(d.index), slots)
            })
        })
        .filter(|(_, slots)| *slots > 0)
        .collect()
}

fn geometry_conflict(have: &RaidpPolicy, asked: &RaidpPolicy) -> ApiError {
    let mut error = ApiError::new(
        StatusCode::CONFLICT,
        "raidp_geometry",
        format!(
            "this cluster's RAIDP map has superchunks of {} bytes and {} Lstor parities per \
             disk; a bucket asking for {} bytes and {} cannot share it (leave --superchunk \
             and --lstors out to use the cluster's)",
            have.superchunk_bytes, have.lstors, asked.superchunk_bytes, asked.lstors
        ),
    );
    error.body["superchunk_bytes"] = json!(have.superchunk_bytes);
    error.body["lstors"] = json!(have.lstors);
    error
}

/// The policy a new RAIDP bucket gets: the cluster's when it has a map (refused if `asked`
/// names another geometry), else `asked` (with defaults) and a new map over the usable
/// disks. Called under `Meta::raidp`'s lock.
pub(crate) fn policy_for_bucket(
    store: &dyn MetaStore,
    asked: RaidpAsk,
    nodes: &[NodeRecord],
    live: &Liveness,
    level: FailureDomain,
) -> Result<Result<RaidpPolicy, ApiError>, MetaError> {
    if let Some(state) = load(store)? {
        let have = state.policy;
        let wanted = RaidpPolicy {
            superchunk_bytes: asked.0.unwrap_or(have.superchunk_bytes),
            lstors: asked.1.unwrap_or(have.lstors),
        };
        return Ok(if wanted == have { Ok(have) } else { Err(geometry_conflict(&have, &wanted)) });
    }
    let policy = RaidpPolicy {
        superchunk_bytes: asked.0.unwrap_or(DEFAULT_SUPERCHUNK_BYTES),
        lstors: asked.1.unwrap_or(1),
    };
    if let Err(e) = check_policy(&policy) {
        return Ok(Err(e));
    }
    let disks = usable_disks(nodes, live, &policy);
    let domains: BTreeSet<_> = disks.iter().map(|(d, _)| d.domain(level)).collect();
    if domains.len() < 2 {
        let reasons: Vec<String> = nodes
            .iter()
            .flat_map(|n| {
                n.disks.iter().filter_map(move |d| {
                    unusable(n, d, live, &policy)
                        .map(|why| format!("node {} disk {}: {why}", n.node_id, d.index))
                })
            })
            .take(8)
            .collect();
        let mut error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_few_nodes",
            format!(
                "RAIDP keeps two replicas in distinct failure domains ({level}s), but the \
                 usable disks span {}; {}",
                domains.len(),
                if reasons.is_empty() { "start more nodes".into() } else { reasons.join("; ") }
            ),
        );
        error.body["usable_domains"] = json!(domains.len());
        error.body["needed"] = json!(2);
        return Ok(Err(error));
    }
    let map = match SuperchunkMap::new(&disks, policy.superchunk_bytes, level) {
        Ok(map) => map,
        Err(e) => {
            return Ok(Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "raidp_map",
                e.to_string(),
            )))
        }
    };
    let mut state = RaidpState {
        policy,
        map,
        fill: BTreeMap::new(),
        reclaiming: BTreeSet::new(),
        leases: BTreeMap::new(),
        next_lease: 0,
        stored: None,
    };
    match save(store, &mut state) {
        Ok(()) => Ok(Ok(policy)),
        // Another meta made the map first: the cluster's map is that one.
        Err(MetaError::RecordChanged { .. }) => match load(store)? {
            Some(made) => Ok(Ok(made.policy)),
            None => {
                Err(MetaError::RecordChanged { namespace: RAIDP.into(), name: RAIDP_STATE.into() })
            }
        },
        Err(error) => Err(error),
    }
}

/// Default superchunk size of a new map: 1 GiB (the paper's).
pub const DEFAULT_SUPERCHUNK_BYTES: u64 = 1 << 30;

/// Allocates `size` bytes for a new RAIDP object: the ends of open superchunks whose replicas
/// are all usable (and not in `avoid`), then new superchunks. Disks usable now but not in the
/// map join it first. Called under `Meta::raidp`'s lock.
pub(crate) fn allocate(
    store: &dyn MetaStore,
    size: u64,
    nodes: &[NodeRecord],
    live: &Liveness,
    avoid: &[u32],
) -> Result<Result<(Vec<RaidpExtent>, RaidpState), ApiError>, MetaError> {
    let Some(mut state) = load(store)? else {
        return Ok(Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_raidp_map",
            "no RAIDP map yet: create a RAIDP bucket first (weft bucket create NAME --code raidp)",
        )));
    };
    if sync(&mut state, nodes, live) {
        save(store, &mut state)?;
    }
    let usable: Vec<(DiskLocation, u32)> = usable_disks(nodes, live, &state.policy)
        .into_iter()
        .filter(|(d, _)| !avoid.contains(&d.node))
        .collect();
    for &(disk, slots) in &usable {
        if !state.map.disks().iter().any(|d| d.location == disk) {
            if let Err(e) = state.map.add_disk(disk, slots) {
                tracing::warn!(node = disk.node, disk = disk.disk, error = %e, "RAIDP: disk not added to the map");
            }
        }
    }
    let ok: BTreeSet<DiskLocation> = usable.iter().map(|(d, _)| *d).collect();
    let bytes = state.policy.superchunk_bytes;
    let mut extents = Vec::new();
    let mut left = size;
    let open: Vec<SuperchunkId> = state
        .map
        .superchunks()
        .filter(|s| s.replicas.len() == 2 && s.replicas.iter().all(|r| ok.contains(r)))
        .map(|s| s.id)
        .filter(|id| state.fill.get(id).copied().unwrap_or(0) < bytes)
        .filter(|id| !state.reclaiming.contains(id))
        .collect();
    let mut open = open.into_iter();
    while left > 0 {
        let id = match open.next() {
            Some(id) => id,
            None => match state.map.allocate_among(&|d| ok.contains(d)) {
                Ok(id) => id,
                Err(e) => {
                    let mut error = ApiError::new(
                        StatusCode::INSUFFICIENT_STORAGE,
                        "raidp_full",
                        format!(
                            "no room for {size} bytes in the RAIDP tier: {e}; add disks (with \
                             --lstor), or delete objects and reclaim their space (weft raidp \
                             compact)"
                        ),
                    );
                    error.body["usable_disks"] = json!(ok.len());
                    return Ok(Err(error));
                }
            },
        };
        let fill = state.fill.entry(id).or_insert(0);
        let take = left.min(bytes - *fill);
        extents.push(RaidpExtent { superchunk: id, offset: *fill, bytes: take });
        *fill += take;
        left -= take;
    }
    save(store, &mut state)?;
    Ok(Ok((extents, state)))
}

/// How a replica stands: `up`, `down` (its node), `failed` (the disk, in the map) or
/// `refused` (its Lstor).
fn replica_state(
    disk: &DiskLocation,
    state: &RaidpState,
    by_id: &BTreeMap<u32, &NodeRecord>,
    live: Option<&Liveness>,
) -> &'static str {
    if state.map.disks().iter().any(|d| d.location == *disk && d.failed) {
        return "failed";
    }
    let Some(node) = by_id.get(&disk.node) else { return "unknown" };
    if live.is_some_and(|live| live.is_down(node)) {
        return "down";
    }
    match node.disks.iter().find(|d| d.index == disk.disk) {
        Some(d) if d.failed.is_some() => "failed",
        Some(d) if d.raidp.as_ref().is_some_and(|r| r.state == "refused") => "refused",
        _ => "up",
    }
}

/// The `raidp` field of an object's JSON: geometry and each extent with its superchunk's slot
/// and replicas (node, disk, endpoint, state).
pub(crate) fn object_raidp_json(
    extents: &[RaidpExtent],
    state: &RaidpState,
    nodes: &[NodeRecord],
    live: Option<&Liveness>,
) -> Value {
    let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
    let list: Vec<Value> = extents
        .iter()
        .map(|extent| {
            let superchunk = state.map.superchunk(extent.superchunk);
            let replicas: Vec<Value> = superchunk
                .map(|s| {
                    s.replicas
                        .iter()
                        .map(|disk| {
                            json!({
                                "node": disk.node,
                                "disk": disk.disk,
                                "endpoint": by_id.get(&disk.node).map(|n| n.endpoint.clone()),
                                "state": replica_state(disk, state, &by_id, live),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "superchunk": extent.superchunk,
                "slot": superchunk.map(|s| s.slot),
                "offset": extent.offset,
                "bytes": extent.bytes,
                "replicas": replicas,
            })
        })
        .collect();
    json!({
        "superchunk_bytes": state.policy.superchunk_bytes,
        "lstors": state.policy.lstors,
        "extents": list,
    })
}

/// `GET /v1/raidp`: the map — geometry, disks (slots, superchunks held, failed, Lstor state),
/// superchunks (slot, replicas, fill, at risk, lost) and the pairs of disks sharing one.
pub(crate) async fn map(State(meta): State<Shared>) -> Result<Json<Value>, ApiError> {
    let live = meta.liveness();
    let synced = live.clone();
    let _raidp = meta.raidp.lock().await;
    let (state, nodes) = blocking(&meta, move |store| {
        let nodes = store.list_nodes()?;
        Ok((load_synced(store, &nodes, &synced)?, nodes))
    })
    .await?;
    let Some(state) = state else {
        return Ok(Json(json!({ "exists": false, "disks": [], "superchunks": [] })));
    };
    let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
    let at_risk: BTreeSet<SuperchunkId> = state.map.at_risk().into_iter().collect();
    let lost: BTreeSet<SuperchunkId> = state.map.lost().into_iter().collect();
    let disks: Vec<Value> = state
        .map
        .disks()
        .iter()
        .map(|d| {
            let report = by_id
                .get(&d.location.node)
                .and_then(|n| n.disks.iter().find(|r| r.index == d.location.disk))
                .and_then(|r| r.raidp.clone());
            json!({
                "node": d.location.node,
                "disk": d.location.disk,
                "rack": d.location.rack,
                "slots": d.slots,
                "failed": d.failed,
                "state": replica_state(&d.location, &state, &by_id, Some(&live)),
                "endpoint": by_id.get(&d.location.node).map(|n| n.endpoint.clone()),
                "superchunks": state.map.superchunks_on(&d.location).iter().map(|(slot, id)| json!({"slot": slot, "superchunk": id})).collect::<Vec<_>>(),
                "lstor": report,
            })
        })
        .collect();
    let superchunks: Vec<Value> = state
        .map
        .superchunks()
        .map(|s| {
            json!({
                "id": s.id,
                "slot": s.slot,
                "replicas": s.replicas.iter().map(|r| json!({"node": r.node, "disk": r.disk})).collect::<Vec<_>>(),
                "filled_bytes": state.fill.get(&s.id).copied().unwrap_or(0),
                "at_risk": at_risk.contains(&s.id),
                "lost": lost.contains(&s.id),
            })
        })
        .collect();
    // 1-sharing: each superchunk held on two disks is the one thing those two share.
    let shared: Vec<Value> = state
        .map
        .superchunks()
        .filter(|s| s.replicas.len() == 2)
        .map(|s| {
            let [a, b] = [s.replicas[0], s.replicas[1]];
            json!({ "disks": [[a.node, a.disk], [b.node, b.disk]], "superchunk": s.id })
        })
        .collect();
    Ok(Json(json!({
        "exists": true,
        "superchunk_bytes": state.policy.superchunk_bytes,
        "lstors": state.policy.lstors,
        "failure_domain": state.map.level().to_string(),
        "disks": disks,
        "superchunks": superchunks,
        "shared": shared,
        "at_risk": at_risk,
        "lost": lost,
    })))
}

/// Brings the map up to what the nodes report: a map disk its node reports failed fails in
/// the map (its superchunks at risk or lost); a failed map disk its node reports healthy
/// again (replaced: `weft disk replace`) comes back empty. Returns whether anything changed.
/// A silent node changes nothing: down is not failed.
pub(crate) fn sync(state: &mut RaidpState, nodes: &[NodeRecord], live: &Liveness) -> bool {
    let mut changed = false;
    let disks: Vec<(DiskLocation, bool, u32)> =
        state.map.disks().iter().map(|d| (d.location, d.failed, d.slots)).collect();
    for (location, failed, slots) in disks {
        let Some(node) = nodes.iter().find(|n| n.node_id == location.node) else { continue };
        if live.is_down(node) {
            continue;
        }
        let Some(report) = node.disks.iter().find(|d| d.index == location.disk) else { continue };
        if report.failed.is_some() && !failed {
            match state.map.fail_disk(&location) {
                Ok(effect) => tracing::warn!(
                    node = location.node,
                    disk = location.disk,
                    at_risk = effect.at_risk.len(),
                    lost = effect.lost.len(),
                    "RAIDP: disk failed"
                ),
                Err(e) => tracing::error!(error = %e, "RAIDP: could not fail a disk in the map"),
            }
            changed = true;
        } else if report.failed.is_none() && failed {
            let usable = unusable(node, report, live, &state.policy).is_none();
            if usable {
                match state.map.add_disk(location, slots) {
                    Ok(()) => tracing::info!(
                        node = location.node,
                        disk = location.disk,
                        "RAIDP: a replaced disk is back in the map, empty"
                    ),
                    Err(e) => tracing::error!(error = %e, "RAIDP: could not add a replaced disk"),
                }
                changed = true;
            }
        }
    }
    changed
}

/// Loads the state and brings it up to the nodes' reports (saved when that changed it).
/// Called under `Meta::raidp`'s lock.
pub(crate) fn load_synced(
    store: &dyn MetaStore,
    nodes: &[NodeRecord],
    live: &Liveness,
) -> Result<Option<RaidpState>, MetaError> {
    let Some(mut state) = load(store)? else { return Ok(None) };
    if sync(&mut state, nodes, live) {
        save(store, &mut state)?;
    }
    Ok(Some(state))
}

fn disk_json(disk: &DiskLocation, by_id: &BTreeMap<u32, &NodeRecord>) -> Value {
    json!({
        "rack": disk.rack,
        "node": disk.node,
        "disk": disk.disk,
        "endpoint": by_id.get(&disk.node).map(|n| n.endpoint.clone()),
    })
}

#[derive(Deserialize)]
pub(crate) struct PlanQuery {
    /// `matching` (the default) or `naive`.
    #[serde(default)]
    receivers: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
}

/// `GET /v1/raidp/plan?receivers=matching|naive&seed=`: what a recovery does now — the
/// lost superchunks with how to rebuild each (through which failed disk's Lstor, from which
/// mirrors, onto which pair) and the rounds of transfers re-mirroring the at-risk ones.
pub(crate) async fn plan(
    State(meta): State<Shared>,
    axum::extract::Query(query): axum::extract::Query<PlanQuery>,
) -> Result<Json<Value>, ApiError> {
    let receivers = match query.receivers.as_deref().unwrap_or("matching") {
        "matching" => weft_layout::superchunk::Receivers::Matching,
        "naive" => weft_layout::superchunk::Receivers::Naive { seed: query.seed.unwrap_or(1) },
        other => {
            return Err(ApiError::bad_request(format!(
                "receivers {other:?}: matching (paper §3.3) or naive"
            )))
        }
    };
    let live = meta.liveness();
    let _raidp = meta.raidp.lock().await;
    let (state, nodes) = blocking(&meta, move |store| {
        let nodes = store.list_nodes()?;
        Ok((load_synced(store, &nodes, &live)?, nodes))
    })
    .await?;
    let Some(state) = state else {
        return Ok(Json(json!({ "rounds": [], "unplaced": [], "lost": [], "exists": false })));
    };
    let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
    let fill = |id: SuperchunkId| state.fill.get(&id).copied().unwrap_or(0);
    let recovery = state.map.plan_recovery(receivers);
    let rounds: Vec<Vec<Value>> = recovery
        .rounds
        .iter()
        .map(|round| {
            round
                .iter()
                .map(|t| {
                    json!({
                        "superchunk": t.superchunk,
                        "slot": t.slot,
                        "bytes": fill(t.superchunk),
                        "from": disk_json(&t.from, &by_id),
                        "to": disk_json(&t.to, &by_id),
                    })
                })
                .collect()
        })
        .collect();
    let failed: Vec<DiskLocation> =
        state.map.disks().iter().filter(|d| d.failed).map(|d| d.location).collect();
    let lost: Vec<Value> = state
        .map
        .lost()
        .into_iter()
        .map(|id| {
            let slot = state.map.superchunk(id).map(|s| s.slot);
            let vias: Vec<Value> = failed
                .iter()
                .filter_map(|via| {
                    let sources = state.map.rebuild_sources(id, via)?;
                    Some(json!({
                        "via": disk_json(via, &by_id),
                        "sources": sources.iter().map(|(slot, other, disk)| json!({
                            "slot": slot,
                            "superchunk": other,
                            "disk": disk_json(disk, &by_id),
                        })).collect::<Vec<_>>(),
                    }))
                })
                .collect();
            let onto = state
                .map
                .place_lost(id)
                .ok()
                .map(|(a, b)| vec![disk_json(&a, &by_id), disk_json(&b, &by_id)]);
            json!({ "superchunk": id, "slot": slot, "bytes": fill(id), "via": vias, "onto": onto })
        })
        .collect();
    // With P+Q Lstors, a failed disk that held two lost superchunks rebuilds both at once.
    let mut pairs = Vec::new();
    if state.policy.lstors >= 2 {
        for via in &failed {
            let Some((lost, sources)) = state.map.rebuild_plan(via) else { continue };
            if lost.len() != 2 {
                continue;
            }
            let mut trial = state.map.clone();
            let mut onto = Vec::new();
            for &(_, id) in &lost {
                match trial.place_lost(id) {
                    Ok(pair) if trial.restore_lost(id, pair).is_ok() => {
                        onto.push(vec![disk_json(&pair.0, &by_id), disk_json(&pair.1, &by_id)])
                    }
                    _ => break,
                }
            }
            if onto.len() != 2 {
                continue;
            }
            pairs.push(json!({
                "via": disk_json(via, &by_id),
                "lost": lost.iter().map(|(slot, id)| json!({"slot": slot, "superchunk": id, "bytes": fill(*id)})).collect::<Vec<_>>(),
                "sources": sources.iter().map(|(slot, other, disk)| json!({
                    "slot": slot,
                    "superchunk": other,
                    "disk": disk_json(disk, &by_id),
                })).collect::<Vec<_>>(),
                "onto": onto,
            }));
        }
    }
    Ok(Json(json!({
        "exists": true,
        "superchunk_bytes": state.policy.superchunk_bytes,
        "lstors": state.policy.lstors,
        "pairs": pairs,
        "rounds": rounds,
        "unplaced": recovery.unplaced,
        "lost": lost,
    })))
}

#[derive(Deserialize)]
struct DiskRef {
    node: u32,
    disk: u32,
}

impl DiskRef {
    fn locate(&self, state: &RaidpState) -> Result<DiskLocation, ApiError> {
        state
            .map
            .disks()
            .iter()
            .map(|d| d.location)
            .find(|d| d.node == self.node && d.disk == self.disk)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "node {} disk {} is not in the RAIDP map",
                    self.node, self.disk
                ))
            })
    }
}

#[derive(Deserialize)]
pub(crate) struct DoneBody {
    superchunk: SuperchunkId,
    /// A transfer: the survivor it was copied from and the disk that holds it now.
    #[serde(default)]
    from: Option<DiskRef>,
    #[serde(default)]
    to: Option<DiskRef>,
    /// A rebuilt lost superchunk: the two disks that hold it now.
    #[serde(default)]
    replicas: Vec<DiskRef>,
}

/// `POST /v1/raidp/recovered` `{"superchunk", "from", "to"}` (a transfer done) or
/// `{"superchunk", "replicas":[a, b]}` (a lost superchunk rebuilt onto two disks): the map
/// records it, refusing (409 `raidp_rule`) what would break 1-mirroring or 1-sharing.
pub(crate) async fn recovered(
    State(meta): State<Shared>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: DoneBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "expected {{\"superchunk\", \"from\", \"to\"}} or {{\"superchunk\", \"replicas\"}}: {e}"
        ))
    })?;
    let _raidp = meta.raidp.lock().await;
    blocking(&meta, move |store| {
        let mut state = match load_or_refuse(store)? {
            Ok(state) => state,
            Err(refused) => return Ok(Err(refused)),
        };
        let rule = |e: weft_layout::superchunk::SuperchunkError| {
            ApiError::new(StatusCode::CONFLICT, "raidp_rule", e.to_string())
        };
        let slot = match state.map.superchunk(body.superchunk) {
            Some(s) => s.slot,
            None => {
                return Ok(Err(ApiError::bad_request(format!("no superchunk {}", body.superchunk))))
            }
        };
        let outcome = match (&body.from, &body.to, body.replicas.as_slice()) {
            (Some(from), Some(to), []) => {
                let (from, to) = match (from.locate(&state), to.locate(&state)) {
                    (Ok(f), Ok(t)) => (f, t),
                    (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
                };
                let transfer = weft_layout::superchunk::Transfer {
                    superchunk: body.superchunk,
                    slot,
                    from,
                    to,
                };
                state.map.apply(&transfer).map_err(rule)
            }
            (None, None, [a, b]) => {
                let (a, b) = match (a.locate(&state), b.locate(&state)) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
                };
                state.map.restore_lost(body.superchunk, (a, b)).map_err(rule)
            }
            _ => Err(ApiError::bad_request(
                "give from and to (a transfer) or two replicas (a rebuilt superchunk)",
            )),
        };
        if let Err(e) = outcome {
            return Ok(Err(e));
        }
        save(store, &mut state)?;
        Ok(Ok(json!({ "superchunk": body.superchunk, "recorded": true })))
    })
    .await?
    .map(Json)
}

/// Live bytes per superchunk: the extents of every write in progress and of every committed
/// object (a scan of the write and object tables, a page at a time). Called under
/// `Meta::raidp`'s lock.
fn live_bytes(store: &dyn MetaStore) -> Result<BTreeMap<SuperchunkId, u64>, MetaError> {
    let mut live: BTreeMap<SuperchunkId, u64> = BTreeMap::new();
    let mut count = |record: &crate::ObjectRecord| {
        for extent in record.raidp.iter().flatten() {
            *live.entry(extent.superchunk).or_default() += extent.bytes;
        }
    };
    // Writes first: one that commits meanwhile is counted then (perhaps twice: harmless),
    // never missed; no write begins meanwhile (allocation waits for the caller's lock).
    let mut after: Option<crate::WriteCursor> = None;
    loop {
        let writes = store.list_writes(after.as_ref(), crate::MAX_LIST_LIMIT)?;
        writes.iter().for_each(&mut count);
        match writes.last() {
            Some(last) if writes.len() == crate::MAX_LIST_LIMIT => {
                after = Some(last.write_cursor())
            }
            _ => break,
        }
    }
    for bucket in store.list_buckets()? {
        let mut after: Option<String> = None;
        loop {
            let page =
                store.list_objects(&bucket.name, "", after.as_deref(), crate::MAX_LIST_LIMIT)?;
            page.objects.iter().for_each(&mut count);
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(live)
}

/// One superchunk's use, as `GET /v1/raidp/usage` and compaction see it.
fn usage_json(
    state: &RaidpState,
    id: SuperchunkId,
    live: &BTreeMap<SuperchunkId, u64>,
    now: u64,
) -> Value {
    let filled = state.fill.get(&id).copied().unwrap_or(0);
    let live = live.get(&id).copied().unwrap_or(0);
    json!({
        "superchunk": id,
        "filled_bytes": filled,
        "live_bytes": live,
        "dead_bytes": filled.saturating_sub(live),
        "reclaiming": state.reclaiming.contains(&id),
        "busy": state.busy(id, now),
    })
}

/// `GET /v1/raidp/usage`: per superchunk with bytes appended, its live and dead bytes
/// (dead: deleted or overwritten objects, abandoned writes), and the totals.
pub(crate) async fn usage(State(meta): State<Shared>) -> Result<Json<Value>, ApiError> {
    let _raidp = meta.raidp.lock().await;
    let (state, live) =
        blocking(&meta, move |store| Ok((load(store)?, live_bytes(store)?))).await?;
    let Some(state) = state else {
        return Ok(Json(json!({ "exists": false, "superchunks": [] })));
    };
    let now = super::now_ms();
    let rows: Vec<Value> = state
        .fill
        .keys()
        .filter(|id| state.fill[*id] > 0)
        .map(|&id| usage_json(&state, id, &live, now))
        .collect();
    let sum = |field: &str| rows.iter().filter_map(|r| r[field].as_u64()).sum::<u64>();
    Ok(Json(json!({
        "exists": true,
        "superchunk_bytes": state.policy.superchunk_bytes,
        "filled_bytes": sum("filled_bytes"),
        "live_bytes": sum("live_bytes"),
        "dead_bytes": sum("dead_bytes"),
        "superchunks": rows,
    })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReclaimBody {
    /// The superchunks to reclaim; absent: every wholly dead one.
    #[serde(default)]
    superchunks: Option<Vec<SuperchunkId>>,
    /// Only say what would be reclaimed: nothing is marked.
    #[serde(default)]
    dry_run: bool,
}

/// Most superchunks one reclaim or reclaimed call may name.
pub const MAX_RECLAIM_IDS: usize = 4096;

fn check_ids(ids: Option<&[SuperchunkId]>) -> Result<(), ApiError> {
    match ids {
        Some(ids) if ids.len() > MAX_RECLAIM_IDS => Err(ApiError::bad_request(format!(
            "{} superchunks named; at most {MAX_RECLAIM_IDS} per call",
            ids.len()
        ))),
        _ => Ok(()),
    }
}

/// `POST /v1/raidp/reclaim` `{"superchunks": [..]}` (optional): marks wholly dead
/// superchunks (appended to, no live byte, no update in flight, both replicas up) as being
/// reclaimed — no append goes to them — and answers `{"reclaim": [{"superchunk", "slot",
/// "filled_bytes", "replicas": [{"node", "disk", "endpoint"}]}], "skipped": [{"superchunk",
/// "reason"}]}`. The caller trims each replica's slot, then posts `/v1/raidp/reclaimed`. A
/// superchunk still marked (a compaction that stopped midway) is handed out again. With
/// `"dry_run": true` the same answer, nothing marked.
pub(crate) async fn reclaim(
    State(meta): State<Shared>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: ReclaimBody = if body.is_empty() {
        ReclaimBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "expected {{\"superchunks\": [ids], \"dry_run\": bool}} or nothing: {e}"
            ))
        })?
    };
    check_ids(body.superchunks.as_deref())?;
    let live_nodes = meta.liveness();
    let _raidp = meta.raidp.lock().await;
    blocking(&meta, move |store| {
        let mut state = match load_or_refuse(store)? {
            Ok(state) => state,
            Err(refused) => return Ok(Err(refused)),
        };
        let nodes = store.list_nodes()?;
        sync(&mut state, &nodes, &live_nodes);
        let live = live_bytes(store)?;
        let by_id: BTreeMap<u32, &NodeRecord> = nodes.iter().map(|n| (n.node_id, n)).collect();
        let now = super::now_ms();
        let asked: Vec<SuperchunkId> = match &body.superchunks {
            Some(ids) => ids.clone(),
            None => state.fill.keys().copied().collect(),
        };
        let (mut reclaim, mut skipped) = (Vec::new(), Vec::new());
        for id in asked {
            let Some(superchunk) = state.map.superchunk(id).cloned() else {
                skipped.push(json!({ "superchunk": id, "reason": "no such superchunk" }));
                continue;
            };
            let filled = state.fill.get(&id).copied().unwrap_or(0);
            let live_here = live.get(&id).copied().unwrap_or(0);
            let down = superchunk
                .replicas
                .iter()
                .find(|r| replica_state(r, &state, &by_id, Some(&live_nodes)) != "up");
            let reason = if filled == 0 && !state.reclaiming.contains(&id) {
                Some("empty".to_string())
            } else if live_here > 0 {
                Some(format!("{live_here} live bytes (of {filled})"))
            } else if state.busy(id, now) {
                Some("an in-place update may still be writing to it".into())
            } else if superchunk.replicas.len() < 2 {
                Some("one replica left: recover it first (weft raidp recover)".into())
            } else if let Some(r) = down {
                let why = replica_state(r, &state, &by_id, Some(&live_nodes));
                Some(format!("its replica on node {} disk {} is {why}", r.node, r.disk))
            } else {
                None
            };
            if let Some(reason) = reason {
                // Asked by name: say why; swept: only those with dead bytes are news.
                if body.superchunks.is_some() || filled > live_here {
                    skipped.push(json!({ "superchunk": id, "reason": reason }));
                }
                continue;
            }
            state.reclaiming.insert(id);
            reclaim.push(json!({
                "superchunk": id,
                "slot": superchunk.slot,
                "filled_bytes": filled,
                "replicas": superchunk.replicas.iter().map(|r| disk_json(r, &by_id)).collect::<Vec<_>>(),
            }));
        }
        if !body.dry_run {
            state.leases.retain(|_, (_, until)| *until > now);
            save(store, &mut state)?;
        }
        Ok(Ok(json!({ "reclaim": reclaim, "skipped": skipped })))
    })
    .await?
    .map(Json)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReclaimedBody {
    superchunks: Vec<SuperchunkId>,
}

/// `POST /v1/raidp/reclaimed` `{"superchunks": [..]}`: both replicas of these superchunks
/// were trimmed; they take appends again from offset 0. Refused (409 `not_reclaiming`) for
/// a superchunk `/v1/raidp/reclaim` did not hand out.
pub(crate) async fn reclaimed(
    State(meta): State<Shared>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: ReclaimedBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("expected {{\"superchunks\": [ids]}}: {e}")))?;
    check_ids(Some(&body.superchunks))?;
    let _raidp = meta.raidp.lock().await;
    blocking(&meta, move |store| {
        let mut state = match load_or_refuse(store)? {
            Ok(state) => state,
            Err(refused) => return Ok(Err(refused)),
        };
        if let Some(id) = body.superchunks.iter().find(|id| !state.reclaiming.contains(id)) {
            return Ok(Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_reclaiming",
                format!("superchunk {id} is not being reclaimed (POST /v1/raidp/reclaim first)"),
            )));
        }
        for id in &body.superchunks {
            state.reclaiming.remove(id);
            state.fill.remove(id);
        }
        save(store, &mut state)?;
        Ok(Ok(json!({ "reclaimed": body.superchunks })))
    })
    .await?
    .map(Json)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateBody {
    bucket: String,
    key: String,
    /// The lease of an update that is done (ends it).
    #[serde(default)]
    done: Option<u64>,
}

/// `POST /v1/raidp/update` `{"bucket", "key"}`: an in-place update of that RAIDP object is
/// about to write; answers `{"generation", "lease", "lease_ms"}` — the generation it may
/// update, and the lease that keeps compaction off its superchunks until it ends (`{"bucket",
/// "key", "done": lease}`) or lapses.
pub(crate) async fn update(
    State(meta): State<Shared>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: UpdateBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("expected {{\"bucket\", \"key\"}}: {e}")))?;
    let _raidp = meta.raidp.lock().await;
    blocking(&meta, move |store| {
        if let Some(lease) = body.done {
            if let Some(mut state) = load(store)? {
                if state.leases.remove(&lease).is_some() {
                    save(store, &mut state)?;
                }
            }
            return Ok(Ok(json!({ "lease": lease, "ended": true })));
        }
        let record = store.get_object(&body.bucket, &body.key)?;
        let Some(extents) = &record.raidp else {
            return Ok(Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_raidp",
                format!(
                    "{}/{} is erasure-coded: its units are immutable; in-place updates are for \
                     RAIDP objects",
                    body.bucket, body.key
                ),
            )));
        };
        let mut state = match load_or_refuse(store)? {
            Ok(state) => state,
            Err(refused) => return Ok(Err(refused)),
        };
        let now = super::now_ms();
        state.leases.retain(|_, (_, until)| *until > now);
        let lease = state.next_lease;
        state.next_lease += 1;
        let ids: BTreeSet<SuperchunkId> = extents.iter().map(|e| e.superchunk).collect();
        state.leases.insert(lease, (ids.into_iter().collect(), now + UPDATE_LEASE_MS));
        save(store, &mut state)?;
        Ok(Ok(json!({
            "generation": record.generation,
            "lease": lease,
            "lease_ms": UPDATE_LEASE_MS,
        })))
    })
    .await?
    .map(Json)
}
