//! Codes defined by a systematic generator matrix: `rs(k,r)` on ISA-L's Cauchy matrix and
//! `rep(n)` (a generator of all ones).
//!
//! Invariants:
//! - `generator` is n × k with the identity on top; unit i = Σ_j generator[i][j]·data_j.
//! - A decoding for a set of present units uses a basis of their generator rows chosen
//!   greedily in ascending unit order (data units first, so surviving data is preferred), and
//!   drops sources whose coefficients are all zero: it reads as few units as the code allows.
//! - Decodings are cached per (present set, wanted list); the cache holds at most
//!   [`MAX_CACHED_DECODINGS`] entries and is emptied when full (patterns repeat in practice).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_gf::{DotTables, Matrix};

use crate::{checks, Code, CodeError, CodeSpec, ReadRange, RepairPlan, UPDATE_CHUNK_BYTES};

/// Most decode matrices one code keeps prepared.
pub const MAX_CACHED_DECODINGS: usize = 4096;

#[derive(Clone, PartialEq, Eq, Hash)]
struct DecodeKey {
    present: [u64; 4],
    wanted: Vec<u16>,
}

/// How to compute some wanted units from some sources: `tables` is wanted × sources.
#[derive(Debug)]
struct Decoding {
    sources: Vec<usize>,
    tables: DotTables,
}

/// A systematic code given by its generator matrix.
pub struct LinearCode {
    spec: CodeSpec,
    k: usize,
    r: usize,
    generator: Matrix,
    encode_tables: DotTables,
    column_tables: Vec<DotTables>,
    decodings: Mutex<HashMap<DecodeKey, Arc<Decoding>>>,
}

impl std::fmt::Debug for LinearCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinearCode").field("spec", &self.spec).finish()
    }
}

impl LinearCode {
    /// Reed-Solomon with ISA-L's `gf_gen_cauchy1_matrix`: parity identical to ISA-L's.
    pub fn rs(k: usize, r: usize) -> Result<LinearCode, CodeError> {
        let spec = CodeSpec::Rs { k, r };
        spec.validate()?;
        let generator = Matrix::cauchy1(k + r, k).map_err(|e| CodeError::InvalidParameters {
            code: spec.to_string(),
            reason: e.to_string(),
        })?;
        Ok(LinearCode::from_generator(spec, generator))
    }

    /// n-way replication as a code: k = 1, every parity unit equals the data unit.
    pub fn rep(n: usize) -> Result<LinearCode, CodeError> {
        let spec = CodeSpec::Rep { n };
        spec.validate()?;
        Ok(LinearCode::from_generator(spec, Matrix::from_vec(n, 1, vec![1; n])))
    }

    /// A code from any systematic n × k generator (identity on top). Non-MDS generators (LRC)
    /// are fine: decoding solves for whatever the present units determine.
    pub(crate) fn from_generator(spec: CodeSpec, generator: Matrix) -> LinearCode {
        let k = generator.cols();
        let r = generator.rows() - k;
        let parity_rows = generator.sub_matrix(k, 0, r, k);
        let encode_tables = DotTables::new(parity_rows.as_slice(), r, k);
        let column_tables = (0..k)
            .map(|j| DotTables::new(parity_rows.sub_matrix(0, j, r, 1).as_slice(), r, 1))
            .collect();
        LinearCode {
            spec,
            k,
            r,
            generator,
            encode_tables,
            column_tables,
            decodings: Mutex::new(HashMap::new()),
        }
    }

    /// The n × k generator matrix (identity on top).
    pub fn generator(&self) -> &Matrix {
        &self.generator
    }

    fn n(&self) -> usize {
        self.k + self.r
    }

    fn not_decodable(&self, present: &[usize], reason: &str) -> CodeError {
        let lost = (0..self.n()).filter(|i| !present.contains(i)).collect();
        CodeError::NotDecodable { code: self.spec.to_string(), lost, reason: reason.to_string() }
    }

    /// Chooses sources among `present` and the coefficients that give each wanted unit.
    fn solve(
        &self,
        present: &[usize],
        wanted: &[usize],
    ) -> Result<(Vec<usize>, Vec<u8>), CodeError> {
        // Greedy basis of the present rows, in ascending order, kept in reduced echelon form.
        let mut basis_units = Vec::with_capacity(self.k);
        let mut echelon: Vec<(usize, Vec<u8>)> = Vec::with_capacity(self.k);
        for &unit in present {
            if echelon.len() == self.k {
                break;
            }
            let mut row = self.generator.row(unit).to_vec();
            for (pivot, basis_row) in &echelon {
                let factor = row[*pivot];
                if factor != 0 {
                    for (v, b) in row.iter_mut().zip(basis_row) {
                        *v ^= weft_gf::mul(factor, *b);
                    }
                }
            }
            if let Some(pivot) = row.iter().position(|&v| v != 0) {
                let scale = weft_gf::inv(row[pivot]);
                row.iter_mut().for_each(|v| *v = weft_gf::mul(*v, scale));
                echelon.push((pivot, row));
                basis_units.push(unit);
            }
        }
        let basis = self.generator.select_rows(&basis_units);
        let mut coefficients = Vec::with_capacity(wanted.len() * basis_units.len());
        for &w in wanted {
            let x = solve_in_span(&basis, self.generator.row(w)).ok_or_else(|| {
                let reason = if present.len() < self.k {
                    format!("only {} units present, {} needed", present.len(), self.k)
                } else {
                    format!("unit {w} is not determined by the present units")
                };
                self.not_decodable(present, &reason)
            })?;
            coefficients.extend_from_slice(&x);
        }
        // Keep only sources some wanted unit depends on.
        let s = basis_units.len();
        let used: Vec<usize> =
            (0..s).filter(|&c| (0..wanted.len()).any(|w| coefficients[w * s + c] != 0)).collect();
        let sources = used.iter().map(|&c| basis_units[c]).collect();
        let mut compact = Vec::with_capacity(wanted.len() * used.len());
        for w in 0..wanted.len() {
            compact.extend(used.iter().map(|&c| coefficients[w * s + c]));
        }
        Ok((sources, compact))
    }

    fn decoding(&self, present: &[usize], wanted: &[usize]) -> Result<Arc<Decoding>, CodeError> {
        let mut key =
            DecodeKey { present: [0; 4], wanted: wanted.iter().map(|&w| w as u16).collect() };
        for &p in present {
            key.present[p / 64] |= 1 << (p % 64);
        }
        if let Some(found) = self.decodings.lock().expect("decode cache poisoned").get(&key) {
            return Ok(found.clone());
        }
        let (sources, coefficients) = self.solve(present, wanted)?;
        let tables = DotTables::new(&coefficients, wanted.len(), sources.len());
        let decoding = Arc::new(Decoding { sources, tables });
        let mut cache = self.decodings.lock().expect("decode cache poisoned");
        if cache.len() >= MAX_CACHED_DECODINGS {
            cache.clear();
        }
        cache.insert(key, decoding.clone());
        Ok(decoding)
    }

    fn check_index(&self, index: usize) -> Result<(), CodeError> {
        checks::index(index, self.n())
    }

    fn check_parity(&self, parity: &[&mut [u8]], len: usize) -> Result<(), CodeError> {
        checks::parity(self, parity, len)
    }
}

/// Solves x · basis = target for x, where `basis` (s × k) has full row rank. `None` when
/// `target` is not in the row space.
fn solve_in_span(basis: &Matrix, target: &[u8]) -> Option<Vec<u8>> {
    let s = basis.rows();
    let k = basis.cols();
    // Augmented transposed system: k equations (one per column), s unknowns.
    let width = s + 1;
    let mut a = vec![0u8; k * width];
    for c in 0..k {
        for row in 0..s {
            a[c * width + row] = basis.get(row, c);
        }
        a[c * width + s] = target[c];
    }
    let mut pivot_row = 0;
    let mut pivots = Vec::with_capacity(s);
    for col in 0..s {
        let found = (pivot_row..k).find(|&r| a[r * width + col] != 0)?;
        for c in 0..width {
            a.swap(found * width + c, pivot_row * width + c);
        }
        let scale = weft_gf::inv(a[pivot_row * width + col]);
        for c in 0..width {
            a[pivot_row * width + c] = weft_gf::mul(a[pivot_row * width + c], scale);
        }
        for r in 0..k {
            let factor = a[r * width + col];
            if r != pivot_row && factor != 0 {
                for c in 0..width {
                    let v = weft_gf::mul(factor, a[pivot_row * width + c]);
                    a[r * width + c] ^= v;
                }
            }
        }
        pivots.push(pivot_row);
        pivot_row += 1;
    }
    // Consistency: equations beyond the pivots must read 0 = 0.
    if (pivot_row..k).any(|r| a[r * width + s] != 0) {
        return None;
    }
    Some(pivots.iter().map(|&r| a[r * width + s]).collect())
}

impl Code for LinearCode {
    fn spec(&self) -> CodeSpec {
        self.spec
    }

    fn data_units(&self) -> usize {
        self.k
    }

    fn byte_local(&self) -> bool {
        true
    }

    fn parity_units(&self) -> usize {
        self.r
    }

    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        if data.len() != self.k {
            return Err(CodeError::UnitCount {
                what: "data units",
                expected: self.k,
                got: data.len(),
            });
        }
        let len = data[0].len();
        checks::lengths(data.iter().enumerate().map(|(i, d)| (i, d.len())), len)?;
        self.check_parity(parity, len)?;
        self.check_unit_len(len)?;
        self.encode_tables.dot_prod(data, parity);
        Ok(())
    }

    fn encode_add(
        &self,
        data_index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        if data_index >= self.k {
            return Err(CodeError::DataIndex { index: data_index, k: self.k });
        }
        self.check_parity(parity, data.len())?;
        self.check_unit_len(data.len())?;
        self.column_tables[data_index].dot_prod_add(&[data], parity);
        Ok(())
    }

    fn update(
        &self,
        data_index: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        if data_index >= self.k {
            return Err(CodeError::DataIndex { index: data_index, k: self.k });
        }
        checks::lengths(std::iter::once((data_index, new.len())), old.len())?;
        self.check_parity(parity, old.len())?;
        self.check_unit_len(old.len())?;
        // α = 1: byte i of parity depends on byte i of data only, so the delta can be
        // computed and applied a bounded chunk at a time.
        let mut delta = vec![0u8; UPDATE_CHUNK_BYTES.min(old.len())];
        let mut offset = 0;
        while offset < old.len() {
            let end = (offset + UPDATE_CHUNK_BYTES).min(old.len());
            let delta = &mut delta[..end - offset];
            for ((d, a), b) in delta.iter_mut().zip(&old[offset..end]).zip(&new[offset..end]) {
                *d = a ^ b;
            }
            let mut parts: Vec<&mut [u8]> =
                parity.iter_mut().map(|p| &mut p[offset..end]).collect();
            self.column_tables[data_index].dot_prod_add(&[delta], &mut parts);
            offset = end;
        }
        Ok(())
    }

    fn is_decodable(&self, lost: &[usize]) -> bool {
        if lost.iter().any(|&i| i >= self.n()) {
            return false;
        }
        let present: Vec<usize> = (0..self.n()).filter(|i| !lost.contains(i)).collect();
        // Through the cache: asking first and decoding next is the common pattern.
        self.decoding(&present, lost).is_ok()
    }

    fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let (present, _) = checks::reconstruct(self, units, wanted, out)?;
        if wanted.is_empty() {
            return Ok(());
        }
        let decoding = self.decoding(&present, wanted)?;
        let srcs: Vec<&[u8]> =
            decoding.sources.iter().map(|&i| units[i].expect("source is present")).collect();
        decoding.tables.dot_prod(&srcs, out);
        Ok(())
    }

    fn repair_plan(
        &self,
        target: usize,
        unavailable: &[usize],
        unit_len: usize,
    ) -> Result<RepairPlan, CodeError> {
        checks::repair_plan(self, target, unavailable, unit_len)?;
        let present: Vec<usize> =
            (0..self.n()).filter(|&i| i != target && !unavailable.contains(&i)).collect();
        let decoding = self.decoding(&present, &[target])?;
        let reads = decoding
            .sources
            .iter()
            .map(|&unit| ReadRange { unit, offset: 0, len: unit_len })
            .collect();
        Ok(RepairPlan { target, unit_len, reads })
    }

    fn repair(&self, plan: &RepairPlan, reads: &[&[u8]], out: &mut [u8]) -> Result<(), CodeError> {
        checks::repair(self, plan, reads, out)?;
        let mut units: Vec<Option<&[u8]>> = vec![None; self.n()];
        for (range, bytes) in plan.reads.iter().zip(reads) {
            self.check_index(range.unit)?;
            if range.offset != 0 || range.len != plan.unit_len || bytes.len() != range.len {
                return Err(CodeError::PlanMismatch {
                    reason: format!(
                        "{} reads whole units; unit {} range {}+{} with {} bytes",
                        self.spec,
                        range.unit,
                        range.offset,
                        range.len,
                        bytes.len()
                    ),
                });
            }
            if range.unit == plan.target || units[range.unit].replace(bytes).is_some() {
                return Err(CodeError::PlanMismatch {
                    reason: format!("unit {} read twice or is the target", range.unit),
                });
            }
        }
        self.reconstruct(&units, &[plan.target], &mut [out])
    }
}
