//! The HTTP data API (docs/node-api.md).
//!
//! Invariants:
//! - Every error response has a JSON body `{"error": "<code>", "message": "...", ...}`, and
//!   each failure class has one status: 400 bad request, 404 missing, 409 exists, 411 no
//!   Content-Length, 413 too large, 416 unsatisfiable range, **500 corrupt** (and only corrupt:
//!   the client rebuilds the unit), 503 disk failed or other disk trouble (try another replica),
//!   **507 disk full** (and only that: the unit was not stored, the disk is healthy and
//!   read-only; store the unit on another disk).
//! - A PUT body is streamed into a `UnitWriter` in batches of about [`CHUNK_BYTES`] (the
//!   frames as received, one vectored write each, never gathered into one buffer); a unit of
//!   at most [`CHUNK_BYTES`] is received whole and stored by one blocking call. A GET is
//!   read back in chunks of at most [`CHUNK_BYTES`]. The first chunk of a GET is read and
//!   verified before the status line is sent, so a corrupt first chunk is a clean 500. A
//!   checksum failure in a later chunk aborts the response body (the client sees a short body
//!   and must not trust it); ranges of at most [`CHUNK_BYTES`] never hit that case.

use std::{
    sync::Arc,
    time::{Instant, SystemTime},
};

use axum::{
    body::Body,
    extract::{DefaultBodyLimit, MatchedPath, Path, Query, Request, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use futures_util::StreamExt;
use serde_json::{json, Value};
use weft_store::{Disk, StoreError, UnitInfo, UnitKey, SEGMENT_BYTES};

use crate::{heartbeat::disk_reports, raidp, Node};

/// Bytes moved per blocking store call: 16 segments, so reads are segment aligned.
pub(crate) const CHUNK_BYTES: u64 = 16 * SEGMENT_BYTES as u64;

/// Header carrying a unit's generation on GET and HEAD.
pub const GENERATION_HEADER: &str = "x-weft-generation";
/// Header carrying a unit's full length on GET and HEAD (also for ranged GETs).
pub const UNIT_LENGTH_HEADER: &str = "x-weft-unit-length";

type Shared = Arc<Node>;

/// Largest signed (buffered) body: the node's only routes with bodies stream them unsigned
/// (unit PUTs); anything else is small.
pub(crate) const MAX_SIGNED_BODY_BYTES: usize = 1 << 20;

pub(crate) fn router(node: Shared, guard: weft_auth::axum_layer::Guard) -> Router {
    Router::new()
        .route(
            "/v1/disks/{disk}/units/{unit}",
            get(get_unit).head(head_unit).put(put_unit).delete(delete_unit),
        )
        .route("/v1/disks/{disk}/units", get(list_units))
        .route("/v1/disks/{disk}/scrub", post(scrub))
        .route("/v1/disks/{disk}/fail", post(drill_fail))
        .route("/v1/disks/{disk}/replace", post(drill_replace))
        .route("/v1/disks/{disk}/raidp", get(raidp::state))
        .route("/v1/disks/{disk}/raidp/slots/{slot}", get(raidp::read).put(raidp::write))
        .route("/v1/disks/{disk}/raidp/parity/{index}", get(raidp::parity))
        .route("/v1/disks/{disk}/raidp/clear", post(raidp::clear))
        .route("/v1/disks/{disk}/raidp/slots/{slot}/trim", post(raidp::trim))
        .route("/v1/disks/{disk}/raidp/pending", get(raidp::pending))
        .route("/v1/disks/{disk}/raidp/verify", post(raidp::verify))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(guard, weft_auth::axum_layer::require_signature))
        .layer(middleware::from_fn_with_state(node.clone(), count_requests))
        .with_state(node)
}

async fn count_requests(State(node): State<Shared>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |path| path.as_str())
        .to_owned();
    let method = request.method().clone();
    let start = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    node.metrics.request(method.as_str(), &route, status);
    tracing::debug!(%method, %route, status, elapsed_ms = start.elapsed().as_millis() as u64, "request");
    response
}

/// An error response: status plus JSON body.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: Value,
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, error: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({ "error": error, "message": message.into() }),
            headers: Vec::new(),
        }
    }

    /// 400: `what` names the part of the request that was wrong.
    pub(crate) fn bad_request(what: &str, message: impl Into<String>) -> ApiError {
        let mut error = ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message);
        error.body["what"] = json!(what);
        error
    }

    /// Whether this is the error of that code.
    pub(crate) fn is(&self, code: &str) -> bool {
        self.body["error"] == code
    }

    pub(crate) fn with(mut self, field: &str, value: Value) -> ApiError {
        self.body[field] = value;
        self
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "internal", message)
    }
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// Status, extra headers and JSON body, for answers written without axum (the sendfile
    /// path).
    pub(crate) fn into_parts(
        self,
    ) -> (StatusCode, Vec<(header::HeaderName, HeaderValue)>, Vec<u8>) {
        (self.status, self.headers, self.body.to_string().into_bytes())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        let message = error.to_string();
        match &error {
            StoreError::NotFound { key, .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
                    .with("unit", json!(key.to_string()))
            }
            StoreError::AlreadyExists { key, .. } => {
                ApiError::new(StatusCode::CONFLICT, "exists", message)
                    .with("unit", json!(key.to_string()))
            }
            StoreError::OutOfRange { key, unit_bytes, .. } => {
                ApiError::new(StatusCode::RANGE_NOT_SATISFIABLE, "range_not_satisfiable", message)
                    .with("unit", json!(key.to_string()))
                    .with("unit_bytes", json!(unit_bytes))
            }
            StoreError::Corrupt { key, segment, .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", message)
                    .with("unit", json!(key.to_string()))
                    .with("segment", json!(segment))
            }
            StoreError::BadHeader { key, .. } | StoreError::BadFileLength { key, .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "corrupt", message)
                    .with("unit", json!(key.to_string()))
                    .with("segment", Value::Null)
            }
            StoreError::TooLarge { key, max_bytes, .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
                    .with("unit", json!(key.to_string()))
                    .with("max_bytes", json!(max_bytes))
            }
            StoreError::LengthMismatch { key, .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "length_mismatch", message)
                    .with("unit", json!(key.to_string()))
            }
            StoreError::DiskFailed { cause, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "disk_failed", message)
                    .with("cause", json!(cause))
            }
            StoreError::Full { key, reason, .. } => {
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "disk_full", message)
                    .with("unit", json!(key.to_string()))
                    .with("reason", json!(reason))
            }
            _ => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "io", message),
        }
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// A mutating call that failed with `Io` has just put the disk in its failed state: say so, as
/// every later call will.
pub(crate) fn after_mutation(disk: &Disk, error: ApiError) -> ApiError {
    match disk.failure() {
        Some(cause) if error.body["error"] == "io" => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "disk_failed",
            error.body["message"].as_str().unwrap_or_default(),
        )
        .with("cause", json!(cause)),
        _ => error,
    }
}

/// Runs blocking work that answers API errors on a blocking task.
pub(crate) async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join) => Err(ApiError::internal(format!("store task failed: {join}"))),
    }
}

/// Runs a blocking store call on a blocking task.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(join) => Err(ApiError::internal(format!("store task failed: {join}"))),
    }
}

pub(crate) fn disk_of(node: &Node, disk: &str) -> ApiResult<(usize, Disk)> {
    let index: usize = disk.parse().map_err(|_| {
        ApiError::bad_request("disk", format!("disk index {disk:?} is not a non-negative integer"))
    })?;
    match node.disks.get(index) {
        Some(found) => Ok((index, found.clone())),
        None => Err(ApiError::bad_request(
            "disk",
            format!("no disk {index}: this node has {} disks", node.disks.len()),
        )),
    }
}

/// Parses a unit name: [`UnitKey`]'s Display form, with or without the `.unit` suffix.
pub(crate) fn key_of(unit: &str) -> ApiResult<UnitKey> {
    let name = if unit.ends_with(".unit") { unit.to_owned() } else { format!("{unit}.unit") };
    UnitKey::from_file_name(&name).ok_or_else(|| {
        ApiError::bad_request(
            "unit",
            format!(
                "{unit:?} is not a unit name (<object:32 hex>-d<block:8 hex>-<generation:16 hex> \
                 or <object:32 hex>-p<group:8 hex><index:4 hex>-<generation:16 hex>)"
            ),
        )
    })
}

pub(crate) fn info_json(info: &UnitInfo) -> Value {
    json!({
        "unit": info.key.to_string(),
        "len_bytes": info.len_bytes,
        "generation": info.generation,
        "segment_bytes": info.segment_bytes,
        "segment_count": info.segment_count,
        "format_version": info.format_version,
        "file_bytes": info.file_bytes,
    })
}

pub(crate) fn unit_headers(headers: &mut HeaderMap, info: &UnitInfo) {
    headers.insert(GENERATION_HEADER, HeaderValue::from(info.generation));
    headers.insert(UNIT_LENGTH_HEADER, HeaderValue::from(info.len_bytes));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

async fn put_unit(
    State(node): State<Shared>,
    Path((disk, unit)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (index, disk) = disk_of(&node, &disk)?;
    let key = key_of(&unit)?;
    // HTTP/1.1: a request with neither Content-Length nor Transfer-Encoding has no body, so
    // clients may omit `Content-Length: 0`. A chunked body has no length to create with.
    let len_bytes: u64 = match headers.get(header::CONTENT_LENGTH) {
        Some(length) => {
            length.to_str().ok().and_then(|text| text.parse().ok()).ok_or_else(|| {
                ApiError::bad_request("content-length", "Content-Length is not a number")
            })?
        }
        None if headers.contains_key(header::TRANSFER_ENCODING) => {
            return Err(ApiError::new(
                StatusCode::LENGTH_REQUIRED,
                "length_required",
                "PUT of a unit needs a Content-Length (chunked bodies are refused)",
            ))
        }
        None => 0,
    };
    let mut stream = body.into_data_stream();
    if len_bytes <= CHUNK_BYTES {
        // A small unit is received whole, then created, written and made durable in one
        // blocking call: one thread handoff instead of one per step (small objects write
        // many small units, and the handoffs were most of their cost).
        let mut frames: Vec<axum::body::Bytes> = Vec::new();
        let mut received: u64 = 0;
        while let Some(bytes) = next_frame(&node, &mut stream, &mut received).await? {
            frames.push(bytes);
        }
        node.metrics.bytes_in(received);
        check_body_length(len_bytes, received)?;
        drop(modeled_io(&node, index, key, 0, received).await);
        let storing = disk.clone();
        let info = blocking(move || {
            let mut writer = storing.create(key, len_bytes)?;
            let pieces: Vec<&[u8]> = frames.iter().map(|frame| frame.as_ref()).collect();
            writer.write_all_pieces(&pieces)?;
            writer.finish()
        })
        .await
        .map_err(|error| after_mutation(&disk, error))?;
        return Ok(created(&info));
    }
    let creating = disk.clone();
    let mut writer = blocking(move || creating.create(key, len_bytes))
        .await
        .map_err(|error| after_mutation(&disk, error))?;
    // The body's frames as received, handed to the store in one vectored write once they
    // hold CHUNK_BYTES (no gathering copy).
    let mut pending: Vec<axum::body::Bytes> = Vec::new();
    let mut pending_bytes: u64 = 0;
    let mut received: u64 = 0;
    loop {
        let next = next_frame(&node, &mut stream, &mut received).await?;
        let done = next.is_none();
        if let Some(bytes) = next {
            pending_bytes += bytes.len() as u64;
            pending.push(bytes);
        }
        if pending_bytes >= CHUNK_BYTES || (done && pending_bytes > 0) {
            let frames = std::mem::take(&mut pending);
            pending_bytes = 0;
            let (back, result) = tokio::task::spawn_blocking(move || {
                let pieces: Vec<&[u8]> = frames.iter().map(|frame| frame.as_ref()).collect();
                let result = writer.write_all_pieces(&pieces);
                drop(pieces);
                (writer, result.map(|()| frames))
            })
            .await
            .map_err(|join| ApiError::internal(format!("store task failed: {join}")))?;
            writer = back;
            pending = result.map_err(|error| after_mutation(&disk, error.into()))?;
            pending.clear();
        }
        if done {
            break;
        }
    }
    node.metrics.bytes_in(received);
    check_body_length(len_bytes, received)?;
    // Under a disk model the unit's write is one IO, charged before it is made durable.
    drop(modeled_io(&node, index, key, 0, received).await);
    let info =
        blocking(move || writer.finish()).await.map_err(|error| after_mutation(&disk, error))?;
    Ok(created(&info))
}

/// The next frame of a PUT body (`None` at its end), counted into `received` and through
/// the node's link model.
async fn next_frame(
    node: &Node,
    stream: &mut axum::body::BodyDataStream,
    received: &mut u64,
) -> ApiResult<Option<axum::body::Bytes>> {
    let Some(frame) = stream.next().await else { return Ok(None) };
    let bytes = frame.map_err(|error| {
        ApiError::bad_request(
            "body",
            format!("reading the body failed after {received} bytes: {error}"),
        )
        .with("error", json!("short_body"))
    })?;
    *received += bytes.len() as u64;
    if let Some(link) = &node.link_in {
        link.transfer(bytes.len() as u64).await;
    }
    Ok(Some(bytes))
}

fn check_body_length(len_bytes: u64, received: u64) -> ApiResult<()> {
    if received == len_bytes {
        return Ok(());
    }
    Err(ApiError::bad_request(
        "body",
        format!("Content-Length says {len_bytes} bytes, the body had {received}"),
    )
    .with("error", json!("short_body")))
}

/// The answer to a stored unit: 201 with its info and generation.
fn created(info: &UnitInfo) -> Response {
    let mut response = (StatusCode::CREATED, Json(info_json(info))).into_response();
    response.headers_mut().insert(GENERATION_HEADER, HeaderValue::from(info.generation));
    response
}

async fn head_unit(
    State(node): State<Shared>,
    Path((disk, unit)): Path<(String, String)>,
) -> ApiResult<Response> {
    let (_, disk) = disk_of(&node, &disk)?;
    let key = key_of(&unit)?;
    let info = blocking(move || disk.stat(key)).await?;
    let mut response = StatusCode::OK.into_response();
    unit_headers(response.headers_mut(), &info);
    response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(info.len_bytes));
    Ok(response)
}

/// A byte range `[start, end)` of a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteRange {
    pub(crate) start: u64,
    pub(crate) end: u64,
}

/// Parses a `Range` header against a unit of `len` bytes. `Ok(None)`: no range (whole unit).
pub(crate) fn parse_range(value: &HeaderValue, len: u64, key: UnitKey) -> ApiResult<ByteRange> {
    let bad = |why: &str| ApiError::bad_request("range", format!("bad Range header: {why}"));
    let text = value.to_str().map_err(|_| bad("not ASCII"))?.trim();
    let spec = text.strip_prefix("bytes=").ok_or_else(|| bad("only `bytes=` ranges are served"))?;
    if spec.contains(',') {
        return Err(bad("only a single range is served"));
    }
    let (first, last) = spec.split_once('-').ok_or_else(|| bad("expected `a-b`, `a-` or `-n`"))?;
    let number = |text: &str| text.trim().parse::<u64>().map_err(|_| bad("not a number"));
    let unsatisfiable = || {
        let mut error = ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "range_not_satisfiable",
            format!("range {spec} is outside unit {key} of {len} bytes"),
        )
        .with("unit", json!(key.to_string()))
        .with("unit_bytes", json!(len));
        error.headers.push((
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes */{len}")).expect("ASCII"),
        ));
        error
    };
    let range = if first.trim().is_empty() {
        let suffix = number(last)?;
        if suffix == 0 || len == 0 {
            return Err(unsatisfiable());
        }
        ByteRange { start: len.saturating_sub(suffix), end: len }
    } else {
        let start = number(first)?;
        let end = if last.trim().is_empty() {
            len
        } else {
            let last = number(last)?;
            if last < start {
                return Err(bad("the last byte is before the first"));
            }
            last.saturating_add(1).min(len)
        };
        if start >= len {
            return Err(unsatisfiable());
        }
        ByteRange { start, end }
    };
    Ok(range)
}

/// The disk's turn for an IO of `len` bytes of `key` at `offset` under its hardware model
/// (waited for: queue, positioning, transfer); `None` at once without a model.
async fn modeled_io(
    node: &Node,
    disk: usize,
    key: UnitKey,
    offset: u64,
    len: u64,
) -> Option<crate::model::DiskTurn<'_>> {
    match &node.models[disk] {
        Some(model) => Some(model.io(key, offset, len).await),
        None => None,
    }
}

async fn get_unit(
    State(node): State<Shared>,
    Path((disk, unit)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (index, disk) = disk_of(&node, &disk)?;
    let key = key_of(&unit)?;
    let range_header = headers.get(header::RANGE).cloned();
    // Without a disk model, one blocking call opens the unit, answers the range and reads
    // the first chunk (a small unit's whole GET is one thread handoff); under a model the
    // IO is waited out between the open and the first read.
    let modeled = node.models[index].is_some();
    let opening = disk.clone();
    let (reader, status, range, first_end, first) = run_blocking(move || {
        let reader = opening.open_reader(key)?;
        let len = reader.info().len_bytes;
        let (status, range) = match &range_header {
            Some(value) => (StatusCode::PARTIAL_CONTENT, parse_range(value, len, key)?),
            None => (StatusCode::OK, ByteRange { start: 0, end: len }),
        };
        // The first chunk is read before answering, so its corruption is a clean 500.
        let first_end = range.end.min(range.start + CHUNK_BYTES);
        let first = match modeled {
            true => None,
            false => Some(reader.read(range.start, (first_end - range.start) as usize)?),
        };
        Ok((Arc::new(reader), status, range, first_end, first))
    })
    .await?;
    let info = reader.info();
    let len = info.len_bytes;
    let first = match first {
        Some(first) => first,
        None => {
            // Under a disk model the whole range is one IO (a disk's queue and readahead keep
            // one stream's sequential reads together), waited out before the first byte.
            drop(modeled_io(&node, index, key, range.start, range.end - range.start).await);
            let reading = reader.clone();
            blocking(move || reading.read(range.start, (first_end - range.start) as usize)).await?
        }
    };
    node.metrics.bytes_out(first.len() as u64);
    if let Some(link) = &node.link_out {
        link.transfer(first.len() as u64).await;
    }
    let metrics_node = node.clone();
    let rest = futures_util::stream::unfold(first_end, move |offset| {
        let (reader, node) = (reader.clone(), metrics_node.clone());
        async move {
            if offset >= range.end {
                return None;
            }
            let end = range.end.min(offset + CHUNK_BYTES);
            let read =
                tokio::task::spawn_blocking(move || reader.read(offset, (end - offset) as usize))
                    .await
                    .map_err(std::io::Error::other)
                    .and_then(|result| result.map_err(std::io::Error::other));
            match read {
                Ok(bytes) => {
                    node.metrics.bytes_out(bytes.len() as u64);
                    if let Some(link) = &node.link_out {
                        link.transfer(bytes.len() as u64).await;
                    }
                    Some((Ok(bytes), end))
                }
                Err(error) => {
                    tracing::error!(%key, offset, %error, "aborting a unit response mid-body");
                    // Ending at range.end stops the stream after this error.
                    Some((Err(error), range.end))
                }
            }
        }
    });
    let body =
        futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(rest);
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    unit_headers(headers, &info);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(range.end - range.start));
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if status == StatusCode::PARTIAL_CONTENT {
        let content_range = format!("bytes {}-{}/{len}", range.start, range.end - 1);
        headers
            .insert(header::CONTENT_RANGE, HeaderValue::from_str(&content_range).expect("ASCII"));
    }
    Ok(response)
}

async fn delete_unit(
    State(node): State<Shared>,
    Path((disk, unit)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let (_, disk) = disk_of(&node, &disk)?;
    let key = key_of(&unit)?;
    let deleting = disk.clone();
    blocking(move || deleting.delete(key)).await.map_err(|error| after_mutation(&disk, error))?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, serde::Deserialize)]
struct ListQuery {
    /// `1` or `true`: each unit with its age and file length.
    #[serde(default)]
    ages: Option<String>,
}

/// `GET /v1/disks/{disk}/units[?ages=1]`.
async fn list_units(
    State(node): State<Shared>,
    Path(disk): Path<String>,
    Query(query): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let (index, disk) = disk_of(&node, &disk)?;
    let with_ages = match query.ages.as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "ages",
                format!("ages={other:?}: use ages=1 (or leave it out)"),
            ))
        }
    };
    if !with_ages {
        let keys = blocking(move || disk.list()).await?;
        let units: Vec<String> = keys.iter().map(|key| key.to_string()).collect();
        return Ok(Json(json!({ "disk": index, "units": units })));
    }
    let listed = blocking(move || disk.list_detailed()).await?;
    // Ages by this node's clock, so whoever reads them needs no clock agreement with the
    // node; a file from the future (the clock went back) is age 0, never older than it is.
    let now = SystemTime::now();
    let units: Vec<Value> = listed
        .iter()
        .map(|unit| {
            let age = now.duration_since(unit.modified).unwrap_or_default();
            json!({
                "unit": unit.key.to_string(),
                "age_ms": u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                "file_bytes": unit.file_bytes,
            })
        })
        .collect();
    Ok(Json(json!({ "node_id": node.node_id, "disk": index, "units": units })))
}

async fn scrub(State(node): State<Shared>, Path(disk): Path<String>) -> ApiResult<Json<Value>> {
    let (index, disk) = disk_of(&node, &disk)?;
    let report = blocking(move || disk.scrub(|_| {})).await?;
    let corrupt: Vec<Value> = report
        .corrupt
        .iter()
        .map(|(key, segment)| json!({ "unit": key.to_string(), "segment": segment }))
        .collect();
    let unreadable: Vec<Value> = report
        .unreadable
        .iter()
        .map(|(key, error)| json!({ "unit": key.to_string(), "message": error.to_string() }))
        .collect();
    let unrecognised: Vec<String> =
        report.unrecognised.iter().map(|path| path.display().to_string()).collect();
    Ok(Json(json!({
        "disk": index,
        "checked": report.checked,
        "bytes_checked": report.bytes_checked,
        "corrupt": corrupt,
        "unreadable": unreadable,
        "unrecognised": unrecognised,
    })))
}

async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no_route", format!("no route {}", uri.path()))
        .with("path", json!(uri.path()))
}

/// `POST /v1/disks/{disk}/fail` (`weft disk fail`, a drill): the disk dies — its units and
/// RAIDP slots are removed and it reports failed (across restarts) until replaced; its Lstor
/// stays readable.
async fn drill_fail(
    State(node): State<Shared>,
    Path(disk): Path<String>,
) -> ApiResult<Json<Value>> {
    let (index, store) = disk_of(&node, &disk)?;
    let cause = "failed by a drill (weft disk fail); `weft disk replace` brings an empty disk back";
    blocking(move || store.drill_fail(cause)).await?;
    if let Some(side) = node.raidp[index].as_ref() {
        side.fail(cause);
    }
    tracing::warn!(disk = index, "disk failed by a drill: its units and slots are gone");
    Ok(Json(json!({ "disk": index, "failed": cause })))
}

/// `POST /v1/disks/{disk}/replace` (`weft disk replace`): an empty disk takes the failed
/// one's place; its old Lstor is dropped (a fresh one comes with the first RAIDP write).
async fn drill_replace(
    State(node): State<Shared>,
    Path(disk): Path<String>,
) -> ApiResult<Json<Value>> {
    let (index, store) = disk_of(&node, &disk)?;
    blocking(move || store.drill_replace()).await?;
    if let Some(side) = node.raidp[index].as_ref() {
        side.replace().map_err(|e| ApiError::internal(format!("dropping the old Lstor: {e}")))?;
    }
    tracing::warn!(disk = index, "disk replaced by an empty one");
    Ok(Json(json!({ "disk": index, "replaced": true })))
}

async fn health(State(node): State<Shared>) -> ApiResult<Json<Value>> {
    let reporting = node.clone();
    let disks = tokio::task::spawn_blocking(move || disk_reports(&reporting))
        .await
        .map_err(|join| ApiError::internal(format!("store task failed: {join}")))?;
    Ok(Json(json!({ "node_id": node.node_id, "disks": disks })))
}

async fn metrics(State(node): State<Shared>) -> ApiResult<Response> {
    let reporting = node.clone();
    let disks = tokio::task::spawn_blocking(move || disk_reports(&reporting))
        .await
        .map_err(|join| ApiError::internal(format!("store task failed: {join}")))?;
    let text = node.metrics.render(node.node_id, &disks);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
