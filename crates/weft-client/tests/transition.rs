//! Transitions on real meta and node servers: regroup writes parity only, restripe rewrites
//! everything, reads stay byte-identical (also degraded), a pending transition never
//! disturbs the object.

use std::io::Cursor;

use crate::common::{pattern, policy, TestCluster};
use serde_json::json;
use weft_client::PutOptions;
use weft_codes::CodeSpec;
use weft_layout::{StripedLayout, TransitionMode};

const CELL: u64 = 4096;
const BLOCK: u64 = 4 * CELL;

fn layout(code: &str, width: usize) -> StripedLayout {
    StripedLayout {
        code: CodeSpec::parse(code).unwrap(),
        stripe_width: width,
        cell_bytes: CELL,
        block_bytes: BLOCK,
    }
}

async fn put(cluster: &TestCluster, key: &str, data: &[u8]) {
    let reader = Cursor::new(data.to_vec());
    cluster
        .client
        .put_reader("bkt", key, data.len() as u64, reader, &PutOptions::default())
        .await
        .unwrap();
}

async fn read(cluster: &TestCluster, key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    cluster.client.get("bkt", key, None, &mut out, None).await.unwrap();
    out
}

fn unit_files(cluster: &TestCluster, nodes: u32) -> usize {
    (1..=nodes).map(|id| cluster.unit_files(id).len()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regroup_writes_parity_only_and_saves_the_predicted_io() {
    let mut cluster = TestCluster::start(24).await;
    cluster.create_bucket("bkt", policy("rs(6,3)", 6, CELL, BLOCK)).await;
    let data = pattern((64 * BLOCK + 5 * CELL + 7) as usize, 1);
    put(&cluster, "obj", &data).await;
    put(&cluster, "copy", &data).await;

    // Dry run: predictions, nothing written.
    let files = unit_files(&cluster, 24);
    let dry = cluster
        .client
        .transition("bkt", "obj", layout("rs(12,3)", 6), Some(TransitionMode::Regroup), true)
        .await
        .unwrap();
    assert_eq!(unit_files(&cluster, 24), files, "a dry run wrote units");
    assert!(dry.predicted["restripe"].is_object() && dry.predicted["regroup"].is_object());

    let regroup = cluster
        .client
        .transition("bkt", "obj", layout("rs(12,3)", 6), Some(TransitionMode::Regroup), false)
        .await
        .unwrap();
    let restripe = cluster
        .client
        .transition("bkt", "copy", layout("rs(12,3)", 6), Some(TransitionMode::Restripe), false)
        .await
        .unwrap();
    let (r, s) = (regroup.io, restripe.io);
    assert_eq!(r.data_bytes_written, 0, "{r:?}");
    assert_eq!(r.relocated_bytes, 0, "24 nodes hold rs(6,3) groups disjoint: {r:?}");
    assert_eq!(r.bytes_read, data.len() as u64);
    assert_eq!(r.parity_bytes_written, s.parity_bytes_written, "same new parity either way");
    // Okapi: (D + P) / (2D + P), here measured on the same object in the same run.
    let (d, p) = (data.len() as f64, r.parity_bytes_written as f64);
    let ratio = r.total_bytes() as f64 / s.total_bytes() as f64;
    let theory = (d + p) / (2.0 * d + p);
    assert!((ratio / theory - 1.0).abs() < 0.02, "ratio {ratio}, theory {theory}");
    // Measured equals predicted.
    let predicted: weft_layout::TransitionIo =
        serde_json::from_value(regroup.predicted["regroup"].clone()).unwrap();
    assert_eq!(predicted.parity_bytes_written, r.parity_bytes_written);
    assert_eq!(predicted.relocated_bytes, r.relocated_bytes);

    for key in ["obj", "copy"] {
        let info = cluster.client.meta.get_object("bkt", key).await.unwrap();
        assert_eq!(info.layout, layout("rs(12,3)", 6), "{key}");
        assert_eq!(read(&cluster, key).await, data, "{key}");
    }
    // Old parity is gone: only the new object's units are on disk.
    let obj = cluster.client.meta.get_object("bkt", "obj").await.unwrap();
    let copy = cluster.client.meta.get_object("bkt", "copy").await.unwrap();
    assert_eq!(unit_files(&cluster, 24), obj.units.len() + copy.units.len());

    // Degraded reads under the new groups: three nodes holding units of "obj" down.
    let mut victims: Vec<u32> = obj.units.values().map(|u| u.node_id).collect();
    victims.sort_unstable();
    victims.dedup();
    for id in victims.into_iter().take(3) {
        cluster.stop_node(id).await;
    }
    assert_eq!(read(&cluster, "obj").await, data, "degraded after regroup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regroup_there_and_back_and_across_code_families() {
    let cluster = TestCluster::start(20).await;
    cluster.create_bucket("bkt", policy("rs(6,3)", 3, CELL, BLOCK)).await;
    let data = pattern((37 * BLOCK + 11) as usize, 2);
    put(&cluster, "o", &data).await;
    for code in ["rs(12,3)", "rs(6,3)", "hh-xor+(6,3)", "clay(6,3,8)", "lrc(6,2,2)", "rs(4,2)"] {
        let report = cluster
            .client
            .transition("bkt", "o", layout(code, 3), None, false)
            .await
            .unwrap_or_else(|e| panic!("to {code}: {e}"));
        assert_eq!(report.mode, TransitionMode::Regroup);
        assert_eq!(report.io.data_bytes_written, 0, "{code}");
        assert_eq!(read(&cluster, "o").await, data, "after {code}");
        // End-to-end checksums survive: data units keep their writer's digests, the new
        // parity gets the executor's, and every unit's bytes match (a whole-unit read checks).
        let info = cluster.client.meta.get_object("bkt", "o").await.unwrap();
        for unit in info.units.values() {
            assert!(unit.digest.is_some(), "after {code}: {:?} has no digest", unit.unit);
            cluster
                .client
                .nodes
                .get_range(unit, 0, unit.len)
                .await
                .unwrap_or_else(|e| panic!("after {code}: {:?}: {e}", unit.unit));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_becomes_erasure_coding_and_back() {
    let cluster = TestCluster::start(10).await;
    cluster.create_bucket("bkt", policy("rep(3)", 2, CELL, BLOCK)).await;
    let data = pattern((9 * BLOCK + 100) as usize, 3);
    put(&cluster, "r", &data).await;
    let to_ec =
        cluster.client.transition("bkt", "r", layout("rs(4,2)", 2), None, false).await.unwrap();
    assert_eq!(to_ec.io.data_bytes_written, 0);
    assert_eq!(read(&cluster, "r").await, data);
    let back =
        cluster.client.transition("bkt", "r", layout("rep(3)", 2), None, false).await.unwrap();
    assert_eq!(back.io.data_bytes_written, 0);
    assert_eq!(read(&cluster, "r").await, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_transition_leaves_the_object_alone_and_a_new_one_replaces_it() {
    let cluster = TestCluster::start(20).await;
    cluster.create_bucket("bkt", policy("rs(6,3)", 2, CELL, BLOCK)).await;
    // Three whole groups: the object keeps the policy's striping (not fitted), so a raw
    // regroup plan to the policy's striping applies to it.
    let data = pattern((18 * BLOCK) as usize, 4);
    put(&cluster, "p", &data).await;
    // A transition planned and never finished (as if its executor died).
    let body =
        json!({"bucket": "bkt", "key": "p", "layout": layout("rs(12,3)", 2), "mode": "regroup"});
    let plan = cluster.client.meta.post_json("/v1/transitions", body).await.unwrap();
    assert!(plan["transition"]["id"].is_u64(), "{plan}");
    assert_eq!(read(&cluster, "p").await, data);
    let before = cluster.client.meta.get_object("bkt", "p").await.unwrap();
    assert_eq!(before.layout, layout("rs(6,3)", 2));
    // A new transition replaces the pending one and completes.
    let done =
        cluster.client.transition("bkt", "p", layout("rs(12,3)", 2), None, false).await.unwrap();
    assert_eq!(done.io.data_bytes_written, 0);
    assert_eq!(read(&cluster, "p").await, data);
    let pending = cluster.client.meta.get_json("/v1/transitions").await.unwrap();
    assert_eq!(pending["transitions"].as_array().map(Vec::len), Some(0), "{pending}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_began_before_a_commit_finishes_after_it_degraded() {
    let mut cluster = TestCluster::start(20).await;
    cluster.create_bucket("bkt", policy("rs(4,2)", 2, CELL, BLOCK)).await;
    let data = pattern((24 * BLOCK) as usize, 5);
    put(&cluster, "s", &data).await;
    // The reader fetched meta's record before the transition…
    let stale = cluster.client.meta.get_object("bkt", "s").await.unwrap();
    cluster.client.transition("bkt", "s", layout("rs(8,2)", 2), None, false).await.unwrap();
    // …and reads after it, with two data blocks' nodes down: the old parity it would
    // decode from is deleted, so it must go on under the new record.
    let fresh = cluster.client.meta.get_object("bkt", "s").await.unwrap();
    let mut down: Vec<u32> =
        (0..2).map(|x| fresh.units[&weft_layout::UnitId::Data(x)].node_id).collect();
    down.dedup();
    for id in down {
        cluster.stop_node(id).await;
    }
    let mut out = Vec::new();
    cluster.client.get_object_range(stale, None, &mut out, None).await.unwrap();
    assert!(out == data, "wrong bytes after the record changed under the read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_loses_its_transition_gives_up_and_leaves_the_object_whole() {
    let cluster = TestCluster::start(20).await;
    cluster.create_bucket("bkt", policy("rs(6,3)", 2, CELL, BLOCK)).await;
    let data = pattern((2048 * BLOCK + 5) as usize, 9);
    put(&cluster, "big", &data).await;
    let before = cluster.client.meta.get_object("bkt", "big").await.unwrap();
    // A short lease, renewed every 50 ms while it works.
    let client = cluster.client.clone();
    let running = tokio::spawn(async move {
        client.transition_leased("bkt", "big", layout("rs(12,3)", 2), None, false, 150).await
    });
    let first = loop {
        let list = cluster.client.meta.get_json("/v1/transitions").await.unwrap();
        if let Some(t) = list["transitions"].as_array().and_then(|l| l.first()) {
            break t.clone();
        }
        assert!(!running.is_finished(), "the transition finished before it could be taken");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    // Someone else begins a transition of the object: the executor's next renewal (or its
    // commit) is refused, and it gives up.
    let body =
        json!({"bucket": "bkt", "key": "big", "layout": layout("rs(10,4)", 2), "mode": "regroup"});
    let second = cluster.client.meta.post_json("/v1/transitions", body).await.unwrap();
    assert_eq!(second["replaced"]["transition"]["id"], first["id"], "{second}");
    let error = running.await.unwrap().expect_err("a transition that lost its lease fails");
    let message = error.to_string();
    assert!(message.contains("replaced it"), "{message}");
    eprintln!("the executor gave up: {message}");
    // The object is as it was, readable; the newer transition is the pending one.
    let now = cluster.client.meta.get_object("bkt", "big").await.unwrap();
    assert_eq!((now.layout, now.generation), (before.layout, before.generation));
    assert_eq!(read(&cluster, "big").await, data);
    let pending = cluster.client.meta.get_json("/v1/transitions").await.unwrap();
    assert_eq!(pending["transitions"][0]["id"], second["transition"]["id"], "{pending}");
    // It expires once its lease passes, and a new run completes.
    let body = json!({"bucket": "bkt", "key": "big", "id": second["transition"]["id"],
                      "lease_ms": 1});
    cluster.client.meta.post_json("/v1/transitions/renew", body).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let report = weft_client::gc::sweep(
        &cluster.client,
        &weft_client::gc::GcOptions { grace_ms: 3_600_000, ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(report.expired_transitions.len(), 1, "{report:?}");
    assert_eq!(report.expired_transitions[0].id, second["transition"]["id"].as_u64().unwrap());
    let done =
        cluster.client.transition("bkt", "big", layout("rs(12,3)", 2), None, false).await.unwrap();
    assert_eq!(done.io.data_bytes_written, 0);
    assert_eq!(read(&cluster, "big").await, data);
}
