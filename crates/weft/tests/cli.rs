//! The `weft` binary's tests through its command line, one module per subject, in one test
//! executable (one build and link instead of one per file). Three stay executables of their
//! own: `ec_cli` (CI reruns it whole on the portable SIMD path), `readme` (runs the README's
//! commands as written) and `raidp_crash` (sets a crash drill in its process environment,
//! which every `weft` it starts inherits).

mod bench_cli;
mod cluster_cli;
mod common;
mod demo_cli;
mod gc_cli;
mod geometric_cli;
mod meta_faults;
mod model_cli;
mod netns_cli;
mod raidp_cli;
mod reads_cli;
mod s3_encryption;
mod s3_gateway;
mod serve_cli;
mod transition_cli;
mod transition_crash;
mod transition_lease;
mod up_cli;
