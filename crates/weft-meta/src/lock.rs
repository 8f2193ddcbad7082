//! S3 object lock (WORM): retention periods and legal holds on versions of a versioned
//! bucket, enforced by meta itself, so no client, gateway or tool can remove a locked version.
//!
//! Model:
//! - A bucket has object lock once [`BucketRecord::object_lock`] is set, and never loses it
//!   (S3 has no way back). Setting it requires versioning enabled; a bucket with it cannot
//!   have versioning suspended ([`crate::versions::check_versioning`]).
//! - A version carries its own [`ObjectLock`]: a retention (mode and an instant until
//!   which it holds) and a legal hold. A write gets the lock its writer asked for, or else
//!   the bucket's default retention counted from the write's creation time.
//! - A delete marker is never locked.
//!
//! Invariants (each checked inside the transaction that would break it):
//! - A version with a legal hold, or with a retention whose instant is still ahead, is never
//!   removed for good, except a governance retention when the caller asked to bypass it
//!   ([`check_removable`]). Removal paths that take no clock (`delete_object`) refuse any
//!   locked version outright.
//! - A compliance retention still ahead is only ever extended, never shortened, removed or
//!   turned into governance; a governance one is changed in those ways only with bypass
//!   ([`changed`]). Legal holds may always be set and cleared.
//! - Only buckets with object lock take locks: a lock asked of any other bucket is refused
//!   with [`MetaError::ObjectLockNotEnabled`], nothing written.

use serde::{Deserialize, Serialize};

use crate::records::{BucketRecord, ObjectRecord};
use crate::versions::{find_version, no_such_version, VersionRef, VersionTables};
use crate::MetaError;

/// One day, in milliseconds.
const DAY_MS: u64 = 24 * 3600 * 1000;
/// Longest default retention (S3's limits: 36500 days or 100 years).
pub const MAX_DEFAULT_RETENTION_DAYS: u32 = 36_500;
/// Longest default retention in years.
pub const MAX_DEFAULT_RETENTION_YEARS: u32 = 100;

/// How strictly a retention holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionMode {
    /// Holds unless the caller bypasses it (S3's `x-amz-bypass-governance-retention`).
    Governance,
    /// Holds for everyone until its instant; may only be extended.
    Compliance,
}

impl RetentionMode {
    /// `governance` / `compliance`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionMode::Governance => "governance",
            RetentionMode::Compliance => "compliance",
        }
    }
}

/// A retention: the version stays until `until_ms` (milliseconds since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    pub mode: RetentionMode,
    pub until_ms: u64,
}

impl Retention {
    /// Whether it still holds at `now_ms`.
    pub fn holds(&self, now_ms: u64) -> bool {
        self.until_ms > now_ms
    }
}

/// The lock of one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectLock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
}

impl ObjectLock {
    /// No retention and no legal hold.
    pub fn is_none(&self) -> bool {
        self.retention.is_none() && !self.legal_hold
    }
}

/// A bucket's object lock configuration: present once object lock is enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketLock {
    /// The retention every new version gets unless its writer asks for another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_retention: Option<DefaultRetention>,
}

/// A default retention: a mode and a period of either days or years (exactly one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultRetention {
    pub mode: RetentionMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub years: Option<u32>,
}

impl DefaultRetention {
    /// The retention of a version created at `created_ms` (a year counts 365 days).
    pub fn from(&self, created_ms: u64) -> Retention {
        let days = u64::from(self.days.unwrap_or(0)) + 365 * u64::from(self.years.unwrap_or(0));
        Retention { mode: self.mode, until_ms: created_ms.saturating_add(days * DAY_MS) }
    }
}

/// A change to one version's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockChange {
    /// Sets (or, with None, removes) the retention.
    Retention(Option<Retention>),
    /// Sets or clears the legal hold.
    LegalHold(bool),
}

/// Refuses a bucket lock configuration S3 would refuse: a default retention needs exactly
/// one period, of at least one day (year) and at most [`MAX_DEFAULT_RETENTION_DAYS`]
/// ([`MAX_DEFAULT_RETENTION_YEARS`]).
pub fn check_bucket_lock(bucket: &str, lock: &BucketLock) -> Result<(), MetaError> {
    let Some(rule) = lock.default_retention else {
        return Ok(());
    };
    let refuse = |reason: String| Err(MetaError::InvalidLock { bucket: bucket.into(), reason });
    match (rule.days, rule.years) {
        (Some(_), Some(_)) | (None, None) => {
            refuse("a default retention has days or years, exactly one of them".into())
        }
        (Some(days), None) if days == 0 || days > MAX_DEFAULT_RETENTION_DAYS => refuse(format!(
            "a default retention of {days} days: it must be 1 to {MAX_DEFAULT_RETENTION_DAYS}"
        )),
        (None, Some(years)) if years == 0 || years > MAX_DEFAULT_RETENTION_YEARS => {
            refuse(format!(
                "a default retention of {years} years: it must be 1 to \
                 {MAX_DEFAULT_RETENTION_YEARS}"
            ))
        }
        _ => Ok(()),
    }
}

/// `bucket` with object lock enabled and configured as `lock`: refused with
/// [`MetaError::InvalidBucketState`] unless its versioning is enabled.
pub fn locked_bucket(
    mut bucket: BucketRecord,
    lock: BucketLock,
) -> Result<BucketRecord, MetaError> {
    check_bucket_lock(&bucket.name, &lock)?;
    if bucket.versioning != Some(crate::Versioning::Enabled) {
        return Err(MetaError::InvalidBucketState {
            bucket: bucket.name,
            reason: "object lock needs versioning enabled",
        });
    }
    bucket.object_lock = Some(lock);
    Ok(bucket)
}

/// The lock a new version of `bucket` gets at commit: the one its writer asked for, else the
/// bucket's default retention (from `new.created_ms`). A lock asked of a bucket without
/// object lock is refused with [`MetaError::ObjectLockNotEnabled`].
pub(crate) fn on_commit(
    bucket: &BucketRecord,
    new: &mut ObjectRecord,
    requested: Option<ObjectLock>,
) -> Result<(), MetaError> {
    let Some(config) = &bucket.object_lock else {
        if requested.is_some_and(|lock| !lock.is_none()) {
            return Err(MetaError::ObjectLockNotEnabled { bucket: bucket.name.clone() });
        }
        return Ok(());
    };
    let mut lock = requested.unwrap_or_default();
    if lock.retention.is_none() {
        lock.retention = config.default_retention.map(|rule| rule.from(new.created_ms));
    }
    new.lock = lock;
    Ok(())
}

/// Refuses removing `record` for good at `now_ms` while its lock holds
/// ([`MetaError::ObjectLocked`]); a governance retention yields to `bypass_governance`.
pub fn check_removable(
    record: &ObjectRecord,
    bypass_governance: bool,
    now_ms: u64,
) -> Result<(), MetaError> {
    let refuse = |reason| {
        let (bucket, key) = crate::versions::s3_name(record);
        Err(MetaError::ObjectLocked { bucket, key, version: record.version_id(), reason })
    };
    if record.lock.legal_hold {
        return refuse("it is under a legal hold");
    }
    match record.lock.retention {
        Some(retention) if retention.holds(now_ms) => match retention.mode {
            RetentionMode::Compliance => refuse("it is under compliance retention"),
            RetentionMode::Governance if !bypass_governance => {
                refuse("it is under governance retention (bypass it to delete)")
            }
            RetentionMode::Governance => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Refuses removing a locked `record` where no clock is at hand (`delete_object`): any lock,
/// even a retention already past, is refused there.
pub fn check_unlocked(record: &ObjectRecord) -> Result<(), MetaError> {
    if record.lock.is_none() {
        return Ok(());
    }
    let (bucket, key) = crate::versions::s3_name(record);
    Err(MetaError::ObjectLocked {
        bucket,
        key,
        version: record.version_id(),
        reason: "it has an object lock; delete it as a version",
    })
}

/// `old` after `change` at `now_ms`, or why the change is refused (the rules of the module
/// header), for [`MetaError::ObjectLocked`].
pub fn changed(
    old: ObjectLock,
    change: LockChange,
    bypass_governance: bool,
    now_ms: u64,
) -> Result<ObjectLock, &'static str> {
    let retention = match change {
        LockChange::LegalHold(on) => return Ok(ObjectLock { legal_hold: on, ..old }),
        LockChange::Retention(retention) => retention,
    };
    if let Some(current) = old.retention.filter(|r| r.holds(now_ms)) {
        let keeps = retention
            .is_some_and(|new| new.mode == current.mode && new.until_ms >= current.until_ms);
        if !keeps {
            match current.mode {
                RetentionMode::Compliance => {
                    return Err("a compliance retention may only be extended")
                }
                RetentionMode::Governance if !bypass_governance => {
                    return Err("a governance retention may only be extended unless it is bypassed")
                }
                RetentionMode::Governance => {}
            }
        }
    }
    Ok(ObjectLock { retention, ..old })
}

/// Changes the lock of `version` of (bucket, key) at `now_ms` and returns the version as
/// stored. Refused with [`MetaError::ObjectLockNotEnabled`] in a bucket without object lock,
/// [`MetaError::InvalidLock`] for a delete marker or a new retention already past, and
/// [`MetaError::ObjectLocked`] by the rules of [`changed`].
pub(crate) fn set_version_lock(
    tables: &mut dyn VersionTables,
    bucket: &str,
    key: &str,
    version: VersionRef,
    change: LockChange,
    bypass_governance: bool,
    now_ms: u64,
) -> Result<ObjectRecord, MetaError> {
    let record = tables.bucket(bucket)?;
    if record.object_lock.is_none() {
        return Err(MetaError::ObjectLockNotEnabled { bucket: bucket.into() });
    }
    let Some(mut found) = find_version(tables, bucket, key, version)? else {
        return Err(no_such_version(bucket, key, version));
    };
    let invalid = |reason: &str| MetaError::InvalidLock {
        bucket: bucket.into(),
        reason: format!("{key:?} version {}: {reason}", found.version_id()),
    };
    if found.delete_marker {
        return Err(invalid("a delete marker cannot be locked"));
    }
    if let LockChange::Retention(Some(retention)) = change {
        if !retention.holds(now_ms) {
            return Err(invalid("a retention must end in the future"));
        }
    }
    found.lock = changed(found.lock, change, bypass_governance, now_ms).map_err(|reason| {
        MetaError::ObjectLocked {
            bucket: bucket.into(),
            key: key.into(),
            version: found.version_id(),
            reason,
        }
    })?;
    tables.insert_object(&found)?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn retention(mode: RetentionMode, until_ms: u64) -> Option<Retention> {
        Some(Retention { mode, until_ms })
    }

    #[test]
    fn compliance_only_extends_and_governance_yields_to_bypass() {
        use RetentionMode::{Compliance, Governance};
        let lock = |r| ObjectLock { retention: r, legal_hold: false };
        let compliance = lock(retention(Compliance, NOW + 10));
        // Extending (or keeping) is always allowed.
        let longer = LockChange::Retention(retention(Compliance, NOW + 20));
        assert_eq!(
            changed(compliance, longer, false, NOW).unwrap().retention.unwrap().until_ms,
            NOW + 20
        );
        // Shortening, removing or changing the mode of compliance is refused, bypass or not.
        for change in [
            LockChange::Retention(retention(Compliance, NOW + 5)),
            LockChange::Retention(None),
            LockChange::Retention(retention(Governance, NOW + 20)),
        ] {
            assert!(changed(compliance, change, true, NOW).is_err(), "{change:?}");
        }
        // Governance: the same changes need bypass.
        let governance = lock(retention(Governance, NOW + 10));
        for change in [
            LockChange::Retention(retention(Governance, NOW + 5)),
            LockChange::Retention(None),
            LockChange::Retention(retention(Compliance, NOW + 10)),
        ] {
            assert!(changed(governance, change, false, NOW).is_err(), "{change:?}");
            assert!(changed(governance, change, true, NOW).is_ok(), "{change:?}");
        }
        // A retention already past no longer holds anything.
        let past = LockChange::Retention(retention(Governance, NOW + 1));
        assert!(changed(compliance, past, false, NOW + 10).is_ok());
        // Legal holds come and go whatever the retention.
        let held = changed(compliance, LockChange::LegalHold(true), false, NOW).unwrap();
        assert!(held.legal_hold && held.retention == compliance.retention);
    }

    #[test]
    fn bucket_defaults_need_exactly_one_period_in_range() {
        let rule = |days, years| BucketLock {
            default_retention: Some(DefaultRetention {
                mode: RetentionMode::Governance,
                days,
                years,
            }),
        };
        assert!(check_bucket_lock("b", &rule(Some(1), None)).is_ok());
        assert!(check_bucket_lock("b", &rule(None, Some(100))).is_ok());
        assert!(check_bucket_lock("b", &BucketLock::default()).is_ok());
        for bad in
            [rule(Some(1), Some(1)), rule(None, None), rule(Some(0), None), rule(None, Some(101))]
        {
            assert!(matches!(check_bucket_lock("b", &bad), Err(MetaError::InvalidLock { .. })));
        }
        let until = rule(Some(2), None).default_retention.unwrap().from(NOW).until_ms;
        assert_eq!(until, NOW + 2 * DAY_MS);
    }
}
