//! An object as meta describes it (docs/meta-api.md, "Object response"), parsed once into
//! typed form: its layout, size, generation and where each stored unit lives.
//!
//! Invariants: an [`ObjectInfo`] lists every stored unit of its layout exactly once (checked
//! at parse time), so looking a unit up can only fail for virtual units (data blocks past the
//! object's end), which are zeros by definition.

use std::collections::BTreeMap;

use serde::Deserialize;
use weft_layout::{StripedLayout, UnitId};

use crate::{ClientError, Result};

/// One stored unit of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitInfo {
    pub unit: UnitId,
    pub node_id: u32,
    /// The node's endpoint at the time meta answered (None if meta knows no such node).
    pub endpoint: Option<String>,
    pub disk: u32,
    /// The unit's key on its disk (the node API's `{unit}` path segment).
    pub unit_key: String,
    /// Stored length in bytes.
    pub len: u64,
    /// "up" / "down" when meta said (GET), None otherwise (begin, commit).
    pub state: Option<String>,
    /// The writer's digest of the unit's bytes, when the object has digests (end-to-end
    /// checksums: [`crate::digest`]).
    pub digest: Option<weft_wire::UnitDigest>,
}

impl UnitInfo {
    /// True when meta reported the unit's node down.
    pub fn is_down(&self) -> bool {
        self.state.as_deref() == Some("down") || self.endpoint.is_none()
    }

    /// The URL of this unit on its node.
    pub fn url(&self) -> Option<String> {
        let endpoint = self.endpoint.as_deref()?;
        Some(format!(
            "{}/v1/disks/{}/units/{}",
            endpoint.trim_end_matches('/'),
            self.disk,
            self.unit_key
        ))
    }
}

/// An object: layout, size, generation and its stored units.
#[derive(Debug, Clone)]
pub struct ObjectInfo {
    pub bucket: String,
    pub key: String,
    pub generation: u64,
    pub object_id: String,
    pub state: String,
    pub layout: StripedLayout,
    pub size: u64,
    pub units: BTreeMap<UnitId, UnitInfo>,
    /// The JSON meta sent, for `--json` output.
    pub raw: serde_json::Value,
}

#[derive(Deserialize)]
struct RawUnit {
    unit: String,
    node_id: u32,
    endpoint: Option<String>,
    disk: u32,
    unit_key: String,
    len: u64,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    digest: Option<weft_wire::UnitDigest>,
}

impl RawUnit {
    fn into_info(self) -> Result<UnitInfo, String> {
        let unit = UnitId::parse_short_name(&self.unit)
            .ok_or_else(|| format!("unit name {:?}", self.unit))?;
        Ok(UnitInfo {
            unit,
            node_id: self.node_id,
            endpoint: self.endpoint,
            disk: self.disk,
            unit_key: self.unit_key,
            len: self.len,
            state: self.state,
            digest: self.digest,
        })
    }
}

impl UnitInfo {
    /// Parses one entry of a unit list as meta sends it (`{"unit","node_id","endpoint",
    /// "disk","unit_key","len"}`, optional `"state"` and `"digest"`).
    pub fn from_json(value: &serde_json::Value) -> Result<UnitInfo> {
        let bad = |reason: String| ClientError::Invalid(format!("meta sent a bad unit: {reason}"));
        let raw: RawUnit = serde_json::from_value(value.clone()).map_err(|e| bad(e.to_string()))?;
        raw.into_info().map_err(bad)
    }
}

#[derive(Deserialize)]
struct RawObject {
    bucket: String,
    key: String,
    generation: u64,
    object_id: String,
    state: String,
    layout: StripedLayout,
    size: u64,
    units: Vec<RawUnit>,
}

impl ObjectInfo {
    /// Parses meta's object response and checks it lists exactly the layout's stored units.
    pub fn from_json(value: serde_json::Value) -> Result<ObjectInfo> {
        let bad =
            |reason: String| ClientError::Invalid(format!("meta sent a bad object: {reason}"));
        let raw: RawObject =
            serde_json::from_value(value.clone()).map_err(|e| bad(e.to_string()))?;
        raw.layout.validate().map_err(|e| bad(e.to_string()))?;
        let mut units = BTreeMap::new();
        for unit in raw.units {
            let info = unit.into_info().map_err(bad)?;
            let id = info.unit;
            if units.insert(id, info).is_some() {
                return Err(bad(format!("unit {} listed twice", id.short_name())));
            }
        }
        let layout = raw.layout;
        let expected: usize =
            (0..layout.groups(raw.size)).map(|g| layout.group_units(raw.size, g).len()).sum();
        if expected != units.len() {
            return Err(bad(format!("{} units listed, the layout has {expected}", units.len())));
        }
        for (id, info) in &units {
            let (group, _) = layout.unit_position(*id);
            if group >= layout.groups(raw.size) || info.len != layout.stored_len(raw.size, *id) {
                return Err(bad(format!("unit {} does not fit the layout", id.short_name())));
            }
        }
        Ok(ObjectInfo {
            bucket: raw.bucket,
            key: raw.key,
            generation: raw.generation,
            object_id: raw.object_id,
            state: raw.state,
            layout,
            size: raw.size,
            units,
            raw: value,
        })
    }

    /// The stored unit `unit`, or None for a virtual data unit (all zeros, never stored).
    pub fn unit(&self, unit: UnitId) -> Option<&UnitInfo> {
        self.units.get(&unit)
    }

    /// Unit length of group g (parity length; data blocks are zero-padded to it for coding).
    pub fn unit_len(&self, group: usize) -> u64 {
        self.layout.unit_len(self.size, group)
    }
}
