//! End-to-end unit checksums: the writer's digest of each unit, kept in meta and checked by
//! every reader of a whole unit (docs/meta-api.md, "End-to-end checksums").
//!
//! Invariants:
//! - A [`UnitDigest`] is the first 16 bytes of the BLAKE3 hash of the unit's stored bytes
//!   (computed by weft-client, which is the only crate that hashes); on the wire and in JSON
//!   it is 32 lower-case hex digits. Parsing accepts exactly that and nothing else.
//! - A digest names bytes, not a unit: a unit rebuilt by repair or copied by a transition
//!   keeps its digest, and only parity a transition recomputes gets new ones.

use std::{fmt, str::FromStr};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// Bytes of a unit digest (128 bits of BLAKE3: a forged unit would need a second preimage).
pub const UNIT_DIGEST_BYTES: usize = 16;

/// The digest of one unit's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitDigest(pub [u8; UNIT_DIGEST_BYTES]);

impl fmt::Display for UnitDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for UnitDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnitDigest({self})")
    }
}

impl FromStr for UnitDigest {
    type Err = String;

    fn from_str(text: &str) -> Result<UnitDigest, String> {
        let bytes = text.as_bytes();
        if bytes.len() != 2 * UNIT_DIGEST_BYTES {
            return Err(format!(
                "a unit digest is {} hex digits, not {:?}",
                2 * UNIT_DIGEST_BYTES,
                text
            ));
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; UNIT_DIGEST_BYTES];
        for (at, pair) in bytes.chunks_exact(2).enumerate() {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(high), Some(low)) => out[at] = high << 4 | low,
                _ => return Err(format!("a unit digest is lower-case hex, not {text:?}")),
            }
        }
        Ok(UnitDigest(out))
    }
}

impl Serialize for UnitDigest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for UnitDigest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<UnitDigest, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_print_and_parse_as_32_lower_case_hex_digits_only() {
        let digest = UnitDigest(*b"\x00\x01\xfe\xffweft-digest!");
        let text = digest.to_string();
        assert_eq!(text.len(), 32);
        assert!(text.starts_with("0001feff"));
        assert_eq!(text.parse::<UnitDigest>(), Ok(digest));
        let json = serde_json::to_string(&digest).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<UnitDigest>(&json).unwrap(), digest);
        for bad in ["", "00", &text.to_uppercase(), &format!("{text}0"), &text.replace('0', "g")] {
            assert!(bad.parse::<UnitDigest>().is_err(), "{bad:?} accepted");
        }
        assert!(serde_json::from_str::<UnitDigest>("17").is_err());
    }
}
