//! The gateway's side of encryption at rest ([`crate::sse`] has the format and the keys):
//! which encryption a write gets, the object keys it seals with, and the plaintext of a
//! sealed object's range.
//!
//! Invariants:
//! - A write is sealed when it asks (`x-amz-server-side-encryption: AES256 | aws:kms`, or
//!   SSE-C headers) or its bucket's default encryption says so (PutBucketEncryption); the
//!   request's choice wins over the default. A gateway without a master key refuses every
//!   such write (501) before reading its body: nothing meant to be sealed is stored in clear.
//! - SSE-C is refused over plain HTTP (400, before the body is read), as S3 does: the key
//!   would cross the network in clear. A customer key is checked against its MD5, and on
//!   reads against the object's salted HMAC of it: a wrong key is 403 with no data.
//! - A read of an SSE-C object without its key is refused (400); SSE-S3 and SSE-KMS objects
//!   open without anything from the client.
//! - A KMS encryption context (`x-amz-server-side-encryption-context`) is refused (501),
//!   not ignored: weft does not bind one to the object key.
//! - The KMS key an SSE-KMS write names must exist (`weft kms key create`), except
//!   [`DEFAULT_KMS_KEY`], which the first write that uses it creates.
//! - Sizes: meta's object size is the stored size; S3 shows the plaintext size
//!   ([`Attributes::shown_size`]).

use std::sync::Arc;

use s3s::{
    dto::{
        ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
        ServerSideEncryptionRule,
    },
    s3_error, S3Result,
};
use serde::{Deserialize, Serialize};
use weft_client::{s3_support::ObjectStream, ClientError, ObjectInfo};

use crate::{
    attributes::Attributes,
    gateway::{s3_error_of, Gateway},
    sse::{self, CustomerKey, KmsKey, MasterKey, Mode, Opening, Plan, Sealed, Secret},
};

/// The KMS key of SSE-KMS writes that name none (S3's `aws/s3`).
pub const DEFAULT_KMS_KEY: &str = "default";

/// A bucket's default encryption (PutBucketEncryption), kept as `bucket_config/<bucket>/
/// encryption`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketEncryption {
    /// `AES256` or `aws:kms`.
    pub algorithm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
}

impl BucketEncryption {
    /// The configuration as GetBucketEncryption answers it.
    pub fn to_s3(&self) -> ServerSideEncryptionConfiguration {
        let by_default = ServerSideEncryptionByDefault {
            sse_algorithm: ServerSideEncryption::from(self.algorithm.clone()),
            kms_master_key_id: self.kms_key_id.clone(),
        };
        ServerSideEncryptionConfiguration {
            rules: vec![ServerSideEncryptionRule {
                apply_server_side_encryption_by_default: Some(by_default),
                bucket_key_enabled: Some(false),
            }],
        }
    }
}

/// The record name of a bucket's default encryption.
pub fn record_name(bucket: &str) -> String {
    format!("{bucket}/encryption")
}

/// KMS key `id` as meta keeps it: every version record under `kms_keys/<id>/` (none: a
/// key without versions, which does not exist).
pub async fn load_kms_key(meta: &weft_client::MetaClient, id: &str) -> weft_client::Result<KmsKey> {
    let prefix = format!("{id}/");
    let mut versions = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (page, next) =
            meta.list_records(sse::KMS_KEYS, &prefix, after.as_deref(), 1000).await?;
        versions
            .extend(page.into_iter().filter_map(|(_, value)| serde_json::from_value(value).ok()));
        match next {
            Some(next) => after = Some(next),
            None => return Ok(KmsKey::of_versions(id, versions)),
        }
    }
}

/// The encryption a write asked for.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub mode: Mode,
    pub kms_key_id: Option<String>,
    pub customer: Option<CustomerKey>,
}

/// What a write seals with: the record its attributes keep (size and salts filled by the
/// write) and the object key.
#[derive(Debug)]
pub struct Sealing {
    pub record: Sealed,
    pub key: Secret,
}

impl Sealing {
    /// The record of a one-segment object of `size` bytes and the key of that segment.
    pub fn one_segment(&self, size: u64) -> (Sealed, sse::SegmentKey) {
        let salt: [u8; sse::SALT_BYTES] = sse::random();
        let record = Sealed { size, salts: sse::salts_text(&[salt]), ..self.record.clone() };
        (record, self.key.segment_key(&salt))
    }
}

impl Attributes {
    /// The size S3 shows of an object storing `stored` bytes with these attributes.
    pub fn shown_size(&self, stored: u64) -> u64 {
        self.sse.as_ref().map_or(stored, |sealed| sealed.size)
    }
}

/// The encryption headers a response shows for `sealed`: (server_side_encryption,
/// ssekms_key_id, sse_customer_algorithm); SSE-C's key MD5 is the request's own.
pub fn shown(
    sealed: Option<&Sealed>,
) -> (Option<ServerSideEncryption>, Option<String>, Option<String>) {
    let Some(sealed) = sealed else { return (None, None, None) };
    let algorithm = sealed.algorithm().map(ServerSideEncryption::from_static);
    let customer = (sealed.mode == Mode::Customer).then(|| sse::AES256.to_string());
    (algorithm, sealed.kms_key_id.clone(), customer)
}

/// The customer key (SSE-C) of a request's input: its `sse_customer_*` fields, or with
/// `copy_source` its `copy_source_sse_customer_*` ones ([`Gateway::customer_key`]).
macro_rules! customer_key {
    ($gateway:expr, $input:expr) => {
        $gateway.customer_key(
            $input.sse_customer_algorithm.as_deref(),
            $input.sse_customer_key.as_deref(),
            $input.sse_customer_key_md5.as_deref(),
        )
    };
    (copy_source $gateway:expr, $input:expr) => {
        $gateway.customer_key(
            $input.copy_source_sse_customer_algorithm.as_deref(),
            $input.copy_source_sse_customer_key.as_deref(),
            $input.copy_source_sse_customer_key_md5.as_deref(),
        )
    };
}
pub(crate) use customer_key;

/// The encryption a write's input asks for, with its customer key ([`Gateway::wanted_sse`]).
macro_rules! wanted_sse {
    ($gateway:expr, $input:expr, $customer:expr) => {
        $gateway.wanted_sse(
            &$input.bucket,
            $input.server_side_encryption.as_ref(),
            $input.ssekms_key_id.as_deref(),
            $input.ssekms_encryption_context.as_deref(),
            $customer,
        )
    };
}
pub(crate) use wanted_sse;

/// AWS's refusal of an encryption algorithm weft lacks.
fn unsupported_algorithm(name: &str) -> s3s::S3Error {
    s3_error!(
        InvalidArgument,
        "The encryption method specified is not supported: {name:?} (weft has AES256 and \
         aws:kms)"
    )
}

/// Sets the encryption fields of an S3 output from an object's sealing record and the
/// request's customer key (SSE-C: its MD5 is echoed).
macro_rules! show_sse {
    (server $output:expr, $sealed:expr) => {{
        let (algorithm, kms, _) = $crate::encryption::shown($sealed);
        $output.server_side_encryption = algorithm;
        $output.ssekms_key_id = kms;
    }};
    ($output:expr, $sealed:expr, $customer:expr) => {{
        let (algorithm, kms, customer_algorithm) = $crate::encryption::shown($sealed);
        $output.server_side_encryption = algorithm;
        $output.ssekms_key_id = kms;
        $output.sse_customer_algorithm = customer_algorithm.clone();
        $output.sse_customer_key_md5 = customer_algorithm
            .and_then(|_| $customer.map(|c: &$crate::sse::CustomerKey| c.md5.clone()));
    }};
}
pub(crate) use show_sse;

/// AWS's refusal of a KMS key that does not exist: 400 `KMS.NotFoundException`.
fn kms_refusal(id: &str) -> s3s::S3Error {
    let mut error = s3s::S3Error::with_message(
        s3s::S3ErrorCode::Custom("KMS.NotFoundException".into()),
        format!(
            "Invalid keyId {id:?}: no such KMS key (create it with `weft kms key create {id}`)"
        ),
    );
    error.set_status_code(http::StatusCode::BAD_REQUEST);
    error
}

impl Gateway {
    fn master_key(&self) -> S3Result<&Arc<MasterKey>> {
        self.master().ok_or_else(|| {
            s3_error!(
                NotImplemented,
                "this gateway has no master key, so it cannot encrypt or decrypt objects \
                 (start it with `weft serve s3 --master-key FILE`; `weft up` writes one)"
            )
        })
    }

    /// The customer key of SSE-C headers, refused over plain HTTP and when malformed.
    pub(crate) fn customer_key(
        &self,
        algorithm: Option<&str>,
        key: Option<&str>,
        md5: Option<&str>,
    ) -> S3Result<Option<CustomerKey>> {
        let named = algorithm.is_some() || key.is_some() || md5.is_some();
        if named && !self.serves_tls() {
            return Err(s3_error!(
                InvalidRequest,
                "Requests specifying Server Side Encryption with Customer provided keys must be \
                 made over a secure connection."
            ));
        }
        CustomerKey::of_headers(algorithm, key, md5)
            .map_err(|reason| s3_error!(InvalidArgument, "{reason}"))
    }

    /// The encryption a write to `bucket` gets: the request's (`algorithm`, `kms_key_id`,
    /// `customer`), else the bucket's default; None: stored in clear. A KMS encryption
    /// context is refused (501).
    pub(crate) async fn wanted_sse(
        &self,
        bucket: &str,
        algorithm: Option<&ServerSideEncryption>,
        kms_key_id: Option<&str>,
        encryption_context: Option<&str>,
        customer: Option<CustomerKey>,
    ) -> S3Result<Option<Wanted>> {
        // Refused, not skipped: weft does not bind a KMS encryption context to the key.
        if encryption_context.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "weft does not bind KMS encryption contexts \
                 (x-amz-server-side-encryption-context); nothing was done"
            ));
        }
        if let Some(customer) = customer {
            if algorithm.is_some() {
                return Err(s3_error!(
                    InvalidArgument,
                    "Server Side Encryption with Customer provided key is incompatible with the \
                     encryption method specified"
                ));
            }
            return Ok(Some(Wanted {
                mode: Mode::Customer,
                kms_key_id: None,
                customer: Some(customer),
            }));
        }
        let (name, kms_key_id) = match algorithm {
            Some(algorithm) => (algorithm.as_str().to_string(), kms_key_id.map(str::to_string)),
            None => {
                if kms_key_id.is_some() {
                    return Err(s3_error!(
                        InvalidArgument,
                        "x-amz-server-side-encryption-aws-kms-key-id is only valid with \
                         x-amz-server-side-encryption: aws:kms"
                    ));
                }
                match self.bucket_state(bucket).await?.encryption {
                    Some(default) => (default.algorithm.clone(), default.kms_key_id.clone()),
                    None => return Ok(None),
                }
            }
        };
        let mode = match name.as_str() {
            sse::AES256 if kms_key_id.is_none() => Mode::S3,
            sse::AES256 => {
                return Err(s3_error!(
                    InvalidArgument,
                    "x-amz-server-side-encryption-aws-kms-key-id is only valid with aws:kms"
                ))
            }
            sse::AWS_KMS => Mode::Kms,
            other => return Err(unsupported_algorithm(other)),
        };
        self.master_key()?;
        Ok(Some(Wanted { mode, kms_key_id, customer: None }))
    }

    /// A PutBucketEncryption's configuration, checked: one rule, AES256 or aws:kms (with a
    /// KMS key that exists, or none: [`DEFAULT_KMS_KEY`]), and a master key to honour it.
    pub(crate) async fn checked_bucket_encryption(
        &self,
        config: &ServerSideEncryptionConfiguration,
    ) -> S3Result<BucketEncryption> {
        let [rule] = config.rules.as_slice() else {
            return Err(s3_error!(
                MalformedXML,
                "an encryption configuration has exactly one rule (it has {})",
                config.rules.len()
            ));
        };
        let Some(by_default) = &rule.apply_server_side_encryption_by_default else {
            return Err(s3_error!(
                MalformedXML,
                "the rule has no ApplyServerSideEncryptionByDefault"
            ));
        };
        let algorithm = by_default.sse_algorithm.as_str();
        let kms_key_id =
            by_default.kms_master_key_id.as_deref().map(|id| sse::kms_key_name(id).to_string());
        match algorithm {
            sse::AES256 if kms_key_id.is_some() => {
                return Err(s3_error!(
                    InvalidArgument,
                    "a KMSMasterKeyID is only valid with SSEAlgorithm aws:kms"
                ))
            }
            sse::AES256 => {}
            sse::AWS_KMS => {
                let id = kms_key_id.as_deref().unwrap_or(DEFAULT_KMS_KEY);
                self.kms_key(id, true).await?;
            }
            other => return Err(unsupported_algorithm(other)),
        }
        self.master_key()?;
        Ok(BucketEncryption { algorithm: algorithm.to_string(), kms_key_id })
    }

    /// The sealing of a one-segment write of `size` bytes wanting `wanted` (None: in clear).
    pub(crate) async fn one_segment_sealing(
        &self,
        wanted: Option<&Wanted>,
        size: u64,
    ) -> S3Result<Option<(Sealed, sse::SegmentKey)>> {
        match wanted {
            Some(wanted) => Ok(Some(self.new_sealing(wanted).await?.one_segment(size))),
            None => Ok(None),
        }
    }

    /// A fresh object key for a write wanting `wanted`, sealed as its mode says.
    pub(crate) async fn new_sealing(&self, wanted: &Wanted) -> S3Result<Sealing> {
        let key = Secret::generate();
        let aad = sse::object_key_aad(wanted.mode);
        let mut record = Sealed {
            mode: wanted.mode,
            size: 0,
            key: String::new(),
            kms_key_id: None,
            kms_version: None,
            customer_key_check: None,
            salts: String::new(),
            segments: Vec::new(),
        };
        match wanted.mode {
            Mode::S3 => record.key = self.master_key()?.0.seal_secret(&key, aad),
            Mode::Kms => {
                let requested = wanted.kms_key_id.as_deref().unwrap_or(DEFAULT_KMS_KEY);
                let id = sse::kms_key_name(requested).to_string();
                let kms = self.kms_key(&id, true).await?;
                let version = kms.current().ok_or_else(|| kms_refusal(&id))?;
                let material = self.kms_material(&kms, version)?;
                record.key = material.seal_secret(&key, aad);
                record.kms_key_id = Some(id);
                record.kms_version = Some(version);
            }
            Mode::Customer => {
                let customer = wanted.customer.as_ref().expect("SSE-C writes carry their key");
                record.key = customer.key.seal_secret(&key, aad);
                record.customer_key_check = Some(customer.new_check());
            }
        }
        Ok(Sealing { record, key })
    }

    /// The object key of `sealed`, opened with the master key, its KMS key, or the
    /// customer's key (which must be given, and be the one it was sealed with).
    pub(crate) async fn object_key(
        &self,
        sealed: &Sealed,
        customer: Option<&CustomerKey>,
    ) -> S3Result<Secret> {
        let aad = sse::object_key_aad(sealed.mode);
        let damaged = || s3_error!(InternalError, "the object's sealed key does not open");
        match sealed.mode {
            Mode::S3 => self.master_key()?.0.open_secret(&sealed.key, aad).ok_or_else(damaged),
            Mode::Kms => {
                let id = sealed.kms_key_id.as_deref().ok_or_else(damaged)?;
                let kms = self.kms_key(id, false).await?;
                let material = self.kms_material(&kms, sealed.kms_version.ok_or_else(damaged)?)?;
                material.open_secret(&sealed.key, aad).ok_or_else(damaged)
            }
            Mode::Customer => {
                let Some(customer) = customer else {
                    return Err(s3_error!(
                        InvalidRequest,
                        "The object was stored using a form of Server Side Encryption. The \
                         correct parameters must be provided to retrieve the object."
                    ));
                };
                let check = sealed.customer_key_check.as_deref().unwrap_or_default();
                if !customer.matches(check) {
                    return Err(s3_error!(
                        AccessDenied,
                        "The provided customer key does not match the key the object was \
                         encrypted with"
                    ));
                }
                customer.key.open_secret(&sealed.key, aad).ok_or_else(damaged)
            }
        }
    }

    /// KMS key `id` from meta (its version records); with `create_default`,
    /// [`DEFAULT_KMS_KEY`] gets its first version when it has none (create-only: of two
    /// gateways creating it, one wins and both use it).
    async fn kms_key(&self, id: &str, create_default: bool) -> S3Result<KmsKey> {
        let key = load_kms_key(&self.client().meta, id).await.map_err(s3_error_of)?;
        if key.current().is_some() || !(create_default && id == DEFAULT_KMS_KEY) {
            return key.current().map(|_| key).ok_or_else(|| kms_refusal(id));
        }
        let version =
            sse::KmsVersion::generate(self.master_key()?, id, 1, crate::gateway::now_ms());
        let value = serde_json::to_value(&version).expect("KMS versions serialize");
        let name = sse::kms_record_name(id, 1);
        match self.client().meta.put_record(sse::KMS_KEYS, &name, &value, true).await {
            Ok(()) | Err(ClientError::Meta { status: 409, .. }) => {}
            Err(error) => return Err(s3_error_of(error)),
        }
        let key = load_kms_key(&self.client().meta, id).await.map_err(s3_error_of)?;
        key.current().map(|_| key).ok_or_else(|| kms_refusal(id))
    }

    fn kms_material(&self, kms: &KmsKey, version: u32) -> S3Result<Secret> {
        kms.material(self.master_key()?, version).ok_or_else(|| {
            s3_error!(
                InternalError,
                "version {version} of KMS key {:?} does not open with this gateway's master key",
                kms.id
            )
        })
    }

    /// Plaintext bytes `[start, end)` of `object`, opened when `shown` says it is sealed;
    /// the stored bytes as they are otherwise.
    pub(crate) async fn plain_stream(
        &self,
        object: ObjectInfo,
        shown: &Attributes,
        customer: Option<&CustomerKey>,
        start: u64,
        end: u64,
    ) -> S3Result<PlainStream> {
        let Some(sealed) = &shown.sse else {
            return Ok(PlainStream::Clear(self.client().object_stream(object, start, end - start)));
        };
        let key = self.object_key(sealed, customer).await?;
        let salts = sealed
            .salt_list()
            .ok_or_else(|| s3_error!(InternalError, "the object's encryption record is damaged"))?;
        let plan = Plan::new(sealed.segment_sizes(), start, end);
        let stored = self.client().object_stream(object, plan.stored_start, plan.stored_len);
        Ok(PlainStream::Opened(Box::new(Opening::new(stored, plan, key, salts))))
    }
}

/// An object's plaintext: its bytes as stored, or opened from their packages.
#[derive(Debug)]
pub enum PlainStream {
    Clear(ObjectStream),
    Opened(Box<Opening<ObjectStream>>),
}

impl futures_util::Stream for PlainStream {
    type Item = std::io::Result<bytes::Bytes>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        match self.get_mut() {
            PlainStream::Clear(stream) => match std::pin::Pin::new(stream).poll_next(cx) {
                Poll::Ready(Some(Err(error))) => {
                    Poll::Ready(Some(Err(std::io::Error::other(error.to_string()))))
                }
                Poll::Ready(Some(Ok(bytes))) => Poll::Ready(Some(Ok(bytes))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            PlainStream::Opened(stream) => std::pin::Pin::new(stream.as_mut()).poll_next(cx),
        }
    }
}
