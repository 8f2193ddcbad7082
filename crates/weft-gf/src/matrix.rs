//! Dense matrices over GF(2^8) and the generator matrices weft's codes are built on.
//!
//! Invariants:
//! - A `Matrix` is row-major, `data.len() == rows * cols`, and is never empty in either
//!   dimension unless built empty on purpose (`rows == 0` is allowed for "no parity").
//! - [`Matrix::cauchy1`] is byte-for-byte ISA-L's `gf_gen_cauchy1_matrix`: identity on top, and
//!   row i ≥ k, column j holds `1 / (i XOR j)`. Every k×k sub-matrix of it is invertible for
//!   n = rows ≤ 256, so a code on it is MDS.
//! - [`Matrix::vandermonde_systematic`] is the Vandermonde matrix on the points 0..n, turned
//!   systematic by multiplying with the inverse of its top k×k block; it is MDS for n ≤ 256.

use std::fmt;

use crate::field::{inv, mul};

/// Largest number of rows a generator may have: the field has 256 elements.
pub const MAX_GENERATOR_ROWS: usize = 256;

/// Why a matrix operation could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MatrixError {
    /// The matrix has no inverse (its rank is below its size).
    Singular,
    /// The operation needs a square matrix.
    NotSquare { rows: usize, cols: usize },
    /// Inner dimensions of a product disagree.
    DimensionMismatch { left_cols: usize, right_rows: usize },
    /// A generator was asked for parameters it cannot represent.
    InvalidGenerator { rows: usize, cols: usize, reason: &'static str },
}

impl fmt::Display for MatrixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatrixError::Singular => write!(f, "matrix is singular"),
            MatrixError::NotSquare { rows, cols } => {
                write!(f, "matrix is {rows}×{cols}, an inverse needs a square matrix")
            }
            MatrixError::DimensionMismatch { left_cols, right_rows } => write!(
                f,
                "cannot multiply: left has {left_cols} columns, right has {right_rows} rows"
            ),
            MatrixError::InvalidGenerator { rows, cols, reason } => {
                write!(f, "no {rows}×{cols} generator: {reason}")
            }
        }
    }
}

impl std::error::Error for MatrixError {}

/// A row-major matrix over GF(2^8).
#[derive(Clone, PartialEq, Eq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl fmt::Debug for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Matrix {}×{} [", self.rows, self.cols)?;
        for r in 0..self.rows {
            write!(f, " ")?;
            for value in self.row(r) {
                write!(f, " {value:02x}")?;
            }
            writeln!(f)?;
        }
        write!(f, "]")
    }
}

impl Matrix {
    /// The all-zero `rows × cols` matrix.
    pub fn zeros(rows: usize, cols: usize) -> Matrix {
        Matrix { rows, cols, data: vec![0; rows * cols] }
    }

    /// The `n × n` identity.
    pub fn identity(n: usize) -> Matrix {
        let mut m = Matrix::zeros(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    /// Wraps row-major `data`. Panics when the length disagrees with the shape.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<u8>) -> Matrix {
        assert_eq!(data.len(), rows * cols, "matrix data length must be rows × cols");
        Matrix { rows, cols, data }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row-major bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }

    pub fn get(&self, row: usize, col: usize) -> u8 {
        assert!(row < self.rows && col < self.cols, "index ({row},{col}) out of bounds");
        self.data[row * self.cols + col]
    }

    pub fn set(&mut self, row: usize, col: usize, value: u8) {
        assert!(row < self.rows && col < self.cols, "index ({row},{col}) out of bounds");
        self.data[row * self.cols + col] = value;
    }

    pub fn row(&self, row: usize) -> &[u8] {
        &self.data[row * self.cols..(row + 1) * self.cols]
    }

    fn row_mut(&mut self, row: usize) -> &mut [u8] {
        &mut self.data[row * self.cols..(row + 1) * self.cols]
    }

    /// `self × other`.
    pub fn multiply(&self, other: &Matrix) -> Result<Matrix, MatrixError> {
        if self.cols != other.rows {
            return Err(MatrixError::DimensionMismatch {
                left_cols: self.cols,
                right_rows: other.rows,
            });
        }
        let mut out = Matrix::zeros(self.rows, other.cols);
        for r in 0..self.rows {
            for k in 0..self.cols {
                let a = self.get(r, k);
                if a == 0 {
                    continue;
                }
                let table = &crate::field::MUL_TABLE[a as usize];
                for (o, &b) in out.row_mut(r).iter_mut().zip(other.row(k)) {
                    *o ^= table[b as usize];
                }
            }
        }
        Ok(out)
    }

    /// The matrix made of the given rows of `self`, in the given order.
    pub fn select_rows(&self, rows: &[usize]) -> Matrix {
        let mut data = Vec::with_capacity(rows.len() * self.cols);
        for &r in rows {
            data.extend_from_slice(self.row(r));
        }
        Matrix { rows: rows.len(), cols: self.cols, data }
    }

    /// The block `rows × cols` starting at (`row0`, `col0`).
    pub fn sub_matrix(&self, row0: usize, col0: usize, rows: usize, cols: usize) -> Matrix {
        assert!(row0 + rows <= self.rows && col0 + cols <= self.cols, "sub-matrix out of bounds");
        let mut data = Vec::with_capacity(rows * cols);
        for r in row0..row0 + rows {
            data.extend_from_slice(&self.row(r)[col0..col0 + cols]);
        }
        Matrix { rows, cols, data }
    }

    /// Gauss-Jordan inverse.
    pub fn invert(&self) -> Result<Matrix, MatrixError> {
        if self.rows != self.cols {
            return Err(MatrixError::NotSquare { rows: self.rows, cols: self.cols });
        }
        let n = self.rows;
        let mut work = self.clone();
        let mut out = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n).find(|&r| work.get(r, col) != 0).ok_or(MatrixError::Singular)?;
            if pivot != col {
                work.swap_rows(pivot, col);
                out.swap_rows(pivot, col);
            }
            let scale = inv(work.get(col, col));
            work.scale_row(col, scale);
            out.scale_row(col, scale);
            for r in 0..n {
                let factor = work.get(r, col);
                if r != col && factor != 0 {
                    work.add_scaled_row(r, col, factor);
                    out.add_scaled_row(r, col, factor);
                }
            }
        }
        Ok(out)
    }

    /// Rank by Gaussian elimination.
    pub fn rank(&self) -> usize {
        let mut work = self.clone();
        let mut rank = 0;
        for col in 0..self.cols {
            if rank == self.rows {
                break;
            }
            let Some(pivot) = (rank..self.rows).find(|&r| work.get(r, col) != 0) else {
                continue;
            };
            work.swap_rows(pivot, rank);
            let scale = inv(work.get(rank, col));
            work.scale_row(rank, scale);
            for r in 0..self.rows {
                let factor = work.get(r, col);
                if r != rank && factor != 0 {
                    work.add_scaled_row(r, rank, factor);
                }
            }
            rank += 1;
        }
        rank
    }

    fn swap_rows(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        for c in 0..self.cols {
            self.data.swap(a * self.cols + c, b * self.cols + c);
        }
    }

    fn scale_row(&mut self, row: usize, factor: u8) {
        for value in self.row_mut(row) {
            *value = mul(*value, factor);
        }
    }

    /// row[target] += factor · row[source]
    fn add_scaled_row(&mut self, target: usize, source: usize, factor: u8) {
        let cols = self.cols;
        for c in 0..cols {
            let v = mul(self.data[source * cols + c], factor);
            self.data[target * cols + c] ^= v;
        }
    }

    /// ISA-L's `gf_gen_cauchy1_matrix(a, rows, k)`: `rows × k`, identity on top, then
    /// `a[i][j] = 1 / (i XOR j)` for i ≥ k.
    pub fn cauchy1(rows: usize, k: usize) -> Result<Matrix, MatrixError> {
        check_generator(rows, k)?;
        let mut m = Matrix::zeros(rows, k);
        for i in 0..k {
            m.set(i, i, 1);
        }
        for i in k..rows {
            for j in 0..k {
                // i ≥ k > j, so i XOR j ≠ 0.
                m.set(i, j, inv((i ^ j) as u8));
            }
        }
        Ok(m)
    }

    /// Systematic Vandermonde generator, `rows × k`: the Vandermonde matrix on the points
    /// 0, 1, …, rows−1 (v[i][j] = i^j) times the inverse of its top k×k block.
    pub fn vandermonde_systematic(rows: usize, k: usize) -> Result<Matrix, MatrixError> {
        check_generator(rows, k)?;
        let mut v = Matrix::zeros(rows, k);
        for i in 0..rows {
            for j in 0..k {
                v.set(i, j, crate::field::pow(i as u8, j));
            }
        }
        let top_inverse = v.sub_matrix(0, 0, k, k).invert()?;
        v.multiply(&top_inverse)
    }
}

fn check_generator(rows: usize, k: usize) -> Result<(), MatrixError> {
    if k == 0 {
        return Err(MatrixError::InvalidGenerator {
            rows,
            cols: k,
            reason: "k must be at least 1",
        });
    }
    if rows < k {
        return Err(MatrixError::InvalidGenerator { rows, cols: k, reason: "rows must be ≥ k" });
    }
    if rows > MAX_GENERATOR_ROWS {
        return Err(MatrixError::InvalidGenerator {
            rows,
            cols: k,
            reason: "GF(2^8) allows at most 256 rows (k + r ≤ 256)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn random_matrix(rng: &mut StdRng, rows: usize, cols: usize) -> Matrix {
        Matrix::from_vec(rows, cols, (0..rows * cols).map(|_| rng.gen()).collect())
    }

    #[test]
    fn inverse_times_matrix_is_identity() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut inverted = 0;
        for n in 1..=12 {
            for _ in 0..20 {
                let m = random_matrix(&mut rng, n, n);
                match m.invert() {
                    Ok(i) => {
                        assert_eq!(m.multiply(&i).unwrap(), Matrix::identity(n));
                        assert_eq!(i.multiply(&m).unwrap(), Matrix::identity(n));
                        assert_eq!(m.rank(), n);
                        inverted += 1;
                    }
                    Err(e) => {
                        assert_eq!(e, MatrixError::Singular);
                        assert!(m.rank() < n);
                    }
                }
            }
        }
        assert!(inverted > 200, "random matrices are almost always invertible");
    }

    #[test]
    fn singular_and_rank() {
        let mut m = Matrix::zeros(3, 3);
        m.set(0, 0, 5);
        m.set(1, 0, 10);
        m.set(2, 2, 1);
        assert_eq!(m.rank(), 2);
        assert_eq!(m.invert(), Err(MatrixError::Singular));
        assert_eq!(Matrix::zeros(2, 3).invert(), Err(MatrixError::NotSquare { rows: 2, cols: 3 }));
        assert!(Matrix::zeros(2, 3).multiply(&Matrix::zeros(2, 3)).is_err());
    }

    fn every_k_subset_invertible(g: &Matrix, k: usize) {
        // Walk every k-subset of rows with a combination counter.
        let n = g.rows();
        let mut idx: Vec<usize> = (0..k).collect();
        loop {
            assert!(g.select_rows(&idx).invert().is_ok(), "rows {idx:?} singular");
            let mut i = k;
            loop {
                if i == 0 {
                    return;
                }
                i -= 1;
                if idx[i] != i + n - k {
                    break;
                }
                if i == 0 {
                    return;
                }
            }
            idx[i] += 1;
            for j in i + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
        }
    }

    #[test]
    fn cauchy_is_mds_and_matches_definition() {
        for (n, k) in [(9, 6), (14, 10), (8, 4), (7, 5)] {
            let g = Matrix::cauchy1(n, k).unwrap();
            assert_eq!(g.sub_matrix(0, 0, k, k), Matrix::identity(k));
            for i in k..n {
                for j in 0..k {
                    assert_eq!(mul(g.get(i, j), (i ^ j) as u8), 1);
                }
            }
            every_k_subset_invertible(&g, k);
        }
    }

    #[test]
    fn vandermonde_is_systematic_and_mds() {
        for (n, k) in [(9, 6), (14, 10), (6, 2)] {
            let g = Matrix::vandermonde_systematic(n, k).unwrap();
            assert_eq!(g.sub_matrix(0, 0, k, k), Matrix::identity(k));
            every_k_subset_invertible(&g, k);
        }
    }

    #[test]
    fn generator_limits() {
        assert!(Matrix::cauchy1(256, 200).is_ok());
        assert!(matches!(Matrix::cauchy1(257, 200), Err(MatrixError::InvalidGenerator { .. })));
        assert!(Matrix::cauchy1(3, 4).is_err());
        assert!(Matrix::cauchy1(3, 0).is_err());
    }
}
