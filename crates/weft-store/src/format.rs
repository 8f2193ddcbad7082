//! The unit file format, version 1 (byte-level description: docs/store-format.md).
//!
//! Invariants:
//! - A header is `FIXED_HEADER_BYTES + 4·segments + 4` bytes; `header_bytes(len)` is the only
//!   place that says so, and the decoder rejects a header whose length field disagrees.
//! - Every field is checked before anything is allocated from it: a corrupt length can never
//!   make a reader allocate gigabytes.
//! - Encoding then decoding a header gives it back; decoding accepts only what encoding makes
//!   (reserved bytes zero, segment size 64 KiB, crc32c), so format changes need a new version.

use weft_wire::key::{UnitIndex, UnitKey};

/// The first eight bytes of every unit file.
pub const MAGIC: [u8; 8] = *b"WEFTUNIT";
/// The format version this crate writes and the only one it reads.
pub const FORMAT_VERSION: u16 = 1;
/// Bytes of data covered by one checksum.
pub const SEGMENT_BYTES: u32 = 65_536;
/// The largest unit a disk stores: 1 GiB keeps the checksum table (read on every range read)
/// at most 64 KiB. Units are 8 MiB blocks or smaller chunks in practice.
pub const MAX_UNIT_BYTES: u64 = 1 << 30;
/// Bytes of the header before the checksum table.
pub const FIXED_HEADER_BYTES: usize = 72;

/// How segments are checksummed. Stored in the header so a later version can add kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChecksumKind {
    /// CRC-32C (Castagnoli), as computed by the `crc32c` crate, stored little-endian.
    Crc32c,
}

impl ChecksumKind {
    fn code(self) -> u8 {
        match self {
            ChecksumKind::Crc32c => 1,
        }
    }
}

/// Number of segments of a unit of `len_bytes`: the last one may be short; an empty unit has none.
pub fn segment_count(len_bytes: u64) -> u64 {
    len_bytes.div_ceil(u64::from(SEGMENT_BYTES))
}

/// Total header bytes (fixed part, checksum table, header checksum) for a unit of `len_bytes`.
pub fn header_bytes(len_bytes: u64) -> u64 {
    FIXED_HEADER_BYTES as u64 + 4 * segment_count(len_bytes) + 4
}

/// A decoded header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub key: UnitKey,
    pub len_bytes: u64,
    pub checksums: Vec<u32>,
}

/// What the fixed part of a header says; enough to know how much more to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed {
    pub key: UnitKey,
    pub len_bytes: u64,
    pub header_bytes: u64,
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// The header bytes, ready to be written at offset 0 of the unit file.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.len_bytes <= MAX_UNIT_BYTES, "unit of {} bytes is too large", self.len_bytes);
        assert_eq!(self.checksums.len() as u64, segment_count(self.len_bytes));
        let total = header_bytes(self.len_bytes) as usize;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.push(ChecksumKind::Crc32c.code());
        let (kind, block_or_group, parity_index) = match self.key.index() {
            UnitIndex::Data { block } => (0u8, block, 0u16),
            UnitIndex::Parity { group, index } => (1u8, group, index),
        };
        out.push(kind);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&self.len_bytes.to_le_bytes());
        out.extend_from_slice(&SEGMENT_BYTES.to_le_bytes());
        out.extend_from_slice(&(self.checksums.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.key.object().to_le_bytes());
        out.extend_from_slice(&block_or_group.to_le_bytes());
        out.extend_from_slice(&parity_index.to_le_bytes());
        out.extend_from_slice(&[0u8; 2]);
        out.extend_from_slice(&self.key.generation().to_le_bytes());
        out.extend_from_slice(&[0u8; 8]);
        assert_eq!(out.len(), FIXED_HEADER_BYTES);
        for checksum in &self.checksums {
            out.extend_from_slice(&checksum.to_le_bytes());
        }
        let header_checksum = crc32c::crc32c(&out);
        out.extend_from_slice(&header_checksum.to_le_bytes());
        assert_eq!(out.len(), total);
        out
    }

    /// Decodes a whole header (`fixed.header_bytes` bytes); the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        let fixed = decode_fixed(bytes.get(..FIXED_HEADER_BYTES).ok_or("header is truncated")?)?;
        if bytes.len() as u64 != fixed.header_bytes {
            return Err(format!(
                "header is {} bytes, expected {}",
                bytes.len(),
                fixed.header_bytes
            ));
        }
        let body = bytes.len() - 4;
        let stored = u32_at(bytes, body);
        let computed = crc32c::crc32c(&bytes[..body]);
        if stored != computed {
            return Err(format!(
                "header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ));
        }
        let checksums =
            bytes[FIXED_HEADER_BYTES..body].chunks_exact(4).map(|c| u32_at(c, 0)).collect();
        Ok(Header { key: fixed.key, len_bytes: fixed.len_bytes, checksums })
    }
}

/// Decodes and checks the fixed part (the first [`FIXED_HEADER_BYTES`] bytes). The header
/// checksum is not checked here: it covers the table too.
pub fn decode_fixed(bytes: &[u8]) -> Result<Fixed, String> {
    assert_eq!(bytes.len(), FIXED_HEADER_BYTES);
    if bytes[0..8] != MAGIC {
        return Err(format!(
            "bad magic {:?}, expected \"WEFTUNIT\"",
            String::from_utf8_lossy(&bytes[0..8])
        ));
    }
    let version = u16_at(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(format!("format version {version}, this build reads only {FORMAT_VERSION}"));
    }
    if bytes[10] != ChecksumKind::Crc32c.code() {
        return Err(format!("unknown checksum kind {}", bytes[10]));
    }
    let len_bytes = u64_at(bytes, 16);
    if len_bytes > MAX_UNIT_BYTES {
        return Err(format!("unit length {len_bytes} exceeds the maximum {MAX_UNIT_BYTES}"));
    }
    let stated_header_bytes = u64::from(u32_at(bytes, 12));
    if stated_header_bytes != header_bytes(len_bytes) {
        return Err(format!(
            "header length {stated_header_bytes} does not match unit length {len_bytes}"
        ));
    }
    let segment_size = u32_at(bytes, 24);
    if segment_size != SEGMENT_BYTES {
        return Err(format!("segment size {segment_size}, expected {SEGMENT_BYTES}"));
    }
    let segments = u64::from(u32_at(bytes, 28));
    if segments != segment_count(len_bytes) {
        return Err(format!("segment count {segments} does not match unit length {len_bytes}"));
    }
    if bytes[54..56] != [0, 0] || bytes[64..72] != [0; 8] {
        return Err("reserved bytes are not zero".to_string());
    }
    let object = u128::from_le_bytes(bytes[32..48].try_into().expect("16 bytes"));
    let block_or_group = u32_at(bytes, 48);
    let parity_index = u16_at(bytes, 52);
    let generation = u64_at(bytes, 56);
    let key = match bytes[11] {
        0 if parity_index == 0 => UnitKey::data(object, block_or_group, generation),
        0 => return Err("data unit with a non-zero parity index".to_string()),
        1 => UnitKey::parity(object, block_or_group, parity_index, generation),
        other => return Err(format!("unknown unit kind {other}")),
    };
    Ok(Fixed { key, len_bytes, header_bytes: stated_header_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_every_flipped_byte() {
        for (key, len) in
            [(UnitKey::data(1, 2, 3), 0u64), (UnitKey::parity(u128::MAX, 7, 2, 9), 3 * 65_536 + 7)]
        {
            let checksums = (0..segment_count(len) as u32).map(|s| s * 31 + 1).collect();
            let header = Header { key, len_bytes: len, checksums };
            let bytes = header.encode();
            assert_eq!(bytes.len() as u64, header_bytes(len));
            assert_eq!(&bytes[..8], b"WEFTUNIT");
            assert_eq!(Header::decode(&bytes), Ok(header));
            for at in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[at] ^= 0x10;
                assert!(Header::decode(&bad).is_err(), "flip at byte {at} not detected");
            }
        }
    }

    /// The offsets in docs/store-format.md.
    #[test]
    fn header_bytes_match_the_documented_layout() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let key = UnitKey::parity(0x0102_0304, 0x0a0b_0c0d, 0x0e0f, 0x1122_3344_5566_7788);
        let len = 65_537;
        let bytes =
            Header { key, len_bytes: len, checksums: vec![0xdead_beef, 0x0bad_f00d] }.encode();
        assert_eq!(bytes.len(), 84);
        assert_eq!(&bytes[0..8], b"WEFTUNIT");
        assert_eq!(&bytes[8..12], &[1, 0, 1, 1]);
        assert_eq!(&bytes[12..16], &84u32.to_le_bytes());
        assert_eq!(&bytes[16..24], &len.to_le_bytes());
        assert_eq!(&bytes[24..32], &[0, 0, 1, 0, 2, 0, 0, 0]);
        assert_eq!(&bytes[32..48], &0x0102_0304u128.to_le_bytes());
        assert_eq!(&bytes[48..56], &[0x0d, 0x0c, 0x0b, 0x0a, 0x0f, 0x0e, 0, 0]);
        assert_eq!(&bytes[56..64], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&bytes[64..72], &[0; 8]);
        assert_eq!(&bytes[72..80], &[0xef, 0xbe, 0xad, 0xde, 0x0d, 0xf0, 0xad, 0x0b]);
        assert_eq!(&bytes[80..84], &crc32c::crc32c(&bytes[..80]).to_le_bytes());
    }

    #[test]
    fn segment_arithmetic() {
        assert_eq!(segment_count(0), 0);
        assert_eq!(segment_count(1), 1);
        assert_eq!(segment_count(65_536), 1);
        assert_eq!(segment_count(65_537), 2);
        assert_eq!(header_bytes(0), 76);
        assert_eq!(header_bytes(65_537), 84);
    }
}
