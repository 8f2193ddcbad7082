//! XOR-only dot products: `dst (^)= src_0 ^ src_1 ^ …`, for rows whose coefficients are all 1
//! (local parities, replication, Hitchhiker-XOR+ piggybacks). No table lookups or affine
//! transforms: the pass is bound by loads alone.
//!
//! Invariants: bytes equal to the scalar oracle for any length and alignment; nothing outside
//! the slices is read or written (the AVX-512 tail is masked, the AVX2 tail is scalar).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Portable form, also the tail of the AVX2 form.
pub(super) fn sum_scalar<const ADD: bool>(srcs: &[&[u8]], dst: &mut [u8], from: usize) {
    for (pos, d) in dst.iter_mut().enumerate().skip(from) {
        let mut value = if ADD { *d } else { 0 };
        for src in srcs {
            value ^= src[pos];
        }
        *d = value;
    }
}

/// # Safety
/// AVX-512F must be present; every source has `dst.len()` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn sum_avx512<const ADD: bool>(srcs: &[&[u8]], dst: &mut [u8]) {
    const U: usize = 4;
    let len = dst.len();
    let out = dst.as_mut_ptr();
    let mut pos = 0;
    // SAFETY: every full-vector access ends at or below len; the tail is masked.
    unsafe {
        while pos + 64 * U <= len {
            let mut acc = [_mm512_setzero_si512(); U];
            if ADD {
                for (u, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_loadu_si512(out.add(pos + 64 * u) as *const _);
                }
            }
            let mut pairs = srcs.chunks_exact(2);
            for pair in &mut pairs {
                let (a, b) = (pair[0].as_ptr().add(pos), pair[1].as_ptr().add(pos));
                for (u, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_loadu_si512(a.add(64 * u) as *const _);
                    let y = _mm512_loadu_si512(b.add(64 * u) as *const _);
                    // 0x96: three-way XOR in one instruction.
                    *acc = _mm512_ternarylogic_epi64::<0x96>(*acc, x, y);
                }
            }
            if let [last] = pairs.remainder() {
                let a = last.as_ptr().add(pos);
                for (u, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_xor_si512(*acc, _mm512_loadu_si512(a.add(64 * u) as *const _));
                }
            }
            for (u, acc) in acc.iter().enumerate() {
                _mm512_storeu_si512(out.add(pos + 64 * u) as *mut _, *acc);
            }
            pos += 64 * U;
        }
        while pos < len {
            let n = (len - pos).min(64);
            let mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
            let mut acc = if ADD {
                _mm512_maskz_loadu_epi8(mask, out.add(pos) as *const i8)
            } else {
                _mm512_setzero_si512()
            };
            for src in srcs {
                let x = _mm512_maskz_loadu_epi8(mask, src.as_ptr().add(pos) as *const i8);
                acc = _mm512_xor_si512(acc, x);
            }
            _mm512_mask_storeu_epi8(out.add(pos) as *mut i8, mask, acc);
            pos += n;
        }
    }
}

/// # Safety
/// AVX2 must be present; every source has `dst.len()` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sum_avx2<const ADD: bool>(srcs: &[&[u8]], dst: &mut [u8]) {
    const U: usize = 4;
    let len = dst.len();
    let out = dst.as_mut_ptr();
    let mut pos = 0;
    // SAFETY: every vector access ends at or below len; the rest is done in scalar code.
    unsafe {
        while pos + 32 * U <= len {
            let mut acc = [_mm256_setzero_si256(); U];
            if ADD {
                for (u, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_loadu_si256(out.add(pos + 32 * u) as *const _);
                }
            }
            for src in srcs {
                let a = src.as_ptr().add(pos);
                for (u, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_xor_si256(*acc, _mm256_loadu_si256(a.add(32 * u) as *const _));
                }
            }
            for (u, acc) in acc.iter().enumerate() {
                _mm256_storeu_si256(out.add(pos + 32 * u) as *mut _, *acc);
            }
            pos += 32 * U;
        }
    }
    sum_scalar::<ADD>(srcs, dst, pos);
}
