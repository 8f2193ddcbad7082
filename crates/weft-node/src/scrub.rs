//! The background scrub: every unit of every disk is read and checked against its checksums
//! once per scrub interval, and what is wrong is told to meta, which queues the repairs
//! (docs/node-api.md, "Background scrub"). Beside it, inventories: a digest of each disk's
//! units is sent to meta at start and every [`inventory_interval_ms`], so meta finds the units
//! it references that a disk no longer holds.
//!
//! Invariants:
//! - A pass is paced to end within a tenth of the interval ([`PASS_SHARE`]) and the next
//!   starts nine tenths of the interval after it started (measured from the last pass's
//!   start, persisted per node in `<first disk>/scrub-state.json`, so restarts keep the
//!   schedule): every unit is verified at least once in any window of one interval, so rot is
//!   found within one interval of happening (unless the read-rate ceiling `max_bytes_per_s`
//!   makes a pass longer). A weekly pass of a small disk spreads over 17 hours; a 60 s test
//!   scrub runs 6 s in every 54.
//! - Bad units are sent to meta as they are found, in reports of at most
//!   `MAX_BAD_UNITS_PER_REPORT` units; a report meta did not accept is retried with backoff,
//!   and at most [`MAX_PENDING_BAD_UNITS`] wait (the next pass finds the rest again).
//! - Disk reads run on blocking tasks; the scrub stops between two units when the node stops.
//! - Without a meta URL the scrub still runs and logs what it finds; it reports nothing.
//! - With several metas (replicas of one store), reports and inventories go to one at a
//!   time and move to the next when it does not answer or answers with a server error
//!   ([`Metas`], which heartbeats use too): no single meta's death silences a node.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tokio::sync::{mpsc, watch};
use weft_auth::{sign_reqwest::SendSigned, Signer};
use weft_store::{inventory::Inventory, UnitCheck};
use weft_wire::scrub::{BadUnit, BadUnits, InventoryReply, UnitProblem, MAX_BAD_UNITS_PER_REPORT};

use crate::Node;

/// Default scrub interval: a full pass a week.
pub const DEFAULT_SCRUB_INTERVAL_MS: u64 = 7 * 24 * 3600 * 1000;

/// Default ceiling of the scrub's read rate: 64 MiB/s per node.
pub const DEFAULT_SCRUB_MAX_BYTES_PER_S: u64 = 64 << 20;

/// Longest interval between two inventories of a disk.
pub const MAX_INVENTORY_INTERVAL_MS: u64 = 10 * 60 * 1000;

/// Bad units kept for reporting while meta cannot be reached.
pub const MAX_PENDING_BAD_UNITS: usize = 100_000;

/// A pass is paced to end within `1 / PASS_SHARE` of the interval.
pub const PASS_SHARE: u64 = 10;

/// Time from one pass's start to the next: the interval less a pass's share of it, so that
/// every unit is verified at least once in any window of one interval.
fn period_ms(interval_ms: u64) -> u64 {
    (interval_ms - interval_ms / PASS_SHARE).max(1)
}

/// Name of the file that remembers when the last pass began.
const STATE_FILE: &str = "scrub-state.json";

/// How often inventories are sent: every scrub interval, but at least every
/// [`MAX_INVENTORY_INTERVAL_MS`].
pub fn inventory_interval_ms(scrub_interval_ms: u64) -> u64 {
    scrub_interval_ms.min(MAX_INVENTORY_INTERVAL_MS)
}

/// How the scrub runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubConfig {
    /// A full pass over every unit this often.
    pub interval_ms: u64,
    /// Reads never go faster than this.
    pub max_bytes_per_s: u64,
}

impl Default for ScrubConfig {
    fn default() -> ScrubConfig {
        ScrubConfig {
            interval_ms: DEFAULT_SCRUB_INTERVAL_MS,
            max_bytes_per_s: DEFAULT_SCRUB_MAX_BYTES_PER_S,
        }
    }
}

/// Where scrub findings go: meta's URL and the node's signer.
#[derive(Clone, Debug)]
pub(crate) struct Reporter {
    pub(crate) node_id: u32,
    pub(crate) meta_url: String,
    pub(crate) signer: Signer,
}

/// One meta, or several of one store (a comma-separated list): requests go to one at a time,
/// and to the next in turn after one that failed to answer or answered with a server error.
#[derive(Clone, Debug)]
pub(crate) struct Metas {
    bases: Vec<String>,
    turn: usize,
}

impl Metas {
    pub(crate) fn new(meta_url: &str) -> Metas {
        let bases = meta_url
            .split(',')
            .map(|base| base.trim().trim_end_matches('/').to_owned())
            .filter(|base| !base.is_empty())
            .collect();
        Metas { bases, turn: 0 }
    }

    /// The base URL of the meta whose turn it is.
    pub(crate) fn base(&self) -> &str {
        match self.bases.len() {
            0 => "",
            n => &self.bases[self.turn % n],
        }
    }

    /// Moves on to the next meta, when the last answer says this one is not serving.
    pub(crate) fn failed(&mut self, status: Option<reqwest::StatusCode>) {
        if status.is_none_or(|status| status.is_server_error()) {
            self.turn = self.turn.wrapping_add(1);
        }
    }

    /// [`Metas::failed`] for a request that did not succeed; what went wrong, in words.
    pub(crate) fn failure(&mut self, outcome: Result<reqwest::Response, reqwest::Error>) -> String {
        match outcome {
            Ok(response) => {
                self.failed(Some(response.status()));
                format!("status {}", response.status())
            }
            Err(error) => {
                self.failed(None);
                error.to_string()
            }
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn client() -> Option<reqwest::Client> {
    match weft_auth::sign_reqwest::client_builder().timeout(Duration::from_secs(30)).build() {
        Ok(client) => Some(client),
        Err(error) => {
            tracing::error!(%error, "cannot build an HTTP client; the scrub reports nothing");
            None
        }
    }
}

/// Returns when the node stops.
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Sleeps `duration` unless the node stops first; false when it stopped.
async fn pause(stopped: &mut watch::Receiver<bool>, duration: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(duration) => true,
        _ = stopped.wait_for(|stop| *stop) => false,
    }
}

/// The scrub loop: a pass every interval, until the node stops.
pub(crate) async fn run(
    node: Arc<Node>,
    config: ScrubConfig,
    reporter: Option<Reporter>,
    mut stopped: watch::Receiver<bool>,
) {
    let state_path = node.disks.first().map(|disk| disk.dir().join(STATE_FILE));
    let started = now_ms();
    let last_start = state_path.as_ref().and_then(read_last_start);
    // First pass: one interval after the last pass began, or after this start when the node
    // never scrubbed (a new disk has little to check, and a restart loop must not scrub
    // over and over).
    let mut due = last_start.unwrap_or(started).saturating_add(period_ms(config.interval_ms));
    let (found, found_rx) = mpsc::channel::<(u32, BadUnit)>(1024);
    let sender = tokio::spawn(send_bad_units(reporter, found_rx, stopped.clone()));
    loop {
        let wait = due.saturating_sub(now_ms());
        if !pause(&mut stopped, Duration::from_millis(wait)).await {
            break;
        }
        let pass_start = now_ms();
        if let Some(path) = &state_path {
            write_last_start(path, pass_start);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let scrubbing = {
            let (node, stop, found) = (node.clone(), stop.clone(), found.clone());
            tokio::task::spawn_blocking(move || pass(&node, config, &stop, &found))
        };
        tokio::pin!(scrubbing);
        let summary = tokio::select! {
            done = &mut scrubbing => done,
            () = until_stopped(&mut stopped) => {
                stop.store(true, Ordering::Relaxed);
                let _ = scrubbing.await;
                break;
            }
        };
        match summary {
            Ok(summary) => {
                node.metrics.scrub_pass(&summary);
                tracing::info!(
                    units = summary.units,
                    bytes = summary.bytes,
                    bad = summary.bad,
                    elapsed_ms = now_ms().saturating_sub(pass_start),
                    "scrub pass done"
                );
            }
            Err(error) => tracing::error!(%error, "the scrub pass panicked"),
        }
        due = pass_start.saturating_add(period_ms(config.interval_ms)).max(now_ms());
    }
    drop(found);
    let _ = sender.await;
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PassSummary {
    pub(crate) units: u64,
    pub(crate) bytes: u64,
    pub(crate) bad: u64,
}

/// One pass over every disk, paced (see the module invariants). Blocking.
fn pass(
    node: &Node,
    config: ScrubConfig,
    stop: &AtomicBool,
    found: &mpsc::Sender<(u32, BadUnit)>,
) -> PassSummary {
    let total_bytes: u64 =
        node.disks.iter().filter_map(|disk| disk.usage().ok()).map(|u| u.file_bytes).sum();
    let target = Duration::from_millis(config.interval_ms / PASS_SHARE);
    let start = Instant::now();
    let mut summary = PassSummary::default();
    for (index, disk) in node.disks.iter().enumerate() {
        let keys = match disk.list() {
            Ok(keys) => keys,
            Err(error) => {
                tracing::warn!(disk = index, %error, "scrub skips a disk it cannot list");
                continue;
            }
        };
        for key in keys {
            if stop.load(Ordering::Relaxed) {
                return summary;
            }
            let problem = match disk.scrub_unit(key) {
                UnitCheck::Gone => None,
                UnitCheck::Checked { bytes, corrupt_segments } => {
                    summary.units += 1;
                    summary.bytes += bytes;
                    node.metrics.scrubbed(bytes);
                    (!corrupt_segments.is_empty()).then(|| {
                        let shown: Vec<String> =
                            corrupt_segments.iter().take(8).map(u64::to_string).collect();
                        (UnitProblem::Corrupt, format!("corrupt segments {}", shown.join(",")))
                    })
                }
                UnitCheck::Unreadable(error) => {
                    if disk.failure().is_some() {
                        // The disk failed: heartbeats say so and meta repairs all of it.
                        tracing::warn!(disk = index, %error, "scrub stops on a failed disk");
                        break;
                    }
                    Some((UnitProblem::Unreadable, error.to_string()))
                }
            };
            if let Some((problem, detail)) = problem {
                summary.bad += 1;
                tracing::warn!(disk = index, unit = %key, ?problem, %detail, "scrub found a bad unit");
                let bad = BadUnit { unit_key: key.to_string(), problem, detail };
                if found.blocking_send((index as u32, bad)).is_err() {
                    return summary;
                }
            }
            pace(&summary, total_bytes, target, config.max_bytes_per_s, start, stop);
        }
    }
    summary
}

/// Sleeps until the pass is no further along than its schedule allows (see the module
/// invariants), in short naps so that a stop is seen quickly.
fn pace(
    summary: &PassSummary,
    total_bytes: u64,
    target: Duration,
    max_bytes_per_s: u64,
    start: Instant,
    stop: &AtomicBool,
) {
    let done = summary.bytes as f64;
    let by_schedule = if total_bytes == 0 {
        Duration::ZERO
    } else {
        target.mul_f64((done / total_bytes as f64).min(1.0))
    };
    let by_rate = Duration::from_secs_f64(done / max_bytes_per_s.max(1) as f64);
    let due = by_schedule.max(by_rate);
    while !stop.load(Ordering::Relaxed) {
        let elapsed = start.elapsed();
        if elapsed >= due {
            return;
        }
        std::thread::sleep((due - elapsed).min(Duration::from_millis(100)));
    }
}

/// Sends bad units to meta in reports, retrying with backoff; without a reporter only drains.
async fn send_bad_units(
    reporter: Option<Reporter>,
    mut found: mpsc::Receiver<(u32, BadUnit)>,
    mut stopped: watch::Receiver<bool>,
) {
    let client = match reporter.as_ref().map(|_| client()) {
        Some(Some(client)) => client,
        _ => {
            while found.recv().await.is_some() {}
            return;
        }
    };
    let reporter = reporter.expect("checked above");
    let mut metas = Metas::new(&reporter.meta_url);
    let mut pending: Vec<(u32, BadUnit)> = Vec::new();
    let mut backoff = Duration::from_millis(500);
    let mut open = true;
    while open || !pending.is_empty() {
        if pending.is_empty() {
            match found.recv().await {
                Some(bad) => pending.push(bad),
                None => open = false,
            }
        }
        while let Ok(bad) = found.try_recv() {
            if pending.len() < MAX_PENDING_BAD_UNITS {
                pending.push(bad);
            }
        }
        let Some(&(disk, _)) = pending.first() else { continue };
        let chosen: Vec<usize> = (0..pending.len())
            .filter(|&i| pending[i].0 == disk)
            .take(MAX_BAD_UNITS_PER_REPORT)
            .collect();
        let batch: Vec<BadUnit> = chosen.iter().map(|&i| pending[i].1.clone()).collect();
        let body = serde_json::to_vec(&BadUnits { disk, units: batch.clone() })
            .expect("a report always serialises");
        let url = format!("{}/v1/nodes/{}/bad-units", metas.base(), reporter.node_id);
        let sent = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send_signed(&reporter.signer)
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                let reply = response.text().await.unwrap_or_default();
                tracing::info!(disk, units = batch.len(), %reply, "bad units reported to meta");
                let mut index = 0;
                let mut next = chosen.iter().peekable();
                pending.retain(|_| {
                    let sent = next.next_if_eq(&&index).is_some();
                    index += 1;
                    !sent
                });
                backoff = Duration::from_millis(500);
            }
            outcome => {
                let why = metas.failure(outcome);
                tracing::warn!(%url, %why, pending = pending.len(), "reporting bad units failed; retrying");
                if !pause(&mut stopped, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// The inventory loop: a digest of every disk at start and every
/// [`inventory_interval_ms`], until the node stops.
pub(crate) async fn inventories(
    node: Arc<Node>,
    interval_ms: u64,
    reporter: Reporter,
    mut stopped: watch::Receiver<bool>,
) {
    let Some(client) = client() else { return };
    let mut metas = Metas::new(&reporter.meta_url);
    let node_id = reporter.node_id;
    // Per disk: when its next digest is due.
    let mut due: Vec<u64> = vec![now_ms(); node.disks.len()];
    loop {
        let next = due.iter().copied().min().unwrap_or(u64::MAX);
        if !pause(&mut stopped, Duration::from_millis(next.saturating_sub(now_ms()))).await {
            return;
        }
        for (index, disk) in node.disks.iter().enumerate() {
            if due[index] > now_ms() {
                continue;
            }
            let listing = disk.clone();
            let digest = tokio::task::spawn_blocking(move || {
                let start = Instant::now();
                let keys = listing.list()?;
                let seed = rand_seed();
                let mut digest = Inventory::for_units(keys.len() as u64, seed);
                for key in &keys {
                    digest.insert(key);
                }
                Ok::<_, weft_store::StoreError>((digest, start))
            })
            .await;
            let (digest, listed) = match digest {
                Ok(Ok(listed)) => listed,
                Ok(Err(error)) => {
                    // A failed disk: heartbeats report it; try again next interval.
                    tracing::debug!(disk = index, %error, "no inventory of a disk that cannot list");
                    due[index] = now_ms() + interval_ms;
                    continue;
                }
                Err(error) => {
                    tracing::error!(%error, "building an inventory panicked");
                    due[index] = now_ms() + interval_ms;
                    continue;
                }
            };
            let url = format!(
                "{}/v1/nodes/{node_id}/disks/{index}/inventory?units={}&hashes={}&seed={}&listing_ms={}",
                metas.base(),
                digest.units(),
                digest.hashes(),
                digest.seed(),
                listed.elapsed().as_millis()
            );
            let sent = client
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(digest.to_bytes())
                .send_signed(&reporter.signer)
                .await;
            due[index] = now_ms() + interval_ms;
            match sent {
                Ok(response) if response.status().is_success() => {
                    let body = response.bytes().await.unwrap_or_default();
                    match serde_json::from_slice::<InventoryReply>(&body) {
                        Ok(reply) => {
                            if let Some(wait) = reply.retry_after_ms {
                                due[index] = now_ms() + wait.min(interval_ms);
                            }
                            tracing::info!(
                                disk = index,
                                held = digest.units(),
                                ?reply,
                                "inventory sent"
                            );
                        }
                        Err(error) => {
                            tracing::warn!(%error, "meta's inventory reply is unreadable")
                        }
                    }
                }
                outcome => {
                    let why = metas.failure(outcome);
                    tracing::warn!(%url, %why, "sending an inventory failed; retrying soon");
                    due[index] = now_ms() + interval_ms.min(5000);
                }
            }
        }
    }
}

/// A seed that differs from digest to digest.
fn rand_seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32) ^ 0x5851_f42d_4c95_7f2d
}

fn read_last_start(path: &PathBuf) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("last_pass_start_ms")?.as_u64().filter(|&ms| ms <= now_ms())
}

fn write_last_start(path: &PathBuf, ms: u64) {
    let tmp = path.with_extension("json.tmp");
    let body = serde_json::json!({ "last_pass_start_ms": ms }).to_string();
    let written = std::fs::write(&tmp, body).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(error) = written {
        tracing::warn!(path = %path.display(), %error, "cannot record the scrub's schedule");
    }
}
