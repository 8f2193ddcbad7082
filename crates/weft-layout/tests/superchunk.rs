//! The superchunk layout (RAIDP) over random topologies: 1-mirroring and 1-sharing after
//! build, growth and any sequence of failures and recoveries, checked by a checker of this
//! file (not `SuperchunkMap::verify` alone); recovery rounds; Lstor rebuild sources.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_layout::superchunk::{
    min_cost_assignment, Receivers, RecoveryPlan, SuperchunkError, SuperchunkId, SuperchunkMap,
};
use weft_layout::{DiskLocation, FailureDomain};

/// Disks over random racks and nodes, with uneven slot counts.
fn random_disks(rng: &mut StdRng, nodes: u32) -> Vec<(DiskLocation, u32)> {
    let racks = rng.gen_range(1..=nodes.min(4));
    let mut disks = Vec::new();
    for node in 0..nodes {
        for disk in 0..rng.gen_range(1..=2) {
            let slots = rng.gen_range(4..=24);
            disks.push((DiskLocation { rack: node % racks, node, disk }, slots));
        }
    }
    disks
}

/// The rules, from the superchunks alone: two replicas at most, on up disks in distinct
/// domains at one slot below both disks' counts; a slot holds one superchunk; two disks share
/// at most one.
fn check(map: &SuperchunkMap, context: &str) {
    map.verify().unwrap_or_else(|e| panic!("{context}: verify: {e}"));
    let disks: HashMap<DiskLocation, (u32, bool)> =
        map.disks().iter().map(|d| (d.location, (d.slots, d.failed))).collect();
    let mut slots = BTreeSet::new();
    let mut pairs: BTreeMap<(DiskLocation, DiskLocation), SuperchunkId> = BTreeMap::new();
    for superchunk in map.superchunks() {
        assert!(superchunk.replicas.len() <= 2, "{context}: {superchunk:?}");
        for disk in &superchunk.replicas {
            let (count, failed) = disks[disk];
            assert!(!failed, "{context}: {superchunk:?} on a failed disk");
            assert!(superchunk.slot < count, "{context}: {superchunk:?} past the disk's slots");
            assert!(slots.insert((*disk, superchunk.slot)), "{context}: slot held twice");
        }
        if let [a, b] = superchunk.replicas[..] {
            assert_ne!(a.node, b.node, "{context}: both replicas on node {}", a.node);
            if map.level() == FailureDomain::Rack {
                assert_ne!(a.rack, b.rack, "{context}: both replicas in rack {}", a.rack);
            }
            let pair = (a.min(b), a.max(b));
            assert!(
                pairs.insert(pair, superchunk.id).is_none(),
                "{context}: {pair:?} share two superchunks"
            );
            assert_eq!(map.shared(&a, &b), Some(superchunk.id), "{context}");
        }
    }
}

/// Each round: distinct senders and distinct receivers, no two transfers between one pair.
fn check_rounds(plan: &RecoveryPlan, context: &str) {
    for round in &plan.rounds {
        let senders: BTreeSet<_> = round.iter().map(|t| t.from).collect();
        let receivers: BTreeSet<_> = round.iter().map(|t| t.to).collect();
        assert_eq!(senders.len(), round.len(), "{context}: a disk sends twice in a round");
        assert_eq!(receivers.len(), round.len(), "{context}: a disk receives twice in a round");
    }
}

/// Applies a plan's transfers in order to `map`, checking the rules after each round.
fn apply(map: &mut SuperchunkMap, plan: &RecoveryPlan, context: &str) {
    for round in &plan.rounds {
        for transfer in round {
            map.apply(transfer).unwrap_or_else(|e| panic!("{context}: {transfer:?}: {e}"));
        }
        check(map, context);
    }
}

#[test]
fn builds_keep_both_rules_and_spread_superchunks_evenly() {
    let mut rng = StdRng::seed_from_u64(1);
    for case in 0..60 {
        let nodes = rng.gen_range(3..=14);
        let disks = random_disks(&mut rng, nodes);
        let level = if rng.gen_bool(0.3) { FailureDomain::Rack } else { FailureDomain::Node };
        let count = rng.gen_range(0..=disks.len() * 3);
        let context = format!("case {case}: {} disks, {count} superchunks, {level}", disks.len());
        match SuperchunkMap::build(&disks, 1 << 20, level, count) {
            Ok(map) => {
                assert_eq!(map.superchunks().count(), count, "{context}");
                check(&map, &context);
                // Uniform disks at node level spread within one superchunk of each other.
                if level == FailureDomain::Node && disks.iter().all(|d| d.1 >= 24) {
                    let loads: Vec<usize> =
                        disks.iter().map(|d| map.superchunks_on(&d.0).len()).collect();
                    let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                    assert!(hi - lo <= 2, "{context}: loads {loads:?}");
                }
            }
            Err(SuperchunkError::Full { placed, requested, .. }) => {
                assert_eq!(requested, count, "{context}");
                assert!(placed < count, "{context}");
                // The map of `placed` builds, and holds the rules.
                let map = SuperchunkMap::build(&disks, 1 << 20, level, placed).unwrap();
                check(&map, &context);
            }
            Err(e) => panic!("{context}: {e}"),
        }
    }
}

#[test]
fn a_map_fills_most_pairs_and_refuses_past_what_it_places() {
    // Eight disks on eight nodes with 7 slots each: 1-sharing allows at most 28 superchunks
    // (each pair once, every slot of every disk used — a map that no recovery could use,
    // since a receiver needs the superchunk's slot index free). Allocation spreads slot
    // indices instead, and still places most of them.
    let disks: Vec<(DiskLocation, u32)> =
        (0..8).map(|n| (DiskLocation { rack: n, node: n, disk: 0 }, 7)).collect();
    let error = SuperchunkMap::build(&disks, 1 << 20, FailureDomain::Node, 29).unwrap_err();
    let SuperchunkError::Full { placed, requested: 29, reason } = &error else {
        panic!("{error}");
    };
    assert!((22..=28).contains(placed), "{error}");
    assert!(reason.contains("share nothing"), "{reason}");
    assert!(error.to_string().contains(&format!("{placed} of the 29")), "{error}");
    let map = SuperchunkMap::build(&disks, 1 << 20, FailureDomain::Node, *placed).unwrap();
    check(&map, "most");
    let pairs =
        disks.iter().flat_map(|a| disks.iter().filter_map(|b| map.shared(&a.0, &b.0))).count();
    assert_eq!(pairs, 2 * placed, "each superchunk is one pair, seen from both disks");
    // Two disks of one node never pair; a lone node holds nothing.
    let one_node: Vec<(DiskLocation, u32)> =
        (0..3).map(|d| (DiskLocation { rack: 0, node: 0, disk: d }, 8)).collect();
    let refused = SuperchunkMap::build(&one_node, 1 << 20, FailureDomain::Node, 1).unwrap_err();
    assert!(refused.to_string().contains("0 of the 1"), "{refused}");
    // Bad disk lists are named.
    let twice = [disks[0], disks[0]];
    let error = SuperchunkMap::new(&twice, 1 << 20, FailureDomain::Node).unwrap_err();
    assert!(error.to_string().contains("listed twice"), "{error}");
    let zero = [(disks[0].0, 0)];
    assert!(SuperchunkMap::new(&zero, 1 << 20, FailureDomain::Node).is_err());
    assert!(SuperchunkMap::new(&disks, 0, FailureDomain::Node).is_err());
}

#[test]
fn failures_and_recoveries_in_any_order_keep_both_rules() {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut matching_rounds, mut naive_rounds) = (0, 0);
    for case in 0..40 {
        let nodes = rng.gen_range(6..=16);
        let disks = random_disks(&mut rng, nodes);
        let count = disks.len() * 2;
        let Ok(mut map) = SuperchunkMap::build(&disks, 1 << 20, FailureDomain::Node, count) else {
            continue;
        };
        let mut next_node = nodes;
        for step in 0..8 {
            let context = format!("case {case} step {step}");
            let up: Vec<DiskLocation> =
                map.disks().iter().filter(|d| !d.failed).map(|d| d.location).collect();
            match rng.gen_range(0..10) {
                // Growth: a new node with one disk.
                0 => {
                    let disk = DiskLocation { rack: next_node % 3, node: next_node, disk: 0 };
                    next_node += 1;
                    map.add_disk(disk, rng.gen_range(4..=24)).unwrap();
                    for _ in 0..rng.gen_range(0..4) {
                        if map.allocate().is_err() {
                            break;
                        }
                    }
                }
                // One or two disks fail at once.
                _ if up.len() > 4 => {
                    let how_many = rng.gen_range(1..=2);
                    let failing: Vec<DiskLocation> =
                        up.choose_multiple(&mut rng, how_many).copied().collect();
                    let shared = match failing[..] {
                        [a, b] => map.shared(&a, &b),
                        _ => None,
                    };
                    let mut lost = Vec::new();
                    for disk in &failing {
                        lost.extend(map.fail_disk(disk).unwrap().lost);
                    }
                    // Superchunks at risk before (from earlier unrecovered steps) may be lost
                    // too; with a recovered map, two failures lose their shared one at most.
                    assert!(lost.len() <= 1 || step > 0, "{context}: lost {lost:?}");
                    if let Some(id) = shared {
                        assert!(lost.contains(&id), "{context}: shared {id} not lost");
                    }
                    check(&map, &context);
                    // Rebuild each lost superchunk (via either failed disk's Lstor).
                    for id in map.lost() {
                        let via = failing.iter().find(|d| map.rebuild_sources(id, d).is_some());
                        if via.is_none() {
                            continue; // an older failure's Lstor was needed: left lost
                        }
                        if let Ok(pair) = map.place_lost(id) {
                            map.restore_lost(id, pair).unwrap();
                        }
                    }
                    check(&map, &context);
                    let receivers = if rng.gen_bool(0.5) {
                        Receivers::Matching
                    } else {
                        Receivers::Naive { seed: rng.gen() }
                    };
                    let plan = map.plan_recovery(receivers);
                    check_rounds(&plan, &context);
                    // Compare the two choices on the same map.
                    let matching = map.plan_recovery(Receivers::Matching);
                    let naive = map.plan_recovery(Receivers::Naive { seed: case });
                    if matching.unplaced.is_empty() && naive.unplaced.is_empty() {
                        matching_rounds += matching.rounds.len();
                        naive_rounds += naive.rounds.len();
                    }
                    let placed: usize = plan.transfers().count();
                    assert_eq!(placed + plan.unplaced.len(), map.at_risk().len(), "{context}");
                    apply(&mut map, &plan, &context);
                    // Replace every failed disk whose superchunks are all mirrored again.
                    let failed: Vec<DiskLocation> =
                        map.disks().iter().filter(|d| d.failed).map(|d| d.location).collect();
                    for disk in failed {
                        let _ = map.add_disk(disk, 12);
                    }
                }
                _ => {}
            }
            check(&map, &context);
            // The stored form round-trips and is checked on load.
            let json = serde_json::to_string(&map).unwrap();
            let back: SuperchunkMap = serde_json::from_str(&json).unwrap();
            assert_eq!(back, map, "{context}");
        }
    }
    assert!(matching_rounds > 0);
    assert!(
        matching_rounds < naive_rounds,
        "matching should need fewer rounds than naive: {matching_rounds} vs {naive_rounds}"
    );
}

#[test]
fn a_dual_failure_loses_one_superchunk_and_either_lstor_rebuilds_it() {
    let disks: Vec<(DiskLocation, u32)> =
        (0..8).map(|n| (DiskLocation { rack: n, node: n, disk: 0 }, 6)).collect();
    for (a, b) in (0..8).flat_map(|a| ((a + 1)..8).map(move |b| (a, b))) {
        // Twelve superchunks of 24 slots: the headroom a recovery needs.
        let mut map = SuperchunkMap::build(&disks, 1 << 20, FailureDomain::Node, 12).unwrap();
        // Content: 8 bytes per superchunk; each disk's Lstor is the XOR of its slots.
        let content: HashMap<SuperchunkId, u64> = map
            .superchunks()
            .map(|s| (s.id, s.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555))
            .collect();
        let lstor: HashMap<DiskLocation, u64> = disks
            .iter()
            .map(|d| (d.0, map.superchunks_on(&d.0).iter().fold(0, |x, (_, id)| x ^ content[id])))
            .collect();
        let (da, db) = (disks[a].0, disks[b].0);
        let shared = map.shared(&da, &db);
        let mut lost = map.fail_disk(&da).unwrap().lost;
        assert!(lost.is_empty(), "one failure loses nothing");
        lost = map.fail_disk(&db).unwrap().lost;
        assert_eq!(lost, shared.into_iter().collect::<Vec<_>>(), "pair {a},{b}");
        for &id in &lost {
            for via in [da, db] {
                let sources = map.rebuild_sources(id, &via).expect("every other slot has a mirror");
                let rebuilt = sources.iter().fold(lstor[&via], |x, (_, other, from)| {
                    assert!(*from != da && *from != db, "a source on a failed disk");
                    x ^ content[other]
                });
                assert_eq!(rebuilt, content[&id], "pair {a},{b} via {via:?}");
            }
            let pair = map.place_lost(id).unwrap();
            map.restore_lost(id, pair).unwrap();
        }
        check(&map, "after the rebuild");
        // A disk that did not hold the lost superchunk cannot rebuild it.
        if let Some(&id) = lost.first() {
            let other = disks.iter().find(|d| d.0 != da && d.0 != db).unwrap().0;
            assert!(map.rebuild_sources(id, &other).is_none());
        }
        let plan = map.plan_recovery(Receivers::Matching);
        check_rounds(&plan, "dual");
        apply(&mut map, &plan, "dual");
        // On eight disks some survivor may share with every disk that has its slot free:
        // those wait for the failed disks to be replaced, and go back to their old slots.
        assert_eq!(map.at_risk(), plan.unplaced, "pair {a},{b}");
        for disk in [da, db] {
            map.add_disk(disk, 6).unwrap();
        }
        let returns = map.plan_recovery(Receivers::Matching);
        check_rounds(&returns, "returns");
        assert!(returns.unplaced.is_empty(), "pair {a},{b}: {returns:?}");
        apply(&mut map, &returns, "returns");
        assert!(map.at_risk().is_empty() && map.lost().is_empty(), "pair {a},{b}");
    }
}

#[test]
fn a_tampered_map_is_refused_on_load() {
    let disks: Vec<(DiskLocation, u32)> =
        (0..5).map(|n| (DiskLocation { rack: n, node: n, disk: 0 }, 4)).collect();
    let map = SuperchunkMap::build(&disks, 1 << 20, FailureDomain::Node, 6).unwrap();
    let mut json: serde_json::Value = serde_json::to_value(&map).unwrap();
    // Give superchunk 1 the replicas of superchunk 0: two disks would share two.
    let first = json["superchunks"][0]["replicas"].clone();
    json["superchunks"][1]["replicas"] = first;
    json["superchunks"][1]["slot"] = json["superchunks"][0]["slot"].clone();
    let error = serde_json::from_value::<SuperchunkMap>(json).unwrap_err();
    assert!(error.to_string().contains("slot"), "{error}");
}

#[test]
fn matching_sends_one_failed_disks_superchunks_in_one_parallel_round() {
    // The assignment itself: two rows that may each take either column pick the cheaper
    // total.
    let costs = [[Some(3), Some(1)], [Some(1), Some(5)]];
    assert_eq!(min_cost_assignment(2, 2, |r, c| costs[r][c]), [Some(1), Some(0)]);
    // One disk of twelve fails; matching spreads its superchunks one per receiver per round.
    let disks: Vec<(DiskLocation, u32)> =
        (0..12).map(|n| (DiskLocation { rack: n % 3, node: n, disk: 0 }, 16)).collect();
    let mut map = SuperchunkMap::build(&disks, 1 << 20, FailureDomain::Node, 40).unwrap();
    let effect = map.fail_disk(&disks[0].0).unwrap();
    assert!(!effect.at_risk.is_empty());
    let plan = map.plan_recovery(Receivers::Matching);
    check_rounds(&plan, "twelve");
    assert!(plan.unplaced.is_empty());
    assert_eq!(plan.transfers().count(), effect.at_risk.len());
    assert_eq!(plan.rounds.len(), 1, "every transfer in parallel: {plan:?}");
    let naive = map.plan_recovery(Receivers::Naive { seed: 3 });
    assert!(naive.rounds.len() >= plan.rounds.len());
    let mut applied = map.clone();
    apply(&mut applied, &plan, "twelve");
    assert!(applied.at_risk().is_empty());
}
