//! `weft transition`: change the code of stored objects, by regrouping (new parity over the
//! data blocks in place) or restriping (rewrite), with the IO measured and predicted.
//!
//! Invariants:
//! - The new policy is the object's current one with the flags given on top; flags not given
//!   keep the object's values (not the bucket's).
//! - `--json` prints exactly one JSON object: the transition report for one object, or the
//!   totals and per-object reports for `--bucket`. Progress goes to stderr.
//! - Running a transition again is safe: an object already at the target layout succeeds
//!   with nothing done (`"unchanged": true`), so a run killed at any step is finished by
//!   running the same command again (a pending transition it left is replaced). A re-run
//!   does not resume: it plans afresh and reads the data again (the plan is cheap).
//! - Each regroup holds its pending transition under a lease (--lease-ms, renewed every
//!   third of it while it works). If `weft transition` dies, the transition outlives it only
//!   until the lease passes: the next sweep (`weft gc`, or `weft serve repair`, which `weft
//!   up` starts and which sweeps at start and every --gc-interval) rolls it back and deletes
//!   its units; the object keeps its old layout throughout.

use std::{
    io::IsTerminal,
    time::{Duration, Instant},
};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use weft_client::{Client, ObjectInfo, TransitionReport};
use weft_layout::{StripedLayout, TransitionIo, TransitionMode};

use crate::{cli_error, cluster_cli::MetaUrlArgs, objects_cli::PolicyArgs, CliError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Regroup when only the code changes, restripe when the striping changes.
    Auto,
    /// New groups and parity over the data blocks in place (only the code may change).
    Regroup,
    /// Read the object and write it again under the new layout.
    Restripe,
}

#[derive(Debug, Args)]
pub struct TransitionArgs {
    /// The object, BUCKET/KEY (or use --bucket for every object of a bucket).
    #[arg(required_unless_present = "bucket", conflicts_with = "bucket")]
    pub path: Option<String>,
    /// Transition every object of this bucket, one after another, with progress.
    #[arg(long)]
    pub bucket: Option<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// How: auto, regroup or restripe.
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: ModeArg,
    /// `geometric` packs the object into its geometric bucket's bins now (what the packer
    /// does in the background); `striped` with policy flags moves a packed object out of
    /// the bins by a rewrite (in a geometric bucket the packer takes it back later).
    #[arg(long, value_parser = ["striped", "geometric"])]
    pub layout: Option<String>,
    /// Plan and print the predicted IO of both modes; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --bucket: pause so that at most this many object bytes are transitioned per
    /// second (0: no limit), e.g. 100MiB. Objects already at the target are skipped and
    /// count against no rate.
    #[arg(long, default_value = "0", value_parser = crate::parse_size)]
    pub rate: usize,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Lease on each pending transition, in milliseconds (renewed every third of it while
    /// this command works): if this command dies, the transition is rolled back by the
    /// next sweep after the lease passes.
    #[arg(long, default_value_t = weft_client::transition::DEFAULT_TRANSITION_LEASE_MS,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub lease_ms: u64,
}

/// Whether the target is the RAIDP tier (`--code raidp`).
fn to_raidp(args: &TransitionArgs) -> bool {
    args.policy.code.code.trim().eq_ignore_ascii_case("raidp")
}

/// Whether the target is the bucket's bins (`--layout geometric`).
fn to_geometric(args: &TransitionArgs) -> bool {
    args.layout.as_deref() == Some("geometric")
}

/// The transition of one object to the target the flags name.
async fn transition_one(
    client: &Client,
    args: &TransitionArgs,
    bucket: &str,
    key: &str,
) -> Result<TransitionReport, CliError> {
    if to_geometric(args) {
        if !args.policy.overrides()?.is_empty() || to_raidp(args) {
            return Err(cli_error!(
                "--layout geometric packs into the bucket's bins, whose policy the bucket fixes: \
                 give no --code, --k, --r, --stripe-width, --cell or --block"
            )
            .with_code("usage"));
        }
        return Ok(client.transition_to_geometric(bucket, key, args.dry_run).await?);
    }
    if to_raidp(args) {
        return Ok(client.transition_to_raidp(bucket, key, args.dry_run).await?);
    }
    let object = client.meta.get_object(bucket, key).await?;
    let to = target_layout(&object, &args.policy)?;
    Ok(client
        .transition_leased(bucket, key, to, mode_of(args.mode), args.dry_run, args.lease_ms)
        .await?)
}

/// The object's layout with the given flags on top.
fn target_layout(object: &ObjectInfo, policy: &PolicyArgs) -> Result<StripedLayout, CliError> {
    let overrides = policy.overrides()?;
    if overrides.is_empty() {
        return Err(cli_error!(
            "say what to change: --code/--k/--r (and --d/--l/--g), --stripe-width, --cell or --block"
        ));
    }
    let mut value = serde_json::to_value(object.layout).map_err(|e| cli_error!("{e}"))?;
    if let Some(fields) = value.as_object_mut() {
        fields.extend(overrides);
    }
    let layout: StripedLayout =
        serde_json::from_value(value).map_err(|e| cli_error!("bad policy: {e}"))?;
    layout.validate().map_err(|e| cli_error!("invalid policy: {e}"))?;
    Ok(layout)
}

fn mode_of(arg: ModeArg) -> Option<TransitionMode> {
    match arg {
        ModeArg::Auto => None,
        ModeArg::Regroup => Some(TransitionMode::Regroup),
        ModeArg::Restripe => Some(TransitionMode::Restripe),
    }
}

/// The report as the JSON shape: mode, measured bytes, predictions, and context.
/// A side of a transition as reports show it: its layout, "raidp" for the RAIDP tier, or
/// "geometric" for a bucket's bins.
fn side(layout: &weft_layout::StripedLayout, raidp: bool, geometric: bool) -> Value {
    if raidp {
        json!("raidp")
    } else if geometric {
        json!("geometric")
    } else {
        json!(layout)
    }
}

fn report_json(report: &TransitionReport) -> Value {
    let io = &report.io;
    json!({
        "bucket": report.bucket, "key": report.key, "mode": report.mode,
        "from": side(&report.from, report.from_raidp, report.from_geometric),
        "to": side(&report.to, report.to_raidp, report.to_geometric),
        "size": report.size, "dry_run": report.dry_run,
        "bytes_read": io.bytes_read, "data_bytes_written": io.data_bytes_written,
        "parity_bytes_written": io.parity_bytes_written, "relocated_bytes": io.relocated_bytes,
        "network_bytes": io.network_bytes, "total_io_bytes": io.total_bytes(),
        "relocated_blocks": report.relocated_blocks,
        "predicted": report.predicted, "elapsed_ms": report.elapsed_ms,
        "unchanged": report.unchanged, "attempts": report.attempts,
    })
}

fn fmt(bytes: u64) -> String {
    crate::cluster_cli::format_size(bytes)
}

/// What a transition changes: `from rs(6,3) to rs(4,2)`, or when the code stays, the fields
/// that change (`rs(4,2): stripe width 2 → 4`) — never "from rs(4,2) to rs(4,2)".
fn describe_change(from: &weft_layout::StripedLayout, to: &weft_layout::StripedLayout) -> String {
    let mut changes = Vec::new();
    if from.stripe_width != to.stripe_width {
        changes.push(format!("stripe width {} → {}", from.stripe_width, to.stripe_width));
    }
    if from.cell_bytes != to.cell_bytes {
        changes.push(format!("cell {} → {}", fmt(from.cell_bytes), fmt(to.cell_bytes)));
    }
    if from.block_bytes != to.block_bytes {
        changes.push(format!("block {} → {}", fmt(from.block_bytes), fmt(to.block_bytes)));
    }
    match (from.code == to.code, changes.is_empty()) {
        (false, true) => format!("from {} to {}", from.code, to.code),
        (false, false) => format!("from {} to {}, {}", from.code, to.code, changes.join(", ")),
        (true, _) => format!("{}: {}", to.code, changes.join(", ")),
    }
}

fn print_report(report: &TransitionReport) {
    let io = &report.io;
    let tier = |layout: &weft_layout::StripedLayout, raidp: bool, geometric: bool| match (
        raidp, geometric,
    ) {
        (true, _) => "raidp".to_owned(),
        (_, true) => "geometric".to_owned(),
        _ => layout.code.to_string(),
    };
    let (from, to) = (
        tier(&report.from, report.from_raidp, report.from_geometric),
        tier(&report.to, report.to_raidp, report.to_geometric),
    );
    if report.unchanged {
        println!("{}/{} is already {to}: nothing to do", report.bucket, report.key);
        return;
    }
    let verb = if report.dry_run { "would transition" } else { "transitioned" };
    let other_tier =
        report.from_raidp || report.to_raidp || report.from_geometric || report.to_geometric;
    let change = match other_tier {
        true => format!("from {from} to {to}"),
        false => describe_change(&report.from, &report.to),
    };
    println!(
        "{verb} {}/{} ({}) {change} by {}",
        report.bucket,
        report.key,
        fmt(report.size),
        if report.to_geometric {
            "pack".to_owned()
        } else if other_tier {
            "rewrite".to_owned()
        } else {
            report.mode.to_string()
        }
    );
    if !report.dry_run {
        println!(
            "  measured   read {}, data written {}, parity written {}, relocated {} ({} blocks), network {}; total IO {}",
            fmt(io.bytes_read), fmt(io.data_bytes_written), fmt(io.parity_bytes_written),
            fmt(io.relocated_bytes), report.relocated_blocks, fmt(io.network_bytes), fmt(io.total_bytes())
        );
    }
    for mode in ["regroup", "restripe", "pack"] {
        let p = &report.predicted[mode];
        if p.is_object() {
            let total =
                ["bytes_read", "data_bytes_written", "parity_bytes_written", "relocated_bytes"]
                    .iter()
                    .map(|f| p[*f].as_u64().unwrap_or(0))
                    .sum::<u64>();
            println!(
                "  predicted {mode:<8} read {}, data written {}, parity written {}, relocated {}; total IO {}",
                fmt(p["bytes_read"].as_u64().unwrap_or(0)),
                fmt(p["data_bytes_written"].as_u64().unwrap_or(0)),
                fmt(p["parity_bytes_written"].as_u64().unwrap_or(0)),
                fmt(p["relocated_bytes"].as_u64().unwrap_or(0)),
                fmt(total)
            );
        }
    }
}

pub fn run(args: TransitionArgs) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let client = args.meta.cluster()?;
    runtime.block_on(async {
        match (&args.path, &args.bucket) {
            (Some(path), _) => one(&client, &args, path).await,
            (None, Some(bucket)) => all(&client, &args, bucket).await,
            (None, None) => Err(cli_error!("give BUCKET/KEY or --bucket BUCKET")),
        }
    })
}

async fn one(client: &Client, args: &TransitionArgs, path: &str) -> Result<(), CliError> {
    let (bucket, key) = path
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| cli_error!("{path:?} is not BUCKET/KEY"))?;
    let report = transition_one(client, args, bucket, key).await?;
    if args.json {
        crate::cluster_cli::print_json(&report_json(&report));
    } else {
        print_report(&report);
    }
    Ok(())
}

async fn all(client: &Client, args: &TransitionArgs, bucket: &str) -> Result<(), CliError> {
    let mut objects = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = client.meta.list_objects(bucket, "", after.as_deref(), 1000).await?;
        for o in page["objects"].as_array().into_iter().flatten() {
            objects.push((
                o["key"].as_str().unwrap_or_default().to_string(),
                o["size"].as_u64().unwrap_or(0),
            ));
        }
        match page["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let total_bytes: u64 = objects.iter().map(|(_, s)| s).sum();
    let bar = if args.json || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(objects.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "transition [{bar:40}] {pos}/{len} objects {msg} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar
    };
    let started = Instant::now();
    let (mut done, mut measured, mut predicted_regroup, mut predicted_restripe) =
        (Vec::new(), TransitionIo::default(), TransitionIo::default(), TransitionIo::default());
    let mut failures = Vec::new();
    // Work done: bytes of the objects a transition was run on (failed ones included, they
    // cost IO too); objects already at the target cost nothing and count against no rate.
    let (mut work_bytes, mut already, mut already_bytes) = (0u64, 0usize, 0u64);
    for (key, size) in &objects {
        let result = async {
            if to_raidp(args) || to_geometric(args) {
                let report = transition_one(client, args, bucket, key).await?;
                return Ok(Some(report).filter(|r| !r.unchanged));
            }
            let object = client.meta.get_object(bucket, key).await?;
            let to = target_layout(&object, &args.policy)?;
            if to == object.layout {
                return Ok(None); // already there
            }
            Ok::<_, CliError>(Some(
                client
                    .transition_leased(
                        bucket,
                        key,
                        to,
                        mode_of(args.mode),
                        args.dry_run,
                        args.lease_ms,
                    )
                    .await?,
            ))
        }
        .await;
        match result {
            Ok(Some(report)) => {
                add(&mut measured, &report.io);
                for (mode, sum) in
                    [("regroup", &mut predicted_regroup), ("restripe", &mut predicted_restripe)]
                {
                    if let Ok(io) =
                        serde_json::from_value::<TransitionIo>(report.predicted[mode].clone())
                    {
                        add(sum, &io);
                    }
                }
                done.push(report_json(&report));
            }
            Ok(None) => {
                already += 1;
                already_bytes += size;
                bar.inc(1);
                continue;
            }
            Err(error) => failures.push(json!({"key": key, "error": error.to_string()})),
        }
        work_bytes += size;
        bar.inc(1);
        bar.set_message(fmt(work_bytes));
        if args.rate > 0 {
            let due = Duration::from_secs_f64(work_bytes as f64 / args.rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    bar.finish_and_clear();
    let summary = json!({
        "bucket": bucket, "objects": objects.len(), "transitioned": done.len(),
        "failed": failures.len(), "already": already, "bytes": work_bytes,
        "already_bytes": already_bytes, "bucket_bytes": total_bytes, "dry_run": args.dry_run,
        "io": measured, "total_io_bytes": measured.total_bytes(),
        "predicted": {"regroup": predicted_regroup, "restripe": predicted_restripe},
        "elapsed_ms": started.elapsed().as_millis() as u64,
        "failures": failures, "reports": done,
    });
    if args.json {
        crate::cluster_cli::print_json(&summary);
    } else {
        println!(
            "{} of {} objects ({} of {}) transitioned in {:.1} s{}; {} already there",
            summary["transitioned"],
            objects.len(),
            fmt(work_bytes),
            fmt(total_bytes),
            started.elapsed().as_secs_f64(),
            if args.dry_run { " (dry run)" } else { "" },
            already
        );
        println!(
            "  measured  read {}, data written {}, parity written {}, relocated {}; total IO {}",
            fmt(measured.bytes_read),
            fmt(measured.data_bytes_written),
            fmt(measured.parity_bytes_written),
            fmt(measured.relocated_bytes),
            fmt(measured.total_bytes())
        );
        println!(
            "  predicted regroup total IO {}, restripe total IO {}",
            fmt(predicted_regroup.total_bytes()),
            fmt(predicted_restripe.total_bytes())
        );
        for failure in &failures {
            eprintln!("failed: {}: {}", failure["key"], failure["error"]);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(cli_error!(
            "{} of {} objects could not be transitioned (listed above)",
            failures.len(),
            objects.len()
        ))
    }
}

fn add(sum: &mut TransitionIo, io: &TransitionIo) {
    sum.bytes_read += io.bytes_read;
    sum.data_bytes_written += io.data_bytes_written;
    sum.parity_bytes_written += io.parity_bytes_written;
    sum.relocated_bytes += io.relocated_bytes;
    sum.network_bytes += io.network_bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(code: &str, width: usize) -> weft_layout::StripedLayout {
        serde_json::from_value(json!({"code": code, "stripe_width": width,
            "cell_bytes": 1 << 20, "block_bytes": 8 << 20}))
        .unwrap()
    }

    /// Issue 16 item 10: a restripe names what changed (it said "from rs(4,2) to rs(4,2)").
    #[test]
    fn a_change_names_what_changes() {
        let (narrow, wide) = (layout("rs(4,2)", 2), layout("rs(4,2)", 4));
        assert_eq!(describe_change(&narrow, &wide), "rs(4,2): stripe width 2 → 4");
        assert_eq!(describe_change(&narrow, &layout("rs(6,3)", 2)), "from rs(4,2) to rs(6,3)");
        assert_eq!(
            describe_change(&narrow, &layout("rs(6,3)", 4)),
            "from rs(4,2) to rs(6,3), stripe width 2 → 4"
        );
    }
}
