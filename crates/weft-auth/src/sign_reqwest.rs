//! Signing reqwest requests (async and blocking) for meta and nodes.
//!
//! Invariants: the signature covers the URL's path and query exactly as reqwest will send
//! them (read from the built request, after reqwest's own normalisation). Requests to meta
//! also cover the body's SHA-256 (their bodies are small JSON, always in memory); requests
//! to nodes are sent as [`crate::UNSIGNED_PAYLOAD`]: their bodies are units, checked end to
//! end against meta's checksums rather than hashed twice on the way.

use reqwest::header::{HeaderName, HeaderValue};

use crate::{
    content_hash, Audience, Signer, AUTHORIZATION_HEADER, CONTENT_HASH_HEADER, UNSIGNED_PAYLOAD,
};

fn headers(
    signer: &Signer,
    method: &str,
    url: &reqwest::Url,
    body: Option<&[u8]>,
    streamed: bool,
) -> [(HeaderName, HeaderValue); 2] {
    let hash = match body {
        _ if matches!(signer.audience(), Audience::Node(_)) => UNSIGNED_PAYLOAD.to_string(),
        Some(bytes) => content_hash(bytes),
        None if streamed => UNSIGNED_PAYLOAD.to_string(),
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

/// Signs a built async request in place (call again for each attempt: a signature is single-use).
pub fn sign(signer: &Signer, request: &mut reqwest::Request) {
    let (body, streamed) = match request.body() {
        Some(body) => (body.as_bytes(), body.as_bytes().is_none()),
        None => (None, false),
    };
    let signed = headers(signer, request.method().as_str(), request.url(), body, streamed);
    for (name, value) in signed {
        request.headers_mut().insert(name, value);
    }
}

/// Signs a built blocking request in place.
pub fn sign_blocking(signer: &Signer, request: &mut reqwest::blocking::Request) {
    let (body, streamed) = match request.body() {
        Some(body) => (body.as_bytes(), body.as_bytes().is_none()),
        None => (None, false),
    };
    let signed = headers(signer, request.method().as_str(), request.url(), body, streamed);
    for (name, value) in signed {
        request.headers_mut().insert(name, value);
    }
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
