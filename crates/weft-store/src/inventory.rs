//! Inventory digests: a compact summary of the units a disk holds, which a node sends to meta
//! so that meta can find the units it references that the disk no longer has (a disk emptied
//! or replaced while its node was down, files deleted by hand).
//!
//! The digest is a Bloom filter over the units' keys: 16 bits and 11 hash probes per unit, so
//! a disk of a million units is a 2 MB digest whatever the length of its keys.
//!
//! Invariants:
//! - No false negatives: every key inserted is reported as possibly present. A key reported
//!   absent is certainly not in the inventory, so meta never queues a unit the disk holds.
//! - False positives are rare (about 1 in 2,000 at the sizing of [`Inventory::for_units`]) and
//!   do not repeat: each digest has its own seed, so a unit missed once (judged present but
//!   gone) is found by the next digest with the same odds as any other.
//! - The bytes are the wire format (docs/node-api.md, "Inventory"): `bits` (a multiple of 64)
//!   little-endian `u64` words, bit `i` of the filter is bit `i % 64` of word `i / 64`; a key
//!   is hashed from its file name bytes ([`UnitKey::file_name`], a stable on-disk format) with
//!   64-bit FNV-1a seeded by the digest's seed and finished with the SplitMix64 mixer; probe
//!   `j` of `hashes` is `(h1 + j * h2) mod bits`, with `h2` from the same hash under the seed
//!   rotated by 32 bits, made odd. Both ends compute it with this module, so they agree.

use crate::UnitKey;

/// Filter bits per unit in [`Inventory::for_units`].
pub const BITS_PER_UNIT: u64 = 16;

/// Hash probes per key in [`Inventory::for_units`] (optimal for 16 bits per unit).
pub const HASHES: u32 = 11;

/// Largest digest accepted by [`Inventory::from_bytes`]: 64 MiB, enough for 32 million units
/// on one disk at 16 bits each.
pub const MAX_INVENTORY_BYTES: usize = 64 << 20;

/// A Bloom filter over unit keys (see the module invariants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inventory {
    seed: u64,
    hashes: u32,
    words: Vec<u64>,
    units: u64,
}

/// Why digest bytes or parameters were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryError(pub String);

impl std::fmt::Display for InventoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InventoryError {}

impl Inventory {
    /// An empty digest sized for `units` keys, with seed `seed`.
    pub fn for_units(units: u64, seed: u64) -> Inventory {
        let bits = units.saturating_mul(BITS_PER_UNIT).max(512);
        let words = bits.div_ceil(64).min((MAX_INVENTORY_BYTES / 8) as u64) as usize;
        Inventory { seed, hashes: HASHES, words: vec![0; words], units: 0 }
    }

    /// A digest received as bytes, with the parameters sent beside them.
    pub fn from_bytes(
        bytes: &[u8],
        seed: u64,
        hashes: u32,
        units: u64,
    ) -> Result<Inventory, InventoryError> {
        if bytes.is_empty() || !bytes.len().is_multiple_of(8) {
            return Err(InventoryError(format!(
                "a digest is a non-empty multiple of 8 bytes, not {} bytes",
                bytes.len()
            )));
        }
        if bytes.len() > MAX_INVENTORY_BYTES {
            return Err(InventoryError(format!(
                "a digest is at most {MAX_INVENTORY_BYTES} bytes, not {}",
                bytes.len()
            )));
        }
        if !(1..=32).contains(&hashes) {
            return Err(InventoryError(format!("hashes must be 1 to 32, not {hashes}")));
        }
        let words = bytes
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        Ok(Inventory { seed, hashes, words, units })
    }

    /// The digest's bytes (see the module invariants).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|word| word.to_le_bytes()).collect()
    }

    /// The seed of the hashes.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Probes per key.
    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// Keys inserted (as the sender counted them).
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Adds `key`.
    pub fn insert(&mut self, key: &UnitKey) {
        let bits = self.bits();
        for bit in probes(self.seed, self.hashes, bits, key) {
            self.words[(bit / 64) as usize] |= 1 << (bit % 64);
        }
        self.units += 1;
    }

    /// False when `key` was certainly not inserted; true when it probably was.
    pub fn may_contain(&self, key: &UnitKey) -> bool {
        let bits = self.bits();
        probes(self.seed, self.hashes, bits, key)
            .all(|bit| self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }

    fn bits(&self) -> u64 {
        self.words.len() as u64 * 64
    }
}

/// The filter bits `key` sets.
fn probes(seed: u64, hashes: u32, bits: u64, key: &UnitKey) -> impl Iterator<Item = u64> {
    let name = key.file_name();
    let h1 = hash(seed, name.as_bytes());
    let h2 = hash(seed.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15, name.as_bytes()) | 1;
    (0..u64::from(hashes)).map(move |j| h1.wrapping_add(j.wrapping_mul(h2)) % bits)
}

/// Seeded FNV-1a, finished with SplitMix64 so that every output bit depends on every input bit.
fn hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for &byte in bytes {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(range: std::ops::Range<u32>) -> impl Iterator<Item = UnitKey> {
        range.map(|i| {
            if i % 3 == 0 {
                UnitKey::parity(u128::from(i / 7), i, (i % 5) as u16, u64::from(i % 2))
            } else {
                UnitKey::data(u128::from(i / 7), i, 0)
            }
        })
    }

    #[test]
    fn inserted_keys_are_always_found_and_others_rarely() {
        let mut inventory = Inventory::for_units(20_000, 42);
        for key in keys(0..20_000) {
            inventory.insert(&key);
        }
        assert!(keys(0..20_000).all(|key| inventory.may_contain(&key)));
        let false_positives =
            keys(20_000..120_000).filter(|key| inventory.may_contain(key)).count();
        // Expected about 100000 / 2000 = 50; a broken hash gives thousands.
        assert!(false_positives < 300, "{false_positives} false positives in 100000");
        assert_eq!(inventory.units(), 20_000);
    }

    #[test]
    fn bytes_round_trip_and_seeds_differ() {
        let mut a = Inventory::for_units(100, 1);
        let mut b = Inventory::for_units(100, 2);
        for key in keys(0..100) {
            a.insert(&key);
            b.insert(&key);
        }
        assert_ne!(a.to_bytes(), b.to_bytes(), "the seed must change the bits");
        let back = Inventory::from_bytes(&a.to_bytes(), a.seed(), a.hashes(), a.units()).unwrap();
        assert_eq!(back, a);
        assert!(keys(0..100).all(|key| back.may_contain(&key)));
    }

    #[test]
    fn an_empty_inventory_holds_nothing() {
        let empty = Inventory::for_units(0, 9);
        assert!(keys(0..1000).all(|key| !empty.may_contain(&key)));
        assert_eq!(empty.to_bytes().len(), 64);
    }

    #[test]
    fn bad_bytes_and_parameters_are_refused() {
        assert!(Inventory::from_bytes(&[], 0, 11, 0).is_err());
        assert!(Inventory::from_bytes(&[0; 7], 0, 11, 0).is_err());
        assert!(Inventory::from_bytes(&[0; 8], 0, 0, 0).is_err());
        assert!(Inventory::from_bytes(&[0; 8], 0, 33, 0).is_err());
        assert!(Inventory::from_bytes(&[0; 8], 0, 11, 0).is_ok());
    }
}
