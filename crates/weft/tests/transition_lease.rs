//! Transition leases on a real cluster (`weft up` processes, no mocks): a `weft transition`
//! that dies leaves a pending transition only until its lease passes; then a sweep (`weft
//! gc`, or `weft serve repair` at the start of a `weft up`) rolls it back — it is gone from
//! `GET /v1/transitions`, every unit it wrote is deleted from disk (whatever the gc grace),
//! the object reads byte-identical under its old layout — and a re-run completes. A live
//! executor renews its lease, so sweeps during its run leave it alone.

use std::{
    collections::BTreeSet,
    path::PathBuf,
    process::Child,
    time::{Duration, Instant},
};

use crate::common::{bytes, cluster::Cluster};
use serde_json::Value;

const NODES: usize = 20;
/// A transition of it takes about a second (4096 blocks of 16 KiB read one by one).
const SIZE: usize = 16 * 1024 * 1024 - 12_345;
/// rs(6,3), stripe width 3, 4 KiB cells, 16 KiB blocks.
const POLICY: [&str; 12] = [
    "--code",
    "rs",
    "--k",
    "6",
    "--r",
    "3",
    "--stripe-width",
    "3",
    "--cell",
    "4KiB",
    "--block",
    "16KiB",
];
const TIMEOUT: Duration = Duration::from_secs(60);

fn put_object(cluster: &Cluster, seed: u64) -> Vec<u8> {
    let mut create = vec!["bucket", "create", "bkt", "--json"];
    create.extend(POLICY);
    cluster.weft_json(&create);
    let data = bytes(seed, SIZE);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("o");
    std::fs::write(&file, &data).unwrap();
    cluster.weft_json(&["put", file.to_str().unwrap(), "bkt/o", "--json"]);
    data
}

fn pending(cluster: &Cluster) -> u64 {
    let (status, value) = cluster.meta_get("/v1/transitions");
    assert_eq!(status, 200, "{value}");
    value["pending"].as_u64().unwrap()
}

/// The file of unit `key` on disk `disk` of node `node` (docs/store-format.md).
fn file_of(cluster: &Cluster, unit: &Value) -> PathBuf {
    let (node, disk) = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
    let key = unit["unit_key"].as_str().unwrap();
    let stem = &key[..key.len() - 17];
    let fanout = format!("{:02x}", crc32c::crc32c(stem.as_bytes()) & 0xff);
    cluster.dir().join(format!("node-{node}/disk-{disk}/units/{fanout}/{key}.unit"))
}

/// (node, unit key) of every unit file of the object on the cluster's disks.
fn files_of(cluster: &Cluster, object_id: &str) -> BTreeSet<(u32, String)> {
    cluster
        .unit_keys_on_disks()
        .into_iter()
        .flat_map(|(node, keys)| keys.into_iter().map(move |key| (node, key)))
        .filter(|(_, key)| key.starts_with(object_id))
        .collect()
}

/// Every unit meta names is on its disk, and no other unit file of the object is left.
fn check_exact_files(cluster: &Cluster, stat: &Value) {
    let files = files_of(cluster, stat["object_id"].as_str().unwrap());
    let want: BTreeSet<(u32, String)> = stat["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["node_id"].as_u64().unwrap() as u32, u["unit_key"].as_str().unwrap().into()))
        .collect();
    assert_eq!(files, want, "unit files on disk vs units meta names");
}

fn transition_args(lease_ms: &str) -> Vec<&str> {
    vec![
        "transition",
        "bkt/o",
        "--code",
        "rs",
        "--k",
        "12",
        "--r",
        "3",
        "--json",
        "--lease-ms",
        lease_ms,
    ]
}

/// Spawns `weft transition` with `lease_ms` and SIGKILLs it once about half its new parity
/// is on disk; returns the plan meta had recorded (its `create` list).
fn start_and_kill(cluster: &Cluster, lease_ms: &str) -> Value {
    let mut child: Child = cluster.spawn_weft(&transition_args(lease_ms));
    let deadline = Instant::now() + TIMEOUT;
    let mut plan: Option<Value> = None;
    loop {
        assert!(child.try_wait().unwrap().is_none(), "the transition ended before its kill");
        assert!(Instant::now() < deadline, "the transition never got halfway");
        if plan.is_none() {
            let (status, value) = cluster.meta_get("/v1/transitions/bkt/o");
            if status == 200 {
                plan = Some(value);
            }
        }
        if let Some(plan) = &plan {
            let create = plan["create"].as_array().unwrap();
            if file_of(cluster, &create[create.len() / 2]).exists() {
                let _ = child.kill();
                let _ = child.wait();
                return plan.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// After the rollback: nothing pending, none of the transition's units on disk, the object
/// under its old layout with exactly its own units, byte-identical; then a re-run completes.
fn check_rolled_back_then_rerun(cluster: &Cluster, plan: &Value, before: &Value, data: &[u8]) {
    assert_eq!(pending(cluster), 0);
    let (status, gone) = cluster.meta_get("/v1/transitions/bkt/o");
    assert_eq!(status, 404, "{gone}");
    for unit in plan["create"].as_array().unwrap() {
        let file = file_of(cluster, unit);
        assert!(!file.exists(), "{} of the expired transition is left", file.display());
    }
    let now = cluster.stat("bkt/o");
    assert_eq!(now["layout"], before["layout"], "the old layout");
    let places = |stat: &Value| -> Vec<(Value, Value, Value, Value)> {
        let units = stat["units"].as_array().unwrap();
        units
            .iter()
            .map(|u| {
                (u["unit"].clone(), u["node_id"].clone(), u["disk"].clone(), u["unit_key"].clone())
            })
            .collect()
    };
    assert_eq!(places(&now), places(before), "the old units, where they were");
    check_exact_files(cluster, &now);
    assert!(cluster.get("bkt/o") == data, "the object reads byte-identical under its old layout");

    let report = cluster.weft_json(&transition_args("60000"));
    assert_eq!(report["mode"], "regroup", "{report}");
    let after = cluster.stat("bkt/o");
    assert_eq!(after["layout"]["code"], "rs(12,3)");
    assert_eq!(pending(cluster), 0);
    check_exact_files(cluster, &after);
    assert!(cluster.get("bkt/o") == data, "the object reads byte-identical under rs(12,3)");
}

#[test]
fn a_live_transition_renews_its_lease_and_a_dead_ones_is_rolled_back_by_gc() {
    let cluster = Cluster::start(NODES, &[]);
    let data = put_object(&cluster, 7);
    let before = cluster.stat("bkt/o");

    // A live executor with a 600 ms lease, swept with no grace all along: never expired.
    let mut child = cluster.spawn_weft(&transition_args("600"));
    let mut sweeps = 0;
    while child.try_wait().unwrap().is_none() {
        let swept = cluster.weft_json(&["gc", "--grace", "0", "--json"]);
        assert_eq!(swept["expired_transitions"], serde_json::json!([]), "{swept}");
        sweeps += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    eprintln!("{sweeps} sweeps during the live transition");
    assert_eq!(cluster.stat("bkt/o")["layout"]["code"], "rs(12,3)");
    // And back, to start the drill from rs(6,3).
    let mut back = vec!["transition", "bkt/o", "--json"];
    back.extend(POLICY);
    cluster.weft_json(&back);
    let before_drill = cluster.stat("bkt/o");
    assert_eq!(before_drill["layout"], before["layout"]);

    // A dead executor: its transition stays pending until the lease passes...
    let plan = start_and_kill(&cluster, "1000");
    assert_eq!(pending(&cluster), 1);
    let early = cluster.weft_json(&["gc", "--grace", "1h", "--json"]);
    assert_eq!(early["expired_transitions"], serde_json::json!([]), "{early}");
    std::thread::sleep(Duration::from_millis(1200));
    // ...then a sweep rolls it back and deletes its units at once, whatever the grace.
    let dry = cluster.weft_json(&["gc", "--dry-run", "--grace", "1h", "--json"]);
    assert_eq!(dry["expired_transitions"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(pending(&cluster), 1, "a dry run changes nothing");
    let swept = cluster.weft_json(&["gc", "--grace", "1h", "--json"]);
    let expired = swept["expired_transitions"].as_array().unwrap();
    assert_eq!(expired.len(), 1, "{swept}");
    assert_eq!(expired[0]["id"], plan["transition"]["id"]);
    let created = plan["create"].as_array().unwrap().len() as u64;
    assert!(swept["expired_units_deleted"].as_u64().unwrap() >= created, "{swept}");
    check_rolled_back_then_rerun(&cluster, &plan, &before_drill, &data);
}

#[test]
fn a_weft_up_restart_rolls_back_a_dead_executors_transition_at_once() {
    let mut cluster = Cluster::start(NODES, &[]);
    let data = put_object(&cluster, 11);
    let before = cluster.stat("bkt/o");
    let plan = start_and_kill(&cluster, "1000");
    assert_eq!(pending(&cluster), 1);
    std::thread::sleep(Duration::from_millis(1200));
    // `weft serve repair` sweeps at start (its default interval is 10 minutes).
    cluster.restart();
    let deadline = Instant::now() + TIMEOUT;
    while pending(&cluster) > 0 {
        assert!(Instant::now() < deadline, "the restart did not roll the transition back");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The units are deleted right after the expiry (by the same sweep).
    let deadline = Instant::now() + TIMEOUT;
    while plan["create"].as_array().unwrap().iter().any(|u| file_of(&cluster, u).exists()) {
        assert!(Instant::now() < deadline, "the expired transition's units stay on disk");
        std::thread::sleep(Duration::from_millis(100));
    }
    check_rolled_back_then_rerun(&cluster, &plan, &before, &data);
}
