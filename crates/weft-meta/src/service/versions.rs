//! The versioning routes of the meta service (S3 versioning; the rules are
//! [`crate::versions`]'s): a bucket's versioning state, the listing of every version of its
//! keys, and reading or deleting one version. Routes, bodies and statuses:
//! docs/meta-api.md ("Versions").
//!
//! Invariants:
//! - A version's JSON is the object's (`objects::object_json`, units included, so a reader
//!   reads a noncurrent version like any object) under the bucket and key where it is
//!   stored, plus `version_id`, `delete_marker`, `is_latest` and `version_of` (its S3
//!   bucket and key).
//! - A listing is two ordered walks merged, the current objects of the bucket and its
//!   versions in [`crate::VERSIONS_BUCKET`], each page bounded by `limit` (at most
//!   [`crate::MAX_LIST_LIMIT`]) entries read from each walk; it resumes after
//!   (`key_marker`, `version_id_marker`) as S3's does. Like an object listing it is not a
//!   snapshot: a version that moves while a listing pages may be listed twice or not at all.
//! - Every store call runs on a blocking task (see `blocking`).

use axum::{
    body::Bytes,
    extract::{Path, Query, State},
    http::StatusCode,
    Json,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::objects::{object_json, units_json};
use super::{blocking, now_ms, ApiError, Shared};
use crate::versions::{
    bucket_versions_prefix, parse_version_name, version_name, versions_prefix, VersionRef,
};
use crate::{MetaError, MetaStore, ObjectRecord, Versioning, MAX_LIST_LIMIT, VERSIONS_BUCKET};

/// The JSON of a version as stored (`objects::object_json`) with its S3 identity.
pub(crate) fn version_json(record: &ObjectRecord, units: Value, is_latest: bool) -> Value {
    let (bucket, key) = crate::versions::s3_name(record);
    let mut value = units;
    value["version_id"] = json!(record.version_id());
    value["delete_marker"] = json!(record.delete_marker);
    value["is_latest"] = json!(is_latest);
    value["version_of"] = json!({ "bucket": bucket, "key": key });
    value
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VersioningBody {
    versioning: Versioning,
}

/// `PUT /v1/buckets/{name}/versioning`: body `{"versioning": "enabled" | "suspended"}`.
pub(crate) async fn set_versioning(
    State(meta): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: VersioningBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"versioning\": \"enabled\" or \"suspended\"}}: {e}"
        ))
    })?;
    let record =
        blocking(&meta, move |store| store.set_bucket_versioning(&name, body.versioning, now_ms()))
            .await?;
    tracing::info!(bucket = %record.name, versioning = body.versioning.as_str(), "bucket versioning set");
    Ok(Json(json!(record)))
}

/// Which version a route names: `version_id=` an S3 version id (`null` or a generation) or,
/// for reads, absent for the newest.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct VersionQuery {
    version_id: Option<String>,
    /// Deletes: only when the version's generation is this (412 otherwise).
    if_generation: Option<u64>,
    /// Deletes: remove a version under governance retention.
    #[serde(default)]
    bypass_governance: bool,
}

fn version_ref(query: &VersionQuery, latest_allowed: bool) -> Result<VersionRef, ApiError> {
    match query.version_id.as_deref() {
        None if latest_allowed => Ok(VersionRef::Latest),
        None => Err(ApiError::bad_request("version_id= is required")),
        Some(text) => VersionRef::parse(text).ok_or_else(|| {
            let mut error = ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_version_id",
                format!("{text:?} is not a version id (\"null\" or a generation)"),
            );
            error.body["version_id"] = json!(text);
            error
        }),
    }
}

/// `GET /v1/buckets/{bucket}/versions/{key}[?version_id=V]`: that version (the newest when
/// none is named: the current object, or a delete marker).
pub(crate) async fn get_version(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
    Query(query): Query<VersionQuery>,
) -> Result<Json<Value>, ApiError> {
    let version = version_ref(&query, true)?;
    let live = meta.liveness();
    let (record, nodes, is_latest) = blocking(&meta, move |store| {
        let record = store.get_version(&bucket, &key, version)?;
        let is_latest = version == VersionRef::Latest
            || store.get_version(&bucket, &key, VersionRef::Latest)?.generation
                == record.generation;
        Ok((record, store.list_nodes()?, is_latest))
    })
    .await?;
    let units = units_json(&record, &nodes, Some(&live))?;
    Ok(Json(version_json(&record, object_json(&record, units), is_latest)))
}

/// `DELETE /v1/buckets/{bucket}/versions/{key}?version_id=V[&if_generation=G]`: removes that
/// version for good; answers it as it was stored (its units are the caller's to delete).
pub(crate) async fn delete_version(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
    Query(query): Query<VersionQuery>,
) -> Result<Json<Value>, ApiError> {
    let version = version_ref(&query, false)?;
    let terms = crate::VersionDelete {
        precondition: query.if_generation.map(crate::Precondition::Generation),
        bypass_governance: query.bypass_governance,
        now_ms: now_ms(),
    };
    let changed = (bucket.clone(), key.clone());
    let (record, nodes) = blocking(&meta, move |store| {
        let record = store.delete_version(&bucket, &key, version, terms)?;
        Ok((record, store.list_nodes()?))
    })
    .await?;
    meta.changes.note(&changed.0, &changed.1);
    tracing::info!(bucket = %changed.0, key = %changed.1, version = %record.version_id(), "version deleted");
    let units = units_json(&record, &nodes, Some(&meta.liveness()))?;
    Ok(Json(version_json(&record, object_json(&record, units), false)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectLockBody {
    #[serde(default)]
    default_retention: Option<crate::DefaultRetention>,
}

/// `PUT /v1/buckets/{name}/object-lock`: body `{"default_retention": null | {"mode":
/// "governance" | "compliance", "days": N | "years": N}}`. Enables object lock (versioning
/// must be enabled: 409 `invalid_bucket_state`) or replaces its default retention.
pub(crate) async fn set_object_lock(
    State(meta): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: ObjectLockBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"default_retention\": null or {{\"mode\": \"governance\" or \
             \"compliance\", \"days\" or \"years\": N}}}}: {e}"
        ))
    })?;
    let lock = crate::BucketLock { default_retention: body.default_retention };
    let record = blocking(&meta, move |store| store.set_bucket_object_lock(&name, lock)).await?;
    tracing::info!(bucket = %record.name, "bucket object lock set");
    Ok(Json(json!(record)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockBody {
    /// Sets (an object) or removes (null) the retention.
    #[serde(default, deserialize_with = "present")]
    retention: Option<Option<crate::Retention>>,
    legal_hold: Option<bool>,
    #[serde(default)]
    bypass_governance: bool,
}

/// A field that may be null, told apart from one that is absent (which is None).
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// `PUT /v1/buckets/{bucket}/locks/{key}[?version_id=V]`: changes the object lock of that
/// version (the current object when none is named). Body: `{"retention": {"mode",
/// "until_ms"} | null}` or `{"legal_hold": bool}`, with `"bypass_governance": true` to
/// shorten or remove a governance retention. Answers the version.
pub(crate) async fn set_version_lock(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
    Query(query): Query<VersionQuery>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let version = version_ref(&query, true)?;
    let usage = "the body must be {\"retention\": {\"mode\", \"until_ms\"} or null} or \
                 {\"legal_hold\": bool}, with an optional \"bypass_governance\": bool";
    let body: LockBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("{usage}: {e}")))?;
    let change = match (body.retention, body.legal_hold) {
        (Some(retention), None) => crate::LockChange::Retention(retention),
        (None, Some(on)) => crate::LockChange::LegalHold(on),
        _ => return Err(ApiError::bad_request(usage)),
    };
    let live = meta.liveness();
    let changed = (bucket.clone(), key.clone());
    let (record, nodes) = blocking(&meta, move |store| {
        let record = store.set_version_lock(
            &bucket,
            &key,
            version,
            change,
            body.bypass_governance,
            now_ms(),
        )?;
        Ok((record, store.list_nodes()?))
    })
    .await?;
    tracing::info!(bucket = %changed.0, key = %changed.1, version = %record.version_id(), "version lock set");
    let units = units_json(&record, &nodes, Some(&live))?;
    let is_latest = record.bucket != VERSIONS_BUCKET;
    Ok(Json(version_json(&record, object_json(&record, units), is_latest)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AttributesBody {
    attributes: Value,
}

/// `PUT /v1/buckets/{bucket}/attributes/{key}[?version_id=V]`: body `{"attributes": {...}}`
/// replaces the attributes of that version (the current object when none is named), as a
/// commit would have set them (400 `invalid_attributes` otherwise). Answers the version.
pub(crate) async fn set_version_attributes(
    State(meta): State<Shared>,
    Path((bucket, key)): Path<(String, String)>,
    Query(query): Query<VersionQuery>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let version = version_ref(&query, true)?;
    let body: AttributesBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("the body must be {{\"attributes\": {{...}}}}: {e}"))
    })?;
    let live = meta.liveness();
    let (record, nodes) = blocking(&meta, move |store| {
        let record = store.set_version_attributes(&bucket, &key, version, body.attributes)?;
        Ok((record, store.list_nodes()?))
    })
    .await?;
    let units = units_json(&record, &nodes, Some(&live))?;
    let is_latest = record.bucket != VERSIONS_BUCKET;
    Ok(Json(version_json(&record, object_json(&record, units), is_latest)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    #[serde(default)]
    prefix: String,
    key_marker: Option<String>,
    version_id_marker: Option<String>,
    limit: Option<usize>,
}

/// One entry of a listing, before it is JSON.
struct Listed {
    record: ObjectRecord,
    key: String,
    is_latest: bool,
}

/// `GET /v1/buckets/{bucket}/versions?prefix=&key_marker=&version_id_marker=&limit=`: every
/// version of the keys starting with `prefix`, by key, newest first within a key; `next`
/// names the markers of the following page when there is one.
pub(crate) async fn list_versions(
    State(meta): State<Shared>,
    Path(bucket): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = query.limit.unwrap_or(MAX_LIST_LIMIT).clamp(1, MAX_LIST_LIMIT);
    if query.version_id_marker.is_some() && query.key_marker.is_none() {
        return Err(ApiError::bad_request("version_id_marker needs key_marker"));
    }
    let marker = match &query.version_id_marker {
        None => None,
        Some(text) => Some(VersionRef::parse(text).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_version_id",
                format!("version_id_marker {text:?} is not a version id"),
            )
        })?),
    };
    let (listed, truncated) =
        blocking(&meta, move |store| list(store, &bucket, &query, marker, limit)).await?;
    let next = match (truncated, listed.last()) {
        (true, Some(last)) => {
            json!({ "key_marker": last.key, "version_id_marker": last.record.version_id() })
        }
        _ => Value::Null,
    };
    let versions: Vec<Value> = listed
        .iter()
        .map(|entry| {
            let record = &entry.record;
            let mut value = json!({
                "key": entry.key,
                "version_id": record.version_id(),
                "generation": record.generation,
                "size": record.size(),
                "created_ms": record.created_ms,
                "is_latest": entry.is_latest,
                "delete_marker": record.delete_marker,
            });
            if let Some(attributes) = &record.attributes {
                value["attributes"] = attributes.clone();
            }
            value
        })
        .collect();
    Ok(Json(json!({ "versions": versions, "next": next })))
}

/// One page of versions (see [`list_versions`]); true when more follow.
fn list(
    store: &dyn MetaStore,
    bucket: &str,
    query: &ListQuery,
    marker: Option<VersionRef>,
    limit: usize,
) -> Result<(Vec<Listed>, bool), MetaError> {
    let prefix = query.prefix.as_str();
    store.get_bucket(bucket)?;
    // Where each walk starts: current objects after the key marker (its current object, if
    // any, came first among its versions, so it is behind us either way); versions after
    // the marker's version, or after all of the key marker's versions.
    let current_after = query.key_marker.clone();
    let mut versions_after = None;
    let mut resume_key = None;
    if let Some(key) = &query.key_marker {
        let generation = match marker {
            Some(VersionRef::Generation(generation)) => Some(generation),
            Some(VersionRef::Null) => match store.get_version(bucket, key, VersionRef::Null) {
                Ok(record) => Some(record.generation),
                Err(MetaError::NoSuchVersion { .. }) => None,
                Err(other) => return Err(other),
            },
            _ => None,
        };
        versions_after = Some(match generation {
            Some(generation) => {
                resume_key = Some(key.clone());
                version_name(bucket, key, generation)
            }
            // Past every version name of the key ('g' follows the hex digits).
            None => format!("{}g", versions_prefix(bucket, key)),
        });
    }
    let versions_prefix_all = bucket_versions_prefix(bucket, prefix);
    let current = store.list_objects(bucket, prefix, current_after.as_deref(), limit)?;
    // The versions bucket exists once any bucket was versioned.
    let noncurrent = match store.list_objects(
        VERSIONS_BUCKET,
        &versions_prefix_all,
        versions_after.as_deref(),
        limit,
    ) {
        Err(MetaError::NoSuchBucket { .. }) => {
            crate::ObjectPage { objects: Vec::new(), next_start_after: None }
        }
        other => other?,
    };
    let mut current_iter = current.objects.into_iter().peekable();
    let mut noncurrent_iter = noncurrent
        .objects
        .into_iter()
        .filter_map(|record| {
            let (b, k, _) = parse_version_name(&record.key)?;
            let key = (b == bucket).then(|| k.to_string())?;
            Some((key, record))
        })
        .peekable();
    let mut out: Vec<Listed> = Vec::new();
    // Whether a walk's page ran out while it has more: the merge must stop there.
    let current_more = current.next_start_after.is_some();
    let noncurrent_more = noncurrent.next_start_after.is_some();
    let truncated;
    loop {
        if out.len() == limit {
            truncated = current_iter.peek().is_some()
                || noncurrent_iter.peek().is_some()
                || current_more
                || noncurrent_more;
            break;
        }
        let take_current = match (current_iter.peek(), noncurrent_iter.peek()) {
            (None, None) => {
                truncated = current_more || noncurrent_more;
                break;
            }
            (Some(_), None) if noncurrent_more => {
                truncated = true;
                break;
            }
            (None, Some(_)) if current_more => {
                truncated = true;
                break;
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(c), Some((k, _))) => c.key.as_str() <= k.as_str(),
        };
        if take_current {
            let record = current_iter.next().expect("peeked");
            out.push(Listed { key: record.key.clone(), record, is_latest: true });
        } else {
            let (key, record) = noncurrent_iter.next().expect("peeked");
            // The newest version of a key with no current object is the latest, unless this
            // page resumed inside the key (its newest was on an earlier page). A current
            // object sorts first among its key's versions, so it would be in `out` already.
            let is_latest = out.last().is_none_or(|last| last.key != key)
                && resume_key.as_deref() != Some(key.as_str());
            out.push(Listed { key, record, is_latest });
        }
    }
    Ok((out, truncated))
}
