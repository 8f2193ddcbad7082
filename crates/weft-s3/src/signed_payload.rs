//! Signed payloads hashed once: a PUT whose `x-amz-content-sha256` is its body's SHA-256
//! has that SHA-256 checked and its MD5 (the ETag) computed in one pass
//! ([`crate::md5_sha256`]), instead of s3s hashing the SHA-256 and the gateway the MD5.
//!
//! How: before s3s sees the request, [`take_over`] checks its SigV4 signature itself (with
//! the access key's secret, as s3s would). When it holds, the request is re-signed with
//! the same key as `UNSIGNED-PAYLOAD`, so s3s still checks a signature of every header,
//! and the body is wrapped in [`HashedBody`], which enforces the SHA-256 the client signed.
//! The MD5 reaches the writer through the request's extensions ([`PayloadMd5`]).
//!
//! Invariants:
//! - A request is re-signed only after its own signature verified with its access key's
//!   secret: a request that does not verify here passes to s3s unchanged (s3s refuses it or
//!   checks it its own way). The fast path never accepts what s3s would refuse, and a
//!   request it cannot parse exactly loses only speed.
//! - A taken-over body yields its last bytes only after its SHA-256 equals the signed one;
//!   otherwise it ends with an error ([`PAYLOAD_MISMATCH`]) instead of them, as s3s's own
//!   check does, so the writer never commits an object whose bytes were not signed.
//! - [`PayloadMd5`] is set, once, before the last bytes are yielded: a reader that has seen
//!   the whole body finds the MD5 of exactly those bytes.
//! - Taken over: PUTs of at least [`TAKE_OVER_MIN_BYTES`] over HTTP/1 signed in the
//!   Authorization header (not presigned, not aws-chunked) whose query is plain
//!   (unreserved characters only). The rest goes to s3s as it came.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use s3s::auth::S3Auth;
use s3s::stream::{ByteStream, DynByteStream, RemainingLength};

use crate::md5_lanes;
use crate::md5_sha256::Md5Sha256;
use crate::sigv4::{self, Authorization};

/// Smaller bodies go to s3s as they came (the re-signing costs a few HMACs).
pub const TAKE_OVER_MIN_BYTES: u64 = 64 << 10;

/// What a taken-over body ends with when its SHA-256 is not the one it was signed with.
pub const PAYLOAD_MISMATCH: &str =
    "the body's SHA-256 is not the x-amz-content-sha256 the request was signed with";

/// The MD5 of a taken-over body, set when the body has been read to its end.
#[derive(Debug, Clone, Default)]
pub struct PayloadMd5(Arc<OnceLock<[u8; 16]>>);

impl PayloadMd5 {
    /// The MD5, once the whole body was read and its SHA-256 matched.
    pub fn get(&self) -> Option<[u8; 16]> {
        self.0.get().copied()
    }
}

/// What [`take_over`] needs of a request, read before anything changes.
struct Signed {
    authorization: String,
    amz_date: String,
    payload_sha256: [u8; 32],
    payload_hex: String,
    length: u64,
    query: String,
    /// The canonical URI as sent, then as s3s's decode-and-encode makes it.
    uris: Vec<String>,
}

/// The one value of header `name`; None when absent, repeated or not text.
fn single<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    values.next().is_none().then_some(())?;
    value.to_str().ok()
}

/// The canonical query of a plain query string (unreserved characters, `=` and `&` only),
/// sorted by name as s3s does; None for any other (and for presigned fields).
fn plain_query(query: &str) -> Option<String> {
    if query.is_empty() {
        return Some(String::new());
    }
    let mut pairs = Vec::new();
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let plain = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
        if name.is_empty() || !plain(name) || !plain(value) {
            return None;
        }
        if name.len() >= 6 && name[..6].eq_ignore_ascii_case("x-amz-") {
            return None;
        }
        pairs.push((name, value));
    }
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    Some(pairs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("&"))
}

fn signed(request: &http::Request<s3s::Body>) -> Option<Signed> {
    if request.method() != http::Method::PUT
        || !matches!(request.version(), http::Version::HTTP_11 | http::Version::HTTP_10)
    {
        return None;
    }
    let headers = request.headers();
    if headers.contains_key(http::header::TRANSFER_ENCODING)
        || headers.contains_key("x-amz-decoded-content-length")
    {
        return None;
    }
    let authorization = single(headers, "authorization")?;
    let auth = Authorization::parse(authorization)?;
    let payload_hex = single(headers, "x-amz-content-sha256")?;
    let is_lower_hex = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
    if payload_hex.len() != 64 || !payload_hex.bytes().all(is_lower_hex) {
        return None;
    }
    let payload_sha256: [u8; 32] = hex::decode(payload_hex).ok()?.try_into().ok()?;
    let length: u64 = single(headers, "content-length")?.parse().ok()?;
    let amz_date = single(headers, "x-amz-date")?;
    let date_shaped = amz_date.len() == 16
        && amz_date.bytes().enumerate().all(|(i, b)| match i {
            8 => b == b'T',
            15 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    if length < TAKE_OVER_MIN_BYTES || !date_shaped || amz_date[..8] != *auth.day {
        return None;
    }
    let query = plain_query(request.uri().query().unwrap_or(""))?;
    let raw = request.uri().path();
    let mut encoded = String::with_capacity(raw.len());
    sigv4::uri_encode(&mut encoded, &sigv4::percent_decode(raw)?, false);
    let mut uris = vec![raw.to_owned()];
    if encoded != raw {
        uris.push(encoded);
    }
    Some(Signed {
        authorization: authorization.to_owned(),
        amz_date: amz_date.to_owned(),
        payload_sha256,
        payload_hex: payload_hex.to_owned(),
        length,
        query,
        uris,
    })
}

/// Whether `request`'s SigV4 `Authorization` header signature holds for its headers, path,
/// query and the payload hash it declares (the body is not read: this is what may be
/// checked before the body is). False for presigned, SigV2 and unsigned requests, and for a
/// query that is not plain (the full check is then s3s's, after the body).
pub async fn header_signature_holds<A: S3Auth + ?Sized>(
    request: &http::Request<s3s::Body>,
    auth: &A,
) -> bool {
    let headers = request.headers();
    let (Some(authorization), Some(payload), Some(amz_date)) = (
        single(headers, "authorization"),
        single(headers, "x-amz-content-sha256"),
        single(headers, "x-amz-date"),
    ) else {
        return false;
    };
    let Some(fields) = Authorization::parse(authorization) else { return false };
    let Some(query) = plain_query(request.uri().query().unwrap_or("")) else { return false };
    let Some(decoded) = sigv4::percent_decode(request.uri().path()) else { return false };
    let Ok(secret) = auth.get_secret_key(fields.access_key).await else { return false };
    let key = sigv4::signing_key(secret.expose(), fields.day, fields.region, fields.service);
    let raw = request.uri().path().to_owned();
    let mut encoded = String::with_capacity(raw.len());
    sigv4::uri_encode(&mut encoded, &decoded, false);
    [raw, encoded].iter().any(|uri| {
        let method = request.method().as_str();
        let canonical =
            sigv4::canonical_request(method, uri, &query, headers, fields.signed_headers, payload);
        canonical.is_some_and(|c| {
            let ours = sigv4::signature(&key, amz_date, fields.scope(), &c);
            sigv4::same_signature(&ours, fields.signature)
        })
    })
}

/// Takes a signed-payload PUT over (see the module header): verifies its signature,
/// re-signs it as `UNSIGNED-PAYLOAD`, wraps its body in [`HashedBody`] and adds a
/// [`PayloadMd5`] to its extensions. Whether it did; a request it did not take is as it
/// came.
pub async fn take_over<A: S3Auth + ?Sized>(
    request: &mut http::Request<s3s::Body>,
    auth: &A,
) -> bool {
    take_over_hashing(request, auth, Hashing::chosen).await
}

/// [`take_over`], the body hashed where `hashing` says.
async fn take_over_hashing<A: S3Auth + ?Sized>(
    request: &mut http::Request<s3s::Body>,
    auth: &A,
    hashing: impl FnOnce() -> Hashing,
) -> bool {
    let Some(signed) = signed(request) else { return false };
    let Some(fields) = Authorization::parse(&signed.authorization) else { return false };
    let Ok(secret) = auth.get_secret_key(fields.access_key).await else { return false };
    let key = sigv4::signing_key(secret.expose(), fields.day, fields.region, fields.service);
    let method = request.method().as_str().to_owned();
    let canonical = |headers: &http::HeaderMap, uri: &str, payload: &str| {
        sigv4::canonical_request(
            &method,
            uri,
            &signed.query,
            headers,
            fields.signed_headers,
            payload,
        )
    };
    let verified = signed.uris.iter().find(|uri| {
        canonical(request.headers(), uri, &signed.payload_hex).is_some_and(|c| {
            let ours = sigv4::signature(&key, &signed.amz_date, fields.scope(), &c);
            sigv4::same_signature(&ours, fields.signature)
        })
    });
    let Some(uri) = verified else { return false };
    let mut headers = request.headers().clone();
    headers.insert("x-amz-content-sha256", http::HeaderValue::from_static(sigv4::UNSIGNED_PAYLOAD));
    let Some(unsigned) = canonical(&headers, uri, sigv4::UNSIGNED_PAYLOAD) else { return false };
    let resigned =
        fields.with_signature(&sigv4::signature(&key, &signed.amz_date, fields.scope(), &unsigned));
    let Ok(resigned) = http::HeaderValue::from_str(&resigned) else { return false };
    headers.insert(http::header::AUTHORIZATION, resigned);
    *request.headers_mut() = headers;
    let md5 = PayloadMd5::default();
    let body = HashedBody::new(
        std::mem::take(request.body_mut()),
        hashing(),
        signed.payload_sha256,
        signed.length,
        md5.clone(),
    );
    *request.body_mut() = s3s::Body::from(Box::pin(body) as DynByteStream);
    request.extensions_mut().insert(md5);
    true
}

/// Why a taken-over body failed.
#[derive(Debug)]
struct BodyError(String);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BodyError {}

/// Taken-over bodies not yet ended or dropped (see [`Hashing::chosen`]).
static BODIES_OPEN: AtomicUsize = AtomicUsize::new(0);

/// When (ms since the first body) two or more taken-over bodies were last open at once.
static LAST_CONCURRENT_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// How long bodies keep going to the lanes after the last time two were open at once:
/// concurrent clients that finish their bodies together must not start the next ones alone.
const CONCURRENT_FOR_MS: u64 = 2_000;

/// Milliseconds since the first taken-over body (a monotonic clock for the above).
fn clock_ms() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Where a body's MD5 and SHA-256 are computed.
#[derive(Debug)]
pub enum Hashing {
    /// In the body's own task, as its chunks pass ([`Md5Sha256`], both hashes in one loop).
    Inline(Option<Md5Sha256>),
    /// On the hashing thread, in lanes with other bodies ([`crate::md5_lanes`]).
    Lanes(md5_lanes::Handle),
}

impl Hashing {
    /// Lanes where the CPU runs them and another taken-over body is open, or two were
    /// open at once within [`CONCURRENT_FOR_MS`] (so there is someone to share them with);
    /// else inline, where one body alone hashes fastest.
    pub fn chosen() -> Hashing {
        let now = clock_ms();
        let recently = LAST_CONCURRENT_MS
            .load(Ordering::Relaxed)
            .checked_add(CONCURRENT_FOR_MS)
            .is_some_and(|until| now <= until);
        if md5_lanes::available() && (BODIES_OPEN.load(Ordering::Relaxed) > 0 || recently) {
            Hashing::Lanes(md5_lanes::Handle::new())
        } else {
            Hashing::Inline(Some(Md5Sha256::new()))
        }
    }
}

/// A body whose MD5 and SHA-256 are computed as it passes; it fails instead of yielding its
/// last bytes when the SHA-256 is not `expected` (see the module invariants).
#[derive(Debug)]
pub struct HashedBody {
    inner: s3s::Body,
    hashing: Hashing,
    expected: [u8; 32],
    /// Bytes still to come (the Content-Length less what passed).
    remaining: u64,
    md5: PayloadMd5,
    /// The last chunk, held until its lanes answer the digests.
    last: Option<Bytes>,
    /// Ended, or failed: nothing more is read.
    done: bool,
    /// Counted in [`BODIES_OPEN`] (until done or dropped).
    open: bool,
}

impl HashedBody {
    pub fn new(
        inner: s3s::Body,
        hashing: Hashing,
        expected: [u8; 32],
        length: u64,
        md5: PayloadMd5,
    ) -> HashedBody {
        if BODIES_OPEN.fetch_add(1, Ordering::Relaxed) >= 1 {
            LAST_CONCURRENT_MS.store(clock_ms(), Ordering::Relaxed);
        }
        HashedBody {
            inner,
            hashing,
            expected,
            remaining: length,
            md5,
            last: None,
            done: false,
            open: true,
        }
    }

    fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            BODIES_OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn fail(&mut self, reason: String) -> Poll<Option<Result<Bytes, s3s::StdError>>> {
        self.done = true;
        self.close();
        Poll::Ready(Some(Err(Box::new(BodyError(reason)))))
    }

    /// Both digests are in: the last bytes go out only if the SHA-256 is the signed one.
    fn ended(
        &mut self,
        (md5, sha256): ([u8; 16], [u8; 32]),
        last: Bytes,
    ) -> Poll<Option<Result<Bytes, s3s::StdError>>> {
        self.close();
        if sha256 != self.expected {
            return self.fail(PAYLOAD_MISMATCH.to_owned());
        }
        let _ = self.md5.0.set(md5);
        Poll::Ready(Some(Ok(last)))
    }
}

impl Drop for HashedBody {
    fn drop(&mut self) {
        self.close();
    }
}

impl Stream for HashedBody {
    type Item = Result<Bytes, s3s::StdError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Hashing::Lanes(handle) = &this.hashing {
                if this.last.is_some() {
                    let digests = std::task::ready!(handle.poll_digests(cx));
                    let last = this.last.take().expect("held just above");
                    return this.ended(digests, last);
                }
                std::task::ready!(handle.poll_lag(cx));
            }
            let chunk = match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) if this.remaining == 0 => {
                    this.done = true;
                    this.close();
                    return Poll::Ready(None);
                }
                Poll::Ready(None) => {
                    let left = this.remaining;
                    return this.fail(format!("the body ended {left} bytes short of its length"));
                }
                Poll::Ready(Some(Err(error))) => return this.fail(error.to_string()),
                Poll::Ready(Some(Ok(chunk))) => chunk,
            };
            if chunk.is_empty() {
                continue;
            }
            if chunk.len() as u64 > this.remaining || this.last.is_some() {
                return this.fail("the body is longer than its Content-Length".to_owned());
            }
            this.remaining -= chunk.len() as u64;
            let last = this.remaining == 0;
            match &mut this.hashing {
                Hashing::Inline(hasher) => {
                    let Some(hashing) = hasher.as_mut() else {
                        return this.fail("the body is longer than its Content-Length".to_owned());
                    };
                    hashing.update(&chunk);
                    if last {
                        let digests = hasher.take().expect("hashing until the end").finalize();
                        return this.ended(digests, chunk);
                    }
                }
                Hashing::Lanes(handle) => {
                    handle.give(chunk.clone(), last);
                    if last {
                        this.last = Some(chunk);
                        continue;
                    }
                }
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
    }
}

impl ByteStream for HashedBody {
    fn remaining_length(&self) -> RemainingLength {
        RemainingLength::new_exact(usize::try_from(self.remaining).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    const ACCESS: &str = "AKWEFTTEST";
    const SECRET: &str = "secret-of-the-test-key";
    const DATE: &str = "20261129T010203Z";

    /// A PUT of `body` to `path?query`, signed as an SDK signs it (with `declared` as its
    /// payload hash) with `secret`.
    fn signed_put(
        path_and_query: &str,
        body: &[u8],
        declared: &str,
        secret: &str,
    ) -> http::Request<s3s::Body> {
        let mut request = http::Request::builder()
            .method("PUT")
            .uri(path_and_query)
            .header("host", "127.0.0.1:9000")
            .header("content-length", body.len())
            .header("x-amz-content-sha256", declared)
            .header("x-amz-date", DATE)
            .header("x-amz-meta-note", "  two   words ")
            .body(s3s::Body::from(Bytes::copy_from_slice(body)))
            .unwrap();
        let signed_headers = "host;x-amz-content-sha256;x-amz-date;x-amz-meta-note";
        let uri = request.uri().clone();
        let query = spec_query(uri.query().unwrap_or(""));
        let canonical = sigv4::canonical_request(
            "PUT",
            uri.path(),
            &query,
            request.headers(),
            signed_headers,
            declared,
        )
        .unwrap();
        let scope = "20261129/us-east-1/s3/aws4_request";
        let key = sigv4::signing_key(secret, "20261129", "us-east-1", "s3");
        let header = format!(
            "AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, SignedHeaders={signed_headers}, \
             Signature={}",
            sigv4::signature(&key, DATE, scope, &canonical)
        );
        request.headers_mut().insert("authorization", header.parse().unwrap());
        request
    }

    /// The canonical query of the specification, for any query.
    fn spec_query(query: &str) -> String {
        let mut pairs: Vec<(String, String)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let encode = |text: &str| {
                    let mut out = String::new();
                    sigv4::uri_encode(&mut out, &sigv4::percent_decode(text).unwrap(), true);
                    out
                };
                (encode(name), encode(value))
            })
            .collect();
        pairs.sort();
        pairs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("&")
    }

    fn body(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2]).collect()
    }

    /// Every chunk of the body, then the error it ended with, if any.
    async fn drain(request: &mut http::Request<s3s::Body>) -> (Vec<u8>, Option<String>) {
        let mut bytes = Vec::new();
        let body = request.body_mut();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(error) => return (bytes, Some(error.to_string())),
            }
        }
        (bytes, None)
    }

    /// How a test makes a body's hashing.
    type Choice = (&'static str, fn() -> Hashing);

    /// Both ways of hashing a body this CPU has: inline, and in lanes.
    fn hashings() -> Vec<Choice> {
        let mut hashings: Vec<Choice> =
            vec![("inline", || Hashing::Inline(Some(Md5Sha256::new())))];
        if md5_lanes::available() {
            hashings.push(("lanes", || Hashing::Lanes(md5_lanes::Handle::new())));
        }
        hashings
    }

    #[tokio::test]
    async fn a_verified_put_is_resigned_unsigned_and_its_body_hashed_once() {
        let auth = s3s::auth::SimpleAuth::from_single(ACCESS, SECRET);
        let data = body(300_000);
        let declared = hex::encode(crate::md5_sha256::sha256(&data));
        for ((how, hashing), target) in hashings().into_iter().flat_map(|h| {
            ["/bucket/plain-key", "/bucket/a%20key/%C3%BC", "/b/k?partNumber=2&uploadId=u-1"]
                .map(|target| (h, target))
        }) {
            let mut request = signed_put(target, &data, &declared, SECRET);
            assert!(take_over_hashing(&mut request, &auth, hashing).await, "{target} {how}");
            let headers = request.headers();
            assert_eq!(headers["x-amz-content-sha256"], sigv4::UNSIGNED_PAYLOAD);
            // The new signature is that of the unsigned canonical request.
            let header = headers["authorization"].to_str().unwrap();
            let fields = Authorization::parse(header).unwrap();
            let query = plain_query(request.uri().query().unwrap_or("")).unwrap();
            let canonical = sigv4::canonical_request(
                "PUT",
                request.uri().path(),
                &query,
                headers,
                fields.signed_headers,
                sigv4::UNSIGNED_PAYLOAD,
            )
            .unwrap();
            let key = sigv4::signing_key(SECRET, "20261129", "us-east-1", "s3");
            let expected = sigv4::signature(&key, DATE, fields.scope(), &canonical);
            assert!(sigv4::same_signature(fields.signature, &expected), "{target}");
            let md5 = request.extensions().get::<PayloadMd5>().unwrap().clone();
            assert_eq!(md5.get(), None, "no MD5 before the body is read");
            let (bytes, error) = drain(&mut request).await;
            assert_eq!(error, None);
            assert_eq!(bytes, data);
            assert_eq!(md5.get(), Some(crate::md5::digest(&data)));
        }
    }

    #[tokio::test]
    async fn a_body_that_is_not_the_signed_one_fails_before_its_last_bytes() {
        let auth = s3s::auth::SimpleAuth::from_single(ACCESS, SECRET);
        let data = body(200_000);
        let mut other = data.clone();
        other[199_999] ^= 1;
        for (how, hashing) in hashings() {
            let declared = hex::encode(crate::md5_sha256::sha256(&other));
            let mut request = signed_put("/bucket/key", &data, &declared, SECRET);
            assert!(take_over_hashing(&mut request, &auth, hashing).await, "signature good, {how}");
            let md5 = request.extensions().get::<PayloadMd5>().unwrap().clone();
            let (bytes, error) = drain(&mut request).await;
            assert_eq!(error.as_deref(), Some(PAYLOAD_MISMATCH), "{how}");
            assert!(bytes.len() < data.len(), "the last bytes were held back ({how})");
            assert_eq!(md5.get(), None, "{how}");
            // Chunk by chunk, the last bytes are held back too.
            let chunks =
                data.chunks(7_000).map(|c| Ok::<_, s3s::StdError>(Bytes::copy_from_slice(c)));
            let inner = futures_util::stream::iter(chunks.collect::<Vec<_>>());
            let mut request = signed_put("/bucket/key", &data, &declared, SECRET);
            *request.body_mut() = s3s::Body::from(Box::pin(HashedBody::new(
                s3s::Body::from(Box::pin(Wrapped(Box::pin(inner))) as DynByteStream),
                hashing(),
                crate::md5_sha256::sha256(&other),
                data.len() as u64,
                PayloadMd5::default(),
            )) as DynByteStream);
            let (bytes, error) = drain(&mut request).await;
            assert_eq!(error.as_deref(), Some(PAYLOAD_MISMATCH), "{how}, in chunks");
            assert_eq!(bytes[..], data[..data.len() - data.len() % 7_000], "{how}, in chunks");
            // A body shorter than its Content-Length fails too.
            let declared = hex::encode(crate::md5_sha256::sha256(&data));
            let mut request = signed_put("/bucket/key", &data, &declared, SECRET);
            assert!(take_over_hashing(&mut request, &auth, hashing).await);
            let short = std::mem::take(request.body_mut());
            let short =
                futures_util::stream::iter([Ok::<_, s3s::StdError>(Bytes::from_static(b"x"))])
                    .chain(short.take(0));
            *request.body_mut() = s3s::Body::from(Box::pin(HashedBody::new(
                s3s::Body::from(Box::pin(Wrapped(Box::pin(short))) as DynByteStream),
                hashing(),
                [0; 32],
                5,
                PayloadMd5::default(),
            )) as DynByteStream);
            let (bytes, error) = drain(&mut request).await;
            assert_eq!(bytes, b"x", "{how}");
            assert!(error.unwrap().contains("4 bytes short"), "{how}");
        }
    }

    /// A plain stream as an s3s byte stream.
    struct Wrapped(Pin<Box<dyn Stream<Item = Result<Bytes, s3s::StdError>> + Send + Sync>>);

    impl Stream for Wrapped {
        type Item = Result<Bytes, s3s::StdError>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.as_mut().poll_next(cx)
        }
    }

    impl ByteStream for Wrapped {}

    #[tokio::test]
    async fn requests_it_cannot_verify_go_to_s3s_as_they_came() {
        let auth = s3s::auth::SimpleAuth::from_single(ACCESS, SECRET);
        let data = body(100_000);
        let declared = hex::encode(crate::md5_sha256::sha256(&data));
        let small = body(1000);
        let small_declared = hex::encode(crate::md5_sha256::sha256(&small));
        let cases: Vec<(&str, http::Request<s3s::Body>)> = vec![
            ("another secret", signed_put("/b/k", &data, &declared, "not-the-secret")),
            ("a small body", signed_put("/b/k", &small, &small_declared, SECRET)),
            ("unsigned", signed_put("/b/k", &data, sigv4::UNSIGNED_PAYLOAD, SECRET)),
            ("upper-case hash", signed_put("/b/k", &data, &declared.to_uppercase(), SECRET)),
            ("presigned field", signed_put("/b/k?X-Amz-Expires=5", &data, &declared, SECRET)),
            ("an escaped query", signed_put("/b/k?tagging=a%20b", &data, &declared, SECRET)),
            ("a tampered header", {
                let mut r = signed_put("/b/k", &data, &declared, SECRET);
                r.headers_mut().insert("x-amz-meta-note", "changed".parse().unwrap());
                r
            }),
            ("a second date", {
                let mut r = signed_put("/b/k", &data, &declared, SECRET);
                r.headers_mut().append("x-amz-date", DATE.parse().unwrap());
                r
            }),
            ("a POST", {
                let mut r = signed_put("/b/k", &data, &declared, SECRET);
                *r.method_mut() = http::Method::POST;
                r
            }),
        ];
        for (case, mut request) in cases {
            let before = request.headers().clone();
            assert!(!take_over(&mut request, &auth).await, "{case}");
            assert_eq!(request.headers(), &before, "{case}");
            assert!(request.extensions().get::<PayloadMd5>().is_none(), "{case}");
            let (bytes, error) = drain(&mut request).await;
            assert_eq!(error, None, "{case}");
            assert!(bytes == data || bytes == small, "{case}: the body is untouched");
        }
    }
}
