//! The one error type of weft-codes: every operating error a caller can cause, with enough
//! detail to tell a user what was wrong and what to do.

use std::fmt;

/// Why a code could not be built or an operation could not be carried out. Nothing a caller
/// passed in is modified when an operation returns an error before computing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodeError {
    /// The code name is not one weft knows.
    UnknownCode { name: String },
    /// The parameters are outside what the code supports.
    InvalidParameters { code: String, reason: String },
    /// A slice of units has the wrong number of entries.
    UnitCount { what: &'static str, expected: usize, got: usize },
    /// A unit index is not below n = k + r.
    UnitIndex { index: usize, total: usize },
    /// A data-unit index is not below k.
    DataIndex { index: usize, k: usize },
    /// Units of one operation must all have the same length.
    UnitLength { unit: usize, len: usize, expected: usize },
    /// The unit length is not a multiple of what the code's sub-chunk layout needs.
    UnitLengthMultiple { code: String, len: usize, multiple: usize },
    /// Too many units (or the wrong ones) are missing.
    NotDecodable { code: String, lost: Vec<usize>, reason: String },
    /// `repair` was handed reads that do not match its plan.
    PlanMismatch { reason: String },
}

impl fmt::Display for CodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeError::UnknownCode { name } => write!(
                f,
                "unknown code {name:?}; known codes: {}",
                crate::spec::KNOWN_FAMILIES.join(", ")
            ),
            CodeError::InvalidParameters { code, reason } => {
                write!(f, "invalid parameters for {code}: {reason}")
            }
            CodeError::UnitCount { what, expected, got } => {
                write!(f, "expected {expected} {what}, got {got}")
            }
            CodeError::UnitIndex { index, total } => {
                write!(f, "unit index {index} is out of range: the code has units 0..{total}")
            }
            CodeError::DataIndex { index, k } => {
                write!(f, "data unit index {index} is out of range: the code has data units 0..{k}")
            }
            CodeError::UnitLength { unit, len, expected } => write!(
                f,
                "unit {unit} is {len} bytes but the other units are {expected}: \
                 all units of one operation must have the same length"
            ),
            CodeError::UnitLengthMultiple { code, len, multiple } => write!(
                f,
                "{code} needs unit lengths that are a multiple of {multiple} bytes, got {len}"
            ),
            CodeError::NotDecodable { code, lost, reason } => {
                write!(f, "{code} cannot recover with units {lost:?} lost: {reason}")
            }
            CodeError::PlanMismatch { reason } => {
                write!(f, "reads do not match the plan: {reason}")
            }
        }
    }
}

impl std::error::Error for CodeError {}
