//! `weft bench cluster put|get`: object throughput of a running cluster through weft-client.
//!
//! Invariants:
//! - `put` writes `--size` bytes as objects of `--object-size` under `bench/` in the bucket
//!   (created with the policy flags when missing); `get` reads back every object under
//!   `bench/` and checks each against the bytes `put` wrote (the content is a function of the
//!   object's index), so a fast wrong answer is an error, not a figure.
//! - Rates are object (data) bytes per second over the whole run, one object at a time.
//! - Several coders (put) or read modes (get) are measured in one run, interleaved object by
//!   object with the order rotating, so the machine's noise falls on all of them alike; each
//!   is reported with its ratio to the reference (`noop` for put, `blocking` for get): the
//!   ratio of the whole-run rates, and the median over objects of the same-object ratios.
//! - Only the first coder's objects are kept (as `bench/obj-N`, read by `get`); the others
//!   are written under `bench-coders/` and deleted at the end of each round of coders
//!   (untimed): a `noop` object has zero parity and must never be mistaken for a protected
//!   one. Deleting between rounds, not after each put, keeps the deletions' after-effects
//!   from always landing on the same coder.

use std::{
    io::{Cursor, Write},
    sync::Arc,
    time::Instant,
};

use clap::{Args, ValueEnum};
use serde_json::json;
use weft_client::{Client, Coder, PutOptions, ReadMode};

use crate::{cli_error, cluster_cli::MetaUrlArgs, objects_cli::PolicyArgs, parse_size, CliError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterOp {
    /// Write objects.
    Put,
    /// Read back the objects `put` wrote (verifying every byte).
    Get,
}

#[derive(Debug, Args)]
pub struct ClusterBenchArgs {
    /// put or get.
    #[arg(value_enum)]
    pub op: ClusterOp,
    /// Total bytes to write (put).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub size: usize,
    /// Size of each object (put).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub object_size: usize,
    /// Bucket to use (created when missing, with the policy flags as its default policy; on
    /// an existing bucket the flags are each object's own policy).
    #[arg(long, default_value = "bench")]
    pub bucket: String,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Coders to compare (put, comma separated): pipelined (coding on the engine, overlapped
    /// with IO), blocking (coding inline), noop (no parity: the ceiling; benchmarks only).
    #[arg(long, value_delimiter = ',', default_value = "pipelined,blocking,noop")]
    pub coder: Vec<String>,
    /// Read modes to compare (get, comma separated): pipelined, blocking.
    #[arg(long, value_delimiter = ',', default_value = "pipelined,blocking")]
    pub read_mode: Vec<String>,
    /// Print the rows (one per coder or read mode) as one JSON array.
    #[arg(long)]
    pub json: bool,
    /// Print one JSON object per coder or read mode, one per line.
    #[arg(long, conflicts_with = "json")]
    pub json_lines: bool,
    /// Also draw the throughput of each coder or read mode as a bar chart (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
}

impl ClusterBenchArgs {
    /// Whether rows go out as JSON (`--json` or `--json-lines`) rather than a table.
    fn machine(&self) -> bool {
        self.json || self.json_lines
    }

    /// Where the rows go: printed as JSON, or kept silently for `--plot`.
    fn rows(&self) -> crate::rows::JsonRows {
        if self.machine() {
            crate::rows::JsonRows::new(self.json_lines)
        } else {
            crate::rows::JsonRows::silent()
        }
    }

    /// With `--plot`: the rows' throughput per coder (put) or read mode (get).
    fn plot(&self, rows: &crate::rows::JsonRows) -> Result<(), CliError> {
        let Some(path) = &self.plot else { return Ok(()) };
        let name = |row: &serde_json::Value| {
            let name = row.get("coder").or(row.get("read_mode"));
            name.and_then(|n| n.as_str()).unwrap_or("?").to_string()
        };
        crate::plot::Chart::bars(
            &format!(
                "weft bench cluster: {} to bucket {}",
                rows.rows().first().map_or("?", |r| r["op"].as_str().unwrap_or("?")),
                self.bucket
            ),
            "coder (put) or read mode (get)",
            "throughput (MB/s)",
            rows.rows(),
            name,
            |row| row["op"].as_str().unwrap_or("?").to_string(),
            |row| row["bytes_per_sec"].as_f64().unwrap_or(f64::NAN) / 1e6,
        )
        .write(path)
    }
}

/// What one coder or read mode did over the run.
#[derive(Default)]
struct Tally {
    bytes: u64,
    seconds: f64,
    sent_or_fetched: u64,
    peak: u64,
    bound: u64,
    degraded: usize,
    /// Seconds per object, in object order (each object is one round of every coder or mode).
    per_object: Vec<f64>,
}

impl Tally {
    /// Counts one timed object.
    fn time(&mut self, seconds: f64) {
        self.seconds += seconds;
        self.per_object.push(seconds);
    }

    /// The median over objects of this tally's rate ÷ the reference's rate on the same
    /// object: each ratio pairs two puts (or gets) of the same bytes a moment apart, so a burst
    /// of the machine's noise moves one ratio, not the figure.
    fn median_ratio_to(&self, reference: &Tally) -> f64 {
        let mut ratios: Vec<f64> = self
            .per_object
            .iter()
            .zip(&reference.per_object)
            .map(|(s, r)| r / s.max(1e-9))
            .collect();
        crate::bench::median(&mut ratios)
    }
}

/// The content of benchmark object `index`: cheap to generate, different per object.
pub(crate) fn content(index: usize, len: usize) -> Vec<u8> {
    let mut state = (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Read access to shared bytes, for `put_reader`.
struct Shared(Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A writer that compares what it is given with the expected bytes.
struct Check<'a> {
    expected: &'a [u8],
    at: usize,
    mismatch: Option<usize>,
}

impl Write for Check<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.at + buf.len();
        if self.mismatch.is_none()
            && (end > self.expected.len() || self.expected[self.at..end] != *buf)
        {
            self.mismatch = Some(self.at);
        }
        self.at = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn run(args: ClusterBenchArgs) -> Result<(), CliError> {
    if args.object_size == 0 || args.size == 0 {
        return Err(cli_error!("--size and --object-size must be positive"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let client = args.meta.cluster()?;
    runtime.block_on(async {
        match args.op {
            ClusterOp::Put => put(&client, &args).await,
            ClusterOp::Get if !args.policy.overrides()?.is_empty() => Err(cli_error!(
                "policy flags (--code, --k, --r, --stripe-width, --cell, --block) apply to \
                 `bench cluster put`; a get reads the objects as they were written"
            )),
            ClusterOp::Get => get(&client, &args).await,
        }
    })
}

async fn put(client: &Client, args: &ClusterBenchArgs) -> Result<(), CliError> {
    let bucket_path = format!("/v1/buckets/{}", args.bucket);
    // A new bucket takes the flags as its default; on an existing one they are each object's
    // own policy (never ignored).
    let policy = if client.meta.get_json(&bucket_path).await.is_err() {
        let policy = serde_json::Value::Object(args.policy.overrides()?);
        client
            .meta
            .put_json(&bucket_path, policy)
            .await
            .map_err(|e| cli_error!("cannot create bucket {}: {e}", args.bucket))?;
        None
    } else {
        crate::objects_cli::put_policy(client, &args.bucket, &args.policy).await?
    };
    let coders =
        parse_list(&args.coder, Coder::parse, "--coder", "coder", "pipelined, blocking or noop")?;
    let objects = args.size.div_ceil(args.object_size);
    let bar = crate::ec::progress_bar(args.size * coders.len(), args.machine(), "bench put");
    let mut tallies: Vec<Tally> = coders.iter().map(|_| Tally::default()).collect();
    let mut layout = None;
    let mut scratch = Vec::new();
    for index in 0..objects {
        let len = args.object_size.min(args.size - index * args.object_size);
        let data = Arc::new(content(index, len));
        for turn in 0..coders.len() {
            let which = (index + turn) % coders.len();
            let coder = coders[which];
            let key = if which == 0 {
                format!("bench/obj-{index:06}")
            } else {
                format!("bench-coders/{}/obj-{index:06}", coder.name())
            };
            let reader = Cursor::new(Shared(Arc::clone(&data)));
            let options = PutOptions { coder, policy, ..PutOptions::default() };
            // Timed: the put only, not generating the content or deleting.
            let started = Instant::now();
            let stats = client.put_reader(&args.bucket, &key, len as u64, reader, &options).await?;
            let tally = &mut tallies[which];
            tally.time(started.elapsed().as_secs_f64());
            tally.bytes += stats.data_bytes;
            tally.sent_or_fetched += stats.bytes_sent;
            tally.peak = tally.peak.max(stats.peak_buffer_bytes);
            // Objects of one run may differ in size (the last one is the rest), and a small
            // one's bound is its size's: the peak over objects is held to the largest bound.
            tally.bound = tally.bound.max(stats.buffer_bound_bytes);
            layout = Some(stats.object.layout);
            if which != 0 {
                scratch.push(key);
            }
            bar.inc(len as u64);
        }
        // Untimed, between rounds: a deletion's after-effects (the nodes unlinking, the
        // file system's journal) land on whichever put comes next, and the rotation makes
        // that each coder in turn.
        for key in scratch.drain(..) {
            client.delete_object(&args.bucket, &key).await?;
        }
    }
    bar.finish_and_clear();
    let reference = coders.iter().position(|&c| c == Coder::Noop);
    let rate = |t: &Tally| t.bytes as f64 / t.seconds.max(1e-9);
    let mut rows = args.rows();
    for (coder, tally) in coders.iter().zip(&tallies) {
        let ratio = reference.map(|r| rate(tally) / rate(&tallies[r]));
        let paired = reference.map(|r| tally.median_ratio_to(&tallies[r]));
        report(
            args,
            &mut rows,
            "put",
            objects,
            tally.bytes,
            tally.seconds,
            json!({
                "coder": coder.name(), "ratio_to_noop": ratio,
                "median_object_ratio_to_noop": paired,
                "bytes_sent": tally.sent_or_fetched, "peak_buffer_bytes": tally.peak,
                "buffer_bound_bytes": tally.bound, "layout": layout,
            }),
        )?;
    }
    rows.finish();
    args.plot(&rows)?;
    Ok(())
}

async fn get(client: &Client, args: &ClusterBenchArgs) -> Result<(), CliError> {
    let mut keys = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = client.meta.list_objects(&args.bucket, "bench/", after.as_deref(), 1000).await?;
        for object in page["objects"].as_array().into_iter().flatten() {
            keys.push(object["key"].as_str().unwrap_or_default().to_string());
        }
        match page["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    if keys.is_empty() {
        return Err(cli_error!(
            "bucket {} has no bench/ objects; run `weft bench cluster put` first",
            args.bucket
        ));
    }
    let modes = parse_list(
        &args.read_mode,
        ReadMode::parse,
        "--read-mode",
        "read mode",
        "pipelined or blocking",
    )?;
    let mut tallies: Vec<Tally> = modes.iter().map(|_| Tally::default()).collect();
    // One client per mode, without a degraded-read cache: the mode reading an object second
    // must not be served what the first one rebuilt.
    let clients: Vec<Client> = modes.iter().map(|_| client.with_degraded_cache(0)).collect();
    for (position, key) in keys.iter().enumerate() {
        let index: usize = key
            .strip_prefix("bench/obj-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| cli_error!("unexpected key {key} under bench/"))?;
        let object = client.meta.get_object(&args.bucket, key).await?;
        let expected = content(index, object.size as usize);
        for turn in 0..modes.len() {
            let which = (position + turn) % modes.len();
            let mut check = Check { expected: &expected, at: 0, mismatch: None };
            let started = Instant::now();
            let stats = clients[which]
                .get_object_range_with(object.clone(), None, &mut check, None, modes[which])
                .await?;
            let tally = &mut tallies[which];
            tally.time(started.elapsed().as_secs_f64());
            if let Some(at) = check.mismatch.or((check.at != expected.len()).then_some(check.at)) {
                return Err(cli_error!(
                    "{}/{key}: wrong bytes from offset {at} ({} read)",
                    args.bucket,
                    modes[which].name()
                ));
            }
            tally.bytes += stats.bytes;
            tally.sent_or_fetched += stats.bytes_fetched;
            tally.degraded += stats.degraded_units.len();
        }
    }
    let reference = modes.iter().position(|&m| m == ReadMode::Blocking);
    let rate = |t: &Tally| t.bytes as f64 / t.seconds.max(1e-9);
    let mut rows = args.rows();
    for (mode, tally) in modes.iter().zip(&tallies) {
        let ratio = reference.map(|r| rate(tally) / rate(&tallies[r]));
        let paired = reference.map(|r| tally.median_ratio_to(&tallies[r]));
        report(
            args,
            &mut rows,
            "get",
            keys.len(),
            tally.bytes,
            tally.seconds,
            json!({
                "read_mode": mode.name(), "ratio_to_blocking": ratio,
                "median_object_ratio_to_blocking": paired,
                "bytes_fetched": tally.sent_or_fetched, "degraded_units": tally.degraded,
                "verified": true,
            }),
        )?;
    }
    rows.finish();
    args.plot(&rows)?;
    Ok(())
}

fn report(
    args: &ClusterBenchArgs,
    rows: &mut crate::rows::JsonRows,
    op: &str,
    objects: usize,
    bytes: u64,
    seconds: f64,
    extra: serde_json::Value,
) -> Result<(), CliError> {
    let rate = bytes as f64 / seconds;
    let mut value = json!({
        "op": op, "bucket": args.bucket, "objects": objects, "bytes": bytes,
        "seconds": seconds, "bytes_per_sec": rate as u64,
    });
    if let (Some(out), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        out.extend(extra.clone());
    }
    rows.push(&value);
    if !args.machine() {
        println!(
            "bench cluster {op}: {objects} objects, {} in {seconds:.2} s = {}/s",
            crate::cluster_cli::format_size(bytes),
            crate::cluster_cli::format_size(rate as u64)
        );
        for (key, v) in extra.as_object().into_iter().flatten() {
            println!("  {key:<32} {}", human_value(key, v));
        }
    }
    Ok(())
}

/// A row's value for people: sizes for `*_bytes`, ratios to two places, strings bare, a
/// layout as `rs(6,3), stripe width 2, 1 MiB cells, 8 MiB blocks`.
fn human_value(key: &str, value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".into(),
        Value::Number(n) if key.ends_with("_bytes") => {
            n.as_u64().map_or_else(|| n.to_string(), crate::cluster_cli::format_size)
        }
        Value::Number(n) if n.is_f64() => format!("{:.2}", n.as_f64().unwrap_or(0.0)),
        Value::Array(items) if items.is_empty() => "none".into(),
        Value::Array(items) => {
            items.iter().map(|i| human_value(key, i)).collect::<Vec<_>>().join(", ")
        }
        Value::Object(fields) if fields.contains_key("code") => format!(
            "{}, stripe width {}, {} cells, {} blocks",
            human_value("code", &fields["code"]),
            fields.get("stripe_width").map_or("?".into(), |w| w.to_string()),
            human_value("cell_bytes", fields.get("cell_bytes").unwrap_or(&Value::Null)),
            human_value("block_bytes", fields.get("block_bytes").unwrap_or(&Value::Null)),
        ),
        other => other.to_string(),
    }
}

/// The values of a comma-separated option (`flag`, naming `what`s), each parsed; an unknown
/// value or none at all is an error naming the accepted ones (`choices`).
fn parse_list<T>(
    values: &[String],
    parse: impl Fn(&str) -> Option<T>,
    flag: &str,
    what: &str,
    choices: &str,
) -> Result<Vec<T>, CliError> {
    let parsed = values
        .iter()
        .map(|v| parse(v).ok_or_else(|| cli_error!("{v:?} is not a {what}; use {choices}")))
        .collect::<Result<Vec<_>, _>>()?;
    if parsed.is_empty() {
        return Err(cli_error!("{flag} names no {what}"));
    }
    Ok(parsed)
}
