//! S3 CORS: a bucket's CORS configuration (PutBucketCors, GetBucketCors, DeleteBucketCors)
//! and how requests are answered with it: browser preflights (`OPTIONS`) and the
//! `Access-Control-*` headers of every other request that names an `Origin`.
//!
//! - A configuration is the gateway record `bucket_config/<bucket>/cors` ([`CorsConfig`]:
//!   the rules, in order). Meta deletes it with its bucket.
//! - A request is matched against the rules in order; the first rule whose AllowedOrigin
//!   (one `*` matches any run of characters, none included), AllowedMethod (the
//!   `Access-Control-Request-Method` of the request, else its own method) and, for a
//!   preflight, AllowedHeader (every header named in `Access-Control-Request-Headers`,
//!   case-insensitively, with the same wildcard) match is the one that answers.
//!
//! Invariants:
//! - A preflight is answered without authentication (as S3 does: a browser sends no
//!   credentials on it) and never reaches s3s; it reads nothing but the bucket's CORS
//!   configuration: at most one meta lookup, none while [`CorsCache`] holds the answer
//!   (at most [`CORS_CACHE_TTL`] old, present or absent), so anonymous `OPTIONS` cost meta
//!   no more than one small read each and usually none.
//! - The cache is bounded ([`MAX_CACHED_BUCKETS`]) and forgets a bucket at once when this
//!   gateway puts or deletes its configuration (another gateway's change shows within
//!   [`CORS_CACHE_TTL`]).
//! - Only configurations S3 would accept are stored (at most [`MAX_RULES`] rules; each with
//!   an AllowedOrigin and an AllowedMethod of GET, PUT, HEAD, POST, DELETE; at most one `*`
//!   in each AllowedOrigin and AllowedHeader; MaxAgeSeconds not negative; ID at most 255
//!   characters).
//! - CORS headers are added, never removed: a request that matches no rule is answered as
//!   it would be without CORS.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use s3s::{dto::CORSRule, S3Error, S3ErrorCode};
use serde::{Deserialize, Serialize};
use weft_client::MetaClient;

/// The gateway-record namespace of buckets' S3 configurations (weft-meta's
/// `BUCKET_CONFIG`).
pub const BUCKET_CONFIG: &str = "bucket_config";
/// How long a configuration read from meta (or its absence) answers requests.
pub const CORS_CACHE_TTL: Duration = Duration::from_secs(5);
/// Most buckets the cache holds (past that, answers are not cached until entries expire).
pub const MAX_CACHED_BUCKETS: usize = 10_000;
/// S3's limit on the rules of one configuration.
pub const MAX_RULES: usize = 100;
/// S3's limit on a rule's ID.
const MAX_ID_CHARS: usize = 255;
/// The methods a rule may allow (S3's).
pub const ALLOWED_METHODS: [&str; 5] = ["GET", "PUT", "HEAD", "POST", "DELETE"];
/// What responses that a rule matched vary by.
const VARY: &str = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method";

/// The record name of `bucket`'s CORS configuration.
pub fn record_name(bucket: &str) -> String {
    format!("{bucket}/cors")
}

/// One CORS rule as stored in meta.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CorsRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

/// A bucket's CORS configuration as stored in meta: the rules, in the order given.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CorsConfig {
    pub rules: Vec<CorsRule>,
}

/// An S3 error with a code s3s does not name, and its status.
fn custom_error(code: &str, status: StatusCode, message: String) -> S3Error {
    let code = S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or(S3ErrorCode::InvalidRequest);
    let mut error = S3Error::with_message(code, message);
    error.set_status_code(status);
    error
}

/// The refusal of a preflight (403 AccessForbidden, as S3 words it).
fn forbidden(message: &str) -> S3Error {
    custom_error("AccessForbidden", StatusCode::FORBIDDEN, format!("CORSResponse: {message}"))
}

/// The refusal of an `OPTIONS` that is no preflight (400 BadRequest).
fn insufficient(header: &str) -> S3Error {
    custom_error(
        "BadRequest",
        StatusCode::BAD_REQUEST,
        format!("Insufficient information. {header} request header needed."),
    )
}

/// Whether `text` matches `pattern`, where each `*` matches any run of characters (empty
/// included) and everything else itself.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty(); // no `*`: the whole text is the pattern
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl CorsRule {
    /// Whether the rule allows `origin`.
    pub fn allows_origin(&self, origin: &str) -> bool {
        self.allowed_origins.iter().any(|allowed| wildcard_match(allowed, origin))
    }

    /// Whether the rule allows `method` (methods are case-sensitive, as in HTTP).
    pub fn allows_method(&self, method: &str) -> bool {
        self.allowed_methods.iter().any(|allowed| allowed == method)
    }

    /// Whether the rule allows a request header, named in any case.
    pub fn allows_header(&self, header: &str) -> bool {
        let header = header.to_ascii_lowercase();
        self.allowed_headers
            .iter()
            .any(|allowed| wildcard_match(&allowed.to_ascii_lowercase(), &header))
    }

    /// Whether `*` is among the allowed origins: the response then allows any origin
    /// (`Access-Control-Allow-Origin: *`) and no credentials.
    fn any_origin(&self) -> bool {
        self.allowed_origins.iter().any(|allowed| allowed == "*")
    }

    /// The S3 form of the rule (GetBucketCors).
    pub fn to_s3(&self) -> CORSRule {
        let some = |list: &Vec<String>| (!list.is_empty()).then(|| list.clone());
        CORSRule {
            allowed_headers: some(&self.allowed_headers),
            allowed_methods: self.allowed_methods.clone(),
            allowed_origins: self.allowed_origins.clone(),
            expose_headers: some(&self.expose_headers),
            id: self.id.clone(),
            max_age_seconds: self.max_age_seconds,
        }
    }

    /// The rule of an S3 one, if S3 would accept it.
    pub fn from_s3(rule: &CORSRule) -> Result<CorsRule, S3Error> {
        let malformed = |what: &str| {
            S3Error::with_message(
                S3ErrorCode::MalformedXML,
                format!("The XML you provided was not well-formed or did not validate: {what}"),
            )
        };
        if rule.allowed_methods.is_empty() {
            return Err(malformed("a CORSRule needs at least one AllowedMethod"));
        }
        if rule.allowed_origins.is_empty() {
            return Err(malformed("a CORSRule needs at least one AllowedOrigin"));
        }
        if let Some(method) =
            rule.allowed_methods.iter().find(|m| !ALLOWED_METHODS.contains(&m.as_str()))
        {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!(
                    "Found unsupported HTTP method in CORS config. Unsupported method is {method}"
                ),
            ));
        }
        let wildcards = |what: &str, values: &[String]| match values
            .iter()
            .find(|value| value.matches('*').count() > 1)
        {
            Some(value) => Err(S3Error::with_message(
                S3ErrorCode::InvalidRequest,
                format!("{what} \"{value}\" can not have more than one wildcard."),
            )),
            None => Ok(()),
        };
        wildcards("AllowedOrigin", &rule.allowed_origins)?;
        let allowed_headers = rule.allowed_headers.clone().unwrap_or_default();
        wildcards("AllowedHeader", &allowed_headers)?;
        if rule.max_age_seconds.is_some_and(|age| age < 0) {
            return Err(malformed("MaxAgeSeconds must not be negative"));
        }
        if rule.id.as_ref().is_some_and(|id| id.chars().count() > MAX_ID_CHARS) {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                format!("a CORSRule's ID is at most {MAX_ID_CHARS} characters"),
            ));
        }
        Ok(CorsRule {
            id: rule.id.clone(),
            allowed_origins: rule.allowed_origins.clone(),
            allowed_methods: rule.allowed_methods.clone(),
            allowed_headers,
            expose_headers: rule.expose_headers.clone().unwrap_or_default(),
            max_age_seconds: rule.max_age_seconds,
        })
    }
}

impl CorsConfig {
    /// The configuration of S3 rules, if S3 would accept them.
    pub fn from_s3(rules: &[CORSRule]) -> Result<CorsConfig, S3Error> {
        if rules.is_empty() || rules.len() > MAX_RULES {
            return Err(S3Error::with_message(
                S3ErrorCode::MalformedXML,
                format!(
                    "The XML you provided was not well-formed or did not validate: a CORS \
                     configuration has 1 to {MAX_RULES} CORSRules, not {}",
                    rules.len()
                ),
            ));
        }
        let rules = rules.iter().map(CorsRule::from_s3).collect::<Result<_, _>>()?;
        Ok(CorsConfig { rules })
    }

    /// The first rule that allows `origin`, `method` and every header of `headers`.
    pub fn find_rule(&self, origin: &str, method: &str, headers: &[String]) -> Option<&CorsRule> {
        self.rules.iter().find(|rule| {
            rule.allows_origin(origin)
                && rule.allows_method(method)
                && headers.iter().all(|header| rule.allows_header(header))
        })
    }
}

/// The headers named by an `Access-Control-Request-Headers` value, trimmed and lower-case
/// (empty entries dropped).
pub fn requested_headers(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Sets the `Access-Control-*` headers of a response that `rule` allowed for `origin`
/// (with `Access-Control-Allow-Headers` on a preflight: the headers it asked for).
pub fn set_allow_headers(
    headers: &mut HeaderMap,
    rule: &CorsRule,
    origin: &str,
    requested: Option<&[String]>,
) {
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    if rule.any_origin() {
        set("access-control-allow-origin", "*");
    } else {
        set("access-control-allow-origin", origin);
        set("access-control-allow-credentials", "true");
    }
    set("access-control-allow-methods", &rule.allowed_methods.join(", "));
    if let Some(requested) = requested.filter(|r| !r.is_empty()) {
        set("access-control-allow-headers", &requested.join(", "));
    }
    if !rule.expose_headers.is_empty() {
        set("access-control-expose-headers", &rule.expose_headers.join(", "));
    }
    if let Some(age) = rule.max_age_seconds {
        set("access-control-max-age", &age.to_string());
    }
    set("vary", VARY);
}

/// The bucket a path-style request names, if its first path segment can be a bucket name
/// (S3's characters; internal buckets, with a leading `.`, are not S3 buckets).
pub fn bucket_of(uri: &http::Uri) -> Option<&str> {
    let path = uri.path().strip_prefix('/')?;
    let bucket = path.split('/').next()?;
    let named = (1..=255).contains(&bucket.len())
        && !bucket.starts_with('.')
        && bucket.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    named.then_some(bucket)
}

/// A configuration (or its absence) read from meta.
#[derive(Debug, Clone)]
struct Cached {
    config: Option<Arc<CorsConfig>>,
    at: Instant,
}

/// Buckets' CORS configurations, read from meta and kept [`CORS_CACHE_TTL`]. Clones share
/// one cache.
#[derive(Debug, Clone)]
pub struct CorsCache {
    meta: MetaClient,
    entries: Arc<Mutex<HashMap<String, Cached>>>,
}

impl CorsCache {
    pub fn new(meta: MetaClient) -> CorsCache {
        CorsCache { meta, entries: Arc::new(Mutex::new(HashMap::new())) }
    }

    /// The configuration of `bucket` as meta holds it now (no cache).
    pub async fn load(
        meta: &MetaClient,
        bucket: &str,
    ) -> Result<Option<CorsConfig>, weft_client::ClientError> {
        let Some(value) = meta.get_record(BUCKET_CONFIG, &record_name(bucket)).await? else {
            return Ok(None);
        };
        match serde_json::from_value(value) {
            Ok(config) => Ok(Some(config)),
            Err(error) => {
                // Not one this gateway wrote: treated as none (and logged), never guessed at.
                tracing::warn!(%error, bucket, "meta holds a CORS record that does not parse");
                Ok(None)
            }
        }
    }

    /// The configuration of `bucket`: from the cache while younger than [`CORS_CACHE_TTL`],
    /// else from meta (one lookup).
    pub async fn config(
        &self,
        bucket: &str,
    ) -> Result<Option<Arc<CorsConfig>>, weft_client::ClientError> {
        if let Some(cached) = self.entries.lock().expect("cors cache").get(bucket) {
            if cached.at.elapsed() < CORS_CACHE_TTL {
                return Ok(cached.config.clone());
            }
        }
        let config = CorsCache::load(&self.meta, bucket).await?.map(Arc::new);
        let mut entries = self.entries.lock().expect("cors cache");
        if entries.len() >= MAX_CACHED_BUCKETS {
            entries.retain(|_, cached| cached.at.elapsed() < CORS_CACHE_TTL);
        }
        if entries.len() < MAX_CACHED_BUCKETS {
            entries
                .insert(bucket.to_string(), Cached { config: config.clone(), at: Instant::now() });
        }
        Ok(config)
    }

    /// Drops what the cache holds of `bucket` (its configuration changed).
    pub fn forget(&self, bucket: &str) {
        self.entries.lock().expect("cors cache").remove(bucket);
    }

    /// The answer to a preflight (`OPTIONS`): 200 with the `Access-Control-*` headers of
    /// the first rule that allows it, else the S3 error (400 without `Origin` or
    /// `Access-Control-Request-Method`, 403 AccessForbidden when no rule allows it or the
    /// bucket has no configuration, 503 when meta cannot be asked).
    pub async fn preflight(
        &self,
        uri: &http::Uri,
        headers: &HeaderMap,
    ) -> Result<http::Response<s3s::Body>, S3Error> {
        let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        let origin = text("origin").ok_or_else(|| insufficient("Origin"))?;
        let method = text("access-control-request-method")
            .ok_or_else(|| insufficient("Access-Control-Request-Method"))?;
        let Some(bucket) = bucket_of(uri) else { return Err(forbidden("Bucket not found")) };
        let config = self.config(bucket).await.map_err(|error| {
            S3Error::with_message(
                S3ErrorCode::ServiceUnavailable,
                format!("cannot read the bucket's CORS configuration from meta: {error}"),
            )
        })?;
        let Some(config) = config else {
            return Err(forbidden("CORS is not enabled for this bucket."));
        };
        let requested =
            text("access-control-request-headers").map(requested_headers).unwrap_or_default();
        let Some(rule) = config.find_rule(origin, method, &requested) else {
            return Err(forbidden(
                "This CORS request is not allowed. This is usually because the evalution of \
                 Origin, request method / Access-Control-Request-Method or \
                 Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
            ));
        };
        let mut response = http::Response::new(s3s::Body::empty());
        set_allow_headers(response.headers_mut(), rule, origin, Some(&requested));
        response.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        Ok(response)
    }

    /// Adds the `Access-Control-*` headers to the response of a request that is no
    /// preflight, when it names an `Origin` that a rule of its bucket allows with its method
    /// (its `Access-Control-Request-Method` when it sends one). A configuration meta cannot
    /// give now adds none (the request itself is answered as it was).
    pub async fn decorate(&self, request: &RequestCors, response: &mut HeaderMap) {
        let config = match self.config(&request.bucket).await {
            Ok(Some(config)) => config,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, bucket = %request.bucket, "no CORS headers: meta unreachable");
                return;
            }
        };
        if let Some(rule) = config.find_rule(&request.origin, &request.method, &[]) {
            set_allow_headers(response, rule, &request.origin, None);
        }
    }
}

/// What the CORS headers of a response depend on, taken from its request (which s3s then
/// consumes).
#[derive(Debug, Clone)]
pub struct RequestCors {
    bucket: String,
    origin: String,
    method: String,
}

impl RequestCors {
    /// The CORS side of a request that is no preflight: None when it names no `Origin` or
    /// no bucket (such a response carries no CORS headers).
    pub fn of(method: &Method, uri: &http::Uri, headers: &HeaderMap) -> Option<RequestCors> {
        let origin = headers.get("origin")?.to_str().ok()?;
        let bucket = bucket_of(uri)?;
        let method = headers
            .get("access-control-request-method")
            .and_then(|value| value.to_str().ok())
            .unwrap_or(method.as_str());
        Some(RequestCors {
            bucket: bucket.to_string(),
            origin: origin.to_string(),
            method: method.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        let own = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        CorsRule {
            allowed_origins: own(origins),
            allowed_methods: own(methods),
            allowed_headers: own(headers),
            ..CorsRule::default()
        }
    }

    fn s3_rule(origins: &[&str], methods: &[&str], headers: Option<&[&str]>) -> CORSRule {
        let own = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        CORSRule {
            allowed_headers: headers.map(own),
            allowed_methods: own(methods),
            allowed_origins: own(origins),
            expose_headers: None,
            id: None,
            max_age_seconds: None,
        }
    }

    #[test]
    fn wildcards_match_any_run_including_none() {
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("*", "http://a.example"));
        assert!(wildcard_match("*suffix", "foo.suffix"));
        assert!(!wildcard_match("*suffix", "foo.suffix.get"));
        assert!(wildcard_match("start*end", "startend"));
        assert!(wildcard_match("start*end", "start12end"));
        assert!(!wildcard_match("start*end", "0start12end"));
        assert!(!wildcard_match("start*end", "start12end0"));
        assert!(wildcard_match("prefix*", "prefix"));
        assert!(!wildcard_match("prefix*", "bla.prefix"));
        assert!(wildcard_match("http://*.example.com", "http://www.example.com"));
        assert!(!wildcard_match("http://*.example.com", "https://www.example.com"));
        // Prefix and suffix must not overlap: "ab*ba" needs at least "abba".
        assert!(!wildcard_match("ab*ba", "aba"));
        assert!(wildcard_match("ab*ba", "abba"));
        // No wildcard: the whole origin, exactly (case included).
        assert!(wildcard_match("http://a.example", "http://a.example"));
        assert!(!wildcard_match("http://a.example", "http://a.example:8080"));
        assert!(!wildcard_match("http://a.example", "HTTP://A.EXAMPLE"));
        // Several stars (only from records S3 would not have taken) still match sensibly.
        assert!(wildcard_match("a*b*c", "a-b-c"));
        assert!(!wildcard_match("a*b*c", "a-c-b"));
        assert!(wildcard_match("", ""));
        assert!(!wildcard_match("", "x"));
    }

    #[test]
    fn the_first_rule_allowing_origin_method_and_headers_answers() {
        let config = CorsConfig {
            rules: vec![
                rule(&["*.get"], &["GET"], &[]),
                rule(&["http://app.example"], &["PUT", "POST"], &["content-type", "x-amz-*"]),
                rule(&["*"], &["GET", "HEAD"], &["*"]),
            ],
        };
        let none: &[String] = &[];
        let find = |origin: &str, method: &str, headers: &[String]| {
            config.find_rule(origin, method, headers).map(|r| r.allowed_origins[0].clone())
        };
        assert_eq!(find("a.get", "GET", none).as_deref(), Some("*.get"));
        // A rule allowing the origin but not the method is passed over for the next.
        assert_eq!(find("a.get", "HEAD", none).as_deref(), Some("*"));
        assert_eq!(find("a.get", "PUT", none), None);
        // Methods are exact: a lower-case method is none of S3's.
        assert_eq!(find("http://app.example", "put", none), None);
        let asked = requested_headers("Content-Type, X-Amz-Date,x-amz-meta-a ,");
        assert_eq!(asked, ["content-type", "x-amz-date", "x-amz-meta-a"]);
        assert_eq!(
            find("http://app.example", "PUT", &asked).as_deref(),
            Some("http://app.example")
        );
        // One header the rule does not cover refuses the rule (no other allows PUT).
        let more = requested_headers("content-type, authorization");
        assert_eq!(find("http://app.example", "PUT", &more), None);
        // A rule without AllowedHeaders allows no requested header: `a.get` falls to `*`.
        let one = requested_headers("x-custom");
        assert_eq!(find("a.get", "GET", &one).as_deref(), Some("*"));
    }

    #[test]
    fn allowed_headers_match_in_any_case_with_wildcards() {
        let r = rule(&["*"], &["GET"], &["X-AMZ-*", "Content-Type"]);
        assert!(r.allows_header("x-amz-date"));
        assert!(r.allows_header("X-Amz-Meta-Foo"));
        assert!(r.allows_header("content-type"));
        assert!(!r.allows_header("content-length"));
        assert!(!r.allows_header("x-am"));
        let star = rule(&["*"], &["GET"], &["*"]);
        assert!(star.allows_header("anything-at-all"));
        let none = rule(&["*"], &["GET"], &[]);
        assert!(!none.allows_header("content-type"));
    }

    #[test]
    fn response_headers_name_the_origin_or_any() {
        let mut named = rule(&["http://a.example"], &["GET", "PUT"], &[]);
        named.expose_headers = vec!["ETag".into(), "x-amz-meta-a".into()];
        named.max_age_seconds = Some(600);
        let mut headers = HeaderMap::new();
        let asked = vec!["content-type".to_string(), "x-amz-date".to_string()];
        set_allow_headers(&mut headers, &named, "http://a.example", Some(&asked));
        let get = |h: &HeaderMap, name: &str| h.get(name).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            get(&headers, "access-control-allow-origin").as_deref(),
            Some("http://a.example")
        );
        assert_eq!(get(&headers, "access-control-allow-credentials").as_deref(), Some("true"));
        assert_eq!(get(&headers, "access-control-allow-methods").as_deref(), Some("GET, PUT"));
        assert_eq!(
            get(&headers, "access-control-allow-headers").as_deref(),
            Some("content-type, x-amz-date")
        );
        assert_eq!(
            get(&headers, "access-control-expose-headers").as_deref(),
            Some("ETag, x-amz-meta-a")
        );
        assert_eq!(get(&headers, "access-control-max-age").as_deref(), Some("600"));
        assert_eq!(get(&headers, "vary").as_deref(), Some(VARY));

        let any = rule(&["*"], &["GET"], &[]);
        let mut headers = HeaderMap::new();
        set_allow_headers(&mut headers, &any, "http://b.example", None);
        assert_eq!(get(&headers, "access-control-allow-origin").as_deref(), Some("*"));
        assert_eq!(get(&headers, "access-control-allow-credentials"), None);
        assert_eq!(get(&headers, "access-control-allow-headers"), None);
        assert_eq!(get(&headers, "access-control-expose-headers"), None);
        assert_eq!(get(&headers, "access-control-max-age"), None);
    }

    #[test]
    fn configurations_s3_would_refuse_are_refused() {
        let code = |rules: &[CORSRule]| {
            CorsConfig::from_s3(rules).unwrap_err().code().as_str().to_string()
        };
        assert_eq!(code(&[]), "MalformedXML");
        let ok = s3_rule(&["*"], &["GET"], None);
        assert!(CorsConfig::from_s3(&vec![ok.clone(); MAX_RULES]).is_ok());
        assert_eq!(code(&vec![ok.clone(); MAX_RULES + 1]), "MalformedXML");
        assert_eq!(code(&[s3_rule(&["*"], &["PATCH"], None)]), "InvalidRequest");
        assert_eq!(code(&[s3_rule(&["*"], &["get"], None)]), "InvalidRequest");
        assert_eq!(code(&[s3_rule(&["*"], &[], None)]), "MalformedXML");
        assert_eq!(code(&[s3_rule(&[], &["GET"], None)]), "MalformedXML");
        assert_eq!(code(&[s3_rule(&["http://*.*.example"], &["GET"], None)]), "InvalidRequest");
        assert_eq!(code(&[s3_rule(&["*"], &["GET"], Some(&["x-*-*"]))]), "InvalidRequest");
        let mut negative = ok.clone();
        negative.max_age_seconds = Some(-1);
        assert_eq!(code(&[negative]), "MalformedXML");
        let mut long_id = ok.clone();
        long_id.id = Some("i".repeat(MAX_ID_CHARS + 1));
        assert_eq!(code(&[long_id]), "InvalidArgument");
        // What S3 takes round-trips: stored, then shown, as given.
        let mut full = s3_rule(
            &["http://*.example", ""],
            &["GET", "PUT", "HEAD", "POST", "DELETE"],
            Some(&["*"]),
        );
        full.expose_headers = Some(vec!["ETag".into()]);
        full.id = Some("i".repeat(MAX_ID_CHARS));
        full.max_age_seconds = Some(0);
        let config = CorsConfig::from_s3(&[full.clone(), ok.clone()]).unwrap();
        let stored: CorsConfig =
            serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        assert_eq!(stored, config);
        let shown: Vec<CORSRule> = stored.rules.iter().map(CorsRule::to_s3).collect();
        assert_eq!(shown, vec![full, ok]);
    }

    #[test]
    fn requests_name_their_bucket_path_style() {
        let uri = |text: &str| text.parse::<http::Uri>().unwrap();
        assert_eq!(bucket_of(&uri("/media/a/b.jpg?x=1")), Some("media"));
        assert_eq!(bucket_of(&uri("/media")), Some("media"));
        assert_eq!(bucket_of(&uri("/media/")), Some("media"));
        assert_eq!(bucket_of(&uri("/")), None);
        assert_eq!(bucket_of(&uri("/.weft-s3-parts/x")), None);
        assert_eq!(bucket_of(&uri("/a%2Fb/x")), None);
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        let get = Method::GET;
        assert!(RequestCors::of(&get, &uri("/media/k"), &headers(&[])).is_none());
        let plain =
            RequestCors::of(&get, &uri("/media/k"), &headers(&[("origin", "http://a")])).unwrap();
        assert_eq!((plain.bucket.as_str(), plain.method.as_str()), ("media", "GET"));
        // As S3 does, a request naming Access-Control-Request-Method is matched with it.
        let asked = RequestCors::of(
            &Method::PUT,
            &uri("/media/k"),
            &headers(&[("origin", "http://a"), ("access-control-request-method", "GET")]),
        )
        .unwrap();
        assert_eq!(asked.method, "GET");
    }
}
