//! Messages weft's daemons exchange, defined once so that both ends of a wire agree by
//! construction: node → meta heartbeats and scrub reports ([`scrub`]), the repair executor ↔
//! meta messages ([`repair`])
//! and the transition executor ↔ meta messages ([`transition`]), the end-to-end unit
//! digests every writer records and every reader checks ([`digest`]), and the segment
//! checksum (CRC-32C) that nodes store and clients verify ([`checksum`]).
//!
//! Invariants: these types are plain data with serde derives and no behaviour (beyond the hex
//! form of a [`digest::UnitDigest`], the CRC-32C of [`checksum`], and the rate-limited
//! `link::Link` of the hardware model,
//! shared by nodes and clients behind the `link` feature); their JSON field
//! names and order are the documented contract (docs/node-api.md, docs/meta-api.md), so a
//! rename here is a wire-format change.

use serde::{Deserialize, Serialize};

pub use digest::{DigestKind, UnitDigest};

pub mod checksum;
pub mod digest;
pub mod key;
#[cfg(feature = "link")]
pub mod link;
pub mod repair;
pub mod scrub;
pub mod transition;

/// One heartbeat, node → meta: `POST {meta}/v1/heartbeat` with
/// `{"node_id":u32,"endpoint":"http://ip:port","pid":u32,"disks":[DiskReport…]}` and, when the
/// node was given one, `"rack":u32` last (absent otherwise, so the old shape stays valid both
/// ways).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub node_id: u32,
    /// Base URL of the node's API, `http://ip:port`.
    pub endpoint: String,
    pub pid: u32,
    pub disks: Vec<DiskReport>,
    /// The rack the node sits in (`weft serve node --rack`); None: meta treats the node as
    /// its own rack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<u32>,
}

/// The state of one disk of a node, in heartbeats and in the node's `GET /v1/health`:
/// `{"index":u32,"dir":"…","units":u64,"bytes":u64,"failed":null|"cause"}` then, from nodes
/// that know capacity, `"free_bytes":u64,"total_bytes":u64` (absent when unknown) and
/// `"state":"ok"|"nearfull"|"full"`. The added fields come last and default when absent
/// (`state` to `ok`), so the old shape parses here and the new one in an old reader.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskReport {
    /// Index of the disk in the node's disk list.
    pub index: u32,
    /// The disk's directory.
    pub dir: String,
    /// Units stored (0 when failed).
    pub units: u64,
    /// Bytes their files take, headers included (0 when failed).
    pub bytes: u64,
    /// Why the disk refuses work, or `null` when it is healthy.
    pub failed: Option<String>,
    /// Bytes still writable on the disk's filesystem (statvfs); None: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// Size of the disk's filesystem; None: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes: Option<u64>,
    /// How full the disk is. A `full` disk is read-only: meta places nothing new on it, but it
    /// is not failed (its units are read and used as repair sources).
    #[serde(default)]
    pub state: DiskState,
    /// The disk's hardware model and its counters, from nodes run with one (`weft serve node
    /// --disk-model hdd|ssd`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<DiskModelStats>,
    /// The disk's RAIDP side, from nodes run with an Lstor for it (`weft serve node --lstor`);
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raidp: Option<RaidpReport>,
}

/// The header of a RAIDP slot write that carries the crc32c of its body, decimal: the body
/// is streamed unsigned, the header is in the signed head.
pub const RAIDP_CRC_HEADER: &str = "x-weft-crc32c";
/// Largest RAIDP slot write body, and slot or parity read range, one request carries.
pub const RAIDP_MAX_IO_BYTES: u64 = 8 << 20;

/// The RAIDP side of a disk ([`DiskReport::raidp`]): JSON `{"state":"ready"|"unformatted"|
/// "refused", "reason", "superchunk_bytes", "parities", "pending"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaidpReport {
    /// `ready` (Lstor open: takes RAIDP writes), `unformatted` (no Lstor and no slot yet: the
    /// first RAIDP write creates the Lstor) or `refused` (Lstor missing, corrupt or foreign
    /// while slots exist: no RAIDP write is taken; `reason` says why).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superchunk_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parities: Option<u32>,
    /// Journal records not cleared yet.
    #[serde(default)]
    pub pending: u64,
}

impl RaidpReport {
    /// Whether the disk can take RAIDP writes (now, or after its Lstor is created).
    pub fn usable(&self) -> bool {
        self.state == "ready" || self.state == "unformatted"
    }
}

/// What a disk's hardware model did since the node started ([`DiskReport::model`]): JSON
/// `{"model":"hdd 8ms 150MB/s","ios","seeks","bytes","busy_us","queue_wait_us"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskModelStats {
    /// The model and its parameters, e.g. `hdd 8ms 150MB/s`.
    pub model: String,
    /// IOs served (a unit read or write is one IO per chunk of at most 1 MiB).
    pub ios: u64,
    /// IOs that did not continue where the previous IO on the disk ended: each paid a
    /// positioning time.
    pub seeks: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Modeled time the disk was busy (positioning plus transfer), in microseconds.
    pub busy_us: u64,
    /// Time IOs waited in the disk's queue before it served them, summed, in microseconds.
    pub queue_wait_us: u64,
}

/// How full a disk is ([`DiskReport::state`]): JSON `"ok"`, `"nearfull"` or `"full"`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum DiskState {
    /// Below the node's nearfull ratio.
    #[default]
    Ok,
    /// At or above the nearfull ratio (default 85% used): still written, reported.
    Nearfull,
    /// At or above the full ratio (default 95% used), out of inodes, or a write hit
    /// ENOSPC/EDQUOT: read-only.
    Full,
}

impl DiskState {
    /// The JSON name: `ok`, `nearfull` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            DiskState::Ok => "ok",
            DiskState::Nearfull => "nearfull",
            DiskState::Full => "full",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_json_is_the_documented_shape() {
        let heartbeat = Heartbeat {
            node_id: 3,
            endpoint: "http://127.0.0.1:7801".into(),
            pid: 42,
            disks: vec![DiskReport {
                index: 0,
                dir: "/d0".into(),
                units: 5,
                bytes: 9,
                failed: None,
                free_bytes: Some(100),
                total_bytes: Some(1000),
                state: DiskState::Nearfull,
                model: None,
                raidp: None,
            }],
            rack: None,
        };
        let json = serde_json::to_string(&heartbeat).unwrap();
        assert_eq!(
            json,
            r#"{"node_id":3,"endpoint":"http://127.0.0.1:7801","pid":42,"disks":[{"index":0,"dir":"/d0","units":5,"bytes":9,"failed":null,"free_bytes":100,"total_bytes":1000,"state":"nearfull"}]}"#
        );
        assert_eq!(serde_json::from_str::<Heartbeat>(&json).unwrap(), heartbeat);

        // With a rack, the field comes last; without, the old shape parses with no rack.
        let racked = Heartbeat { rack: Some(2), ..heartbeat.clone() };
        let json = serde_json::to_string(&racked).unwrap();
        assert!(json.ends_with(r#""state":"nearfull"}],"rack":2}"#), "{json}");
        assert_eq!(serde_json::from_str::<Heartbeat>(&json).unwrap(), racked);
        let old = r#"{"node_id":3,"endpoint":"e","pid":1,"disks":[]}"#;
        assert_eq!(serde_json::from_str::<Heartbeat>(old).unwrap().rack, None);
    }

    #[test]
    fn disk_reports_without_capacity_parse_and_old_readers_parse_new_ones() {
        // A node from before capacity reporting: no sizes, state ok.
        let old = r#"{"index":1,"dir":"/d1","units":2,"bytes":3,"failed":"EIO"}"#;
        let report: DiskReport = serde_json::from_str(old).unwrap();
        assert_eq!(
            (report.free_bytes, report.total_bytes, report.state),
            (None, None, DiskState::Ok)
        );
        assert_eq!(report.failed.as_deref(), Some("EIO"));
        for (name, state) in
            [("ok", DiskState::Ok), ("nearfull", DiskState::Nearfull), ("full", DiskState::Full)]
        {
            assert_eq!(state.name(), name);
            assert_eq!(serde_json::to_value(state).unwrap(), name);
        }
        // A reader of the old shape (these five fields, unknown ones ignored) parses the new.
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct OldDiskReport {
            index: u32,
            dir: String,
            units: u64,
            bytes: u64,
            failed: Option<String>,
        }
        let new = DiskReport { state: DiskState::Full, free_bytes: Some(0), ..report };
        let parsed: OldDiskReport =
            serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!((parsed.index, parsed.units), (1, 2));
        assert!(
            serde_json::from_str::<DiskReport>(
                r#"{"index":0,"dir":"d","units":0,"bytes":0,"failed":null,"state":"bursting"}"#
            )
            .is_err(),
            "an unknown state is refused, not taken for ok"
        );
    }
}

/// Longest object key, in bytes (S3's limit).
pub const MAX_KEY_BYTES: usize = 1024;

/// Why an object key is refused, or None when it is valid. One rule for meta and clients:
/// non-empty, at most [`MAX_KEY_BYTES`], and no path segment that is exactly `.` or `..`
/// (HTTP clients and proxies collapse such segments, so the key would silently name
/// another object, or another route).
pub fn object_key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        return Some("empty");
    }
    if key.len() > MAX_KEY_BYTES {
        return Some("longer than 1024 bytes");
    }
    if key.split('/').any(|segment| segment == "." || segment == "..") {
        return Some(
            "has a `.` or `..` path segment (it would name another key after URL normalisation)",
        );
    }
    None
}

#[cfg(test)]
mod key_tests {
    use super::object_key_problem;

    #[test]
    fn dot_segments_are_refused_but_dots_inside_names_are_not() {
        for good in ["a", "a/b", ".hidden", "a..b", "x/.y/z", "...", "a b/c%2e", "a//b"] {
            assert_eq!(object_key_problem(good), None, "{good:?}");
        }
        for bad in ["", ".", "..", "a/..", "../a", "x/./y", "x/../y"] {
            assert!(object_key_problem(bad).is_some(), "{bad:?}");
        }
        assert!(object_key_problem(&"k".repeat(1025)).is_some());
        assert_eq!(object_key_problem(&"k".repeat(1024)), None);
    }
}
