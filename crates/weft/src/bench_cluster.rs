//! `weft bench cluster put|get`: object throughput of a running cluster through weft-client.
//!
//! Invariants:
//! - `put` writes `--size` bytes as objects of `--object-size` under `bench/` in the bucket
//!   (created with the policy flags when missing); `get` reads back every object under
//!   `bench/` and checks each against the bytes `put` wrote (the content is a function of the
//!   object's index), so a fast wrong answer is an error, not a figure.
//! - Rates are object (data) bytes per second over the whole run, one object at a time.

use std::{
    io::{Cursor, Write},
    sync::Arc,
    time::Instant,
};

use clap::{Args, ValueEnum};
use serde_json::json;
use weft_client::{Client, PutOptions};

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
    /// Bucket to use (created when missing, with the policy flags as its default policy).
    #[arg(long, default_value = "bench")]
    pub bucket: String,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The content of benchmark object `index`: cheap to generate, different per object.
fn content(index: usize, len: usize) -> Vec<u8> {
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
    let client = Client::new(&args.meta.url()?)?;
    runtime.block_on(async {
        match args.op {
            ClusterOp::Put => put(&client, &args).await,
            ClusterOp::Get => get(&client, &args).await,
        }
    })
}

async fn put(client: &Client, args: &ClusterBenchArgs) -> Result<(), CliError> {
    let bucket_path = format!("/v1/buckets/{}", args.bucket);
    if client.meta.get_json(&bucket_path).await.is_err() {
        let policy = serde_json::Value::Object(args.policy.overrides()?);
        let url = format!("{}{bucket_path}", client.meta.url());
        let response = reqwest::Client::new()
            .put(&url)
            .json(&policy)
            .send()
            .await
            .map_err(|e| cli_error!("cannot create bucket {}: {e}", args.bucket))?;
        if !response.status().is_success() {
            return Err(cli_error!(
                "cannot create bucket {}: {}",
                args.bucket,
                response.text().await.unwrap_or_default()
            ));
        }
    }
    let objects = args.size.div_ceil(args.object_size);
    let bar = crate::ec::progress_bar(args.size, args.json, "bench put");
    let (mut total, mut sent, mut peak, mut bound) = (0u64, 0u64, 0u64, 0u64);
    let mut layout = None;
    // Timed: the puts only, not generating the content.
    let mut elapsed = std::time::Duration::ZERO;
    for index in 0..objects {
        let len = args.object_size.min(args.size - index * args.object_size);
        let data = Arc::new(content(index, len));
        let reader = Cursor::new(Shared(Arc::clone(&data)));
        let generated = Instant::now();
        let stats = client
            .put_reader(
                &args.bucket,
                &format!("bench/obj-{index:06}"),
                len as u64,
                reader,
                &PutOptions::default(),
            )
            .await?;
        elapsed += generated.elapsed();
        total += stats.data_bytes;
        sent += stats.bytes_sent;
        peak = peak.max(stats.peak_buffer_bytes);
        bound = stats.buffer_bound_bytes;
        layout = Some(stats.object.layout);
        bar.inc(len as u64);
    }
    bar.finish_and_clear();
    let seconds = elapsed.as_secs_f64().max(1e-9);
    report(
        args,
        "put",
        objects,
        total,
        seconds,
        json!({
            "bytes_sent": sent, "peak_buffer_bytes": peak, "buffer_bound_bytes": bound, "layout": layout,
        }),
    )
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
    let (mut total, mut fetched, mut degraded) = (0u64, 0u64, 0usize);
    let mut elapsed = std::time::Duration::ZERO;
    for key in &keys {
        let index: usize = key
            .strip_prefix("bench/obj-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| cli_error!("unexpected key {key} under bench/"))?;
        let object = client.meta.get_object(&args.bucket, key).await?;
        let expected = content(index, object.size as usize);
        let mut check = Check { expected: &expected, at: 0, mismatch: None };
        let started = Instant::now();
        let stats = client.get_object_range(object, None, &mut check, None).await?;
        elapsed += started.elapsed();
        if let Some(at) = check.mismatch.or((check.at != expected.len()).then_some(check.at)) {
            return Err(cli_error!("{}/{key}: wrong bytes from offset {at}", args.bucket));
        }
        total += stats.bytes;
        fetched += stats.bytes_fetched;
        degraded += stats.degraded_units.len();
    }
    let seconds = elapsed.as_secs_f64().max(1e-9);
    report(
        args,
        "get",
        keys.len(),
        total,
        seconds,
        json!({
            "bytes_fetched": fetched, "degraded_units": degraded, "verified": true,
        }),
    )
}

fn report(
    args: &ClusterBenchArgs,
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
    if args.json {
        crate::cluster_cli::print_json(&value);
    } else {
        println!(
            "bench cluster {op}: {objects} objects, {} in {seconds:.2} s = {}/s",
            crate::cluster_cli::format_size(bytes),
            crate::cluster_cli::format_size(rate as u64)
        );
        for (key, v) in extra.as_object().into_iter().flatten() {
            println!("  {key}: {v}");
        }
    }
    Ok(())
}
