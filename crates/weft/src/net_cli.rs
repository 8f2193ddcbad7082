//! `weft net`: network drills on a `weft up --netns` cluster: cut hosts off (from everyone, or
//! only from some), heal them, delay their links, and show what is cut.
//!
//! Invariants:
//! - The hosts are those DIR/cluster.json names (`netns.hosts`), so a drill only ever touches
//!   this cluster's namespaces and links; a name that is no host of it is refused with the
//!   list of names.
//! - State lives in the kernel, not in a file: a host cut off from everyone has its bridge
//!   veth down; a host cut off from some has blackhole routes to their addresses in its
//!   namespace (and, unless `--one-way`, they to its address). `weft net show` reads both
//!   back, so it is right even after another tool or a crash changed them.
//! - `heal` with no host heals every host (links up, every blackhole route removed); with
//!   hosts, exactly their cuts (their links, their routes, and others' routes to them).
//! - A delay needs `tc netem`; where the kernel lacks it the command fails saying so and
//!   names `weft up --net-model`, the in-process model, instead.

use std::{net::Ipv4Addr, path::PathBuf, process::Command};

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::{cli_error, hosts::ip, CliError};

/// Network drills on a `weft up --netns` cluster: partition, heal, delay, show.
///
/// Hosts are named as `weft status` and DIR/cluster.json name them: meta-1, node-3, s3-1,
/// repair, postgres. Needs root (it changes links and routes), as `weft up --netns` does.
///
/// Examples:
///   weft net partition node-3                      # node 3 reaches no one, no one reaches it
///   weft net partition meta-1 --from meta-2        # the metas apart, each still on the store
///   weft net partition node-1 --from node-2 --one-way   # node 1 cannot send to node 2
///   weft net show
///   weft net heal node-3
///   weft net heal                                  # every cut
#[derive(Debug, Subcommand)]
#[command(verbatim_doc_comment)]
pub enum NetCommand {
    /// Cut hosts off: from every other host and from this machine, or only from --from.
    Partition(PartitionArgs),
    /// Undo cuts: of the named hosts, or of every host.
    Heal(HealArgs),
    /// Delay (and optionally drop) a host's outgoing packets with tc netem.
    Delay(DelayArgs),
    /// What is cut: each host's link, and whom it cannot reach.
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct DirArg {
    /// The cluster's directory (`weft up --dir`).
    #[arg(long, default_value = "./weft-data")]
    pub dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PartitionArgs {
    /// Hosts to cut off.
    #[arg(required = true, value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Cut them off only from these hosts (the rest of the cluster and this machine still
    /// reach them).
    #[arg(long, value_name = "HOST", num_args = 1..)]
    pub from: Vec<String>,
    /// With --from: drop only what HOSTs send to the --from hosts (their packets still
    /// arrive; a TCP connection fails either way, as its replies are lost).
    #[arg(long, requires = "from")]
    pub one_way: bool,
    #[command(flatten)]
    pub dir: DirArg,
}

#[derive(Debug, Args)]
pub struct HealArgs {
    /// Hosts to heal [default: every host].
    #[arg(value_name = "HOST")]
    pub hosts: Vec<String>,
    #[command(flatten)]
    pub dir: DirArg,
}

#[derive(Debug, Args)]
pub struct DelayArgs {
    /// The host whose outgoing packets are delayed.
    pub host: String,
    /// Delay, e.g. 20ms (0ms removes it).
    pub delay: String,
    /// Share of packets dropped, e.g. 1%.
    #[arg(long)]
    pub loss: Option<String>,
    #[command(flatten)]
    pub dir: DirArg,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub dir: DirArg,
}

/// One host of the cluster, as cluster.json records it.
#[derive(Debug, Clone)]
struct NetHost {
    name: String,
    netns: String,
    address: Ipv4Addr,
    veth: String,
}

fn hosts_of(dir: &std::path::Path) -> Result<Vec<NetHost>, CliError> {
    let file = dir.join(crate::up::CLUSTER_FILE);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        cli_error!(
            "cannot read {} ({e}): is a weft up --netns cluster running there?",
            file.display()
        )
    })?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| cli_error!("{} is not JSON: {e}", file.display()))?;
    if value["running"] != true {
        return Err(cli_error!("the cluster in {} is not running", dir.display()));
    }
    let hosts = value["netns"]["hosts"].as_array().ok_or_else(|| {
        cli_error!("the cluster in {} runs without --netns: it has no hosts to cut", dir.display())
    })?;
    hosts
        .iter()
        .map(|h| {
            let field = |name: &str| {
                h[name]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| cli_error!("{}: a host without {name}: {h}", file.display()))
            };
            Ok(NetHost {
                name: field("name")?,
                netns: field("netns")?,
                address: field("address")?
                    .parse()
                    .map_err(|e| cli_error!("{}: bad address in {h}: {e}", file.display()))?,
                veth: field("veth")?,
            })
        })
        .collect()
}

/// The hosts `names` stand for, or an error listing the names there are.
fn pick<'a>(hosts: &'a [NetHost], names: &[String]) -> Result<Vec<&'a NetHost>, CliError> {
    names
        .iter()
        .map(|name| {
            hosts.iter().find(|h| h.name == *name).ok_or_else(|| {
                let known: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
                cli_error!(
                    "{name:?} is not a host of this cluster; its hosts: {}",
                    known.join(", ")
                )
            })
        })
        .collect()
}

fn blackhole(host: &NetHost, to: Ipv4Addr) -> Result<(), CliError> {
    ip(&["-n", &host.netns, "route", "replace", "blackhole", &format!("{to}/32")]).map(drop)
}

/// The addresses `host` has blackhole routes to.
fn blackholes(host: &NetHost) -> Result<Vec<Ipv4Addr>, CliError> {
    Ok(ip(&["-n", &host.netns, "route", "show", "type", "blackhole"])?
        .lines()
        .filter_map(|line| {
            let target = line.split_whitespace().nth(1)?;
            target.split('/').next()?.parse().ok()
        })
        .collect())
}

fn link_up(host: &NetHost) -> Result<bool, CliError> {
    let line = ip(&["-o", "link", "show", "dev", &host.veth])?;
    let flags = line.split('<').nth(1).and_then(|rest| rest.split('>').next()).unwrap_or("");
    Ok(flags.split(',').any(|f| f == "UP"))
}

fn delay_of(host: &NetHost) -> Option<String> {
    let output = Command::new("ip")
        .args(["netns", "exec", &host.netns, "tc", "qdisc", "show", "dev", "eth0"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().find(|l| l.contains("netem"))?;
    Some(line.split("netem").nth(1).unwrap_or("").trim().to_owned())
}

/// What `weft net show` prints, as JSON.
fn state(hosts: &[NetHost]) -> Result<Value, CliError> {
    let name_of = |address: Ipv4Addr| {
        hosts
            .iter()
            .find(|h| h.address == address)
            .map_or_else(|| address.to_string(), |h| h.name.clone())
    };
    let mut rows = Vec::new();
    for host in hosts {
        let cut_from: Vec<String> = blackholes(host)?.into_iter().map(name_of).collect();
        rows.push(json!({
            "host": host.name,
            "address": host.address,
            "netns": host.netns,
            "link": if link_up(host)? { "up" } else { "down" },
            "cannot_send_to": cut_from,
            "delay": delay_of(host),
        }));
    }
    Ok(json!({ "hosts": rows }))
}

fn print_state(state: &Value, json_out: bool) {
    if json_out {
        crate::cluster_cli::print_json(state);
        return;
    }
    println!("{:<12} {:<15} {:<5} {:<24} DELAY", "HOST", "ADDRESS", "LINK", "CANNOT SEND TO");
    for row in state["hosts"].as_array().into_iter().flatten() {
        let cut: Vec<&str> = row["cannot_send_to"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!(
            "{:<12} {:<15} {:<5} {:<24} {}",
            row["host"].as_str().unwrap_or("?"),
            row["address"].as_str().unwrap_or("?"),
            row["link"].as_str().unwrap_or("?"),
            if cut.is_empty() { "-".to_owned() } else { cut.join(",") },
            row["delay"].as_str().unwrap_or("-"),
        );
    }
}

pub fn run(command: NetCommand) -> Result<(), CliError> {
    match command {
        NetCommand::Partition(args) => {
            let hosts = hosts_of(&args.dir.dir)?;
            let cut = pick(&hosts, &args.hosts)?;
            let from = pick(&hosts, &args.from)?;
            if let Some(both) = cut.iter().find(|h| from.iter().any(|f| f.name == h.name)) {
                return Err(cli_error!("{} is on both sides of the partition", both.name));
            }
            if from.is_empty() {
                for host in &cut {
                    ip(&["link", "set", "dev", &host.veth, "down"])?;
                }
            } else {
                for host in &cut {
                    for other in &from {
                        blackhole(host, other.address)?;
                        if !args.one_way {
                            blackhole(other, host.address)?;
                        }
                    }
                }
            }
            print_state(&state(&hosts)?, args.dir.json);
            Ok(())
        }
        NetCommand::Heal(args) => {
            let hosts = hosts_of(&args.dir.dir)?;
            let healed: Vec<&NetHost> = if args.hosts.is_empty() {
                hosts.iter().collect()
            } else {
                pick(&hosts, &args.hosts)?
            };
            for host in &healed {
                ip(&["link", "set", "dev", &host.veth, "up"])?;
            }
            for host in &hosts {
                let mine = healed.iter().any(|h| h.name == host.name);
                for to in blackholes(host)? {
                    if mine || healed.iter().any(|h| h.address == to) {
                        ip(&["-n", &host.netns, "route", "del", "blackhole", &format!("{to}/32")])?;
                    }
                }
            }
            print_state(&state(&hosts)?, args.dir.json);
            Ok(())
        }
        NetCommand::Delay(args) => {
            let hosts = hosts_of(&args.dir.dir)?;
            let host = pick(&hosts, std::slice::from_ref(&args.host))?[0];
            let mut tc =
                vec!["netns", "exec", &host.netns, "tc", "qdisc", "replace", "dev", "eth0"];
            tc.extend(["root", "netem", "delay", &args.delay]);
            if let Some(loss) = &args.loss {
                tc.extend(["loss", loss]);
            }
            let output = Command::new("ip")
                .args(&tc)
                .output()
                .map_err(|e| cli_error!("cannot run tc: {e}"))?;
            if !output.status.success() {
                let said = String::from_utf8_lossy(&output.stderr);
                let why = if said.contains("exec of") {
                    "tc (iproute2) is not installed".to_owned()
                } else if said.contains("unknown") || said.contains("No such file") {
                    "this kernel has no tc netem (module sch_netem), so links cannot be \
                     delayed here; weft up --net-model gives nodes a modelled link instead"
                        .to_owned()
                } else {
                    format!("tc refused: {}", said.trim())
                };
                return Err(cli_error!("weft net delay {}: {why}", host.name));
            }
            print_state(&state(&hosts)?, args.dir.json);
            Ok(())
        }
        NetCommand::Show(args) => {
            let hosts = hosts_of(&args.dir.dir)?;
            print_state(&state(&hosts)?, args.dir.json);
            Ok(())
        }
    }
}
