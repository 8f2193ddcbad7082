//! The transition routes of meta against a real in-process server over real HTTP: plan a
//! regroup, commit it (keeping what repairs did meanwhile), abort it, replace it, refuse it
//! when the object changed, and keep it across a restart.
//!
//! Nodes are fake: one heartbeat each at start, and a down timeout long enough that they stay
//! up for the whole test (meta only moves metadata; no unit is ever written).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_layout::{DiskLocation, Placement, UnitId};
use weft_meta::parse_unit_name;
use weft_meta::service::{bind, FailureDomain, MetaConfig, RunningMeta};

const MIB: u64 = 1 << 20;
const NODES: u32 = 24;
/// 37 data blocks of 1 MiB (the last one short): 7 groups under rs(6,3), 4 under rs(12,3).
const SIZE: u64 = 36 * MIB + 1000;

fn layout(code: &str) -> Value {
    json!({"code": code, "stripe_width": 6, "cell_bytes": MIB, "block_bytes": MIB})
}

async fn start_meta(dir: &std::path::Path, secret: &ClusterSecret) -> RunningMeta {
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir, secret.clone());
    config.down_after_ms = 600_000;
    config.failure_domain = FailureDomain::Node;
    bind(config).await.expect("meta starts")
}

struct Cluster {
    dir: tempfile::TempDir,
    meta: Option<RunningMeta>,
    base: String,
    client: reqwest::Client,
    secret: ClusterSecret,
}

impl Cluster {
    /// Meta, 24 nodes of 2 disks, and bucket "photos" of rs(6,3), stripe width 6, 1 MiB
    /// cells and blocks.
    async fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::generate();
        let meta = start_meta(dir.path(), &secret).await;
        let base = meta.endpoint();
        let client = reqwest::Client::new();
        let cluster = Cluster { dir, meta: Some(meta), base, client, secret };
        for id in 1..=NODES {
            let (status, body) =
                cluster.call(reqwest::Method::PUT, &format!("/v1/nodes/{id}"), Value::Null).await;
            assert_eq!(status, 200, "{body}");
            let beat = json!({
                "node_id": id,
                "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
                "pid": 4000 + id,
                "disks": [
                    {"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": null},
                    {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": null},
                ],
            });
            let node = Signer::new(cluster.secret.node_key(id), Audience::Meta);
            let (status, body) =
                cluster.call_as(&node, reqwest::Method::POST, "/v1/heartbeat", beat).await;
            assert_eq!(status, 200, "{body}");
        }
        let (status, body) =
            cluster.call(reqwest::Method::PUT, "/v1/buckets/photos", layout("rs(6,3)")).await;
        assert_eq!(status, 201, "{body}");
        cluster
    }

    async fn restart(&mut self) {
        self.meta.take().unwrap().stop().await.unwrap();
        let meta = start_meta(self.dir.path(), &self.secret).await;
        self.base = meta.endpoint();
        self.meta = Some(meta);
    }

    /// A request signed as the client.
    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        self.call_as(&self.secret.signer_for(Audience::Meta), method, path, body).await
    }

    async fn call_as(
        &self,
        signer: &Signer,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if !body.is_null() {
            request = request.json(&body);
        }
        let response = request.send_signed(signer).await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, Value::Null).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, body).await
    }

    /// Begins and commits `key`; returns the committed object.
    async fn put(&self, key: &str) -> Value {
        let path = format!("/v1/buckets/photos/objects/{key}");
        let (status, begun) = self.post(&format!("{path}/begin"), json!({"size": SIZE})).await;
        assert_eq!(status, 200, "{begun}");
        let body = json!({"generation": begun["generation"]});
        let (status, committed) = self.post(&format!("{path}/commit"), body).await;
        assert_eq!(status, 200, "{committed}");
        committed
    }

    async fn object(&self, key: &str) -> Value {
        let (status, object) = self.get(&format!("/v1/buckets/photos/objects/{key}")).await;
        assert_eq!(status, 200, "{object}");
        object
    }

    /// `POST /v1/transitions` of `key` to `code`.
    async fn begin(&self, key: &str, code: &str) -> (u16, Value) {
        let body = json!({"bucket": "photos", "key": key, "layout": layout(code),
                          "mode": "regroup"});
        self.post("/v1/transitions", body).await
    }

    async fn commit(&self, key: &str, id: &Value) -> (u16, Value) {
        self.post("/v1/transitions/commit", json!({"bucket": "photos", "key": key, "id": id})).await
    }

    async fn abort(&self, key: &str, id: &Value) -> (u16, Value) {
        self.post("/v1/transitions/abort", json!({"bucket": "photos", "key": key, "id": id})).await
    }

    async fn pending(&self) -> Vec<Value> {
        let (status, list) = self.get("/v1/transitions").await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(list["pending"], list["transitions"].as_array().unwrap().len());
        list["transitions"].as_array().unwrap().clone()
    }

    async fn stop(mut self) {
        self.meta.take().unwrap().stop().await.unwrap();
    }
}

/// The units of `object` (an object response) that are parities, by name, with their entry.
fn parities(object: &Value) -> Vec<Value> {
    let units = object["units"].as_array().unwrap();
    units.iter().filter(|u| u["unit"].as_str().unwrap().starts_with('p')).cloned().collect()
}

/// A unit entry without its node state, as transition replies list units.
fn bare(unit: &Value) -> Value {
    let mut unit = unit.clone();
    unit.as_object_mut().unwrap().remove("state");
    unit
}

fn names(units: &Value) -> BTreeSet<String> {
    units.as_array().unwrap().iter().map(|u| u["unit"].as_str().unwrap().to_string()).collect()
}

/// The unit generation a unit key ends with.
fn key_generation(unit: &Value) -> u64 {
    let key = unit["unit_key"].as_str().unwrap();
    u64::from_str_radix(key.rsplit('-').next().unwrap(), 16).unwrap()
}

/// The node of `unit` in a list of unit entries.
fn node_of(units: &Value, unit: &str) -> u64 {
    let entry = units.as_array().unwrap().iter().find(|u| u["unit"] == unit).unwrap();
    entry["node_id"].as_u64().unwrap()
}

/// The placement described by an object response (node = rack, as meta places).
fn placement_of(object: &Value) -> Placement {
    let (mut data, mut parity) = (Vec::new(), Vec::new());
    for unit in object["units"].as_array().unwrap() {
        let node = unit["node_id"].as_u64().unwrap() as u32;
        let disk = DiskLocation { rack: node, node, disk: unit["disk"].as_u64().unwrap() as u32 };
        match parse_unit_name(unit["unit"].as_str().unwrap()).unwrap() {
            UnitId::Data(_) => data.push(disk),
            UnitId::Parity { .. } => parity.push(disk),
        }
    }
    let layout = serde_json::from_value(object["layout"].clone()).unwrap();
    let size = object["size"].as_u64().unwrap();
    Placement::from_parts(layout, size, FailureDomain::Node, 0, data, parity).unwrap()
}

#[tokio::test]
async fn a_regroup_rs6_to_rs12_writes_only_parity_and_commit_swaps_layout_and_parity() {
    let cluster = Cluster::start().await;
    let object = cluster.put("cat.jpg").await;
    let before = cluster.object("cat.jpg").await;
    assert_eq!(before["parity_generation"], 0);
    assert_eq!(parities(&before).len(), 7 * 3);

    let (status, plan) = cluster.begin("cat.jpg", "rs(12,3)").await;
    assert_eq!(status, 200, "{plan}");
    let transition = &plan["transition"];
    let id = transition["id"].as_u64().unwrap();
    assert!(id >= 1);
    assert_eq!(
        (&transition["bucket"], &transition["key"], &transition["generation"], &transition["mode"]),
        (&json!("photos"), &json!("cat.jpg"), &object["generation"], &json!("regroup"))
    );
    assert!(transition["created_ms"].as_u64().unwrap() > 0);
    assert_eq!(plan["object"], before, "the plan carries the object exactly as GET returns it");
    assert_eq!(plan["new_layout"], layout("rs(12,3)"));
    assert_eq!(plan["replaced"], Value::Null);
    // The rs(6,3) groups were placed on disjoint nodes: merging them moves no data.
    assert_eq!(plan["relocations"], json!([]));
    let create = plan["create"].as_array().unwrap();
    assert_eq!(create.len(), 4 * 3, "4 new groups of 3 parities");
    let expected: BTreeSet<String> =
        (0..4).flat_map(|g| (0..3).map(move |i| format!("p{g}.{i}"))).collect();
    assert_eq!(names(&plan["create"]), expected);
    for unit in create {
        assert_eq!(key_generation(unit), id, "new parity has unit generation = the id: {unit}");
        assert!(unit["unit_key"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}-p", object["object_id"].as_str().unwrap())));
        // Groups 0–2 hold 12 full blocks; group 3 only the last, 1000-byte one.
        let len = if unit["unit"].as_str().unwrap().starts_with("p3.") { 1000 } else { MIB };
        assert_eq!(unit["len"], len, "{unit}");
        let node = unit["node_id"].as_u64().unwrap();
        assert_eq!(unit["endpoint"], format!("http://127.0.0.1:{}", 9000 + node));
    }
    let old_parity: Vec<Value> = parities(&before).iter().map(bare).collect();
    assert_eq!(plan["delete"], json!(old_parity), "delete lists the old parity units");
    // Predicted IO: a regroup reads the data once and writes only parity.
    let (regroup, restripe) = (&plan["predicted"]["regroup"], &plan["predicted"]["restripe"]);
    assert_eq!(regroup["bytes_read"], SIZE);
    assert_eq!(regroup["data_bytes_written"], 0);
    let parity = 9 * MIB + 3 * 1000;
    assert_eq!(regroup["parity_bytes_written"], parity);
    assert_eq!(regroup["relocated_bytes"], 0);
    assert_eq!(regroup["network_bytes"], SIZE + parity);
    assert_eq!(restripe["bytes_read"], SIZE);
    assert_eq!(restripe["data_bytes_written"], SIZE);
    assert_eq!(restripe["parity_bytes_written"], parity);
    // The new placement keeps the rules over the object's data blocks and the new parity.
    let mut after = before.clone();
    let mut units: Vec<Value> = before["units"].as_array().unwrap()[..37].to_vec();
    units.extend(create.iter().cloned());
    after["units"] = json!(units);
    after["layout"] = layout("rs(12,3)");
    assert_eq!(placement_of(&after).verify(), Ok(()));

    // Pending: listed, readable; the object is unchanged until the commit.
    let pending = cluster.pending().await;
    assert_eq!(pending, vec![transition.clone()]);
    let (status, again) = cluster.get("/v1/transitions/photos/cat.jpg").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!((&again["create"], &again["delete"]), (&plan["create"], &plan["delete"]));
    assert_eq!(again["predicted"], plan["predicted"]);
    assert_eq!(cluster.object("cat.jpg").await, before);

    let (status, done) = cluster.commit("cat.jpg", &json!(id)).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["transition"], *transition);
    let now = cluster.object("cat.jpg").await;
    assert_eq!(done["object"], now, "commit returns the object as GET now does");
    assert_eq!(now["layout"], layout("rs(12,3)"));
    assert_eq!(now["generation"], object["generation"], "a transition is not a new write");
    assert_eq!(now["parity_generation"], id);
    let new_parity: Vec<Value> = parities(&now).iter().map(bare).collect();
    assert_eq!(json!(new_parity), plan["create"], "the object names the new parity units");
    let data_before: Vec<Value> = before["units"].as_array().unwrap()[..37].to_vec();
    assert_eq!(now["units"].as_array().unwrap()[..37], data_before[..], "data did not move");
    assert_eq!(done["delete"], json!(old_parity), "now the old parity is garbage");
    assert_eq!(cluster.pending().await, Vec::<Value>::new());

    // A second commit says it is done; an abort finds nothing.
    let (status, again) = cluster.commit("cat.jpg", &json!(id)).await;
    assert_eq!(
        (status, &again["error"], &again["reason"]),
        (409, &json!("transition_conflict"), &json!("already_committed")),
        "{again}"
    );
    let (status, body) = cluster.abort("cat.jpg", &json!(id)).await;
    assert_eq!((status, &body["error"]), (404, &json!("no_such_transition")), "{body}");

    // And back to rs(6,3): the old parity generation is left behind for good.
    let (status, back) = cluster.begin("cat.jpg", "rs(6,3)").await;
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["relocations"], json!([]));
    assert_eq!(back["create"].as_array().unwrap().len(), 21);
    assert!(back["transition"]["id"].as_u64().unwrap() > id);
    assert!(back["delete"].as_array().unwrap().iter().all(|u| key_generation(u) == id));
    cluster.stop().await;
}

#[tokio::test]
async fn a_block_a_repair_moved_after_begin_stays_where_the_repair_put_it() {
    let cluster = Cluster::start().await;
    let object = cluster.put("cat.jpg").await;
    let (status, plan) = cluster.begin("cat.jpg", "rs(12,3)").await;
    assert_eq!(status, 200, "{plan}");
    let id = plan["transition"]["id"].clone();

    // d3 is reported damaged and rebuilt elsewhere before the commit: on a node that holds no
    // unit of its old stripe or group (the old rules) nor of its new group (the new ones).
    let units = &object["units"];
    let new_group_nodes: BTreeSet<u64> = (0..12)
        .map(|x| node_of(units, &format!("d{x}")))
        .chain((0..3).map(|i| node_of(&plan["create"], &format!("p0.{i}"))))
        .chain((0..3).map(|i| node_of(units, &format!("p0.{i}"))))
        .collect();
    let target = (1..=NODES as u64).find(|n| !new_group_nodes.contains(n)).unwrap();
    let report = json!({"bucket": "photos", "key": "cat.jpg", "generation": object["generation"],
                        "unit": "d3", "reason": "checksum mismatch"});
    let (status, body) = cluster.post("/v1/repairs", report).await;
    assert_eq!(status, 200, "{body}");
    let (status, taken) = cluster.post("/v1/repairs/take", json!({"lease_ms": 60_000})).await;
    assert_eq!(status, 200, "{taken}");
    assert_eq!(taken["task"]["unit"], "d3");
    let done = json!({"deadline_ms": taken["task"]["deadline_ms"], "node_id": target, "disk": 1});
    let path = format!("/v1/repairs/{}/complete", taken["task"]["task_id"]);
    let (status, body) = cluster.post(&path, done).await;
    assert_eq!((status, &body["result"]), (200, &json!("relocated")), "{body}");

    let (status, committed) = cluster.commit("cat.jpg", &id).await;
    assert_eq!(status, 200, "{committed}");
    let now = cluster.object("cat.jpg").await;
    assert_eq!(node_of(&now["units"], "d3"), target, "the repair's move is kept");
    let d3 = now["units"].as_array().unwrap().iter().find(|u| u["unit"] == "d3").unwrap();
    assert_eq!(d3["disk"], 1);
    assert_eq!(now["layout"], layout("rs(12,3)"));
    assert!(!names(&committed["delete"]).contains("d3"), "d3 was not relocated by the regroup");
    assert_eq!(placement_of(&now).verify(), Ok(()));
    cluster.stop().await;
}

#[tokio::test]
async fn a_repair_into_a_domain_of_the_new_group_makes_the_commit_a_conflict_then_abort() {
    let cluster = Cluster::start().await;
    let object = cluster.put("dog.jpg").await;
    let (status, plan) = cluster.begin("dog.jpg", "rs(12,3)").await;
    assert_eq!(status, 200, "{plan}");
    let id = plan["transition"]["id"].clone();
    // A block of new group 0 moves to the node of a new parity of that group: fine under
    // rs(6,3), a broken rule under rs(12,3). New group 0 is old groups 0 and 1 (d0–d5 and
    // d6–d11, on disjoint nodes), so a new parity's node is outside one of them.
    let units = &object["units"];
    let old_peers = |group: usize| -> BTreeSet<u64> {
        (6 * group..6 * group + 6)
            .map(|x| node_of(units, &format!("d{x}")))
            .chain((0..3).map(|i| node_of(units, &format!("p{group}.{i}"))))
            .collect()
    };
    let target = node_of(&plan["create"], "p0.0");
    let block = if old_peers(0).contains(&target) { "d6" } else { "d0" };
    assert!(!old_peers(if block == "d0" { 0 } else { 1 }).contains(&target));
    let report = json!({"bucket": "photos", "key": "dog.jpg", "generation": object["generation"],
                        "unit": block, "reason": "checksum mismatch"});
    assert_eq!(cluster.post("/v1/repairs", report).await.0, 200);
    let (_, taken) = cluster.post("/v1/repairs/take", json!({"lease_ms": 60_000})).await;
    let done = json!({"deadline_ms": taken["task"]["deadline_ms"], "node_id": target, "disk": 0});
    let path = format!("/v1/repairs/{}/complete", taken["task"]["task_id"]);
    let (status, body) = cluster.post(&path, done).await;
    assert_eq!((status, &body["result"]), (200, &json!("relocated")), "{body}");

    let moved = cluster.object("dog.jpg").await;
    let (status, refused) = cluster.commit("dog.jpg", &id).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        (&refused["error"], &refused["reason"]),
        (&json!("transition_conflict"), &json!("placement_conflict"))
    );
    assert!(refused["message"].as_str().unwrap().contains("abort"), "{refused}");
    assert_eq!(cluster.object("dog.jpg").await, moved, "nothing changed");
    assert_eq!(cluster.pending().await.len(), 1, "the transition stays pending");

    let (status, aborted) = cluster.abort("dog.jpg", &id).await;
    assert_eq!(status, 200, "{aborted}");
    assert_eq!(aborted["transition"], plan["transition"]);
    assert_eq!(aborted["delete"], plan["create"], "no relocations: the new parity is garbage");
    assert_eq!(cluster.pending().await, Vec::<Value>::new());
    let (status, body) = cluster.abort("dog.jpg", &id).await;
    assert_eq!(
        (status, &body["error"], &body["pending"]),
        (404, &json!("no_such_transition"), &Value::Null)
    );
    cluster.stop().await;
}

#[tokio::test]
async fn overwriting_or_deleting_the_object_drops_its_transition() {
    let cluster = Cluster::start().await;
    let first = cluster.put("cat.jpg").await;
    let (_, plan) = cluster.begin("cat.jpg", "rs(12,3)").await;
    let id = plan["transition"]["id"].clone();
    let second = cluster.put("cat.jpg").await;
    assert_eq!(cluster.pending().await, Vec::<Value>::new(), "the overwrite dropped it");
    let (status, refused) = cluster.commit("cat.jpg", &id).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("not_pending")), "{refused}");
    // With the generation the plan named, meta says precisely what happened.
    let body = json!({"bucket": "photos", "key": "cat.jpg", "id": id,
                      "generation": first["generation"]});
    let (status, refused) = cluster.post("/v1/transitions/commit", body).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("object_replaced")), "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("overwritten"), "{refused}");
    assert_eq!(cluster.object("cat.jpg").await["layout"], layout("rs(6,3)"));
    assert_eq!(cluster.object("cat.jpg").await["generation"], second["generation"]);
    let (status, _) = cluster.abort("cat.jpg", &id).await;
    assert_eq!(status, 404);

    let (_, plan) = cluster.begin("cat.jpg", "rs(12,3)").await;
    let id = plan["transition"]["id"].clone();
    let (status, _) = cluster
        .call(reqwest::Method::DELETE, "/v1/buckets/photos/objects/cat.jpg", Value::Null)
        .await;
    assert_eq!(status, 200);
    assert_eq!(cluster.pending().await, Vec::<Value>::new(), "the delete dropped it");
    let (status, refused) = cluster.commit("cat.jpg", &id).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("object_gone")), "{refused}");
    cluster.stop().await;
}

#[tokio::test]
async fn a_second_begin_replaces_the_first_and_returns_its_units() {
    let cluster = Cluster::start().await;
    cluster.put("cat.jpg").await;
    let (_, first) = cluster.begin("cat.jpg", "rs(12,3)").await;
    let (status, second) = cluster.begin("cat.jpg", "rs(10,4)").await;
    assert_eq!(status, 200, "{second}");
    let replaced = &second["replaced"];
    assert_eq!(replaced["transition"], first["transition"]);
    assert_eq!(replaced["create"], first["create"], "the first plan's units, to delete");
    assert_eq!(replaced["relocation_copies"], json!([]));
    let (first_id, second_id) = (&first["transition"]["id"], &second["transition"]["id"]);
    assert!(second_id.as_u64() > first_id.as_u64());
    assert_eq!(cluster.pending().await, vec![second["transition"].clone()]);

    let (status, refused) = cluster.commit("cat.jpg", first_id).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("superseded")), "{refused}");
    let (status, body) = cluster.abort("cat.jpg", first_id).await;
    assert_eq!((status, &body["pending"]), (404, second_id), "{body}");
    let (status, done) = cluster.commit("cat.jpg", second_id).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["object"]["layout"], layout("rs(10,4)"));
    assert_eq!(done["object"]["parity_generation"], *second_id);
    cluster.stop().await;
}

#[tokio::test]
async fn a_pending_transition_survives_a_meta_restart_and_commits() {
    let mut cluster = Cluster::start().await;
    cluster.put("cat.jpg").await;
    let (_, plan) = cluster.begin("cat.jpg", "rs(12,3)").await;
    cluster.restart().await;
    assert_eq!(cluster.pending().await, vec![plan["transition"].clone()]);
    let (status, resumed) = cluster.get("/v1/transitions/photos/cat.jpg").await;
    assert_eq!(status, 200, "{resumed}");
    for field in ["transition", "new_layout", "create", "delete", "relocations", "predicted"] {
        assert_eq!(resumed[field], plan[field], "{field}");
    }
    let (status, done) = cluster.commit("cat.jpg", &plan["transition"]["id"]).await;
    assert_eq!(status, 200, "{done}");
    cluster.restart().await;
    let now = cluster.object("cat.jpg").await;
    assert_eq!(now["layout"], layout("rs(12,3)"));
    assert_eq!(now["parity_generation"], plan["transition"]["id"]);
    assert_eq!(cluster.pending().await, Vec::<Value>::new());
    cluster.stop().await;
}

#[tokio::test]
async fn refused_transitions_say_why() {
    let cluster = Cluster::start().await;
    cluster.put("cat.jpg").await;
    let expect = |(status, body): (u16, Value), want: u16, code: &str| {
        assert_eq!((status, body["error"].as_str().unwrap()), (want, code), "{body}");
        body
    };
    let mut wider = layout("rs(12,3)");
    wider["stripe_width"] = json!(12);
    let body = json!({"bucket": "photos", "key": "cat.jpg", "layout": wider});
    let refused = expect(cluster.post("/v1/transitions", body).await, 400, "bad_transition");
    assert_eq!(refused["reason"], "striping_changed");
    assert!(refused["message"].as_str().unwrap().contains("restripe"), "{refused}");
    let refused = expect(cluster.begin("cat.jpg", "rs(6,3)").await, 400, "bad_transition");
    assert_eq!(refused["reason"], "same_layout");
    let body = json!({"bucket": "photos", "key": "cat.jpg", "layout": layout("rs(12,3)"),
                      "mode": "restripe"});
    let refused = expect(cluster.post("/v1/transitions", body).await, 400, "bad_transition");
    assert_eq!(refused["reason"], "restripe_is_a_write");
    expect(cluster.begin("cat.jpg", "rs(0,3)").await, 400, "invalid_policy");
    expect(cluster.begin("nope.jpg", "rs(12,3)").await, 404, "no_such_key");
    let body = json!({"bucket": "nope", "key": "cat.jpg", "layout": layout("rs(12,3)")});
    expect(cluster.post("/v1/transitions", body).await, 404, "no_such_bucket");
    let body = json!({"bucket": "photos", "key": "cat.jpg", "layuot": layout("rs(12,3)")});
    expect(cluster.post("/v1/transitions", body).await, 400, "bad_request");
    // 24 nodes cannot hold groups of 28 units.
    let refused = expect(cluster.begin("cat.jpg", "rs(24,4)").await, 503, "too_few_nodes");
    assert_eq!(
        (&refused["failure_domain"], &refused["usable_domains"], &refused["needed"]),
        (&json!("node"), &json!(24), &json!(28))
    );
    assert!(refused["message"].as_str().unwrap().contains("failure domains (nodes)"));
    expect(cluster.get("/v1/transitions/photos/cat.jpg").await, 404, "no_such_transition");
    let body = json!({"bucket": "photos", "key": "cat.jpg", "id": 99});
    expect(cluster.post("/v1/transitions/commit", body.clone()).await, 409, "transition_conflict");
    expect(cluster.post("/v1/transitions/abort", body).await, 404, "no_such_transition");
    assert_eq!(cluster.pending().await, Vec::<Value>::new(), "nothing refused was recorded");
    cluster.stop().await;
}

/// Begins `key` to `code` with a lease of `lease_ms`.
async fn begin_leased(cluster: &Cluster, key: &str, code: &str, lease_ms: u64) -> Value {
    let body = json!({"bucket": "photos", "key": key, "layout": layout(code),
                      "mode": "regroup", "lease_ms": lease_ms});
    let (status, plan) = cluster.post("/v1/transitions", body).await;
    assert_eq!(status, 200, "{plan}");
    plan
}

#[tokio::test]
async fn a_renewal_extends_the_lease_and_is_refused_once_not_pending() {
    let cluster = Cluster::start().await;
    cluster.put("cat.jpg").await;
    let plan = begin_leased(&cluster, "cat.jpg", "rs(12,3)", 200).await;
    let id = plan["transition"]["id"].clone();
    let renew = |lease_ms: Value| json!({"bucket": "photos", "key": "cat.jpg", "id": id, "lease_ms": lease_ms});
    let (status, body) = cluster.post("/v1/transitions/renew", renew(json!(0))).await;
    assert_eq!((status, &body["error"]), (400, &json!("bad_request")), "{body}");
    let (status, body) = cluster.post("/v1/transitions/renew", renew(json!(3_600_001))).await;
    assert_eq!(status, 400, "{body}");
    let before =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as u64;
    let (status, renewed) = cluster.post("/v1/transitions/renew", renew(json!(600_000))).await;
    assert_eq!(status, 200, "{renewed}");
    assert!(renewed["lease_deadline_ms"].as_u64().unwrap() >= before + 600_000, "{renewed}");
    // Past the first lease, but renewed: nothing expires.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, expired) = cluster.post("/v1/transitions/expire", json!({})).await;
    assert_eq!(status, 200, "{expired}");
    assert_eq!(expired["expired"], json!([]));
    assert_eq!(expired["pending"], 1);
    let (status, done) = cluster.commit("cat.jpg", &id).await;
    assert_eq!(status, 200, "{done}");
    let (status, refused) = cluster.post("/v1/transitions/renew", renew(json!(1000))).await;
    assert_eq!((status, &refused["error"]), (409, &json!("transition_conflict")), "{refused}");
    assert_eq!(refused["reason"], "already_committed");
    let body = json!({"bucket": "photos", "key": "cat.jpg", "id": 999});
    let (status, refused) = cluster.post("/v1/transitions/renew", body).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("not_pending")), "{refused}");
    cluster.stop().await;
}

#[tokio::test]
async fn expiry_aborts_only_expired_transitions_and_returns_their_units() {
    let mut cluster = Cluster::start().await;
    cluster.put("cat.jpg").await;
    cluster.put("dog.jpg").await;
    let object = cluster.object("cat.jpg").await;
    let short = begin_leased(&cluster, "cat.jpg", "rs(12,3)", 100).await;
    let long = begin_leased(&cluster, "dog.jpg", "rs(12,3)", 600_000).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    // A dry run names it and changes nothing.
    let (status, dry) = cluster.post("/v1/transitions/expire", json!({"dry_run": true})).await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["expired"].as_array().unwrap().len(), 1, "{dry}");
    assert_eq!(cluster.pending().await.len(), 2);

    // The lease is kept across a restart: still expired after it.
    cluster.restart().await;
    let (status, expired) = cluster.post("/v1/transitions/expire", Value::Null).await;
    assert_eq!(status, 200, "{expired}");
    assert_eq!(expired["dry_run"], false);
    assert_eq!(expired["pending"], 1);
    let list = expired["expired"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{expired}");
    assert_eq!(list[0]["id"], short["transition"]["id"]);
    assert_eq!((&list[0]["bucket"], &list[0]["key"]), (&json!("photos"), &json!("cat.jpg")));
    assert_eq!(list[0]["created_ms"], short["transition"]["created_ms"]);
    assert_eq!(list[0]["delete"], short["create"], "its new parity, as an abort lists it");
    assert_eq!(list[0], dry["expired"][0], "the dry run said exactly this");
    assert_eq!(cluster.pending().await, vec![long["transition"].clone()]);

    // The object is untouched; its transition is gone for good.
    assert_eq!(cluster.object("cat.jpg").await, object);
    let (status, refused) = cluster.commit("cat.jpg", &short["transition"]["id"]).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("not_pending")), "{refused}");
    let body = json!({"bucket": "photos", "key": "cat.jpg", "id": short["transition"]["id"]});
    let (status, refused) = cluster.post("/v1/transitions/renew", body).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("not_pending")), "{refused}");
    let (status, again) = cluster.post("/v1/transitions/expire", json!({})).await;
    assert_eq!((status, &again["expired"]), (200, &json!([])), "{again}");
    // The other one commits.
    let (status, done) = cluster.commit("dog.jpg", &long["transition"]["id"]).await;
    assert_eq!(status, 200, "{done}");
    let (status, bad) = cluster.post("/v1/transitions/expire", json!({"nope": 1})).await;
    assert_eq!(status, 400, "{bad}");
    cluster.stop().await;
}

/// Digests sent by pages ahead of a commit (writes and transitions): the commit takes them
/// with its own, a page of a unit the owner lacks or of nothing in progress is refused, and
/// an aborted transition's pages are forgotten.
#[tokio::test]
async fn digests_sent_ahead_in_pages_are_taken_by_the_commit() {
    let cluster = Cluster::start().await;
    let hex = |n: usize| format!("{n:032x}");
    let path = "/v1/buckets/photos/objects/paged";
    let (status, begun) = cluster.post(&format!("{path}/begin"), json!({"size": SIZE})).await;
    assert_eq!(status, 200, "{begun}");
    let generation = begun["generation"].clone();
    let names: Vec<String> = begun["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["unit"].as_str().unwrap().to_owned())
        .collect();
    let digest_of = |names: &[String]| -> Value {
        names.iter().enumerate().map(|(i, n)| (n.clone(), json!(hex(i + names.len())))).collect()
    };
    // Units 0..20 by two pages, the rest with the commit.
    for page in [&names[..10], &names[10..20]] {
        let body = json!({"generation": generation, "digests": digest_of(page)});
        let (status, sent) = cluster.post(&format!("{path}/digests"), body).await;
        assert_eq!((status, &sent["digests"]), (200, &json!(10)), "{sent}");
    }
    let stranger = json!({"generation": generation, "digests": {"d999": hex(1)}});
    let (status, refused) = cluster.post(&format!("{path}/digests"), stranger).await;
    assert_eq!(status, 400, "{refused}");
    let none = json!({"generation": generation, "digests": {}});
    assert_eq!(cluster.post(&format!("{path}/digests"), none).await.0, 400);
    let body = json!({"generation": generation, "digests": digest_of(&names[20..])});
    let (status, committed) = cluster.post(&format!("{path}/commit"), body).await;
    assert_eq!(status, 200, "{committed}");
    let stored: BTreeMap<String, Value> = committed["units"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["unit"].as_str().unwrap().to_owned(), u["digest"].clone()))
        .collect();
    let mut sent = digest_of(&names[..10]).as_object().unwrap().clone();
    sent.extend(digest_of(&names[10..20]).as_object().unwrap().clone());
    sent.extend(digest_of(&names[20..]).as_object().unwrap().clone());
    assert_eq!(stored.len(), names.len());
    for (name, digest) in &stored {
        assert_eq!(Some(digest), sent.get(name), "{name}");
    }
    // The write is committed: a late page finds no write in progress.
    let late = json!({"generation": generation, "digests": {"d0": hex(1)}});
    let (status, refused) = cluster.post(&format!("{path}/digests"), late).await;
    assert_eq!((status, &refused["error"]), (409, &json!("no_such_write")), "{refused}");

    // A transition's new parity digests, a page ahead and the rest with the commit.
    let (status, plan) = cluster.begin("paged", "rs(12,3)").await;
    assert_eq!(status, 200, "{plan}");
    let id = plan["transition"]["id"].clone();
    let create: Vec<String> = names_in(&plan["create"]);
    let reference =
        |digests: Value| json!({"bucket": "photos", "key": "paged", "id": id, "digests": digests});
    let data = reference(json!({"d0": hex(1)}));
    let (status, refused) = cluster.post("/v1/transitions/digests", data).await;
    assert_eq!(status, 400, "data units keep their digests: {refused}");
    let (status, sent) =
        cluster.post("/v1/transitions/digests", reference(digest_of(&create[..5]))).await;
    assert_eq!(status, 200, "{sent}");
    let rest = reference(digest_of(&create[5..]));
    let (status, done) = cluster.post("/v1/transitions/commit", rest).await;
    assert_eq!(status, 200, "{done}");
    let now = cluster.object("paged").await;
    for unit in parities(&now) {
        let name = unit["unit"].as_str().unwrap();
        let i = create.iter().position(|c| c == name).unwrap();
        let want =
            if i < 5 { &digest_of(&create[..5])[name] } else { &digest_of(&create[5..])[name] };
        assert_eq!(&unit["digest"], want, "{name}");
    }
    // An aborted transition's pages are forgotten: the next one's commit without digests
    // keeps none (all or none), rather than finding stale ones.
    let (_, plan) = cluster.begin("paged", "rs(6,3)").await;
    let id = plan["transition"]["id"].clone();
    let create = names_in(&plan["create"]);
    let page =
        json!({"bucket": "photos", "key": "paged", "id": id, "digests": digest_of(&create[..3])});
    assert_eq!(cluster.post("/v1/transitions/digests", page).await.0, 200);
    assert_eq!(cluster.abort("paged", &id).await.0, 200);
    let (status, pages) = cluster.get("/v1/transitions/photos/paged").await;
    assert_eq!(status, 404, "{pages}");
    let page =
        json!({"bucket": "photos", "key": "paged", "id": id, "digests": digest_of(&create[..3])});
    let (status, refused) = cluster.post("/v1/transitions/digests", page).await;
    assert_eq!((status, &refused["error"]), (409, &json!("transition_conflict")), "{refused}");
}

fn names_in(units: &Value) -> Vec<String> {
    units.as_array().unwrap().iter().map(|u| u["unit"].as_str().unwrap().to_owned()).collect()
}
