//! The client side of a node's data API (docs/node-api.md): streamed unit PUTs with a known
//! length, ranged GETs, DELETEs.
//!
//! Invariants:
//! - A ranged GET returns exactly the bytes asked for or a [`NodeFailure`]; a short or long
//!   answer is a failure, never silently padded or cut.
//! - Failures are classified ([`FailureKind`]) so that callers can tell "rebuild this unit"
//!   (missing, corrupt) from "this node is unreachable" and from "already exists".
//! - A GET of a whole unit is checked against the writer's digest from meta when the object
//!   has one ([`crate::digest::check_unit`]): bytes a node returns under a unit's key are
//!   trusted only as far as its checksums go for partial ranges, never for whole units.
//! - A streamed PUT returns the digest of exactly the bytes it sent.

use std::{fmt, time::Duration};

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::{header, StatusCode};
use tokio::sync::mpsc;

use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret};

use crate::UnitInfo;

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

/// A pool of connections to the nodes; every request is signed with the key of the node it
/// goes to (derived from the cluster secret).
#[derive(Clone, Debug)]
pub struct NodeClient {
    http: reqwest::Client,
    secret: ClusterSecret,
    /// The client's modeled link (down: unit bytes received, up: sent), when it has one.
    link: Option<std::sync::Arc<ClientLink>>,
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
pub(crate) async fn failure_of(response: reqwest::Response) -> NodeFailure {
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
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
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .read_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(8)
            .build()
            .map_err(|e| {
                crate::ClientError::Invalid(format!("cannot build an HTTP client: {e}"))
            })?;
        Ok(NodeClient { http, secret: secret.clone(), link: None })
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
        let url = Self::url(unit)?;
        let digester = std::sync::Arc::new(std::sync::Mutex::new(crate::digest::Digester::new()));
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

    /// Stores `unit` with the given bytes.
    pub async fn put(&self, unit: &UnitInfo, bytes: Bytes) -> Result<(), NodeFailure> {
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
        if len == 0 {
            return Ok(Bytes::new());
        }
        if unit.is_down() {
            return Err(NodeFailure::new(
                FailureKind::Unreachable,
                format!("node {} is down (meta)", unit.node_id),
            ));
        }
        let url = Self::url(unit)?;
        let mut out = Vec::with_capacity(len as usize);
        // One request for the whole range; if its body breaks off (the node found a corrupt
        // segment after it had started answering, or the connection dropped), the rest is
        // asked for in pieces of at most RESUME_PIECE bytes, which the node answers with a
        // clean status (500 corrupt, 404...) when they fail: the failure gets its true kind.
        let node = unit.node_id;
        if let Some(first) = self.get_into(node, &url, offset, len, &mut out).await? {
            while (out.len() as u64) < len {
                let at = out.len() as u64;
                let piece = RESUME_PIECE.min(len - at);
                if let Some(again) = self.get_into(node, &url, offset + at, piece, &mut out).await?
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
            crate::digest::check_unit(unit, &out)?;
        }
        Ok(Bytes::from(out))
    }

    /// Appends bytes `[offset, offset + len)` of the unit at `url` to `out`. Ok(Some(cause))
    /// when the body broke off after the node answered 2xx (what arrived stays in `out`).
    async fn get_into(
        &self,
        node_id: u32,
        url: &str,
        offset: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> Result<Option<String>, NodeFailure> {
        let range = format!("bytes={}-{}", offset, offset + len - 1);
        let response = self.send(node_id, self.http.get(url).header(header::RANGE, range)).await?;
        if !response.status().is_success() {
            return Err(failure_of(response).await);
        }
        let start = out.len();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(chunk) => {
                    if let Some(link) = &self.link {
                        link.down.transfer(chunk.len() as u64).await;
                    }
                    out.extend_from_slice(&chunk)
                }
                Err(e) => return Ok(Some(format!("after {} bytes: {e}", out.len() - start))),
            }
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
