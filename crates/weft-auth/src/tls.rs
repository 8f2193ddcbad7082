//! TLS on weft's links (docs/auth.md, "TLS"): every internal server asks its peers for a
//! certificate the cluster CA issued (mTLS), every internal client checks its server's
//! certificate against that CA, and the request signatures of this crate still cover every
//! request inside the encrypted link.
//!
//! Terms: a **TLS directory** holds `ca.pem` (the cluster CA's certificate), `cert.pem` (this
//! host's certificate, issued by that CA) and `key.pem` (its private key, mode 0600). A
//! **host certificate** names its host's addresses and names as subject alternative names
//! and serves as both server and client certificate (one process, one identity).
//!
//! Invariants:
//! - Nothing falls back to plaintext: a TLS listener hands on only connections whose
//!   handshake completed. A peer that speaks plain HTTP, shows a certificate the cluster CA
//!   did not issue, an expired one, or none where one is required is refused at the
//!   handshake, with a log line naming the peer's address and the reason.
//! - A handshake runs in a task of its own, bounded by [`HANDSHAKE_TIMEOUT`]: a slow or silent
//!   peer never holds up the accept loop or anyone else's handshake.
//! - Host certificates are re-read when their files change (looked at no more than once every
//!   [`RELOAD_CHECK`]), so `weft cert rotate` swaps them under running processes without a
//!   restart. Connections already open keep what they began with; every certificate the CA
//!   issued stays acceptable until it expires, so old and new overlap. A pair that does not
//!   load (half-written, or a key that is not the certificate's) leaves the previous pair in
//!   use, and says so in the log.
//! - The process's clients share one configuration, installed once at start
//!   ([`install_client`]); without one, a client reaches no https:// URL (it trusts no
//!   root), so nothing is sent to a server it could not verify.

use std::{
    fmt, io,
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, Mutex, OnceLock, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use rustls::{
    client::ResolvesClientCert,
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
    RootCertStore, SignatureScheme,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};

pub use rustls::{ClientConfig, ServerConfig};

/// The cluster CA's certificate in a TLS directory.
pub const CA_FILE: &str = "ca.pem";
/// The host's certificate in a TLS directory.
pub const CERT_FILE: &str = "cert.pem";
/// The host's private key in a TLS directory.
pub const KEY_FILE: &str = "key.pem";

/// Longest a peer may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often, at most, certificate files are looked at for a change.
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A TLS setup that cannot be used, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn error(message: impl Into<String>) -> TlsError {
    TlsError(message.into())
}

/// Where a process finds its CA, certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// The three files of TLS directory `dir`.
    pub fn in_dir(dir: &Path) -> TlsFiles {
        TlsFiles { ca: dir.join(CA_FILE), cert: dir.join(CERT_FILE), key: dir.join(KEY_FILE) }
    }

    /// Loads all three, so a bad file is named at start rather than at the first handshake.
    pub fn check(&self) -> Result<(), TlsError> {
        roots(&self.ca)?;
        load_pair(&self.cert, &self.key)?;
        Ok(())
    }
}

/// The provider of every TLS configuration here: ring's AES-GCM and ChaCha20 (AES-NI and
/// CLMUL where the CPU has them), ECDSA and Ed25519.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            // AES-128-GCM first (ring's own order puts AES-256-GCM first): 10 rounds
            // instead of 14 for every byte of every link, at a strength no attack on the
            // cluster's links approaches. Servers choose by this order, not the client's.
            let mut provider = rustls::crypto::ring::default_provider();
            provider.cipher_suites.sort_by_key(|suite| {
                !matches!(
                    suite.suite(),
                    rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
                        | rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                        | rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
                )
            });
            Arc::new(provider)
        })
        .clone()
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let unreadable = |e: rustls::pki_types::pem::Error| {
        error(format!("cannot read certificates from {}: {e}", path.display()))
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certs.is_empty() {
        return Err(error(format!("{} holds no PEM certificate", path.display())));
    }
    Ok(certs)
}

/// The certificates of PEM file `ca`, as the roots a peer's certificate must chain to.
pub fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in read_certs(ca)? {
        store.add(cert).map_err(|e| {
            error(format!("{} holds a certificate that is not a CA's: {e}", ca.display()))
        })?;
    }
    Ok(store)
}

fn load_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = read_certs(cert)?;
    let der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| error(format!("cannot read a private key from {}: {e}", key.display())))?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| error(format!("cannot use the private key in {}: {e}", key.display())))?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match().map_err(|e| {
        error(format!(
            "the key in {} is not the one of the certificate in {}: {e}",
            key.display(),
            cert.display()
        ))
    })?;
    Ok(Arc::new(pair))
}

/// What identifies a file's content for the reload check: inode, size and change time.
type Stamp = Option<[(u64, u64, i64, i64); 2]>;

fn stamp(paths: [&Path; 2]) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let one = |path: &Path| {
        let m = std::fs::metadata(path).ok()?;
        Some((m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
    };
    Some([one(paths[0])?, one(paths[1])?])
}

/// A certificate and key re-read when their files change.
#[derive(Debug)]
struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    checked: Instant,
    stamp: Stamp,
    pair: Arc<CertifiedKey>,
}

impl Reloading {
    fn open(cert: &Path, key: &Path) -> Result<Reloading, TlsError> {
        let stamp = stamp([cert, key]);
        let pair = load_pair(cert, key)?;
        let state = Mutex::new(Loaded { checked: Instant::now(), stamp, pair });
        Ok(Reloading { cert: cert.to_owned(), key: key.to_owned(), state })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= RELOAD_CHECK {
            state.checked = Instant::now();
            let now = stamp([&self.cert, &self.key]);
            if now.is_some() && now != state.stamp {
                // Recorded even when the load fails: the next change of either file (the
                // second half of a rotation) is tried again, a broken pair is logged once.
                state.stamp = now;
                match load_pair(&self.cert, &self.key) {
                    Ok(pair) => {
                        tracing::info!(cert = %self.cert.display(), "using a new certificate");
                        state.pair = pair;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "keeping the previous certificate");
                    }
                }
            }
        }
        state.pair.clone()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for Reloading {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn versions_error(e: rustls::Error) -> TlsError {
    error(format!("cannot set up TLS: {e}"))
}

/// A server's configuration: its certificate and key (re-read when they change), and, when
/// `client_ca` is given, a client certificate issued by that CA required of every peer.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions_error)?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .map_err(|e| {
                        error(format!("cannot verify clients with {}: {e}", ca.display()))
                    })?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(Reloading::open(cert, key)?));
    // The provider's order (AES-128-GCM first), whatever the client prefers.
    config.ignore_client_order = true;
    Ok(Arc::new(config))
}

/// A client's configuration: servers verified against `files.ca`, `files.cert` shown as
/// the client's certificate (re-read when it changes).
pub fn client_config(files: &TlsFiles) -> Result<ClientConfig, TlsError> {
    let identity = Reloading::open(&files.cert, &files.key)?;
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions_error)?
        .with_root_certificates(roots(&files.ca)?)
        .with_client_cert_resolver(Arc::new(identity)))
}

static CLIENT: OnceLock<(TlsFiles, ClientConfig)> = OnceLock::new();

/// Makes `files` the identity of every client this process builds from now on (see
/// [`client`]). The first call wins; a later one with the same files is a no-op, with
/// other files an error.
pub fn install_client(files: &TlsFiles) -> Result<(), TlsError> {
    if let Some((installed, _)) = CLIENT.get() {
        return match installed == files {
            true => Ok(()),
            false => Err(error(format!(
                "this process already uses the TLS files of {}",
                installed.cert.display()
            ))),
        };
    }
    let config = client_config(files)?;
    let chosen = CLIENT.get_or_init(|| (files.clone(), config));
    match &chosen.0 == files {
        true => Ok(()),
        false => Err(error("this process's TLS identity was set meanwhile")),
    }
}

/// Whether [`install_client`] was called.
pub fn client_installed() -> bool {
    CLIENT.get().is_some()
}

/// The configuration of this process's clients: the installed one, else one that trusts no
/// server (an https:// URL then fails its handshake; http:// URLs are unaffected).
pub fn client() -> ClientConfig {
    match CLIENT.get() {
        Some((_, config)) => config.clone(),
        None => ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports rustls's default protocol versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth(),
    }
}

/// An accepted connection: plain TCP, or TLS over it.
#[derive(Debug)]
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Stream {
    /// The socket, when nothing sits between it and the bytes (sendfile may write to it).
    pub fn plain(&self) -> Option<&TcpStream> {
        match self {
            Stream::Plain(tcp) => Some(tcp),
            Stream::Tls(_) => None,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Turns accepted sockets into [`Stream`]s: as they are, or after a TLS handshake.
#[derive(Clone)]
pub struct Acceptor {
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acceptor").field("tls", &self.tls.is_some()).finish()
    }
}

impl Acceptor {
    /// Plain TCP.
    pub fn plain() -> Acceptor {
        Acceptor { tls: None }
    }

    /// TLS with `config`.
    pub fn tls(config: Arc<ServerConfig>) -> Acceptor {
        Acceptor { tls: Some(tokio_rustls::TlsAcceptor::from(config)) }
    }

    /// Plain TCP when `config` is None, else TLS with it.
    pub fn new(config: Option<Arc<ServerConfig>>) -> Acceptor {
        config.map_or_else(Acceptor::plain, Acceptor::tls)
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The stream of `tcp`, or None (logged) when its TLS handshake failed or timed out.
    pub async fn accept(&self, tcp: TcpStream, peer: SocketAddr) -> Option<Stream> {
        let Some(acceptor) = &self.tls else {
            return Some(Stream::Plain(tcp));
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => Some(Stream::Tls(Box::new(tls))),
            Ok(Err(error)) => {
                tracing::warn!(%peer, %error, "TLS handshake refused");
                None
            }
            Err(_) => {
                tracing::warn!(%peer, "TLS handshake refused: not completed within {HANDSHAKE_TIMEOUT:?}");
                None
            }
        }
    }
}

/// A listener whose connections come out as [`Stream`]s, handshakes done: axum serves it.
#[derive(Debug)]
pub struct Listener {
    accepted: mpsc::Receiver<(Stream, SocketAddr)>,
    local_addr: SocketAddr,
}

impl Listener {
    /// Accepts on `listener` (in a task of its own, until this value is dropped).
    pub fn start(listener: TcpListener, acceptor: Acceptor) -> io::Result<Listener> {
        let local_addr = listener.local_addr()?;
        let (sender, accepted) = mpsc::channel(64);
        tokio::spawn(accept_loop(listener, acceptor, sender));
        Ok(Listener { accepted, local_addr })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The next connection; None once the accept loop ended.
    pub async fn next(&mut self) -> Option<(Stream, SocketAddr)> {
        self.accepted.recv().await
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Acceptor,
    sender: mpsc::Sender<(Stream, SocketAddr)>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = sender.closed() => return,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors or memory: wait, as axum's own listener does.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        match acceptor.is_tls() {
            false => {
                if sender.send((Stream::Plain(tcp), peer)).await.is_err() {
                    return;
                }
            }
            true => {
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    if let Some(stream) = acceptor.accept(tcp, peer).await {
                        let _ = sender.send((stream, peer)).await;
                    }
                });
            }
        }
    }
}

#[cfg(feature = "axum")]
impl axum::serve::Listener for Listener {
    type Io = Stream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Stream, SocketAddr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended: axum's graceful shutdown ends its own loop.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }
}
