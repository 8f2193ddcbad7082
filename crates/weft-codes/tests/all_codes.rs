//! The `Code` trait's contract, checked the same way for every code weft has: whatever a code
//! promises through the trait (decodable patterns, exact repair plans, linearity), it keeps.
//! Code-specific properties (Hitchhiker's read formulas, Clay's β·d reads, LRC locality) live in
//! each code's own test file; this file is the floor every present and future code must meet.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::{Code, CodeError, CodeSpec};

/// Small instances of every family, odd shapes included.
const SPECS: &[&str] = &[
    "rs(6,3)",
    "rs(5,3)",
    "rep(3)",
    "hh-xor(6,3)",
    "hh-xor+(5,3)",
    "hh-nonxor(7,2)",
    "hh-xor(4,4)",
    "clay(4,2)",
    "clay(5,3)",
    "clay(6,3,7)",
    "lrc(6,2,2)",
    "lrc(4,2,1)",
];

fn codes() -> Vec<std::sync::Arc<dyn Code>> {
    SPECS.iter().map(|s| CodeSpec::parse(s).unwrap().build().unwrap()).collect()
}

fn random_units(rng: &mut StdRng, code: &dyn Code, unit_len: usize) -> Vec<Vec<u8>> {
    let (k, n) = (code.data_units(), code.total_units());
    let mut units: Vec<Vec<u8>> = (0..n)
        .map(|i| if i < k { (0..unit_len).map(|_| rng.gen()).collect() } else { vec![0; unit_len] })
        .collect();
    let (data, parity) = units.split_at_mut(k);
    let data: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&data, &mut parity).unwrap();
    units
}

/// Every subset of `0..n` with at most `max` elements, in a fixed order.
fn subsets(n: usize, max: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|m| m.count_ones() as usize <= max)
        .map(|m| (0..n).filter(|i| m & (1 << i) != 0).collect())
        .collect()
}

#[test]
fn names_and_shapes_are_consistent() {
    for code in codes() {
        let spec = code.spec();
        assert_eq!(CodeSpec::parse(&spec.to_string()), Ok(spec));
        assert_eq!(code.data_units(), spec.k(), "{spec}");
        assert_eq!(code.parity_units(), spec.r(), "{spec}");
        assert_eq!(code.total_units(), spec.k() + spec.r(), "{spec}");
        assert_eq!(
            code.unit_len_multiple() % code.sub_chunks(),
            0,
            "{spec}: sub-chunks must tile a unit"
        );
        if code.byte_local() {
            assert_eq!(code.sub_chunks(), 1, "{spec}: a byte-local code has no sub-chunks");
        }
        let multiple = code.unit_len_multiple();
        if multiple > 1 {
            assert!(
                matches!(
                    code.check_unit_len(multiple + 1),
                    Err(CodeError::UnitLengthMultiple { .. })
                ),
                "{spec} must refuse a unit length that breaks its layout"
            );
        }
    }
}

#[test]
fn every_pattern_decodes_or_is_refused() {
    let mut rng = StdRng::seed_from_u64(31);
    for code in codes() {
        let spec = code.spec();
        let (n, r) = (code.total_units(), code.parity_units());
        let unit_len = code.unit_len_multiple() * if code.sub_chunks() > 16 { 1 } else { 4 };
        let original = random_units(&mut rng, code.as_ref(), unit_len);
        for lost in subsets(n, r + 1) {
            let decodable = code.is_decodable(&lost);
            match spec {
                // Azure-style LRC promises any g + 1 losses (and more, pattern by pattern).
                CodeSpec::Lrc { g, .. } => {
                    if lost.len() <= g + 1 {
                        assert!(decodable, "{spec} must decode {lost:?}");
                    }
                }
                _ => assert_eq!(decodable, lost.len() <= r, "{spec} is MDS: {lost:?}"),
            }
            let mut units = original.clone();
            for &l in &lost {
                units[l].iter_mut().for_each(|b| *b = rng.gen());
            }
            let before = units.clone();
            let mut refs: Vec<&mut [u8]> = units.iter_mut().map(Vec::as_mut_slice).collect();
            let result = code.decode(&mut refs, &lost);
            if decodable {
                result.unwrap_or_else(|e| panic!("{spec} {lost:?}: {e}"));
                assert!(units == original, "{spec}: decode of {lost:?} is wrong");
            } else {
                assert!(matches!(result, Err(CodeError::NotDecodable { .. })), "{spec} {lost:?}");
                assert!(units == before, "{spec}: a refused decode wrote into the units");
            }
        }
    }
}

#[test]
fn repair_reads_only_what_the_plan_names() {
    let mut rng = StdRng::seed_from_u64(32);
    for code in codes() {
        let spec = code.spec();
        let (n, r) = (code.total_units(), code.parity_units());
        let unit_len = code.unit_len_multiple() * 2;
        let original = random_units(&mut rng, code.as_ref(), unit_len);
        for target in 0..n {
            for unavailable in subsets(n, r - 1).into_iter().filter(|u| !u.contains(&target)) {
                let mut lost = unavailable.clone();
                lost.push(target);
                let plan = match code.repair_plan(target, &unavailable, unit_len) {
                    Ok(plan) => plan,
                    Err(e) => {
                        assert!(
                            !code.is_decodable(&lost),
                            "{spec}: no plan for {target} without {unavailable:?}: {e}"
                        );
                        continue;
                    }
                };
                assert_eq!(plan.target, target);
                assert!(plan
                    .reads
                    .iter()
                    .all(|read| read.unit != target && !unavailable.contains(&read.unit)));
                // Garbage everywhere the plan does not read.
                let mut copies: Vec<Vec<u8>> =
                    (0..n).map(|_| (0..unit_len).map(|_| rng.gen()).collect()).collect();
                for read in &plan.reads {
                    let range = read.offset..read.offset + read.len;
                    copies[read.unit][range.clone()].copy_from_slice(&original[read.unit][range]);
                }
                let reads: Vec<&[u8]> = plan
                    .reads
                    .iter()
                    .map(|read| &copies[read.unit][read.offset..read.offset + read.len])
                    .collect();
                let mut out = vec![0u8; unit_len];
                code.repair(&plan, &reads, &mut out)
                    .unwrap_or_else(|e| panic!("{spec} unit {target}: {e}"));
                assert!(
                    out == original[target],
                    "{spec}: repair of {target} without {unavailable:?} is wrong"
                );
            }
        }
    }
}

#[test]
fn partial_parities_and_delta_updates_are_exact() {
    let mut rng = StdRng::seed_from_u64(33);
    for code in codes() {
        let spec = code.spec();
        let (k, r) = (code.data_units(), code.parity_units());
        let unit_len = code.unit_len_multiple() * 3;
        let units = random_units(&mut rng, code.as_ref(), unit_len);
        let mut order: Vec<usize> = (0..k).collect();
        order.shuffle(&mut rng);
        let mut parity = vec![vec![0u8; unit_len]; r];
        for &j in &order {
            let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            code.encode_add(j, &units[j], &mut refs).unwrap();
        }
        assert!(
            parity[..] == units[k..],
            "{spec}: encode_add in order {order:?} differs from encode"
        );

        let j = rng.gen_range(0..k);
        let new: Vec<u8> = (0..unit_len).map(|_| rng.gen()).collect();
        let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.update(j, &units[j], &new, &mut refs).unwrap();
        let mut changed = units.clone();
        changed[j] = new;
        let reencoded = random_units_from(code.as_ref(), &changed[..k]);
        assert!(parity == reencoded, "{spec}: update of data unit {j} differs from re-encoding");
    }
}

fn random_units_from(code: &dyn Code, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let unit_len = data[0].len();
    let mut parity = vec![vec![0u8; unit_len]; code.parity_units()];
    let data: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&data, &mut refs).unwrap();
    parity
}
