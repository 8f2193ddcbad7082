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

use std::{fmt::Write as _, net::IpAddr, os::unix::fs::PermissionsExt, path::Path};

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
    let off_loopback = hosts.iter().any(|h| !h.address.is_loopback());
    if off_loopback && !plan.insecure_plaintext {
        return Err(cli_error!(
            "these hosts' processes would listen on addresses other than loopback, and weft \
             does not encrypt its links yet: requests, units and signatures would cross the \
             network in clear. Add --insecure-plaintext to write such a deployment anyway"
        ));
    }
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
    let metas: Vec<&Host> =
        if plan.store.is_some() { hosts.iter().collect() } else { vec![&hosts[0]] };
    let meta_urls: Vec<String> = metas
        .iter()
        .map(|h| format!("http://{}", std::net::SocketAddr::new(h.address, META_PORT)))
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
                 failure-domain = \"rack\"\n{plaintext}",
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
                 listen = {}\nkey-file = {}\nrack = {index}\ndisk = [{}]\n{plaintext}",
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
                "# weft serve repair --config {etc}/repair.toml\nmeta = {}\nsecret-file = {}\n",
                quoted(&meta_list),
                quoted(&secret_file)
            );
            write_file("repair.toml", &text, &mut files)?;
        }
        if index < gateways {
            let text = format!(
                "# weft serve s3 --config {etc}/s3.toml\nmeta = {}\nlisten = {}\nsecret-file = {}\n{plaintext}",
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
        lines.push(format!(
            "{} ({}): {} → copy to {etc}",
            host.name,
            host.address,
            files.join(", ")
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
