//! S3 object lock over meta's locks (docs/meta-api.md "Object lock"): the XML and header
//! forms of retentions and legal holds, checked as S3 checks them, turned into meta's JSON
//! and back.
//!
//! Invariants:
//! - Meta enforces every lock (a locked version is never removed, whatever the gateway
//!   does); this module only translates and refuses malformed requests before they reach
//!   meta: modes are `GOVERNANCE` or `COMPLIANCE` exactly, a default retention has days or
//!   years (not both), at least one, and a write's retention names both a mode and a date.
//! - Instants are milliseconds since the Unix epoch on meta's side, S3 timestamps here; a
//!   timestamp before the epoch is refused, never wrapped.

use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::{
    DefaultRetention, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockLegalHoldStatus,
    ObjectLockMode, ObjectLockRetention, ObjectLockRetentionMode, ObjectLockRule, Timestamp,
};
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use serde_json::{json, Value};

/// Meta's name of an S3 retention mode (case matters, as in S3).
fn meta_mode(mode: &str) -> Option<&'static str> {
    match mode {
        "GOVERNANCE" => Some("governance"),
        "COMPLIANCE" => Some("compliance"),
        _ => None,
    }
}

/// S3's name of a meta retention mode.
fn s3_mode(mode: &str) -> Option<&'static str> {
    match mode {
        "governance" => Some("GOVERNANCE"),
        "compliance" => Some("COMPLIANCE"),
        _ => None,
    }
}

/// Milliseconds since the epoch of an S3 timestamp; None before the epoch.
pub fn timestamp_ms(timestamp: &Timestamp) -> Option<u64> {
    let at: time::OffsetDateTime = timestamp.clone().into();
    u64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// The S3 timestamp of `ms` since the epoch.
pub fn ms_timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

/// Meta's `default_retention` of a PutObjectLockConfiguration, refused as S3 refuses it:
/// MalformedXML for a status other than `Enabled`, an unknown mode, or both days and years;
/// InvalidRetentionPeriod for a period under one.
pub fn default_retention(configuration: &ObjectLockConfiguration) -> S3Result<Option<Value>> {
    if configuration.object_lock_enabled.as_ref().map(|e| e.as_str())
        != Some(ObjectLockEnabled::ENABLED)
    {
        return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
    }
    let Some(rule) = configuration.rule.as_ref().and_then(|r| r.default_retention.as_ref()) else {
        return Ok(None);
    };
    let mode = rule
        .mode
        .as_ref()
        .and_then(|m| meta_mode(m.as_str()))
        .ok_or_else(|| s3_error!(MalformedXML, "the Mode must be GOVERNANCE or COMPLIANCE"))?;
    let period = |what: &str, n: i32| {
        u32::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
            let mut error = S3Error::with_message(
                S3ErrorCode::Custom("InvalidRetentionPeriod".into()),
                format!("the default retention's {what} must be positive"),
            );
            error.set_status_code(http::StatusCode::BAD_REQUEST);
            error
        })
    };
    match (rule.days, rule.years) {
        (Some(_), Some(_)) => {
            Err(s3_error!(MalformedXML, "a default retention has Days or Years, not both"))
        }
        (None, None) => Err(s3_error!(MalformedXML, "a default retention needs Days or Years")),
        (Some(days), None) => Ok(Some(json!({ "mode": mode, "days": period("Days", days)? }))),
        (None, Some(years)) => Ok(Some(json!({ "mode": mode, "years": period("Years", years)? }))),
    }
}

/// The S3 configuration of a bucket record with object lock; None without.
pub fn configuration_of(bucket: &Value) -> Option<ObjectLockConfiguration> {
    let lock = bucket.get("object_lock")?;
    let rule = lock.get("default_retention").filter(|r| r.is_object()).map(|rule| {
        let as_i32 = |field: &str| rule[field].as_u64().and_then(|n| i32::try_from(n).ok());
        ObjectLockRule {
            default_retention: Some(DefaultRetention {
                mode: rule["mode"]
                    .as_str()
                    .and_then(s3_mode)
                    .map(ObjectLockRetentionMode::from_static),
                days: as_i32("days"),
                years: as_i32("years"),
            }),
        }
    });
    Some(ObjectLockConfiguration {
        object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
        rule,
    })
}

/// Meta's `retention` of an S3 retention (None: remove it). MalformedXML for an unknown
/// mode or one without a date; InvalidArgument for a date before the epoch.
pub fn retention(retention: Option<&ObjectLockRetention>) -> S3Result<Value> {
    let Some(retention) = retention.filter(|r| r.mode.is_some() || r.retain_until_date.is_some())
    else {
        return Ok(Value::Null);
    };
    let mode = retention
        .mode
        .as_ref()
        .and_then(|m| meta_mode(m.as_str()))
        .ok_or_else(|| s3_error!(MalformedXML, "the Mode must be GOVERNANCE or COMPLIANCE"))?;
    let until = retention
        .retain_until_date
        .as_ref()
        .ok_or_else(|| s3_error!(MalformedXML, "a retention needs a RetainUntilDate"))?;
    let until_ms = timestamp_ms(until)
        .ok_or_else(|| s3_error!(InvalidArgument, "the RetainUntilDate is before 1970"))?;
    Ok(json!({ "mode": mode, "until_ms": until_ms }))
}

/// Meta's `legal_hold` of an S3 status: MalformedXML unless `ON` or `OFF`.
pub fn legal_hold(status: Option<&ObjectLockLegalHoldStatus>) -> S3Result<bool> {
    match status.map(|s| s.as_str()) {
        Some(ObjectLockLegalHoldStatus::ON) => Ok(true),
        Some(ObjectLockLegalHoldStatus::OFF) => Ok(false),
        _ => Err(s3_error!(MalformedXML, "the legal hold Status must be ON or OFF")),
    }
}

/// The lock a write asks for with S3's headers (meta's `lock` JSON), None when it names
/// none: a mode and a date come together, and the date is in the future (InvalidArgument
/// otherwise, as S3).
pub fn write_lock(
    mode: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
    now_ms: u64,
) -> S3Result<Option<Value>> {
    let mut lock = json!({});
    match (mode, until) {
        (None, None) => {}
        (Some(mode), Some(until)) => {
            let mode = meta_mode(mode.as_str()).ok_or_else(|| {
                s3_error!(
                    InvalidArgument,
                    "x-amz-object-lock-mode must be GOVERNANCE or COMPLIANCE"
                )
            })?;
            let until_ms = timestamp_ms(until).filter(|&ms| ms > now_ms).ok_or_else(|| {
                s3_error!(
                    InvalidArgument,
                    "x-amz-object-lock-retain-until-date must be in the future"
                )
            })?;
            lock["retention"] = json!({ "mode": mode, "until_ms": until_ms });
        }
        _ => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date go together"
            ))
        }
    }
    if let Some(status) = hold {
        lock["legal_hold"] = json!(legal_hold(Some(status)).map_err(|_| {
            s3_error!(InvalidArgument, "x-amz-object-lock-legal-hold must be ON or OFF")
        })?);
    }
    Ok((lock != json!({})).then_some(lock))
}

/// What a version's lock shows in S3 (meta's `lock` of an object's JSON).
#[derive(Debug, Default)]
pub struct Shown {
    pub mode: Option<ObjectLockMode>,
    pub until: Option<Timestamp>,
    /// Set when the version has a legal hold (ON); S3 leaves the header out otherwise.
    pub legal_hold: Option<ObjectLockLegalHoldStatus>,
    /// The retention as S3's `Retention` element.
    pub retention: Option<ObjectLockRetention>,
}

/// The lock of a version's meta JSON.
pub fn shown(object: &Value) -> Shown {
    let lock = &object["lock"];
    let mut shown = Shown::default();
    if let (Some(mode), Some(until_ms)) = (
        lock["retention"]["mode"].as_str().and_then(s3_mode),
        lock["retention"]["until_ms"].as_u64(),
    ) {
        shown.mode = Some(ObjectLockMode::from_static(mode));
        shown.until = Some(ms_timestamp(until_ms));
        shown.retention = Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from_static(mode)),
            retain_until_date: Some(ms_timestamp(until_ms)),
        });
    }
    if lock["legal_hold"].as_bool() == Some(true) {
        shown.legal_hold =
            Some(ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::ON));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_periods_are_checked_as_s3_checks_them() {
        let config = |mode: &str, days, years| ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule: Some(ObjectLockRule {
                default_retention: Some(DefaultRetention {
                    mode: Some(ObjectLockRetentionMode::from(mode.to_string())),
                    days,
                    years,
                }),
            }),
        };
        let code = |c: &ObjectLockConfiguration| {
            default_retention(c).unwrap_err().code().as_str().to_string()
        };
        assert_eq!(
            default_retention(&config("GOVERNANCE", Some(1), None)).unwrap(),
            Some(json!({"mode": "governance", "days": 1}))
        );
        assert_eq!(code(&config("governance", None, Some(1))), "MalformedXML");
        assert_eq!(code(&config("GOVERNANCE", Some(1), Some(1))), "MalformedXML");
        assert_eq!(code(&config("COMPLIANCE", Some(0), None)), "InvalidRetentionPeriod");
        assert_eq!(code(&config("COMPLIANCE", None, Some(-1))), "InvalidRetentionPeriod");
        // A bucket record's configuration reads back as it was given.
        let bucket =
            json!({"object_lock": {"default_retention": {"mode": "compliance", "years": 2}}});
        let shown = configuration_of(&bucket).unwrap();
        let rule = shown.rule.unwrap().default_retention.unwrap();
        assert_eq!(
            (rule.mode.unwrap().as_str(), rule.days, rule.years),
            ("COMPLIANCE", None, Some(2))
        );
        assert!(configuration_of(&json!({"name": "b"})).is_none());
    }

    #[test]
    fn write_headers_need_mode_and_date_together_and_a_future_date() {
        let mode = ObjectLockMode::from_static(ObjectLockMode::GOVERNANCE);
        let later = ms_timestamp(5_000);
        let lock = write_lock(Some(&mode), Some(&later), None, 1_000).unwrap().unwrap();
        assert_eq!(lock, json!({"retention": {"mode": "governance", "until_ms": 5_000}}));
        assert_eq!(timestamp_ms(&later), Some(5_000));
        assert!(write_lock(Some(&mode), None, None, 1_000).is_err());
        assert!(write_lock(Some(&mode), Some(&later), None, 6_000).is_err());
        assert_eq!(write_lock(None, None, None, 0).unwrap(), None);
        let on = ObjectLockLegalHoldStatus::from_static(ObjectLockLegalHoldStatus::ON);
        assert_eq!(
            write_lock(None, None, Some(&on), 0).unwrap(),
            Some(json!({"legal_hold": true}))
        );
        let shown = shown(
            &json!({"lock": {"retention": {"mode": "compliance", "until_ms": 5_000}, "legal_hold": true}}),
        );
        assert_eq!(shown.mode.unwrap().as_str(), "COMPLIANCE");
        assert_eq!(shown.legal_hold.unwrap().as_str(), "ON");
    }
}
