//! `weft bench reads` (issue 17 item 2) on a small `weft up` under a fast disk model: rows for
//! every configuration, read size and load level with the documented fields, every read
//! checked (a wrong byte fails the run), seeks counted from the nodes' disk models, objects
//! written once and reused by the next run.

use crate::common::cluster::Cluster;
use serde_json::Value;

#[test]
fn bench_reads_measures_every_configuration_and_reuses_its_objects() {
    let cluster = Cluster::start(6, &["--disk-model", "hdd:position=1ms:rate=2GB"]);
    let args = [
        "bench",
        "reads",
        "--code",
        "rs",
        "--k",
        "2",
        "--r",
        "1",
        "--stripe-widths",
        "1,2",
        "--coupled",
        "4",
        "--cell",
        "64KiB",
        "--block",
        "256KiB",
        "--read-sizes",
        "256KiB,1MiB",
        "--clients",
        "1,3",
        "--duration",
        "300ms",
        "--objects",
        "2",
        "--object-size",
        "2MiB",
        "--json",
    ];
    let rows = cluster.weft_json(&args);
    let rows = rows.as_array().expect("an array of rows");
    // (rs(2,1) at widths 1 and 2, rs(4,1) coupled at 4) × 2 read sizes × 2 load levels.
    assert_eq!(rows.len(), 12, "{rows:?}");
    let configs: Vec<(String, u64, bool)> = rows
        .iter()
        .step_by(4)
        .map(|r| {
            (
                r["code"].as_str().unwrap().to_owned(),
                r["stripe_width"].as_u64().unwrap(),
                r["coupled"] == true,
            )
        })
        .collect();
    assert_eq!(
        configs,
        [("rs(2,1)".into(), 1, false), ("rs(2,1)".into(), 2, false), ("rs(4,1)".into(), 4, true)]
    );
    for row in rows {
        for field in ["read_bytes", "bytes_per_sec", "seeks_per_sec", "p50_ms", "p95_ms", "p99_ms"]
        {
            assert!(row[field].is_number(), "{field} in {row}");
        }
        assert!(row["reads"].as_u64().unwrap() > 0, "{row}");
        assert!(row["seeks_per_sec"].as_f64().unwrap() > 0.0, "modeled disks seek: {row}");
        assert!(row["p50_ms"].as_f64() <= row["p99_ms"].as_f64(), "{row}");
        assert_eq!(row["read_amplification"], 1.0, "a healthy read fetches what it returns: {row}");
    }
    let key = "bench-reads/reads/rs-2-1/w2/obj-0001";
    let generation = cluster.stat(key)["generation"].clone();
    let again = cluster.weft(&args);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(cluster.stat(key)["generation"], generation, "the second run rewrote its objects");
}

/// Items 2–5: degraded sequential reads with and without the degraded-read cache (the cache
/// cuts the amplification), a chart of the rows, a trace recorded by `weft get` and replayed
/// by `weft advise stripe-width`, which recommends ⌈median ÷ block⌉.
#[test]
fn degraded_reads_the_cache_the_plot_and_the_advisor() {
    let cluster = Cluster::start(6, &["--disk-model", "ssd:position=0.05ms:rate=2GB"]);
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("reads.svg");
    let plot_arg = plot.to_str().unwrap();
    let common = [
        "--code",
        "rs",
        "--k",
        "4",
        "--r",
        "2",
        "--cell",
        "64KiB",
        "--block",
        "256KiB",
        "--objects",
        "2",
        "--object-size",
        "2MiB",
    ];
    let mut args = vec!["bench", "reads"];
    args.extend(common);
    args.extend([
        "--stripe-widths",
        "2",
        "--read-sizes",
        "64KiB",
        "--pattern",
        "sequential",
        "--clients",
        "1",
        "--duration",
        "1500ms",
        "--degraded",
        "--degraded-cache",
        "0,16MiB",
        "--json",
        "--plot",
        plot_arg,
    ]);
    let rows = cluster.weft_json(&args);
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (without, with) = (&rows[0], &rows[1]);
    assert_eq!(
        (without["degraded_cache_bytes"].as_u64(), with["degraded_cache_bytes"].as_u64()),
        (Some(0), Some(16 << 20))
    );
    for row in rows {
        assert_eq!(row["degraded"], true, "{row}");
        assert!(row["failed_disks"][0]["node"].is_u64(), "{row}");
        assert_eq!(row["pattern"], "sequential", "{row}");
    }
    let amplification = |row: &Value| row["read_amplification"].as_f64().unwrap();
    assert!(
        amplification(without) > 1.0,
        "a degraded read fetches more than it returns: {without}"
    );
    assert_eq!(without["cache_hit_bytes"], 0, "{without}");
    assert!(with["cache_hit_bytes"].as_u64().unwrap() > 0, "{with}");
    assert!(
        amplification(with) * 1.2 < amplification(without),
        "the cache should cut the amplification: {} with, {} without",
        amplification(with),
        amplification(without)
    );
    let svg = std::fs::read_to_string(&plot).expect("the chart");
    assert!(
        svg.contains("<svg") && svg.contains("throughput (MB/s)") && svg.contains("cache 16"),
        "{svg}"
    );

    // A trace recorded by weft get: reads of 512 KiB (two 256 KiB blocks).
    let trace = dir.path().join("reads.jsonl");
    let trace_arg = trace.to_str().unwrap();
    let key = "bench-reads/reads/rs-4-2/w2/obj-0000";
    for start in [0u64, 3 << 16, 7 << 16] {
        let range = format!("{start}-{}", start + (512 << 10) - 1);
        let output = cluster.weft(&[
            "get",
            key,
            "--range",
            &range,
            "--trace-reads",
            trace_arg,
            "-o",
            "/dev/null",
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        (lines[1]["offset"].as_u64(), lines[1]["length"].as_u64()),
        (Some(3 << 16), Some(512 << 10))
    );
    assert_eq!(lines[0]["key"], "reads/rs-4-2/w2/obj-0000");

    let mut args = vec!["advise", "stripe-width", "--trace", trace_arg];
    args.extend(common);
    args.extend(["--clients", "2", "--duration", "300ms", "--json"]);
    let advice = cluster.weft_json(&args);
    assert_eq!(advice["median_read_bytes"], 512 << 10);
    assert_eq!(advice["recommended_stripe_width"], 2, "{advice}");
    let widths: Vec<u64> = advice["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["stripe_width"].as_u64().unwrap())
        .collect();
    assert_eq!(widths, [1, 2, 3, 4], "the recommendation, its neighbours and k");
    for row in advice["rows"].as_array().unwrap() {
        assert_eq!(row["pattern"], "trace", "{row}");
        // The trace records its one object's size: the replay reads that object only.
        assert_eq!(row["objects"], 1, "{row}");
        assert!(row["reads"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["read_amplification"], 1.0, "{row}");
    }
    let rate = |w: u64| {
        let rows = advice["rows"].as_array().unwrap();
        let row = rows.iter().find(|r| r["stripe_width"] == w).unwrap();
        row["bytes_per_sec"].as_f64().unwrap()
    };
    let best = advice["best_measured_stripe_width"].as_u64().unwrap();
    assert!(widths.iter().all(|&w| rate(w) <= rate(best)), "{advice}");
    let ratio = advice["recommended_vs_best"].as_f64().unwrap();
    assert!((ratio - rate(2) / rate(best)).abs() < 1e-9, "{advice}");
    assert_eq!(advice["agrees"], ratio >= 0.95, "{advice}");

    // Each client behind a modeled 8 MB/s link: two clients never get more than 16 MB/s.
    let mut args = vec!["bench", "reads"];
    args.extend(common);
    args.extend([
        "--stripe-widths",
        "2",
        "--read-sizes",
        "256KiB",
        "--clients",
        "2",
        "--duration",
        "1s",
        "--client-link",
        "8MB",
        "--json",
    ]);
    let rows = cluster.weft_json(&args);
    let row = &rows[0];
    assert_eq!(row["client_link_bytes_per_sec"], 8_000_000, "{row}");
    assert!(row["reads"].as_u64().unwrap() > 0, "{row}");
    let rate = row["bytes_per_sec"].as_f64().unwrap();
    assert!(rate <= 1.1 * 16e6, "two 8 MB/s links carried {rate} B/s: {row}");

    // Without a replay no cluster is needed; a bad trace line is named.
    std::fs::write(&trace, "{\"offset\": 0, \"length\": 12582912, \"timestamp\": 1}\nnope\n")
        .unwrap();
    let output = cluster.weft(&["advise", "stripe-width", "--trace", trace_arg, "--no-replay"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("line 2"));
    std::fs::write(&trace, "{\"offset\": 0, \"length\": 12582912, \"timestamp\": 1}\n").unwrap();
    let advice = cluster.weft_json(&[
        "advise",
        "stripe-width",
        "--trace",
        trace_arg,
        "--no-replay",
        "--json",
    ]);
    assert_eq!(advice["recommended_stripe_width"], 2, "12 MiB reads, 8 MiB blocks: {advice}");
}
