//! Encryption at rest (SSE-S3, SSE-KMS, SSE-C): the key hierarchy, the package format, and
//! the two streams between them: [`Sealer`] seals a body on its way to the writer, [`Opening`]
//! opens an object's stored bytes on their way to a client. The gateway encrypts before
//! coding, so nodes (and their disks) hold only sealed packages; meta holds only sealed keys.
//!
//! Key hierarchy (docs/s3.md, "Encryption at rest"):
//! - **Master key**: 32 random bytes in a file only gateways and `weft kms` read
//!   ([`MasterKey`]). It is never sent anywhere: not to meta, not to nodes.
//! - **KMS keys** (SSE-KMS): 32 random bytes a version, kept in meta (`kms_keys/<id>`) sealed
//!   by the master key ([`KmsKey`]); rotation adds a version, old versions stay to open what
//!   they sealed.
//! - **Object key**: 32 random bytes per object version (per multipart upload), kept in the
//!   object's attributes sealed by its mode's wrapping key: the master key (SSE-S3), a KMS
//!   key version (SSE-KMS) or the customer's key (SSE-C, sent with every request and never
//!   stored: only a salted HMAC of it is, to tell a wrong key from a damaged object).
//! - **Segment key**: HMAC-SHA256(object key, "weft-sse-v1/segment" ‖ salt), with 16 random
//!   bytes of salt per segment. A PUT's object is one segment; a completed upload has one a
//!   part, sealed when the part was uploaded, so completing copies sealed bytes and needs no
//!   key (SSE-C clients send none with CompleteMultipartUpload).
//!
//! Package format: a segment's plaintext is cut into [`PACKAGE_BYTES`] packages (the last
//! shorter; an empty segment has one empty package). Package `i` is stored as its AES-256-GCM
//! ciphertext and 16-byte tag, under the segment key with nonce `0u32 ‖ i` (big-endian) and
//! associated data `"weft-sse-v1" ‖ i ‖ last`. A segment of `n` bytes stores
//! [`sealed_size`]`(n)` = n + 16 × ⌈n / 64 KiB⌉ (at least one package) bytes.
//!
//! Invariants:
//! - No key and nonce ever seal two plaintexts: every segment key is fresh (a random salt
//!   under a random object key) and a nonce is a package's index within its segment.
//! - Every package is authenticated before a byte of it is handed on: a flipped bit, a
//!   package swapped, moved between segments or objects, or a segment cut short (its last
//!   package is marked in the associated data) is an error, never wrong data.
//! - A range reads and opens only the packages it touches ([`Plan`]): a range within one
//!   package reads one, a range of at most 64 KiB within one segment at most two.
//! - No secret leaves this module in clear except to the AEAD and HMAC calls: key types do
//!   not print (`Debug` is redacted) and are not serialized.

use std::{
    fmt,
    io::Write,
    path::Path,
    pin::Pin,
    task::{Context, Poll},
};

use base64::{engine::general_purpose::STANDARD as BASE64, Engine};
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use ring::{
    aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM},
    hmac,
    rand::{SecureRandom, SystemRandom},
};
use serde::{Deserialize, Serialize};

/// Plaintext bytes of a package (the last of a segment may be shorter).
pub const PACKAGE_BYTES: u64 = 64 << 10;
/// Bytes of a package's authentication tag.
pub const TAG_BYTES: u64 = 16;
/// Stored bytes of a full package.
pub const SEALED_PACKAGE_BYTES: u64 = PACKAGE_BYTES + TAG_BYTES;
/// Bytes of a segment's salt.
pub const SALT_BYTES: usize = 16;
/// The one algorithm S3's SSE headers name (SSE-S3, SSE-C).
pub const AES256: &str = "AES256";
/// S3's name of SSE-KMS.
pub const AWS_KMS: &str = "aws:kms";

/// Packages a segment of `plain` bytes is stored in (an empty one has one).
pub fn packages(plain: u64) -> u64 {
    plain.div_ceil(PACKAGE_BYTES).max(1)
}

/// Stored bytes of a segment of `plain` bytes.
pub fn sealed_size(plain: u64) -> u64 {
    plain + TAG_BYTES * packages(plain)
}

/// Fresh random bytes (the system's CSPRNG).
pub fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    SystemRandom::new().fill(&mut bytes).expect("the system's random source works");
    bytes
}

/// 32 secret bytes: a key of the hierarchy. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(crate) [u8; 32]);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

impl Secret {
    /// A fresh random secret.
    pub fn generate() -> Secret {
        Secret(random())
    }

    fn aead(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &self.0).expect("32 bytes is a key"))
    }

    /// `secret` sealed under this key with associated data `aad`: base64 of nonce (12,
    /// random), ciphertext (32) and tag (16).
    pub fn seal_secret(&self, secret: &Secret, aad: &[u8]) -> String {
        let nonce: [u8; 12] = random();
        let mut sealed = secret.0.to_vec();
        self.aead()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut sealed,
            )
            .expect("sealing 32 bytes cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        BASE64.encode(out)
    }

    /// The secret [`Secret::seal_secret`] sealed under this key with `aad`; None when the
    /// text is not one, or was sealed under another key or other associated data.
    pub fn open_secret(&self, sealed: &str, aad: &[u8]) -> Option<Secret> {
        let bytes = BASE64.decode(sealed).ok()?;
        if bytes.len() != 12 + 32 + TAG_BYTES as usize {
            return None;
        }
        let (nonce, rest) = bytes.split_at(12);
        let mut rest = rest.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let opened = self.aead().open_in_place(nonce, Aad::from(aad), &mut rest).ok()?;
        Some(Secret(opened.try_into().ok()?))
    }

    /// The key of the segment with `salt` of an object whose key this is.
    pub fn segment_key(&self, salt: &[u8]) -> SegmentKey {
        let mac = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        let mut context = hmac::Context::with_key(&mac);
        context.update(b"weft-sse-v1/segment");
        context.update(salt);
        let derived = context.sign();
        let key = UnboundKey::new(&AES_256_GCM, derived.as_ref()).expect("32 bytes is a key");
        SegmentKey(LessSafeKey::new(key))
    }
}

/// The gateway's master key: it seals SSE-S3 object keys and KMS keys.
#[derive(Debug, Clone)]
pub struct MasterKey(pub Secret);

impl MasterKey {
    /// Reads a master key file: 64 hex digits (surrounding white space ignored).
    pub fn read_file(path: &Path) -> Result<MasterKey, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the master key {}: {e}", path.display()))?;
        let bytes = hex::decode(text.trim()).ok().and_then(|b| <[u8; 32]>::try_from(b).ok());
        bytes.map(|b| MasterKey(Secret(b))).ok_or_else(|| {
            format!("{} is not a master key (64 hex digits, as `weft up` writes)", path.display())
        })
    }

    /// Writes a fresh master key to `path` (which must not exist; mode 0600).
    pub fn create_file(path: &Path) -> Result<MasterKey, String> {
        let key = Secret::generate();
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(path)
            .map_err(|e| format!("cannot create the master key {}: {e}", path.display()))?;
        writeln!(file, "{}", hex::encode(key.0))
            .and_then(|_| file.sync_all())
            .map_err(|e| format!("cannot write the master key {}: {e}", path.display()))?;
        Ok(MasterKey(key))
    }
}

/// The key of one segment: it seals and opens its packages.
pub struct SegmentKey(LessSafeKey);

impl fmt::Debug for SegmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SegmentKey(redacted)")
    }
}

fn package_nonce(index: u64) -> Nonce {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&index.to_be_bytes());
    Nonce::assume_unique_for_key(nonce)
}

fn package_aad(index: u64, last: bool) -> [u8; 20] {
    let mut aad = [0u8; 20];
    aad[..11].copy_from_slice(b"weft-sse-v1");
    aad[11..19].copy_from_slice(&index.to_be_bytes());
    aad[19] = last as u8;
    aad
}

impl SegmentKey {
    /// Seals package `index` in place: `package` holds its plaintext, then its ciphertext
    /// and tag.
    pub fn seal(&self, index: u64, last: bool, package: &mut Vec<u8>) {
        let aad = package_aad(index, last);
        self.0
            .seal_in_place_append_tag(package_nonce(index), Aad::from(&aad), package)
            .expect("a package is far below AES-GCM's limit");
    }

    /// Opens package `index` in place, answering its plaintext (the first `len - 16`
    /// bytes); an error when it is not package `index` of this segment (or not its last
    /// when `last`), unaltered.
    pub fn open<'a>(&self, index: u64, last: bool, sealed: &'a mut [u8]) -> Option<&'a mut [u8]> {
        let aad = package_aad(index, last);
        self.0.open_in_place(package_nonce(index), Aad::from(&aad), sealed).ok()
    }
}

/// The encryption S3 shows and a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// SSE-S3: the object key sealed by the master key.
    #[serde(rename = "AES256")]
    S3,
    /// SSE-KMS: sealed by a version of a KMS key.
    #[serde(rename = "aws:kms")]
    Kms,
    /// SSE-C: sealed by the customer's key.
    #[serde(rename = "SSE-C")]
    Customer,
}

/// What an object's attributes keep of its encryption (`Attributes::sse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    pub mode: Mode,
    /// Plaintext bytes (the size S3 shows; meta's size is the stored one).
    pub size: u64,
    /// The object key, sealed by the mode's wrapping key ([`Secret::seal_secret`]).
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_version: Option<u32>,
    /// SSE-C: base64 of a salt (16) and HMAC-SHA256(salt, customer key) (32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_key_check: Option<String>,
    /// Base64 of the segments' salts, 16 bytes each, in order.
    pub salts: String,
    /// Plaintext bytes of each segment when there are several (a completed upload's parts);
    /// empty: one segment of `size`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<u64>,
}

/// The associated data an object key is sealed with: its mode.
pub fn object_key_aad(mode: Mode) -> &'static [u8] {
    match mode {
        Mode::S3 => b"weft-sse-v1/object-key/AES256",
        Mode::Kms => b"weft-sse-v1/object-key/aws:kms",
        Mode::Customer => b"weft-sse-v1/object-key/SSE-C",
    }
}

impl Sealed {
    /// The plaintext sizes of the segments, in order.
    pub fn segment_sizes(&self) -> Vec<u64> {
        match self.segments.is_empty() {
            true => vec![self.size],
            false => self.segments.clone(),
        }
    }

    /// The salts of the segments, in order; None when the record is damaged.
    pub fn salt_list(&self) -> Option<Vec<[u8; SALT_BYTES]>> {
        let bytes = BASE64.decode(&self.salts).ok()?;
        if bytes.len() % SALT_BYTES != 0 {
            return None;
        }
        Some(bytes.chunks(SALT_BYTES).map(|c| c.try_into().expect("chunks are exact")).collect())
    }

    /// Bytes the object stores.
    pub fn stored_size(&self) -> u64 {
        self.segment_sizes().into_iter().map(sealed_size).sum()
    }

    /// S3's `x-amz-server-side-encryption` value, for SSE-S3 and SSE-KMS.
    pub fn algorithm(&self) -> Option<&'static str> {
        match self.mode {
            Mode::S3 => Some(AES256),
            Mode::Kms => Some(AWS_KMS),
            Mode::Customer => None,
        }
    }
}

/// Base64 of `salts` joined (a [`Sealed::salts`]).
pub fn salts_text(salts: &[[u8; SALT_BYTES]]) -> String {
    BASE64.encode(salts.concat())
}

/// The one salt of a one-segment record's `salts` (a part's), if it is one.
pub fn decode_salt(text: &str) -> Option<[u8; SALT_BYTES]> {
    BASE64.decode(text).ok()?.try_into().ok()
}

/// A customer's key (SSE-C) as a request sent it, checked against its MD5.
#[derive(Clone)]
pub struct CustomerKey {
    pub key: Secret,
    /// The base64 MD5 the request sent (S3 echoes it).
    pub md5: String,
}

impl fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomerKey(md5 {})", self.md5)
    }
}

impl CustomerKey {
    /// The key of SSE-C headers (algorithm, base64 key, base64 MD5 of the key): None when
    /// none is sent, an error (S3's words) when one is missing or wrong.
    pub fn of_headers(
        algorithm: Option<&str>,
        key: Option<&str>,
        md5: Option<&str>,
    ) -> Result<Option<CustomerKey>, String> {
        if algorithm.is_none() && key.is_none() && md5.is_none() {
            return Ok(None);
        }
        let Some(algorithm) = algorithm else {
            return Err("Requests specifying Server Side Encryption with Customer provided keys \
                        must provide a valid encryption algorithm."
                .into());
        };
        if algorithm != AES256 {
            return Err("The encryption method specified is not supported".into());
        }
        let bytes = key.and_then(|k| BASE64.decode(k.trim()).ok());
        let Some(Ok(bytes)) = bytes.map(<[u8; 32]>::try_from) else {
            return Err("The secret key was invalid for the specified algorithm.".into());
        };
        let md5 = md5.map(|m| m.trim().to_string()).ok_or_else(|| {
            "Requests specifying Server Side Encryption with Customer provided keys must provide \
             the client calculated MD5 of the secret key."
                .to_string()
        })?;
        let digest = crate::md5::digest(&bytes);
        if BASE64.decode(&md5).ok().as_deref() != Some(&digest[..]) {
            return Err("The calculated MD5 hash of the key did not match the hash that was \
                        provided."
                .into());
        }
        Ok(Some(CustomerKey { key: Secret(bytes), md5 }))
    }

    /// A fresh check of this key: base64 of a random salt and the HMAC of the key under it.
    pub fn new_check(&self) -> String {
        let salt: [u8; SALT_BYTES] = random();
        let mac = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &salt), &self.key.0);
        BASE64.encode([&salt[..], mac.as_ref()].concat())
    }

    /// Whether this is the key `check` ([`CustomerKey::new_check`]) was made of.
    pub fn matches(&self, check: &str) -> bool {
        let Ok(bytes) = BASE64.decode(check) else { return false };
        if bytes.len() != SALT_BYTES + 32 {
            return false;
        }
        let (salt, mac) = bytes.split_at(SALT_BYTES);
        hmac::verify(&hmac::Key::new(hmac::HMAC_SHA256, salt), &self.key.0, mac).is_ok()
    }
}

/// A KMS key: its versions, each a gateway record `kms_keys/<id>/<version>` ([`KmsVersion`],
/// made create-only, so no version is ever overwritten: two rotations at once make two
/// versions). Nothing in it is secret without the master key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KmsKey {
    pub id: String,
    /// Oldest first; the last one seals new objects.
    pub versions: Vec<KmsVersion>,
}

/// One version of a KMS key, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsVersion {
    pub id: String,
    pub version: u32,
    pub created_ms: u64,
    /// The material, sealed by the master key with associated data naming id and version.
    pub sealed: String,
}

/// The gateway-record namespace of KMS keys.
pub const KMS_KEYS: &str = "kms_keys";

fn kms_aad(id: &str, version: u32) -> Vec<u8> {
    format!("weft-kms-v1/{id}/{version}").into_bytes()
}

/// The record name of version `version` of KMS key `id` (zero-padded: names list in
/// version order).
pub fn kms_record_name(id: &str, version: u32) -> String {
    format!("{id}/{version:010}")
}

/// Whether `id` may name a KMS key: 1–64 of `[A-Za-z0-9_.-]` (S3's ARN form is taken too:
/// [`kms_key_name`]).
pub fn valid_kms_key_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// The weft key id an SSE-KMS request names: an id, or an ARN ending in `key/ID`.
pub fn kms_key_name(requested: &str) -> &str {
    match requested.rsplit_once(":key/") {
        Some((_, id)) if requested.starts_with("arn:") => id,
        _ => requested,
    }
}

impl KmsVersion {
    /// A fresh version `version` of key `id`, its material sealed by `master`.
    pub fn generate(master: &MasterKey, id: &str, version: u32, now_ms: u64) -> KmsVersion {
        let sealed = master.0.seal_secret(&Secret::generate(), &kms_aad(id, version));
        KmsVersion { id: id.to_string(), version, created_ms: now_ms, sealed }
    }
}

impl KmsKey {
    /// The key of `id` from its version records (any order; others' are skipped).
    pub fn of_versions(id: &str, versions: impl IntoIterator<Item = KmsVersion>) -> KmsKey {
        let mut versions: Vec<KmsVersion> = versions.into_iter().filter(|v| v.id == id).collect();
        versions.sort_by_key(|v| v.version);
        KmsKey { id: id.to_string(), versions }
    }

    /// The newest version.
    pub fn current(&self) -> Option<u32> {
        self.versions.last().map(|v| v.version)
    }

    /// The number the next version gets.
    pub fn next_version(&self) -> u32 {
        self.current().map_or(1, |v| v + 1)
    }

    /// Version `version`'s material, opened with `master`; None when there is no such
    /// version or `master` is not the key that sealed it.
    pub fn material(&self, master: &MasterKey, version: u32) -> Option<Secret> {
        let found = self.versions.iter().find(|v| v.version == version)?;
        master.0.open_secret(&found.sealed, &kms_aad(&found.id, version))
    }
}

/// Seals a one-segment body of `plain` bytes package by package as a writer reads it
/// (`body.rs`'s reader): it holds at most one package.
#[derive(Debug)]
pub struct Sealer {
    key: SegmentKey,
    plain: u64,
    /// The next package to seal.
    index: u64,
    /// Plaintext of the package being filled.
    filling: Vec<u8>,
    /// A sealed package and how much of it was handed out.
    sealed: Vec<u8>,
    handed: usize,
}

impl Sealer {
    pub fn new(key: SegmentKey, plain: u64) -> Sealer {
        let capacity = SEALED_PACKAGE_BYTES as usize;
        Sealer {
            key,
            plain,
            index: 0,
            filling: Vec::with_capacity(capacity),
            sealed: Vec::with_capacity(capacity),
            handed: 0,
        }
    }

    /// Plaintext bytes the package being filled still needs (0: it is ready to seal).
    pub fn wanted(&self) -> usize {
        let start = self.index * PACKAGE_BYTES;
        let length = self.plain.saturating_sub(start).min(PACKAGE_BYTES) as usize;
        length - self.filling.len()
    }

    /// Whether every package was sealed and handed out.
    pub fn done(&self) -> bool {
        self.index == packages(self.plain) && self.handed == self.sealed.len()
    }

    /// Moves plaintext from `input` into the package being filled; returns how much it took.
    pub fn take(&mut self, input: &[u8]) -> usize {
        let n = self.wanted().min(input.len());
        self.filling.extend_from_slice(&input[..n]);
        n
    }

    /// Whether the package being filled is the segment's last.
    pub fn filling_last(&self) -> bool {
        self.index + 1 == packages(self.plain)
    }

    /// Copies sealed bytes into `out`, sealing the filled package first when all it had
    /// was handed out (the last one only if `may_seal_last`): how many it copied (0: the
    /// package being filled needs more input or leave to seal, or all is done).
    pub fn give(&mut self, out: &mut [u8], may_seal_last: bool) -> usize {
        if self.handed == self.sealed.len() {
            if self.index == packages(self.plain) || self.wanted() > 0 {
                return 0;
            }
            let last = self.filling_last();
            if last && !may_seal_last {
                return 0;
            }
            std::mem::swap(&mut self.filling, &mut self.sealed);
            self.filling.clear();
            self.key.seal(self.index, last, &mut self.sealed);
            self.index += 1;
            self.handed = 0;
        }
        let n = out.len().min(self.sealed.len() - self.handed);
        out[..n].copy_from_slice(&self.sealed[self.handed..self.handed + n]);
        self.handed += n;
        n
    }
}

/// One package a range reads: where it is and what of its plaintext is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Package {
    segment: usize,
    index: u64,
    /// Plaintext bytes of the package.
    plain: u64,
    last: bool,
    /// The wanted plaintext within it: `[skip, take)`.
    skip: u64,
    take: u64,
}

/// The stored bytes a plaintext range of a sealed object reads, and the packages in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The stored range to read: `[stored_start, stored_start + stored_len)`.
    pub stored_start: u64,
    pub stored_len: u64,
    segments: Vec<u64>,
    /// Plaintext offset of each segment.
    segment_starts: Vec<u64>,
    /// The first package read, and the last (inclusive): (segment, index).
    first: (usize, u64),
    last: (usize, u64),
    /// The wanted plaintext range.
    start: u64,
    end: u64,
}

impl Plan {
    /// The plan of plaintext bytes `[start, end)` of an object of segments `segments`
    /// (plaintext sizes); `end` at most their sum.
    pub fn new(segments: Vec<u64>, start: u64, end: u64) -> Plan {
        let mut segment_starts = Vec::with_capacity(segments.len());
        let mut stored_starts = Vec::with_capacity(segments.len());
        let (mut plain, mut stored) = (0u64, 0u64);
        for &size in &segments {
            segment_starts.push(plain);
            stored_starts.push(stored);
            plain += size;
            stored += sealed_size(size);
        }
        let end = end.min(plain);
        let empty = Plan {
            stored_start: 0,
            stored_len: 0,
            first: (0, 1),
            last: (0, 0),
            start,
            end,
            segments: Vec::new(),
            segment_starts: Vec::new(),
        };
        if start >= end {
            return empty;
        }
        // The package holding plaintext byte `at` (empty segments hold none).
        let holding = |at: u64| -> (usize, u64) {
            let segment = (0..segments.len())
                .find(|&s| segment_starts[s] <= at && at < segment_starts[s] + segments[s])
                .expect("the byte lies in a segment");
            (segment, (at - segment_starts[segment]) / PACKAGE_BYTES)
        };
        let first = holding(start);
        let last = holding(end - 1);
        let stored_at =
            |(segment, index): (usize, u64)| stored_starts[segment] + index * SEALED_PACKAGE_BYTES;
        let last_plain = (segments[last.0] - last.1 * PACKAGE_BYTES).min(PACKAGE_BYTES);
        let stored_start = stored_at(first);
        let stored_end = stored_at(last) + last_plain + TAG_BYTES;
        Plan {
            stored_start,
            stored_len: stored_end - stored_start,
            segments,
            segment_starts,
            first,
            last,
            start,
            end,
        }
    }

    /// Packages the plan reads.
    pub fn package_count(&self) -> u64 {
        let mut count = 0;
        let mut at = self.package(self.first);
        while let Some(package) = at {
            count += 1;
            at = self.after(package);
        }
        count
    }

    fn package(&self, (segment, index): (usize, u64)) -> Option<Package> {
        if self.stored_len == 0 || (segment, index) > self.last {
            return None;
        }
        let size = self.segments[segment];
        let offset = self.segment_starts[segment] + index * PACKAGE_BYTES;
        let plain = (size - index * PACKAGE_BYTES).min(PACKAGE_BYTES);
        let skip = self.start.saturating_sub(offset).min(plain);
        let take = self.end.saturating_sub(offset).min(plain);
        let last = index + 1 == packages(size);
        Some(Package { segment, index, plain, last, skip, take: take.max(skip) })
    }

    fn after(&self, package: Package) -> Option<Package> {
        match package.last {
            false => self.package((package.segment, package.index + 1)),
            true => self.package((package.segment + 1, 0)),
        }
    }
}

/// The plaintext of a [`Plan`] from the stream of its stored bytes: each package is
/// opened (and so authenticated) before any of its bytes is handed on.
pub struct Opening<S> {
    stored: S,
    plan: Plan,
    keys: Vec<Option<SegmentKey>>,
    object_key: Secret,
    salts: Vec<[u8; SALT_BYTES]>,
    next: Option<Package>,
    buffer: BytesMut,
    failed: bool,
}

impl<S> Opening<S> {
    /// Opens `stored` (the plan's stored range) of an object with key `object_key` and
    /// segment salts `salts`.
    pub fn new(stored: S, plan: Plan, object_key: Secret, salts: Vec<[u8; SALT_BYTES]>) -> Self {
        let next = plan.package(plan.first);
        let keys = (0..salts.len()).map(|_| None).collect();
        Opening {
            stored,
            plan,
            keys,
            object_key,
            salts,
            next,
            buffer: BytesMut::new(),
            failed: false,
        }
    }
}

impl<S> fmt::Debug for Opening<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opening").field("plan", &self.plan).field("next", &self.next).finish()
    }
}

fn damaged(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

impl<S, E> Stream for Opening<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: fmt::Display,
{
    type Item = std::io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.failed {
                return Poll::Ready(None);
            }
            let Some(package) = this.next else { return Poll::Ready(None) };
            let need = (package.plain + TAG_BYTES) as usize;
            if this.buffer.len() < need {
                match Pin::new(&mut this.stored).poll_next(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(bytes))) => {
                        this.buffer.extend_from_slice(&bytes);
                        continue;
                    }
                    Poll::Ready(Some(Err(error))) => {
                        this.failed = true;
                        return Poll::Ready(Some(Err(std::io::Error::other(error.to_string()))));
                    }
                    Poll::Ready(None) => {
                        this.failed = true;
                        return Poll::Ready(Some(Err(damaged(
                            "the object's stored bytes ended inside a package".into(),
                        ))));
                    }
                }
            }
            let mut sealed = this.buffer.split_to(need);
            let Some(salt) = this.salts.get(package.segment) else {
                this.failed = true;
                return Poll::Ready(Some(Err(damaged("the object's salts are damaged".into()))));
            };
            let key =
                this.keys[package.segment].get_or_insert_with(|| this.object_key.segment_key(salt));
            if key.open(package.index, package.last, &mut sealed).is_none() {
                this.failed = true;
                return Poll::Ready(Some(Err(damaged(format!(
                    "package {} of segment {} failed its authentication: the stored bytes are \
                     damaged",
                    package.index, package.segment
                )))));
            }
            this.next = this.plan.after(package);
            if package.take > package.skip {
                sealed.truncate(package.take as usize);
                let plain = sealed.freeze().slice(package.skip as usize..);
                return Poll::Ready(Some(Ok(plain)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// The stored bytes of one segment of `plain`, sealed through a [`Sealer`] fed in
    /// pieces of `piece` bytes and drained into buffers of `out` bytes.
    fn seal_segment(key: &Secret, salt: &[u8], plain: &[u8], piece: usize, out: usize) -> Vec<u8> {
        let mut sealer = Sealer::new(key.segment_key(salt), plain.len() as u64);
        let mut stored = Vec::new();
        let mut fed = 0;
        let mut buffer = vec![0u8; out];
        while !sealer.done() {
            let n = sealer.give(&mut buffer, true);
            stored.extend_from_slice(&buffer[..n]);
            if n == 0 {
                let end = (fed + piece).min(plain.len());
                fed += sealer.take(&plain[fed..end]);
            }
        }
        stored
    }

    fn open_range(
        stored: &[u8],
        segments: Vec<u64>,
        key: &Secret,
        salts: &[[u8; 16]],
        start: u64,
        end: u64,
    ) -> (std::io::Result<Vec<u8>>, Plan) {
        let plan = Plan::new(segments, start, end);
        let range =
            &stored[plan.stored_start as usize..(plan.stored_start + plan.stored_len) as usize];
        // Hand the stored bytes over in uneven pieces.
        let pieces: Vec<Result<Bytes, String>> =
            range.chunks(7919).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let opening = Opening::new(
            futures_util::stream::iter(pieces),
            plan.clone(),
            key.clone(),
            salts.to_vec(),
        );
        let collected = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(opening.collect::<Vec<_>>());
        let mut out = Vec::new();
        for piece in collected {
            match piece {
                Ok(bytes) => out.extend_from_slice(&bytes),
                Err(error) => return (Err(error), plan),
            }
        }
        (Ok(out), plan)
    }

    #[test]
    fn sizes_count_one_tag_a_package_and_one_package_for_nothing() {
        assert_eq!(sealed_size(0), 16);
        assert_eq!(sealed_size(1), 17);
        assert_eq!(sealed_size(PACKAGE_BYTES), PACKAGE_BYTES + 16);
        assert_eq!(sealed_size(PACKAGE_BYTES + 1), PACKAGE_BYTES + 1 + 32);
        assert_eq!(packages(3 * PACKAGE_BYTES), 3);
    }

    #[test]
    fn sealed_segments_open_to_their_plaintext_for_every_range() {
        let key = Secret::generate();
        let salt: [u8; 16] = random();
        for len in [0usize, 1, 100, 65_535, 65_536, 65_537, 200_000] {
            let plain = sample(len);
            let stored = seal_segment(&key, &salt, &plain, 10_007, 4096);
            assert_eq!(stored.len() as u64, sealed_size(len as u64), "len {len}");
            // No plaintext run of 16 bytes survives sealing.
            if len >= 16 {
                for window in plain.windows(16).step_by(997) {
                    assert!(!stored.windows(16).any(|w| w == window), "len {len}");
                }
            }
            let ranges = [(0, len), (0, len / 2), (len / 3, len), (len / 2, len / 2 + 1)];
            for (start, end) in ranges.into_iter().filter(|&(_, end)| end <= len) {
                let (opened, _) =
                    open_range(&stored, vec![len as u64], &key, &[salt], start as u64, end as u64);
                assert_eq!(opened.unwrap(), &plain[start..end], "len {len} range {start}..{end}");
            }
        }
    }

    #[test]
    fn one_byte_reads_one_package_and_any_64_kib_at_most_two() {
        let segments = vec![5 * PACKAGE_BYTES + 77, 3, 2 * PACKAGE_BYTES];
        let total: u64 = segments.iter().sum();
        for start in [0, 1, PACKAGE_BYTES - 1, PACKAGE_BYTES, 5 * PACKAGE_BYTES + 76, total - 1] {
            let plan = Plan::new(segments.clone(), start, start + 1);
            assert_eq!(plan.package_count(), 1, "byte {start}");
            assert!(plan.stored_len <= SEALED_PACKAGE_BYTES, "byte {start}");
            // Within one segment (parts are at least 5 MiB but the last: ranges cross few).
            if start + PACKAGE_BYTES <= segments[0]
                || start >= segments[0] + segments[1] && start + PACKAGE_BYTES <= total
            {
                let plan = Plan::new(segments.clone(), start, start + PACKAGE_BYTES);
                assert!(plan.package_count() <= 2, "64 KiB from {start}");
                assert!(plan.stored_len <= 2 * SEALED_PACKAGE_BYTES, "64 KiB from {start}");
            }
        }
    }

    #[test]
    fn several_segments_open_across_their_boundaries_and_empty_ones_between() {
        let key = Secret::generate();
        let lengths = [70_000usize, 0, 5, 131_072];
        let salts: Vec<[u8; 16]> = lengths.iter().map(|_| random()).collect();
        let mut plain = Vec::new();
        let mut stored = Vec::new();
        for (length, salt) in lengths.iter().zip(&salts) {
            let part = sample(*length + 3)[3..].to_vec();
            stored.extend(seal_segment(&key, salt, &part, 65_536, 100_000));
            plain.extend(part);
        }
        let segments: Vec<u64> = lengths.iter().map(|&l| l as u64).collect();
        let total = plain.len();
        for (start, end) in [(0, total), (69_999, 70_003), (70_000, 70_005), (1, total - 1)] {
            let (opened, _) =
                open_range(&stored, segments.clone(), &key, &salts, start as u64, end as u64);
            assert_eq!(opened.unwrap(), &plain[start..end], "range {start}..{end}");
        }
    }

    #[test]
    fn a_flipped_bit_a_swapped_package_or_a_cut_end_is_an_error_never_bytes() {
        let key = Secret::generate();
        let salt: [u8; 16] = random();
        let plain = sample(3 * PACKAGE_BYTES as usize);
        let stored = seal_segment(&key, &salt, &plain, 65_536, 65_552);
        let sizes = vec![plain.len() as u64];
        let mut flipped = stored.clone();
        flipped[100_000] ^= 0x10;
        let (opened, _) = open_range(&flipped, sizes.clone(), &key, &[salt], 0, plain.len() as u64);
        assert!(opened.is_err());
        // A package in another package's place.
        let mut swapped = stored.clone();
        let p = SEALED_PACKAGE_BYTES as usize;
        let first = swapped[..p].to_vec();
        swapped.copy_within(p..2 * p, 0);
        swapped[p..2 * p].copy_from_slice(&first);
        let (opened, _) = open_range(&swapped, sizes.clone(), &key, &[salt], 0, 10);
        assert!(opened.is_err());
        // The object cut after its second package: the second is not marked last.
        let cut = stored[..2 * p].to_vec();
        let (opened, _) =
            open_range(&cut, vec![2 * PACKAGE_BYTES], &key, &[salt], 0, 2 * PACKAGE_BYTES);
        assert!(opened.is_err());
        // Another object key, or another salt, opens nothing.
        let (opened, _) = open_range(&stored, sizes.clone(), &Secret::generate(), &[salt], 0, 5);
        assert!(opened.is_err());
        let (opened, _) = open_range(&stored, sizes, &key, &[random()], 0, 5);
        assert!(opened.is_err());
    }

    #[test]
    fn secrets_seal_under_one_key_and_associated_data_only() {
        let wrapping = Secret::generate();
        let secret = Secret::generate();
        let sealed = wrapping.seal_secret(&secret, b"a");
        assert_eq!(wrapping.open_secret(&sealed, b"a"), Some(secret.clone()));
        assert_eq!(wrapping.open_secret(&sealed, b"b"), None);
        assert_eq!(Secret::generate().open_secret(&sealed, b"a"), None);
        assert_ne!(wrapping.seal_secret(&secret, b"a"), sealed, "nonces are fresh");
        assert_eq!(format!("{secret:?}"), "Secret(redacted)");
    }

    #[test]
    fn kms_keys_rotate_and_keep_their_old_versions() {
        let master = MasterKey(Secret::generate());
        let first = KmsVersion::generate(&master, "photos", 1, 1);
        let mut key = KmsKey::of_versions("photos", [first.clone()]);
        let one = key.material(&master, 1).unwrap();
        assert_eq!(key.next_version(), 2);
        let second = KmsVersion::generate(&master, "photos", 2, 2);
        let stranger = KmsVersion::generate(&master, "other", 3, 2);
        key = KmsKey::of_versions("photos", [second, stranger, first]);
        assert_eq!(key.current(), Some(2));
        assert_eq!(key.material(&master, 1), Some(one.clone()));
        assert_ne!(key.material(&master, 2), Some(one));
        assert_eq!(key.material(&MasterKey(Secret::generate()), 1), None);
        assert_eq!(key.material(&master, 3), None);
        // A version's material moved to another id does not open.
        let mut moved = key.versions[0].clone();
        moved.id = "other".into();
        assert_eq!(KmsKey::of_versions("other", [moved]).material(&master, 1), None);
        assert_eq!(kms_key_name("arn:aws:kms:us-east-1:1:key/photos"), "photos");
        assert!(valid_kms_key_id("photos-2") && !valid_kms_key_id("a/b") && !valid_kms_key_id(""));
        assert!(kms_record_name("a", 2) < kms_record_name("a", 10));
    }

    #[test]
    fn customer_keys_are_checked_against_their_md5_and_their_check() {
        let raw = [7u8; 32];
        let key = BASE64.encode(raw);
        let md5 = BASE64.encode(crate::md5::digest(&raw));
        let customer =
            CustomerKey::of_headers(Some("AES256"), Some(&key), Some(&md5)).unwrap().unwrap();
        assert!(CustomerKey::of_headers(None, None, None).unwrap().is_none());
        assert!(CustomerKey::of_headers(Some("AES128"), Some(&key), Some(&md5)).is_err());
        assert!(CustomerKey::of_headers(Some("AES256"), Some(&key), Some("AAAA")).is_err());
        assert!(CustomerKey::of_headers(Some("AES256"), Some("c2hvcnQ="), Some(&md5)).is_err());
        assert!(CustomerKey::of_headers(Some("AES256"), Some(&key), None).is_err());
        let check = customer.new_check();
        assert!(customer.matches(&check));
        let other_raw = [8u8; 32];
        let other = CustomerKey {
            key: Secret(other_raw),
            md5: BASE64.encode(crate::md5::digest(&other_raw)),
        };
        assert!(!other.matches(&check));
        assert_ne!(customer.new_check(), check, "salts are fresh");
    }

    #[test]
    fn master_key_files_are_created_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sse.key");
        let created = MasterKey::create_file(&path).unwrap();
        assert_eq!(MasterKey::read_file(&path).unwrap().0, created.0);
        assert!(MasterKey::create_file(&path).is_err(), "never overwritten");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not hex\n").unwrap();
        assert!(MasterKey::read_file(&path).unwrap_err().contains("not a master key"));
    }
}
