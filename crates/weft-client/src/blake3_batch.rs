//! BLAKE3 chaining values of whole 64 KiB batches (64 chunks: a complete subtree of the
//! BLAKE3 tree when the batch starts at a multiple of 64 KiB), computed 16 chunks at a time
//! with AVX-512 where the CPU has it, else 8 at a time with AVX2 (rounds in `asm!`). The
//! `blake3` crate's own AVX-512 and assembly paths are C and assembly files, which the
//! pure-Rust build leaves out; its Rust AVX2 path is the slower one this replaces.
//!
//! Invariants:
//! - [`batch_cv`] equals the `blake3` crate's chaining value of the same subtree
//!   (`Hasher::set_input_offset` + `finalize_non_root`) for every input, on every CPU: the
//!   vector paths are used only after runtime detection, and the crate computes it otherwise
//!   (tests compare every path this CPU has with the crate).
//! - Only the default hash mode (no key, no derive-key context) is implemented.

use blake3::hazmat::{merge_subtrees_non_root, ChainingValue, HasherExt, Mode};

/// Bytes of one batch: 64 chunks of 1 KiB.
pub const BATCH_BYTES: usize = 64 << 10;

const CHUNK_LEN: usize = 1024;
const CHUNKS_PER_BATCH: u64 = (BATCH_BYTES / CHUNK_LEN) as u64;

/// The chaining value of the batch `batch` of the input starting at byte
/// `index · BATCH_BYTES`: a non-root node (the input must hold more than this batch).
pub fn batch_cv(batch: &[u8], index: u64) -> ChainingValue {
    assert_eq!(batch.len(), BATCH_BYTES, "a batch is {BATCH_BYTES} bytes");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked just above); the batch has BATCH_BYTES.
        return unsafe { avx512::batch_cv(batch, index * CHUNKS_PER_BATCH) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); the batch has BATCH_BYTES.
        return unsafe { avx2::batch_cv(batch, index * CHUNKS_PER_BATCH) };
    }
    portable_batch_cv(batch, index)
}

/// [`batch_cv`] by the `blake3` crate alone.
pub fn portable_batch_cv(batch: &[u8], index: u64) -> ChainingValue {
    let mut hasher = blake3::Hasher::new();
    hasher.set_input_offset(index * BATCH_BYTES as u64);
    hasher.update(batch);
    hasher.finalize_non_root()
}

/// Merges two subtrees' chaining values into their parent's (non-root).
pub fn parent_cv(left: &ChainingValue, right: &ChainingValue) -> ChainingValue {
    merge_subtrees_non_root(left, right, Mode::Hash)
}

/// BLAKE3's constants and message schedule, for the vector kernels.
#[cfg(target_arch = "x86_64")]
mod words {
    pub(super) const IV: [u32; 8] = [
        0x6A09_E667,
        0xBB67_AE85,
        0x3C6E_F372,
        0xA54F_F53A,
        0x510E_527F,
        0x9B05_688C,
        0x1F83_D9AB,
        0x5BE0_CD19,
    ];
    const MSG_PERMUTATION: [usize; 16] = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
    pub(super) const CHUNK_START: u32 = 1;
    pub(super) const CHUNK_END: u32 = 2;
    pub(super) const PARENT: u32 = 4;

    /// The message word order of each of the 7 rounds.
    const fn schedule() -> [[usize; 16]; 7] {
        let mut rounds = [[0usize; 16]; 7];
        let mut i = 0;
        while i < 16 {
            rounds[0][i] = i;
            i += 1;
        }
        let mut r = 1;
        while r < 7 {
            let mut i = 0;
            while i < 16 {
                rounds[r][i] = rounds[r - 1][MSG_PERMUTATION[i]];
                i += 1;
            }
            r += 1;
        }
        rounds
    }
    pub(super) const SCHEDULE: [[usize; 16]; 7] = schedule();
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use blake3::hazmat::ChainingValue;

    use super::{CHUNKS_PER_BATCH, CHUNK_LEN};

    use super::words::*;

    const LANES: usize = 16;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn g(v: &mut [__m512i; 16], a: usize, b: usize, c: usize, d: usize, x: __m512i, y: __m512i) {
        v[a] = _mm512_add_epi32(_mm512_add_epi32(v[a], v[b]), x);
        v[d] = _mm512_ror_epi32::<16>(_mm512_xor_si512(v[d], v[a]));
        v[c] = _mm512_add_epi32(v[c], v[d]);
        v[b] = _mm512_ror_epi32::<12>(_mm512_xor_si512(v[b], v[c]));
        v[a] = _mm512_add_epi32(_mm512_add_epi32(v[a], v[b]), y);
        v[d] = _mm512_ror_epi32::<8>(_mm512_xor_si512(v[d], v[a]));
        v[c] = _mm512_add_epi32(v[c], v[d]);
        v[b] = _mm512_ror_epi32::<7>(_mm512_xor_si512(v[b], v[c]));
    }

    /// One compression in 16 lanes: `cv` (8 words per lane) becomes the first half of the
    /// output (the chaining value of the block).
    #[target_feature(enable = "avx512f")]
    fn compress16(
        cv: &mut [__m512i; 8],
        m: &[__m512i; 16],
        counter_lo: __m512i,
        counter_hi: __m512i,
        flags: u32,
    ) {
        let mut v = [
            cv[0],
            cv[1],
            cv[2],
            cv[3],
            cv[4],
            cv[5],
            cv[6],
            cv[7],
            _mm512_set1_epi32(IV[0] as i32),
            _mm512_set1_epi32(IV[1] as i32),
            _mm512_set1_epi32(IV[2] as i32),
            _mm512_set1_epi32(IV[3] as i32),
            counter_lo,
            counter_hi,
            _mm512_set1_epi32(64),
            _mm512_set1_epi32(flags as i32),
        ];
        for s in &SCHEDULE {
            g(&mut v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
            g(&mut v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
            g(&mut v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
            g(&mut v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
            g(&mut v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
            g(&mut v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
            g(&mut v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
            g(&mut v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
        }
        for i in 0..8 {
            cv[i] = _mm512_xor_si512(v[i], v[i + 8]);
        }
    }

    /// The chaining values of 16 whole chunks at `chunks` (16 KiB, contiguous), chunk
    /// counters `first..first + 16`, as words per lane.
    #[target_feature(enable = "avx512f")]
    unsafe fn hash16_chunks(chunks: *const u8, first: u64) -> [__m512i; 8] {
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let counter_lo = _mm512_add_epi32(_mm512_set1_epi32(first as u32 as i32), lane);
        let counter_hi = _mm512_set1_epi32((first >> 32) as u32 as i32);
        // Lane j reads chunk j: byte offsets j · 1024 + 4 · word from the block's start.
        let chunk_offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(CHUNK_LEN as i32));
        let mut cv = IV.map(|word| _mm512_set1_epi32(word as i32));
        for block in 0..CHUNK_LEN / 64 {
            let m: [__m512i; 16] = std::array::from_fn(|word| {
                let offsets = _mm512_add_epi32(chunk_offsets, _mm512_set1_epi32(4 * word as i32));
                // SAFETY: the caller's 16 chunks are readable; lane j reads 4 bytes at
                // j·1024 + 64·block + 4·word < 16 KiB.
                unsafe { _mm512_i32gather_epi32::<1>(offsets, chunks.add(block * 64).cast()) }
            });
            let mut flags = 0;
            if block == 0 {
                flags |= CHUNK_START;
            }
            if block == CHUNK_LEN / 64 - 1 {
                flags |= CHUNK_END;
            }
            compress16(&mut cv, &m, counter_lo, counter_hi, flags);
        }
        cv
    }

    /// Lanes of 8 word vectors as 16 chaining values of 8 words.
    #[target_feature(enable = "avx512f")]
    fn lanes(cv: &[__m512i; 8]) -> [[u32; 8]; LANES] {
        let mut words = [[0u32; LANES]; 8];
        for (word, vector) in words.iter_mut().zip(cv) {
            // SAFETY: `word` holds 16 u32, the 64 bytes one vector stores.
            unsafe { _mm512_storeu_si512(word.as_mut_ptr().cast(), *vector) };
        }
        std::array::from_fn(|lane| std::array::from_fn(|word| words[word][lane]))
    }

    /// Parent chaining values of consecutive pairs of `children` (an even number, at most
    /// 32), 16 parents per compression.
    #[target_feature(enable = "avx512f")]
    fn parents(children: &[[u32; 8]]) -> Vec<[u32; 8]> {
        let count = children.len() / 2;
        let mut out = Vec::with_capacity(count);
        for group in children.chunks(2 * LANES) {
            let pairs = group.len() / 2;
            // Message word w of parent p: left child's word w, then the right child's.
            let mut words = [[0u32; LANES]; 16];
            for p in 0..pairs {
                for w in 0..8 {
                    words[w][p] = group[2 * p][w];
                    words[w + 8][p] = group[2 * p + 1][w];
                }
            }
            // SAFETY: each row of `words` holds the 64 bytes one vector loads.
            let m: [__m512i; 16] =
                std::array::from_fn(|w| unsafe { _mm512_loadu_si512(words[w].as_ptr().cast()) });
            let mut cv = IV.map(|word| _mm512_set1_epi32(word as i32));
            let zero = _mm512_setzero_si512();
            compress16(&mut cv, &m, zero, zero, PARENT);
            out.extend(lanes(&cv).into_iter().take(pairs));
        }
        out
    }

    /// The chaining value of the 64 chunks of `batch` (64 KiB), the first being chunk
    /// `first_chunk` of the input (a multiple of 64).
    ///
    /// # Safety
    /// The CPU must have AVX-512F; `batch` must be 64 KiB.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn batch_cv(batch: &[u8], first_chunk: u64) -> ChainingValue {
        let mut level: Vec<[u32; 8]> = Vec::with_capacity(CHUNKS_PER_BATCH as usize);
        for group in 0..(CHUNKS_PER_BATCH as usize / LANES) {
            let chunks = batch[group * LANES * CHUNK_LEN..][..LANES * CHUNK_LEN].as_ptr();
            // SAFETY: `chunks` points at 16 whole chunks of the batch; the CPU has AVX-512F.
            let cv = unsafe { hash16_chunks(chunks, first_chunk + (group * LANES) as u64) };
            level.extend(lanes(&cv));
        }
        while level.len() > 1 {
            level = parents(&level);
        }
        let mut out = [0u8; 32];
        for (bytes, word) in out.chunks_exact_mut(4).zip(level[0]) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        out
    }
}

/// 8 chunks at a time with AVX2. The rounds are `asm!`: the 16 state rows stay in the 16
/// vector registers for the whole compression (one row is parked in memory while the
/// 12- and 7-bit rotations need a scratch register), the message words are memory operands.
/// The `blake3` crate's Rust AVX2 code computes the same thing with more spills; these run
/// about 1.14× its speed on the Zen 3 this was measured on (docs/benchmarks.md).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::{asm, x86_64::*};

    use blake3::hazmat::ChainingValue;

    use super::words::*;
    use super::{CHUNKS_PER_BATCH, CHUNK_LEN};

    const LANES: usize = 8;

    /// The byte shuffles that rotate each 32-bit word right by 16 and by 8 bits.
    #[repr(C, align(32))]
    struct Shuffles([u8; 64]);
    static SHUFFLES: Shuffles = Shuffles([
        2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9,
        14, 15, 12, 13, 1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12, 1, 2, 3, 0, 5, 6, 7,
        4, 9, 10, 11, 8, 13, 14, 15, 12,
    ]);

    /// Four G half-steps side by side (registers `ymm<a>` …): a += m[x] + b;
    /// d = (d ^ a) >>> (the shuffle at `{k} + rot`); c += d; b = (b ^ c) >>> shr, with
    /// ymm8 parked at `{s}` as the shift's scratch.
    macro_rules! half {
        ($a0:literal $a1:literal $a2:literal $a3:literal,
         $b0:literal $b1:literal $b2:literal $b3:literal,
         $c0:literal $c1:literal $c2:literal $c3:literal,
         $d0:literal $d1:literal $d2:literal $d3:literal,
         $x0:literal $x1:literal $x2:literal $x3:literal,
         $rot:literal, $shr:literal, $shl:literal) => {
            concat!(
                "vpaddd ymm",
                $a0,
                ", ymm",
                $a0,
                ", ymmword ptr [{m} + {x",
                $x0,
                "}]\n",
                "vpaddd ymm",
                $a1,
                ", ymm",
                $a1,
                ", ymmword ptr [{m} + {x",
                $x1,
                "}]\n",
                "vpaddd ymm",
                $a2,
                ", ymm",
                $a2,
                ", ymmword ptr [{m} + {x",
                $x2,
                "}]\n",
                "vpaddd ymm",
                $a3,
                ", ymm",
                $a3,
                ", ymmword ptr [{m} + {x",
                $x3,
                "}]\n",
                "vpaddd ymm",
                $a0,
                ", ymm",
                $a0,
                ", ymm",
                $b0,
                "\n",
                "vpaddd ymm",
                $a1,
                ", ymm",
                $a1,
                ", ymm",
                $b1,
                "\n",
                "vpaddd ymm",
                $a2,
                ", ymm",
                $a2,
                ", ymm",
                $b2,
                "\n",
                "vpaddd ymm",
                $a3,
                ", ymm",
                $a3,
                ", ymm",
                $b3,
                "\n",
                "vpxor ymm",
                $d0,
                ", ymm",
                $d0,
                ", ymm",
                $a0,
                "\n",
                "vpxor ymm",
                $d1,
                ", ymm",
                $d1,
                ", ymm",
                $a1,
                "\n",
                "vpxor ymm",
                $d2,
                ", ymm",
                $d2,
                ", ymm",
                $a2,
                "\n",
                "vpxor ymm",
                $d3,
                ", ymm",
                $d3,
                ", ymm",
                $a3,
                "\n",
                "vpshufb ymm",
                $d0,
                ", ymm",
                $d0,
                ", ymmword ptr [{k} + ",
                $rot,
                "]\n",
                "vpshufb ymm",
                $d1,
                ", ymm",
                $d1,
                ", ymmword ptr [{k} + ",
                $rot,
                "]\n",
                "vpshufb ymm",
                $d2,
                ", ymm",
                $d2,
                ", ymmword ptr [{k} + ",
                $rot,
                "]\n",
                "vpshufb ymm",
                $d3,
                ", ymm",
                $d3,
                ", ymmword ptr [{k} + ",
                $rot,
                "]\n",
                "vpaddd ymm",
                $c0,
                ", ymm",
                $c0,
                ", ymm",
                $d0,
                "\n",
                "vpaddd ymm",
                $c1,
                ", ymm",
                $c1,
                ", ymm",
                $d1,
                "\n",
                "vpaddd ymm",
                $c2,
                ", ymm",
                $c2,
                ", ymm",
                $d2,
                "\n",
                "vpaddd ymm",
                $c3,
                ", ymm",
                $c3,
                ", ymm",
                $d3,
                "\n",
                "vpxor ymm",
                $b0,
                ", ymm",
                $b0,
                ", ymm",
                $c0,
                "\n",
                "vpxor ymm",
                $b1,
                ", ymm",
                $b1,
                ", ymm",
                $c1,
                "\n",
                "vpxor ymm",
                $b2,
                ", ymm",
                $b2,
                ", ymm",
                $c2,
                "\n",
                "vpxor ymm",
                $b3,
                ", ymm",
                $b3,
                ", ymm",
                $c3,
                "\n",
                "vmovdqu ymmword ptr [{s}], ymm8\n",
                "vpsrld ymm8, ymm",
                $b0,
                ", ",
                $shr,
                "\n",
                "vpslld ymm",
                $b0,
                ", ymm",
                $b0,
                ", ",
                $shl,
                "\n",
                "vpor ymm",
                $b0,
                ", ymm",
                $b0,
                ", ymm8\n",
                "vpsrld ymm8, ymm",
                $b1,
                ", ",
                $shr,
                "\n",
                "vpslld ymm",
                $b1,
                ", ymm",
                $b1,
                ", ",
                $shl,
                "\n",
                "vpor ymm",
                $b1,
                ", ymm",
                $b1,
                ", ymm8\n",
                "vpsrld ymm8, ymm",
                $b2,
                ", ",
                $shr,
                "\n",
                "vpslld ymm",
                $b2,
                ", ymm",
                $b2,
                ", ",
                $shl,
                "\n",
                "vpor ymm",
                $b2,
                ", ymm",
                $b2,
                ", ymm8\n",
                "vpsrld ymm8, ymm",
                $b3,
                ", ",
                $shr,
                "\n",
                "vpslld ymm",
                $b3,
                ", ymm",
                $b3,
                ", ",
                $shl,
                "\n",
                "vpor ymm",
                $b3,
                ", ymm",
                $b3,
                ", ymm8\n",
                "vmovdqu ymm8, ymmword ptr [{s}]\n",
            )
        };
    }

    /// One round: the column step (rows a = v0..v3, b = v4..v7, c = v8..v11, d = v12..v15),
    /// then the diagonal step, each as two half-steps; the round's message order comes in
    /// the `x0`..`x15` offsets.
    macro_rules! round_text {
        () => {
            concat!(
                half!(0 1 2 3, 4 5 6 7, 8 9 10 11, 12 13 14 15, 0 2 4 6, 0, 12, 20),
                half!(0 1 2 3, 4 5 6 7, 8 9 10 11, 12 13 14 15, 1 3 5 7, 32, 7, 25),
                half!(0 1 2 3, 5 6 7 4, 10 11 8 9, 15 12 13 14, 8 10 12 14, 0, 12, 20),
                half!(0 1 2 3, 5 6 7 4, 10 11 8 9, 15 12 13 14, 9 11 13 15, 32, 7, 25),
            )
        };
    }

    /// Round `$r` over the state `$v` (row i in ymm i), message words at `$m`.
    macro_rules! round {
        ($r:literal, $v:ident, $m:ident, $k:ident, $s:ident) => {
            asm!(
                round_text!(),
                m = in(reg) $m,
                k = in(reg) $k,
                s = in(reg) $s,
                x0 = const 32 * SCHEDULE[$r][0],
                x1 = const 32 * SCHEDULE[$r][1],
                x2 = const 32 * SCHEDULE[$r][2],
                x3 = const 32 * SCHEDULE[$r][3],
                x4 = const 32 * SCHEDULE[$r][4],
                x5 = const 32 * SCHEDULE[$r][5],
                x6 = const 32 * SCHEDULE[$r][6],
                x7 = const 32 * SCHEDULE[$r][7],
                x8 = const 32 * SCHEDULE[$r][8],
                x9 = const 32 * SCHEDULE[$r][9],
                x10 = const 32 * SCHEDULE[$r][10],
                x11 = const 32 * SCHEDULE[$r][11],
                x12 = const 32 * SCHEDULE[$r][12],
                x13 = const 32 * SCHEDULE[$r][13],
                x14 = const 32 * SCHEDULE[$r][14],
                x15 = const 32 * SCHEDULE[$r][15],
                inout("ymm0") $v[0],
                inout("ymm1") $v[1],
                inout("ymm2") $v[2],
                inout("ymm3") $v[3],
                inout("ymm4") $v[4],
                inout("ymm5") $v[5],
                inout("ymm6") $v[6],
                inout("ymm7") $v[7],
                inout("ymm8") $v[8],
                inout("ymm9") $v[9],
                inout("ymm10") $v[10],
                inout("ymm11") $v[11],
                inout("ymm12") $v[12],
                inout("ymm13") $v[13],
                inout("ymm14") $v[14],
                inout("ymm15") $v[15],
                options(nostack, preserves_flags),
            )
        };
    }

    /// One compression in 8 lanes: `cv` (word i of every lane in `cv[i]`) becomes the
    /// chaining value of the block whose words are `m`.
    #[target_feature(enable = "avx2")]
    fn compress8(cv: &mut [__m256i; 8], m: &[__m256i; 16], lo: __m256i, hi: __m256i, flags: u32) {
        let mut v: [__m256i; 16] = [
            cv[0],
            cv[1],
            cv[2],
            cv[3],
            cv[4],
            cv[5],
            cv[6],
            cv[7],
            _mm256_set1_epi32(IV[0] as i32),
            _mm256_set1_epi32(IV[1] as i32),
            _mm256_set1_epi32(IV[2] as i32),
            _mm256_set1_epi32(IV[3] as i32),
            lo,
            hi,
            _mm256_set1_epi32(64),
            _mm256_set1_epi32(flags as i32),
        ];
        let mut parked = _mm256_setzero_si256();
        let (m, k, s) = (m.as_ptr(), SHUFFLES.0.as_ptr(), &raw mut parked);
        // SAFETY: the CPU has AVX2 (this function's feature); `m` points at 16 vectors (the
        // offsets are below 16 · 32), `k` at the two 32-byte shuffles, `s` at one writable
        // vector; the rounds touch no other memory, no stack and no flags, and every vector
        // register they write is an operand.
        unsafe {
            round!(0, v, m, k, s);
            round!(1, v, m, k, s);
            round!(2, v, m, k, s);
            round!(3, v, m, k, s);
            round!(4, v, m, k, s);
            round!(5, v, m, k, s);
            round!(6, v, m, k, s);
        }
        for i in 0..8 {
            cv[i] = _mm256_xor_si256(v[i], v[i + 8]);
        }
    }

    /// Rows of 8 words become columns (and back).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
        let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
        let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
        let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
        let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
        let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
        let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
        let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
        let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ]
    }

    /// The message words of 64-byte block `block` of 8 inputs, input j at `base + j·stride`.
    ///
    /// # Safety
    /// Every input must hold `64 · (block + 1)` readable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn message(base: *const u8, stride: usize, block: usize) -> [__m256i; 16] {
        let half = |h: usize| {
            transpose(std::array::from_fn(|j| {
                // SAFETY: the caller's inputs hold this block (32 bytes at 64·block + 32·h).
                unsafe { _mm256_loadu_si256(base.add(j * stride + 64 * block + 32 * h).cast()) }
            }))
        };
        let (low, high) = (half(0), half(1));
        std::array::from_fn(|w| if w < 8 { low[w] } else { high[w - 8] })
    }

    /// The 8 chaining values of lanes' words.
    #[target_feature(enable = "avx2")]
    fn lanes(cv: &[__m256i; 8]) -> [[u32; 8]; LANES] {
        let rows = transpose(*cv);
        let mut out = [[0u32; 8]; LANES];
        for (lane, row) in out.iter_mut().zip(rows) {
            // SAFETY: a lane holds 8 u32, the 32 bytes one vector stores.
            unsafe { _mm256_storeu_si256(lane.as_mut_ptr().cast(), row) };
        }
        out
    }

    /// The chaining values of 8 whole chunks at `chunks` (8 KiB, contiguous), chunk
    /// counters `first..first + 8`.
    ///
    /// # Safety
    /// `chunks` must point at 8 KiB of readable bytes.
    #[target_feature(enable = "avx2")]
    unsafe fn hash8_chunks(chunks: *const u8, first: u64) -> [[u32; 8]; LANES] {
        // `first` is a multiple of 8: the low counter words do not wrap inside the group.
        debug_assert_eq!(first % LANES as u64, 0);
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let lo = _mm256_add_epi32(_mm256_set1_epi32(first as u32 as i32), lane);
        let hi = _mm256_set1_epi32((first >> 32) as u32 as i32);
        let mut cv = IV.map(|word| _mm256_set1_epi32(word as i32));
        for block in 0..CHUNK_LEN / 64 {
            // SAFETY: each of the 8 chunks holds CHUNK_LEN bytes.
            let m = unsafe { message(chunks, CHUNK_LEN, block) };
            let mut flags = 0;
            if block == 0 {
                flags |= CHUNK_START;
            }
            if block == CHUNK_LEN / 64 - 1 {
                flags |= CHUNK_END;
            }
            compress8(&mut cv, &m, lo, hi, flags);
        }
        lanes(&cv)
    }

    /// Parent chaining values of consecutive pairs of `children` (an even number), 8
    /// parents per compression.
    #[target_feature(enable = "avx2")]
    fn parents(children: &[[u32; 8]]) -> Vec<[u32; 8]> {
        let mut out = Vec::with_capacity(children.len() / 2);
        for group in children.chunks(2 * LANES) {
            // Parent p's block is its two children, 64 contiguous bytes.
            let mut pairs = [[0u32; 8]; 2 * LANES];
            pairs[..group.len()].copy_from_slice(group);
            // SAFETY: `pairs` holds 8 blocks of 64 bytes, input j at 64·j.
            let m = unsafe { message(pairs.as_ptr().cast(), 64, 0) };
            let mut cv = IV.map(|word| _mm256_set1_epi32(word as i32));
            let zero = _mm256_setzero_si256();
            compress8(&mut cv, &m, zero, zero, PARENT);
            out.extend(lanes(&cv).into_iter().take(group.len() / 2));
        }
        out
    }

    /// The chaining value of the 64 chunks of `batch` (64 KiB), the first being chunk
    /// `first_chunk` of the input (a multiple of 64).
    ///
    /// # Safety
    /// The CPU must have AVX2; `batch` must be 64 KiB.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn batch_cv(batch: &[u8], first_chunk: u64) -> ChainingValue {
        let mut level: Vec<[u32; 8]> = Vec::with_capacity(CHUNKS_PER_BATCH as usize);
        for group in 0..(CHUNKS_PER_BATCH as usize / LANES) {
            let chunks = batch[group * LANES * CHUNK_LEN..][..LANES * CHUNK_LEN].as_ptr();
            // SAFETY: `chunks` points at 8 whole chunks of the batch.
            level.extend(unsafe { hash8_chunks(chunks, first_chunk + (group * LANES) as u64) });
        }
        while level.len() > 1 {
            level = parents(&level);
        }
        let mut out = [0u8; 32];
        for (bytes, word) in out.chunks_exact_mut(4).zip(level[0]) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
            .collect()
    }

    #[test]
    fn batch_cvs_equal_the_crates_and_build_the_crates_hash() {
        let input = bytes(5 * BATCH_BYTES, 7);
        for index in [0u64, 1, 2, 3, 4, 63, 1 << 14] {
            let batch = &input[(index as usize % 5) * BATCH_BYTES..][..BATCH_BYTES];
            assert_eq!(batch_cv(batch, index), portable_batch_cv(batch, index), "batch {index}");
        }
        // Every vector kernel this CPU has, on its own, at chunk counters below and past 2^32.
        #[cfg(target_arch = "x86_64")]
        for index in [0u64, 1, 5, (1 << 26) - 1, 1 << 26, (1 << 26) + 3, 1 << 40] {
            let batch = &input[(index as usize % 5) * BATCH_BYTES..][..BATCH_BYTES];
            let want = portable_batch_cv(batch, index);
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2; the batch has BATCH_BYTES.
                let got = unsafe { avx2::batch_cv(batch, index * CHUNKS_PER_BATCH) };
                assert_eq!(got, want, "avx2, batch {index}");
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F; the batch has BATCH_BYTES.
                let got = unsafe { avx512::batch_cv(batch, index * CHUNKS_PER_BATCH) };
                assert_eq!(got, want, "avx512, batch {index}");
            }
        }
        // Four batches: a tree of two parents under the root.
        let four = &input[..4 * BATCH_BYTES];
        let cvs: Vec<ChainingValue> =
            four.chunks(BATCH_BYTES).enumerate().map(|(i, b)| batch_cv(b, i as u64)).collect();
        let (left, right) = (parent_cv(&cvs[0], &cvs[1]), parent_cv(&cvs[2], &cvs[3]));
        let root = blake3::hazmat::merge_subtrees_root(&left, &right, Mode::Hash);
        assert_eq!(root, blake3::hash(four));
    }
}
