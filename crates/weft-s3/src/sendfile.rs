//! The gateway's connections: a TCP stream whose writes send the object bytes a local read
//! brought with sendfile(2), from the page cache straight to the socket, instead of copying
//! them from the read's buffer (docs/s3.md, "GET from the page cache").
//!
//! hyper hands a response's body chunks to [`Connection::poll_write_vectored`] as they are
//! (it queues `Bytes` and writes them with writev, never copying chunks this large). A
//! slice that [`weft_client::file_bytes::source_of`] places in a unit file is sent from that
//! file; every other slice (heads, XML bodies, bytes rebuilt by a degraded read or fetched
//! over HTTP, placed slices shorter than [`SENDFILE_MIN_BYTES`]) is written as it is.
//!
//! Invariants:
//! - The bytes on the wire are the bytes hyper was given, in its order: a placed slice's
//!   buffer holds exactly its file range, read and verified (every segment's CRC-32C) by the
//!   local read, and finished unit files are never written again (weft-store writes a unit
//!   to a temporary file and renames it into place).
//! - One call writes from one source: either one placed slice (sendfile, possibly short)
//!   or the run of unplaced slices before the next placed one (writev).
//! - A file that ends before its range (sendfile answers 0) fails the write, which ends the
//!   connection: a response is cut short, never padded or mixed. A file or socket that
//!   cannot be spliced (EINVAL, ENOSYS, EOPNOTSUPP) turns sendfile off for the connection
//!   and the buffer is written instead.
//! - `WEFT_S3_SENDFILE=off` in the gateway's environment writes every slice from memory.
//! - Connections have TCP_NODELAY: one response goes out in several writes (head, ranges),
//!   and none of them may wait for an ACK.

use std::{
    io::{self, IoSlice},
    os::fd::AsRawFd,
    pin::Pin,
    sync::atomic::{AtomicU64, Ordering},
    task::{ready, Context, Poll},
};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use weft_auth::tls::Stream;

/// The shortest placed slice sent with sendfile: below it one sendfile call (and, without
/// Nagle, one TCP segment) per slice costs more than copying it, and small slices are many
/// (a 1 MiB object of rs(9,3) has 4 KiB cells, one slice each).
pub const SENDFILE_MIN_BYTES: usize = 32 << 10;

/// Where a slice of at least [`SENDFILE_MIN_BYTES`] lies in a unit file, if it does.
fn placed(slice: &[u8]) -> Option<(std::sync::Arc<std::fs::File>, u64)> {
    match slice.len() >= SENDFILE_MIN_BYTES {
        true => weft_client::file_bytes::source_of(slice),
        false => None,
    }
}

/// Bytes this process sent with sendfile (tests and `weft bench`'s profiles read it).
static SENT_FROM_FILES: AtomicU64 = AtomicU64::new(0);

/// Bytes the gateway's connections have sent from unit files with sendfile, since start.
pub fn bytes_sent_from_files() -> u64 {
    SENT_FROM_FILES.load(Ordering::Relaxed)
}

/// Whether connections send placed slices from their files (`WEFT_S3_SENDFILE`, on unless
/// `off`).
pub fn enabled_by_environment() -> bool {
    std::env::var("WEFT_S3_SENDFILE").map_or(true, |v| v != "off")
}

/// A gateway connection (see the module header).
#[derive(Debug)]
pub struct Connection {
    socket: Stream,
    sendfile: bool,
}

impl Connection {
    /// `socket`, sending placed slices from their files when `sendfile` is true. Nagle's
    /// algorithm is off: a response's head and the ranges sent after it go out at once (with
    /// it on, a range's short last segment waits for the client's delayed ACK, 40 ms).
    ///
    /// Over TLS, sendfile is off: the bytes must pass through the cipher.
    pub fn new(socket: Stream, sendfile: bool) -> Connection {
        if let Some(Err(error)) = socket.plain().map(|tcp| tcp.set_nodelay(true)) {
            tracing::debug!(%error, "TCP_NODELAY could not be set");
        }
        let sendfile = sendfile && socket.plain().is_some();
        Connection { socket, sendfile }
    }

    /// Sends `len` bytes of `file` from `offset`; Ok(sent), which may be short.
    fn poll_sendfile(
        &mut self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        let Some(socket) = self.socket.plain() else {
            return Poll::Ready(Err(io::Error::from_raw_os_error(libc::EINVAL)));
        };
        let (socket_fd, file_fd) = (socket.as_raw_fd(), file.as_raw_fd());
        loop {
            ready!(socket.poll_write_ready(cx))?;
            let sent = socket.try_io(Interest::WRITABLE, || {
                let mut at = offset as libc::off_t;
                // SAFETY: both descriptors are open for the call (the socket is ours, the
                // file is held by the slice's entry); `at` is a valid off_t to update.
                let sent = unsafe { libc::sendfile(socket_fd, file_fd, &mut at, len) };
                match sent {
                    -1 => Err(io::Error::last_os_error()),
                    n => Ok(n as usize),
                }
            });
            return Poll::Ready(match sent {
                Ok(0) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a unit file ended before the range being sent",
                )),
                Ok(sent) => {
                    SENT_FROM_FILES.fetch_add(sent as u64, Ordering::Relaxed);
                    Ok(sent)
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => Err(error),
            });
        }
    }
}

/// Errors after which a connection stops trying sendfile (the pair cannot be spliced).
fn cannot_splice(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP))
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let bufs = match bufs.iter().position(|b| !b.is_empty()) {
            Some(first) => &bufs[first..],
            None => return Poll::Ready(Ok(0)),
        };
        if !this.sendfile {
            return Pin::new(&mut this.socket).poll_write_vectored(cx, bufs);
        }
        if let Some((file, offset)) = placed(&bufs[0]) {
            match ready!(this.poll_sendfile(cx, &file, offset, bufs[0].len())) {
                Err(error) if cannot_splice(&error) => {
                    tracing::debug!(%error, "sendfile refused; writing from memory");
                    this.sendfile = false;
                }
                done => return Poll::Ready(done),
            }
        }
        // The slices before the next placed one (all of them once sendfile is off).
        let run = match this.sendfile {
            true => {
                let next = bufs[1..].iter().position(|b| placed(b).is_some());
                next.map_or(bufs.len(), |p| p + 1)
            }
            false => bufs.len(),
        };
        Pin::new(&mut this.socket).poll_write_vectored(cx, &bufs[..run])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{io::Write, sync::Arc};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A connected pair: (the gateway's side as a Connection, the client's side).
    async fn pair(sendfile: bool) -> (Connection, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(address), listener.accept());
        (Connection::new(Stream::Plain(accepted.unwrap().0), sendfile), client.unwrap())
    }

    fn file_of(content: &[u8]) -> Arc<std::fs::File> {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(content).unwrap();
        Arc::new(file)
    }

    /// Writes `chunks` as hyper does (vectored, resuming after short writes), then closes
    /// the connection; answers what the client received.
    async fn send(
        mut connection: Connection,
        mut client: TcpStream,
        chunks: &[bytes::Bytes],
    ) -> Vec<u8> {
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut queue: Vec<bytes::Bytes> = chunks.to_vec();
        while !queue.is_empty() {
            let slices: Vec<IoSlice<'_>> = queue.iter().map(|b| IoSlice::new(b)).collect();
            let mut written = connection.write_vectored(&slices).await.unwrap();
            assert!(written > 0);
            while written > 0 {
                let head = &mut queue[0];
                let take = written.min(head.len());
                let _ = head.split_to(take);
                written -= take;
                if head.is_empty() {
                    queue.remove(0);
                }
            }
        }
        connection.shutdown().await.unwrap();
        drop(connection);
        reader.await.unwrap()
    }

    #[tokio::test]
    async fn placed_slices_are_sent_from_their_files_and_the_rest_from_memory() {
        // The file's bytes differ from the buffer's on purpose: what arrives shows which
        // source each slice was sent from.
        let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let file = file_of(&content);
        let buffer = vec![0xEE; 200_000];
        let placed = weft_client::file_bytes::file_backed(buffer, file, 1000);
        let before = bytes_sent_from_files();
        let chunks = [
            bytes::Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n"),
            placed.slice(0..70_000),
            bytes::Bytes::from_static(b"-between-"),
            placed.slice(70_000..200_000),
        ];
        let (connection, client) = pair(true).await;
        let got = send(connection, client, &chunks).await;
        let mut want = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        want.extend_from_slice(&content[1000..71_000]);
        want.extend_from_slice(b"-between-");
        want.extend_from_slice(&content[71_000..201_000]);
        assert_eq!(got.len(), want.len());
        assert!(got == want, "each slice came from its own source, in order");
        assert!(bytes_sent_from_files() - before >= 200_000);
        // A placed slice shorter than SENDFILE_MIN_BYTES is written from memory.
        let (connection, client) = pair(true).await;
        let short = placed.slice(5..5 + SENDFILE_MIN_BYTES - 1);
        let got =
            send(connection, client, &[short.clone(), placed.slice(0..SENDFILE_MIN_BYTES)]).await;
        assert_eq!(got[..short.len()], short[..]);
        assert_eq!(got[short.len()..], content[1000..1000 + SENDFILE_MIN_BYTES]);
        // With sendfile off, the buffer's bytes are written.
        let (connection, client) = pair(false).await;
        let got = send(connection, client, &chunks[1..2]).await;
        assert_eq!(got, vec![0xEE; 70_000]);
    }

    #[tokio::test]
    async fn a_file_shorter_than_its_range_fails_the_write() {
        let short = SENDFILE_MIN_BYTES + 100;
        let file = file_of(&vec![7; short]);
        let placed = weft_client::file_bytes::file_backed(vec![7; 3 * short], file, 0);
        let (mut connection, _client) = pair(true).await;
        // The file's bytes go out; then it has nothing more at their end.
        let first = connection.write(&placed).await.unwrap();
        assert_eq!(first, short);
        let error = connection.write(&placed[short..]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    }
}
