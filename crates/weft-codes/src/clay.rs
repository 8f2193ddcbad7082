//! Clay codes, `clay(k,r[,d])` (Vajha et al., "Clay Codes: Moulding MDS Codes to Yield an MSR
//! Code", USENIX FAST'18): MDS like `rs(k,r)`, but one lost unit is rebuilt from d helpers
//! reading β = α/q sub-chunks of each, the least any MDS code can read (the MSR point).
//!
//! Construction, with q = d − k + 1, t = ⌈n/q⌉, n' = q·t, k' = k + n' − n, α = q^t, β = α/q:
//! - Units sit on a q × t grid of nodes: unit u is node (x, y) = (u mod q, u div q). When q
//!   does not divide n, the last n' − n nodes are *virtual* data units: all zero, never stored,
//!   never read. There are fewer than q of them, so they all lie in the last y-section, the
//!   one whose repair reads are the most fragmented (see below).
//! - A unit of length L holds α sub-chunks; sub-chunk z is bytes [z·L/α, (z+1)·L/α)
//!   ("hop-and-couple"). Layer z has digits z_y = (z div q^(t−1−y)) mod q: y = 0 is the most
//!   significant digit.
//! - What is stored (C, "coupled") and the auxiliary "uncoupled" sub-chunks U are related by
//!   the paper's pairwise coupling: vertex (x, y, z) with x ≠ z_y pairs with
//!   (z_y, y, z with digit y set to x), and C = U + γ·U*, C* = γ·U + U*. Vertices with
//!   x = z_y are unpaired ("red"): C = U. γ = 2; any γ with γ ≠ 0 and γ² ≠ 1 makes the pair
//!   transform invertible, which is all the proofs need.
//! - In every layer the n' uncoupled sub-chunks are a codeword of the scalar [n', k'] code with
//!   weft's Cauchy generator (`Matrix::cauchy1`, MDS for n' ≤ 256; rows: real data units,
//!   virtual units, parity units). With these facts the code is MDS and MSR (the paper's
//!   theorems); everything below is one of its procedures made into kernel calls.
//!
//! Invariants:
//! - Encoding is decoding with the r parity units erased. A decode erases the missing units
//!   E (|E| ≤ r) and visits every layer after the layers of lower intersection score (how
//!   many erased vertices of a layer are red) that it depends on. Within a layer, the U of k'
//!   known nodes comes from C pairwise (a companion that is erased was finished in a layer of
//!   lower score), the scalar code gives the U of the erased nodes, and each erased C is
//!   finished as soon as its companion allows: right away when the companion is known, when
//!   the second of two erased companions (equal scores) is reached otherwise.
//! - Layers are visited by their digits in sections holding no erased node first, then by
//!   score: dependencies only run through sections holding an erased node, and this order
//!   sweeps memory nearly sequentially (parity sits in the last, least significant sections).
//! - Repairing node (x0, y0) uses the β layers with z_y0 = x0 only. Helpers are the other
//!   nodes of section y0 plus nodes outside it; the r − q real nodes left out (unavailable ones
//!   first) play the erased nodes of a decode, and layers are ordered as in one, so a
//!   left-out companion's U is always ready. Virtual nodes are helpers that cost
//!   nothing, so a repair reads β sub-chunks from exactly d real units. `reconstruct` of a
//!   single unit uses the same procedure on the units it is given (a degraded read computes
//!   β layers, not α).
//! - A helper's repair sub-chunks {z : z_y0 = x0} are q^y0 runs of q^(t−1−y0) adjacent
//!   sub-chunks; each run is one [`ReadRange`]. A unit of section 0 is rebuilt from one range
//!   per helper, a unit of the last section from β ranges of one sub-chunk each.
//! - When the preferred helpers are unavailable (one in section y0, or more than r − q
//!   outside it) but at most r units are lost, the plan reads k whole units and decodes.
//! - Sub-chunks are multiples of 64 bytes (unit lengths multiples of 64·α), so every kernel
//!   call runs on whole vectors of a sub-chunk; no byte is touched by scalar code.
//! - Programs (scalar decoding matrices and layer orders) are prepared once: encoding's at
//!   construction, others per erased set or (target, left-out set) and cached, at most [`MAX_CACHED_PROGRAMS`] of
//!   each, the cache being emptied when full.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_gf::{DotTables, Matrix};

use crate::{checks, Code, CodeError, CodeSpec, ReadRange, RepairPlan};

/// The coupling coefficient γ (γ ≠ 0, γ² ≠ 1).
const GAMMA: u8 = 2;

/// Bytes every sub-chunk is a multiple of: one AVX-512 vector, so kernels have no tails.
const SUB_CHUNK_ALIGN_BYTES: usize = 64;

/// Most decode programs, and separately most repair programs, one code keeps prepared.
const MAX_CACHED_PROGRAMS: usize = 512;

pub(crate) fn build(k: usize, r: usize, d: usize) -> Result<Arc<dyn Code>, CodeError> {
    CodeSpec::Clay { k, r, d }.validate()?;
    Ok(Arc::new(ClayCode::new(k, r, d)?))
}

/// The 1- and 2-term maps of the pair transform, prepared once.
#[derive(Debug)]
struct Kernels {
    /// U = μ·C + μγ·C* with μ = 1/(1 + γ²): uncoupling from both stored sub-chunks.
    uncouple: DotTables,
    /// U = μ·C: the companion is virtual (C* = 0).
    uncouple_own: DotTables,
    /// U = μγ·C*: the node itself is virtual (C = 0).
    uncouple_virtual: DotTables,
    /// C = (1 + γ²)·U + γ·C*: coupling an erased node with a known companion.
    couple_known: DotTables,
    /// C = (1 + γ²)·U: an erased node with a virtual companion.
    couple_virtual: DotTables,
    /// x = y + γ·w: C = U + γ·U* (both uncoupled known), or U = C + γ·U* (repair).
    plus_gamma: DotTables,
    /// γ·w alone.
    gamma: DotTables,
    /// γ⁻¹·w alone.
    gamma_inverse: DotTables,
}

impl Kernels {
    fn new() -> Kernels {
        let g2 = weft_gf::mul(GAMMA, GAMMA);
        let one_plus = 1 ^ g2;
        let mu = weft_gf::inv(one_plus);
        let mu_gamma = weft_gf::mul(mu, GAMMA);
        Kernels {
            uncouple: DotTables::new(&[mu, mu_gamma], 1, 2),
            uncouple_own: DotTables::new(&[mu], 1, 1),
            uncouple_virtual: DotTables::new(&[mu_gamma], 1, 1),
            couple_known: DotTables::new(&[one_plus, GAMMA], 1, 2),
            couple_virtual: DotTables::new(&[one_plus], 1, 1),
            plus_gamma: DotTables::new(&[1, GAMMA], 1, 2),
            gamma: DotTables::new(&[GAMMA], 1, 1),
            gamma_inverse: DotTables::new(&[weft_gf::inv(GAMMA)], 1, 1),
        }
    }
}

/// How to rebuild a set of erased nodes in every layer.
#[derive(Debug)]
struct DecodeProgram {
    /// Erased nodes (real units), ascending; output i holds node `erased[i]`.
    erased: Vec<usize>,
    /// For every node, its index in `erased`.
    erased_index: Vec<Option<usize>>,
    /// k' known nodes whose U determine the layer: the virtual ones first.
    sources: Vec<usize>,
    /// How many of `sources` are virtual.
    virtual_sources: usize,
    /// U(erased) = D·U(sources), |erased| × k'.
    all_sources: DotTables,
    /// D without the virtual columns, for layers where every virtual U is zero.
    real_sources: Option<DotTables>,
    /// Every layer, each after the layers it depends on (see the module invariants).
    order: Vec<u32>,
    /// Position of each layer in `order`.
    rank: Vec<u32>,
}

/// How to rebuild one node from the repair layers of its helpers.
#[derive(Debug)]
struct RepairProgram {
    target: usize,
    /// Real units read, ascending.
    helpers: Vec<usize>,
    /// Real units other than the target that are not read (treated as erased), ascending.
    left_out: Vec<usize>,
    /// For every node, its index in `left_out`.
    left_out_index: Vec<Option<usize>>,
    /// For every node, its index in `helpers`.
    helper_index: Vec<Option<usize>>,
    /// k' nodes outside the target's section whose U determine a layer: virtual ones first.
    sources: Vec<usize>,
    virtual_sources: usize,
    /// Rows: the target's section by x (rows x ≠ x0 scaled by γ + γ⁻¹, so they give C of
    /// the target directly up to one added term), then `left_out`.
    all_sources: DotTables,
    real_sources: Option<DotTables>,
    /// The repair layers (z_y0 = x0), each after the layers it depends on.
    order: Vec<u32>,
}

/// Where a sub-chunk of an erased node goes in one layer of a decode.
#[derive(Debug, Clone, Copy)]
enum Finish {
    /// Red: the scalar code gives C directly.
    Red,
    /// The companion (node, layer) is known: C = (1 + γ²)·U + γ·C*.
    Known(usize, usize),
    /// The companion is virtual: C = (1 + γ²)·U.
    Virtual,
    /// The companion (output, layer) is erased and not reached yet: keep U in place.
    Pending,
    /// The companion (output, layer) is erased and holds its U: finish both.
    Complete(usize, usize),
}

/// The grid, the layers and the scalar code: everything a program is built from.
#[derive(Debug)]
struct Layout {
    k: usize,
    r: usize,
    d: usize,
    q: usize,
    t: usize,
    /// n' = q·t nodes: the n real units, then the virtual ones.
    nodes: usize,
    alpha: usize,
    beta: usize,
    /// weights[y] = q^(t−1−y): how far apart layers differing in digit y are.
    weights: Vec<usize>,
    /// digits[z·t + y] = z_y.
    digits: Vec<u8>,
    /// n' × k' generator of the scalar code, row p for node p.
    generator: Matrix,
}

/// A repair program's key: the target and the units it leaves out.
type RepairKey = (usize, Vec<usize>);

/// A Clay code over GF(2^8).
pub(crate) struct ClayCode {
    spec: CodeSpec,
    layout: Layout,
    kernels: Kernels,
    encoding: Arc<DecodeProgram>,
    decodings: Mutex<HashMap<Vec<usize>, Arc<DecodeProgram>>>,
    repairs: Mutex<HashMap<RepairKey, Arc<RepairProgram>>>,
}

impl std::fmt::Debug for ClayCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClayCode")
            .field("spec", &self.spec)
            .field("q", &self.layout.q)
            .field("t", &self.layout.t)
            .field("alpha", &self.layout.alpha)
            .finish()
    }
}

/// An empty vector of references that reuses `v`'s allocation under a new lifetime (the
/// source list of one layer borrows scratch the next layer writes).
fn recycle<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter().map(|_| -> &'b [u8] { unreachable!("the vector is empty") }).collect()
}

impl Layout {
    fn new(k: usize, r: usize, d: usize) -> Result<Layout, CodeError> {
        let spec = CodeSpec::Clay { k, r, d };
        let n = k + r;
        let q = d - k + 1;
        let t = n.div_ceil(q);
        let nodes = q * t;
        let virtual_units = nodes - n;
        let alpha = crate::clay_sub_chunks(k, r, d).expect("validated");
        assert_eq!(alpha, q.pow(t as u32));
        assert!(virtual_units < q, "virtual units fit in the last section");
        let weights: Vec<usize> = (0..t).map(|y| q.pow((t - 1 - y) as u32)).collect();
        let mut digits = Vec::with_capacity(alpha * t);
        for z in 0..alpha {
            digits.extend(weights.iter().map(|&w| ((z / w) % q) as u8));
        }
        let scalar_k = k + virtual_units;
        let cauchy = Matrix::cauchy1(nodes, scalar_k).map_err(|e| {
            CodeError::InvalidParameters { code: spec.to_string(), reason: e.to_string() }
        })?;
        // Scalar rows: data 0..k, virtual k..k', parity k'..n'. Node p: data p < k, parity
        // k ≤ p < n, virtual p ≥ n.
        let rows: Vec<usize> = (0..nodes)
            .map(|p| {
                if p < k {
                    p
                } else if p < n {
                    p + virtual_units
                } else {
                    k + p - n
                }
            })
            .collect();
        let generator = cauchy.select_rows(&rows);
        Ok(Layout { k, r, d, q, t, nodes, alpha, beta: alpha / q, weights, digits, generator })
    }

    fn n(&self) -> usize {
        self.k + self.r
    }

    fn scalar_k(&self) -> usize {
        self.k + self.nodes - self.n()
    }

    fn digit(&self, z: usize, y: usize) -> usize {
        self.digits[z * self.t + y] as usize
    }

    /// Layer z with digit y set to x: where the companion of (x, y, z) lives.
    fn companion_layer(&self, z: usize, y: usize, x: usize) -> usize {
        z + x * self.weights[y] - self.digit(z, y) * self.weights[y]
    }

    /// Whether the layer's virtual U are all zero: its last digit names a virtual node, so
    /// every virtual vertex is red or paired with a virtual vertex (C = 0 on both sides).
    fn virtual_silent(&self, zd: &[u8]) -> bool {
        (self.t - 1) * self.q + zd[self.t - 1] as usize >= self.n()
    }

    /// The digits of layer z in sections holding no erased node, as one number.
    ///
    /// A layer waits only for layers that differ from it in the digit of a section holding
    /// an erased node (its companions there), so ordering by these digits first and by score
    /// second is a valid order. It sweeps memory in blocks of nearby layers instead of
    /// visiting every layer of score 0 first: with parity in the last (least significant)
    /// sections, encoding walks each unit almost sequentially, which matters once a group
    /// outgrows the last-level cache.
    fn clean_digits(&self, z: usize, erased: &[usize]) -> usize {
        (0..self.t)
            .filter(|&y| !erased.iter().any(|&e| e / self.q == y))
            .fold(0, |key, y| key * self.q + self.digit(z, y))
    }

    /// D = G(rows)·G(sources)⁻¹ with its columns for virtual sources optionally dropped.
    fn scalar_decoder(
        &self,
        rows: &[usize],
        sources: &[usize],
        virtual_sources: usize,
        row_scale: impl Fn(usize) -> u8,
    ) -> (DotTables, Option<DotTables>) {
        let basis = self.generator.select_rows(sources).invert().expect("the scalar code is MDS");
        let mut coefficients =
            self.generator.select_rows(rows).multiply(&basis).expect("dimensions agree");
        let cols = sources.len();
        for (i, _) in rows.iter().enumerate() {
            let scale = row_scale(i);
            for c in 0..cols {
                coefficients.set(i, c, weft_gf::mul(coefficients.get(i, c), scale));
            }
        }
        let all = DotTables::new(coefficients.as_slice(), rows.len(), cols);
        let real = (virtual_sources > 0).then(|| {
            let m = coefficients.sub_matrix(0, virtual_sources, rows.len(), cols - virtual_sources);
            DotTables::new(m.as_slice(), rows.len(), cols - virtual_sources)
        });
        (all, real)
    }

    /// The program that rebuilds the real units `erased` (ascending, at most r).
    fn build_decode(&self, erased: &[usize]) -> DecodeProgram {
        let n = self.n();
        let mut erased_index = vec![None; self.nodes];
        for (i, &e) in erased.iter().enumerate() {
            erased_index[e] = Some(i);
        }
        let mut sources: Vec<usize> = (n..self.nodes).collect();
        let virtual_sources = sources.len();
        sources.extend(
            (0..n).filter(|&p| erased_index[p].is_none()).take(self.scalar_k() - virtual_sources),
        );
        assert_eq!(sources.len(), self.scalar_k(), "at most r erased");
        let (all_sources, real_sources) =
            self.scalar_decoder(erased, &sources, virtual_sources, |_| 1);
        let score =
            |z: usize| erased.iter().filter(|&&e| self.digit(z, e / self.q) == e % self.q).count();
        let mut order: Vec<u32> = (0..self.alpha as u32).collect();
        order
            .sort_by_cached_key(|&z| (self.clean_digits(z as usize, erased), score(z as usize), z));
        let mut rank = vec![0u32; self.alpha];
        for (i, &z) in order.iter().enumerate() {
            rank[z as usize] = i as u32;
        }
        DecodeProgram {
            erased: erased.to_vec(),
            erased_index,
            sources,
            virtual_sources,
            all_sources,
            real_sources,
            order,
            rank,
        }
    }

    /// The program that rebuilds `target` without reading `left_out` (r − q real units
    /// outside the target's section, ascending).
    fn build_repair(&self, target: usize, left_out: &[usize]) -> RepairProgram {
        let (n, q) = (self.n(), self.q);
        let (x0, y0) = (target % q, target / q);
        let mut left_out_index = vec![None; self.nodes];
        for (i, &h) in left_out.iter().enumerate() {
            assert!(h < n && h / q != y0 && h != target, "left-out units are real, outside y0");
            left_out_index[h] = Some(i);
        }
        let section: Vec<usize> = (0..q).map(|x| y0 * q + x).collect();
        let mut sources: Vec<usize> = (n..self.nodes).filter(|&p| p / q != y0).collect();
        let virtual_sources = sources.len();
        sources.extend((0..n).filter(|&p| p / q != y0 && left_out_index[p].is_none()));
        assert_eq!(sources.len(), self.scalar_k(), "r − q left-out units");
        let helpers: Vec<usize> =
            (0..n).filter(|&p| p != target && left_out_index[p].is_none()).collect();
        assert_eq!(helpers.len(), self.d, "d helpers");
        let mut helper_index = vec![None; self.nodes];
        for (i, &h) in helpers.iter().enumerate() {
            helper_index[h] = Some(i);
        }
        let rows: Vec<usize> = section.iter().chain(left_out).copied().collect();
        let gamma_sum = GAMMA ^ weft_gf::inv(GAMMA);
        let (all_sources, real_sources) =
            self.scalar_decoder(&rows, &sources, virtual_sources, |i| {
                if i < q && i != x0 {
                    gamma_sum
                } else {
                    1
                }
            });
        let w0 = self.weights[y0];
        let mut order: Vec<u32> = (0..self.alpha / (q * w0))
            .flat_map(|hi| (0..w0).map(move |lo| (hi * q * w0 + x0 * w0 + lo) as u32))
            .collect();
        let score = |z: usize| left_out.iter().filter(|&&h| self.digit(z, h / q) == h % q).count();
        order.sort_by_cached_key(|&z| {
            (self.clean_digits(z as usize, left_out), score(z as usize), z)
        });
        RepairProgram {
            target,
            helpers,
            left_out: left_out.to_vec(),
            left_out_index,
            helper_index,
            sources,
            virtual_sources,
            all_sources,
            real_sources,
            order,
        }
    }

    /// The real units a bandwidth-optimal repair of `target` leaves out when `unavailable`
    /// (ascending, without `target`) cannot be read; `None` when no such repair exists.
    fn left_out_for(&self, target: usize, unavailable: &[usize]) -> Option<Vec<usize>> {
        let q = self.q;
        let y0 = target / q;
        let count = self.r - q;
        if unavailable.iter().any(|&u| u / q == y0) || unavailable.len() > count {
            return None;
        }
        let mut left_out = unavailable.to_vec();
        // Fill with the highest real units outside the section (parity first).
        for p in (0..self.n()).rev() {
            if left_out.len() == count {
                break;
            }
            if p / q != y0 && !left_out.contains(&p) {
                left_out.push(p);
            }
        }
        left_out.sort_unstable();
        Some(left_out)
    }

    /// The exact reads of a bandwidth-optimal repair, helper by helper, run by run.
    fn repair_reads(&self, program: &RepairProgram, unit_len: usize) -> Vec<ReadRange> {
        let sub = unit_len / self.alpha;
        let (x0, y0) = (program.target % self.q, program.target / self.q);
        let w0 = self.weights[y0];
        let runs = self.alpha / (self.q * w0);
        let mut reads = Vec::with_capacity(program.helpers.len() * runs);
        for &unit in &program.helpers {
            for hi in 0..runs {
                let first = hi * self.q * w0 + x0 * w0;
                reads.push(ReadRange { unit, offset: first * sub, len: w0 * sub });
            }
        }
        reads
    }
}

impl ClayCode {
    fn new(k: usize, r: usize, d: usize) -> Result<ClayCode, CodeError> {
        let layout = Layout::new(k, r, d)?;
        let encoding = Arc::new(layout.build_decode(&(k..k + r).collect::<Vec<_>>()));
        Ok(ClayCode {
            spec: CodeSpec::Clay { k, r, d },
            layout,
            kernels: Kernels::new(),
            encoding,
            decodings: Mutex::new(HashMap::new()),
            repairs: Mutex::new(HashMap::new()),
        })
    }

    fn decode_program(&self, erased: &[usize]) -> Arc<DecodeProgram> {
        if erased.iter().copied().eq(self.layout.k..self.layout.n()) {
            return self.encoding.clone();
        }
        if let Some(found) = self.decodings.lock().expect("decode cache poisoned").get(erased) {
            return found.clone();
        }
        let program = Arc::new(self.layout.build_decode(erased));
        let mut cache = self.decodings.lock().expect("decode cache poisoned");
        if cache.len() >= MAX_CACHED_PROGRAMS {
            cache.clear();
        }
        cache.insert(erased.to_vec(), program.clone());
        program
    }

    fn repair_program(&self, target: usize, left_out: &[usize]) -> Arc<RepairProgram> {
        let key = (target, left_out.to_vec());
        if let Some(found) = self.repairs.lock().expect("repair cache poisoned").get(&key) {
            return found.clone();
        }
        let program = Arc::new(self.layout.build_repair(target, left_out));
        let mut cache = self.repairs.lock().expect("repair cache poisoned");
        if cache.len() >= MAX_CACHED_PROGRAMS {
            cache.clear();
        }
        cache.insert(key, program.clone());
        program
    }

    fn not_decodable(&self, lost: &[usize], reason: String) -> CodeError {
        CodeError::NotDecodable { code: self.spec.to_string(), lost: lost.to_vec(), reason }
    }

    fn check_parity(&self, parity: &[&mut [u8]], len: usize) -> Result<(), CodeError> {
        checks::parity(self, parity, len)
    }

    /// Runs a decode program: `input(p, z)` is sub-chunk z of known real node p, `outputs[i]`
    /// receives node `program.erased[i]`. Every output byte is written.
    fn run_decode<'a>(
        &self,
        program: &DecodeProgram,
        input: impl Fn(usize, usize) -> &'a [u8],
        outputs: &mut [&mut [u8]],
        sub: usize,
    ) {
        let (n, q, t) = (self.layout.n(), self.layout.q, self.layout.t);
        let kernels = &self.kernels;
        let erased = &program.erased;
        assert_eq!(outputs.len(), erased.len());
        let mut out: Vec<Vec<&mut [u8]>> =
            outputs.iter_mut().map(|o| o.chunks_exact_mut(sub).collect()).collect();
        let mut u_buffer = vec![0u8; program.sources.len() * sub];
        let mut u_slots: Vec<&mut [u8]> = u_buffer.chunks_exact_mut(sub).collect();
        let mut s_buffer = vec![0u8; erased.len() * sub];
        let mut s_slots: Vec<&mut [u8]> = s_buffer.chunks_exact_mut(sub).collect();
        let mut finish: Vec<Finish> = Vec::with_capacity(erased.len());
        let mut srcs_storage: Vec<&[u8]> = Vec::with_capacity(program.sources.len());
        let mut dsts: Vec<&mut [u8]> = Vec::with_capacity(erased.len());
        // Sub-chunks holding their final C: every one of every output, exactly once.
        let mut finished = 0;
        for &z in &program.order {
            let z = z as usize;
            let zd = &self.layout.digits[z * t..(z + 1) * t];
            let with_virtual = !(program.virtual_sources > 0 && self.layout.virtual_silent(zd));
            // 1. U of the non-red sources.
            for (i, &p) in program.sources.iter().enumerate() {
                let (x, y) = (p % q, p / q);
                let zy = zd[y] as usize;
                if zy == x || (p >= n && !with_virtual) {
                    continue;
                }
                let c = y * q + zy;
                let zc = self.layout.companion_layer(z, y, x);
                let dst = std::slice::from_mut(&mut u_slots[i]);
                if p >= n {
                    debug_assert!(c < n, "silent layers are skipped");
                    kernels
                        .uncouple_virtual
                        .dot_prod(&[known_sub_chunk(program, &out, &input, c, zc)], dst);
                } else if c >= n {
                    kernels.uncouple_own.dot_prod(&[input(p, z)], dst);
                } else {
                    kernels.uncouple.dot_prod(
                        &[input(p, z), known_sub_chunk(program, &out, &input, c, zc)],
                        dst,
                    );
                }
            }
            // 2. The scalar code: U of every erased node.
            finish.clear();
            for &e in erased {
                let (x, y) = (e % q, e / q);
                let zy = zd[y] as usize;
                let c = y * q + zy;
                finish.push(if zy == x {
                    Finish::Red
                } else if c >= n {
                    Finish::Virtual
                } else {
                    let zc = self.layout.companion_layer(z, y, x);
                    match program.erased_index[c] {
                        None => Finish::Known(c, zc),
                        Some(j) if program.rank[zc] < program.rank[z] => Finish::Complete(j, zc),
                        Some(_) => Finish::Pending,
                    }
                });
            }
            let mut srcs = recycle(srcs_storage);
            for (i, &p) in program.sources.iter().enumerate() {
                if p >= n {
                    if with_virtual {
                        srcs.push(&*u_slots[i]);
                    }
                } else if zd[p / q] as usize == p % q {
                    srcs.push(input(p, z));
                } else {
                    srcs.push(&*u_slots[i]);
                }
            }
            for (i, f) in finish.iter().enumerate() {
                dsts.push(match f {
                    Finish::Red | Finish::Pending => std::mem::take(&mut out[i][z]),
                    _ => std::mem::take(&mut s_slots[i]),
                });
            }
            let table = if with_virtual {
                &program.all_sources
            } else {
                program.real_sources.as_ref().expect("virtual sources exist")
            };
            table.dot_prod(&srcs, &mut dsts);
            srcs_storage = recycle(srcs);
            for (i, (f, d)) in finish.iter().zip(dsts.drain(..)).enumerate() {
                match f {
                    Finish::Red | Finish::Pending => out[i][z] = d,
                    _ => s_slots[i] = d,
                }
            }
            // 3. Finish C where the companion allows.
            for (i, f) in finish.iter().enumerate() {
                finished += match f {
                    Finish::Pending => 0,
                    Finish::Complete(..) => 2,
                    _ => 1,
                };
                match *f {
                    Finish::Red | Finish::Pending => {}
                    Finish::Known(c, zc) => {
                        let u = &*s_slots[i];
                        let dst = std::slice::from_mut(&mut out[i][z]);
                        kernels.couple_known.dot_prod(&[u, input(c, zc)], dst);
                    }
                    Finish::Virtual => {
                        let dst = std::slice::from_mut(&mut out[i][z]);
                        kernels.couple_virtual.dot_prod(&[&*s_slots[i]], dst);
                    }
                    Finish::Complete(j, zc) => {
                        let u = &*s_slots[i];
                        let mut dst = std::mem::take(&mut out[i][z]);
                        let other = &*out[j][zc];
                        kernels.plus_gamma.dot_prod(&[u, other], std::slice::from_mut(&mut dst));
                        out[i][z] = dst;
                        let dst = std::slice::from_mut(&mut out[j][zc]);
                        kernels.gamma.dot_prod_add(&[u], dst);
                    }
                }
            }
        }
        assert_eq!(finished, erased.len() * self.layout.alpha, "every sub-chunk finished once");
    }

    /// Runs a repair program: `input(p, z)` is sub-chunk z of helper p (z a repair layer).
    fn run_repair<'a>(
        &self,
        program: &RepairProgram,
        input: impl Fn(usize, usize) -> &'a [u8],
        output: &mut [u8],
        sub: usize,
    ) {
        let (n, q, t) = (self.layout.n(), self.layout.q, self.layout.t);
        let kernels = &self.kernels;
        let (x0, y0) = (program.target % q, program.target / q);
        let w0 = self.layout.weights[y0];
        let repair_index = |z: usize| (z / (q * w0)) * w0 + z % w0;
        let mut out: Vec<&mut [u8]> = output.chunks_exact_mut(sub).collect();
        let mut u_buffer = vec![0u8; program.sources.len() * sub];
        let mut u_slots: Vec<&mut [u8]> = u_buffer.chunks_exact_mut(sub).collect();
        // U of left-out nodes, by (left-out index, repair layer index), and a junk slot per
        // left-out node for the layers whose U nobody needs.
        let left = program.left_out.len();
        let mut store_buffer = vec![0u8; left * self.layout.beta * sub];
        let mut store: Vec<&mut [u8]> = store_buffer.chunks_exact_mut(sub).collect();
        let mut junk_buffer = vec![0u8; left * sub];
        let mut junk: Vec<&mut [u8]> = junk_buffer.chunks_exact_mut(sub).collect();
        let mut srcs_storage: Vec<&[u8]> = Vec::with_capacity(program.sources.len());
        let mut dsts: Vec<&mut [u8]> = Vec::with_capacity(q + left);
        let mut kept: Vec<bool> = Vec::with_capacity(left);
        for &z in &program.order {
            let z = z as usize;
            let zd = &self.layout.digits[z * t..(z + 1) * t];
            let with_virtual = !(program.virtual_sources > 0 && self.layout.virtual_silent(zd));
            // 1. U of the non-red sources (all outside section y0, so companions are in
            //    repair layers too).
            for (i, &p) in program.sources.iter().enumerate() {
                let (x, y) = (p % q, p / q);
                let zy = zd[y] as usize;
                if zy == x || (p >= n && !with_virtual) {
                    continue;
                }
                let c = y * q + zy;
                let zc = self.layout.companion_layer(z, y, x);
                let stored = program.left_out_index[c]
                    .map(|h| &*store[h * self.layout.beta + repair_index(zc)]);
                let dst = std::slice::from_mut(&mut u_slots[i]);
                match (p >= n, c >= n, stored) {
                    (true, _, Some(u)) => kernels.gamma.dot_prod(&[u], dst),
                    (true, _, None) => kernels.uncouple_virtual.dot_prod(&[input(c, zc)], dst),
                    (false, true, _) => kernels.uncouple_own.dot_prod(&[input(p, z)], dst),
                    (false, false, Some(u)) => kernels.plus_gamma.dot_prod(&[input(p, z), u], dst),
                    (false, false, None) => {
                        kernels.uncouple.dot_prod(&[input(p, z), input(c, zc)], dst)
                    }
                }
            }
            // 2. The scalar code: C of the target in q layers, U of the left-out nodes.
            let mut srcs = recycle(srcs_storage);
            for (i, &p) in program.sources.iter().enumerate() {
                if p >= n {
                    if with_virtual {
                        srcs.push(&*u_slots[i]);
                    }
                } else if zd[p / q] as usize == p % q {
                    srcs.push(input(p, z));
                } else {
                    srcs.push(&*u_slots[i]);
                }
            }
            for x in 0..q {
                let layer = self.layout.companion_layer(z, y0, x);
                dsts.push(std::mem::take(&mut out[layer]));
            }
            kept.clear();
            for (h, &p) in program.left_out.iter().enumerate() {
                let (x, y) = (p % q, p / q);
                let zy = zd[y] as usize;
                // Needed later iff paired with a helper (or virtual) node.
                let keep = zy != x && program.left_out_index[y * q + zy].is_none();
                kept.push(keep);
                dsts.push(if keep {
                    std::mem::take(&mut store[h * self.layout.beta + repair_index(z)])
                } else {
                    std::mem::take(&mut junk[h])
                });
            }
            let table = if with_virtual {
                &program.all_sources
            } else {
                program.real_sources.as_ref().expect("virtual sources exist")
            };
            table.dot_prod(&srcs, &mut dsts);
            srcs_storage = recycle(srcs);
            // 3. C(target, z with z_y0 = x) = (γ + γ⁻¹)·U(x, y0, z) + γ⁻¹·C(x, y0, z).
            for (x, dst) in dsts.iter_mut().enumerate().take(q) {
                let p = y0 * q + x;
                if x != x0 && p < n {
                    kernels.gamma_inverse.dot_prod_add(&[input(p, z)], std::slice::from_mut(dst));
                }
            }
            for (h, d) in dsts.drain(..).skip(q).enumerate() {
                if kept[h] {
                    store[h * self.layout.beta + repair_index(z)] = d;
                } else {
                    junk[h] = d;
                }
            }
        }
        assert!(out.iter().all(|s| s.is_empty()), "every sub-chunk of the target written once");
    }
}

/// C of a known node in a decode: stored, or erased and finished in a layer of lower score.
fn known_sub_chunk<'x, 'a: 'x>(
    program: &DecodeProgram,
    out: &'x [Vec<&mut [u8]>],
    input: &impl Fn(usize, usize) -> &'a [u8],
    node: usize,
    layer: usize,
) -> &'x [u8] {
    match program.erased_index[node] {
        Some(i) => &*out[i][layer],
        None => input(node, layer),
    }
}

impl Code for ClayCode {
    fn spec(&self) -> CodeSpec {
        self.spec
    }

    fn data_units(&self) -> usize {
        self.layout.k
    }

    fn parity_units(&self) -> usize {
        self.layout.r
    }

    fn sub_chunks(&self) -> usize {
        self.layout.alpha
    }

    fn byte_local(&self) -> bool {
        false
    }

    fn unit_len_multiple(&self) -> usize {
        self.layout.alpha * SUB_CHUNK_ALIGN_BYTES
    }

    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        if data.len() != self.layout.k {
            return Err(CodeError::UnitCount {
                what: "data units",
                expected: self.layout.k,
                got: data.len(),
            });
        }
        let len = data[0].len();
        checks::lengths(data.iter().enumerate().map(|(i, d)| (i, d.len())), len)?;
        self.check_parity(parity, len)?;
        self.check_unit_len(len)?;
        if len == 0 {
            return Ok(());
        }
        let sub = len / self.layout.alpha;
        let input = |p: usize, z: usize| &data[p][z * sub..(z + 1) * sub];
        self.run_decode(&self.encoding, input, parity, sub);
        Ok(())
    }

    fn encode_add(
        &self,
        data_index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        if data_index >= self.layout.k {
            return Err(CodeError::DataIndex { index: data_index, k: self.layout.k });
        }
        self.check_parity(parity, data.len())?;
        self.check_unit_len(data.len())?;
        // Linearity: the contribution of one unit is the encoding with the others zero.
        let zero = vec![0u8; data.len()];
        let units: Vec<&[u8]> =
            (0..self.layout.k).map(|j| if j == data_index { data } else { &zero[..] }).collect();
        let mut partial = vec![vec![0u8; data.len()]; self.layout.r];
        let mut outs: Vec<&mut [u8]> = partial.iter_mut().map(Vec::as_mut_slice).collect();
        self.encode(&units, &mut outs)?;
        for (p, add) in parity.iter_mut().zip(&partial) {
            weft_gf::xor_region(add, p);
        }
        Ok(())
    }

    fn is_decodable(&self, lost: &[usize]) -> bool {
        let mut lost = lost.to_vec();
        lost.sort_unstable();
        lost.dedup();
        lost.iter().all(|&i| i < self.layout.n()) && lost.len() <= self.layout.r
    }

    fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        let n = self.layout.n();
        let (_, len) = checks::reconstruct(self, units, wanted, out)?;
        let missing: Vec<usize> = (0..n).filter(|&i| units[i].is_none()).collect();
        let mut lost_wanted: Vec<usize> =
            wanted.iter().copied().filter(|&w| units[w].is_none()).collect();
        lost_wanted.sort_unstable();
        lost_wanted.dedup();
        if !lost_wanted.is_empty() && missing.len() > self.layout.r {
            return Err(self.not_decodable(
                &missing,
                format!("{} units lost, at most r = {} can be", missing.len(), self.layout.r),
            ));
        }
        // Units computed straight into the first output that asks for them.
        let mut first_out: Vec<Option<usize>> = vec![None; n];
        for (j, &w) in wanted.iter().enumerate() {
            if units[w].is_none() && first_out[w].is_none() {
                first_out[w] = Some(j);
            }
        }
        if len > 0 && !lost_wanted.is_empty() {
            let sub = len / self.layout.alpha;
            let input = |p: usize, z: usize| &units[p].expect("known unit")[z * sub..(z + 1) * sub];
            let degraded = match lost_wanted[..] {
                [w] => {
                    let others: Vec<usize> = missing.iter().copied().filter(|&m| m != w).collect();
                    self.layout.left_out_for(w, &others).map(|left_out| (w, left_out))
                }
                _ => None,
            };
            if let Some((w, left_out)) = degraded {
                // One wanted unit that a repair can rebuild: read β/α of d units, not k whole.
                let program = self.repair_program(w, &left_out);
                let j = first_out[w].expect("wanted");
                self.run_repair(&program, input, out[j], sub);
            } else {
                let program = self.decode_program(&missing);
                let mut spare: Vec<Vec<u8>> = missing
                    .iter()
                    .filter(|&&m| first_out[m].is_none())
                    .map(|_| vec![0u8; len])
                    .collect();
                let mut slots: Vec<Option<&mut [u8]>> = missing.iter().map(|_| None).collect();
                for (j, o) in out.iter_mut().enumerate() {
                    let w = wanted[j];
                    if first_out[w] == Some(j) {
                        let i = missing.binary_search(&w).expect("wanted and missing");
                        slots[i] = Some(&mut **o);
                    }
                }
                let mut spare_iter = spare.iter_mut();
                let mut outputs: Vec<&mut [u8]> = slots
                    .into_iter()
                    .map(|slot| {
                        slot.unwrap_or_else(|| {
                            spare_iter.next().expect("one spare per unwanted unit").as_mut_slice()
                        })
                    })
                    .collect();
                self.run_decode(&program, input, &mut outputs, sub);
            }
        }
        // Present units asked for, and repeated requests.
        for j in 0..wanted.len() {
            let w = wanted[j];
            match (units[w], first_out[w]) {
                (Some(unit), _) => out[j].copy_from_slice(unit),
                (None, Some(first)) if first != j => {
                    let (head, tail) = out.split_at_mut(j);
                    tail[0].copy_from_slice(&head[first][..]);
                }
                _ => {}
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
        let mut others: Vec<usize> = unavailable.iter().copied().filter(|&u| u != target).collect();
        others.sort_unstable();
        others.dedup();
        if let Some(left_out) = self.layout.left_out_for(target, &others) {
            let program = self.repair_program(target, &left_out);
            let reads = self.layout.repair_reads(&program, unit_len);
            return Ok(RepairPlan { target, unit_len, reads });
        }
        if others.len() < self.layout.r {
            // Too few helpers for a bandwidth-optimal repair: decode from k whole units.
            let reads = (0..self.layout.n())
                .filter(|&u| u != target && others.binary_search(&u).is_err())
                .take(self.layout.k)
                .map(|unit| ReadRange { unit, offset: 0, len: unit_len })
                .collect();
            return Ok(RepairPlan { target, unit_len, reads });
        }
        let mut lost = others;
        lost.push(target);
        lost.sort_unstable();
        Err(self.not_decodable(
            &lost,
            format!("{} units unavailable, at most r = {} can be", lost.len(), self.layout.r),
        ))
    }

    fn repair(&self, plan: &RepairPlan, reads: &[&[u8]], out: &mut [u8]) -> Result<(), CodeError> {
        let n = self.layout.n();
        checks::repair(self, plan, reads, out)?;
        let whole = plan.reads.iter().all(|r| r.offset == 0 && r.len == plan.unit_len);
        if whole {
            // The decoding fallback: every read is a whole unit.
            let mut units: Vec<Option<&[u8]>> = vec![None; n];
            for (range, &bytes) in plan.reads.iter().zip(reads) {
                if units[range.unit].replace(bytes).is_some() {
                    return Err(CodeError::PlanMismatch {
                        reason: format!("unit {} is read twice", range.unit),
                    });
                }
            }
            if plan.unit_len == 0 {
                return Ok(());
            }
            return self.reconstruct(&units, &[plan.target], &mut [out]);
        }
        let helpers = plan.helpers();
        let q = self.layout.q;
        let y0 = plan.target / q;
        let left_out: Vec<usize> =
            (0..n).filter(|&u| u != plan.target && helpers.binary_search(&u).is_err()).collect();
        let mismatch = || CodeError::PlanMismatch {
            reason: format!(
                "{}: unit {} is rebuilt from d = {} helpers including its y-section, reading \
                 the ranges repair_plan gives",
                self.spec, plan.target, self.layout.d
            ),
        };
        if helpers.len() != self.layout.d || left_out.iter().any(|&u| u / q == y0) {
            return Err(mismatch());
        }
        let program = self.repair_program(plan.target, &left_out);
        if self.layout.repair_reads(&program, plan.unit_len) != plan.reads {
            return Err(mismatch());
        }
        let sub = plan.unit_len / self.layout.alpha;
        let w0 = self.layout.weights[y0];
        let runs = self.layout.alpha / (q * w0);
        let input = |p: usize, z: usize| {
            let helper = program.helper_index[p].expect("reads come from helpers");
            let read = reads[helper * runs + z / (q * w0)];
            let at = (z % w0) * sub;
            &read[at..at + sub]
        };
        self.run_repair(&program, input, out, sub);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator, so this module needs no dependency.
    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    /// Checks an encoded group against the paper's definition byte by byte with scalar
    /// arithmetic only: uncouple every pair, then every layer must be a scalar codeword.
    fn assert_clay_codeword(code: &ClayCode, units: &[Vec<u8>], offsets: &[usize]) {
        let (n, q, nodes) = (code.layout.n(), code.layout.q, code.layout.nodes);
        let sub = units[0].len() / code.layout.alpha;
        let c = |p: usize, z: usize, b: usize| if p < n { units[p][z * sub + b] } else { 0 };
        let det_inv = weft_gf::inv(1 ^ weft_gf::mul(GAMMA, GAMMA));
        let basis: Vec<usize> = (0..code.layout.scalar_k()).collect();
        let inverse = code.layout.generator.select_rows(&basis).invert().unwrap();
        for z in 0..code.layout.alpha {
            for &b in offsets {
                let u: Vec<u8> = (0..nodes)
                    .map(|p| {
                        let (x, y) = (p % q, p / q);
                        let zy = code.layout.digit(z, y);
                        if zy == x {
                            return c(p, z, b);
                        }
                        let partner = c(y * q + zy, code.layout.companion_layer(z, y, x), b);
                        // [C; C*] = [[1, γ], [γ, 1]]·[U; U*] ⇒ U = (C + γ·C*)/(1 + γ²).
                        weft_gf::mul(det_inv, c(p, z, b) ^ weft_gf::mul(GAMMA, partner))
                    })
                    .collect();
                let message: Vec<u8> = (0..code.layout.scalar_k())
                    .map(|col| {
                        basis
                            .iter()
                            .fold(0, |acc, &row| acc ^ weft_gf::mul(inverse.get(col, row), u[row]))
                    })
                    .collect();
                for (p, &value) in u.iter().enumerate() {
                    let expected = (0..code.layout.scalar_k()).fold(0, |acc, j| {
                        acc ^ weft_gf::mul(code.layout.generator.get(p, j), message[j])
                    });
                    assert_eq!(value, expected, "layer {z} byte {b} node {p} is not a codeword");
                }
            }
        }
    }

    /// Every valid (k, r, d) with k + r ≤ 12, bytes 0, 17 and 63 of every sub-chunk (the
    /// kernels treat the bytes of a sub-chunk alike; weft-gf tests them byte by byte).
    #[test]
    fn encoding_matches_the_definition() {
        let mut codes = 0;
        for n in 3..=12 {
            for r in 2..n {
                let k = n - r;
                for d in k + 1..k + r {
                    codes += 1;
                    let code = ClayCode::new(k, r, d).unwrap();
                    let len = code.unit_len_multiple();
                    let mut units: Vec<Vec<u8>> =
                        (0..k).map(|i| bytes((codes * 100 + i) as u64, len)).collect();
                    let mut parity = vec![vec![0x5Au8; len]; r];
                    let data: Vec<&[u8]> = units.iter().map(Vec::as_slice).collect();
                    let mut outs: Vec<&mut [u8]> =
                        parity.iter_mut().map(Vec::as_mut_slice).collect();
                    code.encode(&data, &mut outs).unwrap();
                    units.extend(parity);
                    assert_clay_codeword(&code, &units, &[0, 17, 63]);
                }
            }
        }
        assert_eq!(codes, 220);
    }

    #[test]
    fn pair_transform_constants_invert_each_other() {
        let g2 = weft_gf::mul(GAMMA, GAMMA);
        assert!(GAMMA != 0 && g2 != 1);
        let mu = weft_gf::inv(1 ^ g2);
        for (u, v) in [(1u8, 0u8), (0, 1), (7, 200), (255, 3)] {
            let c = u ^ weft_gf::mul(GAMMA, v);
            let c_star = weft_gf::mul(GAMMA, u) ^ v;
            assert_eq!(weft_gf::mul(mu, c ^ weft_gf::mul(GAMMA, c_star)), u);
        }
    }
}
