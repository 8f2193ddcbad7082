//! The repair side of the meta service: the detector that queues repairs of units on down
//! nodes and failed disks, the routes a repair executor uses (report, take, complete, fail,
//! list) and the under-protection count of `/v1/status`. Routes, bodies and statuses:
//! docs/meta-api.md ("Repairs").
//!
//! Invariants:
//! - The queue lives in the store (redb), so it survives a meta restart; the detector keeps
//!   nothing that matters in memory and recomputes everything after a restart.
//! - A node is judged down *for repair* only once meta has run for longer than
//!   `down_after_ms` of its running time (`liveness`): until then a restarted meta has not
//!   had the time to hear every live node, and judging by old heartbeats would queue every
//!   unit of the cluster. A failed or missing disk is judged only from a heartbeat received
//!   since meta started. Every "is this node down" here is `Liveness::is_down`.
//! - The detector queues only units of committed objects, with their generation and the disk
//!   it saw them on, checked by the store in the enqueue's transaction: a unit relocated or an
//!   object replaced between the scan and the enqueue is not queued. The scan reads the
//!   placed-units index (units by node and disk, kept in each commit's transaction), only
//!   for the disks with a failure: its cost is their units, not the cluster's objects.
//! - Before a task is handed out it is re-checked: a task whose object was deleted or
//!   replaced, or an `unavailable` task whose disk is positively available again (its node
//!   heartbeats and reports the disk healthy), is dropped, not handed out.
//! - A full disk (state `full` in its node's heartbeat) is not a failure: its units are not
//!   queued, they stay sources for reads and repairs, and it is never a destination.
//! - A destination is a healthy, not full disk of a node that is up now (heard within
//!   `down_after_ms`), chosen by `Placement::replacement_for` at the object's own
//!   failure-domain level (stored in its placement, not meta's current level), over the
//!   nodes' current racks (or, for a damaged unit whose node is healthy and when no other
//!   disk qualifies, its own disk unless full), so relocating there keeps the placement
//!   rules; the store checks them again at completion. It is never a disk a pending transition of the object
//!   copies the same data block to (the transition's abort would delete that copy).
//! - Units are named with the object's parity generation (see `objects::unit_key`); a
//!   committed transition drops the object's queued parity repairs in its transaction, so a
//!   lease on one is lost and a parity rebuilt under the old layout is never installed.
//! - A repair completes only before its lease's deadline (by meta's clock), so a unit an
//!   executor wrote is referenced within one lease of its write or never: the sweeper spares
//!   units younger than a grace longer than any lease (see `gc`).
//! - A failed task backs off: it is requeued with a not-before time ([`backoff_ms`]: 1 s
//!   doubling per attempt up to [`MAX_BACKOFF_MS`]), stored with the task, and a take skips
//!   tasks not yet due. A failure with cause `unrecoverable` makes the task *unfound* and backs
//!   off at least [`UNFOUND_BACKOFF_MS`]; when the detector sees a down node up again it makes
//!   every unfound task due at once.
//! - A completed relocation off another disk queues the replaced copy for deletion (see
//!   `deletions`); a destination is never a disk holding a queued copy of the same unit.
//! - Every loop is bounded: scans walk the store page by page, a take drops at most
//!   [`MAX_DROPPED_PER_TAKE`] tasks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::{
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::watch;
use weft_layout::{DiskLocation, DomainId, LayoutError, Topology};
use weft_wire::repair::{
    CompleteRepair, CompleteRepairReply, FailCause, FailRepair, FailRepairReply, RepairDestination,
    RepairList, RepairReport, RepairReportReply, RepairResult, RepairTaskInfo, TakeRepair,
    TakeRepairReply,
};

use super::liveness::Liveness;
use super::objects::{domains_name, full_disks_of, object_json, topology_of, units_json};
use super::{blocking, now_ms, ApiError, Shared};
use crate::{
    parse_unit_name, unit_name, Enqueued, MetaError, MetaStore, NodeRecord, ObjectName, PlacedUnit,
    RepairKind, RepairLease, RepairOutcome, RepairRequest, RepairTask, MAX_LIST_LIMIT,
};

/// Default period of the detector.
pub const DEFAULT_REPAIR_SCAN_MS: u64 = 1000;

/// Default longest time between two full scans when the failures seen do not change.
pub const DEFAULT_FULL_RESCAN_MS: u64 = 10_000;

/// Longest lease a take may ask for (an hour): a lost executor must not pin a task for long.
pub const MAX_LEASE_MS: u64 = 3_600_000;

/// Most tasks one take drops (stale or no longer needed) before answering `{"task": null}`.
pub const MAX_DROPPED_PER_TAKE: u64 = 1000;

/// Back-off after a task's first failed attempt; it doubles with each further attempt.
pub const MIN_BACKOFF_MS: u64 = 1000;

/// Longest back-off of a failed task (10 minutes).
pub const MAX_BACKOFF_MS: u64 = 600_000;

/// Shortest back-off of an unfound unit (too few units of its group readable): retried
/// rarely, and at once when a node returns (the detector wakes unfound tasks then).
pub const UNFOUND_BACKOFF_MS: u64 = 60_000;

/// Most destinations a take passes over because they hold a queued copy of the unit.
const MAX_DESTINATION_RETRIES: usize = 4;

/// Tasks `GET /v1/repairs` lists.
pub const LISTED_TASKS: usize = 100;

/// Longest reason or error text kept with a task; longer ones are cut (at a char boundary).
pub const MAX_REASON_BYTES: usize = 1024;

/// How the repair detector runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairConfig {
    /// How often the detector looks at the nodes; a change of the failures seen triggers a
    /// full scan of the objects at once.
    pub scan_ms: u64,
    /// Longest time between two full scans when the failures seen do not change.
    pub full_rescan_ms: u64,
}

impl Default for RepairConfig {
    fn default() -> RepairConfig {
        RepairConfig { scan_ms: DEFAULT_REPAIR_SCAN_MS, full_rescan_ms: DEFAULT_FULL_RESCAN_MS }
    }
}

/// What meta judges unavailable for repair at one instant (see the module invariants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failures {
    /// Meta has run for longer than `down_after_ms`: silence means down.
    judging_silence: bool,
    /// Every node meta has a record of.
    known: BTreeSet<u32>,
    /// Nodes silent for more than `down_after_ms` (empty while not judging silence).
    down: BTreeSet<u32>,
    /// Per node heard since meta started and not down: each reported disk and its failure.
    reported: BTreeMap<u32, BTreeMap<u32, Option<String>>>,
}

impl Failures {
    pub(crate) fn judge(nodes: &[NodeRecord], live: &Liveness) -> Failures {
        let judging_silence = live.judging_silence();
        let down: BTreeSet<u32> = if judging_silence {
            nodes.iter().filter(|n| live.is_down(n)).map(|n| n.node_id).collect()
        } else {
            BTreeSet::new()
        };
        let reported = nodes
            .iter()
            .filter(|n| live.heard_since_start(n) && !down.contains(&n.node_id))
            .map(|n| {
                let disks = n.disks.iter().map(|d| (d.index, d.failed.clone())).collect();
                (n.node_id, disks)
            })
            .collect();
        let known = nodes.iter().map(|n| n.node_id).collect();
        Failures { judging_silence, known, down, reported }
    }

    /// Why a unit on `disk` needs repair, or None when meta has no evidence that it does.
    pub(crate) fn reason(&self, disk: DiskLocation) -> Option<String> {
        let node = disk.node;
        if !self.known.contains(&node) {
            return self.judging_silence.then(|| format!("node {node} unknown to meta"));
        }
        if self.down.contains(&node) {
            return Some(format!("node {node} down"));
        }
        match self.reported.get(&node)?.get(&disk.disk) {
            Some(None) => None,
            Some(Some(cause)) => Some(format!("disk {node}/{} failed: {cause}", disk.disk)),
            None => Some(format!("disk {node}/{} not reported by node {node}", disk.disk)),
        }
    }
}

/// Whether `disk` is positively available now: its node is up and reports the disk healthy.
fn available_now(nodes: &[NodeRecord], disk: DiskLocation, live: &Liveness) -> bool {
    nodes.iter().any(|n| {
        n.node_id == disk.node
            && !live.is_down(n)
            && n.disks.iter().any(|d| d.index == disk.disk && d.failed.is_none())
    })
}

/// Visits every committed object of every bucket, page by page.
pub(crate) fn for_each_object(
    store: &dyn MetaStore,
    mut visit: impl FnMut(&[crate::ObjectRecord]) -> Result<(), MetaError>,
) -> Result<(), MetaError> {
    for bucket in store.list_buckets()? {
        let mut after: Option<String> = None;
        loop {
            let page = match store.list_objects(&bucket.name, "", after.as_deref(), MAX_LIST_LIMIT)
            {
                Ok(page) => page,
                // Deleted since it was listed: nothing to scan.
                Err(MetaError::NoSuchBucket { .. }) => break,
                Err(other) => return Err(other),
            };
            visit(&page.objects)?;
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(())
}

/// Visits, a page at a time, every unit of a committed object that sits on a disk
/// `failures` gives a reason for, with that reason — read from the placed-units index, so it
/// costs the units of the failed disks, not the cluster's objects.
fn for_each_failed_unit(
    store: &dyn MetaStore,
    failures: &Failures,
    mut visit: impl FnMut(Vec<(PlacedUnit, String)>) -> Result<(), MetaError>,
) -> Result<(), MetaError> {
    for (node, disk) in store.placed_disks()? {
        // `reason` reads the node and the disk, never the rack.
        if failures.reason(DiskLocation { rack: 0, node, disk }).is_none() {
            continue;
        }
        let mut after: Option<PlacedUnit> = None;
        loop {
            let page = store.placed_units(node, Some(disk), after.as_ref(), MAX_LIST_LIMIT)?;
            let full = page.len() == MAX_LIST_LIMIT;
            after = page.last().cloned();
            let failed = page
                .into_iter()
                .filter_map(|placed| failures.reason(placed.disk).map(|reason| (placed, reason)))
                .collect();
            visit(failed)?;
            if !full {
                break;
            }
        }
    }
    Ok(())
}

/// Queues a repair of every unit of every committed object that `failures` says needs one;
/// returns how many tasks were queued.
fn scan(store: &dyn MetaStore, failures: &Failures, now: u64) -> Result<usize, MetaError> {
    let mut queued = 0;
    for_each_failed_unit(store, failures, |failed| {
        let requests: Vec<RepairRequest> = failed
            .into_iter()
            .map(|(placed, reason)| RepairRequest {
                object: placed.object,
                generation: placed.generation,
                unit: placed.unit,
                kind: RepairKind::Unavailable,
                reason,
                seen_on: Some(placed.disk),
            })
            .collect();
        if !requests.is_empty() {
            queued += store.enqueue_repairs(&requests, now)?;
        }
        Ok(())
    })?;
    Ok(queued)
}

/// Units of committed objects that are on an unavailable disk or queued for repair (with the
/// object's current generation), each counted once: the units on failed disks from the
/// placed-units index, plus each queued task of a current object whose unit is elsewhere.
pub(crate) fn under_protected_units(
    store: &dyn MetaStore,
    failures: &Failures,
) -> Result<u64, MetaError> {
    let mut count = 0;
    for_each_failed_unit(store, failures, |failed| {
        count += failed.len() as u64;
        Ok(())
    })?;
    let mut queued: BTreeMap<(ObjectName, weft_layout::UnitId), u64> = BTreeMap::new();
    let mut after = None;
    loop {
        let page = store.list_repairs(after, MAX_LIST_LIMIT)?;
        let Some(&(last, _)) = page.last() else { break };
        queued.extend(page.into_iter().map(|(_, t)| ((t.object, t.unit), t.generation)));
        after = Some(last);
    }
    for ((name, unit), generation) in queued {
        let object = match store.get_object(&name.bucket, &name.key) {
            Ok(object) => object,
            Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => continue,
            Err(other) => return Err(other),
        };
        let on_failed =
            object.placement.disk_of(unit).is_some_and(|disk| failures.reason(disk).is_some());
        if object.generation == generation && !on_failed {
            count += 1;
        }
    }
    Ok(count)
}

/// The detector: every `scan_ms`, judges the failures; scans the units of every failed disk
/// when the failures changed or `full_rescan_ms` passed since the last scan. Returns when `stopped` turns true.
pub(crate) async fn detect(meta: Shared, mut stopped: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_millis(meta.repair.scan_ms));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Failures, u64)> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        if !meta.leadership.leads() {
            // Another meta on the store leads: it judges failures. Scan afresh when this one
            // leads again.
            last = None;
            continue;
        }
        let live = meta.liveness();
        let full_rescan_ms = meta.repair.full_rescan_ms;
        let previous = last.take();
        let result = blocking(&meta, move |store| {
            let now = now_ms();
            let failures = Failures::judge(&store.list_nodes()?, &live);
            let returned = previous
                .as_ref()
                .is_some_and(|(seen, _)| seen.down.iter().any(|n| !failures.down.contains(n)));
            if returned {
                // A node came back: a group too damaged to rebuild may be readable again.
                let woken = store.wake_unfound_repairs()?;
                if woken > 0 {
                    tracing::info!(woken, "a node returned: unfound repairs are due again");
                }
            }
            let due = match &previous {
                Some((seen, at)) => *seen != failures || now.saturating_sub(*at) >= full_rescan_ms,
                None => true,
            };
            if !due {
                return Ok((previous.expect("not due only after a scan"), None));
            }
            let queued = scan(store, &failures, now)?;
            // Stripes of deleted geometric buckets left to drop (none, nearly always).
            if let Err(error) = super::geometric::drop_deleted_buckets_stripes(store) {
                tracing::warn!(%error, "could not drop stripes of deleted geometric buckets");
            }
            Ok(((failures, now), Some(queued)))
        })
        .await;
        match result {
            Ok((seen, queued)) => {
                if let Some(queued) = queued.filter(|&q| q > 0) {
                    tracing::info!(queued, down = ?seen.0.down, "repairs queued");
                }
                last = Some(seen);
            }
            // Keep going: the next tick scans again (`last` is cleared).
            Err(error) => tracing::error!(error = ?error.body, "repair scan failed"),
        }
    }
}

/// Cuts `text` to at most [`MAX_REASON_BYTES`] bytes at a char boundary.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_REASON_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

fn parse_body<T: DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body must be {shape}: {e}")))
}

fn parse_task_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!("task id {text:?} is not a number (ids come from take)"))
    })
}

fn task_info(task_id: u64, task: &RepairTask) -> RepairTaskInfo {
    RepairTaskInfo {
        task_id,
        bucket: task.object.bucket.clone(),
        key: task.object.key.clone(),
        generation: task.generation,
        unit: unit_name(task.unit),
        reason: task.reason.clone(),
        kind: task.kind,
        attempts: task.attempts,
        deadline_ms: task.lease_deadline_ms,
        enqueued_ms: task.enqueued_ms,
        last_error: task.last_error.clone(),
        not_before_ms: task.not_before_ms,
        unfound: task.unfound,
    }
}

/// The back-off of a task after a failed attempt (the `attempts`-th lease): 1 s doubling per
/// attempt up to [`MAX_BACKOFF_MS`]; an unfound unit waits at least [`UNFOUND_BACKOFF_MS`].
pub(crate) fn backoff_ms(attempts: u32, unfound: bool) -> u64 {
    let doublings = attempts.saturating_sub(1).min(30);
    let backoff = MIN_BACKOFF_MS.saturating_mul(1 << doublings).min(MAX_BACKOFF_MS);
    if unfound {
        backoff.max(UNFOUND_BACKOFF_MS)
    } else {
        backoff
    }
}

fn invalid_unit(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_unit", message)
}

fn lease_lost(task_id: u64, deadline_ms: u64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "lease_lost",
        format!(
            "task {task_id} has no lease with deadline {deadline_ms}: the lease expired and the \
             task was taken again, or the task was completed, dropped, or failed (and requeued \
             under a new id); do not count this repair"
        ),
    )
}

fn lease_expired(task_id: u64, deadline_ms: u64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "lease_lost",
        format!(
            "the lease of task {task_id} expired at {deadline_ms}: a repair completes within its \
             lease or not at all (the task is free to take again; the unit written for it is \
             garbage)"
        ),
    )
}

/// `POST /v1/repairs`: a client reports a corrupt or missing unit.
pub(crate) async fn report(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<RepairReportReply>, ApiError> {
    let report: RepairReport = parse_body(
        &body,
        "{\"bucket\": s, \"key\": s, \"generation\": u64, \"unit\": \"d3\"|\"p1.0\", \"reason\": s, \"digest_mismatch\": optional bool}",
    )?;
    let unit = parse_unit_name(&report.unit).ok_or_else(|| {
        invalid_unit(format!(
            "unit {:?} is not a unit name: use d<block> or p<group>.<index>, e.g. d3 or p1.0",
            report.unit
        ))
    })?;
    let mismatch = report.digest_mismatch;
    let reply = blocking(&meta, move |store| {
        let object = match store.get_object(&report.bucket, &report.key) {
            Ok(object) => object,
            Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => {
                return Ok(Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "no_such_object",
                    format!("no committed object {:?} in bucket {:?}", report.key, report.bucket),
                )))
            }
            Err(other) => return Err(other),
        };
        if object.generation != report.generation {
            return Ok(Ok(RepairReportReply { queued: false, stale: true }));
        }
        if object.placement.disk_of(unit).is_none() {
            return Ok(Err(invalid_unit(format!(
                "object {:?} in bucket {:?} (generation {}) has no unit {}",
                report.key, report.bucket, object.generation, report.unit
            ))));
        }
        let request = RepairRequest {
            object: ObjectName { bucket: report.bucket, key: report.key },
            generation: report.generation,
            unit,
            kind: RepairKind::Damaged,
            reason: bounded(&report.reason),
            seen_on: None,
        };
        Ok(Ok(match store.enqueue_repair(&request, now_ms())? {
            Enqueued::Queued => RepairReportReply { queued: true, stale: false },
            Enqueued::AlreadyQueued => RepairReportReply { queued: false, stale: false },
            Enqueued::Stale => RepairReportReply { queued: false, stale: true },
        }))
    })
    .await??;
    if mismatch && !reply.stale {
        meta.digest_mismatches.fetch_add(1, Ordering::Relaxed);
    }
    Ok(Json(reply))
}

/// `POST /v1/repairs/take`: leases the oldest due task with its object and a destination.
pub(crate) async fn take(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<TakeRepairReply<Value>>, ApiError> {
    let take: TakeRepair = parse_body(&body, "{\"lease_ms\": u64}")?;
    if take.lease_ms == 0 || take.lease_ms > MAX_LEASE_MS {
        return Err(ApiError::bad_request(format!(
            "lease_ms must be between 1 and {MAX_LEASE_MS}, not {}",
            take.lease_ms
        )));
    }
    let live = meta.liveness();
    // Bin stripes' destinations change their bucket's geometric state (a placement group's
    // replacement disks): under its lock, like a pack's plan.
    let _geometric = meta.geometric.lock().await;
    let reply = blocking(&meta, move |store| take_due(store, take.lease_ms, &live)).await??;
    Ok(Json(reply))
}

/// Removes a task not to be carried out; a lease already lost (too short a lease) is fine.
fn drop_task(store: &dyn MetaStore, lease: &RepairLease, why: &str) -> Result<(), MetaError> {
    tracing::info!(
        task_id = lease.task_id,
        bucket = %lease.task.object.bucket,
        key = %lease.task.object.key,
        unit = %unit_name(lease.task.unit),
        why,
        "repair task dropped"
    );
    match store.complete_repair(lease) {
        Ok(()) | Err(MetaError::LeaseLost { .. }) => Ok(()),
        Err(other) => Err(other),
    }
}

fn take_due(
    store: &dyn MetaStore,
    lease_ms: u64,
    live: &Liveness,
) -> Result<Result<TakeRepairReply<Value>, ApiError>, MetaError> {
    let nodes = store.list_nodes()?;
    let mut dropped = 0;
    while dropped < MAX_DROPPED_PER_TAKE {
        let now = now_ms();
        let Some(lease) = store.take_repair(now, lease_ms)? else {
            return Ok(Ok(nothing(dropped)));
        };
        let task = &lease.task;
        let object = match store.get_object(&task.object.bucket, &task.object.key) {
            Ok(object) if object.generation == task.generation => object,
            Ok(_) | Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => {
                drop_task(store, &lease, "the object was deleted or replaced")?;
                dropped += 1;
                continue;
            }
            Err(other) => return Err(other),
        };
        let Some(current) = object.placement.disk_of(task.unit) else {
            drop_task(store, &lease, "the object has no such unit")?;
            dropped += 1;
            continue;
        };
        if task.kind == RepairKind::Unavailable && available_now(&nodes, current, live) {
            drop_task(store, &lease, "the unit's node is up again and its disk healthy")?;
            dropped += 1;
            continue;
        }
        // A pending transition's relocation copy of this block must stay its own.
        let copies: Vec<DomainId> = match store.get_transition(&object.bucket, &object.key)? {
            Some(t) if t.object_generation == object.generation => t
                .relocations
                .iter()
                .filter(|r| weft_layout::UnitId::Data(r.block) == task.unit)
                .map(|r| DomainId::Disk { node: r.to.node, disk: r.to.disk })
                .collect(),
            _ => Vec::new(),
        };
        // A damaged unit on a healthy node is rebuilt in place when no other disk keeps
        // the rules (the executor replaces the bad copy) — not on a full disk, which would
        // refuse the rebuilt copy after the bad one is deleted.
        // Never onto a disk holding a queued (replaced) copy of this unit: that copy is
        // about to be deleted (see `deletions`). Rare: a unit repaired back where it was.
        let full_here = full_disks_of(&nodes, live)
            .iter()
            .any(|d| (d.node, d.disk) == (current.node, current.disk));
        let mut copies = copies;
        let unit_key = super::objects::record_unit_key(&object, task.unit)
            .map(|k| k.to_string())
            .unwrap_or_default();
        // A bin stripe's unit stays with its placement group: rebuilt in place when only
        // damaged, else on the disk that replaces its member for every stripe of the group
        // (so an object's chunks stay on one disk).
        let geometric = match object.bucket == crate::GEOMETRIC_BUCKET {
            true => super::geometric::repair_destination(
                store,
                &object,
                current,
                task.kind == RepairKind::Damaged
                    && !full_here
                    && available_now(&nodes, current, live),
                &nodes,
                live,
            )?,
            false => None,
        };
        let mut chosen = match geometric {
            Some(disk) => Ok(disk),
            None => destination(&object, task.unit, &nodes, live, &copies),
        };
        for _ in 0..MAX_DESTINATION_RETRIES {
            match chosen {
                Ok(disk) if super::deletions::is_queued(store, disk, &unit_key)? => {
                    copies.push(DomainId::Disk { node: disk.node, disk: disk.disk });
                    chosen = destination(&object, task.unit, &nodes, live, &copies);
                }
                _ => break,
            }
        }
        let chosen = match chosen {
            Err(_)
                if task.kind == RepairKind::Damaged
                    && !full_here
                    && available_now(&nodes, current, live) =>
            {
                Ok(current)
            }
            other => other,
        };
        return match chosen {
            Ok(disk) => {
                let endpoint = nodes
                    .iter()
                    .find(|n| n.node_id == disk.node)
                    .map(|n| n.endpoint.clone())
                    .expect("destinations are disks of known nodes");
                let units = match units_json(&object, &nodes, Some(live)) {
                    Ok(units) => units,
                    Err(api) => return Ok(Err(api)),
                };
                // Exactly the body of GET (which names the unfound units).
                let mut body = object_json(&object, units);
                let unfound = super::lost::unfound_units(store, &object)?;
                if !unfound.is_empty() {
                    body["unfound_units"] = json!(unfound);
                }
                let reply = TakeRepairReply {
                    task: Some(task_info(lease.task_id, task)),
                    object: Some(body),
                    destination: Some(RepairDestination {
                        node_id: disk.node,
                        disk: disk.disk,
                        endpoint,
                    }),
                    dropped,
                };
                tracing::info!(
                    task_id = lease.task_id,
                    bucket = %task.object.bucket,
                    key = %task.object.key,
                    unit = %unit_name(task.unit),
                    attempts = task.attempts,
                    node_id = disk.node,
                    disk = disk.disk,
                    "repair leased"
                );
                Ok(Ok(reply))
            }
            Err(api) => {
                let message = api.body["message"].as_str().unwrap_or("no destination").to_string();
                let not_before = now.saturating_add(backoff_ms(task.attempts, false));
                match store.fail_repair_until(&lease, &message, Some(not_before), false) {
                    Ok(_) | Err(MetaError::LeaseLost { .. }) => {}
                    Err(other) => return Err(other),
                }
                Ok(Err(api))
            }
        };
    }
    Ok(Ok(nothing(dropped)))
}

fn nothing(dropped: u64) -> TakeRepairReply<Value> {
    TakeRepairReply { task: None, object: None, destination: None, dropped }
}

/// A disk to rebuild `unit` of `object` on: a healthy disk of an up node outside `avoid`,
/// keeping the placement rules; else `503 no_destination` saying what is missing.
fn destination(
    object: &crate::ObjectRecord,
    unit: weft_layout::UnitId,
    nodes: &[NodeRecord],
    live: &Liveness,
    avoid: &[DomainId],
) -> Result<DiskLocation, ApiError> {
    let level = object.placement.failure_domain();
    let (disks, nodes_up) = topology_of(nodes, live);
    let usable_nodes = disks.iter().map(|d| d.node).collect::<BTreeSet<u32>>().len();
    let usable: BTreeSet<DomainId> = disks.iter().map(|d| d.domain(level)).collect();
    let full = full_disks_of(nodes, live).len();
    let mut unavailable: Vec<DomainId> = avoid.to_vec();
    for node in nodes {
        if live.is_down(node) {
            unavailable.push(DomainId::Node(node.node_id));
        } else {
            unavailable.extend(
                node.disks
                    .iter()
                    .filter(|d| d.failed.is_some())
                    .map(|d| DomainId::Disk { node: node.node_id, disk: d.index }),
            );
        }
    }
    let peer_domains: BTreeSet<DomainId> = object
        .placement
        .peers(unit)
        .into_iter()
        .filter_map(|peer| object.placement.disk_of(peer))
        .map(|d| d.domain(level))
        .collect();
    let no_destination = |why: String| {
        let domains = domains_name(level);
        let held = usable.intersection(&peer_domains).count();
        let mut error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_destination",
            format!(
                "no disk can take {} of object {:?} in bucket {:?}: {nodes_up} nodes are up \
                 ({usable_nodes} with a usable disk, in {} {domains}), {held} of those \
                 {domains} hold another unit of its group or stripe; it needs a healthy disk \
                 with space of an up node in a {level} holding none, so at least {} usable \
                 {domains} ({why}){}; start more nodes or free space. The task was returned \
                 to the queue",
                unit_name(unit),
                object.key,
                object.bucket,
                usable.len(),
                peer_domains.len() + 1,
                if full > 0 {
                    format!("; {full} disks are full (read-only) and take no rebuilt unit")
                } else {
                    String::new()
                },
            ),
        );
        error.body["full_disks"] = json!(full);
        error.body["nodes_up"] = json!(nodes_up);
        error.body["usable_nodes"] = json!(usable_nodes);
        error.body["failure_domain"] = json!(level.to_string());
        error.body["usable_domains"] = json!(usable.len());
        error.body["needed"] = json!(peer_domains.len() + 1);
        error
    };
    let topology = Topology::new(disks).map_err(|e| no_destination(e.to_string()))?;
    object.placement.replacement_for(&topology, unit, &unavailable).map_err(|e| match e {
        LayoutError::NoReplacement { reason, .. } => no_destination(reason),
        other => no_destination(other.to_string()),
    })
}

/// `POST /v1/repairs/{task_id}/complete`: the unit was rebuilt on the given disk.
pub(crate) async fn complete(
    State(meta): State<Shared>,
    Path(task_id): Path<String>,
    body: Bytes,
) -> Result<Json<CompleteRepairReply>, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    let done: CompleteRepair =
        parse_body(&body, "{\"deadline_ms\": u64, \"node_id\": u32, \"disk\": u32}")?;
    let noting = meta.clone();
    let outcome = blocking(&meta, move |store| {
        let Some(task) = store.get_repair(task_id)? else {
            return Ok(Err(lease_lost(task_id, done.deadline_ms)));
        };
        if task.lease_deadline_ms != Some(done.deadline_ms) {
            return Ok(Err(lease_lost(task_id, done.deadline_ms)));
        }
        // Past its deadline a lease is over even if nobody took the task again: a unit a
        // repair wrote is referenced within its lease or never (the sweeper's grace rests
        // on it: docs/meta-api.md, "Garbage collection").
        if now_ms() > done.deadline_ms {
            return Ok(Err(lease_expired(task_id, done.deadline_ms)));
        }
        let nodes = store.list_nodes()?;
        let known = nodes
            .iter()
            .find(|n| n.node_id == done.node_id)
            .filter(|n| n.disks.iter().any(|d| d.index == done.disk));
        let Some(node) = known else {
            return Ok(Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_destination",
                format!(
                    "node {} has not reported a disk {}: complete with the destination the take \
                     returned",
                    done.node_id, done.disk
                ),
            )));
        };
        let lease = RepairLease { task_id, task, deadline_ms: done.deadline_ms };
        let disk = node.disk_location(done.disk);
        noting.changes.note(&lease.task.object.bucket, &lease.task.object.key);
        let (bucket, key) = (&lease.task.object.bucket, &lease.task.object.key);
        let before = match store.get_object(bucket, key) {
            Ok(object) => Some(object),
            Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => None,
            Err(other) => return Err(other),
        };
        match store.relocate_repaired(&lease, disk) {
            Ok(outcome) => {
                // The copy the repair replaced, once meta no longer points at it.
                let old = before
                    .filter(|b| b.generation == lease.task.generation)
                    .and_then(|b| b.placement.disk_of(lease.task.unit).map(|d| (b, d)))
                    .filter(|(_, d)| (d.node, d.disk) != (disk.node, disk.disk));
                let deletion = match (&outcome, old) {
                    (RepairOutcome::Relocated(_), Some((before, old))) => {
                        super::deletions::queue_replaced_copy(store, &before, lease.task.unit, old)?
                    }
                    _ => None,
                };
                Ok(Ok((lease, outcome, deletion)))
            }
            Err(MetaError::LeaseLost { .. }) => Ok(Err(lease_lost(task_id, done.deadline_ms))),
            Err(other) => Err(other),
        }
    })
    .await??;
    let (lease, outcome, deletion) = outcome;
    let result = match outcome {
        RepairOutcome::Relocated(_) => {
            meta.repairs_completed.fetch_add(1, Ordering::Relaxed);
            RepairResult::Relocated
        }
        RepairOutcome::Stale => RepairResult::Stale,
    };
    tracing::info!(
        task_id,
        bucket = %lease.task.object.bucket,
        key = %lease.task.object.key,
        unit = %unit_name(lease.task.unit),
        node_id = done.node_id,
        disk = done.disk,
        ?result,
        ?deletion,
        "repair completed"
    );
    Ok(Json(CompleteRepairReply { result, deletion }))
}

/// `POST /v1/repairs/{task_id}/fail`: the repair failed; the task goes back to the queue.
pub(crate) async fn fail(
    State(meta): State<Shared>,
    Path(task_id): Path<String>,
    body: Bytes,
) -> Result<Json<FailRepairReply>, ApiError> {
    let task_id = parse_task_id(&task_id)?;
    let failed: FailRepair = parse_body(
        &body,
        "{\"deadline_ms\": u64, \"error\": s, \"cause\": optional \"transient\"|\"unrecoverable\"}",
    )?;
    let error = bounded(&failed.error);
    let logged = error.clone();
    let unfound = failed.cause == FailCause::Unrecoverable;
    let (new_id, not_before) = blocking(&meta, move |store| {
        let Some(task) = store.get_repair(task_id)? else {
            return Ok(Err(lease_lost(task_id, failed.deadline_ms)));
        };
        let not_before = now_ms().saturating_add(backoff_ms(task.attempts, unfound));
        let lease = RepairLease { task_id, task, deadline_ms: failed.deadline_ms };
        match store.fail_repair_until(&lease, &error, Some(not_before), unfound) {
            Ok(id) => Ok(Ok((id, not_before))),
            Err(MetaError::LeaseLost { .. }) => Ok(Err(lease_lost(task_id, failed.deadline_ms))),
            Err(other) => Err(other),
        }
    })
    .await??;
    tracing::warn!(
        task_id,
        new_task_id = new_id,
        unfound,
        not_before_ms = not_before,
        error = %logged,
        "repair failed, requeued after a back-off"
    );
    Ok(Json(FailRepairReply {
        requeued: true,
        task_id: new_id,
        not_before_ms: Some(not_before),
        unfound,
    }))
}

/// `GET /v1/repairs`: the queue length and its first [`LISTED_TASKS`] tasks.
pub(crate) async fn list(State(meta): State<Shared>) -> Result<Json<RepairList>, ApiError> {
    let (queued, tasks) = blocking(&meta, |store| {
        Ok((store.repair_queue_len()?, store.list_repairs(None, LISTED_TASKS)?))
    })
    .await?;
    let tasks = tasks.iter().map(|(id, task)| task_info(*id, task)).collect();
    Ok(Json(RepairList { queued: queued as u64, tasks }))
}
