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
//!   interleaved across racks (and nodes) so neighbouring units land in different racks. A
//!   writer that wants successive objects to start on successive domains (round-robin, even
//!   over a few objects) picks their seeds with [`seed_for_turn`].
//!
//! [`place`] keeps (a) and (b) for every topology with at least max(n, W) domains and refuses
//! smaller ones. Its result depends only on (layout, object size, topology, seed, level): the
//! order of disks in the topology does not matter, and nothing random or clock-driven is used.
//!
//! Size: a placement never grows with its object. An object of more groups than
//! [`pattern_period`] (≥ [`PATTERN_UNITS`] units, whole stripes and groups) is *tiled*: one
//! period is placed and repeated, and a unit that later leaves its pattern disk (repair,
//! regroup) is recorded on its own in `moved`. Every method works on that form: looking a unit
//! up is O(log moved), [`Placement::units`] computes as it iterates, [`Placement::verify`]
//! checks one period plus the sets holding moved units.
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

/// Most data blocks one object may have: an object needing more must use larger blocks (each
/// block is a unit file, a repair task and a line in an inventory).
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

/// A seed, derived from `base`, whose placements on `topology` at `level` start at position
/// `turn` (mod the number of domains) of the rotating order of rule (d).
///
/// A writer that gives successive objects successive turns (meta does) spreads their first
/// units round-robin over the domains, so n objects of one shape put n / domains (± 1) first
/// units on each domain, where seeds drawn at random leave some domains with twice the
/// average on a few hundred objects. The seed still decides everything else (which disk of a
/// domain), and stays the placement's only input besides layout, size, topology and level.
pub fn seed_for_turn(topology: &Topology, level: FailureDomain, base: u64, turn: u64) -> u64 {
    let domains = topology.disks().iter().map(|d| d.domain(level)).collect::<BTreeSet<_>>().len();
    if domains == 0 {
        return base;
    }
    let want = turn % domains as u64;
    // mix spreads evenly, so about `domains` candidates are tried; the bound only guards the
    // (never seen) case of a long unlucky run, which then keeps the base seed.
    (0..64 * domains as u64)
        .map(|j| base.wrapping_add(j))
        .find(|&seed| mix(seed) % domains as u64 == want)
        .unwrap_or(base)
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

/// Units a pattern holds at least: an object with more units repeats a pattern of about this
/// many (more on topologies of many disks) instead of having one entry per unit.
pub const PATTERN_UNITS: usize = 1024;

/// Groups in one period of an object's pattern: the fewest whole groups holding at least
/// max([`PATTERN_UNITS`], 4 · disks) units whose data blocks fill whole stripes (a multiple of
/// lcm(W, k) blocks), or every group of the object when it has no more. `disks` is the size of
/// the topology the object is placed on: a longer pattern gives every disk a share of it.
pub fn pattern_period(layout: &StripedLayout, object_size: u64, disks: usize) -> usize {
    let groups = layout.groups(object_size);
    let k = layout.k();
    let align = lcm(layout.stripe_width, k) / k;
    let target = PATTERN_UNITS.max(disks.saturating_mul(4)).div_ceil(layout.n());
    target.next_multiple_of(align).min(groups)
}

fn lcm(a: usize, b: usize) -> usize {
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

/// Places every unit of an object: each stored data block and the r parity blocks of each
/// group, keeping rules (a)–(d) of the module header. Deterministic in its arguments.
///
/// An object of more groups than [`pattern_period`] gets a *tiled* placement: the first
/// period's groups are placed as above and every later group repeats the disks of the group a
/// whole number of periods before it. A period ends on a stripe and a group boundary, so each
/// repeated stripe and group keeps (a) and (b); rule (c) holds inside a period as above, and
/// across a period boundary when the topology has n more domains than (c) needs (the last
/// group of the period then avoids the first group's domains too). The placement
/// then costs memory for one period, whatever the object's size.
pub fn place(
    layout: &StripedLayout,
    object_size: u64,
    topology: &Topology,
    seed: u64,
    level: FailureDomain,
) -> Result<Placement, LayoutError> {
    check_size(layout, object_size)?;
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
    let (r, k, width) = (layout.r(), layout.k(), layout.stripe_width);
    let groups = layout.groups(object_size);
    let period = pattern_period(layout, object_size, topology.disks().len());
    let tiled = period < groups;
    let blocks = if tiled { period * k } else { layout.data_blocks(object_size) };
    let mut data_domain: Vec<usize> = Vec::with_capacity(blocks);
    let mut parity_domain: Vec<usize> = Vec::with_capacity(period * r);
    let mut picker = Picker::new(domains.len());
    let mut cursor = 0;
    let mut uses = vec![0u64; domains.len()];
    let mut data = Vec::with_capacity(blocks);
    let mut parity = Vec::with_capacity(period * r);
    let mut choose = |picker: &mut Picker, cursor: &mut usize| -> (usize, DiskLocation) {
        let domain = picker.pick(*cursor).expect("max(n, W) domains always leave one free");
        *cursor = (domain + 1) % domains.len();
        let disks = &domains.disks[domain];
        let turn = mix(seed ^ mix(domain as u64)).wrapping_add(uses[domain]);
        uses[domain] += 1;
        (domain, disks[(turn % disks.len() as u64) as usize])
    };
    let room_to_wrap = domains.len() >= min_domains_for_disjoint_groups(layout) + layout.n();
    for group in 0..period {
        let members = layout.group_blocks(object_size, group);
        let previous = group.checked_sub(1).map(|g| layout.group_blocks(object_size, g));
        // The last group of a repeated period precedes the first group's repetition: it
        // avoids that group's domains too when there are enough to avoid both neighbours.
        let wraps = tiled && group + 1 == period && group > 0 && room_to_wrap;
        let mark_neighbours =
            |picker: &mut Picker, data_domain: &[usize], parity_domain: &[usize]| {
                if let Some(range) = previous.clone() {
                    let prior = group - 1;
                    range.for_each(|x| picker.avoid(data_domain[x]));
                    parity_domain[prior * r..group * r].iter().for_each(|&d| picker.avoid(d));
                }
                if wraps {
                    data_domain[..k].iter().for_each(|&d| picker.avoid(d));
                    parity_domain[..r].iter().for_each(|&d| picker.avoid(d));
                }
            };
        for block in members.clone() {
            let first = (layout.stripe_of(block) * width).min(members.start);
            data_domain[first..block].iter().for_each(|&d| picker.forbid(d));
            mark_neighbours(&mut picker, &data_domain, &parity_domain);
            let (domain, disk) = choose(&mut picker, &mut cursor);
            data_domain.push(domain);
            data.push(disk);
        }
        for index in 0..r {
            members.clone().for_each(|x| picker.forbid(data_domain[x]));
            parity_domain[group * r..group * r + index].iter().for_each(|&d| picker.forbid(d));
            mark_neighbours(&mut picker, &data_domain, &parity_domain);
            let (domain, disk) = choose(&mut picker, &mut cursor);
            parity_domain.push(domain);
            parity.push(disk);
        }
    }
    let placement = Placement::assemble(
        *layout,
        object_size,
        level,
        seed,
        tiled.then_some(period),
        data,
        parity,
        BTreeMap::new(),
    );
    // Cheap next to the placement itself (one period), and a broken rule would lose data later.
    assert_eq!(placement.verify(), Ok(()), "placement broke rule (a) or (b): a bug");
    Ok(placement)
}

fn check_size(layout: &StripedLayout, object_size: u64) -> Result<(), LayoutError> {
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
    Ok(())
}

/// The disk of every unit of one object, with what it was computed from.
///
/// Stored as a *pattern* and the units that left it. An untiled placement's pattern lists
/// every unit (data block x at `data[x]`, parity i of group g at `parity[g·r + i]`) and moving
/// a unit rewrites its entry. A tiled one ([`place`]) lists one period of P groups: data block x
/// is on `data[x mod P·k]` and parity (g, i) on `parity[(g mod P)·r + i]` unless `moved` says
/// otherwise (a unit rebuilt elsewhere, a block a regroup moved). Invariants: the pattern alone
/// keeps rules (a) and (b); so do the stripes and groups holding a moved unit; a tiled period
/// holds whole stripes and groups and fewer groups than the object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "PlacementForm", try_from = "PlacementForm")]
pub struct Placement {
    layout: StripedLayout,
    object_size: u64,
    level: FailureDomain,
    seed: u64,
    /// Groups per period of a tiled placement; None when the pattern lists every unit.
    period: Option<usize>,
    data: Vec<DiskLocation>,
    parity: Vec<DiskLocation>,
    /// Units of a tiled placement not on their pattern's disk (always empty when untiled).
    moved: BTreeMap<UnitId, DiskLocation>,
    /// Data blocks and groups of the object (derived, kept for speed).
    blocks: usize,
    groups: usize,
}

/// The serde form of a [`Placement`]: untiled ones read as they always did (no `period`, no
/// `moved`), so stored placements of earlier versions stay readable.
#[derive(Serialize, Deserialize)]
struct PlacementForm {
    layout: StripedLayout,
    object_size: u64,
    level: FailureDomain,
    seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    period: Option<usize>,
    data: Vec<DiskLocation>,
    parity: Vec<DiskLocation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    moved: Vec<(UnitId, DiskLocation)>,
}

impl From<Placement> for PlacementForm {
    fn from(p: Placement) -> PlacementForm {
        PlacementForm {
            layout: p.layout,
            object_size: p.object_size,
            level: p.level,
            seed: p.seed,
            period: p.period,
            data: p.data,
            parity: p.parity,
            moved: p.moved.into_iter().collect(),
        }
    }
}

impl TryFrom<PlacementForm> for Placement {
    type Error = LayoutError;

    fn try_from(form: PlacementForm) -> Result<Placement, LayoutError> {
        let moved_count = form.moved.len();
        let moved: BTreeMap<UnitId, DiskLocation> = form.moved.into_iter().collect();
        if moved.len() != moved_count {
            return Err(LayoutError::RuleBroken { reason: "a unit is moved twice".into() });
        }
        Placement::from_pattern(
            form.layout,
            form.object_size,
            form.level,
            form.seed,
            form.period,
            form.data,
            form.parity,
            moved,
        )
    }
}

impl Placement {
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        layout: StripedLayout,
        object_size: u64,
        level: FailureDomain,
        seed: u64,
        period: Option<usize>,
        data: Vec<DiskLocation>,
        parity: Vec<DiskLocation>,
        moved: BTreeMap<UnitId, DiskLocation>,
    ) -> Placement {
        let blocks = layout.data_blocks(object_size);
        let groups = layout.groups(object_size);
        Placement { layout, object_size, level, seed, period, data, parity, moved, blocks, groups }
    }

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
        Placement::from_pattern(layout, object_size, level, seed, None, data, parity, [].into())
    }

    /// A placement from its stored form ([`Placement::pattern`]): `period` None means `data`
    /// and `parity` list every unit (as [`Placement::from_parts`]); `Some(P)` means they list P
    /// groups that repeat, with `moved` the units elsewhere. Refused unless the counts fit, the
    /// period is whole stripes and groups and shorter than the object, every moved unit exists,
    /// and rules (a) and (b) hold.
    #[allow(clippy::too_many_arguments)]
    pub fn from_pattern(
        layout: StripedLayout,
        object_size: u64,
        level: FailureDomain,
        seed: u64,
        period: Option<usize>,
        data: Vec<DiskLocation>,
        parity: Vec<DiskLocation>,
        moved: BTreeMap<UnitId, DiskLocation>,
    ) -> Result<Placement, LayoutError> {
        check_size(&layout, object_size)?;
        let broken = |reason: String| Err(LayoutError::RuleBroken { reason });
        let (blocks, groups) = (layout.data_blocks(object_size), layout.groups(object_size));
        let (k, r) = (layout.k(), layout.r());
        let (want_data, want_parity) = match period {
            None => (blocks, groups * r),
            Some(p) => {
                if p == 0 || p >= groups || (p * k) % layout.stripe_width != 0 {
                    return broken(format!(
                        "a period of {p} groups for an object of {groups} groups of {k} blocks \
                         in stripes of {}: a period is whole stripes, and shorter than the object",
                        layout.stripe_width
                    ));
                }
                (p * k, p * r)
            }
        };
        if data.len() != want_data || parity.len() != want_parity {
            return broken(format!(
                "{} data and {} parity disks given; an object of {object_size} bytes under {} \
                 needs {want_data} and {want_parity}",
                data.len(),
                parity.len(),
                layout.code
            ));
        }
        if period.is_none() && !moved.is_empty() {
            return broken("an untiled placement lists every unit: none is moved".into());
        }
        let placement =
            Placement::assemble(layout, object_size, level, seed, period, data, parity, moved);
        if let Some(unit) = placement.moved.keys().find(|u| placement.pattern_slot(**u).is_none()) {
            return Err(LayoutError::UnknownUnit { unit: *unit });
        }
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

    /// The stored form: (groups per period or None, pattern data disks, pattern parity disks,
    /// moved units) — see the type's header. Its size depends on the topology, not the object,
    /// plus one entry per moved unit.
    pub fn pattern(
        &self,
    ) -> (Option<usize>, &[DiskLocation], &[DiskLocation], &BTreeMap<UnitId, DiskLocation>) {
        (self.period, &self.data, &self.parity, &self.moved)
    }

    /// How many units the object stores: its data blocks and r parities per group.
    pub fn unit_count(&self) -> usize {
        self.blocks + self.groups * self.layout.r()
    }

    /// Where `unit` sits in the pattern: (is data, index), or None if the object has no such
    /// unit.
    fn pattern_slot(&self, unit: UnitId) -> Option<(bool, usize)> {
        match unit {
            UnitId::Data(x) if x < self.blocks => Some((true, x % self.data.len())),
            UnitId::Parity { group, index } if index < self.layout.r() && group < self.groups => {
                let period = self.period.unwrap_or(self.groups);
                Some((false, (group % period) * self.layout.r() + index))
            }
            _ => None,
        }
    }

    /// The pattern's disk of `unit`, ignoring `moved`.
    fn pattern_disk(&self, unit: UnitId) -> Option<DiskLocation> {
        self.pattern_slot(unit)
            .map(|(is_data, at)| if is_data { self.data[at] } else { self.parity[at] })
    }

    /// The disk holding `unit`, or None if the object has no such unit.
    pub fn disk_of(&self, unit: UnitId) -> Option<DiskLocation> {
        let pattern = self.pattern_disk(unit)?;
        Some(self.moved.get(&unit).copied().unwrap_or(pattern))
    }

    /// Every stored unit and its disk: data blocks in order, then parities by group. Computed
    /// as it goes: a tiled placement never holds the whole list.
    pub fn units(&self) -> impl Iterator<Item = (UnitId, DiskLocation)> + '_ {
        let r = self.layout.r();
        let data = (0..self.blocks).map(UnitId::Data);
        let parity =
            (0..self.groups * r).map(move |at| UnitId::Parity { group: at / r, index: at % r });
        data.chain(parity).map(|unit| (unit, self.disk_of(unit).expect("a stored unit")))
    }

    /// The units stored inside `domain` (of any level): what a failure of it loses.
    pub fn units_on(&self, domain: &DomainId) -> Vec<UnitId> {
        self.units().filter(|(_, d)| d.is_in(domain)).map(|(u, _)| u).collect()
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
    /// A tiled placement is checked on its pattern (one period: every other period repeats
    /// it, and the object's last, partial stripe and group are subsets of its stripes and
    /// groups) and on each stripe and group holding a moved unit.
    pub fn verify(&self) -> Result<(), LayoutError> {
        let size = self.object_size;
        let (stripes, groups) = match self.period {
            None => (self.layout.stripes(size), self.groups),
            Some(p) => (p * self.layout.k() / self.layout.stripe_width, p),
        };
        let pattern = |unit: UnitId| self.pattern_disk(unit);
        for stripe in 0..stripes {
            self.check_stripe(stripe, &pattern)?;
        }
        for group in 0..groups {
            self.check_group(group, &pattern)?;
        }
        let actual = |unit: UnitId| self.disk_of(unit);
        for unit in self.moved.keys() {
            if let UnitId::Data(x) = unit {
                self.check_stripe(self.layout.stripe_of(*x), &actual)?;
            }
            self.check_group(self.layout.unit_position(*unit).0, &actual)?;
        }
        Ok(())
    }

    fn check_stripe(
        &self,
        stripe: usize,
        disk: &dyn Fn(UnitId) -> Option<DiskLocation>,
    ) -> Result<(), LayoutError> {
        let units = self.layout.stripe_blocks(self.object_size, stripe).map(UnitId::Data);
        self.check_set("stripe", stripe, units, disk)
    }

    fn check_group(
        &self,
        group: usize,
        disk: &dyn Fn(UnitId) -> Option<DiskLocation>,
    ) -> Result<(), LayoutError> {
        let units = self.layout.group_units(self.object_size, group);
        self.check_set("group", group, units.into_iter(), disk)
    }

    fn check_set(
        &self,
        what: &str,
        index: usize,
        units: impl Iterator<Item = UnitId>,
        disk_of: &dyn Fn(UnitId) -> Option<DiskLocation>,
    ) -> Result<(), LayoutError> {
        let mut seen: BTreeMap<DomainId, UnitId> = BTreeMap::new();
        for unit in units {
            let disk = disk_of(unit).ok_or(LayoutError::UnknownUnit { unit })?;
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
    ///
    /// A tiled placement is regrouped on one period of lcm(P·k, k') blocks, repeated; the
    /// stripes and groups holding a moved block are then checked and mended one by one, so
    /// the result stays as small as the input.
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
        let regroup = Regroup::new(self, new, &domains);
        // One period of the new grouping: whole old periods and whole new groups.
        let period = self.period.map(|_| lcm(self.data.len(), new.k()) / new.k());
        let (data, parity, relocated) = match period {
            Some(p) if p < new.groups(size) => {
                let data = (0..p * new.k()).map(|x| self.data[x % self.data.len()]).collect();
                regroup.pattern(data, p)?
            }
            _ => {
                let data = (0..self.blocks).map(|x| self.disk_of(UnitId::Data(x)).unwrap());
                regroup.pattern(data.collect(), new.groups(size))?
            }
        };
        let tiled = period.filter(|&p| p < new.groups(size));
        let mut placement = Placement::assemble(
            *new,
            size,
            self.level,
            self.seed,
            tiled,
            data,
            parity,
            BTreeMap::new(),
        );
        let mut relocations = Vec::new();
        match tiled {
            None => relocations.extend(relocated.into_iter().map(|(block, from, to)| Relocation {
                block,
                from,
                to,
            })),
            Some(p) => {
                // Every repetition of a relocated pattern block moves, unless it had moved
                // already (it is mended below with the other moved blocks).
                let stride = p * new.k();
                for (slot, from, to) in relocated {
                    for block in (slot..self.blocks).step_by(stride) {
                        if !self.moved.contains_key(&UnitId::Data(block)) {
                            relocations.push(Relocation { block, from, to });
                        }
                    }
                }
                relocations.sort_by_key(|r| r.block);
                // Moved data blocks stay where they are; their new stripes and groups are
                // checked, and mended where two units now share a domain.
                let mut groups = BTreeSet::new();
                for (unit, disk) in &self.moved {
                    if let UnitId::Data(x) = *unit {
                        if placement.pattern_disk(*unit) != Some(*disk) {
                            placement.moved.insert(*unit, *disk);
                        }
                        groups.insert(new.group_of(x));
                        for y in new.stripe_blocks(size, new.stripe_of(x)) {
                            groups.insert(new.group_of(y));
                        }
                    }
                }
                for group in groups {
                    regroup.mend(&mut placement, group, &mut relocations)?;
                }
            }
        }
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
    /// A tiled placement records the move (or forgets it when `disk` is the pattern's).
    pub fn relocate(&mut self, unit: UnitId, disk: DiskLocation) -> Result<(), LayoutError> {
        let (is_data, at) = self.pattern_slot(unit).ok_or(LayoutError::UnknownUnit { unit })?;
        let domain = disk.domain(self.level);
        for peer in self.peers(unit) {
            if self.disk_of(peer).expect("peers are stored units").domain(self.level) == domain {
                return Err(LayoutError::RuleBroken {
                    reason: format!("{unit} on {domain:?} would share it with {peer}"),
                });
            }
        }
        match (self.period, is_data) {
            (None, true) => self.data[at] = disk,
            (None, false) => self.parity[at] = disk,
            (Some(_), _) if self.pattern_disk(unit) == Some(disk) => {
                self.moved.remove(&unit);
            }
            (Some(_), _) => {
                self.moved.insert(unit, disk);
            }
        }
        Ok(())
    }
}

/// The working state of one regroup ([`Placement::regrouped`]).
struct Regroup<'a> {
    new: &'a StripedLayout,
    domains: &'a Domains,
    index_of: BTreeMap<DomainId, usize>,
    level: FailureDomain,
    seed: u64,
    size: u64,
}

impl<'a> Regroup<'a> {
    fn new(old: &Placement, new: &'a StripedLayout, domains: &'a Domains) -> Regroup<'a> {
        Regroup {
            new,
            domains,
            index_of: domains.ids.iter().enumerate().map(|(i, id)| (*id, i)).collect(),
            level: old.level,
            seed: old.seed,
            size: old.object_size,
        }
    }

    fn forbid(&self, picker: &mut Picker, disk: &DiskLocation) {
        if let Some(&i) = self.index_of.get(&disk.domain(self.level)) {
            picker.forbid(i);
        }
    }

    fn avoid(&self, picker: &mut Picker, disk: &DiskLocation) {
        if let Some(&i) = self.index_of.get(&disk.domain(self.level)) {
            picker.avoid(i);
        }
    }

    fn disk_in(&self, domain: usize, salt: u64) -> DiskLocation {
        let disks = &self.domains.disks[domain];
        disks[(mix(self.seed ^ mix(salt)) % disks.len() as u64) as usize]
    }

    /// Regroups the first `groups` groups over the data disks `data` (one per data block of
    /// those groups): the new pattern's data and parity disks and the blocks it relocated, as
    /// (block, from, to).
    #[allow(clippy::type_complexity)]
    fn pattern(
        &self,
        mut data: Vec<DiskLocation>,
        groups: usize,
    ) -> Result<
        (Vec<DiskLocation>, Vec<DiskLocation>, Vec<(usize, DiskLocation, DiskLocation)>),
        LayoutError,
    > {
        let (new, size, level) = (self.new, self.size, self.level);
        let mut relocations = Vec::new();
        let mut picker = Picker::new(self.domains.len());
        let r = new.r();
        let mut parity: Vec<DiskLocation> = Vec::with_capacity(groups * r);
        let mut cursor = (mix(self.seed ^ 0x7265_6772) % self.domains.len() as u64) as usize;
        let last = groups.saturating_sub(1);
        for group in 0..groups {
            let members = new.group_blocks(size, group);
            let mut used: BTreeSet<DomainId> = BTreeSet::new();
            for x in members.clone() {
                if used.insert(data[x].domain(level)) {
                    continue;
                }
                // Two blocks of the new group share a domain: move this one.
                members.clone().for_each(|y| self.forbid(&mut picker, &data[y]));
                new.stripe_blocks(size, new.stripe_of(x))
                    .for_each(|y| self.forbid(&mut picker, &data[y]));
                for neighbour in [group.checked_sub(1), Some(group + 1)].into_iter().flatten() {
                    if neighbour <= last {
                        new.group_blocks(size, neighbour)
                            .for_each(|y| self.avoid(&mut picker, &data[y]));
                    }
                }
                let domain = picker.pick(cursor).ok_or_else(|| LayoutError::NoReplacement {
                    unit: UnitId::Data(x),
                    reason: format!(
                        "every {level} holds a unit of its new group {group} or a block of its stripe"
                    ),
                })?;
                cursor = (domain + 1) % self.domains.len();
                let to = self.disk_in(domain, x as u64);
                relocations.push((x, data[x], to));
                data[x] = to;
                used.insert(to.domain(level));
            }
            for index in 0..r {
                members.clone().for_each(|y| self.forbid(&mut picker, &data[y]));
                parity[group * r..].iter().for_each(|d| self.forbid(&mut picker, d));
                if let Some(prior) = group.checked_sub(1) {
                    new.group_blocks(size, prior).for_each(|y| self.avoid(&mut picker, &data[y]));
                    parity[prior * r..group * r].iter().for_each(|d| self.avoid(&mut picker, d));
                }
                let domain = picker.pick(cursor).ok_or_else(|| LayoutError::NoReplacement {
                    unit: UnitId::Parity { group, index },
                    reason: format!("every {level} holds a unit of group {group}"),
                })?;
                cursor = (domain + 1) % self.domains.len();
                parity.push(self.disk_in(domain, ((group * r + index) as u64) << 32 | 0xFFFF));
            }
        }
        Ok((data, parity, relocations))
    }

    /// Mends group `group` of a tiled regroup around its moved blocks: a data block sharing a
    /// domain with an earlier block of its group or another block of its stripe moves (a
    /// relocation), then a parity sharing a domain with another unit of the group moves.
    fn mend(
        &self,
        placement: &mut Placement,
        group: usize,
        relocations: &mut Vec<Relocation>,
    ) -> Result<(), LayoutError> {
        let (new, size, level) = (self.new, self.size, self.level);
        let disk = |p: &Placement, unit| p.disk_of(unit).expect("a stored unit");
        let members = new.group_blocks(size, group);
        let mut used: BTreeSet<DomainId> = BTreeSet::new();
        let mut picker = Picker::new(self.domains.len());
        for x in members.clone() {
            let here = disk(placement, UnitId::Data(x)).domain(level);
            let stripe = new.stripe_blocks(size, new.stripe_of(x));
            let clash = used.contains(&here)
                || stripe
                    .clone()
                    .any(|y| y != x && disk(placement, UnitId::Data(y)).domain(level) == here);
            if !clash {
                used.insert(here);
                continue;
            }
            members
                .clone()
                .for_each(|y| self.forbid(&mut picker, &disk(placement, UnitId::Data(y))));
            stripe.for_each(|y| self.forbid(&mut picker, &disk(placement, UnitId::Data(y))));
            let start = (mix(self.seed ^ mix(x as u64)) % self.domains.len() as u64) as usize;
            let domain = picker.pick(start).ok_or_else(|| LayoutError::NoReplacement {
                unit: UnitId::Data(x),
                reason: format!(
                    "every {level} holds a unit of its new group {group} or a block of its stripe"
                ),
            })?;
            let from = disk(placement, UnitId::Data(x));
            let to = self.disk_in(domain, x as u64);
            placement.moved.insert(UnitId::Data(x), to);
            match relocations.iter_mut().find(|r| r.block == x) {
                Some(relocation) => relocation.to = to,
                None => relocations.push(Relocation { block: x, from, to }),
            }
            used.insert(to.domain(level));
        }
        for index in 0..new.r() {
            let unit = UnitId::Parity { group, index };
            let here = disk(placement, unit).domain(level);
            if used.insert(here) {
                continue;
            }
            members
                .clone()
                .for_each(|y| self.forbid(&mut picker, &disk(placement, UnitId::Data(y))));
            (0..new.r())
                .map(|i| disk(placement, UnitId::Parity { group, index: i }))
                .for_each(|d| self.forbid(&mut picker, &d));
            let salt = unit_key(unit);
            let start = (mix(self.seed ^ mix(salt)) % self.domains.len() as u64) as usize;
            let domain = picker.pick(start).ok_or_else(|| LayoutError::NoReplacement {
                unit,
                reason: format!("every {level} holds a unit of group {group}"),
            })?;
            placement.moved.insert(unit, self.disk_in(domain, salt));
            used.insert(self.domains.ids[domain]);
        }
        relocations.sort_by_key(|r| r.block);
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
pub(crate) fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
