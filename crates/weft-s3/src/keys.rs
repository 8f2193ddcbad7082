//! Access keys: created by `weft key create` (and by `weft up` on first start), stored in
//! meta as gateway records `access_keys/<access key id>` → [`KeyRecord`].
//!
//! Invariants:
//! - The secret is stored only in meta, and only sealed with the cluster's seal key, bound to
//!   its access key id (meta refuses a record holding it in the clear): no answer of meta
//!   reveals it to anyone without the cluster secret. The gateway asks meta for the sealed
//!   record on a request, opens it, and keeps the secret at most [`KEY_CACHE_TTL`] (a deleted
//!   key stops working within that time).
//! - An unknown key id is `InvalidAccessKeyId` (403); meta unreachable is `ServiceUnavailable`
//!   (503), never a silent accept.
//! - A key may choose a policy (`x-weft-policy`) only if its record says so
//!   (`may_set_policy`, set by `weft key create --allow-policy`; records written before the
//!   field existed read as not allowed). The permission is read from the same cached record
//!   that authenticated the request, so it is never older than [`KEY_CACHE_TTL`].

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rand::Rng;
use s3s::{
    auth::{S3Auth, SecretKey},
    s3_error, S3Result,
};
use serde::{Deserialize, Serialize};
use weft_auth::SealKey;
use weft_client::MetaClient;

/// The gateway-record namespace of access keys.
pub const ACCESS_KEYS: &str = "access_keys";
/// Most key records one user lookup reads ([`MetaAuth::find_user`]).
pub const MAX_KEYS_SCANNED: usize = 100_000;
/// How long a key looked up in meta is trusted without asking again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);
/// Length of generated access key ids (AWS's is 20).
const ACCESS_KEY_CHARS: usize = 20;
/// Length of generated secrets (AWS's is 40).
const SECRET_KEY_CHARS: usize = 40;

/// An access key as meta stores it (the key id is the record's name).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyRecord {
    /// The name given at creation, for people (`weft key create NAME`).
    pub name: String,
    /// The secret, sealed with the cluster's seal key for this access key id
    /// ([`KeyRecord::new`], [`KeyRecord::secret`]).
    pub sealed_secret: String,
    pub created_ms: u64,
    /// Whether requests signed with this key may choose a policy (`x-weft-policy` on
    /// CreateBucket, PutObject, CopyObject, CreateMultipartUpload).
    #[serde(default)]
    pub may_set_policy: bool,
    /// An email address of the key's user, for S3 ACL grants by email (`weft key create
    /// NAME --email ADDRESS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// The scope of the key (`weft key create NAME --bucket B --read-only`): it never has
    /// more rights than its user, and a scope narrows them further.
    #[serde(default, skip_serializing_if = "KeyScope::is_unscoped")]
    pub scope: KeyScope,
}

/// What a key is limited to, beyond its user's rights.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyScope {
    /// The only bucket it may use (it may not create buckets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// Reads only: operations named Get*, Head* or List*.
    #[serde(default)]
    pub read_only: bool,
}

impl KeyScope {
    pub fn is_unscoped(&self) -> bool {
        self.bucket.is_none() && !self.read_only
    }

    /// Refuses (AccessDenied) an operation `op` on `bucket` (None: the service) outside the
    /// scope.
    pub fn check(&self, op: &str, bucket: Option<&str>) -> S3Result<()> {
        if self.read_only && !["Get", "Head", "List"].iter().any(|p| op.starts_with(p)) {
            return Err(s3_error!(AccessDenied, "this key is read-only ({op} is not a read)"));
        }
        match (&self.bucket, bucket) {
            (Some(mine), Some(asked)) if mine != asked => {
                Err(s3_error!(AccessDenied, "this key may use bucket {mine:?} only, not {asked:?}"))
            }
            (Some(mine), _) if op == "CreateBucket" => {
                Err(s3_error!(AccessDenied, "this key may use bucket {mine:?} only"))
            }
            _ => Ok(()),
        }
    }
}

impl KeyRecord {
    /// The record of `access_key` with `secret` sealed.
    pub fn new(
        seal: &SealKey,
        access_key: &str,
        name: &str,
        secret: &str,
        created_ms: u64,
        may_set_policy: bool,
    ) -> KeyRecord {
        KeyRecord {
            name: name.to_owned(),
            sealed_secret: seal.seal(access_key, secret.as_bytes()),
            created_ms,
            may_set_policy,
            email: None,
            scope: KeyScope::default(),
        }
    }

    /// The secret of `access_key`, opened.
    pub fn secret(&self, seal: &SealKey, access_key: &str) -> Result<String, weft_auth::AuthError> {
        let bytes = seal.open(access_key, &self.sealed_secret)?;
        String::from_utf8(bytes)
            .map_err(|_| weft_auth::AuthError::Unseal("the secret is not UTF-8".into()))
    }
}

/// A fresh (access key id, secret) pair: `WK` + 18 upper-case letters and digits, and 40
/// letters and digits, from the thread's CSPRNG.
pub fn new_key() -> (String, String) {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const ANY: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    let mut pick = |alphabet: &[u8], n: usize| -> String {
        (0..n).map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char).collect()
    };
    let access = format!("WK{}", pick(UPPER, ACCESS_KEY_CHARS - 2));
    let secret = pick(ANY, SECRET_KEY_CHARS);
    (access, secret)
}

/// s3s's key lookup, answered from meta. Clones share one cache: the gateway keeps a clone
/// to ask [`MetaAuth::may_set_policy`] of the key that signed a request.
#[derive(Debug, Clone)]
pub struct MetaAuth {
    meta: MetaClient,
    seal: SealKey,
    cache: Arc<Mutex<HashMap<String, CachedKey>>>,
}

/// A key record looked up in meta, opened.
#[derive(Debug, Clone)]
struct CachedKey {
    secret: String,
    may_set_policy: bool,
    /// The key's user (its name): the owner of what it makes, the grantee of ACLs.
    user: String,
    scope: KeyScope,
    at: Instant,
}

impl MetaAuth {
    pub fn new(meta: MetaClient, seal: SealKey) -> MetaAuth {
        MetaAuth { meta, seal, cache: Arc::new(Mutex::new(HashMap::new())) }
    }

    /// The key's record: from the cache while younger than [`KEY_CACHE_TTL`], else from meta.
    async fn lookup(&self, access_key: &str) -> S3Result<CachedKey> {
        if let Some(key) = self.cache.lock().expect("key cache").get(access_key) {
            if key.at.elapsed() < KEY_CACHE_TTL {
                return Ok(key.clone());
            }
        }
        let found = self.meta.get_record(ACCESS_KEYS, access_key).await.map_err(|error| {
            s3_error!(ServiceUnavailable, "cannot look the access key up in meta: {error}")
        })?;
        let Some(value) = found else {
            return Err(s3_error!(
                InvalidAccessKeyId,
                "no access key {access_key:?} in this cluster"
            ));
        };
        let record: KeyRecord = serde_json::from_value(value)
            .map_err(|e| s3_error!(InternalError, "meta holds a bad key record: {e}"))?;
        let secret = record.secret(&self.seal, access_key).map_err(|e| {
            s3_error!(InternalError, "the access key's sealed secret does not open: {e}")
        })?;
        let key = CachedKey {
            secret,
            may_set_policy: record.may_set_policy,
            user: record.name,
            scope: record.scope,
            at: Instant::now(),
        };
        let mut cache = self.cache.lock().expect("key cache");
        cache.retain(|_, cached| cached.at.elapsed() < KEY_CACHE_TTL);
        cache.insert(access_key.to_string(), key.clone());
        Ok(key)
    }

    /// The scope of `access_key` (see [`KeyScope`]).
    pub async fn scope_of(&self, access_key: &str) -> S3Result<KeyScope> {
        Ok(self.lookup(access_key).await?.scope)
    }

    /// The user of `access_key` (the key's name): who owns what it makes (see `acl`).
    pub async fn user_of(&self, access_key: &str) -> S3Result<String> {
        Ok(self.lookup(access_key).await?.user)
    }

    /// The user named `name` or with email `email` (S3 ACL grants): None when no key has it.
    /// Reads every key record (a cluster has few keys; at most [`MAX_KEYS_SCANNED`]).
    pub async fn find_user(
        &self,
        name: Option<&str>,
        email: Option<&str>,
    ) -> S3Result<Option<String>> {
        let mut after: Option<String> = None;
        let mut scanned = 0;
        loop {
            let (page, next) = self
                .meta
                .list_records(ACCESS_KEYS, "", after.as_deref(), 1000)
                .await
                .map_err(|e| s3_error!(ServiceUnavailable, "cannot list access keys: {e}"))?;
            for (_, value) in &page {
                let Ok(record) = serde_json::from_value::<KeyRecord>(value.clone()) else {
                    continue;
                };
                let email_matches = email.is_some_and(|e| {
                    record.email.as_deref().is_some_and(|mine| mine.eq_ignore_ascii_case(e))
                });
                if name == Some(record.name.as_str()) || email_matches {
                    return Ok(Some(record.name));
                }
            }
            scanned += page.len();
            match next {
                Some(name) if scanned < MAX_KEYS_SCANNED => after = Some(name),
                _ => return Ok(None),
            }
        }
    }

    /// Whether `access_key` may choose policies; `AccessDenied` naming the fix when not.
    pub async fn check_may_set_policy(&self, access_key: &str) -> S3Result<()> {
        if self.lookup(access_key).await?.may_set_policy {
            return Ok(());
        }
        Err(s3_error!(
            AccessDenied,
            "access key {access_key} may not choose a policy (x-weft-policy); an admin grants \
             it with `weft key create NAME --allow-policy`, or omit the header to use the \
             bucket's default policy"
        ))
    }
}

#[async_trait::async_trait]
impl S3Auth for MetaAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        Ok(SecretKey::from(self.lookup(access_key).await?.secret))
    }
}
