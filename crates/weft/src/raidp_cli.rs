//! `weft raidp map|verify|recover` (the RAIDP tier: docs/raidp.md) and the disk drills
//! `weft disk fail|replace`.
//!
//! Invariants: every command talks to meta and the nodes over their signed APIs (no disk is
//! touched directly); `verify` exits 0 only when the tier is clean (its JSON says
//! `"clean":true`), 1 otherwise, so scripts can gate on it; `disk replace` refuses while the
//! disk's Lstor is still needed to rebuild a lost superchunk (unless `--force`).

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::cluster_cli::{format_size, print_json, MetaUrlArgs};
use crate::{cli_error, CliError};

#[derive(Debug, Subcommand)]
pub enum RaidpCommand {
    /// The superchunk map: each disk's slots and superchunks, each superchunk's replicas and
    /// fill, the pairs of disks sharing one, what is at risk or lost.
    Map(MapArgs),
    /// The tier's scrub: each Lstor against the XOR (and RS) of its disk's slots, each
    /// superchunk's two replicas against each other. Exit 0 only when clean.
    ///
    /// Journal records that crashes left pending (seen twice, --settle apart) are settled
    /// first: their bytes copied to the partner replica, both records cleared.
    ///
    /// Examples:
    ///   weft raidp verify
    ///   weft raidp verify --json | jq .clean
    #[command(verbatim_doc_comment)]
    Verify(VerifyArgs),
    /// Recover now: rebuild lost superchunks from a failed disk's Lstor and the mirrors of its
    /// other superchunks, then re-mirror every at-risk superchunk from its survivor.
    ///
    /// Receivers are chosen by minimum-cost matching (RAIDP §3.3: rounds in which no disk
    /// sends or receives twice, lightly loaded disks first) or, for comparison, naively (a
    /// random disk that keeps 1-sharing).
    ///
    /// Examples:
    ///   weft raidp recover
    ///   weft raidp recover --receivers naive --json
    #[command(verbatim_doc_comment)]
    Recover(RecoverArgs),
    /// Reclaim the space of deleted and overwritten RAIDP objects: every superchunk whose
    /// objects are all gone is emptied — each replica's node folds the slot's bytes out of
    /// its Lstor parity (read-modify-write) and frees it — and takes appends again.
    ///
    /// Superchunks still holding a live object are left as they are (listed with their live
    /// bytes), as are those an in-place update may be writing to or with a replica down.
    ///
    /// Examples:
    ///   weft raidp compact --dry-run
    ///   weft raidp compact --json | jq .freed_bytes
    #[command(verbatim_doc_comment)]
    Compact(CompactArgs),
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Say what would be reclaimed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object ({"reclaimed", "freed_bytes", "skipped", ...}).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MapArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print meta's map as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// How long a journal record must stay pending to count as left by a crash.
    #[arg(long, default_value = "2s", value_parser = weft_client::gc::parse_duration_ms)]
    pub settle: u64,
    /// Only check; settle no pending record.
    #[arg(long)]
    pub no_settle: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// How receivers are chosen: matching or naive.
    #[arg(long, default_value = "matching", value_parser = ["matching", "naive"])]
    pub receivers: String,
    /// Seed of the naive choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum DiskCommand {
    /// A drill: disk DISK of node NODE dies — its units and RAIDP slots are removed and it
    /// reports failed until replaced. Its Lstor (a separate device) stays readable.
    Fail(DiskArgs),
    /// An empty disk takes the failed one's place (its old Lstor is dropped).
    Replace(ReplaceArgs),
}

#[derive(Debug, Args)]
pub struct DiskArgs {
    /// The node's id.
    pub node: u32,
    /// The disk's index on that node.
    pub disk: u32,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the node's answer as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    pub disk: DiskArgs,
    /// Replace even while the disk's Lstor is needed to rebuild a lost superchunk (that
    /// superchunk is then lost for good unless the other failed disk's Lstor can rebuild it).
    #[arg(long)]
    pub force: bool,
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))
}

pub fn run(command: RaidpCommand) -> Result<(), CliError> {
    match command {
        RaidpCommand::Map(args) => map(args),
        RaidpCommand::Verify(args) => verify(args),
        RaidpCommand::Recover(args) => recover(args),
        RaidpCommand::Compact(args) => compact(args),
    }
}

fn compact(args: CompactArgs) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let report = runtime()?.block_on(client.raidp_compact(args.dry_run))?;
    if args.json {
        print_json(&serde_json::to_value(&report).expect("a report serializes"));
        return Ok(());
    }
    let verb = if args.dry_run { "would reclaim" } else { "reclaimed" };
    println!(
        "{verb} {} superchunks ({} per replica) in {:.2} s; the tier held {} live and {} dead",
        report.reclaimed.len(),
        format_size(report.freed_bytes),
        report.elapsed_seconds,
        format_size(report.live_bytes),
        format_size(report.dead_bytes),
    );
    for row in &report.skipped {
        match row["reason"].as_str() {
            Some(reason) => println!("  superchunk {} left: {reason}", row["superchunk"]),
            None => println!(
                "  superchunk {} left: {} live bytes of {}{}",
                row["superchunk"],
                row["live_bytes"],
                row["filled_bytes"],
                if row["busy"] == true { " (an update is writing)" } else { "" }
            ),
        }
    }
    Ok(())
}

fn map(args: MapArgs) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let map = runtime()?.block_on(client.meta.get_json("/v1/raidp"))?;
    if args.json {
        print_json(&map);
        return Ok(());
    }
    if map["exists"] != true {
        println!("no RAIDP map yet: `weft bucket create NAME --code raidp` makes one");
        return Ok(());
    }
    println!(
        "RAIDP map: superchunks of {}, {} Lstor parit{} per disk, replicas in distinct {}s",
        map["superchunk_bytes"].as_u64().map_or("?".into(), format_size),
        map["lstors"],
        if map["lstors"] == 1 { "y" } else { "ies" },
        map["failure_domain"].as_str().unwrap_or("?"),
    );
    for disk in map["disks"].as_array().into_iter().flatten() {
        let held: Vec<String> = disk["superchunks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| format!("{}@{}", h["superchunk"], h["slot"]))
            .collect();
        let lstor = &disk["lstor"];
        println!(
            "  node {:>3} disk {}  {:<7} {:>2}/{:<5} slots used  Lstor {:<11} superchunks {}",
            disk["node"],
            disk["disk"],
            disk["state"].as_str().unwrap_or("?"),
            held.len(),
            disk["slots"],
            lstor["state"].as_str().unwrap_or("none"),
            if held.is_empty() { "-".into() } else { held.join(" ") },
        );
    }
    let count = |field: &str| map[field].as_array().map_or(0, Vec::len);
    println!(
        "{} superchunks, {} shared pairs, {} at risk, {} lost",
        count("superchunks"),
        count("shared"),
        count("at_risk"),
        count("lost")
    );
    Ok(())
}

fn verify(args: VerifyArgs) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let runtime = runtime()?;
    let settled = match args.no_settle {
        true => 0,
        false => {
            runtime.block_on(client.raidp_resolve(std::time::Duration::from_millis(args.settle)))?
        }
    };
    let mut report = runtime.block_on(client.raidp_verify())?;
    report["settled_records"] = json!(settled);
    let clean = report["clean"] == true;
    if args.json {
        print_json(&report);
    } else {
        print_verify(&report, settled);
    }
    if clean {
        Ok(())
    } else {
        Err(cli_error!("the RAIDP tier is not clean (see above)"))
    }
}

fn print_verify(report: &Value, settled: usize) {
    if report["exists"] != true {
        println!("no RAIDP map yet: nothing to verify");
        return;
    }
    if settled > 0 {
        println!("settled {settled} journal records left pending by crashes");
    }
    for disk in report["disks"].as_array().into_iter().flatten() {
        let verdict = if disk["clean"] == true { "clean" } else { "NOT CLEAN" };
        let detail = match (&disk["error"], &disk["corrupt_slots"]) {
            (Value::String(error), _) => error.clone(),
            (_, Value::Array(corrupt)) if !corrupt.is_empty() => {
                format!("corrupt slots {}", Value::Array(corrupt.clone()))
            }
            _ => format!("{} slots, parity matches {}", disk["slots"], disk["parity_matches"]),
        };
        println!("  node {:>3} disk {}  {verdict:<9}  {detail}", disk["node"], disk["disk"]);
    }
    let mismatches = report["mirror_mismatches"].as_array().map_or(0, Vec::len);
    println!(
        "{} superchunk mirrors compared, {mismatches} differ; {} at risk, {} lost",
        report["superchunks"],
        report["at_risk"].as_array().map_or(0, Vec::len),
        report["lost"].as_array().map_or(0, Vec::len),
    );
    println!("{}", if report["clean"] == true { "clean" } else { "NOT CLEAN" });
}

fn recover(args: RecoverArgs) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let report = runtime()?.block_on(client.raidp_recover(&args.receivers, args.seed))?;
    let value = serde_json::to_value(&report).expect("a report serializes");
    if args.json {
        print_json(&value);
    } else {
        println!(
            "rebuilt {} lost superchunks in {:.2} s; re-mirrored {} superchunks in {} rounds \
             ({} receivers) in {:.2} s; {} moved",
            report.rebuilt.len(),
            report.rebuild_seconds,
            report.transfers,
            report.rounds,
            report.receivers,
            report.transfer_seconds,
            format_size(report.bytes),
        );
        if !report.unplaced.is_empty() {
            println!(
                "{} at-risk superchunks found no receiver; they wait for a replaced disk: {:?}",
                report.unplaced.len(),
                report.unplaced
            );
        }
        for (id, why) in &report.unrebuilt {
            println!("superchunk {id} not rebuilt: {why}");
        }
    }
    if report.unrebuilt.is_empty() {
        Ok(())
    } else {
        Err(cli_error!("{} lost superchunks could not be rebuilt", report.unrebuilt.len()))
    }
}

pub fn disk(command: DiskCommand) -> Result<(), CliError> {
    match command {
        DiskCommand::Fail(args) => drill(&args, "fail"),
        DiskCommand::Replace(args) => {
            if !args.force {
                refuse_replace_while_needed(&args.disk)?;
            }
            drill(&args.disk, "replace")
        }
    }
}

/// Refuses to replace a disk whose Lstor a lost superchunk's rebuild still needs.
fn refuse_replace_while_needed(args: &DiskArgs) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let plan = runtime()?.block_on(client.meta.get_json("/v1/raidp/plan"))?;
    for lost in plan["lost"].as_array().into_iter().flatten() {
        let needs = lost["via"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|via| via["via"]["node"] == args.node && via["via"]["disk"] == args.disk);
        if needs {
            return Err(cli_error!(
                "superchunk {} is lost and node {} disk {}'s Lstor can rebuild it: run `weft \
                 raidp recover` first (or --force to replace anyway)",
                lost["superchunk"],
                args.node,
                args.disk
            ));
        }
    }
    Ok(())
}

fn drill(args: &DiskArgs, what: &str) -> Result<(), CliError> {
    let client = args.meta.cluster()?;
    let runtime = runtime()?;
    let nodes = runtime.block_on(client.meta.get_json("/v1/nodes"))?;
    let node = nodes["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["id"] == args.node)
        .ok_or_else(|| cli_error!("meta knows no node {}", args.node))?;
    let endpoint = node["endpoint"]
        .as_str()
        .ok_or_else(|| cli_error!("meta knows no endpoint for node {}", args.node))?;
    let answer = runtime
        .block_on(client.nodes.disk_json(args.node, endpoint, args.disk, what, Some(json!({}))))
        .map_err(|f| cli_error!("node {} disk {}: {f}", args.node, args.disk))?;
    if args.json {
        print_json(&answer);
    } else if what == "fail" {
        println!(
            "node {} disk {} failed (a drill): its units and slots are gone, its Lstor is kept; \
             `weft raidp recover` re-mirrors its superchunks, the repair executor rebuilds its \
             units",
            args.node, args.disk
        );
    } else {
        println!("node {} disk {} replaced by an empty disk", args.node, args.disk);
    }
    Ok(())
}
