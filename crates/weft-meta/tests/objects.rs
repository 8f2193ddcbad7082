//! The object routes of the meta service, against a real in-process server over real HTTP.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use weft_layout::StripedLayout;
use weft_meta::service::{bind, MetaConfig, RunningMeta};
use weft_meta::unit_name;

const MIB: u64 = 1 << 20;

async fn start(dir: &std::path::Path) -> RunningMeta {
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir);
    config.down_after_ms = 60_000;
    bind(config).await.expect("meta starts")
}

fn heartbeat(id: u32) -> Value {
    json!({
        "node_id": id,
        "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
        "pid": 4242,
        "disks": [
            {"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": null},
            {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": null},
        ],
    })
}

struct Cluster {
    meta: RunningMeta,
    base: String,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn new(nodes: u32) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let meta = start(dir.path()).await;
        let base = meta.endpoint();
        let client = reqwest::Client::new();
        for id in 1..=nodes {
            let response = client
                .post(format!("{base}/v1/heartbeat"))
                .json(&heartbeat(id))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
        let response = client.put(format!("{base}/v1/buckets/photos")).send().await.unwrap();
        assert_eq!(response.status(), 201);
        Cluster { meta, base, client, _dir: dir }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// Begins and commits `key` of `size` bytes; returns the generation.
    async fn put(&self, key: &str, size: u64) -> u64 {
        let (status, begun) = self
            .post(&format!("/v1/buckets/photos/objects/{key}/begin"), json!({"size": size}))
            .await;
        assert_eq!(status, 200, "{begun}");
        let generation = begun["generation"].as_u64().unwrap();
        let (status, committed) = self
            .post(
                &format!("/v1/buckets/photos/objects/{key}/commit"),
                json!({"generation": generation}),
            )
            .await;
        assert_eq!(status, 200, "{committed}");
        generation
    }
}

#[tokio::test]
async fn begin_places_every_unit_on_distinct_up_nodes_and_commit_makes_it_visible() {
    let cluster = Cluster::new(10).await;
    let policy = json!({"code": "rs(6,3)", "stripe_width": 2, "cell_bytes": MIB,
                        "block_bytes": 8 * MIB});
    let layout: StripedLayout = serde_json::from_value(policy.clone()).unwrap();
    let size = 20 * MIB;
    let (status, begun) = cluster
        .post(
            "/v1/buckets/photos/objects/albums/2024/cat.jpg/begin",
            json!({"size": size, "policy": policy}),
        )
        .await;
    assert_eq!(status, 200, "{begun}");
    let generation = begun["generation"].as_u64().unwrap();
    let object_id = begun["object_id"].as_str().unwrap();
    assert_eq!(object_id, format!("{:032x}", generation));
    assert_eq!(begun["size"], size);
    assert_eq!(begun["key"], "albums/2024/cat.jpg");
    assert_eq!(begun["layout"], serde_json::to_value(layout).unwrap());

    // Exactly the layout's units, with their stored lengths.
    let mut expected: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for group in 0..layout.groups(size) {
        for unit in layout.group_units(size, group) {
            expected.insert(unit_name(unit), (layout.stored_len(size, unit), group));
        }
    }
    assert_eq!(expected.len(), 4 + 3, "20 MiB in 8 MiB blocks over width 2: 4 blocks, 1 group");
    let units = begun["units"].as_array().unwrap();
    let names: BTreeSet<String> =
        units.iter().map(|u| u["unit"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, expected.keys().cloned().collect::<BTreeSet<_>>());
    assert_eq!(units.len(), expected.len());
    let mut nodes_of_group: BTreeMap<usize, BTreeSet<u64>> = BTreeMap::new();
    let mut keys = BTreeSet::new();
    for unit in units {
        let name = unit["unit"].as_str().unwrap();
        let (len, group) = expected[name];
        assert_eq!(unit["len"], len, "{unit}");
        let node = unit["node_id"].as_u64().unwrap();
        assert!((1..=10).contains(&node), "{unit}");
        assert_eq!(unit["endpoint"], format!("http://127.0.0.1:{}", 9000 + node));
        assert!(unit["disk"].as_u64().unwrap() < 2);
        assert!(nodes_of_group.entry(group).or_default().insert(node), "two units on one node");
        let key = unit["unit_key"].as_str().unwrap();
        assert!(key.starts_with(object_id), "{key}");
        assert!(!key.ends_with(".unit"));
        assert!(keys.insert(key.to_string()), "unit keys are distinct");
    }
    assert_eq!(
        units.iter().find(|u| u["unit"] == "d0").unwrap()["unit_key"],
        format!("{object_id}-d00000000-0000000000000000")
    );
    assert_eq!(
        units.iter().find(|u| u["unit"] == "p0.1").unwrap()["unit_key"],
        format!("{object_id}-p000000000001-0000000000000000")
    );

    // Invisible until committed.
    let path = "/v1/buckets/photos/objects/albums/2024/cat.jpg";
    let (status, body) = cluster.get(path).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], "no_such_key");
    let (_, list) = cluster.get("/v1/buckets/photos/objects").await;
    assert_eq!(list["objects"], json!([]));

    // A wrong generation is refused; the right one commits.
    let commit = format!("{path}/commit");
    let (status, body) = cluster.post(&commit, json!({"generation": generation + 100})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "no_such_write");
    let (status, committed) = cluster.post(&commit, json!({"generation": generation})).await;
    assert_eq!(status, 200, "{committed}");
    assert_eq!(committed["state"], "committed");
    assert_eq!(committed["replaced"], Value::Null);
    let (status, body) = cluster.post(&commit, json!({"generation": generation})).await;
    assert_eq!(status, 409, "committing twice is stale: {body}");

    let (status, got) = cluster.get(path).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["generation"], generation);
    for (got, begun) in got["units"].as_array().unwrap().iter().zip(units) {
        assert_eq!(got["state"], "up");
        for field in ["unit", "node_id", "endpoint", "disk", "unit_key", "len"] {
            assert_eq!(got[field], begun[field], "{field}");
        }
    }
    let (_, list) = cluster.get("/v1/buckets/photos/objects").await;
    assert_eq!(
        list,
        json!({"objects": [{"key": "albums/2024/cat.jpg", "size": size, "generation": generation}],
               "next_start_after": null})
    );

    // A rewrite replaces it; commit names the replaced write so its units can be deleted.
    let (_, again) = cluster.post(&format!("{path}/begin"), json!({"size": 5})).await;
    let second = again["generation"].as_u64().unwrap();
    assert!(second > generation);
    assert_eq!(again["layout"]["code"], "rs(6,3)", "the bucket default");
    let (status, committed) = cluster.post(&commit, json!({"generation": second})).await;
    assert_eq!(status, 200);
    assert_eq!(committed["replaced"]["generation"], generation);
    assert_eq!(committed["replaced"]["units"].as_array().unwrap().len(), 7);

    // Delete returns the units, then the object is gone.
    let (status, deleted) = cluster.delete(path).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["generation"], second);
    assert_eq!(deleted["units"].as_array().unwrap().len(), 1 + 3);
    let (status, _) = cluster.delete(path).await;
    assert_eq!(status, 404);
    let (status, _) = cluster.get(path).await;
    assert_eq!(status, 404);
    cluster.meta.stop().await.unwrap();
}

#[tokio::test]
async fn listing_pages_by_prefix_and_start_after() {
    let cluster = Cluster::new(9).await;
    for key in ["a/1", "a/2", "a/3", "a/sub/4", "b/1"] {
        cluster.put(key, 1000).await;
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = "/v1/buckets/photos/objects?prefix=a/&limit=2".to_string();
        if let Some(after) = &after {
            path.push_str(&format!("&start_after={after}"));
        }
        let (status, page) = cluster.get(&path).await;
        assert_eq!(status, 200, "{page}");
        let objects = page["objects"].as_array().unwrap();
        assert!(objects.len() <= 2);
        for object in objects {
            assert_eq!(object["size"], 1000);
            assert!(object["generation"].as_u64().unwrap() > 0);
            seen.push(object["key"].as_str().unwrap().to_string());
        }
        match page["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["a/1", "a/2", "a/3", "a/sub/4"]);
    let (_, all) = cluster.get("/v1/buckets/photos/objects").await;
    assert_eq!(all["objects"].as_array().unwrap().len(), 5);
    let (status, body) = cluster.get("/v1/buckets/nope/objects").await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_bucket")));
    cluster.meta.stop().await.unwrap();
}

#[tokio::test]
async fn begin_with_too_few_nodes_is_503_naming_the_numbers() {
    let cluster = Cluster::new(4).await;
    let (status, body) =
        cluster.post("/v1/buckets/photos/objects/k/begin", json!({"size": 20 * MIB})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "too_few_nodes");
    assert_eq!(body["nodes_up"], 4);
    assert_eq!(body["needed"], 9);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("4 nodes are up") && message.contains("needs 9"), "{message}");

    // A smaller policy fits.
    let (status, body) = cluster
        .post(
            "/v1/buckets/photos/objects/k/begin",
            json!({"size": 10, "policy": {"code": "rs(2,1)", "stripe_width": 1,
                                          "cell_bytes": 4096, "block_bytes": 8192}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["units"].as_array().unwrap().len(), 2);
    cluster.meta.stop().await.unwrap();
}

#[tokio::test]
async fn unknown_buckets_keys_and_bad_bodies_are_json_errors() {
    let cluster = Cluster::new(9).await;
    let (status, body) = cluster.post("/v1/buckets/nope/objects/k/begin", json!({"size": 1})).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_bucket")), "{body}");
    let (status, body) = cluster.get("/v1/buckets/photos/objects/missing").await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_key")));
    let (status, body) =
        cluster.post("/v1/buckets/photos/objects/k/commit", json!({"generation": 77})).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("no_such_write")), "{body}");
    let (status, body) = cluster.post("/v1/buckets/photos/objects/k/begin", json!({})).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")));
    let (status, body) = cluster
        .post(
            "/v1/buckets/photos/objects/k/begin",
            json!({"size": 1, "policy": {"code": "rs(0,3)"}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = cluster.post("/v1/buckets/photos/objects/k/other", json!({})).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_route")));
    cluster.meta.stop().await.unwrap();
}
