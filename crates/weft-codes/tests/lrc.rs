//! Locally repairable codes (`lrc(k,l,g)`) through the `Code` trait.
//!
//! The oracle is the generator matrix, recovered by encoding unit vectors: a loss pattern is
//! decodable iff the generator rows of the present units have rank k, and a unit can be rebuilt
//! from a set of units iff its row lies in their span. Against it: every erasure pattern of the
//! small codes (n ≤ 16), maximal recoverability (the rank answer equals the locality criterion),
//! repair plans with garbage outside the plan, and the structure of the parities.
//!
//! All randomness comes from `StdRng::seed_from_u64` with a fixed seed per test.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::{Code, CodeError, CodeSpec, ReadRange};
use weft_gf::Matrix;

/// The codes whose every erasure pattern is checked.
const SMALL_CODES: [(usize, usize, usize); 5] =
    [(10, 2, 2), (6, 2, 2), (6, 3, 1), (4, 2, 1), (12, 2, 2)];

/// Unit lengths the pattern tests rotate through: none a multiple of 64, one a single byte.
const PATTERN_LENS: [usize; 3] = [37, 1, 70];

fn lrc(k: usize, l: usize, g: usize) -> Arc<dyn Code> {
    let code = CodeSpec::parse(&format!("lrc({k},{l},{g})")).unwrap().build().unwrap();
    assert_eq!(code.spec(), CodeSpec::Lrc { k, l, g });
    assert_eq!((code.data_units(), code.parity_units(), code.total_units()), (k, l + g, k + l + g));
    assert_eq!(code.sub_chunks(), 1);
    assert!(code.byte_local());
    code
}

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    bytes
}

/// Encodes `data` into junk-filled parity buffers (encode must overwrite) and returns all n.
fn encode_units(code: &dyn Code, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0x5Au8; len]; code.parity_units()];
    let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&srcs, &mut dsts).unwrap();
    data.iter().cloned().chain(parity).collect()
}

fn random_group(code: &dyn Code, rng: &mut StdRng, len: usize) -> Vec<Vec<u8>> {
    let data: Vec<Vec<u8>> = (0..code.data_units()).map(|_| random_bytes(rng, len)).collect();
    encode_units(code, &data)
}

/// The n × k generator, column j being the encoding of the j-th unit vector.
fn generator_of(code: &dyn Code) -> Matrix {
    let (k, n) = (code.data_units(), code.total_units());
    let mut matrix = Matrix::zeros(n, k);
    for j in 0..k {
        let data: Vec<Vec<u8>> = (0..k).map(|i| vec![u8::from(i == j)]).collect();
        for (i, unit) in encode_units(code, &data).iter().enumerate() {
            matrix.set(i, j, unit[0]);
        }
    }
    matrix
}

/// Whether `target`'s row lies in the span of the rows of `units`.
fn in_span(generator: &Matrix, units: &[usize], target: usize) -> bool {
    let mut with_target = units.to_vec();
    with_target.push(target);
    generator.select_rows(units).rank() == generator.select_rows(&with_target).rank()
}

/// The locality criterion: after each surviving local parity rebuilds one lost data unit of
/// its group, no more data units are left than global parities survive.
fn locality_allows(k: usize, l: usize, g: usize, lost: &[usize]) -> bool {
    let m = k / l;
    let mut left = 0;
    for group in 0..l {
        let data = lost.iter().filter(|&&u| u < k && u / m == group).count();
        let local_present = !lost.contains(&(k + group));
        left += data.saturating_sub(usize::from(local_present));
    }
    let globals_lost = lost.iter().filter(|&&u| u >= k + l).count();
    left <= g - globals_lost
}

fn assert_units_eq(got: &[Vec<u8>], want: &[Vec<u8>], context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: unit count");
    for (unit, (g, w)) in got.iter().zip(want).enumerate() {
        if let Some(pos) = g.iter().zip(w).position(|(a, b)| a != b) {
            panic!(
                "{context}: unit {unit} differs at byte {pos}: {:#04x} vs {:#04x}",
                g[pos], w[pos]
            );
        }
        assert_eq!(g.len(), w.len(), "{context}: unit {unit} length");
    }
}

/// Decodable patterns and all patterns, indexed by the number of lost units.
struct PatternCounts {
    decodable: Vec<usize>,
    total: Vec<usize>,
}

/// Walks every erasure pattern: is_decodable must equal the rank oracle and the locality
/// criterion; decodable patterns decode in place over garbage, the others fail with
/// `NotDecodable` naming the lost units and leave every unit as it was.
fn every_pattern(k: usize, l: usize, g: usize, seed: u64) -> PatternCounts {
    let code = lrc(k, l, g);
    let n = k + l + g;
    let generator = generator_of(&*code);
    let mut rng = StdRng::seed_from_u64(seed);
    let groups: Vec<Vec<Vec<u8>>> =
        PATTERN_LENS.iter().map(|&len| random_group(&*code, &mut rng, len)).collect();
    let mut counts = PatternCounts { decodable: vec![0; n + 1], total: vec![0; n + 1] };
    let name = code.spec().to_string();
    for mask in 0u32..1 << n {
        let lost: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) != 0).collect();
        let present: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) == 0).collect();
        let context = format!("{name}: lost {lost:?}");
        let by_rank = generator.select_rows(&present).rank() == k;
        assert_eq!(code.is_decodable(&lost), by_rank, "{context}: is_decodable vs rank");
        assert_eq!(
            locality_allows(k, l, g, &lost),
            by_rank,
            "{context}: not maximally recoverable (locality criterion vs rank)"
        );
        counts.total[lost.len()] += 1;
        let units = &groups[mask as usize % groups.len()];
        let mut work = units.to_vec();
        for &u in &lost {
            rng.fill(&mut work[u][..]);
        }
        let before = work.clone();
        let mut order = lost.clone();
        order.shuffle(&mut rng);
        let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
        let result = code.decode(&mut refs, &order);
        if by_rank {
            counts.decodable[lost.len()] += 1;
            result.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_units_eq(&work, units, &context);
        } else {
            match result {
                Err(CodeError::NotDecodable { code: c, lost: named, reason }) => {
                    assert_eq!(c, name, "{context}");
                    assert_eq!(named, lost, "{context}: the error names the lost units");
                    assert!(
                        reason.contains(&format!("beyond what {name} corrects")),
                        "{context}: reason {reason:?}"
                    );
                }
                other => panic!("{context}: expected NotDecodable, got {other:?}"),
            }
            assert_units_eq(&work, &before, &format!("{context}: untouched on error"));
        }
    }
    for lost in 0..=g + 1 {
        assert_eq!(counts.decodable[lost], counts.total[lost], "{name}: all {lost}-loss patterns");
    }
    let fractions: Vec<String> = (0..=n)
        .filter(|&m| counts.decodable[m] > 0)
        .map(|m| {
            let (d, t) = (counts.decodable[m], counts.total[m]);
            format!("{m}: {d}/{t} = {:.1}%", 100.0 * d as f64 / t as f64)
        })
        .collect();
    eprintln!("{name} decodable patterns by units lost: {}", fractions.join(", "));
    counts
}

#[test]
fn lrc_10_2_2_every_pattern() {
    every_pattern(10, 2, 2, 1022);
}

#[test]
fn lrc_12_2_2_every_pattern_and_azure_fraction() {
    let counts = every_pattern(12, 2, 2, 1222);
    // Azure's LRC(12,2,2) decodes 86% of 4-loss patterns; maximally recoverable, so do we.
    let (decodable, total) = (counts.decodable[4], counts.total[4]);
    assert_eq!(total, 1820);
    assert!(decodable * 100 >= 86 * total, "{decodable}/{total} 4-loss patterns");
}

#[test]
fn small_shapes_every_pattern() {
    for (k, l, g) in SMALL_CODES {
        if (k, l, g) != (10, 2, 2) && (k, l, g) != (12, 2, 2) {
            every_pattern(k, l, g, (k * 100 + l * 10 + g) as u64);
        }
    }
}

/// More global parities: the maximal-recoverability check then also covers patterns that lose
/// some globals (column sets on every subset of the surviving global rows).
#[test]
fn three_and_four_global_parities_every_pattern() {
    every_pattern(6, 2, 3, 623);
    every_pattern(8, 2, 4, 824);
}

/// lrc(14,2,3) is not maximally recoverable (greedy points in GF(2^8) run out): every pattern
/// of ≤ g + 1 losses still decodes, is_decodable still tells the rank truth, and a pattern the
/// locality would allow but these coefficients cannot solve is refused with that reason.
#[test]
fn lrc_14_2_3_is_honest_where_not_maximally_recoverable() {
    let (k, l, g) = (14, 2, 3);
    let code = lrc(k, l, g);
    let n = k + l + g;
    let generator = generator_of(&*code);
    let mut rng = StdRng::seed_from_u64(1423);
    let units = random_group(&*code, &mut rng, 24);
    let mut allowed_but_refused = Vec::new();
    let mut counts = [(0usize, 0usize); 7];
    for (lost_count, count) in counts.iter_mut().enumerate().skip(1) {
        let patterns = (0u32..1 << n).filter(|m| m.count_ones() as usize == lost_count);
        for mask in patterns {
            let lost: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) != 0).collect();
            let present: Vec<usize> = (0..n).filter(|&i| mask & (1 << i) == 0).collect();
            let decodable = generator.select_rows(&present).rank() == k;
            assert_eq!(code.is_decodable(&lost), decodable, "lost {lost:?}");
            if decodable {
                assert!(locality_allows(k, l, g, &lost), "lost {lost:?} beats the bound?");
            } else if locality_allows(k, l, g, &lost) {
                allowed_but_refused.push(lost.clone());
            }
            count.0 += usize::from(decodable);
            count.1 += 1;
        }
    }
    for (lost_count, &(decodable, total)) in counts.iter().enumerate().skip(1) {
        if lost_count <= g + 1 {
            assert_eq!(decodable, total, "every {lost_count}-loss pattern");
        }
        eprintln!("lrc(14,2,3): {lost_count} lost: {decodable}/{total} decodable");
    }
    eprintln!("lrc(14,2,3): {} allowed-but-refused patterns", allowed_but_refused.len());
    let lost = allowed_but_refused.first().expect("lrc(14,2,3) is not maximally recoverable");
    assert!(lost.len() >= g + 2);
    let mut work = units.clone();
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
    match code.decode(&mut refs, lost) {
        Err(CodeError::NotDecodable { reason, .. }) => {
            assert!(reason.contains("cannot separate them"), "{reason}");
        }
        other => panic!("lost {lost:?}: {other:?}"),
    }
    assert_units_eq(&work, &units, "untouched on error");
}

#[test]
fn local_parity_is_the_xor_of_its_group() {
    let mut rng = StdRng::seed_from_u64(7);
    for (k, l, g) in SMALL_CODES {
        let code = lrc(k, l, g);
        let units = random_group(&*code, &mut rng, 131);
        let m = k / l;
        for group in 0..l {
            let mut xor = vec![0u8; 131];
            for unit in &units[group * m..(group + 1) * m] {
                xor.iter_mut().zip(unit).for_each(|(x, b)| *x ^= b);
            }
            assert_eq!(units[k + group], xor, "lrc({k},{l},{g}) local parity {group}");
        }
        // Global parities touch every data unit: a zero coefficient would weaken the code.
        let generator = generator_of(&*code);
        for j in k + l..k + l + g {
            assert!(generator.row(j).iter().all(|&c| c != 0), "global row {j}");
        }
    }
}

/// The global rows are part of the on-disk format: a change to the point search must show up
/// here, not in a store that can no longer decode.
#[test]
fn global_rows_are_pinned() {
    let code = lrc(12, 2, 2);
    let generator = generator_of(&*code);
    let rows: Vec<Vec<u8>> = (14..16).map(|r| generator.row(r).to_vec()).collect();
    assert_eq!(rows, PINNED_12_2_2);
}

/// Points 1..=6 for group 0; 7 is skipped because 7 = 1 ⊕ 6 = 2 ⊕ 5 = 3 ⊕ 4 would make a
/// pair of group 0 indistinguishable from a unit of group 1 (a + b + c = 0).
const PINNED_12_2_2: [[u8; 12]; 2] =
    [[1, 2, 3, 4, 5, 6, 8, 16, 24, 32, 40, 48], [1, 4, 5, 16, 17, 20, 64, 29, 93, 116, 52, 105]];

#[test]
fn encode_add_in_any_order_equals_encode() {
    let mut rng = StdRng::seed_from_u64(31);
    for (k, l, g) in SMALL_CODES {
        let code = lrc(k, l, g);
        let len = 97;
        let units = random_group(&*code, &mut rng, len);
        for _ in 0..4 {
            let mut order: Vec<usize> = (0..k).collect();
            order.shuffle(&mut rng);
            let mut parity = vec![vec![0u8; len]; l + g];
            for &d in &order {
                let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                code.encode_add(d, &units[d], &mut dsts).unwrap();
            }
            assert_units_eq(&parity, &units[k..], &format!("lrc({k},{l},{g}) order {order:?}"));
        }
    }
}

#[test]
fn update_equals_re_encode() {
    let mut rng = StdRng::seed_from_u64(41);
    for (k, l, g) in SMALL_CODES {
        let code = lrc(k, l, g);
        let len = 150;
        let mut units = random_group(&*code, &mut rng, len);
        for step in 0..6 {
            let d = rng.gen_range(0..k);
            let new = random_bytes(&mut rng, len);
            let (data, parity) = units.split_at_mut(k);
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            code.update(d, &data[d], &new, &mut dsts).unwrap();
            data[d] = new;
            let fresh = encode_units(&*code, &units[..k]);
            assert_units_eq(&units, &fresh, &format!("lrc({k},{l},{g}) step {step} unit {d}"));
        }
    }
}

/// Smallest number of available units whose span holds `target`'s row (None if none does).
fn fewest_helpers(generator: &Matrix, available: &[usize], target: usize) -> Option<usize> {
    if !in_span(generator, available, target) {
        return None;
    }
    let a = available.len();
    (1..=a).find(|&size| {
        (0u32..1 << a).filter(|mask| mask.count_ones() as usize == size).any(|mask| {
            let units: Vec<usize> =
                (0..a).filter(|i| mask & (1 << i) != 0).map(|i| available[i]).collect();
            in_span(generator, &units, target)
        })
    })
}

/// Repairs `target` avoiding `unavailable`: the plan reads whole available units in ascending
/// order, local repair when the group is intact, and the repair rebuilds the unit from the
/// planned bytes alone (everything else garbage). Returns the plan's helper count, or None when
/// the oracle agrees the unit cannot be rebuilt.
fn repair_and_check(
    code: &dyn Code,
    generator: &Matrix,
    units: &[Vec<u8>],
    target: usize,
    unavailable: &[usize],
    rng: &mut StdRng,
) -> Option<usize> {
    let n = code.total_units();
    let len = units[0].len();
    let context = format!("{}: unit {target} without {unavailable:?}", code.spec());
    let available: Vec<usize> =
        (0..n).filter(|&u| u != target && !unavailable.contains(&u)).collect();
    let possible = in_span(generator, &available, target);
    let plan = match code.repair_plan(target, unavailable, len) {
        Ok(plan) => plan,
        Err(CodeError::NotDecodable { lost, reason, .. }) => {
            assert!(!possible, "{context}: refused ({reason}) but the oracle can rebuild it");
            assert!(lost.contains(&target), "{context}: error names the target");
            return None;
        }
        Err(e) => panic!("{context}: {e}"),
    };
    assert!(possible, "{context}: planned but the oracle says impossible");
    assert_eq!((plan.target, plan.unit_len), (target, len), "{context}");
    let helpers = plan.helpers();
    assert_eq!(plan.reads.len(), helpers.len(), "{context}: one read per unit");
    for (read, &unit) in plan.reads.iter().zip(&helpers) {
        assert_eq!(*read, ReadRange { unit, offset: 0, len }, "{context}: ascending whole units");
        assert!(available.contains(&unit), "{context}: reads unavailable unit {unit}");
    }
    assert_eq!(plan.bytes_read(), helpers.len() * len, "{context}");
    let mut copies = units.to_vec();
    for (unit, copy) in copies.iter_mut().enumerate() {
        if !helpers.contains(&unit) {
            rng.fill(&mut copy[..]);
        }
    }
    let reads: Vec<&[u8]> =
        plan.reads.iter().map(|r| &copies[r.unit][r.offset..r.offset + r.len]).collect();
    let mut out = random_bytes(rng, len);
    code.repair(&plan, &reads, &mut out).unwrap_or_else(|e| panic!("{context}: {e}"));
    assert_eq!(out, units[target], "{context}: repaired bytes");
    Some(helpers.len())
}

#[test]
fn repair_every_unit_with_and_without_unavailable_units() {
    let mut rng = StdRng::seed_from_u64(55);
    for (k, l, g) in SMALL_CODES {
        let code = lrc(k, l, g);
        let n = k + l + g;
        let m = k / l;
        let generator = generator_of(&*code);
        let units = random_group(&*code, &mut rng, 45);
        let exhaustive = n <= 10;
        for target in 0..n {
            let others: Vec<usize> = (0..n).filter(|&u| u != target).collect();
            let mut unavailable_sets: Vec<Vec<usize>> = vec![vec![]];
            unavailable_sets.extend(others.iter().map(|&u| vec![u]));
            for (i, &a) in others.iter().enumerate() {
                unavailable_sets.extend(others[i + 1..].iter().map(|&b| vec![a, b]));
            }
            for unavailable in &unavailable_sets {
                let context = format!("lrc({k},{l},{g}): unit {target} without {unavailable:?}");
                let read =
                    repair_and_check(&*code, &generator, &units, target, unavailable, &mut rng);
                let group = if target < k {
                    Some(target / m)
                } else if target < k + l {
                    Some(target - k)
                } else {
                    None
                };
                if let Some(group) = group {
                    let members: Vec<usize> =
                        (group * m..(group + 1) * m).chain([k + group]).collect();
                    if members.iter().all(|u| *u == target || !unavailable.contains(u)) {
                        assert_eq!(read, Some(m), "{context}: local repair reads k/l units");
                    }
                }
                if exhaustive {
                    let available: Vec<usize> =
                        others.iter().copied().filter(|u| !unavailable.contains(u)).collect();
                    assert_eq!(
                        read,
                        fewest_helpers(&generator, &available, target),
                        "{context}: the plan reads the fewest units possible"
                    );
                }
            }
        }
    }
}

#[test]
fn lrc_10_2_2_repair_reads() {
    let code = lrc(10, 2, 2);
    let len = 4096;
    for target in 0..14 {
        let plan = code.repair_plan(target, &[], len).unwrap();
        let expected: Vec<usize> = match target {
            0..=4 | 10 => (0..5).chain([10]).filter(|&u| u != target).collect(),
            5..=9 | 11 => (5..10).chain([11]).filter(|&u| u != target).collect(),
            _ => (0..10).collect(),
        };
        assert_eq!(plan.helpers(), expected, "unit {target}");
        assert_eq!(plan.bytes_read(), expected.len() * len, "unit {target}");
    }
    // With a group member away, a data unit falls back to a global parity.
    let plan = code.repair_plan(0, &[1], len).unwrap();
    assert!(plan.helpers().iter().any(|&u| u >= 12), "{plan:?}");
    assert!(!plan.helpers().contains(&1));
}

#[test]
fn errors_name_units_and_groups() {
    let code = lrc(10, 2, 2);
    let mut rng = StdRng::seed_from_u64(9);
    let units = random_group(&*code, &mut rng, 16);
    let mut work = units.clone();
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
    let err = code.decode(&mut refs, &[10, 2, 1, 0]).unwrap_err();
    let CodeError::NotDecodable { lost, reason, .. } = &err else { panic!("{err:?}") };
    assert_eq!(lost, &[0, 1, 2, 10]);
    assert!(
        reason.contains("local group 0 lost data units [0, 1, 2] and its local parity 10"),
        "{reason}"
    );
    assert!(reason.contains("only 2 of 2 survive"), "{reason}");
    let shown = err.to_string();
    assert!(shown.contains("lrc(10,2,2)") && shown.contains("[0, 1, 2, 10]"), "{shown}");

    // A unit whose group and globals are gone cannot be planned.
    let err = code.repair_plan(0, &[1, 12, 13], 16).unwrap_err();
    let CodeError::NotDecodable { lost, reason, .. } = &err else { panic!("{err:?}") };
    assert_eq!(lost, &[0, 1, 12, 13]);
    assert!(reason.starts_with("rebuilding unit 0: "), "{reason}");
    // ... but the other group still repairs locally.
    assert_eq!(code.repair_plan(5, &[1, 12, 13], 16).unwrap().helpers(), vec![6, 7, 8, 9, 11]);

    assert!(matches!(code.repair_plan(14, &[], 16), Err(CodeError::UnitIndex { index: 14, .. })));
    assert!(matches!(code.repair_plan(0, &[20], 16), Err(CodeError::UnitIndex { index: 20, .. })));
    assert!(!code.is_decodable(&[14]));

    // A plan whose reads cannot give the target is refused, not answered with garbage.
    let mut plan = code.repair_plan(0, &[], 16).unwrap();
    plan.reads.pop();
    let reads: Vec<&[u8]> = plan.reads.iter().map(|r| &units[r.unit][..]).collect();
    let mut out = vec![0u8; 16];
    assert!(matches!(code.repair(&plan, &reads, &mut out), Err(CodeError::NotDecodable { .. })));
    assert_eq!(out, vec![0u8; 16], "untouched on error");
}

#[test]
fn invalid_parameters_are_refused() {
    for text in ["lrc(10,3,2)", "lrc(10,0,2)", "lrc(10,2,0)", "lrc(250,2,5)"] {
        let spec = CodeSpec::parse(text);
        let built = spec.and_then(|s| s.build());
        assert!(built.is_err(), "{text}");
    }
}

/// Larger codes still build quickly and decode sampled patterns of up to g + 1 losses.
#[test]
fn larger_codes_sampled_patterns() {
    let mut rng = StdRng::seed_from_u64(77);
    for (k, l, g, samples) in
        [(14, 2, 2, 300), (16, 4, 3, 300), (24, 4, 4, 200), (48, 6, 6, 50), (200, 4, 20, 4)]
    {
        let started = std::time::Instant::now();
        let code = lrc(k, l, g);
        let built = started.elapsed();
        let n = k + l + g;
        let units = random_group(&*code, &mut rng, 33);
        let mut failures = 0;
        for _ in 0..samples {
            let count = rng.gen_range(1..=g + 1);
            let lost = rand::seq::index::sample(&mut rng, n, count).into_vec();
            if !code.is_decodable(&lost) {
                failures += 1;
                continue;
            }
            let mut work = units.clone();
            for &u in &lost {
                rng.fill(&mut work[u][..]);
            }
            let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
            code.decode(&mut refs, &lost).unwrap();
            assert_units_eq(&work, &units, &format!("lrc({k},{l},{g}) lost {lost:?}"));
        }
        eprintln!(
            "lrc({k},{l},{g}): built in {built:?}, {failures}/{samples} ≤ g+1 samples undecodable"
        );
    }
}
