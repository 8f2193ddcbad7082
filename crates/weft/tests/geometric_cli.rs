//! The geometric layout end to end on `weft up`: a geometric bucket (Clay-coded bins over
//! placement groups), objects written warm and packed by `weft pack`, read back whole and by
//! ranges, degraded (a node down, a corrupt chunk), and a packer killed at any point.

use std::collections::BTreeSet;

use crate::common::cluster::Cluster;
use serde_json::Value;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    crate::common::bytes(u64::from(seed), len)
}

fn put(cluster: &Cluster, path: &str, bytes: &[u8]) {
    cluster.put_bytes(path, bytes);
}

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Sizes that give fronts and chunks of every class (s0 256 KiB, q 2, chunks up to 2 MiB).
const SIZES: [usize; 10] = [
    0,
    100,
    300 * KIB,
    768 * KIB,
    MIB + 5,
    4 * MIB,
    5 * MIB + 123,
    9 * MIB,
    9 * MIB + 200 * KIB + 7,
    3 * MIB + 333,
];

/// Creates `cold`: clay(10,4) bins, s0 256 KiB, q 2, chunks up to 2 MiB, 2 placement groups
/// (so a few objects fill stripes).
fn cold_bucket(cluster: &Cluster) -> Value {
    let flags = "--layout geometric --code clay --k 10 --r 4 --s0 256KiB --q 2 --chunk-max 2MiB \
                 --pgs 2";
    cluster.create_bucket("cold", &flags.split_whitespace().collect::<Vec<_>>())
}

fn objects() -> Vec<(String, Vec<u8>)> {
    (0..20)
        .map(|i| (format!("obj-{i:02}"), pattern(SIZES[i % SIZES.len()] + i * 17, i as u32 + 1)))
        .collect()
}

fn pack(cluster: &Cluster, args: &[&str]) -> Value {
    let mut all = vec!["pack", "--bucket", "cold", "--json"];
    all.extend(args);
    let report = cluster.weft_json(&all);
    report["buckets"][0].clone()
}

fn check_all(cluster: &Cluster, objects: &[(String, Vec<u8>)]) {
    for (key, bytes) in objects {
        let got = cluster.get(&format!("cold/{key}"));
        assert!(got == *bytes, "cold/{key}: {} bytes back, {} written", got.len(), bytes.len());
    }
}

#[test]
fn objects_pack_into_bins_and_read_back_whole_ranged_and_degraded() {
    // Meta judges nodes down only after a minute: reads below find the killed node by
    // themselves, and repair leaves the chunks where they are while they do.
    let cluster = Cluster::start(15, &["--down-after-ms", "60000"]);
    // Parameters that cannot work are refused with the reason.
    for (args, why) in [
        ("--layout geometric --code clay --k 10 --r 4 --s0 100KiB", "multiple of 16384"),
        ("--layout geometric --code clay --k 10 --r 4 --q 1", "q must be at least 2"),
        ("--layout geometric --code rs --k 12 --r 4", "16 disks on distinct"),
        ("--layout geometric --code rs --k 4 --r 2 --chunk-max 1MiB", "at least s0"),
        ("--layout geometric --stripe-width 2", "not --stripe-width"),
        ("--s0 4MiB", "for geometric buckets"),
    ] {
        let mut all = vec!["bucket", "create", "bad"];
        all.extend(args.split(' '));
        let message = cluster.weft_fails(&all);
        assert!(message.contains(why), "{args:?}: {message:?} should say {why:?}");
    }
    let bucket = cold_bucket(&cluster);
    assert_eq!(bucket["geometric"]["code"], "clay(10,4)", "{bucket}");
    assert_eq!(bucket["geometric"]["small_code"], "rs(10,4)", "{bucket}");
    assert_eq!(bucket["default_policy"]["code"], "rep(3)", "written warm first: {bucket}");
    // Two placement groups of 14 disks on distinct nodes.
    let pgs = cluster.weft_json(&["pg", "ls", "--bucket", "cold", "--json"]);
    let groups = pgs["buckets"][0]["pgs"].as_array().unwrap().clone();
    assert_eq!(groups.len(), 2, "{pgs}");
    for group in &groups {
        let members = group["members"].as_array().unwrap();
        let nodes: BTreeSet<u64> = members.iter().map(|m| m["node"].as_u64().unwrap()).collect();
        assert_eq!((members.len(), nodes.len()), (14, 14), "{group}");
        assert_eq!(members.iter().filter(|m| m["role"] == "parity").count(), 4);
    }

    let objects = objects();
    for (key, bytes) in &objects {
        put(&cluster, &format!("cold/{key}"), bytes);
    }
    // Young objects stay warm unless asked.
    let report = pack(&cluster, &[]);
    assert_eq!(report["objects"], 0, "{report}");
    let report = pack(&cluster, &["--now"]);
    assert_eq!(report["objects"], objects.len(), "{report}");
    let total: usize = objects.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(report["bytes"], total, "{report}");
    assert_eq!(report["bytes_read"], total, "each byte read once: {report}");
    assert_eq!(report["warm_units_left"], 0, "{report}");
    assert!(report["skipped"].as_array().unwrap().is_empty(), "{report}");
    // Nothing is left to pack; every object lists as packed.
    assert_eq!(pack(&cluster, &["--now"])["objects"], 0);
    let listed = cluster.weft_json(&["ls", "cold", "--json"]);
    assert!(listed["objects"].as_array().unwrap().iter().all(|o| o["packed"] == true), "{listed}");
    // The warm copies are gone: no unit is left that nothing references.
    let gc = cluster.weft_json(&["gc", "--dry-run", "--grace", "0", "--json"]);
    assert_eq!(gc["unreferenced"], 0, "{gc}");

    check_all(&cluster, &objects);
    // The bin stripes are meta's own: a client may read them, not change them by hand (a
    // stripe deleted would lose chunks of every object packed in it).
    let stripes = cluster.weft_json(&["ls", ".weft-geo", "--json"]);
    let stripe = stripes["objects"][0]["key"].as_str().expect("a stripe listed").to_owned();
    let spare = cluster.dir().join("spare");
    std::fs::write(&spare, b"not a stripe").unwrap();
    let spare = spare.display();
    for line in [
        format!("rm .weft-geo/{stripe}"),
        format!("put {spare} .weft-geo/{stripe}"),
        format!("put {spare} .weft-geo/new"),
        format!("transition .weft-geo/{stripe} --code rs --k 10 --r 4"),
        "bucket rm .weft-geo".to_owned(),
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let message = cluster.weft_fails(&args);
        assert!(message.contains("bin stripes"), "{args:?}: {message}");
    }
    let listed = cluster.weft_json(&["ls", ".weft-geo", "--json"]);
    assert_eq!(listed["objects"], stripes["objects"], "no stripe changed");
    check_all(&cluster, &objects);
    // stat: the front, then the chunks smallest first, all on one disk; a small record.
    for (key, bytes) in &objects {
        let stat = cluster.stat(&format!("cold/{key}"));
        let partition =
            weft_layout::geometric::partition(bytes.len() as u64, 256 << 10, 2, 2 << 20);
        assert_eq!(stat["front_bytes"], partition.front, "{key}: {stat}");
        let chunks = stat["chunks"].as_array().unwrap();
        let expected: Vec<(usize, u64)> =
            partition.chunks().iter().map(|c| (c.class, c.bytes)).collect();
        let got: Vec<(usize, u64)> = chunks
            .iter()
            .map(|c| (c["bin"].as_u64().unwrap() as usize, c["bytes"].as_u64().unwrap()))
            .collect();
        assert_eq!(got, expected, "{key}");
        let disks: BTreeSet<String> = chunks.iter().map(|c| c["disk"].to_string()).collect();
        assert!(disks.len() <= 1, "{key} spans disks {disks:?}");
        let layout_bytes = stat["layout_bytes"].as_u64().unwrap();
        assert!(layout_bytes <= 40, "{key}: {layout_bytes} bytes of layout record");
    }
    // Ranges across the front and chunk boundaries.
    let (key, bytes) = &objects[8]; // 9 MiB + 200 KiB + 7 + 136
    for (start, len) in
        [(0, 10), (200 * KIB, 300 * KIB), (MIB - 3, 6), (3 * MIB, 4 * MIB), (bytes.len() - 1, 1)]
    {
        let range = format!("{start}-{}", start + len - 1);
        let out = cluster.weft(&["get", &format!("cold/{key}"), "--range", &range]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout == bytes[start..start + len], "range {range} of {key}");
    }

    // A node down: its objects are regenerated from their stripes, chunk after chunk.
    let (key, bytes) = &objects[7];
    let node: u32 =
        String::from_utf8(cluster.weft(&["stat", &format!("cold/{key}"), "--nodes"]).stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .parse()
            .unwrap();
    cluster.kill_node(node);
    let file = cluster.dir().join("degraded");
    let got =
        cluster.weft_json(&["get", &format!("cold/{key}"), "-o", file.to_str().unwrap(), "--json"]);
    assert!(std::fs::read(&file).unwrap() == *bytes, "degraded read of {key}");
    let degraded = got["degraded_units"].as_array().unwrap();
    let chunks = cluster.stat(&format!("cold/{key}"))["chunks"].as_array().unwrap().len();
    assert!(degraded.len() >= chunks, "every chunk was regenerated: {got}");
    check_all(&cluster, &objects);

    // A corrupt chunk on a live node: found by checksum, rebuilt, reported for repair.
    let (key, bytes, unit) = objects
        .iter()
        .find_map(|(key, bytes)| {
            let stat = cluster.stat(&format!("cold/{key}"));
            let chunk = stat["chunks"].get(0)?.clone();
            let stripe = &stat["geometric"]["stripes"][chunk["stripe"].as_str().unwrap()];
            let unit = stripe["units"]
                .as_array()
                .unwrap()
                .iter()
                .find(|u| u["unit"] == format!("d{}", chunk["block"]))
                .unwrap()
                .clone();
            (unit["node_id"] != node).then_some((key, bytes, unit))
        })
        .expect("an object with a chunk off the killed node");
    let name = format!("{}.unit", unit["unit_key"].as_str().unwrap());
    let path = find_file(&cluster.dir(), &name).expect("the chunk's unit file");
    let mut data = std::fs::read(&path).unwrap();
    let at = data.len() - 100;
    data[at] ^= 0x40;
    std::fs::write(&path, data).unwrap();
    let out =
        cluster.weft_json(&["get", &format!("cold/{key}"), "-o", file.to_str().unwrap(), "--json"]);
    assert!(std::fs::read(&file).unwrap() == *bytes, "read of {key} past a corrupt chunk");
    assert!(
        out["degraded_units"].to_string().contains("checksum"),
        "the corrupt chunk is named: {out}"
    );
    // Reported: the repair executor rebuilds it, and the next read is healthy. (Its first
    // attempt may meet the killed node, which meta calls up for a minute, and retry later:
    // more than the default wait on a loaded CI machine.)
    cluster.wait_for_status_within(
        "the corrupt chunk repaired",
        std::time::Duration::from_secs(90),
        |s| s["repair_queue"] == 0 && s["repairs_completed"].as_u64().unwrap_or(0) >= 1,
    );
    let out =
        cluster.weft_json(&["get", &format!("cold/{key}"), "-o", file.to_str().unwrap(), "--json"]);
    assert!(std::fs::read(&file).unwrap() == *bytes);
    assert_eq!(out["degraded_units"], serde_json::json!([]), "repaired: {out}");

    // Overwrite and delete packed objects.
    let (key, _) = &objects[3];
    let fresh = pattern(123_457, 99);
    put(&cluster, &format!("cold/{key}"), &fresh);
    assert!(cluster.get(&format!("cold/{key}")) == fresh);
    let (key, _) = &objects[4];
    let out = cluster.weft(&["rm", &format!("cold/{key}")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let missing = cluster.weft_fails(&["get", &format!("cold/{key}")]);
    assert!(missing.contains("no_such_key") || missing.contains("no object"), "{missing}");

    // The bucket emptied and removed: its stripes go with it, and their units leave every
    // live node (the killed node's stay queued until it returns or is removed).
    for (key, _) in &objects {
        let _ = cluster.weft(&["rm", &format!("cold/{key}")]);
    }
    let out = cluster.weft(&["bucket", "rm", "cold"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = cluster.weft_json(&["ls", ".weft-geo", "--json"]);
    assert_eq!(listed["objects"], serde_json::json!([]), "stripes left: {listed}");
    let units_on_live_nodes = || -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        for id in cluster.node_ids().into_iter().filter(|&id| id != node) {
            let mut dirs = vec![cluster.dir().join(format!("node-{id}"))];
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        dirs.push(path);
                    } else if path.extension().is_some_and(|e| e == "unit") {
                        found.push(path);
                    }
                }
            }
        }
        found
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !units_on_live_nodes().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "units left on live nodes: {:?}",
            units_on_live_nodes()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // The name is free again, for a geometric bucket too.
    cold_bucket(&cluster);
}

fn find_file(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

#[test]
fn a_packer_killed_at_any_point_leaves_every_object_readable_and_a_rerun_finishes() {
    let cluster = Cluster::start(15, &[]);
    cold_bucket(&cluster);
    let objects = objects();
    for (key, bytes) in &objects {
        put(&cluster, &format!("cold/{key}"), bytes);
    }
    for delay_ms in [30u64, 150, 400, 900] {
        let mut packer =
            cluster.spawn_weft(&["pack", "--bucket", "cold", "--now", "--batch-objects", "3"]);
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = packer.kill();
        let _ = packer.wait();
        check_all(&cluster, &objects);
    }
    let report = pack(&cluster, &["--now"]);
    assert!(report["skipped"].as_array().unwrap().is_empty(), "{report}");
    let listed = cluster.weft_json(&["ls", "cold", "--json"]);
    assert!(listed["objects"].as_array().unwrap().iter().all(|o| o["packed"] == true), "{listed}");
    check_all(&cluster, &objects);
    // What the killed packers left (stripe writes never committed, warm units of packed
    // objects) is garbage: collected, and every object still reads.
    let swept = cluster.weft_json(&["gc", "--grace", "0", "--expire-writes-after", "0", "--json"]);
    assert_eq!(swept["errors_total"], 0, "{swept}");
    check_all(&cluster, &objects);
    let again = cluster.weft_json(&["gc", "--dry-run", "--grace", "0", "--json"]);
    assert_eq!(again["unreferenced"], 0, "{again}");
}

/// A failed node's packed objects are rebuilt each onto one disk (an object's chunks stay
/// together), and the objects spread over the disks eligible, so recovery writes do too.
#[test]
fn a_failed_nodes_objects_recover_each_onto_one_disk_spread_over_several() {
    let cluster = Cluster::start(18, &["--down-after-ms", "1500", "--heartbeat-ms", "300"]);
    // One group of 14 of the 18 nodes: a failed member's objects have 4 disks to go to.
    let flags = "--layout geometric --code clay --k 10 --r 4 --s0 64KiB --q 2 --chunk-max 256KiB \
                 --pgs 1";
    cluster.create_bucket("cold", &flags.split_whitespace().collect::<Vec<_>>());
    let objects: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("obj-{i:02}"), pattern(200 * KIB + i * 23 * KIB + i, 100 + i as u32)))
        .collect();
    for (key, bytes) in &objects {
        put(&cluster, &format!("cold/{key}"), bytes);
    }
    assert_eq!(pack(&cluster, &["--now"])["objects"], objects.len());
    let chunk_disks = |key: &str| -> BTreeSet<(u64, u64)> {
        let stat = cluster.stat(&format!("cold/{key}"));
        stat["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["disk"]["node"].as_u64().unwrap(), c["disk"]["disk"].as_u64().unwrap()))
            .collect()
    };
    // The victim: the node holding the most objects' chunks.
    let mut holders: std::collections::BTreeMap<u64, Vec<&str>> = Default::default();
    for (key, _) in &objects {
        let disks = chunk_disks(key);
        assert_eq!(disks.len(), 1, "{key} packed onto one disk: {disks:?}");
        holders.entry(disks.first().unwrap().0).or_default().push(key);
    }
    let (&victim, held) = holders.iter().max_by_key(|(_, keys)| keys.len()).unwrap();
    assert!(held.len() >= 3, "objects per data disk: {holders:?}");
    cluster.kill_node(victim as u32);
    // Repair moves every chunk off the victim.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let moved = loop {
        let now: Vec<BTreeSet<(u64, u64)>> = held.iter().map(|key| chunk_disks(key)).collect();
        if now.iter().all(|disks| disks.iter().all(|d| d.0 != victim)) {
            break now;
        }
        assert!(std::time::Instant::now() < deadline, "not repaired off node {victim}: {now:?}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    for (key, disks) in held.iter().zip(&moved) {
        assert_eq!(disks.len(), 1, "{key}: its chunks were rebuilt onto {disks:?}");
    }
    let destinations: BTreeSet<&(u64, u64)> = moved.iter().flat_map(|d| d.iter()).collect();
    assert!(
        destinations.len() >= 2,
        "{} objects of node {victim} all rebuilt onto {destinations:?}",
        held.len()
    );
    check_all(&cluster, &objects);
}
