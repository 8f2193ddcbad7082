//! The [`MetaStore`] trait: every operation the metadata service needs.
//!
//! Invariants every implementation keeps:
//! - Each operation is atomic: it takes effect entirely or not at all, and a refused
//!   operation changes nothing.
//! - No clocks: time comes in as `now_ms`, so runs are deterministic and simulable.
//! - A bucket is deleted only when it holds no committed object and no write in progress.
//! - An object key has at most one committed record and at most one write in progress;
//!   committing a write replaces the committed record in the same transaction.
//! - Generations and repair task ids come from store-wide counters that never go back.
//! - The repair queue holds at most one task per (object, unit); tasks are taken in the order
//!   they were enqueued, and a leased task returns to the queue when its lease expires.

use weft_layout::{Placement, UnitId};

use crate::records::{
    check_bucket_name, check_key, BucketRecord, Heartbeat, NodeRecord, ObjectName, ObjectRecord,
    Policy, RepairLease,
};
use crate::MetaError;

/// Most objects one listing returns.
pub const MAX_LIST_LIMIT: usize = 1000;

/// One page of an object listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPage {
    /// Committed objects in key order.
    pub objects: Vec<ObjectRecord>,
    /// When more objects match, the key to pass as `start_after` for the next page.
    pub next_start_after: Option<String>,
}

/// The metadata operations of weft, over an embedded store ([`crate::RedbStore`]), an
/// in-memory one ([`crate::MemStore`]) or, at scale, an existing distributed store.
pub trait MetaStore: Send + Sync {
    /// Creates an empty bucket.
    fn create_bucket(
        &self,
        name: &str,
        default_policy: Policy,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError>;
    fn get_bucket(&self, name: &str) -> Result<BucketRecord, MetaError>;
    /// Every bucket, by name.
    fn list_buckets(&self) -> Result<Vec<BucketRecord>, MetaError>;
    /// Deletes a bucket; refused with [`MetaError::BucketNotEmpty`] unless it is empty.
    fn delete_bucket(&self, name: &str) -> Result<(), MetaError>;

    /// Begins writing an object: records its placement as a write in progress, invisible to
    /// reads, with a fresh generation. Replaces an earlier unfinished write of the same key
    /// (whose units the caller then owns and should delete).
    fn begin_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError>;
    /// Commits the write of `generation` once all its units are durable. Returns the new
    /// record and the committed record it replaced, if any (its units are now garbage).
    fn commit_object(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>), MetaError>;
    /// The committed object under `key`.
    fn get_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError>;
    /// Committed objects whose key starts with `prefix` and sorts after `start_after`, in key
    /// order, at most `min(limit, MAX_LIST_LIMIT)` of them.
    fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectPage, MetaError>;
    /// Deletes the committed object; returns its record (the caller deletes its units).
    fn delete_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError>;

    /// Records a heartbeat: creates or replaces the node's record.
    fn record_heartbeat(&self, heartbeat: &Heartbeat, now_ms: u64)
        -> Result<NodeRecord, MetaError>;
    /// Every node ever heard of, by id.
    fn list_nodes(&self) -> Result<Vec<NodeRecord>, MetaError>;
    /// Ids of the nodes silent for more than `timeout_ms` at `now_ms`, ascending.
    fn down_nodes(&self, now_ms: u64, timeout_ms: u64) -> Result<Vec<u32>, MetaError> {
        Ok(self
            .list_nodes()?
            .into_iter()
            .filter(|n| n.is_down(now_ms, timeout_ms))
            .map(|n| n.node_id)
            .collect())
    }

    /// Queues a repair of `unit` of `object`. Idempotent: returns false, changing nothing,
    /// when that (object, unit) is already queued.
    fn enqueue_repair(
        &self,
        object: &ObjectName,
        unit: UnitId,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, MetaError>;
    /// Leases the oldest task that is not leased (or whose lease expired) until
    /// `now_ms + lease_ms`; None when there is none.
    fn take_repair(&self, now_ms: u64, lease_ms: u64) -> Result<Option<RepairLease>, MetaError>;
    /// Removes a repaired task. Refused with [`MetaError::LeaseLost`] when the lease is no
    /// longer the task's current one (the caller must not assume its work counted).
    fn complete_repair(&self, lease: &RepairLease) -> Result<(), MetaError>;
    /// Returns a task whose repair failed to the back of the queue, free to take.
    fn fail_repair(&self, lease: &RepairLease) -> Result<(), MetaError>;
    /// Tasks queued, leased or not.
    fn repair_queue_len(&self) -> Result<usize, MetaError>;
}

/// Checks the arguments of `begin_object` that need no stored state.
pub(crate) fn check_new_object(
    bucket: &str,
    key: &str,
    placement: &Placement,
) -> Result<(), MetaError> {
    check_bucket_name(bucket)?;
    check_key(key)?;
    let invalid = |reason: String| MetaError::InvalidRecord {
        bucket: bucket.into(),
        key: key.into(),
        reason,
    };
    placement.layout().validate().map_err(|e| invalid(e.to_string()))?;
    placement.verify().map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

/// Where a listing starts: at `prefix`, or just after `start_after` when that sorts later.
pub(crate) fn list_start<'a>(prefix: &'a str, start_after: Option<&'a str>) -> (&'a str, bool) {
    match start_after {
        Some(after) if after >= prefix => (after, false),
        _ => (prefix, true),
    }
}
