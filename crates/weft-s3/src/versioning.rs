//! S3 versioning over meta's versions (docs/meta-api.md "Versions"): ListObjectVersions
//! paging with a delimiter, and the answers S3 gives for delete markers.
//!
//! Invariants:
//! - Entries (versions, delete markers, common prefixes) come in key order, a key's
//!   versions newest first, at most `max_keys` a page; a page is truncated only when another
//!   entry exists, and its next markers name its last entry: a version (key and version id)
//!   or a common prefix (key marker only, so the next page starts after every key under it).
//! - A read of a key whose newest version is a delete marker is 404 NoSuchKey, and a read
//!   naming a delete marker's version 405 MethodNotAllowed; both carry
//!   `x-amz-delete-marker: true` and the marker's `x-amz-version-id`, as S3's do.

use http::{HeaderMap, HeaderValue};
use s3s::{s3_error, S3Error};
use weft_client::{MetaClient, Result, VersionInfo};

use crate::attributes::Attributes;
use crate::listing::common_prefix;

/// Versions asked of meta per call.
const META_PAGE: usize = 1000;

/// One listed version or delete marker.
#[derive(Debug, Clone)]
pub struct ListedVersion {
    pub key: String,
    pub version_id: String,
    pub generation: u64,
    pub size: u64,
    pub created_ms: u64,
    pub is_latest: bool,
    pub delete_marker: bool,
    pub attributes: Option<Attributes>,
}

/// One page of ListObjectVersions.
#[derive(Debug, Default)]
pub struct VersionPage {
    pub versions: Vec<ListedVersion>,
    pub common_prefixes: Vec<String>,
    /// (next key marker, next version id marker) when truncated.
    pub next: Option<(String, Option<String>)>,
}

/// The page of versions after (`key_marker`, `version_id_marker`).
pub async fn list(
    meta: &MetaClient,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    key_marker: Option<&str>,
    version_id_marker: Option<&str>,
    max_keys: usize,
) -> Result<VersionPage> {
    let mut page = VersionPage::default();
    if max_keys == 0 {
        return Ok(page);
    }
    // A key marker that is a common prefix skips every key under it.
    let mut skipping: Option<String> = match version_id_marker {
        None => key_marker.and_then(|k| common_prefix(prefix, delimiter, k)),
        Some(_) => None,
    };
    let mut cursor: Option<(String, Option<String>)> = match &skipping {
        Some(rolled) => Some((format!("{rolled}\u{10FFFF}"), None)),
        None => key_marker.map(|k| (k.to_string(), version_id_marker.map(str::to_string))),
    };
    let mut last: Option<(String, Option<String>)> = None;
    let mut count = 0usize;
    loop {
        let (key_at, version_at) = match &cursor {
            Some((key, version)) => (Some(key.as_str()), version.as_deref()),
            None => (None, None),
        };
        let answer = meta.list_versions(bucket, prefix, key_at, version_at, META_PAGE).await?;
        for entry in answer["versions"].as_array().into_iter().flatten() {
            let key = entry["key"].as_str().unwrap_or_default().to_string();
            if skipping.as_deref().is_some_and(|s| key.starts_with(s)) {
                continue;
            }
            if count == max_keys {
                page.next = last;
                return Ok(page);
            }
            count += 1;
            match common_prefix(prefix, delimiter, &key) {
                Some(rolled) => {
                    page.common_prefixes.push(rolled.clone());
                    last = Some((rolled.clone(), None));
                    skipping = Some(rolled);
                }
                None => {
                    let version_id = entry["version_id"].as_str().unwrap_or("null").to_string();
                    last = Some((key.clone(), Some(version_id.clone())));
                    page.versions.push(ListedVersion {
                        key,
                        version_id,
                        generation: entry["generation"].as_u64().unwrap_or(0),
                        size: entry["size"].as_u64().unwrap_or(0),
                        created_ms: entry["created_ms"].as_u64().unwrap_or(0),
                        is_latest: entry["is_latest"].as_bool().unwrap_or(false),
                        delete_marker: entry["delete_marker"].as_bool().unwrap_or(false),
                        attributes: Attributes::of_json(entry),
                    });
                }
            }
        }
        let next = &answer["next"];
        let Some(next_key) = next["key_marker"].as_str() else { return Ok(page) };
        cursor = match skipping.as_deref().filter(|s| next_key.starts_with(*s)) {
            // Jump past the versions under a common prefix rather than reading them all.
            Some(rolled) => Some((format!("{rolled}\u{10FFFF}"), None)),
            None => {
                Some((next_key.to_string(), next["version_id_marker"].as_str().map(str::to_string)))
            }
        };
    }
}

/// `error` carrying `x-amz-delete-marker: true` and the marker's version id.
fn with_marker_headers(mut error: S3Error, marker: &VersionInfo) -> S3Error {
    let mut headers = HeaderMap::new();
    headers.insert("x-amz-delete-marker", HeaderValue::from_static("true"));
    if let Ok(value) = HeaderValue::from_str(&marker.version_id) {
        headers.insert("x-amz-version-id", value);
    }
    error.set_headers(headers);
    error
}

/// The 404 of a read of a key whose newest version is `marker`.
pub fn deleted_key(key: &str, marker: &VersionInfo) -> S3Error {
    with_marker_headers(s3_error!(NoSuchKey, "{key:?} was deleted (a delete marker)"), marker)
}

/// The 405 of a read naming the version of `marker`.
pub fn marker_read(key: &str, marker: &VersionInfo) -> S3Error {
    with_marker_headers(
        s3_error!(
            MethodNotAllowed,
            "version {:?} of {key:?} is a delete marker, which has no bytes",
            marker.version_id
        ),
        marker,
    )
}
