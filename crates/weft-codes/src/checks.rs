//! Argument checks every code runs before computing: one place, so every code refuses the
//! same bad input with the same error, and no output is touched before they pass.

use crate::{Code, CodeError, RepairPlan};

/// Every (unit, len) must equal `expected`.
pub(crate) fn lengths(
    lengths: impl Iterator<Item = (usize, usize)>,
    expected: usize,
) -> Result<(), CodeError> {
    for (unit, len) in lengths {
        if len != expected {
            return Err(CodeError::UnitLength { unit, len, expected });
        }
    }
    Ok(())
}

/// `index` must name a unit of an n-unit code.
pub(crate) fn index(index: usize, total: usize) -> Result<(), CodeError> {
    if index >= total {
        return Err(CodeError::UnitIndex { index, total });
    }
    Ok(())
}

/// r parity buffers of `len` bytes each.
pub(crate) fn parity(code: &dyn Code, parity: &[&mut [u8]], len: usize) -> Result<(), CodeError> {
    let (k, r) = (code.data_units(), code.parity_units());
    if parity.len() != r {
        return Err(CodeError::UnitCount { what: "parity units", expected: r, got: parity.len() });
    }
    lengths(parity.iter().enumerate().map(|(i, p)| (k + i, p.len())), len)
}

/// The arguments of [`Code::reconstruct`]: n entries, one output per wanted unit, wanted units
/// in range, equal lengths that fit the code's layout. Returns the present units (ascending)
/// and the unit length.
pub(crate) fn reconstruct(
    code: &dyn Code,
    units: &[Option<&[u8]>],
    wanted: &[usize],
    out: &[&mut [u8]],
) -> Result<(Vec<usize>, usize), CodeError> {
    let n = code.total_units();
    if units.len() != n {
        return Err(CodeError::UnitCount { what: "units", expected: n, got: units.len() });
    }
    if out.len() != wanted.len() {
        return Err(CodeError::UnitCount {
            what: "output buffers",
            expected: wanted.len(),
            got: out.len(),
        });
    }
    for &w in wanted {
        index(w, n)?;
    }
    let present: Vec<usize> = (0..n).filter(|&i| units[i].is_some()).collect();
    let len = present
        .first()
        .map(|&i| units[i].map_or(0, |u| u.len()))
        .or(out.first().map(|o| o.len()))
        .unwrap_or(0);
    lengths(present.iter().map(|&i| (i, units[i].map_or(0, |u| u.len()))), len)?;
    lengths(wanted.iter().zip(out.iter()).map(|(&w, o)| (w, o.len())), len)?;
    code.check_unit_len(len)?;
    Ok((present, len))
}

/// The arguments of [`Code::repair_plan`]: target and unavailable units in range, a unit
/// length that fits the code's layout.
pub(crate) fn repair_plan(
    code: &dyn Code,
    target: usize,
    unavailable: &[usize],
    unit_len: usize,
) -> Result<(), CodeError> {
    let n = code.total_units();
    index(target, n)?;
    for &unit in unavailable {
        index(unit, n)?;
    }
    code.check_unit_len(unit_len)
}

/// The arguments of [`Code::repair`] every code checks the same way: the target and every read
/// unit in range, one slice per planned read with the planned length, no read of the target,
/// an output and a unit length that fit the code. Code-specific shape rules (whole units, halves,
/// sub-chunk runs) stay with each code.
pub(crate) fn repair(
    code: &dyn Code,
    plan: &RepairPlan,
    reads: &[&[u8]],
    out: &[u8],
) -> Result<(), CodeError> {
    let n = code.total_units();
    index(plan.target, n)?;
    if reads.len() != plan.reads.len() {
        return Err(CodeError::PlanMismatch {
            reason: format!("plan has {} reads, got {}", plan.reads.len(), reads.len()),
        });
    }
    if out.len() != plan.unit_len {
        return Err(CodeError::UnitLength {
            unit: plan.target,
            len: out.len(),
            expected: plan.unit_len,
        });
    }
    code.check_unit_len(plan.unit_len)?;
    for (range, bytes) in plan.reads.iter().zip(reads) {
        index(range.unit, n)?;
        if range.unit == plan.target {
            return Err(CodeError::PlanMismatch {
                reason: format!("the plan reads its target, unit {}", plan.target),
            });
        }
        if bytes.len() != range.len
            || range.offset.checked_add(range.len).is_none_or(|end| end > plan.unit_len)
        {
            return Err(CodeError::PlanMismatch {
                reason: format!(
                    "unit {} range {}+{} came with {} bytes (units are {} bytes)",
                    range.unit,
                    range.offset,
                    range.len,
                    bytes.len(),
                    plan.unit_len
                ),
            });
        }
    }
    Ok(())
}
