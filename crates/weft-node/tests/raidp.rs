//! weft-node's RAIDP routes (docs/node-api.md, "RAIDP") over real HTTP, on temporary disks
//! and Lstor directories.

use std::path::PathBuf;

use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_node::{bind, NodeConfig, RunningNode, RAIDP_CRC_HEADER};

const SUPERCHUNK: u64 = 1 << 20;

struct Raidp {
    node: Option<RunningNode>,
    base: String,
    client: Client,
    signer: Signer,
    secret: ClusterSecret,
    disks: Vec<PathBuf>,
    lstor: PathBuf,
    dir: tempfile::TempDir,
}

/// Node 3 with two disks; disk 0 has an Lstor, disk 1 none.
async fn start_in(dir: tempfile::TempDir, secret: ClusterSecret) -> Raidp {
    let disks = vec![dir.path().join("disk0"), dir.path().join("disk1")];
    let lstor = dir.path().join("lstor0");
    let mut config =
        NodeConfig::new(3, "127.0.0.1:0".parse().unwrap(), disks.clone(), secret.node_key(3));
    config.thresholds = weft_node::Thresholds::new(1.0, 1.0).unwrap();
    config.lstors = vec![Some(lstor.clone())];
    let node = bind(config).await.unwrap();
    let base = node.endpoint();
    let signer = secret.signer_for(Audience::Node(3));
    Raidp { node: Some(node), base, client: Client::new(), signer, secret, disks, lstor, dir }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + i / 253) as u8) ^ seed).collect()
}

impl Raidp {
    async fn restart(mut self) -> Raidp {
        self.node.take().unwrap().stop().await.unwrap();
        start_in(self.dir, self.secret).await
    }

    async fn write_as(
        &self,
        disk: u32,
        slot: u32,
        offset: u64,
        data: &[u8],
        crc: u32,
        superchunk: u64,
    ) -> reqwest::Response {
        self.client
            .put(format!(
                "{}/v1/disks/{disk}/raidp/slots/{slot}?offset={offset}&superchunk_bytes={superchunk}&parities=1",
                self.base
            ))
            .header(RAIDP_CRC_HEADER, crc.to_string())
            .body(data.to_vec())
            .send_signed(&self.signer)
            .await
            .unwrap()
    }

    async fn write(&self, slot: u32, offset: u64, data: &[u8]) -> u64 {
        let response = self.write_as(0, slot, offset, data, crc32c::crc32c(data), SUPERCHUNK).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json::<Value>().await.unwrap()["seq"].as_u64().unwrap()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(format!("{}{path}", self.base)).send_signed(&self.signer).await.unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send_signed(&self.signer)
            .await
            .unwrap()
    }

    async fn read(&self, slot: u32, offset: u64, len: u64) -> Vec<u8> {
        let response =
            self.get(&format!("/v1/disks/0/raidp/slots/{slot}?offset={offset}&len={len}")).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes().await.unwrap().to_vec()
    }

    async fn state(&self) -> Value {
        self.get("/v1/disks/0/raidp").await.json().await.unwrap()
    }
}

async fn error_code(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    (status, body["error"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn slot_writes_keep_the_lstor_the_xor_of_the_slots() {
    let node = start_in(tempfile::tempdir().unwrap(), ClusterSecret::generate()).await;
    assert_eq!(node.state().await["state"], "unformatted");
    // The first write creates the Lstor with the geometry it names.
    let a = pattern(300_000, 1);
    let b = pattern(200_000, 2);
    let s1 = node.write(0, 0, &a).await;
    let s2 = node.write(4, 100_000, &b).await;
    let state = node.state().await;
    assert_eq!(state["state"], "ready");
    assert_eq!(state["superchunk_bytes"], SUPERCHUNK);
    assert_eq!(state["pending"], 2);
    assert_eq!(state["slots"], json!([{"slot":0,"bytes":300_000},{"slot":4,"bytes":300_000}]));
    assert_eq!(node.read(0, 0, 300_000).await, a);
    assert_eq!(node.read(4, 100_000, 200_000).await, b);
    // Past what was written reads zeros.
    assert_eq!(node.read(4, 0, 1000).await, vec![0u8; 1000]);
    // The parity is the XOR of the two slots.
    let parity = node.get("/v1/disks/0/raidp/parity/0?offset=0&len=300000").await;
    assert_eq!(parity.status(), StatusCode::OK);
    let parity = parity.bytes().await.unwrap();
    for i in [0usize, 99_999, 100_000, 123_456, 299_999] {
        let from_b = if i >= 100_000 { b[i - 100_000] } else { 0 };
        assert_eq!(parity[i], a[i] ^ from_b, "parity byte {i}");
    }
    // An update in place (read-modify-write) keeps the parity true.
    node.write(0, 1000, &pattern(5000, 9)).await;
    let verify: Value =
        node.post("/v1/disks/0/raidp/verify", json!({})).await.json().await.unwrap();
    assert_eq!(verify["clean"], true, "{verify}");
    let pending: Value = node.get("/v1/disks/0/raidp/pending").await.json().await.unwrap();
    assert_eq!(pending["pending"].as_array().unwrap().len(), 3);
    assert_eq!(pending["pending"][0]["seq"], s1);
    assert_eq!(
        pending["pending"][1],
        json!({"seq": s2, "slot": 4, "offset": 100_000, "bytes": 200_000})
    );
    let seqs: Vec<u64> =
        pending["pending"].as_array().unwrap().iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let cleared: Value =
        node.post("/v1/disks/0/raidp/clear", json!({ "seqs": seqs })).await.json().await.unwrap();
    assert_eq!(cleared["journal_emptied"], true);
    assert_eq!(node.state().await["pending"], 0);

    // Bad input changes nothing.
    let data = pattern(4096, 3);
    let (status, code) =
        error_code(node.write_as(0, 1, 0, &data, crc32c::crc32c(&data) ^ 1, SUPERCHUNK).await)
            .await;
    assert_eq!((status, code.as_str()), (StatusCode::BAD_REQUEST, "bad_checksum"));
    let (status, code) =
        error_code(node.write_as(0, 1, 0, &data, crc32c::crc32c(&data), SUPERCHUNK * 2).await)
            .await;
    assert_eq!((status, code.as_str()), (StatusCode::CONFLICT, "raidp_mismatch"));
    let (status, _) = error_code(
        node.write_as(0, 1, SUPERCHUNK - 10, &data, crc32c::crc32c(&data), SUPERCHUNK).await,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, code) =
        error_code(node.write_as(1, 0, 0, &data, crc32c::crc32c(&data), SUPERCHUNK).await).await;
    assert_eq!((status, code.as_str()), (StatusCode::NOT_FOUND, "no_lstor"));
    let (status, code) =
        error_code(node.get("/v1/disks/0/raidp/slots/0?offset=0&len=9000000").await).await;
    assert_eq!((status, code.as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
    assert!(node.state().await["slots"].as_array().unwrap().iter().all(|s| s["slot"] != 1));
    let verify: Value =
        node.post("/v1/disks/0/raidp/verify", json!({})).await.json().await.unwrap();
    assert_eq!(verify["clean"], true, "{verify}");

    // A corrupt slot byte is found by verify and refused by reads.
    let slot_file = node.disks[0].join("superchunks").join("slot-000004");
    let mut bytes = std::fs::read(&slot_file).unwrap();
    bytes[150_000] ^= 0x40;
    std::fs::write(&slot_file, bytes).unwrap();
    let verify: Value =
        node.post("/v1/disks/0/raidp/verify", json!({})).await.json().await.unwrap();
    assert_eq!(verify["clean"], false);
    assert_eq!(verify["corrupt_slots"], json!([4]));
    let (status, code) =
        error_code(node.get("/v1/disks/0/raidp/slots/4?offset=131072&len=100").await).await;
    assert_eq!((status, code.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "corrupt"));
}

#[tokio::test]
async fn a_disk_whose_lstor_is_gone_refuses_raidp_writes_and_still_reads() {
    let node = start_in(tempfile::tempdir().unwrap(), ClusterSecret::generate()).await;
    let a = pattern(70_000, 5);
    node.write(2, 0, &a).await;
    let lstor = node.lstor.clone();
    std::fs::remove_dir_all(&lstor).unwrap();
    let node = node.restart().await;
    let state = node.state().await;
    assert_eq!(state["state"], "refused", "{state}");
    assert!(state["reason"].as_str().unwrap().contains("parity is lost"), "{state}");
    let (status, code) =
        error_code(node.write_as(0, 2, 0, &a, crc32c::crc32c(&a), SUPERCHUNK).await).await;
    assert_eq!((status, code.as_str()), (StatusCode::SERVICE_UNAVAILABLE, "lstor_refused"));
    // No fresh Lstor was made up for it.
    assert!(!lstor.join("lstor.header").exists());
    let verify: Value =
        node.post("/v1/disks/0/raidp/verify", json!({})).await.json().await.unwrap();
    assert_eq!(verify["clean"], false);
    // Heartbeats and health say so too.
    let health: Value = node.get("/v1/health").await.json().await.unwrap();
    assert_eq!(health["disks"][0]["raidp"]["state"], "refused");
    assert!(health["disks"][1].get("raidp").is_none());
}
