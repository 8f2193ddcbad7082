//! The object routes of the meta service, against a real in-process server over real HTTP.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_layout::StripedLayout;
use weft_meta::service::{bind, FailureDomain, MetaConfig, RunningMeta};
use weft_meta::unit_name;

const MIB: u64 = 1 << 20;

async fn start(dir: &std::path::Path, level: FailureDomain, secret: &ClusterSecret) -> RunningMeta {
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir, secret.clone());
    config.down_after_ms = 60_000;
    config.failure_domain = level;
    bind(config).await.expect("meta starts")
}

fn heartbeat(id: u32, rack: Option<u32>) -> Value {
    let mut beat = json!({
        "node_id": id,
        "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
        "pid": 4242,
        "disks": [
            {"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": null},
            {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": null},
        ],
    });
    if let Some(rack) = rack {
        beat["rack"] = json!(rack);
    }
    beat
}

struct Cluster {
    meta: RunningMeta,
    base: String,
    client: reqwest::Client,
    /// Signs as the client.
    signer: Signer,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn new(nodes: u32) -> Cluster {
        Cluster::with(nodes, FailureDomain::Node, |_| None).await
    }

    /// Meta at failure domain `level` with nodes 1..=nodes (2 disks each) in `rack_of(id)`.
    async fn with(
        nodes: u32,
        level: FailureDomain,
        rack_of: impl Fn(u32) -> Option<u32>,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::generate();
        let meta = start(dir.path(), level, &secret).await;
        let base = meta.endpoint();
        let client = reqwest::Client::new();
        let signer = secret.signer_for(Audience::Meta);
        // Created before any node is known: the default rs(6,3), unchecked (the tests below
        // ask it of clusters too small for it, to see begin's refusal).
        let response =
            client.put(format!("{base}/v1/buckets/photos")).send_signed(&signer).await.unwrap();
        assert_eq!(response.status(), 201);
        for id in 1..=nodes {
            let url = format!("{base}/v1/nodes/{id}");
            let response = client.put(url).send_signed(&signer).await.unwrap();
            assert_eq!(response.status(), 200, "enrolling node {id}");
            let response = client
                .post(format!("{base}/v1/heartbeat"))
                .json(&heartbeat(id, rack_of(id)))
                .send_signed(&Signer::new(secret.node_key(id), Audience::Meta))
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
        Cluster { meta, base, client, signer, _dir: dir }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send_signed(&self.signer).await.unwrap();
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
    // At least k blocks (6 × 8 MiB), stored within 1/32 of what rs(6,3) promises (its last
    // group is two 2 MiB blocks): the object keeps the policy's layout.
    let size = 100 * MIB;
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
    assert_eq!(
        expected.len(),
        12 + 2 + 3 * 3,
        "100 MiB in 8 MiB blocks over width 2: 12 full blocks and 2 of 2 MiB, 3 groups"
    );
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
        json!({"objects": [{"key": "albums/2024/cat.jpg", "size": size, "generation": generation,
                            "created_ms": got["created_ms"]}],
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
    assert_eq!(committed["replaced"]["units"].as_array().unwrap().len(), 23);

    // Delete returns the units, then the object is gone.
    let (status, deleted) = cluster.delete(path).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["generation"], second);
    assert_eq!(deleted["units"].as_array().unwrap().len(), 1 + 3);
    let (status, _) = cluster.delete(path).await;
    assert_eq!(status, 404);
    let (status, _) = cluster.get(path).await;
    assert_eq!(status, 404);

    // A small object is fitted to its size: one stripe of k blocks, so its parity is about
    // r/k of its bytes (the policy's 1 MiB cells would have made one 1 MiB block and three
    // 1 MiB parities).
    let small = "/v1/buckets/photos/objects/small";
    let (status, begun) =
        cluster.post(&format!("{small}/begin"), json!({"size": MIB, "policy": policy})).await;
    assert_eq!(status, 200, "{begun}");
    let fitted: StripedLayout = serde_json::from_value(begun["layout"].clone()).unwrap();
    assert_eq!(fitted, layout.fitted(MIB));
    assert_ne!(fitted, layout);
    let units = begun["units"].as_array().unwrap();
    assert_eq!(units.len(), 6 + 3);
    let stored: u64 = units.iter().map(|u| u["len"].as_u64().unwrap()).sum();
    assert!(stored <= MIB * 3 / 2 + MIB / 20, "{stored} bytes stored for 1 MiB");
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

/// Issue 16 item 7: a bucket policy the cluster cannot hold is refused when it is set, not
/// at every later put; a bucket created without a code gets the widest default that fits.
#[tokio::test]
async fn bucket_policies_are_checked_against_the_cluster_when_set() {
    let cluster = Cluster::new(4).await;
    let (status, body) = cluster.call(reqwest::Method::PUT, "/v1/buckets/small", None).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["default_policy"]["code"], "rs(2,1)",
        "the default follows the cluster: {body}"
    );
    let wide = json!({"code": "rs(20,4)"});
    let (status, body) =
        cluster.call(reqwest::Method::PUT, "/v1/buckets/wide", Some(wide.clone())).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("policy_too_wide")), "{body}");
    assert_eq!((body["needed"].as_u64(), body["domains"].as_u64()), (Some(24), Some(4)), "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("rs(20,4)") && message.contains("needs 24"), "{message}");
    assert!(message.contains("rs(2,1)"), "names a code that fits: {message}");
    let (status, _) = cluster.get("/v1/buckets/wide").await;
    assert_eq!(status, 404, "a refused bucket was created");
    let (status, body) =
        cluster.call(reqwest::Method::PUT, "/v1/buckets/small/policy", Some(wide)).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("policy_too_wide")), "{body}");
    let (_, small) = cluster.get("/v1/buckets/small").await;
    assert_eq!(small["default_policy"]["code"], "rs(2,1)", "a refused policy was set: {small}");
    // A stripe wider than the cluster is refused as well.
    let striped = json!({"code": "rs(2,1)", "stripe_width": 6});
    let (status, body) =
        cluster.call(reqwest::Method::PUT, "/v1/buckets/striped", Some(striped)).await;
    assert_eq!((status, body["needed"].as_u64()), (409, Some(6)), "{body}");
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
    assert!(message.contains("failure domains (nodes)"), "{message}");
    assert_eq!(
        (body["failure_domain"].as_str(), body["usable_domains"].as_u64()),
        (Some("node"), Some(4))
    );

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

/// Begins `key` of `size` bytes with `policy`; returns the units of each group as
/// (unit name, node, disk), by group index.
async fn begin_groups(
    cluster: &Cluster,
    key: &str,
    size: u64,
    policy: Value,
) -> BTreeMap<usize, Vec<(String, u64, u64)>> {
    let layout: StripedLayout = serde_json::from_value(policy.clone()).unwrap();
    let path = format!("/v1/buckets/photos/objects/{key}/begin");
    let (status, begun) = cluster.post(&path, json!({"size": size, "policy": policy})).await;
    assert_eq!(status, 200, "{begun}");
    let mut group_of: BTreeMap<String, usize> = BTreeMap::new();
    for group in 0..layout.groups(size) {
        for unit in layout.group_units(size, group) {
            group_of.insert(unit_name(unit), group);
        }
    }
    let mut groups: BTreeMap<usize, Vec<(String, u64, u64)>> = BTreeMap::new();
    for unit in begun["units"].as_array().unwrap() {
        let name = unit["unit"].as_str().unwrap().to_string();
        let at = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
        groups.entry(group_of[&name]).or_default().push((name, at.0, at.1));
    }
    assert_eq!(groups.len(), layout.groups(size), "{begun}");
    groups
}

#[tokio::test]
async fn failure_domain_disk_places_a_group_on_distinct_disks_of_few_nodes() {
    // 3 nodes × 2 disks: 6 disks for rs(4,2), which needs 6 failure domains.
    let policy = json!({"code": "rs(4,2)", "stripe_width": 2, "cell_bytes": 4096,
                        "block_bytes": 16384});
    let cluster = Cluster::with(3, FailureDomain::Disk, |_| None).await;
    let (_, status) = cluster.get("/v1/status").await;
    assert_eq!(status["failure_domain"], "disk", "{status}");
    for seed in 0..8 {
        // 12 blocks of 16 KiB: 3 full groups of 4 data + 2 parity.
        let groups = begin_groups(&cluster, &format!("k{seed}"), 12 * 16384, policy.clone()).await;
        for (group, units) in groups {
            assert_eq!(units.len(), 6, "group {group}: {units:?}");
            let disks: BTreeSet<(u64, u64)> = units.iter().map(|u| (u.1, u.2)).collect();
            assert_eq!(disks.len(), units.len(), "group {group} shares a disk: {units:?}");
        }
    }
    // The same policy on the same nodes at level node is refused: 3 nodes, 6 needed.
    let nodes = Cluster::with(3, FailureDomain::Node, |_| None).await;
    let (status, body) = nodes
        .post("/v1/buckets/photos/objects/k/begin", json!({"size": 10, "policy": policy}))
        .await;
    assert_eq!((status, body["error"].as_str()), (503, Some("too_few_nodes")), "{body}");
    assert_eq!((body["needed"].as_u64(), body["usable_domains"].as_u64()), (Some(6), Some(3)));
    // A seventh unit would need a seventh disk.
    let wide = json!({"code": "rs(5,2)", "stripe_width": 1, "cell_bytes": 4096,
                      "block_bytes": 4096});
    let (status, body) = cluster
        .post("/v1/buckets/photos/objects/w/begin", json!({"size": 10, "policy": wide}))
        .await;
    assert_eq!(status, 503, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("7 distinct failure domains (disks)"), "{message}");
    cluster.meta.stop().await.unwrap();
    nodes.meta.stop().await.unwrap();
}

#[tokio::test]
async fn failure_domain_rack_places_a_group_on_distinct_racks() {
    // 6 nodes in 3 racks: rack = (id - 1) % 3, so nodes 1 and 4 share rack 0.
    let rack = |id: u32| (id - 1) % 3;
    let cluster = Cluster::with(6, FailureDomain::Rack, |id| Some(rack(id))).await;
    let (_, nodes) = cluster.get("/v1/nodes").await;
    assert_eq!(nodes["failure_domain"], "rack");
    for node in nodes["nodes"].as_array().unwrap() {
        assert_eq!(
            node["rack"].as_u64(),
            Some(u64::from(rack(node["id"].as_u64().unwrap() as u32)))
        );
    }
    let policy = json!({"code": "rs(2,1)", "stripe_width": 2, "cell_bytes": 4096,
                        "block_bytes": 8192});
    let mut nodes_used = BTreeSet::new();
    for seed in 0..8 {
        // 12 blocks of 8 KiB: 6 full groups of 2 data + 1 parity.
        let groups = begin_groups(&cluster, &format!("k{seed}"), 12 * 8192, policy.clone()).await;
        for (group, units) in groups {
            assert_eq!(units.len(), 3, "group {group}: {units:?}");
            let racks: BTreeSet<u32> = units.iter().map(|u| rack(u.1 as u32)).collect();
            assert_eq!(racks.len(), units.len(), "group {group} shares a rack: {units:?}");
            nodes_used.extend(units.iter().map(|u| u.1));
        }
    }
    assert_eq!(nodes_used.len(), 6, "both nodes of each rack get units");

    // 4 nodes in 2 racks cannot keep 3 units apart, though 4 nodes could.
    let two = Cluster::with(4, FailureDomain::Rack, |id| Some(id % 2)).await;
    let (status, body) =
        two.post("/v1/buckets/photos/objects/k/begin", json!({"size": 10, "policy": policy})).await;
    assert_eq!((status, body["error"].as_str()), (503, Some("too_few_nodes")), "{body}");
    assert_eq!((body["usable_domains"].as_u64(), body["needed"].as_u64()), (Some(2), Some(3)));
    assert_eq!(body["usable_nodes"], 4);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("in 2 failure domains (racks)")
            && message.contains("needs 3 distinct failure domains (racks)"),
        "{message}"
    );
    // Nodes that name no rack are each their own rack.
    let own = Cluster::with(3, FailureDomain::Rack, |_| None).await;
    let groups = begin_groups(&own, "k", 2 * 8192, policy.clone()).await;
    let nodes: BTreeSet<u64> = groups[&0].iter().map(|u| u.1).collect();
    assert_eq!(nodes.len(), 3);
    for cluster in [cluster, two, own] {
        cluster.meta.stop().await.unwrap();
    }
}

/// Issue 15 item 2: a commit carries one digest per unit or none; meta keeps them in its
/// database and shows each unit's digest; a partial set, an unknown unit name or
/// a digest that is not 32 hex digits is refused and leaves the write pending.
#[tokio::test]
async fn a_commit_records_one_digest_per_unit_or_none_and_refuses_partial_sets() {
    let cluster = Cluster::new(10).await;
    let path = "/v1/buckets/photos/objects/signed";
    let (status, begun) = cluster.post(&format!("{path}/begin"), json!({"size": 20 * MIB})).await;
    assert_eq!(status, 200, "{begun}");
    let generation = begun["generation"].as_u64().unwrap();
    let names: Vec<String> = begun["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["unit"].as_str().unwrap().to_string())
        .collect();
    assert!(begun["units"].as_array().unwrap().iter().all(|u| u.get("digest").is_none()));
    // Both kinds of digest, mixed in one object (a transition of an object written with
    // BLAKE3 digests gives its new parity keyed ones): each comes back as it was sent.
    let digest_of = |i: usize| match i % 2 {
        0 => format!("{i:032x}"),
        _ => format!("k{i:032x}"),
    };
    let all: serde_json::Map<String, Value> =
        names.iter().enumerate().map(|(i, n)| (n.clone(), json!(digest_of(i)))).collect();
    let commit = format!("{path}/commit");
    let mut partial = all.clone();
    partial.remove(&names[1]);
    let mut stranger = all.clone();
    stranger.insert("d99".into(), json!(digest_of(99)));
    let mut misnamed = all.clone();
    misnamed.insert("x1".into(), json!(digest_of(1)));
    let mut short = all.clone();
    short.insert(names[0].clone(), json!("abc"));
    let mut upper = all.clone();
    upper.insert(names[0].clone(), json!(format!("K{:032x}", 0)));
    for (bad, code) in [
        (upper, "bad_request"),
        (partial, "invalid_digests"),
        (stranger, "invalid_digests"),
        (misnamed, "bad_request"),
        (short, "bad_request"),
    ] {
        let body = json!({"generation": generation, "digests": bad});
        let (status, answer) = cluster.post(&commit, body).await;
        assert_eq!((status, answer["error"].as_str()), (400, Some(code)), "{answer}");
    }
    let (status, answer) = cluster.get(path).await;
    assert_eq!(status, 404, "still not committed: {answer}");
    let (status, committed) =
        cluster.post(&commit, json!({"generation": generation, "digests": all})).await;
    assert_eq!(status, 200, "{committed}");
    let (status, read) = cluster.get(path).await;
    assert_eq!(status, 200, "{read}");
    for (i, name) in names.iter().enumerate() {
        let unit = read["units"].as_array().unwrap().iter().find(|u| u["unit"] == *name).unwrap();
        assert_eq!(unit["digest"], digest_of(i), "{unit}");
    }
    // Without digests (an older writer) the object simply has none.
    cluster.put("plain", MIB).await;
    let (_, plain) = cluster.get("/v1/buckets/photos/objects/plain").await;
    assert!(plain["units"].as_array().unwrap().iter().all(|u| u.get("digest").is_none()));
    cluster.meta.stop().await.unwrap();
}
