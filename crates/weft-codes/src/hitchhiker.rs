//! Hitchhiker codes (Rashmi et al., SIGCOMM'14): `hh-xor(k,r)`, `hh-xor+(k,r)` and
//! `hh-nonxor(k,r)`, Reed-Solomon with piggybacks on two sub-chunks per unit.
//!
//! Construction (paper §3 and Appendix, hop-and-couple of §4):
//! - α = 2. Sub-chunk a of a unit of length L is bytes [0, L/2), sub-chunk b is [L/2, L); byte x
//!   of every a-half and byte x of every b-half form one stripe. A helper therefore serves any
//!   repair with one contiguous range (a-half, b-half or the whole unit).
//! - Base code: RS on `Matrix::cauchy1(k + r, k)` with parity rows P_0 … P_{r−1}. For hh-xor+ each
//!   column j is scaled by 1/P_1[j], making P_1 all ones (the paper's all-XOR parity is its
//!   second parity, the one that carries a piggyback); column scaling keeps the code MDS.
//! - a-halves: parity p holds P_p·a. For hh-xor and hh-nonxor that is `rs(k,r)` of the a-halves.
//! - b-halves: parity p holds P_p·b + Σ_{j∈S_p} w_j·a_j. S_1 … S_{r−1} split the first k − ℓ data
//!   units into consecutive sets whose sizes differ by at most one, larger sets last; parity 0
//!   carries no piggyback. w_j = 1 for hh-xor and hh-xor+; w_j = P_1[j] for hh-nonxor (the RS
//!   function P_1 applied to the set's units with every other unit zero).
//! - hh-xor+ and hh-nonxor add parity 1's b-half into its a-half (the XOR+ step): since w = P_1,
//!   S_1 cancels out of that a-half, which lets the last ℓ data units, in no set, be repaired
//!   through it. ℓ = 0 for hh-xor; otherwise ℓ minimises the average data-unit repair read
//!   (ties: smaller maximum, then smaller ℓ), e.g. ℓ = 1 for (10,4).
//!
//! Invariants:
//! - MDS: any k units determine all: undo the XOR+ step (local to parity 1), RS-decode a, subtract
//!   the piggybacks (functions of a), RS-decode b.
//! - The code is linear over the 2n half-units: `generator` (2n × 2k; half-unit 2u + s is sub-chunk
//!   s of unit u) gives each as a combination of the data half-units. Repair computations are
//!   solved from it, so any plan whose reads determine the target can be carried out.
//! - Repairing data unit i with every helper available reads k + s half-units when i is in a set
//!   of s units (both halves of the other s − 1 units of its set; b-halves of the other data
//!   units, of parity 0 and of its set's parity) and k + r + ℓ − 2 for the last ℓ units (b-halves
//!   of the other data units, of parity 0 and of parities 2 … r−1, parity 1's a-half and the
//!   a-halves of the other last units). Parity units, and data units whose preferred helpers are
//!   unavailable, are repaired as RS does: from k units, reading only the halves the solution
//!   uses.
//! - `repair` derives its computation from the ranges of the plan it is handed, never from what
//!   `repair_plan` would answer now, so it reads exactly the planned bytes. `reconstruct` of a
//!   single lost data unit (a degraded read) uses the same computation when its helpers are
//!   present.
//! - Computations are straight-line passes of `DotTables` over half-units, prepared once per
//!   pattern and cached (at most [`MAX_CACHED_DECODINGS`] of each kind, emptied when full), and
//!   run [`RUN_WINDOW_BYTES`] at a time so intermediate halves stay in cache and scratch memory
//!   stays bounded for any unit size.
//! - Cost (why it is faster at all): repairing a data unit multiplies about as much as RS
//!   rebuilding it (2k + s half-length products against k full-length ones) but reads ~35% less,
//!   so the gain is in IO and memory traffic, not arithmetic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_gf::field::MUL_TABLE;
use weft_gf::{DotTables, Matrix, XorPairTables};

use crate::{
    checks, Code, CodeError, CodeSpec, ReadRange, RepairPlan, MAX_CACHED_DECODINGS,
    UPDATE_CHUNK_BYTES,
};

/// Sub-chunks per unit.
const SUB_CHUNKS: usize = 2;
/// Index of the a-half (first sub-chunk) of a unit.
const A: usize = 0;
/// Index of the b-half (second sub-chunk) of a unit.
const B: usize = 1;
/// Bytes of each half-unit a program works on at a time (see [`Program::run`]).
const RUN_WINDOW_BYTES: usize = 32 * 1024;
/// Window for programs without intermediate halves (repairs): nothing to keep in cache, so
/// larger windows only save per-window bookkeeping (measured: 32 KiB windows cost a repair
/// of 1 MiB units about 15%).
const RUN_WINDOW_NO_SCRATCH_BYTES: usize = 256 * 1024;
/// The parity whose b-half is added to its a-half by the XOR+ step (0-based: the paper's second).
const TWISTED_PARITY: usize = 1;

pub(crate) fn build(spec: CodeSpec) -> Result<Arc<dyn Code>, CodeError> {
    Ok(Arc::new(Hitchhiker::new(spec)?))
}

/// Which of the paper's three codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Xor,
    XorPlus,
    NonXor,
}

/// Half-unit (symbol) index of sub-chunk `half` of `unit`.
fn symbol(unit: usize, half: usize) -> usize {
    SUB_CHUNKS * unit + half
}

/// Sizes of `groups` sets holding `units` units between them: as even as possible, larger last.
fn set_sizes(units: usize, groups: usize) -> Vec<usize> {
    let (base, extra) = (units / groups, units % groups);
    (0..groups).map(|g| base + usize::from(g >= groups - extra)).collect()
}

/// Half-units read to repair each data unit when the last `tail` units are in no set (Appendix).
fn data_repair_reads(k: usize, r: usize, tail: usize) -> Vec<usize> {
    let sizes = set_sizes(k - tail, r - 1);
    let mut reads: Vec<usize> = sizes.iter().flat_map(|&s| std::iter::repeat_n(k + s, s)).collect();
    // b-halves of k − 1 data units and parity 0, parity 1's a-half, one b-half per other
    // non-empty set, a-halves of the other tail units.
    let other_sets = sizes[1..].iter().filter(|&&s| s > 0).count();
    reads.extend(std::iter::repeat_n(k + 1 + other_sets + tail.saturating_sub(1), tail));
    reads
}

/// ℓ minimising the average data-unit repair read; ties go to the smaller maximum, then smaller ℓ.
fn choose_tail(k: usize, r: usize) -> usize {
    (0..=k)
        .min_by_key(|&tail| {
            let reads = data_repair_reads(k, r, tail);
            (reads.iter().sum::<usize>(), reads.iter().copied().max().unwrap_or(0), tail)
        })
        .expect("0..=k is not empty")
}

/// `dst += f·src` over GF(2^8), for the small matrices of planning (not a data path).
fn add_scaled(dst: &mut [u8], src: &[u8], f: u8) {
    let row = &MUL_TABLE[f as usize];
    for (d, &s) in dst.iter_mut().zip(src) {
        *d ^= row[s as usize];
    }
}

/// Coefficients X (targets × basis, row-major) with X·G[basis] = G[targets], where G[s] is row s
/// of `generator`; `None` when some target is outside the span. Dependent basis rows get zero
/// coefficients.
fn express(generator: &Matrix, basis: &[usize], targets: &[usize]) -> Option<Vec<u8>> {
    let m = basis.len();
    // Forward elimination; each echelon row remembers which combination of basis rows it is.
    let mut echelon: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::with_capacity(m);
    for (index, &row) in basis.iter().enumerate() {
        let mut vector = generator.row(row).to_vec();
        let mut combination = vec![0u8; m];
        combination[index] = 1;
        for (pivot, echelon_vector, echelon_combination) in &echelon {
            let f = vector[*pivot];
            if f != 0 {
                add_scaled(&mut vector, echelon_vector, f);
                add_scaled(&mut combination, echelon_combination, f);
            }
        }
        if let Some(pivot) = vector.iter().position(|&v| v != 0) {
            let scale = weft_gf::inv(vector[pivot]);
            vector.iter_mut().for_each(|v| *v = weft_gf::mul(*v, scale));
            combination.iter_mut().for_each(|v| *v = weft_gf::mul(*v, scale));
            echelon.push((pivot, vector, combination));
        }
    }
    let mut out = Vec::with_capacity(targets.len() * m);
    for &target in targets {
        let mut vector = generator.row(target).to_vec();
        let mut x = vec![0u8; m];
        // Later echelon rows are zero at earlier pivots, so one pass in order clears them all.
        for (pivot, echelon_vector, echelon_combination) in &echelon {
            let f = vector[*pivot];
            if f != 0 {
                add_scaled(&mut vector, echelon_vector, f);
                add_scaled(&mut x, echelon_combination, f);
            }
        }
        if vector.iter().any(|&v| v != 0) {
            return None;
        }
        out.extend_from_slice(&x);
    }
    Some(out)
}

/// Where a step reads a region from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A half-unit handed in by the caller, by symbol index.
    Input(usize),
    /// An output or scratch half-unit computed by an earlier step.
    Slot(usize),
}

/// `dsts (= or ^=) tables · srcs`, over half-unit regions.
#[derive(Debug)]
struct Step {
    dsts: Vec<usize>,
    srcs: Vec<Source>,
    kind: StepKind,
}

#[derive(Debug)]
enum StepKind {
    /// `dsts (^)= tables · srcs`.
    Dot { tables: DotTables, add: bool },
    /// `dsts = [b, a]` with b a dot product of the sources and a = b ^ an XOR of sources, in
    /// one pass (XOR+ repair).
    XorPair(XorPairTables),
}

/// A straight-line computation over half-units: slots `0..outputs` are the caller's output
/// halves, the next `scratch` slots are temporary halves.
#[derive(Debug)]
struct Program {
    steps: Vec<Step>,
    outputs: usize,
    scratch: usize,
}

impl Program {
    fn new(outputs: usize) -> Program {
        Program { steps: Vec::new(), outputs, scratch: 0 }
    }

    fn scratch_slot(&mut self) -> usize {
        self.scratch += 1;
        self.outputs + self.scratch - 1
    }

    fn push(&mut self, dsts: Vec<usize>, srcs: Vec<Source>, coefficients: &[u8], add: bool) {
        let tables = DotTables::new(coefficients, dsts.len(), srcs.len());
        self.steps.push(Step { dsts, srcs, kind: StepKind::Dot { tables, add } });
    }

    /// Appends steps that make `dsts[i] (= or ^=) Σ_j coefficients[i][j]·srcs[j]`. Sources every
    /// row uses go through one multi-row pass (each source read once); a row's other sources
    /// are added by a pass of its own, so no pass multiplies by zero.
    fn compute(&mut self, dsts: &[usize], srcs: &[Source], coefficients: &[u8], add: bool) {
        let (rows, cols) = (dsts.len(), srcs.len());
        assert_eq!(coefficients.len(), rows * cols);
        let at = |i: usize, j: usize| coefficients[i * cols + j];
        let shared: Vec<usize> = (0..cols).filter(|&j| (0..rows).all(|i| at(i, j) != 0)).collect();
        if !shared.is_empty() || !add {
            let mut main = Vec::with_capacity(rows * shared.len());
            for i in 0..rows {
                main.extend(shared.iter().map(|&j| at(i, j)));
            }
            // With no shared source and add == false this zero-fills the rows first.
            self.push(dsts.to_vec(), shared.iter().map(|&j| srcs[j]).collect(), &main, add);
        }
        for (i, &dst) in dsts.iter().enumerate() {
            let extra: Vec<usize> =
                (0..cols).filter(|&j| at(i, j) != 0 && !shared.contains(&j)).collect();
            if !extra.is_empty() {
                let row: Vec<u8> = extra.iter().map(|&j| at(i, j)).collect();
                self.push(vec![dst], extra.iter().map(|&j| srcs[j]).collect(), &row, true);
            }
        }
    }

    /// Runs the steps. `inputs[s]` is symbol s's region (when the program reads it); every
    /// region, input or output, is `half` bytes long. Steps are position-wise, so the program
    /// runs a window at a time: what one step writes and the next reads stays in cache, and
    /// scratch is one window per slot.
    fn run(&self, inputs: &[Option<&[u8]>], mut outputs: Vec<&mut [u8]>, half: usize) {
        assert_eq!(outputs.len(), self.outputs, "one region per output slot");
        let window = if self.scratch == 0 { RUN_WINDOW_NO_SCRATCH_BYTES } else { RUN_WINDOW_BYTES }
            .min(half);
        if window == 0 {
            return;
        }
        let mut scratch = vec![0u8; self.scratch * window];
        let mut offset = 0;
        while offset < half {
            let end = (offset + window).min(half);
            let mut slots: Vec<Option<&mut [u8]>> = outputs
                .iter_mut()
                .map(|o| Some(&mut o[offset..end]))
                .chain(scratch.chunks_exact_mut(window).map(|s| Some(&mut s[..end - offset])))
                .collect();
            for step in &self.steps {
                // Destinations leave the slot table while the step runs; a step never reads
                // the slots it writes.
                let mut dsts: Vec<&mut [u8]> = step
                    .dsts
                    .iter()
                    .map(|&s| slots[s].take().expect("a step writes each slot once"))
                    .collect();
                {
                    let srcs: Vec<&[u8]> = step
                        .srcs
                        .iter()
                        .map(|source| match *source {
                            Source::Input(symbol) => {
                                &inputs[symbol].expect("program reads an input")[offset..end]
                            }
                            Source::Slot(s) => {
                                slots[s].as_deref().expect("read slot is not written")
                            }
                        })
                        .collect();
                    match &step.kind {
                        StepKind::Dot { tables, add: true } => {
                            tables.dot_prod_add(&srcs, &mut dsts)
                        }
                        StepKind::Dot { tables, add: false } => tables.dot_prod(&srcs, &mut dsts),
                        StepKind::XorPair(tables) => {
                            let [b, a] = &mut dsts[..] else { unreachable!("two outputs") };
                            tables.run(&srcs, b, a);
                        }
                    }
                }
                for (&s, dst) in step.dsts.iter().zip(dsts) {
                    slots[s] = Some(dst);
                }
            }
            offset = end;
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct DecodeKey {
    present: [u64; 4],
    wanted: Vec<u16>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct RepairKey {
    target: u16,
    symbols: [u64; 8],
}

/// Looks `key` up in a bounded cache, building and inserting on a miss.
fn cached<K: std::hash::Hash + Eq, V>(
    cache: &Mutex<HashMap<K, Arc<V>>>,
    key: K,
    build: impl FnOnce() -> Result<V, CodeError>,
) -> Result<Arc<V>, CodeError> {
    if let Some(found) = cache.lock().expect("cache poisoned").get(&key) {
        return Ok(found.clone());
    }
    let value = Arc::new(build()?);
    let mut cache = cache.lock().expect("cache poisoned");
    if cache.len() >= MAX_CACHED_DECODINGS {
        cache.clear();
    }
    cache.insert(key, value.clone());
    Ok(value)
}

/// One of the three Hitchhiker codes.
struct Hitchhiker {
    spec: CodeSpec,
    k: usize,
    r: usize,
    /// r × k parity rows of the base RS code (column-scaled for hh-xor+).
    parity: Matrix,
    /// `sets[p]`: the data units whose piggyback parity p carries (empty for p = 0).
    sets: Vec<Vec<usize>>,
    /// The parity carrying each data unit's piggyback; `None` for the last ℓ units.
    set_of: Vec<Option<usize>>,
    /// Piggyback coefficient w_j of each data unit.
    weights: Vec<u8>,
    /// Whether the XOR+ step is applied to parity 1 (hh-xor+, hh-nonxor).
    twisted: bool,
    /// ℓ: data units (the last ones) in no set.
    tail: usize,
    /// 2n × 2k: every half-unit as a combination of the 2k data half-units.
    generator: Matrix,
    encoding: Program,
    /// Per data unit: its contribution to every parity half.
    additions: Vec<Program>,
    decodings: Mutex<HashMap<DecodeKey, Arc<Program>>>,
    repairs: Mutex<HashMap<RepairKey, Arc<Program>>>,
}

impl std::fmt::Debug for Hitchhiker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hitchhiker")
            .field("spec", &self.spec)
            .field("tail", &self.tail)
            .field("sets", &self.sets)
            .finish()
    }
}

impl Hitchhiker {
    fn new(spec: CodeSpec) -> Result<Hitchhiker, CodeError> {
        spec.validate()?;
        let (variant, k, r) = match spec {
            CodeSpec::HhXor { k, r } => (Variant::Xor, k, r),
            CodeSpec::HhXorPlus { k, r } => (Variant::XorPlus, k, r),
            CodeSpec::HhNonXor { k, r } => (Variant::NonXor, k, r),
            _ => {
                return Err(CodeError::InvalidParameters {
                    code: spec.to_string(),
                    reason: "not a Hitchhiker code".into(),
                })
            }
        };
        let n = k + r;
        let cauchy = Matrix::cauchy1(n, k).map_err(|e| CodeError::InvalidParameters {
            code: spec.to_string(),
            reason: e.to_string(),
        })?;
        let mut parity = cauchy.sub_matrix(k, 0, r, k);
        if variant == Variant::XorPlus {
            for j in 0..k {
                let scale = weft_gf::inv(parity.get(TWISTED_PARITY, j));
                for p in 0..r {
                    parity.set(p, j, weft_gf::mul(parity.get(p, j), scale));
                }
            }
        }
        let twisted = variant != Variant::Xor;
        let tail = if twisted { choose_tail(k, r) } else { 0 };
        let mut sets = vec![Vec::new()];
        let mut set_of = vec![None; k];
        let mut next = 0;
        for (group, size) in set_sizes(k - tail, r - 1).into_iter().enumerate() {
            let members: Vec<usize> = (next..next + size).collect();
            for &j in &members {
                set_of[j] = Some(group + 1);
            }
            next += size;
            sets.push(members);
        }
        let weights: Vec<u8> = (0..k)
            .map(|j| if variant == Variant::NonXor { parity.get(TWISTED_PARITY, j) } else { 1 })
            .collect();

        let mut generator = Matrix::zeros(SUB_CHUNKS * n, SUB_CHUNKS * k);
        for j in 0..k {
            generator.set(symbol(j, A), symbol(j, A), 1);
            generator.set(symbol(j, B), symbol(j, B), 1);
        }
        for (p, members) in sets.iter().enumerate() {
            let (row_a, row_b) = (symbol(k + p, A), symbol(k + p, B));
            for j in 0..k {
                generator.set(row_a, symbol(j, A), parity.get(p, j));
                generator.set(row_b, symbol(j, B), parity.get(p, j));
            }
            for &j in members {
                generator.set(row_b, symbol(j, A), weights[j]);
            }
        }
        if twisted {
            let (row_a, row_b) = (symbol(k + TWISTED_PARITY, A), symbol(k + TWISTED_PARITY, B));
            for c in 0..SUB_CHUNKS * k {
                generator.set(row_a, c, generator.get(row_a, c) ^ generator.get(row_b, c));
            }
        }

        // Encoding: RS of each half (one pass each), then piggybacks, then the XOR+ step.
        // Output slot 2p + s is sub-chunk s of parity p.
        let mut encoding = Program::new(SUB_CHUNKS * r);
        for half in [A, B] {
            let dsts = (0..r).map(|p| symbol(p, half)).collect();
            let srcs = (0..k).map(|j| Source::Input(symbol(j, half))).collect();
            encoding.push(dsts, srcs, parity.as_slice(), false);
        }
        for (p, members) in sets.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
            let srcs: Vec<Source> = members.iter().map(|&j| Source::Input(symbol(j, A))).collect();
            let coefficients: Vec<u8> = members.iter().map(|&j| weights[j]).collect();
            encoding.push(vec![symbol(p, B)], srcs, &coefficients, true);
        }
        if twisted {
            let src = Source::Slot(symbol(TWISTED_PARITY, B));
            encoding.push(vec![symbol(TWISTED_PARITY, A)], vec![src], &[1], true);
        }

        // encode_add: each data half-unit goes, in one pass, to the parity halves it feeds.
        let additions = (0..k)
            .map(|j| {
                let mut program = Program::new(SUB_CHUNKS * r);
                for half in [A, B] {
                    let column = symbol(j, half);
                    let rows: Vec<usize> = (0..SUB_CHUNKS * r)
                        .filter(|&slot| generator.get(SUB_CHUNKS * k + slot, column) != 0)
                        .collect();
                    let coefficients: Vec<u8> = rows
                        .iter()
                        .map(|&slot| generator.get(SUB_CHUNKS * k + slot, column))
                        .collect();
                    program.push(rows, vec![Source::Input(column)], &coefficients, true);
                }
                program
            })
            .collect();

        Ok(Hitchhiker {
            spec,
            k,
            r,
            parity,
            sets,
            set_of,
            weights,
            twisted,
            tail,
            generator,
            encoding,
            additions,
            decodings: Mutex::new(HashMap::new()),
            repairs: Mutex::new(HashMap::new()),
        })
    }

    fn n(&self) -> usize {
        self.k + self.r
    }

    fn check_index(&self, index: usize) -> Result<(), CodeError> {
        checks::index(index, self.n())
    }

    fn check_parity(&self, parity: &[&mut [u8]], len: usize) -> Result<(), CodeError> {
        checks::parity(self, parity, len)
    }

    fn not_decodable(&self, mut lost: Vec<usize>, reason: String) -> CodeError {
        lost.sort_unstable();
        lost.dedup();
        CodeError::NotDecodable { code: self.spec.to_string(), lost, reason }
    }

    /// Row u of the base RS generator (identity on top).
    fn base_row(&self, unit: usize) -> Vec<u8> {
        if unit < self.k {
            let mut row = vec![0u8; self.k];
            row[unit] = 1;
            row
        } else {
            self.parity.row(unit - self.k).to_vec()
        }
    }

    /// The decoding of the (sorted, lost) `wanted` units from the `present` units (≥ k).
    fn decoding(&self, present: &[usize], wanted: &[usize]) -> Result<Arc<Program>, CodeError> {
        let mut key =
            DecodeKey { present: [0; 4], wanted: wanted.iter().map(|&w| w as u16).collect() };
        for &p in present {
            key.present[p / 64] |= 1 << (p % 64);
        }
        cached(&self.decodings, key, || Ok(self.build_decoding(present, wanted)))
    }

    /// Stage A recovers a-halves of lost data units by RS from the a-forms of k present units
    /// (parity 1's a-form is a ⊕ b, undoing the XOR+ step); stage B recovers b-halves from the
    /// b-forms (b-half ⊕ piggyback, the piggyback from a-halves now known); stage C re-encodes
    /// lost parity units from the data.
    fn build_decoding(&self, present: &[usize], wanted: &[usize]) -> Program {
        let k = self.k;
        let chosen = &present[..k];
        let mut base = Matrix::zeros(k, k);
        for (row, &unit) in chosen.iter().enumerate() {
            for (col, value) in self.base_row(unit).into_iter().enumerate() {
                base.set(row, col, value);
            }
        }
        let inverse = base.invert().expect("any k units of an MDS code are independent");
        let mut program = Program::new(SUB_CHUNKS * wanted.len());
        let output = |unit: usize, half: usize| {
            wanted.binary_search(&unit).ok().map(|position| symbol(position, half))
        };
        let is_present = |unit: usize| present.binary_search(&unit).is_ok();
        let want_parity = wanted.iter().any(|&w| w >= k);
        let lost_data: Vec<usize> = (0..k).filter(|&j| !is_present(j)).collect();
        let need_b: Vec<usize> =
            lost_data.iter().copied().filter(|&j| want_parity || output(j, B).is_some()).collect();
        let dirty: Vec<usize> = chosen
            .iter()
            .filter(|&&u| u >= k && !self.sets[u - k].is_empty())
            .map(|&u| u - k)
            .collect();
        let need_a: Vec<usize> = lost_data
            .iter()
            .copied()
            .filter(|&j| {
                want_parity
                    || output(j, A).is_some()
                    || (!need_b.is_empty() && dirty.iter().any(|&p| self.sets[p].contains(&j)))
            })
            .collect();
        let mut a_source: Vec<Source> = (0..k).map(|j| Source::Input(symbol(j, A))).collect();
        let mut b_source: Vec<Source> = (0..k).map(|j| Source::Input(symbol(j, B))).collect();

        if !need_a.is_empty() {
            let mut srcs = Vec::with_capacity(k + 1);
            let mut columns = Vec::with_capacity(k + 1);
            for (c, &unit) in chosen.iter().enumerate() {
                srcs.push(Source::Input(symbol(unit, A)));
                columns.push(c);
                if self.twisted && unit == k + TWISTED_PARITY {
                    srcs.push(Source::Input(symbol(unit, B)));
                    columns.push(c);
                }
            }
            let mut coefficients = Vec::with_capacity(need_a.len() * srcs.len());
            let mut dsts = Vec::with_capacity(need_a.len());
            for &j in &need_a {
                coefficients.extend(columns.iter().map(|&c| inverse.get(j, c)));
                let slot = output(j, A).unwrap_or_else(|| program.scratch_slot());
                a_source[j] = Source::Slot(slot);
                dsts.push(slot);
            }
            program.compute(&dsts, &srcs, &coefficients, false);
        }

        if !need_b.is_empty() {
            // Several rows share the piggyback subtraction when it is done once, into scratch;
            // a single row folds it into its own pass.
            let separate = need_b.len() > 1;
            let mut srcs: Vec<Source> = Vec::new();
            let mut terms: Vec<Vec<(usize, u8)>> = Vec::with_capacity(k);
            fn index_of(source: Source, srcs: &mut Vec<Source>) -> usize {
                srcs.iter().position(|&s| s == source).unwrap_or_else(|| {
                    srcs.push(source);
                    srcs.len() - 1
                })
            }
            for &unit in chosen {
                let half = Source::Input(symbol(unit, B));
                let members: &[usize] = if unit >= k { &self.sets[unit - k] } else { &[] };
                if members.is_empty() {
                    terms.push(vec![(index_of(half, &mut srcs), 1)]);
                } else if separate {
                    let slot = program.scratch_slot();
                    let mut clean_srcs = vec![half];
                    clean_srcs.extend(members.iter().map(|&j| a_source[j]));
                    let mut clean = vec![1u8];
                    clean.extend(members.iter().map(|&j| self.weights[j]));
                    program.compute(&[slot], &clean_srcs, &clean, false);
                    terms.push(vec![(index_of(Source::Slot(slot), &mut srcs), 1)]);
                } else {
                    let mut unit_terms = vec![(index_of(half, &mut srcs), 1)];
                    for &j in members {
                        unit_terms.push((index_of(a_source[j], &mut srcs), self.weights[j]));
                    }
                    terms.push(unit_terms);
                }
            }
            let mut coefficients = vec![0u8; need_b.len() * srcs.len()];
            let mut dsts = Vec::with_capacity(need_b.len());
            for (row, &j) in need_b.iter().enumerate() {
                for (c, unit_terms) in terms.iter().enumerate() {
                    let d = inverse.get(j, c);
                    for &(index, factor) in unit_terms {
                        coefficients[row * srcs.len() + index] ^= weft_gf::mul(d, factor);
                    }
                }
                let slot = output(j, B).unwrap_or_else(|| program.scratch_slot());
                b_source[j] = Source::Slot(slot);
                dsts.push(slot);
            }
            program.compute(&dsts, &srcs, &coefficients, false);
        }

        let lost_parity: Vec<usize> = wanted.iter().copied().filter(|&w| w >= k).collect();
        if !lost_parity.is_empty() {
            let srcs: Vec<Source> =
                (0..k).flat_map(|j| [a_source[j], b_source[j]]).collect::<Vec<_>>();
            debug_assert_eq!(srcs.len(), SUB_CHUNKS * k);
            for half in [A, B] {
                let mut coefficients = Vec::with_capacity(lost_parity.len() * srcs.len());
                let mut dsts = Vec::with_capacity(lost_parity.len());
                for &unit in &lost_parity {
                    coefficients.extend_from_slice(self.generator.row(symbol(unit, half)));
                    dsts.push(output(unit, half).expect("wanted"));
                }
                program.compute(&dsts, &srcs, &coefficients, false);
            }
        }
        program
    }

    /// Half-units read to repair data unit `target` when every helper is available.
    fn preferred_symbols(&self, target: usize) -> Vec<usize> {
        let k = self.k;
        let mut symbols: Vec<usize> =
            (0..k).filter(|&j| j != target).map(|j| symbol(j, B)).collect();
        symbols.push(symbol(k, B));
        match self.set_of[target] {
            Some(p) => {
                symbols.push(symbol(k + p, B));
                symbols
                    .extend(self.sets[p].iter().filter(|&&j| j != target).map(|&j| symbol(j, A)));
            }
            None => {
                symbols.push(symbol(k + TWISTED_PARITY, A));
                symbols.extend(
                    (TWISTED_PARITY + 1..self.r)
                        .filter(|&p| !self.sets[p].is_empty())
                        .map(|p| symbol(k + p, B)),
                );
                symbols.extend((k - self.tail..k).filter(|&j| j != target).map(|j| symbol(j, A)));
            }
        }
        symbols.sort_unstable();
        symbols
    }

    /// The computation rebuilding `target` from exactly the half-units `symbols` (sorted).
    fn repair_program(&self, target: usize, symbols: &[usize]) -> Result<Arc<Program>, CodeError> {
        let mut key = RepairKey { target: target as u16, symbols: [0; 8] };
        for &s in symbols {
            key.symbols[s / 64] |= 1 << (s % 64);
        }
        cached(&self.repairs, key, || {
            let targets = [symbol(target, A), symbol(target, B)];
            let coefficients = express(&self.generator, symbols, &targets).ok_or_else(|| {
                CodeError::PlanMismatch {
                    reason: format!("the planned reads do not determine unit {target}"),
                }
            })?;
            let srcs: Vec<Source> = symbols.iter().map(|&s| Source::Input(s)).collect();
            let mut program = Program::new(SUB_CHUNKS);
            match xor_after_b(&coefficients) {
                // XOR+: the a-half is the b-half plus an XOR of reads, so one pass computes
                // both and multiplies only for b.
                Some(in_a) => {
                    let row_b = &coefficients[symbols.len()..];
                    let tables = XorPairTables::new(row_b, &in_a);
                    let kind = StepKind::XorPair(tables);
                    program.steps.push(Step { dsts: vec![B, A], srcs, kind });
                }
                None => program.compute(&[A, B], &srcs, &coefficients, false),
            }
            Ok(program)
        })
    }
}

/// For a repair with rows (a, b) over the same reads: whether a = b + (a XOR of reads), i.e.
/// row_a − row_b has only coefficients 0 and 1 — then returns which reads are in that XOR.
/// True for hh-xor+ (its piggyback parity row is all ones); hh-xor and hh-nonxor run one
/// two-row pass instead.
fn xor_after_b(coefficients: &[u8]) -> Option<Vec<bool>> {
    let (row_a, row_b) = coefficients.split_at(coefficients.len() / 2);
    let difference: Vec<u8> = row_a.iter().zip(row_b).map(|(a, b)| a ^ b).collect();
    difference.iter().all(|&c| c <= 1).then(|| difference.iter().map(|&c| c == 1).collect())
}

/// Parity halves as output regions: sub-chunk s of parity p at position 2p + s.
fn parity_halves<'a>(
    parity: &'a mut [&mut [u8]],
    range: std::ops::Range<usize>,
) -> Vec<&'a mut [u8]> {
    let half = parity.first().map_or(0, |p| p.len() / SUB_CHUNKS);
    parity
        .iter_mut()
        .flat_map(|unit| {
            let (a, b) = unit.split_at_mut(half);
            [&mut a[range.clone()], &mut b[range.clone()]]
        })
        .collect()
}

impl Code for Hitchhiker {
    fn spec(&self) -> CodeSpec {
        self.spec
    }

    fn data_units(&self) -> usize {
        self.k
    }

    fn parity_units(&self) -> usize {
        self.r
    }

    fn sub_chunks(&self) -> usize {
        SUB_CHUNKS
    }

    fn byte_local(&self) -> bool {
        false
    }

    fn unit_len_multiple(&self) -> usize {
        SUB_CHUNKS
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
        let half = len / SUB_CHUNKS;
        let mut inputs: Vec<Option<&[u8]>> = vec![None; SUB_CHUNKS * self.n()];
        for (j, unit) in data.iter().enumerate() {
            let (a, b) = unit.split_at(half);
            inputs[symbol(j, A)] = Some(a);
            inputs[symbol(j, B)] = Some(b);
        }
        self.encoding.run(&inputs, parity_halves(parity, 0..half), half);
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
        let half = data.len() / SUB_CHUNKS;
        let mut inputs: Vec<Option<&[u8]>> = vec![None; SUB_CHUNKS * self.n()];
        let (a, b) = data.split_at(half);
        inputs[symbol(data_index, A)] = Some(a);
        inputs[symbol(data_index, B)] = Some(b);
        self.additions[data_index].run(&inputs, parity_halves(parity, 0..half), half);
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
        // Byte x of both halves feeds byte x of the parity halves only, so the delta can be
        // applied a bounded window of both halves at a time.
        let half = old.len() / SUB_CHUNKS;
        let window = (UPDATE_CHUNK_BYTES / SUB_CHUNKS).min(half);
        let mut delta = vec![0u8; SUB_CHUNKS * window];
        let mut offset = 0;
        while offset < half {
            let end = (offset + window).min(half);
            let (delta_a, delta_b) = delta.split_at_mut(window);
            let (delta_a, delta_b) = (&mut delta_a[..end - offset], &mut delta_b[..end - offset]);
            for (s, d) in [(0, &mut *delta_a), (half, &mut *delta_b)] {
                let (before, after) = (&old[s + offset..s + end], &new[s + offset..s + end]);
                for ((d, x), y) in d.iter_mut().zip(before).zip(after) {
                    *d = x ^ y;
                }
            }
            let mut inputs: Vec<Option<&[u8]>> = vec![None; SUB_CHUNKS * self.n()];
            inputs[symbol(data_index, A)] = Some(delta_a);
            inputs[symbol(data_index, B)] = Some(delta_b);
            let outputs = parity_halves(parity, offset..end);
            self.additions[data_index].run(&inputs, outputs, end - offset);
            offset = end;
        }
        Ok(())
    }

    fn is_decodable(&self, lost: &[usize]) -> bool {
        if lost.iter().any(|&i| i >= self.n()) {
            return false;
        }
        let mut unique = lost.to_vec();
        unique.sort_unstable();
        unique.dedup();
        unique.len() <= self.r
    }

    fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let n = self.n();
        let (present, len) = checks::reconstruct(self, units, wanted, out)?;
        if wanted.is_empty() {
            return Ok(());
        }
        if present.len() < self.k {
            let lost = (0..n).filter(|&i| units[i].is_none()).collect();
            let reason = format!("only {} units present, {} needed", present.len(), self.k);
            return Err(self.not_decodable(lost, reason));
        }
        let mut targets: Vec<usize> =
            wanted.iter().copied().filter(|&w| units[w].is_none()).collect();
        targets.sort_unstable();
        targets.dedup();
        // first[t]: the position in `wanted` whose buffer receives targets[t].
        let mut first = vec![usize::MAX; targets.len()];
        for (position, &w) in wanted.iter().enumerate() {
            if let Ok(t) = targets.binary_search(&w) {
                first[t] = first[t].min(position);
            }
        }
        let half = len / SUB_CHUNKS;
        if !targets.is_empty() {
            // One lost data unit (a degraded read) whose repair helpers are all present: the
            // repair computation reads about a third less than decoding from k units.
            let single_repair = match targets[..] {
                [t] if t < self.k => {
                    let symbols = self.preferred_symbols(t);
                    let usable = symbols.iter().all(|&s| units[s / SUB_CHUNKS].is_some());
                    usable.then_some((t, symbols))
                }
                _ => None,
            };
            let program = match single_repair {
                Some((t, symbols)) => self.repair_program(t, &symbols)?,
                None => self.decoding(&present, &targets)?,
            };
            let mut inputs: Vec<Option<&[u8]>> = vec![None; SUB_CHUNKS * n];
            for &u in &present {
                let (a, b) = units[u].expect("present").split_at(half);
                inputs[symbol(u, A)] = Some(a);
                inputs[symbol(u, B)] = Some(b);
            }
            let mut buffers: Vec<Option<&mut [u8]>> = (0..targets.len()).map(|_| None).collect();
            for (position, buffer) in out.iter_mut().enumerate() {
                if let Some(t) = first.iter().position(|&f| f == position) {
                    buffers[t] = Some(&mut **buffer);
                }
            }
            let outputs: Vec<&mut [u8]> = buffers
                .into_iter()
                .flat_map(|b| {
                    let (a, b) = b.expect("every target has a buffer").split_at_mut(half);
                    [a, b]
                })
                .collect();
            program.run(&inputs, outputs, half);
        }
        // Present units are copied; a unit wanted twice is copied from its first buffer.
        for position in 0..wanted.len() {
            let w = wanted[position];
            if let Some(unit) = units[w] {
                out[position].copy_from_slice(unit);
            } else {
                let source = first[targets.binary_search(&w).expect("lost and wanted")];
                if source != position {
                    let (done, rest) = out.split_at_mut(position);
                    rest[0].copy_from_slice(done[source]);
                }
            }
        }
        Ok(())
    }

    fn repair_plan(
        &self,
        target: usize,
        unavailable: &[usize],
        unit_len: usize,
    ) -> Result<RepairPlan, CodeError> {
        checks::repair_plan(self, target, unavailable, unit_len)?;
        let n = self.n();
        let usable = |unit: usize| unit != target && !unavailable.contains(&unit);
        let preferred = (target < self.k).then(|| self.preferred_symbols(target));
        let symbols = match preferred {
            Some(symbols) if symbols.iter().all(|&s| usable(s / SUB_CHUNKS)) => symbols,
            _ => {
                // As RS: k whole units, then only the halves the solution uses.
                let chosen: Vec<usize> = (0..n).filter(|&u| usable(u)).take(self.k).collect();
                if chosen.len() < self.k {
                    let mut lost = unavailable.to_vec();
                    lost.push(target);
                    let reason = format!(
                        "{} units available to rebuild unit {target}, {} needed",
                        chosen.len(),
                        self.k
                    );
                    return Err(self.not_decodable(lost, reason));
                }
                let all: Vec<usize> =
                    chosen.iter().flat_map(|&u| [symbol(u, A), symbol(u, B)]).collect();
                let targets = [symbol(target, A), symbol(target, B)];
                let coefficients = express(&self.generator, &all, &targets)
                    .expect("any k units determine every unit");
                (0..all.len())
                    .filter(|&c| coefficients[c] != 0 || coefficients[all.len() + c] != 0)
                    .map(|c| all[c])
                    .collect()
            }
        };
        let half = unit_len / SUB_CHUNKS;
        let mut reads: Vec<ReadRange> = Vec::with_capacity(symbols.len());
        for &s in &symbols {
            let (unit, sub_chunk) = (s / SUB_CHUNKS, s % SUB_CHUNKS);
            match reads.last_mut() {
                // Both halves of one unit: one contiguous read of the whole unit.
                Some(last) if last.unit == unit => last.len = unit_len,
                _ => reads.push(ReadRange { unit, offset: sub_chunk * half, len: half }),
            }
        }
        Ok(RepairPlan { target, unit_len, reads })
    }

    fn repair(&self, plan: &RepairPlan, reads: &[&[u8]], out: &mut [u8]) -> Result<(), CodeError> {
        checks::repair(self, plan, reads, out)?;
        let unit_len = plan.unit_len;
        let half = unit_len / SUB_CHUNKS;
        let mut inputs: Vec<Option<&[u8]>> = vec![None; SUB_CHUNKS * self.n()];
        let mut symbols = Vec::with_capacity(SUB_CHUNKS * reads.len());
        for (range, &bytes) in plan.reads.iter().zip(reads) {
            self.check_index(range.unit)?;
            let mismatch = |what: &str| CodeError::PlanMismatch {
                reason: format!(
                    "unit {} range {}+{} ({} bytes handed in): {what}",
                    range.unit,
                    range.offset,
                    range.len,
                    bytes.len()
                ),
            };
            if range.unit == plan.target {
                return Err(mismatch("the target cannot help rebuild itself"));
            }
            if bytes.len() != range.len {
                return Err(mismatch("read length differs from the range"));
            }
            let halves: &[usize] = match (range.offset, range.len) {
                (0, len) if len == unit_len => &[A, B],
                (0, len) if len == half => &[A],
                (offset, len) if offset == half && len == half => &[B],
                _ => return Err(mismatch("ranges must be a half or the whole unit")),
            };
            if unit_len == 0 {
                continue;
            }
            for (i, &h) in halves.iter().enumerate() {
                let s = symbol(range.unit, h);
                if inputs[s].is_some() {
                    return Err(mismatch("half-unit read twice"));
                }
                inputs[s] = Some(&bytes[i * half..(i + 1) * half]);
                symbols.push(s);
            }
        }
        if unit_len == 0 {
            return Ok(());
        }
        symbols.sort_unstable();
        let program = self.repair_program(plan.target, &symbols)?;
        let (a, b) = out.split_at_mut(half);
        program.run(&inputs, vec![a, b], half);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_and_sets_follow_the_paper() {
        assert_eq!(choose_tail(10, 4), 1);
        assert_eq!(set_sizes(10, 3), vec![3, 3, 4]);
        assert_eq!(set_sizes(9, 3), vec![3, 3, 3]);
        assert_eq!(data_repair_reads(10, 4, 0), vec![13, 13, 13, 13, 13, 13, 14, 14, 14, 14]);
        assert_eq!(data_repair_reads(10, 4, 1), vec![13; 10]);
    }

    #[test]
    fn express_finds_combinations_and_refuses_outside_the_span() {
        let g = Matrix::from_vec(3, 2, vec![1, 0, 0, 1, 1, 1]);
        assert_eq!(express(&g, &[0, 1], &[2]), Some(vec![1, 1]));
        assert_eq!(express(&g, &[0, 2], &[1]), Some(vec![1, 1]));
        assert_eq!(express(&g, &[0], &[1]), None);
        // A dependent basis row gets coefficient zero.
        assert_eq!(express(&g, &[0, 1, 2], &[2]), Some(vec![1, 1, 0]));
    }
}
