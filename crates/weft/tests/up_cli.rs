//! `weft up`, `weft status`, `weft node` and `weft bucket` as a user runs them: a real cluster
//! of processes on free ports, driven through the CLI.

use std::{net::TcpListener, process::Command, time::Duration};

use crate::common::cluster::{is_running, signal, weft_bin, Cluster};
use crate::meta_faults::{leader_pid, metas, status_of_all};
use serde_json::Value;

fn names(listed: &Value) -> Vec<String> {
    listed["buckets"]
        .as_array()
        .expect("a bucket list")
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn status_shows_every_node_and_buckets_round_trip() {
    let cluster = Cluster::start(4, &[]);
    assert_eq!(cluster.node_ids(), [1, 2, 3, 4]);

    // cluster.json says what the ready line said.
    let file = std::fs::read_to_string(cluster.dir().join("cluster.json")).unwrap();
    let file: Value = serde_json::from_str(&file).unwrap();
    assert_eq!(file["nodes"], cluster.ready()["nodes"]);
    assert_eq!(file["meta"], cluster.meta_url().as_str());
    assert_eq!(file["running"], true);
    let disk = cluster.dir().join("node-3").join("disk-0");
    assert_eq!(file["nodes"][2]["disks"][0], disk.canonicalize().unwrap().to_str().unwrap());

    let status = cluster.status();
    assert_eq!(status["nodes_up"], 4, "{status}");
    assert_eq!(status["nodes_down"], 0, "{status}");
    for node in status["nodes"].as_array().unwrap() {
        let id = node["id"].as_u64().unwrap() as u32;
        assert_eq!(node["state"], "up", "{node}");
        assert_eq!(node["pid"], cluster.node_pid(id), "{node}");
        assert_eq!(node["endpoint"], cluster.node_endpoint(id).as_str(), "{node}");
        assert_eq!(node["disks"].as_array().unwrap().len(), 1, "{node}");
    }
    assert!(status["under_protected_units"].is_u64(), "{status}");
    assert!(status["repair_queue"].is_u64(), "{status}");
    let human = cluster.weft(&["status"]);
    assert!(human.status.success());
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(human.contains("4 nodes up, 0 down"), "{human}");
    assert!(human.contains(&cluster.node_endpoint(2)), "{human}");

    // Create with meta's default policy (the widest default 4 nodes hold: rs(6,3) needs 9,
    // rs(4,2) 6), and with a policy from flags.
    let created = cluster.weft_json(&["bucket", "create", "photos", "--json"]);
    assert_eq!(created["name"], "photos");
    assert_eq!(created["default_policy"]["code"], "rs(2,1)");
    let small = [
        "bucket",
        "create",
        "small",
        "--code",
        "rs",
        "--k",
        "2",
        "--r",
        "1",
        "--stripe-width",
        "2",
        "--cell",
        "64KiB",
        "--block",
        "256KiB",
        "--json",
    ];
    let created = cluster.weft_json(&small);
    let policy = &created["default_policy"];
    assert_eq!(policy["code"], "rs(2,1)", "{created}");
    assert_eq!(
        (policy["cell_bytes"].as_u64(), policy["block_bytes"].as_u64()),
        (Some(65536), Some(262144))
    );

    // Refusals carry meta's message (or the code parser's) and leave nothing behind.
    let duplicate = cluster.weft_fails(&["bucket", "create", "photos"]);
    assert!(
        duplicate.contains("bucket_exists") && duplicate.contains("already exists"),
        "{duplicate}"
    );
    let zero_k = cluster.weft_fails(&["bucket", "create", "zero", "--k", "0"]);
    assert!(zero_k.contains("k must be at least 1"), "{zero_k}");
    let bad_block = cluster.weft_fails(&["bucket", "create", "odd", "--cell", "3MiB"]);
    assert!(
        bad_block.contains("invalid_policy") && bad_block.contains("multiple of the cell"),
        "{bad_block}"
    );
    let bad_name = cluster.weft_fails(&["bucket", "create", "Bad_Name"]);
    assert!(bad_name.contains("invalid_name"), "{bad_name}");
    // S3's naming rule: a new bucket's name is 3 to 63 characters.
    let short_name = cluster.weft_fails(&["bucket", "create", "x"]);
    assert!(
        short_name.contains("invalid_name") && short_name.contains("3 to 63 characters"),
        "{short_name}"
    );
    assert_eq!(names(&cluster.weft_json(&["bucket", "ls", "--json"])), ["photos", "small"]);
    let listed = String::from_utf8(cluster.weft(&["bucket", "ls"]).stdout).unwrap();
    assert!(listed.contains("photos") && listed.contains("rs(2,1)"), "{listed}");

    let removed = cluster.weft_json(&["bucket", "rm", "photos", "--json"]);
    assert_eq!(removed["removed"], "photos");
    assert_eq!(names(&cluster.weft_json(&["bucket", "ls", "--json"])), ["small"]);
    let gone = cluster.weft_fails(&["bucket", "rm", "photos"]);
    assert!(gone.contains("no_such_bucket"), "{gone}");

    // A second `weft up` on the same directory is refused while this one runs.
    let dir = cluster.dir();
    let second = Command::new(weft_bin())
        .args(["up", "--dir", dir.to_str().unwrap(), "--meta-listen", "127.0.0.1:0"])
        .args(crate::common::cluster::HOST_FILL_IGNORED)
        .output()
        .unwrap();
    assert!(!second.status.success());
    let second = String::from_utf8_lossy(&second.stderr);
    assert!(second.contains("already running"), "{second}");

    // No meta there: the error says how to get one.
    let output = cluster.weft(&["status", "--meta", "http://127.0.0.1:1"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach meta at http://127.0.0.1:1") && stderr.contains("weft up"),
        "{stderr}"
    );
}

#[test]
fn killed_nodes_go_down_and_a_restart_brings_everything_back() {
    let mut cluster = Cluster::start(4, &["--down-after-ms", "1500", "--heartbeat-ms", "300"]);
    let pid_2 = cluster.node_pid(2);

    let killed = cluster.weft_json(&["node", "kill", "2", "--json"]);
    assert_eq!(
        (killed["node"].as_u64(), killed["pid"].as_u64()),
        (Some(2), Some(u64::from(pid_2)))
    );
    assert_eq!(
        (killed["signal"].as_str(), killed["exited"].as_bool()),
        (Some("SIGKILL"), Some(true))
    );
    let event = cluster.wait_for_event("node 2 exited", |e| e["event"] == "exited");
    assert_eq!((event["id"].as_u64(), event["pid"].as_u64()), (Some(2), Some(u64::from(pid_2))));
    let two_down = |s: &Value| {
        Cluster::states(s)
            == [(1, "up".into()), (2, "down".into()), (3, "up".into()), (4, "up".into())]
    };
    cluster.wait_for_status("node 2 down, the others up", two_down);
    assert!(cluster.up_is_running(), "weft up must keep running when a node dies");

    // Drills refuse what they cannot do.
    let again = cluster.weft_fails(&["node", "kill", "2"]);
    assert!(again.contains("not running"), "{again}");
    let unknown = cluster.weft_fails(&["node", "stop", "9"]);
    assert!(unknown.contains("knows no node 9"), "{unknown}");

    let stopped = cluster.weft_json(&["node", "stop", "3", "--json"]);
    assert_eq!(
        (stopped["signal"].as_str(), stopped["exited"].as_bool()),
        (Some("SIGTERM"), Some(true))
    );
    cluster.wait_for_status("node 3 down", |s| s["nodes_down"] == 2);
    cluster.weft_json(&["bucket", "create", "kept", "--k", "2", "--r", "1", "--json"]);

    // SIGTERM stops everything and exits 0; a restart on the same directory brings back the
    // same nodes (ids, disks), every one up, and the bucket.
    let old_pids = cluster.child_pids_now();
    let old_nodes = cluster.ready()["nodes"].clone();
    let status = cluster.stop();
    assert!(status.success(), "weft up exited with {status}");
    for pid in &old_pids {
        assert!(!is_running(*pid), "pid {pid} outlived weft up");
    }
    cluster.restart();
    assert_eq!(cluster.node_ids(), [1, 2, 3, 4]);
    for (old, new) in
        old_nodes.as_array().unwrap().iter().zip(cluster.ready()["nodes"].as_array().unwrap())
    {
        assert_eq!(old["disks"], new["disks"]);
        assert_ne!(old["pid"], new["pid"]);
    }
    let status = cluster.status();
    assert_eq!(status["nodes_up"], 4, "{status}");
    for node in status["nodes"].as_array().unwrap() {
        assert_eq!(node["pid"], cluster.node_pid(node["id"].as_u64().unwrap() as u32), "{node}");
    }
    let listed = cluster.weft_json(&["bucket", "ls", "--json"]);
    assert_eq!(names(&listed), ["kept"]);
    assert_eq!(listed["buckets"][0]["default_policy"]["code"], "rs(2,1)");
}

#[test]
fn twelve_nodes_are_ready_fast_and_ctrl_c_leaves_no_process() {
    let mut cluster = Cluster::start(12, &[]);
    assert_eq!(cluster.node_ids(), (1..=12).collect::<Vec<u32>>());
    assert!(
        cluster.ready_after() < Duration::from_secs(10),
        "12 nodes took {:?} to be ready",
        cluster.ready_after()
    );
    assert_eq!(cluster.status()["nodes_up"], 12);

    let pids = cluster.child_pids_now();
    assert_eq!(pids.len(), 13 + usize::from(!cluster.ready()["repair"].is_null()));
    let status = cluster.stop_with(libc::SIGINT);
    assert!(status.success(), "weft up exited with {status} on SIGINT");
    for pid in pids {
        assert!(!is_running(pid), "pid {pid} outlived weft up");
    }
    let file = std::fs::read_to_string(cluster.dir().join("cluster.json")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&file).unwrap()["running"], false);
}

#[test]
fn a_child_that_cannot_start_is_named_with_its_log() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let output = Command::new(weft_bin())
        .args(["up", "--nodes", "1", "--meta-listen", &listen, "--dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("meta (pid"), "{stderr}");
    assert!(stderr.contains("meta.log") && stderr.contains(&listen), "{stderr}");
}

/// Deterministic bytes that differ at every offset of a block, so a misplaced cell shows.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + i / 251) as u8) ^ seed).collect()
}

/// `weft put` of `data` to `path`, `weft get` back byte-identical; returns `weft stat --json`.
fn put_get_stat(cluster: &Cluster, files: &std::path::Path, path: &str, data: &[u8]) -> Value {
    let input = files.join("in");
    std::fs::write(&input, data).unwrap();
    let put = cluster.weft_json(&["put", input.to_str().unwrap(), path, "--json"]);
    assert_eq!(put["size"], data.len() as u64, "{put}");
    let output = files.join("out");
    cluster.weft_json(&["get", path, "-o", output.to_str().unwrap(), "--json"]);
    let got = std::fs::read(&output).unwrap();
    assert!(got == data, "get {path}: {} bytes back, not the {} put", got.len(), data.len());
    cluster.weft_json(&["stat", path, "--json"])
}

/// Each group of a stat as the `where_of` of its units (e.g. (node, disk) or rack).
fn groups_by<T: Ord + std::fmt::Debug>(
    stat: &Value,
    where_of: impl Fn(&Value) -> T,
) -> Vec<Vec<T>> {
    let units = stat["units"].as_array().expect("stat lists units");
    let groups = stat["groups"].as_array().expect("stat lists groups");
    assert!(!groups.is_empty(), "{stat}");
    groups
        .iter()
        .map(|group| {
            group["units"]
                .as_array()
                .unwrap()
                .iter()
                .map(|name| {
                    let unit = units.iter().find(|u| u["unit"] == *name).unwrap();
                    assert!(unit["node_id"].is_u64() && unit["disk"].is_u64(), "{unit}");
                    where_of(unit)
                })
                .collect()
        })
        .collect()
}

fn is_distinct<T: Ord + Clone>(items: &[T]) -> bool {
    items.iter().cloned().collect::<std::collections::BTreeSet<T>>().len() == items.len()
}

#[test]
fn failure_domain_disk_keeps_a_group_on_distinct_disks_of_three_nodes() {
    let cluster = Cluster::start(3, &["--disks-per-node", "3", "--failure-domain", "disk"]);
    let stderr = cluster.up_stderr();
    assert!(!stderr.contains("enforced"), "no 'not enforced' warning any more: {stderr}");
    assert_eq!(cluster.ready()["failure_domain"], "disk");
    assert_eq!(cluster.ready()["enforced_failure_domain"], "disk");
    assert_eq!(cluster.status()["failure_domain"], "disk");
    let files = tempfile::tempdir().unwrap();

    // rs(4,2) needs 6 domains: 3 nodes are too few, their 9 disks are not.
    let bucket = ["bucket", "create", "bkt", "--k", "4", "--r", "2", "--cell", "4KiB"];
    cluster.weft_json(&[&bucket[..], &["--block", "16KiB", "--json"]].concat());
    let data = pattern(13 * 16384 + 5000, 7);
    let stat = put_get_stat(&cluster, files.path(), "bkt/photo.jpg", &data);
    let groups =
        groups_by(&stat, |u| (u["node_id"].as_u64().unwrap(), u["disk"].as_u64().unwrap()));
    assert_eq!(groups.len(), 4, "14 blocks in groups of 4: {stat}");
    for group in &groups {
        assert!(is_distinct(group), "a group shares a disk: {group:?} in {stat}");
    }
    let full = &groups[0];
    assert_eq!(full.len(), 6);
    let nodes: Vec<u64> = full.iter().map(|(node, _)| *node).collect();
    assert!(!is_distinct(&nodes), "6 units on 3 nodes share nodes: {full:?}");

    // rs(6,3) on exactly 9 disks.
    cluster.weft_json(&["bucket", "create", "wide", "--k", "6", "--r", "3", "--json"]);
    let data = pattern(3 << 20, 9);
    let stat = put_get_stat(&cluster, files.path(), "wide/big.bin", &data);
    for group in groups_by(&stat, |u| (u["node_id"].as_u64().unwrap(), u["disk"].as_u64().unwrap()))
    {
        assert!(is_distinct(&group), "a group shares a disk: {group:?} in {stat}");
    }
}

#[test]
fn failure_domain_rack_keeps_a_group_in_distinct_racks() {
    let cluster = Cluster::start(6, &["--racks", "3", "--failure-domain", "rack"]);
    let status = cluster.status();
    assert_eq!(status["failure_domain"], "rack", "{status}");
    // Node i is in rack (i - 1) % 3, in meta and in cluster.json.
    let rack_of: std::collections::BTreeMap<u64, u64> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_u64().unwrap(), n["rack"].as_u64().expect("a rack")))
        .collect();
    assert_eq!(rack_of, (1..=6).map(|id| (id, (id - 1) % 3)).collect());
    for node in cluster.ready()["nodes"].as_array().unwrap() {
        assert_eq!(node["rack"].as_u64(), Some((node["id"].as_u64().unwrap() - 1) % 3), "{node}");
    }
    let human = String::from_utf8(cluster.weft(&["status"]).stdout).unwrap();
    assert!(human.contains("failure domain: rack") && human.contains("RACK"), "{human}");

    let files = tempfile::tempdir().unwrap();
    let bucket = ["bucket", "create", "racks", "--k", "2", "--r", "1", "--cell", "4KiB"];
    cluster.weft_json(&[&bucket[..], &["--block", "16KiB", "--json"]].concat());
    let data = pattern(10 * 16384, 3);
    let stat = put_get_stat(&cluster, files.path(), "racks/cat.jpg", &data);
    let groups = groups_by(&stat, |u| rack_of[&u["node_id"].as_u64().unwrap()]);
    assert_eq!(groups.len(), 5, "{stat}");
    for group in groups {
        assert_eq!(group.len(), 3);
        assert!(is_distinct(&group), "a group shares a rack: {group:?} in {stat}");
    }
}

/// The service of `role` (and node `id`, for nodes) in a status's `services`.
fn service(status: &Value, role: &str, id: Option<u32>) -> Value {
    let services = status["services"].as_array().unwrap_or_else(|| panic!("no services: {status}"));
    services
        .iter()
        .find(|s| s["role"] == role && s["id"].as_u64() == id.map(u64::from))
        .unwrap_or_else(|| panic!("no {role} service in {status}"))
        .clone()
}

/// SIGKILLs the service `role` (`id` for a node) and waits until `weft status --json` shows
/// it running again with a new pid; returns that service entry.
fn kill_and_see_restarted(cluster: &Cluster, role: &str, id: Option<u32>) -> Value {
    let before = service(&cluster.status(), role, id);
    assert_eq!(before["state"], "running", "{before}");
    let pid = before["pid"].as_u64().unwrap() as u32;
    assert!(signal(pid, libc::SIGKILL), "{role} (pid {pid}) was not running");
    let restarts = before["restarts"].as_u64().unwrap() + 1;
    let status = cluster.wait_for_answering_status(&format!("{role} restarted"), |status| {
        let now = service(status, role, id);
        now["state"] == "running" && now["restarts"] == restarts && now["pid"] != pid
    });
    let after = service(&status, role, id);
    assert_eq!(after["last_exit"], "killed by signal 9 (SIGKILL)", "{after}");
    let new_pid = after["pid"].as_u64().unwrap() as u32;
    assert!(is_running(new_pid), "{role}'s new pid {new_pid} does not run: {after}");
    assert!(!is_running(pid), "{role}'s old pid {pid} still runs");
    after
}

#[test]
fn dead_children_are_restarted_and_status_shows_each_service() {
    let cluster = Cluster::start(3, &["--heartbeat-ms", "300"]);
    assert!(!cluster.ready()["repair"].is_null(), "this weft has a repair executor");
    let status = cluster.status();
    let roles: Vec<(String, Option<u64>)> = status["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["role"].as_str().unwrap().to_owned(), s["id"].as_u64()))
        .collect();
    let want: Vec<(String, Option<u64>)> = [
        ("meta", None),
        ("node", Some(1)),
        ("node", Some(2)),
        ("node", Some(3)),
        ("repair", None),
        ("s3", None),
    ]
    .iter()
    .map(|(role, id)| (role.to_string(), *id))
    .collect();
    assert_eq!(roles, want, "{status}");
    for entry in status["services"].as_array().unwrap() {
        assert_eq!(entry["state"], "running", "{entry}");
        assert_eq!(entry["restarts"], 0, "{entry}");
        assert!(entry["last_exit"].is_null(), "{entry}");
    }
    assert_eq!(service(&status, "meta", None)["pid"], cluster.ready()["meta_pid"]);

    // The repair executor and the gateway die: weft up starts them again.
    kill_and_see_restarted(&cluster, "repair", None);
    let s3 = kill_and_see_restarted(&cluster, "s3", None);
    assert_eq!(s3["endpoint"], cluster.ready()["s3"]["endpoint"], "same address: {s3}");
    let address = s3["endpoint"].as_str().unwrap().trim_start_matches("http://");
    assert!(std::net::TcpStream::connect(address).is_ok(), "the gateway listens on {address}");

    // A node that dies by itself (no drill) comes back and is up in meta.
    let node = kill_and_see_restarted(&cluster, "node", Some(2));
    cluster.wait_for_status("node 2 up with its new pid", |status| {
        let two = status["nodes"].as_array().unwrap().iter().find(|n| n["id"] == 2).cloned();
        two.is_some_and(|n| n["state"] == "up" && n["pid"] == node["pid"])
    });

    // Meta too, on the same address: the cluster serves again.
    let meta = kill_and_see_restarted(&cluster, "meta", None);
    assert_eq!(meta["endpoint"], cluster.meta_url().as_str());
    cluster.weft_json(&["bucket", "create", "after", "--k", "2", "--r", "1", "--json"]);

    // The events said so; cluster.json has the same table; the human status shows it.
    let file = cluster.cluster_file();
    assert_eq!(service(&file, "meta", None)["restarts"], 1, "{file}");
    assert_eq!(file["meta_pid"], meta["pid"], "{file}");
    let human = String::from_utf8(cluster.weft(&["status"]).stdout).unwrap();
    assert!(human.contains("SERVICE") && human.contains("repair executor"), "{human}");
    assert!(human.contains("killed by signal 9 (SIGKILL)"), "{human}");

    // A drill holds a node down: `weft node kill` is not undone.
    let killed = cluster.weft_json(&["node", "kill", "3", "--json"]);
    assert_eq!(killed["exited"], true, "{killed}");
    let held =
        cluster.wait_for_status("node 3 held", |s| service(s, "node", Some(3))["state"] == "held");
    assert_eq!(service(&held, "node", Some(3))["restarts"], 0, "{held}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(service(&cluster.status(), "node", Some(3))["state"], "held");
}

#[test]
fn a_gateway_that_cannot_start_is_retried_until_its_port_is_free() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let cluster = Cluster::start(1, &["--s3-listen", &listen]);
    assert!(cluster.up_stderr().contains("S3 gateway did not start"), "{}", cluster.up_stderr());
    let failing = cluster.wait_for_status("the gateway retried", |s| {
        let s3 = service(s, "s3", None);
        s3["state"] != "running" && s3["restarts"].as_u64() >= Some(1)
    });
    let s3 = service(&failing, "s3", None);
    assert_eq!(s3["last_exit"], "exit status 1", "{s3}");
    drop(taken);
    let serving =
        cluster.wait_for_status_within("the gateway running", Duration::from_secs(60), |s| {
            service(s, "s3", None)["state"] == "running"
        });
    let s3 = service(&serving, "s3", None);
    assert_eq!(s3["endpoint"], format!("http://{listen}").as_str(), "{s3}");
    assert!(std::net::TcpStream::connect(&listen).is_ok(), "the gateway listens on {listen}");
    // Its endpoint and access key are where a client looks for them.
    let s3_file = std::fs::read_to_string(cluster.dir().join("s3.json")).expect("s3.json");
    let s3_file: Value = serde_json::from_str(&s3_file).unwrap();
    assert_eq!(s3_file["endpoint"], format!("http://{listen}").as_str(), "{s3_file}");
    assert!(s3_file["access_key"].is_string(), "{s3_file}");
}

/// Whether PostgreSQL's server programs are here (else the test says why it skips; CI sets
/// WEFT_REQUIRE_POSTGRES=1 when it installed them, and then a skip is a failure).
pub(crate) fn postgres_here() -> bool {
    match weft_meta::pg_local::server_programs() {
        Ok(_) => true,
        Err(why) if std::env::var("WEFT_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => {
            panic!("WEFT_REQUIRE_POSTGRES=1 but {why}")
        }
        Err(why) => {
            eprintln!("skipping: {why}");
            false
        }
    }
}

#[test]
fn meta_on_postgres_survives_its_own_death_and_a_cluster_restart() {
    if !postgres_here() {
        return;
    }
    let mut cluster = Cluster::start(4, &["--meta-store", "postgres", "--heartbeat-ms", "300"]);
    let ready = cluster.ready().clone();
    assert_eq!(ready["meta_store"], "postgres", "{ready}");
    let port = ready["postgres"]["port"].as_u64().unwrap_or_else(|| panic!("{ready}"));
    // Meta keeps no redb file: its records are in the cluster's PostgreSQL.
    assert!(!cluster.dir().join("meta/meta.redb").exists());
    // Meta's command line (which `ps` shows) holds no password; its environment does.
    let meta_pid = cluster.meta_pid();
    let cmdline = std::fs::read(format!("/proc/{meta_pid}/cmdline")).unwrap();
    let password =
        std::fs::read_to_string(cluster.dir().join("postgres/password")).unwrap().trim().to_owned();
    assert!(password.len() >= 32, "a generated password");
    assert!(!String::from_utf8_lossy(&cmdline).contains(&password));
    assert!(!cluster.up_stderr().contains(&password), "never printed");

    cluster.create_bucket("pgb", &["--k", "2", "--r", "1"]);
    let first = pattern(3 << 20, 7);
    cluster.put_bytes("pgb/first", &first);
    // Meta dies: weft up starts it again, on the same database.
    kill_and_see_restarted(&cluster, "meta", None);
    assert_eq!(cluster.get("pgb/first"), first);
    let second = pattern(1 << 20, 9);
    cluster.put_bytes("pgb/second", &second);

    // The whole cluster stops (PostgreSQL too) and starts again on its directory:
    // everything is there.
    cluster.stop();
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port as u16)).is_err(),
        "PostgreSQL stopped with the cluster"
    );
    cluster.restart();
    assert_eq!(cluster.ready()["meta_store"], "postgres");
    assert_eq!(cluster.get("pgb/first"), first);
    assert_eq!(cluster.get("pgb/second"), second);
    let listed = cluster.weft_json(&["ls", "pgb", "--json"]);
    assert_eq!(listed["objects"].as_array().map(Vec::len), Some(2), "{listed}");
}

#[test]
fn a_killed_leader_meta_is_replaced_within_two_leases_and_no_put_is_lost() {
    if !postgres_here() {
        return;
    }
    let cluster = Cluster::start(
        4,
        &["--meta-store", "postgres", "--meta-replicas", "2", "--heartbeat-ms", "300"],
    );
    let all = metas(&cluster, 2);
    let status = cluster.wait_for_answering_status("two metas, one leading", |s| {
        s["meta"].as_array().map_or(0, Vec::len) == 2 && leader_pid(s).is_some()
    });
    let leader = leader_pid(&status).unwrap();
    cluster.create_bucket("hab", &["--k", "2", "--r", "1"]);

    // A writer puts objects through both metas while the leader is killed.
    let dir = cluster.dir();
    let writer = {
        let (all, secret, dir) = (all.clone(), cluster.secret_file(), dir.clone());
        std::thread::spawn(move || {
            let mut acknowledged = Vec::new();
            for i in 0..24u8 {
                let file = dir.join(format!("ha-{i}"));
                std::fs::write(&file, pattern(200_000 + usize::from(i) * 1000, i)).unwrap();
                let put = Command::new(weft_bin())
                    .args(["put", file.to_str().unwrap(), &format!("hab/obj-{i}"), "--meta", &all])
                    .env("WEFT_SECRET_FILE", &secret)
                    .output()
                    .unwrap();
                if put.status.success() {
                    acknowledged.push(i);
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            acknowledged
        })
    };
    std::thread::sleep(Duration::from_millis(800));
    assert!(signal(leader as u32, libc::SIGKILL), "the leader (pid {leader}) was running");
    let killed_at = std::time::Instant::now();
    let lease = Duration::from_millis(weft_meta::service::DEFAULT_LEASE_MS);
    loop {
        // While a meta restarts, a command may reach it as it dies: such an answer is skipped.
        let status = status_of_all(&cluster, &all);
        if leader_pid(&status).is_some_and(|pid| pid != leader) {
            break;
        }
        assert!(killed_at.elapsed() < 2 * lease, "no new leader within two leases: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let took_over = killed_at.elapsed();
    let acknowledged = writer.join().unwrap();
    assert!(acknowledged.len() >= 20, "most puts succeed through the kill: {acknowledged:?}");
    for i in acknowledged {
        let get = Command::new(weft_bin())
            .args(["get", &format!("hab/obj-{i}"), "--meta", &all])
            .env("WEFT_SECRET_FILE", cluster.secret_file())
            .output()
            .unwrap();
        assert!(get.status.success(), "{}", String::from_utf8_lossy(&get.stderr));
        assert_eq!(get.stdout, pattern(200_000 + usize::from(i) * 1000, i), "object {i}");
    }
    eprintln!("a new leader within {took_over:?} of the kill (lease {lease:?})");
}
