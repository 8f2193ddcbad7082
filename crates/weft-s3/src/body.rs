//! Streaming between S3 bodies and weft-client: a request body feeds `put_reader` through a
//! bounded channel read on the writer's blocking thread.
//!
//! Invariants:
//! - At most [`BODY_CHUNKS_IN_FLIGHT`] body chunks wait between the socket and the writer:
//!   a 5 GiB upload never sits in memory, the writer's pace pulls the socket.
//! - The last chunk is held back until the whole body has been counted and hashed: a body
//!   shorter or longer than its Content-Length, or whose MD5 is not its Content-MD5, reaches
//!   the writer as an error instead of its last bytes, so the object is never committed.
//! - The attributes the commit carries are complete (their ETag is the body's MD5 unless
//!   fixed) before the last chunk reaches the writer, so the writer's commit finds them.
//! - A body that fails or ends early (the client went away) aborts the write at once: the
//!   writer gets an error instead of the rest, and aborts its write in meta before it
//!   returns, whether or not anyone still waits for the answer.
//! - A body of at least [`PARALLEL_MD5_MIN_BYTES`] is MD5-hashed on a blocking thread of its
//!   own ([`BodyMd5`]), fed the same chunks in order, while the receiving task checks the
//!   payload's SHA-256 (s3s, for signed payloads): the two hashes of one upload run on two
//!   cores. At most [`MD5_CHUNKS_IN_FLIGHT`] chunks wait for it; the last chunk still waits
//!   for its digest.
//! - A body taken over by [`crate::signed_payload`] is not hashed here: its MD5 was computed
//!   with its SHA-256 as it passed ([`BodyChecks::upstream_md5`]), and is set before the
//!   body's end is seen, so the last chunk waits for nothing more.

use std::io::Read;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use s3s::{s3_error, S3Error, S3Result};
use tokio::sync::mpsc;
use weft_client::{Client, PutOptions, PutStats};

use crate::{
    attributes::Attributes,
    checksum::{Algorithm, Hasher, Requested, Stored},
    gateway::s3_error_of,
    md5::Md5,
    signed_payload::PayloadMd5,
    signed_payload::PAYLOAD_MISMATCH,
    sse::{self, Sealer, SegmentKey},
};

/// Body chunks buffered between the socket and the writer.
pub const BODY_CHUNKS_IN_FLIGHT: usize = 16;

/// Bodies from this size on are hashed beside the receiving task, not in it.
pub const PARALLEL_MD5_MIN_BYTES: u64 = 1 << 20;

/// Body chunks waiting for the MD5 thread: it shares them (`Bytes`) with the writer's
/// channel, so this bounds only how far the hash may lag.
pub const MD5_CHUNKS_IN_FLIGHT: usize = 32;

/// The MD5 of a body received chunk by chunk, and its flexible checksum when the request
/// asks for one ([`crate::checksum`]): inline for a small body, else on a blocking thread
/// fed the chunks through a bounded channel, both hashes in one pass over each chunk.
enum BodyMd5 {
    Inline(Md5, Option<Hasher>),
    /// Computed as the body passed, where its signed SHA-256 was checked
    /// ([`crate::signed_payload`]); the checksum, if any, inline.
    Upstream(PayloadMd5, Option<Hasher>),
    Beside {
        chunks: mpsc::Sender<Bytes>,
        hashed: tokio::task::JoinHandle<([u8; 16], Option<Vec<u8>>)>,
    },
}

impl BodyMd5 {
    fn new(size: u64, upstream: Option<PayloadMd5>, checksum: Option<Algorithm>) -> BodyMd5 {
        let mut hasher = checksum.map(Hasher::new);
        if let Some(upstream) = upstream {
            return BodyMd5::Upstream(upstream, hasher);
        }
        if size < PARALLEL_MD5_MIN_BYTES {
            return BodyMd5::Inline(Md5::new(), hasher);
        }
        let (chunks, mut rx) = mpsc::channel::<Bytes>(MD5_CHUNKS_IN_FLIGHT);
        let hashed = tokio::task::spawn_blocking(move || {
            let mut md5 = Md5::new();
            while let Some(chunk) = rx.blocking_recv() {
                md5.update(&chunk);
                if let Some(hasher) = &mut hasher {
                    hasher.update(&chunk);
                }
            }
            (md5.finalize(), hasher.map(Hasher::finalize))
        });
        BodyMd5::Beside { chunks, hashed }
    }

    async fn update(&mut self, chunk: &Bytes) -> S3Result<()> {
        match self {
            BodyMd5::Inline(md5, hasher) => {
                md5.update(chunk);
                if let Some(hasher) = hasher {
                    hasher.update(chunk);
                }
            }
            BodyMd5::Upstream(_, hasher) => {
                if let Some(hasher) = hasher {
                    hasher.update(chunk);
                }
            }
            BodyMd5::Beside { chunks, .. } => chunks
                .send(chunk.clone())
                .await
                .map_err(|_| s3_error!(InternalError, "the MD5 thread stopped"))?,
        }
        Ok(())
    }

    /// The digests of every chunk given: the MD5 and the checksum asked for.
    async fn finish(self) -> S3Result<([u8; 16], Option<Vec<u8>>)> {
        match self {
            BodyMd5::Inline(md5, hasher) => Ok((md5.finalize(), hasher.map(Hasher::finalize))),
            BodyMd5::Upstream(md5, hasher) => {
                let md5 = md5
                    .get()
                    .ok_or_else(|| s3_error!(InternalError, "the body's MD5 was not computed"))?;
                Ok((md5, hasher.map(Hasher::finalize)))
            }
            BodyMd5::Beside { chunks, hashed } => {
                drop(chunks);
                hashed.await.map_err(|e| s3_error!(InternalError, "the MD5 thread failed: {e}"))
            }
        }
    }
}

/// A `Read` over chunks sent from the async side; blocks (it runs on the writer's
/// blocking thread), and fails when the sender sends an error.
struct ChannelReader {
    chunks: mpsc::Receiver<Result<Bytes, String>>,
    current: Bytes,
    /// Seals the body as it is read (SSE): the writer reads packages, not the body.
    sealer: Option<Sealer>,
    /// Whether the sender closed the channel without an error (the body passed its checks).
    ended: bool,
}

impl ChannelReader {
    fn new(chunks: mpsc::Receiver<Result<Bytes, String>>, sealer: Option<Sealer>) -> Self {
        ChannelReader { chunks, current: Bytes::new(), sealer, ended: false }
    }

    /// [`Read::read`] of a sealed body. The last package is sealed only once the sender
    /// closed the channel cleanly, after every check of the body passed (an empty body's
    /// only package has no bytes to hold back).
    fn read_sealed(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let sealer = self.sealer.as_mut().expect("a sealed read has a sealer");
        loop {
            let n = sealer.give(buf, self.ended);
            if n > 0 || sealer.done() {
                return Ok(n);
            }
            if sealer.wanted() > 0 && !self.current.is_empty() {
                let took = sealer.take(&self.current);
                let _ = self.current.split_to(took);
                continue;
            }
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) if sealer.wanted() > 0 => self.current = chunk,
                Some(Ok(chunk)) if chunk.is_empty() => {}
                Some(Ok(_)) => {
                    return Err(std::io::Error::other("the body is longer than its size"))
                }
                Some(Err(reason)) => return Err(std::io::Error::other(reason)),
                None if sealer.wanted() > 0 => return Ok(0),
                None => self.ended = true,
            }
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.sealer.is_some() {
            return self.read_sealed(buf);
        }
        loop {
            if !self.current.is_empty() {
                let n = buf.len().min(self.current.len());
                buf[..n].copy_from_slice(&self.current.split_to(n));
                return Ok(n);
            }
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(reason)) => return Err(std::io::Error::other(reason)),
                None => return Ok(0),
            }
        }
    }
}

/// What a streamed put wrote: the writer's stats, the MD5 of the bytes and their checksum
/// (when the request asked for one).
#[derive(Debug)]
pub struct Streamed {
    pub stats: PutStats,
    pub md5: [u8; 16],
    pub checksum: Option<Stored>,
}

/// The S3 attributes a streamed put commits with its object.
#[derive(Debug, Clone)]
pub struct CommitAttributes {
    pub attributes: Attributes,
    /// The ETag to keep (a copy of a multipart object, a completed upload); else the MD5
    /// of the body.
    pub etag: Option<String>,
}

impl CommitAttributes {
    /// The commit's JSON once the body hashed to `md5` and `checksum` (which replaces any
    /// the attributes had: it is the one of these bytes).
    fn complete(&self, md5: &[u8; 16], checksum: Option<&Stored>) -> serde_json::Value {
        let etag = self.etag.clone().unwrap_or_else(|| hex::encode(md5));
        let checksum = checksum.cloned().or_else(|| self.attributes.checksum.clone());
        Attributes { etag, checksum, ..self.attributes.clone() }.to_commit()
    }
}

/// What a body is checked against besides its length, and where its MD5 comes from.
#[derive(Debug, Clone, Default)]
pub struct BodyChecks {
    /// The request's Content-MD5.
    pub content_md5: Option<[u8; 16]>,
    /// The MD5 the signed-payload check computes as the body passes (a request taken over
    /// by [`crate::signed_payload`]); None: [`put_stream`] hashes the body itself.
    pub upstream_md5: Option<PayloadMd5>,
    /// The flexible checksum the request asks for, checked when it carries a value.
    pub checksum: Option<Requested>,
}

impl BodyChecks {
    /// The checks of a request with Content-MD5 `header` (see [`content_md5`]),
    /// `extensions` and (an `aws-chunked` body's) `trailing` headers.
    pub fn of_request(
        header: Option<&str>,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        trailing: Option<s3s::TrailingHeaders>,
    ) -> S3Result<BodyChecks> {
        Ok(BodyChecks {
            content_md5: content_md5(header, headers)?,
            upstream_md5: extensions.get::<PayloadMd5>().cloned(),
            checksum: Requested::of_request(headers, trailing)?,
        })
    }
}

/// The refusal of a body that failed while read.
fn body_refusal(error: &impl std::fmt::Display) -> S3Error {
    let reason = error.to_string();
    // Ours (a request taken over by signed_payload) or s3s's own check's.
    if reason == PAYLOAD_MISMATCH || reason.ends_with("Sha256Mismatch") {
        let mut error = S3Error::with_message(
            s3s::S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            reason,
        );
        error.set_status_code(http::StatusCode::BAD_REQUEST);
        return error;
    }
    // A signed chunk or trailer (aws-chunked) whose signature does not hold: S3's 403.
    if reason.ends_with("SignatureMismatch") {
        return s3_error!(
            SignatureDoesNotMatch,
            "a chunk or trailer signature of the body does not hold: {reason}"
        );
    }
    s3_error!(IncompleteBody, "reading the body failed: {reason}")
}

/// Writes exactly `size` bytes of `body` as (bucket, key), checking `checks` (the request's
/// Content-MD5) before the write can commit, and committing `attributes` with it.
#[allow(clippy::too_many_arguments)]
pub async fn put_stream<S, E>(
    client: &Client,
    bucket: &str,
    key: &str,
    size: u64,
    mut body: S,
    mut options: PutOptions,
    checks: BodyChecks,
    attributes: Option<CommitAttributes>,
    sealing: Option<SegmentKey>,
) -> S3Result<Streamed>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let expected_md5 = checks.content_md5;
    // A sealed body is stored as its packages (see `sse`); size stays the body's.
    let stored_size = sealing.as_ref().map_or(size, |_| sse::sealed_size(size));
    let slot: Option<weft_client::AttributesSlot> =
        attributes.as_ref().map(|_| std::sync::Arc::new(std::sync::OnceLock::new()));
    options.attributes = slot.clone();
    let fill = |md5: &[u8; 16], checksum: Option<&Stored>| {
        if let (Some(slot), Some(attributes)) = (&slot, &attributes) {
            let _ = slot.set(attributes.complete(md5, checksum));
        }
    };
    let algorithm = checks.checksum.as_ref().map(|c| c.algorithm);
    // The checksum of the bytes received, once it matched the client's value (if any).
    let verified = |digest: Option<Vec<u8>>| -> S3Result<Option<Stored>> {
        let (Some(requested), Some(digest)) = (&checks.checksum, digest) else { return Ok(None) };
        requested.check(&digest)?;
        Ok(Some(Stored::full_object(requested.algorithm, &digest)))
    };
    if size == 0 && sealing.is_none() {
        // An empty object may commit without reading: check the body before writing.
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| body_refusal(&e))?;
            if !chunk.is_empty() {
                return Err(s3_error!(
                    IncompleteBody,
                    "the body is longer than its Content-Length (0 bytes)"
                ));
            }
        }
        let digest = Md5::new().finalize();
        if expected_md5.is_some_and(|e| e != digest) {
            return Err(s3_error!(
                BadDigest,
                "the Content-MD5 you specified did not match what we received"
            ));
        }
        let checksum = verified(algorithm.map(|a| crate::checksum::digest(a, b"")))?;
        fill(&digest, checksum.as_ref());
        let stats = client
            .put_reader(bucket, key, 0, std::io::empty(), &options)
            .await
            .map_err(s3_error_of)?;
        return Ok(Streamed { stats, md5: digest, checksum });
    }
    let (tx, rx) = mpsc::channel(BODY_CHUNKS_IN_FLIGHT);
    let writer = {
        let (client, bucket, key) = (client.clone(), bucket.to_string(), key.to_string());
        let reader = ChannelReader::new(rx, sealing.map(|key| Sealer::new(key, size)));
        tokio::spawn(async move {
            client.put_reader(&bucket, &key, stored_size, reader, &options).await
        })
    };
    let mut md5 = BodyMd5::new(size, checks.upstream_md5.clone(), algorithm);
    let mut received: u64 = 0;
    let mut held: Option<Bytes> = None;
    let mut refused: Option<S3Error> = None;
    let mut writer_stopped = false;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => {
                received += chunk.len() as u64;
                if received > size {
                    refused = Some(s3_error!(
                        IncompleteBody,
                        "the body is longer than its Content-Length ({size} bytes)"
                    ));
                    break;
                }
                if let Err(error) = md5.update(&chunk).await {
                    refused = Some(error);
                    break;
                }
                if let Some(previous) = held.replace(chunk) {
                    if tx.send(Ok(previous)).await.is_err() {
                        writer_stopped = true; // its error says why
                        break;
                    }
                }
            }
            Err(error) => {
                refused = Some(body_refusal(&error));
                break;
            }
        }
    }
    let (digest, checksum_digest) = match md5.finish().await {
        Ok(digests) => digests,
        Err(error) => {
            refused.get_or_insert(error);
            ([0; 16], None)
        }
    };
    if refused.is_none() && !writer_stopped && received < size {
        refused =
            Some(s3_error!(IncompleteBody, "the body ended after {received} of its {size} bytes"));
    }
    if refused.is_none() {
        if let Some(expected) = expected_md5.filter(|e| *e != digest) {
            refused = Some(s3_error!(
                BadDigest,
                "the Content-MD5 you specified ({}) did not match what we received ({})",
                hex::encode(expected),
                hex::encode(digest)
            ));
        }
    }
    let mut checksum = None;
    if refused.is_none() {
        match verified(checksum_digest) {
            Ok(stored) => checksum = stored,
            Err(error) => refused = Some(error),
        }
    }
    match &refused {
        Some(error) => {
            let _ = tx.send(Err(format!("request refused: {error}"))).await;
        }
        None => {
            fill(&digest, checksum.as_ref());
            if let Some(last) = held {
                let _ = tx.send(Ok(last)).await;
            }
        }
    }
    drop(tx);
    let outcome =
        writer.await.map_err(|e| s3_error!(InternalError, "the write task failed: {e}"))?;
    // A writer that stopped on its own (meta refused, a node failed) has the real cause.
    let stats = match (outcome, refused) {
        (Err(error), _) if writer_stopped => return Err(s3_error_of(error)),
        (_, Some(error)) => return Err(error),
        (outcome, None) => outcome.map_err(s3_error_of)?,
    };
    Ok(Streamed { stats, md5: digest, checksum })
}

/// Decodes a Content-MD5 header (base64 of 16 bytes); `headers` tells an empty header
/// (refused) from none.
pub fn content_md5(header: Option<&str>, headers: &http::HeaderMap) -> S3Result<Option<[u8; 16]>> {
    use base64::Engine;
    let empty = headers.get("content-md5").is_some_and(|v| v.as_bytes().trim_ascii().is_empty());
    if empty {
        return Err(s3_error!(InvalidDigest, "Content-MD5 is empty"));
    }
    let Some(text) = header else { return Ok(None) };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not base64"))?;
    let digest: [u8; 16] =
        bytes.try_into().map_err(|_| s3_error!(InvalidDigest, "Content-MD5 is not 16 bytes"))?;
    Ok(Some(digest))
}
