//! [`MemStore`]: the metadata store in memory, for the simulator and as the model that
//! [`crate::RedbStore`] is tested against.
//!
//! Invariants: the same as [`crate::MetaStore`]'s, kept by doing every operation under one
//! mutex on plain ordered maps — written as simply as possible, because it is the reference.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use weft_layout::{Placement, UnitId};

use crate::records::{
    check_bucket_name, BucketRecord, Heartbeat, NodeRecord, ObjectName, ObjectRecord, ObjectState,
    Policy, RepairLease, RepairTask,
};
use crate::store::{check_new_object, list_start, ObjectPage, MAX_LIST_LIMIT};
use crate::{MetaError, MetaStore};

type ObjectKey = (String, String);

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<String, BucketRecord>,
    objects: BTreeMap<ObjectKey, ObjectRecord>,
    writes: BTreeMap<ObjectKey, ObjectRecord>,
    nodes: BTreeMap<u32, NodeRecord>,
    repairs: BTreeMap<u64, RepairTask>,
    repair_index: BTreeMap<(ObjectName, UnitId), u64>,
    next_generation: u64,
    next_repair_id: u64,
}

/// The metadata store in memory; lost when dropped.
#[derive(Debug, Default)]
pub struct MemStore {
    state: Mutex<State>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("a MemStore operation panicked")
    }
}

fn key_of(bucket: &str, key: &str) -> ObjectKey {
    (bucket.to_string(), key.to_string())
}

fn check_lease(state: &State, lease: &RepairLease) -> Result<(), MetaError> {
    match state.repairs.get(&lease.task_id) {
        Some(task)
            if task.attempts == lease.task.attempts
                && task.lease_deadline_ms == Some(lease.deadline_ms) =>
        {
            Ok(())
        }
        _ => Err(MetaError::LeaseLost {
            task_id: lease.task_id,
            bucket: lease.task.object.bucket.clone(),
            key: lease.task.object.key.clone(),
            unit: lease.task.unit,
        }),
    }
}

impl MetaStore for MemStore {
    fn create_bucket(
        &self,
        name: &str,
        default_policy: Policy,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        check_bucket_name(name)?;
        default_policy.validate().map_err(|e| MetaError::InvalidRecord {
            bucket: name.into(),
            key: String::new(),
            reason: e.to_string(),
        })?;
        let mut state = self.lock();
        if state.buckets.contains_key(name) {
            return Err(MetaError::BucketExists { bucket: name.into() });
        }
        let record = BucketRecord { name: name.into(), default_policy, created_ms: now_ms };
        state.buckets.insert(name.into(), record.clone());
        Ok(record)
    }

    fn get_bucket(&self, name: &str) -> Result<BucketRecord, MetaError> {
        self.lock()
            .buckets
            .get(name)
            .cloned()
            .ok_or_else(|| MetaError::NoSuchBucket { bucket: name.into() })
    }

    fn list_buckets(&self) -> Result<Vec<BucketRecord>, MetaError> {
        Ok(self.lock().buckets.values().cloned().collect())
    }

    fn delete_bucket(&self, name: &str) -> Result<(), MetaError> {
        let mut state = self.lock();
        if !state.buckets.contains_key(name) {
            return Err(MetaError::NoSuchBucket { bucket: name.into() });
        }
        let in_bucket =
            |map: &BTreeMap<ObjectKey, ObjectRecord>| map.keys().any(|(bucket, _)| bucket == name);
        if in_bucket(&state.objects) || in_bucket(&state.writes) {
            return Err(MetaError::BucketNotEmpty { bucket: name.into() });
        }
        state.buckets.remove(name);
        Ok(())
    }

    fn begin_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError> {
        check_new_object(bucket, key, &placement)?;
        let mut state = self.lock();
        if !state.buckets.contains_key(bucket) {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        state.next_generation += 1;
        let record = ObjectRecord {
            bucket: bucket.into(),
            key: key.into(),
            placement,
            state: ObjectState::Writing,
            created_ms: now_ms,
            generation: state.next_generation,
        };
        state.writes.insert(key_of(bucket, key), record.clone());
        Ok(record)
    }

    fn commit_object(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>), MetaError> {
        let mut state = self.lock();
        let name = key_of(bucket, key);
        match state.writes.get(&name) {
            Some(write) if write.generation == generation => {}
            _ => {
                return Err(MetaError::NoSuchWrite {
                    bucket: bucket.into(),
                    key: key.into(),
                    generation,
                })
            }
        }
        let mut record = state.writes.remove(&name).expect("checked above");
        record.state = ObjectState::Committed;
        let replaced = state.objects.insert(name, record.clone());
        Ok((record, replaced))
    }

    fn get_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError> {
        let state = self.lock();
        if !state.buckets.contains_key(bucket) {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        state
            .objects
            .get(&key_of(bucket, key))
            .cloned()
            .ok_or_else(|| MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() })
    }

    fn list_objects(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ObjectPage, MetaError> {
        let state = self.lock();
        if !state.buckets.contains_key(bucket) {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        let limit = limit.min(MAX_LIST_LIMIT);
        let (start, inclusive) = list_start(prefix, start_after);
        let start = key_of(bucket, start);
        let lower = if inclusive { Bound::Included(start) } else { Bound::Excluded(start) };
        let mut objects: Vec<ObjectRecord> = state
            .objects
            .range((lower, Bound::Unbounded))
            .take_while(|((b, k), _)| b == bucket && k.starts_with(prefix))
            .take(limit + 1)
            .map(|(_, record)| record.clone())
            .collect();
        let next_start_after = if objects.len() > limit {
            objects.truncate(limit);
            objects.last().map(|r| r.key.clone())
        } else {
            None
        };
        Ok(ObjectPage { objects, next_start_after })
    }

    fn delete_object(&self, bucket: &str, key: &str) -> Result<ObjectRecord, MetaError> {
        let mut state = self.lock();
        if !state.buckets.contains_key(bucket) {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        state
            .objects
            .remove(&key_of(bucket, key))
            .ok_or_else(|| MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() })
    }

    fn record_heartbeat(
        &self,
        heartbeat: &Heartbeat,
        now_ms: u64,
    ) -> Result<NodeRecord, MetaError> {
        let record = NodeRecord {
            node_id: heartbeat.node_id,
            endpoint: heartbeat.endpoint.clone(),
            pid: heartbeat.pid,
            last_heartbeat_ms: now_ms,
            disks: heartbeat.disks.clone(),
        };
        self.lock().nodes.insert(heartbeat.node_id, record.clone());
        Ok(record)
    }

    fn list_nodes(&self) -> Result<Vec<NodeRecord>, MetaError> {
        Ok(self.lock().nodes.values().cloned().collect())
    }

    fn enqueue_repair(
        &self,
        object: &ObjectName,
        unit: UnitId,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, MetaError> {
        let mut state = self.lock();
        let index = (object.clone(), unit);
        if state.repair_index.contains_key(&index) {
            return Ok(false);
        }
        state.next_repair_id += 1;
        let id = state.next_repair_id;
        let task = RepairTask {
            object: object.clone(),
            unit,
            reason: reason.into(),
            enqueued_ms: now_ms,
            attempts: 0,
            lease_deadline_ms: None,
        };
        state.repairs.insert(id, task);
        state.repair_index.insert(index, id);
        Ok(true)
    }

    fn take_repair(&self, now_ms: u64, lease_ms: u64) -> Result<Option<RepairLease>, MetaError> {
        let mut state = self.lock();
        let free = |task: &RepairTask| task.lease_deadline_ms.is_none_or(|d| d <= now_ms);
        let Some((&id, task)) = state.repairs.iter_mut().find(|(_, task)| free(task)) else {
            return Ok(None);
        };
        let deadline_ms = now_ms.saturating_add(lease_ms);
        task.attempts += 1;
        task.lease_deadline_ms = Some(deadline_ms);
        Ok(Some(RepairLease { task_id: id, task: task.clone(), deadline_ms }))
    }

    fn complete_repair(&self, lease: &RepairLease) -> Result<(), MetaError> {
        let mut state = self.lock();
        check_lease(&state, lease)?;
        let task = state.repairs.remove(&lease.task_id).expect("checked above");
        state.repair_index.remove(&(task.object, task.unit));
        Ok(())
    }

    fn fail_repair(&self, lease: &RepairLease) -> Result<(), MetaError> {
        let mut state = self.lock();
        check_lease(&state, lease)?;
        let mut task = state.repairs.remove(&lease.task_id).expect("checked above");
        task.lease_deadline_ms = None;
        state.next_repair_id += 1;
        let id = state.next_repair_id;
        state.repair_index.insert((task.object.clone(), task.unit), id);
        state.repairs.insert(id, task);
        Ok(())
    }

    fn repair_queue_len(&self) -> Result<usize, MetaError> {
        Ok(self.lock().repairs.len())
    }
}
