//! End-to-end unit digests (weft-wire [`UnitDigest`]): computed here by every writer of a
//! unit (puts, transitions' new parity) and checked here by every reader of a whole unit
//! (reads, degraded reads, repair's helpers and its rebuilt unit).
//!
//! Invariants:
//! - A digest is the first 16 bytes of BLAKE3 over the unit's stored bytes, whatever
//!   pieces they arrive in ([`Digester`] fed piece by piece equals [`unit_digest`]).
//! - A mismatch is a [`FailureKind::Corrupt`] failure whose cause starts with
//!   [`MISMATCH`], so callers rebuild the unit from the others and report it, as for rot the
//!   node itself found.

use weft_wire::{digest::UNIT_DIGEST_BYTES, UnitDigest};

use crate::node::{FailureKind, NodeFailure};
use crate::UnitInfo;

/// How a failed end-to-end check starts its cause (reports and logs carry it).
pub const MISMATCH: &str = "end-to-end checksum mismatch";

/// Pieces shorter than this are gathered before they are hashed: BLAKE3 hashes as many
/// 1 KiB chunks at once as its SIMD path has lanes (8 with AVX2, 16 with AVX-512) only when
/// one update holds that many, and units arrive in cells of as little as 4 KiB (small
/// objects are fitted with small cells), which it hashed four chunks at a time.
const DIGEST_BATCH_BYTES: usize = 64 << 10;

/// A digest computed over pieces of a unit, in order.
#[derive(Debug, Default, Clone)]
pub struct Digester {
    hasher: blake3::Hasher,
    /// Bytes of short pieces not hashed yet (fewer than [`DIGEST_BATCH_BYTES`]).
    pending: Vec<u8>,
}

impl Digester {
    pub fn new() -> Digester {
        Digester::default()
    }

    pub fn update(&mut self, mut piece: &[u8]) {
        if !self.pending.is_empty() {
            let taken = piece.len().min(DIGEST_BATCH_BYTES - self.pending.len());
            self.pending.extend_from_slice(&piece[..taken]);
            piece = &piece[taken..];
            if self.pending.len() < DIGEST_BATCH_BYTES {
                return;
            }
            self.hasher.update(&self.pending);
            self.pending.clear();
        }
        if piece.len() >= DIGEST_BATCH_BYTES {
            self.hasher.update(piece);
        } else if !piece.is_empty() {
            if self.pending.capacity() == 0 {
                self.pending.reserve_exact(DIGEST_BATCH_BYTES);
            }
            self.pending.extend_from_slice(piece);
        }
    }

    pub fn finish(&self) -> UnitDigest {
        let mut hasher = self.hasher.clone();
        hasher.update(&self.pending);
        let mut out = [0u8; UNIT_DIGEST_BYTES];
        hasher.finalize_xof().fill(&mut out);
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
    digester.update(bytes);
    digester.finish()
}

/// Checks the whole stored bytes of `unit` against the digest meta holds (nothing to check
/// when the object has none).
pub fn check_unit(unit: &UnitInfo, bytes: &[u8]) -> Result<(), NodeFailure> {
    let Some(expected) = unit.digest else { return Ok(()) };
    let found = unit_digest(bytes);
    if found == expected {
        return Ok(());
    }
    Err(NodeFailure {
        kind: FailureKind::Corrupt,
        cause: format!(
            "{MISMATCH}: node {} disk {} returned {} bytes of {} whose digest is {found}, \
             not the {expected} its writer recorded in meta",
            unit.node_id,
            unit.disk,
            bytes.len(),
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
        // BLAKE3's published value for the empty input starts af1349b9…
        assert_eq!(unit_digest(&[]).to_string(), "af1349b9f5f9a1a6a0404dea36dcc949");
    }
}
