//! An in-process cluster for the client's tests: the real meta service (redb on a temp dir)
//! and real nodes (weft-store disks on temp dirs), talking HTTP over loopback. Only the
//! process boundary is saved; the CLI tests in crates/weft run them as separate processes.

#![allow(dead_code)]

use std::{path::PathBuf, time::Duration};

use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret};
use weft_client::Client;
use weft_meta::service::{MetaConfig, RunningMeta};
use weft_node::{NodeConfig, RunningNode};

pub struct TestCluster {
    pub dir: tempfile::TempDir,
    /// The cluster secret meta checks and the client signs with.
    pub secret: ClusterSecret,
    pub meta: Option<RunningMeta>,
    pub meta_url: String,
    pub nodes: Vec<Option<RunningNode>>,
    pub client: Client,
}

pub const DOWN_AFTER_MS: u64 = 1500;

impl TestCluster {
    /// Meta plus `nodes` nodes of one disk each, all up and heartbeating.
    pub async fn start(nodes: usize) -> TestCluster {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::generate();
        let mut config = MetaConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            dir.path().join("meta"),
            secret.clone(),
        );
        config.down_after_ms = DOWN_AFTER_MS;
        let meta = weft_meta::service::bind(config).await.unwrap();
        let meta_url = meta.endpoint();
        let mut cluster = TestCluster {
            client: Client::new(&meta_url, &secret).unwrap(),
            dir,
            secret,
            meta: Some(meta),
            meta_url,
            nodes: Vec::new(),
        };
        for id in 1..=nodes as u32 {
            let node = cluster.start_node(id, "127.0.0.1:0".parse().unwrap()).await;
            cluster.nodes.push(Some(node));
        }
        cluster.wait_nodes_up(nodes).await;
        cluster
    }

    pub fn disk_dir(&self, id: u32) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    async fn start_node(&self, id: u32, listen: std::net::SocketAddr) -> RunningNode {
        // Enrolled first (idempotent), as `weft up` and `weft node add` do.
        self.client.meta.put_json(&format!("/v1/nodes/{id}"), Value::Null).await.unwrap();
        let mut config =
            NodeConfig::new(id, listen, vec![self.disk_dir(id)], self.secret.node_key(id));
        config.meta_url = Some(self.meta_url.clone());
        config.heartbeat_interval_ms = 200;
        config.thresholds = host_fill_ignored();
        weft_node::bind(config).await.unwrap()
    }

    /// Starts node `id` again on its own disk directory (a new port; meta learns it from
    /// the heartbeats).
    pub async fn restart_node(&mut self, id: u32) {
        assert!(self.nodes[id as usize - 1].is_none(), "node {id} is running");
        let node = self.start_node(id, "127.0.0.1:0".parse().unwrap()).await;
        self.nodes[id as usize - 1] = Some(node);
    }

    /// Waits until meta reports `count` nodes up.
    pub async fn wait_nodes_up(&self, count: usize) {
        self.wait_for(Duration::from_secs(10), |status| {
            status["nodes_up"].as_u64() == Some(count as u64)
        })
        .await;
    }

    /// Polls meta's status until `done` holds; panics with the last status after `limit`.
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let status = self.client.meta.get_json("/v1/status").await.unwrap();
            if done(&status) {
                return status;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out; last status {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops node `id` (its port closes: clients get connection refused).
    pub async fn stop_node(&mut self, id: u32) {
        if let Some(node) = self.nodes[id as usize - 1].take() {
            node.stop().await.unwrap();
        }
    }

    pub async fn create_bucket(&self, name: &str, policy: Value) {
        let url = format!("{}/v1/buckets/{name}", self.meta_url);
        let signer = self.secret.signer_for(Audience::Meta);
        let response =
            reqwest::Client::new().put(url).json(&policy).send_signed(&signer).await.unwrap();
        assert!(response.status().is_success(), "{}", response.text().await.unwrap());
    }

    /// Every unit file of node `id`.
    pub fn unit_files(&self, id: u32) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut stack = vec![self.disk_dir(id).join("units")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        files.sort();
        files
    }
}

/// A policy JSON: `code`, stripe width, cell and block bytes.
/// Disk thresholds under which only a filesystem with no byte left is full: how full the
/// host's filesystem is is no business of these tests.
pub fn host_fill_ignored() -> weft_node::Thresholds {
    weft_node::Thresholds::new(1.0, 1.0).expect("ratios of 1 are valid")
}

pub fn policy(code: &str, width: usize, cell: u64, block: u64) -> Value {
    json!({"code": code, "stripe_width": width, "cell_bytes": cell, "block_bytes": block})
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}
