//! S3 object versioning: the versions of a key besides its current object.
//!
//! Layout:
//! - A bucket's state is [`BucketRecord::versioning`](crate::BucketRecord): absent until
//!   versioning is first enabled, then enabled or suspended, never absent again (as S3).
//!   RAIDP, geometric and weft's internal buckets cannot be versioned.
//! - The current object of a key stays in `objects` under (bucket, key), so everything that
//!   reads current objects (reads, listings, repair, scrub, transitions) is unchanged.
//! - Every other version of the key, older objects and delete markers alike, is an object of
//!   the internal bucket [`VERSIONS_BUCKET`] named by [`version_name`]: the bucket, NUL, the
//!   key, NUL, then 16 hex digits of `!generation`, so a key's versions sort together, newest
//!   generation first. Being objects, they are repaired, scrubbed and collected like any
//!   other; their units keep their keys (a unit key names the generation, never the key).
//! - A version id is the generation in decimal for an object written with versioning
//!   enabled (`ObjectRecord::versioned`), else [`NULL_VERSION`]. A delete marker is a record
//!   with no units (an empty placement) and `delete_marker` set.
//!
//! Invariants, each kept inside the one transaction of the commit or delete that changes a
//! key (both stores run the functions here over their own tables, [`VersionTables`]):
//! - The key's current object, when it has one, is its newest version; when its newest
//!   version is a delete marker it has no current object. After a version is removed, a
//!   key left with no current object whose newest version is an object gets that object
//!   back as current ([`promote`]).
//! - A key has at most one null version: writing or deleting under suspended versioning
//!   removes the previous null version (its units are garbage, returned to the caller).
//! - Nothing is archived in an unversioned bucket: there a commit or delete returns the
//!   replaced object as garbage, exactly as before versioning existed.
//!
//! - Every move of an object between its bucket and [`VERSIONS_BUCKET`] (keeping it as a
//!   version, or making it current again) bumps a store-wide counter in the same
//!   transaction ([`crate::MetaStore::version_moves`]): a reader walking every object (the
//!   garbage collector's references) sees a moved record in neither place, or in both, and
//!   uses the counter to know its walk must be repeated.
//!
//! Limits: noncurrent versions are ordered by generation, which is begin order; two
//! overlapping writes of one key may list in the order they began rather than committed
//! (the current object is always the last committed). Finding a key's null version scans
//! that key's versions.

use weft_layout::{FailureDomain, Placement};

use crate::records::{BucketRecord, ObjectRecord, ObjectState, Versioning};
use crate::store::{check_precondition, Precondition};
use crate::MetaError;

/// The internal bucket of noncurrent versions and delete markers.
pub const VERSIONS_BUCKET: &str = ".weft-versions";
/// The version id of an object written without versioning (or with it suspended).
pub const NULL_VERSION: &str = "null";

/// Which version of a key an operation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRef {
    /// The key's newest version: its current object, or a delete marker.
    Latest,
    /// The key's null version.
    Null,
    /// The version written (with versioning enabled) under this generation.
    Generation(u64),
}

impl VersionRef {
    /// Parses an S3 version id: `null` or a generation in canonical decimal.
    pub fn parse(text: &str) -> Option<VersionRef> {
        if text == NULL_VERSION {
            return Some(VersionRef::Null);
        }
        let generation: u64 = text.parse().ok()?;
        (generation.to_string() == text).then_some(VersionRef::Generation(generation))
    }

    /// Whether `record` is this version (never for [`VersionRef::Latest`]).
    pub fn names(self, record: &ObjectRecord) -> bool {
        match self {
            VersionRef::Latest => false,
            VersionRef::Null => !record.versioned,
            VersionRef::Generation(generation) => {
                record.versioned && record.generation == generation
            }
        }
    }
}

/// The name in [`VERSIONS_BUCKET`] of the version of `generation` of (bucket, key).
pub fn version_name(bucket: &str, key: &str, generation: u64) -> String {
    format!("{}{:016x}", versions_prefix(bucket, key), !generation)
}

/// The prefix every version name of (bucket, key) starts with.
pub fn versions_prefix(bucket: &str, key: &str) -> String {
    format!("{bucket}\0{key}\0")
}

/// The prefix of the version names of every key of `bucket` starting with `prefix`.
pub fn bucket_versions_prefix(bucket: &str, prefix: &str) -> String {
    format!("{bucket}\0{prefix}")
}

/// (bucket, key, generation) of a [`version_name`]; None for any other name. Exact even
/// for keys holding NUL: the bucket never does, and the generation has a fixed width.
pub fn parse_version_name(name: &str) -> Option<(&str, &str, u64)> {
    let (bucket, rest) = name.split_once('\0')?;
    let split = rest.len().checked_sub(17)?;
    let (key, tail) = (rest.get(..split)?, rest.get(split..)?);
    let hex = tail.strip_prefix('\0')?;
    let inverted = u64::from_str_radix(hex, 16).ok()?;
    (hex.len() == 16 && !key.is_empty()).then_some((bucket, key, !inverted))
}

/// `record` as a noncurrent version: the same object under its [`version_name`].
pub fn archived(record: ObjectRecord) -> ObjectRecord {
    let key = version_name(&record.bucket, &record.key, record.generation);
    ObjectRecord { bucket: VERSIONS_BUCKET.into(), key, ..record }
}

/// A version record back under its own (bucket, key); unchanged when it is not one.
pub fn unarchived(record: ObjectRecord) -> ObjectRecord {
    if record.bucket != VERSIONS_BUCKET {
        return record;
    }
    match parse_version_name(&record.key) {
        Some((bucket, key, _)) => {
            let (bucket, key) = (bucket.to_string(), key.to_string());
            ObjectRecord { bucket, key, ..record }
        }
        None => record,
    }
}

/// The record of [`VERSIONS_BUCKET`], made when a bucket is first versioned (`bucket`'s
/// policy is its default; versions keep their own).
pub(crate) fn versions_bucket(bucket: &BucketRecord, now_ms: u64) -> BucketRecord {
    BucketRecord {
        name: VERSIONS_BUCKET.into(),
        default_policy: bucket.default_policy,
        created_ms: now_ms,
        raidp: None,
        geometric: None,
        versioning: None,
        object_lock: None,
    }
}

/// Refuses setting `bucket`'s versioning to `versioning`: [`MetaError::NotVersionable`] for
/// buckets that cannot have it, [`MetaError::InvalidBucketState`] for suspending a bucket
/// with object lock (its versions must stay).
pub fn check_versioning(bucket: &BucketRecord, versioning: Versioning) -> Result<(), MetaError> {
    let refuse = |reason| Err(MetaError::NotVersionable { bucket: bucket.name.clone(), reason });
    if bucket.name.starts_with(crate::INTERNAL_BUCKET_PREFIX) {
        return refuse("weft's internal buckets are never versioned");
    }
    if bucket.raidp.is_some() {
        return refuse("a RAIDP bucket cannot be versioned (its objects live in superchunks)");
    }
    if bucket.geometric.is_some() {
        return refuse("a geometric bucket cannot be versioned (its objects are packed in bins)");
    }
    if bucket.object_lock.is_some() && versioning != Versioning::Enabled {
        return Err(MetaError::InvalidBucketState {
            bucket: bucket.name.clone(),
            reason: "a bucket with object lock keeps versioning enabled",
        });
    }
    Ok(())
}

/// The S3 bucket and key of a version record (stored under either).
pub fn s3_name(record: &ObjectRecord) -> (String, String) {
    match parse_version_name(&record.key).filter(|_| record.bucket == VERSIONS_BUCKET) {
        Some((bucket, key, _)) => (bucket.to_string(), key.to_string()),
        None => (record.bucket.clone(), record.key.clone()),
    }
}

/// The reads of a store's tables the versioning rules need, all in one transaction.
pub(crate) trait VersionReads {
    /// The bucket's record ([`MetaError::NoSuchBucket`] when there is none).
    fn bucket(&self, bucket: &str) -> Result<BucketRecord, MetaError>;
    /// The object under (bucket, key) in `objects`.
    fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError>;
    /// Objects of `bucket` whose key starts with `prefix`, in key order, at most `limit`.
    fn scan(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError>;
}

/// The operations on a store's tables the versioning rules need, all inside one write
/// transaction: [`MemStore`](crate::MemStore) and [`RedbStore`](crate::RedbStore) each
/// implement it over their own tables.
pub(crate) trait VersionTables: VersionReads {
    /// Stores `record` in `objects` under its own (bucket, key).
    fn insert_object(&mut self, record: &ObjectRecord) -> Result<(), MetaError>;
    /// Removes (bucket, key) from `objects`, and the object's pending transition.
    fn remove_object(&mut self, bucket: &str, key: &str)
        -> Result<Option<ObjectRecord>, MetaError>;
    /// A fresh generation from the store-wide counter.
    fn next_generation(&mut self) -> Result<u64, MetaError>;
    /// Counts one move of an object with units between its bucket and [`VERSIONS_BUCKET`]
    /// ([`crate::MetaStore::version_moves`]).
    fn note_move(&mut self) -> Result<(), MetaError>;
}

/// The versions of (bucket, key) in [`VERSIONS_BUCKET`], newest first, at most `limit`.
fn versions_of(
    tables: &(impl VersionReads + ?Sized),
    bucket: &str,
    key: &str,
    limit: usize,
) -> Result<Vec<ObjectRecord>, MetaError> {
    let mut found = tables.scan(VERSIONS_BUCKET, &versions_prefix(bucket, key), limit)?;
    // A key holding NUL could share the prefix; only exact names count.
    found.retain(|r| parse_version_name(&r.key).is_some_and(|(b, k, _)| b == bucket && k == key));
    Ok(found)
}

/// Removes the noncurrent null version of (bucket, key), if any; returns it.
fn take_null_version(
    tables: &mut dyn VersionTables,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectRecord>, MetaError> {
    let found = versions_of(tables, bucket, key, usize::MAX)?.into_iter().find(|r| !r.versioned);
    match found {
        Some(record) => tables.remove_object(VERSIONS_BUCKET, &record.key),
        None => Ok(None),
    }
}

/// Keeps `record` (just removed from `objects`) as a noncurrent version.
fn archive(tables: &mut dyn VersionTables, record: ObjectRecord) -> Result<(), MetaError> {
    tables.note_move()?;
    tables.insert_object(&archived(record))
}

/// What a commit of `new` under the bucket's versioning does with `replaced`, the key's
/// current object it just took out of `objects`: keeps it as a version, or returns it as
/// garbage (with the key's previous null version when `new` is the null one). Sets
/// `new.versioned`.
pub(crate) fn on_commit(
    tables: &mut dyn VersionTables,
    versioning: Option<Versioning>,
    new: &mut ObjectRecord,
    replaced: Option<ObjectRecord>,
) -> Result<Option<ObjectRecord>, MetaError> {
    new.versioned = versioning == Some(Versioning::Enabled);
    match versioning {
        None => Ok(replaced),
        Some(Versioning::Enabled) => {
            if let Some(old) = replaced {
                archive(tables, old)?;
            }
            Ok(None)
        }
        Some(Versioning::Suspended) => match replaced {
            // At most one null version: the current one was it.
            Some(old) if !old.versioned => Ok(Some(old)),
            Some(old) => {
                archive(tables, old)?;
                take_null_version(tables, &new.bucket, &new.key)
            }
            None => take_null_version(tables, &new.bucket, &new.key),
        },
    }
}

/// What a delete of a key (no version named) did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Deleted {
    /// The record removed for good: its units are garbage. None when the current object was
    /// kept as a version (or there was none).
    pub removed: Option<ObjectRecord>,
    /// The delete marker made (versioned buckets), as stored in [`VERSIONS_BUCKET`].
    pub marker: Option<ObjectRecord>,
}

/// A delete of (bucket, key) naming no version, at `now_ms`: unversioned, the current object
/// goes ([`MetaError::NoSuchKey`] when none); versioned, it stays as a version (unless it
/// is the null one and versioning is suspended) and a delete marker becomes the newest
/// version, whether or not the key had an object (S3). `precondition` is checked against
/// the current object, when there is one.
pub(crate) fn delete_latest(
    tables: &mut dyn VersionTables,
    bucket: &str,
    key: &str,
    precondition: Option<Precondition>,
    now_ms: u64,
) -> Result<Deleted, MetaError> {
    let record = tables.bucket(bucket)?;
    let current = tables.object(bucket, key)?;
    if let Some(current) = &current {
        check_precondition(Some(current), precondition, bucket, key)?;
    }
    let Some(versioning) = record.versioning else {
        return match tables.remove_object(bucket, key)? {
            Some(removed) => Ok(Deleted { removed: Some(removed), marker: None }),
            None => Err(MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() }),
        };
    };
    let enabled = versioning == Versioning::Enabled;
    let mut removed = None;
    if let Some(old) = tables.remove_object(bucket, key)? {
        if enabled || old.versioned {
            archive(tables, old)?;
        } else {
            removed = Some(old);
        }
    }
    if !enabled && removed.is_none() {
        removed = take_null_version(tables, bucket, key)?;
    }
    let placement = Placement::from_parts(
        record.default_policy,
        0,
        FailureDomain::default(),
        0,
        vec![],
        vec![],
    )
    .map_err(|e| MetaError::Store { reason: format!("an empty placement: {e}") })?;
    let marker = archived(ObjectRecord {
        bucket: bucket.into(),
        key: key.into(),
        placement,
        state: ObjectState::Committed,
        created_ms: now_ms,
        generation: tables.next_generation()?,
        parity_generation: 0,
        digests: Default::default(),
        raidp: None,
        geometric: None,
        owners: Vec::new(),
        attributes: None,
        versioned: enabled,
        delete_marker: true,
        lock: Default::default(),
    });
    tables.insert_object(&marker)?;
    Ok(Deleted { removed, marker: Some(marker) })
}

/// How a version is removed for good ([`delete_version`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VersionDelete {
    /// Checked against the version.
    pub precondition: Option<Precondition>,
    /// Removes a version under governance retention (S3's bypass header).
    pub bypass_governance: bool,
    /// The time the version's retention is checked at.
    pub now_ms: u64,
}

/// Removes version `version` of (bucket, key) for good and returns it (its units are
/// garbage), current or not; `terms.precondition` is checked against it and its lock must
/// allow it ([`crate::lock::check_removable`]). A key left with no current object gets its
/// newest version back as current when that is an object. [`MetaError::NoSuchVersion`] when
/// the key has no such version.
pub(crate) fn delete_version(
    tables: &mut dyn VersionTables,
    bucket: &str,
    key: &str,
    version: VersionRef,
    terms: VersionDelete,
) -> Result<ObjectRecord, MetaError> {
    tables.bucket(bucket)?;
    let found = find_version(tables, bucket, key, version)?;
    let Some(found) = found else {
        return Err(no_such_version(bucket, key, version));
    };
    check_precondition(Some(&found), terms.precondition, bucket, key)?;
    crate::lock::check_removable(&found, terms.bypass_governance, terms.now_ms)?;
    let removed = tables.remove_object(&found.bucket, &found.key)?;
    let removed = removed.ok_or_else(|| no_such_version(bucket, key, version))?;
    promote(tables, bucket, key)?;
    Ok(removed)
}

/// Replaces the attributes of `version` of (bucket, key) (the S3 gateway's ACL changes);
/// returns the version as stored. A delete marker has none ([`MetaError::InvalidAttributes`]).
pub(crate) fn set_version_attributes(
    tables: &mut dyn VersionTables,
    bucket: &str,
    key: &str,
    version: VersionRef,
    attributes: serde_json::Value,
) -> Result<ObjectRecord, MetaError> {
    crate::store::check_attributes(Some(&attributes), bucket, key)?;
    tables.bucket(bucket)?;
    let Some(mut found) = find_version(tables, bucket, key, version)? else {
        return Err(no_such_version(bucket, key, version));
    };
    if found.delete_marker {
        return Err(MetaError::InvalidAttributes {
            bucket: bucket.into(),
            key: key.into(),
            reason: "a delete marker has no attributes".into(),
        });
    }
    found.attributes = Some(attributes);
    tables.insert_object(&found)?;
    Ok(found)
}

/// When (bucket, key) has no current object and its newest version is an object (not a
/// delete marker), that version becomes current again.
pub(crate) fn promote(
    tables: &mut dyn VersionTables,
    bucket: &str,
    key: &str,
) -> Result<(), MetaError> {
    if tables.object(bucket, key)?.is_some() {
        return Ok(());
    }
    let newest = versions_of(tables, bucket, key, 1)?.into_iter().next();
    if let Some(newest) = newest.filter(|v| !v.delete_marker) {
        tables.note_move()?;
        tables.remove_object(VERSIONS_BUCKET, &newest.key)?;
        tables.insert_object(&unarchived(newest))?;
    }
    Ok(())
}

/// The record of `version` of (bucket, key) as stored: the current object (in its bucket) or
/// a noncurrent version or delete marker (in [`VERSIONS_BUCKET`]).
pub(crate) fn find_version(
    tables: &(impl VersionReads + ?Sized),
    bucket: &str,
    key: &str,
    version: VersionRef,
) -> Result<Option<ObjectRecord>, MetaError> {
    if let Some(current) = tables.object(bucket, key)? {
        if version == VersionRef::Latest || version.names(&current) {
            return Ok(Some(current));
        }
    }
    match version {
        VersionRef::Latest => Ok(versions_of(tables, bucket, key, 1)?.into_iter().next()),
        VersionRef::Generation(generation) => {
            let name = version_name(bucket, key, generation);
            Ok(tables.object(VERSIONS_BUCKET, &name)?.filter(|r| version.names(r)))
        }
        VersionRef::Null => {
            Ok(versions_of(tables, bucket, key, usize::MAX)?.into_iter().find(|r| !r.versioned))
        }
    }
}

pub(crate) fn no_such_version(bucket: &str, key: &str, version: VersionRef) -> MetaError {
    MetaError::NoSuchVersion {
        bucket: bucket.into(),
        key: key.into(),
        version: match version {
            VersionRef::Latest => "latest".into(),
            VersionRef::Null => NULL_VERSION.into(),
            VersionRef::Generation(generation) => generation.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_sort_newest_first_and_parse_back() {
        let (older, newer) = (version_name("b", "k", 5), version_name("b", "k", 6));
        assert!(newer < older, "{newer:?} {older:?}");
        assert_eq!(parse_version_name(&older), Some(("b", "k", 5)));
        // Versions of "a" sort before those of "a/b" (NUL is below every other byte).
        assert!(version_name("b", "a", 1) < version_name("b", "a/b", u64::MAX));
        // A key holding NUL still parses exactly.
        assert_eq!(parse_version_name(&version_name("b", "x\0y", 9)), Some(("b", "x\0y", 9)));
        for bad in ["b", "b\0k", "b\0k\0zz", "b\0\0ffffffffffffffff", "b\0k\x01fffffffffffffffe"] {
            assert_eq!(parse_version_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn version_ids_parse_only_in_canonical_form() {
        assert_eq!(VersionRef::parse("null"), Some(VersionRef::Null));
        assert_eq!(VersionRef::parse("42"), Some(VersionRef::Generation(42)));
        for bad in ["", "042", "+42", "-1", "Null", "4x", "99999999999999999999"] {
            assert_eq!(VersionRef::parse(bad), None, "{bad:?}");
        }
    }
}
