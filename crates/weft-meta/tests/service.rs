//! The meta HTTP service against a real in-process server, over real HTTP.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_meta::service::{bind, MetaConfig, RunningMeta};

async fn start(dir: &std::path::Path, down_after_ms: u64, secret: &ClusterSecret) -> RunningMeta {
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir, secret.clone());
    config.down_after_ms = down_after_ms;
    bind(config).await.expect("meta starts")
}

/// Enrols node `id` (signed as the client), then posts `body` as its heartbeat, signed with
/// node `id`'s key.
async fn post_heartbeat(
    client: &reqwest::Client,
    base: &str,
    secret: &ClusterSecret,
    id: u32,
    body: &Value,
) -> reqwest::Response {
    let enrolled = client
        .put(format!("{base}/v1/nodes/{id}"))
        .send_signed(&secret.signer_for(Audience::Meta))
        .await
        .unwrap();
    assert_eq!(enrolled.status(), 200, "enrolling node {id}");
    client
        .post(format!("{base}/v1/heartbeat"))
        .json(body)
        .send_signed(&Signer::new(secret.node_key(id), Audience::Meta))
        .await
        .unwrap()
}

fn heartbeat(id: u32) -> Value {
    json!({
        "node_id": id,
        "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
        "pid": 4242,
        "disks": [
            {"index": 0, "dir": "/d0", "units": 3, "bytes": 300, "failed": null},
            {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": "fsync failed"},
        ],
    })
}

async fn get(client: &reqwest::Client, signer: &Signer, url: String) -> (u16, Value) {
    let response = client.get(url).send_signed(signer).await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn heartbeats_make_nodes_up_then_silence_makes_them_down() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let meta = start(dir.path(), 300, &secret).await;
    let base = meta.endpoint();
    let client = reqwest::Client::new();

    let (status, nodes) = get(&client, &signer, format!("{base}/v1/nodes")).await;
    assert_eq!(status, 200);
    assert_eq!(nodes["nodes"], json!([]));

    for id in [2, 1] {
        let response = post_heartbeat(&client, &base, &secret, id, &heartbeat(id)).await;
        assert_eq!(response.status(), 200);
    }
    let (_, nodes) = get(&client, &signer, format!("{base}/v1/nodes")).await;
    let list = nodes["nodes"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["id"], 1, "nodes are listed by id");
    assert_eq!(list[0]["state"], "up");
    assert_eq!(list[0]["pid"], 4242);
    assert_eq!(list[0]["endpoint"], "http://127.0.0.1:9001");
    assert!(list[0]["last_heartbeat_ms"].as_u64().unwrap() > 0);
    // A heartbeat of the old shape (no capacity) is listed as is, with state "ok" added.
    assert_eq!(list[0]["disks"], with_state_ok(heartbeat(1)["disks"].clone()));
    assert_eq!(list[0]["rack"], 1, "a node that names no rack is its own rack");
    assert_eq!(nodes["failure_domain"], "node", "meta's default level");

    // Node 1 keeps heartbeating, node 2 falls silent.
    let deadline = Instant::now() + Duration::from_secs(5);
    let down = loop {
        post_heartbeat(&client, &base, &secret, 1, &heartbeat(1)).await;
        let (_, nodes) = get(&client, &signer, format!("{base}/v1/nodes")).await;
        if nodes["nodes"][1]["state"] == "down" {
            break nodes;
        }
        assert!(Instant::now() < deadline, "node 2 never went down: {nodes}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(down["nodes"][0]["state"], "up");
    assert_eq!(down["nodes"][1]["id"], 2);

    let (status, body) = get(&client, &signer, format!("{base}/v1/status")).await;
    assert_eq!(status, 200);
    assert_eq!(body["under_protected_units"], 0);
    assert_eq!(body["repair_queue"], 0);
    assert_eq!(body["nodes_up"], 1);
    assert_eq!(body["nodes_down"], 1);
    assert_eq!(body["repairs_completed"], 0);
    assert_eq!(body["failure_domain"], "node");
    // Status nodes are the /v1/nodes entries.
    assert_eq!(body["nodes"], down["nodes"]);
    let node = &body["nodes"][1];
    assert_eq!((node["id"].clone(), node["state"].clone()), (json!(2), json!("down")));
    assert_eq!(
        (node["pid"].clone(), node["endpoint"].clone()),
        (json!(4242), json!("http://127.0.0.1:9002"))
    );
    assert_eq!(node["disks"], with_state_ok(heartbeat(2)["disks"].clone()));
    assert_eq!((body["nearfull_disks"].clone(), body["full_disks"].clone()), (json!(0), json!(0)));

    // A heartbeat brings it back.
    post_heartbeat(&client, &base, &secret, 2, &heartbeat(2)).await;
    let (_, nodes) = get(&client, &signer, format!("{base}/v1/nodes")).await;
    assert_eq!(nodes["nodes"][1]["state"], "up");
    meta.stop().await.unwrap();
}

/// Disk reports of the old shape as meta lists them: with `"state":"ok"` added.
fn with_state_ok(mut disks: Value) -> Value {
    for disk in disks.as_array_mut().unwrap() {
        disk["state"] = json!("ok");
    }
    disks
}

#[tokio::test]
async fn bad_heartbeats_and_unknown_routes_are_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let meta = start(dir.path(), 1000, &secret).await;
    let base = meta.endpoint();
    let client = reqwest::Client::new();
    let response = post_heartbeat(&client, &base, &secret, 1, &json!({"node_id": 1})).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "bad_request");
    assert!(body["message"].as_str().unwrap().contains("heartbeat"));

    let (status, body) = get(&client, &signer, format!("{base}/v1/nope")).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"], "no_route");
    meta.stop().await.unwrap();
}

#[tokio::test]
async fn buckets_are_created_listed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let meta = start(dir.path(), 1000, &secret).await;
    let base = meta.endpoint();
    let client = reqwest::Client::new();

    let response =
        client.put(format!("{base}/v1/buckets/photos")).send_signed(&signer).await.unwrap();
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    assert_eq!(
        created["default_policy"],
        json!({"code": "rs(6,3)", "stripe_width": 2, "cell_bytes": 1048576,
               "block_bytes": 8388608})
    );
    let response = client
        .put(format!("{base}/v1/buckets/logs"))
        .body(r#"{"code":"rs(10,4)","stripe_width":4}"#)
        .send_signed(&signer)
        .await
        .unwrap();
    assert_eq!(response.status(), 201);

    let (status, list) = get(&client, &signer, format!("{base}/v1/buckets")).await;
    assert_eq!(status, 200);
    let names: Vec<&str> =
        list["buckets"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["logs", "photos"]);
    assert_eq!(list["buckets"][0]["default_policy"]["code"], "rs(10,4)");
    assert_eq!(list["buckets"][0]["default_policy"]["block_bytes"], 8388608);

    // Exists, bad names, bad policies.
    let response =
        client.put(format!("{base}/v1/buckets/photos")).send_signed(&signer).await.unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "bucket_exists");
    let response =
        client.put(format!("{base}/v1/buckets/Bad_Name")).send_signed(&signer).await.unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "invalid_name");
    // S3's rules for a new name: 3 to 63 characters, a letter or digit at each end.
    for (name, why) in [("ab", "3 to 63 characters"), ("-abc", "begin and end")] {
        let response =
            client.put(format!("{base}/v1/buckets/{name}")).send_signed(&signer).await.unwrap();
        assert_eq!(response.status(), 400, "{name}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_name", "{body}");
        assert!(body["message"].as_str().unwrap().contains(why), "{body}");
    }
    for policy in [r#"{"code":"rs(0,3)"}"#, r#"{"colour":"red"}"#, "[1]", "not json"] {
        let response = client
            .put(format!("{base}/v1/buckets/other"))
            .body(policy)
            .send_signed(&signer)
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{policy}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"] == "invalid_policy" || body["error"] == "bad_request", "{body}");
    }

    let (status, bucket) = get(&client, &signer, format!("{base}/v1/buckets/photos")).await;
    assert_eq!((status, bucket["name"].as_str()), (200, Some("photos")));

    let response =
        client.delete(format!("{base}/v1/buckets/photos")).send_signed(&signer).await.unwrap();
    assert_eq!(response.status(), 204);
    let response =
        client.delete(format!("{base}/v1/buckets/photos")).send_signed(&signer).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "no_such_bucket");
    let (status, _) = get(&client, &signer, format!("{base}/v1/buckets/photos")).await;
    assert_eq!(status, 404);
    let (_, list) = get(&client, &signer, format!("{base}/v1/buckets")).await;
    assert_eq!(list["buckets"].as_array().unwrap().len(), 1);
    meta.stop().await.unwrap();
}

#[tokio::test]
async fn state_persists_and_a_second_meta_on_the_same_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let meta = start(dir.path(), 1000, &secret).await;
    let client = reqwest::Client::new();
    let base = meta.endpoint();
    // Before the node is known (one node could hold no default policy).
    let created = client.put(format!("{base}/v1/buckets/kept")).send_signed(&signer).await;
    assert_eq!(created.unwrap().status(), 201);
    post_heartbeat(&client, &base, &secret, 7, &heartbeat(7)).await;

    let error = bind(MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), secret.clone()))
        .await
        .expect_err("the store is locked by the first meta");
    let message = error.to_string();
    assert!(message.contains("meta.redb"), "{message}");
    assert!(message.contains("another weft meta"), "{message}");
    meta.stop().await.unwrap();

    let meta = start(dir.path(), 1000, &secret).await;
    let base = meta.endpoint();
    let (_, nodes) = get(&client, &signer, format!("{base}/v1/nodes")).await;
    assert_eq!(nodes["nodes"][0]["id"], 7);
    let (_, buckets) = get(&client, &signer, format!("{base}/v1/buckets")).await;
    assert_eq!(buckets["buckets"][0]["name"], "kept");
    meta.stop().await.unwrap();
}

/// A bucket policy, an object's own policy or a transition target with cells or blocks
/// under 4 KiB is refused: one byte cells made a 16 KiB object 24,576 unit files.
#[tokio::test]
async fn policies_with_cells_or_blocks_under_4_kib_are_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let meta = start(dir.path(), 1000, &secret).await;
    let base = meta.endpoint();
    let client = reqwest::Client::new();
    let post = |path: String, body: Value| {
        let request = client.post(format!("{base}{path}")).json(&body);
        let signer = signer.clone();
        async move {
            let response = request.send_signed(&signer).await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let tiny = [(1, 1), (1, 4096), (2048, 4096), (4096, 2048)];
    for (cell, block) in tiny {
        let policy = json!({"code": "rs(2,1)", "stripe_width": 2, "cell_bytes": cell,
                            "block_bytes": block});
        let response = client
            .put(format!("{base}/v1/buckets/b{cell}x{block}"))
            .json(&policy)
            .send_signed(&signer)
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{policy}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_policy", "{body}");
        if cell >= 1 && block % cell == 0 {
            assert!(body["message"].as_str().unwrap().contains("at least 4096"), "{body}");
        }
    }
    // The smallest allowed policy is accepted; an object's own policy is held to the floor.
    let floor = json!({"code": "rs(2,1)", "stripe_width": 2, "cell_bytes": 4096,
                       "block_bytes": 4096});
    let response = client
        .put(format!("{base}/v1/buckets/bkt"))
        .json(&floor)
        .send_signed(&signer)
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let own = json!({"size": 16384, "policy": {"code": "rs(2,1)", "stripe_width": 2,
                                                "cell_bytes": 1, "block_bytes": 1}});
    let (status, body) = post("/v1/buckets/bkt/objects/k/begin".into(), own).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_policy")), "{body}");
    let target = json!({"bucket": "bkt", "key": "k", "layout": {"code": "rs(3,1)",
                        "stripe_width": 2, "cell_bytes": 1, "block_bytes": 1}});
    let (status, body) = post("/v1/transitions".into(), target).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_policy")), "{body}");
    meta.stop().await.unwrap();
}

/// Several metas on one PostgreSQL store: each lists them all, exactly one leads, a node
/// enrolled through one may heartbeat to another, and when the leader stops another leads
/// within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metas_sharing_one_store_elect_one_leader_and_hand_over() {
    let Some(url) = tokio::task::spawn_blocking(weft_meta::pg_local::test_database).await.unwrap()
    else {
        return;
    };
    let secret = ClusterSecret::generate();
    let signer = secret.signer_for(Audience::Meta);
    let client = reqwest::Client::new();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut metas = Vec::new();
    for dir in &dirs {
        let mut config =
            MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), secret.clone());
        config.store = weft_meta::service::StoreLocation::Postgres(url.clone());
        config.lease_ms = 600;
        metas.push(bind(config).await.expect("meta starts"));
    }
    let bases: Vec<String> = metas.iter().map(|m| m.endpoint()).collect();
    let leaders = |status: &Value| -> Vec<String> {
        let metas = status["meta"].as_array().cloned().unwrap_or_default();
        metas
            .iter()
            .filter(|m| m["leader"] == true)
            .map(|m| m["endpoint"].as_str().unwrap().to_owned())
            .collect()
    };
    // Both metas list both; the first started leads.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, status) = get(&client, &signer, format!("{}/v1/status", bases[1])).await;
        let listed = status["meta"].as_array().map_or(0, Vec::len);
        if listed == 2 && leaders(&status) == [bases[0].clone()] {
            break;
        }
        assert!(Instant::now() < deadline, "two metas, one leader: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A node enrolled through meta 0 heartbeats to meta 1.
    let enrolled =
        client.put(format!("{}/v1/nodes/5", bases[0])).send_signed(&signer).await.unwrap();
    assert_eq!(enrolled.status(), 200);
    let beat = client
        .post(format!("{}/v1/heartbeat", bases[1]))
        .json(&heartbeat(5))
        .send_signed(&Signer::new(secret.node_key(5), Audience::Meta))
        .await
        .unwrap();
    assert_eq!(beat.status(), 200, "enrolment is the store's, not one meta's");
    let (_, nodes) = get(&client, &signer, format!("{}/v1/nodes", bases[0])).await;
    assert_eq!(nodes["nodes"][0]["id"], 5, "{nodes}");

    // The leader stops: the other leads within the lease.
    let first = metas.remove(0);
    let stopped_at = Instant::now();
    first.stop().await.unwrap();
    loop {
        let (_, status) = get(&client, &signer, format!("{}/v1/status", bases[1])).await;
        if leaders(&status) == [bases[1].clone()] {
            assert_eq!(status["meta"].as_array().unwrap().len(), 1, "{status}");
            break;
        }
        assert!(stopped_at.elapsed() < Duration::from_secs(5), "no new leader: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    metas.remove(0).stop().await.unwrap();
}
