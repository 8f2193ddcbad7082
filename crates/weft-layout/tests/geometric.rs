//! Properties of the geometric layout over many random cases: Algorithm 1's partition, the
//! placement groups, and the per-object record's encoding.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_codes::CodeSpec;
use weft_layout::geometric::{classes, group_spread, partition, placement_groups};
use weft_layout::{DiskLocation, FailureDomain, GeoPlace, GeometricPolicy, LayoutError, Topology};

#[test]
fn partitions_sum_to_the_size_with_every_class_used_and_a_short_front() {
    let mut rng = StdRng::seed_from_u64(19);
    for _ in 0..20_000 {
        let s0 = rng.gen_range(1..=64u64) << rng.gen_range(0..20);
        let q = rng.gen_range(2..=4u64);
        let chunk_max = s0 * q.pow(rng.gen_range(0..8));
        let size = match rng.gen_range(0..3) {
            0 => rng.gen_range(0..4 * s0),
            1 => rng.gen_range(0..1000 * s0),
            _ => rng.gen_range(0..1u64 << 42).min(chunk_max * 100_000),
        };
        let p = partition(size, s0, q, chunk_max);
        let chunks = p.chunks();
        let total: u64 = chunks.iter().map(|c| c.bytes).sum();
        assert_eq!(p.front + total, size, "size {size} s0 {s0} q {q}");
        assert!(p.front < s0, "front {} ≥ s0 {s0}", p.front);
        assert!(p.counts.iter().all(|&a| a >= 1), "a zero coefficient: {:?}", p.counts);
        let all = classes(s0, q, chunk_max);
        assert_eq!(p.sizes[..], all[..p.sizes.len()], "classes are used smallest first");
        // Object order: front, then chunks contiguous and non-decreasing in size.
        let mut at = p.front;
        for pair in chunks.windows(2) {
            assert!(pair[0].bytes <= pair[1].bytes);
        }
        for chunk in &chunks {
            assert_eq!(chunk.object_offset, at);
            assert!(chunk.bytes <= chunk_max && chunk.bytes % s0 == 0);
            at += chunk.bytes;
        }
        // Pass 1 stops only when the next class no longer fits (or the cap is reached).
        if p.sizes.len() < all.len() {
            let first_pass: u64 = p.sizes.iter().sum();
            assert!(size - first_pass < all[p.sizes.len()]);
        }
    }
}

fn clay_policy(s0: u64) -> GeometricPolicy {
    GeometricPolicy {
        code: CodeSpec::parse("clay(10,4)").unwrap(),
        small_code: CodeSpec::parse("rs(10,4)").unwrap(),
        s0,
        q: 2,
        chunk_max: 256 << 20,
        pgs: 256,
    }
}

#[test]
fn parameters_that_cannot_work_are_refused_with_the_reason() {
    let good = clay_policy(4 << 20);
    good.validate().unwrap();
    let cases: Vec<(GeometricPolicy, &str)> = vec![
        (GeometricPolicy { s0: 100, ..good }, "multiple of 16384 bytes"),
        (GeometricPolicy { s0: 0, ..good }, "multiple of 16384 bytes"),
        (GeometricPolicy { q: 1, ..good }, "q must be at least 2"),
        (GeometricPolicy { chunk_max: 1 << 20, ..good }, "at least s0"),
        (GeometricPolicy { chunk_max: 2 << 30, ..good }, "at most"),
        (GeometricPolicy { pgs: 0, ..good }, "placement groups"),
        (GeometricPolicy { small_code: CodeSpec::parse("rs(6,3)").unwrap(), ..good }, "k and r"),
    ];
    for (policy, why) in cases {
        match policy.validate() {
            Err(LayoutError::Geometric { reason }) => {
                assert!(reason.contains(why), "{reason:?} should say {why:?}")
            }
            other => panic!("{policy:?} should be refused ({why}), got {other:?}"),
        }
    }
}

#[test]
fn places_round_trip_for_random_objects() {
    let mut rng = StdRng::seed_from_u64(7);
    let policy = clay_policy(4 << 20);
    for _ in 0..2000 {
        let size = rng.gen_range(0..8u64 << 30);
        let partition = policy.partition(size);
        let place = GeoPlace {
            pg: rng.gen_range(0..4096),
            member: rng.gen_range(0..10),
            size,
            crc32c: rng.gen(),
            front: (partition.front > 0).then(|| weft_layout::geometric::FrontRef {
                stripe: rng.gen_range(0..1 << 40),
                block: rng.gen_range(0..10),
                offset: rng.gen_range(0..1 << 30),
            }),
            chunks: (0..partition.chunk_count())
                .map(|_| weft_layout::geometric::ChunkRef {
                    stripe: rng.gen_range(0..1 << 20),
                    block: rng.gen_range(0..10),
                })
                .collect(),
        };
        assert_eq!(GeoPlace::decode(&place.encode(), &policy), Ok(place));
    }
}

/// `nodes` nodes of `disks` disks each, racks of 4 nodes.
fn cluster(nodes: u32, disks: u32) -> Topology {
    let mut all = Vec::new();
    for node in 0..nodes {
        for disk in 0..disks {
            all.push(DiskLocation { rack: node / 4, node, disk });
        }
    }
    Topology::new(all).unwrap()
}

#[test]
fn placement_groups_keep_domains_apart_and_spread_load_and_partners() {
    for (nodes, disks, width, parity, count) in
        [(14, 1, 14, 4, 64), (19, 1, 14, 4, 256), (24, 2, 14, 4, 256), (8, 1, 6, 3, 100)]
    {
        let topology = cluster(nodes, disks);
        let groups =
            placement_groups(&topology, FailureDomain::Node, width, parity, count, 42).unwrap();
        assert_eq!(groups.len(), count);
        for group in &groups {
            assert_eq!(group.len(), width);
            let domains: BTreeSet<u32> = group.iter().map(|d| d.node).collect();
            assert_eq!(domains.len(), width, "two members on one node: {group:?}");
        }
        // Load: every disk in about count·width/disks groups.
        let spread = group_spread(&groups);
        let total_disks = (nodes * disks) as usize;
        assert_eq!(spread.len(), total_disks, "every disk is in some group");
        let loads: Vec<usize> = spread.values().map(|(n, _)| *n).collect();
        let (lo, hi) = (*loads.iter().min().unwrap(), *loads.iter().max().unwrap());
        assert!(hi - lo <= 2, "group counts per disk from {lo} to {hi}");
        // Partners: a disk's groups reach every disk of another node once they can.
        for (disk, (groups_of, partners)) in &spread {
            let reachable = total_disks - disks as usize; // disks of other nodes
            let possible = reachable.min(groups_of * (width - 1));
            assert!(
                *partners * 10 >= possible * 9,
                "{disk:?}: {partners} partners of {possible} possible ({nodes} nodes × {disks})"
            );
        }
        // Roles: every disk holds parity in about its share of its groups.
        let mut parity_of = std::collections::BTreeMap::<DiskLocation, usize>::new();
        for group in &groups {
            for d in &group[width - parity..] {
                *parity_of.entry(*d).or_default() += 1;
            }
        }
        for (disk, (groups_of, _)) in &spread {
            let expected = *groups_of as f64 * parity as f64 / width as f64;
            let got = parity_of.get(disk).copied().unwrap_or(0) as f64;
            assert!((got - expected).abs() <= 2.0 + 0.2 * expected, "{disk:?}: {got} parity");
        }
        // Deterministic.
        let again =
            placement_groups(&topology, FailureDomain::Node, width, parity, count, 42).unwrap();
        assert_eq!(groups, again);
    }
    let small = cluster(10, 3);
    assert!(matches!(
        placement_groups(&small, FailureDomain::Node, 14, 4, 8, 1),
        Err(LayoutError::TooFewDomains { available: 10, needed: 14, .. })
    ));
}
