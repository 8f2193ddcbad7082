//! POLYVAL (RFC 8452): the polynomial hash over GF(2^128) that keyed unit digests are built
//! on ([`crate::digest`]).
//!
//! Invariants:
//! - [`Key::fold`] folds 16-byte blocks into an accumulator exactly as RFC 8452's POLYVAL
//!   does (`S = dot(S ⊕ X, H)` per block), whichever kernel runs: carry-less multiply on
//!   256-bit vectors (VPCLMULQDQ + AVX2) or 128-bit ones (PCLMULQDQ), else the portable
//!   [`soft`] arithmetic. Every kernel this CPU has is checked against the others and
//!   against a bit-at-a-time definition (tests).
//! - The wide kernels fold [`WIDE`] blocks per reduction: the block `i` places from a step's
//!   end is multiplied by `H`'s `(i + 1)`-th Montgomery power (`powers`), the products are
//!   summed unreduced and reduced once; a step's first block carries the accumulator.
//! - Nothing here branches on the key or the data (the soft multiply uses integer products
//!   of masked operands), so the time taken tells nothing of H.

/// Blocks folded per reduction by the wide kernels.
pub const WIDE: usize = 8;

/// The kernels, for tests that run each one present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// VPCLMULQDQ on 256-bit vectors, two blocks per multiply.
    Ymm,
    /// PCLMULQDQ on 128-bit vectors.
    Xmm,
    /// Portable integer arithmetic.
    Soft,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn best() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("vpclmulqdq") && has!("avx2") && has!("pclmulqdq") && has!("sse4.1") {
                return Kernel::Ymm;
            }
            if has!("pclmulqdq") && has!("sse4.1") {
                return Kernel::Xmm;
            }
        }
        Kernel::Soft
    }

    /// The kernels this CPU runs, fastest first.
    pub fn present() -> Vec<Kernel> {
        match Kernel::best() {
            Kernel::Ymm => vec![Kernel::Ymm, Kernel::Xmm, Kernel::Soft],
            Kernel::Xmm => vec![Kernel::Xmm, Kernel::Soft],
            Kernel::Soft => vec![Kernel::Soft],
        }
    }
}

/// H and its Montgomery powers: `powers[i]` is `dot(powers[i - 1], H)`, so folding a block
/// with `powers[i]` weighs it as `i` more blocks folded after it would.
#[derive(Clone)]
pub struct Key {
    powers: [u128; WIDE],
    kernel: Kernel,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "polyval::Key(redacted, {:?})", self.kernel)
    }
}

impl Key {
    /// The key H (POLYVAL's little-endian field element), run by the best kernel.
    pub fn new(h: u128) -> Key {
        let mut powers = [h; WIDE];
        for i in 1..WIDE {
            powers[i] = soft::dot(powers[i - 1], h);
        }
        Key { powers, kernel: Kernel::best() }
    }

    /// The same key run by `kernel` (which must be [`Kernel::present`]).
    pub fn with_kernel(mut self, kernel: Kernel) -> Key {
        assert!(Kernel::present().contains(&kernel), "{kernel:?} is not on this CPU");
        self.kernel = kernel;
        self
    }

    /// Folds the 16-byte blocks of `blocks` (its length a multiple of 16) into `acc`.
    pub fn fold(&self, acc: u128, blocks: &[u8]) -> u128 {
        assert_eq!(blocks.len() % 16, 0, "POLYVAL folds whole blocks");
        match self.kernel {
            // SAFETY: a Key runs a kernel only when the CPU has its features (Kernel::best,
            // with_kernel).
            #[cfg(target_arch = "x86_64")]
            Kernel::Ymm => unsafe { x86::fold_ymm(&self.powers, acc, blocks) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Kernel::Xmm => unsafe { x86::fold(&self.powers, acc, blocks) },
            _ => {
                let mut acc = acc;
                for block in blocks.chunks_exact(16) {
                    let block = u128::from_le_bytes(block.try_into().expect("16 bytes"));
                    acc = soft::dot(acc ^ block, self.powers[0]);
                }
                acc
            }
        }
    }
}

/// POLYVAL's arithmetic in portable integer code.
pub mod soft {
    /// Carry-less product of two 64-bit words: operands split into five interleaved
    /// classes of bits, whose integer products cannot carry from one class's column into
    /// the next (a column sums at most 13 ones).
    pub fn clmul(a: u64, b: u64) -> u128 {
        const M: u64 = 0x8421_0842_1084_2108 >> 3; // bits at positions ≡ 0 (mod 5)
        let masks = [M, M << 1, M << 2, M << 3, M << 4];
        const W: u128 = {
            let mut w = 0u128;
            let mut i = 0;
            while i < 128 {
                w |= 1 << i;
                i += 5;
            }
            w
        };
        let wide = [W, W << 1, W << 2, W << 3, W << 4];
        let a = masks.map(|m| (a & m) as u128);
        let b = masks.map(|m| (b & m) as u128);
        let mut out = 0u128;
        for k in 0..5 {
            let mut z = 0u128;
            for i in 0..5 {
                z ^= a[i].wrapping_mul(b[(k + 5 - i) % 5]);
            }
            out |= z & wide[k];
        }
        out
    }

    /// `x` times 0xc200000000000000 (the reduction's constant), carry-less.
    fn times_c2(x: u64) -> u128 {
        let x = x as u128;
        (x << 63) ^ (x << 62) ^ (x << 57)
    }

    /// The 256-bit product `hi:lo` times x^-128, modulo POLYVAL's polynomial.
    pub fn reduce(lo: u128, hi: u128) -> u128 {
        let mut x = lo;
        for _ in 0..2 {
            x = x.rotate_left(64) ^ times_c2(x as u64);
        }
        hi ^ x
    }

    /// The 256-bit carry-less product `a · b` as (low, high) halves (Karatsuba).
    pub fn product(a: u128, b: u128) -> (u128, u128) {
        let (a0, a1, b0, b1) = (a as u64, (a >> 64) as u64, b as u64, (b >> 64) as u64);
        let lo = clmul(a0, b0);
        let hi = clmul(a1, b1);
        let mid = clmul(a0 ^ a1, b0 ^ b1) ^ lo ^ hi;
        (lo ^ (mid << 64), hi ^ (mid >> 64))
    }

    /// POLYVAL's multiplication: a · b · x^-128.
    pub fn dot(a: u128, b: u128) -> u128 {
        let (lo, hi) = product(a, b);
        reduce(lo, hi)
    }

    /// The same by the definition, a bit at a time (for tests; branches on its inputs).
    #[cfg(test)]
    pub fn dot_by_bits(a: u128, b: u128) -> u128 {
        // Field: x^128 + x^127 + x^126 + x^121 + 1; multiply, then divide by x 128 times.
        let (mut lo, mut hi) = (0u128, 0u128);
        for i in 0..128 {
            if b >> i & 1 == 1 {
                lo ^= a << i;
                if i > 0 {
                    hi ^= a >> (128 - i);
                }
            }
        }
        // Dividing by x: when the low bit is set, add the (odd) polynomial first.
        for _ in 0..128 {
            if lo & 1 == 1 {
                lo ^= 1 | (1 << 121) | (1 << 126) | (1 << 127);
                hi ^= 1;
            }
            lo = (lo >> 1) | ((hi & 1) << 127);
            hi >>= 1;
        }
        lo
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::WIDE;

    /// The 16 bytes at the start of `p`.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(p: &[u8]) -> __m128i {
        assert!(p.len() >= 16);
        // SAFETY: 16 bytes are readable at p (checked); unaligned loads are allowed.
        unsafe { _mm_loadu_si128(p.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn from(x: u128) -> __m128i {
        _mm_set_epi64x((x >> 64) as i64, x as i64)
    }

    #[inline]
    #[target_feature(enable = "sse4.1")]
    fn to(x: __m128i) -> u128 {
        (_mm_extract_epi64(x, 1) as u64 as u128) << 64 | _mm_extract_epi64(x, 0) as u64 as u128
    }

    /// Adds the low, middle and high partial products of `x · h` into the sums.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn mul_add(x: __m128i, h: __m128i, sums: &mut [__m128i; 3]) {
        sums[0] = _mm_xor_si128(sums[0], _mm_clmulepi64_si128(x, h, 0x00));
        sums[2] = _mm_xor_si128(sums[2], _mm_clmulepi64_si128(x, h, 0x11));
        sums[1] = _mm_xor_si128(sums[1], _mm_clmulepi64_si128(x, h, 0x01));
        sums[1] = _mm_xor_si128(sums[1], _mm_clmulepi64_si128(x, h, 0x10));
    }

    /// The summed product times x^-128 modulo the polynomial ([`super::soft::reduce`]).
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reduce([lo, mid, hi]: [__m128i; 3]) -> __m128i {
        let lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
        let hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
        let poly = _mm_set_epi64x(0xc200_0000_0000_0000u64 as i64, 1);
        let t = _mm_clmulepi64_si128(lo, poly, 0x10);
        let x = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4e), t);
        let t = _mm_clmulepi64_si128(x, poly, 0x10);
        let x = _mm_xor_si128(_mm_shuffle_epi32(x, 0x4e), t);
        _mm_xor_si128(hi, x)
    }

    /// Folds the blocks after the last whole step one by one.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn fold_tail(h: __m128i, mut acc: __m128i, blocks: &[u8]) -> __m128i {
        for block in blocks.chunks_exact(16) {
            let mut sums = [_mm_setzero_si128(); 3];
            mul_add(_mm_xor_si128(acc, load(block)), h, &mut sums);
            acc = reduce(sums);
        }
        acc
    }

    /// Folds `blocks` into `acc`, [`WIDE`] blocks per reduction.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ and SSE4.1.
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    pub unsafe fn fold(powers: &[u128; WIDE], acc: u128, blocks: &[u8]) -> u128 {
        let h: [__m128i; WIDE] = std::array::from_fn(|i| from(powers[i]));
        let mut acc = from(acc);
        let mut steps = blocks.chunks_exact(16 * WIDE);
        for step in &mut steps {
            let mut sums = [_mm_setzero_si128(); 3];
            mul_add(_mm_xor_si128(acc, load(step)), h[WIDE - 1], &mut sums);
            for i in 1..WIDE {
                mul_add(load(&step[16 * i..]), h[WIDE - 1 - i], &mut sums);
            }
            acc = reduce(sums);
        }
        to(fold_tail(h[0], acc, steps.remainder()))
    }

    /// Adds the partial products of two blocks and their two powers (one per 128-bit lane).
    #[inline]
    #[target_feature(enable = "vpclmulqdq,avx2")]
    fn mul_add2(x: __m256i, h: __m256i, sums: &mut [__m256i; 3]) {
        sums[0] = _mm256_xor_si256(sums[0], _mm256_clmulepi64_epi128(x, h, 0x00));
        sums[2] = _mm256_xor_si256(sums[2], _mm256_clmulepi64_epi128(x, h, 0x11));
        sums[1] = _mm256_xor_si256(sums[1], _mm256_clmulepi64_epi128(x, h, 0x01));
        sums[1] = _mm256_xor_si256(sums[1], _mm256_clmulepi64_epi128(x, h, 0x10));
    }

    /// [`fold`] two blocks per multiply.
    ///
    /// # Safety
    /// The CPU must have VPCLMULQDQ, AVX2, PCLMULQDQ and SSE4.1.
    #[target_feature(enable = "vpclmulqdq,avx2,pclmulqdq,sse4.1")]
    pub unsafe fn fold_ymm(powers: &[u128; WIDE], acc: u128, blocks: &[u8]) -> u128 {
        // Pair i of a step: its earlier block (low lane) weighs one power more.
        let h: [__m256i; WIDE / 2] = std::array::from_fn(|i| {
            _mm256_set_m128i(from(powers[WIDE - 2 - 2 * i]), from(powers[WIDE - 1 - 2 * i]))
        });
        let mut acc = from(acc);
        let mut steps = blocks.chunks_exact(16 * WIDE);
        for step in &mut steps {
            let pair =
                |i: usize| _mm256_set_m128i(load(&step[32 * i + 16..]), load(&step[32 * i..]));
            let mut sums = [_mm256_setzero_si256(); 3];
            mul_add2(_mm256_xor_si256(pair(0), _mm256_zextsi128_si256(acc)), h[0], &mut sums);
            for (i, h) in h.iter().enumerate().skip(1) {
                mul_add2(pair(i), *h, &mut sums);
            }
            let halves = |v: __m256i| {
                _mm_xor_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))
            };
            acc = reduce(sums.map(halves));
        }
        to(fold_tail(from(powers[0]), acc, steps.remainder()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A xorshift stream: inputs no kernel can special-case.
    fn stream(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn every_kernel_gives_rfc_8452s_polyval() {
        // RFC 8452, Appendix A: POLYVAL of two blocks.
        let h = u128::from_le_bytes(hex("25629347589242761d31f826ba4b757b").try_into().unwrap());
        let blocks = hex("4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362");
        let want = hex("f7a3b47b846119fae5b7866cf5e5b77e");
        for kernel in Kernel::present() {
            let key = Key::new(h).with_kernel(kernel);
            assert_eq!(key.fold(0, &blocks).to_le_bytes().to_vec(), want, "{kernel:?}");
        }
    }

    #[test]
    fn the_soft_arithmetic_matches_the_definition() {
        let mut next = stream(0x1234_5678_9abc_def1);
        for round in 0..500 {
            let (x, y) = (next(), next());
            let mut product = 0u128;
            for i in 0..64 {
                product ^= ((x as u128) << i) & 0u128.wrapping_sub((y >> i & 1) as u128);
            }
            assert_eq!(soft::clmul(x, y), product, "{x:#x} · {y:#x}");
            let a = (next() as u128) << 64 | next() as u128;
            let b = (next() as u128) << 64 | next() as u128;
            // Edge operands too: all ones, one bit, zero.
            let (a, b) = match round {
                0 => (u128::MAX, u128::MAX),
                1 => (1, 1 << 127),
                2 => (0, b),
                _ => (a, b),
            };
            assert_eq!(soft::dot(a, b), soft::dot_by_bits(a, b), "{a:#x} · {b:#x}");
        }
        // dot(a, x^128) = a: x^128 is the Montgomery one (x^128 mod the polynomial is
        // x^127 + x^126 + x^121 + 1).
        let one = (1u128 << 127) | (1 << 126) | (1 << 121) | 1;
        assert_eq!(soft::dot(0xdead_beef, one), 0xdead_beef);
    }

    #[test]
    fn kernels_agree_on_every_length_and_accumulator() {
        let mut next = stream(77);
        let bytes: Vec<u8> = (0..4096 + 16 * WIDE * 3).map(|_| next() as u8).collect();
        let h = (next() as u128) << 64 | next() as u128;
        let soft = Key::new(h).with_kernel(Kernel::Soft);
        for blocks in (0..=3 * WIDE + 2).chain([64, 255, 256 + WIDE * 3]) {
            let input = &bytes[..16 * blocks];
            let acc = (next() as u128) << 64 | next() as u128;
            let want = soft.fold(acc, input);
            // By the definition, a block at a time.
            let mut by_bits = acc;
            for block in input.chunks_exact(16) {
                by_bits =
                    soft::dot_by_bits(by_bits ^ u128::from_le_bytes(block.try_into().unwrap()), h);
            }
            assert_eq!(want, by_bits, "{blocks} blocks");
            for kernel in Kernel::present() {
                let key = Key::new(h).with_kernel(kernel);
                assert_eq!(key.fold(acc, input), want, "{kernel:?}, {blocks} blocks");
                // Folding in two parts is folding the whole.
                let cut = 16 * (blocks / 3);
                let parts = key.fold(key.fold(acc, &input[..cut]), &input[cut..]);
                assert_eq!(parts, want, "{kernel:?}, {blocks} blocks cut at {cut}");
            }
        }
    }
}
