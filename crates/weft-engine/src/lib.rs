//! weft's coding engine (UMR-EC): encode tasks asynchronously over several rails at once.
//!
//! Invariants:
//! - A task's parity is byte-identical whichever rails computed which pieces: a rail gets a
//!   code's pieces only after its canary parity for that code equalled the oracle's
//!   ([`ScalarRail`]); a rail that differs is excluded for that code, with a log line.
//! - Tasks of byte-local codes (rs, lrc, rep) are split into pieces: the same byte range of
//!   every unit, `chunk_size_bytes` long. Other codes (hitchhiker, clay) run as one piece.
//! - Pieces write disjoint byte ranges of the task's parity buffers; the buffers are handed to
//!   the caller only after the last piece finished (counted down with acquire-release).
//! - Data buffers are shared (`Arc<[u8]>`), never copied; parity is allocated once per task.
//! - Coding threads running at once are bounded per process ([`process_thread_limit`]), across
//!   every engine: a worker holds a permit only while it codes a piece.
//! - Dropping the engine finishes every queued piece first, so no future is left pending.

mod future;
mod rail;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
                write!(f, "no rail can encode {code} (none accepts it or all failed the canary)")
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
    /// rate (per code and size class) and the bytes already queued on it: work is split in
    /// proportion to the rates, which are re-measured on every piece. A rail that runs dry
    /// takes the newest piece queued on the most loaded other rail.
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

/// k data units of equal length to encode.
#[derive(Debug, Clone)]
pub struct EncodeTask {
    pub code: CodeSpec,
    pub data: Vec<Arc<[u8]>>,
    /// Piece length in bytes of each unit (rounded down to the code's unit length multiple);
    /// 0 means one piece.
    pub chunk_size_bytes: usize,
}

/// The r parity units of a task.
#[derive(Debug)]
pub struct EncodeOutput {
    pub parity: Vec<Vec<u8>>,
    /// From `iencode` to the last piece's end.
    pub latency: Duration,
}

/// Coding threads that may run at once in this process, across all engines:
/// `WEFT_ENGINE_THREADS` when set, else the number of CPUs.
pub fn process_thread_limit() -> usize {
    permits().limit
}

#[derive(Debug)]
struct Permits {
    limit: usize,
    free: Mutex<usize>,
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
        Permits { limit, free: Mutex::new(limit), returned: Condvar::new() }
    })
}

struct Permit;

impl Permit {
    fn acquire() -> Permit {
        let permits = permits();
        let mut free = permits.free.lock().expect("permits lock");
        while *free == 0 {
            free = permits.returned.wait(free).expect("permits lock");
        }
        *free -= 1;
        Permit
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let permits = permits();
        *permits.free.lock().expect("permits lock") += 1;
        permits.returned.notify_one();
    }
}

/// A code and which rails may run it (accepted and passed the canary).
#[derive(Debug)]
struct CodeEntry {
    code: Arc<dyn Code>,
    usable: Vec<bool>,
}

#[derive(Debug)]
struct RailState {
    config: RailConfig,
    /// Per-thread rate in data bytes per second, per (code, log2 of piece length).
    rates: Mutex<HashMap<(CodeSpec, u32), f64>>,
}

impl RailState {
    fn rate(&self, code: CodeSpec, class: u32) -> Option<f64> {
        let rates = self.rates.lock().expect("rates lock");
        rates.get(&(code, class)).map(|per_thread| per_thread * self.config.threads as f64)
    }

    fn measure(&self, code: CodeSpec, class: u32, bytes: usize, elapsed: Duration) {
        let sample = bytes as f64 / elapsed.as_secs_f64().max(1e-9);
        let mut rates = self.rates.lock().expect("rates lock");
        rates
            .entry((code, class))
            .and_modify(|rate| *rate += RATE_WEIGHT * (sample - *rate))
            .or_insert(sample);
    }
}

/// A raw parity pointer handed to workers; see `TaskState`.
#[derive(Debug, Clone, Copy)]
struct ParityPointer(*mut u8);

// SAFETY: the pointer is only dereferenced for a piece's byte range, which no other piece
// touches, while the buffer it points into is kept alive by the task (see TaskState).
unsafe impl Send for ParityPointer {}
// SAFETY: as above.
unsafe impl Sync for ParityPointer {}

#[derive(Debug)]
struct TaskState {
    entry: Arc<CodeEntry>,
    data: Vec<Arc<[u8]>>,
    /// Owns the parity buffers until the last piece hands them out; `pointers` point into
    /// them (a Vec's heap buffer does not move when the Vec does).
    parity: Mutex<Option<Vec<Vec<u8>>>>,
    pointers: Vec<ParityPointer>,
    remaining: AtomicUsize,
    error: Mutex<Option<EngineError>>,
    completion: Arc<Completion>,
    submitted: Instant,
}

#[derive(Debug)]
struct Piece {
    task: Arc<TaskState>,
    start: usize,
    len: usize,
}

impl Piece {
    fn bytes(&self) -> usize {
        self.len * self.task.data.len()
    }
}

#[derive(Debug, Default)]
struct Queues {
    /// One queue per rail under rate-aware; a single shared queue under fcfs.
    queues: Vec<VecDeque<Piece>>,
    /// Bytes queued or running per rail (rate-aware's backlog).
    backlog_bytes: Vec<usize>,
    shutdown: bool,
}

#[derive(Debug)]
struct Shared {
    rails: Vec<RailState>,
    scheduler: Scheduler,
    queues: Mutex<Queues>,
    work: Condvar,
    outstanding: Mutex<usize>,
    idle: Condvar,
    codes: Mutex<HashMap<CodeSpec, Arc<CodeEntry>>>,
    excluded: Mutex<Vec<(String, CodeSpec)>>,
    oracle: ScalarRail,
}

/// Encodes tasks on several rails at once. See the crate docs for its invariants.
#[derive(Debug)]
pub struct Engine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts the rails' workers and runs the canary of every code in `config.codes`.
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
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
        let queue_count = match config.scheduler {
            Scheduler::RateAware => config.rails.len(),
            Scheduler::Fcfs => 1,
        };
        let shared = Arc::new(Shared {
            rails: config
                .rails
                .iter()
                .map(|c| RailState { config: c.clone(), rates: Mutex::new(HashMap::new()) })
                .collect(),
            scheduler: config.scheduler,
            queues: Mutex::new(Queues {
                queues: (0..queue_count).map(|_| VecDeque::new()).collect(),
                backlog_bytes: vec![0; config.rails.len()],
                shutdown: false,
            }),
            work: Condvar::new(),
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
        for (index, rail) in config.rails.iter().enumerate() {
            for thread in 0..rail.threads {
                let shared = shared.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("weft-engine-{}-{thread}", rail.rail.name()))
                    .spawn(move || shared.work_loop(index))
                    .map_err(|e| EngineError::Config(format!("cannot start a worker: {e}")))?;
                workers.push(handle);
            }
        }
        Ok(Engine { shared, workers })
    }

    /// Queues a task; the future resolves once all its parity is computed.
    pub fn iencode(&self, task: EncodeTask) -> EcFuture {
        let completion = Arc::new(Completion::default());
        let future = EcFuture::new(completion.clone());
        if let Err(error) = self.shared.submit(task, completion.clone()) {
            completion.resolve(Err(error));
        }
        future
    }

    /// [`Engine::iencode`] and wait.
    pub fn encode(&self, task: EncodeTask) -> Result<EncodeOutput, EngineError> {
        self.iencode(task).wait()
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

    /// (rail, code) pairs whose canary differed from the oracle.
    pub fn excluded(&self) -> Vec<(String, CodeSpec)> {
        self.shared.excluded.lock().expect("excluded lock").clone()
    }

    /// Whether rail `name` may run `code` (runs the code's canary if not yet done).
    pub fn rail_usable(&self, name: &str, code: CodeSpec) -> Result<bool, EngineError> {
        let entry = self.shared.entry(code)?;
        Ok(self
            .shared
            .rails
            .iter()
            .zip(&entry.usable)
            .any(|(r, &u)| u && r.config.rail.name() == name))
    }

    /// Each rail's measured rate (data bytes per second, all its threads) for `code` at
    /// pieces of `chunk_size_bytes`; `None` before its first piece of that class.
    pub fn rates(&self, code: CodeSpec, chunk_size_bytes: usize) -> Vec<(String, Option<f64>)> {
        let class = size_class(chunk_size_bytes);
        self.shared
            .rails
            .iter()
            .map(|r| (r.config.rail.name().to_string(), r.rate(code, class)))
            .collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.queues.lock().expect("queues lock").shutdown = true;
        self.shared.work.notify_all();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

fn size_class(len: usize) -> u32 {
    len.max(1).ilog2()
}

impl Shared {
    /// The code's entry, running its canary through every rail the first time.
    fn entry(&self, spec: CodeSpec) -> Result<Arc<CodeEntry>, EngineError> {
        let mut codes = self.codes.lock().expect("codes lock");
        if let Some(entry) = codes.get(&spec) {
            return Ok(entry.clone());
        }
        let code = spec.build().map_err(EngineError::Code)?;
        let usable = self.canary(&*code);
        let entry = Arc::new(CodeEntry { code, usable });
        codes.insert(spec, entry.clone());
        Ok(entry)
    }

    fn canary(&self, code: &dyn Code) -> Vec<bool> {
        let multiple = code.unit_len_multiple();
        let len = CANARY_LEN_BYTES.div_ceil(multiple) * multiple;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<Vec<u8>> = (0..code.data_units())
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
        let data_refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let run = |rail: &dyn Rail| -> Option<Vec<Vec<u8>>> {
            let mut parity = vec![vec![0u8; len]; code.parity_units()];
            let mut parity_refs: Vec<&mut [u8]> =
                parity.iter_mut().map(|p| p.as_mut_slice()).collect();
            let result =
                catch_unwind(AssertUnwindSafe(|| rail.encode(code, &data_refs, &mut parity_refs)));
            matches!(result, Ok(Ok(()))).then_some(parity)
        };
        let Some(reference) = run(&self.oracle) else {
            tracing::warn!(code = %code.spec(), "the scalar oracle cannot encode this code; no rail will run it");
            return vec![false; self.rails.len()];
        };
        self.rails
            .iter()
            .map(|state| {
                let rail = &*state.config.rail;
                if !rail.accepts(code) {
                    tracing::info!(rail = rail.name(), code = %code.spec(), "rail declines this code");
                    return false;
                }
                if run(rail).as_ref() == Some(&reference) {
                    return true;
                }
                tracing::warn!(
                    rail = rail.name(),
                    code = %code.spec(),
                    "rail excluded: its canary parity differs from the scalar oracle"
                );
                self.excluded.lock().expect("excluded lock").push((rail.name().to_string(), code.spec()));
                false
            })
            .collect()
    }

    fn submit(&self, task: EncodeTask, completion: Arc<Completion>) -> Result<(), EngineError> {
        let submitted = Instant::now();
        let entry = self.entry(task.code)?;
        let code = &*entry.code;
        if !entry.usable.iter().any(|&u| u) {
            return Err(EngineError::NoRail { code: task.code.to_string() });
        }
        if task.data.len() != code.data_units() {
            return Err(EngineError::Shape(format!(
                "{} takes {} data units, got {}",
                task.code,
                code.data_units(),
                task.data.len()
            )));
        }
        let len = task.data[0].len();
        if let Some(unit) = task.data.iter().position(|d| d.len() != len) {
            return Err(EngineError::Shape(format!(
                "data unit {unit} has {} bytes, unit 0 has {len}",
                task.data[unit].len()
            )));
        }
        code.check_unit_len(len).map_err(EngineError::Code)?;
        let multiple = code.unit_len_multiple();
        let piece_len = if code.byte_local() && task.chunk_size_bytes > 0 {
            (task.chunk_size_bytes / multiple).max(1) * multiple
        } else {
            len.max(1)
        };
        let mut parity: Vec<Vec<u8>> = (0..code.parity_units()).map(|_| vec![0u8; len]).collect();
        if len == 0 {
            completion.resolve(Ok(EncodeOutput { parity, latency: submitted.elapsed() }));
            return Ok(());
        }
        let pointers = parity.iter_mut().map(|p| ParityPointer(p.as_mut_ptr())).collect();
        let piece_count = len.div_ceil(piece_len);
        let task = Arc::new(TaskState {
            entry: entry.clone(),
            data: task.data,
            parity: Mutex::new(Some(parity)),
            pointers,
            remaining: AtomicUsize::new(piece_count),
            error: Mutex::new(None),
            completion,
            submitted,
        });
        *self.outstanding.lock().expect("outstanding lock") += 1;
        let spec = code.spec();
        let class = size_class(piece_len);
        let mut queues = self.queues.lock().expect("queues lock");
        for index in 0..piece_count {
            let start = index * piece_len;
            let piece = Piece { task: task.clone(), start, len: piece_len.min(len - start) };
            match self.scheduler {
                Scheduler::Fcfs => queues.queues[0].push_back(piece),
                Scheduler::RateAware => {
                    let rail = self.pick_rail(
                        &queues.backlog_bytes,
                        &entry.usable,
                        spec,
                        class,
                        piece.bytes(),
                    );
                    queues.backlog_bytes[rail] += piece.bytes();
                    queues.queues[rail].push_back(piece);
                }
            }
        }
        drop(queues);
        self.work.notify_all();
        Ok(())
    }

    /// The usable rail expected to finish `bytes` first. A rail not yet measured is assumed
    /// as fast as the fastest measured one, so it gets work and a measurement.
    fn pick_rail(
        &self,
        backlog: &[usize],
        usable: &[bool],
        code: CodeSpec,
        class: u32,
        bytes: usize,
    ) -> usize {
        let rates: Vec<Option<f64>> = self.rails.iter().map(|r| r.rate(code, class)).collect();
        let fastest = rates.iter().flatten().copied().fold(1.0, f64::max);
        (0..self.rails.len())
            .filter(|&i| usable[i])
            .min_by(|&a, &b| {
                let finish = |i: usize| (backlog[i] + bytes) as f64 / rates[i].unwrap_or(fastest);
                finish(a).total_cmp(&finish(b))
            })
            .expect("submit checked that some rail is usable")
    }

    fn work_loop(&self, rail_index: usize) {
        loop {
            let piece = {
                let mut queues = self.queues.lock().expect("queues lock");
                loop {
                    let queue = match self.scheduler {
                        Scheduler::RateAware => rail_index,
                        Scheduler::Fcfs => 0,
                    };
                    let position =
                        queues.queues[queue].iter().position(|p| p.task.entry.usable[rail_index]);
                    if let Some(position) = position {
                        break queues.queues[queue].remove(position).expect("position is in range");
                    }
                    if let Some(piece) = self.steal(&mut queues, rail_index) {
                        break piece;
                    }
                    if queues.shutdown {
                        return;
                    }
                    queues = self.work.wait(queues).expect("queues lock");
                }
            };
            self.run_piece(rail_index, piece);
        }
    }

    /// Under rate-aware, an idle rail takes the newest piece queued on another rail that it
    /// can run: the rates are estimates, and a rail left idle while another has a backlog
    /// would waste its share. The piece's backlog moves with it.
    fn steal(&self, queues: &mut Queues, rail_index: usize) -> Option<Piece> {
        if self.scheduler != Scheduler::RateAware {
            return None;
        }
        let owner = (0..queues.queues.len())
            .filter(|&i| i != rail_index)
            .max_by_key(|&i| queues.backlog_bytes[i] * usize::from(!queues.queues[i].is_empty()))?;
        let position =
            queues.queues[owner].iter().rposition(|p| p.task.entry.usable[rail_index])?;
        let piece = queues.queues[owner].remove(position).expect("position is in range");
        queues.backlog_bytes[owner] -= piece.bytes();
        queues.backlog_bytes[rail_index] += piece.bytes();
        Some(piece)
    }

    fn run_piece(&self, rail_index: usize, piece: Piece) {
        let state = &self.rails[rail_index];
        let rail = &*state.config.rail;
        let task = &piece.task;
        let (start, len) = (piece.start, piece.len);
        let data: Vec<&[u8]> = task.data.iter().map(|d| &d[start..start + len]).collect();
        let mut parity: Vec<&mut [u8]> = task
            .pointers
            .iter()
            // SAFETY: each pointer is the start of a parity buffer of the task's unit length,
            // alive until `remaining` reaches 0 (after this piece); this piece's range is in
            // bounds and no other piece writes it.
            .map(|p| unsafe { std::slice::from_raw_parts_mut(p.0.add(start), len) })
            .collect();
        let result = {
            let _permit = Permit::acquire();
            let began = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| {
                rail.encode(&*task.entry.code, &data, &mut parity)
            }));
            state.measure(task.entry.code.spec(), size_class(len), piece.bytes(), began.elapsed());
            result
        };
        drop(parity);
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error),
            Err(_) => Some(EngineError::RailPanicked { rail: rail.name().to_string() }),
        };
        if let Some(error) = error {
            task.error.lock().expect("task error lock").get_or_insert(error);
        }
        if self.scheduler == Scheduler::RateAware {
            self.queues.lock().expect("queues lock").backlog_bytes[rail_index] -= piece.bytes();
        }
        if task.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let parity =
                task.parity.lock().expect("parity lock").take().expect("parity handed out once");
            let result = match task.error.lock().expect("task error lock").take() {
                Some(error) => Err(error),
                None => Ok(EncodeOutput { parity, latency: task.submitted.elapsed() }),
            };
            task.completion.resolve(result);
            let mut outstanding = self.outstanding.lock().expect("outstanding lock");
            *outstanding -= 1;
            if *outstanding == 0 {
                self.idle.notify_all();
            }
        }
    }
}
