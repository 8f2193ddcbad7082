//! weft's erasure codes, all behind one [`Code`] trait.
//!
//! Invariants every code keeps:
//! - Systematic: units `0..k` are the data, units `k..n` the parity, n = k + r.
//! - Linear over GF(2^8): parity of a sum is the sum of parities, which is what makes
//!   [`Code::encode_add`] (Okapi's partial parities) and [`Code::update`] (delta parity) exact.
//! - Deterministic and byte-identical to ISA-L for `rs` (same Cauchy matrix, same field), so
//!   any coder can decode what any other encoded with no per-unit record of who encoded it.
//! - [`Code::repair`] reads only the bytes its [`RepairPlan`] names: a plan is a promise about
//!   IO, and tests check it by feeding garbage outside the plan.
//! - Operations validate counts and lengths first and return [`CodeError`] without touching
//!   any output when the input is wrong.

use std::fmt;

mod checks;
mod clay;
mod error;
mod hitchhiker;
mod linear;
mod lrc;
mod spec;

pub use error::CodeError;
pub use linear::{LinearCode, MAX_CACHED_DECODINGS};
pub use spec::{
    clay_sub_chunks, CodeParts, CodeSpec, KNOWN_FAMILIES, MAX_SUB_CHUNKS, MAX_TOTAL_UNITS,
};

/// Bytes of scratch a delta update works through at a time (bounded memory for any unit size).
pub const UPDATE_CHUNK_BYTES: usize = 64 * 1024;

/// One contiguous byte range of one unit that a repair reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadRange {
    pub unit: usize,
    pub offset: usize,
    pub len: usize,
}

/// Exactly which bytes rebuilding one unit reads, in the order [`Code::repair`] expects them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepairPlan {
    /// The unit being rebuilt.
    pub target: usize,
    /// Length of every unit of the group.
    pub unit_len: usize,
    /// Ranges to read, grouped by unit in ascending unit order.
    pub reads: Vec<ReadRange>,
}

impl RepairPlan {
    /// Total bytes the plan reads.
    pub fn bytes_read(&self) -> usize {
        self.reads.iter().map(|r| r.len).sum()
    }

    /// The distinct units the plan reads from, ascending.
    pub fn helpers(&self) -> Vec<usize> {
        let mut units: Vec<usize> = self.reads.iter().map(|r| r.unit).collect();
        units.sort_unstable();
        units.dedup();
        units
    }
}

/// A systematic linear erasure code over GF(2^8).
///
/// All unit slices of one call have the same length, a multiple of
/// [`Code::unit_len_multiple`]. Integrity is not this trait's job: a unit handed in as present
/// is trusted, so callers verify checksums first and pass corrupt units as missing.
pub trait Code: Send + Sync + fmt::Debug {
    /// The code's name and parameters.
    fn spec(&self) -> CodeSpec;

    /// k: number of data units.
    fn data_units(&self) -> usize;

    /// r: number of parity units.
    fn parity_units(&self) -> usize;

    /// n = k + r.
    fn total_units(&self) -> usize {
        self.data_units() + self.parity_units()
    }

    /// α: sub-chunks per unit (1 for RS).
    fn sub_chunks(&self) -> usize {
        1
    }

    /// Whether byte i of every unit depends only on byte i of the other units (true for
    /// α = 1 codes such as RS, LRC and rep; false for sub-chunked codes such as Hitchhiker and
    /// Clay). When true, callers may code any byte range of a group on its own: stream in
    /// windows, treat a corrupt segment as lost for that segment only, repair a window at a
    /// time. The default is the safe answer.
    fn byte_local(&self) -> bool {
        false
    }

    /// Unit lengths must be a multiple of this many bytes.
    fn unit_len_multiple(&self) -> usize {
        self.sub_chunks()
    }

    /// Checks a unit length against [`Code::unit_len_multiple`].
    fn check_unit_len(&self, len: usize) -> Result<(), CodeError> {
        let multiple = self.unit_len_multiple();
        if !len.is_multiple_of(multiple) {
            return Err(CodeError::UnitLengthMultiple {
                code: self.spec().to_string(),
                len,
                multiple,
            });
        }
        Ok(())
    }

    /// The smallest valid unit length that holds `object_len / k` bytes (rounded up). It is
    /// 0 for an empty object; callers that need a non-empty unit round up to
    /// [`Code::unit_len_multiple`].
    fn unit_len_for(&self, object_len: usize) -> usize {
        let per_unit = object_len.div_ceil(self.data_units());
        per_unit.div_ceil(self.unit_len_multiple()) * self.unit_len_multiple()
    }

    /// Computes all r parity units from the k data units.
    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError>;

    /// Adds data unit `data_index`'s contribution into parity accumulators (that started at
    /// zero). Adding every data unit once, in any order, gives what [`Code::encode`] gives.
    fn encode_add(
        &self,
        data_index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError>;

    /// Updates parity after data unit `data_index` changed from `old` to `new`:
    /// parity += f(old ⊕ new). Works for any linear code; codes whose sub-chunks are
    /// byte-local override it to work in bounded memory.
    fn update(
        &self,
        data_index: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        if old.len() != new.len() {
            return Err(CodeError::UnitLength {
                unit: data_index,
                len: new.len(),
                expected: old.len(),
            });
        }
        let delta: Vec<u8> = old.iter().zip(new).map(|(a, b)| a ^ b).collect();
        self.encode_add(data_index, &delta, parity)
    }

    /// Whether the units in `lost` can all be recovered from the others.
    fn is_decodable(&self, lost: &[usize]) -> bool;

    /// Computes the units listed in `wanted` into `out` (same order) from the present units
    /// (`units[i]` is `None` when unit i is missing). `units.len()` must be n.
    fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), CodeError>;

    /// Rebuilds the units listed in `lost` in place; the other units must be intact.
    fn decode(&self, units: &mut [&mut [u8]], lost: &[usize]) -> Result<(), CodeError> {
        let n = self.total_units();
        if units.len() != n {
            return Err(CodeError::UnitCount { what: "units", expected: n, got: units.len() });
        }
        let mut wanted: Vec<usize> = lost.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        if let Some(&index) = wanted.iter().find(|&&i| i >= n) {
            return Err(CodeError::UnitIndex { index, total: n });
        }
        let mut present: Vec<Option<&[u8]>> = vec![None; n];
        let mut outputs: Vec<&mut [u8]> = Vec::with_capacity(wanted.len());
        for (i, unit) in units.iter_mut().enumerate() {
            if wanted.binary_search(&i).is_ok() {
                outputs.push(&mut **unit);
            } else {
                present[i] = Some(&**unit);
            }
        }
        self.reconstruct(&present, &wanted, &mut outputs)
    }

    /// Which byte ranges of which units rebuilding `target` reads, avoiding the units in
    /// `unavailable`.
    fn repair_plan(
        &self,
        target: usize,
        unavailable: &[usize],
        unit_len: usize,
    ) -> Result<RepairPlan, CodeError>;

    /// Rebuilds `plan.target` into `out` from `reads`, which hold the bytes of `plan.reads`
    /// in the same order. Reads nothing else.
    fn repair(&self, plan: &RepairPlan, reads: &[&[u8]], out: &mut [u8]) -> Result<(), CodeError>;
}
