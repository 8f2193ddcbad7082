//! meta's versioning routes (S3 versioning; docs/meta-api.md "Versions"): a bucket's state,
//! one version of a key (to read or delete), the listing of every version, and what a
//! delete of a key did.
//!
//! Invariants:
//! - A version is read like any object: [`VersionInfo::object`] is its record as stored
//!   (in its bucket when current, in meta's versions bucket otherwise), so reads, degraded
//!   reads and unit reports name the record where it is.
//! - A delete's units are deleted only for the record meta says it removed for good; a
//!   version kept (or a delete marker made) leaves every unit in place.

use serde_json::Value;

use crate::meta::{encode_path, encode_query};
use crate::{Client, ClientError, MetaClient, ObjectInfo, Result, UnitInfo};

/// One version of a key.
#[derive(Debug, Clone)]
pub struct VersionInfo {
    /// The record as stored (a delete marker has no units and size 0).
    pub object: ObjectInfo,
    /// S3's version id: the generation in decimal, or `null`.
    pub version_id: String,
    pub delete_marker: bool,
    /// Whether it is the key's newest version.
    pub is_latest: bool,
}

impl VersionInfo {
    fn from_json(value: Value) -> Result<VersionInfo> {
        let bad = || ClientError::Invalid(format!("meta sent a bad version: {value}"));
        let version_id = value["version_id"].as_str().ok_or_else(bad)?.to_string();
        let delete_marker = value["delete_marker"].as_bool().ok_or_else(bad)?;
        let is_latest = value["is_latest"].as_bool().unwrap_or(false);
        let object = ObjectInfo::from_json(value)?;
        Ok(VersionInfo { object, version_id, delete_marker, is_latest })
    }
}

/// What a delete of a key (no version named) did.
#[derive(Debug, Clone)]
pub struct Deletion {
    /// The object removed for good (its units are garbage); None when it was kept as a
    /// version or the key had none.
    pub removed: Option<ObjectInfo>,
    /// The delete marker made (versioned buckets).
    pub delete_marker: Option<VersionInfo>,
}

impl Deletion {
    pub(crate) fn from_json(mut value: Value) -> Result<Deletion> {
        let delete_marker = match value.get_mut("delete_marker").map(Value::take) {
            None | Some(Value::Null) => None,
            Some(marker) => Some(VersionInfo::from_json(marker)?),
        };
        let removed = match value["removed"].as_bool() {
            Some(false) => None,
            _ => Some(ObjectInfo::from_json(value)?),
        };
        Ok(Deletion { removed, delete_marker })
    }
}

impl MetaClient {
    fn versions_path(bucket: &str, key: &str) -> Result<String> {
        let path = Self::object_path(bucket, key)?;
        Ok(path.replacen("/objects/", "/versions/", 1))
    }

    /// Sets a bucket's versioning: `enabled` or `suspended`. Answers the bucket's record.
    pub async fn set_versioning(&self, bucket: &str, state: &str) -> Result<Value> {
        let path = format!("/v1/buckets/{}/versioning", encode_path(bucket).replace('/', "%2F"));
        self.put_json(&path, serde_json::json!({ "versioning": state })).await
    }

    /// One version of (bucket, key): `version_id` (S3's, `null` included), or the newest
    /// when None (the current object or a delete marker).
    pub async fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<VersionInfo> {
        let mut path = Self::versions_path(bucket, key)?;
        if let Some(id) = version_id {
            path.push_str(&format!("?version_id={}", encode_query(id)));
        }
        let mut version = VersionInfo::from_json(self.get_json(&path).await?)?;
        let object_path = Self::object_path(&version.object.bucket, &version.object.key)?;
        self.fetch_digests(&object_path, &mut version.object).await?;
        Ok(version)
    }

    /// Removes version `version_id` of (bucket, key) for good (of generation `generation`
    /// only, when given); answers it as it was stored (its units are garbage). A locked
    /// version is refused (403 `object_locked`); `bypass_governance` lifts a governance
    /// retention.
    pub async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        generation: Option<u64>,
        bypass_governance: bool,
    ) -> Result<VersionInfo> {
        let mut path = Self::versions_path(bucket, key)?;
        path.push_str(&format!("?version_id={}", encode_query(version_id)));
        if let Some(generation) = generation {
            path.push_str(&format!("&if_generation={generation}"));
        }
        if bypass_governance {
            path.push_str("&bypass_governance=true");
        }
        VersionInfo::from_json(self.call(reqwest::Method::DELETE, &path, None).await?)
    }

    /// Enables S3 object lock on a bucket (its versioning must be enabled) or replaces its
    /// default retention (`{"mode": "governance" | "compliance", "days" | "years": N}` or
    /// null). Answers the bucket's record.
    pub async fn set_object_lock(
        &self,
        bucket: &str,
        default_retention: Option<&Value>,
    ) -> Result<Value> {
        let path = format!("/v1/buckets/{}/object-lock", encode_path(bucket).replace('/', "%2F"));
        self.put_json(&path, serde_json::json!({ "default_retention": default_retention })).await
    }

    /// Replaces the attributes of version `version_id` of (bucket, key) (the current object
    /// when None). Answers the version as stored.
    pub async fn set_version_attributes(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        attributes: &Value,
    ) -> Result<VersionInfo> {
        let mut path = Self::object_path(bucket, key)?.replacen("/objects/", "/attributes/", 1);
        if let Some(id) = version_id {
            path.push_str(&format!("?version_id={}", encode_query(id)));
        }
        let body = serde_json::json!({ "attributes": attributes });
        VersionInfo::from_json(self.put_json(&path, body).await?)
    }

    /// Changes the object lock of version `version_id` of (bucket, key) (the current object
    /// when None): `change` is `{"retention": {"mode", "until_ms"} | null}` or
    /// `{"legal_hold": bool}`. Answers the version as stored.
    pub async fn set_version_lock(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        mut change: Value,
        bypass_governance: bool,
    ) -> Result<VersionInfo> {
        let mut path = Self::object_path(bucket, key)?.replacen("/objects/", "/locks/", 1);
        if let Some(id) = version_id {
            path.push_str(&format!("?version_id={}", encode_query(id)));
        }
        if bypass_governance {
            change["bypass_governance"] = Value::Bool(true);
        }
        VersionInfo::from_json(self.put_json(&path, change).await?)
    }

    /// One page of every version of the keys of `bucket` starting with `prefix`, after
    /// (`key_marker`, `version_id_marker`): `{"versions": [...], "next": {...} | null}`.
    pub async fn list_versions(
        &self,
        bucket: &str,
        prefix: &str,
        key_marker: Option<&str>,
        version_id_marker: Option<&str>,
        limit: usize,
    ) -> Result<Value> {
        let mut path = format!(
            "/v1/buckets/{}/versions?prefix={}&limit={limit}",
            encode_path(bucket).replace('/', "%2F"),
            encode_query(prefix)
        );
        if let Some(marker) = key_marker {
            path.push_str(&format!("&key_marker={}", encode_query(marker)));
        }
        if let Some(marker) = version_id_marker {
            path.push_str(&format!("&version_id_marker={}", encode_query(marker)));
        }
        self.get_json(&path).await
    }
}

impl Client {
    /// Removes version `version_id` of (bucket, key) from meta, then its units from the
    /// nodes; returns it and how many units could not be deleted (garbage for gc).
    pub async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        generation: Option<u64>,
        bypass_governance: bool,
    ) -> Result<(VersionInfo, usize)> {
        let version = self
            .meta
            .delete_version(bucket, key, version_id, generation, bypass_governance)
            .await?;
        let units: Vec<UnitInfo> = version.object.units.values().cloned().collect();
        let left = self.delete_units(&units).await;
        Ok((version, left))
    }
}
