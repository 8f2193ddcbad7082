//! The client side of meta's HTTP API (docs/meta-api.md): objects, repair reports, the
//! repair queue (with failure causes), lost objects and the deferred deletions of replaced
//! copies.
//!
//! Invariants: every call either returns meta's answer parsed, or a [`ClientError::Meta`]
//! carrying meta's own error code and message, or [`ClientError::MetaUnreachable`]; object
//! keys are percent-encoded into the path, so any key meta accepts round-trips.
//!
//! Several metas (replicas on one store) are given as one comma-separated list of URLs. A
//! call goes to the meta that answered last; when that one cannot even be connected to, the
//! call goes to the next, in turn, and the one that answers is used from then on. A request
//! that reached a meta is never sent again to another (it may have taken effect): its
//! failure is the caller's to see.

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use serde_json::{json, Value};
use weft_layout::{StripedLayout, UnitId};

use weft_auth::{sign_reqwest::SendSigned, Audience, ClusterSecret, Signer};
use weft_wire::repair::{DeletionList, FailCause};

use crate::{ClientError, ObjectInfo, Result};

/// How long meta may take to answer one request.
const META_TIMEOUT: Duration = Duration::from_secs(30);

/// A handle on meta's API.
#[derive(Clone, Debug)]
pub struct MetaClient {
    /// Every meta's base URL, in the order given.
    bases: Arc<Vec<String>>,
    /// The one that answered last (clones share it).
    current: Arc<AtomicUsize>,
    http: reqwest::Client,
    signer: Signer,
}

/// A repair task leased from meta's queue, with the object and the destination meta chose.
#[derive(Clone, Debug)]
pub struct RepairTask {
    pub task_id: u64,
    pub deadline_ms: u64,
    pub unit: UnitId,
    pub reason: String,
    pub attempts: u32,
    pub object: ObjectInfo,
    pub destination_node: u32,
    pub destination_disk: u32,
    pub destination_endpoint: String,
}

/// The prefix of weft's internal bucket names (weft-meta's `INTERNAL_BUCKET_PREFIX`, which
/// no S3 bucket name can start with).
const INTERNAL_BUCKET_PREFIX: &str = ".weft-";

/// Percent-encodes an object key for a URL path, keeping `/` and RFC 3986 unreserved bytes.
pub fn encode_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl MetaClient {
    /// A client of meta at `base` (`http://host:port`), or of several metas of one store
    /// (`http://a:7700,http://b:7700`), failing over between them.
    pub fn new(base: &str, secret: &ClusterSecret) -> Result<MetaClient> {
        let bases: Vec<String> = base
            .split(',')
            .map(|b| b.trim().trim_end_matches('/').to_string())
            .filter(|b| !b.is_empty())
            .collect();
        if bases.is_empty() {
            return Err(ClientError::Invalid(format!("no meta URL in {base:?}")));
        }
        let http = weft_auth::sign_reqwest::client_builder()
            .timeout(META_TIMEOUT)
            .connect_timeout(Duration::from_secs(3))
            .build()
            .map_err(|e| ClientError::Invalid(format!("cannot build an HTTP client: {e}")))?;
        Ok(MetaClient {
            bases: Arc::new(bases),
            current: Arc::new(AtomicUsize::new(0)),
            http,
            signer: secret.signer_for(Audience::Meta),
        })
    }

    /// The base URL of the meta in use (the one that answered last).
    pub fn url(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len()]
    }

    /// Every meta's base URL.
    pub fn urls(&self) -> &[String] {
        &self.bases
    }

    /// The path of an object; refuses keys that URL normalisation would change.
    pub(crate) fn object_path(bucket: &str, key: &str) -> Result<String> {
        // weft's internal buckets name objects as they need (the versions bucket's names hold
        // the S3 key and more, so they may pass 1024 bytes); meta made those names.
        let internal = bucket.starts_with(INTERNAL_BUCKET_PREFIX);
        if let Some(reason) = weft_wire::object_key_problem(key).filter(|_| !internal) {
            return Err(ClientError::Invalid(format!("invalid object key {key:?}: {reason}")));
        }
        if bucket.is_empty() || bucket.contains('/') || bucket == "." || bucket == ".." {
            return Err(ClientError::Invalid(format!("invalid bucket name {bucket:?}")));
        }
        Ok(format!("/v1/buckets/{}/objects/{}", encode_path(bucket), encode_path(key)))
    }

    /// Sends a request and returns meta's JSON answer, or meta's error.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let first = self.current.load(Ordering::Relaxed) % self.bases.len();
        let mut attempt = 0;
        let (base, response) = loop {
            let at = (first + attempt) % self.bases.len();
            let base = &self.bases[at];
            let mut request = self.http.request(method.clone(), format!("{base}{path}"));
            if let Some(body) = &body {
                request = request.json(body);
            }
            match request.send_signed(&self.signer).await {
                Ok(response) => {
                    if at != first {
                        tracing::info!(meta = %base, "meta answers here now");
                        self.current.store(at, Ordering::Relaxed);
                    }
                    break (base.clone(), response);
                }
                // Never connected: the request did not reach it, another meta may take it.
                Err(e) if e.is_connect() && attempt + 1 < self.bases.len() => attempt += 1,
                Err(e) => {
                    return Err(ClientError::MetaUnreachable {
                        url: base.clone(),
                        cause: e.to_string(),
                    })
                }
            }
        };
        let status = response.status();
        let text = response.text().await.map_err(|e| ClientError::MetaUnreachable {
            url: base.clone(),
            cause: format!("reading the answer to {path}: {e}"),
        })?;
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|_| json!({ "message": text }))
        };
        if status.is_success() {
            return Ok(value);
        }
        Err(ClientError::Meta {
            status: status.as_u16(),
            code: value["error"].as_str().unwrap_or("error").to_string(),
            message: value["message"].as_str().unwrap_or("(no message)").to_string(),
        })
    }

    /// GET a meta path, JSON answer.
    pub async fn get_json(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// POST a JSON body to a meta path, JSON answer.
    pub async fn post_json(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// Begins a write: meta places the units of an object of `size` bytes, on none of the
    /// nodes in `avoid_nodes`.
    pub async fn begin(
        &self,
        bucket: &str,
        key: &str,
        size: u64,
        policy: Option<&StripedLayout>,
        avoid_nodes: &[u32],
    ) -> Result<ObjectInfo> {
        self.begin_with(bucket, key, size, policy, avoid_nodes, false).await
    }

    /// [`MetaClient::begin`], in the RAIDP tier when `raidp` is set (whatever the bucket's
    /// policy).
    pub async fn begin_with(
        &self,
        bucket: &str,
        key: &str,
        size: u64,
        policy: Option<&StripedLayout>,
        avoid_nodes: &[u32],
        raidp: bool,
    ) -> Result<ObjectInfo> {
        let path = format!("{}/begin", Self::object_path(bucket, key)?);
        let mut body = json!({ "size": size, "policy": policy, "avoid_nodes": avoid_nodes });
        if raidp {
            body["raidp"] = json!(true);
        }
        ObjectInfo::from_json(self.post_json(&path, body).await?)
    }

    /// Commits the write of `generation` with the digest of every unit written (or none);
    /// returns the object and the one it replaced. More digests than one request holds are
    /// sent ahead in pages (`POST .../objects/{key}/digests`).
    pub async fn commit(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
        digests: &BTreeMap<UnitId, weft_wire::UnitDigest>,
    ) -> Result<(ObjectInfo, Option<ObjectInfo>)> {
        self.commit_with(bucket, key, generation, digests, &crate::CommitTerms::default()).await
    }

    /// [`MetaClient::commit`] carrying `terms`: attributes kept with the object, an object
    /// lock, and a precondition (meta's 412 `precondition_failed`, nothing committed, unless
    /// it holds).
    pub async fn commit_with(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
        digests: &BTreeMap<UnitId, weft_wire::UnitDigest>,
        terms: &crate::CommitTerms,
    ) -> Result<(ObjectInfo, Option<ObjectInfo>)> {
        let object = Self::object_path(bucket, key)?;
        let base = json!({ "generation": generation });
        let named = self.digests_ahead(&format!("{object}/digests"), &base, digests).await?;
        let path = format!("{object}/commit");
        let mut body = json!({ "generation": generation, "digests": named });
        if let Some(attributes) = &terms.attributes {
            body["attributes"] = attributes.clone();
        }
        if let Some(precondition) = terms.precondition {
            body["if"] = precondition.to_json();
        }
        if let Some(lock) = &terms.lock {
            body["lock"] = lock.clone();
        }
        let mut value = self.post_json(&path, body).await?;
        let replaced = match value["replaced"].take() {
            Value::Null => None,
            old => Some(ObjectInfo::from_json(old)?),
        };
        Ok((ObjectInfo::from_json(value)?, replaced))
    }

    /// Gives up the write of `generation` (its writer failed after deleting what it wrote):
    /// meta removes it at once instead of at expiry.
    pub async fn abort(&self, bucket: &str, key: &str, generation: u64) -> Result<()> {
        let path = format!("{}/abort", Self::object_path(bucket, key)?);
        self.post_json(&path, json!({ "generation": generation })).await.map(drop)
    }

    /// Sends `digests` past one request's worth ahead to `path` in pages (each body `base`
    /// plus `"digests"`), and returns the last page, by unit name, for the commit to carry.
    pub async fn digests_ahead(
        &self,
        path: &str,
        base: &Value,
        digests: &BTreeMap<UnitId, weft_wire::UnitDigest>,
    ) -> Result<BTreeMap<String, weft_wire::UnitDigest>> {
        let all: Vec<(&UnitId, &weft_wire::UnitDigest)> = digests.iter().collect();
        let mut pages: Vec<&[(&UnitId, &weft_wire::UnitDigest)]> =
            all.chunks(crate::digest::DIGESTS_PER_REQUEST).collect();
        let last = pages.pop().unwrap_or_default();
        for page in pages {
            let mut body = base.clone();
            body["digests"] = json!(crate::digest::by_name(page.iter().copied()));
            self.post_json(path, body).await?;
        }
        Ok(crate::digest::by_name(last.iter().copied()))
    }

    /// The committed object under (bucket, key), units with their node's state.
    pub async fn get_object(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        let path = Self::object_path(bucket, key)?;
        let mut object = ObjectInfo::from_json(self.get_json(&path).await?)?;
        self.fetch_digests(&path, &mut object).await?;
        Ok(object)
    }

    /// Fetches, page by page, the digests of the units a reply on a large object did not
    /// list ([`ObjectInfo::add_digests`]). `path` is the object's path.
    pub async fn fetch_digests(&self, path: &str, object: &mut ObjectInfo) -> Result<()> {
        while let Some(from) = object.next_digest_page() {
            let page = self.get_json(&format!("{path}?units_from={from}")).await?;
            object.add_digests(&page)?;
        }
        Ok(())
    }

    /// Deletes (bucket, key) in meta as an S3 DELETE naming no version: the object goes
    /// (its units are garbage), or, in a versioned bucket, is kept as a version and a delete
    /// marker is made.
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<crate::Deletion> {
        self.delete_object_if(bucket, key, None).await
    }

    /// [`MetaClient::delete_object`] of generation `generation` only, when given (meta's 412
    /// `precondition_failed` otherwise, nothing deleted).
    pub async fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        generation: Option<u64>,
    ) -> Result<crate::Deletion> {
        let mut path = Self::object_path(bucket, key)?;
        if let Some(generation) = generation {
            path.push_str(&format!("?if_generation={generation}"));
        }
        crate::Deletion::from_json(self.call(reqwest::Method::DELETE, &path, None).await?)
    }

    /// One page of the committed objects of a bucket whose key starts with `prefix`.
    pub async fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Value> {
        let mut path = format!(
            "/v1/buckets/{}/objects?prefix={}&limit={limit}",
            encode_path(bucket),
            encode_query(prefix)
        );
        if let Some(after) = start_after {
            path.push_str(&format!("&start_after={}", encode_query(after)));
        }
        self.get_json(&path).await
    }

    /// Tells meta a unit was found missing or corrupt, so it is queued for repair (a reason
    /// naming an end-to-end checksum mismatch is flagged so meta counts it).
    pub async fn report_unit(&self, object: &ObjectInfo, unit: UnitId, reason: &str) -> Result<()> {
        let mut body = json!({
            "bucket": object.bucket, "key": object.key, "generation": object.generation,
            "unit": unit.short_name(), "reason": reason,
        });
        if reason.contains(crate::digest::MISMATCH) {
            body["digest_mismatch"] = json!(true);
        }
        self.post_json("/v1/repairs", body).await.map(|_| ())
    }

    /// Leases the next repair task for `lease_ms`; None when the queue has nothing due.
    pub async fn take_repair(&self, lease_ms: u64) -> Result<Option<RepairTask>> {
        let mut value = self.post_json("/v1/repairs/take", json!({ "lease_ms": lease_ms })).await?;
        if value["task"].is_null() {
            return Ok(None);
        }
        let bad = |what: &str| ClientError::Invalid(format!("meta sent a bad repair task: {what}"));
        let mut object = ObjectInfo::from_json(value["object"].take())?;
        self.fetch_digests(&Self::object_path(&object.bucket, &object.key)?, &mut object).await?;
        let task = &value["task"];
        let unit =
            task["unit"].as_str().and_then(UnitId::parse_short_name).ok_or_else(|| bad("unit"))?;
        let destination = &value["destination"];
        Ok(Some(RepairTask {
            task_id: task["task_id"].as_u64().ok_or_else(|| bad("task_id"))?,
            deadline_ms: task["deadline_ms"].as_u64().ok_or_else(|| bad("deadline_ms"))?,
            unit,
            reason: task["reason"].as_str().unwrap_or("").to_string(),
            attempts: task["attempts"].as_u64().unwrap_or(0) as u32,
            destination_node: destination["node_id"].as_u64().ok_or_else(|| bad("node_id"))? as u32,
            destination_disk: destination["disk"].as_u64().ok_or_else(|| bad("disk"))? as u32,
            destination_endpoint: destination["endpoint"]
                .as_str()
                .ok_or_else(|| bad("endpoint"))?
                .to_string(),
            object,
        }))
    }

    /// Reports a repaired unit durable at the task's destination; returns meta's result
    /// (`relocated` or `stale`).
    pub async fn complete_repair(&self, task: &RepairTask) -> Result<String> {
        Ok(self.complete_repair_with_deletion(task).await?.0)
    }

    /// [`MetaClient::complete_repair`], also returning the id of the deletion meta queued
    /// for the replaced copy, if it queued one.
    pub async fn complete_repair_with_deletion(
        &self,
        task: &RepairTask,
    ) -> Result<(String, Option<String>)> {
        let body = json!({
            "deadline_ms": task.deadline_ms,
            "node_id": task.destination_node,
            "disk": task.destination_disk,
        });
        let value = self.post_json(&format!("/v1/repairs/{}/complete", task.task_id), body).await?;
        let result = value["result"].as_str().unwrap_or("relocated").to_string();
        Ok((result, value["deletion"].as_str().map(str::to_string)))
    }

    /// Returns a task whose repair failed to the queue (cause `transient`).
    pub async fn fail_repair(&self, task: &RepairTask, error: &str) -> Result<()> {
        self.fail_repair_with_cause(task, error, FailCause::Transient).await
    }

    /// Returns a task whose repair failed to the queue, saying why (meta backs off longer
    /// and counts the unit unfound when the cause is `unrecoverable`).
    pub async fn fail_repair_with_cause(
        &self,
        task: &RepairTask,
        error: &str,
        cause: FailCause,
    ) -> Result<()> {
        let body = json!({ "deadline_ms": task.deadline_ms, "error": error, "cause": cause });
        self.post_json(&format!("/v1/repairs/{}/fail", task.task_id), body).await.map(|_| ())
    }

    /// Replaced copies to delete on nodes that are up (`GET /v1/deletions`).
    pub async fn deletions(&self) -> Result<DeletionList> {
        let value = self.get_json("/v1/deletions").await?;
        serde_json::from_value(value)
            .map_err(|e| ClientError::Invalid(format!("meta sent a bad deletion list: {e}")))
    }

    /// Tells meta these replaced copies are gone (`POST /v1/deletions/done`).
    pub async fn deletions_done(&self, ids: &[String]) -> Result<u64> {
        let value = self.post_json("/v1/deletions/done", json!({ "ids": ids })).await?;
        Ok(value["removed"].as_u64().unwrap_or(0))
    }

    /// Gives up on an object with unfound units (`POST /v1/repairs/lost`): meta deletes its
    /// record and remembers it lost. Returns meta's reply (`MarkLostReply`).
    pub async fn mark_lost(&self, bucket: &str, key: &str) -> Result<Value> {
        self.post_json("/v1/repairs/lost", json!({ "bucket": bucket, "key": key })).await
    }
}

/// Percent-encodes a query parameter value (everything but unreserved bytes).
pub(crate) fn encode_query(text: &str) -> String {
    encode_path(text).replace('/', "%2F")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded_but_keep_slashes() {
        assert_eq!(encode_path("a/b c?d#e%f"), "a/b%20c%3Fd%23e%25f");
        assert_eq!(encode_path("é"), "%C3%A9");
        assert_eq!(encode_query("x/y&z"), "x%2Fy%26z");
    }
}
