//! Intel ISA-L's erasure-code functions, loaded with `dlopen` at run time.
//!
//! weft never links ISA-L: it builds and tests without it. When `libisal.so.2` is installed
//! (Debian: `libisal2`), benchmarks compare against it and tests check that weft's parity equals
//! ISA-L's byte for byte.
//!
//! Invariants:
//! - The function pointers are only used while `library` is alive (they live in the same
//!   struct, and `Isal` is never cloned apart from its library).
//! - Every call checks lengths and counts before crossing into C; ISA-L does no checking.
//! - Loading needs only the functions every ISA-L 2.x has; `ec_encode_data_update` is
//!   optional ([`Isal::has_update`]), and calling it when absent panics, never jumps to null.
//! - `WEFT_ISAL_VARIANT=avx512|avx2|avx|sse|base` binds [`Isal::encode_data`] and
//!   [`Isal::encode_data_update`] to that implementation instead of ISA-L's own dispatch (to
//!   measure a CPU with fewer instruction sets on one that has more); a variant the library
//!   lacks or the CPU cannot run is refused at load, never replaced by another.

use std::ffi::c_int;
use std::fmt;

use libloading::Library;

/// Names tried, in order, when `WEFT_ISAL_LIB` is not set.
pub const LIBRARY_NAMES: &[&str] = &["libisal.so.2", "libisal.so", "libisal.dylib"];

/// Why ISA-L could not be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum IsalError {
    /// No library could be opened.
    NotInstalled { tried: Vec<String>, last_error: String },
    /// The library lacks a function weft needs.
    MissingSymbol { name: &'static str, error: String },
    /// `WEFT_ISAL_VARIANT` names no variant, or one this library or CPU cannot run.
    Variant { value: String, available: Vec<IsalVariant> },
}

impl fmt::Display for IsalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsalError::NotInstalled { tried, last_error } => write!(
                f,
                "ISA-L is not installed (tried {}: {last_error}); on Debian/Ubuntu run \
                 `apt-get install libisal2`, or set WEFT_ISAL_LIB to the library's path",
                tried.join(", ")
            ),
            IsalError::MissingSymbol { name, error } => {
                write!(f, "the ISA-L library has no {name}: {error}")
            }
            IsalError::Variant { value, available } => write!(
                f,
                "WEFT_ISAL_VARIANT={value:?} cannot be used here; available: {}",
                available.iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

impl std::error::Error for IsalError {}

type InitTables = unsafe extern "C" fn(c_int, c_int, *mut u8, *mut u8);
type EncodeData = unsafe extern "C" fn(c_int, c_int, c_int, *mut u8, *mut *mut u8, *mut *mut u8);
type EncodeDataUpdate =
    unsafe extern "C" fn(c_int, c_int, c_int, c_int, *mut u8, *mut u8, *mut *mut u8);
type GenMatrix = unsafe extern "C" fn(*mut u8, c_int, c_int);
type InvertMatrix = unsafe extern "C" fn(*mut u8, *mut u8, c_int) -> c_int;

/// Which of ISA-L's `ec_encode_data` implementations to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsalVariant {
    /// ISA-L's own run-time dispatch (its best path for this CPU).
    Auto,
    /// `ec_encode_data_avx512`.
    Avx512,
    /// `ec_encode_data_avx2`.
    Avx2,
    /// `ec_encode_data_avx` (128-bit, VEX-encoded).
    Avx,
    /// `ec_encode_data_sse` (128-bit `pshufb`; ISA-L dispatches it on SSE4.1).
    Sse,
    /// `ec_encode_data_base` (portable C).
    Base,
}

impl IsalVariant {
    pub const ALL: [IsalVariant; 6] = [
        IsalVariant::Auto,
        IsalVariant::Avx512,
        IsalVariant::Avx2,
        IsalVariant::Avx,
        IsalVariant::Sse,
        IsalVariant::Base,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IsalVariant::Auto => "auto",
            IsalVariant::Avx512 => "avx512",
            IsalVariant::Avx2 => "avx2",
            IsalVariant::Avx => "avx",
            IsalVariant::Sse => "sse",
            IsalVariant::Base => "base",
        }
    }

    /// The variant a name (as [`IsalVariant::name`] prints it) stands for.
    pub fn parse(value: &str) -> Option<IsalVariant> {
        let value = value.trim().to_ascii_lowercase();
        IsalVariant::ALL.into_iter().find(|v| v.name() == value)
    }

    fn symbol(self) -> &'static str {
        match self {
            IsalVariant::Auto => "ec_encode_data",
            IsalVariant::Avx512 => "ec_encode_data_avx512",
            IsalVariant::Avx2 => "ec_encode_data_avx2",
            IsalVariant::Avx => "ec_encode_data_avx",
            IsalVariant::Sse => "ec_encode_data_sse",
            IsalVariant::Base => "ec_encode_data_base",
        }
    }

    fn update_symbol(self) -> &'static str {
        match self {
            IsalVariant::Auto => "ec_encode_data_update",
            IsalVariant::Avx512 => "ec_encode_data_update_avx512",
            IsalVariant::Avx2 => "ec_encode_data_update_avx2",
            IsalVariant::Avx => "ec_encode_data_update_avx",
            IsalVariant::Sse => "ec_encode_data_update_sse",
            IsalVariant::Base => "ec_encode_data_update_base",
        }
    }

    /// Whether this CPU can run the variant (ISA-L's arch-specific entry points do not check).
    fn cpu_supports(self) -> bool {
        match self {
            IsalVariant::Auto | IsalVariant::Base => true,
            #[cfg(target_arch = "x86_64")]
            IsalVariant::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            IsalVariant::Avx => std::arch::is_x86_feature_detected!("avx"),
            #[cfg(target_arch = "x86_64")]
            IsalVariant::Sse => {
                std::arch::is_x86_feature_detected!("ssse3")
                    && std::arch::is_x86_feature_detected!("sse4.1")
            }
            #[cfg(target_arch = "x86_64")]
            IsalVariant::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// A loaded ISA-L.
pub struct Isal {
    path: String,
    /// What `encode_data` and `encode_data_update` are bound to (`WEFT_ISAL_VARIANT`).
    variant: IsalVariant,
    init_tables: InitTables,
    encode_data: EncodeData,
    /// `ec_encode_data_update`, when the library has it (every ISA-L since 2.10 does).
    encode_data_update: Option<EncodeDataUpdate>,
    variants: Vec<(IsalVariant, EncodeData)>,
    gen_cauchy1_matrix: GenMatrix,
    gen_rs_matrix: GenMatrix,
    invert_matrix: InvertMatrix,
    // Declared last so it is dropped after nothing else can use the pointers.
    _library: Library,
}

impl fmt::Debug for Isal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Isal").field("path", &self.path).field("variant", &self.variant).finish()
    }
}

/// ISA-L's expanded multiplication tables for one matrix (`ec_init_tables`), 32 bytes per
/// coefficient.
#[derive(Debug, Clone)]
pub struct IsalTables {
    k: usize,
    rows: usize,
    tables: Vec<u8>,
}

impl IsalTables {
    pub fn k(&self) -> usize {
        self.k
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
}

impl Isal {
    /// Opens ISA-L: `WEFT_ISAL_LIB` if set, else the usual library names.
    pub fn load() -> Result<Isal, IsalError> {
        let candidates: Vec<String> = match std::env::var("WEFT_ISAL_LIB") {
            Ok(path) if !path.is_empty() => vec![path],
            _ => LIBRARY_NAMES.iter().map(|s| s.to_string()).collect(),
        };
        let mut last_error = String::from("no candidates");
        for candidate in &candidates {
            // SAFETY: loading ISA-L runs no initialisers with preconditions of ours; it is a
            // plain C library.
            match unsafe { Library::new(candidate) } {
                Ok(library) => return Isal::from_library(candidate.clone(), library),
                Err(error) => last_error = error.to_string(),
            }
        }
        Err(IsalError::NotInstalled { tried: candidates, last_error })
    }

    fn from_library(path: String, library: Library) -> Result<Isal, IsalError> {
        fn symbol<T: Copy>(library: &Library, name: &'static str) -> Result<T, IsalError> {
            // SAFETY: the types above are ISA-L's documented prototypes (erasure_code.h).
            unsafe { library.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| IsalError::MissingSymbol { name, error: e.to_string() })
        }
        let variants: Vec<(IsalVariant, EncodeData)> = IsalVariant::ALL
            .into_iter()
            .filter(|v| v.cpu_supports())
            .filter_map(|v| symbol::<EncodeData>(&library, v.symbol()).ok().map(|f| (v, f)))
            .collect();
        let available: Vec<IsalVariant> = variants.iter().map(|(v, _)| *v).collect();
        let variant = chosen_variant(std::env::var("WEFT_ISAL_VARIANT").ok(), &available)?;
        Ok(Isal {
            init_tables: symbol(&library, "ec_init_tables")?,
            encode_data: symbol(&library, variant.symbol())?,
            encode_data_update: symbol(&library, variant.update_symbol()).ok(),
            variant,
            variants,
            gen_cauchy1_matrix: symbol(&library, "gf_gen_cauchy1_matrix")?,
            gen_rs_matrix: symbol(&library, "gf_gen_rs_matrix")?,
            invert_matrix: symbol(&library, "gf_invert_matrix")?,
            path,
            _library: library,
        })
    }

    /// The implementation [`Isal::encode_data`] calls: `Auto` (ISA-L's own dispatch) unless
    /// `WEFT_ISAL_VARIANT` chose one.
    pub fn variant(&self) -> IsalVariant {
        self.variant
    }

    /// The library path or name that was opened.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `gf_gen_cauchy1_matrix`: `rows × k`, row-major.
    pub fn cauchy1_matrix(&self, rows: usize, k: usize) -> Vec<u8> {
        assert!(k >= 1 && rows >= k && rows <= 256, "ISA-L matrices need 1 ≤ k ≤ rows ≤ 256");
        let mut matrix = vec![0u8; rows * k];
        // SAFETY: the buffer holds rows × k bytes, what the function writes.
        unsafe { (self.gen_cauchy1_matrix)(matrix.as_mut_ptr(), rows as c_int, k as c_int) };
        matrix
    }

    /// `gf_gen_rs_matrix` (ISA-L's Vandermonde-style generator, not MDS for every shape).
    pub fn rs_matrix(&self, rows: usize, k: usize) -> Vec<u8> {
        assert!(k >= 1 && rows >= k && rows <= 256, "ISA-L matrices need 1 ≤ k ≤ rows ≤ 256");
        let mut matrix = vec![0u8; rows * k];
        // SAFETY: the buffer holds rows × k bytes, what the function writes.
        unsafe { (self.gen_rs_matrix)(matrix.as_mut_ptr(), rows as c_int, k as c_int) };
        matrix
    }

    /// `gf_invert_matrix` of an `n × n` matrix; `None` when singular.
    pub fn invert_matrix(&self, matrix: &[u8], n: usize) -> Option<Vec<u8>> {
        assert_eq!(matrix.len(), n * n, "matrix must be n × n");
        let mut input = matrix.to_vec(); // ISA-L destroys its input.
        let mut output = vec![0u8; n * n];
        // SAFETY: both buffers are n × n bytes.
        let status =
            unsafe { (self.invert_matrix)(input.as_mut_ptr(), output.as_mut_ptr(), n as c_int) };
        (status == 0).then_some(output)
    }

    /// `ec_init_tables` for a `rows × k` coefficient matrix.
    pub fn init_tables(&self, k: usize, rows: usize, coefficients: &[u8]) -> IsalTables {
        assert_eq!(coefficients.len(), rows * k, "coefficients must be rows × k");
        let mut tables = vec![0u8; 32 * k * rows];
        let mut coefficients = coefficients.to_vec();
        // SAFETY: ISA-L reads rows × k coefficients and writes 32 × k × rows bytes.
        unsafe {
            (self.init_tables)(
                k as c_int,
                rows as c_int,
                coefficients.as_mut_ptr(),
                tables.as_mut_ptr(),
            )
        };
        IsalTables { k, rows, tables }
    }

    /// The `ec_encode_data` variants this library exports and this CPU can run.
    pub fn variants(&self) -> Vec<IsalVariant> {
        self.variants.iter().map(|(v, _)| *v).collect()
    }

    /// `ec_encode_data` (or the variant `WEFT_ISAL_VARIANT` chose):
    /// `coding[i] = Σ_j coef[i][j]·data[j]`.
    pub fn encode_data(&self, tables: &IsalTables, data: &[&[u8]], coding: &mut [&mut [u8]]) {
        self.encode_data_with(IsalVariant::Auto, tables, data, coding)
    }

    /// Whether [`Isal::encode_data_update`] is available.
    pub fn has_update(&self) -> bool {
        self.encode_data_update.is_some()
    }

    /// `ec_encode_data_update`: `coding[i] ^= coef[i][column]·source`, in place: one data
    /// region's share added into the coding regions. Panics when the library lacks it
    /// ([`Isal::has_update`]).
    pub fn encode_data_update(
        &self,
        tables: &IsalTables,
        column: usize,
        source: &[u8],
        coding: &mut [&mut [u8]],
    ) {
        let update = self.encode_data_update.expect("ec_encode_data_update is loaded");
        assert!(column < tables.k, "column {column} of a {}-column matrix", tables.k);
        let len = source.len();
        let mut coding_pointers = coding_pointers(tables, len, coding);
        let tables_ptr = tables.tables.as_ptr() as *mut u8;
        // SAFETY: every pointer is valid for len bytes, the tables hold k × rows entries and
        // column < k; ISA-L reads the source and tables and reads and writes the coding
        // regions.
        unsafe {
            update(
                len as c_int,
                tables.k as c_int,
                tables.rows as c_int,
                column as c_int,
                tables_ptr,
                source.as_ptr() as *mut u8,
                coding_pointers.as_mut_ptr(),
            )
        };
    }

    /// `ec_encode_data` through a chosen variant (`Auto`: the one [`Isal::encode_data`] calls).
    /// Panics when [`Isal::variants`] lacks it.
    pub fn encode_data_with(
        &self,
        variant: IsalVariant,
        tables: &IsalTables,
        data: &[&[u8]],
        coding: &mut [&mut [u8]],
    ) {
        let encode = if variant == IsalVariant::Auto {
            self.encode_data
        } else {
            self.variants
                .iter()
                .find(|(v, _)| *v == variant)
                .map(|(_, f)| *f)
                .unwrap_or_else(|| panic!("ISA-L variant {} is not available", variant.name()))
        };
        assert_eq!(data.len(), tables.k, "one data region per column");
        let len = data.first().map_or(0, |d| d.len());
        assert!(data.iter().all(|d| d.len() == len), "all regions must have the same length");
        let mut data_pointers: Vec<*mut u8> = data.iter().map(|d| d.as_ptr() as *mut u8).collect();
        let mut coding_pointers = coding_pointers(tables, len, coding);
        let tables_ptr = tables.tables.as_ptr() as *mut u8;
        // SAFETY: every pointer is valid for len bytes; ISA-L only reads data and tables
        // (the C prototype lacks const) and writes the coding regions.
        unsafe {
            encode(
                len as c_int,
                tables.k as c_int,
                tables.rows as c_int,
                tables_ptr,
                data_pointers.as_mut_ptr(),
                coding_pointers.as_mut_ptr(),
            )
        };
    }
}

/// The variant a `WEFT_ISAL_VARIANT` value asks for, among those the library and CPU offer;
/// unset or empty is ISA-L's own dispatch.
fn chosen_variant(
    value: Option<String>,
    available: &[IsalVariant],
) -> Result<IsalVariant, IsalError> {
    match value {
        Some(value) if !value.trim().is_empty() => IsalVariant::parse(&value)
            .filter(|v| available.contains(v))
            .ok_or_else(|| IsalError::Variant { value, available: available.to_vec() }),
        _ => Ok(IsalVariant::Auto),
    }
}

/// The coding regions' pointers, after checking there is one per row of `tables`, each `len`
/// bytes, and `len` fits ISA-L's `int`.
fn coding_pointers(tables: &IsalTables, len: usize, coding: &mut [&mut [u8]]) -> Vec<*mut u8> {
    assert_eq!(coding.len(), tables.rows, "one output region per row");
    assert!(len <= c_int::MAX as usize, "ISA-L takes lengths below 2 GiB");
    assert!(coding.iter().all(|c| c.len() == len), "all regions must have the same length");
    coding.iter_mut().map(|c| c.as_mut_ptr()).collect()
}

// SAFETY: ISA-L's functions are reentrant (no global state beyond read-only tables), and
// `Isal` holds only function pointers and the library handle.
unsafe impl Send for Isal {}
// SAFETY: as above; shared use only calls reentrant functions.
unsafe impl Sync for Isal {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weft_isal_variant_is_honoured_or_refused() {
        let available = [IsalVariant::Auto, IsalVariant::Avx2, IsalVariant::Base];
        assert_eq!(chosen_variant(None, &available).unwrap(), IsalVariant::Auto);
        assert_eq!(chosen_variant(Some(" ".into()), &available).unwrap(), IsalVariant::Auto);
        assert_eq!(chosen_variant(Some("AVX2".into()), &available).unwrap(), IsalVariant::Avx2);
        assert_eq!(chosen_variant(Some("base".into()), &available).unwrap(), IsalVariant::Base);
        for refused in ["avx512", "neon"] {
            let error = chosen_variant(Some(refused.into()), &available).unwrap_err();
            let text = error.to_string();
            assert!(text.contains(refused) && text.contains("auto, avx2, base"), "{text}");
        }
        for variant in IsalVariant::ALL {
            assert_eq!(IsalVariant::parse(variant.name()), Some(variant));
        }
    }
}
