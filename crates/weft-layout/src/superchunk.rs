//! The superchunk layout (RAIDP, §3.1 and §3.3 of the paper): every disk is cut into slots of
//! one size, and every *superchunk* is a slot index on two disks that hold the same bytes at
//! the same offset. A disk's Lstor keeps the parity of its slots, so when two disks fail the
//! one superchunk they shared is rebuilt from either disk's Lstor and the mirrors of that
//! disk's other superchunks.
//!
//! Invariants, checked by [`SuperchunkMap::verify`] and kept by every method that changes a
//! map (build, allocation, growth, failures, recoveries):
//! - **1-mirroring**: a healthy superchunk has exactly two replicas, on two disks of distinct
//!   failure domains (at the map's level), at the same slot index, which is below both disks'
//!   slot counts; a disk holds at most one superchunk per slot index.
//! - **1-sharing**: no two disks hold replicas of more than one superchunk in common, so two
//!   failed disks lose at most the one superchunk they shared. (A replica leaves a disk only
//!   when the disk fails; a disk put back in its place starts empty and pairs afresh.)
//! - A superchunk with one replica left is *at risk* (re-mirrored by a recovery plan); with none
//!   it is *lost* until rebuilt from an Lstor and placed on a new pair ([`SuperchunkMap::place_lost`]).
//!   A failed disk remembers what it held ([`SlotDisk::held_when_failed`]): its Lstor is the
//!   parity of exactly those slots, which [`SuperchunkMap::rebuild_sources`] needs. The caller
//!   keeps that parity true by diverting writes from a failed disk's superchunks until they
//!   are re-mirrored (paper §3.4).
//! - Everything is a pure function of the map and its arguments (the naive receiver choice
//!   takes a seed): no clock, no randomness, no IO.
//!
//! Recovery after one disk fails ([`SuperchunkMap::plan_recovery`]): each at-risk superchunk's
//! survivor (a *sender*; 1-sharing makes each sender send one) needs a *receiver*: an up disk in
//! another failure domain with that slot index free that shares nothing with the sender yet.
//! [`Receivers::Matching`] does it as the paper proposes: rounds of minimum-cost bipartite
//! matching (Hungarian method), costs = the receivers' superchunk counts, so no disk receives
//! twice in a round (every transfer of a round runs in parallel) and lightly loaded disks are
//! preferred; a pair of transfers that would make two disks share twice (A sends to B while B
//! sends to A) is broken up by forbidding one and solving again. [`Receivers::Naive`] picks,
//! for each superchunk in turn, a seeded random disk that keeps 1-sharing; transfers to one
//! receiver then queue one after another.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::placement::{DiskLocation, DomainId, FailureDomain};

/// Identifies a superchunk for its lifetime (never reused by a map).
pub type SuperchunkId = u64;

/// Most disks one superchunk map may hold (bounds every pairwise scan).
pub const MAX_SUPERCHUNK_DISKS: usize = 4096;

/// Most slots one disk may have (a 16 TiB disk cut into 256 MiB superchunks).
pub const MAX_SLOTS_PER_DISK: u32 = 1 << 16;

/// One superchunk: a slot index and the disks holding it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superchunk {
    pub id: SuperchunkId,
    pub slot: u32,
    /// Disks holding a replica now: two when healthy, one at risk, none lost.
    pub replicas: Vec<DiskLocation>,
}

impl Superchunk {
    pub fn state(&self) -> SuperchunkState {
        match self.replicas.len() {
            2 => SuperchunkState::Healthy,
            1 => SuperchunkState::AtRisk,
            _ => SuperchunkState::Lost,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuperchunkState {
    Healthy,
    AtRisk,
    Lost,
}

/// A disk of the map: where it is, how many slots it has, whether it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotDisk {
    pub location: DiskLocation,
    pub slots: u32,
    pub failed: bool,
    /// For a failed disk: the superchunks it held when it failed, by slot (what its Lstor's
    /// parity covers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_when_failed: Vec<(u32, SuperchunkId)>,
}

/// Why a superchunk map or a change to it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuperchunkError {
    /// The disk list is empty, too long, names a disk twice or gives a disk no slot.
    Disks { reason: String },
    /// The superchunk size is 0.
    SuperchunkBytes,
    /// No pair of disks can take another superchunk without breaking a rule.
    Full { placed: usize, requested: usize, reason: String },
    /// The disk is not in the map.
    UnknownDisk { disk: DiskLocation },
    /// The superchunk is not in the map.
    UnknownSuperchunk { id: SuperchunkId },
    /// A change would break 1-mirroring or 1-sharing (or the map already does).
    Rule { reason: String },
    /// A lost superchunk has no pair of disks to go to.
    NoPair { id: SuperchunkId, slot: u32 },
}

impl fmt::Display for SuperchunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuperchunkError::Disks { reason } => write!(f, "bad superchunk disks: {reason}"),
            SuperchunkError::SuperchunkBytes => f.write_str("the superchunk size must be positive"),
            SuperchunkError::Full { placed, requested, reason } => write!(
                f,
                "the disks can hold {placed} of the {requested} superchunks asked for: {reason} \
                 (add disks, give them more slots with a smaller --superchunk, or ask for fewer)"
            ),
            SuperchunkError::UnknownDisk { disk } => {
                write!(f, "no disk {}/{}/{} in the superchunk map", disk.rack, disk.node, disk.disk)
            }
            SuperchunkError::UnknownSuperchunk { id } => write!(f, "no superchunk {id}"),
            SuperchunkError::Rule { reason } => write!(f, "superchunk rule broken: {reason}"),
            SuperchunkError::NoPair { id, slot } => write!(
                f,
                "no two up disks in distinct failure domains have slot {slot} free and share \
                 nothing, so lost superchunk {id} cannot be placed"
            ),
        }
    }
}

impl std::error::Error for SuperchunkError {}

/// How a recovery chooses receivers (paper §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receivers {
    /// Rounds of minimum-cost matching: each disk receives at most once a round, lightly
    /// loaded disks first.
    Matching,
    /// For each superchunk in turn a random disk (from the seed) that keeps 1-sharing.
    Naive { seed: u64 },
}

/// One copy a recovery makes: the survivor's replica of `superchunk` to the same slot of `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub superchunk: SuperchunkId,
    pub slot: u32,
    pub from: DiskLocation,
    pub to: DiskLocation,
}

/// A recovery: rounds of transfers (within a round no disk sends or receives twice, so they
/// run in parallel), and the at-risk superchunks no receiver could take.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryPlan {
    pub rounds: Vec<Vec<Transfer>>,
    pub unplaced: Vec<SuperchunkId>,
}

impl RecoveryPlan {
    pub fn transfers(&self) -> impl Iterator<Item = &Transfer> {
        self.rounds.iter().flatten()
    }
}

/// What a disk failure did: superchunks left with one replica, and those left with none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureEffect {
    pub at_risk: Vec<SuperchunkId>,
    pub lost: Vec<SuperchunkId>,
}

/// The superchunk map of a set of disks. See the module header for its rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MapRecord", into = "MapRecord")]
pub struct SuperchunkMap {
    superchunk_bytes: u64,
    level: FailureDomain,
    disks: Vec<SlotDisk>,
    superchunks: BTreeMap<SuperchunkId, Superchunk>,
    next_id: SuperchunkId,
    /// Derived: pairs of disks (indices, smaller first) holding a superchunk in common now.
    shared: HashMap<(usize, usize), SuperchunkId>,
    /// Derived: per disk, slot → superchunk held there now.
    held: Vec<BTreeMap<u32, SuperchunkId>>,
}

/// The stored form of a map (the derived index is rebuilt, and every rule checked, on load).
#[derive(Serialize, Deserialize)]
struct MapRecord {
    superchunk_bytes: u64,
    level: FailureDomain,
    disks: Vec<SlotDisk>,
    superchunks: Vec<Superchunk>,
    next_id: SuperchunkId,
}

impl From<SuperchunkMap> for MapRecord {
    fn from(map: SuperchunkMap) -> MapRecord {
        MapRecord {
            superchunk_bytes: map.superchunk_bytes,
            level: map.level,
            disks: map.disks,
            superchunks: map.superchunks.into_values().collect(),
            next_id: map.next_id,
        }
    }
}

impl TryFrom<MapRecord> for SuperchunkMap {
    type Error = SuperchunkError;

    fn try_from(record: MapRecord) -> Result<SuperchunkMap, SuperchunkError> {
        let mut map = SuperchunkMap::empty(record.disks, record.superchunk_bytes, record.level)?;
        for superchunk in record.superchunks {
            if superchunk.id >= record.next_id {
                return Err(rule(format!("superchunk {} is not below next_id", superchunk.id)));
            }
            map.superchunks.insert(superchunk.id, superchunk);
        }
        map.next_id = record.next_id;
        map.reindex()?;
        map.verify()?;
        Ok(map)
    }
}

fn rule(reason: String) -> SuperchunkError {
    SuperchunkError::Rule { reason }
}

fn ordered(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

fn name(disk: &DiskLocation) -> String {
    format!("node {} disk {}", disk.node, disk.disk)
}

impl SuperchunkMap {
    fn empty(
        mut disks: Vec<SlotDisk>,
        superchunk_bytes: u64,
        level: FailureDomain,
    ) -> Result<SuperchunkMap, SuperchunkError> {
        if superchunk_bytes == 0 {
            return Err(SuperchunkError::SuperchunkBytes);
        }
        let bad = |reason: String| Err(SuperchunkError::Disks { reason });
        if disks.is_empty() {
            return bad("no disks".into());
        }
        if disks.len() > MAX_SUPERCHUNK_DISKS {
            return bad(format!("{} disks, at most {MAX_SUPERCHUNK_DISKS}", disks.len()));
        }
        disks.sort_by_key(|d| d.location);
        for pair in disks.windows(2) {
            if pair[0].location == pair[1].location {
                return bad(format!("{} is listed twice", name(&pair[0].location)));
            }
            if pair[0].location.node == pair[1].location.node
                && pair[0].location.rack != pair[1].location.rack
            {
                return bad(format!("node {} is in two racks", pair[0].location.node));
            }
        }
        if let Some(disk) = disks.iter().find(|d| d.slots == 0 || d.slots > MAX_SLOTS_PER_DISK) {
            return bad(format!(
                "{} has {} slots (1 to {MAX_SLOTS_PER_DISK})",
                name(&disk.location),
                disk.slots
            ));
        }
        let held = vec![BTreeMap::new(); disks.len()];
        Ok(SuperchunkMap {
            superchunk_bytes,
            level,
            disks,
            superchunks: BTreeMap::new(),
            next_id: 0,
            shared: HashMap::new(),
            held,
        })
    }

    /// A map over `disks` (location and slot count each; all up) with no superchunk yet.
    pub fn new(
        disks: &[(DiskLocation, u32)],
        superchunk_bytes: u64,
        level: FailureDomain,
    ) -> Result<SuperchunkMap, SuperchunkError> {
        let disks = disks
            .iter()
            .map(|&(location, slots)| SlotDisk {
                location,
                slots,
                failed: false,
                held_when_failed: Vec::new(),
            })
            .collect();
        SuperchunkMap::empty(disks, superchunk_bytes, level)
    }

    /// A map over `disks` holding `count` superchunks, spread evenly ([`Self::allocate`]
    /// each); refused, naming how many fit, when the disks cannot hold that many.
    pub fn build(
        disks: &[(DiskLocation, u32)],
        superchunk_bytes: u64,
        level: FailureDomain,
        count: usize,
    ) -> Result<SuperchunkMap, SuperchunkError> {
        let mut map = SuperchunkMap::new(disks, superchunk_bytes, level)?;
        for placed in 0..count {
            map.allocate().map_err(|e| match e {
                SuperchunkError::Full { reason, .. } => {
                    SuperchunkError::Full { placed, requested: count, reason }
                }
                other => other,
            })?;
        }
        Ok(map)
    }

    /// Rebuilds the derived index from the superchunks (checking slots are not held twice).
    fn reindex(&mut self) -> Result<(), SuperchunkError> {
        self.held = vec![BTreeMap::new(); self.disks.len()];
        self.shared = HashMap::new();
        let mut current = Vec::new();
        for superchunk in self.superchunks.values() {
            if superchunk.replicas.len() > 2 {
                return Err(rule(format!("superchunk {} has 3 replicas", superchunk.id)));
            }
            let mut indices = Vec::new();
            for disk in &superchunk.replicas {
                let index = self.index(disk)?;
                if self.held[index].insert(superchunk.slot, superchunk.id).is_some() {
                    return Err(rule(format!(
                        "slot {} of {} holds two superchunks",
                        superchunk.slot,
                        name(disk)
                    )));
                }
                indices.push(index);
            }
            if let [a, b] = indices[..] {
                current.push((ordered(a, b), superchunk.id));
            }
        }
        for (pair, id) in current {
            if let Some(other) = self.shared.insert(pair, id) {
                return Err(rule(format!(
                    "{} and {} share superchunks {other} and {id}",
                    name(&self.disks[pair.0].location),
                    name(&self.disks[pair.1].location)
                )));
            }
        }
        Ok(())
    }

    fn index_of(&self, disk: &DiskLocation) -> Option<usize> {
        self.disks.binary_search_by_key(disk, |d| d.location).ok()
    }

    fn index(&self, disk: &DiskLocation) -> Result<usize, SuperchunkError> {
        self.index_of(disk).ok_or(SuperchunkError::UnknownDisk { disk: *disk })
    }

    fn domain(&self, index: usize) -> DomainId {
        self.disks[index].location.domain(self.level)
    }

    fn up(&self, index: usize) -> bool {
        !self.disks[index].failed
    }

    /// Whether `slot` of disk `index` exists and holds nothing.
    fn slot_free(&self, index: usize, slot: u32) -> bool {
        slot < self.disks[index].slots && !self.held[index].contains_key(&slot)
    }

    fn load(&self, index: usize) -> usize {
        self.held[index].len()
    }

    /// Whether disks a and b may gain a superchunk in common: both up, distinct failure
    /// domains, and never shared one.
    fn may_pair(&self, a: usize, b: usize) -> bool {
        a != b
            && self.up(a)
            && self.up(b)
            && self.domain(a) != self.domain(b)
            && !self.shared.contains_key(&ordered(a, b))
    }

    pub fn superchunk_bytes(&self) -> u64 {
        self.superchunk_bytes
    }

    pub fn level(&self) -> FailureDomain {
        self.level
    }

    pub fn disks(&self) -> &[SlotDisk] {
        &self.disks
    }

    pub fn superchunks(&self) -> impl Iterator<Item = &Superchunk> {
        self.superchunks.values()
    }

    pub fn superchunk(&self, id: SuperchunkId) -> Option<&Superchunk> {
        self.superchunks.get(&id)
    }

    /// The superchunks `disk` holds now, by slot.
    pub fn superchunks_on(&self, disk: &DiskLocation) -> Vec<(u32, SuperchunkId)> {
        self.index_of(disk)
            .map(|i| self.held[i].iter().map(|(&slot, &id)| (slot, id)).collect())
            .unwrap_or_default()
    }

    /// The superchunk disks `a` and `b` hold in common now, if any.
    pub fn shared(&self, a: &DiskLocation, b: &DiskLocation) -> Option<SuperchunkId> {
        let (a, b) = (self.index_of(a)?, self.index_of(b)?);
        self.shared.get(&ordered(a, b)).copied()
    }

    /// How many disks hold something at each slot index.
    fn slot_use(&self) -> Vec<usize> {
        let most = self.disks.iter().map(|d| d.slots as usize).max().unwrap_or(0);
        let mut used = vec![0; most];
        for held in &self.held {
            held.keys().for_each(|&slot| used[slot as usize] += 1);
        }
        used
    }

    /// Adds a superchunk on the two least loaded disks that may pair, at the slot index free
    /// on both that the fewest disks use: slot indices fill evenly, so a recovery, which needs
    /// a receiver with the superchunk's own slot index free, finds one on many disks.
    pub fn allocate(&mut self) -> Result<SuperchunkId, SuperchunkError> {
        self.allocate_among(&|_| true)
    }

    /// [`SuperchunkMap::allocate`] on the disks `usable` accepts only (those reachable now:
    /// a superchunk is written as soon as it is allocated).
    pub fn allocate_among(
        &mut self,
        usable: &dyn Fn(&DiskLocation) -> bool,
    ) -> Result<SuperchunkId, SuperchunkError> {
        let slot_use = self.slot_use();
        let mut order: Vec<usize> = (0..self.disks.len())
            .filter(|&i| self.up(i) && usable(&self.disks[i].location))
            .collect();
        order.sort_by_key(|&i| (self.load(i), i));
        let mut best: Option<(usize, usize, usize, u32)> = None;
        for (position, &a) in order.iter().enumerate() {
            if self.load(a) >= self.disks[a].slots as usize {
                continue;
            }
            if best.is_some_and(|(load, ..)| self.load(a) * 2 > load) {
                break;
            }
            for &b in &order[position + 1..] {
                let load = self.load(a) + self.load(b);
                if best.is_some_and(|(best_load, ..)| load >= best_load) {
                    break;
                }
                if !self.may_pair(a, b) {
                    continue;
                }
                let slots = self.disks[a].slots.min(self.disks[b].slots);
                let free = (0..slots)
                    .filter(|&s| self.slot_free(a, s) && self.slot_free(b, s))
                    .min_by_key(|&s| (slot_use[s as usize], s));
                if let Some(slot) = free {
                    best = Some((load, a, b, slot));
                    break;
                }
            }
        }
        let Some((_, a, b, slot)) = best else {
            let up = order.len();
            return Err(SuperchunkError::Full {
                placed: self.superchunks.len(),
                requested: self.superchunks.len() + 1,
                reason: format!(
                    "no two of the {up} up disks in distinct failure domains share nothing yet \
                     and have a slot index free on both"
                ),
            });
        };
        let id = self.next_id;
        self.next_id += 1;
        let replicas = vec![self.disks[a].location, self.disks[b].location];
        self.superchunks.insert(id, Superchunk { id, slot, replicas });
        self.held[a].insert(slot, id);
        self.held[b].insert(slot, id);
        self.shared.insert(ordered(a, b), id);
        Ok(id)
    }

    /// Adds an empty disk: growth, or a replaced disk coming back empty where one failed.
    /// A replaced disk remembers which of its old superchunks are still at risk: a recovery
    /// plan sends those it cannot place elsewhere back to their old slots on it (its Lstor's
    /// parity then stays true as they arrive).
    pub fn add_disk(&mut self, location: DiskLocation, slots: u32) -> Result<(), SuperchunkError> {
        if let Some(index) = self.index_of(&location) {
            if !self.disks[index].failed {
                return Err(SuperchunkError::Disks {
                    reason: format!("{} is already in the map and up", name(&location)),
                });
            }
            if slots == 0 || slots > MAX_SLOTS_PER_DISK {
                return Err(SuperchunkError::Disks {
                    reason: format!("{} slots (1 to {MAX_SLOTS_PER_DISK})", slots),
                });
            }
            // The superchunks it held that are still at risk may come back to their old slots
            // (a recovery's returns): it keeps that list, and slots enough for it.
            let held = std::mem::take(&mut self.disks[index].held_when_failed);
            let still_needed: Vec<(u32, SuperchunkId)> = held
                .into_iter()
                .filter(|(_, id)| self.superchunks.get(id).is_some_and(|s| s.replicas.len() == 1))
                .collect();
            let slots = slots.max(still_needed.iter().map(|(s, _)| s + 1).max().unwrap_or(0));
            self.disks[index] =
                SlotDisk { location, slots, failed: false, held_when_failed: still_needed };
            return Ok(());
        }
        let mut disks = self.disks.clone();
        disks.push(SlotDisk { location, slots, failed: false, held_when_failed: Vec::new() });
        // Check the new list as a new map would, then remap the pair indices.
        let checked = SuperchunkMap::empty(disks, self.superchunk_bytes, self.level)?;
        let position = checked.index(&location)?;
        let shift = |i: usize| if i >= position { i + 1 } else { i };
        self.shared = self.shared.iter().map(|(&(a, b), &id)| ((shift(a), shift(b)), id)).collect();
        self.disks = checked.disks;
        self.held.insert(position, BTreeMap::new());
        Ok(())
    }

    /// Marks `disk` failed: its replicas are gone. Returns the superchunks left with one
    /// replica and those left with none (two failed disks lose at most their shared one).
    pub fn fail_disk(&mut self, disk: &DiskLocation) -> Result<FailureEffect, SuperchunkError> {
        let index = self.index(disk)?;
        if self.disks[index].failed {
            return Ok(FailureEffect::default());
        }
        self.disks[index].failed = true;
        let mut effect = FailureEffect::default();
        let held = std::mem::take(&mut self.held[index]);
        for &id in held.values() {
            let superchunk = self.superchunks.get_mut(&id).expect("index matches superchunks");
            superchunk.replicas.retain(|d| d != disk);
            match superchunk.replicas.first().copied() {
                Some(survivor) => {
                    let other = self.index_of(&survivor).expect("replicas are map disks");
                    self.shared.remove(&ordered(index, other));
                    effect.at_risk.push(id);
                }
                None => effect.lost.push(id),
            }
        }
        self.disks[index].held_when_failed = held.into_iter().collect();
        Ok(effect)
    }

    /// Superchunks with exactly one replica, on an up disk.
    pub fn at_risk(&self) -> Vec<SuperchunkId> {
        self.superchunks.values().filter(|s| s.replicas.len() == 1).map(|s| s.id).collect()
    }

    /// Superchunks with no replica (rebuilt from an Lstor, then [`Self::place_lost`]).
    pub fn lost(&self) -> Vec<SuperchunkId> {
        self.superchunks.values().filter(|s| s.replicas.is_empty()).map(|s| s.id).collect()
    }

    /// The receivers for every at-risk superchunk, in rounds (see the module header).
    pub fn plan_recovery(&self, receivers: Receivers) -> RecoveryPlan {
        let mut work = self.clone();
        let pending: Vec<SuperchunkId> = work.at_risk();
        match receivers {
            Receivers::Matching => work.plan_matching(pending),
            Receivers::Naive { seed } => work.plan_naive(pending, seed),
        }
    }

    /// Disks that may receive at-risk `id` from its survivor.
    fn receivers_for(&self, id: SuperchunkId) -> Vec<usize> {
        let superchunk = &self.superchunks[&id];
        let Some(sender) = superchunk.replicas.first().and_then(|d| self.index_of(d)) else {
            return Vec::new();
        };
        (0..self.disks.len())
            .filter(|&r| self.may_pair(sender, r) && self.slot_free(r, superchunk.slot))
            .collect()
    }

    /// Puts `transfer` (sender → receiver) in the first round where neither disk is busy.
    fn schedule(
        plan: &mut RecoveryPlan,
        busy: &mut Vec<HashSet<usize>>,
        sender: usize,
        receiver: usize,
        transfer: Transfer,
    ) {
        let round = busy
            .iter()
            .position(|disks| !disks.contains(&sender) && !disks.contains(&receiver))
            .unwrap_or(busy.len());
        if round == busy.len() {
            busy.push(HashSet::new());
        }
        if round == plan.rounds.len() {
            plan.rounds.push(Vec::new());
        }
        busy[round].extend([sender, receiver]);
        plan.rounds[round].push(transfer);
    }

    /// Sends each of `plan.unplaced` back to its old slot on the disk that held it, when that
    /// disk is up again (replaced) and may take it, in rounds after or between the others.
    fn plan_returns(&mut self, plan: &mut RecoveryPlan) {
        let mut busy: Vec<HashSet<usize>> = plan
            .rounds
            .iter()
            .map(|round| {
                round
                    .iter()
                    .flat_map(|t| [t.from, t.to])
                    .filter_map(|d| self.index_of(&d))
                    .collect()
            })
            .collect();
        let mut still = Vec::new();
        for id in std::mem::take(&mut plan.unplaced) {
            let slot = self.superchunks[&id].slot;
            let sender = self.sender(id);
            let home = (0..self.disks.len()).find(|&r| {
                self.up(r)
                    && self.disks[r].held_when_failed.contains(&(slot, id))
                    && self.may_pair(sender, r)
                    && self.slot_free(r, slot)
            });
            match home {
                Some(receiver) => {
                    let transfer = self.transfer_to(id, receiver);
                    self.apply(&transfer).expect("a checked return keeps the rules");
                    SuperchunkMap::schedule(plan, &mut busy, sender, receiver, transfer);
                }
                None => still.push(id),
            }
        }
        plan.unplaced = still;
    }

    fn plan_matching(&mut self, mut pending: Vec<SuperchunkId>) -> RecoveryPlan {
        let mut plan = RecoveryPlan::default();
        while !pending.is_empty() {
            // A disk sends one superchunk a round (after several failures one survivor may
            // hold several at-risk superchunks): the one with the fewest receivers goes first.
            let mut by_sender: BTreeMap<usize, (usize, SuperchunkId)> = BTreeMap::new();
            for &id in &pending {
                let options = self.receivers_for(id).len();
                let entry = by_sender.entry(self.sender(id)).or_insert((options, id));
                if options < entry.0 {
                    *entry = (options, id);
                }
            }
            let waiting: Vec<SuperchunkId> = pending
                .iter()
                .copied()
                .filter(|id| by_sender.values().all(|&(_, chosen)| chosen != *id))
                .collect();
            pending = by_sender.values().map(|&(_, id)| id).collect();
            let candidates: Vec<Vec<usize>> =
                pending.iter().map(|&id| self.receivers_for(id)).collect();
            let columns: Vec<usize> =
                candidates.iter().flatten().copied().collect::<BTreeSet<_>>().into_iter().collect();
            let mut forbidden: HashSet<(usize, usize)> = HashSet::new();
            let round = loop {
                let cost = |row: usize, column: usize| -> Option<i64> {
                    let receiver = columns[column];
                    (candidates[row].contains(&receiver) && !forbidden.contains(&(row, column)))
                        .then(|| self.load(receiver) as i64)
                };
                let assignment = min_cost_assignment(pending.len(), columns.len(), cost);
                let chosen: Vec<(usize, usize)> = assignment
                    .iter()
                    .enumerate()
                    .filter_map(|(row, column)| column.map(|c| (row, c)))
                    .collect();
                // Two transfers between the same two disks (A → B and B → A) would make
                // them share twice: forbid the second and solve again.
                let mut pairs: HashMap<(usize, usize), usize> = HashMap::new();
                let mut conflict = None;
                for &(row, column) in &chosen {
                    let sender = self.sender(pending[row]);
                    if let Some(&earlier) = pairs.get(&ordered(sender, columns[column])) {
                        conflict = Some((row, column, earlier));
                        break;
                    }
                    pairs.insert(ordered(sender, columns[column]), row);
                }
                match conflict {
                    Some((row, column, _)) => {
                        forbidden.insert((row, column));
                    }
                    None => break chosen,
                }
            };
            if round.is_empty() {
                plan.unplaced = pending.into_iter().chain(waiting).collect();
                plan.unplaced.sort_unstable();
                break;
            }
            let mut transfers = Vec::new();
            let mut done = HashSet::new();
            for (row, column) in round {
                let id = pending[row];
                let transfer = self.transfer_to(id, columns[column]);
                self.apply(&transfer).expect("a matched receiver keeps the rules");
                transfers.push(transfer);
                done.insert(id);
            }
            pending.retain(|id| !done.contains(id));
            pending.extend(waiting);
            plan.rounds.push(transfers);
        }
        self.plan_returns(&mut plan);
        plan
    }

    fn plan_naive(&mut self, pending: Vec<SuperchunkId>, seed: u64) -> RecoveryPlan {
        let mut plan = RecoveryPlan::default();
        let mut state = seed;
        // Per round, the disks sending or receiving in it.
        let mut busy: Vec<HashSet<usize>> = Vec::new();
        for id in pending {
            let candidates = self.receivers_for(id);
            if candidates.is_empty() {
                plan.unplaced.push(id);
                continue;
            }
            state = crate::placement::mix(state);
            let receiver = candidates[(state % candidates.len() as u64) as usize];
            let sender = self.sender(id);
            let transfer = self.transfer_to(id, receiver);
            self.apply(&transfer).expect("a checked receiver keeps the rules");
            // A disk sends or receives one transfer at a time.
            SuperchunkMap::schedule(&mut plan, &mut busy, sender, receiver, transfer);
        }
        self.plan_returns(&mut plan);
        plan
    }

    fn sender(&self, id: SuperchunkId) -> usize {
        let survivor = &self.superchunks[&id].replicas[0];
        self.index_of(survivor).expect("replicas are map disks")
    }

    fn transfer_to(&self, id: SuperchunkId, receiver: usize) -> Transfer {
        let superchunk = &self.superchunks[&id];
        Transfer {
            superchunk: id,
            slot: superchunk.slot,
            from: superchunk.replicas[0],
            to: self.disks[receiver].location,
        }
    }

    /// Records a finished transfer: `to` holds the superchunk now. Refused when it would
    /// break a rule (the map then is unchanged).
    pub fn apply(&mut self, transfer: &Transfer) -> Result<(), SuperchunkError> {
        let superchunk = self
            .superchunks
            .get(&transfer.superchunk)
            .ok_or(SuperchunkError::UnknownSuperchunk { id: transfer.superchunk })?;
        if superchunk.replicas != [transfer.from] || superchunk.slot != transfer.slot {
            return Err(rule(format!(
                "superchunk {} is not at risk on {} slot {}",
                transfer.superchunk,
                name(&transfer.from),
                transfer.slot
            )));
        }
        let (from, to) = (self.index(&transfer.from)?, self.index(&transfer.to)?);
        if !self.may_pair(from, to) || !self.slot_free(to, transfer.slot) {
            return Err(rule(format!(
                "{} cannot take superchunk {} from {} (slot {} taken, same failure domain, \
                 down, or the two disks shared a superchunk already)",
                name(&transfer.to),
                transfer.superchunk,
                name(&transfer.from),
                transfer.slot
            )));
        }
        let superchunk = self.superchunks.get_mut(&transfer.superchunk).expect("looked up");
        superchunk.replicas.push(transfer.to);
        self.held[to].insert(transfer.slot, transfer.superchunk);
        let mirrored = (transfer.slot, transfer.superchunk);
        for disk in self.disks.iter_mut().filter(|d| !d.failed) {
            disk.held_when_failed.retain(|held| *held != mirrored);
        }
        self.shared.insert(ordered(from, to), transfer.superchunk);
        Ok(())
    }

    /// Two up disks to hold lost superchunk `id` again (rebuilt from an Lstor), at its slot:
    /// the least loaded pair that keeps both rules.
    pub fn place_lost(
        &self,
        id: SuperchunkId,
    ) -> Result<(DiskLocation, DiskLocation), SuperchunkError> {
        let superchunk =
            self.superchunks.get(&id).ok_or(SuperchunkError::UnknownSuperchunk { id })?;
        if !superchunk.replicas.is_empty() {
            return Err(rule(format!("superchunk {id} is not lost")));
        }
        let slot = superchunk.slot;
        let mut order: Vec<usize> =
            (0..self.disks.len()).filter(|&i| self.up(i) && self.slot_free(i, slot)).collect();
        order.sort_by_key(|&i| (self.load(i), i));
        let mut best: Option<(usize, usize, usize)> = None;
        for (position, &a) in order.iter().enumerate() {
            for &b in &order[position + 1..] {
                let load = self.load(a) + self.load(b);
                if best.is_some_and(|(l, ..)| load >= l) {
                    break;
                }
                if self.may_pair(a, b) {
                    best = Some((load, a, b));
                    break;
                }
            }
        }
        best.map(|(_, a, b)| (self.disks[a].location, self.disks[b].location))
            .ok_or(SuperchunkError::NoPair { id, slot })
    }

    /// Records lost superchunk `id` rebuilt onto `pair` (as [`Self::place_lost`] chose).
    pub fn restore_lost(
        &mut self,
        id: SuperchunkId,
        pair: (DiskLocation, DiskLocation),
    ) -> Result<(), SuperchunkError> {
        let superchunk =
            self.superchunks.get(&id).ok_or(SuperchunkError::UnknownSuperchunk { id })?;
        let slot = superchunk.slot;
        let (a, b) = (self.index(&pair.0)?, self.index(&pair.1)?);
        if !superchunk.replicas.is_empty()
            || !self.may_pair(a, b)
            || !self.slot_free(a, slot)
            || !self.slot_free(b, slot)
        {
            return Err(rule(format!(
                "superchunk {id} cannot be restored on {} and {}",
                name(&pair.0),
                name(&pair.1)
            )));
        }
        self.superchunks.get_mut(&id).expect("looked up").replicas = vec![pair.0, pair.1];
        self.held[a].insert(slot, id);
        self.held[b].insert(slot, id);
        self.shared.insert(ordered(a, b), id);
        Ok(())
    }

    /// For lost superchunk `id`, rebuilt through failed disk `via`'s Lstor (the parity of
    /// the slots `via` held when it failed): the other superchunks `via` held, by slot, and an
    /// up disk holding each now. None when `via` did not hold `id` or one of the others has
    /// no up replica (then `via`'s Lstor cannot rebuild it; try the other disk's).
    pub fn rebuild_sources(
        &self,
        id: SuperchunkId,
        via: &DiskLocation,
    ) -> Option<Vec<(u32, SuperchunkId, DiskLocation)>> {
        let disk = &self.disks[self.index_of(via)?];
        if !disk.held_when_failed.iter().any(|&(_, held)| held == id) {
            return None;
        }
        disk.held_when_failed
            .iter()
            .filter(|&&(_, other)| other != id)
            .map(|&(slot, other)| {
                let superchunk = self.superchunks.get(&other)?;
                let source = superchunk
                    .replicas
                    .iter()
                    .find(|d| *d != via && self.index_of(d).is_some_and(|i| self.up(i)))?;
                Some((slot, other, *source))
            })
            .collect()
    }

    /// For failed disk `via`: the lost superchunks it held (slot, id) and, for every other
    /// superchunk it held, an up disk holding it now (slot, id, disk). With one XOR parity a
    /// rebuild through `via` needs exactly one lost; with a second (P+Q) parity, up to two.
    /// None when `via` is not a failed disk or one of its other superchunks has no up replica.
    #[allow(clippy::type_complexity)]
    pub fn rebuild_plan(
        &self,
        via: &DiskLocation,
    ) -> Option<(Vec<(u32, SuperchunkId)>, Vec<(u32, SuperchunkId, DiskLocation)>)> {
        let disk = &self.disks[self.index_of(via)?];
        if !disk.failed {
            return None;
        }
        let mut lost = Vec::new();
        let mut sources = Vec::new();
        for &(slot, id) in &disk.held_when_failed {
            let superchunk = self.superchunks.get(&id)?;
            if superchunk.replicas.is_empty() {
                lost.push((slot, id));
                continue;
            }
            let source = superchunk
                .replicas
                .iter()
                .find(|d| *d != via && self.index_of(d).is_some_and(|i| self.up(i)))?;
            sources.push((slot, id, *source));
        }
        Some((lost, sources))
    }

    /// Checks every rule of the module header from the superchunks alone (independently of
    /// the derived index).
    pub fn verify(&self) -> Result<(), SuperchunkError> {
        let mut slots: HashSet<(DiskLocation, u32)> = HashSet::new();
        let mut pairs: HashMap<(DiskLocation, DiskLocation), SuperchunkId> = HashMap::new();
        for superchunk in self.superchunks.values() {
            let id = superchunk.id;
            if superchunk.replicas.len() > 2 {
                return Err(rule(format!("superchunk {id} has more than two replicas")));
            }
            for disk in &superchunk.replicas {
                let index = self.index(disk)?;
                if self.disks[index].failed {
                    return Err(rule(format!("superchunk {id} is held by failed {}", name(disk))));
                }
                if superchunk.slot >= self.disks[index].slots {
                    return Err(rule(format!(
                        "superchunk {id} is at slot {} of {}, which has {} slots",
                        superchunk.slot,
                        name(disk),
                        self.disks[index].slots
                    )));
                }
                if !slots.insert((*disk, superchunk.slot)) {
                    return Err(rule(format!(
                        "slot {} of {} holds two superchunks",
                        superchunk.slot,
                        name(disk)
                    )));
                }
            }
            if let [a, b] = superchunk.replicas[..] {
                if a.domain(self.level) == b.domain(self.level) {
                    return Err(rule(format!(
                        "superchunk {id}'s replicas share a failure domain ({} and {})",
                        name(&a),
                        name(&b)
                    )));
                }
                if let Some(other) = pairs.insert((a.min(b), a.max(b)), id) {
                    return Err(rule(format!(
                        "{} and {} share superchunks {other} and {id}",
                        name(&a),
                        name(&b)
                    )));
                }
            }
        }
        // The derived index of pairs must be exactly the pairs held now.
        if pairs.len() != self.shared.len() {
            return Err(rule(format!(
                "{} pairs of disks share a superchunk, the index lists {}",
                pairs.len(),
                self.shared.len()
            )));
        }
        for ((a, b), id) in &pairs {
            let remembered = self.shared.get(&ordered(self.index(a)?, self.index(b)?));
            if remembered != Some(id) {
                return Err(rule(format!(
                    "{} and {} share superchunk {id}, but the index says {remembered:?}",
                    name(a),
                    name(b)
                )));
            }
        }
        Ok(())
    }
}

/// Minimum-cost assignment of `rows` to distinct `columns` (Hungarian method with
/// potentials, O(n³) in n = max(rows, columns)). `cost(row, column)` is None where the pair is
/// not allowed. Assigns as many rows as can be assigned, and among those assignments the one of
/// least total cost; the result gives each row its column, or None.
pub fn min_cost_assignment(
    rows: usize,
    columns: usize,
    cost: impl Fn(usize, usize) -> Option<i64>,
) -> Vec<Option<usize>> {
    let n = rows.max(columns);
    if rows == 0 || columns == 0 {
        return vec![None; rows];
    }
    // A forbidden pair costs more than any assignment of allowed ones, so fewer forbidden
    // pairs always wins; padding rows and columns cost nothing.
    let mut largest = 0i64;
    let mut table = vec![vec![None; n]; n];
    for (row, line) in table.iter_mut().enumerate().take(rows) {
        for (column, entry) in line.iter_mut().enumerate().take(columns) {
            *entry = cost(row, column);
            if let Some(c) = *entry {
                largest = largest.max(c);
            }
        }
    }
    let forbidden = (largest + 1).saturating_mul(n as i64 + 1);
    let at = |row: usize, column: usize| -> i64 {
        if row >= rows || column >= columns {
            0
        } else {
            table[row][column].unwrap_or(forbidden)
        }
    };
    // 1-based arrays as in the classic formulation: p[j] is the row matched to column j.
    let inf = i64::MAX / 4;
    let (mut u, mut v) = (vec![0i64; n + 1], vec![0i64; n + 1]);
    let (mut p, mut way) = (vec![0usize; n + 1], vec![0usize; n + 1]);
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0;
        let mut minv = vec![inf; n + 1];
        let mut used = vec![false; n + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = inf;
            let mut j1 = 0;
            for j in 1..=n {
                if used[j] {
                    continue;
                }
                let current = at(i0 - 1, j - 1) - u[i0] - v[j];
                if current < minv[j] {
                    minv[j] = current;
                    way[j] = j0;
                }
                if minv[j] < delta {
                    delta = minv[j];
                    j1 = j;
                }
            }
            for j in 0..=n {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut assignment = vec![None; rows];
    for (column, &matched) in p.iter().enumerate().skip(1).map(|(j, m)| (j - 1, m)) {
        let row = matched - 1;
        if row < rows && column < columns && table[row][column].is_some() {
            assignment[row] = Some(column);
        }
    }
    assignment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assignment_is_the_cheapest_of_the_largest() {
        // Row 0 may take only column 0; row 1 prefers column 0 but must yield it.
        let costs = [[Some(5), None, None], [Some(1), Some(9), None]];
        let assignment = min_cost_assignment(2, 3, |r, c| costs[r][c]);
        assert_eq!(assignment, [Some(0), Some(1)]);
        // Square, classic: the optimum is the anti-diagonal-ish choice of cost 1 + 2 + 2.
        let costs = [[4, 1, 3], [2, 0, 5], [3, 2, 2]];
        let assignment = min_cost_assignment(3, 3, |r, c| Some(costs[r][c]));
        let total: i64 = assignment.iter().enumerate().map(|(r, c)| costs[r][c.unwrap()]).sum();
        assert_eq!(total, 5);
        // More rows than columns: one row stays unassigned.
        let assignment = min_cost_assignment(3, 2, |_, c| Some(c as i64));
        assert_eq!(assignment.iter().filter(|a| a.is_some()).count(), 2);
        assert_eq!(min_cost_assignment(2, 0, |_, _| Some(0)), [None, None]);
    }
}
