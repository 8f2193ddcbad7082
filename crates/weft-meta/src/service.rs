//! The meta HTTP service: node membership (heartbeats, up/down judged in `liveness.rs`),
//! cluster status, buckets, objects (in `objects.rs`), repairs (detector and executor routes,
//! in `repairs.rs`; unfound units and lost objects in `lost.rs`; the queue of replaced copies
//! to delete in `deletions.rs`),
//! transitions (regroup plans, commit, abort, lease renewal and expiry, in `transitions.rs`)
//! and garbage collection (the units meta references, expiry of abandoned writes, in
//! `gc.rs`), over one store: the redb file in meta's directory ([`RedbStore`], the default)
//! or a PostgreSQL database ([`crate::PgStore`], [`StoreLocation::Postgres`]). Routes,
//! statuses and error bodies: docs/meta-api.md.
//!
//! Invariants:
//! - The store is opened once, at [`bind`]; a second meta on the same directory fails there
//!   with redb's lock error, named clearly. Every store call runs on a blocking task.
//! - The clock lives here, not in the store: a heartbeat is recorded with the system time at
//!   receipt, and a node is down when meta has not heard from it for more than
//!   `down_after_ms` *of meta's running time* (judged at the time of each request by the one
//!   judgement of `liveness`, so a pause of meta is nobody's silence; nothing is stored for
//!   "down").
//! - Every error response has a JSON body `{"error": "<code>", "message": "..."}`.
//! - New objects are placed at the failure-domain level of [`MetaConfig::failure_domain`]
//!   (disk, node or rack; default node); a node's rack is the one its heartbeats name, else
//!   its own id. An object keeps the level it was placed with (stored in its placement), and
//!   its repairs keep that level's rules, whatever meta's level is later.
//! - Every request is authenticated before any handler runs (weft-auth's guard wraps the
//!   whole router): clients sign with the client key, node N with its node key. A node may
//!   call only `POST /v1/heartbeat`, for itself, and only once enrolled (`PUT /v1/nodes/{id}`,
//!   `weft node add`); everything else is 403 `forbidden`.
//! - No answer carries a secret: access-key records hold their secret sealed (meta refuses a
//!   record with a plain `secret_key` and seals those an older meta stored, at [`bind`]).
//! - A store whose disk failed (full, IO error) answers 503 `store_unavailable` naming the
//!   IO error, and reopens itself on a later request once the disk works (see `RedbStore`).
//!   Heartbeats it could not record must not read as dead nodes: within `down_after_ms` of
//!   a heartbeat that failed to record, a placement that finds too few up nodes answers 503
//!   `store_unavailable` with the store's error (never `too_few_nodes`), and the repair
//!   detector (and `under_protected_units`) judge silence only from `down_after_ms` after
//!   that failure, as after a start.
//! - A node's disk reported `"state":"full"` is read-only, not failed: no new object's unit
//!   and no repair destination goes there, its units are not queued for repair and stay
//!   readable. `/v1/status` counts the nearfull and full disks of up nodes.
//! - The geometric layout's bin stripes (objects of [`crate::GEOMETRIC_BUCKET`], `.weft-geo`)
//!   change only through the pack's plan and commit, repairs and GC: the generic object
//!   routes refuse to begin, commit, delete or transition one, and the bucket itself cannot
//!   be created, re-policied or deleted by a client (403 `internal_bucket`), since a stripe
//!   deleted by hand loses chunks of every object packed in it. Reads, listings and the abort
//!   of a pending write stay open (a failed pack aborts its own stripe writes).
//! - The repair detector is a task of the service: it starts at [`bind`] and has stopped,
//!   with every store call it made, before [`RunningMeta::stop`] returns, so the store is
//!   closed and another meta may open the directory.

use std::{
    collections::HashSet,
    fmt,
    future::Future,
    net::SocketAddr,
    path::PathBuf,
    sync::{atomic::AtomicU64, atomic::Ordering, Arc, RwLock},
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    body::Bytes,
    extract::{DefaultBodyLimit, Extension, Path, Request, State},
    http::{Method, StatusCode, Uri},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{get, post, put},
    Json, Router,
};
use serde_json::{json, Value};
use tokio::{sync::watch, task::JoinHandle};

use weft_auth::{axum_layer::Guard, ClusterSecret, Principal, SealKey, Verifier};

use crate::{
    store::{ENROLLED_NODES, ENROLMENT_MIGRATED},
    Heartbeat, MetaError, MetaStore, NodeRecord, Policy, RedbStore,
};

pub use weft_layout::FailureDomain;

mod deletions;
mod digest_pages;
mod gateway;
mod gc;
mod geometric;
mod inventory;
mod leader;
pub use leader::{DEFAULT_LEASE_MS, LEADER_LEASE};
mod liveness;
mod lost;
mod objects;
mod raidp;
mod repairs;
mod transitions;
mod versions;

pub use deletions::MAX_LISTED_DELETIONS;
pub use repairs::{
    RepairConfig, DEFAULT_FULL_RESCAN_MS, DEFAULT_REPAIR_SCAN_MS, LISTED_TASKS, MAX_BACKOFF_MS,
    MAX_DROPPED_PER_TAKE, MAX_LEASE_MS, MAX_REASON_BYTES, MIN_BACKOFF_MS, UNFOUND_BACKOFF_MS,
};

/// Default silence after which a node is reported down.
pub const DEFAULT_DOWN_AFTER_MS: u64 = 5000;

/// Name of the redb file inside [`MetaConfig::dir`].
pub const DB_FILE: &str = "meta.redb";

/// Largest request body meta accepts (heartbeats and policies are small).
const MAX_BODY_BYTES: usize = 1 << 20;

/// How meta is run.
#[derive(Clone, Debug)]
pub struct MetaConfig {
    /// Address to listen on; port 0 picks a free port (see [`RunningMeta::local_addr`]).
    pub listen: SocketAddr,
    /// Directory of the metadata; the store is the file [`DB_FILE`] inside it. Created if
    /// missing.
    pub dir: PathBuf,
    /// A node silent for more than this is reported down.
    pub down_after_ms: u64,
    /// The level at which the units of a group (and the blocks of a stripe) of a new object
    /// must not share a failure: distinct disks, nodes or racks.
    pub failure_domain: FailureDomain,
    /// The cluster secret: meta checks every request against keys derived from it.
    pub secret: ClusterSecret,
    /// Where the records are kept: redb in `dir` (the default) or a PostgreSQL database.
    pub store: StoreLocation,
    /// The leader lease's length ([`leader`]): with several metas on one database, a dead
    /// leader's duties (repair detection) resume elsewhere within about this long.
    pub lease_ms: u64,
    /// TLS on the listener (with the client certificates it requires), or None for plain
    /// HTTP.
    pub tls: Option<Arc<weft_auth::tls::ServerConfig>>,
}

/// Where meta keeps its records.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum StoreLocation {
    /// The redb file [`DB_FILE`] in [`MetaConfig::dir`].
    #[default]
    Redb,
    /// The PostgreSQL database at this URL (`postgres://user:password@host:port/db`); several
    /// metas may share it.
    Postgres(String),
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Redb => f.write_str("Redb"),
            // Never the password.
            StoreLocation::Postgres(url) => {
                write!(f, "Postgres({})", crate::pg_store::redacted(url))
            }
        }
    }
}

impl MetaConfig {
    /// A config with the default down timeout and failure domain node.
    pub fn new(listen: SocketAddr, dir: impl Into<PathBuf>, secret: ClusterSecret) -> MetaConfig {
        MetaConfig {
            listen,
            dir: dir.into(),
            down_after_ms: DEFAULT_DOWN_AFTER_MS,
            failure_domain: FailureDomain::default(),
            secret,
            store: StoreLocation::Redb,
            lease_ms: leader::DEFAULT_LEASE_MS,
            tls: None,
        }
    }
}

/// Why meta could not start or stopped with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServiceError {
    /// The config is unusable.
    Config(String),
    /// The store could not be opened (e.g. another meta holds its lock).
    Open { path: PathBuf, source: MetaError },
    /// The listen address could not be bound.
    Bind { addr: SocketAddr, source: std::io::Error },
    /// The HTTP server stopped with an error.
    Serve(std::io::Error),
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceError::Config(reason) => write!(f, "bad meta config: {reason}"),
            ServiceError::Open { path, source } => {
                write!(f, "cannot open the meta store {}: {source}", path.display())?;
                if source.to_string().to_ascii_lowercase().contains("already open") {
                    write!(f, " (is another weft meta running on this directory?)")?;
                }
                Ok(())
            }
            ServiceError::Bind { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            ServiceError::Serve(source) => write!(f, "http server failed: {source}"),
        }
    }
}

impl std::error::Error for ServiceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServiceError::Open { source, .. } => Some(source),
            ServiceError::Bind { source, .. } | ServiceError::Serve(source) => Some(source),
            ServiceError::Config(_) => None,
        }
    }
}

/// What every request handler shares.
struct Meta {
    store: Arc<dyn MetaStore>,
    down_after_ms: u64,
    /// The level new objects are placed at.
    failure_domain: FailureDomain,
    /// Meta's running clock and when it last heard each node: the one judgement of down.
    clock: Arc<liveness::RunningClock>,
    repair: RepairConfig,
    /// Repairs completed by relocation since this meta started.
    repairs_completed: AtomicU64,
    /// Units a reader found not matching their writer's digest (reports with
    /// `digest_mismatch`), since this meta started.
    digest_mismatches: AtomicU64,
    /// Nodes allowed to heartbeat (mirrors the store's [`ENROLLED_NODES`] records).
    enrolled: RwLock<HashSet<u32>>,
    /// Held across each enrolment change, so the set and the store change together.
    enrolling: tokio::sync::Mutex<()>,
    /// Objects whose units changed lately (inventories skip them).
    changes: inventory::Changes,
    /// What nodes' scrubs reported.
    scrub: inventory::ScrubState,
    /// The last heartbeat the store could not record: (when, the store's error).
    heartbeat_failure: std::sync::Mutex<Option<(u64, String)>>,
    /// The next new object's turn in the round-robin of placements' first domains
    /// ([`weft_layout::seed_for_turn`]); starts at a clock-drawn value.
    placement_turn: AtomicU64,
    /// Held across every change of the RAIDP state (`raidp`): allocations read, change and
    /// store it whole.
    raidp: tokio::sync::Mutex<()>,
    /// Held across every change of a geometric bucket's state (placement groups, fill, stripe
    /// numbers).
    geometric: tokio::sync::Mutex<()>,
    /// This meta among the replicas of its store, and whether it holds the leader lease.
    leadership: leader::Leadership,
}

impl Meta {
    /// `error` unless it is a `too_few_nodes` that heartbeats failing to record can explain:
    /// then 503 `store_unavailable` with the store's error, the real cause.
    fn unless_heartbeats_failed(&self, error: ApiError) -> ApiError {
        if error.body["error"] != "too_few_nodes" {
            return error;
        }
        let failed = self.heartbeat_failure.lock().expect("heartbeat failure lock").clone();
        match failed {
            Some((at, cause)) if now_ms().saturating_sub(at) <= self.down_after_ms => {
                let mut unavailable = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    format!(
                        "nodes may look down only because meta's store could not record their \
                         heartbeats: {cause}; retry once the store works again (then {})",
                        error.body["message"].as_str().unwrap_or("too few nodes were up")
                    ),
                );
                unavailable.body["cause"] = json!(cause);
                unavailable
            }
            _ => error,
        }
    }
}

type Shared = Arc<Meta>;

impl Meta {
    /// Who is down now (see `liveness`).
    fn liveness(&self) -> liveness::Liveness {
        self.clock.liveness(self.down_after_ms)
    }
}

/// Meta serving. Stop it with [`RunningMeta::stop`].
#[derive(Debug)]
pub struct RunningMeta {
    local_addr: SocketAddr,
    /// `https` with TLS, else `http`.
    scheme: &'static str,
    stop: watch::Sender<bool>,
    server: JoinHandle<Result<(), ServiceError>>,
    detector: JoinHandle<()>,
    /// The leader lease's renewals; gives the lease up as it ends.
    leading: JoinHandle<()>,
}

impl RunningMeta {
    /// The address meta listens on (the real port when the config asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Base URL of meta's API, `http://ip:port`.
    pub fn endpoint(&self) -> String {
        format!("{}://{}", self.scheme, self.local_addr)
    }

    /// Stops accepting connections and the repair detector, lets requests in flight finish,
    /// closes the store.
    pub async fn stop(self) -> Result<(), ServiceError> {
        let _ = self.stop.send(true);
        let served = match self.server.await {
            Ok(result) => result,
            Err(join) => Err(ServiceError::Serve(std::io::Error::other(join.to_string()))),
        };
        if let Err(join) = self.detector.await {
            tracing::error!(%join, "the repair detector panicked");
        }
        if let Err(join) = self.leading.await {
            tracing::error!(%join, "the leader lease's task panicked");
        }
        served
    }
}

/// Opens the store, binds the listen address and starts serving in a background task, with
/// the default repair detector settings. Must be called inside a tokio runtime.
pub async fn bind(config: MetaConfig) -> Result<RunningMeta, ServiceError> {
    bind_with_repair(config, RepairConfig::default()).await
}

/// [`bind`] with the repair detector's settings. (They are not in [`MetaConfig`] so that
/// code building a `MetaConfig` literal keeps compiling.)
pub async fn bind_with_repair(
    config: MetaConfig,
    repair: RepairConfig,
) -> Result<RunningMeta, ServiceError> {
    bind_with_faults(config, repair, crate::StoreFaults::new()).await
}

/// [`bind_with_repair`] with the store file's writes under `faults`: fault-injection tests
/// make them fail (e.g. with ENOSPC, as a full disk does) and heal them, through the real
/// service.
pub async fn bind_with_faults(
    config: MetaConfig,
    repair: RepairConfig,
    faults: crate::StoreFaults,
) -> Result<RunningMeta, ServiceError> {
    if config.down_after_ms == 0 {
        return Err(ServiceError::Config("down_after_ms must be positive".into()));
    }
    if config.lease_ms < 100 {
        return Err(ServiceError::Config("lease_ms must be at least 100".into()));
    }
    if repair.scan_ms == 0 || repair.full_rescan_ms == 0 {
        return Err(ServiceError::Config(
            "the repair scan_ms and full_rescan_ms must be positive".into(),
        ));
    }
    let dir = config.dir.clone();
    let (path, store_location) = match &config.store {
        StoreLocation::Redb => (dir.join(DB_FILE), StoreLocation::Redb),
        StoreLocation::Postgres(url) => {
            (PathBuf::from(crate::pg_store::redacted(url)), config.store.clone())
        }
    };
    let opening = path.clone();
    let store = tokio::task::spawn_blocking(move || -> Result<Arc<dyn MetaStore>, ServiceError> {
        std::fs::create_dir_all(&dir).map_err(|e| ServiceError::Open {
            path: opening.clone(),
            source: MetaError::Store { reason: format!("cannot create {}: {e}", dir.display()) },
        })?;
        let opened: Result<Arc<dyn MetaStore>, MetaError> = match store_location {
            StoreLocation::Redb => {
                RedbStore::open_with_faults(&opening, faults).map(|s| Arc::new(s) as _)
            }
            StoreLocation::Postgres(url) => crate::PgStore::open(&url).map(|s| Arc::new(s) as _),
        };
        opened.map_err(|source| ServiceError::Open { path: opening, source })
    })
    .await
    .map_err(|join| ServiceError::Config(format!("opening the store panicked: {join}")))??;
    let seal = config.secret.seal_key();
    let (store, enrolled) = {
        tokio::task::spawn_blocking(move || {
            let enrolled = load_enrolment(store.as_ref())?;
            seal_plain_access_keys(store.as_ref(), &seal)?;
            Ok::<_, MetaError>((store, enrolled))
        })
        .await
        .map_err(|join| ServiceError::Config(format!("loading enrolment panicked: {join}")))?
        .map_err(|source| ServiceError::Open { path: path.clone(), source })?
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServiceError::Bind { addr: config.listen, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServiceError::Bind { addr: config.listen, source })?;
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let acceptor = weft_auth::tls::Acceptor::new(config.tls.clone());
    let listener = weft_auth::tls::Listener::start(listener, acceptor)
        .map_err(|source| ServiceError::Bind { addr: config.listen, source })?;
    let meta = Arc::new(Meta {
        store,
        down_after_ms: config.down_after_ms,
        failure_domain: config.failure_domain,
        clock: Arc::new(liveness::RunningClock::new()),
        repair,
        repairs_completed: AtomicU64::new(0),
        digest_mismatches: AtomicU64::new(0),
        enrolled: RwLock::new(enrolled),
        enrolling: tokio::sync::Mutex::new(()),
        changes: inventory::Changes::new(now_ms()),
        scrub: inventory::ScrubState::default(),
        heartbeat_failure: std::sync::Mutex::new(None),
        placement_turn: AtomicU64::new(now_ms()),
        raidp: tokio::sync::Mutex::new(()),
        geometric: tokio::sync::Mutex::new(()),
        leadership: leader::Leadership::new(format!("{scheme}://{local_addr}"), config.lease_ms),
    });
    // The first ask before anything runs: a meta alone leads from its first request on.
    {
        let meta = meta.clone();
        let asked =
            tokio::task::spawn_blocking(move || meta.leadership.ask(meta.store.as_ref())).await;
        match asked {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not ask for the leader lease yet"),
            Err(join) => {
                return Err(ServiceError::Config(format!("the lease ask panicked: {join}")))
            }
        }
    }
    let guard = Guard {
        verifier: Arc::new(Verifier::for_meta(&config.secret)),
        max_body_bytes: MAX_BODY_BYTES,
        large_bodies: &[
            (INVENTORY_SUFFIX, weft_store::inventory::MAX_INVENTORY_BYTES),
            // A pack's commit names every stripe's unit digests (only the geometric route
            // takes one this large: its own body limit below; other commits keep theirs).
            (COMMIT_SUFFIX, geometric::MAX_COMMIT_BYTES),
        ],
    };
    let (stop, mut stopped) = watch::channel(false);
    tokio::spawn(liveness::RunningClock::tick(meta.clock.clone(), stopped.clone()));
    let detector = tokio::spawn(repairs::detect(meta.clone(), stopped.clone()));
    let leading = tokio::spawn(leader::lead(meta.clone(), stopped.clone()));
    let app = router(meta, guard);
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            })
            .await
            .map_err(ServiceError::Serve)
    });
    tracing::info!(
        %local_addr,
        store = %path.display(),
        down_after_ms = config.down_after_ms,
        failure_domain = %config.failure_domain,
        "meta serving"
    );
    Ok(RunningMeta { local_addr, scheme, stop, server, detector, leading })
}

/// Runs meta until `shutdown` completes, then stops it gracefully.
pub async fn serve(
    config: MetaConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServiceError> {
    let meta = bind(config).await?;
    shutdown.await;
    meta.stop().await
}

fn router(meta: Shared, guard: Guard) -> Router {
    Router::new()
        .route("/v1/heartbeat", post(heartbeat))
        .route("/v1/nodes", get(nodes))
        .route("/v1/nodes/{id}", put(enrol_node).delete(remove_node))
        .route("/v1/nodes/{id}/bad-units", post(inventory::bad_units))
        .route(
            "/v1/nodes/{id}/disks/{disk}/inventory",
            post(inventory::inventory)
                .layer(DefaultBodyLimit::max(weft_store::inventory::MAX_INVENTORY_BYTES)),
        )
        .route("/v1/status", get(status))
        .route("/v1/buckets", get(list_buckets))
        .route("/v1/buckets/{name}", put(create_bucket).get(get_bucket).delete(delete_bucket))
        .route("/v1/buckets/{name}/policy", put(set_bucket_policy))
        .route("/v1/buckets/{name}/objects", get(objects::list_objects))
        .route("/v1/buckets/{name}/versioning", put(versions::set_versioning))
        .route("/v1/buckets/{name}/versions", get(versions::list_versions))
        .route("/v1/buckets/{name}/object-lock", put(versions::set_object_lock))
        .route("/v1/buckets/{name}/locks/{*key}", put(versions::set_version_lock))
        .route("/v1/buckets/{name}/attributes/{*key}", put(versions::set_version_attributes))
        .route(
            "/v1/buckets/{name}/versions/{*key}",
            get(versions::get_version).delete(versions::delete_version),
        )
        .route(
            "/v1/buckets/{name}/objects/{*key}",
            post(objects::post_object).get(objects::get_object).delete(objects::delete_object),
        )
        .route("/v1/repairs", get(repairs::list).post(repairs::report))
        .route("/v1/repairs/take", post(repairs::take))
        .route("/v1/repairs/lost", post(lost::mark_lost))
        .route("/v1/repairs/{task_id}/complete", post(repairs::complete))
        .route("/v1/repairs/{task_id}/fail", post(repairs::fail))
        .route("/v1/transitions", get(transitions::list).post(transitions::begin))
        .route("/v1/transitions/commit", post(transitions::commit))
        .route("/v1/transitions/digests", post(transitions::digests))
        .route("/v1/transitions/abort", post(transitions::abort))
        .route("/v1/transitions/renew", post(transitions::renew))
        .route("/v1/transitions/expire", post(transitions::expire))
        .route("/v1/transitions/{bucket}/{*key}", get(transitions::get))
        .route("/v1/records/{namespace}", get(gateway::list))
        .route(
            "/v1/records/{namespace}/{*name}",
            put(gateway::put).get(gateway::get).delete(gateway::delete),
        )
        .route("/v1/raidp", get(raidp::map))
        .route("/v1/raidp/plan", get(raidp::plan))
        .route("/v1/raidp/recovered", post(raidp::recovered))
        .route("/v1/raidp/usage", get(raidp::usage))
        .route("/v1/raidp/reclaim", post(raidp::reclaim))
        .route("/v1/raidp/reclaimed", post(raidp::reclaimed))
        .route("/v1/raidp/update", post(raidp::update))
        .route("/v1/geometric/{bucket}", get(geometric::groups))
        .route("/v1/geometric/{bucket}/plan", post(geometric::plan))
        .route(
            "/v1/geometric/{bucket}/commit",
            post(geometric::commit).layer(DefaultBodyLimit::max(geometric::MAX_COMMIT_BYTES)),
        )
        .route("/v1/deletions", get(deletions::list))
        .route("/v1/deletions/done", post(deletions::done))
        .route("/v1/references", get(gc::references))
        .route("/v1/writes/expire", post(gc::expire_writes))
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(nodes_only_heartbeat))
        .layer(middleware::from_fn_with_state(guard, weft_auth::axum_layer::require_signature))
        .with_state(meta)
}

/// Path suffix of the inventory route, whose digests may be larger than other bodies.
const INVENTORY_SUFFIX: &str = "/inventory";
/// The suffix of commit routes (the pack's commit may be large: see the guard).
const COMMIT_SUFFIX: &str = "/commit";

/// Whether a node's key opens `method path`: its heartbeat and its scrub reports (the
/// handlers then check that the node reports about itself).
fn node_route(method: &Method, path: &str) -> bool {
    if method != Method::POST {
        return false;
    }
    if path == "/v1/heartbeat" {
        return true;
    }
    let Some(rest) = path.strip_prefix("/v1/nodes/") else { return false };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(parts.as_slice(), [_, "bad-units"] | [_, "disks", _, "inventory"])
}

/// Authorisation after authentication: a node's key opens `POST /v1/heartbeat` and its
/// scrub reports ([`node_route`]) and nothing else (the handlers then check that the node
/// speaks for itself).
async fn nodes_only_heartbeat(request: Request, next: Next) -> Response {
    let principal = request.extensions().get::<Principal>().copied();
    match principal {
        Some(Principal::Client) => next.run(request).await,
        Some(Principal::Node(_)) if node_route(request.method(), request.uri().path()) => {
            next.run(request).await
        }
        Some(who @ Principal::Node(_)) => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{who} may only send heartbeats and scrub reports; {} needs the client key",
                request.uri().path()
            ),
        )
        .into_response(),
        None => ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", "no verified principal")
            .into_response(),
    }
}

/// The enrolled node ids, enrolling once every node an older meta knew (it had no
/// enrolment), so an upgrade does not lock the cluster's own nodes out.
fn load_enrolment(store: &dyn MetaStore) -> Result<HashSet<u32>, MetaError> {
    let mut migrated = false;
    let mut enrolled = HashSet::new();
    for_each_record(store, ENROLLED_NODES, |name, _| {
        match name.parse::<u32>() {
            Ok(id) => {
                enrolled.insert(id);
            }
            Err(_) => migrated |= name == ENROLMENT_MIGRATED,
        }
        Ok(())
    })?;
    if !migrated {
        for node in store.list_nodes()? {
            let value = json!({ "enrolled_ms": now_ms(), "migrated": true });
            store.put_record(ENROLLED_NODES, &node.node_id.to_string(), &value, false)?;
            enrolled.insert(node.node_id);
        }
        store.put_record(
            ENROLLED_NODES,
            ENROLMENT_MIGRATED,
            &json!({ "at_ms": now_ms() }),
            false,
        )?;
    }
    Ok(enrolled)
}

/// Seals the plain secrets of access keys an older meta stored.
fn seal_plain_access_keys(store: &dyn MetaStore, seal: &SealKey) -> Result<(), MetaError> {
    for_each_record(store, gateway::ACCESS_KEYS, |name, value| {
        if let Some(sealed) = gateway::sealed_key_record(seal, name, value) {
            store.put_record(gateway::ACCESS_KEYS, name, &sealed, false)?;
            tracing::info!(access_key = %name, "sealed the secret of an access key stored in the clear");
        }
        Ok(())
    })
}

/// Calls `visit` on every record of `namespace`, a page at a time.
fn for_each_record(
    store: &dyn MetaStore,
    namespace: &str,
    mut visit: impl FnMut(&str, &Value) -> Result<(), MetaError>,
) -> Result<(), MetaError> {
    let mut after: Option<String> = None;
    loop {
        let page = store.list_records(namespace, "", after.as_deref(), crate::MAX_LIST_LIMIT)?;
        for (name, value) in &page {
            visit(name, value)?;
        }
        if page.len() < crate::MAX_LIST_LIMIT {
            return Ok(());
        }
        after = page.last().map(|(name, _)| name.clone());
    }
}

/// A node id in a path: a decimal u32, else 400 with the services' JSON error body.
fn node_id_of(text: &str) -> Result<u32, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "{text:?} is not a node id (a number from 0 to {})",
            u32::MAX
        ))
    })
}

/// `PUT /v1/nodes/{id}`: enrol node `id` (it may then heartbeat). Idempotent; answers
/// `{"id":N,"enrolled":true,"new":bool}`.
async fn enrol_node(
    State(meta): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = node_id_of(&id)?;
    let _changing = meta.enrolling.lock().await;
    let known = meta.enrolled.read().expect("enrolment").contains(&id);
    if !known {
        let value = json!({ "enrolled_ms": now_ms() });
        blocking(&meta, move |store| {
            store.put_record(ENROLLED_NODES, &id.to_string(), &value, false)
        })
        .await?;
        meta.enrolled.write().expect("enrolment").insert(id);
        tracing::info!(node_id = id, "node enrolled");
    }
    Ok(Json(json!({ "id": id, "enrolled": true, "new": !known })))
}

/// `DELETE /v1/nodes/{id}`: node `id` may no longer heartbeat (it is then judged down and
/// its units repaired elsewhere). 404 `no_such_node` when it was not enrolled.
async fn remove_node(
    State(meta): State<Shared>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = node_id_of(&id)?;
    let _changing = meta.enrolling.lock().await;
    let removed = blocking(&meta, move |store| {
        let removed = store.delete_record(ENROLLED_NODES, &id.to_string())?;
        // Copies queued for deletion on it will never be deleted by anyone.
        deletions::forget_node(store, id)?;
        Ok(removed)
    })
    .await?;
    let was = meta.enrolled.write().expect("enrolment").remove(&id);
    if removed.is_none() && !was {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_such_node",
            format!("node {id} is not enrolled"),
        ));
    }
    tracing::info!(node_id = id, "node removed from enrolment");
    Ok(Json(json!({ "id": id, "enrolled": false })))
}

/// Milliseconds since the Unix epoch, by the system clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// An error response: status plus JSON body.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    body: Value,
}

impl ApiError {
    fn new(status: StatusCode, error: &str, message: impl Into<String>) -> ApiError {
        ApiError { status, body: json!({ "error": error, "message": message.into() }) }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
}

impl From<MetaError> for ApiError {
    fn from(error: MetaError) -> ApiError {
        let message = error.to_string();
        let (status, code) = match &error {
            MetaError::NoSuchBucket { .. } => (StatusCode::NOT_FOUND, "no_such_bucket"),
            MetaError::NoSuchKey { .. } => (StatusCode::NOT_FOUND, "no_such_key"),
            MetaError::NoSuchVersion { .. } => (StatusCode::NOT_FOUND, "no_such_version"),
            MetaError::NotVersionable { .. } => (StatusCode::BAD_REQUEST, "not_versionable"),
            MetaError::InvalidBucketState { .. } => (StatusCode::CONFLICT, "invalid_bucket_state"),
            MetaError::ObjectLockNotEnabled { .. } => {
                (StatusCode::BAD_REQUEST, "object_lock_not_enabled")
            }
            MetaError::InvalidLock { .. } => (StatusCode::BAD_REQUEST, "invalid_lock"),
            MetaError::ObjectLocked { .. } => (StatusCode::FORBIDDEN, "object_locked"),
            MetaError::NoSuchWrite { .. } => (StatusCode::CONFLICT, "no_such_write"),
            MetaError::PreconditionFailed { .. } => {
                (StatusCode::PRECONDITION_FAILED, "precondition_failed")
            }
            MetaError::InvalidAttributes { .. } => (StatusCode::BAD_REQUEST, "invalid_attributes"),
            MetaError::BucketExists { .. } => (StatusCode::CONFLICT, "bucket_exists"),
            MetaError::BucketNotEmpty { .. } => (StatusCode::CONFLICT, "bucket_not_empty"),
            MetaError::InvalidName { .. } => (StatusCode::BAD_REQUEST, "invalid_name"),
            MetaError::InvalidRecord { .. } => (StatusCode::BAD_REQUEST, "invalid_policy"),
            MetaError::InvalidDigests { .. } => (StatusCode::BAD_REQUEST, "invalid_digests"),
            MetaError::NoSuchUnit { .. } => (StatusCode::BAD_REQUEST, "invalid_unit"),
            MetaError::LeaseLost { .. } => (StatusCode::CONFLICT, "lease_lost"),
            MetaError::PlacementRefused { .. } => (StatusCode::CONFLICT, "placement_refused"),
            MetaError::NoSuchTransition { .. } => (StatusCode::NOT_FOUND, "no_such_transition"),
            MetaError::TransitionConflict { .. } => (StatusCode::CONFLICT, "transition_conflict"),
            MetaError::RecordExists { .. } => (StatusCode::CONFLICT, "record_exists"),
            MetaError::RecordChanged { .. } => (StatusCode::CONFLICT, "record_changed"),
            MetaError::NoSuchNamespace { .. } => (StatusCode::NOT_FOUND, "no_such_namespace"),
            MetaError::StoreUnavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "store"),
        };
        if status.is_server_error() {
            tracing::error!(%message, "meta store failed");
        }
        let mut api = ApiError::new(status, code, message);
        match &error {
            MetaError::NoSuchTransition { pending, .. } => api.body["pending"] = json!(pending),
            MetaError::StoreUnavailable { reason } => api.body["cause"] = json!(reason),
            MetaError::TransitionConflict { conflict, .. } => {
                api.body["reason"] = json!(conflict.code());
            }
            _ => {}
        }
        api
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// Runs a blocking store call on a blocking task.
async fn blocking<T: Send + 'static>(
    meta: &Shared,
    call: impl FnOnce(&dyn MetaStore) -> Result<T, MetaError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = meta.store.clone();
    tokio::task::spawn_blocking(move || call(store.as_ref()))
        .await
        .map_err(|join| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("store task failed: {join}"),
            )
        })?
        .map_err(ApiError::from)
}

fn node_state(node: &NodeRecord, live: &liveness::Liveness) -> &'static str {
    if live.is_down(node) {
        "down"
    } else {
        "up"
    }
}

fn node_json(node: &NodeRecord, live: &liveness::Liveness) -> Value {
    json!({
        "id": node.node_id,
        "state": node_state(node, live),
        "pid": node.pid,
        "endpoint": node.endpoint,
        "rack": node.rack_id(),
        "last_heartbeat_ms": node.last_heartbeat_ms,
        "disks": node.disks,
    })
}

async fn heartbeat(
    State(meta): State<Shared>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let heartbeat: Heartbeat = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not a heartbeat: {e}")))?;
    let id = heartbeat.node_id;
    if principal != Principal::Node(id) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "a heartbeat of node {id} must be signed with node {id}'s key, not {principal}'s"
            ),
        ));
    }
    let cached = meta.enrolled.read().expect("enrolment").contains(&id);
    // Another meta on the same store may have enrolled it: the store decides.
    let enrolled = cached
        || blocking(&meta, move |store| store.get_record(ENROLLED_NODES, &id.to_string()))
            .await?
            .is_some();
    if enrolled && !cached {
        meta.enrolled.write().expect("enrolment").insert(id);
    }
    if !enrolled {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_enrolled",
            format!(
                "node {id} is not enrolled in this cluster; enrol it with `weft node add {id}`"
            ),
        ));
    }
    if heartbeat.endpoint.is_empty() {
        return Err(ApiError::bad_request("the heartbeat has an empty endpoint"));
    }
    let now = now_ms();
    // Heard, whether or not the store can record it: a store that fails must not make
    // live nodes look silent.
    meta.clock.heard(id);
    let record = match blocking(&meta, move |store| store.record_heartbeat(&heartbeat, now)).await {
        Ok(record) => record,
        Err(error) => {
            let cause = error.body["message"].as_str().unwrap_or("?").to_owned();
            let cause = error.body["cause"].as_str().map_or(cause, str::to_owned);
            *meta.heartbeat_failure.lock().expect("heartbeat failure lock") =
                Some((now_ms(), cause));
            return Err(error);
        }
    };
    tracing::debug!(node_id = record.node_id, endpoint = %record.endpoint, "heartbeat");
    Ok(Json(node_json(&record, &meta.liveness())))
}

async fn nodes(State(meta): State<Shared>) -> Result<Json<Value>, ApiError> {
    let nodes = blocking(&meta, |store| store.list_nodes()).await?;
    let live = meta.liveness();
    let nodes: Vec<Value> = nodes.iter().map(|n| node_json(n, &live)).collect();
    Ok(Json(json!({
        "down_after_ms": meta.down_after_ms,
        "failure_domain": meta.failure_domain.to_string(),
        "nodes": nodes,
    })))
}

async fn status(State(meta): State<Shared>) -> Result<Json<Value>, ApiError> {
    let live = meta.liveness();
    let judged = live.clone();
    let (nodes, repair_queue, buckets, under_protected, unfound, transitions, replicas) =
        blocking(&meta, move |store| {
            let nodes = store.list_nodes()?;
            let failures = repairs::Failures::judge(&nodes, &judged);
            let under_protected = repairs::under_protected_units(store, &failures)?;
            let (units, objects) = lost::unfound_counts(store)?;
            let unfound = (units, objects, lost::lost_count(store)?);
            let (queue, buckets) = (store.repair_queue_len()?, store.list_buckets()?.len());
            let transitions = (store.transition_count()?, store.object_totals()?);
            let replicas = (store.list_replicas()?, store.get_lease(leader::LEADER_LEASE)?);
            Ok((nodes, queue, buckets, under_protected, unfound, transitions, replicas))
        })
        .await?;
    let (replicas, lease) = replicas;
    let (transitions, totals) = transitions;
    let now = now_ms();
    // The metas of this store that recorded themselves lately (each does every lease / 3).
    let fresh_ms = 3 * meta.leadership.lease_ms;
    let metas: Vec<Value> = replicas
        .iter()
        .filter(|r| r.seen_ms.saturating_add(fresh_ms) >= now)
        .map(|r| {
            let holder = leader::holder_name(&r.endpoint, r.pid);
            let leader = lease.as_ref().is_some_and(|l| l.holder == holder && l.deadline_ms > now);
            json!({
                "endpoint": r.endpoint,
                "pid": r.pid,
                "leader": leader,
                "started_ms": r.started_ms,
                "seen_ms": r.seen_ms,
                "this": r.endpoint == meta.leadership.endpoint && r.pid == std::process::id(),
            })
        })
        .collect();
    let down = nodes.iter().filter(|n| live.is_down(n)).count();
    // Capacity of the disks of up nodes that are not failed (a down node's report is stale).
    let count = |state: weft_wire::DiskState| {
        nodes
            .iter()
            .filter(|n| !live.is_down(n))
            .flat_map(|n| &n.disks)
            .filter(|d| d.failed.is_none() && d.state == state)
            .count()
    };
    let (nearfull_disks, full_disks) =
        (count(weft_wire::DiskState::Nearfull), count(weft_wire::DiskState::Full));
    let nodes: Vec<Value> = nodes.iter().map(|n| node_json(n, &live)).collect();
    Ok(Json(json!({
        "nodes_up": nodes.len() - down,
        "nodes_down": down,
        "nearfull_disks": nearfull_disks,
        "full_disks": full_disks,
        "failure_domain": meta.failure_domain.to_string(),
        "nodes": nodes,
        "buckets": buckets,
        "under_protected_units": under_protected,
        "repair_queue": repair_queue,
        "repairs_completed": meta.repairs_completed.load(Ordering::Relaxed),
        "transitions_pending": transitions,
        "digest_mismatches": meta.digest_mismatches.load(Ordering::Relaxed),
        "missing_units": meta.scrub.missing_units(),
        "bad_units_reported": meta.scrub.bad_units_reported.load(Ordering::Relaxed),
        "inventories": meta.scrub.inventories_json(),
        "unfound_units": unfound.0,
        "unfound_objects": unfound.1,
        "lost_objects": unfound.2,
        "meta": metas,
        "objects": totals.objects,
        "object_bytes": totals.bytes,
        "stored_by_size": usage_json(&totals),
    })))
}

/// The usage by size of `/v1/status` (`stored_by_size`): one entry per size class, smallest
/// first, `{"min_bytes","max_bytes" (null for the last),"objects","bytes","stored_bytes",
/// "stored_per_byte" (null when empty)}`, over striped objects (RAIDP and packed objects and
/// delete markers are not counted; noncurrent versions are).
fn usage_json(totals: &crate::ObjectTotals) -> Value {
    let bounds = crate::SIZE_CLASS_BOUNDS;
    totals
        .by_size
        .iter()
        .enumerate()
        .map(|(class, usage)| {
            json!({
                "min_bytes": if class == 0 { 0 } else { bounds[class - 1] },
                "max_bytes": bounds.get(class),
                "objects": usage.objects,
                "bytes": usage.bytes,
                "stored_bytes": usage.stored_bytes,
                "stored_per_byte": (usage.bytes > 0)
                    .then(|| usage.stored_bytes as f64 / usage.bytes as f64),
            })
        })
        .collect()
}

/// weft's default policy: rs(6,3), stripe width 2, 1 MiB cells, 8 MiB blocks. A new bucket
/// gets it when its creator names no code, on a cluster of at least 9 failure domains; see
/// [`default_policy_for`] for smaller clusters.
pub fn default_policy_json() -> Value {
    json!({
        "code": "rs(6,3)",
        "stripe_width": 2,
        "cell_bytes": 1u64 << 20,
        "block_bytes": 8u64 << 20,
    })
}

/// The default codes, widest first: a bucket created without a code gets the first one its
/// cluster can hold (n failure domains), so a new cluster's buckets can be written at once.
pub const DEFAULT_CODES: [(&str, usize); 3] = [("rs(6,3)", 9), ("rs(4,2)", 6), ("rs(2,1)", 3)];

/// The default policy of a new bucket on a cluster of `domains` failure domains: rs(6,3), or
/// on fewer than 9 domains the widest of rs(4,2), rs(2,1) that fits (rs(2,1) below 3, where
/// nothing fits and the creation is refused naming the numbers). `domains` 0 (no node known
/// yet) gives rs(6,3).
pub fn default_policy_for(domains: usize) -> Value {
    let mut policy = default_policy_json();
    if domains > 0 {
        let code = DEFAULT_CODES
            .iter()
            .find(|(_, needed)| *needed <= domains)
            .unwrap_or(&DEFAULT_CODES[DEFAULT_CODES.len() - 1]);
        policy["code"] = json!(code.0);
    }
    policy
}

/// Failure domains of `level` spanned by every disk meta knows that has not failed — up or
/// down, full or not: what the cluster could hold a policy on once its nodes are back.
fn cluster_domains(nodes: &[NodeRecord], level: FailureDomain) -> usize {
    nodes
        .iter()
        .flat_map(|n| {
            n.disks.iter().filter(|d| d.failed.is_none()).map(|d| n.disk_location(d.index))
        })
        .map(|d| d.domain(level))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// `409 policy_too_wide` unless a cluster of `domains` failure domains can hold `policy`
/// (its n units, and its stripe width, on distinct domains). Nothing is checked while meta
/// knows no node (a cluster being set up).
fn check_fits(
    policy: &Policy,
    nodes: usize,
    domains: usize,
    level: FailureDomain,
) -> Result<(), ApiError> {
    let needed = policy.n().max(policy.stripe_width);
    if nodes == 0 || domains >= needed {
        return Ok(());
    }
    let names = objects::domains_name(level);
    let mut error = ApiError::new(
        StatusCode::CONFLICT,
        "policy_too_wide",
        format!(
            "{} with stripe width {} needs {needed} distinct {names}, but the cluster has \
             {domains} ({nodes} nodes known): every write would fail. Use a smaller code \
             (e.g. {}) or stripe width, or add nodes first",
            policy.code,
            policy.stripe_width,
            DEFAULT_CODES.iter().find(|(_, n)| *n <= domains).map_or("rep(2)", |c| c.0),
        ),
    );
    error.body["needed"] = json!(needed);
    error.body["domains"] = json!(domains);
    error.body["nodes"] = json!(nodes);
    error.body["failure_domain"] = json!(level.to_string());
    Err(error)
}

/// The known nodes' count and failure domains at meta's level.
async fn cluster_size(meta: &Shared) -> Result<(usize, usize), ApiError> {
    let level = meta.failure_domain;
    blocking(meta, move |store| {
        let nodes = store.list_nodes()?;
        Ok((nodes.len(), cluster_domains(&nodes, level)))
    })
    .await
}

/// A policy object's fields laid over `policy` (JSON of a `Policy`), checked.
fn parse_policy_over(body: &[u8], mut policy: Value) -> Result<Policy, ApiError> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        let given: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
        let Value::Object(fields) = given else {
            return Err(ApiError::bad_request(
                "the body must be a policy object like {\"code\":\"rs(6,3)\",\"stripe_width\":2}",
            ));
        };
        for (name, value) in fields {
            if !policy.as_object().is_some_and(|p| p.contains_key(&name)) {
                return Err(ApiError::bad_request(format!(
                    "unknown policy field {name:?}: use code, stripe_width, cell_bytes, \
                     block_bytes"
                )));
            }
            policy[name] = value;
        }
    }
    let policy: Policy = serde_json::from_value(policy)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_policy", e.to_string()))?;
    check_policy(&policy)?;
    Ok(policy)
}

/// Smallest cell a policy may ask for: with cells and blocks of at least 4 KiB, an object
/// has at most one data unit per 4 KiB (plus its parity), however the policy is set.
pub const MIN_CELL_BYTES: u64 = 4096;

/// Smallest block a policy may ask for (see [`MIN_CELL_BYTES`]).
pub const MIN_BLOCK_BYTES: u64 = 4096;

/// Checks a policy given to meta (bucket default, object, transition target): the layout's
/// own limits, then meta's floors on cell and block sizes. 400 `invalid_policy` otherwise.
fn check_policy(policy: &Policy) -> Result<(), ApiError> {
    let invalid =
        |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_policy", message);
    policy.validate().map_err(|e| invalid(e.to_string()))?;
    if policy.cell_bytes < MIN_CELL_BYTES || policy.block_bytes < MIN_BLOCK_BYTES {
        return Err(invalid(format!(
            "cells of {} bytes and blocks of {} bytes are too small: meta needs cells of at \
             least {MIN_CELL_BYTES} bytes and blocks of at least {MIN_BLOCK_BYTES} bytes \
             (smaller ones make a unit file per few bytes)",
            policy.cell_bytes, policy.block_bytes
        )));
    }
    Ok(())
}

async fn create_bucket(
    State(meta): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    refuse_internal_change(&name, "create the bucket")?;
    // A geometric bucket of this name deleted with stripes still to drop: finish, or wait
    // (a bucket that exists is refused below as it always was).
    let dropping = name.clone();
    let must_wait = blocking(&meta, move |store| {
        let (_, done) = geometric::drop_stripes(store, &dropping, geometric::MAX_STRIPES_DROPPED)?;
        let absent = matches!(store.get_bucket(&dropping), Err(MetaError::NoSuchBucket { .. }));
        if absent {
            // Configurations a deletion cut short left behind do not pass to a new bucket.
            drop_bucket_config(store, &dropping)?;
        }
        Ok(!done && absent)
    })
    .await?;
    if must_wait {
        let mut error = ApiError::new(
            StatusCode::CONFLICT,
            "bucket_being_dropped",
            format!(
                "a deleted geometric bucket named {name} still has bin stripes being dropped; \
                 try again in a minute"
            ),
        );
        error.body["bucket"] = json!(name);
        return Err(error);
    }
    let (body, config) = split_bucket_config(&body)?;
    let (nodes, domains) = cluster_size(&meta).await?;
    if let Some(asked) = raidp_request(&body)? {
        let response = create_raidp_bucket(meta.clone(), name.clone(), asked).await?;
        write_bucket_config(&meta, name, config).await?;
        return Ok(response);
    }
    if let Some(asked) = geometric::request(&body)? {
        let record = geometric::create_bucket(meta.clone(), name.clone(), asked, domains).await?;
        write_bucket_config(&meta, name, config).await?;
        return Ok((StatusCode::CREATED, Json(json!(record))).into_response());
    }
    let policy = parse_policy_over(&body, default_policy_for(domains))?;
    check_fits(&policy, nodes, domains, meta.failure_domain)?;
    let now = now_ms();
    let record = blocking(&meta, move |store| {
        let record = store.create_bucket(&name, policy, now)?;
        // Its S3 configurations (the gateway's owner and ACL) at once, before any other
        // request could find it without them.
        put_bucket_config(store, &name, &config)?;
        Ok(record)
    })
    .await?;
    tracing::info!(bucket = %record.name, "bucket created");
    Ok((StatusCode::CREATED, Json(json!(record))).into_response())
}

/// Writes the S3 configurations a bucket was created with (RAIDP and geometric buckets,
/// made by their own paths).
async fn write_bucket_config(
    meta: &Shared,
    name: String,
    config: BucketConfig,
) -> Result<(), ApiError> {
    if config.is_empty() {
        return Ok(());
    }
    blocking(meta, move |store| put_bucket_config(store, &name, &config)).await
}

/// Stores the S3 configurations of bucket `name` (`bucket_config/<name>/<suffix>`).
fn put_bucket_config(
    store: &dyn MetaStore,
    name: &str,
    config: &BucketConfig,
) -> Result<(), MetaError> {
    for (suffix, value) in config {
        store.put_record(crate::store::BUCKET_CONFIG, &format!("{name}/{suffix}"), value, false)?;
    }
    Ok(())
}

/// S3 configurations of a new bucket: (record suffix, value).
type BucketConfig = Vec<(String, Value)>;

/// Most S3 configurations a bucket is created with.
const MAX_CREATE_CONFIGS: usize = 8;

/// A create body without its `"s3_config": {suffix: value}` (the S3 gateway's records of the
/// new bucket, `bucket_config/<bucket>/<suffix>`), and those.
fn split_bucket_config(body: &[u8]) -> Result<(Vec<u8>, BucketConfig), ApiError> {
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok((body.to_vec(), Vec::new()));
    };
    let Some(config) = fields.remove("s3_config") else {
        return Ok((body.to_vec(), Vec::new()));
    };
    let Value::Object(config) = config else {
        return Err(ApiError::bad_request("s3_config must be an object of records"));
    };
    if config.len() > MAX_CREATE_CONFIGS
        || config.keys().any(|k| k.is_empty() || k.contains('/') || k.len() > 64)
    {
        return Err(ApiError::bad_request(format!(
            "s3_config holds at most {MAX_CREATE_CONFIGS} records named by short words"
        )));
    }
    let rest = serde_json::to_vec(&Value::Object(fields)).expect("JSON serializes");
    Ok((rest, config.into_iter().collect()))
}

/// The superchunk size and Lstor count a bucket body asks for when its code is `raidp`
/// (`{"code":"raidp","superchunk_bytes":N,"lstors":1|2}`, both optional), else None.
fn raidp_request(body: &[u8]) -> Result<Option<raidp::RaidpAsk>, ApiError> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok(None);
    };
    if fields.get("code").and_then(Value::as_str) != Some("raidp") {
        return Ok(None);
    }
    let mut asked = (None, None);
    for (name, value) in &fields {
        let number = || {
            value.as_u64().ok_or_else(|| {
                ApiError::bad_request(format!("{name} must be a non-negative integer"))
            })
        };
        match name.as_str() {
            "code" => {}
            "superchunk_bytes" => asked.0 = Some(number()?),
            "lstors" => asked.1 = Some(u32::try_from(number()?).unwrap_or(u32::MAX)),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown field {other:?} of a RAIDP policy: use code, superchunk_bytes, lstors"
                )))
            }
        }
    }
    Ok(Some(asked))
}

/// Creates a RAIDP bucket: its geometry is the cluster's map's (made now if there is none).
async fn create_raidp_bucket(
    meta: Shared,
    name: String,
    asked: raidp::RaidpAsk,
) -> Result<Response, ApiError> {
    if let (Some(superchunk_bytes), Some(lstors)) = asked {
        raidp::check_policy(&crate::RaidpPolicy { superchunk_bytes, lstors })?;
    }
    let (live, level) = (meta.liveness(), meta.failure_domain);
    let two_copies =
        parse_policy_over(br#"{"code":"rep(2)","stripe_width":1}"#, default_policy_json())?;
    let _raidp = meta.raidp.lock().await;
    let record = blocking(&meta, move |store| {
        let nodes = store.list_nodes()?;
        let policy = match raidp::policy_for_bucket(store, asked, &nodes, &live, level)? {
            Ok(policy) => policy,
            Err(api) => return Ok(Err(api)),
        };
        Ok(Ok(store.create_bucket_with(&name, two_copies, Some(policy), None, now_ms())?))
    })
    .await??;
    tracing::info!(bucket = %record.name, "RAIDP bucket created");
    Ok((StatusCode::CREATED, Json(json!(record))).into_response())
}

/// `PUT /v1/buckets/{name}/policy`: the fields given replace those of the bucket's current
/// default policy; objects already stored keep theirs.
async fn set_bucket_policy(
    State(meta): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    refuse_internal_change(&name, "change the bucket's policy")?;
    let wanted = name.clone();
    let current = blocking(&meta, move |store| store.get_bucket(&wanted)).await?;
    let policy = parse_policy_over(&body, json!(current.default_policy))?;
    let (nodes, domains) = cluster_size(&meta).await?;
    check_fits(&policy, nodes, domains, meta.failure_domain)?;
    let record = blocking(&meta, move |store| store.set_bucket_policy(&name, policy)).await?;
    tracing::info!(bucket = %record.name, "bucket policy changed");
    Ok(Json(json!(record)))
}

async fn get_bucket(
    State(meta): State<Shared>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let record = blocking(&meta, move |store| store.get_bucket(&name)).await?;
    Ok(Json(json!(record)))
}

async fn list_buckets(State(meta): State<Shared>) -> Result<Json<Value>, ApiError> {
    let buckets = blocking(&meta, |store| store.list_buckets()).await?;
    Ok(Json(json!({ "buckets": buckets })))
}

async fn delete_bucket(
    State(meta): State<Shared>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    refuse_internal_change(&name, "delete the bucket")?;
    let deleted = name.clone();
    blocking(&meta, move |store| {
        store.delete_bucket(&name)?;
        // A geometric bucket's stripes go with it (the rest, if many, on detector ticks).
        geometric::drop_stripes(store, &name, geometric::MAX_STRIPES_DROPPED)?;
        // So do its S3 configurations (CORS…): a bucket created later under the name
        // starts without them.
        drop_bucket_config(store, &name)?;
        Ok(())
    })
    .await?;
    tracing::info!(bucket = %deleted, "bucket deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes the gateway's [`crate::store::BUCKET_CONFIG`] records of `bucket`
/// (`<bucket>/…`; a bucket name holds no `/`, so the prefix is the bucket's alone).
fn drop_bucket_config(store: &dyn MetaStore, bucket: &str) -> Result<(), MetaError> {
    use crate::store::{BUCKET_CONFIG, MAX_BUCKET_CONFIG_RECORDS};
    let prefix = format!("{bucket}/");
    let records = store.list_records(BUCKET_CONFIG, &prefix, None, MAX_BUCKET_CONFIG_RECORDS)?;
    for (name, _) in records {
        store.delete_record(BUCKET_CONFIG, &name)?;
    }
    Ok(())
}

/// Refuses a client's `action` on `bucket` when it is the geometric layout's own
/// [`crate::GEOMETRIC_BUCKET`]: its stripes hold chunks of packed objects, and they change
/// only through the pack, repairs and GC (403 `internal_bucket`).
fn refuse_internal_change(bucket: &str, action: &str) -> Result<(), ApiError> {
    if bucket == crate::VERSIONS_BUCKET {
        let mut error = ApiError::new(
            StatusCode::FORBIDDEN,
            "internal_bucket",
            format!(
                "{bucket} holds the noncurrent versions of versioned buckets, which change \
                 only through their buckets' writes and deletes and the versions routes \
                 (/v1/buckets/{{bucket}}/versions/...); a client may not {action} there"
            ),
        );
        error.body["bucket"] = json!(bucket);
        return Err(error);
    }
    if bucket != crate::GEOMETRIC_BUCKET {
        return Ok(());
    }
    let mut error = ApiError::new(
        StatusCode::FORBIDDEN,
        "internal_bucket",
        format!(
            "{bucket} holds the geometric layout's bin stripes, which change only through \
             `weft pack`, repairs and `weft gc`; a client may not {action} there (a stripe \
             changed by hand would lose chunks of the objects packed in it)"
        ),
    );
    error.body["bucket"] = json!(bucket);
    Err(error)
}

async fn no_route(uri: Uri) -> ApiError {
    let mut error =
        ApiError::new(StatusCode::NOT_FOUND, "no_route", format!("no route {}", uri.path()));
    error.body["path"] = json!(uri.path());
    error
}
