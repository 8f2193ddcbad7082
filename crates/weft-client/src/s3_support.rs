//! What the S3 gateway (weft-s3) needs from a client beyond puts and gets: meta's bucket and
//! gateway-record routes (docs/meta-api.md) and a bounded stream of an object's bytes.
//!
//! Invariants:
//! - Record names are percent-encoded into the path like object keys, so any name meta
//!   accepts round-trips; a missing record is `Ok(None)`, never an error.
//! - [`Client::object_stream`] holds at most [`STREAM_PIECES_IN_FLIGHT`] pieces of at most
//!   [`STREAM_PIECE_BYTES`] (rounded to whole stripe rows) besides the one being read: a
//!   slow reader of a huge object slows the reads down instead of filling memory. Every
//!   piece is read by [`Client::read_object_range`], so degraded reads work as in `weft get`;
//!   a piece is handed out as slices of the block ranges the nodes answered with (no copy;
//!   small cells are gathered into one buffer, see `read::assemble`), which together hold
//!   the piece's bytes (what a healthy read fetches; a degraded one holds the decoded
//!   ranges, of the same sizes);
//!   a read trace gets one line per stream (the range asked for), not one per piece; the
//!   pieces' reads share one object record (`Arc`), never a copy of it per piece.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use serde_json::{json, Value};

use crate::{meta::encode_path, Client, ClientError, MetaClient, ObjectInfo, ReadMode, Result};

/// Most object bytes one piece of [`Client::object_stream`] holds (before rounding to rows).
pub const STREAM_PIECE_BYTES: u64 = 8 << 20;
/// Pieces read ahead of the consumer of [`Client::object_stream`].
pub const STREAM_PIECES_IN_FLIGHT: usize = 1;

/// One page of gateway records: (name, value) in name order, and where the next page starts.
pub type RecordPage = (Vec<(String, Value)>, Option<String>);

fn is_missing(error: &ClientError, code: &str) -> bool {
    matches!(error, ClientError::Meta { status: 404, code: c, .. } if c == code)
}

impl MetaClient {
    /// `PUT path` with a JSON body.
    pub async fn put_json(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::PUT, path, Some(body)).await
    }

    /// `DELETE path`.
    pub async fn delete_json(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// Stores a gateway record; `if_absent` refuses (409 `record_exists`) to replace one.
    pub async fn put_record(
        &self,
        namespace: &str,
        name: &str,
        value: &Value,
        if_absent: bool,
    ) -> Result<()> {
        let path = format!("/v1/records/{namespace}/{}?if_absent={if_absent}", encode_path(name));
        self.put_json(&path, value.clone()).await.map(|_| ())
    }

    /// The gateway record (namespace, name), None when there is none.
    pub async fn get_record(&self, namespace: &str, name: &str) -> Result<Option<Value>> {
        match self.get_json(&format!("/v1/records/{namespace}/{}", encode_path(name))).await {
            Ok(mut answer) => Ok(Some(answer["value"].take())),
            Err(error) if is_missing(&error, "no_such_record") => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Removes a gateway record; returns it, None when there was none.
    pub async fn delete_record(&self, namespace: &str, name: &str) -> Result<Option<Value>> {
        match self.delete_json(&format!("/v1/records/{namespace}/{}", encode_path(name))).await {
            Ok(mut answer) => Ok(Some(answer["value"].take())),
            Err(error) if is_missing(&error, "no_such_record") => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// One page of the gateway records of a namespace whose name starts with `prefix`.
    pub async fn list_records(
        &self,
        namespace: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RecordPage> {
        let mut path = format!(
            "/v1/records/{namespace}?prefix={}&limit={limit}",
            encode_path(prefix).replace('/', "%2F")
        );
        if let Some(after) = start_after {
            path.push_str(&format!("&start_after={}", encode_path(after).replace('/', "%2F")));
        }
        let mut answer = self.get_json(&path).await?;
        let records = match answer["records"].take() {
            Value::Array(records) => records
                .into_iter()
                .map(|mut r| {
                    (r["name"].as_str().unwrap_or_default().to_string(), r["value"].take())
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok((records, answer["next_start_after"].as_str().map(str::to_string)))
    }

    /// Every bucket (`{"buckets":[BucketRecord...]}`).
    pub async fn list_buckets(&self) -> Result<Value> {
        self.get_json("/v1/buckets").await
    }

    /// The bucket's record (name, default policy, created_ms).
    pub async fn get_bucket(&self, name: &str) -> Result<Value> {
        self.get_json(&format!("/v1/buckets/{}", encode_path(name).replace('/', "%2F"))).await
    }

    /// Creates a bucket with meta's default policy (`policy` None) or the one given.
    pub async fn create_bucket(&self, name: &str, policy: Option<Value>) -> Result<Value> {
        let path = format!("/v1/buckets/{}", encode_path(name).replace('/', "%2F"));
        self.put_json(&path, policy.unwrap_or_else(|| json!({}))).await
    }

    /// Creates a bucket with the gateway records `bucket_config/<name>/<suffix>` of
    /// `config` (an object of suffix → value), written by meta with it.
    pub async fn create_bucket_with_config(
        &self,
        name: &str,
        policy: Option<Value>,
        config: Value,
    ) -> Result<Value> {
        let path = format!("/v1/buckets/{}", encode_path(name).replace('/', "%2F"));
        let mut body = policy.unwrap_or_else(|| json!({}));
        body["s3_config"] = config;
        self.put_json(&path, body).await
    }

    /// Deletes an empty bucket.
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        let path = format!("/v1/buckets/{}", encode_path(name).replace('/', "%2F"));
        self.delete_json(&path).await.map(|_| ())
    }
}

impl Client {
    /// Bytes `[start, start + len)` of `object` as a stream of pieces, read ahead by at most
    /// [`STREAM_PIECES_IN_FLIGHT`] pieces (see the module invariants). An error ends the
    /// stream.
    pub fn object_stream(&self, object: ObjectInfo, start: u64, len: u64) -> ObjectStream {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<std::collections::VecDeque<Bytes>>>(
            STREAM_PIECES_IN_FLIGHT,
        );
        // The trace records the range asked for, once, not each piece read for it.
        if let Some(trace) = &self.trace {
            trace.record(&object.bucket, &object.key, start, len, object.size);
        }
        // The pieces share the unit files they open locally (one ask per unit per stream).
        let grants = Some(Default::default());
        let client = Client { trace: None, read_grants: grants, ..self.clone() };
        // One record for every piece's read (it holds the object's units and raw JSON).
        let object = Arc::new(object);
        let row = object.layout.stripe_width as u64 * object.layout.cell_bytes;
        let piece = (STREAM_PIECE_BYTES / row).max(1) * row;
        tokio::spawn(async move {
            let end = start + len;
            let mut at = start;
            while at < end {
                // Pieces end on row boundaries so each read is whole rows after the first.
                let piece_end = ((at / piece + 1) * piece).min(end);
                // The piece's bytes as the nodes' answers brought them (slices, no copy).
                let mut pieces = std::collections::VecDeque::new();
                let mut keep = |bytes: Bytes| {
                    pieces.push_back(bytes);
                    Ok(())
                };
                let range = Some((at, piece_end - at));
                let read = client
                    .read_object_range(
                        Arc::clone(&object),
                        range,
                        &mut keep,
                        None,
                        ReadMode::default(),
                    )
                    .await;
                let item = read.map(|_| pieces);
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
                at = piece_end;
            }
        });
        ObjectStream { pieces: rx, current: Default::default() }
    }
}

/// The pieces of [`Client::object_stream`], in object order; Send and Sync, so it can be a
/// response body.
#[derive(Debug)]
pub struct ObjectStream {
    pieces: tokio::sync::mpsc::Receiver<Result<std::collections::VecDeque<Bytes>>>,
    /// The rest of the piece being handed out (slices of its block ranges).
    current: std::collections::VecDeque<Bytes>,
}

impl Stream for ObjectStream {
    type Item = Result<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        loop {
            if let Some(bytes) = self.current.pop_front() {
                return std::task::Poll::Ready(Some(Ok(bytes)));
            }
            match std::task::ready!(self.pieces.poll_recv(cx)) {
                Some(Ok(piece)) => self.current = piece,
                Some(Err(error)) => return std::task::Poll::Ready(Some(Err(error))),
                None => return std::task::Poll::Ready(None),
            }
        }
    }
}
