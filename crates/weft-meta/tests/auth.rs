//! Authentication and authorisation of meta, against a real in-process server over real HTTP:
//! every route (and an unknown one) refuses unsigned, foreign, replayed, altered, stale and
//! misdirected requests before any handler runs, and changes nothing when it does; a node's key
//! opens its own heartbeat only, once enrolled; a rogue node is never listed; no records route
//! hands out a plain secret or reaches meta's internal namespace; and the one-time migration of
//! an older meta's store (enrolment of known nodes, sealing of plain access-key secrets).

use std::path::Path;

use reqwest::{Method, Request};
use serde_json::{json, Value};
use weft_auth::{
    content_hash, now_ms,
    sign_reqwest::{sign, SendSigned},
    Audience, ClusterSecret, Signer, AUTHORIZATION_HEADER, CONTENT_HASH_HEADER, MAX_SKEW_MS,
};
use weft_meta::service::{bind, MetaConfig, RunningMeta, DB_FILE};
use weft_meta::{DiskReport, Heartbeat, MetaStore, RedbStore};

const KIB: u64 = 1 << 10;

fn layout(code: &str) -> Value {
    json!({"code": code, "stripe_width": 2, "cell_bytes": 4 * KIB, "block_bytes": 4 * KIB})
}

fn heartbeat(id: u32) -> Value {
    json!({
        "node_id": id, "endpoint": format!("http://127.0.0.1:{}", 9000 + id), "pid": 1,
        "disks": [
            {"index": 0, "dir": "/d0", "units": 0, "bytes": 0, "failed": null},
            {"index": 1, "dir": "/d1", "units": 0, "bytes": 0, "failed": null},
        ],
    })
}

/// Node `id`'s signer for its requests to meta, under `secret`.
fn node_signer(secret: &ClusterSecret, id: u32) -> Signer {
    Signer::new(secret.node_key(id), Audience::Meta)
}

/// A fresh 32-hex-digit nonce.
fn nonce() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Signs `request` (whose body is `body`) by hand, as signed at `timestamp_ms`.
fn sign_at(signer: &Signer, request: &mut Request, body: &[u8], timestamp_ms: u64) {
    let hash = content_hash(body);
    let url = request.url().clone();
    let method = request.method().as_str().to_string();
    let authorization = signer.authorization_at(
        &method,
        url.path(),
        url.query().unwrap_or(""),
        &hash,
        timestamp_ms,
        &nonce(),
    );
    let headers = request.headers_mut();
    headers.insert(AUTHORIZATION_HEADER, authorization.parse().unwrap());
    headers.insert(CONTENT_HASH_HEADER, hash.parse().unwrap());
}

async fn start_meta(dir: &Path, secret: &ClusterSecret) -> RunningMeta {
    let mut config = MetaConfig::new("127.0.0.1:0".parse().unwrap(), dir, secret.clone());
    config.down_after_ms = 600_000;
    bind(config).await.expect("meta starts")
}

/// A unit key no object of [`populated`] has.
const UNREFERENCED_UNIT: &str = "000000000000000000000000000abcde-d00000000-0000000000000000";

/// One request of a route: who signs it (the client, or node `as_node`) and its body.
#[derive(Clone, Debug)]
struct Route {
    method: Method,
    path: String,
    body: Vec<u8>,
    as_node: Option<u32>,
}

impl Route {
    fn new(method: Method, path: impl Into<String>, body: Option<Value>) -> Route {
        let body = body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default();
        Route { method, path: path.into(), body, as_node: None }
    }

    /// The signer this request is meant to carry, under `secret`.
    fn signer(&self, secret: &ClusterSecret) -> Signer {
        match self.as_node {
            Some(id) => node_signer(secret, id),
            None => secret.signer_for(Audience::Meta),
        }
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// How a refused request is made.
#[derive(Clone, Copy, Debug)]
enum Forgery {
    /// No signature at all.
    Unsigned,
    /// Signed correctly, but with another cluster's keys.
    OtherCluster,
    /// Signed for the route's body, sent with another.
    BodySwapped,
    /// Signed with the right key, more than `MAX_SKEW_MS` ago.
    Stale,
    /// Signed with the right key, more than `MAX_SKEW_MS` ahead.
    Future,
    /// Signed now with node 1's key, but for audience node/1 (a request a client sent to
    /// node 1, forwarded to meta).
    OtherAudience,
    /// Signed for another path.
    OtherPath,
    /// Signed for another query.
    OtherQuery,
    /// Signed for another method.
    OtherMethod,
}

const FORGERIES: [Forgery; 9] = [
    Forgery::Unsigned,
    Forgery::OtherCluster,
    Forgery::BodySwapped,
    Forgery::Stale,
    Forgery::Future,
    Forgery::OtherAudience,
    Forgery::OtherPath,
    Forgery::OtherQuery,
    Forgery::OtherMethod,
];

struct Cluster {
    dir: tempfile::TempDir,
    meta: Option<RunningMeta>,
    base: String,
    client: reqwest::Client,
    secret: ClusterSecret,
}

impl Cluster {
    /// Meta on a new directory, with no node and no bucket.
    async fn empty() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let secret = ClusterSecret::generate();
        Cluster::on(dir, secret).await
    }

    async fn on(dir: tempfile::TempDir, secret: ClusterSecret) -> Cluster {
        let meta = start_meta(dir.path(), &secret).await;
        let base = meta.endpoint();
        Cluster { dir, meta: Some(meta), base, client: reqwest::Client::new(), secret }
    }

    async fn restart(&mut self) {
        self.meta.take().unwrap().stop().await.unwrap();
        let meta = start_meta(self.dir.path(), &self.secret).await;
        self.base = meta.endpoint();
        self.meta = Some(meta);
    }

    async fn stop(mut self) {
        self.meta.take().unwrap().stop().await.unwrap();
    }

    /// The request of `route`, built and unsigned.
    fn build(&self, route: &Route) -> Request {
        let mut builder =
            self.client.request(route.method.clone(), format!("{}{}", self.base, route.path));
        if !route.body.is_empty() {
            builder = builder.header("content-type", "application/json").body(route.body.clone());
        }
        builder.build().unwrap()
    }

    async fn execute(&self, request: Request) -> (u16, Value) {
        let response = self.client.execute(request).await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `route`, signed as it should be.
    async fn send(&self, route: &Route) -> (u16, Value) {
        let mut request = self.build(route);
        sign(&route.signer(&self.secret), &mut request);
        self.execute(request).await
    }

    async fn call_as(
        &self,
        signer: &Signer,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send_signed(signer).await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A request signed as the client.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(&self.secret.signer_for(Audience::Meta), method, path, body).await
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    async fn enrol(&self, id: u32) {
        let (status, body) = self.call(Method::PUT, &format!("/v1/nodes/{id}"), None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!((body["id"].clone(), body["enrolled"].clone()), (json!(id), json!(true)));
    }

    /// Node `id`'s heartbeat, signed with its key of this cluster.
    async fn heartbeat(&self, id: u32) -> (u16, Value) {
        let signer = node_signer(&self.secret, id);
        self.call_as(&signer, Method::POST, "/v1/heartbeat", Some(heartbeat(id))).await
    }

    async fn node_ids(&self) -> Vec<u64> {
        let nodes = self.get("/v1/nodes").await;
        nodes["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect()
    }

    /// Everything the API shows (timestamps of answers aside): equal before and after a
    /// request means the request changed nothing visible.
    async fn snapshot(&self) -> Value {
        let mut state = serde_json::Map::new();
        let mut paths: Vec<String> = [
            "/v1/nodes",
            "/v1/status",
            "/v1/buckets",
            "/v1/repairs",
            "/v1/transitions",
            "/v1/references",
            "/v1/records/access_keys",
            "/v1/records/uploads",
            "/v1/records/object_attributes",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let buckets = self.get("/v1/buckets").await;
        for bucket in buckets["buckets"].as_array().unwrap() {
            let name = bucket["name"].as_str().unwrap();
            paths.push(format!("/v1/buckets/{name}/objects"));
            let objects = self.get(&format!("/v1/buckets/{name}/objects")).await;
            for object in objects["objects"].as_array().unwrap() {
                paths.push(format!(
                    "/v1/buckets/{name}/objects/{}",
                    object["key"].as_str().unwrap()
                ));
            }
        }
        let transitions = self.get("/v1/transitions").await;
        for transition in transitions["transitions"].as_array().unwrap() {
            let (bucket, key) = (&transition["bucket"], &transition["key"]);
            paths.push(format!(
                "/v1/transitions/{}/{}",
                bucket.as_str().unwrap(),
                key.as_str().unwrap()
            ));
        }
        for path in paths {
            let mut answer = self.get(&path).await;
            if let Some(fields) = answer.as_object_mut() {
                fields.remove("generated_ms");
                // Each meta's record is refreshed with every lease renewal: a clock, not state.
                if let Some(Value::Array(metas)) = fields.get_mut("meta") {
                    for meta in metas.iter_mut().filter_map(Value::as_object_mut) {
                        meta.remove("seen_ms");
                    }
                }
            }
            state.insert(path, answer);
        }
        Value::Object(state)
    }

    /// A request made as `forgery` says, for `route`.
    fn forge(&self, route: &Route, forgery: Forgery, other: &ClusterSecret) -> Request {
        let mut request = self.build(route);
        let signer = route.signer(&self.secret);
        match forgery {
            Forgery::Unsigned => {}
            Forgery::OtherCluster => sign(&route.signer(other), &mut request),
            Forgery::BodySwapped => {
                sign(&signer, &mut request);
                let mut swapped = route.body.clone();
                swapped.extend_from_slice(if swapped.is_empty() { b"{\"size\":1}" } else { b" " });
                *request.body_mut() = Some(swapped.into());
                request.headers_mut().remove(reqwest::header::CONTENT_LENGTH);
            }
            Forgery::Stale => {
                sign_at(&signer, &mut request, &route.body, now_ms() - MAX_SKEW_MS - 5_000)
            }
            Forgery::Future => {
                sign_at(&signer, &mut request, &route.body, now_ms() + MAX_SKEW_MS + 5_000)
            }
            Forgery::OtherAudience => {
                let to_node = Signer::new(self.secret.node_key(1), Audience::Node(1));
                sign_at(&to_node, &mut request, &route.body, now_ms());
            }
            Forgery::OtherPath | Forgery::OtherQuery | Forgery::OtherMethod => {
                let mut elsewhere = route.clone();
                match forgery {
                    Forgery::OtherPath if route.path.starts_with("/v1/nodes") => {
                        elsewhere.path = "/v1/status".into();
                    }
                    Forgery::OtherPath => elsewhere.path = "/v1/nodes".into(),
                    Forgery::OtherQuery if route.path.contains('?') => {
                        elsewhere.path.push_str("&x=1")
                    }
                    Forgery::OtherQuery => elsewhere.path.push_str("?x=1"),
                    _ if route.method == Method::PUT => elsewhere.method = Method::POST,
                    _ => elsewhere.method = Method::PUT,
                }
                let mut signed = self.build(&elsewhere);
                sign(&signer, &mut signed);
                for name in [AUTHORIZATION_HEADER, CONTENT_HASH_HEADER] {
                    let value = signed.headers()[name].clone();
                    request.headers_mut().insert(name, value);
                }
            }
        }
        request
    }
}

/// What [`populated`] made, for the sample parameters of [`every_route`].
struct Populated {
    cluster: Cluster,
    /// The generation of committed object "o3".
    generation: u64,
    /// The generation of write "w", in progress.
    write: u64,
    /// Two repair tasks of "o3", leased: (task id, lease deadline, destination node and disk).
    leases: [(u64, u64, u64, u64); 2],
    /// The ids of the pending transitions of "o", "o2" and "o3".
    transitions: [u64; 3],
}

/// Meta with nodes 1..=5 enrolled and heartbeating, bucket "bkt" (rs(2,1), 4 KiB blocks) holding
/// objects "o", "o2" and "o3" (16 KiB) each with a pending regroup to rs(4,1) and a write in
/// progress "w"; two damaged-unit repairs of "o3" leased; an empty bucket "empty"; the uploads
/// record "u0".
async fn populated() -> Populated {
    let cluster = Cluster::empty().await;
    for id in 1..=5 {
        cluster.enrol(id).await;
        let (status, body) = cluster.heartbeat(id).await;
        assert_eq!(status, 200, "{body}");
    }
    for (bucket, body) in [("bkt", Some(layout("rs(2,1)"))), ("empty", None)] {
        let (status, body) =
            cluster.call(Method::PUT, &format!("/v1/buckets/{bucket}"), body).await;
        assert_eq!(status, 201, "{body}");
    }
    let begin = |key: &'static str, size: u64| {
        let path = format!("/v1/buckets/bkt/objects/{key}/begin");
        let cluster = &cluster;
        async move {
            let (status, begun) =
                cluster.call(Method::POST, &path, Some(json!({"size": size}))).await;
            assert_eq!(status, 200, "{begun}");
            begun["generation"].as_u64().unwrap()
        }
    };
    let mut transitions = [0; 3];
    let mut generation = 0;
    for (key, transition) in ["o", "o2", "o3"].into_iter().zip(&mut transitions) {
        generation = begin(key, 16 * KIB).await;
        let commit = json!({"generation": generation});
        let path = format!("/v1/buckets/bkt/objects/{key}/commit");
        let (status, body) = cluster.call(Method::POST, &path, Some(commit)).await;
        assert_eq!(status, 200, "{body}");
        let regroup =
            json!({"bucket": "bkt", "key": key, "layout": layout("rs(4,1)"), "mode": "regroup"});
        let (status, plan) = cluster.call(Method::POST, "/v1/transitions", Some(regroup)).await;
        assert_eq!(status, 200, "{plan}");
        *transition = plan["transition"]["id"].as_u64().unwrap();
    }
    // The repairs are of "o3" (the last made).
    let write = begin("w", KIB).await;
    let mut leases = [(0, 0, 0, 0); 2];
    for (unit, lease) in ["d0", "d1"].into_iter().zip(&mut leases) {
        let report = json!({"bucket": "bkt", "key": "o3", "generation": generation, "unit": unit,
                            "reason": "bad checksum"});
        let (status, body) = cluster.call(Method::POST, "/v1/repairs", Some(report)).await;
        assert_eq!((status, &body["queued"]), (200, &json!(true)), "{body}");
        let take = json!({"lease_ms": 600_000});
        let (status, taken) = cluster.call(Method::POST, "/v1/repairs/take", Some(take)).await;
        assert_eq!(status, 200, "{taken}");
        let (task, destination) = (&taken["task"], &taken["destination"]);
        *lease = (
            task["task_id"].as_u64().unwrap(),
            task["deadline_ms"].as_u64().unwrap(),
            destination["node_id"].as_u64().unwrap(),
            destination["disk"].as_u64().unwrap(),
        );
    }
    let (status, body) =
        cluster.call(Method::PUT, "/v1/records/uploads/u0", Some(json!({"n": 0}))).await;
    assert_eq!(status, 204, "{body}");
    Populated { cluster, generation, write, leases, transitions }
}

/// One request of every route of meta's router (and of no route, and of a route with a method
/// it does not have), with sample parameters naming what [`populated`] made, so that most
/// would change something if they ran. In order, most succeed on a populated meta.
fn every_route(made: &Populated) -> Vec<Route> {
    let (generation, write) = (made.generation, made.write);
    let [renewed, committed, aborted] = made.transitions;
    let [(completed, complete_by, node, disk), (failed, fail_by, _, _)] = made.leases;
    let mut beat = Route::new(Method::POST, "/v1/heartbeat", Some(heartbeat(1)));
    beat.as_node = Some(1);
    let regroup =
        json!({"bucket": "bkt", "key": "o3", "layout": layout("rs(3,1)"), "mode": "regroup"});
    let mut bad_units = Route::new(
        Method::POST,
        "/v1/nodes/1/bad-units",
        Some(json!({"disk": 0, "units": [{"unit_key": UNREFERENCED_UNIT, "problem": "corrupt",
                                          "detail": "segment 0"}]})),
    );
    bad_units.as_node = Some(1);
    let inventory = Route {
        method: Method::POST,
        path: "/v1/nodes/1/disks/0/inventory?units=0&hashes=11&seed=7&listing_ms=3".into(),
        body: vec![0; 64],
        as_node: Some(1),
    };
    vec![
        beat,
        bad_units,
        inventory,
        Route::new(Method::GET, "/v1/nodes", None),
        Route::new(Method::PUT, "/v1/nodes/9", None),
        Route::new(Method::DELETE, "/v1/nodes/2", None),
        Route::new(Method::GET, "/v1/status", None),
        Route::new(Method::GET, "/v1/buckets", None),
        Route::new(Method::PUT, "/v1/buckets/xyz", Some(layout("rs(2,1)"))),
        Route::new(Method::GET, "/v1/buckets/bkt", None),
        Route::new(Method::DELETE, "/v1/buckets/empty", None),
        Route::new(Method::PUT, "/v1/buckets/bkt/policy", Some(json!({"code": "rs(3,1)"}))),
        Route::new(Method::GET, "/v1/buckets/bkt/objects?prefix=o", None),
        Route::new(Method::GET, "/v1/buckets/bkt/objects/o3", None),
        Route::new(Method::POST, "/v1/buckets/bkt/objects/new/begin", Some(json!({"size": KIB}))),
        Route::new(
            Method::POST,
            "/v1/buckets/bkt/objects/w/commit",
            Some(json!({"generation": write})),
        ),
        Route::new(Method::GET, "/v1/repairs", None),
        Route::new(
            Method::POST,
            "/v1/repairs",
            Some(json!({"bucket": "bkt", "key": "o3", "generation": generation, "unit": "d2",
                        "reason": "bad checksum"})),
        ),
        Route::new(Method::POST, "/v1/repairs/take", Some(json!({"lease_ms": 60_000}))),
        Route::new(
            Method::POST,
            format!("/v1/repairs/{completed}/complete"),
            Some(json!({"deadline_ms": complete_by, "node_id": node, "disk": disk})),
        ),
        Route::new(
            Method::POST,
            format!("/v1/repairs/{failed}/fail"),
            Some(json!({"deadline_ms": fail_by, "error": "no source"})),
        ),
        Route::new(Method::GET, "/v1/transitions", None),
        Route::new(Method::GET, "/v1/transitions/bkt/o", None),
        // A lease of 1 ms: the expiry below then aborts this transition.
        Route::new(
            Method::POST,
            "/v1/transitions/renew",
            Some(json!({"bucket": "bkt", "key": "o", "id": renewed, "lease_ms": 1})),
        ),
        Route::new(
            Method::POST,
            "/v1/transitions/commit",
            Some(json!({"bucket": "bkt", "key": "o2", "id": committed})),
        ),
        Route::new(
            Method::POST,
            "/v1/transitions/abort",
            Some(json!({"bucket": "bkt", "key": "o3", "id": aborted})),
        ),
        Route::new(Method::POST, "/v1/transitions", Some(regroup)),
        Route::new(Method::POST, "/v1/transitions/expire", Some(json!({}))),
        Route::new(Method::GET, "/v1/records/uploads?prefix=u", None),
        Route::new(Method::PUT, "/v1/records/uploads/u1", Some(json!({"n": 1}))),
        Route::new(Method::GET, "/v1/records/uploads/u0", None),
        Route::new(Method::DELETE, "/v1/records/uploads/u0", None),
        Route::new(Method::GET, "/v1/references?node_id=1", None),
        Route::new(Method::POST, "/v1/writes/expire", Some(json!({"older_than_ms": 0}))),
        Route::new(Method::DELETE, "/v1/buckets/bkt/objects/o", None),
        Route::new(Method::GET, "/v1/no/such/route", None),
        Route::new(Method::PATCH, "/v1/buckets/bkt", None),
    ]
}

fn assert_unauthenticated(what: &str, (status, body): &(u16, Value)) {
    assert_eq!(*status, 401, "{what}: {body}");
    assert_eq!(body["error"], "unauthenticated", "{what}: {body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
}

#[tokio::test]
async fn every_route_refuses_unsigned_foreign_altered_stale_and_misdirected_requests() {
    let made = populated().await;
    let routes = every_route(&made);
    let cluster = made.cluster;
    let other = ClusterSecret::generate();
    let before = cluster.snapshot().await;
    for route in &routes {
        for forgery in FORGERIES {
            let answer = cluster.execute(cluster.forge(route, forgery, &other)).await;
            assert_unauthenticated(&format!("{route} {forgery:?}"), &answer);
        }
    }
    assert_eq!(cluster.snapshot().await, before, "a refused request changed something");
    // What the snapshot cannot show: enrolment. The refused PUT /v1/nodes/9 enrolled nobody,
    // the refused DELETE /v1/nodes/2 removed nobody.
    let (status, body) = cluster.heartbeat(9).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    let (status, body) = cluster.heartbeat(2).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = cluster.call(Method::GET, "/v1/buckets/xyz", None).await;
    assert_eq!((status, &body["error"]), (404, &json!("no_such_bucket")), "{body}");
    // Nor a transition's lease: the refused renewal to 1 ms left nothing to expire.
    let dry_run = Some(json!({"dry_run": true}));
    let (status, body) = cluster.call(Method::POST, "/v1/transitions/expire", dry_run).await;
    assert_eq!((status, &body["expired"]), (200, &json!([])), "{body}");

    // The forgeries are refused for what they are: requests signed by hand as they are, at
    // the current time or just within the skew ahead, pass (the replay test covers `sign`).
    let controls = [
        (Method::GET, "/v1/buckets", None, now_ms(), 200),
        (Method::PUT, "/v1/records/uploads/c1", Some(json!({"n": 2})), now_ms(), 204),
        (Method::GET, "/v1/buckets", None, now_ms() - 1, 200),
        // Within the skew but from before this meta started: refused, since its replay
        // memory began empty then (a request captured before a restart is not replayable).
        (Method::GET, "/v1/buckets", None, now_ms() - MAX_SKEW_MS + 5_000, 401),
        (Method::GET, "/v1/buckets", None, now_ms() + MAX_SKEW_MS - 5_000, 200),
    ];
    for (method, path, body, timestamp_ms, expected) in controls {
        let control = Route::new(method, path, body);
        let mut request = cluster.build(&control);
        sign_at(&control.signer(&cluster.secret), &mut request, &control.body, timestamp_ms);
        let (status, body) = cluster.execute(request).await;
        assert_eq!(status, expected, "{control} at {timestamp_ms}: {body}");
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_signed_request_is_accepted_once_and_its_replay_is_refused_changing_nothing() {
    let made = populated().await;
    let routes = every_route(&made);
    let cluster = made.cluster;
    // Changes the snapshot cannot show: enrolment (checked below), a transition's lease (the
    // expiry that follows the renewal shows it).
    // An inventory this soon after meta started is not compared (meta asks for another).
    let unseen = [
        "PUT /v1/nodes/9",
        "DELETE /v1/nodes/2",
        "POST /v1/transitions/renew",
        "POST /v1/nodes/1/disks/0/inventory?units=0&hashes=11&seed=7&listing_ms=3",
    ];
    for route in routes {
        let what = route.to_string();
        let mut request = cluster.build(&route);
        sign(&route.signer(&cluster.secret), &mut request);
        let replay = request.try_clone().expect("a buffered body");
        let before = cluster.snapshot().await;
        let (status, body) = cluster.execute(request).await;
        let after = cluster.snapshot().await;
        // The first use is accepted, and (on this populated meta) does what the route does:
        // so a replay that were accepted would be seen.
        match route.path.as_str() {
            "/v1/no/such/route" => assert_eq!((status, &body["error"]), (404, &json!("no_route"))),
            _ if route.method == Method::PATCH => assert_eq!(status, 405, "{what}"),
            _ => assert!((200..300).contains(&status), "{what}: {status} {body}"),
        }
        let changes = (200..300).contains(&status)
            && route.method != Method::GET
            && !unseen.contains(&what.as_str());
        assert_eq!(before != after, changes, "{what}: the first use changes state: {body}");
        assert_unauthenticated(&format!("{what} replayed"), &cluster.execute(replay).await);
        assert_eq!(cluster.snapshot().await, after, "{what}: the replay changed something");
    }
    // Enrolment: node 9 was enrolled and node 2 removed, once.
    let (status, body) = cluster.heartbeat(9).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = cluster.heartbeat(2).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    cluster.stop().await;
}

#[tokio::test]
async fn a_node_key_opens_its_own_heartbeat_only_and_only_while_enrolled() {
    let made = populated().await;
    let routes = every_route(&made);
    let mut cluster = made.cluster;
    let node3 = node_signer(&cluster.secret, 3);
    let (status, body) = cluster.call(Method::DELETE, "/v1/nodes/3", None).await;
    assert_eq!((status, &body["enrolled"]), (200, &json!(false)), "{body}");

    // Not enrolled: refused, and its record is not refreshed.
    let nodes = cluster.get("/v1/nodes").await;
    let (status, body) = cluster.heartbeat(3).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    assert_eq!(cluster.get("/v1/nodes").await["nodes"], nodes["nodes"]);
    let (status, body) = cluster.call(Method::DELETE, "/v1/nodes/3", None).await;
    assert_eq!((status, &body["error"]), (404, &json!("no_such_node")), "{body}");

    // Enrolled: accepted; enrolling again is idempotent.
    let (status, body) = cluster.call(Method::PUT, "/v1/nodes/3", None).await;
    assert_eq!((status, body), (200, json!({"id": 3, "enrolled": true, "new": true})));
    let (status, body) = cluster.call(Method::PUT, "/v1/nodes/3", None).await;
    assert_eq!((status, body), (200, json!({"id": 3, "enrolled": true, "new": false})));
    let (status, body) = cluster.heartbeat(3).await;
    assert_eq!((status, &body["id"], &body["state"]), (200, &json!(3), &json!("up")), "{body}");

    // Node 3 cannot heartbeat as another node (4 is enrolled, 8 is not).
    let before = cluster.snapshot().await;
    for id in [4, 8] {
        let (status, body) =
            cluster.call_as(&node3, Method::POST, "/v1/heartbeat", Some(heartbeat(id))).await;
        assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "node 3 as {id}: {body}");
    }
    // Nor call any other route, the client's.
    for mut route in routes {
        if route.path == "/v1/heartbeat" {
            continue;
        }
        route.as_node = Some(3);
        let (status, body) = cluster.send(&route).await;
        assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "node 3: {route}: {body}");
    }
    for path in ["/v1/nodes/3", "/v1/nodes/7"] {
        let (status, body) = cluster.call_as(&node3, Method::PUT, path, None).await;
        assert_eq!(
            (status, &body["error"]),
            (403, &json!("forbidden")),
            "node 3 PUT {path}: {body}"
        );
    }
    assert_eq!(cluster.snapshot().await, before, "a forbidden request changed something");
    let (status, body) = cluster.heartbeat(7).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    let (status, body) = cluster.call(Method::GET, "/v1/buckets/xyz", None).await;
    assert_eq!((status, &body["error"]), (404, &json!("no_such_bucket")), "{body}");

    // Removed: refused again, also after a restart.
    let (status, body) = cluster.call(Method::DELETE, "/v1/nodes/3", None).await;
    assert_eq!((status, body), (200, json!({"id": 3, "enrolled": false})));
    let (status, body) = cluster.heartbeat(3).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    cluster.restart().await;
    let (status, body) = cluster.heartbeat(3).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    for id in [4, 5] {
        let (status, body) = cluster.heartbeat(id).await;
        assert_eq!(status, 200, "node {id} stays enrolled across a restart: {body}");
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_rogue_node_of_another_cluster_is_refused_and_never_listed() {
    let cluster = Cluster::empty().await;
    let rogue_secret = ClusterSecret::generate();
    let rogue = |id: u32| node_signer(&rogue_secret, id);
    for id in [3, 8] {
        let (status, body) =
            cluster.call_as(&rogue(id), Method::POST, "/v1/heartbeat", Some(heartbeat(id))).await;
        assert_unauthenticated(&format!("rogue node {id}"), &(status, body));
    }
    // Enrolling id 3 here lets this cluster's node 3 in, not a rogue claiming to be it.
    cluster.enrol(3).await;
    let (status, body) =
        cluster.call_as(&rogue(3), Method::POST, "/v1/heartbeat", Some(heartbeat(3))).await;
    assert_unauthenticated("rogue node 3, enrolled id", &(status, body));
    // A rogue "client" cannot enrol it either.
    let (status, body) = cluster
        .call_as(&rogue_secret.signer_for(Audience::Meta), Method::PUT, "/v1/nodes/8", None)
        .await;
    assert_unauthenticated("rogue client", &(status, body));
    assert_eq!(cluster.node_ids().await, Vec::<u64>::new());
    let (status, body) = cluster.heartbeat(8).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");

    let (status, body) = cluster.heartbeat(3).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(cluster.node_ids().await, [3]);
    cluster.stop().await;
}

#[tokio::test]
async fn records_never_hold_a_plain_secret_nor_reach_meta_internal_namespace() {
    let cluster = Cluster::empty().await;
    cluster.enrol(1).await;
    let seal = cluster.secret.seal_key();

    for url in ["/v1/records/access_keys/AK1", "/v1/records/access_keys/AK1?if_absent=true"] {
        for secret_key in [json!("SECRET123"), json!(null), json!(7)] {
            let value = json!({"name": "k", "secret_key": secret_key, "created_ms": 1});
            let (status, body) = cluster.call(Method::PUT, url, Some(value)).await;
            assert_eq!((status, &body["error"]), (400, &json!("plain_secret")), "{url}: {body}");
        }
    }
    let (status, body) = cluster.call(Method::GET, "/v1/records/access_keys/AK1", None).await;
    assert_eq!((status, &body["error"]), (404, &json!("no_such_record")), "{body}");
    assert_eq!(cluster.get("/v1/records/access_keys").await["records"], json!([]));

    // A sealed secret is kept, and only sealed.
    let sealed = seal.seal("AK2", b"SECRET456");
    let value = json!({"name": "k2", "sealed_secret": sealed, "created_ms": 2});
    let (status, body) =
        cluster.call(Method::PUT, "/v1/records/access_keys/AK2", Some(value.clone())).await;
    assert_eq!(status, 204, "{body}");
    // Replacing it with a plain secret is refused and leaves it as it was.
    let plain = json!({"name": "k2", "secret_key": "SECRET456", "created_ms": 2});
    let (status, body) =
        cluster.call(Method::PUT, "/v1/records/access_keys/AK2", Some(plain)).await;
    assert_eq!((status, &body["error"]), (400, &json!("plain_secret")), "{body}");
    let list = cluster.get("/v1/records/access_keys").await;
    assert_eq!(list["records"], json!([{"name": "AK2", "value": value}]));
    assert!(!list.to_string().contains("SECRET456"), "{list}");
    assert_eq!(seal.open("AK2", &sealed).unwrap(), b"SECRET456");

    // Meta's own namespace is no gateway namespace, whichever way it is spelled.
    let requests = [
        (Method::GET, "/v1/records/enrolled_nodes", None),
        (Method::GET, "/v1/records/enrolled_nodes?prefix=", None),
        (Method::GET, "/v1/records/enrolled_nodes/1", None),
        (Method::GET, "/v1/records/enrolled_nodes/migrated", None),
        (Method::GET, "/v1/records/enrolled%5Fnodes/1", None),
        (Method::PUT, "/v1/records/enrolled_nodes/9", Some(json!({"enrolled_ms": 1}))),
        (Method::PUT, "/v1/records/enrolled%5Fnodes/9", Some(json!({"enrolled_ms": 1}))),
        (Method::PUT, "/v1/records/enrolled_nodes/migrated", Some(json!({"at_ms": 1}))),
        (Method::DELETE, "/v1/records/enrolled_nodes/1", None),
        (Method::DELETE, "/v1/records/enrolled_nodes/migrated", None),
    ];
    for (method, path, body) in requests {
        let what = format!("{method} {path}");
        let (status, body) = cluster.call(method, path, body).await;
        assert_eq!((status, &body["error"]), (404, &json!("no_such_namespace")), "{what}: {body}");
    }
    let (status, body) = cluster.heartbeat(9).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    let (status, body) = cluster.heartbeat(1).await;
    assert_eq!(status, 200, "node 1 is still enrolled: {body}");
    cluster.stop().await;
}

#[tokio::test]
async fn an_older_store_is_migrated_once_enrolling_its_nodes_and_sealing_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let old_record = json!({"name": "old", "secret_key": "SECRET123", "created_ms": 1});
    {
        // What an older meta (without enrolment nor sealing) left behind.
        let store = RedbStore::open(dir.path().join(DB_FILE)).unwrap();
        let beat = Heartbeat {
            node_id: 5,
            endpoint: "http://127.0.0.1:9005".into(),
            pid: 1,
            disks: vec![DiskReport {
                index: 0,
                dir: "/d0".into(),
                units: 0,
                bytes: 0,
                failed: None,
                ..Default::default()
            }],
            rack: None,
        };
        store.record_heartbeat(&beat, now_ms()).unwrap();
        store.put_record("access_keys", "OLDKEY", &old_record, false).unwrap();
    }
    let secret = ClusterSecret::generate();
    let mut cluster = Cluster::on(dir, secret).await;

    let (status, body) = cluster.heartbeat(5).await;
    assert_eq!(status, 200, "a node the old store knew is enrolled: {body}");
    let (status, body) = cluster.heartbeat(6).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");

    let (status, body) = cluster.call(Method::GET, "/v1/records/access_keys/OLDKEY", None).await;
    assert_eq!(status, 200, "{body}");
    let value = &body["value"];
    assert!(value.get("secret_key").is_none(), "{body}");
    assert!(!body.to_string().contains("SECRET123"), "{body}");
    assert_eq!((&value["name"], &value["created_ms"]), (&json!("old"), &json!(1)), "{body}");
    let sealed = value["sealed_secret"].as_str().unwrap().to_string();
    assert_eq!(cluster.secret.seal_key().open("OLDKEY", &sealed).unwrap(), b"SECRET123");
    assert!(cluster.secret.seal_key().open("other", &sealed).is_err(), "bound to its key id");
    assert!(ClusterSecret::generate().seal_key().open("OLDKEY", &sealed).is_err());
    let list = cluster.get("/v1/records/access_keys").await;
    assert!(!list.to_string().contains("SECRET123"), "{list}");

    // Removed, node 5 stays out across restarts: the migration ran once. The sealed secret is
    // not sealed again either.
    let (status, body) = cluster.call(Method::DELETE, "/v1/nodes/5", None).await;
    assert_eq!(status, 200, "{body}");
    cluster.restart().await;
    let (status, body) = cluster.heartbeat(5).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    assert_eq!(cluster.node_ids().await, [5], "its record stays; only enrolment is gone");
    let (_, body) = cluster.call(Method::GET, "/v1/records/access_keys/OLDKEY", None).await;
    assert_eq!(body["value"]["sealed_secret"], json!(sealed));
    cluster.restart().await;
    let (status, body) = cluster.heartbeat(5).await;
    assert_eq!((status, &body["error"]), (403, &json!("not_enrolled")), "{body}");
    cluster.stop().await;
}

/// Node `signer`'s inventory of disk `disk` of node `id`, holding `keys`.
async fn send_inventory(
    cluster: &Cluster,
    signer: &Signer,
    id: u64,
    disk: u64,
    keys: &[String],
) -> (u16, Value) {
    let mut digest = weft_store::Inventory::for_units(keys.len() as u64, 99);
    for key in keys {
        digest.insert(&weft_store::UnitKey::from_file_name(&format!("{key}.unit")).unwrap());
    }
    let path = format!(
        "/v1/nodes/{id}/disks/{disk}/inventory?units={}&hashes={}&seed=99&listing_ms=10",
        digest.units(),
        digest.hashes()
    );
    let response = cluster
        .client
        .post(format!("{}{path}", cluster.base))
        .body(digest.to_bytes())
        .send_signed(signer)
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null))
}

#[tokio::test]
async fn scrub_reports_queue_repairs_of_the_reporting_nodes_own_units_only() {
    let made = populated().await;
    let cluster = made.cluster;
    let object = cluster.get("/v1/buckets/bkt/objects/o").await;
    let units = object["units"].as_array().unwrap().clone();
    let unit = units[0].clone();
    let (owner, disk) = (unit["node_id"].as_u64().unwrap(), unit["disk"].as_u64().unwrap());
    let other = (1..=5).find(|&id| id != owner).unwrap();
    let report = |key: &Value| {
        json!({"disk": disk, "units": [{"unit_key": key, "problem": "corrupt",
                                         "detail": "segment 2"}]})
    };
    let path = |id: u64| format!("/v1/nodes/{id}/bad-units");

    // Another node cannot get the unit repaired by naming it: it is not on its disk.
    let before = cluster.get("/v1/repairs").await["queued"].clone();
    let other_signer = node_signer(&cluster.secret, other as u32);
    let (status, body) = cluster
        .call_as(&other_signer, Method::POST, &path(other), Some(report(&unit["unit_key"])))
        .await;
    assert_eq!((status, body), (200, json!({"queued": 0, "unreferenced": 1})));
    // Nor speak for the owner, and the client key does not report scrubs.
    let (status, body) = cluster
        .call_as(&other_signer, Method::POST, &path(owner), Some(report(&unit["unit_key"])))
        .await;
    assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "{body}");
    let (status, body) =
        cluster.call(Method::POST, &path(owner), Some(report(&unit["unit_key"]))).await;
    assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "{body}");
    assert_eq!(cluster.get("/v1/repairs").await["queued"], before);

    // Bad reports are refused whole.
    let owner_signer = node_signer(&cluster.secret, owner as u32);
    let (status, body) = cluster
        .call_as(&owner_signer, Method::POST, &path(owner), Some(report(&json!("d0"))))
        .await;
    assert_eq!((status, &body["error"]), (400, &json!("bad_request")), "{body}");
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"unit_key": unit["unit_key"], "problem": "corrupt", "detail": ""}))
        .collect();
    let (status, body) = cluster
        .call_as(
            &owner_signer,
            Method::POST,
            &path(owner),
            Some(json!({"disk": disk, "units": many})),
        )
        .await;
    assert_eq!((status, &body["error"]), (400, &json!("bad_request")), "{body}");

    // The owner's report queues a damaged repair of exactly that unit.
    let (status, body) = cluster
        .call_as(&owner_signer, Method::POST, &path(owner), Some(report(&unit["unit_key"])))
        .await;
    assert_eq!((status, body), (200, json!({"queued": 1, "unreferenced": 0})));
    let repairs = cluster.get("/v1/repairs").await;
    let task = repairs["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "o" && t["unit"] == unit["unit"])
        .unwrap_or_else(|| panic!("no task for {unit}: {repairs}"))
        .clone();
    assert_eq!(task["kind"], "damaged", "{task}");
    assert!(task["reason"].as_str().unwrap().contains("corrupt"), "{task}");
    // Both accepted reports count (the other node's named a unit it holds but nobody uses).
    assert_eq!(cluster.get("/v1/status").await["bad_units_reported"], 2);

    // An inventory: too soon after meta started, meta compares nothing and asks again.
    let mut on_disk: Vec<String> = Vec::new();
    // (object key, unit name) of each unit on that disk, as repair tasks name them.
    let mut named: Vec<(String, String)> = Vec::new();
    for key in ["o", "o2", "o3"] {
        let object = cluster.get(&format!("/v1/buckets/bkt/objects/{key}")).await;
        for unit in object["units"].as_array().unwrap() {
            if unit["node_id"] == owner && unit["disk"] == disk {
                on_disk.push(unit["unit_key"].as_str().unwrap().to_owned());
                named.push((key.to_owned(), unit["unit"].as_str().unwrap().to_owned()));
            }
        }
    }
    let (status, early) = send_inventory(&cluster, &owner_signer, owner, disk, &[]).await;
    assert_eq!(status, 200, "{early}");
    assert!(early["retry_after_ms"].as_u64().is_some_and(|ms| ms > 0), "{early}");
    assert_eq!(early["referenced"], 0, "{early}");
    tokio::time::sleep(std::time::Duration::from_millis(early["retry_after_ms"].as_u64().unwrap()))
        .await;

    // A full digest: nothing missing. Another node's digest of that disk is refused.
    let (status, full) = send_inventory(&cluster, &owner_signer, owner, disk, &on_disk).await;
    assert_eq!(status, 200, "{full}");
    assert_eq!(full["retry_after_ms"], Value::Null, "{full}");
    assert_eq!(
        (full["referenced"].as_u64(), full["missing"].as_u64()),
        (Some(on_disk.len() as u64), Some(0))
    );
    let (status, body) = send_inventory(&cluster, &other_signer, owner, disk, &[]).await;
    assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "{body}");

    // An empty disk: every unit meta places there is missing, counted and queued (those the
    // fixture's reports or the owner's scrub report queued already stay as they are).
    let task_of = |listed: &Value, (key, unit): &(String, String)| -> Option<Value> {
        let tasks = listed["tasks"].as_array().unwrap();
        tasks.iter().find(|t| t["key"] == key.as_str() && t["unit"] == unit.as_str()).cloned()
    };
    let listed = cluster.get("/v1/repairs").await;
    let already = named.iter().filter(|u| task_of(&listed, u).is_some()).count() as u64;
    let (status, empty) = send_inventory(&cluster, &owner_signer, owner, disk, &[]).await;
    assert_eq!(status, 200, "{empty}");
    assert_eq!(empty["missing"], on_disk.len() as u64, "{empty}");
    assert_eq!(empty["queued"], on_disk.len() as u64 - already, "{empty}");
    let status = cluster.get("/v1/status").await;
    assert_eq!(status["missing_units"], on_disk.len() as u64, "{status}");
    let listed = cluster.get("/v1/repairs").await;
    for unit in &named {
        let task =
            task_of(&listed, unit).unwrap_or_else(|| panic!("{unit:?} not queued: {listed}"));
        assert_eq!(task["kind"], "damaged", "{task}");
    }
    cluster.stop().await;
}
