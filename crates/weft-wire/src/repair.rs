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

/// Reply to [`CompleteRepair`]: `{"result":"relocated"|"stale"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteRepairReply {
    pub result: RepairResult,
}

/// `POST /v1/repairs/{task_id}/fail`: the repair failed; the task goes back to the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailRepair {
    pub deadline_ms: u64,
    pub error: String,
}

/// Reply to [`FailRepair`]: `{"requeued":true,"task_id":new id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRepairReply {
    pub requeued: bool,
    /// The id the task is queued under now.
    pub task_id: u64,
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
        let reply = CompleteRepairReply { result: RepairResult::Stale };
        assert_eq!(serde_json::to_string(&reply).unwrap(), r#"{"result":"stale"}"#);
    }
}
