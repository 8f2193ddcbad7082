//! Azure-style locally repairable codes, `lrc(k,l,g)` (after Huang et al., "Erasure Coding in
//! Windows Azure Storage", USENIX ATC 2012).
//!
//! Construction, with m = k/l:
//! - Units `0..k` are the data, in l local groups of m consecutive units: group i is data
//!   `[i·m, (i+1)·m)`. Unit `k + i` is group i's local parity, the XOR of its data.
//! - Unit `k + l + j` (j < g) is a global parity `Σ_d a_d^(j+1) · data_d`: a Vandermonde row
//!   on one distinct non-zero point `a_d` per data unit (Azure's `α_i, α_i²` for g = 2).
//! - The points are searched for greedily, data unit by data unit: each takes the smallest byte
//!   value that passes every check below together with the points before it, or, when none
//!   does, the one failing fewest (a failure within a group outweighs any number across
//!   groups). The search and its budgets are part of the on-disk format: changing either
//!   changes global parities, which `global_rows_are_pinned` in tests/lrc.rs would catch.
//!
//! Which patterns decode:
//! - Criterion: a loss pattern is recoverable with some choice of global coefficients iff,
//!   after every surviving local parity rebuilds one lost data unit of its group, no more data
//!   units are left lost than global parities survive. Every pattern of ≤ g + 1 losses meets it.
//! - Eliminating a group's local equation leaves the columns `h_s − h_s0` of its other lost
//!   data units (h_d: data unit d's global column); a group whose local parity is lost leaves
//!   its columns `h_s`. A pattern decodes iff those columns are independent on the surviving
//!   global rows, so the code is maximally recoverable (decodes every pattern the criterion
//!   allows) iff every such set of t ≤ g columns is independent on every t global rows.
//! - The search checks exactly those sets, single-group sets first: they are the patterns of
//!   ≤ g + 1 losses. Each kind has a work budget ([`MAX_OWN_GROUP_WORK`], [`MAX_MIXED_WORK`]);
//!   past it, the remaining points are not checked for that kind.
//! - Outcome (unit tests in this file): every code with g ≤ 2 and k ≤ 24, and e.g.
//!   lrc(12,2,3), lrc(8,2,4), is maximally recoverable; larger ones such as lrc(14,2,3) or
//!   lrc(48,4,4) decode every pattern of ≤ g + 1 losses and most beyond; far larger ones
//!   (lrc(200,4,20)) are unchecked beyond the budget.
//! - Whatever the outcome, all coding goes through a [`LinearCode`] on the generator, whose
//!   decode solves for whatever the present units determine: `is_decodable` is the rank truth,
//!   never the criterion, and a refusal explains the pattern group by group.
//!
//! Other invariants:
//! - α = 1, byte-local, systematic and linear, so `encode_add` and `update` are exact.
//! - Repairing a data unit or a local parity whose group's other members are all available
//!   reads exactly those m units. Otherwise, and for global parities, the plan is the linear
//!   code's: a greedy basis of the available units in ascending order, keeping only the units
//!   the target depends on (k units for a global parity when all data is available).

use std::ops::ControlFlow;
use std::sync::Arc;

use weft_gf::Matrix;

use crate::{Code, CodeError, CodeSpec, LinearCode, ReadRange, RepairPlan};

/// Work the point search may spend on residual sets within one group, in field operations
/// (a t×t determinant counts t³). With [`MAX_MIXED_WORK`] it bounds `build` to tens of
/// milliseconds in the dev profile for any shape.
const MAX_OWN_GROUP_WORK: usize = 1 << 24;

/// Work the point search may spend on residual sets spanning several groups.
const MAX_MIXED_WORK: usize = 1 << 24;

pub(crate) fn build(k: usize, l: usize, g: usize) -> Result<Arc<dyn Code>, CodeError> {
    let spec = CodeSpec::Lrc { k, l, g };
    spec.validate()?;
    let points = choose_points(k, l, g);
    let generator = generator(k, l, g, &points.points);
    Ok(Arc::new(Lrc {
        k,
        l,
        g,
        group_size: k / l,
        maximally_recoverable: points.maximally_recoverable,
        decodes_g_plus_one: points.decodes_g_plus_one,
        linear: LinearCode::from_generator(spec, generator),
    }))
}

/// The n × k generator: identity, then the l local rows, then the g global rows.
fn generator(k: usize, l: usize, g: usize, points: &[u8]) -> Matrix {
    assert_eq!(points.len(), k, "one point per data unit");
    let group_size = k / l;
    let mut matrix = Matrix::zeros(k + l + g, k);
    for (d, &point) in points.iter().enumerate() {
        matrix.set(d, d, 1);
        matrix.set(k + d / group_size, d, 1);
        for (j, value) in global_column(point, g).into_iter().enumerate() {
            matrix.set(k + l + j, d, value);
        }
    }
    matrix
}

/// A data unit's coefficients in the g global rows: `a^1, …, a^g`.
fn global_column(point: u8, g: usize) -> Vec<u8> {
    (1..=g).map(|e| weft_gf::pow(point, e)).collect()
}

struct Points {
    points: Vec<u8>,
    /// Every check ran and passed: the code is maximally recoverable.
    maximally_recoverable: bool,
    /// Every own-group check ran and passed: every pattern of ≤ g + 1 losses is decodable.
    decodes_g_plus_one: bool,
}

/// Picks the data units' points greedily (see the module header).
fn choose_points(k: usize, l: usize, g: usize) -> Points {
    let mut search = PointSearch {
        g,
        group_size: k / l,
        columns: Vec::with_capacity(k),
        work_left: [MAX_OWN_GROUP_WORK, MAX_MIXED_WORK],
        scopes_checked: 2,
        scope: Scope::OwnGroup,
        failures: 0,
        failure_limit: u64::MAX,
        stack: Vec::new(),
        scratch: Vec::new(),
    };
    let mut points = Vec::with_capacity(k);
    let mut used = [false; 256];
    used[0] = true;
    let mut maximally_recoverable = true;
    let mut decodes_g_plus_one = true;
    for d in 0..k {
        // (point, failure score); the first point without failures wins.
        let mut best: Option<(u8, u64)> = None;
        for point in 1..=255u8 {
            if search.scopes_checked == 0 || used[usize::from(point)] {
                continue;
            }
            search.columns.push(global_column(point, g));
            search.failures = 0;
            search.failure_limit = best.map_or(u64::MAX, |(_, failures)| failures);
            let flow = search.check_unit(d);
            search.columns.pop();
            match flow {
                ControlFlow::Continue(()) => {
                    best = Some((point, search.failures));
                    if search.failures == 0 {
                        break;
                    }
                }
                ControlFlow::Break(Stop::NoBetter) => {}
                ControlFlow::Break(Stop::OutOfWork) => {
                    // What was checked passed or was tallied; the rest is taken on trust.
                    best = Some((point, search.failures));
                    break;
                }
            }
        }
        // A scope that ran out of work while checking d has not checked d in full.
        let own_checked = search.scopes_checked > Scope::OwnGroup as usize;
        let mixed_checked = search.scopes_checked > Scope::Mixed as usize;
        let point = match best {
            Some((point, failures)) => {
                decodes_g_plus_one &= own_checked && failures < OWN_GROUP_FAILURE;
                maximally_recoverable &= mixed_checked && failures == 0;
                point
            }
            None => {
                decodes_g_plus_one = false;
                maximally_recoverable = false;
                // k ≤ 254 (k + l + g ≤ 256), so an unused non-zero point is always left.
                (1..=255u8).find(|&p| !used[usize::from(p)]).expect("an unused point")
            }
        };
        used[usize::from(point)] = true;
        search.columns.push(global_column(point, g));
        points.push(point);
    }
    Points { points, maximally_recoverable, decodes_g_plus_one }
}

/// Why a candidate point's checks stopped early.
enum Stop {
    /// It already fails at least as badly as the best candidate so far.
    NoBetter,
    /// The budget of the scope being checked is spent.
    OutOfWork,
}

type Flow = ControlFlow<Stop>;

/// Which residual sets a check belongs to; each has its own budget, so a large code still
/// gets its ≤ g + 1 loss patterns checked after the mixed sets have outgrown theirs.
#[derive(Clone, Copy)]
enum Scope {
    /// Sets within one local group: every pattern of ≤ g + 1 losses is one.
    OwnGroup = 0,
    /// Sets that span several groups.
    Mixed = 1,
}

/// A failed own-group check outweighs any number of failed mixed ones.
const OWN_GROUP_FAILURE: u64 = 1 << 32;

/// Checks a candidate point against the points already chosen: every residual column set
/// (module header) that contains the candidate's unit must be independent on every subset of
/// as many global rows.
struct PointSearch {
    g: usize,
    group_size: usize,
    /// Global columns of the units placed so far, the candidate last.
    columns: Vec<Vec<u8>>,
    /// Work left per [`Scope`].
    work_left: [usize; 2],
    /// How many scopes, in [`Scope`] order, still have work left: 2, 1 or 0.
    scopes_checked: usize,
    /// The scope being checked.
    scope: Scope,
    /// Failure score of the candidate: see [`OWN_GROUP_FAILURE`].
    failures: u64,
    failure_limit: u64,
    /// The residual columns of the set being checked, g bytes each.
    stack: Vec<u8>,
    scratch: Vec<u8>,
}

impl PointSearch {
    fn check_unit(&mut self, d: usize) -> Flow {
        let group = d / self.group_size;
        // Sets within d's own group first: they decide every pattern of ≤ g + 1 losses.
        if self.scopes_checked > Scope::OwnGroup as usize {
            self.scope = Scope::OwnGroup;
            self.own_group_sets(d, &mut |search| search.check_stack())?;
        }
        if self.scopes_checked > Scope::Mixed as usize {
            self.scope = Scope::Mixed;
            self.own_group_sets(d, &mut |search| {
                let residual_left = search.g - search.stack.len() / search.g;
                search.other_group_sets(group, residual_left)
            })?;
        }
        ControlFlow::Continue(())
    }

    /// Calls `visit` with each residual set of d's group that contains d (losses among d and
    /// the units before it), pushed on the stack alone.
    fn own_group_sets(&mut self, d: usize, visit: &mut dyn FnMut(&mut Self) -> Flow) -> Flow {
        let group_start = d / self.group_size * self.group_size;
        let earlier = d - group_start;
        for residual in 1..=self.g {
            // Local parity lost: d and residual − 1 earlier units stay as they are. Local parity
            // present: it rebuilds one of d and residual earlier units.
            for (others, local_present) in [(residual - 1, false), (residual, true)] {
                if others > earlier {
                    continue;
                }
                let mut chosen: Vec<usize> = (0..others).collect();
                loop {
                    debug_assert!(self.stack.is_empty());
                    if !local_present {
                        self.stack.extend_from_slice(&self.columns[d]);
                    }
                    for &s in &chosen {
                        let column = &self.columns[group_start + s];
                        let base = &self.columns[d];
                        if local_present {
                            self.stack.extend(column.iter().zip(base).map(|(a, b)| a ^ b));
                        } else {
                            self.stack.extend_from_slice(column);
                        }
                    }
                    let flow = visit(self);
                    self.stack.clear();
                    flow?;
                    if !next_combination(&mut chosen, earlier) {
                        break;
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Adds residual sets from groups below `below` (each group at most once, in descending
    /// order so every combination comes up once) to the stack and checks each.
    fn other_group_sets(&mut self, below: usize, residual_left: usize) -> Flow {
        let m = self.group_size;
        let depth = self.stack.len();
        for group in (0..below).rev() {
            let start = group * m;
            for residual in 1..=residual_left {
                for (size, local_present) in [(residual, false), (residual + 1, true)] {
                    if size > m {
                        continue;
                    }
                    let mut chosen: Vec<usize> = (0..size).collect();
                    loop {
                        let base = &self.columns[start + chosen[0]];
                        let skip = usize::from(local_present);
                        for &s in &chosen[skip..] {
                            let column = &self.columns[start + s];
                            if local_present {
                                self.stack.extend(column.iter().zip(base).map(|(a, b)| a ^ b));
                            } else {
                                self.stack.extend_from_slice(column);
                            }
                        }
                        let flow = match self.check_stack() {
                            ControlFlow::Continue(()) => {
                                self.other_group_sets(group, residual_left - residual)
                            }
                            stop => stop,
                        };
                        self.stack.truncate(depth);
                        flow?;
                        if !next_combination(&mut chosen, m) {
                            break;
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Checks the stacked columns on every subset of as many global rows.
    fn check_stack(&mut self) -> Flow {
        let t = self.stack.len() / self.g;
        let cost = (t * t * t).max(1);
        let mut rows: Vec<usize> = (0..t).collect();
        let scope = self.scope as usize;
        loop {
            if self.work_left[scope] < cost {
                self.scopes_checked = scope;
                return ControlFlow::Break(Stop::OutOfWork);
            }
            self.work_left[scope] -= cost;
            if !self.independent_on(&rows) {
                self.failures = self.failures.saturating_add(match self.scope {
                    Scope::OwnGroup => OWN_GROUP_FAILURE,
                    Scope::Mixed => 1,
                });
                if self.failures >= self.failure_limit {
                    return ControlFlow::Break(Stop::NoBetter);
                }
            }
            if !next_combination(&mut rows, self.g) {
                return ControlFlow::Continue(());
            }
        }
    }

    /// Whether the stacked columns restricted to `rows` form a non-singular matrix.
    fn independent_on(&mut self, rows: &[usize]) -> bool {
        let t = rows.len();
        self.scratch.clear();
        for &row in rows {
            self.scratch.extend((0..t).map(|c| self.stack[c * self.g + row]));
        }
        let a = &mut self.scratch;
        for col in 0..t {
            let Some(pivot) = (col..t).find(|&r| a[r * t + col] != 0) else {
                return false;
            };
            for c in 0..t {
                a.swap(pivot * t + c, col * t + c);
            }
            let scale = weft_gf::inv(a[col * t + col]);
            for r in col + 1..t {
                let factor = weft_gf::mul(a[r * t + col], scale);
                if factor != 0 {
                    for c in col..t {
                        let v = weft_gf::mul(factor, a[col * t + c]);
                        a[r * t + c] ^= v;
                    }
                }
            }
        }
        true
    }
}

/// Steps `chosen` (ascending indices below n) to the next combination in lexicographic order;
/// false after the last.
fn next_combination(chosen: &mut [usize], n: usize) -> bool {
    let size = chosen.len();
    let Some(i) = (0..size).rev().find(|&i| chosen[i] < n - size + i) else {
        return false;
    };
    chosen[i] += 1;
    for j in i + 1..size {
        chosen[j] = chosen[j - 1] + 1;
    }
    true
}

/// `lrc(k,l,g)`: a [`LinearCode`] on the generator above, plus local repair plans and error
/// messages that speak of groups.
#[derive(Debug)]
struct Lrc {
    k: usize,
    l: usize,
    g: usize,
    group_size: usize,
    /// The point search checked every set and all passed.
    maximally_recoverable: bool,
    /// The point search checked every single-group set and all passed.
    decodes_g_plus_one: bool,
    linear: LinearCode,
}

impl Lrc {
    /// The local group of a data unit or local parity; `None` for a global parity.
    fn group_of(&self, unit: usize) -> Option<usize> {
        if unit < self.k {
            Some(unit / self.group_size)
        } else if unit < self.k + self.l {
            Some(unit - self.k)
        } else {
            None
        }
    }

    /// A group's data units and its local parity, ascending.
    fn group_members(&self, group: usize) -> impl Iterator<Item = usize> {
        let start = group * self.group_size;
        (start..start + self.group_size).chain(std::iter::once(self.k + group))
    }

    /// Says, group by group, why losing `lost` is beyond this code.
    fn explain(&self, lost: &[usize]) -> String {
        let mut parts = Vec::new();
        let mut left_for_globals = 0;
        for group in 0..self.l {
            let data: Vec<usize> =
                self.group_members(group).filter(|&u| u < self.k && lost.contains(&u)).collect();
            if data.is_empty() {
                continue;
            }
            let local = self.k + group;
            let (left, how) = if lost.contains(&local) {
                (data.len(), format!("and its local parity {local}"))
            } else {
                (data.len() - 1, format!("(its local parity {local} rebuilds one)"))
            };
            left_for_globals += left;
            parts.push(format!("local group {group} lost data units {data:?} {how}: {left} left"));
        }
        let globals_lost = lost.iter().filter(|&&u| u >= self.k + self.l).count();
        let surviving = self.g.saturating_sub(globals_lost);
        let code = self.linear.spec();
        if left_for_globals > surviving {
            format!(
                "{}; {left_for_globals} lost data units are left for the global parities but only \
                 {surviving} of {} survive: beyond what {code} corrects",
                parts.join("; "),
                self.g
            )
        } else {
            format!(
                "{}; {left_for_globals} lost data units are left for {surviving} surviving global \
                 parities, which the locality allows, but {code}'s global coefficients cannot \
                 separate them (checked maximally recoverable: {}; every pattern of ≤ {} \
                 losses checked: {})",
                parts.join("; "),
                self.maximally_recoverable,
                self.g + 1,
                self.decodes_g_plus_one
            )
        }
    }

    /// Replaces the linear code's reason for `NotDecodable` with one that speaks of groups.
    fn explained(&self, error: CodeError, context: &str) -> CodeError {
        match error {
            CodeError::NotDecodable { code, lost, .. } => {
                let reason = format!("{context}{}", self.explain(&lost));
                CodeError::NotDecodable { code, lost, reason }
            }
            other => other,
        }
    }
}

impl Code for Lrc {
    fn spec(&self) -> CodeSpec {
        self.linear.spec()
    }

    fn data_units(&self) -> usize {
        self.k
    }

    fn parity_units(&self) -> usize {
        self.l + self.g
    }

    fn byte_local(&self) -> bool {
        true
    }

    fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodeError> {
        self.linear.encode(data, parity)
    }

    fn encode_add(
        &self,
        data_index: usize,
        data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        self.linear.encode_add(data_index, data, parity)
    }

    fn update(
        &self,
        data_index: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        self.linear.update(data_index, old, new, parity)
    }

    fn is_decodable(&self, lost: &[usize]) -> bool {
        self.linear.is_decodable(lost)
    }

    fn reconstruct(
        &self,
        units: &[Option<&[u8]>],
        wanted: &[usize],
        out: &mut [&mut [u8]],
    ) -> Result<(), CodeError> {
        self.linear.reconstruct(units, wanted, out).map_err(|e| self.explained(e, ""))
    }

    fn repair_plan(
        &self,
        target: usize,
        unavailable: &[usize],
        unit_len: usize,
    ) -> Result<RepairPlan, CodeError> {
        let total = self.total_units();
        if let Some(&index) = std::iter::once(&target).chain(unavailable).find(|&&u| u >= total) {
            return Err(CodeError::UnitIndex { index, total });
        }
        self.check_unit_len(unit_len)?;
        if let Some(group) = self.group_of(target) {
            let helpers: Vec<usize> = self.group_members(group).filter(|&u| u != target).collect();
            if helpers.iter().all(|u| !unavailable.contains(u)) {
                let reads =
                    helpers.into_iter().map(|unit| ReadRange { unit, offset: 0, len: unit_len });
                return Ok(RepairPlan { target, unit_len, reads: reads.collect() });
            }
        }
        self.linear
            .repair_plan(target, unavailable, unit_len)
            .map_err(|e| self.explained(e, &format!("rebuilding unit {target}: ")))
    }

    fn repair(&self, plan: &RepairPlan, reads: &[&[u8]], out: &mut [u8]) -> Result<(), CodeError> {
        let context = format!("the plan's reads do not determine unit {}: ", plan.target);
        self.linear.repair(plan, reads, out).map_err(|e| self.explained(e, &context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module header's promise for the common shapes.
    #[test]
    fn every_shape_with_g_up_to_2_and_k_up_to_24_is_maximally_recoverable() {
        for g in 1..=2 {
            for k in 1..=24 {
                for l in (1..=k).filter(|l| k % l == 0) {
                    let points = choose_points(k, l, g);
                    assert!(points.maximally_recoverable, "lrc({k},{l},{g})");
                    assert!(points.decodes_g_plus_one, "lrc({k},{l},{g})");
                }
            }
        }
    }

    #[test]
    fn more_global_parities() {
        for (k, l, g) in [(6, 2, 3), (12, 2, 3), (12, 3, 3), (8, 2, 4), (10, 1, 4), (254, 1, 1)] {
            assert!(choose_points(k, l, g).maximally_recoverable, "lrc({k},{l},{g})");
        }
        // Greedy points do not reach maximal recoverability here, but every pattern of
        // ≤ g + 1 losses was checked.
        for (k, l, g) in [(14, 2, 3), (16, 4, 3), (16, 4, 4), (24, 4, 4), (48, 4, 4), (60, 6, 3)] {
            let points = choose_points(k, l, g);
            assert!(!points.maximally_recoverable, "lrc({k},{l},{g}): update the header");
            assert!(points.decodes_g_plus_one, "lrc({k},{l},{g})");
        }
    }

    /// Shapes far beyond the budget still get distinct non-zero points, and quickly.
    #[test]
    fn the_budget_bounds_the_search() {
        for (k, l, g) in [(200, 4, 20), (240, 1, 15), (16, 1, 16), (1, 1, 254), (127, 127, 2)] {
            let points = choose_points(k, l, g).points;
            let mut sorted = points.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), k, "lrc({k},{l},{g}): distinct points");
            assert!(sorted[0] != 0, "lrc({k},{l},{g}): non-zero points");
        }
        assert!(!choose_points(200, 4, 20).decodes_g_plus_one);
    }

    #[test]
    fn combinations_in_order() {
        let mut chosen = vec![0, 1];
        let mut seen = vec![chosen.clone()];
        while next_combination(&mut chosen, 4) {
            seen.push(chosen.clone());
        }
        assert_eq!(seen, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]);
        assert!(!next_combination(&mut [], 3));
        assert!(!next_combination(&mut [0, 1, 2], 3));
    }
}
