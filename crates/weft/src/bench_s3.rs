//! `weft bench s3`: S3 throughput and server CPU per GiB of `weft up`'s gateway, and of MinIO
//! beside it when asked, driven by one load generator (this one) over real sockets.
//!
//! Invariants:
//! - Every target gets the same load: the same object sizes, client counts, durations, bodies
//!   and signing (SigV4; the payload's SHA-256 signed by default, as SDKs do over plain HTTP,
//!   or `UNSIGNED-PAYLOAD`), so the ratios compare servers, not clients.
//! - An https:// endpoint is trusted only through the CAs named (`--ca`; else AWS_CA_BUNDLE
//!   and the cluster's gateway CA, `cert_cli::gateway_ca`): never without verification.
//! - A phase (put or get, one object size, one client count) runs its clients for
//!   `--duration`; requests in flight when it ends are finished and counted. Rates are object
//!   bytes per second over the phase's wall time.
//! - Every GET body is compared byte for byte with what its PUT sent, and every request must
//!   succeed: a failed request or a wrong byte ends the run with an error, never a figure.
//! - Server CPU is the user + system time the target's processes spent during the phase
//!   (`/proc/PID/stat`): for weft every service `weft up` lists in its cluster.json (meta,
//!   nodes, gateway, repair executor) and `weft up` itself; for MinIO its one process.
//! - Targets alternate within every round, the order rotating from round to round, so the
//!   machine's noise falls on all alike; a figure is the median over rounds.
//! - The objects a phase wrote are deleted after its get phase (untimed), so runs do not fill
//!   the disks. MinIO started by the bench runs on its own temporary directory, removed after.
//! - Every row names the machine it was measured on (CPU model, cores, the SIMD and hashing
//!   extensions the paths look for; `crate::bench::Machine`); the table ends with that line.

use std::{
    collections::BTreeMap,
    io::IsTerminal,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime},
};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use rand::{rngs::StdRng, RngCore, SeedableRng};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use weft_s3::sigv4;

use crate::{cli_error, cluster_cli::MetaUrlArgs, parse_size, CliError};

/// Distinct bodies per object size: object `seq` carries body `seq % BODY_VARIANTS`, so a GET
/// answered with another object's bytes is caught.
const BODY_VARIANTS: usize = 16;
/// Offset between two bodies' starts in the shared random buffer (odd, so no body is another
/// shifted by a whole word).
const BODY_STRIDE: usize = 4099;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum S3Op {
    /// PutObject of new keys.
    Put,
    /// GetObject of the keys the put phase wrote (every byte verified).
    Get,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Payload {
    /// x-amz-content-sha256 is the body's SHA-256 (what SDKs send over plain HTTP): the
    /// server hashes every byte to check it.
    Signed,
    /// x-amz-content-sha256: UNSIGNED-PAYLOAD (what SDKs send over HTTPS).
    Unsigned,
}

/// A flexible checksum every PUT carries (`--checksum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchChecksum {
    Crc32,
    Crc32c,
    Crc64nvme,
    Sha1,
    Sha256,
}

impl BenchChecksum {
    fn algorithm(self) -> weft_s3::checksum::Algorithm {
        use weft_s3::checksum::Algorithm;
        match self {
            BenchChecksum::Crc32 => Algorithm::Crc32,
            BenchChecksum::Crc32c => Algorithm::Crc32c,
            BenchChecksum::Crc64nvme => Algorithm::Crc64Nvme,
            BenchChecksum::Sha1 => Algorithm::Sha1,
            BenchChecksum::Sha256 => Algorithm::Sha256,
        }
    }
}

/// The encryption at rest every PUT asks for (`--sse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchSse {
    /// SSE-S3: `x-amz-server-side-encryption: AES256`.
    S3,
    /// SSE-KMS with the gateway's default KMS key: `x-amz-server-side-encryption: aws:kms`.
    Kms,
}

impl BenchSse {
    /// The `x-amz-server-side-encryption` value.
    fn header(self) -> &'static str {
        match self {
            BenchSse::S3 => "AES256",
            BenchSse::Kms => "aws:kms",
        }
    }

    /// The rows' name of it.
    fn name(self) -> &'static str {
        match self {
            BenchSse::S3 => "sse-s3",
            BenchSse::Kms => "sse-kms",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum S3Peer {
    /// MinIO (`minio` on PATH or --minio-bin), started by the bench in erasure mode on
    /// --minio-drives directories with EC:r parity.
    Minio,
}

#[derive(Debug, Args)]
pub struct S3BenchArgs {
    /// Phases to measure, comma separated (a get phase reads what its put phase wrote; the
    /// put phase runs even when only get is asked).
    #[arg(long, value_delimiter = ',', default_value = "put,get")]
    pub ops: Vec<S3Op>,
    /// Object sizes, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "64MiB,1MiB", value_parser = parse_size)]
    pub object_sizes: Vec<usize>,
    /// Concurrent clients, comma separated (each one request at a time).
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub clients: Vec<usize>,
    /// How long each phase issues requests [e.g. 10s, 500ms, 1m].
    #[arg(long, default_value = "10s", value_parser = weft_client::gc::parse_duration_ms)]
    pub duration: u64,
    /// Rounds: every target runs every phase once per round; figures are medians.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Bucket to write into (created when missing).
    #[arg(long, default_value = "bench-s3")]
    pub bucket: String,
    /// weft's objects' policy, sent as x-weft-policy when the bench creates the bucket
    /// [default: the cluster's default policy]; with --compare minio its r is MinIO's parity.
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<String>,
    /// How the payload is signed.
    #[arg(long, value_enum, default_value = "signed")]
    pub payload: Payload,
    /// weft's S3 endpoint [default: AWS_ENDPOINT_URL, else the s3.json `weft up` wrote beside
    /// the cluster secret].
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// Access key id [default: AWS_ACCESS_KEY_ID, else s3.json's].
    #[arg(long)]
    pub access_key: Option<String>,
    /// Secret key [default: AWS_SECRET_ACCESS_KEY, else s3.json's].
    #[arg(long)]
    pub secret_key: Option<String>,
    /// Process ids whose CPU counts as weft's server CPU, comma separated [default: the
    /// services in the cluster.json of `weft up` beside the cluster secret].
    #[arg(long, value_delimiter = ',')]
    pub server_pids: Vec<u32>,
    /// Run the same load against a peer, side by side, and report weft ÷ peer.
    #[arg(long, value_enum)]
    pub compare: Option<S3Peer>,
    /// The minio binary [default: minio on PATH].
    #[arg(long, default_value = "minio")]
    pub minio_bin: PathBuf,
    /// Directory drives MinIO gets (match the cluster's node count).
    #[arg(long, default_value_t = 12)]
    pub minio_drives: usize,
    /// MinIO's parity per erasure set [default: r of --policy, else 3].
    #[arg(long)]
    pub minio_parity: Option<usize>,
    /// After the healthy phases, stop this many of weft's nodes (as `weft node stop` does:
    /// they stay down until `weft up` restarts) and run the get phase again, degraded: a row
    /// `weft-down` beside the healthy one, with degraded ÷ healthy. One object size, one
    /// clients value, one round, no --compare (the nodes do not come back by themselves).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub down_nodes: usize,
    /// Run the same load against a second weft cluster, side by side, and report the first
    /// ÷ this one: the directory of its `weft up --dir` (its cluster.secret, s3.json and
    /// cluster.json), e.g. a TLS cluster against a plain-HTTP one. Rows are named by the
    /// clusters' directories (by their schemes, weft-https and weft-http, when the
    /// directories' names are alike).
    #[arg(long, value_name = "DIR", conflicts_with = "compare")]
    pub compare_cluster: Option<PathBuf>,
    /// The CA that signed the gateway's certificate, for an https:// endpoint [default:
    /// AWS_CA_BUNDLE, else the CA s3.json or cluster.json names].
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// A new connection (and, over HTTPS, a TLS handshake) for every request, instead of
    /// reusing idle ones.
    #[arg(long)]
    pub no_keepalive: bool,
    /// While the phases run, reissue every host certificate of the (first) cluster this
    /// often, as `weft cert rotate` does: any request that fails ends the run with an
    /// error, so a run that completes failed none. Rows count the rotations during their
    /// phases (`cert_rotations`) [e.g. 5s].
    #[arg(long, value_name = "EVERY", value_parser = weft_client::gc::parse_duration_ms)]
    pub rotate_certs: Option<u64>,
    /// Every PUT carries this flexible checksum of its body (`x-amz-checksum-ALGO`, signed;
    /// computed once per body before the run, so the client pays nothing for it), which
    /// weft checks and keeps. Rows name it (`checksum`).
    #[arg(long, value_enum, value_name = "ALGO")]
    pub checksum: Option<BenchChecksum>,
    /// With --checksum: run the same cluster twice side by side, with the checksum (rows
    /// `weft-ALGO`) and without (rows `weft`), and report with ÷ without.
    #[arg(long, requires = "checksum", conflicts_with_all = ["compare", "compare_cluster"])]
    pub compare_checksum: bool,
    /// Every PUT asks for this encryption at rest (the gateway seals each object before it
    /// is coded; GETs open it). Rows name it (`sse`).
    #[arg(long, value_enum, value_name = "MODE")]
    pub sse: Option<BenchSse>,
    /// With --sse: run the same cluster twice side by side, encrypted (rows `weft-sse-s3`,
    /// `weft-sse-kms`) and not (rows `weft`), and report encrypted ÷ not.
    #[arg(
        long,
        requires = "sse",
        conflicts_with_all = ["compare", "compare_cluster", "compare_checksum"]
    )]
    pub compare_sse: bool,
    /// Print the rows as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Print each row as one JSON object per line (at the end of the run: rows are
    /// medians over its rounds).
    #[arg(long, conflicts_with = "json")]
    pub json_lines: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

/// SigV4 for path-style requests to one endpoint.
#[derive(Clone)]
struct Signer {
    host: String,
    access_key: String,
    secret_key: String,
    region: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({}@{}, secret redacted)", self.access_key, self.host)
    }
}

impl Signer {
    /// The headers (x-amz-date, x-amz-content-sha256, authorization) of a request whose path
    /// is `path` (already percent-encoded), with no query string.
    /// `checksum` (a lower-case `x-amz-checksum-*` name and its value) is signed too; the
    /// caller sends it.
    fn headers(
        &self,
        method: &str,
        path: &str,
        payload_sha256: &str,
        checksum: Option<(&str, &str)>,
    ) -> [(&'static str, String); 3] {
        let date = sigv4::amz_date(SystemTime::now());
        let day = &date[..8];
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        // Canonical headers sorted by name: x-amz-checksum-* sorts before x-amz-content-*.
        let (checksum_line, checksum_name) = match checksum {
            Some((name, value)) => (format!("{name}:{value}\n"), format!("{name};")),
            None => (String::new(), String::new()),
        };
        let signed = format!("host;{checksum_name}x-amz-content-sha256;x-amz-date");
        let canonical = format!(
            "{method}\n{path}\n\nhost:{}\n{checksum_line}x-amz-content-sha256:{payload_sha256}\nx-amz-date:{date}\n\n{signed}\n{payload_sha256}",
            self.host
        );
        let key = sigv4::signing_key(&self.secret_key, day, &self.region, "s3");
        let signature = sigv4::signature(&key, &date, &scope, &canonical);
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
            self.access_key
        );
        [
            ("x-amz-date", date),
            ("x-amz-content-sha256", payload_sha256.to_owned()),
            ("authorization", authorization),
        ]
    }
}

/// Where a target's server CPU is read from.
#[derive(Debug, Clone)]
enum ServerPids {
    /// The services of `weft up`, read from its cluster.json at every phase (restarts change
    /// them).
    ClusterFile(PathBuf),
    Fixed(Vec<u32>),
}

impl ServerPids {
    /// The server's processes, each with its role (weft up's role names: meta, node, s3,
    /// repair; `up` for weft up itself; the name given for a fixed list).
    fn pids(&self, fixed_role: &str) -> Vec<(u32, String)> {
        match self {
            ServerPids::Fixed(pids) => pids.iter().map(|&p| (p, fixed_role.to_owned())).collect(),
            ServerPids::ClusterFile(file) => {
                let value: Value = std::fs::read_to_string(file)
                    .ok()
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .unwrap_or(Value::Null);
                let mut pids: Vec<(u32, String)> = value["services"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| {
                        let pid = u32::try_from(s["pid"].as_u64()?).ok()?;
                        Some((pid, s["role"].as_str().unwrap_or("other").to_owned()))
                    })
                    .chain(
                        value["up_pid"]
                            .as_u64()
                            .and_then(|p| u32::try_from(p).ok())
                            .map(|p| (p, "up".to_owned())),
                    )
                    .collect();
                pids.sort_unstable();
                pids.dedup_by_key(|(pid, _)| *pid);
                pids
            }
        }
    }
}

/// CPU seconds so far of each role's processes (those still running).
fn cpu_by_role(pids: &[(u32, String)]) -> BTreeMap<String, f64> {
    let mut roles = BTreeMap::new();
    for (pid, role) in pids {
        *roles.entry(role.clone()).or_insert(0.0) += process_cpu_seconds(*pid).unwrap_or(0.0);
    }
    roles
}

/// User + system CPU seconds of one process so far (None once it is gone).
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its closing ')' are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks.max(1.0))
}

/// CPU seconds of this process (all its threads: the load generator).
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One S3 server under test.
#[derive(Debug, Clone)]
struct Target {
    name: String,
    endpoint: String,
    /// The HTTP client of this target (its CA, keep-alive or not).
    http: reqwest::Client,
    signer: Signer,
    pids: ServerPids,
    /// Where the server keeps objects (weft: every node's disks; MinIO: its drives): the
    /// bytes of their files before and after a put phase give what it stored. Empty when
    /// unknown (a weft cluster not started by `weft up` on this machine).
    data_dirs: Vec<PathBuf>,
    /// The checksum its PUTs carry (`--checksum`).
    checksum: Option<BenchChecksum>,
    /// The encryption its PUTs ask for (`--sse`).
    sse: Option<BenchSse>,
}

impl Target {
    /// Whether this is a weft gateway (not the peer the bench started).
    fn is_weft(&self) -> bool {
        self.name != "minio"
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.endpoint)
    }

    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(Bytes, &str)>,
        extra: &[(&str, &str)],
    ) -> Result<reqwest::Response, String> {
        self.request_with(method, path, body, None, extra).await
    }

    /// A request whose headers include `checksum` (name and value), signed.
    async fn request_with(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(Bytes, &str)>,
        checksum: Option<(&str, &str)>,
        extra: &[(&str, &str)],
    ) -> Result<reqwest::Response, String> {
        let (body, sha) = match body {
            Some((bytes, sha)) => (bytes, sha.to_owned()),
            None => (Bytes::new(), hex::encode(Sha256::digest(b""))),
        };
        let mut request = self.http.request(method.clone(), self.url(path));
        for (name, value) in self.signer.headers(method.as_str(), path, &sha, checksum) {
            request = request.header(name, value);
        }
        if let Some((name, value)) = checksum {
            request = request.header(name, value);
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        if !body.is_empty() || method == reqwest::Method::PUT {
            request = request.body(body);
        }
        request.send().await.map_err(|e| {
            // reqwest's own message is "error sending request"; the why is in its sources.
            let mut why = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(inner) = source {
                why = format!("{why}: {inner}");
                source = inner.source();
            }
            format!("{method} {path} on {}: {why}", self.name)
        })
    }

    /// Creates the bucket unless it exists (weft: with the policy asked, when one is).
    async fn ensure_bucket(&self, bucket: &str, policy: Option<&str>) -> Result<(), CliError> {
        let path = format!("/{bucket}");
        let head = self
            .request(reqwest::Method::HEAD, &path, None, &[])
            .await
            .map_err(|e| cli_error!("{e}"))?;
        if head.status().is_success() {
            return Ok(());
        }
        let extra: Vec<(&str, &str)> = match (self.is_weft(), policy) {
            (true, Some(policy)) => vec![("x-weft-policy", policy)],
            _ => Vec::new(),
        };
        let answer = self
            .request(reqwest::Method::PUT, &path, None, &extra)
            .await
            .map_err(|e| cli_error!("{e}"))?;
        let status = answer.status();
        if !status.is_success() {
            let text = answer.text().await.unwrap_or_default();
            return Err(cli_error!(
                "cannot create bucket {bucket} on {}: {status} {text}",
                self.name
            ));
        }
        Ok(())
    }
}

/// The bodies objects carry: windows of one random buffer, with their SHA-256s.
struct Bodies {
    buffer: Bytes,
    /// (object size, the SHA-256 of each variant's body).
    hashes: Vec<(usize, Vec<String>)>,
    /// With `--checksum`: (object size, the base64 checksum of each variant's body).
    checksums: Vec<(usize, Vec<String>)>,
}

impl Bodies {
    fn new(sizes: &[usize], checksum: Option<BenchChecksum>) -> Bodies {
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let mut buffer = vec![0u8; largest + BODY_VARIANTS * BODY_STRIDE];
        StdRng::seed_from_u64(0x5eed_b3c4).fill_bytes(&mut buffer);
        let buffer = Bytes::from(buffer);
        let hashes = sizes
            .iter()
            .map(|&size| {
                let hashes = (0..BODY_VARIANTS)
                    .map(|v| {
                        let start = v * BODY_STRIDE;
                        hex::encode(Sha256::digest(&buffer[start..start + size]))
                    })
                    .collect();
                (size, hashes)
            })
            .collect();
        let checksums = match checksum {
            None => Vec::new(),
            Some(checksum) => sizes
                .iter()
                .map(|&size| {
                    let values = (0..BODY_VARIANTS)
                        .map(|v| {
                            let start = v * BODY_STRIDE;
                            let body = &buffer[start..start + size];
                            let algorithm = checksum.algorithm();
                            let digest = weft_s3::checksum::digest(algorithm, body);
                            weft_s3::checksum::Stored::full_object(algorithm, &digest).value
                        })
                        .collect();
                    (size, values)
                })
                .collect(),
        };
        Bodies { buffer, hashes, checksums }
    }

    /// The `--checksum` value of body `seq` of `size`.
    fn checksum(&self, size: usize, seq: u64) -> &str {
        let values = &self.checksums.iter().find(|(s, _)| *s == size).expect("sizes hashed").1;
        &values[seq as usize % BODY_VARIANTS]
    }

    fn body(&self, size: usize, seq: u64) -> Bytes {
        let start = (seq as usize % BODY_VARIANTS) * BODY_STRIDE;
        self.buffer.slice(start..start + size)
    }

    fn sha256(&self, size: usize, seq: u64) -> &str {
        let hashes = &self.hashes.iter().find(|(s, _)| *s == size).expect("sizes hashed").1;
        &hashes[seq as usize % BODY_VARIANTS]
    }
}

/// Bytes of every file under `dirs` (their lengths; a directory that vanished counts 0).
fn tree_bytes(dirs: &[PathBuf]) -> u64 {
    fn walk(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        entries
            .flatten()
            .map(|entry| match entry.file_type() {
                Ok(kind) if kind.is_dir() => walk(&entry.path()),
                Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    dirs.iter().map(|dir| walk(dir)).sum()
}

/// What one phase measured.
#[derive(Debug, Clone)]
struct PhaseResult {
    /// Bytes the server's data directories grew by during a put phase.
    stored_bytes: Option<u64>,
    bytes: u64,
    requests: u64,
    seconds: f64,
    /// CPU seconds of the server's processes by role.
    server_cpu: BTreeMap<String, f64>,
    client_cpu: f64,
    latencies_ms: Vec<f64>,
    /// Certificate rotations (`--rotate-certs`) while the phase ran.
    cert_rotations: u64,
}

impl PhaseResult {
    fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.seconds
    }
    fn server_cpu_total(&self) -> f64 {
        self.server_cpu.values().sum()
    }
    fn per_gib(&self, cpu: f64) -> f64 {
        cpu / (self.bytes as f64 / (1u64 << 30) as f64)
    }
}

/// One phase's cell: which target, op, object size and client count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cell {
    op: S3Op,
    object_size: usize,
    clients: usize,
}

fn object_path(bucket: &str, size: usize, seq: u64) -> String {
    format!("/{bucket}/bench-s3/{size}/obj-{seq}")
}

/// Runs `clients` request loops for `duration`; `one(client, i)` makes request `i` of a
/// client and returns its byte count.
async fn run_loops<F, Fut>(
    clients: usize,
    duration: Duration,
    pids: &[(u32, String)],
    rotations: &AtomicU64,
    one: F,
) -> Result<PhaseResult, CliError>
where
    F: Fn(usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<u64, String>> + Send,
{
    let server_before = cpu_by_role(pids);
    let client_before = own_cpu_seconds();
    let rotations_before = rotations.load(Ordering::SeqCst);
    let start = Instant::now();
    let bytes = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for client in 0..clients {
        let one = one.clone();
        let bytes = bytes.clone();
        let latencies = latencies.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while start.elapsed() < duration {
                let began = Instant::now();
                let n = one(client, i).await?;
                latencies.lock().expect("no panics").push(began.elapsed().as_secs_f64() * 1e3);
                bytes.fetch_add(n, Ordering::Relaxed);
                i += 1;
            }
            Ok::<(), String>(())
        }));
    }
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(e) => first_error = first_error.or(Some(format!("a client task failed: {e}"))),
        }
    }
    if let Some(e) = first_error {
        return Err(cli_error!("{e}"));
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut latencies_ms = std::mem::take(&mut *latencies.lock().expect("no panics"));
    latencies_ms.sort_by(f64::total_cmp);
    Ok(PhaseResult {
        stored_bytes: None,
        bytes: bytes.load(Ordering::Relaxed),
        requests: latencies_ms.len() as u64,
        seconds,
        server_cpu: cpu_by_role(pids)
            .into_iter()
            .map(|(role, after)| {
                let spent = after - server_before.get(&role).copied().unwrap_or(0.0);
                (role, spent.max(0.0))
            })
            .collect(),
        client_cpu: own_cpu_seconds() - client_before,
        latencies_ms,
        cert_rotations: rotations.load(Ordering::SeqCst) - rotations_before,
    })
}

/// One cell of the run: a target, an object size and a number of clients, and what its
/// phases share.
struct CellRun<'a> {
    target: &'a Target,
    bucket: &'a str,
    bodies: &'a Arc<Bodies>,
    object_size: usize,
    clients: usize,
    duration: Duration,
    /// Certificate rotations so far (`--rotate-certs`).
    rotations: &'a AtomicU64,
}

/// The put phase, the get phase (verified), then the deletes; results for the ops asked.
async fn run_cell(
    cell: &CellRun<'_>,
    down: Option<&DownNodes>,
) -> Result<(PhaseResult, PhaseResult, Option<PhaseResult>), CliError> {
    let CellRun { target, bucket, bodies, object_size, clients, duration, rotations } = *cell;
    let pids = target.pids.pids(&target.name);
    let next = Arc::new(AtomicU64::new(0));
    // Deletes are done when answered (weft removes the units, MinIO its parts), so the
    // directories hold only earlier cells' leftovers, if any, before the put phase.
    let stored_before = (!target.data_dirs.is_empty()).then(|| tree_bytes(&target.data_dirs));
    let mut put = {
        let (target, bodies, next) = (target.clone(), bodies.clone(), next.clone());
        let bucket = bucket.to_owned();
        run_loops(clients, duration, &pids, rotations, move |_, _| {
            let (target, bodies, next) = (target.clone(), bodies.clone(), next.clone());
            let bucket = bucket.clone();
            async move {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                let path = object_path(&bucket, object_size, seq);
                let body = bodies.body(object_size, seq);
                let sha = bodies.sha256(object_size, seq).to_owned();
                let checksum = target
                    .checksum
                    .map(|c| (c.algorithm().header(), bodies.checksum(object_size, seq)));
                let sse = target.sse.map(|m| ("x-amz-server-side-encryption", m.header()));
                let extra: Vec<(&str, &str)> = sse.into_iter().collect();
                let answer = target
                    .request_with(reqwest::Method::PUT, &path, Some((body, &sha)), checksum, &extra)
                    .await?;
                let status = answer.status();
                if !status.is_success() {
                    let text = answer.text().await.unwrap_or_default();
                    return Err(format!("PUT {path} on {}: {status} {text}", target.name));
                }
                Ok(object_size as u64)
            }
        })
        .await?
    };
    // Every seq handed out was written (a failed PUT ended the run above).
    let written = next.load(Ordering::Relaxed);
    put.stored_bytes =
        stored_before.map(|before| tree_bytes(&target.data_dirs).saturating_sub(before));
    let get = get_phase(cell, written).await?;
    let degraded = match down {
        Some(down) => {
            // weft node stop and meta's answers are blocking calls.
            let stopping = down.clone();
            tokio::task::spawn_blocking(move || stopping.stop())
                .await
                .map_err(|e| cli_error!("stopping nodes failed: {e}"))??;
            Some(get_phase(cell, written).await?)
        }
        None => None,
    };
    // Untimed: remove what the put phase wrote, `clients` deletes at a time.
    let mut seqs: Vec<u64> = (0..written).collect();
    while !seqs.is_empty() {
        let batch: Vec<u64> = seqs.drain(..seqs.len().min(clients.max(4))).collect();
        let deletes = batch.into_iter().map(|seq| {
            let path = object_path(bucket, object_size, seq);
            async move {
                let answer = target.request(reqwest::Method::DELETE, &path, None, &[]).await?;
                if answer.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("DELETE {path} on {}: {}", target.name, answer.status()))
                }
            }
        });
        for result in futures_util::future::join_all(deletes).await {
            result.map_err(|e| cli_error!("{e}"))?;
        }
    }
    Ok((put, get, degraded))
}

/// The nodes `--down-nodes` stops before the degraded get phase.
#[derive(Clone)]
struct DownNodes {
    ids: Vec<u32>,
    meta: crate::cluster_cli::MetaUrlArgs,
}

impl DownNodes {
    /// The last `count` of the nodes meta reports up.
    fn pick(meta: &crate::cluster_cli::MetaUrlArgs, count: usize) -> Result<DownNodes, CliError> {
        let listed = meta.client()?.get(&["nodes"])?;
        let up: Vec<u32> = listed["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["state"] == "up")
            .filter_map(|n| n["id"].as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect();
        if up.len() <= count {
            return Err(cli_error!("--down-nodes {count}: only {} nodes are up", up.len()));
        }
        let ids = up[up.len() - count..].to_vec();
        Ok(DownNodes { ids, meta: meta.clone() })
    }

    /// Stops the nodes with `weft node stop` and waits until meta reports them down.
    fn stop(&self) -> Result<(), CliError> {
        let exe = std::env::current_exe().map_err(|e| cli_error!("cannot find weft: {e}"))?;
        for id in &self.ids {
            let mut command = std::process::Command::new(&exe);
            command.args(["node", "stop", &id.to_string(), "--json"]);
            if let Some(meta) = &self.meta.meta {
                command.args(["--meta", meta]);
            }
            if let Some(secret) = &self.meta.secret_file {
                command.arg("--secret-file").arg(secret);
            }
            let output = command.output().map_err(|e| cli_error!("weft node stop {id}: {e}"))?;
            if !output.status.success() {
                let why = String::from_utf8_lossy(&output.stderr);
                return Err(cli_error!("weft node stop {id}: {}", why.trim()));
            }
        }
        let client = self.meta.client()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let listed = client.get(&["nodes"])?;
            let still_up = listed["nodes"].as_array().into_iter().flatten().any(|n| {
                n["state"] == "up"
                    && n["id"].as_u64().is_some_and(|id| self.ids.contains(&(id as u32)))
            });
            if !still_up {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(cli_error!("meta still reports stopped nodes up after 60 s"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// One get phase: `clients` loops reading the `written` objects of the put phase, every
/// byte compared with what was written.
async fn get_phase(cell: &CellRun<'_>, written: u64) -> Result<PhaseResult, CliError> {
    let CellRun { target, bucket, bodies, object_size, clients, duration, rotations } = *cell;
    let pids = target.pids.pids(&target.name);
    let (target, bodies) = (target.clone(), bodies.clone());
    let bucket = bucket.to_owned();
    run_loops(clients, duration, &pids, rotations, move |client, i| {
        let (target, bodies) = (target.clone(), bodies.clone());
        let path_bucket = bucket.clone();
        async move {
            let seq = (client as u64 + i * clients as u64) % written.max(1);
            let path = object_path(&path_bucket, object_size, seq);
            let mut answer = target.request(reqwest::Method::GET, &path, None, &[]).await?;
            let status = answer.status();
            if !status.is_success() {
                let text = answer.text().await.unwrap_or_default();
                return Err(format!("GET {path} on {}: {status} {text}", target.name));
            }
            let want = bodies.body(object_size, seq);
            let mut at = 0usize;
            while let Some(chunk) =
                answer.chunk().await.map_err(|e| format!("GET {path} on {}: {e}", target.name))?
            {
                if at + chunk.len() > want.len() || want[at..at + chunk.len()] != chunk[..] {
                    return Err(format!(
                        "GET {path} on {}: the body differs from what was written (near byte {at})",
                        target.name
                    ));
                }
                at += chunk.len();
            }
            if at != want.len() {
                return Err(format!(
                    "GET {path} on {}: {at} bytes, {} were written",
                    target.name,
                    want.len()
                ));
            }
            Ok(at as u64)
        }
    })
    .await
}

/// A directory removed with everything in it when dropped.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// MinIO started by the bench: its own temporary drives, stopped and removed on drop (the
/// process is killed first, then its directory goes with the `dir` field).
struct Minio {
    child: Child,
    dir: RemovedOnDrop,
    endpoint: String,
}

impl std::fmt::Debug for Minio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Minio(pid {}, {})", self.child.id(), self.endpoint)
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, CliError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| cli_error!("cannot find a free port: {e}"))?;
    Ok(listener.local_addr().map_err(|e| cli_error!("{e}"))?.port())
}

/// MinIO's temporary drives are TMPDIR/weft-bench-minio-<the bench's pid>.
const MINIO_DIR_PREFIX: &str = "weft-bench-minio-";

/// Removes the MinIO drives of benches that are gone (killed before they could: their MinIO
/// died with them, see `die_with_parent`); a directory whose bench still runs is kept.
fn remove_abandoned_drives() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix(MINIO_DIR_PREFIX));
        let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn start_minio(bin: &Path, drives: usize, parity: usize) -> Result<(Minio, Signer), CliError> {
    if drives < 2 * parity.max(1) {
        return Err(cli_error!(
            "MinIO needs at least 2 × parity drives: --minio-drives {drives}, parity {parity}"
        ));
    }
    remove_abandoned_drives();
    let dir = std::env::temp_dir().join(format!("{MINIO_DIR_PREFIX}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Removed on every way out, a failed start included.
    let guard = RemovedOnDrop(dir.clone());
    for d in 1..=drives {
        std::fs::create_dir_all(dir.join(format!("d{d}")))
            .map_err(|e| cli_error!("cannot create {}: {e}", dir.display()))?;
    }
    let (port, console) = (free_port()?, free_port()?);
    let mut secret = [0u8; 18];
    rand::thread_rng().fill_bytes(&mut secret);
    let signer = Signer {
        host: format!("127.0.0.1:{port}"),
        access_key: "weftbench".into(),
        secret_key: hex::encode(secret),
        region: "us-east-1".into(),
    };
    let log = std::fs::File::create(dir.join("minio.log"))
        .map_err(|e| cli_error!("cannot create MinIO's log: {e}"))?;
    let mut command = Command::new(bin);
    // A bench killed before it could stop MinIO (SIGKILL, a crash) takes MinIO with it.
    crate::up::die_with_parent(&mut command);
    let child = command
        .arg("server")
        .arg("--quiet")
        .args(["--address", &signer.host, "--console-address", &format!("127.0.0.1:{console}")])
        .arg(format!("{}/d{{1...{drives}}}", dir.display()))
        .env("MINIO_ROOT_USER", &signer.access_key)
        .env("MINIO_ROOT_PASSWORD", &signer.secret_key)
        .env("MINIO_STORAGE_CLASS_STANDARD", format!("EC:{parity}"))
        .env("MINIO_BROWSER", "off")
        // Directory drives on the root disk are refused otherwise.
        .env("MINIO_CI_CD", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| cli_error!("{e}"))?)
        .stderr(log)
        .spawn()
        .map_err(|e| {
            cli_error!(
                "cannot start {} ({e}): --compare minio needs a minio binary (build it from \
                 source with `go build`, see docs/benchmarks.md) on PATH or as --minio-bin",
                bin.display()
            )
        })?;
    let minio = Minio { child, dir: guard, endpoint: format!("http://127.0.0.1:{port}") };
    let ready = format!("{}/minio/health/cluster", minio.endpoint);
    let probe = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if probe.get(&ready).send().is_ok_and(|r| r.status().is_success()) {
            return Ok((minio, signer));
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(minio.dir.0.join("minio.log")).unwrap_or_default();
            return Err(cli_error!("MinIO did not become ready within 60 s; its log:\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Where a weft target's settings come from: the first cluster takes flags, then the AWS_*
/// environment, then the files beside its secret; a `--compare-cluster` one only its files.
struct WeftSource<'a> {
    /// s3.json (`weft up`'s, or `weft init --hosts`'s).
    s3: Value,
    /// cluster.json and where it is (`weft up`'s only).
    cluster: Option<(PathBuf, Value)>,
    /// The first cluster's flags; None for a `--compare-cluster`.
    args: Option<&'a S3BenchArgs>,
    /// The CA flag, for either.
    ca: Option<&'a Path>,
    keepalive: bool,
}

/// The HTTP client of a target: keep-alive or not, and the CAs (PEM bundles) it trusts over
/// HTTPS.
fn http_client(cas: &[PathBuf], keepalive: bool) -> Result<reqwest::Client, CliError> {
    let mut builder = reqwest::Client::builder();
    builder = match keepalive {
        true => builder.pool_max_idle_per_host(64),
        false => builder.pool_max_idle_per_host(0),
    };
    for ca in cas {
        let pem = std::fs::read(ca).map_err(|e| cli_error!("cannot read {}: {e}", ca.display()))?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| cli_error!("{} is not a PEM certificate bundle: {e}", ca.display()))?;
        if roots.is_empty() {
            return Err(cli_error!("{} holds no certificate", ca.display()));
        }
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    builder.build().map_err(|e| cli_error!("cannot build the HTTP client: {e}"))
}

/// A weft gateway as a target (see [`WeftSource`] for what is read from where).
fn weft_target(name: String, from: WeftSource<'_>) -> Result<Target, CliError> {
    let conf = &from.s3;
    let pick = |flag: Option<&Option<String>>, env: &str, field: &str| {
        flag.and_then(Clone::clone)
            .or_else(|| from.args.and_then(|_| std::env::var(env).ok().filter(|v| !v.is_empty())))
            .or_else(|| conf[field].as_str().map(str::to_owned))
    };
    let endpoint = pick(from.args.map(|a| &a.endpoint), "AWS_ENDPOINT_URL", "endpoint")
        .ok_or_else(|| {
            cli_error!(
                "{name}: no S3 endpoint: start a cluster with `weft up` (its s3.json lies \
                 beside the cluster secret), or give --endpoint, --access-key and --secret-key"
            )
        })?;
    let access_key = pick(from.args.map(|a| &a.access_key), "AWS_ACCESS_KEY_ID", "access_key")
        .ok_or_else(|| cli_error!("{name}: no access key: give --access-key"))?;
    let secret_key = pick(from.args.map(|a| &a.secret_key), "AWS_SECRET_ACCESS_KEY", "secret_key")
        .ok_or_else(|| cli_error!("{name}: no secret key: give --secret-key"))?;
    let region = conf["region"].as_str().unwrap_or(weft_s3::DEFAULT_REGION).to_owned();
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    let (host, https) = match (endpoint.strip_prefix("http://"), endpoint.strip_prefix("https://"))
    {
        (Some(host), _) => (host.to_owned(), false),
        (_, Some(host)) => (host.to_owned(), true),
        _ => return Err(cli_error!("{name}: endpoint {endpoint} is neither http:// nor https://")),
    };
    // The CAs of an HTTPS gateway: the flag alone; else the environment's bundle and the
    // one the cluster's files name, both (a machine may export a system bundle as
    // AWS_CA_BUNDLE; a gateway certificate the user gave is not of weft's CA).
    let cluster = from.cluster.as_ref().map_or(&Value::Null, |(_, cluster)| cluster);
    let cas: Vec<PathBuf> = match from.ca {
        Some(ca) => vec![ca.to_owned()],
        None => from
            .args
            .and(std::env::var_os("AWS_CA_BUNDLE").filter(|v| !v.is_empty()))
            .map(PathBuf::from)
            .into_iter()
            .chain(crate::cert_cli::gateway_ca(conf, cluster))
            .collect(),
    };
    if https && cas.is_empty() {
        return Err(cli_error!(
            "{name}: {endpoint} serves HTTPS and no CA for it was found: give --ca FILE (or \
             AWS_CA_BUNDLE)"
        ));
    }
    let http = http_client(if https { &cas } else { &[] }, from.keepalive)?;
    let fixed = from.args.map(|a| a.server_pids.clone()).unwrap_or_default();
    let pids = if !fixed.is_empty() {
        ServerPids::Fixed(fixed)
    } else {
        let file = from.cluster.as_ref().map(|(file, _)| file.clone()).ok_or_else(|| {
            cli_error!(
                "{name}: cannot find weft up's cluster.json beside the cluster secret to read \
                 the server's CPU: pass --secret-file DIR/cluster.secret or --server-pids"
            )
        })?;
        ServerPids::ClusterFile(file)
    };
    // Every node's disks, from weft up's cluster.json when there is one.
    let data_dirs = from
        .cluster
        .as_ref()
        .map(|(_, cluster)| {
            cluster["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|node| node["disks"].as_array().cloned().unwrap_or_default())
                .filter_map(|disk| disk.as_str().map(PathBuf::from))
                .collect()
        })
        .unwrap_or_default();
    Ok(Target {
        name,
        endpoint,
        http,
        signer: Signer { host, access_key, secret_key, region },
        pids,
        data_dirs,
        checksum: None,
        sse: None,
    })
}

/// The name of the cluster whose cluster.json is `file`: its directory's.
fn cluster_name(file: Option<&Path>) -> String {
    file.and_then(Path::parent)
        .and_then(Path::file_name)
        .map_or_else(|| "weft".to_owned(), |name| name.to_string_lossy().into_owned())
}

/// Reissues every host certificate of cluster directory `dir` every `every` until `stop`,
/// counting each full pass in `count`; the first error ends it and is returned.
fn rotate_certs(
    dir: &Path,
    every: Duration,
    stop: &std::sync::atomic::AtomicBool,
    count: &AtomicU64,
) -> Result<(), CliError> {
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::SeqCst) {
        if Instant::now() >= next {
            crate::cert_cli::reissue_hosts(dir, &[], weft_auth::ca::HOST_DAYS)?;
            count.fetch_add(1, Ordering::SeqCst);
            next += every;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Phases of every target and cell, per round: (results[target][cell] = (puts, gets) over
/// rounds, weft's degraded gets per cell).
type Loaded = (Vec<Vec<(Vec<PhaseResult>, Vec<PhaseResult>)>>, Vec<Vec<PhaseResult>>);

/// Every round of every cell on every target (targets alternating, the order rotating).
fn load(
    runtime: &tokio::runtime::Runtime,
    args: &S3BenchArgs,
    targets: &[Target],
    cells: &[(usize, usize)],
    bodies: &Arc<Bodies>,
    down: Option<&DownNodes>,
    rotations: &AtomicU64,
) -> Result<Loaded, CliError> {
    let duration = Duration::from_millis(args.duration);
    let progress = std::io::stderr().is_terminal() && !(args.json || args.json_lines);
    let mut results = vec![vec![(Vec::new(), Vec::new()); cells.len()]; targets.len()];
    let mut degraded: Vec<Vec<PhaseResult>> = vec![Vec::new(); cells.len()];
    runtime.block_on(async {
        for target in targets {
            target.ensure_bucket(&args.bucket, args.policy.as_deref()).await?;
        }
        for round in 0..args.rounds {
            for (c, &(size, clients)) in cells.iter().enumerate() {
                for t in 0..targets.len() {
                    let t = (t + round + c) % targets.len();
                    let target = &targets[t];
                    if progress {
                        eprintln!(
                            "round {}/{}: {} {} × {clients} client(s)…",
                            round + 1,
                            args.rounds,
                            target.name,
                            crate::cluster_cli::format_size(size as u64)
                        );
                    }
                    let down = down.filter(|_| t == 0);
                    let cell = CellRun {
                        target,
                        bucket: &args.bucket,
                        bodies,
                        object_size: size,
                        clients,
                        duration,
                        rotations,
                    };
                    let (put, get, down_get) = run_cell(&cell, down).await?;
                    results[t][c].0.push(put);
                    results[t][c].1.push(get);
                    degraded[c].extend(down_get);
                }
            }
        }
        Ok((results, degraded))
    })
}

/// One row of the output.
#[derive(Debug, Serialize)]
struct Row {
    target: String,
    op: S3Op,
    object_size: usize,
    clients: usize,
    mib_per_s: f64,
    requests_per_s: f64,
    server_cpu_s_per_gib: f64,
    client_cpu_s_per_gib: f64,
    p50_ms: f64,
    p99_ms: f64,
    requests: u64,
    rounds: usize,
    /// weft ÷ the peer's MiB/s (weft's rows with --compare).
    #[serde(skip_serializing_if = "Option::is_none")]
    throughput_ratio: Option<f64>,
    /// weft ÷ the peer's server CPU per GiB (weft's rows with --compare).
    #[serde(skip_serializing_if = "Option::is_none")]
    server_cpu_ratio: Option<f64>,
    /// The degraded get row (`--down-nodes`): how many nodes were down, and its MiB/s ÷
    /// the healthy get's.
    #[serde(skip_serializing_if = "Option::is_none")]
    down_nodes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    degraded_ratio: Option<f64>,
    /// With `--rotate-certs`, the first cluster's rows: the rotations of every host's
    /// certificate while their phases ran (over all rounds); the run completing says no
    /// request failed meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    cert_rotations: Option<u64>,
    /// Put rows with `--checksum`: the flexible checksum every PUT carried (S3's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
    /// Rows with `--sse`: the encryption the objects were written with (`sse-s3`,
    /// `sse-kms`); their GETs opened it.
    #[serde(skip_serializing_if = "Option::is_none")]
    sse: Option<String>,
    /// Server CPU per GiB by process role (weft: s3, node, meta, repair, up; MinIO: minio),
    /// medians over rounds.
    server_cpu_s_per_gib_by_role: BTreeMap<String, f64>,
    /// Put rows: bytes the server's data directories grew by (files' lengths: data,
    /// parity, headers and per-object metadata files) ÷ bytes put, median over rounds;
    /// absent when the directories are unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    stored_bytes_per_user_byte: Option<f64>,
    /// The CPU, cores and extensions of the machine both targets ran on.
    machine: crate::bench::Machine,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn row_of(
    target: &str,
    cell: Cell,
    results: &[PhaseResult],
    machine: &crate::bench::Machine,
) -> Row {
    let mut all_latencies: Vec<f64> = results.iter().flat_map(|r| r.latencies_ms.clone()).collect();
    all_latencies.sort_by(f64::total_cmp);
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    Row {
        target: target.to_owned(),
        op: cell.op,
        object_size: cell.object_size,
        clients: cell.clients,
        mib_per_s: round(median(results.iter().map(PhaseResult::mib_per_s).collect())),
        requests_per_s: round(median(
            results.iter().map(|r| r.requests as f64 / r.seconds).collect(),
        )),
        server_cpu_s_per_gib: round(median(
            results.iter().map(|r| r.per_gib(r.server_cpu_total())).collect(),
        )),
        client_cpu_s_per_gib: round(median(
            results.iter().map(|r| r.per_gib(r.client_cpu)).collect(),
        )),
        p50_ms: round(percentile(&all_latencies, 0.5)),
        p99_ms: round(percentile(&all_latencies, 0.99)),
        requests: results.iter().map(|r| r.requests).sum(),
        rounds: results.len(),
        throughput_ratio: None,
        server_cpu_ratio: None,
        down_nodes: None,
        degraded_ratio: None,
        cert_rotations: None,
        checksum: None,
        sse: None,
        stored_bytes_per_user_byte: {
            let ratios: Vec<f64> = results
                .iter()
                .filter_map(|r| Some(r.stored_bytes? as f64 / r.bytes.max(1) as f64))
                .collect();
            (!ratios.is_empty()).then(|| round(median(ratios)))
        },
        server_cpu_s_per_gib_by_role: results
            .iter()
            .flat_map(|r| r.server_cpu.keys())
            .map(|role| {
                let per_round = results
                    .iter()
                    .map(|r| r.per_gib(r.server_cpu.get(role).copied().unwrap_or(0.0)))
                    .collect();
                (role.clone(), round(median(per_round)))
            })
            .collect(),
        machine: machine.clone(),
    }
}

pub fn run(args: S3BenchArgs) -> Result<(), CliError> {
    if args.object_sizes.contains(&0) || args.clients.contains(&0) || args.rounds == 0 {
        return Err(cli_error!("--object-sizes, --clients and --rounds must be positive"));
    }
    if args.duration == 0 {
        return Err(cli_error!("--duration must be positive"));
    }
    if args.down_nodes > 0
        && (args.object_sizes.len() != 1
            || args.clients.len() != 1
            || args.rounds != 1
            || args.compare.is_some())
    {
        return Err(cli_error!(
            "--down-nodes stops nodes for good: give one --object-sizes, one --clients, \
             --rounds 1 and no --compare"
        ));
    }
    if args.rotate_certs == Some(0) {
        return Err(cli_error!("--rotate-certs must be positive"));
    }
    let beside = |name: &str| crate::cluster_cli::file_beside_secret(&args.meta, name);
    let cluster = beside(crate::up::CLUSTER_FILE);
    let compared = match &args.compare_cluster {
        Some(dir) => {
            let read = |name: &str| -> Result<(PathBuf, Value), CliError> {
                let file = dir.join(name);
                let text = std::fs::read_to_string(&file).map_err(|e| {
                    cli_error!(
                        "--compare-cluster {}: cannot read {}: {e} (the directory of a \
                         running `weft up --dir`)",
                        dir.display(),
                        file.display()
                    )
                })?;
                let value = serde_json::from_str(&text)
                    .map_err(|e| cli_error!("{}: {e}", file.display()))?;
                Ok((file, value))
            };
            Some((read(crate::up::S3_FILE)?.1, read(crate::up::CLUSTER_FILE)?))
        }
        None => None,
    };
    let first_name = cluster_name(cluster.as_ref().map(|(file, _)| file.as_path()));
    let rotate_dir = match (args.rotate_certs, &cluster) {
        (None, _) => None,
        (Some(_), Some((file, _))) => {
            let dir = file.parent().unwrap_or(Path::new(".")).to_owned();
            // Refused before any load: a cluster without a CA has nothing to rotate.
            weft_auth::ca::Ca::open(&crate::cert_cli::ca_dir(&dir)).map_err(|e| {
                cli_error!(
                    "--rotate-certs: {} is not a TLS cluster ({e}); start it with `weft up \
                     --tls` (TLS is on by default off loopback)",
                    dir.display()
                )
            })?;
            Some(dir)
        }
        (Some(_), None) => {
            return Err(cli_error!(
                "--rotate-certs reissues the certificates of a `weft up` cluster: pass \
                 --secret-file DIR/cluster.secret of one"
            ))
        }
    };
    let keepalive = !args.no_keepalive;
    let weft = weft_target(
        "weft".to_owned(),
        WeftSource {
            s3: beside(crate::up::S3_FILE).map_or(Value::Null, |(_, conf)| conf),
            cluster,
            args: Some(&args),
            ca: args.ca.as_deref(),
            keepalive,
        },
    )?;
    let down = match args.down_nodes {
        0 => None,
        count => Some(DownNodes::pick(&args.meta, count)?),
    };
    let parity = match (args.minio_parity, &args.policy) {
        (Some(p), _) => p,
        (None, Some(policy)) => weft_codes::CodeSpec::parse(
            policy.find(')').map_or(policy.as_str(), |end| &policy[..=end]),
        )
        .map(|spec| spec.r())
        .map_err(|e| cli_error!("--policy {policy}: {e}"))?,
        (None, None) => 3,
    };
    let mut targets = vec![weft];
    let _minio = match args.compare {
        Some(S3Peer::Minio) => {
            let (minio, signer) = start_minio(&args.minio_bin, args.minio_drives, parity)?;
            targets.push(Target {
                name: "minio".to_owned(),
                http: http_client(&[], keepalive)?,
                endpoint: minio.endpoint.clone(),
                signer,
                pids: ServerPids::Fixed(vec![minio.child.id()]),
                data_dirs: (1..=args.minio_drives)
                    .map(|d| minio.dir.0.join(format!("d{d}")))
                    .collect(),
                checksum: None,
                sse: None,
            });
            Some(minio)
        }
        None => None,
    };
    if let Some((s3, (file, cluster))) = compared {
        let source = WeftSource {
            s3,
            cluster: Some((file.clone(), cluster)),
            args: None,
            ca: None,
            keepalive,
        };
        let mut other = weft_target(cluster_name(Some(&file)), source)?;
        // Side by side, each cluster's rows are named by its directory, or (both directories
        // named alike) by its scheme.
        let scheme = |t: &Target| format!("weft-{}", t.endpoint.split(':').next().unwrap_or(""));
        targets[0].name = first_name;
        if targets[0].name == other.name {
            (targets[0].name, other.name) = (scheme(&targets[0]), scheme(&other));
        }
        if targets[0].name == other.name {
            return Err(cli_error!(
                "--compare-cluster: both clusters' directories are named alike and both \
                 serve {}; their rows would share a name",
                targets[0].name
            ));
        }
        targets.push(other);
    }
    if args.compare_checksum {
        // The same cluster without the checksum, side by side.
        let without = targets[0].clone();
        targets[0].checksum = args.checksum;
        if let Some(checksum) = args.checksum {
            targets[0].name =
                format!("{}-{}", targets[0].name, checksum.algorithm().name().to_lowercase());
        }
        targets.push(without);
    } else {
        // Every PUT of every target carries it.
        for target in &mut targets {
            target.checksum = args.checksum;
        }
    }
    if args.compare_sse {
        // The same cluster without encryption, side by side.
        let without = targets[0].clone();
        targets[0].sse = args.sse;
        if let Some(sse) = args.sse {
            targets[0].name = format!("{}-{}", targets[0].name, sse.name());
        }
        targets.push(without);
    } else if args.sse.is_some() {
        for target in targets.iter_mut().filter(|t| t.is_weft()) {
            target.sse = args.sse;
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let bodies = Arc::new(Bodies::new(&args.object_sizes, args.checksum));
    let cells: Vec<(usize, usize)> = args
        .object_sizes
        .iter()
        .flat_map(|&size| args.clients.iter().map(move |&clients| (size, clients)))
        .collect();
    // The rotations run on a thread of their own beside the load; the load's end stops them.
    let rotations = AtomicU64::new(0);
    let stop_rotating = std::sync::atomic::AtomicBool::new(false);
    let loaded = std::thread::scope(|scope| {
        let rotating = rotate_dir.as_ref().map(|dir| {
            let every = Duration::from_millis(args.rotate_certs.unwrap_or(1));
            let (stop, count) = (&stop_rotating, &rotations);
            scope.spawn(move || rotate_certs(dir, every, stop, count))
        });
        let loaded = load(&runtime, &args, &targets, &cells, &bodies, down.as_ref(), &rotations);
        stop_rotating.store(true, Ordering::SeqCst);
        let rotated = match rotating.map(|thread| thread.join()) {
            None => Ok(()),
            Some(Ok(done)) => done,
            Some(Err(_)) => Err(cli_error!("the certificate rotations panicked")),
        };
        loaded.and_then(|results| rotated.map(|()| results))
    });
    let (results, degraded) = loaded?;
    if let (Some(_), false) = (args.rotate_certs, args.json || args.json_lines) {
        eprintln!(
            "weft bench s3: {} certificate rotations of every host during the load, no \
             request failed",
            rotations.load(Ordering::SeqCst)
        );
    }
    let mut rows = crate::rows::JsonRows::new(args.json_lines);
    let mut table = Vec::new();
    let machine = crate::bench::Machine::this();
    for (c, &(object_size, clients)) in cells.iter().enumerate() {
        for op in [S3Op::Put, S3Op::Get] {
            if !args.ops.contains(&op) {
                continue;
            }
            let cell = Cell { op, object_size, clients };
            let pick = |t: usize| match op {
                S3Op::Put => &results[t][c].0,
                S3Op::Get => &results[t][c].1,
            };
            // A put row names the checksum its PUTs carried.
            let checksum_of = |t: usize| {
                let checksum = targets[t].checksum.filter(|_| op == S3Op::Put);
                checksum.map(|c| c.algorithm().name().to_string())
            };
            let sse_of = |t: usize| targets[t].sse.map(|m| m.name().to_string());
            let peer = (targets.len() > 1).then(|| Row {
                checksum: checksum_of(1),
                sse: sse_of(1),
                ..row_of(&targets[1].name, cell, pick(1), &machine)
            });
            let mut row = row_of(&targets[0].name, cell, pick(0), &machine);
            row.checksum = checksum_of(0);
            row.sse = sse_of(0);
            if args.rotate_certs.is_some() {
                row.cert_rotations = Some(pick(0).iter().map(|r| r.cert_rotations).sum());
            }
            if let Some(peer) = &peer {
                row.throughput_ratio = Some(row.mib_per_s / peer.mib_per_s);
                row.server_cpu_ratio = Some(row.server_cpu_s_per_gib / peer.server_cpu_s_per_gib);
            }
            let healthy_mib_per_s = row.mib_per_s;
            rows.push(&row);
            table.push(row);
            if let Some(peer) = peer {
                rows.push(&peer);
                table.push(peer);
            }
            if op == S3Op::Get && !degraded[c].is_empty() {
                let name = format!("{}-down", targets[0].name);
                let mut row = row_of(&name, cell, &degraded[c], &machine);
                row.down_nodes = Some(args.down_nodes);
                row.degraded_ratio = Some(row.mib_per_s / healthy_mib_per_s);
                rows.push(&row);
                table.push(row);
            }
        }
    }
    if args.json || args.json_lines {
        rows.finish();
        return Ok(());
    }
    println!(
        "{:<10} {:<4} {:>9} {:>7} {:>10} {:>9} {:>16} {:>16} {:>9} {:>9}  server CPU-s/GiB by role; weft ÷ peer",
        "target",
        "op",
        "size",
        "clients",
        "MiB/s",
        "req/s",
        "server CPU-s/GiB",
        "client CPU-s/GiB",
        "p50 ms",
        "p99 ms",
    );
    for row in &table {
        let ratio = match (row.throughput_ratio, row.server_cpu_ratio, row.degraded_ratio) {
            (Some(t), Some(c), _) => format!("; {t:.2}× speed, {c:.2}× CPU"),
            (_, _, Some(d)) => format!("; {d:.2}× healthy"),
            _ => String::new(),
        };
        let roles: Vec<String> = row
            .server_cpu_s_per_gib_by_role
            .iter()
            .map(|(role, cpu)| format!("{role} {cpu:.2}"))
            .collect();
        let stored = match row.stored_bytes_per_user_byte {
            Some(stored) => format!("; stored {stored:.2}×"),
            None => String::new(),
        };
        let rotated = match row.cert_rotations {
            Some(n) => format!("; {n} cert rotations"),
            None => String::new(),
        };
        let ratio = format!("{}{stored}{rotated}{ratio}", roles.join(", "));
        println!(
            "{:<10} {:<4} {:>9} {:>7} {:>10.1} {:>9.1} {:>16.2} {:>16.2} {:>9.1} {:>9.1}  {}",
            row.target,
            match row.op {
                S3Op::Put => "put",
                S3Op::Get => "get",
            },
            crate::cluster_cli::format_size(row.object_size as u64),
            row.clients,
            row.mib_per_s,
            row.requests_per_s,
            row.server_cpu_s_per_gib,
            row.client_cpu_s_per_gib,
            row.p50_ms,
            row.p99_ms,
            ratio
        );
    }
    println!("{}", machine.line());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_differ_and_hash_as_sent() {
        let bodies = Bodies::new(&[1000, 64], Some(BenchChecksum::Crc32c));
        let a = bodies.body(1000, 0);
        let b = bodies.body(1000, 1);
        assert_ne!(a, b);
        assert_eq!(bodies.body(1000, BODY_VARIANTS as u64), a);
        assert_eq!(bodies.sha256(1000, 1), hex::encode(Sha256::digest(&b)));
        assert_eq!(bodies.body(64, 3).len(), 64);
        // The checksum is the one of the body sent with it.
        let algorithm = weft_s3::checksum::Algorithm::Crc32c;
        let expected = weft_s3::checksum::digest(algorithm, &b);
        assert_eq!(
            weft_s3::checksum::decode(algorithm, bodies.checksum(1000, 1)).unwrap(),
            expected
        );
    }

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        let sorted: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.5), 50.0);
        assert_eq!(percentile(&sorted, 0.99), 99.0);
    }
}
