//! Faults of the metadata tier under `weft up --meta-store postgres`, driven through the CLI
//! on a real cluster: the meta replica holding the leader lease killed (SIGKILL) while repairs
//! run, and PostgreSQL crashing and restarting under puts.
//!
//! What must hold: another replica leads within two leases; every repair lands exactly once
//! (each unit of the dead node is on a live node, and the live disks hold exactly the units
//! meta names: gc finds nothing to collect); a put fails with a clear error or succeeds, and
//! an object meta lists is always whole.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::cluster::{poll_until, signal, weft_bin, Cluster};
use crate::up_cli::{pattern, postgres_here};

/// `weft ARGS` against every meta of the cluster (`WEFT_META` as a comma list).
fn weft_all(cluster: &Cluster, all: &str, args: &[&str]) -> Output {
    Command::new(weft_bin())
        .args(args)
        .env("WEFT_META", all)
        .env("WEFT_SECRET_FILE", cluster.secret_file())
        .stdin(Stdio::null())
        .output()
        .expect("weft runs")
}

/// `weft ARGS --json` against every meta, asserted to succeed.
fn json_all(cluster: &Cluster, all: &str, args: &[&str]) -> Value {
    let output = weft_all(cluster, all, args);
    assert!(output.status.success(), "weft {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("weft {args:?}: {e}"))
}

/// `weft status --json` through any meta that answers (`Null` while none does).
pub(crate) fn status_of_all(cluster: &Cluster, all: &str) -> Value {
    let output = weft_all(cluster, all, &["status", "--json"]);
    serde_json::from_slice::<Value>(&output.stdout).unwrap_or(Value::Null)
}

/// The pid of the meta holding the leader lease, if one does; never two.
pub(crate) fn leader_pid(status: &Value) -> Option<u64> {
    let leaders: Vec<u64> = status["meta"]
        .as_array()?
        .iter()
        .filter(|m| m["leader"] == true)
        .map(|m| m["pid"].as_u64().unwrap())
        .collect();
    assert!(leaders.len() <= 1, "two leaders: {status}");
    leaders.first().copied()
}

/// The metas' endpoints as one comma list, after checking there are `replicas`.
pub(crate) fn metas(cluster: &Cluster, replicas: usize) -> String {
    let metas: Vec<String> = cluster.ready()["metas"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", cluster.ready()))
        .iter()
        .map(|m| m["endpoint"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(metas.len(), replicas, "{}", cluster.ready());
    metas.join(",")
}

/// Polls until `want` holds of `weft status --json` (through any meta), at most `timeout`.
fn wait_status(
    cluster: &Cluster,
    all: &str,
    what: &str,
    timeout: Duration,
    want: impl Fn(&Value) -> bool,
) -> Value {
    poll_until(what, timeout, || status_of_all(cluster, all), want)
}

/// (node id, unit key) of every unit of a `weft stat --json`.
fn placed(stat: &Value) -> Vec<(u32, String)> {
    stat["units"]
        .as_array()
        .unwrap_or_else(|| panic!("stat lists units: {stat}"))
        .iter()
        .map(|u| {
            (u["node_id"].as_u64().unwrap() as u32, u["unit_key"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Three metas on PostgreSQL, six nodes, rs(2,1). A node dies and stays down; as soon as the
/// leader has queued its repairs, the leader is killed with SIGKILL, and the next leader once
/// repairs are under way. Another meta leads within two leases each time, every repair lands
/// once, every object reads back, and the live disks hold exactly the units meta names
/// (nothing for gc).
#[test]
fn a_leader_killed_during_repairs_loses_no_repair_and_leaves_no_extra_unit() {
    if !postgres_here() {
        return;
    }
    let cluster = Cluster::start(
        6,
        &[
            "--meta-store",
            "postgres",
            "--meta-replicas",
            "3",
            "--heartbeat-ms",
            "300",
            "--down-after-ms",
            "1500",
            // Repairs last seconds, not a blink: the kills land while they run.
            "--repair-rate",
            "3MiB",
        ],
    );
    let all = metas(&cluster, 3);
    wait_status(&cluster, &all, "three metas, one leading", Duration::from_secs(20), |s| {
        s["meta"].as_array().map_or(0, Vec::len) == 3 && leader_pid(s).is_some()
    });
    cluster.create_bucket("rep", &["--k", "2", "--r", "1"]);
    let objects: BTreeMap<String, Vec<u8>> = (0..40usize)
        .map(|i| (format!("rep/obj-{i:02}"), pattern(1_500_000 + i * 4099, i as u8)))
        .collect();
    for (path, data) in &objects {
        cluster.put_bytes(path, data);
    }

    // The node holding the most units dies, and stays down (a drill's kill is not undone).
    let mut per_node: BTreeMap<u32, usize> = BTreeMap::new();
    for path in objects.keys() {
        for (node, _) in placed(&cluster.stat(path)) {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let (&victim, &lost) = per_node.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(lost >= 10, "units per node: {per_node:?}");
    let killed = json_all(&cluster, &all, &["node", "kill", &victim.to_string(), "--json"]);
    assert_eq!(killed["exited"], true, "{killed}");

    // Once meta judged the node down and the leader queued its repairs, the leader dies.
    let status = wait_status(&cluster, &all, "repairs queued", Duration::from_secs(30), |s| {
        s["repair_queue"].as_u64().is_some_and(|q| q > 0) && leader_pid(s).is_some()
    });
    let leader = leader_pid(&status).unwrap();
    assert!(signal(leader as u32, libc::SIGKILL), "the leader (pid {leader}) was running");
    let killed_at = Instant::now();
    eprintln!("leader {leader} killed with {} repairs queued of {lost}", status["repair_queue"]);
    let lease = Duration::from_millis(weft_meta::service::DEFAULT_LEASE_MS);
    wait_status(&cluster, &all, "another leader", 2 * lease, |s| {
        leader_pid(s).is_some_and(|pid| pid != leader)
    });
    eprintln!("a new leader {:?} after the kill (lease {lease:?})", killed_at.elapsed());

    // The new leader dies too, once repairs are under way (when they have not all finished
    // by then): the executor's completions go to metas that die under them.
    let queued = status["repair_queue"].as_u64().unwrap();
    let status = wait_status(&cluster, &all, "repairs under way", Duration::from_secs(60), |s| {
        s["repair_queue"].as_u64().is_some_and(|q| q < queued) && leader_pid(s).is_some()
    });
    if status["repair_queue"].as_u64() > Some(0) {
        let second = leader_pid(&status).unwrap();
        assert!(signal(second as u32, libc::SIGKILL), "the leader (pid {second}) was running");
        eprintln!("leader {second} killed with {} repairs queued", status["repair_queue"]);
        wait_status(&cluster, &all, "a third leader", 2 * lease, |s| {
            leader_pid(s).is_some_and(|pid| pid != second)
        });
    } else {
        eprintln!("every repair was done before the second kill");
    }

    // Every unit of the dead node is rebuilt on a live one.
    let deadline = Instant::now() + Duration::from_secs(120);
    let stats: BTreeMap<String, Value> = loop {
        let status = status_of_all(&cluster, &all);
        let queue_empty = status["repair_queue"].as_u64() == Some(0);
        if queue_empty {
            let stats: BTreeMap<String, Value> = objects
                .keys()
                .map(|p| (p.clone(), json_all(&cluster, &all, &["stat", p, "--json"])))
                .collect();
            let left = stats.values().flat_map(placed).filter(|(n, _)| *n == victim).count();
            if left == 0 {
                break stats;
            }
        }
        assert!(Instant::now() < deadline, "repairs did not finish: {status}");
        std::thread::sleep(Duration::from_millis(300));
    };

    // Each object reads back whole, its units on distinct live nodes.
    let files = tempfile::tempdir().unwrap();
    for (path, data) in &objects {
        let out = files.path().join("out");
        json_all(&cluster, &all, &["get", path, "-o", out.to_str().unwrap(), "--json"]);
        assert!(std::fs::read(&out).unwrap() == *data, "{path} read back other bytes");
        let nodes: BTreeSet<u32> = placed(&stats[path]).into_iter().map(|(n, _)| n).collect();
        assert_eq!(nodes.len(), 3, "{path}: units share a node: {}", stats[path]);
        for unit in stats[path]["units"].as_array().unwrap() {
            assert_eq!(unit["state"], "up", "{path}: {unit}");
        }
    }

    // The live disks hold exactly the units meta names: no repair wrote a copy twice, no
    // copy meta names was deleted.
    let named: BTreeSet<(u32, String)> = stats.values().flat_map(placed).collect();
    let on_disks: BTreeSet<(u32, String)> = cluster
        .unit_keys_on_disks()
        .into_iter()
        .filter(|(node, _)| *node != victim)
        .flat_map(|(node, keys)| keys.into_iter().map(move |k| (node, k)))
        .collect();
    let extra: Vec<_> = on_disks.difference(&named).collect();
    let missing: Vec<_> = named.difference(&on_disks).collect();
    assert!(extra.is_empty() && missing.is_empty(), "extra {extra:?}, missing {missing:?}");
    let gc = json_all(&cluster, &all, &["gc", "--grace", "0", "--json"]);
    assert_eq!((gc["unreferenced"].as_u64(), gc["deleted"].as_u64()), (Some(0), Some(0)), "{gc}");
    assert_eq!(gc["nodes_scanned"], 5, "{gc}");
}

/// The pids of the client backends (role `weft`) of this cluster's PostgreSQL: children of
/// the postmaster named in its data directory (other tests run servers of their own).
fn weft_backends(cluster: &Cluster) -> Vec<u32> {
    let pid_file = cluster.dir().join("postgres/data/postmaster.pid");
    let postmaster: u32 = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
        .lines()
        .next()
        .and_then(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {}", pid_file.display()));
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The parent pid is the second field after the command's closing parenthesis.
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| {
            rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok())
        });
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if parent == Some(postmaster)
            && String::from_utf8_lossy(&cmdline).starts_with("postgres: weft ")
        {
            pids.push(pid);
        }
    }
    pids
}

/// One meta on PostgreSQL; a writer puts objects while the server crashes three times (a
/// backend killed with SIGKILL: PostgreSQL ends every session and recovers from its WAL, as
/// after a crash). Each put succeeds or fails with a clear error; every object listed reads
/// back whole, with the bytes of one of its puts; puts succeed again once the server is
/// back; gc then collects the leftovers of failed puts, and every object stays whole.
#[test]
fn puts_across_postgres_crash_restarts_fail_clearly_or_land_whole() {
    if !postgres_here() {
        return;
    }
    let cluster = Cluster::start(4, &["--meta-store", "postgres", "--heartbeat-ms", "300"]);
    let all = metas(&cluster, 1);
    cluster.create_bucket("pgr", &["--k", "2", "--r", "1"]);
    let data_of = |i: usize| pattern(150_000 + i * 1000, i as u8);
    let writer = {
        let (all, secret, dir) = (all.clone(), cluster.secret_file(), cluster.dir());
        std::thread::spawn(move || {
            let mut outcomes = Vec::new();
            for i in 0..60usize {
                let file = dir.join(format!("pgr-{i}"));
                std::fs::write(&file, pattern(150_000 + i * 1000, i as u8)).unwrap();
                let put = Command::new(weft_bin())
                    .args(["put", file.to_str().unwrap(), &format!("pgr/obj-{i:02}")])
                    .env("WEFT_META", &all)
                    .env("WEFT_SECRET_FILE", &secret)
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                outcomes.push((i, put));
                std::thread::sleep(Duration::from_millis(40));
            }
            outcomes
        })
    };
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        let backends = weft_backends(&cluster);
        assert!(!backends.is_empty(), "meta keeps sessions open on PostgreSQL");
        assert!(signal(backends[0], libc::SIGKILL), "backend {} was running", backends[0]);
    }
    let outcomes = writer.join().unwrap();

    let password = std::fs::read_to_string(cluster.dir().join("postgres/password")).unwrap();
    let mut failed = Vec::new();
    for (i, put) in &outcomes {
        let stderr = String::from_utf8_lossy(&put.stderr);
        if !put.status.success() {
            // The error names what failed, and never the database's password.
            assert!(
                stderr.contains("PostgreSQL") || stderr.contains("meta"),
                "put {i} failed without a clear cause: {stderr}"
            );
            assert!(!stderr.contains(password.trim()), "put {i} printed the password");
            if failed.is_empty() {
                eprintln!("the first failed put said: {stderr}");
            }
            failed.push(*i);
        }
    }
    eprintln!("{} of {} puts failed across the crashes: {failed:?}", failed.len(), outcomes.len());

    // Puts succeed again once the server has recovered.
    let file = cluster.dir().join("after");
    std::fs::write(&file, data_of(99)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !weft_all(&cluster, &all, &["put", file.to_str().unwrap(), "pgr/obj-99"]).status.success()
    {
        assert!(Instant::now() < deadline, "puts still fail 30 s after the last crash");
        std::thread::sleep(Duration::from_millis(500));
    }

    // Every object meta lists is whole; every acknowledged put is listed.
    let check = |when: &str| {
        let listed = json_all(&cluster, &all, &["ls", "pgr", "--json"]);
        let keys: BTreeSet<String> = listed["objects"]
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .map(|o| o["key"].as_str().unwrap().to_owned())
            .collect();
        for (i, put) in &outcomes {
            if put.status.success() {
                assert!(keys.contains(&format!("obj-{i:02}")), "acknowledged put {i} not listed");
            }
        }
        let out = cluster.dir().join("got");
        for key in &keys {
            let i: usize = key.trim_start_matches("obj-").parse().unwrap();
            let path = format!("pgr/{key}");
            json_all(&cluster, &all, &["get", &path, "-o", out.to_str().unwrap(), "--json"]);
            assert!(std::fs::read(&out).unwrap() == data_of(i), "{path} {when}: other bytes");
        }
        keys.len()
    };
    let listed = check("after the crashes");
    assert!(listed > outcomes.len() / 2, "most puts landed: {listed}");
    let gc = json_all(&cluster, &all, &["gc", "--grace", "0", "--json"]);
    eprintln!("gc after the crashes: {gc}");
    assert_eq!(check("after gc"), listed);
}
