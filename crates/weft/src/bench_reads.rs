//! `weft bench reads`: Okapi's read experiments (§6.2, Fig. 5 and 13) on a running cluster —
//! best under the hardware model (`weft up --disk-model hdd`), where a read's cost is the
//! seeks and transfers of the disks it touches.
//!
//! For each configuration — the code at each `--stripe-widths` (decoupled), and rs(k, r) at
//! stripe width k for each `--coupled` k — `--objects` objects of `--object-size` are written
//! once (kept under `reads/` in the bucket and reused by later runs with the same layout).
//! Then for each read size and each `--clients` level, that many concurrent clients read for
//! `--duration`, each read `read size` bytes at a random cell-aligned offset of a random
//! object (or, with `--trace`, the trace's reads, on test objects of the traced objects' sizes
//! when it records them). A row reports throughput, latency percentiles, seeks per second (from every node's
//! disk-model counters, before and after; null without a model) and read amplification
//! (bytes fetched from nodes ÷ bytes returned: above 1 only in degraded reads).
//!
//! Invariants:
//! - Object bytes are a function of (object, offset), so any range can be checked without
//!   holding the object: every read's first, last and one random 4 KiB are checked, and a
//!   wrong byte fails the run rather than making a figure.
//! - Configurations run one after another on the same cluster; each run's counters are the
//!   difference over exactly its own reads (the clients start after the first snapshot and the
//!   second is taken after the last read ends).

use std::{
    io::Write,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Args;
use serde_json::{json, Value};
use weft_client::{Client, ObjectInfo, PutOptions};
use weft_layout::StripedLayout;

use crate::{cli_error, cluster_cli::MetaUrlArgs, parse_size, CliError, CodeArgs};

/// The objects the reads are measured on (written once per layout, reused by later runs).
#[derive(Debug, Args)]
pub struct TestObjects {
    /// Test objects per layout.
    #[arg(long, default_value_t = 4)]
    pub objects: usize,
    /// Size of each test object.
    #[arg(long, default_value = "384MiB", value_parser = parse_size)]
    pub object_size: usize,
    /// Bucket to keep the test objects in (created when missing; shared by `weft bench
    /// reads` and `weft advise stripe-width`).
    #[arg(long, default_value = "bench-reads")]
    pub bucket: String,
}

#[derive(Debug, Args)]
pub struct ReadsBenchArgs {
    #[command(flatten)]
    pub code: CodeArgs,
    /// Stripe widths to compare for the code (decoupled: groups stay k wide).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,6")]
    pub stripe_widths: Vec<usize>,
    /// Coupled baselines: for each k given, rs(k, r) striped k wide (r from the code), as
    /// HDFS-EC and most systems lay data out (the paper: 3-of-6, 6-of-9, 12-of-15).
    #[arg(long, value_delimiter = ',')]
    pub coupled: Vec<usize>,
    /// Cell: the striping unit.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub cell: usize,
    /// Block: an object's piece on one disk (the paper's 8 MB HDFS block).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub block: usize,
    /// Read sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "2MiB,12MiB,48MiB", value_parser = parse_size)]
    pub read_sizes: Vec<usize>,
    /// Concurrent clients (load levels, comma separated).
    #[arg(long, value_delimiter = ',', default_value = "8")]
    pub clients: Vec<usize>,
    /// How long each configuration, read size and load level is measured, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = weft_client::gc::parse_duration_ms)]
    pub duration: u64,
    #[command(flatten)]
    pub test: TestObjects,
    /// Seed of the clients' random offsets (runs with the same seed read the same ranges).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How each client reads: `random` (a read size at a random cell-aligned offset of a
    /// random object) or `sequential` (every object once, start to end in read-size steps,
    /// client i starting at object i; a client stops early when it has read them all).
    #[arg(long, default_value = "random", value_parser = ["random", "sequential"])]
    pub pattern: String,
    /// Replay a read trace (JSON lines with offset, length, timestamp — as `weft get` or
    /// `weft serve s3 --trace-reads` record) instead of --read-sizes: the clients take its
    /// reads in order. When the trace records object sizes (weft's traces do), each traced
    /// object gets a test object of its size (--objects and --object-size are not used) and
    /// each read its own object and offset; otherwise reads go to the --objects test objects
    /// by a hash of bucket/key, offsets wrapped into the object.
    #[arg(long, value_name = "FILE", conflicts_with = "pattern")]
    pub trace: Option<std::path::PathBuf>,
    /// Degraded mode: one disk (chosen by --seed among those holding the objects' units)
    /// counts as failed — the readers never read it and rebuild what it holds from the other
    /// units of each group, as after a disk failure before repair (the node keeps running,
    /// so no repair starts during the measurement).
    #[arg(long)]
    pub degraded: bool,
    /// With --degraded: how many disks count as failed (each holding data of the objects;
    /// at most what the code tolerates is readable).
    #[arg(long, default_value_t = 1)]
    pub failed_disks: usize,
    /// Degraded-read cache of each client (comma-separated sizes measure each, e.g.
    /// `0,256MiB`; 0 turns it off).
    #[arg(long, value_delimiter = ',', default_value = "256MiB", value_parser = parse_size)]
    pub degraded_cache: Vec<usize>,
    /// Each client's link (hardware model), e.g. 1Gbit or 125MB: what a client receives
    /// queues on it as on a NIC of that rate. None: unlimited.
    #[arg(long, value_name = "RATE", value_parser = parse_link_rate)]
    pub client_link: Option<u64>,
    /// Also draw the rows as a chart (SVG): throughput and p99 latency against the read size
    /// (or the load level when one read size is given), one line per layout.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the rows as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Print each row as one JSON object per line, as it is measured.
    #[arg(long, conflicts_with = "json")]
    pub json_lines: bool,
}

/// A `--client-link` rate: `1Gbit`, `10Gbit`, `125MB`, … in bytes per second.
pub(crate) fn parse_link_rate(text: &str) -> Result<u64, String> {
    weft_node::model::parse_rate(text)
}

/// The byte at `offset` of benchmark object `object`: 8-byte words of splitmix64 of (object,
/// word index), so any range can be generated on its own.
fn fill(object: u64, offset: u64, out: &mut [u8]) {
    let word = |index: u64| {
        let mut z = ((object << 48) ^ index).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d4_049b_b133_111b);
        (z ^ (z >> 31)).to_le_bytes()
    };
    // One hash per word: the leading partial word, whole words, the trailing partial word.
    let mut done = 0;
    while done < out.len() {
        let at = offset + done as u64;
        let (index, skip) = (at / 8, (at % 8) as usize);
        let bytes = word(index);
        let n = (8 - skip).min(out.len() - done);
        out[done..done + n].copy_from_slice(&bytes[skip..skip + n]);
        done += n;
    }
}

/// Object `object`'s bytes in order, for `put_reader`.
struct Content {
    object: u64,
    at: u64,
    len: u64,
}

impl std::io::Read for Content {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min((self.len - self.at) as usize);
        fill(self.object, self.at, &mut buf[..n]);
        self.at += n as u64;
        Ok(n)
    }
}

/// Where a read's sampled windows are checked as its bytes stream past.
struct Sampled {
    object: u64,
    /// Object offset of the next byte written.
    at: u64,
    /// Windows `[start, end)` in object offsets to check.
    windows: Vec<(u64, u64)>,
    wrong: Option<u64>,
    written: u64,
}

impl Write for Sampled {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (start, end) = (self.at, self.at + buf.len() as u64);
        for &(from, to) in &self.windows {
            let (lo, hi) = (from.max(start), to.min(end));
            if lo < hi && self.wrong.is_none() {
                let mut expected = vec![0u8; (hi - lo) as usize];
                fill(self.object, lo, &mut expected);
                if buf[(lo - start) as usize..(hi - start) as usize] != expected[..] {
                    self.wrong = Some(lo);
                }
            }
        }
        self.at = end;
        self.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// splitmix64 state for the clients' choices.
pub(crate) struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d4_049b_b133_111b);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// One configuration: a layout and whether it is a coupled baseline.
pub(crate) struct Config {
    pub layout: StripedLayout,
    pub coupled: bool,
}

impl Config {
    fn prefix(&self) -> String {
        let code: String = self
            .layout
            .code
            .to_string()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        format!("reads/{}/w{}", code.trim_end_matches('-'), self.layout.stripe_width)
    }
}

/// A modeled disk's counters (or their sum over disks).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct DiskCounters {
    pub seeks: u64,
    pub busy_us: u64,
    pub bytes: u64,
    pub modeled_disks: usize,
}

/// Every modeled disk's counters on the cluster's up nodes, by (node, disk).
pub(crate) async fn disk_counters_by_disk(
    client: &Client,
) -> Result<std::collections::BTreeMap<(u32, u32), DiskCounters>, CliError> {
    let nodes = client.meta.get_json("/v1/nodes").await?;
    let mut out = std::collections::BTreeMap::new();
    for node in nodes["nodes"].as_array().into_iter().flatten() {
        let (Some(id), Some(endpoint)) = (node["id"].as_u64(), node["endpoint"].as_str()) else {
            continue;
        };
        // A node that does not answer (down) has nothing to count.
        let Ok(health) = client.nodes.health(id as u32, endpoint).await else { continue };
        for disk in health["disks"].as_array().into_iter().flatten() {
            if let Some(model) = disk.get("model") {
                let index = disk["index"].as_u64().unwrap_or(0) as u32;
                out.insert(
                    (id as u32, index),
                    DiskCounters {
                        seeks: model["seeks"].as_u64().unwrap_or(0),
                        busy_us: model["busy_us"].as_u64().unwrap_or(0),
                        bytes: model["bytes"].as_u64().unwrap_or(0),
                        modeled_disks: 1,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// Sums of every modeled disk's counters over the cluster's up nodes.
async fn disk_counters(client: &Client) -> Result<DiskCounters, CliError> {
    let mut sum = DiskCounters::default();
    for disk in disk_counters_by_disk(client).await?.values() {
        sum.seeks += disk.seeks;
        sum.busy_us += disk.busy_us;
        sum.bytes += disk.bytes;
        sum.modeled_disks += 1;
    }
    Ok(sum)
}

/// The layout of `code` at stripe width `width` with the given cell and block.
pub(crate) fn layout_of(
    code: weft_codes::CodeSpec,
    width: usize,
    cell: usize,
    block: usize,
) -> Result<StripedLayout, CliError> {
    let layout: StripedLayout = serde_json::from_value(json!({
        "code": code.to_string(), "stripe_width": width,
        "cell_bytes": cell, "block_bytes": block,
    }))
    .map_err(|e| cli_error!("bad layout: {e}"))?;
    layout.validate().map_err(|e| cli_error!("{code} with stripe width {width}: {e}"))?;
    Ok(layout)
}

/// The layouts to measure.
pub(crate) fn configs(args: &ReadsBenchArgs) -> Result<Vec<Config>, CliError> {
    let spec = args.code.spec()?;
    let layout = |code, width| layout_of(code, width, args.cell, args.block);
    let mut all = Vec::new();
    for &width in &args.stripe_widths {
        all.push(Config { layout: layout(spec, width)?, coupled: false });
    }
    let r = spec.build()?.parity_units();
    for &k in &args.coupled {
        let code = weft_codes::CodeSpec::Rs { k, r };
        all.push(Config { layout: layout(code, k)?, coupled: true });
    }
    if all.is_empty() {
        return Err(cli_error!("nothing to measure: give --stripe-widths and/or --coupled"));
    }
    Ok(all)
}

/// Writes object i of size `sizes[i]` laid out as `config` under `reads/` in `bucket` unless
/// it is there with this layout and size.
pub(crate) async fn prepare_objects(
    client: &Client,
    bucket: &str,
    sizes: &[u64],
    config: &Config,
) -> Result<Vec<ObjectInfo>, CliError> {
    if client.meta.get_bucket(bucket).await.is_err() {
        client.meta.create_bucket(bucket, None).await?;
    }
    let mut objects = Vec::new();
    for (index, &size) in sizes.iter().enumerate() {
        let key = format!("{}/obj-{index:04}", config.prefix());
        match client.meta.get_object(bucket, &key).await {
            Ok(object) if object.layout == config.layout.fitted(size) && object.size == size => {
                objects.push(object);
                continue;
            }
            _ => {}
        }
        let content = Content { object: index as u64, at: 0, len: size };
        let options = PutOptions { policy: Some(config.layout), ..PutOptions::default() };
        let stats = client.put_reader(bucket, &key, size, content, &options).await?;
        objects.push(stats.object);
    }
    Ok(objects)
}

/// Most objects a trace replay writes (one per traced object).
pub const MAX_TRACED_OBJECTS: usize = 10_000;

/// A read trace made ready for replay.
///
/// When every read records its object's size (`weft get` and `weft serve s3` record it), the
/// test objects are the traced objects themselves: one per distinct bucket/key, of its size
/// (the largest recorded), and each read goes to its own object at its own offset — the
/// paper's "create f files … replay the IO logs", file sizes and whole-object reads included.
/// Otherwise reads go to the `--objects` test objects by a hash of bucket/key, offsets wrapped
/// into the object.
pub(crate) struct Replay {
    pub reads: Vec<weft_client::trace::TracedRead>,
    /// Per read, the test object it goes to (when the trace records sizes).
    pub object_of: Option<Vec<usize>>,
    /// The test objects' sizes (when the trace records sizes).
    pub sizes: Option<Vec<u64>>,
}

impl Replay {
    pub fn new(reads: Vec<weft_client::trace::TracedRead>) -> Result<Replay, CliError> {
        if reads.is_empty() {
            return Err(cli_error!("the trace holds no reads"));
        }
        if reads.iter().any(|r| r.object_size.is_none()) {
            return Ok(Replay { reads, object_of: None, sizes: None });
        }
        let mut index: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
        for read in &reads {
            let next = index.len();
            index.entry((read.bucket.as_str(), read.key.as_str())).or_insert(next);
        }
        if index.len() > MAX_TRACED_OBJECTS {
            return Err(cli_error!(
                "the trace reads {} objects; a replay writes at most {MAX_TRACED_OBJECTS} \
                 (keep a sample of the trace's objects)",
                index.len()
            ));
        }
        let mut sizes = vec![0u64; index.len()];
        let object_of: Vec<usize> = reads
            .iter()
            .map(|read| {
                let which = index[&(read.bucket.as_str(), read.key.as_str())];
                let size = read.object_size.unwrap_or(0).max(read.offset + read.length);
                sizes[which] = sizes[which].max(size).max(1);
                which
            })
            .collect();
        Ok(Replay { reads, object_of: Some(object_of), sizes: Some(sizes) })
    }

    /// Read `at` (wrapping around the trace) as (object, offset, length) on `objects`.
    fn range(&self, at: usize, objects: &[ObjectInfo]) -> (usize, u64, u64) {
        let at = at % self.reads.len();
        let read = &self.reads[at];
        match &self.object_of {
            Some(object_of) => {
                let which = object_of[at];
                let size = objects[which].size;
                let len = read.length.min(size);
                (which, read.offset.min(size - len), len)
            }
            None => traced_range(read, objects),
        }
    }
}

/// The test objects' sizes: the traced objects' when a trace records them, else `--objects`
/// of `--object-size`.
pub(crate) fn test_sizes(test: &TestObjects, workload: &Workload) -> Vec<u64> {
    match workload {
        Workload::Trace(replay) if replay.sizes.is_some() => {
            replay.sizes.clone().unwrap_or_default()
        }
        _ => vec![test.object_size as u64; test.objects],
    }
}

/// What the clients read.
#[derive(Clone)]
pub(crate) enum Workload {
    /// `size` bytes at a random cell-aligned offset of a random object.
    Random(u64),
    /// Every object once, start to end in `size`-byte steps.
    Sequential(u64),
    /// A trace's reads in order, shared by the clients, mapped onto the objects.
    Trace(Arc<Replay>),
}

/// What each emulated client has of its own.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reader {
    /// Bytes of its degraded-read cache (0: none).
    pub cache: usize,
    /// Its link's rate in bytes per second (None: unlimited).
    pub link: Option<u64>,
}

impl Reader {
    /// A client of its own, sharing `client`'s connections.
    fn client(self, client: &Client) -> Client {
        let own = client.with_degraded_cache(self.cache);
        match self.link {
            Some(rate) => own.with_link(rate),
            None => own,
        }
    }
}

/// What the clients of one run measured.
#[derive(Default)]
pub(crate) struct Measured {
    pub latencies: Vec<Duration>,
    pub bytes: u64,
    pub fetched: u64,
    pub cache_hits: u64,
}

/// The trace read `read` mapped onto one of `objects`: the object its bucket/key hashes to,
/// its length (at most the object's size) and its offset, wrapped into the object.
fn traced_range(
    read: &weft_client::trace::TracedRead,
    objects: &[ObjectInfo],
) -> (usize, u64, u64) {
    let name = format!("{}/{}", read.bucket, read.key);
    let hash = name
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
    let which = (hash % objects.len() as u64) as usize;
    let size = objects[which].size;
    let len = read.length.min(size);
    let offset =
        if read.offset + len <= size { read.offset } else { read.offset % (size - len + 1) };
    (which, offset, len)
}

/// Reads `[offset, offset + len)` of `object` with `client`, checking three 4 KiB windows
/// of it (first, last, one at random) against the content function.
async fn checked_read(
    client: &Client,
    object: &ObjectInfo,
    offset: u64,
    len: u64,
    rng: &mut Rng,
) -> Result<weft_client::GetStats, CliError> {
    let middle = offset + rng.below(len.saturating_sub(4096).max(1));
    let windows = vec![
        (offset, offset + len.min(4096)),
        (middle, (middle + 4096).min(offset + len)),
        ((offset + len).saturating_sub(4096).max(offset), offset + len),
    ];
    let index = object.key.rsplit("obj-").next().and_then(|n| n.parse().ok());
    let Some(index) = index else {
        return Err(cli_error!("unexpected key {}", object.key));
    };
    let mut sink = Sampled { object: index, at: offset, windows, wrong: None, written: 0 };
    let stats =
        client.get_object_range(object.clone(), Some((offset, len)), &mut sink, None).await?;
    if let Some(at) = sink.wrong {
        return Err(cli_error!("{}: wrong bytes at offset {at}", object.key));
    }
    if sink.written != len {
        return Err(cli_error!("{}: {} of {len} bytes", object.key, sink.written));
    }
    Ok(stats)
}

/// `clients` readers for `duration`, each with a client of its own (`reader`: its own
/// degraded-read cache and link), reading as `workload` says.
pub(crate) async fn measure(
    client: &Client,
    objects: &[ObjectInfo],
    workload: &Workload,
    clients: usize,
    duration: Duration,
    seed: u64,
    own: Reader,
) -> Result<Measured, CliError> {
    let objects = Arc::new(objects.to_vec());
    let deadline = Instant::now() + duration;
    let next_traced = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for reader in 0..clients {
        let (client, objects) = (own.client(client), Arc::clone(&objects));
        let (workload, next_traced) = (workload.clone(), Arc::clone(&next_traced));
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed ^ (reader as u64 + 1) << 32);
            let mut measured = Measured::default();
            // Sequential: objects read so far, the one being read and the next offset.
            let (mut done, mut cursor) = (0, (reader % objects.len(), 0u64));
            while Instant::now() < deadline {
                let (which, offset, len) = match &workload {
                    Workload::Random(size) => {
                        let which = rng.below(objects.len() as u64) as usize;
                        let object = &objects[which];
                        let cell = object.layout.cell_bytes;
                        let len = (*size).min(object.size);
                        let cells = (object.size - len) / cell + 1;
                        (which, rng.below(cells) * cell, len)
                    }
                    Workload::Sequential(size) => {
                        if cursor.1 >= objects[cursor.0].size {
                            done += 1;
                            cursor = ((cursor.0 + 1) % objects.len(), 0);
                        }
                        if done == objects.len() {
                            break;
                        }
                        let (which, at) = cursor;
                        let len = (*size).min(objects[which].size - at);
                        cursor.1 += len;
                        (which, at, len)
                    }
                    Workload::Trace(replay) => {
                        let at = next_traced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        replay.range(at, &objects)
                    }
                };
                let started = Instant::now();
                let stats = checked_read(&client, &objects[which], offset, len, &mut rng).await?;
                measured.latencies.push(started.elapsed());
                measured.bytes += len;
                measured.fetched += stats.bytes_fetched;
                measured.cache_hits += stats.cache_hit_bytes;
            }
            Ok::<_, CliError>(measured)
        }));
    }
    let mut all = Measured::default();
    for task in tasks {
        let one = task.await.map_err(|e| cli_error!("a reader failed: {e}"))??;
        all.latencies.extend(one.latencies);
        all.bytes += one.bytes;
        all.fetched += one.fetched;
        all.cache_hits += one.cache_hits;
    }
    Ok(all)
}

/// Marks the units of `objects` on (node, disk) down, as meta would after the disk failed:
/// reads rebuild them without asking the disk.
pub(crate) fn fail_disk(objects: &mut [ObjectInfo], (node, disk): (u32, u32)) {
    for object in objects {
        for unit in object.units.values_mut() {
            if unit.node_id == node && unit.disk == disk {
                unit.state = Some("down".into());
            }
        }
    }
}

/// The disks `--degraded` fails: `count` of the (node, disk) pairs holding data blocks of
/// `objects` (a disk with only parity would degrade nothing), chosen by `seed`.
pub(crate) fn disks_to_fail(objects: &[ObjectInfo], seed: u64, count: usize) -> Vec<(u32, u32)> {
    let mut disks: Vec<(u32, u32)> = objects
        .iter()
        .flat_map(|o| o.units.values())
        .filter(|u| matches!(u.unit, weft_layout::UnitId::Data(_)))
        .map(|u| (u.node_id, u.disk))
        .collect();
    disks.sort();
    disks.dedup();
    let mut rng = Rng(seed);
    let mut chosen = Vec::new();
    while chosen.len() < count && !disks.is_empty() {
        chosen.push(disks.remove(rng.below(disks.len() as u64) as usize));
    }
    chosen
}

pub(crate) fn percentile_ms(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at].as_secs_f64() * 1000.0
}

/// One measured row: `clients` readers of `objects` (laid out as `config`) for `duration`,
/// with the cluster's disk-model counters read before and after.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn measure_row(
    client: &Client,
    config: &Config,
    objects: &[ObjectInfo],
    workload: &Workload,
    clients: usize,
    duration: Duration,
    seed: u64,
    reader: Reader,
) -> Result<Value, CliError> {
    let before = disk_counters(client).await?;
    let started = Instant::now();
    let mut measured = measure(client, objects, workload, clients, duration, seed, reader).await?;
    let seconds = started.elapsed().as_secs_f64();
    let after = disk_counters(client).await?;
    measured.latencies.sort();
    let modeled = after.modeled_disks > 0;
    let seeks_per_sec = modeled.then(|| after.seeks.saturating_sub(before.seeks) as f64 / seconds);
    let (pattern, read_bytes) = match workload {
        Workload::Random(size) => ("random", *size),
        Workload::Sequential(size) => ("sequential", *size),
        Workload::Trace(replay) => ("trace", median_read(&replay.reads)),
    };
    Ok(json!({
        "code": config.layout.code.to_string(),
        "stripe_width": config.layout.stripe_width,
        "coupled": config.coupled,
        "cell_bytes": config.layout.cell_bytes,
        "block_bytes": config.layout.block_bytes,
        "pattern": pattern,
        "read_bytes": read_bytes,
        "clients": clients,
        "degraded_cache_bytes": reader.cache,
        "client_link_bytes_per_sec": reader.link,
        "objects": objects.len(),
        "reads": measured.latencies.len(),
        "seconds": seconds,
        "bytes_per_sec": measured.bytes as f64 / seconds,
        "seeks_per_sec": seeks_per_sec,
        "disk_busy_fraction": modeled.then(|| {
            after.busy_us.saturating_sub(before.busy_us) as f64
                / (seconds * 1e6 * after.modeled_disks as f64)
        }),
        "p50_ms": percentile_ms(&measured.latencies, 0.50),
        "p95_ms": percentile_ms(&measured.latencies, 0.95),
        "p99_ms": percentile_ms(&measured.latencies, 0.99),
        "read_amplification": measured.fetched as f64 / measured.bytes.max(1) as f64,
        "fetched_bytes": measured.fetched,
        "cache_hit_bytes": measured.cache_hits,
    }))
}

/// The median length of a trace's reads.
pub(crate) fn median_read(reads: &[weft_client::trace::TracedRead]) -> u64 {
    let mut lengths: Vec<u64> = reads.iter().map(|r| r.length).collect();
    lengths.sort_unstable();
    lengths.get(lengths.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

pub fn run(args: ReadsBenchArgs) -> Result<(), CliError> {
    if args.test.objects == 0 || args.test.object_size == 0 || args.duration == 0 {
        return Err(cli_error!("--objects, --object-size and --duration must be positive"));
    }
    if args.trace.is_none() && args.read_sizes.iter().any(|&s| s == 0 || s > args.test.object_size)
    {
        return Err(cli_error!("every read size must be between 1 byte and --object-size"));
    }
    if args.clients.contains(&0) {
        return Err(cli_error!("--clients must be positive"));
    }
    if args.degraded && args.failed_disks == 0 {
        return Err(cli_error!("--failed-disks must be positive"));
    }
    let workloads: Vec<Workload> = match &args.trace {
        Some(path) => {
            vec![Workload::Trace(Arc::new(Replay::new(weft_client::trace::load(path)?)?))]
        }
        None if args.pattern == "sequential" => {
            args.read_sizes.iter().map(|&s| Workload::Sequential(s as u64)).collect()
        }
        None => args.read_sizes.iter().map(|&s| Workload::Random(s as u64)).collect(),
    };
    // The cache only matters when something is rebuilt.
    let caches =
        if args.degraded { args.degraded_cache.clone() } else { vec![args.degraded_cache[0]] };
    let configs = configs(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let client = args.meta.cluster()?;
    let machine = args.json || args.json_lines;
    let mut all_rows = Vec::new();
    runtime.block_on(async {
        let sizes = test_sizes(&args.test, &workloads[0]);
        let mut prepared = Vec::new();
        for config in &configs {
            prepared.push(prepare_objects(&client, &args.test.bucket, &sizes, config).await?);
        }
        // Per configuration, the disks that count as failed (holding its data).
        let mut failed = Vec::new();
        for objects in &mut prepared {
            let disks = if args.degraded {
                disks_to_fail(objects, args.seed, args.failed_disks)
            } else {
                Vec::new()
            };
            if disks.len() < args.failed_disks && args.degraded {
                return Err(cli_error!(
                    "--failed-disks {}: only {} disks hold data of the objects",
                    args.failed_disks,
                    disks.len()
                ));
            }
            disks.iter().for_each(|&disk| fail_disk(objects, disk));
            failed.push(disks);
        }
        let mut rows = crate::rows::JsonRows::new(args.json_lines);
        if !machine {
            println!(
                "{:<14} {:>6} {:>8} {:>10} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}",
                "code",
                "width",
                "coupled",
                "read",
                "clients",
                "reads",
                "MB/s",
                "seeks/s",
                "p50 ms",
                "p99 ms",
                "ampl"
            );
        }
        let duration = Duration::from_millis(args.duration);
        for ((config, objects), failed) in configs.iter().zip(&prepared).zip(&failed) {
            if !machine && !failed.is_empty() {
                let disks: Vec<String> =
                    failed.iter().map(|(node, disk)| format!("node {node} disk {disk}")).collect();
                println!(
                    "{} w={}: failed (degraded reads): {}",
                    config.layout.code,
                    config.layout.stripe_width,
                    disks.join(", ")
                );
            }
            for workload in &workloads {
                for &cache in &caches {
                    for &clients in &args.clients {
                        let mut row = measure_row(
                            &client,
                            config,
                            objects,
                            workload,
                            clients,
                            duration,
                            args.seed,
                            Reader { cache, link: args.client_link },
                        )
                        .await?;
                        row["degraded"] = json!(args.degraded);
                        row["failed_disks"] = failed
                            .iter()
                            .map(|(node, disk)| json!({"node": node, "disk": disk}))
                            .collect();
                        if machine {
                            rows.push(&row);
                        } else {
                            print_row(&row, caches.len() > 1);
                        }
                        all_rows.push(row);
                    }
                }
            }
        }
        if machine {
            rows.finish();
        }
        Ok::<_, CliError>(())
    })?;
    if let Some(path) = &args.plot {
        reads_chart(&all_rows, args.read_sizes.len() > 1 || args.clients.len() == 1).write(path)?;
    }
    Ok(())
}

/// The chart of `--plot`: throughput and p99 against the read size (`by_size`) or the load
/// level, one line per layout (and cache size when several were measured).
pub(crate) fn reads_chart(rows: &[Value], by_size: bool) -> crate::plot::Chart {
    let name = |row: &Value| {
        let mut name = format!("{} w={}", row["code"].as_str().unwrap_or("?"), row["stripe_width"]);
        if row["coupled"] == true {
            name.push_str(" coupled");
        }
        if row["degraded"] == true {
            let cache = row["degraded_cache_bytes"].as_u64().unwrap_or(0);
            name.push_str(&format!(" cache {}", crate::cluster_cli::format_size(cache)));
        }
        name
    };
    let x = |row: &Value| {
        if by_size {
            row["read_bytes"].as_f64().unwrap_or(f64::NAN) / (1u64 << 20) as f64
        } else {
            row["clients"].as_f64().unwrap_or(f64::NAN)
        }
    };
    let points = |field: &str, scale: f64| -> Vec<(String, f64, f64)> {
        rows.iter()
            .map(|row| (name(row), x(row), row[field].as_f64().unwrap_or(f64::NAN) * scale))
            .collect()
    };
    let degraded = rows.first().is_some_and(|r| r["degraded"] == true);
    crate::plot::Chart {
        title: format!(
            "weft bench reads{}",
            if degraded { " (degraded: one disk failed)" } else { "" }
        ),
        x_label: if by_size { "read size (MiB)".into() } else { "concurrent clients".into() },
        x_log: true,
        x_names: Vec::new(),
        panels: vec![
            crate::plot::Panel::from_points("throughput (MB/s)", points("bytes_per_sec", 1e-6)),
            crate::plot::Panel::from_points("p99 latency (ms)", points("p99_ms", 1.0)),
        ],
    }
}

fn print_row(row: &Value, with_cache: bool) {
    let number = |name: &str| row[name].as_f64().unwrap_or(f64::NAN);
    let cache = with_cache.then(|| {
        let bytes = row["degraded_cache_bytes"].as_u64().unwrap_or(0);
        format!(" (cache {})", crate::cluster_cli::format_size(bytes))
    });
    println!(
        "{:<14} {:>6} {:>8} {:>10} {:>7} {:>10} {:>10.1} {:>8} {:>8.1} {:>8.1} {:>6.2}{}",
        row["code"].as_str().unwrap_or("?"),
        row["stripe_width"],
        if row["coupled"] == true { "yes" } else { "no" },
        crate::cluster_cli::format_size(row["read_bytes"].as_u64().unwrap_or(0)),
        row["clients"],
        row["reads"],
        number("bytes_per_sec") / 1e6,
        row["seeks_per_sec"].as_f64().map_or("-".into(), |s| format!("{s:.1}")),
        number("p50_ms"),
        number("p99_ms"),
        number("read_amplification"),
        cache.unwrap_or_default(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_client::trace::TracedRead;

    fn traced(key: &str, offset: u64, length: u64, size: Option<u64>) -> TracedRead {
        TracedRead {
            timestamp: 1.0,
            bucket: "app".into(),
            key: key.into(),
            offset,
            length,
            object_size: size,
        }
    }

    #[test]
    fn a_trace_with_sizes_replays_on_its_own_objects_and_one_without_on_the_test_objects() {
        let reads = vec![
            traced("b", 0, 12_000_000, Some(12_000_000)),
            traced("a", 4096, 100, Some(8_000_000)),
            traced("b", 0, 12_000_000, Some(12_000_000)),
            // The same key read past its earlier recorded size (it was rewritten larger).
            traced("a", 9_000_000, 1000, Some(9_001_000)),
        ];
        let replay = Replay::new(reads.clone()).unwrap();
        assert_eq!(replay.object_of, Some(vec![0, 1, 0, 1]));
        assert_eq!(replay.sizes, Some(vec![12_000_000, 9_001_000]));
        let test = TestObjects { objects: 3, object_size: 100, bucket: "x".into() };
        let workload = Workload::Trace(Arc::new(replay));
        assert_eq!(test_sizes(&test, &workload), [12_000_000, 9_001_000]);
        // One read without a size: the whole trace maps onto --objects of --object-size.
        let mut partial = reads;
        partial[2].object_size = None;
        let replay = Replay::new(partial).unwrap();
        assert!(replay.object_of.is_none() && replay.sizes.is_none());
        assert_eq!(test_sizes(&test, &Workload::Trace(Arc::new(replay))), [100, 100, 100]);
        assert!(Replay::new(Vec::new()).is_err(), "an empty trace is refused");
    }

    #[test]
    fn content_is_the_same_however_it_is_cut() {
        let mut whole = vec![0u8; 100];
        fill(3, 1000, &mut whole);
        let mut piece = vec![0u8; 37];
        fill(3, 1013, &mut piece);
        assert_eq!(&whole[13..50], &piece[..]);
        let mut other = vec![0u8; 100];
        fill(4, 1000, &mut other);
        assert_ne!(whole, other, "objects differ");
        let mut read = Content { object: 3, at: 1000, len: 1100 };
        let mut streamed = vec![0u8; 100];
        std::io::Read::read_exact(&mut read, &mut streamed).unwrap();
        assert_eq!(streamed, whole);
    }

    #[test]
    fn a_sampled_sink_finds_a_wrong_byte_in_its_windows_only() {
        let mut good = vec![0u8; 10_000];
        fill(1, 5000, &mut good);
        let windows = vec![(5000, 5100), (9000, 9100)];
        let mut sink =
            Sampled { object: 1, at: 5000, windows: windows.clone(), wrong: None, written: 0 };
        sink.write_all(&good[..3000]).unwrap();
        sink.write_all(&good[3000..]).unwrap();
        assert_eq!((sink.wrong, sink.written), (None, 10_000));
        let mut bad = good.clone();
        bad[4050] ^= 1; // offset 9050: inside the second window
        let mut sink = Sampled { object: 1, at: 5000, windows, wrong: None, written: 0 };
        sink.write_all(&bad).unwrap();
        assert_eq!(sink.wrong, Some(9000));
    }
}
