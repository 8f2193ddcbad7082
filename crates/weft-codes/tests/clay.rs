//! Clay codes (`clay(k,r[,d])`) through the `Code` trait: every erasure pattern of the listed
//! codes, repair of every unit from exactly its plan (garbage everywhere else), exact read
//! counts and run structure, unavailable helpers, incremental and delta encoding, input
//! validation, and a property loop over random valid (k, r, d).
//!
//! All randomness comes from `StdRng::seed_from_u64` with a fixed seed per test, so a failure
//! reproduces exactly. Units are the smallest legal length, α·64 bytes, unless a test says
//! otherwise: the structure, not the length, is what these tests exercise.

use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::{Code, CodeError, CodeSpec, RepairPlan, MAX_SUB_CHUNKS};

/// The codes every structural test runs on: (k, r, d).
const CODES: [(usize, usize, usize); 7] = [
    (10, 4, 13), // α = 256, two virtual units
    (4, 2, 5),   // q = 2, t = 3
    (6, 3, 8),   // q = 3, no shortening
    (5, 3, 7),   // q = 3, one virtual unit
    (8, 4, 11),  // q = 4, d = n − 1
    (8, 4, 10),  // q = 3, d < n − 1: one unit left out of every repair
    (7, 2, 8),   // q = 2, t = 5, one virtual unit
];

fn clay(k: usize, r: usize, d: usize) -> Arc<dyn Code> {
    let code = CodeSpec::Clay { k, r, d }.build().unwrap();
    assert_eq!((code.data_units(), code.parity_units(), code.total_units()), (k, r, k + r));
    code
}

/// q = d − k + 1: the size of a y-section.
fn q_of(k: usize, d: usize) -> usize {
    d - k + 1
}

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    bytes
}

/// Encodes `data` into parity buffers that start as junk (encode must overwrite).
fn encode_units(code: &dyn Code, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0xA5u8; len]; code.parity_units()];
    let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&srcs, &mut dsts).unwrap();
    data.iter().cloned().chain(parity).collect()
}

fn random_group(code: &dyn Code, rng: &mut StdRng, len: usize) -> Vec<Vec<u8>> {
    let data: Vec<Vec<u8>> = (0..code.data_units()).map(|_| random_bytes(rng, len)).collect();
    encode_units(code, &data)
}

fn assert_bytes_eq(got: &[u8], want: &[u8], context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: length");
    if let Some(pos) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{context}: first difference at byte {pos} of {}", want.len());
    }
}

/// Every subset of 0..n with at most `max` elements, smallest first.
fn patterns(n: usize, max: usize) -> Vec<Vec<usize>> {
    let mut all: Vec<Vec<usize>> = (0u32..1 << n)
        .filter(|m| m.count_ones() as usize <= max)
        .map(|m| (0..n).filter(|i| m >> i & 1 == 1).collect())
        .collect();
    all.sort_by_key(Vec::len);
    all
}

/// Overwrites the lost units with garbage, decodes them in place and compares.
fn check_decode(code: &dyn Code, group: &[Vec<u8>], lost: &[usize], rng: &mut StdRng) {
    let mut units = group.to_vec();
    for &l in lost {
        rng.fill(&mut units[l][..]);
    }
    let mut refs: Vec<&mut [u8]> = units.iter_mut().map(Vec::as_mut_slice).collect();
    code.decode(&mut refs, lost).unwrap_or_else(|e| panic!("{} lost {lost:?}: {e}", code.spec()));
    for &l in lost {
        assert_bytes_eq(&units[l], &group[l], &format!("{} lost {lost:?} unit {l}", code.spec()));
    }
}

/// Repairs `plan.target` from the bytes the plan names, with every other byte of every unit
/// (and the output) replaced by garbage first.
fn repair_from_plan(code: &dyn Code, group: &[Vec<u8>], plan: &RepairPlan, rng: &mut StdRng) {
    let mut masked: Vec<Vec<u8>> = group.iter().map(|u| random_bytes(rng, u.len())).collect();
    for range in &plan.reads {
        let span = range.offset..range.offset + range.len;
        masked[range.unit][span.clone()].copy_from_slice(&group[range.unit][span]);
    }
    let reads: Vec<&[u8]> =
        plan.reads.iter().map(|r| &masked[r.unit][r.offset..r.offset + r.len]).collect();
    let mut out = random_bytes(rng, plan.unit_len);
    code.repair(plan, &reads, &mut out)
        .unwrap_or_else(|e| panic!("{} repair {}: {e}", code.spec(), plan.target));
    assert_bytes_eq(&out, &group[plan.target], &format!("{} repair {}", code.spec(), plan.target));
}

/// Checks the plan's shape: ascending units, ascending non-overlapping offsets, no range
/// touching the target or an unavailable unit; returns the runs per helper.
fn runs_per_helper(plan: &RepairPlan, unavailable: &[usize]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut last: Option<(usize, usize)> = None;
    for range in &plan.reads {
        assert_ne!(range.unit, plan.target, "the plan reads its target");
        assert!(!unavailable.contains(&range.unit), "the plan reads unavailable {}", range.unit);
        assert!(range.len > 0 || plan.unit_len == 0, "empty range");
        assert!(range.offset + range.len <= plan.unit_len);
        if let Some((unit, end)) = last {
            assert!(range.unit >= unit, "units ascending");
            if range.unit == unit {
                // Strictly after the previous range and not adjacent: adjacent runs merge.
                assert!(range.offset > end, "runs of unit {unit} ascending and merged");
            }
        }
        last = Some((range.unit, range.offset + range.len));
        match runs.last_mut() {
            Some((unit, count)) if *unit == range.unit => *count += 1,
            _ => runs.push((range.unit, 1)),
        }
    }
    runs
}

#[test]
fn parameters_and_layout() {
    let expected_alpha = [256, 8, 27, 27, 64, 81, 32];
    for (&(k, r, d), alpha) in CODES.iter().zip(expected_alpha) {
        let code = clay(k, r, d);
        assert_eq!(code.sub_chunks(), alpha, "clay({k},{r},{d})");
        assert_eq!(Some(alpha), weft_codes::clay_sub_chunks(k, r, d));
        assert_eq!(code.unit_len_multiple(), alpha * 64);
        assert!(!code.byte_local());
        assert_eq!(code.unit_len_for(1), alpha * 64);
        assert_eq!(CodeSpec::parse(&code.spec().to_string()).unwrap(), code.spec());
    }
    assert_eq!(clay(10, 4, 13).spec().to_string(), "clay(10,4)");
}

#[test]
fn decode_every_pattern_of_at_most_r_lost_units() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0001);
    for (k, r, d) in CODES {
        let code = clay(k, r, d);
        let len = code.unit_len_multiple();
        let group = random_group(code.as_ref(), &mut rng, len);
        for lost in patterns(k + r, r) {
            check_decode(code.as_ref(), &group, &lost, &mut rng);
        }
    }
}

#[test]
fn reconstruct_subsets_repeats_and_present_units() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0002);
    for (k, r, d) in [(10, 4, 13), (8, 4, 10), (5, 3, 7)] {
        let code = clay(k, r, d);
        let n = k + r;
        let len = code.unit_len_multiple();
        let group = random_group(code.as_ref(), &mut rng, len);
        for _ in 0..20 {
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            let lost: Vec<usize> = order[..rng.gen_range(1..=r)].to_vec();
            let present: Vec<Option<&[u8]>> =
                (0..n).map(|i| (!lost.contains(&i)).then_some(group[i].as_slice())).collect();
            // One lost unit (twice), one present unit, in a random order.
            let mut wanted = vec![lost[0], order[n - 1], lost[lost.len() - 1], lost[0]];
            wanted.shuffle(&mut rng);
            let mut outs = vec![vec![0x3Cu8; len]; wanted.len()];
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
            code.reconstruct(&present, &wanted, &mut refs).unwrap();
            for (w, out) in wanted.iter().zip(&outs) {
                assert_bytes_eq(
                    out,
                    &group[*w],
                    &format!("{} lost {lost:?} want {w}", code.spec()),
                );
            }
        }
    }
}

#[test]
fn more_than_r_lost_is_refused_and_outputs_untouched() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0003);
    for (k, r, d) in CODES {
        let code = clay(k, r, d);
        let n = k + r;
        let len = code.unit_len_multiple();
        let group = random_group(code.as_ref(), &mut rng, len);
        for _ in 0..10 {
            let mut order: Vec<usize> = (0..n).collect();
            order.shuffle(&mut rng);
            let mut lost = order[..r + 1].to_vec();
            lost.sort_unstable();
            assert!(!code.is_decodable(&lost));
            assert!(code.is_decodable(&lost[..r]));
            let present: Vec<Option<&[u8]>> =
                (0..n).map(|i| (!lost.contains(&i)).then_some(group[i].as_slice())).collect();
            let mut out = vec![0x77u8; len];
            let error = code.reconstruct(&present, &lost[..1], &mut [&mut out[..]]).unwrap_err();
            match &error {
                CodeError::NotDecodable { lost: named, .. } => assert_eq!(named, &lost),
                other => panic!("expected NotDecodable, got {other:?}"),
            }
            assert!(out.iter().all(|&b| b == 0x77), "output touched on error");
            let error = code.repair_plan(lost[0], &lost[1..], len).unwrap_err();
            assert!(
                matches!(error, CodeError::NotDecodable { lost: ref named, .. } if named == &lost)
            );
        }
        assert!(!code.is_decodable(&[n]));
    }
}

#[test]
fn repair_every_unit_reads_beta_from_d_helpers_in_documented_runs() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0004);
    for (k, r, d) in CODES {
        let code = clay(k, r, d);
        let q = q_of(k, d);
        let alpha = code.sub_chunks();
        // Three sub-chunk lengths' worth of vectors, so runs are longer than one vector.
        let len = 3 * code.unit_len_multiple();
        let group = random_group(code.as_ref(), &mut rng, len);
        for target in 0..k + r {
            let plan = code.repair_plan(target, &[], len).unwrap();
            assert_eq!(plan.target, target);
            assert_eq!(plan.unit_len, len);
            let runs = runs_per_helper(&plan, &[]);
            assert_eq!(runs.len(), d, "{} unit {target}: d helpers", code.spec());
            // Documented: a unit in y-section y = target / q is read in q^y runs per helper,
            // each of q^(t−1−y) sub-chunks.
            let y = (target / q) as u32;
            for &(unit, count) in &runs {
                assert_eq!(count, q.pow(y), "{} target {target} helper {unit}", code.spec());
            }
            // Every helper of the target's y-section is read.
            for x in 0..q {
                let p = (target / q) * q + x;
                if p != target && p < k + r {
                    assert!(plan.helpers().contains(&p), "section helper {p}");
                }
            }
            // β = α/q sub-chunks from each of d helpers.
            assert_eq!(plan.bytes_read(), d * (alpha / q) * (len / alpha));
            assert_eq!(plan.bytes_read() * q, d * len);
            repair_from_plan(code.as_ref(), &group, &plan, &mut rng);
        }
    }
}

#[test]
fn acceptance_read_amounts() {
    // clay(10,4): 13 helpers × 1/4 = 3.25 units; clay(8,4,11): 11 × 1/4 = 2.75 units;
    // clay(8,4,10): 10 × 1/3 units.
    for ((k, r, d), units_read_times_q, q) in
        [((10, 4, 13), 13, 4), ((8, 4, 11), 11, 4), ((8, 4, 10), 10, 3)]
    {
        let code = clay(k, r, d);
        for len in [code.unit_len_multiple(), 1 << 20, 5 * code.unit_len_multiple()] {
            if len % code.unit_len_multiple() != 0 {
                continue;
            }
            for target in 0..k + r {
                let plan = code.repair_plan(target, &[], len).unwrap();
                assert_eq!(
                    plan.bytes_read() * q,
                    units_read_times_q * len,
                    "{} {target}",
                    code.spec()
                );
            }
        }
    }
    let code = clay(10, 4, 13);
    let plan = code.repair_plan(0, &[], 1 << 20).unwrap();
    assert_eq!(plan.bytes_read(), 13 * (1 << 20) / 4); // 3.25 MiB
}

/// Repair while other units are unavailable: the bandwidth-optimal plan when the target's
/// y-section is intact and at most r − q units outside it are unavailable, else k whole units.
#[test]
fn repair_with_unavailable_units() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0005);
    for (k, r, d) in CODES {
        let code = clay(k, r, d);
        let n = k + r;
        let q = q_of(k, d);
        let len = code.unit_len_multiple();
        let group = random_group(code.as_ref(), &mut rng, len);
        for target in 0..n {
            let others: Vec<usize> = (0..n).filter(|&u| u != target).collect();
            for pick in patterns(n - 1, r - 1) {
                if pick.is_empty() || (n > 10 && rng.gen_range(0..8) != 0) {
                    continue;
                }
                let unavailable: Vec<usize> = pick.iter().map(|&i| others[i]).collect();
                let plan = code.repair_plan(target, &unavailable, len).unwrap();
                let runs = runs_per_helper(&plan, &unavailable);
                let section_intact = unavailable.iter().all(|&u| u / q != target / q);
                if section_intact && unavailable.len() <= r - q {
                    assert_eq!(runs.len(), d, "{} {target} {unavailable:?}", code.spec());
                    assert_eq!(plan.bytes_read() * q, d * len);
                } else {
                    assert_eq!(runs.len(), k);
                    assert!(runs.iter().all(|&(_, count)| count == 1));
                    assert_eq!(plan.bytes_read(), k * len);
                }
                repair_from_plan(code.as_ref(), &group, &plan, &mut rng);
            }
        }
    }
}

#[test]
fn repair_rejects_plans_it_did_not_make() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0006);
    let code = clay(8, 4, 10);
    let len = code.unit_len_multiple();
    let group = random_group(code.as_ref(), &mut rng, len);
    let plan = code.repair_plan(5, &[], len).unwrap();
    let reads: Vec<&[u8]> =
        plan.reads.iter().map(|r| &group[r.unit][r.offset..r.offset + r.len]).collect();
    let mut out = vec![0x11u8; len];
    let mismatch = |result: Result<(), CodeError>| {
        assert!(matches!(result, Err(CodeError::PlanMismatch { .. })), "{result:?}")
    };
    mismatch(code.repair(&plan, &reads[1..], &mut out));
    let mut shifted = plan.clone();
    shifted.reads[0].offset += 64;
    mismatch(code.repair(&shifted, &reads, &mut out));
    let mut swapped = plan.clone();
    swapped.reads[0].unit = 5;
    mismatch(code.repair(&swapped, &reads, &mut out));
    let mut short = reads.clone();
    short[2] = &short[2][1..];
    mismatch(code.repair(&plan, &short, &mut out));
    assert!(out.iter().all(|&b| b == 0x11), "output touched on error");
    let mut wrong_len = vec![0u8; len + 1];
    assert!(matches!(
        code.repair(&plan, &reads, &mut wrong_len),
        Err(CodeError::UnitLength { .. })
    ));
    code.repair(&plan, &reads, &mut out).unwrap();
    assert_bytes_eq(&out, &group[5], "the unmodified plan");
}

#[test]
fn encode_add_in_any_order_equals_encode_and_update_equals_reencode() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0007);
    for (k, r, d) in CODES {
        let code = clay(k, r, d);
        let len = code.unit_len_multiple();
        let group = random_group(code.as_ref(), &mut rng, len);
        let mut order: Vec<usize> = (0..k).collect();
        order.shuffle(&mut rng);
        let mut parity = vec![vec![0u8; len]; r];
        for &j in &order {
            let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            code.encode_add(j, &group[j], &mut refs).unwrap();
        }
        for i in 0..r {
            assert_bytes_eq(&parity[i], &group[k + i], &format!("{} encode_add", code.spec()));
        }
        // update: change one data unit, patch parity, compare with a fresh encode.
        let j = rng.gen_range(0..k);
        let new = random_bytes(&mut rng, len);
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.update(j, &group[j], &new, &mut refs).unwrap();
        let mut data: Vec<Vec<u8>> = group[..k].to_vec();
        data[j] = new;
        let fresh = encode_units(code.as_ref(), &data);
        for i in 0..r {
            assert_bytes_eq(&parity[i], &fresh[k + i], &format!("{} update", code.spec()));
        }
    }
}

#[test]
fn unit_lengths_must_be_multiples_of_64_alpha() {
    for (k, r, d) in CODES {
        let code = clay(k, r, d);
        let multiple = code.sub_chunks() * 64;
        for len in [code.sub_chunks(), multiple + 64, multiple / 2, 3 * multiple - 1] {
            let data = vec![vec![1u8; len]; k];
            let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let mut parity = vec![vec![0x42u8; len]; r];
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            let expect = |result: Result<(), CodeError>| match result {
                Err(CodeError::UnitLengthMultiple { len: got, multiple: m, .. }) => {
                    assert_eq!((got, m), (len, multiple));
                }
                other => panic!("{}: length {len}: {other:?}", code.spec()),
            };
            let error = code.encode(&srcs, &mut dsts).unwrap_err();
            assert!(error.to_string().contains(&format!("multiple of {multiple} bytes")));
            expect(Err(error));
            expect(code.encode_add(0, &data[0], &mut dsts));
            let present: Vec<Option<&[u8]>> =
                (0..k + r).map(|i| (i > 0).then_some(&data[0][..])).collect();
            let mut out = vec![0u8; len];
            expect(code.reconstruct(&present, &[0], &mut [&mut out[..]]));
            expect(code.repair_plan(0, &[], len).map(|_| ()));
            assert!(parity.iter().all(|p| p.iter().all(|&b| b == 0x42)), "parity touched");
        }
    }
}

#[test]
fn wrong_counts_lengths_and_indices_are_refused_untouched() {
    let code = clay(6, 3, 8);
    let len = code.unit_len_multiple();
    let data = vec![vec![7u8; len]; 6];
    let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity = vec![vec![0x42u8; len]; 3];
    {
        let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        assert!(matches!(
            code.encode(&srcs[..5], &mut dsts),
            Err(CodeError::UnitCount { expected: 6, got: 5, .. })
        ));
        assert!(matches!(
            code.encode(&srcs, &mut dsts[..2]),
            Err(CodeError::UnitCount { expected: 3, got: 2, .. })
        ));
        let mut uneven = srcs.clone();
        let longer = vec![0u8; 2 * len];
        uneven[3] = &longer;
        assert!(matches!(
            code.encode(&uneven, &mut dsts),
            Err(CodeError::UnitLength { unit: 3, .. })
        ));
        assert!(matches!(
            code.encode_add(6, &data[0], &mut dsts),
            Err(CodeError::DataIndex { index: 6, k: 6 })
        ));
        assert!(matches!(
            code.update(0, &data[0], &longer, &mut dsts),
            Err(CodeError::UnitLength { .. })
        ));
    }
    assert!(parity.iter().all(|p| p.iter().all(|&b| b == 0x42)), "parity touched");
    let present: Vec<Option<&[u8]>> = (0..9).map(|i| (i > 0).then_some(&data[0][..])).collect();
    let mut out = vec![0x42u8; len];
    assert!(matches!(
        code.reconstruct(&present, &[9], &mut [&mut out[..]]),
        Err(CodeError::UnitIndex { index: 9, total: 9 })
    ));
    assert!(matches!(
        code.reconstruct(&present[..8], &[0], &mut [&mut out[..]]),
        Err(CodeError::UnitCount { .. })
    ));
    assert!(matches!(code.reconstruct(&present, &[0], &mut []), Err(CodeError::UnitCount { .. })));
    let mut short = vec![0x42u8; len - 64];
    assert!(matches!(
        code.reconstruct(&present, &[0], &mut [&mut short[..]]),
        Err(CodeError::UnitLength { .. })
    ));
    assert!(out.iter().chain(&short).all(|&b| b == 0x42), "output touched");
    assert!(matches!(code.repair_plan(9, &[], len), Err(CodeError::UnitIndex { .. })));
    assert!(matches!(code.repair_plan(0, &[12], len), Err(CodeError::UnitIndex { .. })));
    let mut units: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(code.decode(&mut units, &[0]), Err(CodeError::UnitCount { .. })));
}

#[test]
fn empty_units_are_a_no_op() {
    let code = clay(4, 2, 5);
    let data = vec![Vec::<u8>::new(); 4];
    let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity = vec![Vec::<u8>::new(); 2];
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&srcs, &mut dsts).unwrap();
    let plan = code.repair_plan(1, &[], 0).unwrap();
    assert_eq!(plan.bytes_read(), 0);
}

/// Every valid (k, r, d) with k + r ≤ 12 (220 codes): repair of every unit, random erasure
/// patterns, repair of random units with random unavailable helpers.
#[test]
fn every_small_code_decodes_and_repairs_random_patterns() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0008);
    let mut codes = 0;
    for n in 3..=12 {
        for r in 2..n {
            let k = n - r;
            for d in k + 1..k + r {
                codes += 1;
                let alpha = weft_codes::clay_sub_chunks(k, r, d).unwrap();
                assert!(alpha <= MAX_SUB_CHUNKS);
                let code = clay(k, r, d);
                let q = q_of(k, d);
                let len = code.unit_len_multiple() * rng.gen_range(1..=2);
                let group = random_group(code.as_ref(), &mut rng, len);
                for target in 0..n {
                    let plan = code.repair_plan(target, &[], len).unwrap();
                    let runs = runs_per_helper(&plan, &[]);
                    assert_eq!(runs.len(), d);
                    let per_helper = q.pow((target / q) as u32);
                    assert!(runs.iter().all(|&(_, count)| count == per_helper));
                    assert_eq!(plan.bytes_read() * q, d * len);
                    repair_from_plan(code.as_ref(), &group, &plan, &mut rng);
                }
                for _ in 0..4 {
                    let mut order: Vec<usize> = (0..n).collect();
                    order.shuffle(&mut rng);
                    let lost = &order[..rng.gen_range(1..=r)];
                    check_decode(code.as_ref(), &group, lost, &mut rng);
                    let target = order[0];
                    let unavailable = &order[1..rng.gen_range(1..=r)];
                    let plan = code.repair_plan(target, unavailable, len).unwrap();
                    let section_intact = unavailable.iter().all(|&u| u / q != target / q);
                    let expected = if section_intact && unavailable.len() <= r - q {
                        d * len / q
                    } else {
                        k * len
                    };
                    let context = format!("clay({k},{r},{d}) {target} {unavailable:?}");
                    assert_eq!(plan.bytes_read(), expected, "{context}");
                    repair_from_plan(code.as_ref(), &group, &plan, &mut rng);
                }
            }
        }
    }
    assert_eq!(codes, 220);
}

/// Speed beside rs(10,4), 1 MiB units, one thread:
/// `cargo test --release -p weft-codes --test clay -- --ignored --nocapture speed`.
#[test]
#[ignore]
fn speed_clay_10_4_beside_rs_10_4() {
    let mut rng = StdRng::seed_from_u64(0xC1A7_0009);
    let unit = 1 << 20;
    for spec in ["rs(10,4)", "clay(10,4)", "clay(8,4,11)", "clay(8,4,10)"] {
        let code = CodeSpec::parse(spec).unwrap().build().unwrap();
        let (k, r) = (code.data_units(), code.parity_units());
        let len = code.unit_len_for(unit * k);
        let group = random_group(code.as_ref(), &mut rng, len);
        let rate = |bytes: usize, mut op: Box<dyn FnMut() + '_>| {
            op();
            let mut best = f64::MAX;
            for _ in 0..5 {
                let start = Instant::now();
                let rounds = 20;
                for _ in 0..rounds {
                    op();
                }
                best = best.min(start.elapsed().as_secs_f64() / rounds as f64);
            }
            bytes as f64 / best / 1e9
        };
        let data: Vec<&[u8]> = group[..k].iter().map(Vec::as_slice).collect();
        let mut parity = vec![vec![0u8; len]; r];
        let encode = rate(
            k * len,
            Box::new(|| {
                let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                code.encode(&data, &mut outs).unwrap();
            }),
        );
        let mut repair_rates = Vec::new();
        for target in [0, k - 1, k + r - 1] {
            let plan = code.repair_plan(target, &[], len).unwrap();
            let reads: Vec<&[u8]> =
                plan.reads.iter().map(|x| &group[x.unit][x.offset..x.offset + x.len]).collect();
            let mut out = vec![0u8; len];
            repair_rates
                .push(rate(len, Box::new(|| code.repair(&plan, &reads, &mut out).unwrap())));
        }
        let lost: Vec<usize> = (0..r).collect();
        let present: Vec<Option<&[u8]>> =
            (0..k + r).map(|i| (!lost.contains(&i)).then_some(group[i].as_slice())).collect();
        let mut outs = vec![vec![0u8; len]; r];
        let decode = rate(
            k * len,
            Box::new(|| {
                let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
                code.reconstruct(&present, &lost, &mut refs).unwrap();
            }),
        );
        println!(
            "{spec:>13} unit {len:>8} B: encode {encode:6.2} GB/s (data), decode {r} lost \
             {decode:6.2} GB/s (data), repair units 0/{}/{} {:.2}/{:.2}/{:.2} GB/s (repaired)",
            k - 1,
            k + r - 1,
            repair_rates[0],
            repair_rates[1],
            repair_rates[2]
        );
    }
}
