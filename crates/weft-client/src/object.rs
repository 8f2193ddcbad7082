//! An object as meta describes it (docs/meta-api.md, "Object response"), parsed once into
//! typed form: its layout, size, generation and where each stored unit lives.
//!
//! Invariants: an [`ObjectInfo`] lists every stored unit of its layout exactly once (checked
//! at parse time), so looking a unit up can only fail for virtual units (data blocks past the
//! object's end), which are zeros by definition. Meta lists at most a page of units; the
//! units of a larger object are named from the placement pattern meta sends with the page
//! (their digests come by pages: [`ObjectInfo::add_digests`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use weft_layout::{Placement, StripedLayout, UnitId};
use weft_wire::key::UnitKey;

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
    /// Where the next page of digests meta has but did not list starts (see
    /// [`ObjectInfo::add_digests`]); None when every digest is in.
    digests_next: Option<usize>,
    /// The JSON meta sent, for `--json` output.
    pub raw: serde_json::Value,
    /// A RAIDP object's extents (it has no units then); None for a striped object.
    pub raidp: Option<RaidpInfo>,
    /// A packed object (geometric layout): it has no units of its own; its bytes are data
    /// blocks of its bucket's bin stripes.
    pub packed: bool,
    /// Where a packed object's bytes are, when meta's reply says (GET); None otherwise.
    pub geometric: Option<GeoInfo>,
}

/// A piece of a packed object: `bytes` bytes from `offset` of data block `block` of the bin
/// stripe `stripe` (a key of [`GeoInfo::stripes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeoPiece {
    pub stripe: String,
    pub block: usize,
    pub offset: u64,
    pub bytes: u64,
    /// The chunk's bin (class), None for the front (small bin).
    pub bin: Option<usize>,
}

/// Where a packed object's bytes are (meta's `front_bytes`, `chunks` and `geometric`).
#[derive(Debug, Clone)]
pub struct GeoInfo {
    pub pg: u32,
    pub member: u32,
    /// crc32c of the whole object, as the packer read it.
    pub crc32c: u32,
    /// The object's pieces in object order: its front (if any), then its chunks.
    pub pieces: Vec<GeoPiece>,
    /// The bin stripes the pieces are in, by key: objects of meta's internal bucket.
    pub stripes: BTreeMap<String, ObjectInfo>,
}

#[derive(Deserialize)]
struct RawChunk {
    bin: usize,
    bytes: u64,
    stripe: String,
    block: usize,
}

#[derive(Deserialize)]
struct RawFront {
    stripe: String,
    block: usize,
    offset: u64,
    bytes: u64,
}

#[derive(Deserialize)]
struct RawGeo {
    pg: u32,
    member: u32,
    crc32c: u32,
    #[serde(default)]
    front: Option<RawFront>,
    stripes: BTreeMap<String, serde_json::Value>,
}

impl GeoInfo {
    /// Parses the geometric fields of a GET reply; checks the pieces add up to `size` and
    /// name stripes the reply holds, each piece inside its block.
    fn from_json(value: &serde_json::Value, size: u64) -> Result<GeoInfo, String> {
        let raw: RawGeo =
            serde_json::from_value(value["geometric"].clone()).map_err(|e| e.to_string())?;
        let chunks: Vec<RawChunk> =
            serde_json::from_value(value["chunks"].clone()).map_err(|e| e.to_string())?;
        let mut stripes = BTreeMap::new();
        for (key, stripe) in raw.stripes {
            let info = ObjectInfo::from_json(stripe).map_err(|e| format!("stripe {key}: {e}"))?;
            stripes.insert(key, info);
        }
        let mut pieces = Vec::new();
        if let Some(front) = raw.front {
            pieces.push(GeoPiece {
                stripe: front.stripe,
                block: front.block,
                offset: front.offset,
                bytes: front.bytes,
                bin: None,
            });
        }
        pieces.extend(chunks.into_iter().map(|c| GeoPiece {
            stripe: c.stripe,
            block: c.block,
            offset: 0,
            bytes: c.bytes,
            bin: Some(c.bin),
        }));
        let total: u64 = pieces.iter().map(|p| p.bytes).sum();
        if total != size {
            return Err(format!("its pieces hold {total} bytes, its size is {size}"));
        }
        for piece in &pieces {
            let stripe = stripes
                .get(&piece.stripe)
                .ok_or_else(|| format!("stripe {} is not in the reply", piece.stripe))?;
            let fits = piece.block < stripe.layout.data_blocks(stripe.size)
                && piece.offset + piece.bytes <= stripe.layout.block_len(stripe.size, piece.block);
            if !fits {
                return Err(format!(
                    "{} bytes at {} of block {} of stripe {} do not fit it",
                    piece.bytes, piece.offset, piece.block, piece.stripe
                ));
            }
        }
        Ok(GeoInfo { pg: raw.pg, member: raw.member, crc32c: raw.crc32c, pieces, stripes })
    }
}

/// Where a RAIDP object's bytes are (meta's `raidp` field): runs of superchunks, each on two
/// replicas at the same slot index and offset.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RaidpInfo {
    /// 0 when meta's reply did not name the map (commit, delete): only the extents' own
    /// fields are known then.
    #[serde(default)]
    pub superchunk_bytes: u64,
    #[serde(default)]
    pub lstors: usize,
    pub extents: Vec<RaidpExtentInfo>,
}

/// One run of a RAIDP object's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RaidpExtentInfo {
    pub superchunk: u64,
    #[serde(default)]
    pub slot: u32,
    pub offset: u64,
    pub bytes: u64,
    #[serde(default)]
    pub replicas: Vec<ReplicaInfo>,
}

/// A replica of a superchunk: its node and disk, and how it stands.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReplicaInfo {
    pub node: u32,
    pub disk: u32,
    pub endpoint: Option<String>,
    /// `up`, `down` (its node), `failed` (the disk) or `refused` (its Lstor).
    pub state: String,
}

impl ReplicaInfo {
    /// Whether the replica is worth asking (meta did not call it down, failed or refused).
    pub fn is_up(&self) -> bool {
        self.state == "up" && self.endpoint.is_some()
    }
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
    #[serde(default)]
    parity_generation: u64,
    object_id: String,
    state: String,
    layout: StripedLayout,
    size: u64,
    units: Vec<RawUnit>,
    /// Present when `units` leaves units out (a large object): its placement pattern, the
    /// nodes it uses and whether its units have digests.
    #[serde(default)]
    placement: Option<Placement>,
    #[serde(default)]
    nodes: BTreeMap<u32, RawNode>,
    #[serde(default)]
    digests: bool,
    #[serde(default)]
    units_next: Option<usize>,
    #[serde(default)]
    raidp: Option<RaidpInfo>,
    #[serde(default)]
    packed: bool,
}

#[derive(Deserialize)]
struct RawNode {
    endpoint: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

/// The key of `unit` of the object of id `object` whose parities have unit generation
/// `parity_generation` (meta's rule, docs/meta-api.md "Unit keys").
fn unit_key(object: u128, unit: UnitId, parity_generation: u64) -> Result<UnitKey, String> {
    let too_big = |what: &str| format!("{what} of unit {} out of range", unit.short_name());
    Ok(match unit {
        UnitId::Data(x) => UnitKey::data(object, x.try_into().map_err(|_| too_big("block"))?, 0),
        UnitId::Parity { group, index } => UnitKey::parity(
            object,
            group.try_into().map_err(|_| too_big("group"))?,
            index.try_into().map_err(|_| too_big("index"))?,
            parity_generation,
        ),
    })
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
        // A RAIDP object has no units: its bytes are in superchunks.
        let unit_bytes = if raw.raidp.is_some() || raw.packed { 0 } else { raw.size };
        let expected: usize =
            (0..layout.groups(unit_bytes)).map(|g| layout.group_units(unit_bytes, g).len()).sum();
        if let Some(raidp) = &raw.raidp {
            let listed: u64 = raidp.extents.iter().map(|e| e.bytes).sum();
            if listed != raw.size {
                return Err(bad(format!(
                    "its extents hold {listed} bytes, its size is {}",
                    raw.size
                )));
            }
            // Superchunk size 0: the reply did not name the map (commit, delete).
            let past = |e: &&RaidpExtentInfo| {
                raidp.superchunk_bytes > 0
                    && e.offset.saturating_add(e.bytes) > raidp.superchunk_bytes
            };
            if let Some(e) = raidp.extents.iter().find(past) {
                return Err(bad(format!(
                    "{} bytes at {} of superchunk {} run past its {} bytes",
                    e.bytes, e.offset, e.superchunk, raidp.superchunk_bytes
                )));
            }
        }
        // A large object: the units not listed are named from its placement.
        let mut digests_next = None;
        if let Some(placement) = raw.placement.filter(|_| units.len() < expected) {
            if (*placement.layout(), placement.object_size()) != (layout, raw.size) {
                return Err(bad("its placement is of another layout or size".into()));
            }
            let object = u128::from_str_radix(&raw.object_id, 16)
                .map_err(|e| bad(format!("object id {:?}: {e}", raw.object_id)))?;
            for (unit, disk) in placement.units() {
                if units.contains_key(&unit) {
                    continue;
                }
                let node = raw.nodes.get(&disk.node);
                let key = unit_key(object, unit, raw.parity_generation).map_err(bad)?;
                let info = UnitInfo {
                    unit,
                    node_id: disk.node,
                    endpoint: node.and_then(|n| n.endpoint.clone()),
                    disk: disk.disk,
                    unit_key: key.to_string(),
                    len: layout.stored_len(raw.size, unit),
                    state: node.and_then(|n| n.state.clone()),
                    digest: None,
                };
                units.insert(unit, info);
            }
            digests_next = raw.units_next.filter(|_| raw.digests);
        }
        if expected != units.len() {
            return Err(bad(format!("{} units listed, the layout has {expected}", units.len())));
        }
        for (id, info) in &units {
            let (group, _) = layout.unit_position(*id);
            if group >= layout.groups(unit_bytes) || info.len != layout.stored_len(unit_bytes, *id)
            {
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
            digests_next,
            geometric: match value.get("geometric") {
                Some(_) if raw.packed => Some(GeoInfo::from_json(&value, raw.size).map_err(bad)?),
                _ => None,
            },
            raw: value,
            raidp: raw.raidp,
            packed: raw.packed,
        })
    }

    /// Whether meta has digests of units this object's reply did not list (a large object):
    /// [`ObjectInfo::add_digests`] takes them from pages of `GET ...?units_from=N`.
    pub fn digests_pending(&self) -> bool {
        self.digests_next.is_some()
    }

    /// Index (in meta's order: data blocks, then parities by group) of the first unit whose
    /// digest is still to fetch, or None when none is.
    pub fn next_digest_page(&self) -> Option<usize> {
        self.digests_next
    }

    /// Takes the digests of the page of meta's unit list that starts at
    /// [`ObjectInfo::next_digest_page`] (`GET ...?units_from=N`); refuses a page of another
    /// object, another start, or one that adds nothing.
    pub fn add_digests(&mut self, page: &serde_json::Value) -> Result<()> {
        let bad = |reason: String| ClientError::Invalid(format!("meta sent a bad page: {reason}"));
        if page["generation"] != self.generation {
            return Err(bad("of another generation".into()));
        }
        let from = page["units_from"].as_u64().and_then(|f| usize::try_from(f).ok());
        if from.is_none() || from != self.digests_next {
            return Err(bad(format!(
                "starts at {}, not {:?}",
                page["units_from"], self.digests_next
            )));
        }
        let units = page["units"].as_array().ok_or_else(|| bad("no units".into()))?;
        if units.is_empty() {
            return Err(bad("no new digest".into()));
        }
        for value in units {
            let listed = UnitInfo::from_json(value)?;
            let known = self.units.get_mut(&listed.unit);
            let known = known.ok_or_else(|| bad(format!("unit {}", listed.unit.short_name())))?;
            if known.unit_key != listed.unit_key || listed.digest.is_none() {
                return Err(bad(format!("unit {} differs", listed.unit.short_name())));
            }
            known.digest = listed.digest;
        }
        self.digests_next = page["units_next"].as_u64().and_then(|n| usize::try_from(n).ok());
        Ok(())
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
