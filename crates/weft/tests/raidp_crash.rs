//! Kill -9 of a node at every step of the RAIDP write protocol (journal written, disk
//! written, parity updated, acknowledged): after `weft up` restarts it, `weft raidp verify`
//! is clean and every acknowledged byte reads back. One test in this binary: the drill is
//! armed through the environment every node of the cluster inherits.

mod common;

use common::cluster::Cluster;
use serde_json::Value;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed as u8).collect()
}

#[test]
fn a_node_killed_at_every_protocol_step_loses_nothing_acknowledged() {
    let drill = tempfile::tempdir().unwrap();
    // Inherited by weft up and every node it starts; nothing is armed until a step's file
    // exists.
    std::env::set_var("WEFT_CRASH_DRILL", drill.path());
    let cluster = Cluster::start(5, &["--heartbeat-ms", "200", "--down-after-ms", "1500"]);
    cluster.create_bucket("warm", &["--code", "raidp", "--superchunk", "1MiB"]);
    let mut acknowledged: Vec<(String, Vec<u8>)> = Vec::new();
    let write = |path: &str, bytes: &[u8]| {
        let file = cluster.dir().join("input");
        std::fs::write(&file, bytes).unwrap();
        cluster.weft(&["put", file.to_str().unwrap(), path]).status.success()
    };
    assert!(write("warm/before", &pattern(300_000, 1)));
    acknowledged.push(("warm/before".into(), pattern(300_000, 1)));
    for (round, step) in ["journal", "disk", "parity", "ack"].into_iter().enumerate() {
        std::fs::write(drill.path().join(step), b"").unwrap();
        let restarts_before = restarts(&cluster);
        for i in 0..3 {
            let path = format!("warm/{step}-{i}");
            let bytes = pattern(150_000 + 10_000 * i, 10 * round as u32 + i as u32);
            // A put that met the crash may fail, or succeed on its retry elsewhere; only
            // what succeeded was acknowledged.
            if write(&path, &bytes) {
                acknowledged.push((path, bytes));
            }
        }
        assert!(!drill.path().join(step).exists(), "no write reached step {step}");
        // weft up restarts the killed node; wait for it to be back and heard from.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let status = cluster.status();
            // Back: restarted, running, and heard from at its new address.
            let file = cluster.cluster_file();
            let running: Vec<&Value> = file["services"].as_array().unwrap().iter().collect();
            let heard = status["nodes"].as_array().unwrap().iter().all(|n| {
                n["state"] == "up"
                    && running.iter().any(|s| {
                        s["id"] == n["id"]
                            && s["state"] == "running"
                            && s["endpoint"] == n["endpoint"]
                    })
            });
            let back = restarts(&cluster) > restarts_before && heard;
            if back {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "step {step}: the node is not back: {status}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let out = cluster.weft(&["raidp", "verify", "--json", "--settle", "300ms"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "verify after {step} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(report["clean"], true, "after a crash at {step}: {report}");
        for (path, bytes) in &acknowledged {
            assert!(cluster.get(path) == *bytes, "after a crash at {step}: {path} differs");
        }
    }
    // Settled for good: a second verify finds nothing pending and stays clean.
    let report = cluster.weft_json(&["raidp", "verify", "--json", "--no-settle"]);
    assert_eq!(report["clean"], true, "{report}");
}

/// Restarts of every service so far, from `weft up`'s cluster file.
fn restarts(cluster: &Cluster) -> u64 {
    cluster.cluster_file()["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["restarts"].as_u64().unwrap_or(0))
        .sum()
}
