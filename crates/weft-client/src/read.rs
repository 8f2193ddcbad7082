//! The read path: normal reads fetch only the cells a range needs; degraded reads rebuild the
//! bytes of an unavailable data block from its group (Okapi §4.4).
//!
//! Data flow: meta's object record → the range is read in windows; each window becomes one
//! ranged GET per data block (`StripedLayout::block_reads`), fetched concurrently → a block
//! whose GET fails (node down, unit missing or corrupt) is rebuilt by [`UnitRebuilder`]:
//! the code's repair plan names which ranges of which units of the group to read (fewer for
//! LRC, Hitchhiker and Clay), those are fetched (from the cache when a previous window
//! fetched them) and decoded → the pieces are copied into the window in object order.
//!
//! Two modes ([`ReadMode`]): `blocking` runs the windows one after another in the caller's
//! task, decoding inline; `pipelined` (the default) fetches the windows in a task of their
//! own and issues their decodes to the coding engine without waiting for them, while the
//! caller awaits the decodes of an earlier window, assembles it and writes it out (UMR-EC's
//! overlap of IO and coding). A pipelined read of one window has nothing to overlap: it
//! runs in the caller's task, decoding on the engine.
//!
//! Invariants:
//! - Both modes return the same bytes: windows are written out in object order, and an
//!   engine decode is the same arithmetic as the inline one (the engine's canary).
//! - Every byte returned was either read from its own data block (verified by the node's
//!   checksums) or decoded from units that were; a decode that cannot be done is an error
//!   naming the unavailable units, never zeros.
//! - A unit that failed once is not asked again during the same read, nor (for
//!   `degraded::FAILED_MEMORY`) by the client's next reads — unless the group cannot be
//!   decoded without it, then it is asked again; units found missing or corrupt are reported
//!   to meta's repair queue (once per read that finds them).
//! - Gets use the client's degraded-read cache (degraded.rs): a range a rebuild fetched or
//!   decoded is served from memory to the client's next reads; healthy reads add nothing,
//!   and a window holding whole rows of a group adds only what it decoded.
//! - Lost blocks of one group over the same range of one window are decoded by one engine
//!   task when the code's plan reads k whole ranges from which all of them decode (RS):
//!   the inputs are read once, not once per lost block ([`GetStats::decoded_together`]).
//! - When a window cannot be read, meta's record is read again: if the object is the same
//!   generation but its units moved (repair, transition), the read continues under the new
//!   record (same generation, same bytes); a replaced object is an error, never a mix.
//! - For byte-local codes a range `[o, o + l)` of a block is rebuilt from the same range of
//!   other units; other codes rebuild whole units (kept in the cache for the next window).
//!   Virtual data units (past the object's end) and bytes past a short block's end are zeros.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    io::Write,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use tokio::sync::mpsc;
use weft_codes::Code;
use weft_engine::{DecodeOutput, DecodeTask, EcFuture, Engine};
use weft_layout::UnitId;

use crate::{
    node::{FailureKind, NodeFailure},
    Client, ClientError, ObjectInfo, Result,
};

/// A window whose extents are shorter than this on average is handed out gathered into one
/// buffer (one copy) instead of as slices of its block ranges.
const GATHER_BELOW: u64 = 32 << 10;

/// Bytes one read window spans (rounded to whole stripe rows).
const WINDOW_BYTES: u64 = 16 << 20;

/// Longest wait for reports of bad units when a read ends.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most bytes the fetched-range cache keeps, whatever the layout.
const CACHE_BYTES: usize = 256 << 20;

/// Bytes of one read window of `layout`: [`WINDOW_BYTES`] rounded down to whole stripe rows
/// (at least one row).
fn window_bytes(layout: &weft_layout::StripedLayout) -> u64 {
    let row = layout.stripe_width as u64 * layout.cell_bytes;
    (WINDOW_BYTES / row).max(1) * row
}

/// Bytes the fetched-range cache of a read of `layout` keeps: the current window's ranges
/// (a byte-local rebuild reads the same range of the group's other units, fetched with the
/// window), plus, for codes that rebuild whole units, one group's units (n·B) so the next
/// window finds them. Older ranges are never read again by a sequential read; keeping them
/// made a get's memory grow with the object (up to 256 MiB).
fn cache_limit(layout: &weft_layout::StripedLayout, byte_local: bool) -> usize {
    let whole_units = if byte_local { 0 } else { layout.n() as u64 * layout.block_bytes };
    (window_bytes(layout) + whole_units).min(CACHE_BYTES as u64) as usize
}

/// The bound on object bytes a get of `layout` holds at once (pipelined, the default): the
/// window being fetched, [`WINDOWS_AHEAD`] queued, the window being written out with its
/// assembled copy, and the range cache. Reported by `weft get --stats` beside the measured
/// peak.
pub fn read_buffer_bound(layout: &weft_layout::StripedLayout) -> u64 {
    let byte_local = layout.code.build().map(|c| c.byte_local()).unwrap_or(false);
    (WINDOWS_AHEAD as u64 + 3) * window_bytes(layout) + cache_limit(layout, byte_local) as u64
}

/// Windows a pipelined read produces ahead of the one being written out.
const WINDOWS_AHEAD: usize = 1;

/// How a read overlaps fetching, decoding and writing out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// Windows are fetched and decoded (on the coding engine) one ahead of the caller
    /// writing them out.
    #[default]
    Pipelined,
    /// One window at a time, decoding inline.
    Blocking,
}

impl ReadMode {
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Pipelined => "pipelined",
            ReadMode::Blocking => "blocking",
        }
    }

    pub fn parse(text: &str) -> Option<ReadMode> {
        [ReadMode::Pipelined, ReadMode::Blocking].into_iter().find(|m| m.name() == text)
    }
}

/// What a get did.
#[derive(Clone, Debug, Default)]
pub struct GetStats {
    /// Object bytes returned.
    pub bytes: u64,
    /// Bytes fetched from nodes (data read plus what degraded reads needed).
    pub bytes_fetched: u64,
    /// Bytes served from the client's degraded-read cache instead of a node.
    pub cache_hit_bytes: u64,
    /// Units that could not be read and were rebuilt, with the reason.
    pub degraded_units: Vec<(String, String)>,
    /// Lost block ranges rebuilt by a decode shared with another lost block of their group
    /// over the same rows (the decode's inputs read once for all of them).
    pub decoded_together: u64,
    pub elapsed: Duration,
}

/// Bytes of a block range: at hand, or being decoded on the coding engine (alone, or with
/// the other lost blocks of its group that share its rows).
enum Source {
    Ready(Bytes),
    Decoding(EcFuture<DecodeOutput>, Option<Keep>),
    /// Output `.1` of a decode of several units at once.
    Shared(Arc<SharedDecode>, usize),
}

/// One engine decode of several lost units of a group over the same rows: the k inputs are
/// read once for all of them. Whichever source is awaited first awaits the decode and keeps
/// its outputs for the others.
struct SharedDecode {
    state: tokio::sync::Mutex<SharedState>,
}

enum SharedState {
    Running(EcFuture<DecodeOutput>, Vec<Option<Keep>>),
    Done(Vec<Bytes>),
    Failed(String),
}

impl SharedDecode {
    async fn output(&self, at: usize) -> Result<Bytes> {
        let mut state = self.state.lock().await;
        if matches!(*state, SharedState::Running(..)) {
            let abandoned = SharedState::Failed("the decode was abandoned".into());
            let SharedState::Running(decoding, keeps) = std::mem::replace(&mut *state, abandoned)
            else {
                unreachable!("checked above")
            };
            *state = match decoding.await {
                Ok(output) => {
                    let outputs: Vec<Bytes> = output.units.into_iter().map(Bytes::from).collect();
                    for (bytes, keep) in outputs.iter().zip(keeps) {
                        if let Some(keep) = keep {
                            keep.put(bytes);
                        }
                    }
                    SharedState::Done(outputs)
                }
                Err(error) => SharedState::Failed(error.to_string()),
            };
        }
        match &*state {
            SharedState::Done(outputs) => outputs
                .get(at)
                .cloned()
                .ok_or_else(|| ClientError::Invalid(format!("the decode has no output {at}"))),
            SharedState::Failed(cause) => {
                Err(ClientError::Invalid(format!("the coding engine failed: {cause}")))
            }
            SharedState::Running(..) => unreachable!("resolved above"),
        }
    }
}

/// Where decoded bytes go once the engine is done: the client's degraded-read cache, as
/// `stored` bytes of unit `key` from `offset`.
struct Keep {
    cache: Arc<crate::DegradedCache>,
    key: String,
    offset: u64,
    stored: usize,
}

impl Keep {
    fn put(self, bytes: &Bytes) {
        let Keep { cache, key, offset, stored } = self;
        cache.put(&key, offset, bytes.slice(..stored.min(bytes.len())));
    }
}

impl Source {
    async fn bytes(self) -> Result<Bytes> {
        match self {
            Source::Ready(bytes) => Ok(bytes),
            Source::Decoding(decoding, keep) => match decoding.await {
                Ok(mut output) => {
                    let bytes = Bytes::from(output.units.pop().expect("one wanted unit"));
                    if let Some(keep) = keep {
                        keep.put(&bytes);
                    }
                    Ok(bytes)
                }
                Err(error) => {
                    Err(ClientError::Invalid(format!("the coding engine failed: {error}")))
                }
            },
            Source::Shared(decode, at) => decode.output(at).await,
        }
    }
}

/// `bytes` followed by zeros up to `len` (a range that runs past a unit's stored end).
fn zero_padded(bytes: Bytes, len: u64) -> Bytes {
    if bytes.len() as u64 == len {
        return bytes;
    }
    let mut padded = vec![0; len as usize];
    padded[..bytes.len()].copy_from_slice(&bytes);
    Bytes::from(padded)
}

/// A window whose block ranges are fetched, some perhaps still decoding.
struct PendingWindow {
    offset: u64,
    len: u64,
    /// Per data block: the offset in the block the range starts at, and its bytes.
    blocks: HashMap<usize, (u64, Source)>,
}

/// Ranges fetched from units, kept for the next sequential window.
#[derive(Debug)]
struct RangeCache {
    entries: VecDeque<(UnitId, u64, Bytes)>,
    bytes: usize,
    /// Most bytes kept ([`cache_limit`]); the oldest ranges go first.
    limit: usize,
}

impl RangeCache {
    fn get(&self, unit: UnitId, offset: u64, len: u64) -> Option<Bytes> {
        self.entries.iter().rev().find_map(|(u, start, bytes)| {
            let end = start + bytes.len() as u64;
            (*u == unit && *start <= offset && offset + len <= end)
                .then(|| bytes.slice((offset - start) as usize..(offset - start + len) as usize))
        })
    }

    fn put(&mut self, unit: UnitId, offset: u64, bytes: Bytes) {
        self.bytes += bytes.len();
        self.entries.push_back((unit, offset, bytes));
        while self.bytes > self.limit {
            match self.entries.pop_front() {
                Some((_, _, old)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }
}

/// Rebuilds ranges of units of one object from the other units of their group, remembering
/// which units failed and what it fetched.
#[derive(Debug)]
pub struct UnitRebuilder {
    client: Client,
    /// Shared, not copied: a stream reads an object piece by piece, a rebuilder per piece.
    pub object: Arc<ObjectInfo>,
    code: Arc<dyn Code>,
    failed: HashMap<UnitId, NodeFailure>,
    cache: RangeCache,
    report: bool,
    /// Reports to meta still in flight (awaited by [`UnitRebuilder::finish_reports`]).
    reports: Vec<tokio::task::JoinHandle<()>>,
    /// Bytes fetched from nodes so far.
    pub bytes_fetched: u64,
    /// Decodes MDS repair plans (k units read) on this engine instead of inline.
    engine: Option<Arc<Engine>>,
    /// Uses the client's degraded-read cache (gets; not repair or transition, whose
    /// rebuilds nobody reads again).
    shared: bool,
    /// Bytes served from the client's degraded-read cache.
    pub cache_hit_bytes: u64,
    /// Lost ranges rebuilt by one decode with others of their group ([`GetStats`]).
    pub decoded_together: u64,
    /// Units counted failed only because the client remembered them so: asked again rather
    /// than let a group be undecodable.
    remembered: std::collections::HashSet<UnitId>,
    /// The unit files this read opened locally (crate::local), for its next windows.
    grants: Arc<crate::local::Grants>,
    /// Groups whose rows the window being fetched reads whole (the same range of every
    /// stored data block; byte-local codes): a rebuild there reads only ranges this window
    /// fetches, so neither they nor its helpers go to the client's degraded-read cache —
    /// copying them there cost a sequential degraded read 13% of its CPU for no later hit.
    window_groups: HashSet<usize>,
}

impl UnitRebuilder {
    /// A rebuilder for `object`; with `report`, units found missing or corrupt are queued
    /// for repair in meta. Units meta reports down count as failed from the start.
    pub fn new(
        client: &Client,
        object: impl Into<Arc<ObjectInfo>>,
        report: bool,
    ) -> Result<UnitRebuilder> {
        let object: Arc<ObjectInfo> = object.into();
        let code = object.layout.code.build()?;
        let limit = cache_limit(&object.layout, code.byte_local());
        let failed = object
            .units
            .values()
            .filter(|u| u.is_down())
            .map(|u| {
                let cause = format!("node {} is down (meta)", u.node_id);
                (u.unit, NodeFailure { kind: FailureKind::Unreachable, cause })
            })
            .collect();
        Ok(UnitRebuilder {
            client: client.clone(),
            object,
            code,
            failed,
            cache: RangeCache { entries: VecDeque::new(), bytes: 0, limit },
            report,
            reports: Vec::new(),
            bytes_fetched: 0,
            engine: None,
            shared: false,
            cache_hit_bytes: 0,
            decoded_together: 0,
            remembered: Default::default(),
            grants: client.read_grants.clone().unwrap_or_default(),
            window_groups: HashSet::new(),
        })
    }

    /// Decodes on `engine` from now on (byte-local codes whose plan reads k whole ranges).
    pub fn with_engine(mut self, engine: Arc<Engine>) -> UnitRebuilder {
        self.engine = Some(engine);
        self
    }

    /// Uses the client's degraded-read cache from now on: cached ranges are served from it,
    /// what rebuilds fetch or decode (and the reads of degraded groups) is kept, units on
    /// nodes it found unreachable lately count failed when wanted, and units it found missing
    /// or corrupt lately mark their groups degraded.
    pub fn caching(mut self) -> UnitRebuilder {
        self.shared = true;
        self
    }

    /// Why `unit` cannot be read now without asking: it failed during this read, or (with
    /// the cache) its node was unreachable lately — then it counts failed from now on.
    fn known_failed(&mut self, unit: UnitId, node: u32) -> bool {
        if self.failed.contains_key(&unit) {
            return true;
        }
        if !self.shared {
            return false;
        }
        match self.client.degraded.node_failed(node) {
            Some(failure) => {
                self.failed.insert(unit, failure);
                self.remembered.insert(unit);
                true
            }
            None => false,
        }
    }

    /// Units that failed so far, with why.
    pub fn failures(&self) -> impl Iterator<Item = (&UnitId, &NodeFailure)> {
        self.failed.iter()
    }

    /// Marks a unit failed (and reports it to meta when it is missing or corrupt).
    pub fn mark_failed(&mut self, unit: UnitId, failure: NodeFailure) {
        if self.failed.contains_key(&unit) {
            return;
        }
        tracing::warn!(unit = %unit.short_name(), cause = %failure.cause, "unit unavailable");
        if let (true, Some(info)) = (self.shared, self.object.unit(unit)) {
            self.client.degraded.mark_failed(info.node_id, &info.unit_key, &failure);
        }
        if self.report && matches!(failure.kind, FailureKind::Missing | FailureKind::Corrupt) {
            let meta = self.client.meta.clone();
            let object = self.object.clone();
            let reason = format!("read: {}", failure.cause);
            self.reports.push(tokio::spawn(async move {
                if let Err(error) = meta.report_unit(&object, unit, &reason).await {
                    tracing::warn!(%error, "could not report a bad unit to meta");
                }
            }));
        }
        self.failed.insert(unit, failure);
    }

    /// Bytes `[offset, offset + stored)` of a unit from the read's own cache or the client's
    /// degraded-read cache.
    fn cached(&mut self, info: &crate::UnitInfo, offset: u64, stored: u64) -> Option<Bytes> {
        if let Some(hit) = self.cache.get(info.unit, offset, stored) {
            return Some(hit);
        }
        if !self.shared {
            return None;
        }
        let hit = self.client.degraded.get(&info.unit_key, offset, stored)?;
        self.cache_hit_bytes += stored;
        Some(hit)
    }

    /// Fetches several ranges (`(unit, offset, len)`, zero-padded past a unit's stored end,
    /// all zeros for a virtual unit) concurrently, from the caches when they hold them;
    /// failures are marked and returned by unit. With `keep` (ranges a rebuild reads), or
    /// when the unit's group is degraded, what is fetched also goes to the client's
    /// degraded-read cache.
    async fn fetch_all(
        &mut self,
        wanted: &[(UnitId, u64, u64)],
        keep: bool,
    ) -> Vec<Result<Bytes, UnitId>> {
        let mut out: Vec<Option<Result<Bytes, UnitId>>> = vec![None; wanted.len()];
        let mut remote = Vec::new();
        for (i, &(unit, offset, len)) in wanted.iter().enumerate() {
            let Some(info) = self.object.unit(unit).cloned() else {
                out[i] = Some(Ok(Bytes::from(vec![0; len as usize])));
                continue;
            };
            if self.known_failed(unit, info.node_id) {
                out[i] = Some(Err(unit));
                continue;
            }
            let stored = len.min(info.len.saturating_sub(offset));
            let hit =
                if stored == 0 { Some(Bytes::new()) } else { self.cached(&info, offset, stored) };
            match hit {
                Some(bytes) => out[i] = Some(Ok(zero_padded(bytes, len))),
                None => remote.push((i, info, offset, stored, len)),
            }
        }
        // Units concurrently; the ranges of one unit one after another in offset order, as
        // one stream: its disk reads forward (Clay reads several ranges of each helper).
        let nodes = self.client.nodes.clone();
        let mut by_unit: Vec<Vec<usize>> = Vec::new();
        let mut slot_of: HashMap<&str, usize> = HashMap::new();
        for (at, (_, info, ..)) in remote.iter().enumerate() {
            let slot = *slot_of.entry(info.unit_key.as_str()).or_insert_with(|| {
                by_unit.push(Vec::new());
                by_unit.len() - 1
            });
            by_unit[slot].push(at);
        }
        for ranges in &mut by_unit {
            ranges.sort_by_key(|&at| remote[at].2);
        }
        let streams = futures_util::future::join_all(by_unit.iter().map(|ranges| {
            let (nodes, remote, grants) = (nodes.clone(), &remote, &self.grants);
            async move {
                let mut got = Vec::with_capacity(ranges.len());
                for &at in ranges {
                    let (_, info, offset, stored, _) = &remote[at];
                    let result = match got.last() {
                        Some((_, Err(failure))) => Err(Clone::clone(failure)),
                        _ => nodes.get_range_in(info, *offset, *stored, Some(grants)).await,
                    };
                    got.push((at, result));
                }
                got
            }
        }))
        .await;
        let mut results: Vec<Option<Result<Bytes, NodeFailure>>> = vec![None; remote.len()];
        for (at, result) in streams.into_iter().flatten() {
            results[at] = Some(result);
        }
        let results = results.into_iter().map(|r| r.expect("every range fetched"));
        for ((i, info, offset, stored, len), result) in remote.into_iter().zip(results) {
            out[i] = Some(match result {
                Ok(bytes) => {
                    self.bytes_fetched += stored;
                    self.cache.put(info.unit, offset, bytes.clone());
                    if self.shared
                        && !self.in_window_rows(info.unit)
                        && (keep || self.group_degraded(info.unit))
                    {
                        self.client.degraded.put(&info.unit_key, offset, bytes.clone());
                    }
                    Ok(zero_padded(bytes, len))
                }
                Err(failure) => {
                    self.mark_failed(info.unit, failure);
                    Err(info.unit)
                }
            });
        }
        out.into_iter().map(|r| r.expect("every range answered")).collect()
    }

    /// Rebuilds bytes `[offset, offset + len)` of `unit` (coded length: the group's unit
    /// length) from the other units of its group, following the code's repair plan and
    /// re-planning around every unit that fails.
    pub async fn rebuild(&mut self, unit: UnitId, offset: u64, len: u64) -> Result<Bytes> {
        self.rebuild_source(unit, offset, len).await?.bytes().await
    }

    /// [`UnitRebuilder::rebuild`], but a decode on the engine is returned still running: the
    /// caller goes on fetching while the rails decode.
    async fn rebuild_source(&mut self, unit: UnitId, offset: u64, len: u64) -> Result<Source> {
        let layout = self.object.layout;
        let (group, target) = layout.unit_position(unit);
        let unit_len = self.object.unit_len(group);
        let byte_local = self.code.byte_local();
        // Byte-local codes rebuild just the range; the others the whole unit.
        let (base, span) = if byte_local { (offset, len) } else { (0, unit_len) };
        // Rebuilt before: by this read (whole units), or by an earlier one of this client.
        if let Some(info) = self.object.unit(unit).cloned() {
            if let Some(hit) = self.cached(&info, offset, len) {
                return Ok(Source::Ready(hit));
            }
        }
        loop {
            let unavailable: Vec<usize> = (0..layout.n())
                .filter(|&p| p != target && self.failed.contains_key(&layout.unit(group, p)))
                .collect();
            let plan = match self.code.repair_plan(target, &unavailable, span as usize) {
                Ok(plan) => plan,
                Err(error) => {
                    // Units only remembered failed by earlier reads may be back: ask them.
                    let retry: Vec<UnitId> = unavailable
                        .iter()
                        .map(|&p| layout.unit(group, p))
                        .filter(|u| self.remembered.remove(u))
                        .collect();
                    if !retry.is_empty() {
                        retry.iter().for_each(|u| drop(self.failed.remove(u)));
                        continue;
                    }
                    return Err(ClientError::Unrecoverable {
                        group,
                        unavailable: self.unavailable_names(group),
                        cause: error.to_string(),
                    });
                }
            };
            let wanted: Vec<(UnitId, u64, u64)> = plan
                .reads
                .iter()
                .map(|r| (layout.unit(group, r.unit), base + r.offset as u64, r.len as u64))
                .collect();
            let fetched = self.fetch_all(&wanted, true).await;
            if fetched.iter().any(|f| f.is_err()) {
                continue; // the failed units are marked; plan again without them
            }
            let reads: Vec<Bytes> = fetched.into_iter().map(|f| f.expect("checked")).collect();
            if let Some(decoding) = self.engine_decode(&plan, &reads, span, vec![plan.target]) {
                return Ok(Source::Decoding(decoding, self.keep_for(unit, base, span)));
            }
            let views: Vec<&[u8]> = reads.iter().map(|b| b.as_ref()).collect();
            let mut out = vec![0u8; span as usize];
            self.code.repair(&plan, &views, &mut out)?;
            let out = Bytes::from(out);
            self.keep_rebuilt(unit, base, &out);
            if byte_local {
                return Ok(Source::Ready(out));
            }
            self.cache.put(unit, 0, out.clone());
            return Ok(Source::Ready(out.slice(offset as usize..(offset + len) as usize)));
        }
    }

    /// Sources of the same range `[offset, offset + len)` of several lost units of one
    /// group. With an engine and a byte-local code whose plan reads k whole ranges from
    /// which all of them decode, one engine decode computes them together (its inputs read
    /// once, not once per unit); otherwise each is rebuilt on its own.
    async fn rebuild_sources(
        &mut self,
        units: &[UnitId],
        offset: u64,
        len: u64,
    ) -> Result<Vec<Source>> {
        let mut sources: Vec<Option<Source>> = Vec::with_capacity(units.len());
        let mut left = Vec::new();
        for (at, &unit) in units.iter().enumerate() {
            // Rebuilt before by an earlier read of this client.
            let hit = self.object.unit(unit).cloned().and_then(|i| self.cached(&i, offset, len));
            if hit.is_none() {
                left.push(at);
            }
            sources.push(hit.map(Source::Ready));
        }
        if left.len() > 1 && self.engine.is_some() && self.code.byte_local() {
            let together: Vec<UnitId> = left.iter().map(|&at| units[at]).collect();
            if let Some(decoded) = self.decode_together(&together, offset, len).await {
                for (at, source) in left.drain(..).zip(decoded) {
                    sources[at] = Some(source);
                }
            }
        }
        for at in left {
            sources[at] = Some(self.rebuild_source(units[at], offset, len).await?);
        }
        Ok(sources.into_iter().map(|s| s.expect("every unit has a source")).collect())
    }

    /// [`UnitRebuilder::rebuild_sources`]' one decode for all `units` (same group, same
    /// range), its inputs fetched; None when the plan does not allow it (then each unit is
    /// rebuilt on its own, which also names the units when the group cannot be decoded).
    async fn decode_together(
        &mut self,
        units: &[UnitId],
        offset: u64,
        len: u64,
    ) -> Option<Vec<Source>> {
        let layout = self.object.layout;
        let (group, first) = layout.unit_position(*units.first()?);
        let targets: Vec<usize> = units.iter().map(|&u| layout.unit_position(u).1).collect();
        loop {
            let unavailable: Vec<usize> = (0..layout.n())
                .filter(|&p| p != first && self.failed.contains_key(&layout.unit(group, p)))
                .collect();
            let plan = self.code.repair_plan(first, &unavailable, len as usize).ok()?;
            let read: HashSet<usize> = plan.reads.iter().map(|r| r.unit).collect();
            let lost: Vec<usize> = (0..layout.n()).filter(|p| !read.contains(p)).collect();
            if !self.decodes_on_engine(&plan, len) || !self.code.is_decodable(&lost) {
                return None;
            }
            let wanted: Vec<(UnitId, u64, u64)> =
                plan.reads.iter().map(|r| (layout.unit(group, r.unit), offset, len)).collect();
            let fetched = self.fetch_all(&wanted, true).await;
            if fetched.iter().any(|f| f.is_err()) {
                continue; // the failed units are marked; plan again without them
            }
            let reads: Vec<Bytes> = fetched.into_iter().map(|f| f.expect("checked")).collect();
            let decoding = self.engine_decode(&plan, &reads, len, targets)?;
            let keeps = units.iter().map(|&unit| self.keep_for(unit, offset, len)).collect();
            let state = tokio::sync::Mutex::new(SharedState::Running(decoding, keeps));
            let shared = Arc::new(SharedDecode { state });
            self.decoded_together += units.len() as u64;
            return Some((0..units.len()).map(|at| Source::Shared(shared.clone(), at)).collect());
        }
    }

    /// True when the window being fetched holds whole rows of `unit`'s group
    /// ([`UnitRebuilder::window_groups`]).
    fn in_window_rows(&self, unit: UnitId) -> bool {
        self.window_groups.contains(&self.object.layout.unit_position(unit).0)
    }

    /// True when a unit of `unit`'s group is known unavailable — failed in this read, or on
    /// a node / found missing or corrupt lately by this client — so its ranges are worth
    /// keeping: a rebuild of the same rows will read them. Asked only for ranges fetched
    /// from a node, so a get costs no scan of the object's units.
    fn group_degraded(&self, unit: UnitId) -> bool {
        let layout = self.object.layout;
        let (group, _) = layout.unit_position(unit);
        let cache = &self.client.degraded;
        (0..layout.n()).any(|p| {
            let unit = layout.unit(group, p);
            self.failed.contains_key(&unit)
                || self.object.unit(unit).is_some_and(|info| {
                    cache.node_failed(info.node_id).is_some()
                        || cache.unit_failed(info.node_id, &info.unit_key)
                })
        })
    }

    /// Keeps rebuilt bytes of `unit` (from `offset`) in the client's degraded-read cache.
    fn keep_rebuilt(&self, unit: UnitId, offset: u64, bytes: &Bytes) {
        if let (true, Some(info)) = (self.shared, self.object.unit(unit)) {
            // The stored length: bytes past a short unit's end are padding, never read.
            let stored = (bytes.len() as u64).min(info.len.saturating_sub(offset)) as usize;
            self.client.degraded.put(&info.unit_key, offset, bytes.slice(..stored));
        }
    }

    /// Whether `plan` decodes on the engine: there is one, and the plan reads k whole ranges
    /// of `span` bytes of a byte-local code (an MDS decode).
    fn decodes_on_engine(&self, plan: &weft_codes::RepairPlan, span: u64) -> bool {
        let code = &*self.code;
        let whole = plan.reads.iter().all(|r| r.offset == 0 && r.len as u64 == span);
        self.engine.is_some() && code.byte_local() && whole && plan.reads.len() >= code.data_units()
    }

    /// Units `wanted` (positions in the group) decoding on the engine from the plan's
    /// `reads`, when [`UnitRebuilder::decodes_on_engine`]; `None` means decode inline.
    fn engine_decode(
        &self,
        plan: &weft_codes::RepairPlan,
        reads: &[Bytes],
        span: u64,
        wanted: Vec<usize>,
    ) -> Option<EcFuture<DecodeOutput>> {
        if !self.decodes_on_engine(plan, span) {
            return None;
        }
        let mut units: Vec<Option<Bytes>> = vec![None; self.code.total_units()];
        for (read, bytes) in plan.reads.iter().zip(reads) {
            units[read.unit] = Some(bytes.clone());
        }
        let task = DecodeTask::new(self.object.layout.code, units, wanted);
        Some(self.engine.as_ref()?.idecode(task))
    }

    /// Where the bytes `[offset, offset + span)` of `unit` decoded on the engine go: the
    /// client's degraded-read cache, its stored part (gets only).
    fn keep_for(&self, unit: UnitId, offset: u64, span: u64) -> Option<Keep> {
        let info = self.object.unit(unit).filter(|_| self.shared)?;
        Some(Keep {
            cache: Arc::clone(&self.client.degraded),
            key: info.unit_key.clone(),
            offset,
            stored: span.min(info.len.saturating_sub(offset)) as usize,
        })
    }

    /// Waits (at most a few seconds) for the reports of bad units to reach meta, so a short
    /// process (a CLI get) does not end — and cancel them — before meta heard.
    pub async fn finish_reports(&mut self) {
        for report in self.reports.drain(..) {
            let _ = tokio::time::timeout(REPORT_WAIT, report).await;
        }
    }

    /// The stored bytes of data block x, rebuilt from its group when it is unavailable.
    pub async fn read_block(&mut self, x: usize) -> Result<Bytes> {
        let unit = UnitId::Data(x);
        let Some(len) = self.object.unit(unit).map(|u| u.len) else {
            return Ok(Bytes::new()); // a virtual block: nothing stored
        };
        match self.fetch_all(&[(unit, 0, len)], false).await.pop() {
            Some(Ok(bytes)) => Ok(bytes),
            _ => self.rebuild(unit, 0, len).await,
        }
    }

    fn unavailable_names(&self, group: usize) -> Vec<String> {
        let layout = self.object.layout;
        (0..layout.n())
            .map(|p| layout.unit(group, p))
            .filter_map(|u| {
                self.failed.get(&u).map(|f| format!("{} ({})", u.short_name(), f.cause))
            })
            .collect()
    }
}

impl Client {
    /// Writes bytes `[start, start + len)` of (bucket, key) to `out` (the whole object when
    /// `range` is None), rebuilding what unavailable units hold.
    pub async fn get<W: Write>(
        &self,
        bucket: &str,
        key: &str,
        range: Option<(u64, u64)>,
        out: &mut W,
        progress: Option<&AtomicU64>,
    ) -> Result<GetStats> {
        let object = self.meta.get_object(bucket, key).await?;
        self.get_object_range(object, range, out, progress).await
    }

    /// Like [`Client::get`], for an object record already fetched from meta.
    pub async fn get_object_range<W: Write>(
        &self,
        object: impl Into<Arc<ObjectInfo>>,
        range: Option<(u64, u64)>,
        out: &mut W,
        progress: Option<&AtomicU64>,
    ) -> Result<GetStats> {
        self.get_object_range_with(object, range, out, progress, ReadMode::default()).await
    }

    /// [`Client::get_object_range`] in a chosen [`ReadMode`].
    pub async fn get_object_range_with<W: Write>(
        &self,
        object: impl Into<Arc<ObjectInfo>>,
        range: Option<(u64, u64)>,
        out: &mut W,
        progress: Option<&AtomicU64>,
        mode: ReadMode,
    ) -> Result<GetStats> {
        let mut emit = |bytes: Bytes| -> Result<()> {
            out.write_all(&bytes)
                .map_err(|source| ClientError::Io { what: "writing the object out".into(), source })
        };
        self.read_object_range(object, range, &mut emit, progress, mode).await
    }

    /// Bytes `[start, start + len)` of `object` (all of it when `range` is None), handed to
    /// `emit` in object order as pieces that share the buffers the nodes' answers arrived in
    /// (no copy, no zeroed buffer); degraded reads decode as in [`Client::get_object_range`].
    /// An error from `emit` stops the read and is returned.
    pub async fn read_object_range<E: FnMut(Bytes) -> Result<()>>(
        &self,
        object: impl Into<Arc<ObjectInfo>>,
        range: Option<(u64, u64)>,
        emit: &mut E,
        progress: Option<&AtomicU64>,
        mode: ReadMode,
    ) -> Result<GetStats> {
        let object: Arc<ObjectInfo> = object.into();
        let started = Instant::now();
        let size = object.size;
        let (start, len) = range.unwrap_or((0, size));
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(ClientError::Invalid(format!(
                "range {start}+{len} is past the end of the object ({size} bytes)"
            )));
        }
        if let Some(trace) = &self.trace {
            trace.record(&object.bucket, &object.key, start, len, size);
        }
        if object.raidp.is_some() {
            return self.get_raidp(&object, start, len, &mut EmitWriter(emit), progress).await;
        }
        if object.packed {
            return self.get_geometric(&object, start, len, &mut EmitWriter(emit), progress).await;
        }
        let layout = object.layout;
        let window = window_bytes(&layout);
        // Windows are aligned to whole stripe rows (the first may start mid-row).
        let windows: Vec<(u64, u64)> = {
            let (mut at, mut all) = (start, Vec::new());
            while at < start + len {
                let end = ((at / window + 1) * window).min(start + len);
                all.push((at, end));
                at = end;
            }
            all
        };
        let mut rebuilder = UnitRebuilder::new(self, object, true)?.caching();
        let mut stats = GetStats::default();
        let mut write_out = |pieces: Vec<Bytes>| -> Result<()> {
            for bytes in pieces {
                let n = bytes.len() as u64;
                emit(bytes)?;
                if let Some(progress) = progress {
                    progress.fetch_add(n, Ordering::Relaxed);
                }
                stats.bytes += n;
            }
            Ok(())
        };
        let outcome: Result<()> = match mode {
            ReadMode::Blocking => {
                let mut outcome = Ok(());
                for (at, end) in windows {
                    let window = self.next_window(&mut rebuilder, at, end).await;
                    outcome = async { write_out(assemble(&layout, window?).await?) }.await;
                    if outcome.is_err() {
                        break;
                    }
                }
                outcome
            }
            ReadMode::Pipelined if windows.len() == 1 => {
                // One window (a small object, a piece of a stream): nothing to overlap, so
                // no producing task; its decodes still go to the engine.
                rebuilder = rebuilder.with_engine(weft_engine::shared());
                let (at, end) = windows[0];
                let window = self.next_window(&mut rebuilder, at, end).await;
                async { write_out(assemble(&layout, window?).await?) }.await
            }
            ReadMode::Pipelined => {
                let (tx, mut rx) = mpsc::channel::<Result<PendingWindow>>(WINDOWS_AHEAD);
                let client = self.clone();
                let mut producing = rebuilder.with_engine(weft_engine::shared());
                let producer = tokio::spawn(async move {
                    for (at, end) in windows {
                        let window = client.next_window(&mut producing, at, end).await;
                        let failed = window.is_err();
                        if tx.send(window).await.is_err() || failed {
                            break;
                        }
                    }
                    producing
                });
                let mut outcome = Ok(());
                while let Some(window) = rx.recv().await {
                    outcome = async { write_out(assemble(&layout, window?).await?) }.await;
                    if outcome.is_err() {
                        break;
                    }
                }
                // A failed write stops the producer at its next window.
                drop(rx);
                rebuilder = producer.await.map_err(|e| {
                    ClientError::Invalid(format!("the read's producing task failed: {e}"))
                })?;
                outcome
            }
        };
        // Reports of bad units must reach meta even when the read failed.
        rebuilder.finish_reports().await;
        outcome?;
        stats.bytes_fetched = rebuilder.bytes_fetched;
        stats.cache_hit_bytes = rebuilder.cache_hit_bytes;
        stats.decoded_together = rebuilder.decoded_together;
        stats.degraded_units =
            rebuilder.failures().map(|(u, f)| (u.short_name(), f.cause.clone())).collect();
        stats.degraded_units.sort();
        stats.elapsed = started.elapsed();
        Ok(stats)
    }

    /// Object bytes `[at, end)` fetched (decodes perhaps running); if they cannot be read
    /// and meta's record of the same generation names other units now, goes on under that
    /// record.
    async fn next_window(
        &self,
        rebuilder: &mut UnitRebuilder,
        at: u64,
        end: u64,
    ) -> Result<PendingWindow> {
        let error = match fetch_window(rebuilder, at, end - at).await {
            Ok(window) => return Ok(window),
            Err(error) => error,
        };
        // Units may have moved since the record was read (a repair relocated one, a
        // transition swapped the parity). The same generation has the same bytes, so the read
        // can go on under meta's current record.
        let old = &rebuilder.object;
        let fresh = match self.meta.get_object(&old.bucket, &old.key).await {
            Ok(fresh)
                if fresh.generation == old.generation && fresh.raw["units"] != old.raw["units"] =>
            {
                fresh
            }
            _ => return Err(error),
        };
        tracing::info!(key = %fresh.key, "object record changed during the read; continuing under the new one");
        let (fetched, hits, together, reports, engine) = (
            rebuilder.bytes_fetched,
            rebuilder.cache_hit_bytes,
            rebuilder.decoded_together,
            std::mem::take(&mut rebuilder.reports),
            rebuilder.engine.take(),
        );
        let mut fresh = UnitRebuilder::new(self, fresh, true)?;
        if rebuilder.shared {
            fresh = fresh.caching();
        }
        *rebuilder = fresh;
        rebuilder.bytes_fetched = fetched;
        rebuilder.cache_hit_bytes = hits;
        rebuilder.decoded_together = together;
        rebuilder.reports = reports;
        rebuilder.engine = engine;
        fetch_window(rebuilder, at, end - at).await
    }
}

/// Object bytes `[offset, offset + len)`: one ranged GET per data block, rebuilding blocks
/// that fail (decodes on the engine may still be running).
async fn fetch_window(
    rebuilder: &mut UnitRebuilder,
    offset: u64,
    len: u64,
) -> Result<PendingWindow> {
    let layout = rebuilder.object.layout;
    let reads = layout.block_reads(offset, len);
    let wanted: Vec<(UnitId, u64, u64)> =
        reads.iter().map(|r| (UnitId::Data(r.block), r.block_offset, r.len)).collect();
    rebuilder.window_groups = if rebuilder.code.byte_local() {
        whole_row_groups(&rebuilder.object, &reads)
    } else {
        HashSet::new()
    };
    let fetched = rebuilder.fetch_all(&wanted, false).await;
    let mut blocks: HashMap<usize, (u64, Source)> = HashMap::new();
    // Lost blocks by (group, range): those sharing one decode together.
    let mut lost: std::collections::BTreeMap<(usize, u64, u64), Vec<UnitId>> = Default::default();
    for (read, result) in reads.iter().zip(fetched) {
        match result {
            Ok(bytes) => {
                blocks.insert(read.block, (read.block_offset, Source::Ready(bytes)));
            }
            Err(unit) => {
                let group = layout.group_of(read.block);
                lost.entry((group, read.block_offset, read.len)).or_default().push(unit);
            }
        }
    }
    let rebuilt = async {
        for ((_, block_offset, len), units) in lost {
            let sources = rebuilder.rebuild_sources(&units, block_offset, len).await?;
            for (unit, source) in units.into_iter().zip(sources) {
                if let UnitId::Data(block) = unit {
                    blocks.insert(block, (block_offset, source));
                }
            }
        }
        Ok::<_, ClientError>(())
    }
    .await;
    rebuilder.window_groups.clear();
    rebuilt?;
    Ok(PendingWindow { offset, len, blocks })
}

/// The groups whose stored data blocks `reads` all read, each over the same range: the
/// window holds whole rows of them, so a byte-local rebuild there reads only what the
/// window fetches.
fn whole_row_groups(object: &ObjectInfo, reads: &[weft_layout::BlockRead]) -> HashSet<usize> {
    let layout = object.layout;
    // group → (range, blocks read over it, or None once two ranges differ)
    let mut seen: HashMap<usize, ((u64, u64), Option<usize>)> = HashMap::new();
    for read in reads {
        let range = (read.block_offset, read.len);
        let entry = seen.entry(layout.group_of(read.block)).or_insert((range, Some(0)));
        entry.1 = entry.1.filter(|_| entry.0 == range).map(|count| count + 1);
    }
    seen.into_iter()
        .filter(|(group, (_, count))| {
            *count == Some(layout.group_blocks(object.size, *group).len())
        })
        .map(|(group, _)| group)
        .collect()
}

/// The window's bytes in object order, once its decodes are done: one piece per extent,
/// each a slice of the block range it lies in (no copy), or, when the extents are shorter
/// than [`GATHER_BELOW`] on average, one piece gathering them. Extents of the window lie in
/// order and end to end, so the pieces cover it exactly.
async fn assemble(
    layout: &weft_layout::StripedLayout,
    window: PendingWindow,
) -> Result<Vec<Bytes>> {
    let PendingWindow { offset, len, blocks: sources } = window;
    let mut blocks: HashMap<usize, (u64, Bytes)> = HashMap::with_capacity(sources.len());
    for (block, (base, source)) in sources {
        blocks.insert(block, (base, source.bytes().await?));
    }
    let mut pieces = Vec::new();
    let mut at = offset;
    for extent in layout.extents(offset, len) {
        debug_assert_eq!(extent.object_offset, at, "extents are contiguous");
        let (base, bytes) = &blocks[&extent.block];
        let from = (extent.block_offset - base) as usize;
        let to = from + extent.len as usize;
        if to > bytes.len() {
            return Err(ClientError::Invalid(format!(
                "block {} range holds {} bytes, the extent needs {to}",
                extent.block,
                bytes.len()
            )));
        }
        pieces.push(bytes.slice(from..to));
        at += extent.len;
    }
    if at != offset + len {
        return Err(ClientError::Invalid(format!(
            "the window's extents cover {} of its {len} bytes",
            at - offset
        )));
    }
    if pieces.len() > 1 && len / (pieces.len() as u64) < GATHER_BELOW {
        // Small cells (a fitted small object's 4 KiB): one buffer, not hundreds of slices
        // each its own frame and system call on the way out.
        let mut gathered = bytes::BytesMut::with_capacity(len as usize);
        for piece in &pieces {
            gathered.extend_from_slice(piece);
        }
        return Ok(vec![gathered.freeze()]);
    }
    Ok(pieces)
}

/// A `Write` that hands what it is given to an emitter (the paths that write out through
/// `Write`: RAIDP and geometric objects).
struct EmitWriter<'a, E>(&'a mut E);

impl<E: FnMut(Bytes) -> Result<()>> Write for EmitWriter<'_, E> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        (self.0)(Bytes::copy_from_slice(buf)).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
