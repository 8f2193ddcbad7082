//! Repair messages between a repair executor and meta (docs/meta-api.md, "Repairs").
//!
//! Invariants:
//! - Units are named by their short name, `d<x>` for data block x and `p<group>.<index>` for
//!   a parity, exactly as in meta's object responses.
//! - A lease is named by (`task_id`, `deadline_ms`): meta never hands out two leases of one
//!   task with the same deadline, so an executor whose lease expired cannot complete or fail
//!   the task for the executor that took it next.
//! - Request bodies refuse unknown fields (a misspelt field is an error, never ignored);
//!   replies may gain fields, so readers should ignore the ones they do not know.
//! - Fields added to a request later are optional with a default that means what an older
//!   sender meant: a [`FailRepair`] without `cause` is `transient`.
//! - A [`Deletion`] names a copy meta no longer points at; its `id` is opaque to executors.

use serde::{Deserialize, Serialize};

/// Why a unit is queued for repair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepairKind {
    /// The unit's node is down or its disk failed (queued by meta's detector). Dropped
    /// without repair when, at take time, the node is up again and the disk healthy.
    Unavailable,
    /// A client found the unit corrupt or missing (`POST /v1/repairs`). Always repaired.
    #[default]
    Damaged,
}

/// `POST /v1/repairs`: a client found a unit of a committed object corrupt or missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairReport {
    pub bucket: String,
    pub key: String,
    /// The generation of the object the client read.
    pub generation: u64,
    /// `d<x>` or `p<group>.<index>`.
    pub unit: String,
    pub reason: String,
    /// The unit's bytes did not match the digest its writer recorded in meta (end-to-end
    /// checksums); absent means false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub digest_mismatch: bool,
}

/// Reply to [`RepairReport`]: `{"queued":bool,"stale":bool}`. `queued` is true when the call
/// queued a task (or made an already queued one a `damaged` repair); `stale` is true when the
/// object has since been replaced (another generation), and then nothing is queued.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairReportReply {
    pub queued: bool,
    pub stale: bool,
}

/// `POST /v1/repairs/take`: lease the oldest task that is due for `lease_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakeRepair {
    pub lease_ms: u64,
}

/// One queued repair task as meta reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairTaskInfo {
    /// Names the task in `complete` / `fail`; a failed task is requeued under a new id.
    pub task_id: u64,
    pub bucket: String,
    pub key: String,
    /// The generation of the object when the task was queued.
    pub generation: u64,
    /// `d<x>` or `p<group>.<index>`.
    pub unit: String,
    pub reason: String,
    pub kind: RepairKind,
    /// How many times the task has been leased (this lease included).
    pub attempts: u32,
    /// Until when the current lease holds (ms since the Unix epoch); null when not leased.
    /// Always set in a take reply.
    pub deadline_ms: Option<u64>,
    pub enqueued_ms: u64,
    /// The error of the last failed attempt, if any.
    pub last_error: Option<String>,
    /// A failed task is not handed out before this time (ms since the Unix epoch): the
    /// back-off after its last failure. Absent when it is due at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<u64>,
    /// The last attempt found too few units of the unit's group readable: the unit is
    /// *unfound* (retried only after a long back-off, or at once when a node returns; give up
    /// with `POST /v1/repairs/lost`). Absent when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unfound: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Where to write the rebuilt unit: disk `disk` of node `node_id` at `endpoint`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairDestination {
    pub node_id: u32,
    pub disk: u32,
    pub endpoint: String,
}

/// Reply to [`TakeRepair`]: `{"task":null,"dropped":n}` when nothing is due, else the leased
/// task, the object exactly as `GET /v1/buckets/{b}/objects/{k}` returns it (type `O`, e.g.
/// `serde_json::Value`) and the destination of the rebuilt unit. `dropped` counts the tasks
/// this call removed without handing them out (object gone or replaced, unit available again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeRepairReply<O> {
    pub task: Option<RepairTaskInfo>,
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub object: Option<O>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<RepairDestination>,
    #[serde(default)]
    pub dropped: u64,
}

/// `POST /v1/repairs/{task_id}/complete`: the unit is durable on disk `disk` of `node_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRepair {
    /// The lease's deadline, from the take reply.
    pub deadline_ms: u64,
    pub node_id: u32,
    pub disk: u32,
}

/// What completing a repair did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepairResult {
    /// The object now names the new disk for the unit (the old copy is garbage).
    Relocated,
    /// The object was deleted or replaced meanwhile: nothing changed but the task is gone,
    /// and the rebuilt unit is garbage for the executor to delete.
    Stale,
}

/// Reply to [`CompleteRepair`]: `{"result":"relocated"|"stale","deletion":id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteRepairReply {
    pub result: RepairResult,
    /// When the repair moved the unit off another disk: the id under which meta queued the
    /// replaced copy for deletion (`GET /v1/deletions`). The executor deletes the copy now
    /// if its node answers and acknowledges it with `POST /v1/deletions/done`; otherwise a
    /// later drain does. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<String>,
}

/// Why a repair failed, as the executor tells meta (`cause` of [`FailRepair`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailCause {
    /// Anything that may pass by itself (a node slow or unreachable, a lease too short...):
    /// retried after a short back-off. The default, and what executors that send no cause
    /// mean.
    #[default]
    Transient,
    /// Too few units of the unit's group are readable to rebuild it: the unit is *unfound*.
    Unrecoverable,
}

/// `POST /v1/repairs/{task_id}/fail`: the repair failed; the task goes back to the queue.
/// `{"deadline_ms":u64,"error":s,"cause":"transient"|"unrecoverable"}`; `cause` is optional
/// (default `transient`), so executors that predate it keep working.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailRepair {
    pub deadline_ms: u64,
    pub error: String,
    #[serde(default)]
    pub cause: FailCause,
}

/// Reply to [`FailRepair`]: `{"requeued":true,"task_id":new id,"not_before_ms":u64,
/// "unfound":bool}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRepairReply {
    pub requeued: bool,
    /// The id the task is queued under now.
    pub task_id: u64,
    /// The task is not handed out again before this time (ms since the Unix epoch).
    #[serde(default)]
    pub not_before_ms: Option<u64>,
    /// The task is now unfound (see [`RepairTaskInfo::unfound`]).
    #[serde(default)]
    pub unfound: bool,
}

/// `POST /v1/repairs/lost`: give up on an object some of whose units are unfound (like
/// Ceph's `mark_unfound_lost`). `generation`, when given, must be the object's current one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkLost {
    pub bucket: String,
    pub key: String,
    #[serde(default)]
    pub generation: Option<u64>,
}

/// Reply to [`MarkLost`]: the object as it was (type `O`, as `GET` returns it, with its
/// units: the caller may delete the copies still readable), the units that were unfound and
/// how many repair tasks of the object were dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkLostReply<O> {
    pub bucket: String,
    pub key: String,
    pub generation: u64,
    pub lost: bool,
    pub unfound_units: Vec<String>,
    pub dropped_repairs: u64,
    pub object: O,
}

/// What meta keeps of an object marked lost (namespace `lost_objects`, name `bucket/key`),
/// and what `GET` of its key answers with `410 object_lost` until the key is written again
/// or deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostObject {
    pub bucket: String,
    pub key: String,
    pub generation: u64,
    pub lost_ms: u64,
    pub unfound_units: Vec<String>,
}

/// `GET /v1/deletions`: copies of units that repairs replaced, still to delete, on nodes
/// that are up now (at most `limit`, default and maximum 100).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionList {
    /// Deletions pending on every node, up or not.
    pub pending: u64,
    pub deletions: Vec<Deletion>,
}

/// One replaced copy to delete: unit `unit_key` on disk `disk` of node `node_id` (at
/// `endpoint` now). `id` names it in [`DeletionsDone`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deletion {
    pub id: String,
    pub node_id: u32,
    pub disk: u32,
    pub endpoint: String,
    pub unit_key: String,
    pub bucket: String,
    pub key: String,
    pub unit: String,
    pub queued_ms: u64,
}

/// `POST /v1/deletions/done`: these copies are deleted (or were already gone).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeletionsDone {
    pub ids: Vec<String>,
}

/// Reply to [`DeletionsDone`]: how many of the ids were pending (and are no more).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionsDoneReply {
    pub removed: u64,
}

/// `GET /v1/repairs`: the queue length and its first tasks, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairList {
    pub queued: u64,
    pub tasks: Vec<RepairTaskInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_reply_json_is_the_documented_shape() {
        let none: TakeRepairReply<serde_json::Value> =
            TakeRepairReply { task: None, object: None, destination: None, dropped: 2 };
        assert_eq!(serde_json::to_string(&none).unwrap(), r#"{"task":null,"dropped":2}"#);
        let parsed: TakeRepairReply<serde_json::Value> =
            serde_json::from_str(r#"{"task":null}"#).unwrap();
        assert_eq!(parsed.task, None);

        let task = RepairTaskInfo {
            task_id: 4,
            bucket: "b".into(),
            key: "k".into(),
            generation: 7,
            unit: "d3".into(),
            reason: "node 3 down".into(),
            kind: RepairKind::Unavailable,
            attempts: 1,
            deadline_ms: Some(1000),
            enqueued_ms: 5,
            last_error: None,
            not_before_ms: None,
            unfound: false,
        };
        let reply = TakeRepairReply {
            task: Some(task.clone()),
            object: Some(serde_json::json!({"bucket": "b"})),
            destination: Some(RepairDestination {
                node_id: 2,
                disk: 0,
                endpoint: "http://127.0.0.1:7802".into(),
            }),
            dropped: 0,
        };
        let json = serde_json::to_string(&reply).unwrap();
        assert_eq!(
            json,
            r#"{"task":{"task_id":4,"bucket":"b","key":"k","generation":7,"unit":"d3","reason":"node 3 down","kind":"unavailable","attempts":1,"deadline_ms":1000,"enqueued_ms":5,"last_error":null},"object":{"bucket":"b"},"destination":{"node_id":2,"disk":0,"endpoint":"http://127.0.0.1:7802"},"dropped":0}"#
        );
        assert_eq!(
            serde_json::from_str::<TakeRepairReply<serde_json::Value>>(&json).unwrap(),
            reply
        );
    }

    #[test]
    fn requests_refuse_unknown_fields() {
        let complete = r#"{"deadline_ms":9,"node_id":1,"disk":0}"#;
        assert_eq!(
            serde_json::from_str::<CompleteRepair>(complete).unwrap(),
            CompleteRepair { deadline_ms: 9, node_id: 1, disk: 0 }
        );
        let typo = r#"{"deadline_ms":9,"node":1,"disk":0}"#;
        assert!(serde_json::from_str::<CompleteRepair>(typo).is_err());
        let reply = CompleteRepairReply { result: RepairResult::Stale, deletion: None };
        assert_eq!(serde_json::to_string(&reply).unwrap(), r#"{"result":"stale"}"#);
    }

    #[test]
    fn deletions_and_mark_lost_have_the_documented_shape() {
        let list: DeletionList = serde_json::from_str(
            r#"{"pending":1,"deletions":[{"id":"0000000003/0/k","node_id":3,"disk":0,
                "endpoint":"http://127.0.0.1:7803","unit_key":"k","bucket":"b","key":"o",
                "unit":"d0","queued_ms":5}]}"#,
        )
        .unwrap();
        assert_eq!((list.pending, list.deletions[0].node_id), (1, 3));
        let done = r#"{"ids":["0000000003/0/k"]}"#;
        assert_eq!(serde_json::from_str::<DeletionsDone>(done).unwrap().ids.len(), 1);
        assert!(serde_json::from_str::<DeletionsDone>(r#"{"id":"x"}"#).is_err());
        let lost: MarkLost = serde_json::from_str(r#"{"bucket":"b","key":"o"}"#).unwrap();
        assert_eq!(lost.generation, None);
        assert!(serde_json::from_str::<MarkLost>(r#"{"bucket":"b"}"#).is_err());
    }

    #[test]
    fn a_fail_without_a_cause_is_transient_and_causes_are_checked() {
        let old = r#"{"deadline_ms":9,"error":"node 3 refused"}"#;
        let parsed: FailRepair = serde_json::from_str(old).unwrap();
        assert_eq!(parsed.cause, FailCause::Transient);
        let new = r#"{"deadline_ms":9,"error":"too few units","cause":"unrecoverable"}"#;
        assert_eq!(
            serde_json::from_str::<FailRepair>(new).unwrap().cause,
            FailCause::Unrecoverable
        );
        assert!(serde_json::from_str::<FailRepair>(r#"{"deadline_ms":9,"error":"","cause":"x"}"#)
            .is_err());
        let old_reply: FailRepairReply =
            serde_json::from_str(r#"{"requeued":true,"task_id":3}"#).unwrap();
        assert_eq!((old_reply.not_before_ms, old_reply.unfound), (None, false));
    }
}
