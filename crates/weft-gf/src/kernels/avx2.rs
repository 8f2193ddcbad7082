//! AVX2 path: split-nibble multiplication. `c·x = lo[x & 15] ^ hi[x >> 4]`, where `lo` and
//! `hi` are 16-entry product tables looked up 32 bytes at a time with `vpshufb`.
//!
//! Shape of a pass: R output rows (≤ 8) stay in registers, U vectors of 32 bytes wide, while
//! the kernel walks every source once; each source vector is loaded once and split into its
//! nibbles once for all R rows. Stores go to addresses aligned to 32 bytes: the bytes before
//! the first destination's 32-byte boundary (the head) and after the last whole vector (the
//! tail) are computed by one overlapping vector each into a scratch tile on the stack, of
//! which only the bytes the main loop does not cover are copied out. Unaligned stores that
//! cross cache lines cost ~15% at shards that miss L1 (measured on buffers at 16 bytes past
//! a line, where `malloc` puts large allocations).
//!
//! Invariants:
//! - `nibble_tables(c)` is `[lo; lo; hi; hi]` (each 16 bytes), so both 128-bit lanes of a
//!   256-bit register hold the same table, as `vpshufb` looks up within each lane.
//! - The kernel never reads or writes past the slices: a region shorter than one vector is
//!   computed in scalar code from the same tables, and every edge vector lies inside
//!   `[0, len)`.
//! - Every destination byte is written exactly once from one computation (the edge copies
//!   and the main loop cover disjoint ranges), so `dot_prod_add` adds each product once.
//! - Non-temporal stores are used only for `dot_prod` (never `dot_prod_add`, which reads the
//!   destination), only when every destination is 32-byte aligned at the main loop's start,
//!   and only for regions of at least [`STREAMING_STORE_MIN_BYTES`]; an `sfence` orders them
//!   before the kernel returns, so callers see ordinary memory semantics.
//! - Prefetches are hints: they may run past the slices (they never fault) and never change a
//!   result.

use std::arch::x86_64::*;

use super::{product, STREAMING_STORE_MIN_BYTES};

/// How far ahead of the tile each source is prefetched into L1, in bytes, for passes of two
/// or more rows. Measured with WEFT_SIMD=avx2 on a Sapphire Rapids KVM guest, rs(10,4), 1 MiB
/// shards: none 12.7 GB/s, 512 B 13.9, 1 KiB 13.5–13.8, 2 KiB 14.0–14.5, 4 KiB 13.2–13.4.
/// Single-row passes (rebuild) ran 10% slower at 16 MiB with it and alike at 1 MiB, so they
/// rely on the hardware prefetchers alone, as on the GFNI path.
const PREFETCH_AHEAD: usize = 2048;

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
    assert!(!srcs.is_empty() && !dsts.is_empty() && dsts.len() <= 8);
    assert!(tables.len() >= (srcs.len() - 1) * stride + dsts.len());
    let len = dsts[0].len();
    if len < 32 {
        scalar_range::<ADD>(tables, stride, srcs, dsts, 0..len);
        return;
    }
    // SAFETY: in every arm, the caller guarantees AVX2 and equal lengths (at least 32); the
    // asserts above bound every table index the kernel reads.
    unsafe {
        match dsts.len() {
            1 => region::<1, 4, ADD>(tables, stride, srcs, dsts),
            2 => region::<2, 2, ADD>(tables, stride, srcs, dsts),
            3 => region::<3, 2, ADD>(tables, stride, srcs, dsts),
            4 => region::<4, 2, ADD>(tables, stride, srcs, dsts),
            5 => region::<5, 1, ADD>(tables, stride, srcs, dsts),
            6 => region::<6, 1, ADD>(tables, stride, srcs, dsts),
            7 => region::<7, 1, ADD>(tables, stride, srcs, dsts),
            8 => region::<8, 1, ADD>(tables, stride, srcs, dsts),
            n => unreachable!("row block of {n} rows"),
        }
    }
}

/// The oracle's arithmetic from the same tables, for regions shorter than one vector.
fn scalar_range<const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
    range: std::ops::Range<usize>,
) {
    for (i, dst) in dsts.iter_mut().enumerate() {
        for pos in range.clone() {
            let mut value = if ADD { dst[pos] } else { 0 };
            for (j, src) in srcs.iter().enumerate() {
                let t = &tables[j * stride + i];
                let x = src[pos];
                value ^= t[(x & 15) as usize] ^ t[32 + (x >> 4) as usize];
            }
            dst[pos] = value;
        }
    }
}

/// R rows over a region of at least 32 bytes: the head edge, aligned tiles of U vectors, then
/// single vectors, then the tail edge.
#[target_feature(enable = "avx2")]
unsafe fn region<const R: usize, const U: usize, const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    let len = dsts[0].len();
    debug_assert!(len >= 32);
    let dst: [*mut u8; R] = std::array::from_fn(|i| dsts[i].as_mut_ptr());
    let table_base = tables.as_ptr() as *const u8;
    // The main loop starts where the first destination reaches a 32-byte boundary.
    let start = (32 - dst[0] as usize % 32) % 32;
    let end = start + (len - start) / 32 * 32;
    let stream = !ADD
        && len >= STREAMING_STORE_MIN_BYTES
        && dst.iter().all(|d| (*d as usize + start).is_multiple_of(32));
    // SAFETY: the head and tail vectors lie in [0, len) as len ≥ 32; every tile ends at or
    // below end ≤ len within the slices (all the same length); table indices are bounded by
    // dot's assert; streamed stores are to 32-byte aligned addresses (checked above).
    unsafe {
        if start > 0 {
            edge::<R, ADD>(table_base, stride, srcs, &dst, 0, 0..start);
        }
        if stream {
            tiles::<R, U, ADD, true>(table_base, stride, srcs, &dst, start..end);
            _mm_sfence();
        } else {
            tiles::<R, U, ADD, false>(table_base, stride, srcs, &dst, start..end);
        }
        if end < len {
            edge::<R, ADD>(table_base, stride, srcs, &dst, len - 32, end - (len - 32)..32);
        }
    }
}

/// The main loop over `range` (32-byte multiples): tiles of U vectors, then single vectors.
///
/// # Safety
/// As [`tile`] for every tile in `range`, which must lie within the slices.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tiles<const R: usize, const U: usize, const ADD: bool, const STREAM: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    range: std::ops::Range<usize>,
) {
    let mut pos = range.start;
    // SAFETY: every tile ends at or below range.end, the caller's bound.
    unsafe {
        while pos + 32 * U <= range.end {
            tile::<R, U, ADD, STREAM>(table_base, stride, srcs, dst, pos, pos);
            pos += 32 * U;
        }
        while pos < range.end {
            tile::<R, 1, ADD, STREAM>(table_base, stride, srcs, dst, pos, pos);
            pos += 32;
        }
    }
}

/// One vector at `pos` computed into a scratch tile (seeded with the destination's bytes
/// when adding), of which only `keep` (offsets within the vector) is copied to the
/// destinations.
///
/// # Safety
/// AVX2 must be present; `pos + 32` must not exceed any slice; `keep` must lie in `0..32`;
/// the tables must cover `(srcs.len() − 1)·stride + R` entries.
#[target_feature(enable = "avx2")]
unsafe fn edge<const R: usize, const ADD: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    pos: usize,
    keep: std::ops::Range<usize>,
) {
    debug_assert!(keep.start < keep.end && keep.end <= 32);
    let mut scratch = [[0u8; 32]; R];
    // SAFETY: the caller bounds pos + 32 and keep; the scratch rows are 32 bytes each.
    unsafe {
        if ADD {
            for i in 0..R {
                std::ptr::copy_nonoverlapping(dst[i].add(pos), scratch[i].as_mut_ptr(), 32);
            }
        }
        let out: [*mut u8; R] = std::array::from_fn(|i| scratch[i].as_mut_ptr());
        tile::<R, 1, ADD, false>(table_base, stride, srcs, &out, pos, 0);
        for i in 0..R {
            std::ptr::copy_nonoverlapping(
                scratch[i].as_ptr().add(keep.start),
                dst[i].add(pos + keep.start),
                keep.len(),
            );
        }
    }
}

/// One tile: R rows × U vectors of 32 bytes, read from the sources at `src_pos` and written
/// to the destinations at `dst_pos`, accumulators in registers. `STREAM` writes them with
/// non-temporal stores.
///
/// # Safety
/// AVX2 must be present; `src_pos + 32·U` must not exceed any source nor `dst_pos + 32·U` any
/// destination; with `STREAM`, every `dst[i] + dst_pos` is 32-byte aligned; the tables must
/// cover `(srcs.len() − 1)·stride + R` entries.
// Indexing acc[u][i] by both loop counters is the clearest form of the register tile.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile<const R: usize, const U: usize, const ADD: bool, const STREAM: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    src_pos: usize,
    dst_pos: usize,
) {
    let low_mask = _mm256_set1_epi8(0x0f);
    // SAFETY: bounds are the caller's contract above.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); R]; U];
        if ADD {
            for u in 0..U {
                for i in 0..R {
                    acc[u][i] = _mm256_loadu_si256(dst[i].add(dst_pos + 32 * u) as *const _);
                }
            }
        }
        let mut t = table_base;
        for src in srcs {
            let src = src.as_ptr().add(src_pos);
            if R > 1 {
                // Prefetching never faults, so running past the end is harmless;
                // wrapping_add keeps the pointer arithmetic defined.
                _mm_prefetch::<_MM_HINT_T0>(src.wrapping_add(PREFETCH_AHEAD) as *const i8);
            }
            let mut lo = [_mm256_setzero_si256(); U];
            let mut hi = [_mm256_setzero_si256(); U];
            for u in 0..U {
                let x = _mm256_loadu_si256(src.add(32 * u) as *const _);
                lo[u] = _mm256_and_si256(x, low_mask);
                hi[u] = _mm256_and_si256(_mm256_srli_epi64::<4>(x), low_mask);
            }
            for i in 0..R {
                let t_lo = _mm256_loadu_si256(t.add(64 * i) as *const _);
                let t_hi = _mm256_loadu_si256(t.add(64 * i + 32) as *const _);
                for u in 0..U {
                    let p = _mm256_xor_si256(
                        _mm256_shuffle_epi8(t_lo, lo[u]),
                        _mm256_shuffle_epi8(t_hi, hi[u]),
                    );
                    acc[u][i] = _mm256_xor_si256(acc[u][i], p);
                }
            }
            t = t.wrapping_add(64 * stride);
        }
        for u in 0..U {
            for i in 0..R {
                let out = dst[i].add(dst_pos + 32 * u) as *mut __m256i;
                if STREAM {
                    _mm256_stream_si256(out, acc[u][i]);
                } else {
                    _mm256_storeu_si256(out, acc[u][i]);
                }
            }
        }
    }
}
