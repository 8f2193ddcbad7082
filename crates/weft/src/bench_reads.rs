//! `weft bench reads`: Okapi's read experiments (§6.2, Fig. 5 and 13) on a running cluster —
//! best under the hardware model (`weft up --disk-model hdd`), where a read's cost is the
//! seeks and transfers of the disks it touches.
//!
//! For each configuration — the code at each `--stripe-widths` (decoupled), and rs(k, r) at
//! stripe width k for each `--coupled` k — `--objects` objects of `--object-size` are written
//! once (kept under `reads/` in the bucket and reused by later runs with the same layout).
//! Then for each read size and each `--clients` level, that many concurrent clients read for
//! `--duration`, each read `read size` bytes at a random cell-aligned offset of a random
//! object. A row reports throughput, latency percentiles, seeks per second (from every node's
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
    /// Objects per configuration.
    #[arg(long, default_value_t = 4)]
    pub objects: usize,
    /// Size of each object.
    #[arg(long, default_value = "384MiB", value_parser = parse_size)]
    pub object_size: usize,
    /// Bucket to keep the objects in (created when missing).
    #[arg(long, default_value = "bench-reads")]
    pub bucket: String,
    /// Seed of the clients' random offsets (runs with the same seed read the same ranges).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the rows as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Print each row as one JSON object per line, as it is measured.
    #[arg(long, conflicts_with = "json")]
    pub json_lines: bool,
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
struct Rng(u64);

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
struct Config {
    layout: StripedLayout,
    coupled: bool,
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

/// Sums of every modeled disk's counters over the cluster's up nodes.
#[derive(Clone, Copy, Default)]
struct DiskCounters {
    seeks: u64,
    busy_us: u64,
    modeled_disks: usize,
}

async fn disk_counters(client: &Client) -> Result<DiskCounters, CliError> {
    let nodes = client.meta.get_json("/v1/nodes").await?;
    let mut sum = DiskCounters::default();
    for node in nodes["nodes"].as_array().into_iter().flatten() {
        let (Some(id), Some(endpoint)) = (node["id"].as_u64(), node["endpoint"].as_str()) else {
            continue;
        };
        // A node that does not answer (down) has nothing to count.
        let Ok(health) = client.nodes.health(id as u32, endpoint).await else { continue };
        for disk in health["disks"].as_array().into_iter().flatten() {
            if let Some(model) = disk.get("model") {
                sum.seeks += model["seeks"].as_u64().unwrap_or(0);
                sum.busy_us += model["busy_us"].as_u64().unwrap_or(0);
                sum.modeled_disks += 1;
            }
        }
    }
    Ok(sum)
}

/// The layouts to measure.
fn configs(args: &ReadsBenchArgs) -> Result<Vec<Config>, CliError> {
    let spec = args.code.spec()?;
    let layout = |code: weft_codes::CodeSpec, width: usize| -> Result<StripedLayout, CliError> {
        let layout: StripedLayout = serde_json::from_value(json!({
            "code": code.to_string(), "stripe_width": width,
            "cell_bytes": args.cell, "block_bytes": args.block,
        }))
        .map_err(|e| cli_error!("bad layout: {e}"))?;
        layout.validate().map_err(|e| cli_error!("{code} with stripe width {width}: {e}"))?;
        Ok(layout)
    };
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

/// Writes the configuration's objects unless they are there with this layout and size.
async fn prepare(
    client: &Client,
    args: &ReadsBenchArgs,
    config: &Config,
) -> Result<Vec<ObjectInfo>, CliError> {
    let mut objects = Vec::new();
    for index in 0..args.objects {
        let key = format!("{}/obj-{index:04}", config.prefix());
        match client.meta.get_object(&args.bucket, &key).await {
            Ok(object)
                if object.layout == config.layout && object.size == args.object_size as u64 =>
            {
                objects.push(object);
                continue;
            }
            _ => {}
        }
        let content = Content { object: index as u64, at: 0, len: args.object_size as u64 };
        let options = PutOptions { policy: Some(config.layout), ..PutOptions::default() };
        let stats = client
            .put_reader(&args.bucket, &key, args.object_size as u64, content, &options)
            .await?;
        objects.push(stats.object);
    }
    Ok(objects)
}

/// What the clients of one run measured.
#[derive(Default)]
struct Measured {
    latencies: Vec<Duration>,
    bytes: u64,
    fetched: u64,
}

/// `clients` readers for `duration`, each reading `size` bytes at random cell-aligned offsets.
async fn measure(
    client: &Client,
    objects: &[ObjectInfo],
    size: u64,
    clients: usize,
    duration: Duration,
    seed: u64,
) -> Result<Measured, CliError> {
    let objects = Arc::new(objects.to_vec());
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for reader in 0..clients {
        let (client, objects) = (client.clone(), Arc::clone(&objects));
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(seed ^ (reader as u64 + 1) << 32);
            let mut measured = Measured::default();
            while Instant::now() < deadline {
                let which = rng.below(objects.len() as u64) as usize;
                let object = &objects[which];
                let cell = object.layout.cell_bytes;
                let len = size.min(object.size);
                let cells = (object.size - len) / cell + 1;
                let offset = rng.below(cells) * cell;
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
                let mut sink =
                    Sampled { object: index, at: offset, windows, wrong: None, written: 0 };
                let started = Instant::now();
                let stats = client
                    .get_object_range(object.clone(), Some((offset, len)), &mut sink, None)
                    .await?;
                measured.latencies.push(started.elapsed());
                if let Some(at) = sink.wrong {
                    return Err(cli_error!("{}: wrong bytes at offset {at}", object.key));
                }
                if sink.written != len {
                    return Err(cli_error!("{}: {} of {len} bytes", object.key, sink.written));
                }
                measured.bytes += len;
                measured.fetched += stats.bytes_fetched;
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
    }
    Ok(all)
}

fn percentile_ms(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at].as_secs_f64() * 1000.0
}

pub fn run(args: ReadsBenchArgs) -> Result<(), CliError> {
    if args.objects == 0 || args.object_size == 0 || args.duration == 0 {
        return Err(cli_error!("--objects, --object-size and --duration must be positive"));
    }
    if args.read_sizes.iter().any(|&s| s == 0 || s > args.object_size) {
        return Err(cli_error!("every read size must be between 1 byte and --object-size"));
    }
    if args.clients.contains(&0) {
        return Err(cli_error!("--clients must be positive"));
    }
    let configs = configs(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let client = args.meta.cluster()?;
    let machine = args.json || args.json_lines;
    runtime.block_on(async {
        if client.meta.get_bucket(&args.bucket).await.is_err() {
            client.meta.create_bucket(&args.bucket, None).await?;
        }
        let mut rows = crate::rows::JsonRows::new(args.json_lines);
        if !machine {
            println!(
                "{:<14} {:>6} {:>8} {:>10} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8} {:>6}",
                "code", "width", "coupled", "read", "clients", "reads", "MB/s", "seeks/s",
                "p50 ms", "p99 ms", "ampl"
            );
        }
        for config in &configs {
            let objects = prepare(&client, &args, config).await?;
            for &size in &args.read_sizes {
                for &clients in &args.clients {
                    let before = disk_counters(&client).await?;
                    let started = Instant::now();
                    let duration = Duration::from_millis(args.duration);
                    let mut measured =
                        measure(&client, &objects, size as u64, clients, duration, args.seed)
                            .await?;
                    let seconds = started.elapsed().as_secs_f64();
                    let after = disk_counters(&client).await?;
                    measured.latencies.sort();
                    let modeled = after.modeled_disks > 0;
                    let seeks_per_sec =
                        modeled.then(|| after.seeks.saturating_sub(before.seeks) as f64 / seconds);
                    let row = json!({
                        "code": config.layout.code.to_string(),
                        "stripe_width": config.layout.stripe_width,
                        "coupled": config.coupled,
                        "cell_bytes": config.layout.cell_bytes,
                        "block_bytes": config.layout.block_bytes,
                        "read_bytes": size,
                        "clients": clients,
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
                    });
                    if machine {
                        rows.push(&row);
                    } else {
                        print_row(&row);
                    }
                }
            }
        }
        if machine {
            rows.finish();
        }
        Ok::<_, CliError>(())
    })
}

fn print_row(row: &Value) {
    let number = |name: &str| row[name].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<14} {:>6} {:>8} {:>10} {:>7} {:>10} {:>10.1} {:>8} {:>8.1} {:>8.1} {:>6.2}",
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
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
