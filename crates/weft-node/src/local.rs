//! Local reads and local writes: a client on the node's own host asks for a unit over a Unix
//! socket and gets the unit file's descriptor (SCM_RIGHTS), then reads and verifies the
//! bytes itself, or writes them into the unit's temp file itself — no copy through this
//! process, no TCP on the loopback (the short-circuit local reads of HDFS, and their
//! mirror for writes). docs/node-api.md, "Local reads" and "Local writes".
//!
//! Data flow: the socket is `\0weft-node-<port>` in the abstract namespace, `<port>` being
//! the node's TCP port: the names of a network namespace, like its 127.0.0.1, so a client
//! that reaches the node on a loopback address finds its socket by the port alone.
//! - A read is the head of a signed `GET /v1/disks/{disk}/units/{unit}` with
//!   `x-weft-checksums: crc32c`; the answer is an HTTP/1.1 head (`x-weft-unit-length`,
//!   `x-weft-data-offset`, `x-weft-segment-bytes`, `x-weft-checksums: n`), then the n stored
//!   CRC-32C, the descriptor riding on the head's first byte.
//! - A write is the head of a signed `PUT /v1/disks/{disk}/units/{unit}` with
//!   `x-weft-local-write: <unit length>` and no body. The node creates the unit's temp file
//!   and answers 200 with `x-weft-data-offset`, `x-weft-head-bytes`, `x-weft-segment-bytes`,
//!   `x-weft-direct-align` and the temp file's descriptor. The client writes unit bytes
//!   `[head, len)` at `data offset + i` in aligned blocks, closes the descriptor, then sends
//!   `PUT <path>?finish` whose body is the first `head` unit bytes and every segment's
//!   CRC-32C (4 bytes LE each), or `PUT <path>?abort` with `x-weft-errno` when its writes
//!   failed. The node answers as the data API answers a PUT (201 and the unit's JSON).
//! - An error is the data API's error answer (status and JSON body), without a descriptor.
//!
//! Invariants:
//! - A descriptor is handed out only for a request the data API would answer: same
//!   verifier, same signed head, same disk and unit checks; a read's unit opened (its header
//!   verified) by [`weft_store::Disk::open_reader`], a write's temp file created by
//!   [`weft_store::Disk::create`]; both refuse a failed disk, a create refuses a full one.
//! - A read's descriptor is read-only and names one unit file; its checksums come from that
//!   file's verified header, so a reader holding both can verify every byte it reads.
//! - A write's descriptor names the unit's temp file only: the unit becomes visible only
//!   through [`weft_store::UnitWriter::finish_shared`] (header, fsync, rename, directory
//!   fsync), on the same connection, within [`WRITE_WINDOW`]; a connection that closes or
//!   breaks the protocol first drops the writer, which removes the temp file. The node
//!   stores the writer's checksums as given (it cannot read the bytes back without reading
//!   the device): a wrong one is found by the first read of that segment, as corruption.
//! - A node with a hardware model has no local socket (its IO must be waited out), nor does
//!   a unit without a descriptor get one (501; a filesystem injecting faults).
//! - The socket goes with the node: the listener is dropped when the node stops.
//! - An ask opens or creates its unit on the connection's task (no blocking-pool handoff);
//!   a write's finish (fsync) runs on the blocking pool.

use std::{
    io,
    os::fd::{AsRawFd, RawFd},
    sync::Arc,
};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use tokio::{
    io::{AsyncWriteExt, Interest},
    net::{UnixListener, UnixStream},
    sync::watch,
};
use weft_auth::Verifier;

use crate::{
    api::{self, ApiError, ApiResult},
    sendfile::{self, Head, UnitGet},
    Node,
};

/// The header giving where the unit's data starts in its file.
pub const DATA_OFFSET_HEADER: &str = "x-weft-data-offset";
/// The route as the request metrics name it.
const ROUTE: &str = "/v1/disks/{disk}/units/{unit} (local)";

/// The abstract socket name of the node listening on TCP `port`.
pub fn socket_name(port: u16) -> String {
    format!("weft-node-{port}")
}

/// Listens on the node's local socket until `stopped`; None (logged) when the name is taken.
pub(crate) fn start(
    node: Arc<Node>,
    verifier: Arc<Verifier>,
    port: u16,
    stopped: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let name = socket_name(port);
    let listener = match bind(&name) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%name, %error, "no local reads: cannot listen on the local socket");
            return None;
        }
    };
    Some(tokio::spawn(accept_loop(listener, node, verifier, stopped)))
}

fn bind(name: &str) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

async fn accept_loop(
    listener: UnixListener,
    node: Arc<Node>,
    verifier: Arc<Verifier>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.wait_for(|stop| *stop) => return,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, node.clone(), verifier.clone(), stopped.clone()));
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a local connection failed");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

async fn connection(
    mut stream: UnixStream,
    node: Arc<Node>,
    verifier: Arc<Verifier>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut read = Vec::with_capacity(2048);
    loop {
        let get = match sendfile::parse_head(&read) {
            Head::UnitGet(get, len) => {
                read.drain(..len);
                get
            }
            Head::Other => match parse_put(&read) {
                Some((put, len)) => {
                    read.drain(..len);
                    match write_session(&mut stream, &node, &verifier, put, &mut read, &mut stopped)
                        .await
                    {
                        Ok(()) => continue,
                        Err(error) => {
                            tracing::debug!(%error, "closing a local connection");
                            return;
                        }
                    }
                }
                None => {
                    let error = ApiError::bad_request(
                        "request",
                        "the local socket answers only signed checksummed unit GETs and local unit writes",
                    );
                    let _ = write_error(&mut stream, error).await;
                    return;
                }
            },
            Head::Partial => {
                match sendfile::read_more(&mut stream, &mut read, &mut stopped).await {
                    true => continue,
                    false => return,
                }
            }
        };
        if let Err(error) = answer(&mut stream, &node, &verifier, *get).await {
            tracing::debug!(%error, "closing a local connection");
            return;
        }
    }
}

async fn answer(
    stream: &mut UnixStream,
    node: &Arc<Node>,
    verifier: &Verifier,
    get: UnitGet,
) -> io::Result<()> {
    if let Err(refusal) = sendfile::verify(verifier, &get) {
        node.metrics.request("GET", ROUTE, refusal.status().as_u16());
        return write_error(stream, refusal).await;
    }
    let (reader, whole) = match open(node, &get) {
        Ok(opened) => opened,
        Err(error) => {
            node.metrics.request("GET", ROUTE, error.status().as_u16());
            return write_error(stream, error).await;
        }
    };
    node.metrics.request("GET", ROUTE, 200);
    let info = reader.info();
    let mut headers = HeaderMap::new();
    api::unit_headers(&mut headers, &info);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(4 * whole.checksums.len()));
    headers.insert(DATA_OFFSET_HEADER, HeaderValue::from(whole.file_offset));
    headers.insert(sendfile::CHECKSUMS_HEADER, HeaderValue::from(whole.checksums.len()));
    headers.insert(sendfile::SEGMENT_BYTES_HEADER, HeaderValue::from(weft_store::SEGMENT_BYTES));
    let mut out = sendfile::status_line(StatusCode::OK, &headers);
    for sum in &whole.checksums {
        out.extend_from_slice(&sum.to_le_bytes());
    }
    let sent = send_with_fd(stream, &out, whole.fd).await?;
    drop(reader); // the descriptor was duplicated into the peer by now
    stream.write_all(&out[sent..]).await
}

/// Opens the unit; its reader (which owns the descriptor) and all of its segments.
///
/// On the connection's own task, not the blocking pool: the open and the header's two small
/// reads hit the page cache almost always, and the pool's handoff (two thread switches) cost
/// more than they do (docs/benchmarks.md, "Fourth cut").
fn open(
    node: &Arc<Node>,
    get: &UnitGet,
) -> ApiResult<(weft_store::UnitReader, weft_store::WholeSegments)> {
    let (_, disk) = api::disk_of(node, &get.disk)?;
    let key = api::key_of(&get.unit)?;
    let reader = disk.open_reader(key)?;
    let len = reader.info().len_bytes;
    match reader.whole_segments(0, len)? {
        Some(whole) => Ok((reader, whole)),
        None => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "no_descriptor",
            format!("unit {key} has no file descriptor to hand out: read it over HTTP"),
        )),
    }
}

async fn write_error(stream: &mut UnixStream, error: ApiError) -> io::Result<()> {
    let (status, extra, body) = error.into_parts();
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    for (name, value) in extra {
        headers.insert(name, value);
    }
    let mut out = sendfile::status_line(status, &headers);
    out.extend_from_slice(&body);
    stream.write_all(&out).await
}

/// Sends a first part of `bytes` with `fd` attached (sendmsg with SCM_RIGHTS); how many
/// bytes went.
async fn send_with_fd(stream: &UnixStream, bytes: &[u8], fd: RawFd) -> io::Result<usize> {
    loop {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || sendmsg_fd(stream.as_raw_fd(), bytes, fd)) {
            Ok(sent) => return Ok(sent),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

fn sendmsg_fd(socket: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<usize> {
    let mut iov =
        libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let fd_bytes = std::mem::size_of::<RawFd>() as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)]; // aligned for cmsghdr
                                                     // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = space as _;
    // SAFETY: the control buffer holds CMSG_SPACE(sizeof fd) bytes, so the first header and
    // its data fit; CMSG_FIRSTHDR/CMSG_DATA point inside it.
    let sent = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&message);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        libc::sendmsg(socket, &message, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// The header asking for a local write, and the unit length it gives (no body follows).
pub const LOCAL_WRITE_HEADER: &str = "x-weft-local-write";
/// The answer's header giving how many of the unit's first bytes come back with the finish.
pub const HEAD_BYTES_HEADER: &str = "x-weft-head-bytes";
/// The answer's header giving the alignment of the writer's writes (offsets, lengths and
/// memory).
pub const DIRECT_ALIGN_HEADER: &str = "x-weft-direct-align";
/// The finish's header giving the errno a writer met (the unit is abandoned).
pub const ERRNO_HEADER: &str = "x-weft-errno";
/// The route of local writes as the request metrics name it.
const WRITE_ROUTE: &str = "/v1/disks/{disk}/units/{unit} (local write)";
/// Longest a local writer may take between its ask and its finish; the temp file goes then.
const WRITE_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// A signed ask to write a unit locally.
#[derive(Debug)]
struct LocalPut {
    path: String,
    disk: String,
    unit: String,
    len_bytes: u64,
    authorization: Option<String>,
    content_sha256: Option<String>,
}

/// A complete request head asking for a local write (`PUT /v1/disks/{d}/units/{u}` with
/// `x-weft-local-write: <unit length>` and no body), and the head's length.
fn parse_put(bytes: &[u8]) -> Option<(LocalPut, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return None,
    };
    if request.method != Some("PUT") || request.version != Some(1) {
        return None;
    }
    let path = request.path.unwrap_or("");
    let parts: Vec<&str> = path.split('/').collect();
    let ["", "v1", "disks", disk, "units", unit] = parts[..] else {
        return None;
    };
    if disk.is_empty() || unit.is_empty() || path.contains('%') || path.contains('?') {
        return None;
    }
    let mut put = LocalPut {
        path: path.to_owned(),
        disk: disk.to_owned(),
        unit: unit.to_owned(),
        len_bytes: u64::MAX,
        authorization: None,
        content_sha256: None,
    };
    for h in request.headers.iter() {
        let text = || std::str::from_utf8(h.value).ok().map(str::trim);
        let name = h.name;
        if name.eq_ignore_ascii_case(LOCAL_WRITE_HEADER) {
            put.len_bytes = text()?.parse().ok()?;
        } else if name.eq_ignore_ascii_case(weft_auth::AUTHORIZATION_HEADER) {
            put.authorization = text().map(str::to_owned);
        } else if name.eq_ignore_ascii_case(weft_auth::CONTENT_HASH_HEADER) {
            put.content_sha256 = text().map(str::to_owned);
        } else if name.eq_ignore_ascii_case("content-length") {
            if text() != Some("0") {
                return None;
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        }
    }
    (put.len_bytes != u64::MAX).then_some((put, head_len))
}

/// The unit's writer and what the writer in the client's process needs to fill its file.
type Opened = (weft_store::Disk, weft_store::UnitWriter, weft_store::SharedWrite);

/// Creates the unit's temp file for a writer on this host.
///
/// On the connection's task, as an ask for a read opens its unit: creating a file in `tmp/`
/// is a metadata update the kernel journals later (no fsync here).
fn create(node: &Arc<Node>, put: &LocalPut) -> ApiResult<Opened> {
    let (_, disk) = api::disk_of(node, &put.disk)?;
    let key = api::key_of(&put.unit)?;
    let writer =
        disk.create(key, put.len_bytes).map_err(|e| api::after_mutation(&disk, e.into()))?;
    match writer.shared() {
        Some(shared) => Ok((disk, writer, shared)),
        None => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "no_descriptor",
            format!("unit {key}'s file has no descriptor to hand out: write it over HTTP"),
        )),
    }
}

/// One local write: the ask (signed), the answer with the temp file's descriptor, then the
/// writer's finish (its head bytes and segment checksums) or abort (the errno it met), on
/// the same connection, answered as the data API answers a PUT. Err: the connection is done.
async fn write_session(
    stream: &mut UnixStream,
    node: &Arc<Node>,
    verifier: &Verifier,
    put: LocalPut,
    read: &mut Vec<u8>,
    stopped: &mut watch::Receiver<bool>,
) -> io::Result<()> {
    let head = weft_auth::RequestHead {
        method: "PUT",
        path: &put.path,
        query: "",
        authorization: put.authorization.as_deref(),
        content_sha256: put.content_sha256.as_deref(),
    };
    let opened = sendfile::verify_head(verifier, head).and_then(|()| create(node, &put));
    let (disk, writer, shared) = match opened {
        Ok(opened) => opened,
        Err(error) => {
            node.metrics.request("PUT", WRITE_ROUTE, error.status().as_u16());
            return write_error(stream, error).await;
        }
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
    headers.insert(DATA_OFFSET_HEADER, HeaderValue::from(shared.data_offset));
    headers.insert(HEAD_BYTES_HEADER, HeaderValue::from(shared.head_bytes));
    headers.insert(DIRECT_ALIGN_HEADER, HeaderValue::from(weft_store::DIRECT_ALIGN));
    headers.insert(sendfile::SEGMENT_BYTES_HEADER, HeaderValue::from(weft_store::SEGMENT_BYTES));
    let out = sendfile::status_line(StatusCode::OK, &headers);
    let sent = send_with_fd(stream, &out, shared.fd).await?;
    stream.write_all(&out[sent..]).await?;
    // The writer's finish: `PUT <path>?finish` with the head bytes and the checksums as its
    // body, or `PUT <path>?abort` with the errno met. Dropping `writer` removes the temp file.
    let count = weft_store::format::segment_count(shared.len_bytes);
    let body_max = shared.head_bytes + 4 * count;
    let finish = tokio::time::timeout(WRITE_WINDOW, read_finish(stream, read, stopped, body_max))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no finish in the write window"))??;
    let result = match finish {
        Finish::Abort(errno) => Err(api::after_mutation(
            &disk,
            writer.fail_shared(io::Error::from_raw_os_error(errno)).into(),
        )),
        Finish::Done(body) => {
            let head_len = shared.head_bytes as usize;
            let sums: Vec<u32> = match body.len() == head_len + 4 * count as usize {
                true => body[head_len..]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
                false => Vec::new(), // refused by finish_shared, which names the lengths
            };
            let finishing = disk.clone();
            api::run_blocking(move || {
                Ok(writer.finish_shared(&body[..head_len.min(body.len())], sums)?)
            })
            .await
            .map_err(|error| api::after_mutation(&finishing, error))
        }
    };
    match result {
        Ok(info) => {
            node.metrics.request("PUT", WRITE_ROUTE, 201);
            node.metrics.bytes_in(info.len_bytes);
            let body = serde_json::to_vec(&api::info_json(&info)).map_err(io::Error::other)?;
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            headers.insert(api::GENERATION_HEADER, HeaderValue::from(info.generation));
            let mut out = sendfile::status_line(StatusCode::CREATED, &headers);
            out.extend_from_slice(&body);
            stream.write_all(&out).await
        }
        Err(error) => {
            node.metrics.request("PUT", WRITE_ROUTE, error.status().as_u16());
            write_error(stream, error).await
        }
    }
}

/// What a local writer said once its writes were done.
enum Finish {
    /// The head bytes and the segment checksums.
    Done(Vec<u8>),
    /// The errno its writes met.
    Abort(i32),
}

/// Reads the writer's finish or abort (a body of at most `body_max` bytes).
async fn read_finish(
    stream: &mut UnixStream,
    read: &mut Vec<u8>,
    stopped: &mut watch::Receiver<bool>,
    body_max: u64,
) -> io::Result<Finish> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("local write: {why}"));
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(read) {
            Ok(httparse::Status::Complete(head_len)) => {
                let target = request.path.unwrap_or("");
                let finish = target.ends_with("?finish");
                if request.method != Some("PUT") || !(finish || target.ends_with("?abort")) {
                    return Err(bad("expected the writer's finish or abort"));
                }
                let value = |name: &str| {
                    let found = request.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name));
                    found
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<u64>().ok())
                };
                if !finish {
                    let errno = value(ERRNO_HEADER).and_then(|e| i32::try_from(e).ok());
                    read.drain(..head_len);
                    return Ok(Finish::Abort(errno.ok_or_else(|| bad("an abort names no errno"))?));
                }
                let body_len = value("content-length").ok_or_else(|| bad("no content-length"))?;
                if body_len > body_max {
                    return Err(bad("the finish is longer than the unit's head and checksums"));
                }
                let end = head_len + body_len as usize;
                while read.len() < end {
                    if !sendfile::read_more(stream, read, stopped).await {
                        return Err(bad("the finish broke off"));
                    }
                }
                let body = read[head_len..end].to_vec();
                read.drain(..end);
                return Ok(Finish::Done(body));
            }
            Ok(httparse::Status::Partial) if read.len() < 8192 => {
                if !sendfile::read_more(stream, read, stopped).await {
                    return Err(bad("the writer went away"));
                }
            }
            _ => return Err(bad("not a finish")),
        }
    }
}
