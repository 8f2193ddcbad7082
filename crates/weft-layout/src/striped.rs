//! Okapi's striped layout (FAST'24 §4): stripes and groups decoupled.
//!
//! Terms (DESIGN.md glossary): an object's bytes are cut into *cells* of `cell_bytes`; data
//! *block* x holds `block_bytes` at most; *stripe* s is data blocks `[s·W, s·W + W)` with
//! W = `stripe_width`; *group* g is data blocks `[g·k, g·k + k)` plus r parity blocks.
//!
//! Invariants (S = object size, B = `block_bytes`, C = `cell_bytes`, W = `stripe_width`):
//! - Stripe s holds object bytes `[s·W·B, (s+1)·W·B)`. Inside a stripe, cell c (counted from
//!   the stripe's first byte) is stored in block `s·W + c mod W` at block offset `(c div W)·C`:
//!   cells are dealt round-robin, one row of W cells at a time. This also holds for the last,
//!   partial stripe: its cells are dealt exactly as if the stripe were full and the object simply
//!   ended early, so every prefix of an object is laid out like the object itself (appends never
//!   move bytes).
//! - A data block exists iff it holds at least one byte: `data_blocks(S) = ⌊S / WB⌋·W +
//!   min(W, ⌈(S mod WB) / C⌉)`. Blocks of the last stripe may be shorter than B; within a stripe
//!   block lengths never increase with the block's position (earlier blocks get a cell first).
//! - Block x is in stripe `x / W` and group `x / k`. The last group may hold fewer than k data
//!   blocks; its missing data units are *virtual*: all-zero for coding and never stored.
//! - All units of a group have one length, the *unit length*: the longest data block of the
//!   group, rounded up to the code's unit-length multiple (1 for byte-local codes, α·64 for
//!   Clay). Data blocks are zero-padded to it for coding only (the stored block keeps its
//!   real length); its r parity blocks are stored at the unit length.
//! - Unit u of group g is data block `g·k + u` for u < k, else parity `(g, u − k)`.

use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use weft_codes::CodeSpec;

use crate::LayoutError;

/// Widest stripe: wider stripes spread one read over more disks than a cluster has to give.
pub const MAX_STRIPE_WIDTH: usize = 256;

/// Largest block (1 GiB): a block is rebuilt as one unit, and repair time grows with it.
pub const MAX_BLOCK_BYTES: u64 = 1 << 30;

/// Smallest cell [`StripedLayout::fitted`] shrinks a small object's cells to.
pub const MIN_FITTED_CELL_BYTES: u64 = 4096;

/// How far above its code's promise, (k + r)/k of its bytes, an object of at least one
/// group may be stored before [`StripedLayout::fitted`] shrinks its blocks: 1/32 (3.1%),
/// as (numerator, denominator).
pub const FIT_SLACK: (u128, u128) = (1, 32);

/// Largest object (5 TiB, S3's limit). Keeps every offset computation far from u64 overflow:
/// `MAX_OBJECT_BYTES + MAX_STRIPE_WIDTH · MAX_BLOCK_BYTES` < 2^43.
pub const MAX_OBJECT_BYTES: u64 = 5 << 40;

/// The striped layout of one object: its code and its striping parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StripedLayout {
    /// The code of every group: k data blocks, r parity blocks.
    pub code: CodeSpec,
    /// Data blocks per stripe, W: how many disks one sequential read spreads over.
    pub stripe_width: usize,
    /// Cell size C: the unit of round-robin striping.
    pub cell_bytes: u64,
    /// Block size B: a positive multiple of the cell size.
    pub block_bytes: u64,
}

/// One unit of one object: a data block or a parity block of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UnitId {
    /// Data block x of the object (numbered from 0 across all stripes).
    Data(usize),
    /// Parity block `index` (< r) of group `group`.
    Parity { group: usize, index: usize },
}

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitId::Data(x) => write!(f, "data block {x}"),
            UnitId::Parity { group, index } => write!(f, "parity {index} of group {group}"),
        }
    }
}

impl UnitId {
    /// The short name used on the wire and in unit lists: `d<x>` or `p<group>.<index>`.
    pub fn short_name(&self) -> String {
        match self {
            UnitId::Data(x) => format!("d{x}"),
            UnitId::Parity { group, index } => format!("p{group}.{index}"),
        }
    }

    /// Parses [`UnitId::short_name`]; None for anything else. Only the canonical form is
    /// accepted (no signs, spaces or leading zeros), so a name round-trips exactly.
    pub fn parse_short_name(text: &str) -> Option<UnitId> {
        let number = |digits: &str| -> Option<usize> {
            let canonical = match digits.as_bytes() {
                [] => false,
                [b'0'] => true,
                [first, rest @ ..] => {
                    (b'1'..=b'9').contains(first) && rest.iter().all(u8::is_ascii_digit)
                }
            };
            canonical.then(|| digits.parse().ok()).flatten()
        };
        if let Some(rest) = text.strip_prefix('d') {
            return number(rest).map(UnitId::Data);
        }
        let (group, index) = text.strip_prefix('p')?.split_once('.')?;
        Some(UnitId::Parity { group: number(group)?, index: number(index)? })
    }
}

/// A piece of an object stored contiguously in one data block and contiguous in the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    /// Data block index x.
    pub block: usize,
    /// Offset of the piece inside the block.
    pub block_offset: u64,
    /// Offset of the piece inside the object.
    pub object_offset: u64,
    /// Length in bytes (≥ 1).
    pub len: u64,
}

/// One contiguous read of one data block: all a ranged get needs from that block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRead {
    /// Data block index x.
    pub block: usize,
    /// Offset of the read inside the block.
    pub block_offset: u64,
    /// Bytes to read.
    pub len: u64,
}

impl StripedLayout {
    /// Checks the code and the striping parameters against their limits.
    pub fn validate(&self) -> Result<(), LayoutError> {
        self.code.validate()?;
        if self.stripe_width == 0 || self.stripe_width > MAX_STRIPE_WIDTH {
            return Err(LayoutError::StripeWidth {
                stripe_width: self.stripe_width,
                max: MAX_STRIPE_WIDTH,
            });
        }
        if self.cell_bytes == 0 {
            return Err(LayoutError::CellBytes { cell_bytes: self.cell_bytes });
        }
        if self.block_bytes == 0
            || !self.block_bytes.is_multiple_of(self.cell_bytes)
            || self.block_bytes > MAX_BLOCK_BYTES
        {
            return Err(LayoutError::BlockBytes {
                block_bytes: self.block_bytes,
                cell_bytes: self.cell_bytes,
                max: MAX_BLOCK_BYTES,
            });
        }
        Ok(())
    }

    /// Data units per group.
    pub fn k(&self) -> usize {
        self.code.k()
    }

    /// Parity units per group.
    pub fn r(&self) -> usize {
        self.code.r()
    }

    /// Units per group, n = k + r.
    pub fn n(&self) -> usize {
        self.code.k() + self.code.r()
    }

    /// The layout an object of `object_size` bytes is written with, so that it stores about
    /// what its code promises, (k + r)/k of its bytes, whatever its size.
    ///
    /// - **Under one group (S < k·B)**: this layout, unless either its stripes are narrower
    ///   than a group (W < k), or they are not but the object is still stored less evenly
    ///   than the fitted layout would store it (an object of fewer than k cells fills fewer
    ///   than k blocks however wide its stripes; a stripe of W blocks, W not a multiple of k,
    ///   leaves a group partly filled). Such an object would hold fewer than k data blocks,
    ///   each as long as its parity blocks, and store up to (1 + r)× its bytes. It is written
    ///   instead as one stripe of k blocks (W = k) of ⌈S/k⌉ rounded up to cells of at most a
    ///   sixteenth of that (halving the cell, not below [`MIN_FITTED_CELL_BYTES`]), so its
    ///   cells are dealt over all k blocks and it stores at most about
    ///   (k + r)/k · (1 + 1/16 · r/(k + r)) of its bytes once S ≥ k · 64 KiB. A stripe at
    ///   least a group wide that stores the object as evenly as that keeps it.
    /// - **One group or more**: this layout when it stores the object within
    ///   [`FIT_SLACK`] of the promise (most large objects: only the last group can be
    ///   partly filled). Otherwise (an object of a few groups whose last group holds a few
    ///   blocks but r full parity blocks: 64 MiB in rs(6,3) with 8 MiB blocks is 1.75×) the
    ///   same number of groups, ⌈S/(k·B)⌉, with blocks shrunk to fill them: ⌈S/(groups·k)⌉
    ///   rounded up to cells of at most a sixteenth of that (halved as above), with the
    ///   policy's stripe width or, when that stores less (W not dividing k), stripes a group
    ///   wide. That stores at most about the same bound as above; the policy is kept when
    ///   it stores no more.
    ///
    /// A pure function of the layout and the size: the same object size always fits the
    /// same way, and the layout an object was written with is recorded with it. A fitted
    /// object changes code by a regroup when the new policy differs only in the code (it
    /// keeps its own striping), else by a rewrite fitted to its size.
    pub fn fitted(&self, object_size: u64) -> StripedLayout {
        let k = self.k() as u64;
        if object_size >= k * self.block_bytes {
            return self.fitted_to_groups(object_size);
        }
        let per_block = object_size.div_ceil(k).max(1);
        let cell = self.fitted_cell(per_block);
        let block = per_block.div_ceil(cell) * cell;
        let fitted = StripedLayout {
            stripe_width: self.k(),
            cell_bytes: cell,
            block_bytes: block.min(self.block_bytes),
            ..*self
        };
        // Under k blocks the object has at most W + k units: cheap to count.
        if self.stripe_width as u64 >= k
            && self.stored_bytes(object_size) <= fitted.stored_bytes(object_size)
        {
            return *self;
        }
        fitted
    }

    /// [`StripedLayout::fitted`] for an object of at least one group (S ≥ k·B).
    fn fitted_to_groups(&self, object_size: u64) -> StripedLayout {
        let (k, r) = (self.k() as u128, self.r() as u128);
        let promised = object_size as u128 * (k + r) / k;
        let own = u128::from(self.stored_bytes(object_size));
        if own * FIT_SLACK.1 <= promised * (FIT_SLACK.1 + FIT_SLACK.0) {
            return *self;
        }
        let k = self.k() as u64;
        let groups = object_size.div_ceil(k * self.block_bytes);
        let per_block = object_size.div_ceil(groups * k);
        let cell = self.fitted_cell(per_block);
        // B is a multiple of the policy's cell, hence of this one: the block stays ≤ B.
        let block = per_block.div_ceil(cell) * cell;
        // Stripes of the policy's width keep its reads' spread; stripes a group wide fill
        // groups exactly even when W does not divide k (the last stripe's cells are dealt
        // over W blocks, which may start a group of their own). The least stored wins, the
        // policy's width on a tie.
        [self.stripe_width, self.k()]
            .map(|stripe_width| StripedLayout {
                stripe_width,
                cell_bytes: cell,
                block_bytes: block,
                ..*self
            })
            .into_iter()
            .map(|fitted| (u128::from(fitted.stored_bytes(object_size)), fitted))
            .filter(|(stored, _)| *stored < own)
            .min_by_key(|(stored, _)| *stored)
            .map_or(*self, |(_, fitted)| fitted)
    }

    /// The cell of a fitted layout whose blocks hold about `per_block` bytes: the policy's
    /// cell halved while it is above a sixteenth of that, and not below
    /// [`MIN_FITTED_CELL_BYTES`] (an odd cell is kept).
    fn fitted_cell(&self, per_block: u64) -> u64 {
        let mut cell = self.cell_bytes;
        while cell.is_multiple_of(2) && cell / 2 >= MIN_FITTED_CELL_BYTES && cell * 16 > per_block {
            cell /= 2;
        }
        cell
    }

    /// Bytes every stored unit of an object of `object_size` holds, summed (data blocks at
    /// their real length, parity blocks at their group's unit length; unit headers not
    /// counted). Groups wholly inside full stripes are counted at once (k blocks of B and r
    /// parity blocks of B rounded up to the coding multiple); only the groups meeting the
    /// last, partial stripe are walked unit by unit.
    pub fn stored_bytes(&self, object_size: u64) -> u64 {
        let groups = self.groups(object_size);
        if groups == 0 {
            return 0;
        }
        let (k, r) = (self.k() as u64, self.r() as u64);
        let full_blocks = (object_size / self.stripe_bytes()) * self.stripe_width as u64;
        let full_groups = ((full_blocks / k) as usize).min(groups);
        let parity_len = self.block_bytes.next_multiple_of(self.coding_multiple());
        let full = full_groups as u64 * (k * self.block_bytes + r * parity_len);
        full + (full_groups..groups)
            .flat_map(|g| self.group_units(object_size, g))
            .map(|unit| self.stored_len(object_size, unit))
            .sum::<u64>()
    }

    /// Object bytes a full stripe holds: W · B.
    pub fn stripe_bytes(&self) -> u64 {
        self.stripe_width as u64 * self.block_bytes
    }

    /// Cells per full block: B / C.
    pub fn cells_per_block(&self) -> u64 {
        self.block_bytes / self.cell_bytes
    }

    fn assert_offset(&self, offset: u64) {
        assert!(
            offset <= MAX_OBJECT_BYTES,
            "offset {offset} beyond the largest object ({MAX_OBJECT_BYTES} bytes)"
        );
        debug_assert!(self.validate().is_ok(), "layout used before validate: {self:?}");
    }

    /// Where object byte `offset` is stored: (data block x, offset inside block x).
    /// Does not depend on the object's size (a prefix is laid out like the whole).
    pub fn locate(&self, offset: u64) -> (usize, u64) {
        self.assert_offset(offset);
        let stripe = offset / self.stripe_bytes();
        let within = offset % self.stripe_bytes();
        let cell = within / self.cell_bytes;
        let width = self.stripe_width as u64;
        let block = stripe * width + cell % width;
        let block_offset = (cell / width) * self.cell_bytes + within % self.cell_bytes;
        (to_usize(block), block_offset)
    }

    /// Number of data blocks of an object of `object_size` bytes: blocks holding ≥ 1 byte.
    pub fn data_blocks(&self, object_size: u64) -> usize {
        self.assert_offset(object_size);
        let full = object_size / self.stripe_bytes();
        let rest = object_size % self.stripe_bytes();
        let width = self.stripe_width as u64;
        to_usize(full * width + width.min(rest.div_ceil(self.cell_bytes)))
    }

    /// Bytes of the object stored in data block x (0 when block x does not exist).
    pub fn block_len(&self, object_size: u64, block: usize) -> u64 {
        self.assert_offset(object_size);
        let width = self.stripe_width as u64;
        let stripe_start = (block as u64 / width).saturating_mul(self.stripe_bytes());
        if object_size <= stripe_start {
            return 0;
        }
        let rest = object_size - stripe_start;
        if rest >= self.stripe_bytes() {
            return self.block_bytes;
        }
        let position = block as u64 % width;
        let full_cells = rest / self.cell_bytes;
        let partial = rest % self.cell_bytes;
        let (rows, extra) = (full_cells / width, full_cells % width);
        let last = match position.cmp(&extra) {
            std::cmp::Ordering::Less => self.cell_bytes,
            std::cmp::Ordering::Equal => partial,
            std::cmp::Ordering::Greater => 0,
        };
        rows * self.cell_bytes + last
    }

    /// The cell extents stored in data block x, in block order (= object order), clipped to
    /// the object's size; pieces contiguous in both block and object are merged (W = 1).
    pub fn block_extents(&self, object_size: u64, block: usize) -> Vec<Extent> {
        self.assert_offset(object_size);
        let width = self.stripe_width as u64;
        let stripe_start = (block as u64 / width) * self.stripe_bytes();
        let position = block as u64 % width;
        let mut extents: Vec<Extent> = Vec::new();
        for row in 0..self.cells_per_block() {
            let object_offset = stripe_start + (row * width + position) * self.cell_bytes;
            if object_offset >= object_size {
                break;
            }
            let len = self.cell_bytes.min(object_size - object_offset);
            push_merged(
                &mut extents,
                Extent { block, block_offset: row * self.cell_bytes, object_offset, len },
            );
        }
        extents
    }

    /// The pieces of object bytes `[object_offset, object_offset + len)`, in object order, each
    /// contiguous in one block and in the object (neighbouring cells of one block merge when W = 1).
    /// The range is not clipped to any object size: the caller clips to the object first.
    pub fn extents(&self, object_offset: u64, len: u64) -> Vec<Extent> {
        let end = object_offset.checked_add(len).expect("range end overflows u64");
        self.assert_offset(end);
        let mut extents: Vec<Extent> = Vec::new();
        let mut at = object_offset;
        // Bounded: each pass consumes at least one byte and at most one cell.
        while at < end {
            let (block, block_offset) = self.locate(at);
            let piece = (self.cell_bytes - at % self.cell_bytes).min(end - at);
            push_merged(
                &mut extents,
                Extent { block, block_offset, object_offset: at, len: piece },
            );
            at += piece;
        }
        extents
    }

    /// One contiguous read per data block covering `[object_offset, object_offset + len)`,
    /// sorted by block. Within one stripe, the cells of one block that fall in a contiguous
    /// object range are consecutive rows, so each block's pieces are contiguous in the block
    /// and the read carries no unwanted bytes.
    pub fn block_reads(&self, object_offset: u64, len: u64) -> Vec<BlockRead> {
        let mut extents = self.extents(object_offset, len);
        extents.sort_by_key(|e| (e.block, e.block_offset));
        let mut reads: Vec<BlockRead> = Vec::new();
        for extent in extents {
            match reads.last_mut() {
                Some(read) if read.block == extent.block => {
                    assert_eq!(
                        read.block_offset + read.len,
                        extent.block_offset,
                        "pieces of one block in a contiguous range must be contiguous"
                    );
                    read.len += extent.len;
                }
                _ => reads.push(BlockRead {
                    block: extent.block,
                    block_offset: extent.block_offset,
                    len: extent.len,
                }),
            }
        }
        reads
    }

    /// Stripe of data block x: x / W.
    pub fn stripe_of(&self, block: usize) -> usize {
        block / self.stripe_width
    }

    /// Group of data block x: x / k.
    pub fn group_of(&self, block: usize) -> usize {
        block / self.k()
    }

    /// Number of stripes of the object (the last may be partial).
    pub fn stripes(&self, object_size: u64) -> usize {
        self.data_blocks(object_size).div_ceil(self.stripe_width)
    }

    /// Number of groups of the object (the last may have fewer than k data blocks).
    pub fn groups(&self, object_size: u64) -> usize {
        self.data_blocks(object_size).div_ceil(self.k())
    }

    /// The stored data blocks of stripe s (empty past the object's end).
    pub fn stripe_blocks(&self, object_size: u64, stripe: usize) -> Range<usize> {
        let blocks = self.data_blocks(object_size);
        let start = (stripe * self.stripe_width).min(blocks);
        start..((stripe + 1) * self.stripe_width).min(blocks)
    }

    /// The stored data blocks of group g (fewer than k for the last group; its other data
    /// units are virtual zero blocks; empty past the object's end).
    pub fn group_blocks(&self, object_size: u64, group: usize) -> Range<usize> {
        let blocks = self.data_blocks(object_size);
        let start = (group * self.k()).min(blocks);
        start..((group + 1) * self.k()).min(blocks)
    }

    /// Unit length of group g: the longest data block of the group, rounded up to the code's
    /// [`StripedLayout::coding_multiple`]; every parity block of the group has this length, and
    /// data blocks are zero-padded to it for coding.
    pub fn unit_len(&self, object_size: u64, group: usize) -> u64 {
        let longest = self
            .group_blocks(object_size, group)
            .map(|block| self.block_len(object_size, block))
            .max()
            .unwrap_or(0);
        longest.next_multiple_of(self.coding_multiple())
    }

    /// Unit lengths of this layout's code must be a multiple of this many bytes (1 for
    /// byte-local codes such as rs; 2 for Hitchhiker; α·64 for Clay).
    pub fn coding_multiple(&self) -> u64 {
        let code = self.code.build().expect("a validated layout's code builds");
        code.unit_len_multiple() as u64
    }

    /// Unit u (< n) of group g: data block g·k + u for u < k, else parity (g, u − k). A data
    /// unit past the object's last block is virtual (zeros, not stored).
    pub fn unit(&self, group: usize, unit: usize) -> UnitId {
        assert!(unit < self.n(), "unit {unit} of a group of {} units", self.n());
        if unit < self.k() {
            UnitId::Data(group * self.k() + unit)
        } else {
            UnitId::Parity { group, index: unit - self.k() }
        }
    }

    /// (group, position in group) of a unit: the inverse of [`StripedLayout::unit`].
    pub fn unit_position(&self, unit: UnitId) -> (usize, usize) {
        match unit {
            UnitId::Data(block) => (block / self.k(), block % self.k()),
            UnitId::Parity { group, index } => {
                assert!(index < self.r(), "parity index {index} with r = {}", self.r());
                (group, self.k() + index)
            }
        }
    }

    /// The stored units of group g: its existing data blocks, then its r parity blocks.
    pub fn group_units(&self, object_size: u64, group: usize) -> Vec<UnitId> {
        let data = self.group_blocks(object_size, group);
        if data.is_empty() {
            return Vec::new();
        }
        data.map(UnitId::Data)
            .chain((0..self.r()).map(|index| UnitId::Parity { group, index }))
            .collect()
    }

    /// Stored length of a unit: a data block's real length, a parity block's unit length.
    pub fn stored_len(&self, object_size: u64, unit: UnitId) -> u64 {
        match unit {
            UnitId::Data(block) => self.block_len(object_size, block),
            UnitId::Parity { group, .. } => self.unit_len(object_size, group),
        }
    }
}

/// Most bytes a writing client holds in memory with Okapi's partial parities (§4.3):
/// `r · block_bytes + k · cell_bytes`.
///
/// What it models: data is written stripe after stripe, row by row. A group wholly inside the
/// current stripe completes a parity row as soon as its k cells of that row are in, so it needs
/// only one row of k cells (or their partial sums). A group that crosses a stripe boundary
/// cannot finish any parity row until the next stripe reaches that row, so its r parity blocks
/// are kept as partial parities, up to `block_bytes` each. At most one group crosses each
/// stripe boundary, and while the current stripe is written the group coming in from the
/// previous stripe frees rows as fast as the one leaving for the next stripe fills them, so
/// r blocks of partial parity plus one row of k cells bound the total. The written data cells
/// themselves are never buffered.
pub fn max_client_buffer_bytes(layout: &StripedLayout) -> u64 {
    layout.r() as u64 * layout.block_bytes + layout.k() as u64 * layout.cell_bytes
}

/// Bytes a client without partial parities holds for one group: all k data blocks until the
/// group is complete, plus its r parity blocks, `(k + r) · block_bytes`.
pub fn naive_group_buffer_bytes(layout: &StripedLayout) -> u64 {
    layout.n() as u64 * layout.block_bytes
}

fn push_merged(extents: &mut Vec<Extent>, next: Extent) {
    if let Some(last) = extents.last_mut() {
        if last.block == next.block
            && last.block_offset + last.len == next.block_offset
            && last.object_offset + last.len == next.object_offset
        {
            last.len += next.len;
            return;
        }
    }
    extents.push(next);
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).expect("block index fits in usize for objects within MAX_OBJECT_BYTES")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_bytes(layout: &StripedLayout, size: u64) -> u64 {
        layout.stored_bytes(size)
    }

    #[test]
    fn small_objects_are_fitted_to_k_blocks_and_store_what_their_code_promises() {
        let policy = |code: &str, width: usize, cell: u64, block: u64| StripedLayout {
            code: code.parse().unwrap(),
            stripe_width: width,
            cell_bytes: cell,
            block_bytes: block,
        };
        let policies = [
            policy("rs(6,3)", 2, 1 << 20, 8 << 20),
            policy("rs(9,3)", 1, 1 << 20, 4 << 20),
            policy("rs(10,4)", 3, 256 << 10, 1 << 20),
            policy("rs(2,1)", 1, 64 << 10, 256 << 10),
            // Stripes at least a group wide: a small object still has few cells, and a
            // stripe of W blocks (W not a multiple of k) leaves a group partly filled.
            policy("rs(2,1)", 2, 1 << 20, 8 << 20),
            policy("rs(4,2)", 4, 1 << 20, 8 << 20),
            policy("rs(9,3)", 12, 1 << 20, 8 << 20),
        ];
        for layout in policies {
            let (k, r) = (layout.k() as f64, layout.r() as f64);
            let promise = (k + r) / k;
            let mut size = layout.k() as u64 * (64 << 10);
            while size < layout.k() as u64 * layout.block_bytes {
                let fitted = layout.fitted(size);
                fitted.validate().unwrap();
                assert_eq!(fitted.code, layout.code);
                assert!(fitted.stripe_width >= layout.stripe_width.min(layout.k()));
                assert!(fitted.block_bytes <= layout.block_bytes);
                assert_eq!(fitted, layout.fitted(size), "a pure function of the size");
                let ratio = stored_bytes(&fitted, size) as f64 / size as f64;
                assert!(
                    ratio <= promise * 1.05,
                    "{layout:?} at {size} B stores {ratio:.3}×, promised {promise:.3}×"
                );
                // Unfitted, the smallest objects paid up to (1 + r)×.
                size = size * 5 / 4 + 4093;
            }
            // An object of a group or more keeps the policy when that stores it within the
            // slack (so regroups keep its striping), else its blocks shrink to fill its
            // groups: either way it stores what the code promises.
            let big = layout.k() as u64 * layout.block_bytes;
            let mut size = big;
            while size < 40 * big {
                let fitted = layout.fitted(size);
                fitted.validate().unwrap();
                assert_eq!(fitted.code, layout.code);
                assert!([layout.stripe_width, layout.k()].contains(&fitted.stripe_width));
                assert!(fitted.block_bytes <= layout.block_bytes);
                assert!(fitted.groups(size) <= layout.groups(size), "{layout:?} at {size}");
                let ratio = stored_bytes(&fitted, size) as f64 / size as f64;
                assert!(
                    ratio <= promise * 1.05,
                    "{layout:?} at {size} B stores {ratio:.3}×, promised {promise:.3}×"
                );
                let own = stored_bytes(&layout, size) as f64 / size as f64;
                if own <= promise * (1.0 + 1.0 / 32.0) {
                    assert_eq!(fitted, layout, "{layout:?} at {size} B stores {own:.3}×");
                }
                size = size * 9 / 8 + 65_521;
            }
        }
        // A 64 MiB object in the default policy was two groups, six 8 MiB blocks then two,
        // with six 8 MiB parity blocks: 1.75×. Fitted, its blocks fill both groups.
        let default = policies[0];
        assert_eq!(stored_bytes(&default, 64 << 20), 112 << 20);
        let fitted = default.fitted(64 << 20);
        assert_eq!((fitted.cell_bytes, fitted.block_bytes), (256 << 10, 5632 << 10));
        assert!(stored_bytes(&fitted, 64 << 20) <= 97 << 20);
        // The case that motivated it: 1 MiB in rs(9,3) with 1 MiB cells was 4 MiB on disk.
        let old = policy("rs(9,3)", 1, 1 << 20, 4 << 20);
        assert_eq!(stored_bytes(&old, 1 << 20), 4 << 20);
        assert!(stored_bytes(&old.fitted(1 << 20), 1 << 20) <= (1 << 20) * 14 / 10);
        // Stripes at least as wide as a group: 1 MiB is one 1 MiB cell, one data block
        // and two parity blocks (3×) unless fitted; an object they already spread evenly
        // (whole rows of k cells) keeps the policy.
        let wide = policy("rs(4,2)", 4, 1 << 20, 8 << 20);
        assert_eq!(stored_bytes(&wide, 1 << 20), 3 << 20);
        assert_eq!(wide.fitted(1 << 20).stripe_width, 4);
        assert!(stored_bytes(&wide.fitted(1 << 20), 1 << 20) <= (1 << 20) * 16 / 10);
        assert_eq!(wide.fitted(20 << 20), wide);
        // Tiny objects get the smallest cell, never a zero block.
        let tiny = policies[0].fitted(1);
        assert_eq!(
            (tiny.cell_bytes, tiny.block_bytes),
            (MIN_FITTED_CELL_BYTES, MIN_FITTED_CELL_BYTES)
        );
        assert_eq!(policies[0].fitted(0), policies[0].fitted(1));
    }

    #[test]
    fn stored_bytes_counted_at_once_equal_the_units_summed() {
        let walk = |layout: &StripedLayout, size: u64| -> u64 {
            (0..layout.groups(size))
                .flat_map(|g| layout.group_units(size, g))
                .map(|unit| layout.stored_len(size, unit))
                .sum()
        };
        for (code, width, cell, block) in [
            ("rs(6,3)", 2, 1u64 << 20, 8u64 << 20),
            ("rs(9,3)", 12, 1 << 20, 8 << 20),
            ("rs(4,2)", 7, 64 << 10, 192 << 10),
            ("rs(2,1)", 1, 4096, 4096),
            ("clay(4,2)", 3, 64 << 10, 256 << 10),
        ] {
            let layout = StripedLayout {
                code: code.parse().unwrap(),
                stripe_width: width,
                cell_bytes: cell,
                block_bytes: block,
            };
            let mut size = 0u64;
            while size < 30 * layout.k() as u64 * block {
                assert_eq!(layout.stored_bytes(size), walk(&layout, size), "{layout:?} at {size}");
                size = size * 5 / 4 + 4099;
            }
        }
    }

    #[test]
    fn unit_short_names_round_trip_and_reject_junk() {
        for unit in [
            UnitId::Data(0),
            UnitId::Data(123_456),
            UnitId::Parity { group: 0, index: 0 },
            UnitId::Parity { group: 77, index: 3 },
        ] {
            assert_eq!(UnitId::parse_short_name(&unit.short_name()), Some(unit));
        }
        assert_eq!(UnitId::Parity { group: 1, index: 2 }.short_name(), "p1.2");
        for junk in
            ["", "d", "p", "p1", "p1.", "p.1", "d-1", "d+1", "d 1", "x1", "p1.2.3", "d1a", "d01"]
        {
            assert_eq!(UnitId::parse_short_name(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn unit_len_pads_to_the_codes_multiple() {
        let clay = StripedLayout {
            code: CodeSpec::Clay { k: 4, r: 2, d: 5 },
            stripe_width: 2,
            cell_bytes: 1000,
            block_bytes: 4000,
        };
        clay.validate().unwrap();
        let multiple = clay.coding_multiple();
        assert!(multiple > 64, "clay needs α·64, got {multiple}");
        let len = clay.unit_len(10_000, 0);
        assert_eq!(len % multiple, 0);
        assert!(len >= 4000 && len < 4000 + multiple);
        // Byte-local rs pads nothing.
        let rs = layout(4, 2, 2, 1000, 4000);
        assert_eq!(rs.unit_len(2500, 0), rs.block_len(2500, 0));
    }

    fn layout(k: usize, r: usize, width: usize, cell: u64, block: u64) -> StripedLayout {
        StripedLayout {
            code: CodeSpec::Rs { k, r },
            stripe_width: width,
            cell_bytes: cell,
            block_bytes: block,
        }
    }

    #[test]
    fn okapi_figure_4() {
        // 96 MB striped 4-wide, 8 MB blocks, 1 MB cells, 6-of-8 groups: 12 blocks, 3 stripes,
        // 2 groups; block 5 is in stripe 1 and group 0.
        let mib = 1 << 20;
        let layout = layout(6, 2, 4, mib, 8 * mib);
        layout.validate().unwrap();
        assert_eq!(layout.data_blocks(96 * mib), 12);
        assert_eq!(layout.stripes(96 * mib), 3);
        assert_eq!(layout.groups(96 * mib), 2);
        assert_eq!((layout.stripe_of(5), layout.group_of(5)), (1, 0));
        assert_eq!(layout.locate(33 * mib + 7), (5, 7));
        assert_eq!(layout.unit(1, 7), UnitId::Parity { group: 1, index: 1 });
        assert_eq!(layout.unit_position(UnitId::Data(7)), (1, 1));
    }

    #[test]
    fn bad_layouts_are_refused() {
        assert!(matches!(layout(4, 2, 0, 1, 1).validate(), Err(LayoutError::StripeWidth { .. })));
        assert!(matches!(layout(4, 2, 257, 1, 1).validate(), Err(LayoutError::StripeWidth { .. })));
        assert!(matches!(layout(4, 2, 4, 0, 1).validate(), Err(LayoutError::CellBytes { .. })));
        assert!(matches!(layout(4, 2, 4, 2, 3).validate(), Err(LayoutError::BlockBytes { .. })));
        assert!(matches!(layout(4, 2, 4, 2, 0).validate(), Err(LayoutError::BlockBytes { .. })));
        let too_big = layout(4, 2, 4, 1, MAX_BLOCK_BYTES * 2);
        assert!(matches!(too_big.validate(), Err(LayoutError::BlockBytes { .. })));
        assert!(matches!(layout(0, 2, 4, 1, 1).validate(), Err(LayoutError::Code(_))));
        let message = layout(4, 2, 4, 2, 3).validate().unwrap_err().to_string();
        assert!(message.contains("multiple of the cell size (2 bytes)"), "{message}");
    }

    #[test]
    fn buffer_figures() {
        let mib = 1 << 20;
        let layout = layout(6, 2, 4, mib, 8 * mib);
        assert_eq!(max_client_buffer_bytes(&layout), 2 * 8 * mib + 6 * mib);
        assert_eq!(naive_group_buffer_bytes(&layout), 8 * 8 * mib);
    }

    #[test]
    fn layout_serialises_with_the_code_name() {
        let layout = layout(6, 3, 4, 1, 4);
        let json = serde_json::to_string(&layout).unwrap();
        assert!(json.contains("\"rs(6,3)\""), "{json}");
        assert_eq!(serde_json::from_str::<StripedLayout>(&json).unwrap(), layout);
    }
}
