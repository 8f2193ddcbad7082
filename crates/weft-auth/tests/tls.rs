//! TLS through real sockets on loopback: who is let in, who is refused at the handshake,
//! and certificates re-read under a running listener.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    sync::Arc,
    time::{Duration, SystemTime},
};

use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use weft_auth::{
    ca::{write_atomic, Ca, HostNames},
    tls::{self, Acceptor, Listener, TlsFiles},
};

fn host(name: &str) -> HostNames {
    HostNames { name: name.into(), dns: vec![], ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)] }
}

/// A server with a certificate of `ca`, requiring client certificates of `ca`: it answers
/// each line with `ok:` and the line.
async fn server(ca: &Ca, dir: &Path) -> SocketAddr {
    ca.write_host(&dir.join("server"), &host("server"), 30).unwrap();
    let files = TlsFiles::in_dir(&dir.join("server"));
    let config = tls::server_config(&files.cert, &files.key, Some(&files.ca)).unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut listener = Listener::start(tcp, Acceptor::tls(config)).unwrap();
    let addr = listener.local_addr();
    tokio::spawn(async move {
        while let Some((stream, _)) = listener.next().await {
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream);
                let mut line = String::new();
                while lines.read_line(&mut line).await.unwrap_or(0) > 0 {
                    let answer = format!("ok:{line}");
                    if lines.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

fn localhost() -> ServerName<'static> {
    ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into())
}

/// Sends `line` over TLS with `config`: the answer, or the error that stopped it.
async fn ask(addr: SocketAddr, config: rustls::ClientConfig, line: &str) -> Result<String, String> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut stream = connector.connect(localhost(), tcp).await.map_err(|e| e.to_string())?;
    stream.write_all(format!("{line}\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let (mut answer, mut buf) = (String::new(), [0u8; 64]);
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Err(format!("closed after {answer:?}")),
                Ok(n) => {
                    answer.push_str(std::str::from_utf8(&buf[..n]).unwrap());
                    if answer.ends_with('\n') {
                        return Ok(answer.trim_end().to_owned());
                    }
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    });
    read.await.map_err(|_| "timed out".to_owned())?
}

fn client(ca: &Ca, dir: &Path, name: &str) -> rustls::ClientConfig {
    ca.write_host(&dir.join(name), &host(name), 30).unwrap();
    tls::client_config(&TlsFiles::in_dir(&dir.join(name))).unwrap()
}

#[tokio::test]
async fn only_clients_with_a_current_certificate_of_the_cluster_ca_get_through() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::create(&dir.path().join("ca"), "weft test CA").unwrap();
    let addr = server(&ca, dir.path()).await;
    assert_eq!(ask(addr, client(&ca, dir.path(), "good"), "good").await.unwrap(), "ok:good");

    // A certificate of another CA, from a client that trusts the server's CA: refused.
    let foreign = Ca::create(&dir.path().join("foreign"), "another CA").unwrap();
    foreign.write_host(&dir.path().join("foreign-host"), &host("foreign-host"), 30).unwrap();
    std::fs::copy(dir.path().join("ca/ca.pem"), dir.path().join("foreign-host/ca.pem")).unwrap();
    let config = tls::client_config(&TlsFiles::in_dir(&dir.path().join("foreign-host"))).unwrap();
    let refused = ask(addr, config, "foreign").await.unwrap_err();
    assert!(!refused.contains("ok:"), "{refused}");

    // An expired certificate of the right CA: refused.
    let expired =
        ca.issue_until(&host("expired"), SystemTime::now() - Duration::from_secs(3600)).unwrap();
    let expired_dir = dir.path().join("expired");
    std::fs::create_dir_all(&expired_dir).unwrap();
    std::fs::write(expired_dir.join("cert.pem"), &expired.cert_pem).unwrap();
    std::fs::write(expired_dir.join("key.pem"), &expired.key_pem).unwrap();
    std::fs::write(expired_dir.join("ca.pem"), ca.cert_pem()).unwrap();
    let config = tls::client_config(&TlsFiles::in_dir(&expired_dir)).unwrap();
    let refused = ask(addr, config, "expired").await.unwrap_err();
    assert!(!refused.contains("ok:"), "{refused}");

    // No certificate at all: refused.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let anonymous = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(tls::roots(&dir.path().join("ca/ca.pem")).unwrap())
        .with_no_client_auth();
    let refused = ask(addr, anonymous, "anonymous").await.unwrap_err();
    assert!(!refused.contains("ok:"), "{refused}");

    // A client that does not trust the cluster CA stops at the server's certificate.
    let unverified = ask(addr, tls::client(), "trusting-nobody").await.unwrap_err();
    assert!(unverified.contains("UnknownIssuer"), "{unverified}");

    // Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got)).await;
    assert!(!String::from_utf8_lossy(&got).contains("HTTP/1.1"), "{got:?}");

    // After all those refusals, the listener still serves a good client.
    assert_eq!(ask(addr, client(&ca, dir.path(), "again"), "again").await.unwrap(), "ok:again");
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::create(&dir.path().join("ca"), "weft test CA").unwrap();
    let addr = server(&ca, dir.path()).await;
    let config = Arc::new(client(&ca, dir.path(), "client"));
    let served = || async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let connector = tokio_rustls::TlsConnector::from(config.clone());
        let stream = connector.connect(localhost(), tcp).await.unwrap();
        stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    };
    let before = served().await;
    assert_eq!(served().await, before);

    // A key that is not the certificate's (half a rotation): the old pair stays in use.
    let other = ca.issue(&host("server"), 30).unwrap();
    write_atomic(&dir.path().join("server/key.pem"), other.key_pem.as_bytes(), 0o600).unwrap();
    tokio::time::sleep(tls::RELOAD_CHECK + Duration::from_millis(200)).await;
    assert_eq!(served().await, before);

    // The certificate that goes with it: served from the next handshake on.
    write_atomic(&dir.path().join("server/cert.pem"), other.cert_pem.as_bytes(), 0o644).unwrap();
    tokio::time::sleep(tls::RELOAD_CHECK + Duration::from_millis(200)).await;
    let after = served().await;
    assert_ne!(after, before);
    let issued = CertificateDer::from_pem_slice(other.cert_pem.as_bytes()).unwrap();
    assert_eq!(after, issued.to_vec());
}
