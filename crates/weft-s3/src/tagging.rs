//! S3 object tags: PutObjectTagging, GetObjectTagging, DeleteObjectTagging, the
//! `x-amz-tagging` header of writes (PutObject, CopyObject with `x-amz-tagging-directive:
//! REPLACE`, CreateMultipartUpload) and `x-amz-tagging-count` on reads. Lifecycle rules
//! filter on them (crate::lifecycle). A bucket's own tags (Put/Get/DeleteBucketTagging)
//! are the gateway record `bucket_config/<bucket>/tagging`, deleted by meta with it.
//!
//! Invariants:
//! - An object's tags live in its attributes (`Attributes::tags`, with the bytes' other
//!   attributes), so they are written in the object's own commit and go with its version;
//!   a tagging call changes one version's attributes in place (meta's attributes route).
//! - Only tag sets S3 accepts are stored: at most [`MAX_TAGS`] tags, keys of 1 to
//!   [`MAX_KEY_CHARS`] characters, values of at most [`MAX_VALUE_CHARS`], both of letters,
//!   digits, spaces and `+ - = . _ : / @` only, each key once; anything else is 400
//!   InvalidTag (in AWS's words) and changes nothing.

use std::collections::BTreeMap;

use s3s::dto::Tag;
use s3s::{s3_error, S3ErrorCode::InvalidTag, S3Result};

use crate::aws_errors::worded;

/// S3's limits on one object's tags (a bucket has up to [`MAX_BUCKET_TAGS`]).
pub const MAX_TAGS: usize = 10;
pub const MAX_BUCKET_TAGS: usize = 50;
pub const MAX_KEY_CHARS: usize = 128;
pub const MAX_VALUE_CHARS: usize = 256;

/// An object's tags checked as S3 checks them (see the module invariants).
pub fn checked(
    pairs: impl IntoIterator<Item = (String, String)>,
) -> S3Result<BTreeMap<String, String>> {
    checked_up_to(pairs, MAX_TAGS)
}

/// Tags checked as S3 checks them, at most `most` of them.
fn checked_up_to(
    pairs: impl IntoIterator<Item = (String, String)>,
    most: usize,
) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for (key, value) in pairs {
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS || !key.chars().all(allowed) {
            return Err(worded(
                InvalidTag,
                "The TagKey you have provided is invalid",
                format!(
                    "a tag key has 1 to {MAX_KEY_CHARS} letters, digits, spaces or + - = . _ : / @; \
                     {key:?} has {chars} characters"
                ),
            ));
        }
        if value.chars().count() > MAX_VALUE_CHARS || !value.chars().all(allowed) {
            return Err(worded(
                InvalidTag,
                "The TagValue you have provided is invalid",
                format!(
                    "a tag value has at most {MAX_VALUE_CHARS} letters, digits, spaces or \
                     + - = . _ : / @ (tag {key:?})"
                ),
            ));
        }
        if tags.insert(key.clone(), value).is_some() {
            return Err(worded(
                InvalidTag,
                "Cannot provide multiple Tags with the same key",
                format!("tag key {key:?} is given twice"),
            ));
        }
        if tags.len() > most {
            return Err(s3_error!(InvalidTag, "at most {most} tags may be given"));
        }
    }
    Ok(tags)
}

/// The characters S3 allows in tag keys and values: letters and digits of any language,
/// spaces, and `+ - = . _ : / @`.
fn allowed(c: char) -> bool {
    c.is_alphanumeric() || c == ' ' || "+-=._:/@".contains(c)
}

/// The (key, value) pairs of an S3 TagSet (a missing value is empty).
fn pairs(tag_set: &[Tag]) -> impl Iterator<Item = (String, String)> + '_ {
    tag_set
        .iter()
        .map(|tag| (tag.key.clone().unwrap_or_default(), tag.value.clone().unwrap_or_default()))
}

/// The tags of an S3 TagSet.
pub fn from_tag_set(tag_set: &[Tag]) -> S3Result<BTreeMap<String, String>> {
    checked(pairs(tag_set))
}

/// The tags of a `<Tagging>` document (a form upload's `tagging` field).
pub fn from_document(document: &str) -> S3Result<BTreeMap<String, String>> {
    use s3s::xml::Deserialize;
    let mut reader = s3s::xml::Deserializer::new(document.as_bytes());
    let tagging = s3s::dto::Tagging::deserialize(&mut reader)
        .map_err(|e| s3_error!(MalformedXML, "the form's tagging field: {e}"))?;
    from_tag_set(&tagging.tag_set)
}

/// A bucket's tags (PutBucketTagging): as an object's, up to [`MAX_BUCKET_TAGS`].
pub fn bucket_tags(tag_set: &[Tag]) -> S3Result<BTreeMap<String, String>> {
    checked_up_to(pairs(tag_set), MAX_BUCKET_TAGS)
}

/// The record name of `bucket`'s tags (in the gateway records `bucket_config`).
pub fn record_name(bucket: &str) -> String {
    format!("{bucket}/tagging")
}

/// The tags of an `x-amz-tagging` header: URL query parameters (`k1=v1&k2=v2`).
pub fn from_header(header: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let Some(text) = header.filter(|t| !t.is_empty()) else { return Ok(BTreeMap::new()) };
    let decode = |part: &str| crate::access::percent_decode(&part.replace('+', " "));
    checked(text.split('&').filter(|pair| !pair.is_empty()).map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(key), decode(value))
    }))
}

/// An S3 TagSet of `tags`, in key order.
pub fn to_tag_set(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter().map(|(k, v)| Tag { key: Some(k.clone()), value: Some(v.clone()) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(error: s3s::S3Error) -> String {
        error.code().as_str().to_string()
    }

    #[test]
    fn tag_sets_are_checked_as_s3_checks_them() {
        let ten = (0..10).map(|i| (format!("k{i}"), format!("v{i}")));
        assert_eq!(checked(ten).unwrap().len(), 10);
        let eleven = (0..11).map(|i| (format!("k{i}"), String::new()));
        assert_eq!(code(checked(eleven).unwrap_err()), "InvalidTag");
        let long_key = [("k".repeat(129), String::new())];
        assert_eq!(code(checked(long_key).unwrap_err()), "InvalidTag");
        let longest = [("k".repeat(128), "v".repeat(256))];
        assert!(checked(longest).is_ok());
        let long_value = [("k".to_string(), "v".repeat(257))];
        assert_eq!(code(checked(long_value).unwrap_err()), "InvalidTag");
        let twice = [("k".to_string(), "1".to_string()), ("k".to_string(), "2".to_string())];
        assert_eq!(code(checked(twice).unwrap_err()), "InvalidTag");
        assert_eq!(code(checked([(String::new(), "v".to_string())]).unwrap_err()), "InvalidTag");
    }

    #[test]
    fn tags_hold_letters_digits_spaces_and_s3s_few_signs_only() {
        let one = |k: &str, v: &str| checked([(k.to_string(), v.to_string())]);
        assert!(one("Team Ω-7 +=._:/@", "größe 12:30/@").is_ok());
        for key in ["user!name", "foo#bar", "data%20", "a*b"] {
            let error = one(key, "v").unwrap_err();
            assert_eq!(
                error.message().unwrap().split(crate::aws_errors::DETAIL_MARK).next(),
                Some("The TagKey you have provided is invalid")
            );
        }
        for value in ["name?test", "`path", "comma,separated", "semicolon;test", "(p)"] {
            let error = one("k", value).unwrap_err();
            assert_eq!(
                error.message().unwrap().split(crate::aws_errors::DETAIL_MARK).next(),
                Some("The TagValue you have provided is invalid")
            );
        }
    }

    #[test]
    fn tagging_documents_are_read_and_checked() {
        let tags = from_document(
            "<Tagging><TagSet><Tag><Key>env</Key><Value>test</Value></Tag></TagSet></Tagging>",
        )
        .unwrap();
        assert_eq!(tags.into_iter().collect::<Vec<_>>(), [("env".into(), "test".into())]);
        assert_eq!(code(from_document("<Tagging><TagSet>").unwrap_err()), "MalformedXML");
        let bad = "<Tagging><TagSet><Tag><Key>a*b</Key><Value>v</Value></Tag></TagSet></Tagging>";
        assert_eq!(code(from_document(bad).unwrap_err()), "InvalidTag");
    }

    #[test]
    fn the_tagging_header_is_url_query_parameters() {
        let tags = from_header(Some("a=1&b%20c=x%3Dy&empty=&flag")).unwrap();
        let want: BTreeMap<String, String> =
            [("a", "1"), ("b c", "x=y"), ("empty", ""), ("flag", "")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(tags, want);
        assert_eq!(from_header(Some("k=a+b")).unwrap()["k"], "a b");
        assert!(from_header(None).unwrap().is_empty());
    }
}
