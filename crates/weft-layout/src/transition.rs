//! Transitions: changing the code of an object already stored (Okapi §4.5, §6.3).
//!
//! Two ways, and what each costs:
//! - **regroup** keeps the striping (stripe width, cell, block) and so every data block where
//!   it is; consecutive k₂ data blocks form the new groups (over a cycle of lcm(k₁, k₂)
//!   blocks the old and new group boundaries meet again), their parity is computed from the
//!   data read once, and only that parity is written. Data moves only where a new group
//!   would hold two units in one failure domain ([`Placement::regrouped`]).
//! - **restripe** reads the object and writes it again under the new layout, data and parity,
//!   like a new object: the only way when the striping itself changes.
//!
//! Invariants:
//! - Pure: plans and predictions are functions of their arguments (placement, layouts,
//!   topology), like the rest of this crate.
//! - Every data block lands in exactly one new group, and the new placement keeps rules (a)
//!   and (b) (checked by `Placement::verify` before a plan is returned).
//! - IO figures count bytes as stored: data blocks at their real length, parity at the new
//!   groups' unit length. Total IO of a regroup is D + P + 2·R (read the data, write the new
//!   parity, read and write each relocated block — the read is the one already made for the
//!   parity, so R is counted once as read and once as written); a restripe is 2·D + P'
//!   where P' is the parity of the new layout.

use serde::{Deserialize, Serialize};

use crate::{DiskLocation, LayoutError, Placement, Relocation, StripedLayout, Topology, UnitId};

/// How a transition is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransitionMode {
    /// New groups and parity over the data blocks in place.
    Regroup,
    /// Rewrite the whole object under the new layout.
    Restripe,
}

impl TransitionMode {
    /// `auto`: regroup when only the code changes, restripe when the striping changes.
    pub fn auto(old: &StripedLayout, new: &StripedLayout) -> TransitionMode {
        if (old.stripe_width, old.cell_bytes, old.block_bytes)
            == (new.stripe_width, new.cell_bytes, new.block_bytes)
        {
            TransitionMode::Regroup
        } else {
            TransitionMode::Restripe
        }
    }
}

impl std::fmt::Display for TransitionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransitionMode::Regroup => "regroup",
            TransitionMode::Restripe => "restripe",
        })
    }
}

/// Bytes a transition moves. `network_bytes` assumes a worker that is none of the nodes:
/// everything read and everything written crosses the network once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionIo {
    pub bytes_read: u64,
    pub data_bytes_written: u64,
    pub parity_bytes_written: u64,
    pub relocated_bytes: u64,
    pub network_bytes: u64,
}

impl TransitionIo {
    /// Disk IO: everything read plus everything written.
    pub fn total_bytes(&self) -> u64 {
        self.bytes_read + self.data_bytes_written + self.parity_bytes_written + self.relocated_bytes
    }
}

/// A unit a transition writes or deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedUnit {
    pub unit: UnitId,
    pub disk: DiskLocation,
    /// Stored length in bytes.
    pub len: u64,
}

/// What a regroup does to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegroupPlan {
    /// The placement before.
    pub old: Placement,
    /// The placement after: the new layout, data blocks (relocated ones at their new disk),
    /// the new parity.
    pub new: Placement,
    /// Data blocks that must move, in block order.
    pub relocations: Vec<Relocation>,
    /// New parity units to compute and write, by group.
    pub create: Vec<PlannedUnit>,
    /// Old parity units to delete once the new ones are durable.
    pub delete: Vec<PlannedUnit>,
}

/// Plans a regroup of the object placed at `old` to the code of `new` (whose striping must
/// equal the old one), on the disks of `topology`.
pub fn plan_regroup(
    old: &Placement,
    new: &StripedLayout,
    topology: &Topology,
) -> Result<RegroupPlan, LayoutError> {
    let (placement, relocations) = old.regrouped(new, topology)?;
    let parity_units = |p: &Placement| -> Vec<PlannedUnit> {
        let (layout, size) = (*p.layout(), p.object_size());
        p.units()
            .filter(|(u, _)| matches!(u, UnitId::Parity { .. }))
            .map(|(unit, disk)| PlannedUnit { unit, disk, len: layout.stored_len(size, unit) })
            .collect()
    };
    Ok(RegroupPlan {
        create: parity_units(&placement),
        delete: parity_units(old),
        old: old.clone(),
        new: placement,
        relocations,
    })
}

impl RegroupPlan {
    /// The bytes this regroup moves.
    pub fn io(&self) -> TransitionIo {
        let (layout, size) = (*self.old.layout(), self.old.object_size());
        let data = size;
        let parity: u64 = self.create.iter().map(|u| u.len).sum();
        let relocated: u64 = self.relocations.iter().map(|r| layout.block_len(size, r.block)).sum();
        TransitionIo {
            bytes_read: data,
            data_bytes_written: 0,
            parity_bytes_written: parity,
            relocated_bytes: relocated,
            network_bytes: data + parity + relocated,
        }
    }
}

/// Parity bytes an object of `size` bytes has under `layout`.
pub fn parity_bytes(layout: &StripedLayout, size: u64) -> u64 {
    (0..layout.groups(size)).map(|g| layout.unit_len(size, g) * layout.r() as u64).sum()
}

/// The bytes a restripe of an object of `size` bytes to `new` moves: read it all, write it
/// all again with the new parity.
pub fn restripe_io(new: &StripedLayout, size: u64) -> TransitionIo {
    let parity = parity_bytes(new, size);
    TransitionIo {
        bytes_read: size,
        data_bytes_written: size,
        parity_bytes_written: parity,
        relocated_bytes: 0,
        network_bytes: 2 * size + parity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{place, FailureDomain};
    use weft_codes::CodeSpec;

    fn layout(code: CodeSpec, width: usize, cell: u64, block: u64) -> StripedLayout {
        StripedLayout { code, stripe_width: width, cell_bytes: cell, block_bytes: block }
    }

    fn topology(nodes: u32, disks: u32, racks: u32) -> Topology {
        Topology::new(
            (0..nodes)
                .flat_map(|node| {
                    (0..disks).map(move |disk| DiskLocation { rack: node % racks, node, disk })
                })
                .collect(),
        )
        .unwrap()
    }

    fn rs(k: usize, r: usize) -> CodeSpec {
        CodeSpec::Rs { k, r }
    }

    /// xorshift, for reproducible random cases without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below
        }
    }

    #[test]
    fn random_regroups_keep_every_block_once_and_every_rule() {
        let mut rng = Rng(0x5eed);
        let codes =
            [rs(2, 1), rs(3, 2), rs(4, 2), rs(6, 3), rs(12, 3), rs(10, 4), CodeSpec::Rep { n: 3 }];
        let (mut planned, mut relocating) = (0, 0);
        for case in 0..600 {
            let (from, to) = (codes[rng.next(7) as usize], codes[rng.next(7) as usize]);
            let width = 1 + rng.next(6) as usize;
            let cell = 1 + rng.next(4);
            let block = cell * (1 + rng.next(4));
            let (old_layout, new_layout) =
                (layout(from, width, cell, block), layout(to, width, cell, block));
            let size = rng.next(60 * block);
            let level = [FailureDomain::Disk, FailureDomain::Node, FailureDomain::Rack]
                [rng.next(3) as usize];
            let nodes = 4 + rng.next(14) as u32;
            let topo =
                topology(nodes, 1 + rng.next(3) as u32, 2 + rng.next(nodes as u64 - 1) as u32);
            let context = format!("case {case}: {from} → {to}, W {width}, size {size}, {level:?}");
            let Ok(old) = place(&old_layout, size, &topo, case, level) else { continue };
            let plan = match plan_regroup(&old, &new_layout, &topo) {
                Ok(plan) => plan,
                Err(LayoutError::TooFewDomains { .. } | LayoutError::NoReplacement { .. }) => {
                    continue
                }
                Err(other) => panic!("{context}: {other}"),
            };
            assert_eq!(plan.new.verify(), Ok(()), "{context}");
            planned += 1;
            relocating += usize::from(!plan.relocations.is_empty());
            // Every data block is in exactly one new group.
            let mut seen = vec![0u32; new_layout.data_blocks(size)];
            for g in 0..new_layout.groups(size) {
                for x in new_layout.group_blocks(size, g) {
                    seen[x] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{context}");
            // Only relocated blocks moved, and each relocation was needed.
            for x in 0..new_layout.data_blocks(size) {
                let (before, after) = (
                    old.disk_of(UnitId::Data(x)).unwrap(),
                    plan.new.disk_of(UnitId::Data(x)).unwrap(),
                );
                let moved = plan.relocations.iter().find(|r| r.block == x);
                match moved {
                    Some(r) => assert_eq!((r.from, r.to), (before, after), "{context}"),
                    None => assert_eq!(before, after, "{context}: block {x} moved unplanned"),
                }
            }
            assert_eq!(plan.delete.len(), old_layout.groups(size) * old_layout.r(), "{context}");
            assert_eq!(plan.create.len(), new_layout.groups(size) * new_layout.r(), "{context}");
            let io = plan.io();
            assert_eq!(io.data_bytes_written, 0);
            assert_eq!(io.bytes_read, size);
        }
        // The cases must exercise both kinds of regroup, not skip them.
        assert!(planned >= 250 && relocating >= 5, "{planned} planned, {relocating} relocating");
    }

    #[test]
    fn okapi_fig8_rs6_to_rs12_saves_about_45_percent_of_restripe_io() {
        // 1 GiB, rs(6,3), stripe width 6, 8 MiB blocks, 1 MiB cells, on 24 nodes: the
        // groups of rs(6,3) were placed on disjoint nodes, so rs(12,3) moves no data.
        let (cell, block) = (1 << 20, 8 << 20);
        let old_layout = layout(rs(6, 3), 6, cell, block);
        let new_layout = layout(rs(12, 3), 6, cell, block);
        let size = 1 << 30;
        let topo = topology(24, 1, 24);
        let old = place(&old_layout, size, &topo, 7, FailureDomain::Node).unwrap();
        let plan = plan_regroup(&old, &new_layout, &topo).unwrap();
        let io = plan.io();
        assert_eq!(io.relocated_bytes, 0, "{:?}", plan.relocations);
        let restripe = restripe_io(&new_layout, size);
        let (d, p) = (size as f64, parity_bytes(&new_layout, size) as f64);
        let ratio = io.total_bytes() as f64 / restripe.total_bytes() as f64;
        assert!((ratio - (d + p) / (2.0 * d + p)).abs() < 1e-9, "{ratio}");
        assert!(ratio < 0.6, "{ratio}");
        // And back: rs(12,3) → rs(6,3) splits each group in two, again without moving data.
        let back = plan_regroup(&plan.new, &old_layout, &topo).unwrap();
        assert!(back.relocations.is_empty(), "{:?}", back.relocations);
    }

    #[test]
    fn regroup_refuses_a_change_of_striping_and_auto_picks_the_mode() {
        let a = layout(rs(6, 3), 2, 4, 16);
        let b = layout(rs(12, 3), 3, 4, 16);
        let topo = topology(20, 1, 20);
        let old = place(&a, 1000, &topo, 1, FailureDomain::Node).unwrap();
        let error = plan_regroup(&old, &b, &topo).unwrap_err();
        assert!(error.to_string().contains("restripe instead"), "{error}");
        assert_eq!(TransitionMode::auto(&a, &b), TransitionMode::Restripe);
        assert_eq!(TransitionMode::auto(&a, &layout(rs(12, 3), 2, 4, 16)), TransitionMode::Regroup);
    }

    #[test]
    fn crowded_regroups_relocate_and_stay_valid() {
        // 12 nodes only: rs(6,3) groups cannot all be disjoint, so rs(12,3) (n = 15 > 12)
        // is refused, while rs(10,2) (n = 12) regroups with relocations that keep the rules.
        let old_layout = layout(rs(6, 3), 2, 4, 16);
        let topo = topology(12, 1, 12);
        let old = place(&old_layout, 40 * 16 + 3, &topo, 3, FailureDomain::Node).unwrap();
        assert!(matches!(
            plan_regroup(&old, &layout(rs(12, 3), 2, 4, 16), &topo),
            Err(LayoutError::TooFewDomains { .. })
        ));
        let plan = plan_regroup(&old, &layout(rs(10, 2), 2, 4, 16), &topo).unwrap();
        assert_eq!(plan.new.verify(), Ok(()));
        assert!(!plan.relocations.is_empty(), "12 nodes cannot hold rs(10,2) groups in place");
        assert!(plan.io().relocated_bytes <= plan.io().bytes_read);
    }
}
