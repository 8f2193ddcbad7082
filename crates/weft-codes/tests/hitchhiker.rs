//! Hitchhiker codes (`hh-xor`, `hh-xor+`, `hh-nonxor`) through the `Code` trait: every erasure
//! pattern of the small codes, repair from exactly the planned bytes (garbage elsewhere) with
//! and without unavailable helpers, repair reads against the paper's Appendix formulas,
//! incremental and delta encoding, the construction itself (a-halves are plain RS, piggybacks
//! are where the paper puts them) and input validation.
//!
//! All randomness comes from `StdRng::seed_from_u64` with a fixed seed per test. Unit lengths
//! are even (α = 2) with odd halves, so SIMD tails are exercised.

mod common;
use common::*;

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::{Code, CodeError, CodeSpec, ReadRange, RepairPlan, UPDATE_CHUNK_BYTES};

/// The three variants, as users name them.
const FAMILIES: [&str; 3] = ["hh-xor", "hh-xor+", "hh-nonxor"];

/// Shapes the brief asks to check exhaustively (n ≤ 16).
const SHAPES: [(usize, usize); 6] = [(10, 4), (6, 3), (5, 3), (7, 2), (2, 2), (12, 4)];

/// Half of 130 is odd, so every region ends in a SIMD tail.
const SMALL_LEN: usize = 130;
/// Two 64 KiB blocks and a tail: halves of 65537 bytes.
const LARGE_LEN: usize = 2 * 64 * 1024 + 2;

fn code(family: &str, k: usize, r: usize) -> Arc<dyn Code> {
    let code = CodeSpec::parse(&format!("{family}({k},{r})")).unwrap().build().unwrap();
    assert_eq!((code.data_units(), code.parity_units(), code.total_units()), (k, r, k + r));
    code
}

fn rs(k: usize, r: usize) -> Arc<dyn Code> {
    CodeSpec::Rs { k, r }.build().unwrap()
}

// ---------------------------------------------------------------------------------------------
// The paper's read formulas, computed here independently of the implementation.

/// Set sizes: `units` units in `groups` sets, as even as possible, larger sets last (the
/// paper's (10,4) example: {1,2,3}, {4,5,6}, {7,8,9,10}).
fn paper_set_sizes(units: usize, groups: usize) -> Vec<usize> {
    let mut sizes = vec![units / groups; groups];
    for extra in 0..units % groups {
        sizes[groups - 1 - extra] += 1;
    }
    sizes
}

/// Appendix: a unit in a set of size s reads k + s half-units; each of the last ℓ units reads
/// k + r + ℓ − 2.
fn paper_reads(k: usize, r: usize, tail: usize) -> Vec<usize> {
    let mut reads = Vec::new();
    for s in paper_set_sizes(k - tail, r - 1) {
        reads.extend(std::iter::repeat_n(k + s, s));
    }
    reads.extend(std::iter::repeat_n(k + r + tail - 2, tail));
    reads
}

/// ℓ: none for hh-xor; otherwise the one minimising the average read, then the maximum.
fn paper_tail(family: &str, k: usize, r: usize) -> usize {
    if family == "hh-xor" {
        return 0;
    }
    let mut best = (usize::MAX, usize::MAX, 0);
    for tail in 0..=k {
        let reads = paper_reads(k, r, tail);
        let score = (reads.iter().sum::<usize>(), *reads.iter().max().unwrap(), tail);
        best = best.min(score);
    }
    best.2
}

/// Expected half-units read to repair each data unit with all helpers available.
fn expected_reads(family: &str, k: usize, r: usize) -> Vec<usize> {
    paper_reads(k, r, paper_tail(family, k, r))
}

/// The paper's sets for hh-xor: data units of each piggyback, indexed by parity (0 has none).
fn paper_sets(k: usize, r: usize, tail: usize) -> Vec<Vec<usize>> {
    let mut sets = vec![Vec::new()];
    let mut next = 0;
    for s in paper_set_sizes(k - tail, r - 1) {
        sets.push((next..next + s).collect());
        next += s;
    }
    sets
}

// ---------------------------------------------------------------------------------------------
// Repair through a plan, with garbage outside it.

/// Repairs `target` with `unavailable` helpers: every byte the plan does not name is garbage in
/// the copies the reads are sliced from, and the unavailable units are garbage entirely.
fn repair_and_check(
    code: &dyn Code,
    rng: &mut StdRng,
    units: &[Vec<u8>],
    target: usize,
    unavailable: &[usize],
    context: &str,
) -> RepairPlan {
    let len = units[0].len();
    let plan = code
        .repair_plan(target, unavailable, len)
        .unwrap_or_else(|e| panic!("{context}: plan for {target} without {unavailable:?}: {e}"));
    check_plan_shape(code, &plan, target, unavailable, context);
    let mut covered = vec![vec![false; len]; units.len()];
    for range in &plan.reads {
        covered[range.unit][range.offset..range.offset + range.len].fill(true);
    }
    let garbled: Vec<Vec<u8>> = units
        .iter()
        .zip(&covered)
        .map(|(unit, covered)| {
            unit.iter().zip(covered).map(|(&b, &c)| if c { b } else { rng.gen() }).collect()
        })
        .collect();
    let reads: Vec<&[u8]> =
        plan.reads.iter().map(|r| &garbled[r.unit][r.offset..r.offset + r.len]).collect();
    let mut out = vec![0x5Au8; len];
    code.repair(&plan, &reads, &mut out)
        .unwrap_or_else(|e| panic!("{context}: repair {target} without {unavailable:?}: {e}"));
    assert_units_eq(
        &[out],
        &[units[target].clone()],
        &format!("{context}: repair {target} without {unavailable:?}"),
    );
    plan
}

/// Ranges are halves or whole units, one range per helper, ascending, none of them the target
/// or unavailable.
fn check_plan_shape(
    code: &dyn Code,
    plan: &RepairPlan,
    target: usize,
    unavailable: &[usize],
    context: &str,
) {
    let len = plan.unit_len;
    let half = len / 2;
    assert_eq!(plan.target, target, "{context}");
    for pair in plan.reads.windows(2) {
        assert!(pair[0].unit < pair[1].unit, "{context}: reads ascending by unit: {plan:?}");
    }
    for range in &plan.reads {
        assert!(range.unit < code.total_units(), "{context}: {range:?}");
        assert_ne!(range.unit, target, "{context}: the target is not a helper");
        assert!(!unavailable.contains(&range.unit), "{context}: {range:?} is unavailable");
        let shape = (range.offset, range.len);
        assert!(
            shape == (0, len) || shape == (0, half) || shape == (half, half),
            "{context}: {range:?} is not a half or a whole unit of {len}"
        );
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn geometry() {
    for family in FAMILIES {
        let code = code(family, 10, 4);
        assert_eq!(code.sub_chunks(), 2);
        assert_eq!(code.unit_len_multiple(), 2);
        assert!(!code.byte_local());
        assert_eq!(code.unit_len_for(0), 0);
        assert_eq!(code.unit_len_for(101), 12);
        assert_eq!(code.spec().to_string(), format!("{family}(10,4)"));
    }
}

/// Every pattern of ≤ r lost units of every shape at a small length; at the large length a
/// fixed sample that includes the extremes (the first m data units, the last m parity units).
#[test]
fn every_pattern_of_at_most_r_lost_decodes() {
    let mut rng = StdRng::seed_from_u64(1);
    for family in FAMILIES {
        for (k, r) in SHAPES {
            let code = code(family, k, r);
            let n = k + r;
            let context = format!("{family}({k},{r})");
            let small = random_group(&*code, &mut rng, SMALL_LEN);
            let large = random_group(&*code, &mut rng, LARGE_LEN);
            let mut checked = 0;
            for m in 0..=r {
                let patterns = combinations(n, m);
                assert_eq!(patterns.len(), binomial(n, m));
                for (i, lost) in patterns.iter().enumerate() {
                    decode_and_check(&*code, &mut rng, &small, lost, &context);
                    let first_data = *lost == (0..m).collect::<Vec<_>>();
                    let last_parity = *lost == (n - m..n).collect::<Vec<_>>();
                    if i % 5 == 0 || first_data || last_parity {
                        decode_and_check(&*code, &mut rng, &large, lost, &context);
                    }
                    checked += 1;
                }
            }
            assert_eq!(checked, (0..=r).map(|m| binomial(n, m)).sum::<usize>());
        }
    }
}

/// Asserts that losing `lost` is refused by `is_decodable`, `decode` and `reconstruct` with
/// `NotDecodable` naming exactly the lost units, and that nothing was written.
fn check_not_decodable(code: &dyn Code, rng: &mut StdRng, units: &[Vec<u8>], lost: &[usize]) {
    let mut order = lost.to_vec();
    order.shuffle(rng);
    assert!(!code.is_decodable(&order), "{}: {order:?} must not be decodable", code.spec());
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
    assert!(error.to_string().contains(&format!("{sorted:?}")));
    assert_units_eq(&work, &before, "a failed decode must not touch any unit");
}

#[test]
fn more_than_r_lost_is_refused() {
    let mut rng = StdRng::seed_from_u64(2);
    for family in FAMILIES {
        for (k, r) in SHAPES {
            let code = code(family, k, r);
            let n = k + r;
            let units = random_group(&*code, &mut rng, 34);
            let patterns = combinations(n, r + 1);
            assert_eq!(patterns.len(), binomial(n, r + 1));
            for lost in &patterns {
                check_not_decodable(&*code, &mut rng, &units, lost);
            }
            check_not_decodable(&*code, &mut rng, &units, &(0..n).collect::<Vec<_>>());
        }
    }
}

#[test]
fn is_decodable_counts_distinct_units_and_rejects_out_of_range() {
    let code = code("hh-xor+", 10, 4);
    assert!(code.is_decodable(&[]));
    assert!(code.is_decodable(&[0, 1, 2, 13]));
    assert!(code.is_decodable(&[0, 0, 1, 1, 2, 13]));
    assert!(!code.is_decodable(&[0, 1, 2, 3, 13]));
    assert!(!code.is_decodable(&[14]));
}

/// Repairs every unit of every shape with every set of up to r − 1 other units unavailable
/// (sampled for the larger shapes), each time from garbage everywhere outside the plan.
#[test]
fn repair_reads_only_the_plan_every_unit_with_unavailable_helpers() {
    let mut rng = StdRng::seed_from_u64(3);
    for family in FAMILIES {
        for (k, r) in SHAPES {
            let code = code(family, k, r);
            let n = k + r;
            let context = format!("{family}({k},{r})");
            let units = random_group(&*code, &mut rng, SMALL_LEN);
            let large = random_group(&*code, &mut rng, LARGE_LEN);
            for target in 0..n {
                repair_and_check(&*code, &mut rng, &large, target, &[], &context);
                let others: Vec<usize> = (0..n).filter(|&u| u != target).collect();
                for m in 0..r {
                    for (i, picked) in combinations(others.len(), m).iter().enumerate() {
                        if n > 14 && m > 2 && i % 2 != target % 2 {
                            continue;
                        }
                        let unavailable: Vec<usize> = picked.iter().map(|&p| others[p]).collect();
                        let plan = repair_and_check(
                            &*code,
                            &mut rng,
                            &units,
                            target,
                            &unavailable,
                            &context,
                        );
                        // Never more than RS reads: k whole units.
                        assert!(plan.bytes_read() <= k * SMALL_LEN, "{context}: {plan:?}");
                    }
                }
                // The target listed as unavailable is fine: it is the one being rebuilt.
                repair_and_check(&*code, &mut rng, &units, target, &[target], &context);
            }
        }
    }
}

#[test]
fn repair_with_r_unavailable_including_the_target_and_refusal_beyond() {
    let mut rng = StdRng::seed_from_u64(4);
    for family in FAMILIES {
        let (k, r) = (10, 4);
        let code = code(family, k, r);
        let units = random_group(&*code, &mut rng, 66);
        for target in [0, 9, 10, 11] {
            let others: Vec<usize> = (0..k + r).filter(|&u| u != target).collect();
            for _ in 0..20 {
                let unavailable: Vec<usize> =
                    others.choose_multiple(&mut rng, r - 1).copied().collect();
                repair_and_check(&*code, &mut rng, &units, target, &unavailable, family);
            }
            let too_many: Vec<usize> = others[..r].to_vec();
            match code.repair_plan(target, &too_many, 66) {
                Err(CodeError::NotDecodable { lost, .. }) => {
                    let mut want = too_many.clone();
                    want.push(target);
                    want.sort_unstable();
                    assert_eq!(lost, want);
                }
                other => panic!("{family}: expected NotDecodable, got {other:?}"),
            }
        }
    }
}

/// Per-unit reads against the Appendix for every 2 ≤ k ≤ 30, 2 ≤ r ≤ 8 (k + r ≤ 256), each plan
/// also carried out on random data.
#[test]
fn repair_reads_match_the_appendix_formulas() {
    let mut rng = StdRng::seed_from_u64(5);
    let len = 6;
    for family in FAMILIES {
        for k in 2..=30 {
            for r in 2..=8 {
                let code = code(family, k, r);
                let expected = expected_reads(family, k, r);
                let units = random_group(&*code, &mut rng, len);
                let context = format!("{family}({k},{r})");
                for (target, &halves) in expected.iter().enumerate() {
                    let plan = repair_and_check(&*code, &mut rng, &units, target, &[], &context);
                    assert_eq!(
                        plan.bytes_read(),
                        halves * len / 2,
                        "{context}: data unit {target} reads {} half-units, formula {halves}",
                        2 * plan.bytes_read() / len
                    );
                    // Helpers: one contiguous range each.
                    assert_eq!(plan.helpers().len(), plan.reads.len(), "{context}: {plan:?}");
                }
                for target in k..k + r {
                    let plan = code.repair_plan(target, &[], len).unwrap();
                    assert_eq!(plan.bytes_read(), k * len, "{context}: parity {target} as RS");
                }
            }
        }
    }
}

fn read_fractions(family: &str, k: usize, r: usize) -> Vec<f64> {
    let code = code(family, k, r);
    let len = 1000;
    (0..k)
        .map(|u| code.repair_plan(u, &[], len).unwrap().bytes_read() as f64 / (k * len) as f64)
        .collect()
}

#[test]
fn acceptance_read_fractions() {
    // hh-xor+(10,4) and hh-nonxor(10,4): every data unit at most 13 of 20 half-units.
    for family in ["hh-xor+", "hh-nonxor"] {
        let fractions = read_fractions(family, 10, 4);
        assert!(fractions.iter().all(|&f| f <= 0.65 + 1e-12), "{family}: {fractions:?}");
    }
    // hh-xor(10,4): 35% saved on units 1–6, 30% on units 7–10 (§3.1).
    let fractions = read_fractions("hh-xor", 10, 4);
    assert_eq!(fractions, [vec![0.65; 6], vec![0.70; 4]].concat());
    // §3.4: hh-xor(6,3) saves 25%, hh-xor(20,5) 37.5% (every unit alike, so also on average).
    let average = |f: Vec<f64>| f.iter().sum::<f64>() / f.len() as f64;
    assert!((average(read_fractions("hh-xor", 6, 3)) - 0.75).abs() < 1e-12);
    assert!((average(read_fractions("hh-xor", 20, 5)) - 0.625).abs() < 1e-12);
    // hh-xor+ and hh-nonxor(20,5): ℓ = 3 brings the average to 24.55 of 40 half-units and
    // the best units to 24 (the paper's "40%").
    for family in ["hh-xor+", "hh-nonxor"] {
        let fractions = read_fractions(family, 20, 5);
        assert!((average(fractions.clone()) - 24.55 / 40.0).abs() < 1e-12, "{family}");
        assert!(fractions.iter().any(|&f| (f - 0.6).abs() < 1e-12), "{family}");
        // (6,3): ℓ = 2, 8 of 12 half-units for the first four units, 9 for the last two.
        let fractions = read_fractions(family, 6, 3);
        assert_eq!(fractions, [vec![8.0 / 12.0; 4], vec![9.0 / 12.0; 2]].concat(), "{family}");
    }
}

/// The read table in the report: prints average and best fraction of RS per code.
#[test]
fn read_table() {
    for (k, r) in [(6, 3), (10, 4), (12, 4), (20, 5)] {
        for family in FAMILIES {
            let f = read_fractions(family, k, r);
            let average = f.iter().sum::<f64>() / f.len() as f64;
            let best = f.iter().copied().fold(f64::INFINITY, f64::min);
            let worst = f.iter().copied().fold(0.0, f64::max);
            println!(
                "{family}({k},{r}) ℓ={} average {average:.4} best {best:.4} worst {worst:.4}",
                paper_tail(family, k, r)
            );
            assert!(average < 1.0 && best <= average + 1e-12 && average <= worst + 1e-12);
        }
    }
}

/// a-halves of hh-xor are rs(k,r) of the data a-halves, b-halves are rs(k,r) of the b-halves
/// plus the XOR of the a-halves of their set; hh-nonxor likewise with P_1-weighted piggybacks
/// and parity 1 carrying the XOR+ step; hh-xor+ has an all-XOR parity 1.
#[test]
fn construction_matches_the_paper() {
    let mut rng = StdRng::seed_from_u64(6);
    let xor_all = |units: &[&[u8]]| -> Vec<u8> {
        let mut out = vec![0u8; units[0].len()];
        for u in units {
            out.iter_mut().zip(*u).for_each(|(o, x)| *o ^= x);
        }
        out
    };
    for (k, r) in SHAPES.into_iter().chain([(20, 5), (3, 8)]) {
        let len = 2 * 37;
        let half = len / 2;
        let data = random_units(&mut rng, k, len);
        let a: Vec<Vec<u8>> = data.iter().map(|d| d[..half].to_vec()).collect();
        let b: Vec<Vec<u8>> = data.iter().map(|d| d[half..].to_vec()).collect();
        let rs_a = encode_units(&*rs(k, r), &a);
        let rs_b = encode_units(&*rs(k, r), &b);

        let units = encode_units(&*code("hh-xor", k, r), &data);
        let sets = paper_sets(k, r, 0);
        for p in 0..r {
            let parity = &units[k + p];
            assert_eq!(parity[..half], rs_a[k + p][..], "hh-xor({k},{r}) parity {p} a-half");
            let mut want = rs_b[k + p].clone();
            for &j in &sets[p] {
                want.iter_mut().zip(&a[j]).for_each(|(w, x)| *w ^= x);
            }
            assert_eq!(parity[half..], want[..], "hh-xor({k},{r}) parity {p} b-half");
        }

        // hh-nonxor: a-halves are rs(k,r) except parity 1, which also holds its b-half; the
        // b-half of parity p minus rs(k,r) is P_1 applied to the set's a-halves only.
        let tail = paper_tail("hh-nonxor", k, r);
        let sets = paper_sets(k, r, tail);
        let units = encode_units(&*code("hh-nonxor", k, r), &data);
        for p in 0..r {
            let parity = &units[k + p];
            let mut want_b = rs_b[k + p].clone();
            if !sets[p].is_empty() {
                let sparse: Vec<Vec<u8>> = (0..k)
                    .map(|j| if sets[p].contains(&j) { a[j].clone() } else { vec![0; half] })
                    .collect();
                let piggyback = &encode_units(&*rs(k, r), &sparse)[k + 1];
                want_b.iter_mut().zip(piggyback).for_each(|(w, x)| *w ^= x);
            }
            assert_eq!(parity[half..], want_b[..], "hh-nonxor({k},{r}) parity {p} b-half");
            let mut want_a = rs_a[k + p].clone();
            if p == 1 {
                want_a.iter_mut().zip(&want_b).for_each(|(w, x)| *w ^= x);
            }
            assert_eq!(parity[..half], want_a[..], "hh-nonxor({k},{r}) parity {p} a-half");
        }

        // hh-xor+: parity 1's b-half is XOR of all b-halves plus XOR of S_1's a-halves, and its
        // a-half (after the XOR+ step) is XOR of the a-halves outside S_1 and of all b-halves.
        let tail = paper_tail("hh-xor+", k, r);
        let sets = paper_sets(k, r, tail);
        let units = encode_units(&*code("hh-xor+", k, r), &data);
        let b_refs: Vec<&[u8]> = b.iter().map(Vec::as_slice).collect();
        let s1: Vec<&[u8]> = sets[1].iter().map(|&j| a[j].as_slice()).collect();
        let outside: Vec<&[u8]> =
            (0..k).filter(|j| !sets[1].contains(j)).map(|j| a[j].as_slice()).collect();
        let want_b = xor_all(&[b_refs.clone(), s1].concat());
        let want_a = xor_all(&[b_refs, outside].concat());
        assert_eq!(units[k + 1][half..], want_b[..], "hh-xor+({k},{r}) parity 1 b-half");
        assert_eq!(units[k + 1][..half], want_a[..], "hh-xor+({k},{r}) parity 1 a-half");
    }
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
    let mut rng = StdRng::seed_from_u64(7);
    for family in FAMILIES {
        for (k, r, len) in [(10, 4, 1000), (6, 3, 130), (2, 2, 2), (12, 4, 66), (3, 7, 98)] {
            let code = code(family, k, r);
            let data = random_units(&mut rng, k, len);
            let expected = encode_units(&*code, &data)[k..].to_vec();
            let mut order: Vec<usize> = (0..k).collect();
            for attempt in 0..4 {
                order.shuffle(&mut rng);
                let parity = encode_incrementally(&*code, &data, &order);
                let context = format!("{family}({k},{r}) order {order:?} #{attempt}");
                assert_units_eq(&parity, &expected, &context);
            }
            // encode_add adds: accumulators that start at S end at S + parity.
            let start = random_units(&mut rng, r, len);
            let mut parity = start.clone();
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            for (j, unit) in data.iter().enumerate() {
                code.encode_add(j, unit, &mut dsts).unwrap();
            }
            let want: Vec<Vec<u8>> = start
                .iter()
                .zip(&expected)
                .map(|(s, p)| s.iter().zip(p).map(|(x, y)| x ^ y).collect())
                .collect();
            assert_units_eq(&parity, &want, &format!("{family}({k},{r}) onto non-zero"));
        }
    }
}

#[test]
fn delta_update_equals_re_encoding() {
    let mut rng = StdRng::seed_from_u64(8);
    let lens = [130, 2, UPDATE_CHUNK_BYTES, UPDATE_CHUNK_BYTES + 2, 2 * UPDATE_CHUNK_BYTES + 78];
    for family in FAMILIES {
        let (k, r) = (6, 3);
        let code = code(family, k, r);
        for len in lens {
            let mut data = random_units(&mut rng, k, len);
            let mut parity = encode_units(&*code, &data)[k..].to_vec();
            for step in 0..3 {
                let index = rng.gen_range(0..k);
                let mut new = data[index].clone();
                if step == 1 {
                    // A sparse change, in the second half only.
                    let at = rng.gen_range(len / 2..len);
                    new[at] ^= 0x40;
                } else {
                    rng.fill(&mut new[..]);
                }
                let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                code.update(index, &data[index], &new, &mut dsts).unwrap();
                data[index] = new;
                let want = encode_units(&*code, &data)[k..].to_vec();
                assert_units_eq(&parity, &want, &format!("{family} len {len} step {step}"));
            }
        }
    }
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
        .unwrap_or_else(|e| panic!("{}: present {present:?} wanted {wanted:?}: {e}", code.spec()));
    let want: Vec<Vec<u8>> = wanted.iter().map(|&w| units[w].clone()).collect();
    assert_units_eq(
        &out,
        &want,
        &format!("{}: present {present:?} wanted {wanted:?}", code.spec()),
    );
}

#[test]
fn reconstruct_subsets_duplicates_and_present_units() {
    let mut rng = StdRng::seed_from_u64(9);
    for family in FAMILIES {
        let code = code(family, 10, 4);
        let units = random_group(&*code, &mut rng, 130);
        let present: Vec<usize> = (0..14).filter(|i| ![1, 7, 11, 12].contains(i)).collect();
        for wanted in [
            vec![11, 12],
            vec![12],
            vec![1],
            vec![7, 1],
            vec![12, 1, 11, 7],
            vec![1, 5, 13],
            vec![13, 0],
            vec![1, 1, 12, 1],
        ] {
            reconstruct_and_check(&*code, &units, &present, &wanted, &mut rng);
        }
        // Exactly k present, none of them data.
        let present: Vec<usize> = (4..14).collect();
        reconstruct_and_check(&*code, &units, &present, &[3, 0, 2, 1], &mut rng);
    }
}

/// Random shapes, lengths, patterns and wanted lists; repairs with random unavailable helpers.
#[test]
fn random_codes_patterns_and_repairs() {
    let mut rng = StdRng::seed_from_u64(10);
    for round in 0..150 {
        let family = FAMILIES[round % 3];
        let k = rng.gen_range(2..=20);
        let r = rng.gen_range(2..=6);
        let n = k + r;
        let len = 2 * rng.gen_range(1..=150);
        let code = code(family, k, r);
        let context = format!("{family}({k},{r}) len {len} round {round}");
        let units = random_group(&*code, &mut rng, len);
        for _ in 0..4 {
            let m = rng.gen_range(1..=r);
            let lost = rand::seq::index::sample(&mut rng, n, m).into_vec();
            decode_and_check(&*code, &mut rng, &units, &lost, &context);
            let present: Vec<usize> = (0..n).filter(|u| !lost.contains(u)).collect();
            let wanted_count = rng.gen_range(1..=n);
            let wanted = rand::seq::index::sample(&mut rng, n, wanted_count).into_vec();
            reconstruct_and_check(&*code, &units, &present, &wanted, &mut rng);
            let target = rng.gen_range(0..n);
            let others: Vec<usize> = (0..n).filter(|&u| u != target).collect();
            let unavailable_count = rng.gen_range(0..r);
            let unavailable: Vec<usize> =
                others.choose_multiple(&mut rng, unavailable_count).copied().collect();
            repair_and_check(&*code, &mut rng, &units, target, &unavailable, &context);
        }
    }
}

#[test]
fn repair_accepts_any_plan_that_determines_the_target() {
    let mut rng = StdRng::seed_from_u64(11);
    for family in FAMILIES {
        let (k, r, len) = (10, 4, 98);
        let code = code(family, k, r);
        let units = random_group(&*code, &mut rng, len);
        // RS-style: k whole units (here the last k), as another version might have planned.
        for target in [0, 5, 9, 12] {
            let reads: Vec<ReadRange> = (0..k + r)
                .filter(|&u| u != target)
                .rev()
                .take(k)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .map(|unit| ReadRange { unit, offset: 0, len })
                .collect();
            let plan = RepairPlan { target, unit_len: len, reads };
            let slices: Vec<&[u8]> = plan.reads.iter().map(|r| units[r.unit].as_slice()).collect();
            let mut out = vec![0u8; len];
            code.repair(&plan, &slices, &mut out).unwrap();
            assert_eq!(out, units[target], "{family}: unit {target} from the last k units");
        }
        // Everything but the target, whole: more than needed is fine.
        let target = 3;
        let reads: Vec<ReadRange> = (0..k + r)
            .filter(|&u| u != target)
            .map(|unit| ReadRange { unit, offset: 0, len })
            .collect();
        let plan = RepairPlan { target, unit_len: len, reads };
        let slices: Vec<&[u8]> = plan.reads.iter().map(|r| units[r.unit].as_slice()).collect();
        let mut out = vec![0u8; len];
        code.repair(&plan, &slices, &mut out).unwrap();
        assert_eq!(out, units[target]);
    }
}

#[test]
fn repair_refuses_plans_that_do_not_match() {
    let mut rng = StdRng::seed_from_u64(12);
    let (k, r, len) = (10, 4, 66);
    for family in FAMILIES {
        let code = code(family, k, r);
        let units = random_group(&*code, &mut rng, len);
        let plan = code.repair_plan(0, &[], len).unwrap();
        let slices = |plan: &RepairPlan| -> Vec<Vec<u8>> {
            plan.reads
                .iter()
                .map(|r| units[r.unit][r.offset..(r.offset + r.len).min(len)].to_vec())
                .collect()
        };
        let attempt = |plan: &RepairPlan, reads: &[Vec<u8>], out_len: usize| {
            let refs: Vec<&[u8]> = reads.iter().map(Vec::as_slice).collect();
            let mut out = vec![0x77u8; out_len];
            let result = code.repair(plan, &refs, &mut out);
            if result.is_err() {
                assert!(out.iter().all(|&b| b == 0x77), "{family}: output untouched on error");
            }
            result.map(|()| out)
        };
        let good = slices(&plan);
        // Too few reads for the plan.
        let mismatch = |result: Result<Vec<u8>, CodeError>| {
            assert!(matches!(result, Err(CodeError::PlanMismatch { .. })), "{family}: {result:?}")
        };
        mismatch(attempt(&plan, &good[1..], len));
        // A read of the wrong length.
        let mut short = good.clone();
        short[2].pop();
        mismatch(attempt(&plan, &short, len));
        // A range that is not a half or the whole unit.
        let mut odd = plan.clone();
        odd.reads[0].offset += 1;
        odd.reads[0].len -= 1;
        mismatch(attempt(&odd, &slices(&odd), len));
        // One read fewer: the rest cannot determine unit 0.
        let mut missing = plan.clone();
        missing.reads.remove(0);
        mismatch(attempt(&missing, &slices(&missing), len));
        // The target as its own helper.
        let mut selfish = plan.clone();
        selfish.reads[0].unit = 0;
        mismatch(attempt(&selfish, &slices(&selfish), len));
        // The same half twice.
        let mut twice = plan.clone();
        twice.reads.push(twice.reads[0]);
        mismatch(attempt(&twice, &slices(&twice), len));
        // Output of the wrong length; odd unit length; target out of range.
        assert!(matches!(attempt(&plan, &good, len - 2), Err(CodeError::UnitLength { .. })));
        let mut odd_len = plan.clone();
        odd_len.unit_len = len + 1;
        assert!(matches!(
            attempt(&odd_len, &good, len + 1),
            Err(CodeError::UnitLengthMultiple { multiple: 2, .. })
        ));
        let mut far = plan.clone();
        far.target = k + r;
        assert!(matches!(attempt(&far, &good, len), Err(CodeError::UnitIndex { .. })));
        // And the good plan works.
        assert_eq!(attempt(&plan, &good, len).unwrap(), units[0], "{family}");
    }
}

#[test]
fn operations_validate_before_touching_outputs() {
    let mut rng = StdRng::seed_from_u64(13);
    let (k, r) = (6, 3);
    for family in FAMILIES {
        let code = code(family, k, r);
        let data = random_units(&mut rng, k, 40);
        let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut parity = vec![vec![0x11u8; 40]; r];
        let untouched = parity.clone();
        let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        assert!(matches!(
            code.encode(&srcs[1..], &mut dsts),
            Err(CodeError::UnitCount { what: "data units", .. })
        ));
        assert!(matches!(
            code.encode(&srcs, &mut dsts[1..]),
            Err(CodeError::UnitCount { what: "parity units", .. })
        ));
        let odd: Vec<&[u8]> = data.iter().map(|d| &d[..39]).collect();
        let mut odd_parity = vec![vec![0x11u8; 39]; r];
        let mut odd_dsts: Vec<&mut [u8]> = odd_parity.iter_mut().map(Vec::as_mut_slice).collect();
        let error = code.encode(&odd, &mut odd_dsts).unwrap_err();
        assert_eq!(
            error,
            CodeError::UnitLengthMultiple { code: format!("{family}(6,3)"), len: 39, multiple: 2 }
        );
        assert!(error.to_string().contains("multiple of 2"), "{error}");
        let mut mixed = srcs.clone();
        mixed[3] = &data[3][..38];
        assert!(matches!(
            code.encode(&mixed, &mut dsts),
            Err(CodeError::UnitLength { unit: 3, .. })
        ));
        assert!(matches!(
            code.encode_add(k, &data[0], &mut dsts),
            Err(CodeError::DataIndex { index: 6, k: 6 })
        ));
        assert!(matches!(
            code.encode_add(0, &data[0][..39], &mut dsts),
            Err(CodeError::UnitLength { .. }) | Err(CodeError::UnitLengthMultiple { .. })
        ));
        assert!(matches!(
            code.update(0, &data[0], &data[1][..38], &mut dsts),
            Err(CodeError::UnitLength { .. })
        ));
        assert!(matches!(
            code.update(k, &data[0], &data[1], &mut dsts),
            Err(CodeError::DataIndex { .. })
        ));
        drop(dsts);
        assert_eq!(parity, untouched, "{family}: parity untouched by refused operations");

        // reconstruct: counts, indices, lengths.
        let units = encode_units(&*code, &data);
        let view: Vec<Option<&[u8]>> =
            units.iter().enumerate().map(|(i, u)| (i != 0).then_some(u.as_slice())).collect();
        let mut out = vec![vec![0x22u8; 40]];
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
        assert!(matches!(
            code.reconstruct(&view[1..], &[0], &mut outs),
            Err(CodeError::UnitCount { what: "units", .. })
        ));
        assert!(matches!(
            code.reconstruct(&view, &[0, 1], &mut outs),
            Err(CodeError::UnitCount { what: "output buffers", .. })
        ));
        assert!(matches!(
            code.reconstruct(&view, &[k + r], &mut outs),
            Err(CodeError::UnitIndex { index: 9, total: 9 })
        ));
        let odd_view: Vec<Option<&[u8]>> = view.iter().map(|v| v.map(|u| &u[..39])).collect();
        let mut odd_out = [0x22u8; 39];
        assert!(matches!(
            code.reconstruct(&odd_view, &[0], &mut [&mut odd_out[..]]),
            Err(CodeError::UnitLengthMultiple { .. })
        ));
        drop(outs);
        assert_eq!(out, vec![vec![0x22u8; 40]]);

        // repair_plan: indices and lengths.
        assert!(matches!(code.repair_plan(k + r, &[], 40), Err(CodeError::UnitIndex { .. })));
        assert!(matches!(code.repair_plan(0, &[k + r], 40), Err(CodeError::UnitIndex { .. })));
        assert!(matches!(
            code.repair_plan(0, &[], 41),
            Err(CodeError::UnitLengthMultiple { multiple: 2, .. })
        ));
    }
}

#[test]
fn empty_units_are_fine() {
    for family in FAMILIES {
        let code = code(family, 4, 2);
        let data = vec![Vec::new(); 4];
        let units = encode_units(&*code, &data);
        assert!(units.iter().all(Vec::is_empty));
        let plan = code.repair_plan(0, &[], 0).unwrap();
        let reads: Vec<&[u8]> = plan.reads.iter().map(|_| &[][..]).collect();
        code.repair(&plan, &reads, &mut []).unwrap();
        let mut work = units.clone();
        let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
        code.decode(&mut refs, &[0, 5]).unwrap();
    }
}
