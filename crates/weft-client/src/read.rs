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
//! Invariants:
//! - Every byte returned was either read from its own data block (verified by the node's
//!   checksums) or decoded from units that were; a decode that cannot be done is an error
//!   naming the unavailable units, never zeros.
//! - A unit that failed once is not asked again during the same read; units found missing
//!   or corrupt are reported to meta's repair queue (once each).
//! - When a window cannot be read, meta's record is read again: if the object is the same
//!   generation but its units moved (repair, transition), the read continues under the new
//!   record (same generation, same bytes); a replaced object is an error, never a mix.
//! - For byte-local codes a range `[o, o + l)` of a block is rebuilt from the same range of
//!   other units; other codes rebuild whole units (kept in the cache for the next window).
//!   Virtual data units (past the object's end) and bytes past a short block's end are zeros.

use std::{
    collections::{HashMap, VecDeque},
    io::Write,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use weft_codes::Code;
use weft_layout::UnitId;

use crate::{
    node::{FailureKind, NodeFailure},
    Client, ClientError, ObjectInfo, Result,
};

/// Bytes one read window spans (rounded to whole stripe rows).
const WINDOW_BYTES: u64 = 16 << 20;

/// Longest wait for reports of bad units when a read ends.
const REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most bytes the fetched-range cache keeps.
const CACHE_BYTES: usize = 256 << 20;

/// What a get did.
#[derive(Clone, Debug, Default)]
pub struct GetStats {
    /// Object bytes returned.
    pub bytes: u64,
    /// Bytes fetched from nodes (data read plus what degraded reads needed).
    pub bytes_fetched: u64,
    /// Units that could not be read and were rebuilt, with the reason.
    pub degraded_units: Vec<(String, String)>,
    pub elapsed: Duration,
}

/// Ranges fetched from units, kept for the next sequential window.
#[derive(Debug, Default)]
struct RangeCache {
    entries: VecDeque<(UnitId, u64, Bytes)>,
    bytes: usize,
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
        while self.bytes > CACHE_BYTES {
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
    pub object: ObjectInfo,
    code: Arc<dyn Code>,
    failed: HashMap<UnitId, NodeFailure>,
    cache: RangeCache,
    report: bool,
    /// Reports to meta still in flight (awaited by [`UnitRebuilder::finish_reports`]).
    reports: Vec<tokio::task::JoinHandle<()>>,
    /// Bytes fetched from nodes so far.
    pub bytes_fetched: u64,
}

impl UnitRebuilder {
    /// A rebuilder for `object`; with `report`, units found missing or corrupt are queued
    /// for repair in meta. Units meta reports down count as failed from the start.
    pub fn new(client: &Client, object: ObjectInfo, report: bool) -> Result<UnitRebuilder> {
        let code = object.layout.code.build()?;
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
            cache: RangeCache::default(),
            report,
            reports: Vec::new(),
            bytes_fetched: 0,
        })
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

    /// Bytes `[offset, offset + len)` of `unit` as stored, zero-padded past its stored end
    /// (and all zeros for a virtual unit). Uses the cache; fetched ranges are cached.
    async fn fetch(&mut self, unit: UnitId, offset: u64, len: u64) -> Result<Bytes, NodeFailure> {
        let Some(info) = self.object.unit(unit).cloned() else {
            return Ok(Bytes::from(vec![0; len as usize]));
        };
        if let Some(failure) = self.failed.get(&unit) {
            return Err(failure.clone());
        }
        let stored = len.min(info.len.saturating_sub(offset));
        let bytes = match self.cache.get(unit, offset, stored) {
            Some(hit) => hit,
            None => {
                let bytes = self.client.nodes.get_range(&info, offset, stored).await?;
                self.bytes_fetched += stored;
                self.cache.put(unit, offset, bytes.clone());
                bytes
            }
        };
        if stored == len {
            return Ok(bytes);
        }
        let mut padded = vec![0; len as usize];
        padded[..bytes.len()].copy_from_slice(&bytes);
        Ok(Bytes::from(padded))
    }

    /// Fetches several ranges concurrently; failures are marked and returned by unit.
    async fn fetch_all(&mut self, wanted: &[(UnitId, u64, u64)]) -> Vec<Result<Bytes, UnitId>> {
        // Serve from cache / virtual units first, then fetch the rest concurrently.
        let mut out: Vec<Option<Result<Bytes, UnitId>>> = vec![None; wanted.len()];
        let mut remote = Vec::new();
        for (i, &(unit, offset, len)) in wanted.iter().enumerate() {
            let info = self.object.unit(unit).cloned();
            let stored = info.as_ref().map_or(0, |u| len.min(u.len.saturating_sub(offset)));
            let cached = stored == 0 || self.cache.get(unit, offset, stored).is_some();
            match info {
                Some(info) if !cached && !self.failed.contains_key(&unit) => {
                    remote.push((i, info, offset, stored, len));
                }
                _ => out[i] = Some(self.fetch(unit, offset, len).await.map_err(|_| unit)),
            }
        }
        let nodes = self.client.nodes.clone();
        let results =
            futures_util::future::join_all(remote.iter().map(|(_, info, offset, stored, _)| {
                let nodes = nodes.clone();
                async move { nodes.get_range(info, *offset, *stored).await }
            }))
            .await;
        for ((i, info, offset, stored, len), result) in remote.into_iter().zip(results) {
            out[i] = Some(match result {
                Ok(bytes) => {
                    self.bytes_fetched += stored;
                    self.cache.put(info.unit, offset, bytes.clone());
                    if stored == len {
                        Ok(bytes)
                    } else {
                        let mut padded = vec![0; len as usize];
                        padded[..bytes.len()].copy_from_slice(&bytes);
                        Ok(Bytes::from(padded))
                    }
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
        let layout = self.object.layout;
        let (group, target) = layout.unit_position(unit);
        let unit_len = self.object.unit_len(group);
        let byte_local = self.code.byte_local();
        // Byte-local codes rebuild just the range; the others the whole unit.
        let (base, span) = if byte_local { (offset, len) } else { (0, unit_len) };
        if !byte_local {
            if let Some(hit) = self.cache.get(unit, offset, len) {
                return Ok(hit);
            }
        }
        loop {
            let unavailable: Vec<usize> = (0..layout.n())
                .filter(|&p| p != target && self.failed.contains_key(&layout.unit(group, p)))
                .collect();
            let plan = self.code.repair_plan(target, &unavailable, span as usize).map_err(|e| {
                ClientError::Unrecoverable {
                    group,
                    unavailable: self.unavailable_names(group),
                    cause: e.to_string(),
                }
            })?;
            let wanted: Vec<(UnitId, u64, u64)> = plan
                .reads
                .iter()
                .map(|r| (layout.unit(group, r.unit), base + r.offset as u64, r.len as u64))
                .collect();
            let fetched = self.fetch_all(&wanted).await;
            if fetched.iter().any(|f| f.is_err()) {
                continue; // the failed units are marked; plan again without them
            }
            let reads: Vec<Bytes> = fetched.into_iter().map(|f| f.expect("checked")).collect();
            let views: Vec<&[u8]> = reads.iter().map(|b| b.as_ref()).collect();
            let mut out = vec![0u8; span as usize];
            self.code.repair(&plan, &views, &mut out)?;
            let out = Bytes::from(out);
            if byte_local {
                return Ok(out);
            }
            self.cache.put(unit, 0, out.clone());
            return Ok(out.slice(offset as usize..(offset + len) as usize));
        }
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
        match self.fetch_all(&[(unit, 0, len)]).await.pop() {
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
        object: ObjectInfo,
        range: Option<(u64, u64)>,
        out: &mut W,
        progress: Option<&AtomicU64>,
    ) -> Result<GetStats> {
        let started = Instant::now();
        let size = object.size;
        let (start, len) = range.unwrap_or((0, size));
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(ClientError::Invalid(format!(
                "range {start}+{len} is past the end of the object ({size} bytes)"
            )));
        }
        let layout = object.layout;
        let row = layout.stripe_width as u64 * layout.cell_bytes;
        let window = (WINDOW_BYTES / row).max(1) * row;
        let mut rebuilder = UnitRebuilder::new(self, object, true)?;
        let mut stats = GetStats::default();
        let outcome: Result<()> = async {
            let rebuilder = &mut rebuilder;
            let mut at = start;
            while at < start + len {
                // Windows are aligned to whole stripe rows (the first may start mid-row).
                let end = ((at / window + 1) * window).min(start + len);
                let bytes = match read_window(rebuilder, at, end - at).await {
                    Ok(bytes) => bytes,
                    Err(error) => {
                        // Units may have moved since the record was read (a repair relocated
                        // one, a transition swapped the parity). The same generation has the
                        // same bytes, so the read can go on under meta's current record.
                        let old = &rebuilder.object;
                        let fresh = match self.meta.get_object(&old.bucket, &old.key).await {
                            Ok(fresh)
                                if fresh.generation == old.generation
                                    && fresh.raw["units"] != old.raw["units"] =>
                            {
                                fresh
                            }
                            _ => return Err(error),
                        };
                        tracing::info!(key = %fresh.key, "object record changed during the read; continuing under the new one");
                        let (fetched, reports) =
                            (rebuilder.bytes_fetched, std::mem::take(&mut rebuilder.reports));
                        *rebuilder = UnitRebuilder::new(self, fresh, true)?;
                        rebuilder.bytes_fetched = fetched;
                        rebuilder.reports = reports;
                        read_window(rebuilder, at, end - at).await?
                    }
                };
                out.write_all(&bytes).map_err(|source| ClientError::Io {
                    what: "writing the object out".into(),
                    source,
                })?;
                if let Some(progress) = progress {
                    progress.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                stats.bytes += bytes.len() as u64;
                at = end;
            }
            Ok(())
        }
        .await;
        // Reports of bad units must reach meta even when the read failed.
        rebuilder.finish_reports().await;
        outcome?;
        stats.bytes_fetched = rebuilder.bytes_fetched;
        stats.degraded_units =
            rebuilder.failures().map(|(u, f)| (u.short_name(), f.cause.clone())).collect();
        stats.degraded_units.sort();
        stats.elapsed = started.elapsed();
        Ok(stats)
    }
}

/// Object bytes `[offset, offset + len)`: one ranged GET per data block, rebuilding blocks
/// that fail.
async fn read_window(rebuilder: &mut UnitRebuilder, offset: u64, len: u64) -> Result<Vec<u8>> {
    let layout = rebuilder.object.layout;
    let reads = layout.block_reads(offset, len);
    let wanted: Vec<(UnitId, u64, u64)> =
        reads.iter().map(|r| (UnitId::Data(r.block), r.block_offset, r.len)).collect();
    let fetched = rebuilder.fetch_all(&wanted).await;
    let mut blocks: HashMap<usize, (u64, Bytes)> = HashMap::new();
    for (read, result) in reads.iter().zip(fetched) {
        let bytes = match result {
            Ok(bytes) => bytes,
            Err(unit) => rebuilder.rebuild(unit, read.block_offset, read.len).await?,
        };
        blocks.insert(read.block, (read.block_offset, bytes));
    }
    let mut out = vec![0u8; len as usize];
    for extent in layout.extents(offset, len) {
        let (base, bytes) = &blocks[&extent.block];
        let from = (extent.block_offset - base) as usize;
        let to = (extent.object_offset - offset) as usize;
        out[to..to + extent.len as usize].copy_from_slice(&bytes[from..from + extent.len as usize]);
    }
    Ok(out)
}
