//! AVX-512 + GFNI path: one `vgf2p8affineqb` multiplies 64 bytes by a constant.
//!
//! Invariants:
//! - `affine_matrix(c)` is the 8×8 bit matrix A with `A·x = c·x` for every byte x, in the
//!   operand order of `vgf2p8affineqb`: byte `7 − i` of the qword selects the input bits that
//!   feed output bit i.
//! - Kernels read every source exactly once per block of up to `MAX_ROWS_PER_PASS` rows and
//!   never touch bytes outside the given slices (the last partial vector is masked).
//! - Outputs of [`STREAMING_STORE_MIN_BYTES`] or more with 64-byte aligned rows are written
//!   with streaming stores and fenced before the kernel returns, so callers see ordinary
//!   memory semantics. Adds into rows of [`NON_TEMPORAL_ADD_MIN_BYTES`] or more prefetch
//!   non-temporally; prefetches are hints and never change a result.

use std::arch::x86_64::*;

use super::{product, STREAMING_STORE_MIN_BYTES};

/// How far ahead of the current position each source is prefetched, for passes of two or
/// more rows. Measured on Zen 5 (1 MiB shards): wide codes (k ≥ 12) gain 1.5–1.7× because
/// the hardware prefetchers lose track of a dozen-plus streams; single-row passes (rebuild)
/// lose at 16 MiB, so they rely on the hardware alone. 512–2048 bytes measured alike;
/// 4096 and prefetching into L2 only were slower.
const PREFETCH_BYTES: usize = 1024;

/// Adds into rows of at least this many bytes prefetch sources and accumulators
/// non-temporally (`prefetchnta`). Such adds are a client's partial parity: each accumulator
/// is read and written once per stripe and then not touched for a stripe's worth of other
/// data, so caching it only evicts what the other processes on the cores (the nodes' socket
/// buffers and checksums) are working on. Measured on `weft bench cluster put` (rs(6,3),
/// W 2, 1 MiB cells, 2 cores shared with 12 nodes): pipelined ÷ noop 0.919–0.943 with, 0.896–0.927
/// without, four runs each, alternating.
const NON_TEMPORAL_ADD_MIN_BYTES: usize = 256 << 10;

/// The GFNI affine matrix of multiplication by `c`.
pub(super) fn affine_matrix(c: u8) -> u64 {
    let mut matrix = 0u64;
    for out_bit in 0..8 {
        let mut row = 0u8;
        for in_bit in 0..8 {
            if (product(c, 1 << in_bit) >> out_bit) & 1 == 1 {
                row |= 1 << in_bit;
            }
        }
        matrix |= (row as u64) << (8 * (7 - out_bit));
    }
    matrix
}

/// Dispatch one row block (`dsts.len()` ≤ 8 rows). `matrices[j * stride + i]` is the matrix
/// of row i, source j.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and GFNI; every slice must have the same length.
pub(super) unsafe fn dot<const ADD: bool>(
    matrices: &[u64],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    assert!(matrices.len() >= (srcs.len() - 1) * stride + dsts.len());
    // SAFETY: in every arm, the caller guarantees the CPU features and equal lengths; the assert
    // above bounds every matrix index the kernel reads.
    unsafe {
        match dsts.len() {
            1 => block::<1, 8, ADD>(matrices, stride, srcs, dsts),
            2 => block::<2, 6, ADD>(matrices, stride, srcs, dsts),
            3 => block::<3, 4, ADD>(matrices, stride, srcs, dsts),
            4 => block::<4, 4, ADD>(matrices, stride, srcs, dsts),
            5 => block::<5, 4, ADD>(matrices, stride, srcs, dsts),
            6 => block::<6, 4, ADD>(matrices, stride, srcs, dsts),
            7 => block::<7, 3, ADD>(matrices, stride, srcs, dsts),
            8 => block::<8, 3, ADD>(matrices, stride, srcs, dsts),
            n => unreachable!("row block of {n} rows"),
        }
    }
}

/// R output rows, U vectors of 64 bytes per iteration (R·U accumulators stay in registers).
// Indexing acc[u][i] by both loop counters is the clearest form of the register tile.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn block<const R: usize, const U: usize, const ADD: bool>(
    matrices: &[u64],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    let len = dsts[0].len();
    let dst: [*mut u8; R] = std::array::from_fn(|i| dsts[i].as_mut_ptr());
    let matrix_base = matrices.as_ptr();
    // Outputs far larger than the caches go around them: no read-for-ownership of lines that
    // are about to be overwritten whole, which is a fifth or more of the memory traffic.
    let stream = !ADD
        && len >= STREAMING_STORE_MIN_BYTES
        && dst.iter().all(|d| (*d as usize).is_multiple_of(64));
    let nta = ADD && len >= NON_TEMPORAL_ADD_MIN_BYTES;
    let mut pos = 0;
    // SAFETY: pos + 64·U ≤ len bounds every load and store; sources and destinations all have
    // length len (checked by the caller); matrix indices j·stride + i are bounded by dot's assert.
    unsafe {
        while pos + 64 * U <= len {
            let mut acc = [[_mm512_setzero_si512(); R]; U];
            if ADD {
                if nta {
                    for i in 0..R {
                        for u in 0..U {
                            let ahead = dst[i].wrapping_add(pos + PREFETCH_BYTES + 64 * u);
                            _mm_prefetch::<_MM_HINT_NTA>(ahead as *const i8);
                        }
                    }
                }
                for (u, acc) in acc.iter_mut().enumerate() {
                    for (i, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_loadu_si512(dst[i].add(pos + 64 * u) as *const _);
                    }
                }
            }
            for (j, src) in srcs.iter().enumerate() {
                let src = src.as_ptr().add(pos);
                if PREFETCH_BYTES > 0 && R > 1 {
                    for u in 0..U {
                        // Prefetching never faults, so running past the end is harmless;
                        // wrapping_add keeps the pointer arithmetic defined.
                        let ahead = src.wrapping_add(PREFETCH_BYTES + 64 * u);
                        if nta {
                            _mm_prefetch::<_MM_HINT_NTA>(ahead as *const i8);
                        } else {
                            _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                        }
                    }
                }
                let x: [__m512i; U] =
                    std::array::from_fn(|u| _mm512_loadu_si512(src.add(64 * u) as *const _));
                let row = matrix_base.add(j * stride);
                for i in 0..R {
                    let a = _mm512_set1_epi64(*row.add(i) as i64);
                    for u in 0..U {
                        let product = _mm512_gf2p8affine_epi64_epi8::<0>(x[u], a);
                        acc[u][i] = _mm512_xor_si512(acc[u][i], product);
                    }
                }
            }
            for (u, acc) in acc.iter().enumerate() {
                for (i, acc) in acc.iter().enumerate() {
                    let at = dst[i].add(pos + 64 * u);
                    if stream {
                        _mm512_stream_si512(at as *mut _, *acc);
                    } else {
                        _mm512_storeu_si512(at as *mut _, *acc);
                    }
                }
            }
            pos += 64 * U;
        }
        if stream {
            // Streaming stores are weakly ordered: fence before anyone reads the output.
            _mm_sfence();
        }
        // Remainder: one vector at a time, the last one masked so no byte past len is touched.
        while pos < len {
            let n = (len - pos).min(64);
            let mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
            let mut acc = [_mm512_setzero_si512(); R];
            if ADD {
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_maskz_loadu_epi8(mask, dst[i].add(pos) as *const i8);
                }
            }
            for (j, src) in srcs.iter().enumerate() {
                let x = _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(pos) as *const i8);
                let row = matrix_base.add(j * stride);
                for (i, acc) in acc.iter_mut().enumerate() {
                    let a = _mm512_set1_epi64(*row.add(i) as i64);
                    *acc = _mm512_xor_si512(*acc, _mm512_gf2p8affine_epi64_epi8::<0>(x, a));
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                _mm512_mask_storeu_epi8(dst[i].add(pos) as *mut i8, mask, *acc);
            }
            pos += n;
        }
    }
}

/// One pass computing `b = Σ_j c_j·src_j` and `a = b ^ (XOR of the sources with mask_j)`,
/// with a zero matrix meaning "not in b". Each source is loaded once; sources only in `a`
/// cost one XOR, not a multiplication.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and GFNI; every slice must have the same length;
/// `matrices` and `in_a` have one entry per source.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(super) unsafe fn dot_with_xor_row(
    matrices: &[u64],
    in_a: &[bool],
    srcs: &[&[u8]],
    b: &mut [u8],
    a: &mut [u8],
) {
    const U: usize = 4;
    assert!(matrices.len() == srcs.len() && in_a.len() == srcs.len());
    let len = b.len();
    let (out_b, out_a) = (b.as_mut_ptr(), a.as_mut_ptr());
    let mut pos = 0;
    // SAFETY: full tiles end at or below len; the tail is masked; indices j < srcs.len().
    unsafe {
        while pos + 64 * U <= len {
            let mut acc_b = [_mm512_setzero_si512(); U];
            let mut acc_a = [_mm512_setzero_si512(); U];
            for (j, src) in srcs.iter().enumerate() {
                let src = src.as_ptr().add(pos);
                for u in 0..U {
                    let ahead = src.wrapping_add(PREFETCH_BYTES + 64 * u);
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                }
                let x: [__m512i; U] =
                    std::array::from_fn(|u| _mm512_loadu_si512(src.add(64 * u) as *const _));
                let m = *matrices.get_unchecked(j);
                if m != 0 {
                    let matrix = _mm512_set1_epi64(m as i64);
                    for u in 0..U {
                        let product = _mm512_gf2p8affine_epi64_epi8::<0>(x[u], matrix);
                        acc_b[u] = _mm512_xor_si512(acc_b[u], product);
                    }
                }
                if *in_a.get_unchecked(j) {
                    for u in 0..U {
                        acc_a[u] = _mm512_xor_si512(acc_a[u], x[u]);
                    }
                }
            }
            for u in 0..U {
                _mm512_storeu_si512(out_b.add(pos + 64 * u) as *mut _, acc_b[u]);
                let total = _mm512_xor_si512(acc_a[u], acc_b[u]);
                _mm512_storeu_si512(out_a.add(pos + 64 * u) as *mut _, total);
            }
            pos += 64 * U;
        }
        while pos < len {
            let n = (len - pos).min(64);
            let mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
            let mut acc_b = _mm512_setzero_si512();
            let mut acc_a = _mm512_setzero_si512();
            for (j, src) in srcs.iter().enumerate() {
                let x = _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(pos) as *const i8);
                let m = *matrices.get_unchecked(j);
                if m != 0 {
                    let product =
                        _mm512_gf2p8affine_epi64_epi8::<0>(x, _mm512_set1_epi64(m as i64));
                    acc_b = _mm512_xor_si512(acc_b, product);
                }
                if *in_a.get_unchecked(j) {
                    acc_a = _mm512_xor_si512(acc_a, x);
                }
            }
            _mm512_mask_storeu_epi8(out_b.add(pos) as *mut i8, mask, acc_b);
            _mm512_mask_storeu_epi8(
                out_a.add(pos) as *mut i8,
                mask,
                _mm512_xor_si512(acc_a, acc_b),
            );
            pos += n;
        }
    }
}
