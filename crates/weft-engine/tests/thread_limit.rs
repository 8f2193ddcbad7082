//! Pinned rails and the process-wide bound on coding threads, in a process of their own (the
//! bound is taken once per process, and this sets `WEFT_ENGINE_PIN`).

use std::sync::Arc;

use weft_codes::CodeSpec;
use weft_engine::{
    process_thread_limit, Bytes, EncodeTask, Engine, EngineConfig, RailConfig, ScalarRail,
    Scheduler, SimdRail,
};

#[test]
fn pinned_rails_get_distinct_cores_and_the_bound_counts_the_starting_threads_cpus() {
    // SAFETY: this binary's only test sets the variable before any engine thread exists.
    unsafe { std::env::set_var("WEFT_ENGINE_PIN", "rate-aware") };
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    let two_rails = || {
        vec![
            RailConfig { rail: Arc::new(SimdRail::default()), threads: 1 },
            RailConfig { rail: Arc::new(ScalarRail::default()), threads: 1 },
        ]
    };
    let rate_aware = Engine::new(EngineConfig {
        rails: two_rails(),
        scheduler: Scheduler::RateAware,
        codes: vec![spec],
    })
    .unwrap();
    let fcfs =
        Engine::new(EngineConfig { rails: two_rails(), scheduler: Scheduler::Fcfs, codes: vec![] })
            .unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores: Vec<Option<usize>> = rate_aware.worker_cores().iter().map(|(_, c)| *c).collect();
    if cpus >= 2 && cfg!(target_os = "linux") {
        assert!(cores.iter().all(Option::is_some), "{cores:?}");
        assert_ne!(cores[0], cores[1], "two rails on one core");
    } else {
        assert_eq!(cores, vec![None, None], "nothing to dedicate");
    }
    assert!(fcfs.worker_cores().iter().all(|(_, c)| c.is_none()), "fcfs workers float");
    // Pinned or not, both code correctly.
    let data: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![i.wrapping_mul(37); 8192])).collect();
    let code = spec.build().unwrap();
    let mut expected = vec![vec![0u8; 8192]; 2];
    {
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut out: Vec<&mut [u8]> = expected.iter_mut().map(|p| p.as_mut_slice()).collect();
        code.encode(&refs, &mut out).unwrap();
    }
    for engine in [&rate_aware, &fcfs] {
        let output = engine.encode(EncodeTask::new(spec, data.clone()).chunk_size(512)).unwrap();
        assert_eq!(output.parity, expected);
    }
    // The first piece ran on a pinned worker, which sees one CPU: the bound must still be
    // what the starting thread sees.
    if std::env::var_os("WEFT_ENGINE_THREADS").is_none() {
        assert_eq!(process_thread_limit(), cpus);
    }
}
