//! `weft bench engine`: the coding engine's rails alone, their sum, and the aggregate the
//! engine achieves with all of them under each scheduler.
//!
//! Invariants:
//! - Rates are data bytes per second (k × shard per task), wall clock over the whole run,
//!   with a window of tasks outstanding; latency is per task, from `iencode` to its last piece.
//! - Parity is compared byte for byte with the scalar oracle's before any figure is printed: a
//!   faster wrong answer is an error, not a result. Every engine first runs an untimed pass
//!   in which every task is checked; in the timed runs one task in [`CHECK_EVERY`] is (a
//!   comparison costs about what an encode does, and the submitting thread shares the cores
//!   with the rails).
//! - Data stripes come from a small pool shared by reference (`Arc`), and parity buffers are
//!   handed back to the engine for the next task, as a pipelined caller does, and kept from
//!   one run to the next (each engine's own): no copy, allocation or first touch of a page
//!   is timed. (Allocating the first window's buffers in each timed run once cost every run
//!   thousands of page faults in the rails, and upset rate-aware's measures.)
//! - Every engine is started, checked and warmed up before the first timed run and lives
//!   through all rounds (its rates keep what they learnt). Rows are measured in rounds, each
//!   round running every row once, starting one row later than the round before; a row's rate
//!   is its median round's. Ratios (÷ sum, ÷ fcfs) are medians of same-round ratios: on a
//!   noisy machine, neighbours in time see the same noise, and rotating the order keeps any
//!   one row from always following another.
//! - A rail that cannot be loaded (ISA-L not installed) is skipped with a line on stderr.
//! - Placement (`--placement`): floating (the default) leaves every thread to the OS; pinned
//!   puts every engine's workers on cores of their own under every scheduler, and the
//!   submitting thread, while a row is timed, on a core the row's workers do not use or else
//!   beside the rail slowest alone. Which rail shares a core with the submitter decides much
//!   of an aggregate when there is just a core per rail (the README's coding-engine
//!   section); pinning makes it the same for every scheduler and every run.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rand::{rngs::StdRng, RngCore, SeedableRng};
use serde::Serialize;
use weft_codes::{Code, CodeSpec};
use weft_engine::{
    affinity, EncodeTask, Engine, EngineConfig, IsalRail, Rail, RailConfig, ScalarRail, Scheduler,
    SimdRail,
};

use crate::bench::median;
use crate::{cli_error, parse_size, CliError};

/// Stripes in the data pool (each k × shard bytes), reused round-robin.
const POOL_STRIPES: usize = 8;
const MAX_TASKS: usize = 10_000_000;
const MAX_SHARD_BYTES: usize = 1 << 30;
const MAX_WINDOW: usize = 4096;
/// In timed runs, one task in this many has its parity compared with the oracle's.
const CHECK_EVERY: usize = 16;
/// Tasks in each engine's untimed, fully checked pass (at most).
const VERIFY_TASKS: usize = 512;
/// Windows of tasks in each engine's untimed warm-up (whatever --size).
const WARM_UP_WINDOWS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Placement {
    Pinned,
    Floating,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchOp {
    /// Parity of k data units.
    Encode,
    /// Rebuild the first --lost data units from the others.
    Decode,
}

#[derive(Debug, Args)]
pub struct EngineBenchArgs {
    #[command(flatten)]
    code: crate::CodeArgs,
    /// What each task does.
    #[arg(long, value_enum, default_value = "encode")]
    op: BenchOp,
    /// Data units lost per decode task (default: r).
    #[arg(long)]
    lost: Option<usize>,
    /// Rails to run (comma separated): simd, isal, scalar.
    #[arg(long, value_delimiter = ',', default_value = "simd,isal")]
    rails: Vec<String>,
    /// Schedulers for the aggregate (comma separated): rate-aware, fcfs.
    #[arg(long, value_delimiter = ',', default_value = "rate-aware")]
    scheduler: Vec<String>,
    /// Bytes per shard (unit) of each task.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    shard: usize,
    /// Data bytes encoded per measurement.
    #[arg(long, default_value = "4GiB", value_parser = parse_size)]
    size: usize,
    /// Piece length: tasks are split into pieces of this many bytes of every unit (smaller
    /// pieces split a task across rails; each piece costs a queue operation).
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    chunk: usize,
    /// Worker threads per rail.
    #[arg(long, default_value_t = 1)]
    threads_per_rail: usize,
    /// Tasks outstanding at most (refilled a quarter at a time; a small window leaves rails
    /// idle while the submitting thread sleeps: 32 keeps two rails fed on two cores).
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Rounds: each runs every row once (in rotated order); medians over rounds are reported.
    #[arg(long, default_value_t = 11)]
    rounds: usize,
    /// Where threads run. `floating`: the OS places every thread (which rail shares a core
    /// with the submitting thread then varies from run to run). `pinned`: every engine's
    /// workers on cores of their own (UMR-EC's thread groups) under every scheduler alike,
    /// and the submitting thread, while a row is timed, on a core no worker of the row uses
    /// or, when none is left, beside the rail that was slowest alone (by its measured rate),
    /// so every scheduler and run gets the same placement. Needs a CPU per worker; with
    /// fewer, threads float.
    #[arg(long, value_enum, default_value = "floating")]
    placement: Placement,
    /// Print the rows as one JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Print the rows as one JSON object per line.
    #[arg(long, conflicts_with = "json")]
    json_lines: bool,
    /// Also draw the rates as a bar chart (SVG): one bar per rail, sum and scheduler.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
}

#[derive(Debug, Serialize)]
struct Row {
    op: &'static str,
    rail: String,
    scheduler: String,
    bytes_per_sec: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    code: String,
    shard_bytes: usize,
    chunk_bytes: usize,
    threads_per_rail: usize,
    tasks: usize,
    /// Per rail in the timed run: its share of the bytes, pieces stolen, sleeps.
    rails: Vec<RailShare>,
    /// Aggregate rows: the median over rounds of this row's rate ÷ the rails' sum in the
    /// same round.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_sum: Option<f64>,
    /// Aggregate rows other than fcfs's: the median over rounds of this row's rate ÷ fcfs's
    /// in the same round, and in how many rounds it was at least fcfs's.
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_fcfs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ahead_of_fcfs_rounds: Option<usize>,
    /// The core the submitting thread was pinned to while this row was timed (sum row and
    /// floating placement: none).
    submitter_core: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
struct RailShare {
    rail: String,
    share: f64,
    stolen: u64,
    sleeps: u64,
    /// Its workers' time on pieces ÷ (the run's wall clock × its threads).
    busy: f64,
    /// The cores its workers are pinned to; empty when they float.
    cores: Vec<usize>,
}

/// One timed run: rate, each task's latency, and what each rail did.
type Sample = (f64, Vec<Duration>, Vec<RailShare>);

struct Stripe {
    data: Vec<weft_engine::Bytes>,
    parity: Vec<Vec<u8>>,
    /// Data then parity, for decode tasks.
    units: Vec<weft_engine::Bytes>,
}

fn make_rail(name: &str) -> Result<Option<Arc<dyn Rail>>, CliError> {
    Ok(match name {
        "simd" => Some(Arc::new(SimdRail::default())),
        "scalar" => Some(Arc::new(ScalarRail::default())),
        "isal" => match IsalRail::load() {
            Ok(rail) => Some(Arc::new(rail)),
            Err(error) => {
                eprintln!("skipping rail isal: {error}");
                None
            }
        },
        other => return Err(cli_error!("{other:?} is not a rail; use simd, isal or scalar")),
    })
}

pub fn run(args: EngineBenchArgs) -> Result<(), CliError> {
    let spec = args.code.spec()?;
    let code = spec.build()?;
    if args.shard == 0 || args.shard > MAX_SHARD_BYTES {
        return Err(cli_error!("--shard must be 1 byte to 1GiB"));
    }
    code.check_unit_len(args.shard)?;
    if args.window == 0 || args.window > MAX_WINDOW {
        return Err(cli_error!("--window must be 1 to {MAX_WINDOW}"));
    }
    let schedulers =
        args.scheduler.iter().map(|s| Scheduler::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let task_bytes = code.data_units() * args.shard;
    let tasks = args.size.div_ceil(task_bytes).max(1);
    if tasks > MAX_TASKS {
        return Err(cli_error!("--size / (k × --shard) is over {MAX_TASKS} tasks"));
    }
    let mut rails = Vec::new();
    for name in &args.rails {
        if let Some(rail) = make_rail(name)? {
            if rail.accepts(&*code) {
                rails.push(rail);
            } else {
                eprintln!("skipping rail {name}: it declines {spec}");
            }
        }
    }
    if rails.is_empty() {
        return Err(cli_error!("no rail could be started"));
    }
    let lost = args.lost.unwrap_or(code.parity_units());
    if args.op == BenchOp::Decode {
        let pattern: Vec<usize> = (0..lost).collect();
        if lost == 0 || lost > code.data_units() || !code.is_decodable(&pattern) {
            return Err(cli_error!(
                "{spec} cannot rebuild its first {lost} data units; use --lost 1 to {}",
                code.parity_units().min(code.data_units())
            ));
        }
    }
    if args.rounds == 0 || args.rounds > 100 {
        return Err(cli_error!("--rounds must be 1 to 100"));
    }
    let pool = stripes(&*code, args.shard);
    let rail_config =
        |rail: &Arc<dyn Rail>| RailConfig { rail: rail.clone(), threads: args.threads_per_rail };

    // (rail label, scheduler label, configuration) of every measured row, in print order.
    let mut setups: Vec<(String, String, EngineConfig)> = rails
        .iter()
        .map(|rail| {
            let config = EngineConfig {
                rails: vec![rail_config(rail)],
                scheduler: Scheduler::Fcfs,
                codes: vec![spec],
            };
            (rail.name().to_string(), "none".to_string(), config)
        })
        .collect();
    if rails.len() > 1 {
        for scheduler in &schedulers {
            let config = EngineConfig {
                rails: rails.iter().map(rail_config).collect(),
                scheduler: *scheduler,
                codes: vec![spec],
            };
            setups.push(("aggregate".into(), scheduler.name().into(), config));
        }
    }
    // Every engine is started, checked and warmed up before any timing; then each round runs
    // every row once, starting one row later each round, so slow drift of the machine falls
    // on all rows alike.
    let cpus = affinity::allowed_cpus();
    let mut engines = Vec::with_capacity(setups.len());
    let mut warm_rates = Vec::with_capacity(setups.len());
    let mut buffers = Vec::with_capacity(setups.len());
    for (_, _, config) in &setups {
        let (engine, rate, free) = prepare(config.clone(), spec, &pool, tasks, &args)?;
        engines.push(engine);
        warm_rates.push(rate);
        buffers.push(free);
    }
    // Each rail's rate alone, to rank them: the slowest shares its core with the submitter.
    // The engine's own measure (coding time per piece) is not moved by wake-ups and
    // preemption between pieces the way a wall clock over small tasks is; the warm-up's wall
    // clock stands in, for every rail alike, when a rail has no measure.
    let measured: Option<Vec<f64>> = engines
        .iter()
        .take(rails.len())
        .map(|engine| engine.rates(spec, args.chunk).first().and_then(|(_, rate)| *rate))
        .collect();
    let rates = measured.unwrap_or_else(|| warm_rates[..rails.len()].to_vec());
    let alone: Vec<(String, f64)> =
        setups.iter().zip(rates).map(|(setup, rate)| (setup.0.clone(), rate)).collect();
    let submitter: Vec<Option<usize>> = engines
        .iter()
        .map(|engine| match args.placement {
            Placement::Pinned => submitter_core(engine.worker_cores(), &cpus, &alone),
            Placement::Floating => None,
        })
        .collect();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); setups.len()];
    for round in 0..args.rounds {
        for step in 0..setups.len() {
            let index = (round + step) % setups.len();
            place_submitter(submitter[index], &cpus);
            let sample = measure(&engines[index], spec, &pool, tasks, &args, &mut buffers[index])?;
            samples[index].push(sample);
        }
    }
    place_submitter(None, &cpus);
    drop(engines);
    // Per round: the rails' sum, and each aggregate's ratio to it and to the other schedulers.
    let single = rails.len().min(setups.len());
    let round_sum = |round: usize| -> f64 { samples[..single].iter().map(|s| s[round].0).sum() };
    let fcfs_index = (single..setups.len()).find(|&i| setups[i].1 == Scheduler::Fcfs.name());
    let mut rows = Vec::new();
    // The sum row adds the rows above it (each rail's median round).
    let mut sum = 0.0;
    for (index, (rail, scheduler, _)) in setups.iter().enumerate() {
        let mut ordered: Vec<&Sample> = samples[index].iter().collect();
        ordered.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (rate, latencies, shares) = ordered[ordered.len() / 2];
        if index < single {
            sum += rate;
        }
        if index == single && single > 1 {
            rows.push(row(&args, spec, "sum", "none", sum, None, tasks));
        }
        let mut measured = row(&args, spec, rail, scheduler, *rate, Some(latencies), tasks);
        measured.rails = shares.clone();
        measured.submitter_core = submitter[index];
        if index >= single {
            let ratios = |other: &dyn Fn(usize) -> f64| -> Vec<f64> {
                (0..args.rounds).map(|round| samples[index][round].0 / other(round)).collect()
            };
            measured.vs_sum = Some(median(&mut ratios(&round_sum)));
            if let Some(fcfs) = fcfs_index.filter(|&f| f != index) {
                let mut per_round = ratios(&|round| samples[fcfs][round].0);
                measured.ahead_of_fcfs_rounds =
                    Some(per_round.iter().filter(|&&r| r >= 1.0).count());
                measured.vs_fcfs = Some(median(&mut per_round));
            }
        }
        rows.push(measured);
    }
    print(&rows, &args, sum);
    if let Some(path) = &args.plot {
        plot(&rows, path)?;
    }
    Ok(())
}

fn stripes(code: &dyn Code, shard: usize) -> Vec<Stripe> {
    let mut rng = StdRng::seed_from_u64(0x5EED);
    let oracle = ScalarRail::default();
    (0..POOL_STRIPES)
        .map(|_| {
            let data: Vec<weft_engine::Bytes> = (0..code.data_units())
                .map(|_| {
                    let mut unit = vec![0u8; shard];
                    rng.fill_bytes(&mut unit);
                    unit.into()
                })
                .collect();
            let mut parity = vec![vec![0u8; shard]; code.parity_units()];
            let data_refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            oracle.encode(code, &data_refs, &mut refs).expect("the oracle encodes its own code");
            let units =
                data.iter().cloned().chain(parity.iter().cloned().map(Into::into)).collect();
            Stripe { data, parity, units }
        })
        .collect()
}

/// Output buffers of one engine's tasks, handed back to it task after task and run after
/// run: allocated (and faulted in) in its untimed passes only.
type Buffers = Vec<Vec<Vec<u8>>>;

/// Starts an engine (pinned or not, per `--placement`), checks it on an untimed pass (every
/// task compared with the oracle) and runs a warm-up that lets its rates settle; returns it
/// with its warm-up rate (data bytes per second) and its output buffers.
fn prepare(
    config: EngineConfig,
    spec: CodeSpec,
    pool: &[Stripe],
    tasks: usize,
    args: &EngineBenchArgs,
) -> Result<(Engine, f64, Buffers), CliError> {
    let engine = match args.placement {
        Placement::Pinned => Engine::new_pinned(config)?,
        Placement::Floating => Engine::new(config)?,
    };
    if let Some((rail, code)) = engine.excluded().first() {
        return Err(cli_error!("rail {rail} failed the canary for {code}; its output differs"));
    }
    let mut buffers = Vec::with_capacity(args.window);
    run_tasks(&engine, spec, pool, tasks.min(VERIFY_TASKS), args, 1, &mut buffers)?;
    // Not bounded by --size: the warm-up's rate also ranks the rails for placement, and a
    // few tasks would rank them by noise.
    let warm_up = WARM_UP_WINDOWS * args.window;
    let began = Instant::now();
    run_tasks(&engine, spec, pool, warm_up, args, CHECK_EVERY, &mut buffers)?;
    let rate = (warm_up * pool[0].data.len() * args.shard) as f64
        / began.elapsed().as_secs_f64().max(1e-9);
    Ok((engine, rate, buffers))
}

/// Where the submitting thread goes while an engine with these workers ((rail, core)) is
/// timed under pinned placement: a core of `cpus` no worker uses, else the core of the rail
/// with the lowest rate alone; `None` when the workers float.
fn submitter_core(
    workers: &[(String, Option<usize>)],
    cpus: &[usize],
    alone: &[(String, f64)],
) -> Option<usize> {
    let used: Vec<usize> = workers.iter().map(|(_, core)| *core).collect::<Option<_>>()?;
    if let Some(&free) = cpus.iter().find(|cpu| !used.contains(cpu)) {
        return Some(free);
    }
    let rate = |rail: &str| alone.iter().find(|(name, _)| name == rail).map_or(0.0, |a| a.1);
    workers.iter().min_by(|a, b| rate(&a.0).total_cmp(&rate(&b.0))).and_then(|(_, core)| *core)
}

/// Pins the submitting (this) thread to `core`, or lets it float over `cpus` again.
fn place_submitter(core: Option<usize>, cpus: &[usize]) {
    let placed = match core {
        Some(core) => affinity::pin_current_thread(core),
        None => cpus.is_empty() || affinity::set_current_thread_cpus(cpus),
    };
    if !placed {
        eprintln!("cannot place the submitting thread on {core:?}; it floats");
    }
}

/// One timed run of `tasks` tasks: the data rate, each task's latency and the rails' shares.
fn measure(
    engine: &Engine,
    spec: CodeSpec,
    pool: &[Stripe],
    tasks: usize,
    args: &EngineBenchArgs,
    buffers: &mut Buffers,
) -> Result<Sample, CliError> {
    let before = settled_stats(engine);
    let began = Instant::now();
    let latencies = run_tasks(engine, spec, pool, tasks, args, CHECK_EVERY, buffers)?;
    let elapsed = began.elapsed().as_secs_f64().max(1e-9);
    let bytes = tasks * pool[0].data.len() * args.shard;
    let after = settled_stats(engine);
    let total: u64 = after.iter().zip(&before).map(|(a, b)| a.bytes - b.bytes).sum();
    let shares = after
        .iter()
        .zip(&before)
        .map(|(a, b)| RailShare {
            rail: a.rail.clone(),
            share: (a.bytes - b.bytes) as f64 / total.max(1) as f64,
            stolen: a.stolen - b.stolen,
            sleeps: a.sleeps - b.sleeps,
            busy: (a.busy - b.busy).as_secs_f64() / (elapsed * args.threads_per_rail as f64),
            cores: engine
                .worker_cores()
                .iter()
                .filter(|(rail, _)| *rail == a.rail)
                .filter_map(|(_, core)| *core)
                .collect(),
        })
        .collect();
    Ok((bytes as f64 / elapsed, latencies, shares))
}

/// The rails' stats once every queued piece ran: a worker folds a piece into its stats when
/// it looks for the next one, so the last pieces are let in first.
fn settled_stats(engine: &Engine) -> Vec<weft_engine::RailStats> {
    engine.wait_all();
    std::thread::sleep(Duration::from_millis(5));
    engine.rail_stats()
}

/// A task in flight.
enum InFlight {
    Encode(weft_engine::EcFuture),
    Decode(weft_engine::EcFuture<weft_engine::DecodeOutput>),
}

/// Runs `tasks` tasks with up to a window outstanding, reusing output buffers; every
/// `check_every`-th task's output is compared with the oracle's parity (encode) or the
/// original units (decode).
fn run_tasks(
    engine: &Engine,
    spec: CodeSpec,
    pool: &[Stripe],
    tasks: usize,
    args: &EngineBenchArgs,
    check_every: usize,
    free: &mut Buffers,
) -> Result<Vec<Duration>, CliError> {
    let r = pool[0].parity.len();
    let lost = args.lost.unwrap_or(r);
    let mut latencies = Vec::with_capacity(tasks);
    let mut window = VecDeque::with_capacity(args.window);
    let mut finish =
        |entry: Option<(InFlight, usize)>, free: &mut Buffers| -> Result<(), CliError> {
            let (task, index) = entry.expect("the window is not empty");
            let stripe = &pool[index % pool.len()];
            let check = index % check_every == 0;
            let (outputs, latency, right) = match task {
                InFlight::Encode(future) => {
                    let output = future.wait()?;
                    let right = !check || output.parity == stripe.parity;
                    (output.parity, output.latency, right)
                }
                InFlight::Decode(future) => {
                    let output = future.wait()?;
                    let right = !check
                        || output.units.iter().zip(&stripe.data).all(|(o, d)| o[..] == d[..]);
                    (output.units, output.latency, right)
                }
            };
            if !right {
                return Err(cli_error!("the engine's output differs from the scalar oracle's"));
            }
            latencies.push(latency);
            free.push(outputs);
            Ok(())
        };
    for index in 0..tasks {
        if window.len() == args.window {
            // Refill in batches of a quarter window: the submitting thread sleeps (and is
            // woken) once per batch, not once per task; three quarters stay queued meanwhile.
            for _ in 0..args.window.div_ceil(4) {
                finish(window.pop_front(), free)?;
            }
        }
        let stripe = &pool[index % pool.len()];
        let buffers = free.pop().unwrap_or_default();
        let task = match args.op {
            BenchOp::Encode => InFlight::Encode(
                engine.iencode(
                    EncodeTask::new(spec, stripe.data.clone())
                        .chunk_size(args.chunk)
                        .parity_buffers(buffers),
                ),
            ),
            BenchOp::Decode => {
                let units =
                    stripe.units.iter().enumerate().map(|(i, u)| (i >= lost).then(|| u.clone()));
                let task = weft_engine::DecodeTask::new(spec, units.collect(), (0..lost).collect())
                    .chunk_size(args.chunk)
                    .out_buffers(buffers);
                InFlight::Decode(engine.idecode(task))
            }
        };
        window.push_back((task, index));
    }
    while !window.is_empty() {
        finish(window.pop_front(), free)?;
    }
    Ok(latencies)
}

fn percentile_us(latencies: &[Duration], fraction: f64) -> f64 {
    let mut sorted: Vec<Duration> = latencies.to_vec();
    sorted.sort_unstable();
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1e6
}

fn row(
    args: &EngineBenchArgs,
    spec: CodeSpec,
    rail: &str,
    scheduler: &str,
    bytes_per_sec: f64,
    latencies: Option<&[Duration]>,
    tasks: usize,
) -> Row {
    Row {
        op: match args.op {
            BenchOp::Encode => "encode",
            BenchOp::Decode => "decode",
        },
        rail: rail.to_string(),
        scheduler: scheduler.to_string(),
        bytes_per_sec,
        p50_us: latencies.map(|l| percentile_us(l, 0.50)),
        p99_us: latencies.map(|l| percentile_us(l, 0.99)),
        code: spec.to_string(),
        shard_bytes: args.shard,
        chunk_bytes: args.chunk,
        threads_per_rail: args.threads_per_rail,
        tasks,
        rails: Vec::new(),
        vs_sum: None,
        vs_fcfs: None,
        ahead_of_fcfs_rounds: None,
        submitter_core: None,
    }
}

/// `--plot`: the rows' rates as bars, one per (op, rail, scheduler).
fn plot(rows: &[Row], path: &std::path::Path) -> Result<(), CliError> {
    let values: Vec<serde_json::Value> =
        rows.iter().map(|row| serde_json::to_value(row).expect("rows serialize")).collect();
    let text =
        |row: &serde_json::Value, field: &str| row[field].as_str().unwrap_or("?").to_string();
    let title = rows.first().map_or(String::new(), |r| {
        format!(
            "weft bench engine: {}, shard {}",
            r.code,
            crate::cluster_cli::format_size(r.shard_bytes as u64)
        )
    });
    crate::plot::Chart::bars(
        &title,
        "rail / scheduler",
        "rate (GB/s of data)",
        &values,
        |row| match text(row, "scheduler").as_str() {
            "none" => text(row, "rail"),
            scheduler => format!("{} {scheduler}", text(row, "rail")),
        },
        |row| text(row, "op"),
        |row| row["bytes_per_sec"].as_f64().unwrap_or(f64::NAN) / 1e9,
    )
    .write(path)
}

fn print(rows: &[Row], args: &EngineBenchArgs, sum: f64) {
    if args.json || args.json_lines {
        let mut json_rows = crate::rows::JsonRows::new(args.json_lines);
        for row in rows {
            json_rows.push(row);
        }
        json_rows.finish();
        return;
    }
    if let Some(first) = rows.first() {
        println!(
            "engine {}/{}/{} shard, {} pieces, {} thread(s) per rail, {} tasks; data bytes/s",
            first.op,
            first.code,
            human(args.shard as f64),
            human(args.chunk as f64),
            args.threads_per_rail,
            first.tasks
        );
    }
    println!(
        "{:<10} {:<11} {:>12} {:>10} {:>10} {:>8} {:>8}  share per rail (stolen, sleeps, busy)",
        "rail", "scheduler", "rate", "p50 µs", "p99 µs", "÷ sum", "÷ fcfs"
    );
    for row in rows {
        let latency = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        let shares: Vec<String> = if row.rails.len() > 1 {
            row.rails
                .iter()
                .map(|r| {
                    let cores = if r.cores.is_empty() {
                        String::new()
                    } else {
                        let list: Vec<String> = r.cores.iter().map(|c| c.to_string()).collect();
                        format!(" core {}", list.join(","))
                    };
                    format!(
                        "{} {:.0}% ({}, {}, {:.0}%){cores}",
                        r.rail,
                        r.share * 100.0,
                        r.stolen,
                        r.sleeps,
                        r.busy * 100.0
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        println!(
            "{:<10} {:<11} {:>10}/s {:>10} {:>10} {:>8.3} {:>8}  {}",
            row.rail,
            row.scheduler,
            human(row.bytes_per_sec),
            latency(row.p50_us),
            latency(row.p99_us),
            row.vs_sum.unwrap_or(row.bytes_per_sec / sum.max(1e-9)),
            row.vs_fcfs.map_or("-".to_string(), |v| format!("{v:.3}")),
            shares.join(", ")
        );
    }
    for row in rows {
        if let Some(ahead) = row.ahead_of_fcfs_rounds {
            println!(
                "{} ≥ fcfs in {ahead} of {} rounds; ÷ columns are medians of same-round ratios",
                row.scheduler, args.rounds
            );
        }
    }
    let placed: Vec<String> = rows
        .iter()
        .filter_map(|r| r.submitter_core.map(|c| format!("{} {}: {c}", r.rail, r.scheduler)))
        .collect();
    if placed.is_empty() {
        println!("placement: threads float");
    } else {
        println!("placement: workers pinned; submitter on core ({})", placed.join(", "));
    }
}

fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::submitter_core;

    #[test]
    fn the_submitter_takes_a_free_core_else_the_slowest_rails() {
        let alone = [("simd".to_string(), 40e9), ("isal".to_string(), 20e9)];
        let workers = |cores: [Option<usize>; 2]| -> Vec<(String, Option<usize>)> {
            vec![("simd".into(), cores[0]), ("isal".into(), cores[1])]
        };
        // A core no worker uses.
        assert_eq!(submitter_core(&workers([Some(0), Some(1)]), &[0, 1, 2], &alone), Some(2));
        assert_eq!(submitter_core(&workers([Some(2), Some(0)]), &[0, 1, 2], &alone), Some(1));
        // None left: beside isal, slower alone, wherever it is.
        assert_eq!(submitter_core(&workers([Some(0), Some(1)]), &[0, 1], &alone), Some(1));
        assert_eq!(submitter_core(&workers([Some(1), Some(0)]), &[0, 1], &alone), Some(0));
        let faster_isal = [("simd".to_string(), 10e9), ("isal".to_string(), 20e9)];
        assert_eq!(submitter_core(&workers([Some(0), Some(1)]), &[0, 1], &faster_isal), Some(0));
        // Floating workers: the submitter floats too.
        assert_eq!(submitter_core(&workers([None, None]), &[0, 1, 2], &alone), None);
        assert_eq!(submitter_core(&workers([Some(0), None]), &[0, 1, 2], &alone), None);
    }
}
