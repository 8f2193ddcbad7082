//! AVX2 path: split-nibble multiplication. `c·x = lo[x & 15] ^ hi[x >> 4]`, where `lo` and
//! `hi` are 16-entry product tables looked up 32 bytes at a time with `vpshufb`.
//!
//! Invariants:
//! - `nibble_tables(c)` is `[lo; lo; hi; hi]` (each 16 bytes), so both 128-bit lanes of a
//!   256-bit register hold the same table, as `vpshufb` looks up within each lane.
//! - The tail shorter than one vector is computed from the same tables in scalar code, so the
//!   kernel never reads or writes past the slices.

use std::arch::x86_64::*;

use super::product;

/// The four 16-byte lookup tables of multiplication by `c`.
pub(super) fn nibble_tables(c: u8) -> [u8; 64] {
    let mut t = [0u8; 64];
    for x in 0..16u8 {
        let lo = product(c, x);
        let hi = product(c, x << 4);
        t[x as usize] = lo;
        t[16 + x as usize] = lo;
        t[32 + x as usize] = hi;
        t[48 + x as usize] = hi;
    }
    t
}

/// Dispatch one row block (`dsts.len()` ≤ 8 rows). `tables[j * stride + i]` belongs to row i,
/// source j.
///
/// # Safety
/// The CPU must support AVX2; every slice must have the same length.
pub(super) unsafe fn dot<const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    assert!(tables.len() >= (srcs.len() - 1) * stride + dsts.len());
    // SAFETY: in every arm, the caller guarantees AVX2 and equal lengths; the assert above bounds
    // every table index the kernel reads.
    unsafe {
        match dsts.len() {
            1 => block::<1, 4, ADD>(tables, stride, srcs, dsts),
            2 => block::<2, 2, ADD>(tables, stride, srcs, dsts),
            3 => block::<3, 2, ADD>(tables, stride, srcs, dsts),
            4 => block::<4, 2, ADD>(tables, stride, srcs, dsts),
            5 => block::<5, 1, ADD>(tables, stride, srcs, dsts),
            6 => block::<6, 1, ADD>(tables, stride, srcs, dsts),
            7 => block::<7, 1, ADD>(tables, stride, srcs, dsts),
            8 => block::<8, 1, ADD>(tables, stride, srcs, dsts),
            n => unreachable!("row block of {n} rows"),
        }
    }
    let len = dsts[0].len();
    let done = len - len % 32;
    for (i, dst) in dsts.iter_mut().enumerate() {
        for (pos, d) in dst.iter_mut().enumerate().skip(done) {
            let mut value = if ADD { *d } else { 0 };
            for (j, src) in srcs.iter().enumerate() {
                let t = &tables[j * stride + i];
                let x = src[pos];
                value ^= t[(x & 15) as usize] ^ t[32 + (x >> 4) as usize];
            }
            *d = value;
        }
    }
}

/// R rows over the whole multiple of 32 bytes: tiles of U vectors, then single vectors.
#[target_feature(enable = "avx2")]
unsafe fn block<const R: usize, const U: usize, const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    let len = dsts[0].len() - dsts[0].len() % 32;
    let dst: [*mut u8; R] = std::array::from_fn(|i| dsts[i].as_mut_ptr());
    let table_base = tables.as_ptr() as *const u8;
    let mut pos = 0;
    // SAFETY: every tile ends at or below len, a multiple of 32 within the slices (all the
    // same length); table indices are bounded by dot's assert.
    unsafe {
        while pos + 32 * U <= len {
            tile::<R, U, ADD>(table_base, stride, srcs, &dst, pos);
            pos += 32 * U;
        }
        while pos < len {
            tile::<R, 1, ADD>(table_base, stride, srcs, &dst, pos);
            pos += 32;
        }
    }
}

/// One tile: R rows × U vectors of 32 bytes starting at `pos`, accumulators in registers.
///
/// # Safety
/// AVX2 must be present; `pos + 32·U` must not exceed any slice; the tables must cover
/// `(srcs.len() − 1)·stride + R` entries.
// Indexing acc[u][i] by both loop counters is the clearest form of the register tile.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile<const R: usize, const U: usize, const ADD: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    pos: usize,
) {
    let low_mask = _mm256_set1_epi8(0x0f);
    // SAFETY: bounds are the caller's contract above.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); R]; U];
        if ADD {
            for u in 0..U {
                for i in 0..R {
                    acc[u][i] = _mm256_loadu_si256(dst[i].add(pos + 32 * u) as *const _);
                }
            }
        }
        for (j, src) in srcs.iter().enumerate() {
            let src = src.as_ptr().add(pos);
            let mut lo = [_mm256_setzero_si256(); U];
            let mut hi = [_mm256_setzero_si256(); U];
            for u in 0..U {
                let x = _mm256_loadu_si256(src.add(32 * u) as *const _);
                lo[u] = _mm256_and_si256(x, low_mask);
                hi[u] = _mm256_and_si256(_mm256_srli_epi64::<4>(x), low_mask);
            }
            for i in 0..R {
                let t = table_base.add((j * stride + i) * 64);
                let t_lo = _mm256_loadu_si256(t as *const _);
                let t_hi = _mm256_loadu_si256(t.add(32) as *const _);
                for u in 0..U {
                    let p = _mm256_xor_si256(
                        _mm256_shuffle_epi8(t_lo, lo[u]),
                        _mm256_shuffle_epi8(t_hi, hi[u]),
                    );
                    acc[u][i] = _mm256_xor_si256(acc[u][i], p);
                }
            }
        }
        for u in 0..U {
            for i in 0..R {
                _mm256_storeu_si256(dst[i].add(pos + 32 * u) as *mut _, acc[u][i]);
            }
        }
    }
}
