//! weft-layout: where an object's bytes live. Pure functions only: no IO, no threads, no
//! clocks, no randomness, so the client, the metadata service and the simulator compute the
//! same answer from the same inputs.
//!
//! - [`striped`]: Okapi's decoupled layout. Cells go round-robin over the `stripe_width` data
//!   blocks of a stripe (the IO knob); every `k` consecutive data blocks plus `r` parity blocks
//!   form a group (the durability knob). Groups are computed, never stored.
//! - [`transition`]: changing an object's code: regroup (new parity over the data in place)
//!   or restripe (rewrite), with the IO each costs.
//! - [`placement`]: which disk holds each unit, deterministically from (layout, object size,
//!   topology, seed, failure-domain level), keeping the blocks of a stripe and the units of a
//!   group on distinct failure domains.
//! - [`geometric`]: RCStor's geometric partitioning: objects cut into a front and chunks of
//!   sizes s0·q^i (Algorithm 1), chunks of one size from different objects coded together in
//!   bins of a placement group, the placement groups themselves, and the per-object record.
//! - [`superchunk`]: RAIDP's map of mirrored superchunks (1-mirroring, 1-sharing) and its
//!   recoveries: receivers by minimum-cost matching or naive choice, Lstor rebuild sources.
//!
//! Invariants kept by the whole crate:
//! - Every answer is a function of its arguments alone (same inputs, same output, any process).
//! - A layout must pass [`StripedLayout::validate`] before any other method is used on it;
//!   methods assert what they rely on rather than return nonsense.

pub mod error;
pub mod geometric;
pub mod placement;
pub mod striped;
pub mod superchunk;
pub mod transition;

pub use error::LayoutError;
pub use geometric::{GeoPlace, GeometricPolicy, Partition};
pub use placement::{
    min_domains_for_disjoint_groups, pattern_period, place, seed_for_turn, DiskLocation, DomainId,
    FailureDomain, Placement, Relocation, Topology, MAX_OBJECT_BLOCKS, MAX_TOPOLOGY_DISKS,
    PATTERN_UNITS,
};
pub use striped::{
    max_client_buffer_bytes, naive_group_buffer_bytes, BlockRead, Extent, StripedLayout, UnitId,
    FIT_SLACK, MAX_BLOCK_BYTES, MAX_OBJECT_BYTES, MAX_STRIPE_WIDTH, MIN_FITTED_CELL_BYTES,
};
pub use transition::{
    parity_bytes, plan_regroup, restripe_io, PlannedUnit, RegroupPlan, TransitionIo, TransitionMode,
};
