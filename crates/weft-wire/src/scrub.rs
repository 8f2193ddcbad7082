//! What a node's background scrub tells meta (docs/meta-api.md, "Scrub and inventory"):
//! units it found bad, and digests of what its disks hold.
//!
//! Invariants:
//! - Units are named by their unit key as the node's API names them
//!   (`<object:32 hex>-d<block:8 hex>-<generation:16 hex>` or the parity form), so meta maps
//!   them back to an object without asking the node.
//! - Request bodies refuse unknown fields; replies may gain fields.
//! - A report names at most [`MAX_BAD_UNITS_PER_REPORT`] units; a node with more sends more
//!   reports.

use serde::{Deserialize, Serialize};

/// Most units one [`BadUnits`] report may name.
pub const MAX_BAD_UNITS_PER_REPORT: usize = 1000;

/// What is wrong with a unit a scrub checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitProblem {
    /// A segment's bytes do not match its checksum.
    Corrupt,
    /// The unit could not be read or its header is damaged.
    Unreadable,
}

/// One bad unit: `{"unit_key","problem","detail"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadUnit {
    pub unit_key: String,
    pub problem: UnitProblem,
    /// What the scrub saw, for logs and the repair's reason (e.g. the corrupt segment).
    pub detail: String,
}

/// `POST /v1/nodes/{id}/bad-units`: units of disk `disk` of node `id` that a scrub found bad.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadUnits {
    pub disk: u32,
    pub units: Vec<BadUnit>,
}

/// Reply to [`BadUnits`]: `{"queued","unreferenced"}`. `queued`: repairs queued (or made
/// `damaged`); `unreferenced`: units no committed object refers to on that disk (garbage for
/// gc, nothing to repair).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadUnitsReply {
    pub queued: u64,
    pub unreferenced: u64,
}

/// The query of `POST /v1/nodes/{id}/disks/{disk}/inventory`, whose body is the digest's
/// bytes (`weft_store::inventory`): `?units=N&hashes=K&seed=S&listing_ms=L`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InventoryQuery {
    /// Units the digest holds.
    pub units: u64,
    /// Hash probes per unit.
    pub hashes: u32,
    /// The seed of the digest's hashes.
    pub seed: u64,
    /// Milliseconds from the start of the disk's listing to the sending of the digest: meta
    /// leaves out the objects that changed since (their new units may be missing from it).
    pub listing_ms: u64,
}

/// Reply to an inventory: `{"referenced","missing","queued","recent","retry_after_ms"}`.
/// `referenced`: units meta places on the disk; `missing`: those the digest certainly lacks;
/// `queued`: repairs that queued; `recent`: units left out of the comparison because their
/// object changed too recently for the digest to be sure to include them; `retry_after_ms`:
/// null, or meta compared nothing (it has not run long enough to know every recent change)
/// and the node should send a new digest after that many milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryReply {
    pub referenced: u64,
    pub missing: u64,
    pub queued: u64,
    pub recent: u64,
    pub retry_after_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_units_json_is_the_documented_shape() {
        let report = BadUnits {
            disk: 1,
            units: vec![BadUnit {
                unit_key: "k".into(),
                problem: UnitProblem::Corrupt,
                detail: "segment 3".into(),
            }],
        };
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(
            json,
            r#"{"disk":1,"units":[{"unit_key":"k","problem":"corrupt","detail":"segment 3"}]}"#
        );
        assert_eq!(serde_json::from_str::<BadUnits>(&json).unwrap(), report);
        assert!(serde_json::from_str::<BadUnits>(r#"{"disk":1,"units":[],"x":1}"#).is_err());
    }
}
