//! Unit keys: which unit a file holds, and the file name that says so.
//!
//! Invariants:
//! - `UnitKey::from_file_name(&key.file_name()) == Some(key)` for every key. The encoding is part
//!   of the on-disk format (docs/store-format.md): fixed-width lower-case hex, so it never changes
//!   with the platform or the Rust version.
//! - Two keys that differ only in generation name different files: a rewritten unit (repair,
//!   transition) never overwrites or collides with the file of an older generation.
//! - The fan-out directory depends on the object and unit index but not on the generation, so
//!   every generation of one unit sits in the same directory.

use std::fmt;

/// Which unit of an object: a data block or a parity unit of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitIndex {
    /// Data block `block` of the object.
    Data { block: u32 },
    /// Parity unit `index` of group `group` of the object.
    Parity { group: u32, index: u16 },
}

/// Identifies one stored unit: object id, unit index within the object, and generation.
///
/// The object id is an opaque 16-byte id (a `u64` id widens losslessly). Units are immutable: to
/// replace a unit, store a new generation and delete the old one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitKey {
    object: u128,
    index: UnitIndex,
    generation: u64,
}

/// Length of a file name made by [`UnitKey::file_name`] for a data unit.
const DATA_NAME_BYTES: usize = 32 + 1 + 9 + 1 + 16 + UNIT_SUFFIX.len();
/// Length of a file name made by [`UnitKey::file_name`] for a parity unit.
const PARITY_NAME_BYTES: usize = 32 + 1 + 13 + 1 + 16 + UNIT_SUFFIX.len();
/// Every unit file name ends with this.
pub const UNIT_SUFFIX: &str = ".unit";

impl UnitKey {
    /// The key of data block `block` of `object`, generation `generation`.
    pub fn data(object: u128, block: u32, generation: u64) -> UnitKey {
        UnitKey { object, index: UnitIndex::Data { block }, generation }
    }

    /// The key of parity unit `index` of group `group` of `object`, generation `generation`.
    pub fn parity(object: u128, group: u32, index: u16, generation: u64) -> UnitKey {
        UnitKey { object, index: UnitIndex::Parity { group, index }, generation }
    }

    /// The object id.
    pub fn object(&self) -> u128 {
        self.object
    }

    /// Which unit of the object.
    pub fn index(&self) -> UnitIndex {
        self.index
    }

    /// The generation: a rewritten unit gets a higher one.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The same unit with another generation.
    pub fn with_generation(&self, generation: u64) -> UnitKey {
        UnitKey { generation, ..*self }
    }

    /// `<object>-<index>`: the name without generation and suffix.
    fn stem(&self) -> String {
        match self.index {
            UnitIndex::Data { block } => format!("{:032x}-d{block:08x}", self.object),
            UnitIndex::Parity { group, index } => {
                format!("{:032x}-p{group:08x}{index:04x}", self.object)
            }
        }
    }

    /// The file name of this unit: `<object:32 hex>-d<block:8 hex>-<generation:16 hex>.unit` or
    /// `<object:32 hex>-p<group:8 hex><index:4 hex>-<generation:16 hex>.unit`.
    pub fn file_name(&self) -> String {
        format!("{}-{:016x}{UNIT_SUFFIX}", self.stem(), self.generation)
    }

    /// The fan-out directory under `units/`: two hex digits, the low byte of crc32c of the
    /// file name's `<object>-<index>` part. Hashing (rather than taking a prefix of the object
    /// id) keeps directories even when object ids are small sequential numbers.
    pub fn fanout(&self) -> String {
        format!("{:02x}", crc32c::crc32c(self.stem().as_bytes()) & 0xff)
    }

    /// Parses a name made by [`UnitKey::file_name`]; `None` for anything else.
    pub fn from_file_name(name: &str) -> Option<UnitKey> {
        let bytes = name.as_bytes();
        if !(bytes.len() == DATA_NAME_BYTES || bytes.len() == PARITY_NAME_BYTES)
            || !name.ends_with(UNIT_SUFFIX)
        {
            return None;
        }
        let body = &name[..name.len() - UNIT_SUFFIX.len()];
        let mut parts = body.split('-');
        let (object, index, generation) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || object.len() != 32 || generation.len() != 16 {
            return None;
        }
        let object = parse_hex(object)?;
        let generation = parse_hex(generation)? as u64;
        let index = match (index.as_bytes().first()?, index.len()) {
            (b'd', 9) => UnitIndex::Data { block: parse_hex(&index[1..])? as u32 },
            (b'p', 13) => UnitIndex::Parity {
                group: parse_hex(&index[1..9])? as u32,
                index: parse_hex(&index[9..])? as u16,
            },
            _ => return None,
        };
        Some(UnitKey { object, index, generation })
    }
}

/// Strict lower-case hex (no sign, no upper case) so that each key has exactly one name.
fn parse_hex(text: &str) -> Option<u128> {
    if text.is_empty()
        || text.len() > 32
        || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    u128::from_str_radix(text, 16).ok()
}

impl fmt::Display for UnitKey {
    /// The file name without its suffix, so a log line can be matched to a file with grep.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{:016x}", self.stem(), self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_are_strict() {
        let keys = [
            UnitKey::data(0, 0, 0),
            UnitKey::data(u128::MAX, u32::MAX, u64::MAX),
            UnitKey::data(7, 5, 2),
            UnitKey::parity(0x0123_4567_89ab_cdef, 3, 1, 9),
            UnitKey::parity(u128::MAX, u32::MAX, u16::MAX, u64::MAX),
        ];
        for key in keys {
            let name = key.file_name();
            assert_eq!(UnitKey::from_file_name(&name), Some(key), "{name}");
            assert_eq!(format!("{key}{UNIT_SUFFIX}"), name);
            assert_eq!(key.fanout().len(), 2);
            assert_eq!(key.fanout(), key.with_generation(1234).fanout());
            assert_eq!(UnitKey::from_file_name(&name.to_uppercase()), None);
        }
        assert_eq!(
            UnitKey::data(1, 2, 3).file_name(),
            "00000000000000000000000000000001-d00000002-0000000000000003.unit"
        );
        assert_eq!(
            UnitKey::parity(1, 2, 3, 4).file_name(),
            "00000000000000000000000000000001-p000000020003-0000000000000004.unit"
        );
        for bad in
            ["", "x.unit", "00000000000000000000000000000001-d0000000+-0000000000000003.unit"]
        {
            assert_eq!(UnitKey::from_file_name(bad), None, "{bad}");
        }
        assert_ne!(UnitKey::data(1, 2, 3).file_name(), UnitKey::data(1, 2, 4).file_name());
    }
}
