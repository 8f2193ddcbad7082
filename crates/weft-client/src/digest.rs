//! End-to-end unit digests (weft-wire [`UnitDigest`]): computed here by every writer of a
//! unit (puts, transitions' new parity) and checked here by every reader of a whole unit
//! (reads, degraded reads, repair's helpers and its rebuilt unit).
//!
//! Invariants:
//! - Writers record keyed digests ([`DigestKey::digest`], [`DigestKey::writer`]) where the
//!   CPU has a carry-less multiply, BLAKE3 ones elsewhere ([`DigestKey::writes`]). Keyed: the
//!   POLYVAL hash ([`crate::polyval`]) of the unit's bytes, zero-padded to whole blocks,
//!   under a key H, then the first 16 bytes of BLAKE3 keyed with a second key over that hash
//!   and the unit's length. Both keys are derived from the cluster secret's unit digest key
//!   (weft-auth), which nodes never hold: a node that changes a unit's bytes cannot make a
//!   digest that passes, nor learn H from digests (only the keyed BLAKE3 of a hash leaves).
//!   Two inputs of one length collide with probability at most (blocks / 2^128) for any
//!   pair not chosen knowing H; inputs of two lengths differ in what the final hash takes.
//! - Readers check a unit with the kind its recorded digest has ([`DigestKey::digester_like`],
//!   [`DigestKey::check_unit`]): BLAKE3 digests of units written before keyed ones existed
//!   are the first 16 bytes of BLAKE3 over the unit's stored bytes ([`Blake3Digester`]).
//! - Whatever pieces the bytes arrive in, a digester's digest is the one of the whole input
//!   ([`Digester::update`]); a reader that holds the bytes in one buffer as they grow hashes
//!   them in place ([`Digester::absorb_batches`], [`Digester::finish_with`]): no copy.
//! - A mismatch is a [`FailureKind::Corrupt`] failure whose cause starts with
//!   [`MISMATCH`], so callers rebuild the unit from the others and report it, as for rot the
//!   node itself found.

use std::sync::Arc;

use blake3::hazmat::{merge_subtrees_root, ChainingValue, HasherExt, Mode};
pub use weft_wire::DigestKind;
use weft_wire::{digest::UNIT_DIGEST_BYTES, UnitDigest};

use crate::blake3_batch::{batch_cv, parent_cv, BATCH_BYTES};

use crate::node::{FailureKind, NodeFailure};
use crate::UnitInfo;

/// How a failed end-to-end check starts its cause (reports and logs carry it).
pub const MISMATCH: &str = "end-to-end checksum mismatch";

/// The keys of a cluster's keyed unit digests, derived from its unit digest key, and the
/// kind of digest this client's writers record.
pub struct DigestKey {
    /// POLYVAL's H.
    poly: crate::polyval::Key,
    /// The BLAKE3 key of the final hash.
    tag: [u8; 32],
    /// What writers record: keyed digests where the CPU multiplies carry-less, else BLAKE3
    /// (POLYVAL's portable kernel is several times slower than BLAKE3's; readers take both).
    writes: DigestKind,
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DigestKey(redacted, writes {:?})", self.writes)
    }
}

impl DigestKey {
    pub fn new(key: &weft_auth::UnitDigestKey) -> DigestKey {
        let h = blake3::derive_key("weft 2026-11 unit digest: POLYVAL key", key.bytes());
        let tag = blake3::derive_key("weft 2026-11 unit digest: final key", key.bytes());
        let h = u128::from_le_bytes(h[..16].try_into().expect("16 bytes"));
        let writes = match crate::polyval::Kernel::best() {
            crate::polyval::Kernel::Soft => DigestKind::Blake3,
            _ => DigestKind::Keyed,
        };
        DigestKey { poly: crate::polyval::Key::new(h), tag, writes }
    }

    /// The digest key of the cluster whose secret this is.
    pub fn of(secret: &weft_auth::ClusterSecret) -> Arc<DigestKey> {
        Arc::new(DigestKey::new(&secret.unit_digest_key()))
    }

    /// The same keys run by another POLYVAL kernel (tests and benchmarks); writers record
    /// the same kind as before.
    pub fn with_kernel(&self, kernel: crate::polyval::Kernel) -> DigestKey {
        DigestKey { poly: self.poly.clone().with_kernel(kernel), ..*self }
    }

    /// The same keys, writers recording `kind` (tests).
    pub fn writing(&self, kind: DigestKind) -> DigestKey {
        DigestKey { poly: self.poly.clone(), writes: kind, ..*self }
    }

    /// The kind of digest this client's writers record.
    pub fn writes(&self) -> DigestKind {
        self.writes
    }

    /// A digester of what writers record ([`DigestKey::writes`]) for a unit of exactly
    /// `len` bytes (a BLAKE3 one then hashes a batch that ends a piece where it lies,
    /// [`Blake3Digester::for_len`]).
    pub fn writer(self: &Arc<Self>, len: u64) -> Digester {
        match self.writes {
            DigestKind::Blake3 => Digester::Blake3(Blake3Digester::for_len(len)),
            DigestKind::Keyed => self.digester_of(DigestKind::Keyed),
        }
    }

    /// A digester of the kind of `expected` (a reader about to check a unit against it).
    pub fn digester_like(self: &Arc<Self>, expected: &UnitDigest) -> Digester {
        self.digester_of(expected.kind())
    }

    /// A digester of `kind`.
    pub fn digester_of(self: &Arc<Self>, kind: DigestKind) -> Digester {
        match kind {
            DigestKind::Keyed => {
                let key = Arc::clone(self);
                let keyed = KeyedDigester { key, acc: 0, pending: [0; 16], pending_len: 0, len: 0 };
                Digester::Keyed(keyed)
            }
            DigestKind::Blake3 => Digester::Blake3(Blake3Digester::new()),
        }
    }

    /// The digest writers record of a whole unit's bytes ([`DigestKey::writes`]).
    pub fn digest(&self, bytes: &[u8]) -> UnitDigest {
        self.digest_of(self.writes, bytes)
    }

    /// The digest of `bytes` of the kind of `expected`.
    pub fn digest_like(&self, expected: &UnitDigest, bytes: &[u8]) -> UnitDigest {
        self.digest_of(expected.kind(), bytes)
    }

    /// The digest of `kind` of a whole unit's bytes.
    pub fn digest_of(&self, kind: DigestKind, bytes: &[u8]) -> UnitDigest {
        match kind {
            DigestKind::Keyed => {
                let whole = bytes.len() / 16 * 16;
                let acc = self.poly.fold(0, &bytes[..whole]);
                self.finish(acc, &bytes[whole..], bytes.len() as u64)
            }
            DigestKind::Blake3 => blake3_digest(bytes),
        }
    }

    /// The keyed digest once every whole block is folded into `acc`: `last` (under a block)
    /// zero-padded, then the final hash of the result and the input's length.
    fn finish(&self, mut acc: u128, last: &[u8], len: u64) -> UnitDigest {
        debug_assert!(last.len() < 16);
        if !last.is_empty() {
            let mut block = [0u8; 16];
            block[..last.len()].copy_from_slice(last);
            acc = self.poly.fold(acc, &block);
        }
        let mut hasher = blake3::Hasher::new_keyed(&self.tag);
        hasher.update(&acc.to_le_bytes());
        hasher.update(&len.to_le_bytes());
        let mut out = [0u8; UNIT_DIGEST_BYTES];
        hasher.finalize_xof().fill(&mut out);
        UnitDigest::new(DigestKind::Keyed, out)
    }

    /// Checks the whole stored bytes of `unit` against the digest meta holds (nothing to
    /// check when the object has none).
    pub fn check_unit(&self, unit: &UnitInfo, bytes: &[u8]) -> Result<(), NodeFailure> {
        match &unit.digest {
            Some(expected) => check_digest(unit, self.digest_like(expected, bytes), bytes.len()),
            None => Ok(()),
        }
    }
}

/// A digest computed over pieces of a unit, in order, of either kind.
#[derive(Debug, Clone)]
pub enum Digester {
    Keyed(KeyedDigester),
    Blake3(Blake3Digester),
}

impl Digester {
    pub fn update(&mut self, piece: &[u8]) {
        match self {
            Digester::Keyed(d) => d.update(piece),
            Digester::Blake3(d) => d.update(piece),
        }
    }

    /// Hashes, straight from `bytes` (no copy), as much of them as can be hashed before the
    /// input's last bytes are known, and answers how many bytes that was (at least all but a
    /// batch of them): feed the rest, once more bytes have come, to the next call, or to
    /// [`Digester::finish_with`] as the last. Only for a digester fed by this and
    /// `finish_with` alone.
    pub fn absorb_batches(&mut self, bytes: &[u8]) -> usize {
        match self {
            Digester::Keyed(d) => d.absorb_blocks(bytes),
            Digester::Blake3(d) => d.absorb_batches(bytes),
        }
    }

    pub fn finish(&self) -> UnitDigest {
        match self {
            Digester::Keyed(d) => d.finish(),
            Digester::Blake3(d) => d.finish(),
        }
    }

    /// The digest of the bytes absorbed ([`Digester::absorb_batches`]) followed by `last`,
    /// the input's final bytes (at most a batch).
    pub fn finish_with(&self, last: &[u8]) -> UnitDigest {
        match self {
            Digester::Keyed(d) => d.finish_with(last),
            Digester::Blake3(d) => d.finish_with(last),
        }
    }
}

/// A keyed digest ([`DigestKey`]) over pieces: whole blocks are folded straight from each
/// piece, and at most one block's bytes wait.
#[derive(Debug, Clone)]
pub struct KeyedDigester {
    key: Arc<DigestKey>,
    /// POLYVAL of the whole blocks so far.
    acc: u128,
    /// Bytes of a block not folded yet (`pending_len` of them).
    pending: [u8; 16],
    pending_len: usize,
    /// Bytes taken so far.
    len: u64,
}

impl KeyedDigester {
    pub fn update(&mut self, mut piece: &[u8]) {
        self.len += piece.len() as u64;
        if self.pending_len > 0 {
            let taken = piece.len().min(16 - self.pending_len);
            self.pending[self.pending_len..self.pending_len + taken]
                .copy_from_slice(&piece[..taken]);
            self.pending_len += taken;
            piece = &piece[taken..];
            if self.pending_len < 16 {
                return;
            }
            self.acc = self.key.poly.fold(self.acc, &self.pending);
            self.pending_len = 0;
        }
        let whole = piece.len() / 16 * 16;
        self.acc = self.key.poly.fold(self.acc, &piece[..whole]);
        let rest = &piece[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    fn absorb_blocks(&mut self, bytes: &[u8]) -> usize {
        assert_eq!(self.pending_len, 0, "absorb_batches after update");
        let whole = bytes.len() / 16 * 16;
        self.acc = self.key.poly.fold(self.acc, &bytes[..whole]);
        self.len += whole as u64;
        whole
    }

    pub fn finish(&self) -> UnitDigest {
        self.key.finish(self.acc, &self.pending[..self.pending_len], self.len)
    }

    fn finish_with(&self, last: &[u8]) -> UnitDigest {
        assert_eq!(self.pending_len, 0, "finish_with after update");
        let mut rest = self.clone();
        rest.update(last);
        rest.finish()
    }
}

/// A BLAKE3 digest computed over pieces of a unit, in order.
///
/// Bytes are gathered into 64 KiB batches ([`crate::blake3_batch`]); a full batch is hashed
/// once more bytes follow it (so it is not the whole input, and its subtree is not the
/// root), 16 chunks at a time where the CPU has AVX-512, and its chaining value joins a stack
/// of complete subtrees, merged as BLAKE3's incremental hasher merges chunks. `finish`
/// hashes the last batch (whole or partial) and folds the stack into the root. Short pieces
/// (units arrive in cells of as little as 4 KiB) cost a copy into the batch, never a
/// narrower hash. A digester told the unit's length ([`Digester::for_len`]) knows whether
/// more bytes follow a piece's last whole batch, and hashes it where it is too.
#[derive(Debug, Default, Clone)]
pub struct Blake3Digester {
    /// Bytes not hashed yet: at most one batch, the last one while no more bytes came.
    pending: Vec<u8>,
    /// Chaining values of complete subtrees of whole batches, left to right.
    stack: Vec<ChainingValue>,
    /// Whole batches hashed so far.
    batches: u64,
    /// The input's length, when known up front.
    len: Option<u64>,
}

impl Blake3Digester {
    pub fn new() -> Blake3Digester {
        Blake3Digester::default()
    }

    /// A digester of an input of exactly `len` bytes (a unit being written): a batch that
    /// ends a piece is hashed straight from it when the input goes on past it. Fed more or
    /// fewer bytes than `len`, its digest is not the input's (a writer that sent other than
    /// `len` bytes has failed anyway); debug builds check it.
    pub fn for_len(len: u64) -> Blake3Digester {
        Blake3Digester { len: Some(len), ..Blake3Digester::default() }
    }

    /// Bytes taken so far, hashed or pending.
    fn taken(&self) -> u64 {
        self.batches * BATCH_BYTES as u64 + self.pending.len() as u64
    }

    /// Whether the input goes on past the next `bytes` bytes after those taken so far.
    fn goes_on_past(&self, bytes: usize) -> bool {
        self.len.is_some_and(|len| self.taken() + (bytes as u64) < len)
    }

    pub fn update(&mut self, mut piece: &[u8]) {
        while !piece.is_empty() {
            if self.pending.len() == BATCH_BYTES {
                // More bytes follow the pending batch: it is not the root.
                let cv = batch_cv(&self.pending, self.batches);
                self.push(cv);
                self.pending.clear();
            }
            let whole = piece.len() > BATCH_BYTES
                || (piece.len() == BATCH_BYTES && self.goes_on_past(BATCH_BYTES));
            if self.pending.is_empty() && whole {
                // Whole batches straight from the piece, the last one kept back unless more
                // bytes are known to follow it.
                let cv = batch_cv(&piece[..BATCH_BYTES], self.batches);
                self.push(cv);
                piece = &piece[BATCH_BYTES..];
                continue;
            }
            if self.pending.capacity() == 0 {
                self.pending.reserve_exact(BATCH_BYTES);
            }
            let taken = piece.len().min(BATCH_BYTES - self.pending.len());
            self.pending.extend_from_slice(&piece[..taken]);
            piece = &piece[taken..];
        }
    }

    /// Adds the chaining value of the next whole batch, merging every subtree it completes
    /// (the number of trailing zero bits of the new batch count).
    fn push(&mut self, mut cv: ChainingValue) {
        self.batches += 1;
        let mut total = self.batches;
        while total & 1 == 0 {
            let left = self.stack.pop().expect("a completed subtree has a left half");
            cv = parent_cv(&left, &cv);
            total >>= 1;
        }
        self.stack.push(cv);
    }

    /// Hashes, straight from `bytes` (no copy), every whole batch at its start that more of
    /// its bytes follow, and answers how many bytes that was: feed the rest, once more bytes
    /// have come, to the next call, or to [`Digester::finish_with`] as the last. Only for a
    /// digester that holds no pending bytes (fed by this and `finish_with` alone).
    pub fn absorb_batches(&mut self, bytes: &[u8]) -> usize {
        assert!(self.pending.is_empty(), "absorb_batches after update");
        let mut taken = 0;
        while bytes.len() - taken > BATCH_BYTES {
            let cv = batch_cv(&bytes[taken..taken + BATCH_BYTES], self.batches);
            self.push(cv);
            taken += BATCH_BYTES;
        }
        taken
    }

    pub fn finish(&self) -> UnitDigest {
        debug_assert!(
            self.len.is_none_or(|len| len == self.taken()),
            "a digester for_len was fed other than its length"
        );
        self.finish_after(&self.pending)
    }

    /// The digest of the bytes absorbed ([`Digester::absorb_batches`]) followed by `last`,
    /// the input's final bytes (at most a batch, all of them when fewer than a batch came).
    pub fn finish_with(&self, last: &[u8]) -> UnitDigest {
        assert!(self.pending.is_empty(), "finish_with after update");
        assert!(last.len() <= BATCH_BYTES, "finish_with takes at most a batch");
        self.finish_after(last)
    }

    /// The digest when `last` (at most one batch) follows the whole batches pushed so far.
    fn finish_after(&self, last: &[u8]) -> UnitDigest {
        let mut out = [0u8; UNIT_DIGEST_BYTES];
        if self.stack.is_empty() {
            // At most one batch in all: the crate hashes it as the root.
            let mut hasher = blake3::Hasher::new();
            hasher.update(last);
            hasher.finalize_xof().fill(&mut out);
            return UnitDigest::new(DigestKind::Blake3, out);
        }
        let mut right = if last.len() == BATCH_BYTES {
            batch_cv(last, self.batches)
        } else {
            let mut hasher = blake3::Hasher::new();
            hasher.set_input_offset(self.batches * BATCH_BYTES as u64);
            hasher.update(last);
            hasher.finalize_non_root()
        };
        let (root_left, rest) = self.stack.split_first().expect("not empty");
        for left in rest.iter().rev() {
            right = parent_cv(left, &right);
        }
        let root = merge_subtrees_root(root_left, &right, Mode::Hash);
        out.copy_from_slice(&root.as_bytes()[..UNIT_DIGEST_BYTES]);
        UnitDigest::new(DigestKind::Blake3, out)
    }
}

/// Digests by unit name (`d<x>`, `p<g>.<i>`), as meta's commits take them.
pub fn by_name<'a>(
    digests: impl IntoIterator<Item = (&'a weft_layout::UnitId, &'a UnitDigest)>,
) -> std::collections::BTreeMap<String, UnitDigest> {
    digests.into_iter().map(|(unit, digest)| (unit.short_name(), *digest)).collect()
}

/// Most digests one request to meta names (meta's `MAX_DIGESTS_PER_REQUEST`): more go by
/// pages ahead of the commit.
pub const DIGESTS_PER_REQUEST: usize = 16_384;

/// The BLAKE3 digest of a whole unit's bytes (what units written before keyed digests
/// recorded).
pub fn blake3_digest(bytes: &[u8]) -> UnitDigest {
    let mut digester = Blake3Digester::new();
    let taken = digester.absorb_batches(bytes);
    digester.finish_with(&bytes[taken..])
}

/// [`DigestKey::check_unit`] for a reader that computed the digest of the unit's `len` bytes itself
/// (a local read hashes each segment as it verifies it).
pub fn check_digest(unit: &UnitInfo, found: UnitDigest, len: usize) -> Result<(), NodeFailure> {
    let Some(expected) = unit.digest else { return Ok(()) };
    if found == expected {
        return Ok(());
    }
    Err(NodeFailure {
        kind: FailureKind::Corrupt,
        cause: format!(
            "{MISMATCH}: node {} disk {} returned {len} bytes of {} whose digest is {found}, \
             not the {expected} its writer recorded in meta",
            unit.node_id,
            unit.disk,
            unit.unit.short_name()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blake3_digests_do_not_depend_on_how_the_bytes_are_cut_and_tell_bytes_apart() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = blake3_digest(&bytes);
        for cut in [1usize, 1000, 65_536, 199_999] {
            let mut digester = Blake3Digester::new();
            for piece in bytes.chunks(cut) {
                digester.update(piece);
            }
            assert_eq!(digester.finish(), whole, "pieces of {cut}");
        }
        // Short and long pieces mixed: gathered ones, a long one after a partial batch, a
        // batch completed exactly.
        for cuts in [[4096, 70_000, 1, 61_439, 65_536], [65_535, 1, 3, 100_000, 4096]] {
            let mut digester = Blake3Digester::new();
            let mut at = 0;
            for cut in cuts.into_iter().cycle() {
                let end = (at + cut).min(bytes.len());
                digester.update(&bytes[at..end]);
                at = end;
                if at == bytes.len() {
                    break;
                }
            }
            assert_eq!(digester.finish(), whole, "pieces of {cuts:?}");
        }
        let mut changed = bytes.clone();
        changed[123_456] ^= 1;
        assert_ne!(blake3_digest(&changed), whole);
        assert_ne!(blake3_digest(&bytes[..bytes.len() - 1]), whole);
        // Around and across whole batches, in pieces of every shape: the crate's hash.
        let long: Vec<u8> = (0..(1usize << 20) + 70_000).map(|i| (i * 131 % 253) as u8).collect();
        let batch = crate::blake3_batch::BATCH_BYTES;
        for len in [batch - 1, batch, batch + 1, 2 * batch, 3 * batch + 17, 16 * batch, long.len()]
        {
            let hash = blake3::hash(&long[..len]);
            let expected = &hash.as_bytes()[..16];
            assert_eq!(&blake3_digest(&long[..len]).bytes()[..], expected, "{len} bytes whole");
            let mut digester = Blake3Digester::new();
            let mut at = 0;
            for cut in [4096usize, batch + 5, 1, batch, 3 * batch, 777].into_iter().cycle() {
                let end = (at + cut).min(len);
                digester.update(&long[at..end]);
                at = end;
                if at == len {
                    break;
                }
            }
            assert_eq!(&digester.finish().bytes()[..], expected, "{len} bytes in pieces");
            // Told the length: whole batches that end pieces are hashed where they are.
            for cut in [batch, 2 * batch, 4096, batch + 5] {
                let mut digester = Blake3Digester::for_len(len as u64);
                for piece in long[..len].chunks(cut) {
                    digester.update(piece);
                }
                let left = digester.pending.len();
                assert_eq!(
                    &digester.finish().bytes()[..],
                    expected,
                    "{len} bytes for_len in {cut}"
                );
                if cut % batch == 0 {
                    assert!(
                        left == len - (len - 1) / batch * batch,
                        "{len}: only the last batch waits"
                    );
                }
            }
            // Hashed in place as a buffer grows (a local read's segments), by whole batches
            // and by odd steps.
            for step in [batch, 4096, batch + 5] {
                let mut digester = Blake3Digester::new();
                let (mut taken, mut grown) = (0, 0);
                while grown < len {
                    grown = (grown + step).min(len);
                    taken += digester.absorb_batches(&long[taken..grown]);
                    assert!(grown - taken <= batch, "at most a batch is left to hash");
                }
                let found = digester.finish_with(&long[taken..len]);
                assert_eq!(&found.bytes()[..], expected, "{len} bytes grown by {step}");
            }
        }
        // BLAKE3's published value for the empty input starts af1349b9…
        assert_eq!(blake3_digest(&[]).to_string(), "af1349b9f5f9a1a6a0404dea36dcc949");
    }

    fn key(secret: u8) -> Arc<DigestKey> {
        let text = format!("weft-cluster-secret-v1 {}\n", format!("{secret:02x}").repeat(32));
        DigestKey::of(&weft_auth::ClusterSecret::parse(&text).unwrap())
    }

    #[test]
    fn keyed_digests_do_not_depend_on_how_the_bytes_are_cut_or_the_kernel() {
        let key = key(7);
        let long: Vec<u8> = (0..(1usize << 20) + 70_001).map(|i| (i * 131 % 253) as u8).collect();
        for len in [0, 1, 15, 16, 17, 127, 128, 129, 4096, 65_536 + 3, long.len()] {
            let bytes = &long[..len];
            let whole = key.digest_of(DigestKind::Keyed, bytes);
            assert_eq!(whole.kind(), DigestKind::Keyed);
            for kernel in crate::polyval::Kernel::present() {
                assert_eq!(
                    key.with_kernel(kernel).digest_of(DigestKind::Keyed, bytes),
                    whole,
                    "{len}: {kernel:?}"
                );
            }
            for cuts in [[1usize, 15, 16, 17, 4096], [4095, 1, 3, 100_000, 33]] {
                let mut digester = key.digester_of(DigestKind::Keyed);
                let mut at = 0;
                for cut in cuts.into_iter().cycle() {
                    if at == len {
                        break;
                    }
                    let end = (at + cut).min(len);
                    digester.update(&bytes[at..end]);
                    at = end;
                }
                assert_eq!(digester.finish(), whole, "{len} bytes in pieces of {cuts:?}");
            }
            // Hashed in place as a buffer grows.
            for step in [16, 4096, 17, 65_541] {
                let mut digester = key.digester_of(DigestKind::Keyed);
                let (mut taken, mut grown) = (0, 0);
                while grown < len {
                    grown = (grown + step).min(len);
                    taken += digester.absorb_batches(&bytes[taken..grown]);
                    assert!(grown - taken < 16, "at most a block is left to hash");
                }
                assert_eq!(digester.finish_with(&bytes[taken..]), whole, "{len} grown by {step}");
            }
            // A reader of a keyed digest checks with the key.
            assert_eq!(key.digest_like(&whole, bytes), whole);
            assert_eq!(
                key.digester_like(&whole).finish_with(&[]),
                key.digest_of(DigestKind::Keyed, &[])
            );
        }
    }

    #[test]
    fn keyed_digests_tell_bytes_lengths_and_keys_apart_and_old_digests_still_check() {
        let (key, other) = (key(1), key(2));
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let digest = key.digest_of(DigestKind::Keyed, &bytes);
        assert_ne!(other.digest_of(DigestKind::Keyed, &bytes), digest, "another cluster's key");
        let mut changed = bytes.clone();
        changed[123_456] ^= 1;
        assert_ne!(key.digest_of(DigestKind::Keyed, &changed), digest, "a flipped bit");
        // Zero padding never makes two lengths one: the length is hashed too.
        let mut padded = bytes.clone();
        padded.push(0);
        assert_ne!(key.digest_of(DigestKind::Keyed, &padded), digest, "a trailing zero");
        assert_ne!(
            key.digest_of(DigestKind::Keyed, &[0]),
            key.digest_of(DigestKind::Keyed, &[]),
            "one zero byte and none"
        );
        assert_ne!(
            key.digest_of(DigestKind::Keyed, &[0; 16]),
            key.digest_of(DigestKind::Keyed, &[0; 15])
        );
        // Swapping two blocks changes it (the hash weighs each block by its place).
        let mut swapped = bytes.clone();
        swapped[..16].copy_from_slice(&bytes[16..32]);
        swapped[16..32].copy_from_slice(&bytes[..16]);
        assert_ne!(key.digest_of(DigestKind::Keyed, &swapped), digest, "two blocks swapped");
        // A BLAKE3 digest recorded before keyed ones is checked as BLAKE3.
        let old = blake3_digest(&bytes);
        assert_eq!(old.kind(), DigestKind::Blake3);
        assert_eq!(key.digest_like(&old, &bytes), old);
        let mut digester = key.digester_like(&old);
        digester.update(&bytes);
        assert_eq!(digester.finish(), old);
        assert_ne!(key.digest_like(&old, &changed), old);
    }

    #[test]
    fn writers_record_the_kind_their_key_writes_and_readers_check_either() {
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 13 % 249) as u8).collect();
        let best = key(3);
        // Keyed where the CPU multiplies carry-less (any x86-64 of the last decade).
        let expected = match crate::polyval::Kernel::best() {
            crate::polyval::Kernel::Soft => DigestKind::Blake3,
            _ => DigestKind::Keyed,
        };
        assert_eq!(best.writes(), expected);
        for kind in [DigestKind::Keyed, DigestKind::Blake3] {
            let key = Arc::new(best.writing(kind));
            let digest = key.digest(&bytes);
            assert_eq!(digest.kind(), kind);
            assert_eq!(digest, key.digest_of(kind, &bytes));
            let mut digester = key.writer(bytes.len() as u64);
            digester.update(&bytes);
            assert_eq!(digester.finish(), digest, "{kind:?} digester");
            // A reader whose own writers record the other kind still checks it.
            let other = match kind {
                DigestKind::Keyed => DigestKind::Blake3,
                DigestKind::Blake3 => DigestKind::Keyed,
            };
            assert_eq!(best.writing(other).digest_like(&digest, &bytes), digest);
        }
    }
}
