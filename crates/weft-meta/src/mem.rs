//! [`MemStore`]: the metadata store in memory, for the simulator and as the model that
//! [`crate::RedbStore`] is tested against.
//!
//! Invariants: the same as [`crate::MetaStore`]'s, kept by doing every operation under one
//! mutex on plain ordered maps — written as simply as possible, because it is the reference.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

use weft_layout::{DiskLocation, GeometricPolicy, Placement, UnitId};

use crate::records::{
    check_new_bucket_name, BucketRecord, Enqueued, Heartbeat, NewTransition, NodeRecord,
    ObjectName, ObjectRecord, ObjectState, Policy, RaidpExtent, RaidpPolicy, RepairLease,
    RepairOutcome, RepairRequest, RepairTask, TransitionRecord,
};
use crate::store::check_digests;
use crate::store::{check_attributes, check_precondition, CommitTerms, Precondition};
use crate::store::{
    check_namespace, check_new_object, check_new_transition, enqueue_step, holds, is_free,
    lease_deadline, lease_lost, list_start, pack_refusal, packed_record, pending_one, relocated,
    transitioned, usage_of, EnqueueStep, ObjectPage, ObjectTotals, PackOutcome, PackedObject,
    PlacedUnit, RecordPage, SizeUsage, StripeCommit, MAX_LIST_LIMIT, SIZE_CLASSES,
};
use crate::store::{leased, Lease, ReplicaRecord};
use crate::versions::{self, VersionReads, VersionTables};
use crate::{Deleted, Digests, VersionRef, Versioning, WriteCursor};
use crate::{MetaError, MetaStore};

type ObjectKey = (String, String);
/// A write in progress: its (bucket, key) and generation.
type WriteKey = (String, String, u64);

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<String, BucketRecord>,
    objects: BTreeMap<ObjectKey, ObjectRecord>,
    writes: BTreeMap<WriteKey, ObjectRecord>,
    nodes: BTreeMap<u32, NodeRecord>,
    repairs: BTreeMap<u64, RepairTask>,
    repair_index: BTreeMap<(ObjectName, UnitId), u64>,
    transitions: BTreeMap<ObjectKey, TransitionRecord>,
    next_generation: u64,
    next_repair_id: u64,
    next_transition_id: u64,
    version_moves: u64,
    /// Gateway records by (namespace, name).
    records: BTreeMap<(String, String), serde_json::Value>,
    leases: BTreeMap<String, Lease>,
    replicas: BTreeMap<String, ReplicaRecord>,
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

/// Up to `min(limit, MAX_LIST_LIMIT)` values of a map keyed like [`key_of`], in key order,
/// after `after`.
fn page_after<T: Clone>(
    map: &BTreeMap<ObjectKey, T>,
    after: Option<&ObjectName>,
    limit: usize,
) -> Vec<T> {
    let lower = match after {
        Some(name) => Bound::Excluded(key_of(&name.bucket, &name.key)),
        None => Bound::Unbounded,
    };
    map.range((lower, Bound::Unbounded))
        .take(limit.min(MAX_LIST_LIMIT))
        .map(|(_, v)| v.clone())
        .collect()
}

fn key_of(bucket: &str, key: &str) -> ObjectKey {
    (bucket.to_string(), key.to_string())
}

fn write_of(bucket: &str, key: &str, generation: u64) -> WriteKey {
    (bucket.to_string(), key.to_string(), generation)
}

impl VersionReads for State {
    fn bucket(&self, bucket: &str) -> Result<BucketRecord, MetaError> {
        self.buckets
            .get(bucket)
            .cloned()
            .ok_or_else(|| MetaError::NoSuchBucket { bucket: bucket.into() })
    }

    fn object(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, MetaError> {
        Ok(self.objects.get(&key_of(bucket, key)).cloned())
    }

    fn scan(
        &self,
        bucket: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError> {
        Ok(self
            .objects
            .range(key_of(bucket, prefix)..)
            .take_while(|((b, k), _)| b == bucket && k.starts_with(prefix))
            .take(limit)
            .map(|(_, record)| record.clone())
            .collect())
    }
}

impl VersionTables for State {
    fn insert_object(&mut self, record: &ObjectRecord) -> Result<(), MetaError> {
        self.objects.insert(key_of(&record.bucket, &record.key), record.clone());
        Ok(())
    }

    fn remove_object(
        &mut self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        let name = key_of(bucket, key);
        self.transitions.remove(&name);
        Ok(self.objects.remove(&name))
    }

    fn next_generation(&mut self) -> Result<u64, MetaError> {
        self.next_generation += 1;
        Ok(self.next_generation)
    }

    fn note_move(&mut self) -> Result<(), MetaError> {
        self.version_moves += 1;
        Ok(())
    }
}

impl State {
    fn check_lease(&self, lease: &RepairLease) -> Result<(), MetaError> {
        match self.repairs.get(&lease.task_id) {
            Some(task) if holds(task, lease) => Ok(()),
            _ => Err(lease_lost(lease)),
        }
    }

    fn enqueue(&mut self, request: &RepairRequest, now_ms: u64) -> Result<Enqueued, MetaError> {
        let index = (request.object.clone(), request.unit);
        let queued = self.repair_index.get(&index).copied();
        let committed =
            self.objects.get(&(request.object.bucket.clone(), request.object.key.clone()));
        let step =
            enqueue_step(committed, queued.and_then(|id| self.repairs.get(&id)), request, now_ms)?;
        match step {
            EnqueueStep::Keep(outcome) => Ok(outcome),
            EnqueueStep::Update(task) => {
                self.repairs.insert(queued.expect("an update replaces a queued task"), task);
                Ok(Enqueued::Queued)
            }
            EnqueueStep::Append(task) => {
                if let Some(old) = queued {
                    self.repairs.remove(&old);
                }
                self.next_repair_id += 1;
                let id = self.next_repair_id;
                self.repairs.insert(id, task);
                self.repair_index.insert(index, id);
                Ok(Enqueued::Queued)
            }
        }
    }

    /// Removes every queued repair of a parity unit of `object` (see `commit_transition`).
    fn drop_parity_repairs(&mut self, object: &ObjectName) {
        let doomed: Vec<(ObjectName, UnitId)> = self
            .repair_index
            .keys()
            .filter(|(name, unit)| name == object && matches!(unit, UnitId::Parity { .. }))
            .cloned()
            .collect();
        for entry in doomed {
            if let Some(id) = self.repair_index.remove(&entry) {
                self.repairs.remove(&id);
            }
        }
    }

    /// Removes the task of a lease checked by the caller.
    fn remove_task(&mut self, task_id: u64) -> RepairTask {
        let task = self.repairs.remove(&task_id).expect("the lease was checked");
        self.repair_index.remove(&(task.object.clone(), task.unit));
        task
    }
}

impl MetaStore for MemStore {
    fn set_bucket_policy(&self, name: &str, policy: Policy) -> Result<BucketRecord, MetaError> {
        policy.validate().map_err(|e| MetaError::InvalidRecord {
            bucket: name.into(),
            key: String::new(),
            reason: e.to_string(),
        })?;
        let mut state = self.lock();
        let bucket = state
            .buckets
            .get_mut(name)
            .ok_or_else(|| MetaError::NoSuchBucket { bucket: name.into() })?;
        bucket.default_policy = policy;
        Ok(bucket.clone())
    }

    fn version_moves(&self) -> Result<u64, MetaError> {
        Ok(self.lock().version_moves)
    }

    fn set_bucket_versioning(
        &self,
        name: &str,
        versioning: Versioning,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        let mut state = self.lock();
        let mut record = state.bucket(name)?;
        versions::check_versioning(&record, versioning)?;
        record.versioning = Some(versioning);
        if !state.buckets.contains_key(crate::VERSIONS_BUCKET) {
            let internal = versions::versions_bucket(&record, now_ms);
            state.buckets.insert(internal.name.clone(), internal);
        }
        state.buckets.insert(name.into(), record.clone());
        Ok(record)
    }

    fn set_bucket_object_lock(
        &self,
        name: &str,
        lock: crate::lock::BucketLock,
    ) -> Result<BucketRecord, MetaError> {
        let mut state = self.lock();
        let record = crate::lock::locked_bucket(state.bucket(name)?, lock)?;
        state.buckets.insert(name.into(), record.clone());
        Ok(record)
    }

    fn set_version_lock(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        change: crate::lock::LockChange,
        bypass_governance: bool,
        now_ms: u64,
    ) -> Result<ObjectRecord, MetaError> {
        let state = &mut *self.lock();
        crate::lock::set_version_lock(
            state,
            bucket,
            key,
            version,
            change,
            bypass_governance,
            now_ms,
        )
    }

    fn set_version_attributes(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        attributes: serde_json::Value,
    ) -> Result<ObjectRecord, MetaError> {
        versions::set_version_attributes(&mut *self.lock(), bucket, key, version, attributes)
    }

    fn put_record(
        &self,
        namespace: &str,
        name: &str,
        value: &serde_json::Value,
        if_absent: bool,
    ) -> Result<(), MetaError> {
        check_namespace(namespace)?;
        let mut state = self.lock();
        let slot = (namespace.to_string(), name.to_string());
        if if_absent && state.records.contains_key(&slot) {
            return Err(MetaError::RecordExists { namespace: namespace.into(), name: name.into() });
        }
        state.records.insert(slot, value.clone());
        Ok(())
    }

    fn replace_record(
        &self,
        namespace: &str,
        name: &str,
        expected: Option<&serde_json::Value>,
        value: &serde_json::Value,
    ) -> Result<(), MetaError> {
        check_namespace(namespace)?;
        let mut state = self.lock();
        let slot = (namespace.to_string(), name.to_string());
        if state.records.get(&slot) != expected {
            return Err(MetaError::RecordChanged {
                namespace: namespace.into(),
                name: name.into(),
            });
        }
        state.records.insert(slot, value.clone());
        Ok(())
    }

    fn get_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError> {
        check_namespace(namespace)?;
        Ok(self.lock().records.get(&(namespace.to_string(), name.to_string())).cloned())
    }

    fn delete_record(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, MetaError> {
        check_namespace(namespace)?;
        Ok(self.lock().records.remove(&(namespace.to_string(), name.to_string())))
    }

    fn list_records(
        &self,
        namespace: &str,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RecordPage, MetaError> {
        check_namespace(namespace)?;
        let state = self.lock();
        let (start, inclusive) = list_start(prefix, start_after);
        let from = (namespace.to_string(), start.to_string());
        let lower = if inclusive { Bound::Included(from) } else { Bound::Excluded(from) };
        Ok(state
            .records
            .range((lower, Bound::Unbounded))
            .take_while(|((n, name), _)| n == namespace && name.starts_with(prefix))
            .take(limit.min(MAX_LIST_LIMIT))
            .map(|((_, name), value)| (name.clone(), value.clone()))
            .collect())
    }

    fn create_bucket_with(
        &self,
        name: &str,
        default_policy: Policy,
        raidp: Option<RaidpPolicy>,
        geometric: Option<GeometricPolicy>,
        now_ms: u64,
    ) -> Result<BucketRecord, MetaError> {
        check_new_bucket_name(name)?;
        default_policy.validate().map_err(|e| MetaError::InvalidRecord {
            bucket: name.into(),
            key: String::new(),
            reason: e.to_string(),
        })?;
        let mut state = self.lock();
        if state.buckets.contains_key(name) {
            return Err(MetaError::BucketExists { bucket: name.into() });
        }
        let record = BucketRecord {
            name: name.into(),
            default_policy,
            created_ms: now_ms,
            raidp,
            geometric,
            versioning: None,
            object_lock: None,
        };
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
        let has_objects = state.objects.keys().any(|(bucket, _)| bucket == name)
            || !state
                .scan(crate::VERSIONS_BUCKET, &versions::bucket_versions_prefix(name, ""), 1)?
                .is_empty();
        if has_objects || state.writes.keys().any(|(bucket, _, _)| bucket == name) {
            return Err(MetaError::BucketNotEmpty { bucket: name.into() });
        }
        state.buckets.remove(name);
        Ok(())
    }

    fn begin_raidp_object(
        &self,
        bucket: &str,
        key: &str,
        placement: Placement,
        raidp: Option<Vec<RaidpExtent>>,
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
            parity_generation: 0,
            digests: Digests::new(),
            raidp,
            geometric: None,
            owners: Vec::new(),
            attributes: None,
            versioned: false,
            delete_marker: false,
            lock: Default::default(),
        };
        state.writes.insert(write_of(bucket, key, record.generation), record.clone());
        Ok(record)
    }

    fn commit_object_with(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
        digests: &Digests,
        terms: &CommitTerms,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>), MetaError> {
        check_attributes(terms.attributes.as_ref(), bucket, key)?;
        let mut state = self.lock();
        let name = key_of(bucket, key);
        let write_name = write_of(bucket, key, generation);
        let Some(write) = state.writes.get(&write_name) else {
            return Err(MetaError::NoSuchWrite {
                bucket: bucket.into(),
                key: key.into(),
                generation,
            });
        };
        check_digests(write, digests, |_| true)?;
        check_precondition(state.objects.get(&name), terms.precondition, bucket, key)?;
        let bucket_record = state.bucket(bucket)?;
        let mut record = state.writes.get(&write_name).expect("checked above").clone();
        record.state = ObjectState::Committed;
        record.digests = digests.clone();
        record.attributes = terms.attributes.clone();
        crate::lock::on_commit(&bucket_record, &mut record, terms.lock)?;
        let versioning = bucket_record.versioning;
        state.writes.remove(&write_name);
        let replaced = state.remove_object(bucket, key)?;
        let garbage = versions::on_commit(&mut *state, versioning, &mut record, replaced)?;
        state.insert_object(&record)?;
        Ok((record, garbage))
    }

    fn commit_pack(
        &self,
        stripe_bucket: &str,
        stripes: &[StripeCommit],
        bucket: &str,
        objects: &[PackedObject],
    ) -> Result<PackOutcome, MetaError> {
        let mut state = self.lock();
        for stripe in stripes {
            let name = write_of(stripe_bucket, &stripe.key, stripe.generation);
            match state.writes.get(&name) {
                Some(write) if write.generation == stripe.generation => {
                    check_digests(write, &stripe.digests, |_| true)?
                }
                _ => {
                    return Err(MetaError::NoSuchWrite {
                        bucket: stripe_bucket.into(),
                        key: stripe.key.clone(),
                        generation: stripe.generation,
                    })
                }
            }
        }
        let mut outcome = PackOutcome::default();
        let mut swaps = Vec::new();
        for object in objects {
            let name = key_of(bucket, &object.key);
            let current = state.objects.get(&name);
            if let Some(why) = pack_refusal(current, object.generation) {
                outcome.skipped.push((object.key.clone(), why));
                continue;
            }
            let old = current.expect("pack_refusal checked it").clone();
            swaps.push((name, packed_record(&old, &object.place)?));
            outcome.packed.push(old);
        }
        for stripe in stripes {
            let write_name = write_of(stripe_bucket, &stripe.key, stripe.generation);
            let name = key_of(stripe_bucket, &stripe.key);
            let mut record = state.writes.remove(&write_name).expect("checked above");
            record.state = ObjectState::Committed;
            record.digests = stripe.digests.clone();
            record.owners = stripe.owners.clone();
            state.transitions.remove(&name);
            state.objects.insert(name, record);
        }
        for (name, record) in swaps {
            state.transitions.remove(&name);
            state.objects.insert(name, record);
        }
        Ok(outcome)
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

    fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
    ) -> Result<ObjectRecord, MetaError> {
        let mut state = self.lock();
        if !state.buckets.contains_key(bucket) {
            return Err(MetaError::NoSuchBucket { bucket: bucket.into() });
        }
        let name = key_of(bucket, key);
        if let Some(current) = state.objects.get(&name) {
            check_precondition(Some(current), precondition, bucket, key)?;
            crate::lock::check_unlocked(current)?;
        }
        let record = state
            .objects
            .remove(&name)
            .ok_or_else(|| MetaError::NoSuchKey { bucket: bucket.into(), key: key.into() })?;
        state.transitions.remove(&name);
        Ok(record)
    }

    fn delete_latest(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<Precondition>,
        now_ms: u64,
    ) -> Result<Deleted, MetaError> {
        versions::delete_latest(&mut *self.lock(), bucket, key, precondition, now_ms)
    }

    fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
        terms: versions::VersionDelete,
    ) -> Result<ObjectRecord, MetaError> {
        versions::delete_version(&mut *self.lock(), bucket, key, version, terms)
    }

    fn get_version(
        &self,
        bucket: &str,
        key: &str,
        version: VersionRef,
    ) -> Result<ObjectRecord, MetaError> {
        let state = self.lock();
        state.bucket(bucket)?;
        versions::find_version(&*state, bucket, key, version)?
            .ok_or_else(|| versions::no_such_version(bucket, key, version))
    }

    fn list_writes(
        &self,
        after: Option<&WriteCursor>,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, MetaError> {
        let lower = match after {
            Some((name, generation)) => {
                Bound::Excluded(write_of(&name.bucket, &name.key, *generation))
            }
            None => Bound::Unbounded,
        };
        let state = self.lock();
        let page = state.writes.range((lower, Bound::Unbounded)).take(limit.min(MAX_LIST_LIMIT));
        Ok(page.map(|(_, write)| write.clone()).collect())
    }

    fn get_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<Option<ObjectRecord>, MetaError> {
        Ok(self.lock().writes.get(&write_of(bucket, key, generation)).cloned())
    }

    fn abort_write(
        &self,
        bucket: &str,
        key: &str,
        generation: u64,
    ) -> Result<ObjectRecord, MetaError> {
        let mut state = self.lock();
        state.writes.remove(&write_of(bucket, key, generation)).ok_or_else(|| {
            MetaError::NoSuchWrite { bucket: bucket.into(), key: key.into(), generation }
        })
    }

    fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Lease, MetaError> {
        let mut state = self.lock();
        let (lease, _) = leased(state.leases.get(name).cloned(), name, holder, now_ms, lease_ms);
        state.leases.insert(name.into(), lease.clone());
        Ok(lease)
    }

    fn get_lease(&self, name: &str) -> Result<Option<Lease>, MetaError> {
        Ok(self.lock().leases.get(name).cloned())
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<(), MetaError> {
        let mut state = self.lock();
        if state.leases.get(name).is_some_and(|l| l.holder == holder) {
            state.leases.remove(name);
        }
        Ok(())
    }

    fn record_replica(&self, replica: &ReplicaRecord) -> Result<(), MetaError> {
        self.lock().replicas.insert(replica.endpoint.clone(), replica.clone());
        Ok(())
    }

    fn list_replicas(&self) -> Result<Vec<ReplicaRecord>, MetaError> {
        Ok(self.lock().replicas.values().take(MAX_LIST_LIMIT).cloned().collect())
    }

    fn forget_replica(&self, endpoint: &str) -> Result<(), MetaError> {
        self.lock().replicas.remove(endpoint);
        Ok(())
    }

    fn placed_units(
        &self,
        node: u32,
        disk: Option<u32>,
        after: Option<&PlacedUnit>,
        limit: usize,
    ) -> Result<Vec<PlacedUnit>, MetaError> {
        // The model: every unit of every object, sorted as the index sorts them.
        let state = self.lock();
        let mut all: Vec<(u32, u32, String, String, String, PlacedUnit)> = state
            .objects
            .values()
            .flat_map(|object| {
                object.placement.units().map(move |(unit, location)| {
                    let placed = PlacedUnit {
                        disk: location,
                        object: ObjectName {
                            bucket: object.bucket.clone(),
                            key: object.key.clone(),
                        },
                        unit,
                        generation: object.generation,
                    };
                    let name = crate::records::unit_name(unit);
                    (
                        location.node,
                        location.disk,
                        object.bucket.clone(),
                        object.key.clone(),
                        name,
                        placed,
                    )
                })
            })
            .filter(|(n, d, ..)| *n == node && disk.is_none_or(|disk| *d == disk))
            .collect();
        all.sort_by(|a, b| (&a.0, &a.1, &a.2, &a.3, &a.4).cmp(&(&b.0, &b.1, &b.2, &b.3, &b.4)));
        let after = after.map(|a| {
            let name = crate::records::unit_name(a.unit);
            (a.disk.node, a.disk.disk, a.object.bucket.clone(), a.object.key.clone(), name)
        });
        Ok(all
            .into_iter()
            .filter(|(n, d, b, k, u, _)| {
                after.as_ref().is_none_or(|a| (n, d, b, k, u) > (&a.0, &a.1, &a.2, &a.3, &a.4))
            })
            .take(limit.min(MAX_LIST_LIMIT))
            .map(|entry| entry.5)
            .collect())
    }

    fn placed_disks(&self) -> Result<Vec<(u32, u32)>, MetaError> {
        let state = self.lock();
        let disks: std::collections::BTreeSet<(u32, u32)> = state
            .objects
            .values()
            .flat_map(|object| object.placement.units().map(|(_, d)| (d.node, d.disk)))
            .collect();
        Ok(disks.into_iter().collect())
    }

    fn object_totals(&self) -> Result<ObjectTotals, MetaError> {
        let state = self.lock();
        let mut by_size = [SizeUsage::default(); SIZE_CLASSES];
        for (class, size, stored) in state.objects.values().filter_map(usage_of) {
            let usage = &mut by_size[class];
            usage.objects += 1;
            usage.bytes += size;
            usage.stored_bytes += stored;
        }
        Ok(ObjectTotals {
            objects: state.objects.len() as u64,
            bytes: state.objects.values().map(|o| o.size()).sum(),
            by_size,
        })
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
            rack: heartbeat.rack,
        };
        self.lock().nodes.insert(heartbeat.node_id, record.clone());
        Ok(record)
    }

    fn list_nodes(&self) -> Result<Vec<NodeRecord>, MetaError> {
        Ok(self.lock().nodes.values().cloned().collect())
    }

    fn enqueue_repair(&self, request: &RepairRequest, now_ms: u64) -> Result<Enqueued, MetaError> {
        self.lock().enqueue(request, now_ms)
    }

    fn enqueue_repairs(&self, requests: &[RepairRequest], now_ms: u64) -> Result<usize, MetaError> {
        let mut state = self.lock();
        // All or nothing, like one transaction: work on a copy, keep it only if all succeed.
        let (repairs, index, next) =
            (state.repairs.clone(), state.repair_index.clone(), state.next_repair_id);
        let mut queued = 0;
        for request in requests {
            match state.enqueue(request, now_ms) {
                Ok(Enqueued::Queued) => queued += 1,
                Ok(_) => {}
                Err(error) => {
                    (state.repairs, state.repair_index, state.next_repair_id) =
                        (repairs, index, next);
                    return Err(error);
                }
            }
        }
        Ok(queued)
    }

    fn take_repair(&self, now_ms: u64, lease_ms: u64) -> Result<Option<RepairLease>, MetaError> {
        let mut state = self.lock();
        let Some((&id, task)) = state.repairs.iter_mut().find(|(_, task)| is_free(task, now_ms))
        else {
            return Ok(None);
        };
        let deadline_ms = lease_deadline(task, now_ms, lease_ms);
        task.attempts += 1;
        task.lease_deadline_ms = Some(deadline_ms);
        Ok(Some(RepairLease { task_id: id, task: task.clone(), deadline_ms }))
    }

    fn complete_repair(&self, lease: &RepairLease) -> Result<(), MetaError> {
        let mut state = self.lock();
        state.check_lease(lease)?;
        state.remove_task(lease.task_id);
        Ok(())
    }

    fn relocate_repaired(
        &self,
        lease: &RepairLease,
        disk: DiskLocation,
    ) -> Result<RepairOutcome, MetaError> {
        let mut state = self.lock();
        state.check_lease(lease)?;
        let task = &state.repairs[&lease.task_id];
        let name = key_of(&task.object.bucket, &task.object.key);
        let moved = relocated(state.objects.get(&name).cloned(), task, disk)?;
        state.remove_task(lease.task_id);
        Ok(match moved {
            Some(object) => {
                state.objects.insert(name, object.clone());
                RepairOutcome::Relocated(object)
            }
            None => RepairOutcome::Stale,
        })
    }

    fn fail_repair_until(
        &self,
        lease: &RepairLease,
        error: &str,
        not_before_ms: Option<u64>,
        unfound: bool,
    ) -> Result<u64, MetaError> {
        let mut state = self.lock();
        state.check_lease(lease)?;
        let mut task = state.remove_task(lease.task_id);
        task.lease_deadline_ms = None;
        task.last_error = Some(error.to_string());
        task.not_before_ms = not_before_ms;
        task.unfound = unfound;
        state.next_repair_id += 1;
        let id = state.next_repair_id;
        state.repair_index.insert((task.object.clone(), task.unit), id);
        state.repairs.insert(id, task);
        Ok(id)
    }

    fn wake_unfound_repairs(&self) -> Result<usize, MetaError> {
        let mut state = self.lock();
        let mut woken = 0;
        for task in state.repairs.values_mut().filter(|t| t.unfound && t.not_before_ms.is_some()) {
            task.not_before_ms = None;
            woken += 1;
        }
        Ok(woken)
    }

    fn drop_repairs_of(&self, bucket: &str, key: &str) -> Result<usize, MetaError> {
        let mut state = self.lock();
        let doomed: Vec<u64> = state
            .repair_index
            .iter()
            .filter(|((name, _), _)| name.bucket == bucket && name.key == key)
            .map(|(_, id)| *id)
            .collect();
        for id in &doomed {
            state.remove_task(*id);
        }
        Ok(doomed.len())
    }

    fn repairs_of(&self, bucket: &str, key: &str) -> Result<Vec<(u64, RepairTask)>, MetaError> {
        let state = self.lock();
        Ok(state
            .repair_index
            .iter()
            .filter(|((name, _), _)| name.bucket == bucket && name.key == key)
            .filter_map(|(_, id)| state.repairs.get(id).map(|task| (*id, task.clone())))
            .collect())
    }

    fn get_repair(&self, task_id: u64) -> Result<Option<RepairTask>, MetaError> {
        Ok(self.lock().repairs.get(&task_id).cloned())
    }

    fn list_repairs(
        &self,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, RepairTask)>, MetaError> {
        let state = self.lock();
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(state
            .repairs
            .range((lower, Bound::Unbounded))
            .take(limit.min(MAX_LIST_LIMIT))
            .map(|(&id, task)| (id, task.clone()))
            .collect())
    }

    fn repair_queue_len(&self) -> Result<usize, MetaError> {
        Ok(self.lock().repairs.len())
    }

    fn begin_transition(
        &self,
        plan: NewTransition,
        now_ms: u64,
    ) -> Result<(TransitionRecord, Option<TransitionRecord>), MetaError> {
        let mut state = self.lock();
        if !state.buckets.contains_key(&plan.bucket) {
            return Err(MetaError::NoSuchBucket { bucket: plan.bucket });
        }
        let name = key_of(&plan.bucket, &plan.key);
        check_new_transition(state.objects.get(&name), &plan)?;
        state.next_transition_id += 1;
        let record = TransitionRecord::new(plan, state.next_transition_id, now_ms);
        let replaced = state.transitions.insert(name, record.clone());
        Ok((record, replaced))
    }

    fn commit_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        parity_digests: &Digests,
    ) -> Result<(ObjectRecord, ObjectRecord), MetaError> {
        let mut state = self.lock();
        let name = key_of(bucket, key);
        let new = transitioned(
            state.objects.get(&name),
            state.transitions.get(&name),
            bucket,
            key,
            id,
            parity_digests,
        )?;
        state.transitions.remove(&name);
        state.drop_parity_repairs(&ObjectName { bucket: bucket.into(), key: key.into() });
        let old = state.objects.insert(name, new.clone()).expect("checked by transitioned");
        Ok((new, old))
    }

    fn abort_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
    ) -> Result<TransitionRecord, MetaError> {
        let mut state = self.lock();
        let name = key_of(bucket, key);
        match state.transitions.get(&name) {
            Some(pending) if pending.id == id => {
                Ok(state.transitions.remove(&name).expect("checked above"))
            }
            pending => Err(MetaError::NoSuchTransition {
                bucket: bucket.into(),
                key: key.into(),
                id,
                pending: pending.map(|t| t.id),
            }),
        }
    }

    fn get_transition(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<TransitionRecord>, MetaError> {
        Ok(self.lock().transitions.get(&key_of(bucket, key)).cloned())
    }

    fn list_transitions(
        &self,
        after: Option<&ObjectName>,
        limit: usize,
    ) -> Result<Vec<TransitionRecord>, MetaError> {
        Ok(page_after(&self.lock().transitions, after, limit))
    }

    fn transition_count(&self) -> Result<usize, MetaError> {
        Ok(self.lock().transitions.len())
    }

    fn renew_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        deadline_ms: u64,
    ) -> Result<TransitionRecord, MetaError> {
        let mut state = self.lock();
        let name = key_of(bucket, key);
        pending_one(state.objects.get(&name), state.transitions.get(&name), bucket, key, id)?;
        let record = state.transitions.get_mut(&name).expect("checked by pending_one");
        record.lease_deadline_ms = deadline_ms;
        Ok(record.clone())
    }

    fn expire_transition(
        &self,
        bucket: &str,
        key: &str,
        id: u64,
        now_ms: u64,
    ) -> Result<Option<TransitionRecord>, MetaError> {
        let mut state = self.lock();
        let name = key_of(bucket, key);
        match state.transitions.get(&name) {
            Some(pending) if pending.id == id && pending.lease_expired(now_ms) => {
                Ok(state.transitions.remove(&name))
            }
            _ => Ok(None),
        }
    }
}
