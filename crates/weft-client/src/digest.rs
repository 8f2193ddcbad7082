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

/// A digest computed over pieces of a unit, in order.
#[derive(Debug, Default, Clone)]
pub struct Digester(blake3::Hasher);

impl Digester {
    pub fn new() -> Digester {
        Digester(blake3::Hasher::new())
    }

    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    pub fn finish(&self) -> UnitDigest {
        let mut out = [0u8; UNIT_DIGEST_BYTES];
        self.0.finalize_xof().fill(&mut out);
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
        let mut changed = bytes.clone();
        changed[123_456] ^= 1;
        assert_ne!(unit_digest(&changed), whole);
        assert_ne!(unit_digest(&bytes[..bytes.len() - 1]), whole);
        // BLAKE3's published value for the empty input starts af1349b9…
        assert_eq!(unit_digest(&[]).to_string(), "af1349b9f5f9a1a6a0404dea36dcc949");
    }
}
