//! Meta's store on a disk that fails (ENOSPC, as a full disk answers) and then works again,
//! through the real service over real HTTP: the store's file backend is told to fail its
//! writes (`StoreFaults`), which is the path a real full disk takes through redb.
//!
//! What must hold: while the disk fails, every write answers 503 `store_unavailable` naming
//! the IO error, and nodes whose heartbeats could not be recorded never turn into
//! `too_few_nodes`; once the disk works, meta serves again without a restart (redb alone
//! would refuse every write with `PreviousIo` until the process reopened the file), and what
//! was stored before is still there.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_meta::{
    service::{bind_with_faults, MetaConfig, RepairConfig},
    StoreFaults,
};

/// A node silent for this long is down: short, so the test sees silence matter.
const DOWN_AFTER_MS: u64 = 400;
const NODES: [u32; 3] = [1, 2, 3];

struct Api {
    client: reqwest::Client,
    base: String,
    secret: ClusterSecret,
}

impl Api {
    async fn send(&self, request: reqwest::RequestBuilder, signer: &Signer) -> (u16, Value) {
        let response = request.send_signed(signer).await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")))
    }

    async fn as_client(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        self.send(request, &self.secret.signer_for(Audience::Meta)).await
    }

    async fn heartbeat(&self, id: u32) -> (u16, Value) {
        let body = json!({
            "node_id": id,
            "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
            "pid": 4242,
            "disks": [{"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": null}],
        });
        let request = self.client.post(format!("{}/v1/heartbeat", self.base)).json(&body);
        self.send(request, &Signer::new(self.secret.node_key(id), Audience::Meta)).await
    }

    async fn create_bucket(&self, name: &str) -> (u16, Value) {
        let policy = json!({"code": "rs(2,1)", "stripe_width": 2, "cell_bytes": 4096,
                            "block_bytes": 16384});
        self.as_client(reqwest::Method::PUT, &format!("/v1/buckets/{name}"), Some(policy)).await
    }

    async fn begin(&self, bucket: &str, key: &str) -> (u16, Value) {
        let path = format!("/v1/buckets/{bucket}/objects/{key}/begin");
        self.as_client(reqwest::Method::POST, &path, Some(json!({"size": 5000}))).await
    }
}

/// True when `body` is a 503 `store_unavailable` that names the disk's real error.
fn names_no_space(status: u16, body: &Value) -> bool {
    let message = body["message"].as_str().unwrap_or_default();
    status == 503 && body["error"] == "store_unavailable" && message.contains("No space left")
}

#[tokio::test]
async fn a_full_disk_answers_store_unavailable_and_meta_recovers_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), secret.clone());
    config.down_after_ms = DOWN_AFTER_MS;
    let faults = StoreFaults::new();
    let meta = bind_with_faults(config, RepairConfig::default(), faults.clone())
        .await
        .expect("meta starts");
    let api = Api { client: reqwest::Client::new(), base: meta.endpoint(), secret };

    for id in NODES {
        let (status, body) =
            api.as_client(reqwest::Method::PUT, &format!("/v1/nodes/{id}"), None).await;
        assert_eq!(status, 200, "enrolling node {id}: {body}");
        let (status, body) = api.heartbeat(id).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = api.create_bucket("kept").await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = api.begin("kept", "before").await;
    assert_eq!(status, 200, "{body}");

    // The disk fills.
    faults.fail_writes(libc::ENOSPC);
    let (status, body) = api.create_bucket("during").await;
    assert!(names_no_space(status, &body), "a write on a full disk: {status} {body}");
    // Nodes keep heartbeating, and meta cannot record it, for longer than the down timeout.
    let silent_until = Instant::now() + Duration::from_millis(DOWN_AFTER_MS + 300);
    while Instant::now() < silent_until {
        for id in NODES {
            let (status, body) = api.heartbeat(id).await;
            assert!(names_no_space(status, &body), "a heartbeat on a full disk: {status} {body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A new object: the nodes are not down, meta's disk is full; the error says so.
    let (status, body) = api.begin("kept", "during").await;
    assert!(
        names_no_space(status, &body),
        "nodes whose heartbeats meta could not record must not read as too few nodes: \
         {status} {body}"
    );
    let (status, body) = api.begin("kept", "during").await;
    assert!(names_no_space(status, &body), "still full: {status} {body}");
    // Failed reopens do not pile their messages up.
    let message = body["message"].as_str().unwrap();
    assert_eq!(message.matches("reopening").count(), 1, "{message}");
    assert_eq!(message.matches("unavailable").count(), 1, "{message}");

    // Space returns: meta serves again without a restart, with what it stored before.
    faults.heal();
    // Meta heard the heartbeats it could not record (its liveness is kept in memory), so the
    // nodes are up at once, before their next heartbeat is recorded: a write just works.
    let (status, body) = api.begin("kept", "after").await;
    assert_eq!(
        status, 200,
        "right after the disk heals, nodes meta heard but could not record are up: {body}"
    );
    for id in NODES {
        let (status, body) = api.heartbeat(id).await;
        assert_eq!(status, 200, "a heartbeat once the disk works: {body}");
    }
    let (status, body) = api.create_bucket("after").await;
    assert_eq!(status, 201, "a write once the disk works: {body}");
    let (status, body) = api.begin("kept", "after").await;
    assert_eq!(status, 200, "a new object once the disk works: {body}");
    let (status, body) = api.as_client(reqwest::Method::GET, "/v1/buckets", None).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> =
        body["buckets"].as_array().unwrap().iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names, ["after", "kept"], "{body}");
    let (status, body) = api.as_client(reqwest::Method::GET, "/v1/status", None).await;
    assert_eq!((status, body["nodes_up"].as_u64()), (200, Some(3)), "{body}");

    meta.stop().await.expect("meta stops");
}
