//! BLAKE3 chaining values of whole 64 KiB batches (64 chunks: a complete subtree of the
//! BLAKE3 tree when the batch starts at a multiple of 64 KiB), computed 16 chunks at a time
//! with AVX-512 where the CPU has it. The `blake3` crate's own AVX-512 path is C, which the
//! pure-Rust build leaves out; its Rust paths stop at AVX2 (8 chunks at a time).
//!
//! Invariants:
//! - [`batch_cv`] equals the `blake3` crate's chaining value of the same subtree
//!   (`Hasher::set_input_offset` + `finalize_non_root`) for every input, on every CPU: the
//!   AVX-512 path is used only after runtime detection, and the crate computes it otherwise
//!   (tests compare both paths with the crate).
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

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use blake3::hazmat::ChainingValue;

    use super::{CHUNKS_PER_BATCH, CHUNK_LEN};

    const IV: [u32; 8] = [
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
    const CHUNK_START: u32 = 1;
    const CHUNK_END: u32 = 2;
    const PARENT: u32 = 4;
    const LANES: usize = 16;

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
    const SCHEDULE: [[usize; 16]; 7] = schedule();

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
        // Four batches: a tree of two parents under the root.
        let four = &input[..4 * BATCH_BYTES];
        let cvs: Vec<ChainingValue> =
            four.chunks(BATCH_BYTES).enumerate().map(|(i, b)| batch_cv(b, i as u64)).collect();
        let (left, right) = (parent_cv(&cvs[0], &cvs[1]), parent_cv(&cvs[2], &cvs[3]));
        let root = blake3::hazmat::merge_subtrees_root(&left, &right, Mode::Hash);
        assert_eq!(root, blake3::hash(four));
    }
}
