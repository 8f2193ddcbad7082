//! The engine's contract: futures resolve once and never block on `test()`, every rail's
//! parity equals the oracle's, a wrong rail is excluded, many engines share one process.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use weft_codes::{Code, CodeSpec};
use weft_engine::{
    Bytes, DecodeTask, EncodeTask, Engine, EngineConfig, EngineError, IsalRail, Rail, RailConfig,
    ScalarRail, Scheduler, SimdRail,
};

fn units(k: usize, len: usize, seed: u64) -> Vec<Bytes> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect::<Vec<u8>>()
                .into()
        })
        .collect()
}

fn reference(spec: CodeSpec, data: &[Bytes]) -> Vec<Vec<u8>> {
    let code = spec.build().unwrap();
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; code.parity_units()];
    let data_refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    ScalarRail::default().encode(&*code, &data_refs, &mut parity_refs).unwrap();
    parity
}

fn rail(rail: impl Rail + 'static, threads: usize) -> RailConfig {
    RailConfig { rail: Arc::new(rail), threads }
}

fn all_rails() -> Vec<RailConfig> {
    let mut rails = vec![rail(SimdRail::default(), 2), rail(ScalarRail::default(), 1)];
    match IsalRail::load() {
        Ok(isal) => rails.push(rail(isal, 1)),
        Err(error) => eprintln!("skipping the isal rail: {error}"),
    }
    rails
}

fn engine(rails: Vec<RailConfig>, scheduler: Scheduler) -> Engine {
    Engine::new(EngineConfig { rails, scheduler, codes: vec![CodeSpec::Rs { k: 10, r: 4 }] })
        .unwrap()
}

/// Copies the rs generator's output, then flips one byte: the canary must catch it.
#[derive(Debug)]
struct FaultyRail;

impl Rail for FaultyRail {
    fn name(&self) -> &str {
        "faulty"
    }
    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }
    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.encode(data, parity).map_err(EngineError::Code)?;
        if let Some(byte) = parity.last_mut().and_then(|p| p.last_mut()) {
            *byte ^= 0x20;
        }
        Ok(())
    }
    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.reconstruct(units, wanted, out).map_err(EngineError::Code)?;
        if let Some(byte) = out.first_mut().and_then(|o| o.first_mut()) {
            *byte ^= 0x01;
        }
        Ok(())
    }
}

/// Encodes right but decodes wrong: excluded from decodes only.
#[derive(Debug)]
struct BadDecodeRail;

impl Rail for BadDecodeRail {
    fn name(&self) -> &str {
        "bad-decode"
    }
    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }
    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.encode(data, parity).map_err(EngineError::Code)
    }
    fn reconstruct(
        &self,
        _code: &dyn Code,
        _units: &[Option<&[u8]>],
        _wanted: &[usize],
        _out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        // Leaves the outputs as they were: right only if the caller's buffers held the answer.
        Ok(())
    }
}

#[test]
fn every_rail_alone_equals_the_oracle() {
    let shapes = [(10, 4), (6, 3), (4, 2), (12, 4), (1, 1), (20, 4)];
    let lengths = [1, 63, 64, 4097, 100_003];
    for rail_config in all_rails() {
        let name = rail_config.rail.name().to_string();
        let engine = engine(vec![rail_config], Scheduler::Fcfs);
        for (seed, &(k, r)) in shapes.iter().enumerate() {
            let spec = CodeSpec::Rs { k, r };
            for &len in &lengths {
                let data = units(k, len, seed as u64 + len as u64);
                let task = EncodeTask::new(spec, data.clone()).chunk_size(4096);
                let output = engine.encode(task).unwrap();
                assert_eq!(
                    output.parity,
                    reference(spec, &data),
                    "rail {name} rs({k},{r}) len {len}"
                );
            }
        }
        assert!(engine.excluded().is_empty());
    }
}

#[test]
fn split_tasks_over_all_rails_equal_the_oracle_under_both_schedulers() {
    for scheduler in [Scheduler::RateAware, Scheduler::Fcfs] {
        let engine = engine(all_rails(), scheduler);
        let spec = CodeSpec::Rs { k: 10, r: 4 };
        let cases: Vec<_> = (0..24).map(|i| units(10, 1000 + 777 * i, i as u64)).collect();
        let futures: Vec<_> = cases
            .iter()
            .map(|data| engine.iencode(EncodeTask::new(spec, data.clone()).chunk_size(1000)))
            .collect();
        engine.wait_all();
        assert!(engine.test_all());
        for (future, data) in futures.into_iter().zip(&cases) {
            assert!(future.test(), "wait_all returned before a task finished");
            assert_eq!(future.wait().unwrap().parity, reference(spec, data));
        }
    }
}

#[test]
fn other_byte_local_and_sub_chunked_codes_equal_the_oracle() {
    let engine = engine(all_rails(), Scheduler::RateAware);
    for text in ["lrc(12,2,2)", "rep(3)", "hh-xor(6,3)"] {
        let spec = CodeSpec::parse(text).unwrap();
        let code = spec.build().unwrap();
        let len = code.unit_len_multiple() * 301;
        let data = units(code.data_units(), len, 7);
        let output = engine.encode(EncodeTask::new(spec, data.clone()).chunk_size(256)).unwrap();
        let mut expected = vec![vec![0u8; len]; code.parity_units()];
        let data_refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut refs: Vec<&mut [u8]> = expected.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.encode(&data_refs, &mut refs).unwrap();
        assert_eq!(output.parity, expected, "{text}");
    }
    if IsalRail::load().is_ok() {
        assert!(!engine.rail_usable("isal", CodeSpec::parse("lrc(12,2,2)").unwrap()).unwrap());
        assert!(engine.rail_usable("isal", CodeSpec::Rs { k: 10, r: 4 }).unwrap());
    }
}

#[test]
fn a_faulty_rail_is_excluded_and_never_used() {
    let rails = vec![rail(FaultyRail, 1), rail(SimdRail::default(), 1)];
    let engine = engine(rails, Scheduler::RateAware);
    let spec = CodeSpec::Rs { k: 10, r: 4 };
    assert_eq!(engine.excluded(), vec![("faulty".to_string(), spec)]);
    assert!(!engine.rail_usable("faulty", spec).unwrap());
    for i in 0..8 {
        let data = units(10, 5000, i);
        let output = engine.encode(EncodeTask::new(spec, data.clone()).chunk_size(512)).unwrap();
        assert_eq!(output.parity, reference(spec, &data));
    }
    // Alone, the faulty rail leaves no rail for the code: an error, not wrong parity.
    let alone = engine_result(vec![rail(FaultyRail, 1)]);
    let data = units(10, 100, 1);
    let result = alone.encode(EncodeTask::new(spec, data).chunk_size(0));
    assert!(matches!(result, Err(EngineError::NoRail { .. })), "{result:?}");
}

fn engine_result(rails: Vec<RailConfig>) -> Engine {
    Engine::new(EngineConfig { rails, scheduler: Scheduler::Fcfs, codes: vec![] }).unwrap()
}

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Blocks inside the rail until released, so a test can look at a pending future.
#[derive(Debug)]
struct GateRail(Arc<std::sync::Mutex<()>>);

impl Rail for GateRail {
    fn name(&self) -> &str {
        "gate"
    }
    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }
    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let _open = self.0.lock().unwrap();
        code.encode(data, parity).map_err(EngineError::Code)
    }
    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let _open = self.0.lock().unwrap();
        code.reconstruct(units, wanted, out).map_err(EngineError::Code)
    }
}

#[test]
fn futures_resolve_once_test_never_blocks_and_early_drop_is_safe() {
    let gate = Arc::new(std::sync::Mutex::new(()));
    let engine = Engine::new(EngineConfig {
        rails: vec![rail(GateRail(gate.clone()), 1)],
        scheduler: Scheduler::Fcfs,
        // The canary runs now, before the gate closes.
        codes: vec![CodeSpec::Rs { k: 4, r: 2 }],
    })
    .unwrap();
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let closed = gate.lock().unwrap();
    let data = units(4, 3000, 3);
    let mut future = engine.iencode(EncodeTask::new(spec, data.clone()).chunk_size(1000));
    let dropped = engine.iencode(EncodeTask::new(spec, data.clone()).chunk_size(0));
    let began = Instant::now();
    for _ in 0..1000 {
        assert!(!future.test());
    }
    assert!(began.elapsed() < Duration::from_secs(1), "test() must not block");
    assert!(!engine.test_all());
    drop(dropped);
    let waker_state = Arc::new(CountingWaker::default());
    let waker = Waker::from(waker_state.clone());
    let mut context = Context::from_waker(&waker);
    assert!(pin!(&mut future).poll(&mut context).is_pending());
    drop(closed);
    engine.wait_all();
    assert!(future.test());
    assert_eq!(waker_state.0.load(Ordering::SeqCst), 1, "woken exactly once");
    match pin!(&mut future).poll(&mut context) {
        Poll::Ready(output) => assert_eq!(output.unwrap().parity, reference(spec, &data)),
        Poll::Pending => panic!("a finished task's future must be ready"),
    }
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = pin!(&mut future).poll(&mut context);
    }));
    assert!(again.is_err(), "a second poll after Ready must not yield a second result");
}

#[test]
fn bad_tasks_fail_their_future_not_the_engine() {
    let engine = engine(vec![rail(SimdRail::default(), 1)], Scheduler::Fcfs);
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let mut data = units(4, 100, 1);
    data[2] = vec![0u8; 99].into();
    assert!(matches!(
        engine.encode(EncodeTask::new(spec, data).chunk_size(0)),
        Err(EngineError::Shape(_))
    ));
    let empty = engine.encode(EncodeTask::new(spec, units(4, 0, 1)).chunk_size(0)).unwrap();
    assert_eq!(empty.parity, vec![Vec::<u8>::new(); 2]);
    let data = units(4, 100, 2);
    assert_eq!(
        engine.encode(EncodeTask::new(spec, data.clone()).chunk_size(7)).unwrap().parity,
        reference(spec, &data)
    );
}

#[test]
fn many_engines_in_one_process() {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let scheduler = if t % 2 == 0 { Scheduler::RateAware } else { Scheduler::Fcfs };
                let engine = engine(all_rails(), scheduler);
                let spec = CodeSpec::Rs { k: 6, r: 3 };
                let cases: Vec<_> =
                    (0..16).map(|i| units(6, 2000 + 13 * i, t * 100 + i as u64)).collect();
                let futures: Vec<_> = cases
                    .iter()
                    .map(|data| engine.iencode(EncodeTask::new(spec, data.clone()).chunk_size(512)))
                    .collect();
                for (future, data) in futures.into_iter().zip(&cases) {
                    assert_eq!(future.wait().unwrap().parity, reference(spec, data));
                }
                // Dropped with tasks in flight: they finish, nobody waits.
                for data in &cases {
                    drop(engine.iencode(EncodeTask::new(spec, data.clone()).chunk_size(256)));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert!(weft_engine::process_thread_limit() >= 1);
}

/// n units of a stripe: the data and the oracle's parity.
fn stripe(spec: CodeSpec, len: usize, seed: u64) -> Vec<Bytes> {
    let code = spec.build().unwrap();
    let mut all = units(code.data_units(), len, seed);
    let data_refs: Vec<&[u8]> = all.iter().map(|d| &d[..]).collect();
    let mut parity = vec![vec![0u8; len]; code.parity_units()];
    let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
    code.encode(&data_refs, &mut refs).unwrap();
    all.extend(parity.into_iter().map(Bytes::from));
    all
}

fn without(all: &[Bytes], lost: &[usize]) -> Vec<Option<Bytes>> {
    all.iter().enumerate().map(|(i, u)| (!lost.contains(&i)).then(|| u.clone())).collect()
}

#[test]
fn every_rail_decodes_every_pattern_back_to_the_original_units() {
    let patterns: [&[usize]; 5] = [&[0], &[9], &[3, 11], &[0, 1, 2, 3], &[10, 11, 12, 13]];
    for rail_config in all_rails() {
        let name = rail_config.rail.name().to_string();
        let engine = engine(vec![rail_config], Scheduler::Fcfs);
        let spec = CodeSpec::Rs { k: 10, r: 4 };
        assert!(engine.rail_usable_for_decode(&name, spec).unwrap());
        for &len in &[1, 63, 4097, 70_001] {
            let all = stripe(spec, len, len as u64);
            for lost in patterns {
                let task =
                    DecodeTask::new(spec, without(&all, lost), lost.to_vec()).chunk_size(4096);
                let output = engine.decode(task).unwrap();
                assert_eq!(output.wanted, lost);
                for (unit, &index) in output.units.iter().zip(lost) {
                    assert_eq!(&unit[..], &all[index][..], "rail {name} len {len} lost {lost:?}");
                }
            }
        }
    }
}

#[test]
fn decodes_split_over_all_rails_and_other_codes_equal_the_originals() {
    for scheduler in [Scheduler::RateAware, Scheduler::Fcfs] {
        let engine = engine(all_rails(), scheduler);
        for text in ["rs(10,4)", "lrc(12,2,2)", "hh-xor+(6,3)", "clay(4,2)", "rep(3)"] {
            let spec = CodeSpec::parse(text).unwrap();
            let code = spec.build().unwrap();
            let len = code.unit_len_multiple() * 97;
            let all = stripe(spec, len, 5);
            let lost: Vec<usize> = vec![0, code.data_units()];
            let lost = if code.is_decodable(&lost) { lost } else { vec![0] };
            // Reused output buffers full of garbage must come back overwritten.
            let garbage = vec![vec![0x77u8; 3]; lost.len()];
            let futures: Vec<_> = (0..6)
                .map(|_| {
                    engine.idecode(
                        DecodeTask::new(spec, without(&all, &lost), lost.clone())
                            .chunk_size(128)
                            .out_buffers(garbage.clone()),
                    )
                })
                .collect();
            for future in futures {
                let output = future.wait().unwrap();
                for (unit, &index) in output.units.iter().zip(&lost) {
                    assert_eq!(&unit[..], &all[index][..], "{text} {scheduler:?} lost {lost:?}");
                }
            }
        }
    }
}

#[test]
fn reused_parity_buffers_are_overwritten() {
    let engine = engine(all_rails(), Scheduler::RateAware);
    let spec = CodeSpec::Rs { k: 6, r: 3 };
    let data = units(6, 10_000, 9);
    let buffers = vec![vec![0xEEu8; 20_000], vec![0x11u8; 5], vec![]];
    let output = engine
        .encode(EncodeTask::new(spec, data.clone()).chunk_size(1024).parity_buffers(buffers))
        .unwrap();
    assert_eq!(output.parity, reference(spec, &data));
}

#[test]
fn a_rail_that_decodes_wrong_is_excluded_from_decodes_only() {
    let spec = CodeSpec::Rs { k: 10, r: 4 };
    let alone = Engine::new(EngineConfig {
        rails: vec![rail(BadDecodeRail, 1)],
        scheduler: Scheduler::Fcfs,
        codes: vec![spec],
    })
    .unwrap();
    assert!(alone.rail_usable("bad-decode", spec).unwrap());
    assert!(!alone.rail_usable_for_decode("bad-decode", spec).unwrap());
    let data = units(10, 300, 4);
    assert_eq!(
        alone.encode(EncodeTask::new(spec, data.clone())).unwrap().parity,
        reference(spec, &data)
    );
    let all = stripe(spec, 300, 4);
    let result = alone.decode(DecodeTask::new(spec, without(&all, &[2]), vec![2]));
    assert!(matches!(result, Err(EngineError::NoRail { .. })), "{result:?}");
}

/// Encodes and adds right, but its first add adds into what the buffers held instead of
/// overwriting it: excluded from adds, still used for encodes.
#[derive(Debug)]
struct FirstAddAddsRail;

impl Rail for FirstAddAddsRail {
    fn name(&self) -> &str {
        "first-add-adds"
    }
    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }
    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.encode(data, parity).map_err(EngineError::Code)
    }
    fn encode_first_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        self.encode_add(code, positions, data, parity)
    }
    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.reconstruct(units, wanted, out).map_err(EngineError::Code)
    }
}

#[test]
fn a_rail_whose_first_add_reads_its_buffers_is_excluded_from_adds() {
    let spec = CodeSpec::Rs { k: 6, r: 3 };
    let rails = vec![rail(FirstAddAddsRail, 1), rail(SimdRail::default(), 1)];
    let engine =
        Engine::new(EngineConfig { rails, scheduler: Scheduler::Fcfs, codes: vec![spec] }).unwrap();
    assert!(engine.rail_usable("first-add-adds", spec).unwrap());
    assert!(!engine.rail_usable_for_add("first-add-adds", spec).unwrap());
    assert!(engine.rail_usable_for_add("simd", spec).unwrap());
    assert_eq!(engine.excluded(), vec![("first-add-adds".to_string(), spec)]);
    // Every piece of a first add goes to simd: the garbage never reaches the parity.
    let all = stripe(spec, 4096, 9);
    let task =
        EncodeTask::first_add(spec, vec![0, 1, 2], all[..3].to_vec(), vec![vec![0x5A; 4096]; 3]);
    let accumulators = engine.encode(task.chunk_size(256)).unwrap().parity;
    let task = EncodeTask::add(spec, vec![3, 4, 5], all[3..6].to_vec(), accumulators);
    let parity = engine.encode(task.chunk_size(256)).unwrap().parity;
    for (index, row) in parity.iter().enumerate() {
        assert_eq!(&row[..], &all[6 + index][..], "parity {index}");
    }
}

#[test]
fn undecodable_and_malformed_decodes_fail_their_future() {
    let engine = engine(vec![rail(SimdRail::default(), 1)], Scheduler::Fcfs);
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let all = stripe(spec, 64, 1);
    let too_many = engine.decode(DecodeTask::new(spec, without(&all, &[0, 1, 2]), vec![0, 1, 2]));
    assert!(matches!(too_many, Err(EngineError::Code(_))), "{too_many:?}");
    let out_of_range = engine.decode(DecodeTask::new(spec, without(&all, &[0]), vec![6]));
    assert!(matches!(out_of_range, Err(EngineError::Code(_))), "{out_of_range:?}");
    let mut short = without(&all, &[0]);
    short.pop();
    assert!(matches!(
        engine.decode(DecodeTask::new(spec, short, vec![0])),
        Err(EngineError::Shape(_))
    ));
    // The engine still works after the failures.
    let output = engine.decode(DecodeTask::new(spec, without(&all, &[1]), vec![1])).unwrap();
    assert_eq!(&output.units[0][..], &all[1][..]);
}

#[test]
fn adds_of_every_position_from_zero_equal_the_full_parity_on_every_rail() {
    for scheduler in [Scheduler::RateAware, Scheduler::Fcfs] {
        let engine = engine(all_rails(), scheduler);
        for text in ["rs(10,4)", "rs(6,3)", "lrc(12,2,2)", "hh-xor+(6,3)", "clay(4,2)"] {
            let spec = CodeSpec::parse(text).unwrap();
            let code = spec.build().unwrap();
            let (k, r) = (code.data_units(), code.parity_units());
            let len = code.unit_len_multiple() * 53;
            let all = stripe(spec, len, 11);
            // Okapi's partial parity: stripes of width 3 add their units in turn, into
            // zeroed accumulators, or with a first add into garbage-filled ones.
            for first_add in [false, true] {
                let fill = if first_add { 0xA5 } else { 0 };
                let mut accumulators = vec![vec![fill; len]; r];
                for (turn, positions) in (0..k).collect::<Vec<_>>().chunks(3).rev().enumerate() {
                    let data = positions.iter().map(|&p| all[p].clone()).collect();
                    let task = if first_add && turn == 0 {
                        EncodeTask::first_add(spec, positions.to_vec(), data, accumulators)
                    } else {
                        EncodeTask::add(spec, positions.to_vec(), data, accumulators)
                    };
                    let task = task.chunk_size(64 * code.unit_len_multiple());
                    accumulators = engine.encode(task).unwrap().parity;
                }
                for (index, accumulator) in accumulators.iter().enumerate() {
                    assert_eq!(
                        &accumulator[..],
                        &all[k + index][..],
                        "{text} {scheduler:?} first add {first_add}: parity {index}"
                    );
                }
            }
            if IsalRail::load().is_ok() && text.starts_with("rs") {
                assert!(engine.rail_usable_for_add("isal", spec).unwrap());
            }
        }
    }
}

#[test]
fn malformed_adds_fail_their_future() {
    let engine = engine(vec![rail(SimdRail::default(), 1)], Scheduler::Fcfs);
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let data = units(2, 64, 3);
    let good = || vec![vec![0u8; 64]; 2];
    let cases = [
        EncodeTask::add(spec, vec![1, 1], data.clone(), good()),
        EncodeTask::add(spec, vec![0, 4], data.clone(), good()),
        EncodeTask::add(spec, vec![0], data.clone(), good()),
        EncodeTask::add(spec, vec![0, 1], data.clone(), vec![vec![0u8; 64]]),
        EncodeTask::add(spec, vec![0, 1], data.clone(), vec![vec![0u8; 63]; 2]),
    ];
    for task in cases {
        let result = engine.encode(task.clone());
        assert!(matches!(result, Err(EngineError::Shape(_))), "{task:?}: {result:?}");
    }
}

/// How many calls run at once, across every engine using one [`TimedRail`]'s counter.
#[derive(Debug, Default)]
struct Concurrency {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// A correct rail that takes a fixed time per encode and counts the encodes running at once.
#[derive(Debug)]
struct TimedRail {
    name: &'static str,
    per_piece: Duration,
    running: Arc<Concurrency>,
}

impl TimedRail {
    /// 200 µs a piece, counted in `running`.
    fn counting(running: Arc<Concurrency>) -> TimedRail {
        TimedRail { name: "counting", per_piece: Duration::from_micros(200), running }
    }

    fn taking(name: &'static str, per_piece: Duration) -> TimedRail {
        TimedRail { name, per_piece, running: Arc::default() }
    }
}

impl Rail for TimedRail {
    fn name(&self) -> &str {
        self.name
    }
    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }
    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let running = self.running.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.running.most.fetch_max(running, Ordering::SeqCst);
        std::thread::sleep(self.per_piece);
        let result = code.encode(data, parity).map_err(EngineError::Code);
        self.running.now.fetch_sub(1, Ordering::SeqCst);
        result
    }
    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.reconstruct(units, wanted, out).map_err(EngineError::Code)
    }
}

#[test]
fn coding_threads_stay_within_the_process_bound_across_engines() {
    let counting = Arc::new(Concurrency::default());
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let engines: Vec<Engine> = (0..4)
        .map(|_| {
            Engine::new(EngineConfig {
                rails: vec![rail(TimedRail::counting(counting.clone()), 4)],
                scheduler: Scheduler::Fcfs,
                codes: vec![spec],
            })
            .unwrap()
        })
        .collect();
    // The canaries ran on the submitting thread; count the workers only.
    counting.most.store(0, Ordering::SeqCst);
    let data = units(4, 4096, 8);
    let futures: Vec<_> = (0..64)
        .map(|i| engines[i % 4].iencode(EncodeTask::new(spec, data.clone()).chunk_size(1024)))
        .collect();
    for future in futures {
        assert_eq!(future.wait().unwrap().parity, reference(spec, &data));
    }
    let most = counting.most.load(Ordering::SeqCst);
    let limit = weft_engine::process_thread_limit();
    assert!(most >= 1 && most <= limit, "{most} pieces coded at once; the limit is {limit}");
}

#[test]
fn rail_stats_count_every_piece_once_and_busy_time_within_the_wall_clock() {
    let counting = Arc::new(Concurrency::default());
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let engine = Engine::new(EngineConfig {
        rails: vec![rail(TimedRail::counting(counting), 1)],
        scheduler: Scheduler::RateAware,
        codes: vec![spec],
    })
    .unwrap();
    let data = units(4, 4096, 9);
    let began = Instant::now();
    let futures: Vec<_> = (0..16)
        .map(|_| engine.iencode(EncodeTask::new(spec, data.clone()).chunk_size(1024)))
        .collect();
    for future in futures {
        assert_eq!(future.wait().unwrap().parity, reference(spec, &data));
    }
    // A worker folds its last piece in when it next looks for work: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = engine.rail_stats();
        if stats[0].pieces >= 64 || Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let wall = began.elapsed();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].pieces, 64, "16 tasks of 4 pieces each");
    assert_eq!(stats[0].bytes, 64 * 4 * 1024, "input bytes: k units of 1 KiB per piece");
    assert_eq!(stats[0].stolen, 0, "a lone rail has nobody to steal from");
    // Each piece sleeps 200 µs in the rail; one thread cannot be busy longer than the run.
    assert!(stats[0].busy >= Duration::from_micros(64 * 200), "busy {:?}", stats[0].busy);
    assert!(stats[0].busy <= wall, "busy {:?} over a run of {wall:?}", stats[0].busy);
}

#[test]
fn rate_aware_moves_a_slow_rails_backlog_to_the_idle_fast_rail() {
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let engine = Engine::new(EngineConfig {
        rails: vec![
            rail(TimedRail::taking("fast", Duration::from_millis(1)), 1),
            rail(TimedRail::taking("slow", Duration::from_millis(10)), 1),
        ],
        scheduler: Scheduler::RateAware,
        codes: vec![spec],
    })
    .unwrap();
    // One task of 64 pieces, queued before either rail was measured: split evenly at first.
    let data = units(4, 64 * 256, 10);
    let output = engine.encode(EncodeTask::new(spec, data.clone()).chunk_size(256)).unwrap();
    assert_eq!(output.parity, reference(spec, &data));
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = engine.rail_stats();
        if stats.iter().map(|s| s.pieces).sum::<u64>() >= 64 || Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let (fast, slow) = (&stats[0], &stats[1]);
    assert_eq!(fast.pieces + slow.pieces, 64);
    // Ten times slower, the slow rail codes about a tenth; without stealing it would code
    // the 32 it was first given.
    assert!(fast.stolen > 0, "the idle fast rail took none of the slow rail's queue");
    assert!(slow.pieces <= 16, "the slow rail coded {} of 64 pieces", slow.pieces);
}

#[test]
fn workers_float_unless_asked_to_pin() {
    if std::env::var_os("WEFT_ENGINE_PIN").is_some() {
        return; // the default policy is what this checks
    }
    let two_rails = || vec![rail(SimdRail::default(), 1), rail(ScalarRail::default(), 1)];
    for scheduler in [Scheduler::RateAware, Scheduler::Fcfs] {
        let engine = engine(two_rails(), scheduler);
        let cores: Vec<Option<usize>> = engine.worker_cores().iter().map(|(_, c)| *c).collect();
        assert_eq!(cores, vec![None, None], "{scheduler:?}");
    }
}
