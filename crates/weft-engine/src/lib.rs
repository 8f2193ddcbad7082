//! weft's coding engine (UMR-EC): encode and decode tasks asynchronously over several rails
//! at once.
//!
//! Invariants:
//! - A task's output is byte-identical whichever rails computed which pieces: a rail gets a
//!   code's encode (add, decode) pieces only after its canary parity (added parity, rebuilt
//!   units) for that code equalled the oracle's ([`ScalarRail`]); a rail that differs is
//!   excluded for that code and operation, with a log line. Nothing records which rail
//!   computed which bytes. A first add ([`EncodeTask::first_add`]) overwrites its buffers, so
//!   their old contents never reach the output.
//! - Tasks of byte-local codes (rs, lrc, rep) are split into pieces: the same byte range of
//!   every unit, `chunk_size_bytes` long. Other codes (hitchhiker, clay) run as one piece.
//! - Pieces write disjoint byte ranges of the task's output buffers; the buffers are handed to
//!   the caller only after the last piece finished (counted down with acquire-release).
//! - Input buffers are shared (`Bytes`: from a `Vec`, an `Arc` or any owner without a copy),
//!   never copied; output buffers are the caller's
//!   when given (reused, their contents overwritten), else allocated once per task.
//! - Coding threads running at once are bounded per process ([`process_thread_limit`]), across
//!   every engine: a worker holds a permit only while it codes a piece. The bound is taken
//!   when the first engine starts, on the starting thread, before any worker is pinned.
//! - Workers float unless `WEFT_ENGINE_PIN` asks otherwise: `rate-aware` makes each rail
//!   of a rate-aware engine a thread group on cores of its own (UMR-EC 3.4.2), `always` does
//!   so under fcfs too; a pinned worker is on a distinct CPU the starting thread may use, and
//!   only when there is one per worker.
//! - A worker is woken only when a piece it may run was queued for it and it sleeps: the
//!   submitting thread makes no wake-up system call for busy workers.
//! - Dropping the engine finishes every queued piece first, so no future is left pending.

pub mod affinity;
mod future;
mod rail;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use bytes::Bytes;
use weft_codes::{Code, CodeError, CodeSpec};

use future::Completion;
pub use future::EcFuture;
pub use rail::{IsalRail, Rail, ScalarRail, SimdRail};

/// Most worker threads one rail may have.
pub const MAX_THREADS_PER_RAIL: usize = 64;
/// Default piece length (bytes of each unit) when a task does not say.
pub const DEFAULT_CHUNK_SIZE_BYTES: usize = 64 << 10;
/// Bytes per unit in the canary stripe: odd, so SIMD tails are checked too.
const CANARY_LEN_BYTES: usize = 4099;
/// Weight of the newest measurement in a rail's rate (EWMA).
const RATE_WEIGHT: f64 = 0.25;

/// Why the engine could not do what was asked.
#[derive(Debug)]
#[non_exhaustive]
pub enum EngineError {
    /// The code rejected its input or parameters.
    Code(CodeError),
    /// Unit counts or lengths do not fit the code.
    Shape(String),
    /// A rail was handed a code it does not accept.
    Declined { rail: String, code: String },
    /// No rail both accepts the code and passed its canary.
    NoRail { code: String },
    /// A rail panicked while coding a piece.
    RailPanicked { rail: String },
    /// The engine's configuration is unusable.
    Config(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Code(error) => write!(f, "{error}"),
            EngineError::Shape(what) => write!(f, "bad task shape: {what}"),
            EngineError::Declined { rail, code } => write!(f, "rail {rail} does not accept {code}"),
            EngineError::NoRail { code } => {
                write!(f, "no rail can code {code} (none accepts it or all failed the canary)")
            }
            EngineError::RailPanicked { rail } => write!(f, "rail {rail} panicked"),
            EngineError::Config(what) => write!(f, "bad engine configuration: {what}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// How pieces are given to rails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// Each piece goes to the rail expected to finish it first, given each rail's measured
    /// rate (per code, operation and size class) and the bytes already queued on it: work is
    /// split in proportion to the rates, which are re-measured on every piece. A rail that
    /// runs dry takes a piece queued on the most loaded other rail, when it would finish that
    /// piece before the owner reaches it: the oldest such piece, else the newest.
    RateAware,
    /// One shared queue: whichever rail is free takes the oldest piece it accepts.
    Fcfs,
}

impl Scheduler {
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::RateAware => "rate-aware",
            Scheduler::Fcfs => "fcfs",
        }
    }

    pub fn parse(text: &str) -> Result<Scheduler, EngineError> {
        match text {
            "rate-aware" => Ok(Scheduler::RateAware),
            "fcfs" => Ok(Scheduler::Fcfs),
            other => Err(EngineError::Config(format!(
                "{other:?} is not a scheduler; use rate-aware or fcfs"
            ))),
        }
    }
}

/// One rail and how many worker threads drive it.
#[derive(Debug, Clone)]
pub struct RailConfig {
    pub rail: Arc<dyn Rail>,
    pub threads: usize,
}

/// What an engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub rails: Vec<RailConfig>,
    pub scheduler: Scheduler,
    /// Codes whose canary runs at start; any other code's canary runs on its first task.
    pub codes: Vec<CodeSpec>,
}

impl EngineConfig {
    /// Every rail this machine has, one worker thread each: simd, and isal when installed
    /// (rate-aware); `WEFT_ENGINE_RAILS` (comma separated: simd, isal, scalar) chooses
    /// others. The oracle is not a default rail: it is slow and only a reference.
    pub fn machine_default() -> EngineConfig {
        let wanted = std::env::var("WEFT_ENGINE_RAILS").unwrap_or_else(|_| "simd,isal".into());
        let mut rails = Vec::new();
        for name in wanted.split(',').map(str::trim) {
            let rail: Arc<dyn Rail> = match name {
                "simd" => Arc::new(SimdRail::default()),
                "scalar" => Arc::new(ScalarRail::default()),
                "isal" => match IsalRail::load() {
                    Ok(isal) => Arc::new(isal),
                    // Asked for by name (WEFT_ISAL_VARIANT) but unusable is worth a warning;
                    // a machine without ISA-L is the ordinary case.
                    Err(error @ weft_isal::IsalError::Variant { .. }) => {
                        tracing::warn!(%error, "engine runs without the isal rail");
                        continue;
                    }
                    Err(error) => {
                        tracing::info!(%error, "engine runs without the isal rail");
                        continue;
                    }
                },
                other => {
                    tracing::warn!(
                        rail = other,
                        "WEFT_ENGINE_RAILS names an unknown rail; ignored"
                    );
                    continue;
                }
            };
            rails.push(RailConfig { rail, threads: 1 });
        }
        if rails.is_empty() {
            rails.push(RailConfig { rail: Arc::new(SimdRail::default()), threads: 1 });
        }
        EngineConfig { rails, scheduler: Scheduler::RateAware, codes: Vec::new() }
    }
}

/// k data units of equal length to encode.
#[derive(Debug, Clone)]
pub struct EncodeTask {
    pub code: CodeSpec,
    pub data: Vec<Bytes>,
    /// Piece length in bytes of each unit (rounded down to the code's unit length multiple);
    /// 0 means one piece.
    pub chunk_size_bytes: usize,
    /// Buffers the parity is written into, handed back in [`EncodeOutput::parity`]: reused,
    /// resized to the units' length, their old contents overwritten. Missing ones are
    /// allocated; extra ones dropped. In an add task they are the r accumulators, each of the
    /// units' length, and are added into.
    pub parity: Vec<Vec<u8>>,
    /// An add task (Okapi's partial parity): `data[i]` is data unit `add_at[i]` of the code
    /// (distinct, below k) and the task adds their share of the parity into `parity`.
    pub add_at: Option<Vec<usize>>,
    /// An add task whose accumulators start at zero: their contents are ignored and
    /// overwritten with the share, so they are only written, never read (a partial parity's
    /// first add; the caller needs no zeroed buffers).
    pub first_add: bool,
}

impl EncodeTask {
    /// A task over `data` with the default piece length and fresh parity buffers.
    pub fn new(code: CodeSpec, data: Vec<Bytes>) -> EncodeTask {
        EncodeTask {
            code,
            data,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            parity: Vec::new(),
            add_at: None,
            first_add: false,
        }
    }

    /// An add task: `accumulators[j] += (parity row j of the data units at `positions`)`.
    pub fn add(
        code: CodeSpec,
        positions: Vec<usize>,
        data: Vec<Bytes>,
        accumulators: Vec<Vec<u8>>,
    ) -> EncodeTask {
        EncodeTask {
            code,
            data,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            parity: accumulators,
            add_at: Some(positions),
            first_add: false,
        }
    }

    /// A first add: `buffers[j] = (parity row j of the data units at `positions`)`, whatever
    /// the buffers held; adding the other units later with [`EncodeTask::add`] completes
    /// the parity. Each buffer must have the units' length.
    pub fn first_add(
        code: CodeSpec,
        positions: Vec<usize>,
        data: Vec<Bytes>,
        buffers: Vec<Vec<u8>>,
    ) -> EncodeTask {
        EncodeTask { first_add: true, ..EncodeTask::add(code, positions, data, buffers) }
    }

    /// Sets the piece length (0: one piece).
    pub fn chunk_size(mut self, bytes: usize) -> EncodeTask {
        self.chunk_size_bytes = bytes;
        self
    }

    /// Writes the parity into these buffers instead of allocating.
    pub fn parity_buffers(mut self, buffers: Vec<Vec<u8>>) -> EncodeTask {
        self.parity = buffers;
        self
    }
}

/// The r parity units of a task.
#[derive(Debug)]
pub struct EncodeOutput {
    pub parity: Vec<Vec<u8>>,
    /// From `iencode` to the last piece's end.
    pub latency: Duration,
}

/// Rebuild some units of a stripe from the others (all of one length).
#[derive(Debug, Clone)]
pub struct DecodeTask {
    pub code: CodeSpec,
    /// n entries: unit i's bytes, or `None` when unit i is lost or was not read.
    pub units: Vec<Option<Bytes>>,
    /// The units to compute (any indices below n, in the order the output lists them).
    pub wanted: Vec<usize>,
    /// As [`EncodeTask::chunk_size_bytes`].
    pub chunk_size_bytes: usize,
    /// As [`EncodeTask::parity`], for the rebuilt units.
    pub out: Vec<Vec<u8>>,
}

impl DecodeTask {
    /// A task rebuilding `wanted` from the `Some` entries of `units`.
    pub fn new(code: CodeSpec, units: Vec<Option<Bytes>>, wanted: Vec<usize>) -> DecodeTask {
        DecodeTask {
            code,
            units,
            wanted,
            chunk_size_bytes: DEFAULT_CHUNK_SIZE_BYTES,
            out: Vec::new(),
        }
    }

    /// Sets the piece length (0: one piece).
    pub fn chunk_size(mut self, bytes: usize) -> DecodeTask {
        self.chunk_size_bytes = bytes;
        self
    }

    /// Writes the rebuilt units into these buffers instead of allocating.
    pub fn out_buffers(mut self, buffers: Vec<Vec<u8>>) -> DecodeTask {
        self.out = buffers;
        self
    }
}

/// The rebuilt units of a decode task, in the order of [`DecodeTask::wanted`].
#[derive(Debug)]
pub struct DecodeOutput {
    pub units: Vec<Vec<u8>>,
    pub wanted: Vec<usize>,
    /// From `idecode` to the last piece's end.
    pub latency: Duration,
}

/// Coding threads that may run at once in this process, across all engines:
/// `WEFT_ENGINE_THREADS` when set, else the number of CPUs the thread that first starts an
/// engine (or asks) may run on.
pub fn process_thread_limit() -> usize {
    permits().limit
}

/// The process-wide permits: an atomic count taken without a lock; the lock and condvar are
/// only used by a worker that found none free, and a release only signals when one waits.
#[derive(Debug)]
struct Permits {
    limit: usize,
    free: AtomicUsize,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    returned: Condvar,
}

fn permits() -> &'static Permits {
    static PERMITS: OnceLock<Permits> = OnceLock::new();
    PERMITS.get_or_init(|| {
        let limit = std::env::var("WEFT_ENGINE_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        Permits {
            limit,
            free: AtomicUsize::new(limit),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            returned: Condvar::new(),
        }
    })
}

struct Permit;

impl Permits {
    fn try_take(&self) -> bool {
        self.free.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |f| f.checked_sub(1)).is_ok()
    }
}

impl Permit {
    fn acquire() -> Permit {
        let permits = permits();
        if permits.try_take() {
            return Permit;
        }
        let mut guard = permits.lock.lock().expect("permits lock");
        permits.waiters.fetch_add(1, Ordering::SeqCst);
        // A release either sees this waiter (and signals under the lock, which this thread
        // holds until it waits) or released before the count rose (and the retry sees it).
        while !permits.try_take() {
            guard = permits.returned.wait(guard).expect("permits lock");
        }
        permits.waiters.fetch_sub(1, Ordering::SeqCst);
        Permit
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let permits = permits();
        permits.free.fetch_add(1, Ordering::SeqCst);
        if permits.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = permits.lock.lock().expect("permits lock");
            permits.returned.notify_one();
        }
    }
}

/// The operations the canary checks separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Encode,
    /// Add some data units' share of the parity into accumulators.
    Add,
    /// Write some data units' share of the parity into accumulators, whatever they held
    /// (the first add of a partial parity). Runs where `Add` passed its canary, which checks
    /// both.
    FirstAdd,
    Decode,
}

/// A code and which rails may run it (accepted and passed the canary), per operation.
#[derive(Debug)]
struct CodeEntry {
    code: Arc<dyn Code>,
    encode: Vec<bool>,
    add: Vec<bool>,
    decode: Vec<bool>,
}

impl CodeEntry {
    fn usable(&self, op: Op) -> &[bool] {
        match op {
            Op::Encode => &self.encode,
            Op::Add | Op::FirstAdd => &self.add,
            Op::Decode => &self.decode,
        }
    }
}

type RateKey = (CodeSpec, Op, u32);

#[derive(Debug)]
struct RailState {
    config: RailConfig,
    /// Signalled when a piece is queued for this rail and one of its workers sleeps.
    wake: Condvar,
}

/// A rail's measured per-thread rates in input bytes per second, per (code, operation, log2
/// of piece length). Kept under the queues' lock, which submitters and workers take anyway.
#[derive(Debug, Default)]
struct Rates(HashMap<RateKey, f64>);

impl Rates {
    fn add_sample(&mut self, key: RateKey, bytes: usize, elapsed: Duration) {
        let sample = bytes as f64 / elapsed.as_secs_f64().max(1e-9);
        self.0
            .entry(key)
            .and_modify(|rate| *rate += RATE_WEIGHT * (sample - *rate))
            .or_insert(sample);
    }
}

/// What one rail did since the engine started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RailStats {
    pub rail: String,
    /// Pieces it ran.
    pub pieces: u64,
    /// Input bytes of those pieces.
    pub bytes: u64,
    /// Pieces it took from another rail's queue (rate-aware).
    pub stolen: u64,
    /// Times one of its workers went to sleep for lack of work.
    pub sleeps: u64,
    /// Time its workers spent on pieces, summed over its threads: from looking for a piece
    /// (or waking to one) to the piece's end.
    pub busy: Duration,
}

/// A piece's measurement, folded into its rail's rates and stats when the worker next takes
/// the lock.
struct Sample {
    key: RateKey,
    /// Input bytes.
    bytes: usize,
    /// Time in the rail's code: what the rate measures (a rail's rate is what it codes per
    /// second while it runs; time preempted between pieces is the OS's to share out, not a
    /// property of the rail).
    coding: Duration,
    /// The piece's whole cycle (see `work_loop`): the rail's busy time.
    cycle: Duration,
}

/// A raw output pointer handed to workers; see `TaskState`.
#[derive(Debug, Clone, Copy)]
struct OutputPointer(*mut u8);

// SAFETY: the pointer is only dereferenced for a piece's byte range, which no other piece
// touches, while the buffer it points into is kept alive by the task (see TaskState).
unsafe impl Send for OutputPointer {}
// SAFETY: as above.
unsafe impl Sync for OutputPointer {}

/// Where a finished task's result goes.
#[derive(Debug)]
enum Sink {
    Encode(Arc<Completion<EncodeOutput>>),
    Decode(Arc<Completion<DecodeOutput>>),
}

impl Sink {
    fn fail(&self, error: EngineError) {
        match self {
            Sink::Encode(c) => c.resolve(Err(error)),
            Sink::Decode(c) => c.resolve(Err(error)),
        }
    }
}

#[derive(Debug)]
struct TaskState {
    entry: Arc<CodeEntry>,
    op: Op,
    /// Encode: the k data units. Add: the data units at `wanted`. Decode: n entries, `None`
    /// for units not present.
    inputs: Vec<Option<Bytes>>,
    /// Decode: the units computed, in output order. Add: the inputs' positions. Encode: empty.
    wanted: Vec<usize>,
    /// Owns the output buffers until the last piece hands them out; `pointers` point into
    /// them (a Vec's heap buffer does not move when the Vec does).
    outputs: Mutex<Option<Vec<Vec<u8>>>>,
    pointers: Vec<OutputPointer>,
    remaining: AtomicUsize,
    error: Mutex<Option<EngineError>>,
    sink: Sink,
    submitted: Instant,
}

impl TaskState {
    fn usable(&self, rail: usize) -> bool {
        self.entry.usable(self.op)[rail]
    }
}

#[derive(Debug)]
struct Piece {
    task: Arc<TaskState>,
    start: usize,
    len: usize,
}

impl Piece {
    /// Input bytes the piece reads (k units' worth, an add's inputs): the measure of work
    /// and of rates.
    fn bytes(&self) -> usize {
        match self.task.op {
            Op::Add | Op::FirstAdd => self.len * self.task.inputs.len(),
            Op::Encode | Op::Decode => self.len * self.task.entry.code.data_units(),
        }
    }
}

#[derive(Debug, Default)]
struct Queues {
    /// One queue per rail under rate-aware; a single shared queue under fcfs.
    queues: Vec<VecDeque<Piece>>,
    /// Bytes queued or running per rail (rate-aware's backlog): a piece counts from being
    /// queued (or stolen) until its worker looks for the next one.
    backlog_bytes: Vec<usize>,
    /// Workers of each rail waiting for a piece.
    sleeping: Vec<usize>,
    rates: Vec<Rates>,
    /// What each rail did so far.
    stats: Vec<RailStats>,
    shutdown: bool,
}

#[derive(Debug)]
struct Shared {
    rails: Vec<RailState>,
    scheduler: Scheduler,
    queues: Mutex<Queues>,
    outstanding: Mutex<usize>,
    idle: Condvar,
    codes: Mutex<HashMap<CodeSpec, Arc<CodeEntry>>>,
    excluded: Mutex<Vec<(String, CodeSpec)>>,
    oracle: ScalarRail,
}

/// Encodes and decodes tasks on several rails at once. See the crate docs for its invariants.
#[derive(Debug)]
pub struct Engine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Each worker's rail and the core it was pinned to (`None`: it floats).
    worker_cores: Vec<(String, Option<usize>)>,
}

/// When rails' workers get cores of their own (`WEFT_ENGINE_PIN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PinPolicy {
    /// `never` (the default): workers float. On a 2-core machine shared with the submitting
    /// thread, pinning measured no better (README, coding engine).
    Never,
    /// `rate-aware`: under the rate-aware scheduler each rail is a thread group on cores of
    /// its own (UMR-EC 3.4.2), when there is a core for every worker.
    RateAware,
    /// `always`: under either scheduler (to compare the schedulers on equal terms).
    Always,
}

impl PinPolicy {
    fn from_env() -> PinPolicy {
        match std::env::var("WEFT_ENGINE_PIN").as_deref() {
            Ok("always") => PinPolicy::Always,
            Ok("rate-aware") => PinPolicy::RateAware,
            Ok("never") | Err(_) => PinPolicy::Never,
            Ok(other) => {
                tracing::warn!(
                    value = other,
                    "WEFT_ENGINE_PIN is never, rate-aware or always; using never"
                );
                PinPolicy::Never
            }
        }
    }
}

impl Engine {
    /// Starts the rails' workers and runs the canary of every code in `config.codes`.
    /// Workers are pinned as `WEFT_ENGINE_PIN` says (by default they float).
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        Engine::start(config, PinPolicy::from_env())
    }

    /// [`Engine::new`] with every rail's workers on cores of their own whatever the
    /// scheduler and `WEFT_ENGINE_PIN` (when there is a CPU per worker; else they float):
    /// for comparing schedulers with the same placement.
    pub fn new_pinned(config: EngineConfig) -> Result<Engine, EngineError> {
        Engine::start(config, PinPolicy::Always)
    }

    fn start(config: EngineConfig, pin: PinPolicy) -> Result<Engine, EngineError> {
        if config.rails.is_empty() {
            return Err(EngineError::Config("no rails".into()));
        }
        for rail in &config.rails {
            if rail.threads == 0 || rail.threads > MAX_THREADS_PER_RAIL {
                return Err(EngineError::Config(format!(
                    "rail {} has {} threads; use 1 to {MAX_THREADS_PER_RAIL}",
                    rail.rail.name(),
                    rail.threads
                )));
            }
        }
        // The process-wide bound counts the CPUs this thread may use: take it before any
        // worker pins itself to one.
        permits();
        let queue_count = match config.scheduler {
            Scheduler::RateAware => config.rails.len(),
            Scheduler::Fcfs => 1,
        };
        let worker_count: usize = config.rails.iter().map(|r| r.threads).sum();
        let cores = match (config.scheduler, pin) {
            (Scheduler::RateAware, PinPolicy::RateAware) | (_, PinPolicy::Always) => {
                affinity::cores_for(worker_count)
            }
            _ => None,
        };
        let shared = Arc::new(Shared {
            rails: config
                .rails
                .iter()
                .map(|c| RailState { config: c.clone(), wake: Condvar::new() })
                .collect(),
            scheduler: config.scheduler,
            queues: Mutex::new(Queues {
                queues: (0..queue_count).map(|_| VecDeque::new()).collect(),
                backlog_bytes: vec![0; config.rails.len()],
                sleeping: vec![0; config.rails.len()],
                rates: config.rails.iter().map(|_| Rates::default()).collect(),
                stats: config
                    .rails
                    .iter()
                    .map(|c| RailStats { rail: c.rail.name().to_string(), ..RailStats::default() })
                    .collect(),
                shutdown: false,
            }),
            outstanding: Mutex::new(0),
            idle: Condvar::new(),
            codes: Mutex::new(HashMap::new()),
            excluded: Mutex::new(Vec::new()),
            oracle: ScalarRail::default(),
        });
        for code in &config.codes {
            shared.entry(*code)?;
        }
        let mut workers = Vec::new();
        let mut worker_cores = Vec::new();
        for (index, rail) in config.rails.iter().enumerate() {
            for thread in 0..rail.threads {
                let shared = shared.clone();
                let core = cores.as_ref().map(|cores| cores[workers.len()]);
                let name = format!("weft-engine-{}-{thread}", rail.rail.name());
                let handle = std::thread::Builder::new()
                    .name(name.clone())
                    .spawn(move || {
                        if let Some(core) = core {
                            if !affinity::pin_current_thread(core) {
                                tracing::debug!(worker = name, core, "cannot pin the worker");
                            }
                        }
                        shared.work_loop(index)
                    })
                    .map_err(|e| EngineError::Config(format!("cannot start a worker: {e}")))?;
                workers.push(handle);
                worker_cores.push((rail.rail.name().to_string(), core));
            }
        }
        Ok(Engine { shared, workers, worker_cores })
    }

    /// Queues an encode task; the future resolves once all its parity is computed.
    pub fn iencode(&self, task: EncodeTask) -> EcFuture<EncodeOutput> {
        let completion = Arc::new(Completion::default());
        let future = EcFuture::new(completion.clone());
        let sink = Sink::Encode(completion);
        let inputs = task.data.into_iter().map(Some).collect();
        let (op, positions) = match (task.add_at, task.first_add) {
            (Some(positions), false) => (Op::Add, positions),
            (Some(positions), true) => (Op::FirstAdd, positions),
            (None, _) => (Op::Encode, Vec::new()),
        };
        self.shared.submit(
            op,
            task.code,
            inputs,
            positions,
            task.chunk_size_bytes,
            task.parity,
            sink,
        );
        future
    }

    /// [`Engine::iencode`] and wait.
    pub fn encode(&self, task: EncodeTask) -> Result<EncodeOutput, EngineError> {
        self.iencode(task).wait()
    }

    /// Queues a decode task; the future resolves once every wanted unit is rebuilt.
    pub fn idecode(&self, task: DecodeTask) -> EcFuture<DecodeOutput> {
        let completion = Arc::new(Completion::default());
        let future = EcFuture::new(completion.clone());
        let sink = Sink::Decode(completion);
        self.shared.submit(
            Op::Decode,
            task.code,
            task.units,
            task.wanted,
            task.chunk_size_bytes,
            task.out,
            sink,
        );
        future
    }

    /// [`Engine::idecode`] and wait.
    pub fn decode(&self, task: DecodeTask) -> Result<DecodeOutput, EngineError> {
        self.idecode(task).wait()
    }

    /// Blocks until every task queued so far has finished.
    pub fn wait_all(&self) {
        let mut outstanding = self.shared.outstanding.lock().expect("outstanding lock");
        while *outstanding > 0 {
            outstanding = self.shared.idle.wait(outstanding).expect("outstanding lock");
        }
    }

    /// True when no task is pending. Does not block on coding.
    pub fn test_all(&self) -> bool {
        *self.shared.outstanding.lock().expect("outstanding lock") == 0
    }

    /// (rail, code) pairs whose canary (encode or decode) differed from the oracle.
    pub fn excluded(&self) -> Vec<(String, CodeSpec)> {
        self.shared.excluded.lock().expect("excluded lock").clone()
    }

    /// Whether rail `name` may encode `code` (runs the code's canary if not yet done).
    pub fn rail_usable(&self, name: &str, code: CodeSpec) -> Result<bool, EngineError> {
        self.usable(name, code, Op::Encode)
    }

    /// Whether rail `name` may run add tasks of `code` (runs the code's canary if not yet done).
    pub fn rail_usable_for_add(&self, name: &str, code: CodeSpec) -> Result<bool, EngineError> {
        self.usable(name, code, Op::Add)
    }

    /// Whether rail `name` may decode `code` (runs the code's canary if not yet done).
    pub fn rail_usable_for_decode(&self, name: &str, code: CodeSpec) -> Result<bool, EngineError> {
        self.usable(name, code, Op::Decode)
    }

    fn usable(&self, name: &str, code: CodeSpec, op: Op) -> Result<bool, EngineError> {
        let entry = self.shared.entry(code)?;
        Ok(self
            .shared
            .rails
            .iter()
            .zip(entry.usable(op))
            .any(|(r, &u)| u && r.config.rail.name() == name))
    }

    /// What each rail did so far (a piece counts once its worker looks for the next one).
    pub fn rail_stats(&self) -> Vec<RailStats> {
        self.shared.queues.lock().expect("queues lock").stats.clone()
    }

    /// Each worker's rail and the core it is pinned to (`None`: it floats), in start order.
    pub fn worker_cores(&self) -> &[(String, Option<usize>)] {
        &self.worker_cores
    }

    /// The rails' names, in configuration order.
    pub fn rail_names(&self) -> Vec<String> {
        self.shared.rails.iter().map(|r| r.config.rail.name().to_string()).collect()
    }

    /// Each rail's measured encode rate (data bytes per second, all its threads) for `code`
    /// at pieces of `chunk_size_bytes`; `None` before its first piece of that class.
    pub fn rates(&self, code: CodeSpec, chunk_size_bytes: usize) -> Vec<(String, Option<f64>)> {
        let key = (code, Op::Encode, size_class(chunk_size_bytes));
        let queues = self.shared.queues.lock().expect("queues lock");
        (0..self.shared.rails.len())
            .map(|i| {
                (
                    self.shared.rails[i].config.rail.name().to_string(),
                    self.shared.rate(&queues, i, key),
                )
            })
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.queues.lock().expect("queues lock").shutdown = true;
        for rail in &self.shared.rails {
            rail.wake.notify_all();
        }
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

fn size_class(len: usize) -> u32 {
    len.max(1).ilog2()
}

/// `buffers` made into `count` buffers of `len` bytes, reusing what was given.
fn output_buffers(mut buffers: Vec<Vec<u8>>, count: usize, len: usize) -> Vec<Vec<u8>> {
    buffers.truncate(count);
    for buffer in &mut buffers {
        buffer.resize(len, 0);
    }
    buffers.resize_with(count, || vec![0u8; len]);
    buffers
}

/// A canary stripe: data and the oracle's parity, `len` bytes per unit.
struct Canary {
    units: Vec<Vec<u8>>,
}

impl Shared {
    /// The code's entry, running its canaries through every rail the first time.
    fn entry(&self, spec: CodeSpec) -> Result<Arc<CodeEntry>, EngineError> {
        let mut codes = self.codes.lock().expect("codes lock");
        if let Some(entry) = codes.get(&spec) {
            return Ok(entry.clone());
        }
        let code = spec.build().map_err(EngineError::Code)?;
        let entry = Arc::new(self.canary(code));
        codes.insert(spec, entry.clone());
        Ok(entry)
    }

    /// Encodes a pseudo-random stripe with the oracle; `None` if the oracle cannot.
    fn canary_stripe(&self, code: &dyn Code) -> Option<Canary> {
        let multiple = code.unit_len_multiple();
        let len = CANARY_LEN_BYTES.div_ceil(multiple) * multiple;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut units: Vec<Vec<u8>> = (0..code.data_units())
            .map(|_| {
                (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state >> 24) as u8
                    })
                    .collect()
            })
            .collect();
        let parity = encode_with(&self.oracle, code, &units, len)?;
        units.extend(parity);
        Some(Canary { units })
    }

    /// Which rails may encode, add and decode `code`.
    fn canary(&self, built: Arc<dyn Code>) -> CodeEntry {
        let code = &*built;
        let none = vec![false; self.rails.len()];
        let Some(canary) = self.canary_stripe(code) else {
            tracing::warn!(code = %code.spec(), "the scalar oracle cannot encode this code; no rail will run it");
            return CodeEntry {
                code: built.clone(),
                encode: none.clone(),
                add: none.clone(),
                decode: none,
            };
        };
        let k = code.data_units();
        let len = canary.units[0].len();
        // Erasure patterns: one data unit, and as many leading units as there are parity
        // units when the code can lose them; rebuilt units must equal the originals.
        let mut patterns = vec![vec![0]];
        let leading: Vec<usize> = (0..code.parity_units().min(k)).collect();
        if leading.len() > 1 && code.is_decodable(&leading) {
            patterns.push(leading);
        }
        // Adds: the last and the first data unit, in that order, into the canary's parity.
        let positions: Vec<usize> = if k > 1 { vec![k - 1, 0] } else { vec![0] };
        let added = add_with(&self.oracle, code, &canary, &positions, false);
        let first_added = add_with(&self.oracle, code, &canary, &positions, true);
        let mut entry = CodeEntry {
            code: built.clone(),
            encode: Vec::new(),
            add: Vec::new(),
            decode: Vec::new(),
        };
        for state in &self.rails {
            let rail = &*state.config.rail;
            if !rail.accepts(code) {
                tracing::info!(rail = rail.name(), code = %code.spec(), "rail declines this code");
                entry.encode.push(false);
                entry.add.push(false);
                entry.decode.push(false);
                continue;
            }
            let encodes = encode_with(rail, code, &canary.units[..k], len).as_deref()
                == Some(&canary.units[k..]);
            let adds = added.is_some()
                && first_added.is_some()
                && add_with(rail, code, &canary, &positions, false) == added
                && add_with(rail, code, &canary, &positions, true) == first_added;
            let decodes = patterns.iter().all(|lost| decodes_back(rail, code, &canary, lost));
            for (ok, what) in [(encodes, "encode"), (adds, "add"), (decodes, "decode")] {
                if !ok {
                    tracing::warn!(
                        rail = rail.name(),
                        code = %code.spec(),
                        "rail excluded from {what}: its canary differs from the scalar oracle"
                    );
                }
            }
            if !(encodes && adds && decodes) {
                self.excluded
                    .lock()
                    .expect("excluded lock")
                    .push((rail.name().to_string(), code.spec()));
            }
            entry.encode.push(encodes);
            entry.add.push(adds);
            entry.decode.push(decodes);
        }
        entry
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        op: Op,
        spec: CodeSpec,
        inputs: Vec<Option<Bytes>>,
        wanted: Vec<usize>,
        chunk_size_bytes: usize,
        outputs: Vec<Vec<u8>>,
        sink: Sink,
    ) {
        let submitted = Instant::now();
        let entry = match self.entry(spec).and_then(|entry| {
            check_task(&entry, op, spec, &inputs, &wanted, &outputs)?;
            Ok(entry)
        }) {
            Ok(entry) => entry,
            Err(error) => return sink.fail(error),
        };
        let code = &*entry.code;
        let len = inputs.iter().flatten().next().map_or(0, |unit| unit.len());
        let multiple = code.unit_len_multiple();
        let piece_len = if code.byte_local() && chunk_size_bytes > 0 {
            (chunk_size_bytes / multiple).max(1) * multiple
        } else {
            len.max(1)
        };
        let count = match op {
            Op::Encode | Op::Add | Op::FirstAdd => code.parity_units(),
            Op::Decode => wanted.len(),
        };
        let mut outputs = output_buffers(outputs, count, len);
        if len == 0 || count == 0 {
            let latency = submitted.elapsed();
            match sink {
                Sink::Encode(c) => c.resolve(Ok(EncodeOutput { parity: outputs, latency })),
                Sink::Decode(c) => c.resolve(Ok(DecodeOutput { units: outputs, wanted, latency })),
            }
            return;
        }
        let pointers = outputs.iter_mut().map(|p| OutputPointer(p.as_mut_ptr())).collect();
        let piece_count = len.div_ceil(piece_len);
        let task = Arc::new(TaskState {
            entry: entry.clone(),
            op,
            inputs,
            wanted,
            outputs: Mutex::new(Some(outputs)),
            pointers,
            remaining: AtomicUsize::new(piece_count),
            error: Mutex::new(None),
            sink,
            submitted,
        });
        *self.outstanding.lock().expect("outstanding lock") += 1;
        let key = (spec, op, size_class(piece_len));
        let usable = entry.usable(op);
        let mut wakes = vec![0usize; self.rails.len()];
        {
            let mut queues = self.queues.lock().expect("queues lock");
            let rates: Vec<Option<f64>> = match self.scheduler {
                Scheduler::RateAware => {
                    (0..self.rails.len()).map(|i| self.rate(&queues, i, key)).collect()
                }
                Scheduler::Fcfs => Vec::new(),
            };
            for index in 0..piece_count {
                let start = index * piece_len;
                let piece = Piece { task: task.clone(), start, len: piece_len.min(len - start) };
                match self.scheduler {
                    Scheduler::Fcfs => queues.queues[0].push_back(piece),
                    Scheduler::RateAware => {
                        let rail = pick_rail(&queues.backlog_bytes, usable, &rates, piece.bytes());
                        queues.backlog_bytes[rail] += piece.bytes();
                        queues.queues[rail].push_back(piece);
                        wakes[rail] += 1;
                    }
                }
            }
            if self.scheduler == Scheduler::Fcfs {
                let mut left = piece_count;
                for rail in (0..self.rails.len()).filter(|&r| usable[r]) {
                    let n = left.min(queues.sleeping[rail]);
                    wakes[rail] = n;
                    left -= n;
                }
            }
            for (rail, wake) in wakes.iter_mut().enumerate() {
                *wake = (*wake).min(queues.sleeping[rail]);
            }
        }
        for (rail, &wake) in wakes.iter().enumerate() {
            for _ in 0..wake {
                self.rails[rail].wake.notify_one();
            }
        }
    }

    /// Rail `rail`'s rate (all its threads) for `key`; `None` before its first such piece.
    fn rate(&self, queues: &Queues, rail: usize, key: RateKey) -> Option<f64> {
        let threads = self.rails[rail].config.threads as f64;
        queues.rates[rail].0.get(&key).map(|per_thread| per_thread * threads)
    }

    fn work_loop(&self, rail_index: usize) {
        let mut sample: Option<Sample> = None;
        loop {
            // A piece's cycle: from looking for it (or waking to it) to its end; the rail's
            // busy time.
            let mut cycle = Instant::now();
            let piece = {
                let mut queues = self.queues.lock().expect("queues lock");
                if let Some(Sample { key, bytes, coding, cycle }) = sample.take() {
                    queues.rates[rail_index].add_sample(key, bytes, coding);
                    if self.scheduler == Scheduler::RateAware {
                        queues.backlog_bytes[rail_index] -= bytes;
                    }
                    let stats = &mut queues.stats[rail_index];
                    stats.pieces += 1;
                    stats.bytes += bytes as u64;
                    stats.busy += cycle;
                }
                loop {
                    if let Some(piece) = self.take(&mut queues, rail_index) {
                        break piece;
                    }
                    if queues.shutdown {
                        return;
                    }
                    queues.sleeping[rail_index] += 1;
                    queues.stats[rail_index].sleeps += 1;
                    queues = self.rails[rail_index].wake.wait(queues).expect("queues lock");
                    queues.sleeping[rail_index] -= 1;
                    cycle = Instant::now();
                }
            };
            let (key, bytes, coding) = self.run_piece(rail_index, piece);
            sample = Some(Sample { key, bytes, coding, cycle: cycle.elapsed() });
        }
    }

    /// The next piece for this rail: its own queue's oldest (the shared queue's under fcfs),
    /// else, under rate-aware, one stolen from the most loaded rail.
    fn take(&self, queues: &mut Queues, rail_index: usize) -> Option<Piece> {
        let queue = match self.scheduler {
            Scheduler::RateAware => rail_index,
            Scheduler::Fcfs => 0,
        };
        if let Some(position) = queues.queues[queue].iter().position(|p| p.task.usable(rail_index))
        {
            return Some(queues.queues[queue].remove(position).expect("position is in range"));
        }
        self.steal(queues, rail_index)
    }

    /// Under rate-aware, an idle rail takes a piece queued on the most loaded other rail it
    /// can run, if it would finish that piece before the owner got to it: the oldest such
    /// piece (the one waited on longest, and the one an in-order caller waits for first),
    /// else the newest (the one the owner would reach last). The rates are estimates, and a
    /// rail left idle while another has a backlog wastes its share, but a slow rail taking a
    /// piece a fast one would reach sooner only delays it.
    fn steal(&self, queues: &mut Queues, rail_index: usize) -> Option<Piece> {
        if self.scheduler != Scheduler::RateAware {
            return None;
        }
        let owner = (0..queues.queues.len())
            .filter(|&i| i != rail_index && !queues.queues[i].is_empty())
            .max_by_key(|&i| queues.backlog_bytes[i])?;
        let queue = &queues.queues[owner];
        let oldest = queue.iter().position(|p| p.task.usable(rail_index))?;
        let newest = queue.iter().rposition(|p| p.task.usable(rail_index))?;
        // The owner's backlog is what it runs now and then its queue, in order: what it has
        // to do before reaching a piece is the backlog less that piece and those after it.
        let ahead_of = |position: usize| -> usize {
            let from_it: usize = queue.iter().skip(position).map(Piece::bytes).sum();
            queues.backlog_bytes[owner].saturating_sub(from_it)
        };
        let worth = |position: usize| -> bool {
            let candidate = &queue[position];
            let key =
                (candidate.task.entry.code.spec(), candidate.task.op, size_class(candidate.len));
            match (self.rate(queues, rail_index, key), self.rate(queues, owner, key)) {
                (Some(mine), Some(theirs)) => {
                    candidate.bytes() as f64 / mine <= ahead_of(position) as f64 / theirs
                }
                // A rail not yet measured takes it, and gets a measurement.
                _ => true,
            }
        };
        let position = [oldest, newest].into_iter().find(|&p| worth(p))?;
        let piece = queues.queues[owner].remove(position).expect("position is in range");
        let bytes = piece.bytes();
        queues.backlog_bytes[owner] -= bytes;
        queues.backlog_bytes[rail_index] += bytes;
        queues.stats[rail_index].stolen += 1;
        Some(piece)
    }

    /// Runs one piece; returns its rate key, input bytes and coding time (from holding a
    /// permit to the rail's return), for the rail's rates.
    fn run_piece(&self, rail_index: usize, piece: Piece) -> (RateKey, usize, Duration) {
        let state = &self.rails[rail_index];
        let rail = &*state.config.rail;
        let task = &piece.task;
        let code = &*task.entry.code;
        let (start, len) = (piece.start, piece.len);
        let inputs: Vec<Option<&[u8]>> =
            task.inputs.iter().map(|u| u.as_ref().map(|u| &u[start..start + len])).collect();
        let mut outputs: Vec<&mut [u8]> = task
            .pointers
            .iter()
            // SAFETY: each pointer is the start of an output buffer of the task's unit length,
            // alive until `remaining` reaches 0 (after this piece); this piece's range is in
            // bounds and no other piece writes it.
            .map(|p| unsafe { std::slice::from_raw_parts_mut(p.0.add(start), len) })
            .collect();
        let (result, coding) = {
            let _permit = Permit::acquire();
            let began = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| match task.op {
                Op::Encode => {
                    let data: Vec<&[u8]> =
                        inputs.iter().map(|u| u.expect("encode inputs")).collect();
                    rail.encode(code, &data, &mut outputs)
                }
                Op::Add | Op::FirstAdd => {
                    let data: Vec<&[u8]> = inputs.iter().map(|u| u.expect("add inputs")).collect();
                    if task.op == Op::FirstAdd {
                        rail.encode_first_add(code, &task.wanted, &data, &mut outputs)
                    } else {
                        rail.encode_add(code, &task.wanted, &data, &mut outputs)
                    }
                }
                Op::Decode => rail.reconstruct(code, &inputs, &task.wanted, &mut outputs),
            }));
            (result, began.elapsed())
        };
        drop(outputs);
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error),
            Err(_) => Some(EngineError::RailPanicked { rail: rail.name().to_string() }),
        };
        if let Some(error) = error {
            task.error.lock().expect("task error lock").get_or_insert(error);
        }
        if task.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish(task);
        }
        ((code.spec(), task.op, size_class(len)), piece.bytes(), coding)
    }

    /// Hands a task's outputs (or its first error) to its future; called once, by the last
    /// piece.
    fn finish(&self, task: &TaskState) {
        let outputs =
            task.outputs.lock().expect("outputs lock").take().expect("outputs handed out once");
        let latency = task.submitted.elapsed();
        let error = task.error.lock().expect("task error lock").take();
        match (&task.sink, error) {
            (sink, Some(error)) => sink.fail(error),
            (Sink::Encode(c), None) => c.resolve(Ok(EncodeOutput { parity: outputs, latency })),
            (Sink::Decode(c), None) => {
                c.resolve(Ok(DecodeOutput { units: outputs, wanted: task.wanted.clone(), latency }))
            }
        }
        let mut outstanding = self.outstanding.lock().expect("outstanding lock");
        *outstanding -= 1;
        if *outstanding == 0 {
            self.idle.notify_all();
        }
    }
}

/// The usable rail expected to finish `bytes` first. A rail not yet measured is assumed as
/// fast as the fastest measured one, so it gets work and a measurement.
fn pick_rail(backlog: &[usize], usable: &[bool], rates: &[Option<f64>], bytes: usize) -> usize {
    let fastest = rates.iter().flatten().copied().fold(1.0, f64::max);
    (0..usable.len())
        .filter(|&i| usable[i])
        .min_by(|&a, &b| {
            let finish = |i: usize| (backlog[i] + bytes) as f64 / rates[i].unwrap_or(fastest);
            finish(a).total_cmp(&finish(b))
        })
        .expect("submit checked that some rail is usable")
}

/// Rejects a task the code cannot run, before any piece is queued.
fn check_task(
    entry: &CodeEntry,
    op: Op,
    spec: CodeSpec,
    inputs: &[Option<Bytes>],
    wanted: &[usize],
    outputs: &[Vec<u8>],
) -> Result<(), EngineError> {
    let code = &*entry.code;
    if !entry.usable(op).iter().any(|&u| u) {
        return Err(EngineError::NoRail { code: spec.to_string() });
    }
    match op {
        Op::Encode => {
            if inputs.len() != code.data_units() {
                return Err(EngineError::Shape(format!(
                    "{spec} takes {} data units, got {}",
                    code.data_units(),
                    inputs.len()
                )));
            }
        }
        Op::Add | Op::FirstAdd => {
            let k = code.data_units();
            let mut seen = vec![false; k];
            if inputs.is_empty() || inputs.len() != wanted.len() {
                return Err(EngineError::Shape(format!(
                    "an add needs one position per data unit, got {} units and {} positions",
                    inputs.len(),
                    wanted.len()
                )));
            }
            for &position in wanted {
                if position >= k || std::mem::replace(&mut seen[position], true) {
                    return Err(EngineError::Shape(format!(
                        "add positions must be distinct data units below {k}: {wanted:?}"
                    )));
                }
            }
            let len = inputs[0].as_ref().map_or(0, |u| u.len());
            if outputs.len() != code.parity_units() || outputs.iter().any(|o| o.len() != len) {
                return Err(EngineError::Shape(format!(
                    "an add needs {} accumulators of {len} bytes",
                    code.parity_units()
                )));
            }
        }
        Op::Decode => {
            let n = code.total_units();
            if inputs.len() != n {
                return Err(EngineError::Shape(format!(
                    "{spec} decodes from {n} unit slots, got {}",
                    inputs.len()
                )));
            }
            if let Some(&index) = wanted.iter().find(|&&w| w >= n) {
                return Err(EngineError::Code(CodeError::UnitIndex { index, total: n }));
            }
            let lost: Vec<usize> = (0..n).filter(|&i| inputs[i].is_none()).collect();
            if !code.is_decodable(&lost) {
                return Err(EngineError::Code(CodeError::NotDecodable {
                    code: spec.to_string(),
                    lost,
                    reason: "too few units are present".into(),
                }));
            }
        }
    }
    let Some(first) = inputs.iter().position(|u| u.is_some()) else {
        return Err(EngineError::Shape("a task needs at least one unit".into()));
    };
    let len = inputs[first].as_ref().map_or(0, |u| u.len());
    if let Some(unit) = inputs.iter().position(|u| u.as_ref().is_some_and(|u| u.len() != len)) {
        return Err(EngineError::Shape(format!(
            "unit {unit} has {} bytes, unit {first} has {len}",
            inputs[unit].as_ref().map_or(0, |u| u.len())
        )));
    }
    if op != Op::Decode && inputs.iter().any(|u| u.is_none()) {
        return Err(EngineError::Shape("an encode or add needs every data unit it names".into()));
    }
    code.check_unit_len(len).map_err(EngineError::Code)
}

/// `rail`'s parity for `data` (`len` bytes each), or `None` if it failed or panicked.
fn encode_with(
    rail: &dyn Rail,
    code: &dyn Code,
    data: &[Vec<u8>],
    len: usize,
) -> Option<Vec<Vec<u8>>> {
    let data_refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    // Start from garbage: a rail must overwrite its outputs (callers reuse buffers).
    let mut parity = vec![vec![0xA5u8; len]; code.parity_units()];
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    let result = catch_unwind(AssertUnwindSafe(|| rail.encode(code, &data_refs, &mut parity_refs)));
    matches!(result, Ok(Ok(()))).then_some(parity)
}

/// The canary's parity after `rail` added the data units at `positions` into it, or (`first`)
/// after its first add of them into garbage-filled accumulators; `None` if the rail failed or
/// panicked.
fn add_with(
    rail: &dyn Rail,
    code: &dyn Code,
    canary: &Canary,
    positions: &[usize],
    first: bool,
) -> Option<Vec<Vec<u8>>> {
    let k = code.data_units();
    let data: Vec<&[u8]> = positions.iter().map(|&p| canary.units[p].as_slice()).collect();
    let mut parity: Vec<Vec<u8>> = if first {
        // Garbage: a first add must overwrite, not add into, what the buffers held.
        vec![vec![0xA5u8; canary.units[0].len()]; code.parity_units()]
    } else {
        canary.units[k..].to_vec()
    };
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    let result = catch_unwind(AssertUnwindSafe(|| {
        if first {
            rail.encode_first_add(code, positions, &data, &mut parity_refs)
        } else {
            rail.encode_add(code, positions, &data, &mut parity_refs)
        }
    }));
    matches!(result, Ok(Ok(()))).then_some(parity)
}

/// Whether `rail` rebuilds the units in `lost` of the canary stripe exactly.
fn decodes_back(rail: &dyn Rail, code: &dyn Code, canary: &Canary, lost: &[usize]) -> bool {
    let len = canary.units[0].len();
    let units: Vec<Option<&[u8]>> = canary
        .units
        .iter()
        .enumerate()
        .map(|(i, u)| (!lost.contains(&i)).then_some(u.as_slice()))
        .collect();
    // Start from garbage: a rail must overwrite its outputs, not add into them.
    let mut out = vec![vec![0xA5u8; len]; lost.len()];
    let mut out_refs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.as_mut_slice()).collect();
    let result =
        catch_unwind(AssertUnwindSafe(|| rail.reconstruct(code, &units, lost, &mut out_refs)));
    matches!(result, Ok(Ok(()))) && lost.iter().zip(&out).all(|(&i, o)| *o == canary.units[i])
}

/// The process's engine for callers that do not build their own: every rail this machine has
/// ([`EngineConfig::machine_default`]), started on first use and shared by every caller.
pub fn shared() -> Arc<Engine> {
    static SHARED: OnceLock<Arc<Engine>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            Arc::new(
                Engine::new(EngineConfig::machine_default())
                    .expect("the machine's default rails always make an engine"),
            )
        })
        .clone()
}
