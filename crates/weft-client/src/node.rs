//! The client side of a node's data API (docs/node-api.md): streamed unit PUTs with a known
//! length, ranged GETs, DELETEs.
//!
//! Invariants:
//! - A ranged GET returns exactly the bytes asked for or a [`NodeFailure`]; a short or long
//!   answer is a failure, never silently padded or cut.
//! - Failures are classified ([`FailureKind`]) so that callers can tell "rebuild this unit"
//!   (missing, corrupt) from "this node is unreachable" and from "already exists".
//! - A GET of a whole unit is checked against the writer's digest from meta when the object
//!   has one ([`crate::digest::DigestKey::check_unit`]): bytes a node returns under a unit's key are
//!   trusted only as far as its checksums go for partial ranges, never for whole units.
//! - A streamed PUT returns the digest of exactly the bytes it sent.
//! - A unit whose node is on this host is read from, and written into, its file
//!   (crate::local) unless the node refuses; a refused local write goes over HTTP, a granted
//!   one fails as its node would have answered (a cut-short stream is never the node's fault).

use std::{fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::{header, StatusCode};
use tokio::sync::mpsc;

use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret};

use crate::{local::WriteFailed, UnitInfo};

/// What kind of failure a node request met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The node could not be reached (refused, reset, timed out) or is known down.
    Unreachable,
    /// 404: the unit is not on that disk.
    Missing,
    /// 500 `corrupt`: a checksum did not match.
    Corrupt,
    /// 409: the unit exists already (units are immutable).
    Exists,
    /// 503 (disk failed, IO error) or anything else unexpected.
    Other,
}

/// A failed node request: its kind and a sentence saying why.
#[derive(Clone, Debug)]
pub struct NodeFailure {
    pub kind: FailureKind,
    pub cause: String,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cause)
    }
}

impl NodeFailure {
    pub(crate) fn new(kind: FailureKind, cause: impl Into<String>) -> NodeFailure {
        NodeFailure { kind, cause: cause.into() }
    }

    /// Into a [`crate::ClientError::Node`] naming the unit and its node.
    pub fn for_unit(self, unit: &UnitInfo) -> crate::ClientError {
        crate::ClientError::Node {
            node_id: unit.node_id,
            endpoint: unit.endpoint.clone().unwrap_or_else(|| "(unknown endpoint)".into()),
            unit: unit.unit.short_name(),
            cause: self.cause,
        }
    }
}

/// Longest piece asked for when resuming a broken ranged GET: the node checks every segment
/// of a range this short before it answers (docs/node-api.md), so a corrupt one gets a clean
/// 500.
const RESUME_PIECE: u64 = 1 << 20;

/// The header asking a node for a checksummed range, and the answer's headers
/// (docs/node-api.md).
const CHECKSUMS_HEADER: &str = "x-weft-checksums";
const CHECKSUMMED_HEADER: &str = "x-weft-checksummed";
const SEGMENT_BYTES_HEADER: &str = "x-weft-segment-bytes";

/// The checks of one checksummed answer: its body opens with the stored CRC-32C of each
/// whole segment of the range (unit bytes `[start, end)`), then the range's bytes. The
/// bytes before `start` and from `end` (partial segments) were verified by the node.
#[derive(Debug, Default)]
struct SegmentCheck {
    start: u64,
    end: u64,
    segment: u64,
    /// Checksum bytes still to come at the body's head.
    pending: usize,
    sums: Vec<u8>,
    /// Segments verified so far, and the CRC of the bytes of the next one received so far.
    verified: u64,
    running: u32,
}

impl SegmentCheck {
    /// The checks an answer's headers announce for a range `[offset, offset + len)`; none
    /// (every byte verified by the node) when it names none.
    fn of(headers: &header::HeaderMap, offset: u64, len: u64) -> Result<SegmentCheck, NodeFailure> {
        let number = |name: &str| -> Option<u64> { headers.get(name)?.to_str().ok()?.parse().ok() };
        let count = number(CHECKSUMS_HEADER).unwrap_or(0);
        if count == 0 {
            return Ok(SegmentCheck::default());
        }
        let bad =
            |why: &str| NodeFailure::new(FailureKind::Other, format!("a checksummed answer {why}"));
        let segment = number(SEGMENT_BYTES_HEADER)
            .filter(|&s| s > 0)
            .ok_or_else(|| bad("names no segment size"))?;
        let covered = headers
            .get(CHECKSUMMED_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once('-'))
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
            .ok_or_else(|| bad("names no checksummed range"))?;
        let (start, end) = (covered.0, covered.1.saturating_add(1));
        let fits = offset <= start
            && start < end
            && end <= offset + len
            && start.is_multiple_of(segment)
            && (end - start).div_ceil(segment) == count;
        if !fits {
            return Err(bad(&format!(
                "covers {start}..{end} in {count} segments of {segment} bytes, outside the range {offset}+{len}"
            )));
        }
        let pending = 4 * count as usize;
        Ok(SegmentCheck {
            start,
            end,
            segment,
            pending,
            sums: Vec::with_capacity(pending),
            ..Default::default()
        })
    }

    /// Takes the checksums from the head of `chunk`; the rest is range bytes.
    fn take_checksums<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let take = self.pending.min(chunk.len());
        self.sums.extend_from_slice(&chunk[..take]);
        self.pending -= take;
        &chunk[take..]
    }

    /// Checks `data`, the range's bytes from unit offset `at`, against the segments it
    /// completes. Err names the first segment that does not match.
    fn verify(&mut self, mut at: u64, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            let next = self.start + self.verified * self.segment;
            if at + data.len() as u64 <= next || next >= self.end {
                return Ok(()); // before the checked segments, or past them
            }
            if at < next {
                data = &data[(next - at) as usize..];
                at = next;
            }
            let segment_end = (next + self.segment).min(self.end);
            let now = data.len().min((segment_end - at) as usize);
            self.running = weft_wire::checksum::crc32c_append(self.running, &data[..now]);
            data = &data[now..];
            at += now as u64;
            if at == segment_end {
                let i = self.verified as usize * 4;
                let stored = u32::from_le_bytes(self.sums[i..i + 4].try_into().expect("4 bytes"));
                if self.running != stored {
                    return Err(format!(
                        "segment at unit byte {next} did not match its checksum (crc32c {:08x}, stored {stored:08x})",
                        self.running
                    ));
                }
                self.verified += 1;
                self.running = 0;
            }
        }
        Ok(())
    }

    /// The end of the bytes that can be trusted when the range's bytes up to unit offset
    /// `received` arrived: all of them, except a checked segment not wholly verified.
    fn trusted(&self, received: u64) -> u64 {
        let verified_end = (self.start + self.verified * self.segment).min(self.end);
        match self.segment == 0 || received <= verified_end || verified_end >= self.end {
            true => received,
            false => verified_end,
        }
    }

    /// Every checksummed segment arrived and matched.
    fn complete(&self) -> bool {
        self.pending == 0 && self.start + self.verified * self.segment >= self.end
    }
}

/// A pool of connections to the nodes; every request is signed with the key of the node it
/// goes to (derived from the cluster secret).
#[derive(Clone, Debug)]
pub struct NodeClient {
    http: reqwest::Client,
    /// A pool of its own for checksummed unit GETs: a node answers those connections with
    /// sendfile until they ask anything else (docs/node-api.md), so nothing else is sent on
    /// them.
    reads: reqwest::Client,
    secret: ClusterSecret,
    /// The keys of the unit digests this client records and checks.
    digests: std::sync::Arc<crate::digest::DigestKey>,
    /// The client's modeled link (down: unit bytes received, up: sent), when it has one.
    link: Option<std::sync::Arc<ClientLink>>,
    /// Reads and writes of units on nodes of this host, in the unit files (crate::local);
    /// None when both `WEFT_LOCAL_READS=off` and `WEFT_LOCAL_WRITES=off`.
    local: Option<std::sync::Arc<crate::local::LocalIo>>,
}

/// A client's link in each direction (the hardware model's `--client-link`).
#[derive(Debug)]
pub struct ClientLink {
    pub down: weft_wire::link::Link,
    pub up: weft_wire::link::Link,
}

/// A failure below HTTP: the node is unreachable when the connection could not be made or
/// timed out; a request that broke off midway (possibly because this side gave up on it) is
/// [`FailureKind::Other`].
///
/// An unreachable node's cause names the node's address, not the request's URL: it is the
/// same for every unit on that node, so a failure remembered from one unit's read (the
/// degraded-read cache) reads true for the others.
pub(crate) fn transport(error: reqwest::Error) -> NodeFailure {
    let unreachable = |what: &str, error: reqwest::Error| {
        let node = error
            .url()
            .and_then(|u| Some(format!(" {}:{}", u.host_str()?, u.port_or_known_default()?)))
            .unwrap_or_default();
        NodeFailure::new(FailureKind::Unreachable, format!("{what}{node}: {}", error.without_url()))
    };
    if error.is_connect() {
        unreachable("cannot connect to", error)
    } else if error.is_timeout() {
        unreachable("timed out at", error)
    } else {
        NodeFailure::new(FailureKind::Other, format!("request failed: {error}"))
    }
}

/// Turns a non-success answer into a failure carrying the node's error body.
/// A local write that the node did not store, as the HTTP write's failure would be.
fn local_failure(failed: crate::local::WriteFailed) -> NodeFailure {
    match failed {
        WriteFailed::Answer(status, body) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            failure_from(status, body)
        }
        WriteFailed::Broken(cause) => NodeFailure::new(FailureKind::Unreachable, cause),
        WriteFailed::Cut(cause) => NodeFailure::new(FailureKind::Other, cause),
    }
}

pub(crate) async fn failure_of(response: reqwest::Response) -> NodeFailure {
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    failure_from(status, body)
}

fn failure_from(status: StatusCode, body: String) -> NodeFailure {
    let kind = match status {
        StatusCode::NOT_FOUND => FailureKind::Missing,
        StatusCode::CONFLICT => FailureKind::Exists,
        StatusCode::INTERNAL_SERVER_ERROR if body.contains("\"corrupt\"") => FailureKind::Corrupt,
        _ => FailureKind::Other,
    };
    NodeFailure::new(kind, format!("{status}: {}", body.trim()))
}

impl NodeClient {
    /// A connection pool with short connect timeouts (a dead node must not stall a read).
    pub fn new(secret: &ClusterSecret) -> crate::Result<NodeClient> {
        let pool = || {
            weft_auth::sign_reqwest::client_builder()
                .connect_timeout(Duration::from_secs(2))
                .read_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(8)
                .build()
                .map_err(|e| {
                    crate::ClientError::Invalid(format!("cannot build an HTTP client: {e}"))
                })
        };
        let on = |name: &str| !matches!(std::env::var(name).as_deref(), Ok("off") | Ok("0"));
        let (reads, writes) = (on("WEFT_LOCAL_READS"), on("WEFT_LOCAL_WRITES"));
        let local = (reads || writes)
            .then(|| std::sync::Arc::new(crate::local::LocalIo::new(reads, writes)));
        let digests = crate::digest::DigestKey::of(secret);
        let secret = secret.clone();
        Ok(NodeClient { http: pool()?, reads: pool()?, secret, digests, link: None, local })
    }

    /// This pool, its local reads keeping the grants they are given across reads (a
    /// long-lived client: the S3 gateway; see `local::KeptGrants`). `WEFT_GRANT_CACHE=off`
    /// leaves it as it was.
    pub fn keeping_grants(&self) -> NodeClient {
        if matches!(std::env::var("WEFT_GRANT_CACHE").as_deref(), Ok("off") | Ok("0")) {
            return self.clone();
        }
        let local = self
            .local
            .as_ref()
            .map(|l| std::sync::Arc::new(crate::local::LocalIo::keeping_grants(l.reads, l.writes)));
        NodeClient { local, ..self.clone() }
    }

    /// This pool (same connections) behind a link of its own at `bytes_per_sec` in each
    /// direction: unit bytes received and sent queue on it as on a NIC of that rate.
    pub fn with_link(&self, bytes_per_sec: u64) -> NodeClient {
        let link = ClientLink {
            down: weft_wire::link::Link::new(bytes_per_sec),
            up: weft_wire::link::Link::new(bytes_per_sec),
        };
        NodeClient { link: Some(std::sync::Arc::new(link)), ..self.clone() }
    }

    /// The connection pool (requests are sent through [`NodeClient::send`], which signs them).
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The client's link, when it has one.
    pub fn link(&self) -> Option<&ClientLink> {
        self.link.as_deref()
    }

    /// Signs `request` for node `node_id` and sends it.
    pub(crate) async fn send(
        &self,
        node_id: u32,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, NodeFailure> {
        let signer = self.secret.signer_for(Audience::Node(node_id));
        request.send_signed(&signer).await.map_err(transport)
    }

    /// A node's `GET /v1/health`: its disks with their usage, state and, under a hardware
    /// model, the model's counters (docs/node-api.md).
    pub async fn health(
        &self,
        node_id: u32,
        endpoint: &str,
    ) -> Result<serde_json::Value, NodeFailure> {
        let url = format!("{}/v1/health", endpoint.trim_end_matches('/'));
        let response = self.send(node_id, self.http.get(url)).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
        response.json().await.map_err(transport)
    }

    fn url(unit: &UnitInfo) -> Result<String, NodeFailure> {
        unit.url().ok_or_else(|| {
            NodeFailure::new(
                FailureKind::Unreachable,
                format!("meta knows no endpoint for node {}", unit.node_id),
            )
        })
    }

    /// Stores `unit` from the chunks arriving on `chunks` (exactly `len` bytes in all) and
    /// returns the digest of the bytes sent. The node answers only once the unit is durable.
    /// Dropping the sender early aborts the PUT (the node discards the partial unit).
    pub async fn put_stream(
        &self,
        unit: &UnitInfo,
        len: u64,
        chunks: mpsc::Receiver<Bytes>,
    ) -> Result<weft_wire::UnitDigest, NodeFailure> {
        let chunks = match self.put_stream_locally(unit, len, chunks).await {
            Ok(written) => return written,
            Err(chunks) => chunks,
        };
        let url = Self::url(unit)?;
        let digester = self.digests.writer(len);
        let digester = std::sync::Arc::new(std::sync::Mutex::new(digester));
        let fed = std::sync::Arc::clone(&digester);
        let link = self.link.clone();
        let stream = futures_util::stream::unfold(chunks, move |mut rx| {
            let (fed, link) = (std::sync::Arc::clone(&fed), link.clone());
            async move {
                let chunk = rx.recv().await?;
                fed.lock().expect("digester").update(&chunk);
                if let Some(link) = link {
                    link.up.transfer(chunk.len() as u64).await;
                }
                Some((Ok::<Bytes, std::io::Error>(chunk), rx))
            }
        });
        let request = self
            .http
            .put(&url)
            .header(header::CONTENT_LENGTH, len)
            .body(reqwest::Body::wrap_stream(stream));
        let response = self.send(unit.node_id, request).await?;
        if response.status().is_success() {
            Ok(digester.lock().expect("digester").finish())
        } else {
            Err(failure_of(response).await)
        }
    }

    /// Where a local write of `unit` goes: the client's local side, the node's loopback port,
    /// the unit's path and the signer. None: over HTTP (not on this host, local writes off,
    /// or a modeled link, whose bytes must cross the modeled network).
    fn local_target(
        &self,
        unit: &UnitInfo,
    ) -> Option<(Arc<crate::local::LocalIo>, u16, String, weft_auth::Signer)> {
        let local = self.local.as_ref().filter(|l| l.writes && self.link.is_none())?.clone();
        let port = crate::local::loopback_port(unit.endpoint.as_deref()?)?;
        let url = Self::url(unit).ok()?;
        let path = url[url.find("/v1/")?..].to_owned();
        Some((local, port, path, self.secret.signer_for(Audience::Node(unit.node_id))))
    }

    /// The phase (modulo [`crate::local::PHASE_ALIGN`]) of `unit`'s byte 0 in its file, for a
    /// writer that reads the unit's bytes into memory of their file offsets' phase so that a
    /// local write takes them from where they lie (see `LocalIo::write_phase`); None: they
    /// will be copied (or sent) whatever their address.
    pub(crate) fn write_phase(&self, unit: &UnitInfo) -> Option<usize> {
        let local = self.local.as_ref().filter(|_| self.link.is_none())?;
        crate::local::loopback_port(unit.endpoint.as_deref()?)?;
        local.write_phase(unit.len)
    }

    /// [`NodeClient::put_stream`] into the unit's file when its node is on this host
    /// (crate::local): Err gives the chunks back untouched when the unit must go over HTTP.
    async fn put_stream_locally(
        &self,
        unit: &UnitInfo,
        len: u64,
        mut chunks: mpsc::Receiver<Bytes>,
    ) -> Result<Result<weft_wire::UnitDigest, NodeFailure>, mpsc::Receiver<Bytes>> {
        let Some((local, port, path, signer)) = self.local_target(unit) else {
            return Err(chunks);
        };
        let asking = local.clone();
        let began =
            tokio::task::spawn_blocking(move || asking.begin_write(port, &path, &signer, len));
        let Ok(Some(mut write)) = began.await else {
            return Err(chunks);
        };
        let file = write.file();
        let mut digester = self.digests.writer(len);
        // One write in flight while the next one fills.
        type Written = std::io::Result<Option<crate::local::Aligned>>;
        let mut pending: Option<tokio::task::JoinHandle<Written>> = None;
        let mut failed: Option<std::io::Error> = None;
        'chunks: while let Some(chunk) = chunks.recv().await {
            digester.update(&chunk);
            let ready = match write.push(&chunk) {
                Ok(ready) => ready,
                Err(cause) => return Ok(Err(NodeFailure::new(FailureKind::Other, cause))),
            };
            for next in ready {
                if let Some(previous) = pending.take() {
                    match previous.await {
                        Ok(Ok(stage)) => stage.into_iter().for_each(|s| write.recycle(s)),
                        Ok(Err(error)) => {
                            failed = Some(error);
                            break 'chunks;
                        }
                        Err(join) => {
                            failed = Some(std::io::Error::other(join));
                            break 'chunks;
                        }
                    }
                }
                let file = file.clone();
                pending = Some(tokio::task::spawn_blocking(move || next.write(&file)));
            }
        }
        if let Some(previous) = pending.take() {
            match previous.await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => failed = failed.or(Some(error)),
                Err(join) => failed = failed.or(Some(std::io::Error::other(join))),
            }
        }
        drop(file);
        let ended = tokio::task::spawn_blocking(move || match failed {
            Some(error) => Err(write.abort(error)),
            None => write.finish(&local),
        })
        .await;
        Ok(match ended {
            Ok(Ok(())) => Ok(digester.finish()),
            Ok(Err(failed)) => Err(local_failure(failed)),
            Err(join) => Err(NodeFailure::new(FailureKind::Other, format!("local write: {join}"))),
        })
    }

    /// Stores `unit` with the given bytes.
    pub async fn put(&self, unit: &UnitInfo, bytes: Bytes) -> Result<(), NodeFailure> {
        if let Some((local, port, path, signer)) = self.local_target(unit) {
            let whole = bytes.clone();
            let written = tokio::task::spawn_blocking(move || {
                let write = local.begin_write(port, &path, &signer, whole.len() as u64)?;
                Some(write.write_whole(&whole, &local))
            })
            .await;
            match written {
                Ok(Some(Ok(()))) => return Ok(()),
                Ok(Some(Err(failed))) => return Err(local_failure(failed)),
                Ok(None) => {}
                Err(join) => {
                    return Err(NodeFailure::new(
                        FailureKind::Other,
                        format!("local write: {join}"),
                    ))
                }
            }
        }
        let url = Self::url(unit)?;
        if let Some(link) = &self.link {
            link.up.transfer(bytes.len() as u64).await;
        }
        let response = self.send(unit.node_id, self.http.put(&url).body(bytes)).await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(failure_of(response).await)
        }
    }

    /// Bytes `[offset, offset + len)` of `unit`, verified by the node's checksums.
    pub async fn get_range(
        &self,
        unit: &UnitInfo,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, NodeFailure> {
        self.get_range_in(unit, offset, len, None).await
    }

    /// [`NodeClient::get_range`] within one read that keeps the unit files it opened
    /// locally in `grants` (crate::local) for its next ranges.
    pub async fn get_range_in(
        &self,
        unit: &UnitInfo,
        offset: u64,
        len: u64,
        grants: Option<&Arc<crate::local::Grants>>,
    ) -> Result<Bytes, NodeFailure> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        if unit.is_down() {
            return Err(NodeFailure::new(
                FailureKind::Unreachable,
                format!("node {} is down (meta)", unit.node_id),
            ));
        }
        let whole = offset == 0 && len == unit.len;
        let digester = unit.digest.filter(|_| whole).map(|d| self.digests.digester_like(&d));
        if let Some((bytes, found)) = self.read_locally(unit, (offset, len), grants, digester).await
        {
            match found {
                Some(found) => crate::digest::check_digest(unit, found, bytes.len())?,
                None if whole => self.digests.check_unit(unit, &bytes)?,
                None => {}
            }
            return Ok(bytes);
        }
        let url = Self::url(unit)?;
        let mut out = Vec::with_capacity(len as usize);
        // One request for the whole range; if its body breaks off (the node found a corrupt
        // segment after it had started answering, or the connection dropped), the rest is
        // asked for in pieces of at most RESUME_PIECE bytes, which the node answers with a
        // clean status (500 corrupt, 404...) when they fail: the failure gets its true kind.
        // The first request asks for a checksummed range (whole segments sent from the page
        // cache, verified here); the resumed pieces do not, so that the node reads and checks
        // them itself and names what is wrong (500 corrupt, 503 io) with a clean status.
        let node = unit.node_id;
        if let Some(first) = self.get_into(node, &url, offset, len, &mut out, true).await? {
            while (out.len() as u64) < len {
                let at = out.len() as u64;
                let piece = RESUME_PIECE.min(len - at);
                if let Some(again) =
                    self.get_into(node, &url, offset + at, piece, &mut out, false).await?
                {
                    return Err(NodeFailure::new(
                        FailureKind::Unreachable,
                        format!("the answer broke off {first}, and again {again}"),
                    ));
                }
            }
        }
        if out.len() as u64 != len {
            return Err(NodeFailure::new(
                FailureKind::Other,
                format!("asked for {len} bytes at {offset}, got {}", out.len()),
            ));
        }
        if offset == 0 && len == unit.len {
            self.digests.check_unit(unit, &out)?;
        }
        Ok(Bytes::from(out))
    }

    /// The keys of the unit digests this client records and checks.
    pub fn digest_key(&self) -> &Arc<crate::digest::DigestKey> {
        &self.digests
    }

    /// Unit ranges read from their files on this host (crate::local), and ranges a node on
    /// this host answered there but that were then read over HTTP.
    pub fn local_read_counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.local.as_ref().map_or((0, 0), |l| (l.hits.load(Relaxed), l.fallbacks.load(Relaxed)))
    }

    /// Units written into their files on this host (crate::local), and units whose node on
    /// this host refused that (then written over HTTP).
    pub fn local_write_counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let counts = |l: &crate::local::LocalIo| {
            (l.write_hits.load(Relaxed), l.write_fallbacks.load(Relaxed))
        };
        self.local.as_deref().map_or((0, 0), counts)
    }

    /// Bytes of finished local writes that went into their unit files from where the writer
    /// held them, without a copy (cells read in their file's phase).
    pub fn local_direct_bytes(&self) -> u64 {
        let direct =
            |l: &crate::local::LocalIo| l.direct_bytes.load(std::sync::atomic::Ordering::Relaxed);
        self.local.as_deref().map_or(0, direct)
    }

    /// Bytes `[offset, offset + len)` of `unit` read from its file when its node is on this
    /// host (crate::local), verified; None when they must be read over HTTP. A client with a
    /// modeled link reads over HTTP (its bytes cross the modeled network).
    async fn read_locally(
        &self,
        unit: &UnitInfo,
        range: (u64, u64),
        grants: Option<&Arc<crate::local::Grants>>,
        digester: Option<crate::digest::Digester>,
    ) -> Option<(Bytes, Option<weft_wire::UnitDigest>)> {
        let local = self.local.as_ref().filter(|l| l.reads && self.link.is_none())?.clone();
        let port = crate::local::loopback_port(unit.endpoint.as_deref()?)?;
        let url = Self::url(unit).ok()?;
        let path = url[url.find("/v1/")?..].to_owned();
        let signer = self.secret.signer_for(Audience::Node(unit.node_id));
        let grants = grants.cloned();
        let read = move || local.read(port, &path, &signer, range, grants.as_deref(), digester);
        tokio::task::spawn_blocking(read).await.ok()?
    }

    /// Appends bytes `[offset, offset + len)` of the unit at `url` to `out`. Ok(Some(cause))
    /// when the body broke off after the node answered 2xx, or a checksummed segment did not
    /// match: what arrived and is verified stays in `out`, the rest is cut. `checksummed`:
    /// ask for the whole segments' checksums (the node may still answer without them, then
    /// it verified every byte itself).
    async fn get_into(
        &self,
        node_id: u32,
        url: &str,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
        checksummed: bool,
    ) -> Result<Option<String>, NodeFailure> {
        let range = format!("bytes={}-{}", offset, offset + len - 1);
        let request = match checksummed {
            true => self.reads.get(url).header(CHECKSUMS_HEADER, "crc32c"),
            false => self.http.get(url),
        };
        let response = self.send(node_id, request.header(header::RANGE, range)).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
        let mut check = SegmentCheck::of(response.headers(), offset, len)?;
        let start = out.len();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(chunk) => {
                    if let Some(link) = &self.link {
                        link.down.transfer(chunk.len() as u64).await;
                    }
                    let data = check.take_checksums(&chunk);
                    let at = offset + (out.len() - start) as u64;
                    out.extend_from_slice(data);
                    if let Err(cause) = check.verify(at, data) {
                        out.truncate(
                            start + (check.trusted(at + data.len() as u64) - offset) as usize,
                        );
                        return Ok(Some(cause));
                    }
                }
                Err(e) => {
                    let received = out.len() - start;
                    let trusted = check.trusted(offset + received as u64) - offset;
                    out.truncate(start + trusted as usize);
                    return Ok(Some(format!("after {received} bytes: {e}")));
                }
            }
        }
        if !check.complete() {
            let received = out.len() - start;
            out.truncate(start + (check.trusted(offset + received as u64) - offset) as usize);
            return Ok(Some(format!("the answer ended after {received} bytes")));
        }
        Ok(None)
    }

    /// The node's listing of one disk with each unit's age and file size
    /// (`GET {endpoint}/v1/disks/{disk}/units?ages=1`), as the node sent it.
    pub async fn list_disk_with_ages(
        &self,
        node_id: u32,
        endpoint: &str,
        disk: u32,
    ) -> Result<serde_json::Value, NodeFailure> {
        let url = format!("{}/v1/disks/{disk}/units?ages=1", endpoint.trim_end_matches('/'));
        let response = self.send(node_id, self.http.get(&url)).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
        response
            .json()
            .await
            .map_err(|e| NodeFailure::new(FailureKind::Other, format!("not a unit listing: {e}")))
    }

    /// Deletes `unit`; a unit already absent counts as deleted.
    pub async fn delete(&self, unit: &UnitInfo) -> Result<(), NodeFailure> {
        let url = Self::url(unit)?;
        let response = self.send(unit.node_id, self.http.delete(&url)).await?;
        match response.status() {
            status if status.is_success() => Ok(()),
            StatusCode::NOT_FOUND => Ok(()),
            _ => Err(failure_of(response).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(count: usize, covered: &str) -> header::HeaderMap {
        let mut map = header::HeaderMap::new();
        map.insert(CHECKSUMS_HEADER, count.into());
        map.insert(SEGMENT_BYTES_HEADER, 16.into());
        map.insert(CHECKSUMMED_HEADER, covered.parse().unwrap());
        map
    }

    /// The body of a checksummed answer for unit bytes `[offset, offset + len)` of `unit`,
    /// segments of 16 bytes, whole ones `[start, end)`.
    fn body(unit: &[u8], offset: usize, len: usize, start: usize, end: usize) -> Vec<u8> {
        let mut out: Vec<u8> = (start..end)
            .step_by(16)
            .flat_map(|s| crc32c::crc32c(&unit[s..(s + 16).min(end)]).to_le_bytes())
            .collect();
        out.extend_from_slice(&unit[offset..offset + len]);
        out
    }

    /// Feeds `body` in pieces of `piece` bytes; what `get_into` keeps and its outcome.
    fn feed(check: &mut SegmentCheck, offset: u64, body: &[u8], piece: usize) -> (usize, bool) {
        let mut kept = 0u64;
        for chunk in body.chunks(piece) {
            let data = check.take_checksums(chunk);
            let at = offset + kept;
            kept += data.len() as u64;
            if check.verify(at, data).is_err() {
                return ((check.trusted(offset + kept) - offset) as usize, false);
            }
        }
        (kept as usize, check.complete())
    }

    #[test]
    fn checksummed_answers_are_verified_and_cut_at_the_last_sound_segment() {
        let unit: Vec<u8> = (0..100u8).collect(); // segments of 16: the last one 4 bytes
                                                  // Range 5..100: whole segments 16..100 (6 checksums), edge 5..16 trusted.
        for piece in [1, 7, 16, 33, 1000] {
            let body = body(&unit, 5, 95, 16, 100);
            let mut check = SegmentCheck::of(&headers(6, "16-99"), 5, 95).unwrap();
            assert_eq!(feed(&mut check, 5, &body, piece), (95, true), "piece {piece}");
            // A flipped byte in segment 48..64: everything before it is kept.
            let mut bad = body.clone();
            bad[24 + (50 - 5)] ^= 1;
            let mut check = SegmentCheck::of(&headers(6, "16-99"), 5, 95).unwrap();
            assert_eq!(feed(&mut check, 5, &bad, piece), (48 - 5, false), "piece {piece}");
        }
        // A body cut off inside a segment keeps only the verified ones.
        let body = body(&unit, 0, 100, 0, 100);
        let mut check = SegmentCheck::of(&headers(7, "0-99"), 0, 100).unwrap();
        assert_eq!(feed(&mut check, 0, &body[..28 + 40], 10), (40, false));
        assert_eq!(check.trusted(40), 32);
        // No checksums named: the node verified every byte.
        let mut check = SegmentCheck::of(&header::HeaderMap::new(), 0, 100).unwrap();
        assert_eq!(feed(&mut check, 0, &unit, 9), (100, true));
        // Announced checks that do not fit the range are refused.
        assert!(SegmentCheck::of(&headers(6, "16-99"), 20, 80).is_err());
        assert!(SegmentCheck::of(&headers(5, "16-99"), 0, 100).is_err());
        assert!(SegmentCheck::of(&headers(1, "8-23"), 0, 100).is_err());
    }
}
