//! Placement: which disk holds each unit of an object in the striped layout.
//!
//! Rules, at the chosen failure-domain level (disk, node or rack; default node):
//! - (a) the data blocks of one stripe are on distinct failure domains;
//! - (b) the n units (stored data blocks and r parity blocks) of one group are on distinct
//!   failure domains;
//! - (c) group g + 1 uses no failure domain that group g uses, guaranteed whenever the topology
//!   has at least [`min_domains_for_disjoint_groups`] = max(2n, n + W − k) domains and attempted
//!   (best effort, never at the cost of (a) or (b)) below that; a later regroup can then merge or
//!   split groups without moving blocks;
//! - (d) load is spread: domains are taken in a rotating order whose start depends on the seed,
//!   interleaved across racks (and nodes) so neighbouring units land in different racks.
//!
//! [`place`] keeps (a) and (b) for every topology with at least max(n, W) domains and refuses
//! smaller ones. Its result depends only on (layout, object size, topology, seed, level): the
//! order of disks in the topology does not matter, and nothing random or clock-driven is used.
//!
//! Why the greedy below never gets stuck: units are placed in order (group by group, data
//! blocks by index, then parities). When data block x is placed, the already-placed units it
//! must differ from are exactly the blocks `[min(stripe start, group start), x)` — fewer than
//! max(W, k) — and a parity block must differ from at most n − 1 units, so with ≥ max(n, W)
//! domains one is always free. For (c) it must also avoid group g − 1's n domains; counting the
//! overlap gives at most max(2n − 1, n + W − k − 1) forbidden domains, hence the bound above.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::striped::{StripedLayout, UnitId, MAX_OBJECT_BYTES};
use crate::LayoutError;

/// Most disks a topology may list (bounds every scan over it).
pub const MAX_TOPOLOGY_DISKS: usize = 1 << 16;

/// Most data blocks one placement holds: an object needing more must use larger blocks
/// (placements are kept in metadata, one entry per unit).
pub const MAX_OBJECT_BLOCKS: usize = 1 << 20;

/// Where a disk sits. Node ids are unique in the cluster; disk ids are unique within a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DiskLocation {
    pub rack: u32,
    pub node: u32,
    pub disk: u32,
}

/// The level at which units must not share a failure: disk ⊂ node ⊂ rack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum FailureDomain {
    Disk,
    #[default]
    Node,
    Rack,
}

impl fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureDomain::Disk => "disk",
            FailureDomain::Node => "node",
            FailureDomain::Rack => "rack",
        })
    }
}

/// One failure domain: a rack, a node, or one disk of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DomainId {
    Rack(u32),
    Node(u32),
    Disk { node: u32, disk: u32 },
}

impl DiskLocation {
    /// The failure domain of this disk at `level`.
    pub fn domain(&self, level: FailureDomain) -> DomainId {
        match level {
            FailureDomain::Disk => DomainId::Disk { node: self.node, disk: self.disk },
            FailureDomain::Node => DomainId::Node(self.node),
            FailureDomain::Rack => DomainId::Rack(self.rack),
        }
    }

    /// Whether this disk fails when `domain` fails (a domain of any level).
    pub fn is_in(&self, domain: &DomainId) -> bool {
        match *domain {
            DomainId::Rack(rack) => self.rack == rack,
            DomainId::Node(node) => self.node == node,
            DomainId::Disk { node, disk } => self.node == node && self.disk == disk,
        }
    }
}

/// The disks placement may use. Invariants: 1 ≤ disks ≤ [`MAX_TOPOLOGY_DISKS`], no disk
/// listed twice, every node in exactly one rack. Disks are kept sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    disks: Vec<DiskLocation>,
}

impl Topology {
    /// Checks and keeps a list of disks (in any order).
    pub fn new(mut disks: Vec<DiskLocation>) -> Result<Topology, LayoutError> {
        let refuse = |reason: String| Err(LayoutError::Topology { reason });
        if disks.is_empty() {
            return refuse("no disks".into());
        }
        if disks.len() > MAX_TOPOLOGY_DISKS {
            return refuse(format!(
                "{} disks, more than the {MAX_TOPOLOGY_DISKS} supported",
                disks.len()
            ));
        }
        disks.sort();
        let mut rack_of: BTreeMap<u32, u32> = BTreeMap::new();
        let mut seen: BTreeSet<(u32, u32)> = BTreeSet::new();
        for disk in &disks {
            if !seen.insert((disk.node, disk.disk)) {
                return refuse(format!("disk {} of node {} is listed twice", disk.disk, disk.node));
            }
            let rack = *rack_of.entry(disk.node).or_insert(disk.rack);
            if rack != disk.rack {
                return refuse(format!(
                    "node {} is listed in racks {rack} and {}",
                    disk.node, disk.rack
                ));
            }
        }
        Ok(Topology { disks })
    }

    /// The disks, sorted by (rack, node, disk).
    pub fn disks(&self) -> &[DiskLocation] {
        &self.disks
    }

    /// The distinct failure domains at `level`, sorted.
    pub fn domains(&self, level: FailureDomain) -> Vec<DomainId> {
        let set: BTreeSet<DomainId> = self.disks.iter().map(|d| d.domain(level)).collect();
        set.into_iter().collect()
    }
}

/// Failure domains in placement order: interleaved across racks and nodes, rotated by the seed.
struct Domains {
    ids: Vec<DomainId>,
    disks: Vec<Vec<DiskLocation>>,
}

impl Domains {
    fn new(topology: &Topology, level: FailureDomain, seed: u64) -> Domains {
        let mut by_domain: BTreeMap<DomainId, Vec<DiskLocation>> = BTreeMap::new();
        for disk in topology.disks() {
            by_domain.entry(disk.domain(level)).or_default().push(*disk);
        }
        // Rank of each node within its rack and of each disk within its node (disks are sorted).
        let mut node_rank: BTreeMap<u32, u32> = BTreeMap::new();
        let mut nodes_in_rack: BTreeMap<u32, u32> = BTreeMap::new();
        let mut disk_rank: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        let mut disks_in_node: BTreeMap<u32, u32> = BTreeMap::new();
        for disk in topology.disks() {
            if let std::collections::btree_map::Entry::Vacant(entry) = node_rank.entry(disk.node) {
                let count = nodes_in_rack.entry(disk.rack).or_insert(0);
                entry.insert(*count);
                *count += 1;
            }
            let count = disks_in_node.entry(disk.node).or_insert(0);
            disk_rank.insert((disk.node, disk.disk), *count);
            *count += 1;
        }
        // Sorting by ranks first deals domains round-robin over racks (and nodes), so
        // neighbours in the order, which hold neighbouring units, are in different racks.
        let mut entries: Vec<(DomainId, Vec<DiskLocation>)> = by_domain.into_iter().collect();
        entries.sort_by_key(|(id, disks)| {
            let first = disks[0];
            match id {
                DomainId::Rack(rack) => (0, 0, *rack, 0, 0),
                DomainId::Node(node) => (0, node_rank[node], first.rack, *node, 0),
                DomainId::Disk { node, disk } => {
                    (disk_rank[&(*node, *disk)], node_rank[node], first.rack, *node, *disk)
                }
            }
        });
        let start = (mix(seed) % entries.len() as u64) as usize;
        entries.rotate_left(start);
        let (ids, disks) = entries.into_iter().unzip();
        Domains { ids, disks }
    }

    fn len(&self) -> usize {
        self.ids.len()
    }
}

/// Which domains a unit must avoid (hard) and should avoid (soft), as marks over domain
/// indices, cleared after each pick so one allocation serves every unit.
struct Picker {
    hard: Vec<bool>,
    soft: Vec<bool>,
    marked: Vec<usize>,
}

impl Picker {
    fn new(domains: usize) -> Picker {
        Picker { hard: vec![false; domains], soft: vec![false; domains], marked: Vec::new() }
    }

    fn forbid(&mut self, domain: usize) {
        self.hard[domain] = true;
        self.marked.push(domain);
    }

    fn avoid(&mut self, domain: usize) {
        self.soft[domain] = true;
        self.marked.push(domain);
    }

    /// First domain from `start` (cyclically) that is neither forbidden nor avoided, else the
    /// first that is not forbidden; None if every domain is forbidden.
    fn pick(&mut self, start: usize) -> Option<usize> {
        let count = self.hard.len();
        let cyclic = |step: usize| (start + step) % count;
        let chosen = (0..count)
            .map(cyclic)
            .find(|&d| !self.hard[d] && !self.soft[d])
            .or_else(|| (0..count).map(cyclic).find(|&d| !self.hard[d]));
        for domain in self.marked.drain(..) {
            self.hard[domain] = false;
            self.soft[domain] = false;
        }
        chosen
    }
}

/// A data block a regroup moves: a new group would otherwise hold two units in one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relocation {
    pub block: usize,
    pub from: DiskLocation,
    pub to: DiskLocation,
}

/// Domains needed for (c): with at least this many, group g + 1 never shares a failure
/// domain with group g. max(2n, n + W − k); see the module header for the count.
pub fn min_domains_for_disjoint_groups(layout: &StripedLayout) -> usize {
    let n = layout.n();
    (2 * n).max((n + layout.stripe_width).saturating_sub(layout.k()))
}

/// Places every unit of an object: each stored data block and the r parity blocks of each
/// group, keeping rules (a)–(d) of the module header. Deterministic in its arguments.
pub fn place(
    layout: &StripedLayout,
    object_size: u64,
    topology: &Topology,
    seed: u64,
    level: FailureDomain,
) -> Result<Placement, LayoutError> {
    layout.validate()?;
    if object_size > MAX_OBJECT_BYTES {
        return Err(LayoutError::ObjectTooLarge {
            object_bytes: object_size,
            max: MAX_OBJECT_BYTES,
        });
    }
    let blocks = layout.data_blocks(object_size);
    if blocks > MAX_OBJECT_BLOCKS {
        return Err(LayoutError::TooManyBlocks { blocks, max: MAX_OBJECT_BLOCKS });
    }
    let domains = Domains::new(topology, level, seed);
    let needed = layout.n().max(layout.stripe_width);
    if domains.len() < needed {
        return Err(LayoutError::TooFewDomains {
            level,
            available: domains.len(),
            needed,
            units_per_group: layout.n(),
            stripe_width: layout.stripe_width,
        });
    }
    let (r, width) = (layout.r(), layout.stripe_width);
    let groups = layout.groups(object_size);
    let mut data_domain: Vec<usize> = Vec::with_capacity(blocks);
    let mut parity_domain: Vec<usize> = Vec::with_capacity(groups * r);
    let mut picker = Picker::new(domains.len());
    let mut cursor = 0;
    let mut uses = vec![0u64; domains.len()];
    let mut data = Vec::with_capacity(blocks);
    let mut parity = Vec::with_capacity(groups * r);
    let mut choose = |picker: &mut Picker, cursor: &mut usize| -> (usize, DiskLocation) {
        let domain = picker.pick(*cursor).expect("max(n, W) domains always leave one free");
        *cursor = (domain + 1) % domains.len();
        let disks = &domains.disks[domain];
        let turn = mix(seed ^ mix(domain as u64)).wrapping_add(uses[domain]);
        uses[domain] += 1;
        (domain, disks[(turn % disks.len() as u64) as usize])
    };
    for group in 0..groups {
        let members = layout.group_blocks(object_size, group);
        let previous = group.checked_sub(1).map(|g| layout.group_blocks(object_size, g));
        let mark_previous =
            |picker: &mut Picker, data_domain: &[usize], parity_domain: &[usize]| {
                if let Some(range) = previous.clone() {
                    let prior = group - 1;
                    range.for_each(|x| picker.avoid(data_domain[x]));
                    parity_domain[prior * r..group * r].iter().for_each(|&d| picker.avoid(d));
                }
            };
        for block in members.clone() {
            let first = (layout.stripe_of(block) * width).min(members.start);
            data_domain[first..block].iter().for_each(|&d| picker.forbid(d));
            mark_previous(&mut picker, &data_domain, &parity_domain);
            let (domain, disk) = choose(&mut picker, &mut cursor);
            data_domain.push(domain);
            data.push(disk);
        }
        for index in 0..r {
            members.clone().for_each(|x| picker.forbid(data_domain[x]));
            parity_domain[group * r..group * r + index].iter().for_each(|&d| picker.forbid(d));
            mark_previous(&mut picker, &data_domain, &parity_domain);
            let (domain, disk) = choose(&mut picker, &mut cursor);
            parity_domain.push(domain);
            parity.push(disk);
        }
    }
    let placement = Placement { layout: *layout, object_size, level, seed, data, parity };
    // Cheap next to the placement itself, and a broken rule would lose data later.
    assert_eq!(placement.verify(), Ok(()), "placement broke rule (a) or (b): a bug");
    Ok(placement)
}

/// The disk of every unit of one object, with what it was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    layout: StripedLayout,
    object_size: u64,
    level: FailureDomain,
    seed: u64,
    /// Disk of data block x at index x.
    data: Vec<DiskLocation>,
    /// Disk of parity i of group g at index g·r + i.
    parity: Vec<DiskLocation>,
}

impl Placement {
    /// A placement from its parts — the disk of each data block (`data[x]`) and of each parity
    /// (`parity[g·r + i]`) — as metadata keeps or assembles it (e.g. committing a regroup over
    /// the blocks' current disks). Refused unless the layout is valid, the object size allowed,
    /// the counts are the layout's (one disk per stored data block, r per group), and rules
    /// (a) and (b) hold ([`Placement::verify`]).
    pub fn from_parts(
        layout: StripedLayout,
        object_size: u64,
        level: FailureDomain,
        seed: u64,
        data: Vec<DiskLocation>,
        parity: Vec<DiskLocation>,
    ) -> Result<Placement, LayoutError> {
        layout.validate()?;
        if object_size > MAX_OBJECT_BYTES {
            return Err(LayoutError::ObjectTooLarge {
                object_bytes: object_size,
                max: MAX_OBJECT_BYTES,
            });
        }
        let blocks = layout.data_blocks(object_size);
        if blocks > MAX_OBJECT_BLOCKS {
            return Err(LayoutError::TooManyBlocks { blocks, max: MAX_OBJECT_BLOCKS });
        }
        let parities = layout.groups(object_size) * layout.r();
        if data.len() != blocks || parity.len() != parities {
            return Err(LayoutError::RuleBroken {
                reason: format!(
                    "{} data and {} parity disks given; an object of {object_size} bytes under \
                     {} needs {blocks} and {parities}",
                    data.len(),
                    parity.len(),
                    layout.code
                ),
            });
        }
        let placement = Placement { layout, object_size, level, seed, data, parity };
        placement.verify()?;
        Ok(placement)
    }

    pub fn layout(&self) -> &StripedLayout {
        &self.layout
    }

    pub fn object_size(&self) -> u64 {
        self.object_size
    }

    pub fn failure_domain(&self) -> FailureDomain {
        self.level
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn slot(&self, unit: UnitId) -> Option<(bool, usize)> {
        match unit {
            UnitId::Data(x) if x < self.data.len() => Some((true, x)),
            UnitId::Parity { group, index } if index < self.layout.r() => {
                let at = group.checked_mul(self.layout.r())?.checked_add(index)?;
                (at < self.parity.len()).then_some((false, at))
            }
            _ => None,
        }
    }

    /// The disk holding `unit`, or None if the object has no such unit.
    pub fn disk_of(&self, unit: UnitId) -> Option<DiskLocation> {
        self.slot(unit).map(|(is_data, at)| if is_data { self.data[at] } else { self.parity[at] })
    }

    /// Every stored unit and its disk: data blocks in order, then parities by group.
    pub fn units(&self) -> Vec<(UnitId, DiskLocation)> {
        let r = self.layout.r();
        let data = self.data.iter().enumerate().map(|(x, d)| (UnitId::Data(x), *d));
        let parity = self
            .parity
            .iter()
            .enumerate()
            .map(|(at, d)| (UnitId::Parity { group: at / r, index: at % r }, *d));
        data.chain(parity).collect()
    }

    /// The units stored inside `domain` (of any level): what a failure of it loses.
    pub fn units_on(&self, domain: &DomainId) -> Vec<UnitId> {
        self.units().into_iter().filter(|(_, d)| d.is_in(domain)).map(|(u, _)| u).collect()
    }

    /// The units that must be on a different failure domain from `unit`: the other blocks of
    /// its stripe (data blocks only) and the other units of its group.
    pub fn peers(&self, unit: UnitId) -> Vec<UnitId> {
        let size = self.object_size;
        let mut peers: BTreeSet<UnitId> = BTreeSet::new();
        let group = match unit {
            UnitId::Data(x) => {
                let stripe = self.layout.stripe_of(x);
                peers.extend(self.layout.stripe_blocks(size, stripe).map(UnitId::Data));
                self.layout.group_of(x)
            }
            UnitId::Parity { group, .. } => group,
        };
        peers.extend(self.layout.group_units(size, group));
        peers.remove(&unit);
        peers.into_iter().collect()
    }

    /// Checks rules (a) and (b); names the first pair of units that share a failure domain.
    pub fn verify(&self) -> Result<(), LayoutError> {
        let size = self.object_size;
        let sets = (0..self.layout.stripes(size))
            .map(|s| ("stripe", s, self.layout.stripe_blocks(size, s).map(UnitId::Data).collect()))
            .chain(
                (0..self.layout.groups(size))
                    .map(|g| ("group", g, self.layout.group_units(size, g))),
            );
        for (what, index, units) in sets {
            let units: Vec<UnitId> = units;
            let mut seen: BTreeMap<DomainId, UnitId> = BTreeMap::new();
            for unit in units {
                let disk = self.disk_of(unit).ok_or(LayoutError::UnknownUnit { unit })?;
                if let Some(other) = seen.insert(disk.domain(self.level), unit) {
                    return Err(LayoutError::RuleBroken {
                        reason: format!(
                            "{other} and {unit} of {what} {index} share {} {:?}",
                            self.level,
                            disk.domain(self.level)
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// The placement of the same data blocks grouped by `new` (same striping, another
    /// code): Okapi's regroup (§4.5). Data blocks stay on their disks unless a new group would
    /// hold two of them in one failure domain; then the later one moves to a domain holding
    /// no unit of its new group and no block of its stripe (returned as relocations). The
    /// new parities go to domains holding no unit of their group, avoiding the neighbouring
    /// groups' domains when possible (rule (c)). Deterministic in its arguments. Disks of
    /// the current placement that the topology no longer lists keep their blocks (a regroup
    /// reads them degraded); they are never chosen for anything new.
    pub fn regrouped(
        &self,
        new: &StripedLayout,
        topology: &Topology,
    ) -> Result<(Placement, Vec<Relocation>), LayoutError> {
        new.validate()?;
        let old = &self.layout;
        if (new.stripe_width, new.cell_bytes, new.block_bytes)
            != (old.stripe_width, old.cell_bytes, old.block_bytes)
        {
            return Err(LayoutError::Transition {
                reason: format!(
                    "a regroup keeps the striping (stripe width {}, cell {} B, block {} B) and \
                     changes only the code; this asks for stripe width {}, cell {} B, block {} \
                     B: restripe instead",
                    old.stripe_width,
                    old.cell_bytes,
                    old.block_bytes,
                    new.stripe_width,
                    new.cell_bytes,
                    new.block_bytes
                ),
            });
        }
        let size = self.object_size;
        let domains = Domains::new(topology, self.level, self.seed);
        let needed = new.n().max(new.stripe_width);
        if domains.len() < needed {
            return Err(LayoutError::TooFewDomains {
                level: self.level,
                available: domains.len(),
                needed,
                units_per_group: new.n(),
                stripe_width: new.stripe_width,
            });
        }
        let index_of: BTreeMap<DomainId, usize> =
            domains.ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let level = self.level;
        let forbid_domain = |picker: &mut Picker, disk: &DiskLocation| {
            if let Some(&i) = index_of.get(&disk.domain(level)) {
                picker.forbid(i);
            }
        };
        let avoid_domain = |picker: &mut Picker, disk: &DiskLocation| {
            if let Some(&i) = index_of.get(&disk.domain(level)) {
                picker.avoid(i);
            }
        };
        let disk_in = |domain: usize, salt: u64| {
            let disks = &domains.disks[domain];
            disks[(mix(self.seed ^ mix(salt)) % disks.len() as u64) as usize]
        };
        let mut data = self.data.clone();
        let mut relocations = Vec::new();
        let mut picker = Picker::new(domains.len());
        let (r, groups) = (new.r(), new.groups(size));
        let mut parity: Vec<DiskLocation> = Vec::with_capacity(groups * r);
        let mut cursor = (mix(self.seed ^ 0x7265_6772) % domains.len() as u64) as usize;
        for group in 0..groups {
            let members = new.group_blocks(size, group);
            let mut used: BTreeSet<DomainId> = BTreeSet::new();
            for x in members.clone() {
                if used.insert(data[x].domain(level)) {
                    continue;
                }
                // Two blocks of the new group share a domain: move this one.
                members.clone().for_each(|y| forbid_domain(&mut picker, &data[y]));
                new.stripe_blocks(size, new.stripe_of(x))
                    .for_each(|y| forbid_domain(&mut picker, &data[y]));
                for neighbour in [group.checked_sub(1), Some(group + 1)].into_iter().flatten() {
                    new.group_blocks(size, neighbour)
                        .for_each(|y| avoid_domain(&mut picker, &data[y]));
                }
                let domain = picker.pick(cursor).ok_or_else(|| LayoutError::NoReplacement {
                    unit: UnitId::Data(x),
                    reason: format!(
                        "every {level} holds a unit of its new group {group} or a block of its stripe"
                    ),
                })?;
                cursor = (domain + 1) % domains.len();
                let to = disk_in(domain, x as u64);
                relocations.push(Relocation { block: x, from: data[x], to });
                data[x] = to;
                used.insert(to.domain(level));
            }
            for index in 0..r {
                members.clone().for_each(|y| forbid_domain(&mut picker, &data[y]));
                parity[group * r..].iter().for_each(|d| forbid_domain(&mut picker, d));
                if let Some(prior) = group.checked_sub(1) {
                    new.group_blocks(size, prior).for_each(|y| avoid_domain(&mut picker, &data[y]));
                    parity[prior * r..group * r].iter().for_each(|d| avoid_domain(&mut picker, d));
                }
                let domain = picker.pick(cursor).ok_or_else(|| LayoutError::NoReplacement {
                    unit: UnitId::Parity { group, index },
                    reason: format!("every {level} holds a unit of group {group}"),
                })?;
                cursor = (domain + 1) % domains.len();
                parity.push(disk_in(domain, ((group * r + index) as u64) << 32 | 0xFFFF));
            }
        }
        let placement =
            Placement { layout: *new, object_size: size, level, seed: self.seed, data, parity };
        placement.verify()?;
        Ok((placement, relocations))
    }

    /// A disk to rebuild `unit` on, keeping rules (a) and (b): its failure domain holds no
    /// peer of the unit (see [`Placement::peers`]), it lies in none of `unavailable` (domains of
    /// any level: failed disks, nodes, racks) and it is not the unit's current disk. Domains of
    /// the neighbouring groups are avoided when possible, to keep (c). The choice is
    /// deterministic in (placement, topology, unit, unavailable). The unit's own current
    /// domain is allowed (another disk of the same node) unless `unavailable` excludes it.
    pub fn replacement_for(
        &self,
        topology: &Topology,
        unit: UnitId,
        unavailable: &[DomainId],
    ) -> Result<DiskLocation, LayoutError> {
        let current = self.disk_of(unit).ok_or(LayoutError::UnknownUnit { unit })?;
        let domains = Domains::new(topology, self.level, self.seed);
        let index_of: BTreeMap<DomainId, usize> =
            domains.ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let mut picker = Picker::new(domains.len());
        for peer in self.peers(unit) {
            let disk = self.disk_of(peer).expect("peers are stored units");
            if let Some(&i) = index_of.get(&disk.domain(self.level)) {
                picker.forbid(i);
            }
        }
        let usable = |disk: &&DiskLocation| {
            **disk != current && !unavailable.iter().any(|domain| disk.is_in(domain))
        };
        for (i, disks) in domains.disks.iter().enumerate() {
            if !disks.iter().any(|d| usable(&d)) {
                picker.forbid(i);
            }
        }
        let (group, _) = self.layout.unit_position(unit);
        let neighbours = [group.checked_sub(1), group.checked_add(1)];
        for neighbour in neighbours.into_iter().flatten() {
            for other in self.layout.group_units(self.object_size, neighbour) {
                let disk = self.disk_of(other).expect("group units are stored");
                if let Some(&i) = index_of.get(&disk.domain(self.level)) {
                    picker.avoid(i);
                }
            }
        }
        let salt = mix(self.seed ^ mix(unit_key(unit)));
        let start = (salt % domains.len() as u64) as usize;
        let domain = picker.pick(start).ok_or_else(|| LayoutError::NoReplacement {
            unit,
            reason: format!(
                "each of the {} {} domains is unavailable or holds one of its {} peers",
                domains.len(),
                self.level,
                self.peers(unit).len()
            ),
        })?;
        let usable: Vec<&DiskLocation> = domains.disks[domain].iter().filter(usable).collect();
        Ok(*usable[(salt % usable.len() as u64) as usize])
    }

    /// Moves `unit` to `disk`, refusing (and changing nothing) if that breaks rule (a) or (b).
    pub fn relocate(&mut self, unit: UnitId, disk: DiskLocation) -> Result<(), LayoutError> {
        let (is_data, at) = self.slot(unit).ok_or(LayoutError::UnknownUnit { unit })?;
        let domain = disk.domain(self.level);
        for peer in self.peers(unit) {
            if self.disk_of(peer).expect("peers are stored units").domain(self.level) == domain {
                return Err(LayoutError::RuleBroken {
                    reason: format!("{unit} on {domain:?} would share it with {peer}"),
                });
            }
        }
        if is_data {
            self.data[at] = disk;
        } else {
            self.parity[at] = disk;
        }
        Ok(())
    }
}

fn unit_key(unit: UnitId) -> u64 {
    match unit {
        UnitId::Data(x) => (x as u64) << 1,
        UnitId::Parity { group, index } => ((group as u64) << 20 ^ index as u64) << 1 | 1,
    }
}

/// SplitMix64's finaliser: spreads a seed over all 64 bits (deterministic, not random).
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
