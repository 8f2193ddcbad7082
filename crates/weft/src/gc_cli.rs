//! `weft gc`: one sweep of leaked units from the command line (`weft serve repair` runs the
//! same sweep periodically). The sweep itself is `weft_client::gc`.
//!
//! Invariants:
//! - The sweep's own rules hold (nothing younger than the grace, nothing referenced, nothing
//!   when meta's references cannot be read); a dry run deletes and expires nothing.
//! - With `--json`, stdout is one JSON object (the report); otherwise a short summary, and
//!   each error on stderr. A sweep that met errors exits non-zero after reporting.

use clap::Args;
use serde_json::json;
use weft_client::gc::{
    parse_duration_ms, sweep, GcOptions, DEFAULT_EXPIRE_WRITES_AFTER_MS, DEFAULT_GRACE_MS,
};

use crate::{
    cli_error,
    cluster_cli::{format_size, print_json, MetaUrlArgs},
    CliError,
};

/// Repair leases last this long by default (`weft serve repair --lease-ms`); a shorter grace
/// could delete a unit a repair wrote before meta points at it.
const DEFAULT_LEASE_MS: u64 = 60_000;

#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Say what would be deleted and expired; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Keep unreferenced units younger than this (30s, 10m, 6h, or milliseconds). Keep it
    /// longer than the repair executors' lease (60s by default): a repair writes its unit
    /// before meta points at it [default: 15m].
    #[arg(long, value_parser = parse_duration_ms)]
    pub grace: Option<u64>,
    /// Expire writes in progress begun longer ago than this (their client is presumed dead),
    /// or `off` [default: 6h].
    #[arg(long, value_parser = parse_expiry)]
    pub expire_writes_after: Option<Expiry>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `--expire-writes-after`: a duration or off.
#[derive(Debug, Clone, Copy)]
pub struct Expiry(pub Option<u64>);

/// Parses `off` / `never`, or a duration.
pub fn parse_expiry(text: &str) -> Result<Expiry, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "off" | "never" => Ok(Expiry(None)),
        _ => parse_duration_ms(text).map(|ms| Expiry(Some(ms))),
    }
}

/// A duration in words: `15m`, `90s`, `250ms`.
pub fn format_duration_ms(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

pub fn run(args: GcArgs) -> Result<(), CliError> {
    let options = GcOptions {
        grace_ms: args.grace.unwrap_or(DEFAULT_GRACE_MS),
        expire_writes_after_ms: args
            .expire_writes_after
            .map_or(Some(DEFAULT_EXPIRE_WRITES_AFTER_MS), |Expiry(after)| after),
        dry_run: args.dry_run,
    };
    if options.grace_ms < DEFAULT_LEASE_MS && !args.json {
        eprintln!(
            "note: a grace of {} is shorter than a repair lease ({}): a unit a repair is writing \
             right now may be deleted (it is then rebuilt again)",
            format_duration_ms(options.grace_ms),
            format_duration_ms(DEFAULT_LEASE_MS)
        );
    }
    let client = args.meta.cluster()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| cli_error!("cannot start the async runtime: {e}"))?;
    let report = runtime.block_on(sweep(&client, &options))?;
    if args.json {
        print_json(&json!(report));
    } else {
        let verb = if report.dry_run { "would delete" } else { "deleted" };
        println!(
            "{verb} {} unreferenced units ({}) on {} disks of {} nodes; {} units seen, {} \
             referenced, {} younger than the grace ({}) kept{}",
            report.deleted,
            format_size(report.bytes),
            report.disks_scanned,
            report.nodes_scanned,
            report.units_seen,
            report.referenced,
            report.skipped_young,
            format_duration_ms(report.grace_ms),
            if report.nodes_down > 0 {
                format!("; {} nodes down, not swept", report.nodes_down)
            } else {
                String::new()
            }
        );
        let verb = if report.dry_run { "would expire" } else { "expired" };
        for write in &report.expired_writes {
            println!(
                "{verb} abandoned write {}/{} (generation {}, {} units)",
                write.bucket, write.key, write.generation, write.units
            );
        }
        for error in &report.errors {
            eprintln!("weft gc: {error}");
        }
    }
    if report.errors_total > 0 {
        return Err(cli_error!(
            "the sweep met {} errors (what they concern was left alone); see above",
            report.errors_total
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_and_durations() {
        assert_eq!(parse_expiry("off").unwrap().0, None);
        assert_eq!(parse_expiry("6h").unwrap().0, Some(21_600_000));
        assert!(parse_expiry("soon").is_err());
        assert_eq!(format_duration_ms(900_000), "15m");
        assert_eq!(format_duration_ms(21_600_000), "6h");
        assert_eq!(format_duration_ms(90_000), "90s");
        assert_eq!(format_duration_ms(1500), "1500ms");
        assert_eq!(format_duration_ms(0), "0s");
    }
}
