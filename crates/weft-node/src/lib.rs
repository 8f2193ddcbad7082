//! weft-node: the storage node daemon. An HTTP data API over `weft-store` disks, and
//! heartbeats to meta. Routes, statuses and error bodies: docs/node-api.md.
//!
//! Invariants:
//! - Every blocking store call runs on a blocking task (`spawn_blocking`), never on an async
//!   worker thread, so one slow disk does not stall requests to the others.
//! - A unit body is streamed to disk as it arrives and read back in bounded chunks; no request
//!   holds a whole unit in memory.
//! - A disk is addressed by its index in `NodeConfig::disks`; the index never changes while the
//!   node runs. A disk that fails stays failed (weft-store's sticky state) until the node restarts.
//! - Every request is checked by weft-auth's guard before any handler runs: it must be signed
//!   with this node's key (held by this node and by holders of the cluster secret), once.
//!   The node signs its own heartbeats with the same key; it holds no other key.
//! - A full disk (weft-store's `Full`: ENOSPC/EDQUOT seen, or used space at or above
//!   `NodeConfig::thresholds`' full ratio) is not failed: it keeps serving reads and deletes,
//!   answers PUTs 507 `disk_full`, and is reported `"state":"full"` in heartbeats and
//!   `/v1/health` so meta places nothing new on it.
//! - Heartbeat failures are logged and retried at the next interval; they never stop the node.
//! - Every unit is scrubbed once per scrub interval and each disk's inventory sent to meta
//!   (`scrub`); both stop, with the heartbeats, before [`RunningNode::stop`] returns.
//! - Under a hardware model ([`model`], `NodeConfig::disk_models` / `net_bytes_per_sec`) every
//!   unit GET (its range) and PUT (its unit) of the data API waits for its modeled disk time,
//!   and its bytes for the modeled link; the scrub, listings and stats are not modeled.
//!   Without one nothing waits.

mod api;
mod heartbeat;
mod local;
mod metrics;
pub mod model;
mod raidp;
mod scrub;
mod sendfile;

use std::{fmt, future::Future, net::SocketAddr, path::PathBuf, sync::Arc};

use tokio::{sync::watch, task::JoinHandle};
use weft_store::{Disk, Fs, RealFs, StoreError};

pub use heartbeat::{DiskReport, DiskState, Heartbeat};
pub use raidp::{CrashDrill, CRASH_STEPS, CRC_HEADER as RAIDP_CRC_HEADER, MAX_SLOT_IO_BYTES};
pub use scrub::{
    inventory_interval_ms, ScrubConfig, DEFAULT_SCRUB_INTERVAL_MS, DEFAULT_SCRUB_MAX_BYTES_PER_S,
};
pub use weft_store::Thresholds;

/// Default interval between two heartbeats to meta.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 1000;

/// How a node is run.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id, as meta knows it.
    pub node_id: u32,
    /// Address to listen on; port 0 picks a free port (see [`RunningNode::local_addr`]).
    pub listen: SocketAddr,
    /// Disk directories; a disk's index in this list is its index in the API.
    pub disks: Vec<PathBuf>,
    /// Base URL of meta (e.g. `http://127.0.0.1:7000`); no heartbeats when `None`.
    pub meta_url: Option<String>,
    /// Interval between heartbeats.
    pub heartbeat_interval_ms: u64,
    /// The rack this node sits in, sent in every heartbeat; `None`: meta treats the node as
    /// its own rack.
    pub rack: Option<u32>,
    /// This node's key (`weft node add` writes it; `weft_auth::ClusterSecret::node_key`
    /// derives it): requests to the node must be signed with it, and it signs heartbeats.
    pub key: weft_auth::Key,
    /// The background scrub's schedule and read-rate ceiling.
    pub scrub: ScrubConfig,
    /// The used ratios at which every disk is reported nearfull and turns full (read-only):
    /// 0.85 and 0.95 by default (`weft serve node --nearfull-ratio --full-ratio`).
    pub thresholds: Thresholds,
    /// The filesystem the disks are opened through: the real one, or a fault-injecting one
    /// in tests (`weft_store::FaultyFs`).
    pub fs: Arc<dyn Fs>,
    /// The hardware model of each disk ([`model`]): empty or `None` for a disk means none;
    /// one entry applies to every disk.
    pub disk_models: Vec<Option<model::DiskModel>>,
    /// The rate of this node's link in each direction, bytes per second; `None`: no model.
    pub net_bytes_per_sec: Option<u64>,
    /// A crash drill: stop the process (as kill -9 would) at an armed step of the RAIDP write
    /// protocol (`weft serve node` reads it from `WEFT_CRASH_DRILL=DIR`).
    pub crash_drill: Option<raidp::CrashDrill>,
    /// Per disk (same indexes as `disks`), the directory of its Lstor, which gives the disk a
    /// RAIDP side (`--lstor PATH`); empty or `None` for a disk: no RAIDP on it.
    pub lstors: Vec<Option<PathBuf>>,
    /// TLS on the listener (with the client certificates it requires), or None for plain
    /// HTTP. The node's own requests (heartbeats, scrub reports) use the process's client
    /// TLS (`weft_auth::tls::install_client`).
    pub tls: Option<Arc<weft_auth::tls::ServerConfig>>,
    /// The address peers reach this node at, when it is not `listen` (a NAT, a proxy, a
    /// wildcard `0.0.0.0` listener): heartbeats announce `scheme://advertise`, and that is
    /// the endpoint meta hands to clients. `None`: the listening address.
    pub advertise: Option<String>,
}

impl NodeConfig {
    /// A config with no meta and the default heartbeat interval.
    pub fn new(
        node_id: u32,
        listen: SocketAddr,
        disks: Vec<PathBuf>,
        key: weft_auth::Key,
    ) -> NodeConfig {
        NodeConfig {
            node_id,
            listen,
            disks,
            meta_url: None,
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            rack: None,
            key,
            scrub: ScrubConfig::default(),
            thresholds: Thresholds::default(),
            fs: Arc::new(RealFs),
            disk_models: Vec::new(),
            net_bytes_per_sec: None,
            lstors: Vec::new(),
            crash_drill: None,
            tls: None,
            advertise: None,
        }
    }
}

/// Why a node could not start or stopped with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeError {
    /// The config is unusable (no disks, zero heartbeat interval, ...).
    Config(String),
    /// A disk directory could not be opened.
    Disk { index: usize, source: StoreError },
    /// The listen address could not be bound.
    Bind { addr: SocketAddr, source: std::io::Error },
    /// The HTTP server stopped with an error.
    Serve(std::io::Error),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Config(reason) => write!(f, "bad node config: {reason}"),
            NodeError::Disk { index, source } => write!(f, "disk {index}: {source}"),
            NodeError::Bind { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            NodeError::Serve(source) => write!(f, "http server failed: {source}"),
        }
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NodeError::Disk { source, .. } => Some(source),
            NodeError::Bind { source, .. } | NodeError::Serve(source) => Some(source),
            NodeError::Config(_) => None,
        }
    }
}

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) node_id: u32,
    pub(crate) rack: Option<u32>,
    pub(crate) disks: Vec<Disk>,
    pub(crate) metrics: metrics::Metrics,
    /// Each disk's hardware model, if it has one (same indexes as `disks`).
    pub(crate) models: Vec<Option<model::ModeledDisk>>,
    /// The node's link in and out, when modeled.
    pub(crate) link_in: Option<model::Link>,
    pub(crate) link_out: Option<model::Link>,
    /// Each disk's RAIDP side, when it was given an Lstor (same indexes as `disks`).
    pub(crate) raidp: Vec<Option<raidp::RaidpSide>>,
    pub(crate) crash_drill: Option<raidp::CrashDrill>,
}

/// A node that is serving. Stop it with [`RunningNode::stop`].
#[derive(Debug)]
pub struct RunningNode {
    local_addr: SocketAddr,
    /// What heartbeats announce: `scheme://advertise`, else `scheme://local_addr`.
    endpoint: String,
    stop: watch::Sender<bool>,
    server: JoinHandle<Result<(), NodeError>>,
    heartbeat: Option<JoinHandle<()>>,
    /// The scrub and inventory tasks.
    background: Vec<JoinHandle<()>>,
}

impl RunningNode {
    /// The address the node listens on (the real port when the config asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Base URL of the node's API as peers reach it, `http://ip:port` (`https://` with TLS):
    /// the advertised address when one was given, else the listening one.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// Stops accepting connections, lets requests in flight finish, stops heartbeats.
    pub async fn stop(self) -> Result<(), NodeError> {
        let _ = self.stop.send(true);
        if let Some(heartbeat) = self.heartbeat {
            let _ = heartbeat.await;
        }
        for task in self.background {
            let _ = task.await;
        }
        match self.server.await {
            Ok(result) => result,
            Err(join) => Err(NodeError::Serve(std::io::Error::other(join.to_string()))),
        }
    }
}

/// Opens the disks, binds the listen address and starts serving (and heartbeating, when
/// `meta_url` is set) in background tasks. Must be called inside a tokio runtime.
pub async fn bind(config: NodeConfig) -> Result<RunningNode, NodeError> {
    if config.disks.is_empty() {
        return Err(NodeError::Config("a node needs at least one disk".into()));
    }
    if config.key.principal() != weft_auth::Principal::Node(config.node_id) {
        return Err(NodeError::Config(format!(
            "the key given is {}'s, but this is node {}",
            config.key.principal(),
            config.node_id
        )));
    }
    if config.meta_url.is_some() && config.heartbeat_interval_ms == 0 {
        return Err(NodeError::Config("heartbeat_interval_ms must be positive".into()));
    }
    if config.scrub.interval_ms == 0 || config.scrub.max_bytes_per_s == 0 {
        return Err(NodeError::Config(
            "the scrub interval and its read-rate ceiling must be positive".into(),
        ));
    }
    if config.disk_models.len() > 1 && config.disk_models.len() != config.disks.len() {
        return Err(NodeError::Config(format!(
            "{} disk models for {} disks: give one model, or one per disk",
            config.disk_models.len(),
            config.disks.len()
        )));
    }
    if config.lstors.len() > config.disks.len() {
        return Err(NodeError::Config(format!(
            "{} Lstors for {} disks: give at most one per disk, in disk order",
            config.lstors.len(),
            config.disks.len()
        )));
    }
    if config.net_bytes_per_sec == Some(0) {
        return Err(NodeError::Config("the link rate must be positive".into()));
    }
    let models = (0..config.disks.len())
        .map(|index| {
            let model = match config.disk_models.len() {
                0 => None,
                1 => config.disk_models[0],
                _ => config.disk_models[index],
            };
            // Seeded by node and disk: every disk draws its own reproducible positions.
            let seed = (u64::from(config.node_id) << 16) ^ index as u64;
            model.map(|m| model::ModeledDisk::new(m, seed))
        })
        .collect();
    let paths = config.disks.clone();
    let (fs, thresholds) = (config.fs.clone(), config.thresholds);
    let disks = tokio::task::spawn_blocking(move || {
        paths
            .iter()
            .enumerate()
            .map(|(index, path)| {
                let disk = Disk::open_with(path, fs.clone())
                    .map_err(|source| NodeError::Disk { index, source })?;
                disk.set_thresholds(thresholds);
                Ok(disk)
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|join| NodeError::Config(format!("opening disks panicked: {join}")))??;
    let (node_id, paths, lstors) = (config.node_id, config.disks.clone(), config.lstors.clone());
    let failures: Vec<Option<String>> = disks.iter().map(Disk::failure).collect();
    let raidp = tokio::task::spawn_blocking(move || {
        (0..paths.len())
            .map(|index| {
                let lstor = lstors.get(index).cloned().flatten()?;
                let failed = failures[index].clone();
                Some(raidp::RaidpSide::open(node_id, index, &paths[index], &lstor, failed))
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|join| NodeError::Config(format!("opening Lstors panicked: {join}")))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| NodeError::Bind { addr: config.listen, source })?;
    let local_addr =
        listener.local_addr().map_err(|source| NodeError::Bind { addr: config.listen, source })?;
    let node = Arc::new(Node {
        node_id: config.node_id,
        rack: config.rack,
        disks,
        metrics: metrics::Metrics::default(),
        models,
        link_in: config.net_bytes_per_sec.map(model::Link::new),
        link_out: config.net_bytes_per_sec.map(model::Link::new),
        raidp,
        crash_drill: config.crash_drill.clone(),
    });
    let (stop, stopped) = watch::channel(false);
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let endpoint = match &config.advertise {
        Some(address) => format!("{scheme}://{address}"),
        None => format!("{scheme}://{local_addr}"),
    };
    let heartbeat = config.meta_url.clone().map(|meta_url| {
        tokio::spawn(heartbeat::run(
            node.clone(),
            meta_url,
            weft_auth::Signer::new(config.key.clone(), weft_auth::Audience::Meta),
            endpoint.clone(),
            config.heartbeat_interval_ms,
            stopped.clone(),
        ))
    });
    let reporter = config.meta_url.clone().map(|meta_url| scrub::Reporter {
        node_id: config.node_id,
        meta_url,
        signer: weft_auth::Signer::new(config.key.clone(), weft_auth::Audience::Meta),
    });
    let mut background = vec![tokio::spawn(scrub::run(
        node.clone(),
        config.scrub,
        reporter.clone(),
        stopped.clone(),
    ))];
    if let Some(reporter) = reporter {
        background.push(tokio::spawn(scrub::inventories(
            node.clone(),
            inventory_interval_ms(config.scrub.interval_ms),
            reporter,
            stopped.clone(),
        )));
    }
    let verifier = Arc::new(weft_auth::Verifier::for_node(config.key.clone()));
    let guard = weft_auth::axum_layer::Guard {
        verifier: verifier.clone(),
        max_body_bytes: api::MAX_SIGNED_BODY_BYTES,
        large_bodies: &[],
    };
    // Local reads: a modeled node has none (its IO is waited out in the data API).
    let modeled = node.models.iter().any(Option::is_some) || node.link_out.is_some();
    if !modeled {
        let port = local_addr.port();
        background.extend(local::start(node.clone(), verifier.clone(), port, stopped.clone()));
    }
    let app = api::router(node.clone(), guard);
    // Checksummed unit GETs are answered beside axum, with sendfile; axum gets the rest.
    let acceptor = weft_auth::tls::Acceptor::new(config.tls.clone());
    let listener =
        sendfile::SplitListener::start(listener, node, verifier, stopped.clone(), acceptor)
            .map_err(|source| NodeError::Bind { addr: config.listen, source })?;
    let mut server_stopped = stopped;
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = server_stopped.wait_for(|stop| *stop).await;
            })
            .await
            .map_err(NodeError::Serve)
    });
    tracing::info!(node_id = config.node_id, rack = ?config.rack, %local_addr, "node serving");
    Ok(RunningNode { local_addr, endpoint, stop, server, heartbeat, background })
}

/// Runs a node until `shutdown` completes, then stops it gracefully.
pub async fn serve(
    config: NodeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NodeError> {
    let node = bind(config).await?;
    shutdown.await;
    node.stop().await
}
