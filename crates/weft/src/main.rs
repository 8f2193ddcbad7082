//! The `weft` binary: every weft command in one executable.
//!
//! Invariants:
//! - Every failure reaches the user as one clear line on stderr and a non-zero exit code;
//!   nothing a command was given (input files, existing units) is modified on failure.
//! - `--json` prints one JSON document on stdout (an object; an array for row sets), nothing
//!   else on stdout; `--json-lines` (where offered) one JSON object per line. With either, an
//!   error is `{"error":{"code":…,"message":…}}` on stderr.
//! - Exit codes: 0 success; 1 the command failed (the message says why); 2 the command line
//!   is wrong (unknown flag, bad value, bad environment). Printed by `weft --help`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod advise;
mod bench;
mod bench_cluster;
mod bench_engine;
mod bench_geometric;
mod bench_hash;
mod bench_meta;
mod bench_raidp;
mod bench_reads;
mod bench_s3;
mod cert_cli;
mod cluster_cli;
mod config;
mod demo;
mod deploy;
mod ec;
mod gc_cli;
mod geometric_cli;
mod hosts;
mod key_cli;
mod kms_cli;
mod net_cli;
mod objects_cli;
mod plot;
mod raidp_cli;
mod repair_cli;
mod repair_cost;
mod rows;
mod serve;
mod transition_cli;
mod up;

/// weft — a distributed, erasure-coded storage system.
#[derive(Debug, Parser)]
#[command(
    name = "weft",
    version,
    about,
    long_about = None,
    after_help = "Exit codes: 0 success; 1 the command failed (the message says why); 2 the \
                  command line is wrong.\nWith --json, output is one JSON document on stdout \
                  and an error is {\"error\":{\"code\":…,\"message\":…}} on stderr."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a cluster secret for a cluster run by hand (`weft up` makes its own).
    ///
    /// Writes DIR/cluster.secret (mode 0600; never replaces one). Give it to meta, the S3
    /// gateway, repair executors and clients (--secret-file or WEFT_SECRET_FILE); give each
    /// node only its own key (`weft node add ID`). With --hosts, also one directory per
    /// host with the configuration files and keys of its processes (docs/deploy.md).
    ///
    /// Examples:
    ///   weft init --dir ./weft-data
    ///   weft init --dir ./deploy --hosts a=10.0.0.11,b=10.0.0.12,c=10.0.0.13 \
    ///     --store postgres://weft@10.0.0.10/weft --insecure-plaintext
    #[command(verbatim_doc_comment)]
    Init(InitArgs),
    /// Show weft's main job on embedded defaults: encode a sample file, lose and corrupt
    /// units, decode and repair it, and watch too much damage be refused.
    Demo(demo::DemoArgs),
    /// Erasure-code plain files, no cluster: encode, decode, repair (a better zfec).
    #[command(subcommand)]
    Ec(ec::EcCommand),
    /// Measure weft's coding speed, side by side with a peer (ISA-L).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Run a cluster process in the foreground: `weft serve meta`, `weft serve node`.
    #[command(subcommand)]
    Serve(serve::ServeCommand),
    Up(up::UpArgs),
    /// Show a running cluster: nodes, disks, buckets, under-protected units, repair queue
    ///
    /// Nodes and disks (up/down, pid, endpoint, usage), under-protected units and the repair
    /// queue, as meta reports them (GET /v1/status and /v1/nodes).
    ///
    /// Meta is found by --meta, else $WEFT_META, else http://127.0.0.1:7700 (where `weft up`
    /// listens by default); the same goes for `weft node` and `weft bucket`.
    ///
    /// Examples:
    ///   weft status
    ///   WEFT_META=http://127.0.0.1:7700 weft status --json
    #[command(verbatim_doc_comment)]
    Status(cluster_cli::StatusArgs),
    /// Failure drills on a running cluster: `weft node stop ID` (SIGTERM), `weft node kill ID`
    /// (SIGKILL).
    #[command(subcommand)]
    Node(cluster_cli::NodeCommand),
    #[command(subcommand)]
    Net(net_cli::NetCommand),
    /// The cluster's TLS certificates: `weft cert rotate [HOST…]` reissues them in place.
    #[command(subcommand)]
    Cert(cert_cli::CertCommand),
    /// Buckets of a running cluster: `weft bucket create|ls|rm|policy`.
    #[command(subcommand)]
    Bucket(cluster_cli::BucketCommand),
    /// Store a file as an object: `weft put FILE BUCKET/KEY`.
    ///
    /// Cells stream to the nodes of each stripe while partial parities build up per group
    /// (Okapi), so the client holds about r·block + k·cell bytes, never a whole group. The
    /// object is visible only once every unit is durable. Policy flags override the bucket's
    /// default policy for this object.
    ///
    /// Examples:
    ///   weft put ./video.mp4 media/video.mp4
    ///   weft put big.bin b/big --code rs --k 20 --r 3 --stripe-width 6 --stats
    #[command(verbatim_doc_comment)]
    Put(objects_cli::PutArgs),
    /// Read an object (or a byte range of it), degraded if units are unavailable.
    ///
    /// Examples:
    ///   weft get media/video.mp4 -o video.mp4
    ///   weft get media/video.mp4 --range 0-1023 | xxd | head
    #[command(verbatim_doc_comment)]
    Get(objects_cli::GetArgs),
    /// Replace a byte range of a RAIDP object in place: `weft write BUCKET/KEY --offset N FILE`.
    ///
    /// The bytes go to both replicas of each superchunk they touch; each replica's node
    /// updates its Lstor parity from the old bytes (read-modify-write). Erasure-coded objects
    /// are immutable: put them again instead. A failed update may have reached one replica:
    /// run it again (`weft raidp verify` settles the two meanwhile).
    ///
    /// Examples:
    ///   weft write warm/db.img --offset 4096 page.bin
    #[command(verbatim_doc_comment)]
    Write(objects_cli::WriteArgs),
    /// List the objects of a bucket: `weft ls BUCKET[/PREFIX]`.
    Ls(objects_cli::LsArgs),
    /// Delete an object and its units: `weft rm BUCKET/KEY`.
    Rm(objects_cli::RmArgs),
    /// Show an object: policy, blocks → stripes → groups, where each unit lives, health.
    Stat(objects_cli::StatArgs),
    /// Change the code of stored objects without rewriting their data (Okapi regroup).
    ///
    /// A regroup keeps every data block where it is: consecutive k blocks of the new code form
    /// the new groups, their parity is computed from the data read once and written, and only
    /// then does meta swap the object's parity list (the old parity stays valid until then).
    /// A restripe reads the object and writes it again (needed when the stripe width, cell or
    /// block changes). Flags not given keep the object's current values.
    ///
    /// Examples:
    ///   weft transition media/video.mp4 --code rs --k 12 --r 3 --json
    ///   weft transition media/video.mp4 --code hh-xor+ --k 6 --r 3 --dry-run
    ///   weft transition --bucket media --code rs --k 12 --r 3 --rate 200MiB
    #[command(verbatim_doc_comment)]
    Transition(transition_cli::TransitionArgs),
    /// Delete leaked units: unit files no object, write or transition of meta references.
    ///
    /// Units leak when a client dies mid-write (meta expires such writes after
    /// --expire-writes-after), when a node is down while its units are deleted or repaired
    /// elsewhere, or when cleaning up a transition fails. For each node meta reports up, the
    /// sweep lists its units with their ages, then asks meta what it references, then deletes
    /// what is unreferenced and older than --grace. `weft serve repair` (started by `weft up`)
    /// runs the same sweep every --gc-interval.
    ///
    /// Examples:
    ///   weft gc --dry-run
    ///   weft gc --grace 30m --json
    #[command(verbatim_doc_comment)]
    Gc(gc_cli::GcArgs),
    /// Repair decisions: `weft repair mark-lost BUCKET KEY --yes` gives up on an object whose
    /// unfound units no repair can rebuild (see `weft status`, `weft stat`).
    #[command(subcommand)]
    Repair(repair_cli::RepairCommand),
    /// Access keys of the S3 gateway: `weft key create NAME [--json]`, `weft key ls`,
    /// `weft key rm ID`.
    #[command(subcommand)]
    Key(key_cli::KeyCommand),
    /// Keys of encryption at rest: `weft kms key create|ls|rotate ID`, `weft kms
    /// master-key create FILE`.
    #[command(subcommand)]
    Kms(kms_cli::KmsCommand),
    /// Advice from measurements: `weft advise stripe-width --trace FILE` (Okapi §4.6).
    #[command(subcommand)]
    Advise(advise::AdviseCommand),
    /// The RAIDP tier (two replicas + per-disk Lstor parity): `weft raidp map|verify|recover`.
    #[command(subcommand)]
    Raidp(raidp_cli::RaidpCommand),
    /// Move a geometric bucket's warm objects into its Clay-coded bins now.
    ///
    /// Objects are written to a geometric bucket's warm tier (replicated) and the packer
    /// exports them in batches: each object is cut into a front and chunks of sizes s0·q^i,
    /// chunks of one size from objects of one placement group are coded together, and the
    /// warm copies are deleted once meta has the object in the bins. `weft serve repair`
    /// (started by `weft up`) packs in the background; this runs it by hand, with progress.
    ///
    /// Examples:
    ///   weft pack --now
    ///   weft pack --bucket cold --after 1h --json
    #[command(verbatim_doc_comment)]
    Pack(geometric_cli::PackArgs),
    /// Placement groups of geometric buckets: `weft pg ls [--bucket B] [--json]`.
    #[command(subcommand)]
    Pg(geometric_cli::PgCommand),
    /// Disk drills on a running cluster: `weft disk fail NODE DISK`, `weft disk replace NODE
    /// DISK`.
    #[command(subcommand)]
    Disk(raidp_cli::DiskCommand),
}

/// Commands that print and end die quietly when their reader goes away (`weft status | head`),
/// as Unix tools do: Rust starts with SIGPIPE ignored, which makes the closed pipe a panic in
/// `println!`. Long-running commands (serve, up, demo) keep ignoring it: a closed socket or
/// child pipe is an error they handle, never their death.
fn die_quietly_on_a_closed_pipe(command: &Command) {
    if matches!(command, Command::Serve(_) | Command::Up(_) | Command::Demo(_)) {
        return;
    }
    // SAFETY: signal(2) with the default disposition, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Exit code of a command that failed (the message says why).
const EXIT_FAILED: u8 = 1;
/// Exit code of a command line that is wrong (unknown flag, bad value, bad environment).
const EXIT_USAGE: u8 = 2;

/// Whether the command line asks for JSON (`--json` or `--json-lines`): errors then go to
/// stderr as one JSON document too.
fn wants_json() -> bool {
    std::env::args().skip(1).any(|a| a == "--json" || a == "--json-lines")
}

/// Reports `error` on stderr — `weft: message`, or with `--json`
/// `{"error":{"code":…,"message":…}}` — and returns `exit`.
fn fail(error: &CliError, exit: u8) -> ExitCode {
    if wants_json() {
        let value = serde_json::json!({"error": {"code": error.code(), "message": error.0}});
        eprintln!("{value}");
    } else {
        eprintln!("weft: {error}");
    }
    ExitCode::from(exit)
}

/// glibc's allocator, tuned for buffers of megabytes allocated and freed at a high rate
/// (cells, unit windows, request bodies): blocks up to 32 MiB come from the heap instead of
/// a fresh mmap each (whose pages the kernel faults in and zeroes, then unmaps), and up to
/// 256 MiB freed at a heap's top stays with the process instead of going back to the
/// kernel at once. Measured on `weft bench s3` (rs(9,3), 12 nodes, 64 MiB objects, one
/// client): GET 485 → 635 MiB/s with the gateway's CPU per GiB 1.6 → 1.0 s; PUT +10%. The
/// trim threshold is set only once the mmap threshold is taken: setting it alone fixes the
/// mmap threshold at its 128 KiB default, which halved GET.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets allocator parameters; called first thing in main.
        unsafe {
            if libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1 {
                libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
            }
        }
    }
}

fn main() -> ExitCode {
    tune_malloc();
    let args = match config::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(error) => return fail(&error.with_code("usage"), EXIT_USAGE),
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() || !wants_json() => error.exit(), // help, version
        Err(error) => {
            let text = error.to_string();
            let first = text.lines().next().unwrap_or("bad command line");
            let message = first.strip_prefix("error: ").unwrap_or(first).to_string();
            return fail(&CliError(message, "usage".into()), EXIT_USAGE);
        }
    };
    die_quietly_on_a_closed_pipe(&cli.command);
    if let Err(error) = weft_gf::SimdPath::from_env() {
        return fail(&CliError(error.to_string(), "usage".into()), EXIT_USAGE);
    }
    let result = match cli.command {
        Command::Init(args) => init(args),
        Command::Demo(args) => demo::run(args),
        Command::Ec(command) => ec::run(command),
        Command::Bench(command) => bench::run(command),
        Command::Serve(command) => serve::run(command),
        Command::Up(args) => up::run(args),
        Command::Net(command) => net_cli::run(command),
        Command::Cert(command) => cert_cli::run(command),
        Command::Status(args) => cluster_cli::status(args),
        Command::Node(command) => cluster_cli::node(command),
        Command::Bucket(command) => cluster_cli::bucket(command),
        Command::Put(args) => objects_cli::put(args),
        Command::Write(args) => objects_cli::write(args),
        Command::Get(args) => objects_cli::get(args),
        Command::Advise(command) => advise::run(command),
        Command::Ls(args) => objects_cli::ls(args),
        Command::Rm(args) => objects_cli::rm(args),
        Command::Stat(args) => objects_cli::stat(args),
        Command::Transition(args) => transition_cli::run(args),
        Command::Gc(args) => gc_cli::run(args),
        Command::Repair(command) => repair_cli::run(command),
        Command::Raidp(command) => raidp_cli::run(command),
        Command::Disk(command) => raidp_cli::disk(command),
        Command::Pack(args) => geometric_cli::pack(args),
        Command::Pg(command) => geometric_cli::pg(command),
        Command::Key(command) => key_cli::run(command),
        Command::Kms(command) => kms_cli::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.code() == "usage" => fail(&error, EXIT_USAGE),
        Err(error) => fail(&error, EXIT_FAILED),
    }
}

#[derive(Debug, clap::Args)]
struct InitArgs {
    /// The cluster's directory.
    #[arg(long, default_value = "./weft-data")]
    dir: std::path::PathBuf,
    /// Write a deployment: one directory per host in DIR (configuration files for `weft
    /// serve … --config`, node keys, the secret where a process needs it, the host's TLS
    /// certificate of the cluster CA made in DIR/tls), ready to copy to the host's
    /// --etc-dir. Each host is IP or NAME=IP, e.g. a=10.0.0.11,b=10.0.0.12.
    #[arg(long, value_delimiter = ',', value_name = "HOSTS")]
    hosts: Vec<String>,
    /// With --hosts: storage nodes per host (node N listens on port 7700 + N).
    #[arg(long, default_value_t = 3, requires = "hosts")]
    nodes_per_host: u32,
    /// With --hosts: disks per node.
    #[arg(long, default_value_t = 1, requires = "hosts")]
    disks_per_node: u32,
    /// With --hosts: the PostgreSQL store every host's meta shares (postgres://weft@db/weft;
    /// give the password in $PGPASSWORD). Without it only the first host runs a meta.
    #[arg(long, value_name = "URL", requires = "hosts")]
    store: Option<String>,
    /// With --hosts: S3 gateways, on the first hosts (port 9000).
    #[arg(long, default_value_t = 2, requires = "hosts")]
    gateways: u32,
    /// With --hosts: the name S3 clients reach the gateways by (a load balancer's DNS name
    /// or address): added to every gateway host's certificate, and the endpoint of
    /// DIR/s3.json.
    #[arg(long, value_name = "NAME", requires = "hosts")]
    s3_endpoint_name: Option<String>,
    /// With --hosts: where each host keeps these files ({host} is replaced by its name).
    #[arg(long, default_value = "/etc/weft", requires = "hosts")]
    etc_dir: std::path::PathBuf,
    /// With --hosts: where each host keeps its data ({host} is replaced by its name).
    #[arg(long, default_value = "/var/lib/weft", requires = "hosts")]
    data_dir: std::path::PathBuf,
    /// With --hosts: no TLS; plain-HTTP links (and consent to listeners off loopback).
    #[arg(long, requires = "hosts")]
    insecure_plaintext: bool,
}

fn init(args: InitArgs) -> Result<(), CliError> {
    if !args.hosts.is_empty() {
        let lines = deploy::write(&deploy::Plan {
            dir: &args.dir,
            hosts: &args.hosts,
            nodes_per_host: args.nodes_per_host,
            disks_per_node: args.disks_per_node,
            store: args.store.as_deref(),
            gateways: args.gateways,
            s3_endpoint_name: args.s3_endpoint_name.as_deref(),
            etc_dir: &args.etc_dir,
            data_dir: &args.data_dir,
            insecure_plaintext: args.insecure_plaintext,
        })?;
        for line in lines {
            println!("{line}");
        }
        return Ok(());
    }
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| cli_error!("cannot create {}: {e}", args.dir.display()))?;
    let path = args.dir.join(cluster_cli::SECRET_FILE_NAME);
    if path.exists() {
        return Err(cli_error!(
            "{} exists already; weft never replaces a cluster secret",
            path.display()
        ));
    }
    weft_auth::ClusterSecret::create_file(&path)?;
    println!("wrote the cluster secret to {} (mode 0600)", path.display());
    println!(
        "next: weft serve meta --dir {} --secret-file {}",
        args.dir.join("meta").display(),
        path.display()
    );
    Ok(())
}

/// A user-facing error: one line that says what went wrong and, where it can, what to do
/// (`.0`), and a stable code scripts can branch on (`code`, printed with `--json`).
#[derive(Debug)]
pub struct CliError(pub String, pub String);

impl CliError {
    /// The same message under another code.
    pub fn with_code(self, code: &str) -> CliError {
        CliError(self.0, code.to_string())
    }

    /// The code: meta's own for its refusals (`no_such_bucket`, `policy_too_wide`, …), else
    /// one of weft's (see `client_error_code`; docs/cluster.md, "Output for scripts").
    pub fn code(&self) -> &str {
        &self.1
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error + 'static> From<E> for CliError {
    fn from(error: E) -> Self {
        let code = match (&error as &dyn std::any::Any).downcast_ref::<weft_client::ClientError>() {
            Some(client) => client_error_code(client),
            None => "failed".to_string(),
        };
        CliError(error.to_string(), code)
    }
}

/// The code of a client error: meta's own code for its refusals, else `meta_unreachable`,
/// `node_failed`, `unrecoverable` (too many units of a group lost), `io` (a local file),
/// `invalid` (the request makes no sense) or `failed`. (`usage`, exit 2, is the command
/// line's.)
fn client_error_code(error: &weft_client::ClientError) -> String {
    use weft_client::ClientError as E;
    match error {
        E::Meta { code, .. } if !code.is_empty() => code.clone(),
        E::MetaUnreachable { .. } => "meta_unreachable".into(),
        E::Node { .. } => "node_failed".into(),
        E::Unrecoverable { .. } => "unrecoverable".into(),
        E::Io { .. } => "io".into(),
        E::Invalid(_) => "invalid".into(),
        _ => "failed".into(),
    }
}

/// Shorthand for a `CliError` with a formatted message (code `failed`; `.with_code` for
/// another).
#[macro_export]
macro_rules! cli_error {
    ($($arg:tt)*) => { $crate::CliError(format!($($arg)*), "failed".to_string()) };
}

/// The code a command works with, as flags: a family with its parameters, or a full name.
#[derive(Debug, Clone, clap::Args)]
pub struct CodeArgs {
    /// Code: a family (rs, rep, hh-xor, hh-xor+, hh-nonxor, clay, lrc) with the flags below,
    /// or a full name such as rs(10,4), clay(8,4,11) or lrc(10,2,2); `weft bucket create`
    /// also takes raidp (two replicas + per-disk parity).
    #[arg(long, default_value = "rs")]
    pub code: String,
    /// Data units k [default: 6, as in weft's default policy rs(6,3); rep has k = 1].
    #[arg(long)]
    pub k: Option<usize>,
    /// Parity units r: any r units may be lost [default: 3; rep: 2 extra copies; lrc: l + g].
    #[arg(long)]
    pub r: Option<usize>,
    /// Clay: helpers a repair reads from, k + 1 ≤ d ≤ k + r − 1 [default: k + r − 1].
    #[arg(long)]
    pub d: Option<usize>,
    /// LRC: local groups (each of k/l data units plus one XOR parity) [default: 2].
    #[arg(long)]
    pub l: Option<usize>,
    /// LRC: global parities [default: 2].
    #[arg(long)]
    pub g: Option<usize>,
}

/// k and r of weft's one default policy, rs(6,3) (meta's `default_policy_json`): a flag
/// left out means the same thing in every command.
pub const DEFAULT_K: usize = 6;
pub const DEFAULT_R: usize = 3;

impl CodeArgs {
    /// The validated spec, with each family's defaults filled in for flags not given.
    pub fn spec(&self) -> Result<weft_codes::CodeSpec, CliError> {
        use weft_codes::{CodeParts, CodeSpec};
        let family = self.code.trim().to_ascii_lowercase();
        if family.contains(|c: char| c.is_ascii_digit()) {
            let flags = [self.k, self.r, self.d, self.l, self.g];
            if flags.iter().any(Option::is_some) {
                return Err(cli_error!(
                    "give the code either as a name (--code 'rs(10,4)') or as a family with \
                     flags (--code rs --k 10 --r 4), not both"
                ));
            }
            return Ok(CodeSpec::parse(&family)?);
        }
        let mut parts = CodeParts {
            family: family.clone(),
            k: self.k,
            r: self.r,
            d: self.d,
            l: self.l,
            g: self.g,
        };
        match family.as_str() {
            "rep" => parts.r = parts.r.or(Some(2)),
            "lrc" => {
                parts.k = parts.k.or(Some(DEFAULT_K));
                parts.l = parts.l.or(Some(2));
                parts.g = parts.g.or(Some(2));
            }
            _ => {
                parts.k = parts.k.or(Some(DEFAULT_K));
                parts.r = parts.r.or(Some(DEFAULT_R));
            }
        }
        Ok(CodeSpec::from_parts(&parts)?)
    }
}

/// Parses sizes like `1MiB`, `64KiB`, `4096`, `2GiB`, `1MB`.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: usize = number.parse().map_err(|_| format!("{text:?} is not a size like 1MiB"))?;
    let multiplier: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1000,
        "mb" => 1000 * 1000,
        "gb" => 1000 * 1000 * 1000,
        other => {
            return Err(format!("unknown size unit {other:?} in {text:?}; use B, KiB, MiB or GiB"))
        }
    };
    number.checked_mul(multiplier).ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse() {
        assert_eq!(super::parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(super::parse_size("64KiB"), Ok(65536));
        assert_eq!(super::parse_size("4096"), Ok(4096));
        assert_eq!(super::parse_size("16mib"), Ok(16 << 20));
        assert!(super::parse_size("1XB").is_err());
        assert!(super::parse_size("MiB").is_err());
    }
}
