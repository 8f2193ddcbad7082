//! `weft put|get|ls|rm|stat`: objects on a running cluster, through weft-client.
//!
//! Invariants:
//! - Meta is found like every cluster command finds it (`--meta`, `$WEFT_META`, default).
//! - `put` prints success only after meta committed the object (every unit durable).
//! - `get -o FILE` writes FILE atomically (temporary file, fsync, rename): a failed get never
//!   leaves a partial FILE. A FILE that is a device, FIFO or socket (`-o /dev/null`) is written
//!   through, never replaced. Without `-o` the bytes go to stdout, so `--json` then needs `-o`.
//! - `--json` prints exactly one JSON object on stdout; messages and progress go to stderr.
//! - `stat` shows the units meta reports unfound (`unfound_units`) on a line of their own,
//!   with what can be done about them.

use std::{
    io::{IsTerminal, Write},
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use clap::Args;
use serde_json::{json, Map, Value};
use weft_client::{Client, ObjectInfo, PutOptions};
use weft_layout::{StripedLayout, UnitId};

use crate::{cli_error, cluster_cli::MetaUrlArgs, parse_size, CliError, CodeArgs};

/// Policy flags: each given flag overrides the bucket's default policy.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    #[command(flatten)]
    pub code: CodeArgs,
    /// Data blocks per stripe: how many blocks consecutive cells are spread across.
    #[arg(long)]
    pub stripe_width: Option<u32>,
    /// Cell: the striping unit, e.g. 1MiB.
    #[arg(long, value_parser = parse_size)]
    pub cell: Option<usize>,
    /// Block: the piece of an object on one disk, a multiple of the cell, e.g. 8MiB.
    #[arg(long, value_parser = parse_size)]
    pub block: Option<usize>,
}

impl PolicyArgs {
    /// Only the fields the user gave, as meta's policy JSON (meta or the bucket fills the rest).
    pub fn overrides(&self) -> Result<Map<String, Value>, CliError> {
        let code = &self.code;
        let code_given = [code.k, code.r, code.d, code.l, code.g].iter().any(Option::is_some)
            || !code.code.trim().eq_ignore_ascii_case("rs");
        let mut policy = Map::new();
        if code_given {
            policy.insert("code".into(), json!(code.spec()?.to_string()));
        }
        if let Some(width) = self.stripe_width {
            policy.insert("stripe_width".into(), json!(width));
        }
        if let Some(cell) = self.cell {
            policy.insert("cell_bytes".into(), json!(cell));
        }
        if let Some(block) = self.block {
            policy.insert("block_bytes".into(), json!(block));
        }
        Ok(policy)
    }
}

/// `BUCKET/KEY` → (bucket, key).
fn split_path(path: &str) -> Result<(String, String), CliError> {
    match path.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => {
            Ok((bucket.to_string(), key.to_string()))
        }
        _ => Err(cli_error!("{path:?} is not BUCKET/KEY (for example photos/cat.jpg)")),
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))
}

pub(crate) fn client(meta: &MetaUrlArgs) -> Result<Client, CliError> {
    meta.cluster()
}

/// A progress bar on stderr for long transfers (hidden when not a terminal or with --json).
pub(crate) fn progress(
    total: u64,
    json: bool,
    message: &'static str,
) -> (indicatif::ProgressBar, Arc<AtomicU64>) {
    let bar = crate::ec::progress_bar(total as usize, json, message);
    (bar, Arc::new(AtomicU64::new(0)))
}

/// Runs `work` while a ticker copies `counter` into `bar`.
pub(crate) fn with_progress<T>(
    runtime: &tokio::runtime::Runtime,
    bar: &indicatif::ProgressBar,
    counter: &Arc<AtomicU64>,
    work: impl std::future::Future<Output = T>,
) -> T {
    runtime.block_on(async {
        let ticker = {
            let (bar, counter) = (bar.clone(), Arc::clone(counter));
            tokio::spawn(async move {
                loop {
                    bar.set_position(counter.load(Ordering::Relaxed));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let out = work.await;
        ticker.abort();
        bar.finish_and_clear();
        out
    })
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// The file to store; `-` reads standard input to its end. Pipes, FIFOs and `<(…)`
    /// work too: input without a size up front is taken whole first (in memory up to 16 MiB,
    /// beyond that in an unnamed file in $TMPDIR), then placed.
    pub file: PathBuf,
    /// Where: BUCKET/KEY.
    pub path: String,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Print bytes sent, peak client buffer (with the bound and the naive figure) and time.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The layout for a put: the bucket's default policy with the flags given on top.
pub(crate) async fn put_policy(
    client: &Client,
    bucket: &str,
    policy: &PolicyArgs,
) -> Result<Option<StripedLayout>, CliError> {
    let overrides = policy.overrides()?;
    if overrides.is_empty() {
        return Ok(None);
    }
    let record = client
        .meta
        .get_json(&format!("/v1/buckets/{}", weft_client::meta::encode_path(bucket)))
        .await?;
    let mut layout = record["default_policy"].clone();
    let Some(fields) = layout.as_object_mut() else {
        return Err(cli_error!("meta sent bucket {bucket} without a default policy"));
    };
    fields.extend(overrides);
    let layout: StripedLayout =
        serde_json::from_value(layout).map_err(|e| cli_error!("bad policy flags: {e}"))?;
    layout.validate().map_err(|e| cli_error!("invalid policy: {e}"))?;
    Ok(Some(layout))
}

pub fn put(args: PutArgs) -> Result<(), CliError> {
    let (bucket, key) = split_path(&args.path)?;
    let stdin = args.file.as_os_str() == "-";
    // A missing file never starts a write; a directory is refused by put_file before its
    // begin; only a regular file has a size to show progress against.
    let size = if stdin {
        None
    } else {
        let metadata = std::fs::metadata(&args.file)
            .map_err(|e| cli_error!("cannot read {}: {e}", args.file.display()))?;
        metadata.is_file().then_some(metadata.len())
    };
    let runtime = runtime()?;
    let client = client(&args.meta)?;
    let policy = runtime.block_on(put_policy(&client, &bucket, &args.policy))?;
    // Without a size up front there is nothing to measure progress against.
    let (bar, counter) = progress(size.unwrap_or(0), args.json || size.is_none(), "put");
    let options =
        PutOptions { policy, progress: Some(Arc::clone(&counter)), ..PutOptions::default() };
    let stats = if stdin {
        with_progress(
            &runtime,
            &bar,
            &counter,
            client.put_unsized(&bucket, &key, std::io::stdin(), &options),
        )?
    } else {
        with_progress(
            &runtime,
            &bar,
            &counter,
            client.put_file(&bucket, &key, &args.file, &options),
        )?
    };
    let seconds = stats.elapsed.as_secs_f64().max(1e-9);
    let layout = stats.object.layout;
    let value = json!({
        "bucket": bucket, "key": key, "size": stats.data_bytes,
        "generation": stats.object.generation, "layout": layout, "units": stats.units,
        "bytes_sent": stats.bytes_sent, "data_bytes": stats.data_bytes,
        "parity_bytes": stats.parity_bytes,
        "peak_buffer_bytes": stats.peak_buffer_bytes,
        "buffer_bound_bytes": stats.buffer_bound_bytes,
        "okapi_buffer_bytes": stats.okapi_buffer_bytes,
        "naive_buffer_bytes": stats.naive_buffer_bytes,
        "elapsed_ms": stats.elapsed.as_millis() as u64,
        "bytes_per_sec": (stats.data_bytes as f64 / seconds) as u64,
        "leftover_units": stats.leftover_units,
        "spooled_bytes": stats.spooled_bytes,
    });
    if args.json {
        crate::cluster_cli::print_json(&value);
        return Ok(());
    }
    if let Some(raidp) = &stats.object.raidp {
        println!(
            "put {bucket}/{key}: {} as raidp (two replicas, {} superchunk extents), generation {}",
            fmt(stats.data_bytes),
            raidp.extents.len(),
            stats.object.generation
        );
    } else {
        println!(
            "put {bucket}/{key}: {} as {} (stripe width {}, cell {}, block {}), {} units, generation {}",
            fmt(stats.data_bytes), layout.code, layout.stripe_width, fmt(layout.cell_bytes),
            fmt(layout.block_bytes), stats.units, stats.object.generation
        );
    }
    if args.stats {
        println!(
            "  bytes sent           {} ({} data + {} parity)",
            fmt(stats.bytes_sent),
            fmt(stats.data_bytes),
            fmt(stats.parity_bytes)
        );
        println!("  peak client buffer   {} (bound {}; Okapi r·B + k·C = {}; naive group buffering (k+r)·B = {})",
            fmt(stats.peak_buffer_bytes), fmt(stats.buffer_bound_bytes), fmt(stats.okapi_buffer_bytes), fmt(stats.naive_buffer_bytes));
        if stats.spooled_bytes > 0 {
            println!(
                "  spooled              {} (input of unknown length, taken whole in {} first)",
                fmt(stats.spooled_bytes),
                std::env::temp_dir().display()
            );
        }
        println!(
            "  time                 {:.3} s ({}/s)",
            seconds,
            fmt((stats.data_bytes as f64 / seconds) as u64)
        );
    }
    if stats.leftover_units > 0 {
        eprintln!(
            "note: {} units of the replaced object could not be deleted (their nodes are down)",
            stats.leftover_units
        );
    }
    Ok(())
}

fn fmt(bytes: u64) -> String {
    crate::cluster_cli::format_size(bytes)
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// What: BUCKET/KEY.
    pub path: String,
    /// Write to this file (atomically) instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Only bytes a-b (inclusive, like HTTP): `0-99`, `100-` (to the end), `-100` (last 100).
    #[arg(long, allow_hyphen_values = true)]
    pub range: Option<String>,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print what the get did as one JSON object (needs -o).
    #[arg(long)]
    pub json: bool,
    /// Print bytes fetched, the peak memory of this process (with the bound on what the read
    /// path buffers) and time, on stderr (stdout may carry the object).
    #[arg(long)]
    pub stats: bool,
    /// Append this read to a read trace (JSON lines: timestamp, bucket, key, offset, length,
    /// object_size), the input of `weft advise stripe-width --trace`.
    #[arg(long, value_name = "FILE")]
    pub trace_reads: Option<PathBuf>,
}

/// Peak resident memory of this process (VmHWM), when the system reports it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Parses an HTTP-style byte range against an object size into (start, len).
fn parse_range(text: &str, size: u64) -> Result<(u64, u64), CliError> {
    let bad = || {
        cli_error!(
            "--range {text:?} must be a-b, a- or -n with byte offsets (object is {size} bytes)"
        )
    };
    let (a, b) = text.trim().split_once('-').ok_or_else(bad)?;
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    let (start, end) = match (a.trim().is_empty(), b.trim().is_empty()) {
        (false, false) => (number(a)?, number(b)?.min(size.saturating_sub(1))),
        (false, true) => (number(a)?, size.saturating_sub(1)),
        (true, false) => {
            let n = number(b)?.min(size);
            if n == 0 {
                return Err(bad());
            }
            (size - n, size - 1)
        }
        (true, true) => return Err(bad()),
    };
    if start >= size {
        return Err(cli_error!(
            "--range {text:?} starts past the end of the object ({size} bytes)"
        ));
    }
    if start > end {
        return Err(cli_error!("--range {text:?} ends before it starts (a-b needs a ≤ b)"));
    }
    Ok((start, end - start + 1))
}

pub fn get(args: GetArgs) -> Result<(), CliError> {
    let (bucket, key) = split_path(&args.path)?;
    if args.json && args.output.is_none() {
        return Err(cli_error!("--json prints on stdout, so the object needs -o FILE"));
    }
    let runtime = runtime()?;
    let mut client = client(&args.meta)?;
    if let Some(path) = &args.trace_reads {
        client = client.with_read_trace(path)?;
    }
    let object = runtime.block_on(client.meta.get_object(&bucket, &key))?;
    let range = args.range.as_deref().map(|r| parse_range(r, object.size)).transpose()?;
    let packed = object.packed;
    let buffer_bound = match packed {
        true => weft_client::Client::geometric_buffer_bound(&object).unwrap_or(0),
        false => weft_client::read_buffer_bound(&object.layout),
    };
    let total = range.map_or(object.size, |(_, len)| len);
    let (bar, counter) = progress(total, args.json || args.output.is_none(), "get");
    let stats = match &args.output {
        Some(path) if is_special(path) => {
            // A device, FIFO or socket (`-o /dev/null`, `-o >(…)`): written through, never
            // renamed over; it has no contents to keep safe from a failed get.
            let mut target = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| cli_error!("cannot write {}: {e}", path.display()))?;
            with_progress(&runtime, &bar, &counter, {
                let counter = Arc::clone(&counter);
                let client = client.clone();
                let file = &mut target;
                async move { client.get_object_range(object, range, file, Some(&counter)).await }
            })?
        }
        Some(path) => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let mut temp = tempfile_in(dir)?;
            let stats = with_progress(&runtime, &bar, &counter, {
                let counter = Arc::clone(&counter);
                let client = client.clone();
                let file = &mut temp.1;
                async move { client.get_object_range(object, range, file, Some(&counter)).await }
            })?;
            temp.1.sync_all().map_err(|e| cli_error!("cannot sync {}: {e}", temp.0.display()))?;
            std::fs::rename(&temp.0, path)
                .map_err(|e| cli_error!("cannot write {}: {e}", path.display()))?;
            stats
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let stats = runtime.block_on(client.get_object_range(object, range, &mut out, None))?;
            out.flush().map_err(|e| cli_error!("cannot write to stdout: {e}"))?;
            stats
        }
    };
    let degraded: Vec<Value> =
        stats.degraded_units.iter().map(|(u, why)| json!({"unit": u, "cause": why})).collect();
    let peak_rss = peak_rss_bytes();
    if args.json {
        crate::cluster_cli::print_json(&json!({
            "bucket": bucket, "key": key, "bytes": stats.bytes, "bytes_fetched": stats.bytes_fetched,
            "degraded_units": degraded, "elapsed_ms": stats.elapsed.as_millis() as u64,
            "peak_rss_bytes": peak_rss, "buffer_bound_bytes": buffer_bound,
        }));
        return Ok(());
    }
    if args.stats {
        let seconds = stats.elapsed.as_secs_f64().max(1e-9);
        eprintln!(
            "get {bucket}/{key}: {}, {} fetched from nodes",
            fmt(stats.bytes),
            fmt(stats.bytes_fetched)
        );
        if !stats.degraded_units.is_empty() {
            let names: Vec<String> =
                stats.degraded_units.iter().map(|(u, why)| format!("{u} ({why})")).collect();
            eprintln!(
                "  degraded read        rebuilt {} unavailable units on the fly: {}",
                names.len(),
                names.join(", ")
            );
        }
        if let Some(peak) = peak_rss {
            eprintln!(
                "  peak memory          {} resident (the read path buffers at most {}: {})",
                fmt(peak),
                fmt(buffer_bound),
                if packed {
                    "two chunks, one rebuilt with its helpers' bytes, two windows"
                } else {
                    "4 windows and the range cache"
                }
            );
        }
        eprintln!(
            "  time                 {seconds:.3} s ({}/s)",
            fmt((stats.bytes as f64 / seconds) as u64)
        );
    }
    if !args.stats && !stats.degraded_units.is_empty() && std::io::stderr().is_terminal() {
        eprintln!(
            "note: degraded read; rebuilt around {} unavailable units",
            stats.degraded_units.len()
        );
    }
    Ok(())
}

/// Whether `path` exists and is neither a regular file nor a directory (following links): a
/// character or block device, a FIFO or a socket.
fn is_special(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// A temporary file next to the target, removed on drop unless renamed.
fn tempfile_in(dir: &std::path::Path) -> Result<(PathBuf, std::fs::File), CliError> {
    for attempt in 0..100u32 {
        let path = dir.join(format!(".weft-get-{}-{attempt}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(cli_error!("cannot create a file in {}: {e}", dir.display())),
        }
    }
    Err(cli_error!("cannot create a temporary file in {}", dir.display()))
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// BUCKET or BUCKET/PREFIX.
    pub path: String,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print {"objects":[{"key","size","generation"}…]} as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn ls(args: LsArgs) -> Result<(), CliError> {
    let (bucket, prefix) = match args.path.split_once('/') {
        Some((bucket, prefix)) => (bucket.to_string(), prefix.to_string()),
        None => (args.path.clone(), String::new()),
    };
    let runtime = runtime()?;
    let client = client(&args.meta)?;
    let mut objects = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page =
            runtime.block_on(client.meta.list_objects(&bucket, &prefix, after.as_deref(), 1000))?;
        objects.extend(page["objects"].as_array().cloned().unwrap_or_default());
        match page["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    if args.json {
        crate::cluster_cli::print_json(
            &json!({ "bucket": bucket, "prefix": prefix, "objects": objects }),
        );
        return Ok(());
    }
    for object in &objects {
        println!(
            "{:>12}  {}",
            object["size"].as_u64().unwrap_or(0),
            object["key"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    /// What: BUCKET/KEY, a RAIDP object.
    pub path: String,
    /// The file whose bytes replace the object's from --offset on.
    pub file: PathBuf,
    /// Where in the object the new bytes go.
    #[arg(long)]
    pub offset: u64,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print {"path", "offset", "bytes", "bytes_sent", "pieces", "elapsed_seconds"} as one
    /// JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn write(args: WriteArgs) -> Result<(), CliError> {
    let (bucket, key) = split_path(&args.path)?;
    let file = std::fs::File::open(&args.file)
        .map_err(|e| cli_error!("cannot open {}: {e}", args.file.display()))?;
    let len =
        file.metadata().map_err(|e| cli_error!("cannot stat {}: {e}", args.file.display()))?.len();
    let runtime = runtime()?;
    let client = client(&args.meta)?;
    let stats = runtime.block_on(client.raidp_update(&bucket, &key, args.offset, len, file))?;
    if args.json {
        let mut value = serde_json::to_value(&stats).expect("stats serialize");
        value["path"] = json!(args.path);
        value["offset"] = json!(args.offset);
        crate::cluster_cli::print_json(&value);
    } else {
        println!(
            "wrote {} at offset {} of {bucket}/{key} in place ({} piece{}, both replicas)",
            fmt(stats.bytes),
            args.offset,
            stats.pieces,
            if stats.pieces == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// What: BUCKET/KEY.
    pub path: String,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print {"removed": "BUCKET/KEY", "units_left": N} as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn rm(args: RmArgs) -> Result<(), CliError> {
    let (bucket, key) = split_path(&args.path)?;
    let runtime = runtime()?;
    let client = client(&args.meta)?;
    let (deletion, left) = runtime.block_on(client.delete_object(&bucket, &key))?;
    let marker = deletion.delete_marker.as_ref().map(|m| m.version_id.clone());
    match (&deletion.removed, args.json) {
        (Some(object), true) => {
            let mut value = json!({
                "removed": args.path, "size": object.size, "units": object.units.len(), "units_left": left,
            });
            if let Some(marker) = &marker {
                value["delete_marker"] = json!(marker);
            }
            crate::cluster_cli::print_json(&value);
        }
        (None, true) => crate::cluster_cli::print_json(&json!({
            "removed": null, "kept_as_version": args.path, "delete_marker": marker, "units_left": 0,
        })),
        (Some(object), false) => {
            println!("removed {bucket}/{key} ({}, {} units)", fmt(object.size), object.units.len());
            if left > 0 {
                eprintln!("note: {left} units could not be deleted now (their nodes are down)");
            }
        }
        (None, false) => println!(
            "{bucket}/{key}: delete marker {} made; the bucket is versioned, so the object stays \
             as an older version",
            marker.as_deref().unwrap_or("?")
        ),
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct StatArgs {
    /// What: BUCKET/KEY.
    pub path: String,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print meta's object record plus the group view as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Print only the ids of the nodes holding the object's units, one per line, the node of
    /// the first data unit first (for drills: `weft node kill $(weft stat B/K --nodes | head -1)`).
    #[arg(long, conflicts_with = "json")]
    pub nodes: bool,
}

/// Per group: its units, how many are unavailable, and how many more it can lose.
fn groups_view(object: &ObjectInfo) -> Vec<Value> {
    let layout = object.layout;
    let code = layout.code.build().ok();
    (0..layout.groups(object.size))
        .map(|group| {
            let units: Vec<UnitId> = layout.group_units(object.size, group);
            let down: Vec<usize> = (0..layout.n())
                .filter(|&p| object.unit(layout.unit(group, p)).is_some_and(|u| u.is_down()))
                .collect();
            // How many more units may be lost: the largest m such that losing any m more keeps
            // it decodable is at least r − down for MDS codes; report that figure.
            let decodable = code.as_ref().is_some_and(|c| c.is_decodable(&down));
            let blocks = layout.group_blocks(object.size, group);
            json!({
                "group": group,
                "data_blocks": [blocks.start, blocks.end],
                "stripes": [layout.stripe_of(blocks.start), layout.stripe_of(blocks.end - 1)],
                "unit_len": object.unit_len(group),
                "units": units.iter().map(|u| u.short_name()).collect::<Vec<_>>(),
                "unavailable": down.len(),
                "decodable": decodable,
                "spare": layout.r().saturating_sub(down.len()),
            })
        })
        .collect()
}

pub fn stat(args: StatArgs) -> Result<(), CliError> {
    let (bucket, key) = split_path(&args.path)?;
    let runtime = runtime()?;
    let client = client(&args.meta)?;
    let object = runtime.block_on(client.meta.get_object(&bucket, &key))?;
    if object.packed {
        if args.nodes {
            for node in crate::geometric_cli::packed_nodes(&object) {
                println!("{node}");
            }
        } else if args.json {
            crate::cluster_cli::print_json(&object.raw);
        } else {
            crate::geometric_cli::print_packed(&object);
        }
        return Ok(());
    }
    if args.nodes {
        let mut seen = std::collections::BTreeSet::new();
        // A RAIDP object: the nodes holding its superchunks' replicas, first extent first.
        let replicas = object.raidp.iter().flat_map(|r| &r.extents).flat_map(|e| &e.replicas);
        for replica in replicas {
            if seen.insert(replica.node) {
                println!("{}", replica.node);
            }
        }
        for unit in object.units.values() {
            if seen.insert(unit.node_id) {
                println!("{}", unit.node_id);
            }
        }
        return Ok(());
    }
    if let Some(raidp) = &object.raidp {
        if args.json {
            crate::cluster_cli::print_json(&object.raw);
            return Ok(());
        }
        println!("{bucket}/{key}");
        println!(
            "  size        {} ({} bytes), generation {}",
            fmt(object.size),
            object.size,
            object.generation
        );
        println!(
            "  policy      raidp: two replicas of superchunks of {}, {} Lstor parit{} per disk",
            fmt(raidp.superchunk_bytes),
            raidp.lstors,
            if raidp.lstors == 1 { "y" } else { "ies" }
        );
        for extent in &raidp.extents {
            let replicas: Vec<String> = extent
                .replicas
                .iter()
                .map(|r| format!("node {} disk {} ({})", r.node, r.disk, r.state))
                .collect();
            println!(
                "  superchunk {:<4} slot {:<4} {:>10} at {:<10} on {}",
                extent.superchunk,
                extent.slot,
                fmt(extent.bytes),
                extent.offset,
                if replicas.is_empty() { "no replica: lost".into() } else { replicas.join(", ") }
            );
        }
        return Ok(());
    }
    let groups = groups_view(&object);
    if args.json {
        let mut value = object.raw.clone();
        value["groups"] = json!(groups);
        crate::cluster_cli::print_json(&value);
        return Ok(());
    }
    let layout = object.layout;
    println!("{bucket}/{key}");
    println!(
        "  size        {} ({} bytes), generation {}, object id {}",
        fmt(object.size),
        object.size,
        object.generation,
        object.object_id
    );
    if let Some(bytes) = object.raw["metadata_bytes"].as_u64() {
        println!("  metadata    {bytes} bytes in meta (groups are computed, not stored)");
    }
    let unfound: Vec<&str> = object.raw["unfound_units"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str())
        .collect();
    if !unfound.is_empty() {
        println!(
            "  UNFOUND     {} (too few units of their group readable to rebuild; retried when a \
             node returns; `weft repair mark-lost {bucket} {key} --yes` gives the object up)",
            unfound.join(", ")
        );
    }
    println!(
        "  policy      {} · stripe width {} · cell {} · block {}",
        layout.code,
        layout.stripe_width,
        fmt(layout.cell_bytes),
        fmt(layout.block_bytes)
    );
    println!(
        "  blocks      {} data blocks in {} stripes and {} groups",
        layout.data_blocks(object.size),
        layout.stripes(object.size),
        layout.groups(object.size)
    );
    for group in &groups {
        let health = if group["unavailable"] == 0 {
            "healthy".to_string()
        } else if group["decodable"] == true {
            format!("DEGRADED: {} unavailable, readable", group["unavailable"])
        } else {
            format!("UNREADABLE: {} unavailable", group["unavailable"])
        };
        println!(
            "  group {:<4} blocks {}..{} (stripes {}..{}), unit {} — {health}",
            group["group"],
            group["data_blocks"][0],
            group["data_blocks"][1],
            group["stripes"][0],
            group["stripes"][1],
            fmt(group["unit_len"].as_u64().unwrap_or(0))
        );
        for name in group["units"].as_array().into_iter().flatten() {
            let unit =
                UnitId::parse_short_name(name.as_str().unwrap_or("")).and_then(|u| object.unit(u));
            if let Some(unit) = unit {
                println!(
                    "      {:<8} node {:<3} disk {} {:<5} {:>10}  {}",
                    unit.unit.short_name(),
                    unit.node_id,
                    unit.disk,
                    unit.state.as_deref().unwrap_or("?"),
                    fmt(unit.len),
                    unit.unit_key
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy_flags(args: &[&str]) -> Map<String, Value> {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            policy: PolicyArgs,
        }
        let flags = <Flags as clap::Parser>::try_parse_from(
            std::iter::once("weft").chain(args.iter().copied()),
        )
        .unwrap();
        flags.policy.overrides().unwrap()
    }

    /// Issue 16 item 8: one default policy. A flag left out takes rs(6,3)'s value (`--r 2`
    /// gave rs(10,2)); no code flag (or `--code rs` alone) leaves the code to the bucket.
    #[test]
    fn flags_left_out_take_the_one_default() {
        assert_eq!(policy_flags(&["--r", "2"])["code"], "rs(6,2)");
        assert_eq!(policy_flags(&["--k", "4"])["code"], "rs(4,3)");
        assert_eq!(policy_flags(&["--code", "hh-xor+"])["code"], "hh-xor+(6,3)");
        assert!(policy_flags(&["--code", "rs"]).get("code").is_none());
        assert!(policy_flags(&[]).is_empty());
        assert_eq!(policy_flags(&["--stripe-width", "4"]), {
            let mut only = Map::new();
            only.insert("stripe_width".into(), json!(4));
            only
        });
    }

    #[test]
    fn ranges_parse_like_http() {
        assert_eq!(parse_range("0-99", 1000).unwrap(), (0, 100));
        assert_eq!(parse_range("990-", 1000).unwrap(), (990, 10));
        assert_eq!(parse_range("-10", 1000).unwrap(), (990, 10));
        assert_eq!(parse_range("900-5000", 1000).unwrap(), (900, 100));
        assert_eq!(parse_range("-5000", 1000).unwrap(), (0, 1000));
        for bad in ["", "-", "5", "a-b", "1000-", "10-5", "-0"] {
            assert!(parse_range(bad, 1000).is_err(), "{bad:?}");
        }
        // Issue 16 item 10: an inverted range says so (it was called "outside the object").
        let inverted = parse_range("5-2", 1000).unwrap_err().to_string();
        assert!(inverted.contains("ends before it starts"), "{inverted}");
        let past = parse_range("1000-", 1000).unwrap_err().to_string();
        assert!(past.contains("past the end"), "{past}");
        assert!(split_path("bucket").is_err());
        assert!(split_path("/key").is_err());
        assert_eq!(split_path("b/a/b").unwrap(), ("b".into(), "a/b".into()));
    }
}
