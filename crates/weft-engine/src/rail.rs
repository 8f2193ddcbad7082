//! Rails: the coding backends an engine drives side by side.
//!
//! Invariants:
//! - Every rail's parity for a code it accepts is byte-identical to [`ScalarRail`]'s (the
//!   oracle); the engine checks this with a canary before giving a rail any task of that code,
//!   so nothing needs to record which rail encoded which bytes.
//! - A rail declines (`accepts` false) any code it cannot compute exactly.
//! - Rails are stateless apart from caches keyed by the code's spec; any thread may call them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use weft_codes::{Code, CodeSpec, LinearCode};
use weft_gf::{DotTables, SimdPath};
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
}

/// weft's own kernels on the best SIMD path of this CPU (or the one `WEFT_SIMD` forces).
#[derive(Debug, Default)]
pub struct SimdRail;

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
}

/// The oracle. For rs it runs weft-gf's scalar kernels on the rs generator's parity rows,
/// whatever `WEFT_SIMD` says, so it is independent of the SIMD paths. For other codes it
/// encodes with the code itself (on the process's SIMD path): that is then the reference by
/// definition, and the SIMD kernels are checked against scalar in weft-gf's own tests.
#[derive(Debug, Default)]
pub struct ScalarRail {
    tables: Mutex<HashMap<CodeSpec, Arc<DotTables>>>,
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
}

/// Intel ISA-L, loaded at run time. Accepts rs only: ISA-L's `gf_gen_cauchy1_matrix` is the
/// matrix weft's rs is built on, so the parity is identical by construction (and checked by
/// the canary all the same).
pub struct IsalRail {
    isal: Isal,
    tables: Mutex<HashMap<CodeSpec, Arc<IsalTables>>>,
}

impl fmt::Debug for IsalRail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsalRail").field("path", &self.isal.path()).finish()
    }
}

impl IsalRail {
    /// Loads ISA-L; the error says how to install it.
    pub fn load() -> Result<IsalRail, weft_isal::IsalError> {
        Ok(IsalRail { isal: Isal::load()?, tables: Mutex::new(HashMap::new()) })
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
