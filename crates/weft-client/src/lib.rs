//! weft-client: how bytes get into and out of a weft cluster.
//!
//! - [`Client::put_file`] (write.rs): meta places the units, cells stream to the nodes of
//!   the current stripe while *partial parities* accumulate per open group (Okapi §4.3), parity
//!   rows go out as soon as they are final, and the object is committed in meta only after
//!   every unit is durable on its node.
//! - [`Client::get`] (read.rs): fetches only the cells a range needs; a unit that is down,
//!   missing or corrupt is rebuilt for just the bytes asked, from the units the code's repair
//!   plan names, and what was fetched is kept for the next sequential window and, in the
//!   client's degraded-read cache (degraded.rs), for the next reads (Okapi §4.4).
//! - [`Client::transition`] (transition.rs): changes an object's code by regrouping (new
//!   parity over the data blocks in place, Okapi §4.5) or restriping (rewrite).
//! - [`Client::pack`] (geometric.rs): moves a geometric bucket's warm objects into its
//!   Clay-coded bins in batches (RCStor's packer); gets of packed objects stream their chunks
//!   in order, regenerating the next while the previous is sent.
//! - [`repair::run_executor`]: takes repair tasks from meta's queue, rebuilds each unit with
//!   its code's repair plan (so Hitchhiker and Clay read less) onto the destination meta
//!   chose, and reports back under the task's lease.
//!
//! Invariants kept by the whole crate:
//! - meta and the nodes are reached only over HTTP, through [`meta::MetaClient`] and
//!   [`node::NodeClient`]; nothing here reads a node's disk or meta's store directly. Every
//!   request is signed (weft-auth): to meta with the client key, to node N with N's key.
//! - A put either commits an object whose every unit was acknowledged durable by its node,
//!   or fails without committing (and deletes what it wrote, best effort).
//! - Every error names the node, unit and cause it comes from.

use std::fmt;

pub mod blake3_batch;
pub mod degraded;
pub mod digest;
pub mod file_bytes;
pub mod gc;
pub mod geometric;
pub mod local;
pub mod meta;
pub mod meter;
pub mod node;
pub mod object;
pub mod polyval;
pub mod raidp;
pub mod read;
pub mod repair;
pub mod s3_support;
pub mod trace;
pub mod transition;
pub mod versions;
pub mod write;

pub use degraded::{DegradedCache, DEFAULT_DEGRADED_CACHE_BYTES};
pub use geometric::{PackOptions, PackReport};
pub use meta::MetaClient;
pub use meter::BufferMeter;
pub use node::NodeClient;
pub use object::{GeoInfo, GeoPiece, ObjectInfo, UnitInfo};
pub use read::{read_buffer_bound, GetStats, ReadMode};
pub use transition::TransitionReport;
pub use versions::{Deletion, VersionInfo};
pub use write::{
    AttributesSlot, Coder, CommitTerms, Precondition, PutOptions, PutStats, IN_MEMORY_PUT_BYTES,
};

/// Default meta URL when neither `--meta` nor `WEFT_META` says otherwise.
pub const DEFAULT_META_URL: &str = "http://127.0.0.1:7700";

/// What went wrong talking to the cluster.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// meta answered with an error (`status`, meta's error code and message).
    Meta { status: u16, code: String, message: String },
    /// meta could not be reached.
    MetaUnreachable { url: String, cause: String },
    /// A node failed a unit request.
    Node { node_id: u32, endpoint: String, unit: String, cause: String },
    /// Too many units of one group are unavailable to rebuild the bytes asked for.
    Unrecoverable { group: usize, unavailable: Vec<String>, cause: String },
    /// Local IO (the file being put, or the output of a get).
    Io { what: String, source: std::io::Error },
    /// The request itself is wrong (bad range, bad policy...).
    Invalid(String),
    /// A coding error that should not happen with a consistent object record.
    Code(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Meta { status, code, message } => {
                write!(f, "meta refused ({status} {code}): {message}")
            }
            ClientError::MetaUnreachable { url, cause } => {
                write!(f, "cannot reach meta at {url}: {cause} (is `weft up` running? set --meta or WEFT_META)")
            }
            ClientError::Node { node_id, endpoint, unit, cause } => {
                write!(f, "node {node_id} ({endpoint}) failed on unit {unit}: {cause}")
            }
            ClientError::Unrecoverable { group, unavailable, cause } => write!(
                f,
                "group {group} cannot be decoded: units unavailable: {}; {cause}",
                unavailable.join(", ")
            ),
            ClientError::Io { what, source } => write!(f, "{what}: {source}"),
            ClientError::Invalid(reason) => f.write_str(reason),
            ClientError::Code(reason) => write!(f, "coding failed: {reason}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<weft_codes::CodeError> for ClientError {
    fn from(error: weft_codes::CodeError) -> ClientError {
        ClientError::Code(error.to_string())
    }
}

/// Result of this crate's operations.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// The cluster as one client sees it: meta plus a shared HTTP connection pool for nodes.
/// Clones share the pool and the degraded-read cache.
#[derive(Clone, Debug)]
pub struct Client {
    pub meta: MetaClient,
    pub nodes: NodeClient,
    /// What degraded reads fetched and decoded, kept for the next reads (degraded.rs).
    pub degraded: std::sync::Arc<DegradedCache>,
    /// Where every get is recorded, when set (trace.rs).
    pub trace: Option<std::sync::Arc<trace::ReadTrace>>,
    /// The unit files opened locally (local.rs) that this client's reads share: set on the
    /// clone that reads one object's stream piece by piece, so each unit's file is asked for
    /// once per stream; None: each read asks for its own.
    pub(crate) read_grants: Option<std::sync::Arc<local::Grants>>,
}

impl Client {
    /// A client of the cluster whose meta is at `meta_url` (`http://host:port`), signing
    /// every request with keys derived from the cluster `secret`.
    pub fn new(meta_url: &str, secret: &weft_auth::ClusterSecret) -> Result<Client> {
        Ok(Client {
            meta: MetaClient::new(meta_url, secret)?,
            nodes: NodeClient::new(secret)?,
            degraded: std::sync::Arc::new(DegradedCache::new(DEFAULT_DEGRADED_CACHE_BYTES)),
            trace: None,
            read_grants: None,
        })
    }

    /// This client, keeping the unit files its local reads open across reads
    /// ([`NodeClient::keeping_grants`]); for a long-lived reader, the S3 gateway.
    pub fn keeping_grants(&self) -> Client {
        Client { nodes: self.nodes.keeping_grants(), ..self.clone() }
    }

    /// This client (same connections) with a degraded-read cache of its own, keeping at most
    /// `limit` bytes (0: no cache).
    pub fn with_degraded_cache(&self, limit: usize) -> Client {
        Client { degraded: std::sync::Arc::new(DegradedCache::new(limit)), ..self.clone() }
    }

    /// This client behind a modeled link of its own at `bytes_per_sec` each way (the
    /// hardware model's client link; benchmarks give each emulated client one).
    pub fn with_link(&self, bytes_per_sec: u64) -> Client {
        Client { nodes: self.nodes.with_link(bytes_per_sec), ..self.clone() }
    }

    /// This client, recording every get it serves to the read trace at `path` (appended).
    pub fn with_read_trace(&self, path: &std::path::Path) -> Result<Client> {
        let trace = std::sync::Arc::new(trace::ReadTrace::open(path)?);
        Ok(Client { trace: Some(trace), ..self.clone() })
    }
}
