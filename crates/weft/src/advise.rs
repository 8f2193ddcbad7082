//! `weft advise stripe-width`: Okapi's stripe-width advice (§4.6, §6.5) from a read trace.
//!
//! The paper recommends a stripe width of ⌈median read size ÷ block size⌉: a read then
//! touches as few disks as it can while each disk still moves whole blocks' worth of bytes
//! (fewer seeks than wider stripes, more parallelism than narrower ones). The advisor
//! computes that width from the trace, then checks it the way an engineer would: it replays
//! the trace (`weft bench reads --trace`) against test objects at that width, its neighbours
//! and the coupled width k, on the running cluster (best under the hardware model), and prints
//! the measured table beside the recommendation.
//!
//! Invariants: the recommendation is a pure function of the trace, the block size and k
//! (clamped to 1..=k); the replay never changes it, it only says whether the measurement
//! agrees: the recommended width's throughput is the best measured, or within
//! `--agree-within` (5%) of it — widths that close tie on a machine this noisy — and the best
//! and the margin are always reported.

use std::{path::PathBuf, sync::Arc, time::Duration};

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::{
    bench_reads::{self, Config, Workload},
    cli_error,
    cluster_cli::{format_size, MetaUrlArgs},
    parse_size, CliError, CodeArgs,
};

#[derive(Debug, Subcommand)]
pub enum AdviseCommand {
    /// Recommend a stripe width from a read trace, and check it by replaying the trace.
    ///
    /// The recommendation is ⌈median read ÷ block⌉ (Okapi §4.6); the replay measures it,
    /// its neighbours and the coupled width k on the running cluster (under `weft up
    /// --disk-model hdd` for disk-bound figures). Record a trace with `weft get --trace-reads
    /// FILE` or `weft serve s3 --trace-reads FILE`; each line is JSON with offset, length and
    /// timestamp.
    ///
    /// Examples:
    ///   weft advise stripe-width --trace reads.jsonl --no-replay
    ///   weft advise stripe-width --trace reads.jsonl --code rs --k 6 --r 3 --duration 20s --json
    #[command(verbatim_doc_comment)]
    StripeWidth(StripeWidthArgs),
}

#[derive(Debug, Args)]
pub struct StripeWidthArgs {
    /// The read trace (JSON lines: offset, length, timestamp; bucket and key optional).
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,
    #[command(flatten)]
    pub code: CodeArgs,
    /// Cell: the striping unit.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub cell: usize,
    /// Block: an object's piece on one disk.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub block: usize,
    /// Only compute the recommendation; replay nothing (no cluster needed).
    #[arg(long)]
    pub no_replay: bool,
    /// Concurrent clients replaying the trace.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// How long each width is measured, e.g. 20s.
    #[arg(long, default_value = "20s", value_parser = weft_client::gc::parse_duration_ms)]
    pub duration: u64,
    #[command(flatten)]
    pub test: bench_reads::TestObjects,
    /// The replay agrees when the recommended width's throughput is within this fraction of
    /// the best measured (widths within a few percent tie on a noisy machine).
    #[arg(long, default_value_t = 0.05)]
    pub agree_within: f64,
    /// Seed of the replay's choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print the advice and the replay table as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also draw the replay as a chart (SVG): throughput and p99 per stripe width.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

pub fn run(command: AdviseCommand) -> Result<(), CliError> {
    match command {
        AdviseCommand::StripeWidth(args) => stripe_width(args),
    }
}

/// Okapi's recommendation: ⌈median ÷ block⌉, within 1..=k.
pub fn recommended_width(median: u64, block: u64, k: usize) -> usize {
    (median.div_ceil(block.max(1)) as usize).clamp(1, k.max(1))
}

/// The widths the replay measures: the recommendation, its neighbours, and k (the coupled
/// width), in increasing order.
fn widths_to_replay(recommended: usize, k: usize) -> Vec<usize> {
    let mut widths = vec![recommended.saturating_sub(1), recommended, recommended + 1, k];
    widths.retain(|&w| (1..=k).contains(&w));
    widths.sort_unstable();
    widths.dedup();
    widths
}

fn stripe_width(args: StripeWidthArgs) -> Result<(), CliError> {
    let reads = weft_client::trace::load(&args.trace)?;
    let spec = args.code.spec()?;
    let k = spec.build()?.data_units();
    let median = bench_reads::median_read(&reads);
    let recommended = recommended_width(median, args.block as u64, k);
    // The cell and block must make a valid layout, replayed or not.
    bench_reads::layout_of(spec, recommended, args.cell, args.block)?;
    let mut advice = json!({
        "trace": args.trace.display().to_string(),
        "reads": reads.len(),
        "median_read_bytes": median,
        "block_bytes": args.block,
        "code": spec.to_string(),
        "recommended_stripe_width": recommended,
    });
    let say = |advice: &Value| {
        println!(
            "{} reads, median {}; block {} → recommended stripe width {recommended} for {}",
            advice["reads"],
            format_size(median),
            format_size(args.block as u64),
            advice["code"].as_str().unwrap_or("?"),
        )
    };
    if args.no_replay {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&advice).expect("json"));
        } else {
            say(&advice);
        }
        return Ok(());
    }
    if args.test.objects == 0
        || args.test.object_size == 0
        || args.duration == 0
        || args.clients == 0
    {
        return Err(cli_error!(
            "--objects, --object-size, --duration and --clients must be positive"
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let client = args.meta.cluster()?;
    let workload = Workload::Trace(Arc::new(bench_reads::Replay::new(reads)?));
    let widths = widths_to_replay(recommended, k);
    if !args.json {
        say(&advice);
        println!(
            "replaying the trace with {} clients, {} s per width:",
            args.clients,
            args.duration / 1000
        );
        println!(
            "{:>6} {:>10} {:>8} {:>8} {:>8} {:>8}",
            "width", "MB/s", "seeks/s", "p50 ms", "p99 ms", ""
        );
    }
    let rows = runtime.block_on(async {
        let mut rows = Vec::new();
        for &width in &widths {
            let layout = bench_reads::layout_of(spec, width, args.cell, args.block)?;
            let config = Config { layout, coupled: false };
            let sizes = bench_reads::test_sizes(&args.test, &workload);
            let objects =
                bench_reads::prepare_objects(&client, &args.test.bucket, &sizes, &config).await?;
            let duration = Duration::from_millis(args.duration);
            let mut row = bench_reads::measure_row(
                &client,
                &config,
                &objects,
                &workload,
                args.clients,
                duration,
                args.seed,
                bench_reads::Reader { cache: 0, link: None },
            )
            .await?;
            row["recommended"] = json!(width == recommended);
            row["coupled_width"] = json!(width == k);
            if !args.json {
                let number = |name: &str| row[name].as_f64().unwrap_or(f64::NAN);
                let note = match (width == recommended, width == k) {
                    (true, _) => "← recommended",
                    (false, true) => "(coupled width k)",
                    _ => "",
                };
                println!(
                    "{width:>6} {:>10.1} {:>8} {:>8.1} {:>8.1} {note}",
                    number("bytes_per_sec") / 1e6,
                    row["seeks_per_sec"].as_f64().map_or("-".into(), |s| format!("{s:.1}")),
                    number("p50_ms"),
                    number("p99_ms"),
                );
            }
            rows.push(row);
        }
        Ok::<_, CliError>(rows)
    })?;
    if !(0.0..1.0).contains(&args.agree_within) {
        return Err(cli_error!("--agree-within must be a fraction in [0, 1)"));
    }
    let rate = |r: &Value| r["bytes_per_sec"].as_f64().unwrap_or(0.0);
    let best_row = rows.iter().max_by(|a, b| rate(a).total_cmp(&rate(b)));
    let best = best_row.and_then(|r| r["stripe_width"].as_u64()).unwrap_or(0) as usize;
    let best_rate = best_row.map_or(0.0, rate);
    let recommended_rate = rows.iter().find(|r| r["recommended"] == true).map_or(0.0, rate);
    // How far the recommendation is below the best (0 when it is the best).
    let shortfall = if best_rate > 0.0 { 1.0 - recommended_rate / best_rate } else { 0.0 };
    let agrees = shortfall <= args.agree_within;
    advice["best_measured_stripe_width"] = json!(best);
    advice["recommended_vs_best"] = json!(recommended_rate / best_rate.max(f64::MIN_POSITIVE));
    advice["agrees"] = json!(agrees);
    if let Some(path) = &args.plot {
        let points = |field: &str, scale: f64| -> Vec<(String, f64, f64)> {
            rows.iter()
                .map(|r| {
                    let x = r["stripe_width"].as_f64().unwrap_or(f64::NAN);
                    ("trace replay".to_string(), x, r[field].as_f64().unwrap_or(f64::NAN) * scale)
                })
                .collect()
        };
        crate::plot::Chart {
            title: format!("stripe width for {} (median read {})", spec, format_size(median)),
            x_label: "stripe width (blocks)".into(),
            x_log: false,
            x_names: Vec::new(),
            panels: vec![
                crate::plot::Panel::from_points("throughput (MB/s)", points("bytes_per_sec", 1e-6)),
                crate::plot::Panel::from_points("p99 latency (ms)", points("p99_ms", 1.0)),
            ],
        }
        .write(path)?;
    }
    if args.json {
        advice["rows"] = Value::Array(rows);
        println!("{}", serde_json::to_string_pretty(&advice).expect("json"));
    } else if best == recommended {
        println!("the replay agrees: width {best} has the highest throughput");
    } else if agrees {
        println!(
            "the replay agrees: width {recommended} is within {:.1}% of the best (width {best}; \
             --agree-within {}%)",
            shortfall * 100.0,
            args.agree_within * 100.0
        );
    } else {
        println!(
            "the replay disagrees: width {best} has the highest throughput, {:.1}% above width \
             {recommended} (the recommendation optimises for the median read; weigh \
             throughput against tail latency)",
            shortfall * 100.0 / (1.0 - shortfall).max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recommendation_is_the_median_read_in_blocks_within_one_to_k() {
        let mib = 1u64 << 20;
        assert_eq!(recommended_width(12 * mib, 8 * mib, 6), 2, "the issue's case");
        assert_eq!(recommended_width(12_000_000, 8 * mib, 6), 2);
        assert_eq!(recommended_width(8 * mib, 8 * mib, 6), 1);
        assert_eq!(recommended_width(8 * mib + 1, 8 * mib, 6), 2);
        assert_eq!(recommended_width(1, 8 * mib, 6), 1);
        assert_eq!(recommended_width(200 * mib, 8 * mib, 6), 6, "at most k");
        assert_eq!(widths_to_replay(2, 6), vec![1, 2, 3, 6]);
        assert_eq!(widths_to_replay(1, 6), vec![1, 2, 6]);
        assert_eq!(widths_to_replay(6, 6), vec![5, 6]);
    }
}
