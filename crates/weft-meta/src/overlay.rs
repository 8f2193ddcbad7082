//! Changes kept in memory above a backend's committed state.
//!
//! - redb ([`crate::RedbStore`]): the changes logged in the redo log since the last
//!   checkpoint (the store's *pending* overlay), above the tree file, and a write
//!   transaction's own changes (its *local* overlay) above those. A redb commit, even
//!   without its fsync, costs some 200 µs of page copying and allocator bookkeeping whatever
//!   it holds, while hundreds of transactions applied in one commit cost ~50 µs each: so a
//!   write is durable once its redo record is (`redb_log`), visible once its changes join the
//!   pending overlay, and reaches the tree file with many others at the next checkpoint.
//! - PostgreSQL ([`crate::PgStore`]): a write transaction's own changes, sent to the server
//!   together with its COMMIT (one round trip instead of one per change).
//!
//! Invariants:
//! - An overlay maps each (table, key) it holds to the key's newest value, or to its removal;
//!   a key it does not hold is whatever the layer below says. A view is a stack of layers,
//!   newest first, over a snapshot of the tree file: a read answers from the first layer that
//!   holds the key.
//! - redb's pending overlay holds exactly the changes of the redo log's records since the
//!   last checkpoint, applied in order: the tree file plus the pending overlay is the store's
//!   state, and a reopen (tree file plus replayed log) rebuilds the same state.
//! - A removal may be *blind* (`remove_many`: the key may not exist below); it then changes
//!   nothing, in a read, a count or when applied.
//! - Keys of one table are ordered by their [`Key::encode`] bytes, as redb orders its typed
//!   keys (`kv`'s invariant), so a range merged from the layers and the committed entries is
//!   in the order of the keys; a range is merged lazily and reads no further than its limit
//!   needs.

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

use crate::kv::{End, Entry, Key, Table};
use crate::redb_log::Changes;
use crate::MetaError;

/// One key's newest state in an overlay.
#[derive(Debug, Clone)]
struct Slot {
    key: Key,
    /// `None`: removed.
    value: Option<Vec<u8>>,
}

/// Changes above the tree file, by table and encoded key (see the module's invariants).
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    tables: [BTreeMap<Vec<u8>, Slot>; Table::ALL.len()],
}

/// A layer's answer for a key: not held (look below), removed, or a value.
pub(crate) enum Found<'a> {
    Below,
    Removed,
    Value(&'a [u8]),
}

impl Overlay {
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.iter().all(BTreeMap::is_empty)
    }

    pub(crate) fn get(&self, table: Table, encoded: &[u8]) -> Found<'_> {
        match self.tables[table.index()].get(encoded) {
            None => Found::Below,
            Some(Slot { value: None, .. }) => Found::Removed,
            Some(Slot { value: Some(value), .. }) => Found::Value(value),
        }
    }

    /// Sets `key` of `table` to `value` (`None`: removed).
    pub(crate) fn set(&mut self, table: Table, key: &Key, value: Option<Vec<u8>>) {
        self.tables[table.index()].insert(key.encode(), Slot { key: key.clone(), value });
    }

    /// Takes every change of `newer` (a later transaction's) over this overlay's.
    pub(crate) fn absorb(&mut self, newer: Overlay) {
        for (mine, theirs) in self.tables.iter_mut().zip(newer.tables) {
            if mine.is_empty() {
                *mine = theirs;
            } else {
                mine.extend(theirs);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = Overlay::default();
    }

    /// The changes as one redo record's payload.
    pub(crate) fn changes(&self) -> Changes {
        let mut changes = Changes::default();
        for table in Table::ALL {
            for (encoded, value) in self.encoded_changes_of(table) {
                changes.push(table, encoded, value);
            }
        }
        changes
    }

    /// How many changes of `table` it holds.
    pub(crate) fn changes_in(&self, table: Table) -> usize {
        self.tables[table.index()].len()
    }

    /// Each change of `table`, in key order: the encoded key and its value (`None`: removed).
    pub(crate) fn encoded_changes_of(
        &self,
        table: Table,
    ) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.tables[table.index()].iter().map(|(k, slot)| (k.as_slice(), slot.value.as_deref()))
    }

    /// Each change of `table`, in key order: the key and its value (`None`: removed).
    pub(crate) fn changes_of(&self, table: Table) -> impl Iterator<Item = (&Key, Option<&[u8]>)> {
        self.tables[table.index()].values().map(|slot| (&slot.key, slot.value.as_deref()))
    }

    fn range_from<'a>(
        &'a self,
        table: Table,
        lower: &'a Bound<Vec<u8>>,
    ) -> impl Iterator<Item = (&'a [u8], &'a Slot)> + 'a {
        let lower = match lower {
            Bound::Included(k) => Bound::Included(k.as_slice()),
            Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.tables[table.index()]
            .range::<[u8], _>((lower, Bound::Unbounded))
            .map(|(k, slot)| (k.as_slice(), slot))
    }
}

/// One layer's changes of a table, in key order.
type LayerChanges<'a> = Peekable<Box<dyn Iterator<Item = (&'a [u8], &'a Slot)> + 'a>>;

/// A stack of overlays, newest first.
#[derive(Clone, Copy)]
pub(crate) struct Layers<'a>(pub(crate) &'a [&'a Overlay]);

impl<'a> Layers<'a> {
    /// The first layer's answer that is not [`Found::Below`].
    pub(crate) fn get(&self, table: Table, key: &Key) -> Found<'a> {
        if self.none_of(table) {
            return Found::Below;
        }
        let encoded = key.encode();
        for layer in self.0 {
            match layer.get(table, &encoded) {
                Found::Below => continue,
                found => return found,
            }
        }
        Found::Below
    }

    /// The layers' changes of `table` merged (newest wins), in key order.
    fn merged(
        &self,
        table: Table,
        lower: &'a Bound<Vec<u8>>,
    ) -> impl Iterator<Item = (&'a [u8], &'a Slot)> + 'a {
        let mut heads: Vec<LayerChanges<'a>> = self
            .0
            .iter()
            .map(|layer| {
                let it: Box<dyn Iterator<Item = (&'a [u8], &'a Slot)> + 'a> =
                    Box::new(layer.range_from(table, lower));
                it.peekable()
            })
            .collect();
        std::iter::from_fn(move || {
            let least = heads.iter_mut().filter_map(|h| h.peek().map(|(k, _)| *k)).min()?;
            // The newest layer holding the least key answers; the others' entry is older.
            let mut chosen = None;
            for head in &mut heads {
                if head.peek().is_some_and(|(k, _)| *k == least) {
                    let entry = head.next().expect("peeked");
                    chosen.get_or_insert(entry);
                }
            }
            chosen
        })
    }

    /// Whether no layer holds a change of `table`.
    fn none_of(&self, table: Table) -> bool {
        self.0.iter().all(|layer| layer.tables[table.index()].is_empty())
    }

    /// Entries of `table` from `lower` up to `end`, at most `limit`, in key order: the
    /// layers over `base` (the committed entries from `lower` on, in key order; at least
    /// `limit` plus the layers' changes of `table` of them, or all there are).
    pub(crate) fn range(
        &self,
        table: Table,
        mut base: impl Iterator<Item = Result<Entry, MetaError>>,
        lower: Bound<&Key>,
        end: End<'_>,
        limit: usize,
    ) -> Result<Vec<Entry>, MetaError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        if self.none_of(table) {
            for entry in base {
                let entry = entry?;
                if !end.admits(&entry.0) {
                    break;
                }
                out.push(entry);
                if out.len() == limit {
                    break;
                }
            }
            return Ok(out);
        }
        let lower = match lower {
            Bound::Included(key) => Bound::Included(key.encode()),
            Bound::Excluded(key) => Bound::Excluded(key.encode()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut above = self.merged(table, &lower).peekable();
        // Keys of one table order as their encodings do (`kv`), so the tree file's keys are
        // compared as keys, not encoded.
        let mut below = base.next().transpose()?;
        loop {
            let from_above = match (above.peek(), &below) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((_, slot)), Some((key, _))) => slot.key <= *key,
            };
            let (key, value) = if from_above {
                let (_, slot) = above.next().expect("peeked");
                if below.as_ref().is_some_and(|(key, _)| *key == slot.key) {
                    below = base.next().transpose()?; // Shadowed by the change.
                }
                match &slot.value {
                    Some(value) => (slot.key.clone(), value.clone()),
                    None => {
                        if !end.admits(&slot.key) {
                            break;
                        }
                        continue;
                    }
                }
            } else {
                let entry = below.take().expect("compared");
                below = base.next().transpose()?;
                entry
            };
            if !end.admits(&key) {
                break;
            }
            out.push((key, value));
            if out.len() == limit {
                break;
            }
        }
        Ok(out)
    }

    /// How many keys of `table` the layers add (positive) or remove (negative) from the tree
    /// file's, `in_base` telling whether the tree file holds a key.
    pub(crate) fn count_delta(
        &self,
        table: Table,
        mut in_base: impl FnMut(&Key) -> Result<bool, MetaError>,
    ) -> Result<i64, MetaError> {
        let mut delta = 0;
        for (_, slot) in self.merged(table, &Bound::Unbounded) {
            match (slot.value.is_some(), in_base(&slot.key)?) {
                (true, false) => delta += 1,
                (false, true) => delta -= 1,
                _ => {}
            }
        }
        Ok(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> Key {
        Key::name(n)
    }

    fn base(entries: &[(&str, &str)]) -> impl Iterator<Item = Result<Entry, MetaError>> {
        entries
            .iter()
            .map(|(k, v)| Ok((name(k), v.as_bytes().to_vec())))
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn names(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|(k, v)| match k {
                Key::Name(n) => format!("{n}={}", String::from_utf8_lossy(v)),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_newest_layer_answers_and_removals_hide_the_tree_file() {
        let mut pending = Overlay::default();
        pending.set(Table::Buckets, &name("b"), Some(b"pending".to_vec()));
        pending.set(Table::Buckets, &name("d"), None);
        pending.set(Table::Buckets, &name("e"), Some(b"pending".to_vec()));
        let mut local = Overlay::default();
        local.set(Table::Buckets, &name("b"), None);
        local.set(Table::Buckets, &name("c"), Some(b"local".to_vec()));
        local.set(Table::Buckets, &name("e"), Some(b"local".to_vec()));
        let layers = [&local, &pending];
        let layers = Layers(&layers);
        let tree = [("a", "tree"), ("b", "tree"), ("d", "tree"), ("f", "tree")];
        let all =
            layers.range(Table::Buckets, base(&tree), Bound::Unbounded, End::Open, 100).unwrap();
        assert_eq!(names(&all), ["a=tree", "c=local", "e=local", "f=tree"]);
        // Limits and bounds cut the merged order, not each source's.
        let two = layers
            .range(Table::Buckets, base(&tree[1..]), Bound::Excluded(&name("a")), End::Open, 2)
            .unwrap();
        assert_eq!(names(&two), ["c=local", "e=local"]);
        let before = layers
            .range(Table::Buckets, base(&tree), Bound::Unbounded, End::Before(&name("e")), 100)
            .unwrap();
        assert_eq!(names(&before), ["a=tree", "c=local"]);
        assert!(matches!(layers.get(Table::Buckets, &name("b")), Found::Removed));
        assert!(matches!(layers.get(Table::Buckets, &name("a")), Found::Below));
        assert!(matches!(layers.get(Table::Objects, &name("e")), Found::Below));
        let in_tree = |k: &Key| Ok(tree.iter().any(|(t, _)| name(t) == *k));
        // b and d removed, c and e new: 4 - 2 + 2 keys.
        assert_eq!(layers.count_delta(Table::Buckets, in_tree).unwrap(), 0);
        assert_eq!(Layers(&[&pending]).count_delta(Table::Buckets, in_tree).unwrap(), 0);
        assert_eq!(Layers(&[&local]).count_delta(Table::Buckets, in_tree).unwrap(), 1);
        let mut only_new = Overlay::default();
        only_new.set(Table::Buckets, &name("z"), Some(vec![]));
        assert_eq!(Layers(&[&only_new]).count_delta(Table::Buckets, in_tree).unwrap(), 1);
    }

    #[test]
    fn absorbing_keeps_the_newer_change() {
        let mut pending = Overlay::default();
        pending.set(Table::Nodes, &Key::Node(1), Some(vec![1]));
        pending.set(Table::Nodes, &Key::Node(2), Some(vec![2]));
        let mut newer = Overlay::default();
        newer.set(Table::Nodes, &Key::Node(2), None);
        newer.set(Table::Nodes, &Key::Node(3), Some(vec![3]));
        pending.absorb(newer);
        let held: Vec<_> = pending
            .changes_of(Table::Nodes)
            .map(|(k, v)| (k.clone(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(
            held,
            [(Key::Node(1), Some(vec![1])), (Key::Node(2), None), (Key::Node(3), Some(vec![3]))]
        );
        assert!(!pending.changes().is_empty());
        pending.clear();
        assert!(pending.is_empty());
        assert!(Table::ALL.iter().enumerate().all(|(i, t)| t.index() == i));
    }
}
