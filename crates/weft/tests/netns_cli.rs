//! `weft up --netns`: every process on a host of its own (a network namespace with one
//! address on a bridge), checked from outside with iproute2, and nothing left behind after a
//! clean stop or after a SIGKILL and the next start.
//!
//! Needs root and iproute2 (as CI has, which sets WEFT_REQUIRE_NETNS=1 so these tests cannot
//! be skipped silently there). Each test takes a subnet of its own inside 198.18.0.0/24 (the
//! only addresses tests may use: .0/27, .32/27, .64/26, .128/26, .192/26), so tests running
//! at once never share one.

use std::{
    collections::BTreeSet,
    process::Command,
    time::{Duration, Instant},
};

use crate::common::{bytes, cluster::Cluster};
use serde_json::Value;

/// Whether this machine can run namespaced clusters; prints why not when it cannot (and
/// panics when CI requires them).
fn netns_possible(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if root && ip {
        return true;
    }
    let why = if root { "iproute2's ip is missing" } else { "not running as root" };
    if std::env::var_os("WEFT_REQUIRE_NETNS").is_some_and(|v| v == "1") {
        panic!("{test}: WEFT_REQUIRE_NETNS=1 but {why}");
    }
    eprintln!("{test}: skipped: {why}");
    false
}

fn ip(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().expect("ip runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Names of the namespaces and of the root namespace's links, right now.
fn namespaces_and_links() -> (BTreeSet<String>, BTreeSet<String>) {
    let namespaces = ip(&["netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    let links = ip(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1).map(|n| n.split('@').next().unwrap().to_owned()))
        .collect();
    (namespaces, links)
}

/// The tag in every name of `cluster`'s hosts (its bridge is `wb<tag>`).
fn tag_of(cluster: &Cluster) -> String {
    let file = cluster.cluster_file();
    let bridge = file["netns"]["bridge"].as_str().unwrap_or_else(|| panic!("no bridge: {file}"));
    bridge.strip_prefix("wb").expect("a weft bridge").to_owned()
}

/// Waits (the kernel deletes a namespace's links asynchronously) until no namespace or link
/// of the cluster tagged `tag` is left, and checks that none that was there `before` went.
fn wait_for_none_of(tag: &str, before: &(BTreeSet<String>, BTreeSet<String>), when: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let ours = |name: &&String| {
        name.starts_with(&format!("weft-{tag}-"))
            || name.starts_with(&format!("wv{tag}-"))
            || **name == format!("wb{tag}")
    };
    loop {
        let now = namespaces_and_links();
        // Other tests' clusters may come and go meanwhile: only this one's names count.
        let left: Vec<&String> = now.0.iter().chain(&now.1).filter(ours).collect();
        if left.is_empty() {
            // Namespaces of no weft cluster (other tests' clusters end when they end) must
            // all still be there: cleaning up never reaches beyond weft's own names.
            let foreign_gone: Vec<&String> = before
                .0
                .iter()
                .filter(|n| !n.starts_with("weft-") && !now.0.contains(*n))
                .collect();
            assert!(foreign_gone.is_empty(), "{when}: removed namespaces {foreign_gone:?}");
            return;
        }
        assert!(Instant::now() < deadline, "{when}: left behind {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `weft net ARGS --dir DIR --json` on `cluster` (asserted to succeed).
fn net_json(cluster: &Cluster, args: &[&str]) -> Value {
    let dir = cluster.dir();
    let mut all = vec!["net"];
    all.extend_from_slice(args);
    all.extend(["--dir", dir.to_str().unwrap(), "--json"]);
    cluster.weft_json(&all)
}

/// The namespace a process runs in, as `ip netns identify` names it ("" for the root one).
fn netns_of(pid: u64) -> String {
    ip(&["netns", "identify", &pid.to_string()]).trim().to_owned()
}

/// Whether a TCP connection from inside `netns` to `address` succeeds.
fn connects_from(netns: &str, address: &str) -> bool {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    Command::new("ip")
        .args(["netns", "exec", netns, "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{host}/{port}"))
        .output()
        .expect("ip netns exec runs")
        .status
        .success()
}

fn host_of(service: &Value) -> (String, String) {
    let host = &service["host"];
    (
        host["netns"].as_str().unwrap_or_else(|| panic!("no host: {service}")).to_owned(),
        host["address"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn every_process_is_on_a_host_of_its_own_and_nothing_is_left_behind() {
    if !netns_possible("every_process_is_on_a_host_of_its_own_and_nothing_is_left_behind") {
        return;
    }
    let before = namespaces_and_links();
    // No --insecure-plaintext: off loopback, every link is TLS by default.
    let flags =
        ["--netns", "--subnet", "198.18.0.64/26", "--mtu", "9000", "--down-after-ms", "2000"];
    let mut cluster = Cluster::start(9, &flags);

    // Every service (meta, three nodes, the executor, the gateway) in a namespace of its
    // own, at an address of the subnet; the test itself stays in the root namespace.
    let file = cluster.cluster_file();
    assert_eq!(file["insecure_plaintext"], false, "{file}");
    let ca = file["tls"]["ca"].as_str().expect("a TLS cluster names its CA").to_owned();
    assert_eq!(file["netns"]["subnet"], "198.18.0.64/26", "{file}");
    assert_eq!(file["netns"]["mtu"], 9000, "{file}");
    let services = file["services"].as_array().expect("services").clone();
    assert_eq!(services.len(), 12, "{file}");
    let mut seen = BTreeSet::new();
    for service in &services {
        let (netns, address) = host_of(service);
        assert!(address.starts_with("198.18.0.") && seen.insert(netns.clone()), "{service}");
        let pid = service["pid"].as_u64().unwrap();
        assert_eq!(netns_of(pid), netns, "{service}");
        let link = ip(&["-n", &netns, "-o", "link", "show", "dev", "eth0"]);
        assert!(link.contains(" mtu 9000 "), "{link}");
        // A listener's endpoint is its host's address (the executor only dials out).
        if service["role"] != "repair" {
            let endpoint = service["endpoint"].as_str().unwrap_or_default();
            assert!(endpoint.starts_with(&format!("https://{address}:")), "{service}");
            // Plain HTTP to any listener gets no HTTP answer: the handshake refuses it.
            let at = endpoint.trim_start_matches("https://");
            let answer = plaintext_answer(at);
            assert!(!answer.contains("HTTP/1"), "{at} answered plain HTTP: {answer}");
        }
    }
    assert_eq!(netns_of(std::process::id().into()), "");
    assert!(cluster.meta_url().starts_with("https://198.18.0.74:"), "{}", cluster.meta_url());

    // openssl shows the gateway's and meta's chains to the cluster CA (that meta then
    // refuses a client without a certificate is weft-auth's tls test).
    let gateway = file["s3"]["endpoint"].as_str().unwrap().trim_start_matches("https://");
    let shown = s_client(gateway, &ca);
    assert!(shown.contains("Verify return code: 0 (ok)"), "{shown}");
    assert!(shown.contains("CN = s3-1") && shown.contains("weft cluster CA"), "{shown}");
    let meta_at = cluster.meta_url().trim_start_matches("https://").to_owned();
    let shown = s_client(&meta_at, &ca);
    assert!(
        shown.contains("Verify return code: 0 (ok)") && shown.contains("CN = meta-1"),
        "{shown}"
    );
    // An S3 client with the bundle gets S3 answers over HTTPS; one without it, a TLS error.
    let url = format!("https://{gateway}/");
    let with_ca = curl(&["--cacert", &ca, "-o", "/dev/null", "-w", "%{http_code}", &url]);
    assert_eq!(with_ca.trim(), "200", "anonymous ListBuckets over HTTPS");
    let without = curl(&["-o", "/dev/null", "-w", "%{http_code}", &url]);
    assert_eq!(without.trim(), "000", "a client without the CA got an answer");

    // Objects go through hosts: put and get from the root namespace, across the bridge.
    cluster.create_bucket("across", &crate::common::RS_2_1);
    let data = bytes(54, 300_000);
    cluster.put_bytes("across/one", &data);
    assert!(cluster.get("across/one") == data, "the object came back different");

    // A node reaches another only by its address: loopback inside a host is its own.
    let node = |id: u32| {
        services.iter().find(|s| s["role"] == "node" && s["id"] == id).expect("node").clone()
    };
    let (netns_1, _) = host_of(&node(1));
    let endpoint_2 =
        node(2)["endpoint"].as_str().unwrap().trim_start_matches("https://").to_owned();
    let port_2 = endpoint_2.rsplit_once(':').unwrap().1;
    assert!(connects_from(&netns_1, &endpoint_2), "node 1 cannot reach node 2 at {endpoint_2}");
    assert!(
        !connects_from(&netns_1, &format!("127.0.0.1:{port_2}")),
        "node 1 reached node 2's port on its own loopback"
    );

    drills_across_hosts(&cluster, &data);

    // weft status shows no plain-HTTP warning, and its services carry their hosts.
    let services_now = cluster.status()["services"].clone();
    assert_eq!(services_now.as_array().map(Vec::len), Some(12), "{services_now}");
    assert!(services_now.as_array().unwrap().iter().all(|s| s["host"]["address"].is_string()));
    let status = cluster.weft(&["status"]);
    let human = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && !human.contains("plain HTTP"), "{human}");

    // A clean stop removes every namespace, veth and the bridge.
    let tag = tag_of(&cluster);
    let stopped = cluster.stop();
    assert!(stopped.success(), "weft up exited with {stopped}");
    wait_for_none_of(&tag, &before, "after a clean stop");

    // A SIGKILLed weft up leaves its hosts; the next start on the directory removes them
    // and makes them anew; a clean stop then leaves nothing again.
    cluster.restart();
    cluster.kill_up();
    let left = namespaces_and_links();
    let prefix = format!("weft-{tag}-");
    assert!(left.0.iter().any(|n| n.starts_with(&prefix)), "the killed run's hosts are gone?");
    cluster.restart();
    let again = cluster.cluster_file();
    assert_eq!(again["services"].as_array().unwrap().len(), 12, "{again}");
    assert!(cluster.get("across/one") == data, "the object did not survive the restarts");
    let stopped = cluster.stop();
    assert!(stopped.success(), "weft up exited with {stopped}");
    wait_for_none_of(&tag, &before, "after a SIGKILL, a restart and a clean stop");
}

/// The node (id) holding the first unit of `path`, as `weft stat --nodes` lists them.
fn first_node_of(cluster: &Cluster, path: &str) -> String {
    let listed = cluster.weft(&["stat", path, "--nodes"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    String::from_utf8_lossy(&listed.stdout).lines().next().expect("a node").trim().to_owned()
}

/// What weft does, across hosts over TLS: a regroup transition, a RAIDP disk drill, a
/// geometric pack, and a node killed, read around and repaired (`across/one` holds `data`).
fn drills_across_hosts(cluster: &Cluster, data: &[u8]) {
    // Okapi's regroup: rs(2,1) → rs(4,2) over the same stripes, only new parity written.
    let regrouped = cluster.weft_json(&[
        "transition",
        "across/one",
        "--k",
        "4",
        "--r",
        "2",
        "--mode",
        "regroup",
        "--json",
    ]);
    assert_eq!(regrouped["mode"], "regroup", "{regrouped}");
    assert_eq!(regrouped["data_bytes_written"], 0, "{regrouped}");
    assert!(cluster.get("across/one") == data, "changed by the regroup");

    // RAIDP: a disk holding a replica fails; reads go to the other, recover re-mirrors.
    cluster.create_bucket("warm", &["--code", "raidp", "--superchunk", "256KiB"]);
    let warm = bytes(57, 600_000);
    cluster.put_bytes("warm/one", &warm);
    let node = first_node_of(cluster, "warm/one");
    let failed = cluster.weft(&["disk", "fail", &node, "0"]);
    assert!(failed.status.success(), "{}", String::from_utf8_lossy(&failed.stderr));
    assert!(cluster.get("warm/one") == warm, "the surviving replica differs");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let report = cluster.weft_json(&["raidp", "recover", "--json"]);
        assert_eq!(report["unrebuilt"], serde_json::json!([]), "{report}");
        // Once meta knows of the failure, the superchunk it held is copied from its other
        // replica (a transfer).
        if report["transfers"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "nothing recovered after the disk failed: {report}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(cluster.get("warm/one") == warm, "the re-mirrored object differs");
    let replaced = cluster.weft(&["disk", "replace", &node, "0"]);
    assert!(replaced.status.success(), "{}", String::from_utf8_lossy(&replaced.stderr));

    // RCStor's geometric chunks: a warm object packed into a placement group of 6 hosts.
    let flags =
        "--layout geometric --code rs --k 4 --r 2 --s0 256KiB --q 2 --chunk-max 2MiB --pgs 1";
    cluster.create_bucket("cold", &flags.split_whitespace().collect::<Vec<_>>());
    let cold = bytes(58, 1_500_000);
    cluster.put_bytes("cold/one", &cold);
    let packed = cluster.weft_json(&["pack", "--bucket", "cold", "--now", "--json"]);
    assert_eq!(packed["buckets"][0]["objects"], 1, "{packed}");
    assert!(cluster.get("cold/one") == cold, "the packed object differs");

    // A node holding a unit of the regrouped object is killed: reads go around it, meta
    // finds it down, and the executor rebuilds its units on other hosts.
    let victim: u32 = first_node_of(cluster, "across/one").parse().expect("a node id");
    cluster.kill_node(victim);
    assert!(cluster.get("across/one") == data, "the degraded read differs");
    cluster.wait_for_status("the dead node's units rebuilt", |s| {
        s["nodes_down"] == 1 && s["under_protected_units"] == 0
    });
    assert!(cluster.get("across/one") == data, "the repaired object differs");
    assert!(cluster.get("cold/one") == cold && cluster.get("warm/one") == warm);
}

/// What a listener answers a plain-HTTP request with (empty when it closes the connection).
fn plaintext_answer(at: &str) -> String {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(at).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(15))).unwrap();
    let _ = tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// `openssl s_client` against `at`, trusting `ca`: what it printed.
fn s_client(at: &str, ca: &str) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", at, "-CAfile", ca, "-showcerts"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").args(["-sS", "--max-time", "20"]).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn plaintext_off_loopback_needs_consent() {
    let dir = tempfile::tempdir().unwrap();
    // TLS is on by default off loopback; asking for it and for plain HTTP is refused.
    let up = Command::new(crate::common::cluster::weft_bin())
        .args(["up", "--dir", dir.path().to_str().unwrap(), "--meta-listen", "198.18.0.200:0"])
        .args(["--tls", "--insecure-plaintext"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(!up.status.success() && said.contains("--insecure-plaintext"), "{said}");
    assert!(!dir.path().join("cluster.secret").exists(), "a refused start made a secret");
    for role in [["meta", "--dir"], ["s3", "--meta"]] {
        let mut command = Command::new(crate::common::cluster::weft_bin());
        command.args(["serve", role[0], role[1], dir.path().to_str().unwrap()]);
        if role[0] == "s3" {
            command.args(["--secret-file", "/nonexistent"]);
        }
        let served = command.args(["--listen", "198.18.0.201:0"]).output().unwrap();
        let said = String::from_utf8_lossy(&served.stderr);
        assert!(
            !served.status.success() && said.contains("is not a loopback address"),
            "serve {}: {said}",
            role[0]
        );
    }
}

#[test]
fn postgres_and_two_metas_each_on_a_host_of_their_own() {
    if !netns_possible("postgres_and_two_metas_each_on_a_host_of_their_own")
        || !crate::up_cli::postgres_here()
    {
        return;
    }
    let before = namespaces_and_links();
    let flags = [
        "--netns",
        "--subnet",
        "198.18.0.128/26",
        "--meta-store",
        "postgres",
        "--meta-replicas",
        "2",
    ];
    let mut cluster = Cluster::start(3, &flags);
    let file = cluster.cluster_file();
    // PostgreSQL listens on its host's address, and its server runs in that namespace.
    assert_eq!(file["postgres"]["address"], "198.18.0.130", "{file}");
    let hosts = file["netns"]["hosts"].as_array().expect("hosts").clone();
    let netns_of_host = |name: &str| {
        hosts.iter().find(|h| h["name"] == name).unwrap_or_else(|| panic!("{name}: {file}"))
            ["netns"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let pid_file = cluster.dir().join("postgres/data/postmaster.pid");
    let server_pid: u64 =
        std::fs::read_to_string(&pid_file).unwrap().lines().next().unwrap().trim().parse().unwrap();
    assert_eq!(netns_of(server_pid), netns_of_host("postgres"));
    // The two metas on hosts of their own, each reached by its address.
    let metas: Vec<String> = file["metas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["endpoint"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(metas.len(), 2, "{file}");
    assert!(metas[0].starts_with("https://198.18.0.138:"), "{metas:?}");
    assert!(metas[1].starts_with("https://198.18.0.139:"), "{metas:?}");
    for (i, meta) in metas.iter().enumerate() {
        let pid = file["metas"][i]["pid"].as_u64().unwrap();
        assert_eq!(netns_of(pid), netns_of_host(&format!("meta-{}", i + 1)), "{meta}");
    }
    cluster.create_bucket("pgns", &crate::common::RS_2_1);
    let data = bytes(55, 200_000);
    cluster.put_bytes("pgns/one", &data);
    assert!(cluster.get("pgns/one") == data, "the object came back different");
    let tag = tag_of(&cluster);
    let stopped = cluster.stop();
    assert!(stopped.success(), "weft up exited with {stopped}");
    wait_for_none_of(&tag, &before, "after a clean stop with PostgreSQL");
}

#[test]
fn net_partition_cuts_hosts_off_and_heal_brings_them_back() {
    if !netns_possible("net_partition_cuts_hosts_off_and_heal_brings_them_back") {
        return;
    }
    let before = namespaces_and_links();
    let flags = [
        "--netns",
        "--subnet",
        "198.18.0.192/26",
        "--down-after-ms",
        "1500",
        "--heartbeat-ms",
        "250",
    ];
    let cluster = Cluster::start(3, &flags);
    let dir = cluster.dir();
    let net = |args: &[&str]| net_json(&cluster, args);
    let row = |state: &Value, host: &str| {
        state["hosts"].as_array().unwrap().iter().find(|h| h["host"] == host).unwrap().clone()
    };
    let services = cluster.cluster_file()["services"].as_array().unwrap().clone();
    let node = |id: u32| {
        let service = services.iter().find(|s| s["role"] == "node" && s["id"] == id).unwrap();
        let endpoint = service["endpoint"].as_str().unwrap().trim_start_matches("https://");
        (host_of(service).0, endpoint.to_owned())
    };
    let reachable_from_here = |address: &str| {
        let address: std::net::SocketAddr = address.parse().unwrap();
        std::net::TcpStream::connect_timeout(&address, Duration::from_millis(500)).is_ok()
    };
    let (ns1, at1) = node(1);
    let (ns2, at2) = node(2);
    let (_, at3) = node(3);
    let shown = net(&["show"]);
    assert_eq!(shown["hosts"].as_array().unwrap().len(), 6, "{shown}");
    assert!(shown["hosts"].as_array().unwrap().iter().all(|h| h["link"] == "up"), "{shown}");

    // node-2 cut off from everyone: no host and not this machine reach it; meta says down.
    let cut = net(&["partition", "node-2"]);
    assert_eq!(row(&cut, "node-2")["link"], "down", "{cut}");
    assert!(!reachable_from_here(&at2) && !connects_from(&ns1, &at2));
    cluster.wait_for_status("node 2 down", |s| s["nodes_down"] == 1);
    let healed = net(&["heal", "node-2"]);
    assert_eq!(row(&healed, "node-2")["link"], "up", "{healed}");
    cluster.wait_for_status("node 2 up again", |s| s["nodes_down"] == 0 && s["nodes_up"] == 3);
    assert!(reachable_from_here(&at2) && connects_from(&ns1, &at2));

    // node-1 apart from node-2 only: both still reach node 3 and this machine reaches both.
    let split = net(&["partition", "node-1", "--from", "node-2"]);
    assert_eq!(row(&split, "node-1")["cannot_send_to"], serde_json::json!(["node-2"]), "{split}");
    assert_eq!(row(&split, "node-2")["cannot_send_to"], serde_json::json!(["node-1"]), "{split}");
    assert!(!connects_from(&ns1, &at2) && !connects_from(&ns2, &at1));
    assert!(connects_from(&ns1, &at3) && connects_from(&ns2, &at3));
    assert!(reachable_from_here(&at1) && reachable_from_here(&at2));
    // One way: only node-1's packets to node 3 are dropped.
    let one_way = net(&["partition", "node-1", "--from", "node-3", "--one-way"]);
    let mut cut_from: Vec<String> = row(&one_way, "node-1")["cannot_send_to"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    cut_from.sort();
    assert_eq!(cut_from, ["node-2", "node-3"], "{one_way}");
    assert_eq!(row(&one_way, "node-3")["cannot_send_to"], serde_json::json!([]), "{one_way}");
    let all_healed = net(&["heal"]);
    for host in all_healed["hosts"].as_array().unwrap() {
        assert_eq!(host["cannot_send_to"], serde_json::json!([]), "{all_healed}");
        assert_eq!(host["link"], "up", "{all_healed}");
    }
    assert!(connects_from(&ns1, &at2) && connects_from(&ns1, &at3));

    // Bad input: a host that is not one, both sides at once; a delay where netem is missing
    // says what to use instead.
    let unknown =
        cluster.weft_fails(&["net", "partition", "node-9", "--dir", dir.to_str().unwrap()]);
    assert!(
        unknown.contains("not a host of this cluster") && unknown.contains("node-3"),
        "{unknown}"
    );
    let both = cluster.weft_fails(&[
        "net",
        "partition",
        "node-1",
        "--from",
        "node-1",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert!(both.contains("both sides"), "{both}");
    let delay = cluster.weft(&["net", "delay", "node-1", "20ms", "--dir", dir.to_str().unwrap()]);
    if delay.status.success() {
        let shown = net(&["show"]);
        assert!(
            row(&shown, "node-1")["delay"].as_str().is_some_and(|d| d.contains("20")),
            "{shown}"
        );
    } else {
        let said = String::from_utf8_lossy(&delay.stderr);
        assert!(said.contains("--net-model"), "{said}");
    }
    let tag = tag_of(&cluster);
    drop(cluster);
    wait_for_none_of(&tag, &before, "after the drills");
}

/// The unit keys in the unit files of a node's disks (`NODE_DIR/disk-*/units/*/KEY.unit`).
fn unit_files_of(node_dir: &std::path::Path) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for disk in std::fs::read_dir(node_dir).into_iter().flatten().flatten() {
        let units = disk.path().join("units");
        for fanout in std::fs::read_dir(units).into_iter().flatten().flatten() {
            for file in std::fs::read_dir(fanout.path()).into_iter().flatten().flatten() {
                let path = file.path();
                if path.extension().is_some_and(|e| e == "unit") {
                    keys.insert(path.file_stem().unwrap().to_string_lossy().into_owned());
                }
            }
        }
    }
    keys
}

/// Where a writer thread finds the cluster (a `Cluster` stays on the test's thread).
struct Target {
    meta: String,
    secret: std::path::PathBuf,
}

/// `weft put` of `data` as `path`, through a file of the writer's own; whether it was
/// acknowledged.
fn put_acknowledged(target: &Target, file: &std::path::Path, path: &str, data: &[u8]) -> bool {
    std::fs::write(file, data).unwrap();
    Command::new(crate::common::cluster::weft_bin())
        .args(["put", file.to_str().unwrap(), path])
        .env("WEFT_META", &target.meta)
        .env("WEFT_SECRET_FILE", &target.secret)
        .output()
        .expect("weft runs")
        .status
        .success()
}

#[test]
fn a_partitioned_node_loses_nothing_acknowledged_and_its_stale_units_are_collected() {
    if !netns_possible(
        "a_partitioned_node_loses_nothing_acknowledged_and_its_stale_units_are_collected",
    ) {
        return;
    }
    const DOWN_AFTER_MS: u64 = 1000;
    const WRITERS: usize = 4;
    const MIN_ACKNOWLEDGED: usize = 200;
    let before = namespaces_and_links();
    let flags = [
        "--netns",
        "--subnet",
        "198.18.0.0/27",
        "--down-after-ms",
        "1000",
        "--heartbeat-ms",
        "200",
    ];
    let cluster = Cluster::start(5, &flags);
    let dir = cluster.dir();
    cluster.create_bucket("drill", &crate::common::RS_2_1);
    let target = Target { meta: cluster.meta_url(), secret: cluster.secret_file() };
    // Objects that will be rewritten while the node is away: first versions now, so some of
    // their units sit on it when it goes.
    let files = tempfile::tempdir().unwrap();
    let mut latest = std::collections::BTreeMap::new();
    for w in 0..WRITERS {
        for r in 0..5 {
            let key = format!("drill/w{w}-again-{r}");
            let data = bytes((w * 100 + r) as u64, 20_000 + r * 3_000);
            assert!(put_acknowledged(&target, &files.path().join("seed"), &key, &data));
            latest.insert(key, data);
        }
    }
    let stale_before: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..5).map(move |r| format!("drill/w{w}-again-{r}")))
        .filter(|key| {
            let stat = cluster.stat(key);
            stat["units"].as_array().unwrap().iter().any(|u| u["node_id"] == 2)
        })
        .collect();
    assert!(!stale_before.is_empty(), "no rewritten object had a unit on node 2");

    // Four writers put new objects and rewrite their own; node-2 is cut off meanwhile for
    // 3× meta's down-after, then healed; the writers go on until 200 puts were acknowledged.
    let acknowledged = std::sync::atomic::AtomicUsize::new(0);
    let partition_over = std::sync::atomic::AtomicBool::new(false);
    let net = |args: &[&str]| net_json(&cluster, args);
    let mut on_node_2 = BTreeSet::new();
    let results: Vec<(std::collections::BTreeMap<String, Vec<u8>>, usize)> =
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let (target, acknowledged, partition_over) =
                        (&target, &acknowledged, &partition_over);
                    let file = files.path().join(format!("w{w}"));
                    scope.spawn(move || {
                        let mut mine = std::collections::BTreeMap::new();
                        let mut failed = 0;
                        for i in 0.. {
                            let done = partition_over.load(std::sync::atomic::Ordering::SeqCst)
                                && acknowledged.load(std::sync::atomic::Ordering::SeqCst)
                                    >= MIN_ACKNOWLEDGED;
                            if done {
                                break;
                            }
                            let key = if i % 3 == 0 {
                                format!("drill/w{w}-again-{}", (i / 3) % 5)
                            } else {
                                format!("drill/w{w}-new-{i}")
                            };
                            let data = bytes((w * 1_000_000 + i) as u64, 5_000 + (i % 7) * 4_000);
                            if put_acknowledged(target, &file, &key, &data) {
                                mine.insert(key, data);
                                acknowledged.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            } else {
                                failed += 1;
                            }
                        }
                        (mine, failed)
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(500));
            let cut = net(&["partition", "node-2"]);
            on_node_2.extend(unit_files_of(&dir.join("node-2")));
            assert_eq!(
                cut["hosts"].as_array().unwrap().iter().find(|h| h["host"] == "node-2").unwrap()
                    ["link"],
                "down"
            );
            std::thread::sleep(Duration::from_millis(3 * DOWN_AFTER_MS));
            let down = cluster.status();
            net(&["heal", "node-2"]);
            partition_over.store(true, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(down["nodes_down"], 1, "node 2 was not reported down: {down}");
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
    let mut total = 0;
    for (mine, _) in &results {
        for (key, data) in mine {
            latest.insert(key.clone(), data.clone());
        }
        total += mine.len();
    }
    let acknowledged = acknowledged.into_inner();
    assert!(acknowledged >= MIN_ACKNOWLEDGED, "only {acknowledged} puts acknowledged");
    eprintln!(
        "drill: {acknowledged} puts acknowledged, {} failed, {} objects",
        results.iter().map(|(_, f)| f).sum::<usize>(),
        latest.len()
    );
    assert!(total <= acknowledged);

    // node 2 is back and the executor has rebuilt what was under-protected.
    cluster.wait_for_status("node 2 back and nothing under-protected", |s| {
        s["nodes_up"] == 5 && s["under_protected_units"] == 0 && s["repair_queue"] == 0
    });
    // Every acknowledged object reads back as its last acknowledged put wrote it: a stale
    // unit on node 2 (of a rewritten or repaired object) is never served.
    for (key, data) in &latest {
        assert!(cluster.get(key) == *data, "{key} came back different");
    }
    // What node 2 held when it was cut off and no object references now (units of objects
    // rewritten meanwhile, units rebuilt elsewhere) is stale; after a sweep none is left,
    // whoever removed it (the writers' deletes retried, or the sweep), and nothing else went.
    let referenced: BTreeSet<String> = latest
        .keys()
        .flat_map(|key| {
            let stat = cluster.stat(key);
            stat["units"]
                .as_array()
                .unwrap()
                .iter()
                .map(|u| u["unit_key"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    let stale: BTreeSet<&String> = on_node_2.difference(&referenced).collect();
    assert!(!stale.is_empty(), "nothing of node 2's went stale: the drill tested nothing");
    let swept = cluster.weft_json(&["gc", "--grace", "0", "--json"]);
    assert_eq!(swept["errors"], serde_json::json!([]), "{swept}");
    let now_on_node_2 = unit_files_of(&dir.join("node-2"));
    let left: Vec<&&String> = stale.iter().filter(|k| now_on_node_2.contains(**k)).collect();
    assert!(left.is_empty(), "stale units of node 2 were not collected: {left:?}");
    let after = cluster.weft_json(&["gc", "--dry-run", "--grace", "0", "--json"]);
    assert_eq!(after["unreferenced"], 0, "{after}");
    for (key, data) in &latest {
        assert!(cluster.get(key) == *data, "{key} came back different after the sweep");
    }
    eprintln!(
        "drill: {} of node 2's {} units went stale and were collected",
        stale.len(),
        on_node_2.len()
    );
    let tag = tag_of(&cluster);
    drop(cluster);
    wait_for_none_of(&tag, &before, "after the partition drill");
}

/// Hosts a test makes by hand (no `weft up`): a bridge and one namespace per host, removed
/// with every process started in them when dropped.
struct HandHosts {
    bridge: String,
    namespaces: Vec<String>,
    children: Vec<std::process::Child>,
}

impl HandHosts {
    fn create(tag: &str, gateway: &str, prefix: u8, hosts: &[(&str, &str)]) -> HandHosts {
        let run = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip runs");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let bridge = format!("wb{tag}");
        let mut made =
            HandHosts { bridge: bridge.clone(), namespaces: Vec::new(), children: Vec::new() };
        run(&["link", "add", &bridge, "type", "bridge"]);
        run(&["addr", "add", &format!("{gateway}/{prefix}"), "dev", &bridge]);
        run(&["link", "set", &bridge, "up"]);
        for (n, (name, address)) in hosts.iter().enumerate() {
            let netns = format!("weft-{tag}-{name}");
            let veth = format!("wv{tag}-{n}");
            run(&["netns", "add", &netns]);
            made.namespaces.push(netns.clone());
            run(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns]);
            run(&["link", "set", &veth, "master", &bridge, "up"]);
            run(&["-n", &netns, "addr", "add", &format!("{address}/{prefix}"), "dev", "eth0"]);
            run(&["-n", &netns, "link", "set", "eth0", "up"]);
            run(&["-n", &netns, "link", "set", "lo", "up"]);
        }
        made
    }

    /// Starts `weft ARGS` inside host `name`'s namespace and waits for its ready line.
    fn serve(&mut self, tag: &str, name: &str, args: &[&str], log: &std::path::Path) -> String {
        use std::io::BufRead;
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("weft-{tag}-{name}"),
                crate::common::cluster::weft_bin(),
            ])
            .args(args)
            .env("WEFT_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("ip netns exec runs");
        let stdout = child.stdout.take().unwrap();
        self.children.push(child);
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
        assert!(
            !line.is_empty(),
            "weft {args:?} on {name} printed no ready line: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        line.trim().to_owned()
    }
}

impl Drop for HandHosts {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for netns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", netns]).output();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).output();
    }
}

#[test]
fn a_deployment_from_init_hosts_files_serves_objects_across_hosts() {
    if !netns_possible("a_deployment_from_init_hosts_files_serves_objects_across_hosts") {
        return;
    }
    let before = namespaces_and_links();
    let root = tempfile::tempdir().unwrap();
    let deploy = root.path().join("deploy");
    let weft = |args: &[&str]| {
        let out = Command::new(crate::common::cluster::weft_bin()).args(args).output().unwrap();
        assert!(out.status.success(), "weft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let etc = root.path().join("{host}/etc");
    let data = root.path().join("{host}/data");
    let hosts = [("a", "198.18.0.34"), ("b", "198.18.0.35"), ("c", "198.18.0.36")];
    let list = hosts.map(|(n, a)| format!("{n}={a}")).join(",");
    // A host named for the CA's directory is refused, and then nothing is written.
    let refused = Command::new(crate::common::cluster::weft_bin())
        .args(["init", "--dir", deploy.to_str().unwrap(), "--hosts", "tls=198.18.0.40"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("CA") && !deploy.exists(), "{said}");
    // No --insecure-plaintext: the deployment is TLS on every link.
    let said = weft(&[
        "init",
        "--dir",
        deploy.to_str().unwrap(),
        "--hosts",
        &list,
        "--nodes-per-host",
        "1",
        "--gateways",
        "1",
        "--etc-dir",
        etc.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(said.contains("a (198.18.0.34): meta.toml, node-1.toml"), "{said}");
    assert!(said.contains("TLS on every link"), "{said}");
    let ca = deploy.join("tls/ca.pem");
    assert!(ca.is_file() && deploy.join("tls/admin/cert.pem").is_file());
    // Each host's certificate names its address, and every config its TLS directory.
    for (name, address) in hosts {
        let cert = deploy.join(name).join("cert.pem");
        let text = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in", cert.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains(&format!("IP Address:{address}")), "{name}: {text}");
        let node = std::fs::read_to_string(
            deploy
                .join(name)
                .join(format!("node-{}.toml", hosts.iter().position(|h| h.0 == name).unwrap() + 1)),
        )
        .unwrap();
        assert!(node.contains("tls-dir = ") && node.contains("https://198.18.0.34:7700"), "{node}");
    }
    // Nodes get their own keys, never the secret: host c runs only a node.
    assert!(!deploy.join("c/cluster.secret").exists());
    assert!(deploy.join("c/node-3.key").exists());
    // "Copy to each host": into its etc directory.
    for (name, _) in hosts {
        let target = root.path().join(name).join("etc");
        std::fs::create_dir_all(&target).unwrap();
        for file in std::fs::read_dir(deploy.join(name)).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), target.join(file.file_name())).unwrap();
        }
    }
    let tag = format!("d{:05x}", std::process::id() & 0xfffff);
    let mut net = HandHosts::create(&tag, "198.18.0.33", 27, &hosts);
    let config = |host: &str, file: &str| root.path().join(host).join("etc").join(file);
    let logs = root.path();
    let ready = net.serve(
        &tag,
        "a",
        &["serve", "meta", "--config", config("a", "meta.toml").to_str().unwrap()],
        &logs.join("meta.log"),
    );
    assert_eq!(ready, "meta listening on https://198.18.0.34:7700");
    // The operator's commands run with the deployment's secret, beside which tls/admin is
    // their identity.
    let secret = deploy.join("cluster.secret");
    let cli = |args: &[&str]| {
        let out = Command::new(crate::common::cluster::weft_bin())
            .args(args)
            .env("WEFT_META", "https://198.18.0.34:7700")
            .env("WEFT_SECRET_FILE", &secret)
            .output()
            .unwrap();
        assert!(out.status.success(), "weft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    for id in 1..=3 {
        cli(&["node", "add", &id.to_string(), "--no-key-file"]);
    }
    for (id, (name, address)) in hosts.iter().enumerate() {
        let id = id + 1;
        let file = config(name, &format!("node-{id}.toml"));
        let ready = net.serve(
            &tag,
            name,
            &["serve", "node", "--config", file.to_str().unwrap()],
            &logs.join(format!("node-{id}.log")),
        );
        assert_eq!(ready, format!("node {id} listening on https://{address}:{}", 7700 + id));
    }
    let ready = net.serve(
        &tag,
        "a",
        &["serve", "s3", "--config", config("a", "s3.toml").to_str().unwrap()],
        &logs.join("s3.log"),
    );
    assert_eq!(ready, "s3 gateway listening on https://198.18.0.34:9000");
    // Plain HTTP gets no answer anywhere; the gateway's chain is the deployment's CA.
    for at in ["198.18.0.34:7700", "198.18.0.35:7702", "198.18.0.34:9000"] {
        let answer = plaintext_answer(at);
        assert!(!answer.contains("HTTP/1"), "{at} answered plain HTTP: {answer}");
    }
    let shown = s_client("198.18.0.34:9000", ca.to_str().unwrap());
    assert!(shown.contains("Verify return code: 0 (ok)") && shown.contains("CN = a"), "{shown}");
    // The nodes are up, each in its host's rack; objects cross the hosts.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status: Value = serde_json::from_slice(&cli(&["status", "--json"])).unwrap();
        if status["nodes_up"] == 3 {
            let racks: BTreeSet<String> =
                status["nodes"].as_array().unwrap().iter().map(|n| n["rack"].to_string()).collect();
            assert_eq!(racks.len(), 3, "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "nodes not up: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
    cli(&[
        "bucket", "create", "deployed", "--code", "rs", "--k", "2", "--r", "1", "--cell", "4KiB",
        "--block", "16KiB",
    ]);
    let data = bytes(56, 100_000);
    let file = root.path().join("object");
    std::fs::write(&file, &data).unwrap();
    cli(&["put", file.to_str().unwrap(), "deployed/one"]);
    assert!(cli(&["get", "deployed/one"]) == data, "the object came back different");

    // The README tour's S3 block, as written, over HTTPS: `weft key create --env` finds the
    // endpoint and the CA in the deployment's s3.json.
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let block = crate::common::sh_blocks(&readme)
        .into_iter()
        .find(|b| b.contains("key create tour --env"))
        .expect("the README's S3 block");
    let work = root.path().join("tour");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("README.md"), &readme).unwrap();
    let weft_dir = std::path::Path::new(crate::common::cluster::weft_bin()).parent().unwrap();
    let tour = Command::new("bash")
        .args(["-euc", &block])
        .current_dir(&work)
        .env("PATH", format!("{}:{}", weft_dir.display(), std::env::var("PATH").unwrap()))
        .env("WEFT_META", "https://198.18.0.34:7700")
        .env("WEFT_SECRET_FILE", &secret)
        .env("WEFT_LOG", "warn")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&tour.stdout);
    let err = String::from_utf8_lossy(&tour.stderr);
    assert!(tour.status.success(), "the README's S3 block:\n{out}\n{err}");
    assert!(
        out.matches("byte-identical").count() == 1
            && out.contains("anyone reads it")
            && out.contains("403"),
        "{out}"
    );
    drop(net);
    wait_for_none_of(&tag, &before, "after the deployment");
}
