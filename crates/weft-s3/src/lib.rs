//! weft-s3: an S3-compatible gateway over weft-client. The S3 protocol (routing, XML,
//! SigV4 in headers and presigned URLs) is `s3s`'s; what is weft's own is how S3 maps onto
//! weft objects.
//!
//! - [`keys`]: access keys live in meta (gateway records, namespace `access_keys`); the
//!   gateway looks them up per request and caches them for [`keys::KEY_CACHE_TTL`].
//! - [`gateway`]: the S3 operations. Objects are weft objects (same bucket, same key), so
//!   `weft ls/get/rm` and S3 see the same namespace; S3 attributes (ETag, Content-Type,
//!   `x-amz-meta-*`, Last-Modified) are a meta record naming the object's generation.
//! - [`multipart`]: uploads and parts are meta records; parts are weft objects in the
//!   internal bucket [`multipart::PARTS_BUCKET`]; Complete copies the parts, in order, into
//!   one ordinary weft object and then deletes them.
//! - [`body`]: request bodies stream into weft-client's `put_reader` through a bounded
//!   channel, and objects stream out in bounded pieces: no object is ever held whole.
//! - [`signed_payload`]: a PUT signed with its body's SHA-256 is verified here, re-signed
//!   as `UNSIGNED-PAYLOAD` for s3s, and its body checked and MD5-hashed in one pass
//!   ([`md5_sha256`]); [`sigv4`] holds the signing pieces.
//! - [`cors`]: a bucket's CORS configuration is a meta record (namespace `bucket_config`);
//!   this wrapper answers preflights (`OPTIONS`) itself and adds `Access-Control-*` headers
//!   to the responses of requests with an `Origin` that a rule allows.
//!
//! Invariants kept by the whole crate:
//! - Meta owns every piece of state; the gateway keeps only short-lived caches: of keys
//!   ([`keys::KEY_CACHE_TTL`]) and of buckets' CORS configurations ([`cors::CORS_CACHE_TTL`],
//!   bounded, forgotten at once when this gateway changes one).
//! - Every response names its request: `x-amz-request-id` (and `x-amz-id-2`), repeated as
//!   `<RequestId>` in an error's XML, so a client's report can be found in the log.
//! - A presigned URL valid for more than 7 days (or a negative time) is refused, as S3 does;
//!   a SigV2-signed request must carry a date within [`MAX_CLOCK_SKEW_SECONDS`] (s3s checks
//!   none for SigV2, so an old request could be replayed forever).
//! - What weft does not do is refused, never silently skipped: an encryption it lacks
//!   (`aws:kms:dsse`), or any encryption on a gateway without a master key, is refused
//!   before a body byte is read ([`encryption`]); nothing asked to be sealed is stored in
//!   clear. Object lock is enforced by meta ([`object_lock`]).
//! - No request that fails creates an object: bodies that are short, long or fail their
//!   Content-MD5 or signed SHA-256 never let the write commit (the last bytes are held back
//!   until checked).
//! - s3s checks the signature of every request but OPTIONS; [`signed_payload`] re-signs
//!   only a request whose own signature it verified first.
//! - Anonymous requests are refused (s3s's default access check once auth is set), but for
//!   one kind: a CORS preflight (`OPTIONS`, which browsers send without credentials, as S3
//!   answers it). Every `OPTIONS` is answered here and never reaches s3s; it reads only the
//!   bucket's CORS configuration (at most one meta lookup, usually none: cached), grants
//!   nothing but response headers, and answers 400 without `Origin` or
//!   `Access-Control-Request-Method`, 403 AccessForbidden when no rule allows it.
//! - CORS headers only add to a response (an error one too): they never change whether or
//!   how a request is served.
//! - Before s3s sees a request, this wrapper only reshapes what S3 and s3s read differently,
//!   never what a signature covers: repeated `x-amz-meta-*` headers are joined by commas
//!   (as SigV4 signs them), a form upload's `${filename}` is filled in ([`form`]), and a
//!   presigned URL missing one of its six parameters is refused 400
//!   AuthorizationQueryParametersError. After s3s: a HEAD answering a Content-Range is 206.

pub mod access;
pub mod acl;
pub mod attributes;
pub mod aws_errors;
pub mod body;
pub mod checksum;
pub mod cors;
pub mod encryption;
pub mod form;
pub mod gateway;
pub mod keys;
pub mod lifecycle;
pub mod listing;
pub mod md5;
pub mod md5_lanes;
pub mod md5_sha256;
pub mod multipart;
pub mod object_lock;
pub mod policy;
pub mod sendfile;
pub mod signed_payload;
pub mod sigv4;
pub mod spool;
pub mod sse;
pub mod tagging;
pub mod unhosted;
pub mod versioning;

use std::net::SocketAddr;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

pub use gateway::Gateway;
pub use keys::{new_key, KeyRecord, KeyScope, ACCESS_KEYS};
pub use weft_auth::ClusterSecret;

/// The region the gateway reports and that clients should sign for.
pub const DEFAULT_REGION: &str = "us-east-1";

/// How to run a gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// meta's base URL (`http://host:port`).
    pub meta_url: String,
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The cluster secret: the gateway signs its requests to meta and nodes with keys
    /// derived from it, and opens the sealed secrets of access keys with it.
    pub secret: weft_auth::ClusterSecret,
    /// Bytes of the degraded-read cache shared by every request (0: none).
    pub degraded_cache_bytes: usize,
    /// Appends every GET's range to this read trace (JSON lines), when set.
    pub trace_reads: Option<std::path::PathBuf>,
    /// HTTPS on the listener: the cluster CA's host certificate or the user's own; S3
    /// clients show no certificate. None: plain HTTP.
    pub tls: Option<std::sync::Arc<weft_auth::tls::ServerConfig>>,
    /// The master key of encryption at rest ([`sse`]); None: SSE requests are refused.
    pub master_key: Option<sse::MasterKey>,
}

impl GatewayConfig {
    /// A gateway on `listen` over meta at `meta_url`, with the default degraded-read cache
    /// and no read trace.
    pub fn new(
        meta_url: String,
        listen: SocketAddr,
        secret: weft_auth::ClusterSecret,
    ) -> GatewayConfig {
        GatewayConfig {
            meta_url,
            listen,
            secret,
            degraded_cache_bytes: weft_client::DEFAULT_DEGRADED_CACHE_BYTES,
            trace_reads: None,
            master_key: None,
            tls: None,
        }
    }
}

/// Why the gateway could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum GatewayError {
    /// The listen address could not be bound.
    Bind { listen: SocketAddr, source: std::io::Error },
    /// The weft client could not be built (bad meta URL).
    Client(weft_client::ClientError),
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayError::Bind { listen, source } => {
                write!(f, "cannot listen on {listen}: {source} (is another gateway running?)")
            }
            GatewayError::Client(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for GatewayError {}

/// A gateway serving in the background; [`RunningGateway::stop`] ends it.
#[derive(Debug)]
pub struct RunningGateway {
    endpoint: String,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningGateway {
    /// `http://ip:port` the gateway answers on (`https://` with TLS).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops accepting connections and waits for the accept loop to end (requests in
    /// flight are abandoned).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Whether a request is `Expect: 100-continue` with `Content-Length: 0` (botocore sends
/// that on every empty PutObject). hyper answers it without a `100 Continue`, and botocore
/// then misreads the next answer on the same connection and stalls until its read timeout;
/// so such answers close the connection.
fn empty_expecting_continue(request: &http::Request<hyper::body::Incoming>) -> bool {
    let headers = request.headers();
    let empty =
        headers.get(http::header::CONTENT_LENGTH).is_some_and(|length| length.as_bytes() == b"0");
    let expect = headers
        .get(http::header::EXPECT)
        .is_some_and(|expect| expect.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    empty && expect
}

/// Whether a request carries a body (an upload: a PUT or POST with a non-zero length or
/// chunked).
fn sends_body(request: &http::Request<hyper::body::Incoming>) -> bool {
    let upload = matches!(*request.method(), http::Method::PUT | http::Method::POST);
    let headers = request.headers();
    let length = headers.get(http::header::CONTENT_LENGTH).map(|l| l.as_bytes() != b"0");
    upload && length.unwrap_or_else(|| headers.contains_key(http::header::TRANSFER_ENCODING))
}

/// Whether a request says it carries a body (a non-zero Content-Length, or chunked).
fn carries_body(request: &http::Request<hyper::body::Incoming>) -> bool {
    carries_body_headers(request.headers())
}

/// Most body bytes a request refused before its operation is read and dropped, so the
/// connection stays usable (and its answer is not lost to a reset: a socket closed with
/// unread bytes is reset, and the client may lose the answer in flight).
const DRAINED_BODY_MAX_BYTES: u64 = 64 << 10;

/// Reads and drops the body of a refused request when it is small (at most
/// [`DRAINED_BODY_MAX_BYTES`], within 2 s); false when it is not (the connection is then
/// closed after the answer).
async fn drained_small_body(request: http::Request<hyper::body::Incoming>) -> bool {
    use http_body_util::BodyExt;
    let length = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match length {
        Some(length) if length <= DRAINED_BODY_MAX_BYTES => {
            let body =
                http_body_util::Limited::new(request.into_body(), DRAINED_BODY_MAX_BYTES as usize);
            let read = tokio::time::timeout(std::time::Duration::from_secs(2), body.collect());
            matches!(read.await, Ok(Ok(_)))
        }
        _ => !carries_body_headers(request.headers()),
    }
}

/// Whether headers say a body follows (a non-zero Content-Length, or chunked).
fn carries_body_headers(headers: &http::HeaderMap) -> bool {
    match headers.get(http::header::CONTENT_LENGTH) {
        Some(length) => length.as_bytes() != b"0",
        None => headers.contains_key(http::header::TRANSFER_ENCODING),
    }
}

/// Longest validity of a presigned URL (S3's: 7 days).
pub const MAX_PRESIGNED_SECONDS: i64 = 7 * 24 * 3600;

/// How far a SigV2 request's date may be from the gateway's clock (S3's 15 minutes).
pub const MAX_CLOCK_SKEW_SECONDS: u64 = 15 * 60;

/// A SigV2-signed request to a bucket's root by path (`/bucket`): its signature covers
/// `/bucket/` (the canonical resource of a bucket, the one SigV2 clients such as botocore
/// sign), which s3s would take from the path as `/bucket`. The path gets its slash, which
/// names the same bucket.
fn sigv2_bucket_root(request: &mut http::Request<hyper::body::Incoming>) {
    let sigv2 = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("AWS "))
        || request.uri().query().is_some_and(|q| {
            q.split('&').any(|pair| pair.split('=').next() == Some("AWSAccessKeyId"))
        });
    let path = request.uri().path();
    let bucket_root = path.len() > 1 && !path[1..].contains('/');
    if !(sigv2 && bucket_root) {
        return;
    }
    let mut with_slash = format!("{path}/");
    if let Some(query) = request.uri().query() {
        with_slash.push('?');
        with_slash.push_str(query);
    }
    let mut parts = request.uri().clone().into_parts();
    if let Ok(path_and_query) = with_slash.parse() {
        parts.path_and_query = Some(path_and_query);
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}

/// Whether `request` is a GetObjectAttributes (a GET with `?attributes`).
fn asks_object_attributes(request: &http::Request<hyper::body::Incoming>) -> bool {
    request.method() == http::Method::GET
        && request.uri().query().is_some_and(|query| {
            query.split('&').any(|pair| pair.split('=').next() == Some("attributes"))
        })
}

/// S3 answers GetObjectAttributes' ETag unquoted, unlike every other ETag it sends; s3s
/// quotes them all. The answer is a small XML document held in memory (s3s built it whole),
/// so this rewrites it there; a body that is not (none today) is left as it is.
fn unquote_attributes_etag(response: &mut http::Response<s3s::Body>) {
    if !response.status().is_success() {
        return;
    }
    let Some(bytes) = response.body().bytes() else { return };
    let Ok(text) = std::str::from_utf8(&bytes) else { return };
    let fixed = unquote_etags(text);
    if fixed.len() != text.len() {
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(fixed.len()));
        *response.body_mut() = s3s::Body::from(fixed);
    }
}

/// S3 keeps a user metadata header sent more than once (in any case) as one, its values
/// joined by commas in the order sent; s3s refuses it. SigV4 signs repeated headers the same
/// way (values joined by commas), so joining them first leaves every signature as it was.
fn join_repeated_metadata(headers: &mut http::HeaderMap) {
    let repeated: Vec<http::HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("x-amz-meta-"))
        .filter(|name| headers.get_all(*name).iter().nth(1).is_some())
        .cloned()
        .collect();
    for name in repeated {
        let values: Vec<&[u8]> = headers.get_all(&name).iter().map(|v| v.as_bytes()).collect();
        let joined = values.join(&b","[..]);
        if let Ok(value) = http::HeaderValue::from_bytes(&joined) {
            headers.insert(name, value);
        }
    }
}

/// A HEAD of a range or a part answers 206 as its GET would (s3s answers every HEAD 200).
fn partial_head(response: &mut http::Response<s3s::Body>) {
    if response.status() == http::StatusCode::OK
        && response.headers().contains_key(http::header::CONTENT_RANGE)
    {
        *response.status_mut() = http::StatusCode::PARTIAL_CONTENT;
    }
}

/// Whether `request` is a browser form upload (PostObject: a POST of a form).
fn is_form_upload(request: &http::Request<hyper::body::Incoming>) -> bool {
    request.method() == http::Method::POST
        && request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// S3 refuses a form upload whose fields fail a condition of its signed policy with 403
/// AccessDenied ("Invalid according to Policy"); s3s answers 400 InvalidPolicyDocument,
/// which S3 keeps for a policy it cannot read. The refusal is a small XML document in
/// memory; only that answer is rewritten.
fn deny_failed_policy_conditions(response: &mut http::Response<s3s::Body>) {
    if response.status() != http::StatusCode::BAD_REQUEST {
        return;
    }
    let Some(bytes) = response.body().bytes() else { return };
    let Ok(text) = std::str::from_utf8(&bytes) else { return };
    if !(text.contains("<Code>InvalidPolicyDocument</Code>") && text.contains("Policy condition")) {
        return;
    }
    let fixed =
        text.replace("<Code>InvalidPolicyDocument</Code>", "<Code>AccessDenied</Code>").replace(
            "<Message>Policy condition",
            "<Message>Invalid according to Policy: Policy condition",
        );
    *response.status_mut() = http::StatusCode::FORBIDDEN;
    response
        .headers_mut()
        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(fixed.len()));
    *response.body_mut() = s3s::Body::from(fixed);
}

/// `<ETag>"x"</ETag>` (quotes plain or as `&quot;`) as `<ETag>x</ETag>`.
fn unquote_etags(xml: &str) -> String {
    xml.replace("<ETag>&quot;", "<ETag>")
        .replace("&quot;</ETag>", "</ETag>")
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>")
}

/// The refusal of a SigV2-signed request whose date is missing or too far from now.
fn stale_sigv2(request: &http::Request<hyper::body::Incoming>) -> Option<s3s::S3Error> {
    use s3s::dto::{Timestamp, TimestampFormat};
    let headers = request.headers();
    let v2 = headers
        .get(http::header::AUTHORIZATION)
        .is_some_and(|value| value.as_bytes().starts_with(b"AWS "));
    if !v2 {
        return None;
    }
    let date = headers
        .get("x-amz-date")
        .or_else(|| headers.get(http::header::DATE))
        .and_then(|value| value.to_str().ok())
        .and_then(|text| Timestamp::parse(TimestampFormat::HttpDate, text.trim()).ok());
    let epoch = Timestamp::from(std::time::UNIX_EPOCH);
    let Some(date) = date.filter(|date| *date >= epoch) else {
        // No date, one that does not parse, or one before 1970: S3 refuses these as
        // unauthenticated before it looks at the clock.
        return Some(s3s::S3Error::with_message(
            s3s::S3ErrorCode::AccessDenied,
            "AWS authentication requires a valid Date or x-amz-date header",
        ));
    };
    let now = std::time::SystemTime::now();
    let skew = std::time::Duration::from_secs(MAX_CLOCK_SKEW_SECONDS);
    let fresh = Timestamp::from(now - skew) <= date && date <= Timestamp::from(now + skew);
    (!fresh).then(|| {
        s3s::S3Error::with_message(
            s3s::S3ErrorCode::RequestTimeTooSkewed,
            "The difference between the request time and the server's time is too large",
        )
    })
}

/// A fresh request id: 16 hex digits.
fn new_request_id() -> String {
    use rand::Rng;
    format!("{:016X}", rand::thread_rng().gen::<u64>())
}

/// The parameters every SigV4 presigned URL carries.
const PRESIGNED_PARAMETERS: [&str; 6] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Signature",
    "X-Amz-Date",
    "X-Amz-SignedHeaders",
    "X-Amz-Expires",
];

/// The refusal of a SigV4 presigned URL that lacks one of its parameters or whose credential
/// is not `KEY/DATE/REGION/SERVICE/aws4_request`: 400 AuthorizationQueryParametersError in
/// AWS's words, before anything else is judged.
fn incomplete_presigned(query: &str) -> Option<s3s::S3Error> {
    let names: Vec<&str> =
        query.split('&').map(|pair| pair.split_once('=').map_or(pair, |(k, _)| k)).collect();
    if !names.contains(&"X-Amz-Algorithm") && !names.contains(&"X-Amz-Credential") {
        return None;
    }
    let code = || s3s::S3ErrorCode::Custom("AuthorizationQueryParametersError".into());
    let refusal = |aws: &str, detail: String| {
        let mut error = aws_errors::worded(code(), aws, detail);
        error.set_status_code(http::StatusCode::BAD_REQUEST);
        Some(error)
    };
    if let Some(missing) = PRESIGNED_PARAMETERS.iter().find(|p| !names.contains(p)) {
        return refusal(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, \
             X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and \
             X-Amz-Expires parameters.",
            format!("this presigned URL has no {missing}"),
        );
    }
    let credential = query.split('&').find_map(|pair| pair.strip_prefix("X-Amz-Credential="))?;
    let credential = access::percent_decode(credential);
    let parts: Vec<&str> = credential.split('/').collect();
    if parts.len() != 5 || parts[4] != "aws4_request" || parts.iter().any(|p| p.is_empty()) {
        return refusal(
            "Error parsing the X-Amz-Credential parameter; the Credential is mal-formed; \
             expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".",
            format!("X-Amz-Credential has {} parts", parts.len()),
        );
    }
    None
}

/// The refusal of a presigned URL whose `X-Amz-Expires` S3 would not accept, if it is one.
fn bad_presigned_expiry(request: &http::Request<hyper::body::Incoming>) -> Option<s3s::S3Error> {
    let query = request.uri().query()?;
    if let Some(refusal) = incomplete_presigned(query) {
        return Some(refusal);
    }
    let value = query.split('&').find_map(|pair| pair.strip_prefix("X-Amz-Expires="))?;
    let message = match value.parse::<i64>() {
        Ok(seconds) if seconds < 0 => "X-Amz-Expires must be non-negative".to_string(),
        Ok(seconds) if seconds > MAX_PRESIGNED_SECONDS => format!(
            "X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGNED_SECONDS}"
        ),
        Ok(_) => return None,
        Err(_) => format!("X-Amz-Expires should be a number, not {value:?}"),
    };
    Some(s3s::S3Error::with_message(s3s::S3ErrorCode::AccessDenied, message))
}

/// Adds the request id to a response: its headers, and an error body's `<RequestId>`; and
/// words an error's message as AWS does ([`aws_errors`]).
fn name_request(response: &mut http::Response<s3s::Body>, request_id: &str) {
    if let Ok(value) = http::HeaderValue::from_str(request_id) {
        response.headers_mut().insert("x-amz-request-id", value.clone());
        response.headers_mut().insert("x-amz-id-2", value);
    }
    if response.status().as_u16() < 300 {
        return;
    }
    let Some(body) = response.body().bytes() else { return };
    // The message in AWS's words, weft's own kept as <Detail> (see aws_errors).
    let body = aws_errors::reword(&body).map_or(body, bytes::Bytes::from);
    let Some(at) = body.windows(8).rposition(|w| w == b"</Error>") else { return };
    let mut named = Vec::with_capacity(body.len() + 2 * request_id.len() + 40);
    named.extend_from_slice(&body[..at]);
    named.extend_from_slice(format!("<RequestId>{request_id}</RequestId>").as_bytes());
    named.extend_from_slice(format!("<HostId>{request_id}</HostId>").as_bytes());
    named.extend_from_slice(&body[at..]);
    if response.headers().contains_key(http::header::CONTENT_LENGTH) {
        response.headers_mut().insert(http::header::CONTENT_LENGTH, named.len().into());
    }
    *response.body_mut() = s3s::Body::from(bytes::Bytes::from(named));
}

/// Binds the listen address and serves S3 over meta at `config.meta_url` in the background.
pub async fn bind(config: GatewayConfig) -> Result<RunningGateway, GatewayError> {
    let mut client = weft_client::Client::new(&config.meta_url, &config.secret)
        .map_err(GatewayError::Client)?
        .with_degraded_cache(config.degraded_cache_bytes)
        .keeping_grants();
    if let Some(path) = &config.trace_reads {
        client = client.with_read_trace(path).map_err(GatewayError::Client)?;
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| GatewayError::Bind { listen: config.listen, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| GatewayError::Bind { listen: config.listen, source })?;
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    // Handshakes (with TLS) run in tasks of their own; connections come out ready.
    let mut listener = weft_auth::tls::Listener::start(
        listener,
        weft_auth::tls::Acceptor::new(config.tls.clone()),
    )
    .map_err(|source| GatewayError::Bind { listen: config.listen, source })?;
    let (service, cors, keys) = {
        let keys = keys::MetaAuth::new(client.meta.clone(), config.secret.seal_key());
        let gateway = Gateway::new(client.clone(), keys.clone())
            .with_tls(config.tls.is_some())
            .with_master_key(config.master_key.clone());
        let cors = gateway.cors().clone();
        let access = gateway.clone();
        let mut builder = s3s::service::S3ServiceBuilder::new(gateway);
        builder.set_auth(keys.clone());
        builder.set_access(access);
        (builder.build(), cors, keys)
    };
    // Signed payloads hashed once (see signed_payload); `WEFT_S3_HASH_ONCE=off` leaves
    // every request to s3s as it came.
    let hash_once = std::env::var("WEFT_S3_HASH_ONCE").map_or(true, |v| v != "off");
    // Object bytes read from local unit files go out with sendfile (see sendfile.rs).
    let sendfile = sendfile::enabled_by_environment();
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let http = ConnBuilder::new(TokioExecutor::new());
        loop {
            let socket = tokio::select! {
                accepted = listener.next() => match accepted {
                    Some((socket, _)) => socket,
                    None => break,
                },
                _ = stopped.changed() => break,
            };
            let (service, cors, keys) = (service.clone(), cors.clone(), keys.clone());
            let handler = hyper::service::service_fn(move |request| {
                let (service, cors, keys) = (service.clone(), cors.clone(), keys.clone());
                async move {
                    let request_id = new_request_id();
                    let http_error = |e: s3s::S3Error| s3s::HttpError::new(Box::new(e));
                    // A CORS preflight: answered here, unauthenticated (see the crate
                    // invariants); its body, if any, is never read.
                    if request.method() == http::Method::OPTIONS {
                        let mut response =
                            match cors.preflight(request.uri(), request.headers()).await {
                                Ok(response) => response,
                                Err(refusal) => refusal.to_http_response().map_err(http_error)?,
                            };
                        name_request(&mut response, &request_id);
                        if carries_body(&request) {
                            response.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                        return Ok::<_, s3s::HttpError>(response);
                    }
                    let asks_cors =
                        cors::RequestCors::of(request.method(), request.uri(), request.headers());
                    let refusal = bad_presigned_expiry(&request).or_else(|| stale_sigv2(&request));
                    if let Some(refusal) = refusal {
                        let mut response = refusal.to_http_response().map_err(http_error)?;
                        name_request(&mut response, &request_id);
                        if let Some(asks) = &asks_cors {
                            cors.decorate(asks, response.headers_mut()).await;
                        }
                        if !drained_small_body(request).await {
                            response.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                        return Ok::<_, s3s::HttpError>(response);
                    }
                    let mut request = request;
                    sigv2_bucket_root(&mut request);
                    join_repeated_metadata(request.headers_mut());
                    let close = empty_expecting_continue(&request);
                    let sends_body = sends_body(&request);
                    let attributes = asks_object_attributes(&request);
                    let form = is_form_upload(&request);
                    let head = request.method() == http::Method::HEAD;
                    let mut request = request.map(s3s::Body::from);
                    if form {
                        form::fill_filename(&mut request).await;
                    }
                    // A PUT body of no length is spooled and given one (see spool).
                    if let Err(error) = spool::give_length(&mut request, &keys).await {
                        let mut response = error.to_http_response().map_err(http_error)?;
                        name_request(&mut response, &request_id);
                        response.headers_mut().insert(
                            http::header::CONNECTION,
                            http::HeaderValue::from_static("close"),
                        );
                        return Ok::<_, s3s::HttpError>(response);
                    }
                    if hash_once {
                        signed_payload::take_over(&mut request, &keys).await;
                    }
                    let mut response = service.call(request).await?;
                    if head {
                        partial_head(&mut response);
                    }
                    if attributes {
                        unquote_attributes_etag(&mut response);
                    }
                    if form {
                        deny_failed_policy_conditions(&mut response);
                    }
                    name_request(&mut response, &request_id);
                    if let Some(asks) = &asks_cors {
                        cors.decorate(asks, response.headers_mut()).await;
                    }
                    // An upload refused before its body was read (a failed condition, a
                    // missing bucket) leaves the body on the connection: close it rather
                    // than let the client's next request be read from the middle of it.
                    if close || (sends_body && response.status().as_u16() >= 300) {
                        response.headers_mut().insert(
                            http::header::CONNECTION,
                            http::HeaderValue::from_static("close"),
                        );
                    }
                    Ok::<_, s3s::HttpError>(response)
                }
            });
            let socket = TokioIo::new(sendfile::Connection::new(socket, sendfile));
            let connection = http.serve_connection(socket, handler).into_owned();
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "connection ended with an error");
                }
            });
        }
    });
    Ok(RunningGateway { endpoint: format!("{scheme}://{local}"), stop, task })
}

/// A header map of (name, value) pairs, repeated names appended (for tests).
#[cfg(test)]
pub(crate) fn test_headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presigned_urls_carry_all_six_parameters_and_a_five_part_credential() {
        let full = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261203%2Fus-east-1\
                    %2Fs3%2Faws4_request&X-Amz-Date=20261203T000000Z&X-Amz-Expires=60&\
                    X-Amz-SignedHeaders=host&X-Amz-Signature=ab";
        assert!(incomplete_presigned(full).is_none());
        assert!(incomplete_presigned("versionId=1&uploads").is_none(), "not presigned");
        for name in PRESIGNED_PARAMETERS {
            let without: Vec<&str> =
                full.split('&').filter(|p| !p.starts_with(&format!("{name}="))).collect();
            let error = incomplete_presigned(&without.join("&")).expect(name);
            assert_eq!(error.code().as_str(), "AuthorizationQueryParametersError");
            assert_eq!(error.status_code(), Some(http::StatusCode::BAD_REQUEST));
        }
        let short = full.replace("%2Fs3%2Faws4_request", "%2Fs3");
        assert!(incomplete_presigned(&short).is_some());
    }

    #[test]
    fn repeated_metadata_headers_become_one_in_the_order_sent() {
        let mut headers = test_headers(&[
            ("x-amz-meta-key", "value-1"),
            ("X-Amz-Meta-Key", "value-2"),
            ("x-amz-meta-foo", "bar"),
            ("x-amz-meta-KEY", "value-3"),
            ("x-amz-acl", "private"),
            ("x-amz-acl", "twice stays twice"),
        ]);
        join_repeated_metadata(&mut headers);
        let all = |name: &str| -> Vec<&str> {
            headers.get_all(name).iter().map(|v| v.to_str().unwrap()).collect()
        };
        assert_eq!(all("x-amz-meta-key"), ["value-1,value-2,value-3"]);
        assert_eq!(all("x-amz-meta-foo"), ["bar"]);
        assert_eq!(all("x-amz-acl"), ["private", "twice stays twice"]);
    }

    #[test]
    fn object_attributes_etags_lose_their_quotes_and_nothing_else_changes() {
        let xml = "<GetObjectAttributesOutput><ETag>&quot;ab-2&quot;</ETag><ObjectSize>3\
                   </ObjectSize></GetObjectAttributesOutput>";
        assert_eq!(
            unquote_etags(xml),
            "<GetObjectAttributesOutput><ETag>ab-2</ETag><ObjectSize>3</ObjectSize>\
             </GetObjectAttributesOutput>"
        );
        assert_eq!(unquote_etags("<ETag>\"cd\"</ETag>"), "<ETag>cd</ETag>");
        assert_eq!(unquote_etags("<Key>\"q\"</Key>"), "<Key>\"q\"</Key>");
    }
}
