//! `weft bench raidp`: the RAIDP tier beside rep(3) and rep(2) on a running cluster, same
//! run, same data (docs/raidp.md, "Benchmark").
//!
//! Invariants:
//! - Every policy writes the same objects (content a function of the object's index) with the
//!   same clients; puts, gets and updates run policy after policy within each round, the
//!   order rotating by round, so the machine's noise falls on all alike. Gets check every
//!   byte against what was written.
//! - Network bytes are what the client sent to nodes; disk bytes are what the nodes wrote to
//!   their disks (units for rep(n); slots for RAIDP, its Lstor writes counted apart);
//!   stored bytes are what the tier holds afterwards (unit files; slots plus one parity per
//!   formatted Lstor).
//! - rep(n) objects are immutable: its side of the update workload writes the same bytes as
//!   new small objects (the closest it has to an in-place update); RAIDP updates in place
//!   (read-modify-write on both replicas).
//! - Recovery runs alternate matching and naive receivers on failures of different disks
//!   (each disk failed once, then replaced), and report seconds, rounds and bytes per run.
//! - Everything the bench writes is under `bench-raidp/` keys of its three buckets; it does
//!   not delete it (the tier has no compaction yet: the space would not come back).

use std::io::Cursor;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};
use weft_client::{Client, PutOptions};

use crate::bench_cluster::content;
use crate::cluster_cli::{format_size, print_json, MetaUrlArgs};
use crate::{cli_error, parse_size, CliError};

#[derive(Debug, Args)]
pub struct RaidpBenchArgs {
    /// User bytes each policy writes.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub size: usize,
    /// Size of each object.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub object_size: usize,
    /// Concurrent clients (tasks sharing one connection pool).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Superchunk size of the RAIDP map when the bench makes it (a cluster that has one
    /// keeps its own).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub superchunk: usize,
    /// Size of each in-place update.
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    pub update_size: usize,
    /// In-place updates per policy.
    #[arg(long, default_value_t = 200)]
    pub updates: usize,
    /// Disks failed (and replaced) per receiver choice in the recovery comparison.
    #[arg(long, default_value_t = 2)]
    pub recoveries: usize,
    /// Skip the recovery runs (they fail disks of the cluster, then replace them).
    #[arg(long)]
    pub no_recovery: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print {"rows", "recovery", "checks"} as one JSON object.
    #[arg(long)]
    pub json: bool,
}

const POLICIES: [&str; 3] = ["raidp", "rep(3)", "rep(2)"];

fn bucket_of(policy: &str) -> &'static str {
    match policy {
        "raidp" => "bench-raidp",
        "rep(3)" => "bench-rep3",
        _ => "bench-rep2",
    }
}

#[derive(Debug, Default, Clone)]
struct Totals {
    put_seconds: f64,
    get_seconds: f64,
    update_seconds: f64,
    user_bytes: u64,
    sent_bytes: u64,
    read_bytes: u64,
    updated_bytes: u64,
}

pub fn run(args: RaidpBenchArgs) -> Result<(), CliError> {
    if args.object_size == 0 || args.size < args.object_size || args.clients == 0 {
        return Err(cli_error!("give --size ≥ --object-size > 0 and --clients > 0"));
    }
    if args.update_size == 0 || args.update_size > args.object_size {
        return Err(cli_error!("--update-size must be between 1 byte and --object-size"));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let client = args.meta.cluster()?;
    runtime.block_on(bench(&client, &args))
}

async fn bench(client: &Client, args: &RaidpBenchArgs) -> Result<(), CliError> {
    ensure_buckets(client, args).await?;
    // The space of an earlier run's objects (overwritten by this run's keys, or deleted) is
    // reclaimed first, so runs can follow each other on one cluster.
    client.raidp_compact(false).await?;
    let objects = args.size / args.object_size;
    let stored_before = stored_bytes(client).await?;
    let written_before = raidp_written(client).await?;
    let mut totals: Vec<Totals> = vec![Totals::default(); POLICIES.len()];
    // Puts, in rounds of one object per client per policy, the order rotating.
    let batches = batches(objects, args.clients);
    for (round, batch) in batches.iter().enumerate() {
        for p in turns(round) {
            let started = Instant::now();
            let sent = put_batch(client, POLICIES[p], batch, args.object_size).await?;
            totals[p].put_seconds += started.elapsed().as_secs_f64();
            totals[p].sent_bytes += sent;
            totals[p].user_bytes += (batch.len() * args.object_size) as u64;
        }
    }
    let stored_after = stored_bytes(client).await?;
    let written_after = raidp_written(client).await?;
    // Gets, verified.
    for (round, batch) in batches.iter().enumerate() {
        for p in turns(round) {
            let started = Instant::now();
            totals[p].read_bytes += get_batch(client, POLICIES[p], batch, args.object_size).await?;
            totals[p].get_seconds += started.elapsed().as_secs_f64();
        }
    }
    // Updates: RAIDP in place; rep(n) writes the same bytes anew.
    let per_round = args.clients;
    let mut done = 0;
    let mut round = 0;
    while done < args.updates {
        let count = per_round.min(args.updates - done);
        for p in turns(round) {
            let started = Instant::now();
            update_batch(client, POLICIES[p], done, count, objects, args).await?;
            totals[p].update_seconds += started.elapsed().as_secs_f64();
            totals[p].updated_bytes += (count * args.update_size) as u64;
        }
        done += count;
        round += 1;
    }
    let map = client.meta.get_json("/v1/raidp").await?;
    let superchunk_bytes = map["superchunk_bytes"].as_u64().unwrap_or(0);
    let lstors = map["lstors"].as_u64().unwrap_or(1);
    let disks = map["disks"].as_array().map_or(0, Vec::len) as u64;
    let mut rows = Vec::new();
    for (p, policy) in POLICIES.iter().enumerate() {
        let t = &totals[p];
        let user = t.user_bytes.max(1) as f64;
        let mb = |bytes: u64, seconds: f64| bytes as f64 / seconds.max(1e-9) / 1e6;
        let (stored, disk_written, lstor_written) = if *policy == "raidp" {
            let slots =
                stored_after.raidp_slot_bytes.saturating_sub(stored_before.raidp_slot_bytes);
            let lstor = stored_after.lstor_bytes;
            (
                slots + lstor,
                written_after.0.saturating_sub(written_before.0),
                written_after.1.saturating_sub(written_before.1),
            )
        } else {
            // The bench objects' units (overwritten in place of any earlier run's).
            (stored_after.unit_bytes_of(bucket_of(policy)), t.sent_bytes, 0)
        };
        rows.push(json!({
            "policy": policy,
            "objects": objects,
            "object_bytes": args.object_size,
            "clients": args.clients,
            "user_bytes": t.user_bytes,
            "put_mb_s": mb(t.user_bytes, t.put_seconds),
            "get_mb_s": mb(t.read_bytes, t.get_seconds),
            "update_mb_s": mb(t.updated_bytes, t.update_seconds),
            "update_bytes": args.update_size,
            "updates": args.updates,
            "network_bytes_per_user_byte": t.sent_bytes as f64 / user,
            "disk_bytes_per_user_byte": disk_written as f64 / user,
            "lstor_bytes_per_user_byte": lstor_written as f64 / user,
            "stored_bytes_per_user_byte": stored as f64 / user,
        }));
    }
    let recovery = if args.no_recovery { Vec::new() } else { recoveries(client, args).await? };
    let row = |name: &str| rows.iter().find(|r| r["policy"] == name).cloned().unwrap_or_default();
    let (raidp, rep3) = (row("raidp"), row("rep(3)"));
    let ratio = |field: &str| {
        raidp[field].as_f64().unwrap_or(0.0) / rep3[field].as_f64().unwrap_or(1.0).max(1e-9)
    };
    let mean = |receivers: &str| {
        let runs: Vec<f64> = recovery
            .iter()
            .filter(|r| r["receivers"] == receivers && r["kind"] == "one disk")
            .filter_map(|r| r["seconds"].as_f64())
            .collect();
        (!runs.is_empty()).then(|| runs.iter().sum::<f64>() / runs.len() as f64)
    };
    let user = raidp["user_bytes"].as_f64().unwrap_or(1.0).max(1.0);
    let stored_bound = 2.0 + (disks * superchunk_bytes * lstors) as f64 / user;
    let checks = json!({
        "stored_bytes_per_user_byte": raidp["stored_bytes_per_user_byte"],
        "stored_bound": stored_bound,
        "stored_within_bound": raidp["stored_bytes_per_user_byte"].as_f64().unwrap_or(f64::MAX) <= stored_bound,
        "put_vs_rep3": ratio("put_mb_s"),
        "put_at_least_0_8": ratio("put_mb_s") >= 0.8,
        "network_vs_rep3": ratio("network_bytes_per_user_byte"),
        "network_at_most_0_70": ratio("network_bytes_per_user_byte") <= 0.70,
        "update_vs_rep3": ratio("update_mb_s"),
        "update_within_25_percent": ratio("update_mb_s") >= 0.75,
        "recovery_matching_seconds": mean("matching"),
        "recovery_naive_seconds": mean("naive"),
        "matching_faster": match (mean("matching"), mean("naive")) {
            (Some(m), Some(n)) => json!(m < n),
            _ => Value::Null,
        },
    });
    let report = json!({ "rows": rows, "recovery": recovery, "checks": checks });
    if args.json {
        print_json(&report);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Object indices in rounds of one per client.
fn batches(objects: usize, clients: usize) -> Vec<Vec<usize>> {
    (0..objects).collect::<Vec<_>>().chunks(clients).map(<[usize]>::to_vec).collect()
}

/// The policies' order in round `round`: rotating, so no policy always goes first.
fn turns(round: usize) -> impl Iterator<Item = usize> {
    (0..POLICIES.len()).map(move |turn| (round + turn) % POLICIES.len())
}

/// Creates the three buckets when missing (the RAIDP one with --superchunk when the cluster
/// has no map yet).
async fn ensure_buckets(client: &Client, args: &RaidpBenchArgs) -> Result<(), CliError> {
    let map = client.meta.get_json("/v1/raidp").await?;
    for policy in POLICIES {
        let bucket = bucket_of(policy);
        if client.meta.get_bucket(bucket).await.is_ok() {
            continue;
        }
        let body = match policy {
            "raidp" if map["exists"] == true => json!({ "code": "raidp" }),
            "raidp" => json!({ "code": "raidp", "superchunk_bytes": args.superchunk }),
            code => json!({ "code": code, "stripe_width": 1 }),
        };
        client.meta.create_bucket(bucket, Some(body)).await?;
    }
    Ok(())
}

fn key_of(index: usize) -> String {
    format!("bench-raidp/obj-{index:06}")
}

async fn put_batch(
    client: &Client,
    policy: &str,
    batch: &[usize],
    len: usize,
) -> Result<u64, CliError> {
    let puts = batch.iter().map(|&index| async move {
        let bytes = content(index, len);
        let stats = client
            .put_reader(
                bucket_of(policy),
                &key_of(index),
                len as u64,
                Cursor::new(bytes),
                &PutOptions::default(),
            )
            .await?;
        Ok::<u64, CliError>(stats.bytes_sent)
    });
    Ok(futures_util::future::try_join_all(puts).await?.into_iter().sum())
}

async fn get_batch(
    client: &Client,
    policy: &str,
    batch: &[usize],
    len: usize,
) -> Result<u64, CliError> {
    let gets = batch.iter().map(|&index| async move {
        let mut out = Vec::with_capacity(len);
        client.get(bucket_of(policy), &key_of(index), None, &mut out, None).await?;
        if out != content(index, len) {
            return Err(cli_error!("{policy}: {} read back wrong", key_of(index)));
        }
        Ok::<u64, CliError>(out.len() as u64)
    });
    Ok(futures_util::future::try_join_all(gets).await?.into_iter().sum())
}

/// `count` updates numbered from `first`: update i replaces `--update-size` bytes of object
/// i mod objects at an offset drawn from i (RAIDP), or writes them as a new object (rep).
async fn update_batch(
    client: &Client,
    policy: &str,
    first: usize,
    count: usize,
    objects: usize,
    args: &RaidpBenchArgs,
) -> Result<(), CliError> {
    let len = args.update_size;
    let slots = (args.object_size - len) / len.max(1) + 1;
    let updates = (first..first + count).map(|i| async move {
        let bytes = content(1_000_000 + i, len);
        let (object, at) = (i % objects, (i * 7919 % slots) * len);
        if policy == "raidp" {
            client
                .raidp_update(
                    bucket_of(policy),
                    &key_of(object),
                    at as u64,
                    len as u64,
                    Cursor::new(bytes),
                )
                .await?;
        } else {
            let key = format!("bench-raidp/update-{i:06}");
            client
                .put_reader(
                    bucket_of(policy),
                    &key,
                    len as u64,
                    Cursor::new(bytes),
                    &PutOptions::default(),
                )
                .await?;
        }
        Ok::<(), CliError>(())
    });
    futures_util::future::try_join_all(updates).await?;
    Ok(())
}

#[derive(Debug, Default)]
struct Stored {
    raidp_slot_bytes: u64,
    lstor_bytes: u64,
    by_bucket: std::collections::BTreeMap<String, u64>,
}

impl Stored {
    fn unit_bytes_of(&self, bucket: &str) -> u64 {
        self.by_bucket.get(bucket).copied().unwrap_or(0)
    }
}

/// What the cluster stores: unit bytes of each rep bucket's objects (meta's stored length of
/// every unit), RAIDP slot bytes and formatted Lstors' parity (from the nodes).
async fn stored_bytes(client: &Client) -> Result<Stored, CliError> {
    let mut stored = Stored::default();
    for policy in ["rep(3)", "rep(2)"] {
        let bucket = bucket_of(policy);
        let mut after: Option<String> = None;
        let mut total = 0;
        loop {
            let page = client.meta.list_objects(bucket, "", after.as_deref(), 1000).await?;
            for o in page["objects"].as_array().into_iter().flatten() {
                let key = o["key"].as_str().unwrap_or_default();
                if !key.starts_with("bench-raidp/obj-") {
                    continue;
                }
                let object = client.meta.get_object(bucket, key).await?;
                total += object.units.values().map(|u| u.len).sum::<u64>();
            }
            match page["next_start_after"].as_str() {
                Some(next) => after = Some(next.to_string()),
                None => break,
            }
        }
        stored.by_bucket.insert(bucket.to_string(), total);
    }
    let map = client.meta.get_json("/v1/raidp").await?;
    for disk in map["disks"].as_array().into_iter().flatten() {
        let (Some(node), Some(index), Some(endpoint)) =
            (disk["node"].as_u64(), disk["disk"].as_u64(), disk["endpoint"].as_str())
        else {
            continue;
        };
        let Ok(state) =
            client.nodes.disk_json(node as u32, endpoint, index as u32, "raidp", None).await
        else {
            continue;
        };
        stored.raidp_slot_bytes += state["slots"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["bytes"].as_u64())
            .sum::<u64>();
        if state["state"] == "ready" {
            let bytes = state["superchunk_bytes"].as_u64().unwrap_or(0);
            stored.lstor_bytes += bytes * state["parities"].as_u64().unwrap_or(1);
        }
    }
    Ok(stored)
}

/// (slot bytes, Lstor bytes) the nodes wrote for RAIDP since they started.
async fn raidp_written(client: &Client) -> Result<(u64, u64), CliError> {
    let map = client.meta.get_json("/v1/raidp").await?;
    let mut written = (0, 0);
    for disk in map["disks"].as_array().into_iter().flatten() {
        let (Some(node), Some(index), Some(endpoint)) =
            (disk["node"].as_u64(), disk["disk"].as_u64(), disk["endpoint"].as_str())
        else {
            continue;
        };
        if let Ok(state) =
            client.nodes.disk_json(node as u32, endpoint, index as u32, "raidp", None).await
        {
            written.0 += state["slot_bytes_written"].as_u64().unwrap_or(0);
            written.1 += state["lstor_bytes_written"].as_u64().unwrap_or(0);
        }
    }
    Ok(written)
}

/// Waits until meta's map says `want` (heartbeats carry failures and replacements).
async fn wait_for_map(
    client: &Client,
    what: &str,
    want: impl Fn(&Value) -> bool,
) -> Result<Value, CliError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let map = client.meta.get_json("/v1/raidp").await?;
        if want(&map) {
            return Ok(map);
        }
        if Instant::now() > deadline {
            return Err(cli_error!("waited a minute for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn failed_count(map: &Value) -> usize {
    map["disks"].as_array().into_iter().flatten().filter(|d| d["failed"] == true).count()
}

/// Fails a disk, recovers with `receivers`, replaces the disk; the recovery's report.
async fn drill(
    client: &Client,
    disks: &[(u32, u32, String)],
    receivers: &str,
) -> Result<Value, CliError> {
    for (node, disk, endpoint) in disks {
        client
            .nodes
            .disk_json(*node, endpoint, *disk, "fail", Some(json!({})))
            .await
            .map_err(|f| cli_error!("failing node {node} disk {disk}: {f}"))?;
    }
    wait_for_map(client, "the failures in the map", |m| failed_count(m) == disks.len()).await?;
    let report = client.raidp_recover(receivers, 7).await?;
    for (node, disk, endpoint) in disks {
        client
            .nodes
            .disk_json(*node, endpoint, *disk, "replace", Some(json!({})))
            .await
            .map_err(|f| cli_error!("replacing node {node} disk {disk}: {f}"))?;
    }
    wait_for_map(client, "the replaced disks back", |m| failed_count(m) == 0).await?;
    let mut value = serde_json::to_value(&report).expect("a report serializes");
    value["seconds"] = json!(report.rebuild_seconds + report.transfer_seconds);
    value["disks"] =
        json!(disks.iter().map(|(n, d, _)| json!({"node": n, "disk": d})).collect::<Vec<_>>());
    Ok(value)
}

/// One-disk recoveries alternating matching and naive (the most loaded disks first), then a
/// dual failure of two disks sharing a superchunk.
async fn recoveries(client: &Client, args: &RaidpBenchArgs) -> Result<Vec<Value>, CliError> {
    let map = client.meta.get_json("/v1/raidp").await?;
    let mut disks: Vec<(usize, u32, u32, String)> = map["disks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| {
            Some((
                d["superchunks"].as_array()?.len(),
                d["node"].as_u64()? as u32,
                d["disk"].as_u64()? as u32,
                d["endpoint"].as_str()?.to_owned(),
            ))
        })
        .collect();
    disks.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::new();
    for run in 0..2 * args.recoveries {
        let Some((held, node, disk, endpoint)) = disks.get(run).cloned() else {
            break;
        };
        // Pairs of runs, the order of the two choices alternating.
        let receivers = if (run / 2 + run) % 2 == 0 { "matching" } else { "naive" };
        let mut value = drill(client, &[(node, disk, endpoint)], receivers).await?;
        value["kind"] = json!("one disk");
        value["superchunks_held"] = json!(held);
        out.push(value);
    }
    // A dual failure: the two replicas of one superchunk.
    let map = client.meta.get_json("/v1/raidp").await?;
    let shared = map["shared"].as_array().and_then(|s| s.first()).cloned();
    if let Some(shared) = shared {
        let endpoint_of = |node: u64| {
            map["disks"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|d| d["node"] == node)
                .and_then(|d| d["endpoint"].as_str())
                .map(str::to_owned)
        };
        let pair: Vec<(u32, u32, String)> = shared["disks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some((d[0].as_u64()? as u32, d[1].as_u64()? as u32, endpoint_of(d[0].as_u64()?)?))
            })
            .collect();
        if pair.len() == 2 {
            let mut value = drill(client, &pair, "matching").await?;
            value["kind"] = json!("two disks");
            out.push(value);
        }
    }
    Ok(out)
}

fn print_table(report: &Value) {
    println!(
        "{:<8} {:>9} {:>9} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "policy",
        "put MB/s",
        "get MB/s",
        "update MB/s",
        "network/B",
        "disk/B",
        "Lstor/B",
        "stored/B"
    );
    for row in report["rows"].as_array().into_iter().flatten() {
        let f = |name: &str| row[name].as_f64().unwrap_or(0.0);
        println!(
            "{:<8} {:>9.1} {:>9.1} {:>11.1} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            row["policy"].as_str().unwrap_or("?"),
            f("put_mb_s"),
            f("get_mb_s"),
            f("update_mb_s"),
            f("network_bytes_per_user_byte"),
            f("disk_bytes_per_user_byte"),
            f("lstor_bytes_per_user_byte"),
            f("stored_bytes_per_user_byte"),
        );
    }
    for run in report["recovery"].as_array().into_iter().flatten() {
        println!(
            "recovery {:<9} {:<8} {:>6.2} s  {} rounds, {} transfers, {} rebuilt, {} moved",
            run["kind"].as_str().unwrap_or("?"),
            run["receivers"].as_str().unwrap_or("?"),
            run["seconds"].as_f64().unwrap_or(0.0),
            run["rounds"],
            run["transfers"],
            run["rebuilt"].as_array().map_or(0, Vec::len),
            format_size(run["bytes"].as_u64().unwrap_or(0)),
        );
    }
    println!("checks: {}", report["checks"]);
}
