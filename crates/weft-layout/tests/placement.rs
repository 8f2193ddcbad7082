//! Placement properties over many seeds, layouts and topologies, checked by an independent
//! checker (not `Placement::verify`).

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::CodeSpec;
use weft_layout::{
    min_domains_for_disjoint_groups, place, seed_for_turn, DiskLocation, DomainId, FailureDomain,
    LayoutError, Placement, StripedLayout, Topology, UnitId,
};

const LEVELS: [FailureDomain; 3] = [FailureDomain::Disk, FailureDomain::Node, FailureDomain::Rack];

/// A topology with exactly `domains` failure domains at `level`, nested at random.
fn topology(rng: &mut StdRng, level: FailureDomain, domains: usize) -> Topology {
    let mut disks = Vec::new();
    let racks = rng.gen_range(1..=4u32);
    let mut node = 0;
    match level {
        FailureDomain::Rack => {
            for rack in 0..domains as u32 {
                for _ in 0..rng.gen_range(1..=3) {
                    for disk in 0..rng.gen_range(1..=3) {
                        disks.push(DiskLocation { rack, node, disk });
                    }
                    node += 1;
                }
            }
        }
        FailureDomain::Node => {
            for _ in 0..domains {
                let rack = rng.gen_range(0..racks);
                for disk in 0..rng.gen_range(1..=3) {
                    disks.push(DiskLocation { rack, node, disk });
                }
                node += 1;
            }
        }
        FailureDomain::Disk => {
            let mut left = domains as u32;
            while left > 0 {
                let rack = rng.gen_range(0..racks);
                let count = rng.gen_range(1..=3).min(left);
                for disk in 0..count {
                    disks.push(DiskLocation { rack, node, disk });
                }
                left -= count;
                node += 1;
            }
        }
    }
    disks.shuffle(rng);
    let topology = Topology::new(disks).unwrap();
    assert_eq!(topology.domains(level).len(), domains);
    topology
}

fn random_layout(rng: &mut StdRng) -> StripedLayout {
    let cell = rng.gen_range(1..=3);
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: rng.gen_range(1..=6), r: rng.gen_range(1..=3) },
        stripe_width: rng.gen_range(1..=8),
        cell_bytes: cell,
        block_bytes: cell * rng.gen_range(1..=3),
    };
    layout.validate().unwrap();
    layout
}

fn domain_sets(placement: &Placement, units: &[UnitId]) -> Vec<DomainId> {
    let level = placement.failure_domain();
    units.iter().map(|u| placement.disk_of(*u).unwrap().domain(level)).collect()
}

fn distinct(domains: &[DomainId]) -> bool {
    domains.iter().collect::<BTreeSet<_>>().len() == domains.len()
}

/// Rules (a) and (b), and that every stored unit has a disk of the topology.
fn check_rules(placement: &Placement, topology: &Topology, context: &str) {
    let layout = *placement.layout();
    let size = placement.object_size();
    let units: Vec<(UnitId, DiskLocation)> = placement.units().collect();
    let expected = layout.data_blocks(size) + layout.groups(size) * layout.r();
    assert_eq!(units.len(), expected, "{context}: every unit placed once");
    for (unit, disk) in &units {
        assert!(topology.disks().contains(disk), "{context}: {unit} on unknown {disk:?}");
    }
    for stripe in 0..layout.stripes(size) {
        let blocks: Vec<UnitId> = layout.stripe_blocks(size, stripe).map(UnitId::Data).collect();
        assert!(distinct(&domain_sets(placement, &blocks)), "{context}: rule (a), stripe {stripe}");
    }
    for group in 0..layout.groups(size) {
        let units = layout.group_units(size, group);
        assert!(distinct(&domain_sets(placement, &units)), "{context}: rule (b), group {group}");
    }
}

/// Rule (c): successive groups share no failure domain.
fn successive_groups_disjoint(placement: &Placement) -> bool {
    let layout = placement.layout();
    let size = placement.object_size();
    (1..layout.groups(size)).all(|g| {
        let before: BTreeSet<DomainId> =
            domain_sets(placement, &layout.group_units(size, g - 1)).into_iter().collect();
        domain_sets(placement, &layout.group_units(size, g)).iter().all(|d| !before.contains(d))
    })
}

#[test]
fn rules_hold_over_many_seeds_and_topologies() {
    let mut rng = StdRng::seed_from_u64(0x91ace);
    let (mut placed, mut refused, mut disjoint_checked) = (0, 0, 0);
    for case in 0..3000 {
        let layout = random_layout(&mut rng);
        let level = LEVELS[case % 3];
        let n = layout.n();
        let needed = n.max(layout.stripe_width);
        let domains = rng.gen_range(needed.saturating_sub(2).max(1)..=3 * n + 5);
        let topology = topology(&mut rng, level, domains);
        let size = rng.gen_range(0..=300u64);
        let seed = rng.gen();
        let context = format!("case {case}: {layout:?} {level} domains {domains} size {size}");
        match place(&layout, size, &topology, seed, level) {
            Err(LayoutError::TooFewDomains { available, needed: need, .. }) => {
                assert!(domains < needed, "{context}: refused with enough domains");
                assert_eq!((available, need), (domains, needed), "{context}");
                refused += 1;
            }
            Err(other) => panic!("{context}: {other}"),
            Ok(placement) => {
                assert!(domains >= needed, "{context}: placed on too few domains");
                check_rules(&placement, &topology, &context);
                assert_eq!(placement.verify(), Ok(()), "{context}");
                if domains >= min_domains_for_disjoint_groups(&layout) {
                    assert!(successive_groups_disjoint(&placement), "{context}: rule (c)");
                    disjoint_checked += 1;
                }
                // Deterministic, and blind to the order disks are listed in.
                let mut shuffled = topology.disks().to_vec();
                shuffled.shuffle(&mut rng);
                let again = place(&layout, size, &Topology::new(shuffled).unwrap(), seed, level);
                assert_eq!(again.as_ref(), Ok(&placement), "{context}: not deterministic");
                placed += 1;
            }
        }
    }
    // The generator must exercise every branch, or the assertions above prove little.
    assert!(
        placed > 1500 && refused > 100 && disjoint_checked > 500,
        "{placed} {refused} {disjoint_checked}"
    );
}

#[test]
fn disjoint_groups_bound_is_tight_enough_to_matter() {
    // Below the bound, (c) is best effort; check the generator reaches cases where it fails,
    // so the bound is not vacuous, and that (a) and (b) still hold there.
    let mut rng = StdRng::seed_from_u64(3);
    let mut broken = 0;
    for case in 0..500 {
        let layout = random_layout(&mut rng);
        let level = FailureDomain::Node;
        let domains = layout.n().max(layout.stripe_width);
        let topology = topology(&mut rng, level, domains);
        let placement = place(&layout, 200, &topology, case, level).unwrap();
        check_rules(&placement, &topology, &format!("case {case}"));
        if !successive_groups_disjoint(&placement) {
            broken += 1;
        }
    }
    assert!(broken > 0);
}

#[test]
fn too_few_domains_is_refused_with_the_numbers() {
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 6, r: 3 },
        stripe_width: 4,
        cell_bytes: 1,
        block_bytes: 4,
    };
    let mut rng = StdRng::seed_from_u64(1);
    let topology = topology(&mut rng, FailureDomain::Node, 8);
    let error = place(&layout, 100, &topology, 0, FailureDomain::Node).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("8 node failure domains"), "{message}");
    assert!(message.contains("needs 9"), "{message}");
    let wide = StripedLayout { stripe_width: 12, ..layout };
    let topology = topology_with(10);
    let message = place(&wide, 100, &topology, 0, FailureDomain::Node).unwrap_err().to_string();
    assert!(message.contains("needs 12") && message.contains("stripe width 12"), "{message}");
    // Twelve disks on ten nodes suffice at disk level only.
    assert!(place(&wide, 100, &topology, 0, FailureDomain::Disk).is_ok());
}

/// Ten nodes, the first two with two disks: 12 disks.
fn topology_with(nodes: u32) -> Topology {
    let mut disks = Vec::new();
    for node in 0..nodes {
        for disk in 0..if node < 2 { 2 } else { 1 } {
            disks.push(DiskLocation { rack: node % 3, node, disk });
        }
    }
    Topology::new(disks).unwrap()
}

#[test]
fn replacements_keep_the_rules() {
    let mut rng = StdRng::seed_from_u64(0xdead);
    let mut replaced = 0;
    for case in 0..600 {
        let layout = random_layout(&mut rng);
        let level = LEVELS[case % 3];
        let needed = layout.n().max(layout.stripe_width);
        let domains = rng.gen_range(needed..=3 * layout.n() + 5);
        let topology = topology(&mut rng, level, domains);
        let size = rng.gen_range(1..=200u64);
        let mut placement = place(&layout, size, &topology, rng.gen(), level).unwrap();
        let units: Vec<_> = placement.units().collect();
        for _ in 0..5 {
            let (unit, old) = units[rng.gen_range(0..units.len())];
            let old = placement.disk_of(unit).unwrap_or(old);
            // A failed disk, a failed node or a failed rack, whatever the placement level.
            let failed = match rng.gen_range(0..3) {
                0 => DomainId::Disk { node: old.node, disk: old.disk },
                1 => DomainId::Node(old.node),
                _ => DomainId::Rack(old.rack),
            };
            let context = format!("case {case}: {layout:?} {level} {unit} failed {failed:?}");
            match placement.replacement_for(&topology, unit, &[failed]) {
                Ok(disk) => {
                    assert!(!disk.is_in(&failed) && disk != old, "{context}: {disk:?}");
                    assert!(topology.disks().contains(&disk), "{context}");
                    placement.relocate(unit, disk).unwrap();
                    assert_eq!(placement.disk_of(unit), Some(disk));
                    check_rules(&placement, &topology, &context);
                    replaced += 1;
                }
                Err(LayoutError::NoReplacement { .. }) => {
                    // Only when no disk outside the failure and the peers' domains exists.
                    let peers: BTreeSet<DomainId> = placement
                        .peers(unit)
                        .iter()
                        .map(|p| placement.disk_of(*p).unwrap().domain(level))
                        .collect();
                    let free = topology.disks().iter().any(|d| {
                        !d.is_in(&failed) && *d != old && !peers.contains(&d.domain(level))
                    });
                    assert!(!free, "{context}: a free disk exists but none was offered");
                }
                Err(other) => panic!("{context}: {other}"),
            }
        }
    }
    assert!(replaced > 1000, "{replaced}");
}

#[test]
fn a_full_group_on_exactly_n_nodes_cannot_lose_a_node() {
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 4, r: 2 },
        stripe_width: 3,
        cell_bytes: 1,
        block_bytes: 2,
    };
    let disks =
        (0..6).flat_map(|node| (0..2).map(move |disk| DiskLocation { rack: 0, node, disk }));
    let topology = Topology::new(disks.collect()).unwrap();
    let placement = place(&layout, 8, &topology, 9, FailureDomain::Node).unwrap();
    let unit = UnitId::Parity { group: 0, index: 1 };
    let old = placement.disk_of(unit).unwrap();
    let error = placement.replacement_for(&topology, unit, &[DomainId::Node(old.node)]);
    assert!(matches!(error, Err(LayoutError::NoReplacement { .. })), "{error:?}");
    // Losing only the disk leaves the node's other disk, which keeps the rules.
    let failed = DomainId::Disk { node: old.node, disk: old.disk };
    let disk = placement.replacement_for(&topology, unit, &[failed]).unwrap();
    assert_eq!((disk.node, disk.disk), (old.node, 1 - old.disk));
    // Moving a unit onto a peer's node is refused and changes nothing.
    let mut moved = placement.clone();
    let peer = moved.disk_of(UnitId::Data(0)).unwrap();
    assert!(matches!(moved.relocate(unit, peer), Err(LayoutError::RuleBroken { .. })));
    assert_eq!(moved, placement);
}

#[test]
fn units_on_partitions_the_units_and_load_is_spread() {
    let mut rng = StdRng::seed_from_u64(5);
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 6, r: 3 },
        stripe_width: 4,
        cell_bytes: 1,
        block_bytes: 1,
    };
    let topology = topology(&mut rng, FailureDomain::Node, 20);
    let placement = place(&layout, 6000, &topology, 11, FailureDomain::Node).unwrap();
    let total = placement.unit_count();
    assert_eq!(placement.units().count(), total);
    let mut per_node = BTreeMap::new();
    for domain in topology.domains(FailureDomain::Node) {
        let units = placement.units_on(&domain);
        for unit in &units {
            assert!(placement.disk_of(*unit).unwrap().is_in(&domain));
        }
        per_node.insert(domain, units.len());
    }
    assert_eq!(per_node.values().sum::<usize>(), total);
    let mean = total / 20;
    for (node, count) in &per_node {
        assert!(
            *count > mean * 3 / 4 && *count < mean * 5 / 4,
            "{node:?} holds {count} of {total}"
        );
    }
    // Disks within a node share its load too.
    for disk in topology.domains(FailureDomain::Disk) {
        assert!(!placement.units_on(&disk).is_empty(), "{disk:?} holds nothing");
    }
    // The seed rotates where objects start: over many seeds every node holds some block 0.
    let starts: BTreeSet<u32> = (0..400)
        .map(|seed| {
            let placement = place(&layout, 10, &topology, seed, FailureDomain::Node).unwrap();
            placement.disk_of(UnitId::Data(0)).unwrap().node
        })
        .collect();
    assert_eq!(starts.len(), 20);
}

#[test]
fn successive_turns_spread_small_objects_evenly_where_random_seeds_do_not() {
    let mut rng = StdRng::seed_from_u64(9);
    // Objects of two data blocks under rs(6,3) striped 2 wide (Okapi's 12 MB reads): each
    // puts its two data blocks on two neighbouring domains of the rotation.
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 6, r: 3 },
        stripe_width: 2,
        cell_bytes: 1,
        block_bytes: 8,
    };
    for (level, domains) in [(FailureDomain::Node, 19), (FailureDomain::Rack, 11)] {
        let topology = topology(&mut rng, level, domains);
        let objects = 10 * domains as u64;
        let data_per_domain = |seed_of: &dyn Fn(u64) -> u64| {
            let mut count: BTreeMap<DomainId, usize> = BTreeMap::new();
            for object in 0..objects {
                let placement = place(&layout, 16, &topology, seed_of(object), level).unwrap();
                for block in 0..2 {
                    let disk = placement.disk_of(UnitId::Data(block)).unwrap();
                    *count.entry(disk.domain(level)).or_default() += 1;
                }
                check_rules(&placement, &topology, "turned seed");
            }
            let (low, high) = (count.values().min().copied(), count.values().max().copied());
            (count.len(), low.unwrap_or(0), high.unwrap_or(0))
        };
        // Turns 0, 1, 2, … from any base seed: every domain holds exactly 20 data blocks.
        let base = rng.gen::<u64>();
        let turned = data_per_domain(&|object| {
            seed_for_turn(&topology, level, base.wrapping_mul(object + 1), object + 7)
        });
        assert_eq!(turned, (domains, 20, 20), "{level}");
        // Seeds drawn at random spread as balls into bins: some domain holds far more.
        let random = data_per_domain(&|object| base ^ object.wrapping_mul(0x9E37_79B9));
        assert!(random.2 - random.1 > 4, "{level}: random seeds gave {random:?}");
    }
}

#[test]
fn placement_round_trips_through_json() {
    let mut rng = StdRng::seed_from_u64(8);
    let layout = random_layout(&mut rng);
    let topology = topology(&mut rng, FailureDomain::Rack, 3 * layout.n().max(layout.stripe_width));
    let placement = place(&layout, 77, &topology, 1, FailureDomain::Rack).unwrap();
    let json = serde_json::to_string(&placement).unwrap();
    assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), placement);
}

#[test]
fn bad_topologies_are_refused() {
    let disk = |rack, node, disk| DiskLocation { rack, node, disk };
    assert!(matches!(Topology::new(vec![]), Err(LayoutError::Topology { .. })));
    let twice = Topology::new(vec![disk(0, 1, 0), disk(0, 1, 0)]).unwrap_err().to_string();
    assert!(twice.contains("listed twice"), "{twice}");
    let racks = Topology::new(vec![disk(0, 1, 0), disk(1, 1, 1)]).unwrap_err().to_string();
    assert!(racks.contains("racks 0 and 1"), "{racks}");
}

/// A layout of 1-byte blocks, so an object of N bytes has about N data blocks.
fn tiny_blocks(rng: &mut StdRng) -> StripedLayout {
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: rng.gen_range(1..=8), r: rng.gen_range(1..=3) },
        stripe_width: rng.gen_range(1..=6),
        cell_bytes: 1,
        block_bytes: 1,
    };
    layout.validate().unwrap();
    layout
}

/// Data blocks placed by `placement` on a different disk than by `before`.
fn moved_blocks(
    before: &Placement,
    after: &Placement,
) -> BTreeMap<usize, (DiskLocation, DiskLocation)> {
    let blocks = before.layout().data_blocks(before.object_size());
    (0..blocks)
        .filter_map(|x| {
            let (from, to) = (before.disk_of(UnitId::Data(x))?, after.disk_of(UnitId::Data(x))?);
            (from != to).then_some((x, (from, to)))
        })
        .collect()
}

#[test]
fn large_objects_repeat_one_period_and_keep_every_rule() {
    let mut rng = StdRng::seed_from_u64(0x711e);
    let mut tiled = 0;
    for case in 0..60 {
        let layout = tiny_blocks(&mut rng);
        let level = LEVELS[case % 3];
        let needed = min_domains_for_disjoint_groups(&layout).max(layout.stripe_width);
        let domains = rng.gen_range(needed..needed + 12);
        let topology = topology(&mut rng, level, domains);
        let size = rng.gen_range(5_000..40_000u64);
        let context = format!("case {case}: {layout:?}, {size} B on {} {level}s", needed);
        let placement = place(&layout, size, &topology, rng.gen(), level).unwrap();
        check_rules(&placement, &topology, &context);
        let (period, data, parity, moved) = placement.pattern();
        assert!(moved.is_empty());
        let Some(period) = period else { continue };
        tiled += 1;
        assert_eq!(period, weft_layout::pattern_period(&layout, size, topology.disks().len()));
        assert_eq!((data.len(), parity.len()), (period * layout.k(), period * layout.r()));
        assert_eq!(data.len() % layout.stripe_width, 0, "{context}: a period is whole stripes");
        assert!(period * layout.n() >= weft_layout::PATTERN_UNITS, "{context}");
        assert!(period < layout.groups(size), "{context}");
        // Every group repeats the disks of the group one period before it.
        for (unit, disk) in placement.units() {
            let (group, position) = layout.unit_position(unit);
            if group >= period && layout.group_blocks(size, group).len() == layout.k() {
                let twin = layout.unit(group - period, position);
                assert_eq!(placement.disk_of(twin), Some(disk), "{context}: {unit}");
            }
        }
        // (c) holds inside a period (the topology has the domains it needs), and across
        // period boundaries with n domains more.
        for g in 1..layout.groups(size) {
            if g % period == 0 && domains < needed + layout.n() {
                continue; // across a period boundary (c) needs n more domains
            }
            let before: BTreeSet<DomainId> =
                domain_sets(&placement, &layout.group_units(size, g - 1)).into_iter().collect();
            let now = domain_sets(&placement, &layout.group_units(size, g));
            assert!(now.iter().all(|d| !before.contains(d)), "{context}: (c) at group {g}");
        }
        let json = serde_json::to_string(&placement).unwrap();
        assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), placement, "{context}");
    }
    assert!(tiled > 40, "only {tiled} tiled placements");
}

#[test]
fn a_five_tib_object_costs_one_period_of_memory_and_of_json() {
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 6, r: 3 },
        stripe_width: 4,
        cell_bytes: 1 << 20,
        block_bytes: 8 << 20,
    };
    let topology = topology_with(40);
    let size = weft_layout::MAX_OBJECT_BYTES;
    let placement = place(&layout, size, &topology, 7, FailureDomain::Node).unwrap();
    let units = layout.data_blocks(size) + layout.groups(size) * 3;
    assert_eq!(placement.unit_count(), units);
    assert!(units > 900_000, "{units}");
    let json = serde_json::to_vec(&placement).unwrap();
    assert!(json.len() < 256 << 10, "a placement of {units} units is {} B of JSON", json.len());
    // The last units exist and sit where the period says.
    let last = UnitId::Data(layout.data_blocks(size) - 1);
    let period = placement.pattern().0.unwrap();
    let twin = UnitId::Data(layout.data_blocks(size) - 1 - period * layout.k());
    assert_eq!(placement.disk_of(last), placement.disk_of(twin));
    assert_eq!(placement.disk_of(UnitId::Data(layout.data_blocks(size))), None);
    let groups = layout.groups(size);
    assert!(placement.disk_of(UnitId::Parity { group: groups - 1, index: 2 }).is_some());
    assert_eq!(placement.disk_of(UnitId::Parity { group: groups, index: 0 }), None);
}

#[test]
fn a_tiled_placement_records_each_rebuilt_unit_and_forgets_it_when_back() {
    let mut rng = StdRng::seed_from_u64(21);
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 4, r: 2 },
        stripe_width: 3,
        cell_bytes: 1,
        block_bytes: 1,
    };
    let topology = topology(&mut rng, FailureDomain::Node, 14);
    let mut placement = place(&layout, 30_000, &topology, 3, FailureDomain::Node).unwrap();
    let original = placement.clone();
    let period = placement.pattern().0.expect("tiled");
    // A node fails: each of its units is rebuilt elsewhere, one move recorded per unit.
    let failed = topology.domains(FailureDomain::Node)[5];
    let lost = placement.units_on(&failed);
    assert!(lost.len() > 1000);
    for unit in &lost {
        let disk = placement.replacement_for(&topology, *unit, &[failed]).unwrap();
        placement.relocate(*unit, disk).unwrap();
    }
    check_rules(&placement, &topology, "after the rebuild");
    assert!(placement.units_on(&failed).is_empty());
    assert_eq!(placement.pattern().3.len(), lost.len());
    assert_eq!(placement.pattern().0, Some(period));
    let json = serde_json::to_string(&placement).unwrap();
    assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), placement);
    // Units moved back to the disk their period gives them are no longer recorded.
    for unit in &lost {
        placement.relocate(*unit, original.disk_of(*unit).unwrap()).unwrap();
    }
    assert_eq!(placement, original);
    // A move that breaks a rule is refused: nothing recorded.
    let unit = UnitId::Data(period * layout.k() + 1);
    let peer = placement.disk_of(UnitId::Data(period * layout.k())).unwrap();
    assert!(placement.relocate(unit, peer).is_err());
    assert_eq!(placement, original);
}

#[test]
fn regrouping_a_tiled_placement_mends_around_moved_blocks() {
    let mut rng = StdRng::seed_from_u64(34);
    let mut relocating = 0;
    for case in 0..24 {
        let layout = StripedLayout {
            code: CodeSpec::Rs { k: rng.gen_range(2..=4), r: rng.gen_range(1..=2) },
            stripe_width: rng.gen_range(2..=4),
            cell_bytes: 1,
            block_bytes: 1,
        };
        let new = StripedLayout {
            code: CodeSpec::Rs { k: rng.gen_range(2..=6), r: rng.gen_range(1..=3) },
            ..layout
        };
        let level = FailureDomain::Node;
        // Enough domains that a moved block always finds one outside its new group (k' − 1
        // others) and its stripe (W − 1 others); fewer may be refused, as untiled ones are.
        let least = new.n().max(layout.n()).max(new.k() + layout.stripe_width);
        let domains = least + rng.gen_range(0..4);
        let topology = topology(&mut rng, level, domains);
        let size = rng.gen_range(20_000..30_000u64);
        let mut placement = place(&layout, size, &topology, case, level).unwrap();
        assert!(placement.pattern().0.is_some());
        // Some blocks were rebuilt elsewhere first.
        let failed = topology.domains(level)[rng.gen_range(0..domains)];
        for unit in placement.units_on(&failed).into_iter().step_by(3) {
            if let Ok(disk) = placement.replacement_for(&topology, unit, &[failed]) {
                placement.relocate(unit, disk).unwrap();
            }
        }
        let context = format!("case {case}: {layout:?} to {new:?}, {domains} nodes");
        let (after, relocations) = placement.regrouped(&new, &topology).unwrap();
        check_rules(&after, &topology, &context);
        // The relocations are exactly the data blocks that changed disk, from where to where.
        let listed: BTreeMap<usize, (DiskLocation, DiskLocation)> =
            relocations.iter().map(|r| (r.block, (r.from, r.to))).collect();
        assert_eq!(listed.len(), relocations.len(), "{context}: a block relocated twice");
        assert_eq!(listed, moved_blocks(&placement, &after), "{context}");
        relocating += usize::from(!relocations.is_empty());
        let json = serde_json::to_vec(&after).unwrap();
        assert!(json.len() < 1 << 20, "{context}: {} B", json.len());
        assert_eq!(serde_json::from_slice::<Placement>(&json).unwrap(), after, "{context}");
    }
    assert!(relocating > 4, "only {relocating} regroups relocated anything");
}

#[test]
fn a_stored_pattern_that_breaks_its_invariants_is_refused() {
    let layout = StripedLayout {
        code: CodeSpec::Rs { k: 4, r: 2 },
        stripe_width: 2,
        cell_bytes: 1,
        block_bytes: 1,
    };
    let topology = topology_with(10);
    let placement = place(&layout, 20_000, &topology, 1, FailureDomain::Node).unwrap();
    let value = serde_json::to_value(&placement).unwrap();
    let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut bad = value.clone();
        edit(&mut bad);
        serde_json::from_value::<Placement>(bad).unwrap_err().to_string()
    };
    let period = value["period"].as_u64().unwrap();
    assert!(refused(&|v| v["period"] = (period + 1).into()).contains("disks given"));
    assert!(refused(&|v| v["period"] = 100_000.into()).contains("shorter than the object"));
    assert!(refused(&|v| {
        v["data"].as_array_mut().unwrap().pop();
    })
    .contains("disks given"));
    let peer = value["data"][1].clone();
    assert!(refused(&|v| v["data"][0] = peer.clone()).contains("share"));
    let far = serde_json::json!([[{"Data": 10_000_000}, value["data"][0]]]);
    assert!(refused(&|v| v["moved"] = far.clone()).contains("not in this placement"));
}
