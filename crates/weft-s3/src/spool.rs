//! Bodies of unknown length: a PutObject or UploadPart sent with plain `Transfer-Encoding:
//! chunked` and neither a Content-Length nor an aws-chunked `x-amz-decoded-content-length`.
//! weft's writer lays an object out by its size before the first byte (stripes, groups,
//! units), so such a body is spooled first, to an unlinked temporary file, then written
//! like any other. (aws-chunked bodies name their decoded length and stream without one.)
//!
//! Invariants:
//! - A spool is bounded: at most [`SPOOL_MAX_BYTES`] a request (S3's largest single PUT,
//!   400 EntityTooLarge beyond) and [`SPOOLS_MAX_BYTES`] for all requests at once (503
//!   SlowDown beyond): bytes are reserved before they are written, and released when the
//!   spool is dropped.
//! - The file is unlinked as soon as it is open: it never outlives its request, even when
//!   the gateway is killed.
//! - A body that fails while it is spooled fails the request; nothing is written to weft.
//! - Only a request whose SigV4 header signature holds is spooled; any other is refused
//!   (403) before its body is read.

use std::{
    pin::Pin,
    sync::atomic::{AtomicU64, Ordering},
};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use s3s::{s3_error, S3Result};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Most bytes one body is spooled to (S3's limit of a single PUT: 5 GiB).
pub const SPOOL_MAX_BYTES: u64 = 5 << 30;
/// Most bytes all spools of this gateway hold at once.
pub const SPOOLS_MAX_BYTES: u64 = 8 << 30;
/// Bytes read back from a spool at a time.
const READ_BYTES: usize = 1 << 20;

static SPOOLED: AtomicU64 = AtomicU64::new(0);

/// Bytes reserved from a bound shared by all spools ([`SPOOLS_MAX_BYTES`] of [`SPOOLED`]),
/// given back on drop.
#[derive(Debug)]
struct Reservation {
    counter: &'static AtomicU64,
    limit: u64,
    held: u64,
}

impl Reservation {
    fn new(counter: &'static AtomicU64, limit: u64) -> Reservation {
        Reservation { counter, limit, held: 0 }
    }

    /// Reserves `more` bytes; false (and nothing reserved) when all spools would exceed
    /// their bound.
    fn grow(&mut self, more: u64) -> bool {
        let limit = self.limit;
        let taken = self.counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
            now.checked_add(more).filter(|&total| total <= limit)
        });
        if taken.is_ok() {
            self.held += more;
        }
        taken.is_ok()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.held, Ordering::AcqRel);
    }
}

/// A whole body, spooled: its length and its bytes.
#[derive(Debug)]
pub struct Spooled {
    pub size: u64,
    file: tokio::fs::File,
    reservation: Reservation,
}

/// Whether a request's body has no length it can be streamed by: plain chunked transfer
/// coding without aws-chunked's decoded length.
pub fn unsized_body(headers: &http::HeaderMap) -> bool {
    let chunked = headers
        .get(http::header::TRANSFER_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|c| c.trim().eq_ignore_ascii_case("chunked")));
    chunked
        && !headers.contains_key(http::header::CONTENT_LENGTH)
        && !headers.contains_key("x-amz-decoded-content-length")
}

/// Spools the body of `request` when it has no length ([`unsized_body`]) and hands it on
/// with its Content-Length, so every operation after takes it as a body of known length.
/// Only a request whose header signature holds is spooled (nothing unauthenticated is
/// written, even to a temporary file): others are 403 before a byte of the body is read.
pub async fn give_length<A: s3s::auth::S3Auth + ?Sized>(
    request: &mut http::Request<s3s::Body>,
    auth: &A,
) -> S3Result<()> {
    if !(request.method() == http::Method::PUT && unsized_body(request.headers())) {
        return Ok(());
    }
    if !crate::signed_payload::header_signature_holds(request, auth).await {
        return Err(s3_error!(
            AccessDenied,
            "a body without a Content-Length is taken only with a valid SigV4 Authorization \
             header (it is spooled before it is written)"
        ));
    }
    let spooled = spool(std::mem::take(request.body_mut())).await?;
    request.headers_mut().insert(http::header::CONTENT_LENGTH, spooled.size.into());
    *request.body_mut() = s3s::Body::from(s3s::dto::StreamingBlob::wrap(spooled.into_stream()));
    Ok(())
}

/// Spools `body` to an unlinked temporary file.
pub async fn spool<S, E>(mut body: S) -> S3Result<Spooled>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let failed = |e: std::io::Error| s3_error!(InternalError, "cannot spool the body: {e}");
    let name = format!("weft-s3-spool-{}-{:016x}", std::process::id(), rand::random::<u64>());
    let path = std::env::temp_dir().join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(failed)?;
    let _ = std::fs::remove_file(&path);
    let mut file = tokio::fs::File::from_std(file);
    let mut reservation = Reservation::new(&SPOOLED, SPOOLS_MAX_BYTES);
    let mut size = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "the body failed: {e}"))?;
        size += chunk.len() as u64;
        if size > SPOOL_MAX_BYTES {
            return Err(s3_error!(
                EntityTooLarge,
                "a body without a length is at most {SPOOL_MAX_BYTES} bytes (use a multipart \
                 upload, or send a Content-Length)"
            ));
        }
        if !reservation.grow(chunk.len() as u64) {
            return Err(s3_error!(
                SlowDown,
                "too many bodies without a length are being spooled at once; retry, or send a \
                 Content-Length"
            ));
        }
        file.write_all(&chunk).await.map_err(failed)?;
    }
    file.flush().await.map_err(failed)?;
    file.seek(std::io::SeekFrom::Start(0)).await.map_err(failed)?;
    Ok(Spooled { size, file, reservation })
}

impl Spooled {
    /// The spooled bytes, read back in order (the spool's bytes stay reserved until the
    /// stream is dropped).
    pub fn into_stream(
        self,
    ) -> Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync>> {
        let Spooled { file, reservation, .. } = self;
        Box::pin(futures_util::stream::unfold(
            (file, reservation),
            |(mut file, reservation)| async move {
                let mut buffer = vec![0u8; READ_BYTES];
                match file.read(&mut buffer).await {
                    Ok(0) => None,
                    Ok(n) => {
                        buffer.truncate(n);
                        Some((Ok(Bytes::from(buffer)), (file, reservation)))
                    }
                    Err(error) => Some((Err(error), (file, reservation))),
                }
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn spooled_bodies_read_back_whole_and_release_their_bytes() {
        runtime().block_on(async {
            let pieces: Vec<Result<Bytes, String>> =
                (0..40u8).map(|i| Ok(Bytes::from(vec![i; 100_003]))).collect();
            let expected: Vec<u8> =
                pieces.iter().flat_map(|p| p.as_ref().unwrap().to_vec()).collect();
            let before = SPOOLED.load(Ordering::Acquire);
            let spooled = spool(futures_util::stream::iter(pieces)).await.unwrap();
            assert_eq!(spooled.size, expected.len() as u64);
            assert!(SPOOLED.load(Ordering::Acquire) >= before + expected.len() as u64);
            let mut read = Vec::new();
            let mut stream = spooled.into_stream();
            while let Some(piece) = stream.next().await {
                read.extend_from_slice(&piece.unwrap());
            }
            assert_eq!(read, expected);
            drop(stream);
            assert!(SPOOLED.load(Ordering::Acquire) <= before, "released");
            // A body that fails while spooled fails the spool.
            let failing: Vec<Result<Bytes, String>> =
                vec![Ok(Bytes::from_static(b"ab")), Err("cut".into())];
            let error = spool(futures_util::stream::iter(failing)).await.unwrap_err();
            assert_eq!(*error.code(), s3s::S3ErrorCode::IncompleteBody);
        });
    }

    #[test]
    fn only_plain_chunked_bodies_without_a_length_are_unsized() {
        let headers = crate::test_headers(&[("transfer-encoding", "chunked")]);
        assert!(unsized_body(&headers));
        let sized =
            crate::test_headers(&[("transfer-encoding", "chunked"), ("content-length", "5")]);
        assert!(!unsized_body(&sized));
        let aws = crate::test_headers(&[
            ("transfer-encoding", "chunked"),
            ("x-amz-decoded-content-length", "5"),
        ]);
        assert!(!unsized_body(&aws));
        assert!(!unsized_body(&http::HeaderMap::new()));
    }

    #[test]
    fn reservations_stop_at_the_bound_of_all_spools() {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut first = Reservation::new(&COUNTER, 1000);
        assert!(first.grow(600) && first.grow(400));
        let mut second = Reservation::new(&COUNTER, 1000);
        assert!(!second.grow(1), "the bound holds");
        drop(first);
        assert_eq!(COUNTER.load(Ordering::Acquire), 0, "released on drop");
        assert!(second.grow(1000));
    }
}
