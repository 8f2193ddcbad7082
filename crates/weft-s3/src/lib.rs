//! weft-s3: an S3-compatible gateway over weft-client. The S3 protocol (routing, XML,
//! SigV4 in headers and presigned URLs) is `s3s`'s; what is weft's own is how S3 maps onto
//! weft objects.
//!
//! - [`keys`]: access keys live in meta (gateway records, namespace `access_keys`); the
//!   gateway looks them up per request and caches them for [`keys::KEY_CACHE_TTL`].
//! - [`gateway`]: the S3 operations. Objects are weft objects (same bucket, same key), so
//!   `weft ls/get/rm` and S3 see the same namespace; S3 attributes (ETag, Content-Type,
//!   `x-amz-meta-*`, Last-Modified) are a meta record naming the object's generation.
//! - [`multipart`]: uploads and parts are meta records; parts are weft objects in the
//!   internal bucket [`multipart::PARTS_BUCKET`]; Complete copies the parts, in order, into
//!   one ordinary weft object and then deletes them.
//! - [`body`]: request bodies stream into weft-client's `put_reader` through a bounded
//!   channel, and objects stream out in bounded pieces: no object is ever held whole.
//!
//! Invariants kept by the whole crate:
//! - Meta owns every piece of state; the gateway keeps only a short-lived key cache.
//! - No request that fails creates an object: bodies that are short, long or fail their
//!   Content-MD5 never let the write commit (the last bytes are held back until checked).
//! - Anonymous requests are refused (s3s's default access check once auth is set).

pub mod attributes;
pub mod body;
pub mod gateway;
pub mod keys;
pub mod listing;
pub mod multipart;

use std::net::SocketAddr;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

pub use gateway::Gateway;
pub use keys::{new_key, KeyRecord, ACCESS_KEYS};
pub use weft_auth::ClusterSecret;

/// The region the gateway reports and that clients should sign for.
pub const DEFAULT_REGION: &str = "us-east-1";

/// How to run a gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// meta's base URL (`http://host:port`).
    pub meta_url: String,
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// The cluster secret: the gateway signs its requests to meta and nodes with keys
    /// derived from it, and opens the sealed secrets of access keys with it.
    pub secret: weft_auth::ClusterSecret,
    /// Bytes of the degraded-read cache shared by every request (0: none).
    pub degraded_cache_bytes: usize,
    /// Appends every GET's range to this read trace (JSON lines), when set.
    pub trace_reads: Option<std::path::PathBuf>,
}

impl GatewayConfig {
    /// A gateway on `listen` over meta at `meta_url`, with the default degraded-read cache
    /// and no read trace.
    pub fn new(
        meta_url: String,
        listen: SocketAddr,
        secret: weft_auth::ClusterSecret,
    ) -> GatewayConfig {
        GatewayConfig {
            meta_url,
            listen,
            secret,
            degraded_cache_bytes: weft_client::DEFAULT_DEGRADED_CACHE_BYTES,
            trace_reads: None,
        }
    }
}

/// Why the gateway could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum GatewayError {
    /// The listen address could not be bound.
    Bind { listen: SocketAddr, source: std::io::Error },
    /// The weft client could not be built (bad meta URL).
    Client(weft_client::ClientError),
}

impl std::fmt::Display for GatewayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayError::Bind { listen, source } => {
                write!(f, "cannot listen on {listen}: {source} (is another gateway running?)")
            }
            GatewayError::Client(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for GatewayError {}

/// A gateway serving in the background; [`RunningGateway::stop`] ends it.
#[derive(Debug)]
pub struct RunningGateway {
    endpoint: String,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningGateway {
    /// `http://ip:port` the gateway answers on.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops accepting connections and waits for the accept loop to end (requests in
    /// flight are abandoned).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Whether a request is `Expect: 100-continue` with `Content-Length: 0` (botocore sends
/// that on every empty PutObject). hyper answers it without a `100 Continue`, and botocore
/// then misreads the next answer on the same connection and stalls until its read timeout;
/// so such answers close the connection.
fn empty_expecting_continue(request: &http::Request<hyper::body::Incoming>) -> bool {
    let headers = request.headers();
    let empty =
        headers.get(http::header::CONTENT_LENGTH).is_some_and(|length| length.as_bytes() == b"0");
    let expect = headers
        .get(http::header::EXPECT)
        .is_some_and(|expect| expect.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    empty && expect
}

/// Binds the listen address and serves S3 over meta at `config.meta_url` in the background.
pub async fn bind(config: GatewayConfig) -> Result<RunningGateway, GatewayError> {
    let mut client = weft_client::Client::new(&config.meta_url, &config.secret)
        .map_err(GatewayError::Client)?
        .with_degraded_cache(config.degraded_cache_bytes);
    if let Some(path) = &config.trace_reads {
        client = client.with_read_trace(path).map_err(GatewayError::Client)?;
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| GatewayError::Bind { listen: config.listen, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| GatewayError::Bind { listen: config.listen, source })?;
    let service = {
        let keys = keys::MetaAuth::new(client.meta.clone(), config.secret.seal_key());
        let mut builder =
            s3s::service::S3ServiceBuilder::new(Gateway::new(client.clone(), keys.clone()));
        builder.set_auth(keys);
        builder.build()
    };
    let (stop, mut stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        let http = ConnBuilder::new(TokioExecutor::new());
        loop {
            let socket = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((socket, _)) => socket,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        continue;
                    }
                },
                _ = stopped.changed() => break,
            };
            let service = service.clone();
            let handler = hyper::service::service_fn(move |request| {
                let service = service.clone();
                async move {
                    let close = empty_expecting_continue(&request);
                    let mut response = service.call(request.map(s3s::Body::from)).await?;
                    if close {
                        response.headers_mut().insert(
                            http::header::CONNECTION,
                            http::HeaderValue::from_static("close"),
                        );
                    }
                    Ok::<_, s3s::HttpError>(response)
                }
            });
            let connection = http.serve_connection(TokioIo::new(socket), handler).into_owned();
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "connection ended with an error");
                }
            });
        }
    });
    Ok(RunningGateway { endpoint: format!("http://{local}"), stop, task })
}
