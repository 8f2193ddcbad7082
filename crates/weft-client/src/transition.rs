//! The transition executor: changes the code of a stored object (Okapi §4.5).
//!
//! Regroup data flow: meta plans (`POST /v1/transitions`: the new groups, where each new
//! parity unit goes under a fresh parity generation, which data blocks must move) → for each
//! new group, its data blocks are read once (degraded when a unit is unavailable), the new
//! parity is encoded and written, and the blocks to relocate are written at their new disk
//! from the bytes already read → `commit` swaps the object's layout and parity list in one
//! meta transaction → the old parity and the old copies of relocated blocks are deleted.
//! Restripe data flow: the object is read whole and written again under the new layout as a
//! new generation of the same key (a normal put; its commit replaces the old units).
//!
//! Invariants:
//! - Until `commit`, meta's record of the object is untouched: the old parity stays valid and
//!   readable, reads and repairs go on as before. New parity units have their own unit keys
//!   (parity generation = transition id), so nothing old is overwritten.
//! - Any failure before the commit aborts the transition in meta and deletes what was
//!   written; a crash leaves a pending transition that the next begin for the object replaces
//!   (its `replaced` list names the units to delete), an abort removes, or — once its lease
//!   expired — the sweeper rolls back (its units are garbage then, never referenced).
//! - A unit the committed object may reference is never deleted: when a commit's answer is
//!   lost (meta crashed or unreachable), the transition may have committed, so its new
//!   parity and relocation copies stay. Only meta's answers decide: abort's list; or, when
//!   meta says the transition is no longer pending, the object's parity generation tells
//!   whether it committed (then the old parity is the garbage) or not (then the new parity,
//!   whose keys carry this transition's id, is nobody's). Relocation copies are deleted only
//!   from abort's list: a copy has the block's own key and may be the object's or a newer
//!   transition's.
//! - A regroup begins again (at most [`REGROUP_ATTEMPTS`] times in all, IO counted over all)
//!   when it was rolled back because meta said to (a repair moved a block meanwhile:
//!   `relocation_conflict`, `placement_conflict`) or because a node it wrote to failed —
//!   after waiting, at most the node down timeout, for meta to judge that node down, so the
//!   next plan avoids it, and then (at most [`REPAIR_WAIT_MAX`]) for repair to move the
//!   object's units off down nodes, so that repairs do not move blocks under the next plan.
//! - The executor holds a lease on its transition (`lease_ms` at begin, default
//!   [`DEFAULT_TRANSITION_LEASE_MS`]) and renews it every third of the lease from a spawned
//!   task that ends with the attempt. Once meta's clock passes the deadline, the sweeper
//!   (`weft gc`, `weft serve repair`) expires the transition: meta aborts it and the sweeper
//!   deletes its units — the object was never touched, so it is back to its old layout in
//!   full. When a renewal says the transition is no longer pending (expired, replaced,
//!   committed elsewhere), the executor stops writing, settles as after any failure and
//!   fails; a renewal meta did not answer is retried at the next tick.
//! - Nothing resumes a dead executor's work: a re-run of `weft transition` plans afresh
//!   (its begin replaces a pending transition, whose units it deletes) and reads the data
//!   again; the plan is cheap and the reads are what a resume would do anyway.
//! - Transitioning an object to the layout it already has does nothing and succeeds
//!   (`unchanged`), so a run killed after its commit can simply be run again.
//! - Every byte is accounted: bytes fetched from nodes, data, parity and relocated bytes
//!   written; `network_bytes` is their sum (the executor is a client of every node).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use weft_layout::{StripedLayout, TransitionIo, TransitionMode, UnitId};
use weft_wire::UnitDigest;

use crate::{read::UnitRebuilder, Client, ClientError, ObjectInfo, PutOptions, Result, UnitInfo};

/// What one transition did, measured, beside what meta predicted.
#[derive(Clone, Debug, Serialize)]
pub struct TransitionReport {
    pub bucket: String,
    pub key: String,
    pub mode: TransitionMode,
    pub from: StripedLayout,
    pub to: StripedLayout,
    pub size: u64,
    pub dry_run: bool,
    /// Measured bytes (zero for a dry run).
    pub io: TransitionIo,
    /// meta's predictions for both modes: `{"regroup": {...}, "restripe": {...}}`.
    pub predicted: Value,
    pub relocated_blocks: usize,
    pub elapsed_ms: u64,
    /// The object already had the layout: nothing was done.
    pub unchanged: bool,
    /// Regroups begun (more than 1 after a rollback meta or a failed node asked for).
    pub attempts: usize,
    /// The object was in the RAIDP tier (`from` is then its nominal two-copy layout).
    pub from_raidp: bool,
    /// The object goes to the RAIDP tier (`to` is then its nominal two-copy layout).
    pub to_raidp: bool,
    /// The object was packed (geometric layout; `from` is then its bucket's warm layout).
    #[serde(default)]
    pub from_geometric: bool,
    /// The object goes into its bucket's bins (`to` is then its warm layout).
    #[serde(default)]
    pub to_geometric: bool,
}

/// The lease an executor takes on its transition unless told otherwise (meta's default too).
pub const DEFAULT_TRANSITION_LEASE_MS: u64 = 60_000;

/// Most times one regroup is begun (see the module's invariants).
pub const REGROUP_ATTEMPTS: usize = 3;

/// Longest wait for meta to judge a failed node down before beginning again.
const NODE_DOWN_WAIT_MAX: Duration = Duration::from_secs(60);
/// Longest wait, before beginning again, for repair to move the object's units off down
/// nodes (a repair that moves a block while a transition is pending is what makes its
/// commit conflict).
const REPAIR_WAIT_MAX: Duration = Duration::from_secs(30);

/// How a failed regroup attempt ended.
enum Failed {
    /// Rolled back (nothing of it is referenced) for a reason worth beginning again; with the
    /// node a write failed on.
    Again { error: ClientError, node: Option<u32> },
    /// Rolled back or not, nothing more to try.
    Final(ClientError),
}

/// Where a transition stands after a failure, as meta says.
enum Settled {
    /// Not pending, not committed: what it wrote is deleted.
    RolledBack,
    /// It committed (the commit's answer was lost): the old parity was deleted.
    Committed,
    /// meta could not say (unreachable, or an unexpected answer): nothing was deleted.
    Unknown(ClientError),
}

/// The task renewing a transition's lease; stopped when dropped.
struct Renewer(tokio::task::JoinHandle<()>);

impl Drop for Renewer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Renewer {
    /// Renews transition `id` of `object` every `lease_ms / 3`; sends the error and stops
    /// when meta says the transition is no longer pending (it lost it).
    fn start(
        client: &Client,
        object: &ObjectInfo,
        id: u64,
        lease_ms: u64,
    ) -> (Renewer, tokio::sync::mpsc::Receiver<ClientError>) {
        let (tell, lost) = tokio::sync::mpsc::channel(1);
        let client = client.clone();
        let body = json!({"bucket": object.bucket, "key": object.key, "id": id,
                          "lease_ms": lease_ms});
        let every = Duration::from_millis((lease_ms / 3).max(1));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match client.meta.post_json("/v1/transitions/renew", body.clone()).await {
                    Ok(_) => {}
                    Err(ClientError::Meta { status, code, message })
                        if status == 409 || status == 404 =>
                    {
                        tracing::warn!(id, %message, "transition lease lost; giving up");
                        let error = ClientError::Meta {
                            status,
                            code,
                            message: format!("transition {id} lost its lease: {message}"),
                        };
                        let _ = tell.send(error).await;
                        return;
                    }
                    // meta unreachable or failing: try again at the next tick (the lease
                    // may still hold).
                    Err(error) => tracing::warn!(id, %error, "renewing the transition lease"),
                }
            }
        });
        (Renewer(task), lost)
    }
}

/// A planned relocation as meta sends it.
struct PlannedMove {
    block: usize,
    /// The block's new home (same unit key, another disk); the old copy is in commit's
    /// delete list.
    to: UnitInfo,
}

fn field<'a>(value: &'a Value, name: &str) -> Result<&'a Value> {
    match &value[name] {
        Value::Null => Err(ClientError::Invalid(format!("meta's transition plan lacks {name:?}"))),
        found => Ok(found),
    }
}

pub(crate) fn units(value: &Value) -> Result<Vec<UnitInfo>> {
    value.as_array().into_iter().flatten().map(UnitInfo::from_json).collect()
}

/// A relocation entry: `{"unit","len","unit_key","from":{node_id,endpoint,disk},"to":{…}}`.
fn planned_move(value: &Value) -> Result<PlannedMove> {
    let bad = || ClientError::Invalid(format!("meta sent a bad relocation: {value}"));
    let unit = value["unit"].as_str().and_then(UnitId::parse_short_name).ok_or_else(bad)?;
    let UnitId::Data(block) = unit else { return Err(bad()) };
    let at = |side: &Value| -> Result<UnitInfo> {
        UnitInfo::from_json(&json!({
            "unit": unit.short_name(), "node_id": side["node_id"], "endpoint": side["endpoint"],
            "disk": side["disk"], "unit_key": value["unit_key"], "len": value["len"],
        }))
    };
    Ok(PlannedMove { block, to: at(&value["to"])? })
}

impl Client {
    /// Changes the code of (bucket, key) to `to` (which must keep the striping for a regroup).
    /// `dry_run` plans and reports the predicted IO without writing anything.
    pub async fn transition(
        &self,
        bucket: &str,
        key: &str,
        to: StripedLayout,
        mode: Option<TransitionMode>,
        dry_run: bool,
    ) -> Result<TransitionReport> {
        self.transition_leased(bucket, key, to, mode, dry_run, DEFAULT_TRANSITION_LEASE_MS).await
    }

    /// [`Client::transition`] holding each regroup's transition under a lease of `lease_ms`
    /// (renewed every third of it; see the module's invariants).
    pub async fn transition_leased(
        &self,
        bucket: &str,
        key: &str,
        to: StripedLayout,
        mode: Option<TransitionMode>,
        dry_run: bool,
        lease_ms: u64,
    ) -> Result<TransitionReport> {
        if lease_ms == 0 {
            return Err(ClientError::Invalid("a transition lease must be positive".into()));
        }
        let object = self.meta.get_object(bucket, key).await?;
        if object.packed {
            // A packed object's bytes are chunks of bin stripes: it leaves them by a rewrite.
            if mode == Some(TransitionMode::Regroup) {
                return Err(ClientError::Invalid(format!(
                    "{bucket}/{key} is packed in its bucket's bins: it has no parity units of \
                     its own to regroup; it moves to {} by a rewrite (--mode restripe, or auto)",
                    to.code
                )));
            }
            return self.restripe(object, Target::Striped(to), dry_run).await;
        }
        if object.raidp.is_some() {
            // No parity units to regroup: a RAIDP object leaves its tier by a rewrite.
            if mode == Some(TransitionMode::Regroup) {
                return Err(ClientError::Invalid(format!(
                    "{bucket}/{key} is a RAIDP object: it has no parity units to regroup; it \
                     moves to {} by a rewrite (--mode restripe, or auto)",
                    to.code
                )));
            }
            return self.restripe(object, Target::Striped(to), dry_run).await;
        }
        let to = transition_target(object.layout, object.size, &to);
        let mode = mode.unwrap_or_else(|| TransitionMode::auto(&object.layout, &to));
        if object.layout == to {
            return Ok(TransitionReport {
                bucket: object.bucket,
                key: object.key,
                mode,
                from: object.layout,
                to,
                size: object.size,
                dry_run,
                io: TransitionIo::default(),
                predicted: json!({}),
                relocated_blocks: 0,
                elapsed_ms: 0,
                unchanged: true,
                attempts: 0,
                from_raidp: false,
                to_raidp: false,
                from_geometric: false,
                to_geometric: false,
            });
        }
        match mode {
            TransitionMode::Regroup => self.regroup(object, to, dry_run, lease_ms).await,
            TransitionMode::Restripe => self.restripe(object, Target::Striped(to), dry_run).await,
        }
    }

    /// Moves (bucket, key) into the RAIDP tier (two replicas + per-disk Lstor parity) by
    /// rewriting it there; meta needs a RAIDP map (a RAIDP bucket made one). An object
    /// already in the tier is left as it is.
    pub async fn transition_to_raidp(
        &self,
        bucket: &str,
        key: &str,
        dry_run: bool,
    ) -> Result<TransitionReport> {
        let object = self.meta.get_object(bucket, key).await?;
        if object.raidp.is_some() {
            return Ok(TransitionReport {
                bucket: object.bucket,
                key: object.key,
                mode: TransitionMode::Restripe,
                from: object.layout,
                to: object.layout,
                size: object.size,
                dry_run,
                io: TransitionIo::default(),
                predicted: json!({}),
                relocated_blocks: 0,
                elapsed_ms: 0,
                unchanged: true,
                attempts: 0,
                from_raidp: true,
                to_raidp: true,
                from_geometric: false,
                to_geometric: false,
            });
        }
        self.restripe(object, Target::Raidp, dry_run).await
    }

    /// Regroups, beginning again after a rollback worth it (see the module's invariants).
    async fn regroup(
        &self,
        object: ObjectInfo,
        to: StripedLayout,
        dry_run: bool,
        lease_ms: u64,
    ) -> Result<TransitionReport> {
        let started = Instant::now();
        let mut io = TransitionIo::default();
        for attempt in 1.. {
            match self.regroup_once(&object, to, dry_run, lease_ms, &mut io).await {
                Ok(mut report) => {
                    report.attempts = attempt;
                    report.elapsed_ms = started.elapsed().as_millis() as u64;
                    return Ok(report);
                }
                Err(Failed::Again { error, node }) if attempt < REGROUP_ATTEMPTS => {
                    tracing::warn!(%error, attempt, "transition rolled back; beginning again");
                    if let Some(node) = node {
                        self.wait_until_down(node).await;
                    }
                    self.wait_for_repairs(&object.bucket, &object.key).await;
                }
                Err(Failed::Again { error, .. } | Failed::Final(error)) => return Err(error),
            }
        }
        unreachable!("the attempts loop returns")
    }

    /// Waits (at most the node down timeout and a bit, polling) for meta to judge `node`
    /// down, so that a new plan does not use it.
    async fn wait_until_down(&self, node: u32) {
        let down_after = match self.meta.get_json("/v1/nodes").await {
            Ok(nodes) => nodes["down_after_ms"].as_u64().unwrap_or(5000),
            Err(_) => return,
        };
        let wait = Duration::from_millis(down_after + 2000).min(NODE_DOWN_WAIT_MAX);
        tracing::warn!(node, "waiting up to {wait:?} for meta to judge node {node} down");
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if let Ok(nodes) = self.meta.get_json("/v1/nodes").await {
                let down = nodes["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|n| n["id"].as_u64() == Some(u64::from(node)) && n["state"] != "up");
                if down {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (at most [`REPAIR_WAIT_MAX`], polling) until no unit of the object is on a
    /// node meta reports down.
    async fn wait_for_repairs(&self, bucket: &str, key: &str) {
        let deadline = Instant::now() + REPAIR_WAIT_MAX;
        while Instant::now() < deadline {
            match self.meta.get_object(bucket, key).await {
                Ok(object) if object.units.values().any(UnitInfo::is_down) => {}
                _ => return,
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        tracing::warn!(bucket, key, "units still on down nodes; beginning again anyway");
    }

    /// One attempt: plan, write, commit; on failure, settles what it wrote with meta.
    async fn regroup_once(
        &self,
        object: &ObjectInfo,
        to: StripedLayout,
        dry_run: bool,
        lease_ms: u64,
        io: &mut TransitionIo,
    ) -> std::result::Result<TransitionReport, Failed> {
        let body = json!({"bucket": object.bucket, "key": object.key, "layout": to,
                          "mode": "regroup", "lease_ms": lease_ms});
        let plan = self.meta.post_json("/v1/transitions", body).await.map_err(Failed::Final)?;
        self.regroup_planned(&plan, to, dry_run, lease_ms, io).await
    }

    async fn regroup_planned(
        &self,
        plan: &Value,
        to: StripedLayout,
        dry_run: bool,
        lease_ms: u64,
        io: &mut TransitionIo,
    ) -> std::result::Result<TransitionReport, Failed> {
        // Before the transition is known to meta's caller: a bad plan is final.
        let parsed = (|| {
            let id = field(plan, "transition")?["id"]
                .as_u64()
                .ok_or_else(|| ClientError::Invalid("meta's transition has no id".into()))?;
            let current = ObjectInfo::from_json(field(plan, "object")?.clone())?;
            let create = units(field(plan, "create")?)?;
            let moves: Vec<PlannedMove> = plan["relocations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(planned_move)
                .collect::<Result<_>>()?;
            Ok::<_, ClientError>((id, current, create, moves))
        })();
        let (id, current, create, moves) = parsed.map_err(Failed::Final)?;
        if let Some(replaced) = plan["replaced"].as_object() {
            // An unfinished earlier transition: its parity and block copies are garbage now.
            for list in ["create", "relocation_copies"] {
                match units(replaced.get(list).unwrap_or(&Value::Null)) {
                    Ok(left) => {
                        self.delete_units(&left).await;
                    }
                    Err(error) => tracing::warn!(%error, "units of a replaced transition left"),
                }
            }
        }
        let mut report = TransitionReport {
            bucket: current.bucket.clone(),
            key: current.key.clone(),
            mode: TransitionMode::Regroup,
            from: current.layout,
            to,
            size: current.size,
            dry_run,
            io: TransitionIo::default(),
            predicted: plan["predicted"].clone(),
            relocated_blocks: moves.len(),
            elapsed_ms: 0,
            unchanged: false,
            attempts: 1,
            from_raidp: false,
            to_raidp: false,
            from_geometric: false,
            to_geometric: false,
        };
        if dry_run {
            self.abort_transition(&current, id).await.map_err(Failed::Final)?;
            return Ok(report);
        }
        // Renewed until this attempt ends (the guard stops the task on every way out).
        let (renewer, mut lost) = Renewer::start(self, &current, id, lease_ms);
        let mut digests = BTreeMap::new();
        let written = tokio::select! {
            written = self.write_regroup(&current, &to, &create, &moves, io, &mut digests) => written,
            error = lost.recv() => Err(error.unwrap_or_else(|| {
                ClientError::Invalid("the transition's lease renewer stopped".into())
            })),
        };
        if written.is_err() {
            // Lost or failed: no more renewals while it is settled.
            drop(renewer);
        }
        io.network_bytes =
            io.bytes_read + io.data_bytes_written + io.parity_bytes_written + io.relocated_bytes;
        report.io = *io;
        let (error, commit_sent) = match written {
            Err(error) => (error, false),
            Ok(()) => match self.commit_transition(&current, id, &digests).await {
                Ok(()) => return Ok(report),
                Err(error) => (error, true),
            },
        };
        let again = match &error {
            ClientError::Node { node_id, .. } if !commit_sent => Some(Some(*node_id)),
            // relocation_conflict, placement_conflict: "abort and begin again".
            ClientError::Meta { code, message, .. }
                if code == "transition_conflict" && message.contains("begin again") =>
            {
                Some(None)
            }
            _ => None,
        };
        match self.settle(&current, id, &create, commit_sent).await {
            Settled::RolledBack => Err(match again {
                Some(node) => Failed::Again { error, node },
                None => Failed::Final(error),
            }),
            Settled::Committed => {
                tracing::warn!(%error, id, "the commit's answer was lost, but it committed");
                Ok(report)
            }
            Settled::Unknown(why) => {
                tracing::warn!(
                    %why, id,
                    "meta cannot say whether the transition committed: its units are left; \
                     run it again to finish"
                );
                Err(Failed::Final(error))
            }
        }
    }

    /// After a failed attempt: rolls the transition back if meta still has it pending, or
    /// finds it committed (a commit whose answer was lost). Deletes nothing a committed
    /// object may reference (see the module's invariants).
    async fn settle(
        &self,
        current: &ObjectInfo,
        id: u64,
        create: &[UnitInfo],
        commit_sent: bool,
    ) -> Settled {
        match self.abort_transition(current, id).await {
            Ok(()) => return Settled::RolledBack,
            // 404 no_such_transition: no longer pending (committed, replaced or dropped).
            Err(ClientError::Meta { status: 404, .. }) => {}
            // Commit never sent: its units cannot be referenced; the pending record (meta
            // unreachable) names them to the next begin or abort too.
            Err(_) if !commit_sent => {
                self.delete_units(create).await;
                return Settled::RolledBack;
            }
            Err(error) => return Settled::Unknown(error),
        }
        if commit_sent {
            match self.meta.get_object(&current.bucket, &current.key).await {
                Ok(now)
                    if now.generation == current.generation
                        && now.raw["parity_generation"].as_u64() == Some(id) =>
                {
                    // Committed: the old parity is garbage (its keys carry the old parity
                    // generation, never this one). Old copies of relocated blocks are left.
                    let old: Vec<UnitInfo> = current
                        .units
                        .values()
                        .filter(|u| matches!(u.unit, UnitId::Parity { .. }))
                        .cloned()
                        .collect();
                    self.delete_units(&old).await;
                    return Settled::Committed;
                }
                Ok(_) | Err(ClientError::Meta { status: 404, .. }) => {}
                Err(error) => return Settled::Unknown(error),
            }
        }
        // Neither pending nor committed: this transition's parity keys are nobody's.
        self.delete_units(create).await;
        Settled::RolledBack
    }

    /// Reads each new group's data blocks once, writes its new parity and the blocks that move.
    async fn write_regroup(
        &self,
        object: &ObjectInfo,
        to: &StripedLayout,
        create: &[UnitInfo],
        moves: &[PlannedMove],
        io: &mut TransitionIo,
        digests: &mut BTreeMap<UnitId, UnitDigest>,
    ) -> Result<()> {
        let mut rebuilder = UnitRebuilder::new(self, object.clone(), true)?;
        let written = self.write_groups(&mut rebuilder, to, create, moves, io, digests).await;
        // Counted even when it failed: the bytes were read.
        io.bytes_read += rebuilder.bytes_fetched;
        rebuilder.finish_reports().await;
        written
    }

    async fn write_groups(
        &self,
        rebuilder: &mut UnitRebuilder,
        to: &StripedLayout,
        create: &[UnitInfo],
        moves: &[PlannedMove],
        io: &mut TransitionIo,
        digests: &mut BTreeMap<UnitId, UnitDigest>,
    ) -> Result<()> {
        let size = rebuilder.object.size;
        let engine = weft_engine::shared();
        // A group's parity is computed on the engine while the next group's blocks are read;
        // it is written once that read is done.
        let mut encoding: Option<(usize, weft_engine::EcFuture)> = None;
        for group in 0..to.groups(size) {
            let unit_len = to.unit_len(size, group) as usize;
            let blocks = to.group_blocks(size, group);
            let mut data: Vec<Vec<u8>> = vec![vec![0; unit_len]; to.k()];
            for x in blocks.clone() {
                let bytes = rebuilder.read_block(x).await?;
                data[x - blocks.start][..bytes.len()].copy_from_slice(&bytes);
                if let Some(planned) = moves.iter().find(|m| m.block == x) {
                    self.put_unit(&planned.to, bytes.clone()).await?;
                    io.relocated_bytes += bytes.len() as u64;
                }
            }
            if let Some((done, future)) = encoding.take() {
                self.write_parity(done, future, create, io, digests).await?;
            }
            let data: Vec<Bytes> = data.into_iter().map(Bytes::from).collect();
            encoding = Some((group, engine.iencode(weft_engine::EncodeTask::new(to.code, data))));
        }
        if let Some((done, future)) = encoding {
            self.write_parity(done, future, create, io, digests).await?;
        }
        Ok(())
    }

    /// Waits for a group's new parity and writes it where meta's plan put it, noting each
    /// unit's digest for the commit.
    async fn write_parity(
        &self,
        group: usize,
        encoding: weft_engine::EcFuture,
        create: &[UnitInfo],
        io: &mut TransitionIo,
        digests: &mut BTreeMap<UnitId, UnitDigest>,
    ) -> Result<()> {
        let parity = encoding
            .await
            .map_err(|e| ClientError::Invalid(format!("the coding engine failed: {e}")))?
            .parity;
        for (index, bytes) in parity.into_iter().enumerate() {
            let unit = UnitId::Parity { group, index };
            let target = create.iter().find(|u| u.unit == unit).ok_or_else(|| {
                ClientError::Invalid(format!("meta's plan has no place for {}", unit.short_name()))
            })?;
            io.parity_bytes_written += bytes.len() as u64;
            digests.insert(unit, self.nodes.digest_key().digest(&bytes));
            self.put_unit(target, Bytes::from(bytes)).await?;
        }
        Ok(())
    }

    /// Writes a unit; an existing one with that key (left by an interrupted attempt of this
    /// same transition: same key, same content) is replaced.
    async fn put_unit(&self, unit: &UnitInfo, bytes: Bytes) -> Result<()> {
        match self.nodes.put(unit, bytes.clone()).await {
            Ok(()) => Ok(()),
            Err(failure) if failure.kind == crate::node::FailureKind::Exists => {
                self.nodes.delete(unit).await.map_err(|f| f.for_unit(unit))?;
                self.nodes.put(unit, bytes).await.map_err(|f| f.for_unit(unit))
            }
            Err(failure) => Err(failure.for_unit(unit)),
        }
    }

    /// Commits with the digest of every new parity unit.
    async fn commit_transition(
        &self,
        object: &ObjectInfo,
        id: u64,
        digests: &BTreeMap<UnitId, UnitDigest>,
    ) -> Result<()> {
        let base = json!({"bucket": object.bucket, "key": object.key, "id": id});
        let named = self.meta.digests_ahead("/v1/transitions/digests", &base, digests).await?;
        let body = json!({"bucket": object.bucket, "key": object.key, "id": id, "digests": named});
        let done = self.meta.post_json("/v1/transitions/commit", body).await?;
        let garbage = units(&done["delete"])?;
        self.delete_units(&garbage).await;
        Ok(())
    }

    /// Abandons a pending transition and deletes what it wrote.
    pub async fn abort_transition(&self, object: &ObjectInfo, id: u64) -> Result<()> {
        let body = json!({"bucket": object.bucket, "key": object.key, "id": id});
        let done = self.meta.post_json("/v1/transitions/abort", body).await?;
        let garbage = units(&done["delete"])?;
        self.delete_units(&garbage).await;
        Ok(())
    }

    async fn restripe(
        &self,
        object: ObjectInfo,
        target: Target,
        dry_run: bool,
    ) -> Result<TransitionReport> {
        let started = Instant::now();
        let size = object.size;
        let from_raidp = object.raidp.is_some();
        // A RAIDP target is named by its two-copy layout.
        let to = match target {
            Target::Striped(to) => to,
            Target::Raidp => StripedLayout {
                code: weft_codes::CodeSpec::Rep { n: 2 },
                stripe_width: 1,
                ..object.layout
            },
        };
        // Both predictions when a regroup could do it too (meta plans it; nothing written).
        let regroupable = !from_raidp
            && !object.packed
            && target != Target::Raidp
            && TransitionMode::auto(&object.layout, &to) == TransitionMode::Regroup;
        let predicted = if regroupable {
            Box::pin(self.regroup(object.clone(), to, true, DEFAULT_TRANSITION_LEASE_MS))
                .await?
                .predicted
        } else {
            json!({ "restripe": weft_layout::restripe_io(&to, size) })
        };
        let mut report = TransitionReport {
            bucket: object.bucket.clone(),
            key: object.key.clone(),
            mode: TransitionMode::Restripe,
            from: object.layout,
            to,
            size,
            dry_run,
            io: TransitionIo::default(),
            predicted,
            relocated_blocks: 0,
            elapsed_ms: 0,
            unchanged: false,
            attempts: 1,
            from_raidp,
            to_raidp: target == Target::Raidp,
            from_geometric: object.packed,
            to_geometric: false,
        };
        if dry_run {
            return Ok(report);
        }
        // Read it all (to a temporary file: objects may be larger than memory), then write
        // it again as a new generation of the same key.
        let mut temp = tempfile_for_restripe()?;
        let stats = self.get_object_range(object.clone(), None, temp.file(), None).await?;
        let path = temp.path.clone();
        // The new generation keeps the object's attributes (an S3 object's ETag, headers and,
        // when sealed, its encryption record: without it its bytes would never open again),
        // and replaces only the generation it was read from: an object written meanwhile
        // stays (the restripe fails with meta's 412).
        let attributes = object.raw.get("attributes").filter(|a| a.is_object()).cloned();
        let kept = PutOptions {
            attributes: attributes.map(|a| std::sync::Arc::new(std::sync::OnceLock::from(a))),
            precondition: Some(crate::Precondition::Generation(object.generation)),
            ..PutOptions::default()
        };
        let options = match target {
            Target::Striped(to) => PutOptions { policy: Some(to), ..kept },
            Target::Raidp => PutOptions { raidp: true, ..kept },
        };
        let put = self.put_file(&object.bucket, &object.key, &path, &options).await?;
        report.io = TransitionIo {
            bytes_read: stats.bytes_fetched,
            data_bytes_written: put.data_bytes,
            parity_bytes_written: put.parity_bytes,
            relocated_bytes: 0,
            network_bytes: stats.bytes_fetched + put.bytes_sent,
        };
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        drop(temp);
        Ok(report)
    }
}

/// Where a rewrite puts an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Striped(StripedLayout),
    Raidp,
}

/// A temporary file removed on drop.
struct TempFile {
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl TempFile {
    fn file(&mut self) -> &mut std::fs::File {
        &mut self.file
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn tempfile_for_restripe() -> Result<TempFile> {
    let dir = std::env::temp_dir();
    let stamp = Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id());
    for attempt in 0..100u32 {
        let path = dir.join(format!("weft-restripe-{}-{stamp}-{attempt}.tmp", std::process::id()));
        match std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
            Ok(file) => return Ok(TempFile { path, file }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => {
                return Err(ClientError::Io {
                    what: format!("cannot create {}", path.display()),
                    source,
                })
            }
        }
    }
    Err(ClientError::Invalid("cannot create a temporary file for the restripe".into()))
}

/// The layout an object of `size` bytes stored with `own` moves to under the policy `to`:
/// - `to` itself when the object already has `to`'s striping (objects of k blocks or more,
///   and objects written before small objects were fitted): a regroup, as always;
/// - for an object fitted to its size (weft-layout's `fitted`) when `to` differs from its
///   policy only in the code: its own striping with the new code, so a regroup (the
///   cheapest move) stays possible; when `to` would fit it exactly as it is, it is there;
/// - else the layout a write of its size gets under `to` (a rewrite).
fn transition_target(own: StripedLayout, size: u64, to: &StripedLayout) -> StripedLayout {
    let striping = |l: &StripedLayout| (l.stripe_width, l.cell_bytes, l.block_bytes);
    if striping(&own) == striping(to) {
        return *to;
    }
    if (StripedLayout { code: own.code, ..*to }).fitted(size) == own {
        return StripedLayout { code: to.code, ..own };
    }
    to.fitted(size)
}

#[cfg(test)]
mod target_tests {
    use super::*;

    fn layout(code: &str, width: usize, cell: u64, block: u64) -> StripedLayout {
        StripedLayout {
            code: code.parse().unwrap(),
            stripe_width: width,
            cell_bytes: cell,
            block_bytes: block,
        }
    }

    #[test]
    fn transitions_regroup_what_keeps_its_striping_and_fitted_objects_keep_theirs() {
        let policy = layout("rs(6,3)", 2, 1 << 20, 8 << 20);
        let wider = layout("rs(12,3)", 2, 1 << 20, 8 << 20);
        // An object of k blocks or more has the policy's striping: a regroup to the new code.
        let big = 100 << 20;
        assert_eq!(transition_target(policy, big, &wider), wider);
        // A fitted small object keeps its own striping with the new code (a regroup)...
        let small = 1 << 20;
        let fitted = policy.fitted(small);
        let moved = transition_target(fitted, small, &wider);
        assert_eq!(moved, StripedLayout { code: wider.code, ..fitted });
        // ... and is already at its own policy, or at one that fits it the same way.
        assert_eq!(transition_target(fitted, small, &policy), fitted);
        let narrower = StripedLayout { stripe_width: 1, ..policy };
        assert_eq!(transition_target(fitted, small, &narrower), fitted);
        // An object written before fitting keeps regrouping as it always did.
        assert_eq!(transition_target(policy, small, &wider), wider);
        // A new striping is a rewrite, fitted to the object's size.
        let other = layout("rs(6,3)", 3, 64 << 10, 256 << 10);
        assert_eq!(transition_target(fitted, small, &other), other.fitted(small));
        assert_eq!(transition_target(policy, big, &other), other);
    }
}
