//! MD5 and SHA-256 of one message in one pass, for signed S3 payloads: the gateway must
//! check a signed payload's SHA-256 and computes its MD5 for the ETag, the two largest costs
//! per byte of a PUT.
//!
//! MD5 is one long dependency chain (module [`crate::md5`]): a core running it alone leaves
//! most of its execution ports idle. SHA-256 with the SHA extensions (`sha256rnds2`) runs on
//! the vector ports. Where the CPU has them, [`Md5Sha256`] runs one SHA-256 quad-round
//! between every four MD5 steps of the same 64-byte block, so the SHA rounds fill the gaps
//! of the MD5 chain: measured on the project machine (2026-11-29), MD5 alone 560–580 MB/s,
//! SHA-256 alone (`sha2`, SHA-NI) 1250–1280 MB/s, the two one after the other 385–400 MB/s,
//! interleaved 515–520 MB/s — a quarter less CPU per byte for both. Elsewhere the two run one
//! after the other over each batch of blocks (our MD5 and the `sha2` crate's block function).
//!
//!
//! Where several bodies are hashed at once ([`crate::md5_lanes`]), their MD5s run in vector
//! lanes and their SHA-256s apart, two messages at a time ([`sha256_pair`]: two dependency
//! chains on the SHA units; measured on the project machine, AMD EPYC Zen 3, 2026-11-29:
//! 1.8–2.2 GB/s for the pair against 1.24–1.38 GB/s one after the other).
//!
//! Invariants:
//! - [`Md5Sha256`] fed any split of a message gives [`crate::md5::digest`] and the SHA-256
//!   of the whole message, with either kernel (tested against the `md-5` and `sha2` crates
//!   on every length to 300 and on random splits); [`sha256_pair`] gives each message the
//!   `sha2` crate's block function's state.
//! - The interleaved kernel runs only where the CPU reports SHA, SSSE3 and SSE4.1 at run
//!   time; the build needs no CPU feature.

use sha2::Digest as _;

use crate::md5::{self, step};

/// Which block function a hasher uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// MD5 steps and SHA-NI rounds interleaved (x86-64 with SHA, SSSE3, SSE4.1).
    Interleaved,
    /// MD5, then SHA-256, over each batch of blocks: any CPU.
    Apart,
}

impl Kernel {
    /// The fastest kernel this CPU runs.
    pub fn best() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("sha")
            && std::is_x86_feature_detected!("ssse3")
            && std::is_x86_feature_detected!("sse4.1")
        {
            return Kernel::Interleaved;
        }
        Kernel::Apart
    }
}

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const SHA256_INITIAL: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The MD5 and the SHA-256 of a message given in pieces, in order.
#[derive(Clone, Debug)]
pub struct Md5Sha256 {
    md5: [u32; 4],
    sha256: [u32; 8],
    blocks: md5::Blocks,
    kernel: Kernel,
}

impl Default for Md5Sha256 {
    fn default() -> Md5Sha256 {
        Md5Sha256::new()
    }
}

impl Md5Sha256 {
    /// A hasher with the fastest kernel this CPU runs.
    pub fn new() -> Md5Sha256 {
        Md5Sha256::with_kernel(Kernel::best())
    }

    /// A hasher with `kernel`; [`Kernel::Interleaved`] where the CPU lacks it falls back to
    /// [`Kernel::Apart`].
    pub fn with_kernel(kernel: Kernel) -> Md5Sha256 {
        let kernel = if kernel == Kernel::Interleaved { Kernel::best() } else { kernel };
        Md5Sha256 { md5: md5::INITIAL, sha256: SHA256_INITIAL, blocks: md5::Blocks::new(), kernel }
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Adds the next piece of the message.
    pub fn update(&mut self, data: &[u8]) {
        let (md5, sha256, kernel) = (&mut self.md5, &mut self.sha256, self.kernel);
        self.blocks.update(data, |blocks| compress(kernel, md5, sha256, blocks));
    }

    /// Bytes held of a block not yet complete: whole blocks may have their MD5 computed
    /// elsewhere ([`Md5Sha256::take_whole_blocks`]) only when none are.
    pub(crate) fn buffered(&self) -> usize {
        self.blocks.buffered()
    }

    /// Both states after the blocks taken so far.
    pub(crate) fn states(&self) -> ([u32; 4], [u32; 8]) {
        (self.md5, self.sha256)
    }

    /// Takes the next `blocks` whole blocks of the message, hashed elsewhere from
    /// [`Md5Sha256::states`] to `md5_after` and `sha256_after` ([`crate::md5_lanes`]).
    /// Only where no partial block is held.
    pub(crate) fn take_whole_blocks(
        &mut self,
        blocks: usize,
        md5_after: [u32; 4],
        sha256_after: [u32; 8],
    ) {
        self.blocks.count_whole(blocks as u64 * 64);
        (self.md5, self.sha256) = (md5_after, sha256_after);
    }

    /// The MD5 and the SHA-256 of everything added.
    pub fn finalize(mut self) -> ([u8; 16], [u8; 32]) {
        // Both pad alike but for the length's byte order: MD5 little-, SHA-256 big-endian.
        let (tail, end) = self.blocks.padded(u64::to_le_bytes);
        md5::compress(&mut self.md5, tail[..end].as_chunks::<64>().0);
        let (tail, end) = self.blocks.padded(u64::to_be_bytes);
        sha2::block_api::compress256(&mut self.sha256, tail[..end].as_chunks::<64>().0);
        let mut sha256 = [0u8; 32];
        for (bytes, word) in sha256.as_chunks_mut::<4>().0.iter_mut().zip(self.sha256) {
            *bytes = word.to_be_bytes();
        }
        (md5::le_bytes(self.md5), sha256)
    }
}

/// Both block functions over whole blocks, with `kernel`.
fn compress(kernel: Kernel, md5: &mut [u32; 4], sha256: &mut [u32; 8], blocks: &[[u8; 64]]) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernel::best` chose Interleaved only after detecting every feature the
        // function enables.
        Kernel::Interleaved => unsafe { interleaved(md5, sha256, blocks) },
        _ => {
            md5::compress(md5, blocks);
            sha2::block_api::compress256(sha256, blocks);
        }
    }
}

/// The SHA-256 of `data` (the `sha2` crate).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

/// SHA-256's 64 round constants (FIPS 180-4 §4.2.2).
#[cfg(target_arch = "x86_64")]
static SHA256_K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 with the SHA extensions, in pieces other kernels interleave with their own
/// work: [`interleaved`] (beside MD5's chain) and [`sha256_pair`] (two messages' chains).
#[cfg(target_arch = "x86_64")]
mod sha_ni {
    use std::arch::x86_64::*;

    use super::SHA256_K;

    /// A SHA-256 state as the SHA extensions want it: one register holds the words A, B,
    /// E, F and the other C, D, G, H.
    #[derive(Clone, Copy)]
    pub(super) struct State {
        abef: __m128i,
        cdgh: __m128i,
    }

    /// The sixteen message words of a block in flight, as four quads: the schedule
    /// overwrites them as it goes.
    #[derive(Clone, Copy)]
    pub(super) struct Schedule([__m128i; 4]);

    // Every function below needs SHA, SSSE3 and SSE4.1 (the callers' target features);
    // they are inlined into those callers.

    impl State {
        #[inline(always)]
        pub(super) unsafe fn load(state: &[u32; 8]) -> State {
            // SAFETY: two unaligned 16-byte loads inside `state` (8 words).
            unsafe {
                let abcd = _mm_shuffle_epi32(_mm_loadu_si128(state.as_ptr().cast()), 0xB1);
                let efgh = _mm_shuffle_epi32(_mm_loadu_si128(state.as_ptr().add(4).cast()), 0x1B);
                State {
                    abef: _mm_alignr_epi8(abcd, efgh, 8),
                    cdgh: _mm_blend_epi16(efgh, abcd, 0xF0),
                }
            }
        }

        #[inline(always)]
        pub(super) unsafe fn store(self, state: &mut [u32; 8]) {
            // SAFETY: two unaligned 16-byte stores inside `state` (8 words).
            unsafe {
                let feba = _mm_shuffle_epi32(self.abef, 0x1B);
                let dchg = _mm_shuffle_epi32(self.cdgh, 0xB1);
                _mm_storeu_si128(state.as_mut_ptr().cast(), _mm_blend_epi16(feba, dchg, 0xF0));
                _mm_storeu_si128(state.as_mut_ptr().add(4).cast(), _mm_alignr_epi8(dchg, feba, 8));
            }
        }

        /// The state after a block that started from `before`: the two added.
        #[inline(always)]
        pub(super) unsafe fn added(self, before: State) -> State {
            // SAFETY: register operations only.
            unsafe {
                State {
                    abef: _mm_add_epi32(self.abef, before.abef),
                    cdgh: _mm_add_epi32(self.cdgh, before.cdgh),
                }
            }
        }
    }

    impl Schedule {
        /// A block's big-endian words.
        #[inline(always)]
        pub(super) unsafe fn load(block: &[u8; 64]) -> Schedule {
            // SAFETY: four 16-byte loads inside the 64-byte block.
            unsafe {
                let byte_swap = _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203);
                Schedule(std::array::from_fn(|i| {
                    _mm_shuffle_epi8(_mm_loadu_si128(block.as_ptr().add(16 * i).cast()), byte_swap)
                }))
            }
        }

        /// Quad-round `q` (0..16) of the block on `state`: from q = 4 on, first the next
        /// four schedule words, into the quad that held W[t-16..t-12]. Callers pass `q` as
        /// a constant, so the quads stay in registers.
        #[inline(always)]
        pub(super) unsafe fn quad(&mut self, state: &mut State, q: usize) {
            let w = &mut self.0;
            let n = q % 4;
            // SAFETY: register operations, and a 16-byte load at word 4q < 64 of SHA256_K.
            unsafe {
                if q >= 4 {
                    let (n1, n2, n3) = (w[(n + 1) % 4], w[(n + 2) % 4], w[(n + 3) % 4]);
                    let sum =
                        _mm_add_epi32(_mm_sha256msg1_epu32(w[n], n1), _mm_alignr_epi8(n3, n2, 4));
                    w[n] = _mm_sha256msg2_epu32(sum, n3);
                }
                let wk = _mm_add_epi32(w[n], _mm_loadu_si128(SHA256_K.as_ptr().add(4 * q).cast()));
                state.cdgh = _mm_sha256rnds2_epu32(state.cdgh, state.abef, wk);
                state.abef =
                    _mm_sha256rnds2_epu32(state.abef, state.cdgh, _mm_shuffle_epi32(wk, 0x0E));
            }
        }
    }
}

/// MD5 and SHA-256 over whole blocks, one SHA-256 quad-round (four rounds, with the message
/// schedule for the next four words) before every four MD5 steps.
///
/// # Safety
/// The CPU must have SHA, SSSE3 and SSE4.1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sha,ssse3,sse4.1")]
unsafe fn interleaved(md5_state: &mut [u32; 4], sha_state: &mut [u32; 8], blocks: &[[u8; 64]]) {
    let k = md5::constants();
    let [mut a, mut b, mut c, mut d] = *md5_state;
    // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
    let mut sha = unsafe { sha_ni::State::load(sha_state) };
    for block in blocks {
        let m = md5::words(block);
        let (a0, b0, c0, d0) = (a, b, c, d);
        let sha0 = sha;
        // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
        let mut schedule = unsafe { sha_ni::Schedule::load(block) };
        macro_rules! sha_quad {
            ($q:expr) => {
                // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
                unsafe { schedule.quad(&mut sha, $q) }
            };
        }
        md5::block!(a, b, c, d, m, k, sha_quad);
        a = a.wrapping_add(a0);
        b = b.wrapping_add(b0);
        c = c.wrapping_add(c0);
        d = d.wrapping_add(d0);
        // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
        sha = unsafe { sha.added(sha0) };
    }
    *md5_state = [a, b, c, d];
    // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
    unsafe { sha.store(sha_state) };
}

/// The SHA-256 block function over two messages' blocks at once (as many of each):
/// their two dependency chains share the SHA units, quad-round by quad-round.
///
/// # Safety
/// The CPU must have SHA, SSSE3 and SSE4.1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sha,ssse3,sse4.1")]
unsafe fn sha256_pair_ni(states: [&mut [u32; 8]; 2], blocks: [&[[u8; 64]]; 2]) {
    let [first, second] = states;
    // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
    let (mut x, mut y) = unsafe { (sha_ni::State::load(first), sha_ni::State::load(second)) };
    for (one, other) in blocks[0].iter().zip(blocks[1]) {
        let (x0, y0) = (x, y);
        let (mut wx, mut wy) =
            // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
            unsafe { (sha_ni::Schedule::load(one), sha_ni::Schedule::load(other)) };
        macro_rules! quads {
            ($($q:literal)*) => {
                // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
                $(unsafe {
                    wx.quad(&mut x, $q);
                    wy.quad(&mut y, $q);
                })*
            };
        }
        quads!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
        // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
        x = unsafe { x.added(x0) };
        // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
        y = unsafe { y.added(y0) };
    }
    // SAFETY: the CPU has SHA, SSSE3 and SSE4.1 (this function's promise).
    unsafe {
        x.store(first);
        y.store(second);
    }
}

/// The SHA-256 block function over two messages' whole blocks (as many of each), the two
/// interleaved where the CPU has the SHA extensions.
pub fn sha256_pair(states: [&mut [u32; 8]; 2], blocks: [&[[u8; 64]]; 2]) {
    assert_eq!(blocks[0].len(), blocks[1].len(), "as many blocks of each");
    #[cfg(target_arch = "x86_64")]
    if Kernel::best() == Kernel::Interleaved {
        // SAFETY: Kernel::best chose Interleaved only after detecting SHA, SSSE3 and SSE4.1.
        unsafe { sha256_pair_ni(states, blocks) };
        return;
    }
    for (state, blocks) in states.into_iter().zip(blocks) {
        sha2::block_api::compress256(state, blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5_reference::Digest as _;

    fn reference(data: &[u8]) -> ([u8; 16], [u8; 32]) {
        (md5_reference::Md5::digest(data).into(), sha256(data))
    }

    fn kernels() -> Vec<Kernel> {
        let mut kernels = vec![Kernel::Apart];
        if Kernel::best() == Kernel::Interleaved {
            kernels.push(Kernel::Interleaved);
        } else {
            eprintln!("this CPU lacks SHA/SSE4.1: only the Apart kernel is tested");
        }
        kernels
    }

    #[test]
    fn every_length_around_the_padding_boundaries_matches_both_references() {
        let data: Vec<u8> =
            (0..300u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for kernel in kernels() {
            for len in 0..=data.len() {
                let mut hasher = Md5Sha256::with_kernel(kernel);
                assert_eq!(hasher.kernel(), kernel);
                hasher.update(&data[..len]);
                assert_eq!(hasher.finalize(), reference(&data[..len]), "{kernel:?} length {len}");
            }
        }
    }

    #[test]
    fn a_pair_of_messages_gets_each_its_own_sha256() {
        for blocks in [0usize, 1, 2, 17] {
            let one: Vec<u8> = (0..64 * blocks).map(|i| (i * 31 + 7) as u8).collect();
            let other: Vec<u8> = (0..64 * blocks).map(|i| (i * 17 + 3) as u8).collect();
            let starts = [[7u32; 8], SHA256_INITIAL];
            let (mut first, mut second) = (starts[0], starts[1]);
            sha256_pair(
                [&mut first, &mut second],
                [one.as_chunks::<64>().0, other.as_chunks::<64>().0],
            );
            let mut expected = starts;
            sha2::block_api::compress256(&mut expected[0], one.as_chunks::<64>().0);
            sha2::block_api::compress256(&mut expected[1], other.as_chunks::<64>().0);
            assert_eq!([first, second], expected, "{blocks} blocks");
        }
    }

    #[test]
    fn any_split_of_a_message_gives_the_whole_message_digests() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(29);
        for kernel in kernels() {
            for _ in 0..100 {
                let len = rng.gen_range(0..20_000);
                let data: Vec<u8> = (0..len).map(|_| rng.gen::<u8>()).collect();
                let mut hasher = Md5Sha256::with_kernel(kernel);
                let mut at = 0;
                while at < len {
                    let piece = rng.gen_range(1..=(len - at).min(3000));
                    hasher.update(&data[at..at + piece]);
                    at += piece;
                }
                assert_eq!(hasher.finalize(), reference(&data), "{kernel:?} length {len}");
            }
        }
    }
}
