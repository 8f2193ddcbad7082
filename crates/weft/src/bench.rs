//! `weft bench`: coding speed, measured side by side with a peer in the same run.
//!
//! Invariants:
//! - Rates are data bytes per second: k × shard bytes per operation, for every operation
//!   (encode, rebuild of one data unit, decode of r data units), so rates compare across ops.
//! - weft and the peer run interleaved, trial after trial, on identical inputs; the figure
//!   reported is the median trial, and the peer's output is checked byte for byte against
//!   weft's before any timing — a faster wrong answer is an error, not a result.
//! - With `--threads N`, each thread codes its own stripe (its own k + r shards); the rate is
//!   the aggregate over all threads.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use std::io::IsTerminal;

use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{rngs::StdRng, RngCore, SeedableRng};
use serde::Serialize;
use weft_codes::Code;
use weft_isal::{Isal, IsalTables, IsalVariant};

use crate::{cli_error, parse_size, CliError};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Encode, rebuild and decode speed of one code, optionally beside ISA-L.
    ///
    /// Example: weft bench ec --code rs --k 10 --r 4 --shard 1MiB --compare isal
    ///
    /// Ops: `encode` computes r parity shards from k data shards; `rebuild` recomputes one
    /// lost data shard from k survivors; `decode` recomputes r lost data shards. Rates are data
    /// bytes per second (k × shard per op). The SIMD path is the best the CPU has unless
    /// WEFT_SIMD=scalar|avx2|gfni forces one.
    Ec(EcBenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Peer {
    /// Intel ISA-L (libisal.so.2, Debian package libisal2), loaded at run time.
    Isal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IsalChoice {
    Auto,
    Avx512,
    Avx2,
    Base,
}

impl IsalChoice {
    fn variant(self) -> IsalVariant {
        match self {
            IsalChoice::Auto => IsalVariant::Auto,
            IsalChoice::Avx512 => IsalVariant::Avx512,
            IsalChoice::Avx2 => IsalVariant::Avx2,
            IsalChoice::Base => IsalVariant::Base,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Encode,
    Rebuild,
    Decode,
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
    /// Run a peer coder in the same run, check its output equals weft's, print the ratio.
    #[arg(long, value_enum)]
    compare: Option<Peer>,
    /// Operations to measure (comma separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "encode,rebuild,decode")]
    ops: Vec<Op>,
    /// Which ISA-L implementation `--compare isal` calls: its own dispatch (auto) or one
    /// instruction set, e.g. avx2 to compare with WEFT_SIMD=avx2 on equal terms.
    #[arg(long, value_enum, default_value = "auto")]
    isal_variant: IsalChoice,
    /// Trials per implementation and op (the median is reported).
    #[arg(long, default_value_t = 7)]
    trials: usize,
    /// Target seconds per trial.
    #[arg(long, default_value_t = 0.25)]
    seconds: f64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
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
}

pub fn run(command: BenchCommand) -> Result<(), CliError> {
    match command {
        BenchCommand::Ec(args) => bench_ec(args),
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

/// A zeroed byte buffer whose first byte is `BUFFER_ALIGN_BYTES`-aligned.
struct AlignedBuffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuffer {
    fn zeroed(len: usize) -> AlignedBuffer {
        let storage = vec![0u8; len + BUFFER_ALIGN_BYTES];
        let offset = storage.as_ptr().align_offset(BUFFER_ALIGN_BYTES);
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
        let units = (0..n)
            .map(|_| {
                let mut unit = AlignedBuffer::zeroed(shard);
                rng.fill_bytes(unit.as_mut_slice());
                unit
            })
            .collect();
        Stripe { units, out: (0..outputs).map(|_| AlignedBuffer::zeroed(shard)).collect() }
    }
}

/// What one implementation does for one op: (sources, outputs) → fills outputs.
trait Coder: Send + Sync {
    fn run(&self, stripe: &mut Stripe);
}

/// The units an op loses and must recompute, and the survivors it reads.
fn lost_units(op: Op, k: usize, r: usize) -> Vec<usize> {
    match op {
        Op::Encode => (k..k + r).collect(),
        Op::Rebuild => vec![0],
        Op::Decode => (0..r.min(k)).collect(),
    }
}

struct WeftCoder {
    code: Arc<dyn Code>,
    op: Op,
    lost: Vec<usize>,
}

impl Coder for WeftCoder {
    fn run(&self, stripe: &mut Stripe) {
        let k = self.code.data_units();
        let mut outs: Vec<&mut [u8]> = stripe.out.iter_mut().map(|o| o.as_mut_slice()).collect();
        match self.op {
            Op::Encode => {
                let data: Vec<&[u8]> = stripe.units[..k].iter().map(|u| u.as_slice()).collect();
                self.code.encode(&data, &mut outs).expect("encode");
            }
            Op::Rebuild | Op::Decode => {
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
        let lost = lost_units(op, k, r);
        let (sources, coefficients) = match op {
            Op::Encode => ((0..k).collect(), generator[k * k..].to_vec()),
            Op::Rebuild | Op::Decode => {
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
        Ok(IsalCoder { isal, variant, tables, sources })
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

fn median(values: &mut [f64]) -> f64 {
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
    let isal = match args.compare {
        Some(Peer::Isal) => {
            if spec.family() != "rs" {
                return Err(cli_error!(
                    "--compare isal needs --code rs: ISA-L implements Reed-Solomon only"
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
        }
        None => None,
    };
    let simd = weft_gf::SimdPath::active().name();
    if !args.json {
        println!(
            "weft bench ec: {spec}, shard {} bytes, {} thread(s), SIMD path {simd}{}",
            args.shard,
            args.threads,
            isal.as_ref()
                .map(|i| format!(
                    ", peer ISA-L ({}, {})",
                    i.path(),
                    args.isal_variant.variant().name()
                ))
                .unwrap_or_default()
        );
        println!(
            "rates are data bytes per second (k × shard per op); median of {} trials",
            args.trials
        );
        println!("{:<8} {:<6} {:>12} {:>12} {:>8}", "op", "impl", "GB/s", "best GB/s", "vs isal");
    }
    let data_bytes = (k * args.shard) as f64;
    let implementations = if isal.is_some() { 2 } else { 1 };
    let progress = progress_bar(args.ops.len() * args.trials * implementations, args.json);
    for &op in &args.ops {
        let lost = lost_units(op, k, r);
        let mut stripes: Vec<Stripe> = (0..args.threads)
            .map(|t| Stripe::new(0x5eed + t as u64, k + r, args.shard, lost.len()))
            .collect();
        // Parity must be real for rebuild/decode: encode every stripe first.
        for stripe in &mut stripes {
            let (data, parity) = stripe.units.split_at_mut(k);
            let data: Vec<&[u8]> = data.iter().map(|u| u.as_slice()).collect();
            let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|u| u.as_mut_slice()).collect();
            code.encode(&data, &mut parity)?;
        }
        let weft: Arc<dyn Coder> =
            Arc::new(WeftCoder { code: code.clone(), op, lost: lost.clone() });
        let mut coders: Vec<(&'static str, Arc<dyn Coder>)> = vec![("weft", weft)];
        if let Some(isal) = &isal {
            let variant = args.isal_variant.variant();
            coders.push(("isal", Arc::new(IsalCoder::new(isal.clone(), variant, op, k, r)?)));
        }
        // Correctness before speed: every coder must produce the lost units exactly.
        for (name, coder) in &coders {
            for stripe in &mut stripes {
                stripe.out.iter_mut().for_each(|o| o.as_mut_slice().fill(0));
                coder.run(stripe);
                for (o, &l) in stripe.out.iter().zip(&lost) {
                    let (got, want) = (o.as_slice(), stripe.units[l].as_slice());
                    if got != want {
                        let at = got.iter().zip(want).position(|(a, b)| a != b);
                        return Err(cli_error!(
                            "{name} {op:?} output differs from the original unit {l} at byte {at:?}"
                        ));
                    }
                }
            }
        }
        let iterations = calibrate(&coders[0].1, &mut stripes, args.seconds);
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); coders.len()];
        for _ in 0..args.trials {
            for (c, (_, coder)) in coders.iter().enumerate() {
                let elapsed = timed(coder, &mut stripes, iterations).as_secs_f64();
                rates[c].push(data_bytes * (iterations * args.threads) as f64 / elapsed);
                progress.inc(1);
            }
        }
        let medians: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
        let isal_median = coders.iter().position(|(n, _)| *n == "isal").map(|i| medians[i]);
        for (c, (name, _)) in coders.iter().enumerate() {
            let best = rates[c].iter().cloned().fold(0.0, f64::max);
            let row = Row {
                op,
                code: spec.family(),
                k,
                r,
                shard_bytes: args.shard,
                threads: args.threads,
                implementation: name,
                simd: if *name == "weft" { simd } else { args.isal_variant.variant().name() },
                bytes_per_sec: medians[c],
                best_bytes_per_sec: best,
                trials: args.trials,
                ratio_vs_isal: isal_median.filter(|_| *name == "weft").map(|i| medians[c] / i),
            };
            if args.json {
                println!("{}", serde_json::to_string(&row)?);
            } else {
                progress.suspend(|| {
                    println!(
                        "{:<8} {:<6} {:>12.2} {:>12.2} {:>8}",
                        format!("{op:?}").to_lowercase(),
                        name,
                        row.bytes_per_sec / 1e9,
                        best / 1e9,
                        row.ratio_vs_isal.map(|x| format!("{x:.2}×")).unwrap_or_default()
                    )
                });
            }
        }
    }
    progress.finish_and_clear();
    Ok(())
}
