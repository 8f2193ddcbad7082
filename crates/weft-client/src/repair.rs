//! The repair executor: takes tasks from meta's repair queue and rebuilds each unit onto the
//! destination meta chose (`weft serve repair`, started by `weft up`).
//!
//! Data flow per task: lease (meta: the object, the unit, a destination keeping the placement
//! rules) → rebuild the whole unit with [`UnitRebuilder`], which follows the code's repair
//! plan (Hitchhiker and Clay read less than k units) and re-plans around units that fail →
//! PUT at the destination (rate-limited) → `complete` (meta relocates the unit in the same
//! transaction that removes the task, and queues the replaced copy for deletion) → delete the
//! old copy if its node still answers, and acknowledge it. A drain task deletes the queued
//! copies whose nodes are up again (`GET /v1/deletions`) every `deletions_every_ms`.
//!
//! Invariants:
//! - meta's record changes only through `complete`, after the new copy is durable; a crash
//!   of the executor at any point leaves the task leased until its lease expires, then
//!   another executor takes it again (a half-written destination unit is discarded by the
//!   node; a whole one is replaced: a 409 at the destination means an orphan from an earlier
//!   attempt, which is deleted and written again, since meta does not point at it).
//! - A task whose object was replaced or deleted meanwhile ends as `stale`: the unit written
//!   for it is deleted.
//! - A new copy is deleted only when meta said it does not name it: a refused `complete`, or,
//!   when `complete` went unanswered (meta killed, its store failed at the commit), once the
//!   task was handed back. A copy meta may have taken is never deleted on a guess: when meta
//!   cannot tell, it stays for gc, which deletes it only if no record names it.
//! - A damaged unit may be rebuilt in place (meta's destination is its own disk when no other
//!   disk keeps the rules): the bad copy is deleted just before the new one is written, and
//!   the old copy is deleted after completion only when it lives elsewhere.
//! - Write rate is capped by a token bucket shared by the executor's workers.
//! - A failure says its cause: `unrecoverable` when too few units of the group were readable
//!   (meta then counts the unit unfound and backs off long), `transient` otherwise; meta
//!   backs off every failed task, so an executor never spins on one.
//! - A replaced copy is deleted only when meta names it (the complete reply's `deletion`, or
//!   the deletion list), so a copy meta points at is never deleted by this path; it is
//!   acknowledged only after its node answered the delete (a 404 counts: already gone).

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::sync::{watch, Mutex};

use weft_layout::geometric::RECOVERY_WEIGHT_BYTES;
use weft_layout::UnitId;
use weft_wire::repair::FailCause;

use crate::{
    meta::RepairTask, node::FailureKind, read::UnitRebuilder, Client, ClientError, Result, UnitInfo,
};

/// How the executor runs.
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// Lease asked for each task; a task not completed by then goes back to the queue.
    pub lease_ms: u64,
    /// Pause when the queue has nothing due.
    pub idle_ms: u64,
    /// Tasks repaired at once, at most.
    pub parallel: usize,
    /// The global weight cap of tasks in flight, in [`RECOVERY_WEIGHT_BYTES`] (4 MiB) of unit
    /// each task rebuilds (RCStor's weighted recovery, paper §5.2: a 4 MiB chunk weighs 1, a
    /// 256 MiB one 64); 0: tasks are not weighed, only counted.
    pub weight_cap: u64,
    /// Most bytes per second written by all workers together (None: unlimited).
    pub rate_bytes_per_sec: Option<u64>,
    /// How often the replaced copies meta queued are deleted from nodes that are up (0: never).
    pub deletions_every_ms: u64,
}

impl Default for ExecutorConfig {
    fn default() -> ExecutorConfig {
        ExecutorConfig {
            lease_ms: 60_000,
            idle_ms: 500,
            parallel: 2,
            weight_cap: 0,
            rate_bytes_per_sec: Some(256 << 20),
            deletions_every_ms: 2000,
        }
    }
}

/// Totals of an executor's work.
#[derive(Debug, Default)]
pub struct ExecutorStats {
    pub repaired: AtomicU64,
    pub stale: AtomicU64,
    pub failed: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Replaced copies deleted (at once after a repair, or by the drain).
    pub copies_deleted: AtomicU64,
}

/// A token bucket: `take(n)` waits until n more bytes fit under the rate.
#[derive(Debug)]
pub struct RateLimit {
    rate: Option<u64>,
    next_free: Mutex<Instant>,
}

impl RateLimit {
    /// A limit of `rate` bytes per second (None: no limit).
    pub fn new(rate: Option<u64>) -> RateLimit {
        RateLimit { rate, next_free: Mutex::new(Instant::now()) }
    }

    /// Waits until `bytes` more fit under the rate.
    pub async fn take(&self, bytes: u64) {
        let Some(rate) = self.rate.filter(|&r| r > 0) else { return };
        let cost = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let start = {
            let mut next = self.next_free.lock().await;
            let start = (*next).max(Instant::now());
            *next = start + cost;
            start
        };
        tokio::time::sleep_until(start.into()).await;
    }
}

/// What one repair did.
#[derive(Clone, Debug)]
pub struct RepairOutcome {
    /// `relocated` or `stale`.
    pub result: String,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// The replaced copy was deleted at once (its node answered) and meta told.
    pub old_copy_deleted: bool,
}

/// Runs the executor until `stop` turns true; returns its totals.
pub async fn run_executor(
    client: Client,
    config: ExecutorConfig,
    stop: watch::Receiver<bool>,
) -> Arc<ExecutorStats> {
    let stats = Arc::new(ExecutorStats::default());
    let limit = Arc::new(RateLimit::new(config.rate_bytes_per_sec));
    // One taker leases tasks while a slot is free, and each task runs with a slot and its
    // weight (when weighed) until it ends: the queue is global, the cap is this executor's.
    let slots = Arc::new(tokio::sync::Semaphore::new(config.parallel.max(1)));
    let cap = config.weight_cap;
    let weights = Arc::new(tokio::sync::Semaphore::new(cap.max(1) as usize));
    let taker = {
        let (client, config, stats, limit) =
            (client.clone(), config.clone(), Arc::clone(&stats), Arc::clone(&limit));
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            let mut worker = 0usize;
            while !*stop.borrow() {
                while running.try_join_next().is_some() {}
                let idle = Duration::from_millis(config.idle_ms);
                let slot = tokio::select! {
                    slot = Arc::clone(&slots).acquire_owned() => slot.expect("never closed"),
                    changed = stop.changed() => {
                        if changed.is_err() {
                            break; // nobody can stop it any more: stop now
                        }
                        continue;
                    }
                };
                match client.meta.take_repair(config.lease_ms).await {
                    Ok(Some(task)) => {
                        let weighed = (cap > 0).then(|| task_weight(&task, cap));
                        let weight = match weighed {
                            Some(w) => Some(
                                Arc::clone(&weights)
                                    .acquire_many_owned(w as u32)
                                    .await
                                    .expect("never closed"),
                            ),
                            None => None,
                        };
                        let (client, stats, limit) =
                            (client.clone(), Arc::clone(&stats), Arc::clone(&limit));
                        worker += 1;
                        running.spawn(async move {
                            run_task(&client, task, &limit, &stats, worker).await;
                            drop((slot, weight));
                        });
                    }
                    Ok(None) => {
                        drop(slot);
                        sleep_or_stop(&mut stop, idle).await
                    }
                    Err(error) => {
                        drop(slot);
                        tracing::warn!(%error, "cannot take a repair task");
                        sleep_or_stop(&mut stop, idle.max(Duration::from_secs(1))).await;
                    }
                }
            }
            // Tasks in flight finish (or their leases lapse if the process dies).
            while running.join_next().await.is_some() {}
        })
    };
    let workers = vec![taker];
    let drain = (config.deletions_every_ms > 0).then(|| {
        let (client, stats, mut stop) = (client.clone(), Arc::clone(&stats), stop.clone());
        let every = Duration::from_millis(config.deletions_every_ms);
        tokio::spawn(async move {
            while !*stop.borrow() {
                match drain_deletions(&client).await {
                    Ok(deleted) => {
                        stats.copies_deleted.fetch_add(deleted, Ordering::Relaxed);
                    }
                    Err(error) => tracing::warn!(%error, "cannot drain the deletions queue"),
                }
                sleep_or_stop(&mut stop, every).await;
            }
        })
    });
    for worker in workers {
        let _ = worker.await;
    }
    if let Some(drain) = drain {
        let _ = drain.await;
    }
    stats
}

/// Deletes the replaced copies meta lists (on nodes up now) and acknowledges those their
/// node deleted; returns how many.
pub async fn drain_deletions(client: &Client) -> Result<u64> {
    let list = client.meta.deletions().await?;
    let mut done = Vec::new();
    for deletion in &list.deletions {
        let Some(unit) = UnitId::parse_short_name(&deletion.unit) else { continue };
        let copy = UnitInfo {
            unit,
            node_id: deletion.node_id,
            endpoint: Some(deletion.endpoint.clone()),
            disk: deletion.disk,
            unit_key: deletion.unit_key.clone(),
            len: 0,
            state: None,
            digest: None,
        };
        match client.nodes.delete(&copy).await {
            Ok(()) => done.push(deletion.id.clone()),
            Err(failure) => {
                tracing::debug!(id = %deletion.id, %failure, "replaced copy not deleted yet")
            }
        }
    }
    if done.is_empty() {
        return Ok(0);
    }
    client.meta.deletions_done(&done).await?;
    tracing::info!(deleted = done.len(), "replaced copies deleted");
    Ok(done.len() as u64)
}

/// The weight of a task: its unit's length in [`RECOVERY_WEIGHT_BYTES`], at least 1 and at
/// most the cap (a unit heavier than the cap runs alone).
pub fn task_weight(task: &RepairTask, cap: u64) -> u64 {
    let (group, _) = task.object.layout.unit_position(task.unit);
    let len = task.object.unit_len(group);
    len.div_ceil(RECOVERY_WEIGHT_BYTES).clamp(1, cap.max(1))
}

async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, pause: Duration) {
    let _ = tokio::time::timeout(pause, stop.changed()).await;
}

async fn run_task(
    client: &Client,
    task: RepairTask,
    limit: &RateLimit,
    stats: &ExecutorStats,
    worker: usize,
) {
    let name = format!("{}/{} {}", task.object.bucket, task.object.key, task.unit.short_name());
    let started = Instant::now();
    match repair_unit(client, &task, limit).await {
        Ok(outcome) => {
            stats.bytes_read.fetch_add(outcome.bytes_read, Ordering::Relaxed);
            stats.bytes_written.fetch_add(outcome.bytes_written, Ordering::Relaxed);
            if outcome.old_copy_deleted {
                stats.copies_deleted.fetch_add(1, Ordering::Relaxed);
            }
            let counter = if outcome.result == "stale" { &stats.stale } else { &stats.repaired };
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                worker, unit = %name, to_node = task.destination_node, result = %outcome.result,
                read = outcome.bytes_read, written = outcome.bytes_written,
                ms = started.elapsed().as_millis() as u64, reason = %task.reason, "repaired"
            );
        }
        Err(RepairFailure { error, returned }) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(worker, unit = %name, %error, "repair failed; task returned to the queue");
            if returned {
                return;
            }
            let cause = match error {
                ClientError::Unrecoverable { .. } => FailCause::Unrecoverable,
                _ => FailCause::Transient,
            };
            let text = error.to_string();
            if let Err(error) = client.meta.fail_repair_with_cause(&task, &text, cause).await {
                tracing::warn!(%error, "could not return the task (its lease will expire)");
            }
        }
    }
}

/// Whether meta took a repaired copy whose `complete` went unanswered.
enum Settled {
    /// meta's record names the new copy: the repair is done.
    Taken,
    /// The task went back to the queue (so meta does not name the copy).
    Returned,
    /// meta could not be asked, or the task is gone without meta naming the copy (its lease
    /// lapsed: another executor may be writing to the same place).
    Unknown,
}

/// Most times [`settle_lost_answer`] asks, half a second apart (a killed meta is restarted,
/// or another replica answers, well within that).
const SETTLE_ATTEMPTS: u32 = 20;

/// Finds out whether meta took the copy written to `destination` for `task`, after its
/// `complete` went unanswered: by handing the task back (a write, so it waits for any commit
/// of the same task still in flight in meta's store), and when meta says the task is no
/// longer leased to us, by reading whether the object now names the copy.
async fn settle_lost_answer(client: &Client, task: &RepairTask, destination: &UnitInfo) -> Settled {
    let why = "meta's answer to the completion was lost";
    for attempt in 1..=SETTLE_ATTEMPTS {
        match client.meta.fail_repair_with_cause(task, why, FailCause::Transient).await {
            Ok(()) => return Settled::Returned,
            Err(ClientError::Meta { status: 409, .. }) => {
                let object = &task.object;
                return match client.meta.get_object(&object.bucket, &object.key).await {
                    Ok(now)
                        if now.generation == object.generation
                            && now.unit(task.unit).is_some_and(|unit| {
                                (unit.node_id, unit.disk) == (destination.node_id, destination.disk)
                            }) =>
                    {
                        Settled::Taken
                    }
                    _ => Settled::Unknown,
                };
            }
            Err(ClientError::Meta { status: 400..=499, .. }) => return Settled::Unknown,
            Err(error) => {
                tracing::info!(attempt, %error, "asking meta whether it took a repaired copy");
                if attempt < SETTLE_ATTEMPTS {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
    Settled::Unknown
}

/// A repair that did not complete.
#[derive(Debug)]
pub struct RepairFailure {
    pub error: ClientError,
    /// The task is back in meta's queue already (no need to hand it back).
    pub returned: bool,
}

impl From<ClientError> for RepairFailure {
    fn from(error: ClientError) -> RepairFailure {
        RepairFailure { error, returned: false }
    }
}

/// Rebuilds the task's unit at its destination and reports it to meta.
pub async fn repair_unit(
    client: &Client,
    task: &RepairTask,
    limit_rate: &RateLimit,
) -> std::result::Result<RepairOutcome, RepairFailure> {
    let object = &task.object;
    let old = object.unit(task.unit).cloned().ok_or_else(|| {
        ClientError::Invalid(format!("the object has no stored unit {}", task.unit.short_name()))
    })?;
    // MDS decodes run on the process's coding engine (its rails, its thread bound).
    let mut rebuilder =
        UnitRebuilder::new(client, object.clone(), false)?.with_engine(weft_engine::shared());
    // The unit being repaired is lost by definition; never read it.
    rebuilder.mark_failed(
        task.unit,
        crate::node::NodeFailure { kind: FailureKind::Missing, cause: task.reason.clone() },
    );
    let (group, _) = object.layout.unit_position(task.unit);
    let unit_len = object.unit_len(group);
    let rebuilt = rebuilder.rebuild(task.unit, 0, unit_len).await?;
    let stored: Bytes = rebuilt.slice(..old.len as usize);
    // The rebuilt unit must be the unit its writer wrote: a helper that returned other bytes
    // in a range no digest covers would otherwise be baked into the new copy.
    client.nodes.digest_key().check_unit(&old, &stored).map_err(|failure| {
        ClientError::Invalid(format!(
            "the rebuilt {} does not match its digest in meta (a helper returned bad bytes): {}",
            task.unit.short_name(),
            failure.cause
        ))
    })?;
    let destination = UnitInfo {
        node_id: task.destination_node,
        endpoint: Some(task.destination_endpoint.clone()),
        disk: task.destination_disk,
        state: None,
        ..old.clone()
    };
    limit_rate.take(stored.len() as u64).await;
    match client.nodes.put(&destination, stored.clone()).await {
        Ok(()) => {}
        Err(failure) if failure.kind == FailureKind::Exists => {
            // An orphan of an earlier attempt: meta does not point at it.
            client.nodes.delete(&destination).await.map_err(|f| f.for_unit(&destination))?;
            client
                .nodes
                .put(&destination, stored.clone())
                .await
                .map_err(|f| f.for_unit(&destination))?;
        }
        Err(failure) => return Err(failure.for_unit(&destination).into()),
    }
    let in_place = (old.node_id, old.disk) == (destination.node_id, destination.disk);
    let (result, deletion) = match client.meta.complete_repair_with_deletion(task).await {
        Ok(done) => done,
        // meta refused (lease lost or expired): the new copy is an orphan unless it replaced
        // the unit in place, where meta still points.
        Err(error @ ClientError::Meta { status: 400..=499, .. }) => {
            if !in_place {
                client.delete_units(std::slice::from_ref(&destination)).await;
            }
            return Err(RepairFailure { error, returned: false });
        }
        // No answer (meta died, or its store failed at the commit): the copy may be in meta's
        // record now. Deleted only once meta confirms it is not.
        Err(error) => match settle_lost_answer(client, task, &destination).await {
            Settled::Taken => ("relocated".to_owned(), None),
            Settled::Returned => {
                if !in_place {
                    client.delete_units(std::slice::from_ref(&destination)).await;
                }
                return Err(RepairFailure { error, returned: true });
            }
            Settled::Unknown => {
                tracing::warn!(unit = %destination.unit_key, node = destination.node_id, %error,
                    "meta's answer to a repair was lost and meta could not say whether it took \
                     the new copy; the copy is kept (gc collects it if meta does not name it)");
                return Err(RepairFailure { error, returned: false });
            }
        },
    };
    let mut old_copy_deleted = false;
    if result == "stale" {
        client.delete_units(std::slice::from_ref(&destination)).await;
    } else if let Some(id) = deletion {
        // The old copy is corrupt or orphaned now; its node may still answer. If not, the
        // copy stays queued in meta and the drain deletes it once the node is back.
        if !old.is_down() && client.nodes.delete(&old).await.is_ok() {
            match client.meta.deletions_done(&[id]).await {
                Ok(_) => old_copy_deleted = true,
                Err(error) => {
                    tracing::warn!(%error, "replaced copy deleted; meta not told (the drain will)")
                }
            }
        }
    } else if !old.is_down() && !in_place {
        // An older meta queues nothing: delete the old copy if its node still answers.
        client.delete_units(std::slice::from_ref(&old)).await;
    }
    Ok(RepairOutcome {
        result,
        bytes_read: rebuilder.bytes_fetched,
        bytes_written: stored.len() as u64,
        old_copy_deleted,
    })
}
