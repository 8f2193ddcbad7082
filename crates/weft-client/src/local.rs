//! Local reads and writes: a unit on a node of this host is read from, or written into,
//! the unit file itself, through a descriptor the node hands over its local socket
//! (docs/node-api.md, "Local reads" and "Local writes"; HDFS's short-circuit local reads).
//! A read copies the bytes once, from the page cache into the read's buffer, and verifies
//! them here (and hashes a whole unit for its end-to-end digest as it goes); the buffer is
//! handed out as [`crate::file_bytes`], which remembers its place in the unit file, so the
//! S3 gateway can send it from the page cache with sendfile. A write computes each segment's
//! CRC-32C and writes the bytes to the file in whole aligned blocks (O_DIRECT when the node's
//! file is): from where they lie when the piece's memory has the file offsets' phase (the
//! writer learns it from the grants, [`LocalIo::write_phase`], and reads its cells so), else
//! copied once into an aligned stage.
//!
//! Invariants:
//! - Only nodes reached on a loopback address are asked (their socket is
//!   `\0weft-node-<port>` in the abstract namespace of the same network namespace).
//! - Every byte a read returns lies in a segment whose stored CRC-32C was verified by it;
//!   a whole-unit digest it answers was computed over exactly the bytes it returns.
//! - A local read never decides a failure: anything that goes wrong (no socket, a refusal,
//!   an IO error, a checksum mismatch) answers None, and the caller reads over HTTP, where
//!   the node names the failure (404, 500 corrupt, 503). A node whose socket cannot be
//!   reached is not asked again for [`RETRY_AFTER`].
//! - A local write is decided by its ask: a refusal or no socket writes the unit over HTTP
//!   (where the node names a refusal the same way); once granted, the unit is written here
//!   or not at all. The checksums sent with the finish are those of the bytes written, the
//!   descriptor is closed before the finish is sent, and a write error is reported to the
//!   node (its errno), which judges the disk as if it had met the error itself.
//! - Every write into a unit file covers whole aligned blocks from aligned memory, and the
//!   writes of a unit cover its bytes past the head exactly once, in file order: a piece's
//!   bytes before its first aligned block go with the stage written just ahead of its
//!   blocks (one vectored write), the bytes after its last whole block start the next stage.
//!   A piece written where it lies is kept alive (its `Bytes`) until its write returned.
//! - Connections are kept for reuse, at most [`IDLE_PER_NODE`] per node.
//! - A client keeping grants across reads ([`LocalIo::keeping_grants`], the S3 gateway)
//!   reads a unit it read within [`KEPT_FOR`] without asking its node, and never once the
//!   node closed its watch connection (stopped, died); see [`KeptGrants`].

use std::{
    collections::{HashMap, VecDeque},
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

use bytes::Bytes;
use weft_auth::Signer;
use weft_wire::UnitDigest;

use crate::digest::Digester;

/// How long a node whose local socket could not be reached is read over HTTP only.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Idle connections kept per node.
const IDLE_PER_NODE: usize = 8;
/// Longest answer head and checksum table accepted (a unit of 4 GiB has 64 Ki segments).
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// Longest a node may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The local side of a client: whether it reads and writes locally, which nodes have no
/// local socket, and idle connections.
#[derive(Debug, Default)]
pub(crate) struct LocalIo {
    /// Local reads and local writes are on (`WEFT_LOCAL_READS`, `WEFT_LOCAL_WRITES`).
    pub(crate) reads: bool,
    pub(crate) writes: bool,
    unreachable: Mutex<HashMap<u16, Instant>>,
    idle: Mutex<HashMap<u16, Vec<UnixStream>>>,
    /// Ranges read locally, and ranges a node on this host answered but that were then
    /// read over HTTP (a refusal, an IO error or a checksum mismatch).
    pub(crate) hits: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    /// Units written locally, and units a node on this host refused to write locally (then
    /// written over HTTP).
    pub(crate) write_hits: AtomicU64,
    pub(crate) write_fallbacks: AtomicU64,
    /// Bytes of finished local writes written from where the writer held them, uncopied.
    pub(crate) direct_bytes: AtomicU64,
    /// Grants kept across reads (a long-lived reader, the S3 gateway); None: each read asks.
    kept: Option<Arc<Mutex<KeptGrants>>>,
    /// Where unit byte 0 of a unit of each length fell in its file's [`PHASE_ALIGN`] blocks
    /// (the node's data offset modulo the alignment), as the node's last grant said: the
    /// phase a writer gives the memory of that unit's cells ([`LocalIo::write_phase`]).
    phases: Mutex<HashMap<u64, usize>>,
}

/// The TCP port of `endpoint` when its host is a loopback address.
pub(crate) fn loopback_port(endpoint: &str) -> Option<u16> {
    // TLS or not: the Unix socket of a loopback node crosses no link (docs/node-api.md).
    let rest = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://"))?;
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

/// Most grants a client keeps across reads (each an open unit file).
const KEPT_GRANTS: usize = 8192;
/// How long a grant is kept: it is used for reads within this time of its ask, and closed
/// after it (read or not).
const KEPT_FOR: Duration = Duration::from_secs(10);

/// Grants kept across reads by a long-lived client (the S3 gateway), as nginx's
/// open_file_cache and HDFS's short-circuit cache keep descriptors: a read of a unit whose
/// grant is kept reads and verifies it without asking its node (no round trip, no open, no
/// node process woken). Units are immutable (a key names one file for good), so a kept
/// descriptor reads what an ask would, and every read verifies it against the unit's
/// checksums as always.
///
/// - At most `capacity` ([`KEPT_GRANTS`], fewer when the process may open few files), the
///   oldest dropped first, and none longer than [`KEPT_FOR`]: every grant is closed within
///   that time of its ask (a sweeper thread drops the expired ones even when no read comes),
///   so a deleted unit's space is freed, and a disk its node stopped serving is left, within
///   [`KEPT_FOR`].
/// - A node's grants are kept only while an idle connection to its local socket stays open
///   (its watch): the node closes it when it stops or dies, and the next read finds that
///   with one poll(2) and drops every grant of that node, so a stopped node's units are not
///   read.
/// - A read that fails on a kept grant drops it (the read then goes over HTTP, as any
///   failed local read).
/// - Dropped grants are closed after the lock is released ([`KeptGrants::dropped`]): the
///   last close of a deleted unit's file frees its blocks, which must not hold up the reads
///   waiting for the lock.
#[derive(Debug, Default)]
struct KeptGrants {
    grants: HashMap<(u16, String), (Arc<Grant>, Instant)>,
    /// Keys in the order they were kept, with when: the oldest is dropped first.
    order: VecDeque<((u16, String), Instant)>,
    /// An idle connection to each node with kept grants.
    watches: HashMap<u16, UnixStream>,
    /// Most grants kept.
    capacity: usize,
    /// Grants dropped under the lock, to be closed once it is released.
    dropped: Vec<Arc<Grant>>,
}

impl KeptGrants {
    fn get(&mut self, port: u16, path: &str) -> Option<Arc<Grant>> {
        let key = (port, path.to_owned());
        let (grant, since) = self.grants.get(&key)?;
        if since.elapsed() >= KEPT_FOR {
            self.forget(port, path);
            return None;
        }
        let grant = grant.clone();
        if !self.watches.get(&port).is_some_and(still_open) {
            self.drop_node(port);
            return None;
        }
        Some(grant)
    }

    /// Keeps `grant` (with a watch on its node, opened now if there is none).
    fn keep(&mut self, port: u16, path: &str, grant: Arc<Grant>) {
        if self.capacity == 0 {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(watch) = self.watches.entry(port) {
            match connect(port) {
                Ok(stream) => watch.insert(stream),
                Err(_) => return,
            };
        }
        let (key, now) = ((port, path.to_owned()), Instant::now());
        if let Some((old, _)) = self.grants.insert(key.clone(), (grant, now)) {
            self.dropped.push(old);
        }
        self.order.push_back((key, now));
        self.expire(now);
    }

    /// Drops the grants kept [`KEPT_FOR`] or longer, and the oldest past the capacity.
    fn expire(&mut self, now: Instant) {
        while let Some((key, when)) = self.order.front() {
            let over = self.grants.len() > self.capacity || self.order.len() > 2 * self.capacity;
            if !over && now.saturating_duration_since(*when) < KEPT_FOR {
                break;
            }
            if self.grants.get(key).is_some_and(|(_, kept)| kept == when) {
                let (grant, _) = self.grants.remove(key).expect("just found");
                self.dropped.push(grant);
            }
            self.order.pop_front();
        }
    }

    fn forget(&mut self, port: u16, path: &str) {
        if let Some((grant, _)) = self.grants.remove(&(port, path.to_owned())) {
            self.dropped.push(grant);
        }
    }

    fn drop_node(&mut self, port: u16) {
        let ports = self.grants.extract_if(|(p, _), _| *p == port);
        let gone: Vec<Arc<Grant>> = ports.map(|(_, (grant, _))| grant).collect();
        self.dropped.extend(gone);
        self.watches.remove(&port);
    }
}

/// Runs `f` on the kept grants under their lock, then closes what it dropped, unlocked.
fn with_kept<T>(kept: &Mutex<KeptGrants>, f: impl FnOnce(&mut KeptGrants) -> T) -> T {
    let mut guard = kept.lock().unwrap_or_else(|p| p.into_inner());
    let answer = f(&mut guard);
    let dropped = std::mem::take(&mut guard.dropped);
    drop(guard);
    drop(dropped);
    answer
}

/// Drops expired grants every [`KEPT_FOR`] / 4 while the client lives.
fn sweep_kept(kept: std::sync::Weak<Mutex<KeptGrants>>) {
    loop {
        std::thread::sleep(KEPT_FOR / 4);
        let Some(kept) = kept.upgrade() else { return };
        with_kept(&kept, |kept| kept.expire(Instant::now()));
    }
}

/// Whether the idle connection `stream` is still open: nothing to read, no hang-up (a node
/// sends nothing unasked, so anything readable is its close).
fn still_open(stream: &UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    let events = libc::POLLIN | libc::POLLRDHUP;
    let mut poll = libc::pollfd { fd: stream.as_raw_fd(), events, revents: 0 };
    // SAFETY: one valid pollfd, and a zero timeout: poll only reads and writes it.
    unsafe { libc::poll(&mut poll, 1, 0) == 0 }
}

/// What the node answered: the unit file, where its data starts, its length and the
/// checksum of each segment.
#[derive(Debug)]
struct Grant {
    file: Arc<File>,
    data_offset: u64,
    unit_len: u64,
    segment: u64,
    sums: Vec<u32>,
}

impl LocalIo {
    /// Bytes `[offset, offset + len)` of the unit at `path` (`/v1/disks/{d}/units/{u}`) on
    /// the node listening on loopback `port`, verified; None when it cannot be read locally.
    /// The bytes remember their place in the unit file ([`crate::file_bytes`]). With
    /// `digest`, a read of the whole unit also answers its end-to-end digest, computed
    /// segment by segment as each is verified (while its bytes are in the cache).
    /// Blocking: call it on a blocking thread.
    pub(crate) fn read(
        &self,
        port: u16,
        path: &str,
        signer: &Signer,
        range: (u64, u64),
        grants: Option<&Grants>,
        digester: Option<Digester>,
    ) -> Option<(Bytes, Option<UnitDigest>)> {
        let read = self.read_counted(port, path, signer, range, grants, digester);
        let counter = if read.is_some() { &self.hits } else { &self.fallbacks };
        counter.fetch_add(1, Ordering::Relaxed);
        read
    }

    fn read_counted(
        &self,
        port: u16,
        path: &str,
        signer: &Signer,
        (offset, len): (u64, u64),
        grants: Option<&Grants>,
        digester: Option<Digester>,
    ) -> Option<(Bytes, Option<UnitDigest>)> {
        let kept = self.kept.as_deref();
        let grant = match grants.and_then(|g| g.get(port, path)) {
            Some(grant) => grant,
            None => {
                let grant = kept
                    .and_then(|k| with_kept(k, |k| k.get(port, path)))
                    .or_else(|| self.asked_grant(port, path, signer))?;
                if let Some(grants) = grants {
                    grants.put(port, path, grant.clone());
                }
                grant
            }
        };
        match read_verified(&grant, offset, len, digester) {
            Ok((bytes, found)) => {
                let file_at = grant.data_offset + offset;
                Some((crate::file_bytes::file_backed(bytes, grant.file.clone(), file_at), found))
            }
            Err(error) => {
                tracing::debug!(path, %error, "local read failed; reading over HTTP");
                if let Some(grants) = grants {
                    grants.forget(port, path);
                }
                if let Some(kept) = kept {
                    with_kept(kept, |k| k.forget(port, path));
                }
                None
            }
        }
    }

    /// The node's grant for the unit at `path`, asked for now (and kept, when this client
    /// keeps grants); None: read it over HTTP.
    fn asked_grant(&self, port: u16, path: &str, signer: &Signer) -> Option<Arc<Grant>> {
        if self.skipped(port) {
            return None;
        }
        let mut stream = self.connection(port)?;
        let (grant, reusable) = ask_on(&mut stream, path, signer);
        if reusable {
            self.put_back(port, stream);
        }
        let grant = Arc::new(grant?);
        if let Some(kept) = &self.kept {
            with_kept(kept, |k| k.keep(port, path, grant.clone()));
        }
        Some(grant)
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
    let granted = signed_ask(stream, signer, "GET", path, "x-weft-checksums: crc32c")?;
    let Some((file, answer)) = granted else { return Ok(None) };
    let fields = (
        answer.number("x-weft-data-offset"),
        answer.number("x-weft-unit-length"),
        answer.number("x-weft-segment-bytes").filter(|&s| s > 0),
        answer.number("x-weft-checksums"),
    );
    let (Some(data_offset), Some(unit_len), Some(segment), Some(count)) = fields else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a header is missing"));
    };
    if count != unit_len.div_ceil(segment) || answer.body.len() as u64 != 4 * count {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "checksums do not fit the unit"));
    }
    let sums = answer
        .body
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    Ok(Some(Grant { file: Arc::new(file), data_offset, unit_len, segment, sums }))
}

/// Sends the signed, bodiless head `method path` with the header line `extra`, and reads
/// the answer: the descriptor it grants with the answer, or Ok(None) when the node refused.
fn signed_ask(
    stream: &mut UnixStream,
    signer: &Signer,
    method: &str,
    path: &str,
    extra: &str,
) -> io::Result<Option<(File, Answer)>> {
    let unsigned = weft_auth::UNSIGNED_PAYLOAD;
    let authorization = signer.authorization(method, path, "", unsigned);
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: local\r\n{extra}\r\n\
         {}: {authorization}\r\n{}: {unsigned}\r\n\r\n",
        weft_auth::AUTHORIZATION_HEADER,
        weft_auth::CONTENT_HASH_HEADER,
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = read_answer(stream)?;
    if answer.status != 200 {
        return Ok(None);
    }
    let file = answer.one_file()?;
    Ok(Some((file, answer)))
}

/// A node's answer on its local socket: an HTTP/1.1 head, a body of its Content-Length, and
/// the descriptors that came with it.
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    files: Vec<File>,
}

impl Answer {
    fn number(&self, name: &str) -> Option<u64> {
        self.headers.get(name).and_then(|v| v.parse::<u64>().ok())
    }

    /// The one descriptor of a granting answer.
    fn one_file(&mut self) -> io::Result<File> {
        match (self.files.pop(), self.files.is_empty()) {
            (Some(file), true) => Ok(file),
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, "not exactly one descriptor")),
        }
    }
}

/// Reads one answer (at most [`MAX_ANSWER_BYTES`] of head and body).
fn read_answer(stream: &mut UnixStream) -> io::Result<Answer> {
    let mut answer = Vec::with_capacity(4096);
    let mut fds = Vec::new();
    let taken = |fds: Vec<RawFd>| -> Vec<File> {
        // SAFETY: each received descriptor is new to this process and owned by nobody else.
        fds.into_iter().map(|fd| unsafe { File::from_raw_fd(fd) }).collect()
    };
    let (status, head_len, headers) = loop {
        let read = recv_with_fds(stream, &mut answer, &mut fds);
        let read = match read {
            Ok(read) => read,
            Err(error) => {
                drop(taken(fds));
                return Err(error);
            }
        };
        if read == 0 {
            drop(taken(fds));
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
            _ => {
                drop(taken(fds));
                return Err(io::Error::new(io::ErrorKind::InvalidData, "not an answer"));
            }
        }
    };
    let files = taken(fds);
    let body_len = headers.get("content-length").and_then(|v| v.parse::<usize>().ok());
    let body_len = body_len.unwrap_or(0);
    if body_len > MAX_ANSWER_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the answer is too long"));
    }
    let mut extra = Vec::new();
    while answer.len() < head_len + body_len {
        let read = recv_with_fds(stream, &mut answer, &mut extra)?;
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the answer broke off"));
        }
    }
    let mut files = files;
    files.extend(taken(extra));
    if answer.len() != head_len + body_len {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes past the answer"));
    }
    answer.drain(..head_len);
    Ok(Answer { status, headers, body: answer, files })
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
/// Bytes `[offset, offset + len)` of the granted unit, each segment checked against its
/// CRC-32C; with a `digester` and the whole unit asked for, also the unit's digest, fed
/// each segment right after its check.
fn read_verified(
    grant: &Grant,
    offset: u64,
    len: u64,
    digester: Option<Digester>,
) -> io::Result<(Vec<u8>, Option<UnitDigest>)> {
    let end = offset.checked_add(len).filter(|&end| end <= grant.unit_len);
    let Some(end) = end else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the range is past the unit"));
    };
    let mut out: Vec<u8> = Vec::with_capacity(len as usize);
    let mut scratch = Vec::new();
    // The digester, and how many of `out`'s bytes it has hashed.
    let mut digester =
        digester.filter(|_| offset == 0 && len == grant.unit_len).map(|d| (d, 0usize));
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
            let good = weft_wire::checksum::crc32c(filled) == grant.sums[index as usize];
            if good {
                // SAFETY: the bytes were just written and checked.
                unsafe { out.set_len(out.len() + (stop - start) as usize) };
                if let Some((digester, hashed)) = &mut digester {
                    // In place, while the segment is in the cache.
                    *hashed += digester.absorb_batches(&out[*hashed..]);
                }
            }
            good
        } else {
            scratch.resize((stop - start) as usize, 0);
            grant.file.read_exact_at(&mut scratch, file_at)?;
            let good = weft_wire::checksum::crc32c(&scratch) == grant.sums[index as usize];
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
    // A whole unit is read in whole segments only (the first starts at 0, the last ends
    // at the unit's end), so the digester saw every byte but the last ones it holds back.
    let found = digester.map(|(digester, hashed)| digester.finish_with(&out[hashed..]));
    Ok((out, found))
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

/// Bytes a local write stages before writing them to the unit file (one pwrite).
const WRITE_STAGE_BYTES: usize = 1 << 20;
/// Longest a node may take to make a locally written unit durable (its fsync).
const FINISH_TIMEOUT: Duration = Duration::from_secs(60);

/// An aligned buffer for writes to a file opened with O_DIRECT: `buf[start..]` holds the
/// bytes, `start` aligning the first to `align`; its capacity never grows.
#[derive(Debug)]
pub(crate) struct Aligned {
    buf: Vec<u8>,
    start: usize,
    capacity: usize,
    align: usize,
}

impl Aligned {
    fn new(capacity: usize, align: usize) -> Aligned {
        let capacity = capacity.next_multiple_of(align);
        let mut buf: Vec<u8> = Vec::with_capacity(capacity + align);
        let start = buf.as_ptr().align_offset(align);
        buf.resize(start, 0);
        Aligned { buf, start, capacity, align }
    }

    fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends as much of `bytes` as fits; how much did.
    fn push(&mut self, bytes: &[u8]) -> usize {
        let taken = bytes.len().min(self.capacity - self.len());
        self.buf.extend_from_slice(&bytes[..taken]);
        taken
    }

    /// The bytes, zero-padded to whole aligned blocks.
    fn padded(&mut self) -> &[u8] {
        let padded = self.len().next_multiple_of(self.align);
        self.buf.resize(self.start + padded, 0);
        &self.buf[self.start..]
    }

    fn clear(&mut self) {
        self.buf.truncate(self.start);
    }
}

/// Writes a stage at file offset `at` (whole aligned blocks).
pub(crate) fn write_stage(file: &File, mut stage: Aligned, at: u64) -> io::Result<Aligned> {
    file.write_all_at(stage.padded(), at)?;
    stage.clear();
    Ok(stage)
}

/// One write into a unit file, ready to go: whole aligned blocks from aligned memory.
#[derive(Debug)]
pub(crate) enum StageWrite {
    /// A stage (its last one may end in a partial block, padded with zeros).
    Staged(Aligned, u64),
    /// A piece's whole blocks where they lie, after the stage's `edge` blocks (the bytes
    /// that came before them), in one vectored write at `at`.
    Direct { edge: Option<Aligned>, span: Bytes, at: u64 },
}

impl StageWrite {
    /// Writes it; the stage it used, emptied, for reuse. Blocking.
    pub(crate) fn write(self, file: &File) -> io::Result<Option<Aligned>> {
        match self {
            StageWrite::Staged(stage, at) => write_stage(file, stage, at).map(Some),
            StageWrite::Direct { mut edge, span, at } => {
                let head: &[u8] = edge.as_mut().map_or(&[], |e| e.padded());
                write_all_vectored_at(file, &[head, &span], at)?;
                Ok(edge.map(|mut e| {
                    e.clear();
                    e
                }))
            }
        }
    }
}

/// Writes `parts` one after another at file offset `at` (pwritev, resumed after a short
/// write). weft-store's `RealFile` has the same loop; this crate does not link the node's
/// store, and a local write needs only this one call of it (two buffers).
fn write_all_vectored_at(file: &File, parts: &[&[u8]], mut at: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut slices: Vec<io::IoSlice<'_>> =
        parts.iter().map(|part| io::IoSlice::new(part)).collect();
    let mut rest: &mut [io::IoSlice<'_>] = &mut slices;
    io::IoSlice::advance_slices(&mut rest, 0); // drops leading empty parts
    while !rest.is_empty() {
        let offset = libc::off_t::try_from(at).map_err(|_| io::Error::other("offset too large"))?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix; each is valid for reads of
        // its length for the whole call (at most a handful: far below IOV_MAX).
        let wrote = unsafe {
            libc::pwritev(file.as_raw_fd(), rest.as_ptr().cast(), rest.len() as i32, offset)
        };
        if wrote < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if wrote == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the unit file took no bytes"));
        }
        at += wrote as u64;
        io::IoSlice::advance_slices(&mut rest, wrote as usize);
    }
    Ok(())
}

/// A unit being written into its temp file on a node of this host: the node created the
/// file and handed over its descriptor; this process writes the unit's bytes past its head
/// in aligned blocks, computes each segment's CRC-32C, and hands the head and the checksums
/// back in the finish, after which the node writes the header and makes the unit durable.
#[derive(Debug)]
pub(crate) struct LocalWrite {
    stream: UnixStream,
    port: u16,
    path: String,
    file: Arc<File>,
    len: u64,
    head_bytes: u64,
    segment: u64,
    align: usize,
    received: u64,
    head: Vec<u8>,
    sums: Vec<u32>,
    /// CRC-32C of the bytes of the current, unfinished segment.
    running: u32,
    stage: Aligned,
    /// Where the stage's first byte goes in the file.
    stage_at: u64,
    /// Stages written and given back, for reuse.
    spare: Vec<Aligned>,
    /// Bytes handed out to be written from where they lay (not copied into a stage).
    direct_bytes: u64,
}

impl LocalIo {
    pub(crate) fn new(reads: bool, writes: bool) -> LocalIo {
        LocalIo { reads, writes, ..Default::default() }
    }

    /// [`LocalIo::new`], keeping the grants it is given across reads ([`KeptGrants`]).
    /// It keeps at most a quarter of the descriptors the process may open (RLIMIT_NOFILE).
    pub(crate) fn keeping_grants(reads: bool, writes: bool) -> LocalIo {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the one struct it is given.
        let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        let room = if known { (limit.rlim_cur / 4) as usize } else { 0 };
        let kept = KeptGrants { capacity: room.min(KEPT_GRANTS), ..Default::default() };
        let kept = Arc::new(Mutex::new(kept));
        let sweeper = Arc::downgrade(&kept);
        let spawned = std::thread::Builder::new()
            .name("weft-kept-grants".into())
            .spawn(move || sweep_kept(sweeper));
        if spawned.is_err() {
            // Without a sweeper, grants of units nobody reads again would stay open.
            return LocalIo::new(reads, writes);
        }
        LocalIo { kept: Some(kept), ..LocalIo::new(reads, writes) }
    }

    /// Asks the node on loopback `port` to create the unit at `path` for a local write of
    /// `len` bytes. None: write it over HTTP (no socket, a refusal, an error). Blocking.
    pub(crate) fn begin_write(
        &self,
        port: u16,
        path: &str,
        signer: &Signer,
        len: u64,
    ) -> Option<LocalWrite> {
        if !self.writes || self.skipped(port) {
            return None;
        }
        let mut stream = self.connection(port)?;
        let began = begin_on(&mut stream, path, signer, len);
        let counter = match &began {
            Ok(Some(_)) => &self.write_hits,
            _ => &self.write_fallbacks,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        match began {
            Ok(Some((file, fields))) => {
                let (data_offset, _, _, align) = fields;
                self.learn_phase(len, data_offset, align);
                let (path, file) = (path.to_owned(), Arc::new(file));
                Some(LocalWrite::new(stream, port, path, file, len, fields))
            }
            Ok(None) => {
                self.put_back(port, stream);
                None
            }
            Err(error) => {
                tracing::debug!(path, %error, "local write refused; writing over HTTP");
                None
            }
        }
    }
}

impl LocalIo {
    /// The phase modulo [`PHASE_ALIGN`] of unit byte 0 in the file of a unit of `len` bytes,
    /// as the last local write of a unit of that length found it; None when none was seen yet
    /// (or the node's alignment was not [`PHASE_ALIGN`]). A piece whose first byte's address
    /// has its file offset's phase is written into the file from where it lies
    /// ([`LocalWrite::push`]); any other is copied. A wrong guess costs the copy, nothing else.
    pub(crate) fn write_phase(&self, len: u64) -> Option<usize> {
        if !self.writes {
            return None;
        }
        self.phases.lock().expect("phases").get(&len).copied()
    }

    fn learn_phase(&self, len: u64, data_offset: u64, align: usize) {
        if align != PHASE_ALIGN {
            return;
        }
        let mut phases = self.phases.lock().expect("phases");
        if phases.len() >= MAX_PHASES && !phases.contains_key(&len) {
            phases.clear();
        }
        phases.insert(len, (data_offset % PHASE_ALIGN as u64) as usize);
    }
}

/// The alignment whose phases writers learn (the nodes' O_DIRECT block).
pub(crate) const PHASE_ALIGN: usize = 4096;
/// Unit lengths whose phases are kept (forgotten all at once past this).
const MAX_PHASES: usize = 1024;
/// Fewest bytes a piece must hold past its first aligned block to be written from where it
/// lies rather than copied into the stage.
const DIRECT_MIN_BYTES: usize = 64 << 10;

/// The descriptor and (data offset, head bytes, segment bytes, alignment) of a granted local
/// write; Ok(None) when the node refused (the HTTP write will say why).
type Began = (File, (u64, u64, u64, usize));

fn begin_on(
    stream: &mut UnixStream,
    path: &str,
    signer: &Signer,
    len: u64,
) -> io::Result<Option<Began>> {
    let granted = signed_ask(stream, signer, "PUT", path, &format!("x-weft-local-write: {len}"))?;
    let Some((file, answer)) = granted else { return Ok(None) };
    let fields = (
        answer.number("x-weft-data-offset"),
        answer.number("x-weft-head-bytes"),
        answer.number("x-weft-segment-bytes").filter(|&s| s > 0),
        answer.number("x-weft-direct-align").filter(|a| a.is_power_of_two() && *a <= 1 << 16),
    );
    let (Some(data_offset), Some(head_bytes), Some(segment), Some(align)) = fields else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a header is missing"));
    };
    let aligned = (data_offset + head_bytes).is_multiple_of(align) || head_bytes == len;
    if head_bytes > len || !aligned {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the unit's head does not fit"));
    }
    Ok(Some((file, (data_offset, head_bytes, segment, align as usize))))
}

/// How a local write ended when the node did not store the unit: the node's answer (status
/// and body, as over HTTP), or a broken exchange.
#[derive(Debug)]
pub(crate) enum WriteFailed {
    Answer(u16, String),
    Broken(String),
    /// The unit's bytes did not come as promised (the write was cut short here): no fault
    /// of the node's.
    Cut(String),
}

impl LocalWrite {
    /// A granted write of `len` bytes into `file`, with the node's (data offset, head bytes,
    /// segment bytes, alignment).
    fn new(
        stream: UnixStream,
        port: u16,
        path: String,
        file: Arc<File>,
        len: u64,
        (data_offset, head_bytes, segment, align): (u64, u64, u64, usize),
    ) -> LocalWrite {
        LocalWrite {
            stream,
            port,
            path,
            file,
            len,
            head_bytes,
            segment,
            align,
            received: 0,
            head: Vec::with_capacity(head_bytes as usize),
            sums: Vec::with_capacity(len.div_ceil(segment) as usize),
            running: 0,
            stage: Aligned::new(WRITE_STAGE_BYTES.min(len as usize), align),
            stage_at: data_offset + head_bytes,
            spare: Vec::new(),
            direct_bytes: 0,
        }
    }

    /// The unit file (for the stage writes).
    pub(crate) fn file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Takes the next bytes of the unit: checksums them, keeps the head, and stages the rest,
    /// or, where the piece's memory has its file offsets' phase ([`LocalIo::write_phase`]),
    /// leaves its whole aligned blocks where they lie. Returns the writes that are ready, in
    /// file order: each covers whole aligned blocks from aligned memory.
    pub(crate) fn push(&mut self, piece: &Bytes) -> Result<Vec<StageWrite>, String> {
        if self.received + piece.len() as u64 > self.len {
            return Err(format!("more than the unit's {} bytes were given", self.len));
        }
        let mut rest: &[u8] = piece;
        while !rest.is_empty() {
            let room = (self.segment - self.received % self.segment) as usize;
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.running = weft_wire::checksum::crc32c_append(self.running, now);
            self.received += now.len() as u64;
            if self.received.is_multiple_of(self.segment) || self.received == self.len {
                self.sums.push(self.running);
                self.running = 0;
            }
            rest = later;
        }
        let mut skip = 0;
        let head_missing = self.head_bytes as usize - self.head.len();
        if head_missing > 0 {
            skip = head_missing.min(piece.len());
            self.head.extend_from_slice(&piece[..skip]);
        }
        let mut ready = Vec::new();
        let file_at = self.stage_at + self.stage.len() as u64;
        let address = piece.as_ptr() as usize + skip;
        let to_block = (file_at.next_multiple_of(self.align as u64) - file_at) as usize;
        let left = piece.len() - skip;
        let in_phase = address % self.align == (file_at % self.align as u64) as usize;
        if in_phase && left >= to_block + DIRECT_MIN_BYTES {
            // The stage is completed up to the next aligned offset (it then holds whole
            // blocks, perhaps none), and written ahead of the piece's whole blocks.
            self.stage_bytes(&piece[skip..skip + to_block], &mut ready);
            let whole = (left - to_block) / self.align * self.align;
            let from = skip + to_block;
            let edge = (self.stage.len() > 0).then(|| self.fresh_stage());
            let at = self.stage_at;
            self.stage_at += (edge.as_ref().map_or(0, Aligned::len) + whole) as u64;
            self.direct_bytes += whole as u64;
            ready.push(StageWrite::Direct { edge, span: piece.slice(from..from + whole), at });
            self.stage_bytes(&piece[from + whole..], &mut ready);
        } else {
            self.stage_bytes(&piece[skip..], &mut ready);
        }
        Ok(ready)
    }

    /// Copies `bytes` into the stage, handing out each stage that fills.
    fn stage_bytes(&mut self, mut bytes: &[u8], ready: &mut Vec<StageWrite>) {
        while !bytes.is_empty() {
            let taken = self.stage.push(bytes);
            bytes = &bytes[taken..];
            if self.stage.len() == self.stage.capacity {
                let at = self.stage_at;
                let stage = self.fresh_stage();
                self.stage_at += stage.len() as u64;
                ready.push(StageWrite::Staged(stage, at));
            }
        }
    }

    /// The stage, replaced by a spare or a new one.
    fn fresh_stage(&mut self) -> Aligned {
        let next =
            self.spare.pop().unwrap_or_else(|| Aligned::new(self.stage.capacity, self.align));
        std::mem::replace(&mut self.stage, next)
    }

    /// The whole unit at once: its stages written here, then the finish. Blocking.
    pub(crate) fn write_whole(mut self, bytes: &Bytes, local: &LocalIo) -> Result<(), WriteFailed> {
        for write in self.push(bytes).map_err(WriteFailed::Cut)? {
            match write.write(&self.file) {
                Ok(Some(stage)) => self.recycle(stage),
                Ok(None) => {}
                Err(error) => return Err(self.abort(error)),
            }
        }
        self.finish(local)
    }

    /// A stage written, for reuse.
    pub(crate) fn recycle(&mut self, stage: Aligned) {
        if self.spare.len() < 2 {
            self.spare.push(stage);
        }
    }

    /// After the last byte: writes the last stage (padded), closes this process's
    /// descriptor, and asks the node to finish the unit (header, fsync, rename). Blocking.
    pub(crate) fn finish(mut self, local: &LocalIo) -> Result<(), WriteFailed> {
        if self.received != self.len {
            return Err(WriteFailed::Cut(format!(
                "the unit's bytes ended after {} of {}",
                self.received, self.len
            )));
        }
        if let Err(error) = self.write_last_stage() {
            return Err(self.abort(error));
        }
        local.direct_bytes.fetch_add(self.direct_bytes, Ordering::Relaxed);
        // The descriptor is closed before the node makes the unit visible: nothing here can
        // write to the unit file once it is a stored unit.
        let (head, sums) = (std::mem::take(&mut self.head), std::mem::take(&mut self.sums));
        let mut body = head;
        body.reserve(4 * sums.len());
        for sum in &sums {
            body.extend_from_slice(&sum.to_le_bytes());
        }
        let LocalWrite { mut stream, port, path, file, .. } = self;
        drop(file);
        let request =
            format!("PUT {path}?finish HTTP/1.1\r\ncontent-length: {}\r\n\r\n", body.len());
        let answered = (|| {
            stream.set_read_timeout(Some(FINISH_TIMEOUT))?;
            stream.write_all(request.as_bytes())?;
            stream.write_all(&body)?;
            let answer = read_answer(&mut stream)?;
            stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
            Ok::<Answer, io::Error>(answer)
        })();
        match answered {
            Ok(answer) if answer.status == 201 => {
                local.put_back(port, stream);
                Ok(())
            }
            Ok(answer) => Err(WriteFailed::Answer(answer.status, answer_text(&answer))),
            Err(error) => {
                Err(WriteFailed::Broken(format!("the local write's finish failed: {error}")))
            }
        }
    }

    /// Writes what the stage holds (the unit's last bytes, padded to a whole block).
    fn write_last_stage(&mut self) -> io::Result<()> {
        if self.stage.len() > 0 {
            let stage = std::mem::replace(&mut self.stage, Aligned::new(0, self.align));
            write_stage(&self.file, stage, self.stage_at)?;
        }
        Ok(())
    }

    /// Tells the node that a write to the unit file failed with `error` (the node abandons
    /// the unit, and takes ENOSPC as a full disk, EIO as a failed one); its answer.
    pub(crate) fn abort(self, error: io::Error) -> WriteFailed {
        let errno = error.raw_os_error().unwrap_or(libc::EIO);
        let LocalWrite { mut stream, path, file, .. } = self;
        drop(file);
        let request = format!("PUT {path}?abort HTTP/1.1\r\nx-weft-errno: {errno}\r\n\r\n");
        let answered = stream.write_all(request.as_bytes()).and_then(|()| read_answer(&mut stream));
        match answered {
            Ok(answer) => WriteFailed::Answer(answer.status, answer_text(&answer)),
            Err(broken) => WriteFailed::Broken(format!(
                "writing the unit file failed ({error}), and telling the node failed too: {broken}"
            )),
        }
    }
}

fn answer_text(answer: &Answer) -> String {
    String::from_utf8_lossy(&answer.body).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;

    /// A stand-in for a node's local socket on `port` (only its watch connection is made).
    fn listener(port: u16) -> std::os::unix::net::UnixListener {
        let name = format!("weft-node-{port}");
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes());
        std::os::unix::net::UnixListener::bind_addr(&address.expect("abstract name")).expect("bind")
    }

    fn grant(file: &Arc<File>) -> Arc<Grant> {
        let sums = vec![0];
        Arc::new(Grant { file: file.clone(), data_offset: 0, unit_len: 1, segment: 1, sums })
    }

    /// A piece of `bytes` whose first byte's address is `phase` modulo PHASE_ALIGN.
    fn at_phase(bytes: &[u8], phase: usize) -> Bytes {
        let mut buf = vec![0u8; bytes.len() + PHASE_ALIGN];
        let start = (phase + PHASE_ALIGN - buf.as_ptr() as usize % PHASE_ALIGN) % PHASE_ALIGN;
        buf[start..start + bytes.len()].copy_from_slice(bytes);
        Bytes::from(buf).slice(start..start + bytes.len())
    }

    /// A file in a fresh directory, opened with O_DIRECT where the filesystem takes it (then
    /// a write from unaligned memory or at an unaligned offset fails with EINVAL).
    fn direct_file(dir: &std::path::Path) -> File {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join("unit");
        let open = |flags| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(flags)
                .open(&path)
        };
        open(libc::O_DIRECT).or_else(|_| open(0)).expect("open the unit file")
    }

    #[test]
    fn pieces_in_phase_are_written_where_they_lie_and_the_file_is_the_same() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(22);
        let segment = 65_536u64;
        for case in 0..24 {
            let len = rng.gen_range(1..4_000_000u64);
            // A data offset like a header's: anywhere in the first blocks.
            let data_offset = rng.gen_range(72..9000u64);
            let head_bytes =
                (data_offset.next_multiple_of(PHASE_ALIGN as u64) - data_offset).min(len);
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let dir = tempfile::tempdir().expect("temp dir");
            let file = Arc::new(direct_file(dir.path()));
            let (stream, _other) = UnixStream::pair().expect("socket pair");
            let fields = (data_offset, head_bytes, segment, PHASE_ALIGN);
            let mut write = LocalWrite::new(stream, 1, "/u".into(), file.clone(), len, fields);
            // Pieces in phase, out of phase, or mixed (case 0 all in phase, case 1 none).
            let mut at = 0usize;
            while at < len as usize {
                let piece = rng.gen_range(1..600_000usize).min(len as usize - at);
                let bytes = &data[at..at + piece];
                let phase = (data_offset as usize + at) % PHASE_ALIGN;
                let in_phase = match case {
                    0 => true,
                    1 => false,
                    _ => rng.gen_bool(0.7),
                };
                let wrong = (phase + 1 + rng.gen_range(0..PHASE_ALIGN - 1)) % PHASE_ALIGN;
                let piece_bytes = at_phase(bytes, if in_phase { phase } else { wrong });
                for ready in write.push(&piece_bytes).expect("within the unit") {
                    if let Some(stage) = ready.write(&file).expect("an aligned write") {
                        write.recycle(stage);
                    }
                }
                at += piece;
            }
            write.write_last_stage().expect("the last stage");
            let got = std::fs::read(dir.path().join("unit")).expect("read back");
            let end = (data_offset + len) as usize;
            let past_head = (data_offset + head_bytes) as usize;
            assert_eq!(write.head, data[..head_bytes as usize], "case {case}: the head is kept");
            assert!(
                got[past_head..end] == data[head_bytes as usize..],
                "case {case}: the file holds the unit's bytes past the head"
            );
            assert!(got.len() <= end.next_multiple_of(PHASE_ALIGN), "case {case}: no more");
            let sums: Vec<u32> = data.chunks(segment as usize).map(crc32c::crc32c).collect();
            assert_eq!(write.sums, sums, "case {case}: every segment's CRC-32C");
            let long_enough = len > head_bytes + 2 * DIRECT_MIN_BYTES as u64;
            match case {
                0 if long_enough => assert!(write.direct_bytes > 0, "case 0 went direct"),
                1 => assert_eq!(write.direct_bytes, 0, "case 1 copied every byte"),
                _ => {}
            }
        }
    }

    #[test]
    fn kept_grants_are_dropped_when_their_node_closes_when_too_many_and_when_old() {
        let file = Arc::new(tempfile::tempfile().expect("temp file"));
        // Ports unlikely to be a real node's on this host (abstract names are host-wide
        // within the network namespace).
        let (one, two) = (61_237, 61_238);
        let (first, second) = (listener(one), listener(two));
        let mut kept = KeptGrants { capacity: 3, ..Default::default() };
        kept.keep(one, "/v1/disks/0/units/a", grant(&file));
        kept.keep(one, "/v1/disks/0/units/b", grant(&file));
        kept.keep(two, "/v1/disks/0/units/c", grant(&file));
        let (watch_one, _) = first.accept().expect("the watch connects");
        let (_watch_two, _) = second.accept().expect("the watch connects");
        assert!(kept.get(one, "/v1/disks/0/units/a").is_some());
        assert!(kept.get(two, "/v1/disks/0/units/c").is_some());
        assert!(kept.get(two, "/v1/disks/0/units/a").is_none(), "keyed by node and unit");
        // The node closes its end (it stopped): none of its grants is used again.
        drop(watch_one);
        drop(first);
        assert!(kept.get(one, "/v1/disks/0/units/a").is_none());
        assert!(kept.get(one, "/v1/disks/0/units/b").is_none());
        assert!(!kept.watches.contains_key(&one));
        assert!(kept.get(two, "/v1/disks/0/units/c").is_some(), "the other node's stay");
        // A node without a socket: nothing is kept for it.
        kept.keep(61_239, "/v1/disks/0/units/d", grant(&file));
        assert!(kept.grants.keys().all(|(port, _)| *port != 61_239));
        // Past the capacity the oldest go first.
        for unit in ["e", "f", "g"] {
            kept.keep(two, &format!("/v1/disks/0/units/{unit}"), grant(&file));
        }
        assert_eq!(kept.grants.len(), 3);
        assert!(kept.get(two, "/v1/disks/0/units/c").is_none(), "the oldest was dropped");
        assert!(kept.get(two, "/v1/disks/0/units/g").is_some());
        // A failed read forgets its grant.
        kept.forget(two, "/v1/disks/0/units/g");
        assert!(kept.get(two, "/v1/disks/0/units/g").is_none());
        assert!(kept.get(two, "/v1/disks/0/units/f").is_some());
        // Dropped grants wait for the lock's release to be closed.
        assert!(!kept.dropped.is_empty());
        let file_refs = Arc::strong_count(&file);
        kept.dropped.clear();
        assert!(Arc::strong_count(&file) < file_refs, "clearing them closes them");
        // Nothing is kept past KEPT_FOR, read again or not.
        kept.expire(Instant::now() + KEPT_FOR);
        assert!(kept.grants.is_empty() && kept.order.is_empty());
        assert!(kept.get(two, "/v1/disks/0/units/f").is_none());
        // The sweeper leaves with its client.
        let shared = Arc::new(Mutex::new(KeptGrants::default()));
        let sweeper = Arc::downgrade(&shared);
        drop(shared);
        sweep_kept(sweeper);
    }
}
