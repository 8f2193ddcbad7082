//! The cluster's TLS files on this side: the CA and host certificates `weft up` and `weft
//! init` make, the identity CLI commands show to an https:// meta, and `weft cert rotate`.
//!
//! Layout (stable; `weft up --dir DIR` and `weft init --dir DIR`): `DIR/tls/ca.pem` and
//! `DIR/tls/ca.key` (the cluster CA, key mode 0600), then one TLS directory per host,
//! `DIR/tls/<host>/{ca.pem,cert.pem,key.pem}` (`meta-1`, `node-3`, `s3-1`, `repair`…), and
//! `DIR/tls/admin`, the identity of the commands run beside the cluster (`weft put`, `weft
//! status`…).
//!
//! Invariants:
//! - A command that reaches meta over https:// shows a certificate of the cluster CA: from
//!   `--tls-dir`, else `$WEFT_TLS_DIR`, else `tls/admin` beside the cluster secret it uses;
//!   without one it stops with an error saying where it looked, before any request.
//! - `weft up` issues every host a fresh certificate at each start (the CA is made once and
//!   kept), so a cluster restarted within the certificates' lifetime never runs on expired
//!   ones; `weft cert rotate` reissues them under running processes, which pick them up at
//!   their next handshake (weft-auth `tls`).

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use clap::{Args, Subcommand};
use serde_json::json;
use weft_auth::{
    ca::{Ca, HostNames, HOST_DAYS},
    tls::TlsFiles,
};

use crate::{cli_error, CliError};

/// The environment variable naming the TLS directory of CLI commands.
pub const TLS_DIR_ENV: &str = "WEFT_TLS_DIR";
/// The CA's directory in a cluster directory.
pub const TLS_DIR: &str = "tls";
/// The TLS directory of the commands run beside the cluster.
pub const ADMIN: &str = "admin";

/// DIR/tls of cluster directory `dir`.
pub fn ca_dir(dir: &Path) -> PathBuf {
    dir.join(TLS_DIR)
}

/// The TLS directory of `host` in cluster directory `dir`.
pub fn host_dir(dir: &Path, host: &str) -> PathBuf {
    ca_dir(dir).join(host)
}

/// The cluster CA of `dir`, made when it has none.
pub fn open_or_create_ca(dir: &Path) -> Result<Ca, CliError> {
    let at = ca_dir(dir);
    let made = match at.join(weft_auth::ca::CA_KEY_FILE).exists() {
        true => Ca::open(&at),
        false => Ca::create(&at, &format!("weft cluster CA ({})", dir.display())),
    };
    made.map_err(|e| cli_error!("{e}"))
}

/// Issues `host` (reached at `ips`, and by `dns` names) a certificate in its TLS directory.
pub fn issue_host(
    ca: &Ca,
    dir: &Path,
    host: &str,
    ips: Vec<IpAddr>,
    dns: Vec<String>,
) -> Result<PathBuf, CliError> {
    let names = HostNames { name: host.to_owned(), dns, ips };
    ca.write_host(&host_dir(dir, host), &names, HOST_DAYS).map_err(|e| cli_error!("{e}"))
}

/// The CA S3 clients must trust for a cluster's gateway, from the files beside its secret:
/// the one `weft init --hosts` names in s3.json, else the cluster CA `weft up` names in
/// cluster.json unless the gateway serves a certificate the user gave (theirs to trust).
/// `Value::Null` for a file that is not there.
pub fn gateway_ca(s3: &serde_json::Value, cluster: &serde_json::Value) -> Option<PathBuf> {
    let tls = &cluster["tls"];
    match s3["ca"].as_str() {
        Some(ca) => Some(PathBuf::from(ca)),
        None if tls["gateway_cert"].is_null() => tls["ca"].as_str().map(PathBuf::from),
        None => None,
    }
}

/// Makes this process's clients show the TLS directory `flag`, else `$WEFT_TLS_DIR`, else
/// `tls/admin` beside `secret_file`, for `url` (an https:// meta); nothing for http://.
pub fn install_for(url: &str, flag: Option<&Path>, secret_file: &Path) -> Result<(), CliError> {
    if !url.split(',').any(|u| u.trim().starts_with("https://")) {
        return Ok(());
    }
    let beside = secret_file.parent().unwrap_or(Path::new(".")).join(TLS_DIR).join(ADMIN);
    let (dir, from) = match (flag, std::env::var_os(TLS_DIR_ENV)) {
        (Some(dir), _) => (dir.to_owned(), "--tls-dir".to_owned()),
        (None, Some(dir)) if !dir.is_empty() => (PathBuf::from(dir), TLS_DIR_ENV.to_owned()),
        _ => (beside, format!("beside {}", secret_file.display())),
    };
    let files = TlsFiles::in_dir(&dir);
    files.check().and_then(|()| weft_auth::tls::install_client(&files)).map_err(|e| {
        cli_error!(
            "meta is {url}, which asks for a certificate of the cluster CA: {e} (the TLS \
             directory {}, {from}). `weft up --dir DIR` writes one to DIR/{TLS_DIR}/{ADMIN}; \
             pass --tls-dir or set {TLS_DIR_ENV}",
            dir.display()
        )
    })
}

/// `weft cert`: the cluster's certificates.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Reissue host certificates in place, under the running cluster: every process picks
    /// up its new certificate at its next handshake (within a second), connections open
    /// keep theirs, and old and new are both accepted until the old ones expire, so no
    /// request fails and nothing restarts.
    Rotate(RotateArgs),
}

#[derive(Debug, Args)]
pub struct RotateArgs {
    /// The cluster directory (`weft up --dir`, `weft init --dir`): its CA in DIR/tls issues,
    /// and every TLS directory DIR/tls/<host> (and `weft init --hosts`'s host directory
    /// DIR/<host>, to copy to its host again) is reissued.
    #[arg(long, default_value = "./weft-data")]
    pub dir: PathBuf,
    /// Reissue only these hosts (names as in `weft status`: meta-1, node-3, s3-1, admin…).
    #[arg(value_name = "HOST")]
    pub hosts: Vec<String>,
    /// The new certificates' lifetime, in days.
    #[arg(long, default_value_t = HOST_DAYS)]
    pub days: u32,
    /// Print one JSON object per reissued certificate.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: CertCommand) -> Result<(), CliError> {
    match command {
        CertCommand::Rotate(args) => rotate(args),
    }
}

fn rotate(args: RotateArgs) -> Result<(), CliError> {
    if args.days == 0 {
        return Err(cli_error!("--days must be positive"));
    }
    let reissued = reissue_hosts(&args.dir, &args.hosts, args.days)?;
    for (host, dir, serial) in &reissued {
        match args.json {
            true => crate::cluster_cli::print_json(
                &json!({ "host": host, "dir": dir, "serial": serial, "days": args.days }),
            ),
            false => println!("{host}: new certificate {serial}, valid {} days", args.days),
        }
    }
    if !args.json {
        eprintln!(
            "weft cert rotate: {} certificates reissued; running processes use them from \
             their next handshake",
            reissued.len()
        );
    }
    Ok(())
}

/// Reissues the host certificates of cluster directory `dir` (only `hosts`, when given),
/// valid `days` days: `weft up`'s TLS directories (DIR/tls/<host>), then `weft init
/// --hosts`'s host directories (DIR/<host>, which hold their host's certificate). Returns
/// (host, its TLS directory, the new certificate's serial) of each.
pub fn reissue_hosts(
    dir: &Path,
    hosts: &[String],
    days: u32,
) -> Result<Vec<(String, PathBuf, String)>, CliError> {
    let at = ca_dir(dir);
    let ca = Ca::open(&at).map_err(|e| cli_error!("{e}"))?;
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for parent in [&at, dir] {
        let entries = std::fs::read_dir(parent)
            .map_err(|e| cli_error!("cannot list {}: {e}", parent.display()))?;
        for entry in entries.filter_map(|entry| entry.ok()) {
            let (Ok(name), path) = (entry.file_name().into_string(), entry.path()) else {
                continue;
            };
            let tls_dir = path.join(weft_auth::tls::CERT_FILE).is_file()
                && path.join(weft_auth::tls::CA_FILE).is_file();
            if tls_dir && !found.iter().any(|(known, _)| *known == name) {
                found.push((name, path));
            }
        }
    }
    found.sort();
    for wanted in hosts {
        if !found.iter().any(|(name, _)| name == wanted) {
            let names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
            return Err(cli_error!(
                "{} has no TLS directory for {wanted:?}; it has: {}",
                dir.display(),
                names.join(", ")
            ));
        }
    }
    if !hosts.is_empty() {
        found.retain(|(name, _)| hosts.contains(name));
    }
    let mut reissued = Vec::new();
    for (host, tls_dir) in found {
        let serial = ca.reissue(&tls_dir, days).map_err(|e| cli_error!("{host}: {e}"))?;
        reissued.push((host, tls_dir, serial));
    }
    Ok(reissued)
}
