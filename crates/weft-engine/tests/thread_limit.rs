//! The process-wide bound on coding threads, in a process of its own (the bound is taken
//! once per process).

use std::sync::Arc;

use weft_codes::CodeSpec;
use weft_engine::{
    process_thread_limit, Bytes, EncodeTask, Engine, EngineConfig, RailConfig, ScalarRail,
    Scheduler, SimdRail,
};

#[test]
fn the_bound_counts_the_creating_threads_cpus_not_a_pinned_workers() {
    if std::env::var_os("WEFT_ENGINE_THREADS").is_some() {
        return; // the bound is then whatever was asked for
    }
    let spec = CodeSpec::Rs { k: 4, r: 2 };
    // Under rate-aware each worker pins itself to one core: the first piece it runs must not
    // be what sets the bound (a pinned thread sees one CPU).
    let engine = Engine::new(EngineConfig {
        rails: vec![
            RailConfig { rail: Arc::new(SimdRail::default()), threads: 1 },
            RailConfig { rail: Arc::new(ScalarRail::default()), threads: 1 },
        ],
        scheduler: Scheduler::RateAware,
        codes: vec![spec],
    })
    .unwrap();
    let data: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![i; 4096])).collect();
    engine.encode(EncodeTask::new(spec, data).chunk_size(512)).unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(process_thread_limit(), cpus);
}
