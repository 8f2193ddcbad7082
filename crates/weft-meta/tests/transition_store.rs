//! Transitions in the store, over MemStore, RedbStore and PgStore alike: begin, commit (from the
//! object's disks at commit, relocations checked), abort, replace, drop with the object, and
//! survive a reopen.

use weft_codes::CodeSpec;
use weft_layout::{
    place, plan_regroup, DiskLocation, FailureDomain, Placement, RegroupPlan, StripedLayout,
    Topology, TransitionMode, UnitId,
};
use weft_meta::{
    Enqueued, MetaError, MetaStore, NewTransition, ObjectName, ObjectRecord, RedbStore, RepairKind,
    RepairOutcome, RepairRequest, TransitionConflict,
};

/// Stripe width 2, 4-byte cells, 16-byte blocks: small numbers, many blocks.
fn layout(code: &str) -> StripedLayout {
    StripedLayout {
        code: CodeSpec::parse(code).unwrap(),
        stripe_width: 2,
        cell_bytes: 4,
        block_bytes: 16,
    }
}

/// `nodes` nodes of one disk, each its own rack.
fn topology(nodes: u32) -> Topology {
    Topology::new((0..nodes).map(|node| DiskLocation { rack: node, node, disk: 0 }).collect())
        .unwrap()
}

/// 40 full blocks and a short one.
const SIZE: u64 = 40 * 16 + 3;

fn stores() -> (tempfile::TempDir, Vec<Box<dyn MetaStore>>) {
    crate::common::Stores::boxed()
}

/// Puts `key` in bucket "bkt" (created if needed) as rs(6,3) placed on `nodes` nodes.
fn put(store: &dyn MetaStore, key: &str, nodes: u32, seed: u64) -> ObjectRecord {
    let _ = store.create_bucket("bkt", layout("rs(6,3)"), 0);
    let placement =
        place(&layout("rs(6,3)"), SIZE, &topology(nodes), seed, FailureDomain::Node).unwrap();
    let write = store.begin_object("bkt", key, placement, 1).unwrap();
    store.commit_object("bkt", key, write.generation, &Default::default()).unwrap().0
}

fn plan(object: &ObjectRecord, code: &str, nodes: u32) -> RegroupPlan {
    plan_regroup(&object.placement, &layout(code), &topology(nodes)).unwrap()
}

fn transition(object: &ObjectRecord, plan: &RegroupPlan) -> NewTransition {
    NewTransition {
        bucket: object.bucket.clone(),
        key: object.key.clone(),
        object_generation: object.generation,
        mode: TransitionMode::Regroup,
        old_layout: *object.layout(),
        new_placement: plan.new.clone(),
        relocations: plan.relocations.clone(),
        lease_ms: 60_000,
    }
}

fn conflict(result: Result<(ObjectRecord, ObjectRecord), MetaError>) -> TransitionConflict {
    match result {
        Err(MetaError::TransitionConflict { conflict, .. }) => conflict,
        other => panic!("expected a transition conflict, got {other:?}"),
    }
}

fn data_disks(placement: &Placement) -> Vec<DiskLocation> {
    placement.units().filter(|(u, _)| matches!(u, UnitId::Data(_))).map(|(_, d)| d).collect()
}

fn repair(object: &ObjectRecord, unit: UnitId) -> RepairRequest {
    RepairRequest {
        object: ObjectName { bucket: object.bucket.clone(), key: object.key.clone() },
        generation: object.generation,
        unit,
        kind: RepairKind::Damaged,
        reason: "corrupt".into(),
        seen_on: None,
    }
}

#[test]
fn commit_applies_the_relocations_and_the_new_parity_atomically() {
    let (_dir, stores) = stores();
    for store in &stores {
        // 12 nodes cannot keep rs(6,3) groups disjoint, so rs(10,2) must move blocks.
        let object = put(store.as_ref(), "k", 12, 3);
        let plan = plan(&object, "rs(10,2)", 12);
        assert!(!plan.relocations.is_empty());
        // Queued repairs: a parity's task names a unit of the old parity and goes with it; a
        // data block's stays (its key and bytes do not change).
        let parity = UnitId::Parity { group: 0, index: 1 };
        for unit in [UnitId::Data(1), parity] {
            assert_eq!(store.enqueue_repair(&repair(&object, unit), 2), Ok(Enqueued::Queued));
        }
        let (record, replaced) = store.begin_transition(transition(&object, &plan), 5).unwrap();
        assert_eq!(replaced, None);
        assert_eq!((record.created_ms, record.object_generation), (5, object.generation));
        assert_eq!(record.relocations, plan.relocations);
        assert_eq!(store.get_transition("bkt", "k").unwrap(), Some(record.clone()));
        assert_eq!(store.get_object("bkt", "k").unwrap(), object, "nothing changes at begin");

        let (new, old) =
            store.commit_transition("bkt", "k", record.id, &Default::default()).unwrap();
        assert_eq!(old, object);
        assert_eq!(new.placement, plan.new, "no repair meanwhile: exactly the plan");
        assert_eq!((new.parity_generation, new.generation), (record.id, object.generation));
        assert_eq!(store.get_object("bkt", "k").unwrap(), new);
        assert_eq!(store.get_transition("bkt", "k").unwrap(), None);
        let queued: Vec<UnitId> =
            store.list_repairs(None, 10).unwrap().into_iter().map(|(_, t)| t.unit).collect();
        assert_eq!(queued, vec![UnitId::Data(1)]);
        assert_eq!(
            conflict(store.commit_transition("bkt", "k", record.id, &Default::default())),
            TransitionConflict::AlreadyCommitted
        );
    }
}

#[test]
fn commit_keeps_repairs_done_meanwhile_and_refuses_a_moved_relocation() {
    let (_dir, stores) = stores();
    let cluster = topology(12);
    for store in &stores {
        let object = put(store.as_ref(), "k", 12, 3);
        let plan = plan(&object, "rs(10,2)", 12);
        let moved = plan.relocations[0].block;
        let (record, _) = store.begin_transition(transition(&object, &plan), 5).unwrap();

        // A repair moves a block the regroup relocates: the plan's copy is from the wrong
        // place, so the commit is refused and the transition stays.
        let unit = UnitId::Data(moved);
        store.enqueue_repair(&repair(&object, unit), 6).unwrap();
        let lease = store.take_repair(10, 100).unwrap().unwrap();
        let target = object.placement.replacement_for(&cluster, unit, &[]).unwrap();
        let RepairOutcome::Relocated(repaired) = store.relocate_repaired(&lease, target).unwrap()
        else {
            panic!("not relocated")
        };
        let refused = conflict(store.commit_transition("bkt", "k", record.id, &Default::default()));
        assert_eq!(
            refused,
            TransitionConflict::Relocation {
                block: moved as u32,
                planned_from: plan.relocations[0].from,
                current: target
            }
        );
        assert_eq!(store.get_object("bkt", "k").unwrap(), repaired, "nothing changed");
        assert_eq!(store.get_transition("bkt", "k").unwrap(), Some(record.clone()));
        assert_eq!(store.abort_transition("bkt", "k", record.id).unwrap(), record);
        assert_eq!(
            store.abort_transition("bkt", "k", record.id),
            Err(MetaError::NoSuchTransition {
                bucket: "bkt".into(),
                key: "k".into(),
                id: record.id,
                pending: None
            })
        );

        // Another object, roomier: a repair moves a block the regroup leaves in place; the
        // commit builds on where the block is now.
        let roomy = topology(24);
        let object = put(store.as_ref(), "k2", 24, 5);
        let plan = plan_regroup(&object.placement, &layout("rs(12,3)"), &roomy).unwrap();
        assert!(plan.relocations.is_empty());
        let (record, _) = store.begin_transition(transition(&object, &plan), 20).unwrap();
        // A block and a disk that keep the old rules and, with the plan, the new ones.
        let (stays, target) = (0..41)
            .filter_map(|x| {
                let unit = UnitId::Data(x);
                let disk = object.placement.replacement_for(&roomy, unit, &[]).ok()?;
                let mut after = plan.new.clone();
                (after.relocate(unit, disk).is_ok() && after.verify().is_ok()).then_some((x, disk))
            })
            .next()
            .expect("some block can move under both codes");
        store.enqueue_repair(&repair(&object, UnitId::Data(stays)), 21).unwrap();
        let lease = store.take_repair(30, 100).unwrap().unwrap();
        assert_eq!(lease.task.unit, UnitId::Data(stays));
        assert!(matches!(store.relocate_repaired(&lease, target), Ok(RepairOutcome::Relocated(_))));
        let (new, _) =
            store.commit_transition("bkt", "k2", record.id, &Default::default()).unwrap();
        assert_eq!(new.placement.disk_of(UnitId::Data(stays)), Some(target), "the repair is kept");
        let mut expected = data_disks(&plan.new);
        expected[stays] = target;
        assert_eq!(data_disks(&new.placement), expected);
        assert_eq!(new.placement.verify(), Ok(()));
    }
}

#[test]
fn a_begin_replaces_the_pending_one_and_is_checked_against_the_object() {
    let (_dir, stores) = stores();
    for store in &stores {
        let object = put(store.as_ref(), "k", 24, 1);
        let wide = plan(&object, "rs(12,3)", 24);
        let (first, _) = store.begin_transition(transition(&object, &wide), 5).unwrap();
        let narrow = plan(&object, "rs(3,3)", 24);
        let (second, replaced) = store.begin_transition(transition(&object, &narrow), 6).unwrap();
        assert!(second.id > first.id, "ids only grow");
        assert_eq!(replaced, Some(first.clone()));
        assert_eq!(
            conflict(store.commit_transition("bkt", "k", first.id, &Default::default())),
            TransitionConflict::Superseded { current: second.id }
        );
        assert_eq!(
            store.abort_transition("bkt", "k", first.id),
            Err(MetaError::NoSuchTransition {
                bucket: "bkt".into(),
                key: "k".into(),
                id: first.id,
                pending: Some(second.id)
            })
        );
        assert_eq!(store.transition_count().unwrap(), 1);

        // Plans that do not fit the object are refused, changing nothing.
        let mut stale = transition(&object, &wide);
        stale.object_generation += 1;
        let refused = store.begin_transition(stale, 7).unwrap_err();
        assert!(
            matches!(
                refused,
                MetaError::TransitionConflict {
                    id: 0,
                    conflict: TransitionConflict::ObjectReplaced { .. },
                    ..
                }
            ),
            "{refused}"
        );
        assert!(refused.to_string().starts_with("a transition of object"), "{refused}");
        let mut other = transition(&object, &wide);
        other.old_layout = layout("rs(4,2)");
        assert!(matches!(store.begin_transition(other, 7), Err(MetaError::InvalidRecord { .. })));
        let elsewhere = NewTransition { key: "nope".into(), ..transition(&object, &wide) };
        assert!(matches!(store.begin_transition(elsewhere, 7), Err(MetaError::NoSuchKey { .. })));
        let nowhere = NewTransition { bucket: "nope".into(), ..transition(&object, &wide) };
        assert!(matches!(store.begin_transition(nowhere, 7), Err(MetaError::NoSuchBucket { .. })));
        assert_eq!(store.get_transition("bkt", "k").unwrap(), Some(second.clone()));
    }
}

#[test]
fn overwriting_or_deleting_the_object_drops_its_transition() {
    let (_dir, stores) = stores();
    for store in &stores {
        let object = put(store.as_ref(), "k", 24, 1);
        let (record, _) =
            store.begin_transition(transition(&object, &plan(&object, "rs(12,3)", 24)), 5).unwrap();
        // An overwrite that began before the transition and commits after it.
        let newer = put(store.as_ref(), "k", 24, 2);
        assert_eq!(store.get_transition("bkt", "k").unwrap(), None);
        assert_eq!(
            conflict(store.commit_transition("bkt", "k", record.id, &Default::default())),
            TransitionConflict::NotPending
        );
        assert_eq!(store.get_object("bkt", "k").unwrap(), newer);

        let (record, _) =
            store.begin_transition(transition(&newer, &plan(&newer, "rs(12,3)", 24)), 6).unwrap();
        store.delete_object("bkt", "k").unwrap();
        assert_eq!(store.transition_count().unwrap(), 0);
        assert_eq!(
            conflict(store.commit_transition("bkt", "k", record.id, &Default::default())),
            TransitionConflict::ObjectGone
        );
        assert_eq!(store.delete_bucket("bkt"), Ok(()), "no transition keeps a bucket");
    }
}

#[test]
fn listing_pages_in_key_order() {
    let (_dir, stores) = stores();
    for store in &stores {
        for key in ["c", "a", "b", "d"] {
            let object = put(store.as_ref(), key, 24, 1);
            store.begin_transition(transition(&object, &plan(&object, "rs(12,3)", 24)), 5).unwrap();
        }
        let keys = |page: Vec<weft_meta::TransitionRecord>| -> Vec<String> {
            page.into_iter().map(|t| t.key).collect()
        };
        assert_eq!(keys(store.list_transitions(None, 3).unwrap()), ["a", "b", "c"]);
        let after = ObjectName { bucket: "bkt".into(), key: "c".into() };
        assert_eq!(keys(store.list_transitions(Some(&after), 3).unwrap()), ["d"]);
        assert_eq!(store.transition_count().unwrap(), 4);
    }
}

#[test]
fn a_pending_transition_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let store = RedbStore::open(&path).unwrap();
    let object = put(&store, "k", 24, 1);
    let plan = plan(&object, "rs(12,3)", 24);
    let (record, _) = store.begin_transition(transition(&object, &plan), 5).unwrap();
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.get_transition("bkt", "k").unwrap(), Some(record.clone()));
    assert_eq!(store.list_transitions(None, 10).unwrap(), vec![record.clone()]);
    let (new, _) = store.commit_transition("bkt", "k", record.id, &Default::default()).unwrap();
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.get_object("bkt", "k").unwrap(), new, "parity generation and all");
    assert_eq!(new.parity_generation, record.id);
    // Ids keep growing across reopens.
    let (next, _) = store
        .begin_transition(
            transition(
                &new,
                &plan_regroup(&new.placement, &layout("rs(6,3)"), &topology(24)).unwrap(),
            ),
            9,
        )
        .unwrap();
    assert!(next.id > record.id);
}

#[test]
fn from_parts_checks_counts_and_rules() {
    let object = place(&layout("rs(6,3)"), SIZE, &topology(24), 1, FailureDomain::Node).unwrap();
    let parts = |p: &Placement| {
        let (data, parity): (Vec<_>, Vec<_>) =
            p.units().partition(|(u, _)| matches!(u, UnitId::Data(_)));
        let disks = |v: Vec<(UnitId, DiskLocation)>| v.into_iter().map(|(_, d)| d).collect();
        (disks(data), disks(parity))
    };
    let (data, parity): (Vec<DiskLocation>, Vec<DiskLocation>) = parts(&object);
    let rebuilt = Placement::from_parts(
        *object.layout(),
        SIZE,
        FailureDomain::Node,
        1,
        data.clone(),
        parity.clone(),
    );
    assert_eq!(rebuilt.as_ref(), Ok(&object));
    let short = Placement::from_parts(
        *object.layout(),
        SIZE,
        FailureDomain::Node,
        1,
        data[1..].to_vec(),
        parity.clone(),
    );
    assert!(short.unwrap_err().to_string().contains("40 data"));
    let mut crowded = data.clone();
    crowded[1] = crowded[0];
    let broken =
        Placement::from_parts(*object.layout(), SIZE, FailureDomain::Node, 1, crowded, parity);
    assert!(matches!(broken, Err(weft_layout::LayoutError::RuleBroken { .. })));
}

#[test]
fn a_renewal_moves_the_lease_and_only_an_expired_lease_expires() {
    let (_dir, stores) = stores();
    for store in &stores {
        let object = put(store.as_ref(), "k", 24, 1);
        let plan = plan(&object, "rs(12,3)", 24);
        let new = NewTransition { lease_ms: 100, ..transition(&object, &plan) };
        let (record, _) = store.begin_transition(new, 1000).unwrap();
        assert_eq!(record.lease_deadline_ms, 1100);
        // Not expired before its deadline; expiring the wrong id does nothing.
        assert_eq!(store.expire_transition("bkt", "k", record.id, 1099), Ok(None));
        assert_eq!(store.expire_transition("bkt", "k", record.id + 1, 5000), Ok(None));
        let renewed = store.renew_transition("bkt", "k", record.id, 2000).unwrap();
        assert_eq!(renewed.lease_deadline_ms, 2000);
        assert_eq!(store.get_transition("bkt", "k").unwrap(), Some(renewed.clone()));
        assert_eq!(store.expire_transition("bkt", "k", record.id, 1999), Ok(None), "renewed");
        assert_eq!(store.expire_transition("bkt", "k", record.id, 2000), Ok(Some(renewed)));
        assert_eq!(store.get_transition("bkt", "k").unwrap(), None);
        // Gone: a renewal and a commit are refused as not pending; the object is untouched.
        let refused = store.renew_transition("bkt", "k", record.id, 9000);
        assert!(
            matches!(
                refused,
                Err(MetaError::TransitionConflict { conflict: TransitionConflict::NotPending, .. })
            ),
            "{refused:?}"
        );
        let commit = store.commit_transition("bkt", "k", record.id, &Default::default());
        assert_eq!(conflict(commit), TransitionConflict::NotPending);
        assert_eq!(store.get_object("bkt", "k").unwrap(), object);
    }
}

#[test]
fn a_renewal_of_a_replaced_or_committed_transition_says_why() {
    let (_dir, stores) = stores();
    for store in &stores {
        let object = put(store.as_ref(), "k", 24, 1);
        let (first, _) =
            store.begin_transition(transition(&object, &plan(&object, "rs(12,3)", 24)), 5).unwrap();
        let (second, _) =
            store.begin_transition(transition(&object, &plan(&object, "rs(10,4)", 24)), 6).unwrap();
        let reason = |result: Result<weft_meta::TransitionRecord, MetaError>| match result {
            Err(MetaError::TransitionConflict { conflict, .. }) => conflict,
            other => panic!("expected a conflict, got {other:?}"),
        };
        assert_eq!(
            reason(store.renew_transition("bkt", "k", first.id, 99)),
            TransitionConflict::Superseded { current: second.id }
        );
        store.commit_transition("bkt", "k", second.id, &Default::default()).unwrap();
        assert_eq!(
            reason(store.renew_transition("bkt", "k", second.id, 99)),
            TransitionConflict::AlreadyCommitted
        );
        assert_eq!(store.expire_transition("bkt", "k", second.id, u64::MAX), Ok(None));
    }
}

#[test]
fn a_lease_survives_a_reopen_and_old_records_get_the_default_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let store = RedbStore::open(&path).unwrap();
    let object = put(&store, "k", 24, 1);
    let new =
        NewTransition { lease_ms: 250, ..transition(&object, &plan(&object, "rs(12,3)", 24)) };
    let (record, _) = store.begin_transition(new, 5).unwrap();
    let renewed = store.renew_transition("bkt", "k", record.id, 7777).unwrap();
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.get_transition("bkt", "k").unwrap(), Some(renewed.clone()));
    assert_eq!(renewed.lease_deadline_ms, 7777);

    // A record stored before leases existed reads with created_ms + the default lease.
    let mut stored = serde_json::to_value(&renewed).unwrap();
    stored.as_object_mut().unwrap().remove("lease_deadline_ms");
    let old: weft_meta::TransitionRecord = serde_json::from_value(stored).unwrap();
    assert_eq!(old.lease_deadline_ms, 5 + weft_meta::DEFAULT_TRANSITION_LEASE_MS);
    assert_eq!(
        old,
        weft_meta::TransitionRecord { lease_deadline_ms: old.lease_deadline_ms, ..renewed }
    );
}
