//! The unit sweeper on real meta and node servers: an orphan unit goes once it is older than
//! the grace (and not before, nor in a dry run); committed objects lose nothing however often
//! it runs; an abandoned write is expired and its units swept; the leftovers of a node that
//! was down during a delete go once it is back.

use std::{collections::BTreeSet, io::Cursor, path::PathBuf, time::Duration};
use weft_auth::{sign_reqwest::SendSigned, Audience};

use crate::common::{pattern, policy, TestCluster};
use bytes::Bytes;
use weft_client::{
    gc::{sweep, GcOptions, GcReport},
    PutOptions,
};
use weft_node::NodeConfig;

const CELL: u64 = 4096;
const BLOCK: u64 = 4 * CELL;
const HOUR_MS: u64 = 3_600_000;

async fn put(cluster: &TestCluster, key: &str, data: &[u8]) {
    let reader = Cursor::new(data.to_vec());
    cluster
        .client
        .put_reader("bkt", key, data.len() as u64, reader, &PutOptions::default())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

async fn read(cluster: &TestCluster, key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    cluster.client.get("bkt", key, None, &mut out, None).await.unwrap();
    out
}

/// A sweep with `grace_ms`, expiring writes older than `expire`, asserted error-free.
async fn run(cluster: &TestCluster, grace_ms: u64, expire: Option<u64>, dry_run: bool) -> GcReport {
    let options = GcOptions { grace_ms, expire_writes_after_ms: expire, dry_run };
    let report = sweep(&cluster.client, &options).await.unwrap();
    assert_eq!(report.errors, Vec::<String>::new(), "{report:?}");
    report
}

/// Every unit file of every node.
fn all_files(cluster: &TestCluster, nodes: u32) -> BTreeSet<PathBuf> {
    (1..=nodes).flat_map(|id| cluster.unit_files(id)).collect()
}

/// A unit name no meta record can produce (object ids are generations, far below this).
fn orphan_key(seed: u32) -> String {
    format!("{:032x}-d{seed:08x}-{:016x}", u128::MAX - 7, 0)
}

/// PUTs `bytes` as unit `key` on disk 0 of node `id`, straight to the node.
async fn put_orphan(cluster: &TestCluster, id: u32, key: &str, bytes: &[u8]) {
    let node = cluster.nodes[id as usize - 1].as_ref().unwrap();
    let url = format!("{}/v1/disks/0/units/{key}", node.endpoint());
    let signer = cluster.secret.signer_for(Audience::Node(id));
    let response =
        reqwest::Client::new().put(url).body(bytes.to_vec()).send_signed(&signer).await.unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_goes_after_the_grace_and_committed_objects_never_lose_a_unit() {
    let cluster = TestCluster::start(6).await;
    cluster.create_bucket("bkt", policy("rs(3,2)", 3, CELL, BLOCK)).await;
    let objects: Vec<(String, Vec<u8>)> = [0, 1, CELL + 5, 7 * BLOCK + 3, 20 * BLOCK]
        .iter()
        .enumerate()
        .map(|(i, &len)| (format!("o{i}"), pattern(len as usize, i as u64)))
        .collect();
    for (key, data) in &objects {
        put(&cluster, key, data).await;
    }
    // An overwrite: the replaced generation's units are deleted by the put itself.
    put(&cluster, "o4", &objects[4].1).await;
    let committed = all_files(&cluster, 6);

    let orphan = orphan_key(1);
    put_orphan(&cluster, 2, &orphan, &[7u8; 5000]).await;
    let with_orphan = all_files(&cluster, 6);
    assert_eq!(with_orphan.len(), committed.len() + 1);

    // Too young for a large grace: seen, unreferenced, kept.
    let kept = run(&cluster, HOUR_MS, None, false).await;
    assert_eq!((kept.nodes_scanned, kept.disks_scanned), (6, 6), "{kept:?}");
    assert_eq!(kept.units_seen, committed.len() as u64 + 1, "{kept:?}");
    assert_eq!(kept.referenced, committed.len() as u64, "{kept:?}");
    assert_eq!((kept.unreferenced, kept.skipped_young, kept.deleted), (1, 1, 0), "{kept:?}");
    assert_eq!(all_files(&cluster, 6), with_orphan);

    // A dry run with no grace says it would go, and deletes nothing.
    let dry = run(&cluster, 0, None, true).await;
    assert!(dry.dry_run);
    assert_eq!((dry.unreferenced, dry.skipped_young, dry.deleted), (1, 0, 1), "{dry:?}");
    assert!(dry.bytes > 5000, "file bytes, header included: {dry:?}");
    assert_eq!(all_files(&cluster, 6), with_orphan);

    // Grace 0: the orphan goes, nothing else does.
    let swept = run(&cluster, 0, None, false).await;
    assert_eq!((swept.unreferenced, swept.deleted, swept.bytes), (1, 1, dry.bytes), "{swept:?}");
    assert_eq!(all_files(&cluster, 6), committed);

    // Any number of sweeps more with grace 0 change nothing, and every object reads back
    // byte-identical.
    for _ in 0..3 {
        let again = run(&cluster, 0, Some(0), false).await;
        assert_eq!((again.unreferenced, again.deleted), (0, 0), "{again:?}");
        assert_eq!(again.referenced, committed.len() as u64);
        assert!(again.expired_writes.is_empty());
    }
    assert_eq!(all_files(&cluster, 6), committed);
    for (key, data) in &objects {
        assert!(read(&cluster, key).await == *data, "{key} reads back byte-identical");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_write_is_expired_and_its_units_swept() {
    let cluster = TestCluster::start(4).await;
    cluster.create_bucket("bkt", policy("rs(2,1)", 2, CELL, BLOCK)).await;
    put(&cluster, "kept", &pattern(3 * BLOCK as usize, 1)).await;
    let committed = all_files(&cluster, 4);

    // A client begins a write, stores one unit of it and dies.
    let size = 2 * BLOCK;
    let begun = cluster.client.meta.begin("bkt", "abandoned", size, None, &[]).await.unwrap();
    let unit = begun.units.values().next().unwrap().clone();
    cluster.client.nodes.put(&unit, Bytes::from(vec![1u8; unit.len as usize])).await.unwrap();
    assert_eq!(all_files(&cluster, 4).len(), committed.len() + 1);

    // While its write is in progress the unit is referenced, whatever the grace.
    let report = run(&cluster, 0, Some(HOUR_MS), false).await;
    assert!(report.expired_writes.is_empty(), "{report:?}");
    assert_eq!((report.unreferenced, report.deleted), (0, 0), "{report:?}");
    // A dry run names the write it would expire and keeps it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let dry = run(&cluster, 0, Some(10), true).await;
    assert_eq!(dry.expired_writes.len(), 1, "{dry:?}");
    assert_eq!((dry.unreferenced, dry.deleted), (0, 0), "still referenced: {dry:?}");

    // Expired (begun more than 10 ms ago), then swept in the same run.
    let report = run(&cluster, 0, Some(10), false).await;
    let expired = &report.expired_writes;
    assert_eq!(expired.len(), 1, "{report:?}");
    assert_eq!((expired[0].key.as_str(), expired[0].generation), ("abandoned", begun.generation));
    assert_eq!(expired[0].units, begun.units.len() as u64);
    assert_eq!((report.unreferenced, report.deleted), (1, 1), "{report:?}");
    assert_eq!(all_files(&cluster, 4), committed);
    // The dead client's commit is refused now.
    let refused =
        cluster.client.meta.commit("bkt", "abandoned", begun.generation, &Default::default()).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(read(&cluster, "kept").await == pattern(3 * BLOCK as usize, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_of_a_node_down_during_a_delete_go_once_it_is_back() {
    let mut cluster = TestCluster::start(5).await;
    cluster.create_bucket("bkt", policy("rs(2,2)", 2, CELL, BLOCK)).await;
    put(&cluster, "gone", &pattern(8 * BLOCK as usize, 2)).await;
    put(&cluster, "stays", &pattern(5 * BLOCK as usize + 9, 3)).await;
    let stays = cluster.client.meta.get_object("bkt", "stays").await.unwrap();
    let gone = cluster.client.meta.get_object("bkt", "gone").await.unwrap();
    let victim = gone.units.values().next().unwrap().node_id;
    let leftovers = gone.units.values().filter(|u| u.node_id == victim).count();
    assert!(leftovers > 0);

    cluster.stop_node(victim).await;
    let (_, left) = cluster.client.delete_object("bkt", "gone").await.unwrap();
    assert_eq!(left, leftovers, "the stopped node's units could not be deleted");
    // While it is down the sweep leaves it alone.
    let report =
        sweep(&cluster.client, &GcOptions { grace_ms: 0, ..GcOptions::default() }).await.unwrap();
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(cluster.unit_files(victim).len(), leftovers + units_on(&stays, victim));

    // Back (on a new port): meta must know its new endpoint before the sweep trusts it.
    let mut config = NodeConfig::new(
        victim,
        "127.0.0.1:0".parse().unwrap(),
        vec![cluster.disk_dir(victim)],
        cluster.secret.node_key(victim),
    );
    config.meta_url = Some(cluster.meta_url.clone());
    config.heartbeat_interval_ms = 200;
    config.thresholds = crate::common::host_fill_ignored();
    let node = weft_node::bind(config).await.unwrap();
    let endpoint = node.endpoint();
    cluster.nodes[victim as usize - 1] = Some(node);
    cluster
        .wait_for(Duration::from_secs(10), |status| {
            status["nodes"].as_array().unwrap().iter().any(|n| {
                n["id"] == victim && n["state"] == "up" && n["endpoint"] == endpoint.as_str()
            })
        })
        .await;

    let report = run(&cluster, 0, None, false).await;
    assert_eq!((report.unreferenced, report.deleted), (leftovers as u64, leftovers as u64));
    assert_eq!(cluster.unit_files(victim).len(), units_on(&stays, victim));
    assert_eq!(report.nodes_down, 0);
    assert!(read(&cluster, "stays").await == pattern(5 * BLOCK as usize + 9, 3));
    let again = run(&cluster, 0, None, false).await;
    assert_eq!((again.unreferenced, again.deleted), (0, 0), "{again:?}");
}

/// Units of `object` on node `id`.
fn units_on(object: &weft_client::ObjectInfo, id: u32) -> usize {
    object.units.values().filter(|u| u.node_id == id).count()
}
