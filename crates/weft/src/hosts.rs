//! Hosts on one machine: `weft up --netns` gives every process a network namespace of its
//! own, with one address on one bridge, so every byte between two processes crosses a real
//! (virtual) interface and a process reaches another only by that one's address.
//!
//! Shape: a bridge `wb<tag>` in the root namespace holds the subnet's first address (users
//! and clients run there and reach every host through it); each host is a namespace
//! `weft-<tag>-<host>` whose `eth0` is one end of a veth pair, the other end (`wv<tag>-<n>`)
//! enslaved to the bridge. Hosts talk to each other across the bridge, to the root namespace
//! through its address, and to nothing else (no route leaves the subnet).
//!
//! Invariants:
//! - Every name made here carries the cluster's tag ([`tag_of`]: 6 hex digits of a hash of
//!   the canonical `--dir`), so a cleanup removes exactly one cluster's namespaces and links,
//!   and clusters on different directories never share one.
//! - A host's address is fixed by its name ([`host_offset`]), so it keeps it across restarts
//!   of `weft up` (nodes' endpoints in meta stay right).
//! - [`Hosts`] removes what it made when it is dropped; [`remove_leftovers`] removes what a
//!   killed `weft up` left behind, found by tag: root-side veths first (which deletes both
//!   ends at once), then namespaces, then the bridge. Deleting a namespace is completed by
//!   the kernel asynchronously; [`remove_leftovers`] waits until its links are gone.
//! - Nothing here runs without `--netns`; [`preflight`] refuses, naming what is missing,
//!   unless weft runs as root and iproute2's `ip` is installed.

use std::{
    fs::File,
    net::Ipv4Addr,
    os::fd::{AsRawFd, RawFd},
    os::unix::process::CommandExt,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use crate::{cli_error, CliError};

/// The subnet `weft up --netns` uses when `--subnet` is not given: 198.18.0.0/15 is set
/// aside for benchmarking (RFC 2544) and never routed.
pub const DEFAULT_SUBNET: &str = "198.18.0.0/24";

/// How long a removal waits for the kernel to finish deleting namespaces' links.
const REMOVE_WAIT: Duration = Duration::from_secs(10);

/// An IPv4 subnet, e.g. `198.18.0.0/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    network: Ipv4Addr,
    prefix: u8,
}

impl std::str::FromStr for Subnet {
    type Err = String;

    fn from_str(text: &str) -> Result<Subnet, String> {
        let (address, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a subnet: write it as 198.18.0.0/24"))?;
        let address: Ipv4Addr =
            address.parse().map_err(|_| format!("{address:?} is not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=28).contains(p))
            .ok_or_else(|| format!("prefix /{prefix} must be 8 to 28 (hosts need room)"))?;
        let mask = u32::MAX << (32 - prefix);
        if u32::from(address) & !mask != 0 {
            return Err(format!(
                "{text} has host bits set; the network is {}/{prefix}",
                Ipv4Addr::from(u32::from(address) & mask)
            ));
        }
        Ok(Subnet { network: address, prefix })
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Subnet {
    /// Addresses a host may take: all but the network and broadcast addresses.
    pub fn usable(&self) -> u32 {
        (1u32 << (32 - self.prefix)) - 2
    }

    /// The address `offset` past the network address (1: the bridge's), if it is a host's.
    pub fn address(&self, offset: u32) -> Option<Ipv4Addr> {
        (offset >= 1 && offset <= self.usable())
            .then(|| Ipv4Addr::from(u32::from(self.network) + offset))
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

/// Where a host sits in the subnet: the bridge is 1, then fixed places by role, nodes last.
/// `None` for a name that is no host's.
pub fn host_offset(name: &str) -> Option<u32> {
    let numbered = |prefix: &str| name.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
    match name {
        "postgres" => Some(2),
        "repair" => Some(3),
        _ => {
            if let Some(i) = numbered("s3-").filter(|i| (1..=4).contains(i)) {
                Some(3 + i)
            } else if let Some(i) = numbered("meta-").filter(|i| (1..=9).contains(i)) {
                Some(9 + i)
            } else {
                numbered("node-").filter(|&i| i >= 1).map(|i| 20 + i)
            }
        }
    }
}

/// The tag every name of the cluster in `dir` carries: 6 hex digits of FNV-1a of its path.
pub fn tag_of(dir: &Path) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in dir.as_os_str().as_encoded_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{:06x}", hash & 0x00ff_ffff)
}

/// Refuses unless `--netns` can work here: root (namespaces and links need it) and iproute2.
pub fn preflight() -> Result<(), CliError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(cli_error!(
            "--netns needs root: it creates a network namespace per process, veths and a \
             bridge (run weft up as root, or drop --netns)"
        ));
    }
    match Command::new("ip").arg("-V").output() {
        Ok(output) if output.status.success() => Ok(()),
        _ => Err(cli_error!(
            "--netns needs iproute2's `ip` command, which is not installed here (Debian: \
             apt-get install iproute2)"
        )),
    }
}

/// Runs `ip ARGS`: its stdout, or an error with its stderr.
pub(crate) fn ip(args: &[&str]) -> Result<String, CliError> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| cli_error!("cannot run ip {} (iproute2): {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(cli_error!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// `ip ARGS`' stdout, empty when it fails.
fn ip_output(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Names of the network namespaces on this machine.
pub fn namespaces() -> Vec<String> {
    ip_output(&["netns", "list"])
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Names of the links in the root namespace (`veth0`, not `veth0@if2`).
pub fn links() -> Vec<String> {
    ip_output(&["-o", "link", "show"])
        .lines()
        .filter_map(|line| {
            let name = line.split(": ").nth(1)?;
            Some(name.split('@').next().unwrap_or(name).to_owned())
        })
        .collect()
}

/// A root-namespace link whose IPv4 network overlaps `subnet` (routes to it would be
/// ambiguous), with that network, if one does.
fn overlapping(subnet: Subnet) -> Option<(String, String)> {
    ip_output(&["-o", "-4", "addr", "show"]).lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let link = words.nth(1)?.to_owned();
        let cidr = words.skip_while(|w| *w != "inet").nth(1)?;
        let (address, prefix) = cidr.split_once('/')?;
        let (address, prefix): (Ipv4Addr, u32) = (address.parse().ok()?, prefix.parse().ok()?);
        // Two networks overlap when the shorter prefix's mask maps both to one network.
        let shorter = prefix.min(u32::from(subnet.prefix));
        let mask = if shorter == 0 { 0 } else { u32::MAX << (32 - shorter) };
        (u32::from(address) & mask == u32::from(subnet.network) & mask)
            .then(|| (link, cidr.to_owned()))
    })
}

fn bridge_name(tag: &str) -> String {
    format!("wb{tag}")
}

fn veth_prefix(tag: &str) -> String {
    format!("wv{tag}-")
}

fn netns_prefix(tag: &str) -> String {
    format!("weft-{tag}-")
}

/// Removes every namespace and link of the cluster tagged `tag` (what a killed `weft up`
/// left, or what a clean one made), and returns how many it removed.
pub fn remove_leftovers(tag: &str) -> Result<usize, CliError> {
    let mut removed = 0;
    let ours = |name: &String| name.starts_with(&veth_prefix(tag)) || *name == bridge_name(tag);
    for veth in links().iter().filter(|n| n.starts_with(&veth_prefix(tag))) {
        // A veth already gone with its namespace is not an error.
        if ip(&["link", "del", veth]).is_ok() {
            removed += 1;
        }
    }
    for netns in namespaces().iter().filter(|n| n.starts_with(&netns_prefix(tag))) {
        ip(&["netns", "del", netns])?;
        removed += 1;
    }
    if links().contains(&bridge_name(tag)) {
        ip(&["link", "del", &bridge_name(tag)])?;
        removed += 1;
    }
    let deadline = Instant::now() + REMOVE_WAIT;
    while links().iter().any(ours) {
        if Instant::now() > deadline {
            return Err(cli_error!(
                "links of an earlier --netns cluster ({}*) are still there after {} s",
                veth_prefix(tag),
                REMOVE_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(removed)
}

/// One host: a network namespace with one address on the bridge.
#[derive(Debug)]
pub struct Host {
    /// As `weft status` names it: `meta-1`, `node-3`, `s3-1`, `repair`, `postgres`.
    pub name: String,
    pub netns: String,
    pub address: Ipv4Addr,
    /// The root namespace's end of its veth (on the bridge).
    pub veth: String,
    /// The namespace, held open so a child can enter it (setns) between fork and exec.
    file: File,
}

impl Host {
    /// Makes `command` start inside this host's namespace.
    pub fn enter(&self, command: &mut Command) {
        let fd: RawFd = self.file.as_raw_fd();
        // SAFETY: the closure runs in the child between fork and exec and calls only setns,
        // which is async-signal-safe; the descriptor stays open in the parent (Hosts holds
        // the file) until after the child has exec'd.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
}

/// The hosts of one `--netns` cluster, removed when dropped.
#[derive(Debug)]
pub struct Hosts {
    tag: String,
    subnet: Subnet,
    mtu: u32,
    hosts: Vec<Host>,
}

impl Hosts {
    /// Creates the bridge and one host per name (each at [`host_offset`]), after removing
    /// whatever an earlier run of this cluster left.
    pub fn create(
        dir: &Path,
        subnet: Subnet,
        mtu: u32,
        names: &[String],
    ) -> Result<Hosts, CliError> {
        let tag = tag_of(dir);
        remove_leftovers(&tag)?;
        let gateway = subnet.address(1).expect("a subnet has a first address");
        if let Some((link, network)) = overlapping(subnet) {
            return Err(cli_error!(
                "--subnet {subnet} overlaps {network} on {link} (another --netns cluster?): \
                 give a --subnet of its own"
            ));
        }
        let mut hosts = Hosts { tag: tag.clone(), subnet, mtu, hosts: Vec::new() };
        let mtu = mtu.to_string();
        let bridge = bridge_name(&tag);
        let cidr = |a: Ipv4Addr| format!("{a}/{}", subnet.prefix());
        ip(&["link", "add", &bridge, "mtu", &mtu, "type", "bridge"])?;
        ip(&["addr", "add", &cidr(gateway), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for (n, name) in names.iter().enumerate() {
            let offset = host_offset(name)
                .ok_or_else(|| cli_error!("{name:?} is not a host name weft up gives"))?;
            let address = subnet.address(offset).ok_or_else(|| {
                cli_error!(
                    "host {name} needs address {offset} of {subnet}, which has only {}; \
                     give a larger --subnet (e.g. a /16)",
                    subnet.usable()
                )
            })?;
            let netns = format!("{}{name}", netns_prefix(&tag));
            let veth = format!("{}{n}", veth_prefix(&tag));
            ip(&["netns", "add", &netns])?;
            ip(&[
                "link", "add", &veth, "mtu", &mtu, "type", "veth", "peer", "name", "eth0", "mtu",
                &mtu, "netns", &netns,
            ])?;
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            ip(&["-n", &netns, "addr", "add", &cidr(address), "dev", "eth0"])?;
            ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &netns, "link", "set", "lo", "up"])?;
            let path = format!("/run/netns/{netns}");
            let file = File::open(&path).map_err(|e| cli_error!("cannot open {path}: {e}"))?;
            hosts.hosts.push(Host { name: name.clone(), netns, address, veth, file });
        }
        Ok(hosts)
    }

    pub fn get(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    pub fn all(&self) -> &[Host] {
        &self.hosts
    }

    pub fn subnet(&self) -> Subnet {
        self.subnet
    }

    /// The MTU of the bridge and every veth.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    pub fn bridge(&self) -> String {
        bridge_name(&self.tag)
    }

    /// The root namespace's address on the bridge (where clients come from).
    pub fn gateway(&self) -> Ipv4Addr {
        self.subnet.address(1).expect("a subnet has a first address")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Err(error) = remove_leftovers(&self.tag) {
            eprintln!("weft up: warning: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_parse_and_refuse_with_the_fix() {
        let subnet: Subnet = DEFAULT_SUBNET.parse().unwrap();
        assert_eq!(subnet.to_string(), "198.18.0.0/24");
        assert_eq!(subnet.usable(), 254);
        assert_eq!(subnet.address(1), Some(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(subnet.address(254), Some(Ipv4Addr::new(198, 18, 0, 254)));
        assert_eq!(subnet.address(255), None);
        assert_eq!(subnet.address(0), None);
        let wide: Subnet = "10.9.0.0/16".parse().unwrap();
        assert_eq!(wide.address(300), Some(Ipv4Addr::new(10, 9, 1, 44)));
        for (bad, says) in [
            ("198.18.0.0", "write it as"),
            ("198.18.0.1/24", "host bits set; the network is 198.18.0.0/24"),
            ("198.18.0.0/30", "8 to 28"),
            ("nope/24", "not an IPv4 address"),
        ] {
            let error = bad.parse::<Subnet>().unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn hosts_have_distinct_fixed_places() {
        let mut names: Vec<String> =
            ["postgres", "repair", "s3-1", "meta-1", "meta-9"].map(str::to_owned).to_vec();
        names.extend((1..=200).map(|i| format!("node-{i}")));
        let mut offsets: Vec<u32> = names.iter().map(|n| host_offset(n).unwrap()).collect();
        assert!(offsets.iter().all(|&o| o >= 2), "1 is the bridge's");
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), names.len(), "two hosts share an address");
        for bad in ["node-0", "meta-10", "s3-0", "db", "node-x"] {
            assert_eq!(host_offset(bad), None, "{bad}");
        }
    }

    #[test]
    fn tags_fit_link_names_and_differ_by_directory() {
        let a = tag_of(Path::new("/tmp/a"));
        let b = tag_of(Path::new("/tmp/b"));
        assert_eq!(a.len(), 6);
        assert_ne!(a, b);
        // Linux link names are at most 15 bytes.
        assert!(format!("{}9999", veth_prefix(&a)).len() <= 15);
        assert!(bridge_name(&a).len() <= 15);
    }
}
