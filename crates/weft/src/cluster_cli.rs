//! Cluster commands that talk to a running meta: `weft status`, `weft node stop|kill`,
//! `weft bucket create|ls|rm`, and the pieces `weft up` shares with them (the `--meta` flag,
//! a blocking meta client, process checks).
//!
//! Invariants:
//! - Every command finds meta the same way: `--meta URL`, else `$WEFT_META`, else
//!   [`DEFAULT_META_URL`] ([`MetaUrlArgs`]); and the cluster secret it signs with the same
//!   way: `--secret-file`, else `$WEFT_SECRET_FILE`, else [`DEFAULT_SECRET_FILE`].
//! - What meta says is shown as meta said it: `--json` output is meta's JSON (at most joined
//!   with other answers of meta), never a value meta did not give; an error response is shown
//!   with meta's message and error code.
//! - `weft status` shows meta's unfound units and lost objects when meta reports them.
//! - A signal is only sent to a pid that is running on this machine *and* is a weft node
//!   process with that id, so a stale pid in meta (a node long dead, its pid reused) never
//!   hits an unrelated process.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::{cli_error, CliError};

/// Where cluster commands find meta when neither `--meta` nor `WEFT_META` is given: the
/// address `weft up` listens on by default.
pub const DEFAULT_META_URL: &str = "http://127.0.0.1:7700";

/// The environment variable naming meta's URL.
pub const META_ENV: &str = "WEFT_META";

/// Where cluster commands find the cluster secret when neither `--secret-file` nor
/// `WEFT_SECRET_FILE` is given: where `weft up` writes it with its default `--dir`.
pub const DEFAULT_SECRET_FILE: &str = "./weft-data/cluster.secret";

/// The environment variable naming the cluster secret file.
pub const SECRET_ENV: &str = "WEFT_SECRET_FILE";

/// The name of the secret file in a cluster directory (`weft up --dir`, `weft init --dir`).
pub const SECRET_FILE_NAME: &str = "cluster.secret";

/// How long one request to meta may take before the command gives up.
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// How long `weft node stop` waits for the node to exit after SIGTERM.
const STOP_WAIT_MS: u64 = 10_000;

/// The `--meta` flag every cluster command takes.
#[derive(Debug, Clone, Args)]
pub struct MetaUrlArgs {
    /// Base URL of meta [default: $WEFT_META, else http://127.0.0.1:7700, where `weft up`
    /// listens by default].
    #[arg(long, value_name = "URL")]
    pub meta: Option<String>,
    /// The cluster secret every request is signed with [default: $WEFT_SECRET_FILE, else
    /// ./weft-data/cluster.secret, where `weft up` writes it].
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<std::path::PathBuf>,
    /// The TLS directory (ca.pem, cert.pem, key.pem) shown to an https:// meta [default:
    /// $WEFT_TLS_DIR, else tls/admin beside the secret file, where `weft up` writes it].
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<std::path::PathBuf>,
}

/// The cluster secret file to use: `flag`, else `$WEFT_SECRET_FILE`, else `default`.
pub fn secret_path(
    flag: Option<&std::path::Path>,
    default: &std::path::Path,
) -> (std::path::PathBuf, &'static str) {
    match (flag, std::env::var_os(SECRET_ENV)) {
        (Some(path), _) => (path.to_owned(), "--secret-file"),
        (None, Some(path)) if !path.is_empty() => (path.into(), SECRET_ENV),
        _ => (default.to_owned(), "the default"),
    }
}

/// Reads the cluster secret from `flag`, else `$WEFT_SECRET_FILE`, else `default`, with an
/// error that says how to point at it.
pub fn read_secret(
    flag: Option<&std::path::Path>,
    default: &std::path::Path,
) -> Result<weft_auth::ClusterSecret, CliError> {
    let (path, from) = secret_path(flag, default);
    weft_auth::ClusterSecret::read_file(&path).map_err(|error| {
        cli_error!(
            "{error} (the secret file from {from}). weft's APIs accept only requests signed \
             with the cluster secret: `weft up --dir DIR` writes it to DIR/{SECRET_FILE_NAME}; \
             pass --secret-file DIR/{SECRET_FILE_NAME} or set {SECRET_ENV}"
        )
    })
}

impl MetaUrlArgs {
    /// The URL to use: the flag, else `$WEFT_META`, else the default; checked to look like
    /// an http URL and without a trailing slash.
    pub fn url(&self) -> Result<String, CliError> {
        let (url, from) = match (&self.meta, std::env::var(META_ENV)) {
            (Some(url), _) => (url.clone(), "--meta"),
            (None, Ok(url)) if !url.trim().is_empty() => (url, META_ENV),
            _ => (DEFAULT_META_URL.to_owned(), "the default"),
        };
        let url = url.trim().trim_end_matches('/').to_owned();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(cli_error!(
                "meta URL {url:?} (from {from}) must look like http://127.0.0.1:7700"
            ));
        }
        let default = std::path::Path::new(DEFAULT_SECRET_FILE);
        let (secret_file, _) = secret_path(self.secret_file.as_deref(), default);
        crate::cert_cli::install_for(&url, self.tls_dir.as_deref(), &secret_file)?;
        Ok(url)
    }

    /// The cluster secret: `--secret-file`, else `$WEFT_SECRET_FILE`, else the default.
    pub fn secret(&self) -> Result<weft_auth::ClusterSecret, CliError> {
        read_secret(self.secret_file.as_deref(), std::path::Path::new(DEFAULT_SECRET_FILE))
    }

    /// A client for that meta.
    pub fn client(&self) -> Result<MetaClient, CliError> {
        MetaClient::new(&self.url()?, &self.secret()?)
    }

    /// An async client of the whole cluster (meta and nodes).
    pub fn cluster(&self) -> Result<weft_client::Client, CliError> {
        Ok(weft_client::Client::new(&self.url()?, &self.secret()?)?)
    }
}

/// Of one meta URL, or several of one store (comma-separated), the first that accepts a
/// connection (the first, when none does: its error names it).
fn first_reachable(bases: &str) -> String {
    let candidates: Vec<String> = bases
        .split(',')
        .map(|b| b.trim().trim_end_matches('/').to_owned())
        .filter(|b| !b.is_empty())
        .collect();
    if candidates.len() < 2 {
        return candidates.into_iter().next().unwrap_or_default();
    }
    let accepts = |base: &String| {
        let Ok(url) = reqwest::Url::parse(base) else { return false };
        let Ok(addrs) = url.socket_addrs(|| Some(80)) else { return false };
        addrs.iter().any(|addr| {
            std::net::TcpStream::connect_timeout(addr, Duration::from_millis(500)).is_ok()
        })
    };
    candidates.iter().find(|b| accepts(b)).unwrap_or(&candidates[0]).clone()
}

/// A blocking client of meta's HTTP API (docs/meta-api.md). Must not be used inside an async
/// runtime. Given several metas of one store (comma-separated), it uses the first that
/// accepts a connection.
#[derive(Debug, Clone)]
pub struct MetaClient {
    base: String,
    http: reqwest::blocking::Client,
    signer: weft_auth::Signer,
    seal: weft_auth::SealKey,
}

impl MetaClient {
    /// A client for meta at `base` (`http://host:port`), signing with keys of `secret`.
    pub fn new(base: &str, secret: &weft_auth::ClusterSecret) -> Result<MetaClient, CliError> {
        let http = weft_auth::sign_reqwest::blocking_client_builder()
            .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
            .build()
            .map_err(|e| cli_error!("cannot build an HTTP client: {e}"))?;
        Ok(MetaClient {
            base: first_reachable(base),
            http,
            signer: secret.signer_for(weft_auth::Audience::Meta),
            seal: secret.seal_key(),
        })
    }

    /// The key that seals secrets kept in meta.
    pub fn seal_key(&self) -> &weft_auth::SealKey {
        &self.seal
    }

    /// Meta's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The URL of `/v1/<segments…>`, each segment percent-encoded (a bucket name with a `/`
    /// stays one segment and meta refuses it by name).
    fn url(&self, segments: &[&str]) -> Result<reqwest::Url, CliError> {
        let mut url = reqwest::Url::parse(&self.base)
            .map_err(|e| cli_error!("meta URL {:?} is not a URL: {e}", self.base))?;
        url.path_segments_mut()
            .map_err(|()| cli_error!("meta URL {:?} cannot take a path", self.base))?
            .pop_if_empty()
            .push("v1")
            .extend(segments);
        Ok(url)
    }

    /// `GET /v1/<segments…>`: the JSON body of a 2xx answer.
    pub fn get(&self, segments: &[&str]) -> Result<Value, CliError> {
        let url = self.url(segments)?;
        self.send(self.http.get(url))
    }

    /// `GET /v1/<segments…>?<query>` (the query is already encoded).
    pub fn get_query(&self, segments: &[&str], query: &str) -> Result<Value, CliError> {
        let mut url = self.url(segments)?;
        url.set_query(Some(query));
        self.send(self.http.get(url))
    }

    /// `PUT /v1/<segments…>` with an optional JSON body.
    pub fn put(&self, segments: &[&str], body: Option<&Value>) -> Result<Value, CliError> {
        let url = self.url(segments)?;
        let request = match body {
            Some(body) => self.http.put(url).json(body),
            None => self.http.put(url),
        };
        self.send(request)
    }

    /// `PUT /v1/<segments…>?<query>` with a JSON body (the query is already encoded).
    pub fn put_query(
        &self,
        segments: &[&str],
        query: &str,
        body: &Value,
    ) -> Result<Value, CliError> {
        let mut url = self.url(segments)?;
        url.set_query(Some(query));
        self.send(self.http.put(url).json(body))
    }

    /// `DELETE /v1/<segments…>`: the JSON body, or null for an empty one (204).
    pub fn delete(&self, segments: &[&str]) -> Result<Value, CliError> {
        let url = self.url(segments)?;
        self.send(self.http.delete(url))
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Result<Value, CliError> {
        use weft_auth::sign_reqwest::SendSignedBlocking;
        let response = request.send_signed(&self.signer).map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let text = response
            .text()
            .map_err(|e| cli_error!("meta at {} sent an unreadable answer: {e}", self.base))?;
        let body: Option<Value> = serde_json::from_str(&text).ok();
        if status.is_success() {
            return match body {
                Some(body) => Ok(body),
                None if text.trim().is_empty() => Ok(Value::Null),
                None => Err(cli_error!("meta at {} answered {status} with non-JSON", self.base)),
            };
        }
        Err(MetaRefusal::from_response(status.as_u16(), body, &text).into_cli_error())
    }

    fn unreachable(&self, error: &reqwest::Error) -> CliError {
        let mut cause = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(inner) = source {
            cause = format!("{cause}: {inner}");
            source = inner.source();
        }
        cli_error!(
            "cannot reach meta at {}: {cause}. Is a cluster running? Start one with `weft up`, \
             or point --meta / {META_ENV} at its meta",
            self.base
        )
    }
}

/// An error answer of meta: `{"error": code, "message": ...}`.
#[derive(Debug)]
struct MetaRefusal {
    status: u16,
    code: String,
    message: String,
}

impl MetaRefusal {
    fn from_response(status: u16, body: Option<Value>, text: &str) -> MetaRefusal {
        let field = |name: &str| {
            body.as_ref().and_then(|b| b[name].as_str()).map(str::to_owned).unwrap_or_default()
        };
        let mut message = field("message");
        if message.is_empty() {
            message = text.trim().chars().take(300).collect();
        }
        MetaRefusal { status, code: field("error"), message }
    }

    fn into_cli_error(self) -> CliError {
        let hint = match self.code.as_str() {
            "bucket_exists" => "; pick another name (see `weft bucket ls`)",
            "no_such_bucket" => "; see `weft bucket ls` for the buckets there are",
            "invalid_policy" => "; see `weft bucket create --help` for the policy flags",
            "unauthenticated" => {
                "; is --secret-file (or WEFT_SECRET_FILE) this cluster's secret, the \
                 DIR/cluster.secret of its `weft up --dir DIR`?"
            }
            _ => "",
        };
        let shown = if self.code.is_empty() { String::new() } else { format!(" [{}]", self.code) };
        let error =
            cli_error!("meta refused (HTTP {}{shown}): {}{hint}", self.status, self.message);
        if self.code.is_empty() {
            error
        } else {
            error.with_code(&self.code)
        }
    }
}

/// Prints one JSON object on one line (the `--json` contract).
pub fn print_json(value: &Value) {
    println!("{}", serde_json::to_string(value).expect("a JSON value serializes"));
}

/// `1536` → `1.5 KiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

// ---------------------------------------------------------------------------------------------
// Processes on this machine.

/// What this machine knows of a pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// Running (or stopped, sleeping: anything but exited).
    Running,
    /// Exited, but its parent has not collected it yet: it will never run again.
    Zombie,
    /// No such process.
    Gone,
    /// A process exists but this user may not signal it.
    NotPermitted,
}

/// The state of `pid` on this machine.
pub fn process_state(pid: u32) -> ProcessState {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return ProcessState::Gone;
    };
    if raw <= 0 {
        return ProcessState::Gone;
    }
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks the pid exists and that we
    // may signal it.
    let alive = unsafe { libc::kill(raw, 0) } == 0;
    if !alive {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EPERM) => ProcessState::NotPermitted,
            _ => ProcessState::Gone,
        };
    }
    // /proc/<pid>/stat: "pid (comm) S ..."; comm may hold spaces or parentheses, so the state
    // is the first field after the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => match stat.rsplit_once(')').map(|(_, rest)| rest.trim_start()) {
            Some(rest) if rest.starts_with(['Z', 'X']) => ProcessState::Zombie,
            _ => ProcessState::Running,
        },
        Err(_) => ProcessState::Running,
    }
}

/// True when `pid` is running (not gone, not a zombie).
pub fn is_running(pid: u32) -> bool {
    matches!(process_state(pid), ProcessState::Running | ProcessState::NotPermitted)
}

/// The command line of `pid`, when this machine shows it (Linux `/proc`).
pub fn process_args(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|part| !part.is_empty())
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect(),
    )
}

/// Sends `signal` to `pid`.
pub fn send_signal(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    let raw = libc::pid_t::try_from(pid)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) takes plain integers; the callers checked `pid` names the process they
    // mean to signal.
    if unsafe { libc::kill(raw, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

// ---------------------------------------------------------------------------------------------
// weft status

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// One JSON object: meta's /v1/status, each node joined with its disks and last heartbeat
    /// from /v1/nodes (with "meta": every meta of the store, which leads), plus "meta_url"
    /// (the URL asked) and "down_after_ms".
    #[arg(long)]
    pub json: bool,
    /// Show the status again every --interval until Ctrl-C, with what changed since the last
    /// one (units repaired, queue growth); the screen is redrawn on a terminal.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// How often --watch refreshes, e.g. 2s, 500ms.
    #[arg(long, default_value = "2s", value_parser = weft_client::gc::parse_duration_ms, requires = "watch")]
    pub interval: u64,
}

/// The services of the `weft up` running this cluster, as it records them in its
/// DIR/cluster.json (`services`), with that file's path: found beside the cluster secret
/// file in use (weft up keeps both in DIR), and only while that weft up runs and serves the
/// meta asked (so a stale file or another cluster's is never shown).
fn services_of(args: &MetaUrlArgs, meta_url: &str) -> Option<(std::path::PathBuf, Value, bool)> {
    let (file, value) = file_beside_secret(args, crate::up::CLUSTER_FILE)?;
    let up_pid = u32::try_from(value["up_pid"].as_u64()?).ok()?;
    // The meta asked is one of this weft up's (the first, or another replica).
    let ours = |m: &Value| m.as_str().is_some_and(|m| m.trim_end_matches('/') == meta_url);
    let same_meta = ours(&value["meta"])
        || value["metas"]
            .as_array()
            .is_some_and(|metas| metas.iter().any(|m| ours(&m["endpoint"])));
    if value["running"] != true || !is_running(up_pid) || !same_meta {
        return None;
    }
    let plaintext = value["insecure_plaintext"] == true;
    value["services"].is_array().then(|| (file, value["services"].clone(), plaintext))
}

/// The JSON file `name` that `weft up` keeps in its DIR, found beside the secret file in use
/// (weft up keeps both there), with its path.
pub fn file_beside_secret(args: &MetaUrlArgs, name: &str) -> Option<(std::path::PathBuf, Value)> {
    let default = std::path::Path::new(DEFAULT_SECRET_FILE);
    let (secret, _) = secret_path(args.secret_file.as_deref(), default);
    let file = secret.parent()?.join(name);
    let value = serde_json::from_str(&std::fs::read_to_string(&file).ok()?).ok()?;
    Some((file, value))
}

/// One line per service: `meta running pid 123, 2 restarts, last exit: killed by ...`.
fn describe_services(services: &Value) -> Vec<String> {
    let services = services.as_array().cloned().unwrap_or_default();
    services
        .iter()
        .map(|service| {
            format!(
                "{:<16}  {:<10}  {:>8}  {:>8}  {:<15}  {}",
                service["name"].as_str().unwrap_or("?"),
                service["state"].as_str().unwrap_or("?"),
                service["pid"].to_string(),
                service["restarts"].to_string(),
                service["host"]["address"].as_str().unwrap_or("-"),
                service["last_exit"].as_str().unwrap_or("-"),
            )
        })
        .collect()
}

/// The header of [`describe_services`]' lines.
const SERVICES_HEADER: &str =
    "SERVICE           STATE            PID  RESTARTS  HOST             LAST EXIT";

pub fn status(args: StatusArgs) -> Result<(), CliError> {
    if !args.watch {
        let status = fetch_status(&args)?;
        if args.json {
            print_json(&status);
        } else {
            print_status(&status, None);
        }
        return Ok(());
    }
    let terminal = std::io::stdout().is_terminal();
    let mut previous: Option<(Value, Instant)> = None;
    loop {
        let fetched = fetch_status(&args);
        if terminal {
            print!("\x1b[H\x1b[2J"); // home and clear: redraw in place
        }
        match fetched {
            Ok(status) => {
                let since = previous.as_ref().map(|(old, at)| (old, at.elapsed()));
                print_status(&status, since);
                previous = Some((status, Instant::now()));
            }
            // Meta restarting (weft up brings it back): say so and keep watching.
            Err(error) => println!("weft: {error}"),
        }
        println!("\n(every {} ms; Ctrl-C to stop)", args.interval);
        std::io::stdout().flush().ok();
        std::thread::sleep(Duration::from_millis(args.interval));
    }
}

/// Meta's status joined with its node list and weft up's services (the `--json` document).
fn fetch_status(args: &StatusArgs) -> Result<Value, CliError> {
    let client = args.meta.client()?;
    let services = services_of(&args.meta, client.base());
    let asked = client.get(&["status"]).and_then(|status| Ok((status, client.get(&["nodes"])?)));
    let (mut status, listed) = match (asked, &services) {
        (Ok(answers), _) => answers,
        // Meta does not answer: say what weft up knows of it (restarting, and why).
        (Err(error), Some((file, services, _))) => {
            return Err(cli_error!(
                "{error}\nweft up's services (from {}):\n{SERVICES_HEADER}\n{}",
                file.display(),
                describe_services(services).join("\n")
            ))
        }
        (Err(error), None) => return Err(error),
    };
    // Join each node of /v1/status with what /v1/nodes adds (disks, last heartbeat); the
    // state stays the one /v1/status judged.
    if let Some(nodes) = status["nodes"].as_array_mut() {
        for node in nodes {
            let detail = listed["nodes"]
                .as_array()
                .and_then(|all| all.iter().find(|n| n["id"] == node["id"]));
            if let (Some(detail), Some(node)) = (detail, node.as_object_mut()) {
                for field in ["last_heartbeat_ms", "disks"] {
                    if let Some(value) = detail.get(field) {
                        node.entry(field).or_insert_with(|| value.clone());
                    }
                }
            }
        }
    }
    if let Some(object) = status.as_object_mut() {
        object.insert("meta_url".into(), json!(client.base()));
        if let Some(down_after_ms) = listed.get("down_after_ms") {
            object.entry("down_after_ms").or_insert_with(|| down_after_ms.clone());
        }
        if let Some((file, services, plaintext)) = services {
            object.insert("services".into(), services);
            object.insert("services_file".into(), json!(file));
            object.insert("insecure_plaintext".into(), json!(plaintext));
        }
    }
    Ok(status)
}

/// The objects line of the status and, when any striped object is stored, what each size
/// class stores per byte it holds (meta's `stored_by_size`).
fn print_usage(status: &Value) {
    let (Some(objects), Some(bytes)) =
        (status["objects"].as_u64(), status["object_bytes"].as_u64())
    else {
        return;
    };
    let classes = status["stored_by_size"].as_array().cloned().unwrap_or_default();
    let used: Vec<&Value> = classes.iter().filter(|c| c["objects"].as_u64() > Some(0)).collect();
    if used.is_empty() {
        println!("objects: {objects} ({})", format_size(bytes));
        return;
    }
    let stored: u64 = used.iter().filter_map(|c| c["stored_bytes"].as_u64()).sum();
    let counted: u64 = used.iter().filter_map(|c| c["bytes"].as_u64()).sum();
    println!(
        "objects: {objects} ({}); striped ones store {} for {}: {:.3}× (units without headers)",
        format_size(bytes),
        format_size(stored),
        format_size(counted),
        stored as f64 / counted.max(1) as f64,
    );
    println!(
        "  {:<22} {:>9} {:>11} {:>11} {:>15}",
        "OBJECT SIZE", "OBJECTS", "BYTES", "STORED", "STORED ÷ BYTES"
    );
    for class in used {
        let range = match (class["min_bytes"].as_u64(), class["max_bytes"].as_u64()) {
            (Some(0), Some(max)) => format!("under {}", format_size(max)),
            (Some(min), Some(max)) => format!("{} to {}", format_size(min), format_size(max)),
            (Some(min), None) => format!("{} and up", format_size(min)),
            _ => "?".into(),
        };
        println!(
            "  {:<22} {:>9} {:>11} {:>11} {:>14.3}×",
            range,
            class["objects"],
            format_size(class["bytes"].as_u64().unwrap_or(0)),
            format_size(class["stored_bytes"].as_u64().unwrap_or(0)),
            class["stored_per_byte"].as_f64().unwrap_or(f64::NAN),
        );
    }
}

/// The human status: a few lines of counts, then one row per node (and per disk that is not
/// ok). With `since` (the previous status and how long ago, under --watch), what changed.
fn print_status(status: &Value, since: Option<(&Value, Duration)>) {
    let number = |name: &str| status[name].as_u64();
    let count = |name: &str| number(name).map_or("?".to_owned(), |n| n.to_string());
    let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
    let level = status["failure_domain"].as_str().unwrap_or("?");
    println!(
        "meta {}: {} nodes up, {} down · {} buckets · failure domain: {level} (a new object's \
         groups are on distinct {level}s)",
        status["meta_url"].as_str().unwrap_or("?"),
        count("nodes_up"),
        count("nodes_down"),
        count("buckets"),
    );
    if let Some(metas) = status["meta"].as_array().filter(|metas| metas.len() > 1) {
        let names: Vec<String> = metas
            .iter()
            .map(|m| {
                let endpoint = m["endpoint"].as_str().unwrap_or("?");
                match m["leader"] == true {
                    true => format!("{endpoint} (leader)"),
                    false => endpoint.to_owned(),
                }
            })
            .collect();
        println!("metas:   {} on one store: {}", metas.len(), names.join(", "));
    }
    let changed = |name: &str| -> String {
        match (since, number(name)) {
            (Some((old, ago)), Some(now)) => {
                let before = old[name].as_u64().unwrap_or(now);
                let delta = now as i64 - before as i64;
                if delta == 0 {
                    String::new()
                } else {
                    format!(" ({delta:+} in {:.0} s)", ago.as_secs_f64())
                }
            }
            _ => String::new(),
        }
    };
    println!(
        "repair:  {} under-protected units{}, queue {}{}, {} repaired{}",
        count("under_protected_units"),
        changed("under_protected_units"),
        count("repair_queue"),
        changed("repair_queue"),
        count("repairs_completed"),
        changed("repairs_completed"),
    );
    if status.get("transitions_pending").is_some() {
        println!("transitions: {} running", count("transitions_pending"));
    }
    let inventoried = status["inventories"].as_array().map_or(0, Vec::len);
    println!(
        "health:  {} missing units (latest inventories of {inventoried} disks), {} bad units \
         reported by scrubs, {} end-to-end checksum failures",
        count("missing_units"),
        count("bad_units_reported"),
        count("digest_mismatches"),
    );
    if number("unfound_units").unwrap_or(0) > 0 || number("lost_objects").unwrap_or(0) > 0 {
        println!(
            "unfound units: {} in {} objects (too few units readable to rebuild; `weft stat` \
             names them, `weft repair mark-lost` gives an object up); lost objects: {}",
            count("unfound_units"),
            count("unfound_objects"),
            count("lost_objects"),
        );
    }
    if number("nearfull_disks").unwrap_or(0) > 0 || number("full_disks").unwrap_or(0) > 0 {
        println!(
            "disks nearfull: {}, full (read-only, take no new units): {}",
            count("nearfull_disks"),
            count("full_disks"),
        );
    }
    if let Some(ms) = status["down_after_ms"].as_u64() {
        println!("a node is down after {ms} ms without a heartbeat");
    }
    print_usage(status);
    // Fields meta added that this version does not know: shown as they are.
    let known = [
        "meta",
        "nodes_up",
        "nodes_down",
        "nodes",
        "buckets",
        "under_protected_units",
        "repair_queue",
        "repairs_completed",
        "transitions_pending",
        "digest_mismatches",
        "unfound_units",
        "unfound_objects",
        "lost_objects",
        "down_after_ms",
        "failure_domain",
        "missing_units",
        "bad_units_reported",
        "inventories",
        "nearfull_disks",
        "full_disks",
        "services",
        "services_file",
        "insecure_plaintext",
        "meta_url",
        "objects",
        "object_bytes",
        "stored_by_size",
    ];
    if let Some(object) = status.as_object() {
        for (name, value) in object.iter().filter(|(name, _)| !known.contains(&name.as_str())) {
            println!("{name}: {value}");
        }
    }
    if status["insecure_plaintext"] == true {
        println!(
            "{}",
            crate::up::red(
                "warning: this cluster serves plain HTTP on addresses other than loopback \
                 (weft up --insecure-plaintext): requests, units and signatures cross the \
                 network in clear"
            )
        );
    }
    if let Some(file) = status["services_file"].as_str() {
        let services = status["services"].as_array().cloned().unwrap_or_default();
        let calm = services.iter().all(|s| s["state"] == "running" && s["restarts"] == 0);
        if calm {
            println!("services: {} running under weft up ({file})", services.len());
        } else {
            println!();
            println!("services of weft up (from {file}):");
            println!("{SERVICES_HEADER}");
            for line in describe_services(&status["services"]) {
                println!("{line}");
            }
        }
    }
    if nodes.is_empty() {
        println!("no nodes have reported to meta yet");
        return;
    }
    println!();
    println!(
        "{:>5}  {:<5}  {:>4}  {:>5}  {:>7}  {:>10}  {:>10}  {:<28}  {:>8}",
        "NODE", "STATE", "RACK", "DISKS", "UNITS", "USED", "FREE", "ENDPOINT", "PID"
    );
    for node in &nodes {
        let disks = node["disks"].as_array().cloned().unwrap_or_default();
        let sum = |field: &str| disks.iter().filter_map(|d| d[field].as_u64()).sum::<u64>();
        let free = disks.iter().any(|d| d["free_bytes"].is_u64());
        println!(
            "{:>5}  {:<5}  {:>4}  {:>5}  {:>7}  {:>10}  {:>10}  {:<28}  {:>8}",
            node["id"].to_string(),
            node["state"].as_str().unwrap_or("?"),
            node["rack"].as_u64().map_or("-".to_owned(), |rack| rack.to_string()),
            disks.len(),
            sum("units"),
            format_size(sum("bytes")),
            if free { format_size(sum("free_bytes")) } else { "-".into() },
            node["endpoint"].as_str().unwrap_or("?"),
            node["pid"].to_string(),
        );
        // Disks that need a look: failed, nearfull or full.
        for disk in &disks {
            let trouble = match (disk["failed"].as_str(), disk["state"].as_str()) {
                (Some(cause), _) => format!("FAILED: {cause}"),
                (None, Some("full")) => "FULL (read-only)".to_owned(),
                (None, Some("ok")) | (None, None) => continue,
                (None, Some(other)) => other.to_owned(),
            };
            println!(
                "{:>5}  disk {} {}: {trouble}; {} units, {} used, {} free",
                "",
                disk["index"],
                disk["dir"].as_str().unwrap_or("?"),
                disk["units"],
                format_size(disk["bytes"].as_u64().unwrap_or(0)),
                disk["free_bytes"].as_u64().map_or("?".into(), format_size),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// weft node stop|kill

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Stop a node gracefully (SIGTERM), for drills: meta reports it down after its
    /// down timeout, and repair starts.
    ///
    /// Looks the node's pid up in meta's node list and refuses unless that pid is a weft
    /// node with that id running on this machine. Waits until it has exited. A node started
    /// by `weft up` stays down until `weft up` is restarted (weft up restarts a node that
    /// dies by itself; this drill holds it down: DIR/node-ID/held).
    ///
    /// Example: weft node stop 3
    #[command(verbatim_doc_comment)]
    Stop(NodeSignalArgs),
    /// Kill a node at once (SIGKILL), for drills: like a crash or a pulled plug.
    ///
    /// Same checks as `weft node stop`. Meta reports the node down after its down timeout
    /// (see `weft status`).
    ///
    /// Example: weft node kill 3 && sleep 6 && weft status
    #[command(verbatim_doc_comment)]
    Kill(NodeSignalArgs),
    /// Enrol a node in meta and write its own key file (only enrolled nodes may heartbeat,
    /// and so receive units).
    ///
    /// The key file is what the node needs to run: it signs the node's heartbeats and checks
    /// every request made to the node. It is derived from the cluster secret but does not
    /// reveal it, so a stolen node key speaks for that node only. Writes mode 0600 and never
    /// replaces an existing file.
    ///
    /// Example: weft node add 13 --key-file ./node-13.key
    ///          weft serve node --meta http://127.0.0.1:7700 --key-file ./node-13.key \
    ///              --disk ./weft-data/node-13/disk-0
    #[command(verbatim_doc_comment)]
    Add(NodeAddArgs),
    /// Remove a node from enrolment: meta refuses its heartbeats from now on, judges it down
    /// and repairs its units elsewhere.
    ///
    /// Example: weft node remove 13
    #[command(verbatim_doc_comment)]
    Remove(NodeRemoveArgs),
}

#[derive(Debug, Args)]
pub struct NodeAddArgs {
    /// The node's id (unique in the cluster).
    pub id: u32,
    /// Where to write the node's key [default: ./node-ID.key].
    #[arg(long, value_name = "FILE", conflicts_with = "no_key_file")]
    pub key_file: Option<std::path::PathBuf>,
    /// Enrol only: write no key file (the node has its key already, e.g. from `weft init
    /// --hosts`).
    #[arg(long)]
    pub no_key_file: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// One JSON object: {"node", "enrolled", "new", "key_file"}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NodeRemoveArgs {
    /// The node's id.
    pub id: u32,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
}

fn node_add(args: NodeAddArgs) -> Result<(), CliError> {
    let secret = args.meta.secret()?;
    let key_file =
        args.key_file.clone().unwrap_or_else(|| format!("./node-{}.key", args.id).into());
    if !args.no_key_file && key_file.exists() {
        return Err(cli_error!(
            "{} exists already; remove it or give another --key-file",
            key_file.display()
        ));
    }
    let client = MetaClient::new(&args.meta.url()?, &secret)?;
    let answer = client.put(&["nodes", &args.id.to_string()], None)?;
    if args.no_key_file {
        if args.json {
            print_json(&json!({
                "node": args.id, "enrolled": true, "new": answer["new"], "key_file": null,
            }));
        } else {
            println!("enrolled node {} (no key file written)", args.id);
        }
        return Ok(());
    }
    secret.node_key(args.id).write_node_file(&key_file)?;
    if args.json {
        print_json(&json!({
            "node": args.id, "enrolled": true, "new": answer["new"],
            "key_file": key_file.display().to_string(),
        }));
    } else {
        let was = if answer["new"] == json!(false) { " (it was enrolled already)" } else { "" };
        println!("enrolled node {}{was}; its key is in {}", args.id, key_file.display());
        println!(
            "run it with: weft serve node --meta {} --key-file {} --disk DIR",
            client.base(),
            key_file.display()
        );
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct NodeSignalArgs {
    /// The node's id, as `weft status` lists it.
    pub id: u32,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// One JSON object: {"node", "pid", "signal", "exited", "down_after_ms"}.
    #[arg(long)]
    pub json: bool,
}

pub fn node(command: NodeCommand) -> Result<(), CliError> {
    let (args, signal, name) = match command {
        NodeCommand::Stop(args) => (args, libc::SIGTERM, "SIGTERM"),
        NodeCommand::Kill(args) => (args, libc::SIGKILL, "SIGKILL"),
        NodeCommand::Add(args) => return node_add(args),
        NodeCommand::Remove(args) => {
            args.meta.client()?.delete(&["nodes", &args.id.to_string()])?;
            println!("node {} is no longer enrolled; meta refuses its heartbeats", args.id);
            return Ok(());
        }
    };
    let client = args.meta.client()?;
    let listed = client.get(&["nodes"])?;
    let nodes = listed["nodes"].as_array().cloned().unwrap_or_default();
    let Some(node) = nodes.iter().find(|n| n["id"].as_u64() == Some(u64::from(args.id))) else {
        let known: Vec<String> = nodes.iter().map(|n| n["id"].to_string()).collect();
        return Err(cli_error!(
            "meta at {} knows no node {} (known: {}); see `weft status`",
            client.base(),
            args.id,
            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
        ));
    };
    let pid = node["pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
        .ok_or_else(|| cli_error!("meta has no pid for node {}", args.id))?;
    check_node_process(args.id, pid, node["state"].as_str().unwrap_or("?"))?;
    hold_down(args.id, pid, name)?;
    send_signal(pid, signal)
        .map_err(|e| cli_error!("cannot send {name} to node {} (pid {pid}): {e}", args.id))?;
    let deadline = Instant::now() + Duration::from_millis(STOP_WAIT_MS);
    let exited = loop {
        if !is_running(pid) {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let down_after_ms = listed["down_after_ms"].as_u64();
    if args.json {
        print_json(&json!({
            "node": args.id,
            "pid": pid,
            "signal": name,
            "exited": exited,
            "down_after_ms": down_after_ms,
        }));
    } else {
        let after = down_after_ms.map_or(String::new(), |ms| format!(" within {ms} ms"));
        if exited {
            println!(
                "node {} (pid {pid}) exited after {name}; meta reports it down{after}",
                args.id
            );
        } else {
            println!(
                "sent {name} to node {} (pid {pid}) but it is still running after {} s; \
                 `weft node kill {}` stops it at once",
                args.id,
                STOP_WAIT_MS / 1000,
                args.id
            );
        }
    }
    Ok(())
}

/// The parent of `pid`, from `/proc/<pid>/stat` ("pid (comm) state ppid ...").
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// When node `id` (running as `pid`) is a child of a `weft up`, writes its hold file
/// (`DIR/node-<id>/held`, beside the node's key file) so that `weft up` does not restart it:
/// a drill means the node to stay down. Returns whether it wrote one.
fn hold_down(id: u32, pid: u32, signal: &str) -> Result<bool, CliError> {
    let Some(parent) = parent_pid(pid) else { return Ok(false) };
    let parent_is_up = process_args(parent).is_some_and(|argv| argv.iter().any(|a| a == "up"));
    let key_file = process_args(pid).and_then(|argv| {
        argv.windows(2).find(|w| w[0] == "--key-file").map(|w| std::path::PathBuf::from(&w[1]))
    });
    let (true, Some(node_dir)) = (parent_is_up, key_file.as_deref().and_then(|k| k.parent()))
    else {
        return Ok(false);
    };
    let hold = node_dir.join(crate::up::HOLD_FILE);
    let why = json!({ "node": id, "pid": pid, "signal": signal, "by": "weft node stop|kill" });
    std::fs::write(&hold, format!("{why}\n")).map_err(|e| {
        cli_error!(
            "cannot hold node {id} down (weft up, pid {parent}, would restart it): cannot \
             write {}: {e}",
            hold.display()
        )
    })?;
    Ok(true)
}

/// Refuses unless `pid` is running here and is `weft serve node` for node `id`.
fn check_node_process(id: u32, pid: u32, state: &str) -> Result<(), CliError> {
    match process_state(pid) {
        ProcessState::Running => {}
        ProcessState::NotPermitted => {
            return Err(cli_error!(
                "node {id}'s pid {pid} belongs to another user; run this as that user"
            ))
        }
        ProcessState::Gone | ProcessState::Zombie => {
            return Err(cli_error!(
                "node {id} (pid {pid}, {state} in meta) is not running on this machine: it \
                 already exited, or it runs on another machine (node commands only signal \
                 local processes)"
            ))
        }
    }
    // Where /proc shows command lines, make sure the pid is still that node and not a
    // process that reused the pid of a node long gone.
    if let Some(argv) = process_args(pid) {
        let is_node = argv.windows(2).any(|w| w[0] == "serve" && w[1] == "node");
        let given_id = argv.windows(2).find(|w| w[0] == "--id").map(|w| w[1].clone());
        let id_matches = given_id.is_none_or(|given| given == id.to_string());
        if !is_node || !id_matches {
            return Err(cli_error!(
                "pid {pid}, which meta last heard from as node {id}, is now another process \
                 ({}); refusing to signal it. Node {id} is not running here",
                argv.join(" ")
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// weft bucket create|ls|rm

#[derive(Debug, Subcommand)]
pub enum BucketCommand {
    /// Create a bucket; its policy is the default for every object written to it.
    ///
    /// weft's default policy is rs(6,3), stripe width 2, 1MiB cells, 8MiB blocks. With none
    /// of --code/--k/--r/--d/--l/--g, the bucket gets rs(6,3), or on a cluster of fewer than
    /// 9 failure domains the widest of rs(4,2) and rs(2,1) it can hold. Give any of them and
    /// the default fills the rest (k 6, r 3: `--r 2` is rs(6,2)). --stripe-width, --cell and
    /// --block not given take the defaults. The block must be a multiple of the cell. A policy
    /// needs k + r (and the stripe width) distinct failure domains; meta refuses one the
    /// cluster cannot hold (`policy_too_wide`), so writes never fail for it later.
    ///
    /// Examples:
    ///   weft bucket create photos
    ///   weft bucket create logs --code rs --k 10 --r 4 --stripe-width 2 --cell 1MiB --block 8MiB
    ///   weft bucket create cold --code 'clay(8,4,11)'
    #[command(verbatim_doc_comment)]
    Create(BucketCreateArgs),
    /// List buckets and their policies.
    ///
    /// Example: weft bucket ls --json
    #[command(verbatim_doc_comment)]
    Ls(BucketLsArgs),
    /// Remove an empty bucket (meta refuses while it holds objects or writes in progress).
    ///
    /// Example: weft bucket rm photos
    #[command(verbatim_doc_comment)]
    Rm(BucketRmArgs),
    /// Show a bucket's default policy, or change it with policy flags.
    ///
    /// Flags given replace those of the current policy (with --code/--k/--r/..., the code's
    /// family defaults fill what is not given); the rest stays. New objects, also those
    /// written through S3, get the new policy; stored objects keep theirs (change those with
    /// `weft transition`).
    ///
    /// Examples:
    ///   weft bucket policy photos
    ///   weft bucket policy photos --code rs --k 10 --r 4 --stripe-width 4
    #[command(verbatim_doc_comment)]
    Policy(BucketPolicyArgs),
    /// Show a bucket's versioning, or set it: enabled or suspended (S3 versioning).
    ///
    /// Enabled, every write makes a version and `weft rm` (or an S3 DELETE) leaves a delete
    /// marker: older versions stay, reachable by version id through S3, until deleted by
    /// it. Suspended, writes replace the key's "null" version only. A bucket once versioned
    /// is never unversioned again (as in S3); RAIDP and geometric buckets cannot be.
    ///
    /// Examples:
    ///   weft bucket versioning photos enabled
    ///   weft bucket versioning photos --json
    #[command(verbatim_doc_comment)]
    Versioning(BucketVersioningArgs),
}

#[derive(Debug, Args)]
pub struct BucketVersioningArgs {
    /// Bucket name.
    pub name: String,
    /// The state to set: `enabled` or `suspended` (none: show the current one).
    #[arg(value_parser = ["enabled", "suspended"])]
    pub state: Option<String>,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print {"bucket": NAME, "versioning": "enabled" | "suspended" | null}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BucketPolicyArgs {
    /// Bucket name.
    pub name: String,
    /// Policy flags to change (none: show the current policy).
    #[command(flatten)]
    pub policy: crate::objects_cli::PolicyArgs,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print meta's bucket record as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BucketCreateArgs {
    /// Bucket name: 1-63 bytes of lower-case letters, digits, '-' and '.'.
    pub name: String,
    /// The bucket's default policy; flags not given take meta's defaults (rs(6,3), stripe
    /// width 2, 1 MiB cells, 8 MiB blocks).
    /// `--code raidp` makes a RAIDP bucket: two replicas of every byte plus a parity device
    /// (Lstor) per disk, so any two disk failures lose nothing (docs/raidp.md).
    #[command(flatten)]
    pub policy: crate::objects_cli::PolicyArgs,
    /// RAIDP only: the superchunk size, e.g. 1GiB (the default) or 64MiB. One for the
    /// whole cluster: the first RAIDP bucket fixes it.
    #[arg(long, value_parser = crate::parse_size)]
    pub superchunk: Option<usize>,
    /// RAIDP only: parities each disk's Lstor keeps: 1 (XOR; any two disk failures) or 2
    /// (XOR and Reed-Solomon; any three).
    #[arg(long)]
    pub lstors: Option<u32>,
    /// `geometric` makes a cold bucket (docs/geometric.md): objects are written replicated,
    /// then packed into bins of chunks of sizes s0·q^i coded together across objects
    /// (Clay is the point: --code clay --k 10 --r 4). `striped` (the default) is Okapi's.
    #[arg(long, value_parser = ["striped", "geometric"])]
    pub layout: Option<String>,
    /// Geometric only: the smallest chunk s0, a multiple of the code's unit [default: 4MiB].
    #[arg(long, value_parser = crate::parse_size)]
    pub s0: Option<usize>,
    /// Geometric only: each chunk size is q times the previous, q ≥ 2 [default: 2].
    #[arg(long)]
    pub q: Option<u64>,
    /// Geometric only: the code of the small bin, which holds objects' fronts (size mod s0)
    /// [default: rs with the bins' k and r].
    #[arg(long)]
    pub small_code: Option<String>,
    /// Geometric only: the largest chunk; larger objects get several [default: 256MiB].
    #[arg(long, value_parser = crate::parse_size)]
    pub chunk_max: Option<usize>,
    /// Geometric only: placement groups, each k + r disks on distinct nodes [default: 256].
    #[arg(long)]
    pub pgs: Option<u32>,
    /// Geometric only: the warm tier objects are written to before packing, rep(N)
    /// [default: rep(3), fewer copies on a smaller cluster].
    #[arg(long)]
    pub warm: Option<String>,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print meta's bucket record as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BucketLsArgs {
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print meta's answer, {"buckets": [...]}, as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BucketRmArgs {
    /// The bucket to remove.
    pub name: String,
    /// Delete every object of the bucket first (their units too), and its S3 multipart
    /// uploads in progress; without it a bucket that holds objects is refused.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub meta: MetaUrlArgs,
    /// Print {"removed": NAME} as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn bucket(command: BucketCommand) -> Result<(), CliError> {
    match command {
        BucketCommand::Create(args) => bucket_create(args),
        BucketCommand::Ls(args) => bucket_ls(args),
        BucketCommand::Rm(args) => bucket_rm(args),
        BucketCommand::Policy(args) => bucket_policy(args),
        BucketCommand::Versioning(args) => bucket_versioning(args),
    }
}

fn bucket_versioning(args: BucketVersioningArgs) -> Result<(), CliError> {
    let client = args.meta.client()?;
    let record = match &args.state {
        None => client.get(&["buckets", &args.name])?,
        Some(state) => {
            let body = json!({ "versioning": state });
            client.put(&["buckets", &args.name, "versioning"], Some(&body))?
        }
    };
    let state = record["versioning"].as_str();
    if args.json {
        print_json(&json!({ "bucket": args.name, "versioning": state }));
    } else {
        println!("bucket {}: versioning {}", args.name, state.unwrap_or("never enabled"));
    }
    Ok(())
}

fn bucket_policy(args: BucketPolicyArgs) -> Result<(), CliError> {
    let changes = args.policy.overrides()?;
    let client = args.meta.client()?;
    let record = if changes.is_empty() {
        client.get(&["buckets", &args.name])?
    } else {
        client.put(&["buckets", &args.name, "policy"], Some(&Value::Object(changes)))?
    };
    if args.json {
        print_json(&record);
    } else {
        println!(
            "bucket {}: {}",
            record["name"].as_str().unwrap_or(&args.name),
            describe_policy(&record["default_policy"])
        );
    }
    Ok(())
}

/// How a bucket stores new objects: its RAIDP geometry, its geometric policy, or its
/// default striped policy.
fn describe_bucket(record: &Value) -> String {
    let geometric = &record["geometric"];
    if geometric.is_object() {
        return format!(
            "geometric: bins coded {}, small bin {}, s0 {}, q {}, chunks up to {}, {} placement \
             groups; written first to {}",
            geometric["code"].as_str().unwrap_or("?"),
            geometric["small_code"].as_str().unwrap_or("?"),
            geometric["s0"].as_u64().map_or("?".to_owned(), format_size),
            geometric["q"],
            geometric["chunk_max"].as_u64().map_or("?".to_owned(), format_size),
            geometric["pgs"],
            record["default_policy"]["code"].as_str().unwrap_or("?"),
        );
    }
    let raidp = &record["raidp"];
    if raidp.is_object() {
        return format!(
            "raidp: two replicas, superchunks of {}, {} Lstor parit{} per disk",
            raidp["superchunk_bytes"].as_u64().map_or("?".to_owned(), format_size),
            raidp["lstors"],
            if raidp["lstors"] == 1 { "y" } else { "ies" }
        );
    }
    describe_policy(&record["default_policy"])
}

/// `rs(6,3), stripe width 2, 1 MiB cells, 8 MiB blocks`.
fn describe_policy(policy: &Value) -> String {
    let size = |name: &str| policy[name].as_u64().map_or("?".to_owned(), format_size);
    format!(
        "{}, stripe width {}, {} cells, {} blocks",
        policy["code"].as_str().unwrap_or("?"),
        policy["stripe_width"],
        size("cell_bytes"),
        size("block_bytes"),
    )
}

/// The body creating a RAIDP bucket (`--code raidp`), or None for a striped one.
fn raidp_body(args: &BucketCreateArgs) -> Result<Option<Value>, CliError> {
    let raidp = args.policy.code.code.trim().eq_ignore_ascii_case("raidp");
    if !raidp {
        if args.superchunk.is_some() || args.lstors.is_some() {
            return Err(cli_error!(
                "--superchunk and --lstors are for RAIDP buckets (--code raidp)"
            ));
        }
        return Ok(None);
    }
    let code = &args.policy.code;
    let striped = [code.k, code.r, code.d, code.l, code.g].iter().any(Option::is_some)
        || args.policy.stripe_width.is_some()
        || args.policy.cell.is_some()
        || args.policy.block.is_some();
    if striped {
        return Err(cli_error!(
            "--code raidp keeps two replicas of superchunks: it takes --superchunk and \
             --lstors, not --k/--r/--d/--l/--g, --stripe-width, --cell or --block"
        ));
    }
    let mut body = json!({ "code": "raidp" });
    if let Some(bytes) = args.superchunk {
        body["superchunk_bytes"] = json!(bytes);
    }
    if let Some(lstors) = args.lstors {
        body["lstors"] = json!(lstors);
    }
    Ok(Some(body))
}

/// The body creating a geometric bucket (`--layout geometric`), or None for another.
fn geometric_body(args: &BucketCreateArgs) -> Result<Option<Value>, CliError> {
    let geometric = args.layout.as_deref() == Some("geometric");
    let flags = args.s0.is_some()
        || args.q.is_some()
        || args.small_code.is_some()
        || args.chunk_max.is_some()
        || args.pgs.is_some()
        || args.warm.is_some();
    if !geometric {
        if flags {
            return Err(cli_error!(
                "--s0, --q, --small-code, --chunk-max, --pgs and --warm are for geometric \
                 buckets (--layout geometric)"
            )
            .with_code("usage"));
        }
        return Ok(None);
    }
    let policy = &args.policy;
    if policy.stripe_width.is_some() || policy.cell.is_some() || policy.block.is_some() {
        return Err(cli_error!(
            "--layout geometric cuts objects into chunks of sizes s0·q^i: it takes --s0, --q, \
             --chunk-max, not --stripe-width, --cell or --block"
        )
        .with_code("usage"));
    }
    let mut body = json!({ "layout": "geometric" });
    let code = &policy.code;
    let code_given = [code.k, code.r, code.d, code.l, code.g].iter().any(Option::is_some)
        || !code.code.trim().eq_ignore_ascii_case("rs");
    let spec = code.spec()?;
    if code_given {
        body["code"] = json!(spec.to_string());
    }
    if let Some(small) = &args.small_code {
        let family = small.trim().to_ascii_lowercase();
        let text = if family.contains('(') {
            family
        } else if code_given {
            format!("{family}({},{})", spec.k(), spec.r())
        } else {
            return Err(cli_error!(
                "--small-code {small}: give its parameters (e.g. 'rs(10,4)') or the bins' code \
                 (--code clay --k 10 --r 4), whose k and r it takes"
            )
            .with_code("usage"));
        };
        body["small_code"] = json!(text);
    }
    if let Some(s0) = args.s0 {
        body["s0"] = json!(s0);
    }
    if let Some(q) = args.q {
        body["q"] = json!(q);
    }
    if let Some(max) = args.chunk_max {
        body["chunk_max"] = json!(max);
    }
    if let Some(pgs) = args.pgs {
        body["pgs"] = json!(pgs);
    }
    if let Some(warm) = &args.warm {
        body["warm"] = json!(warm);
    }
    Ok(Some(body))
}

fn bucket_create(args: BucketCreateArgs) -> Result<(), CliError> {
    let body = match (raidp_body(&args)?, geometric_body(&args)?) {
        (Some(_), Some(_)) => {
            return Err(cli_error!("--code raidp and --layout geometric are two different tiers")
                .with_code("usage"))
        }
        (Some(body), None) | (None, Some(body)) => body,
        (None, None) => Value::Object(args.policy.overrides()?),
    };
    let client = args.meta.client()?;
    let record = client.put(&["buckets", &args.name], Some(&body))?;
    if args.json {
        print_json(&record);
    } else {
        println!(
            "bucket {} created: {}",
            record["name"].as_str().unwrap_or(&args.name),
            describe_bucket(&record)
        );
    }
    Ok(())
}

fn bucket_ls(args: BucketLsArgs) -> Result<(), CliError> {
    let client = args.meta.client()?;
    let listed = client.get(&["buckets"])?;
    if args.json {
        print_json(&listed);
        return Ok(());
    }
    let buckets = listed["buckets"].as_array().cloned().unwrap_or_default();
    if buckets.is_empty() {
        println!("no buckets; create one with `weft bucket create NAME`");
        return Ok(());
    }
    for bucket in &buckets {
        println!("{:<24}  {}", bucket["name"].as_str().unwrap_or("?"), describe_bucket(bucket));
    }
    Ok(())
}

fn bucket_rm(args: BucketRmArgs) -> Result<(), CliError> {
    let emptied = match args.force {
        true => empty_bucket(&args)?,
        false => Emptied::default(),
    };
    let client = args.meta.client()?;
    client.delete(&["buckets", &args.name])?;
    if args.json {
        print_json(&json!({
            "removed": args.name, "objects_deleted": emptied.objects,
            "versions_deleted": emptied.versions,
            "uploads_aborted": emptied.uploads, "units_left": emptied.units_left,
        }));
    } else {
        if args.force {
            println!(
                "deleted {} objects and {} older versions, aborted {} multipart uploads",
                emptied.objects, emptied.versions, emptied.uploads
            );
        }
        println!("bucket {} removed", args.name);
        if emptied.units_left > 0 {
            eprintln!(
                "note: {} units could not be deleted now (their nodes are down): gc collects them",
                emptied.units_left
            );
        }
    }
    Ok(())
}

/// What `weft bucket rm --force` deleted first.
#[derive(Debug, Default)]
struct Emptied {
    objects: u64,
    /// Versions and delete markers of a versioned bucket.
    versions: u64,
    uploads: u64,
    units_left: usize,
}

/// Deletes every object of the bucket (page by page, units too) and its S3 multipart uploads
/// in progress (their part objects and records), so the bucket can go.
fn empty_bucket(args: &BucketRmArgs) -> Result<Emptied, CliError> {
    let runtime = crate::objects_cli::runtime()?;
    let client = crate::objects_cli::client(&args.meta)?;
    let bucket = args.name.as_str();
    runtime.block_on(async {
        let mut emptied = Emptied::default();
        loop {
            let page = client.meta.list_objects(bucket, "", None, 1000).await?;
            let keys: Vec<String> = page["objects"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["key"].as_str().map(str::to_string))
                .collect();
            if keys.is_empty() {
                break;
            }
            for key in keys {
                match client.delete_object(bucket, &key).await {
                    Ok((_, left)) => {
                        emptied.objects += 1;
                        emptied.units_left += left;
                    }
                    // Deleted meanwhile by someone else.
                    Err(weft_client::ClientError::Meta { status: 404, .. }) => {}
                    Err(error) => return Err(CliError::from(error)),
                }
            }
        }
        // A versioned bucket's older versions and delete markers go too, each for good.
        loop {
            let page = client.meta.list_versions(bucket, "", None, None, 1000).await?;
            let versions: Vec<(String, String)> = page["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| Some((v["key"].as_str()?.into(), v["version_id"].as_str()?.into())))
                .collect();
            if versions.is_empty() {
                break;
            }
            for (key, version) in versions {
                match client.delete_version(bucket, &key, &version, None, false).await {
                    Ok((_, left)) => {
                        emptied.versions += 1;
                        emptied.units_left += left;
                    }
                    Err(weft_client::ClientError::Meta { status: 404, .. }) => {}
                    Err(error) => return Err(CliError::from(error)),
                }
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let uploads = weft_s3::multipart::load_uploads(&client.meta, bucket, now).await?;
        for upload in &uploads {
            weft_s3::multipart::abort(&client, upload).await?;
            emptied.uploads += 1;
        }
        weft_s3::multipart::drop_completed(&client.meta, bucket).await?;
        Ok(emptied)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_format() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(1536), "1.5 KiB");
    }

    #[test]
    fn this_process_is_running_and_a_free_pid_is_not() {
        assert_eq!(process_state(std::process::id()), ProcessState::Running);
        assert_eq!(process_state(0), ProcessState::Gone);
        assert_eq!(process_state(u32::MAX), ProcessState::Gone);
    }

    #[test]
    fn meta_urls_are_checked() {
        let given = |url: &str| {
            MetaUrlArgs { meta: Some(url.to_owned()), secret_file: None, tls_dir: None }.url()
        };
        assert_eq!(given("http://127.0.0.1:7700/").unwrap(), "http://127.0.0.1:7700");
        assert!(given("127.0.0.1:7700").is_err());
    }

    #[test]
    fn segments_are_encoded() {
        let secret = weft_auth::ClusterSecret::generate();
        let client = MetaClient::new("http://127.0.0.1:7700", &secret).unwrap();
        let url = client.url(&["buckets", "a/b c"]).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:7700/v1/buckets/a%2Fb%20c");
    }

    #[test]
    fn the_services_header_fits_its_lines() {
        let services = json!([{"name": "repair executor", "state": "restarting", "pid": 12345,
                               "restarts": 3, "last_exit": "exit status 1",
                               "host": {"name": "repair", "address": "198.18.0.3"}}]);
        let line = &describe_services(&services)[0];
        for (column, starts) in
            [("STATE", "restarting"), ("HOST", "198.18.0.3 "), ("LAST EXIT", "exit")]
        {
            let at = SERVICES_HEADER.find(column).unwrap();
            assert!(line[at..].starts_with(starts), "{column} at {at}: {line}");
        }
        let pid_end = SERVICES_HEADER.find("PID").unwrap() + 3;
        assert_eq!(&line[pid_end - 5..pid_end], "12345", "{line}");
        let restarts_end = SERVICES_HEADER.find("RESTARTS").unwrap() + 8;
        assert_eq!(&line[restarts_end - 1..restarts_end], "3", "{line}");
    }
}
