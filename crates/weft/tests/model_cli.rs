//! `weft up --disk-model --net-model` (issue 17): every node runs under the hardware model,
//! objects round-trip unchanged, and the model's per-disk counters reach `weft status --json`
//! through the heartbeats. A bad model stops `weft up` before anything starts.

use crate::common::{bytes, cluster::Cluster};

#[test]
fn a_modeled_cluster_stores_the_same_bytes_and_reports_its_disks() {
    let cluster = Cluster::start(
        4,
        &["--disk-model", "ssd", "--net-model", "10Gbit", "--heartbeat-ms", "200"],
    );
    cluster.weft_json(&["bucket", "create", "modeled", "--json", "--k", "2", "--r", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("object");
    let data = bytes(17, 9 << 20);
    std::fs::write(&file, &data).unwrap();
    cluster.weft_json(&["put", file.to_str().unwrap(), "modeled/object", "--json"]);
    assert!(cluster.get("modeled/object") == data, "the modeled cluster changed bytes");
    let status = cluster.wait_for_status("heartbeats carrying the model's counters", |status| {
        let disks = status["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|n| n["disks"].as_array().cloned().unwrap_or_default());
        disks.map(|d| d["model"]["bytes"].as_u64().unwrap_or(0)).sum::<u64>() >= (9 << 20) * 3 / 2
    });
    for node in status["nodes"].as_array().unwrap() {
        let model = &node["disks"][0]["model"];
        assert_eq!(model["model"], "ssd 0.1ms 500MB/s", "{node}");
        assert!(model["ios"].as_u64().unwrap() >= model["seeks"].as_u64().unwrap(), "{model}");
    }
}

#[test]
fn a_bad_model_stops_weft_up_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(crate::common::cluster::weft_bin())
        .args(["up", "--dir", dir.path().to_str().unwrap(), "--meta-listen", "127.0.0.1:0"])
        .args(["--disk-model", "tape"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--disk-model") && stderr.contains("tape"), "{stderr}");
}
