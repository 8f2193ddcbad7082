//! `weft bench geometric`: the geometric layout (RCStor) beside fixed 64 MiB chunks and the
//! striped layout, each on a cluster of its own, raw and under the hardware model
//! (docs/geometric.md, "Benchmark").
//!
//! Per (hardware, configuration): start `weft up --no-repair` on a temporary directory (with
//! `--disk-model hdd --net-model 1Gbit` under the model) → write the workload's objects
//! (the same sizes and bytes for every configuration) → pack them (geometric ones) → read a
//! sample of the objects with bytes on the node holding the most object bytes (`--reads`)
//! whole, healthy, through the client link → kill that node → read the sample again,
//! degraded → small ranged reads, degraded → recover
//! the node's units with a weighted executor (the bench's own, so it is measured alone) →
//! stop the cluster.
//!
//! Invariants:
//! - Every read is checked byte for byte against what was written.
//! - Degraded ÷ healthy is per object (its own healthy time), then summarized.
//! - Repair traffic is measured (bytes the executor fetched per byte it rebuilt) and
//!   predicted from each lost unit's repair plan over its stripe's stored units (Clay's
//!   theory: d/(d − k + 1) of a unit for a full stripe), so the two can be compared.
//! - The client link (the user's, 1 Gbit/s under the model) paces what a read hands out,
//!   not what the reader fetches from nodes: the reader stands for RCStor's HTTP server,
//!   inside the cluster; node links are the nodes' own (`--net-model`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Args;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use weft_client::{Client, PutOptions};

use crate::bench_cluster::content;
use crate::cluster_cli::{format_size, print_json};
use crate::{cli_error, parse_size, CliError};

#[derive(Debug, Args)]
pub struct GeometricBenchArgs {
    /// Workload: w1 (objects of 4 MiB to --max-object, mean ≈ 100 MiB, s0 4 MiB) or w2
    /// (4 KiB to 4 MiB, mean ≈ 100 KiB, s0 128 KiB), drawn as the paper's from its trace.
    #[arg(long, default_value = "w1", value_parser = ["w1", "w2"])]
    pub workload: String,
    /// Objects per configuration [default: 24 for w1, 600 for w2].
    #[arg(long)]
    pub objects: Option<usize>,
    /// The largest object (the paper's W1 reaches 4 GiB; scaled to this machine).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub max_object: usize,
    /// Configurations, a comma list of geo-clay, geo-rs, fixed64-clay, striped-rs,
    /// striped-lrc.
    #[arg(long, default_value = "geo-clay,geo-rs,fixed64-clay,striped-rs,striped-lrc")]
    pub configs: String,
    /// raw, model or both: the model is --disk-model and --net-model on every node and
    /// --client-link on the reader's output.
    #[arg(long, default_value = "both", value_parser = ["raw", "model", "both"])]
    pub hardware: String,
    #[arg(long, default_value = "hdd")]
    pub disk_model: String,
    #[arg(long, default_value = "1Gbit")]
    pub net_model: String,
    /// The user's link, which a read's output is paced at under the model.
    #[arg(long, default_value = "1Gbit", value_parser = crate::bench_reads::parse_link_rate)]
    pub client_link: u64,
    /// Nodes of each cluster (one disk each).
    #[arg(long, default_value_t = 16)]
    pub nodes: u32,
    /// Placement groups of the geometric buckets (few, so this many objects fill stripes).
    #[arg(long, default_value_t = 2)]
    pub pgs: u32,
    /// Recovery: the executor's weight cap (4 MiB a unit) and most tasks at once.
    #[arg(long, default_value_t = 512)]
    pub weight_cap: u64,
    #[arg(long, default_value_t = 64)]
    pub parallel: usize,
    /// Objects read whole, healthy then degraded (of those with bytes on the failed node,
    /// spread evenly over their sizes): the degraded ÷ healthy sample.
    #[arg(long, default_value_t = 24)]
    pub reads: usize,
    /// Small ranged reads per configuration, and their size.
    #[arg(long, default_value_t = 40)]
    pub ranges: usize,
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub range_size: usize,
    /// Seed of the object sizes and range offsets.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the clusters live (a temporary directory each, removed after).
    #[arg(long, default_value = "/tmp")]
    pub dir: PathBuf,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Also draw the rows as an SVG bar chart: recovery throughput and degraded ÷ healthy
    /// read time per configuration, raw and under the model.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// Objects the bench writes at once (small W2 objects are bound by round trips, not bytes).
const WRITES_IN_FLIGHT: usize = 8;

/// One configuration: a bucket body for meta.
fn bucket_body(config: &str, workload: &str, pgs: u32) -> Result<Value, CliError> {
    let (s0, cell, block) = match workload {
        "w2" => (128u64 << 10, 32u64 << 10, 512u64 << 10),
        _ => (4u64 << 20, 256 << 10, 4 << 20),
    };
    let striped = |code: &str| json!({ "code": code, "stripe_width": 10, "cell_bytes": cell, "block_bytes": block });
    Ok(match config {
        "geo-clay" => {
            json!({ "layout": "geometric", "code": "clay(10,4)", "s0": s0, "q": 2, "pgs": pgs })
        }
        "geo-rs" => {
            json!({ "layout": "geometric", "code": "rs(10,4)", "s0": s0, "q": 2, "pgs": pgs })
        }
        "fixed64-clay" => {
            let chunk = if workload == "w2" { 512u64 << 10 } else { 64 << 20 };
            json!({ "layout": "geometric", "code": "clay(10,4)", "small_code": "clay(10,4)",
                    "s0": chunk, "chunk_max": chunk, "q": 2, "pgs": pgs })
        }
        "striped-rs" => striped("rs(10,4)"),
        "striped-lrc" => striped("lrc(10,2,2)"),
        other => return Err(cli_error!("unknown configuration {other:?}").with_code("usage")),
    })
}

/// Object sizes drawn like the paper's workloads: log-normal (σ 1.2, mean ≈ 100 MiB or
/// 100 KiB) within its range, seeded.
fn sizes(workload: &str, count: usize, max_object: u64, seed: u64) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (median, low, high) = match workload {
        "w2" => (49.0 * 1024.0, 4u64 << 10, 4u64 << 20),
        _ => (49.0 * 1048576.0, 4u64 << 20, max_object.max(4 << 20)),
    };
    (0..count)
        .map(|_| {
            // Box-Muller.
            let (u1, u2): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
            let normal = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let size = (median * (1.2 * normal).exp()) as u64;
            size.clamp(low, high)
        })
        .collect()
}

/// A `weft up` the bench started, stopped (and its directory removed) on drop.
struct Spawned {
    child: Child,
    dir: PathBuf,
    client: Client,
    meta: String,
}

impl Spawned {
    fn start(args: &GeometricBenchArgs, model: bool) -> Result<Spawned, CliError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = args.dir.join(format!("weft-bench-geo-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| cli_error!("cannot make the cluster directory {}: {e}", dir.display()))?;
        let exe = std::env::current_exe().map_err(|e| cli_error!("cannot find weft: {e}"))?;
        let nodes = args.nodes.to_string();
        let path = dir.to_string_lossy().into_owned();
        let mut command = Command::new(exe);
        command.args([
            "up",
            "--dir",
            &path,
            "--meta-listen",
            "127.0.0.1:0",
            "--s3-listen",
            "127.0.0.1:0",
            "--nodes",
            &nodes,
            "--no-repair",
            "--json",
            "--nearfull-ratio",
            "1",
            "--full-ratio",
            "1",
            "--down-after-ms",
            "3000",
            "--heartbeat-ms",
            "500",
        ]);
        if model {
            command.args(["--disk-model", &args.disk_model, "--net-model", &args.net_model]);
        }
        let mut child = command
            .env("WEFT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| cli_error!("cannot start weft up: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line)
            .map_err(|e| cli_error!("weft up printed nothing: {e}"))?;
        // weft up goes on printing events (a node killed, ...): keep reading them, or it
        // would find its stdout closed.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let ready: Value = serde_json::from_str(&line)
            .map_err(|e| cli_error!("weft up's ready line is not JSON ({e}): {line}"))?;
        let meta =
            ready["meta"].as_str().ok_or_else(|| cli_error!("no meta in {ready}"))?.to_owned();
        let secret = weft_auth::ClusterSecret::read_file(&dir.join("cluster.secret"))?;
        let client = Client::new(&meta, &secret)?;
        Ok(Spawned { child, dir, client, meta })
    }

    /// `weft node kill ID` on this cluster (held down: `weft up` does not restart it).
    fn kill_node(&self, id: u32) -> Result<(), CliError> {
        let exe = std::env::current_exe().map_err(|e| cli_error!("cannot find weft: {e}"))?;
        let out = Command::new(exe)
            .args(["node", "kill", &id.to_string()])
            .env("WEFT_META", &self.meta)
            .env("WEFT_SECRET_FILE", self.dir.join("cluster.secret"))
            .output()
            .map_err(|e| cli_error!("cannot run weft node kill: {e}"))?;
        if !out.status.success() {
            return Err(cli_error!(
                "weft node kill {id}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // SAFETY: SIGTERM to the weft up this bench started.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A writer that hands bytes out at `rate` bytes per second at most (the user's link):
/// each write returns once its bytes would have left the link, one window of slack.
struct Paced {
    rate: Option<u64>,
    started: Instant,
    sent: u64,
    written: Vec<u8>,
    check: bool,
}

impl Paced {
    fn new(rate: Option<u64>, check: bool) -> Paced {
        Paced { rate, started: Instant::now(), sent: 0, written: Vec::new(), check }
    }
}

impl Write for Paced {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sent += buf.len() as u64;
        if self.check {
            self.written.extend_from_slice(buf);
        }
        if let Some(rate) = self.rate {
            let due = Duration::from_secs_f64(self.sent as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(self.started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// (stored length, bytes read) of the repair of `unit` of `object` by its code's repair plan
/// with nothing else unavailable, counting only what its helpers store (units past an
/// object's end, and the empty places of a bin stripe, are zeros nobody reads).
fn planned_repair(
    object: &weft_client::ObjectInfo,
    unit: weft_layout::UnitId,
) -> Option<(u64, u64)> {
    let layout = object.layout;
    let code = layout.code.build().ok()?;
    let (group, target) = layout.unit_position(unit);
    let plan = code.repair_plan(target, &[], object.unit_len(group) as usize).ok()?;
    let read = plan
        .reads
        .iter()
        .map(|r| {
            let stored = object.unit(layout.unit(group, r.unit)).map_or(0, |u| u.len);
            let end = ((r.offset + r.len) as u64).min(stored);
            end.saturating_sub((r.offset as u64).min(stored))
        })
        .sum();
    Some((object.unit(unit)?.len, read))
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let at = ((values.len() - 1) as f64 * p).round() as usize;
    values[at]
}

/// Runs one configuration on a fresh cluster; its row.
fn run_config(
    args: &GeometricBenchArgs,
    runtime: &tokio::runtime::Runtime,
    config: &str,
    model: bool,
    sizes: &[u64],
) -> Result<Value, CliError> {
    let cluster = Spawned::start(args, model)?;
    // No degraded-read cache: every read pays for what it rebuilds (amplification counts).
    let client = &cluster.client.with_degraded_cache(0);
    let bucket = "bench-geo";
    let body = bucket_body(config, &args.workload, args.pgs)?;
    runtime.block_on(client.meta.put_json(&format!("/v1/buckets/{bucket}"), body))?;
    let geometric = config.starts_with("geo") || config.starts_with("fixed");
    // Write: a few objects at once (W2's thousands of small objects one by one took most of
    // a run), the same objects and bytes for every configuration.
    let started = Instant::now();
    let writes = sizes.iter().enumerate().map(|(i, &size)| async move {
        let bytes = content(i, size as usize);
        client
            .put_reader(
                bucket,
                &format!("obj-{i:05}"),
                size,
                std::io::Cursor::new(bytes),
                &PutOptions::default(),
            )
            .await
    });
    runtime.block_on(async {
        use futures_util::stream::{StreamExt, TryStreamExt};
        futures_util::stream::iter(writes)
            .buffer_unordered(WRITES_IN_FLIGHT)
            .try_for_each(|_| async { Ok(()) })
            .await
    })?;
    let write_s = started.elapsed().as_secs_f64();
    let mut pack = Value::Null;
    if geometric {
        let options = weft_client::PackOptions::default();
        let report = runtime.block_on(client.pack(bucket, &options, None))?;
        if report.objects as usize != sizes.len() {
            return Err(cli_error!(
                "{config}: packed {} objects of {}",
                report.objects,
                sizes.len()
            ));
        }
        pack = json!(report);
    }
    // Metadata per object: the objects' records, plus their stripes' (geometric).
    let mut record_bytes = 0u64;
    let mut layout_bytes = 0u64;
    let mut holders: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut stripes_seen = std::collections::BTreeSet::new();
    let mut stripe_bytes = 0u64;
    let mut on_node: Vec<Vec<u32>> = Vec::new();
    for i in 0..sizes.len() {
        let object = runtime.block_on(client.meta.get_object(bucket, &format!("obj-{i:05}")))?;
        record_bytes += object.raw["metadata_bytes"].as_u64().unwrap_or(0);
        layout_bytes += object.raw["layout_bytes"].as_u64().unwrap_or(0);
        let mut nodes = Vec::new();
        if let Some(geo) = &object.geometric {
            for (key, stripe) in &geo.stripes {
                if stripes_seen.insert(key.clone()) {
                    stripe_bytes += stripe.raw["metadata_bytes"].as_u64().unwrap_or(0);
                }
            }
            for piece in &geo.pieces {
                let stripe = &geo.stripes[&piece.stripe];
                if let Some(unit) = stripe.unit(weft_layout::UnitId::Data(piece.block)) {
                    *holders.entry(unit.node_id).or_default() += piece.bytes;
                    nodes.push(unit.node_id);
                }
            }
        } else {
            for unit in object.units.values() {
                if let weft_layout::UnitId::Data(_) = unit.unit {
                    *holders.entry(unit.node_id).or_default() += unit.len;
                }
                nodes.push(unit.node_id);
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        on_node.push(nodes);
    }
    // What the victim's repair should read by the codes' repair plans (Clay's theory).
    let victim = *holders.iter().max_by_key(|(_, bytes)| **bytes).map(|(n, _)| n).unwrap_or(&1);
    let (mut planned_lost, mut planned_read) = (0u64, 0u64);
    let mut planned_objects = std::collections::BTreeSet::new();
    for i in 0..sizes.len() {
        let object = runtime.block_on(client.meta.get_object(bucket, &format!("obj-{i:05}")))?;
        let groups: Vec<(String, weft_client::ObjectInfo)> = match &object.geometric {
            Some(geo) => geo.stripes.iter().map(|(k, s)| (k.clone(), s.clone())).collect(),
            None => vec![(object.key.clone(), object.clone())],
        };
        for (name, holder) in groups {
            if !planned_objects.insert(name) {
                continue;
            }
            for unit in holder.units.values().filter(|u| u.node_id == victim) {
                if let Some((lost, read)) = planned_repair(&holder, unit.unit) {
                    planned_lost += lost;
                    planned_read += read;
                }
            }
        }
    }
    let link = model.then_some(args.client_link);
    // Healthy reads, whole objects, one after another.
    let read = |i: usize, range: Option<(u64, u64)>| -> Result<(f64, u64), CliError> {
        let key = format!("obj-{i:05}");
        let object = runtime.block_on(client.meta.get_object(bucket, &key))?;
        let mut out = Paced::new(link, true);
        let stats = runtime.block_on(client.get_object_range(object, range, &mut out, None))?;
        let seconds = out.started.elapsed().as_secs_f64();
        let expected = content(i, sizes[i] as usize);
        let want = match range {
            Some((start, len)) => &expected[start as usize..(start + len) as usize],
            None => &expected[..],
        };
        if out.written != want {
            return Err(cli_error!("{config}: {key} read back different bytes"));
        }
        Ok((seconds, stats.bytes_fetched))
    };
    // The sample read whole: objects with bytes on the victim (the node holding the most
    // object bytes), at most --reads of them, evenly over their sizes.
    let mut affected: Vec<usize> =
        (0..sizes.len()).filter(|&i| on_node[i].contains(&victim)).collect();
    affected.sort_by_key(|&i| (sizes[i], i));
    if affected.len() > args.reads {
        let n = affected.len();
        affected = (0..args.reads.max(1)).map(|j| affected[j * n / args.reads.max(1)]).collect();
    }
    affected.sort_unstable();
    let mut healthy = vec![0.0; sizes.len()];
    for &i in &affected {
        healthy[i] = read(i, None)?.0;
    }
    cluster.kill_node(victim)?;
    // Wait until meta calls it down.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let nodes = runtime.block_on(client.meta.get_json("/v1/nodes"))?;
        let down = nodes["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["id"] == victim && n["state"] == "down");
        if down {
            break;
        }
        if Instant::now() > deadline {
            return Err(cli_error!("{config}: meta never called node {victim} down"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Degraded reads of the sample.
    let mut ratios = Vec::new();
    for &i in &affected {
        let (seconds, _) = read(i, None)?;
        ratios.push((sizes[i], seconds / healthy[i].max(1e-9), seconds, healthy[i]));
    }
    // Small ranged reads of affected objects, degraded: bytes fetched per byte returned.
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0x5eed);
    let (mut fetched, mut returned) = (0u64, 0u64);
    let candidates: Vec<usize> =
        affected.iter().copied().filter(|&i| sizes[i] >= args.range_size as u64).collect();
    for _ in 0..args.ranges.min(if candidates.is_empty() { 0 } else { args.ranges }) {
        let i = candidates[rng.gen_range(0..candidates.len())];
        let len = args.range_size as u64;
        let start = rng.gen_range(0..=sizes[i] - len);
        let (_, bytes) = read(i, Some((start, len)))?;
        fetched += bytes;
        returned += len;
    }
    // Ranges as the paper's §6.3: a uniform length (half the object on average) at a uniform
    // offset, degraded: bytes fetched per byte returned.
    let (mut wide_fetched, mut wide_returned) = (0u64, 0u64);
    for &i in affected.iter().take(args.ranges) {
        let len = rng.gen_range(1..=sizes[i].max(1));
        let start = rng.gen_range(0..=sizes[i] - len);
        let (_, bytes) = read(i, Some((start, len)))?;
        wide_fetched += bytes;
        wide_returned += len;
    }
    // Recovery of the victim's units by this bench's own weighted executor.
    let config_exec = weft_client::repair::ExecutorConfig {
        parallel: args.parallel,
        weight_cap: args.weight_cap,
        rate_bytes_per_sec: None,
        idle_ms: 100,
        ..Default::default()
    };
    // Meta sees the victim's units under-protected before the executor starts (else a quick
    // recovery could end before the first look and never be seen).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = runtime.block_on(client.meta.get_json("/v1/status"))?;
        let queue = status["repair_queue"].as_u64().unwrap_or(0);
        let under = status["under_protected_units"].as_u64().unwrap_or(0);
        if queue > 0 || under > 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(cli_error!("{config}: meta never saw node {victim}'s units unprotected"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let disks_before = runtime.block_on(crate::bench_reads::disk_counters_by_disk(client))?;
    let recovery_started = Instant::now();
    let executor =
        runtime.spawn(weft_client::repair::run_executor(client.clone(), config_exec, stopped));
    let deadline = Instant::now() + Duration::from_secs(3600);
    // Done when nothing is under-protected any more and the queue is empty.
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let status = runtime.block_on(client.meta.get_json("/v1/status"))?;
        let queue = status["repair_queue"].as_u64().unwrap_or(0);
        let under = status["under_protected_units"].as_u64().unwrap_or(0);
        if queue == 0 && under == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(cli_error!("{config}: recovery did not finish within an hour"));
        }
    }
    let recovery_s = recovery_started.elapsed().as_secs_f64();
    let disks_after = runtime.block_on(crate::bench_reads::disk_counters_by_disk(client))?;
    let _ = stop.send(true);
    // Each modeled disk's share of the recovery: busy fraction and bytes moved (the paper's
    // Table 3), busiest first — the bottleneck of a disk-bound recovery.
    let mut disk_use: Vec<(u32, f64, u64, u64)> = disks_after
        .iter()
        .map(|(key, after)| {
            let node = key.0;
            let before = disks_before.get(key).copied().unwrap_or_default();
            let busy = after.busy_us.saturating_sub(before.busy_us) as f64 / 1e6;
            (
                node,
                busy / recovery_s.max(1e-9),
                after.bytes.saturating_sub(before.bytes),
                after.seeks.saturating_sub(before.seeks),
            )
        })
        .collect();
    disk_use.sort_by(|a, b| b.1.total_cmp(&a.1));
    let disk_bytes: u64 = disk_use.iter().map(|d| d.2).sum();
    let stats = runtime.block_on(executor).map_err(|e| cli_error!("executor: {e}"))?;
    let recovered = stats.bytes_written.load(Ordering::Relaxed);
    let repair_read = stats.bytes_read.load(Ordering::Relaxed);
    // Summaries.
    let mut large: Vec<f64> = ratios.iter().filter(|r| r.0 >= 64 << 20).map(|r| r.1).collect();
    let mut all: Vec<f64> = ratios.iter().map(|r| r.1).collect();
    let mut by_size = ratios.clone();
    by_size.sort_by_key(|r| r.0);
    let deciles: Vec<Value> = (0..10)
        .filter_map(|d| {
            let from = d * by_size.len() / 10;
            let to = ((d + 1) * by_size.len() / 10).max(from);
            let part = &by_size[from..to];
            (!part.is_empty()).then(|| {
                let mut r: Vec<f64> = part.iter().map(|p| p.1).collect();
                json!({
                    "decile": d + 1,
                    "objects": part.len(),
                    "smallest": part.first().map(|p| p.0),
                    "largest": part.last().map(|p| p.0),
                    "median_ratio": percentile(&mut r, 0.5),
                })
            })
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    Ok(json!({
        "config": config,
        "hardware": if model { format!("{} disks, {} node links, {} client link", args.disk_model, args.net_model, format_size(args.client_link)) } else { "raw".into() },
        "model": model,
        "objects": sizes.len(),
        "bytes": total,
        "write_seconds": write_s,
        "pack": pack,
        "victim_node": victim,
        "victim_object_bytes": holders.get(&victim).copied().unwrap_or(0),
        "recovery": {
            "seconds": recovery_s,
            "bytes_recovered": recovered,
            "bytes_read": repair_read,
            "mb_per_s": recovered as f64 / 1e6 / recovery_s.max(1e-9),
            "read_per_byte_recovered": repair_read as f64 / (recovered.max(1)) as f64,
            "planned_bytes_recovered": planned_lost,
            "planned_bytes_read": planned_read,
            "planned_read_per_byte_recovered": planned_read as f64 / planned_lost.max(1) as f64,
            "repaired_units": stats.repaired.load(Ordering::Relaxed),
            "disk_mb_per_s": model.then(|| disk_bytes as f64 / 1e6 / recovery_s.max(1e-9)),
            "busiest_disks": disk_use.iter().take(6).map(|d| json!({
                "node": d.0, "busy_fraction": d.1, "bytes": d.2, "seeks": d.3,
            })).collect::<Vec<_>>(),
            "failed_attempts": stats.failed.load(Ordering::Relaxed),
        },
        "degraded": {
            "objects": ratios.len(),
            "median_ratio": percentile(&mut all, 0.5),
            "p95_ratio": percentile(&mut all, 0.95),
            "median_ratio_64mib_up": if large.is_empty() { Value::Null } else { json!(percentile(&mut large, 0.5)) },
            "median_mb_per_s": percentile(&mut ratios.iter().map(|r| r.0 as f64 / 1e6 / r.2.max(1e-9)).collect::<Vec<_>>(), 0.5),
            "per_object": ratios.iter().map(|r| json!({"bytes": r.0, "healthy_s": r.3, "degraded_s": r.2})).collect::<Vec<_>>(),
            "by_size_decile": deciles,
        },
        "healthy_read_seconds_total": healthy.iter().sum::<f64>(),
        "objects_on_victim": on_node.iter().filter(|n| n.contains(&victim)).count(),
        "range_reads": {
            "reads": returned / (args.range_size.max(1) as u64),
            "range_bytes": args.range_size,
            "amplification": fetched as f64 / returned.max(1) as f64,
            "half_object_ranges_amplification": wide_fetched as f64 / wide_returned.max(1) as f64,
        },
        "metadata": {
            "record_bytes_per_object": record_bytes as f64 / sizes.len().max(1) as f64,
            "layout_bytes_per_object": if geometric { json!(layout_bytes as f64 / sizes.len().max(1) as f64) } else { Value::Null },
            "stripe_record_bytes_per_object": if geometric { json!(stripe_bytes as f64 / sizes.len().max(1) as f64) } else { Value::Null },
        },
    }))
}

pub fn run(args: GeometricBenchArgs) -> Result<(), CliError> {
    let configs: Vec<&str> =
        args.configs.split(',').map(str::trim).filter(|c| !c.is_empty()).collect();
    for config in &configs {
        bucket_body(config, &args.workload, args.pgs)?;
    }
    let count = args.objects.unwrap_or(if args.workload == "w2" { 600 } else { 24 });
    let sizes = sizes(&args.workload, count, args.max_object as u64, args.seed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let models: Vec<bool> = match args.hardware.as_str() {
        "raw" => vec![false],
        "model" => vec![true],
        _ => vec![false, true],
    };
    let mut rows = Vec::new();
    for &model in &models {
        for config in &configs {
            if !args.json {
                eprintln!("bench geometric: {config} ({})…", if model { "model" } else { "raw" });
            }
            let row = run_config(&args, &runtime, config, model, &sizes)?;
            if !args.json {
                print_row(&row);
            }
            rows.push(row);
        }
    }
    let find = |config: &str, model: bool| {
        rows.iter().find(|r| r["config"] == config && r["model"] == model)
    };
    let mut summary = Vec::new();
    for &model in &models {
        let speed = |c: &str| find(c, model).and_then(|r| r["recovery"]["mb_per_s"].as_f64());
        let degraded =
            |c: &str| find(c, model).and_then(|r| r["degraded"]["median_ratio_64mib_up"].as_f64());
        // Degraded reads' median speed (object bytes per second).
        let median_speed =
            |c: &str| find(c, model).and_then(|r| r["degraded"]["median_mb_per_s"].as_f64());
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b.max(1e-9));
        summary.push(json!({
            "model": model,
            "clay_over_rs_recovery": ratio(speed("geo-clay"), speed("striped-rs")),
            "geo_clay_over_geo_rs_recovery": ratio(speed("geo-clay"), speed("geo-rs")),
            "geo_clay_over_lrc_recovery": ratio(speed("geo-clay"), speed("striped-lrc")),
            "geo_clay_degraded_over_healthy_64mib_up": degraded("geo-clay"),
            "geo_over_fixed_degraded_speed": ratio(median_speed("geo-clay"), median_speed("fixed64-clay")),
        }));
    }
    let mean = sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64;
    let report = json!({
        "workload": args.workload,
        "objects": sizes.len(),
        "mean_object_bytes": mean,
        "largest_object_bytes": sizes.iter().max(),
        "nodes": args.nodes,
        "pgs": args.pgs,
        "weight_cap": args.weight_cap,
        "parallel": args.parallel,
        "rows": rows,
        "summary": summary,
    });
    if let Some(path) = &args.plot {
        chart(&rows, &args.workload).write(path)?;
    }
    if args.json {
        print_json(&report);
    } else {
        println!("{}", serde_json::to_string_pretty(&report["summary"]).unwrap_or_default());
    }
    Ok(())
}

/// The rows as bars: one group per configuration, one bar per hardware (raw, model); recovery
/// throughput above, degraded ÷ healthy read time (median) below.
fn chart(rows: &[Value], workload: &str) -> crate::plot::Chart {
    let mut names: Vec<String> = Vec::new();
    let (mut recovery, mut degraded) = (Vec::new(), Vec::new());
    for row in rows {
        let name = row["config"].as_str().unwrap_or("?").to_string();
        let at = names.iter().position(|n| *n == name).unwrap_or_else(|| {
            names.push(name);
            names.len() - 1
        }) as f64;
        let series = if row["model"] == true { "model (HDD, 1 Gbit/s)" } else { "raw" };
        let value = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
        recovery.push((series.to_string(), at, value(&row["recovery"]["mb_per_s"])));
        degraded.push((series.to_string(), at, value(&row["degraded"]["median_ratio"])));
    }
    crate::plot::Chart {
        title: format!("weft bench geometric --workload {workload}"),
        x_label: "configuration".into(),
        x_log: false,
        x_names: names,
        panels: vec![
            crate::plot::Panel::from_points("recovery of one node (MB/s)", recovery),
            crate::plot::Panel::from_points("degraded ÷ healthy read time (median)", degraded),
        ],
    }
}

fn print_row(row: &Value) {
    let f = |v: &Value| v.as_f64().map_or("-".to_owned(), |x| format!("{x:.2}"));
    println!(
        "{:<13} {:<5} recovery {:>8} MB/s (read {} per byte) · degraded/healthy median {} (≥64 MiB {}) · range amplification {} · layout {} B/object",
        row["config"].as_str().unwrap_or("?"),
        if row["model"] == true { "model" } else { "raw" },
        f(&row["recovery"]["mb_per_s"]),
        f(&row["recovery"]["read_per_byte_recovered"]),
        f(&row["degraded"]["median_ratio"]),
        f(&row["degraded"]["median_ratio_64mib_up"]),
        f(&row["range_reads"]["amplification"]),
        f(&row["metadata"]["layout_bytes_per_object"]),
    );
}
