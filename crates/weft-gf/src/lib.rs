//! GF(2^8) arithmetic for weft: field tables, matrices over the field and region kernels.
//!
//! Invariants this crate keeps:
//! - The field is GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the one
//!   ISA-L, Jerasure and klauspost/reedsolomon use, so parity computed here is byte-identical
//!   to theirs for the same matrix.
//! - Every SIMD path ([`SimdPath::Ssse3`], [`SimdPath::Avx2`], [`SimdPath::Gfni`]) produces
//!   exactly the bytes of the scalar oracle ([`SimdPath::Scalar`]) for every coefficient,
//!   length and alignment.
//! - The crate is pure: no IO, no threads, no allocation in the kernels' inner loops.

#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

pub mod field;
pub mod kernels;
pub mod matrix;
pub mod pq;

pub use field::{add, div, exp, inv, log, mul, pow, POLYNOMIAL};
pub use kernels::{
    mul_add_region, mul_region, xor_region, DotTables, SimdError, SimdPath, XorPairTables,
};
pub use matrix::{Matrix, MatrixError};
