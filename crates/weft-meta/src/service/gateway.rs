//! Gateway records over HTTP (docs/meta-api.md, "Gateway records"): the S3 gateway keeps its
//! access keys, multipart uploads and object attributes in meta through these routes.
//!
//! Invariants: a record is opaque JSON to meta, with one exception: an access-key record
//! must carry its secret sealed (`sealed_secret`), never in the clear (`secret_key` is 400
//! `plain_secret`), so no answer of meta can hand a secret out. A namespace outside
//! [`crate::store::GATEWAY_NAMESPACES`] is refused (404 `no_such_namespace`), meta's own
//! namespaces included; a create-only put (`?if_absent=true`) of an existing name is refused
//! (409 `record_exists`) and changes nothing.

use axum::{
    body::Bytes,
    extract::{Path, Query, State},
    http::StatusCode,
    Json,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{blocking, ApiError, Shared};
use crate::{store::GATEWAY_NAMESPACES, MetaError};

/// The namespace of the S3 gateway's access keys.
pub(crate) const ACCESS_KEYS: &str = "access_keys";
/// The field of an access-key record that holds a secret in the clear (refused).
const PLAIN_SECRET_FIELD: &str = "secret_key";
/// The field that holds it sealed with the cluster's seal key.
const SEALED_SECRET_FIELD: &str = "sealed_secret";

/// Only the gateway's namespaces are reachable over HTTP.
fn gateway_namespace(namespace: &str) -> Result<(), ApiError> {
    if GATEWAY_NAMESPACES.contains(&namespace) {
        Ok(())
    } else {
        Err(MetaError::NoSuchNamespace { namespace: namespace.into() }.into())
    }
}

/// The record with its plain secret sealed (bound to the access key id), or None when the
/// record holds no plain secret. A `secret_key` that is not a string is no usable secret; it
/// is dropped (never left in the clear) and the record stays unusable, as it was.
pub(crate) fn sealed_key_record(
    seal: &weft_auth::SealKey,
    access_key: &str,
    value: &Value,
) -> Option<Value> {
    let plain = value.get(PLAIN_SECRET_FIELD)?.clone();
    let mut sealed = value.clone();
    let object = sealed.as_object_mut()?;
    object.remove(PLAIN_SECRET_FIELD);
    match plain.as_str() {
        Some(text) => {
            object
                .insert(SEALED_SECRET_FIELD.into(), json!(seal.seal(access_key, text.as_bytes())));
        }
        None => tracing::error!(
            %access_key,
            "an access-key record held a secret_key that is not a string; dropped it"
        ),
    }
    Some(sealed)
}

#[derive(Deserialize)]
pub(crate) struct PutQuery {
    #[serde(default)]
    if_absent: bool,
}

/// `PUT /v1/records/{namespace}/{name}?if_absent=` with a JSON body.
pub(crate) async fn put(
    State(meta): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<PutQuery>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    gateway_namespace(&namespace)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("a record is a JSON value: {e}")))?;
    if namespace == ACCESS_KEYS && value.get(PLAIN_SECRET_FIELD).is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "plain_secret",
            format!(
                "an access-key record must not hold its secret in the clear ({PLAIN_SECRET_FIELD}); \
                 seal it with the cluster's seal key into {SEALED_SECRET_FIELD}"
            ),
        ));
    }
    blocking(&meta, move |store| store.put_record(&namespace, &name, &value, query.if_absent))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/records/{namespace}/{name}`: `{"name","value"}`, 404 `no_such_record`.
pub(crate) async fn get(
    State(meta): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    gateway_namespace(&namespace)?;
    let wanted = name.clone();
    match blocking(&meta, move |store| store.get_record(&namespace, &wanted)).await? {
        Some(value) => Ok(Json(json!({ "name": name, "value": value }))),
        None => Err(no_such_record(&name)),
    }
}

/// `DELETE /v1/records/{namespace}/{name}`: the removed record, 404 `no_such_record`.
pub(crate) async fn delete(
    State(meta): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    gateway_namespace(&namespace)?;
    let wanted = name.clone();
    match blocking(&meta, move |store| store.delete_record(&namespace, &wanted)).await? {
        Some(value) => Ok(Json(json!({ "name": name, "value": value }))),
        None => Err(no_such_record(&name)),
    }
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    prefix: String,
    start_after: Option<String>,
    limit: Option<usize>,
}

/// `GET /v1/records/{namespace}?prefix=&start_after=&limit=`:
/// `{"records":[{"name","value"}...],"next_start_after":null|name}`.
pub(crate) async fn list(
    State(meta): State<Shared>,
    Path(namespace): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    gateway_namespace(&namespace)?;
    // One below the store's cap, so asking for one more tells whether another page follows.
    let most = crate::MAX_LIST_LIMIT - 1;
    let limit = query.limit.unwrap_or(most).clamp(1, most);
    let page = blocking(&meta, move |store| {
        store.list_records(&namespace, &query.prefix, query.start_after.as_deref(), limit + 1)
    })
    .await?;
    let more = page.len() > limit;
    let records: Vec<Value> = page
        .into_iter()
        .take(limit)
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect();
    let next = if more { records.last().map(|r| r["name"].clone()) } else { None };
    Ok(Json(json!({ "records": records, "next_start_after": next })))
}

fn no_such_record(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no_such_record", format!("no record {name:?}"))
}
