//! The S3 operations over a weft cluster (see the crate doc for the mapping).
//!
//! Invariants:
//! - Every meta or node failure becomes an S3 error with S3's code and status: missing
//!   bucket 404 NoSuchBucket, missing key 404 NoSuchKey, meta or a node unreachable 503
//!   ServiceUnavailable (clients retry), anything else 500 InternalError with the cause.
//! - Conditional headers are evaluated as RFC 9110 orders them: If-Match, else
//!   If-Unmodified-Since (412); then If-None-Match, else If-Modified-Since (304 for GET and
//!   HEAD); all against the attributes S3 shows (whole seconds).
//! - `x-weft-policy` (e.g. `rs(10,4),stripe=2`) overrides the bucket's default policy for
//!   the object written by the request (on CreateBucket: sets the bucket's default policy);
//!   a bad one is refused before anything is written; so is any, good or bad, from a key not
//!   allowed to choose policies (`AccessDenied`, see `keys`).

use std::{
    collections::BTreeMap,
    time::{SystemTime, UNIX_EPOCH},
};

use futures_util::StreamExt;
use s3s::{dto::*, s3_error, S3Error, S3Request, S3Response, S3Result, S3};
use serde_json::{json, Value};
use weft_client::{Client, ClientError, ObjectInfo, Precondition, PutOptions};
use weft_layout::StripedLayout;

use crate::{
    access::{acl_record_name, shown_acl, AclCache, AclRequest, BucketAccess},
    acl::Acl,
    attributes::{self, Attributes},
    body::{put_stream, BodyChecks, CommitAttributes},
    checksum,
    cors::{self, CorsCache, CorsConfig},
    encryption::{customer_key, show_sse, wanted_sse},
    keys::MetaAuth,
    lifecycle::{self, LifecycleConfig},
    listing,
    multipart::{self, PartRecord, UploadRecord, PARTS_BUCKET, UPLOADS},
    object_lock, tagging, versioning,
};

/// The request header choosing an object's policy.
pub const POLICY_HEADER: &str = "x-weft-policy";
/// Most keys one listing page returns (S3's cap), and most keys one DeleteObjects names.
const MAX_KEYS: usize = 1000;
/// Most buckets one ListBuckets page may ask for (S3's cap).
const MAX_BUCKETS_LISTED: i32 = 10_000;

/// The ACL an object write asks for (PutObject, CopyObject and CreateMultipartUpload name
/// their canned ACL and grant fields alike): `Gateway::written_acl` of them.
macro_rules! object_write_acl {
    ($gateway:expr, $credentials:expr, $headers:expr, $input:expr) => {
        $gateway.written_acl(
            $credentials,
            $headers,
            &$input.bucket,
            $input.acl.as_ref(),
            [
                $input.grant_full_control.as_ref(),
                $input.grant_read.as_ref(),
                $input.grant_read_acp.as_ref(),
                $input.grant_write_acp.as_ref(),
            ],
        )
    };
}

/// The [`AclRequest`] of a request with an ACL body, grant headers and a canned ACL
/// (CreateBucket has no body: `None`).
macro_rules! acl_request {
    ($input:expr, $policy:expr) => {
        AclRequest {
            policy: $policy,
            grants: AclRequest::grant_headers(
                $input.grant_full_control.as_ref(),
                $input.grant_read.as_ref(),
                $input.grant_read_acp.as_ref(),
                $input.grant_write.as_ref(),
                $input.grant_write_acp.as_ref(),
            ),
            canned: $input.acl.as_ref().map(|a| a.as_str()),
        }
    };
}

/// S3's Owner element of a user (its name is its canonical id and display name).
fn owner_named(name: &str) -> Owner {
    Owner { display_name: Some(name.to_string()), id: Some(name.to_string()) }
}

/// The S3 service: a weft client plus nothing else (state lives in meta).
#[derive(Debug, Clone)]
pub struct Gateway {
    client: Client,
    /// The key lookup that authenticated each request (shared cache): who may set policies.
    keys: MetaAuth,
    /// Buckets' CORS configurations as the hyper wrapper answers with them (shared cache):
    /// forgotten here when this gateway changes one.
    cors: CorsCache,
    /// Buckets' owners and ACLs as recently read (shared cache; see `access`).
    acls: AclCache,
    /// `http` or `https`: how clients reach this gateway (the `Location` it answers).
    scheme: &'static str,
    /// The key sealing SSE-S3 object keys and KMS keys ([`crate::sse`]); None: this gateway
    /// refuses encryption.
    master: Option<std::sync::Arc<crate::sse::MasterKey>>,
}

impl Gateway {
    pub fn new(client: Client, keys: MetaAuth) -> Gateway {
        let cors = CorsCache::new(client.meta.clone());
        Gateway { client, keys, cors, acls: AclCache::default(), scheme: "http", master: None }
    }

    /// The gateway, reached by its clients over `https` (true) or `http`.
    pub fn with_tls(self, tls: bool) -> Gateway {
        Gateway { scheme: if tls { "https" } else { "http" }, ..self }
    }

    /// The gateway, encrypting at rest with `master` (see [`crate::sse`]).
    pub fn with_master_key(self, master: Option<crate::sse::MasterKey>) -> Gateway {
        Gateway { master: master.map(std::sync::Arc::new), ..self }
    }

    /// The master key, if this gateway has one.
    pub(crate) fn master(&self) -> Option<&std::sync::Arc<crate::sse::MasterKey>> {
        self.master.as_ref()
    }

    /// Whether clients reach this gateway over HTTPS.
    pub(crate) fn serves_tls(&self) -> bool {
        self.scheme == "https"
    }

    /// The URL of (bucket, key) as a client of this request reached it (CompleteMultipart
    /// Upload's and PostObject's `Location`, path style).
    fn location(&self, headers: &http::HeaderMap, bucket: &str, key: &str) -> Option<String> {
        let host = header_text(headers, "host")?;
        Some(format!("{}://{host}/{bucket}/{}", self.scheme, encode_url(key)))
    }

    /// The weft client it serves with.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The key lookup (users of access keys).
    pub(crate) fn keys(&self) -> &MetaAuth {
        &self.keys
    }

    /// Buckets' access as recently read (see `access`).
    pub(crate) fn acls(&self) -> &AclCache {
        &self.acls
    }

    /// The CORS cache the gateway keeps current with its own changes (clones share it).
    pub fn cors(&self) -> &CorsCache {
        &self.cors
    }

    /// Refuses a request carrying `x-weft-policy` unless its key may choose policies.
    async fn check_policy_permission(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
        headers: &http::HeaderMap,
    ) -> S3Result<()> {
        if header_text(headers, POLICY_HEADER).is_none() {
            return Ok(());
        }
        match credentials {
            Some(credentials) => self.keys.check_may_set_policy(&credentials.access_key).await,
            None => Err(s3_error!(AccessDenied, "{POLICY_HEADER} needs a signed request")),
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// S3's refusal of a lock (a write's, a retention, a legal hold) in a bucket without object
/// lock.
fn no_object_lock(bucket: &str) -> S3Error {
    crate::aws_errors::worded(
        s3s::S3ErrorCode::InvalidRequest,
        "Bucket is missing ObjectLockConfiguration",
        format!("bucket {bucket:?} has no object lock"),
    )
}

/// The S3 error for a weft-client error (see the module invariants).
pub fn s3_error_of(error: ClientError) -> S3Error {
    match &error {
        ClientError::Meta { status, code, message } => match code.as_str() {
            "no_such_bucket" => s3_error!(NoSuchBucket, "{message}"),
            "no_such_key" => s3_error!(NoSuchKey, "{message}"),
            "no_such_version" => s3_error!(NoSuchVersion, "{message}"),
            // Object lock (meta enforces it): a locked version, a bucket without it.
            "object_locked" => s3_error!(AccessDenied, "{message}"),
            "object_lock_not_enabled" => crate::aws_errors::worded(
                s3s::S3ErrorCode::InvalidRequest,
                "Bucket is missing ObjectLockConfiguration",
                message,
            ),
            "invalid_lock" => s3_error!(InvalidArgument, "{message}"),
            "invalid_bucket_state" => s3_error!(InvalidBucketState, "{message}"),
            "invalid_version_id" => s3_error!(InvalidArgument, "{message}"),
            "bucket_not_empty" => s3_error!(BucketNotEmpty, "{message}"),
            "bucket_exists" => s3_error!(BucketAlreadyOwnedByYou, "{message}"),
            "invalid_name" => s3_error!(InvalidArgument, "{message}"),
            "invalid_policy" => s3_error!(InvalidArgument, "{message}"),
            // The policy needs more failure domains than the cluster has: the request's.
            "policy_too_wide" => s3_error!(InvalidArgument, "{message}"),
            // A conditional write or delete found another object than it was pinned to.
            "precondition_failed" => s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            ),
            _ if *status == 503 => s3_error!(ServiceUnavailable, "{error}"),
            _ => s3_error!(InternalError, "{error}"),
        },
        ClientError::MetaUnreachable { .. } | ClientError::Node { .. } => {
            s3_error!(ServiceUnavailable, "{error}")
        }
        _ => s3_error!(InternalError, "{error}"),
    }
}

/// Refuses keys weft cannot store (S3 allows them, weft's URLs would rename them).
fn check_key(key: &str) -> S3Result<()> {
    match weft_wire::object_key_problem(key) {
        Some(reason) => Err(s3_error!(InvalidArgument, "weft cannot store key {key:?}: {reason}")),
        None => Ok(()),
    }
}

/// A size in bytes: digits with an optional K/M/G (or KiB/MiB/GiB) suffix.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits].parse().ok()?;
    let unit = match text[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// The policy fields an `x-weft-policy` value (`CODE[,stripe=N][,cell=SIZE][,block=SIZE]`)
/// sets, as a JSON object of `StripedLayout` fields.
pub fn policy_fields(header: &str) -> Result<Value, String> {
    let header = header.trim();
    let code_end = match header.find('(') {
        Some(_) => header.find(')').map(|i| i + 1).ok_or("unclosed '(' in the code")?,
        None => header.find(',').unwrap_or(header.len()),
    };
    let mut policy = json!({ "code": header[..code_end].trim() });
    let rest = header[code_end..].trim_start_matches(',');
    for setting in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) =
            setting.split_once('=').ok_or_else(|| format!("{setting:?} is not NAME=VALUE"))?;
        let size = |what: &str| parse_size(value).ok_or(format!("bad {what} {value:?}"));
        match name.trim() {
            "stripe" | "stripe_width" => {
                let width: u64 =
                    value.trim().parse().map_err(|_| format!("bad stripe {value:?}"))?;
                policy["stripe_width"] = json!(width);
            }
            "cell" | "cell_bytes" => policy["cell_bytes"] = json!(size("cell")?),
            "block" | "block_bytes" => policy["block_bytes"] = json!(size("block")?),
            other => return Err(format!("unknown setting {other:?} (use stripe, cell, block)")),
        }
    }
    Ok(policy)
}

/// Applies an `x-weft-policy` value to a bucket's default policy (JSON of a
/// `StripedLayout`).
pub fn apply_policy_header(default: &Value, header: &str) -> Result<StripedLayout, String> {
    let mut policy = default.clone();
    if let (Value::Object(into), Value::Object(fields)) = (&mut policy, policy_fields(header)?) {
        into.extend(fields);
    }
    let layout: StripedLayout = serde_json::from_value(policy).map_err(|e| e.to_string())?;
    layout.validate().map_err(|e| e.to_string())?;
    Ok(layout)
}

/// User metadata as S3 gives it, as meta keeps it.
fn metadata_map(metadata: Option<Metadata>) -> BTreeMap<String, String> {
    metadata.map(|m| m.into_iter().collect()).unwrap_or_default()
}

fn metadata_of(attributes: &Attributes) -> Option<Metadata> {
    (!attributes.metadata.is_empty())
        .then(|| attributes.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// The Content-Type S3 shows: the stored one, else `binary/octet-stream`.
fn content_type_of(attributes: &Attributes) -> Option<ContentType> {
    attributes.content_type_or_default().parse().ok()
}

/// S3 refuses a GET or HEAD that names a server-side encryption (only SSE-C keys are sent
/// on reads): 400 InvalidArgument.
fn refuse_sse_on_read(headers: &http::HeaderMap) -> S3Result<()> {
    for name in ["x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id"] {
        if headers.contains_key(name) {
            return Err(s3_error!(
                InvalidArgument,
                "{name} is not sent on a read: an object opens with the keys it was sealed \
                 with (only SSE-C sends its key again)"
            ));
        }
    }
    Ok(())
}

/// The largest GET answer read whole before its headers are sent.
const SMALL_GET_BYTES: u64 = 128 << 10;

/// A small GET's bytes, read before the answer starts: they leave with its headers in one
/// write (a client that stops reading after the headers still has them), and a read that
/// fails is a 503 the client can retry instead of a body cut short. Chunks are kept as
/// read (no copy); at most [`SMALL_GET_BYTES`] are held.
async fn small_body(
    mut stream: impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin,
) -> S3Result<StreamingBlob> {
    let mut chunks = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            let mut refusal = s3_error!(
                ServiceUnavailable,
                "reading the object failed ({error}); nothing was sent, retry"
            );
            refusal.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
            refusal
        })?;
        chunks.push(Ok::<_, std::io::Error>(chunk));
    }
    Ok(StreamingBlob::wrap(futures_util::stream::iter(chunks)))
}

/// Applies a GET's or HEAD's `response-*` query parameters to its output (signed requests
/// only, as S3: anonymous requests never reach here); evaluates to `response-expires` as
/// the request spelled it, which S3 echoes verbatim (see [`echo_expires`]).
macro_rules! response_overrides {
    ($output:expr, $input:expr, $uri:expr) => {{
        if let Some(value) = $input.response_content_type {
            $output.content_type = value.parse().ok();
        }
        if $input.response_cache_control.is_some() {
            $output.cache_control = $input.response_cache_control;
        }
        if $input.response_content_disposition.is_some() {
            $output.content_disposition = $input.response_content_disposition;
        }
        if $input.response_content_encoding.is_some() {
            $output.content_encoding = $input.response_content_encoding;
        }
        if $input.response_content_language.is_some() {
            $output.content_language = $input.response_content_language;
        }
        let raw = crate::access::query_param($uri, "response-expires");
        if raw.is_some() {
            $output.expires = None;
        }
        raw
    }};
}

/// Sends `response-expires` as the request spelled it: s3s would reparse and reformat it.
fn echo_expires(headers: &mut http::HeaderMap, raw: Option<String>) {
    if let Some(value) = raw.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
        headers.insert(http::header::EXPIRES, value);
    }
}

/// The bytes a GET or HEAD answers: `[start, end)`, the Content-Range when not the whole
/// object, and the part count when asked by `partNumber` (of a multipart object: its parts;
/// any other object is one part).
fn wanted_bytes(
    shown: &Attributes,
    size: u64,
    range: Option<&Range>,
    part_number: Option<i32>,
) -> S3Result<(u64, u64, Option<String>, Option<i32>)> {
    let content_range = |start: u64, end: u64| format!("bytes {start}-{}/{size}", end.max(1) - 1);
    match (range, part_number) {
        (Some(_), Some(_)) => Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        )),
        (Some(range), None) => {
            let wanted = range.check(size)?;
            Ok((wanted.start, wanted.end, Some(content_range(wanted.start, wanted.end)), None))
        }
        (None, Some(number)) => {
            let parts: Vec<u64> =
                if shown.parts.is_empty() { vec![size] } else { shown.parts.clone() };
            check_part_number(number)?;
            let index = usize::try_from(number).ok().filter(|n| (1..=parts.len()).contains(n));
            let Some(index) = index else {
                let mut error = S3Error::with_message(
                    s3s::S3ErrorCode::Custom("InvalidPartNumber".into()),
                    format!("the object has {} parts; part {number} does not exist", parts.len()),
                );
                error.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
                return Err(error);
            };
            let start: u64 = parts[..index - 1].iter().sum();
            let end = start + parts[index - 1];
            let count = i32::try_from(parts.len()).ok().filter(|_| !shown.parts.is_empty());
            // A part is a range (206), even the one part of an object not uploaded in parts.
            Ok((start, end, (size > 0).then(|| content_range(start, end)), count))
        }
        (None, None) => Ok((0, size, None, None)),
    }
}

/// `[start, end)` of an UploadPartCopy's `x-amz-copy-source-range: bytes=FIRST-LAST`: both
/// bounds given, FIRST ≤ LAST < the source's size (400 InvalidArgument for a malformed
/// range, 416 InvalidRange for one past the source, as S3).
fn copy_source_range(range: &str, size: u64) -> S3Result<(u64, u64)> {
    let malformed = || {
        s3_error!(
            InvalidArgument,
            "the x-amz-copy-source-range {range:?} must be bytes=FIRST-LAST (one range)"
        )
    };
    let (first, last) = range
        .strip_prefix("bytes=")
        .and_then(|bounds| bounds.split_once('-'))
        .ok_or_else(malformed)?;
    let first: u64 = first.trim().parse().map_err(|_| malformed())?;
    let last: u64 = last.trim().parse().map_err(|_| malformed())?;
    if first > last || last >= size {
        return Err(s3_error!(
            InvalidRange,
            "the range {first}-{last} is not within the {size} bytes of the source"
        ));
    }
    Ok((first, last + 1))
}

/// The representation headers a PutObject, CopyObject (REPLACE) or CreateMultipartUpload
/// sets, as the attributes that keep them.
#[allow(clippy::too_many_arguments)]
fn written_attributes(
    content_type: Option<ContentType>,
    metadata: Option<Metadata>,
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    content_language: Option<String>,
    expires: Option<Timestamp>,
) -> Attributes {
    Attributes {
        content_type: content_type.map(|t| t.to_string()),
        metadata: metadata_map(metadata),
        cache_control,
        content_disposition,
        content_encoding: content_encoding.and_then(|e| stored_encoding(&e)),
        content_language,
        expires: expires.as_ref().and_then(attributes::http_date),
        ..Attributes::default()
    }
}

/// The Content-Encoding an object keeps: the one sent without `aws-chunked`, which names
/// how the request's body was framed, not the object (as S3 keeps it); None if nothing is
/// left.
fn stored_encoding(sent: &str) -> Option<String> {
    let kept: Vec<&str> = sent
        .split(',')
        .map(str::trim)
        .filter(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The attributes a copy keeps of its source: everything but ETag, time and parts.
fn copied_attributes(source: &Attributes) -> Attributes {
    Attributes {
        generation: 0,
        etag: String::new(),
        last_modified_ms: 0,
        parts: Vec::new(),
        part_checksums: Vec::new(),
        sse: None,
        ..source.clone()
    }
}

/// The 304 of a GET or HEAD: S3 sends the ETag and Last-Modified with it.
fn not_modified_with(shown: &Attributes) -> S3Error {
    let mut error = s3_error!(NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_str(&format!("\"{}\"", shown.etag)) {
        headers.insert(http::header::ETAG, value);
    }
    if let Some(date) = attributes::http_date(&attributes::timestamp(shown.last_modified_ms)) {
        if let Ok(value) = http::HeaderValue::from_str(&date) {
            headers.insert(http::header::LAST_MODIFIED, value);
        }
    }
    error.set_headers(headers);
    error
}

/// The conditional-request checks of the module invariants.
fn check_conditions(
    shown: &Attributes,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
    not_modified: fn(&Attributes) -> S3Error,
) -> S3Result<()> {
    let matches = |condition: &ETagCondition| match condition {
        ETagCondition::Any => true,
        ETagCondition::ETag(etag) => etag.value() == shown.etag,
    };
    let modified = attributes::timestamp(shown.last_modified_ms);
    match if_match {
        Some(condition) if !matches(condition) => {
            return Err(s3_error!(PreconditionFailed, "If-Match: the ETag is {}", shown.etag))
        }
        Some(_) => {}
        None => {
            if if_unmodified_since.is_some_and(|since| modified > *since) {
                return Err(s3_error!(PreconditionFailed, "modified since If-Unmodified-Since"));
            }
        }
    }
    match if_none_match {
        Some(condition) if matches(condition) => return Err(not_modified(shown)),
        Some(_) => {}
        None => {
            if if_modified_since.is_some_and(|since| modified <= *since) {
                return Err(not_modified(shown));
            }
        }
    }
    Ok(())
}

fn header_text<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The length of an upload's body: its Content-Length, else (an `aws-chunked` body sent
/// with `Transfer-Encoding: chunked`, as botocore does over HTTPS) the decoded length the
/// request signs in `x-amz-decoded-content-length`; `operation` needs one of them.
fn body_size(
    content_length: Option<i64>,
    headers: &http::HeaderMap,
    operation: &str,
) -> S3Result<u64> {
    let decoded = || {
        let aws_chunked = header_text(headers, "content-encoding")
            .is_some_and(|c| c.split(',').any(|c| c.trim().eq_ignore_ascii_case("aws-chunked")))
            || header_text(headers, "x-amz-content-sha256")
                .is_some_and(|s| s.starts_with("STREAMING-"));
        let text = header_text(headers, "x-amz-decoded-content-length").filter(|_| aws_chunked)?;
        Some(text.trim().parse::<i64>().map_err(|_| {
            s3_error!(InvalidArgument, "x-amz-decoded-content-length is not a length")
        }))
    };
    let size = match content_length {
        Some(size) => size,
        None => decoded().transpose()?.ok_or_else(|| {
            s3_error!(
                MissingContentLength,
                "{operation} needs a Content-Length (or, for an aws-chunked body, \
                 x-amz-decoded-content-length)"
            )
        })?,
    };
    u64::try_from(size).map_err(|_| s3_error!(InvalidArgument, "negative Content-Length"))
}

/// The checksum fields of an output, from an object's stored checksum (`values`: an
/// output without a `checksum_type`, as UploadPart's).
macro_rules! show_checksum {
    ($output:expr, $stored:expr) => {{
        let stored = $stored;
        show_checksum!(values $output, stored);
        $output.checksum_type = checksum::Shown::of(stored).kind;
    }};
    (values $output:expr, $stored:expr) => {{
        let shown = checksum::Shown::of($stored);
        $output.checksum_crc32 = shown.crc32;
        $output.checksum_crc32c = shown.crc32c;
        $output.checksum_crc64nvme = shown.crc64nvme;
        $output.checksum_sha1 = shown.sha1;
        $output.checksum_sha256 = shown.sha256;
    }};
}

/// Whether a GET or HEAD asked for the object's checksum (`x-amz-checksum-mode: ENABLED`).
fn checksum_enabled(mode: Option<&ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(ChecksumMode::ENABLED))
}

/// A page size parameter (`max-keys`, `max-parts`, `max-uploads`) as S3 takes it: absent is
/// `most`, above `most` is `most`, negative is 400 InvalidArgument (S3's wording).
fn page_size(value: Option<i32>, name: &str, most: usize) -> S3Result<usize> {
    match value {
        None => Ok(most),
        Some(n) if n < 0 => Err(s3_error!(
            InvalidArgument,
            "Argument {name} must be an integer between 0 and 2147483647"
        )),
        Some(n) => Ok((n as usize).min(most)),
    }
}

/// Refuses a part number outside S3's 1..=10000.
fn check_part_number(number: i32) -> S3Result<()> {
    match (1..=multipart::MAX_PART_NUMBER).contains(&number) {
        true => Ok(()),
        false => Err(crate::aws_errors::worded(
            s3s::S3ErrorCode::InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive",
            format!("part numbers go from 1 to 10000, not {number}"),
        )),
    }
}

/// The body of a PutObject, PostObject or UploadPart. An empty body of `Content-Length: 0`
/// is never polled: polling it makes hyper answer `Expect: 100-continue` (which botocore
/// always sends) with a late `100 Continue` that the client then reads as the answer to its
/// next request. (A PostObject's file was read from the form already, and its request may
/// say `Content-Length: 0` by then: its own length, `length`, is not 0.)
fn request_body(
    body: Option<StreamingBlob>,
    length: Option<i64>,
    headers: &http::HeaderMap,
) -> StreamingBlob {
    let empty = length.unwrap_or(0) == 0
        && header_text(headers, "content-length").is_some_and(|l| l.trim() == "0");
    match body {
        Some(body) if !empty => body,
        _ => StreamingBlob::wrap(
            futures_util::stream::empty::<Result<bytes::Bytes, std::io::Error>>(),
        ),
    }
}

/// Keys and prefixes as the listing's `encoding-type=url` asks (what the aws CLI sends).
fn encode_url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The version id a write names: only a version of its own (S3 names none for a write to
/// an unversioned or suspended bucket, whose writes make the null version).
fn written_version(shown: &Attributes) -> Option<String> {
    shown.version_id.clone().filter(|id| id != NULL_VERSION)
}

/// S3's id of the version an unversioned (or suspended) write makes.
const NULL_VERSION: &str = "null";

/// What a delete requires of the object or version it deletes: `If-Match` (an ETag or `*`),
/// `x-amz-if-match-size`, `x-amz-if-match-last-modified-time`.
#[derive(Default)]
struct DeleteConditions<'a> {
    etag: Option<&'a ETagCondition>,
    size: Option<i64>,
    modified: Option<&'a Timestamp>,
}

impl DeleteConditions<'_> {
    fn any(&self) -> bool {
        self.etag.is_some() || self.size.is_some() || self.modified.is_some()
    }

    /// 412 PreconditionFailed unless every condition holds for `object`.
    fn check(&self, object: &ObjectInfo, shown: &Attributes) -> S3Result<()> {
        let failed = |what: &str| Err(s3_error!(PreconditionFailed, "{what} does not match"));
        if let Some(ETagCondition::ETag(etag)) = self.etag {
            if etag.value() != shown.etag {
                return failed("If-Match");
            }
        }
        let shown_size = shown.shown_size(object.size);
        if self.size.is_some_and(|size| u64::try_from(size).ok() != Some(shown_size)) {
            return failed("x-amz-if-match-size");
        }
        if self.modified.is_some_and(|t| *t != attributes::timestamp(shown.last_modified_ms)) {
            return failed("x-amz-if-match-last-modified-time");
        }
        Ok(())
    }
}

impl Gateway {
    /// The committed object and the attributes S3 shows for it.
    async fn object_and_attributes(
        &self,
        bucket: &str,
        key: &str,
    ) -> S3Result<(ObjectInfo, Attributes)> {
        self.object_version(bucket, key, None).await
    }

    /// Version `version_id` of (bucket, key), or its current object when None, and the
    /// attributes S3 shows for it. A delete marker in the way answers as S3 does (see
    /// [`versioning`]): 404 when it is the newest version, 405 when named.
    pub(crate) async fn object_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<(ObjectInfo, Attributes)> {
        check_key(key)?;
        let meta = &self.client.meta;
        let object = match version_id {
            Some(id) => {
                let version = meta.get_version(bucket, key, Some(id)).await.map_err(s3_error_of)?;
                if version.delete_marker {
                    return Err(versioning::marker_read(key, &version));
                }
                version.object
            }
            None => match meta.get_object(bucket, key).await {
                Ok(object) => object,
                Err(ClientError::Meta { code, .. }) if code == "no_such_key" => {
                    // The newest version may be a delete marker (S3 says so in headers).
                    return Err(match meta.get_version(bucket, key, None).await {
                        Ok(marker) if marker.delete_marker => versioning::deleted_key(key, &marker),
                        _ => s3_error!(NoSuchKey, "no object {key:?} in bucket {bucket:?}"),
                    });
                }
                Err(error) => return Err(s3_error_of(error)),
            },
        };
        let mut shown = attributes::of_object(meta, &object).await.map_err(s3_error_of)?;
        if let Some(id) = version_id {
            shown.version_id = Some(id.to_string());
        }
        Ok((object, shown))
    }

    /// What a write's `If-Match` / `If-None-Match` require, pinned to the object under the
    /// key now: meta then refuses the commit (412) if another object replaced it meanwhile.
    /// A condition that fails already is refused before any byte is read: 412, or 404
    /// NoSuchKey for `If-Match` on a missing key.
    async fn write_precondition(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> S3Result<Option<Precondition>> {
        if if_match.is_none() && if_none_match.is_none() {
            return Ok(None);
        }
        let current = match self.object_and_attributes(bucket, key).await {
            Ok(found) => Some(found),
            Err(error) if *error.code() == s3s::S3ErrorCode::NoSuchKey => None,
            Err(error) => return Err(error),
        };
        let failed = || {
            s3_error!(
                PreconditionFailed,
                "At least one of the pre-conditions you specified did not hold"
            )
        };
        let matches = |condition: &ETagCondition, shown: &Attributes| match condition {
            ETagCondition::Any => true,
            ETagCondition::ETag(etag) => etag.value() == shown.etag,
        };
        if let Some(condition) = if_match {
            match &current {
                None => return Err(s3_error!(NoSuchKey, "If-Match: no object {key:?}")),
                Some((_, shown)) if !matches(condition, shown) => return Err(failed()),
                Some(_) => {}
            }
        }
        if let Some(condition) = if_none_match {
            if current.as_ref().is_some_and(|(_, shown)| matches(condition, shown)) {
                return Err(failed());
            }
        }
        Ok(Some(match current {
            Some((object, _)) => Precondition::Generation(object.generation),
            None => Precondition::Absent,
        }))
    }

    /// The policy of an object written with these headers: None when no `x-weft-policy`
    /// (meta applies the bucket's default), else the bucket's default overridden.
    /// A key not allowed to choose policies is refused (`AccessDenied`).
    async fn policy_for(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
        headers: &http::HeaderMap,
        bucket: &str,
    ) -> S3Result<Option<StripedLayout>> {
        let Some(header) = header_text(headers, POLICY_HEADER) else { return Ok(None) };
        self.check_policy_permission(credentials, headers).await?;
        let record = self.client.meta.get_bucket(bucket).await.map_err(s3_error_of)?;
        apply_policy_header(&record["default_policy"], header).map(Some).map_err(|reason| {
            s3_error!(InvalidArgument, "bad {POLICY_HEADER} {header:?}: {reason}")
        })
    }

    /// Streams a body into (bucket, key), committing `shown` (its ETag the body's MD5
    /// unless `etag` fixes it) with the bytes, if `precondition` holds then; sealed with
    /// `sealing` when given (`shown.sse` then says how). Returns the attributes S3 now shows.
    #[allow(clippy::too_many_arguments)]
    async fn write_object<S, E>(
        &self,
        bucket: &str,
        key: &str,
        size: u64,
        body: S,
        policy: Option<StripedLayout>,
        checks: BodyChecks,
        shown: Attributes,
        etag: Option<String>,
        precondition: Option<Precondition>,
        lock: Option<Value>,
        sealing: Option<crate::sse::SegmentKey>,
    ) -> S3Result<Attributes>
    where
        S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let options = PutOptions { policy, precondition, lock, ..PutOptions::default() };
        let commit = CommitAttributes { attributes: shown, etag };
        let written = put_stream(
            &self.client,
            bucket,
            key,
            size,
            body,
            options,
            checks,
            Some(commit),
            sealing,
        )
        .await?;
        let object = &written.stats.object;
        Attributes::of_json(&object.raw)
            .ok_or_else(|| s3_error!(InternalError, "meta did not keep the object's attributes"))
    }

    /// Deletes the part objects of an upload, then its record, or marks it completed (see
    /// [`multipart::drop_upload`]).
    async fn drop_upload(
        &self,
        upload: &UploadRecord,
        completed: Option<multipart::Completed>,
    ) -> S3Result<()> {
        multipart::drop_upload(&self.client, upload, completed).await.map_err(s3_error_of)
    }

    /// Writes part `number` of `upload` (with the upload's policy), its ETag committed with
    /// it: of two uploads of one part number, the one that commits last is the part. An
    /// Abort or Complete that ran meanwhile did not see it: it would stay forever, so it
    /// goes at once and the client hears that the upload is gone.
    async fn write_part<S, E>(
        &self,
        upload: &UploadRecord,
        number: i32,
        size: u64,
        body: S,
        checks: BodyChecks,
        customer: Option<&crate::sse::CustomerKey>,
    ) -> S3Result<Attributes>
    where
        S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let policy: StripedLayout = serde_json::from_value(upload.policy.clone())
            .map_err(|e| s3_error!(InternalError, "the upload's policy is bad: {e}"))?;
        let key = multipart::part_key(&upload.upload_id, number);
        // A part of a sealed upload is a segment of the completed object: sealed under the
        // upload's object key with a salt of its own (see `sse`).
        let mut shown = Attributes::default();
        let mut sealing = None;
        if let Some(template) = &upload.sse {
            let object_key = self.object_key(template, customer).await?;
            let sealed = crate::encryption::Sealing { record: template.clone(), key: object_key };
            let (record, segment) = sealed.one_segment(size);
            shown.sse = Some(record);
            sealing = Some(segment);
        }
        let shown = self
            .write_object(
                PARTS_BUCKET,
                &key,
                size,
                body,
                Some(policy),
                checks,
                shown,
                None,
                None,
                None,
                sealing,
            )
            .await?;
        if self.upload_of(&upload.bucket, &upload.key, &upload.upload_id).await.is_err() {
            if let Err(error) = self.client.delete_object(PARTS_BUCKET, &key).await {
                tracing::warn!(%error, key, "could not delete a part of an ended upload");
            }
            return Err(s3_error!(NoSuchUpload, "upload {:?} ended", upload.upload_id));
        }
        Ok(shown)
    }

    /// Deletes (bucket, key); with `if_match`, only the object it names: pinned to its
    /// generation, so one written meanwhile is not deleted (412). A missing key is deleted
    /// already (S3), unless If-Match required one (404 NoSuchKey).
    /// Stores (`Some`) or deletes (`None`) the configuration record `name` (in
    /// `bucket_config`) of an existing bucket, then forgets what this gateway cached of the
    /// bucket (its CORS rules and its state), whether or not meta took the change.
    async fn set_bucket_config(
        &self,
        bucket: &str,
        name: &str,
        value: Option<Value>,
    ) -> S3Result<()> {
        let meta = &self.client.meta;
        meta.get_bucket(bucket).await.map_err(s3_error_of)?;
        let done = match &value {
            Some(value) => meta.put_record(cors::BUCKET_CONFIG, name, value, false).await,
            None => meta.delete_record(cors::BUCKET_CONFIG, name).await.map(|_| ()),
        };
        self.cors.forget(bucket);
        self.acls.forget(bucket);
        done.map_err(s3_error_of)
    }

    /// The configuration record `name` of an existing bucket, None when it has none (or
    /// one this gateway cannot read).
    async fn bucket_config<T: serde::de::DeserializeOwned>(
        &self,
        bucket: &str,
        name: &str,
    ) -> S3Result<Option<T>> {
        let meta = &self.client.meta;
        meta.get_bucket(bucket).await.map_err(s3_error_of)?;
        let record = meta.get_record(cors::BUCKET_CONFIG, name).await.map_err(s3_error_of)?;
        Ok(record.and_then(|value| serde_json::from_value(value).ok()))
    }

    /// The `x-amz-expiration` header of the current object (key, size, its attributes):
    /// when its bucket's lifecycle expires it and by which rule. None when no rule does,
    /// for a version named by id (S3 shows it for current objects only), or when the
    /// bucket's state cannot be read (the header is advisory).
    async fn expiration_of(
        &self,
        bucket: &str,
        key: &str,
        size: u64,
        shown: &Attributes,
        version_id: Option<&str>,
    ) -> Option<String> {
        if version_id.is_some() {
            return None;
        }
        let config = self.bucket_state(bucket).await.ok()?.lifecycle?;
        config.expiration_header(key, size, &shown.tags, shown.last_modified_ms)
    }

    /// Sets one attribute (`acl`, `tags`) of a version of an object (the current one when
    /// `version_id` is None) in place; answers the S3 version id it changed.
    async fn set_attribute(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        name: &str,
        value: Value,
    ) -> S3Result<Option<String>> {
        let (object, shown) = self.object_version(bucket, key, version_id).await?;
        let mut attributes = object.raw["attributes"].clone();
        if !attributes.is_object() {
            attributes = json!({});
        }
        attributes[name] = value;
        // The version the attributes were read from (not whichever is current by now).
        let version = version_id
            .map(str::to_string)
            .or_else(|| object.raw["version_id"].as_str().map(str::to_string));
        let meta = &self.client.meta;
        meta.set_version_attributes(bucket, key, version.as_deref(), &attributes)
            .await
            .map_err(s3_error_of)?;
        Ok(shown.version_id)
    }

    async fn delete_one(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<&ETagCondition>,
    ) -> S3Result<Option<weft_client::VersionInfo>> {
        let generation = match if_match {
            None => None,
            Some(condition) => {
                match self.write_precondition(bucket, key, Some(condition), None).await? {
                    Some(Precondition::Generation(generation)) => Some(generation),
                    _ => None,
                }
            }
        };
        match self.client.delete_object_if(bucket, key, generation).await {
            Ok((deletion, _)) => Ok(deletion.delete_marker),
            Err(ClientError::Meta { code, .. }) if code == "no_such_key" => Ok(None),
            Err(error) => Err(s3_error_of(error)),
        }
    }

    /// Deletes (bucket, key) or one version of it, if `conditions` hold for what it deletes
    /// (412 otherwise; a version that is not there is deleted already, whatever they say).
    /// Answers S3's (version id, delete marker).
    async fn delete_any(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        conditions: &DeleteConditions<'_>,
        bypass_governance: bool,
    ) -> S3Result<(Option<String>, bool)> {
        let Some(id) = version_id else {
            if conditions.size.is_some() || conditions.modified.is_some() {
                match self.object_and_attributes(bucket, key).await {
                    Ok((object, shown)) => conditions.check(&object, &shown)?,
                    Err(error) if *error.code() == s3s::S3ErrorCode::NoSuchKey => {}
                    Err(error) => return Err(error),
                }
            }
            return match self.delete_one(bucket, key, conditions.etag).await? {
                Some(marker) => Ok((Some(marker.version_id), true)),
                None => Ok((None, false)),
            };
        };
        let mut generation = None;
        if conditions.any() {
            match self.object_version(bucket, key, Some(id)).await {
                Ok((object, shown)) => {
                    conditions.check(&object, &shown)?;
                    generation = Some(object.generation);
                }
                Err(error) if *error.code() == s3s::S3ErrorCode::NoSuchVersion => {
                    return Ok((Some(id.to_string()), false))
                }
                // A delete marker: no ETag or size to match.
                Err(error) if *error.code() == s3s::S3ErrorCode::MethodNotAllowed => {
                    return Err(s3_error!(PreconditionFailed, "version {id:?} is a delete marker"))
                }
                Err(error) => return Err(error),
            }
        }
        match self.client.delete_version(bucket, key, id, generation, bypass_governance).await {
            Ok((version, _)) => Ok((Some(id.to_string()), version.delete_marker)),
            Err(ClientError::Meta { code, .. }) if code == "no_such_version" => {
                Ok((Some(id.to_string()), false))
            }
            Err(error) => Err(s3_error_of(error)),
        }
    }

    /// The ACL of a version of an object (the current one when `version_id` is None): its
    /// own, else private to its bucket's owner (the requester in a shared bucket).
    async fn current_object_acl(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        credentials: Option<&s3s::auth::Credentials>,
    ) -> S3Result<Acl> {
        let (object, _) = self.object_version(bucket, key, version_id).await?;
        if let Some(acl) = crate::access::object_acl(&object.raw) {
            return Ok(acl);
        }
        let owner = match self.bucket_access(bucket).await?.owner() {
            Some(owner) => owner.to_string(),
            None => self.requester(credentials).await?.unwrap_or_default(),
        };
        Ok(Acl::private(&owner))
    }

    /// The ACL an object written by this request gets: the one it asks for (canned or
    /// grants), else private; owned by the writer (by the bucket's owner when anonymous).
    async fn written_acl(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
        headers: &http::HeaderMap,
        bucket: &str,
        canned: Option<&ObjectCannedACL>,
        grants: [Option<&String>; 4],
    ) -> S3Result<Acl> {
        let bucket_owner = self.bucket_access(bucket).await?.owner().map(str::to_string);
        let who = self.requester(credentials).await?;
        let owner = who.or_else(|| bucket_owner.clone()).unwrap_or_default();
        let [full_control, read, read_acp, write_acp] = grants;
        // s3s keeps no x-amz-grant-write of object writes; S3 takes it (and ignores it).
        let write = header_text(headers, "x-amz-grant-write").map(str::to_string);
        let request = AclRequest {
            policy: None,
            grants: AclRequest::grant_headers(
                full_control,
                read,
                read_acp,
                write.as_ref(),
                write_acp,
            ),
            canned: canned.map(|c| c.as_str()),
        };
        let acl = self.requested_acl(&request, &owner, bucket_owner.as_deref()).await?;
        let acl = acl.unwrap_or_else(|| Acl::private(&owner));
        self.check_public_acl(bucket, &acl).await?;
        Ok(acl)
    }

    /// The owner listings show for objects without an ACL of their own: the bucket's owner,
    /// else (an unowned bucket) the user who asks.
    async fn listed_owner(
        &self,
        bucket: &str,
        credentials: Option<&s3s::auth::Credentials>,
    ) -> S3Result<Owner> {
        if let Some(owner) = self.bucket_access(bucket).await?.owner() {
            return Ok(owner_named(owner));
        }
        let who = self.requester(credentials).await?;
        Ok(owner_named(who.as_deref().unwrap_or("anonymous")))
    }

    /// The owner of every owned bucket, by bucket (shared buckets are left out).
    async fn bucket_owners(&self) -> S3Result<BTreeMap<String, String>> {
        let mut owners = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let (page, next) = self
                .client
                .meta
                .list_records(cors::BUCKET_CONFIG, "", after.as_deref(), 1000)
                .await
                .map_err(s3_error_of)?;
            for (name, value) in page {
                if let Some(bucket) = name.strip_suffix("/acl") {
                    if let Ok(acl) = serde_json::from_value::<Acl>(value) {
                        owners.insert(bucket.to_string(), acl.owner);
                    }
                }
            }
            match next {
                Some(name) => after = Some(name),
                None => return Ok(owners),
            }
        }
    }

    /// Changes the lock of a version (the current one when `version_id` is None): meta's
    /// `change`. S3's answers: 400 InvalidRequest in a bucket without object lock, 403
    /// AccessDenied when the lock in place refuses it.
    async fn set_lock(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        change: Value,
        bypass_governance: bool,
    ) -> S3Result<()> {
        check_key(key)?;
        let meta = &self.client.meta;
        match meta.set_version_lock(bucket, key, version_id, change, bypass_governance).await {
            Ok(_) => Ok(()),
            Err(ClientError::Meta { code, message, .. }) if code == "no_such_version" => {
                Err(match version_id {
                    Some(_) => s3_error!(NoSuchVersion, "{message}"),
                    None => s3_error!(NoSuchKey, "{message}"),
                })
            }
            Err(error) => Err(s3_error_of(error)),
        }
    }

    /// The lock S3 shows of a version, in a bucket with object lock (400 InvalidRequest
    /// otherwise, as S3).
    async fn locked_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<object_lock::Shown> {
        let record = self.client.meta.get_bucket(bucket).await.map_err(s3_error_of)?;
        if record.get("object_lock").is_none() {
            return Err(no_object_lock(bucket));
        }
        let (object, _) = self.object_version(bucket, key, version_id).await?;
        Ok(object_lock::shown(&object.raw))
    }

    /// The upload `upload_id` of (bucket, key), completed or not.
    async fn any_upload(&self, bucket: &str, key: &str, upload_id: &str) -> S3Result<UploadRecord> {
        multipart::load_upload(&self.client.meta, bucket, key, upload_id)
            .await
            .map_err(s3_error_of)?
            .ok_or_else(|| s3_error!(NoSuchUpload, "no upload {upload_id:?} of key {key:?}"))
    }

    /// The upload `upload_id` of (bucket, key) in progress.
    async fn upload_of(&self, bucket: &str, key: &str, upload_id: &str) -> S3Result<UploadRecord> {
        let upload = self.any_upload(bucket, key, upload_id).await?;
        match upload.completed {
            None => Ok(upload),
            Some(_) => Err(s3_error!(NoSuchUpload, "upload {upload_id:?} was completed")),
        }
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let input = req.input;
        let max = match input.max_buckets {
            None => usize::MAX,
            Some(max) if (1..=MAX_BUCKETS_LISTED).contains(&max) => max as usize,
            Some(max) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-buckets must be from 1 to {MAX_BUCKETS_LISTED}, not {max}"
                ))
            }
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        // Anonymous: no buckets (S3). Others: the buckets they own, and the shared ones.
        let Some(who) = self.requester(req.credentials.as_ref()).await? else {
            return Ok(S3Response::new(ListBucketsOutput {
                buckets: Some(Vec::new()),
                ..Default::default()
            }));
        };
        let owners = self.bucket_owners().await?;
        let scope = match req.credentials.as_ref() {
            Some(c) => self.keys().scope_of(&c.access_key).await?,
            None => crate::keys::KeyScope::default(),
        };
        let answer = self.client.meta.list_buckets().await.map_err(s3_error_of)?;
        let mut buckets: Vec<Bucket> = answer["buckets"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|b| {
                        let name = b["name"].as_str()?;
                        // Internal buckets (a leading '.') are not S3 buckets.
                        let listed = !name.starts_with('.')
                            && owners.get(name).is_none_or(|owner| *owner == who)
                            && scope.bucket.as_deref().is_none_or(|only| only == name)
                            && name.starts_with(&prefix)
                            && input.continuation_token.as_deref().is_none_or(|after| name > after);
                        listed.then(|| Bucket {
                            name: Some(name.to_string()),
                            creation_date: Some(attributes::timestamp(
                                b["created_ms"].as_u64().unwrap_or(0),
                            )),
                            bucket_region: None,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        buckets.sort_by(|a, b| a.name.cmp(&b.name));
        let continuation_token = (buckets.len() > max)
            .then(|| {
                buckets.truncate(max);
                buckets.last().and_then(|b| b.name.clone())
            })
            .flatten();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            continuation_token,
            owner: Some(Owner { display_name: Some(who.clone()), id: Some(who) }),
            prefix: input.prefix,
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        // `x-weft-policy` on CreateBucket sets the bucket's default policy.
        self.check_policy_permission(req.credentials.as_ref(), &req.headers).await?;
        let policy = match header_text(&req.headers, POLICY_HEADER) {
            Some(header) => Some(policy_fields(header).map_err(|reason| {
                s3_error!(InvalidArgument, "bad {POLICY_HEADER} {header:?}: {reason}")
            })?),
            None => None,
        };
        // The region the request asks for: none (or an empty one) is us-east-1.
        let legacy_region = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .is_none_or(|l| l.as_str().is_empty() || l.as_str() == "us-east-1");
        let who = self
            .requester(req.credentials.as_ref())
            .await?
            .ok_or_else(|| s3_error!(AccessDenied, "creating a bucket needs a signed request"))?;
        let input = &req.input;
        let acl_request = acl_request!(input, None);
        let acl = self.requested_acl(&acl_request, &who, None).await?;
        let acl = acl.unwrap_or_else(|| Acl::private(&who));
        let bucket = req.input.bucket;
        let asks_policy = policy.is_some();
        let asks_lock = req.input.object_lock_enabled_for_bucket == Some(true);
        // Someone else's bucket: S3's BucketAlreadyExists, whatever the region.
        self.acls().forget(&bucket);
        if let BucketAccess::Owned(existing) = self.bucket_access(&bucket).await? {
            if existing.owner != who {
                return Err(s3_error!(BucketAlreadyExists, "bucket {bucket:?} is someone else's"));
            }
        }
        // Meta writes the owner with the bucket, so a new bucket is not one without an
        // owner (which every user may use) for longer than its own creation.
        let meta = &self.client.meta;
        let config = json!({ "acl": acl });
        let created = meta.create_bucket_with_config(&bucket, policy, config).await;
        self.acls().forget(&bucket);
        match created {
            // Object lock: versioning enabled, then the lock; a bucket that could not get
            // them is not left behind without them.
            Ok(_) if asks_lock => {
                let meta = &self.client.meta;
                let locked = match meta.set_versioning(&bucket, "enabled").await {
                    Ok(_) => meta.set_object_lock(&bucket, None).await,
                    Err(error) => Err(error),
                };
                if let Err(error) = locked {
                    if let Err(undo) = meta.delete_bucket(&bucket).await {
                        tracing::warn!(%undo, bucket, "could not remove a bucket left without object lock");
                    }
                    return Err(match &error {
                        ClientError::Meta { code, message, .. } if code == "not_versionable" => {
                            s3_error!(InvalidBucketState, "{message}")
                        }
                        _ => s3_error_of(error),
                    });
                }
            }
            Ok(_) => {}
            // S3's own code for a name that breaks the bucket naming rules.
            Err(ClientError::Meta { code, message, .. }) if code == "invalid_name" => {
                return Err(s3_error!(InvalidBucketName, "{message}"));
            }
            // Every key of a weft cluster owns every bucket; in us-east-1 S3 answers a
            // re-create of one's own bucket with 200 (BucketAlreadyOwnedByYou elsewhere) —
            // unless it asks for a policy, which the existing bucket would not get.
            Err(ClientError::Meta { code, .. })
                if code == "bucket_exists" && legacy_region && !asks_policy => {}
            Err(error) => return Err(s3_error_of(error)),
        }
        Ok(S3Response::new(CreateBucketOutput { location: Some(format!("/{bucket}")) }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn put_bucket_website(
        &self,
        req: S3Request<PutBucketWebsiteInput>,
    ) -> S3Result<S3Response<PutBucketWebsiteOutput>> {
        self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        crate::unhosted::put_website(&req.input.website_configuration)?;
        Ok(S3Response::new(PutBucketWebsiteOutput::default()))
    }

    async fn get_bucket_website(
        &self,
        req: S3Request<GetBucketWebsiteInput>,
    ) -> S3Result<S3Response<GetBucketWebsiteOutput>> {
        self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        Err(crate::unhosted::no_website())
    }

    async fn delete_bucket_website(
        &self,
        req: S3Request<DeleteBucketWebsiteInput>,
    ) -> S3Result<S3Response<DeleteBucketWebsiteOutput>> {
        // Nothing to delete: S3 answers 204 to a bucket without a website too.
        self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        Ok(S3Response::new(DeleteBucketWebsiteOutput::default()))
    }

    async fn put_bucket_ownership_controls(
        &self,
        req: S3Request<PutBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        crate::unhosted::put_ownership(&req.input.ownership_controls)?;
        Ok(S3Response::new(PutBucketOwnershipControlsOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        self.acls().forget(&bucket);
        let meta = &self.client.meta;
        // As S3: uploads in progress do not keep a bucket with no objects; they go with it.
        let objects = meta.list_objects(&bucket, "", None, 1).await.map_err(s3_error_of)?;
        if objects["objects"].as_array().is_some_and(|o| !o.is_empty()) {
            return Err(s3_error!(BucketNotEmpty, "bucket {bucket:?} holds objects"));
        }
        let versions = meta.list_versions(&bucket, "", None, None, 1).await.map_err(s3_error_of)?;
        if versions["versions"].as_array().is_some_and(|v| !v.is_empty()) {
            return Err(s3_error!(
                BucketNotEmpty,
                "bucket {bucket:?} holds versions or delete markers (delete them by version id)"
            ));
        }
        let uploads =
            multipart::load_uploads(meta, &bucket, now_ms()).await.map_err(s3_error_of)?;
        for upload in &uploads {
            self.drop_upload(upload, None).await?;
        }
        multipart::drop_completed(meta, &bucket).await.map_err(s3_error_of)?;
        // Meta deletes the bucket's configurations (CORS) with it.
        let deleted = meta.delete_bucket(&bucket).await.map_err(s3_error_of);
        self.cors.forget(&bucket);
        self.acls().forget(&bucket);
        deleted?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        let input = req.input;
        let config =
            self.checked_bucket_encryption(&input.server_side_encryption_configuration).await?;
        let value = serde_json::to_value(&config).expect("encryption configurations serialize");
        let name = crate::encryption::record_name(&input.bucket);
        self.set_bucket_config(&input.bucket, &name, Some(value)).await?;
        Ok(S3Response::new(PutBucketEncryptionOutput::default()))
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        let bucket = req.input.bucket;
        let name = crate::encryption::record_name(&bucket);
        let Some(config) =
            self.bucket_config::<crate::encryption::BucketEncryption>(&bucket, &name).await?
        else {
            let mut error = s3_error!(
                ServerSideEncryptionConfigurationNotFoundError,
                "The server side encryption configuration was not found"
            );
            error.set_status_code(http::StatusCode::NOT_FOUND);
            return Err(error);
        };
        Ok(S3Response::new(GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(config.to_s3()),
        }))
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        let bucket = req.input.bucket;
        let name = crate::encryption::record_name(&bucket);
        self.set_bucket_config(&bucket, &name, None).await?;
        Ok(S3Response::new(DeleteBucketEncryptionOutput::default()))
    }

    async fn put_bucket_cors(
        &self,
        req: S3Request<PutBucketCorsInput>,
    ) -> S3Result<S3Response<PutBucketCorsOutput>> {
        let bucket = req.input.bucket;
        let config = CorsConfig::from_s3(&req.input.cors_configuration.cors_rules)?;
        let value = serde_json::to_value(&config).expect("CORS configurations serialize");
        self.set_bucket_config(&bucket, &cors::record_name(&bucket), Some(value)).await?;
        Ok(S3Response::new(PutBucketCorsOutput::default()))
    }

    async fn get_bucket_cors(
        &self,
        req: S3Request<GetBucketCorsInput>,
    ) -> S3Result<S3Response<GetBucketCorsOutput>> {
        let bucket = req.input.bucket;
        let meta = &self.client.meta;
        meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        let Some(config) = CorsCache::load(meta, &bucket).await.map_err(s3_error_of)? else {
            return Err(s3_error!(
                NoSuchCORSConfiguration,
                "The CORS configuration does not exist"
            ));
        };
        let rules = config.rules.iter().map(cors::CorsRule::to_s3).collect();
        Ok(S3Response::new(GetBucketCorsOutput { cors_rules: Some(rules) }))
    }

    async fn delete_bucket_cors(
        &self,
        req: S3Request<DeleteBucketCorsInput>,
    ) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        let bucket = req.input.bucket;
        // Deleting a configuration that does not exist succeeds (204), as in S3.
        self.set_bucket_config(&bucket, &cors::record_name(&bucket), None).await?;
        Ok(S3Response::new(DeleteBucketCorsOutput::default()))
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let bucket = req.input.bucket;
        let tags = tagging::bucket_tags(&req.input.tagging.tag_set)?;
        let value = serde_json::to_value(&tags).expect("tags serialize");
        self.set_bucket_config(&bucket, &tagging::record_name(&bucket), Some(value)).await?;
        Ok(S3Response::new(PutBucketTaggingOutput::default()))
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let bucket = req.input.bucket;
        let Some(tags) = self.bucket_config(&bucket, &tagging::record_name(&bucket)).await? else {
            return Err(s3_error!(NoSuchTagSet, "The TagSet does not exist"));
        };
        Ok(S3Response::new(GetBucketTaggingOutput { tag_set: tagging::to_tag_set(&tags) }))
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let bucket = req.input.bucket;
        self.set_bucket_config(&bucket, &tagging::record_name(&bucket), None).await?;
        Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        let bucket = req.input.bucket;
        let Some(given) = req.input.lifecycle_configuration else {
            return Err(s3_error!(MalformedXML, "the request has no LifecycleConfiguration"));
        };
        let config = LifecycleConfig::from_s3(&given.rules)?;
        let value = serde_json::to_value(&config).expect("lifecycle configurations serialize");
        self.set_bucket_config(&bucket, &lifecycle::record_name(&bucket), Some(value)).await?;
        Ok(S3Response::new(PutBucketLifecycleConfigurationOutput::default()))
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        let bucket = req.input.bucket;
        let name = lifecycle::record_name(&bucket);
        let Some(config) = self.bucket_config::<LifecycleConfig>(&bucket, &name).await? else {
            return Err(s3_error!(
                NoSuchLifecycleConfiguration,
                "The lifecycle configuration does not exist"
            ));
        };
        Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
            rules: Some(config.to_s3()),
            ..Default::default()
        }))
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        let bucket = req.input.bucket;
        // Deleting a configuration that does not exist succeeds (204), as in S3.
        self.set_bucket_config(&bucket, &lifecycle::record_name(&bucket), None).await?;
        Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let policy =
            self.policy_for(req.credentials.as_ref(), &req.headers, &req.input.bucket).await?;
        // A browser form upload (PostObject) reaches here as a PUT of its form's key.
        let form = req.method == http::Method::POST;
        let (input, headers, extensions, trailing) =
            (req.input, req.headers, req.extensions, req.trailing_headers);
        check_key(&input.key)?;
        // Refused before the body is read: the client hears NoSuchBucket at once instead
        // of a connection cut while it sends.
        self.client.meta.get_bucket(&input.bucket).await.map_err(s3_error_of)?;
        let size = body_size(input.content_length, &headers, "PutObject")?;
        let checks =
            BodyChecks::of_request(input.content_md5.as_deref(), &headers, &extensions, trailing)?;
        let precondition = self
            .write_precondition(
                &input.bucket,
                &input.key,
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
            )
            .await?;
        let lock = object_lock::write_lock(
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
            now_ms(),
        )?;
        let acl = object_write_acl!(self, req.credentials.as_ref(), &headers, input).await?;
        let customer = customer_key!(self, input)?;
        let wanted = wanted_sse!(self, input, customer.clone()).await?;
        let sealing = self.one_segment_sealing(wanted.as_ref(), size).await?;
        let mut shown = written_attributes(
            input.content_type,
            input.metadata,
            input.cache_control,
            input.content_disposition,
            input.content_encoding,
            input.content_language,
            input.expires,
        );
        let body = request_body(input.body, input.content_length, &headers);
        shown.acl = Some(acl);
        shown.tags = tagging::from_header(input.tagging.as_deref())?;
        if let Some(crate::form::FormTagging(document)) = extensions.get() {
            shown.tags = tagging::from_document(document)?;
        }
        let (sealed, segment) = sealing.unzip();
        shown.sse = sealed;
        let shown = self
            .write_object(
                &input.bucket,
                &input.key,
                size,
                body,
                policy,
                checks,
                shown,
                None,
                precondition,
                lock,
                segment,
            )
            .await?;
        let expiration = self.expiration_of(&input.bucket, &input.key, size, &shown, None).await;
        let mut output = PutObjectOutput {
            version_id: written_version(&shown),
            e_tag: Some(ETag::Strong(shown.etag.clone())),
            expiration,
            ..Default::default()
        };
        show_checksum!(output, shown.checksum.as_ref());
        show_sse!(output, shown.sse.as_ref(), customer.as_ref());
        let mut response = S3Response::new(output);
        if form {
            // S3's 204 to a form upload names what it stored (s3s's answer has no headers).
            let location = self.location(&headers, &input.bucket, &input.key);
            let etag = format!("\"{}\"", shown.etag);
            for (name, value) in [("location", location), ("etag", Some(etag))] {
                if let Some(value) = value.and_then(|v| http::HeaderValue::from_str(&v).ok()) {
                    response.headers.insert(name, value);
                }
            }
        }
        Ok(response)
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        input.part_number.map(check_part_number).transpose()?;
        refuse_sse_on_read(&req.headers)?;
        let (object, shown) =
            self.object_version(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        check_conditions(
            &shown,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
            not_modified_with,
        )?;
        let size = shown.shown_size(object.size);
        let (start, end, content_range, parts_count) =
            wanted_bytes(&shown, size, input.range.as_ref(), input.part_number)?;
        let object_raw = object.raw.clone();
        let expiration = self
            .expiration_of(&input.bucket, &input.key, size, &shown, input.version_id.as_deref())
            .await;
        let customer = customer_key!(self, input)?;
        let stream = self.plain_stream(object, &shown, customer.as_ref(), start, end).await?;
        let body = match end - start <= SMALL_GET_BYTES {
            true => small_body(stream).await?,
            false => StreamingBlob::wrap(stream),
        };
        let mut output = GetObjectOutput {
            body: Some(body),
            content_length: Some((end - start) as i64),
            content_range,
            parts_count,
            accept_ranges: Some("bytes".into()),
            content_type: content_type_of(&shown),
            metadata: metadata_of(&shown),
            last_modified: Some(attributes::timestamp(shown.last_modified_ms)),
            e_tag: Some(ETag::Strong(shown.etag.clone())),
            cache_control: shown.cache_control.clone(),
            content_disposition: shown.content_disposition.clone(),
            content_encoding: shown.content_encoding.clone(),
            content_language: shown.content_language.clone(),
            expires: shown.expires_timestamp(),
            version_id: shown.version_id.clone(),
            expiration,
            tag_count: (!shown.tags.is_empty()).then_some(shown.tags.len() as i32),
            ..Default::default()
        };
        // The checksum describes the whole object: a range GET shows none, a part GET its
        // part's (as S3).
        let whole = start == 0 && end == size && input.part_number.is_none();
        if whole && checksum_enabled(input.checksum_mode.as_ref()) {
            show_checksum!(output, shown.checksum.as_ref());
        }
        if let Some(part) = input.part_number.and_then(|n| shown.part_checksum(n)) {
            show_checksum!(output, Some(&part));
        }
        show_sse!(output, shown.sse.as_ref(), customer.as_ref());
        let lock = object_lock::shown(&object_raw);
        output.object_lock_mode = lock.mode;
        output.object_lock_retain_until_date = lock.until;
        output.object_lock_legal_hold_status = lock.legal_hold;
        let raw_expires = response_overrides!(output, input, &req.uri);
        let mut response = S3Response::new(output);
        echo_expires(&mut response.headers, raw_expires);
        Ok(response)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        input.part_number.map(check_part_number).transpose()?;
        refuse_sse_on_read(&req.headers)?;
        let (object, shown) =
            self.object_version(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        check_conditions(
            &shown,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
            not_modified_with,
        )?;
        let size = shown.shown_size(object.size);
        let (start, end, content_range, parts_count) =
            wanted_bytes(&shown, size, input.range.as_ref(), input.part_number)?;
        let lock = object_lock::shown(&object.raw);
        let expiration = self
            .expiration_of(&input.bucket, &input.key, size, &shown, input.version_id.as_deref())
            .await;
        // An SSE-C object answers a HEAD only with its key (as S3).
        let customer = customer_key!(self, input)?;
        if let Some(sealed) = shown.sse.as_ref().filter(|s| s.mode == crate::sse::Mode::Customer) {
            self.object_key(sealed, customer.as_ref()).await?;
        }
        let tag_count = shown.tags.len();
        let mut response = S3Response::new(HeadObjectOutput {
            expiration,
            object_lock_mode: lock.mode,
            object_lock_retain_until_date: lock.until,
            object_lock_legal_hold_status: lock.legal_hold,
            version_id: shown.version_id.clone(),
            content_length: Some((end - start) as i64),
            content_range,
            parts_count,
            accept_ranges: Some("bytes".into()),
            content_type: content_type_of(&shown),
            metadata: metadata_of(&shown),
            last_modified: Some(attributes::timestamp(shown.last_modified_ms)),
            e_tag: Some(ETag::Strong(shown.etag.clone())),
            cache_control: shown.cache_control.clone(),
            content_disposition: shown.content_disposition.clone(),
            content_encoding: shown.content_encoding.clone(),
            content_language: shown.content_language.clone(),
            expires: shown.expires_timestamp(),
            ..Default::default()
        });
        let whole = start == 0 && end == size && input.part_number.is_none();
        if whole && checksum_enabled(input.checksum_mode.as_ref()) {
            show_checksum!(response.output, shown.checksum.as_ref());
        }
        if let Some(part) = input.part_number.and_then(|n| shown.part_checksum(n)) {
            show_checksum!(response.output, Some(&part));
        }
        show_sse!(response.output, shown.sse.as_ref(), customer.as_ref());
        let raw_expires = response_overrides!(response.output, input, &req.uri);
        echo_expires(&mut response.headers, raw_expires);
        // S3 tells a HEAD how many tags the object has, as a GET (s3s has no field for it).
        if tag_count > 0 {
            response.headers.insert("x-amz-tagging-count", http::HeaderValue::from(tag_count));
        }
        Ok(response)
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let input = req.input;
        // Every name asked for is one S3 has, or nothing is answered (before the object is
        // looked up, as S3).
        let names = input.object_attributes.iter().flat_map(|a| a.as_str().split(','));
        for name in names.map(str::trim) {
            if !["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"].contains(&name) {
                return Err(crate::aws_errors::worded(
                    s3s::S3ErrorCode::InvalidArgument,
                    "Invalid attribute name specified.",
                    format!(
                        "x-amz-object-attributes names ETag, Checksum, ObjectParts, \
                         StorageClass or ObjectSize, not {name:?}"
                    ),
                ));
            }
        }
        let (object, shown) =
            self.object_version(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        // The header is one comma-separated list (s3s may hand it over unsplit).
        let asked = |name: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|a| a.as_str().split(','))
                .any(|a| a.trim() == name)
        };
        let mut output = GetObjectAttributesOutput {
            version_id: shown.version_id.clone(),
            last_modified: Some(attributes::timestamp(shown.last_modified_ms)),
            ..Default::default()
        };
        if asked(ObjectAttributes::ETAG) {
            output.e_tag = Some(ETag::Strong(shown.etag.clone()));
        }
        if asked(ObjectAttributes::CHECKSUM) {
            if let Some(stored) = &shown.checksum {
                output.checksum = Some(checksum::Shown::of(Some(stored)).into_checksum());
            }
        }
        if asked(ObjectAttributes::OBJECT_SIZE) {
            output.object_size = Some(shown.shown_size(object.size) as i64);
        }
        if asked(ObjectAttributes::STORAGE_CLASS) {
            output.storage_class = Some(StorageClass::from_static(StorageClass::STANDARD));
        }
        if asked(ObjectAttributes::OBJECT_PARTS) && !shown.parts.is_empty() {
            let marker = input.part_number_marker.unwrap_or(0).max(0) as usize;
            let max = page_size(input.max_parts, "max-parts", 1000)?;
            let listed: Vec<ObjectPart> = shown
                .parts
                .iter()
                .enumerate()
                .skip(marker)
                .take(max)
                .map(|(index, size)| {
                    let mut part = ObjectPart {
                        part_number: Some(index as i32 + 1),
                        size: Some(*size as i64),
                        ..Default::default()
                    };
                    if let Some(stored) = shown.part_checksum(index as i32 + 1) {
                        show_checksum!(values part, Some(&stored));
                    }
                    part
                })
                .collect();
            let truncated = marker + listed.len() < shown.parts.len();
            output.object_parts = Some(GetObjectAttributesParts {
                total_parts_count: Some(shown.parts.len() as i32),
                part_number_marker: input.part_number_marker,
                next_part_number_marker: listed.last().and_then(|p| p.part_number),
                max_parts: Some(max as i32),
                is_truncated: Some(truncated),
                parts: Some(listed),
            });
        }
        Ok(S3Response::new(output))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        check_key(&input.key)?;
        let conditions = DeleteConditions {
            etag: input.if_match.as_ref(),
            size: input.if_match_size,
            modified: input.if_match_last_modified_time.as_ref(),
        };
        let (version_id, marker) = self
            .delete_any(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                &conditions,
                input.bypass_governance_retention.unwrap_or(false),
            )
            .await?;
        Ok(S3Response::new(DeleteObjectOutput {
            version_id,
            delete_marker: marker.then_some(true),
            ..Default::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        if input.delete.objects.len() > MAX_KEYS {
            return Err(s3_error!(
                MalformedXML,
                "a DeleteObjects request names at most {MAX_KEYS} keys; this one names {}",
                input.delete.objects.len()
            ));
        }
        self.client.meta.get_bucket(&input.bucket).await.map_err(s3_error_of)?;
        let quiet = input.delete.quiet.unwrap_or(false);
        let bypass_governance = input.bypass_governance_retention.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for object in input.delete.objects {
            let if_match = object.e_tag.clone().map(ETagCondition::ETag);
            let version = object.version_id.as_deref();
            let outcome = match check_key(&object.key) {
                Err(error) => Err(error),
                Ok(()) => {
                    let conditions = DeleteConditions {
                        etag: if_match.as_ref(),
                        size: object.size,
                        modified: object.last_modified_time.as_ref(),
                    };
                    self.delete_any(
                        &input.bucket,
                        &object.key,
                        version,
                        &conditions,
                        bypass_governance,
                    )
                    .await
                }
            };
            match outcome {
                Ok(_) if quiet => {}
                Ok((version_id, marker)) => deleted.push(match &object.version_id {
                    // A version named: that version went (a marker, perhaps).
                    Some(named) => DeletedObject {
                        key: Some(object.key),
                        version_id: Some(named.clone()),
                        delete_marker: marker.then_some(true),
                        delete_marker_version_id: marker.then(|| named.clone()),
                    },
                    // None named: a marker was made, in a versioned bucket.
                    None => DeletedObject {
                        key: Some(object.key),
                        delete_marker: marker.then_some(true),
                        delete_marker_version_id: version_id.filter(|_| marker),
                        ..Default::default()
                    },
                }),
                Err(error) => errors.push(Error {
                    code: Some(error.code().as_str().to_string()),
                    key: Some(object.key),
                    message: error.message().map(str::to_string),
                    version_id: object.version_id.clone(),
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let policy =
            self.policy_for(req.credentials.as_ref(), &req.headers, &req.input.bucket).await?;
        // If-Match / If-None-Match on the destination (s3s parses only the source's).
        let condition = |name: &str| {
            req.headers.get(name).and_then(|v| ETagCondition::parse_http_header(v.as_bytes()).ok())
        };
        let (if_match, if_none_match) = (condition("if-match"), condition("if-none-match"));
        let input = req.input;
        check_key(&input.key)?;
        let precondition = self
            .write_precondition(
                &input.bucket,
                &input.key,
                if_match.as_ref(),
                if_none_match.as_ref(),
            )
            .await?;
        let (source_bucket, source_key, source_version) = match &input.copy_source {
            CopySource::Bucket { bucket, key, version_id } => {
                (bucket.to_string(), key.to_string(), version_id.as_deref().map(str::to_string))
            }
            _ => return Err(s3_error!(NotImplemented, "only bucket/key copy sources")),
        };
        let replace = match input.metadata_directive.as_ref().map(|d| d.as_str()) {
            None | Some(MetadataDirective::COPY) => false,
            Some(MetadataDirective::REPLACE) => true,
            Some(other) => {
                return Err(crate::aws_errors::worded(
                    s3s::S3ErrorCode::InvalidArgument,
                    "Unknown metadata directive.",
                    format!("x-amz-metadata-directive is COPY or REPLACE, not {other:?}"),
                ))
            }
        };
        let changes_encryption = input.server_side_encryption.is_some()
            || input.sse_customer_algorithm.is_some()
            || input.copy_source_sse_customer_algorithm.is_some();
        if source_bucket == input.bucket
            && source_key == input.key
            && source_version.is_none()
            && !replace
            && policy.is_none()
            && !changes_encryption
        {
            return Err(crate::aws_errors::worded(
                s3s::S3ErrorCode::InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself \
                 without changing the object's metadata, storage class, website redirect \
                 location or encryption attributes.",
                "a copy onto its own source changes something: REPLACE its metadata, or its \
                 policy (x-weft-policy) or encryption",
            ));
        }
        let (object, source) =
            self.object_version(&source_bucket, &source_key, source_version.as_deref()).await?;
        check_conditions(
            &source,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
            |_| s3_error!(PreconditionFailed, "the copy source's conditions are not met"),
        )?;
        let acl = object_write_acl!(self, req.credentials.as_ref(), &req.headers, input).await?;
        let mut shown = if replace {
            written_attributes(
                input.content_type,
                input.metadata,
                input.cache_control,
                input.content_disposition,
                input.content_encoding,
                input.content_language,
                input.expires,
            )
        } else {
            copied_attributes(&source)
        };
        shown.acl = Some(acl);
        let replace_tags = input
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
        shown.tags = match replace_tags {
            true => tagging::from_header(input.tagging.as_deref())?,
            false => source.tags.clone(),
        };
        let lock = object_lock::write_lock(
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
            now_ms(),
        )?;
        // The source opens with its key (SSE-C: the copy-source key headers); the copy is
        // sealed as the request (or the target bucket's default) asks, with a key of its own.
        let source_customer = customer_key!(copy_source self, input)?;
        let customer = customer_key!(self, input)?;
        let wanted = wanted_sse!(self, input, customer.clone()).await?;
        let size = source.shown_size(object.size);
        let sealing = self.one_segment_sealing(wanted.as_ref(), size).await?;
        let (sealed, segment) = sealing.unzip();
        shown.sse = sealed;
        let stream = self.plain_stream(object, &source, source_customer.as_ref(), 0, size).await?;
        // A copy has the bytes of its source, so it keeps a multipart source's ETag.
        let etag = source.etag.contains('-').then(|| source.etag.clone());
        let shown = self
            .write_object(
                &input.bucket,
                &input.key,
                size,
                stream,
                policy,
                BodyChecks::default(),
                shown,
                etag,
                precondition,
                lock,
                segment,
            )
            .await?;
        let version_id = written_version(&shown);
        let mut output = CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(shown.etag.clone())),
                last_modified: Some(attributes::timestamp(shown.last_modified_ms)),
                ..Default::default()
            }),
            copy_source_version_id: source.version_id.clone(),
            version_id,
            ..Default::default()
        };
        show_sse!(output, shown.sse.as_ref(), customer.as_ref());
        Ok(S3Response::new(output))
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        let input = req.input;
        let configuration = input
            .object_lock_configuration
            .ok_or_else(|| s3_error!(MalformedXML, "no ObjectLockConfiguration"))?;
        let rule = object_lock::default_retention(&configuration)?;
        self.client
            .meta
            .set_object_lock(&input.bucket, rule.as_ref())
            .await
            .map_err(s3_error_of)?;
        Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        let bucket = req.input.bucket;
        let record = self.client.meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        let configuration = object_lock::configuration_of(&record).ok_or_else(|| {
            s3_error!(
                ObjectLockConfigurationNotFoundError,
                "bucket {bucket:?} has no object lock configuration"
            )
        })?;
        Ok(S3Response::new(GetObjectLockConfigurationOutput {
            object_lock_configuration: Some(configuration),
        }))
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        let input = req.input;
        let change = json!({ "retention": object_lock::retention(input.retention.as_ref())? });
        let bypass = input.bypass_governance_retention.unwrap_or(false);
        self.set_lock(&input.bucket, &input.key, input.version_id.as_deref(), change, bypass)
            .await?;
        Ok(S3Response::new(PutObjectRetentionOutput::default()))
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        let input = req.input;
        let lock =
            self.locked_version(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        let retention = lock.retention.ok_or_else(|| {
            s3_error!(NoSuchObjectLockConfiguration, "the object has no retention")
        })?;
        Ok(S3Response::new(GetObjectRetentionOutput { retention: Some(retention) }))
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        let input = req.input;
        let status = input.legal_hold.as_ref().and_then(|h| h.status.as_ref());
        let change = json!({ "legal_hold": object_lock::legal_hold(status)? });
        self.set_lock(&input.bucket, &input.key, input.version_id.as_deref(), change, false)
            .await?;
        Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        let input = req.input;
        let lock =
            self.locked_version(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        let status = lock.legal_hold.unwrap_or_else(|| {
            ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::OFF)
        });
        Ok(S3Response::new(GetObjectLegalHoldOutput {
            legal_hold: Some(ObjectLockLegalHold { status: Some(status) }),
        }))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let bucket = req.input.bucket;
        let acl = match self.bucket_access(&bucket).await? {
            BucketAccess::Missing => {
                return Err(s3_error!(NoSuchBucket, "no bucket {bucket:?}"));
            }
            // A shared bucket: each user sees it as theirs.
            BucketAccess::Shared => {
                let who = self.requester(req.credentials.as_ref()).await?.unwrap_or_default();
                Acl::private(&who)
            }
            BucketAccess::Owned(acl) => acl,
        };
        let (owner, grants) = shown_acl(&acl);
        Ok(S3Response::new(GetBucketAclOutput { owner: Some(owner), grants: Some(grants) }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let input = &req.input;
        let bucket = input.bucket.clone();
        let who = self.requester(req.credentials.as_ref()).await?.unwrap_or_default();
        let owner = match self.bucket_access(&bucket).await? {
            BucketAccess::Missing => return Err(s3_error!(NoSuchBucket, "no bucket {bucket:?}")),
            // Setting an ACL on a shared bucket makes the user who sets it its owner.
            BucketAccess::Shared => who.clone(),
            BucketAccess::Owned(acl) => acl.owner,
        };
        let request = acl_request!(input, input.access_control_policy.as_ref());
        let acl = self
            .requested_acl(&request, &owner, None)
            .await?
            .ok_or_else(|| s3_error!(MalformedACLError, "the request names no ACL"))?;
        self.check_public_acl(&bucket, &acl).await?;
        let value = serde_json::to_value(&acl).expect("ACLs serialize");
        let meta = &self.client.meta;
        meta.put_record(cors::BUCKET_CONFIG, &acl_record_name(&bucket), &value, false)
            .await
            .map_err(s3_error_of)?;
        self.acls().forget(&bucket);
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        let input = req.input;
        let given = input.public_access_block_configuration;
        let block = crate::access::PublicBlock {
            block_public_acls: given.block_public_acls.unwrap_or(false),
            ignore_public_acls: given.ignore_public_acls.unwrap_or(false),
            block_public_policy: given.block_public_policy.unwrap_or(false),
            restrict_public_buckets: given.restrict_public_buckets.unwrap_or(false),
        };
        let meta = &self.client.meta;
        meta.get_bucket(&input.bucket).await.map_err(s3_error_of)?;
        let value = serde_json::to_value(block).expect("blocks serialize");
        let name = crate::access::block_record_name(&input.bucket);
        meta.put_record(cors::BUCKET_CONFIG, &name, &value, false).await.map_err(s3_error_of)?;
        self.acls().forget(&input.bucket);
        Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        let bucket = req.input.bucket;
        let meta = &self.client.meta;
        meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        let name = crate::access::block_record_name(&bucket);
        let Some(value) = meta.get_record(cors::BUCKET_CONFIG, &name).await.map_err(s3_error_of)?
        else {
            let mut error = S3Error::with_message(
                s3s::S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
                format!("bucket {bucket:?} has no public access block"),
            );
            error.set_status_code(http::StatusCode::NOT_FOUND);
            return Err(error);
        };
        let block: crate::access::PublicBlock = serde_json::from_value(value).unwrap_or_default();
        Ok(S3Response::new(GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(PublicAccessBlockConfiguration {
                block_public_acls: Some(block.block_public_acls),
                ignore_public_acls: Some(block.ignore_public_acls),
                block_public_policy: Some(block.block_public_policy),
                restrict_public_buckets: Some(block.restrict_public_buckets),
            }),
        }))
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        let bucket = req.input.bucket;
        let meta = &self.client.meta;
        meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        let name = crate::access::block_record_name(&bucket);
        meta.delete_record(cors::BUCKET_CONFIG, &name).await.map_err(s3_error_of)?;
        self.acls().forget(&bucket);
        let mut response = S3Response::new(DeletePublicAccessBlockOutput::default());
        response.status = Some(http::StatusCode::NO_CONTENT);
        Ok(response)
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        // Public when its effective ACL grants anything to a group, or its policy allows
        // everyone something unconditionally.
        let state = self.bucket_state(&req.input.bucket).await?;
        let acl_public = match &state.access {
            BucketAccess::Missing => {
                return Err(s3_error!(NoSuchBucket, "no bucket {:?}", req.input.bucket))
            }
            BucketAccess::Shared => false,
            BucketAccess::Owned(acl) => acl.is_public(),
        };
        let is_public = acl_public || state.policy.as_ref().is_some_and(|p| p.is_public());
        Ok(S3Response::new(GetBucketPolicyStatusOutput {
            policy_status: Some(PolicyStatus { is_public: Some(is_public) }),
        }))
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        let input = req.input;
        let bucket = input.bucket;
        let policy = crate::policy::BucketPolicy::parse(&bucket, &input.policy)
            .map_err(|reason| s3_error!(MalformedPolicy, "{reason}"))?;
        if policy.is_public() && self.public_block(&bucket).await?.block_public_policy {
            return Err(s3_error!(
                AccessDenied,
                "bucket {bucket:?} blocks public policies (its public access block)"
            ));
        }
        let meta = &self.client.meta;
        meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        let value = json!({ "text": input.policy });
        meta.put_record(cors::BUCKET_CONFIG, &format!("{bucket}/policy"), &value, false)
            .await
            .map_err(s3_error_of)?;
        self.acls().forget(&bucket);
        let mut response = S3Response::new(PutBucketPolicyOutput::default());
        response.status = Some(http::StatusCode::NO_CONTENT);
        Ok(response)
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        let bucket = req.input.bucket;
        let meta = &self.client.meta;
        meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        let record = meta
            .get_record(cors::BUCKET_CONFIG, &format!("{bucket}/policy"))
            .await
            .map_err(s3_error_of)?;
        let text = record
            .and_then(|v| v["text"].as_str().map(str::to_string))
            .ok_or_else(|| s3_error!(NoSuchBucketPolicy, "bucket {bucket:?} has no policy"))?;
        Ok(S3Response::new(GetBucketPolicyOutput { policy: Some(text) }))
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        let bucket = req.input.bucket;
        let meta = &self.client.meta;
        meta.get_bucket(&bucket).await.map_err(s3_error_of)?;
        meta.delete_record(cors::BUCKET_CONFIG, &format!("{bucket}/policy"))
            .await
            .map_err(s3_error_of)?;
        self.acls().forget(&bucket);
        let mut response = S3Response::new(DeleteBucketPolicyOutput::default());
        response.status = Some(http::StatusCode::NO_CONTENT);
        Ok(response)
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let input = req.input;
        let acl = self
            .current_object_acl(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                req.credentials.as_ref(),
            )
            .await?;
        let (owner, grants) = shown_acl(&acl);
        Ok(S3Response::new(GetObjectAclOutput {
            owner: Some(owner),
            grants: Some(grants),
            ..Default::default()
        }))
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let input = &req.input;
        let (bucket, key) = (input.bucket.as_str(), input.key.as_str());
        let version_id = input.version_id.as_deref();
        let current =
            self.current_object_acl(bucket, key, version_id, req.credentials.as_ref()).await?;
        let bucket_owner = self.bucket_access(bucket).await?.owner().map(str::to_string);
        let request = acl_request!(input, input.access_control_policy.as_ref());
        let acl = self
            .requested_acl(&request, &current.owner, bucket_owner.as_deref())
            .await?
            .ok_or_else(|| s3_error!(MalformedACLError, "the request names no ACL"))?;
        self.check_public_acl(bucket, &acl).await?;
        let acl = serde_json::to_value(&acl).expect("ACLs serialize");
        self.set_attribute(bucket, key, version_id, "acl", acl).await?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let input = &req.input;
        let tags = tagging::from_tag_set(&input.tagging.tag_set)?;
        let tags = serde_json::to_value(&tags).expect("tags serialize");
        let version_id = self
            .set_attribute(&input.bucket, &input.key, input.version_id.as_deref(), "tags", tags)
            .await?;
        Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let input = &req.input;
        let (_, shown) =
            self.object_version(&input.bucket, &input.key, input.version_id.as_deref()).await?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tagging::to_tag_set(&shown.tags),
            version_id: shown.version_id,
        }))
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let input = &req.input;
        let version_id = self
            .set_attribute(
                &input.bucket,
                &input.key,
                input.version_id.as_deref(),
                "tags",
                json!({}),
            )
            .await?;
        Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let record = self.client.meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        let status = match record["versioning"].as_str() {
            Some("enabled") => {
                Some(BucketVersioningStatus::from_static(BucketVersioningStatus::ENABLED))
            }
            Some("suspended") => {
                Some(BucketVersioningStatus::from_static(BucketVersioningStatus::SUSPENDED))
            }
            _ => None,
        };
        Ok(S3Response::new(GetBucketVersioningOutput { status, ..Default::default() }))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let input = req.input;
        let configuration = input.versioning_configuration;
        if configuration.mfa_delete.as_ref().is_some_and(|m| m.as_str() == MFADelete::ENABLED) {
            return Err(s3_error!(NotImplemented, "weft does not implement MFA delete"));
        }
        let state = match configuration.status.as_ref().map(|s| s.as_str()) {
            Some(BucketVersioningStatus::ENABLED) => "enabled",
            Some(BucketVersioningStatus::SUSPENDED) => "suspended",
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "the versioning configuration's Status must be Enabled or Suspended"
                ))
            }
        };
        let meta = &self.client.meta;
        meta.set_versioning(&input.bucket, state).await.map_err(|error| match &error {
            ClientError::Meta { code, message, .. } if code == "not_versionable" => {
                s3_error!(InvalidBucketState, "{message}")
            }
            _ => s3_error_of(error),
        })?;
        Ok(S3Response::new(PutBucketVersioningOutput::default()))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let owner = self.listed_owner(&input.bucket, req.credentials.as_ref()).await?;
        let bucket = input.bucket.clone();
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = page_size(input.max_keys, "maxKeys", MAX_KEYS)?;
        let delimiter = input.delimiter.as_deref().filter(|d| !d.is_empty());
        let key_marker = input.key_marker.as_deref().filter(|k| !k.is_empty());
        let version_marker = input.version_id_marker.as_deref().filter(|v| !v.is_empty());
        if version_marker.is_some() && key_marker.is_none() {
            return Err(s3_error!(
                InvalidArgument,
                "A version-id marker cannot be specified without a key marker."
            ));
        }
        let page = versioning::list(
            &self.client.meta,
            &bucket,
            &prefix,
            delimiter,
            key_marker,
            version_marker,
            max_keys,
        )
        .await
        .map_err(s3_error_of)?;
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let encode = |text: String| if url { encode_url(&text) } else { text };
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        for entry in page.versions {
            let last_modified = Some(attributes::timestamp(entry.created_ms));
            if entry.delete_marker {
                markers.push(DeleteMarkerEntry {
                    is_latest: Some(entry.is_latest),
                    key: Some(encode(entry.key)),
                    last_modified,
                    owner: Some(owner.clone()),
                    version_id: Some(entry.version_id),
                });
                continue;
            }
            let shown = entry
                .attributes
                .unwrap_or_else(|| attributes::defaults(entry.generation, entry.created_ms));
            let version_owner =
                shown.acl.as_ref().map_or_else(|| owner.clone(), |a| owner_named(&a.owner));
            let size = shown.shown_size(entry.size);
            versions.push(ObjectVersion {
                e_tag: Some(ETag::Strong(shown.etag)),
                is_latest: Some(entry.is_latest),
                key: Some(encode(entry.key)),
                last_modified,
                owner: Some(version_owner),
                size: Some(size as i64),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                version_id: Some(entry.version_id),
                ..Default::default()
            });
        }
        let common_prefixes: Vec<CommonPrefix> = page
            .common_prefixes
            .into_iter()
            .map(|p| CommonPrefix { prefix: Some(encode(p)) })
            .collect();
        let (next_key, next_version) = match page.next.clone() {
            Some((key, version)) => (Some(encode(key)), version),
            None => (None, None),
        };
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(bucket),
            prefix: Some(encode(prefix)),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(&encode),
            encoding_type: input.encoding_type,
            max_keys: Some(max_keys as i32),
            key_marker: Some(input.key_marker.unwrap_or_default()),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            is_truncated: Some(page.next.is_some()),
            next_key_marker: next_key,
            next_version_id_marker: next_version,
            versions: (!versions.is_empty()).then_some(versions),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: (!common_prefixes.is_empty()).then_some(common_prefixes),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let v2 = ListObjectsV2Input {
            bucket: input.bucket.clone(),
            delimiter: input.delimiter.clone(),
            encoding_type: input.encoding_type.clone(),
            max_keys: input.max_keys,
            prefix: input.prefix.clone(),
            start_after: input.marker.clone(),
            // ListObjects (v1) always names each object's owner.
            fetch_owner: Some(true),
            ..Default::default()
        };
        let output = self.list_v2(v2, req.credentials.as_ref()).await?;
        // v1 names the next marker only with a delimiter; without one the client goes on
        // from the last key (S3's rule, which SDKs follow).
        let has_delimiter = output.delimiter.is_some();
        let url = output.encoding_type.is_some();
        Ok(S3Response::new(ListObjectsOutput {
            name: output.name,
            // v1 echoes the prefix as sent, even with encoding-type=url.
            prefix: Some(input.prefix.clone().unwrap_or_default()),
            delimiter: output.delimiter,
            encoding_type: output.encoding_type,
            max_keys: output.max_keys,
            is_truncated: output.is_truncated,
            contents: output.contents,
            common_prefixes: output.common_prefixes,
            marker: Some(match input.marker {
                Some(marker) if url => encode_url(&marker),
                Some(marker) => marker,
                None => String::new(),
            }),
            next_marker: output.next_continuation_token.filter(|_| has_delimiter).map(|next| {
                if url {
                    encode_url(&next)
                } else {
                    next
                }
            }),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        Ok(S3Response::new(self.list_v2(req.input, req.credentials.as_ref()).await?))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let meta = &self.client.meta;
        let mut bucket = meta.get_bucket(&req.input.bucket).await.map_err(s3_error_of)?;
        let policy =
            match self.policy_for(req.credentials.as_ref(), &req.headers, &req.input.bucket).await?
            {
                Some(layout) => serde_json::to_value(layout).expect("layouts serialize"),
                None => bucket["default_policy"].take(),
            };
        let input = req.input;
        check_key(&input.key)?;
        let lock = object_lock::write_lock(
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
            now_ms(),
        )?;
        // Refused now, as S3 does, rather than when the upload completes.
        if lock.is_some() && bucket.get("object_lock").is_none() {
            return Err(no_object_lock(&input.bucket));
        }
        match meta.create_bucket(PARTS_BUCKET, None).await {
            Ok(_) | Err(ClientError::Meta { status: 409, .. }) => {}
            Err(error) => return Err(s3_error_of(error)),
        }
        let acl = object_write_acl!(self, req.credentials.as_ref(), &req.headers, input).await?;
        let mut shown = written_attributes(
            input.content_type,
            input.metadata,
            input.cache_control,
            input.content_disposition,
            input.content_encoding,
            input.content_language,
            input.expires,
        );
        shown.acl = Some(acl);
        shown.tags = tagging::from_header(input.tagging.as_deref())?;
        let checksum_type = checksum::upload_checksum_type(
            input
                .checksum_algorithm
                .as_ref()
                .and_then(|a| checksum::Algorithm::of_name(a.as_str())),
            input.checksum_type.as_ref().map(|t| t.as_str()),
        )?;
        let checksum_algorithm = match &input.checksum_algorithm {
            None => None,
            Some(name) => Some(
                checksum::Algorithm::of_name(name.as_str())
                    .ok_or_else(|| {
                        s3_error!(
                            InvalidRequest,
                            "Checksum algorithm {:?} is not one of CRC32, CRC32C, CRC64NVME, \
                             SHA1, SHA256",
                            name.as_str()
                        )
                    })?
                    .name()
                    .to_string(),
            ),
        };
        let customer = customer_key!(self, input)?;
        let wanted = wanted_sse!(self, input, customer.clone()).await?;
        let sse = match &wanted {
            Some(wanted) => Some(self.new_sealing(wanted).await?.record),
            None => None,
        };
        let upload = UploadRecord {
            sse,
            checksum_type: checksum_type.map(str::to_string),
            bucket: input.bucket.clone(),
            key: input.key.clone(),
            upload_id: multipart::new_upload_id(),
            initiated_ms: now_ms(),
            content_type: None,
            metadata: BTreeMap::new(),
            policy,
            shown,
            completed: None,
            lock,
            initiator: self.requester(req.credentials.as_ref()).await?,
            checksum_algorithm,
        };
        let name = multipart::upload_name(&upload.bucket, &upload.upload_id);
        let value = serde_json::to_value(&upload).expect("uploads serialize");
        meta.put_record(UPLOADS, &name, &value, true).await.map_err(s3_error_of)?;
        let mut output = CreateMultipartUploadOutput {
            bucket: Some(upload.bucket),
            key: Some(upload.key),
            upload_id: Some(upload.upload_id),
            checksum_algorithm: upload.checksum_algorithm.map(ChecksumAlgorithm::from),
            checksum_type: upload.checksum_type.clone().map(ChecksumType::from),
            ..Default::default()
        };
        show_sse!(output, upload.sse.as_ref(), customer.as_ref());
        Ok(S3Response::new(output))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let (input, headers, extensions, trailing) =
            (req.input, req.headers, req.extensions, req.trailing_headers);
        check_part_number(input.part_number)?;
        let upload = self.upload_of(&input.bucket, &input.key, &input.upload_id).await?;
        let size = body_size(input.content_length, &headers, "UploadPart")?;
        let mut checks =
            BodyChecks::of_request(input.content_md5.as_deref(), &headers, &extensions, trailing)?;
        // A part of an upload whose create named an algorithm is checksummed with it.
        let algorithm = upload.checksum_algorithm.as_deref().and_then(checksum::Algorithm::of_name);
        checks.checksum = checksum::Requested::for_part(checks.checksum.take(), algorithm)?;
        let customer = customer_key!(self, input)?;
        let body = request_body(input.body, input.content_length, &headers);
        let shown = self
            .write_part(&upload, input.part_number, size, body, checks, customer.as_ref())
            .await?;
        let mut output = UploadPartOutput {
            e_tag: Some(ETag::Strong(shown.etag.clone())),
            ..Default::default()
        };
        show_checksum!(values output, shown.checksum.as_ref());
        show_sse!(output, upload.sse.as_ref(), customer.as_ref());
        Ok(S3Response::new(output))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        check_part_number(input.part_number)?;
        let upload = self.upload_of(&input.bucket, &input.key, &input.upload_id).await?;
        let (source_bucket, source_key, source_version) = match &input.copy_source {
            CopySource::Bucket { bucket, key, version_id } => {
                (bucket.to_string(), key.to_string(), version_id.as_deref().map(str::to_string))
            }
            _ => return Err(s3_error!(NotImplemented, "only bucket/key copy sources")),
        };
        let (object, source) =
            self.object_version(&source_bucket, &source_key, source_version.as_deref()).await?;
        check_conditions(
            &source,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
            |_| s3_error!(PreconditionFailed, "the copy source's conditions are not met"),
        )?;
        let size = source.shown_size(object.size);
        let (start, end) = match input.copy_source_range.as_deref() {
            None => (0, size),
            Some(range) => copy_source_range(range, size)?,
        };
        let source_customer = customer_key!(copy_source self, input)?;
        let customer = customer_key!(self, input)?;
        let stream =
            self.plain_stream(object, &source, source_customer.as_ref(), start, end).await?;
        // A part of an upload whose create named an algorithm is checksummed with it, as
        // it is copied (a copied part has no client value to check).
        let algorithm = upload.checksum_algorithm.as_deref().and_then(checksum::Algorithm::of_name);
        let checks = BodyChecks {
            checksum: algorithm.map(|algorithm| checksum::Requested {
                algorithm,
                expected: checksum::Expected::None,
            }),
            ..BodyChecks::default()
        };
        let shown = self
            .write_part(&upload, input.part_number, end - start, stream, checks, customer.as_ref())
            .await?;
        let mut result = CopyPartResult {
            e_tag: Some(ETag::Strong(shown.etag.clone())),
            last_modified: Some(attributes::timestamp(shown.last_modified_ms)),
            ..Default::default()
        };
        show_checksum!(values result, shown.checksum.as_ref());
        let mut output = UploadPartCopyOutput {
            copy_part_result: Some(result),
            copy_source_version_id: source.version_id,
            ..Default::default()
        };
        show_sse!(output, upload.sse.as_ref(), customer.as_ref());
        Ok(S3Response::new(output))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let location = self.location(&req.headers, &input.bucket, &input.key);
        let upload = self.any_upload(&input.bucket, &input.key, &input.upload_id).await?;
        if let Some(done) = &upload.completed {
            // A repeated Complete (an SDK retry): the same answer, while the object it
            // made is still the key's.
            let current = self.client.meta.get_object(&upload.bucket, &upload.key).await;
            if current.is_ok_and(|object| object.generation == done.generation) {
                return Ok(S3Response::new(CompleteMultipartUploadOutput {
                    bucket: Some(upload.bucket.clone()),
                    key: Some(upload.key.clone()),
                    e_tag: Some(ETag::Strong(done.etag.clone())),
                    location,
                    ..Default::default()
                }));
            }
            return Err(s3_error!(NoSuchUpload, "upload {:?} was completed", input.upload_id));
        }
        let precondition = self
            .write_precondition(
                &upload.bucket,
                &upload.key,
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
            )
            .await?;
        let asked = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        if asked.is_empty() {
            return Err(s3_error!(MalformedXML, "a Complete must list at least one part"));
        }
        let stored = multipart::load_parts(&self.client.meta, &upload.upload_id)
            .await
            .map_err(s3_error_of)?;
        let by_number: BTreeMap<i32, &PartRecord> =
            stored.iter().map(|p| (p.part_number, p)).collect();
        let mut chosen: Vec<PartRecord> = Vec::with_capacity(asked.len());
        for (index, part) in asked.iter().enumerate() {
            let number = part.part_number.unwrap_or(0);
            if chosen.last().is_some_and(|previous| previous.part_number >= number) {
                return Err(s3_error!(InvalidPartOrder, "parts must be listed in ascending order"));
            }
            let Some(record) = by_number.get(&number) else {
                return Err(s3_error!(InvalidPart, "part {number} was not uploaded"));
            };
            if part.e_tag.as_ref().is_some_and(|etag| etag.value() != record.etag) {
                return Err(s3_error!(InvalidPart, "part {number}'s ETag is not the uploaded one"));
            }
            let listed = [
                part.checksum_crc32.as_deref(),
                part.checksum_crc32c.as_deref(),
                part.checksum_crc64nvme.as_deref(),
                part.checksum_sha1.as_deref(),
                part.checksum_sha256.as_deref(),
            ];
            checksum::check_listed(listed, record.checksum.as_ref(), number)?;
            if index + 1 < asked.len() && record.size < multipart::MIN_PART_BYTES {
                return Err(s3_error!(
                    EntityTooSmall,
                    "part {number} is {} bytes; every part but the last must be at least 5 MiB",
                    record.size
                ));
            }
            chosen.push((*record).clone());
        }
        let etag =
            multipart::multipart_etag(&chosen.iter().map(|p| p.etag.as_str()).collect::<Vec<_>>());
        let size: u64 = chosen.iter().map(|p| p.size).sum();
        let part_sizes: Vec<u64> = chosen.iter().map(|p| p.size).collect();
        let algorithm = multipart::completion_checksum(&upload, &chosen);
        // Each part's own checksum, kept when the create named the algorithm and every part
        // has one of it (an upload that named none shows no part checksums, as S3).
        let part_checksums: Vec<String> = algorithm
            .filter(|_| upload.checksum_algorithm.is_some())
            .and_then(|algorithm| {
                chosen
                    .iter()
                    .map(|p| {
                        p.checksum
                            .as_ref()
                            .filter(|c| c.algorithm() == Some(algorithm))
                            .map(|c| c.value.clone())
                    })
                    .collect()
            })
            .unwrap_or_default();
        // A COMPOSITE checksum is the digest of the parts' digests: no byte is read for it.
        let composite = algorithm
            .filter(|_| upload.checksum_type.as_deref() == Some(checksum::COMPOSITE))
            .map(|algorithm| {
                checksum::composite_of(algorithm, chosen.iter().map(|p| p.checksum.as_ref()))
                    .ok_or_else(|| {
                        s3_error!(InvalidPart, "a part has no {} checksum", algorithm.name())
                    })
            })
            .transpose()?;
        // A sealed upload's object is its parts' segments, copied sealed: no key is needed
        // (SSE-C clients send none here), and its checksum is combined from the parts'.
        let (sealed, combined) = match &upload.sse {
            None => (None, None),
            Some(template) => {
                let salts: Option<Vec<_>> = chosen
                    .iter()
                    .map(|p| p.salt.as_deref().and_then(crate::sse::decode_salt))
                    .collect();
                let salts = salts.ok_or_else(|| {
                    s3_error!(InternalError, "a part of this sealed upload has no salt")
                })?;
                let record = crate::sse::Sealed {
                    size,
                    salts: crate::sse::salts_text(&salts),
                    segments: part_sizes.clone(),
                    ..template.clone()
                };
                let combined = algorithm.filter(|_| composite.is_none()).and_then(|algorithm| {
                    checksum::combine_parts(
                        algorithm,
                        chosen.iter().map(|p| (p.checksum.as_ref(), p.size)),
                    )
                });
                (Some(record), combined)
            }
        };
        // The completed object's checksum is computed from its bytes as the parts are
        // copied into it: a full-object checksum, checked by clients as one.
        let checks = BodyChecks {
            checksum: algorithm.filter(|_| sealed.is_none() && composite.is_none()).map(
                |algorithm| checksum::Requested { algorithm, expected: checksum::Expected::None },
            ),
            ..BodyChecks::default()
        };
        let stored_size = sealed.as_ref().map_or(size, |s| s.stored_size());
        let sealed_shown = sealed.clone();
        // The copy may take a while: s3s answers 200 at once and keeps the connection alive
        // with whitespace until this future ends (an error then is an XML error in the body).
        let gateway = self.clone();
        let future = async move {
            let mut sources = Vec::with_capacity(chosen.len());
            for part in &chosen {
                let key = multipart::part_key(&upload.upload_id, part.part_number);
                let object = gateway
                    .client
                    .meta
                    .get_object(PARTS_BUCKET, &key)
                    .await
                    .map_err(s3_error_of)?;
                if object.generation != part.generation {
                    return Err(s3_error!(
                        InvalidPart,
                        "part {} changed during the complete",
                        part.part_number
                    ));
                }
                sources.push(object);
            }
            let client = gateway.client.clone();
            let stream = futures_util::stream::iter(sources)
                .flat_map(move |object| {
                    let size = object.size;
                    client.object_stream(object, 0, size)
                })
                .boxed();
            let policy: StripedLayout = serde_json::from_value(upload.policy.clone())
                .map_err(|e| s3_error!(InternalError, "the upload's policy is bad: {e}"))?;
            let mut shown = Attributes { parts: part_sizes, ..upload.object_attributes() };
            shown.sse = sealed;
            if combined.is_some() || composite.is_some() {
                shown.checksum = composite.or(combined);
            }
            shown.part_checksums = part_checksums;
            let shown = gateway
                .write_object(
                    &upload.bucket,
                    &upload.key,
                    stored_size,
                    stream,
                    Some(policy),
                    checks,
                    shown,
                    Some(etag),
                    precondition,
                    upload.lock.clone(),
                    None,
                )
                .await?;
            let completed = multipart::Completed {
                etag: shown.etag.clone(),
                generation: shown.generation,
                completed_ms: now_ms(),
            };
            gateway.drop_upload(&upload, Some(completed)).await?;
            let mut output = CompleteMultipartUploadOutput {
                bucket: Some(upload.bucket.clone()),
                key: Some(upload.key.clone()),
                e_tag: Some(ETag::Strong(shown.etag.clone())),
                version_id: written_version(&shown),
                location,
                ..Default::default()
            };
            show_checksum!(output, shown.checksum.as_ref());
            show_sse!(server output, shown.sse.as_ref());
            Ok(output)
        };
        // In a versioned bucket the answer names the version in a header, which the
        // keep-alive answer sends before the copy is done: the copy is waited for there.
        let bucket = self.client.meta.get_bucket(&input.bucket).await.map_err(s3_error_of)?;
        if bucket["versioning"].as_str() == Some("enabled") {
            return Ok(S3Response::new(future.await?));
        }
        // The headers go out before the copy ends: they say what is known now.
        let mut output =
            CompleteMultipartUploadOutput { future: Some(Box::pin(future)), ..Default::default() };
        show_sse!(server output, sealed_shown.as_ref());
        Ok(S3Response::new(output))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let upload = self.upload_of(&input.bucket, &input.key, &input.upload_id).await?;
        self.drop_upload(&upload, None).await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let upload = self.upload_of(&input.bucket, &input.key, &input.upload_id).await?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = page_size(input.max_parts, "max-parts", 1000)?;
        let stored = multipart::load_parts(&self.client.meta, &upload.upload_id)
            .await
            .map_err(s3_error_of)?;
        let after: Vec<&PartRecord> = stored.iter().filter(|p| p.part_number > marker).collect();
        let truncated = after.len() > max;
        let parts: Vec<Part> = after
            .iter()
            .take(max)
            .map(|p| {
                let shown = checksum::Shown::of(p.checksum.as_ref());
                Part {
                    part_number: Some(p.part_number),
                    e_tag: Some(ETag::Strong(p.etag.clone())),
                    size: Some(p.size as i64),
                    last_modified: Some(attributes::timestamp(p.last_modified_ms)),
                    checksum_crc32: shown.crc32,
                    checksum_crc32c: shown.crc32c,
                    checksum_crc64nvme: shown.crc64nvme,
                    checksum_sha1: shown.sha1,
                    checksum_sha256: shown.sha256,
                }
            })
            .collect();
        let next = if truncated { parts.last().and_then(|p| p.part_number) } else { None };
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(upload.bucket),
            key: Some(upload.key),
            upload_id: Some(upload.upload_id),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            parts: Some(parts),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        self.client.meta.get_bucket(&input.bucket).await.map_err(s3_error_of)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let mut uploads = multipart::load_uploads(&self.client.meta, &input.bucket, now_ms())
            .await
            .map_err(s3_error_of)?;
        uploads.retain(|u| u.key.starts_with(&prefix));
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        if let Some(marker) = &input.key_marker {
            let id_marker = input.upload_id_marker.clone().unwrap_or_default();
            uploads.retain(|u| {
                (&u.key, &u.upload_id) > (marker, &id_marker)
                    && (u.key > *marker || !id_marker.is_empty())
            });
            // A marker that is a common prefix (the last entry of a page) skips its group.
            if delimiter.as_ref().is_some_and(|d| marker.ends_with(d.as_str())) {
                uploads.retain(|u| !u.key.starts_with(marker.as_str()));
            }
        }
        // Key, then upload id: the order the markers page by.
        uploads.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        let max = page_size(input.max_uploads, "max-uploads", 1000)?;
        // Uploads and (with a delimiter) the distinct prefixes that group them, in key order:
        // each counts once toward max-uploads, as in S3.
        let mut entries: Vec<Result<UploadRecord, String>> = Vec::new();
        let mut truncated = false;
        for upload in uploads {
            let group = delimiter.as_ref().and_then(|d| {
                let rest = &upload.key[prefix.len()..];
                rest.find(d.as_str())
                    .map(|at| upload.key[..prefix.len() + at + d.len()].to_string())
            });
            if let (Some(group), Some(Err(last))) = (&group, entries.last()) {
                if group == last {
                    continue;
                }
            }
            if entries.len() == max {
                truncated = true;
                break;
            }
            entries.push(group.map_or(Ok(upload), Err));
        }
        let (next_key, next_id) = match (truncated, entries.last()) {
            (true, Some(Ok(last))) => (Some(last.key.clone()), Some(last.upload_id.clone())),
            (true, Some(Err(group))) => (Some(group.clone()), None),
            _ => (None, None),
        };
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let shown = |text: String| if url { encode_url(&text) } else { text };
        let mut listed = Vec::new();
        let mut groups = Vec::new();
        for entry in entries {
            match entry {
                Err(group) => groups.push(CommonPrefix { prefix: Some(shown(group)) }),
                Ok(u) => listed.push(MultipartUpload {
                    key: Some(shown(u.key)),
                    upload_id: Some(u.upload_id),
                    initiated: Some(attributes::timestamp(u.initiated_ms)),
                    initiator: u.initiator.as_ref().map(|name| Initiator {
                        display_name: Some(name.clone()),
                        id: Some(name.clone()),
                    }),
                    owner: u
                        .initiator
                        .map(|name| Owner { display_name: Some(name.clone()), id: Some(name) }),
                    checksum_algorithm: u.checksum_algorithm.map(ChecksumAlgorithm::from),
                    ..Default::default()
                }),
            }
        }
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix.map(shown),
            delimiter: input.delimiter.map(shown),
            encoding_type: input.encoding_type,
            key_marker: input.key_marker.map(shown),
            upload_id_marker: input.upload_id_marker,
            next_key_marker: next_key.map(shown),
            next_upload_id_marker: next_id,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            uploads: Some(listed),
            common_prefixes: (!groups.is_empty()).then_some(groups),
            ..Default::default()
        }))
    }
}

impl Gateway {
    /// ListObjectsV2 (also behind ListObjects).
    async fn list_v2(
        &self,
        input: ListObjectsV2Input,
        credentials: Option<&s3s::auth::Credentials>,
    ) -> S3Result<ListObjectsV2Output> {
        let meta = &self.client.meta;
        let bucket = input.bucket.clone();
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = page_size(input.max_keys, "maxKeys", MAX_KEYS)?;
        let start = match (input.continuation_token.as_deref(), input.start_after.as_deref()) {
            (Some(token), Some(after)) => Some(token.max(after)),
            (token, after) => token.or(after),
        };
        let delimiter = input.delimiter.as_deref().filter(|d| !d.is_empty());
        let page = listing::list(meta, &bucket, &prefix, delimiter, start, max_keys)
            .await
            .map_err(s3_error_of)?;
        // Objects committed before attributes lived with them: their older gateway
        // records, read in one scan over the page's range (only when there are such).
        let mut recorded: BTreeMap<String, Attributes> = BTreeMap::new();
        let without = page.objects.iter().rev().find(|o| o.attributes.is_none());
        if let Some(last) = without {
            let names = attributes::record_name(&bucket, "");
            // Every listed key is after the page's start, and so is its record.
            let mut after: Option<String> = start.map(|s| attributes::record_name(&bucket, s));
            loop {
                let (records, next) = meta
                    .list_records(
                        attributes::OBJECT_ATTRIBUTES,
                        &format!("{names}{prefix}"),
                        after.as_deref(),
                        999,
                    )
                    .await
                    .map_err(s3_error_of)?;
                let mut past = false;
                for (name, value) in records {
                    let key = name[names.len()..].to_string();
                    if key > last.key {
                        past = true;
                        break;
                    }
                    if let Ok(a) = serde_json::from_value::<Attributes>(value) {
                        recorded.insert(key, a);
                    }
                }
                match next {
                    Some(next) if !past => after = Some(next),
                    _ => break,
                }
            }
        }
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let encode = |text: String| if url { encode_url(&text) } else { text };
        let owner = match input.fetch_owner.unwrap_or(false) {
            true => Some(self.listed_owner(&bucket, credentials).await?),
            false => None,
        };
        let contents: Vec<Object> = page
            .objects
            .into_iter()
            .map(|o| {
                let shown = o
                    .attributes
                    .clone()
                    .or_else(|| recorded.remove(&o.key).filter(|a| a.generation == o.generation))
                    .unwrap_or_else(|| attributes::defaults(o.generation, o.created_ms));
                Object {
                    key: Some(encode(o.key)),
                    size: Some(shown.shown_size(o.size) as i64),
                    e_tag: Some(ETag::Strong(shown.etag)),
                    last_modified: Some(attributes::timestamp(o.created_ms)),
                    storage_class: Some(ObjectStorageClass::from_static(
                        ObjectStorageClass::STANDARD,
                    )),
                    // Its own owner (its ACL's), else the one of objects without an ACL.
                    owner: owner.as_ref().map(|default| {
                        shown
                            .acl
                            .as_ref()
                            .map_or_else(|| default.clone(), |a| owner_named(&a.owner))
                    }),
                    ..Default::default()
                }
            })
            .collect();
        let common_prefixes: Vec<CommonPrefix> = page
            .common_prefixes
            .into_iter()
            .map(|p| CommonPrefix { prefix: Some(encode(p)) })
            .collect();
        let key_count = (contents.len() + common_prefixes.len()) as i32;
        Ok(ListObjectsV2Output {
            name: Some(bucket),
            prefix: Some(encode(prefix)),
            // An empty delimiter is no delimiter, and S3 does not echo it.
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(&encode),
            encoding_type: input.encoding_type,
            max_keys: Some(max_keys as i32),
            key_count: Some(key_count),
            is_truncated: Some(page.next.is_some()),
            continuation_token: input.continuation_token,
            next_continuation_token: page.next,
            start_after: input.start_after.map(&encode),
            contents: (!contents.is_empty()).then_some(contents),
            common_prefixes: (!common_prefixes.is_empty()).then_some(common_prefixes),
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_chunked_is_how_a_body_was_sent_not_what_the_object_is() {
        assert_eq!(stored_encoding("gzip").as_deref(), Some("gzip"));
        assert_eq!(stored_encoding("deflate, gzip").as_deref(), Some("deflate, gzip"));
        assert_eq!(stored_encoding("gzip, aws-chunked").as_deref(), Some("gzip"));
        assert_eq!(stored_encoding("aws-chunked,gzip").as_deref(), Some("gzip"));
        assert_eq!(stored_encoding("aws-chunked"), None);
        assert_eq!(stored_encoding("aws-chunked, aws-chunked"), None);
    }

    #[test]
    fn page_sizes_are_capped_and_negative_ones_refused() {
        assert_eq!(page_size(None, "max-keys", 1000).unwrap(), 1000);
        assert_eq!(page_size(Some(0), "max-keys", 1000).unwrap(), 0);
        assert_eq!(page_size(Some(7), "max-keys", 1000).unwrap(), 7);
        assert_eq!(page_size(Some(i32::MAX), "max-keys", 1000).unwrap(), 1000);
        let refused = page_size(Some(-1), "max-parts", 1000).unwrap_err();
        assert_eq!(refused.code(), &s3s::S3ErrorCode::InvalidArgument);
        assert!(refused.message().unwrap().contains("max-parts"), "{refused:?}");
    }

    #[test]
    fn body_sizes_come_from_the_length_or_the_decoded_length_of_aws_chunked() {
        let headers = crate::test_headers;
        let chunked =
            headers(&[("content-encoding", "aws-chunked"), ("x-amz-decoded-content-length", "0")]);
        assert_eq!(body_size(Some(5), &chunked, "PutObject").unwrap(), 5);
        assert_eq!(body_size(None, &chunked, "PutObject").unwrap(), 0);
        let streaming = headers(&[
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("x-amz-decoded-content-length", "123"),
        ]);
        assert_eq!(body_size(None, &streaming, "PutObject").unwrap(), 123);
        // A decoded length means nothing without aws-chunked: 411, as a plain chunked body.
        let plain = headers(&[("x-amz-decoded-content-length", "123")]);
        let refused = body_size(None, &plain, "PutObject").unwrap_err();
        assert_eq!(refused.code(), &s3s::S3ErrorCode::MissingContentLength);
        let bad =
            headers(&[("content-encoding", "aws-chunked"), ("x-amz-decoded-content-length", "x")]);
        assert!(body_size(None, &bad, "UploadPart").is_err());
        assert!(body_size(Some(-1), &plain, "UploadPart").is_err());
    }

    #[test]
    fn copy_source_ranges_are_exact_and_checked() {
        assert_eq!(copy_source_range("bytes=0-4", 5).unwrap(), (0, 5));
        assert_eq!(copy_source_range("bytes=2-2", 5).unwrap(), (2, 3));
        for bad in
            ["0-2", "bytes=0", "bytes=hello-world", "bytes=0-bar", "bytes=hello-", "bytes=0-2,3-5"]
        {
            let error = copy_source_range(bad, 5).unwrap_err();
            assert_eq!(error.code().as_str(), "InvalidArgument", "{bad}");
        }
        let error = copy_source_range("bytes=0-21", 5).unwrap_err();
        assert_eq!(error.code().as_str(), "InvalidRange");
        assert!(copy_source_range("bytes=3-2", 5).is_err());
    }

    #[test]
    fn policy_headers_override_the_bucket_default() {
        let default =
            json!({"code":"rs(6,3)","stripe_width":2,"cell_bytes":1048576,"block_bytes":8388608});
        let layout = apply_policy_header(&default, "rs(10,4),stripe=4").unwrap();
        assert_eq!(layout.code.to_string(), "rs(10,4)");
        assert_eq!((layout.stripe_width, layout.cell_bytes), (4, 1 << 20));
        let layout = apply_policy_header(&default, "rs(2,1),cell=64K,block=256KiB").unwrap();
        assert_eq!((layout.cell_bytes, layout.block_bytes), (64 << 10, 256 << 10));
        assert!(apply_policy_header(&default, "rs(2,1),width=3").is_err());
        assert!(apply_policy_header(&default, "rs(2,1),block=100K").is_err(), "not a multiple");
        assert!(apply_policy_header(&default, "nonsense(1").is_err());
    }
}
