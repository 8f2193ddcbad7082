//! A real cluster for integration tests: the `weft up` binary on a temporary directory, meta
//! and nodes on free ports, driven with the real CLI.
//!
//! Invariants:
//! - Nothing outlives the test: dropping a [`Cluster`] (also while a test panics) kills
//!   `weft up` and every child it reported, then removes the directory.
//! - Every wait is bounded and says what it waited for when it times out.

// Each test binary uses its own part of this fixture.
#![allow(dead_code)]

use std::{
    fs::File,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};
use weft_auth::sign_reqwest::SendSignedBlocking;

use serde_json::Value;

/// How long `weft up` may take to print its ready line (generous: tests run side by side
/// on a small machine, maybe while other crates build).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `weft up` may take to exit after a signal (children get 5 s of grace each).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Cluster::wait_for_status`] polls.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);
/// Disk ratios under which only a filesystem with no byte left is full: test clusters run on
/// whatever share of the host's filesystem is free, which is no business of theirs.
pub const HOST_FILL_IGNORED: [&str; 4] = ["--nearfull-ratio", "1", "--full-ratio", "1"];

/// The `weft` binary under test.
pub fn weft_bin() -> &'static str {
    env!("CARGO_BIN_EXE_weft")
}

/// True when `pid` runs (a zombie does not count: it will never run again).
pub fn is_running(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks the pid exists.
    if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// Sends `signal` to `pid`; false when it is gone.
pub fn signal(pid: u32, signal: libc::c_int) -> bool {
    // SAFETY: kill(2) on a pid of this test's own cluster.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// A running `weft up`, with what it reported when ready.
#[derive(Debug)]
pub struct Cluster {
    tmp: tempfile::TempDir,
    nodes: usize,
    extra_args: Vec<String>,
    up: Option<Child>,
    /// The ready object `weft up --json` printed (also in DIR/cluster.json).
    ready: Value,
    /// Every line `weft up` printed after the ready object (JSON events), from a reader.
    events: Option<mpsc::Receiver<String>>,
    /// Every child pid any run reported, for Drop.
    child_pids: Vec<u32>,
    /// Runs of `weft up` so far (names its stderr file).
    runs: usize,
    /// How long the last start took, from spawning `weft up` to its ready line.
    ready_after: Duration,
}

impl Cluster {
    /// `weft get PATH` to stdout; panics with weft's stderr when it fails.
    #[allow(dead_code)]
    pub fn get(&self, path: &str) -> Vec<u8> {
        let out = self.weft(&["get", path]);
        assert!(out.status.success(), "get {path}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    /// `weft put` of `bytes` as PATH (through a file in the cluster's directory); panics with
    /// weft's stderr when it fails.
    #[allow(dead_code)]
    pub fn put_bytes(&self, path: &str, bytes: &[u8]) {
        let file = self.dir().join("put-input");
        std::fs::write(&file, bytes).expect("the input file");
        let out = self.weft(&["put", file.to_str().expect("a UTF-8 path"), path]);
        assert!(out.status.success(), "put {path}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `weft stat PATH --json`.
    #[allow(dead_code)]
    pub fn stat(&self, path: &str) -> serde_json::Value {
        self.weft_json(&["stat", path, "--json"])
    }

    /// Runs `weft up --dir <tempdir> --meta-listen 127.0.0.1:0 --nodes N --json <extra_args>`
    /// and waits for its ready line.
    pub fn start(nodes: usize, extra_args: &[&str]) -> Cluster {
        let mut cluster = Cluster {
            tmp: tempfile::tempdir().expect("a temporary directory"),
            nodes,
            extra_args: extra_args.iter().map(|&a| a.to_owned()).collect(),
            up: None,
            ready: Value::Null,
            events: None,
            child_pids: Vec::new(),
            runs: 0,
            ready_after: Duration::ZERO,
        };
        cluster.launch();
        cluster
    }

    fn launch(&mut self) {
        assert!(self.up.is_none(), "weft up is already running");
        self.runs += 1;
        let stderr_path = self.stderr_path();
        let stderr = File::create(&stderr_path).expect("a stderr file");
        let dir = self.dir();
        let nodes = self.nodes.to_string();
        let mut args = vec![
            "up",
            "--dir",
            dir.to_str().expect("a UTF-8 temporary path"),
            "--meta-listen",
            "127.0.0.1:0",
            "--nodes",
            &nodes,
            "--json",
        ];
        // How full the host's filesystem is is not under test: a disk only counts as full
        // when nothing is left (the full-disk test sets its own ratios).
        if !self.extra_args.iter().any(|a| a.starts_with("--full-ratio")) {
            args.extend(HOST_FILL_IGNORED);
        }
        // Lstors beside the cluster, not in /dev/shm: a test's memory goes with its temp dir.
        let lstors = dir.join("lstors");
        if !self.extra_args.iter().any(|a| a.starts_with("--lstor-dir")) {
            args.extend(["--lstor-dir", lstors.to_str().expect("a UTF-8 temporary path")]);
        }
        args.extend(self.extra_args.iter().map(String::as_str));
        let started = Instant::now();
        let mut up = Command::new(weft_bin())
            .args(&args)
            .env("WEFT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("weft up starts");
        let stdout = up.stdout.take().expect("stdout is piped");
        self.up = Some(up);
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = match lines.recv_timeout(READY_TIMEOUT) {
            Ok(line) => line,
            Err(error) => panic!(
                "weft up {args:?} printed no ready line ({error}); its stderr:\n{}",
                self.up_stderr()
            ),
        };
        self.ready_after = started.elapsed();
        self.ready = serde_json::from_str(&first).unwrap_or_else(|e| {
            panic!("weft up's ready line is not JSON ({e}): {first}\n{}", self.up_stderr())
        });
        self.events = Some(lines);
        let pids = self.child_pids_now();
        self.child_pids.extend(pids);
    }

    fn stderr_path(&self) -> PathBuf {
        self.tmp.path().join(format!("up-{}.stderr", self.runs))
    }

    /// What the latest `weft up` wrote on stderr so far.
    pub fn up_stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    /// The cluster's directory (`weft up --dir`).
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("cluster")
    }

    /// The ready object of the latest run.
    pub fn ready(&self) -> &Value {
        &self.ready
    }

    /// How long the latest run took to be ready, as the test saw it.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// Meta's base URL, `http://127.0.0.1:PORT`.
    pub fn meta_url(&self) -> String {
        self.ready["meta"].as_str().expect("the ready object names meta").to_owned()
    }

    /// The pid of the running `weft up`.
    pub fn up_pid(&self) -> u32 {
        self.up.as_ref().expect("weft up is running").id()
    }

    /// True while `weft up` has not exited.
    pub fn up_is_running(&mut self) -> bool {
        let up = self.up.as_mut().expect("weft up was started");
        up.try_wait().expect("weft up can be waited for").is_none()
    }

    /// Node ids in the ready object.
    pub fn node_ids(&self) -> Vec<u32> {
        self.ready_nodes().iter().map(|n| n["id"].as_u64().unwrap() as u32).collect()
    }

    fn ready_nodes(&self) -> Vec<Value> {
        self.ready["nodes"].as_array().cloned().expect("the ready object lists nodes")
    }

    fn ready_node(&self, id: u32) -> Value {
        let nodes = self.ready_nodes();
        nodes
            .into_iter()
            .find(|n| n["id"].as_u64() == Some(u64::from(id)))
            .unwrap_or_else(|| panic!("no node {id} in {}", self.ready))
    }

    /// The pid of node `id` as `weft up` started it.
    pub fn node_pid(&self, id: u32) -> u32 {
        self.ready_node(id)["pid"].as_u64().expect("a node pid") as u32
    }

    /// The endpoint of node `id`.
    pub fn node_endpoint(&self, id: u32) -> String {
        self.ready_node(id)["endpoint"].as_str().expect("a node endpoint").to_owned()
    }

    /// Pids of meta, every node and the repair executor (when started) of the latest run.
    pub fn child_pids_now(&self) -> Vec<u32> {
        let mut pids: Vec<u32> =
            self.ready_nodes().iter().map(|n| n["pid"].as_u64().unwrap() as u32).collect();
        pids.extend(self.ready["meta_pid"].as_u64().map(|p| p as u32));
        pids.extend(self.ready["repair"]["pid"].as_u64().map(|p| p as u32));
        pids
    }

    /// Kills node `id` for a drill (`weft node kill`, SIGKILL): it stays down, as `weft up`
    /// restarts only the children no drill holds down.
    pub fn kill_node(&self, id: u32) {
        let killed = self.weft_json(&["node", "kill", &id.to_string(), "--json"]);
        assert_eq!(killed["exited"], true, "node {id} did not exit: {killed}");
    }

    /// DIR/cluster.json as `weft up` last wrote it.
    pub fn cluster_file(&self) -> Value {
        let path = self.dir().join("cluster.json");
        let text = std::fs::read_to_string(&path).expect("weft up wrote cluster.json");
        serde_json::from_str(&text).expect("cluster.json is JSON")
    }

    /// `weft status --json`, or None while it fails (e.g. meta is being restarted).
    pub fn try_status(&self) -> Option<Value> {
        let output = self.weft(&["status", "--json"]);
        if !output.status.success() {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }

    /// Polls `weft status --json` until it answers and `want` holds, at most
    /// [`STATUS_TIMEOUT`]; failed answers (meta restarting) are waited through.
    pub fn wait_for_answering_status(&self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + STATUS_TIMEOUT;
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(status) = self.try_status() {
                if want(&status) {
                    return status;
                }
                last = Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}; last status: {last:?}");
    }

    /// The lines `weft up` printed since the last call (JSON events).
    pub fn events(&self) -> Vec<Value> {
        let Some(lines) = &self.events else { return Vec::new() };
        lines
            .try_iter()
            .map(|line| serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    /// Waits for an event matching `want`, at most [`STATUS_TIMEOUT`].
    pub fn wait_for_event(&self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + STATUS_TIMEOUT;
        let mut seen = Vec::new();
        let lines = self.events.as_ref().expect("weft up was started");
        while Instant::now() < deadline {
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(50)) {
                let event: Value = serde_json::from_str(&line).expect("a JSON event");
                if want(&event) {
                    return event;
                }
                seen.push(event);
            }
        }
        panic!("weft up printed no {what} event; it printed {seen:?}");
    }

    /// SIGTERM to `weft up` (what a service manager sends); waits for it to exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.stop_with(libc::SIGTERM)
    }

    /// Sends `sig` (SIGTERM, SIGINT) to `weft up` and waits for it to exit.
    pub fn stop_with(&mut self, sig: libc::c_int) -> ExitStatus {
        let mut up = self.up.take().expect("weft up is running");
        signal(up.id(), sig);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = up.try_wait().expect("weft up can be waited for") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = up.kill();
                let _ = up.wait();
                panic!("weft up did not exit within {STOP_TIMEOUT:?} of signal {sig}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `weft up` again on the same directory with the same flags (stopping the
    /// running one first, with SIGTERM).
    pub fn restart(&mut self) {
        if self.up.is_some() {
            let status = self.stop();
            assert!(status.success(), "weft up exited with {status} on SIGTERM");
        }
        self.launch();
    }

    /// The cluster secret `weft up` made in its directory.
    pub fn secret_file(&self) -> PathBuf {
        self.dir().join("cluster.secret")
    }

    /// The cluster secret, read.
    pub fn secret(&self) -> weft_auth::ClusterSecret {
        weft_auth::ClusterSecret::read_file(&self.secret_file()).expect("weft up wrote the secret")
    }

    /// Runs `weft ARGS` with `WEFT_META` and `WEFT_SECRET_FILE` pointing at this cluster.
    pub fn weft(&self, args: &[&str]) -> Output {
        Command::new(weft_bin())
            .args(args)
            .env("WEFT_META", self.meta_url())
            .env("WEFT_SECRET_FILE", self.secret_file())
            .stdin(Stdio::null())
            .output()
            .expect("weft runs")
    }

    /// `weft bucket create NAME --json POLICY…` (asserted to succeed): the bucket record.
    pub fn create_bucket(&self, name: &str, policy: &[&str]) -> Value {
        let mut args = vec!["bucket", "create", name, "--json"];
        args.extend_from_slice(policy);
        self.weft_json(&args)
    }

    /// Runs `weft ARGS`, asserts it succeeded and returns its stdout parsed as one JSON
    /// object.
    pub fn weft_json(&self, args: &[&str]) -> Value {
        let output = self.weft(args);
        assert!(
            output.status.success(),
            "weft {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).expect("UTF-8 output");
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("weft {args:?} printed no JSON object ({e}): {stdout}"))
    }

    /// Runs `weft ARGS`, asserts it failed and returns its stderr.
    pub fn weft_fails(&self, args: &[&str]) -> String {
        let output = self.weft(args);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            !output.status.success(),
            "weft {args:?} should fail but printed {}",
            String::from_utf8_lossy(&output.stdout)
        );
        stderr
    }

    /// `weft status --json`.
    pub fn status(&self) -> Value {
        self.weft_json(&["status", "--json"])
    }

    /// Polls `weft status --json` until `want` holds, at most [`STATUS_TIMEOUT`].
    pub fn wait_for_status(&self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + STATUS_TIMEOUT;
        loop {
            let status = self.status();
            if want(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}; status: {status}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Polls `weft status --json` until `want` holds, at most `timeout`.
    pub fn wait_for_status_within(
        &self,
        what: &str,
        timeout: Duration,
        want: impl Fn(&Value) -> bool,
    ) -> Value {
        poll_until(what, timeout, || self.status(), want)
    }

    /// GET `path` of meta's HTTP API (e.g. `/v1/transitions`, which no command shows): the
    /// status code and the JSON answer.
    pub fn meta_get(&self, path: &str) -> (u16, Value) {
        let url = format!("{}{path}", self.meta_url());
        let signer = self.secret().signer_for(weft_auth::Audience::Meta);
        let response = reqwest::blocking::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send_signed(&signer)
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = response.status().as_u16();
        let text = response.text().unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("GET {url} answered no JSON ({e}): {text}"));
        (status, value)
    }

    /// `method` of `path` of meta's HTTP API with a JSON `body` (signed as a client): the
    /// status code and the raw answer.
    pub fn meta_call(&self, method: reqwest::Method, path: &str, body: &Value) -> (u16, Vec<u8>) {
        let url = format!("{}{path}", self.meta_url());
        let signer = self.secret().signer_for(weft_auth::Audience::Meta);
        let response = reqwest::blocking::Client::new()
            .request(method, &url)
            .timeout(Duration::from_secs(60))
            .json(body)
            .send_signed(&signer)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        (status, response.bytes().unwrap_or_else(|e| panic!("{path}: {e}")).to_vec())
    }

    /// The pid of the meta process `weft up` runs.
    pub fn meta_pid(&self) -> u32 {
        let file = self.cluster_file();
        let services = file["services"].as_array().cloned().unwrap_or_default();
        let meta = services.into_iter().find(|s| s["role"] == "meta").expect("meta is listed");
        meta["pid"].as_u64().expect("meta's pid") as u32
    }

    /// Spawns `weft ARGS` against this cluster without waiting (stdout and stderr piped), for
    /// drills that kill it midway.
    pub fn spawn_weft(&self, args: &[&str]) -> Child {
        Command::new(weft_bin())
            .args(args)
            .env("WEFT_META", self.meta_url())
            .env("WEFT_SECRET_FILE", self.secret_file())
            .env("WEFT_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weft runs")
    }

    /// `kill -9` of meta: `weft up` restarts it on the same address; waits until cluster.json
    /// shows it running again and returns its new pid.
    pub fn kill_meta(&mut self) -> u32 {
        let meta = |file: &Value| {
            let services = file["services"].as_array().cloned().unwrap_or_default();
            services.into_iter().find(|s| s["role"] == "meta").expect("cluster.json lists meta")
        };
        let pid = meta(&self.cluster_file())["pid"].as_u64().expect("meta's pid") as u32;
        assert!(signal(pid, libc::SIGKILL), "meta (pid {pid}) was not running");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            let now = meta(&self.cluster_file());
            let new_pid = now["pid"].as_u64().expect("meta's pid") as u32;
            if new_pid != pid && now["state"] == "running" {
                self.child_pids.push(new_pid);
                return new_pid;
            }
            assert!(Instant::now() < deadline, "weft up did not restart meta: {now}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9` of `weft up` itself: its children get SIGTERM from the kernel (parent death
    /// signal) and stop on their own; waits until every one of them is gone, so a restart
    /// never shares a disk or meta's store with a survivor.
    pub fn kill_up(&mut self) {
        let mut up = self.up.take().expect("weft up is running");
        let _ = up.kill();
        let _ = up.wait();
        let deadline = Instant::now() + STOP_TIMEOUT;
        for pid in self.child_pids_now() {
            while runs_weft(pid) {
                assert!(
                    Instant::now() < deadline,
                    "child {pid} still runs {STOP_TIMEOUT:?} after weft up was killed"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The unit keys stored on each node's disks, by node id, read from the unit files
    /// themselves (`DIR/node-<id>/disk-<j>/units/<xx>/<key>.<suffix>`).
    pub fn unit_keys_on_disks(&self) -> std::collections::BTreeMap<u32, Vec<String>> {
        let mut keys = std::collections::BTreeMap::new();
        for id in 1..=self.nodes as u32 {
            let mut found = Vec::new();
            let node_dir = self.dir().join(format!("node-{id}"));
            let disks = std::fs::read_dir(&node_dir).into_iter().flatten().flatten();
            let mut stack: Vec<PathBuf> = disks.map(|d| d.path().join("units")).collect();
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else { continue };
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                        found.push(name.split('.').next().unwrap_or(name).to_owned());
                    }
                }
            }
            found.sort();
            keys.insert(id, found);
        }
        keys
    }

    /// Node states in a status object, by id.
    pub fn states(status: &Value) -> Vec<(u64, String)> {
        status["nodes"]
            .as_array()
            .expect("status lists nodes")
            .iter()
            .map(|n| (n["id"].as_u64().unwrap(), n["state"].as_str().unwrap().to_owned()))
            .collect()
    }
}

/// Reads `read()` every 100 ms until `want` holds of it, at most `timeout` (then panics with
/// `what` and the last value).
pub fn poll_until(
    what: &str,
    timeout: Duration,
    read: impl Fn() -> Value,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let value = read();
        if want(&value) {
            return value;
        }
        assert!(Instant::now() < deadline, "waited {timeout:?} for {what}; last: {value}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// True when `pid` still runs this test's `weft` binary (so Drop never signals a process
/// that merely reused a pid).
fn runs_weft(pid: u32) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return is_running(pid);
    };
    let argv0 = raw.split(|&b| b == 0).next().unwrap_or_default();
    is_running(pid) && Path::new(&*String::from_utf8_lossy(argv0)).ends_with("weft")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let netns = self.extra_args.iter().any(|a| a == "--netns");
        if let Some(mut up) = self.up.take() {
            // A namespaced cluster is stopped cleanly, so it removes its hosts itself.
            if netns && signal(up.id(), libc::SIGTERM) {
                let deadline = Instant::now() + STOP_TIMEOUT;
                while up.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = up.kill();
            let _ = up.wait();
        }
        for &pid in &self.child_pids {
            if runs_weft(pid) {
                signal(pid, libc::SIGKILL);
            }
        }
        if netns {
            // Whatever a failed test left: the namespaces cluster.json names, and the bridge.
            let file: Value = std::fs::read_to_string(self.dir().join("cluster.json"))
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or(Value::Null);
            for host in file["netns"]["hosts"].as_array().into_iter().flatten() {
                if let Some(name) = host["netns"].as_str() {
                    let _ = Command::new("ip").args(["netns", "del", name]).output();
                }
            }
            if let Some(bridge) = file["netns"]["bridge"].as_str() {
                let _ = Command::new("ip").args(["link", "del", bridge]).output();
            }
        }
    }
}
