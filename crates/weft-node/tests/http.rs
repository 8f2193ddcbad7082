//! weft-node's HTTP API driven by a real HTTP client against a real server on 127.0.0.1:0 with
//! temporary disk directories.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use reqwest::{header, Client, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_node::{bind, Heartbeat, NodeConfig, RunningNode};
use weft_store::UnitKey;

/// Disk thresholds under which only a filesystem with no byte left is full: how full the
/// host's filesystem is is no business of these tests.
fn host_fill_ignored() -> weft_node::Thresholds {
    weft_node::Thresholds::new(1.0, 1.0).expect("ratios of 1 are valid")
}

struct TestNode {
    node: RunningNode,
    base: String,
    client: Client,
    /// Signs as clients do for node 7 (with node 7's key, derived from the secret).
    signer: Signer,
    secret: ClusterSecret,
    disks: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

async fn start_with(meta_url: Option<String>, heartbeat_interval_ms: u64) -> TestNode {
    start_in_rack(meta_url, heartbeat_interval_ms, None).await
}

async fn start_in_rack(
    meta_url: Option<String>,
    heartbeat_interval_ms: u64,
    rack: Option<u32>,
) -> TestNode {
    start_keyed(meta_url, heartbeat_interval_ms, rack, ClusterSecret::generate()).await
}

async fn start_keyed(
    meta_url: Option<String>,
    heartbeat_interval_ms: u64,
    rack: Option<u32>,
    secret: ClusterSecret,
) -> TestNode {
    let dir = tempfile::tempdir().unwrap();
    let disks = vec![dir.path().join("disk0"), dir.path().join("disk1")];
    let mut config =
        NodeConfig::new(7, "127.0.0.1:0".parse().unwrap(), disks.clone(), secret.node_key(7));
    config.meta_url = meta_url;
    config.heartbeat_interval_ms = heartbeat_interval_ms;
    config.rack = rack;
    config.thresholds = host_fill_ignored();
    let node = bind(config).await.unwrap();
    assert_ne!(node.local_addr().port(), 0);
    let base = node.endpoint();
    let signer = secret.signer_for(Audience::Node(7));
    TestNode { node, base, client: Client::new(), signer, secret, disks, _dir: dir }
}

async fn start() -> TestNode {
    start_with(None, 1000).await
}

/// Deterministic, position-dependent bytes, so a shifted range never matches by chance.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + i / 251) as u8) ^ seed).collect()
}

impl TestNode {
    /// The signature header lines of a raw HTTP/1.1 request (each ends with CRLF).
    fn signed_lines(&self, method: &str, path: &str) -> String {
        let unsigned = weft_auth::UNSIGNED_PAYLOAD;
        let authorization = self.signer.authorization(method, path, "", unsigned);
        format!("authorization: {authorization}\r\nx-weft-content-sha256: {unsigned}\r\n")
    }

    fn url(&self, disk: &str, key: UnitKey) -> String {
        format!("{}/v1/disks/{disk}/units/{key}", self.base)
    }

    async fn put(&self, disk: u32, key: UnitKey, bytes: &[u8]) -> reqwest::Response {
        self.client
            .put(self.url(&disk.to_string(), key))
            .body(bytes.to_vec())
            .send_signed(&self.signer)
            .await
            .unwrap()
    }

    async fn get(&self, disk: u32, key: UnitKey, range: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(self.url(&disk.to_string(), key));
        if let Some(range) = range {
            request = request.header(header::RANGE, range);
        }
        request.send_signed(&self.signer).await.unwrap()
    }

    async fn json(&self, path: &str) -> Value {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send_signed(&self.signer)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        response.json().await.unwrap()
    }
}

async fn error_body(response: reqwest::Response) -> Value {
    let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/json"), "{content_type}");
    response.json().await.unwrap()
}

/// The file of `key` on a disk directory, found by scanning the fan-out directories.
fn unit_file(disk: &Path, key: UnitKey) -> PathBuf {
    let name = key.file_name();
    for fanout in std::fs::read_dir(disk.join("units")).unwrap() {
        let path = fanout.unwrap().path().join(&name);
        if path.exists() {
            return path;
        }
    }
    panic!("no file {name} under {}", disk.display());
}

#[tokio::test]
async fn put_get_round_trip_for_many_sizes() {
    let node = start().await;
    for (block, len) in [0usize, 1, 65537, 3 << 20].into_iter().enumerate() {
        let key = UnitKey::data(0xabc, block as u32, 5);
        let bytes = pattern(len, block as u8);
        let put = node.put(1, key, &bytes).await;
        assert_eq!(put.status(), StatusCode::CREATED, "len {len}");
        let info: Value = put.json().await.unwrap();
        assert_eq!(info["len_bytes"], len as u64);
        assert_eq!(info["generation"], 5);
        assert_eq!(info["unit"], key.to_string());

        let get = node.get(1, key, None).await;
        assert_eq!(get.status(), StatusCode::OK, "len {len}");
        assert_eq!(get.headers()["x-weft-generation"], "5");
        let body = get.bytes().await.unwrap();
        assert_eq!(body.len(), len);
        assert!(body[..] == bytes[..], "len {len}: body differs");

        let head = node.client.head(node.url("1", key)).send_signed(&node.signer).await.unwrap();
        assert_eq!(head.status(), StatusCode::OK);
        assert_eq!(head.headers()["x-weft-unit-length"], len.to_string().as_str());
        assert_eq!(head.headers()["x-weft-generation"], "5");
        // The same unit is not on the other disk.
        assert_eq!(node.get(0, key, None).await.status(), StatusCode::NOT_FOUND);
    }
    // The `.unit` file name is accepted as well as the Display form.
    let key = UnitKey::parity(0xabc, 0, 1, 2);
    let url = format!("{}/v1/disks/0/units/{}", node.base, key.file_name());
    let put = node.client.put(&url).body(vec![9u8; 10]).send_signed(&node.signer).await.unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    assert_eq!(node.get(0, key, None).await.bytes().await.unwrap()[..], [9u8; 10]);
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn ranged_gets_equal_the_slices() {
    let node = start().await;
    for (block, len) in [65537usize, 3 << 20].into_iter().enumerate() {
        let key = UnitKey::data(1, block as u32, 0);
        let bytes = pattern(len, 3);
        assert_eq!(node.put(0, key, &bytes).await.status(), StatusCode::CREATED);
        let last = len - 1;
        let ranges: Vec<(String, usize, usize)> = vec![
            ("bytes=0-0".into(), 0, 1),
            (format!("bytes={last}-{last}"), last, len),
            ("bytes=1000-70000".into(), 1000, 70001.min(len)),
            ("bytes=65535-65536".into(), 65535, 65537),
            (format!("bytes={}-", len - 10), len - 10, len),
            ("bytes=-100".into(), len - 100, len),
            (format!("bytes=-{}", len + 5), 0, len),
            (format!("bytes=5-{}", len + 1000), 5, len),
            // Crosses the node's 1 MiB read chunks.
            (format!("bytes=100-{}", len.min(2_200_000) - 1), 100, len.min(2_200_000)),
        ];
        for (range, start, end) in ranges {
            let response = node.get(0, key, Some(&range)).await;
            assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT, "{range}");
            assert_eq!(
                response.headers()[header::CONTENT_RANGE],
                format!("bytes {start}-{}/{len}", end - 1).as_str(),
                "{range}"
            );
            let body = response.bytes().await.unwrap();
            assert!(body[..] == bytes[start..end], "{range}: body differs from the slice");
        }
    }
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn unsatisfiable_ranges_are_416() {
    let node = start().await;
    let key = UnitKey::data(2, 0, 0);
    node.put(0, key, &pattern(1000, 1)).await;
    for range in ["bytes=1000-1000", "bytes=5000-", "bytes=-0"] {
        let response = node.get(0, key, Some(range)).await;
        assert_eq!(response.status(), StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(response.headers()[header::CONTENT_RANGE], "bytes */1000");
        assert_eq!(error_body(response).await["error"], "range_not_satisfiable");
    }
    let empty = UnitKey::data(2, 1, 0);
    node.put(0, empty, &[]).await;
    let response = node.get(0, empty, Some("bytes=0-0")).await;
    assert_eq!(response.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn missing_units_are_404_and_duplicates_409() {
    let node = start().await;
    let key = UnitKey::data(3, 0, 1);
    let response = node.get(0, key, None).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body = error_body(response).await;
    assert_eq!(body["error"], "not_found");
    assert_eq!(body["unit"], key.to_string());
    let head = node.client.head(node.url("0", key)).send_signed(&node.signer).await.unwrap();
    assert_eq!(head.status(), StatusCode::NOT_FOUND);
    let delete = node.client.delete(node.url("0", key)).send_signed(&node.signer).await.unwrap();
    assert_eq!(delete.status(), StatusCode::NOT_FOUND);

    assert_eq!(node.put(0, key, b"first").await.status(), StatusCode::CREATED);
    let again = node.put(0, key, b"second").await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(error_body(again).await["error"], "exists");
    // The first unit is untouched; a new generation is a different unit.
    assert_eq!(&node.get(0, key, None).await.bytes().await.unwrap()[..], b"first");
    assert_eq!(node.put(0, key.with_generation(2), b"second").await.status(), StatusCode::CREATED);
    node.node.stop().await.unwrap();
}

/// Sends a raw HTTP/1.1 request and returns the status code and the whole response text.
async fn raw_request(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

#[tokio::test]
async fn put_needs_content_length_and_a_whole_body() {
    let node = start().await;
    let key = UnitKey::data(4, 0, 0);
    let path = format!("/v1/disks/0/units/{key}");
    let chunked = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}\
         Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        node.signed_lines("PUT", &path)
    );
    let (status, text) = raw_request(node.node.local_addr(), chunked.as_bytes()).await;
    assert_eq!(status, 411, "{text}");
    assert!(text.contains("\"length_required\""), "{text}");

    let short = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}\
         Content-Length: 100000\r\n\r\nonly a few bytes",
        node.signed_lines("PUT", &path)
    );
    let (status, text) = raw_request(node.node.local_addr(), short.as_bytes()).await;
    assert!(status == 0 || status == 400, "{text}");
    // Whatever the client saw, no partial unit became visible.
    assert_eq!(node.get(0, key, None).await.status(), StatusCode::NOT_FOUND);
    let listed = node.json("/v1/disks/0/units").await;
    assert_eq!(listed["units"], serde_json::json!([]));
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn corrupt_segment_is_500_naming_the_segment_and_other_ranges_still_read() {
    let node = start().await;
    let key = UnitKey::data(5, 0, 0);
    let len = 3usize << 20;
    let bytes = pattern(len, 7);
    node.put(1, key, &bytes).await;
    let path = unit_file(&node.disks[1], key);
    let mut file = std::fs::read(&path).unwrap();
    let header_bytes = file.len() - len;
    // Flip one byte in segment 1 (data bytes 65536..131072).
    file[header_bytes + 65536 + 10] ^= 0x40;
    std::fs::write(&path, &file).unwrap();

    for range in [Some("bytes=65536-65600"), Some("bytes=60000-70000"), None] {
        let response = node.get(1, key, range).await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR, "{range:?}");
        let body = error_body(response).await;
        assert_eq!(body["error"], "corrupt", "{range:?}");
        assert_eq!(body["segment"], 1, "{range:?}");
        assert_eq!(body["unit"], key.to_string());
    }
    for (range, start, end) in [
        ("bytes=0-65535", 0, 65536),
        ("bytes=131072-131099", 131072, 131100),
        ("bytes=-10", len - 10, len),
    ] {
        let response = node.get(1, key, Some(range)).await;
        assert_eq!(response.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert!(response.bytes().await.unwrap()[..] == bytes[start..end], "{range}");
    }
    let response = node
        .client
        .post(format!("{}/v1/disks/1/scrub", node.base))
        .send_signed(&node.signer)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let report: Value = response.json().await.unwrap();
    assert_eq!(report["checked"], 1);
    assert_eq!(report["corrupt"], serde_json::json!([{ "unit": key.to_string(), "segment": 1 }]));
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn delete_and_list() {
    let node = start().await;
    let keys = [UnitKey::data(6, 0, 0), UnitKey::data(6, 1, 0), UnitKey::parity(6, 0, 0, 0)];
    for key in keys {
        node.put(0, key, b"x").await;
    }
    let listed = node.json("/v1/disks/0/units").await;
    let mut names: Vec<String> = keys.iter().map(|key| key.to_string()).collect();
    names.sort();
    let mut got: Vec<String> = listed["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    got.sort();
    assert_eq!(got, names);
    assert_eq!(node.json("/v1/disks/1/units").await["units"], serde_json::json!([]));

    let delete =
        node.client.delete(node.url("0", keys[1])).send_signed(&node.signer).await.unwrap();
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    assert_eq!(node.get(0, keys[1], None).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(node.json("/v1/disks/0/units").await["units"].as_array().unwrap().len(), 2);
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn list_with_ages_reports_each_units_age_from_its_file() {
    let node = start().await;
    let (old, new) = (UnitKey::data(9, 0, 0), UnitKey::parity(9, 0, 0, 4));
    node.put(0, old, &pattern(1000, 1)).await;
    node.put(0, new, b"").await;
    // Age the first unit's file by an hour, as if it had been written then.
    let path = node.disks[0].join("units").join(old.fanout()).join(old.file_name());
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    file.set_times(std::fs::FileTimes::new().set_modified(hour_ago)).unwrap();
    drop(file);

    let listed = node.json("/v1/disks/0/units?ages=1").await;
    assert_eq!(
        (&listed["node_id"], &listed["disk"]),
        (&serde_json::json!(7), &serde_json::json!(0))
    );
    let units = listed["units"].as_array().unwrap();
    assert_eq!(units.len(), 2, "{listed}");
    let by_name = |key: UnitKey| {
        units.iter().find(|u| u["unit"] == key.to_string()).unwrap_or_else(|| panic!("{listed}"))
    };
    let (old_age, new_age) =
        (by_name(old)["age_ms"].as_u64().unwrap(), by_name(new)["age_ms"].as_u64().unwrap());
    assert!((3_600_000..3_660_000).contains(&old_age), "{listed}");
    assert!(new_age < 60_000, "{listed}");
    let file_bytes = std::fs::metadata(&path).unwrap().len();
    assert_eq!(by_name(old)["file_bytes"], file_bytes);
    let mut fields: Vec<&String> = units[0].as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(fields, ["age_ms", "file_bytes", "unit"]);

    // The plain form is unchanged; ages=0 is the plain form; anything else is a 400.
    let plain = node.json("/v1/disks/0/units").await;
    assert!(plain["units"].as_array().unwrap().iter().all(Value::is_string), "{plain}");
    assert_eq!(node.json("/v1/disks/0/units?ages=0").await, plain);
    assert_eq!(node.json("/v1/disks/1/units?ages=1").await["units"], serde_json::json!([]));
    let bad = node.client.get(format!("{}/v1/disks/0/units?ages=yes", node.base));
    let bad = bad.send_signed(&node.signer).await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_body(bad).await["what"], "ages");
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn health_and_metrics_report_the_numbers() {
    let node = start().await;
    node.put(1, UnitKey::data(8, 0, 0), &pattern(1000, 0)).await;
    node.put(1, UnitKey::data(8, 1, 0), &pattern(70000, 0)).await;
    let body = node.get(1, UnitKey::data(8, 1, 0), Some("bytes=0-99")).await.bytes().await.unwrap();
    assert_eq!(body.len(), 100);
    node.get(1, UnitKey::data(8, 9, 0), None).await;

    let health = node.json("/v1/health").await;
    assert_eq!(health["node_id"], 7);
    let disks = health["disks"].as_array().unwrap();
    assert_eq!(disks.len(), 2);
    assert_eq!(disks[0]["index"], 0);
    assert_eq!(disks[0]["units"], 0);
    assert_eq!(disks[0]["failed"], Value::Null);
    assert_eq!(disks[1]["index"], 1);
    assert_eq!(disks[1]["units"], 2);
    assert_eq!(disks[1]["dir"], node.disks[1].display().to_string());
    let bytes = disks[1]["bytes"].as_u64().unwrap();
    assert!(bytes > 71000 && bytes < 72000, "{bytes}");

    let metrics =
        node.client.get(format!("{}/metrics", node.base)).send_signed(&node.signer).await.unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    let text = metrics.text().await.unwrap();
    let expected = [
        "weft_node_requests_total{node=\"7\",method=\"PUT\",route=\"/v1/disks/{disk}/units/{unit}\",status=\"201\"} 2".to_owned(),
        "weft_node_requests_total{node=\"7\",method=\"GET\",route=\"/v1/disks/{disk}/units/{unit}\",status=\"206\"} 1".to_owned(),
        "weft_node_requests_total{node=\"7\",method=\"GET\",route=\"/v1/disks/{disk}/units/{unit}\",status=\"404\"} 1".to_owned(),
        "weft_node_bytes_in_total{node=\"7\"} 71000".to_owned(),
        "weft_node_bytes_out_total{node=\"7\"} 100".to_owned(),
        format!("weft_node_disk_units{{node=\"7\",disk=\"1\",dir=\"{}\"}} 2", node.disks[1].display()),
        format!("weft_node_disk_bytes{{node=\"7\",disk=\"1\",dir=\"{}\"}} {bytes}", node.disks[1].display()),
        format!("weft_node_disk_failed{{node=\"7\",disk=\"0\",dir=\"{}\"}} 0", node.disks[0].display()),
    ];
    for line in expected {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn bad_requests_are_400_naming_what_was_wrong() {
    let node = start().await;
    let key = UnitKey::data(9, 0, 0);
    node.put(0, key, &pattern(100, 0)).await;
    let cases: Vec<(String, Option<&str>, &str)> = vec![
        (format!("{}/v1/disks/x/units/{key}", node.base), None, "disk"),
        (format!("{}/v1/disks/2/units/{key}", node.base), None, "disk"),
        (format!("{}/v1/disks/-1/units/{key}", node.base), None, "disk"),
        (format!("{}/v1/disks/0/units/not-a-unit", node.base), None, "unit"),
        (
            format!("{}/v1/disks/0/units/{}", node.base, key.to_string().to_uppercase()),
            None,
            "unit",
        ),
        (node.url("0", key), Some("bytes=abc-def"), "range"),
        (node.url("0", key), Some("bytes=0-1,5-6"), "range"),
        (node.url("0", key), Some("items=0-1"), "range"),
        (node.url("0", key), Some("bytes=9-2"), "range"),
        (format!("{}/v1/disks/7/units", node.base), None, "disk"),
    ];
    for (url, range, what) in cases {
        let mut request = node.client.get(&url);
        if let Some(range) = range {
            request = request.header(header::RANGE, range);
        }
        let response = request.send_signed(&node.signer).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{url} {range:?}");
        let body = error_body(response).await;
        assert_eq!(body["error"], "bad_request", "{url}");
        assert_eq!(body["what"], what, "{url} {range:?}");
        assert!(!body["message"].as_str().unwrap().is_empty());
    }
    let put = node
        .client
        .put(format!("{}/v1/disks/3/units/{key}", node.base))
        .body("x")
        .send_signed(&node.signer)
        .await;
    assert_eq!(put.unwrap().status(), StatusCode::BAD_REQUEST);
    let nowhere = node
        .client
        .get(format!("{}/v2/nothing", node.base))
        .send_signed(&node.signer)
        .await
        .unwrap();
    assert_eq!(nowhere.status(), StatusCode::NOT_FOUND);
    assert_eq!(error_body(nowhere).await["error"], "no_route");
    node.node.stop().await.unwrap();
}

/// A stand-in for meta's heartbeat route behind meta's real signature check: only heartbeats
/// signed with node 7's key of `secret` reach the handler, which keeps their bodies.
async fn fake_meta(
    secret: &ClusterSecret,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<Value>>>, tokio::task::JoinHandle<std::io::Result<()>>) {
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let store = received.clone();
    let guard = weft_auth::axum_layer::Guard {
        verifier: Arc::new(weft_auth::Verifier::for_meta(secret)),
        max_body_bytes: 1 << 20,
        large_bodies: &[],
    };
    let meta = axum::Router::new()
        .route(
            "/v1/heartbeat",
            axum::routing::post(
                move |axum::Extension(who): axum::Extension<weft_auth::Principal>,
                      axum::Json(body): axum::Json<Value>| {
                    let store = store.clone();
                    async move {
                        assert_eq!(who, weft_auth::Principal::Node(7), "signed as the node itself");
                        store.lock().unwrap().push(body);
                        "ok"
                    }
                },
            ),
        )
        .layer(axum::middleware::from_fn_with_state(
            guard,
            weft_auth::axum_layer::require_signature,
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let meta_addr = listener.local_addr().unwrap();
    let meta_server = tokio::spawn(async move { axum::serve(listener, meta).await });
    (meta_addr, received, meta_server)
}

#[tokio::test]
async fn a_node_signed_for_another_cluster_gets_its_heartbeats_refused() {
    let (meta_addr, received, meta_server) = fake_meta(&ClusterSecret::generate()).await;
    let node = start_with(Some(format!("http://{meta_addr}")), 100).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(received.lock().unwrap().is_empty(), "a foreign node's heartbeat got through");
    let metrics = node.client.get(format!("{}/metrics", node.base)).send_signed(&node.signer);
    let text = metrics.await.unwrap().text().await.unwrap();
    let failed = text
        .lines()
        .find_map(|l| l.strip_prefix("weft_node_heartbeats_failed_total{node=\"7\"} "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap();
    assert!(failed >= 2, "{text}");
    node.node.stop().await.unwrap();
    meta_server.abort();
}

#[tokio::test]
async fn every_route_refuses_unsigned_foreign_and_replayed_requests() {
    let node = start().await;
    let key = UnitKey::data(11, 0, 0);
    node.put(0, key, &pattern(100, 1)).await;
    let forged = UnitKey::data(11, 1, 0);
    let routes: Vec<(reqwest::Method, String)> = vec![
        (reqwest::Method::GET, node.url("0", key)),
        (reqwest::Method::HEAD, node.url("0", key)),
        (reqwest::Method::PUT, node.url("0", forged)),
        (reqwest::Method::DELETE, node.url("0", key)),
        (reqwest::Method::GET, format!("{}/v1/disks/0/units", node.base)),
        (reqwest::Method::GET, format!("{}/v1/disks/0/units?ages=1", node.base)),
        (reqwest::Method::POST, format!("{}/v1/disks/0/scrub", node.base)),
        (reqwest::Method::GET, format!("{}/v1/health", node.base)),
        (reqwest::Method::GET, format!("{}/metrics", node.base)),
        (reqwest::Method::GET, format!("{}/v2/nothing", node.base)),
    ];
    // Keys that must not open this node: another node's, the client key meta checks, and
    // this node's key of another cluster.
    let strangers = [
        node.secret.signer_for(Audience::Node(8)),
        node.secret.signer_for(Audience::Meta),
        Signer::new(node.secret.node_key(7), Audience::Node(8)),
        ClusterSecret::generate().signer_for(Audience::Node(7)),
    ];
    for (method, url) in &routes {
        let request = || node.client.request(method.clone(), url).body(vec![7u8; 10]);
        let unsigned = request().send().await.unwrap();
        assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED, "unsigned {method} {url}");
        for stranger in &strangers {
            let response = request().send_signed(stranger).await.unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{stranger:?} {method} {url}");
        }
        // A request signed right, sent twice: the copy is refused.
        let mut signed = request().build().unwrap();
        weft_auth::sign_reqwest::sign(&node.signer, &mut signed);
        let copy = signed.try_clone().unwrap();
        let first = node.client.execute(signed).await.unwrap();
        assert_ne!(first.status(), StatusCode::UNAUTHORIZED, "{method} {url}");
        let again = node.client.execute(copy).await.unwrap();
        assert_eq!(again.status(), StatusCode::UNAUTHORIZED, "replayed {method} {url}");
        if *method != reqwest::Method::HEAD {
            assert_eq!(error_body(again).await["error"], "unauthenticated");
        }
        if *method == reqwest::Method::DELETE {
            node.put(0, key, &pattern(100, 1)).await;
        }
        if *method == reqwest::Method::PUT {
            node.get(0, forged, None).await;
            node.client.delete(node.url("0", forged)).send_signed(&node.signer).await.unwrap();
        }
    }
    // Nothing a refused request asked for happened: the unit is intact, no forged unit.
    let back = node.get(0, key, None).await;
    assert_eq!(back.bytes().await.unwrap().to_vec(), pattern(100, 1));
    assert_eq!(node.get(0, forged, None).await.status(), StatusCode::NOT_FOUND);
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn heartbeats_reach_meta_with_the_agreed_shape() {
    let secret = ClusterSecret::generate();
    let (meta_addr, received, meta_server) = fake_meta(&secret).await;

    let node = start_keyed(Some(format!("http://{meta_addr}/")), 200, None, secret).await;
    node.put(0, UnitKey::data(10, 0, 0), &pattern(500, 0)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while received.lock().unwrap().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let beats = received.lock().unwrap().clone();
    assert!(beats.len() >= 2, "only {} heartbeats in 3 s", beats.len());
    for beat in &beats {
        let keys: Vec<&str> = beat.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["node_id", "endpoint", "pid", "disks"]);
        let parsed: Heartbeat = serde_json::from_value(beat.clone()).unwrap();
        assert_eq!(parsed.node_id, 7);
        assert_eq!(parsed.endpoint, node.base);
        assert_eq!(parsed.pid, std::process::id());
        assert_eq!(parsed.disks.len(), 2);
        let disk: Vec<&str> =
            beat["disks"][1].as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            disk,
            ["index", "dir", "units", "bytes", "failed", "free_bytes", "total_bytes", "state"]
        );
        assert_eq!(beat["disks"][1]["state"], "ok", "a fresh temporary disk is not full");
        assert!(parsed.disks[1].total_bytes.unwrap() >= parsed.disks[1].free_bytes.unwrap());
        assert!(parsed.disks[1].free_bytes.unwrap() > 0);
        assert_eq!(parsed.disks[1].index, 1);
        assert_eq!(parsed.disks[1].dir, node.disks[1].display().to_string());
        assert!(beat["disks"][0]["failed"].is_null());
    }
    // The last heartbeat sees the unit stored before it.
    assert_eq!(beats.last().unwrap()["disks"][0]["units"], 1);
    node.node.stop().await.unwrap();
    meta_server.abort();
}

#[tokio::test]
async fn a_node_in_a_rack_sends_it_last_in_its_heartbeats() {
    let secret = ClusterSecret::generate();
    let (meta_addr, received, meta_server) = fake_meta(&secret).await;

    let node = start_keyed(Some(format!("http://{meta_addr}")), 100, Some(3), secret).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while received.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let beat = received.lock().unwrap().first().cloned().expect("a heartbeat within 3 s");
    let keys: Vec<&str> = beat.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(keys, ["node_id", "endpoint", "pid", "disks", "rack"]);
    assert_eq!(beat["rack"], 3);
    let parsed: Heartbeat = serde_json::from_value(beat).unwrap();
    assert_eq!((parsed.node_id, parsed.rack), (7, Some(3)));
    node.node.stop().await.unwrap();
    meta_server.abort();
}

#[tokio::test]
async fn heartbeat_failures_are_not_fatal() {
    // Nothing listens on this meta address; the node keeps serving.
    let unused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = unused.local_addr().unwrap();
    drop(unused);
    let node = start_with(Some(format!("http://{dead}")), 100).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(node.put(0, UnitKey::data(11, 0, 0), b"abc").await.status(), StatusCode::CREATED);
    let metrics =
        node.client.get(format!("{}/metrics", node.base)).send_signed(&node.signer).await.unwrap();
    let text = metrics.text().await.unwrap();
    let failed = text
        .lines()
        .find_map(|l| l.strip_prefix("weft_node_heartbeats_failed_total{node=\"7\"} "))
        .unwrap();
    assert!(failed.parse::<u64>().unwrap() >= 2, "{text}");
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn a_failed_disk_is_503_sticky_and_reported() {
    let node = start().await;
    let stored = UnitKey::data(12, 0, 0);
    assert_eq!(node.put(0, stored, b"before").await.status(), StatusCode::CREATED);
    // Creating a unit's temp file now fails: the disk enters weft-store's sticky failed state.
    std::fs::remove_dir_all(node.disks[0].join("tmp")).unwrap();
    let put = node.put(0, UnitKey::data(12, 1, 0), b"after").await;
    assert_eq!(put.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = error_body(put).await;
    assert_eq!(body["error"], "disk_failed");
    assert!(body["cause"].as_str().unwrap().contains("create"), "{body}");
    // Sticky: reads of units that are still there are refused too.
    let get = node.get(0, stored, None).await;
    assert_eq!(get.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(error_body(get).await["error"], "disk_failed");
    // The other disk still works.
    assert_eq!(node.put(1, stored, b"elsewhere").await.status(), StatusCode::CREATED);
    let health = node.json("/v1/health").await;
    assert!(health["disks"][0]["failed"].as_str().unwrap().contains("create"), "{health}");
    assert!(health["disks"][1]["failed"].is_null());
    let text =
        node.client.get(format!("{}/metrics", node.base)).send_signed(&node.signer).await.unwrap();
    let text = text.text().await.unwrap();
    let line = format!(
        "weft_node_disk_failed{{node=\"7\",disk=\"0\",dir=\"{}\"}} 1",
        node.disks[0].display()
    );
    assert!(text.lines().any(|l| l == line), "{text}");
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn serve_runs_until_its_shutdown_future_completes() {
    let dir = tempfile::tempdir().unwrap();
    let config = NodeConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        vec![dir.path().join("d")],
        ClusterSecret::generate().node_key(1),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(weft_node::serve(config, async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!served.is_finished());
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), served).await.unwrap().unwrap();
    assert!(result.is_ok(), "{result:?}");
    // A node needs a disk.
    let empty = NodeConfig::new(
        1,
        "127.0.0.1:0".parse().unwrap(),
        vec![],
        ClusterSecret::generate().node_key(1),
    );
    assert!(bind(empty).await.is_err());
}

#[tokio::test]
async fn corruption_past_the_first_chunk_aborts_the_body() {
    let node = start().await;
    let key = UnitKey::data(13, 0, 0);
    let len = 3usize << 20;
    node.put(0, key, &pattern(len, 1)).await;
    let path = unit_file(&node.disks[0], key);
    let mut file = std::fs::read(&path).unwrap();
    let header_bytes = file.len() - len;
    // Segment 40 lies in the third 1 MiB chunk, after the status line has gone out.
    file[header_bytes + 40 * 65536] ^= 1;
    std::fs::write(&path, &file).unwrap();
    let response = node.get(0, key, None).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.bytes().await.is_err(), "a corrupt body must not arrive whole");
    // A range around the segment gets the clean status.
    let response = node.get(0, key, Some("bytes=2621440-2621449")).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(error_body(response).await["segment"], 40);
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn units_over_the_size_limit_are_413() {
    let node = start().await;
    let key = UnitKey::data(14, 0, 0);
    let path = format!("/v1/disks/0/units/{key}");
    let request = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}\
         Content-Length: {}\r\n\r\n",
        node.signed_lines("PUT", &path),
        weft_store::MAX_UNIT_BYTES + 1
    );
    let (status, text) = raw_request(node.node.local_addr(), request.as_bytes()).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("\"too_large\""), "{text}");
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn no_space_on_a_put_is_507_disk_full_and_the_disk_stays_readable_and_reported_full() {
    let secret = ClusterSecret::generate();
    let (meta_addr, received, meta_server) = fake_meta(&secret).await;
    let dir = tempfile::tempdir().unwrap();
    let disks = vec![dir.path().join("disk0"), dir.path().join("disk1")];
    let faulty = weft_store::FaultyFs::new();
    let mut config =
        NodeConfig::new(7, "127.0.0.1:0".parse().unwrap(), disks.clone(), secret.node_key(7));
    config.meta_url = Some(format!("http://{meta_addr}"));
    config.heartbeat_interval_ms = 100;
    config.fs = Arc::new(faulty.clone());
    config.thresholds = host_fill_ignored();
    let node = bind(config).await.unwrap();
    let signer = secret.signer_for(Audience::Node(7));
    let node = TestNode {
        base: node.endpoint(),
        node,
        client: Client::new(),
        signer,
        secret,
        disks,
        _dir: dir,
    };

    let stored = UnitKey::data(20, 0, 0);
    let bytes = pattern(200_000, 3);
    assert_eq!(node.put(0, stored, &bytes).await.status(), StatusCode::CREATED);
    // The next unit's data write (the create is call 1) finds the filesystem full.
    faulty.fail_nth_with(2, libc::ENOSPC);
    let refused = UnitKey::data(20, 1, 0);
    let put = node.put(0, refused, &pattern(100_000, 4)).await;
    assert_eq!(put.status(), StatusCode::INSUFFICIENT_STORAGE);
    let body = error_body(put).await;
    assert_eq!(body["error"], "disk_full", "{body}");
    assert_eq!(body["unit"], refused.to_string());
    let no_space = std::io::Error::from_raw_os_error(libc::ENOSPC).to_string();
    assert!(body["reason"].as_str().unwrap().contains(&no_space), "{body}");
    assert!(body["message"].as_str().unwrap().contains("disk full"), "{body}");
    assert_eq!(
        std::fs::read_dir(node.disks[0].join("tmp")).unwrap().count(),
        0,
        "the temp file of the refused unit is removed"
    );
    // Not failed: what it holds is still served, nothing half-written is visible.
    let get = node.get(0, stored, None).await;
    assert_eq!(get.status(), StatusCode::OK);
    assert_eq!(get.bytes().await.unwrap().as_ref(), bytes.as_slice());
    assert_eq!(node.get(0, refused, None).await.status(), StatusCode::NOT_FOUND);
    // Read-only: another PUT is refused at once, on this disk only.
    let again = node.put(0, UnitKey::data(20, 2, 0), b"more").await;
    assert_eq!(again.status(), StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(error_body(again).await["error"], "disk_full");
    assert_eq!(node.put(1, UnitKey::data(20, 2, 0), b"more").await.status(), StatusCode::CREATED);
    let health = node.json("/v1/health").await;
    assert!(health["disks"][0]["failed"].is_null(), "{health}");
    assert_eq!(health["disks"][0]["state"], "full", "{health}");
    assert_eq!(health["disks"][0]["units"], 1, "{health}");
    assert!(health["disks"][0]["free_bytes"].as_u64().is_some(), "{health}");
    assert_eq!(health["disks"][1]["state"], "ok", "{health}");
    // Heartbeats tell meta: full, not failed. (One composed before the refusal may still be
    // on its way: the next ones must say full, and none may say failed.)
    received.lock().unwrap().clear();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let parsed = loop {
        let beats: Vec<Heartbeat> = received
            .lock()
            .unwrap()
            .iter()
            .map(|beat| serde_json::from_value(beat.clone()).unwrap())
            .collect();
        for beat in &beats {
            assert_eq!(beat.disks[0].failed, None, "a full disk is not failed");
            assert_eq!(beat.disks[1].state, weft_node::DiskState::Ok);
        }
        if let Some(full) =
            beats.into_iter().find(|b| b.disks[0].state == weft_node::DiskState::Full)
        {
            break full;
        }
        assert!(tokio::time::Instant::now() < deadline, "no heartbeat saying full within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(parsed.disks[0].failed, None);
    assert_eq!(parsed.disks[1].state, weft_node::DiskState::Ok);
    let text =
        node.client.get(format!("{}/metrics", node.base)).send_signed(&node.signer).await.unwrap();
    let text = text.text().await.unwrap();
    let dir0 = node.disks[0].display();
    assert!(
        text.lines()
            .any(|l| l == format!("weft_node_disk_full{{node=\"7\",disk=\"0\",dir=\"{dir0}\"}} 2")),
        "{text}"
    );
    assert!(
        text.lines().any(
            |l| l == format!("weft_node_disk_failed{{node=\"7\",disk=\"0\",dir=\"{dir0}\"}} 0")
        ),
        "{text}"
    );
    // Deletes still work on a full disk.
    let deleted =
        node.client.delete(node.url("0", stored)).send_signed(&node.signer).await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    node.node.stop().await.unwrap();
    meta_server.abort();
}

/// Issue 17: under a disk model a GET's whole range is one IO: a unit read whole, or range by
/// range in order, pays one positioning, and the same ranges out of order one each; the counters say so in `/v1/health` (and so in
/// heartbeats) and `/metrics`. A disk without a model reports none. Bytes are unchanged.
#[tokio::test]
async fn a_modeled_disk_counts_seeks_for_out_of_order_reads_only() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let disks = vec![dir.path().join("disk0"), dir.path().join("disk1")];
    let mut config =
        NodeConfig::new(7, "127.0.0.1:0".parse().unwrap(), disks.clone(), secret.node_key(7));
    config.thresholds = host_fill_ignored();
    let fast_hdd = weft_node::model::parse_disk_model("hdd:position=2ms:rate=1GB").unwrap();
    config.disk_models = vec![None, fast_hdd];
    config.net_bytes_per_sec = Some(weft_node::model::parse_rate("10Gbit").unwrap());
    let node = TestNode {
        node: bind(config).await.unwrap(),
        base: String::new(),
        client: Client::new(),
        signer: secret.signer_for(Audience::Node(7)),
        secret: secret.clone(),
        disks,
        _dir: dir,
    };
    let node = TestNode { base: node.node.endpoint(), ..node };
    const MIB: usize = 1 << 20;
    let key = UnitKey::data(9, 0, 0);
    let data = pattern(4 * MIB, 5);
    assert_eq!(node.put(1, key, &data).await.status(), StatusCode::CREATED);
    node.put(0, key, &data).await;
    let model = |health: &Value| health["disks"][1]["model"].clone();
    let after_put = model(&node.json("/v1/health").await);
    assert_eq!(after_put["model"], "hdd 2ms 1000MB/s", "{after_put}");
    let written = (after_put["ios"].as_u64(), after_put["seeks"].as_u64());
    assert_eq!(written, (Some(1), Some(1)), "a unit's write is one IO: {after_put}");
    assert_eq!(after_put["bytes"], 4 * MIB as u64, "{after_put}");
    let health = node.json("/v1/health").await;
    assert!(health["disks"][0].get("model").is_none(), "disk 0 has no model: {health}");

    let whole = node.get(1, key, None).await.bytes().await.unwrap();
    assert!(whole == data, "a modeled read changed bytes");
    let sequential = model(&node.json("/v1/health").await);
    let delta = |now: &Value, before: &Value, field: &str| {
        now[field].as_u64().unwrap() - before[field].as_u64().unwrap()
    };
    assert_eq!(delta(&sequential, &after_put, "ios"), 1, "a GET's range is one IO: {sequential}");
    assert_eq!(delta(&sequential, &after_put, "seeks"), 1, "one positioning: {sequential}");
    let read = |order: [usize; 4]| {
        let node = &node;
        let data = &data;
        async move {
            for chunk in order {
                let range = format!("bytes={}-{}", chunk * MIB, (chunk + 1) * MIB - 1);
                let got = node.get(1, key, Some(&range)).await.bytes().await.unwrap();
                assert!(got == data[chunk * MIB..(chunk + 1) * MIB], "chunk {chunk}");
            }
        }
    };
    read([3, 2, 1, 0]).await;
    let random = model(&node.json("/v1/health").await);
    assert_eq!(delta(&random, &sequential, "ios"), 4, "{random}");
    assert_eq!(delta(&random, &sequential, "seeks"), 4, "a positioning each: {random}");
    read([0, 1, 2, 3]).await;
    let in_order = model(&node.json("/v1/health").await);
    assert_eq!(
        delta(&in_order, &random, "seeks"),
        1,
        "ranges in order: one positioning: {in_order}"
    );
    // Busy time: each read pass transfers 4 MiB (4.2 ms at 1 GB/s); out of order adds four
    // positionings of 0.5–3.5 ms, the whole unit one.
    let busy = |a: &Value, b: &Value| delta(a, b, "busy_us");
    let transfer = 4 * MIB as u64 * 1_000_000 / 1_000_000_000;
    assert!(busy(&sequential, &after_put) <= transfer + 3_500 + 10, "{sequential}");
    assert!(busy(&random, &sequential) >= transfer + 4 * 500 - 10, "{random}");

    let text =
        node.client.get(format!("{}/metrics", node.base)).send_signed(&node.signer).await.unwrap();
    let text = text.text().await.unwrap();
    // Write 1, whole read 1, out of order 4, in order 1.
    let seeks = format!(
        "weft_node_disk_model_seeks_total{{node=\"7\",disk=\"1\",dir=\"{}\"}} 7",
        node.disks[1].display()
    );
    assert!(text.lines().any(|l| l == seeks), "missing {seeks:?} in\n{text}");
    node.node.stop().await.unwrap();
}

/// A checksummed answer: (status, headers, stored checksums, range bytes), on a pool of
/// its own: a connection that asked anything else is the router's, which answers without
/// checksums (the node verified every byte then).
async fn get_checksummed(
    node: &TestNode,
    key: UnitKey,
    range: Option<&str>,
) -> (StatusCode, header::HeaderMap, Vec<u32>, Vec<u8>) {
    static READS: std::sync::OnceLock<Client> = std::sync::OnceLock::new();
    let reads = READS.get_or_init(Client::new);
    let mut request = reads.get(node.url("0", key)).header("x-weft-checksums", "crc32c");
    if let Some(range) = range {
        request = request.header(header::RANGE, range);
    }
    let response = request.send_signed(&node.signer).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response.bytes().await.unwrap().to_vec();
    let count: usize =
        headers.get("x-weft-checksums").map_or(0, |v| v.to_str().unwrap().parse().unwrap());
    let sums =
        body[..4 * count].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    (status, headers, sums, body[4 * count..].to_vec())
}

#[tokio::test]
async fn checksummed_ranges_carry_each_whole_segments_checksum_and_exact_bytes() {
    let node = start().await;
    let key = UnitKey::data(21, 0, 0);
    let len = 3 * 65536 + 1000; // a short last segment
    let bytes = pattern(len, 9);
    node.put(0, key, &bytes).await;
    let segment = |i: usize| &bytes[i * 65536..((i + 1) * 65536).min(len)];
    // (range, first and last whole segment) — none when the range holds no whole segment.
    type Case<'a> = (Option<&'a str>, Option<(usize, usize)>, usize, usize);
    let cases: [Case; 6] = [
        (None, Some((0, 3)), 0, len),
        (Some("bytes=0-65535"), Some((0, 0)), 0, 65536),
        (Some("bytes=10-65535"), None, 10, 65536),
        (Some("bytes=100-150000"), Some((1, 1)), 100, 150_001),
        (Some("bytes=65536-"), Some((1, 3)), 65536, len),
        (Some("bytes=-500"), None, len - 500, len),
    ];
    for (range, whole, start, end) in cases {
        let (status, headers, sums, body) = get_checksummed(&node, key, range).await;
        let expected_status = if range.is_some() { 206 } else { 200 };
        assert_eq!(status.as_u16(), expected_status, "{range:?}");
        assert!(body == bytes[start..end], "{range:?}: the range's exact bytes");
        assert_eq!(headers["x-weft-segment-bytes"], "65536");
        match whole {
            Some((first, last)) => {
                let expected: Vec<u32> =
                    (first..=last).map(|i| crc32c::crc32c(segment(i))).collect();
                assert_eq!(sums, expected, "{range:?}");
                let covered_end = ((last + 1) * 65536).min(len) - 1;
                let covered = format!("{}-{covered_end}", first * 65536);
                assert_eq!(headers["x-weft-checksummed"], covered.as_str(), "{range:?}");
            }
            None => {
                assert!(sums.is_empty(), "{range:?}");
                assert!(headers.get("x-weft-checksummed").is_none(), "{range:?}");
            }
        }
    }
    // Refusals keep their statuses and bodies: unsigned, unsatisfiable, missing.
    let unsigned = node
        .client
        .get(node.url("0", key))
        .header("x-weft-checksums", "crc32c")
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(error_body(unsigned).await["error"], "unauthenticated");
    let (status, headers, _, body) =
        get_checksummed(&node, key, Some(&format!("bytes={len}-"))).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(headers[header::CONTENT_RANGE], format!("bytes */{len}").as_str());
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"], "range_not_satisfiable");
    let (status, _, _, _) = get_checksummed(&node, UnitKey::data(22, 0, 0), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A connection that served checksummed GETs serves any other request too (it is
    // handed to the router, with what was read of it), and a GET without the header there
    // is answered as before.
    let reads = Client::new();
    let url = node.url("0", key);
    let checksummed = reads.get(&url).header("x-weft-checksums", "crc32c");
    let answer = checksummed.send_signed(&node.signer).await.unwrap();
    assert_eq!(answer.headers()["x-weft-checksums"], "4");
    assert_eq!(answer.bytes().await.unwrap().len(), 16 + len);
    let health = reads.get(format!("{}/v1/health", node.base)).send_signed(&node.signer);
    let health: Value = health.await.unwrap().json().await.unwrap();
    assert_eq!(health["node_id"], 7);
    let plain = reads.get(&url).send_signed(&node.signer).await.unwrap();
    assert!(plain.headers().get("x-weft-checksums").is_none());
    assert!(plain.bytes().await.unwrap() == bytes);
    node.node.stop().await.unwrap();
}

#[tokio::test]
async fn checksummed_answers_send_corrupt_whole_segments_with_their_stored_checksum() {
    let node = start().await;
    let key = UnitKey::data(23, 0, 0);
    let len = 4 * 65536;
    let bytes = pattern(len, 3);
    node.put(0, key, &bytes).await;
    let path = unit_file(&node.disks[0], key);
    let mut file = std::fs::read(&path).unwrap();
    let header_bytes = file.len() - len;
    file[header_bytes + 2 * 65536 + 5] ^= 0x10; // segment 2
    std::fs::write(&path, &file).unwrap();
    // A whole corrupt segment goes out as stored, with the checksum that exposes it...
    let (status, _, sums, body) = get_checksummed(&node, key, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sums.len(), 4);
    assert_eq!(sums[1], crc32c::crc32c(&body[65536..131072]), "a sound segment matches");
    assert_ne!(sums[2], crc32c::crc32c(&body[131072..196608]), "the corrupt one does not");
    // ...while a partial edge in it is checked by the node: a clean 500 naming it.
    let (status, _, _, body) = get_checksummed(&node, key, Some("bytes=131080-200000")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((body["error"].as_str(), body["segment"].as_u64()), (Some("corrupt"), Some(2)));
    node.node.stop().await.unwrap();
}

/// A blocking connection to the node's local socket (`\0weft-node-<port>`).
fn local_socket(node: &TestNode) -> std::os::unix::net::UnixStream {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("weft-node-{}", node.node.local_addr().port());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let stream = std::os::unix::net::UnixStream::connect_addr(&address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// Reads one answer head and body (Content-Length), and the descriptor riding on it.
fn local_answer(
    stream: &std::os::unix::net::UnixStream,
) -> (u16, std::collections::HashMap<String, String>, Vec<u8>, Option<std::fs::File>) {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut bytes: Vec<u8> = Vec::new();
    let mut file = None;
    loop {
        let mut buf = [0u8; 8192];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut control = [0u64; 8];
        // SAFETY: the msghdr points at `iov` and `control`, which outlive the call.
        let read = unsafe {
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = &mut iov;
            message.msg_iovlen = 1;
            message.msg_control = control.as_mut_ptr().cast();
            message.msg_controllen = std::mem::size_of_val(&control) as _;
            let read = libc::recvmsg(stream.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC);
            let cmsg = libc::CMSG_FIRSTHDR(&message);
            if read > 0 && !cmsg.is_null() && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>());
                file = Some(std::fs::File::from_raw_fd(fd));
            }
            read
        };
        assert!(read > 0, "the node closed the local connection");
        bytes.extend_from_slice(&buf[..read as usize]);
        let mut slots = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut slots);
        if let httparse::Status::Complete(head) = response.parse(&bytes).unwrap() {
            let headers: std::collections::HashMap<String, String> = response
                .headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into()))
                .collect();
            let body_len: usize = headers["content-length"].parse().unwrap();
            if bytes.len() >= head + body_len {
                let status = response.code.unwrap();
                return (status, headers, bytes[head..head + body_len].to_vec(), file);
            }
        }
    }
}

/// Writes `data` into a granted temp file as a local writer must (aligned blocks past the
/// head, from aligned memory) and returns the finish body (head bytes, then every segment's
/// CRC-32C).
fn write_granted(
    file: &std::fs::File,
    headers: &std::collections::HashMap<String, String>,
    data: &[u8],
) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let number = |name: &str| headers[name].parse::<usize>().unwrap();
    let (offset, head, align) =
        (number("x-weft-data-offset"), number("x-weft-head-bytes"), number("x-weft-direct-align"));
    let whole_in_head = head == data.len();
    assert!((offset + head) % align == 0 || whole_in_head, "the writer's part is aligned");
    if data.len() > head {
        let rest = &data[head..];
        let mut buf: Vec<u8> = Vec::with_capacity(rest.len() + 2 * align);
        let start = buf.as_ptr().align_offset(align);
        buf.resize(start, 0);
        buf.extend_from_slice(rest);
        buf.resize(start + rest.len().next_multiple_of(align), 0);
        file.write_all_at(&buf[start..], (offset + head) as u64).unwrap();
    }
    let segment = number("x-weft-segment-bytes");
    let mut body = data[..head.min(data.len())].to_vec();
    for chunk in data.chunks(segment) {
        body.extend_from_slice(&crc32c::crc32c(chunk).to_le_bytes());
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_writes_grant_the_temp_file_and_finish_as_a_put() {
    use std::io::Write;
    let node = start().await;
    let mut stream = local_socket(&node);
    let ask = |stream: &mut std::os::unix::net::UnixStream, key: UnitKey, len: usize| {
        let path = format!("/v1/disks/0/units/{key}");
        let signed = node.signed_lines("PUT", &path);
        let head = format!("PUT {path} HTTP/1.1\r\nx-weft-local-write: {len}\r\n{signed}\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        local_answer(stream)
    };
    let finish = |stream: &mut std::os::unix::net::UnixStream, key: UnitKey, body: &[u8]| {
        let head = format!(
            "PUT /v1/disks/0/units/{key}?finish HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        local_answer(stream)
    };

    // Granted, written here, finished: stored as a PUT would store it, read over HTTP.
    let tmp = node.disks[0].join("tmp");
    for (i, len) in [1usize, 3000, 65_536, 300_001].into_iter().enumerate() {
        let key = UnitKey::data(0x10ca1, i as u32, 1);
        let data = pattern(len, i as u8);
        let (status, headers, body, file) = ask(&mut stream, key, len);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let file = file.expect("the grant carries the temp file's descriptor");
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 1, "the temp file is in tmp/");
        let finish_body = write_granted(&file, &headers, &data);
        drop(file);
        let (status, headers, body, file) = finish(&mut stream, key, &finish_body);
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        assert!(file.is_none());
        assert_eq!(headers["x-weft-generation"], "1");
        let info: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(info["len_bytes"], len);
        let read = node.get(0, key, None).await;
        assert_eq!(read.status(), StatusCode::OK);
        assert_eq!(read.bytes().await.unwrap().as_ref(), data, "len {len}");
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    }

    // An existing unit is refused as a PUT refuses it: 409, no descriptor.
    let (status, _, body, file) = ask(&mut stream, UnitKey::data(0x10ca1, 0, 1), 1);
    assert_eq!((status, file.is_none()), (409, true), "{}", String::from_utf8_lossy(&body));

    // A finish whose checksum table does not fit the unit: 400, nothing stored.
    let key = UnitKey::data(0x10ca1, 9, 1);
    let data = pattern(200_000, 9);
    let (status, headers, _, file) = ask(&mut stream, key, data.len());
    assert_eq!(status, 200);
    let mut finish_body = write_granted(&file.unwrap(), &headers, &data);
    finish_body.truncate(finish_body.len() - 4);
    let (status, _, body, _) = finish(&mut stream, key, &finish_body);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert_eq!(error_body_of(&body)["error"], "length_mismatch");
    assert_eq!(node.get(0, key, None).await.status(), StatusCode::NOT_FOUND);

    // A connection that goes away before its finish: the temp file goes with it.
    let mut other = local_socket(&node);
    let (status, headers, _, file) = ask(&mut other, key, data.len());
    assert_eq!(status, 200);
    write_granted(&file.unwrap(), &headers, &data);
    drop(other);
    for _ in 0..100 {
        if std::fs::read_dir(&tmp).unwrap().count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the abandoned temp file is gone");
    assert_eq!(node.get(0, key, None).await.status(), StatusCode::NOT_FOUND);

    // An unsigned ask is refused without a descriptor.
    let head = format!("PUT /v1/disks/0/units/{key} HTTP/1.1\r\nx-weft-local-write: 5\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let (status, _, _, file) = local_answer(&stream);
    assert_eq!((status, file.is_none()), (401, true));

    // A writer that met ENOSPC: the disk is full (507), as if the node had met it.
    let (status, _, _, file) = ask(&mut stream, key, data.len());
    assert_eq!(status, 200);
    drop(file);
    let abort = format!("PUT /v1/disks/0/units/{key}?abort HTTP/1.1\r\nx-weft-errno: 28\r\n\r\n");
    stream.write_all(abort.as_bytes()).unwrap();
    let (status, _, body, _) = local_answer(&stream);
    assert_eq!(status, 507, "{}", String::from_utf8_lossy(&body));
    let (status, _, _, file) = ask(&mut stream, UnitKey::data(0x10ca1, 10, 1), 10);
    assert_eq!((status, file.is_none()), (507, true), "the full disk takes no new unit");
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
    assert_eq!(node.get(0, UnitKey::data(0x10ca1, 3, 1), None).await.status(), StatusCode::OK);
}

fn error_body_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}
