//! Behaviour of the durable stores (RedbStore, PgStore), checked against MemStore (the model)
//! and against fixed expectations: the conformance suite every store passes.

use crate::common::{Durable, Stores};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use weft_codes::CodeSpec;
use weft_layout::{
    place, plan_regroup, DiskLocation, FailureDomain, Placement, StripedLayout, Topology,
    TransitionMode, UnitId,
};
use weft_meta::{
    metadata_bytes, CommitTerms, DiskReport, Enqueued, Heartbeat, MemStore, MetaError, MetaStore,
    NewTransition, ObjectName, ObjectRecord, Precondition, RedbStore, RepairKind, RepairOutcome,
    RepairRequest, VersionDelete, VersionRef, Versioning, MAX_ATTRIBUTES_BYTES, VERSIONS_BUCKET,
};
use weft_meta::{BucketLock, DefaultRetention, LockChange, ObjectLock, Retention, RetentionMode};

const MIB: u64 = 1 << 20;

fn layout(code: &str, block_bytes: u64) -> StripedLayout {
    StripedLayout {
        code: CodeSpec::parse(code).unwrap(),
        stripe_width: 4,
        cell_bytes: MIB,
        block_bytes,
    }
}

fn topology(nodes: u32, disks: u32) -> Topology {
    let mut all = Vec::new();
    for node in 0..nodes {
        for disk in 0..disks {
            all.push(DiskLocation { rack: node % 3, node, disk });
        }
    }
    Topology::new(all).unwrap()
}

fn placement(size: u64, seed: u64) -> Placement {
    let small = layout("rs(2,1)", MIB);
    place(&small, size, &topology(6, 2), seed, FailureDomain::Node).unwrap()
}

fn heartbeat(node_id: u32) -> Heartbeat {
    Heartbeat {
        node_id,
        endpoint: format!("http://127.0.0.1:{}", 9000 + node_id),
        pid: 100 + node_id,
        disks: vec![DiskReport {
            index: 0,
            dir: format!("/data/n{node_id}/d0"),
            units: 3,
            bytes: 4096,
            failed: None,
            ..Default::default()
        }],
        rack: None,
    }
}

fn put(store: &dyn MetaStore, bucket: &str, key: &str, now_ms: u64) -> ObjectRecord {
    let record = store.begin_object(bucket, key, placement(3 * MIB, now_ms), now_ms).unwrap();
    store.commit_object(bucket, key, record.generation, &Default::default()).unwrap().0
}

/// A `Damaged` repair request of `unit` of `object`, as a client reports one.
fn damaged(object: &ObjectRecord, unit: UnitId, reason: &str) -> RepairRequest {
    RepairRequest {
        object: ObjectName { bucket: object.bucket.clone(), key: object.key.clone() },
        generation: object.generation,
        unit,
        kind: RepairKind::Damaged,
        reason: reason.into(),
        seen_on: None,
    }
}

/// An `Unavailable` repair request of `unit` of `object`, as the detector makes one.
fn unavailable(object: &ObjectRecord, unit: UnitId, reason: &str) -> RepairRequest {
    RepairRequest {
        kind: RepairKind::Unavailable,
        seen_on: object.placement.disk_of(unit),
        ..damaged(object, unit, reason)
    }
}

#[test]
fn model_based_random_operations() {
    let stores = Stores::new();
    for target in stores.durable() {
        random_operations_against_the_model(&target);
    }
}

fn random_operations_against_the_model(target: &Durable) {
    let seed: u64 = 0x5eed_0001;
    let model = MemStore::new();
    let mut real = Some(target.open());
    let mut rng = StdRng::seed_from_u64(seed);
    let buckets = ["aaa", "bbb", "ccc"];
    let keys = ["x/1", "x/2", "x/3", "y/1", "y/2", "z"];
    let mut now_ms = 0u64;
    let mut generations: Vec<(usize, usize, u64)> = Vec::new();
    let mut leases = Vec::new();
    let mut relocations = 0;
    let mut transitions: Vec<(usize, usize, u64)> = Vec::new();
    let mut transitioned = 0;
    let (mut markers, mut versions_deleted) = (0, 0);
    let (mut locks_set, mut locked_refusals) = (0, 0);
    // A random lock for a commit or a change, ending within ~2000 ms of `now_ms`.
    let random_retention = |rng: &mut StdRng, now_ms: u64| Retention {
        mode: if rng.gen_bool(0.5) { RetentionMode::Governance } else { RetentionMode::Compliance },
        until_ms: now_ms + rng.gen_range(0..2000),
    };
    for step in 0..2500 {
        now_ms += rng.gen_range(0..50);
        let b = rng.gen_range(0..buckets.len());
        let k = rng.gen_range(0..keys.len());
        let (bucket, key) = (buckets[b], keys[k]);
        let store = real.as_ref().unwrap();
        let context = format!("{} seed {seed:#x} step {step}", target.name());
        match rng.gen_range(0..26) {
            0 => assert_eq!(
                store.create_bucket(bucket, layout("rs(2,1)", MIB), now_ms),
                model.create_bucket(bucket, layout("rs(2,1)", MIB), now_ms),
                "{context}"
            ),
            1 => assert_eq!(store.delete_bucket(bucket), model.delete_bucket(bucket), "{context}"),
            2 => {
                assert_eq!(store.get_bucket(bucket), model.get_bucket(bucket), "{context}");
                assert_eq!(store.list_buckets(), model.list_buckets(), "{context}");
            }
            3 | 4 => {
                let p = placement(rng.gen_range(0..8 * MIB), rng.gen());
                let got = store.begin_object(bucket, key, p.clone(), now_ms);
                assert_eq!(got, model.begin_object(bucket, key, p, now_ms), "{context}");
                if let Ok(record) = got {
                    generations.push((b, k, record.generation));
                }
            }
            5 | 6 => {
                let (b, k, generation) = match generations.len() {
                    0 => (b, k, 1),
                    n => generations[rng.gen_range(0..n)],
                };
                let (bucket, key) = (buckets[b], keys[k]);
                // Sometimes with an object lock (refused where the bucket has none).
                let terms = CommitTerms {
                    lock: rng.gen_bool(0.2).then(|| ObjectLock {
                        retention: rng.gen_bool(0.7).then(|| random_retention(&mut rng, now_ms)),
                        legal_hold: rng.gen_bool(0.3),
                    }),
                    ..Default::default()
                };
                assert_eq!(
                    store.commit_object_with(bucket, key, generation, &Default::default(), &terms),
                    model.commit_object_with(bucket, key, generation, &Default::default(), &terms),
                    "{context}"
                );
            }
            7 => assert_eq!(
                store.get_object(bucket, key),
                model.get_object(bucket, key),
                "{context}"
            ),
            8 => {
                let prefix = ["", "x/", "y", "q"][rng.gen_range(0..4)];
                let after = if rng.gen_bool(0.5) { Some(key) } else { None };
                let limit = rng.gen_range(0..4);
                assert_eq!(
                    store.list_objects(bucket, prefix, after, limit),
                    model.list_objects(bucket, prefix, after, limit),
                    "{context}"
                );
            }
            9 => assert_eq!(
                store.delete_object(bucket, key),
                model.delete_object(bucket, key),
                "{context}"
            ),
            10 => {
                let hb = heartbeat(rng.gen_range(0..4));
                assert_eq!(
                    store.record_heartbeat(&hb, now_ms),
                    model.record_heartbeat(&hb, now_ms),
                    "{context}"
                );
                assert_eq!(store.list_nodes(), model.list_nodes(), "{context}");
            }
            11 => assert_eq!(
                store.down_nodes(now_ms, 100),
                model.down_nodes(now_ms, 100),
                "{context}"
            ),
            12 => {
                // Mostly the committed generation, sometimes an old or unknown one.
                let generation = match model.get_object(bucket, key) {
                    Ok(object) if rng.gen_bool(0.8) => object.generation,
                    _ => rng.gen_range(0..=generations.len() as u64 + 1),
                };
                let unit = match rng.gen_range(0..4) {
                    0 => UnitId::Parity { group: rng.gen_range(0..3), index: 0 },
                    _ => UnitId::Data(rng.gen_range(0..4)),
                };
                let seen_on = match rng.gen_range(0..3) {
                    0 => None,
                    1 => model.get_object(bucket, key).ok().and_then(|o| o.placement.disk_of(unit)),
                    _ => Some(DiskLocation { rack: 0, node: rng.gen_range(0..6), disk: 0 }),
                };
                let kind =
                    if rng.gen_bool(0.5) { RepairKind::Damaged } else { RepairKind::Unavailable };
                let request = RepairRequest {
                    object: ObjectName { bucket: bucket.into(), key: key.into() },
                    generation,
                    unit,
                    kind,
                    reason: format!("reason {step}"),
                    seen_on,
                };
                if rng.gen_bool(0.7) {
                    assert_eq!(
                        store.enqueue_repair(&request, now_ms),
                        model.enqueue_repair(&request, now_ms),
                        "{context}"
                    );
                } else {
                    let batch =
                        [request.clone(), RepairRequest { unit: UnitId::Data(0), ..request }];
                    assert_eq!(
                        store.enqueue_repairs(&batch, now_ms),
                        model.enqueue_repairs(&batch, now_ms),
                        "{context}"
                    );
                }
                assert_eq!(
                    store.list_repairs(None, 100),
                    model.list_repairs(None, 100),
                    "{context}"
                );
            }
            13 => {
                let got = store.take_repair(now_ms, 60);
                assert_eq!(got, model.take_repair(now_ms, 60), "{context}");
                if let Ok(Some(lease)) = got {
                    leases.push(lease);
                }
            }
            14 if !leases.is_empty() => {
                let lease = leases.swap_remove(rng.gen_range(0..leases.len()));
                match rng.gen_range(0..3) {
                    0 => assert_eq!(
                        store.complete_repair(&lease),
                        model.complete_repair(&lease),
                        "{context}"
                    ),
                    1 => {
                        let random = DiskLocation {
                            rack: 0,
                            node: rng.gen_range(0..8),
                            disk: rng.gen_range(0..2),
                        };
                        // Mostly where a repair would go (the object may have changed since).
                        let (object, unit) = (&lease.task.object, lease.task.unit);
                        let disk = match model.get_object(&object.bucket, &object.key) {
                            Ok(o) if rng.gen_bool(0.7) => o
                                .placement
                                .replacement_for(&topology(6, 2), unit, &[])
                                .unwrap_or(random),
                            _ => random,
                        };
                        let got = store.relocate_repaired(&lease, disk);
                        assert_eq!(got, model.relocate_repaired(&lease, disk), "{context}");
                        relocations += usize::from(matches!(got, Ok(RepairOutcome::Relocated(_))));
                    }
                    _ => assert_eq!(
                        store.fail_repair(&lease, "rebuild failed"),
                        model.fail_repair(&lease, "rebuild failed"),
                        "{context}"
                    ),
                }
            }
            15..=17 => {
                // Regroup the committed object to another code of the same striping.
                let Ok(object) = model.get_object(bucket, key) else { continue };
                let code = ["rs(3,1)", "rs(4,2)", "rs(2,1)", "rs(2,2)"][rng.gen_range(0..4)];
                let Ok(plan) = plan_regroup(&object.placement, &layout(code, MIB), &topology(6, 2))
                else {
                    continue;
                };
                let new = NewTransition {
                    bucket: bucket.into(),
                    key: key.into(),
                    object_generation: object.generation,
                    mode: TransitionMode::Regroup,
                    old_layout: *object.layout(),
                    new_placement: plan.new,
                    relocations: plan.relocations,
                    lease_ms: 60_000,
                };
                let got = store.begin_transition(new.clone(), now_ms);
                assert_eq!(got, model.begin_transition(new, now_ms), "{context}");
                if let Ok((record, _)) = got {
                    transitions.push((b, k, record.id));
                }
            }
            18 => {
                let (b, k, id) = match transitions.len() {
                    0 => (b, k, 1),
                    n => transitions[rng.gen_range(0..n)],
                };
                let (bucket, key) = (buckets[b], keys[k]);
                let got = store.commit_transition(bucket, key, id, &Default::default());
                assert_eq!(
                    got,
                    model.commit_transition(bucket, key, id, &Default::default()),
                    "{context}"
                );
                transitioned += usize::from(got.is_ok());
            }
            19 => {
                let (b, k, id) = match transitions.len() {
                    0 => (b, k, 1),
                    n => transitions[rng.gen_range(0..n)],
                };
                let (bucket, key) = (buckets[b], keys[k]);
                if rng.gen_bool(0.5) {
                    let got = store.abort_transition(bucket, key, id);
                    assert_eq!(got, model.abort_transition(bucket, key, id), "{context}");
                }
                assert_eq!(
                    store.get_transition(bucket, key),
                    model.get_transition(bucket, key),
                    "{context}"
                );
                let after = ObjectName { bucket: bucket.into(), key: key.into() };
                let after = rng.gen_bool(0.5).then_some(&after);
                assert_eq!(
                    store.list_transitions(after, 3),
                    model.list_transitions(after, 3),
                    "{context}"
                );
            }
            21 => {
                let state =
                    if rng.gen_bool(0.7) { Versioning::Enabled } else { Versioning::Suspended };
                assert_eq!(
                    store.set_bucket_versioning(bucket, state, now_ms),
                    model.set_bucket_versioning(bucket, state, now_ms),
                    "{context}"
                );
            }
            22 => {
                let got = store.delete_latest(bucket, key, None, now_ms);
                assert_eq!(got, model.delete_latest(bucket, key, None, now_ms), "{context}");
                if got.is_ok_and(|d| d.marker.is_some()) {
                    markers += 1;
                }
            }
            23 => {
                // Mostly a version the key has, sometimes one it may not.
                let version = match model.get_version(bucket, key, VersionRef::Latest) {
                    Ok(newest) if rng.gen_bool(0.6) && newest.versioned => {
                        VersionRef::Generation(newest.generation)
                    }
                    _ if rng.gen_bool(0.5) => VersionRef::Null,
                    _ => VersionRef::Generation(rng.gen_range(0..=generations.len() as u64 + 1)),
                };
                assert_eq!(
                    store.get_version(bucket, key, version),
                    model.get_version(bucket, key, version),
                    "{context}"
                );
                let terms = VersionDelete {
                    bypass_governance: rng.gen_bool(0.3),
                    now_ms,
                    ..Default::default()
                };
                let got = store.delete_version(bucket, key, version, terms);
                assert_eq!(got, model.delete_version(bucket, key, version, terms), "{context}");
                match got {
                    Ok(_) => versions_deleted += 1,
                    Err(MetaError::ObjectLocked { .. }) => locked_refusals += 1,
                    Err(_) => {}
                }
                assert_eq!(
                    store.list_objects(VERSIONS_BUCKET, "", None, 100),
                    model.list_objects(VERSIONS_BUCKET, "", None, 100),
                    "{context}"
                );
            }
            24 => {
                let lock = BucketLock {
                    default_retention: rng.gen_bool(0.5).then(|| DefaultRetention {
                        mode: RetentionMode::Governance,
                        days: Some(rng.gen_range(0..3)),
                        years: None,
                    }),
                };
                assert_eq!(
                    store.set_bucket_object_lock(bucket, lock),
                    model.set_bucket_object_lock(bucket, lock),
                    "{context}"
                );
            }
            25 => {
                let version = match model.get_version(bucket, key, VersionRef::Latest) {
                    Ok(newest) if newest.versioned => VersionRef::Generation(newest.generation),
                    _ if rng.gen_bool(0.5) => VersionRef::Null,
                    _ => VersionRef::Latest,
                };
                let change = match rng.gen_range(0..3) {
                    0 => LockChange::LegalHold(rng.gen_bool(0.5)),
                    1 => LockChange::Retention(None),
                    _ => LockChange::Retention(Some(random_retention(&mut rng, now_ms))),
                };
                let bypass = rng.gen_bool(0.5);
                let got = store.set_version_lock(bucket, key, version, change, bypass, now_ms);
                let want = model.set_version_lock(bucket, key, version, change, bypass, now_ms);
                assert_eq!(got, want, "{context}");
                match got {
                    Ok(_) => locks_set += 1,
                    Err(MetaError::ObjectLocked { .. }) => locked_refusals += 1,
                    Err(_) => {}
                }
            }
            _ => {
                // Restart: everything committed must survive closing and reopening the store.
                drop(real.take());
                real = Some(target.open());
            }
        }
        let store = real.as_ref().unwrap();
        assert_eq!(store.repair_queue_len(), model.repair_queue_len(), "{context}");
        assert_eq!(store.transition_count(), model.transition_count(), "{context}");
        assert_eq!(store.version_moves(), model.version_moves(), "{context}");
        // The placed-units index and the totals, kept by every change, match the objects.
        assert_eq!(store.object_totals(), model.object_totals(), "{context}");
        if step % 10 == 0 {
            assert_eq!(store.placed_disks(), model.placed_disks(), "{context}");
            let node = rng.gen_range(0..6);
            let disk = rng.gen_bool(0.5).then(|| rng.gen_range(0..2));
            let first = model.placed_units(node, disk, None, 7).unwrap();
            assert_eq!(store.placed_units(node, disk, None, 7).unwrap(), first, "{context}");
            if let Some(last) = first.last() {
                assert_eq!(
                    store.placed_units(node, disk, Some(last), 1000),
                    model.placed_units(node, disk, Some(last), 1000),
                    "{context}"
                );
            }
        }
        if let Some((id, _)) = model.list_repairs(None, 1).unwrap().first() {
            assert_eq!(store.get_repair(*id), model.get_repair(*id), "{context}");
        }
    }
    // The run must have exercised the interesting paths, or it proves little.
    assert!(generations.len() > 20);
    let listed: usize = buckets
        .iter()
        .filter_map(|b| model.list_objects(b, "", None, 100).ok())
        .map(|p| p.objects.len())
        .sum();
    assert!(listed > 0, "no object was ever committed");
    assert!(relocations > 0, "no repair was ever completed by relocation");
    assert!(transitions.len() > 10 && transitioned > 3, "{transitions:?}, {transitioned}");
    assert!(markers > 5 && versions_deleted > 5, "{markers} markers, {versions_deleted} deleted");
    assert!(locks_set > 5 && locked_refusals > 0, "{locks_set} locks, {locked_refusals} refused");
}

#[test]
fn reopen_keeps_everything() {
    let stores = Stores::new();
    for target in stores.durable() {
        reopen_keeps_everything_in(&target);
    }
}

fn reopen_keeps_everything_in(target: &Durable) {
    let opened = target.open();
    let store = opened.as_ref();
    store.create_bucket("photos", layout("rs(2,1)", MIB), 5).unwrap();
    let cat = put(store, "photos", "cat.jpg", 6);
    let pending = store.begin_object("photos", "dog.jpg", placement(MIB, 1), 7).unwrap();
    store.record_heartbeat(&heartbeat(3), 8).unwrap();
    let request = unavailable(&cat, UnitId::Data(0), "disk failed");
    assert_eq!(store.enqueue_repair(&request, 9), Ok(Enqueued::Queued));
    let queued = store.list_repairs(None, 10).unwrap();
    let before = (
        store.list_buckets().unwrap(),
        store.get_object("photos", "cat.jpg").unwrap(),
        store.list_nodes().unwrap(),
    );
    drop(opened);
    let opened = target.open();
    let store = opened.as_ref();
    let after = (
        store.list_buckets().unwrap(),
        store.get_object("photos", "cat.jpg").unwrap(),
        store.list_nodes().unwrap(),
    );
    assert_eq!(before, after);
    assert_eq!(store.list_repairs(None, 10).unwrap(), queued, "the queue survives a restart");
    assert_eq!(store.enqueue_repair(&request, 10), Ok(Enqueued::AlreadyQueued));
    // The write in progress survived too: it can still be committed after the restart.
    let (committed, replaced) =
        store.commit_object("photos", "dog.jpg", pending.generation, &Default::default()).unwrap();
    assert_eq!(committed.placement, pending.placement);
    assert_eq!(replaced, None);
    // Generations keep increasing across restarts.
    let next = store.begin_object("photos", "eel.jpg", placement(MIB, 2), 10).unwrap();
    assert!(next.generation > pending.generation);
}

#[test]
fn concurrent_writes_of_a_key_all_commit_and_preconditions_hold_in_the_transaction() {
    let every = Stores::new();
    let stores = every.all();
    for store in stores {
        store.create_bucket("bkt", layout("rs(2,1)", MIB), 1).unwrap();
        // Two writers of one key: both stay in progress, both commit, the last one wins.
        let first = store.begin_object("bkt", "k", placement(MIB, 1), 2).unwrap();
        let second = store.begin_object("bkt", "k", placement(MIB, 2), 3).unwrap();
        let listed = store.list_writes(None, 10).unwrap();
        assert_eq!(listed.len(), 2, "both writes are in progress");
        let cursor = listed[0].write_cursor();
        assert_eq!(store.list_writes(Some(&cursor), 10).unwrap(), vec![listed[1].clone()]);
        assert_eq!(store.get_write("bkt", "k", first.generation).unwrap(), Some(first.clone()));
        let terms = CommitTerms { attributes: Some(json!({"etag": "two"})), ..Default::default() };
        let (two, replaced) = store
            .commit_object_with("bkt", "k", second.generation, &Default::default(), &terms)
            .unwrap();
        assert_eq!((two.attributes.clone(), replaced), (terms.attributes.clone(), None));
        // If-None-Match: * of the first writer: an object is there now, so it is refused,
        // and its write stays for the writer to abort.
        let absent = CommitTerms { precondition: Some(Precondition::Absent), ..Default::default() };
        let refused =
            store.commit_object_with("bkt", "k", first.generation, &Default::default(), &absent);
        assert!(
            matches!(refused, Err(MetaError::PreconditionFailed { current: Some(g), .. }) if g == second.generation),
            "{refused:?}"
        );
        assert!(store.get_write("bkt", "k", first.generation).unwrap().is_some());
        // Pinned to the committed generation, it commits and replaces it.
        let pinned = CommitTerms {
            attributes: Some(json!({"etag": "one"})),
            precondition: Some(Precondition::Generation(second.generation)),
            ..Default::default()
        };
        let (one, replaced) = store
            .commit_object_with("bkt", "k", first.generation, &Default::default(), &pinned)
            .unwrap();
        assert_eq!(replaced.map(|r| r.generation), Some(second.generation));
        assert_eq!(store.get_object("bkt", "k").unwrap(), one);
        assert_eq!(store.get_object("bkt", "k").unwrap().attributes, Some(json!({"etag": "one"})));
        // Attributes that are not an object, or too big, are refused.
        let third = store.begin_object("bkt", "k", placement(MIB, 3), 4).unwrap();
        for bad in [json!("text"), json!({"x": "y".repeat(MAX_ATTRIBUTES_BYTES)})] {
            let terms = CommitTerms { attributes: Some(bad), ..Default::default() };
            let refused =
                store.commit_object_with("bkt", "k", third.generation, &Default::default(), &terms);
            assert!(matches!(refused, Err(MetaError::InvalidAttributes { .. })), "{refused:?}");
        }
        store.abort_write("bkt", "k", third.generation).unwrap();
        // Deletes pinned to a generation: another one is refused, the right one deletes.
        let refused = store.delete_object_if("bkt", "k", Some(Precondition::Generation(2)));
        assert!(matches!(refused, Err(MetaError::PreconditionFailed { .. })), "{refused:?}");
        let deleted =
            store.delete_object_if("bkt", "k", Some(Precondition::Generation(one.generation)));
        assert_eq!(deleted.unwrap().generation, one.generation);
        assert!(matches!(store.get_object("bkt", "k"), Err(MetaError::NoSuchKey { .. })));
        // The attributes survive in the store's encoding (redb re-reads them from disk).
        let fourth = store.begin_object("bkt", "k2", placement(MIB, 4), 5).unwrap();
        let terms = CommitTerms { attributes: Some(json!({"etag": "x", "n": 1})), ..terms };
        store
            .commit_object_with("bkt", "k2", fourth.generation, &Default::default(), &terms)
            .unwrap();
        let listed = store.list_objects("bkt", "", None, 10).unwrap();
        assert_eq!(listed.objects[0].attributes, Some(json!({"etag": "x", "n": 1})));
        store.delete_object("bkt", "k2").unwrap();
        store.delete_bucket("bkt").unwrap();
    }
}

/// Commits a write of (bucket, key); returns it and the garbage its commit returned.
fn put_versioned(
    store: &dyn MetaStore,
    key: &str,
    now_ms: u64,
) -> (ObjectRecord, Option<ObjectRecord>) {
    let write = store.begin_object("ver", key, placement(MIB, now_ms), now_ms).unwrap();
    store.commit_object("ver", key, write.generation, &Default::default()).unwrap()
}

#[test]
fn versioning_keeps_versions_delete_markers_and_one_null_version() {
    let every = Stores::new();
    let stores = every.all();
    for store in stores {
        store.create_bucket("ver", layout("rs(2,1)", MIB), 1).unwrap();
        let moves = store.version_moves().unwrap();
        // Written before versioning: the null version. Enabling keeps it as a version.
        let (a, garbage) = put_versioned(store, "k", 2);
        assert_eq!((a.versioned, garbage), (false, None));
        let bucket = store.set_bucket_versioning("ver", Versioning::Enabled, 3).unwrap();
        assert_eq!(bucket.versioning, Some(Versioning::Enabled));
        let (b, garbage) = put_versioned(store, "k", 4);
        assert!(b.versioned && garbage.is_none(), "{b:?} {garbage:?}");
        assert_eq!(b.version_id(), b.generation.to_string());
        let null = store.get_version("ver", "k", VersionRef::Null).unwrap();
        assert_eq!((null.bucket.as_str(), null.generation), (VERSIONS_BUCKET, a.generation));
        assert_eq!(null.placement, a.placement, "the version keeps its units");
        assert_eq!(store.get_object("ver", "k").unwrap(), b);
        assert!(store.version_moves().unwrap() > moves);
        // A delete keeps the object as a version and makes a delete marker the newest.
        let deleted = store.delete_latest("ver", "k", None, 5).unwrap();
        assert_eq!(deleted.removed, None);
        let marker = deleted.marker.unwrap();
        assert!(marker.delete_marker && marker.versioned && marker.size() == 0);
        assert!(matches!(store.get_object("ver", "k"), Err(MetaError::NoSuchKey { .. })));
        assert_eq!(store.get_version("ver", "k", VersionRef::Latest).unwrap(), marker);
        // Deleting the marker brings the newest object back.
        let gone = VersionRef::Generation(marker.generation);
        assert_eq!(
            store.delete_version("ver", "k", gone, VersionDelete::default()).unwrap(),
            marker
        );
        assert_eq!(store.get_object("ver", "k").unwrap().generation, b.generation);
        assert!(matches!(
            store.delete_version("ver", "k", gone, VersionDelete::default()),
            Err(MetaError::NoSuchVersion { .. })
        ));
        // Suspended: a write is the null version; the previous null one is garbage now.
        store.set_bucket_versioning("ver", Versioning::Suspended, 6).unwrap();
        let (c, garbage) = put_versioned(store, "k", 7);
        assert!(!c.versioned);
        assert_eq!(garbage.map(|g| g.generation), Some(a.generation));
        assert_eq!(
            store.get_version("ver", "k", VersionRef::Generation(b.generation)).unwrap().generation,
            b.generation,
            "the version written while enabled stays"
        );
        // A suspended delete removes the null current for good and leaves a null marker.
        let deleted = store.delete_latest("ver", "k", None, 8).unwrap();
        assert_eq!(deleted.removed.map(|r| r.generation), Some(c.generation));
        let marker = deleted.marker.unwrap();
        assert_eq!(marker.version_id(), "null");
        // A precondition names the version it deletes.
        let pinned = VersionDelete {
            precondition: Some(Precondition::Generation(a.generation)),
            ..Default::default()
        };
        let refused =
            store.delete_version("ver", "k", VersionRef::Generation(b.generation), pinned);
        assert!(matches!(refused, Err(MetaError::PreconditionFailed { .. })), "{refused:?}");
        store
            .delete_version(
                "ver",
                "k",
                VersionRef::Generation(b.generation),
                VersionDelete::default(),
            )
            .unwrap();
        assert!(matches!(store.get_object("ver", "k"), Err(MetaError::NoSuchKey { .. })));
        // The marker is the last version: the bucket is not empty until it goes.
        assert!(matches!(store.delete_bucket("ver"), Err(MetaError::BucketNotEmpty { .. })));
        store.delete_version("ver", "k", VersionRef::Null, VersionDelete::default()).unwrap();
        assert!(store.list_objects(VERSIONS_BUCKET, "", None, 10).unwrap().objects.is_empty());
        store.delete_bucket("ver").unwrap();
        // Internal buckets are never versioned.
        let refused = store.set_bucket_versioning(VERSIONS_BUCKET, Versioning::Enabled, 9);
        assert!(matches!(refused, Err(MetaError::NotVersionable { .. })), "{refused:?}");
    }
    // What redb stored reads back the same after a reopen.
    let path = every.dir.path().join("meta.redb");
    drop(every.redb);
    let reopened = RedbStore::open(&path).unwrap();
    reopened.create_bucket("ver", layout("rs(2,1)", MIB), 10).unwrap();
    reopened.set_bucket_versioning("ver", Versioning::Enabled, 11).unwrap();
    let (first, _) = put_versioned(&reopened, "k", 12);
    let (_second, _) = put_versioned(&reopened, "k", 13);
    drop(reopened);
    let reopened = RedbStore::open(&path).unwrap();
    assert_eq!(reopened.get_bucket("ver").unwrap().versioning, Some(Versioning::Enabled));
    let kept = reopened.get_version("ver", "k", VersionRef::Generation(first.generation)).unwrap();
    assert!(kept.versioned && !kept.delete_marker && kept.placement == first.placement);
}

#[test]
fn object_lock_keeps_locked_versions_until_their_time_or_a_bypass() {
    const DAY: u64 = 24 * 3600 * 1000;
    let every = Stores::new();
    let stores = every.all();
    let governance = |until_ms| Retention { mode: RetentionMode::Governance, until_ms };
    let compliance = |until_ms| Retention { mode: RetentionMode::Compliance, until_ms };
    let locked =
        |r: Result<ObjectRecord, MetaError>| matches!(r, Err(MetaError::ObjectLocked { .. }));
    for store in stores {
        store.create_bucket("ver", layout("rs(2,1)", MIB), 1).unwrap();
        // Object lock needs versioning enabled, and then keeps it enabled.
        let refused = store.set_bucket_object_lock("ver", BucketLock::default());
        assert!(matches!(refused, Err(MetaError::InvalidBucketState { .. })), "{refused:?}");
        put_versioned(store, "plain", 2);
        let refused = store.set_version_lock(
            "ver",
            "plain",
            VersionRef::Latest,
            LockChange::LegalHold(true),
            false,
            2,
        );
        assert!(matches!(refused, Err(MetaError::ObjectLockNotEnabled { .. })), "{refused:?}");
        store.set_bucket_versioning("ver", Versioning::Enabled, 3).unwrap();
        let rule = DefaultRetention { mode: RetentionMode::Governance, days: Some(1), years: None };
        let bad =
            BucketLock { default_retention: Some(DefaultRetention { days: Some(0), ..rule }) };
        let refused = store.set_bucket_object_lock("ver", bad);
        assert!(matches!(refused, Err(MetaError::InvalidLock { .. })), "{refused:?}");
        let lock = BucketLock { default_retention: Some(rule) };
        assert_eq!(store.set_bucket_object_lock("ver", lock).unwrap().object_lock, Some(lock));
        let refused = store.set_bucket_versioning("ver", Versioning::Suspended, 4);
        assert!(matches!(refused, Err(MetaError::InvalidBucketState { .. })), "{refused:?}");

        // A new version gets the default retention, from its creation time.
        let (a, garbage) = put_versioned(store, "k", 10);
        assert!(garbage.is_none());
        assert_eq!(a.lock, ObjectLock { retention: Some(governance(10 + DAY)), legal_hold: false });
        let a_version = VersionRef::Generation(a.generation);
        let delete = |bypass_governance, now_ms| VersionDelete {
            bypass_governance,
            now_ms,
            ..Default::default()
        };
        assert!(locked(store.delete_version("ver", "k", a_version, delete(false, 11))));
        // A delete naming no version only adds a marker: allowed.
        let marker = store.delete_latest("ver", "k", None, 12).unwrap().marker.unwrap();
        assert!(locked(store.delete_version("ver", "k", a_version, delete(false, 13))));
        // Neither may the clock-less internal delete remove it once it is current again.
        let marker_version = VersionRef::Generation(marker.generation);
        store.delete_version("ver", "k", marker_version, delete(false, 14)).unwrap();
        assert!(locked(store.delete_object("ver", "k")));
        // Bypass removes a governance retention.
        assert_eq!(
            store.delete_version("ver", "k", a_version, delete(true, 15)).unwrap().generation,
            a.generation
        );

        // Explicit locks at commit: compliance and a legal hold.
        let write = store.begin_object("ver", "c", placement(MIB, 20), 20).unwrap();
        let terms = CommitTerms {
            lock: Some(ObjectLock { retention: Some(compliance(100)), legal_hold: true }),
            ..Default::default()
        };
        let (c, _) = store
            .commit_object_with("ver", "c", write.generation, &Default::default(), &terms)
            .unwrap();
        let c_version = VersionRef::Generation(c.generation);
        let set = |change, bypass, now_ms| {
            store.set_version_lock("ver", "c", c_version, change, bypass, now_ms)
        };
        // Compliance: shortened, removed or made governance by no one; extended by anyone.
        assert!(locked(set(LockChange::Retention(Some(compliance(50))), true, 21)));
        assert!(locked(set(LockChange::Retention(None), true, 21)));
        assert!(locked(set(LockChange::Retention(Some(governance(200))), true, 21)));
        let extended = set(LockChange::Retention(Some(compliance(150))), false, 21).unwrap();
        assert_eq!(extended.lock.retention, Some(compliance(150)));
        // A retention must end in the future.
        let past = set(LockChange::Retention(Some(compliance(10))), false, 160);
        assert!(matches!(past, Err(MetaError::InvalidLock { .. })), "{past:?}");
        // The legal hold holds past the retention, until it is cleared.
        assert!(locked(store.delete_version("ver", "c", c_version, delete(true, 200))));
        set(LockChange::LegalHold(false), false, 201).unwrap();
        assert!(locked(store.delete_version("ver", "c", c_version, delete(true, 140))));
        store.delete_version("ver", "c", c_version, delete(false, 201)).unwrap();

        // Governance: shortened only with bypass.
        let (g, _) = put_versioned(store, "g", 300);
        let g_version = VersionRef::Generation(g.generation);
        let shorter = LockChange::Retention(Some(governance(400)));
        assert!(locked(store.set_version_lock("ver", "g", g_version, shorter, false, 301)));
        let changed = store.set_version_lock("ver", "g", g_version, shorter, true, 301).unwrap();
        assert_eq!(changed.lock.retention, Some(governance(400)));
        // A delete marker takes no lock.
        let marker = store.delete_latest("ver", "g", None, 302).unwrap().marker.unwrap();
        let refused = store.set_version_lock(
            "ver",
            "g",
            VersionRef::Generation(marker.generation),
            LockChange::LegalHold(true),
            false,
            303,
        );
        assert!(matches!(refused, Err(MetaError::InvalidLock { .. })), "{refused:?}");
        // The bucket keeps its locked versions: not empty.
        assert!(matches!(store.delete_bucket("ver"), Err(MetaError::BucketNotEmpty { .. })));
    }
    // Locks survive a reopen.
    let path = every.dir.path().join("meta.redb");
    drop(every.redb);
    let reopened = RedbStore::open(&path).unwrap();
    let bucket = reopened.get_bucket("ver").unwrap();
    assert!(bucket.object_lock.is_some_and(|l| l.default_retention.is_some()));
    let g = reopened.get_version("ver", "g", VersionRef::Null);
    assert!(matches!(g, Err(MetaError::NoSuchVersion { .. })), "{g:?}");
    let listed = reopened.list_objects(VERSIONS_BUCKET, "", None, 100).unwrap().objects;
    let g = listed.iter().find(|r| r.key.contains("\0g\0") && !r.delete_marker).unwrap();
    assert_eq!(g.lock.retention, Some(governance(400)));
}

#[test]
fn a_version_s_attributes_are_replaced_in_place() {
    let every = Stores::new();
    for store in every.all() {
        store.create_bucket("ver", layout("rs(2,1)", MIB), 1).unwrap();
        store.set_bucket_versioning("ver", Versioning::Enabled, 2).unwrap();
        let (old, _) = put_versioned(store, "k", 3);
        let (new, _) = put_versioned(store, "k", 4);
        let acl = json!({"etag": "e", "acl": {"owner": "alice"}});
        let version = VersionRef::Generation(old.generation);
        let changed = store.set_version_attributes("ver", "k", version, acl.clone()).unwrap();
        assert_eq!(
            (changed.bucket.as_str(), changed.attributes),
            (VERSIONS_BUCKET, Some(acl.clone()))
        );
        // The noncurrent version changed, in place; the current one did not.
        assert_eq!(store.get_version("ver", "k", version).unwrap().placement, old.placement);
        assert_eq!(store.get_object("ver", "k").unwrap(), new);
        let current = store.set_version_attributes("ver", "k", VersionRef::Latest, acl.clone());
        assert_eq!(current.unwrap().generation, new.generation);
        assert_eq!(store.get_object("ver", "k").unwrap().attributes, Some(acl));
        let refused = store.set_version_attributes("ver", "k", version, json!([1]));
        assert!(matches!(refused, Err(MetaError::InvalidAttributes { .. })), "{refused:?}");
        let marker = store.delete_latest("ver", "k", None, 5).unwrap().marker.unwrap();
        let on_marker = VersionRef::Generation(marker.generation);
        let refused = store.set_version_attributes("ver", "k", on_marker, json!({}));
        assert!(matches!(refused, Err(MetaError::InvalidAttributes { .. })), "{refused:?}");
        let missing = store.set_version_attributes("ver", "nope", VersionRef::Latest, json!({}));
        assert!(matches!(missing, Err(MetaError::NoSuchVersion { .. })), "{missing:?}");
    }
}

#[test]
fn bucket_delete_refused_when_not_empty() {
    let every = Stores::new();
    for store in every.all() {
        store.create_bucket("bkt", layout("rs(2,1)", MIB), 0).unwrap();
        let write = store.begin_object("bkt", "k", placement(MIB, 0), 1).unwrap();
        let not_empty = Err(MetaError::BucketNotEmpty { bucket: "bkt".into() });
        assert_eq!(store.delete_bucket("bkt"), not_empty, "a write in progress keeps it");
        store.commit_object("bkt", "k", write.generation, &Default::default()).unwrap();
        assert_eq!(store.delete_bucket("bkt"), not_empty, "a committed object keeps it");
        assert!(store.delete_bucket("bkt").unwrap_err().to_string().contains("\"bkt\""));
        store.delete_object("bkt", "k").unwrap();
        assert_eq!(store.delete_bucket("bkt"), Ok(()));
        assert_eq!(store.get_bucket("bkt"), Err(MetaError::NoSuchBucket { bucket: "bkt".into() }));
    }
}

#[test]
fn listing_pagination_is_exact() {
    let every = Stores::new();
    for store in every.all() {
        store.create_bucket("bkt", layout("rs(2,1)", MIB), 0).unwrap();
        store.create_bucket("aaa", layout("rs(2,1)", MIB), 0).unwrap();
        store.create_bucket("ccc", layout("rs(2,1)", MIB), 0).unwrap();
        for i in 0..100 {
            put(store, "bkt", &format!("logs/{i:03}"), i);
            put(store, "bkt", &format!("other/{i:03}"), i);
        }
        put(store, "aaa", "logs/zzz", 0);
        put(store, "ccc", "logs/000", 0);
        // An uncommitted write is not listed.
        store.begin_object("bkt", "logs/050x", placement(MIB, 0), 0).unwrap();
        let start = "logs/009";
        let mut seen = Vec::new();
        let mut after = Some(start.to_string());
        let mut pages = 0;
        while let Some(from) = after.take() {
            let page = store.list_objects("bkt", "logs/", Some(&from), 7).unwrap();
            assert!(page.objects.len() <= 7);
            seen.extend(page.objects.iter().map(|o| o.key.clone()));
            after = page.next_start_after;
            pages += 1;
            assert!(pages <= 100, "pagination does not terminate");
        }
        let expected: Vec<String> = (10..100).map(|i| format!("logs/{i:03}")).collect();
        assert_eq!(seen, expected);
        assert_eq!(pages, 13, "90 keys in pages of 7: 12 full pages and one of 6");
        let first = store.list_objects("bkt", "logs/", None, 7).unwrap();
        assert_eq!(first.objects[0].key, "logs/000");
        assert_eq!(first.next_start_after.as_deref(), Some("logs/006"));
        // start_after before the prefix starts at the prefix.
        let early = store.list_objects("bkt", "other/", Some("a"), 3).unwrap();
        assert_eq!(early.objects[0].key, "other/000");
    }
}

#[test]
fn heartbeat_marks_node_up_and_silence_down() {
    let every = Stores::new();
    for store in every.all() {
        store.record_heartbeat(&heartbeat(1), 1000).unwrap();
        store.record_heartbeat(&heartbeat(2), 1500).unwrap();
        assert_eq!(store.down_nodes(2000, 1000).unwrap(), Vec::<u32>::new());
        assert_eq!(store.down_nodes(2001, 1000).unwrap(), vec![1]);
        assert_eq!(store.down_nodes(2501, 1000).unwrap(), vec![1, 2]);
        store.record_heartbeat(&heartbeat(1), 2600).unwrap();
        assert_eq!(store.down_nodes(2700, 1000).unwrap(), vec![2]);
        let nodes = store.list_nodes().unwrap();
        assert_eq!(nodes[0].last_heartbeat_ms, 2600);
        assert_eq!(nodes[0].endpoint, "http://127.0.0.1:9001");
    }
}

#[test]
fn a_heartbeat_rack_is_kept_with_the_node() {
    let every = Stores::new();
    for store in every.all() {
        store.record_heartbeat(&Heartbeat { rack: Some(4), ..heartbeat(1) }, 10).unwrap();
        store.record_heartbeat(&heartbeat(2), 10).unwrap();
        let nodes = store.list_nodes().unwrap();
        assert_eq!((nodes[0].rack, nodes[0].rack_id()), (Some(4), 4));
        assert_eq!((nodes[1].rack, nodes[1].rack_id()), (None, 2), "no rack: its own");
        assert_eq!(nodes[0].disk_location(1), DiskLocation { rack: 4, node: 1, disk: 1 });
        // A later heartbeat without a rack clears it.
        store.record_heartbeat(&heartbeat(1), 20).unwrap();
        assert_eq!(store.list_nodes().unwrap()[0].rack, None);
    }
}

#[test]
fn heartbeat_json_has_the_wire_shape() {
    let json = r#"{"node_id":7,"endpoint":"http://10.0.0.7:9000","pid":42,"disks":[{"index":0,"dir":"/d0","units":5,"bytes":100,"failed":null},{"index":1,"dir":"/d1","units":0,"bytes":0,"failed":"EIO on fsync"}]}"#;
    let heartbeat: Heartbeat = serde_json::from_str(json).unwrap();
    assert_eq!(heartbeat.disks[1].failed.as_deref(), Some("EIO on fsync"));
    // The old shape (no capacity) parses; written again, each disk gains its state, "ok".
    let written = json
        .replace(r#""failed":null}"#, r#""failed":null,"state":"ok"}"#)
        .replace(r#""failed":"EIO on fsync"}"#, r#""failed":"EIO on fsync","state":"ok"}"#);
    assert_eq!(serde_json::to_string(&heartbeat).unwrap(), written);
    // The current shape round-trips exactly.
    let json = r#"{"node_id":7,"endpoint":"http://10.0.0.7:9000","pid":42,"disks":[{"index":0,"dir":"/d0","units":5,"bytes":100,"failed":null,"free_bytes":10,"total_bytes":200,"state":"full"}],"rack":2}"#;
    let heartbeat: Heartbeat = serde_json::from_str(json).unwrap();
    assert_eq!(heartbeat.disks[0].state, weft_wire::DiskState::Full);
    assert_eq!(serde_json::to_string(&heartbeat).unwrap(), json);
}

/// Every store, fresh, with bucket "bkt" and object "k" (3 MiB, rs(2,1):
/// d0 d1 d2 p0.0 p1.0) committed in each.
type StoresWithObject = Vec<(Box<dyn MetaStore>, ObjectRecord)>;

fn both_with_object() -> (tempfile::TempDir, StoresWithObject) {
    let (dir, stores) = Stores::boxed();
    let stores = stores
        .into_iter()
        .map(|store| {
            store.create_bucket("bkt", layout("rs(2,1)", MIB), 0).unwrap();
            let object = put(store.as_ref(), "bkt", "k", 1);
            (store, object)
        })
        .collect();
    (dir, stores)
}

#[test]
fn repair_queue_is_idempotent_leased_and_drained() {
    let (_dir, stores) = both_with_object();
    for (store, object) in &stores {
        let parity = UnitId::Parity { group: 1, index: 0 };
        let data = unavailable(object, UnitId::Data(2), "node 3 down");
        assert_eq!(store.enqueue_repair(&data, 10), Ok(Enqueued::Queued));
        let again = RepairRequest { reason: "again".into(), ..data.clone() };
        assert_eq!(store.enqueue_repair(&again, 11), Ok(Enqueued::AlreadyQueued));
        assert_eq!(
            store.enqueue_repair(&damaged(object, parity, "checksum"), 12),
            Ok(Enqueued::Queued)
        );
        assert_eq!(store.repair_queue_len().unwrap(), 2);

        let first = store.take_repair(100, 50).unwrap().unwrap();
        assert_eq!((first.task.unit, first.deadline_ms), (UnitId::Data(2), 150));
        assert_eq!(first.task.reason, "node 3 down");
        assert_eq!(first.task.generation, object.generation);
        let second = store.take_repair(100, 50).unwrap().unwrap();
        assert_eq!(second.task.unit, parity);
        assert_eq!(store.take_repair(149, 50).unwrap(), None, "both leased");

        // The executor of `first` crashed: at its deadline the task returns.
        let retaken = store.take_repair(150, 50).unwrap().unwrap();
        assert_eq!((retaken.task_id, retaken.task.attempts), (first.task_id, 2));
        let lost = store.complete_repair(&first).unwrap_err();
        assert!(matches!(lost, MetaError::LeaseLost { .. }), "{lost}");
        assert!(lost.to_string().contains("\"k\""));
        store.complete_repair(&retaken).unwrap();
        assert_eq!(store.repair_queue_len().unwrap(), 1);
        // Completed: enqueueing the same unit again is a new task.
        assert_eq!(store.enqueue_repair(&data, 160), Ok(Enqueued::Queued));

        // A failure puts the task at the back, free to take at once, with its error.
        let requeued = store.fail_repair(&second, "node 4 refused the write").unwrap();
        assert!(requeued > second.task_id);
        assert_eq!(store.repair_queue_len().unwrap(), 2);
        assert_eq!(store.get_repair(second.task_id).unwrap(), None);
        let failed = store.get_repair(requeued).unwrap().unwrap();
        assert_eq!(failed.last_error.as_deref(), Some("node 4 refused the write"));
        assert_eq!(failed.lease_deadline_ms, None);
        let next = store.take_repair(170, 50).unwrap().unwrap();
        assert_eq!(next.task.unit, UnitId::Data(2));
        let last = store.take_repair(170, 50).unwrap().unwrap();
        assert_eq!((last.task_id, last.task.unit, last.task.attempts), (requeued, parity, 2));
        store.complete_repair(&next).unwrap();
        store.complete_repair(&last).unwrap();
        assert_eq!(store.repair_queue_len().unwrap(), 0);
        assert_eq!(store.take_repair(1000, 50).unwrap(), None);
    }
}

#[test]
fn leases_of_one_task_never_share_a_deadline() {
    let (_dir, stores) = both_with_object();
    for (store, object) in &stores {
        store.enqueue_repair(&damaged(object, UnitId::Data(0), "corrupt"), 0).unwrap();
        let first = store.take_repair(100, 50).unwrap().unwrap();
        // Taken again at its deadline with a zero lease: the deadline still moves on.
        let second = store.take_repair(150, 0).unwrap().unwrap();
        assert_eq!(second.deadline_ms, 151);
        assert!(matches!(store.fail_repair(&first, "late"), Err(MetaError::LeaseLost { .. })));
        store.complete_repair(&second).unwrap();
    }
}

#[test]
fn enqueue_checks_the_committed_object() {
    let (_dir, stores) = both_with_object();
    for (store, object) in &stores {
        let d0 = UnitId::Data(0);
        let missing = RepairRequest {
            object: ObjectName { bucket: "bkt".into(), key: "nope".into() },
            ..damaged(object, d0, "corrupt")
        };
        assert_eq!(store.enqueue_repair(&missing, 1), Ok(Enqueued::Stale));
        let old = RepairRequest { generation: object.generation - 1, ..damaged(object, d0, "x") };
        assert_eq!(store.enqueue_repair(&old, 1), Ok(Enqueued::Stale));
        let elsewhere = RepairRequest {
            seen_on: Some(DiskLocation { rack: 9, node: 99, disk: 0 }),
            ..unavailable(object, d0, "node 99 down")
        };
        assert_eq!(store.enqueue_repair(&elsewhere, 1), Ok(Enqueued::Stale), "moved since seen");
        let past_end = damaged(object, UnitId::Data(3), "corrupt");
        assert!(matches!(
            store.enqueue_repair(&past_end, 1),
            Err(MetaError::NoSuchUnit { unit: UnitId::Data(3), .. })
        ));
        assert_eq!(store.repair_queue_len().unwrap(), 0, "nothing queued so far");

        // A client's report makes a queued unavailability a damage repair, in place.
        assert_eq!(
            store.enqueue_repair(&unavailable(object, d0, "node 1 down"), 2),
            Ok(Enqueued::Queued)
        );
        let [(id, _)] = store.list_repairs(None, 10).unwrap()[..] else { panic!("one task") };
        assert_eq!(
            store.enqueue_repair(&damaged(object, d0, "checksum mismatch"), 3),
            Ok(Enqueued::Queued)
        );
        assert_eq!(
            store.enqueue_repair(&unavailable(object, d0, "node 1 down"), 4),
            Ok(Enqueued::AlreadyQueued)
        );
        let [(same, ref task)] = store.list_repairs(None, 10).unwrap()[..] else {
            panic!("one task")
        };
        assert_eq!(same, id);
        assert_eq!((task.kind, task.reason.as_str()), (RepairKind::Damaged, "checksum mismatch"));

        // The object is replaced: the old generation's task gives way to the new one's.
        let newer = put(store.as_ref(), "bkt", "k", 5);
        assert_eq!(
            store.enqueue_repair(&damaged(object, d0, "late report"), 6),
            Ok(Enqueued::Stale)
        );
        assert_eq!(store.enqueue_repair(&damaged(&newer, d0, "corrupt"), 6), Ok(Enqueued::Queued));
        let tasks = store.list_repairs(None, 10).unwrap();
        assert_eq!(tasks.len(), 1);
        assert!(tasks[0].0 > id);
        assert_eq!(tasks[0].1.generation, newer.generation);

        // A batch is all or nothing.
        let batch =
            [damaged(&newer, UnitId::Data(1), "corrupt"), damaged(&newer, UnitId::Data(7), "x")];
        assert!(store.enqueue_repairs(&batch, 7).is_err());
        assert_eq!(store.list_repairs(None, 10).unwrap(), tasks);
        let batch = [damaged(&newer, UnitId::Data(1), "corrupt"), damaged(&newer, d0, "dup")];
        assert_eq!(store.enqueue_repairs(&batch, 7), Ok(1));
        assert_eq!(store.list_repairs(Some(tasks[0].0), 10).unwrap().len(), 1, "listed after id");
    }
}

#[test]
fn relocate_repaired_moves_the_unit_atomically_or_reports_stale() {
    let (_dir, stores) = both_with_object();
    let cluster = topology(6, 2);
    for (store, object) in &stores {
        let d0 = UnitId::Data(0);
        let old_disk = object.placement.disk_of(d0).unwrap();
        let unavailable_domain = [old_disk.domain(FailureDomain::Node)];
        let target = object.placement.replacement_for(&cluster, d0, &unavailable_domain).unwrap();
        store.enqueue_repair(&unavailable(object, d0, "node down"), 1).unwrap();

        // A disk that shares a node with d1 (same stripe) breaks rule (a): refused, unchanged.
        let lease = store.take_repair(10, 100).unwrap().unwrap();
        let d1_disk = object.placement.disk_of(UnitId::Data(1)).unwrap();
        let refused = store.relocate_repaired(&lease, d1_disk).unwrap_err();
        assert!(matches!(refused, MetaError::PlacementRefused { .. }), "{refused}");
        assert_eq!(&store.get_object("bkt", "k").unwrap(), object);
        assert_eq!(store.repair_queue_len().unwrap(), 1, "the task is still leased");

        // A lease taken over by another executor cannot complete.
        let retaken = store.take_repair(110, 100).unwrap().unwrap();
        let lost = store.relocate_repaired(&lease, target).unwrap_err();
        assert!(matches!(lost, MetaError::LeaseLost { .. }), "{lost}");
        assert_eq!(&store.get_object("bkt", "k").unwrap(), object);

        // Relocated: the object names the new disk, the rules hold, the task is gone.
        let RepairOutcome::Relocated(moved) = store.relocate_repaired(&retaken, target).unwrap()
        else {
            panic!("not relocated")
        };
        assert_eq!(moved.placement.disk_of(d0), Some(target));
        assert_eq!(moved.placement.verify(), Ok(()));
        assert_eq!(store.get_object("bkt", "k").unwrap(), moved);
        assert_eq!(moved.generation, object.generation, "a relocation is not a new write");
        assert_eq!(store.repair_queue_len().unwrap(), 0);
        // The detector's view from before the move is now stale.
        assert_eq!(
            store.enqueue_repair(&unavailable(object, d0, "node down"), 2),
            Ok(Enqueued::Stale)
        );

        // Replaced after the task was queued: stale, the task goes, the object is untouched.
        store.enqueue_repair(&damaged(&moved, UnitId::Data(1), "corrupt"), 3).unwrap();
        let lease = store.take_repair(300, 100).unwrap().unwrap();
        let newer = put(store.as_ref(), "bkt", "k", 4);
        assert_eq!(store.relocate_repaired(&lease, target), Ok(RepairOutcome::Stale));
        assert_eq!(store.get_object("bkt", "k").unwrap(), newer);
        assert_eq!(store.repair_queue_len().unwrap(), 0);

        // Deleted after the task was queued: stale too.
        store.enqueue_repair(&damaged(&newer, UnitId::Data(1), "corrupt"), 5).unwrap();
        let lease = store.take_repair(500, 100).unwrap().unwrap();
        store.delete_object("bkt", "k").unwrap();
        assert_eq!(store.relocate_repaired(&lease, target), Ok(RepairOutcome::Stale));
        assert_eq!(store.repair_queue_len().unwrap(), 0);
    }
}

#[test]
fn metadata_bytes_of_a_1_gib_rs_6_3_object() {
    let big = layout("rs(6,3)", 8 * MIB);
    let size = 1 << 30;
    let p = place(&big, size, &topology(24, 4), 7, FailureDomain::Node).unwrap();
    let store = MemStore::new();
    store.create_bucket("bench", big, 0).unwrap();
    let record = store.begin_object("bench", "one-gib-object", p.clone(), 0).unwrap();
    let units = p.unit_count();
    let disks: std::collections::BTreeSet<_> = p.units().map(|(_, d)| d).collect();
    let bytes = metadata_bytes(&record);
    println!(
        "metadata bytes per object: {bytes} for 1 GiB rs(6,3), 8 MiB blocks: {units} units \
         on {} distinct disks ({:.1} bytes per unit)",
        disks.len(),
        bytes as f64 / units as f64
    );
    assert_eq!(units, 128 + 22 * 3, "128 data blocks, 22 groups of 3 parities");
    // Per unit: an index below 1000 and a comma, at most 4 bytes. Per distinct disk:
    // {"rack":r,"node":n,"disk":d} with ids below 10^5, at most 42 bytes. Fixed: the layout,
    // size, seed, state, times and field names, well under 512 bytes.
    let bound = 4 * units + 42 * disks.len() + 512;
    assert!(bytes <= bound, "{bytes} metadata bytes, bound {bound}");
    // And far below the naive form (a full DiskLocation per unit, ~30 bytes each).
    assert!(bytes < 30 * units);
}

/// A pack's commit keeps each bin stripe's owner tags (repair sends each object's chunks to
/// one disk by them), through a restart too; other objects have none.
#[test]
fn a_packs_stripes_keep_their_owner_tags() {
    let every = Stores::new();
    let key = "cold/00000/c0/000000000000";
    for store in every.all() {
        store.create_bucket("cold", layout("rs(2,1)", MIB), 0).unwrap();
        store.create_bucket(weft_meta::GEOMETRIC_BUCKET, layout("rs(2,1)", MIB), 0).unwrap();
        let write = store.begin_object(weft_meta::GEOMETRIC_BUCKET, key, placement(MIB, 1), 1);
        let write = write.unwrap();
        assert!(write.owners.is_empty());
        let stripes = [weft_meta::StripeCommit {
            key: key.into(),
            generation: write.generation,
            digests: Default::default(),
            owners: vec![7, 0, 9],
        }];
        store.commit_pack(weft_meta::GEOMETRIC_BUCKET, &stripes, "cold", &[]).unwrap();
        let stripe = store.get_object(weft_meta::GEOMETRIC_BUCKET, key).unwrap();
        assert_eq!(stripe.owners, vec![7, 0, 9]);
        assert!(put(store, "cold", "plain", 2).owners.is_empty());
    }
    let path = every.dir.path().join("meta.redb");
    drop(every.redb);
    let redb = RedbStore::open(&path).unwrap();
    assert_eq!(redb.get_object(weft_meta::GEOMETRIC_BUCKET, key).unwrap().owners, vec![7, 0, 9]);
}

/// The leader lease: one holder until it lapses or is given up; renewals extend it only for
/// its holder; other leases are apart; meta processes are recorded and forgotten.
#[test]
fn a_lease_has_one_holder_until_it_lapses_or_is_released() {
    let every = Stores::new();
    for store in every.all() {
        assert_eq!(store.get_lease("leader"), Ok(None));
        let a = store.hold_lease("leader", "a", 1000, 3000).unwrap();
        assert_eq!((a.holder.as_str(), a.deadline_ms), ("a", 4000));
        // b cannot take it while it runs, and is told who holds it.
        assert_eq!(store.hold_lease("leader", "b", 3999, 3000).unwrap(), a);
        // a renews it.
        assert_eq!(store.hold_lease("leader", "a", 3000, 3000).unwrap().deadline_ms, 6000);
        // Lapsed (the deadline is not after now): b takes it, and a's renewal fails.
        let b = store.hold_lease("leader", "b", 6000, 3000).unwrap();
        assert_eq!((b.holder.as_str(), b.deadline_ms), ("b", 9000));
        assert_eq!(store.hold_lease("leader", "a", 6001, 3000).unwrap(), b);
        assert_eq!(store.get_lease("leader"), Ok(Some(b.clone())));
        // Another lease is another matter.
        assert_eq!(store.hold_lease("gc", "a", 6001, 100).unwrap().holder, "a");
        // Only the holder can give it up.
        store.release_lease("leader", "a").unwrap();
        assert_eq!(store.get_lease("leader"), Ok(Some(b)));
        store.release_lease("leader", "b").unwrap();
        assert_eq!(store.get_lease("leader"), Ok(None));
        assert_eq!(store.hold_lease("leader", "a", 6002, 3000).unwrap().holder, "a");
        // Leases are not gateway records.
        assert!(store.list_records("access_keys", "", None, 100).unwrap().is_empty());

        let record = |endpoint: &str, seen_ms| weft_meta::ReplicaRecord {
            endpoint: endpoint.into(),
            pid: 7,
            started_ms: 1,
            seen_ms,
        };
        store.record_replica(&record("http://m2", 5)).unwrap();
        store.record_replica(&record("http://m1", 5)).unwrap();
        store.record_replica(&record("http://m2", 9)).unwrap();
        assert_eq!(store.list_replicas(), Ok(vec![record("http://m1", 5), record("http://m2", 9)]));
        store.forget_replica("http://m1").unwrap();
        assert_eq!(store.list_replicas(), Ok(vec![record("http://m2", 9)]));
    }
}

/// `replace_record` writes only over the value it names: a stale one is refused with
/// `RecordChanged` and writes nothing, and threads that each read, change and replace one
/// record (retrying when refused) lose none of each other's changes, on every store.
#[test]
fn a_record_is_replaced_only_over_the_value_read() {
    let every = Stores::new();
    for store in every.all() {
        let (ns, name) = (weft_meta::store::RAIDP, "replace-test");
        store.replace_record(ns, name, None, &serde_json::json!({"n": 0})).unwrap();
        let created = store.replace_record(ns, name, None, &serde_json::json!({"n": 9}));
        assert!(matches!(created, Err(MetaError::RecordChanged { .. })), "{created:?}");
        let stale = serde_json::json!({"n": 5});
        let refused = store.replace_record(ns, name, Some(&stale), &serde_json::json!({"n": 6}));
        assert!(matches!(refused, Err(MetaError::RecordChanged { .. })), "{refused:?}");
        assert_eq!(store.get_record(ns, name).unwrap(), Some(serde_json::json!({"n": 0})));

        const THREADS: u64 = 4;
        const EACH: u64 = 25;
        let refusals = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..EACH {
                        loop {
                            let read = store.get_record(ns, name).unwrap().unwrap();
                            let next = serde_json::json!({"n": read["n"].as_u64().unwrap() + 1});
                            match store.replace_record(ns, name, Some(&read), &next) {
                                Ok(()) => break,
                                Err(MetaError::RecordChanged { .. }) => {
                                    refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                Err(error) => panic!("{error}"),
                            }
                        }
                    }
                });
            }
        });
        let total = store.get_record(ns, name).unwrap().unwrap();
        assert_eq!(total["n"], THREADS * EACH, "every increment kept: {total}");
        eprintln!("{} refused replacements along the way", refusals.into_inner());
    }
}
