//! The unit sweeper: deletes unit files no meta record points at (leaked units), so their
//! disk space comes back.
//!
//! Units leak when a client dies between a write's `begin` and `commit`, when a node is down
//! while its units are deleted or moved elsewhere by a repair, and when deleting the units of
//! an aborted or replaced transition fails. Meta knows every unit it references
//! (`GET /v1/references`: committed objects, writes in progress, pending transitions), so
//! whatever else a node holds is garbage — once it is old enough.
//!
//! Data flow of one [`sweep`]: meta rolls back abandoned transitions (`POST
//! /v1/transitions/expire`: those whose executor's lease passed are aborted) and the sweeper
//! deletes the units each one's abort list names → meta expires abandoned writes (`POST /v1/writes/expire`,
//! begun more than [`GcOptions::expire_writes_after_ms`] ago) → for each node meta reports
//! up: list every disk of it *with ages* (`GET /v1/disks/{d}/units?ages=1`) → *then* fetch
//! meta's references for that node → delete each listed unit that is not referenced and at
//! least [`GcOptions::grace_ms`] old.
//!
//! Invariants:
//! - A unit is deleted only if it was listed before meta's references were fetched, is not
//!   among them, and was at least `grace_ms` old when listed. A unit written after the
//!   listing is never seen; a unit listed before whose record exists is in the references
//!   (meta reads its tables in an order that keeps records that move meanwhile, see its
//!   `service/gc.rs`). What is left is a unit written before its record exists: a repair
//!   writes the new copy and only then relocates the unit in meta, within its lease (meta
//!   refuses a completion after the lease); hence the grace must be longer than every repair
//!   lease (60 s by default; the default grace is 15 min). Writes and transitions write their
//!   units only after their record exists.
//! - Nothing is deleted when meta's references could not be fetched, on a node whose
//!   listing names another node id than meta's record (an endpoint reused by another node),
//!   or on a disk meta's answer does not list; each of those is reported as an error.
//! - Ages come from the node's own clock (file mtime against the node's now), so no clock
//!   agreement between the sweeper and the nodes is needed.
//! - A dry run deletes nothing and expires nothing; it reports what a sweep would do.
//! - An expired transition's units are deleted from meta's abort list at once, whatever
//!   their age: once aborted nothing references them (meta leaves out relocation copies the
//!   object holds). A live transition's units are referenced while it is pending, so the
//!   grace is not what protects them; its lease is (renewed by its executor).
//! - Nodes are reached over HTTP only: deletes through [`crate::NodeClient`], listings with
//!   this module's own HTTP client (the node client has no listing call).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use weft_layout::UnitId;

use crate::{Client, ClientError, Result, UnitInfo};

/// Default grace: units younger than this are never deleted (15 minutes).
pub const DEFAULT_GRACE_MS: u64 = 15 * 60_000;
/// Default age after which a write in progress counts as abandoned (6 hours).
pub const DEFAULT_EXPIRE_WRITES_AFTER_MS: u64 = 6 * 3_600_000;
/// Deletes in flight at once on one node.
const PARALLEL_DELETES: usize = 8;
/// Most error messages a report keeps (`errors_total` counts them all).
const MAX_ERRORS_KEPT: usize = 50;

/// How a sweep runs.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Units younger than this are kept even when unreferenced; must exceed every repair
    /// lease.
    pub grace_ms: u64,
    /// Writes in progress begun more than this long ago are expired first; None: none are.
    pub expire_writes_after_ms: Option<u64>,
    /// Report only: delete nothing, expire nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> GcOptions {
        GcOptions {
            grace_ms: DEFAULT_GRACE_MS,
            expire_writes_after_ms: Some(DEFAULT_EXPIRE_WRITES_AFTER_MS),
            dry_run: false,
        }
    }
}

/// One write meta expired (or, in a dry run, would expire).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExpiredWrite {
    pub bucket: String,
    pub key: String,
    pub generation: u64,
    pub units: u64,
}

/// One transition meta expired (rolled back), or in a dry run would.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExpiredTransition {
    pub id: u64,
    pub bucket: String,
    pub key: String,
    pub created_ms: u64,
    /// Units its abort left to delete (new parity, relocation copies).
    pub units: u64,
}

/// What one sweep found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub grace_ms: u64,
    /// Transitions whose lease expired, rolled back (dry run: that would be).
    pub expired_transitions: Vec<ExpiredTransition>,
    /// Units of expired transitions deleted (dry run: that would be); not in `deleted`.
    pub expired_units_deleted: u64,
    /// Writes in progress expired (dry run: that would be).
    pub expired_writes: Vec<ExpiredWrite>,
    /// Nodes meta reported up whose disks were listed.
    pub nodes_scanned: u64,
    /// Nodes meta reported down: not swept (their leftovers go once they are back).
    pub nodes_down: u64,
    pub disks_scanned: u64,
    /// Unit files listed.
    pub units_seen: u64,
    /// Listed units meta references.
    pub referenced: u64,
    /// Listed units meta does not reference (deleted, young, or failed to delete).
    pub unreferenced: u64,
    /// Unreferenced units kept because they are younger than the grace.
    pub skipped_young: u64,
    /// Units deleted (dry run: that would be).
    pub deleted: u64,
    /// File bytes (headers included) of the units deleted (dry run: that would be).
    pub bytes: u64,
    /// Everything that went wrong, one sentence each (at most 50; see `errors_total`).
    pub errors: Vec<String>,
    pub errors_total: u64,
    pub elapsed_ms: u64,
}

impl GcReport {
    fn error(&mut self, message: String) {
        tracing::warn!(%message, "gc");
        self.errors_total += 1;
        if self.errors.len() < MAX_ERRORS_KEPT {
            self.errors.push(message);
        }
    }
}

/// A listed unit: its key, age and file length.
struct Listed {
    unit: String,
    age_ms: u64,
    file_bytes: u64,
}

/// A node as meta reports it.
struct NodeView {
    id: u32,
    endpoint: String,
    /// Disks not reported failed.
    disks: Vec<u32>,
}

fn meta_nodes(value: &Value) -> Result<(Vec<NodeView>, u64)> {
    let bad = || ClientError::Invalid(format!("meta sent a bad node list: {value}"));
    let mut up = Vec::new();
    let mut down = 0;
    for node in value["nodes"].as_array().ok_or_else(bad)? {
        if node["state"] != "up" {
            down += 1;
            continue;
        }
        let id = node["id"].as_u64().and_then(|id| u32::try_from(id).ok()).ok_or_else(bad)?;
        let endpoint = node["endpoint"].as_str().ok_or_else(bad)?.trim_end_matches('/').into();
        let disks = node["disks"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .filter(|d| d["failed"].is_null())
            .map(|d| d["index"].as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(bad))
            .collect::<Result<Vec<u32>>>()?;
        up.push(NodeView { id, endpoint, disks });
    }
    Ok((up, down))
}

/// Runs one sweep (see the module doc). Fails only when meta cannot say which nodes are up;
/// every other failure is counted in the report and spares what it concerns.
pub async fn sweep(client: &Client, options: &GcOptions) -> Result<GcReport> {
    let started = Instant::now();
    let mut report =
        GcReport { dry_run: options.dry_run, grace_ms: options.grace_ms, ..GcReport::default() };

    expire_transitions(client, options, &mut report).await;

    if let Some(older_than_ms) = options.expire_writes_after_ms {
        let body = json!({ "older_than_ms": older_than_ms, "dry_run": options.dry_run });
        match client.meta.post_json("/v1/writes/expire", body).await {
            Ok(answer) => match serde_json::from_value(answer["expired"].clone()) {
                Ok(expired) => report.expired_writes = expired,
                Err(e) => report.error(format!("meta sent a bad expiry answer: {e}")),
            },
            Err(error) => report.error(format!("expiring abandoned writes: {error}")),
        }
    }

    let (nodes, down) = meta_nodes(&client.meta.get_json("/v1/nodes").await?)?;
    report.nodes_down = down;
    for node in nodes {
        sweep_node(client, options, &node, &mut report).await;
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// Has meta roll back the transitions whose lease expired, and deletes the units each one's
/// abort left (see the module invariants).
async fn expire_transitions(client: &Client, options: &GcOptions, report: &mut GcReport) {
    let body = json!({ "dry_run": options.dry_run });
    let answer = match client.meta.post_json("/v1/transitions/expire", body).await {
        Ok(answer) => answer,
        Err(error) => return report.error(format!("expiring abandoned transitions: {error}")),
    };
    for expired in answer["expired"].as_array().into_iter().flatten() {
        let units = match crate::transition::units(&expired["delete"]) {
            Ok(units) => units,
            Err(e) => {
                report.error(format!("meta sent a bad transition expiry answer: {e}"));
                continue;
            }
        };
        let (Some(id), Some(bucket), Some(key)) =
            (expired["id"].as_u64(), expired["bucket"].as_str(), expired["key"].as_str())
        else {
            report.error(format!("meta sent a bad transition expiry answer: {expired}"));
            continue;
        };
        let failed = if options.dry_run { 0 } else { client.delete_units(&units).await };
        for _ in 0..failed {
            report.error(format!(
                "a unit of expired transition {id} of {bucket}/{key} could not be deleted \
                 (left for a later sweep)"
            ));
        }
        report.expired_units_deleted += (units.len() - failed) as u64;
        tracing::info!(
            id,
            bucket,
            key,
            units = units.len(),
            dry_run = options.dry_run,
            "abandoned transition rolled back"
        );
        report.expired_transitions.push(ExpiredTransition {
            id,
            bucket: bucket.into(),
            key: key.into(),
            created_ms: expired["created_ms"].as_u64().unwrap_or(0),
            units: units.len() as u64,
        });
    }
}

/// Lists every disk of `node`, then fetches its references, then deletes.
async fn sweep_node(client: &Client, options: &GcOptions, node: &NodeView, report: &mut GcReport) {
    // 1. Listings first (see the module invariants).
    let mut listings: Vec<(u32, Vec<Listed>)> = Vec::new();
    for &disk in &node.disks {
        match list_disk(&client.nodes, node, disk).await {
            Ok(units) => listings.push((disk, units)),
            Err(message) => report.error(message),
        }
    }
    if listings.is_empty() {
        return;
    }
    report.nodes_scanned += 1;
    // 2. Then meta's references; without them, nothing is deleted.
    let path = format!("/v1/references?node_id={}", node.id);
    let references = match client.meta.get_json(&path).await.map(|v| references_of(&v, node.id)) {
        Ok(Ok(references)) => references,
        Ok(Err(message)) | Err(ClientError::Invalid(message)) => {
            report.error(format!("node {}: nothing deleted: {message}", node.id));
            return;
        }
        Err(error) => {
            report.error(format!(
                "node {}: nothing deleted: cannot fetch references: {error}",
                node.id
            ));
            return;
        }
    };
    // 3. Delete what is unreferenced and old enough.
    let mut doomed: Vec<(u32, Listed)> = Vec::new();
    for (disk, units) in listings {
        report.disks_scanned += 1;
        report.units_seen += units.len() as u64;
        let Some(referenced) = references.get(&disk) else {
            report.error(format!(
                "node {} disk {disk}: meta's references do not list this disk; nothing deleted",
                node.id
            ));
            continue;
        };
        for unit in units {
            if referenced.contains(&unit.unit) {
                report.referenced += 1;
                continue;
            }
            report.unreferenced += 1;
            if unit.age_ms < options.grace_ms {
                report.skipped_young += 1;
            } else {
                doomed.push((disk, unit));
            }
        }
    }
    if options.dry_run {
        report.deleted += doomed.len() as u64;
        report.bytes += doomed.iter().map(|(_, u)| u.file_bytes).sum::<u64>();
        return;
    }
    let results: Vec<(u64, std::result::Result<(), String>)> =
        futures_util::stream::iter(doomed.into_iter().map(|(disk, unit)| async move {
            let result = delete_unit(client, node, disk, &unit.unit).await;
            if result.is_ok() {
                let (id, name, age_ms) = (node.id, &unit.unit, unit.age_ms);
                tracing::debug!(node = id, disk, unit = %name, age_ms, "unreferenced unit deleted");
            }
            (unit.file_bytes, result)
        }))
        .buffer_unordered(PARALLEL_DELETES)
        .collect()
        .await;
    for (bytes, result) in results {
        match result {
            Ok(()) => {
                report.deleted += 1;
                report.bytes += bytes;
            }
            Err(message) => report.error(message),
        }
    }
}

/// `GET /v1/disks/{disk}/units?ages=1` on `node`, checking the node is the one meta means.
async fn list_disk(
    nodes: &crate::NodeClient,
    node: &NodeView,
    disk: u32,
) -> std::result::Result<Vec<Listed>, String> {
    let failed =
        |cause: String| format!("node {} disk {disk}: cannot list units: {cause}", node.id);
    let value = nodes
        .list_disk_with_ages(node.id, &node.endpoint, disk)
        .await
        .map_err(|f| failed(f.cause))?;
    let text = value.to_string();
    if value["node_id"].as_u64() != Some(u64::from(node.id)) {
        return Err(failed(format!(
            "{} answers as node {} (an endpoint reused by another node?); nothing deleted",
            node.endpoint, value["node_id"]
        )));
    }
    let bad = || failed(format!("not a unit listing with ages: {text}"));
    value["units"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|u| {
            Ok(Listed {
                unit: u["unit"].as_str().ok_or_else(bad)?.to_string(),
                age_ms: u["age_ms"].as_u64().ok_or_else(bad)?,
                file_bytes: u["file_bytes"].as_u64().unwrap_or(0),
            })
        })
        .collect()
}

/// Meta's references for `node`, by disk.
fn references_of(
    value: &Value,
    node: u32,
) -> std::result::Result<BTreeMap<u32, BTreeSet<String>>, String> {
    let bad = || format!("meta sent a bad references answer: {value}");
    let mut out: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for disk in value["disks"].as_array().ok_or_else(bad)? {
        if disk["node_id"].as_u64() != Some(u64::from(node)) {
            continue;
        }
        let index = disk["disk"].as_u64().and_then(|d| u32::try_from(d).ok()).ok_or_else(bad)?;
        let units = disk["units"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|u| u.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<std::result::Result<BTreeSet<String>, String>>()?;
        out.entry(index).or_default().extend(units);
    }
    Ok(out)
}

/// The unit a unit key names (`<object>-d<block:8 hex>-<gen>` or
/// `<object>-p<group:8 hex><index:4 hex>-<gen>`, docs/node-api.md), for error messages.
fn unit_of_key(key: &str) -> Option<UnitId> {
    let mut parts = key.split('-');
    let (_object, index, _generation) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let hex = |text: &str| usize::from_str_radix(text, 16).ok();
    match index.as_bytes().first()? {
        b'd' if index.len() == 9 => Some(UnitId::Data(hex(&index[1..])?)),
        b'p' if index.len() == 13 => {
            Some(UnitId::Parity { group: hex(&index[1..9])?, index: hex(&index[9..])? })
        }
        _ => None,
    }
}

/// Deletes one unit through the node client (a unit already gone counts as deleted).
async fn delete_unit(
    client: &Client,
    node: &NodeView,
    disk: u32,
    unit: &str,
) -> std::result::Result<(), String> {
    let failed =
        |cause: String| format!("node {} disk {disk}: cannot delete {unit}: {cause}", node.id);
    let Some(id) = unit_of_key(unit) else {
        return Err(failed("not a unit name".into()));
    };
    let info = UnitInfo {
        unit: id,
        node_id: node.id,
        endpoint: Some(node.endpoint.clone()),
        disk,
        unit_key: unit.to_string(),
        len: 0,
        state: None,
        digest: None,
    };
    client.nodes.delete(&info).await.map_err(|failure| failed(failure.cause))
}

/// Parses a duration: `250ms`, `30s`, `10m`, `6h`, `1d`, or a plain number of milliseconds.
pub fn parse_duration_ms(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 10m, 6h or 500 (ms)"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1,
        "s" => 1000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {text:?}; use ms, s, m, h or d"
            ))
        }
    };
    number.checked_mul(multiplier).ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("10m"), Ok(600_000));
        assert_eq!(parse_duration_ms("6h"), Ok(21_600_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("1500"), Ok(1500));
        assert_eq!(parse_duration_ms("0"), Ok(0));
        assert_eq!(parse_duration_ms(" 15M "), Ok(900_000));
        for bad in ["", "m", "1.5h", "-1s", "3w", "99999999999999999999h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unit_keys_name_their_unit() {
        let object = "00000000000000000000000000000001";
        assert_eq!(
            unit_of_key(&format!("{object}-d0000000a-0000000000000000")),
            Some(UnitId::Data(10))
        );
        assert_eq!(
            unit_of_key(&format!("{object}-p000000020001-0000000000000007")),
            Some(UnitId::Parity { group: 2, index: 1 })
        );
        for bad in ["", "x", &format!("{object}-q00000000-0"), &format!("{object}-d1-0-0")] {
            assert_eq!(unit_of_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn references_of_keeps_only_the_node_asked_for() {
        let answer = json!({"disks": [
            {"node_id": 1, "disk": 0, "units": ["a", "b"]},
            {"node_id": 1, "disk": 1, "units": []},
            {"node_id": 2, "disk": 0, "units": ["c"]},
        ]});
        let refs = references_of(&answer, 1).unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[&0], BTreeSet::from(["a".to_string(), "b".to_string()]));
        assert!(refs[&1].is_empty());
        assert!(references_of(&json!({"disks": [{"node_id": 1}]}), 1).is_err());
        assert!(references_of(&json!({}), 1).is_err());
    }
}
