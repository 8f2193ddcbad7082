//! Objects on a real cluster, through the CLI a user types: `weft up` starts meta, the nodes
//! and the repair executor as processes; `weft put|get|ls|rm|stat`, `weft node kill` and
//! `weft status` drive them. No mocks: every byte crosses real sockets and real unit files.
//!
//! Small policies (4 KiB cells, 16 KiB blocks) keep every test to a few seconds in the debug
//! profile while still crossing every cell, block, stripe and group boundary.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::common::{bytes, cluster::Cluster, RS_2_1};
use serde_json::{json, Value};

const CELL: usize = 4096;
const BLOCK: usize = 16384;
const K: usize = 6;
const WIDTH: usize = 2;
/// rs(6,3), stripe width 2, 4 KiB cells, 16 KiB blocks.
const SMALL: [&str; 12] = [
    "--code",
    "rs",
    "--k",
    "6",
    "--r",
    "3",
    "--stripe-width",
    "2",
    "--cell",
    "4KiB",
    "--block",
    "16KiB",
];
/// Meta declares a silent node down after 1.5 s (heartbeats every 300 ms).
const FAST_DOWN: [&str; 4] = ["--down-after-ms", "1500", "--heartbeat-ms", "300"];

/// Objects a test stored, by `BUCKET/KEY`, with their bytes; and a directory for files.
struct Objects {
    files: tempfile::TempDir,
    stored: BTreeMap<String, Vec<u8>>,
}

impl Objects {
    fn new() -> Objects {
        Objects {
            files: tempfile::tempdir().expect("a temporary directory"),
            stored: BTreeMap::new(),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.files.path().join(name)
    }

    /// `weft put FILE PATH --json EXTRA`; checks what it says and remembers the bytes.
    fn put(&mut self, cluster: &Cluster, path: &str, data: Vec<u8>, extra: &[&str]) -> Value {
        let file = self.file(&format!("in-{}", self.stored.len()));
        std::fs::write(&file, &data).unwrap();
        let mut args = vec!["put", file.to_str().unwrap(), path, "--json"];
        args.extend(extra);
        let put = cluster.weft_json(&args);
        assert_eq!(put["size"], data.len() as u64, "{put}");
        assert_eq!(put["data_bytes"], data.len() as u64, "{put}");
        assert_eq!(
            put["bytes_sent"].as_u64(),
            Some(data.len() as u64 + put["parity_bytes"].as_u64().unwrap()),
            "{put}"
        );
        self.stored.insert(path.to_owned(), data);
        put
    }

    fn data(&self, path: &str) -> &[u8] {
        &self.stored[path]
    }

    /// `weft get PATH -o FILE --json`: the bytes and what the get said.
    fn get_json(&self, cluster: &Cluster, path: &str) -> (Vec<u8>, Value) {
        let out = self.file("out");
        let got = cluster.weft_json(&["get", path, "-o", out.to_str().unwrap(), "--json"]);
        let bytes = std::fs::read(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        assert_eq!(got["bytes"], bytes.len() as u64, "{got}");
        (bytes, got)
    }

    /// Gets every stored object both ways (stdout and -o) and checks the bytes; returns what
    /// each `get --json` said.
    fn check_all(&self, cluster: &Cluster) -> BTreeMap<String, Value> {
        let mut said = BTreeMap::new();
        for (path, data) in &self.stored {
            assert_same(&get_stdout(cluster, &[path]), data, &format!("get {path} (stdout)"));
            let (bytes, got) = self.get_json(cluster, path);
            assert_same(&bytes, data, &format!("get {path} -o"));
            said.insert(path.clone(), got);
        }
        said
    }
}

/// Compares bytes without printing megabytes when they differ.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!("{what}: {} bytes, want {}; first difference at {first:?}", got.len(), want.len());
    }
}

/// `weft get ARGS` to stdout; asserts success.
fn get_stdout(cluster: &Cluster, args: &[&str]) -> Vec<u8> {
    let mut all = vec!["get"];
    all.extend(args);
    let output = cluster.weft(&all);
    assert!(
        output.status.success(),
        "weft {all:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Runs `weft ARGS`, asserts it failed with nothing on stdout and exactly one line on stderr
/// that contains every one of `says`; returns that line.
fn fails_with(cluster: &Cluster, args: &[&str], says: &[&str]) -> String {
    let output = cluster.weft(args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "weft {args:?} should fail; stderr: {stderr}");
    assert!(output.stdout.is_empty(), "weft {args:?} printed on stdout when it failed");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "weft {args:?} should say one line, said:\n{stderr}");
    for word in says {
        assert!(lines[0].contains(word), "weft {args:?} said {:?}, want {word:?}", lines[0]);
    }
    lines[0].to_owned()
}

/// Polls `weft status --json` until `want` holds, at most `timeout`.
fn poll_status(
    cluster: &Cluster,
    what: &str,
    timeout: Duration,
    want: impl Fn(&Value) -> bool,
) -> Value {
    cluster.wait_for_status_within(what, timeout, want)
}

fn counter(status: &Value, name: &str) -> u64 {
    status[name].as_u64().unwrap_or_else(|| panic!("status has no {name}: {status}"))
}

/// Unit name → its entry in a stat's `units`.
fn units_of(stat: &Value) -> BTreeMap<String, Value> {
    stat["units"]
        .as_array()
        .expect("stat lists units")
        .iter()
        .map(|u| (u["unit"].as_str().unwrap().to_owned(), u.clone()))
        .collect()
}

fn node_of(unit: &Value) -> u32 {
    unit["node_id"].as_u64().expect("a node id") as u32
}

/// Checks a stat's groups against its units: each group names exactly stored units, every
/// unit is in one group, and the units of a group sit on distinct nodes.
fn assert_groups_on_distinct_nodes(stat: &Value) {
    let units = units_of(stat);
    let mut seen = BTreeSet::new();
    for group in stat["groups"].as_array().expect("stat has groups") {
        let mut nodes = BTreeSet::new();
        for name in group["units"].as_array().unwrap() {
            let name = name.as_str().unwrap();
            let unit = units.get(name).unwrap_or_else(|| panic!("group names {name}: {stat}"));
            assert!(seen.insert(name.to_owned()), "{name} in two groups: {stat}");
            assert!(
                nodes.insert(node_of(unit)),
                "group {} has two units on node {}: {stat}",
                group["group"],
                node_of(unit)
            );
        }
    }
    assert_eq!(seen.len(), units.len(), "units outside every group: {stat}");
}

/// Every unit file on the cluster's disks (`units/<xx>/<key>.unit`).
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
    files
}

/// The file of `unit` (an entry of a stat's `units`) on its node's disk.
fn unit_file(cluster: &Cluster, unit: &Value) -> Option<PathBuf> {
    let node = cluster.ready()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == unit["node_id"])
        .unwrap_or_else(|| panic!("no node for {unit}"))
        .clone();
    let disk = node["disks"][unit["disk"].as_u64().unwrap() as usize].as_str().unwrap().to_owned();
    let name = format!("{}.unit", unit["unit_key"].as_str().unwrap());
    let matches: Vec<PathBuf> = unit_files(cluster)
        .into_iter()
        .filter(|p| p.starts_with(&disk) && p.file_name().is_some_and(|n| *n == *name))
        .collect();
    assert!(matches.len() <= 1, "{name} twice on {disk}: {matches:?}");
    matches.into_iter().next()
}

/// `weft node kill ID --json`; checks it killed it.
fn kill(cluster: &Cluster, id: u32) {
    let killed = cluster.weft_json(&["node", "kill", &id.to_string(), "--json"]);
    assert_eq!(killed["node"], id, "{killed}");
    assert_eq!(killed["exited"], true, "{killed}");
}

/// Node ids in state `state` in a status object.
fn nodes_in(status: &Value, state: &str) -> BTreeSet<u32> {
    Cluster::states(status)
        .into_iter()
        .filter(|(_, s)| s == state)
        .map(|(id, _)| id as u32)
        .collect()
}

/// Data blocks that hold bytes of an object of `size` (cells go round-robin over the `width`
/// blocks of a stripe, so a short last stripe may touch fewer blocks).
fn data_blocks(size: u64, cell: u64, block: u64, width: u64) -> u64 {
    let stripe = width * block;
    let full = size / stripe;
    let rest = size % stripe;
    full * width + rest.div_ceil(cell).min(width)
}

/// Sizes that sit on every boundary of the small policy.
fn boundary_sizes() -> Vec<(&'static str, usize)> {
    let stripe = WIDTH * BLOCK;
    let group = K * BLOCK;
    vec![
        ("empty", 0),
        ("one-byte", 1),
        ("cell-minus-1", CELL - 1),
        ("cell", CELL),
        ("cell-plus-1", CELL + 1),
        ("block", BLOCK),
        ("stripe", stripe),
        ("group", group),
        ("group-plus-1", group + 1),
        ("groups-odd", 3 * group + 2 * BLOCK + CELL + 777),
    ]
}

/// Puts, gets (stdout, -o, ranges), lists, stats and removes objects at every size boundary
/// of rs(6,3) W=2 on 12 nodes; checks the refusals; then a restart keeps every byte.
#[test]
fn objects_round_trip_at_every_boundary_and_survive_a_restart() {
    let mut cluster = Cluster::start(12, &[]);
    let mut create = vec!["bucket", "create", "trip", "--json"];
    create.extend(SMALL);
    cluster.weft_json(&create);
    let mut objects = Objects::new();

    for (seed, (name, size)) in boundary_sizes().into_iter().enumerate() {
        let path = format!("trip/sizes/{name}");
        let put = objects.put(&cluster, &path, bytes(seed as u64, size), &[]);
        assert_eq!(put["layout"]["code"], "rs(6,3)", "{put}");
        assert_eq!(put["layout"]["cell_bytes"], CELL, "{put}");
        // Under k blocks the object is fitted: one stripe of k blocks of ⌈S/k⌉ in whole
        // cells (the 4 KiB cell is the smallest a fitted layout takes). From k blocks on it
        // keeps the policy's striping unless that stores it above what rs(6,3) promises
        // (its last group nearly empty): then its blocks shrink to fill its groups.
        let (width, block) = match size < K * BLOCK {
            true => (K, (size.div_ceil(K).max(1)).div_ceil(CELL) * CELL),
            false => {
                let width = put["layout"]["stripe_width"].as_u64().unwrap() as usize;
                let block = put["layout"]["block_bytes"].as_u64().unwrap() as usize;
                if (width, block) != (WIDTH, BLOCK) {
                    assert!(block <= BLOCK && [WIDTH, K].contains(&width), "{put}");
                    let stored =
                        put["data_bytes"].as_u64().unwrap() + put["parity_bytes"].as_u64().unwrap();
                    assert!(stored as f64 <= size as f64 * 1.5 * 1.05, "{put}");
                }
                (width, block)
            }
        };
        assert_eq!(put["layout"]["stripe_width"], width, "{put}");
        assert_eq!(put["layout"]["block_bytes"], block, "{put}");
        let stat = cluster.stat(&path);
        assert_eq!(stat["size"], size, "{stat}");
        assert_eq!(stat["state"], "committed", "{stat}");
        assert_eq!(put["units"], stat["units"].as_array().unwrap().len(), "{put}\n{stat}");
        // Data blocks that hold bytes, plus r parity units per group.
        let blocks = data_blocks(size as u64, CELL as u64, block as u64, width as u64);
        let groups = blocks.div_ceil(K as u64);
        assert_eq!(stat["groups"].as_array().unwrap().len() as u64, groups, "{stat}");
        assert_eq!(put["units"], blocks + 3 * groups, "{put}");
        assert_groups_on_distinct_nodes(&stat);
    }
    for (path, data) in [("trip/other/a", 5000), ("trip/other/b", 1), ("trip/sizesx", 10)] {
        objects.put(&cluster, path, bytes(data as u64 + 100, data), &[]);
    }
    // A policy given at put overrides the bucket's (rs(2,1) here).
    let put = objects.put(
        &cluster,
        "trip/other/narrow",
        bytes(77, 3 * BLOCK + 5),
        &["--k", "2", "--r", "1", "--stripe-width", "2", "--cell", "4KiB", "--block", "16KiB"],
    );
    assert_eq!(put["layout"]["code"], "rs(2,1)", "{put}");
    assert_groups_on_distinct_nodes(&cluster.stat("trip/other/narrow"));

    // A put over an existing key replaces it: a new generation, the old unit files deleted.
    let old = cluster.stat("trip/sizesx");
    let old_files: Vec<PathBuf> = units_of(&old)
        .values()
        .map(|u| unit_file(&cluster, u).unwrap_or_else(|| panic!("no file for {u}")))
        .collect();
    assert_eq!(old_files.len(), 4, "{old}");
    let put = objects.put(&cluster, "trip/sizesx", bytes(555, 2 * BLOCK + 3), &[]);
    assert!(put["generation"].as_u64() > old["generation"].as_u64(), "{put}\n{old}");
    assert_eq!(put["leftover_units"], 0, "{put}");
    for file in &old_files {
        assert!(!file.exists(), "{} outlived the replacing put", file.display());
    }

    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path}: {got}");
    }

    // Ranges: a-b (clamped at the end), a-, -n, in both spellings of a leading dash.
    let big = "trip/sizes/groups-odd";
    let data = objects.data(big).to_vec();
    let n = data.len();
    let ranges: Vec<(String, std::ops::Range<usize>)> = vec![
        ("0-0".into(), 0..1),
        (format!("{}-{}", CELL - 1, CELL), CELL - 1..CELL + 1),
        (format!("{}-{}", BLOCK - 10, 3 * BLOCK + 17), BLOCK - 10..3 * BLOCK + 18),
        (format!("{}-{}", K * BLOCK - 1, K * BLOCK), K * BLOCK - 1..K * BLOCK + 1),
        (format!("{}-{}", n - 5, n + 1000), n - 5..n),
        (format!("{}-", 2 * K * BLOCK + 3), 2 * K * BLOCK + 3..n),
        (format!("{}-", n - 1), n - 1..n),
        ("-1000".into(), n - 1000..n),
        (format!("-{}", n + 5), 0..n),
    ];
    for (range, want) in &ranges {
        let got = get_stdout(&cluster, &[big, "--range", range]);
        assert_same(&got, &data[want.clone()], &format!("--range {range}"));
        let got = get_stdout(&cluster, &[big, &format!("--range={range}")]);
        assert_same(&got, &data[want.clone()], &format!("--range={range}"));
    }
    let out = objects.file("ranged");
    let got =
        cluster.weft_json(&["get", big, "--range", "-4097", "-o", out.to_str().unwrap(), "--json"]);
    assert_eq!(got["bytes"], 4097, "{got}");
    assert_same(&std::fs::read(&out).unwrap(), &data[n - 4097..], "--range -4097 -o");
    let one = get_stdout(&cluster, &["trip/sizes/one-byte", "--range", "0-"]);
    assert_same(&one, objects.data("trip/sizes/one-byte"), "one byte, 0-");

    // ls: a prefix lists exactly its keys, in order; no prefix lists everything.
    let keys = |listing: &Value| -> Vec<String> {
        listing["objects"]
            .as_array()
            .expect("ls lists objects")
            .iter()
            .map(|o| o["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let sizes: Vec<String> = objects
        .stored
        .keys()
        .filter_map(|p| p.strip_prefix("trip/"))
        .filter(|k| k.starts_with("sizes/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(sizes.len(), boundary_sizes().len());
    assert_eq!(keys(&cluster.weft_json(&["ls", "trip/sizes/", "--json"])), sizes);
    assert_eq!(
        keys(&cluster.weft_json(&["ls", "trip/other/", "--json"])),
        ["other/a", "other/b", "other/narrow"]
    );
    let mut with_x = sizes.clone();
    with_x.push("sizesx".into());
    assert_eq!(keys(&cluster.weft_json(&["ls", "trip/sizes", "--json"])), with_x);
    assert_eq!(keys(&cluster.weft_json(&["ls", "trip/nothing", "--json"])), Vec::<String>::new());
    let all: Vec<String> = objects.stored.keys().map(|p| p["trip/".len()..].to_owned()).collect();
    let listing = cluster.weft_json(&["ls", "trip", "--json"]);
    assert_eq!(keys(&listing), all);
    for object in listing["objects"].as_array().unwrap() {
        let path = format!("trip/{}", object["key"].as_str().unwrap());
        assert_eq!(object["size"], objects.data(&path).len(), "{object}");
    }
    let text = cluster.weft(&["ls", "trip/other/"]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        [vec!["5000", "other/a"], vec!["1", "other/b"], vec!["49157", "other/narrow"]]
    );

    // rm: the object is gone from meta and its unit files from the disks.
    let victim = "trip/sizes/group-plus-1";
    let before = cluster.stat(victim);
    let files: Vec<PathBuf> = units_of(&before)
        .values()
        .map(|u| unit_file(&cluster, u).unwrap_or_else(|| panic!("no file for {u}")))
        .collect();
    assert_eq!(files.len(), K + 1 + 3 + 3, "{before}");
    let removed = cluster.weft_json(&["rm", victim, "--json"]);
    assert_eq!(removed["removed"], victim, "{removed}");
    assert_eq!((removed["units"].as_u64(), removed["units_left"].as_u64()), (Some(13), Some(0)));
    objects.stored.remove(victim);
    for file in &files {
        assert!(!file.exists(), "{} outlived rm", file.display());
    }
    let key_of = |u: &Value| u["unit_key"].as_str().unwrap().to_owned();
    let object_prefix = key_of(&before["units"][0]).split('-').next().unwrap().to_owned();
    let left: Vec<PathBuf> = unit_files(&cluster)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(&object_prefix))
        .collect();
    assert!(left.is_empty(), "unit files of the removed object: {left:?}");
    fails_with(&cluster, &["get", victim], &["no_such_key", "group-plus-1"]);
    fails_with(&cluster, &["stat", victim], &["no_such_key"]);
    fails_with(&cluster, &["rm", victim], &["no_such_key"]);
    assert!(!keys(&cluster.weft_json(&["ls", "trip/sizes/", "--json"]))
        .contains(&"sizes/group-plus-1".to_owned()));

    // Refusals: one line each, non-zero exit, nothing written.
    fails_with(&cluster, &["get", "trip/missing"], &["no_such_key", "missing"]);
    fails_with(&cluster, &["get", "nobucket/k"], &["no_such_bucket", "nobucket"]);
    let missing = objects.file("does-not-exist");
    fails_with(
        &cluster,
        &["put", missing.to_str().unwrap(), "trip/x"],
        &["cannot read", "does-not-exist"],
    );
    let small = objects.file("in-0");
    fails_with(&cluster, &["put", small.to_str().unwrap(), "nobucket/x"], &["no_such_bucket"]);
    fails_with(
        &cluster,
        &["get", big, "--range", &format!("{n}-")],
        &["--range", "past the end of the object"],
    );
    fails_with(
        &cluster,
        &["get", big, "--range", &format!("{}-{}", n + 10, n + 20)],
        &["past the end"],
    );
    fails_with(&cluster, &["get", big, "--range", "10-5"], &["ends before it starts"]);
    fails_with(&cluster, &["get", big, "--range", "lots"], &["--range"]);
    fails_with(
        &cluster,
        &["get", "trip/sizes/empty", "--range", "0-0"],
        &["past the end of the object"],
    );
    fails_with(&cluster, &["get", "trip"], &["BUCKET/KEY"]);
    fails_with(&cluster, &["get", "trip/"], &["BUCKET/KEY"]);
    fails_with(&cluster, &["put", small.to_str().unwrap(), "trip"], &["BUCKET/KEY"]);
    fails_with(&cluster, &["rm", "trip"], &["BUCKET/KEY"]);
    fails_with(&cluster, &["stat", "trip"], &["BUCKET/KEY"]);
    fails_with(&cluster, &["get", big, "--json"], &["-o"]);
    let never = objects.file("never");
    fails_with(&cluster, &["get", "trip/missing", "-o", never.to_str().unwrap()], &["no_such_key"]);
    assert!(!never.exists(), "a failed get left {}", never.display());
    assert_eq!(
        keys(&cluster.weft_json(&["ls", "trip", "--json"])),
        objects.stored.keys().map(|p| p["trip/".len()..].to_owned()).collect::<Vec<_>>(),
        "a refused put stored something"
    );

    // Restart: same directory, new processes; every object and the listing come back.
    let listing = cluster.weft_json(&["ls", "trip", "--json"]);
    let status = cluster.stop();
    assert!(status.success(), "weft up exited with {status}");
    cluster.restart();
    assert_eq!(cluster.weft_json(&["ls", "trip", "--json"]), listing);
    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path} after restart: {got}");
    }
}

/// Ten objects on rs(6,3) W=2, 12 nodes: three nodes die → every object reads back (degraded)
/// and repair restores full protection; three more die → still every byte.
#[test]
fn three_then_six_dead_nodes_lose_no_byte_and_repair_restores_protection() {
    let cluster = Cluster::start(12, &FAST_DOWN);
    let mut create = vec!["bucket", "create", "dead", "--json"];
    create.extend(SMALL);
    cluster.weft_json(&create);
    let mut objects = Objects::new();
    let group = K * BLOCK;
    let sizes = [
        1,
        CELL + 3,
        BLOCK - 1,
        WIDTH * BLOCK + 5,
        group,
        group + 1,
        2 * group + 3 * CELL + 11,
        4 * group + 7,
        5 * group - 1,
        3 * group + BLOCK / 2,
    ];
    for (i, size) in sizes.into_iter().enumerate() {
        objects.put(&cluster, &format!("dead/obj-{i:02}"), bytes(1000 + i as u64, size), &[]);
    }
    let stats: BTreeMap<String, Value> =
        objects.stored.keys().map(|p| (p.clone(), cluster.stat(p))).collect();

    // Kill the nodes of the first three data blocks of the largest object.
    let largest = &stats["dead/obj-08"];
    let largest_units = units_of(largest);
    let first: BTreeSet<u32> =
        ["d0", "d1", "d2"].iter().map(|u| node_of(&largest_units[*u])).collect();
    assert_eq!(first.len(), 3, "{largest}");
    for &id in &first {
        kill(&cluster, id);
    }
    let on_dead = |stat: &Value, dead: &BTreeSet<u32>| -> BTreeSet<String> {
        units_of(stat)
            .into_iter()
            .filter(|(_, u)| dead.contains(&node_of(u)))
            .map(|(n, _)| n)
            .collect()
    };
    let lost: usize = stats.values().map(|s| on_dead(s, &first).len()).sum();
    let listed_in = |got: &Value| -> BTreeSet<String> {
        got["degraded_units"]
            .as_array()
            .expect("get --json lists degraded units")
            .iter()
            .map(|u| u["unit"].as_str().unwrap().to_owned())
            .collect()
    };

    // Right after the kill (well within the 1.5 s before meta may judge the nodes down, so
    // nothing is repaired yet) the largest object reads back around its three lost blocks.
    let (got, said) = objects.get_json(&cluster, "dead/obj-08");
    assert_same(&got, objects.data("dead/obj-08"), "dead/obj-08 with three nodes dead");
    let listed = listed_in(&said);
    for unit in ["d0", "d1", "d2"] {
        assert!(listed.contains(unit), "{unit} not degraded: {said}");
    }
    let from = BLOCK - 7;
    let range = format!("{from}-{}", 5 * BLOCK + 9);
    let got = get_stdout(&cluster, &["dead/obj-08", "--range", &range]);
    assert_same(&got, &objects.data("dead/obj-08")[from..=5 * BLOCK + 9], "degraded range");

    // Every object reads back; each get names only units on dead nodes, and every data unit
    // on a dead node unless repair has already moved it.
    let said = objects.check_all(&cluster);
    for (path, got) in &said {
        let dead_units = on_dead(&stats[path], &first);
        let listed = listed_in(got);
        assert!(listed.is_subset(&dead_units), "{path}: {got}; dead units {dead_units:?}");
        let now = units_of(&cluster.stat(path));
        for unit in dead_units.iter().filter(|u| u.starts_with('d')) {
            assert!(
                listed.contains(unit) || !first.contains(&node_of(&now[unit])),
                "{path}: {unit} is on a dead node but the get did not say so: {got}"
            );
        }
    }

    let status =
        cluster.wait_for_status("the three killed nodes down", |s| nodes_in(s, "down") == first);
    assert_eq!(counter(&status, "nodes_up"), 9, "{status}");
    let repaired = poll_status(
        &cluster,
        "repair of every unit on the dead nodes",
        Duration::from_secs(60),
        |s| {
            counter(s, "under_protected_units") == 0
                && counter(s, "repair_queue") == 0
                && counter(s, "repairs_completed") >= lost as u64
        },
    );
    assert_eq!(counter(&repaired, "repairs_completed"), lost as u64, "{repaired}");

    // Repaired: every unit on a live node, groups still on distinct nodes, reads not degraded.
    for path in objects.stored.keys() {
        let now = cluster.stat(path);
        for (name, unit) in units_of(&now) {
            assert!(!first.contains(&node_of(&unit)), "{path} {name} still on a dead node: {unit}");
            assert_eq!(unit["state"], "up", "{path}: {unit}");
            assert!(unit_file(&cluster, &unit).is_some(), "{path} {name}: no file for {unit}");
        }
        assert_groups_on_distinct_nodes(&now);
        for group in now["groups"].as_array().unwrap() {
            assert_eq!(
                (group["unavailable"].as_u64(), group["spare"].as_u64()),
                (Some(0), Some(3)),
                "{now}"
            );
        }
    }
    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path} after repair: {got}");
    }

    // Three more nodes die (each holding units): six of twelve gone, every byte still there.
    let stats: BTreeMap<String, Value> =
        objects.stored.keys().map(|p| (p.clone(), cluster.stat(p))).collect();
    let largest = &stats["dead/obj-08"];
    let units = units_of(largest);
    let second: BTreeSet<u32> = ["d0", "d3", "p0.0"].iter().map(|u| node_of(&units[*u])).collect();
    assert_eq!(second.len(), 3, "{largest}");
    assert!(second.is_disjoint(&first));
    for &id in &second {
        kill(&cluster, id);
    }
    let all_dead: BTreeSet<u32> = first.union(&second).copied().collect();
    let mut degraded_reads = 0;
    for (path, got) in objects.check_all(&cluster) {
        let listed = listed_in(&got);
        let dead_units = on_dead(&stats[&path], &second);
        assert!(listed.is_subset(&dead_units), "{path}: {got}; dead units {dead_units:?}");
        degraded_reads += usize::from(!listed.is_empty());
    }
    assert!(degraded_reads >= 1);
    let status = cluster.wait_for_status("six nodes down", |s| nodes_in(s, "down") == all_dead);
    assert_eq!(counter(&status, "nodes_up"), 6, "{status}");
    // Meta now reports the units down, and reads still succeed.
    for group in cluster.stat("dead/obj-08")["groups"].as_array().unwrap() {
        assert!(
            group["unavailable"].as_u64().unwrap() <= 3 && group["decodable"] == true,
            "{group}"
        );
    }
    objects.check_all(&cluster);
}

/// A flipped byte in a data unit file: the get still returns the right bytes, reports the
/// unit, repair rebuilds it, and the next get reads it normally.
#[test]
fn a_corrupt_unit_is_read_around_and_rebuilt() {
    let cluster = Cluster::start(12, &FAST_DOWN);
    let mut create = vec!["bucket", "create", "flipped", "--json"];
    create.extend(SMALL);
    cluster.weft_json(&create);
    let mut objects = Objects::new();
    let path = "flipped/victim";
    objects.put(&cluster, path, bytes(42, 2 * K * BLOCK + 3 * CELL + 5), &[]);
    objects.put(&cluster, "flipped/bystander", bytes(43, K * BLOCK + 1), &[]);
    let before = cluster.stat(path);
    let unit = units_of(&before)["d7"].clone();
    let file = unit_file(&cluster, &unit).unwrap_or_else(|| panic!("no file for {unit}"));
    let mut raw = std::fs::read(&file).unwrap();
    let at = raw.len() - 10;
    raw[at] ^= 0x5a;
    std::fs::write(&file, &raw).unwrap();

    let status = cluster.status();
    let completed = counter(&status, "repairs_completed");
    let (got, said) = objects.get_json(&cluster, path);
    assert_same(&got, objects.data(path), "get of an object with a corrupt unit");
    let degraded = said["degraded_units"].as_array().unwrap();
    assert_eq!(degraded.len(), 1, "{said}");
    assert_eq!(degraded[0]["unit"], "d7", "{said}");
    assert!(degraded[0]["cause"].as_str().unwrap().contains("corrupt"), "{said}");
    // A range that does not touch the corrupt unit reads normally.
    let clean = get_stdout(&cluster, &[path, "--range", "0-99"]);
    assert_same(&clean, &objects.data(path)[..100], "range before the corrupt unit");

    let repaired =
        poll_status(&cluster, "the corrupt unit rebuilt", Duration::from_secs(30), |s| {
            counter(s, "repairs_completed") > completed
                && counter(s, "repair_queue") == 0
                && counter(s, "under_protected_units") == 0
        });
    assert_eq!(counter(&repaired, "repairs_completed"), completed + 1, "{repaired}");
    let after = cluster.stat(path);
    let moved = units_of(&after)["d7"].clone();
    let new_file = unit_file(&cluster, &moved).unwrap_or_else(|| panic!("no file for {moved}"));
    if node_of(&moved) == node_of(&unit) {
        assert_ne!(std::fs::read(&new_file).unwrap(), raw, "d7 was neither moved nor rewritten");
    } else {
        assert!(!file.exists(), "the corrupt copy {} was left behind", file.display());
    }
    assert_groups_on_distinct_nodes(&after);
    // Only d7 changed.
    let (old_units, new_units) = (units_of(&before), units_of(&after));
    for (name, old) in &old_units {
        if name != "d7" {
            assert_eq!(old["node_id"], new_units[name]["node_id"], "{name} moved: {after}");
        }
    }
    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path} after repair: {got}");
    }
}

/// rs(20,3), stripe width 6, 64 KiB cells, 512 KiB blocks: a ~18 MiB put holds at most
/// Okapi's r·B + k·C, far below the naive (k + r)·B, and reads back byte-identical.
#[test]
fn a_wide_put_stays_within_okapis_buffer_bound() {
    let cluster = Cluster::start(23, &[]);
    cluster.weft_json(&["bucket", "create", "wide", "--json"]);
    let mut objects = Objects::new();
    let (cell, block) = (64 * 1024u64, 512 * 1024u64);
    let policy = [
        "--code",
        "rs",
        "--k",
        "20",
        "--r",
        "3",
        "--stripe-width",
        "6",
        "--cell",
        "64KiB",
        "--block",
        "512KiB",
        "--stats",
    ];
    // 36 full blocks (six whole stripes) and one short one: stored within what rs(20,3)
    // promises, so the object keeps the policy's striping (not fitted to its size).
    let size = 18 * 1024 * 1024 + 12345;
    let put = objects.put(&cluster, "wide/big", bytes(7, size), &policy);
    assert_eq!(put["layout"]["code"], "rs(20,3)", "{put}");
    assert_eq!(put["layout"]["stripe_width"], 6, "{put}");
    let okapi = 3 * block + 20 * cell;
    let naive = 23 * block;
    assert_eq!(put["okapi_buffer_bytes"], okapi, "{put}");
    assert_eq!(put["naive_buffer_bytes"], naive, "{put}");
    let peak = put["peak_buffer_bytes"].as_u64().unwrap();
    let bound = put["buffer_bound_bytes"].as_u64().unwrap();
    assert!(peak > 0, "{put}");
    assert!(peak <= bound, "peak {peak} above this client's bound {bound}: {put}");
    assert!(bound <= okapi, "bound {bound} above Okapi's {okapi}: {put}");
    assert!(peak <= okapi, "peak {peak} above Okapi's r·B + k·C = {okapi}: {put}");
    // 37 data blocks (the last stripe holds one short cell) in 2 groups, plus 3 parity
    // units each.
    assert_eq!(data_blocks(size as u64, cell, block, 6), 37);
    assert_eq!(put["units"], 37 + 3 * 2, "{put}");
    let stat = cluster.stat("wide/big");
    assert_groups_on_distinct_nodes(&stat);
    objects.check_all(&cluster);

    // The human form says the same figures.
    let file = objects.file("in-0");
    let text = cluster.weft(&[
        "put",
        file.to_str().unwrap(),
        "wide/again",
        "--code",
        "rs",
        "--k",
        "20",
        "--r",
        "3",
        "--stripe-width",
        "6",
        "--cell",
        "64KiB",
        "--block",
        "512KiB",
        "--stats",
    ]);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("peak client buffer") && text.contains("Okapi r·B + k·C = 2.8 MiB"),
        "{text}"
    );
    assert!(text.contains("naive group buffering (k+r)·B = 11.5 MiB"), "{text}");
}

/// Keys are names, not paths: `x/../y` must never act as `y`, and a key can never address
/// another route of meta (here: delete a bucket). HTTP clients normalise dot segments before
/// sending, so weft refuses such keys with one clear line (weft_wire::object_key_problem, in
/// the client and in meta).
#[test]
fn keys_with_dot_segments_are_their_own_keys() {
    let cluster = Cluster::start(3, &[]);
    let policy = ["--k", "2", "--r", "1", "--cell", "4KiB", "--block", "16KiB"];
    let mut create = vec!["bucket", "create", "bkt", "--json"];
    create.extend(policy);
    cluster.weft_json(&create);
    cluster.weft_json(&["bucket", "create", "victim", "--json"]);
    let mut objects = Objects::new();
    let file = objects.file("in");
    std::fs::write(&file, bytes(1, 3000)).unwrap();

    let put = cluster.weft(&["put", file.to_str().unwrap(), "bkt/x/../y", "--json"]);
    if put.status.success() {
        objects.stored.insert("bkt/x/../y".into(), bytes(1, 3000));
        let listed = cluster.weft_json(&["ls", "bkt", "--json"]);
        assert_eq!(listed["objects"][0]["key"], "x/../y", "{listed}");
        objects.check_all(&cluster);
    } else {
        let stderr = String::from_utf8_lossy(&put.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    let _ = cluster.weft(&["rm", "bkt/../../victim"]);
    let buckets = cluster.weft_json(&["bucket", "ls", "--json"]);
    let names: Vec<&str> = buckets["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bkt", "victim"], "`weft rm bkt/../../victim` removed a bucket");
}

/// The rows `weft ARGS --json` (which must succeed) prints as one JSON array.
fn json_rows(cluster: &Cluster, args: &[&str]) -> Vec<Value> {
    let output = cluster.weft(args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let document: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one document ({e}): {stdout}"));
    document.as_array().unwrap_or_else(|| panic!("not an array: {stdout}")).clone()
}

#[test]
fn bench_cluster_compares_coders_and_read_modes_on_verified_bytes() {
    let cluster = Cluster::start(9, &FAST_DOWN);
    let mut put = vec!["bench", "cluster", "put", "--size", "300KiB", "--object-size", "64KiB"];
    put.extend(["--bucket", "bench-b", "--json"]);
    put.extend(SMALL);
    let rows = json_rows(&cluster, &put);
    let coders: Vec<&str> = rows.iter().map(|r| r["coder"].as_str().unwrap()).collect();
    assert_eq!(coders, ["pipelined", "blocking", "noop"]);
    for row in &rows {
        assert_eq!(row["op"], "put");
        assert_eq!(row["bytes"], 300 * 1024, "{row}");
        assert_eq!(row["objects"], 5);
        assert!(row["peak_buffer_bytes"].as_u64() <= row["buffer_bound_bytes"].as_u64(), "{row}");
        assert!(row["ratio_to_noop"].as_f64().unwrap() > 0.0);
        assert!(row["median_object_ratio_to_noop"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert_eq!(rows[2]["ratio_to_noop"], 1.0);
    assert_eq!(rows[2]["median_object_ratio_to_noop"], 1.0);
    // Only the first coder's objects stay: noop objects have no real parity.
    let listed = cluster.weft_json(&["ls", "bench-b/", "--json"]);
    let kept: Vec<&str> =
        listed["objects"].as_array().unwrap().iter().map(|o| o["key"].as_str().unwrap()).collect();
    assert_eq!(kept.len(), 5, "{listed}");
    assert!(kept.iter().all(|k| k.starts_with("bench/obj-")), "{kept:?}");
    // Issue 16 item 7: policy flags on an existing bucket are each object's policy, never
    // silently ignored (the bucket's default is rs(6,3)); a get refuses them.
    cluster.weft_json(&["bucket", "create", "bench-c", "--json"]);
    let mut again = vec!["bench", "cluster", "put", "--size", "64KiB", "--object-size", "64KiB"];
    again.extend(["--bucket", "bench-c", "--coder", "pipelined", "--json", "--k", "4", "--r", "2"]);
    again.extend(["--stripe-width", "2", "--cell", "4KiB", "--block", "16KiB"]);
    let rows = json_rows(&cluster, &again);
    assert_eq!(rows[0]["layout"]["code"], "rs(4,2)", "{}", rows[0]);
    let stderr =
        cluster.weft_fails(&["bench", "cluster", "get", "--bucket", "bench-c", "--k", "4"]);
    assert!(stderr.contains("apply to `bench cluster put`"), "{stderr}");
    // Degraded: three nodes gone; both read modes return every byte (checked by the bench).
    for id in [2, 5, 8] {
        kill(&cluster, id);
    }
    let rows = json_rows(&cluster, &["bench", "cluster", "get", "--bucket", "bench-b", "--json"]);
    let modes: Vec<&str> = rows.iter().map(|r| r["read_mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["pipelined", "blocking"]);
    for row in &rows {
        assert_eq!(
            (row["bytes"].as_u64(), row["verified"].as_bool()),
            (Some(300 * 1024), Some(true))
        );
    }
    assert_eq!(rows[0]["degraded_units"], rows[1]["degraded_units"]);
    assert_eq!(rows[1]["median_object_ratio_to_blocking"], 1.0);
    assert!(rows[0]["median_object_ratio_to_blocking"].as_f64().unwrap() > 0.0);
    let bad = cluster.weft(&["bench", "cluster", "put", "--coder", "fast", "--bucket", "bench-b"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a coder"));
}

/// The background scrub's interval in the scrub tests, in seconds: 10, or
/// `WEFT_SCRUB_TEST_INTERVAL_S` (the issue's acceptance run uses 60).
fn scrub_interval_s() -> u64 {
    std::env::var("WEFT_SCRUB_TEST_INTERVAL_S").ok().and_then(|s| s.parse().ok()).unwrap_or(10)
}

/// Flips one byte near the end of `file` (inside the unit's data, so its checksum breaks).
fn rot(file: &Path) {
    let mut raw = std::fs::read(file).unwrap();
    let at = raw.len() - 10;
    raw[at] ^= 0x5a;
    std::fs::write(file, &raw).unwrap();
}

#[test]
fn rotten_units_of_unread_objects_are_found_by_the_scrub_and_repaired() {
    let interval = format!("{}s", scrub_interval_s());
    let mut args = FAST_DOWN.to_vec();
    args.extend(["--scrub-interval", &interval]);
    let cluster = Cluster::start(12, &args);
    let mut create = vec!["bucket", "create", "rot", "--json"];
    create.extend(SMALL);
    cluster.weft_json(&create);
    let mut objects = Objects::new();
    // Counted before the first rot: the scrub may find and repair the first rotten units
    // while the later ones are still being written (a slow machine).
    let completed = counter(&cluster.status(), "repairs_completed");
    // 20 objects, one rotten unit each (a data unit in some, a parity unit in others), so
    // every object stays readable and only the scrub can find the damage.
    let mut rotten = Vec::new();
    for i in 0..20u64 {
        let path = format!("rot/o{i}");
        objects.put(&cluster, &path, bytes(100 + i, K * BLOCK + 1 + i as usize), &[]);
        let unit_name = if i % 2 == 0 { "d1" } else { "p0.1" };
        let unit = units_of(&cluster.stat(&path))[unit_name].clone();
        let file = unit_file(&cluster, &unit).unwrap_or_else(|| panic!("no file for {unit}"));
        rot(&file);
        rotten.push((path, unit_name, unit));
    }
    let rotted = Instant::now();
    // One interval for the scrub to reach every unit, plus time to rebuild 20 units.
    let allowed = Duration::from_secs(scrub_interval_s() + 50);
    poll_status(&cluster, "20 rotten units found", allowed, |s| {
        counter(s, "bad_units_reported") >= 20
    });
    eprintln!("20 rotten units found {:?} after the rot", rotted.elapsed());
    let repaired = poll_status(&cluster, "20 rotten units repaired", allowed, |s| {
        counter(s, "repairs_completed") >= completed + 20
            && counter(s, "repair_queue") == 0
            && counter(s, "under_protected_units") == 0
    });
    assert!(counter(&repaired, "bad_units_reported") >= 20, "{repaired}");
    eprintln!("20 rotten units found and repaired {:?} after the rot", rotted.elapsed());
    for (path, unit_name, old) in &rotten {
        let now = units_of(&cluster.stat(path))[*unit_name].clone();
        assert!(unit_file(&cluster, &now).is_some(), "{path} {unit_name} has no file: {now}");
        assert_ne!(now, *old, "{path} {unit_name} still names its rotten copy");
    }
    // Every object reads whole with no unit read around: the scrub fixed them before any read.
    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path} after the scrub: {got}");
    }
}

#[test]
fn a_disk_emptied_while_its_node_was_down_is_found_counted_and_reprotected() {
    let interval = format!("{}s", scrub_interval_s());
    let mut cluster = Cluster::start(12, &["--scrub-interval", &interval]);
    let mut create = vec!["bucket", "create", "empty", "--json"];
    create.extend(SMALL);
    cluster.weft_json(&create);
    let mut objects = Objects::new();
    for i in 0..6u64 {
        objects.put(&cluster, &format!("empty/o{i}"), bytes(200 + i, 2 * K * BLOCK + 7), &[]);
    }
    let victim = 3u32;
    let on_victim: Vec<(String, String)> = objects
        .stored
        .keys()
        .flat_map(|path| {
            units_of(&cluster.stat(path))
                .into_iter()
                .filter(|(_, unit)| node_of(unit) == victim)
                .map(|(name, _)| (path.clone(), name))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!on_victim.is_empty(), "node {victim} holds no unit");

    // The whole cluster stops; node 3's disk loses every unit file; the cluster comes back.
    assert!(cluster.stop().success());
    let disk = cluster.dir().join(format!("node-{victim}")).join("disk-0").join("units");
    let mut wiped = 0;
    for fanout in std::fs::read_dir(&disk).unwrap() {
        for file in std::fs::read_dir(fanout.unwrap().path()).unwrap() {
            std::fs::remove_file(file.unwrap().path()).unwrap();
            wiped += 1;
        }
    }
    assert!(wiped >= on_victim.len(), "wiped {wiped} files, expected {}", on_victim.len());
    cluster.restart();

    // Node 3 is up and its disk healthy, so only its inventory can tell: meta counts every
    // referenced unit of that disk as missing, queues them, and the executor rebuilds them.
    let counted = poll_status(&cluster, "the inventory of node 3", Duration::from_secs(40), |s| {
        s["inventories"].as_array().is_some_and(|all| {
            all.iter().any(|i| i["node_id"] == victim && i["missing"].as_u64() > Some(0))
        })
    });
    let inventory = counted["inventories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["node_id"] == victim)
        .unwrap()
        .clone();
    assert_eq!(inventory["missing"], on_victim.len() as u64, "{counted}");
    assert_eq!(inventory["referenced"], on_victim.len() as u64, "{counted}");
    assert!(counter(&counted, "missing_units") >= on_victim.len() as u64, "{counted}");
    let text = cluster.weft(&["status"]);
    let said = String::from_utf8_lossy(&text.stdout);
    assert!(
        said.contains("health:") && said.contains(" missing units (latest inventories"),
        "{said}"
    );
    poll_status(&cluster, "node 3's units rebuilt", Duration::from_secs(60), |s| {
        counter(s, "repair_queue") == 0 && counter(s, "under_protected_units") == 0
    });
    for (path, name) in &on_victim {
        let unit = units_of(&cluster.stat(path))[name].clone();
        assert!(unit_file(&cluster, &unit).is_some(), "{path} {name} has no file: {unit}");
    }
    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path} after repair: {got}");
    }
    // The next inventory of node 3 matches what meta references.
    let next_inventory = Duration::from_secs(scrub_interval_s() + 20);
    poll_status(&cluster, "a clean inventory of node 3", next_inventory, |s| {
        s["inventories"]
            .as_array()
            .is_some_and(|all| all.iter().any(|i| i["node_id"] == victim && i["missing"] == 0))
    });
}

/// Issue 15 item 6 on the real binaries: with more than r units of a group lost, `weft up`'s
/// repair executor reports the repairs unrecoverable; `weft status` counts the unfound units,
/// `weft stat` names them, and `weft repair mark-lost` (only with --yes) gives the object up,
/// after which a read fails saying the object is lost.
#[test]
fn unfound_units_show_in_status_and_stat_and_mark_lost_gives_the_object_up() {
    let cluster = Cluster::start(5, &FAST_DOWN);
    let policy =
        ["--k", "2", "--r", "1", "--stripe-width", "2", "--cell", "4KiB", "--block", "16KiB"];
    let mut create = vec!["bucket", "create", "bkt", "--json"];
    create.extend(policy);
    cluster.weft_json(&create);
    let objects = Objects::new();
    let file = objects.file("in");
    std::fs::write(&file, bytes(7, 32 * 1024)).unwrap();
    cluster.weft_json(&["put", file.to_str().unwrap(), "bkt/o", "--json"]);
    let stat = cluster.weft_json(&["stat", "bkt/o", "--json"]);
    let mut holders: Vec<u32> = stat["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["node_id"].as_u64().unwrap() as u32)
        .collect();
    holders.dedup();
    assert_eq!(holders.len(), 3, "one group of rs(2,1) on three nodes: {stat}");
    cluster.kill_node(holders[0]);
    cluster.kill_node(holders[1]);
    let status =
        cluster.wait_for_status_within("two unfound units", Duration::from_secs(60), |s| {
            s["unfound_units"] == 2
        });
    assert_eq!(status["unfound_objects"], 1, "{status}");
    let text = String::from_utf8(cluster.weft(&["status"]).stdout).unwrap();
    assert!(text.contains("unfound units: 2 in 1 objects"), "{text}");
    let stat = String::from_utf8(cluster.weft(&["stat", "bkt/o"]).stdout).unwrap();
    assert!(stat.contains("UNFOUND"), "{stat}");

    let refused = cluster.weft_fails(&["repair", "mark-lost", "bkt", "o"]);
    assert!(refused.contains("--yes"), "{refused}");
    let lost = cluster.weft_json(&["repair", "mark-lost", "bkt", "o", "--yes", "--json"]);
    assert_eq!(lost["lost"], true, "{lost}");
    assert_eq!(lost["unfound_units"].as_array().unwrap().len(), 2, "{lost}");
    assert_eq!((lost["units_deleted"].clone(), lost["units_left"].clone()), (json!(1), json!(2)));
    let read = cluster.weft_fails(&["get", "bkt/o", "-o", objects.file("out").to_str().unwrap()]);
    assert!(read.contains("lost"), "a read of a lost object says so: {read}");
    let status = cluster.status();
    assert_eq!(
        (status["unfound_units"].clone(), status["lost_objects"].clone()),
        (json!(0), json!(1))
    );
    let again = cluster.weft_fails(&["repair", "mark-lost", "bkt", "o", "--yes"]);
    assert!(again.contains("no_such_object"), "{again}");
}

/// A process this test spawned, killed (and reaped) when dropped, also on a failed assertion.
struct Spawned(std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The unit files under a disk directory, by path.
fn files_under(disk: &Path) -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    for fanout in std::fs::read_dir(disk.join("units")).unwrap() {
        for file in std::fs::read_dir(fanout.unwrap().path()).unwrap() {
            files.insert(file.unwrap().path());
        }
    }
    files
}

/// A node started by hand beside `weft up`'s (enrolled with `weft node add 5`) is restarted
/// with `--full-ratio 0.0001`, so its disk is full: puts go on, elsewhere; its units are
/// still read from it; nothing on it is queued or rebuilt; `weft status` says it is full.
#[test]
fn a_full_node_disk_is_read_only_its_units_stay_and_nothing_is_rebuilt() {
    let cluster = Cluster::start(4, &["--heartbeat-ms", "300"]);
    cluster.create_bucket("fill", &RS_2_1);
    let own = tempfile::tempdir().unwrap();
    let key_file = own.path().join("node-5.key");
    let disk = own.path().join("d0");
    let added = cluster.weft(&["node", "add", "5", "--key-file", key_file.to_str().unwrap()]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let meta = cluster.meta_url();
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "node",
            "--meta",
            &meta,
            "--key-file",
            key_file.to_str().unwrap(),
            "--disk",
            disk.to_str().unwrap(),
            "--heartbeat-ms",
            "300",
        ];
        args.extend(extra);
        Spawned(cluster.spawn_weft(&args))
    };
    let disk_state = |status: &Value| {
        let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
        let node = nodes.into_iter().find(|n| n["id"] == 5)?;
        (node["state"] == "up").then(|| node["disks"][0]["state"].as_str().unwrap().to_owned())
    };
    let mut node = serve(&crate::common::cluster::HOST_FILL_IGNORED);
    cluster.wait_for_status("node 5 up, its disk ok", |s| disk_state(s).as_deref() == Some("ok"));

    // Objects of 4 blocks (2 groups, 6 units) over 5 nodes: some units land on node 5.
    let mut objects = Objects::new();
    for i in 0..6 {
        objects.put(&cluster, &format!("fill/before-{i}"), bytes(100 + i, 4 * BLOCK), &[]);
    }
    let on_node_5 = |path: &str| -> BTreeSet<String> {
        units_of(&cluster.stat(path))
            .into_iter()
            .filter(|(_, unit)| node_of(unit) == 5)
            .map(|(name, _)| name)
            .collect()
    };
    let kept: BTreeMap<String, BTreeSet<String>> =
        objects.stored.keys().map(|path| (path.clone(), on_node_5(path))).collect();
    assert!(kept.values().any(|units| !units.is_empty()), "no unit on node 5: {kept:?}");
    let files = files_under(&disk);
    assert!(!files.is_empty());

    // Restart node 5 with a full ratio any real filesystem exceeds: its disk is full. The
    // restart is far shorter than meta's down timeout (5 s), so the node is never down.
    assert!(crate::common::cluster::signal(node.0.id(), libc::SIGTERM));
    assert!(node.0.wait().unwrap().success());
    node = serve(&["--nearfull-ratio", "0", "--full-ratio", "0.0001"]);
    let status = cluster.wait_for_status("node 5's disk full", |s| {
        disk_state(s).as_deref() == Some("full") && s["full_disks"] == 1
    });
    assert_eq!(status["nearfull_disks"], 0, "{status}");
    let entry = status["nodes"].as_array().unwrap().iter().find(|n| n["id"] == 5).unwrap();
    assert!(entry["disks"][0]["failed"].is_null(), "full is not failed: {entry}");
    assert!(entry["disks"][0]["total_bytes"].as_u64().unwrap() > 0, "{entry}");
    let text = String::from_utf8(cluster.weft(&["status"]).stdout).unwrap();
    assert!(text.contains("full (read-only, take no new units): 1"), "{text}");
    assert!(text.contains("FULL (read-only)"), "{text}");

    // Puts still succeed, on the other nodes only.
    for i in 0..6 {
        let path = format!("fill/after-{i}");
        objects.put(&cluster, &path, bytes(200 + i, 4 * BLOCK), &[]);
        assert!(on_node_5(&path).is_empty(), "{path} placed a unit on the full node");
    }
    // Every object reads back whole, the old ones from node 5 too: no unit was degraded.
    for (path, got) in objects.check_all(&cluster) {
        assert_eq!(got["degraded_units"], serde_json::json!([]), "{path}: {got}");
    }
    // Nothing on node 5 is queued or rebuilt, across more than one full rescan (every 10 s).
    let completed = counter(&status, "repairs_completed");
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        let status = cluster.status();
        assert_eq!(counter(&status, "repair_queue"), 0, "{status}");
        assert_eq!(counter(&status, "under_protected_units"), 0, "{status}");
        assert_eq!(counter(&status, "repairs_completed"), completed, "{status}");
        std::thread::sleep(Duration::from_millis(500));
    }
    for (path, units) in &kept {
        assert_eq!(&on_node_5(path), units, "{path}: units moved off the full node");
    }
    assert_eq!(files_under(&disk), files, "the full disk's unit files are untouched");
    drop(node);
}

/// Peak resident memory of process `pid` (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM is reported");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// `begin` of a 5 TiB object (983,040 units) leaves meta's memory, its record and its reply
/// small: the placement is one period of groups repeated, the reply lists one page of units
/// with the pattern, and a client names every other unit from it exactly as meta would.
#[test]
fn a_five_tib_object_costs_meta_one_period_not_a_million_units() {
    let cluster = Cluster::start(4, &[]);
    cluster.weft_json(&[
        "bucket",
        "create",
        "huge",
        "--json",
        "--code",
        "rs",
        "--k",
        "2",
        "--r",
        "1",
        "--stripe-width",
        "2",
        "--cell",
        "1MiB",
        "--block",
        "8MiB",
    ]);
    let pid = cluster.meta_pid();
    let before = peak_rss(pid);
    let size: u64 = 5 << 40;
    let (status, body) = cluster.meta_call(
        reqwest::Method::POST,
        "/v1/buckets/huge/objects/big/begin",
        &json!({ "size": size }),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let grown = peak_rss(pid).saturating_sub(before);
    assert!(grown < 64 << 20, "meta's peak memory grew by {grown} B for one begin");
    assert!(body.len() < 2 << 20, "a begin reply of {} B", body.len());
    let begun: Value = serde_json::from_slice(&body).unwrap();
    eprintln!(
        "begin of 5 TiB: reply {} B, record {} B, meta's peak memory +{grown} B",
        body.len(),
        begun["metadata_bytes"]
    );
    let units = (size >> 23) as usize * 3 / 2;
    assert_eq!(begun["units_total"], units);
    assert_eq!(begun["units"].as_array().unwrap().len(), 4096);
    assert_eq!(begun["units_next"], 4096);
    assert!(begun["metadata_bytes"].as_u64().unwrap() < 128 << 10, "{}", begun["metadata_bytes"]);
    assert!(begun["placement"]["period"].as_u64().is_some(), "a tiled placement");

    // The client names all 983,040 units from the pattern.
    let object = weft_client::ObjectInfo::from_json(begun.clone()).unwrap();
    assert_eq!(object.units.len(), units);
    // Committed (no unit was written, and meta never reads units), a page deep in the list
    // is exactly what the client computed.
    let generation = begun["generation"].as_u64().unwrap();
    let (status, body) = cluster.meta_call(
        reqwest::Method::POST,
        "/v1/buckets/huge/objects/big/commit",
        &json!({ "generation": generation, "digests": {} }),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, page) = cluster.meta_get("/v1/buckets/huge/objects/big?units_from=700000");
    assert_eq!(status, 200, "{page}");
    let listed = page["units"].as_array().unwrap();
    assert_eq!(listed.len(), 4096);
    assert_eq!(page["units_from"], 700_000);
    assert_eq!(page["units_next"], 704_096);
    for value in listed {
        let unit = weft_client::UnitInfo::from_json(value).unwrap();
        let mine = &object.units[&unit.unit];
        assert_eq!(
            (mine.node_id, mine.disk, &mine.unit_key, mine.len),
            (unit.node_id, unit.disk, &unit.unit_key, unit.len)
        );
    }
    let (_, last) =
        cluster.meta_get(&format!("/v1/buckets/huge/objects/big?units_from={}", units - 10));
    assert_eq!(last["units"].as_array().unwrap().len(), 10);
    assert_eq!(last["units_next"], Value::Null);
    // Forgotten through meta (a client delete would visit a million absent units).
    let (status, _) =
        cluster.meta_call(reqwest::Method::DELETE, "/v1/buckets/huge/objects/big", &Value::Null);
    assert_eq!(status, 200);
}

/// Issue 16 item 1: `weft get -o` onto something that is not a regular file (here a FIFO; the
/// report was `-o /dev/null` run as root) writes through it and leaves it what it was, instead
/// of renaming a regular file over it.
#[test]
fn get_onto_a_fifo_writes_through_it_and_leaves_it_a_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let cluster = Cluster::start(4, &[]);
    cluster.create_bucket("gets", &RS_2_1);
    let mut objects = Objects::new();
    let data = bytes(9, 3 * BLOCK + 5);
    objects.put(&cluster, "gets/o", data.clone(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    crate::common::mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(&fifo).unwrap())
    };
    let got = cluster.weft_json(&["get", "gets/o", "-o", fifo.to_str().unwrap(), "--json"]);
    assert_eq!(got["bytes"], data.len() as u64, "{got}");
    let file_type = std::fs::metadata(&fifo).unwrap().file_type();
    assert!(file_type.is_fifo(), "the FIFO was replaced: {file_type:?}");
    assert_eq!(reader.join().unwrap(), data, "the reader got the object through the FIFO");
}

/// Runs `weft ARGS` on this cluster with `input` on its stdin; returns its output.
fn weft_with_stdin(cluster: &Cluster, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write as _;
    let mut child = std::process::Command::new(crate::common::cluster::weft_bin())
        .args(args)
        .env("WEFT_META", cluster.meta_url())
        .env("WEFT_SECRET_FILE", cluster.secret_file())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("weft runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    feeder.join().unwrap().expect("weft read all of its stdin");
    output
}

/// Issue 16 items 2 and 3: `weft put -` (stdin), a FIFO and `/dev/stdin` on a pipe store
/// every byte they are given (they stored 0 bytes and exited 0: the size came from the
/// file's metadata); `weft put DIR` is refused before a write begins, so no write is left
/// in progress and no unit on disk.
#[test]
fn puts_from_pipes_store_every_byte_and_a_directory_begins_nothing() {
    let cluster = Cluster::start(4, &[]);
    cluster.create_bucket("pipes", &RS_2_1);
    let data = bytes(21, 3 * BLOCK + 5);
    for (source, key) in [("-", "pipes/stdin"), ("/dev/stdin", "pipes/devstdin")] {
        let output = weft_with_stdin(&cluster, &["put", source, key, "--json"], &data);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let put: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(put["size"], data.len() as u64, "{source}: {put}");
        assert_eq!(put["spooled_bytes"], 0, "{source}: {put}");
        assert_same(&cluster.get(key), &data, source);
    }
    // Past the in-memory share: spooled, every byte stored (coarser blocks keep units few).
    let large = bytes(22, 16 * 1024 * 1024 + 3 * CELL + 1);
    let output = weft_with_stdin(
        &cluster,
        &["put", "-", "pipes/large", "--json", "--cell", "256KiB", "--block", "1MiB"],
        &large,
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let put: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (put["size"].as_u64(), put["spooled_bytes"].as_u64()),
        (Some(large.len() as u64), Some(large.len() as u64))
    );
    assert_same(&cluster.get("pipes/large"), &large, "spooled stdin");

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    crate::common::mkfifo(&fifo);
    let writer = {
        let (fifo, data) = (fifo.clone(), data.clone());
        std::thread::spawn(move || std::fs::write(&fifo, &data).unwrap())
    };
    let put = cluster.weft_json(&["put", fifo.to_str().unwrap(), "pipes/fifo", "--json"]);
    writer.join().unwrap();
    assert_eq!(put["size"], data.len() as u64, "{put}");
    assert_same(&cluster.get("pipes/fifo"), &data, "FIFO");

    let units_before = unit_files(&cluster).len();
    let stderr = cluster.weft_fails(&["put", dir.path().to_str().unwrap(), "pipes/dir"]);
    assert!(stderr.contains("is a directory"), "{stderr}");
    let (status, expiry) = cluster.meta_call(
        reqwest::Method::POST,
        "/v1/writes/expire",
        &json!({"older_than_ms": 0, "dry_run": true}),
    );
    assert_eq!(status, 200);
    let expiry: Value = serde_json::from_slice(&expiry).unwrap();
    assert_eq!(
        (expiry["expired"].as_array().map(Vec::len), expiry["in_progress"].as_u64()),
        (Some(0), Some(0)),
        "{expiry}"
    );
    assert_eq!(unit_files(&cluster).len(), units_before, "the refused put wrote units");
    let (status, _) = cluster.meta_get("/v1/buckets/pipes/objects/dir");
    assert_eq!(status, 404);
}

/// Issue 16 item 5: a get's memory does not grow with the object. A 2 GiB get (through a
/// FIFO, every MiB checked in place) peaks under the read path's stated buffer bound
/// (`buffer_bound_bytes`: four windows and the range cache) plus 64 MiB for the process
/// itself; before the bound it reached ≈ 430 MB, the range cache keeping 256 MiB of
/// windows nobody would read again.
#[test]
fn a_two_gib_get_stays_under_its_stated_memory_bound() {
    use std::io::{Read as _, Write as _};
    const MIB: usize = 1 << 20;
    const CHUNKS: usize = 2048;
    let chunk = |i: usize, base: &[u8]| {
        let mut chunk = base.to_vec();
        chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
        chunk
    };
    let cluster = Cluster::start(4, &[]);
    cluster.weft_json(&[
        "bucket",
        "create",
        "mem",
        "--json",
        "--code",
        "rs",
        "--k",
        "2",
        "--r",
        "1",
        "--stripe-width",
        "2",
        "--cell",
        "1MiB",
        "--block",
        "8MiB",
    ]);
    let base = bytes(31, MIB);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two-gib");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        for i in 0..CHUNKS {
            out.write_all(&chunk(i, &base)).unwrap();
        }
        out.flush().unwrap();
    }
    let put = cluster.weft_json(&["put", file.to_str().unwrap(), "mem/big", "--json"]);
    assert_eq!(put["size"], (CHUNKS * MIB) as u64, "{put}");
    std::fs::remove_file(&file).unwrap();

    let fifo = dir.path().join("pipe");
    crate::common::mkfifo(&fifo);
    let reader = {
        let (fifo, base) = (fifo.clone(), base.clone());
        std::thread::spawn(move || {
            let mut input = std::fs::File::open(&fifo).unwrap();
            let mut got = vec![0u8; MIB];
            for i in 0..CHUNKS {
                input.read_exact(&mut got).unwrap_or_else(|e| panic!("MiB {i}: {e}"));
                assert!(got == chunk(i, &base), "MiB {i} of the object differs");
            }
            assert_eq!(input.read(&mut got).unwrap(), 0, "bytes past the object's end");
        })
    };
    let got = cluster.weft_json(&["get", "mem/big", "-o", fifo.to_str().unwrap(), "--json"]);
    reader.join().expect("every MiB came back in place");
    assert_eq!(got["bytes"], (CHUNKS * MIB) as u64, "{got}");
    let (peak, bound) =
        (got["peak_rss_bytes"].as_u64().unwrap(), got["buffer_bound_bytes"].as_u64().unwrap());
    assert!(bound <= 96 * MIB as u64, "the stated bound grew: {got}");
    assert!(peak < bound + 64 * MIB as u64, "a 2 GiB get peaked at {peak} bytes resident: {got}");
}
