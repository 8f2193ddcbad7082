//! What nodes' background scrubs tell meta, and how meta turns it into repairs
//! (docs/meta-api.md, "Scrub and inventory"):
//! - `POST /v1/nodes/{id}/bad-units`: units a scrub found corrupt or unreadable; each one
//!   that a committed object places on that disk is queued as a `damaged` repair.
//! - `POST /v1/nodes/{id}/disks/{disk}/inventory?units=&hashes=&seed=&listing_ms=`: a digest
//!   (`weft_store::inventory`) of the units the disk holds; every unit a committed object
//!   places on that disk that the digest certainly lacks is queued as a `damaged` repair.
//!
//! Invariants:
//! - Only node `id` may call its routes (checked by the service's authorisation and again
//!   here), and only about its own disks: a node cannot queue repairs of units elsewhere.
//! - A unit is queued only with the generation and disk meta places it on
//!   (`RepairRequest::seen_on`), checked again in the enqueue's transaction.
//! - No false "missing": a digest lists what the disk held when its listing began, so a unit
//!   referenced after that may be absent from it. Every change of an object's units (commit,
//!   repair relocation, transition commit) is noted in [`Changes`] *before* the store call,
//!   and an inventory skips the objects changed since its listing began (counted as
//!   `recent`). Changes are remembered in memory only: while this meta has not run for longer
//!   than a listing may take, an inventory is not compared and the reply says when to retry.
//! - Every scan walks the store page by page; the change memory holds at most
//!   [`MAX_REMEMBERED_CHANGES`] objects (past that, inventories are deferred until it drains).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use axum::{
    body::Bytes,
    extract::{Extension, Path, Query, State},
    http::StatusCode,
    Json,
};
use weft_auth::Principal;
use weft_store::{inventory::Inventory, UnitKey};
use weft_wire::scrub::{
    BadUnits, BadUnitsReply, InventoryQuery, InventoryReply, MAX_BAD_UNITS_PER_REPORT,
};

use super::objects::record_unit_key;
use super::repairs::for_each_object;
use super::{blocking, now_ms, ApiError, Shared};
use crate::{ObjectName, RepairKind, RepairRequest};

/// Longest listing an inventory may report (its `listing_ms`): changes are remembered this
/// long (plus [`TRANSIT_SLACK_MS`]).
pub const MAX_LISTING_MS: u64 = 10 * 60 * 1000;

/// Time allowed for a digest to travel from the end of its listing to meta.
pub const TRANSIT_SLACK_MS: u64 = 5000;

/// Most objects the change memory holds.
pub const MAX_REMEMBERED_CHANGES: usize = 1 << 20;

/// Recent changes of objects' units, by a hash of the object's name (a collision only makes
/// an inventory skip one more object). See the module invariants.
#[derive(Debug)]
pub(crate) struct Changes {
    /// When this memory began: changes before it are unknown.
    since_ms: u64,
    inner: Mutex<ChangesInner>,
}

#[derive(Debug, Default)]
struct ChangesInner {
    last_change_ms: HashMap<u64, u64>,
    /// Until when the memory is incomplete because it overflowed (0: never).
    incomplete_until_ms: u64,
}

fn name_hash(bucket: &str, key: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (bucket, key).hash(&mut hasher);
    hasher.finish()
}

impl Changes {
    pub(crate) fn new(now_ms: u64) -> Changes {
        Changes { since_ms: now_ms, inner: Mutex::new(ChangesInner::default()) }
    }

    /// Notes that the units of (bucket, key) are about to change. Call before the store call.
    pub(crate) fn note(&self, bucket: &str, key: &str) {
        let now = now_ms();
        let mut inner = self.inner.lock().expect("changes");
        if inner.last_change_ms.len() >= MAX_REMEMBERED_CHANGES {
            let horizon = now.saturating_sub(MAX_LISTING_MS + TRANSIT_SLACK_MS);
            inner.last_change_ms.retain(|_, &mut at| at >= horizon);
            if inner.last_change_ms.len() >= MAX_REMEMBERED_CHANGES {
                // Forget everything: until the horizon passes, no inventory is compared.
                inner.last_change_ms.clear();
                inner.incomplete_until_ms = now + MAX_LISTING_MS + TRANSIT_SLACK_MS;
            }
        }
        inner.last_change_ms.insert(name_hash(bucket, key), now);
    }

    /// The objects changed at or after `cutoff_ms`, or Err(ms to wait) when the memory does
    /// not reach back that far.
    fn since(&self, cutoff_ms: u64) -> Result<HashSet<u64>, u64> {
        let inner = self.inner.lock().expect("changes");
        let known_from = self.since_ms.max(inner.incomplete_until_ms);
        if cutoff_ms < known_from {
            return Err(known_from - cutoff_ms);
        }
        Ok(inner
            .last_change_ms
            .iter()
            .filter(|(_, &at)| at >= cutoff_ms)
            .map(|(&name, _)| name)
            .collect())
    }
}

/// What the latest inventory of one disk showed (for `/v1/status`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DiskInventory {
    pub(crate) at_ms: u64,
    pub(crate) held: u64,
    pub(crate) referenced: u64,
    pub(crate) missing: u64,
}

/// What scrubs reported since meta started.
#[derive(Debug, Default)]
pub(crate) struct ScrubState {
    /// Latest compared inventory per (node, disk).
    pub(crate) inventories: Mutex<BTreeMap<(u32, u32), DiskInventory>>,
    /// Bad units reported, and how many of them were queued.
    pub(crate) bad_units_reported: std::sync::atomic::AtomicU64,
    pub(crate) bad_units_queued: std::sync::atomic::AtomicU64,
}

impl ScrubState {
    /// Units the latest inventories found missing, summed over disks.
    pub(crate) fn missing_units(&self) -> u64 {
        self.inventories.lock().expect("inventories").values().map(|i| i.missing).sum()
    }

    /// The latest inventory of every disk, as `/v1/status` lists them:
    /// `[{"node_id","disk","at_ms","held","referenced","missing"}]`.
    pub(crate) fn inventories_json(&self) -> serde_json::Value {
        let inventories = self.inventories.lock().expect("inventories");
        inventories
            .iter()
            .map(|(&(node_id, disk), seen)| {
                serde_json::json!({
                    "node_id": node_id,
                    "disk": disk,
                    "at_ms": seen.at_ms,
                    "held": seen.held,
                    "referenced": seen.referenced,
                    "missing": seen.missing,
                })
            })
            .collect()
    }
}

/// Refuses a call about node `id` from anyone but node `id`.
fn check_caller(principal: Principal, id: u32) -> Result<(), ApiError> {
    if principal == Principal::Node(id) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("only node {id} reports about its own disks, not {principal}"),
    ))
}

/// A `damaged` repair of `unit` of `object`, valid only while the unit is still on `place`.
fn damaged(
    object: &crate::ObjectRecord,
    unit: weft_layout::UnitId,
    place: weft_layout::DiskLocation,
    reason: String,
) -> RepairRequest {
    RepairRequest {
        object: ObjectName { bucket: object.bucket.clone(), key: object.key.clone() },
        generation: object.generation,
        unit,
        kind: RepairKind::Damaged,
        reason,
        seen_on: Some(place),
    }
}

fn parse_id(text: &str, what: &str) -> Result<u32, ApiError> {
    text.parse().map_err(|_| ApiError::bad_request(format!("{text:?} is not a {what} number")))
}

/// `POST /v1/nodes/{id}/bad-units`.
pub(crate) async fn bad_units(
    State(meta): State<Shared>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<BadUnitsReply>, ApiError> {
    let id = parse_id(&id, "node")?;
    check_caller(principal, id)?;
    let report: BadUnits = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"disk\":u32,\"units\":[{{\"unit_key\",\"problem\",\"detail\"}}]}}: \
             {e}"
        ))
    })?;
    if report.units.len() > MAX_BAD_UNITS_PER_REPORT {
        return Err(ApiError::bad_request(format!(
            "a report names at most {MAX_BAD_UNITS_PER_REPORT} units, not {}",
            report.units.len()
        )));
    }
    let mut wanted: HashMap<UnitKey, String> = HashMap::new();
    for unit in &report.units {
        let key = UnitKey::from_file_name(&format!("{}.unit", unit.unit_key)).ok_or_else(|| {
            ApiError::bad_request(format!("{:?} is not a unit key", unit.unit_key))
        })?;
        let problem = match unit.problem {
            weft_wire::scrub::UnitProblem::Corrupt => "corrupt",
            weft_wire::scrub::UnitProblem::Unreadable => "unreadable",
        };
        let detail: String = unit.detail.chars().take(200).collect();
        wanted.insert(key, format!("scrub of node {id} disk {}: {problem}: {detail}", report.disk));
    }
    let disk = report.disk;
    let named = wanted.len() as u64;
    let queued = blocking(&meta, move |store| {
        let generations: HashSet<u64> =
            wanted.keys().filter_map(|k| u64::try_from(k.object()).ok()).collect();
        let mut requests = Vec::new();
        for_each_object(store, |objects| {
            for object in objects.iter().filter(|o| generations.contains(&o.generation)) {
                for (unit, place) in object.placement.units() {
                    if place.node != id || place.disk != disk {
                        continue;
                    }
                    let Ok(key) = record_unit_key(object, unit) else { continue };
                    if let Some(reason) = wanted.get(&key) {
                        requests.push(damaged(object, unit, place, reason.clone()));
                    }
                }
            }
            Ok(())
        })?;
        let referenced = requests.len() as u64;
        let queued =
            if requests.is_empty() { 0 } else { store.enqueue_repairs(&requests, now_ms())? };
        Ok((referenced, queued as u64))
    })
    .await?;
    let (referenced, queued) = queued;
    meta.scrub.bad_units_reported.fetch_add(named, std::sync::atomic::Ordering::Relaxed);
    meta.scrub.bad_units_queued.fetch_add(queued, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(node_id = id, disk, named, referenced, queued, "scrub reported bad units");
    Ok(Json(BadUnitsReply { queued, unreferenced: named - referenced }))
}

/// `POST /v1/nodes/{id}/disks/{disk}/inventory`.
pub(crate) async fn inventory(
    State(meta): State<Shared>,
    Extension(principal): Extension<Principal>,
    Path((id, disk)): Path<(String, String)>,
    Query(query): Query<InventoryQuery>,
    body: Bytes,
) -> Result<Json<InventoryReply>, ApiError> {
    let received = now_ms();
    let id = parse_id(&id, "node")?;
    let disk = parse_id(&disk, "disk")?;
    check_caller(principal, id)?;
    if query.listing_ms > MAX_LISTING_MS {
        return Err(ApiError::bad_request(format!(
            "listing_ms {} is longer than the {MAX_LISTING_MS} ms meta remembers changes for",
            query.listing_ms
        )));
    }
    let digest = Inventory::from_bytes(&body, query.seed, query.hashes, query.units)
        .map_err(|e| ApiError::bad_request(format!("bad inventory digest: {e}")))?;
    let cutoff = received.saturating_sub(query.listing_ms + TRANSIT_SLACK_MS);
    let changed = match meta.changes.since(cutoff) {
        Ok(changed) => changed,
        Err(wait_ms) => {
            return Ok(Json(InventoryReply {
                referenced: 0,
                missing: 0,
                queued: 0,
                recent: 0,
                retry_after_ms: Some(wait_ms + 1000),
            }))
        }
    };
    let reply = blocking(&meta, move |store| {
        let mut reply = InventoryReply {
            referenced: 0,
            missing: 0,
            queued: 0,
            recent: 0,
            retry_after_ms: None,
        };
        let mut requests = Vec::new();
        for_each_object(store, |objects| {
            for object in objects {
                let recent = changed.contains(&name_hash(&object.bucket, &object.key));
                for (unit, place) in object.placement.units() {
                    if place.node != id || place.disk != disk {
                        continue;
                    }
                    reply.referenced += 1;
                    if recent {
                        reply.recent += 1;
                        continue;
                    }
                    let Ok(key) = record_unit_key(object, unit) else { continue };
                    if digest.may_contain(&key) {
                        continue;
                    }
                    reply.missing += 1;
                    let reason = format!("missing from node {id} disk {disk} (inventory)");
                    requests.push(damaged(object, unit, place, reason));
                }
            }
            if requests.len() >= crate::MAX_LIST_LIMIT {
                reply.queued += store.enqueue_repairs(&requests, now_ms())? as u64;
                requests.clear();
            }
            Ok(())
        })?;
        if !requests.is_empty() {
            reply.queued += store.enqueue_repairs(&requests, now_ms())? as u64;
        }
        Ok(reply)
    })
    .await?;
    meta.scrub.inventories.lock().expect("inventories").insert(
        (id, disk),
        DiskInventory {
            at_ms: received,
            held: query.units,
            referenced: reply.referenced,
            missing: reply.missing,
        },
    );
    if reply.missing > 0 {
        tracing::warn!(
            node_id = id,
            disk,
            missing = reply.missing,
            queued = reply.queued,
            "inventory: referenced units are missing"
        );
    } else {
        tracing::debug!(node_id = id, disk, referenced = reply.referenced, "inventory matches");
    }
    Ok(Json(reply))
}
