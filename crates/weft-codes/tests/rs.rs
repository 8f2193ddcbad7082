//! Reed-Solomon (`rs(k,r)`) through the `Code` trait: every erasure pattern of the small codes,
//! sampled patterns of the large ones, incremental and delta encoding, exact repair plans,
//! input validation, and parity checked against the definition `Σ_j cauchy[k+i][j]·data_j`.
//!
//! All randomness comes from `StdRng::seed_from_u64` with a fixed seed per test, so a failure
//! reproduces exactly. Unit lengths are mostly not multiples of 64 so SIMD tails are exercised.

mod common;
use common::*;

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::{
    Code, CodeError, CodeSpec, LinearCode, ReadRange, RepairPlan, MAX_CACHED_DECODINGS,
    UPDATE_CHUNK_BYTES,
};

/// Lengths used by the erasure-pattern tests: none a multiple of 64, one a single byte.
const PATTERN_LENS: [usize; 4] = [130, 96, 1, 200];

fn rs(k: usize, r: usize) -> Arc<dyn Code> {
    let code = CodeSpec::parse(&format!("rs({k},{r})")).unwrap().build().unwrap();
    assert_eq!((code.data_units(), code.parity_units(), code.total_units()), (k, r, k + r));
    code
}

/// Decodes every pattern of at most r lost units; groups of several lengths take turns.
fn every_pattern_decodes(k: usize, r: usize, seed: u64) {
    let code = rs(k, r);
    let n = k + r;
    let mut rng = StdRng::seed_from_u64(seed);
    let groups: Vec<Vec<Vec<u8>>> =
        PATTERN_LENS.iter().map(|&len| random_group(&*code, &mut rng, len)).collect();
    let mut checked = 0;
    for m in 0..=r {
        let patterns = combinations(n, m);
        assert_eq!(patterns.len(), binomial(n, m), "pattern enumeration of {m} of {n}");
        for lost in &patterns {
            let units = &groups[checked % groups.len()];
            decode_and_check(&*code, &mut rng, units, lost, &format!("rs({k},{r})"));
            checked += 1;
        }
    }
    assert_eq!(checked, (0..=r).map(|m| binomial(n, m)).sum::<usize>());
}

#[test]
fn rs_6_3_every_pattern_of_at_most_r_lost() {
    every_pattern_decodes(6, 3, 63);
}

#[test]
fn rs_10_4_every_pattern_of_at_most_r_lost() {
    every_pattern_decodes(10, 4, 104);
}

#[test]
fn small_odd_shapes_every_pattern_of_at_most_r_lost() {
    for (k, r) in [(5, 3), (7, 2), (1, 1), (2, 5)] {
        every_pattern_decodes(k, r, (k * 100 + r) as u64);
    }
}

#[test]
fn rs_12_4_and_rs_16_4_every_pattern_and_cache_eviction() {
    every_pattern_decodes(12, 4, 124);
    // rs(16,4) has more patterns of ≤ 4 lost (6195) than the decode cache holds, so this walks
    // through at least one eviction; patterns seen before the eviction must still decode.
    let (k, r) = (16, 4);
    let n = k + r;
    let patterns: Vec<Vec<usize>> = (1..=r).flat_map(|m| combinations(n, m)).collect();
    assert!(patterns.len() > MAX_CACHED_DECODINGS);
    let code = rs(k, r);
    let mut rng = StdRng::seed_from_u64(164);
    let units = random_group(&*code, &mut rng, 130);
    for lost in &patterns {
        decode_and_check(&*code, &mut rng, &units, lost, "rs(16,4)");
    }
    // Again with new data: early patterns were evicted, late ones are cache hits.
    let units = random_group(&*code, &mut rng, 77);
    for lost in patterns.iter().take(200).chain(patterns.iter().rev().take(200)) {
        decode_and_check(&*code, &mut rng, &units, lost, "rs(16,4) second pass");
    }
}

/// Random patterns of 1..=r lost units, always including the extremes: the first r units
/// (data only when r ≤ k), the last r (parity only) and a mix straddling data and parity.
fn sampled_patterns(k: usize, r: usize, count: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
    let n = k + r;
    let mut patterns = vec![
        (0..r).collect::<Vec<_>>(),
        (k..n).collect(),
        (k.saturating_sub(r / 2)..(k.saturating_sub(r / 2) + r).min(n)).collect(),
    ];
    for _ in 0..count {
        // Half the samples lose the maximum, the hardest case.
        let m = if rng.gen_bool(0.5) { r } else { rng.gen_range(1..=r) };
        let mut lost = rand::seq::index::sample(rng, n, m).into_vec();
        lost.sort_unstable();
        patterns.push(lost);
    }
    patterns
}

#[test]
fn large_codes_sampled_patterns() {
    let mut rng = StdRng::seed_from_u64(2004);
    for (k, r, count, len) in [(20, 4, 3000, 130), (50, 20, 150, 130), (200, 56, 6, 67)] {
        let code = rs(k, r);
        let units = random_group(&*code, &mut rng, len);
        for lost in sampled_patterns(k, r, count, &mut rng) {
            decode_and_check(&*code, &mut rng, &units, &lost, &format!("rs({k},{r})"));
        }
    }
}

/// Checks that losing `lost` (more than r units) is refused by `is_decodable` and by `decode`
/// with `NotDecodable` naming the lost units, and that `decode` left every unit as it was.
fn check_not_decodable(code: &dyn Code, rng: &mut StdRng, units: &[Vec<u8>], lost: &[usize]) {
    let mut order = lost.to_vec();
    order.shuffle(rng);
    assert!(!code.is_decodable(&order), "{:?}: {order:?} must not be decodable", code.spec());
    let mut work = units.to_vec();
    for &u in lost {
        rng.fill(&mut work[u][..]);
    }
    let before = work.clone();
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
    let error = code.decode(&mut refs, &order).expect_err("decode must fail");
    let mut sorted = lost.to_vec();
    sorted.sort_unstable();
    match &error {
        CodeError::NotDecodable { lost: named, code: name, .. } => {
            assert_eq!(named, &sorted, "NotDecodable names the lost units");
            assert_eq!(name, &code.spec().to_string());
        }
        other => panic!("expected NotDecodable for {order:?}, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains(&format!("{sorted:?}")), "message {message:?} names {sorted:?}");
    assert_units_eq(&work, &before, "a failed decode must not touch any unit");
}

#[test]
fn more_than_r_lost_is_refused_small_codes_every_pattern() {
    let mut rng = StdRng::seed_from_u64(99);
    for (k, r) in [(6, 3), (10, 4), (5, 3), (7, 2), (1, 1), (2, 5)] {
        let code = rs(k, r);
        let n = k + r;
        let units = random_group(&*code, &mut rng, 33);
        let patterns = combinations(n, r + 1);
        assert_eq!(patterns.len(), binomial(n, r + 1));
        for lost in &patterns {
            check_not_decodable(&*code, &mut rng, &units, lost);
        }
        // Losing everything is refused too.
        check_not_decodable(&*code, &mut rng, &units, &(0..n).collect::<Vec<_>>());
    }
}

#[test]
fn more_than_r_lost_is_refused_large_codes_sampled() {
    let mut rng = StdRng::seed_from_u64(98);
    for (k, r, count) in [(12, 4, 200), (20, 4, 200), (50, 20, 20), (200, 56, 2)] {
        let code = rs(k, r);
        let n = k + r;
        let units = random_group(&*code, &mut rng, 9);
        for _ in 0..count {
            let m = rng.gen_range(r + 1..=n.min(r + 3));
            let lost = rand::seq::index::sample(&mut rng, n, m).into_vec();
            check_not_decodable(&*code, &mut rng, &units, &lost);
        }
    }
}

#[test]
fn is_decodable_rejects_out_of_range_units() {
    let code = rs(10, 4);
    assert!(code.is_decodable(&[]));
    assert!(code.is_decodable(&[13]));
    assert!(!code.is_decodable(&[14]));
    assert!(!code.is_decodable(&[0, 1000]));
}

/// Reconstructs `wanted` from `present` and checks each output against the original unit.
fn reconstruct_and_check(
    code: &dyn Code,
    units: &[Vec<u8>],
    present: &[usize],
    wanted: &[usize],
    rng: &mut StdRng,
) {
    let len = units[0].len();
    let view: Vec<Option<&[u8]>> = (0..code.total_units())
        .map(|i| present.contains(&i).then(|| units[i].as_slice()))
        .collect();
    let mut out = random_units(rng, wanted.len(), len);
    let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
    code.reconstruct(&view, wanted, &mut dsts)
        .unwrap_or_else(|e| panic!("present {present:?} wanted {wanted:?}: {e}"));
    let want: Vec<Vec<u8>> = wanted.iter().map(|&w| units[w].clone()).collect();
    assert_units_eq(&out, &want, &format!("present {present:?} wanted {wanted:?}"));
}

#[test]
fn reconstruct_subsets_of_wanted_units() {
    let mut rng = StdRng::seed_from_u64(7);
    let code = rs(10, 4);
    let units = random_group(&*code, &mut rng, 130);
    // Units 1, 11 and 12 are missing; 11 present units, one more than needed.
    let present: Vec<usize> = (0..14).filter(|i| ![1, 11, 12].contains(i)).collect();
    for wanted in [
        vec![11, 12],    // only parity
        vec![12],        // one parity unit
        vec![1],         // only data
        vec![12, 1, 11], // a mix, not in ascending order
        vec![1, 5, 13],  // lost and present units together
        vec![13, 0],     // only present units
    ] {
        reconstruct_and_check(&*code, &units, &present, &wanted, &mut rng);
    }
    // Exactly k present, none of them data: everything comes from parity.
    let present: Vec<usize> = (4..14).collect();
    reconstruct_and_check(&*code, &units, &present, &[0, 1, 2, 3], &mut rng);

    // Random present sets (k..=n units) and random wanted lists of any units.
    for (k, r) in [(6, 3), (10, 4), (20, 4)] {
        let code = rs(k, r);
        let n = k + r;
        let units = random_group(&*code, &mut rng, 131);
        for _ in 0..300 {
            let present_count = rng.gen_range(k..=n);
            let mut present = rand::seq::index::sample(&mut rng, n, present_count).into_vec();
            present.sort_unstable();
            let wanted_count = rng.gen_range(1..=n);
            let wanted = rand::seq::index::sample(&mut rng, n, wanted_count).into_vec();
            reconstruct_and_check(&*code, &units, &present, &wanted, &mut rng);
        }
    }
}

#[test]
fn reconstruct_with_fewer_than_k_present_is_refused() {
    let mut rng = StdRng::seed_from_u64(8);
    let code = rs(6, 3);
    let units = random_group(&*code, &mut rng, 40);
    let present = [0usize, 2, 4, 6, 8]; // k − 1 = 5 units
    let view: Vec<Option<&[u8]>> =
        (0..9).map(|i| present.contains(&i).then(|| units[i].as_slice())).collect();
    let mut out = [vec![0x3Cu8; 40]];
    let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
    match code.reconstruct(&view, &[1], &mut dsts) {
        Err(CodeError::NotDecodable { lost, .. }) => assert_eq!(lost, vec![1, 3, 5, 7]),
        other => panic!("expected NotDecodable, got {other:?}"),
    }
    assert!(out[0].iter().all(|&b| b == 0x3C), "output untouched");
}

/// Accumulates every data unit into zeroed parity with `encode_add`, in `order`.
fn encode_incrementally(code: &dyn Code, data: &[Vec<u8>], order: &[usize]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; code.parity_units()];
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    for &j in order {
        code.encode_add(j, &data[j], &mut dsts).unwrap();
    }
    parity
}

#[test]
fn encode_add_in_any_order_equals_encode() {
    let mut rng = StdRng::seed_from_u64(11);
    for (k, r, len) in [(6, 3, 130), (10, 4, 1000), (12, 4, 65), (20, 4, 7), (1, 1, 33), (3, 9, 99)]
    {
        let code = rs(k, r);
        let data = random_units(&mut rng, k, len);
        let expected = encode_units(&*code, &data)[k..].to_vec();
        let mut order: Vec<usize> = (0..k).collect();
        for attempt in 0..5 {
            order.shuffle(&mut rng);
            let parity = encode_incrementally(&*code, &data, &order);
            assert_units_eq(&parity, &expected, &format!("rs({k},{r}) order {order:?} #{attempt}"));
        }
        // encode_add adds: accumulators that start at A end at A + parity.
        let start = random_units(&mut rng, r, len);
        let mut parity = start.clone();
        let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        for (j, unit) in data.iter().enumerate() {
            code.encode_add(j, unit, &mut dsts).unwrap();
        }
        let want: Vec<Vec<u8>> = start
            .iter()
            .zip(&expected)
            .map(|(a, p)| a.iter().zip(p).map(|(x, y)| x ^ y).collect())
            .collect();
        assert_units_eq(&parity, &want, &format!("rs({k},{r}) encode_add onto non-zero"));
    }
}

#[test]
fn delta_update_equals_re_encoding() {
    let mut rng = StdRng::seed_from_u64(12);
    let lens = [130, UPDATE_CHUNK_BYTES, UPDATE_CHUNK_BYTES + 1, 2 * UPDATE_CHUNK_BYTES + 77];
    for (k, r) in [(6, 3), (10, 4)] {
        let code = rs(k, r);
        for len in lens {
            let mut data = random_units(&mut rng, k, len);
            let mut parity = encode_units(&*code, &data)[k..].to_vec();
            for step in 0..3 {
                let index = rng.gen_range(0..k);
                let new = if step == 1 {
                    // A sparse change: most of the delta is zero.
                    let mut new = data[index].clone();
                    for _ in 0..5 {
                        let at = rng.gen_range(0..len);
                        new[at] ^= rng.gen_range(1..=255u8);
                    }
                    new
                } else {
                    random_bytes(&mut rng, len)
                };
                let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                code.update(index, &data[index], &new, &mut dsts).unwrap();
                data[index] = new;
                let expected = encode_units(&*code, &data)[k..].to_vec();
                assert_units_eq(
                    &parity,
                    &expected,
                    &format!("rs({k},{r}) len {len} update of unit {index} step {step}"),
                );
            }
            // Updating with identical old and new leaves parity alone.
            let before = parity.clone();
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            code.update(0, &data[0], &data[0], &mut dsts).unwrap();
            assert_units_eq(&parity, &before, "update with old == new");
        }
    }
}

/// Builds the plan, fills a copy of every unit with garbage outside the planned ranges, repairs
/// from slices of the copies and checks the result. Returns the plan.
fn check_repair(
    code: &dyn Code,
    units: &[Vec<u8>],
    target: usize,
    unavailable: &[usize],
    rng: &mut StdRng,
) -> RepairPlan {
    let len = units[0].len();
    let k = code.data_units();
    let context = format!("{} target {target} unavailable {unavailable:?}", code.spec());
    let plan = code
        .repair_plan(target, unavailable, len)
        .unwrap_or_else(|e| panic!("{context}: no plan: {e}"));
    assert_eq!(plan.target, target, "{context}");
    assert_eq!(plan.unit_len, len, "{context}");
    // RS is MDS: exactly k whole helper units.
    assert_eq!(plan.bytes_read(), k * len, "{context}: plan {plan:?}");
    let helpers = plan.helpers();
    assert_eq!(helpers.len(), k, "{context}: helpers {helpers:?}");
    assert!(helpers.windows(2).all(|w| w[0] < w[1]), "{context}: helpers ascending {helpers:?}");
    for &h in &helpers {
        assert!(h < code.total_units(), "{context}: helper {h} out of range");
        assert_ne!(h, target, "{context}: the target is not a helper");
        assert!(!unavailable.contains(&h), "{context}: helper {h} is unavailable");
    }
    assert!(
        plan.reads.windows(2).all(|w| w[0].unit <= w[1].unit),
        "{context}: reads grouped by ascending unit"
    );
    // Mark the planned bytes; everything else of every unit becomes garbage.
    let mut covered = vec![vec![false; len]; units.len()];
    for read in &plan.reads {
        assert!(read.offset + read.len <= len, "{context}: {read:?} beyond the unit");
        for c in &mut covered[read.unit][read.offset..read.offset + read.len] {
            assert!(!*c, "{context}: {read:?} overlaps another read");
            *c = true;
        }
    }
    let mut copies = units.to_vec();
    for (copy, covered) in copies.iter_mut().zip(&covered) {
        for (byte, &keep) in copy.iter_mut().zip(covered) {
            if !keep {
                *byte = rng.gen();
            }
        }
    }
    let reads: Vec<&[u8]> =
        plan.reads.iter().map(|r| &copies[r.unit][r.offset..r.offset + r.len]).collect();
    let mut out = random_bytes(rng, len);
    code.repair(&plan, &reads, &mut out).unwrap_or_else(|e| panic!("{context}: repair: {e}"));
    assert_units_eq(&[out], &[units[target].clone()], &context);
    plan
}

#[test]
fn repair_plans_are_exact() {
    let mut rng = StdRng::seed_from_u64(13);
    for (k, r) in [(6, 3), (10, 4)] {
        let code = rs(k, r);
        let n = k + r;
        let units = random_group(&*code, &mut rng, 130);
        let mut plans = 0;
        for target in 0..n {
            let others: Vec<usize> = (0..n).filter(|&u| u != target).collect();
            // Every set of unavailable helpers that leaves the target repairable.
            for m in 0..r {
                for picked in combinations(others.len(), m) {
                    let unavailable: Vec<usize> = picked.iter().map(|&i| others[i]).collect();
                    check_repair(&*code, &units, target, &unavailable, &mut rng);
                    plans += 1;
                }
            }
            // Listing the target itself as unavailable changes nothing.
            check_repair(&*code, &units, target, &[target], &mut rng);
            // r unavailable helpers plus the target is r + 1 lost: refused.
            for picked in combinations(others.len(), r) {
                let unavailable: Vec<usize> = picked.iter().map(|&i| others[i]).collect();
                match code.repair_plan(target, &unavailable, 130) {
                    Err(CodeError::NotDecodable { .. }) => {}
                    other => panic!("rs({k},{r}) target {target} {unavailable:?}: {other:?}"),
                }
            }
        }
        assert_eq!(plans, n * (0..r).map(|m| binomial(n - 1, m)).sum::<usize>());
    }
}

#[test]
fn repair_plans_of_large_codes_and_odd_lengths() {
    let mut rng = StdRng::seed_from_u64(14);
    for (k, r, len) in [(20, 4, 1), (50, 20, 65), (12, 4, 1000), (1, 1, 3), (2, 5, 64)] {
        let code = rs(k, r);
        let n = k + r;
        let units = random_group(&*code, &mut rng, len);
        for _ in 0..20 {
            let target = rng.gen_range(0..n);
            let m = rng.gen_range(0..r);
            let unavailable: Vec<usize> = rand::seq::index::sample(&mut rng, n, m + 1)
                .into_iter()
                .filter(|&u| u != target)
                .take(m)
                .collect();
            check_repair(&*code, &units, target, &unavailable, &mut rng);
        }
    }
}

/// Codes wider than 64 units: the same target (or wanted list) from many present sets that
/// differ only in units on either side of 64-unit boundaries, so decodings prepared for one
/// present set must never be used for another.
#[test]
fn wide_codes_keep_present_sets_apart() {
    let mut rng = StdRng::seed_from_u64(19);
    for (k, r) in [(60, 10), (120, 16), (200, 56), (250, 6)] {
        let code = rs(k, r);
        let n = k + r;
        let units = random_group(&*code, &mut rng, 65);
        for target in [0, 1, 63, 64, 65, 127, 128, 192, n - 1].into_iter().filter(|&t| t < n) {
            let mut sets: Vec<Vec<usize>> =
                vec![vec![], vec![1], vec![0], vec![64], vec![63, 64], vec![65], vec![n - 2]];
            sets.extend([vec![127, 128], vec![128], vec![191, 192], vec![0, 64, 128, 192]]);
            sets.push((0..r - 1).map(|i| (i * 64 + 1) % n).collect());
            for unavailable in sets {
                let unavailable: Vec<usize> =
                    unavailable.into_iter().filter(|&u| u < n && u != target).take(r - 1).collect();
                check_repair(&*code, &units, target, &unavailable, &mut rng);
            }
        }
        // reconstruct: one wanted list from present sets that differ by one unit each.
        for missing in [vec![1, 2], vec![1, 65], vec![2, 66], vec![63, 64], vec![64, 128]] {
            let missing: Vec<usize> = missing.into_iter().filter(|&u| u < n).collect();
            let present: Vec<usize> = (0..n).filter(|u| !missing.contains(u)).collect();
            reconstruct_and_check(&*code, &units, &present, &missing, &mut rng);
            reconstruct_and_check(&*code, &units, &present, &[0], &mut rng);
        }
    }
}

/// One code shared by several threads (the trait is `Send + Sync`): decodes racing on the
/// decode cache, through at least one eviction, all stay correct.
#[test]
fn concurrent_decodes_share_one_code() {
    let (k, r) = (16, 4);
    let code = rs(k, r);
    let patterns: Vec<Vec<usize>> = (1..=r).flat_map(|m| combinations(k + r, m)).collect();
    assert!(patterns.len() > MAX_CACHED_DECODINGS);
    std::thread::scope(|scope| {
        for thread in 0..3u64 {
            let code = &code;
            let patterns = &patterns;
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(300 + thread);
                let units = random_group(&**code, &mut rng, 70);
                let mut order: Vec<&Vec<usize>> = patterns.iter().collect();
                order.shuffle(&mut rng);
                for lost in order.into_iter().take(2500) {
                    decode_and_check(&**code, &mut rng, &units, lost, &format!("thread {thread}"));
                }
            });
        }
    });
}

#[test]
fn unit_lengths() {
    let code = rs(10, 4);
    assert_eq!(code.unit_len_multiple(), 1);
    assert_eq!(code.sub_chunks(), 1);
    assert_eq!(code.unit_len_for(0), 0);
    assert_eq!(code.unit_len_for(1), 1);
    assert_eq!(code.unit_len_for(1000), 100);
    assert_eq!(code.unit_len_for(1001), 101);
    assert!(code.check_unit_len(12345).is_ok());
}

#[test]
fn repair_plan_round_trips_through_json() {
    let code = rs(10, 4);
    let plan = code.repair_plan(3, &[0, 12], 4096).unwrap();
    let json = serde_json::to_string(&plan).unwrap();
    let back: RepairPlan = serde_json::from_str(&json).unwrap();
    assert_eq!(back, plan);
}

/// Encodes from the definition with `weft_gf::mul`: parity i byte p = Σ_j c[k+i][j]·data[j][p],
/// with ISA-L's Cauchy coefficient c[i][j] = 1 / (i XOR j).
#[test]
fn parity_equals_the_cauchy_definition() {
    let mut rng = StdRng::seed_from_u64(15);
    for (k, r, len) in [
        (6, 3, 130),
        (10, 4, 130),
        (12, 4, 67),
        (20, 4, 65),
        (1, 1, 100),
        (2, 5, 33),
        (3, 9, 70),
        (128, 128, 40),
        (255, 1, 40),
        (200, 56, 40),
    ] {
        let code = LinearCode::rs(k, r).unwrap();
        let coefficient = |i: usize, j: usize| -> u8 {
            let c = weft_gf::inv((i ^ j) as u8);
            assert_eq!(weft_gf::mul(c, (i ^ j) as u8), 1, "1/({i} xor {j})");
            c
        };
        let generator = code.generator();
        assert_eq!((generator.rows(), generator.cols()), (k + r, k));
        for i in 0..k + r {
            for j in 0..k {
                let want = if i < k { u8::from(i == j) } else { coefficient(i, j) };
                assert_eq!(generator.get(i, j), want, "rs({k},{r}) generator[{i}][{j}]");
            }
        }
        let data = random_units(&mut rng, k, len);
        let units = encode_units(&code, &data);
        let mut expected = vec![vec![0u8; len]; r];
        for (i, parity) in expected.iter_mut().enumerate() {
            for (j, unit) in data.iter().enumerate() {
                let c = coefficient(k + i, j);
                for (p, &d) in parity.iter_mut().zip(unit) {
                    *p ^= weft_gf::mul(c, d);
                }
            }
        }
        assert_units_eq(&units[k..], &expected, &format!("rs({k},{r}) parity by definition"));
        assert_units_eq(&units[..k], &data, "data units are the data");
    }
}

fn assert_untouched(buffers: &[Vec<u8>], sentinel: u8, context: &str) {
    for (i, b) in buffers.iter().enumerate() {
        assert!(b.iter().all(|&x| x == sentinel), "{context}: output {i} was written");
    }
}

#[test]
fn encode_errors_leave_outputs_untouched() {
    let code = rs(6, 3);
    let mut rng = StdRng::seed_from_u64(16);
    let data = random_units(&mut rng, 6, 100);
    let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity = vec![vec![0xEEu8; 100]; 3];

    // Wrong number of data units.
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(
        code.encode(&srcs[..5], &mut dsts),
        Err(CodeError::UnitCount { expected: 6, got: 5, .. })
    ));
    // Wrong number of parity units.
    assert!(matches!(
        code.encode(&srcs, &mut dsts[..2]),
        Err(CodeError::UnitCount { expected: 3, got: 2, .. })
    ));
    // A short data unit.
    let mut short = srcs.clone();
    short[4] = &data[4][..99];
    assert_eq!(
        code.encode(&short, &mut dsts),
        Err(CodeError::UnitLength { unit: 4, len: 99, expected: 100 })
    );
    drop(dsts);
    // A long parity unit.
    let mut long = vec![vec![0xEEu8; 100], vec![0xEEu8; 100], vec![0xEEu8; 101]];
    let mut long_dsts: Vec<&mut [u8]> = long.iter_mut().map(Vec::as_mut_slice).collect();
    assert_eq!(
        code.encode(&srcs, &mut long_dsts),
        Err(CodeError::UnitLength { unit: 8, len: 101, expected: 100 })
    );
    assert_untouched(&parity, 0xEE, "encode");
    assert_untouched(&long, 0xEE, "encode with a long parity unit");

    // encode_add: index out of range, wrong lengths, wrong count.
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(
        code.encode_add(6, &data[0], &mut dsts),
        Err(CodeError::DataIndex { index: 6, k: 6 })
    ));
    assert!(matches!(
        code.encode_add(1, &data[1][..50], &mut dsts),
        Err(CodeError::UnitLength { .. })
    ));
    assert!(matches!(
        code.encode_add(1, &data[1], &mut dsts[..1]),
        Err(CodeError::UnitCount { expected: 3, got: 1, .. })
    ));
    // update: index out of range, old/new of different lengths, parity of another length.
    assert!(matches!(
        code.update(7, &data[0], &data[1], &mut dsts),
        Err(CodeError::DataIndex { index: 7, k: 6 })
    ));
    assert!(matches!(
        code.update(2, &data[2], &data[3][..99], &mut dsts),
        Err(CodeError::UnitLength { unit: 2, len: 99, expected: 100 })
    ));
    assert!(matches!(
        code.update(2, &data[2][..10], &data[3][..10], &mut dsts),
        Err(CodeError::UnitLength { .. })
    ));
    assert!(matches!(
        code.update(2, &data[2], &data[3], &mut dsts[1..]),
        Err(CodeError::UnitCount { .. })
    ));
    assert_untouched(&parity, 0xEE, "encode_add / update");
}

#[test]
fn reconstruct_and_decode_errors_leave_outputs_untouched() {
    let code = rs(6, 3);
    let mut rng = StdRng::seed_from_u64(17);
    let units = random_group(&*code, &mut rng, 100);
    let full: Vec<Option<&[u8]>> = units.iter().map(|u| Some(u.as_slice())).collect();
    let mut out = vec![vec![0x77u8; 100]; 2];

    let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
    // Wrong number of units.
    assert!(matches!(
        code.reconstruct(&full[..8], &[0, 1], &mut dsts),
        Err(CodeError::UnitCount { expected: 9, got: 8, .. })
    ));
    // Outputs do not match wanted.
    assert!(matches!(
        code.reconstruct(&full, &[0], &mut dsts),
        Err(CodeError::UnitCount { expected: 1, got: 2, .. })
    ));
    // Wanted index out of range.
    assert_eq!(
        code.reconstruct(&full, &[0, 9], &mut dsts),
        Err(CodeError::UnitIndex { index: 9, total: 9 })
    );
    // A present unit of another length.
    let mut uneven = full.clone();
    uneven[0] = None;
    uneven[5] = Some(&units[5][..99]);
    assert!(matches!(
        code.reconstruct(&uneven, &[0, 1], &mut dsts),
        Err(CodeError::UnitLength { unit: 5, len: 99, expected: 100 })
    ));
    drop(dsts);
    // An output of another length.
    let mut odd_out = vec![vec![0x77u8; 100], vec![0x77u8; 90]];
    let mut odd_dsts: Vec<&mut [u8]> = odd_out.iter_mut().map(Vec::as_mut_slice).collect();
    let mut missing = full.clone();
    missing[0] = None;
    missing[1] = None;
    assert!(matches!(
        code.reconstruct(&missing, &[0, 1], &mut odd_dsts),
        Err(CodeError::UnitLength { unit: 1, len: 90, expected: 100 })
    ));
    assert_untouched(&out, 0x77, "reconstruct");
    assert_untouched(&odd_out, 0x77, "reconstruct with a short output");

    // decode: wrong unit count, lost index out of range.
    let mut work = units.clone();
    work[2].fill(0x77);
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(
        code.decode(&mut refs[..8], &[2]),
        Err(CodeError::UnitCount { expected: 9, got: 8, .. })
    ));
    assert_eq!(code.decode(&mut refs, &[2, 12]), Err(CodeError::UnitIndex { index: 12, total: 9 }));
    // A lost unit of another length than the survivors.
    let mut uneven_units = units.clone();
    uneven_units[2] = vec![0x77u8; 50];
    let mut refs: Vec<&mut [u8]> = uneven_units.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(code.decode(&mut refs, &[2]), Err(CodeError::UnitLength { unit: 2, .. })));
    assert_untouched(&work[2..3], 0x77, "decode");
    assert_untouched(&uneven_units[2..3], 0x77, "decode of a short unit");

    // repair_plan: target out of range.
    assert!(matches!(code.repair_plan(9, &[], 100), Err(CodeError::UnitIndex { index: 9, .. })));
}

#[test]
fn repair_with_mismatched_reads_is_refused() {
    let code = rs(6, 3);
    let mut rng = StdRng::seed_from_u64(18);
    let units = random_group(&*code, &mut rng, 100);
    let plan = code.repair_plan(2, &[0], 100).unwrap();
    let reads: Vec<&[u8]> = plan.reads.iter().map(|r| units[r.unit].as_slice()).collect();
    let mut out = vec![0x55u8; 100];

    let expect_mismatch = |result: Result<(), CodeError>, what: &str| match result {
        Err(CodeError::PlanMismatch { .. }) => {}
        other => panic!("{what}: expected PlanMismatch, got {other:?}"),
    };
    // One read too few.
    expect_mismatch(code.repair(&plan, &reads[1..], &mut out), "too few reads");
    // One read too many.
    let mut extra = reads.clone();
    extra.push(units[8].as_slice());
    expect_mismatch(code.repair(&plan, &extra, &mut out), "too many reads");
    // A read shorter than its range.
    let mut short = reads.clone();
    short[3] = &units[plan.reads[3].unit][..99];
    expect_mismatch(code.repair(&plan, &short, &mut out), "short read");
    // A plan edited to read part of a unit.
    let mut partial = plan.clone();
    partial.reads[0] = ReadRange { offset: 10, len: 90, ..partial.reads[0] };
    let partial_reads: Vec<&[u8]> =
        partial.reads.iter().map(|r| &units[r.unit][r.offset..r.offset + r.len]).collect();
    expect_mismatch(code.repair(&partial, &partial_reads, &mut out), "partial read");
    // A plan that reads the target or one unit twice.
    let mut reads_target = plan.clone();
    reads_target.reads[0].unit = 2;
    expect_mismatch(code.repair(&reads_target, &reads, &mut out), "reads the target");
    let mut twice = plan.clone();
    twice.reads[1].unit = twice.reads[0].unit;
    expect_mismatch(code.repair(&twice, &reads, &mut out), "reads a unit twice");
    // Output of the wrong length.
    let mut short_out = vec![0x55u8; 99];
    assert!(matches!(
        code.repair(&plan, &reads, &mut short_out),
        Err(CodeError::UnitLength { unit: 2, len: 99, expected: 100 })
    ));
    // Out-of-range units.
    let mut bad_target = plan.clone();
    bad_target.target = 9;
    assert!(matches!(
        code.repair(&bad_target, &reads, &mut out),
        Err(CodeError::UnitIndex { index: 9, .. })
    ));
    let mut bad_unit = plan.clone();
    bad_unit.reads[5].unit = 40;
    assert!(matches!(
        code.repair(&bad_unit, &reads, &mut out),
        Err(CodeError::UnitIndex { index: 40, .. })
    ));
    // A plan stripped to fewer than k helpers cannot rebuild anything.
    let mut stripped = plan.clone();
    stripped.reads.pop();
    assert!(matches!(
        code.repair(&stripped, &reads[..5], &mut out),
        Err(CodeError::NotDecodable { .. })
    ));
    assert!(out.iter().all(|&b| b == 0x55), "repair output written on error");
    assert!(short_out.iter().all(|&b| b == 0x55), "repair output written on error");

    // The untampered plan still works.
    code.repair(&plan, &reads, &mut out).unwrap();
    assert_eq!(out, units[2]);
}

#[test]
fn repair_plan_refuses_out_of_range_unavailable_units() {
    let code = LinearCode::rs(6, 3).unwrap();
    assert_eq!(code.repair_plan(0, &[9], 64), Err(CodeError::UnitIndex { index: 9, total: 9 }));
    assert!(code.byte_local(), "RS is byte-local: windows and segments may be coded alone");
}
