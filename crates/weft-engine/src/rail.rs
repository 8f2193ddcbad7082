//! Rails: the coding backends an engine drives side by side.
//!
//! Invariants:
//! - Every rail's parity for a code it accepts is byte-identical to [`ScalarRail`]'s (the
//!   oracle); the engine checks this with a canary before giving a rail any task of that code,
//!   so nothing needs to record which rail encoded which bytes.
//! - A rail declines (`accepts` false) any code it cannot compute exactly.
//! - The same holds for `reconstruct` (decoding): the canary checks it separately, and a rail
//!   may run a code's encodes but be excluded from its decodes. Adds (`encode_add`) and first
//!   adds (`encode_first_add`, which must overwrite whatever its regions held) are checked
//!   together: a rail runs a code's add tasks only if both equal the oracle's.
//! - Rails are stateless apart from caches keyed by the code's spec (and, for decoding, the
//!   erasure pattern; bounded); any thread may call them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use weft_codes::{Code, CodeSpec, LinearCode};
use weft_gf::{DotTables, Matrix, SimdPath};
use weft_isal::{Isal, IsalTables};

use crate::EngineError;

/// One coding backend.
pub trait Rail: Send + Sync + fmt::Debug {
    /// A short stable name (`simd`, `isal`, `scalar`, …).
    fn name(&self) -> &str;

    /// Whether this rail can encode `code` exactly (same bytes as the oracle).
    fn accepts(&self, code: &dyn Code) -> bool;

    /// Computes the r parity regions of one byte range of every unit. All regions have the
    /// same length, a multiple of the code's unit length multiple.
    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError>;

    /// Adds the share of the parity of the data units at `positions` (distinct, below k;
    /// `data[i]` is unit `positions[i]`) into the r regions of `parity` (Okapi's partial
    /// parity). The default runs the code's own incremental encode, one unit at a time.
    fn encode_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        add_each(code, positions, data, parity)
    }

    /// The first add into a partial parity: writes the share of the data units at
    /// `positions` into `parity`, whatever `parity` held before (as if it were zeros), so the
    /// regions are only written, not read. The default zeroes them and adds.
    fn encode_first_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        zero(parity);
        self.encode_add(code, positions, data, parity)
    }

    /// Computes the units listed in `wanted` into `out` (same order) from one byte range of
    /// the present units (`units[i]` is `None` when unit i is missing; `units.len()` is n).
    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError>;
}

/// Adds the units at `positions` one at a time with the code's own incremental encode: any
/// code, no fused kernel.
fn add_each(
    code: &dyn Code,
    positions: &[usize],
    data: &[&[u8]],
    parity: &mut [&mut [u8]],
) -> Result<(), EngineError> {
    for (&position, unit) in positions.iter().zip(data) {
        code.encode_add(position, unit, parity).map_err(EngineError::Code)?;
    }
    Ok(())
}

/// An add, or a first add (`first`: the regions are overwritten), of the data units at
/// `positions`: rs in one fused pass with the dot tables `tables` finds or builds (given k and
/// r), other codes one unit at a time with [`add_each`].
fn add_fused(
    code: &dyn Code,
    positions: &[usize],
    data: &[&[u8]],
    parity: &mut [&mut [u8]],
    first: bool,
    tables: impl FnOnce(usize, usize) -> Result<Arc<DotTables>, EngineError>,
) -> Result<(), EngineError> {
    let CodeSpec::Rs { k, r } = code.spec() else {
        if first {
            zero(parity);
        }
        return add_each(code, positions, data, parity);
    };
    check_add_shape(code, positions, data, parity)?;
    let tables = tables(k, r)?;
    if first {
        tables.dot_prod(data, parity);
    } else {
        tables.dot_prod_add(data, parity);
    }
    Ok(())
}

fn zero(regions: &mut [&mut [u8]]) {
    for region in regions.iter_mut() {
        region.fill(0);
    }
}

/// Most decode tables a rail keeps (one per code and erasure pattern) before starting afresh.
const MAX_DECODE_TABLES: usize = 1024;

/// (code, present units used, wanted units): one erasure pattern's decode tables.
type PatternKey = (CodeSpec, Vec<usize>, Vec<usize>);

/// Tables keyed by code and a list of unit positions, dropped all at once when full.
#[derive(Debug)]
struct TableCache<T>(Mutex<HashMap<PositionsKey, Arc<T>>>);

/// A code and a list of unit positions.
type PositionsKey = (CodeSpec, Vec<usize>);

impl<T> Default for TableCache<T> {
    fn default() -> Self {
        TableCache(Mutex::new(HashMap::new()))
    }
}

impl<T> TableCache<T> {
    fn get_or_build(
        &self,
        spec: CodeSpec,
        positions: &[usize],
        build: impl FnOnce() -> Result<T, EngineError>,
    ) -> Result<Arc<T>, EngineError> {
        let key = (spec, positions.to_vec());
        if let Some(found) = self.0.lock().expect("table cache lock").get(&key) {
            return Ok(found.clone());
        }
        let built = Arc::new(build()?);
        let mut cache = self.0.lock().expect("table cache lock");
        if cache.len() >= MAX_DECODE_TABLES {
            cache.clear();
        }
        cache.insert(key, built.clone());
        Ok(built)
    }
}

/// The r × positions.len() coefficients of the data units at `positions` in the parity rows
/// of an n × k generator (row-major, systematic).
fn parity_columns(generator: &[u8], k: usize, positions: &[usize]) -> Vec<u8> {
    let r = generator.len() / k - k;
    let mut columns = Vec::with_capacity(r * positions.len());
    for row in k..k + r {
        columns.extend(positions.iter().map(|&p| generator[row * k + p]));
    }
    columns
}

/// Checks an add's shape: one position per data region, r parity regions, one length.
fn check_add_shape(
    code: &dyn Code,
    positions: &[usize],
    data: &[&[u8]],
    parity: &[&mut [u8]],
) -> Result<(), EngineError> {
    let len = data.first().map_or(0, |d| d.len());
    if positions.len() != data.len()
        || positions.iter().any(|&p| p >= code.data_units())
        || parity.len() != code.parity_units()
        || data.iter().any(|d| d.len() != len)
        || parity.iter().any(|p| p.len() != len)
    {
        return Err(EngineError::Shape(format!(
            "{} adds data regions at positions below {} into {} parity regions of one length",
            code.spec(),
            code.data_units(),
            code.parity_units()
        )));
    }
    Ok(())
}

/// One erasure pattern's ISA-L tables and the present units they combine.
type DecodeTables = (Vec<usize>, Arc<IsalTables>);

/// For rs: expresses each wanted unit as a combination of the first k present units.
/// `generator` is the code's n × k generator (row-major) and `invert` inverts a k × k matrix;
/// each rail passes its own, so the oracle and ISA-L share no arithmetic but this product.
/// Returns the present units used and the `wanted.len()` × k coefficients.
fn rs_decode_rows(
    generator: &[u8],
    k: usize,
    units: &[Option<&[u8]>],
    wanted: &[usize],
    invert: impl Fn(&[u8], usize) -> Option<Vec<u8>>,
) -> Result<(Vec<usize>, Vec<u8>), EngineError> {
    let n = generator.len() / k;
    if units.len() != n || wanted.iter().any(|&w| w >= n) {
        return Err(EngineError::Shape(format!("rs decode wants {n} units and indices below {n}")));
    }
    let present: Vec<usize> = (0..n).filter(|&i| units[i].is_some()).take(k).collect();
    let not_decodable = |reason: &str| {
        EngineError::Code(weft_codes::CodeError::NotDecodable {
            code: format!("rs({k},{})", n - k),
            lost: (0..n).filter(|&i| units[i].is_none()).collect(),
            reason: reason.to_string(),
        })
    };
    if present.len() < k {
        return Err(not_decodable("fewer than k units are present"));
    }
    let mut square = Vec::with_capacity(k * k);
    for &row in &present {
        square.extend_from_slice(&generator[row * k..(row + 1) * k]);
    }
    let inverse = invert(&square, k).ok_or_else(|| not_decodable("singular decode matrix"))?;
    let mut rows = vec![0u8; wanted.len() * k];
    for (w, &unit) in wanted.iter().enumerate() {
        let g = &generator[unit * k..(unit + 1) * k];
        for column in 0..k {
            rows[w * k + column] = (0..k)
                .map(|t| weft_gf::mul(g[t], inverse[t * k + column]))
                .fold(0, |acc, v| acc ^ v);
        }
    }
    Ok((present, rows))
}

fn present_slices<'a>(units: &[Option<&'a [u8]>], present: &[usize]) -> Vec<&'a [u8]> {
    present.iter().map(|&i| units[i].expect("present units are Some")).collect()
}

fn check_decode_shape(
    units: &[Option<&[u8]>],
    wanted: &[usize],
    out: &[&mut [u8]],
) -> Result<(), EngineError> {
    let len = units.iter().flatten().next().map_or(0, |u| u.len());
    if wanted.len() != out.len()
        || units.iter().flatten().any(|u| u.len() != len)
        || out.iter().any(|o| o.len() != len)
    {
        return Err(EngineError::Shape(
            "a decode wants one output per wanted unit, all of the units' length".into(),
        ));
    }
    Ok(())
}

/// weft's own kernels on the best SIMD path of this CPU (or the one `WEFT_SIMD` forces).
#[derive(Debug, Default)]
pub struct SimdRail {
    /// rs adds: one fused dot product over the positions' parity columns.
    add_tables: TableCache<DotTables>,
}

impl SimdRail {
    /// rs(k, r)'s fused add tables for the data units at `positions`.
    fn add_tables(
        &self,
        k: usize,
        r: usize,
        code: &dyn Code,
        positions: &[usize],
    ) -> Result<Arc<DotTables>, EngineError> {
        self.add_tables.get_or_build(code.spec(), positions, || {
            let rs = LinearCode::rs(k, r).map_err(EngineError::Code)?;
            let columns = parity_columns(rs.generator().as_slice(), k, positions);
            Ok(DotTables::new(&columns, r, positions.len()))
        })
    }
}

impl Rail for SimdRail {
    fn name(&self) -> &str {
        "simd"
    }

    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }

    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.encode(data, parity).map_err(EngineError::Code)
    }

    fn encode_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        add_fused(code, positions, data, parity, false, |k, r| {
            self.add_tables(k, r, code, positions)
        })
    }

    fn encode_first_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        add_fused(code, positions, data, parity, true, |k, r| {
            self.add_tables(k, r, code, positions)
        })
    }

    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        code.reconstruct(units, wanted, out).map_err(EngineError::Code)
    }
}

/// The oracle. For rs it runs weft-gf's scalar kernels on the rs generator's parity rows,
/// whatever `WEFT_SIMD` says, so it is independent of the SIMD paths. For other codes it
/// encodes with the code itself (on the process's SIMD path): that is then the reference by
/// definition, and the SIMD kernels are checked against scalar in weft-gf's own tests.
#[derive(Debug, Default)]
pub struct ScalarRail {
    tables: Mutex<HashMap<CodeSpec, Arc<DotTables>>>,
    generators: Mutex<HashMap<CodeSpec, Arc<Vec<u8>>>>,
    add_tables: TableCache<DotTables>,
}

impl ScalarRail {
    fn rs_tables(&self, k: usize, r: usize, spec: CodeSpec) -> Result<Arc<DotTables>, EngineError> {
        let mut tables = self.tables.lock().expect("scalar tables lock");
        if let Some(found) = tables.get(&spec) {
            return Ok(found.clone());
        }
        let code = LinearCode::rs(k, r).map_err(EngineError::Code)?;
        let parity_rows = code.generator().sub_matrix(k, 0, r, k);
        let built = Arc::new(DotTables::with_path(SimdPath::Scalar, parity_rows.as_slice(), r, k));
        tables.insert(spec, built.clone());
        Ok(built)
    }

    fn rs_generator(
        &self,
        k: usize,
        r: usize,
        spec: CodeSpec,
    ) -> Result<Arc<Vec<u8>>, EngineError> {
        let mut generators = self.generators.lock().expect("scalar generators lock");
        if let Some(found) = generators.get(&spec) {
            return Ok(found.clone());
        }
        let code = LinearCode::rs(k, r).map_err(EngineError::Code)?;
        let built = Arc::new(code.generator().as_slice().to_vec());
        generators.insert(spec, built.clone());
        Ok(built)
    }

    /// rs(k, r)'s scalar add tables for the data units at `positions`.
    fn add_tables(
        &self,
        k: usize,
        r: usize,
        spec: CodeSpec,
        positions: &[usize],
    ) -> Result<Arc<DotTables>, EngineError> {
        let generator = self.rs_generator(k, r, spec)?;
        self.add_tables.get_or_build(spec, positions, || {
            let columns = parity_columns(&generator, k, positions);
            Ok(DotTables::with_path(SimdPath::Scalar, &columns, r, positions.len()))
        })
    }
}

impl Rail for ScalarRail {
    fn name(&self) -> &str {
        "scalar"
    }

    fn accepts(&self, _code: &dyn Code) -> bool {
        true
    }

    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        match code.spec() {
            spec @ CodeSpec::Rs { k, r } => {
                check_shape(code, data, parity)?;
                self.rs_tables(k, r, spec)?.dot_prod(data, parity);
                Ok(())
            }
            _ => code.encode(data, parity).map_err(EngineError::Code),
        }
    }

    fn encode_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        add_fused(code, positions, data, parity, false, |k, r| {
            self.add_tables(k, r, code.spec(), positions)
        })
    }

    fn encode_first_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        add_fused(code, positions, data, parity, true, |k, r| {
            self.add_tables(k, r, code.spec(), positions)
        })
    }

    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        match code.spec() {
            spec @ CodeSpec::Rs { k, r } => {
                check_decode_shape(units, wanted, out)?;
                let generator = self.rs_generator(k, r, spec)?;
                let (present, rows) = rs_decode_rows(&generator, k, units, wanted, |m, n| {
                    Matrix::from_vec(n, n, m.to_vec()).invert().ok().map(|i| i.as_slice().to_vec())
                })?;
                let tables = DotTables::with_path(SimdPath::Scalar, &rows, wanted.len(), k);
                tables.dot_prod(&present_slices(units, &present), out);
                Ok(())
            }
            _ => code.reconstruct(units, wanted, out).map_err(EngineError::Code),
        }
    }
}

/// Intel ISA-L, loaded at run time. Accepts rs only: ISA-L's `gf_gen_cauchy1_matrix` is the
/// matrix weft's rs is built on, so the parity is identical by construction (and checked by
/// the canary all the same).
pub struct IsalRail {
    isal: Isal,
    tables: Mutex<HashMap<CodeSpec, Arc<IsalTables>>>,
    decode_tables: Mutex<HashMap<PatternKey, DecodeTables>>,
    add_tables: TableCache<IsalTables>,
}

impl fmt::Debug for IsalRail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsalRail").field("path", &self.isal.path()).finish()
    }
}

impl IsalRail {
    /// ISA-L tables of rs's parity columns at `positions`, after checking the add's shape;
    /// other codes are declined.
    fn add_tables(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &[&mut [u8]],
    ) -> Result<Arc<IsalTables>, EngineError> {
        let CodeSpec::Rs { k, r } = code.spec() else {
            return Err(EngineError::Declined {
                rail: "isal".into(),
                code: code.spec().to_string(),
            });
        };
        check_add_shape(code, positions, data, parity)?;
        self.add_tables.get_or_build(code.spec(), positions, || {
            let generator = self.isal.cauchy1_matrix(k + r, k);
            let columns = parity_columns(&generator, k, positions);
            Ok(self.isal.init_tables(positions.len(), r, &columns))
        })
    }

    /// Loads ISA-L; the error says how to install it.
    pub fn load() -> Result<IsalRail, weft_isal::IsalError> {
        Ok(IsalRail {
            isal: Isal::load()?,
            tables: Mutex::new(HashMap::new()),
            decode_tables: Mutex::new(HashMap::new()),
            add_tables: TableCache::default(),
        })
    }

    fn tables(&self, k: usize, r: usize, spec: CodeSpec) -> Arc<IsalTables> {
        let mut tables = self.tables.lock().expect("isal tables lock");
        tables
            .entry(spec)
            .or_insert_with(|| {
                let matrix = self.isal.cauchy1_matrix(k + r, k);
                Arc::new(self.isal.init_tables(k, r, &matrix[k * k..]))
            })
            .clone()
    }

    /// Decode tables for one erasure pattern, from ISA-L's own generator and inversion.
    fn decode_tables(
        &self,
        k: usize,
        r: usize,
        spec: CodeSpec,
        units: &[Option<&[u8]>],
        wanted: &[usize],
    ) -> Result<DecodeTables, EngineError> {
        let key: PatternKey =
            (spec, (0..units.len()).filter(|&i| units[i].is_some()).collect(), wanted.to_vec());
        if let Some((present, tables)) = self.decode_tables.lock().expect("isal lock").get(&key) {
            return Ok((present.clone(), tables.clone()));
        }
        let generator = self.isal.cauchy1_matrix(k + r, k);
        let (present, rows) =
            rs_decode_rows(&generator, k, units, wanted, |m, n| self.isal.invert_matrix(m, n))?;
        let tables = Arc::new(self.isal.init_tables(k, wanted.len(), &rows));
        let mut cache = self.decode_tables.lock().expect("isal lock");
        if cache.len() >= MAX_DECODE_TABLES {
            cache.clear();
        }
        cache.insert(key, (present.clone(), tables.clone()));
        Ok((present, tables))
    }
}

impl Rail for IsalRail {
    fn name(&self) -> &str {
        "isal"
    }

    fn accepts(&self, code: &dyn Code) -> bool {
        matches!(code.spec(), CodeSpec::Rs { k, r } if k + r <= 256)
    }

    fn encode(
        &self,
        code: &dyn Code,
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let CodeSpec::Rs { k, r } = code.spec() else {
            return Err(EngineError::Declined {
                rail: "isal".into(),
                code: code.spec().to_string(),
            });
        };
        check_shape(code, data, parity)?;
        let tables = self.tables(k, r, code.spec());
        self.isal.encode_data(&tables, data, parity);
        Ok(())
    }

    /// ISA-L adds each position's share into the accumulators in place
    /// (`ec_encode_data_update`); a library without it encodes the share into scratch
    /// regions, which are then added (XOR) into the accumulators.
    fn encode_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let tables = self.add_tables(code, positions, data, parity)?;
        if self.isal.has_update() {
            for (column, source) in data.iter().enumerate() {
                self.isal.encode_data_update(&tables, column, source, parity);
            }
            return Ok(());
        }
        let len = data.first().map_or(0, |d| d.len());
        let mut scratch = vec![vec![0u8; len]; parity.len()];
        let mut scratch_refs: Vec<&mut [u8]> =
            scratch.iter_mut().map(|s| s.as_mut_slice()).collect();
        self.isal.encode_data(&tables, data, &mut scratch_refs);
        for (accumulator, share) in parity.iter_mut().zip(&scratch) {
            for (a, s) in accumulator.iter_mut().zip(share) {
                *a ^= s;
            }
        }
        Ok(())
    }

    /// A first add is a plain ISA-L encode of the positions' share into the accumulators.
    fn encode_first_add(
        &self,
        code: &dyn Code,
        positions: &[usize],
        data: &[&[u8]],
        parity: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let tables = self.add_tables(code, positions, data, parity)?;
        self.isal.encode_data(&tables, data, parity);
        Ok(())
    }

    fn reconstruct(
        &self,
        code: &dyn Code,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        let CodeSpec::Rs { k, r } = code.spec() else {
            return Err(EngineError::Declined {
                rail: "isal".into(),
                code: code.spec().to_string(),
            });
        };
        check_decode_shape(units, wanted, out)?;
        if wanted.is_empty() {
            return Ok(());
        }
        let (present, tables) = self.decode_tables(k, r, code.spec(), units, wanted)?;
        self.isal.encode_data(&tables, &present_slices(units, &present), out);
        Ok(())
    }
}

fn check_shape(code: &dyn Code, data: &[&[u8]], parity: &[&mut [u8]]) -> Result<(), EngineError> {
    let len = data.first().map_or(0, |d| d.len());
    if data.len() != code.data_units()
        || parity.len() != code.parity_units()
        || data.iter().any(|d| d.len() != len)
        || parity.iter().any(|p| p.len() != len)
    {
        return Err(EngineError::Shape(format!(
            "{} wants {} data and {} parity regions of one length",
            code.spec(),
            code.data_units(),
            code.parity_units()
        )));
    }
    Ok(())
}
