//! `weft ec repair-cost`: what repairing each unit of a code reads, beside Reed-Solomon.
//!
//! Invariants:
//! - Figures come from the code's own `repair_plan`, the plan `weft ec repair` and the cluster
//!   follow, never from a formula kept beside it: what is printed is what repair reads.
//! - Reads are reported in units of one unit's size (bytes read / unit length), for a unit
//!   length that is a multiple of the code's sub-chunk layout, so they do not depend on it.
//! - The baseline is rs(k, r) with the same k and r (for lrc, r = l + g): it reads k whole
//!   units for any repair.

use clap::Args;
use serde::Serialize;
use weft_codes::{CodeSpec, RepairPlan};

use crate::{cli_error, CliError};

#[derive(Debug, Args)]
pub struct RepairCostArgs {
    #[command(flatten)]
    code: crate::CodeArgs,
    /// Units to treat as unavailable besides the one repaired (comma separated), to see the
    /// fallback plans.
    #[arg(long, value_delimiter = ',')]
    unavailable: Vec<usize>,
    /// Print {"units": [one object per unit], "summary": {…}} as one JSON document.
    #[arg(long)]
    json: bool,
    /// Print one JSON object per unit, then the summary object, one per line.
    #[arg(long, conflicts_with = "json")]
    json_lines: bool,
}

#[derive(Debug, Serialize)]
struct UnitRow {
    code: String,
    unit: usize,
    kind: &'static str,
    helpers: Vec<usize>,
    /// Bytes read divided by the unit length.
    read_units: f64,
    /// `read_units` divided by what rs(k,r) reads (k).
    fraction_of_rs: f64,
    /// Contiguous ranges read from each helper, in the order of `helpers`.
    ranges_per_helper: Vec<usize>,
}

#[derive(Debug, Serialize)]
struct SummaryRow {
    code: String,
    summary: &'static str,
    unit_len: usize,
    data_units_average_read_units: f64,
    all_units_average_read_units: f64,
    data_units_best_read_units: f64,
    rs_read_units: f64,
    data_units_fraction_of_rs: f64,
    all_units_fraction_of_rs: f64,
    unrepairable_units: Vec<usize>,
}

/// Counts the contiguous runs per helper, merging ranges that touch.
fn ranges_per_helper(plan: &RepairPlan) -> Vec<(usize, usize)> {
    let mut per_helper: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    for read in &plan.reads {
        match per_helper.iter_mut().find(|(unit, _)| *unit == read.unit) {
            Some((_, ranges)) => ranges.push((read.offset, read.len)),
            None => per_helper.push((read.unit, vec![(read.offset, read.len)])),
        }
    }
    per_helper.sort_by_key(|(unit, _)| *unit);
    per_helper
        .into_iter()
        .map(|(unit, mut ranges)| {
            ranges.sort_unstable();
            let mut runs = 0;
            let mut end = None;
            for (offset, len) in ranges {
                if end != Some(offset) {
                    runs += 1;
                }
                end = Some(offset + len);
            }
            (unit, runs)
        })
        .collect()
}

pub fn run(args: &RepairCostArgs) -> Result<(), CliError> {
    let spec = args.code.spec()?;
    let code = spec.build()?;
    let n = code.total_units();
    if let Some(&bad) = args.unavailable.iter().find(|&&u| u >= n) {
        return Err(cli_error!("--unavailable {bad} is out of range: {spec} has units 0..{n}"));
    }
    // Any multiple of the layout works; a few of them keep odd sub-chunk sizes visible.
    let unit_len = code.unit_len_multiple() * 64;
    let rs_read_units = code.data_units() as f64;
    let baseline = CodeSpec::Rs { k: code.data_units(), r: code.parity_units() };
    let mut rows = Vec::with_capacity(n);
    let mut unrepairable = Vec::new();
    for unit in 0..n {
        if args.unavailable.contains(&unit) {
            continue;
        }
        let plan = match code.repair_plan(unit, &args.unavailable, unit_len) {
            Ok(plan) => plan,
            Err(_) => {
                unrepairable.push(unit);
                continue;
            }
        };
        let runs = ranges_per_helper(&plan);
        let read_units = plan.bytes_read() as f64 / unit_len as f64;
        rows.push(UnitRow {
            code: spec.to_string(),
            unit,
            kind: if unit < code.data_units() { "data" } else { "parity" },
            helpers: runs.iter().map(|(u, _)| *u).collect(),
            read_units,
            fraction_of_rs: read_units / rs_read_units,
            ranges_per_helper: runs.iter().map(|(_, r)| *r).collect(),
        });
    }
    let average = |rows: &mut dyn Iterator<Item = &UnitRow>| {
        let (sum, count) = rows.fold((0.0, 0usize), |(s, c), r| (s + r.read_units, c + 1));
        if count == 0 {
            f64::NAN
        } else {
            sum / count as f64
        }
    };
    let data_average = average(&mut rows.iter().filter(|r| r.kind == "data"));
    let all_average = average(&mut rows.iter());
    let data_best = rows
        .iter()
        .filter(|r| r.kind == "data")
        .map(|r| r.read_units)
        .fold(f64::INFINITY, f64::min);
    let summary = SummaryRow {
        code: spec.to_string(),
        summary: "average",
        unit_len,
        data_units_average_read_units: data_average,
        all_units_average_read_units: all_average,
        data_units_best_read_units: data_best,
        rs_read_units,
        data_units_fraction_of_rs: data_average / rs_read_units,
        all_units_fraction_of_rs: all_average / rs_read_units,
        unrepairable_units: unrepairable,
    };
    if args.json_lines {
        for row in &rows {
            crate::cluster_cli::print_json(&serde_json::to_value(row)?);
        }
        crate::cluster_cli::print_json(&serde_json::to_value(&summary)?);
        return Ok(());
    }
    if args.json {
        let document = serde_json::json!({"units": rows, "summary": summary});
        crate::cluster_cli::print_json(&document);
        return Ok(());
    }
    println!(
        "repair cost of {spec} (α = {}; reads in units of one unit's size), \
         beside {baseline}, which reads {rs_read_units} units for any repair",
        code.sub_chunks()
    );
    if !args.unavailable.is_empty() {
        println!("unavailable besides the repaired unit: {:?}", args.unavailable);
    }
    println!(
        "{:>5}  {:<6}  {:>7}  {:>10}  {:>7}  ranges per helper",
        "unit", "kind", "helpers", "read", "vs rs"
    );
    for row in &rows {
        let ranges: Vec<String> = row
            .helpers
            .iter()
            .zip(&row.ranges_per_helper)
            .map(|(h, r)| format!("{h}:{r}"))
            .collect();
        println!(
            "{:>5}  {:<6}  {:>7}  {:>10.4}  {:>6.1}%  {}",
            row.unit,
            row.kind,
            row.helpers.len(),
            row.read_units,
            row.fraction_of_rs * 100.0,
            ranges.join(" ")
        );
    }
    for unit in &summary.unrepairable_units {
        println!("{unit:>5}  cannot be repaired with {:?} unavailable", args.unavailable);
    }
    println!(
        "average over data units: {:.4} units ({:.1}% of {baseline}); best data unit {:.4}",
        data_average,
        summary.data_units_fraction_of_rs * 100.0,
        data_best
    );
    println!(
        "average over all units:  {:.4} units ({:.1}% of {baseline})",
        all_average,
        summary.all_units_fraction_of_rs * 100.0
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use weft_codes::{ReadRange, RepairPlan};

    #[test]
    fn touching_ranges_count_as_one_run() {
        let read = |unit, offset, len| ReadRange { unit, offset, len };
        let plan = RepairPlan {
            target: 0,
            unit_len: 100,
            reads: vec![read(2, 50, 50), read(1, 0, 10), read(2, 0, 50), read(1, 20, 10)],
        };
        assert_eq!(super::ranges_per_helper(&plan), vec![(1, 2), (2, 1)]);
    }
}
