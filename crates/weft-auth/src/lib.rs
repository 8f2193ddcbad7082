//! weft-auth: how weft's components prove who they are to each other (docs/auth.md).
//!
//! Terms:
//! - The **cluster secret** is 32 random bytes made once per cluster (`weft init`, or `weft up`
//!   on a new directory) and kept in a file readable by its owner only. Every other key is
//!   derived from it with HMAC-SHA256 under a label, so holding a derived key never reveals
//!   the secret or any other key.
//! - A **principal** is who signs: `client` (CLI, gateway, repair and transition executors:
//!   whoever holds the cluster secret) or `node/N` (storage node N, which holds only its own
//!   node key).
//! - An **audience** is who checks: `meta`, or `node/N`.
//!
//! Keys and who holds them:
//! - `client` key = HMAC(secret, "weft/v1/client"): signs requests of clients to meta.
//! - `node/N` key = HMAC(secret, "weft/v1/node/N"): node N signs its requests to meta with it,
//!   and clients sign their requests to node N with it. Node N can derive nothing else, so a
//!   stolen node key speaks for that node and its data only.
//! - seal key = HMAC(secret, "weft/v1/seal"): seals secrets stored in meta (S3 secret keys),
//!   so no API of meta ever answers with a secret in the clear.
//! - unit digest key = HMAC(secret, "weft/v1/unit-digest"): keys the MAC every writer records
//!   per unit and every reader checks (weft-client `digest`). Only holders of the cluster
//!   secret have it, never a node: a node cannot make a unit that passes the check.
//!
//! Invariants:
//! - A request is accepted only if its `authorization` header carries a principal the
//!   audience knows, a timestamp within [`MAX_SKEW_MS`] of the audience's clock, a nonce not
//!   seen before with that timestamp, and an HMAC over the method, the raw path and query,
//!   the principal, the audience, the timestamp, the nonce and the body's SHA-256
//!   (`x-weft-content-sha256`). Anything else is refused before any handler runs.
//! - Replay memory lives in one process, so a verifier refuses timestamps from before it was
//!   made: a request captured before a restart cannot be replayed to the new process.
//! - Replay memory is bounded: nonces are kept only while their timestamp is acceptable, at
//!   most [`MAX_REMEMBERED_NONCES`] of them; past that, requests are refused as busy (never
//!   accepted unchecked).
//! - Streamed bodies (a node's unit PUT) may be sent with the body hash
//!   [`UNSIGNED_PAYLOAD`] where the audience allows it: the request head is still signed and
//!   single-use, and what a body carries is checked end to end against meta (a unit's
//!   checksum), not by this layer.
//! - Signature comparison is constant time (the MAC crate's `verify_slice`).

use std::{
    collections::{BTreeMap, HashSet},
    fmt,
    io::Write,
    path::Path,
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

#[cfg(feature = "axum")]
pub mod axum_layer;
#[cfg(feature = "ca")]
pub mod ca;
#[cfg(feature = "reqwest")]
pub mod sign_reqwest;
#[cfg(feature = "tls")]
pub mod tls;

type HmacSha256 = Hmac<Sha256>;

/// The header carrying the signature.
pub const AUTHORIZATION_HEADER: &str = "authorization";
/// The header carrying the hex SHA-256 of the body (or [`UNSIGNED_PAYLOAD`]).
pub const CONTENT_HASH_HEADER: &str = "x-weft-content-sha256";
/// The body hash of a streamed body that is not covered by the signature.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// The scheme word that opens the authorization header.
pub const SCHEME: &str = "WEFT1-HMAC-SHA256";
/// How far a request's timestamp may be from the audience's clock. Nodes and meta of one
/// cluster keep their clocks within a second of each other with NTP; a minute leaves room and
/// bounds how long a nonce must be remembered.
pub const MAX_SKEW_MS: u64 = 60_000;
/// Most nonces one audience remembers. At the limit, new requests are refused as busy until
/// old nonces age out (~`2 * MAX_SKEW_MS`): about 17,000 requests a second sustained, and
/// about 64 MiB of memory at most.
pub const MAX_REMEMBERED_NONCES: usize = 1 << 21;
/// Width of one bucket of remembered nonces, by timestamp.
const NONCE_BUCKET_MS: u64 = 1_000;
/// The first line of a cluster secret file; the hex secret follows on the same line.
const SECRET_FILE_TAG: &str = "weft-cluster-secret-v1";
/// The first word of a node key file: `weft-node-key-v1 node=N HEX`.
const NODE_KEY_FILE_TAG: &str = "weft-node-key-v1";
/// Longest key or secret file read (they are one short line).
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Why authentication or a key file failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// No `authorization` header.
    Missing,
    /// The header is not a weft signature (wrong scheme, missing fields, bad hex).
    Malformed(String),
    /// A principal this audience does not accept.
    UnknownPrincipal(String),
    /// The timestamp is further than [`MAX_SKEW_MS`] from this audience's clock.
    Skewed { timestamp_ms: u64, now_ms: u64 },
    /// The timestamp is from before this server started (its replay memory starts empty).
    BeforeStart { timestamp_ms: u64, started_ms: u64 },
    /// The signature does not match (wrong key, or the request was altered).
    BadSignature,
    /// This exact signed request was seen already.
    Replayed,
    /// The body does not hash to the value that was signed.
    BodyMismatch,
    /// Too many recent requests to remember their nonces; try again shortly.
    Busy,
    /// A key or secret file could not be read, written or parsed.
    KeyFile(String),
    /// A sealed value could not be opened (wrong key, altered, or not sealed by weft).
    Unseal(String),
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::Missing => write!(
                f,
                "the request is not signed (every weft API needs the cluster secret: pass \
                 --secret-file or set WEFT_SECRET_FILE)"
            ),
            AuthError::Malformed(why) => write!(f, "the request's signature is malformed: {why}"),
            AuthError::UnknownPrincipal(who) => write!(f, "{who} may not call this service"),
            AuthError::Skewed { timestamp_ms, now_ms } => write!(
                f,
                "the request was signed at {timestamp_ms} ms, {} ms from this server's clock \
                 ({now_ms}); at most {MAX_SKEW_MS} ms is accepted (check the clocks)",
                timestamp_ms.abs_diff(*now_ms)
            ),
            AuthError::BeforeStart { timestamp_ms, started_ms } => write!(
                f,
                "the request was signed at {timestamp_ms} ms, before this server started \
                 ({started_ms}); sign it again (a replay after a restart, or clocks out of step)"
            ),
            AuthError::BadSignature => write!(
                f,
                "the request's signature does not match (a different cluster's secret, or an \
                 altered request)"
            ),
            AuthError::Replayed => write!(f, "this signed request was already received (replay)"),
            AuthError::BodyMismatch => write!(f, "the body does not match its signed hash"),
            AuthError::Busy => write!(f, "too many requests to check for replays; retry shortly"),
            AuthError::KeyFile(why) => f.write_str(why),
            AuthError::Unseal(why) => write!(f, "cannot open a sealed secret: {why}"),
        }
    }
}

impl std::error::Error for AuthError {}

/// Who signs a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A holder of the cluster secret: CLI, gateway, executors.
    Client,
    /// Storage node N.
    Node(u32),
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Client => f.write_str("client"),
            Principal::Node(id) => write!(f, "node/{id}"),
        }
    }
}

impl Principal {
    fn parse(text: &str) -> Option<Principal> {
        if text == "client" {
            return Some(Principal::Client);
        }
        let id = text.strip_prefix("node/")?;
        // Canonical decimal only, so one principal has one spelling.
        if id.is_empty() || (id.len() > 1 && id.starts_with('0')) {
            return None;
        }
        id.parse().ok().map(Principal::Node)
    }
}

/// Who checks a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Audience {
    Meta,
    Node(u32),
}

impl fmt::Display for Audience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Audience::Meta => f.write_str("meta"),
            Audience::Node(id) => write!(f, "node/{id}"),
        }
    }
}

/// A 32-byte HMAC key, with the principal it speaks for.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    principal: Principal,
    bytes: [u8; 32],
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}, redacted)", self.principal)
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// The bytes of an even-length hex string (either case); None for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

/// Hex SHA-256 of a body, as signed in [`CONTENT_HASH_HEADER`].
pub fn content_hash(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

/// Milliseconds since the Unix epoch by the system clock.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Writes `text` to a new file at `path` readable by its owner only, fsynced. Refuses to
/// replace an existing file.
fn write_private_file(path: &Path, text: &str) -> Result<(), AuthError> {
    use std::os::unix::fs::OpenOptionsExt;
    let failed =
        |e: std::io::Error| AuthError::KeyFile(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(failed)?;
    }
    Ok(())
}

/// Reads a key file, refusing anything but a small regular file that only its owner can read.
fn read_private_file(path: &Path, what: &str) -> Result<String, AuthError> {
    use std::os::unix::fs::MetadataExt;
    let failed = |e: std::io::Error| {
        AuthError::KeyFile(format!("cannot read the {what} {}: {e}", path.display()))
    };
    let metadata = std::fs::metadata(path).map_err(failed)?;
    if !metadata.is_file() {
        return Err(AuthError::KeyFile(format!(
            "the {what} {} is not a regular file",
            path.display()
        )));
    }
    if metadata.len() > MAX_KEY_FILE_BYTES {
        return Err(AuthError::KeyFile(format!(
            "the {what} {} is {} bytes; a weft key file is one short line",
            path.display(),
            metadata.len()
        )));
    }
    if metadata.mode() & 0o077 != 0 {
        return Err(AuthError::KeyFile(format!(
            "the {what} {} can be read by other users (mode {:o}); run `chmod 600 {}`",
            path.display(),
            metadata.mode() & 0o777,
            path.display()
        )));
    }
    std::fs::read_to_string(path).map_err(failed)
}

/// Splits a one-line key file: `TAG <N middle words> <64 hex digits>`; an error naming
/// `shape` for anything else.
fn parse_key_line<'a, const N: usize>(
    text: &'a str,
    tag: &str,
    shape: &str,
) -> Result<([&'a str; N], [u8; 32]), AuthError> {
    let bad = || AuthError::KeyFile(format!("not {shape}"));
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() != N + 2 || words[0] != tag {
        return Err(bad());
    }
    let middle: [&str; N] = words[1..=N].try_into().map_err(|_| bad())?;
    let bytes = unhex(words[N + 1]).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    Ok((middle, bytes))
}

/// The cluster secret. Its bytes never leave this type except into derived keys and the
/// secret file.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret([u8; 32]);

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(redacted)")
    }
}

impl ClusterSecret {
    /// A fresh secret from the operating system's CSPRNG.
    pub fn generate() -> ClusterSecret {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        ClusterSecret(bytes)
    }

    /// The secret file's text: one line, `weft-cluster-secret-v1 <64 hex digits>`.
    pub fn to_file_text(&self) -> String {
        format!("{SECRET_FILE_TAG} {}\n", hex(&self.0))
    }

    /// Parses a secret file's text.
    pub fn parse(text: &str) -> Result<ClusterSecret, AuthError> {
        let shape = format!("a weft cluster secret (one line `{SECRET_FILE_TAG} <64 hex digits>`)");
        let ([], bytes) = parse_key_line(text, SECRET_FILE_TAG, &shape)?;
        Ok(ClusterSecret(bytes))
    }

    /// Reads a secret file (refused when other users can read it).
    pub fn read_file(path: &Path) -> Result<ClusterSecret, AuthError> {
        let text = read_private_file(path, "cluster secret")?;
        ClusterSecret::parse(&text)
            .map_err(|e| AuthError::KeyFile(format!("{}: {e}", path.display())))
    }

    /// Writes a new secret to `path` (mode 0600); refuses to replace an existing file.
    pub fn create_file(path: &Path) -> Result<ClusterSecret, AuthError> {
        let secret = ClusterSecret::generate();
        write_private_file(path, &secret.to_file_text())?;
        Ok(secret)
    }

    /// The secret in `path`, made there first if the file does not exist yet.
    pub fn read_or_create(path: &Path) -> Result<ClusterSecret, AuthError> {
        match ClusterSecret::create_file(path) {
            Ok(secret) => Ok(secret),
            Err(_) if path.exists() => ClusterSecret::read_file(path),
            Err(error) => Err(error),
        }
    }

    /// The key clients sign their requests to meta with.
    pub fn client_key(&self) -> Key {
        Key { principal: Principal::Client, bytes: hmac(&self.0, &[b"weft/v1/client"]) }
    }

    /// Node `id`'s key.
    pub fn node_key(&self, id: u32) -> Key {
        let label = format!("weft/v1/node/{id}");
        Key { principal: Principal::Node(id), bytes: hmac(&self.0, &[label.as_bytes()]) }
    }

    /// The key that seals secrets stored in meta.
    pub fn seal_key(&self) -> SealKey {
        SealKey(hmac(&self.0, &[b"weft/v1/seal"]))
    }

    /// The key of the end-to-end unit digests (weft-client `digest`).
    pub fn unit_digest_key(&self) -> UnitDigestKey {
        UnitDigestKey(hmac(&self.0, &[b"weft/v1/unit-digest"]))
    }

    /// A signer for requests of a client to `audience`.
    pub fn signer_for(&self, audience: Audience) -> Signer {
        match audience {
            Audience::Meta => Signer::new(self.client_key(), Audience::Meta),
            Audience::Node(id) => Signer::new(self.node_key(id), audience),
        }
    }
}

/// The key of the end-to-end unit digests ([`ClusterSecret::unit_digest_key`]).
#[derive(Clone, PartialEq, Eq)]
pub struct UnitDigestKey([u8; 32]);

impl fmt::Debug for UnitDigestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UnitDigestKey(redacted)")
    }
}

impl UnitDigestKey {
    /// The key's bytes, for the digest to derive its own keys from.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl Key {
    /// Who this key speaks for.
    pub fn principal(&self) -> Principal {
        self.principal
    }

    /// A node key file's text: `weft-node-key-v1 node=N <64 hex digits>`.
    pub fn to_node_file_text(&self) -> String {
        let Principal::Node(id) = self.principal else {
            panic!("only node keys are written to node key files");
        };
        format!("{NODE_KEY_FILE_TAG} node={id} {}\n", hex(&self.bytes))
    }

    /// Parses a node key file's text.
    pub fn parse_node_file(text: &str) -> Result<Key, AuthError> {
        let shape =
            format!("a weft node key (one line `{NODE_KEY_FILE_TAG} node=N <64 hex digits>`)");
        let ([node], bytes) = parse_key_line(text, NODE_KEY_FILE_TAG, &shape)?;
        let id = node
            .strip_prefix("node=")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| AuthError::KeyFile(format!("not {shape}")))?;
        Ok(Key { principal: Principal::Node(id), bytes })
    }

    /// Reads a node key file (refused when other users can read it).
    pub fn read_node_file(path: &Path) -> Result<Key, AuthError> {
        let text = read_private_file(path, "node key")?;
        Key::parse_node_file(&text)
            .map_err(|e| AuthError::KeyFile(format!("{}: {e}", path.display())))
    }

    /// Writes this node key to a new file at `path` (mode 0600).
    pub fn write_node_file(&self, path: &Path) -> Result<(), AuthError> {
        write_private_file(path, &self.to_node_file_text())
    }
}

/// What a signature covers, in order; one line each.
#[allow(clippy::too_many_arguments)]
fn string_to_sign(
    method: &str,
    path: &str,
    query: &str,
    principal: Principal,
    audience: Audience,
    timestamp_ms: u64,
    nonce: &str,
    content_sha256: &str,
) -> String {
    format!(
        "{SCHEME}\n{method}\n{path}\n{query}\n{principal}\n{audience}\n{timestamp_ms}\n{nonce}\n{content_sha256}"
    )
}

/// Signs requests with one key for one audience.
#[derive(Clone, Debug)]
pub struct Signer {
    key: Key,
    audience: Audience,
}

impl Signer {
    pub fn new(key: Key, audience: Audience) -> Signer {
        Signer { key, audience }
    }

    pub fn audience(&self) -> Audience {
        self.audience
    }

    /// The `authorization` header for a request, signed now with a fresh nonce.
    /// `content_sha256` is [`content_hash`] of the body or [`UNSIGNED_PAYLOAD`].
    pub fn authorization(
        &self,
        method: &str,
        path: &str,
        query: &str,
        content_sha256: &str,
    ) -> String {
        let mut nonce = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut nonce);
        self.authorization_at(method, path, query, content_sha256, now_ms(), &hex(&nonce))
    }

    /// [`Signer::authorization`] with a given timestamp and nonce (for tests of the verifier).
    pub fn authorization_at(
        &self,
        method: &str,
        path: &str,
        query: &str,
        content_sha256: &str,
        timestamp_ms: u64,
        nonce: &str,
    ) -> String {
        let principal = self.key.principal;
        let text = string_to_sign(
            method,
            path,
            query,
            principal,
            self.audience,
            timestamp_ms,
            nonce,
            content_sha256,
        );
        let signature = hex(&hmac(&self.key.bytes, &[text.as_bytes()]));
        format!("{SCHEME} Credential={principal}, Timestamp={timestamp_ms}, Nonce={nonce}, Signature={signature}")
    }
}

/// The fields of an `authorization` header.
struct Parsed<'a> {
    principal: Principal,
    principal_text: &'a str,
    timestamp_ms: u64,
    nonce: &'a str,
    nonce_value: u128,
    signature: Vec<u8>,
}

fn parse_authorization(header: &str) -> Result<Parsed<'_>, AuthError> {
    let malformed = |why: &str| AuthError::Malformed(why.to_string());
    let rest = header
        .strip_prefix(SCHEME)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| malformed("the scheme is not WEFT1-HMAC-SHA256"))?;
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    for field in rest.split(',') {
        let (name, value) =
            field.trim().split_once('=').ok_or_else(|| malformed("a field has no `=`"))?;
        if fields.insert(name, value).is_some() {
            return Err(malformed("a field is given twice"));
        }
    }
    let field =
        |name: &str| fields.get(name).copied().ok_or_else(|| malformed(&format!("no {name}")));
    let principal_text = field("Credential")?;
    let principal = Principal::parse(principal_text)
        .ok_or_else(|| AuthError::UnknownPrincipal(principal_text.to_string()))?;
    let timestamp_ms =
        field("Timestamp")?.parse().map_err(|_| malformed("Timestamp is not a number"))?;
    let nonce = field("Nonce")?;
    if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(malformed("Nonce is not 32 lower-case hex digits"));
    }
    let nonce_value = u128::from_str_radix(nonce, 16).map_err(|_| malformed("bad Nonce"))?;
    let signature = unhex(field("Signature")?)
        .filter(|s| s.len() == 32)
        .ok_or_else(|| malformed("Signature is not 64 hex digits"))?;
    if fields.len() != 4 {
        return Err(malformed("unknown fields"));
    }
    Ok(Parsed { principal, principal_text, timestamp_ms, nonce, nonce_value, signature })
}

/// Nonces seen, by timestamp bucket, kept while their timestamps are acceptable.
#[derive(Debug, Default)]
struct ReplayMemory {
    buckets: BTreeMap<u64, HashSet<(u64, u128)>>,
    remembered: usize,
}

impl ReplayMemory {
    /// Records (timestamp, nonce); false when it was there already.
    fn remember(
        &mut self,
        timestamp_ms: u64,
        nonce: u128,
        now_ms: u64,
        limit: usize,
    ) -> Result<(), AuthError> {
        // Forget buckets every timestamp of which is now too old to be accepted.
        let oldest_kept = now_ms.saturating_sub(MAX_SKEW_MS) / NONCE_BUCKET_MS;
        while let Some((&bucket, _)) = self.buckets.first_key_value() {
            if bucket >= oldest_kept {
                break;
            }
            let (_, set) = self.buckets.pop_first().expect("a first bucket");
            self.remembered -= set.len();
        }
        let set = self.buckets.entry(timestamp_ms / NONCE_BUCKET_MS).or_default();
        if set.contains(&(timestamp_ms, nonce)) {
            return Err(AuthError::Replayed);
        }
        if self.remembered >= limit {
            return Err(AuthError::Busy);
        }
        set.insert((timestamp_ms, nonce));
        self.remembered += 1;
        Ok(())
    }
}

/// The keys an audience accepts.
#[derive(Clone, Debug)]
enum Accepts {
    /// Meta: the client key and every node key (derived on demand from the secret).
    Everyone(ClusterSecret),
    /// A node: its own key only.
    Only(Key),
}

/// Checks signed requests for one audience, remembering nonces to refuse replays.
#[derive(Debug)]
pub struct Verifier {
    audience: Audience,
    accepts: Accepts,
    allow_unsigned_payload: bool,
    memory: Mutex<ReplayMemory>,
    limit: usize,
    /// When this verifier was made: earlier timestamps are refused.
    started_ms: u64,
}

/// A request head as the verifier needs it.
#[derive(Clone, Copy, Debug)]
pub struct RequestHead<'a> {
    pub method: &'a str,
    /// The raw path, as received (percent-encoding untouched).
    pub path: &'a str,
    /// The raw query without `?`, or "".
    pub query: &'a str,
    pub authorization: Option<&'a str>,
    pub content_sha256: Option<&'a str>,
}

/// What a verified request head promises about its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyCheck {
    /// The body must hash to this (hex SHA-256).
    Hash(String),
    /// The body is not covered (the audience allows unsigned payloads).
    Unsigned,
}

impl Verifier {
    /// Meta's verifier: accepts the client and every node.
    pub fn for_meta(secret: &ClusterSecret) -> Verifier {
        Verifier::new(Audience::Meta, Accepts::Everyone(secret.clone()), false)
    }

    /// Node `key`'s verifier: accepts only requests signed with this node's key. Streamed
    /// unit bodies may be unsigned (see the module invariants).
    pub fn for_node(key: Key) -> Verifier {
        let Principal::Node(id) = key.principal else {
            panic!("a node verifies with a node key");
        };
        Verifier::new(Audience::Node(id), Accepts::Only(key), true)
    }

    fn new(audience: Audience, accepts: Accepts, allow_unsigned_payload: bool) -> Verifier {
        Verifier {
            audience,
            accepts,
            allow_unsigned_payload,
            memory: Mutex::new(ReplayMemory::default()),
            limit: MAX_REMEMBERED_NONCES,
            started_ms: now_ms(),
        }
    }

    /// The same verifier, as if started at `started_ms` (tests with made-up timestamps).
    pub fn started_at(mut self, started_ms: u64) -> Verifier {
        self.started_ms = started_ms;
        self
    }

    /// The same verifier with a smaller replay memory (tests of the bound).
    pub fn with_nonce_limit(mut self, limit: usize) -> Verifier {
        self.limit = limit;
        self
    }

    pub fn audience(&self) -> Audience {
        self.audience
    }

    fn key_of(&self, principal: Principal) -> Option<Key> {
        match (&self.accepts, principal) {
            (Accepts::Everyone(secret), Principal::Client) => Some(secret.client_key()),
            (Accepts::Everyone(secret), Principal::Node(id)) => Some(secret.node_key(id)),
            (Accepts::Only(key), principal) if key.principal == principal => Some(key.clone()),
            (Accepts::Only(_), _) => None,
        }
    }

    /// Checks a request head at time `now_ms`: the principal that signed it, and what its body
    /// must hash to. Remembers the nonce only once everything else holds, so a forged request
    /// cannot use up a real one's nonce.
    pub fn verify(
        &self,
        head: RequestHead<'_>,
        now_ms: u64,
    ) -> Result<(Principal, BodyCheck), AuthError> {
        let header = head.authorization.ok_or(AuthError::Missing)?;
        let parsed = parse_authorization(header)?;
        let key = self
            .key_of(parsed.principal)
            .ok_or_else(|| AuthError::UnknownPrincipal(parsed.principal_text.to_string()))?;
        let content = head
            .content_sha256
            .ok_or_else(|| AuthError::Malformed(format!("no {CONTENT_HASH_HEADER} header")))?;
        let body = if content == UNSIGNED_PAYLOAD {
            if !self.allow_unsigned_payload {
                return Err(AuthError::Malformed(format!(
                    "{} requires signed bodies",
                    self.audience
                )));
            }
            BodyCheck::Unsigned
        } else {
            if content.len() != 64 || unhex(content).is_none() {
                return Err(AuthError::Malformed(format!(
                    "{CONTENT_HASH_HEADER} is not 64 hex digits"
                )));
            }
            BodyCheck::Hash(content.to_ascii_lowercase())
        };
        if parsed.timestamp_ms.abs_diff(now_ms) > MAX_SKEW_MS {
            return Err(AuthError::Skewed { timestamp_ms: parsed.timestamp_ms, now_ms });
        }
        if parsed.timestamp_ms < self.started_ms {
            return Err(AuthError::BeforeStart {
                timestamp_ms: parsed.timestamp_ms,
                started_ms: self.started_ms,
            });
        }
        let text = string_to_sign(
            head.method,
            head.path,
            head.query,
            parsed.principal,
            self.audience,
            parsed.timestamp_ms,
            parsed.nonce,
            content,
        );
        let mut mac =
            HmacSha256::new_from_slice(&key.bytes).expect("HMAC takes keys of any length");
        mac.update(text.as_bytes());
        mac.verify_slice(&parsed.signature).map_err(|_| AuthError::BadSignature)?;
        self.memory.lock().expect("replay memory").remember(
            parsed.timestamp_ms,
            parsed.nonce_value,
            now_ms,
            self.limit,
        )?;
        Ok((parsed.principal, body))
    }

    /// How many nonces are remembered now.
    pub fn remembered(&self) -> usize {
        self.memory.lock().expect("replay memory").remembered
    }
}

/// Checks a buffered body against what the verified head promised.
pub fn check_body(check: &BodyCheck, body: &[u8]) -> Result<(), AuthError> {
    match check {
        BodyCheck::Unsigned => Ok(()),
        BodyCheck::Hash(expected) if *expected == content_hash(body) => Ok(()),
        BodyCheck::Hash(_) => Err(AuthError::BodyMismatch),
    }
}

/// Seals secrets kept in meta (ChaCha20-Poly1305 under a key derived from the cluster secret).
#[derive(Clone, PartialEq, Eq)]
pub struct SealKey([u8; 32]);

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealKey(redacted)")
    }
}

/// The prefix of sealed text: `sealed-v1:` then hex of nonce (12 bytes) and ciphertext + tag.
const SEALED_PREFIX: &str = "sealed-v1:";

impl SealKey {
    /// Seals `plaintext`, bound to `context` (e.g. the access key id, so a sealed secret
    /// cannot be moved to another record).
    pub fn seal(&self, context: &str, plaintext: &[u8]) -> String {
        use chacha20poly1305::{aead::Aead, aead::Payload, ChaCha20Poly1305};
        let cipher = ChaCha20Poly1305::new_from_slice(&self.0).expect("a 32-byte key");
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = cipher
            .encrypt(&nonce.into(), Payload { msg: plaintext, aad: context.as_bytes() })
            .expect("sealing into memory does not fail");
        format!("{SEALED_PREFIX}{}{}", hex(&nonce), hex(&sealed))
    }

    /// Opens what [`SealKey::seal`] made with the same context.
    pub fn open(&self, context: &str, sealed: &str) -> Result<Vec<u8>, AuthError> {
        use chacha20poly1305::{aead::Aead, aead::Payload, ChaCha20Poly1305};
        let bytes = sealed
            .strip_prefix(SEALED_PREFIX)
            .and_then(unhex)
            .filter(|b| b.len() >= 12 + 16)
            .ok_or_else(|| AuthError::Unseal("not sealed text".into()))?;
        let (nonce, body) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().expect("12 bytes");
        let cipher = ChaCha20Poly1305::new_from_slice(&self.0).expect("a 32-byte key");
        cipher.decrypt(&nonce.into(), Payload { msg: body, aad: context.as_bytes() }).map_err(
            |_| {
                AuthError::Unseal(
                    "the seal does not open (another cluster's secret, or altered)".into(),
                )
            },
        )
    }

    /// True when `text` looks sealed (it may still fail to open).
    pub fn is_sealed(text: &str) -> bool {
        text.starts_with(SEALED_PREFIX)
    }
}

#[cfg(test)]
mod tests;
