//! Automatic repair end to end on real meta and node servers: nodes stop, meta queues their
//! units, the executor rebuilds them elsewhere, and then more nodes can fail.

use std::{io::Cursor, time::Duration};

use crate::common::{pattern, policy, TestCluster};
use weft_client::{repair, PutOptions};

const CELL: u64 = 4096;
const BLOCK: u64 = 4 * CELL;

async fn read_all(cluster: &TestCluster, bucket: &str, objects: &[Vec<u8>], when: &str) {
    for (i, data) in objects.iter().enumerate() {
        let mut out = Vec::new();
        cluster
            .client
            .get(bucket, &format!("o{i}"), None, &mut out, None)
            .await
            .unwrap_or_else(|e| panic!("{when}: object {i}: {e}"));
        assert!(out == *data, "{when}: object {i} differs");
    }
}

async fn run_repairs(cluster: &TestCluster, code: &str) -> serde_json::Value {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let config =
        repair::ExecutorConfig { idle_ms: 100, rate_bytes_per_sec: None, ..Default::default() };
    let executor = tokio::spawn(repair::run_executor(cluster.client.clone(), config, stopped));
    let status = cluster
        .wait_for(Duration::from_secs(60), |s| {
            s["under_protected_units"] == 0 && s["repair_queue"] == 0
        })
        .await;
    stop.send(true).unwrap();
    let stats = executor.await.unwrap();
    assert!(
        stats.repaired.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "{code}: nothing repaired"
    );
    status
}

async fn kill_repair_kill(code: &str, width: usize, nodes: usize, lose: u32) {
    let mut cluster = TestCluster::start(nodes).await;
    cluster.create_bucket("bkt", policy(code, width, CELL, BLOCK)).await;
    let mut objects = Vec::new();
    for (i, size) in [CELL - 1, 5 * BLOCK + 3, 17 * BLOCK + CELL].into_iter().enumerate() {
        let data = pattern(size as usize, i as u64 + 11);
        let reader = Cursor::new(data.clone());
        cluster
            .client
            .put_reader("bkt", &format!("o{i}"), size, reader, &PutOptions::default())
            .await
            .unwrap();
        objects.push(data);
    }
    for id in 1..=lose {
        cluster.stop_node(id).await;
    }
    read_all(&cluster, "bkt", &objects, "first failures").await;
    // Meta notices (down timeout + a scan) and queues every unit of the stopped nodes. All of
    // them judged down first: their heartbeats stop one after another, and a repair run that
    // starts while only the first is down can finish (nothing under-protected, nothing
    // queued) before the next one is, leaving its units where the second failures find them.
    cluster
        .wait_for(Duration::from_secs(15), |s| {
            s["nodes_down"].as_u64() >= Some(u64::from(lose))
                && s["under_protected_units"].as_u64() > Some(0)
                && s["repair_queue"].as_u64() > Some(0)
        })
        .await;
    run_repairs(&cluster, code).await;
    // Full redundancy again: as many more nodes may fail.
    for id in lose + 1..=2 * lose {
        cluster.stop_node(id).await;
    }
    read_all(&cluster, "bkt", &objects, "second failures").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rs_repairs_three_lost_nodes_then_survives_three_more() {
    kill_repair_kill("rs(6,3)", 2, 14, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clay_and_hitchhiker_repair_with_their_plans() {
    kill_repair_kill("clay(4,2,5)", 2, 10, 2).await;
    kill_repair_kill("hh-xor+(4,2)", 3, 10, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_unit_found_by_a_read_is_rebuilt() {
    let cluster = TestCluster::start(9).await;
    cluster.create_bucket("bkt", policy("rs(4,2)", 2, CELL, BLOCK)).await;
    let data = pattern((6 * BLOCK) as usize, 5);
    cluster
        .client
        .put_reader(
            "bkt",
            "o0",
            data.len() as u64,
            Cursor::new(data.clone()),
            &PutOptions::default(),
        )
        .await
        .unwrap();
    // A data unit: plain reads touch only those.
    let victim = (1..=9)
        .flat_map(|id| cluster.unit_files(id))
        .find(|p| p.file_name().unwrap().to_string_lossy().contains("-d"))
        .expect("some data unit");
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 1;
    std::fs::write(&victim, &bytes).unwrap();
    read_all(&cluster, "bkt", std::slice::from_ref(&data), "corrupt").await;
    // The read reported it: a task is queued without any node being down.
    cluster.wait_for(Duration::from_secs(10), |s| s["repair_queue"].as_u64() > Some(0)).await;
    run_repairs(&cluster, "rs(4,2)").await;
    // The corrupt file is gone (deleted after the relocation), the object reads clean.
    assert!(!victim.exists(), "the corrupt copy should be deleted");
    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "o0", None, &mut out, None).await.unwrap();
    assert_eq!(out, data);
    assert!(stats.degraded_units.is_empty(), "{:?}", stats.degraded_units);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_deep_in_a_long_range_is_classified_and_queued() {
    // Blocks of 2 MiB: the node has started streaming before it meets the bad segment, so
    // the body breaks off; the client must still learn that the unit is corrupt.
    let cluster = TestCluster::start(7).await;
    cluster.create_bucket("bkt", policy("rs(4,2)", 2, 256 << 10, 2 << 20)).await;
    let data = pattern(8 << 20, 9);
    let options = PutOptions::default();
    let reader = Cursor::new(data.clone());
    cluster.client.put_reader("bkt", "big", data.len() as u64, reader, &options).await.unwrap();
    let victim = (1..=7)
        .flat_map(|id| cluster.unit_files(id))
        .find(|p| p.file_name().unwrap().to_string_lossy().contains("-d"))
        .expect("some data unit");
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() - (300 << 10);
    bytes[at] ^= 0x10;
    std::fs::write(&victim, &bytes).unwrap();
    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "big", None, &mut out, None).await.unwrap();
    assert!(out == data, "wrong bytes");
    assert_eq!(stats.degraded_units.len(), 1, "{:?}", stats.degraded_units);
    assert!(stats.degraded_units[0].1.contains("corrupt"), "{:?}", stats.degraded_units);
    cluster.wait_for(Duration::from_secs(10), |s| s["repair_queue"].as_u64() > Some(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_unit_is_rebuilt_in_place_when_no_other_node_fits() {
    // rs(4,2) on exactly 6 nodes: every other node holds a unit of the group.
    let cluster = TestCluster::start(6).await;
    cluster.create_bucket("bkt", policy("rs(4,2)", 2, CELL, BLOCK)).await;
    let data = pattern((4 * BLOCK) as usize, 21);
    let reader = Cursor::new(data.clone());
    cluster
        .client
        .put_reader("bkt", "o0", data.len() as u64, reader, &PutOptions::default())
        .await
        .unwrap();
    let victim = (1..=6)
        .flat_map(|id| cluster.unit_files(id))
        .find(|p| p.file_name().unwrap().to_string_lossy().contains("-d"))
        .expect("some data unit");
    let original = std::fs::read(&victim).unwrap();
    let mut bytes = original.clone();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x80;
    std::fs::write(&victim, &bytes).unwrap();
    read_all(&cluster, "bkt", std::slice::from_ref(&data), "corrupt").await;
    cluster.wait_for(Duration::from_secs(10), |s| s["repair_queue"].as_u64() > Some(0)).await;
    run_repairs(&cluster, "rs(4,2)").await;
    // Same file name, same place, good bytes again.
    assert_eq!(std::fs::read(&victim).unwrap(), original, "the unit was not rewritten in place");
    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "o0", None, &mut out, None).await.unwrap();
    assert_eq!(out, data);
    assert!(stats.degraded_units.is_empty(), "{:?}", stats.degraded_units);
}

/// Nodes holding a unit of some object, by id.
fn nodes_with_units(cluster: &TestCluster, nodes: u32) -> Vec<u32> {
    (1..=nodes).filter(|&id| !cluster.unit_files(id).is_empty()).collect()
}

/// Issue 15 item 11: the copy a repair replaced on a node that was down is deleted by the
/// executor (not by gc's grace sweep, which never runs here) once the node is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_copy_is_deleted_when_its_node_returns() {
    let mut cluster = TestCluster::start(4).await;
    cluster.create_bucket("bkt", policy("rs(2,1)", 2, CELL, BLOCK)).await;
    let data = pattern((2 * BLOCK) as usize, 3);
    let reader = Cursor::new(data.clone());
    let options = PutOptions::default();
    cluster.client.put_reader("bkt", "o0", data.len() as u64, reader, &options).await.unwrap();
    let victim = nodes_with_units(&cluster, 4)[0];
    let old_copies = cluster.unit_files(victim);
    assert_eq!(old_copies.len(), 1, "one unit of the object on node {victim}");
    cluster.stop_node(victim).await;
    cluster
        .wait_for(Duration::from_secs(15), |s| {
            s["nodes_down"] == 1 && s["repair_queue"].as_u64() > Some(0)
        })
        .await;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let config = repair::ExecutorConfig {
        idle_ms: 100,
        rate_bytes_per_sec: None,
        deletions_every_ms: 200,
        ..Default::default()
    };
    let executor = tokio::spawn(repair::run_executor(cluster.client.clone(), config, stopped));
    cluster
        .wait_for(Duration::from_secs(30), |s| {
            s["under_protected_units"] == 0 && s["repair_queue"] == 0
        })
        .await;
    assert!(old_copies[0].exists(), "the node is down: its copy cannot be deleted yet");
    let pending = cluster.client.meta.get_json("/v1/deletions").await.unwrap();
    assert_eq!(pending["pending"], 1, "the replaced copy is queued in meta: {pending}");

    cluster.restart_node(victim).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while old_copies[0].exists() {
        assert!(tokio::time::Instant::now() < deadline, "the replaced copy was never deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The executor acknowledges the deletion to meta after the node has done it.
    loop {
        let drained = cluster.client.meta.get_json("/v1/deletions").await.unwrap();
        if drained["pending"] == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never acknowledged: {drained}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(true).unwrap();
    let stats = executor.await.unwrap();
    assert_eq!(stats.copies_deleted.load(std::sync::atomic::Ordering::Relaxed), 1);
    let mut out = Vec::new();
    cluster.client.get("bkt", "o0", None, &mut out, None).await.unwrap();
    assert!(out == data, "the object reads back");

    // With its node up at repair time, the replaced copy goes at once: no drain runs now.
    cluster.wait_nodes_up(4).await;
    let victim = (1..=4)
        .flat_map(|id| cluster.unit_files(id))
        .find(|p| p.file_name().unwrap().to_string_lossy().contains("-d"))
        .expect("some data unit");
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 1;
    std::fs::write(&victim, &bytes).unwrap();
    let mut out = Vec::new();
    cluster.client.get("bkt", "o0", None, &mut out, None).await.unwrap();
    assert!(out == data, "the object reads around the corrupt unit");
    cluster.wait_for(Duration::from_secs(10), |s| s["repair_queue"].as_u64() > Some(0)).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let config = repair::ExecutorConfig {
        idle_ms: 100,
        rate_bytes_per_sec: None,
        deletions_every_ms: 0,
        ..Default::default()
    };
    let executor = tokio::spawn(repair::run_executor(cluster.client.clone(), config, stopped));
    cluster
        .wait_for(Duration::from_secs(30), |s| {
            s["under_protected_units"] == 0 && s["repair_queue"] == 0
        })
        .await;
    stop.send(true).unwrap();
    let stats = executor.await.unwrap();
    assert_eq!(stats.repaired.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(!victim.exists(), "the corrupt copy is deleted as soon as the repair commits");
    assert_eq!(stats.copies_deleted.load(std::sync::atomic::Ordering::Relaxed), 1);
    let left = cluster.client.meta.get_json("/v1/deletions").await.unwrap();
    assert_eq!(left["pending"], 0, "nothing left for a drain: {left}");
}

/// Issue 15 item 6: with more than r units of a group lost, the executor reports the repair
/// `unrecoverable`; meta counts the units unfound and backs off, so the executor does not
/// retry in a loop; `mark_lost` gives the object up and reads then fail with "lost".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecoverable_group_is_unfound_not_retried_in_a_loop_and_can_be_marked_lost() {
    let mut cluster = TestCluster::start(5).await;
    cluster.create_bucket("bkt", policy("rs(2,1)", 2, CELL, BLOCK)).await;
    let data = pattern((2 * BLOCK) as usize, 4);
    let reader = Cursor::new(data.clone());
    let options = PutOptions::default();
    cluster.client.put_reader("bkt", "o0", data.len() as u64, reader, &options).await.unwrap();
    let holders = nodes_with_units(&cluster, 5);
    assert_eq!(holders.len(), 3, "rs(2,1): three units on three nodes");
    cluster.stop_node(holders[0]).await;
    cluster.stop_node(holders[1]).await;
    cluster
        .wait_for(Duration::from_secs(15), |s| s["nodes_down"] == 2 && s["repair_queue"] == 2)
        .await;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let config =
        repair::ExecutorConfig { idle_ms: 50, rate_bytes_per_sec: None, ..Default::default() };
    let executor = tokio::spawn(repair::run_executor(cluster.client.clone(), config, stopped));
    let status = cluster.wait_for(Duration::from_secs(30), |s| s["unfound_units"] == 2).await;
    assert_eq!(status["unfound_objects"], 1, "{status}");
    // Time enough for a busy loop to retry thousands of times.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.send(true).unwrap();
    let stats = executor.await.unwrap();
    let failed = stats.failed.load(std::sync::atomic::Ordering::Relaxed);
    assert!((2..=4).contains(&failed), "each unfound unit tried once or twice, not {failed} times");
    let object = cluster.client.meta.get_json("/v1/buckets/bkt/objects/o0").await.unwrap();
    assert_eq!(object["unfound_units"].as_array().unwrap().len(), 2, "{object}");

    let lost = cluster.client.meta.mark_lost("bkt", "o0").await.unwrap();
    assert_eq!(lost["lost"], true, "{lost}");
    let error = cluster.client.get("bkt", "o0", None, &mut Vec::new(), None).await.unwrap_err();
    assert!(error.to_string().contains("lost"), "a read says the object is lost: {error}");
    let status = cluster.wait_for(Duration::from_secs(5), |s| s["unfound_units"] == 0).await;
    assert_eq!(status["lost_objects"], 1, "{status}");
}

/// Issue 15 item 2: a unit replaced under its key by someone who can talk to its node (the
/// node recomputes its own checksums, so it serves the forgery as sound) is caught by the
/// writer's digest in meta: the read returns the true bytes, reports the unit, meta counts
/// it, and repair puts the true bytes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_unit_is_caught_by_its_writers_digest_rebuilt_and_counted() {
    let cluster = TestCluster::start(9).await;
    cluster.create_bucket("bkt", policy("rs(4,2)", 2, CELL, BLOCK)).await;
    let data = pattern((6 * BLOCK) as usize, 9);
    cluster
        .client
        .put_reader(
            "bkt",
            "o0",
            data.len() as u64,
            Cursor::new(data.clone()),
            &PutOptions::default(),
        )
        .await
        .unwrap();
    let object = cluster.client.meta.get_object("bkt", "o0").await.unwrap();
    assert!(object.units.len() > 6, "{} units", object.units.len());
    for info in object.units.values() {
        let digest = info.digest.unwrap_or_else(|| panic!("{:?} has no digest", info.unit));
        let stored = cluster.client.nodes.get_range(info, 0, info.len).await.unwrap();
        let found = cluster.client.nodes.digest_key().digest(&stored);
        assert_eq!(found, digest, "{:?}", info.unit);
    }
    let victim = object.unit(weft_layout::UnitId::Data(1)).unwrap().clone();
    let forged: Vec<u8> = pattern(victim.len as usize, 77);
    cluster.client.nodes.delete(&victim).await.unwrap();
    cluster.client.nodes.put(&victim, forged.clone().into()).await.unwrap();
    // The node serves the forgery as sound; only the digest tells.
    let refused = cluster.client.nodes.get_range(&victim, 0, victim.len).await.unwrap_err();
    assert_eq!(refused.kind, weft_client::node::FailureKind::Corrupt, "{refused}");
    assert!(refused.cause.contains(weft_client::digest::MISMATCH), "{refused}");
    let unchecked = weft_client::UnitInfo { digest: None, ..victim.clone() };
    let served = cluster.client.nodes.get_range(&unchecked, 0, victim.len).await.unwrap();
    assert_eq!(served.as_ref(), forged.as_slice(), "the node itself finds nothing wrong");

    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "o0", None, &mut out, None).await.unwrap();
    assert!(out == data, "the read returns the writer's bytes, not the forgery");
    assert_eq!(stats.degraded_units.len(), 1, "{:?}", stats.degraded_units);
    assert!(stats.degraded_units[0].1.contains("checksum mismatch"), "{:?}", stats.degraded_units);
    cluster
        .wait_for(Duration::from_secs(10), |s| {
            s["digest_mismatches"] == 1 && s["repair_queue"].as_u64() > Some(0)
        })
        .await;
    run_repairs(&cluster, "rs(4,2)").await;
    let repaired = cluster.client.meta.get_object("bkt", "o0").await.unwrap();
    let unit = repaired.unit(weft_layout::UnitId::Data(1)).unwrap();
    assert_eq!(unit.digest, victim.digest, "repair keeps the writer's digest");
    cluster.client.nodes.get_range(unit, 0, unit.len).await.expect("the true bytes are back");
    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "o0", None, &mut out, None).await.unwrap();
    assert!(out == data);
    assert!(stats.degraded_units.is_empty(), "{:?}", stats.degraded_units);
}

/// Objects written before keyed digests carry BLAKE3 ones: they still read, a forged unit of
/// theirs is still caught (checked as BLAKE3, whatever the client writes now), and its repair
/// keeps the BLAKE3 digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_with_blake3_digests_still_read_and_their_forgeries_are_caught() {
    let cluster = TestCluster::start(8).await;
    cluster.create_bucket("bkt", policy("rs(4,2)", 2, CELL, BLOCK)).await;
    let data = pattern((4 * BLOCK) as usize + 777, 5);
    let options = PutOptions::default();
    let reader = Cursor::new(data.clone());
    cluster.client.put_reader("bkt", "new", data.len() as u64, reader, &options).await.unwrap();
    let new = cluster.client.meta.get_object("bkt", "new").await.unwrap();
    // The same units again, under another key, committed the way older writers did.
    let old = cluster.client.meta.begin("bkt", "old", data.len() as u64, None, &[]).await.unwrap();
    let mut digests = std::collections::BTreeMap::new();
    for (unit, info) in &old.units {
        let source = new.units.get(unit).expect("the same layout names the same units");
        let bytes = cluster.client.nodes.get_range(source, 0, source.len).await.unwrap();
        cluster.client.nodes.put(info, bytes.clone()).await.unwrap();
        let digest = weft_client::digest::blake3_digest(&bytes);
        assert_eq!(digest.kind(), weft_wire::DigestKind::Blake3);
        digests.insert(*unit, digest);
    }
    cluster.client.meta.commit("bkt", "old", old.generation, &digests).await.unwrap();
    let old = cluster.client.meta.get_object("bkt", "old").await.unwrap();
    for info in old.units.values() {
        assert_eq!(info.digest, digests.get(&info.unit).copied(), "meta keeps BLAKE3 digests");
    }
    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "old", None, &mut out, None).await.unwrap();
    assert!(out == data && stats.degraded_units.is_empty(), "{:?}", stats.degraded_units);

    let victim = old.unit(weft_layout::UnitId::Data(2)).unwrap().clone();
    cluster.client.nodes.delete(&victim).await.unwrap();
    let forged = pattern(victim.len as usize, 99);
    cluster.client.nodes.put(&victim, forged.into()).await.unwrap();
    let refused = cluster.client.nodes.get_range(&victim, 0, victim.len).await.unwrap_err();
    assert!(refused.cause.contains(weft_client::digest::MISMATCH), "{refused}");
    let mut out = Vec::new();
    let stats = cluster.client.get("bkt", "old", None, &mut out, None).await.unwrap();
    assert!(out == data, "the read returns the writer's bytes, not the forgery");
    assert_eq!(stats.degraded_units.len(), 1, "{:?}", stats.degraded_units);
    cluster.wait_for(Duration::from_secs(10), |s| s["repair_queue"].as_u64() > Some(0)).await;
    run_repairs(&cluster, "rs(4,2) BLAKE3").await;
    let repaired = cluster.client.meta.get_object("bkt", "old").await.unwrap();
    let unit = repaired.unit(weft_layout::UnitId::Data(2)).unwrap();
    assert_eq!(unit.digest, victim.digest, "repair keeps the BLAKE3 digest");
    cluster.client.nodes.get_range(unit, 0, unit.len).await.expect("the true bytes are back");
}

/// Issue 15 item 3: an object of 1,200 units has a tiled placement; a node's units are rebuilt
/// elsewhere, each recorded as moved in the compact record; with them rebuilt, another node
/// may fail and the object still reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_of_a_tiled_placement_are_rebuilt_and_recorded_as_moved() {
    let mut cluster = TestCluster::start(12).await;
    cluster.create_bucket("bkt", policy("rs(2,1)", 2, CELL, CELL)).await;
    let data = pattern((800 * CELL) as usize, 77);
    let reader = Cursor::new(data.clone());
    let options = PutOptions::default();
    cluster.client.put_reader("bkt", "o0", data.len() as u64, reader, &options).await.unwrap();
    // One unit listed: the reply carries the placement pattern.
    let meta = cluster.client.meta.clone();
    let pattern_of = || async {
        let page = "/v1/buckets/bkt/objects/o0?units_limit=1";
        meta.get_json(page).await.unwrap()["placement"].clone()
    };
    let placement = pattern_of().await;
    assert!(placement["period"].as_u64().is_some(), "tiled: {placement}");
    assert!(placement["moved"].is_null(), "{placement}");
    let before = cluster.client.meta.get_object("bkt", "o0").await.unwrap();
    assert_eq!(before.units.len(), 1200);
    let lost = before.units.values().filter(|u| u.node_id == 1).count();
    assert!(lost > 50, "{lost} units on node 1");

    cluster.stop_node(1).await;
    cluster
        .wait_for(Duration::from_secs(15), |s| {
            s["nodes_down"] == 1 && s["repair_queue"].as_u64() > Some(0)
        })
        .await;
    run_repairs(&cluster, "rs(2,1) tiled").await;
    let after = cluster.client.meta.get_object("bkt", "o0").await.unwrap();
    assert!(after.units.values().all(|u| u.node_id != 1), "a unit is still on node 1");
    let placement = pattern_of().await;
    let moved = placement["moved"].as_array().map_or(0, Vec::len);
    assert_eq!(moved, lost, "one recorded move per rebuilt unit: {placement}");
    assert!(after.units.values().all(|u| u.digest.is_some()));

    cluster.stop_node(2).await;
    read_all(&cluster, "bkt", std::slice::from_ref(&data), "node 1 rebuilt, node 2 down").await;
}
