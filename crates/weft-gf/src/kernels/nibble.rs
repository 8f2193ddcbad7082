//! Split-nibble multiplication, the AVX2 and SSSE3 paths: `c·x = lo[x & 15] ^ hi[x >> 4]`,
//! where `lo` and `hi` are 16-entry product tables looked up a whole vector at a time with
//! `pshufb` (16 bytes with SSSE3, 32 with AVX2). One generic kernel serves both widths
//! through [`Lanes`]; each width has one `#[target_feature]` entry ([`region_avx2`],
//! [`region_ssse3`]) into which the generic code is inlined, so the intrinsics compile to
//! single instructions of that width.
//!
//! Shape of a pass: R output rows (≤ 8) stay in registers, U vectors wide, while the kernel
//! walks every source once; each source vector is loaded once and split into its nibbles
//! once for all R rows. A pass that does not add starts its accumulators from the first
//! source's products (no XOR into zeros: 6 of a six-source, three-row tile's 180 vector
//! operations, the difference to klauspost's generated code on Zen 3). Stores go to addresses aligned to the vector width: the bytes before
//! the first destination's boundary (the head) and after the last whole vector (the tail)
//! are computed by one overlapping vector each into a scratch tile on the stack, of which
//! only the bytes the main loop does not cover are copied out. Unaligned stores that cross
//! cache lines cost ~15% at shards that miss L1 (measured with AVX2 on buffers at 16 bytes
//! past a line, where `malloc` puts large allocations).
//!
//! Invariants:
//! - `nibble_tables(c)` is `[lo; lo; hi; hi]` (each 16 bytes): a 32-byte load at offset 0 or
//!   32 gives the same table in both 128-bit lanes (`vpshufb` looks up within each lane), a
//!   16-byte load at the same offsets gives it once, so both widths share one layout.
//! - The kernel never reads or writes past the slices: a region shorter than one vector is
//!   computed in scalar code from the same tables, and every edge vector lies inside
//!   `[0, len)`.
//! - Every destination byte is written exactly once from one computation (the edge copies
//!   and the main loop cover disjoint ranges), so `dot_prod_add` adds each product once.
//! - Non-temporal stores are used only for `dot_prod` (never `dot_prod_add`, which reads the
//!   destination), only when every destination is vector-aligned at the main loop's start,
//!   and only for regions of at least [`STREAMING_STORE_MIN_BYTES`]; an `sfence` orders them
//!   before the kernel returns, so callers see ordinary memory semantics.
//! - Prefetches are hints: they may run past the slices (they never fault) and never change a
//!   result.
//! - Every generic function here is `#[inline(always)]` and reached only from a
//!   `#[target_feature]` entry of its width; none is called on its own.

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

/// One vector register of a split-nibble path. Every method is a single instruction of the
/// path's width and is only sound where the CPU has that width's instruction set.
trait Lanes: Copy {
    /// Bytes per vector.
    const WIDTH: usize;
    unsafe fn zero() -> Self;
    unsafe fn splat(byte: u8) -> Self;
    unsafe fn load(ptr: *const u8) -> Self;
    unsafe fn store(self, ptr: *mut u8);
    /// Non-temporal store; `ptr` aligned to `WIDTH`.
    unsafe fn stream(self, ptr: *mut u8);
    unsafe fn xor(self, other: Self) -> Self;
    unsafe fn and(self, other: Self) -> Self;
    /// Each 64-bit lane shifted right by 4 bits.
    unsafe fn shr4(self) -> Self;
    /// `self` as a table, looked up per byte by the low nibble of `index` (per 128-bit lane).
    unsafe fn lookup(self, index: Self) -> Self;
}

/// Implements [`Lanes`] for a one-register newtype from the width's intrinsics.
macro_rules! lanes {
    ($name:ident, $reg:ty, $width:expr, $zero:ident, $splat:ident, $load:ident, $store:ident,
     $stream:ident, $xor:ident, $and:ident, $shr:ident, $shuffle:ident) => {
        #[derive(Clone, Copy)]
        struct $name($reg);

        impl Lanes for $name {
            const WIDTH: usize = $width;
            #[inline(always)]
            unsafe fn zero() -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($zero()) }
            }
            #[inline(always)]
            unsafe fn splat(byte: u8) -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($splat(byte as i8)) }
            }
            #[inline(always)]
            unsafe fn load(ptr: *const u8) -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($load(ptr as *const $reg)) }
            }
            #[inline(always)]
            unsafe fn store(self, ptr: *mut u8) {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $store(ptr as *mut $reg, self.0) }
            }
            #[inline(always)]
            unsafe fn stream(self, ptr: *mut u8) {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $stream(ptr as *mut $reg, self.0) }
            }
            #[inline(always)]
            unsafe fn xor(self, other: Self) -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($xor(self.0, other.0)) }
            }
            #[inline(always)]
            unsafe fn and(self, other: Self) -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($and(self.0, other.0)) }
            }
            #[inline(always)]
            unsafe fn shr4(self) -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($shr::<4>(self.0)) }
            }
            #[inline(always)]
            unsafe fn lookup(self, index: Self) -> Self {
                // SAFETY: called only inside the width's `#[target_feature]` entry, with
                // pointers the kernel's contract bounds.
                unsafe { $name($shuffle(self.0, index.0)) }
            }
        }
    };
}

lanes!(
    Avx2,
    __m256i,
    32,
    _mm256_setzero_si256,
    _mm256_set1_epi8,
    _mm256_loadu_si256,
    _mm256_storeu_si256,
    _mm256_stream_si256,
    _mm256_xor_si256,
    _mm256_and_si256,
    _mm256_srli_epi64,
    _mm256_shuffle_epi8
);
lanes!(
    Ssse3,
    __m128i,
    16,
    _mm_setzero_si128,
    _mm_set1_epi8,
    _mm_loadu_si128,
    _mm_storeu_si128,
    _mm_stream_si128,
    _mm_xor_si128,
    _mm_and_si128,
    _mm_srli_epi64,
    _mm_shuffle_epi8
);

/// Which width a call runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Width {
    /// 32 bytes, AVX2.
    Avx2,
    /// 16 bytes, SSSE3.
    Ssse3,
}

/// Dispatch one row block (`dsts.len()` ≤ 8 rows) at `width`. `tables[j * stride + i]`
/// belongs to row i, source j.
///
/// # Safety
/// The CPU must support the width's instruction set (AVX2, or SSSE3); every slice must have
/// the same length.
pub(super) unsafe fn dot<const ADD: bool>(
    width: Width,
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    assert!(!srcs.is_empty() && !dsts.is_empty() && dsts.len() <= 8);
    assert!(tables.len() >= (srcs.len() - 1) * stride + dsts.len());
    let len = dsts[0].len();
    let vector = match width {
        Width::Avx2 => Avx2::WIDTH,
        Width::Ssse3 => Ssse3::WIDTH,
    };
    if len < vector {
        scalar_range::<ADD>(tables, stride, srcs, dsts, 0..len);
        return;
    }
    // SAFETY: in every arm, the caller guarantees the width's instruction set and equal
    // lengths (at least one vector); the asserts above bound every table index read.
    unsafe {
        match width {
            Width::Avx2 => region_avx2::<ADD>(tables, stride, srcs, dsts),
            Width::Ssse3 => region_ssse3::<ADD>(tables, stride, srcs, dsts),
        }
    }
}

/// Expands to the row-count dispatch of one width: U (vectors per tile) falls as R grows so
/// the R·U accumulators, the sources' nibbles and two tables fit in 16 registers.
macro_rules! by_rows {
    ($lanes:ty, $tables:expr, $stride:expr, $srcs:expr, $dsts:expr, $add:expr) => {
        match $dsts.len() {
            1 => region::<$lanes, 1, 4, $add>($tables, $stride, $srcs, $dsts),
            2 => region::<$lanes, 2, 2, $add>($tables, $stride, $srcs, $dsts),
            3 => region::<$lanes, 3, 2, $add>($tables, $stride, $srcs, $dsts),
            4 => region::<$lanes, 4, 2, $add>($tables, $stride, $srcs, $dsts),
            5 => region::<$lanes, 5, 1, $add>($tables, $stride, $srcs, $dsts),
            6 => region::<$lanes, 6, 1, $add>($tables, $stride, $srcs, $dsts),
            7 => region::<$lanes, 7, 1, $add>($tables, $stride, $srcs, $dsts),
            8 => region::<$lanes, 8, 1, $add>($tables, $stride, $srcs, $dsts),
            n => unreachable!("row block of {n} rows"),
        }
    };
}

/// The AVX2 entry: the generic kernel inlined at 32 bytes a vector.
///
/// # Safety
/// AVX2 must be present; equal lengths of at least 32 bytes; tables bounded as in [`dot`].
#[target_feature(enable = "avx2")]
unsafe fn region_avx2<const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    // SAFETY: the caller's contract is region's.
    unsafe { by_rows!(Avx2, tables, stride, srcs, dsts, ADD) }
}

/// The SSSE3 entry: the generic kernel inlined at 16 bytes a vector.
///
/// # Safety
/// SSSE3 must be present; equal lengths of at least 16 bytes; tables bounded as in [`dot`].
#[target_feature(enable = "ssse3")]
unsafe fn region_ssse3<const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    // SAFETY: the caller's contract is region's.
    unsafe { by_rows!(Ssse3, tables, stride, srcs, dsts, ADD) }
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

/// R rows over a region of at least one vector: the head edge, aligned tiles of U vectors,
/// then single vectors, then the tail edge.
///
/// # Safety
/// Inside a `#[target_feature]` entry of `V`'s width; equal lengths of at least `V::WIDTH`;
/// tables bounded as in [`dot`].
#[inline(always)]
unsafe fn region<V: Lanes, const R: usize, const U: usize, const ADD: bool>(
    tables: &[[u8; 64]],
    stride: usize,
    srcs: &[&[u8]],
    dsts: &mut [&mut [u8]],
) {
    let w = V::WIDTH;
    let len = dsts[0].len();
    debug_assert!(len >= w);
    let dst: [*mut u8; R] = std::array::from_fn(|i| dsts[i].as_mut_ptr());
    let table_base = tables.as_ptr() as *const u8;
    // The main loop starts where the first destination reaches a vector boundary.
    let start = (w - dst[0] as usize % w) % w;
    let end = start + (len - start) / w * w;
    let stream = !ADD
        && len >= STREAMING_STORE_MIN_BYTES
        && dst.iter().all(|d| (*d as usize + start).is_multiple_of(w));
    // SAFETY: the head and tail vectors lie in [0, len) as len ≥ w; every tile ends at or
    // below end ≤ len within the slices (all the same length); table indices are bounded by
    // dot's assert; streamed stores are to vector-aligned addresses (checked above).
    unsafe {
        if start > 0 {
            edge::<V, R, ADD>(table_base, stride, srcs, &dst, 0, 0..start);
        }
        if stream {
            tiles::<V, R, U, ADD, true>(table_base, stride, srcs, &dst, start..end);
            _mm_sfence();
        } else {
            tiles::<V, R, U, ADD, false>(table_base, stride, srcs, &dst, start..end);
        }
        if end < len {
            edge::<V, R, ADD>(table_base, stride, srcs, &dst, len - w, end - (len - w)..w);
        }
    }
}

/// The main loop over `range` (multiples of the width): tiles of U vectors, then single
/// vectors.
///
/// # Safety
/// As [`tile`] for every tile in `range`, which must lie within the slices.
#[inline(always)]
unsafe fn tiles<V: Lanes, const R: usize, const U: usize, const ADD: bool, const STREAM: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    range: std::ops::Range<usize>,
) {
    let w = V::WIDTH;
    let mut pos = range.start;
    // SAFETY: every tile ends at or below range.end, the caller's bound.
    unsafe {
        while pos + w * U <= range.end {
            tile::<V, R, U, ADD, STREAM>(table_base, stride, srcs, dst, pos, pos);
            pos += w * U;
        }
        while pos < range.end {
            tile::<V, R, 1, ADD, STREAM>(table_base, stride, srcs, dst, pos, pos);
            pos += w;
        }
    }
}

/// One vector at `pos` computed into a scratch tile (seeded with the destination's bytes
/// when adding), of which only `keep` (offsets within the vector) is copied to the
/// destinations.
///
/// # Safety
/// Inside an entry of `V`'s width; `pos + V::WIDTH` must not exceed any slice; `keep` must
/// lie in `0..V::WIDTH`; the tables must cover `(srcs.len() − 1)·stride + R` entries.
#[inline(always)]
unsafe fn edge<V: Lanes, const R: usize, const ADD: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    pos: usize,
    keep: std::ops::Range<usize>,
) {
    let w = V::WIDTH;
    debug_assert!(keep.start < keep.end && keep.end <= w && w <= 32);
    let mut scratch = [[0u8; 32]; R];
    // SAFETY: the caller bounds pos + w and keep; the scratch rows are 32 ≥ w bytes each.
    unsafe {
        if ADD {
            for i in 0..R {
                std::ptr::copy_nonoverlapping(dst[i].add(pos), scratch[i].as_mut_ptr(), w);
            }
        }
        let out: [*mut u8; R] = std::array::from_fn(|i| scratch[i].as_mut_ptr());
        tile::<V, R, 1, ADD, false>(table_base, stride, srcs, &out, pos, 0);
        for i in 0..R {
            std::ptr::copy_nonoverlapping(
                scratch[i].as_ptr().add(keep.start),
                dst[i].add(pos + keep.start),
                keep.len(),
            );
        }
    }
}

/// One tile: R rows × U vectors, read from the sources at `src_pos` and written to the
/// destinations at `dst_pos`, accumulators in registers. `STREAM` writes them with
/// non-temporal stores.
///
/// # Safety
/// Inside an entry of `V`'s width; `src_pos + U·V::WIDTH` must not exceed any source nor
/// `dst_pos + U·V::WIDTH` any destination; with `STREAM`, every `dst[i] + dst_pos` is
/// vector-aligned; the tables must cover `(srcs.len() − 1)·stride + R` entries.
// Indexing acc[u][i] by both loop counters is the clearest form of the register tile.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile<V: Lanes, const R: usize, const U: usize, const ADD: bool, const STREAM: bool>(
    table_base: *const u8,
    stride: usize,
    srcs: &[&[u8]],
    dst: &[*mut u8; R],
    src_pos: usize,
    dst_pos: usize,
) {
    let w = V::WIDTH;
    // SAFETY: bounds are the caller's contract above.
    unsafe {
        let low_mask = V::splat(0x0f);
        let mut acc = [[V::zero(); R]; U];
        if ADD {
            for u in 0..U {
                for i in 0..R {
                    acc[u][i] = V::load(dst[i].add(dst_pos + w * u));
                }
            }
        }
        let mut t = table_base;
        for (j, src) in srcs.iter().enumerate() {
            let src = src.as_ptr().add(src_pos);
            if R > 1 {
                // Prefetching never faults, so running past the end is harmless;
                // wrapping_add keeps the pointer arithmetic defined.
                _mm_prefetch::<_MM_HINT_T0>(src.wrapping_add(PREFETCH_AHEAD) as *const i8);
            }
            let mut lo = [V::zero(); U];
            let mut hi = [V::zero(); U];
            for u in 0..U {
                let x = V::load(src.add(w * u));
                lo[u] = x.and(low_mask);
                hi[u] = x.shr4().and(low_mask);
            }
            for i in 0..R {
                let t_lo = V::load(t.add(64 * i));
                let t_hi = V::load(t.add(64 * i + 32));
                for u in 0..U {
                    let p = t_lo.lookup(lo[u]).xor(t_hi.lookup(hi[u]));
                    // The first source's products start the accumulators of a pass
                    // that does not add: no XOR into zeros.
                    acc[u][i] = if !ADD && j == 0 { p } else { acc[u][i].xor(p) };
                }
            }
            t = t.wrapping_add(64 * stride);
        }
        for u in 0..U {
            for i in 0..R {
                let out = dst[i].add(dst_pos + w * u);
                if STREAM {
                    acc[u][i].stream(out);
                } else {
                    acc[u][i].store(out);
                }
            }
        }
    }
}
