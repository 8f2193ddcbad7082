//! The scalar oracle: one 256-entry table lookup per byte. Deliberately simple, since every
//! other path is only as trustworthy as this one.

use crate::field::MUL_TABLE;

/// `dsts[i] (^)= Σ_j coef[row0 + i][j]·srcs[j]` for the rows of one block.
pub(super) fn dot<const ADD: bool>(
    coefficients: &[u8],
    cols: usize,
    row0: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    for (i, dst) in dsts.iter_mut().enumerate() {
        if !ADD {
            dst.fill(0);
        }
        let row = &coefficients[(row0 + i) * cols..(row0 + i + 1) * cols];
        for (&c, src) in row.iter().zip(srcs) {
            if c == 0 {
                continue;
            }
            let table = &MUL_TABLE[c as usize];
            for (d, &s) in dst.iter_mut().zip(src.iter()) {
                *d ^= table[s as usize];
            }
        }
    }
}
