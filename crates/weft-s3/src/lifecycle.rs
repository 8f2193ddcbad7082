//! S3 lifecycle: a bucket's lifecycle configuration (PutBucketLifecycleConfiguration,
//! GetBucketLifecycleConfiguration, DeleteBucketLifecycle), the `x-amz-expiration` header it
//! puts on object responses, and the pass that carries it out ([`run_pass`], run by the
//! executor, `weft serve repair`, every `--lifecycle-interval`).
//!
//! - A configuration is the gateway record `bucket_config/<bucket>/lifecycle`
//!   ([`LifecycleConfig`]: its rules, in order). Meta deletes it with its bucket.
//! - A rule applies to the objects its filter matches (a key prefix, tags that must all be
//!   present with their values, and object sizes strictly above and below bounds) and has
//!   up to three actions:
//!   - **Expiration** (Days after an object's creation, or a Date): the current version is
//!     deleted as a DeleteObject without a version id would: removed for good in an
//!     unversioned bucket, hidden behind a delete marker in a versioned one. A delete marker
//!     left alone (no older version behind it) is removed once it is as old as Days (or the
//!     Date has passed), or at once with `ExpiredObjectDeleteMarker`.
//!   - **NoncurrentVersionExpiration** (NoncurrentDays after a version stopped being
//!     current, keeping the NewerNoncurrentVersions newest noncurrent versions): the
//!     version is removed for good.
//!   - **AbortIncompleteMultipartUpload** (DaysAfterInitiation): the upload is aborted.
//! - A day is 24 hours from the object's creation, rounded up to the next midnight UTC, as
//!   S3 counts; an executor run with a shorter day (`--lifecycle-day 10s`, for tests only)
//!   counts whole short days, without rounding.
//!
//! Invariants:
//! - Only configurations S3 would accept are stored (see [`LifecycleConfig::from_s3`]);
//!   storage-class transitions are refused with 501: weft has one storage class.
//! - A pass never removes what a rule does not cover, and removes nothing meta's object
//!   lock protects: every removal goes through meta, which refuses a locked version
//!   (counted as `kept_locked`, never bypassed), and every removal names the generation it
//!   judged, so an object overwritten meanwhile is left alone (a precondition failure).
//! - A pass is restartable: it keeps no state, so a pass stopped midway (the executor
//!   stopped) is simply done again by the next one.
//! - A pass reads each configured bucket's versions once, in meta's pages, holding at most
//!   one key's versions in memory; buckets without a configuration cost one record listing.

use std::collections::BTreeMap;

use s3s::dto::{
    AbortIncompleteMultipartUpload, ExpirationStatus, LifecycleExpiration, LifecycleRule,
    LifecycleRuleAndOperator, LifecycleRuleFilter, NoncurrentVersionExpiration, Tag,
};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_client::{Client, ClientError};

use crate::cors::BUCKET_CONFIG;
use crate::object_lock::{ms_timestamp, timestamp_ms};

/// S3's limit on the rules of one configuration.
pub const MAX_RULES: usize = 1000;
/// S3's limit on a rule's ID.
const MAX_ID_CHARS: usize = 255;
/// A real day.
pub const DAY_MS: u64 = 24 * 3600 * 1000;
/// Versions asked of meta per call.
const META_PAGE: usize = 1000;
/// Most error messages a report keeps (it counts them all).
const MAX_ERROR_SAMPLES: usize = 10;

/// The record name of `bucket`'s lifecycle configuration.
pub fn record_name(bucket: &str) -> String {
    format!("{bucket}/lifecycle")
}

/// How a rule's filter was written, so GetBucketLifecycleConfiguration answers it as given.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FilterForm {
    /// The rule's own `<Prefix>` (the older form), or nothing.
    #[default]
    RulePrefix,
    /// `<Filter>` with nothing in it: every object.
    Empty,
    Prefix,
    Tag,
    SizeGreaterThan,
    SizeLessThan,
    And,
    /// Several of Prefix, Tag and the sizes side by side, without an And.
    Several,
}

/// Which objects a rule applies to.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Filter {
    #[serde(default)]
    pub form: FilterForm,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<u64>,
}

impl Filter {
    /// Whether an object (key, size, tags) is one the rule applies to.
    pub fn matches(&self, key: &str, size: u64, tags: &BTreeMap<String, String>) -> bool {
        key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
            && self.size_greater_than.is_none_or(|bound| size > bound)
            && self.size_less_than.is_none_or(|bound| size < bound)
    }
}

/// The Expiration action.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Expiration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    /// Midnight UTC of the Date, in milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired_object_delete_marker: bool,
}

/// The NoncurrentVersionExpiration action.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NoncurrentExpiration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newer_versions: Option<u32>,
}

/// One lifecycle rule as stored in meta.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    pub enabled: bool,
    #[serde(default)]
    pub filter: Filter,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration: Option<Expiration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noncurrent: Option<NoncurrentExpiration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_upload_days: Option<u32>,
}

/// A bucket's lifecycle configuration as stored in meta: the rules, in the order given.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LifecycleConfig {
    pub rules: Vec<Rule>,
}

fn invalid(message: String) -> s3s::S3Error {
    s3_error!(InvalidArgument, "{message}")
}

fn malformed(message: String) -> s3s::S3Error {
    s3_error!(MalformedXML, "{message}")
}

/// A count of days S3 accepts: a positive number.
fn positive_days(days: i32, what: &str) -> S3Result<u32> {
    match u32::try_from(days) {
        Ok(days) if days > 0 => Ok(days),
        _ => Err(invalid(format!("{what} must be a positive number of days, not {days}"))),
    }
}

fn tag_pair(tag: &Tag) -> S3Result<(String, String)> {
    match &tag.key {
        Some(key) if !key.is_empty() => Ok((key.clone(), tag.value.clone().unwrap_or_default())),
        _ => Err(malformed("a lifecycle filter's Tag needs a Key".to_string())),
    }
}

fn size_bound(bytes: i64, what: &str) -> S3Result<u64> {
    u64::try_from(bytes).map_err(|_| invalid(format!("{what} must not be negative, it is {bytes}")))
}

impl Filter {
    fn from_s3(rule_prefix: Option<&str>, filter: Option<&LifecycleRuleFilter>) -> S3Result<Self> {
        let Some(filter) = filter else {
            return Ok(Filter {
                prefix: rule_prefix.unwrap_or_default().to_string(),
                ..Filter::default()
            });
        };
        if rule_prefix.is_some() {
            return Err(malformed("a rule has a Prefix or a Filter, not both".to_string()));
        }
        let given = [
            filter.prefix.is_some(),
            filter.tag.is_some(),
            filter.object_size_greater_than.is_some(),
            filter.object_size_less_than.is_some(),
            filter.and.is_some(),
        ];
        let conditions = given.iter().filter(|g| **g).count();
        if conditions > 1 && filter.and.is_some() {
            return Err(malformed("a lifecycle Filter with an And holds nothing else".to_string()));
        }
        let mut out = Filter::default();
        if conditions > 1 {
            // S3 wants several conditions in an And; RGW and MinIO take them side by side,
            // meaning the same, and so does weft (answering them as given).
            out.form = FilterForm::Several;
            out.prefix = filter.prefix.clone().unwrap_or_default();
            if let Some(tag) = &filter.tag {
                out.tags.extend([tag_pair(tag)?]);
            }
            if let Some(bytes) = filter.object_size_greater_than {
                out.size_greater_than = Some(size_bound(bytes, "ObjectSizeGreaterThan")?);
            }
            if let Some(bytes) = filter.object_size_less_than {
                out.size_less_than = Some(size_bound(bytes, "ObjectSizeLessThan")?);
            }
        } else if let Some(prefix) = &filter.prefix {
            out.form = FilterForm::Prefix;
            out.prefix = prefix.clone();
        } else if let Some(tag) = &filter.tag {
            out.form = FilterForm::Tag;
            out.tags.extend([tag_pair(tag)?]);
        } else if let Some(bytes) = filter.object_size_greater_than {
            out.form = FilterForm::SizeGreaterThan;
            out.size_greater_than = Some(size_bound(bytes, "ObjectSizeGreaterThan")?);
        } else if let Some(bytes) = filter.object_size_less_than {
            out.form = FilterForm::SizeLessThan;
            out.size_less_than = Some(size_bound(bytes, "ObjectSizeLessThan")?);
        } else if let Some(and) = &filter.and {
            out.form = FilterForm::And;
            out.prefix = and.prefix.clone().unwrap_or_default();
            for tag in and.tags.iter().flatten() {
                let (key, value) = tag_pair(tag)?;
                if out.tags.insert(key.clone(), value).is_some() {
                    return Err(invalid(format!("tag {key:?} is named twice in one filter")));
                }
            }
            if let Some(bytes) = and.object_size_greater_than {
                out.size_greater_than = Some(size_bound(bytes, "ObjectSizeGreaterThan")?);
            }
            if let Some(bytes) = and.object_size_less_than {
                out.size_less_than = Some(size_bound(bytes, "ObjectSizeLessThan")?);
            }
        } else {
            out.form = FilterForm::Empty;
        }
        if let (Some(above), Some(below)) = (out.size_greater_than, out.size_less_than) {
            if above >= below {
                return Err(invalid(format!(
                    "ObjectSizeGreaterThan ({above}) must be less than ObjectSizeLessThan ({below})"
                )));
            }
        }
        Ok(out)
    }

    fn to_s3(&self) -> (Option<String>, Option<LifecycleRuleFilter>) {
        let tags = || -> Vec<Tag> {
            self.tags
                .iter()
                .map(|(k, v)| Tag { key: Some(k.clone()), value: Some(v.clone()) })
                .collect()
        };
        let size = |bound: Option<u64>| bound.map(|b| b as i64);
        let filter = |f: LifecycleRuleFilter| (None, Some(f));
        match self.form {
            FilterForm::RulePrefix => (Some(self.prefix.clone()), None),
            FilterForm::Empty => filter(LifecycleRuleFilter::default()),
            FilterForm::Prefix => filter(LifecycleRuleFilter {
                prefix: Some(self.prefix.clone()),
                ..Default::default()
            }),
            FilterForm::Tag => {
                filter(LifecycleRuleFilter { tag: tags().into_iter().next(), ..Default::default() })
            }
            FilterForm::SizeGreaterThan => filter(LifecycleRuleFilter {
                object_size_greater_than: size(self.size_greater_than),
                ..Default::default()
            }),
            FilterForm::SizeLessThan => filter(LifecycleRuleFilter {
                object_size_less_than: size(self.size_less_than),
                ..Default::default()
            }),
            FilterForm::Several => filter(LifecycleRuleFilter {
                prefix: Some(self.prefix.clone()),
                tag: tags().into_iter().next(),
                object_size_greater_than: size(self.size_greater_than),
                object_size_less_than: size(self.size_less_than),
                ..Default::default()
            }),
            FilterForm::And => filter(LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: (!self.prefix.is_empty()).then(|| self.prefix.clone()),
                    tags: (!self.tags.is_empty()).then(tags),
                    object_size_greater_than: size(self.size_greater_than),
                    object_size_less_than: size(self.size_less_than),
                }),
                ..Default::default()
            }),
        }
    }
}

/// A fresh rule ID for a rule given without one (S3 makes one up too).
fn new_rule_id() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect()
}

impl Rule {
    fn from_s3(rule: &LifecycleRule) -> S3Result<Rule> {
        let id = match &rule.id {
            Some(id) if id.chars().count() > MAX_ID_CHARS => {
                return Err(invalid(format!("a rule's ID has at most {MAX_ID_CHARS} characters")))
            }
            Some(id) if !id.is_empty() => id.clone(),
            _ => new_rule_id(),
        };
        let enabled = match rule.status.as_str() {
            ExpirationStatus::ENABLED => true,
            ExpirationStatus::DISABLED => false,
            other => {
                return Err(malformed(format!(
                    "a rule's Status is Enabled or Disabled, not {other:?}"
                )))
            }
        };
        if rule.transitions.as_ref().is_some_and(|t| !t.is_empty())
            || rule.noncurrent_version_transitions.as_ref().is_some_and(|t| !t.is_empty())
        {
            return Err(s3_error!(
                NotImplemented,
                "weft has one storage class: lifecycle transitions are not supported"
            ));
        }
        let filter = Filter::from_s3(rule.prefix.as_deref(), rule.filter.as_ref())?;
        let expiration = match &rule.expiration {
            None => None,
            Some(e) => Some(Expiration::from_s3(e, &filter)?),
        };
        let noncurrent = match &rule.noncurrent_version_expiration {
            None => None,
            Some(n) => Some(NoncurrentExpiration::from_s3(n)?),
        };
        let abort_upload_days = match &rule.abort_incomplete_multipart_upload {
            None => None,
            Some(AbortIncompleteMultipartUpload { days_after_initiation: None }) => {
                return Err(malformed(
                    "AbortIncompleteMultipartUpload needs DaysAfterInitiation".to_string(),
                ))
            }
            Some(AbortIncompleteMultipartUpload { days_after_initiation: Some(days) }) => {
                if !filter.tags.is_empty()
                    || filter.size_greater_than.is_some()
                    || filter.size_less_than.is_some()
                {
                    return Err(invalid(
                        "AbortIncompleteMultipartUpload cannot be used with a tag or size filter"
                            .to_string(),
                    ));
                }
                Some(positive_days(*days, "DaysAfterInitiation")?)
            }
        };
        if expiration.is_none() && noncurrent.is_none() && abort_upload_days.is_none() {
            return Err(malformed(format!("rule {id:?} has no action")));
        }
        Ok(Rule { id, enabled, filter, expiration, noncurrent, abort_upload_days })
    }

    fn to_s3(&self) -> LifecycleRule {
        let (prefix, filter) = self.filter.to_s3();
        LifecycleRule {
            id: Some(self.id.clone()),
            status: ExpirationStatus::from_static(match self.enabled {
                true => ExpirationStatus::ENABLED,
                false => ExpirationStatus::DISABLED,
            }),
            prefix,
            filter,
            expiration: self.expiration.as_ref().map(|e| LifecycleExpiration {
                days: e.days.map(|d| d as i32),
                date: e.date_ms.map(ms_timestamp),
                expired_object_delete_marker: e.expired_object_delete_marker.then_some(true),
            }),
            noncurrent_version_expiration: self.noncurrent.as_ref().map(|n| {
                NoncurrentVersionExpiration {
                    noncurrent_days: n.days.map(|d| d as i32),
                    newer_noncurrent_versions: n.newer_versions.map(|v| v as i32),
                }
            }),
            abort_incomplete_multipart_upload: self.abort_upload_days.map(|days| {
                AbortIncompleteMultipartUpload { days_after_initiation: Some(days as i32) }
            }),
            transitions: None,
            noncurrent_version_transitions: None,
        }
    }
}

impl Expiration {
    fn from_s3(expiration: &LifecycleExpiration, filter: &Filter) -> S3Result<Expiration> {
        let marker = expiration.expired_object_delete_marker.unwrap_or(false);
        let given = [expiration.days.is_some(), expiration.date.is_some(), marker];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(malformed(
                "an Expiration has exactly one of Days, Date and ExpiredObjectDeleteMarker"
                    .to_string(),
            ));
        }
        if marker && !filter.tags.is_empty() {
            return Err(invalid(
                "ExpiredObjectDeleteMarker cannot be used with a tag filter".to_string(),
            ));
        }
        let days = match expiration.days {
            Some(days) => Some(positive_days(days, "Expiration Days")?),
            None => None,
        };
        let date_ms = match &expiration.date {
            None => None,
            Some(date) => match timestamp_ms(date) {
                Some(ms) if ms % DAY_MS == 0 => Some(ms),
                _ => return Err(invalid(
                    "an Expiration Date is a midnight UTC (ISO 8601, e.g. 2030-01-01T00:00:00Z)"
                        .to_string(),
                )),
            },
        };
        Ok(Expiration { days, date_ms, expired_object_delete_marker: marker })
    }
}

impl NoncurrentExpiration {
    fn from_s3(expiration: &NoncurrentVersionExpiration) -> S3Result<NoncurrentExpiration> {
        let days = match expiration.noncurrent_days {
            Some(days) => Some(positive_days(days, "NoncurrentDays")?),
            None => None,
        };
        let newer_versions = match expiration.newer_noncurrent_versions {
            None => None,
            Some(count) => match u32::try_from(count) {
                Ok(count) if (1..=100).contains(&count) => Some(count),
                _ => {
                    return Err(invalid(format!(
                        "NewerNoncurrentVersions is from 1 to 100, not {count}"
                    )))
                }
            },
        };
        if days.is_none() {
            return Err(malformed("NoncurrentVersionExpiration needs NoncurrentDays".to_string()));
        }
        Ok(NoncurrentExpiration { days, newer_versions })
    }
}

impl LifecycleConfig {
    /// A configuration from S3's rules, refused as S3 refuses it: MalformedXML for a Status
    /// other than Enabled or Disabled, a rule without an action, an Expiration with more or
    /// less than one of its fields, a Filter with two conditions outside an And, a Prefix
    /// beside a Filter; InvalidArgument for IDs over 255 characters or used twice, days
    /// that are not positive, a Date that is not a midnight UTC, sizes out of order;
    /// NotImplemented for storage-class transitions.
    pub fn from_s3(rules: &[LifecycleRule]) -> S3Result<LifecycleConfig> {
        if rules.is_empty() {
            return Err(malformed("a lifecycle configuration has at least one rule".to_string()));
        }
        if rules.len() > MAX_RULES {
            return Err(malformed(format!(
                "a lifecycle configuration has at most {MAX_RULES} rules, this one {}",
                rules.len()
            )));
        }
        let rules = rules.iter().map(Rule::from_s3).collect::<S3Result<Vec<_>>>()?;
        let mut ids = std::collections::HashSet::new();
        for rule in &rules {
            if !ids.insert(rule.id.as_str()) {
                return Err(invalid(format!("rule ID {:?} is used twice", rule.id)));
            }
        }
        Ok(LifecycleConfig { rules })
    }

    /// The rules as S3 answers them.
    pub fn to_s3(&self) -> Vec<LifecycleRule> {
        self.rules.iter().map(Rule::to_s3).collect()
    }

    /// When the current object (key, size, tags) created at `created_ms` expires, with the
    /// rule that expires it first: the `x-amz-expiration` header's value, counted in real
    /// days. None when no enabled rule expires it.
    pub fn expiration_header(
        &self,
        key: &str,
        size: u64,
        tags: &BTreeMap<String, String>,
        created_ms: u64,
    ) -> Option<String> {
        let (due, id) = self
            .rules
            .iter()
            .filter(|rule| rule.enabled && rule.filter.matches(key, size, tags))
            .filter_map(|rule| {
                let expiration = rule.expiration.as_ref()?;
                let due = expiration
                    .date_ms
                    .or_else(|| expiration.days.map(|d| after_days(created_ms, d, DAY_MS)))?;
                Some((due, &rule.id))
            })
            .min_by_key(|(due, _)| *due)?;
        let date = crate::attributes::http_date(&ms_timestamp(due))?;
        Some(format!("expiry-date=\"{date}\", rule-id=\"{id}\""))
    }
}

/// The moment `days` days (of `day_ms`) after `from_ms`: rounded up to the next midnight
/// UTC for real days, as S3 counts.
pub fn after_days(from_ms: u64, days: u32, day_ms: u64) -> u64 {
    let at = from_ms.saturating_add(u64::from(days).saturating_mul(day_ms));
    match day_ms == DAY_MS {
        true => at.div_ceil(DAY_MS).saturating_mul(DAY_MS),
        false => at,
    }
}

/// The tags kept in a listed version's attributes.
/// The size S3 shows of a listed version: its plaintext size when sealed (see `sse`).
fn shown_size(entry: &Value) -> u64 {
    let stored = entry["size"].as_u64().unwrap_or(0);
    entry["attributes"]["sse"]["size"].as_u64().unwrap_or(stored)
}

fn tags_of(entry: &Value) -> BTreeMap<String, String> {
    entry["attributes"]["tags"]
        .as_object()
        .map(|tags| {
            tags.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// When a pass runs and how long its days are.
#[derive(Debug, Clone, Copy)]
pub struct PassOptions {
    pub now_ms: u64,
    /// A lifecycle day ([`DAY_MS`] but in tests).
    pub day_ms: u64,
}

/// What a pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassReport {
    /// Buckets with a configuration that has an enabled rule.
    pub buckets: u64,
    /// Versions (delete markers included) looked at.
    pub versions_seen: u64,
    /// Current objects expired (deleted, or hidden behind a delete marker).
    pub expired: u64,
    /// Noncurrent versions removed for good.
    pub noncurrent_removed: u64,
    /// Delete markers removed (left alone, expired).
    pub markers_removed: u64,
    /// Multipart uploads aborted.
    pub uploads_aborted: u64,
    /// Removals meta refused because object lock protects the version.
    pub kept_locked: u64,
    /// Objects changed meanwhile (left for the next pass).
    pub changed_meanwhile: u64,
    pub errors: u64,
    /// The first few errors' messages.
    pub error_samples: Vec<String>,
}

impl PassReport {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.error_samples.len() < MAX_ERROR_SAMPLES {
            self.error_samples.push(what);
        }
    }

    /// Counts a removal's outcome under `done` (one of this report's counters).
    fn removal(
        &mut self,
        outcome: Result<(), ClientError>,
        done: fn(&mut PassReport) -> &mut u64,
        what: &str,
    ) {
        match outcome {
            Ok(()) => *done(self) += 1,
            Err(ClientError::Meta { code, .. }) if code == "object_locked" => self.kept_locked += 1,
            Err(ClientError::Meta { status: 404 | 409 | 412, .. }) => self.changed_meanwhile += 1,
            Err(error) => self.error(format!("{what}: {error}")),
        }
    }
}

/// Every bucket's lifecycle configuration: (bucket, configuration), in bucket order.
async fn configurations(client: &Client) -> weft_client::Result<Vec<(String, LifecycleConfig)>> {
    let mut found = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) =
            client.meta.list_records(BUCKET_CONFIG, "", after.as_deref(), 1000).await?;
        for (name, value) in page {
            let Some(bucket) = name.strip_suffix("/lifecycle") else { continue };
            if let Ok(config) = serde_json::from_value::<LifecycleConfig>(value) {
                found.push((bucket.to_string(), config));
            }
        }
        match next {
            Some(next) => after = Some(next),
            None => return Ok(found),
        }
    }
}

/// Carries out every bucket's lifecycle rules once, as of `options.now_ms` (see the module
/// header for what each action does and the invariants). Fails only when the
/// configurations cannot be read; everything else is counted in the report.
pub async fn run_pass(client: &Client, options: &PassOptions) -> weft_client::Result<PassReport> {
    let mut report = PassReport::default();
    for (bucket, config) in configurations(client).await? {
        let rules: Vec<&Rule> = config.rules.iter().filter(|r| r.enabled).collect();
        if rules.is_empty() {
            continue;
        }
        report.buckets += 1;
        if rules.iter().any(|r| r.expiration.is_some() || r.noncurrent.is_some()) {
            if let Err(error) = expire_versions(client, &bucket, &rules, options, &mut report).await
            {
                report.error(format!("bucket {bucket:?}: {error}"));
            }
        }
        if rules.iter().any(|r| r.abort_upload_days.is_some()) {
            if let Err(error) = abort_uploads(client, &bucket, &rules, options, &mut report).await {
                report.error(format!("bucket {bucket:?} uploads: {error}"));
            }
        }
    }
    Ok(report)
}

/// The longest prefix every rule's filter starts with (what to list).
fn common_prefix<'a>(rules: impl Iterator<Item = &'a Rule>) -> String {
    let mut common: Option<&str> = None;
    for rule in rules {
        let prefix = rule.filter.prefix.as_str();
        common = Some(match common {
            None => prefix,
            Some(c) => {
                let same = c.char_indices().zip(prefix.chars()).take_while(|((_, a), b)| a == b);
                let end = same.last().map(|((i, a), _)| i + a.len_utf8()).unwrap_or(0);
                &c[..end]
            }
        });
    }
    common.unwrap_or_default().to_string()
}

async fn expire_versions(
    client: &Client,
    bucket: &str,
    rules: &[&Rule],
    options: &PassOptions,
    report: &mut PassReport,
) -> weft_client::Result<()> {
    let rules: Vec<&Rule> = rules
        .iter()
        .copied()
        .filter(|r| r.expiration.is_some() || r.noncurrent.is_some())
        .collect();
    let prefix = common_prefix(rules.iter().copied());
    let mut cursor: Option<(String, Option<String>)> = None;
    let mut group: Vec<Value> = Vec::new();
    loop {
        let (key_at, version_at) = match &cursor {
            Some((key, version)) => (Some(key.as_str()), version.as_deref()),
            None => (None, None),
        };
        let mut answer =
            client.meta.list_versions(bucket, &prefix, key_at, version_at, META_PAGE).await?;
        let entries = match answer["versions"].take() {
            Value::Array(entries) => entries,
            _ => Vec::new(),
        };
        for entry in entries {
            report.versions_seen += 1;
            if group.first().is_some_and(|first| first["key"] != entry["key"]) {
                apply_to_key(client, bucket, &rules, &std::mem::take(&mut group), options, report)
                    .await;
            }
            group.push(entry);
        }
        let next = &answer["next"];
        let Some(next_key) = next["key_marker"].as_str() else { break };
        cursor =
            Some((next_key.to_string(), next["version_id_marker"].as_str().map(str::to_string)));
    }
    if !group.is_empty() {
        apply_to_key(client, bucket, &rules, &group, options, report).await;
    }
    Ok(())
}

/// Applies the rules to one key's versions (newest first, as meta lists them).
async fn apply_to_key(
    client: &Client,
    bucket: &str,
    rules: &[&Rule],
    versions: &[Value],
    options: &PassOptions,
    report: &mut PassReport,
) {
    let Some(newest) = versions.first() else { return };
    let key = newest["key"].as_str().unwrap_or_default();
    let generation = |v: &Value| v["generation"].as_u64().unwrap_or(0);
    let created = |v: &Value| v["created_ms"].as_u64().unwrap_or(0);
    let is_marker = |v: &Value| v["delete_marker"].as_bool().unwrap_or(false);
    let due = |from_ms: u64, days: u32| after_days(from_ms, days, options.day_ms) <= options.now_ms;
    let size = shown_size(newest);
    let tags = tags_of(newest);
    let applies = |rule: &&&Rule, v: &Value| rule.filter.matches(key, shown_size(v), &tags_of(v));

    if newest["is_latest"].as_bool().unwrap_or(true) {
        if !is_marker(newest) {
            let expires = rules.iter().filter(|r| r.filter.matches(key, size, &tags)).any(|r| {
                r.expiration.as_ref().is_some_and(|e| {
                    e.date_ms.is_some_and(|date| date <= options.now_ms)
                        || e.days.is_some_and(|days| due(created(newest), days))
                })
            });
            if expires {
                let outcome = client
                    .delete_object_if(bucket, key, Some(generation(newest)))
                    .await
                    .map(|_| ());
                report.removal(outcome, |r| &mut r.expired, &format!("expire {bucket}/{key}"));
                // Its versions are judged again by the next pass, as they now stand.
                return;
            }
        } else if versions.len() == 1 {
            // A delete marker with nothing behind it.
            let expires = rules.iter().filter(|r| r.filter.matches(key, 0, &tags)).any(|r| {
                r.expiration.as_ref().is_some_and(|e| {
                    e.expired_object_delete_marker
                        || e.date_ms.is_some_and(|date| date <= options.now_ms)
                        || e.days.is_some_and(|days| due(created(newest), days))
                })
            });
            if expires {
                let version_id = newest["version_id"].as_str().unwrap_or("null");
                let outcome = client
                    .delete_version(bucket, key, version_id, Some(generation(newest)), false)
                    .await
                    .map(|_| ());
                report.removal(
                    outcome,
                    |r| &mut r.markers_removed,
                    &format!("marker {bucket}/{key}"),
                );
            }
            return;
        }
    }

    // Noncurrent versions: each stopped being current when the one before it was made.
    for (index, version) in versions.iter().enumerate().skip(1) {
        let since = created(&versions[index - 1]);
        let newer_noncurrent = (index - 1) as u32;
        let expires = rules.iter().filter(|r| applies(r, version)).any(|r| {
            r.noncurrent.as_ref().is_some_and(|n| {
                n.days.is_some_and(|days| due(since, days))
                    && newer_noncurrent >= n.newer_versions.unwrap_or(0)
            })
        });
        if !expires {
            continue;
        }
        let version_id = version["version_id"].as_str().unwrap_or("null");
        let outcome = client
            .delete_version(bucket, key, version_id, Some(generation(version)), false)
            .await
            .map(|_| ());
        report.removal(
            outcome,
            |r| &mut r.noncurrent_removed,
            &format!("version {version_id} of {bucket}/{key}"),
        );
    }
}

/// Aborts the bucket's uploads in progress that a rule's AbortIncompleteMultipartUpload
/// covers and that began long enough ago.
async fn abort_uploads(
    client: &Client,
    bucket: &str,
    rules: &[&Rule],
    options: &PassOptions,
    report: &mut PassReport,
) -> weft_client::Result<()> {
    let uploads = crate::multipart::load_uploads(&client.meta, bucket, options.now_ms).await?;
    for upload in uploads {
        let expires = rules.iter().any(|rule| {
            rule.abort_upload_days.is_some_and(|days| {
                upload.key.starts_with(&rule.filter.prefix)
                    && after_days(upload.initiated_ms, days, options.day_ms) <= options.now_ms
            })
        });
        if expires {
            let outcome = crate::multipart::abort(client, &upload).await;
            let what = format!("upload {} of {bucket}/{}", upload.upload_id, upload.key);
            report.removal(outcome, |r| &mut r.uploads_aborted, &what);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: Option<&str>, status: &str) -> LifecycleRule {
        LifecycleRule {
            id: id.map(str::to_string),
            status: ExpirationStatus::from(status.to_string()),
            prefix: Some("logs/".to_string()),
            expiration: Some(LifecycleExpiration { days: Some(3), ..Default::default() }),
            filter: None,
            abort_incomplete_multipart_upload: None,
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            transitions: None,
        }
    }

    fn code(error: s3s::S3Error) -> String {
        error.code().as_str().to_string()
    }

    #[test]
    fn configurations_are_checked_as_s3_checks_them() {
        let ok = LifecycleConfig::from_s3(&[rule(Some("a"), "Enabled"), rule(None, "Disabled")])
            .unwrap();
        assert_eq!(ok.rules[0].id, "a");
        assert_eq!(ok.rules[1].id.len(), 20, "a rule without an ID gets one");
        assert!(!ok.rules[1].enabled);
        // Round trip: the answer names the same rules as given.
        assert_eq!(LifecycleConfig::from_s3(&ok.to_s3()).unwrap(), ok);

        let same =
            LifecycleConfig::from_s3(&[rule(Some("a"), "Enabled"), rule(Some("a"), "Enabled")]);
        assert_eq!(code(same.unwrap_err()), "InvalidArgument");
        assert_eq!(
            code(LifecycleConfig::from_s3(&[rule(Some("a"), "enabled")]).unwrap_err()),
            "MalformedXML"
        );
        let long = "x".repeat(256);
        assert_eq!(
            code(LifecycleConfig::from_s3(&[rule(Some(&long), "Enabled")]).unwrap_err()),
            "InvalidArgument"
        );

        let mut zero = rule(Some("z"), "Enabled");
        zero.expiration = Some(LifecycleExpiration { days: Some(0), ..Default::default() });
        assert_eq!(code(LifecycleConfig::from_s3(&[zero]).unwrap_err()), "InvalidArgument");

        let mut none = rule(Some("n"), "Enabled");
        none.expiration = None;
        assert_eq!(code(LifecycleConfig::from_s3(&[none]).unwrap_err()), "MalformedXML");

        let mut both = rule(Some("b"), "Enabled");
        both.filter = Some(LifecycleRuleFilter { prefix: Some("x".into()), ..Default::default() });
        assert_eq!(code(LifecycleConfig::from_s3(&[both]).unwrap_err()), "MalformedXML");

        let mut side_by_side = rule(None, "Enabled");
        side_by_side.prefix = None;
        side_by_side.filter = Some(LifecycleRuleFilter {
            prefix: Some("p/".into()),
            object_size_greater_than: Some(2000),
            ..Default::default()
        });
        let taken = LifecycleConfig::from_s3(&[side_by_side]).unwrap();
        let filter = &taken.rules[0].filter;
        assert!(filter.matches("p/x", 2001, &BTreeMap::new()));
        assert!(!filter.matches("p/x", 2000, &BTreeMap::new()));
        assert_eq!(LifecycleConfig::from_s3(&taken.to_s3()).unwrap(), taken);

        let mut transition = rule(Some("t"), "Enabled");
        transition.transitions = Some(vec![s3s::dto::Transition::default()]);
        assert_eq!(code(LifecycleConfig::from_s3(&[transition]).unwrap_err()), "NotImplemented");

        let mut noon = rule(Some("d"), "Enabled");
        noon.expiration = Some(LifecycleExpiration {
            date: Some(ms_timestamp(DAY_MS * 20_000 + 3_600_000)),
            ..Default::default()
        });
        assert_eq!(code(LifecycleConfig::from_s3(&[noon]).unwrap_err()), "InvalidArgument");
    }

    #[test]
    fn filters_match_prefix_tags_and_sizes() {
        let filter = Filter {
            form: FilterForm::And,
            prefix: "a/".into(),
            tags: [("k".to_string(), "v".to_string())].into(),
            size_greater_than: Some(10),
            size_less_than: Some(100),
        };
        let tags: BTreeMap<String, String> = [("k".to_string(), "v".to_string())].into();
        assert!(filter.matches("a/x", 50, &tags));
        assert!(!filter.matches("b/x", 50, &tags));
        assert!(!filter.matches("a/x", 10, &tags), "the bounds are strict");
        assert!(!filter.matches("a/x", 100, &tags));
        assert!(!filter.matches("a/x", 50, &BTreeMap::new()));
    }

    #[test]
    fn days_round_up_to_midnight_utc_but_short_test_days_do_not() {
        let created = DAY_MS * 20_000 + 5 * 3_600_000; // 05:00 UTC
        assert_eq!(after_days(created, 1, DAY_MS), DAY_MS * 20_002);
        assert_eq!(after_days(DAY_MS * 20_000, 1, DAY_MS), DAY_MS * 20_001);
        assert_eq!(after_days(1_000, 3, 10_000), 31_000);
        let config = LifecycleConfig::from_s3(&[rule(Some("r"), "Enabled")]).unwrap();
        let header = config.expiration_header("logs/1", 5, &BTreeMap::new(), created).unwrap();
        assert!(header.ends_with("rule-id=\"r\""), "{header}");
        assert!(header.contains("00:00:00 GMT"), "{header}");
        assert_eq!(config.expiration_header("other", 5, &BTreeMap::new(), created), None);
    }

    #[test]
    fn the_listing_prefix_is_what_every_rule_shares() {
        let with = |prefix: &str| Rule {
            filter: Filter { prefix: prefix.into(), ..Default::default() },
            ..Default::default()
        };
        let rules = [with("logs/a"), with("logs/b"), with("logs/")];
        assert_eq!(common_prefix(rules.iter()), "logs/");
        let rules = [with("logs/"), with("")];
        assert_eq!(common_prefix(rules.iter()), "");
    }
}
