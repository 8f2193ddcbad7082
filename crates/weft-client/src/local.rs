//! Local reads: a unit on a node of this host is read from the unit file itself, through a
//! descriptor the node hands over its local socket with the file's stored segment checksums
//! (docs/node-api.md, "Local reads"; HDFS's short-circuit local reads). The bytes are
//! copied once, from the page cache into the read's buffer, and verified here.
//!
//! Invariants:
//! - Only nodes reached on a loopback address are asked (their socket is
//!   `\0weft-node-<port>` in the abstract namespace of the same network namespace).
//! - Every byte returned lies in a segment whose stored CRC-32C was verified by this read.
//! - A local read never decides a failure: anything that goes wrong (no socket, a refusal,
//!   an IO error, a checksum mismatch) answers None, and the caller reads over HTTP, where
//!   the node names the failure (404, 500 corrupt, 503). A node whose socket cannot be
//!   reached is not asked again for [`RETRY_AFTER`].
//! - Connections are kept for reuse, at most [`IDLE_PER_NODE`] per node.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, Write},
    mem::MaybeUninit,
    os::{
        fd::{FromRawFd, RawFd},
        unix::{fs::FileExt, net::UnixStream},
    },
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use weft_auth::Signer;

/// How long a node whose local socket could not be reached is read over HTTP only.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Idle connections kept per node.
const IDLE_PER_NODE: usize = 8;
/// Longest answer head and checksum table accepted (a unit of 4 GiB has 64 Ki segments).
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// Longest a node may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The local-read side of a client: which nodes have no local socket, and idle connections.
#[derive(Debug, Default)]
pub(crate) struct LocalReads {
    unreachable: Mutex<HashMap<u16, Instant>>,
    idle: Mutex<HashMap<u16, Vec<UnixStream>>>,
    /// Ranges read locally, and ranges a node on this host answered but that were then
    /// read over HTTP (a refusal, an IO error or a checksum mismatch).
    pub(crate) hits: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
}

/// The TCP port of `endpoint` when its host is a loopback address.
pub(crate) fn loopback_port(endpoint: &str) -> Option<u16> {
    let rest = endpoint.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback =
        host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match loopback {
        true => port.parse().ok(),
        false => None,
    }
}

/// The grants one read holds (several windows read the same units): each unit's file is
/// asked for once per read, not once per window. Kept at most [`GRANTS_PER_READ`]; they are
/// closed when the read ends, so a read sees its units as one open reader would.
#[derive(Debug, Default)]
pub struct Grants(Mutex<HashMap<(u16, String), Arc<Grant>>>);

/// Most unit files one read keeps open.
const GRANTS_PER_READ: usize = 64;

impl Grants {
    fn get(&self, port: u16, path: &str) -> Option<Arc<Grant>> {
        let grants = self.0.lock().unwrap_or_else(|p| p.into_inner());
        grants.get(&(port, path.to_owned())).cloned()
    }

    fn put(&self, port: u16, path: &str, grant: Arc<Grant>) {
        let mut grants = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if grants.len() >= GRANTS_PER_READ {
            grants.clear();
        }
        grants.insert((port, path.to_owned()), grant);
    }

    fn forget(&self, port: u16, path: &str) {
        let mut grants = self.0.lock().unwrap_or_else(|p| p.into_inner());
        grants.remove(&(port, path.to_owned()));
    }
}

/// What the node answered: the unit file, where its data starts, its length and the
/// checksum of each segment.
#[derive(Debug)]
struct Grant {
    file: File,
    data_offset: u64,
    unit_len: u64,
    segment: u64,
    sums: Vec<u32>,
}

impl LocalReads {
    /// Bytes `[offset, offset + len)` of the unit at `path` (`/v1/disks/{d}/units/{u}`) on
    /// the node listening on loopback `port`, verified; None when it cannot be read locally.
    /// Blocking: call it on a blocking thread.
    pub(crate) fn read(
        &self,
        port: u16,
        path: &str,
        signer: &Signer,
        offset: u64,
        len: u64,
        grants: Option<&Grants>,
    ) -> Option<Vec<u8>> {
        let read = self.read_counted(port, path, signer, offset, len, grants);
        let counter = if read.is_some() { &self.hits } else { &self.fallbacks };
        counter.fetch_add(1, Ordering::Relaxed);
        read
    }

    fn read_counted(
        &self,
        port: u16,
        path: &str,
        signer: &Signer,
        offset: u64,
        len: u64,
        grants: Option<&Grants>,
    ) -> Option<Vec<u8>> {
        let grant = match grants.and_then(|g| g.get(port, path)) {
            Some(grant) => grant,
            None => {
                if self.skipped(port) {
                    return None;
                }
                let mut stream = self.connection(port)?;
                let (grant, reusable) = ask_on(&mut stream, path, signer);
                if reusable {
                    self.put_back(port, stream);
                }
                let grant = Arc::new(grant?);
                if let Some(grants) = grants {
                    grants.put(port, path, grant.clone());
                }
                grant
            }
        };
        match read_verified(&grant, offset, len) {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                tracing::debug!(path, %error, "local read failed; reading over HTTP");
                if let Some(grants) = grants {
                    grants.forget(port, path);
                }
                None
            }
        }
    }

    fn skipped(&self, port: u16) -> bool {
        let mut unreachable = self.unreachable.lock().unwrap_or_else(|p| p.into_inner());
        match unreachable.get(&port) {
            Some(since) if since.elapsed() < RETRY_AFTER => true,
            Some(_) => {
                unreachable.remove(&port);
                false
            }
            None => false,
        }
    }

    fn connection(&self, port: u16) -> Option<UnixStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(stream) = idle.get_mut(&port).and_then(Vec::pop) {
            return Some(stream);
        }
        drop(idle);
        match connect(port) {
            Ok(stream) => Some(stream),
            Err(_) => {
                let mut unreachable = self.unreachable.lock().unwrap_or_else(|p| p.into_inner());
                unreachable.insert(port, Instant::now());
                None
            }
        }
    }

    fn put_back(&self, port: u16, stream: UnixStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let streams = idle.entry(port).or_default();
        if streams.len() < IDLE_PER_NODE {
            streams.push(stream);
        }
    }
}

/// One ask on `stream`: the grant (None: read over HTTP), and whether the connection can
/// serve another ask.
fn ask_on(stream: &mut UnixStream, path: &str, signer: &Signer) -> (Option<Grant>, bool) {
    match ask(stream, path, signer) {
        Ok(grant) => (grant, true),
        Err(error) => {
            tracing::debug!(path, %error, "local read failed; reading over HTTP");
            (None, false)
        }
    }
}

fn connect(port: u16) -> io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("weft-node-{port}");
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let stream = UnixStream::connect_addr(&address)?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    stream.set_write_timeout(Some(ANSWER_TIMEOUT))?;
    Ok(stream)
}

/// Asks for the unit's descriptor. Ok(None): the node refused (the HTTP read will say why).
fn ask(stream: &mut UnixStream, path: &str, signer: &Signer) -> io::Result<Option<Grant>> {
    let unsigned = weft_auth::UNSIGNED_PAYLOAD;
    let authorization = signer.authorization("GET", path, "", unsigned);
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: local\r\nx-weft-checksums: crc32c\r\n\
         {}: {authorization}\r\n{}: {unsigned}\r\n\r\n",
        weft_auth::AUTHORIZATION_HEADER,
        weft_auth::CONTENT_HASH_HEADER,
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::with_capacity(4096);
    let mut fds = Vec::new();
    let (status, head_len, headers) = loop {
        let read = recv_with_fds(stream, &mut answer, &mut fds)?;
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the node closed"));
        }
        let mut slots = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut slots);
        match response.parse(&answer) {
            Ok(httparse::Status::Complete(head_len)) => {
                let headers: HashMap<String, String> = response
                    .headers
                    .iter()
                    .filter_map(|h| {
                        let value = std::str::from_utf8(h.value).ok()?;
                        Some((h.name.to_ascii_lowercase(), value.trim().to_owned()))
                    })
                    .collect();
                break (response.code.unwrap_or(0), head_len, headers);
            }
            Ok(httparse::Status::Partial) if answer.len() < MAX_ANSWER_BYTES => continue,
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "not an answer")),
        }
    };
    let number = |name: &str| headers.get(name).and_then(|v| v.parse::<u64>().ok());
    let body_len = number("content-length").unwrap_or(0) as usize;
    if body_len > MAX_ANSWER_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the answer is too long"));
    }
    while answer.len() < head_len + body_len {
        let read = recv_with_fds(stream, &mut answer, &mut fds)?;
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the answer broke off"));
        }
    }
    if answer.len() != head_len + body_len {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes past the answer"));
    }
    // SAFETY: each received descriptor is new to this process and owned by nobody else.
    let mut files: Vec<File> = fds.into_iter().map(|fd| unsafe { File::from_raw_fd(fd) }).collect();
    if status != 200 {
        return Ok(None);
    }
    let (Some(file), true) = (files.pop(), files.is_empty()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not exactly one descriptor"));
    };
    let fields = (
        number("x-weft-data-offset"),
        number("x-weft-unit-length"),
        number("x-weft-segment-bytes").filter(|&s| s > 0),
        number("x-weft-checksums"),
    );
    let (Some(data_offset), Some(unit_len), Some(segment), Some(count)) = fields else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a header is missing"));
    };
    if count != unit_len.div_ceil(segment) || body_len as u64 != 4 * count {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "checksums do not fit the unit"));
    }
    let sums = answer[head_len..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok(Some(Grant { file, data_offset, unit_len, segment, sums }))
}

/// Reads into `answer`'s spare room (growing it), collecting any descriptors that arrive.
fn recv_with_fds(
    stream: &UnixStream,
    answer: &mut Vec<u8>,
    fds: &mut Vec<RawFd>,
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    answer.reserve(4096);
    let spare = answer.spare_capacity_mut();
    let mut iov = libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: spare.len() };
    let mut control = [0u64; 16]; // room for a few descriptors, aligned for cmsghdr
                                  // SAFETY: msghdr is plain data; its pointers point at `iov` and `control`, which outlive
                                  // the call; recvmsg writes at most iov_len bytes into the spare capacity.
    let read = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        let read = libc::recvmsg(stream.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC);
        if read >= 0 {
            let mut cmsg = libc::CMSG_FIRSTHDR(&message);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        let at = data.add(i * std::mem::size_of::<RawFd>()).cast::<RawFd>();
                        fds.push(std::ptr::read_unaligned(at));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&message, cmsg);
            }
        }
        read
    };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: recvmsg initialized `read` bytes of the spare capacity.
    unsafe { answer.set_len(answer.len() + read as usize) };
    Ok(read as usize)
}

/// Reads `[offset, offset + len)` of the granted unit, verifying every segment it touches.
fn read_verified(grant: &Grant, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let end = offset.checked_add(len).filter(|&end| end <= grant.unit_len);
    let Some(end) = end else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the range is past the unit"));
    };
    let mut out: Vec<u8> = Vec::with_capacity(len as usize);
    let mut scratch = Vec::new();
    let segment = grant.segment;
    let mut at = offset;
    while at < end {
        let index = at / segment;
        let (start, stop) = (index * segment, ((index + 1) * segment).min(grant.unit_len));
        let file_at = grant.data_offset + start;
        let verified = if at == start && stop <= end {
            // A whole segment: read straight into the output.
            let spare = &mut out.spare_capacity_mut()[..(stop - start) as usize];
            read_exact_uninit(&grant.file, spare, file_at)?;
            // SAFETY: read_exact_uninit returned Ok: every byte of `spare` is written.
            let filled = unsafe { &*(spare as *const [MaybeUninit<u8>] as *const [u8]) };
            let good = crc32c::crc32c(filled) == grant.sums[index as usize];
            if good {
                // SAFETY: the bytes were just written and checked.
                unsafe { out.set_len(out.len() + (stop - start) as usize) };
            }
            good
        } else {
            scratch.resize((stop - start) as usize, 0);
            grant.file.read_exact_at(&mut scratch, file_at)?;
            let good = crc32c::crc32c(&scratch) == grant.sums[index as usize];
            if good {
                out.extend_from_slice(
                    &scratch[(at - start) as usize..(stop.min(end) - start) as usize],
                );
            }
            good
        };
        if !verified {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("segment {index} does not match its checksum"),
            ));
        }
        at = stop.min(end);
    }
    Ok(out)
}

/// pread(2) until `buf` is full.
fn read_exact_uninit(
    file: &File,
    mut buf: &mut [MaybeUninit<u8>],
    mut offset: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for writes of its length; pread only writes into it.
        let read = unsafe {
            libc::pread(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t)
        };
        if read < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the unit file is shorter"));
        }
        buf = &mut buf[read as usize..];
        offset += read as u64;
    }
    Ok(())
}
