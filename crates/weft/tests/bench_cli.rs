//! `weft bench` runs here with tiny inputs so it never rots: the JSON shape is the contract
//! scripts rely on, and a peer whose output differs must make the command fail.

use std::process::Command;

use serde_json::Value;

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// The rows of a `--json` run: stdout is one JSON document, an array of row objects.
fn rows(output: &std::process::Output) -> Vec<Value> {
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let document: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {stdout}"));
    let rows = document.as_array().unwrap_or_else(|| panic!("not an array: {document}")).clone();
    assert!(rows.iter().all(Value::is_object), "{document}");
    rows
}

/// The rows of a `--json-lines` run: one JSON object per stdout line.
fn lines(output: &std::process::Output) -> Vec<Value> {
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every stdout line is JSON"))
        .collect()
}

/// Issue 16 item 9: `--json` is one document (an array for row sets), `--json-lines` one
/// object per line with the same rows; an error with either is one JSON object on stderr
/// with the same exit code as without.
#[test]
fn json_is_one_document_json_lines_are_rows_and_errors_are_json() {
    let args = ["bench", "ec", "--code", "rs", "--k", "4", "--r", "2", "--shard", "4KiB"];
    let quick = ["--trials", "1", "--seconds", "0.001", "--ops", "encode,decode"];
    let document = rows(&weft().args(args).args(quick).arg("--json").output().unwrap());
    let streamed = lines(&weft().args(args).args(quick).arg("--json-lines").output().unwrap());
    assert_eq!(document.len(), 2, "{document:?}");
    let ops = |rows: &[Value]| rows.iter().map(|r| r["op"].clone()).collect::<Vec<_>>();
    assert_eq!(ops(&document), ops(&streamed));

    // Errors: the same exit code, JSON only when asked for.
    let bad = ["bench", "ec", "--code", "rs", "--k", "0", "--r", "2", "--shard", "4KiB"];
    let plain = weft().args(bad).output().unwrap();
    let json = weft().args(bad).arg("--json").output().unwrap();
    assert_eq!(plain.status.code(), Some(1), "{plain:?}");
    assert_eq!(json.status.code(), plain.status.code());
    assert!(String::from_utf8_lossy(&plain.stderr).starts_with("weft: "), "{plain:?}");
    assert!(json.stdout.is_empty(), "{json:?}");
    let error: Value =
        serde_json::from_slice(&json.stderr).expect("the error is one JSON document");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains('k'), "{error}");
    assert!(error["error"]["code"].is_string(), "{error}");
    // A wrong command line: exit 2 either way, code "usage".
    let usage = weft().args(["bench", "ec", "--no-such-flag", "--json"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2), "{usage:?}");
    let error: Value = serde_json::from_slice(&usage.stderr).expect("one JSON document");
    assert_eq!(error["error"]["code"], "usage", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("--no-such-flag"), "{error}");
    assert_eq!(
        weft().args(["bench", "ec", "--no-such-flag"]).output().unwrap().status.code(),
        Some(2)
    );
}

#[test]
fn bench_ec_json_rows() {
    let output = weft()
        .args(["bench", "ec", "--code", "rs", "--k", "6", "--r", "3", "--shard", "4KiB"])
        .args(["--trials", "1", "--seconds", "0.001", "--json", "--threads", "2"])
        .output()
        .unwrap();
    let rows = rows(&output);
    let ops: Vec<&str> = rows.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["encode", "rebuild", "decode"]);
    for row in &rows {
        assert_eq!(row["code"], "rs");
        assert_eq!(row["k"], 6);
        assert_eq!(row["r"], 3);
        assert_eq!(row["shard_bytes"], 4096);
        assert_eq!(row["threads"], 2);
        assert_eq!(row["impl"], "weft");
        assert!(row["bytes_per_sec"].as_f64().unwrap() > 0.0);
    }
}

/// Item 5 of issue 17: the benches that print a series draw it with --plot, beside the
/// table (or the JSON), with labelled axes and one bar per row.
#[test]
fn bench_ec_and_engine_draw_their_rows_with_plot() {
    let dir = tempfile::tempdir().unwrap();
    let ec = dir.path().join("ec.svg");
    let output = weft()
        .args(["bench", "ec", "--code", "rs", "--k", "4", "--r", "2", "--shard", "4KiB"])
        .args(["--trials", "1", "--seconds", "0.001", "--plot", ec.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("encode"), "the table is printed too");
    let svg = std::fs::read_to_string(&ec).unwrap();
    for text in ["encode", "rebuild", "decode", "rate (GB/s of data)", "operation", "weft rs(4,2)"]
    {
        assert!(svg.contains(text), "{text} missing from the chart");
    }
    let engine = dir.path().join("engine.svg");
    let output = weft()
        .args(["bench", "engine", "--rails", "simd,scalar", "--scheduler", "fcfs"])
        .args(["--code", "rs", "--k", "4", "--r", "2", "--shard", "4KiB", "--size", "64KiB"])
        .args(["--chunk", "1KiB", "--json", "--plot", engine.to_str().unwrap()])
        .output()
        .unwrap();
    let rows = rows(&output);
    let svg = std::fs::read_to_string(&engine).unwrap();
    for row in &rows {
        let rail = row["rail"].as_str().unwrap();
        assert!(svg.contains(rail), "{rail} missing from the chart");
    }
    assert!(svg.contains("rail / scheduler"));
}

#[test]
fn bench_ec_against_isal_when_installed() {
    if weft_isal::Isal::load().is_err() && std::env::var("WEFT_REQUIRE_ISAL").as_deref() != Ok("1")
    {
        eprintln!("ISA-L not installed: skipping the side-by-side bench check");
        return;
    }
    for (k, r) in [(10, 4), (6, 3), (12, 4), (20, 4)] {
        let output = weft()
            .args(["bench", "ec", "--k", &k.to_string(), "--r", &r.to_string()])
            .args(["--shard", "8KiB", "--trials", "1", "--seconds", "0.001", "--json"])
            .args(["--compare", "isal"])
            .output()
            .unwrap();
        let rows = rows(&output);
        assert_eq!(rows.len(), 6, "weft and isal rows for three ops");
        for op in ["encode", "rebuild", "decode"] {
            let weft_row = rows.iter().find(|r| r["op"] == op && r["impl"] == "weft").unwrap();
            assert!(rows.iter().any(|r| r["op"] == op && r["impl"] == "isal"));
            assert!(weft_row["ratio_vs_isal"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn bench_ec_refuses_bad_parameters() {
    for (args, expected) in [
        (vec!["--k", "0"], "k must be at least 1"),
        (vec!["--k", "250", "--r", "7"], "exceeds 256"),
        (vec!["--threads", "0"], "--threads"),
        (vec!["--shard", "1XB"], "unknown size unit"),
        (vec!["--code", "rep", "--compare", "isal"], "Reed-Solomon only"),
        (vec!["--code", "zz"], "unknown code"),
        (vec!["--code", "lrc", "--compare", "klauspost"], "needs --code rs"),
        (
            vec![
                "--compare",
                "klauspost",
                "--klauspost-bin",
                "/nonexistent/klauspost-ec",
                "--ops",
                "rebuild",
                "--shard",
                "4KiB",
            ],
            "go build -o klauspost-ec",
        ),
    ] {
        let output = weft().args(["bench", "ec", "--trials", "1"]).args(&args).output().unwrap();
        assert!(!output.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?} must say why; stderr: {stderr}");
    }
}

/// `--compare klauspost` runs bench/klauspost's Go program beside weft, when a Go toolchain
/// is on PATH and its module proxy serves klauspost/reedsolomon (skipped, saying so,
/// otherwise: the peer is optional, as ISA-L is).
#[test]
fn bench_ec_runs_klauspost_beside_weft() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("klauspost-ec");
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/klauspost");
    let built = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&source)
        .output();
    match built {
        Ok(output) if output.status.success() => {}
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            eprintln!("skipped: go build of bench/klauspost failed: {stderr}");
            return;
        }
        Err(e) => {
            eprintln!("skipped: no Go toolchain ({e})");
            return;
        }
    }
    let output = weft()
        .args(["bench", "ec", "--code", "rs", "--k", "4", "--r", "2", "--shard", "64KiB"])
        .args(["--ops", "encode,rebuild,decode", "--trials", "2", "--seconds", "0.02", "--json"])
        .args(["--compare", "klauspost", "--klauspost-bin"])
        .arg(&bin)
        .args(["--klauspost-simd", "none"])
        .output()
        .unwrap();
    let rows = rows(&output);
    // The runner was held to portable Go, and its rows say so.
    assert!(
        rows.iter().filter(|r| r["impl"] == "klauspost").all(|r| r["simd"] == "none"),
        "{rows:?}"
    );
    for op in ["encode", "rebuild"] {
        let of = |implementation: &str| {
            rows.iter()
                .find(|r| r["op"] == op && r["impl"] == implementation)
                .unwrap_or_else(|| panic!("no {implementation} {op} row in {rows:?}"))
        };
        let (weft_row, peer) = (of("weft"), of("klauspost"));
        assert!(peer["bytes_per_sec"].as_f64().unwrap() > 0.0, "{peer}");
        assert_eq!(peer["k"], 4);
        let ratio = weft_row["ratio_vs_klauspost"].as_f64().unwrap();
        let expected =
            weft_row["bytes_per_sec"].as_f64().unwrap() / peer["bytes_per_sec"].as_f64().unwrap();
        assert!((ratio - expected).abs() < 1e-9 * expected, "{weft_row} {peer}");
    }
    // Decode is weft's alone (klauspost-ec measures encode and rebuild).
    assert!(rows.iter().any(|r| r["op"] == "decode" && r["impl"] == "weft"), "{rows:?}");
    assert!(!rows.iter().any(|r| r["op"] == "decode" && r["impl"] == "klauspost"), "{rows:?}");
}

#[test]
fn bench_engine_json_rows() {
    let output = weft()
        .args(["bench", "engine", "--rails", "simd,scalar,isal", "--scheduler", "rate-aware,fcfs"])
        .args(["--code", "rs", "--k", "6", "--r", "3", "--shard", "4KiB", "--size", "256KiB"])
        .args(["--chunk", "1KiB", "--json"])
        .output()
        .unwrap();
    let rows = rows(&output);
    let rails: Vec<&str> = rows.iter().map(|r| r["rail"].as_str().unwrap()).collect();
    let isal = weft_isal::Isal::load().is_ok();
    let expected: &[&str] = if isal {
        &["simd", "scalar", "isal", "sum", "aggregate", "aggregate"]
    } else {
        &["simd", "scalar", "sum", "aggregate", "aggregate"]
    };
    assert_eq!(rails, expected);
    let schedulers: Vec<&str> = rows.iter().map(|r| r["scheduler"].as_str().unwrap()).collect();
    assert_eq!(&schedulers[schedulers.len() - 2..], ["rate-aware", "fcfs"]);
    let mut sum = 0.0;
    for row in &rows {
        let rate = row["bytes_per_sec"].as_f64().unwrap();
        assert!(rate > 0.0);
        assert_eq!(row["code"], "rs(6,3)");
        match row["rail"].as_str().unwrap() {
            "sum" => assert!((rate - sum).abs() <= 1e-6 * sum),
            rail => {
                assert!(row["p50_us"].as_f64().unwrap() <= row["p99_us"].as_f64().unwrap());
                // A rail alone did all the work, so was busy (in an aggregate a slow rail may
                // get no piece at all). No upper bound: a piece straddling a short run's start
                // or end counts whole, and CI machines preempt.
                for share in row["rails"].as_array().unwrap() {
                    let busy = share["busy"].as_f64().unwrap();
                    assert!(busy.is_finite() && busy >= 0.0, "{rail}: busy {busy}");
                    assert!(rail == "aggregate" || busy > 0.0, "{rail} alone was never busy");
                }
                if rail != "aggregate" {
                    sum += rate;
                    assert!(row.get("vs_sum").is_none(), "{rail} alone has no ratio to the sum");
                    continue;
                }
                // Medians of same-round ratios: positive, and rate-aware's to fcfs comes with
                // the count of rounds it was ahead (of the default 11).
                assert!(row["vs_sum"].as_f64().unwrap() > 0.0);
                if row["scheduler"] == "rate-aware" {
                    assert!(row["vs_fcfs"].as_f64().unwrap() > 0.0);
                    assert!(row["ahead_of_fcfs_rounds"].as_u64().unwrap() <= 11);
                } else {
                    assert!(row.get("vs_fcfs").is_none(), "fcfs has no ratio to itself");
                }
            }
        }
    }
}

#[test]
fn bench_engine_pinned_placement_pins_every_worker_and_the_submitter() {
    let output = weft()
        .args(["bench", "engine", "--rails", "simd,scalar", "--scheduler", "rate-aware,fcfs"])
        .args(["--code", "rs", "--k", "6", "--r", "3", "--shard", "4KiB", "--size", "128KiB"])
        .args(["--rounds", "3", "--placement", "pinned", "--json"])
        .output()
        .unwrap();
    let rows = rows(&output);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for row in rows.iter().filter(|r| r["rail"] != "sum") {
        let submitter = row["submitter_core"].as_u64();
        let cores: Vec<u64> = row["rails"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|share| {
                share["cores"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap())
            })
            .collect();
        let workers = row["rails"].as_array().unwrap().len();
        if cpus < 2 || (row["rail"] == "aggregate" && cpus < workers) {
            // Too few CPUs for a core per worker: everything floats.
            assert_eq!(submitter, None, "{row}");
            continue;
        }
        let submitter =
            submitter.unwrap_or_else(|| panic!("pinned row without a submitter core: {row}"));
        assert_eq!(cores.len(), workers, "one core per worker: {row}");
        if cores.len() < cpus {
            assert!(
                !cores.contains(&submitter),
                "a core was free, yet {submitter} is a rail's: {row}"
            );
        } else {
            // No core left: beside a rail (which one, the slowest by the engine's measured
            // rate, is the unit test's: rates on a loaded CI machine rank by noise).
            assert!(cores.contains(&submitter), "{row}");
        }
    }
}

#[test]
fn bench_engine_rejects_an_unknown_rail() {
    let output = weft()
        .args(["bench", "engine", "--rails", "gpu", "--size", "64KiB", "--shard", "4KiB"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a rail"));
}

#[test]
fn bench_engine_decodes_and_skips_rails_that_decline_the_code() {
    let output = weft()
        .args(["bench", "engine", "--rails", "simd,isal", "--op", "decode", "--lost", "2"])
        .args(["--code", "rs", "--k", "4", "--r", "2", "--shard", "4KiB", "--size", "128KiB"])
        .args(["--chunk", "1KiB", "--rounds", "1", "--json"])
        .output()
        .unwrap();
    let decoded = rows(&output);
    assert!(decoded
        .iter()
        .all(|r| r["op"] == "decode" && r["bytes_per_sec"].as_f64().unwrap() > 0.0));
    assert_eq!(decoded[0]["rail"], "simd");
    // ISA-L declines Clay: the bench goes on with the rails that accept it.
    let output = weft()
        .args(["bench", "engine", "--rails", "simd,isal", "--op", "decode", "--code", "clay"])
        .args(["--k", "4", "--r", "2", "--shard", "4KiB", "--size", "64KiB", "--rounds", "1"])
        .args(["--json"])
        .output()
        .unwrap();
    let rails: Vec<String> =
        rows(&output).iter().map(|r| r["rail"].as_str().unwrap().to_string()).collect();
    assert_eq!(rails, ["simd"]);
    // A pattern the code cannot rebuild is refused up front.
    let output = weft()
        .args(["bench", "engine", "--op", "decode", "--k", "4", "--r", "2", "--lost", "3"])
        .args(["--shard", "4KiB", "--size", "64KiB"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot rebuild"));
}

/// `weft bench geometric` end to end on tiny W2-like objects: each configuration on a
/// `weft up` of its own; every read is checked by the bench itself; the repair traffic it
/// measures is the one its codes' repair plans predict; the chart names every configuration.
#[test]
fn bench_geometric_runs_small_and_measures_what_the_plans_predict() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("geo.svg");
    let output = weft()
        .args(["bench", "geometric", "--workload", "w2", "--objects", "40"])
        .args(["--configs", "geo-clay,striped-rs", "--hardware", "raw", "--nodes", "15"])
        .args(["--ranges", "4", "--reads", "6", "--dir", dir.path().to_str().unwrap()])
        .args(["--json", "--plot", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    for row in rows {
        let recovery = &row["recovery"];
        assert!(recovery["bytes_recovered"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(recovery["bytes_read"], recovery["planned_bytes_read"], "{row}");
        assert_eq!(recovery["bytes_recovered"], recovery["planned_bytes_recovered"], "{row}");
        assert!(row["degraded"]["objects"].as_u64().unwrap() > 0, "{row}");
    }
    let geo = &rows[0];
    assert_eq!(geo["pack"]["objects"], 40, "{geo}");
    // Packed: a layout record of a few bytes per object.
    let layout = geo["metadata"]["layout_bytes_per_object"].as_f64().unwrap();
    assert!(layout > 0.0 && layout <= 40.0, "{geo}");
    assert!(report["summary"][0]["clay_over_rs_recovery"].is_number(), "{report}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    for text in ["geo-clay", "striped-rs", "recovery of one node (MB/s)"] {
        assert!(chart.contains(text), "{text} missing from the chart");
    }
    // The clusters are gone with their directories.
    let left: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 1, "only the chart is left: {left:?}");
}

#[test]
fn bench_meta_measures_every_op_on_every_store_and_both_plans_agree() {
    // PostgreSQL too when its server programs are here (CI installs them and insists).
    let postgres = weft_meta::pg_local::server_programs().is_ok()
        || std::env::var("WEFT_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
    let stores = if postgres { "redb,postgres" } else { "redb" };
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("meta.svg");
    let output = weft()
        .args(["bench", "meta", "--objects", "300,900", "--ops", "20", "--json"])
        .args(["--store", stores, "--nodes", "12", "--disks-per-node", "2"])
        .arg("--plot")
        .arg(&plot)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows = rows(&output);
    // The chart draws every store's ops, in its three panels.
    let chart = std::fs::read_to_string(&plot).unwrap();
    for store in stores.split(',') {
        for op in ["begin_commit", "get", "list", "plan_disk_repair_scan"] {
            let series = format!("{store} {op}");
            assert!(chart.contains(&series), "{series} missing from the chart");
        }
    }
    for panel in ["µs per op", "ms per 1000-key page", "µs per unit planned"] {
        assert!(chart.contains(panel), "{panel} missing from the chart");
    }
    let ops = ["begin_commit", "get", "list", "plan_disk_repair", "plan_disk_repair_scan"];
    for store in stores.split(',') {
        for objects in [300, 900] {
            for op in ops {
                let row = rows
                    .iter()
                    .find(|r| r["store"] == store && r["objects"] == objects && r["op"] == op)
                    .unwrap_or_else(|| panic!("no {op} row of {store} at {objects}: {rows:?}"));
                assert!(row["ops_per_sec"].as_f64().unwrap() > 0.0, "{row}");
                assert!(row["bytes_per_object"].as_f64().unwrap() > 100.0, "{row}");
            }
            let plan = |op: &str| {
                rows.iter()
                    .find(|r| r["store"] == store && r["objects"] == objects && r["op"] == op)
                    .unwrap()["units"]
                    .as_u64()
                    .unwrap()
            };
            // rs(6,3) on 24 disks: a disk holds units of about 9/24 of the objects.
            let units = plan("plan_disk_repair");
            assert_eq!(units, plan("plan_disk_repair_scan"), "{store} at {objects}");
            assert!(units > objects / 8 && units < objects, "{units} units of {objects}");
        }
    }
}

#[test]
fn bench_hash_compares_each_kernel_with_its_crate() {
    let output = weft()
        .args(["bench", "hash", "--size", "300KiB", "--rounds", "3", "--json"])
        .output()
        .unwrap();
    let rows = rows(&output);
    let hashes: Vec<&str> = rows.iter().map(|r| r["hash"].as_str().unwrap()).collect();
    assert_eq!(
        hashes,
        ["unit digest (keyed)", "old unit digest (BLAKE3)", "upload (MD5 + SHA-256)", "MD5"]
    );
    for row in &rows {
        let (ours, theirs) =
            (row["weft_gb_s"].as_f64().unwrap(), row["peer_gb_s"].as_f64().unwrap());
        assert!(ours > 0.0 && theirs > 0.0, "{row}");
        assert!(row["ratio"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["size_bytes"], 300 << 10);
        assert_eq!(row["rounds"], 3);
        assert!(row["machine"]["cores"].as_u64().unwrap() >= 1, "{row}");
    }
    let refused = weft().args(["bench", "hash", "--size", "0"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--size must be"));
}
