//! Multipart uploads: records in meta, parts as weft objects, Complete by copying.
//!
//! - An upload is the gateway record `uploads/upload/<bucket>/<upload id>` ([`UploadRecord`]:
//!   target key, Content-Type, user metadata and the policy resolved at create time).
//! - Part N is the weft object `<upload id>/<N:05>` in the internal bucket [`PARTS_BUCKET`]
//!   (written with the upload's policy) plus the record `uploads/part/<upload id>/<N:05>`
//!   ([`PartRecord`]: ETag, size, the part object's generation).
//! - Complete streams the listed parts, in order, into one ordinary weft object under the
//!   target key (a copy: the read path knows only single objects), writes its attributes
//!   (ETag `md5-of-md5s-N`), then deletes the part objects and records and the upload.
//!
//! Invariants:
//! - Part objects are committed weft objects, so meta references their units and gc never
//!   deletes them; a re-uploaded part replaces the previous one (weft-client deletes its
//!   units), so only the last upload of a part number exists.
//! - Abort and Complete leave no part object, part record or upload record behind (a part
//!   object that cannot be deleted because its nodes are down is ordinary garbage for gc).
//! - [`PARTS_BUCKET`] starts with a `.`, which no S3 bucket name may: S3 cannot reach it.

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};
use weft_client::{MetaClient, Result};

/// The internal bucket holding the parts of uploads in progress.
pub const PARTS_BUCKET: &str = ".weft-s3-parts";
/// The gateway-record namespace of uploads and their parts.
pub const UPLOADS: &str = "uploads";
/// S3's limits: part numbers 1..=10000, every part but the last at least 5 MiB.
pub const MAX_PART_NUMBER: i32 = 10_000;
pub const MIN_PART_BYTES: u64 = 5 << 20;

/// An upload in progress.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UploadRecord {
    pub bucket: String,
    pub key: String,
    pub upload_id: String,
    pub initiated_ms: u64,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The policy (a `StripedLayout`) of the parts and of the completed object.
    pub policy: serde_json::Value,
}

/// One uploaded part.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartRecord {
    pub part_number: i32,
    /// Hex MD5 of the part's bytes.
    pub etag: String,
    pub size: u64,
    /// Generation of the part object.
    pub generation: u64,
    pub last_modified_ms: u64,
}

/// A fresh upload id: 32 hex digits.
pub fn new_upload_id() -> String {
    let bytes: [u8; 16] = rand::thread_rng().gen();
    hex::encode(bytes)
}

pub fn upload_name(bucket: &str, upload_id: &str) -> String {
    format!("upload/{bucket}/{upload_id}")
}

pub fn part_name(upload_id: &str, part_number: i32) -> String {
    format!("part/{upload_id}/{part_number:05}")
}

/// The key of a part's object in [`PARTS_BUCKET`].
pub fn part_key(upload_id: &str, part_number: i32) -> String {
    format!("{upload_id}/{part_number:05}")
}

/// The upload `upload_id` of (bucket, key), if it exists.
pub async fn load_upload(
    meta: &MetaClient,
    bucket: &str,
    key: &str,
    upload_id: &str,
) -> Result<Option<UploadRecord>> {
    let found = meta.get_record(UPLOADS, &upload_name(bucket, upload_id)).await?;
    Ok(found.and_then(|v| serde_json::from_value::<UploadRecord>(v).ok()).filter(|u| u.key == key))
}

/// Every part record of an upload, by part number.
pub async fn load_parts(meta: &MetaClient, upload_id: &str) -> Result<Vec<PartRecord>> {
    let prefix = format!("part/{upload_id}/");
    let mut parts = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = meta.list_records(UPLOADS, &prefix, after.as_deref(), 999).await?;
        parts.extend(page.into_iter().filter_map(|(_, v)| serde_json::from_value(v).ok()));
        match next {
            Some(next) => after = Some(next),
            None => return Ok(parts),
        }
    }
}

/// Every upload of a bucket.
pub async fn load_uploads(meta: &MetaClient, bucket: &str) -> Result<Vec<UploadRecord>> {
    let prefix = format!("upload/{bucket}/");
    let mut uploads = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = meta.list_records(UPLOADS, &prefix, after.as_deref(), 999).await?;
        uploads.extend(page.into_iter().filter_map(|(_, v)| serde_json::from_value(v).ok()));
        match next {
            Some(next) => after = Some(next),
            None => return Ok(uploads),
        }
    }
}

/// The ETag of an object completed from parts with these hex MD5s: the MD5 of their
/// binary MD5s, `-N`.
pub fn multipart_etag(part_md5s: &[&str]) -> String {
    use md5::{Digest, Md5};
    let mut md5 = Md5::new();
    for part in part_md5s {
        md5.update(hex::decode(part).unwrap_or_default());
    }
    format!("{}-{}", hex::encode(md5.finalize()), part_md5s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multipart_etag_is_the_md5_of_the_part_md5s() {
        // Two parts "a" and "b": md5("a") ‖ md5("b"), hashed.
        let a = "0cc175b9c0f1b6a831c399e269772661";
        let b = "92eb5ffee6ae2fec3ad71c777531578f";
        let mut both = hex::decode(a).unwrap();
        both.extend(hex::decode(b).unwrap());
        use md5::{Digest, Md5};
        let expected = format!("{}-2", hex::encode(Md5::digest(&both)));
        assert_eq!(multipart_etag(&[a, b]), expected);
    }

    #[test]
    fn part_names_sort_by_part_number() {
        assert!(part_name("u", 9) < part_name("u", 10));
        assert!(part_key("u", 999) < part_key("u", 1000));
    }
}
