//! ListObjectsV2 over meta's key-ordered object pages: prefix, delimiter (common prefixes),
//! max-keys and continuation tokens.
//!
//! Invariants:
//! - Entries (keys and common prefixes) come in key order, each once, at most `max_keys`
//!   per page; a page is truncated only when another entry exists, and its continuation
//!   token is its last entry, so the next page starts right after it (after every key under
//!   it, when it is a common prefix).
//! - Keys are compared bytewise, as meta stores them.

use weft_client::{MetaClient, Result};

use crate::attributes::Attributes;

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    pub generation: u64,
    pub created_ms: u64,
    /// The attributes committed with it, if any.
    pub attributes: Option<Attributes>,
}

/// One page of a listing.
#[derive(Debug, Default)]
pub struct Page {
    pub objects: Vec<Listed>,
    pub common_prefixes: Vec<String>,
    /// The continuation token of the next page, when truncated.
    pub next: Option<String>,
}

/// Objects asked of meta per call.
const META_PAGE: usize = 1000;

/// The common prefix `key` rolls up into: `prefix` + what follows up to and including the
/// first `delimiter` after it.
pub fn common_prefix(prefix: &str, delimiter: Option<&str>, key: &str) -> Option<String> {
    let delimiter = delimiter.filter(|d| !d.is_empty())?;
    let rest = key.strip_prefix(prefix)?;
    let at = rest.find(delimiter)?;
    Some(format!("{prefix}{}", &rest[..at + delimiter.len()]))
}

/// The page of entries after `start` (exclusive).
pub async fn list(
    meta: &MetaClient,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    start: Option<&str>,
    max_keys: usize,
) -> Result<Page> {
    let mut page = Page::default();
    if max_keys == 0 {
        return Ok(page);
    }
    // A token that is a common prefix skips every key under it.
    let mut skipping: Option<String> = start.and_then(|s| common_prefix(prefix, delimiter, s));
    let mut cursor: Option<String> = start.map(str::to_string);
    let mut count = 0usize;
    let mut last: Option<String> = None;
    loop {
        let answer = meta.list_objects(bucket, prefix, cursor.as_deref(), META_PAGE).await?;
        let objects = answer["objects"].as_array().cloned().unwrap_or_default();
        for object in &objects {
            let key = object["key"].as_str().unwrap_or_default().to_string();
            if skipping.as_deref().is_some_and(|s| key.starts_with(s)) {
                continue;
            }
            if start.is_some_and(|s| key.as_str() <= s) {
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
                    last = Some(rolled.clone());
                    skipping = Some(rolled);
                }
                None => {
                    page.objects.push(Listed {
                        key: key.clone(),
                        size: object["size"].as_u64().unwrap_or(0),
                        generation: object["generation"].as_u64().unwrap_or(0),
                        created_ms: object["created_ms"].as_u64().unwrap_or(0),
                        attributes: Attributes::of_json(object),
                    });
                    last = Some(key);
                }
            }
        }
        match answer["next_start_after"].as_str() {
            Some(next) => {
                cursor = Some(next.to_string());
                // Jump past the keys under a common prefix rather than reading them all.
                if let Some(rolled) = skipping.as_deref().filter(|s| next.starts_with(*s)) {
                    cursor = Some(format!("{rolled}\u{10FFFF}"));
                }
            }
            None => return Ok(page),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn keys_roll_up_at_the_first_delimiter_after_the_prefix() {
        assert_eq!(common_prefix("", Some("/"), "a/b/c"), Some("a/".into()));
        assert_eq!(common_prefix("a/", Some("/"), "a/b/c"), Some("a/b/".into()));
        assert_eq!(common_prefix("a/", Some("/"), "a/c"), None);
        assert_eq!(common_prefix("", None, "a/b"), None);
        assert_eq!(common_prefix("x", Some("/"), "a/b"), None);
        assert_eq!(common_prefix("", Some("--"), "p--q--r"), Some("p--".into()));
    }
}
