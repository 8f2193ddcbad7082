//! Unfound units and lost objects: what `/v1/status` and `GET` of an object say about units
//! no repair could rebuild, and `POST /v1/repairs/lost`, which gives up on such an object
//! (docs/meta-api.md, "Unfound units and lost objects").
//!
//! Invariants:
//! - A unit is **unfound** when its queued repair task's last attempt failed with cause
//!   `unrecoverable` (too few units of its group readable) and the task is of the object's
//!   current generation; tasks of deleted or replaced objects never count.
//! - Marking an object lost is refused unless at least one of its units is unfound (a
//!   readable object is deleted with `DELETE`, not given up on). It records a tombstone
//!   ([`LOST_OBJECTS`], name `bucket/key`) *before* deleting the object, so a crash between
//!   the two leaves a tombstone that is consulted only when the key has no object (harmless).
//!   Then every repair task of the key is removed (a crash before that leaves them stale:
//!   the next take of each drops it).
//! - `GET` of a key with no object but a tombstone answers `410 object_lost`; a commit of the
//!   key makes `GET` answer the new object, and `DELETE` of the key removes the tombstone.
//! - Every walk is bounded: the queue is read page by page.

use std::collections::{BTreeMap, BTreeSet};

use axum::{body::Bytes, extract::State, http::StatusCode, Json};
use serde_json::{json, Value};
use weft_wire::repair::{LostObject, MarkLost, MarkLostReply};

use super::objects::{object_json, units_json};
use super::{blocking, now_ms, ApiError, Shared};
use crate::store::LOST_OBJECTS;
use crate::{unit_name, MetaError, MetaStore, ObjectName, ObjectRecord, MAX_LIST_LIMIT};

/// The record name of (bucket, key) in [`LOST_OBJECTS`] (bucket names hold no `/`).
pub(crate) fn lost_name(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}

/// (unfound units, objects with an unfound unit) over the whole queue.
pub(crate) fn unfound_counts(store: &dyn MetaStore) -> Result<(u64, u64), MetaError> {
    let mut unfound: BTreeMap<ObjectName, (u64, BTreeSet<String>)> = BTreeMap::new();
    let mut after = None;
    loop {
        let page = store.list_repairs(after, MAX_LIST_LIMIT)?;
        let Some(&(last, _)) = page.last() else { break };
        for (_, task) in page.into_iter().filter(|(_, t)| t.unfound) {
            let entry = unfound.entry(task.object).or_insert((task.generation, BTreeSet::new()));
            if entry.0 == task.generation {
                entry.1.insert(unit_name(task.unit));
            }
        }
        after = Some(last);
    }
    let (mut units, mut objects) = (0, 0);
    for (name, (generation, names)) in unfound {
        match store.get_object(&name.bucket, &name.key) {
            Ok(object) if object.generation == generation => {
                units += names.len() as u64;
                objects += 1;
            }
            Ok(_) | Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => {}
            Err(other) => return Err(other),
        }
    }
    Ok((units, objects))
}

/// Objects marked lost whose tombstone is kept.
pub(crate) fn lost_count(store: &dyn MetaStore) -> Result<u64, MetaError> {
    let mut count = 0;
    let mut after: Option<String> = None;
    loop {
        let page = store.list_records(LOST_OBJECTS, "", after.as_deref(), MAX_LIST_LIMIT)?;
        count += page.len() as u64;
        if page.len() < MAX_LIST_LIMIT {
            return Ok(count);
        }
        after = page.last().map(|(name, _)| name.clone());
    }
}

/// The unfound units of `object` (its current generation), by name.
pub(crate) fn unfound_units(
    store: &dyn MetaStore,
    object: &ObjectRecord,
) -> Result<Vec<String>, MetaError> {
    Ok(store
        .repairs_of(&object.bucket, &object.key)?
        .into_iter()
        .filter(|(_, t)| t.unfound && t.generation == object.generation)
        .map(|(_, t)| unit_name(t.unit))
        .collect())
}

/// `410 object_lost` for a key whose object was marked lost, if it was.
pub(crate) fn lost_error(
    store: &dyn MetaStore,
    bucket: &str,
    key: &str,
) -> Result<Option<ApiError>, MetaError> {
    let Some(value) = store.get_record(LOST_OBJECTS, &lost_name(bucket, key))? else {
        return Ok(None);
    };
    let lost: Option<LostObject> = serde_json::from_value(value.clone()).ok();
    let (generation, units) =
        lost.map_or((0, String::from("?")), |l| (l.generation, l.unfound_units.join(", ")));
    let mut error = ApiError::new(
        StatusCode::GONE,
        "object_lost",
        format!(
            "object {key:?} in bucket {bucket:?} (generation {generation}) was marked lost: \
             units {units} could not be rebuilt and its data is gone; write the key again, \
             or delete it to forget it"
        ),
    );
    error.body["lost"] = value;
    Ok(Some(error))
}

/// `POST /v1/repairs/lost`: gives up on an object with unfound units (see the module
/// invariants).
pub(crate) async fn mark_lost(
    State(meta): State<Shared>,
    body: Bytes,
) -> Result<Json<MarkLostReply<Value>>, ApiError> {
    let asked: MarkLost = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"bucket\": s, \"key\": s, \"generation\": optional u64}}: {e}"
        ))
    })?;
    let live = meta.liveness();
    let reply = blocking(&meta, move |store| {
        let MarkLost { bucket, key, generation } = asked;
        let object = match store.get_object(&bucket, &key) {
            Ok(object) => object,
            Err(MetaError::NoSuchKey { .. } | MetaError::NoSuchBucket { .. }) => {
                return Ok(Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "no_such_object",
                    format!("no committed object {key:?} in bucket {bucket:?}"),
                )))
            }
            Err(other) => return Err(other),
        };
        if generation.is_some_and(|g| g != object.generation) {
            let mut error = ApiError::new(
                StatusCode::CONFLICT,
                "stale",
                format!(
                    "object {key:?} in bucket {bucket:?} has generation {}, not {}: it was \
                     written again; nothing was marked",
                    object.generation,
                    generation.expect("checked")
                ),
            );
            error.body["generation"] = json!(object.generation);
            return Ok(Err(error));
        }
        let tasks = store.repairs_of(&bucket, &key)?;
        let unfound: Vec<String> = tasks
            .iter()
            .filter(|(_, t)| t.unfound && t.generation == object.generation)
            .map(|(_, t)| unit_name(t.unit))
            .collect();
        if unfound.is_empty() {
            return Ok(Err(ApiError::new(
                StatusCode::CONFLICT,
                "not_unfound",
                format!(
                    "object {key:?} in bucket {bucket:?} has no unfound unit (no repair of it \
                     failed for lack of readable units), so it is not marked lost; a readable \
                     object is deleted with `weft rm`"
                ),
            )));
        }
        let tombstone = LostObject {
            bucket: bucket.clone(),
            key: key.clone(),
            generation: object.generation,
            lost_ms: now_ms(),
            unfound_units: unfound.clone(),
        };
        let value = serde_json::to_value(&tombstone).expect("a lost object is JSON");
        store.put_record(LOST_OBJECTS, &lost_name(&bucket, &key), &value, false)?;
        let deleted = store.delete_object(&bucket, &key)?;
        store.delete_record("object_attributes", &lost_name(&bucket, &key))?;
        let dropped = store.drop_repairs_of(&bucket, &key)? as u64;
        let nodes = store.list_nodes()?;
        Ok(Ok((deleted, unfound, dropped, nodes)))
    })
    .await??;
    let (object, unfound_units, dropped_repairs, nodes) = reply;
    tracing::warn!(
        bucket = %object.bucket,
        key = %object.key,
        generation = object.generation,
        unfound = ?unfound_units,
        "object marked lost"
    );
    let units = units_json(&object, &nodes, Some(&live))?;
    Ok(Json(MarkLostReply {
        bucket: object.bucket.clone(),
        key: object.key.clone(),
        generation: object.generation,
        lost: true,
        unfound_units,
        dropped_repairs,
        object: object_json(&object, units),
    }))
}
