//! End-to-end unit digests (weft-wire [`UnitDigest`]): computed here by every writer of a
//! unit (puts, transitions' new parity) and checked here by every reader of a whole unit
//! (reads, degraded reads, repair's helpers and its rebuilt unit).
//!
//! Invariants:
//! - A digest is the first 16 bytes of BLAKE3 over the unit's stored bytes, whatever
//!   pieces they arrive in ([`Digester`] fed piece by piece equals [`unit_digest`]). A
//!   reader that holds the bytes in one buffer as they grow hashes them in place
//!   ([`Digester::absorb_batches`], [`Digester::finish_with`]): no copy. A writer that
//!   knows the unit's length ([`Digester::for_len`]) hashes every batch but the unit's last
//!   straight from its pieces: its digest is the same when fed exactly that length.
//! - A mismatch is a [`FailureKind::Corrupt`] failure whose cause starts with
//!   [`MISMATCH`], so callers rebuild the unit from the others and report it, as for rot the
//!   node itself found.

use blake3::hazmat::{merge_subtrees_root, ChainingValue, HasherExt, Mode};
use weft_wire::{digest::UNIT_DIGEST_BYTES, UnitDigest};

use crate::blake3_batch::{batch_cv, parent_cv, BATCH_BYTES};

use crate::node::{FailureKind, NodeFailure};
use crate::UnitInfo;

/// How a failed end-to-end check starts its cause (reports and logs carry it).
pub const MISMATCH: &str = "end-to-end checksum mismatch";

/// A digest computed over pieces of a unit, in order.
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
pub struct Digester {
    /// Bytes not hashed yet: at most one batch, the last one while no more bytes came.
    pending: Vec<u8>,
    /// Chaining values of complete subtrees of whole batches, left to right.
    stack: Vec<ChainingValue>,
    /// Whole batches hashed so far.
    batches: u64,
    /// The input's length, when known up front.
    len: Option<u64>,
}

impl Digester {
    pub fn new() -> Digester {
        Digester::default()
    }

    /// A digester of an input of exactly `len` bytes (a unit being written): a batch that
    /// ends a piece is hashed straight from it when the input goes on past it. Fed more or
    /// fewer bytes than `len`, its digest is not the input's (a writer that sent other than
    /// `len` bytes has failed anyway); debug builds check it.
    pub fn for_len(len: u64) -> Digester {
        Digester { len: Some(len), ..Digester::default() }
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
            return UnitDigest(out);
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
        UnitDigest(out)
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

/// The digest of a whole unit's bytes.
pub fn unit_digest(bytes: &[u8]) -> UnitDigest {
    let mut digester = Digester::new();
    let taken = digester.absorb_batches(bytes);
    digester.finish_with(&bytes[taken..])
}

/// Checks the whole stored bytes of `unit` against the digest meta holds (nothing to check
/// when the object has none).
pub fn check_unit(unit: &UnitInfo, bytes: &[u8]) -> Result<(), NodeFailure> {
    match unit.digest {
        Some(_) => check_digest(unit, unit_digest(bytes), bytes.len()),
        None => Ok(()),
    }
}

/// [`check_unit`] for a reader that computed the digest of the unit's `len` bytes itself
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
    fn digests_do_not_depend_on_how_the_bytes_are_cut_and_tell_bytes_apart() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = unit_digest(&bytes);
        for cut in [1usize, 1000, 65_536, 199_999] {
            let mut digester = Digester::new();
            for piece in bytes.chunks(cut) {
                digester.update(piece);
            }
            assert_eq!(digester.finish(), whole, "pieces of {cut}");
        }
        // Short and long pieces mixed: gathered ones, a long one after a partial batch, a
        // batch completed exactly.
        for cuts in [[4096, 70_000, 1, 61_439, 65_536], [65_535, 1, 3, 100_000, 4096]] {
            let mut digester = Digester::new();
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
        assert_ne!(unit_digest(&changed), whole);
        assert_ne!(unit_digest(&bytes[..bytes.len() - 1]), whole);
        // Around and across whole batches, in pieces of every shape: the crate's hash.
        let long: Vec<u8> = (0..(1usize << 20) + 70_000).map(|i| (i * 131 % 253) as u8).collect();
        let batch = crate::blake3_batch::BATCH_BYTES;
        for len in [batch - 1, batch, batch + 1, 2 * batch, 3 * batch + 17, 16 * batch, long.len()]
        {
            let hash = blake3::hash(&long[..len]);
            let expected = &hash.as_bytes()[..16];
            assert_eq!(&unit_digest(&long[..len]).0[..], expected, "{len} bytes whole");
            let mut digester = Digester::new();
            let mut at = 0;
            for cut in [4096usize, batch + 5, 1, batch, 3 * batch, 777].into_iter().cycle() {
                let end = (at + cut).min(len);
                digester.update(&long[at..end]);
                at = end;
                if at == len {
                    break;
                }
            }
            assert_eq!(&digester.finish().0[..], expected, "{len} bytes in pieces");
            // Told the length: whole batches that end pieces are hashed where they are.
            for cut in [batch, 2 * batch, 4096, batch + 5] {
                let mut digester = Digester::for_len(len as u64);
                for piece in long[..len].chunks(cut) {
                    digester.update(piece);
                }
                let left = digester.pending.len();
                assert_eq!(&digester.finish().0[..], expected, "{len} bytes for_len in {cut}");
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
                let mut digester = Digester::new();
                let (mut taken, mut grown) = (0, 0);
                while grown < len {
                    grown = (grown + step).min(len);
                    taken += digester.absorb_batches(&long[taken..grown]);
                    assert!(grown - taken <= batch, "at most a batch is left to hash");
                }
                let found = digester.finish_with(&long[taken..len]);
                assert_eq!(&found.0[..], expected, "{len} bytes grown by {step}");
            }
        }
        // BLAKE3's published value for the empty input starts af1349b9…
        assert_eq!(unit_digest(&[]).to_string(), "af1349b9f5f9a1a6a0404dea36dcc949");
    }
}
