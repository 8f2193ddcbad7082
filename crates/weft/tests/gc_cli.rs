//! `weft gc` on a real cluster (`weft up` processes): a node stopped during `weft rm` keeps
//! the deleted object's units; once it is back, a dry run names them and deletes nothing, a
//! long grace keeps them, and a sweep with no grace deletes exactly what meta no longer
//! references, leaving every other object whole.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};
use weft_auth::sign_reqwest::SendSignedBlocking;

use crate::common::{bytes, cluster::Cluster, RS_2_1 as POLICY};
use serde_json::Value;

/// Every unit file on every disk of the cluster.
fn unit_files(cluster: &Cluster) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for node in cluster.ready()["nodes"].as_array().unwrap() {
        for disk in node["disks"].as_array().unwrap() {
            let units = Path::new(disk.as_str().unwrap()).join("units");
            let Ok(fanouts) = std::fs::read_dir(&units) else { continue };
            for fanout in fanouts {
                for file in std::fs::read_dir(fanout.unwrap().path()).unwrap() {
                    let path = file.unwrap().path();
                    if path.extension().is_some_and(|e| e == "unit") {
                        files.push(path);
                    }
                }
            }
        }
    }
    files.sort();
    files
}

/// The unit keys of a `weft stat --json`.
fn unit_keys(stat: &Value) -> Vec<String> {
    let mut keys: Vec<String> = stat["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["unit_key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

fn file_keys(files: &[PathBuf]) -> Vec<String> {
    let mut keys: Vec<String> =
        files.iter().map(|f| f.file_stem().unwrap().to_str().unwrap().to_owned()).collect();
    keys.sort();
    keys
}

#[test]
fn leftovers_of_a_node_down_during_rm_are_swept_once_it_is_back() {
    // A long down timeout: no repair runs while the node is stopped, so what leaks is
    // exactly what `weft rm` could not delete.
    let mut cluster = Cluster::start(4, &["--down-after-ms", "30000"]);
    let mut create = vec!["bucket", "create", "bkt", "--json"];
    create.extend(POLICY);
    cluster.weft_json(&create);
    let dir = tempfile::tempdir().unwrap();
    let (keep, gone) = (bytes(1, 150_000), bytes(2, 90_000));
    for (name, data) in [("keep", &keep), ("gone", &gone)] {
        let file = dir.path().join(name);
        std::fs::write(&file, data).unwrap();
        cluster.weft_json(&["put", file.to_str().unwrap(), &format!("bkt/{name}"), "--json"]);
    }
    let kept = cluster.weft_json(&["stat", "bkt/keep", "--json"]);

    // Nothing leaked yet: every file is referenced, with or without a grace.
    let clean = cluster.weft_json(&["gc", "--grace", "0", "--json"]);
    assert_eq!((clean["deleted"].as_u64(), clean["unreferenced"].as_u64()), (Some(0), Some(0)));
    assert_eq!(clean["units_seen"].as_u64(), Some(unit_files(&cluster).len() as u64), "{clean}");
    assert_eq!(clean["nodes_scanned"], 4, "{clean}");

    // A node stops; `weft rm` deletes meta's record and what it can reach.
    let stat = cluster.weft_json(&["stat", "bkt/gone", "--json"]);
    let victim = stat["units"][0]["node_id"].as_u64().unwrap();
    let on_victim =
        stat["units"].as_array().unwrap().iter().filter(|u| u["node_id"] == victim).count();
    let stopped = cluster.weft(&["node", "stop", &victim.to_string()]);
    assert!(stopped.status.success(), "{}", String::from_utf8_lossy(&stopped.stderr));
    let removed = cluster.weft_json(&["rm", "bkt/gone", "--json"]);
    assert_eq!(removed["units_left"].as_u64(), Some(on_victim as u64), "{removed}");

    // Back: restart the cluster on the same directory.
    cluster.restart();
    cluster.wait_for_status("every node up", |s| s["nodes_up"] == 4);
    let before = unit_files(&cluster);
    let leaked = before.len() - kept["units"].as_array().unwrap().len();
    assert_eq!(leaked, on_victim, "the files more than keep's units are gone's leftovers");

    let dry = cluster.weft_json(&["gc", "--dry-run", "--grace", "0", "--json"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted"].as_u64(), Some(leaked as u64), "would delete: {dry}");
    assert!(dry["bytes"].as_u64().unwrap() > 0, "{dry}");
    assert_eq!(unit_files(&cluster), before, "a dry run deletes nothing");

    let young = cluster.weft_json(&["gc", "--grace", "1h", "--json"]);
    assert_eq!(young["skipped_young"].as_u64(), Some(leaked as u64), "{young}");
    assert_eq!(young["deleted"], 0);
    assert_eq!(unit_files(&cluster), before);

    let swept = cluster.weft_json(&["gc", "--grace", "0", "--json"]);
    assert_eq!(swept["deleted"].as_u64(), Some(leaked as u64), "{swept}");
    assert_eq!(swept["errors"], serde_json::json!([]), "{swept}");
    let now = cluster.weft_json(&["stat", "bkt/keep", "--json"]);
    assert_eq!(file_keys(&unit_files(&cluster)), unit_keys(&now), "only keep's units remain");
    assert_eq!(cluster.get("bkt/keep"), keep);

    // The summary line of a sweep with nothing to do.
    let out = cluster.weft(&["gc", "--grace", "0s"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("deleted 0 unreferenced units"), "{text}");
    let refused = cluster.weft_fails(&["gc", "--grace", "soon"]);
    assert!(refused.contains("duration"), "{refused}");

    // `weft serve repair` sweeps on its own every --gc-interval, one log line per sweep.
    let orphan = format!("{:032x}-d{:08x}-{:016x}", u128::MAX - 1, 0, 0);
    let url = format!("{}/v1/disks/0/units/{orphan}", cluster.node_endpoint(1));
    let signer = cluster.secret().signer_for(weft_auth::Audience::Node(1));
    let put = reqwest::blocking::Client::new()
        .put(url)
        .body(vec![9u8; 1000])
        .send_signed(&signer)
        .unwrap();
    assert_eq!(put.status(), 201);
    assert!(file_keys(&unit_files(&cluster)).contains(&orphan));
    let log = dir.path().join("repair.log");
    let mut repair = Command::new(crate::common::cluster::weft_bin())
        .args(["serve", "repair", "--meta", &cluster.meta_url(), "--lease-ms", "100"])
        .env("WEFT_SECRET_FILE", cluster.secret_file())
        .args(["--gc-interval", "300ms", "--gc-grace", "200ms"])
        .env("WEFT_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let swept =
        |logged: &str| logged.lines().any(|l| l.contains("gc sweep") && l.contains("deleted=1"));
    while file_keys(&unit_files(&cluster)).contains(&orphan)
        || !swept(&std::fs::read_to_string(&log).unwrap())
    {
        if Instant::now() >= deadline {
            let _ = repair.kill();
            panic!("no sweep deleted the orphan; log:\n{}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = repair.kill();
    let _ = repair.wait();
    assert_eq!(file_keys(&unit_files(&cluster)), unit_keys(&now));
    assert_eq!(cluster.get("bkt/keep"), keep);
}

#[test]
fn serve_repair_refuses_a_gc_grace_within_the_lease() {
    let out = Command::new(crate::common::cluster::weft_bin())
        .args(["serve", "repair", "--meta", "http://127.0.0.1:9", "--gc-grace", "30s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--gc-grace") && stderr.contains("--lease-ms"), "{stderr}");
    // Disabled, the grace does not matter.
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("cluster.secret");
    weft_auth::ClusterSecret::create_file(&secret).unwrap();
    let mut disabled = Command::new(crate::common::cluster::weft_bin())
        .args(["serve", "repair", "--meta", "http://127.0.0.1:9", "--gc-grace", "30s"])
        .args(["--gc-interval", "0"])
        .env("WEFT_SECRET_FILE", &secret)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = disabled.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    let _ = disabled.kill();
    let _ = disabled.wait();
    assert!(line.starts_with("repair executor on"), "{line}");
}
