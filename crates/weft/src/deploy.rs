//! `weft init --hosts`: one directory per host, holding the configuration files (`weft serve
//! … --config`) and keys of the processes that host runs, ready to copy to it.
//!
//! Invariants:
//! - The cluster secret is made once (DIR/cluster.secret) and copied only into the
//!   directories of hosts that run a process needing it (meta, the repair executor, a
//!   gateway); a node gets only its own key (DIR/HOST/node-N.key), never the secret.
//! - Node ids are 1..=hosts·nodes-per-host, host by host; node N listens on port 7700 + N of
//!   its host's address, and is in rack = its host's index, so meta's `--failure-domain
//!   rack` keeps a group's units on distinct hosts.
//! - Several metas need one shared store (`--store postgres://…`); without it only the
//!   first host runs a meta (redb), and the others point at it.
//! - Nothing is written when a check fails (bad host, existing files): every check runs
//!   before the first write.
//! - Unless `--insecure-plaintext`, every link is TLS: the cluster CA is made once in
//!   DIR/tls (as `weft up` keeps it, reused when present), each host's directory gets its
//!   certificate for its name and address (`ca.pem`, `cert.pem`, `key.pem`, the TLS
//!   directory every config on that host names as `tls-dir`), meta's URLs are https://, and
//!   DIR/tls/admin is the operator's identity for CLI commands run with DIR's secret.
//! - DIR/s3.json names the first gateway's endpoint, the region and (under TLS) the CA, so
//!   `weft key create --env` with DIR's secret prints what S3 clients need.

use std::{fmt::Write as _, net::IpAddr, os::unix::fs::PermissionsExt, path::Path};

use weft_auth::ca::{HostNames, HOST_DAYS};

use crate::{cli_error, CliError};

/// The meta port on every host.
const META_PORT: u16 = 7700;
/// The S3 port on gateway hosts.
const S3_PORT: u16 = 9000;

/// One host of a deployment.
#[derive(Debug, Clone)]
struct Host {
    name: String,
    address: IpAddr,
}

fn parse_hosts(hosts: &[String]) -> Result<Vec<Host>, CliError> {
    let mut out: Vec<Host> = Vec::new();
    for (i, entry) in hosts.iter().enumerate() {
        let (name, address) = match entry.split_once('=') {
            Some((name, address)) => (name.to_owned(), address),
            None => (format!("host-{}", i + 1), entry.as_str()),
        };
        let address: IpAddr = address.parse().map_err(|_| {
            cli_error!(
                "--hosts: {address:?} is not an IP address; give each host as IP or NAME=IP \
                 (e.g. a=10.0.0.11): processes listen on it"
            )
        })?;
        if name.is_empty()
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(cli_error!("--hosts: {name:?} is not a host name (letters, digits, -_.)"));
        }
        if name == crate::cert_cli::TLS_DIR {
            return Err(cli_error!(
                "--hosts: {name:?} is taken: DIR/{name} holds the cluster's CA"
            ));
        }
        if out.iter().any(|h| h.name == name || h.address == address) {
            return Err(cli_error!("--hosts: {name} ({address}) is given twice"));
        }
        out.push(Host { name, address });
    }
    if out.is_empty() {
        return Err(cli_error!("--hosts needs at least one host"));
    }
    Ok(out)
}

/// `template` with `{host}` replaced by the host's name.
fn on_host(template: &Path, host: &Host) -> String {
    template.display().to_string().replace("{host}", &host.name)
}

/// A TOML string literal.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

/// What `weft init --hosts` was asked.
#[derive(Debug)]
pub struct Plan<'a> {
    pub dir: &'a Path,
    pub hosts: &'a [String],
    pub nodes_per_host: u32,
    pub disks_per_node: u32,
    pub store: Option<&'a str>,
    pub gateways: u32,
    pub s3_endpoint_name: Option<&'a str>,
    pub etc_dir: &'a Path,
    pub data_dir: &'a Path,
    pub insecure_plaintext: bool,
}

/// Writes the per-host directories; returns the lines to print.
pub fn write(plan: &Plan<'_>) -> Result<Vec<String>, CliError> {
    let hosts = parse_hosts(plan.hosts)?;
    if !(1..=64).contains(&plan.nodes_per_host) || !(1..=64).contains(&plan.disks_per_node) {
        return Err(cli_error!("--nodes-per-host and --disks-per-node must be 1 to 64"));
    }
    let tls = !plan.insecure_plaintext;
    // The gateways' shared name: an address, or a DNS name a certificate can carry.
    let s3_name: Option<(String, Option<IpAddr>)> = match plan.s3_endpoint_name {
        None => None,
        Some(name) => match name.parse::<IpAddr>() {
            Ok(ip) => Some((name.to_owned(), Some(ip))),
            Err(_)
                if name.split('.').all(|label| {
                    !label.is_empty()
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                }) =>
            {
                Some((name.to_owned(), None))
            }
            Err(_) => {
                return Err(cli_error!(
                    "--s3-endpoint-name: {name:?} is neither an IP address nor a DNS name"
                ))
            }
        },
    };
    let secret_path = plan.dir.join(crate::cluster_cli::SECRET_FILE_NAME);
    for host in &hosts {
        let dir = plan.dir.join(&host.name);
        if dir.exists() {
            return Err(cli_error!(
                "{} exists already; weft init never overwrites a host's files",
                dir.display()
            ));
        }
    }
    std::fs::create_dir_all(plan.dir)
        .map_err(|e| cli_error!("cannot create {}: {e}", plan.dir.display()))?;
    let secret = if secret_path.exists() {
        weft_auth::ClusterSecret::read_file(&secret_path)?
    } else {
        weft_auth::ClusterSecret::create_file(&secret_path)?
    };
    let ca = match tls {
        true => {
            let ca = crate::cert_cli::open_or_create_ca(plan.dir)?;
            crate::cert_cli::issue_host(&ca, plan.dir, crate::cert_cli::ADMIN, vec![], vec![])?;
            Some(ca)
        }
        false => None,
    };
    let scheme = if tls { "https" } else { "http" };
    let metas: Vec<&Host> =
        if plan.store.is_some() { hosts.iter().collect() } else { vec![&hosts[0]] };
    let meta_urls: Vec<String> = metas
        .iter()
        .map(|h| format!("{scheme}://{}", std::net::SocketAddr::new(h.address, META_PORT)))
        .collect();
    let meta_list = meta_urls.join(",");
    let gateways = (plan.gateways as usize).min(hosts.len());
    let plaintext = if plan.insecure_plaintext { "insecure-plaintext = true\n" } else { "" };
    let mut lines = Vec::new();
    let mut next_node = 1u32;
    for (index, host) in hosts.iter().enumerate() {
        let dir = plan.dir.join(&host.name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| cli_error!("cannot create {}: {e}", dir.display()))?;
        let etc = on_host(plan.etc_dir, host);
        let data = on_host(plan.data_dir, host);
        let secret_file = format!("{etc}/{}", crate::cluster_cli::SECRET_FILE_NAME);
        // Every process of this host shows (and serves) the host's certificate.
        let link = match &ca {
            Some(_) => format!("tls-dir = {}\n", quoted(&etc)),
            None => plaintext.to_owned(),
        };
        let mut files = Vec::new();
        let write_file =
            |name: &str, text: &str, files: &mut Vec<String>| -> Result<(), CliError> {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| cli_error!("cannot write {}: {e}", path.display()))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| cli_error!("{}: {e}", path.display()))?;
                files.push(name.to_owned());
                Ok(())
            };
        let needs_secret =
            metas.iter().any(|m| m.name == host.name) || index == 0 || index < gateways;
        if metas.iter().any(|m| m.name == host.name) {
            let mut text = format!(
                "# weft serve meta --config {etc}/meta.toml\ndir = {}\nlisten = {}\nsecret-file = {}\n\
                 failure-domain = \"rack\"\n{link}",
                quoted(&format!("{data}/meta")),
                quoted(&std::net::SocketAddr::new(host.address, META_PORT).to_string()),
                quoted(&secret_file),
            );
            if let Some(store) = plan.store {
                let _ = writeln!(text, "store = {}", quoted(store));
            }
            write_file("meta.toml", &text, &mut files)?;
        }
        for _ in 0..plan.nodes_per_host {
            let id = next_node;
            next_node += 1;
            let disks: Vec<String> = (0..plan.disks_per_node)
                .map(|j| quoted(&format!("{data}/node-{id}/disk-{j}")))
                .collect();
            let text = format!(
                "# weft serve node --config {etc}/node-{id}.toml\nmeta = {}\nid = {id}\n\
                 listen = {}\nkey-file = {}\nrack = {index}\ndisk = [{}]\n{link}",
                quoted(&meta_list),
                quoted(&std::net::SocketAddr::new(host.address, META_PORT + id as u16).to_string()),
                quoted(&format!("{etc}/node-{id}.key")),
                disks.join(", "),
            );
            write_file(&format!("node-{id}.toml"), &text, &mut files)?;
            let key = dir.join(format!("node-{id}.key"));
            secret.node_key(id).write_node_file(&key).map_err(CliError::from)?;
            files.push(format!("node-{id}.key"));
        }
        if index == 0 {
            let text = format!(
                "# weft serve repair --config {etc}/repair.toml\nmeta = {}\nsecret-file = {}\n{}",
                quoted(&meta_list),
                quoted(&secret_file),
                if ca.is_some() { link.as_str() } else { "" },
            );
            write_file("repair.toml", &text, &mut files)?;
        }
        if index < gateways {
            let text = format!(
                "# weft serve s3 --config {etc}/s3.toml\nmeta = {}\nlisten = {}\nsecret-file = {}\n{link}",
                quoted(&meta_list),
                quoted(&std::net::SocketAddr::new(host.address, S3_PORT).to_string()),
                quoted(&secret_file)
            );
            write_file("s3.toml", &text, &mut files)?;
        }
        if needs_secret {
            let copy = dir.join(crate::cluster_cli::SECRET_FILE_NAME);
            std::fs::copy(&secret_path, &copy)
                .and_then(|_| {
                    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600))
                })
                .map_err(|e| cli_error!("cannot write {}: {e}", copy.display()))?;
            files.push(crate::cluster_cli::SECRET_FILE_NAME.to_owned());
        }
        if let Some(ca) = &ca {
            // Named by its host name too (when it is one a certificate can carry).
            let dns = match host.name.contains('_') {
                true => vec![],
                false => vec![host.name.clone()],
            };
            let mut names = HostNames { name: host.name.clone(), dns, ips: vec![host.address] };
            if let (true, Some((name, ip))) = (index < gateways, &s3_name) {
                match ip {
                    Some(ip) => names.ips.push(*ip),
                    None => names.dns.push(name.clone()),
                }
            }
            ca.write_host(&dir, &names, HOST_DAYS).map_err(|e| cli_error!("{e}"))?;
            files.extend(["ca.pem", "cert.pem", "key.pem"].map(str::to_owned));
        }
        lines.push(format!(
            "{} ({}): {} → copy to {etc}",
            host.name,
            host.address,
            files.join(", ")
        ));
    }
    if gateways > 0 {
        // What S3 clients need (weft key create --env reads it beside the secret).
        let first = match &s3_name {
            Some((_, Some(ip))) => std::net::SocketAddr::new(*ip, S3_PORT).to_string(),
            Some((name, None)) => format!("{name}:{S3_PORT}"),
            None => std::net::SocketAddr::new(hosts[0].address, S3_PORT).to_string(),
        };
        let mut s3 = serde_json::json!({
            "endpoint": format!("{scheme}://{first}"),
            "region": weft_s3::DEFAULT_REGION,
        });
        if tls {
            let ca = crate::cert_cli::ca_dir(plan.dir).join(weft_auth::tls::CA_FILE);
            let ca = ca.canonicalize().unwrap_or(ca);
            s3["ca"] = serde_json::json!(ca);
        }
        let path = plan.dir.join(crate::up::S3_FILE);
        let text = serde_json::to_string_pretty(&s3).expect("json serialises") + "\n";
        std::fs::write(&path, text)
            .map_err(|e| cli_error!("cannot write {}: {e}", path.display()))?;
    }
    if tls {
        lines.push(format!(
            "TLS on every link: the cluster CA is {0}/{1}/ca.pem (its key {0}/{1}/ca.key stays \
             here), each host's certificate is in its directory, and {0}/{1}/{2} is the \
             identity of weft commands run with {0}/{3}",
            plan.dir.display(),
            crate::cert_cli::TLS_DIR,
            crate::cert_cli::ADMIN,
            crate::cluster_cli::SECRET_FILE_NAME,
        ));
    }
    lines.push(format!(
        "once meta runs, enrol the nodes (their keys are in the host directories): \
         WEFT_META={meta_list} WEFT_SECRET_FILE={} sh -c 'for id in $(seq 1 {}); do weft node \
         add $id --no-key-file; done'",
        secret_path.display(),
        next_node - 1
    ));
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_with_and_without_names_and_refuse_with_the_fix() {
        let hosts = parse_hosts(&["a=10.0.0.1".into(), "10.0.0.2".into()]).unwrap();
        assert_eq!((hosts[0].name.as_str(), hosts[1].name.as_str()), ("a", "host-2"));
        for (bad, says) in [
            (vec!["a.example".to_owned()], "not an IP address"),
            (vec!["a=10.0.0.1".into(), "b=10.0.0.1".into()], "given twice"),
            (vec!["a b=10.0.0.1".into()], "not a host name"),
            (vec![], "at least one host"),
        ] {
            let error = parse_hosts(&bad).unwrap_err().to_string();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }
}
