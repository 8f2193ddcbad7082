//! Helpers shared by the weft-codes test files: random units, encoding, pattern enumeration
//! and a decode-and-compare check. Not every test file uses every helper.
#![allow(dead_code)]

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use weft_codes::Code;

pub fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    bytes
}

pub fn random_units(rng: &mut StdRng, count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count).map(|_| random_bytes(rng, len)).collect()
}

/// Encodes `data` into fresh parity buffers that start as non-zero junk (encode must overwrite,
/// not accumulate) and returns all n units.
pub fn encode_units(code: &dyn Code, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0xA5u8; len]; code.parity_units()];
    let srcs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut dsts: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    code.encode(&srcs, &mut dsts).unwrap();
    data.iter().cloned().chain(parity).collect()
}

/// A random group of n encoded units of length `len`.
pub fn random_group(code: &dyn Code, rng: &mut StdRng, len: usize) -> Vec<Vec<u8>> {
    let data = random_units(rng, code.data_units(), len);
    encode_units(code, &data)
}

/// Asserts two sets of units are equal, naming the first differing unit and byte.
pub fn assert_units_eq(got: &[Vec<u8>], want: &[Vec<u8>], context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: unit count");
    for (unit, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{context}: unit {unit} length");
        if let Some(pos) = g.iter().zip(w).position(|(a, b)| a != b) {
            panic!(
                "{context}: unit {unit} differs at byte {pos}: got {:#04x}, want {:#04x}",
                g[pos], w[pos]
            );
        }
    }
}

/// Every m-subset of 0..n in lexicographic order.
pub fn combinations(n: usize, m: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if m > n {
        return out;
    }
    let mut idx: Vec<usize> = (0..m).collect();
    loop {
        out.push(idx.clone());
        let Some(i) = (0..m).rev().find(|&i| idx[i] < n - m + i) else {
            return out;
        };
        idx[i] += 1;
        for j in i + 1..m {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

pub fn binomial(n: usize, m: usize) -> usize {
    (0..m).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// Overwrites the `lost` units of a copy of `units` with random garbage, decodes in place (with
/// `lost` in a shuffled order) and checks every unit equals the original.
pub fn decode_and_check(
    code: &dyn Code,
    rng: &mut StdRng,
    units: &[Vec<u8>],
    lost: &[usize],
    context: &str,
) {
    let mut work = units.to_vec();
    for &u in lost {
        rng.fill(&mut work[u][..]);
    }
    let mut order = lost.to_vec();
    order.shuffle(rng);
    assert!(code.is_decodable(&order), "{context}: {order:?} should be decodable");
    let mut refs: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
    code.decode(&mut refs, &order).unwrap_or_else(|e| panic!("{context}: lost {order:?}: {e}"));
    assert_units_eq(&work, units, &format!("{context}: lost {order:?}"));
}
