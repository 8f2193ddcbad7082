//! The axum middleware that refuses every request not signed for this service.
//!
//! Invariants:
//! - It wraps the whole router, fallback included, so no route (present or future) answers
//!   an unauthenticated request: refusals are 401 `unauthenticated` (503 `busy` when the
//!   replay memory is full), with the services' error body `{"error","message"}`.
//! - A body whose hash was signed is read whole (at most `max_body_bytes`, or the larger
//!   bound of `large_bodies` for the paths it names; else 413) and checked before the handler
//!   sees it. Headers are verified first, so only an authenticated sender can make the guard
//!   buffer a body; an unsigned streamed body passes through untouched.
//! - The verified [`Principal`] is put in the request's extensions for handlers that
//!   authorise by principal.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use http_body_util::BodyExt;

use crate::{
    check_body, now_ms, AuthError, BodyCheck, Principal, RequestHead, Verifier,
    AUTHORIZATION_HEADER, CONTENT_HASH_HEADER,
};

/// The middleware's state: the verifier and the largest signed body it buffers.
#[derive(Clone, Debug)]
pub struct Guard {
    pub verifier: Arc<Verifier>,
    pub max_body_bytes: usize,
    /// `(suffix, bytes)`: requests whose path ends with `suffix` may have signed bodies of up
    /// to `bytes` (e.g. meta's inventory digests; the first match counts); none listed:
    /// `max_body_bytes` for every path.
    pub large_bodies: &'static [(&'static str, usize)],
}

/// The error answer for a refused request.
pub fn refusal(error: &AuthError) -> Response {
    let (status, code) = match error {
        AuthError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
        _ => (StatusCode::UNAUTHORIZED, "unauthenticated"),
    };
    error_response(status, code, &error.to_string())
}

/// The services' error body, `{"error":code,"message":message}`.
fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": code, "message": message }).to_string();
    (status, [("content-type", "application/json")], body).into_response()
}

/// `axum::middleware::from_fn_with_state(guard, require_signature)`.
pub async fn require_signature(
    State(guard): State<Guard>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let head = RequestHead {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        authorization: header(AUTHORIZATION_HEADER),
        content_sha256: header(CONTENT_HASH_HEADER),
    };
    let (principal, check) = match guard.verifier.verify(head, now_ms()) {
        Ok(verified) => verified,
        Err(error) => return refusal(&error),
    };
    let body = match check {
        BodyCheck::Unsigned => body,
        BodyCheck::Hash(_) => {
            let path = parts.uri.path();
            let max_bytes = match guard.large_bodies.iter().find(|(s, _)| path.ends_with(s)) {
                Some((_, bytes)) => *bytes,
                None => guard.max_body_bytes,
            };
            let limited = http_body_util::Limited::new(body, max_bytes);
            let bytes = match limited.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => {
                    let message =
                        format!("the body is larger than {max_bytes} bytes, or broke off");
                    return error_response(StatusCode::PAYLOAD_TOO_LARGE, "too_large", &message);
                }
            };
            if let Err(error) = check_body(&check, &bytes) {
                return refusal(&error);
            }
            Body::from(bytes)
        }
    };
    parts.extensions.insert::<Principal>(principal);
    next.run(Request::from_parts(parts, body)).await
}
