//! Signing reqwest requests (async and blocking) for meta and nodes, and the builders of
//! the clients that send them (every client of weft's APIs is built here, so every one
//! speaks TLS with the process's identity: see `tls`).
//!
//! Invariants: the signature covers the URL's path and query exactly as reqwest will send
//! them (read from the built request, after reqwest's own normalisation). Requests to meta
//! also cover the body's SHA-256 (their bodies are small JSON, always in memory); requests
//! to nodes are sent as [`crate::UNSIGNED_PAYLOAD`]: their bodies are units, checked end to
//! end against meta's checksums rather than hashed twice on the way.

use reqwest::header::{HeaderName, HeaderValue};

/// A builder of an async client of weft's APIs: TLS with this process's identity
/// ([`crate::tls::client`]) for https:// URLs.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().use_preconfigured_tls(crate::tls::client())
}

/// A builder of a blocking client of weft's APIs, as [`client_builder`].
pub fn blocking_client_builder() -> reqwest::blocking::ClientBuilder {
    reqwest::blocking::Client::builder().use_preconfigured_tls(crate::tls::client())
}

use crate::{
    content_hash, Audience, Signer, AUTHORIZATION_HEADER, CONTENT_HASH_HEADER, UNSIGNED_PAYLOAD,
};

/// The signature headers for a request with this method, URL and body: `None` when it has
/// no body, `Some(None)` when the body is streamed, `Some(Some(bytes))` when it is in memory.
fn headers(
    signer: &Signer,
    method: &str,
    url: &reqwest::Url,
    body: Option<Option<&[u8]>>,
) -> [(HeaderName, HeaderValue); 2] {
    let hash = match body {
        _ if matches!(signer.audience(), Audience::Node(_)) => UNSIGNED_PAYLOAD.to_string(),
        Some(Some(bytes)) => content_hash(bytes),
        Some(None) => UNSIGNED_PAYLOAD.to_string(),
        None => content_hash(&[]),
    };
    let authorization = signer.authorization(method, url.path(), url.query().unwrap_or(""), &hash);
    [
        (
            HeaderName::from_static(AUTHORIZATION_HEADER),
            HeaderValue::from_str(&authorization).expect("signatures are ASCII"),
        ),
        (
            HeaderName::from_static(CONTENT_HASH_HEADER),
            HeaderValue::from_str(&hash).expect("hashes are ASCII"),
        ),
    ]
}

/// Sets the headers, replacing any signature a request carried (a re-signed retry).
fn insert(headers: &mut reqwest::header::HeaderMap, signed: [(HeaderName, HeaderValue); 2]) {
    for (name, value) in signed {
        headers.insert(name, value);
    }
}

/// Signs a built async request in place (call again for each attempt: a signature is single-use).
pub fn sign(signer: &Signer, request: &mut reqwest::Request) {
    let body = request.body().map(reqwest::Body::as_bytes);
    let signed = headers(signer, request.method().as_str(), request.url(), body);
    insert(request.headers_mut(), signed);
}

/// Signs a built blocking request in place.
pub fn sign_blocking(signer: &Signer, request: &mut reqwest::blocking::Request) {
    let body = request.body().map(reqwest::blocking::Body::as_bytes);
    let signed = headers(signer, request.method().as_str(), request.url(), body);
    insert(request.headers_mut(), signed);
}

/// `builder.send_signed(&signer)`: build, sign, send (async).
/// The request is signed when `send_signed` is called, so the future does not borrow the
/// signer.
pub trait SendSigned {
    fn send_signed(
        self,
        signer: &Signer,
    ) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send + use<Self>;
}

impl SendSigned for reqwest::RequestBuilder {
    fn send_signed(
        self,
        signer: &Signer,
    ) -> impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send + use<> {
        let (client, request) = self.build_split();
        let signed = request.map(|mut request| {
            sign(signer, &mut request);
            request
        });
        async move { client.execute(signed?).await }
    }
}

/// `builder.send_signed(&signer)` for blocking clients.
pub trait SendSignedBlocking {
    fn send_signed(self, signer: &Signer) -> reqwest::Result<reqwest::blocking::Response>;
}

impl SendSignedBlocking for reqwest::blocking::RequestBuilder {
    fn send_signed(self, signer: &Signer) -> reqwest::Result<reqwest::blocking::Response> {
        let (client, request) = self.build_split();
        let mut request = request?;
        sign_blocking(signer, &mut request);
        client.execute(request)
    }
}
