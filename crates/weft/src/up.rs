//! `weft up`: a whole cluster on one machine, in the foreground. It runs meta, N nodes and
//! (when this weft has one) the repair executor as child processes of its own executable
//! (`weft serve meta|node|repair`), waits until meta reports every node up, prints the
//! endpoints and then watches until Ctrl-C or SIGTERM.
//!
//! Invariants:
//! - Layout of `--dir` (stable, so a restart on the same directory brings back every node
//!   with its id and its data): `DIR/meta` (meta's store), `DIR/node-<i>/disk-<j>` (node i,
//!   ids 1..=N, disks 0..disks_per_node), `DIR/logs/<child>.log` (each child's stderr,
//!   appended), `DIR/cluster.json` (endpoints and pids, rewritten atomically when the
//!   cluster is ready and when it stops), `DIR/cluster.secret` (the cluster secret, made on
//!   the first start, mode 0600: clients sign with it), `DIR/sse.key` (the gateway's master
//!   key of encryption at rest, made on the first start, mode 0600) and `DIR/node-<i>/node.key` (node i's
//!   own key, derived from the secret; node i is enrolled in meta before it starts).
//! - With a fixed meta port P, node i listens on P + i, so endpoints are stable across
//!   restarts; with port 0 every child picks a free port.
//! - Under `--meta-store postgres` a PostgreSQL server of the cluster's own (DIR/postgres) is
//!   started before meta and stopped after it; meta gets its URL (with the password) in its
//!   environment, never on its command line.
//! - Every child is supervised once the cluster is ready: one that dies (meta, a node, the
//!   repair executor, the S3 gateway) is started again with the same arguments — meta and the
//!   gateway on the address they had, so clients, nodes and s3.json stay right — after a
//!   delay of 0.5 s doubling at each quick death up to 30 s, back to 0.5 s once it ran for
//!   10 s ([`restart_delay_ms`]); each death is logged with its exit cause and the tail of
//!   its log. A node a drill stopped (`weft node stop|kill` writes `DIR/node-<i>/held`
//!   before signalling it) is held down instead, until `weft up` restarts (which removes
//!   the hold). During the start a child that dies still fails the start, with its log.
//! - DIR/cluster.json is how other commands learn each service's health: its `services`
//!   table (role, name, id, pid, state, restarts, last exit, endpoint, log) is rewritten
//!   atomically on every change (a death, a restart, a ready line), and `weft status` shows
//!   it when cluster.json lies beside the secret file it uses and names the meta it asks.
//! - Every child is stopped before `weft up` returns, on every path (ready, error, signal):
//!   SIGTERM, then SIGKILL after [`STOP_GRACE_MS`]. On Linux each child also gets SIGTERM
//!   if `weft up` itself dies without cleaning up (PR_SET_PDEATHSIG). Children run in their
//!   own process group, so a terminal's Ctrl-C reaches only `weft up`, which stops them in
//!   order (repair and nodes first, meta last).
//! - Node i gets `--rack (i - 1) % racks` when `--racks` is set (none otherwise: each node is
//!   its own rack) and meta gets `--failure-domain`, so meta's placement enforces both.
//! - With `--netns`, every child (and the cluster's PostgreSQL) starts inside a network
//!   namespace of its own ([`crate::hosts`]), entered between fork and exec, and listens on
//!   that host's address (fixed by its name, so endpoints survive restarts); the hosts are
//!   removed after every child stopped, and a start without `--netns` still removes what a
//!   killed `--netns` run on the same `--dir` left.
//! - A listener on an address other than loopback is plain HTTP only with
//!   `--insecure-plaintext`, which weft up passes on to each child and records in
//!   cluster.json (`insecure_plaintext`) for `weft status` to show.
//! - With `--json`, stdout carries only JSON lines: the ready object (the same as
//!   cluster.json) and then one `{"event": ...}` object per event; notes go to stderr.

use std::{
    io::{BufRead, BufReader, Read, Seek, SeekFrom, Write},
    net::SocketAddr,
    os::unix::process::{CommandExt, ExitStatusExt},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};
use weft_meta::pg_local::Lifetime;

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::{
    cli_error,
    cluster_cli::{is_running, print_json, process_args, send_signal, MetaClient},
    CliError,
};

/// Most nodes one `weft up` starts (every loop over nodes is bounded by it).
pub const MAX_NODES: u32 = 1000;
/// Most disks one node gets.
pub const MAX_DISKS_PER_NODE: u32 = 64;
/// How long the whole start (every ready line, every node up in meta) may take.
const READY_TIMEOUT_MS: u64 = 30_000;
/// How long a child may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE_MS: u64 = 5_000;
/// Polling interval while starting: short, so the cluster is ready as soon as it is.
const START_POLL_MS: u64 = 20;
/// Polling interval while watching a running cluster.
const WATCH_POLL_MS: u64 = 200;
/// The first delay before restarting a child that died, doubled at each quick death.
const RESTART_FIRST_MS: u64 = 500;
/// The longest delay before restarting a child that keeps dying.
const RESTART_MAX_MS: u64 = 30_000;
/// A child that ran this long before dying is restarted after [`RESTART_FIRST_MS`] again.
const STABLE_AFTER_MS: u64 = 10_000;
/// The name of the file in `DIR/node-<i>` that holds node i down (`weft node stop|kill`
/// writes it before signalling; `weft up` removes it when it starts).
pub const HOLD_FILE: &str = "held";
/// Lines of a child's log shown when it fails to start.
const LOG_TAIL_LINES: usize = 15;
/// The name of a node's key file inside `DIR/node-<i>`.
const NODE_KEY_FILE: &str = "node.key";
/// Version of cluster.json's shape.
const CLUSTER_FILE_VERSION: u64 = 1;
/// Name of the endpoints file inside `--dir`.
pub const CLUSTER_FILE: &str = "cluster.json";
/// Where `weft up` writes the S3 endpoint and its access key.
pub const S3_FILE: &str = "s3.json";
/// The S3 gateway's port when --s3-listen is not given (and meta's port is not 0).
const DEFAULT_S3_PORT: u16 = 9000;
/// Nodes and disks per node when neither flags nor cluster.json say.
const DEFAULT_NODES: u32 = 12;
const DEFAULT_DISKS_PER_NODE: u32 = 1;

/// Where `weft up`'s meta keeps its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MetaStoreArg {
    /// The embedded redb file DIR/meta/meta.redb.
    Redb,
    /// A PostgreSQL server of the cluster's own, its data in DIR/postgres, started before
    /// meta and stopped after it.
    Postgres,
}

impl MetaStoreArg {
    fn name(self) -> &'static str {
        match self {
            MetaStoreArg::Redb => "redb",
            MetaStoreArg::Postgres => "postgres",
        }
    }
}

/// The failure domain the units of a group are spread over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailureDomainArg {
    Disk,
    Node,
    Rack,
}

impl FailureDomainArg {
    fn name(self) -> &'static str {
        match self {
            FailureDomainArg::Disk => "disk",
            FailureDomainArg::Node => "node",
            FailureDomainArg::Rack => "rack",
        }
    }

    fn parse(name: &str) -> Option<FailureDomainArg> {
        FailureDomainArg::from_str(name, true).ok()
    }

    /// The level meta's placement enforces for this argument.
    pub fn level(self) -> weft_layout::FailureDomain {
        match self {
            FailureDomainArg::Disk => weft_layout::FailureDomain::Disk,
            FailureDomainArg::Node => weft_layout::FailureDomain::Node,
            FailureDomainArg::Rack => weft_layout::FailureDomain::Rack,
        }
    }
}

/// The failure domain when neither flags nor cluster.json say (meta's default too).
const DEFAULT_FAILURE_DOMAIN: FailureDomainArg = FailureDomainArg::Node;

/// Start a whole cluster on this machine: meta, N storage nodes, the repair executor and
/// the S3 gateway
///
/// Runs in the foreground until Ctrl-C or SIGTERM, which stop every process cleanly.
/// Each process is `weft serve meta|node|repair` started from this same executable; their
/// logs go to DIR/logs/, and DIR/cluster.json lists every endpoint and pid for scripts.
/// The S3 gateway (`weft serve s3`) listens on --s3-listen; on first start an access key is
/// created and DIR/s3.json holds {"endpoint","access_key","secret_key","region"}.
/// Running `weft up` again on the same --dir brings everything back (same node ids, same
/// disks, same buckets and objects); --nodes, --disks-per-node, --racks and
/// --failure-domain default to what DIR/cluster.json recorded.
///
/// A child that dies is restarted (after 0.5 s, doubling up to 30 s while it keeps dying);
/// `weft status` shows each service's state, restarts and last exit. A node stopped by a
/// drill (`weft node kill 3`) is held down: meta reports it down and repair takes over;
/// restart `weft up` to bring it back.
///
/// Examples:
///   weft up                                   # 12 nodes, meta on 127.0.0.1:7700
///   weft up --nodes 6 --disks-per-node 2 --dir /tmp/weft
///   weft up --meta-listen 127.0.0.1:0 --json  # free ports; one JSON line when ready
///   weft up --nodes 6 --racks 3 --failure-domain rack   # a group's units in distinct racks
///   weft up --nodes 3 --disks-per-node 3 --failure-domain disk   # rs(6,3) on 9 disks
///
/// Then, in another shell:
///   weft status
///   weft bucket create photos --code rs --k 6 --r 3
///   weft node kill 3 && sleep 6 && weft status
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct UpArgs {
    /// Storage nodes to start, ids 1..=N [default: as in DIR/cluster.json, else 12].
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Disks (directories) per node [default: as in DIR/cluster.json, else 1].
    #[arg(long)]
    pub disks_per_node: Option<u32>,
    /// Racks to spread nodes over: node i is in rack (i - 1) % RACKS [default: as in
    /// DIR/cluster.json, else none: each node is its own rack].
    #[arg(long)]
    pub racks: Option<u32>,
    /// Failure domain meta keeps each group's units (and each stripe's blocks) apart on:
    /// distinct disks, nodes or racks [default: as in DIR/cluster.json, else node].
    #[arg(long, value_enum)]
    pub failure_domain: Option<FailureDomainArg>,
    /// Where meta keeps its records: redb, a file in DIR/meta; or postgres, a PostgreSQL
    /// server of the cluster's own (data in DIR/postgres, on 127.0.0.1, password in
    /// DIR/postgres/password) started before meta and stopped after it; it needs PostgreSQL's
    /// server programs (Debian: apt-get install postgresql) [default: as in
    /// DIR/cluster.json, else redb]. The two keep separate records: switching starts empty.
    #[arg(long, value_enum)]
    pub meta_store: Option<MetaStoreArg>,
    /// Meta processes to run on the one store, each able to serve every request; one at a
    /// time (the holder of the store's leader lease) detects failures and queues repairs.
    /// Nodes, the gateway and the repair executor are given them all and fail over. More
    /// than 1 needs --meta-store postgres [default: 1].
    #[arg(long, default_value_t = 1)]
    pub meta_replicas: u32,
    /// Directory holding the whole cluster (created if missing).
    #[arg(long, default_value = "./weft-data")]
    pub dir: PathBuf,
    /// Meta's address. With port P, node i listens on P + i; with port 0 every process
    /// picks a free port.
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub meta_listen: SocketAddr,
    /// Meta reports a node down after this many ms without a heartbeat [default: meta's,
    /// 5000].
    #[arg(long)]
    pub down_after_ms: Option<u64>,
    /// Milliseconds between two heartbeats of each node [default: the node's, 1000].
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    /// How often each node's background scrub reads and verifies every unit, e.g. 60s, 12h
    /// [default: the node's, 7d]. Bad and missing units are repaired by the executor.
    #[arg(long, value_parser = weft_client::gc::parse_duration_ms)]
    pub scrub_interval: Option<u64>,
    /// How often the executor carries out S3 buckets' lifecycle rules, e.g. 10m, 1s; 0
    /// disables lifecycle [default: the executor's, 1h].
    #[arg(long, value_parser = weft_client::gc::parse_duration_ms)]
    pub lifecycle_interval: Option<u64>,
    /// How long a lifecycle day is [default: 1d]. Shorten it only to try rules out: with
    /// 10s, a rule's "Days: 1" expires objects 10 s old.
    #[arg(long, value_parser = weft_client::gc::parse_duration_ms)]
    pub lifecycle_day: Option<u64>,
    /// Used fraction of a disk's filesystem at which every node reports it nearfull
    /// [default: the node's, 0.85].
    #[arg(long)]
    pub nearfull_ratio: Option<f64>,
    /// Used fraction at which every node's disk turns full, i.e. read-only: no new units,
    /// not rebuilt elsewhere [default: the node's, 0.95].
    #[arg(long)]
    pub full_ratio: Option<f64>,
    /// Hardware model of every node's disks (none, hdd, ssd, hdd:position=6ms:rate=200MB; a
    /// comma list gives one per disk), as `weft serve node --disk-model`.
    #[arg(long)]
    pub disk_model: Option<String>,
    /// Rate of every node's link in each direction (e.g. 1Gbit), as `weft serve node
    /// --net-model`.
    #[arg(long)]
    pub net_model: Option<String>,
    /// Address of the S3 gateway [default: 127.0.0.1:9000, or port 0 (a free port) when
    /// --meta-listen has port 0].
    #[arg(long)]
    pub s3_listen: Option<SocketAddr>,
    /// Where every disk's Lstor (RAIDP's per-disk parity device) lives [default: a
    /// directory of this cluster's under /dev/shm, memory-backed like the paper's NVRAM,
    /// else DIR/lstors with a warning]. A deployment points `weft serve node --lstor` at an
    /// NVMe or PMEM device instead.
    #[arg(long, value_name = "DIR")]
    pub lstor_dir: Option<PathBuf>,
    /// Start no repair executor (`weft serve repair`): lost units are then rebuilt only by an
    /// executor run by hand, and nothing packs geometric buckets in the background. For
    /// benchmarks that run their own executor and measure it.
    #[arg(long)]
    pub no_repair: bool,
    /// Most bytes per second the repair executor writes, e.g. 100MiB (0: unlimited), as
    /// `weft serve repair --rate` [default: the executor's, 256MiB].
    #[arg(long, value_name = "RATE", value_parser = crate::parse_size)]
    pub repair_rate: Option<usize>,
    /// Print one JSON object when ready (as in DIR/cluster.json), then one JSON line per
    /// event ({"event": "exited" | "restarted" | "stopping" | "stopped", ...}); notes go to
    /// stderr. A stream, so JSON Lines: `--json-lines` is the same flag.
    #[arg(long, alias = "json-lines")]
    pub json: bool,
    /// Start every process (each meta, node, the repair executor, the S3 gateway and the
    /// cluster's PostgreSQL) on a host of its own: a network namespace with one address on a
    /// bridge of --subnet, so every byte crosses a real interface and a process reaches
    /// another only by that one's address. The root namespace (where clients run) reaches
    /// every host through the bridge's address, the subnet's first. Only the ports of
    /// --meta-listen and --s3-listen are used. Needs root and iproute2; the namespaces,
    /// veths and bridge are removed when weft up stops, and what a killed weft up left is
    /// removed by the next start on the same --dir.
    #[arg(long)]
    pub netns: bool,
    /// The subnet of --netns's hosts: the bridge takes the first address, postgres .2, the
    /// repair executor .3, the gateway .4, meta i .9+i, node i .20+i (a /24 holds 234
    /// nodes).
    #[arg(long, default_value = crate::hosts::DEFAULT_SUBNET, value_name = "CIDR")]
    pub subnet: crate::hosts::Subnet,
    /// The MTU of --netns's bridge and veths: 1500 as Ethernet's, 9000 as a storage
    /// network's jumbo frames (1280 to 65535).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(1280..=65535))]
    pub mtu: u32,
    /// Serve plain HTTP on addresses other than loopback (--netns, or a non-loopback
    /// --meta-listen/--s3-listen), where TLS is otherwise on: requests, units and signatures
    /// then cross the network in clear, and `weft status` says so in red.
    #[arg(long, conflicts_with = "tls")]
    pub insecure_plaintext: bool,
    /// TLS on every link of a loopback cluster too (it is on by default off loopback): a
    /// cluster CA in DIR/tls, a certificate per host, client certificates required by every
    /// internal server, HTTPS on the gateway (AWS_CA_BUNDLE=DIR/tls/ca.pem for S3 clients).
    #[arg(long)]
    pub tls: bool,
    /// The gateway serves HTTPS with this certificate (PEM, with its chain) instead of one
    /// of the cluster CA's, e.g. your own for s3.example.com.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// Where human notes and events go: stdout, or stderr under `--json`.
#[derive(Debug, Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn note(self, line: &str) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    fn warn(self, line: &str) {
        eprintln!("weft up: warning: {line}");
    }

    /// An event: a JSON line under `--json`, else the human line.
    fn event(self, event: Value, line: &str) {
        if self.json {
            print_json(&event);
        } else {
            println!("{line}");
        }
    }
}

/// What a previous `weft up` recorded in DIR/cluster.json.
#[derive(Debug, Default)]
struct Recorded {
    nodes: Option<u32>,
    disks_per_node: Option<u32>,
    racks: Option<u32>,
    failure_domain: Option<FailureDomainArg>,
    meta_store: Option<MetaStoreArg>,
    running_up_pid: Option<u32>,
}

fn read_recorded(path: &Path, out: Out) -> Recorded {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Recorded::default();
    };
    let Ok(value) = serde_json::from_str::<Value>(&text) else {
        out.warn(&format!("{} is not JSON; ignoring it", path.display()));
        return Recorded::default();
    };
    let number = |name: &str| value[name].as_u64().and_then(|n| u32::try_from(n).ok());
    Recorded {
        nodes: value["nodes"].as_array().and_then(|nodes| u32::try_from(nodes.len()).ok()),
        disks_per_node: number("disks_per_node"),
        racks: number("racks"),
        failure_domain: value["failure_domain"].as_str().and_then(FailureDomainArg::parse),
        meta_store: value["meta_store"]
            .as_str()
            .and_then(|name| MetaStoreArg::from_str(name, true).ok()),
        running_up_pid: match value["running"].as_bool() {
            Some(true) => number("up_pid"),
            _ => None,
        },
    }
}

/// The settings of this run, checked.
#[derive(Debug)]
struct Plan {
    dir: PathBuf,
    nodes: u32,
    disks_per_node: u32,
    racks: Option<u32>,
    failure_domain: FailureDomainArg,
    meta_store: MetaStoreArg,
    meta_replicas: u32,
    meta_listen: SocketAddr,
    down_after_ms: Option<u64>,
    heartbeat_ms: Option<u64>,
    scrub_interval_ms: Option<u64>,
    lifecycle_interval_ms: Option<u64>,
    lifecycle_day_ms: Option<u64>,
    nearfull_ratio: Option<f64>,
    full_ratio: Option<f64>,
    disk_model: Option<String>,
    net_model: Option<String>,
    s3_listen: SocketAddr,
    /// The directory holding every disk's Lstor.
    lstor_dir: PathBuf,
    /// Start no repair executor.
    no_repair: bool,
    /// The repair executor's write rate (`--rate`), when given.
    repair_rate: Option<usize>,
    /// The subnet of the hosts, under `--netns`.
    netns: Option<crate::hosts::Subnet>,
    /// Their links' MTU.
    mtu: u32,
    /// Some listener serves plain HTTP on an address other than loopback.
    insecure_plaintext: bool,
    /// Every link is TLS (cert_cli's layout in DIR/tls).
    tls: bool,
    /// The gateway's own certificate and key, when the user gave them.
    s3_cert: Option<(PathBuf, PathBuf)>,
}

impl Plan {
    fn node_listen(&self, id: u32) -> SocketAddr {
        let mut listen = self.on_host(&Role::Node(id).host(), self.meta_listen);
        if listen.port() != 0 {
            // Checked in `plan`: port + nodes fits in a u16.
            listen.set_port(listen.port() + id as u16);
        }
        listen
    }

    /// `listen` as seen on `host`: under `--netns` the host's address with listen's port,
    /// else `listen` itself.
    fn on_host(&self, host: &str, listen: SocketAddr) -> SocketAddr {
        match self.netns {
            Some(subnet) => {
                // Checked in `plan`: every host of the cluster has an address in the subnet.
                let offset = crate::hosts::host_offset(host).expect("a host weft up names");
                let address = subnet.address(offset).expect("checked in plan");
                SocketAddr::new(address.into(), listen.port())
            }
            None => listen,
        }
    }

    /// The hosts `--netns` makes, in start order.
    fn host_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.meta_store == MetaStoreArg::Postgres {
            names.push(POSTGRES_HOST.to_owned());
        }
        names.extend((0..self.meta_replicas).map(|i| Role::Meta(i).host()));
        names.extend((1..=self.nodes).map(|id| Role::Node(id).host()));
        names.push(Role::Repair.host());
        names.push(Role::S3.host());
        names
    }

    /// The rack of node `id` (ids start at 1), when racks are set.
    fn rack(&self, id: u32) -> Option<u32> {
        self.racks.map(|racks| (id - 1) % racks)
    }

    /// Failure domains the cluster has at the planned level (for the ready note).
    fn domains(&self) -> u32 {
        match self.failure_domain {
            FailureDomainArg::Disk => self.nodes * self.disks_per_node,
            FailureDomainArg::Node => self.nodes,
            FailureDomainArg::Rack => self.racks.unwrap_or(self.nodes),
        }
    }

    fn disks(&self, id: u32) -> Vec<PathBuf> {
        (0..self.disks_per_node)
            .map(|j| self.dir.join(format!("node-{id}")).join(format!("disk-{j}")))
            .collect()
    }

    /// The Lstor directory of each disk of node `id`.
    fn lstors(&self, id: u32) -> Vec<PathBuf> {
        (0..self.disks_per_node)
            .map(|j| self.lstor_dir.join(format!("node-{id}-disk-{j}")))
            .collect()
    }
}

fn plan(args: &UpArgs, out: Out) -> Result<Plan, CliError> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| cli_error!("cannot create --dir {}: {e}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)
        .map_err(|e| cli_error!("cannot resolve --dir {}: {e}", args.dir.display()))?;
    let recorded = read_recorded(&dir.join(CLUSTER_FILE), out);
    if let Some(pid) = recorded.running_up_pid {
        let is_up = process_args(pid).is_some_and(|argv| argv.iter().any(|a| a == "up"));
        if pid != std::process::id() && is_running(pid) && is_up {
            return Err(cli_error!(
                "a weft up (pid {pid}) is already running on {}; stop it first (Ctrl-C in \
                 its terminal, or kill {pid}), or use another --dir",
                dir.display()
            ));
        }
    }
    let nodes = args.nodes.or(recorded.nodes).unwrap_or(DEFAULT_NODES);
    if !(1..=MAX_NODES).contains(&nodes) {
        return Err(cli_error!("--nodes must be between 1 and {MAX_NODES}, not {nodes}"));
    }
    let disks_per_node =
        args.disks_per_node.or(recorded.disks_per_node).unwrap_or(DEFAULT_DISKS_PER_NODE);
    if !(1..=MAX_DISKS_PER_NODE).contains(&disks_per_node) {
        return Err(cli_error!(
            "--disks-per-node must be between 1 and {MAX_DISKS_PER_NODE}, not {disks_per_node}"
        ));
    }
    if let Some(before) = recorded.disks_per_node.filter(|&before| before > disks_per_node) {
        return Err(cli_error!(
            "{} holds nodes with {before} disks each; starting them with {disks_per_node} \
             would hide the data on the others. Use --disks-per-node {before} (or more), or \
             another --dir",
            dir.display()
        ));
    }
    if let Some(before) = recorded.nodes.filter(|&before| before > nodes) {
        out.warn(&format!(
            "{} held {before} nodes; starting only {nodes}: nodes {}..={before} stay down in \
             meta (their data stays on disk; `weft up --nodes {before}` brings them back)",
            dir.display(),
            nodes + 1
        ));
    }
    let racks = args.racks.or(recorded.racks);
    if let Some(racks) = racks {
        if !(1..=nodes).contains(&racks) {
            return Err(cli_error!("--racks must be between 1 and --nodes ({nodes}), not {racks}"));
        }
    }
    let failure_domain =
        args.failure_domain.or(recorded.failure_domain).unwrap_or(DEFAULT_FAILURE_DOMAIN);
    let port = args.meta_listen.port();
    if port != 0 && u32::from(port) + nodes > u32::from(u16::MAX) {
        return Err(cli_error!(
            "nodes listen on the ports after meta's ({port} + 1 ..= {port} + {nodes}), which \
             run past 65535; pick a lower --meta-listen port, or port 0"
        ));
    }
    if args.down_after_ms == Some(0) || args.heartbeat_ms == Some(0) {
        return Err(cli_error!("--down-after-ms and --heartbeat-ms must be positive"));
    }
    if args.lifecycle_day == Some(0) {
        return Err(cli_error!("--lifecycle-day must be positive"));
    }
    if args.scrub_interval == Some(0) {
        return Err(cli_error!("--scrub-interval must be positive"));
    }
    // Checked here, not by each node as it starts: a typo stops `weft up` at once.
    let (models, _) = crate::serve::hardware_model(
        args.disk_model.as_deref().unwrap_or("none"),
        args.net_model.as_deref().unwrap_or("none"),
    )?;
    if models.len() > 1 && models.len() as u32 != disks_per_node {
        return Err(cli_error!(
            "--disk-model lists {} models for {disks_per_node} disks per node: give one for \
             every disk, or one per disk",
            models.len(),
        ));
    }
    let defaults = weft_node::Thresholds::default();
    weft_node::Thresholds::new(
        args.nearfull_ratio.unwrap_or(defaults.nearfull_ratio()),
        args.full_ratio.unwrap_or(defaults.full_ratio()),
    )
    .map_err(|e| cli_error!("--nearfull-ratio / --full-ratio: {e}"))?;
    let lstor_dir = lstor_dir(args, &dir, out)?;
    let meta_store = args.meta_store.or(recorded.meta_store).unwrap_or(MetaStoreArg::Redb);
    if args.meta_replicas == 0 || args.meta_replicas > 9 {
        return Err(cli_error!("--meta-replicas must be 1 to 9, not {}", args.meta_replicas));
    }
    if args.netns {
        crate::hosts::preflight()?;
        let last = crate::hosts::host_offset(&Role::Node(nodes).host()).expect("a node host");
        if last > args.subnet.usable() {
            return Err(cli_error!(
                "--subnet {} has {} addresses; node {nodes} needs address {last} (nodes sit at \
                 .20 + id): give a larger --subnet, e.g. 198.18.0.0/16",
                args.subnet,
                args.subnet.usable()
            ));
        }
    }
    let s3_listen = args.s3_listen.unwrap_or_else(|| {
        let port = if args.meta_listen.port() == 0 { 0 } else { DEFAULT_S3_PORT };
        SocketAddr::new(args.meta_listen.ip(), port)
    });
    // TLS whenever a listener is off loopback, unless the user said otherwise.
    let off_loopback =
        args.netns || !args.meta_listen.ip().is_loopback() || !s3_listen.ip().is_loopback();
    let tls = args.tls || args.tls_cert.is_some() || (off_loopback && !args.insecure_plaintext);
    if args.insecure_plaintext && tls {
        return Err(cli_error!("--insecure-plaintext and --tls-cert contradict each other"));
    }
    for file in [&args.tls_cert, &args.tls_key].into_iter().flatten() {
        if !file.is_file() {
            return Err(cli_error!("--tls-cert/--tls-key: {} is not a file", file.display()));
        }
    }
    let plaintext_out = off_loopback && !tls;
    if args.meta_replicas > 1 && meta_store != MetaStoreArg::Postgres {
        return Err(cli_error!(
            "--meta-replicas {} needs --meta-store postgres: metas share their records \
             through PostgreSQL (redb is one process's file)",
            args.meta_replicas
        ));
    }
    Ok(Plan {
        lstor_dir,
        meta_store,
        meta_replicas: args.meta_replicas,
        dir,
        nodes,
        disks_per_node,
        racks,
        failure_domain,
        meta_listen: args.meta_listen,
        down_after_ms: args.down_after_ms,
        heartbeat_ms: args.heartbeat_ms,
        scrub_interval_ms: args.scrub_interval,
        lifecycle_interval_ms: args.lifecycle_interval,
        lifecycle_day_ms: args.lifecycle_day,
        nearfull_ratio: args.nearfull_ratio,
        full_ratio: args.full_ratio,
        disk_model: args.disk_model.clone(),
        net_model: args.net_model.clone(),
        no_repair: args.no_repair,
        repair_rate: args.repair_rate,
        s3_listen,
        netns: args.netns.then_some(args.subnet),
        mtu: args.mtu,
        insecure_plaintext: plaintext_out,
        tls,
        s3_cert: args.tls_cert.clone().zip(args.tls_key.clone()),
    })
}

/// The file in DIR naming where this cluster's Lstors live, so a restart finds them.
const LSTOR_DIR_FILE: &str = "lstor-dir";

/// Where the Lstors live: `--lstor-dir`, else where DIR/lstor-dir says (an earlier run
/// chose it), else a new directory of this cluster's own under /dev/shm (a name no other
/// cluster has: a stale Lstor must never meet a fresh disk), else DIR/lstors with a warning.
fn lstor_dir(args: &UpArgs, dir: &Path, out: Out) -> Result<PathBuf, CliError> {
    let record = dir.join(LSTOR_DIR_FILE);
    let chosen = match (&args.lstor_dir, std::fs::read_to_string(&record)) {
        (Some(given), _) => given.clone(),
        (None, Ok(text)) if !text.trim().is_empty() => PathBuf::from(text.trim()),
        (None, _) => {
            let shm = Path::new("/dev/shm");
            let writable =
                std::fs::metadata(shm).is_ok_and(|m| m.is_dir() && !m.permissions().readonly());
            if writable {
                use std::hash::{BuildHasher, Hasher};
                let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
                hasher.write(dir.as_os_str().as_encoded_bytes());
                hasher.write_u128(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos()),
                );
                shm.join(format!("weft-lstors-{:016x}", hasher.finish()))
            } else {
                out.warn(&format!(
                    "no /dev/shm here: the Lstors go to {}, on the disks' own device (RAIDP \
                     then survives fewer failures than it should; give --lstor-dir)",
                    dir.join("lstors").display()
                ));
                dir.join("lstors")
            }
        }
    };
    // Not created here: each node makes its own Lstor directory as it starts, so a `weft up`
    // that stops before starting nodes leaves nothing behind in /dev/shm.
    let chosen = std::path::absolute(&chosen)
        .map_err(|e| cli_error!("cannot resolve {}: {e}", chosen.display()))?;
    std::fs::write(&record, format!("{}\n", chosen.display()))
        .map_err(|e| cli_error!("cannot write {}: {e}", record.display()))?;
    Ok(chosen)
}

/// Says when a setting does less than it may seem to.
fn note_settings(plan: &Plan, out: Out) {
    if plan.failure_domain == FailureDomainArg::Rack && plan.racks.is_none() {
        out.warn(
            "--failure-domain rack without --racks: each node is its own rack, so units are \
             kept on distinct nodes (as with --failure-domain node)",
        );
    }
}

/// Ctrl-C and SIGTERM, caught from the start so a signal during start-up is not lost.
struct Signals {
    runtime: tokio::runtime::Runtime,
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signals")
    }
}

impl Signals {
    fn new() -> Result<Signals, CliError> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| cli_error!("cannot start the signal handler: {e}"))?;
        let _entered = runtime.enter();
        let interrupt =
            signal(SignalKind::interrupt()).map_err(|e| cli_error!("cannot catch SIGINT: {e}"))?;
        let terminate =
            signal(SignalKind::terminate()).map_err(|e| cli_error!("cannot catch SIGTERM: {e}"))?;
        Ok(Signals { runtime, interrupt, terminate })
    }

    /// Sleeps for `duration`, or less when a signal arrives; returns the signal's name.
    fn sleep(&mut self, duration: Duration) -> Option<&'static str> {
        let (interrupt, terminate) = (&mut self.interrupt, &mut self.terminate);
        self.runtime.block_on(async {
            tokio::select! {
                _ = interrupt.recv() => Some("SIGINT"),
                _ = terminate.recv() => Some("SIGTERM"),
                () = tokio::time::sleep(duration) => None,
            }
        })
    }
}

/// What a child is to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Meta number i + 1 of `--meta-replicas` (0: the first, on `--meta-listen`).
    Meta(u32),
    Node(u32),
    Repair,
    S3,
}

impl Role {
    fn name(self) -> String {
        match self {
            Role::Meta(0) => "meta".to_owned(),
            Role::Meta(i) => format!("meta {}", i + 1),
            Role::Node(id) => format!("node {id}"),
            Role::Repair => "repair executor".to_owned(),
            Role::S3 => "s3 gateway".to_owned(),
        }
    }

    /// The host it runs on under `--netns` (`meta-1`, `node-3`, `repair`, `s3-1`).
    fn host(self) -> String {
        match self {
            Role::Meta(i) => format!("meta-{}", i + 1),
            Role::Node(id) => format!("node-{id}"),
            Role::Repair => "repair".to_owned(),
            Role::S3 => "s3-1".to_owned(),
        }
    }

    /// Its kind, as `weft status` shows it: `meta`, `node`, `repair` or `s3`.
    fn kind(self) -> &'static str {
        match self {
            Role::Meta(_) => "meta",
            Role::Node(_) => "node",
            Role::Repair => "repair",
            Role::S3 => "s3",
        }
    }

    /// How its ready line starts (the rest is its endpoint).
    fn ready_prefix(self) -> String {
        match self {
            Role::Node(id) => format!("node {id} listening on "),
            Role::Repair => "repair executor ".to_owned(),
            Role::Meta(_) => "meta listening on ".to_owned(),
            Role::S3 => "s3 gateway listening on ".to_owned(),
        }
    }

    fn log_file(self) -> String {
        match self {
            Role::Meta(0) => "meta.log".to_owned(),
            Role::Meta(i) => format!("meta-{}.log", i + 1),
            Role::Node(id) => format!("node-{id}.log"),
            Role::Repair => "repair.log".to_owned(),
            Role::S3 => "s3.log".to_owned(),
        }
    }
}

/// Where a supervised child is in its life (shown by `weft status` as `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServiceState {
    /// Started, its ready line not printed yet.
    Starting,
    /// Printed its ready line and has not exited.
    Running,
    /// Exited; started again at `Member::restart_at`.
    Restarting,
    /// Stopped by a drill (`weft node stop|kill`): not restarted until `weft up` restarts.
    Held,
    /// Stopped by `weft up` itself (it is stopping).
    Stopped,
}

impl ServiceState {
    fn name(self) -> &'static str {
        match self {
            ServiceState::Starting => "starting",
            ServiceState::Running => "running",
            ServiceState::Restarting => "restarting",
            ServiceState::Held => "held",
            ServiceState::Stopped => "stopped",
        }
    }
}

#[derive(Debug)]
struct Member {
    role: Role,
    /// The arguments it is started with (again at each restart).
    args: Vec<String>,
    process: Child,
    pid: u32,
    log: PathBuf,
    /// Where the child's log started for this run (the log is appended across runs).
    log_start: u64,
    /// The endpoint from its ready line.
    endpoint: Option<String>,
    disks: Vec<PathBuf>,
    exited: Option<ExitStatus>,
    /// Processes started for this member so far (tags its stdout lines, so a line of a
    /// previous process is never taken for the current one's).
    spawns: u32,
    state: ServiceState,
    /// Restarts after a death, since `weft up` started.
    restarts: u32,
    /// How its last process ended (`killed by signal 9 (SIGKILL)`, or why it could not be
    /// started again).
    last_exit: Option<String>,
    /// When the current process was started.
    started_at: Instant,
    /// The delay before the last restart (0: none yet, or reset after a long run).
    backoff_ms: u64,
    /// When a member in [`ServiceState::Restarting`] is started again.
    restart_at: Option<Instant>,
}

/// The children of this `weft up`. Dropping it stops every child still running.
#[derive(Debug)]
struct Supervisor {
    exe: PathBuf,
    logs: PathBuf,
    members: Vec<Member>,
    /// (member index, its spawn number, first stdout line or None at EOF) from each
    /// child's stdout reader.
    lines_tx: mpsc::Sender<(usize, u32, Option<String>)>,
    lines: mpsc::Receiver<(usize, u32, Option<String>)>,
    /// The cluster's PostgreSQL server, under `--meta-store postgres`; stopped after meta.
    postgres: Option<weft_meta::pg_local::LocalPostgres>,
    /// Meta's store URL, given to meta in its environment (never on its command line,
    /// which `ps` shows): it holds the password.
    meta_store_url: Option<String>,
    /// The hosts of a `--netns` cluster; last, so it is removed after every child stopped
    /// (fields drop after `Drop::drop` stopped the children, in declaration order).
    hosts: Option<crate::hosts::Hosts>,
}

/// Why a start-up wait ended early.
#[derive(Debug)]
enum Interrupted {
    Signal(&'static str),
    Failed(CliError),
}

impl From<CliError> for Interrupted {
    fn from(error: CliError) -> Self {
        Interrupted::Failed(error)
    }
}

impl Supervisor {
    fn new(dir: &Path) -> Result<Supervisor, CliError> {
        let exe = std::env::current_exe()
            .map_err(|e| cli_error!("cannot find the weft executable to start children: {e}"))?;
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)
            .map_err(|e| cli_error!("cannot create {}: {e}", logs.display()))?;
        let (lines_tx, lines) = mpsc::channel();
        Ok(Supervisor {
            exe,
            logs,
            members: Vec::new(),
            lines_tx,
            lines,
            postgres: None,
            meta_store_url: None,
            hosts: None,
        })
    }

    /// Starts `weft <args>` as `role`; its stderr is appended to its log file and its first
    /// stdout line is reported on `lines`.
    fn spawn(&mut self, role: Role, args: &[String], disks: Vec<PathBuf>) -> Result<(), CliError> {
        let index = self.members.len();
        let (process, log, log_start) = self.start_process(role, args, index, 1)?;
        self.members.push(Member {
            role,
            args: args.to_vec(),
            pid: process.id(),
            process,
            log,
            log_start,
            endpoint: None,
            disks,
            exited: None,
            spawns: 1,
            state: ServiceState::Starting,
            restarts: 0,
            last_exit: None,
            started_at: Instant::now(),
            backoff_ms: 0,
            restart_at: None,
        });
        Ok(())
    }

    /// Starts member `index`'s process again, with the same arguments (meta and the gateway
    /// on the address they had, so every client and s3.json stay right).
    fn respawn(&mut self, index: usize) -> Result<(), CliError> {
        let member = &self.members[index];
        let (role, spawns) = (member.role, member.spawns + 1);
        let mut args = member.args.clone();
        if let (Role::Meta(_) | Role::S3, Some(endpoint)) = (role, &member.endpoint) {
            let address = endpoint.split_once("://").map_or(endpoint.as_str(), |(_, a)| a);
            let address = address.to_owned();
            if let Some(at) = args.iter().position(|a| a == "--listen") {
                args[at + 1] = address;
            }
        }
        let (process, _, log_start) = self.start_process(role, &args, index, spawns)?;
        let member = &mut self.members[index];
        member.pid = process.id();
        member.process = process;
        member.log_start = log_start;
        member.exited = None;
        member.spawns = spawns;
        member.state = ServiceState::Starting;
        member.restarts += 1;
        member.started_at = Instant::now();
        member.restart_at = None;
        Ok(())
    }

    /// Starts `weft <args>` for member `index` (spawn number `spawns`): the process, its log
    /// and where this run's part of the log starts.
    fn start_process(
        &self,
        role: Role,
        args: &[String],
        index: usize,
        spawns: u32,
    ) -> Result<(Child, PathBuf, u64), CliError> {
        let log = self.logs.join(role.log_file());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| cli_error!("cannot open log {}: {e}", log.display()))?;
        let log_start = file.seek(SeekFrom::End(0)).unwrap_or(0);
        let _ = writeln!(
            file,
            "--- weft up (pid {}) starts {}: weft {}",
            std::process::id(),
            role.name(),
            args.join(" ")
        );
        let mut command = Command::new(&self.exe);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(file))
            // Own process group: a terminal's Ctrl-C reaches only `weft up`, which stops
            // the children in order.
            .process_group(0);
        die_with_parent(&mut command);
        if let Some(host) = self.hosts.as_ref().and_then(|h| h.get(&role.host())) {
            host.enter(&mut command);
        }
        command.env_remove("WEFT_META_STORE");
        if let (Role::Meta(_), Some(url)) = (role, &self.meta_store_url) {
            command.env("WEFT_META_STORE", url);
        }
        let mut process =
            command.spawn().map_err(|e| cli_error!("cannot start {}: {e}", role.name()))?;
        let stdout = process.stdout.take().expect("stdout is piped");
        let lines = self.lines_tx.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let first = match reader.read_line(&mut line) {
                Ok(n) if n > 0 => Some(line.trim().to_owned()),
                _ => None,
            };
            let _ = lines.send((index, spawns, first));
            // Keep reading so the child never blocks on, or fails writing to, its stdout.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        Ok((process, log, log_start))
    }

    /// The last lines this run wrote to a member's log.
    fn log_tail(&self, index: usize) -> String {
        let member = &self.members[index];
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&member.log) {
            if file.seek(SeekFrom::Start(member.log_start)).is_ok() {
                let _ = file.take(1 << 20).read_to_string(&mut text);
            }
        }
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("--- weft up")).collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
        if tail.is_empty() {
            format!("(nothing in {})", member.log.display())
        } else {
            format!("last lines of {}:\n    {}", member.log.display(), tail.join("\n    "))
        }
    }

    /// Collects members that exited; returns their indices.
    fn reap(&mut self) -> Vec<usize> {
        let mut exited = Vec::new();
        for (index, member) in self.members.iter_mut().enumerate() {
            if member.exited.is_none() {
                if let Ok(Some(status)) = member.process.try_wait() {
                    member.exited = Some(status);
                    exited.push(index);
                }
            }
        }
        exited
    }

    fn died_while_starting(&self, index: usize) -> CliError {
        let member = &self.members[index];
        let status = member.exited.map_or("exited".to_owned(), describe_exit);
        cli_error!(
            "{} (pid {}) stopped before it was ready: {status}. {}\nFix the cause and run \
             weft up again",
            member.role.name(),
            member.pid,
            self.log_tail(index)
        )
    }

    /// Waits until each of `indices` printed its ready line, which must start with the
    /// member's `prefix`; records the endpoint that ends it.
    fn wait_ready(
        &mut self,
        indices: &[usize],
        prefix: impl Fn(Role) -> String,
        deadline: Instant,
        signals: &mut Signals,
    ) -> Result<(), Interrupted> {
        let mut waiting: Vec<usize> = indices.to_vec();
        loop {
            while let Ok((index, spawns, line)) = self.lines.try_recv() {
                if !waiting.contains(&index) || spawns != self.members[index].spawns {
                    continue;
                }
                let role = self.members[index].role;
                let Some(line) = line else {
                    // EOF: the child is exiting; give it a moment to be reaped for its status.
                    let wait_until = Instant::now() + Duration::from_millis(500);
                    while self.members[index].exited.is_none() && Instant::now() < wait_until {
                        self.reap();
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    return Err(self.died_while_starting(index).into());
                };
                let want = prefix(role);
                let Some(endpoint) = line.strip_prefix(&want) else {
                    return Err(cli_error!(
                        "{} printed {line:?} instead of its ready line ({want:?}…); is {} the \
                         same weft version? {}",
                        role.name(),
                        self.exe.display(),
                        self.log_tail(index)
                    )
                    .into());
                };
                self.members[index].endpoint = Some(endpoint.trim().to_owned());
                self.members[index].state = ServiceState::Running;
                waiting.retain(|&i| i != index);
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if let Some(&index) = self.reap().iter().find(|i| waiting.contains(i)) {
                return Err(self.died_while_starting(index).into());
            }
            if Instant::now() >= deadline {
                let names: Vec<String> =
                    waiting.iter().map(|&i| self.members[i].role.name()).collect();
                return Err(cli_error!(
                    "timed out after {} s waiting for {} to be ready; {}",
                    READY_TIMEOUT_MS / 1000,
                    names.join(", "),
                    self.log_tail(waiting[0])
                )
                .into());
            }
            if let Some(signal) = signals.sleep(Duration::from_millis(START_POLL_MS)) {
                return Err(Interrupted::Signal(signal));
            }
        }
    }

    /// Waits until meta reports every node member up with that member's pid (a restarted
    /// meta may still show a node's previous process as up for a while).
    fn wait_nodes_up(
        &mut self,
        meta: &MetaClient,
        deadline: Instant,
        signals: &mut Signals,
    ) -> Result<(), Interrupted> {
        loop {
            let mut not_up: Vec<u32> = Vec::new();
            let listed = meta.get(&["nodes"]);
            for member in &self.members {
                let Role::Node(id) = member.role else { continue };
                let up = listed.as_ref().ok().and_then(|listed| {
                    listed["nodes"].as_array()?.iter().find(|n| {
                        n["id"].as_u64() == Some(u64::from(id))
                            && n["state"] == "up"
                            && n["pid"].as_u64() == Some(u64::from(member.pid))
                    })
                });
                if up.is_none() {
                    not_up.push(id);
                }
            }
            if not_up.is_empty() {
                return Ok(());
            }
            if let Some(&index) = self.reap().first() {
                return Err(self.died_while_starting(index).into());
            }
            if Instant::now() >= deadline {
                let why = match listed {
                    Err(error) => format!("meta did not answer: {error}"),
                    Ok(_) => format!(
                        "not up yet: node {}; see {}",
                        not_up.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                        self.logs.display()
                    ),
                };
                return Err(cli_error!(
                    "timed out after {} s waiting for meta to report every node up ({why})",
                    READY_TIMEOUT_MS / 1000
                )
                .into());
            }
            if let Some(signal) = signals.sleep(Duration::from_millis(START_POLL_MS)) {
                return Err(Interrupted::Signal(signal));
            }
        }
    }

    /// Stops the members matching `which`: SIGTERM, then SIGKILL after the grace period.
    fn stop_where(&mut self, which: impl Fn(Role) -> bool) {
        let mut stopping = Vec::new();
        for (index, member) in self.members.iter_mut().enumerate() {
            if which(member.role) && member.state != ServiceState::Held {
                member.state = ServiceState::Stopped;
                member.restart_at = None;
            }
            if which(member.role) && member.exited.is_none() {
                if let Ok(Some(status)) = member.process.try_wait() {
                    member.exited = Some(status);
                } else {
                    let _ = send_signal(member.pid, libc::SIGTERM);
                    stopping.push(index);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
        while !stopping.is_empty() {
            stopping.retain(|&index| {
                let member = &mut self.members[index];
                match member.process.try_wait() {
                    Ok(Some(status)) => {
                        member.exited = Some(status);
                        false
                    }
                    _ => true,
                }
            });
            if Instant::now() >= deadline {
                for &index in &stopping {
                    let member = &mut self.members[index];
                    let _ = member.process.kill();
                    member.exited = member.process.wait().ok();
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops every member: repair and nodes first (they talk to meta), meta last.
    fn stop_all(&mut self) {
        self.stop_where(|role| !matches!(role, Role::Meta(_)));
        self.stop_where(|_| true);
        if let Some(postgres) = self.postgres.take() {
            postgres.stop();
        }
    }

    fn member(&self, role: Role) -> Option<&Member> {
        self.members.iter().find(|m| m.role == role)
    }

    /// DIR/cluster.json's content.
    fn cluster_json(&self, plan: &Plan, running: bool, ready_ms: Option<u128>) -> Value {
        let meta = self.member(Role::Meta(0));
        let metas: Vec<Value> = self
            .members
            .iter()
            .filter(|m| matches!(m.role, Role::Meta(_)))
            .map(|m| json!({ "endpoint": m.endpoint, "pid": m.pid, "log": m.log }))
            .collect();
        let nodes: Vec<Value> = self
            .members
            .iter()
            .filter_map(|m| match m.role {
                Role::Node(id) => Some(json!({
                    "id": id,
                    "rack": plan.rack(id),
                    "endpoint": m.endpoint,
                    "pid": m.pid,
                    "disks": m.disks,
                    "log": m.log,
                })),
                _ => None,
            })
            .collect();
        let repair = self.member(Role::Repair).map(|m| json!({ "pid": m.pid, "log": m.log }));
        let s3 = self
            .member(Role::S3)
            .map(|m| json!({ "endpoint": m.endpoint, "pid": m.pid, "log": m.log }));
        let services: Vec<Value> = self
            .members
            .iter()
            .map(|m| {
                json!({
                    "role": m.role.kind(),
                    "name": m.role.name(),
                    "id": match m.role { Role::Node(id) => Some(id), _ => None },
                    "pid": m.pid,
                    "state": m.state.name(),
                    "restarts": m.restarts,
                    "last_exit": m.last_exit,
                    "endpoint": m.endpoint,
                    "log": m.log,
                    "host": self.hosts.as_ref().and_then(|h| h.get(&m.role.host())).map(|h| {
                        json!({ "name": h.name, "address": h.address, "netns": h.netns })
                    }),
                })
            })
            .collect();
        json!({
            "version": CLUSTER_FILE_VERSION,
            "running": running,
            "services": services,
            "up_pid": std::process::id(),
            "dir": plan.dir,
            "meta": meta.and_then(|m| m.endpoint.clone()),
            "meta_pid": meta.map(|m| m.pid),
            "metas": metas,
            "nodes": nodes,
            "repair": repair,
            "s3": s3,
            "disks_per_node": plan.disks_per_node,
            "racks": plan.racks,
            "failure_domain": plan.failure_domain.name(),
            "enforced_failure_domain": plan.failure_domain.name(),
            "meta_store": plan.meta_store.name(),
            "insecure_plaintext": plan.insecure_plaintext,
            "tls": plan.tls.then(|| json!({
                "ca": crate::cert_cli::ca_dir(&plan.dir).join(weft_auth::tls::CA_FILE),
                "admin": crate::cert_cli::host_dir(&plan.dir, crate::cert_cli::ADMIN),
                "gateway_cert": plan.s3_cert.as_ref().map(|(cert, _)| cert),
            })),
            "netns": self.hosts.as_ref().map(|hosts| json!({
                "subnet": hosts.subnet().to_string(),
                "mtu": hosts.mtu(),
                "bridge": hosts.bridge(),
                "gateway": hosts.gateway(),
                "hosts": hosts.all().iter().map(|h| json!({
                    "name": h.name, "address": h.address, "netns": h.netns, "veth": h.veth,
                })).collect::<Vec<_>>(),
            })),
            "postgres": self.postgres.as_ref().map(|pg| json!({
                "address": pg.address(),
                "port": pg.port(),
                "dir": plan.dir.join(POSTGRES_DIR),
                "password_file": plan.dir.join(POSTGRES_DIR).join("password"),
            })),
            "logs": self.logs,
            "ready_ms": ready_ms,
        })
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// On Linux, the child gets SIGTERM when `weft up` dies, even by SIGKILL, so a crashed
/// `weft up` leaves no cluster behind.
pub(crate) fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec; it only calls
        // async-signal-safe functions (prctl, getppid, _exit) and allocates nothing.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl: then no signal would ever come.
                if u32::try_from(libc::getppid()).ok() != Some(parent) {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// `exit status 1` / `killed by signal 9 (SIGKILL)`.
fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(signal) => {
            let name = match signal {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGINT => " (SIGINT)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                _ => "",
            };
            format!("killed by signal {signal}{name}")
        }
        None => status.to_string(),
    }
}

/// Writes `value` to `path` atomically (temp file, then rename).
fn write_json_atomically(path: &Path, value: &Value) -> Result<(), CliError> {
    let temp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(value).expect("a JSON value serializes") + "\n";
    std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|e| cli_error!("cannot write {}: {e}", path.display()))
}

/// True when this executable has `weft serve repair`.
fn has_repair_executor(exe: &Path) -> bool {
    Command::new(exe)
        .args(["serve", "repair", "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The directory of the cluster's PostgreSQL server under `--meta-store postgres`.
const POSTGRES_DIR: &str = "postgres";
/// The host of the cluster's PostgreSQL under `--netns`.
const POSTGRES_HOST: &str = "postgres";
/// Its database of meta's records.
const POSTGRES_DATABASE: &str = "weft";

pub fn run(args: UpArgs) -> Result<(), CliError> {
    let out = Out { json: args.json };
    let started = Instant::now();
    let plan = plan(&args, out)?;
    note_settings(&plan, out);
    let mut signals = Signals::new()?;
    let mut cluster = Supervisor::new(&plan.dir)?;
    match plan.netns {
        Some(subnet) => {
            let hosts =
                crate::hosts::Hosts::create(&plan.dir, subnet, plan.mtu, &plan.host_names())?;
            if !out.json {
                eprintln!(
                    "weft up: {} hosts on bridge {} ({subnet}, this machine at {})",
                    hosts.all().len(),
                    hosts.bridge(),
                    hosts.gateway()
                );
            }
            cluster.hosts = Some(hosts);
        }
        None => {
            // A killed `weft up --netns` on this --dir left its hosts: remove them.
            let tag = crate::hosts::tag_of(&plan.dir);
            match crate::hosts::remove_leftovers(&tag) {
                Ok(0) => {}
                Ok(n) => out.note(&format!(
                    "weft up: removed {n} namespaces and links an earlier --netns run left"
                )),
                Err(error) => out.warn(&format!("cannot remove an earlier run's hosts: {error}")),
            }
        }
    }
    if plan.meta_store == MetaStoreArg::Postgres {
        let dir = plan.dir.join(POSTGRES_DIR);
        if !out.json {
            eprintln!("weft up: starting PostgreSQL for meta's records in {}", dir.display());
        }
        let host = cluster.hosts.as_ref().and_then(|h| h.get(POSTGRES_HOST));
        let enter = |command: &mut Command| {
            if let Some(host) = host {
                host.enter(command);
            }
        };
        let placement = host.map(|host| weft_meta::pg_local::Placement {
            address: host.address.into(),
            clients: plan.netns.map(|s| s.to_string()).unwrap_or_default(),
            enter: &enter,
        });
        let postgres = weft_meta::pg_local::LocalPostgres::start_placed(
            &dir,
            Lifetime::Kept,
            placement.as_ref(),
        )
        .map_err(|e| cli_error!("--meta-store postgres: {e}"))?;
        postgres
            .create_database(POSTGRES_DATABASE)
            .map_err(|e| cli_error!("--meta-store postgres: {e}"))?;
        cluster.meta_store_url = Some(postgres.url(POSTGRES_DATABASE));
        cluster.postgres = Some(postgres);
    }
    match start(&plan, &mut cluster, &mut signals, out) {
        Ok(()) => {}
        Err(Interrupted::Signal(signal)) => {
            out.note(&format!("weft up: {signal} while starting; stopping every process"));
            cluster.stop_all();
            return Ok(());
        }
        Err(Interrupted::Failed(error)) => {
            cluster.stop_all();
            return Err(error);
        }
    }
    let ready_ms = started.elapsed().as_millis();
    let cluster_file = plan.dir.join(CLUSTER_FILE);
    let ready = cluster.cluster_json(&plan, true, Some(ready_ms));
    write_json_atomically(&cluster_file, &ready)?;
    if out.json {
        print_json(&ready);
    } else {
        print_ready(&plan, &cluster, ready_ms, &cluster_file);
    }
    // An optional child that could not start (the repair executor, the gateway: warned about
    // above) is supervised like one that died later: retried with backoff.
    let failed: Vec<usize> = (0..cluster.members.len())
        .filter(|&i| {
            let member = &cluster.members[i];
            member.exited.is_some() && member.state == ServiceState::Starting
        })
        .collect();
    for &index in &failed {
        died(&mut cluster, index, &plan, out);
    }
    if !failed.is_empty() {
        write_json_atomically(&cluster_file, &cluster.cluster_json(&plan, true, Some(ready_ms)))?;
    }
    let result = watch(&mut cluster, &mut signals, out, &plan, &cluster_file, ready_ms);
    cluster.stop_all();
    let _ = write_json_atomically(&cluster_file, &cluster.cluster_json(&plan, false, None));
    out.event(json!({ "event": "stopped" }), "weft up: every process stopped");
    result
}

fn start(
    plan: &Plan,
    cluster: &mut Supervisor,
    signals: &mut Signals,
    out: Out,
) -> Result<(), Interrupted> {
    let deadline = Instant::now() + Duration::from_millis(READY_TIMEOUT_MS);
    let text = |path: &Path| path.display().to_string();
    let secret_file = plan.dir.join(crate::cluster_cli::SECRET_FILE_NAME);
    let secret = weft_auth::ClusterSecret::read_or_create(&secret_file).map_err(|e| {
        cli_error!("{e} (weft up keeps the cluster secret in {})", secret_file.display())
    })?;
    let mut meta_args = vec![
        "serve".to_owned(),
        "meta".to_owned(),
        "--dir".to_owned(),
        text(&plan.dir.join("meta")),
        "--listen".to_owned(),
        plan.on_host(&Role::Meta(0).host(), plan.meta_listen).to_string(),
        "--failure-domain".to_owned(),
        plan.failure_domain.name().to_owned(),
        "--secret-file".to_owned(),
        text(&secret_file),
    ];
    if let Some(ms) = plan.down_after_ms {
        meta_args.extend(["--down-after-ms".to_owned(), ms.to_string()]);
    }
    // The consent given to weft up goes to every listener it starts; or, with TLS, each
    // host gets its TLS directory (certificates issued anew at every start).
    let tls = plan.tls.then(|| issue_certificates(plan)).transpose()?;
    let link = |role: Role| -> Vec<String> {
        match &tls {
            Some(_) => {
                let dir = crate::cert_cli::host_dir(&plan.dir, &role.host());
                vec!["--tls-dir".to_owned(), text(&dir)]
            }
            None if plan.insecure_plaintext => vec!["--insecure-plaintext".to_owned()],
            None => Vec::new(),
        }
    };
    meta_args.extend(link(Role::Meta(0)));
    cluster.spawn(Role::Meta(0), &meta_args, Vec::new())?;
    cluster.wait_ready(&[0], |_| "meta listening on ".to_owned(), deadline, signals)?;
    // More metas on the same store: each on a free port, with a directory of its own (the
    // records are all in PostgreSQL).
    for i in 1..plan.meta_replicas {
        let mut args = meta_args.clone();
        let at = args.iter().position(|a| a == "--dir").expect("meta has --dir") + 1;
        args[at] = text(&plan.dir.join(format!("meta-{}", i + 1)));
        let at = args.iter().position(|a| a == "--listen").expect("meta has --listen") + 1;
        // On a host of its own, each meta takes the same port; on one address, a free one.
        let port = if plan.netns.is_some() { plan.meta_listen.port() } else { 0 };
        args[at] = plan
            .on_host(&Role::Meta(i).host(), SocketAddr::new(plan.meta_listen.ip(), port))
            .to_string();
        if let Some(at) = args.iter().position(|a| a == "--tls-dir") {
            args[at + 1] = text(&crate::cert_cli::host_dir(&plan.dir, &Role::Meta(i).host()));
        }
        cluster.spawn(Role::Meta(i), &args, Vec::new())?;
    }
    let replicas: Vec<usize> = (1..plan.meta_replicas as usize).collect();
    cluster.wait_ready(&replicas, |_| "meta listening on ".to_owned(), deadline, signals)?;
    // Every process of the cluster is given every meta, and fails over between them.
    let meta_url = (0..plan.meta_replicas as usize)
        .map(|i| cluster.members[i].endpoint.clone().expect("meta is ready"))
        .collect::<Vec<_>>()
        .join(",");
    if !out.json {
        eprintln!("weft up: meta ready at {meta_url}; starting {} nodes", plan.nodes);
    }

    // Enrol every node and give it its own key (never the cluster secret): a node can then
    // speak only for itself. The key is derived, so rewriting it on every start is harmless
    // and repairs a key file left from another secret.
    if let Some(admin) = &tls {
        weft_auth::tls::install_client(admin).map_err(|e| cli_error!("{e}"))?;
    }
    let meta = MetaClient::new(&meta_url, &secret)?;
    let mut key_files = Vec::new();
    for id in 1..=plan.nodes {
        meta.put(&["nodes", &id.to_string()], None)?;
        let node_dir = plan.dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&node_dir)
            .map_err(|e| cli_error!("cannot create {}: {e}", node_dir.display()))?;
        // A drill's hold lasts until this restart of weft up.
        let _ = std::fs::remove_file(hold_file(&plan.dir, id));
        let key_file = node_dir.join(NODE_KEY_FILE);
        let _ = std::fs::remove_file(&key_file);
        secret.node_key(id).write_node_file(&key_file).map_err(CliError::from)?;
        key_files.push(key_file);
    }

    let first_node = cluster.members.len();
    for id in 1..=plan.nodes {
        let disks = plan.disks(id);
        let mut node_args = vec![
            "serve".to_owned(),
            "node".to_owned(),
            "--meta".to_owned(),
            meta_url.clone(),
            "--id".to_owned(),
            id.to_string(),
            "--listen".to_owned(),
            plan.node_listen(id).to_string(),
            "--key-file".to_owned(),
            text(&key_files[id as usize - 1]),
        ];
        node_args.extend(link(Role::Node(id)));
        for disk in &disks {
            node_args.extend(["--disk".to_owned(), text(disk)]);
        }
        for lstor in plan.lstors(id) {
            node_args.extend(["--lstor".to_owned(), text(&lstor)]);
        }
        if let Some(rack) = plan.rack(id) {
            node_args.extend(["--rack".to_owned(), rack.to_string()]);
        }
        if let Some(ms) = plan.heartbeat_ms {
            node_args.extend(["--heartbeat-ms".to_owned(), ms.to_string()]);
        }
        if let Some(ms) = plan.scrub_interval_ms {
            node_args.extend(["--scrub-interval".to_owned(), format!("{ms}ms")]);
        }
        if let Some(ratio) = plan.nearfull_ratio {
            node_args.extend(["--nearfull-ratio".to_owned(), ratio.to_string()]);
        }
        if let Some(ratio) = plan.full_ratio {
            node_args.extend(["--full-ratio".to_owned(), ratio.to_string()]);
        }
        if let Some(model) = &plan.disk_model {
            node_args.extend(["--disk-model".to_owned(), model.clone()]);
        }
        if let Some(rate) = &plan.net_model {
            node_args.extend(["--net-model".to_owned(), rate.clone()]);
        }
        cluster.spawn(Role::Node(id), &node_args, disks)?;
    }
    let nodes: Vec<usize> = (first_node..cluster.members.len()).collect();
    let prefix = |role: Role| match role {
        Role::Node(id) => format!("node {id} listening on "),
        other => format!("{} listening on ", other.name()),
    };
    cluster.wait_ready(&nodes, prefix, deadline, signals)?;
    cluster.wait_nodes_up(&meta, deadline, signals)?;

    if plan.no_repair {
        out.note("weft up: no repair executor (--no-repair): lost units are not rebuilt");
    } else if has_repair_executor(&cluster.exe) {
        let mut repair_args =
            ["serve", "repair", "--meta", meta_url.as_str(), "--secret-file", &text(&secret_file)]
                .map(str::to_owned)
                .to_vec();
        if let Some(ms) = plan.lifecycle_interval_ms {
            repair_args.extend(["--lifecycle-interval".to_owned(), format!("{ms}ms")]);
        }
        if let Some(ms) = plan.lifecycle_day_ms {
            repair_args.extend(["--lifecycle-day".to_owned(), format!("{ms}ms")]);
        }
        if let Some(rate) = plan.repair_rate {
            repair_args.extend(["--rate".to_owned(), rate.to_string()]);
        }
        if tls.is_some() {
            repair_args.extend(link(Role::Repair));
        }
        cluster.spawn(Role::Repair, &repair_args, Vec::new())?;
        let index = cluster.members.len() - 1;
        let prefix = |_| "repair executor ".to_owned();
        // The cluster serves without a repair executor (lost units are then only rebuilt
        // once one runs), so one that cannot start is a warning, not a failed start.
        match cluster.wait_ready(&[index], prefix, deadline, signals) {
            Ok(()) => {}
            Err(Interrupted::Failed(error)) => out.warn(&format!(
                "the repair executor did not start, so lost units are not rebuilt: {error}"
            )),
            Err(signal) => return Err(signal),
        }
    } else {
        out.note(
            "weft up: repair executor not started: this weft has no `weft serve repair` yet, \
             so lost units are not rebuilt",
        );
    }

    let mut s3_args = [
        "serve",
        "s3",
        "--meta",
        meta_url.as_str(),
        "--listen",
        plan.on_host(&Role::S3.host(), plan.s3_listen).to_string().as_str(),
        "--secret-file",
        &text(&secret_file),
    ]
    .map(str::to_owned)
    .to_vec();
    s3_args.extend(link(Role::S3));
    // The master key of encryption at rest: made on the first start, read by the gateway
    // (and `weft kms`) only.
    let master_key = plan.dir.join(crate::kms_cli::MASTER_KEY_FILE_NAME);
    if !master_key.exists() {
        weft_s3::sse::MasterKey::create_file(&master_key).map_err(|e| cli_error!("{e}"))?;
    }
    s3_args.extend(["--master-key".to_owned(), text(&master_key)]);
    if let Some((cert, key)) = plan.s3_cert.as_ref().filter(|_| tls.is_some()) {
        s3_args.extend(["--tls-cert".to_owned(), text(cert), "--tls-key".to_owned(), text(key)]);
    }
    cluster.spawn(Role::S3, &s3_args, Vec::new())?;
    let index = cluster.members.len() - 1;
    // The cluster serves weft clients without the gateway (e.g. when --s3-listen's port is
    // taken), so one that cannot start is a warning, not a failed start.
    match cluster.wait_ready(&[index], |_| "s3 gateway listening on ".to_owned(), deadline, signals)
    {
        Ok(()) => {
            let endpoint = cluster.members[index].endpoint.clone().expect("the gateway is ready");
            write_s3_file(&plan.dir, &meta, &endpoint)?;
        }
        Err(Interrupted::Failed(error)) => out.warn(&format!(
            "the S3 gateway did not start, so the cluster serves no S3 (try --s3-listen \
             127.0.0.1:0): {error}"
        )),
        Err(signal) => return Err(signal),
    }
    Ok(())
}

/// Makes the cluster CA (once) and issues every host of the plan a certificate for the
/// address it listens on; returns the TLS files of `admin`, weft up's own identity.
fn issue_certificates(plan: &Plan) -> Result<weft_auth::tls::TlsFiles, CliError> {
    let ca = crate::cert_cli::open_or_create_ca(&plan.dir)?;
    let mut roles = vec![Role::Repair, Role::S3];
    roles.extend((0..plan.meta_replicas).map(Role::Meta));
    roles.extend((1..=plan.nodes).map(Role::Node));
    let loopback = std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
    for role in roles {
        let listen = match role {
            Role::S3 => plan.on_host(&role.host(), plan.s3_listen),
            _ => plan.on_host(&role.host(), plan.meta_listen),
        };
        let mut ips = vec![listen.ip()];
        let mut dns = Vec::new();
        if listen.ip().is_loopback() || listen.ip().is_unspecified() {
            ips.push(loopback);
            dns.push("localhost".to_owned());
        }
        ips.dedup();
        crate::cert_cli::issue_host(&ca, &plan.dir, &role.host(), ips, dns)?;
    }
    let admin =
        crate::cert_cli::issue_host(&ca, &plan.dir, crate::cert_cli::ADMIN, vec![], vec![])?;
    Ok(weft_auth::tls::TlsFiles::in_dir(&admin))
}

/// DIR/s3.json as a previous start wrote it, if it is readable and names a key.
fn read_s3_file(dir: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join(S3_FILE)).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["access_key"].is_string().then_some(value)
}

/// Writes DIR/s3.json with the gateway's endpoint and the default access key: the one
/// recorded there if meta still has it, else a new one (first start, or a wiped meta).
fn write_s3_file(dir: &Path, meta: &MetaClient, endpoint: &str) -> Result<(), CliError> {
    let recorded = read_s3_file(dir).filter(|s3| {
        let id = s3["access_key"].as_str().unwrap_or_default();
        meta.get(&["records", weft_s3::ACCESS_KEYS, id]).is_ok()
    });
    let (access_key, secret_key) = match recorded {
        Some(s3) => (
            s3["access_key"].as_str().unwrap_or_default().to_owned(),
            s3["secret_key"].as_str().unwrap_or_default().to_owned(),
        ),
        // The operator's own key: it may choose policies.
        None => {
            crate::key_cli::create_key(meta, "weft up default key", true, None, Default::default())?
        }
    };
    let s3 = json!({
        "endpoint": endpoint,
        "access_key": access_key,
        "secret_key": secret_key,
        "region": weft_s3::DEFAULT_REGION,
    });
    let path = dir.join(S3_FILE);
    write_json_atomically(&path, &s3)?;
    // It holds a secret: readable by its owner only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| cli_error!("cannot restrict {}: {e}", path.display()))?;
    }
    Ok(())
}

fn print_ready(plan: &Plan, cluster: &Supervisor, ready_ms: u128, cluster_file: &Path) {
    let disks = if plan.disks_per_node == 1 { "disk" } else { "disks" };
    let racks = plan.racks.map_or(String::new(), |racks| format!(" in {racks} racks"));
    println!(
        "weft up: {} nodes ({} {disks} each){racks} ready in {:.1} s in {}; failure domain {}",
        plan.nodes,
        plan.disks_per_node,
        ready_ms as f64 / 1000.0,
        plan.dir.display(),
        plan.failure_domain.name()
    );
    if let Some(hosts) = &cluster.hosts {
        println!(
            "hosts: every process in a network namespace of its own on bridge {} ({}); this \
             machine is {} there (`ip netns list` shows them)",
            hosts.bridge(),
            hosts.subnet(),
            hosts.gateway()
        );
    }
    if plan.tls {
        let ca = crate::cert_cli::ca_dir(&plan.dir).join(weft_auth::tls::CA_FILE);
        match &plan.s3_cert {
            None => println!(
                "tls: every link is TLS, certificates of the cluster CA {} (S3 clients: \
                 AWS_CA_BUNDLE={})",
                ca.display(),
                ca.display()
            ),
            Some((cert, _)) => println!(
                "tls: every link is TLS (cluster CA {}); the gateway shows {}",
                ca.display(),
                cert.display()
            ),
        }
    }
    if plan.insecure_plaintext {
        println!(
            "{}",
            red("warning: plain HTTP on addresses other than loopback (--insecure-plaintext): \
                 requests, units and signatures cross the network in clear")
        );
    }
    let mut meta_url = String::new();
    for member in &cluster.members {
        let endpoint = member.endpoint.as_deref().unwrap_or("-");
        match member.role {
            Role::Meta(i) => {
                if !meta_url.is_empty() {
                    meta_url.push(',');
                }
                meta_url.push_str(endpoint);
                let name = if i == 0 { "meta".to_owned() } else { format!("meta {}", i + 1) };
                println!("  {name:<8} {endpoint:<24}  pid {}", member.pid);
            }
            Role::Node(id) => {
                let disks: Vec<String> =
                    member.disks.iter().map(|d| d.display().to_string()).collect();
                let rack = plan.rack(id).map_or(String::new(), |rack| format!("rack {rack}  "));
                println!(
                    "  node {id:<3} {endpoint:<24}  pid {:<8} {rack}{}",
                    member.pid,
                    disks.join(", ")
                );
            }
            Role::Repair => println!("  repair executor                    pid {}", member.pid),
            Role::S3 => println!("  s3       {endpoint:<24}  pid {}", member.pid),
        }
    }
    let gateway_up = cluster.member(Role::S3).is_some_and(|m| m.endpoint.is_some());
    if let Some(s3) = read_s3_file(&plan.dir).filter(|_| gateway_up) {
        println!(
            "s3: endpoint {}  access key {}  (secret and region in {})",
            s3["endpoint"].as_str().unwrap_or("-"),
            s3["access_key"].as_str().unwrap_or("-"),
            plan.dir.join(S3_FILE).display()
        );
    }
    println!(
        "logs in {}; endpoints and pids in {}",
        cluster.logs.display(),
        cluster_file.display()
    );
    if plan.domains() < 9 {
        let level = plan.failure_domain.name();
        println!(
            "note: weft's default policy rs(6,3) needs 9 distinct {level}s; with {}, new \
             buckets default to {}",
            plan.domains(),
            weft_meta::service::default_policy_for(plan.domains() as usize)["code"]
                .as_str()
                .unwrap_or("rs(2,1)")
        );
    }
    // Clients find the secret at ./weft-data/cluster.secret by default; name it otherwise.
    let secret_file = plan.dir.join(crate::cluster_cli::SECRET_FILE_NAME);
    let default_secret = std::path::Path::new(crate::cluster_cli::DEFAULT_SECRET_FILE);
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same(&secret_file, default_secret) {
        println!("try: WEFT_META={meta_url} weft status");
    } else {
        println!(
            "try: WEFT_META={meta_url} WEFT_SECRET_FILE={} weft status",
            secret_file.display()
        );
    }
    println!("Ctrl-C stops the cluster; `weft up --dir {}` brings it back.", plan.dir.display());
}

/// `text` in red when stdout is a terminal (and NO_COLOR is unset), else as it is.
pub(crate) fn red(text: &str) -> String {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        format!("\x1b[31m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Watches the running cluster until a signal: restarts every child that dies (after
/// [`restart_delay_ms`]) unless a drill holds it, and rewrites cluster.json on each change.
fn watch(
    cluster: &mut Supervisor,
    signals: &mut Signals,
    out: Out,
    plan: &Plan,
    cluster_file: &Path,
    ready_ms: u128,
) -> Result<(), CliError> {
    loop {
        if let Some(signal) = signals.sleep(Duration::from_millis(WATCH_POLL_MS)) {
            out.event(
                json!({ "event": "stopping", "signal": signal }),
                &format!("weft up: {signal}: stopping every process"),
            );
            return Ok(());
        }
        let mut changed = false;
        while let Ok((index, spawns, line)) = cluster.lines.try_recv() {
            let member = &mut cluster.members[index];
            let Some(line) = line.filter(|_| spawns == member.spawns) else { continue };
            let ready = member.state == ServiceState::Starting;
            if ready {
                if let Some(endpoint) = line.strip_prefix(&member.role.ready_prefix()) {
                    member.endpoint = Some(endpoint.trim().to_owned());
                }
                member.state = ServiceState::Running;
                changed = true;
                out.event(
                    json!({
                        "event": "restarted",
                        "name": member.role.name(),
                        "role": member.role.kind(),
                        "id": match member.role { Role::Node(id) => Some(id), _ => None },
                        "pid": member.pid,
                        "restarts": member.restarts,
                    }),
                    &format!(
                        "weft up: {} is back (pid {}, restart {})",
                        member.role.name(),
                        member.pid,
                        member.restarts
                    ),
                );
            }
            if member.role == Role::Repair {
                out.note(&format!("weft up: repair executor: {line}"));
            }
            if member.role == Role::S3 && ready {
                // A gateway that could not start at first has no s3.json yet.
                if let Err(error) = refresh_s3_file(plan, cluster) {
                    out.warn(&format!("cannot write {}: {error}", S3_FILE));
                }
            }
        }
        for index in cluster.reap() {
            changed = true;
            died(cluster, index, plan, out);
        }
        let now = Instant::now();
        let due: Vec<usize> = (0..cluster.members.len())
            .filter(|&i| {
                let member = &cluster.members[i];
                member.state == ServiceState::Restarting
                    && member.restart_at.is_some_and(|at| at <= now)
            })
            .collect();
        for index in due {
            changed = true;
            if let Err(error) = cluster.respawn(index) {
                let member = &mut cluster.members[index];
                let delay_ms = restart_delay_ms(member.backoff_ms, Duration::ZERO);
                member.backoff_ms = delay_ms;
                member.restart_at = Some(Instant::now() + Duration::from_millis(delay_ms));
                member.last_exit = Some(format!("could not be started again: {error}"));
                out.warn(&format!("{error}; trying again in {} ms", delay_ms));
            }
        }
        if changed {
            let file = cluster.cluster_json(plan, true, Some(ready_ms));
            if let Err(error) = write_json_atomically(cluster_file, &file) {
                out.warn(&error.to_string());
            }
        }
    }
}

/// Rewrites DIR/s3.json for the running gateway (same key, its endpoint now).
fn refresh_s3_file(plan: &Plan, cluster: &Supervisor) -> Result<(), CliError> {
    let endpoint = cluster.member(Role::S3).and_then(|m| m.endpoint.clone());
    let meta_url = cluster.member(Role::Meta(0)).and_then(|m| m.endpoint.clone());
    let (Some(endpoint), Some(meta_url)) = (endpoint, meta_url) else { return Ok(()) };
    let secret_file = plan.dir.join(crate::cluster_cli::SECRET_FILE_NAME);
    let secret = weft_auth::ClusterSecret::read_file(&secret_file).map_err(CliError::from)?;
    write_s3_file(&plan.dir, &MetaClient::new(&meta_url, &secret)?, &endpoint)
}

/// How long to wait before restarting a child that ran for `ran` after the previous delay
/// `previous_ms`: [`RESTART_FIRST_MS`] after a long run (or the first death), else twice the
/// previous delay, at most [`RESTART_MAX_MS`]. A child that dies at once is so retried ever
/// more slowly, never in a tight loop.
fn restart_delay_ms(previous_ms: u64, ran: Duration) -> u64 {
    if previous_ms == 0 || ran >= Duration::from_millis(STABLE_AFTER_MS) {
        RESTART_FIRST_MS
    } else {
        (previous_ms * 2).min(RESTART_MAX_MS)
    }
}

/// The file that holds node `id` down (a drill stopped it): `DIR/node-<id>/held`.
fn hold_file(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("node-{id}")).join(HOLD_FILE)
}

/// Records member `index`'s death, says so (with the tail of its log) and schedules its
/// restart, unless a drill holds it down.
fn died(cluster: &mut Supervisor, index: usize, plan: &Plan, out: Out) {
    let tail = cluster.log_tail(index);
    let member = &mut cluster.members[index];
    let status = member.exited.map_or("exited".to_owned(), describe_exit);
    let ran = member.started_at.elapsed();
    member.last_exit = Some(status.clone());
    let held = match member.role {
        Role::Node(id) => hold_file(&plan.dir, id).exists(),
        _ => false,
    };
    let name = member.role.name();
    let mut event = json!({
        "event": "exited",
        "name": name,
        "role": member.role.kind(),
        "id": match member.role { Role::Node(id) => Some(id), _ => None },
        "pid": member.pid,
        "status": status,
        "restarts": member.restarts,
    });
    if held {
        member.state = ServiceState::Held;
        event["held"] = json!(true);
        out.event(
            event,
            &format!(
                "weft up: {name} (pid {}) {status}; held down by a drill (weft node \
                 stop|kill): meta reports it down, restart weft up to bring it back",
                member.pid
            ),
        );
        return;
    }
    let delay_ms = restart_delay_ms(member.backoff_ms, ran);
    member.backoff_ms = delay_ms;
    member.state = ServiceState::Restarting;
    member.restart_at = Some(Instant::now() + Duration::from_millis(delay_ms));
    event["restart_in_ms"] = json!(delay_ms);
    let line = format!(
        "weft up: {name} (pid {}) {status} after {:.1} s; restarting it in {:.1} s (restart \
         {})",
        member.pid,
        ran.as_secs_f64(),
        delay_ms as f64 / 1000.0,
        member.restarts + 1
    );
    out.event(event, &line);
    // The cause, for the human reading either output.
    eprintln!("weft up: {name} {status}. {tail}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_layout::FailureDomain;

    fn args(extra: &[&str]) -> UpArgs {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct Wrapper {
            #[command(flatten)]
            up: UpArgs,
        }
        let mut argv = vec!["up"];
        argv.extend_from_slice(extra);
        Wrapper::parse_from(argv).up
    }

    #[test]
    fn plans_take_flags_then_the_recorded_cluster_then_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        let out = Out { json: true };
        let planned = plan(&args(&["--dir", dir]), out).unwrap();
        assert_eq!(
            (planned.nodes, planned.disks_per_node),
            (DEFAULT_NODES, DEFAULT_DISKS_PER_NODE)
        );
        assert_eq!(planned.node_listen(3).port(), 7703);
        assert_eq!(planned.disks(2)[0], planned.dir.join("node-2").join("disk-0"));

        let recorded = json!({"nodes": [{}, {}, {}], "disks_per_node": 2, "racks": 3,
                              "failure_domain": "rack", "running": false});
        write_json_atomically(&tmp.path().join(CLUSTER_FILE), &recorded).unwrap();
        let planned = plan(&args(&["--dir", dir]), out).unwrap();
        assert_eq!((planned.nodes, planned.disks_per_node, planned.racks), (3, 2, Some(3)));
        assert_eq!(planned.failure_domain, FailureDomainArg::Rack);
        let error = plan(&args(&["--dir", dir, "--disks-per-node", "1"]), out).unwrap_err();
        assert!(error.0.contains("--disks-per-node 2"), "{error}");
        let planned = plan(&args(&["--dir", dir, "--nodes", "5", "--racks", "2"]), out).unwrap();
        assert_eq!((planned.nodes, planned.racks), (5, Some(2)));
        let racks: Vec<Option<u32>> = (1..=5).map(|id| planned.rack(id)).collect();
        assert_eq!(racks, [Some(0), Some(1), Some(0), Some(1), Some(0)]);
        assert_eq!(planned.domains(), 2, "level rack (recorded): 2 racks");
        let planned = plan(&args(&["--dir", dir, "--failure-domain", "disk"]), out).unwrap();
        assert_eq!((planned.failure_domain.level(), planned.domains()), (FailureDomain::Disk, 6));
    }

    #[test]
    fn bad_plans_are_refused_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_str().unwrap();
        let out = Out { json: true };
        let refused = |extra: &[&str]| {
            let mut all = vec!["--dir", dir];
            all.extend_from_slice(extra);
            plan(&args(&all), out).unwrap_err().0
        };
        assert!(refused(&["--nodes", "0"]).contains("--nodes"));
        assert!(refused(&["--racks", "13"]).contains("--racks"));
        assert!(refused(&["--meta-listen", "127.0.0.1:65530"]).contains("65535"));
        assert!(refused(&["--down-after-ms", "0"]).contains("positive"));
    }

    #[test]
    fn restarts_back_off_exponentially_to_a_cap_and_reset_after_a_long_run() {
        let quick = Duration::from_millis(100);
        let mut delays = Vec::new();
        let mut previous = 0;
        for _ in 0..10 {
            previous = restart_delay_ms(previous, quick);
            delays.push(previous);
        }
        assert_eq!(
            delays,
            [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000],
            "0.5 s doubling to the 30 s cap"
        );
        let long = Duration::from_millis(STABLE_AFTER_MS);
        assert_eq!(restart_delay_ms(RESTART_MAX_MS, long), RESTART_FIRST_MS, "reset");
    }

    #[test]
    fn exits_are_described() {
        assert_eq!(describe_exit(ExitStatus::from_raw(9)), "killed by signal 9 (SIGKILL)");
        assert_eq!(describe_exit(ExitStatus::from_raw(1 << 8)), "exit status 1");
    }
}
