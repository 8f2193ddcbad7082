//! The MD5s (and SHA-256s) of many signed payloads at once: multi-buffer hashing for
//! concurrent PUTs.
//!
//! One message's MD5 is one long dependency chain ([`crate::md5`]): a core runs it at about
//! 4.5 cycles a byte whatever its vector units could do. Eight messages' MD5s are eight
//! independent chains, and one AVX2 instruction advances all eight: [`md5_lanes`] runs the
//! 64 steps of a block in each of 8 lanes for about what one scalar block costs (the idea
//! of ISA-L's multi-buffer hashing and of MinIO's md5-simd). The SHA-256s of the signed
//! payloads are then computed apart, two messages' chains at a time on the SHA units
//! ([`crate::md5_sha256`]), no longer hidden in MD5's gaps, so lanes pay only when at least
//! two bodies are hashed at once.
//!
//! How: a body that arrives while another is being hashed gets a [`Handle`] instead of its
//! own hasher. Its chunks go to one hashing thread, which keeps a [`Md5Sha256`] per body
//! and, once every body it holds (up to 8) has whole blocks waiting, advances them together
//! ([`md5_lanes`]), then each one's SHA-256 over the same blocks. A body that cannot wait
//! (it ended, or lags [`URGENT_LAG_BYTES`] behind) starts a turn with whoever is ready; a
//! body alone is hashed by the scalar kernel there. The body passes its chunks on as it gives them
//! (hashing lags at most [`MAX_LAG_BYTES`] behind) and holds its last chunk until the
//! digests are in ([`Handle::poll_digests`]), so the signed-payload check still comes
//! before the last bytes ([`crate::signed_payload`]).
//!
//! Invariants:
//! - A handle's digests equal [`Md5Sha256`]'s over the same bytes, whatever the chunks and
//!   whichever other bodies shared its lanes (tested against the `md-5` and `sha2` crates
//!   with many bodies, random splits and lengths).
//! - [`md5_lanes`] runs its AVX2 kernel only after runtime detection; elsewhere it computes
//!   each lane with the scalar block function ([`available`] tells bodies not to use lanes
//!   there at all).
//! - A body given up (its handle dropped before its end) leaves the lanes at the thread's
//!   next turn; it never holds up the others.
//! - The thread never holds a body's lock while hashing, and a producer never waits on the
//!   thread while holding anything but its own task (wakers).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;

use crate::md5;
use crate::md5_sha256::{sha256_pair, Md5Sha256};

/// Messages advanced together by [`md5_lanes`].
pub const LANES: usize = 8;

/// Most blocks of each lane hashed in one turn (64 KiB): a short turn lets new bodies in.
const RUN_BLOCKS: usize = 1024;

/// How far a body's hashing may lag behind the bytes it has passed on; past this it waits.
pub const MAX_LAG_BYTES: usize = 8 << 20;

/// A body lagging this far is hashed at the next turn with whichever others have blocks;
/// short of it, the thread waits until every body in the lanes (up to [`LANES`]) has
/// blocks, so that a turn fills its lanes.
pub const URGENT_LAG_BYTES: usize = 2 << 20;

/// Whether this CPU runs the lanes kernel (x86-64 with AVX2). Elsewhere bodies hash inline.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Advances `states[i]` over `inputs[i]` for every i: the MD5 block function over each
/// lane's whole blocks. Every input has the same number of blocks; at most [`LANES`].
pub fn md5_lanes(states: &mut [[u32; 4]], inputs: &[&[[u8; 64]]]) {
    assert_eq!(states.len(), inputs.len(), "one state per input");
    assert!(inputs.len() <= LANES, "at most {LANES} lanes");
    let Some(blocks) = inputs.first().map(|input| input.len()) else { return };
    assert!(inputs.iter().all(|input| input.len() == blocks), "every lane has as many blocks");
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the CPU has AVX2 (checked just above); every input holds `blocks` blocks.
        unsafe { avx2::md5x8(states, inputs, blocks) };
        return;
    }
    for (state, input) in states.iter_mut().zip(inputs) {
        md5::compress(state, input);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::LANES;
    use crate::md5;

    /// Eight rows of eight words as eight columns: row i's word w lands in lane i of
    /// vector w.
    #[inline(always)]
    unsafe fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
        // SAFETY: register operations only; the caller's CPU has AVX2.
        unsafe {
            let (t0, t1) = (_mm256_unpacklo_epi32(r[0], r[1]), _mm256_unpackhi_epi32(r[0], r[1]));
            let (t2, t3) = (_mm256_unpacklo_epi32(r[2], r[3]), _mm256_unpackhi_epi32(r[2], r[3]));
            let (t4, t5) = (_mm256_unpacklo_epi32(r[4], r[5]), _mm256_unpackhi_epi32(r[4], r[5]));
            let (t6, t7) = (_mm256_unpacklo_epi32(r[6], r[7]), _mm256_unpackhi_epi32(r[6], r[7]));
            // u0: words 0 and 4 of rows 0..4; u1: 1 and 5; u2: 2 and 6; u3: 3 and 7 (u4..u7
            // the same of rows 4..8).
            let (u0, u1) = (_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2));
            let (u2, u3) = (_mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3));
            let (u4, u5) = (_mm256_unpacklo_epi64(t4, t6), _mm256_unpackhi_epi64(t4, t6));
            let (u6, u7) = (_mm256_unpacklo_epi64(t5, t7), _mm256_unpackhi_epi64(t5, t7));
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
    }

    /// MD5 over `blocks` blocks of each input, 8 lanes at a time (lanes past the inputs
    /// hash a block of zeros over and over, and are dropped).
    ///
    /// # Safety
    /// The CPU must have AVX2; every input must hold `blocks` blocks.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn md5x8(states: &mut [[u32; 4]], inputs: &[&[[u8; 64]]], blocks: usize) {
        static ZERO_BLOCK: [u8; 64] = [0; 64];
        // Lane i's next block and how far apart its blocks are (0: the zero block again).
        let mut next = [ZERO_BLOCK.as_ptr(); LANES];
        let mut stride = [0usize; LANES];
        for (lane, input) in inputs.iter().enumerate() {
            next[lane] = input.as_ptr().cast();
            stride[lane] = 64;
        }
        let mut words = [[0u32; LANES]; 4];
        for (lane, state) in states.iter().enumerate() {
            for (w, word) in state.iter().enumerate() {
                words[w][lane] = *word;
            }
        }
        // SAFETY: 32 bytes from `words[w]` (8 words).
        let load = |w: &[u32; LANES]| unsafe { _mm256_loadu_si256(w.as_ptr().cast()) };
        let (mut a, mut b, mut c, mut d) =
            (load(&words[0]), load(&words[1]), load(&words[2]), load(&words[3]));
        let ones = _mm256_set1_epi32(-1);
        let k = md5::constants();
        // One step over vectors: see md5::step (the same order of operations).
        macro_rules! step {
            ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
                let early = _mm256_add_epi32(
                    $a,
                    _mm256_add_epi32($m, _mm256_set1_epi32($k as i32)),
                );
                let mixed = _mm256_add_epi32(early, step!(@$fun, $b, $c, $d));
                let rotated = _mm256_or_si256(
                    _mm256_slli_epi32::<$s>(mixed),
                    _mm256_srli_epi32::<{ 32 - $s }>(mixed),
                );
                $a = _mm256_add_epi32(rotated, $b);
            };
            (@f, $b:ident, $c:ident, $d:ident) => {
                _mm256_xor_si256(_mm256_and_si256(_mm256_xor_si256($c, $d), $b), $d)
            };
            (@g, $b:ident, $c:ident, $d:ident) => {
                _mm256_or_si256(_mm256_andnot_si256($d, $c), _mm256_and_si256($d, $b))
            };
            (@h, $b:ident, $c:ident, $d:ident) => {
                _mm256_xor_si256(_mm256_xor_si256($c, $d), $b)
            };
            (@i, $b:ident, $c:ident, $d:ident) => {
                _mm256_xor_si256($c, _mm256_or_si256($b, _mm256_xor_si256($d, ones)))
            };
        }
        macro_rules! nothing {
            ($q:expr) => {};
        }
        for _ in 0..blocks {
            // Plain loops, no closures: the intrinsics stay inside this function's features.
            let mut rows = [[_mm256_setzero_si256(); LANES]; 2];
            for (h, half) in rows.iter_mut().enumerate() {
                for (i, row) in half.iter_mut().enumerate() {
                    // SAFETY: lane i reads 64 bytes at next[i]: a block of its input (the
                    // caller's promise: `blocks` of them from its start) or the zero block.
                    *row = unsafe { _mm256_loadu_si256(next[i].add(32 * h).cast()) };
                }
            }
            // SAFETY: the CPU has AVX2 (this function's promise).
            let (low, high) = unsafe { (transpose(rows[0]), transpose(rows[1])) };
            let m: [__m256i; 16] = [
                low[0], low[1], low[2], low[3], low[4], low[5], low[6], low[7], high[0], high[1],
                high[2], high[3], high[4], high[5], high[6], high[7],
            ];
            let (a0, b0, c0, d0) = (a, b, c, d);
            md5::block!(a, b, c, d, m, k, nothing);
            a = _mm256_add_epi32(a, a0);
            b = _mm256_add_epi32(b, b0);
            c = _mm256_add_epi32(c, c0);
            d = _mm256_add_epi32(d, d0);
            for lane in 0..LANES {
                next[lane] = next[lane].wrapping_add(stride[lane]);
            }
        }
        for (out, vector) in words.iter_mut().zip([a, b, c, d]) {
            // SAFETY: 32 bytes into `out` (8 words).
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), vector) };
        }
        for (lane, state) in states.iter_mut().enumerate() {
            *state = std::array::from_fn(|w| words[w][lane]);
        }
    }
}

/// One body's hashing, shared by its producer ([`Handle`]) and the hashing thread.
#[derive(Debug, Default)]
struct Job {
    shared: Mutex<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Chunks given and not yet taken by the thread.
    chunks: VecDeque<Bytes>,
    /// Bytes given and not yet hashed (queued or in the thread's hands).
    lagging: usize,
    /// The producer gave its last chunk.
    ended: bool,
    /// The producer went away before its end: the thread drops the job.
    abandoned: bool,
    /// MD5 and SHA-256 of every byte given, once the last is hashed.
    digests: Option<([u8; 16], [u8; 32])>,
    /// The producer waiting (for its digests, or for the lag to shrink).
    waker: Option<Waker>,
}

impl Shared {
    /// Whether the producer must wait before giving more.
    fn lags(&self) -> bool {
        self.lagging > MAX_LAG_BYTES
    }
}

/// The hashing thread's inbox.
struct Service {
    arrivals: Mutex<Vec<Arc<Job>>>,
    arrived: Condvar,
    /// The thread is (about to be) waiting for work: producers must notify.
    sleeping: AtomicBool,
}

impl Service {
    /// The service, its thread started on first use.
    fn get() -> &'static Service {
        static SERVICE: OnceLock<&'static Service> = OnceLock::new();
        SERVICE.get_or_init(|| {
            let service: &'static Service = Box::leak(Box::new(Service {
                arrivals: Mutex::new(Vec::new()),
                arrived: Condvar::new(),
                sleeping: AtomicBool::new(false),
            }));
            std::thread::Builder::new()
                .name("weft-md5-lanes".into())
                .spawn(move || service.run())
                .expect("spawn the MD5 lanes thread");
            service
        })
    }

    fn wake_thread(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let _arrivals = self.arrivals.lock().expect("lanes inbox");
            self.arrived.notify_one();
        }
    }

    /// The hashing thread: takes bodies in, hashes what they gave, answers their digests.
    fn run(&self) {
        let mut lanes: Vec<Lane> = Vec::new();
        // Which ready lane goes first in a turn (so no body waits behind 8 others forever).
        let mut first = 0usize;
        loop {
            lanes.extend(self.arrivals.lock().expect("lanes inbox").drain(..).map(Lane::new));
            lanes.retain_mut(Lane::refill);
            let mut ready: Vec<usize> =
                (0..lanes.len()).filter(|&i| lanes[i].align() > 0).collect();
            // A turn when it fills its lanes, or someone cannot wait: a body whose producer
            // waits for its digests or lags far behind.
            let full = ready.len() >= lanes.len().min(LANES);
            if ready.is_empty() || !(full || ready.iter().any(|&i| lanes[i].urgent())) {
                self.sleep(&lanes);
                continue;
            }
            first = first.wrapping_add(1);
            let turn = first % ready.len();
            ready.rotate_left(turn);
            ready.truncate(LANES);
            if let [only] = ready[..] {
                lanes[only].hash_alone();
            } else {
                hash_together(&mut lanes, &ready);
            }
        }
    }

    /// Waits until something may start a turn: a new body, a chunk for a body that has
    /// none in hand, a body ended or given up.
    fn sleep(&self, lanes: &[Lane]) {
        let arrivals = self.arrivals.lock().expect("lanes inbox");
        self.sleeping.store(true, Ordering::SeqCst);
        // A producer that gave a chunk before seeing `sleeping` set is seen here.
        let waiting = !arrivals.is_empty()
            || lanes.iter().any(|lane| {
                let shared = lane.job.shared.lock().expect("lane job");
                let starved = lane.current.is_none() && !shared.chunks.is_empty();
                starved || shared.ended || shared.abandoned || shared.lagging >= URGENT_LAG_BYTES
            });
        if !waiting {
            // The timeout only bounds a wait nothing should need.
            drop(self.arrived.wait_timeout(arrivals, Duration::from_secs(1)));
        }
        self.sleeping.store(false, Ordering::SeqCst);
    }
}

/// A body in the hashing thread's hands.
struct Lane {
    job: Arc<Job>,
    hasher: Md5Sha256,
    /// The chunk being hashed and how far.
    current: Option<Bytes>,
    at: usize,
}

impl Lane {
    fn new(job: Arc<Job>) -> Lane {
        Lane { job, hasher: Md5Sha256::new(), current: None, at: 0 }
    }

    /// Takes the body's next chunk if it has none; answers its digests when it ended and
    /// everything is hashed. Whether the lane stays.
    fn refill(&mut self) -> bool {
        let mut shared = self.job.shared.lock().expect("lane job");
        if shared.abandoned {
            return false;
        }
        if self.current.is_some() {
            return true;
        }
        if let Some(chunk) = shared.chunks.pop_front() {
            self.current = Some(chunk);
            self.at = 0;
            return true;
        }
        if !shared.ended {
            return true;
        }
        shared.digests = Some(std::mem::take(&mut self.hasher).finalize());
        let waker = shared.waker.take();
        drop(shared);
        if let Some(waker) = waker {
            waker.wake();
        }
        false
    }

    /// Hashes the current chunk's bytes up to the next block boundary of the message
    /// (scalar), and a tail shorter than a block; the whole blocks it has then.
    fn align(&mut self) -> usize {
        let Some(chunk) = self.current.clone() else { return 0 };
        let buffered = self.hasher.buffered();
        if buffered > 0 {
            let take = (64 - buffered).min(chunk.len() - self.at);
            self.hasher.update(&chunk[self.at..self.at + take]);
            self.hashed(take);
        }
        let whole = (chunk.len() - self.at) / 64;
        if whole == 0 {
            self.hasher.update(&chunk[self.at..]);
            self.hashed(chunk.len() - self.at);
        }
        whole
    }

    /// Whether the body cannot wait for a full turn: its producer gave the last chunk (and
    /// waits for the digests) or lags [`URGENT_LAG_BYTES`] behind.
    fn urgent(&self) -> bool {
        let shared = self.job.shared.lock().expect("lane job");
        shared.ended || shared.lagging >= URGENT_LAG_BYTES
    }

    /// The whole blocks at the current place (after [`Lane::align`]), at most a turn's.
    fn blocks(&self) -> &[[u8; 64]] {
        let chunk = self.current.as_ref().expect("a lane with blocks has a chunk");
        let blocks = chunk[self.at..].as_chunks::<64>().0;
        &blocks[..blocks.len().min(RUN_BLOCKS)]
    }

    /// A turn for this body alone: the scalar kernel over its next blocks.
    fn hash_alone(&mut self) {
        let chunk = self.current.clone().expect("a ready lane has a chunk");
        let bytes = self.blocks().len() * 64;
        self.hasher.update(&chunk[self.at..self.at + bytes]);
        self.hashed(bytes);
    }

    /// `bytes` more of the current chunk are hashed: moves on, tells the producer.
    fn hashed(&mut self, bytes: usize) {
        self.at += bytes;
        if self.current.as_ref().is_some_and(|chunk| self.at == chunk.len()) {
            self.current = None;
        }
        let mut shared = self.job.shared.lock().expect("lane job");
        let lagged = shared.lags();
        shared.lagging -= bytes;
        // A producer waits for its digests (woken in refill) or for the lag to shrink.
        let waker = (lagged && !shared.lags()).then(|| shared.waker.take()).flatten();
        drop(shared);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A turn for several bodies: MD5 in lanes over as many blocks as each has, then their
/// SHA-256s over the same blocks, two at a time.
fn hash_together(lanes: &mut [Lane], ready: &[usize]) {
    let blocks = ready.iter().map(|&i| lanes[i].blocks().len()).min().unwrap_or(0);
    let (mut md5s, mut shas): (Vec<[u32; 4]>, Vec<[u32; 8]>) =
        ready.iter().map(|&i| lanes[i].hasher.states()).unzip();
    {
        let inputs: Vec<&[[u8; 64]]> =
            ready.iter().map(|&i| &lanes[i].blocks()[..blocks]).collect();
        md5_lanes(&mut md5s, &inputs);
        for (pair, states) in inputs.chunks(2).zip(shas.chunks_mut(2)) {
            match (pair, states) {
                ([one, other], [first, second]) => sha256_pair([first, second], [one, other]),
                ([one], [only]) => sha2::block_api::compress256(only, one),
                _ => unreachable!("chunks of two, states beside their inputs"),
            }
        }
    }
    for ((&i, md5), sha256) in ready.iter().zip(md5s).zip(shas) {
        lanes[i].hasher.take_whole_blocks(blocks, md5, sha256);
        lanes[i].hashed(64 * blocks);
    }
}

/// A body's place in the lanes: give it the body's chunks in order, then wait for the
/// digests. Dropped before the last chunk, the body is given up.
#[derive(Debug)]
pub struct Handle {
    job: Arc<Job>,
    ended: bool,
}

impl Handle {
    /// A new body in the lanes.
    pub fn new() -> Handle {
        let service = Service::get();
        let job = Arc::new(Job::default());
        service.arrivals.lock().expect("lanes inbox").push(Arc::clone(&job));
        service.arrived.notify_one();
        Handle { job, ended: false }
    }

    /// The body's next chunk (`last`: its final one). Returns at once: see
    /// [`Handle::poll_lag`] for how far behind the hashing may fall.
    pub fn give(&mut self, chunk: Bytes, last: bool) {
        assert!(!self.ended, "a chunk after the last one");
        self.ended = last;
        {
            let mut shared = self.job.shared.lock().expect("lane job");
            shared.lagging += chunk.len();
            if !chunk.is_empty() {
                shared.chunks.push_back(chunk);
            }
            shared.ended = last;
        }
        Service::get().wake_thread();
    }

    /// Ready when the hashing lags at most [`MAX_LAG_BYTES`] behind what was given.
    pub fn poll_lag(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut shared = self.job.shared.lock().expect("lane job");
        if shared.lags() {
            shared.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(())
    }

    /// The MD5 and the SHA-256 of every byte given, once the last chunk was given and
    /// hashed.
    pub fn poll_digests(&self, cx: &mut Context<'_>) -> Poll<([u8; 16], [u8; 32])> {
        assert!(self.ended, "digests before the last chunk");
        let mut shared = self.job.shared.lock().expect("lane job");
        match shared.digests {
            Some(digests) => Poll::Ready(digests),
            None => {
                shared.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Default for Handle {
    fn default() -> Handle {
        Handle::new()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut shared = self.job.shared.lock().expect("lane job");
        if shared.digests.is_none() {
            shared.abandoned = true;
            shared.chunks.clear();
        }
        drop(shared);
        Service::get().wake_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5_reference::Digest as _;

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn reference(data: &[u8]) -> ([u8; 16], [u8; 32]) {
        (md5_reference::Md5::digest(data).into(), crate::md5_sha256::sha256(data))
    }

    #[test]
    fn lanes_equal_the_scalar_block_function_for_every_lane_count() {
        for lanes in 1..=LANES {
            for blocks in [1usize, 2, 7, 64] {
                let data: Vec<Vec<u8>> =
                    (0..lanes).map(|i| bytes(64 * blocks, (lanes * 100 + i) as u64)).collect();
                let inputs: Vec<&[[u8; 64]]> = data.iter().map(|d| d.as_chunks::<64>().0).collect();
                // Different starting states per lane, as bodies at different places have.
                let starts: Vec<[u32; 4]> = (0..lanes)
                    .map(|i| std::array::from_fn(|w| (i * 4 + w) as u32 * 0x0101_0101 + 7))
                    .collect();
                let mut states = starts.clone();
                md5_lanes(&mut states, &inputs);
                for (i, input) in inputs.iter().enumerate() {
                    let mut expected = starts[i];
                    md5::compress(&mut expected, input);
                    assert_eq!(states[i], expected, "{lanes} lanes, {blocks} blocks, lane {i}");
                }
            }
        }
    }

    /// Polls `f` until ready (the thread makes progress on its own).
    fn wait<T>(mut f: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(value) = f(&mut cx) {
                return value;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn many_bodies_at_once_in_any_chunks_get_their_own_digests() {
        let bodies: Vec<Vec<u8>> = (0..13)
            .map(|i| {
                bytes([0, 1, 63, 64, 65, 1000, 4096, 70_000, 300_001][i % 9] + i * 517, i as u64)
            })
            .collect();
        // One thread per body, each giving its chunks of sizes drawn from its seed.
        let threads: Vec<_> = bodies
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, body)| {
                std::thread::spawn(move || {
                    let mut handle = Handle::new();
                    let sizes = bytes(body.len() + 1, 1000 + i as u64);
                    let (mut at, mut k) = (0, 0);
                    while at < body.len() {
                        let size = (sizes[k] as usize * (1 + i % 5) * 37 + 1).min(body.len() - at);
                        handle.give(Bytes::copy_from_slice(&body[at..at + size]), false);
                        at += size;
                        k += 1;
                        if k % 7 == 0 {
                            std::thread::yield_now();
                        }
                    }
                    handle.give(Bytes::new(), true);
                    wait(|cx| handle.poll_digests(cx))
                })
            })
            .collect();
        // A body given up half way through leaves the others be.
        let mut dropped = Handle::new();
        dropped.give(Bytes::from(bytes(100_000, 99)), false);
        drop(dropped);
        for (thread, body) in threads.into_iter().zip(&bodies) {
            assert_eq!(
                thread.join().expect("body thread"),
                reference(body),
                "{} bytes",
                body.len()
            );
        }
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_body_far_ahead_of_its_hashing_waits_and_is_woken() {
        let body = bytes(3 * MAX_LAG_BYTES, 5);
        let mut handle = Handle::new();
        handle.give(Bytes::copy_from_slice(&body), false);
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        if handle.poll_lag(&mut Context::from_waker(&waker)).is_pending() {
            // Waiting: woken once the lag is back under the bound, and then let go.
            while wakes.0.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(handle.poll_lag(&mut Context::from_waker(&waker)).is_ready());
        }
        handle.give(Bytes::new(), true);
        assert_eq!(wait(|cx| handle.poll_digests(cx)), reference(&body));
    }
}
