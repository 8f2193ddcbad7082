//! The garbage-collection routes of the meta service: every unit meta references, per disk
//! (what a sweeper compares a node's listing against), and the expiry of abandoned writes.
//! Routes, bodies and statuses: docs/meta-api.md ("Garbage collection").
//!
//! Invariants:
//! - `GET /v1/references` names every unit a record of meta points at: every unit of every
//!   committed object (parity under the object's parity generation), every unit of every
//!   write in progress, and every unit a pending transition creates (its new parity) or
//!   copies (its relocation destinations). Keys are built by `objects::unit_key`, the same
//!   function that names them to writers and readers.
//! - The tables are read page by page in the order writes, transitions, objects, so that a
//!   unit referenced when the request starts is in the answer even if its record moves
//!   meanwhile: a commit moves a write to the objects (read later), a transition's commit
//!   moves its units into the object (read later). A unit whose record is made after the
//!   request started (a begin, a repair's relocation) may be missing: a sweeper must list
//!   a disk *before* asking for references and spare units younger than the longest time a
//!   unit may wait for its record (a repair lease; writes and transitions write their units
//!   only after their record exists).
//! - Objects move between their bucket and the versions bucket (S3 versioning) in either
//!   direction, so the objects are walked again until one whole walk saw the store's
//!   version-move count unchanged (the references are the union of the walks); after
//!   [`MAX_OBJECT_WALKS`] walks without one the answer is `503 busy`, never a partial list.
//! - An expiry removes only writes begun more than `older_than_ms` before the request (by
//!   meta's clock, which stamped their `created_ms`), each by its own generation, so a write
//!   committed or begun again meanwhile is never removed.
//! - Every store call runs on a blocking task (see `blocking`).

use std::collections::{BTreeMap, BTreeSet};

use axum::{
    body::Bytes,
    extract::{Query, State},
    Json,
};
use serde::Deserialize;
use serde_json::{json, Value};
use weft_layout::{DiskLocation, UnitId};
use weft_store::UnitKey;

use super::objects::{object_id, record_unit_key, unit_key};
use super::repairs::for_each_object;
use super::{blocking, now_ms, ApiError, Shared};
use crate::{MetaError, ObjectName, ObjectRecord, TransitionRecord, MAX_LIST_LIMIT};

/// Most walks of every object one `GET /v1/references` makes to see one with no version
/// move during it.
const MAX_OBJECT_WALKS: usize = 4;

/// Unit keys by (node, disk).
type ByDisk = BTreeMap<(u32, u32), BTreeSet<UnitKey>>;

/// What `GET /v1/references` gathers.
#[derive(Default)]
struct References {
    disks: ByDisk,
    objects: u64,
    writes: u64,
    transitions: u64,
}

impl References {
    /// Adds `key` on `disk`, unless the caller asked for another node.
    fn add(&mut self, only: Option<u32>, disk: DiskLocation, key: UnitKey) {
        if only.is_none_or(|node| node == disk.node) {
            self.disks.entry((disk.node, disk.disk)).or_default().insert(key);
        }
    }

    /// Every unit of a committed object or a write in progress.
    fn add_record(&mut self, only: Option<u32>, record: &ObjectRecord) -> Result<(), ApiError> {
        for (unit, disk) in record.placement.units() {
            self.add(only, disk, record_unit_key(record, unit)?);
        }
        Ok(())
    }

    /// The units a pending transition writes: its new parity (unit generation = its id) and
    /// the copies its relocations make (the block's own key, at the destination).
    fn add_transition(
        &mut self,
        only: Option<u32>,
        record: &TransitionRecord,
    ) -> Result<(), ApiError> {
        let object = object_id(record.object_generation);
        for (unit, disk) in record.new_placement.units() {
            if matches!(unit, UnitId::Parity { .. }) {
                self.add(only, disk, unit_key(object, unit, record.id)?);
            }
        }
        for relocation in &record.relocations {
            self.add(only, relocation.to, unit_key(object, UnitId::Data(relocation.block), 0)?);
        }
        Ok(())
    }
}

#[derive(Deserialize)]
pub(crate) struct ReferencesQuery {
    /// Only the disks of this node (parsed here, so a bad one gets meta's JSON error).
    node_id: Option<String>,
}

/// `GET /v1/references[?node_id=N]`.
pub(crate) async fn references(
    State(meta): State<Shared>,
    Query(query): Query<ReferencesQuery>,
) -> Result<Json<Value>, ApiError> {
    let generated_ms = now_ms();
    let only = match query.node_id.as_deref() {
        None => None,
        Some(text) => Some(text.parse::<u32>().map_err(|_| {
            ApiError::bad_request(format!("node_id={text:?} is not a node id (a u32)"))
        })?),
    };
    let (found, nodes) = blocking(&meta, move |store| {
        let mut found = References::default();
        // Writes, then transitions, then objects: see the module invariants.
        let mut after: Option<crate::WriteCursor> = None;
        loop {
            let page = store.list_writes(after.as_ref(), MAX_LIST_LIMIT)?;
            for write in &page {
                if let Err(api) = found.add_record(only, write) {
                    return Ok(Err(api));
                }
            }
            found.writes += page.len() as u64;
            match page.last() {
                Some(last) if page.len() == MAX_LIST_LIMIT => after = Some(last.write_cursor()),
                _ => break,
            }
        }
        let mut after: Option<ObjectName> = None;
        loop {
            let page = store.list_transitions(after.as_ref(), MAX_LIST_LIMIT)?;
            for transition in &page {
                if let Err(api) = found.add_transition(only, transition) {
                    return Ok(Err(api));
                }
            }
            found.transitions += page.len() as u64;
            match page.last() {
                Some(last) if page.len() == MAX_LIST_LIMIT => {
                    after = Some(ObjectName { bucket: last.bucket.clone(), key: last.key.clone() })
                }
                _ => break,
            }
        }
        // An object that moved between its bucket and the versions bucket meanwhile may be
        // missed by a walk: walk again (the union only grows) until one walk saw no move.
        let mut stable = false;
        for _ in 0..MAX_OBJECT_WALKS {
            let moves = store.version_moves()?;
            let mut refused = None;
            let mut seen = 0;
            for_each_object(store, |objects| {
                for object in objects {
                    if refused.is_none() {
                        if let Err(api) = found.add_record(only, object) {
                            refused = Some(api);
                        }
                    }
                }
                seen += objects.len() as u64;
                Ok(())
            })?;
            if let Some(api) = refused {
                return Ok(Err(api));
            }
            found.objects = seen;
            if store.version_moves()? == moves {
                stable = true;
                break;
            }
        }
        if !stable {
            return Ok(Err(ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "objects kept moving between their buckets and the versions bucket during \
                     {MAX_OBJECT_WALKS} walks; ask again later (nothing may be deleted meanwhile)"
                ),
            )));
        }
        Ok(Ok((found, store.list_nodes()?)))
    })
    .await??;
    let mut disks = found.disks;
    // Every disk meta has heard of is listed, also when nothing is referenced on it.
    for node in nodes.iter().filter(|n| only.is_none_or(|id| id == n.node_id)) {
        for disk in &node.disks {
            disks.entry((node.node_id, disk.index)).or_default();
        }
    }
    let units: usize = disks.values().map(BTreeSet::len).sum();
    let disks: Vec<Value> = disks
        .into_iter()
        .map(|((node_id, disk), keys)| {
            let keys: Vec<String> = keys.iter().map(UnitKey::to_string).collect();
            json!({ "node_id": node_id, "disk": disk, "units": keys })
        })
        .collect();
    Ok(Json(json!({
        "generated_ms": generated_ms,
        "node_id": only,
        "objects": found.objects,
        "writes": found.writes,
        "transitions": found.transitions,
        "units": units,
        "disks": disks,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpireBody {
    older_than_ms: u64,
    /// Only say which writes would expire.
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/writes/expire`: removes the writes in progress begun more than `older_than_ms`
/// ago (their clients are presumed dead; their units become garbage for the sweeper).
pub(crate) async fn expire_writes(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: ExpireBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"older_than_ms\": u64, \"dry_run\": optional bool}}: {e}"
        ))
    })?;
    let now = now_ms();
    let begun_before = now.saturating_sub(body.older_than_ms);
    let dry_run = body.dry_run;
    let (expired, in_progress) = blocking(&meta, move |store| {
        let mut expired = Vec::new();
        let mut in_progress = 0u64;
        let mut after: Option<crate::WriteCursor> = None;
        loop {
            let page = store.list_writes(after.as_ref(), MAX_LIST_LIMIT)?;
            for write in &page {
                if write.created_ms >= begun_before {
                    in_progress += 1;
                    continue;
                }
                if dry_run {
                    expired.push(write.clone());
                    continue;
                }
                match store.abort_write(&write.bucket, &write.key, write.generation) {
                    Ok(removed) => {
                        super::digest_pages::delete(
                            store,
                            &super::digest_pages::of_write(removed.generation),
                        )?;
                        expired.push(removed)
                    }
                    // Committed, or begun again, since the listing: not abandoned.
                    Err(MetaError::NoSuchWrite { .. }) => {}
                    Err(other) => return Err(other),
                }
            }
            match page.last() {
                Some(last) if page.len() == MAX_LIST_LIMIT => after = Some(last.write_cursor()),
                _ => break,
            }
        }
        Ok((expired, in_progress))
    })
    .await?;
    for write in expired.iter().filter(|_| !dry_run) {
        tracing::info!(
            bucket = %write.bucket, key = %write.key, generation = write.generation,
            age_ms = now.saturating_sub(write.created_ms), "abandoned write expired"
        );
    }
    let expired: Vec<Value> = expired
        .iter()
        .map(|w| {
            json!({
                "bucket": w.bucket,
                "key": w.key,
                "generation": w.generation,
                "created_ms": w.created_ms,
                "units": w.placement.unit_count(),
            })
        })
        .collect();
    Ok(Json(json!({ "expired": expired, "in_progress": in_progress, "dry_run": dry_run })))
}
