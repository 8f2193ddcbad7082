//! Errors of the layout crate: every one names what was wrong and the numbers involved, so
//! the user sees what to change.

use std::fmt;

use weft_codes::CodeError;

use crate::placement::FailureDomain;
use crate::striped::UnitId;

/// Why a layout, a topology or a placement request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The layout's code is not valid.
    Code(CodeError),
    /// `stripe_width` is 0 or above [`crate::MAX_STRIPE_WIDTH`].
    StripeWidth { stripe_width: usize, max: usize },
    /// `cell_bytes` is 0.
    CellBytes { cell_bytes: u64 },
    /// `block_bytes` is 0, not a multiple of `cell_bytes`, or above [`crate::MAX_BLOCK_BYTES`].
    BlockBytes { block_bytes: u64, cell_bytes: u64, max: u64 },
    /// The object is larger than [`crate::MAX_OBJECT_BYTES`].
    ObjectTooLarge { object_bytes: u64, max: u64 },
    /// The object has more data blocks than a placement may hold ([`crate::MAX_OBJECT_BLOCKS`]).
    TooManyBlocks { blocks: usize, max: usize },
    /// The topology lists no disks, too many, or contradicts itself.
    Topology { reason: String },
    /// Fewer failure domains than the layout needs: max(n, stripe_width).
    TooFewDomains {
        level: FailureDomain,
        available: usize,
        needed: usize,
        units_per_group: usize,
        stripe_width: usize,
    },
    /// The unit is not part of this placement.
    UnknownUnit { unit: UnitId },
    /// No disk can take the unit without breaking a placement rule.
    NoReplacement { unit: UnitId, reason: String },
    /// A placement breaks a rule (found by [`crate::Placement::verify`]).
    RuleBroken { reason: String },
    /// A transition that cannot be done as asked (e.g. a regroup that changes the striping).
    Transition { reason: String },
    /// Geometric-layout parameters that cannot work (s0, q, the largest chunk, the codes).
    Geometric { reason: String },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Code(error) => write!(f, "invalid code in layout: {error}"),
            LayoutError::StripeWidth { stripe_width, max } => {
                write!(f, "stripe width {stripe_width} is invalid: it must be between 1 and {max}")
            }
            LayoutError::CellBytes { cell_bytes } => {
                write!(f, "cell size {cell_bytes} bytes is invalid: it must be at least 1 byte")
            }
            LayoutError::BlockBytes { block_bytes, cell_bytes, max } => write!(
                f,
                "block size {block_bytes} bytes is invalid: it must be a positive multiple of \
                 the cell size ({cell_bytes} bytes) and at most {max} bytes"
            ),
            LayoutError::ObjectTooLarge { object_bytes, max } => {
                write!(f, "object of {object_bytes} bytes exceeds the largest allowed, {max} bytes")
            }
            LayoutError::TooManyBlocks { blocks, max } => write!(
                f,
                "object needs {blocks} data blocks, more than the {max} a placement holds; \
                 use larger blocks"
            ),
            LayoutError::Topology { reason } => write!(f, "invalid topology: {reason}"),
            LayoutError::TooFewDomains {
                level,
                available,
                needed,
                units_per_group,
                stripe_width,
            } => write!(
                f,
                "the topology has {available} {level} failure domains but the layout needs \
                 {needed} = max(n = {units_per_group} units per group, stripe width \
                 {stripe_width}); add {level}s or choose a smaller code or stripe width"
            ),
            LayoutError::UnknownUnit { unit } => write!(f, "unit {unit} is not in this placement"),
            LayoutError::NoReplacement { unit, reason } => {
                write!(f, "no disk can take unit {unit}: {reason}")
            }
            LayoutError::RuleBroken { reason } => write!(f, "placement breaks a rule: {reason}"),
            LayoutError::Transition { reason } => write!(f, "transition refused: {reason}"),
            LayoutError::Geometric { reason } => write!(f, "invalid geometric layout: {reason}"),
        }
    }
}

impl std::error::Error for LayoutError {}

impl From<CodeError> for LayoutError {
    fn from(error: CodeError) -> Self {
        LayoutError::Code(error)
    }
}
