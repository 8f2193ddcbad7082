//! S3 attributes of an object (ETag, Content-Type, `x-amz-meta-*`, Last-Modified): a gateway
//! record `object_attributes/<bucket>/<key>` written right after the object commits.
//!
//! Invariants:
//! - A record names the generation of the object it describes; a record of another
//!   generation (the key was overwritten by `weft put`, or a crash left it behind) is
//!   ignored, never shown for the wrong bytes. meta deletes the record with the object.
//! - An object without a record (written by `weft put`) still has S3 attributes: ETag
//!   `weft-<generation>` (not hex, so no client takes it for an MD5), no Content-Type, no
//!   user metadata, Last-Modified its commit time.

use std::{
    collections::BTreeMap,
    time::{Duration, UNIX_EPOCH},
};

use s3s::dto::Timestamp;
use serde::{Deserialize, Serialize};
use weft_client::{MetaClient, ObjectInfo, Result};

/// The gateway-record namespace of object attributes.
pub const OBJECT_ATTRIBUTES: &str = "object_attributes";

/// What meta keeps of an object's S3 attributes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Attributes {
    /// Generation of the object these attributes belong to.
    pub generation: u64,
    /// The ETag's value, unquoted: hex MD5, or `hex-N` for an object completed from N parts.
    pub etag: String,
    #[serde(default)]
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-NAME: VALUE`), names lower-case without the prefix.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    pub last_modified_ms: u64,
}

/// The record name of (bucket, key): bucket names hold no `/`, so `bucket/` prefixes a
/// bucket's records in key order.
pub fn record_name(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}

/// The attributes of generation `generation` of (bucket, key), None if there are none.
pub async fn load(
    meta: &MetaClient,
    bucket: &str,
    key: &str,
    generation: u64,
) -> Result<Option<Attributes>> {
    let found = meta.get_record(OBJECT_ATTRIBUTES, &record_name(bucket, key)).await?;
    Ok(found
        .and_then(|value| serde_json::from_value::<Attributes>(value).ok())
        .filter(|a| a.generation == generation))
}

/// Stores the attributes of (bucket, key).
pub async fn store(
    meta: &MetaClient,
    bucket: &str,
    key: &str,
    attributes: &Attributes,
) -> Result<()> {
    let value = serde_json::to_value(attributes).expect("attributes serialize");
    meta.put_record(OBJECT_ATTRIBUTES, &record_name(bucket, key), &value, false).await
}

/// An S3 timestamp from milliseconds since the epoch, cut to whole seconds (HTTP dates
/// have no finer precision, so conditional requests compare like-for-like).
pub fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_secs(ms / 1000))
}

/// The attributes S3 shows for `object`: its record, or the defaults of the module doc.
pub fn shown(object: &ObjectInfo, record: Option<Attributes>) -> Attributes {
    record.unwrap_or_else(|| Attributes {
        generation: object.generation,
        etag: format!("weft-{}", object.generation),
        content_type: None,
        metadata: BTreeMap::new(),
        last_modified_ms: object.raw["created_ms"].as_u64().unwrap_or(0),
    })
}
