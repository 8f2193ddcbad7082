//! Bucket policies: the subset of S3's JSON policy language weft enforces, next to ACLs.
//!
//! Supported: statements with `Effect` Allow or Deny; `Principal` `"*"`, `{"AWS": ...}` with
//! `"*"`, a user name, `arn:aws:iam::NAME:root` or `arn:aws:iam::ACCOUNT:user/NAME` (one or a
//! list); `Action` one or a list of `s3:Name` with `*` and `?` wildcards (`*` alone: all);
//! `Resource` one or a list of `arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/key-pattern`;
//! `Condition` with `StringEquals`, `StringNotEquals`, `StringLike`, `StringNotLike` and
//! `Null` on `s3:prefix`, `s3:ExistingObjectTag/KEY` (a tag of the object the request reads
//! or changes), `s3:RequestObjectTag/KEY` (a tag the request writes with `x-amz-tagging`)
//! and the request headers of [`HEADER_KEYS`] (`s3:x-amz-server-side-encryption` and its
//! kin: "deny uploads that are not encrypted"); all conditions of a statement must hold,
//! one value of a condition must match (a negated one: none may).
//!
//! Invariants:
//! - What weft cannot enforce is refused at PutBucketPolicy (400 MalformedPolicy), never
//!   stored and silently ignored: `NotPrincipal`, `NotAction`, `NotResource`, unknown
//!   fields, a resource of another bucket.
//! - A condition weft cannot evaluate (another operator or key, such as `aws:SourceIp`)
//!   makes its statement never apply when it allows and always apply when it denies: an
//!   unknown condition can only take access away.
//! - An explicit Deny wins over every Allow and over every ACL grant; an Allow grants in
//!   addition to ACLs.
//! - A policy is public when one of its Allow statements applies to everyone (`*`) without
//!   a condition (what BlockPublicPolicy refuses and RestrictPublicBuckets ignores).
//! - A policy document is at most [`MAX_POLICY_BYTES`] (S3's 20 KiB), so evaluating one is
//!   bounded.

use serde_json::Value;

/// Largest policy document (S3's limit).
pub const MAX_POLICY_BYTES: usize = 20 * 1024;

/// Allow or Deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
}

/// Who a statement is about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Principals {
    Everyone,
    Users(Vec<String>),
}

/// One statement.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Statement {
    effect: Effect,
    principals: Principals,
    actions: Vec<String>,
    resources: Vec<String>,
    /// The conditions it has, all of which must hold (empty: none).
    conditions: Vec<Condition>,
    /// A condition weft cannot evaluate is present.
    unknown_condition: bool,
}

/// What a condition tests.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ConditionKey {
    /// `s3:prefix`: the listing prefix.
    Prefix,
    /// `s3:ExistingObjectTag/<key>`: a tag of the object the request is about.
    ExistingObjectTag(String),
    /// `s3:RequestObjectTag/<key>`: a tag the request writes (`x-amz-tagging`).
    RequestObjectTag(String),
    /// `s3:x-amz-…`: a request header of [`HEADER_KEYS`] (its lower-case name).
    Header(&'static str),
}

/// The request headers conditions may test, as `s3:<name>`.
const HEADER_KEYS: [&str; 9] = [
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-acl",
    "x-amz-copy-source",
    "x-amz-metadata-directive",
    "x-amz-storage-class",
    "x-amz-object-lock-mode",
    "x-amz-object-lock-legal-hold",
];

/// How a condition compares the request's value with its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    StringEquals,
    StringNotEquals,
    StringLike,
    StringNotLike,
    /// `Null`: whether the key is absent ("true") or present ("false").
    Null,
}

impl Operator {
    fn of(name: &str) -> Option<Operator> {
        Some(match name {
            "StringEquals" => Operator::StringEquals,
            "StringNotEquals" => Operator::StringNotEquals,
            "StringLike" => Operator::StringLike,
            "StringNotLike" => Operator::StringNotLike,
            "Null" => Operator::Null,
            _ => return None,
        })
    }
}

/// One key of one condition operator: it holds when the request's value of `key` matches
/// one of `values` (StringLike: as a wildcard pattern; StringEquals: exactly), or, negated,
/// matches none of them (a key the request lacks matches none, as IAM takes it); `Null`
/// holds when the key's absence is what its value says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Condition {
    key: ConditionKey,
    operator: Operator,
    values: Vec<String>,
}

impl Condition {
    /// Whether it holds; None when the request does not carry what it tests (the tags of an
    /// object the check did not read), which only a Deny takes as holding.
    fn holds(&self, request: &Request<'_>) -> Option<bool> {
        let value = match &self.key {
            ConditionKey::Header(name) => {
                request.headers.and_then(|h| h.get(*name)).map(|v| v.to_str().unwrap_or_default())
            }
            ConditionKey::Prefix => request.prefix,
            ConditionKey::ExistingObjectTag(tag) => match request.existing_tags {
                Some(tags) => tags.get(tag).map(String::as_str),
                None => return None,
            },
            ConditionKey::RequestObjectTag(tag) => match request.request_tags {
                Some(tags) => tags.get(tag).map(String::as_str),
                None => return None,
            },
        };
        let matched = |like: bool| {
            value.is_some_and(|value| {
                self.values.iter().any(|v| if like { wildcard(v, value) } else { v == value })
            })
        };
        Some(match self.operator {
            Operator::StringEquals => matched(false),
            Operator::StringLike => matched(true),
            Operator::StringNotEquals => !matched(false),
            Operator::StringNotLike => !matched(true),
            Operator::Null => {
                self.values.iter().any(|v| v == if value.is_none() { "true" } else { "false" })
            }
        })
    }
}

/// A parsed bucket policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPolicy {
    statements: Vec<Statement>,
}

/// What a request is, as a policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The user; None for anonymous.
    pub who: Option<&'a str>,
    /// `s3:GetObject`...
    pub action: &'a str,
    /// `arn:aws:s3:::bucket[/key]`.
    pub resource: &'a str,
    /// The listing prefix (ListBucket) or the key a missing-object answer is about.
    pub prefix: Option<&'a str>,
    /// The tags of the object the request is about, when the check read them (see
    /// [`BucketPolicy::tests_existing_tags`]); None: not read.
    pub existing_tags: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The tags the request writes (`x-amz-tagging`); None: the request's tags are not
    /// known at the check (PutObjectTagging's are in its body).
    pub request_tags: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The request's headers (conditions on [`HEADER_KEYS`]); None: a header is absent.
    pub headers: Option<&'a http::HeaderMap>,
}

fn one_or_many(value: &Value, what: &str) -> Result<Vec<String>, String> {
    match value {
        Value::String(text) => Ok(vec![text.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string).ok_or(format!("{what} must be strings")))
            .collect(),
        _ => Err(format!("{what} must be a string or a list of strings")),
    }
}

/// `*` and `?` wildcard match (case-sensitive), iterative.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The user an AWS principal names: `*`, a name, `arn:aws:iam::NAME:root` or
/// `arn:aws:iam::ACCOUNT:user/NAME`.
fn principal_user(text: &str) -> Option<String> {
    match text.strip_prefix("arn:aws:iam::") {
        None => Some(text.to_string()),
        Some(rest) => {
            let (account, tail) = rest.split_once(':')?;
            match tail {
                "root" => Some(account.to_string()),
                _ => tail.strip_prefix("user/").map(str::to_string),
            }
        }
    }
}

impl BucketPolicy {
    /// Parses and checks a policy document of `bucket` (the reason is the MalformedPolicy
    /// message).
    pub fn parse(bucket: &str, text: &str) -> Result<BucketPolicy, String> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(format!("a policy is at most {MAX_POLICY_BYTES} bytes"));
        }
        let document: Value =
            serde_json::from_str(text).map_err(|e| format!("the policy is not JSON: {e}"))?;
        let Some(fields) = document.as_object() else {
            return Err("the policy must be a JSON object".into());
        };
        for name in fields.keys() {
            if !["Version", "Id", "Statement"].contains(&name.as_str()) {
                return Err(format!("unknown policy field {name:?}"));
            }
        }
        let statements = match &document["Statement"] {
            Value::Array(items) => items.clone(),
            Value::Object(_) => vec![document["Statement"].clone()],
            _ => return Err("the policy needs a Statement".into()),
        };
        if statements.is_empty() {
            return Err("the policy needs a Statement".into());
        }
        let arn_prefix = format!("arn:aws:s3:::{bucket}");
        let mut parsed = Vec::new();
        for statement in &statements {
            let Some(fields) = statement.as_object() else {
                return Err("a statement must be a JSON object".into());
            };
            for name in fields.keys() {
                match name.as_str() {
                    "Sid" | "Effect" | "Principal" | "Action" | "Resource" | "Condition" => {}
                    "NotPrincipal" | "NotAction" | "NotResource" => {
                        return Err(format!("weft does not support {name}"))
                    }
                    other => return Err(format!("unknown statement field {other:?}")),
                }
            }
            let effect = match statement["Effect"].as_str() {
                Some("Allow") => Effect::Allow,
                Some("Deny") => Effect::Deny,
                _ => return Err("Effect must be Allow or Deny".into()),
            };
            let principals = match &statement["Principal"] {
                Value::String(star) if star == "*" => Principals::Everyone,
                Value::Object(map) if map.len() == 1 && map.contains_key("AWS") => {
                    let names = one_or_many(&map["AWS"], "Principal AWS")?;
                    if names.iter().any(|n| n == "*") {
                        Principals::Everyone
                    } else {
                        Principals::Users(
                            names
                                .iter()
                                .map(|n| principal_user(n).ok_or(format!("bad principal {n:?}")))
                                .collect::<Result<_, _>>()?,
                        )
                    }
                }
                _ => return Err("Principal must be \"*\" or {\"AWS\": ...}".into()),
            };
            let actions = one_or_many(&statement["Action"], "Action")?;
            if actions.iter().any(|a| a != "*" && !a.starts_with("s3:")) {
                return Err("actions are s3:NAME (or *)".into());
            }
            let resources = one_or_many(&statement["Resource"], "Resource")?;
            for resource in &resources {
                // Of this bucket: the pattern can name it or objects in it (`arn:aws:s3:::*/*`
                // and `arn:aws:s3:::logs-*` are, `arn:aws:s3:::other/*` is not).
                let bucket_part = resource.split_once('/').map_or(resource.as_str(), |(b, _)| b);
                let ok = wildcard(resource, &arn_prefix) || wildcard(bucket_part, &arn_prefix);
                if !ok {
                    return Err(format!("resource {resource:?} is not of bucket {bucket:?}"));
                }
            }
            let (mut parsed_conditions, mut unknown_condition) = (Vec::new(), false);
            if let Some(conditions) = statement.get("Condition") {
                let Some(conditions) = conditions.as_object() else {
                    return Err("Condition must be an object".into());
                };
                for (operator, tests) in conditions {
                    let Some(tests) = tests.as_object() else {
                        return Err(format!("condition {operator:?} must be an object"));
                    };
                    for (key, values) in tests {
                        let Some(operator) = Operator::of(operator) else {
                            unknown_condition = true;
                            continue;
                        };
                        let header = key.strip_prefix("s3:").and_then(|name| {
                            HEADER_KEYS.iter().find(|h| h.eq_ignore_ascii_case(name))
                        });
                        let key = if key == "s3:prefix" {
                            ConditionKey::Prefix
                        } else if let Some(tag) = key.strip_prefix("s3:ExistingObjectTag/") {
                            ConditionKey::ExistingObjectTag(tag.to_string())
                        } else if let Some(tag) = key.strip_prefix("s3:RequestObjectTag/") {
                            ConditionKey::RequestObjectTag(tag.to_string())
                        } else if let Some(name) = header {
                            ConditionKey::Header(name)
                        } else {
                            unknown_condition = true;
                            continue;
                        };
                        // Null's values are JSON booleans or their names.
                        let values = match values {
                            Value::Bool(b) => vec![b.to_string()],
                            other => one_or_many(other, "condition values")?,
                        };
                        parsed_conditions.push(Condition { key, operator, values });
                    }
                }
            }
            parsed.push(Statement {
                effect,
                principals,
                actions,
                resources,
                conditions: parsed_conditions,
                unknown_condition,
            });
        }
        Ok(BucketPolicy { statements: parsed })
    }

    /// Whether a statement tests the tags of the object a request is about (the access
    /// check then reads them).
    pub fn tests_existing_tags(&self) -> bool {
        self.statements
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| matches!(c.key, ConditionKey::ExistingObjectTag(_)))
    }

    /// Whether an Allow statement applies to everyone without a condition.
    pub fn is_public(&self) -> bool {
        self.statements.iter().any(|s| {
            s.effect == Effect::Allow
                && s.principals == Principals::Everyone
                && s.conditions.is_empty()
                && !s.unknown_condition
        })
    }

    /// What the policy says of `request`: Some(Deny) when a Deny applies, else Some(Allow)
    /// when an Allow does, else None. With `ignore_public`, statements about everyone do
    /// not allow (RestrictPublicBuckets).
    pub fn decide(&self, request: &Request<'_>, ignore_public: bool) -> Option<Effect> {
        let mut allowed = false;
        for statement in &self.statements {
            let principal = match &statement.principals {
                Principals::Everyone => true,
                Principals::Users(names) => {
                    request.who.is_some_and(|w| names.iter().any(|n| n == w))
                }
            };
            let action = statement.actions.iter().any(|a| a == "*" || wildcard(a, request.action));
            let resource = statement.resources.iter().any(|r| wildcard(r, request.resource));
            if !(principal && action && resource) {
                continue;
            }
            // Every condition holds (Some(true)), one is known not to (Some(false)), or
            // one cannot be told here (None).
            let holds = statement.conditions.iter().try_fold(true, |all, condition| {
                condition.holds(request).map(|holds| all && holds)
            });
            match statement.effect {
                // A Deny applies unless a condition it has is known not to hold.
                Effect::Deny if statement.unknown_condition || holds != Some(false) => {
                    return Some(Effect::Deny)
                }
                Effect::Deny => {}
                Effect::Allow => {
                    let public = statement.principals == Principals::Everyone;
                    let known = holds == Some(true) && !statement.unknown_condition;
                    if known && !(public && ignore_public) {
                        allowed = true;
                    }
                }
            }
        }
        allowed.then_some(Effect::Allow)
    }
}

/// The policy action of an S3 operation (s3s's operation name).
pub fn action_of(op: &str) -> String {
    let name = match op {
        "HeadObject" | "GetObjectAttributes" => "GetObject",
        "CopyObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload"
        | "PostObject" => "PutObject",
        "DeleteObjects" => "DeleteObject",
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "ListBucket",
        "ListObjectVersions" => "ListBucketVersions",
        "ListMultipartUploads" => "ListBucketMultipartUploads",
        "ListParts" => "ListMultipartUploadParts",
        "GetPublicAccessBlock" => "GetBucketPublicAccessBlock",
        "PutPublicAccessBlock" | "DeletePublicAccessBlock" => "PutBucketPublicAccessBlock",
        "GetObjectLockConfiguration" => "GetBucketObjectLockConfiguration",
        "PutObjectLockConfiguration" => "PutBucketObjectLockConfiguration",
        "PutBucketCors" | "DeleteBucketCors" => "PutBucketCORS",
        "GetBucketCors" => "GetBucketCORS",
        "PutBucketLifecycleConfiguration" | "DeleteBucketLifecycle" => "PutLifecycleConfiguration",
        "GetBucketLifecycleConfiguration" => "GetLifecycleConfiguration",
        "DeleteBucketTagging" => "PutBucketTagging",
        "DeleteBucketPolicy" => "DeleteBucketPolicy",
        other => other,
    };
    format!("s3:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(statement: Value) -> Result<BucketPolicy, String> {
        BucketPolicy::parse(
            "b",
            &serde_json::json!({"Version": "2012-10-17", "Statement": [statement]}).to_string(),
        )
    }

    fn request<'a>(who: Option<&'a str>, action: &'a str, resource: &'a str) -> Request<'a> {
        Request {
            who,
            action,
            resource,
            prefix: None,
            existing_tags: None,
            request_tags: None,
            headers: None,
        }
    }

    #[test]
    fn wildcards_match_as_iam_matches() {
        assert!(wildcard("arn:aws:s3:::b/*", "arn:aws:s3:::b/x/y"));
        assert!(wildcard("s3:Get*", "s3:GetObject"));
        assert!(wildcard("a?c", "abc") && !wildcard("a?c", "abbc"));
        assert!(!wildcard("arn:aws:s3:::b/*", "arn:aws:s3:::bb/x"));
    }

    #[test]
    fn deny_wins_and_unknown_conditions_only_take_access_away() {
        let allow_all = policy(serde_json::json!({"Effect": "Allow", "Principal": "*",
            "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}))
        .unwrap();
        assert!(allow_all.is_public());
        let get = request(None, "s3:GetObject", "arn:aws:s3:::b/k");
        assert_eq!(allow_all.decide(&get, false), Some(Effect::Allow));
        assert_eq!(allow_all.decide(&get, true), None, "RestrictPublicBuckets");
        assert_eq!(
            allow_all.decide(&request(None, "s3:PutObject", "arn:aws:s3:::b/k"), false),
            None
        );
        let by_ip = policy(serde_json::json!({"Effect": "Allow", "Principal": {"AWS": "*"},
            "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b",
            "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/32"}}}))
        .unwrap();
        assert!(!by_ip.is_public());
        assert_eq!(by_ip.decide(&request(None, "s3:ListBucket", "arn:aws:s3:::b"), false), None);
        let deny_ip = policy(serde_json::json!({"Effect": "Deny", "Principal": "*",
            "Action": "s3:*", "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
            "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/32"}}}))
        .unwrap();
        assert_eq!(deny_ip.decide(&get, false), Some(Effect::Deny));
        let named = policy(serde_json::json!({"Effect": "Allow",
            "Principal": {"AWS": ["arn:aws:iam::alice:root", "arn:aws:iam::123:user/bob"]},
            "Action": "*", "Resource": "arn:aws:s3:::b/*"}))
        .unwrap();
        assert!(!named.is_public());
        for who in ["alice", "bob"] {
            let put = request(Some(who), "s3:PutObject", "arn:aws:s3:::b/k");
            assert_eq!(named.decide(&put, false), Some(Effect::Allow), "{who}");
        }
        assert_eq!(
            named.decide(&request(Some("carol"), "s3:PutObject", "arn:aws:s3:::b/k"), false),
            None
        );
    }

    #[test]
    fn prefix_conditions_and_refusals() {
        let listing = policy(serde_json::json!({"Effect": "Allow", "Principal": {"AWS": "*"},
            "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b",
            "Condition": {"StringLike": {"s3:prefix": "public/*"}}}))
        .unwrap();
        let mut list = request(Some("x"), "s3:ListBucket", "arn:aws:s3:::b");
        list.prefix = Some("public/a");
        assert_eq!(listing.decide(&list, false), Some(Effect::Allow));
        list.prefix = Some("private/a");
        assert_eq!(listing.decide(&list, false), None);
        for bad in [
            serde_json::json!({"Effect": "Allow", "NotPrincipal": {"AWS": "x"}, "Action": "s3:*", "Resource": "arn:aws:s3:::b"}),
            serde_json::json!({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::other/*"}),
            serde_json::json!({"Effect": "Maybe", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b"}),
        ] {
            assert!(policy(bad.clone()).is_err(), "{bad}");
        }
        assert_eq!(action_of("HeadObject"), "s3:GetObject");
        // Wildcards that can name this bucket or its objects are of it.
        for good in ["arn:aws:s3:::*", "arn:aws:s3:::*/*", "arn:aws:s3:::b*", "arn:aws:s3:::?/x"] {
            let statement = serde_json::json!({"Effect": "Allow", "Principal": "*",
                "Action": "s3:GetObject", "Resource": good});
            assert!(policy(statement).is_ok(), "{good}");
        }
        for bad in ["arn:aws:s3:::c*", "arn:aws:s3:::bb/*", "arn:aws:s3:::??/*"] {
            let statement = serde_json::json!({"Effect": "Allow", "Principal": "*",
                "Action": "s3:GetObject", "Resource": bad});
            assert!(policy(statement).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_conditions_deny_unencrypted_uploads_and_null_tests_absence() {
        let require_sse = policy(serde_json::json!({"Effect": "Deny", "Principal": "*",
            "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*",
            "Condition": {"StringNotEquals": {"s3:x-amz-server-side-encryption": "AES256"}}}))
        .unwrap();
        let mut put = request(Some("x"), "s3:PutObject", "arn:aws:s3:::b/k");
        let plain = http::HeaderMap::new();
        let mut sealed = http::HeaderMap::new();
        sealed.insert("x-amz-server-side-encryption", "AES256".parse().unwrap());
        let mut kms = http::HeaderMap::new();
        kms.insert("x-amz-server-side-encryption", "aws:kms".parse().unwrap());
        put.headers = Some(&plain);
        assert_eq!(require_sse.decide(&put, false), Some(Effect::Deny), "no header");
        put.headers = Some(&kms);
        assert_eq!(require_sse.decide(&put, false), Some(Effect::Deny), "another one");
        put.headers = Some(&sealed);
        assert_eq!(require_sse.decide(&put, false), None);
        let no_customer_keys = policy(serde_json::json!({"Effect": "Deny", "Principal": "*",
            "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*",
            "Condition": {"Null": {"s3:x-amz-server-side-encryption-customer-algorithm": false}}}))
        .unwrap();
        put.headers = Some(&plain);
        assert_eq!(no_customer_keys.decide(&put, false), None);
        let mut customer = http::HeaderMap::new();
        customer
            .insert("x-amz-server-side-encryption-customer-algorithm", "AES256".parse().unwrap());
        put.headers = Some(&customer);
        assert_eq!(no_customer_keys.decide(&put, false), Some(Effect::Deny));
        let like = policy(serde_json::json!({"Effect": "Allow", "Principal": "*",
            "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*",
            "Condition": {"StringNotLike": {"s3:x-amz-acl": "public-*"}}}))
        .unwrap();
        put.headers = Some(&plain);
        assert_eq!(like.decide(&put, false), Some(Effect::Allow));
        let mut public = http::HeaderMap::new();
        public.insert("x-amz-acl", "public-read".parse().unwrap());
        put.headers = Some(&public);
        assert_eq!(like.decide(&put, false), None);
    }

    #[test]
    fn tag_conditions_test_the_objects_and_the_requests_tags() {
        use std::collections::BTreeMap;
        let public_reads = policy(serde_json::json!({"Effect": "Allow", "Principal": "*",
            "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*",
            "Condition": {"StringEquals": {"s3:ExistingObjectTag/share": ["yes", "public"]}}}))
        .unwrap();
        assert!(public_reads.tests_existing_tags() && !public_reads.is_public());
        let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let (shared, private, none) =
            (tags(&[("share", "public")]), tags(&[("share", "no")]), tags(&[]));
        let mut get = request(None, "s3:GetObject", "arn:aws:s3:::b/k");
        assert_eq!(public_reads.decide(&get, false), None, "tags not read: no Allow");
        for (object, expected) in [(&shared, Some(Effect::Allow)), (&private, None), (&none, None)]
        {
            get.existing_tags = Some(object);
            assert_eq!(public_reads.decide(&get, false), expected, "{object:?}");
        }
        // A Deny on the tags a write asks for, ANDed with a prefix condition it also has.
        let no_secret_writes = policy(serde_json::json!({"Effect": "Deny", "Principal": "*",
            "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/*",
            "Condition": {"StringLike": {"s3:RequestObjectTag/class": "secret*"}}}))
        .unwrap();
        assert!(!no_secret_writes.tests_existing_tags());
        let mut put = request(Some("alice"), "s3:PutObject", "arn:aws:s3:::b/k");
        assert_eq!(no_secret_writes.decide(&put, false), Some(Effect::Deny), "unknown tags: Deny");
        let secret = tags(&[("class", "secret-2")]);
        let open = tags(&[("class", "open")]);
        put.request_tags = Some(&secret);
        assert_eq!(no_secret_writes.decide(&put, false), Some(Effect::Deny));
        put.request_tags = Some(&open);
        assert_eq!(no_secret_writes.decide(&put, false), None);
        put.request_tags = Some(&none);
        assert_eq!(no_secret_writes.decide(&put, false), None);
        assert_eq!(action_of("GetBucketVersioning"), "s3:GetBucketVersioning");
    }
}
