//! `weft serve meta|node|repair|s3`: run a cluster's processes in the foreground.
//!
//! Invariants:
//! - When a process is ready it prints exactly one line on stdout naming its endpoint
//!   (`meta listening on http://…` / `node N listening on http://…`); logs go to stderr only,
//!   so scripts and `weft up` can read that line.
//! - Ctrl-C (SIGINT) and SIGTERM stop it gracefully (requests in flight finish) and exit 0;
//!   a unit sweep of `serve repair` in progress is abandoned (safe: each of its deletes is of
//!   a unit nobody references).
//! - `serve repair` sweeps once at start and then every --gc-interval: each sweep first rolls
//!   back the transitions whose executor's lease expired (their units are deleted at once),
//!   so a `weft up` after a crash leaves no transition pending for long.
//! - `serve repair` sweeps only with a grace longer than its own lease (refused at start
//!   otherwise), so it never deletes a unit one of its repairs has yet to report.
//! - `serve repair` also carries out S3 lifecycle rules (weft-s3's `lifecycle::run_pass`)
//!   at start and every --lifecycle-interval; every removal goes through meta, which keeps
//!   object-locked versions.

use std::{
    io::{IsTerminal, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
};

use clap::{Args, Subcommand};

use crate::{cli_error, up::FailureDomainArg, CliError};

#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// Run the metadata service: node membership (heartbeats, up/down), buckets, status.
    ///
    /// Keeps its state in <DIR>/meta.redb; only one meta may use a directory at a time.
    /// When ready it prints `meta listening on http://ADDR` on stdout; point nodes at that URL
    /// with `weft serve node --meta http://ADDR`. Logs go to stderr (filter with WEFT_LOG,
    /// e.g. WEFT_LOG=debug). Ctrl-C or SIGTERM stops it. API: docs/meta-api.md.
    ///
    /// New objects keep the units of a group on distinct failure domains of --failure-domain
    /// (disk, node or rack; a node's rack is its `weft serve node --rack`, else its own).
    ///
    /// Example: weft serve meta --dir ./weft-data/meta --listen 127.0.0.1:7700
    #[command(verbatim_doc_comment)]
    Meta(MetaArgs),
    /// Run a storage node: serves its disks over HTTP and heartbeats to meta.
    ///
    /// When ready it prints `node N listening on http://ADDR` on stdout. Meta reports it up
    /// while heartbeats arrive and down once they stop for meta's --down-after-ms.
    /// Logs go to stderr (WEFT_LOG). Ctrl-C or SIGTERM stops it. API: docs/node-api.md.
    ///
    /// Example: weft serve node --meta http://127.0.0.1:7700 --id 1 --rack 0 \
    ///              --disk ./weft-data/n1/d0 --disk ./weft-data/n1/d1
    #[command(verbatim_doc_comment)]
    Node(NodeArgs),
    /// Run a repair executor: rebuilds the units in meta's repair queue.
    ///
    /// Meta queues every unit on a down node or failed disk, and every unit a read found
    /// missing or corrupt. The executor leases a task, rebuilds the unit with its code's
    /// repair plan (Hitchhiker and Clay read less than k units), writes it to the node meta
    /// chose (keeping the placement rules) and reports back; meta then points the object at
    /// the new copy. Several executors may run at once; a crashed one's leases expire and
    /// its tasks are taken again. When ready it prints `repair executor on http://META`.
    ///
    /// The copy a repair replaced is deleted as soon as the repair commits if its node
    /// answers; otherwise meta keeps it queued and the executor deletes it once the node is
    /// back (checked every 2 s). A failed repair is retried after a back-off; one that finds
    /// too few units of the group readable leaves its unit *unfound* (`weft status`; give the
    /// object up with `weft repair mark-lost`).
    ///
    /// It also sweeps leaked units (see `weft gc`) once at start and then every
    /// --gc-interval, logging one line per sweep; each sweep first rolls back transitions
    /// whose executor's lease expired (a `weft transition` that died) and deletes their units.
    ///
    /// Example: weft serve repair --meta http://127.0.0.1:7700 --rate 100MiB --parallel 2
    #[command(verbatim_doc_comment)]
    Repair(RepairArgs),
    /// Run the S3 gateway: S3 (SigV4, buckets, objects, multipart, ranges) over the cluster.
    ///
    /// Requests are signed with keys from `weft key create NAME` (kept in meta; anonymous
    /// requests are refused). Objects are weft objects: `weft ls/get/rm` see what S3 wrote
    /// and the other way round. A bucket's default policy (`weft bucket create|policy`)
    /// applies to objects written through S3; the request header
    /// `x-weft-policy: rs(10,4),stripe=2` chooses one object's policy (settings: stripe,
    /// cell, block), or on CreateBucket the bucket's. Sign for region us-east-1 and use
    /// path-style addressing.
    /// When ready it prints `s3 gateway listening on http://ADDR`. `weft up` starts one.
    ///
    /// Examples:
    ///   weft serve s3 --meta http://127.0.0.1:7700 --listen 127.0.0.1:9000
    ///   aws --endpoint-url http://127.0.0.1:9000 s3 ls      # keys from weft key create
    #[command(verbatim_doc_comment)]
    S3(S3Args),
}

/// `--config FILE`: the process's flags in a TOML file (read before parsing, see
/// [`crate::config`]); here so `--help` lists it and clap accepts it.
#[derive(Debug, Clone, Args)]
pub struct ConfigArg {
    /// Read flags from this TOML file: every flag is a key (`listen = "10.0.0.5:7701"`,
    /// `disk = ["/srv/d0", "/srv/d1"]`, `insecure-plaintext = true`); flags given here
    /// override the file's. Unknown keys are an error naming the key and its line.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The cluster secret a process signs (and meta checks) requests with.
#[derive(Debug, Args)]
pub struct SecretArg {
    /// The cluster secret file (`weft init`, or `weft up`'s DIR/cluster.secret)
    /// [default: $WEFT_SECRET_FILE].
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
}

impl SecretArg {
    /// The secret from the flag or `$WEFT_SECRET_FILE`; an error when neither is given.
    fn read(&self) -> Result<weft_auth::ClusterSecret, CliError> {
        let given = self.secret_file.clone().or_else(|| {
            std::env::var_os(crate::cluster_cli::SECRET_ENV)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        });
        let Some(path) = given else {
            return Err(cli_error!(
                "this process needs the cluster secret: --secret-file FILE or {} \
                 (create one with `weft init`)",
                crate::cluster_cli::SECRET_ENV
            ));
        };
        crate::cluster_cli::read_secret(Some(&path), &path)
    }
}

/// How a process's links are protected: TLS with its host's files, or plain HTTP (on an
/// address other than loopback only with consent).
#[derive(Debug, Clone, Args)]
pub struct LinkArgs {
    /// This host's TLS directory: ca.pem (the cluster CA), cert.pem and key.pem (this host's
    /// certificate, issued by that CA; `weft up` and `weft init --hosts` write them). The
    /// listener then serves TLS and requires a client certificate of the CA from every peer,
    /// and this process's own requests show cert.pem and trust only servers the CA issued
    /// for. Certificates are re-read when their files change (`weft cert rotate`).
    #[arg(long, value_name = "DIR", conflicts_with = "insecure_plaintext")]
    pub tls_dir: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback: requests, units and signatures
    /// then cross the network in clear. Refused without this flag (or --tls-dir).
    #[arg(long)]
    pub insecure_plaintext: bool,
}

impl LinkArgs {
    /// This host's TLS files, checked, and made the identity of this process's clients;
    /// None without --tls-dir.
    pub fn install(&self) -> Result<Option<weft_auth::tls::TlsFiles>, CliError> {
        let Some(dir) = &self.tls_dir else { return Ok(None) };
        let files = weft_auth::tls::TlsFiles::in_dir(dir);
        let bad = |e: weft_auth::tls::TlsError| cli_error!("--tls-dir {}: {e}", dir.display());
        files.check().map_err(bad)?;
        weft_auth::tls::install_client(&files).map_err(bad)?;
        Ok(Some(files))
    }

    /// The listener's TLS (client certificates of the cluster CA required), or None for
    /// plain HTTP, which is refused on `listen` when it is not loopback and the flag was not
    /// given. Installs the client identity as [`LinkArgs::install`] does.
    pub fn server(
        &self,
        listen: SocketAddr,
    ) -> Result<Option<std::sync::Arc<weft_auth::tls::ServerConfig>>, CliError> {
        match self.install()? {
            Some(files) => {
                let config =
                    weft_auth::tls::server_config(&files.cert, &files.key, Some(&files.ca))
                        .map_err(|e| cli_error!("--tls-dir: {e}"))?;
                Ok(Some(config))
            }
            None => {
                self.check_plaintext(listen)?;
                Ok(None)
            }
        }
    }

    /// Refuses plain HTTP on `listen` when it is not loopback and the flag was not given.
    pub fn check_plaintext(&self, listen: SocketAddr) -> Result<(), CliError> {
        if listen.ip().is_loopback() || self.insecure_plaintext {
            return Ok(());
        }
        Err(cli_error!(
            "--listen {listen} is not a loopback address: requests, units and signatures \
             would cross the network in clear. Give --tls-dir DIR (this host's TLS files: \
             `weft init --hosts` writes them) to serve TLS, listen on 127.0.0.1, or add \
             --insecure-plaintext to serve plain HTTP anyway"
        ))
    }
}

#[derive(Debug, Args)]
pub struct S3Args {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Base URL of meta, e.g. http://127.0.0.1:7700.
    #[arg(long)]
    pub meta: String,
    #[command(flatten)]
    pub secret: SecretArg,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Serve HTTPS with this certificate (PEM, with its chain) instead of the host's from
    /// --tls-dir: the certificate S3 clients see, e.g. one of your own CA's for s3.example.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Memory for the degraded-read cache shared by all requests (Okapi §4.4): what
    /// rebuilding an unavailable unit fetched and decoded, served to the next reads of the
    /// same rows; 0 turns it off.
    #[arg(long, default_value = "256MiB", value_parser = crate::parse_size)]
    pub degraded_cache: usize,
    /// Append every GET's range to this file as JSON lines ({timestamp, bucket, key, offset,
    /// length, object_size}): the input of `weft advise stripe-width --trace`.
    #[arg(long, value_name = "FILE")]
    pub trace_reads: Option<std::path::PathBuf>,
    /// The master key of encryption at rest (64 hex digits; `weft up` writes DIR/sse.key,
    /// `weft kms master-key create FILE` makes one). With it the gateway seals objects
    /// written with SSE-S3, SSE-KMS or SSE-C, or into a bucket with default encryption,
    /// before they are coded: nodes hold only ciphertext. Keep it off the data nodes.
    /// Without it such requests are refused (501).
    #[arg(long, value_name = "FILE")]
    pub master_key: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Base URL of meta, e.g. http://127.0.0.1:7700.
    #[arg(long)]
    pub meta: String,
    #[command(flatten)]
    pub secret: SecretArg,
    /// This host's TLS directory (ca.pem, cert.pem, key.pem): the executor's requests show
    /// cert.pem and trust only servers of the cluster CA. Needed when meta and nodes serve
    /// TLS.
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// Most bytes written per second by this executor (0: unlimited), e.g. 100MiB.
    #[arg(long, default_value = "256MiB", value_parser = crate::parse_size)]
    pub rate: usize,
    /// Units repaired at once, at most.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Weighted recovery (RCStor): each task weighs the size of the unit it rebuilds in
    /// 4 MiB (a 4 MiB chunk 1, a 256 MiB chunk 64), and tasks run while their weights sum to
    /// at most this; 0 counts tasks only (--parallel). The paper's cap is 512 per server.
    #[arg(long, default_value_t = 128)]
    pub weight_cap: u64,
    /// Pack geometric buckets' warm objects this often (`weft pack` in the background):
    /// 30s, 10m, or milliseconds; 0 disables the packer.
    #[arg(long, default_value = "1m", value_parser = weft_client::gc::parse_duration_ms)]
    pub pack_interval: u64,
    /// The background packer takes objects written longer ago than this.
    #[arg(long, default_value = crate::geometric_cli::DEFAULT_PACK_AFTER, value_parser = weft_client::gc::parse_duration_ms)]
    pub pack_after: u64,
    /// Lease of each task, in milliseconds: a task not finished by then is taken again.
    #[arg(long, default_value_t = 60_000)]
    pub lease_ms: u64,
    /// Sweep leaked units (as `weft gc` does) this often: 30s, 10m, 6h, or milliseconds;
    /// 0 disables the sweep.
    #[arg(long, default_value = "10m", value_parser = weft_client::gc::parse_duration_ms)]
    pub gc_interval: u64,
    /// The sweep keeps unreferenced units younger than this; must be longer than --lease-ms.
    #[arg(long, default_value = "15m", value_parser = weft_client::gc::parse_duration_ms)]
    pub gc_grace: u64,
    /// The sweep first expires writes in progress begun longer ago than this, or `off`.
    #[arg(long, default_value = "6h", value_parser = crate::gc_cli::parse_expiry)]
    pub gc_expire_writes_after: crate::gc_cli::Expiry,
    /// Carry out S3 buckets' lifecycle rules (expiration, noncurrent version expiration,
    /// abort of incomplete multipart uploads) this often: 1h, 10m, or milliseconds; 0
    /// disables lifecycle.
    #[arg(long, default_value = "1h", value_parser = weft_client::gc::parse_duration_ms)]
    pub lifecycle_interval: u64,
    /// How long a lifecycle day is: 1d, as S3 counts. Shorten it only to test rules (e.g.
    /// 10s: a rule's "Days: 1" then expires objects 10 s old).
    #[arg(long, default_value = "1d", value_parser = weft_client::gc::parse_duration_ms)]
    pub lifecycle_day: u64,
}

#[derive(Debug, Args)]
pub struct MetaArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Directory of the metadata (created if missing).
    #[arg(long, default_value = "./weft-data/meta")]
    pub dir: PathBuf,
    /// Address to listen on (port 0 picks a free port; the ready line tells which).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Report a node down after this many milliseconds without a heartbeat.
    #[arg(long, default_value_t = weft_meta::service::DEFAULT_DOWN_AFTER_MS)]
    pub down_after_ms: u64,
    /// Keep the units of each group (and the blocks of each stripe) of a new object on
    /// distinct disks, nodes or racks. Objects keep the level they were written with.
    #[arg(long, value_enum, default_value = "node")]
    pub failure_domain: FailureDomainArg,
    /// The cluster secret file [default: $WEFT_SECRET_FILE, else DIR/../cluster.secret,
    /// created there (mode 0600) when missing]. Every request to meta must be signed with
    /// keys derived from it.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Where meta keeps its records: `redb` (the file meta.redb in --dir), or a PostgreSQL
    /// database, `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, which several metas can share
    /// [default: $WEFT_META_STORE, else redb]. A password on the command line shows in `ps`:
    /// give the URL in $WEFT_META_STORE instead, or the password alone in $PGPASSWORD.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Length of the leader lease in ms: metas sharing one PostgreSQL store take turns at
    /// the leader's duties (repair detection); a dead leader's are resumed by another meta
    /// within about this long.
    #[arg(long, default_value_t = weft_meta::service::DEFAULT_LEASE_MS)]
    pub lease_ms: u64,
}

/// Where `weft serve meta` keeps its records, from `--store` or `$WEFT_META_STORE`.
fn meta_store(store: Option<&str>) -> Result<weft_meta::service::StoreLocation, CliError> {
    use weft_meta::service::StoreLocation;
    let from_env = std::env::var("WEFT_META_STORE").ok().filter(|v| !v.is_empty());
    let Some(url) = store.map(str::to_owned).or(from_env) else {
        return Ok(StoreLocation::Redb);
    };
    if url == "redb" {
        return Ok(StoreLocation::Redb);
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(cli_error!(
            "--store must be redb or a PostgreSQL URL (postgres://user@host:port/db), not {}",
            weft_meta::pg_store::redacted(&url)
        ));
    }
    Ok(StoreLocation::Postgres(weft_meta::pg_store::with_env_password(&url)))
}

/// `--advertise`: HOST:PORT with a port, no scheme or path (the scheme follows TLS).
fn parse_advertise(text: &str) -> Result<String, String> {
    let refuse = || {
        format!(
            "{text:?} is not HOST:PORT (e.g. 10.0.0.11:7701 or node-1.example:7701; the \
             scheme follows --tls-dir)"
        )
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(refuse)?;
    let host_ok = !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    match (host_ok, port.parse::<u16>()) {
        (true, Ok(port)) if port > 0 => Ok(text.to_owned()),
        _ => Err(refuse()),
    }
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Base URL of meta, e.g. http://127.0.0.1:7700.
    #[arg(long)]
    pub meta: String,
    /// A disk directory (created if missing); repeat for more disks. Disk i is the i-th given.
    #[arg(long = "disk", value_name = "DIR", required = true)]
    pub disks: Vec<PathBuf>,
    /// The Lstor of a disk, for RAIDP buckets: a directory on a device that fails apart
    /// from the disk and is faster than it (NVMe, PMEM; `weft up` uses /dev/shm). Repeat in
    /// disk order: the i-th --lstor is disk i's. A disk without one takes no RAIDP data.
    #[arg(long = "lstor", value_name = "DIR")]
    pub lstors: Vec<PathBuf>,
    /// Address to listen on (port 0, the default, picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The address (HOST:PORT) meta tells clients to reach this node at, when it is not
    /// --listen's: behind NAT, or listening on 0.0.0.0. Under TLS, the host's certificate
    /// must name it.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_advertise)]
    pub advertise: Option<String>,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Node id, unique in the cluster [default: derived from the first disk's absolute path,
    /// so it is stable across restarts].
    #[arg(long)]
    pub id: Option<u32>,
    /// Milliseconds between two heartbeats to meta.
    #[arg(long, default_value_t = weft_node::DEFAULT_HEARTBEAT_INTERVAL_MS)]
    pub heartbeat_ms: u64,
    /// The rack this node sits in, sent to meta in every heartbeat [default: none, meta
    /// treats the node as its own rack]. Give every node of a cluster a rack, or none.
    #[arg(long)]
    pub rack: Option<u32>,
    /// How often the background scrub reads and verifies every unit, reporting bad ones to
    /// meta for repair (e.g. 60s, 12h, 7d). Each pass is paced to end within a tenth of it.
    #[arg(long, default_value = "7d", value_parser = weft_client::gc::parse_duration_ms)]
    pub scrub_interval: u64,
    /// Ceiling of the scrub's read rate, in MiB/s, so it never crowds out client IO.
    #[arg(long, default_value_t = weft_node::DEFAULT_SCRUB_MAX_BYTES_PER_S >> 20)]
    pub scrub_max_mib_per_s: u64,
    /// Used fraction of a disk's filesystem at which the disk is reported nearfull (still
    /// written; `weft status` shows it).
    #[arg(long, default_value_t = 0.85)]
    pub nearfull_ratio: f64,
    /// Used fraction at which a disk turns full: read-only (PUTs answer 507, meta places
    /// nothing new there), not failed: its units stay readable and are not rebuilt. A unit
    /// write that finds no space (ENOSPC, EDQUOT) makes the disk full too.
    #[arg(long, default_value_t = 0.95)]
    pub full_ratio: f64,
    /// Hardware model of the disks, for experiments: none (real speed), hdd (8 ms
    /// positioning, 150 MB/s), ssd (0.1 ms, 500 MB/s), tuned as hdd:position=6ms:rate=200MB;
    /// one for every disk, or a comma list with one per disk. IO is delayed as that disk
    /// would take; data still lands on the real files (docs/hardware-model.md).
    #[arg(long, default_value = "none")]
    pub disk_model: String,
    /// Rate of this node's link in each direction, for experiments: none, or e.g. 1Gbit,
    /// 10Gbit, 125MB.
    #[arg(long, default_value = "none")]
    pub net_model: String,
    /// This node's key file, written by `weft node add ID` (which enrols the node in meta);
    /// the node id comes from it when --id is not given.
    #[arg(long, value_name = "FILE", conflicts_with = "secret_file")]
    pub key_file: Option<PathBuf>,
    /// Derive this node's key from the cluster secret instead of --key-file (the node then
    /// holds the whole cluster's secret: prefer --key-file) [default: $WEFT_SECRET_FILE].
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
}

pub fn run(command: ServeCommand) -> Result<(), CliError> {
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        match command {
            ServeCommand::Meta(args) => serve_meta(args).await,
            ServeCommand::Node(args) => serve_node(args).await,
            ServeCommand::Repair(args) => serve_repair(args).await,
            ServeCommand::S3(args) => serve_s3(args).await,
        }
    })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .try_init();
}

/// Prints the ready line on stdout and flushes it, so a reader sees it at once.
fn ready(line: String) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn serve_meta(args: MetaArgs) -> Result<(), CliError> {
    let tls = args.link.server(args.listen)?;
    // Checked first: a bad --store creates nothing.
    let store = meta_store(args.store.as_deref())?;
    let default = args
        .dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(crate::cluster_cli::SECRET_FILE_NAME);
    let (path, _) = crate::cluster_cli::secret_path(args.secret_file.as_deref(), &default);
    let secret = if path.exists() {
        crate::cluster_cli::read_secret(Some(&path), &path)?
    } else {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| cli_error!("cannot create {}: {e}", parent.display()))?;
        }
        let secret = weft_auth::ClusterSecret::create_file(&path)?;
        tracing::info!(path = %path.display(), "created the cluster secret");
        secret
    };
    let config = weft_meta::service::MetaConfig {
        listen: args.listen,
        dir: args.dir,
        down_after_ms: args.down_after_ms,
        failure_domain: args.failure_domain.level(),
        secret,
        store,
        lease_ms: args.lease_ms,
        tls,
    };
    let meta = weft_meta::service::bind(config).await?;
    ready(format!("meta listening on {}", meta.endpoint()));
    shutdown_signal().await;
    meta.stop().await?;
    Ok(())
}

async fn serve_node(args: NodeArgs) -> Result<(), CliError> {
    let tls = args.link.server(args.listen)?;
    let meta = args.meta.trim_end_matches('/').to_owned();
    if !(meta.starts_with("http://") || meta.starts_with("https://")) {
        return Err(cli_error!("--meta must be a URL like http://127.0.0.1:7700, not {meta:?}"));
    }
    if args.heartbeat_ms == 0 {
        return Err(cli_error!("--heartbeat-ms must be positive"));
    }
    for dir in &args.disks {
        std::fs::create_dir_all(dir)
            .map_err(|e| cli_error!("cannot create disk directory {}: {e}", dir.display()))?;
    }
    let key = match &args.key_file {
        Some(path) => Some(weft_auth::Key::read_node_file(path)?),
        None => None,
    };
    let node_id = match (args.id, &key) {
        (Some(id), _) => id,
        (None, Some(key)) => match key.principal() {
            weft_auth::Principal::Node(id) => id,
            weft_auth::Principal::Client => unreachable!("node key files hold node keys"),
        },
        (None, None) => derived_id(&args.disks[0])?,
    };
    let key = match key {
        Some(key) => key,
        None => SecretArg { secret_file: args.secret_file.clone() }
            .read()
            .map_err(|e| cli_error!("{e}; or give the node's own key with --key-file (`weft node add {node_id}` writes it)"))?
            .node_key(node_id),
    };
    if key.principal() != weft_auth::Principal::Node(node_id) {
        return Err(cli_error!(
            "--key-file holds the key of {}, but this is node {node_id}",
            key.principal()
        ));
    }
    if args.lstors.len() > args.disks.len() {
        return Err(cli_error!(
            "{} --lstor for {} --disk: give at most one Lstor per disk, in disk order",
            args.lstors.len(),
            args.disks.len()
        ));
    }
    for dir in &args.lstors {
        std::fs::create_dir_all(dir)
            .map_err(|e| cli_error!("cannot create Lstor directory {}: {e}", dir.display()))?;
    }
    let lstors = args.lstors.iter().cloned().map(Some).collect();
    let mut config = weft_node::NodeConfig::new(node_id, args.listen, args.disks, key);
    config.lstors = lstors;
    config.tls = tls;
    config.advertise = args.advertise.clone();
    // A drill for tests and the curious: arm a step by creating DIR/<step> (see CrashDrill).
    if let Some(dir) = std::env::var_os("WEFT_CRASH_DRILL") {
        config.crash_drill = Some(weft_node::CrashDrill { dir: dir.into() });
    }
    config.meta_url = Some(meta);
    config.heartbeat_interval_ms = args.heartbeat_ms;
    config.rack = args.rack;
    config.thresholds = weft_node::Thresholds::new(args.nearfull_ratio, args.full_ratio)
        .map_err(|e| cli_error!("--nearfull-ratio / --full-ratio: {e}"))?;
    (config.disk_models, config.net_bytes_per_sec) =
        hardware_model(&args.disk_model, &args.net_model)?;
    if args.scrub_interval == 0 || args.scrub_max_mib_per_s == 0 {
        return Err(cli_error!("--scrub-interval and --scrub-max-mib-per-s must be positive"));
    }
    config.scrub = weft_node::ScrubConfig {
        interval_ms: args.scrub_interval,
        max_bytes_per_s: args.scrub_max_mib_per_s.saturating_mul(1 << 20),
    };
    let node = weft_node::bind(config).await?;
    ready(format!("node {node_id} listening on {}", node.endpoint()));
    shutdown_signal().await;
    node.stop().await?;
    Ok(())
}

async fn serve_s3(args: S3Args) -> Result<(), CliError> {
    // The gateway's own requests (to meta and nodes) use the host's TLS files; what S3
    // clients see is --tls-cert when given, else the host's certificate. S3 clients show no
    // certificate (they sign with their access keys).
    let host = args.link.install()?;
    let served = match (&args.tls_cert, &args.tls_key, &host) {
        (Some(cert), Some(key), _) => Some((cert.clone(), key.clone(), "--tls-cert/--tls-key")),
        (_, _, Some(files)) => Some((files.cert.clone(), files.key.clone(), "--tls-dir")),
        _ => None,
    };
    let tls = match served {
        Some((cert, key, from)) => Some(
            weft_auth::tls::server_config(&cert, &key, None)
                .map_err(|e| cli_error!("{from}: {e}"))?,
        ),
        None => {
            args.link.check_plaintext(args.listen)?;
            None
        }
    };
    let meta = args.meta.trim_end_matches('/').to_owned();
    if !(meta.starts_with("http://") || meta.starts_with("https://")) {
        return Err(cli_error!("--meta must be a URL like http://127.0.0.1:7700, not {meta:?}"));
    }
    let mut config = weft_s3::GatewayConfig::new(meta, args.listen, args.secret.read()?);
    config.degraded_cache_bytes = args.degraded_cache;
    config.trace_reads = args.trace_reads;
    config.master_key = match &args.master_key {
        Some(path) => Some(
            weft_s3::sse::MasterKey::read_file(path)
                .map_err(|e| cli_error!("--master-key: {e}"))?,
        ),
        None => None,
    };
    config.tls = tls;
    let gateway = weft_s3::bind(config).await.map_err(|e| cli_error!("{e}"))?;
    ready(format!("s3 gateway listening on {}", gateway.endpoint()));
    shutdown_signal().await;
    gateway.stop().await;
    Ok(())
}

async fn serve_repair(args: RepairArgs) -> Result<(), CliError> {
    LinkArgs { tls_dir: args.tls_dir.clone(), insecure_plaintext: false }.install()?;
    let meta = args.meta.trim_end_matches('/').to_owned();
    if !(meta.starts_with("http://") || meta.starts_with("https://")) {
        return Err(cli_error!("--meta must be a URL like http://127.0.0.1:7700, not {meta:?}"));
    }
    if args.parallel == 0 || args.lease_ms == 0 {
        return Err(cli_error!("--parallel and --lease-ms must be positive"));
    }
    if args.gc_interval > 0 && args.gc_grace <= args.lease_ms {
        return Err(cli_error!(
            "--gc-grace ({} ms) must be longer than --lease-ms ({} ms): a repair writes its unit \
             before meta points at it, within its lease",
            args.gc_grace,
            args.lease_ms
        ));
    }
    let client = weft_client::Client::new(&meta, &args.secret.read()?)?;
    let config = weft_client::repair::ExecutorConfig {
        lease_ms: args.lease_ms,
        parallel: args.parallel,
        weight_cap: args.weight_cap,
        rate_bytes_per_sec: (args.rate > 0).then_some(args.rate as u64),
        ..Default::default()
    };
    let gc = weft_client::gc::GcOptions {
        grace_ms: args.gc_grace,
        expire_writes_after_ms: args.gc_expire_writes_after.0,
        dry_run: false,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sweeper = (args.gc_interval > 0)
        .then(|| tokio::spawn(run_sweeps(client.clone(), gc, args.gc_interval, stopped.clone())));
    let packer = (args.pack_interval > 0).then(|| {
        let options =
            weft_client::PackOptions { min_age_ms: args.pack_after, ..Default::default() };
        tokio::spawn(run_packs(client.clone(), options, args.pack_interval, stopped.clone()))
    });
    if args.lifecycle_day == 0 {
        return Err(cli_error!("--lifecycle-day must be positive"));
    }
    let lifecycle = (args.lifecycle_interval > 0).then(|| {
        let every = (args.lifecycle_interval, args.lifecycle_day);
        tokio::spawn(run_lifecycle(client.clone(), every, stopped.clone()))
    });
    let executor = tokio::spawn(weft_client::repair::run_executor(client, config, stopped));
    ready(format!("repair executor on {meta}"));
    shutdown_signal().await;
    let _ = stop.send(true);
    if let Some(sweeper) = sweeper {
        let _ = sweeper.await;
    }
    if let Some(packer) = packer {
        let _ = packer.await;
    }
    if let Some(lifecycle) = lifecycle {
        let _ = lifecycle.await;
    }
    if let Ok(stats) = executor.await {
        use std::sync::atomic::Ordering::Relaxed;
        tracing::info!(
            repaired = stats.repaired.load(Relaxed),
            stale = stats.stale.load(Relaxed),
            failed = stats.failed.load(Relaxed),
            "repair executor stopped"
        );
    }
    Ok(())
}

/// Runs a sweep right at start (so a restart after a crash rolls back transitions whose
/// executor died at once) and then every `interval_ms` until `stop` turns true, logging one
/// line per sweep.
async fn run_sweeps(
    client: weft_client::Client,
    options: weft_client::gc::GcOptions,
    interval_ms: u64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let interval = std::time::Duration::from_millis(interval_ms);
    for round in 0u64.. {
        if round > 0 && tokio::time::timeout(interval, stop.wait_for(|stop| *stop)).await.is_ok() {
            return;
        }
        // A stop abandons a sweep midway: safe, since each delete is of a unit nobody
        // references, and a sweep of a large cluster may take a while.
        let swept = tokio::select! {
            swept = weft_client::gc::sweep(&client, &options) => swept,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        match swept {
            Ok(report) => tracing::info!(
                expired_transitions = report.expired_transitions.len(),
                expired_units_deleted = report.expired_units_deleted,
                expired_writes = report.expired_writes.len(),
                nodes = report.nodes_scanned,
                nodes_down = report.nodes_down,
                disks = report.disks_scanned,
                units_seen = report.units_seen,
                unreferenced = report.unreferenced,
                skipped_young = report.skipped_young,
                deleted = report.deleted,
                bytes = report.bytes,
                errors = report.errors_total,
                ms = report.elapsed_ms,
                "gc sweep"
            ),
            Err(error) => tracing::warn!(%error, "gc sweep failed; no unit was deleted"),
        }
    }
}

/// Packs every geometric bucket's objects older than `options.min_age_ms`, every
/// `interval_ms` until `stop` turns true, logging one line per bucket that had work. A stop
/// abandons a pack midway: safe, a killed packer leaves every object readable (the next run
/// finishes; the sweeper collects what it wrote).
async fn run_packs(
    client: weft_client::Client,
    options: weft_client::PackOptions,
    interval_ms: u64,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let interval = std::time::Duration::from_millis(interval_ms);
    loop {
        if tokio::time::timeout(interval, stop.wait_for(|stop| *stop)).await.is_ok() {
            return;
        }
        let buckets = match client.meta.get_json("/v1/buckets").await {
            Ok(listed) => listed["buckets"].as_array().cloned().unwrap_or_default(),
            Err(error) => {
                tracing::warn!(%error, "packer: cannot list buckets");
                continue;
            }
        };
        for bucket in buckets.iter().filter(|b| b["geometric"].is_object()) {
            let name = bucket["name"].as_str().unwrap_or_default();
            let packed = tokio::select! {
                packed = client.pack(name, &options, None) => packed,
                _ = stop.wait_for(|stop| *stop) => return,
            };
            match packed {
                Ok(report) if report.objects > 0 || !report.deferred.is_empty() => tracing::info!(
                    bucket = name,
                    objects = report.objects,
                    bytes = report.bytes,
                    stripes = report.stripes,
                    deferred = report.deferred.len(),
                    skipped = report.skipped.len(),
                    ms = report.elapsed_ms,
                    "packed"
                ),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(bucket = name, %error, "pack failed; its objects stay warm")
                }
            }
        }
    }
}

/// Carries out S3 buckets' lifecycle rules right at start and then every `interval_ms`
/// (with days of `day_ms`) until `stop` turns true, logging one line per pass that did
/// something. A stop abandons a pass midway: safe, a pass keeps no state and each removal
/// stands alone (the next pass goes on).
async fn run_lifecycle(
    client: weft_client::Client,
    (interval_ms, day_ms): (u64, u64),
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let interval = std::time::Duration::from_millis(interval_ms);
    for round in 0u64.. {
        if round > 0 && tokio::time::timeout(interval, stop.wait_for(|stop| *stop)).await.is_ok() {
            return;
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let options = weft_s3::lifecycle::PassOptions { now_ms, day_ms };
        let passed = tokio::select! {
            passed = weft_s3::lifecycle::run_pass(&client, &options) => passed,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        match passed {
            Ok(report) if report.buckets == 0 => {}
            Ok(report) => {
                let acted = report.expired
                    + report.noncurrent_removed
                    + report.markers_removed
                    + report.uploads_aborted
                    + report.kept_locked
                    + report.errors;
                if acted > 0 {
                    tracing::info!(
                        buckets = report.buckets,
                        versions_seen = report.versions_seen,
                        expired = report.expired,
                        noncurrent_removed = report.noncurrent_removed,
                        markers_removed = report.markers_removed,
                        uploads_aborted = report.uploads_aborted,
                        kept_locked = report.kept_locked,
                        changed_meanwhile = report.changed_meanwhile,
                        errors = report.errors,
                        first_errors = ?report.error_samples,
                        "lifecycle pass"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(%error, "lifecycle pass failed: cannot read configurations")
            }
        }
    }
}

/// A node id from the first disk's absolute path (FNV-1a), stable across restarts.
fn derived_id(disk: &Path) -> Result<u32, CliError> {
    let path = std::fs::canonicalize(disk)
        .map_err(|e| cli_error!("cannot resolve disk directory {}: {e}", disk.display()))?;
    let mut hash: u32 = 0x811c_9dc5;
    for byte in path.to_string_lossy().bytes() {
        hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
    }
    Ok(hash)
}

/// `--disk-model` (one, or one per disk) and `--net-model` as the node's config takes them.
pub fn hardware_model(
    disks: &str,
    net: &str,
) -> Result<(Vec<Option<weft_node::model::DiskModel>>, Option<u64>), CliError> {
    let models = disks
        .split(',')
        .map(|one| {
            weft_node::model::parse_disk_model(one).map_err(|e| cli_error!("--disk-model: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let models = if models.iter().all(Option::is_none) { Vec::new() } else { models };
    let net = match net.trim() {
        "none" | "" => None,
        rate => {
            Some(weft_node::model::parse_rate(rate).map_err(|e| cli_error!("--net-model: {e}"))?)
        }
    };
    Ok((models, net))
}
