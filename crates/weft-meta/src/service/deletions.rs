//! Replaced copies of repaired units, still to delete: the deferred-delete queue. Meta never
//! calls nodes; it keeps the queue, and repair executors (which hold the cluster secret and
//! talk to nodes) delete the copies and acknowledge them (docs/meta-api.md, "Deletions").
//!
//! Invariants:
//! - A completed repair that moved a unit to another disk queues the old copy (record
//!   namespace [`DELETIONS`], name `<node id, 10 digits>/<disk>/<unit key>`) right after the
//!   relocation commits; it is never queued before, so a queued copy is one meta no longer
//!   points at. (A crash between the two leaves the copy to the gc sweep, as before.)
//! - A queued copy is listed only while its node is up, and only when the committed object
//!   does not reference that unit key on that disk (a unit repaired back onto its old disk is
//!   live: its entry is dropped, never handed out). A repair destination is never a disk
//!   holding a queued copy of the same unit (see `repairs::take_due`), so a copy cannot turn
//!   live while it is queued.
//! - An entry leaves the queue only by an acknowledgement (`POST /v1/deletions/done`) after
//!   the node deleted the copy (or had none), by the check above, or when its node is
//!   removed from the cluster (`DELETE /v1/nodes/{id}`).
//! - Every listing is bounded: at most [`MAX_LISTED_DELETIONS`] entries, one page per up node.

use axum::{
    body::Bytes,
    extract::{Query, State},
    Json,
};
use serde::Deserialize;
use serde_json::json;
use weft_layout::{DiskLocation, UnitId};
use weft_wire::repair::{Deletion, DeletionList, DeletionsDone, DeletionsDoneReply};

use super::objects::record_unit_key;
use super::{blocking, now_ms, ApiError, Shared};
use crate::store::DELETIONS;
use crate::{parse_unit_name, unit_name, MetaError, MetaStore, ObjectRecord, MAX_LIST_LIMIT};

/// Most entries one `GET /v1/deletions` returns, and most ids one acknowledgement names.
pub const MAX_LISTED_DELETIONS: usize = 100;

/// The record name of the copy of `unit_key` on `disk` of `node`.
pub(crate) fn deletion_name(node: u32, disk: u32, unit_key: &str) -> String {
    format!("{node:010}/{disk}/{unit_key}")
}

fn node_prefix(node: u32) -> String {
    format!("{node:010}/")
}

/// Queues the copy of `unit` of `before` (the object before a repair moved the unit) on
/// `old`; returns the entry's id.
pub(crate) fn queue_replaced_copy(
    store: &dyn MetaStore,
    before: &ObjectRecord,
    unit: UnitId,
    old: DiskLocation,
) -> Result<Option<String>, MetaError> {
    let Ok(key) = record_unit_key(before, unit) else { return Ok(None) };
    let name = deletion_name(old.node, old.disk, &key.to_string());
    let value = json!({
        "bucket": before.bucket,
        "key": before.key,
        "generation": before.generation,
        "unit": unit_name(unit),
        "queued_ms": now_ms(),
    });
    store.put_record(DELETIONS, &name, &value, false)?;
    Ok(Some(name))
}

/// Drops every queued copy on `node` (removed from the cluster: nobody will delete them);
/// returns how many. Bounded by the node's entries, a page at a time.
pub(crate) fn forget_node(store: &dyn MetaStore, node: u32) -> Result<usize, MetaError> {
    let mut forgotten = 0;
    loop {
        let page = store.list_records(DELETIONS, &node_prefix(node), None, MAX_LIST_LIMIT)?;
        for (name, _) in &page {
            store.delete_record(DELETIONS, name)?;
        }
        forgotten += page.len();
        if page.len() < MAX_LIST_LIMIT {
            return Ok(forgotten);
        }
    }
}

/// Whether a copy of `unit_key` on `disk` is queued for deletion.
pub(crate) fn is_queued(
    store: &dyn MetaStore,
    disk: DiskLocation,
    unit_key: &str,
) -> Result<bool, MetaError> {
    Ok(store.get_record(DELETIONS, &deletion_name(disk.node, disk.disk, unit_key))?.is_some())
}

/// Whether the committed object still references the copy an entry names (then it must not
/// be deleted).
fn is_live(
    store: &dyn MetaStore,
    value: &serde_json::Value,
    node: u32,
    disk: u32,
    unit_key: &str,
) -> Result<bool, MetaError> {
    let (Some(bucket), Some(key)) = (value["bucket"].as_str(), value["key"].as_str()) else {
        return Ok(false);
    };
    let object = match store.get_object(bucket, key) {
        Ok(object) => object,
        Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => return Ok(false),
        Err(other) => return Err(other),
    };
    let Some(unit) = value["unit"].as_str().and_then(parse_unit_name) else { return Ok(false) };
    let here = object.placement.disk_of(unit).is_some_and(|d| (d.node, d.disk) == (node, disk));
    Ok(here && record_unit_key(&object, unit).is_ok_and(|k| k.to_string() == unit_key))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
}

/// `GET /v1/deletions[?limit=N]`: queued copies on nodes that are up now.
pub(crate) async fn list(
    State(meta): State<Shared>,
    Query(query): Query<ListQuery>,
) -> Result<Json<DeletionList>, ApiError> {
    let limit = query.limit.unwrap_or(MAX_LISTED_DELETIONS).clamp(1, MAX_LISTED_DELETIONS);
    let live = meta.liveness();
    let list = blocking(&meta, move |store| {
        let mut pending = 0u64;
        let mut after: Option<String> = None;
        loop {
            let page = store.list_records(DELETIONS, "", after.as_deref(), MAX_LIST_LIMIT)?;
            pending += page.len() as u64;
            if page.len() < MAX_LIST_LIMIT {
                break;
            }
            after = page.last().map(|(name, _)| name.clone());
        }
        let mut deletions = Vec::new();
        for node in store.list_nodes()?.iter().filter(|n| !live.is_down(n)) {
            if deletions.len() >= limit {
                break;
            }
            let page = store.list_records(DELETIONS, &node_prefix(node.node_id), None, limit)?;
            for (name, value) in page {
                if deletions.len() >= limit {
                    break;
                }
                let mut parts = name.splitn(3, '/');
                let (Some(_), Some(disk), Some(unit_key)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let Ok(disk) = disk.parse::<u32>() else { continue };
                if is_live(store, &value, node.node_id, disk, unit_key)? {
                    tracing::warn!(%name, "a queued copy is referenced again: not deleted");
                    store.delete_record(DELETIONS, &name)?;
                    pending = pending.saturating_sub(1);
                    continue;
                }
                deletions.push(Deletion {
                    id: name.clone(),
                    node_id: node.node_id,
                    disk,
                    endpoint: node.endpoint.clone(),
                    unit_key: unit_key.to_string(),
                    bucket: value["bucket"].as_str().unwrap_or_default().to_string(),
                    key: value["key"].as_str().unwrap_or_default().to_string(),
                    unit: value["unit"].as_str().unwrap_or_default().to_string(),
                    queued_ms: value["queued_ms"].as_u64().unwrap_or(0),
                });
            }
        }
        Ok(DeletionList { pending, deletions })
    })
    .await?;
    Ok(Json(list))
}

/// `POST /v1/deletions/done`: the named copies are gone from their nodes.
pub(crate) async fn done(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<DeletionsDoneReply>, ApiError> {
    let done: DeletionsDone = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"ids\": [ids from GET /v1/deletions]}}: {e}"
        ))
    })?;
    if done.ids.len() > MAX_LISTED_DELETIONS {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_LISTED_DELETIONS} ids per call, not {}",
            done.ids.len()
        )));
    }
    let removed = blocking(&meta, move |store| {
        let mut removed = 0;
        for id in &done.ids {
            if store.get_record(DELETIONS, id)?.is_some() {
                store.delete_record(DELETIONS, id)?;
                removed += 1;
            }
        }
        Ok(removed)
    })
    .await?;
    Ok(Json(DeletionsDoneReply { removed }))
}
