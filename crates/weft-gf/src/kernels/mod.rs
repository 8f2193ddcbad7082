//! Region kernels: `dst ^= c·src`, `dst = c·src`, and the multi-source dot product that
//! computes several output rows in one pass over the sources (ISA-L's `ec_encode_data` shape).
//!
//! Invariants:
//! - Every path gives exactly the bytes of [`SimdPath::Scalar`], the oracle, for any length
//!   (including 0 and lengths that are not a multiple of the vector width) and any alignment.
//! - A path is only ever executed after [`SimdPath::is_supported`] said the CPU has it; the
//!   `unsafe` calls into `#[target_feature]` functions rely on that check alone.
//! - Slices handed to a kernel all have the same length; a mismatch is a caller bug and panics
//!   before any byte is written.
//! - `WEFT_SIMD=scalar|ssse3|avx2|gfni` forces a path for the whole process; naming a path
//!   the CPU lacks is refused loudly instead of silently testing another path.

use std::fmt;
use std::sync::OnceLock;

use crate::field::MUL_TABLE;

#[cfg(target_arch = "x86_64")]
mod gfni;
#[cfg(target_arch = "x86_64")]
mod nibble;
mod scalar;
mod xor;

/// Largest number of output rows one kernel pass keeps in registers; more rows are processed
/// in blocks of this many, each block reading the sources again.
pub const MAX_ROWS_PER_PASS: usize = 8;

/// Outputs of at least this many bytes per row are written with streaming (non-temporal)
/// stores by the SIMD paths' `dot_prod`, when every row is aligned for them: a pass this large
/// no longer fits in L2 beside its sources, and streaming saves the read-for-ownership of every
/// output line, a fifth or more of the memory traffic. AVX2, rs(10,4) and rs(6,3) at 16 MiB
/// shards: 7.7–7.9 GB/s without, 8.9–9.2 with; at 1–2 MiB streaming was 10% slower (the
/// outputs still fit in the last-level cache), at 4 MiB alike.
const STREAMING_STORE_MIN_BYTES: usize = 4 << 20;

/// The instruction-set path a kernel runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimdPath {
    /// Portable table lookups: the oracle every other path is checked against.
    Scalar,
    /// SSSE3 split-nibble table lookups (`pshufb`), 16 bytes per instruction: x86-64 CPUs
    /// without AVX2 (x86-64-v2).
    Ssse3,
    /// AVX2 split-nibble table lookups (`vpshufb`), 32 bytes per instruction.
    Avx2,
    /// AVX-512 with GFNI affine transforms (`vgf2p8affineqb`), 64 bytes per instruction.
    Gfni,
}

/// A `WEFT_SIMD` value that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimdError {
    /// The value names no path.
    Unknown { value: String },
    /// The path exists but this CPU lacks the instructions.
    Unsupported { path: SimdPath },
}

impl fmt::Display for SimdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimdError::Unknown { value } => {
                write!(f, "WEFT_SIMD={value:?} is not a path; use scalar, ssse3, avx2 or gfni")
            }
            SimdError::Unsupported { path } => write!(
                f,
                "WEFT_SIMD={} but this CPU lacks {}; supported here: {}",
                path.name(),
                path.required_features(),
                SimdPath::supported().iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

impl std::error::Error for SimdError {}

impl SimdPath {
    /// All paths, slowest first.
    pub const ALL: [SimdPath; 4] =
        [SimdPath::Scalar, SimdPath::Ssse3, SimdPath::Avx2, SimdPath::Gfni];

    pub fn name(self) -> &'static str {
        match self {
            SimdPath::Scalar => "scalar",
            SimdPath::Ssse3 => "ssse3",
            SimdPath::Avx2 => "avx2",
            SimdPath::Gfni => "gfni",
        }
    }

    fn required_features(self) -> &'static str {
        match self {
            SimdPath::Scalar => "nothing",
            SimdPath::Ssse3 => "SSSE3",
            SimdPath::Avx2 => "AVX2",
            SimdPath::Gfni => "AVX-512F, AVX-512BW and GFNI",
        }
    }

    pub fn parse(value: &str) -> Result<SimdPath, SimdError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(SimdPath::Scalar),
            "ssse3" | "sse" => Ok(SimdPath::Ssse3),
            "avx2" => Ok(SimdPath::Avx2),
            "gfni" | "avx512" | "avx512-gfni" => Ok(SimdPath::Gfni),
            _ => Err(SimdError::Unknown { value: value.to_string() }),
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            SimdPath::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            SimdPath::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            SimdPath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            SimdPath::Gfni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Paths this CPU supports, slowest first.
    pub fn supported() -> Vec<SimdPath> {
        SimdPath::ALL.into_iter().filter(|p| p.is_supported()).collect()
    }

    /// The fastest path this CPU supports.
    pub fn best() -> SimdPath {
        *SimdPath::supported().last().expect("scalar is always supported")
    }

    /// The path `WEFT_SIMD` asks for, if any, checked against the CPU.
    pub fn from_env() -> Result<Option<SimdPath>, SimdError> {
        match std::env::var("WEFT_SIMD") {
            Ok(value) if !value.trim().is_empty() => {
                let path = SimdPath::parse(&value)?;
                if path.is_supported() {
                    Ok(Some(path))
                } else {
                    Err(SimdError::Unsupported { path })
                }
            }
            _ => Ok(None),
        }
    }

    /// The path the process uses: `WEFT_SIMD` when set, else [`SimdPath::best`]. Decided once.
    ///
    /// Panics when `WEFT_SIMD` is invalid for this CPU: running another path than the one a
    /// test run asked for would make its result meaningless. Binaries call
    /// [`SimdPath::from_env`] first to print a clean error instead.
    pub fn active() -> SimdPath {
        static ACTIVE: OnceLock<SimdPath> = OnceLock::new();
        *ACTIVE.get_or_init(|| match SimdPath::from_env() {
            Ok(Some(path)) => path,
            Ok(None) => SimdPath::best(),
            Err(error) => panic!("{error}"),
        })
    }
}

impl fmt::Display for SimdPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Per-coefficient constants a SIMD path needs, laid out `[source][row]`.
#[derive(Clone)]
enum Expanded {
    Scalar,
    /// 64 bytes per coefficient: low-nibble products twice, high-nibble products twice
    /// (one layout for both widths of the split-nibble kernel).
    #[cfg(target_arch = "x86_64")]
    Nibble(nibble::Width, Vec<[u8; 64]>),
    /// One 8×8 bit matrix per coefficient, in `vgf2p8affineqb` operand order.
    #[cfg(target_arch = "x86_64")]
    Gfni(Vec<u64>),
}

/// A `rows × cols` coefficient matrix prepared for one [`SimdPath`] (ISA-L's `ec_init_tables`).
///
/// `dot_prod` computes `dst[i] = Σ_j coef[i][j]·src[j]` over byte regions; `dot_prod_add`
/// computes `dst[i] ^= Σ_j coef[i][j]·src[j]`. Preparing costs O(rows·cols); reuse the tables.
#[derive(Clone)]
pub struct DotTables {
    path: SimdPath,
    rows: usize,
    cols: usize,
    coefficients: Vec<u8>,
    expanded: Expanded,
    /// One row of all-ones coefficients: a plain XOR of the sources, no multiplication.
    xor_only: bool,
}

impl fmt::Debug for DotTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DotTables")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .finish()
    }
}

impl DotTables {
    /// Tables for the process's active path. `coefficients` is row-major `rows × cols`.
    pub fn new(coefficients: &[u8], rows: usize, cols: usize) -> DotTables {
        DotTables::with_path(SimdPath::active(), coefficients, rows, cols)
    }

    /// Tables for an explicit path. Panics when the CPU does not support it.
    pub fn with_path(path: SimdPath, coefficients: &[u8], rows: usize, cols: usize) -> DotTables {
        assert_eq!(coefficients.len(), rows * cols, "coefficient matrix must be rows × cols");
        assert!(path.is_supported(), "SIMD path {path} is not supported by this CPU");
        let expanded = match path {
            SimdPath::Scalar => Expanded::Scalar,
            #[cfg(target_arch = "x86_64")]
            SimdPath::Ssse3 => Expanded::Nibble(
                nibble::Width::Ssse3,
                transposed(coefficients, rows, cols, nibble::nibble_tables),
            ),
            #[cfg(target_arch = "x86_64")]
            SimdPath::Avx2 => Expanded::Nibble(
                nibble::Width::Avx2,
                transposed(coefficients, rows, cols, nibble::nibble_tables),
            ),
            #[cfg(target_arch = "x86_64")]
            SimdPath::Gfni => {
                Expanded::Gfni(transposed(coefficients, rows, cols, gfni::affine_matrix))
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("checked by is_supported"),
        };
        let xor_only = rows == 1 && cols > 0 && coefficients.iter().all(|&c| c == 1);
        DotTables { path, rows, cols, coefficients: coefficients.to_vec(), expanded, xor_only }
    }

    pub fn path(&self) -> SimdPath {
        self.path
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row-major coefficients.
    pub fn coefficients(&self) -> &[u8] {
        &self.coefficients
    }

    /// `dst[i] = Σ_j coef[i][j]·src[j]`.
    pub fn dot_prod(&self, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        self.run::<false>(srcs, dsts);
    }

    /// `dst[i] ^= Σ_j coef[i][j]·src[j]`.
    pub fn dot_prod_add(&self, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        self.run::<true>(srcs, dsts);
    }

    fn run<const ADD: bool>(&self, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        assert_eq!(srcs.len(), self.cols, "one source per column");
        assert_eq!(dsts.len(), self.rows, "one destination per row");
        let len = dsts.first().map(|d| d.len()).or(srcs.first().map(|s| s.len())).unwrap_or(0);
        assert!(srcs.iter().all(|s| s.len() == len), "all regions must have the same length");
        assert!(dsts.iter().all(|d| d.len() == len), "all regions must have the same length");
        if self.rows == 0 || len == 0 {
            return;
        }
        if self.cols == 0 {
            if !ADD {
                dsts.iter_mut().for_each(|d| d.fill(0));
            }
            return;
        }
        if self.xor_only {
            let dst = &mut *dsts[0];
            match self.path {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: with_path checked AVX-512F/BW + GFNI; lengths checked above.
                SimdPath::Gfni => unsafe { xor::sum_avx512::<ADD>(srcs, dst) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: with_path checked AVX2; lengths checked above.
                SimdPath::Avx2 => unsafe { xor::sum_avx2::<ADD>(srcs, dst) },
                _ => xor::sum_scalar::<ADD>(srcs, dst, 0),
            }
            return;
        }
        let mut row0 = 0;
        while row0 < self.rows {
            let block = (self.rows - row0).min(MAX_ROWS_PER_PASS);
            let dst_block = &mut dsts[row0..row0 + block];
            match &self.expanded {
                Expanded::Scalar => {
                    scalar::dot::<ADD>(&self.coefficients, self.cols, row0, srcs, dst_block)
                }
                #[cfg(target_arch = "x86_64")]
                Expanded::Nibble(width, tables) => {
                    // SAFETY: with_path checked that the CPU supports the width's instruction
                    // set; lengths checked above.
                    unsafe {
                        nibble::dot::<ADD>(*width, &tables[row0..], self.rows, srcs, dst_block)
                    }
                }
                #[cfg(target_arch = "x86_64")]
                Expanded::Gfni(matrices) => {
                    // SAFETY: with_path checked AVX-512F/BW + GFNI; lengths checked above.
                    unsafe { gfni::dot::<ADD>(&matrices[row0..], self.rows, srcs, dst_block) }
                }
            }
            row0 += block;
        }
    }
}

/// Maps every coefficient through `expand`, laid out `[source][row]` so a kernel walking the
/// sources reads its constants sequentially.
#[cfg(target_arch = "x86_64")]
fn transposed<T>(coefficients: &[u8], rows: usize, cols: usize, expand: fn(u8) -> T) -> Vec<T> {
    let mut out = Vec::with_capacity(rows * cols);
    for j in 0..cols {
        for i in 0..rows {
            out.push(expand(coefficients[i * cols + j]));
        }
    }
    out
}

/// A row `b = Σ_j c_j·src_j` paired with a row `a = b ^ (XOR of some sources)`, computed in
/// one pass over the sources. This is the shape of Hitchhiker-XOR+ repair: the b-half by RS,
/// the a-half from the piggyback, whose parity row is all ones.
#[derive(Clone)]
pub struct XorPairTables {
    b: DotTables,
    in_a: Vec<bool>,
    /// The XOR row alone, for paths without a fused kernel.
    a_sources: Vec<usize>,
    #[cfg(target_arch = "x86_64")]
    matrices: Vec<u64>,
}

impl fmt::Debug for XorPairTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XorPairTables").field("b", &self.b).field("in_a", &self.in_a).finish()
    }
}

impl XorPairTables {
    /// `b_coefficients[j]` is source j's coefficient in b (0: not in b); `in_a[j]` says whether
    /// source j is XORed into a.
    pub fn new(b_coefficients: &[u8], in_a: &[bool]) -> XorPairTables {
        XorPairTables::with_path(SimdPath::active(), b_coefficients, in_a)
    }

    pub fn with_path(path: SimdPath, b_coefficients: &[u8], in_a: &[bool]) -> XorPairTables {
        assert_eq!(b_coefficients.len(), in_a.len(), "one flag per source");
        let cols = b_coefficients.len();
        XorPairTables {
            b: DotTables::with_path(path, b_coefficients, 1, cols),
            in_a: in_a.to_vec(),
            a_sources: (0..cols).filter(|&j| in_a[j]).collect(),
            #[cfg(target_arch = "x86_64")]
            matrices: b_coefficients
                .iter()
                .map(|&c| if c == 0 { 0 } else { gfni::affine_matrix(c) })
                .collect(),
        }
    }

    /// `b = Σ c_j·src_j`, then `a = b ^ XOR(src_j for in_a[j])`.
    pub fn run(&self, srcs: &[&[u8]], b: &mut [u8], a: &mut [u8]) {
        assert_eq!(srcs.len(), self.in_a.len(), "one source per column");
        assert_eq!(a.len(), b.len(), "all regions must have the same length");
        assert!(srcs.iter().all(|s| s.len() == b.len()), "all regions must have the same length");
        match self.b.path {
            #[cfg(target_arch = "x86_64")]
            SimdPath::Gfni => {
                // SAFETY: with_path checked GFNI support; lengths and counts checked above.
                unsafe { gfni::dot_with_xor_row(&self.matrices, &self.in_a, srcs, b, a) }
            }
            _ => {
                self.b.dot_prod(srcs, &mut [&mut *b]);
                a.copy_from_slice(b);
                for &j in &self.a_sources {
                    xor_region(srcs[j], a);
                }
            }
        }
    }
}

/// `dst ^= c·src` on the active path.
pub fn mul_add_region(c: u8, src: &[u8], dst: &mut [u8]) {
    mul_add_region_with(SimdPath::active(), c, src, dst)
}

/// `dst = c·src` on the active path.
pub fn mul_region(c: u8, src: &[u8], dst: &mut [u8]) {
    mul_region_with(SimdPath::active(), c, src, dst)
}

/// `dst ^= src`.
pub fn xor_region(src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "all regions must have the same length");
    // Word-at-a-time XOR auto-vectorises well; no table is involved.
    let mut d = dst.chunks_exact_mut(32);
    let mut s = src.chunks_exact(32);
    for (d, s) in (&mut d).zip(&mut s) {
        for (d, s) in d.iter_mut().zip(s) {
            *d ^= s;
        }
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d ^= s;
    }
}

/// `dst ^= c·src` on an explicit path.
pub fn mul_add_region_with(path: SimdPath, c: u8, src: &[u8], dst: &mut [u8]) {
    match c {
        0 => assert_eq!(src.len(), dst.len(), "all regions must have the same length"),
        1 => xor_region(src, dst),
        _ => single::<true>(path, c, src, dst),
    }
}

/// `dst = c·src` on an explicit path.
pub fn mul_region_with(path: SimdPath, c: u8, src: &[u8], dst: &mut [u8]) {
    match c {
        0 => {
            assert_eq!(src.len(), dst.len(), "all regions must have the same length");
            dst.fill(0)
        }
        1 => dst.copy_from_slice(src),
        _ => single::<false>(path, c, src, dst),
    }
}

/// One coefficient, one region: the per-coefficient constants live on the stack, so the
/// region helpers allocate nothing and suit hot loops.
fn single<const ADD: bool>(path: SimdPath, c: u8, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "all regions must have the same length");
    assert!(path.is_supported(), "SIMD path {path} is not supported by this CPU");
    if src.is_empty() {
        return;
    }
    match path {
        SimdPath::Scalar => scalar::dot::<ADD>(&[c], 1, 0, &[src], &mut [dst]),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: support was asserted above; the lengths are equal.
        SimdPath::Ssse3 => unsafe {
            let tables = [nibble::nibble_tables(c)];
            nibble::dot::<ADD>(nibble::Width::Ssse3, &tables, 1, &[src], &mut [dst])
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: support was asserted above; the lengths are equal.
        SimdPath::Avx2 => unsafe {
            let tables = [nibble::nibble_tables(c)];
            nibble::dot::<ADD>(nibble::Width::Avx2, &tables, 1, &[src], &mut [dst])
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: support was asserted above; the lengths are equal.
        SimdPath::Gfni => unsafe {
            gfni::dot::<ADD>(&[gfni::affine_matrix(c)], 1, &[src], &mut [dst])
        },
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("checked by is_supported"),
    }
}

/// Scalar product of one byte, used by table builders.
#[inline]
fn product(c: u8, x: u8) -> u8 {
    MUL_TABLE[c as usize][x as usize]
}

#[cfg(test)]
mod tests;
