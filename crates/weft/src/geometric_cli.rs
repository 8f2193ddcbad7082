//! `weft pack` and `weft pg ls`: the geometric layout's commands (docs/geometric.md), and how
//! `weft stat` shows a packed object.

use std::sync::atomic::AtomicU64;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::cluster_cli::{format_size, print_json, MetaUrlArgs};
use crate::{cli_error, CliError};

/// How long an object stays warm before the background packer (`weft serve repair`) takes
/// it, unless told otherwise; `weft pack` without `--now` uses it too.
pub const DEFAULT_PACK_AFTER: &str = "10m";

#[derive(Debug, Args)]
pub struct PackArgs {
    /// Only this geometric bucket [default: every geometric bucket].
    #[arg(long)]
    pub bucket: Option<String>,
    /// Pack every warm object, however young (default: only objects older than --after).
    #[arg(long)]
    pub now: bool,
    /// Pack objects written longer ago than this: 30s, 10m, 6h, or milliseconds.
    #[arg(long, default_value = DEFAULT_PACK_AFTER, value_parser = weft_client::gc::parse_duration_ms)]
    pub after: u64,
    /// Most objects per batch (one plan, one commit).
    #[arg(long)]
    pub batch_objects: Option<usize>,
    /// Most bytes of objects per batch, e.g. 4GiB.
    #[arg(long, value_parser = crate::parse_size)]
    pub batch_bytes: Option<usize>,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print one JSON object: {"buckets": [report, …]}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum PgCommand {
    /// List the placement groups of geometric buckets: members (node/disk, data or parity,
    /// up or why not) and the bytes packed on each data member.
    ///
    /// Examples:
    ///   weft pg ls
    ///   weft pg ls --bucket cold --json
    #[command(verbatim_doc_comment)]
    Ls(PgLsArgs),
}

#[derive(Debug, Args)]
pub struct PgLsArgs {
    /// Only this geometric bucket [default: every geometric bucket].
    #[arg(long)]
    pub bucket: Option<String>,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print meta's answer for each bucket: {"buckets": [{"bucket", "policy", "pgs": […]}]}.
    #[arg(long)]
    pub json: bool,
}

/// The geometric buckets to work on: `only`, checked to be one, or all of them.
fn geometric_buckets(
    client: &crate::cluster_cli::MetaClient,
    only: Option<&str>,
) -> Result<Vec<Value>, CliError> {
    let listed = client.get(&["buckets"])?;
    let all: Vec<Value> = listed["buckets"].as_array().cloned().unwrap_or_default();
    match only {
        Some(name) => {
            let bucket = all.iter().find(|b| b["name"] == name).cloned().ok_or_else(|| {
                cli_error!("no bucket {name:?} (weft bucket ls lists them)")
                    .with_code("no_such_bucket")
            })?;
            if !bucket["geometric"].is_object() {
                return Err(cli_error!(
                    "bucket {name:?} is not geometric (create one with weft bucket create NAME \
                     --layout geometric --code clay --k 10 --r 4 --s0 4MiB --q 2)"
                )
                .with_code("not_geometric"));
            }
            Ok(vec![bucket])
        }
        None => Ok(all.into_iter().filter(|b| b["geometric"].is_object()).collect()),
    }
}

pub fn pack(args: PackArgs) -> Result<(), CliError> {
    let buckets = geometric_buckets(&args.meta.client()?, args.bucket.as_deref())?;
    if buckets.is_empty() {
        if args.json {
            print_json(&json!({ "buckets": [] }));
        } else {
            println!("no geometric buckets; create one with `weft bucket create NAME --layout geometric`");
        }
        return Ok(());
    }
    let client = args.meta.cluster()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let options = weft_client::PackOptions {
        batch_objects: args.batch_objects,
        batch_bytes: args.batch_bytes.map(|b| b as u64),
        min_age_ms: if args.now { 0 } else { args.after },
        max_batches: None,
        keys: None,
    };
    let mut reports = Vec::new();
    for bucket in &buckets {
        let name = bucket["name"].as_str().unwrap_or_default().to_owned();
        let warm = runtime.block_on(warm_bytes(&client, &name))?;
        let (bar, counter) = crate::objects_cli::progress(warm, args.json, "packing");
        let report = crate::objects_cli::with_progress(&runtime, &bar, &counter, async {
            client.pack(&name, &options, Some(counter.as_ref() as &AtomicU64)).await
        })?;
        if !args.json {
            println!(
                "{name}: packed {} object{} ({}) in {} stripes, {} batches; read {}, wrote {} \
                 of data and {} of parity; {} warm units deleted{} ({} ms)",
                report.objects,
                if report.objects == 1 { "" } else { "s" },
                format_size(report.bytes),
                report.stripes,
                report.batches,
                format_size(report.bytes_read),
                format_size(report.data_bytes_written),
                format_size(report.parity_bytes_written),
                report.warm_units_deleted,
                if report.warm_units_left > 0 {
                    format!(", {} left to the sweeper (nodes down)", report.warm_units_left)
                } else {
                    String::new()
                },
                report.elapsed_ms,
            );
            for unpacked in report.skipped.iter().chain(&report.deferred) {
                println!("  left warm: {} — {}", unpacked.key, unpacked.reason);
            }
        }
        reports.push(report);
    }
    if args.json {
        print_json(&json!({ "buckets": reports }));
    }
    Ok(())
}

/// Bytes of the bucket's objects not packed yet (for the progress bar).
async fn warm_bytes(client: &weft_client::Client, bucket: &str) -> Result<u64, CliError> {
    let mut total = 0u64;
    let mut after: Option<String> = None;
    loop {
        let page = client.meta.list_objects(bucket, "", after.as_deref(), 1000).await?;
        for object in page["objects"].as_array().into_iter().flatten() {
            if object["packed"] != true {
                total += object["size"].as_u64().unwrap_or(0);
            }
        }
        match page["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return Ok(total),
        }
    }
}

pub fn pg(command: PgCommand) -> Result<(), CliError> {
    match command {
        PgCommand::Ls(args) => pg_ls(args),
    }
}

fn pg_ls(args: PgLsArgs) -> Result<(), CliError> {
    let client = args.meta.client()?;
    let buckets = geometric_buckets(&client, args.bucket.as_deref())?;
    let mut answers = Vec::new();
    for bucket in &buckets {
        let name = bucket["name"].as_str().unwrap_or_default();
        answers.push(client.get(&["geometric", name])?);
    }
    if args.json {
        print_json(&json!({ "buckets": answers }));
        return Ok(());
    }
    if answers.is_empty() {
        println!(
            "no geometric buckets; create one with `weft bucket create NAME --layout geometric`"
        );
    }
    for answer in &answers {
        let policy = &answer["policy"];
        let pgs = answer["pgs"].as_array().cloned().unwrap_or_default();
        println!(
            "{}: {} placement groups of {} disks ({}, s0 {}, q {}); members node/disk, data \
             first, with bytes packed",
            answer["bucket"].as_str().unwrap_or("?"),
            pgs.len(),
            pgs.first().and_then(|p| p["members"].as_array()).map_or(0, Vec::len),
            policy["code"].as_str().unwrap_or("?"),
            policy["s0"].as_u64().map_or("?".into(), format_size),
            policy["q"],
        );
        for pg in &pgs {
            let members: Vec<String> = pg["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    let mut text = format!("{}/{}", m["node"], m["disk"]);
                    if m["role"] == "data" {
                        text += &format!(":{}", m["bytes"].as_u64().map_or("?".into(), short_size));
                    } else {
                        text += ":p";
                    }
                    if m["state"] != "up" {
                        text += "!";
                    }
                    text
                })
                .collect();
            println!("  pg {:>4}  {}", pg["pg"], members.join(" "));
        }
        if pgs
            .iter()
            .any(|pg| pg["members"].as_array().into_iter().flatten().any(|m| m["state"] != "up"))
        {
            println!("  (! marks a member that cannot take chunks now: see --json for why)");
        }
    }
    Ok(())
}

/// A size in at most 5 characters: 0, 12K, 3.4M, 120G.
fn short_size(bytes: u64) -> String {
    let units = [("T", 1u64 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (name, unit) in units {
        if bytes >= unit {
            let value = bytes as f64 / unit as f64;
            return if value < 10.0 {
                format!("{value:.1}{name}")
            } else {
                format!("{value:.0}{name}")
            };
        }
    }
    bytes.to_string()
}

/// `weft stat` of a packed object, in words.
pub fn print_packed(object: &weft_client::ObjectInfo) {
    let raw = &object.raw;
    let geo = &raw["geometric"];
    let policy = &geo["policy"];
    println!("{}/{}", object.bucket, object.key);
    println!(
        "  size        {} ({} bytes), generation {}",
        format_size(object.size),
        object.size,
        object.generation
    );
    println!(
        "  policy      geometric: bins coded {}, small bin {}, s0 {}, q {}, chunks up to {}",
        policy["code"].as_str().unwrap_or("?"),
        policy["small_code"].as_str().unwrap_or("?"),
        policy["s0"].as_u64().map_or("?".into(), format_size),
        policy["q"],
        policy["chunk_max"].as_u64().map_or("?".into(), format_size),
    );
    println!(
        "  lives on    node {} disk {} (placement group {}, data member {})",
        geo["disk"]["node"], geo["disk"]["disk"], geo["pg"], geo["member"]
    );
    println!(
        "  metadata    {} bytes of layout record (crc32c {:08x})",
        raw["layout_bytes"],
        geo["crc32c"].as_u64().unwrap_or(0)
    );
    if let Some(front) = geo["front"].as_object() {
        println!(
            "  front       {} in the small bin, stripe {} block {} at {}",
            format_size(front["bytes"].as_u64().unwrap_or(0)),
            front["stripe"].as_str().unwrap_or("?"),
            front["block"],
            front["offset"]
        );
    }
    for chunk in raw["chunks"].as_array().into_iter().flatten() {
        let stripe = chunk["stripe"].as_str().unwrap_or("?");
        let state = object
            .geometric
            .as_ref()
            .and_then(|g| g.stripes.get(stripe))
            .map(|s| {
                let down = s.units.values().filter(|u| u.is_down()).count();
                if down == 0 {
                    "healthy".to_owned()
                } else {
                    format!("{down} units down")
                }
            })
            .unwrap_or_default();
        println!(
            "  chunk       bin {:<2} {:>10} at {:<12} stripe {} block {} ({state})",
            chunk["bin"],
            format_size(chunk["bytes"].as_u64().unwrap_or(0)),
            chunk["object_offset"],
            stripe,
            chunk["block"]
        );
    }
}

/// The nodes of a packed object for `weft stat --nodes`: its own disk's node first, then
/// the other nodes of its stripes.
pub fn packed_nodes(object: &weft_client::ObjectInfo) -> Vec<u32> {
    let mut nodes = Vec::new();
    if let Some(node) = object.raw["geometric"]["disk"]["node"].as_u64() {
        nodes.push(node as u32);
    }
    if let Some(geo) = &object.geometric {
        for stripe in geo.stripes.values() {
            for unit in stripe.units.values() {
                if !nodes.contains(&unit.node_id) {
                    nodes.push(unit.node_id);
                }
            }
        }
    }
    nodes
}
