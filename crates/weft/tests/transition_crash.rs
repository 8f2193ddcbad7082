//! Crash drills for `weft transition` on a real cluster (`weft up` processes, no mocks, no
//! test hooks): the executor, a node holding new parity, meta and the whole cluster are
//! killed mid-transition, and two executors race; every drill ends in full verification:
//! - the object reads byte-identical, and meta describes it under the old layout or the new
//!   one, never anything else; a pending transition exists only under the old layout;
//! - every unit meta names is on its disk; nothing else of the object is left behind except
//!   the old units of a transition killed after its commit, and (when nodes stopped before
//!   the executor could delete) parity of other generations, garbage for the unit sweeper;
//! - **decodability**: with min(r_old, r_new) nodes holding units of one group killed (a
//!   group of the layout meta describes now), the object still reads byte-identical;
//! - the same `weft transition` run again completes, and no transition stays pending.
//!
//! Kill moments are steps seen from outside, never test hooks: meta lists the plan; a
//! fraction of the new parity units is durable (their files exist); an old parity unit is
//! gone (the commit went through). Fractions are random; the seed is printed (set
//! WEFT_CRASH_SEED to replay one).

use std::{
    collections::BTreeSet,
    path::PathBuf,
    process::{Child, Output},
    time::{Duration, Instant},
};

use crate::common::{bytes, cluster::Cluster};
use serde_json::Value;
use weft_layout::StripedLayout;

const NODES: usize = 20;
/// Big enough that a transition takes about a second (4096 blocks of 16 KiB read one by
/// one), with a partial last block and a short last group.
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
/// Meta declares a silent node down after 1.5 s (heartbeats every 300 ms).
const FAST_DOWN: [&str; 4] = ["--down-after-ms", "1500", "--heartbeat-ms", "300"];
/// Every code below tolerates 3 lost units per group, so min(r_old, r_new) = 3.
const LOST: usize = 3;
/// How long a killed or orphaned executor may take to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
struct Target {
    code: &'static str,
    k: u32,
    r: u32,
}

const RS6: Target = Target { code: "rs", k: 6, r: 3 };
const RS12: Target = Target { code: "rs", k: 12, r: 3 };
const HH6: Target = Target { code: "hh-xor+", k: 6, r: 3 };
/// On 12 nodes, regrouping rs(6,3) into rs(10,2) must relocate blocks.
const RS10: Target = Target { code: "rs", k: 10, r: 2 };

impl Target {
    fn name(self) -> String {
        format!("{}({},{})", self.code, self.k, self.r)
    }

    fn args(self, path: &str) -> Vec<String> {
        let (k, r) = (self.k.to_string(), self.r.to_string());
        ["transition", path, "--code", self.code, "--k", &k, "--r", &r, "--json"]
            .map(str::to_owned)
            .to_vec()
    }
}

/// xorshift64*, seeded from WEFT_CRASH_SEED or the clock (printed either way).
struct Rng(u64);

impl Rng {
    fn new(test: &str) -> Rng {
        let seed = std::env::var("WEFT_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{test}: WEFT_CRASH_SEED={seed}");
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [lo, hi).
    fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Compares bytes without printing megabytes when they differ.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!("{what}: {} bytes, want {}; first difference at {first:?}", got.len(), want.len());
    }
}

/// A bucket `bkt` with [`POLICY`] and one object `bkt/o` of [`SIZE`] bytes; returns its bytes.
fn put_object(cluster: &Cluster, seed: u64) -> Vec<u8> {
    let mut create = vec!["bucket", "create", "bkt", "--json"];
    create.extend(POLICY);
    cluster.weft_json(&create);
    let data = bytes(seed, SIZE);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("o");
    std::fs::write(&file, &data).unwrap();
    cluster.weft_json(&["put", file.to_str().unwrap(), "bkt/o", "--json"]);
    for unit in cluster.stat("bkt/o")["units"].as_array().unwrap() {
        let file = file_of(cluster, unit);
        assert!(file.exists(), "{} is not where the store format says", file.display());
    }
    data
}

fn code_of(stat: &Value) -> String {
    stat["layout"]["code"].as_str().expect("stat names the code").to_owned()
}

/// `GET /v1/transitions`.
fn pending(cluster: &Cluster) -> Value {
    let (status, value) = cluster.meta_get("/v1/transitions");
    assert_eq!(status, 200, "{value}");
    value
}

/// Runs the transition to the end; its report and how long the run took.
fn transition(cluster: &Cluster, path: &str, to: Target) -> (Value, Duration) {
    let args = to.args(path);
    let started = Instant::now();
    let report = cluster.weft_json(&args.iter().map(String::as_str).collect::<Vec<_>>());
    (report, started.elapsed())
}

/// Waits for `child` at most [`EXIT_TIMEOUT`] (SIGKILL after that, and a failed test).
fn wait_output(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while child.try_wait().expect("the child can be waited for").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "{what} did not exit within {EXIT_TIMEOUT:?}; stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("its output")
}

/// The file of unit `key` on disk `disk` of node `node`, as docs/store-format.md lays it out:
/// `units/<low byte of crc32c(<object>-<index>), 2 hex>/<key>.unit`.
fn unit_file(cluster: &Cluster, node: u64, disk: u64, key: &str) -> PathBuf {
    let stem = &key[..key.len() - 17]; // without "-<generation:16 hex>"
    let fanout = format!("{:02x}", crc32c::crc32c(stem.as_bytes()) & 0xff);
    cluster.dir().join(format!("node-{node}/disk-{disk}/units/{fanout}/{key}.unit"))
}

fn file_of(cluster: &Cluster, unit: &Value) -> PathBuf {
    let node = unit["node_id"].as_u64().unwrap();
    unit_file(cluster, node, unit["disk"].as_u64().unwrap(), unit["unit_key"].as_str().unwrap())
}

/// A step of a transition, seen from outside: meta and the unit files.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// meta recorded the plan (nothing written yet, or hardly).
    Planned,
    /// This fraction of the new parity units is durable on disk (1.0: all, commit is next).
    Parity(f64),
    /// The commit went through: an old parity unit is deleted.
    Deleting,
}

/// Waits until the transition of `path` that `child` runs reaches `moment`; false when the
/// child exited first.
fn wait_for(cluster: &Cluster, path: &str, child: &mut Child, moment: Moment) -> bool {
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let old_parity: Vec<PathBuf> = cluster.stat(path)["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["unit"].as_str().is_some_and(|n| n.starts_with('p')))
        .map(|u| file_of(cluster, u))
        .collect();
    let mut plan: Option<Vec<PathBuf>> = None;
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        assert!(Instant::now() < deadline, "the transition never reached {moment:?}");
        if plan.is_none() {
            let (status, value) = cluster.meta_get(&format!("/v1/transitions/{path}"));
            if status == 200 {
                let create = value["create"].as_array().expect("the plan lists new parity");
                plan = Some(create.iter().map(|u| file_of(cluster, u)).collect());
            }
        }
        let reached = match (moment, &plan) {
            (Moment::Planned, Some(_)) => true,
            (Moment::Parity(fraction), Some(create)) => {
                // Written in group order: the last one needed tells.
                let needed = ((create.len() as f64 * fraction).ceil() as usize).max(1);
                create[needed - 1].exists()
            }
            (Moment::Deleting, _) => old_parity.iter().any(|f| !f.exists()),
            _ => false,
        };
        if reached {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Spawns the transition and SIGKILLs it at `moment` unless it ended first: whether it ended
/// by itself (successfully), and its output.
fn run_killed(cluster: &Cluster, path: &str, to: Target, moment: Moment) -> (bool, Output) {
    let args = to.args(path);
    let mut child = cluster.spawn_weft(&args.iter().map(String::as_str).collect::<Vec<_>>());
    if !wait_for(cluster, path, &mut child, moment) {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "weft transition failed by itself: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return (true, output);
    }
    let _ = child.kill();
    (false, wait_output(child, "the killed weft transition"))
}

/// (node, unit key) of every unit the object record names.
fn unit_places(stat: &Value) -> BTreeSet<(u32, String)> {
    stat["units"]
        .as_array()
        .expect("stat lists units")
        .iter()
        .map(|u| {
            (u["node_id"].as_u64().unwrap() as u32, u["unit_key"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// (node, unit key) of every unit file of the object (`object_id`) on the cluster's disks.
fn files_of(cluster: &Cluster, object_id: &str) -> BTreeSet<(u32, String)> {
    cluster
        .unit_keys_on_disks()
        .into_iter()
        .flat_map(|(node, keys)| keys.into_iter().map(move |key| (node, key)))
        .filter(|(_, key)| key.starts_with(object_id))
        .collect()
}

/// Every unit the record names is on its disk; with `allowed_extra`, any other unit file of
/// the object is one of those (the old record's units, when a commit may have beaten the
/// kill: nobody knows about them then).
fn check_files(cluster: &Cluster, stat: &Value, allowed_extra: Option<&BTreeSet<(u32, String)>>) {
    let object_id = stat["object_id"].as_str().unwrap();
    let files = files_of(cluster, object_id);
    let want = unit_places(stat);
    let missing: Vec<_> = want.difference(&files).collect();
    assert!(missing.is_empty(), "units meta names are not on their disks: {missing:?}");
    if let Some(allowed) = allowed_extra {
        let extra: Vec<_> = files.difference(&want).filter(|f| !allowed.contains(f)).collect();
        assert!(extra.is_empty(), "unit files left behind that nothing references: {extra:?}");
    }
}

/// After any crash: the object reads byte-identical under `old` or `new` (and is pending
/// only under `old`), every unit named is on disk. Returns whether `new` is committed.
fn check_whole(cluster: &Cluster, path: &str, data: &[u8], old: &str, new: &str) -> bool {
    let now = cluster.stat(path);
    let code = code_of(&now);
    assert!(code == old || code == new, "{path} is {code}, neither {old} nor {new}");
    assert_same(&cluster.get(path), data, &format!("get {path} under {code}"));
    let pending = pending(cluster);
    let count = pending["pending"].as_u64().unwrap();
    if code == new {
        assert_eq!(count, 0, "committed yet pending: {pending}");
    } else {
        assert!(count <= 1, "{pending}");
    }
    check_files(cluster, &now, None);
    code == new
}

/// The nodes holding the units of group `pick % groups` of the object as `stat` describes
/// it, in the order of the units (data blocks, then parity).
fn group_nodes(stat: &Value, pick: u64) -> (usize, Vec<u32>) {
    let layout: StripedLayout = serde_json::from_value(stat["layout"].clone()).unwrap();
    let size = stat["size"].as_u64().unwrap();
    let group = (pick % layout.groups(size) as u64) as usize;
    let mut names: Vec<String> =
        layout.group_blocks(size, group).map(|x| format!("d{x}")).collect();
    names.extend((0..layout.r()).map(|i| format!("p{group}.{i}")));
    let units = stat["units"].as_array().unwrap();
    let nodes = names
        .iter()
        .map(|name| {
            let unit = units
                .iter()
                .find(|u| u["unit"] == name.as_str())
                .unwrap_or_else(|| panic!("{name} is not in {stat}"));
            unit["node_id"].as_u64().unwrap() as u32
        })
        .collect();
    (group, nodes)
}

/// Decodability: kills `lost` nodes that hold units of one group of the object as meta
/// describes it now (each group then loses at most that many units: a node holds at most
/// one unit of a group) and reads it byte-identical. The nodes stay dead.
fn check_decodable(
    cluster: &Cluster,
    path: &str,
    data: &[u8],
    lost: usize,
    pick: u64,
    spare: &[u32],
) {
    let now = cluster.stat(path);
    let (group, nodes) = group_nodes(&now, pick);
    let candidates: Vec<u32> = nodes.iter().copied().filter(|n| !spare.contains(n)).collect();
    let start = (pick / 7) as usize % candidates.len();
    let victims: Vec<u32> =
        candidates.iter().cycle().skip(start).take(lost).copied().collect::<Vec<_>>();
    for &node in &victims {
        cluster.kill_node(node);
    }
    let got = cluster.get(path);
    assert_same(
        &got,
        data,
        &format!(
            "get {path} under {} with nodes {victims:?} (of group {group}: {nodes:?}) killed",
            code_of(&now)
        ),
    );
}

/// The executor (`weft transition`) killed by SIGKILL at several moments: after each kill,
/// full verification (decodability with min(r_old, r_new) nodes of one group killed, then
/// the cluster back), and the same command run again completes.
#[test]
fn executor_killed_at_several_moments() {
    let started = Instant::now();
    let mut rng = Rng::new("executor_killed_at_several_moments");
    let mut cluster = Cluster::start(NODES, &[]);
    let data = put_object(&cluster, rng.next());

    let mut from = RS6;
    // Old units of steps whose kill came after the commit: nobody knows about them.
    let mut leaked = BTreeSet::new();
    let steps = [
        (Moment::Planned, RS12),
        (Moment::Parity(rng.between(0.05, 0.2)), HH6),
        (Moment::Parity(rng.between(0.3, 0.7)), RS6),
        (Moment::Parity(1.0), RS12),
        (Moment::Deleting, RS6),
    ];
    for (moment, to) in steps {
        let before = cluster.stat("bkt/o");
        let killed_at = Instant::now();
        let (finished, output) = run_killed(&cluster, "bkt/o", to, moment);
        let after = killed_at.elapsed();
        let committed = check_whole(&cluster, "bkt/o", &data, &from.name(), &to.name());
        let left = pending(&cluster)["pending"].as_u64().unwrap();
        eprintln!(
            "{} -> {} killed at {moment:?} ({after:?}): finished {finished}, committed \
             {committed}, pending {left}; stderr: {}",
            from.name(),
            to.name(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        check_decodable(&cluster, "bkt/o", &data, LOST, rng.next(), &[]);
        cluster.restart();
        assert_same(&cluster.get("bkt/o"), &data, "get after the restart");

        let (report, took) = transition(&cluster, "bkt/o", to);
        eprintln!("  run again: {took:?}, unchanged {}", report["unchanged"]);
        assert_eq!(report["unchanged"], committed, "{report}");
        let now = cluster.stat("bkt/o");
        assert_eq!(code_of(&now), to.name(), "{report}");
        assert_same(&cluster.get("bkt/o"), &data, &format!("get under {}", to.name()));
        assert_eq!(pending(&cluster)["pending"], 0);
        // Nothing left behind, except the old units when the kill came after the commit.
        if committed {
            leaked.extend(unit_places(&before).difference(&unit_places(&now)).cloned());
        }
        check_files(&cluster, &now, Some(&leaked));
        from = to;
    }
    eprintln!("executor_killed_at_several_moments: {:?}", started.elapsed());
}

/// A node holding new parity of the pending transition is killed (`weft node kill`) while
/// the transition runs: the transition completes (rolled back and begun again once meta
/// marks the node down) or fails cleanly (nothing pending, nothing of it left on live
/// nodes), the object stays readable, a run after meta marks the node down completes, and
/// once repairs are done the object survives losing r_new more nodes.
#[test]
fn node_with_new_parity_killed_mid_transition() {
    let started = Instant::now();
    let mut rng = Rng::new("node_with_new_parity_killed_mid_transition");
    let cluster = Cluster::start(NODES, &FAST_DOWN);
    let data = put_object(&cluster, rng.next());
    let before = cluster.stat("bkt/o");

    let args = RS12.args("bkt/o");
    let child = cluster.spawn_weft(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // The plan as meta recorded it: the node of a parity unit of the last new group (so
    // the kill comes before the executor writes there).
    let deadline = Instant::now() + Duration::from_secs(20);
    let plan = loop {
        let (status, plan) = cluster.meta_get("/v1/transitions/bkt/o");
        if status == 200 {
            break plan;
        }
        assert!(Instant::now() < deadline, "no transition became pending: {plan}");
        std::thread::sleep(Duration::from_millis(5));
    };
    let create = plan["create"].as_array().expect("the plan lists new parity");
    let victim = create.last().unwrap()["node_id"].as_u64().unwrap() as u32;
    let killed = cluster.weft(&["node", "kill", &victim.to_string()]);
    assert!(killed.status.success(), "{}", String::from_utf8_lossy(&killed.stderr));
    let output = wait_output(child, "weft transition with a node killed");
    eprintln!(
        "node {victim} killed mid-transition: transition {}; stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    if output.status.success() {
        // It wrote to the dead node, so it must have rolled back and begun again.
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        eprintln!(
            "  attempts {}, relocated blocks {}, bytes read {}, parity written {}",
            report["attempts"],
            report["relocated_blocks"],
            report["bytes_read"],
            report["parity_bytes_written"]
        );
        assert!(report["attempts"].as_u64() >= Some(2), "{report}");
    }
    let committed = check_whole(&cluster, "bkt/o", &data, "rs(6,3)", "rs(12,3)");
    if !committed {
        // Failed cleanly: aborted in meta, its units gone from every live node.
        assert_eq!(pending(&cluster)["pending"], 0, "a failed transition stays pending");
        let object_id = before["object_id"].as_str().unwrap();
        let files = files_of(&cluster, object_id);
        let left: Vec<_> = create
            .iter()
            .map(|u| (u["node_id"].as_u64().unwrap() as u32, u["unit_key"].as_str().unwrap()))
            .filter(|(node, key)| *node != victim && files.contains(&(*node, key.to_string())))
            .collect();
        assert!(left.is_empty(), "the failed transition left {left:?}");
    }

    cluster.wait_for_status("the killed node down", |s| {
        Cluster::states(s).contains(&(u64::from(victim), "down".to_owned()))
    });
    let (report, took) = transition(&cluster, "bkt/o", RS12);
    eprintln!("  run again with node {victim} down: {took:?}, unchanged {}", report["unchanged"]);
    assert_eq!(code_of(&cluster.stat("bkt/o")), "rs(12,3)");
    assert_same(&cluster.get("bkt/o"), &data, "get after the run with a node down");
    assert_eq!(pending(&cluster)["pending"], 0);

    // Repair moves what the dead node held; then r_new more nodes may go.
    cluster.wait_for_status_within("repairs done", Duration::from_secs(60), |s| {
        s["under_protected_units"] == 0 && s["repair_queue"] == 0
    });
    let now = cluster.stat("bkt/o");
    assert!(
        !unit_places(&now).iter().any(|(node, _)| *node == victim),
        "units still on the dead node after repair"
    );
    check_decodable(&cluster, "bkt/o", &data, LOST, rng.next(), &[victim]);
    eprintln!("node_with_new_parity_killed_mid_transition: {:?}", started.elapsed());
}

#[derive(Clone, Copy, Debug)]
enum Crash {
    /// `kill -9` of meta (`weft up` then restarts it).
    Meta,
    /// SIGTERM of `weft up`: every process stops.
    Cluster,
    /// `kill -9` of `weft up`: its children get SIGTERM from the kernel.
    Up,
}

/// Meta and then the whole cluster crash at random moments of a transition: after the
/// restart the object is whole, a pending transition is visible or not, decodability holds,
/// and the same command run again completes.
#[test]
fn meta_and_cluster_crash_mid_transition() {
    let started = Instant::now();
    let mut rng = Rng::new("meta_and_cluster_crash_mid_transition");
    let mut cluster = Cluster::start(NODES, &[]);
    let data = put_object(&cluster, rng.next());
    let mut from = RS6;
    let mut leaked = BTreeSet::new();
    for (crash, to) in [(Crash::Meta, RS12), (Crash::Cluster, HH6), (Crash::Up, RS12)] {
        let before = cluster.stat("bkt/o");
        let moment = Moment::Parity(rng.between(0.0, 1.0));
        let args = to.args("bkt/o");
        let mut child = cluster.spawn_weft(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let reached = wait_for(&cluster, "bkt/o", &mut child, moment);
        match crash {
            Crash::Meta => {
                // weft up restarts meta; the transition's executor may still fail meanwhile.
                cluster.kill_meta();
            }
            Crash::Cluster => {
                let status = cluster.stop();
                assert!(status.success(), "weft up exited with {status} on SIGTERM");
            }
            Crash::Up => cluster.kill_up(),
        }
        // The executor fails (or finished first); it must not touch the next run's ports.
        let output = wait_output(child, "weft transition whose cluster crashed");
        cluster.restart();
        let committed = check_whole(&cluster, "bkt/o", &data, &from.name(), &to.name());
        let left = pending(&cluster);
        eprintln!(
            "{crash:?} crash at {moment:?} (reached {reached}) of {} -> {}: transition {}, \
             committed {committed}, pending {}; stderr: {}",
            from.name(),
            to.name(),
            output.status,
            left["pending"],
            String::from_utf8_lossy(&output.stderr).trim()
        );
        check_decodable(&cluster, "bkt/o", &data, LOST, rng.next(), &[]);
        cluster.restart();

        let (report, took) = transition(&cluster, "bkt/o", to);
        eprintln!("  run again: {took:?}, unchanged {}", report["unchanged"]);
        assert_eq!(report["unchanged"], committed, "{report}");
        let now = cluster.stat("bkt/o");
        assert_eq!(code_of(&now), to.name(), "{report}");
        assert_same(&cluster.get("bkt/o"), &data, &format!("get under {}", to.name()));
        assert_eq!(pending(&cluster)["pending"], 0);
        // Here deletes may fail for good (their nodes stopping), leaving garbage for the unit
        // sweeper: only ever parity of another generation than the object's, or the old
        // record's units after a commit — never a copy of data nobody knows of.
        if committed {
            leaked.extend(unit_places(&before).difference(&unit_places(&now)).cloned());
        }
        let mut allowed = leaked.clone();
        let generation = format!("-{:016x}", now["parity_generation"].as_u64().unwrap());
        let object_id = now["object_id"].as_str().unwrap();
        let stale_parity: BTreeSet<(u32, String)> = files_of(&cluster, object_id)
            .into_iter()
            .filter(|(_, key)| key.contains("-p") && !key.ends_with(&generation))
            .collect();
        eprintln!("  left for the sweeper: {} stale parity units", stale_parity.len());
        allowed.extend(stale_parity);
        check_files(&cluster, &now, Some(&allowed));
        from = to;
    }
    eprintln!("meta_and_cluster_crash_mid_transition: {:?}", started.elapsed());
}

/// Two executors of the same transition race (a user runs it again while the first still
/// runs; rs(6,3) to rs(10,2) on 12 nodes, so blocks must be relocated): the second begin
/// replaces the first, the first fails at its commit, and whatever the loser cleans up, the
/// winner's units — relocated data block copies included — stay where meta says.
#[test]
fn two_executors_race_with_relocations() {
    let started = Instant::now();
    let mut rng = Rng::new("two_executors_race_with_relocations");
    let cluster = Cluster::start(12, &[]);
    let data = put_object(&cluster, rng.next());
    let mut dry = RS10.args("bkt/o");
    dry.push("--dry-run".to_owned());
    let dry = cluster.weft_json(&dry.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(dry["relocated_blocks"].as_u64() > Some(0), "no relocations planned: {dry}");

    let args = RS10.args("bkt/o");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = cluster.spawn_weft(&args);
    assert!(
        wait_for(&cluster, "bkt/o", &mut first, Moment::Parity(rng.between(0.1, 0.3))),
        "the first run ended before the second could start"
    );
    let second = cluster.spawn_weft(&args);
    let (first, second) = (
        wait_output(first, "the first weft transition"),
        wait_output(second, "the second weft transition"),
    );
    eprintln!(
        "first: {}: {}; second: {}: {}",
        first.status,
        String::from_utf8_lossy(&first.stderr).trim(),
        second.status,
        String::from_utf8_lossy(&second.stderr).trim()
    );
    assert!(second.status.success(), "the newer run fails");
    let now = cluster.stat("bkt/o");
    assert_eq!(code_of(&now), "rs(10,2)");
    assert_same(&cluster.get("bkt/o"), &data, "get after the race");
    assert_eq!(pending(&cluster)["pending"], 0);
    check_files(&cluster, &now, None);
    check_decodable(&cluster, "bkt/o", &data, 2, rng.next(), &[]);
    eprintln!("two_executors_race_with_relocations: {:?}", started.elapsed());
}
