//! `weft bench reads` (issue 17 item 2) on a small `weft up` under a fast disk model: rows for
//! every configuration, read size and load level with the documented fields, every read
//! checked (a wrong byte fails the run), seeks counted from the nodes' disk models, objects
//! written once and reused by the next run.

mod common;

use common::cluster::Cluster;
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
    let output = cluster.weft(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
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
