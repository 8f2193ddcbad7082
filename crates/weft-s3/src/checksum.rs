//! S3's flexible checksums (CRC32, CRC32C, CRC64NVME, SHA-1, SHA-256): which one a request
//! asks for, computing it as the body passes, checking it against the value the client sent
//! (a header, or an `aws-chunked` trailer read once the body ended), and the form it is kept
//! in with the object.
//!
//! Invariants:
//! - A request names at most one algorithm: `x-amz-checksum-ALGO` headers, the trailer
//!   `x-amz-trailer` announces and `x-amz-sdk-checksum-algorithm` must agree, or the request
//!   is refused (400 InvalidRequest) before its body is read.
//! - A value the client sent is checked against the bytes received before the body's last
//!   bytes reach the writer ([`crate::body`]), so a mismatch commits nothing (400 BadDigest).
//!   A trailer that was announced but never came refuses the request the same way.
//! - A value that is not the base64 of its algorithm's digest length is refused before the
//!   body is read; digests are compared as bytes, never as texts.
//! - What is kept with an object ([`Stored`]) is always one the gateway computed itself from
//!   the bytes it wrote, never a value it was only told.

use base64::Engine;
use s3s::crypto::Checksum as _;
use s3s::{s3_error, S3Error, S3Result};
use serde::{Deserialize, Serialize};

/// The algorithms S3 defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

/// Every algorithm, in S3's order.
pub const ALGORITHMS: [Algorithm; 5] =
    [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme, Algorithm::Sha1, Algorithm::Sha256];

impl Algorithm {
    /// The name S3 uses (`x-amz-sdk-checksum-algorithm`, `ChecksumAlgorithm`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "CRC32",
            Algorithm::Crc32c => "CRC32C",
            Algorithm::Crc64Nvme => "CRC64NVME",
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
        }
    }

    /// The header (and trailer) that carries its value.
    pub fn header(self) -> &'static str {
        match self {
            Algorithm::Crc32 => "x-amz-checksum-crc32",
            Algorithm::Crc32c => "x-amz-checksum-crc32c",
            Algorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            Algorithm::Sha1 => "x-amz-checksum-sha1",
            Algorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Bytes in its digest.
    pub fn digest_len(self) -> usize {
        match self {
            Algorithm::Crc32 | Algorithm::Crc32c => 4,
            Algorithm::Crc64Nvme => 8,
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
        }
    }

    /// The algorithm of an S3 name, any case.
    pub fn of_name(name: &str) -> Option<Algorithm> {
        ALGORITHMS.into_iter().find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The algorithm whose header is `header`, any case.
    pub fn of_header(header: &str) -> Option<Algorithm> {
        ALGORITHMS.into_iter().find(|a| a.header().eq_ignore_ascii_case(header.trim()))
    }
}

/// Where the client's value comes from.
#[derive(Debug, Clone)]
pub enum Expected {
    /// Nothing to check: the gateway computes the checksum and keeps it
    /// (`x-amz-sdk-checksum-algorithm` alone).
    None,
    /// A header's value, decoded.
    Header(Vec<u8>),
    /// An `aws-chunked` trailer, read when the body has ended.
    Trailer(s3s::TrailingHeaders),
}

/// The checksum a request asks for.
#[derive(Debug, Clone)]
pub struct Requested {
    pub algorithm: Algorithm,
    pub expected: Expected,
}

fn invalid(message: String) -> S3Error {
    S3Error::with_message(s3s::S3ErrorCode::InvalidRequest, message)
}

/// The digest a base64 `value` of `algorithm` stands for; refused when it is not one.
pub fn decode(algorithm: Algorithm, value: &str) -> S3Result<Vec<u8>> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()
        .filter(|bytes| bytes.len() == algorithm.digest_len());
    bytes.ok_or_else(|| invalid(format!("Value for {} header is invalid.", algorithm.header())))
}

fn header_text<'a>(headers: &'a http::HeaderMap, name: &str) -> S3Result<Option<&'a str>> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(invalid(format!("Expecting a single {name} header.")));
    }
    first.to_str().map(Some).map_err(|_| invalid(format!("Value for {name} header is invalid.")))
}

impl Requested {
    /// What the request's headers ask for (`trailing`: the request's trailers, when its body
    /// is `aws-chunked`). None: no checksum.
    pub fn of_request(
        headers: &http::HeaderMap,
        trailing: Option<s3s::TrailingHeaders>,
    ) -> S3Result<Option<Requested>> {
        let mut given = None;
        for algorithm in ALGORITHMS {
            if let Some(value) = header_text(headers, algorithm.header())? {
                if given.is_some() {
                    return Err(invalid(
                        "Expecting a single x-amz-checksum- header. Multiple checksum Types \
                         are not allowed."
                            .into(),
                    ));
                }
                given = Some((algorithm, decode(algorithm, value)?));
            }
        }
        let trailer = match header_text(headers, "x-amz-trailer")? {
            None => None,
            Some(name) => {
                // Only checksum trailers mean anything to S3; a list names one at most.
                let mut named = name.split(',').filter_map(Algorithm::of_header);
                let algorithm = named.next();
                if named.next().is_some() {
                    return Err(invalid("Expecting a single x-amz-checksum- trailer.".into()));
                }
                algorithm
            }
        };
        let sdk = match header_text(headers, "x-amz-sdk-checksum-algorithm")? {
            None => None,
            Some(name) => Some(Algorithm::of_name(name).ok_or_else(|| {
                invalid(format!(
                    "Value for x-amz-sdk-checksum-algorithm header is invalid: {name:?} \
                     (CRC32, CRC32C, CRC64NVME, SHA1 or SHA256)."
                ))
            })?),
        };
        let named: Vec<Algorithm> =
            [given.as_ref().map(|g| g.0), trailer, sdk].into_iter().flatten().collect();
        let Some(&algorithm) = named.first() else { return Ok(None) };
        if named.iter().any(|&other| other != algorithm) {
            return Err(invalid(
                "The checksum algorithms the request names (headers, trailer and \
                 x-amz-sdk-checksum-algorithm) differ."
                    .into(),
            ));
        }
        if given.is_some() && trailer.is_some() {
            return Err(invalid(format!(
                "{} is sent both as a header and as a trailer.",
                algorithm.header()
            )));
        }
        let expected = match (given, trailer) {
            (Some((_, value)), _) => Expected::Header(value),
            (None, Some(_)) => match trailing {
                Some(handle) => Expected::Trailer(handle),
                None => {
                    return Err(invalid(format!(
                        "x-amz-trailer names {} but the body is not aws-chunked.",
                        algorithm.header()
                    )))
                }
            },
            (None, None) => Expected::None,
        };
        Ok(Some(Requested { algorithm, expected }))
    }

    /// Checks `computed` against the client's value: Ok(()) when it matches or there is
    /// none to check. Call after the body ended (a trailer is read then).
    pub fn check(&self, computed: &[u8]) -> S3Result<()> {
        let trailer;
        let expected = match &self.expected {
            Expected::None => return Ok(()),
            Expected::Header(value) => value,
            Expected::Trailer(handle) => {
                let header = self.algorithm.header();
                let value = handle
                    .read(|trailers| {
                        trailers.get(header).and_then(|v| v.to_str().ok()).map(str::to_string)
                    })
                    .flatten()
                    .ok_or_else(|| {
                        invalid(format!("The body ended without its {header} trailer."))
                    })?;
                trailer = decode(self.algorithm, &value)?;
                &trailer
            }
        };
        if expected.as_slice() == computed {
            return Ok(());
        }
        Err(S3Error::with_message(
            s3s::S3ErrorCode::BadDigest,
            format!(
                "The {} you specified did not match the calculated checksum.",
                self.algorithm.name()
            ),
        ))
    }
}

impl Requested {
    /// What an UploadPart asks for, given the algorithm its upload's create named: that
    /// algorithm is computed (and kept with the part) even when the part names none; a part
    /// naming another is refused.
    pub fn for_part(
        asked: Option<Requested>,
        upload: Option<Algorithm>,
    ) -> S3Result<Option<Requested>> {
        match (asked, upload) {
            (Some(asked), Some(upload)) if asked.algorithm != upload => Err(invalid(format!(
                "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum \
                 Type: {}",
                upload.name().to_lowercase(),
                asked.algorithm.name().to_lowercase()
            ))),
            (None, Some(algorithm)) => Ok(Some(Requested { algorithm, expected: Expected::None })),
            (asked, _) => Ok(asked),
        }
    }
}

/// Checks the checksums a CompleteMultipartUpload lists for a part (`given`: the five
/// optional fields, in [`ALGORITHMS`]' order) against the one the part was stored with.
/// None given: Ok. One given that the part was not stored with, or that differs: refused
/// (400 InvalidPart).
pub fn check_listed(given: [Option<&str>; 5], stored: Option<&Stored>, part: i32) -> S3Result<()> {
    for (algorithm, value) in ALGORITHMS.into_iter().zip(given) {
        let Some(value) = value else { continue };
        let listed = decode(algorithm, value)?;
        let kept = stored
            .filter(|s| s.algorithm() == Some(algorithm))
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(&s.value).ok());
        if kept.as_deref() != Some(listed.as_slice()) {
            return Err(S3Error::with_message(
                s3s::S3ErrorCode::InvalidPart,
                format!(
                    "One or more of the specified parts could not be found: part {part}'s {} \
                     is not the one it was uploaded with.",
                    algorithm.header()
                ),
            ));
        }
    }
    Ok(())
}

/// One algorithm's running state.
pub enum Hasher {
    Crc32(s3s::crypto::Crc32),
    Crc32c(s3s::crypto::Crc32c),
    Crc64Nvme(s3s::crypto::Crc64Nvme),
    Sha1(s3s::crypto::Sha1),
    Sha256(s3s::crypto::Sha256),
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let algorithm = match self {
            Hasher::Crc32(_) => Algorithm::Crc32,
            Hasher::Crc32c(_) => Algorithm::Crc32c,
            Hasher::Crc64Nvme(_) => Algorithm::Crc64Nvme,
            Hasher::Sha1(_) => Algorithm::Sha1,
            Hasher::Sha256(_) => Algorithm::Sha256,
        };
        f.debug_tuple("Hasher").field(&algorithm).finish()
    }
}

impl Hasher {
    pub fn new(algorithm: Algorithm) -> Hasher {
        match algorithm {
            Algorithm::Crc32 => Hasher::Crc32(s3s::crypto::Crc32::new()),
            Algorithm::Crc32c => Hasher::Crc32c(s3s::crypto::Crc32c::new()),
            Algorithm::Crc64Nvme => Hasher::Crc64Nvme(s3s::crypto::Crc64Nvme::new()),
            Algorithm::Sha1 => Hasher::Sha1(s3s::crypto::Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(s3s::crypto::Sha256::new()),
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Crc32(h) => h.update(data),
            Hasher::Crc32c(h) => h.update(data),
            Hasher::Crc64Nvme(h) => h.update(data),
            Hasher::Sha1(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
        }
    }

    pub fn finalize(self) -> Vec<u8> {
        match self {
            Hasher::Crc32(h) => h.finalize().as_ref().to_vec(),
            Hasher::Crc32c(h) => h.finalize().as_ref().to_vec(),
            Hasher::Crc64Nvme(h) => h.finalize().as_ref().to_vec(),
            Hasher::Sha1(h) => h.finalize().as_ref().to_vec(),
            Hasher::Sha256(h) => h.finalize().as_ref().to_vec(),
        }
    }
}

/// The digest of `data` under `algorithm`.
pub fn digest(algorithm: Algorithm, data: &[u8]) -> Vec<u8> {
    let mut hasher = Hasher::new(algorithm);
    hasher.update(data);
    hasher.finalize()
}

/// A checksum as kept with an object version (its attributes in meta).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// The S3 name ([`Algorithm::name`]).
    pub algorithm: String,
    /// Base64 of the digest; for a composite checksum, of the digest of the parts' digests,
    /// followed by `-N` (N parts), as S3 shows it.
    pub value: String,
    /// `FULL_OBJECT` or `COMPOSITE` (S3's `ChecksumType`).
    #[serde(rename = "type")]
    pub kind: String,
}

impl Stored {
    /// The full-object checksum `digest` of `algorithm`.
    pub fn full_object(algorithm: Algorithm, digest: &[u8]) -> Stored {
        Stored {
            algorithm: algorithm.name().to_string(),
            value: base64::engine::general_purpose::STANDARD.encode(digest),
            kind: "FULL_OBJECT".to_string(),
        }
    }

    /// The algorithm it was computed with; None for a name this gateway does not know.
    pub fn algorithm(&self) -> Option<Algorithm> {
        Algorithm::of_name(&self.algorithm)
    }
}

/// The full-object checksum of an object made of parts of `(checksum, size)` in order,
/// combined from theirs without reading a byte: CRCs only (CRC32, CRC32C, CRC64NVME), and
/// only when every part has a full-object checksum of `algorithm`; None otherwise.
pub fn combine_parts<'a>(
    algorithm: Algorithm,
    parts: impl IntoIterator<Item = (Option<&'a Stored>, u64)>,
) -> Option<Stored> {
    use base64::Engine;
    let crc = match algorithm {
        Algorithm::Crc32 => crc_fast::CrcAlgorithm::Crc32IsoHdlc,
        Algorithm::Crc32c => crc_fast::CrcAlgorithm::Crc32Iscsi,
        Algorithm::Crc64Nvme => crc_fast::CrcAlgorithm::Crc64Nvme,
        Algorithm::Sha1 | Algorithm::Sha256 => return None,
    };
    let width = algorithm.digest_len();
    let mut combined: Option<u64> = None;
    for (stored, size) in parts {
        let stored =
            stored.filter(|s| s.algorithm() == Some(algorithm) && s.kind == "FULL_OBJECT")?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(&stored.value).ok()?;
        if bytes.len() != width {
            return None;
        }
        let value = bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        combined = Some(match combined {
            None => value,
            Some(before) => crc_fast::checksum_combine(crc, before, value, size),
        });
    }
    let value = combined?;
    Some(Stored::full_object(algorithm, &value.to_be_bytes()[8 - width..]))
}

/// The checksum type an upload's object gets (`x-amz-checksum-type` on the create, else
/// S3's default for the algorithm: FULL_OBJECT for CRC64NVME, COMPOSITE for the others),
/// checked against what S3 allows (FULL_OBJECT: CRC types only; COMPOSITE: not CRC64NVME).
pub fn upload_checksum_type(
    algorithm: Option<Algorithm>,
    named: Option<&str>,
) -> S3Result<Option<&'static str>> {
    let Some(algorithm) = algorithm else {
        return match named {
            None => Ok(None),
            Some(_) => Err(s3_error!(
                InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            )),
        };
    };
    let kind = match named {
        None if algorithm == Algorithm::Crc64Nvme => FULL_OBJECT,
        None => COMPOSITE,
        Some(kind) if kind.eq_ignore_ascii_case(FULL_OBJECT) => FULL_OBJECT,
        Some(kind) if kind.eq_ignore_ascii_case(COMPOSITE) => COMPOSITE,
        Some(other) => {
            return Err(s3_error!(
                InvalidRequest,
                "Value for x-amz-checksum-type header is invalid: {other:?}"
            ))
        }
    };
    let allowed = match kind {
        FULL_OBJECT => !matches!(algorithm, Algorithm::Sha1 | Algorithm::Sha256),
        _ => algorithm != Algorithm::Crc64Nvme,
    };
    if !allowed {
        return Err(s3_error!(
            InvalidRequest,
            "The {} checksum type cannot be used with the {} checksum algorithm.",
            kind,
            algorithm.name()
        ));
    }
    Ok(Some(kind))
}

/// S3's full-object checksum type.
pub const FULL_OBJECT: &str = "FULL_OBJECT";
/// S3's composite checksum type: the digest of the parts' digests, shown with `-N`.
pub const COMPOSITE: &str = "COMPOSITE";

/// The COMPOSITE checksum of an object made of parts with these checksums, in order: the
/// `algorithm` digest of their digests joined, in base64, then `-N`. None unless every part
/// has a full-object checksum of `algorithm`.
pub fn composite_of<'a>(
    algorithm: Algorithm,
    parts: impl IntoIterator<Item = Option<&'a Stored>>,
) -> Option<Stored> {
    use base64::Engine;
    let mut joined = Vec::new();
    let mut count = 0usize;
    for stored in parts {
        let stored =
            stored.filter(|s| s.algorithm() == Some(algorithm) && s.kind == FULL_OBJECT)?;
        let digest = base64::engine::general_purpose::STANDARD.decode(&stored.value).ok()?;
        if digest.len() != algorithm.digest_len() {
            return None;
        }
        joined.extend_from_slice(&digest);
        count += 1;
    }
    let value = base64::engine::general_purpose::STANDARD.encode(digest(algorithm, &joined));
    Some(Stored {
        algorithm: algorithm.name().to_string(),
        value: format!("{value}-{count}"),
        kind: COMPOSITE.to_string(),
    })
}

/// The five optional checksum fields every S3 output that shows one has, filled from a
/// stored checksum (the one field of its algorithm), and its type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub crc64nvme: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
    pub kind: Option<s3s::dto::ChecksumType>,
}

impl Shown {
    /// As the `Checksum` element GetObjectAttributes answers.
    pub fn into_checksum(self) -> s3s::dto::Checksum {
        s3s::dto::Checksum {
            checksum_crc32: self.crc32,
            checksum_crc32c: self.crc32c,
            checksum_crc64nvme: self.crc64nvme,
            checksum_sha1: self.sha1,
            checksum_sha256: self.sha256,
            checksum_type: self.kind,
        }
    }

    /// The fields of `stored` (nothing for none, or for an algorithm not known).
    pub fn of(stored: Option<&Stored>) -> Shown {
        let mut shown = Shown::default();
        let Some(stored) = stored else { return shown };
        let Some(algorithm) = stored.algorithm() else { return shown };
        let value = Some(stored.value.clone());
        match algorithm {
            Algorithm::Crc32 => shown.crc32 = value,
            Algorithm::Crc32c => shown.crc32c = value,
            Algorithm::Crc64Nvme => shown.crc64nvme = value,
            Algorithm::Sha1 => shown.sha1 = value,
            Algorithm::Sha256 => shown.sha256 = value,
        }
        shown.kind = Some(s3s::dto::ChecksumType::from(stored.kind.clone()));
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_headers as headers;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn composite_checksums_digest_the_parts_digests_and_types_follow_s3() {
        use base64::Engine;
        let parts = [b"first part".to_vec(), b"second".to_vec()];
        let stored: Vec<Stored> = parts
            .iter()
            .map(|p| Stored::full_object(Algorithm::Sha256, &digest(Algorithm::Sha256, p)))
            .collect();
        let composite = composite_of(Algorithm::Sha256, stored.iter().map(Some)).unwrap();
        let joined =
            [digest(Algorithm::Sha256, &parts[0]), digest(Algorithm::Sha256, &parts[1])].concat();
        let expected =
            base64::engine::general_purpose::STANDARD.encode(digest(Algorithm::Sha256, &joined));
        assert_eq!(composite.value, format!("{expected}-2"));
        assert_eq!(composite.kind, COMPOSITE);
        assert_eq!(composite_of(Algorithm::Sha256, [Some(&stored[0]), None]), None);
        assert_eq!(composite_of(Algorithm::Crc32, stored.iter().map(Some)), None);
        // S3's defaults and refusals.
        assert_eq!(upload_checksum_type(Some(Algorithm::Sha256), None).unwrap(), Some(COMPOSITE));
        assert_eq!(
            upload_checksum_type(Some(Algorithm::Crc64Nvme), None).unwrap(),
            Some(FULL_OBJECT)
        );
        assert_eq!(
            upload_checksum_type(Some(Algorithm::Crc32), Some("FULL_OBJECT")).unwrap(),
            Some(FULL_OBJECT)
        );
        assert!(upload_checksum_type(Some(Algorithm::Sha1), Some("FULL_OBJECT")).is_err());
        assert!(upload_checksum_type(Some(Algorithm::Crc64Nvme), Some("COMPOSITE")).is_err());
        assert!(upload_checksum_type(None, Some("COMPOSITE")).is_err());
        assert!(upload_checksum_type(Some(Algorithm::Crc32), Some("BOTH")).is_err());
        assert_eq!(upload_checksum_type(None, None).unwrap(), None);
    }

    #[test]
    fn part_crcs_combine_into_the_whole_objects_and_shas_do_not() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let cuts = [0usize, 100_000, 100_001, 300_000];
        for algorithm in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
            let parts: Vec<(Stored, u64)> = cuts
                .windows(2)
                .map(|w| {
                    let part = &data[w[0]..w[1]];
                    (Stored::full_object(algorithm, &digest(algorithm, part)), part.len() as u64)
                })
                .collect();
            let combined = combine_parts(algorithm, parts.iter().map(|(s, n)| (Some(s), *n)));
            assert_eq!(combined, Some(Stored::full_object(algorithm, &digest(algorithm, &data))));
            // A part without a checksum, or of another algorithm, combines to nothing.
            let missing = parts.iter().enumerate().map(|(i, (s, n))| ((i != 1).then_some(s), *n));
            assert_eq!(combine_parts(algorithm, missing), None);
        }
        let sha = Stored::full_object(Algorithm::Sha256, &digest(Algorithm::Sha256, &data));
        assert_eq!(combine_parts(Algorithm::Sha256, [(Some(&sha), 1)]), None);
    }
    #[test]
    fn digests_are_the_published_check_values() {
        // The check value of each CRC is its digest of "123456789" (the CRC catalogue's
        // check values); SHA digests of "abc" from FIPS 180.
        let check = b"123456789";
        assert_eq!(digest(Algorithm::Crc32, check), 0xCBF4_3926u32.to_be_bytes());
        assert_eq!(digest(Algorithm::Crc32c, check), 0xE306_9283u32.to_be_bytes());
        assert_eq!(digest(Algorithm::Crc64Nvme, check), 0xAE8B_1486_0A79_9888u64.to_be_bytes());
        assert_eq!(
            hex::encode(digest(Algorithm::Sha1, b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            hex::encode(digest(Algorithm::Sha256, b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Pieces in any cut give the digest of the whole.
        for algorithm in ALGORITHMS {
            let mut hasher = Hasher::new(algorithm);
            hasher.update(b"1234");
            hasher.update(b"");
            hasher.update(b"56789");
            assert_eq!(hasher.finalize(), digest(algorithm, check), "{algorithm:?}");
            assert_eq!(digest(algorithm, b"").len(), algorithm.digest_len());
        }
    }

    #[test]
    fn a_request_names_one_algorithm_or_is_refused() {
        let crc = b64(&digest(Algorithm::Crc32c, b"x"));
        let asked = Requested::of_request(&headers(&[("x-amz-checksum-crc32c", &crc)]), None)
            .unwrap()
            .unwrap();
        assert_eq!(asked.algorithm, Algorithm::Crc32c);
        assert!(asked.check(&digest(Algorithm::Crc32c, b"x")).is_ok());
        let wrong = asked.check(&digest(Algorithm::Crc32c, b"y")).unwrap_err();
        assert_eq!(wrong.code(), &s3s::S3ErrorCode::BadDigest);

        assert!(Requested::of_request(&headers(&[]), None).unwrap().is_none());
        let sdk_only =
            Requested::of_request(&headers(&[("x-amz-sdk-checksum-algorithm", "sha256")]), None)
                .unwrap()
                .unwrap();
        assert_eq!(sdk_only.algorithm, Algorithm::Sha256);
        assert!(sdk_only.check(b"anything").is_ok(), "nothing to check");

        let refused = |pairs: &[(&str, &str)]| {
            let error = Requested::of_request(&headers(pairs), None).unwrap_err();
            assert_eq!(error.code(), &s3s::S3ErrorCode::InvalidRequest, "{pairs:?}");
        };
        let crc32 = b64(&digest(Algorithm::Crc32, b"x"));
        refused(&[("x-amz-checksum-crc32c", &crc), ("x-amz-checksum-crc32", &crc32)]);
        refused(&[("x-amz-checksum-crc32c", &crc), ("x-amz-sdk-checksum-algorithm", "CRC32")]);
        refused(&[("x-amz-checksum-crc32c", "not base64!")]);
        refused(&[("x-amz-checksum-crc32c", &crc32[..4])]);
        refused(&[("x-amz-checksum-sha1", &crc)]);
        refused(&[("x-amz-sdk-checksum-algorithm", "md5")]);
        // A trailer needs an aws-chunked body to come in.
        refused(&[("x-amz-trailer", "x-amz-checksum-crc32")]);
    }

    #[test]
    fn parts_follow_their_uploads_algorithm_and_completions_list_theirs() {
        let sha = Requested { algorithm: Algorithm::Sha256, expected: Expected::None };
        let crc = Requested { algorithm: Algorithm::Crc32, expected: Expected::None };
        let upload = Some(Algorithm::Sha256);
        assert_eq!(
            Requested::for_part(None, upload).unwrap().unwrap().algorithm,
            Algorithm::Sha256
        );
        assert!(Requested::for_part(None, None).unwrap().is_none());
        assert_eq!(
            Requested::for_part(Some(sha), upload).unwrap().unwrap().algorithm,
            Algorithm::Sha256
        );
        assert_eq!(
            Requested::for_part(Some(crc.clone()), None).unwrap().unwrap().algorithm,
            Algorithm::Crc32
        );
        let refused = Requested::for_part(Some(crc), upload).unwrap_err();
        assert_eq!(refused.code(), &s3s::S3ErrorCode::InvalidRequest);

        let stored = Stored::full_object(Algorithm::Crc32, &digest(Algorithm::Crc32, b"part"));
        let right = stored.value.clone();
        let wrong = b64(&digest(Algorithm::Crc32, b"other"));
        assert!(check_listed([None; 5], Some(&stored), 1).is_ok());
        assert!(check_listed([None; 5], None, 1).is_ok());
        assert!(check_listed([Some(&right), None, None, None, None], Some(&stored), 1).is_ok());
        for given in [
            [Some(wrong.as_str()), None, None, None, None],
            [None, Some(right.as_str()), None, None, None],
        ] {
            let error = check_listed(given, Some(&stored), 3).unwrap_err();
            assert_eq!(error.code(), &s3s::S3ErrorCode::InvalidPart, "{given:?}");
        }
        let error = check_listed([Some(&right), None, None, None, None], None, 2).unwrap_err();
        assert_eq!(error.code(), &s3s::S3ErrorCode::InvalidPart);
    }

    #[test]
    fn stored_checksums_show_in_their_algorithms_field() {
        let stored = Stored::full_object(Algorithm::Crc64Nvme, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let shown = Shown::of(Some(&stored));
        assert_eq!(shown.crc64nvme.as_deref(), Some("AQIDBAUGBwg="));
        assert!(shown.crc32.is_none() && shown.sha256.is_none());
        assert_eq!(shown.kind.as_ref().map(|k| k.as_str()), Some("FULL_OBJECT"));
        let json = serde_json::to_value(&stored).unwrap();
        assert_eq!(json["type"], "FULL_OBJECT");
        assert_eq!(serde_json::from_value::<Stored>(json).unwrap(), stored);
        assert_eq!(Shown::of(None), Shown::default());
    }
}
