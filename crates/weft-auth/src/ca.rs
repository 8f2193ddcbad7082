//! The cluster CA: made once per cluster (`weft init`, `weft up` on a new directory), it
//! issues every host's certificate (`weft cert rotate` issues them again).
//!
//! Files: a **CA directory** holds `ca.pem` (the CA's certificate, the trust root every
//! process is given) and `ca.key` (its private key, mode 0600, needed only to issue).
//!
//! Invariants:
//! - Host certificates are short-lived ([`HOST_DAYS`] by default) and name their host by
//!   every address and name it is reached at; they are good for both ends of a link (server
//!   and client authentication) and can issue nothing (not a CA).
//! - Files are replaced atomically (written beside, synced, renamed): a reader sees the old
//!   file or the new one, never half of one. A host's key is renamed into place before its
//!   certificate, and a reader refuses a pair whose key is not the certificate's
//!   (`tls::Reloading`), so a rotation seen halfway keeps the old pair in use.
//! - Private keys are written mode 0600 and never printed.

use std::{
    fs,
    io::Write,
    net::IpAddr,
    path::{Path, PathBuf},
};

use rand::RngCore;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};

use crate::tls::{TlsError, CA_FILE, CERT_FILE, KEY_FILE};

/// The CA's private key in a CA directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// How long a host certificate is valid, by default.
pub const HOST_DAYS: u32 = 30;
/// How long the cluster CA is valid.
pub const CA_DAYS: u32 = 3650;

fn error(what: &str, e: impl std::fmt::Display) -> TlsError {
    TlsError(format!("{what}: {e}"))
}

/// The cluster CA, loaded to issue certificates.
pub struct Ca {
    cert_pem: String,
    /// The CA's certificate as issuer (its name and key identifier).
    issuer: Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A certificate and its key, PEM.
#[derive(Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// What a host certificate names: the host's names and addresses.
#[derive(Debug, Clone, Default)]
pub struct HostNames {
    /// Its common name (`meta-1`, `node-3`, `admin`…).
    pub name: String,
    /// DNS names it is reached by (its name is added).
    pub dns: Vec<String>,
    /// Addresses it is reached at.
    pub ips: Vec<IpAddr>,
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A little before now: a peer whose clock is behind accepts it at once.
    validity_until(params, now + time::Duration::days(i64::from(days)));
}

fn validity_until(params: &mut CertificateParams, not_after: time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before =
        (now - time::Duration::minutes(10)).min(not_after - time::Duration::days(1));
    params.not_after = not_after;
    let mut serial = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut serial);
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` to `path` atomically (beside it, synced, renamed), with `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    written.map_err(|e| {
        let _ = fs::remove_file(&temporary);
        error(&format!("cannot write {}", path.display()), e)
    })
}

impl Ca {
    /// Makes a new CA named `name` and writes it to `dir` (created if missing); refuses to
    /// replace a CA already there.
    pub fn create(dir: &Path, name: &str) -> Result<Ca, TlsError> {
        if dir.join(CA_KEY_FILE).exists() || dir.join(CA_FILE).exists() {
            return Err(TlsError(format!(
                "{} already holds a cluster CA; use it (or remove it to start over)",
                dir.display()
            )));
        }
        fs::create_dir_all(dir)
            .map_err(|e| error(&format!("cannot create {}", dir.display()), e))?;
        let key = KeyPair::generate().map_err(|e| error("cannot make a key", e))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "weft");
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params, CA_DAYS);
        let issuer = params.self_signed(&key).map_err(|e| error("cannot make the CA", e))?;
        let cert_pem = issuer.pem();
        write_atomic(&dir.join(CA_KEY_FILE), key.serialize_pem().as_bytes(), 0o600)?;
        write_atomic(&dir.join(CA_FILE), cert_pem.as_bytes(), 0o644)?;
        Ok(Ca { cert_pem, issuer, key })
    }

    /// The CA in `dir`.
    pub fn open(dir: &Path) -> Result<Ca, TlsError> {
        let read = |file: &str| {
            let path = dir.join(file);
            fs::read_to_string(&path).map_err(|e| {
                error(
                    &format!(
                        "cannot read {} (the cluster CA's; `weft init` makes it)",
                        path.display()
                    ),
                    e,
                )
            })
        };
        let (cert_pem, key_pem) = (read(CA_FILE)?, read(CA_KEY_FILE)?);
        let key = KeyPair::from_pem(&key_pem).map_err(|e| error("cannot read the CA's key", e))?;
        let params = CertificateParams::from_ca_cert_pem(&cert_pem)
            .map_err(|e| error("cannot read the CA's certificate", e))?;
        // The same name and key as the stored CA: what it issues chains to that certificate.
        let issuer = params.self_signed(&key).map_err(|e| error("cannot load the CA", e))?;
        Ok(Ca { cert_pem, issuer, key })
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate for `host`, valid `days` days from now.
    pub fn issue(&self, host: &HostNames, days: u32) -> Result<Issued, TlsError> {
        let not_after =
            std::time::SystemTime::now() + std::time::Duration::from_secs(86_400 * u64::from(days));
        self.issue_until(host, not_after)
    }

    /// A certificate for `host`, valid until `not_after` (a time past makes an expired one,
    /// as drills need).
    pub fn issue_until(
        &self,
        host: &HostNames,
        not_after: std::time::SystemTime,
    ) -> Result<Issued, TlsError> {
        let mut dns = vec![host.name.clone()];
        dns.extend(host.dns.iter().filter(|d| **d != host.name).cloned());
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "weft");
        dn.push(DnType::CommonName, host.name.as_str());
        params.distinguished_name = dn;
        for name in dns {
            let name = name
                .clone()
                .try_into()
                .map_err(|e| error(&format!("bad host name {name:?}"), e))?;
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        params.subject_alt_names.extend(host.ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        validity_until(&mut params, not_after.into());
        let key = KeyPair::generate().map_err(|e| error("cannot make a key", e))?;
        let cert = params
            .signed_by(&key, &self.issuer, &self.key)
            .map_err(|e| error("cannot issue a certificate", e))?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// Reissues the certificate of TLS directory `dir` with a new key, for the same names
    /// and addresses, valid `days` days from now; writes it as [`Ca::write_host`] does.
    /// Returns the new certificate's serial number (hex).
    pub fn reissue(&self, dir: &Path, days: u32) -> Result<String, TlsError> {
        let path = dir.join(CERT_FILE);
        let pem = fs::read_to_string(&path)
            .map_err(|e| error(&format!("cannot read {}", path.display()), e))?;
        let mut params = CertificateParams::from_ca_cert_pem(&pem)
            .map_err(|e| error(&format!("cannot read the certificate in {}", path.display()), e))?;
        params.key_identifier_method = rcgen::KeyIdMethod::Sha256;
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, days);
        let serial = params.serial_number.as_ref().map(|s| hex(s.as_ref())).unwrap_or_default();
        let key = KeyPair::generate().map_err(|e| error("cannot make a key", e))?;
        let cert = params
            .signed_by(&key, &self.issuer, &self.key)
            .map_err(|e| error("cannot issue a certificate", e))?;
        write_atomic(&dir.join(CA_FILE), self.cert_pem.as_bytes(), 0o644)?;
        write_atomic(&dir.join(KEY_FILE), key.serialize_pem().as_bytes(), 0o600)?;
        write_atomic(&dir.join(CERT_FILE), cert.pem().as_bytes(), 0o644)?;
        Ok(serial)
    }

    /// Issues `host` a certificate and writes the TLS directory `dir`: `ca.pem`, then
    /// `key.pem`, then `cert.pem` (each atomically; see the module's invariants).
    pub fn write_host(&self, dir: &Path, host: &HostNames, days: u32) -> Result<PathBuf, TlsError> {
        fs::create_dir_all(dir)
            .map_err(|e| error(&format!("cannot create {}", dir.display()), e))?;
        let issued = self.issue(host, days)?;
        write_atomic(&dir.join(CA_FILE), self.cert_pem.as_bytes(), 0o644)?;
        write_atomic(&dir.join(KEY_FILE), issued.key_pem.as_bytes(), 0o600)?;
        write_atomic(&dir.join(CERT_FILE), issued.cert_pem.as_bytes(), 0o644)?;
        Ok(dir.to_owned())
    }
}
