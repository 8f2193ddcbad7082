//! Multipart uploads: records in meta, parts as weft objects, Complete by copying.
//!
//! - An upload is the gateway record `uploads/upload/<bucket>/<upload id>` ([`UploadRecord`]:
//!   target key, the attributes the object will have and the policy resolved at create time).
//! - Part N is the weft object `<upload id>/<N:05>` in the internal bucket [`PARTS_BUCKET`]
//!   (written with the upload's policy), committed with its ETag as its attributes.
//!   (Gateways before that also wrote a record `uploads/part/<upload id>/<N:05>`; it is read
//!   for a part object without attributes and deleted with the upload.)
//! - Complete streams the listed parts, in order, into one ordinary weft object under the
//!   target key (a copy: the read path knows only single objects) committed with its
//!   attributes (ETag `md5-of-md5s-N`, the part sizes), deletes the part objects, and marks
//!   the upload completed with that result: a repeated Complete (an SDK retry) answers the
//!   same, while the object it made is still the key's.
//!
//! Invariants:
//! - Part objects are committed weft objects, so meta references their units and gc never
//!   deletes them; a re-uploaded part replaces the previous one when it commits (meta keeps
//!   the last commit of a key, with its ETag: they commit together), so the last upload of a
//!   part number is the part, whatever the order the uploads started in.
//! - Abort and Complete leave no part object or part record behind (a part object that
//!   cannot be deleted because its nodes are down is ordinary garbage for gc); Abort removes
//!   the upload record, Complete keeps it marked completed for [`COMPLETED_KEPT_MS`] (no
//!   other call sees a completed upload: they answer NoSuchUpload).
//! - [`PARTS_BUCKET`] starts with a `.`, which no S3 bucket name may: S3 cannot reach it.

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};
use weft_client::{Client, ClientError, MetaClient, Result};

use crate::attributes::Attributes;

/// The internal bucket holding the parts of uploads in progress.
pub const PARTS_BUCKET: &str = ".weft-s3-parts";
/// The gateway-record namespace of uploads and their parts.
pub const UPLOADS: &str = "uploads";
/// S3's limits: part numbers 1..=10000, every part but the last at least 5 MiB.
pub const MAX_PART_NUMBER: i32 = 10_000;
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// How long a completed upload's record answers a repeated Complete (S3 SDKs retry within
/// minutes); it is dropped after, by the next upload call in its bucket.
pub const COMPLETED_KEPT_MS: u64 = 24 * 3600 * 1000;
/// Most expired completed uploads one call drops (the rest go on later calls).
const MAX_DROPPED_PER_CALL: usize = 100;

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
    /// The attributes of the completed object but ETag and parts (the representation
    /// headers of the create); records of older gateways have only the two fields above.
    #[serde(default)]
    pub shown: Attributes,
    /// Set once completed: what the Complete answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Completed>,
    /// The object lock the completed object gets (meta's `lock` JSON), from the create's
    /// object lock headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<serde_json::Value>,
    /// The user who began it (ListMultipartUploads' Initiator and Owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator: Option<String>,
    /// The checksum algorithm the create named (`x-amz-checksum-algorithm`, S3's name): the
    /// completed object gets a full-object checksum of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_algorithm: Option<String>,
    /// The checksum type of the completed object (FULL_OBJECT or COMPOSITE: the create's
    /// `x-amz-checksum-type`, else S3's default for the algorithm). None from older
    /// gateways: FULL_OBJECT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
    /// The encryption of the upload ([`crate::sse`]): its object key, sealed; no size or
    /// salts (each part is a segment sealed with a salt of its own, and Complete lists
    /// them). None: parts and object are stored in clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<crate::sse::Sealed>,
}

/// What a Complete made (and answers again when repeated).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Completed {
    pub etag: String,
    /// Generation of the object it committed.
    pub generation: u64,
    pub completed_ms: u64,
}

impl UploadRecord {
    /// The attributes the completed object starts from.
    pub fn object_attributes(&self) -> Attributes {
        let mut shown = self.shown.clone();
        if shown.content_type.is_none() {
            shown.content_type = self.content_type.clone();
        }
        if shown.metadata.is_empty() {
            shown.metadata = self.metadata.clone();
        }
        shown
    }
}

/// One uploaded part: its part object as listed (or an older gateway's record of it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartRecord {
    pub part_number: i32,
    /// Hex MD5 of the part's bytes.
    pub etag: String,
    pub size: u64,
    /// Generation of the part object.
    pub generation: u64,
    pub last_modified_ms: u64,
    /// The flexible checksum the part was uploaded with, as the gateway computed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<crate::checksum::Stored>,
    /// A sealed part's salt (base64, [`crate::sse::Sealed::salts`]); its `size` is the
    /// plaintext's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
}

/// The algorithm of the full-object checksum a completion of `parts` gets: the one the
/// upload's create named, else the one every part was uploaded with (none when they differ
/// or one has none).
pub fn completion_checksum(
    upload: &UploadRecord,
    parts: &[PartRecord],
) -> Option<crate::checksum::Algorithm> {
    if let Some(name) = &upload.checksum_algorithm {
        return crate::checksum::Algorithm::of_name(name);
    }
    let mut algorithms = parts.iter().map(|p| p.checksum.as_ref().and_then(|c| c.algorithm()));
    let first = algorithms.next()??;
    algorithms.all(|a| a == Some(first)).then_some(first)
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

/// The part records older gateways wrote for an upload.
async fn load_part_records(meta: &MetaClient, upload_id: &str) -> Result<Vec<PartRecord>> {
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

/// Every part of an upload, by part number: its part objects, each with the ETag it was
/// committed with (or, for a part object without one, an older gateway's record of that
/// generation; a part object with neither is left out: its upload never finished).
pub async fn load_parts(meta: &MetaClient, upload_id: &str) -> Result<Vec<PartRecord>> {
    let prefix = format!("{upload_id}/");
    let mut parts = Vec::new();
    let mut legacy: Option<BTreeMap<i32, PartRecord>> = None;
    let mut after: Option<String> = None;
    loop {
        let answer = match meta.list_objects(PARTS_BUCKET, &prefix, after.as_deref(), 1000).await {
            Ok(answer) => answer,
            // No upload ever made the parts bucket: no parts.
            Err(ClientError::Meta { code, .. }) if code == "no_such_bucket" => return Ok(parts),
            Err(error) => return Err(error),
        };
        for object in answer["objects"].as_array().into_iter().flatten() {
            let key = object["key"].as_str().unwrap_or_default();
            let Some(number) = key[prefix.len()..].parse::<i32>().ok() else { continue };
            let generation = object["generation"].as_u64().unwrap_or(0);
            let part = match Attributes::of_json(object) {
                Some(shown) => Some(PartRecord {
                    part_number: number,
                    size: shown.shown_size(object["size"].as_u64().unwrap_or(0)),
                    salt: shown.sse.as_ref().map(|sealed| sealed.salts.clone()),
                    etag: shown.etag,
                    generation,
                    last_modified_ms: shown.last_modified_ms,
                    checksum: shown.checksum,
                }),
                None => {
                    if legacy.is_none() {
                        let records = load_part_records(meta, upload_id).await?;
                        legacy = Some(records.into_iter().map(|p| (p.part_number, p)).collect());
                    }
                    let records = legacy.as_ref().expect("just loaded");
                    records.get(&number).filter(|p| p.generation == generation).cloned()
                }
            };
            parts.extend(part);
        }
        match answer["next_start_after"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => return Ok(parts),
        }
    }
}

/// Names of the part records older gateways wrote for an upload (to delete with it).
pub async fn part_record_names(meta: &MetaClient, upload_id: &str) -> Result<Vec<String>> {
    Ok(load_part_records(meta, upload_id)
        .await?
        .iter()
        .map(|p| part_name(upload_id, p.part_number))
        .collect())
}

/// Every upload of a bucket still in progress. Completed uploads kept past
/// [`COMPLETED_KEPT_MS`] are dropped on the way (a bounded number per call).
pub async fn load_uploads(
    meta: &MetaClient,
    bucket: &str,
    now_ms: u64,
) -> Result<Vec<UploadRecord>> {
    let prefix = format!("upload/{bucket}/");
    let mut uploads = Vec::new();
    let mut expired = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) = meta.list_records(UPLOADS, &prefix, after.as_deref(), 999).await?;
        for (_, value) in page {
            let Ok(upload) = serde_json::from_value::<UploadRecord>(value) else { continue };
            match &upload.completed {
                None => uploads.push(upload),
                Some(done) if done.completed_ms + COMPLETED_KEPT_MS < now_ms => {
                    expired.push(upload_name(&upload.bucket, &upload.upload_id))
                }
                Some(_) => {}
            }
        }
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    for name in expired.iter().take(MAX_DROPPED_PER_CALL) {
        meta.delete_record(UPLOADS, name).await?;
    }
    Ok(uploads)
}

/// Drops every completed upload record of a bucket (the bucket is being deleted).
pub async fn drop_completed(meta: &MetaClient, bucket: &str) -> Result<()> {
    let prefix = format!("upload/{bucket}/");
    let mut after: Option<String> = None;
    loop {
        let (page, next) = meta.list_records(UPLOADS, &prefix, after.as_deref(), 999).await?;
        for (name, value) in page {
            let completed = serde_json::from_value::<UploadRecord>(value)
                .is_ok_and(|upload| upload.completed.is_some());
            if completed {
                meta.delete_record(UPLOADS, &name).await?;
            }
        }
        match next {
            Some(next) => after = Some(next),
            None => return Ok(()),
        }
    }
}

/// Deletes an upload's part objects (and older gateways' part records), then the upload
/// record, or, when `completed` is given, marks it completed instead. Part objects on down
/// nodes leave units that are garbage for gc.
pub async fn drop_upload(
    client: &Client,
    upload: &UploadRecord,
    completed: Option<Completed>,
) -> Result<()> {
    let meta = &client.meta;
    for part in load_parts(meta, &upload.upload_id).await? {
        let key = part_key(&upload.upload_id, part.part_number);
        match client.delete_object(PARTS_BUCKET, &key).await {
            Ok(_) | Err(ClientError::Meta { status: 404, .. }) => {}
            Err(error) => return Err(error),
        }
    }
    for name in part_record_names(meta, &upload.upload_id).await? {
        meta.delete_record(UPLOADS, &name).await?;
    }
    let name = upload_name(&upload.bucket, &upload.upload_id);
    match completed {
        None => {
            meta.delete_record(UPLOADS, &name).await?;
        }
        Some(completed) => {
            let done = UploadRecord { completed: Some(completed), ..upload.clone() };
            let value = serde_json::to_value(&done).expect("uploads serialize");
            meta.put_record(UPLOADS, &name, &value, false).await?;
        }
    }
    Ok(())
}

/// Aborts an upload in progress: its parts and record go.
pub async fn abort(client: &Client, upload: &UploadRecord) -> Result<()> {
    drop_upload(client, upload, None).await
}

/// The ETag of an object completed from parts with these hex MD5s: the MD5 of their
/// binary MD5s, `-N`.
pub fn multipart_etag(part_md5s: &[&str]) -> String {
    let mut md5 = crate::md5::Md5::new();
    for part in part_md5s {
        md5.update(&hex::decode(part).unwrap_or_default());
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
        use md5_reference::Digest as _;
        let expected = format!("{}-2", hex::encode(md5_reference::Md5::digest(&both)));
        assert_eq!(multipart_etag(&[a, b]), expected);
    }

    #[test]
    fn part_names_sort_by_part_number() {
        assert!(part_name("u", 9) < part_name("u", 10));
        assert!(part_key("u", 999) < part_key("u", 1000));
    }
}
