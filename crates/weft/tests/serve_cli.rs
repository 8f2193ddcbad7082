//! `weft serve meta` and `weft serve node` as real processes: nodes come up, a killed node
//! goes down, and a restarted meta still knows every node.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// Kills every process it holds when dropped, so a failing test leaves nothing running.
#[derive(Default)]
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spawns `weft <args>` and returns its index and the endpoint of its ready line.
fn spawn(procs: &mut Procs, args: &[&str], prefix: &str) -> (usize, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .env("WEFT_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("weft starts");
    let stdout = child.stdout.take().unwrap();
    procs.0.push(child);
    let mut line = String::new();
    // Bounded: the child either prints its ready line or exits (EOF).
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let line = line.trim();
    assert!(line.starts_with(prefix), "expected {prefix:?}..., got {line:?} from weft {args:?}");
    let endpoint = line.rsplit(' ').next().unwrap().to_owned();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{line}");
    (procs.0.len() - 1, endpoint)
}

/// The secret `weft serve meta --dir DIR/meta` made as DIR/cluster.secret.
fn secret_of(dir: &Path) -> weft_auth::ClusterSecret {
    weft_auth::ClusterSecret::read_file(&dir.join("cluster.secret")).expect("meta made a secret")
}

/// A minimal signed HTTP GET (no client dependency); None when meta is not reachable.
fn get_json(endpoint: &str, path: &str, secret: &weft_auth::ClusterSecret) -> Option<Value> {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let hash = weft_auth::content_hash(b"");
    let signer = secret.signer_for(weft_auth::Audience::Meta);
    let authorization = signer.authorization("GET", path, "", &hash);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nauthorization: \
         {authorization}\r\nx-weft-content-sha256: {hash}\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Some(serde_json::from_str(body).expect("a JSON body"))
}

/// Node states by id, from `GET /v1/nodes`.
fn states(meta: &str, secret: &weft_auth::ClusterSecret) -> Vec<(u64, String)> {
    get_json(meta, "/v1/nodes", secret)
        .map(|body| {
            body["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| (n["id"].as_u64().unwrap(), n["state"].as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until `want` holds of the node states, at most 10 s.
fn wait_for(
    meta: &str,
    secret: &weft_auth::ClusterSecret,
    what: &str,
    want: impl Fn(&[(u64, String)]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = states(meta, secret);
        if want(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}; nodes: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn spawn_meta(procs: &mut Procs, dir: &Path, listen: &str) -> (usize, String) {
    let dir = dir.to_str().unwrap();
    let args = ["serve", "meta", "--dir", dir, "--listen", listen, "--down-after-ms", "1000"];
    spawn(procs, &args, "meta listening on ")
}

#[test]
fn nodes_heartbeat_to_meta_and_a_killed_node_goes_down() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut procs = Procs::default();
    let (meta_index, meta) = spawn_meta(&mut procs, &tmp.path().join("meta"), &listen);
    assert_eq!(meta, format!("http://{listen}"));

    let secret = secret_of(tmp.path());
    let secret_file = tmp.path().join("cluster.secret");
    let weft = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(args)
            .args(["--meta", &meta, "--secret-file", secret_file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "weft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let mut nodes = Vec::new();
    for id in ["1", "2", "3"] {
        let key_file = tmp.path().join(format!("node-{id}.key"));
        if id != "3" {
            // Enrolled, with a key of its own; node 3 gets a key but is never enrolled.
            let said = weft(&["node", "add", id, "--key-file", key_file.to_str().unwrap()]);
            assert!(said.contains(&format!("enrolled node {id}")), "{said}");
        } else {
            secret.node_key(3).write_node_file(&key_file).unwrap();
        }
        let d0 = tmp.path().join(format!("n{id}/d0"));
        let d1 = tmp.path().join(format!("n{id}/d1"));
        let args = [
            "serve",
            "node",
            "--meta",
            &meta,
            "--key-file",
            key_file.to_str().unwrap(),
            "--heartbeat-ms",
            "200",
            "--disk",
            d0.to_str().unwrap(),
            "--disk",
            d1.to_str().unwrap(),
        ];
        nodes.push(spawn(&mut procs, &args, &format!("node {id} listening on ")).0);
    }
    let up = |s: &[(u64, String)]| s.len() == 2 && s.iter().all(|(_, state)| state == "up");
    wait_for(&meta, &secret, "both enrolled nodes up", up);
    // The node that was never enrolled heartbeats in vain: meta does not list it.
    std::thread::sleep(Duration::from_millis(600));
    let ids: Vec<u64> = states(&meta, &secret).iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2], "an unenrolled node must not join");
    let listed = get_json(&meta, "/v1/nodes", &secret).unwrap();
    assert_eq!(listed["nodes"][0]["disks"].as_array().unwrap().len(), 2);
    assert_eq!(listed["nodes"][0]["pid"], procs.0[nodes[0]].id());

    // kill -9 node 2: meta reports it down, node 1 stays up.
    procs.0[nodes[1]].kill().unwrap();
    procs.0[nodes[1]].wait().unwrap();
    let one_down =
        |s: &[(u64, String)]| s == [(1, "up".to_owned()), (2, "down".to_owned())].as_slice();
    wait_for(&meta, &secret, "node 2 down, node 1 up", one_down);
    let status = get_json(&meta, "/v1/status", &secret).unwrap();
    assert_eq!((status["nodes_up"].as_u64(), status["nodes_down"].as_u64()), (Some(1), Some(1)));

    let heartbeat_of_node_1 = |meta: &str| {
        get_json(meta, "/v1/nodes", &secret)
            .and_then(|body| body["nodes"][0]["last_heartbeat_ms"].as_u64())
    };
    let before_restart = heartbeat_of_node_1(&meta).expect("meta is up and knows node 1");

    // SIGTERM stops meta cleanly; a new meta on the same dir still knows both nodes.
    let meta_pid = procs.0[meta_index].id() as libc::pid_t;
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(meta_pid, libc::SIGTERM) }, 0);
    let exit = procs.0[meta_index].wait().unwrap();
    assert!(exit.success(), "meta exits 0 on SIGTERM: {exit:?}");
    let (_, meta) = spawn_meta(&mut procs, &tmp.path().join("meta"), &listen);
    let persisted = states(&meta, &secret);
    assert_eq!(persisted.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2], "{persisted:?}");
    wait_for(&meta, &secret, "node 1 back up after the restart, node 2 still down", one_down);
    // Node 1's heartbeats reach the new meta (not just its record from before the restart).
    let deadline = Instant::now() + Duration::from_secs(10);
    while heartbeat_of_node_1(&meta).unwrap_or(0) <= before_restart {
        assert!(Instant::now() < deadline, "node 1's heartbeats never reached the new meta");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `signal` to a child we spawned and have not reaped.
fn signal_child(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) on a child of this test, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
}

/// Issue 15 item 10: time meta did not run is nobody's silence. The whole "host" sleeps
/// (meta and nodes SIGSTOPped for three times `--down-after-ms`); right after meta resumes,
/// before any node could heartbeat again, every node is still up; then a put succeeds, and a
/// node that really stops is still judged down after `--down-after-ms`.
#[test]
fn a_paused_meta_does_not_judge_nodes_down_when_it_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut procs = Procs::default();
    let (meta_index, meta) = spawn_meta(&mut procs, &tmp.path().join("meta"), &listen);
    let secret = secret_of(tmp.path());
    let secret_file = tmp.path().join("cluster.secret");
    let weft = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(args)
            .args(["--meta", &meta, "--secret-file", secret_file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "weft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let mut nodes = Vec::new();
    for id in ["1", "2", "3"] {
        let key_file = tmp.path().join(format!("node-{id}.key"));
        weft(&["node", "add", id, "--key-file", key_file.to_str().unwrap()]);
        let disk = tmp.path().join(format!("n{id}/d0"));
        let args = [
            "serve",
            "node",
            "--meta",
            &meta,
            "--key-file",
            key_file.to_str().unwrap(),
            "--heartbeat-ms",
            "200",
            "--disk",
            disk.to_str().unwrap(),
        ];
        nodes.push(spawn(&mut procs, &args, &format!("node {id} listening on ")).0);
    }
    let all_up = |s: &[(u64, String)]| s.len() == 3 && s.iter().all(|(_, state)| state == "up");
    wait_for(&meta, &secret, "three nodes up", all_up);
    weft(&[
        "bucket",
        "create",
        "bkt",
        "--code",
        "rs",
        "--k",
        "2",
        "--r",
        "1",
        "--stripe-width",
        "2",
    ]);

    // The host sleeps: nodes first (no heartbeat is left in flight), then meta.
    for &node in &nodes {
        signal_child(&procs.0[node], libc::SIGSTOP);
    }
    signal_child(&procs.0[meta_index], libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(3000));
    signal_child(&procs.0[meta_index], libc::SIGCONT);
    // Nodes still asleep: no heartbeat can have arrived since the pause.
    let after = states(&meta, &secret);
    assert!(all_up(&after), "right after meta resumed every node must still be up: {after:?}");
    let status = get_json(&meta, "/v1/status", &secret).unwrap();
    assert_eq!(status["nodes_down"], 0, "{status}");
    for &node in &nodes {
        signal_child(&procs.0[node], libc::SIGCONT);
    }

    // A put right away succeeds and reads back.
    let file = tmp.path().join("object.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    weft(&["put", file.to_str().unwrap(), "bkt/after-pause"]);
    let back = tmp.path().join("back.bin");
    weft(&["get", "bkt/after-pause", "-o", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "the object read back differs");

    // A node that really stops is still judged down after --down-after-ms.
    procs.0[nodes[2]].kill().unwrap();
    procs.0[nodes[2]].wait().unwrap();
    let third_down = |s: &[(u64, String)]| {
        s == [(1, "up".to_owned()), (2, "up".to_owned()), (3, "down".to_owned())].as_slice()
    };
    wait_for(&meta, &secret, "node 3 down, nodes 1 and 2 up", third_down);
}

#[test]
fn bad_nearfull_and_full_ratios_are_refused_naming_the_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let key_file = tmp.path().join("node-1.key");
    weft_auth::ClusterSecret::generate().node_key(1).write_node_file(&key_file).unwrap();
    let disk = tmp.path().join("d0");
    for (nearfull, full, says) in [
        ("0.9", "0.8", "must not exceed the full ratio"),
        ("0.85", "1.5", "between 0 and 1"),
        ("-0.1", "0.95", "between 0 and 1"),
        ("NaN", "0.95", "between 0 and 1"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["serve", "node", "--meta", "http://127.0.0.1:1", "--key-file"])
            .arg(&key_file)
            .arg("--disk")
            .arg(&disk)
            .arg(format!("--nearfull-ratio={nearfull}"))
            .arg(format!("--full-ratio={full}"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{nearfull}/{full} accepted");
        assert!(stderr.contains("--full-ratio") && stderr.contains(says), "{stderr}");
    }
}

/// The systemd units in deploy/systemd start exactly what `weft init --hosts` writes: each
/// unit's ExecStart, pointed at a fresh deployment's files, is a command line weft accepts
/// (the config file read and every key a known flag).
#[test]
fn the_systemd_units_run_the_files_weft_init_hosts_writes() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy");
    let out = std::process::Command::new(crate::common::cluster::weft_bin())
        .args(["init", "--dir", deploy.to_str().unwrap(), "--hosts", "a=127.0.0.1"])
        .args(["--nodes-per-host", "2", "--gateways", "1"])
        .args(["--etc-dir", deploy.join("a").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut units = 0;
    for entry in std::fs::read_dir(repo.join("deploy/systemd")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for needed in ["Restart=on-failure", "User=weft", "NoNewPrivileges=yes"] {
            assert!(text.contains(needed), "{} lacks {needed}", path.display());
        }
        let exec = text.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("ExecStart");
        let exec = exec.replace("/etc/weft", deploy.join("a").to_str().unwrap()).replace("%i", "2");
        let mut words = exec.split_whitespace();
        assert_eq!(words.next(), Some("/usr/local/bin/weft"), "{}", path.display());
        let args: Vec<&str> = words.collect();
        let checked = std::process::Command::new(crate::common::cluster::weft_bin())
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            checked.status.success(),
            "{}: weft {args:?}: {}",
            path.display(),
            String::from_utf8_lossy(&checked.stderr)
        );
        units += 1;
    }
    assert_eq!(units, 4, "meta, node@, repair and s3");
}

/// `weft init --hosts` makes a TLS deployment by default: a CA, each host's certificate for
/// its address, the gateways' also for `--s3-endpoint-name`, which s3.json names; a bad name
/// is refused before anything is written.
#[test]
fn init_hosts_issues_each_host_a_certificate_and_names_the_gateways_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let deploy = dir.path().join("deploy");
    let init = |extra: &[&str]| {
        std::process::Command::new(crate::common::cluster::weft_bin())
            .args(["init", "--dir", deploy.to_str().unwrap()])
            .args(["--hosts", "a=127.0.0.1,b=127.0.0.2", "--gateways", "1"])
            .args(extra)
            .output()
            .unwrap()
    };
    let bad = init(&["--s3-endpoint-name", "s3 example"]);
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && said.contains("--s3-endpoint-name"), "{said}");
    assert!(!deploy.exists(), "a refused init wrote {}", deploy.display());
    let out = init(&["--s3-endpoint-name", "s3.example"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let names = |host: &str| {
        let cert = deploy.join(host).join("cert.pem");
        let shown = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in", cert.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(shown.status.success(), "openssl x509 on {}", cert.display());
        String::from_utf8_lossy(&shown.stdout).into_owned()
    };
    let (a, b) = (names("a"), names("b"));
    assert!(a.contains("IP Address:127.0.0.1") && a.contains("DNS:s3.example"), "{a}");
    assert!(b.contains("IP Address:127.0.0.2") && !b.contains("s3.example"), "{b}");
    let s3: serde_json::Value =
        serde_json::from_slice(&std::fs::read(deploy.join("s3.json")).unwrap()).unwrap();
    assert_eq!(s3["endpoint"], "https://s3.example:9000", "{s3}");
    assert!(s3["ca"].as_str().is_some_and(|ca| ca.ends_with("deploy/tls/ca.pem")), "{s3}");
    // Every config on b names its TLS directory and reaches meta over https.
    let node = std::fs::read_to_string(deploy.join("b/node-4.toml")).unwrap();
    assert!(node.contains("tls-dir = ") && node.contains("https://127.0.0.1:7700"), "{node}");
    assert!(!node.contains("insecure-plaintext"), "{node}");
}

/// `weft serve node --advertise HOST:PORT`: the node announces that address instead of its
/// listening one, and meta hands it out; an address that is not HOST:PORT is refused.
#[test]
fn a_node_announces_its_advertised_address() {
    let tmp = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut procs = Procs::default();
    let (_, meta) = spawn_meta(&mut procs, &tmp.path().join("meta"), &listen);
    let secret = secret_of(tmp.path());
    let key_file = tmp.path().join("node-1.key");
    secret.node_key(1).write_node_file(&key_file).unwrap();
    let enrolled = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["node", "add", "1", "--no-key-file", "--meta", &meta, "--secret-file"])
        .arg(tmp.path().join("cluster.secret"))
        .output()
        .unwrap();
    assert!(enrolled.status.success(), "{}", String::from_utf8_lossy(&enrolled.stderr));
    let port = free_port();
    let disk = tmp.path().join("n1/d0");
    let node = |advertise: &str| {
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["serve", "node", "--meta", &meta, "--id", "1", "--heartbeat-ms", "200"])
            .args(["--key-file", key_file.to_str().unwrap(), "--disk", disk.to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--advertise", advertise])
            .env("WEFT_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for bad in ["http://localhost:7701", "localhost", "localhost:0", "a b:1"] {
        let out = node(bad).wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains("HOST:PORT"), "{bad}: {said}");
    }
    let advertised = format!("localhost:{port}");
    let mut child = node(&advertised);
    let stdout = child.stdout.take().unwrap();
    procs.0.push(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("node 1 listening on http://{advertised}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let nodes = get_json(&meta, "/v1/nodes", &secret).unwrap_or_default();
        let first = &nodes["nodes"][0];
        if first["state"] == "up" {
            assert_eq!(first["endpoint"], format!("http://{advertised}"), "{nodes}");
            break;
        }
        assert!(Instant::now() < deadline, "node 1 never came up: {nodes}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
