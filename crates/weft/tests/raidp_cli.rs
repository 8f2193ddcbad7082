//! The RAIDP tier end to end on `weft up`: a RAIDP bucket, objects spanning superchunks, disk
//! drills (`weft disk fail|replace`), `weft raidp recover|verify|map`, and every pair of an
//! 8-disk cluster failed in turn.

use crate::common::cluster::Cluster;
use serde_json::Value;

/// The policy flags of rs(2,1).
const RS21: [&str; 6] = ["--code", "rs", "--k", "2", "--r", "1"];

/// Deterministic bytes that differ by object and position.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn put(cluster: &Cluster, path: &str, bytes: &[u8]) {
    let file = cluster.dir().join("input");
    std::fs::write(&file, bytes).unwrap();
    let out = cluster.weft(&["put", file.to_str().unwrap(), path]);
    assert!(out.status.success(), "put {path}: {}", String::from_utf8_lossy(&out.stderr));
}

fn map(cluster: &Cluster) -> Value {
    cluster.weft_json(&["raidp", "map", "--json"])
}

fn verify(cluster: &Cluster) -> Value {
    let out = cluster.weft(&["raidp", "verify", "--json", "--settle", "200ms"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("verify printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
    });
    assert_eq!(out.status.success(), report["clean"] == true, "exit status follows clean");
    report
}

/// Waits until meta's map shows `want` (heartbeats carry disk failures and replacements).
/// It polls meta's route itself (what `weft raidp map --json` prints, checked once below):
/// the every-pair and every-triple drills poll hundreds of times, a process each was most
/// of their time.
fn wait_for_map(cluster: &Cluster, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (status, map) = cluster.meta_get("/v1/raidp");
        assert_eq!(status, 200, "{map}");
        if want(&map) {
            return map;
        }
        assert!(std::time::Instant::now() < deadline, "waited for {what}; map: {map}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn failed_disks(map: &Value) -> usize {
    map["disks"].as_array().unwrap().iter().filter(|d| d["failed"] == true).count()
}

fn disk_state(map: &Value, node: u32) -> String {
    let disk = map["disks"].as_array().unwrap().iter().find(|d| d["node"] == node).unwrap();
    disk["lstor"]["state"].as_str().unwrap_or("none").to_owned()
}

#[test]
fn every_pair_of_eight_disks_fails_and_every_byte_comes_back() {
    let cluster = Cluster::start(8, &["--heartbeat-ms", "200"]);
    let bucket = cluster.create_bucket("warm", &["--code", "raidp", "--superchunk", "256KiB"]);
    assert_eq!(bucket["raidp"]["superchunk_bytes"], 262_144, "{bucket}");
    // A second RAIDP bucket shares the map; another geometry is refused.
    let refused = cluster.weft_fails(&[
        "bucket",
        "create",
        "other",
        "--code",
        "raidp",
        "--superchunk",
        "1MiB",
    ]);
    assert!(refused.contains("raidp_geometry"), "{refused}");
    let objects: Vec<(String, Vec<u8>)> = (0..6u32)
        .map(|i| (format!("warm/o{i}"), pattern(100_000 + 97_531 * i as usize, i)))
        .collect();
    for (path, bytes) in &objects {
        put(&cluster, path, bytes);
    }
    // Objects span superchunks; every superchunk has two replicas on distinct nodes.
    let stat = cluster.stat("warm/o5");
    assert!(stat["raidp"]["extents"].as_array().unwrap().len() >= 2, "{stat}");
    // The map carries each disk's Lstor as its node last reported it: compare the CLI's
    // print with meta's answers just before and after it, once those two agree (a heartbeat
    // may land between two reads).
    let before = (0..20)
        .find_map(|_| {
            let meta_before = cluster.meta_get("/v1/raidp").1;
            let printed = map(&cluster);
            let meta_after = cluster.meta_get("/v1/raidp").1;
            if meta_before != meta_after {
                std::thread::sleep(std::time::Duration::from_millis(100));
                return None;
            }
            assert_eq!(printed, meta_after, "the CLI prints meta's map");
            Some(printed)
        })
        .expect("meta's map settles");
    let superchunks = before["superchunks"].as_array().unwrap().len();
    assert!(superchunks >= 8, "{before}");
    for s in before["superchunks"].as_array().unwrap() {
        let replicas = s["replicas"].as_array().unwrap();
        assert_eq!(replicas.len(), 2);
        assert_ne!(replicas[0]["node"], replicas[1]["node"]);
    }
    assert_eq!(verify(&cluster)["clean"], true);

    let mut rebuilt_total = 0;
    for a in 1..=8u32 {
        for b in a + 1..=8u32 {
            for node in [a, b] {
                let out = cluster.weft(&["disk", "fail", &node.to_string(), "0"]);
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            }
            let failed = wait_for_map(&cluster, "two failed disks", |m| failed_disks(m) == 2);
            // Any two failures lose at most the one superchunk the two disks shared.
            assert!(failed["lost"].as_array().unwrap().len() <= 1, "pair {a},{b}: {failed}");
            let report = cluster.weft_json(&["raidp", "recover", "--json"]);
            assert_eq!(report["unrebuilt"], serde_json::json!([]), "pair {a},{b}: {report}");
            rebuilt_total += report["rebuilt"].as_array().unwrap().len();
            let after = map(&cluster);
            assert_eq!(after["at_risk"], serde_json::json!([]), "pair {a},{b}: {after}");
            for (path, bytes) in &objects {
                assert!(cluster.get(path) == *bytes, "pair {a},{b}: {path} differs");
            }
            let report = verify(&cluster);
            assert_eq!(report["clean"], true, "pair {a},{b}: {report}");
            for node in [a, b] {
                let out = cluster.weft(&["disk", "replace", &node.to_string(), "0"]);
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            }
            wait_for_map(&cluster, "the disks back", |m| {
                failed_disks(m) == 0 && disk_state(m, a) != "failed" && disk_state(m, b) != "failed"
            });
        }
    }
    // Some pair shared a superchunk: the dual-failure path ran.
    assert!(rebuilt_total > 0);
    assert_eq!(verify(&cluster)["clean"], true);
    // New writes still land and read back after all that.
    put(&cluster, "warm/late", &pattern(300_000, 99));
    assert_eq!(cluster.get("warm/late"), pattern(300_000, 99));
}

#[test]
fn drills_bad_input_and_refusals_are_clear() {
    let cluster = Cluster::start(3, &["--heartbeat-ms", "200"]);
    // No map yet: verify is clean and says so; recover does nothing.
    assert_eq!(verify(&cluster)["exists"], false);
    let bad = cluster.weft_fails(&["bucket", "create", "wrm", "--code", "raidp", "--lstors", "3"]);
    assert!(bad.contains("--lstors 3"), "{bad}");
    let bad = cluster.weft_fails(&["bucket", "create", "wrm", "--code", "raidp", "--k", "4"]);
    assert!(bad.contains("--superchunk"), "{bad}");
    let bad = cluster.weft_fails(&["bucket", "create", "wrm", "--superchunk", "1MiB"]);
    assert!(bad.contains("RAIDP buckets"), "{bad}");
    cluster.create_bucket("wrm", &["--code", "raidp", "--superchunk", "128KiB"]);
    let data = pattern(200_000, 7);
    put(&cluster, "wrm/a", &data);
    // 3 nodes hold at most 3 superchunks (each pair shares one): the tier fills clearly.
    let full = {
        let file = cluster.dir().join("big");
        std::fs::write(&file, pattern(600_000, 8)).unwrap();
        let out = cluster.weft(&["put", file.to_str().unwrap(), "wrm/big"]);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(full.contains("raidp_full"), "{full}");
    assert_eq!(cluster.get("wrm/a"), data);
    // In-place updates: a range across the superchunk boundary, read-modify-write on both
    // replicas; the Lstors stay true.
    let mut data = data;
    let patch = pattern(50_000, 9);
    let patch_file = cluster.dir().join("patch");
    std::fs::write(&patch_file, &patch).unwrap();
    let at = 131_072 - 20_000;
    let wrote = cluster.weft_json(&[
        "write",
        "wrm/a",
        "--offset",
        &at.to_string(),
        patch_file.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(wrote["bytes"], 50_000, "{wrote}");
    assert_eq!(wrote["pieces"], 2, "{wrote}");
    data[at..at + patch.len()].copy_from_slice(&patch);
    assert_eq!(cluster.get("wrm/a"), data);
    assert_eq!(verify(&cluster)["clean"], true);
    let past =
        cluster.weft_fails(&["write", "wrm/a", "--offset", "190000", patch_file.to_str().unwrap()]);
    assert!(past.contains("past the end"), "{past}");
    cluster.create_bucket("coded", &RS21);
    put(&cluster, "coded/x", &pattern(10_000, 3));
    let immutable =
        cluster.weft_fails(&["write", "coded/x", "--offset", "0", patch_file.to_str().unwrap()]);
    assert!(immutable.contains("immutable"), "{immutable}");
    // A disk that does not exist, a node that does not exist.
    let bad = cluster.weft_fails(&["disk", "fail", "1", "5"]);
    assert!(bad.contains("no disk 5"), "{bad}");
    let bad = cluster.weft_fails(&["disk", "fail", "42", "0"]);
    assert!(bad.contains("no node 42"), "{bad}");
    // One failed disk: reads go to the survivor, never decoded.
    let holder =
        cluster.stat("wrm/a")["raidp"]["extents"][0]["replicas"][0]["node"].as_u64().unwrap();
    cluster.weft_json(&["disk", "fail", &holder.to_string(), "0", "--json"]);
    wait_for_map(&cluster, "a failed disk", |m| failed_disks(m) == 1);
    assert_eq!(cluster.get("wrm/a"), data);
    // The superchunk is at risk: its one replica left is the survivor.
    let stat = cluster.stat("wrm/a");
    let replicas = stat["raidp"]["extents"][0]["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 1, "{stat}");
    assert_ne!(replicas[0]["node"], holder, "{stat}");
    let at_risk = map(&cluster)["at_risk"].clone();
    assert!(at_risk.as_array().unwrap().contains(&stat["raidp"]["extents"][0]["superchunk"]));
    // Updates to an at-risk superchunk wait for its re-mirroring.
    let waits =
        cluster.weft_fails(&["write", "wrm/a", "--offset", "0", patch_file.to_str().unwrap()]);
    assert!(waits.contains("one replica left"), "{waits}");
    assert_eq!(cluster.get("wrm/a"), data);
}

#[test]
fn with_two_lstors_every_triple_of_eight_disks_fails_and_every_byte_comes_back() {
    let cluster = Cluster::start(8, &["--heartbeat-ms", "200"]);
    let args = ["--code", "raidp", "--superchunk", "128KiB", "--lstors", "2"];
    assert_eq!(cluster.create_bucket("warm", &args)["raidp"]["lstors"], 2);
    let objects: Vec<(String, Vec<u8>)> = (0..5u32)
        .map(|i| (format!("warm/t{i}"), pattern(60_000 + 71_113 * i as usize, 40 + i)))
        .collect();
    for (path, bytes) in &objects {
        put(&cluster, path, bytes);
    }
    assert_eq!(verify(&cluster)["clean"], true);
    let mut rebuilt_together = 0;
    for a in 1..=8u32 {
        for b in a + 1..=8u32 {
            for c in b + 1..=8u32 {
                let triple = format!("{a},{b},{c}");
                for node in [a, b, c] {
                    cluster.weft_json(&["disk", "fail", &node.to_string(), "0", "--json"]);
                }
                let failed = wait_for_map(&cluster, "three failed disks", |m| failed_disks(m) == 3);
                let lost = failed["lost"].as_array().unwrap().len();
                let report = cluster.weft_json(&["raidp", "recover", "--json"]);
                assert_eq!(report["unrebuilt"], serde_json::json!([]), "{triple}: {report}");
                assert_eq!(report["rebuilt"].as_array().unwrap().len(), lost, "{triple}: {report}");
                if lost >= 2 {
                    rebuilt_together += 1;
                }
                let after = map(&cluster);
                assert_eq!(after["lost"], serde_json::json!([]), "{triple}: {after}");
                assert_eq!(after["at_risk"], serde_json::json!([]), "{triple}: {after}");
                for (path, bytes) in &objects {
                    assert!(cluster.get(path) == *bytes, "{triple}: {path} differs");
                }
                let report = verify(&cluster);
                assert_eq!(report["clean"], true, "{triple}: {report}");
                for node in [a, b, c] {
                    cluster.weft_json(&["disk", "replace", &node.to_string(), "0", "--json"]);
                }
                wait_for_map(&cluster, "the disks back", |m| failed_disks(m) == 0);
            }
        }
    }
    // Some triple lost two or three superchunks: the P+Q path ran.
    assert!(rebuilt_together > 0);
}

#[test]
fn transitions_move_objects_between_the_raidp_tier_and_erasure_codes() {
    let cluster = Cluster::start(5, &[]);
    cluster.create_bucket("warm", &["--code", "raidp", "--superchunk", "256KiB"]);
    let data = pattern(200_000, 11);
    put(&cluster, "warm/a", &data);
    // A regroup has no parity units to work on: refused with why.
    let refused = cluster
        .weft_fails(&[&["transition", "warm/a"][..], &RS21, &["--mode", "regroup"]].concat());
    assert!(refused.contains("no parity units to regroup"), "{refused}");
    // Transitions: warm → cold and back, the IO reported like every transition.
    let cold = cluster.weft_json(&[&["transition", "warm/a"][..], &RS21, &["--json"]].concat());
    assert_eq!(cold["from"], "raidp", "{cold}");
    assert_eq!(cold["to"]["code"], "rs(2,1)", "{cold}");
    assert_eq!(cold["bytes_read"], 200_000, "{cold}");
    assert!(cold["parity_bytes_written"].as_u64().unwrap() > 0, "{cold}");
    let stat = cluster.stat("warm/a");
    assert!(stat.get("raidp").is_none() && stat["units_total"].as_u64().unwrap() > 0, "{stat}");
    assert_eq!(cluster.get("warm/a"), data);
    let warm = cluster.weft_json(&["transition", "warm/a", "--code", "raidp", "--json"]);
    assert_eq!(warm["from"]["code"], "rs(2,1)", "{warm}");
    assert_eq!(warm["to"], "raidp", "{warm}");
    assert_eq!(warm["data_bytes_written"], 200_000, "{warm}");
    assert!(cluster.stat("warm/a")["raidp"]["extents"].is_array());
    assert_eq!(cluster.get("warm/a"), data);
    let again = cluster.weft_json(&["transition", "warm/a", "--code", "raidp", "--json"]);
    assert_eq!(again["unchanged"], true, "{again}");
    assert_eq!(verify(&cluster)["clean"], true);
}

#[test]
fn bench_raidp_reports_every_policy_side_by_side() {
    let cluster = Cluster::start(6, &["--heartbeat-ms", "200"]);
    let report = cluster.weft_json(&[
        "bench",
        "raidp",
        "--size",
        "2MiB",
        "--object-size",
        "512KiB",
        "--clients",
        "2",
        "--superchunk",
        "256KiB",
        "--updates",
        "4",
        "--update-size",
        "64KiB",
        "--recoveries",
        "1",
        "--json",
    ]);
    let rows = report["rows"].as_array().unwrap();
    let policies: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["raidp", "rep(3)", "rep(2)"], "{report}");
    let field = |i: usize, name: &str| rows[i][name].as_f64().unwrap();
    // Two copies sent for RAIDP and rep(2), three for rep(3); RAIDP stores its two copies
    // plus one superchunk of parity per disk that holds one.
    assert_eq!(field(0, "network_bytes_per_user_byte"), 2.0);
    assert_eq!(field(1, "network_bytes_per_user_byte"), 3.0);
    assert_eq!(field(2, "network_bytes_per_user_byte"), 2.0);
    assert!(field(1, "stored_bytes_per_user_byte") >= 3.0, "{report}");
    assert!(field(0, "stored_bytes_per_user_byte") >= 2.0, "{report}");
    assert_eq!(report["checks"]["stored_within_bound"], true, "{report}");
    for i in 0..3 {
        for rate in ["put_mb_s", "get_mb_s", "update_mb_s"] {
            assert!(field(i, rate) > 0.0, "{rate} of row {i}: {report}");
        }
    }
    let runs = report["recovery"].as_array().unwrap();
    let kinds: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {}", r["kind"].as_str().unwrap(), r["receivers"].as_str().unwrap()))
        .collect();
    assert!(kinds.contains(&"one disk matching".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"one disk naive".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"two disks matching".to_string()), "{kinds:?}");
    // Everything it wrote reads back and the tier is clean after its drills.
    assert_eq!(verify(&cluster)["clean"], true);
}

/// The superchunks holding `path`'s bytes.
fn superchunks_of(cluster: &Cluster, path: &str) -> Vec<u64> {
    let stat = cluster.stat(path);
    let extents = stat["raidp"]["extents"].as_array().unwrap();
    extents.iter().map(|e| e["superchunk"].as_u64().unwrap()).collect()
}

/// The superchunks a `weft raidp compact --json` report says it reclaimed.
fn reclaimed_of(report: &Value) -> Vec<u64> {
    let reclaimed = report["reclaimed"].as_array().unwrap();
    reclaimed.iter().map(|r| r["superchunk"].as_u64().unwrap()).collect()
}

#[test]
fn compaction_reclaims_dead_superchunks_and_keeps_every_lstor_true() {
    // 8 disks: 28 superchunks at most (each pair of disks shares one).
    let cluster = Cluster::start(8, &[]);
    cluster.create_bucket("wrm", &["--code", "raidp", "--superchunk", "256KiB"]);
    let a = pattern(600_000, 1);
    let (b, c, d) = (pattern(700_000, 2), pattern(300_000, 3), pattern(262_144, 4));
    put(&cluster, "wrm/a", &a);
    put(&cluster, "wrm/b", &b);
    put(&cluster, "wrm/c", &c);
    put(&cluster, "wrm/d", &d);
    let old_a = superchunks_of(&cluster, "wrm/a");
    let old_b = superchunks_of(&cluster, "wrm/b");
    let c_chunks = superchunks_of(&cluster, "wrm/c");
    // Updated in place (its lease ends with it), then an update in flight (a lease taken
    // and held), then deleted: the lease keeps compaction off its superchunks.
    let patch = cluster.dir().join("patch");
    std::fs::write(&patch, pattern(10_000, 5)).unwrap();
    cluster.weft_json(&["write", "wrm/c", "--offset", "100", patch.to_str().unwrap(), "--json"]);
    // A refused update ends its lease too (else it would hold c's superchunks below).
    let past =
        cluster.weft_fails(&["write", "wrm/c", "--offset", "299999", patch.to_str().unwrap()]);
    assert!(past.contains("past the end"), "{past}");
    let lease_call = |body: serde_json::Value| {
        let (status, answer) = cluster.meta_call(reqwest::Method::POST, "/v1/raidp/update", &body);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        serde_json::from_slice::<Value>(&answer).unwrap()
    };
    let lease = lease_call(serde_json::json!({"bucket": "wrm", "key": "c"}))["lease"].clone();
    let a2 = pattern(500_000, 6);
    put(&cluster, "wrm/a", &a2); // overwritten: its old extents die
    let out = cluster.weft(&["rm", "wrm/b"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cluster.weft(&["rm", "wrm/c"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = map(&cluster)["superchunks"].as_array().unwrap().len();
    // Dry: nothing changes.
    let dry = cluster.weft_json(&["raidp", "compact", "--dry-run", "--json"]);
    assert!(dry["dead_bytes"].as_u64().unwrap() >= 600_000 + 700_000, "{dry}");
    let compacted = cluster.weft_json(&["raidp", "compact", "--json"]);
    assert_eq!(
        dry["reclaimed"].as_array().unwrap().len(),
        compacted["reclaimed"].as_array().unwrap().len(),
        "{dry} {compacted}"
    );
    let reclaimed = reclaimed_of(&compacted);
    // Every superchunk wholly a's or b's (all but the ends they share) is reclaimed; c's
    // are left while its update's lease lasts, with that reason.
    let live: Vec<u64> =
        ["wrm/a", "wrm/d"].iter().flat_map(|p| superchunks_of(&cluster, p)).collect();
    let wholly_dead: Vec<u64> = old_a
        .iter()
        .chain(&old_b)
        .copied()
        .filter(|s| !live.contains(s) && !c_chunks.contains(s))
        .collect();
    assert!(wholly_dead.len() >= 3, "{old_a:?} {old_b:?} {c_chunks:?} {live:?}");
    for s in &wholly_dead {
        assert!(reclaimed.contains(s), "superchunk {s} not reclaimed: {compacted}");
    }
    assert!(reclaimed.iter().all(|s| !live.contains(s) && !c_chunks.contains(s)), "{compacted}");
    let skipped = compacted["skipped"].as_array().unwrap();
    let busy =
        skipped.iter().find(|r| r["superchunk"] == c_chunks[0]).expect("c's superchunk skipped");
    assert!(busy["reason"].as_str().unwrap().contains("update"), "{busy}");
    // All full but perhaps the tail of b's (nothing appended after it).
    let freed = compacted["freed_bytes"].as_u64().unwrap();
    assert!(freed >= 262_144 * (wholly_dead.len() as u64 - 1), "{compacted}");
    assert_eq!(dry["freed_bytes"], freed, "the dry run said so: {dry}");
    assert_eq!(
        compacted["trimmed_bytes"],
        2 * compacted["freed_bytes"].as_u64().unwrap(),
        "{compacted}"
    );
    // Both Lstors of every reclaimed superchunk had its bytes folded out: verify is clean,
    // the live objects read back, the map shows the superchunks empty.
    assert_eq!(verify(&cluster)["clean"], true);
    assert_eq!(cluster.get("wrm/a"), a2);
    assert_eq!(cluster.get("wrm/d"), d);
    let after = map(&cluster);
    for s in after["superchunks"].as_array().unwrap() {
        if reclaimed.contains(&s["id"].as_u64().unwrap()) {
            assert_eq!(s["filled_bytes"], 0, "{s}");
        }
    }
    // New objects go into the reclaimed space: the map does not grow.
    let e = pattern(2 * 262_144, 7);
    put(&cluster, "wrm/e", &e);
    assert_eq!(map(&cluster)["superchunks"].as_array().unwrap().len(), before);
    assert!(superchunks_of(&cluster, "wrm/e").iter().any(|s| reclaimed.contains(s)));
    assert_eq!(cluster.get("wrm/e"), e);
    assert_eq!(verify(&cluster)["clean"], true);
    // The lease ended: c's superchunks (those it shared with no live object) come back.
    lease_call(serde_json::json!({"bucket": "wrm", "key": "c", "done": lease}));
    let again = cluster.weft_json(&["raidp", "compact", "--json"]);
    let reclaimed = reclaimed_of(&again);
    let live: Vec<u64> =
        ["wrm/a", "wrm/d", "wrm/e"].iter().flat_map(|p| superchunks_of(&cluster, p)).collect();
    let c_alone: Vec<u64> = c_chunks.iter().copied().filter(|s| !live.contains(s)).collect();
    assert!(!c_alone.is_empty(), "{c_chunks:?} {live:?}");
    assert_eq!(reclaimed, c_alone, "{again}");
    assert_eq!(verify(&cluster)["clean"], true);
    assert_eq!(cluster.get("wrm/a"), a2);
    assert_eq!(cluster.get("wrm/e"), e);
}
