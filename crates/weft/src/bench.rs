//! `weft bench`: coding speed, measured side by side with a peer in the same run.
//!
//! Invariants:
//! - Rates of encode, rebuild (one data unit) and decode (up to r data units) are data bytes
//!   per second, k × shard bytes per operation, so they compare across ops; the rate of
//!   repair (one data unit through the code's repair plan, from the planned bytes already in
//!   memory) is repaired bytes per second, shard bytes per operation.
//! - weft and its peers (ISA-L, or weft's own rs(k,r) beside another code) run interleaved,
//!   trial after trial, on identical data; the figure reported is the median trial. Every
//!   coder's output is checked byte for byte against the original units before any timing —
//!   a faster wrong answer is an error, not a result.
//! - With `--threads N`, each thread codes its own stripe (its own k + r shards); the rate is
//!   the aggregate over all threads.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use std::io::IsTerminal;

use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{rngs::StdRng, RngCore, SeedableRng};
use serde::Serialize;
use weft_codes::{Code, RepairPlan};
use weft_isal::{Isal, IsalTables, IsalVariant};

use crate::{cli_error, parse_size, CliError};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Encode, rebuild, decode and repair speed of one code, beside ISA-L, klauspost or rs(k,r).
    ///
    /// Examples:
    ///   weft bench ec --code rs --k 10 --r 4 --shard 1MiB --compare isal
    ///   weft bench ec --code hh-xor+ --k 10 --r 4 --ops encode,repair --compare rs
    ///   weft bench ec --code rs --k 10 --r 4 --shard 16MiB --ops encode,rebuild \
    ///     --compare isal,klauspost --klauspost-bin bench/klauspost/klauspost-ec
    ///   WEFT_SIMD=avx2 weft bench ec --code rs --k 10 --r 4 --ops encode \
    ///     --compare isal,klauspost --isal-variant avx2 --klauspost-simd avx2
    ///   WEFT_SIMD=ssse3 weft bench ec --code rs --k 10 --r 4 --ops encode \
    ///     --compare isal,klauspost --isal-variant sse --klauspost-simd ssse3
    ///
    /// klauspost/reedsolomon is Go: build its runner first with
    /// `cd bench/klauspost && go build -o klauspost-ec .` (the Go module proxy serves it).
    ///
    /// Ops: `encode` computes r parity shards from k data shards; `rebuild` recomputes one
    /// lost data shard from all it needs; `decode` recomputes r lost data shards (fewer when
    /// the code cannot lose r data units at once); `repair` rebuilds data unit 0 from exactly
    /// the bytes of the code's repair plan. Rates: data bytes per second (k × shard per op)
    /// for encode, rebuild and decode; repaired bytes per second (shard per op) for repair.
    /// The SIMD path is the best the CPU has unless WEFT_SIMD=scalar|ssse3|avx2|gfni forces one.
    #[command(verbatim_doc_comment)]
    Ec(EcBenchArgs),
    /// Object throughput of a running cluster (`weft up`): put, then get (verified).
    ///
    /// Examples:
    ///   weft bench cluster put --size 1GiB --object-size 64MiB
    ///   weft bench cluster get --json
    ///
    /// `put` writes --size bytes as objects of --object-size under bench/ in --bucket
    /// (created with the policy flags when missing); `get` reads every bench/ object back
    /// and checks every byte. Kill nodes between the two to measure degraded reads.
    #[command(verbatim_doc_comment)]
    Cluster(crate::bench_cluster::ClusterBenchArgs),
    /// The RAIDP tier beside rep(3) and rep(2) on a running cluster (`weft up`): put, get and
    /// in-place update MB/s, network, disk and stored bytes per user byte, recovery time
    /// with matching and naive receivers, and a dual-failure rebuild.
    ///
    /// Examples:
    ///   weft bench raidp --json
    ///   weft bench raidp --size 512MiB --object-size 16MiB --clients 8 --no-recovery
    ///
    /// It makes the buckets bench-raidp, bench-rep3 and bench-rep2 when missing (the RAIDP
    /// map, when the cluster has none, with --superchunk). The recovery runs fail disks of
    /// the cluster (`weft disk fail`) and replace them afterwards.
    #[command(verbatim_doc_comment)]
    Raidp(crate::bench_raidp::RaidpBenchArgs),
    /// The geometric layout (RCStor) beside fixed 64 MiB chunks and the striped layout, raw
    /// and under the hardware model: recovery of one failed disk, degraded ÷ healthy read
    /// times, read amplification of small ranges, metadata per object.
    ///
    /// Unlike the other cluster benches it starts its own clusters (`weft up --no-repair` on
    /// temporary directories, one per configuration and hardware), so recovery is measured
    /// alone with its own weighted executor.
    ///
    /// Examples:
    ///   weft bench geometric --json
    ///   weft bench geometric --hardware model --configs geo-clay,striped-rs --objects 12
    ///   weft bench geometric --workload w2 --objects 400
    #[command(verbatim_doc_comment)]
    Geometric(crate::bench_geometric::GeometricBenchArgs),
    /// Okapi's read experiments: throughput, seeks/s and latency of concurrent ranged reads
    /// for a code at several stripe widths, beside coupled layouts (stripe width = k).
    ///
    /// Examples:
    ///   weft up --nodes 19 --disk-model hdd            # in another terminal: the paper's HDDs
    ///   weft bench reads --code rs --k 6 --r 3 --stripe-widths 1,2,3,6 --coupled 3,6,12 \
    ///     --read-sizes 2MiB,12MiB,48MiB --clients 8 --duration 30s --plot fig5.svg
    ///   weft bench reads --stripe-widths 2 --coupled 6 --read-sizes 1MiB,24MiB,96MiB \
    ///     --clients 1 --degraded                       # degraded reads, one disk failed
    ///   weft bench reads --stripe-widths 2 --read-sizes 1MiB --pattern sequential \
    ///     --degraded --degraded-cache 0,256MiB         # what the degraded-read cache saves
    ///   weft bench reads --trace reads.jsonl           # replay a recorded read trace
    ///
    /// Objects are written once per layout under reads/ in --bucket and reused. Seeks/s come
    /// from the nodes' disk-model counters (null on a cluster without --disk-model); read
    /// amplification is bytes fetched ÷ bytes returned (above 1 only in degraded reads).
    #[command(verbatim_doc_comment)]
    Reads(crate::bench_reads::ReadsBenchArgs),
    /// The coding engine: each rail alone, their sum, and the aggregate of all of them.
    ///
    /// Examples:
    ///   weft bench engine --rails simd,isal --scheduler rate-aware,fcfs --shard 64KiB --size 1GiB
    ///   weft bench engine --rails simd,isal,scalar --code rs --k 10 --r 4 --json
    ///
    /// Rates are data bytes per second; latency is per task (k shards), p50 and p99. Every
    /// task's parity is checked against the scalar oracle before anything is printed.
    #[command(verbatim_doc_comment)]
    Engine(crate::bench_engine::EngineBenchArgs),
    /// S3 throughput and server CPU per GiB of `weft up`'s gateway, beside MinIO when asked:
    /// one load generator, the same load, every GET verified.
    ///
    /// Examples:
    ///   weft bench s3 --object-sizes 64MiB,1MiB --clients 1,8 --duration 10s
    ///   weft bench s3 --compare minio --policy 'rs(9,3)' --rounds 3 --json
    ///
    /// Each phase runs --clients request loops for --duration: PUTs of new objects, then
    /// GETs of them (every byte compared), then the objects are deleted (untimed). Server
    /// CPU is user + system time of the cluster's processes (from weft up's cluster.json)
    /// or of MinIO's one process. `--compare minio` starts a minio binary from PATH on
    /// temporary directory drives (EC:r) and alternates the targets every phase.
    #[command(verbatim_doc_comment)]
    S3(crate::bench_s3::S3BenchArgs),
    /// What metadata operations cost as objects grow, on redb and PostgreSQL: begin+commit,
    /// get, list, and planning a failed disk's repairs (index beside a walk of every object).
    ///
    /// Examples:
    ///   weft bench meta --objects 10000,1000000 --store redb,postgres --json
    ///   weft bench meta --objects 10000000 --store redb --ops 2000
    ///   weft bench meta --objects 10000,100000,1000000 --plot meta.svg
    ///
    /// Each store starts empty and is bulk-loaded with N committed objects (rs(6,3), 48 MiB,
    /// placed on --nodes × --disks-per-node disks); then one client times each operation.
    /// PostgreSQL is a throwaway server of the bench's own (needs the postgresql package).
    #[command(verbatim_doc_comment)]
    Meta(crate::bench_meta::MetaBenchArgs),
    /// The hashes every stored and uploaded byte goes through, weft's kernels beside the
    /// crates they replace: the keyed unit digest (beside BLAKE3, which it replaced), the
    /// BLAKE3 digest of older units, an upload's MD5 + SHA-256, MD5 alone.
    ///
    /// Examples:
    ///   weft bench hash
    ///   weft bench hash --size 256MiB --rounds 9 --json
    ///
    /// Outputs are compared before anything is timed; rates are GB/s (10^9 bytes) of one
    /// thread, medians over rounds whose order rotates; ratios are weft ÷ peer.
    #[command(verbatim_doc_comment)]
    Hash(crate::bench_hash::HashBenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Peer {
    /// Intel ISA-L (libisal.so.2, Debian package libisal2), loaded at run time.
    Isal,
    /// weft's own rs(k,r) with the same k and r: the baseline repair-efficient codes beat.
    Rs,
    /// klauspost/reedsolomon (Go, its SIMD paths) through bench/klauspost's `klauspost-ec`
    /// (build it with `go build`; see --klauspost-bin): rs only; encode and rebuild (other
    /// ops run without it).
    Klauspost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IsalChoice {
    /// ISA-L's own run-time dispatch.
    Auto,
    /// `ec_encode_data_avx512`.
    Avx512,
    /// `ec_encode_data_avx2`.
    Avx2,
    /// `ec_encode_data_avx` (128-bit, VEX).
    Avx,
    /// `ec_encode_data_sse` (128-bit), to compare with WEFT_SIMD=ssse3.
    Sse,
    /// `ec_encode_data_base` (portable C), to compare with WEFT_SIMD=scalar.
    Base,
}

impl IsalChoice {
    fn variant(self) -> IsalVariant {
        match self {
            IsalChoice::Auto => IsalVariant::Auto,
            IsalChoice::Avx512 => IsalVariant::Avx512,
            IsalChoice::Avx2 => IsalVariant::Avx2,
            IsalChoice::Avx => IsalVariant::Avx,
            IsalChoice::Sse => IsalVariant::Sse,
            IsalChoice::Base => IsalVariant::Base,
        }
    }
}

/// The instruction sets klauspost-ec's `--simd` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KlauspostSimd {
    /// klauspost's own run-time choice.
    Auto,
    /// AVX2 split-nibble kernels only (no AVX-512, no GFNI).
    Avx2,
    /// SSSE3 kernels only.
    Ssse3,
    /// Portable Go.
    None,
}

impl KlauspostSimd {
    fn name(self) -> &'static str {
        match self {
            KlauspostSimd::Auto => "auto",
            KlauspostSimd::Avx2 => "avx2",
            KlauspostSimd::Ssse3 => "ssse3",
            KlauspostSimd::None => "none",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Encode,
    Rebuild,
    Decode,
    Repair,
}

#[derive(Debug, Args)]
pub struct EcBenchArgs {
    #[command(flatten)]
    code: crate::CodeArgs,
    /// Bytes per shard (unit), e.g. 64KiB, 1MiB, 16MiB.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    shard: usize,
    /// Threads, each coding its own stripe.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Run peers in the same run (comma separated), check their output, print the ratios.
    #[arg(long, value_enum, value_delimiter = ',')]
    compare: Vec<Peer>,
    /// Operations to measure (comma separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "encode,rebuild,decode")]
    ops: Vec<Op>,
    /// Which ISA-L implementation `--compare isal` calls: its own dispatch (auto) or one
    /// instruction set, e.g. avx2 to compare with WEFT_SIMD=avx2 on equal terms.
    #[arg(long, value_enum, default_value = "auto")]
    isal_variant: IsalChoice,
    /// The `klauspost-ec` program `--compare klauspost` runs once per trial (built from
    /// bench/klauspost: `cd bench/klauspost && go build -o klauspost-ec .`).
    #[arg(long, default_value = "klauspost-ec", value_name = "PATH")]
    klauspost_bin: std::path::PathBuf,
    /// Which instruction sets `--compare klauspost` lets klauspost/reedsolomon use: its own
    /// choice (auto: GFNI and AVX-512 where the CPU has them) or at most one set, e.g. avx2 to
    /// compare with WEFT_SIMD=avx2 on equal terms.
    #[arg(long, value_enum, default_value = "auto")]
    klauspost_simd: KlauspostSimd,
    /// Trials per implementation and op (the median is reported).
    #[arg(long, default_value_t = 7)]
    trials: usize,
    /// Target seconds per trial.
    #[arg(long, default_value_t = 0.25)]
    seconds: f64,
    /// Print the rows as one JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Print each row as one JSON object per line, as it is measured.
    #[arg(long, conflicts_with = "json")]
    json_lines: bool,
    /// Also draw the rates as a bar chart (SVG): one group per op, one bar per implementation.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
}

/// One result line.
#[derive(Debug, Serialize)]
struct Row {
    op: Op,
    code: &'static str,
    k: usize,
    r: usize,
    shard_bytes: usize,
    threads: usize,
    #[serde(rename = "impl")]
    implementation: &'static str,
    simd: &'static str,
    bytes_per_sec: f64,
    best_bytes_per_sec: f64,
    trials: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_isal: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_rs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_vs_klauspost: Option<f64>,
    code_name: String,
}

/// One trial of klauspost/reedsolomon: `klauspost-ec` run for `op` alone, its own timed loop
/// of at least `seconds` (its setup and check are not timed); data bytes per second. Its
/// rebuild checks the rebuilt shard against the lost one and fails otherwise.
fn klauspost_trial(
    bin: &std::path::Path,
    simd: KlauspostSimd,
    op: Op,
    k: usize,
    r: usize,
    shard: usize,
    seconds: f64,
) -> Result<f64, CliError> {
    let op_name = format!("{op:?}").to_lowercase();
    let output = std::process::Command::new(bin)
        .args(["--k", &k.to_string(), "--r", &r.to_string(), "--shard", &shard.to_string()])
        .args(["--ops", &op_name, "--trials", "1", "--min-seconds", &seconds.to_string()])
        .args(["--simd", simd.name()])
        .output()
        .map_err(|e| {
            cli_error!(
                "cannot run {} for --compare klauspost: {e} (build it: cd bench/klauspost && \
                 go build -o klauspost-ec . ; then pass --klauspost-bin PATH)",
                bin.display()
            )
        })?;
    if !output.status.success() {
        return Err(cli_error!(
            "{} failed ({}): {}",
            bin.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let line = String::from_utf8_lossy(&output.stdout);
    let row: serde_json::Value = serde_json::from_str(line.trim())
        .map_err(|e| cli_error!("{} printed {line:?}, not a JSON row: {e}", bin.display()))?;
    row["gb_per_s"]
        .as_f64()
        .filter(|rate| rate.is_finite() && *rate > 0.0)
        .map(|rate| rate * 1e9)
        .ok_or_else(|| cli_error!("{} printed no gb_per_s: {row}", bin.display()))
}

/// The machine a benchmark ran on, as its rows report it: figures from different CPUs do not
/// compare, and a peer's SIMD paths depend on what this one has.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `model name` of /proc/cpuinfo ("unknown" where there is none).
    pub cpu: String,
    /// The threads this process may run on.
    pub cores: usize,
    /// The SIMD and hashing extensions the coding and hashing paths look for that this CPU
    /// has, in a fixed order.
    pub features: Vec<&'static str>,
}

impl Machine {
    pub fn this() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("model name"))?.to_owned();
                Some(line.split_once(':')?.1.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        #[allow(unused_mut)]
        let mut features = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            let known = [
                ("avx2", std::is_x86_feature_detected!("avx2")),
                ("avx512f", std::is_x86_feature_detected!("avx512f")),
                ("avx512bw", std::is_x86_feature_detected!("avx512bw")),
                ("gfni", std::is_x86_feature_detected!("gfni")),
                ("vpclmulqdq", std::is_x86_feature_detected!("vpclmulqdq")),
                ("sha", std::is_x86_feature_detected!("sha")),
                ("sse4.2", std::is_x86_feature_detected!("sse4.2")),
            ];
            features.extend(known.iter().filter(|(_, has)| *has).map(|(name, _)| *name));
        }
        Machine { cpu, cores, features }
    }

    /// One line for a human table's foot.
    pub fn line(&self) -> String {
        let features =
            if self.features.is_empty() { "none".into() } else { self.features.join(" ") };
        format!("machine: {}, {} cores; extensions: {features}", self.cpu, self.cores)
    }
}

pub fn run(command: BenchCommand) -> Result<(), CliError> {
    match command {
        BenchCommand::Ec(args) => bench_ec(args),
        BenchCommand::Cluster(args) => crate::bench_cluster::run(args),
        BenchCommand::Raidp(args) => crate::bench_raidp::run(args),
        BenchCommand::Geometric(args) => crate::bench_geometric::run(args),
        BenchCommand::Reads(args) => crate::bench_reads::run(args),
        BenchCommand::Engine(args) => crate::bench_engine::run(args),
        BenchCommand::S3(args) => crate::bench_s3::run(args),
        BenchCommand::Meta(args) => crate::bench_meta::run(args),
        BenchCommand::Hash(args) => crate::bench_hash::run(args),
    }
}

/// Bounds that keep a typo from allocating the machine away.
const MAX_THREADS: usize = 256;
const MAX_SHARD_BYTES: usize = 1 << 30;
const MAX_ITERATIONS: usize = 10_000_000;

/// Shard buffers start on a cache line, as ISA-L's own perf tests allocate them: where a
/// buffer starts otherwise depends on the allocator's history (glibc moves large blocks from
/// mmap to the heap once one is freed), and every 64-byte load would straddle two lines.
const BUFFER_ALIGN_BYTES: usize = 64;

/// Large shard buffers ask for transparent huge pages (where the kernel gives them on
/// request, as with THP set to `madvise`): with 4 KiB pages a stripe of 1 MiB shards spans
/// thousands of pages, and TLB misses, not coding, would decide which code looks faster.
const HUGE_PAGE_BYTES: usize = 2 << 20;
/// Buffers from this size on are placed on huge pages (smaller ones would waste most of one).
const HUGE_PAGE_MIN_BUFFER_BYTES: usize = 512 << 10;

#[cfg(target_os = "linux")]
fn advise_huge_pages(start: *mut u8, span: usize) {
    // SAFETY: [start, start + span) lies within the buffer's allocation (capacity span plus
    // the alignment slack, start aligned inside it); madvise only changes how the kernel backs
    // those pages, and failure is harmless: 4 KiB pages.
    unsafe {
        libc::madvise(start.cast(), span, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_start: *mut u8, _len: usize) {}

/// Buffers start at one of this many cache-line offsets within a 4 KiB page.
const STAGGER_LINES: usize = 64;

/// A zeroed byte buffer whose first byte is `BUFFER_ALIGN_BYTES`-aligned (2 MiB-aligned for
/// buffers of 2 MiB and more).
struct AlignedBuffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuffer {
    /// `stagger` picks the start's cache-line offset within a page, so the buffers of one
    /// stripe do not all start at the same offset: perfectly aliased streams fight over the
    /// same cache sets (and trip 4 KiB store/load aliasing), which independently allocated
    /// buffers rarely do.
    fn zeroed(len: usize, stagger: usize) -> AlignedBuffer {
        let huge = len >= HUGE_PAGE_MIN_BUFFER_BYTES;
        let align = if huge { HUGE_PAGE_BYTES } else { BUFFER_ALIGN_BYTES };
        // A fixed pseudo-random cache-line offset within 4 KiB per slot, as independent
        // allocations would have: no two streams systematically alias.
        let shift = (stagger.wrapping_mul(0x9E37_79B9) >> 7) % STAGGER_LINES * BUFFER_ALIGN_BYTES;
        let span =
            if huge { (len + shift).div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES } else { len };
        let mut storage: Vec<u8> = Vec::with_capacity(span + align + shift);
        let aligned = storage.as_ptr().align_offset(align);
        if huge {
            advise_huge_pages(storage.as_mut_ptr().wrapping_add(aligned), span);
        }
        // Zeroing after the advice makes the first touch fault in huge pages.
        storage.resize(span + align + shift, 0);
        let offset = aligned + shift;
        AlignedBuffer { storage, offset, len }
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

/// The shards one thread works on.
struct Stripe {
    units: Vec<AlignedBuffer>,
    out: Vec<AlignedBuffer>,
}

impl Stripe {
    fn new(seed: u64, n: usize, shard: usize, outputs: usize) -> Stripe {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut slot = 0..;
        let units = (0..n)
            .map(|_| {
                let mut unit = AlignedBuffer::zeroed(shard, slot.next().expect("endless"));
                rng.fill_bytes(unit.as_mut_slice());
                unit
            })
            .collect();
        let out = (0..outputs)
            .map(|_| AlignedBuffer::zeroed(shard, slot.next().expect("endless")))
            .collect();
        Stripe { units, out }
    }
}

/// What one implementation does for one op: (sources, outputs) → fills outputs.
trait Coder: Send + Sync {
    fn run(&self, stripe: &mut Stripe);
}

/// The units an op loses and must recompute: parity for encode, data unit 0 for rebuild and
/// repair, and for decode the first r data units — or fewer, for codes (LRC) that cannot
/// lose that many data units at once.
fn lost_units(op: Op, code: &dyn Code) -> Vec<usize> {
    let (k, r) = (code.data_units(), code.parity_units());
    match op {
        Op::Encode => (k..k + r).collect(),
        Op::Rebuild | Op::Repair => vec![0],
        Op::Decode => {
            let mut lost: Vec<usize> = (0..r.min(k)).collect();
            while lost.len() > 1 && !code.is_decodable(&lost) {
                lost.pop();
            }
            lost
        }
    }
}

struct WeftCoder {
    code: Arc<dyn Code>,
    op: Op,
    lost: Vec<usize>,
    /// For repair: the plan for unit 0 with every other unit available.
    plan: Option<RepairPlan>,
}

impl WeftCoder {
    fn new(code: Arc<dyn Code>, op: Op, shard: usize) -> Result<WeftCoder, CliError> {
        let lost = lost_units(op, code.as_ref());
        let plan = match op {
            Op::Repair => Some(code.repair_plan(0, &[], shard)?),
            _ => None,
        };
        Ok(WeftCoder { code, op, lost, plan })
    }
}

impl Coder for WeftCoder {
    fn run(&self, stripe: &mut Stripe) {
        let k = self.code.data_units();
        let mut outs: Vec<&mut [u8]> = stripe.out.iter_mut().map(|o| o.as_mut_slice()).collect();
        match (self.op, &self.plan) {
            (Op::Encode, _) => {
                let data: Vec<&[u8]> = stripe.units[..k].iter().map(|u| u.as_slice()).collect();
                self.code.encode(&data, &mut outs).expect("encode");
            }
            (Op::Repair, Some(plan)) => {
                let reads: Vec<&[u8]> = plan
                    .reads
                    .iter()
                    .map(|r| &stripe.units[r.unit].as_slice()[r.offset..r.offset + r.len])
                    .collect();
                self.code.repair(plan, &reads, &mut *outs[0]).expect("repair");
            }
            _ => {
                let present: Vec<Option<&[u8]>> = stripe
                    .units
                    .iter()
                    .enumerate()
                    .map(|(i, u)| (!self.lost.contains(&i)).then_some(u.as_slice()))
                    .collect();
                self.code.reconstruct(&present, &self.lost, &mut outs).expect("reconstruct");
            }
        }
    }
}

struct IsalCoder {
    isal: Arc<Isal>,
    variant: IsalVariant,
    lost: Vec<usize>,
    tables: IsalTables,
    sources: Vec<usize>,
}

impl IsalCoder {
    /// Mirrors ISA-L's own erasure_code_test: survivors are the first k present units, the
    /// decode rows are the lost rows of the generator times the inverse of the survivors' rows.
    fn new(
        isal: Arc<Isal>,
        variant: IsalVariant,
        op: Op,
        k: usize,
        r: usize,
    ) -> Result<IsalCoder, CliError> {
        let n = k + r;
        let generator = isal.cauchy1_matrix(n, k);
        let row = |i: usize| &generator[i * k..(i + 1) * k];
        let lost: Vec<usize> = match op {
            Op::Encode => (k..n).collect(),
            Op::Rebuild | Op::Repair => vec![0],
            Op::Decode => (0..r.min(k)).collect(),
        };
        let (sources, coefficients) = match op {
            Op::Encode => ((0..k).collect(), generator[k * k..].to_vec()),
            Op::Rebuild | Op::Decode | Op::Repair => {
                let sources: Vec<usize> = (0..n).filter(|i| !lost.contains(i)).take(k).collect();
                let survivors: Vec<u8> = sources.iter().flat_map(|&i| row(i).to_vec()).collect();
                let inverse = isal
                    .invert_matrix(&survivors, k)
                    .ok_or_else(|| cli_error!("ISA-L found the survivor matrix singular"))?;
                let mut coefficients = Vec::with_capacity(lost.len() * k);
                for &l in &lost {
                    for c in 0..k {
                        let mut v = 0u8;
                        for j in 0..k {
                            v ^= weft_gf::mul(row(l)[j], inverse[j * k + c]);
                        }
                        coefficients.push(v);
                    }
                }
                (sources, coefficients)
            }
        };
        let tables = isal.init_tables(k, lost.len(), &coefficients);
        Ok(IsalCoder { isal, variant, lost, tables, sources })
    }
}

impl Coder for IsalCoder {
    fn run(&self, stripe: &mut Stripe) {
        let srcs: Vec<&[u8]> = self.sources.iter().map(|&i| stripe.units[i].as_slice()).collect();
        let mut outs: Vec<&mut [u8]> = stripe.out.iter_mut().map(|o| o.as_mut_slice()).collect();
        self.isal.encode_data_with(self.variant, &self.tables, &srcs, &mut outs);
    }
}

/// Runs `iterations` ops on every thread's stripe at once; returns the wall time from the
/// first thread's start to the last thread's end. Each thread reads the clock itself: a
/// coordinator's clock would count however long the scheduler kept the coordinator waiting.
fn timed(coder: &Arc<dyn Coder>, stripes: &mut [Stripe], iterations: usize) -> Duration {
    let barrier = Arc::new(Barrier::new(stripes.len()));
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|scope| {
        let handles: Vec<_> = stripes
            .iter_mut()
            .map(|stripe| {
                let coder = coder.clone();
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iterations {
                        coder.run(stripe);
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread panicked")).collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("at least one thread");
    let last = spans.iter().map(|s| s.1).max().expect("at least one thread");
    last - first
}

/// Iterations per trial so that one trial lasts about `seconds`: doubles the count until a
/// run lasts long enough to time (≥ 1/8 of the target), then scales.
fn calibrate(coder: &Arc<dyn Coder>, stripes: &mut [Stripe], seconds: f64) -> usize {
    let mut iterations = 1usize;
    loop {
        let elapsed = timed(coder, stripes, iterations).as_secs_f64();
        if elapsed >= seconds / 8.0 || iterations >= MAX_ITERATIONS {
            let scaled = (iterations as f64 * seconds / elapsed.max(1e-9)).ceil() as usize;
            return scaled.clamp(1, MAX_ITERATIONS);
        }
        iterations = (iterations * 2).min(MAX_ITERATIONS);
    }
}

/// The middle value (the upper one of an even count); sorts `values`.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).expect("rates are finite"));
    values[values.len() / 2]
}

/// A trial counter on stderr, only for a person watching a terminal (never with --json).
fn progress_bar(trials: usize, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(trials as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} trials {elapsed}") {
        bar.set_style(style);
    }
    bar
}

/// Stripes for every thread: the same seeded data for every contender, parity by `code`.
fn make_stripes(
    code: &dyn Code,
    threads: usize,
    shard: usize,
    outputs: usize,
) -> Result<Vec<Stripe>, CliError> {
    let (k, n) = (code.data_units(), code.total_units());
    let mut stripes: Vec<Stripe> =
        (0..threads).map(|t| Stripe::new(0x5eed + t as u64, n, shard, outputs)).collect();
    for stripe in &mut stripes {
        let (data, parity) = stripe.units.split_at_mut(k);
        let data: Vec<&[u8]> = data.iter().map(|u| u.as_slice()).collect();
        let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|u| u.as_mut_slice()).collect();
        code.encode(&data, &mut parity)?;
    }
    Ok(stripes)
}

/// One implementation measured in a run.
struct Contender {
    implementation: &'static str,
    code_name: String,
    family: &'static str,
    simd: &'static str,
    lost: Vec<usize>,
    coder: Arc<dyn Coder>,
    stripes: Vec<Stripe>,
}

impl Contender {
    /// Runs the coder once on every stripe and checks it recomputed the lost units exactly.
    fn verify(&mut self, op: Op) -> Result<(), CliError> {
        for stripe in &mut self.stripes {
            stripe.out.iter_mut().for_each(|o| o.as_mut_slice().fill(0));
            self.coder.run(stripe);
            for (o, &l) in stripe.out.iter().zip(&self.lost) {
                let (got, want) = (o.as_slice(), stripe.units[l].as_slice());
                if got != want {
                    let at = got.iter().zip(want).position(|(a, b)| a != b);
                    return Err(cli_error!(
                        "{} {} {op:?} output differs from the original unit {l} at byte {at:?}",
                        self.implementation,
                        self.code_name
                    ));
                }
            }
        }
        Ok(())
    }
}

fn bench_ec(args: EcBenchArgs) -> Result<(), CliError> {
    let spec = args.code.spec()?;
    let code = spec.build()?;
    let (k, r) = (code.data_units(), code.parity_units());
    if args.threads == 0 || args.threads > MAX_THREADS {
        return Err(cli_error!("--threads must be between 1 and {MAX_THREADS}"));
    }
    if args.shard == 0 || args.shard > MAX_SHARD_BYTES {
        return Err(cli_error!("--shard must be between 1 byte and 1GiB"));
    }
    code.check_unit_len(args.shard)?;
    if args.trials == 0 || !args.seconds.is_finite() || args.seconds <= 0.0 {
        return Err(cli_error!("--trials and --seconds must be positive"));
    }
    let isal = if args.compare.contains(&Peer::Isal) {
        if spec.family() != "rs" {
            return Err(cli_error!(
                "--compare isal needs --code rs: ISA-L implements Reed-Solomon only \
                 (compare other codes with --compare rs)"
            ));
        }
        let isal = Isal::load()?;
        let variant = args.isal_variant.variant();
        if variant != IsalVariant::Auto && !isal.variants().contains(&variant) {
            return Err(cli_error!(
                "ISA-L variant {} is not available here (available: {})",
                variant.name(),
                isal.variants().iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
            ));
        }
        Some(Arc::new(isal))
    } else {
        None
    };
    let klauspost = args.compare.contains(&Peer::Klauspost);
    if klauspost {
        if spec.family() != "rs" {
            return Err(cli_error!("--compare klauspost needs --code rs (it is Reed-Solomon)"));
        }
        if args.threads != 1 {
            return Err(cli_error!("--compare klauspost measures one thread: drop --threads"));
        }
    }
    if klauspost {
        // Before any row: a runner that is missing or prints nothing usable says so now.
        klauspost_trial(&args.klauspost_bin, args.klauspost_simd, Op::Encode, k, r, 64, 0.001)?;
    }
    let rs_baseline = if args.compare.contains(&Peer::Rs) {
        if spec.family() == "rs" {
            return Err(cli_error!("--compare rs compares another code with rs; the code is rs"));
        }
        Some(weft_codes::CodeSpec::Rs { k, r }.build()?)
    } else {
        None
    };
    let simd = weft_gf::SimdPath::active().name();
    let machine = args.json || args.json_lines;
    let mut json_rows = if machine {
        crate::rows::JsonRows::new(args.json_lines)
    } else {
        crate::rows::JsonRows::silent()
    };
    if !machine {
        let mut peers = Vec::new();
        if let Some(isal) = &isal {
            peers.push(format!("ISA-L ({}, {})", isal.path(), args.isal_variant.variant().name()));
        }
        if let Some(rs) = &rs_baseline {
            peers.push(rs.spec().to_string());
        }
        if klauspost {
            peers.push(format!(
                "klauspost/reedsolomon ({}, {})",
                args.klauspost_bin.display(),
                args.klauspost_simd.name()
            ));
        }
        println!(
            "weft bench ec: {spec}, shard {} bytes, {} thread(s), SIMD path {simd}{}",
            args.shard,
            args.threads,
            if peers.is_empty() {
                String::new()
            } else {
                format!(", beside {}", peers.join(" and "))
            }
        );
        println!(
            "GB/s: data bytes per second (k × shard per op), repair: repaired bytes per second; \
             median of {} trials",
            args.trials
        );
        println!(
            "{:<8} {:<9} {:<16} {:>10} {:>10} {:>8} {:>8} {:>12}",
            "op", "impl", "code", "GB/s", "best GB/s", "vs isal", "vs rs", "vs klauspost"
        );
    }
    let implementations = 1
        + usize::from(isal.is_some())
        + usize::from(rs_baseline.is_some())
        + usize::from(klauspost);
    let progress = progress_bar(args.ops.len() * args.trials * implementations, machine);
    for &op in &args.ops {
        let bytes_per_op = match op {
            Op::Repair => args.shard,
            _ => k * args.shard,
        } as f64;
        let mut contenders = Vec::with_capacity(implementations);
        let weft = WeftCoder::new(code.clone(), op, args.shard)?;
        contenders.push(Contender {
            implementation: "weft",
            code_name: spec.to_string(),
            family: spec.family(),
            simd,
            lost: weft.lost.clone(),
            stripes: make_stripes(code.as_ref(), args.threads, args.shard, weft.lost.len())?,
            coder: Arc::new(weft),
        });
        if let Some(isal) = &isal {
            let variant = args.isal_variant.variant();
            let coder = IsalCoder::new(isal.clone(), variant, op, k, r)?;
            let lost = coder.lost.clone();
            contenders.push(Contender {
                implementation: "isal",
                code_name: spec.to_string(),
                family: spec.family(),
                simd: variant.name(),
                stripes: make_stripes(code.as_ref(), args.threads, args.shard, lost.len())?,
                lost,
                coder: Arc::new(coder),
            });
        }
        if let Some(rs) = &rs_baseline {
            let coder = WeftCoder::new(rs.clone(), op, args.shard)?;
            contenders.push(Contender {
                implementation: "weft",
                code_name: rs.spec().to_string(),
                family: "rs",
                simd,
                lost: coder.lost.clone(),
                stripes: make_stripes(rs.as_ref(), args.threads, args.shard, coder.lost.len())?,
                coder: Arc::new(coder),
            });
        }
        // Correctness before speed: every coder must produce the lost units exactly.
        for contender in &mut contenders {
            contender.verify(op)?;
        }
        let first = &mut contenders[0];
        let iterations = calibrate(&first.coder, &mut first.stripes, args.seconds);
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
        let mut klauspost_rates = Vec::new();
        // klauspost-ec measures the ops both have: encode and rebuild.
        let klauspost = klauspost && matches!(op, Op::Encode | Op::Rebuild);
        for _ in 0..args.trials {
            for (c, contender) in contenders.iter_mut().enumerate() {
                let elapsed =
                    timed(&contender.coder, &mut contender.stripes, iterations).as_secs_f64();
                rates[c].push(bytes_per_op * (iterations * args.threads) as f64 / elapsed);
                progress.inc(1);
            }
            if klauspost {
                let bin = &args.klauspost_bin;
                let simd = args.klauspost_simd;
                klauspost_rates.push(klauspost_trial(
                    bin,
                    simd,
                    op,
                    k,
                    r,
                    args.shard,
                    args.seconds,
                )?);
                progress.inc(1);
            }
        }
        let klauspost_median = klauspost.then(|| median(&mut klauspost_rates));
        let medians: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
        let isal_median = isal.as_ref().map(|_| medians[1]);
        let rs_median = rs_baseline.as_ref().map(|_| medians[contenders.len() - 1]);
        let mut rows_out = Vec::new();
        for (c, contender) in contenders.iter().enumerate() {
            let best = rates[c].iter().cloned().fold(0.0, f64::max);
            let main = c == 0;
            let row = Row {
                op,
                code: contender.family,
                k,
                r,
                shard_bytes: args.shard,
                threads: args.threads,
                implementation: contender.implementation,
                simd: contender.simd,
                bytes_per_sec: medians[c],
                best_bytes_per_sec: best,
                trials: args.trials,
                ratio_vs_isal: isal_median.filter(|_| main).map(|i| medians[c] / i),
                ratio_vs_rs: rs_median.filter(|_| main).map(|i| medians[c] / i),
                ratio_vs_klauspost: klauspost_median.filter(|_| main).map(|i| medians[c] / i),
                code_name: contender.code_name.clone(),
            };
            rows_out.push(row);
        }
        if let Some(rate) = klauspost_median {
            rows_out.push(Row {
                op,
                code: "rs",
                k,
                r,
                shard_bytes: args.shard,
                threads: 1,
                implementation: "klauspost",
                simd: args.klauspost_simd.name(),
                bytes_per_sec: rate,
                best_bytes_per_sec: klauspost_rates.iter().cloned().fold(0.0, f64::max),
                trials: args.trials,
                ratio_vs_isal: None,
                ratio_vs_rs: None,
                ratio_vs_klauspost: None,
                code_name: spec.to_string(),
            });
        }
        for row in rows_out.drain(..) {
            json_rows.push(&row);
            if !machine {
                let ratio = |x: Option<f64>| x.map(|x| format!("{x:.2}×")).unwrap_or_default();
                progress.suspend(|| {
                    println!(
                        "{:<8} {:<9} {:<16} {:>10.2} {:>10.2} {:>8} {:>8} {:>12}",
                        format!("{op:?}").to_lowercase(),
                        row.implementation,
                        row.code_name,
                        row.bytes_per_sec / 1e9,
                        row.best_bytes_per_sec / 1e9,
                        ratio(row.ratio_vs_isal),
                        ratio(row.ratio_vs_rs),
                        ratio(row.ratio_vs_klauspost)
                    )
                });
            }
        }
    }
    progress.finish_and_clear();
    json_rows.finish();
    if let Some(path) = &args.plot {
        let text =
            |row: &serde_json::Value, field: &str| row[field].as_str().unwrap_or("?").to_string();
        crate::plot::Chart::bars(
            &format!(
                "weft bench ec: {spec}, shard {}, {} thread(s)",
                crate::cluster_cli::format_size(args.shard as u64),
                args.threads
            ),
            "operation",
            "rate (GB/s of data)",
            json_rows.rows(),
            |row| text(row, "op"),
            |row| format!("{} {}", text(row, "impl"), text(row, "code_name")),
            |row| row["bytes_per_sec"].as_f64().unwrap_or(f64::NAN) / 1e9,
        )
        .write(path)?;
    }
    Ok(())
}
