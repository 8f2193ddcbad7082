//! Meta's garbage-collection side: `GET /v1/references` names exactly the units of committed
//! objects, writes in progress and pending transitions, per disk; `POST /v1/writes/expire`
//! removes abandoned writes only; a repair cannot complete after its lease; and the stores'
//! `list_writes` / `abort_write` agree (redb against the in-memory model).
//!
//! Nodes are fake (one heartbeat each, a long down timeout): meta only moves metadata here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_codes::CodeSpec;
use weft_layout::{place, DiskLocation, FailureDomain, StripedLayout, Topology};
use weft_meta::service::{bind, MetaConfig, RunningMeta};
use weft_meta::{MemStore, MetaError, MetaStore, ObjectName, RedbStore};

const KIB: u64 = 1 << 10;

/// (node, disk) → unit keys.
type Refs = BTreeMap<(u64, u64), BTreeSet<String>>;

struct Cluster {
    _dir: tempfile::TempDir,
    meta: Option<RunningMeta>,
    base: String,
    client: reqwest::Client,
    secret: ClusterSecret,
}

fn layout(code: &str, width: usize) -> Value {
    json!({"code": code, "stripe_width": width, "cell_bytes": 4 * KIB, "block_bytes": 4 * KIB})
}

impl Cluster {
    /// Meta with `nodes` fake nodes of 2 disks and bucket "bkt" of rs(2,1), width 2, 4 KiB blocks.
    async fn start(nodes: u32) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::generate();
        let mut config =
            MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), secret.clone());
        config.down_after_ms = 600_000;
        let meta = bind(config).await.unwrap();
        let base = meta.endpoint();
        let client = reqwest::Client::new();
        let cluster = Cluster { _dir: dir, meta: Some(meta), base, client, secret };
        for id in 1..=nodes {
            cluster.heartbeat(id).await;
        }
        let (status, body) =
            cluster.call(reqwest::Method::PUT, "/v1/buckets/bkt", layout("rs(2,1)", 2)).await;
        assert_eq!(status, 201, "{body}");
        cluster
    }

    /// Enrols node `id` (idempotent) and posts a heartbeat signed with its key.
    async fn heartbeat(&self, id: u32) {
        let (status, body) =
            self.call(reqwest::Method::PUT, &format!("/v1/nodes/{id}"), Value::Null).await;
        assert_eq!(status, 200, "{body}");
        let beat = json!({
            "node_id": id, "endpoint": format!("http://127.0.0.1:{}", 9000 + id), "pid": 1,
            "disks": [
                {"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": null},
                {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": null},
            ],
        });
        let node = Signer::new(self.secret.node_key(id), Audience::Meta);
        assert_eq!(self.call_as(&node, reqwest::Method::POST, "/v1/heartbeat", beat).await.0, 200);
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
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, body).await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, Value::Null).await
    }

    async fn begin(&self, key: &str, size: u64) -> Value {
        let path = format!("/v1/buckets/bkt/objects/{key}/begin");
        let (status, begun) = self.post(&path, json!({"size": size})).await;
        assert_eq!(status, 200, "{begun}");
        begun
    }

    async fn commit(&self, key: &str, generation: &Value) -> (u16, Value) {
        let path = format!("/v1/buckets/bkt/objects/{key}/commit");
        self.post(&path, json!({"generation": generation})).await
    }

    async fn put(&self, key: &str, size: u64) -> Value {
        let begun = self.begin(key, size).await;
        let (status, committed) = self.commit(key, &begun["generation"]).await;
        assert_eq!(status, 200, "{committed}");
        committed
    }

    async fn references(&self, query: &str) -> Value {
        let (status, refs) = self.get(&format!("/v1/references{query}")).await;
        assert_eq!(status, 200, "{refs}");
        refs
    }

    async fn stop(mut self) {
        self.meta.take().unwrap().stop().await.unwrap();
    }
}

/// The references answer as a map, checking its shape.
fn refs_of(answer: &Value) -> Refs {
    let mut refs = Refs::new();
    for disk in answer["disks"].as_array().unwrap() {
        let at = (disk["node_id"].as_u64().unwrap(), disk["disk"].as_u64().unwrap());
        let units: BTreeSet<String> =
            disk["units"].as_array().unwrap().iter().map(|u| u.as_str().unwrap().into()).collect();
        assert!(refs.insert(at, units).is_none(), "each disk once: {answer}");
    }
    let total: usize = refs.values().map(BTreeSet::len).sum();
    assert_eq!(answer["units"], total, "{answer}");
    refs
}

/// Adds units entries (`{"node_id","disk","unit_key"}`) to `refs`.
fn add_units(refs: &mut Refs, units: &Value) {
    for unit in units.as_array().unwrap() {
        let at = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
        refs.entry(at).or_default().insert(unit["unit_key"].as_str().unwrap().into());
    }
}

/// Only the non-empty disks.
fn nonempty(refs: &Refs) -> Refs {
    refs.iter().filter(|(_, u)| !u.is_empty()).map(|(k, v)| (*k, v.clone())).collect()
}

#[tokio::test]
async fn references_name_objects_writes_and_pending_transitions_per_disk() {
    let cluster = Cluster::start(3).await;
    let empty = cluster.references("").await;
    assert_eq!(
        (&empty["objects"], &empty["writes"], &empty["transitions"]),
        (&json!(0), &json!(0), &json!(0))
    );
    let refs = refs_of(&empty);
    assert_eq!(refs.len(), 6, "every known disk is listed, also when empty: {empty}");
    assert!(refs.values().all(BTreeSet::is_empty));
    assert!(empty["generated_ms"].as_u64().unwrap() > 0);

    // Committed objects: every unit on its disk. 4 blocks of rs(2,1) on 3 nodes share a
    // node, so regrouping them to rs(4,1) once 5 nodes are up must relocate a block.
    let mut expected = Refs::new();
    for i in 0..6 {
        if i == 3 {
            cluster.heartbeat(4).await;
            cluster.heartbeat(5).await;
        }
        let object = cluster.put(&format!("o{i}"), 16 * KIB).await;
        add_units(&mut expected, &object["units"]);
    }
    let key = "o0";
    let body =
        json!({"bucket": "bkt", "key": key, "layout": layout("rs(4,1)", 2), "mode": "regroup"});
    let (status, plan) = cluster.post("/v1/transitions", body).await;
    assert_eq!(status, 200, "{plan}");
    assert!(!plan["relocations"].as_array().unwrap().is_empty(), "{plan}");
    let answer = cluster.references("").await;
    assert_eq!((&answer["objects"], &answer["transitions"]), (&json!(6), &json!(1)));
    let mut with_transition = expected.clone();
    add_units(&mut with_transition, &plan["create"]);
    for relocation in plan["relocations"].as_array().unwrap() {
        let to = &relocation["to"];
        let at = (to["node_id"].as_u64().unwrap(), to["disk"].as_u64().unwrap());
        let unit_key = relocation["unit_key"].as_str().unwrap().to_string();
        with_transition.entry(at).or_default().insert(unit_key);
    }
    assert_eq!(nonempty(&refs_of(&answer)), with_transition, "objects and the transition");

    // A write in progress: its units too.
    let begun = cluster.begin("writing", 8 * KIB).await;
    let mut with_write = with_transition.clone();
    add_units(&mut with_write, &begun["units"]);
    let answer = cluster.references("").await;
    assert_eq!(answer["writes"], 1);
    assert_eq!(nonempty(&refs_of(&answer)), with_write);

    // ?node_id= keeps that node's disks only (both of them, empty or not).
    let only = refs_of(&cluster.references("?node_id=3").await);
    assert_eq!(only.keys().copied().collect::<Vec<_>>(), vec![(3, 0), (3, 1)]);
    let want: Refs =
        with_write.iter().filter(|((n, _), _)| *n == 3).map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(nonempty(&only), want);

    for bad in ["?node_id=x", "?node_id=-1", "?node_id=4294967296"] {
        let (status, body) = cluster.get(&format!("/v1/references{bad}")).await;
        assert_eq!((status, &body["error"]), (400, &json!("bad_request")), "{bad}: {body}");
    }

    // Committing the transition: the object's new units replace the old parity.
    let id = plan["transition"]["id"].clone();
    let (status, done) = cluster
        .post("/v1/transitions/commit", json!({"bucket": "bkt", "key": key, "id": id}))
        .await;
    assert_eq!(status, 200, "{done}");
    let answer = cluster.references("").await;
    let refs = nonempty(&refs_of(&answer));
    let mut want = with_write.clone();
    for unit in done["delete"].as_array().unwrap() {
        let at = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
        let unit_key = unit["unit_key"].as_str().unwrap();
        assert!(!refs.get(&at).is_some_and(|u| u.contains(unit_key)), "{unit} is garbage now");
        want.get_mut(&at).unwrap().remove(unit_key);
    }
    assert_eq!(refs, nonempty(&want));

    // Deleting an object and committing the write.
    let (status, deleted) =
        cluster.call(reqwest::Method::DELETE, "/v1/buckets/bkt/objects/o0", Value::Null).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(cluster.commit("writing", &begun["generation"]).await.0, 200);
    let answer = cluster.references("").await;
    assert_eq!(
        (&answer["objects"], &answer["writes"], &answer["transitions"]),
        (&json!(6), &json!(0), &json!(0))
    );
    let refs = refs_of(&answer);
    for unit in deleted["units"].as_array().unwrap() {
        let at = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
        assert!(!refs[&at].contains(unit["unit_key"].as_str().unwrap()), "{unit}");
    }
    for unit in begun["units"].as_array().unwrap() {
        let at = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
        assert!(refs[&at].contains(unit["unit_key"].as_str().unwrap()), "committed: {unit}");
    }
    cluster.stop().await;
}

#[tokio::test]
async fn expiry_removes_only_writes_begun_long_enough_ago() {
    let cluster = Cluster::start(3).await;
    let committed = cluster.put("kept", 8 * KIB).await;
    let old = cluster.begin("abandoned", 8 * KIB).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let young = cluster.begin("young", 8 * KIB).await;

    let (status, body) =
        cluster.post("/v1/writes/expire", json!({"older_than_ms": 3_600_000})).await;
    assert_eq!((status, body), (200, json!({"expired": [], "in_progress": 2, "dry_run": false})));
    // A dry run names the abandoned write and removes nothing.
    let body = json!({"older_than_ms": 20, "dry_run": true});
    let (status, dry) = cluster.post("/v1/writes/expire", body).await;
    assert_eq!((status, &dry["dry_run"], &dry["in_progress"]), (200, &json!(true), &json!(1)));
    assert_eq!(dry["expired"][0]["key"], "abandoned", "{dry}");
    let (status, body) = cluster.post("/v1/writes/expire", json!({"older_than_ms": 20})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["in_progress"], 1);
    assert_eq!(body["expired"], dry["expired"], "the dry run named what expires");
    let expired = body["expired"].as_array().unwrap();
    assert_eq!(expired.len(), 1, "{body}");
    assert_eq!(
        (
            &expired[0]["bucket"],
            &expired[0]["key"],
            &expired[0]["generation"],
            &expired[0]["units"]
        ),
        (
            &json!("bkt"),
            &json!("abandoned"),
            &old["generation"],
            &json!(old["units"].as_array().unwrap().len())
        )
    );
    assert_eq!(expired[0]["created_ms"], old["created_ms"]);
    // Its commit is refused now; the young write still commits; the committed object stays.
    let (status, refused) = cluster.commit("abandoned", &old["generation"]).await;
    assert_eq!((status, &refused["error"]), (409, &json!("no_such_write")), "{refused}");
    assert_eq!(cluster.commit("young", &young["generation"]).await.0, 200);
    let (status, object) = cluster.get("/v1/buckets/bkt/objects/kept").await;
    assert_eq!((status, &object["generation"]), (200, &committed["generation"]));
    let refs = refs_of(&cluster.references("").await);
    for unit in old["units"].as_array().unwrap() {
        let at = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
        assert!(!refs[&at].contains(unit["unit_key"].as_str().unwrap()), "{unit}");
    }

    // An abandoned write no longer keeps its bucket from being deleted.
    let created =
        cluster.call(reqwest::Method::PUT, "/v1/buckets/emptied", layout("rs(2,1)", 2)).await;
    assert_eq!(created.0, 201);
    let path = "/v1/buckets/emptied/objects/x/begin";
    assert_eq!(cluster.post(path, json!({"size": 10})).await.0, 200);
    let (status, body) =
        cluster.call(reqwest::Method::DELETE, "/v1/buckets/emptied", Value::Null).await;
    assert_eq!((status, &body["error"]), (409, &json!("bucket_not_empty")));
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, body) = cluster.post("/v1/writes/expire", json!({"older_than_ms": 0})).await;
    assert_eq!((status, body["expired"].as_array().unwrap().len()), (200, 1), "{body}");
    assert_eq!(
        cluster.call(reqwest::Method::DELETE, "/v1/buckets/emptied", Value::Null).await.0,
        204
    );

    // Bad bodies.
    for bad in [json!({}), json!({"older_than_ms": -1}), json!({"older_than_ms": 1, "x": 2})] {
        let (status, body) = cluster.post("/v1/writes/expire", bad).await;
        assert_eq!((status, &body["error"]), (400, &json!("bad_request")), "{body}");
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_repair_cannot_complete_after_its_lease_expired() {
    let cluster = Cluster::start(4).await;
    let object = cluster.put("x", 8 * KIB).await;
    let report = json!({"bucket": "bkt", "key": "x", "generation": object["generation"],
                        "unit": "d0", "reason": "checksum mismatch"});
    assert_eq!(cluster.post("/v1/repairs", report).await.0, 200);
    let (status, taken) = cluster.post("/v1/repairs/take", json!({"lease_ms": 1})).await;
    assert_eq!(status, 200, "{taken}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let done = json!({"deadline_ms": taken["task"]["deadline_ms"],
                      "node_id": taken["destination"]["node_id"],
                      "disk": taken["destination"]["disk"]});
    let path = format!("/v1/repairs/{}/complete", taken["task"]["task_id"]);
    let (status, lost) = cluster.post(&path, done).await;
    assert_eq!((status, &lost["error"]), (409, &json!("lease_lost")), "{lost}");
    assert!(lost["message"].as_str().unwrap().contains("expired"), "{lost}");
    let (_, now) = cluster.get("/v1/buckets/bkt/objects/x").await;
    let bare = |units: &Value| -> Vec<Value> {
        let mut units = units.as_array().unwrap().clone();
        units.iter_mut().for_each(|u| drop(u.as_object_mut().unwrap().remove("state")));
        units
    };
    assert_eq!(bare(&now["units"]), bare(&object["units"]), "nothing moved");
    // The task is free to take again.
    let (status, again) = cluster.post("/v1/repairs/take", json!({"lease_ms": 60_000})).await;
    assert_eq!((status, &again["task"]["task_id"]), (200, &taken["task"]["task_id"]), "{again}");
    cluster.stop().await;
}

#[test]
fn list_writes_and_abort_write_agree_between_redb_and_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let real = RedbStore::open(dir.path().join("meta.redb")).unwrap();
    let model = MemStore::new();
    let stores: [&dyn MetaStore; 2] = [&real, &model];
    let policy = StripedLayout {
        code: CodeSpec::parse("rs(2,1)").unwrap(),
        stripe_width: 2,
        cell_bytes: 4 * KIB,
        block_bytes: 4 * KIB,
    };
    let disks = (0..4).map(|node| DiskLocation { rack: node, node, disk: 0 }).collect();
    let topology = Topology::new(disks).unwrap();
    for store in stores {
        for bucket in ["aaa", "bbb"] {
            store.create_bucket(bucket, policy, 1).unwrap();
        }
    }
    let mut rng = StdRng::seed_from_u64(7);
    let keys = ["k1", "k2", "k3", "x/y"];
    let mut generations: Vec<(&str, &str, u64)> = Vec::new();
    for step in 0..600u64 {
        let bucket = ["aaa", "bbb"][rng.gen_range(0..2)];
        let key = keys[rng.gen_range(0..keys.len())];
        let context = format!("step {step}");
        match rng.gen_range(0..6) {
            0 | 1 => {
                let placement =
                    place(&policy, rng.gen_range(0..20_000), &topology, step, FailureDomain::Node)
                        .unwrap();
                let got: Vec<_> = stores
                    .iter()
                    .map(|s| s.begin_object(bucket, key, placement.clone(), step))
                    .collect();
                assert_eq!(got[0], got[1], "{context}");
                generations.push((bucket, key, got[0].as_ref().unwrap().generation));
            }
            2 | 3 if !generations.is_empty() => {
                let (bucket, key, generation) = generations[rng.gen_range(0..generations.len())];
                let got: Vec<_> = if rng.gen_bool(0.5) {
                    stores
                        .iter()
                        .map(|s| s.abort_write(bucket, key, generation).map(|w| w.generation))
                        .collect()
                } else {
                    stores
                        .iter()
                        .map(|s| {
                            s.commit_object(bucket, key, generation, &Default::default())
                                .map(|c| c.0.generation)
                        })
                        .collect()
                };
                assert_eq!(got[0], got[1], "{context}");
                if let Err(error) = &got[0] {
                    assert!(matches!(error, MetaError::NoSuchWrite { .. }), "{context}: {error}");
                }
            }
            _ => {
                let after =
                    (ObjectName { bucket: bucket.into(), key: key.into() }, rng.gen_range(0..8));
                let after = rng.gen_bool(0.5).then_some(&after);
                let limit = rng.gen_range(0..4);
                let got: Vec<_> = stores.iter().map(|s| s.list_writes(after, limit)).collect();
                assert_eq!(got[0], got[1], "{context}");
            }
        }
        let all: Vec<_> = stores.iter().map(|s| s.list_writes(None, 100).unwrap()).collect();
        assert_eq!(all[0], all[1], "{context}");
        let names: Vec<(String, String, u64)> =
            all[0].iter().map(|w| (w.bucket.clone(), w.key.clone(), w.generation)).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "in (bucket, key, generation) order, each once: {context}");
    }
    // An aborted write is gone for good: a second abort and a commit are refused.
    let write = real
        .begin_object(
            "aaa",
            "last",
            place(&policy, 10, &topology, 1, FailureDomain::Node).unwrap(),
            1,
        )
        .unwrap();
    assert_eq!(real.abort_write("aaa", "last", write.generation).unwrap(), write);
    assert!(matches!(
        real.abort_write("aaa", "last", write.generation),
        Err(MetaError::NoSuchWrite { .. })
    ));
    assert!(matches!(
        real.commit_object("aaa", "last", write.generation, &Default::default()),
        Err(MetaError::NoSuchWrite { .. })
    ));
}
