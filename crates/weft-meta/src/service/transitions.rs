//! The transition routes of the meta service: plan (begin), commit, abort, renew, expire,
//! read and list regroup transitions (Okapi §4.5, §5.1). Routes, bodies and statuses:
//! docs/meta-api.md ("Transitions"); the messages are `weft_wire::transition`.
//!
//! Invariants:
//! - Meta plans and records; the executor moves the bytes. A begin computes
//!   `plan_regroup(placement, new layout, topology)` over the healthy disks of the up nodes
//!   (as repairs do) at the failure-domain level stored with the object, and stores it; the
//!   object itself changes only at commit, in one store transaction, so until then reads,
//!   degraded reads and repairs use the old layout and the old parity stays valid.
//! - Units a transition creates have unit generation = the transition id (store-wide unique),
//!   so they never share a key with a unit anyone else wrote; relocated data blocks keep
//!   their key (generation 0) on another disk.
//! - A delete list never names a unit the committed object references: relocation copies are
//!   left out when the object's block is now on that disk (a repair may have put it there),
//!   and a replaced transition's copies also when the new plan writes the same copy.
//! - A pending transition is leased to its executor (begin's `lease_ms`, moved by renew, at
//!   meta's clock). Expire removes only transitions whose deadline passed, each by its own
//!   id in a store transaction that checks the deadline again, so a renewal or commit that
//!   got in first keeps it; its delete list is an abort's. A dry run changes nothing.
//! - Every store call runs on a blocking task (see `blocking`).

use std::collections::{BTreeMap, BTreeSet};

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use weft_layout::{
    plan_regroup, restripe_io, DiskLocation, FailureDomain, LayoutError, Placement, PlannedUnit,
    RegroupPlan, StripedLayout, Topology, TransitionIo, TransitionMode, UnitId,
};
use weft_store::UnitKey;
use weft_wire::transition::{
    AbortTransitionReply, BeginTransition, CommitTransitionReply, PredictedIo, ReplacedTransition,
    TransitionInfo, TransitionList, TransitionPlan, TransitionRef, TransitionUnit, UnitPlace,
    UnitRelocation,
};

use super::digest_pages;
use super::liveness::Liveness;
use super::objects::{
    domains_name, full_disks_of, object_id, object_json, record_unit_key, too_few_or_full,
    topology_of, unit_key, units_json,
};
use super::MAX_LEASE_MS;
use super::{blocking, now_ms, ApiError, Shared};
use crate::{
    unit_name, MetaError, NewTransition, NodeRecord, ObjectName, ObjectRecord, Policy,
    TransitionConflict, TransitionRecord, DEFAULT_TRANSITION_LEASE_MS, MAX_LIST_LIMIT,
};

/// A `lease_ms` field: 1 to [`MAX_LEASE_MS`], as for repair leases.
fn lease_of(value: &Value) -> Result<u64, ApiError> {
    match value.as_u64() {
        Some(ms) if (1..=MAX_LEASE_MS).contains(&ms) => Ok(ms),
        _ => Err(ApiError::bad_request(format!(
            "lease_ms must be between 1 and {MAX_LEASE_MS}, not {value}"
        ))),
    }
}

type Plan = TransitionPlan<StripedLayout, Value, TransitionIo>;
type Nodes<'a> = BTreeMap<u32, &'a NodeRecord>;

fn parse_body<T: DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body must be {shape}: {e}")))
}

/// `400 bad_transition` with a machine-readable `reason`.
fn bad_transition(reason: &str, message: String) -> ApiError {
    let mut error = ApiError::new(StatusCode::BAD_REQUEST, "bad_transition", message);
    error.body["reason"] = json!(reason);
    error
}

fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

fn info(record: &TransitionRecord) -> TransitionInfo {
    TransitionInfo {
        id: record.id,
        bucket: record.bucket.clone(),
        key: record.key.clone(),
        generation: record.object_generation,
        mode: record.mode.to_string(),
        created_ms: record.created_ms,
    }
}

fn place(nodes: &Nodes, disk: DiskLocation) -> UnitPlace {
    UnitPlace {
        node_id: disk.node,
        endpoint: nodes.get(&disk.node).map(|n| n.endpoint.clone()),
        disk: disk.disk,
    }
}

fn transition_unit(
    nodes: &Nodes,
    unit: UnitId,
    disk: DiskLocation,
    key: UnitKey,
    len: u64,
) -> TransitionUnit {
    let at = place(nodes, disk);
    TransitionUnit {
        unit: unit_name(unit),
        node_id: at.node_id,
        endpoint: at.endpoint,
        disk: at.disk,
        unit_key: key.to_string(),
        len,
    }
}

/// The parity units of `placement` with their stored lengths.
fn parity_units(placement: &Placement) -> Vec<PlannedUnit> {
    let (layout, size) = (*placement.layout(), placement.object_size());
    placement
        .units()
        .filter(|(unit, _)| matches!(unit, UnitId::Parity { .. }))
        .map(|(unit, disk)| PlannedUnit { unit, disk, len: layout.stored_len(size, unit) })
        .collect()
}

/// The units `record` creates: its new parity, unit generation = its id.
fn create_units(record: &TransitionRecord, nodes: &Nodes) -> Result<Vec<TransitionUnit>, ApiError> {
    let object = object_id(record.object_generation);
    parity_units(&record.new_placement)
        .into_iter()
        .map(|u| {
            Ok(transition_unit(nodes, u.unit, u.disk, unit_key(object, u.unit, record.id)?, u.len))
        })
        .collect()
}

/// The copies `record`'s relocations make, except those `keep` says are in use.
fn relocation_copies(
    record: &TransitionRecord,
    nodes: &Nodes,
    keep: impl Fn(usize, DiskLocation) -> bool,
) -> Result<Vec<TransitionUnit>, ApiError> {
    let object = object_id(record.object_generation);
    let size = record.new_placement.object_size();
    record
        .relocations
        .iter()
        .filter(|r| !keep(r.block, r.to))
        .map(|r| {
            let unit = UnitId::Data(r.block);
            let len = record.old_layout.block_len(size, r.block);
            Ok(transition_unit(nodes, unit, r.to, unit_key(object, unit, 0)?, len))
        })
        .collect()
}

/// Whether the committed object `current` holds block `block` of the generation `record`
/// transitions on `disk` (then a copy there is the object's, not garbage).
fn in_use(
    current: Option<&ObjectRecord>,
    record: &TransitionRecord,
    block: usize,
    disk: DiskLocation,
) -> bool {
    current.is_some_and(|o| {
        o.generation == record.object_generation
            && o.placement.disk_of(UnitId::Data(block)) == Some(disk)
    })
}

/// The plan `record` stands for over the committed `object` as it is now.
fn plan_now(object: &ObjectRecord, record: &TransitionRecord) -> RegroupPlan {
    RegroupPlan {
        old: object.placement.clone(),
        new: record.new_placement.clone(),
        relocations: record.relocations.clone(),
        create: parity_units(&record.new_placement),
        delete: parity_units(&object.placement),
    }
}

/// The reply of a begin (and of a GET of one transition): everything the executor needs.
fn plan_reply(
    object: &ObjectRecord,
    record: &TransitionRecord,
    plan: &RegroupPlan,
    nodes: &[NodeRecord],
    states: &Liveness,
) -> Result<Plan, ApiError> {
    let by_id: Nodes = nodes.iter().map(|n| (n.node_id, n)).collect();
    let data_object = object_id(record.object_generation);
    let size = object.size();
    let create = plan
        .create
        .iter()
        .map(|u| {
            let key = unit_key(data_object, u.unit, record.id)?;
            Ok(transition_unit(&by_id, u.unit, u.disk, key, u.len))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let delete = plan
        .delete
        .iter()
        .map(|u| {
            Ok(transition_unit(&by_id, u.unit, u.disk, record_unit_key(object, u.unit)?, u.len))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let relocations = plan
        .relocations
        .iter()
        .map(|r| {
            let unit = UnitId::Data(r.block);
            Ok(UnitRelocation {
                unit: unit_name(unit),
                len: object.layout().block_len(size, r.block),
                unit_key: record_unit_key(object, unit)?.to_string(),
                from: place(&by_id, r.from),
                to: place(&by_id, r.to),
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(TransitionPlan {
        transition: info(record),
        object: object_json(object, units_json(object, nodes, Some(states))?),
        new_layout: *record.new_layout(),
        create,
        delete,
        relocations,
        predicted: PredictedIo {
            regroup: plan.io(),
            restripe: restripe_io(record.new_layout(), size),
        },
        replaced: None,
    })
}

/// `503 no_destination`: no disk of the topology can take `unit` under the new code.
fn no_destination(
    object: &ObjectRecord,
    layout: &StripedLayout,
    unit: UnitId,
    reason: &str,
    nodes_up: usize,
    usable_nodes: usize,
    usable_domains: usize,
) -> ApiError {
    let level = object.placement.failure_domain();
    let domains = domains_name(level);
    let mut error = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no_destination",
        format!(
            "no disk can take {} of object {:?} in bucket {:?} under {}: {reason}; {nodes_up} \
             nodes are up ({usable_nodes} with a usable disk, in {usable_domains} {domains}); \
             start more nodes, or choose a code with fewer units per group",
            unit_name(unit),
            object.key,
            object.bucket,
            layout.code
        ),
    );
    error.body["nodes_up"] = json!(nodes_up);
    error.body["usable_nodes"] = json!(usable_nodes);
    error.body["failure_domain"] = json!(level.to_string());
    error.body["usable_domains"] = json!(usable_domains);
    error
}

/// Plans the regroup of `object` to `layout` over the healthy disks of the up nodes.
fn plan(
    object: &ObjectRecord,
    layout: &StripedLayout,
    nodes: &[NodeRecord],
    live: &Liveness,
) -> Result<RegroupPlan, ApiError> {
    let old = object.layout();
    if (old.stripe_width, old.cell_bytes, old.block_bytes)
        != (layout.stripe_width, layout.cell_bytes, layout.block_bytes)
    {
        return Err(bad_transition(
            "striping_changed",
            format!(
                "a regroup keeps the striping and changes only the code: object {:?} has stripe \
                 width {}, cell {} B, block {} B, the new layout stripe width {}, cell {} B, \
                 block {} B; restripe instead (write the object again with the new policy)",
                object.key,
                old.stripe_width,
                old.cell_bytes,
                old.block_bytes,
                layout.stripe_width,
                layout.cell_bytes,
                layout.block_bytes
            ),
        ));
    }
    if layout == old {
        return Err(bad_transition(
            "same_layout",
            format!("object {:?} is already stored with this layout ({})", object.key, old.code),
        ));
    }
    let level: FailureDomain = object.placement.failure_domain();
    let (disks, nodes_up) = topology_of(nodes, live);
    let full = full_disks_of(nodes, live);
    let usable_nodes = disks.iter().map(|d| d.node).collect::<BTreeSet<u32>>().len();
    let usable_domains = disks.iter().map(|d| d.domain(level)).collect::<BTreeSet<_>>().len();
    let needed = layout.n().max(layout.stripe_width);
    let topology = match Topology::new(disks.clone()) {
        Ok(topology) => topology,
        Err(_) if usable_nodes == 0 => {
            return Err(too_few_or_full(level, nodes_up, &[], &full, 0, needed))
        }
        Err(e) => return Err(internal(e.to_string())),
    };
    plan_regroup(&object.placement, layout, &topology).map_err(|e| match e {
        LayoutError::TooFewDomains { available, needed, .. } => {
            too_few_or_full(level, nodes_up, &disks, &full, available, needed)
        }
        LayoutError::NoReplacement { unit, reason } => {
            no_destination(object, layout, unit, &reason, nodes_up, usable_nodes, usable_domains)
        }
        LayoutError::Transition { reason } => bad_transition("striping_changed", reason),
        other => ApiError::new(StatusCode::BAD_REQUEST, "invalid_policy", other.to_string()),
    })
}

/// `POST /v1/transitions`: plans and records a regroup of a committed object.
pub(crate) async fn begin(State(meta): State<Shared>, body: Bytes) -> Result<Json<Plan>, ApiError> {
    const SHAPE: &str =
        "{\"bucket\": s, \"key\": s, \"layout\": <full layout>, \"mode\": \"regroup\", \
                         \"lease_ms\": optional u64}";
    let mut body: Value = parse_body(&body, SHAPE)?;
    let lease_ms = match body.as_object_mut().and_then(|fields| fields.remove("lease_ms")) {
        None => DEFAULT_TRANSITION_LEASE_MS,
        Some(value) => lease_of(&value)?,
    };
    let body: BeginTransition<Value> = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("the body must be {SHAPE}: {e}")))?;
    match body.mode.as_deref() {
        None | Some("regroup") => {}
        Some("restripe") => {
            return Err(bad_transition(
                "restripe_is_a_write",
                "meta plans regroups only: a restripe rewrites the object, so write it again \
                 with the new policy (begin/commit with \"policy\")"
                    .into(),
            ))
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "mode {other:?} is not a transition mode meta plans: use \"regroup\""
            )))
        }
    }
    super::refuse_internal_change(&body.bucket, "transition an object")?;
    let layout: Policy = serde_json::from_value(body.layout)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_policy", e.to_string()))?;
    super::check_policy(&layout)?;
    let live = meta.liveness();
    let (bucket, key) = (body.bucket, body.key);
    let begun = blocking(&meta, move |store| {
        let object = store.get_object(&bucket, &key)?;
        if object.raidp.is_some() {
            return Ok(Err(bad_transition(
                "raidp_is_a_rewrite",
                format!(
                    "{bucket}/{key} is a RAIDP object: it has no parity units to regroup; it \
                     leaves the tier by a rewrite (begin/commit with \"policy\")"
                ),
            )));
        }
        let nodes = store.list_nodes()?;
        let now = now_ms();
        let plan = match plan(&object, &layout, &nodes, &live) {
            Ok(plan) => plan,
            Err(api) => return Ok(Err(api)),
        };
        let new = NewTransition {
            bucket,
            key,
            object_generation: object.generation,
            mode: TransitionMode::Regroup,
            old_layout: *object.layout(),
            new_placement: plan.new.clone(),
            relocations: plan.relocations.clone(),
            lease_ms,
        };
        let (record, replaced) = store.begin_transition(new, now)?;
        Ok(Ok((object, plan, record, replaced, nodes, now)))
    })
    .await?
    .map_err(|error| meta.unless_heartbeats_failed(error))?;
    let (object, plan, record, replaced, nodes, _) = begun;
    let mut reply = plan_reply(&object, &record, &plan, &nodes, &meta.liveness())?;
    let by_id: Nodes = nodes.iter().map(|n| (n.node_id, n)).collect();
    if let Some(old) = &replaced {
        let kept = |block: usize, to: DiskLocation| {
            in_use(Some(&object), old, block, to)
                || (old.object_generation == record.object_generation
                    && record.relocations.iter().any(|r| r.block == block && r.to == to))
        };
        reply.replaced = Some(ReplacedTransition {
            transition: info(old),
            create: create_units(old, &by_id)?,
            relocation_copies: relocation_copies(old, &by_id, kept)?,
        });
    }
    tracing::info!(
        bucket = %record.bucket,
        key = %record.key,
        id = record.id,
        from = %record.old_layout.code,
        to = %record.new_layout().code,
        create = reply.create.len(),
        relocations = reply.relocations.len(),
        replaced = ?replaced.as_ref().map(|t| t.id),
        "transition begun"
    );
    Ok(Json(reply))
}

const REF_SHAPE: &str = "{\"bucket\": s, \"key\": s, \"id\": u64, \"generation\": optional u64, \"digests\": optional {unit: hex}}";

/// `POST /v1/transitions/digests`: a page of digests of the new parity units of pending
/// transition `id` (body as a commit's, 1 to `MAX_DIGESTS_PER_REQUEST` digests), taken by its
/// commit (see `digest_pages`).
pub(crate) async fn digests(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let TransitionRef { bucket, key, id, digests, .. } = parse_body(&body, REF_SHAPE)?;
    let count = digests.len();
    digest_pages::check_count(count)?;
    let named = json!(digests);
    let digests = super::objects::digests_by_unit(digests)?;
    blocking(&meta, move |store| {
        let pending = store.get_transition(&bucket, &key)?.filter(|t| t.id == id);
        let Some(transition) = pending else {
            return Err(MetaError::TransitionConflict {
                bucket,
                key,
                id,
                conflict: TransitionConflict::NotPending,
            });
        };
        if let Some(data) = digests.keys().find(|u| matches!(u, UnitId::Data(_))) {
            let reason =
                format!("{} is a data unit: a transition writes parity only", unit_name(*data));
            return Err(MetaError::InvalidDigests { bucket, key, reason });
        }
        let missing =
            |unit| MetaError::NoSuchUnit { bucket: bucket.clone(), key: key.clone(), unit };
        let owner = digest_pages::of_transition(id);
        digest_pages::put(store, &owner, &transition.new_placement, &digests, &named, missing)
    })
    .await?;
    Ok(Json(json!({ "id": id, "digests": count })))
}

/// `POST /v1/transitions/commit`: swaps the object to its new layout and parity.
pub(crate) async fn commit(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<CommitTransitionReply<Value>>, ApiError> {
    let body: TransitionRef = parse_body(&body, REF_SHAPE)?;
    let TransitionRef { bucket, key, id, generation, digests } = body;
    let mut digests = super::objects::digests_by_unit(digests)?;
    meta.changes.note(&bucket, &key);
    let (pending, new, old, nodes) = blocking(&meta, move |store| {
        let pending = store.get_transition(&bucket, &key)?.filter(|t| t.id == id);
        let owner = digest_pages::of_transition(id);
        if pending.is_some() {
            let invalid = |reason| MetaError::InvalidDigests {
                bucket: bucket.clone(),
                key: key.clone(),
                reason,
            };
            digest_pages::take(store, &owner, &mut digests, invalid)?;
        }
        match store.commit_transition(&bucket, &key, id, &digests) {
            Ok((new, old)) => {
                digest_pages::delete(store, &owner)?;
                Ok((pending, new, old, store.list_nodes()?))
            }
            Err(MetaError::TransitionConflict {
                conflict: TransitionConflict::NotPending | TransitionConflict::ObjectGone,
                ..
            }) if generation.is_some_and(|planned| {
                store.get_object(&bucket, &key).is_ok_and(|o| o.generation != planned)
            }) =>
            {
                let current = store.get_object(&bucket, &key)?.generation;
                let planned = generation.expect("checked above");
                Err(MetaError::TransitionConflict {
                    bucket,
                    key,
                    id,
                    conflict: TransitionConflict::ObjectReplaced { planned, current },
                })
            }
            Err(other) => Err(other),
        }
    })
    .await?;
    let by_id: Nodes = nodes.iter().map(|n| (n.node_id, n)).collect();
    let mut delete = Vec::new();
    for planned in parity_units(&old.placement) {
        let key = record_unit_key(&old, planned.unit)?;
        delete.push(transition_unit(&by_id, planned.unit, planned.disk, key, planned.len));
    }
    for (unit, disk) in old.placement.units() {
        if matches!(unit, UnitId::Data(_)) && new.placement.disk_of(unit) != Some(disk) {
            let len = old.layout().stored_len(old.size(), unit);
            delete.push(transition_unit(&by_id, unit, disk, record_unit_key(&old, unit)?, len));
        }
    }
    let transition = TransitionInfo {
        id,
        bucket: new.bucket.clone(),
        key: new.key.clone(),
        generation: new.generation,
        mode: pending.as_ref().map_or(TransitionMode::Regroup, |t| t.mode).to_string(),
        created_ms: pending.as_ref().map_or(0, |t| t.created_ms),
    };
    tracing::info!(
        bucket = %new.bucket,
        key = %new.key,
        id,
        from = %old.layout().code,
        to = %new.layout().code,
        delete = delete.len(),
        "transition committed"
    );
    let units = units_json(&new, &nodes, Some(&meta.liveness()))?;
    Ok(Json(CommitTransitionReply { transition, object: object_json(&new, units), delete }))
}

/// The units an aborted `record` leaves to delete: its new parity, and its relocation copies
/// except those the committed object `current` holds.
fn aborted_units(
    record: &TransitionRecord,
    current: Option<&ObjectRecord>,
    by_id: &Nodes,
) -> Result<Vec<TransitionUnit>, ApiError> {
    let mut delete = create_units(record, by_id)?;
    delete
        .extend(relocation_copies(record, by_id, |block, to| in_use(current, record, block, to))?);
    Ok(delete)
}

/// `POST /v1/transitions/abort`: forgets a pending transition; lists its units to delete.
pub(crate) async fn abort(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<AbortTransitionReply>, ApiError> {
    let body: TransitionRef = parse_body(&body, REF_SHAPE)?;
    let (record, current, nodes) = blocking(&meta, move |store| {
        let record = store.abort_transition(&body.bucket, &body.key, body.id)?;
        digest_pages::delete(store, &digest_pages::of_transition(body.id))?;
        let current = match store.get_object(&body.bucket, &body.key) {
            Ok(object) => Some(object),
            Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => None,
            Err(other) => return Err(other),
        };
        Ok((record, current, store.list_nodes()?))
    })
    .await?;
    let by_id: Nodes = nodes.iter().map(|n| (n.node_id, n)).collect();
    let delete = aborted_units(&record, current.as_ref(), &by_id)?;
    tracing::info!(bucket = %record.bucket, key = %record.key, id = record.id, "transition aborted");
    Ok(Json(AbortTransitionReply { transition: info(&record), delete }))
}

/// `GET /v1/transitions`: pending transitions, at most [`MAX_LIST_LIMIT`].
pub(crate) async fn list(State(meta): State<Shared>) -> Result<Json<TransitionList>, ApiError> {
    let (records, pending) = blocking(&meta, |store| {
        Ok((store.list_transitions(None, MAX_LIST_LIMIT)?, store.transition_count()?))
    })
    .await?;
    Ok(Json(TransitionList {
        transitions: records.iter().map(info).collect(),
        pending: pending as u64,
    }))
}

/// `GET /v1/transitions/{bucket}/{key}`: the plan of a pending transition, as begin returned
/// it (over the object as it is now), so an executor can resume after a crash.
pub(crate) async fn get(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
) -> Result<Json<Plan>, ApiError> {
    let found = blocking(&meta, move |store| {
        let Some(record) = store.get_transition(&bucket, &key)? else {
            let mut error = ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_transition",
                format!("no transition is pending for object {key:?} in bucket {bucket:?}"),
            );
            error.body["pending"] = Value::Null;
            return Ok(Err(error));
        };
        let object = store.get_object(&bucket, &key)?;
        Ok(Ok((record, object, store.list_nodes()?)))
    })
    .await??;
    let (record, object, nodes) = found;
    let plan = plan_now(&object, &record);
    Ok(Json(plan_reply(&object, &record, &plan, &nodes, &meta.liveness())?))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewBody {
    bucket: String,
    key: String,
    id: u64,
    #[serde(default)]
    lease_ms: Option<Value>,
}

/// `POST /v1/transitions/renew`: moves the lease of a pending transition to now + `lease_ms`.
pub(crate) async fn renew(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: RenewBody =
        parse_body(&body, "{\"bucket\": s, \"key\": s, \"id\": u64, \"lease_ms\": optional u64}")?;
    let lease_ms = match &body.lease_ms {
        None => DEFAULT_TRANSITION_LEASE_MS,
        Some(value) => lease_of(value)?,
    };
    let record = blocking(&meta, move |store| {
        let deadline = now_ms().saturating_add(lease_ms);
        store.renew_transition(&body.bucket, &body.key, body.id, deadline)
    })
    .await?;
    tracing::debug!(
        bucket = %record.bucket, key = %record.key, id = record.id,
        lease_deadline_ms = record.lease_deadline_ms, "transition lease renewed"
    );
    Ok(Json(json!({ "id": record.id, "lease_deadline_ms": record.lease_deadline_ms })))
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ExpireBody {
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/transitions/expire`: aborts every pending transition whose lease expired (its
/// executor is presumed dead) and lists, for each, the units to delete as an abort does.
pub(crate) async fn expire(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: ExpireBody = if body.iter().all(u8::is_ascii_whitespace) {
        ExpireBody::default()
    } else {
        parse_body(&body, "{\"dry_run\": optional bool}")?
    };
    let dry_run = body.dry_run;
    let now = now_ms();
    let (expired, pending, nodes) = blocking(&meta, move |store| {
        let mut expired = Vec::new();
        let mut pending = 0u64;
        let mut after: Option<ObjectName> = None;
        loop {
            let page = store.list_transitions(after.as_ref(), MAX_LIST_LIMIT)?;
            for transition in &page {
                if !transition.lease_expired(now) {
                    pending += 1;
                    continue;
                }
                let removed = if dry_run {
                    Some(transition.clone())
                } else {
                    // None: committed, aborted, replaced or renewed since the listing.
                    store.expire_transition(
                        &transition.bucket,
                        &transition.key,
                        transition.id,
                        now,
                    )?
                };
                if let Some(record) = removed.as_ref().filter(|_| !dry_run) {
                    digest_pages::delete(store, &digest_pages::of_transition(record.id))?;
                }
                if let Some(record) = removed {
                    let current = match store.get_object(&record.bucket, &record.key) {
                        Ok(object) => Some(object),
                        Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => None,
                        Err(other) => return Err(other),
                    };
                    expired.push((record, current));
                }
            }
            match page.last() {
                Some(last) if page.len() == MAX_LIST_LIMIT => {
                    after = Some(ObjectName { bucket: last.bucket.clone(), key: last.key.clone() })
                }
                _ => break,
            }
        }
        Ok((expired, pending, store.list_nodes()?))
    })
    .await?;
    let by_id: Nodes = nodes.iter().map(|n| (n.node_id, n)).collect();
    let mut answer = Vec::new();
    for (record, current) in &expired {
        let delete = aborted_units(record, current.as_ref(), &by_id)?;
        if !dry_run {
            tracing::info!(
                bucket = %record.bucket, key = %record.key, id = record.id,
                lease_deadline_ms = record.lease_deadline_ms, delete = delete.len(),
                "abandoned transition expired (rolled back)"
            );
        }
        answer.push(json!({
            "id": record.id,
            "bucket": record.bucket,
            "key": record.key,
            "created_ms": record.created_ms,
            "lease_deadline_ms": record.lease_deadline_ms,
            "delete": delete,
        }));
    }
    Ok(Json(json!({ "expired": answer, "pending": pending, "dry_run": dry_run, "now_ms": now })))
}
