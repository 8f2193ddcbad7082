//! Leader duties among meta replicas: several meta processes may serve one shared store
//! (PostgreSQL); the duties only one should do at a time — judging failures and queueing
//! repairs (the detector) — are done by the holder of the store's lease [`LEADER_LEASE`].
//!
//! Invariants:
//! - Every meta, alone or not, runs the same code: it records itself in the store (its
//!   endpoint, pid, start and last-seen times) and asks for the lease every `lease_ms / 3`;
//!   the store's transaction decides who holds it ([`crate::MetaStore::hold_lease`]), so two
//!   replicas never both hold it for the same instant of the store's callers' clocks.
//! - A meta believes it leads only until the deadline the store granted (checked against its
//!   own clock at each use, [`Leadership::leads`]); a renewal that fails (store unreachable)
//!   does not extend it. A lapsed lease is taken by another replica at its next ask, so a
//!   dead leader is replaced within `lease_ms` plus one ask (`lease_ms / 3`).
//! - The duties are idempotent (queueing a unit's repair twice keeps one task), so the
//!   moment two replicas overlap, if clocks disagree, costs work, never correctness.
//! - A meta that stops gracefully gives the lease up and forgets its record, so another
//!   takes over at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::{now_ms, Shared};
use crate::{MetaStore, ReplicaRecord};

/// The name of the leader's lease in the store.
pub const LEADER_LEASE: &str = "leader";

/// The default lease: a dead leader's duties resume within about this long.
pub const DEFAULT_LEASE_MS: u64 = 3000;

/// The lease holder's name of the meta at `endpoint` with process id `pid`.
pub(crate) fn holder_name(endpoint: &str, pid: u32) -> String {
    format!("{endpoint} pid {pid}")
}

/// This meta's view of the lease.
#[derive(Debug)]
pub(crate) struct Leadership {
    /// The endpoint this meta serves on: its name as a replica and as a lease holder.
    pub(crate) endpoint: String,
    pub(crate) started_ms: u64,
    pub(crate) lease_ms: u64,
    /// Wall-clock ms until which the store granted this meta the lease (0: not held).
    until_ms: AtomicU64,
}

impl Leadership {
    pub(crate) fn new(endpoint: String, lease_ms: u64) -> Leadership {
        Leadership { endpoint, started_ms: now_ms(), lease_ms, until_ms: AtomicU64::new(0) }
    }

    /// The name this process holds the lease under: its endpoint and pid (a meta restarted
    /// on the same address is another process, and waits for the old lease to lapse).
    pub(crate) fn holder(&self) -> String {
        holder_name(&self.endpoint, std::process::id())
    }

    /// Whether this meta holds the lease now.
    pub(crate) fn leads(&self) -> bool {
        now_ms() < self.until_ms.load(Ordering::SeqCst)
    }

    fn record(&self) -> ReplicaRecord {
        ReplicaRecord {
            endpoint: self.endpoint.clone(),
            pid: std::process::id(),
            started_ms: self.started_ms,
            seen_ms: now_ms(),
        }
    }

    /// Records this meta and asks for the lease once; returns whether it leads now.
    pub(crate) fn ask(&self, store: &dyn MetaStore) -> Result<bool, crate::MetaError> {
        store.record_replica(&self.record())?;
        let asked_at = now_ms();
        let lease = store.hold_lease(LEADER_LEASE, &self.holder(), asked_at, self.lease_ms)?;
        let mine = lease.holder == self.holder();
        let was = self.leads();
        self.until_ms.store(if mine { lease.deadline_ms } else { 0 }, Ordering::SeqCst);
        if mine != was {
            match mine {
                true => {
                    tracing::info!(endpoint = %self.endpoint, "this meta leads (repair detection)")
                }
                false => tracing::info!(leader = %lease.holder, "another meta leads"),
            }
        }
        Ok(mine)
    }

    /// Gives the lease up and forgets this meta's record (a graceful stop).
    pub(crate) fn resign(&self, store: &dyn MetaStore) -> Result<(), crate::MetaError> {
        self.until_ms.store(0, Ordering::SeqCst);
        store.release_lease(LEADER_LEASE, &self.holder())?;
        store.forget_replica(&self.endpoint)
    }
}

/// Asks for the lease every `lease_ms / 3` until `stopped` turns true, then resigns.
pub(crate) async fn lead(meta: Shared, mut stopped: watch::Receiver<bool>) {
    let every = Duration::from_millis((meta.leadership.lease_ms / 3).max(20));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stopped.wait_for(|stop| *stop) => break,
        }
        let result = {
            let meta = meta.clone();
            tokio::task::spawn_blocking(move || meta.leadership.ask(meta.store.as_ref())).await
        };
        match result {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "could not renew the leader lease; not leading until it works");
            }
            Err(join) => tracing::error!(%join, "asking for the leader lease panicked"),
        }
    }
    let resigned = {
        let meta = meta.clone();
        tokio::task::spawn_blocking(move || meta.leadership.resign(meta.store.as_ref())).await
    };
    if let Ok(Err(error)) = resigned {
        tracing::warn!(%error, "could not give the leader lease up; it lapses by itself");
    }
}
