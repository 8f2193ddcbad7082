//! Unit GETs answered from the page cache with sendfile(2), beside the axum server
//! (docs/node-api.md, "Checksummed ranges").
//!
//! Data flow: [`SplitListener`] accepts every connection and reads its first request head
//! itself. A `GET /v1/disks/{disk}/units/{unit}` that asks for checksummed ranges
//! (`x-weft-checksums: crc32c`) is answered here: signature verified, the unit opened, the
//! partial segments at the range's edges read and verified, then the status line, the
//! stored CRC-32C of every whole segment in the range, the edge bytes and — between them —
//! the whole segments straight from the file into the socket (no copy through this process).
//! The receiver verifies those segments against the checksums before it trusts a byte. The
//! connection then waits for its next request. The first request of any other kind hands the
//! connection, with the bytes already read, to axum (through [`SplitListener`]'s `accept`)
//! for the rest of its life.
//!
//! Invariants:
//! - Every connection comes from weft-auth's TLS listener, its handshake (when the node has
//!   TLS) already done; over TLS the whole segments are read (verified) and written through
//!   the cipher instead of sent with sendfile, in the same answer format, and every answer
//!   is flushed before the next request is read (the cipher buffers what a full socket did
//!   not take; unflushed, the peer would wait for it until its read timeout).
//! - Nothing is answered that axum's guard would refuse: the same verifier checks the same
//!   signed head (method, path, query, authorization, content hash of an empty body).
//! - Every byte sent was verified here (the edges) or goes with its segment's stored
//!   checksum (the whole segments). An error found before the status line is a clean error
//!   answer with axum's JSON body and status (404, 416, 500 corrupt, 503); an error after it
//!   (the file's read failing under sendfile, the peer stalling longer than [`SEND_STALL`])
//!   closes the connection, so the receiver sees a short body, never a wrong one.
//! - A node with a hardware model (disk or link) answers every request through axum, which
//!   waits out the modeled IO; so does a unit whose file has no descriptor (a test
//!   filesystem that injects faults), here, by reading and verifying every byte.
//! - Each request costs one blocking task for the open and the edges, one for the sendfile;
//!   a request head is at most [`MAX_HEAD_BYTES`] (a longer one goes to axum, which refuses
//!   it).

use std::{
    io,
    net::SocketAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpListener,
    sync::{mpsc, watch},
};
use weft_auth::{
    tls::{Acceptor, Stream},
    BodyCheck, RequestHead, Verifier,
};
use weft_store::{UnitReader, WholeSegments};

use crate::{
    api::{self, ApiError, ApiResult, ByteRange},
    Node,
};

/// The request header asking for a checksummed range, and its one value.
pub const CHECKSUMS_HEADER: &str = "x-weft-checksums";
pub const CHECKSUMS_CRC32C: &str = "crc32c";
/// The answer's header giving the unit bytes `a-b` (inclusive) its checksums cover.
pub const CHECKSUMMED_HEADER: &str = "x-weft-checksummed";
/// The answer's header giving the segment size the checksums are of.
pub const SEGMENT_BYTES_HEADER: &str = "x-weft-segment-bytes";

/// Longest request head read here; a longer one is handed to axum.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Longest a sendfile waits for the peer to take bytes before the connection is closed.
const SEND_STALL: Duration = Duration::from_secs(30);
/// The route as the request metrics name it (axum's matched path).
const ROUTE: &str = "/v1/disks/{disk}/units/{unit}";

/// A connection handed to axum: the bytes already read from it, then the socket.
#[derive(Debug)]
pub(crate) struct Handoff {
    read: Vec<u8>,
    at: usize,
    stream: Stream,
}

impl AsyncRead for Handoff {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.read.len() {
            let n = buf.remaining().min(self.read.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.read[at..at + n]);
            self.at += n;
            if self.at == self.read.len() {
                self.read = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Handoff {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The node's listener: answers checksummed unit GETs itself and hands axum the
/// connections that ask anything else.
#[derive(Debug)]
pub(crate) struct SplitListener {
    handoffs: mpsc::Receiver<(Handoff, SocketAddr)>,
    local_addr: SocketAddr,
}

/// What the connections answered here share.
struct Shared {
    node: Arc<Node>,
    verifier: Arc<Verifier>,
    handoffs: mpsc::Sender<(Handoff, SocketAddr)>,
    stopped: watch::Receiver<bool>,
}

impl SplitListener {
    /// Starts accepting on `listener` until `stopped` turns true.
    pub(crate) fn start(
        listener: TcpListener,
        node: Arc<Node>,
        verifier: Arc<Verifier>,
        stopped: watch::Receiver<bool>,
        acceptor: Acceptor,
    ) -> io::Result<SplitListener> {
        // Accepts and handshakes (weft-auth's listener): connections come out ready.
        let listener = weft_auth::tls::Listener::start(listener, acceptor)?;
        let local_addr = listener.local_addr();
        let (handoffs, receiver) = mpsc::channel(64);
        // A modeled node waits out its disk and link models in axum's handlers.
        let native = node.models.iter().all(Option::is_none) && node.link_out.is_none();
        let shared = Arc::new(Shared { node, verifier, handoffs, stopped });
        tokio::spawn(accept_loop(listener, shared, native));
        Ok(SplitListener { handoffs: receiver, local_addr })
    }
}

impl axum::serve::Listener for SplitListener {
    type Io = Handoff;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Handoff, SocketAddr) {
        match self.handoffs.recv().await {
            Some(handoff) => handoff,
            // The accept loop ended (the node is stopping): axum's graceful shutdown ends
            // its own loop.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }
}

async fn accept_loop(mut listener: weft_auth::tls::Listener, shared: Arc<Shared>, native: bool) {
    let mut stopped = shared.stopped.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.next() => match accepted {
                Some(accepted) => accepted,
                None => return,
            },
            _ = stopped.wait_for(|stop| *stop) => return,
        };
        match native {
            true => {
                tokio::spawn(connection(stream, peer, shared.clone()));
            }
            false => {
                let handoff = Handoff { read: Vec::new(), at: 0, stream };
                let _ = shared.handoffs.send((handoff, peer)).await;
            }
        }
    }
}

/// A checksummed unit GET, as parsed from its head.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UnitGet {
    path: String,
    query: String,
    pub(crate) disk: String,
    pub(crate) unit: String,
    authorization: Option<String>,
    content_sha256: Option<String>,
    range: Option<HeaderValue>,
    close: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// More bytes are needed.
    Partial,
    /// A checksummed unit GET, and the length of its head.
    UnitGet(Box<UnitGet>, usize),
    /// Anything else (axum answers it, refusals of malformed heads included).
    Other,
}

pub(crate) fn parse_head(bytes: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD_BYTES => return Head::Partial,
        _ => return Head::Other,
    };
    if request.method != Some("GET") || request.version != Some(1) {
        return Head::Other;
    }
    let target = request.path.unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let parts: Vec<&str> = path.split('/').collect();
    let ["", "v1", "disks", disk, "units", unit] = parts[..] else {
        return Head::Other;
    };
    if disk.is_empty() || unit.is_empty() || path.contains('%') {
        return Head::Other;
    }
    let mut get = UnitGet {
        path: path.to_owned(),
        query: query.to_owned(),
        disk: disk.to_owned(),
        unit: unit.to_owned(),
        authorization: None,
        content_sha256: None,
        range: None,
        close: false,
    };
    let mut checksums = false;
    for h in request.headers.iter() {
        let text = || std::str::from_utf8(h.value).ok().map(str::trim);
        let name = h.name;
        if name.eq_ignore_ascii_case(CHECKSUMS_HEADER) {
            checksums = text() == Some(CHECKSUMS_CRC32C);
        } else if name.eq_ignore_ascii_case(weft_auth::AUTHORIZATION_HEADER) {
            get.authorization = text().map(str::to_owned);
        } else if name.eq_ignore_ascii_case(weft_auth::CONTENT_HASH_HEADER) {
            get.content_sha256 = text().map(str::to_owned);
        } else if name.eq_ignore_ascii_case("range") {
            get.range = HeaderValue::from_bytes(h.value).ok();
        } else if name.eq_ignore_ascii_case("connection") {
            get.close = text().is_some_and(|v| v.eq_ignore_ascii_case("close"));
        } else if name.eq_ignore_ascii_case("content-length") {
            if text() != Some("0") {
                return Head::Other;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
        {
            return Head::Other;
        }
    }
    match checksums {
        true => Head::UnitGet(Box::new(get), head_len),
        false => Head::Other,
    }
}

/// Serves one connection: checksummed unit GETs here, until a request of another kind hands
/// the connection to axum, the peer closes, or the node stops.
async fn connection(mut stream: Stream, peer: SocketAddr, shared: Arc<Shared>) {
    let mut read = Vec::with_capacity(4096);
    let mut stopped = shared.stopped.clone();
    loop {
        let (get, head_len) = match parse_head(&read) {
            Head::UnitGet(get, len) => (get, len),
            Head::Other => {
                let handoff = Handoff { read, at: 0, stream };
                let _ = shared.handoffs.send((handoff, peer)).await;
                return;
            }
            Head::Partial => match read_more(&mut stream, &mut read, &mut stopped).await {
                true => continue,
                false => return,
            },
        };
        read.drain(..head_len);
        let close = get.close;
        // Over TLS the cipher may still hold the answer's last records when the writes
        // return (the socket was full): they go out with the flush, not with the next
        // answer, which the peer waits for this one to end before asking.
        let answered = match answer(&mut stream, &shared, *get).await {
            Ok(()) => match tokio::time::timeout(SEND_STALL, stream.flush()).await {
                Ok(flushed) => flushed,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the peer took no bytes for {} s", SEND_STALL.as_secs()),
                )),
            },
            Err(error) => Err(error),
        };
        match answered {
            Ok(()) if !close => {}
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%peer, %error, "closing a connection mid-answer");
                return;
            }
        }
    }
}

/// Reads more of a request head into `read`; false when the peer closed, the read failed, or
/// the node stopped while the connection was idle (nothing of a request read yet).
pub(crate) async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    read: &mut Vec<u8>,
    stopped: &mut watch::Receiver<bool>,
) -> bool {
    if read.capacity() - read.len() < 2048 {
        read.reserve(4096);
    }
    let got = match read.is_empty() {
        true => tokio::select! {
            got = stream.read_buf(read) => got,
            _ = stopped.wait_for(|stop| *stop) => return false,
        },
        false => stream.read_buf(read).await,
    };
    matches!(got, Ok(n) if n > 0)
}

/// A unit range ready to send: the unit open, the edges read and verified.
struct Prepared {
    reader: Arc<UnitReader>,
    status: StatusCode,
    range: ByteRange,
    whole: Option<WholeSegments>,
    /// Verified bytes `[range.start, whole.start)` and `[whole.end, range.end)`.
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// Answers one checksummed unit GET. Err: the connection must close (the answer broke off).
async fn answer(stream: &mut Stream, shared: &Shared, get: UnitGet) -> io::Result<()> {
    let node = &shared.node;
    if let Err(refusal) = verify(&shared.verifier, &get) {
        let (status, _, body) = refusal.into_parts();
        node.metrics.request("GET", ROUTE, status.as_u16());
        return write_error(stream, status, &[], &body).await;
    }
    let prepared = match prepare(node, get).await {
        Ok(prepared) => prepared,
        Err(error) => {
            let (status, headers, body) = error.into_parts();
            node.metrics.request("GET", ROUTE, status.as_u16());
            return write_error(stream, status, &headers, &body).await;
        }
    };
    node.metrics.request("GET", ROUTE, prepared.status.as_u16());
    let Prepared { reader, status, range, whole, head, tail } = prepared;
    let info = reader.info();
    let checksums = whole.as_ref().map_or(&[][..], |w| &w.checksums);
    let mut headers = HeaderMap::new();
    api::unit_headers(&mut headers, &info);
    let body_len = 4 * checksums.len() as u64 + (range.end - range.start);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body_len));
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    if status == StatusCode::PARTIAL_CONTENT {
        let content_range = format!("bytes {}-{}/{}", range.start, range.end - 1, info.len_bytes);
        headers
            .insert(header::CONTENT_RANGE, HeaderValue::from_str(&content_range).expect("ASCII"));
    }
    headers.insert(CHECKSUMS_HEADER, HeaderValue::from(checksums.len()));
    headers.insert(SEGMENT_BYTES_HEADER, HeaderValue::from(weft_store::SEGMENT_BYTES));
    if let Some(w) = whole.as_ref().filter(|w| w.start < w.end) {
        let covered = format!("{}-{}", w.start, w.end - 1);
        headers.insert(CHECKSUMMED_HEADER, HeaderValue::from_str(&covered).expect("ASCII"));
    }
    let mut out = status_line(status, &headers);
    out.reserve(4 * checksums.len() + head.len());
    for sum in checksums {
        out.extend_from_slice(&sum.to_le_bytes());
    }
    out.extend_from_slice(&head);
    stream.write_all(&out).await?;
    let whole = whole.filter(|w| w.start < w.end);
    let socket = stream.plain().map(|tcp| tcp.as_raw_fd());
    match (whole, socket) {
        (Some(w), Some(socket)) => {
            let socket = dup(socket)?;
            let (file_offset, len) = (w.file_offset, w.end - w.start);
            let keep_open = reader.clone();
            tokio::task::spawn_blocking(move || {
                let sent = send_file(&socket, w.fd, file_offset, len);
                drop(keep_open);
                sent
            })
            .await
            .map_err(io::Error::other)??;
        }
        (whole, _) if head.len() as u64 + (tail.len() as u64) < range.end - range.start => {
            // No descriptor to send from (or TLS between the file and the socket): read and
            // verify the middle here, then write it.
            let (mut at, end) = match whole {
                Some(w) => (w.start, w.end),
                None => (range.start + head.len() as u64, range.end - tail.len() as u64),
            };
            while at < end {
                let len = (end - at).min(api::CHUNK_BYTES) as usize;
                let reading = reader.clone();
                let bytes = tokio::task::spawn_blocking(move || reading.read(at, len))
                    .await
                    .map_err(io::Error::other)?
                    .map_err(io::Error::other)?;
                stream.write_all(&bytes).await?;
                at += len as u64;
            }
        }
        _ => {}
    }
    stream.write_all(&tail).await?;
    node.metrics.bytes_out(range.end - range.start);
    Ok(())
}

pub(crate) fn verify(verifier: &Verifier, get: &UnitGet) -> Result<(), ApiError> {
    let head = RequestHead {
        method: "GET",
        path: &get.path,
        query: &get.query,
        authorization: get.authorization.as_deref(),
        content_sha256: get.content_sha256.as_deref(),
    };
    verify_head(verifier, head)
}

/// Checks a bodiless request's signature as the data API's guard does (same verifier, same
/// nonce memory).
pub(crate) fn verify_head(verifier: &Verifier, head: RequestHead<'_>) -> Result<(), ApiError> {
    let refused = |error: weft_auth::AuthError| {
        let (status, code) = match error {
            weft_auth::AuthError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            _ => (StatusCode::UNAUTHORIZED, "unauthenticated"),
        };
        ApiError::new(status, code, error.to_string())
    };
    let (_, check) = verifier.verify(head, weft_auth::now_ms()).map_err(refused)?;
    if let BodyCheck::Hash(_) = check {
        weft_auth::check_body(&check, &[]).map_err(refused)?;
    }
    Ok(())
}

/// Opens the unit, answers its range and reads the edges (one blocking task).
async fn prepare(node: &Arc<Node>, get: UnitGet) -> ApiResult<Prepared> {
    let (_, disk) = api::disk_of(node, &get.disk)?;
    let key = api::key_of(&get.unit)?;
    let range_header = get.range;
    api::run_blocking(move || {
        let reader = disk.open_reader(key)?;
        let len = reader.info().len_bytes;
        let (status, range) = match &range_header {
            Some(value) => (StatusCode::PARTIAL_CONTENT, api::parse_range(value, len, key)?),
            None => (StatusCode::OK, ByteRange { start: 0, end: len }),
        };
        let whole = reader.whole_segments(range.start, range.end)?;
        let (head_end, tail_start) = match &whole {
            Some(w) => (w.start, w.end),
            None => {
                // Without a descriptor: the first chunk is read before answering (so its
                // corruption is a clean 500), the rest while answering.
                let first_end = range.end.min(range.start + api::CHUNK_BYTES);
                (first_end, range.end)
            }
        };
        let head = reader.read(range.start, (head_end - range.start) as usize)?;
        let tail = match tail_start < range.end {
            true => reader.read(tail_start, (range.end - tail_start) as usize)?,
            false => Vec::new(),
        };
        Ok(Prepared { reader: Arc::new(reader), status, range, whole, head, tail })
    })
    .await
}

/// The status line and headers of an answer, ending with the blank line.
pub(crate) fn status_line(status: StatusCode, headers: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let reason = status.canonical_reason().unwrap_or("");
    out.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", status.as_u16()).as_bytes());
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

async fn write_error(
    stream: &mut Stream,
    status: StatusCode,
    extra: &[(header::HeaderName, HeaderValue)],
    body: &[u8],
) -> io::Result<()> {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
    let mut out = status_line(status, &headers);
    out.extend_from_slice(body);
    stream.write_all(&out).await
}

/// A descriptor of the socket of its own, for a blocking task: the connection's task may be
/// dropped meanwhile, and the number must not name another file then.
fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor this process has open; it reads no memory.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// Sends `len` bytes of file `file` from `offset` to the (non-blocking) socket, waiting in
/// poll(2) while the socket is full, at most [`SEND_STALL`] without progress.
fn send_file(socket: &OwnedFd, file: RawFd, mut offset: u64, mut len: u64) -> io::Result<()> {
    while len > 0 {
        let mut off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
        let count = len.min(1 << 30) as usize;
        // SAFETY: both descriptors are open for the whole call (the socket is owned here,
        // the file by the reader the caller keeps alive); `off` is a valid off_t.
        let sent = unsafe { libc::sendfile(socket.as_raw_fd(), file, &mut off, count) };
        if sent < 0 {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    wait_writable(socket)?;
                    continue;
                }
                _ => return Err(error),
            }
        }
        if sent == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the unit file is shorter than its header says",
            ));
        }
        offset += sent as u64;
        len -= sent as u64;
    }
    Ok(())
}

fn wait_writable(socket: &OwnedFd) -> io::Result<()> {
    let mut poll = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    loop {
        // SAFETY: one valid pollfd, for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, SEND_STALL.as_millis() as libc::c_int) };
        match ready {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the peer took no bytes for {} s", SEND_STALL.as_secs()),
                ))
            }
            r if r < 0 => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, headers: &str) -> Head {
        parse_head(format!("GET {path} HTTP/1.1\r\nhost: n\r\n{headers}\r\n").as_bytes())
    }

    #[test]
    fn only_checksummed_unit_gets_are_answered_here() {
        let unit = "/v1/disks/0/units/abc";
        let Head::UnitGet(parsed, len) =
            get(unit, "x-weft-checksums: crc32c\r\nrange: bytes=0-9\r\nauthorization: a b\r\n")
        else {
            panic!("a checksummed unit GET")
        };
        assert_eq!((parsed.disk.as_str(), parsed.unit.as_str()), ("0", "abc"));
        assert_eq!(parsed.range.as_ref().map(|r| r.as_bytes()), Some(&b"bytes=0-9"[..]));
        assert_eq!(parsed.authorization.as_deref(), Some("a b"));
        assert!(len > 0 && !parsed.close);
        // Without the header, another route, a body, an upgrade, or another method: axum.
        assert_eq!(get(unit, ""), Head::Other);
        assert_eq!(get(unit, "x-weft-checksums: md5\r\n"), Head::Other);
        assert_eq!(get("/v1/disks/0/units", "x-weft-checksums: crc32c\r\n"), Head::Other);
        assert_eq!(get("/v1/disks/0/units/a/b", "x-weft-checksums: crc32c\r\n"), Head::Other);
        let body = "x-weft-checksums: crc32c\r\ncontent-length: 5\r\n";
        assert_eq!(get(unit, body), Head::Other);
        assert_eq!(get(unit, "x-weft-checksums: crc32c\r\nupgrade: h2c\r\n"), Head::Other);
        let put = b"PUT /v1/disks/0/units/abc HTTP/1.1\r\nx-weft-checksums: crc32c\r\n\r\n";
        assert_eq!(parse_head(put), Head::Other);
        // A head cut short waits for more; garbage and an endless head go to axum.
        assert_eq!(parse_head(b"GET /v1/disks/0/units/abc HTTP/1.1\r\nx-we"), Head::Partial);
        assert_eq!(parse_head(b"\x00\x01 nonsense\r\n\r\n"), Head::Other);
        let endless = format!("GET {unit} HTTP/1.1\r\nx: {}", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(parse_head(endless.as_bytes()), Head::Other);
        let Head::UnitGet(closing, _) =
            get(unit, "x-weft-checksums: crc32c\r\nconnection: close\r\n")
        else {
            panic!("a checksummed unit GET")
        };
        assert!(closing.close);
    }
}
