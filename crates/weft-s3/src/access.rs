//! Who may do what: the access check every S3 request passes before its operation runs
//! (s3s's `S3Access`), by the ACLs of [`crate::acl`].
//!
//! Invariants:
//! - Every request is checked, anonymous ones included; nothing is allowed by default but
//!   what the module header of [`crate::acl`] says: an owned bucket's owner may do
//!   everything in it; others what its ACL (bucket operations, writes of objects) or the
//!   object's ACL (reads of an object and of its ACL) grants; a shared bucket (no ACL)
//!   lets every authenticated user do everything and anonymous requests nothing.
//! - Configuration of a bucket (versioning, CORS, object lock, deletion...) is its owner's
//!   alone, whatever its ACL grants.
//! - A missing bucket is not hidden: the request goes on and answers 404 NoSuchBucket (as
//!   S3). A missing object answers 404 to whoever may read the bucket, 403 to others (S3
//!   does not tell them whether it exists).
//! - A bucket's access is cached at most [`ACL_CACHE_TTL`] (bounded to
//!   [`MAX_CACHED_ACLS`] buckets) and forgotten at once when this gateway changes it, so
//!   another gateway's change takes at most that long to hold here.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use s3s::{
    access::{S3Access, S3AccessContext},
    path::S3Path,
    s3_error, S3Result,
};
use serde_json::Value;
use weft_client::ClientError;

use crate::acl::{Acl, Permission, Requester};
use crate::attributes::Attributes;
use crate::cors::BUCKET_CONFIG;
use crate::gateway::{s3_error_of, Gateway};
use crate::policy::{action_of, BucketPolicy, Effect};

/// How long a bucket's access is trusted without asking meta again.
pub const ACL_CACHE_TTL: Duration = Duration::from_secs(2);
/// Most buckets whose access is cached.
pub const MAX_CACHED_ACLS: usize = 10_000;

/// The gateway record of a bucket's ACL.
pub fn acl_record_name(bucket: &str) -> String {
    format!("{bucket}/acl")
}

/// The gateway record of a bucket's public access block.
pub fn block_record_name(bucket: &str) -> String {
    format!("{bucket}/public_access_block")
}

/// A bucket's public access block (S3's four settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublicBlock {
    /// Refuse requests that set a public ACL (a grant to a group).
    #[serde(default)]
    pub block_public_acls: bool,
    /// Act as if the bucket's and its objects' grants to groups were not there.
    #[serde(default)]
    pub ignore_public_acls: bool,
    #[serde(default)]
    pub block_public_policy: bool,
    #[serde(default)]
    pub restrict_public_buckets: bool,
}

/// What governs a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketAccess {
    /// No such bucket.
    Missing,
    /// A bucket without an ACL (made outside S3, or before ACLs): every authenticated user
    /// may do everything.
    Shared,
    /// An owned bucket.
    Owned(Acl),
}

impl BucketAccess {
    /// Whether `who` may do what `wanted` allows on the bucket.
    pub fn allows(&self, who: Requester<'_>, wanted: Permission) -> bool {
        match self {
            BucketAccess::Missing => true,
            BucketAccess::Shared => who.is_some(),
            BucketAccess::Owned(acl) => acl.allows(who, wanted),
        }
    }

    /// Whether `who` owns the bucket (or shares it).
    pub fn is_owner(&self, who: Requester<'_>) -> bool {
        match self {
            BucketAccess::Missing => true,
            BucketAccess::Shared => who.is_some(),
            BucketAccess::Owned(acl) => who == Some(acl.owner.as_str()),
        }
    }

    /// The owner, when owned.
    pub fn owner(&self) -> Option<&str> {
        match self {
            BucketAccess::Owned(acl) => Some(&acl.owner),
            _ => None,
        }
    }
}

/// Buckets' access as recently read from meta (clones share it).
#[derive(Debug, Clone, Default)]
pub struct AclCache {
    entries: Arc<Mutex<HashMap<String, (BucketState, Instant)>>>,
}

/// A bucket's access as the checks use it: its ACL (without grants to groups when its
/// public access block ignores them), its public access block and its policy.
#[derive(Debug, Clone)]
pub struct BucketState {
    pub access: BucketAccess,
    pub block: PublicBlock,
    pub policy: Option<Arc<BucketPolicy>>,
    /// Its lifecycle configuration (for the `x-amz-expiration` header).
    pub lifecycle: Option<Arc<crate::lifecycle::LifecycleConfig>>,
    /// Its default encryption (PutBucketEncryption).
    pub encryption: Option<crate::encryption::BucketEncryption>,
}

impl AclCache {
    fn get(&self, bucket: &str) -> Option<BucketState> {
        let entries = self.entries.lock().expect("acl cache");
        entries.get(bucket).filter(|(_, at)| at.elapsed() < ACL_CACHE_TTL).map(|(a, _)| a.clone())
    }

    fn put(&self, bucket: &str, access: BucketState) {
        let mut entries = self.entries.lock().expect("acl cache");
        if entries.len() >= MAX_CACHED_ACLS {
            entries.retain(|_, (_, at)| at.elapsed() < ACL_CACHE_TTL);
            if entries.len() >= MAX_CACHED_ACLS {
                entries.clear();
            }
        }
        entries.insert(bucket.to_string(), (access, Instant::now()));
    }

    /// Forgets a bucket (this gateway changed its ACL, made or deleted it).
    pub fn forget(&self, bucket: &str) {
        self.entries.lock().expect("acl cache").remove(bucket);
    }
}

/// The ACL kept in an object's JSON (its attributes), if any.
pub fn object_acl(object: &Value) -> Option<Acl> {
    serde_json::from_value(object["attributes"]["acl"].clone()).ok()
}

impl Gateway {
    /// The user a request is signed by; None for an anonymous one.
    pub(crate) async fn requester(
        &self,
        credentials: Option<&s3s::auth::Credentials>,
    ) -> S3Result<Option<String>> {
        match credentials {
            Some(credentials) => Ok(Some(self.keys().user_of(&credentials.access_key).await?)),
            None => Ok(None),
        }
    }

    /// What governs `bucket` (cached, see the module invariants): its effective ACL.
    pub(crate) async fn bucket_access(&self, bucket: &str) -> S3Result<BucketAccess> {
        Ok(self.bucket_state(bucket).await?.access)
    }

    /// The public access block of `bucket` (cached with its ACL).
    pub(crate) async fn public_block(&self, bucket: &str) -> S3Result<PublicBlock> {
        Ok(self.bucket_state(bucket).await?.block)
    }

    /// A bucket's effective ACL, public access block and policy (cached), read from meta in
    /// one listing of its configuration records.
    pub(crate) async fn bucket_state(&self, bucket: &str) -> S3Result<BucketState> {
        if let Some(state) = self.acls().get(bucket) {
            return Ok(state);
        }
        let meta = &self.client().meta;
        let prefix = format!("{bucket}/");
        let (records, _) =
            meta.list_records(BUCKET_CONFIG, &prefix, None, 100).await.map_err(s3_error_of)?;
        let record = |suffix: &str| {
            records
                .iter()
                .find(|(name, _)| name.strip_prefix(&prefix) == Some(suffix))
                .map(|(_, v)| v.clone())
        };
        let block: PublicBlock = record("public_access_block")
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let policy = match record("policy").and_then(|v| v["text"].as_str().map(str::to_string)) {
            Some(text) => Some(Arc::new(BucketPolicy::parse(bucket, &text).map_err(|e| {
                s3_error!(InternalError, "bucket {bucket:?} has a bad policy record: {e}")
            })?)),
            None => None,
        };
        // A configuration the gateway cannot read only loses the advisory header.
        let lifecycle = record("lifecycle")
            .and_then(|v| serde_json::from_value::<crate::lifecycle::LifecycleConfig>(v).ok())
            .map(Arc::new);
        let access = match record("acl") {
            Some(value) => {
                let mut acl: Acl = serde_json::from_value(value).map_err(|e| {
                    s3_error!(InternalError, "bucket {bucket:?} has a bad ACL record: {e}")
                })?;
                if block.ignore_public_acls {
                    acl.grants.retain(|g| !matches!(g.grantee, crate::acl::Grantee::Group(_)));
                }
                BucketAccess::Owned(acl)
            }
            None => match meta.get_bucket(bucket).await {
                Ok(_) => BucketAccess::Shared,
                Err(ClientError::Meta { code, .. }) if code == "no_such_bucket" => {
                    BucketAccess::Missing
                }
                Err(error) => return Err(s3_error_of(error)),
            },
        };
        let encryption = record("encryption").and_then(|v| serde_json::from_value(v).ok());
        let state = BucketState { access, block, policy, lifecycle, encryption };
        self.acls().put(bucket, state.clone());
        Ok(state)
    }

    /// Refuses a public `acl` where the bucket's public access block says so (403).
    pub(crate) async fn check_public_acl(&self, bucket: &str, acl: &Acl) -> S3Result<()> {
        if acl.is_public() && self.public_block(bucket).await?.block_public_acls {
            return Err(s3_error!(
                AccessDenied,
                "bucket {bucket:?} blocks public ACLs (its public access block)"
            ));
        }
        Ok(())
    }

    /// The ACL of a version of an object (an object without one: private to its bucket's
    /// owner); None when there is no such object (or it is a delete marker).
    pub(crate) async fn version_acl(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        bucket_owner: Option<&str>,
    ) -> S3Result<Option<Acl>> {
        let found = match version_id {
            Some(id) => self
                .client()
                .meta
                .get_version(bucket, key, Some(id))
                .await
                .map(|v| (!v.delete_marker).then_some(v.object.raw)),
            None => self.client().meta.get_object(bucket, key).await.map(|o| Some(o.raw)),
        };
        let raw = match found {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(None),
            Err(ClientError::Meta { code, .. })
                if code == "no_such_key" || code == "no_such_version" =>
            {
                return Ok(None)
            }
            Err(error) => return Err(s3_error_of(error)),
        };
        Ok(Some(object_acl(&raw).unwrap_or_else(|| Acl::private(bucket_owner.unwrap_or("")))))
    }

    /// Whether `who` may do `wanted` with an object of a bucket in `state` (its policy has
    /// not allowed it already). A missing object answers 404 to whoever may list the
    /// bucket (by ACL, or by policy for a prefix that matches the key).
    async fn check_object(
        &self,
        who: Requester<'_>,
        state: &BucketState,
        object: (&str, &str, Option<&str>),
        wanted: Permission,
    ) -> S3Result<()> {
        let (bucket, key, version_id) = object;
        let access = &state.access;
        if access.is_owner(who) {
            return Ok(());
        }
        let acl = self.version_acl(bucket, key, version_id, access.owner()).await?;
        let acl = acl.map(|mut acl| {
            if state.block.ignore_public_acls {
                acl.grants.retain(|g| !matches!(g.grantee, crate::acl::Grantee::Group(_)));
            }
            acl
        });
        let may_list = || {
            access.allows(who, Permission::Read)
                || state.policy.as_ref().is_some_and(|policy| {
                    let resource = format!("arn:aws:s3:::{bucket}");
                    let request = crate::policy::Request {
                        who,
                        action: "s3:ListBucket",
                        resource: &resource,
                        prefix: Some(key),
                        existing_tags: None,
                        request_tags: None,
                        headers: None,
                    };
                    policy.decide(&request, state.block.restrict_public_buckets)
                        == Some(Effect::Allow)
                })
        };
        match acl {
            Some(acl) if acl.allows(who, wanted) => Ok(()),
            None if may_list() => Ok(()),
            _ => Err(denied()),
        }
    }
}

fn denied() -> s3s::S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

/// A query parameter of a request URI, decoded.
pub(crate) fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// (bucket, key, version) of an `x-amz-copy-source` header.
fn copy_source(headers: &http::HeaderMap) -> Option<(String, String, Option<String>)> {
    let value = headers.get("x-amz-copy-source")?.to_str().ok()?;
    let (path, version) = match value.split_once("?versionId=") {
        Some((path, version)) => (path, Some(percent_decode(version))),
        None => (value, None),
    };
    let path = percent_decode(path.trim_start_matches('/'));
    let (bucket, key) = path.split_once('/')?;
    Some((bucket.to_string(), key.to_string(), version))
}

#[async_trait::async_trait]
impl S3Access for Gateway {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let who = self.requester(cx.credentials()).await?;
        let who = who.as_deref();
        let op = cx.s3_op().name();
        // A scoped key: its bucket only, reads only (on top of its user's rights).
        if let Some(credentials) = cx.credentials() {
            let bucket = match cx.s3_path() {
                S3Path::Root => None,
                S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => Some(bucket.as_ref()),
            };
            let scope = self.keys().scope_of(&credentials.access_key).await?;
            scope.check(op, bucket)?;
            if let Some((source, _, _)) = copy_source(cx.headers()) {
                scope.check("GetObject", Some(&source))?;
            }
        }
        let (bucket, key) = match cx.s3_path() {
            // ListBuckets answers an anonymous request with no buckets (S3).
            S3Path::Root => return Ok(()),
            S3Path::Bucket { bucket } => (bucket.as_ref(), None),
            S3Path::Object { bucket, key } => (bucket.as_ref(), Some(key.as_ref())),
        };
        if op == "CreateBucket" {
            return match who {
                Some(_) => Ok(()),
                None => Err(denied()),
            };
        }
        let state = self.bucket_state(bucket).await?;
        let access = &state.access;
        let version_id = query_param(cx.uri(), "versionId");
        // The bucket policy first: a Deny ends it (but never locks the owner out of the
        // policy itself), an Allow grants.
        if let Some(policy) = &state.policy {
            let resource = match key {
                Some(key) => format!("arn:aws:s3:::{bucket}/{key}"),
                None => format!("arn:aws:s3:::{bucket}"),
            };
            let prefix = query_param(cx.uri(), "prefix");
            let action = action_of(op);
            // The object's tags, when a condition tests them (an object not there has none).
            let existing_tags = match key {
                Some(key) if policy.tests_existing_tags() => {
                    match self.object_version(bucket, key, version_id.as_deref()).await {
                        Ok((_, shown)) => Some(shown.tags),
                        Err(error) if error.status_code().is_some_and(|s| s.as_u16() == 404) => {
                            Some(BTreeMap::new())
                        }
                        Err(error) => return Err(error),
                    }
                }
                _ => None,
            };
            // The tags the request writes: x-amz-tagging (PutObjectTagging's are in its body,
            // not read here: unknown, so only a Deny takes a condition on them as holding).
            let request_tags = match op {
                "PutObjectTagging" => None,
                _ => Some(
                    crate::tagging::from_header(
                        cx.headers().get("x-amz-tagging").and_then(|v| v.to_str().ok()),
                    )
                    .unwrap_or_default(),
                ),
            };
            let request = crate::policy::Request {
                who,
                action: &action,
                resource: &resource,
                prefix: prefix.as_deref(),
                existing_tags: existing_tags.as_ref(),
                request_tags: request_tags.as_ref(),
                headers: Some(cx.headers()),
            };
            let owner = access.is_owner(who);
            match policy.decide(&request, state.block.restrict_public_buckets && !owner) {
                Some(Effect::Deny) if owner && op.ends_with("BucketPolicy") => {}
                Some(Effect::Deny) => return Err(denied()),
                Some(Effect::Allow) => return Ok(()),
                None => {}
            }
        }
        let bucket_needs = |wanted| match access.allows(who, wanted) {
            true => Ok(()),
            false => Err(denied()),
        };
        let object = |key| (bucket, key, version_id.as_deref());
        match (op, key) {
            (
                "ListObjects"
                | "ListObjectsV2"
                | "ListObjectVersions"
                | "ListMultipartUploads"
                | "HeadBucket"
                | "GetBucketLocation",
                _,
            ) => bucket_needs(Permission::Read),
            ("GetBucketAcl", _) => bucket_needs(Permission::ReadAcp),
            ("PutBucketAcl", _) => bucket_needs(Permission::WriteAcp),
            ("DeleteObjects" | "PostObject", _) => bucket_needs(Permission::Write),
            (
                "PutObject"
                | "CopyObject"
                | "CreateMultipartUpload"
                | "UploadPart"
                | "UploadPartCopy"
                | "CompleteMultipartUpload"
                | "AbortMultipartUpload"
                | "ListParts"
                | "DeleteObject",
                Some(_),
            ) => {
                bucket_needs(Permission::Write)?;
                if op == "CopyObject" || op == "UploadPartCopy" {
                    if let Some((b, k, v)) = copy_source(cx.headers()) {
                        let source = self.bucket_state(&b).await?;
                        self.check_object(who, &source, (&b, &k, v.as_deref()), Permission::Read)
                            .await?;
                    }
                }
                Ok(())
            }
            (
                "GetObject"
                | "HeadObject"
                | "GetObjectAttributes"
                | "GetObjectRetention"
                | "GetObjectLegalHold"
                | "GetObjectTagging",
                Some(key),
            ) => self.check_object(who, &state, object(key), Permission::Read).await,
            ("GetObjectAcl", Some(key)) => {
                self.check_object(who, &state, object(key), Permission::ReadAcp).await
            }
            ("PutObjectAcl", Some(key)) => {
                self.check_object(who, &state, object(key), Permission::WriteAcp).await
            }
            // Everything else (bucket configuration, object lock changes, deletion of the
            // bucket): the owner's alone.
            _ => match access.is_owner(who) {
                true => Ok(()),
                false => Err(denied()),
            },
        }
    }
}

/// The attributes' ACL of a write by `who` (its owner), from S3's canned name or grants,
/// in a bucket owned by `bucket_owner`.
pub fn written_acl(acl: Option<Acl>, who: Option<&str>) -> Option<Acl> {
    acl.or_else(|| who.map(Acl::private))
}

/// Keeps `acl` in `attributes` (what a write commits).
pub fn with_acl(mut attributes: Attributes, acl: Option<Acl>) -> Attributes {
    attributes.acl = acl;
    attributes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_sources_and_query_parameters_decode() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-amz-copy-source", "/b/a%20key?versionId=12".parse().unwrap());
        assert_eq!(copy_source(&headers), Some(("b".into(), "a key".into(), Some("12".into()))));
        let uri: http::Uri = "/b/k?versionId=null&acl".parse().unwrap();
        assert_eq!(query_param(&uri, "versionId").as_deref(), Some("null"));
        assert_eq!(query_param(&uri, "other"), None);
    }

    #[test]
    fn shared_buckets_admit_every_user_and_no_anonymous_one() {
        assert!(BucketAccess::Shared.allows(Some("x"), Permission::Write));
        assert!(!BucketAccess::Shared.allows(None, Permission::Read));
        let owned = BucketAccess::Owned(Acl::canned("public-read", "alice", None).unwrap());
        assert!(owned.allows(None, Permission::Read) && !owned.allows(None, Permission::Write));
        assert!(owned.is_owner(Some("alice")) && !owned.is_owner(Some("bob")));
    }
}

/// What a request says of the ACL it sets: its body (PutBucketAcl, PutObjectAcl), its grant
/// headers (`x-amz-grant-*`, by permission), its canned ACL (`x-amz-acl`).
#[derive(Debug, Default)]
pub struct AclRequest<'a> {
    pub policy: Option<&'a s3s::dto::AccessControlPolicy>,
    pub grants: Vec<(Permission, &'a str)>,
    pub canned: Option<&'a str>,
}

impl<'a> AclRequest<'a> {
    /// The grant headers of a request, by permission (absent ones left out).
    pub fn grant_headers(
        full_control: Option<&'a String>,
        read: Option<&'a String>,
        read_acp: Option<&'a String>,
        write: Option<&'a String>,
        write_acp: Option<&'a String>,
    ) -> Vec<(Permission, &'a str)> {
        [
            (Permission::Read, read),
            (Permission::Write, write),
            (Permission::ReadAcp, read_acp),
            (Permission::WriteAcp, write_acp),
            (Permission::FullControl, full_control),
        ]
        .into_iter()
        .filter_map(|(permission, value)| value.map(|v| (permission, v.as_str())))
        .collect()
    }
}

fn bad_grant(message: String) -> s3s::S3Error {
    s3_error!(InvalidArgument, "{message}")
}

impl Gateway {
    /// A grantee as stored: a user checked to exist (by name or email), or a known group.
    async fn grantee(&self, kind: &str, value: &str) -> S3Result<crate::acl::Grantee> {
        use crate::acl::{Grantee, ALL_USERS, AUTHENTICATED_USERS};
        match kind {
            "id" | "CanonicalUser" => match self.keys().find_user(Some(value), None).await? {
                Some(name) => Ok(Grantee::User(name)),
                None => Err(bad_grant(format!(
                    "no user {value:?} (grants name users by their key name)"
                ))),
            },
            "emailAddress" | "AmazonCustomerByEmail" => {
                match self.keys().find_user(None, Some(value)).await? {
                    Some(name) => Ok(Grantee::User(name)),
                    None => {
                        let mut error = s3s::S3Error::with_message(
                            s3s::S3ErrorCode::Custom("UnresolvableGrantByEmailAddress".into()),
                            format!("no user has the email address {value:?}"),
                        );
                        error.set_status_code(http::StatusCode::BAD_REQUEST);
                        Err(error)
                    }
                }
            }
            "uri" | "Group" if value == ALL_USERS || value == AUTHENTICATED_USERS => {
                Ok(Grantee::Group(value.to_string()))
            }
            "uri" | "Group" => Err(bad_grant(format!("unknown group {value:?}"))),
            other => Err(bad_grant(format!("unknown grantee type {other:?}"))),
        }
    }

    /// The ACL `request` sets on something owned by `owner` (in a bucket owned by
    /// `bucket_owner`); None when it names none. A body, grant headers and a canned ACL
    /// exclude each other (400 InvalidRequest).
    pub(crate) async fn requested_acl(
        &self,
        request: &AclRequest<'_>,
        owner: &str,
        bucket_owner: Option<&str>,
    ) -> S3Result<Option<Acl>> {
        use crate::acl::{parse_grant_header, Grant, MAX_GRANTS};
        let named =
            [request.policy.is_some(), !request.grants.is_empty(), request.canned.is_some()];
        if named.iter().filter(|n| **n).count() > 1 {
            return Err(s3_error!(
                InvalidRequest,
                "give an ACL as a body, as x-amz-grant-* headers or as x-amz-acl, only one"
            ));
        }
        let mut grants = Vec::new();
        if let Some(policy) = request.policy {
            if let Some(id) = policy.owner.as_ref().and_then(|o| o.id.as_deref()) {
                if id != owner {
                    return Err(s3_error!(AccessDenied, "the owner of an ACL cannot be changed"));
                }
            }
            for grant in policy.grants.iter().flatten() {
                let (Some(grantee), Some(permission)) = (&grant.grantee, &grant.permission) else {
                    return Err(s3_error!(
                        MalformedACLError,
                        "a grant needs a grantee and a permission"
                    ));
                };
                let permission = Permission::parse(permission.as_str()).ok_or_else(|| {
                    s3_error!(MalformedACLError, "unknown permission {:?}", permission.as_str())
                })?;
                let value = match grantee.type_.as_str() {
                    "CanonicalUser" => grantee.id.as_deref(),
                    "AmazonCustomerByEmail" => grantee.email_address.as_deref(),
                    _ => grantee.uri.as_deref(),
                }
                .ok_or_else(|| s3_error!(MalformedACLError, "a grantee names no one"))?;
                grants.push(Grant {
                    grantee: self.grantee(grantee.type_.as_str(), value).await?,
                    permission,
                });
            }
        } else if !request.grants.is_empty() {
            for (permission, header) in &request.grants {
                let pairs = parse_grant_header(header)
                    .ok_or_else(|| bad_grant(format!("bad grant header {header:?}")))?;
                for (kind, value) in pairs {
                    grants.push(Grant {
                        grantee: self.grantee(&kind, &value).await?,
                        permission: *permission,
                    });
                }
            }
        } else if let Some(name) = request.canned {
            return Acl::canned(name, owner, bucket_owner)
                .map(Some)
                .ok_or_else(|| bad_grant(format!("unknown canned ACL {name:?}")));
        } else {
            return Ok(None);
        }
        if grants.len() > MAX_GRANTS {
            return Err(s3_error!(MalformedACLError, "at most {MAX_GRANTS} grants"));
        }
        Ok(Some(Acl { owner: owner.to_string(), grants }))
    }
}

/// An ACL as S3 shows it: (owner, grants).
pub fn shown_acl(acl: &Acl) -> (s3s::dto::Owner, Vec<s3s::dto::Grant>) {
    use crate::acl::Grantee;
    use s3s::dto::{Grant, Grantee as S3Grantee, Owner, Permission as S3Permission, Type};
    let owner = Owner { display_name: Some(acl.owner.clone()), id: Some(acl.owner.clone()) };
    // Groups first, then users, each in the order given (as S3 lists them).
    let (groups, users): (Vec<_>, Vec<_>) =
        acl.grants.iter().partition(|g| matches!(g.grantee, Grantee::Group(_)));
    let grants = groups
        .into_iter()
        .chain(users)
        .map(|grant| Grant {
            grantee: Some(match &grant.grantee {
                Grantee::User(name) => S3Grantee {
                    type_: Type::from_static(Type::CANONICAL_USER),
                    id: Some(name.clone()),
                    display_name: Some(name.clone()),
                    email_address: None,
                    uri: None,
                },
                Grantee::Group(uri) => S3Grantee {
                    type_: Type::from_static(Type::GROUP),
                    id: None,
                    display_name: None,
                    email_address: None,
                    uri: Some(uri.clone()),
                },
            }),
            permission: Some(S3Permission::from(grant.permission.as_str().to_string())),
        })
        .collect();
    (owner, grants)
}
