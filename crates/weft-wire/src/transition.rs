//! Transition messages between a transition executor and meta (docs/meta-api.md,
//! "Transitions"): begin a regroup, commit or abort it, list and read pending ones.
//!
//! Invariants:
//! - Units are named by their short name (`d<x>`, `p<group>.<index>`) and carry the unit key
//!   the executor reads or writes, exactly as in meta's object responses.
//! - A transition is named by (bucket, key, id); the id is the new parity generation of the
//!   object, so every unit a transition creates has a key no other unit ever had.
//! - Request bodies refuse unknown fields; replies may gain fields, so readers should ignore
//!   the ones they do not know. Layouts (`L`), objects (`O`) and IO figures (`Io`) are
//!   generic so this crate needs no layout types; meta uses `weft_layout::StripedLayout`,
//!   `serde_json::Value` and `weft_layout::TransitionIo`.

use serde::{Deserialize, Serialize};

/// `POST /v1/transitions`: plan a transition of the committed object (bucket, key) to the
/// layout `layout` (a full layout as in bucket policies). `mode` is `"regroup"` (the default
/// when absent), the only mode meta plans: a restripe is a new write of the object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginTransition<L> {
    pub bucket: String,
    pub key: String,
    pub layout: L,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `POST /v1/transitions/commit` and `POST /v1/transitions/abort`: the transition `id` of
/// (bucket, key). `generation`, when given, is the object generation the begin reply named:
/// a commit then says precisely that the object was replaced when it was. `digests` (commit
/// only, last, absent when empty): the executor's digest of every new parity unit by unit
/// name (`p<group>.<index>`), all or none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransitionRef {
    pub bucket: String,
    pub key: String,
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub digests: std::collections::BTreeMap<String, crate::UnitDigest>,
}

/// One pending transition: `{"id","bucket","key","generation","mode","created_ms"}`.
/// `generation` is the object's generation (unchanged by the transition); `id` becomes its
/// parity generation on commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionInfo {
    pub id: u64,
    pub bucket: String,
    pub key: String,
    pub generation: u64,
    pub mode: String,
    pub created_ms: u64,
}

/// Where a unit is: disk `disk` of node `node_id`, reached at `endpoint` (null when meta has
/// no record of the node).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitPlace {
    pub node_id: u32,
    pub endpoint: Option<String>,
    pub disk: u32,
}

/// A unit to write or delete: `{"unit","node_id","endpoint","disk","unit_key","len"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionUnit {
    /// `d<x>` or `p<group>.<index>`.
    pub unit: String,
    pub node_id: u32,
    pub endpoint: Option<String>,
    pub disk: u32,
    /// The unit's key on its node (file name without `.unit`).
    pub unit_key: String,
    /// Stored length in bytes.
    pub len: u64,
}

/// A data block the regroup copies from one disk to another, under the same unit key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRelocation {
    /// `d<x>`.
    pub unit: String,
    pub len: u64,
    pub unit_key: String,
    pub from: UnitPlace,
    pub to: UnitPlace,
}

/// Predicted IO of the two ways to make the transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictedIo<Io> {
    pub regroup: Io,
    pub restripe: Io,
}

/// An unfinished transition a new begin replaced: the units it planned, for the caller to
/// delete. `relocation_copies` are its relocation destinations that nothing references (a
/// copy the object now uses, or the new plan writes again, is left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacedTransition {
    pub transition: TransitionInfo,
    pub create: Vec<TransitionUnit>,
    #[serde(default)]
    pub relocation_copies: Vec<TransitionUnit>,
}

/// Reply to [`BeginTransition`] (and to `GET /v1/transitions/{bucket}/{key}`, with
/// `replaced` null): the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionPlan<L, O, Io> {
    pub transition: TransitionInfo,
    /// The committed object as `GET /v1/buckets/{b}/objects/{k}` returns it.
    pub object: O,
    pub new_layout: L,
    /// The new parity units to compute and write (unit generation = the transition id).
    pub create: Vec<TransitionUnit>,
    /// The object's current parity units, deleted after the commit (the commit reply has
    /// the authoritative list).
    pub delete: Vec<TransitionUnit>,
    /// Data blocks to copy before the commit, in block order.
    pub relocations: Vec<UnitRelocation>,
    pub predicted: PredictedIo<Io>,
    #[serde(default)]
    pub replaced: Option<ReplacedTransition>,
}

/// Reply to a commit: the object under its new layout and what is now garbage (the old
/// parity units and the old copies of relocated blocks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitTransitionReply<O> {
    pub transition: TransitionInfo,
    pub object: O,
    pub delete: Vec<TransitionUnit>,
}

/// Reply to an abort: the units the transition planned that nothing references.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortTransitionReply {
    pub transition: TransitionInfo,
    pub delete: Vec<TransitionUnit>,
}

/// `GET /v1/transitions`: pending transitions in (bucket, key) order, at most 1000, and how
/// many are pending in all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionList {
    pub transitions: Vec<TransitionInfo>,
    pub pending: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_the_documented_shape_and_refuse_unknown_fields() {
        let begin: BeginTransition<serde_json::Value> = serde_json::from_str(
            r#"{"bucket":"b","key":"k","layout":{"code":"rs(12,3)"},"mode":"regroup"}"#,
        )
        .unwrap();
        assert_eq!(begin.mode.as_deref(), Some("regroup"));
        let plain: BeginTransition<serde_json::Value> =
            serde_json::from_str(r#"{"bucket":"b","key":"k","layout":{}}"#).unwrap();
        assert_eq!(plain.mode, None);
        let commit = TransitionRef {
            bucket: "b".into(),
            key: "k".into(),
            id: 9,
            generation: None,
            digests: Default::default(),
        };
        assert_eq!(serde_json::to_string(&commit).unwrap(), r#"{"bucket":"b","key":"k","id":9}"#);
        assert!(
            serde_json::from_str::<TransitionRef>(r#"{"bucket":"b","key":"k","idd":9}"#).is_err()
        );
    }

    #[test]
    fn a_unit_is_the_documented_shape() {
        let unit = TransitionUnit {
            unit: "p0.1".into(),
            node_id: 3,
            endpoint: Some("http://127.0.0.1:7803".into()),
            disk: 0,
            unit_key: "k".into(),
            len: 8,
        };
        assert_eq!(
            serde_json::to_string(&unit).unwrap(),
            r#"{"unit":"p0.1","node_id":3,"endpoint":"http://127.0.0.1:7803","disk":0,"unit_key":"k","len":8}"#
        );
    }
}
