//! The degraded-read cache (Okapi §4.4): what one client (a CLI process, a gateway, one
//! reader of `weft bench reads`) fetched or decoded to rebuild unavailable units, kept across
//! its gets so a sequential reader of a degraded object reads and decodes each group's bytes
//! once, not once per ranged read.
//!
//! A rebuild of bytes `[o, o + l)` of a failed block reads the same range of k other units
//! of its group — mostly the group's other data blocks, which the reader asks for next (the
//! same stripe row) or a few stripes later (when groups are wider than stripes). Without the
//! cache each of those is fetched again by its own read, and every ranged read of the failed
//! block decodes anew (a whole unit for Hitchhiker and Clay); with it they are served from
//! memory.
//!
//! Invariants:
//! - Entries are keyed by the unit's key on its disk (object id, unit, generation): units are
//!   immutable, so a cached range can never be stale — a new generation or a new parity
//!   (transition) has another key. Only bytes a node returned (checked against its checksums)
//!   or decoded from such bytes are kept.
//! - Memory is bounded: at most `limit` bytes of entries; the least recently used go first,
//!   and a range larger than the limit is not kept. A limit of 0 turns the cache off.
//! - Entries hold no unit file open: bytes a local read brought are kept as a copy
//!   ([`crate::file_bytes::detached`]), so a cached range never keeps a deleted unit's disk
//!   space or a descriptor.
//! - Only reads of a group with an unavailable unit add entries (what a rebuild fetched or
//!   decoded, and the group's data a read fetched, which a rebuild of the same rows will
//!   want); other reads only look up. A client that never meets a failure holds nothing.
//!   A read window that holds whole rows of a group (every stored data block over the same
//!   range; byte-local codes) keeps only what it decoded: its rebuilds read nothing the
//!   window did not fetch itself, so copies of those ranges would only be hit by another
//!   reader of the same rows, which finds the decoded bytes here and reads the rest as a
//!   healthy read does.
//! - Failures are remembered for [`FAILED_MEMORY`]: a node that could not be reached is not
//!   asked again meanwhile (its units count failed); a unit found missing or corrupt is still
//!   asked (a repair in place mends it at once), but its group's reads keep what they fetch.
//!   A unit meta moves (repair) has another node and is asked afresh.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
    time::{Duration, Instant},
};

use bytes::Bytes;

use crate::node::{FailureKind, NodeFailure};

/// How long a unit that could not be read counts as unavailable for later reads.
pub const FAILED_MEMORY: Duration = Duration::from_secs(10);

/// Default bytes a client keeps for degraded reads (`--degraded-cache`).
pub const DEFAULT_DEGRADED_CACHE_BYTES: usize = 256 << 20;

/// A bounded LRU of unit ranges, shared by every get of one client.
#[derive(Debug)]
pub struct DegradedCache {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per unit key: the cached ranges (offset → entry).
    ranges: HashMap<String, BTreeMap<u64, Entry>>,
    /// Use order: tick → (unit key, offset).
    order: BTreeMap<u64, (String, u64)>,
    tick: u64,
    bytes: usize,
    /// (node, unit key) → when it failed and why.
    failed: HashMap<(u32, String), (Instant, NodeFailure)>,
    /// Nodes that could not be reached → when and why (every unit on them counts failed).
    failed_nodes: HashMap<u32, (Instant, NodeFailure)>,
    hit_bytes: u64,
}

#[derive(Debug)]
struct Entry {
    bytes: Bytes,
    tick: u64,
}

/// Counters of one cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    /// Bytes kept now.
    pub bytes: usize,
    /// Ranges kept now.
    pub entries: usize,
    /// Bytes served from the cache so far.
    pub hit_bytes: u64,
}

impl DegradedCache {
    /// A cache keeping at most `limit` bytes (0: off).
    pub fn new(limit: usize) -> DegradedCache {
        DegradedCache { limit, inner: Mutex::new(Inner::default()) }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Bytes `[offset, offset + len)` of unit `key`, when one cached range holds them all.
    pub fn get(&self, key: &str, offset: u64, len: u64) -> Option<Bytes> {
        if self.limit == 0 {
            return None;
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let ranges = inner.ranges.get_mut(key)?;
        let (&start, entry) = ranges.range_mut(..=offset).next_back()?;
        let end = start + entry.bytes.len() as u64;
        if offset + len > end {
            return None;
        }
        inner.tick += 1;
        inner.order.remove(&entry.tick);
        entry.tick = inner.tick;
        inner.order.insert(inner.tick, (key.to_string(), start));
        inner.hit_bytes += len;
        let from = (offset - start) as usize;
        Some(entry.bytes.slice(from..from + len as usize))
    }

    /// Keeps `bytes` as unit `key`'s range starting at `offset`, evicting the least recently
    /// used ranges to stay within the limit.
    pub fn put(&self, key: &str, offset: u64, bytes: Bytes) {
        if bytes.is_empty() || bytes.len() > self.limit {
            return;
        }
        let bytes = crate::file_bytes::detached(bytes);
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.tick += 1;
        let tick = inner.tick;
        let len = bytes.len();
        let ranges = inner.ranges.entry(key.to_string()).or_default();
        if let Some(old) = ranges.insert(offset, Entry { bytes, tick }) {
            inner.order.remove(&old.tick);
            inner.bytes -= old.bytes.len();
        }
        inner.order.insert(tick, (key.to_string(), offset));
        inner.bytes += len;
        while inner.bytes > self.limit {
            let Some((_, (key, offset))) = inner.order.pop_first() else { break };
            if let Some(ranges) = inner.ranges.get_mut(&key) {
                if let Some(old) = ranges.remove(&offset) {
                    inner.bytes -= old.bytes.len();
                }
                if ranges.is_empty() {
                    inner.ranges.remove(&key);
                }
            }
        }
    }

    /// Remembers that unit `key` on `node` could not be read; when the node could not be
    /// reached at all, every unit on it counts failed.
    pub fn mark_failed(&self, node: u32, key: &str, failure: &NodeFailure) {
        let mut inner = self.lock();
        let now = Instant::now();
        inner.failed.retain(|_, (at, _)| now.duration_since(*at) < FAILED_MEMORY);
        inner.failed_nodes.retain(|_, (at, _)| now.duration_since(*at) < FAILED_MEMORY);
        if failure.kind == FailureKind::Unreachable {
            inner.failed_nodes.insert(node, (now, failure.clone()));
        } else {
            inner.failed.insert((node, key.to_string()), (now, failure.clone()));
        }
    }

    /// Why `node` could not be reached, if that happened within [`FAILED_MEMORY`]: reads do
    /// not ask it again meanwhile.
    pub fn node_failed(&self, node: u32) -> Option<NodeFailure> {
        let inner = self.lock();
        let (at, failure) = inner.failed_nodes.get(&node)?;
        (at.elapsed() < FAILED_MEMORY).then(|| failure.clone())
    }

    /// True when unit `key` on `node` was found missing or corrupt within [`FAILED_MEMORY`].
    /// Reads still ask for it (a repair in place makes it good again at once), but keep what
    /// they fetch of its group for the rebuild that will likely follow.
    pub fn unit_failed(&self, node: u32, key: &str) -> bool {
        let inner = self.lock();
        inner
            .failed
            .get(&(node, key.to_string()))
            .is_some_and(|(at, _)| at.elapsed() < FAILED_MEMORY)
    }

    pub fn counters(&self) -> CacheCounters {
        let inner = self.lock();
        CacheCounters { bytes: inner.bytes, entries: inner.order.len(), hit_bytes: inner.hit_bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    #[test]
    fn a_range_inside_a_cached_one_is_served_and_others_are_not() {
        let cache = DegradedCache::new(1 << 20);
        let mut range = vec![0u8; 1000];
        range.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        cache.put("u1", 5000, Bytes::from(range.clone()));
        assert_eq!(cache.get("u1", 5100, 10).as_deref(), Some(&range[100..110]));
        assert_eq!(cache.get("u1", 5000, 1000).as_deref(), Some(&range[..]));
        assert!(cache.get("u1", 4999, 10).is_none(), "starts before the range");
        assert!(cache.get("u1", 5990, 11).is_none(), "ends past the range");
        assert!(cache.get("u2", 5100, 10).is_none(), "another unit");
        assert_eq!(cache.counters().hit_bytes, 1010);
    }

    #[test]
    fn the_least_recently_used_range_goes_first_and_the_limit_holds() {
        let cache = DegradedCache::new(3000);
        cache.put("a", 0, bytes(1000, 1));
        cache.put("b", 0, bytes(1000, 2));
        cache.put("c", 0, bytes(1000, 3));
        assert!(cache.get("a", 0, 1).is_some()); // a is now the most recent
        cache.put("d", 0, bytes(1000, 4));
        assert!(cache.get("b", 0, 1).is_none(), "b was the least recently used");
        for key in ["a", "c", "d"] {
            assert!(cache.get(key, 0, 1).is_some(), "{key} kept");
        }
        assert_eq!(cache.counters().bytes, 3000);
        cache.put("e", 0, bytes(2500, 5));
        assert_eq!(cache.counters().bytes, 2500, "a big range evicts several");
        cache.put("f", 0, bytes(3001, 6));
        assert!(cache.get("f", 0, 1).is_none(), "a range above the limit is not kept");
        assert!(cache.get("e", 0, 1).is_some(), "and evicts nothing");
    }

    #[test]
    fn replacing_a_range_keeps_the_byte_count_right() {
        let cache = DegradedCache::new(10_000);
        cache.put("a", 0, bytes(1000, 1));
        cache.put("a", 0, bytes(2000, 2));
        assert_eq!(cache.counters(), CacheCounters { bytes: 2000, entries: 1, hit_bytes: 0 });
        assert_eq!(cache.get("a", 1500, 1).as_deref(), Some(&[2u8][..]));
    }

    #[test]
    fn a_zero_limit_keeps_nothing() {
        let cache = DegradedCache::new(0);
        cache.put("a", 0, bytes(10, 1));
        assert!(cache.get("a", 0, 1).is_none());
        assert_eq!(cache.counters().bytes, 0);
    }

    #[test]
    fn failures_are_remembered_by_node_and_key() {
        let cache = DegradedCache::new(0);
        let failure = NodeFailure { kind: FailureKind::Missing, cause: "gone".into() };
        cache.mark_failed(3, "u", &failure);
        assert!(cache.unit_failed(3, "u"));
        assert!(cache.node_failed(3).is_none(), "a missing unit says nothing of its node");
        assert!(!cache.unit_failed(4, "u"), "the same unit moved to another node");
        assert!(!cache.unit_failed(3, "v"));
        let down = NodeFailure { kind: FailureKind::Unreachable, cause: "refused".into() };
        cache.mark_failed(5, "w", &down);
        assert_eq!(cache.node_failed(5).map(|f| f.cause), Some("refused".into()));
    }
}
