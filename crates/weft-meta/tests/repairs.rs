//! The repair side of meta against a real in-process server over real HTTP: the detector
//! queues units of silent nodes and failed disks, an executor takes, completes and fails
//! tasks, clients report damaged units, and the queue survives a restart.
//!
//! Nodes are fake: a background task posts their heartbeats (no unit data is needed, meta
//! only moves metadata). Every wait polls with a deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_layout::{DiskLocation, Placement, UnitId};
use weft_meta::parse_unit_name;
use weft_meta::service::{bind_with_repair, FailureDomain, MetaConfig, RepairConfig, RunningMeta};

const MIB: u64 = 1 << 20;
/// Silence after which a node is down; short so tests run fast.
const DOWN_AFTER_MS: u64 = 400;
const HEARTBEAT_EVERY: Duration = Duration::from_millis(100);
/// Longest any awaited condition may take.
const PATIENCE: Duration = Duration::from_secs(10);

fn repair_config() -> RepairConfig {
    RepairConfig { scan_ms: 50, full_rescan_ms: 300 }
}

fn heartbeat(id: u32, failed: [Option<&str>; 2]) -> Value {
    json!({
        "node_id": id,
        "endpoint": format!("http://127.0.0.1:{}", 9000 + id),
        "pid": 4000 + id,
        "disks": [
            {"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": failed[0]},
            {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": failed[1]},
        ],
    })
}

/// The heartbeats the fake nodes send, by node id; a node missing from the map is silent.
type Beats = Arc<Mutex<BTreeMap<u32, Value>>>;

struct Cluster {
    dir: tempfile::TempDir,
    level: FailureDomain,
    meta: Option<RunningMeta>,
    base: String,
    client: reqwest::Client,
    secret: ClusterSecret,
    beats: Beats,
    beating: JoinHandle<()>,
}

/// Node `id`'s signer for its requests to meta.
fn node_signer(secret: &ClusterSecret, id: u32) -> Signer {
    Signer::new(secret.node_key(id), Audience::Meta)
}

/// Every [`HEARTBEAT_EVERY`], the heartbeats in `beats`, each signed with its node's key.
fn start_heartbeats(
    base: String,
    secret: ClusterSecret,
    beats: Beats,
    delay: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let client = reqwest::Client::new();
        loop {
            let now: Vec<(u32, Value)> =
                beats.lock().unwrap().iter().map(|(id, beat)| (*id, beat.clone())).collect();
            for (id, beat) in now {
                let request = client.post(format!("{base}/v1/heartbeat")).json(&beat);
                let _ = request.send_signed(&node_signer(&secret, id)).await;
            }
            tokio::time::sleep(HEARTBEAT_EVERY).await;
        }
    })
}

async fn start_meta(
    dir: &std::path::Path,
    level: FailureDomain,
    secret: &ClusterSecret,
) -> RunningMeta {
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir, secret.clone());
    config.down_after_ms = DOWN_AFTER_MS;
    config.failure_domain = level;
    bind_with_repair(config, repair_config()).await.expect("meta starts")
}

impl Cluster {
    /// Meta with `nodes` heartbeating nodes (2 healthy disks each) and bucket "photos" of
    /// rs(2,1), stripe width 2, 1 MiB blocks.
    async fn start(nodes: u32) -> Cluster {
        Cluster::start_with(nodes, FailureDomain::Node, |_| None).await
    }

    /// [`Cluster::start`] with meta at failure domain `level` and node `id` in `rack_of(id)`.
    async fn start_with(
        nodes: u32,
        level: FailureDomain,
        rack_of: impl Fn(u32) -> Option<u32>,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::generate();
        let meta = start_meta(dir.path(), level, &secret).await;
        let base = meta.endpoint();
        let beat = |id: u32| {
            let mut beat = heartbeat(id, [None, None]);
            if let Some(rack) = rack_of(id) {
                beat["rack"] = json!(rack);
            }
            (id, beat)
        };
        let beats: Beats = Arc::new(Mutex::new((1..=nodes).map(beat).collect()));
        let client = reqwest::Client::new();
        // The first round directly, so that placement sees every node at once.
        // Each node is enrolled first (as the client), then heartbeats with its own key.
        let first: Vec<(u32, Value)> =
            beats.lock().unwrap().iter().map(|(id, beat)| (*id, beat.clone())).collect();
        let as_client = secret.signer_for(Audience::Meta);
        for (id, beat) in first {
            let enrol = client.put(format!("{base}/v1/nodes/{id}"));
            let response = enrol.send_signed(&as_client).await.unwrap();
            assert_eq!(response.status(), 200, "enrolling node {id}");
            let response = client.post(format!("{base}/v1/heartbeat")).json(&beat);
            let response = response.send_signed(&node_signer(&secret, id)).await.unwrap();
            assert_eq!(response.status(), 200);
        }
        let beating =
            start_heartbeats(base.clone(), secret.clone(), beats.clone(), HEARTBEAT_EVERY);
        let cluster =
            Cluster { dir, level, meta: Some(meta), base, client, secret, beats, beating };
        let policy = json!({"code": "rs(2,1)", "stripe_width": 2, "cell_bytes": MIB,
                            "block_bytes": MIB});
        let (status, body) = cluster.call(reqwest::Method::PUT, "/v1/buckets/photos", policy).await;
        assert_eq!(status, 201, "{body}");
        cluster
    }

    /// Stops meta, waits `down_ms` (so every heartbeat meta saved is old), starts it again on
    /// the same directory; the nodes resume heartbeating `heartbeats_after` later.
    async fn restart(&mut self, down_ms: u64, heartbeats_after: Duration) {
        self.beating.abort();
        self.meta.take().unwrap().stop().await.unwrap();
        tokio::time::sleep(Duration::from_millis(down_ms)).await;
        let meta = start_meta(self.dir.path(), self.level, &self.secret).await;
        self.base = meta.endpoint();
        self.meta = Some(meta);
        let (base, beats) = (self.base.clone(), self.beats.clone());
        self.beating = start_heartbeats(base, self.secret.clone(), beats, heartbeats_after);
    }

    fn silence(&self, node: u32) {
        self.beats.lock().unwrap().remove(&node);
    }

    /// Node `node` reports its disks so (keeping its rack).
    fn set_disks(&self, node: u32, failed: [Option<&str>; 2]) {
        let mut beats = self.beats.lock().unwrap();
        let mut beat = heartbeat(node, failed);
        if let Some(rack) = beats.get(&node).and_then(|b| b.get("rack")).cloned() {
            beat["rack"] = rack;
        }
        beats.insert(node, beat);
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if !body.is_null() {
            request = request.json(&body);
        }
        let response = request.send_signed(&self.secret.signer_for(Audience::Meta)).await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, Value::Null).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, body).await
    }

    /// Begins and commits `key` of `size` bytes; returns the committed object.
    async fn put(&self, key: &str, size: u64) -> Value {
        let path = format!("/v1/buckets/photos/objects/{key}");
        let (status, begun) = self.post(&format!("{path}/begin"), json!({"size": size})).await;
        assert_eq!(status, 200, "{begun}");
        let generation = begun["generation"].clone();
        let (status, committed) =
            self.post(&format!("{path}/commit"), json!({"generation": generation})).await;
        assert_eq!(status, 200, "{committed}");
        committed
    }

    async fn object(&self, key: &str) -> Value {
        let (status, object) = self.get(&format!("/v1/buckets/photos/objects/{key}")).await;
        assert_eq!(status, 200, "{object}");
        object
    }

    async fn take(&self, lease_ms: u64) -> Value {
        let (status, taken) = self.post("/v1/repairs/take", json!({"lease_ms": lease_ms})).await;
        assert_eq!(status, 200, "{taken}");
        taken
    }

    async fn status(&self) -> Value {
        let (status, body) = self.get("/v1/status").await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn repairs(&self) -> Value {
        let (status, body) = self.get("/v1/repairs").await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn stop(mut self) {
        self.beating.abort();
        self.meta.take().unwrap().stop().await.unwrap();
    }
}

/// Polls `probe` until it returns Some, failing after [`PATIENCE`] with `what`.
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The node and disk of `unit` in an object response.
fn location(object: &Value, unit: &str) -> (u64, u64) {
    let entry = object["units"].as_array().unwrap().iter().find(|u| u["unit"] == unit).unwrap();
    (entry["node_id"].as_u64().unwrap(), entry["disk"].as_u64().unwrap())
}

/// The placement an object response describes (node = rack, as meta places).
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
    serde_json::from_value(json!({
        "layout": object["layout"], "object_size": object["size"], "level": "Node", "seed": 0,
        "data": data, "parity": parity,
    }))
    .unwrap()
}

/// Units of `object` on `node`, by name.
fn units_on(object: &Value, node: u64) -> BTreeSet<String> {
    object["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["node_id"] == node)
        .map(|u| u["unit"].as_str().unwrap().to_string())
        .collect()
}

/// Checks a take reply: the object is what GET returns and moving the unit to the destination
/// keeps the placement rules and leaves `avoid` (a down node or a failed disk).
async fn check_take(cluster: &Cluster, taken: &Value, avoid: (u64, Option<u64>)) {
    let task = &taken["task"];
    let key = task["key"].as_str().unwrap();
    assert_eq!(taken["object"], cluster.object(key).await, "take returns exactly the GET body");
    let destination = &taken["destination"];
    let (node, disk) = (destination["node_id"].as_u64().unwrap(), destination["disk"].as_u64());
    match avoid {
        (avoid_node, None) => assert_ne!(node, avoid_node, "{taken}"),
        (avoid_node, Some(avoid_disk)) => {
            assert_ne!((node, disk), (avoid_node, Some(avoid_disk)), "{taken}")
        }
    }
    assert_eq!(destination["endpoint"], format!("http://127.0.0.1:{}", 9000 + node));
    let unit = parse_unit_name(task["unit"].as_str().unwrap()).unwrap();
    let mut placement = placement_of(&taken["object"]);
    let target = DiskLocation { rack: node as u32, node: node as u32, disk: disk.unwrap() as u32 };
    placement.relocate(unit, target).expect("the destination keeps the placement rules");
    assert_eq!(placement.verify(), Ok(()));
}

/// A complete reply of a relocation: 200, result `relocated`, and the replaced copy queued for
/// deletion (every relocation in these tests moves a unit off another disk).
fn assert_relocated((status, done): (u16, Value)) {
    assert_eq!((status, &done["result"]), (200, &json!("relocated")), "{done}");
    assert!(done["deletion"].is_string(), "the replaced copy is queued: {done}");
}

async fn complete(cluster: &Cluster, taken: &Value) -> (u16, Value) {
    let task = &taken["task"];
    let body = json!({
        "deadline_ms": task["deadline_ms"],
        "node_id": taken["destination"]["node_id"],
        "disk": taken["destination"]["disk"],
    });
    cluster.post(&format!("/v1/repairs/{}/complete", task["task_id"]), body).await
}

#[tokio::test]
async fn a_silent_node_is_detected_repaired_and_relocated() {
    let cluster = Cluster::start(5).await;
    // 3 MiB of rs(2,1), width 2: d0 d1 | d2, groups {d0 d1 p0.0} {d2 p1.0}.
    let object = cluster.put("cat.jpg", 3 * MIB).await;
    let status = cluster.status().await;
    assert_eq!(
        (status["under_protected_units"].clone(), status["repair_queue"].clone()),
        (json!(0), json!(0))
    );

    let victim = location(&object, "d0").0;
    let lost = units_on(&object, victim);
    cluster.silence(victim as u32);

    let (c, count) = (&cluster, lost.len());
    let queued = until("the victim's units to be queued", || async move {
        let repairs = c.repairs().await;
        (repairs["queued"] == count).then_some(repairs)
    })
    .await;
    let tasks = queued["tasks"].as_array().unwrap();
    let names: BTreeSet<String> =
        tasks.iter().map(|t| t["unit"].as_str().unwrap().into()).collect();
    assert_eq!(names, lost);
    for task in tasks {
        assert_eq!(task["reason"], format!("node {victim} down"));
        assert_eq!(task["kind"], "unavailable");
        assert_eq!(task["generation"], object["generation"]);
        assert_eq!(
            (task["bucket"].clone(), task["key"].clone()),
            (json!("photos"), json!("cat.jpg"))
        );
        assert_eq!(task["deadline_ms"], Value::Null, "not leased yet");
    }
    let status = cluster.status().await;
    assert_eq!(status["under_protected_units"], lost.len());
    assert_eq!(status["repair_queue"], lost.len());
    let entry = status["nodes"].as_array().unwrap().iter().find(|n| n["id"] == victim).unwrap();
    assert_eq!(entry["state"], "down");
    assert_eq!(entry["disks"].as_array().unwrap().len(), 2);

    for _ in 0..lost.len() {
        let taken = cluster.take(30_000).await;
        assert_eq!(taken["task"]["attempts"], 1);
        assert!(taken["task"]["deadline_ms"].as_u64().unwrap() > 0);
        let unit = taken["task"]["unit"].as_str().unwrap().to_string();
        check_take(&cluster, &taken, (victim, None)).await;
        let (status, done) = complete(&cluster, &taken).await;
        assert_relocated((status, done));
        let now = cluster.object("cat.jpg").await;
        let destination = &taken["destination"];
        let entry = now["units"].as_array().unwrap().iter().find(|u| u["unit"] == unit).unwrap();
        assert_eq!(entry["node_id"], destination["node_id"]);
        assert_eq!(entry["disk"], destination["disk"]);
        assert_eq!(entry["endpoint"], destination["endpoint"]);
        assert_eq!(entry["state"], "up");
        assert_eq!(now["generation"], object["generation"], "a relocation is no new write");
    }
    assert_eq!(cluster.take(30_000).await, json!({"task": null, "dropped": 0}));
    assert!(units_on(&cluster.object("cat.jpg").await, victim).is_empty());

    let status = cluster.status().await;
    assert_eq!(status["under_protected_units"], 0);
    assert_eq!(status["repair_queue"], 0);
    assert_eq!(status["repairs_completed"], lost.len());
    // Full rescans (every 300 ms here) find nothing left on the silent node.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(cluster.repairs().await["queued"], 0);

    // The replaced copies wait in the deletions queue, listed once their node is back.
    let (status, listed) = cluster.get("/v1/deletions").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        (listed["pending"].clone(), listed["deletions"].clone()),
        (json!(lost.len()), json!([]))
    );
    cluster.set_disks(victim as u32, [None, None]);
    let (c, count) = (&cluster, lost.len());
    let listed = until("the victim's copies to be listed", || async move {
        let listed = c.get("/v1/deletions").await.1;
        (listed["deletions"].as_array()?.len() == count).then_some(listed)
    })
    .await;
    let deletions = listed["deletions"].as_array().unwrap();
    for deletion in deletions {
        assert_eq!(deletion["node_id"], victim, "{deletion}");
        let unit = deletion["unit"].as_str().unwrap();
        let old = object["units"].as_array().unwrap().iter().find(|u| u["unit"] == unit).unwrap();
        assert_eq!((&deletion["disk"], &deletion["unit_key"]), (&old["disk"], &old["unit_key"]));
        assert_eq!(deletion["endpoint"], format!("http://127.0.0.1:{}", 9000 + victim));
    }
    let ids: Vec<Value> = deletions.iter().map(|d| d["id"].clone()).collect();
    let (status, done) = cluster.post("/v1/deletions/done", json!({"ids": ids})).await;
    assert_eq!((status, done), (200, json!({"removed": lost.len()})));
    let (_, listed) = cluster.get("/v1/deletions").await;
    assert_eq!(listed, json!({"pending": 0, "deletions": []}));
    let (status, body) = cluster.post("/v1/deletions/done", json!({"id": "x"})).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    cluster.stop().await;
}

#[tokio::test]
async fn a_failed_disk_is_queued_and_dropped_once_healthy_again() {
    let cluster = Cluster::start(5).await;
    let object = cluster.put("dog.jpg", 3 * MIB).await;
    let (node, disk) = location(&object, "d1");
    let mut failed = [None, None];
    failed[disk as usize] = Some("EIO on fsync");
    cluster.set_disks(node as u32, failed);
    let on_disk: BTreeSet<String> = object["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["node_id"] == node && u["disk"] == disk)
        .map(|u| u["unit"].as_str().unwrap().to_string())
        .collect();

    let (c, count) = (&cluster, on_disk.len());
    let queued = until("the failed disk's units to be queued", || async move {
        let repairs = c.repairs().await;
        (repairs["queued"] == count).then_some(repairs)
    })
    .await;
    assert_eq!(queued["tasks"][0]["reason"], format!("disk {node}/{disk} failed: EIO on fsync"));
    assert_eq!(cluster.status().await["under_protected_units"], on_disk.len());

    // Taken while the disk is failed: the destination is elsewhere and keeps the rules.
    let taken = cluster.take(30_000).await;
    check_take(&cluster, &taken, (node, Some(disk))).await;
    let (status, body) = cluster
        .post(
            &format!("/v1/repairs/{}/fail", taken["task"]["task_id"]),
            json!({"deadline_ms": taken["task"]["deadline_ms"], "error": "destination refused"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["requeued"], true);
    let requeued = cluster.repairs().await;
    let task =
        requeued["tasks"].as_array().unwrap().iter().find(|t| t["task_id"] == body["task_id"]);
    assert_eq!(task.unwrap()["last_error"], "destination refused");

    // The disk recovers before anyone repairs it: the tasks are no longer needed.
    cluster.set_disks(node as u32, [None, None]);
    until("meta to hear that the disk is healthy", || async move {
        let (_, nodes) = c.get("/v1/nodes").await;
        let entry = nodes["nodes"].as_array().unwrap().iter().find(|n| n["id"] == node).cloned();
        (entry.unwrap()["disks"][disk as usize]["failed"].is_null()).then_some(())
    })
    .await;
    // Every task is dropped, never handed out (the failed one once its 1 s back-off ends).
    until("every task to be dropped", || async move {
        let taken = c.take(30_000).await;
        assert_eq!(taken["task"], Value::Null, "not needed any more: {taken}");
        (c.repairs().await["queued"] == 0).then_some(())
    })
    .await;
    assert_eq!(cluster.status().await["under_protected_units"], 0);
    cluster.stop().await;
}

#[tokio::test]
async fn reported_damage_is_repaired_and_an_expired_lease_is_lost() {
    let cluster = Cluster::start(5).await;
    let object = cluster.put("eel.jpg", 3 * MIB).await;
    let report = json!({"bucket": "photos", "key": "eel.jpg", "generation": object["generation"],
                        "unit": "d1", "reason": "checksum mismatch at 65536"});
    let (status, body) = cluster.post("/v1/repairs", report.clone()).await;
    assert_eq!((status, body), (200, json!({"queued": true, "stale": false})));
    let (status, body) = cluster.post("/v1/repairs", report).await;
    assert_eq!((status, body), (200, json!({"queued": false, "stale": false})), "idempotent");
    assert_eq!(cluster.status().await["under_protected_units"], 1);

    let first = cluster.take(150).await;
    assert_eq!(first["task"]["kind"], "damaged");
    assert_eq!(first["task"]["reason"], "checksum mismatch at 65536");
    let current = location(&object, "d1");
    check_take(&cluster, &first, (current.0, Some(current.1))).await;
    // Another executor takes it once the short lease has expired.
    let c = &cluster;
    let second = until("the expired task to be taken again", || async move {
        let taken = c.take(30_000).await;
        (!taken["task"].is_null()).then_some(taken)
    })
    .await;
    assert_eq!(second["task"]["task_id"], first["task"]["task_id"]);
    assert_eq!(second["task"]["attempts"], 2);
    assert!(second["task"]["deadline_ms"].as_u64() > first["task"]["deadline_ms"].as_u64());

    let (status, lost) = complete(&cluster, &first).await;
    assert_eq!(status, 409, "{lost}");
    assert_eq!(lost["error"], "lease_lost");
    let fail = json!({"deadline_ms": first["task"]["deadline_ms"], "error": "late"});
    let (status, lost) =
        cluster.post(&format!("/v1/repairs/{}/fail", first["task"]["task_id"]), fail).await;
    assert_eq!((status, lost["error"].clone()), (409, json!("lease_lost")));
    assert_eq!(cluster.object("eel.jpg").await, first["object"], "nothing moved");

    let (status, done) = complete(&cluster, &second).await;
    assert_relocated((status, done));
    let moved = location(&cluster.object("eel.jpg").await, "d1");
    let destination = &second["destination"];
    assert_eq!(json!([moved.0, moved.1]), json!([destination["node_id"], destination["disk"]]));
    let (status, again) = complete(&cluster, &second).await;
    assert_eq!((status, again["error"].clone()), (409, json!("lease_lost")), "completed once");
    let status = cluster.status().await;
    assert_eq!(
        (status["under_protected_units"].clone(), status["repairs_completed"].clone()),
        (json!(0), json!(1))
    );
    cluster.stop().await;
}

#[tokio::test]
async fn stale_tasks_complete_as_stale_or_are_dropped() {
    let cluster = Cluster::start(5).await;
    let old = cluster.put("fox.jpg", 3 * MIB).await;
    for unit in ["d0", "d2"] {
        let report = json!({"bucket": "photos", "key": "fox.jpg", "generation": old["generation"],
                            "unit": unit, "reason": "missing"});
        assert_eq!(cluster.post("/v1/repairs", report).await.0, 200);
    }
    let taken = cluster.take(30_000).await;
    assert_eq!(taken["task"]["unit"], "d0");

    // The object is rewritten while the repair runs.
    let new = cluster.put("fox.jpg", 2 * MIB).await;
    assert_ne!(new["generation"], old["generation"]);
    let (status, done) = complete(&cluster, &taken).await;
    assert_eq!((status, done), (200, json!({"result": "stale"})));
    assert_eq!(cluster.object("fox.jpg").await["generation"], new["generation"]);
    // The other old task is dropped, not handed out.
    assert_eq!(cluster.take(30_000).await, json!({"task": null, "dropped": 1}));
    assert_eq!(cluster.repairs().await["queued"], 0);

    let late = json!({"bucket": "photos", "key": "fox.jpg", "generation": old["generation"],
                      "unit": "d0", "reason": "missing"});
    let (status, body) = cluster.post("/v1/repairs", late).await;
    assert_eq!((status, body), (200, json!({"queued": false, "stale": true})));
    assert_eq!(cluster.status().await["repairs_completed"], 0);
    cluster.stop().await;
}

#[tokio::test]
async fn bad_requests_are_json_errors() {
    let cluster = Cluster::start(3).await;
    let object = cluster.put("gnu.jpg", 3 * MIB).await;
    let report = |key: &str, unit: &str| {
        json!({"bucket": "photos", "key": key, "generation": object["generation"], "unit": unit,
               "reason": "x"})
    };
    let (status, body) = cluster.post("/v1/repairs", report("nope", "d0")).await;
    assert_eq!((status, body["error"].clone()), (404, json!("no_such_object")), "{body}");
    let mut other_bucket = report("gnu.jpg", "d0");
    other_bucket["bucket"] = json!("nobucket");
    let (status, body) = cluster.post("/v1/repairs", other_bucket).await;
    assert_eq!((status, body["error"].clone()), (404, json!("no_such_object")), "{body}");
    // gnu.jpg (3 MiB, fitted) has data blocks d0–d3 in groups 0 and 1, one parity each.
    for unit in ["x1", "d01", "d4", "p0.1", "p2.0"] {
        let (status, body) = cluster.post("/v1/repairs", report("gnu.jpg", unit)).await;
        assert_eq!((status, body["error"].clone()), (400, json!("invalid_unit")), "{unit}: {body}");
        assert!(body["message"].as_str().unwrap().contains(unit), "{body}");
    }
    let (status, body) = cluster.post("/v1/repairs", json!({"bucket": "photos"})).await;
    assert_eq!((status, body["error"].clone()), (400, json!("bad_request")), "{body}");

    for lease_ms in [0, 3_600_001] {
        let (status, body) = cluster.post("/v1/repairs/take", json!({"lease_ms": lease_ms})).await;
        assert_eq!((status, body["error"].clone()), (400, json!("bad_request")), "{body}");
    }
    let done = json!({"deadline_ms": 1, "node_id": 1, "disk": 0});
    let (status, body) = cluster.post("/v1/repairs/77/complete", done.clone()).await;
    assert_eq!((status, body["error"].clone()), (409, json!("lease_lost")), "{body}");
    let (status, body) = cluster.post("/v1/repairs/seven/complete", done).await;
    assert_eq!((status, body["error"].clone()), (400, json!("bad_request")), "{body}");

    // A destination meta never heard of is refused; the lease stays usable.
    assert_eq!(cluster.post("/v1/repairs", report("gnu.jpg", "d0")).await.0, 200);
    let taken = cluster.take(30_000).await;
    let deadline = taken["task"]["deadline_ms"].clone();
    let path = format!("/v1/repairs/{}/complete", taken["task"]["task_id"]);
    let nowhere = json!({"deadline_ms": deadline, "node_id": 99, "disk": 0});
    let (status, body) = cluster.post(&path, nowhere).await;
    assert_eq!((status, body["error"].clone()), (400, json!("bad_destination")), "{body}");
    // Breaking a placement rule (d0 next to d1, its stripe peer) is refused too.
    let (node, disk) = location(&object, "d1");
    let (status, body) =
        cluster.post(&path, json!({"deadline_ms": deadline, "node_id": node, "disk": disk})).await;
    assert_eq!((status, body["error"].clone()), (409, json!("placement_refused")), "{body}");
    assert_relocated(complete(&cluster, &taken).await);
    cluster.stop().await;
}

#[tokio::test]
async fn no_destination_is_503_and_returns_the_task() {
    // Exactly 3 nodes for rs(2,1): when one is down, no node can take its units.
    let cluster = Cluster::start(3).await;
    let object = cluster.put("hen.jpg", 3 * MIB).await;
    let victim = location(&object, "d0").0;
    cluster.silence(victim as u32);
    let (c, count) = (&cluster, units_on(&object, victim).len());
    until("the victim's units to be queued", || async move {
        (c.repairs().await["queued"] == count).then_some(())
    })
    .await;
    // 3 MiB is fitted to two whole groups (d0 d1 p0.0, d2 d3 p1.0), each on all three
    // nodes: none of the victim's units has a destination, and d0 is never handed out.
    let (mut status, mut body) = (200, Value::Null);
    for _ in 0..count {
        (status, body) = cluster.post("/v1/repairs/take", json!({"lease_ms": 30_000})).await;
        if status != 200 {
            break;
        }
        assert_ne!(body["task"]["unit"], "d0", "d0 has no destination: {body}");
    }
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "no_destination");
    assert_eq!((body["nodes_up"].clone(), body["needed"].clone()), (json!(2), json!(3)), "{body}");
    assert!(body["message"].as_str().unwrap().contains("2 nodes are up"), "{body}");
    // The task the take refused (the queue's first: which of the victim's units that is
    // depends on when the detector saw each) is back in the queue, saying why.
    let repairs = cluster.repairs().await;
    let refused: Vec<&Value> = repairs["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["last_error"].as_str().is_some_and(|e| e.contains("no disk can take")))
        .collect();
    assert_eq!(refused.len(), 1, "{repairs}");
    let task = refused[0];
    assert_eq!(task["deadline_ms"], Value::Null, "returned to the queue, free to take");
    let unit = task["unit"].as_str().unwrap();
    assert!(units_on(&object, victim).contains(unit), "{task}");
    assert!(task["last_error"].as_str().unwrap().contains(&format!("no disk can take {unit}")));
    cluster.stop().await;
}

#[tokio::test]
async fn a_restart_keeps_the_queue_and_does_not_judge_old_heartbeats() {
    let mut cluster = Cluster::start(5).await;
    let object = cluster.put("owl.jpg", 3 * MIB).await;
    let victim = location(&object, "d2").0;
    cluster.silence(victim as u32);
    let lost = units_on(&object, victim);
    let (c, count) = (&cluster, lost.len());
    let before = until("the victim's units to be queued", || async move {
        let repairs = c.repairs().await;
        (repairs["queued"] == count).then_some(repairs)
    })
    .await;

    // Meta is down for longer than down_after_ms, and the nodes come back to it only 250 ms
    // after it restarts: every saved heartbeat is old, but no node may be judged down on it.
    cluster.restart(DOWN_AFTER_MS + 100, Duration::from_millis(250)).await;
    assert_eq!(cluster.repairs().await, before, "the queue survives the restart");
    let status = cluster.status().await;
    assert_eq!(status["under_protected_units"], lost.len(), "only the queued units");
    // Past the grace period and a few scans: still exactly the silent node's units.
    tokio::time::sleep(Duration::from_millis(DOWN_AFTER_MS + 300)).await;
    assert_eq!(cluster.repairs().await, before);
    let status = cluster.status().await;
    assert_eq!(status["nodes_down"], 1, "{status}");
    assert_eq!(status["under_protected_units"], lost.len());

    // And the restarted meta carries the repairs out.
    for _ in 0..lost.len() {
        let taken = cluster.take(30_000).await;
        check_take(&cluster, &taken, (victim, None)).await;
        assert_relocated(complete(&cluster, &taken).await);
    }
    assert_eq!(cluster.status().await["under_protected_units"], 0);
    cluster.stop().await;
}

#[tokio::test]
async fn at_level_rack_a_lost_unit_is_rebuilt_in_a_rack_holding_no_peer() {
    // 6 nodes in 3 racks (rack = (id - 1) % 3); rs(2,1) fills all 3 racks, so a unit lost
    // with its node can only go to the other node of the same rack.
    let rack = |id: u64| (id - 1) % 3;
    let cluster = Cluster::start_with(6, FailureDomain::Rack, |id| Some((id - 1) % 3)).await;
    let object = cluster.put("fox.jpg", 2 * MIB).await;
    let racks: BTreeSet<u64> =
        ["d0", "d1", "p0.0"].iter().map(|u| rack(location(&object, u).0)).collect();
    assert_eq!(racks.len(), 3, "{object}");
    let victim = location(&object, "d0").0;
    cluster.silence(victim as u32);
    let c = &cluster;
    until("d0 to be queued", || async move {
        c.repairs().await["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["unit"] == "d0")
            .then_some(())
    })
    .await;
    let taken = cluster.take(30_000).await;
    assert_eq!(taken["task"]["unit"], "d0", "{taken}");
    let node = taken["destination"]["node_id"].as_u64().unwrap();
    assert_ne!(node, victim);
    assert_eq!(rack(node), rack(victim), "the only rack with no peer of d0: {taken}");
    assert_relocated(complete(&cluster, &taken).await);
    let moved = cluster.object("fox.jpg").await;
    let racks: BTreeSet<u64> =
        ["d0", "d1", "p0.0"].iter().map(|u| rack(location(&moved, u).0)).collect();
    assert_eq!(racks.len(), 3, "{moved}");

    // Its rack emptied too: no rack is free of d1's peers, and the 503 names racks.
    cluster.silence(node as u32);
    let c = &cluster;
    until("d0 to be queued again", || async move {
        c.repairs().await["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["unit"] == "d0")
            .then_some(())
    })
    .await;
    let (status, body) = cluster.post("/v1/repairs/take", json!({"lease_ms": 30_000})).await;
    assert_eq!((status, body["error"].as_str()), (503, Some("no_destination")), "{body}");
    assert_eq!(
        (body["failure_domain"].as_str(), body["usable_domains"].as_u64()),
        (Some("rack"), Some(2))
    );
    assert_eq!((body["nodes_up"].as_u64(), body["needed"].as_u64()), (Some(4), Some(3)));
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("failure domains (racks)"), "{message}");
    cluster.stop().await;
}

#[tokio::test]
async fn at_level_disk_a_lost_unit_may_share_a_node_but_never_a_disk() {
    // 2 nodes × 2 disks at level disk: rs(2,1) takes 3 of the 4 disks (so one node holds two
    // units); when one of those disks fails, the only destination is the 4th disk.
    let cluster = Cluster::start_with(2, FailureDomain::Disk, |_| None).await;
    let object = cluster.put("elk.jpg", 2 * MIB).await;
    let used: BTreeSet<(u64, u64)> =
        ["d0", "d1", "p0.0"].iter().map(|u| location(&object, u)).collect();
    assert_eq!(used.len(), 3, "{object}");
    let (node, disk) = location(&object, "d0");
    let mut failed = [None, None];
    failed[disk as usize] = Some("EIO");
    cluster.set_disks(node as u32, failed);
    let c = &cluster;
    until("d0 to be queued", || async move {
        c.repairs().await["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["unit"] == "d0")
            .then_some(())
    })
    .await;
    let taken = cluster.take(30_000).await;
    assert_eq!(taken["task"]["unit"], "d0", "{taken}");
    let free: Vec<(u64, u64)> =
        [(1, 0), (1, 1), (2, 0), (2, 1)].into_iter().filter(|d| !used.contains(d)).collect();
    let destination = &taken["destination"];
    assert_eq!(
        [(destination["node_id"].as_u64().unwrap(), destination["disk"].as_u64().unwrap())],
        free.as_slice(),
        "{taken}"
    );
    assert_relocated(complete(&cluster, &taken).await);
    let moved = cluster.object("elk.jpg").await;
    let now: BTreeSet<(u64, u64)> =
        ["d0", "d1", "p0.0"].iter().map(|u| location(&moved, u)).collect();
    assert_eq!(now.len(), 3, "{moved}");
    assert!(!now.contains(&(node, disk)));
    cluster.stop().await;
}

#[tokio::test]
async fn a_repair_keeps_the_level_the_object_was_placed_at() {
    // Placed at level node on 3 nodes × 2 disks: the units are on 3 distinct nodes.
    let mut cluster = Cluster::start(3).await;
    let object = cluster.put("yak.jpg", 2 * MIB).await;
    let nodes: BTreeSet<u64> =
        ["d0", "d1", "p0.0"].iter().map(|u| location(&object, u).0).collect();
    assert_eq!(nodes.len(), 3, "{object}");

    // Meta comes back at level disk: new objects may put units on one node, but a repair of
    // the old object keeps level node, so d0 can only go to the other disk of its own node.
    cluster.level = FailureDomain::Disk;
    cluster.restart(0, Duration::ZERO).await;
    let (node, disk) = location(&object, "d0");
    let mut failed = [None, None];
    failed[disk as usize] = Some("EIO");
    cluster.set_disks(node as u32, failed);
    let c = &cluster;
    until("d0 to be queued", || async move {
        c.repairs().await["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["unit"] == "d0")
            .then_some(())
    })
    .await;
    let taken = cluster.take(30_000).await;
    assert_eq!(taken["task"]["unit"], "d0", "{taken}");
    let destination = &taken["destination"];
    assert_eq!(
        (destination["node_id"].as_u64(), destination["disk"].as_u64()),
        (Some(node), Some(1 - disk)),
        "{taken}"
    );
    assert_relocated(complete(&cluster, &taken).await);

    // A new object at level disk: rs(4,1) needs 5 domains, more than the 3 nodes.
    let policy = json!({"code": "rs(4,1)", "stripe_width": 1, "cell_bytes": MIB,
                        "block_bytes": MIB});
    let (status, begun) = cluster
        .post("/v1/buckets/photos/objects/wide/begin", json!({"size": 4 * MIB, "policy": policy}))
        .await;
    assert_eq!(status, 200, "{begun}");
    let disks: BTreeSet<(u64, u64)> =
        ["d0", "d1", "d2", "d3", "p0.0"].iter().map(|u| location(&begun, u)).collect();
    assert_eq!(disks.len(), 5, "{begun}");
    cluster.stop().await;
}

/// Milliseconds since the Unix epoch (meta's clock, on this same machine).
fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Reports `unit` of `key` damaged, takes the task and fails it with `cause` (None: no cause
/// field, as older executors send); returns the fail reply and the time just before it.
async fn take_and_fail(
    cluster: &Cluster,
    key: &str,
    unit: &str,
    cause: Option<&str>,
) -> (Value, u64) {
    let object = cluster.object(key).await;
    let report = json!({"bucket": "photos", "key": key, "generation": object["generation"],
                        "unit": unit, "reason": "test"});
    let (status, body) = cluster.post("/v1/repairs", report).await;
    assert_eq!(status, 200, "{body}");
    let taken = cluster.take(30_000).await;
    assert_eq!(taken["task"]["unit"], unit, "{taken}");
    let mut body = json!({"deadline_ms": taken["task"]["deadline_ms"], "error": "too few units"});
    if let Some(cause) = cause {
        body["cause"] = json!(cause);
    }
    let before = wall_ms();
    let (status, reply) =
        cluster.post(&format!("/v1/repairs/{}/fail", taken["task"]["task_id"]), body).await;
    assert_eq!(status, 200, "{reply}");
    (reply, before)
}

/// Issue 15 item 6: a failed task backs off (1 s doubling), so a take right after a failure
/// hands out nothing instead of the same task again.
#[tokio::test]
async fn a_failed_repair_backs_off_and_the_back_off_doubles() {
    let cluster = Cluster::start(4).await;
    cluster.put("dog.jpg", 3 * MIB).await;
    let (reply, before) = take_and_fail(&cluster, "dog.jpg", "d1", None).await;
    assert_eq!(reply["unfound"], false, "{reply}");
    let not_before = reply["not_before_ms"].as_u64().expect("a back-off");
    assert!((before + 900..=wall_ms() + 1100).contains(&not_before), "1 s back-off: {reply}");
    let taken = cluster.take(30_000).await;
    assert_eq!(taken["task"], Value::Null, "a task backing off is not handed out: {taken}");
    let listed = cluster.repairs().await;
    assert_eq!(listed["tasks"][0]["not_before_ms"], not_before, "{listed}");

    // Due again after its back-off; a second failure waits twice as long.
    let c = &cluster;
    let again = until("the task to be due again", || async move {
        let taken = c.take(30_000).await;
        (!taken["task"].is_null()).then_some(taken)
    })
    .await;
    assert!(wall_ms() >= not_before);
    assert_eq!(again["task"]["attempts"], 2, "{again}");
    let body = json!({"deadline_ms": again["task"]["deadline_ms"], "error": "node refused"});
    let before = wall_ms();
    let (status, reply) =
        cluster.post(&format!("/v1/repairs/{}/fail", again["task"]["task_id"]), body).await;
    assert_eq!(status, 200, "{reply}");
    let not_before = reply["not_before_ms"].as_u64().unwrap();
    assert!((before + 1900..=wall_ms() + 2100).contains(&not_before), "2 s back-off: {reply}");
    let (status, body) = cluster
        .post("/v1/repairs/1/fail", json!({"deadline_ms": 1, "error": "x", "cause": "sometimes"}))
        .await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    cluster.stop().await;
}

/// Issue 15 item 6: an `unrecoverable` failure makes the unit unfound (status, GET, repair
/// list), it is retried only after a long back-off or at once when a node returns, and
/// `POST /v1/repairs/lost` gives the object up: GET then answers 410 object_lost.
#[tokio::test]
async fn an_unrecoverable_unit_is_unfound_until_marked_lost() {
    let cluster = Cluster::start(4).await;
    cluster.put("cat.jpg", 3 * MIB).await;
    cluster.put("owl.jpg", 3 * MIB).await;
    let (reply, before) = take_and_fail(&cluster, "cat.jpg", "d0", Some("unrecoverable")).await;
    assert_eq!(reply["unfound"], true, "{reply}");
    let not_before = reply["not_before_ms"].as_u64().unwrap();
    assert!(not_before >= before + 60_000, "an unfound unit backs off long: {reply}");
    assert_eq!(cluster.take(30_000).await["task"], Value::Null);
    let status = cluster.status().await;
    assert_eq!(
        (status["unfound_units"].clone(), status["unfound_objects"].clone()),
        (json!(1), json!(1)),
        "{status}"
    );
    assert_eq!(cluster.object("cat.jpg").await["unfound_units"], json!(["d0"]));
    assert_eq!(cluster.object("owl.jpg").await["unfound_units"], Value::Null, "none: no field");
    assert_eq!(cluster.repairs().await["tasks"][0]["unfound"], true);

    // A node that returns makes unfound tasks due at once.
    let silent = 4;
    cluster.silence(silent);
    let c = &cluster;
    until("node 4 down", || async move { (c.status().await["nodes_down"] == 1).then_some(()) })
        .await;
    cluster.set_disks(silent, [None, None]);
    let woken = until("the unfound task to be due again", || async move {
        let repairs = c.repairs().await;
        let task =
            repairs["tasks"].as_array().unwrap().iter().find(|t| t["key"] == "cat.jpg")?.clone();
        task["not_before_ms"].is_null().then_some(task)
    })
    .await;
    assert_eq!(woken["unfound"], true, "still unfound until a repair succeeds: {woken}");

    // Giving up: refused for a readable object, bad bodies are 400, unknown objects 404.
    let (status, body) =
        cluster.post("/v1/repairs/lost", json!({"bucket": "photos", "key": "owl.jpg"})).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("not_unfound")), "{body}");
    let (status, body) = cluster.post("/v1/repairs/lost", json!({"bucket": "photos"})).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("bad_request")), "{body}");
    let (status, body) =
        cluster.post("/v1/repairs/lost", json!({"bucket": "photos", "key": "no"})).await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_object")), "{body}");
    let wrong = json!({"bucket": "photos", "key": "cat.jpg", "generation": 999_999});
    let (status, body) = cluster.post("/v1/repairs/lost", wrong).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("stale")), "{body}");

    let (status, lost) =
        cluster.post("/v1/repairs/lost", json!({"bucket": "photos", "key": "cat.jpg"})).await;
    assert_eq!(status, 200, "{lost}");
    assert_eq!((lost["lost"].clone(), lost["unfound_units"].clone()), (json!(true), json!(["d0"])));
    // d0's task, and those the detector queued while node 4 was silent.
    assert!(lost["dropped_repairs"].as_u64().unwrap() >= 1, "{lost}");
    // 3 MiB in rs(2,1) is fitted to four 768 KiB blocks (two whole groups) and two parities.
    assert_eq!(lost["object"]["units"].as_array().unwrap().len(), 6, "the units to delete: {lost}");
    let (status, body) = cluster.get("/v1/buckets/photos/objects/cat.jpg").await;
    assert_eq!((status, body["error"].as_str()), (410, Some("object_lost")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("d0"), "{body}");
    let status = cluster.status().await;
    assert_eq!(status["unfound_units"], 0, "{status}");
    assert_eq!(status["lost_objects"], 1, "{status}");
    let left = cluster.repairs().await;
    assert!(left["tasks"].as_array().unwrap().iter().all(|t| t["key"] != "cat.jpg"), "{left}");
    // Deleting the key forgets it.
    let (status, _) = cluster
        .call(reqwest::Method::DELETE, "/v1/buckets/photos/objects/cat.jpg", Value::Null)
        .await;
    assert_eq!(status, 404);
    let (status, body) = cluster.get("/v1/buckets/photos/objects/cat.jpg").await;
    assert_eq!((status, body["error"].as_str()), (404, Some("no_such_key")), "{body}");
    assert_eq!(cluster.status().await["lost_objects"], 0);
    cluster.stop().await;
}

#[tokio::test]
async fn a_full_disk_takes_no_new_unit_nor_rebuilt_one_and_is_not_repaired() {
    // rs(2,1) over 4 nodes (the fake nodes send the old heartbeat shape: no capacity, ok).
    let cluster = Cluster::start(4).await;
    // "hen" is one group and stripe: 3 units on 3 of the nodes; the fourth turns full.
    let hen = cluster.put("hen", 2 * MIB).await;
    let full_node = (1..=4).find(|&n| units_on(&hen, n).is_empty()).unwrap();
    let mut kept = None;
    for i in 0..20 {
        let object = cluster.put(&format!("cat-{i}"), 3 * MIB).await;
        if !units_on(&object, full_node).is_empty() {
            kept = Some(object);
            break;
        }
    }
    let kept = kept.expect("one of 20 objects over 4 nodes has a unit on each node");
    let kept_key = kept["key"].as_str().unwrap().to_string();
    let on_full_node = units_on(&kept, full_node);
    let set_states = |states: [&str; 2]| {
        let mut beats = cluster.beats.lock().unwrap();
        let beat = beats.get_mut(&(full_node as u32)).unwrap();
        for (disk, state) in states.into_iter().enumerate() {
            beat["disks"][disk]["state"] = json!(state);
            beat["disks"][disk]["free_bytes"] = json!(if state == "full" { 0 } else { 1 << 30 });
            beat["disks"][disk]["total_bytes"] = json!(100u64 << 30);
        }
    };
    let c = &cluster;
    let counts = |nearfull: u64, full: u64| async move {
        until(&format!("{nearfull} nearfull and {full} full disks in the status"), || async move {
            let status = c.status().await;
            (status["nearfull_disks"] == nearfull && status["full_disks"] == full).then_some(status)
        })
        .await
    };

    // One disk nearfull (still written), the other full (read-only).
    set_states(["nearfull", "full"]);
    let status = counts(1, 1).await;
    let node = status["nodes"].as_array().unwrap().iter().find(|n| n["id"] == full_node).unwrap();
    assert_eq!(node["disks"][1]["state"], "full", "{node}");
    assert!(node["disks"][1]["failed"].is_null(), "full is not failed: {node}");
    let mut on_node = Vec::new();
    for i in 0..12 {
        let object = cluster.put(&format!("nearfull-{i}"), 3 * MIB).await;
        for unit in object["units"].as_array().unwrap() {
            if unit["node_id"] == full_node {
                on_node.push(unit["disk"].as_u64().unwrap());
            }
        }
    }
    assert!(!on_node.is_empty(), "12 objects of 3 units over 4 nodes: some land on the node");
    assert!(
        on_node.iter().all(|&disk| disk == 0),
        "only the nearfull disk is written: {on_node:?}"
    );

    // Both full: the node takes no new unit, and nothing on it is queued for repair.
    set_states(["full", "full"]);
    counts(0, 2).await;
    for i in 0..12 {
        let object = cluster.put(&format!("full-{i}"), 3 * MIB).await;
        assert!(units_on(&object, full_node).is_empty(), "a unit placed on a full disk: {object}");
    }
    // Let the detector run several full scans (every 300 ms) before looking.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(cluster.repairs().await["queued"], 0, "a full disk is not a failed one");
    assert_eq!(cluster.status().await["under_protected_units"], 0);
    assert_eq!(units_on(&cluster.object(&kept_key).await, full_node), on_full_node, "kept");

    // A node holding a unit of "hen" goes down: its units are queued, and the full node is
    // never a destination. For "hen" (and the objects placed while the node was full) it is
    // the only node holding no peer: no destination.
    let down_node = hen["units"][0]["node_id"].as_u64().unwrap();
    assert_ne!(down_node, full_node);
    cluster.silence(down_node as u32);
    until("the down node's units to be queued", || async move {
        (c.repairs().await["queued"].as_u64().unwrap() > 0).then_some(())
    })
    .await;
    for task in cluster.repairs().await["tasks"].as_array().unwrap() {
        assert_eq!(task["reason"], format!("node {down_node} down"), "only the down node's");
    }
    let mut refused = None;
    for _ in 0..200 {
        let (status, body) = cluster.post("/v1/repairs/take", json!({"lease_ms": 30_000})).await;
        match status {
            200 if body["task"].is_null() => break,
            200 => assert_ne!(body["destination"]["node_id"], full_node, "{body}"),
            503 => {
                refused = Some(body);
                break;
            }
            _ => panic!("take gave {status}: {body}"),
        }
    }
    let body = refused.expect("hen's lost unit has no destination but the full node");
    assert_eq!(body["error"], "no_destination");
    assert_eq!(body["full_disks"], 2, "{body}");
    assert!(body["message"].as_str().unwrap().contains("2 disks are full"), "{body}");

    // A new object now fits only if the full disks are counted: the error says space.
    let (status, body) =
        cluster.post("/v1/buckets/photos/objects/late/begin", json!({"size": MIB})).await;
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["error"], "disks_full", "{body}");
    assert_eq!(body["full_disks"], json!([format!("{full_node}/0"), format!("{full_node}/1")]));
    assert!(body["message"].as_str().unwrap().contains("full"), "{body}");
    assert_eq!((body["usable_domains"].clone(), body["needed"].clone()), (json!(2), json!(3)));
    cluster.stop().await;
}
