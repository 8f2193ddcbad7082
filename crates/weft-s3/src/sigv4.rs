//! AWS Signature Version 4 for requests signed in their `Authorization` header: the pieces
//! [`crate::signed_payload`] checks and re-signs with, and `weft bench s3` signs with.
//! s3s checks every request the gateway serves; this module never replaces that check, it
//! only lets the gateway re-sign a request it has verified itself.
//!
//! Invariants:
//! - [`canonical_request`] is the canonical request of the SigV4 specification as s3s
//!   builds it: header values trimmed with inner whitespace runs collapsed, repeated headers
//!   joined with commas, query pairs sorted by name (stably), the payload hash last.
//! - [`signature`] compares nothing: [`same_signature`] compares in constant time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The one algorithm this module speaks.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The payload hash of a request whose body is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// The key a day's signatures in one region and service are made with.
pub fn signing_key(secret_key: &str, day: &str, region: &str, service: &str) -> [u8; 32] {
    let mut key = hmac(format!("AWS4{secret_key}").as_bytes(), day.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    key
}

/// The hex signature of `canonical_request` sent at `amz_date` (`20261129T010203Z`) under
/// `scope` (`day/region/service/aws4_request`).
pub fn signature(key: &[u8; 32], amz_date: &str, scope: &str, canonical_request: &str) -> String {
    let to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    hex::encode(hmac(key, to_sign.as_bytes()))
}

/// Whether two signatures are equal, in time independent of where they differ.
pub fn same_signature(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Appends `input` percent-encoded as SigV4 wants: every byte but `A-Z a-z 0-9 - . _ ~`
/// (and `/` unless `encode_slash`) as `%XX`, upper-case.
pub fn uri_encode(out: &mut String, input: &str, encode_slash: bool) {
    for byte in input.bytes() {
        if byte.is_ascii_alphanumeric()
            || b"-._~".contains(&byte)
            || (byte == b'/' && !encode_slash)
        {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// `text` with every `%XX` decoded; None when an escape is bad or the bytes are not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let escape = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            out.push(u8::from_str_radix(escape, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The fields of an `Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
/// Signature=…` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization<'a> {
    /// `access-key/day/region/service/aws4_request`, as sent.
    pub credential: &'a str,
    pub access_key: &'a str,
    pub day: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    /// As sent (`;`-separated, lower-case names).
    pub signed_headers: &'a str,
    pub signature: &'a str,
}

impl<'a> Authorization<'a> {
    /// The fields of `header`; None when it is not a well-formed SigV4 header.
    pub fn parse(header: &'a str) -> Option<Authorization<'a>> {
        let rest = header.strip_prefix(ALGORITHM)?.strip_prefix(' ')?;
        let (mut credential, mut signed_headers, mut signature) = (None, None, None);
        for field in rest.split(',') {
            let (name, value) = field.trim().split_once('=')?;
            let slot = match name {
                "Credential" => &mut credential,
                "SignedHeaders" => &mut signed_headers,
                "Signature" => &mut signature,
                _ => return None,
            };
            if slot.replace(value).is_some() {
                return None;
            }
        }
        let credential: &str = credential?;
        let mut parts = credential.rsplitn(5, '/');
        let terminator = parts.next()?;
        let service = parts.next()?;
        let region = parts.next()?;
        let day = parts.next()?;
        let access_key = parts.next()?;
        if terminator != "aws4_request" || access_key.is_empty() {
            return None;
        }
        Some(Authorization {
            credential,
            access_key,
            day,
            region,
            service,
            signed_headers: signed_headers?,
            signature: signature?,
        })
    }

    /// `day/region/service/aws4_request`.
    pub fn scope(&self) -> &'a str {
        &self.credential[self.access_key.len() + 1..]
    }

    /// The header again with another signature.
    pub fn with_signature(&self, signature: &str) -> String {
        format!(
            "{ALGORITHM} Credential={}, SignedHeaders={}, Signature={signature}",
            self.credential, self.signed_headers
        )
    }
}

/// The canonical request of `method` on `canonical_uri` (already encoded) with
/// `canonical_query` (already encoded and sorted), the request's values of
/// `signed_headers` (lower-case names, any order), and `payload_hash`. None when a signed
/// header is missing or its value is not visible ASCII.
pub fn canonical_request(
    method: &str,
    canonical_uri: &str,
    canonical_query: &str,
    headers: &http::HeaderMap,
    signed_headers: &str,
    payload_hash: &str,
) -> Option<String> {
    let mut names: Vec<&str> = signed_headers.split(';').collect();
    names.sort_unstable();
    names.dedup();
    let mut out = format!("{method}\n{canonical_uri}\n{canonical_query}\n");
    for name in &names {
        out.push_str(name);
        out.push(':');
        let mut first = true;
        for value in headers.get_all(*name) {
            if !first {
                out.push(',');
            }
            first = false;
            let mut words = value.to_str().ok()?.split_whitespace();
            if let Some(word) = words.next() {
                out.push_str(word);
            }
            for word in words {
                out.push(' ');
                out.push_str(word);
            }
        }
        if first {
            return None;
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&names.join(";"));
    out.push('\n');
    out.push_str(payload_hash);
    Some(out)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `20261127T193000Z` for a time.
pub fn amz_date(time: std::time::SystemTime) -> String {
    let secs =
        time.duration_since(std::time::SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (y, m, d) = civil_date(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(59), (1970, 3, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        // 2026-11-27 is day 20_784.
        assert_eq!(civil_date(20_784), (2026, 11, 27));
        let t = std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(20_784 * 86_400 + 19 * 3600 + 31 * 60 + 5);
        assert_eq!(amz_date(t), "20261127T193105Z");
    }

    /// The GetObject example of the S3 documentation's "Signature Calculations for the
    /// Authorization Header" (examplebucket, 2013-05-24): its published signature.
    #[test]
    fn the_documented_get_object_example_signs_to_its_published_signature() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let mut headers = http::HeaderMap::new();
        headers.insert("host", "examplebucket.s3.amazonaws.com".parse().unwrap());
        headers.insert("range", "bytes=0-9".parse().unwrap());
        headers.insert("x-amz-content-sha256", empty.parse().unwrap());
        headers.insert("x-amz-date", "20130524T000000Z".parse().unwrap());
        let header = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/\
                      aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
                      Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let auth = Authorization::parse(header).unwrap();
        assert_eq!(auth.access_key, "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(auth.scope(), "20130524/us-east-1/s3/aws4_request");
        let canonical =
            canonical_request("GET", "/test.txt", "", &headers, auth.signed_headers, empty)
                .unwrap();
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            auth.day,
            auth.region,
            auth.service,
        );
        let ours = signature(&key, "20130524T000000Z", auth.scope(), &canonical);
        assert!(same_signature(&ours, auth.signature), "{ours}");
        assert!(!same_signature(&ours, &ours.replace('f', "e")));
        // The header comes back with another signature and parses to the same fields.
        let again = auth.with_signature("00");
        assert_eq!(Authorization::parse(&again).unwrap().signature, "00");
        assert_eq!(Authorization::parse(&again).unwrap().credential, auth.credential);
    }

    #[test]
    fn malformed_headers_and_escapes_are_refused() {
        for header in [
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request",
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/nope, SignedHeaders=host, Signature=1",
            "AWS4-HMAC-SHA256 Credential=b/c/d/aws4_request, SignedHeaders=host, Signature=1",
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request, SignedHeaders=host, \
             Signature=1, Signature=2",
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request, Other=x, Signature=1",
            "AWS4-HMAC-SHA1 Credential=a/b/c/d/aws4_request, SignedHeaders=host, Signature=1",
        ] {
            assert_eq!(Authorization::parse(header), None, "{header}");
        }
        assert_eq!(percent_decode("a%2Fb%20c").as_deref(), Some("a/b c"));
        assert_eq!(percent_decode("a%2"), None);
        assert_eq!(percent_decode("a%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        let mut out = String::new();
        uri_encode(&mut out, "a b/ü~", false);
        assert_eq!(out, "a%20b/%C3%BC~");
        let mut headers = http::HeaderMap::new();
        headers.insert("host", "h".parse().unwrap());
        assert_eq!(canonical_request("PUT", "/", "", &headers, "host;x-amz-date", "x"), None);
    }
}
