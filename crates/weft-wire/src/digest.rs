//! End-to-end unit checksums: the writer's digest of each unit, kept in meta and checked by
//! every reader of a whole unit (docs/meta-api.md, "End-to-end checksums").
//!
//! Invariants:
//! - A [`UnitDigest`] is 16 bytes of a [`DigestKind`] computed over the unit's stored bytes
//!   by weft-client, the only crate that hashes:
//!   - [`DigestKind::Keyed`] (what every writer makes now): a MAC under a key derived from the
//!     cluster secret, which storage nodes never hold, so a node cannot forge a unit;
//!   - [`DigestKind::Blake3`] (digests written before keyed ones existed, still read and
//!     checked): the first 16 bytes of BLAKE3, a hash no node can find a second preimage of.
//! - On the wire and in JSON a BLAKE3 digest is 32 lower-case hex digits and a keyed one `k`
//!   followed by 32 lower-case hex digits. Parsing accepts exactly those and nothing else, so
//!   a digest always says which kind it is and a reader checks it with that kind.
//! - A digest names bytes, not a unit: a unit rebuilt by repair or copied by a transition
//!   keeps its digest (and its kind), and only parity a transition recomputes gets new ones.

use std::{fmt, str::FromStr};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// Bytes of a unit digest (128 bits: a forged unit needs a second preimage of BLAKE3, or a
/// MAC under a key its forger does not hold).
pub const UNIT_DIGEST_BYTES: usize = 16;

/// How a [`UnitDigest`] was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DigestKind {
    /// The first 16 bytes of BLAKE3 (unkeyed): digests of units written before keyed ones.
    Blake3,
    /// The cluster's keyed unit MAC (weft-client `digest`), written as `k<32 hex digits>`.
    Keyed,
}

/// The digest of one unit's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitDigest {
    kind: DigestKind,
    bytes: [u8; UNIT_DIGEST_BYTES],
}

impl UnitDigest {
    pub const fn new(kind: DigestKind, bytes: [u8; UNIT_DIGEST_BYTES]) -> UnitDigest {
        UnitDigest { kind, bytes }
    }

    pub const fn kind(&self) -> DigestKind {
        self.kind
    }

    pub const fn bytes(&self) -> &[u8; UNIT_DIGEST_BYTES] {
        &self.bytes
    }

    /// Characters of a digest's text form: 32, or 33 for a keyed one.
    pub const fn text_len(&self) -> usize {
        match self.kind {
            DigestKind::Blake3 => 2 * UNIT_DIGEST_BYTES,
            DigestKind::Keyed => 2 * UNIT_DIGEST_BYTES + 1,
        }
    }

    /// Splits the first digest off a concatenation of digests' text forms (as meta's records
    /// keep them): the digest and the rest.
    pub fn split_first(text: &str) -> Result<(UnitDigest, &str), String> {
        let width = 2 * UNIT_DIGEST_BYTES + usize::from(text.starts_with(KEYED_PREFIX));
        if text.len() < width || !text.is_char_boundary(width) {
            return Err(format!("{} characters left where a unit digest is due", text.len()));
        }
        let (first, rest) = text.split_at(width);
        Ok((first.parse()?, rest))
    }
}

/// What starts the text form of a keyed digest.
pub const KEYED_PREFIX: char = 'k';

impl fmt::Display for UnitDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == DigestKind::Keyed {
            write!(f, "{KEYED_PREFIX}")?;
        }
        for byte in self.bytes {
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
        let (kind, hex) = match text.strip_prefix(KEYED_PREFIX) {
            Some(hex) => (DigestKind::Keyed, hex),
            None => (DigestKind::Blake3, text),
        };
        let bytes = hex.as_bytes();
        if bytes.len() != 2 * UNIT_DIGEST_BYTES {
            return Err(format!(
                "a unit digest is {} hex digits (after a `{KEYED_PREFIX}` when keyed), not {:?}",
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
        Ok(UnitDigest::new(kind, out))
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
    fn digests_print_and_parse_as_their_kind_and_32_lower_case_hex_digits_only() {
        for kind in [DigestKind::Blake3, DigestKind::Keyed] {
            let digest = UnitDigest::new(kind, *b"\x00\x01\xfe\xffweft-digest!");
            let text = digest.to_string();
            assert_eq!(text.len(), digest.text_len());
            let hex = match kind {
                DigestKind::Blake3 => text.as_str(),
                DigestKind::Keyed => text.strip_prefix('k').expect("keyed digests start with k"),
            };
            assert_eq!(hex.len(), 32);
            assert!(hex.starts_with("0001feff"));
            assert_eq!(text.parse::<UnitDigest>(), Ok(digest));
            let json = serde_json::to_string(&digest).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<UnitDigest>(&json).unwrap(), digest);
            let bad = [
                String::new(),
                "00".into(),
                "k".into(),
                text.to_uppercase(),
                format!("{text}0"),
                text.replace('0', "g"),
                format!("kk{hex}"),
                format!("K{hex}"),
                format!("{hex}k"),
            ];
            for bad in bad {
                assert!(bad.parse::<UnitDigest>().is_err(), "{bad:?} accepted");
            }
        }
        // The same bytes under two kinds are two digests.
        let bytes = [7u8; UNIT_DIGEST_BYTES];
        assert_ne!(
            UnitDigest::new(DigestKind::Blake3, bytes),
            UnitDigest::new(DigestKind::Keyed, bytes)
        );
        assert!(serde_json::from_str::<UnitDigest>("17").is_err());
    }

    #[test]
    fn concatenated_digests_of_both_kinds_split_back() {
        let digests = [
            UnitDigest::new(DigestKind::Keyed, [1; UNIT_DIGEST_BYTES]),
            UnitDigest::new(DigestKind::Blake3, [0xab; UNIT_DIGEST_BYTES]),
            UnitDigest::new(DigestKind::Keyed, [0; UNIT_DIGEST_BYTES]),
        ];
        let joined: String = digests.iter().map(|d| d.to_string()).collect();
        let mut rest = joined.as_str();
        for want in digests {
            let (found, after) = UnitDigest::split_first(rest).unwrap();
            assert_eq!(found, want);
            rest = after;
        }
        assert!(rest.is_empty());
        for bad in [&joined[..joined.len() - 1], "k0123", "é0000000000000000000000000000000"] {
            let mut rest = bad;
            let failed = loop {
                match UnitDigest::split_first(rest) {
                    Ok((_, "")) => break false,
                    Ok((_, after)) => rest = after,
                    Err(_) => break true,
                }
            };
            assert!(failed, "{bad:?} split cleanly");
        }
    }
}
