//! S3 attributes of an object (ETag, Content-Type and the other representation headers,
//! `x-amz-meta-*`, Last-Modified, part sizes): the JSON object a gateway put commits with
//! the object (`ObjectRecord::attributes` in meta), so bytes and attributes change in one
//! transaction.
//!
//! Invariants:
//! - Attributes are committed with the bytes they describe: two concurrent PUTs of a key
//!   never leave one's ETag on the other's bytes, and no reader sees an object without its
//!   attributes.
//! - Objects committed before attributes lived in meta's object record have a gateway record
//!   `object_attributes/<bucket>/<key>` naming their generation; it is read only when the
//!   object has no attributes of its own and only if its generation matches (never shown for
//!   other bytes). No new such record is written; meta deletes one with its object.
//! - An object without attributes (written by `weft put`) still has S3 attributes: ETag
//!   `weft-<generation>` (not hex, so no client takes it for an MD5), Content-Type
//!   `binary/octet-stream` (S3's default), no user metadata, Last-Modified its begin time.

use std::{
    collections::BTreeMap,
    time::{Duration, UNIX_EPOCH},
};

use s3s::dto::{Timestamp, TimestampFormat};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_client::{MetaClient, ObjectInfo, Result};

/// The gateway-record namespace of object attributes written by older gateways.
pub const OBJECT_ATTRIBUTES: &str = "object_attributes";

/// The Content-Type S3 reports for an object stored without one.
pub const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// What meta keeps of an object's S3 attributes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Attributes {
    /// Generation of the object these attributes belong to: filled from the object when
    /// read (stored only in the records of older gateways).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: u64,
    /// The ETag's value, unquoted: hex MD5, or `hex-N` for an object completed from N parts.
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-NAME: VALUE`), names lower-case without the prefix.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Milliseconds since the epoch: filled from the object's time when read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_modified_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    /// The `Expires` header as an HTTP date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// Sizes of the parts of an object completed from a multipart upload, in order
    /// (GetObject and HeadObject by `partNumber`); empty for any other object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<u64>,
    /// The checksum of each part, in order (base64, of the object's checksum algorithm),
    /// when the upload named that algorithm and every part had one: GetObject/HeadObject by
    /// `partNumber` and
    /// GetObjectAttributes' ObjectParts show them. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_checksums: Vec<String>,
    /// The object's ACL ([`crate::acl`]): its owner and grants. None for objects written
    /// before ACLs or by `weft put` (owned by their bucket's owner, private).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<crate::acl::Acl>,
    /// The object's flexible checksum ([`crate::checksum`]), computed by the gateway from
    /// the bytes it wrote; None for objects written without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<crate::checksum::Stored>,
    /// How the object is encrypted at rest ([`crate::sse`]): its sealed key, plaintext size
    /// and segments. None: stored in clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<crate::sse::Sealed>,
    /// The object's tags (PutObjectTagging, `x-amz-tagging`), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The object's S3 version id, when its bucket is versioned: filled from the object when
    /// read, never stored (it is the object's own).
    #[serde(skip)]
    pub version_id: Option<String>,
}

impl Attributes {
    /// Part `number`'s checksum (1-based), shown with the object's algorithm and type.
    pub fn part_checksum(&self, number: i32) -> Option<crate::checksum::Stored> {
        let object = self.checksum.as_ref()?;
        let value = self.part_checksums.get(usize::try_from(number).ok()?.checked_sub(1)?)?;
        Some(crate::checksum::Stored { value: value.clone(), ..object.clone() })
    }

    /// The JSON a commit carries: everything but the generation and time, which are the
    /// object's own.
    pub fn to_commit(&self) -> Value {
        let stored = Attributes { generation: 0, last_modified_ms: 0, ..self.clone() };
        serde_json::to_value(stored).expect("attributes serialize")
    }

    /// The attributes kept in an object's (or a listed object's) JSON, if any, with its
    /// generation and time.
    pub fn of_json(object: &Value) -> Option<Attributes> {
        let mut attributes: Attributes =
            serde_json::from_value(object["attributes"].clone()).ok()?;
        attributes.generation = object["generation"].as_u64().unwrap_or(0);
        attributes.last_modified_ms = object["created_ms"].as_u64().unwrap_or(0);
        attributes.version_id = object["version_id"].as_str().map(str::to_string);
        Some(attributes)
    }

    /// The Content-Type S3 shows: the one stored, else S3's default.
    pub fn content_type_or_default(&self) -> &str {
        self.content_type.as_deref().unwrap_or(DEFAULT_CONTENT_TYPE)
    }

    /// The stored Expires as a timestamp (an unparsable one is dropped).
    pub fn expires_timestamp(&self) -> Option<Timestamp> {
        let text = self.expires.as_deref()?;
        Timestamp::parse(TimestampFormat::HttpDate, text).ok()
    }
}

/// An `Expires` timestamp as the HTTP date meta keeps.
pub fn http_date(timestamp: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    timestamp.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// The record name of (bucket, key) in [`OBJECT_ATTRIBUTES`]: bucket names hold no `/`.
pub fn record_name(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}

/// The attributes S3 shows for `object`: its own, else an older gateway's record of its
/// generation, else the defaults of the module doc.
pub async fn of_object(meta: &MetaClient, object: &ObjectInfo) -> Result<Attributes> {
    if let Some(own) = Attributes::of_json(&object.raw) {
        return Ok(own);
    }
    let found =
        meta.get_record(OBJECT_ATTRIBUTES, &record_name(&object.bucket, &object.key)).await?;
    let record = found
        .and_then(|value| serde_json::from_value::<Attributes>(value).ok())
        .filter(|a| a.generation == object.generation);
    let mut shown = record.unwrap_or_else(|| defaults(object.generation, created_ms(&object.raw)));
    shown.version_id = object.raw["version_id"].as_str().map(str::to_string);
    Ok(shown)
}

/// The attributes of an object that has none (see the module invariants).
pub fn defaults(generation: u64, created_ms: u64) -> Attributes {
    Attributes {
        generation,
        etag: format!("weft-{generation}"),
        last_modified_ms: created_ms,
        ..Attributes::default()
    }
}

fn created_ms(object: &Value) -> u64 {
    object["created_ms"].as_u64().unwrap_or(0)
}

/// An S3 timestamp from milliseconds since the epoch, cut to whole seconds (HTTP dates
/// have no finer precision, so conditional requests compare like-for-like).
pub fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_secs(ms / 1000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn committed_attributes_leave_out_what_the_object_knows() {
        let attributes = Attributes {
            generation: 7,
            etag: "abc".into(),
            last_modified_ms: 5000,
            cache_control: Some("no-cache".into()),
            ..Attributes::default()
        };
        let value = attributes.to_commit();
        assert_eq!(value, json!({"etag": "abc", "cache_control": "no-cache"}));
        let object = json!({"generation": 9, "created_ms": 1234, "attributes": value});
        let read = Attributes::of_json(&object).unwrap();
        assert_eq!((read.generation, read.last_modified_ms), (9, 1234));
        assert_eq!(read.cache_control.as_deref(), Some("no-cache"));
        assert!(Attributes::of_json(&json!({"generation": 9})).is_none());
        assert_eq!(read.content_type_or_default(), DEFAULT_CONTENT_TYPE);
    }

    #[test]
    fn expires_survives_the_round_trip() {
        let when = timestamp(1_700_000_000_000);
        let text = http_date(&when).unwrap();
        assert_eq!(text, "Tue, 14 Nov 2023 22:13:20 GMT");
        let attributes = Attributes { expires: Some(text), ..Attributes::default() };
        assert_eq!(attributes.expires_timestamp(), Some(when));
    }
}
