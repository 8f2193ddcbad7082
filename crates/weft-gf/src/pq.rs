//! P+Q parity over numbered sources (the RAID-6 construction RAIDP's stacked Lstors use):
//! P = ⊕ source s, Q = ⊕ g^s · source s, with g the field's generator. Any two lost sources
//! are solved from P and Q once every other source is folded out.
//!
//! Invariants: coefficients g^s are distinct for s < [`MAX_SOURCES`] (g has order 255), so
//! two sources below it are always solvable; `solve_two` returns exactly the two sources
//! whose fold produced its inputs.

/// Sources one P+Q pair can tell apart.
pub const MAX_SOURCES: u32 = 255;

/// Coefficient of source `s` in parity `index`: 1 in P (index 0), g^s in Q (index 1).
pub fn coefficient(index: usize, s: u32) -> u8 {
    match index {
        0 => 1,
        _ => crate::exp(s as usize % 255),
    }
}

/// Sources `i` and `j` from `p` = P ⊕ every other source and `q` = Q ⊕ Σ g^s · every other
/// source. Returns (source i, source j). Panics unless i ≠ j, both below [`MAX_SOURCES`], and
/// `p` and `q` have one length.
pub fn solve_two(p: &[u8], q: &[u8], i: u32, j: u32) -> (Vec<u8>, Vec<u8>) {
    assert!(i != j && i < MAX_SOURCES && j < MAX_SOURCES && p.len() == q.len());
    // q = g^i·x ⊕ g^j·y and p = x ⊕ y, so x = (q ⊕ g^j·p) / (g^i ⊕ g^j), y = p ⊕ x.
    let (gi, gj) = (coefficient(1, i), coefficient(1, j));
    let scale = crate::inv(gi ^ gj);
    let mut x = q.to_vec();
    crate::mul_add_region(gj, p, &mut x);
    let mut scaled = vec![0u8; x.len()];
    crate::mul_region(scale, &x, &mut scaled);
    let mut y = p.to_vec();
    crate::xor_region(&scaled, &mut y);
    (scaled, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_two_of_many_sources_come_back() {
        let sources: Vec<Vec<u8>> = (0..9u32)
            .map(|s| (0..257).map(|b| (b as u32 * 7 + s * 31 + b as u32 / 3) as u8).collect())
            .collect();
        let slots: Vec<u32> = vec![0, 1, 2, 5, 17, 100, 200, 253, 254];
        for a in 0..sources.len() {
            for b in a + 1..sources.len() {
                let (mut p, mut q) = (vec![0u8; 257], vec![0u8; 257]);
                for (k, source) in sources.iter().enumerate() {
                    if k != a && k != b {
                        crate::mul_add_region(coefficient(0, slots[k]), source, &mut p);
                        crate::mul_add_region(coefficient(1, slots[k]), source, &mut q);
                    }
                }
                // P and Q of all, with the others folded out, is P and Q of the two.
                let (mut pa, mut qa) = (p.clone(), q.clone());
                for k in [a, b] {
                    crate::mul_add_region(coefficient(0, slots[k]), &sources[k], &mut pa);
                    crate::mul_add_region(coefficient(1, slots[k]), &sources[k], &mut qa);
                }
                // Fold the others back out: p ⊕ pa = the two lost.
                let mut p_two = pa.clone();
                crate::xor_region(&p, &mut p_two);
                let mut q_two = qa.clone();
                crate::xor_region(&q, &mut q_two);
                let (x, y) = solve_two(&p_two, &q_two, slots[a], slots[b]);
                assert_eq!(x, sources[a], "sources {a}, {b}");
                assert_eq!(y, sources[b], "sources {a}, {b}");
            }
        }
    }
}
