//! Replication (`rep(n)`) through the `Code` trait: k = 1, every parity unit is a copy of the
//! data unit, any n − 1 units may be lost, and a repair reads exactly one surviving copy.
//!
//! Fixed seeds (`StdRng::seed_from_u64`) make every failure reproducible.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weft_codes::{Code, CodeError, CodeSpec, LinearCode, UPDATE_CHUNK_BYTES};

const COPIES: [usize; 3] = [2, 3, 5];

fn rep(n: usize) -> Arc<dyn Code> {
    let code = CodeSpec::parse(&format!("rep({n})")).unwrap().build().unwrap();
    assert_eq!((code.data_units(), code.parity_units(), code.total_units()), (1, n - 1, n));
    code
}

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    bytes
}

/// All n units of a group holding `data`, parity computed by `encode` into junk-filled buffers.
fn encode_units(code: &dyn Code, data: &[u8]) -> Vec<Vec<u8>> {
    let mut parity = vec![vec![0xC3u8; data.len()]; code.parity_units()];
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&[data], &mut dsts).unwrap();
    std::iter::once(data.to_vec()).chain(parity).collect()
}

/// Every subset of 0..n as a sorted list, by bit mask.
fn subsets(n: usize) -> impl Iterator<Item = Vec<usize>> {
    (0u32..1 << n).map(move |mask| (0..n).filter(|&i| mask & (1 << i) != 0).collect())
}

#[test]
fn parity_units_are_copies_of_the_data() {
    let mut rng = StdRng::seed_from_u64(21);
    for n in COPIES {
        let code = rep(n);
        for len in [0, 1, 63, 130, 4097] {
            let data = random_bytes(&mut rng, len);
            let units = encode_units(&*code, &data);
            for (i, unit) in units.iter().enumerate() {
                assert!(unit == &data, "rep({n}) len {len}: unit {i} is not a copy");
            }
        }
        // The generator is a column of ones.
        let linear = LinearCode::rep(n).unwrap();
        assert_eq!((linear.generator().rows(), linear.generator().cols()), (n, 1));
        assert!(linear.generator().as_slice().iter().all(|&c| c == 1));
    }
}

#[test]
fn every_pattern_of_fewer_than_n_lost_decodes_and_n_lost_fails() {
    let mut rng = StdRng::seed_from_u64(22);
    for n in COPIES {
        let code = rep(n);
        let units = encode_units(&*code, &random_bytes(&mut rng, 130));
        let mut decoded_patterns = 0;
        for lost in subsets(n) {
            let mut work = units.clone();
            for &u in &lost {
                rng.fill(&mut work[u][..]);
            }
            let before = work.clone();
            let mut order = lost.clone();
            order.shuffle(&mut rng);
            let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
            if lost.len() < n {
                assert!(code.is_decodable(&order), "rep({n}) {order:?}");
                code.decode(&mut refs, &order)
                    .unwrap_or_else(|e| panic!("rep({n}) lost {order:?}: {e}"));
                assert!(work == units, "rep({n}) lost {order:?}: wrong bytes");
                decoded_patterns += 1;
            } else {
                assert!(!code.is_decodable(&order), "rep({n}) all lost");
                match code.decode(&mut refs, &order) {
                    Err(error @ CodeError::NotDecodable { .. }) => {
                        let message = error.to_string();
                        assert!(message.contains(&format!("{lost:?}")), "{message}");
                    }
                    other => panic!("rep({n}) all lost: expected NotDecodable, got {other:?}"),
                }
                assert!(work == before, "rep({n}): a failed decode wrote to the units");
            }
        }
        assert_eq!(decoded_patterns, (1 << n) - 1);
    }
}

#[test]
fn repair_reads_exactly_one_surviving_copy() {
    let mut rng = StdRng::seed_from_u64(23);
    for n in COPIES {
        let code = rep(n);
        let len = 77;
        let units = encode_units(&*code, &random_bytes(&mut rng, len));
        for target in 0..n {
            for unavailable in subsets(n) {
                let survivors: Vec<usize> =
                    (0..n).filter(|u| *u != target && !unavailable.contains(u)).collect();
                let context = format!("rep({n}) target {target} unavailable {unavailable:?}");
                let plan = match code.repair_plan(target, &unavailable, len) {
                    Ok(plan) => plan,
                    Err(CodeError::NotDecodable { .. }) if survivors.is_empty() => continue,
                    Err(e) => panic!("{context}: {e}"),
                };
                assert!(!survivors.is_empty(), "{context}: planned with no survivor: {plan:?}");
                assert_eq!(plan.reads.len(), 1, "{context}: {plan:?}");
                assert_eq!(plan.bytes_read(), len, "{context}");
                let read = plan.reads[0];
                assert!(survivors.contains(&read.unit), "{context}: reads unit {}", read.unit);
                assert_eq!((read.offset, read.len), (0, len), "{context}");
                // Every other unit is garbage; only the planned copy is intact.
                let mut copies: Vec<Vec<u8>> =
                    (0..n).map(|_| random_bytes(&mut rng, len)).collect();
                copies[read.unit] = units[read.unit].clone();
                let mut out = random_bytes(&mut rng, len);
                code.repair(&plan, &[&copies[read.unit]], &mut out).unwrap();
                assert!(out == units[target], "{context}: wrong bytes");
            }
        }
    }
}

#[test]
fn encode_add_and_update() {
    let mut rng = StdRng::seed_from_u64(24);
    for n in COPIES {
        let code = rep(n);
        for len in [1, 130, UPDATE_CHUNK_BYTES + 3] {
            let old = random_bytes(&mut rng, len);
            let mut parity = vec![vec![0u8; len]; n - 1];
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            code.encode_add(0, &old, &mut dsts).unwrap();
            assert!(parity.iter().all(|p| p == &old), "rep({n}) encode_add into zero");

            let new = random_bytes(&mut rng, len);
            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            code.update(0, &old, &new, &mut dsts).unwrap();
            assert!(parity.iter().all(|p| p == &new), "rep({n}) update");

            let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            assert!(matches!(
                code.encode_add(1, &new, &mut dsts),
                Err(CodeError::DataIndex { index: 1, k: 1 })
            ));
            assert!(matches!(
                code.update(1, &old, &new, &mut dsts),
                Err(CodeError::DataIndex { index: 1, k: 1 })
            ));
            assert!(parity.iter().all(|p| p == &new), "rep({n}) failed calls wrote parity");
        }
    }
}

#[test]
fn rep_specs() {
    assert!(matches!(CodeSpec::parse("rep(1)"), Err(CodeError::InvalidParameters { .. })));
    assert!(matches!(LinearCode::rep(257), Err(CodeError::InvalidParameters { .. })));
    assert_eq!(rep(3).spec(), CodeSpec::Rep { n: 3 });
    assert_eq!(rep(3).spec().to_string(), "rep(3)");
}
