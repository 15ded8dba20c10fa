//! [`HeldWrites`]: the view writes of epochs after a checkpoint's cut, kept in memory until the
//! checkpoint's snapshot is taken, so that barriers need not wait for it (ADR 18).
//!
//! A checkpoint `e`'s snapshot must hold every view exactly at `e`. Instead of holding barrier
//! `e + 1` back until the snapshot is taken, the store is told the cut (`e`) when barrier `e`
//! is injected; from then until the snapshot is taken, a view's commit of an epoch after `e`
//! (a batch with [`super::store::WriteBatch::epoch`] `> e`) is applied here instead of to the store, and
//! reads see it. Once the snapshot is taken the held writes go into the store in one batch
//! ([`HeldWrites::entries`]). Writes without an epoch (tables, the change log, sources, the
//! catalog) go to the store at once, as always: a snapshot may hold table writes of later
//! epochs, which recovery expects (ADR 11 item 8).
//!
//! Invariants: the held writes are the net effect of the held batches in the order they came:
//! `entries` maps a key to its last value (None: deleted) and `ranges` are the range deletes,
//! which hide the store's keys but not entries written after them (a range delete removes the
//! entries it covers). A write that goes to the store while writes are held and touches a key
//! they shadow is copied in here too ([`HeldWrites::apply_direct`]), so neither a read nor the
//! final batch puts an older held value over it.
//!
//! Callers: [`super::rocks::RocksStore`], which owns one while a cut is open, and
//! [`super::overlay::Overlay`] (a transaction's writes, not yet made).

use std::collections::BTreeMap;
use std::ops::Bound;

use super::store::{KeyRange, ScanControl, Value, Visitor, WriteOp};
use crate::error::Result;
use crate::types::Epoch;

/// What the held writes say of one key.
#[derive(Debug, PartialEq, Eq)]
pub enum Held<'a> {
    Value(&'a [u8]),
    Deleted,
    /// Nothing held: the store's value stands.
    NotHeld,
}

#[derive(Debug, Clone)]
pub struct HeldWrites {
    /// The checkpoint epoch whose snapshot is awaited: writes of later epochs are held.
    pub cut: Epoch,
    /// Every view has committed the cut (so committers may be made to wait).
    pub aligned: bool,
    entries: BTreeMap<Vec<u8>, Option<Value>>,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: usize,
}

impl HeldWrites {
    pub fn new(cut: Epoch) -> HeldWrites {
        HeldWrites { cut, aligned: false, entries: BTreeMap::new(), ranges: Vec::new(), bytes: 0 }
    }

    /// Whether a batch of `epoch` is held rather than written (a view's commit after the cut).
    pub fn holds_epoch(&self, epoch: Option<Epoch>) -> bool {
        epoch.is_some_and(|e| e > self.cut)
    }

    /// Roughly the memory the held writes take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.ranges.is_empty()
    }

    /// Takes a held batch's writes, in order.
    pub fn apply(&mut self, ops: Vec<WriteOp>) {
        for op in ops {
            match op {
                WriteOp::Put(k, v) => self.set(k, Some(v)),
                WriteOp::Delete(k) => self.set(k, None),
                WriteOp::DeleteRange(start, end) => {
                    self.remove_range(&start, &end);
                    self.bytes += start.len() + end.len();
                    self.ranges.push((start, end));
                }
            }
        }
    }

    /// A batch written to the store while writes are held: a key it writes that the held
    /// writes shadow gets the same write here, so the held value does not hide it now or
    /// overwrite it when the held writes go in; a range it deletes is dropped from the entries.
    pub fn apply_direct(&mut self, ops: &[WriteOp]) {
        if self.is_empty() {
            return;
        }
        for op in ops {
            match op {
                WriteOp::Put(k, v) if self.shadows(k) => self.set(k.clone(), Some(v.clone())),
                WriteOp::Delete(k) if self.shadows(k) => self.set(k.clone(), None),
                WriteOp::DeleteRange(start, end) => self.remove_range(start, end),
                _ => {}
            }
        }
    }

    /// Whether a write to the store of `ops` would touch what is held (and must also be
    /// applied here: [`HeldWrites::apply_direct`]).
    pub fn shadows_any(&self, ops: &[WriteOp]) -> bool {
        if self.is_empty() {
            return false;
        }
        ops.iter().any(|op| match op {
            WriteOp::Put(k, _) | WriteOp::Delete(k) => self.shadows(k),
            WriteOp::DeleteRange(start, end) => self
                .entries
                .range::<[u8], _>((Bound::Included(start.as_slice()), Bound::Excluded(end.as_slice())))
                .next()
                .is_some(),
        })
    }

    fn shadows(&self, key: &[u8]) -> bool {
        self.entries.contains_key(key) || self.masks(key)
    }

    fn set(&mut self, key: Vec<u8>, value: Option<Value>) {
        let added = key.len() + value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD;
        if let Some(old) = self.entries.insert(key.clone(), value) {
            self.bytes -= key.len() + old.map_or(0, |v| v.len()) + ENTRY_OVERHEAD;
        }
        self.bytes += added;
    }

    /// Drops the entries in `[start, end)`.
    fn remove_range(&mut self, start: &[u8], end: &[u8]) {
        if end <= start {
            return;
        }
        let covered: Vec<Vec<u8>> = self
            .entries
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in covered {
            self.remove(&k);
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= key.len() + old.map_or(0, |v| v.len()) + ENTRY_OVERHEAD;
        }
    }

    /// Whether a range delete held here hides the store's `key`.
    pub fn masks(&self, key: &[u8]) -> bool {
        self.ranges.iter().any(|(s, e)| key >= s.as_slice() && key < e.as_slice())
    }

    pub fn lookup(&self, key: &[u8]) -> Held<'_> {
        match self.entries.get(key) {
            Some(Some(v)) => Held::Value(v),
            Some(None) => Held::Deleted,
            None if self.masks(key) => Held::Deleted,
            None => Held::NotHeld,
        }
    }

    /// The held entries in `range`: none for an empty range (a read's conditions may make one,
    /// `g BETWEEN 4 AND -1`, which `BTreeMap::range` would not take).
    fn entries_in(&self, range: &KeyRange) -> std::collections::btree_map::Range<'_, Vec<u8>, Option<Value>> {
        let end = match &range.end {
            Some(end) if end.as_slice() <= range.start.as_slice() => return self.entries.range(Vec::new()..Vec::new()),
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        self.entries.range::<[u8], _>((Bound::Included(range.start.as_slice()), end))
    }

    /// The greatest key in `range` that the held writes put.
    pub fn last_key(&self, range: &KeyRange) -> Option<Vec<u8>> {
        self.entries_in(range).rev().find(|(_, v)| v.is_some()).map(|(k, _)| k.clone())
    }

    /// The held entries of `range` and the range deletes, to merge with a scan of the store
    /// taken at the same moment.
    pub fn cursor(&self, range: &KeyRange) -> HeldCursor {
        let entries = self.entries_in(range).map(|(k, v)| (k.clone(), v.clone())).collect();
        let ranges = self
            .ranges
            .iter()
            .filter(|(s, e)| range.end.as_ref().is_none_or(|end| s < end) && e.as_slice() > range.start.as_slice())
            .cloned()
            .collect();
        HeldCursor { entries, next: 0, ranges }
    }

    /// The held range deletes, to be written before [`HeldWrites::entries`] (every entry a
    /// range delete covered was written after it).
    pub fn ranges(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.ranges.iter().map(|(start, end)| (start.as_slice(), end.as_slice()))
    }

    /// The held keys in order with their last value (None: deleted).
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.entries.iter().map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// The held writes as one batch: their net effect.
    pub fn into_batch(self) -> super::store::WriteBatch {
        let mut wb = super::store::WriteBatch { skip_wal: true, ..Default::default() };
        self.ranges().for_each(|(start, end)| wb.delete_range(start.to_vec(), end.to_vec()));
        for (k, v) in self.entries() {
            match v {
                Some(v) => wb.put(k.to_vec(), v.to_vec()),
                None => wb.delete(k.to_vec()),
            }
        }
        wb
    }
}

/// A map entry's bookkeeping, roughly (node, pointers, vector headers).
const ENTRY_OVERHEAD: usize = 64;

/// The held writes of one scanned range, merged into the store's entries in key order.
pub struct HeldCursor {
    entries: Vec<(Vec<u8>, Option<Value>)>,
    next: usize,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

impl HeldCursor {
    /// Gives `visit` the held values with keys below `bound` (None: all that are left).
    pub fn visit_below(&mut self, bound: Option<&[u8]>, visit: &mut Visitor<'_>) -> Result<ScanControl> {
        while let Some((k, v)) = self.entries.get(self.next) {
            if bound.is_some_and(|b| k.as_slice() >= b) {
                break;
            }
            self.next += 1;
            if let Some(v) = v {
                if visit(k, v)? == ScanControl::Stop {
                    return Ok(ScanControl::Stop);
                }
            }
        }
        Ok(ScanControl::Continue)
    }

    /// The store's entry at `key`, after [`HeldCursor::visit_below`]`(key)`: what to give the
    /// visitor instead (`Held::Value`), nothing (`Deleted`), or the store's value (`NotHeld`).
    pub fn at(&mut self, key: &[u8]) -> Held<'_> {
        if let Some((k, v)) = self.entries.get(self.next) {
            if k.as_slice() == key {
                self.next += 1;
                return match v {
                    Some(v) => Held::Value(v),
                    None => Held::Deleted,
                };
            }
        }
        if self.ranges.iter().any(|(s, e)| key >= s.as_slice() && key < e.as_slice()) {
            Held::Deleted
        } else {
            Held::NotHeld
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: &[u8], end: &[u8]) -> KeyRange {
        KeyRange { start: start.to_vec(), end: Some(end.to_vec()) }
    }

    /// Merges `store` (sorted) with the held writes over `r`, as `RocksStore` does.
    fn merged(held: &HeldWrites, store: &[(&[u8], &[u8])], r: &KeyRange) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut visit = |k: &[u8], v: &[u8]| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(ScanControl::Continue)
        };
        let mut cursor = held.cursor(r);
        for (k, v) in store.iter().filter(|(k, _)| r.contains(k)) {
            cursor.visit_below(Some(k), &mut visit).unwrap();
            match cursor.at(k) {
                Held::Value(h) => {
                    let h = h.to_vec();
                    visit(k, &h).unwrap();
                }
                Held::Deleted => {}
                Held::NotHeld => {
                    visit(k, v).unwrap();
                }
            }
        }
        cursor.visit_below(None, &mut visit).unwrap();
        out
    }

    /// A read whose conditions leave an empty key range (`g BETWEEN 4 AND -1`) while writes
    /// are held reads nothing, as it does from the store, instead of panicking.
    #[test]
    fn an_empty_range_reads_nothing_while_writes_are_held() {
        let mut held = HeldWrites::new(5);
        held.apply(vec![WriteOp::Put(b"c".to_vec(), b"1".to_vec().into())]);
        let inverted = range(b"d", b"b");
        assert_eq!(held.last_key(&inverted), None);
        assert_eq!(merged(&held, &[(b"c", b"s")], &inverted), vec![]);
        assert_eq!(merged(&held, &[], &range(b"c", b"c")), vec![]);
        held.apply(vec![WriteOp::DeleteRange(b"d".to_vec(), b"b".to_vec())]);
        assert_eq!(held.lookup(b"c"), Held::Value(b"1"));
    }

    #[test]
    fn held_writes_override_the_store_in_order() {
        let mut held = HeldWrites::new(5);
        assert!(!held.holds_epoch(Some(5)) && held.holds_epoch(Some(6)) && !held.holds_epoch(None));
        held.apply(vec![
            WriteOp::Put(b"a".to_vec(), b"1".to_vec().into()),
            WriteOp::Put(b"c".to_vec(), b"old".to_vec().into()),
            WriteOp::DeleteRange(b"b".to_vec(), b"d".to_vec()),
            WriteOp::Put(b"c2".to_vec(), b"new".to_vec().into()),
            WriteOp::Delete(b"e".to_vec()),
        ]);
        assert_eq!(held.lookup(b"a"), Held::Value(b"1"));
        assert_eq!(held.lookup(b"c"), Held::Deleted, "the range delete came after the put");
        assert_eq!(held.lookup(b"c2"), Held::Value(b"new"), "written after the range delete");
        assert_eq!(held.lookup(b"bz"), Held::Deleted, "a store key under the range delete");
        assert_eq!(held.lookup(b"e"), Held::Deleted);
        assert_eq!(held.lookup(b"f"), Held::NotHeld);
        let store: Vec<(&[u8], &[u8])> = vec![(b"a", b"s"), (b"b1", b"s"), (b"c", b"s"), (b"e", b"s"), (b"f", b"s")];
        let all = merged(&held, &store, &range(b"", b"z"));
        let expected: Vec<(Vec<u8>, Vec<u8>)> =
            vec![(b"a".to_vec(), b"1".to_vec()), (b"c2".to_vec(), b"new".to_vec()), (b"f".to_vec(), b"s".to_vec())];
        assert_eq!(all, expected);
        // The batch, applied over the store, gives what the reads gave.
        let mut map: BTreeMap<Vec<u8>, Vec<u8>> = store.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        for op in held.into_batch().ops {
            match op {
                WriteOp::Put(k, v) => {
                    map.insert(k, v.into_vec());
                }
                WriteOp::Delete(k) => {
                    map.remove(&k);
                }
                WriteOp::DeleteRange(s, e) => map.retain(|k, _| !(k >= &s && k < &e)),
            }
        }
        assert_eq!(map.into_iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn a_direct_write_is_not_overwritten_by_an_older_held_one() {
        let mut held = HeldWrites::new(1);
        held.apply(vec![
            WriteOp::Put(b"k".to_vec(), b"held".to_vec().into()),
            WriteOp::DeleteRange(b"r".to_vec(), b"s".to_vec()),
        ]);
        held.apply_direct(&[
            WriteOp::Delete(b"k".to_vec()),
            WriteOp::Put(b"r1".to_vec(), b"direct".to_vec().into()),
            WriteOp::Put(b"x".to_vec(), b"unrelated".to_vec().into()),
        ]);
        assert_eq!(held.lookup(b"k"), Held::Deleted);
        assert_eq!(held.lookup(b"r1"), Held::Value(b"direct"), "the held range delete must not hide it");
        assert_eq!(held.lookup(b"x"), Held::NotHeld, "a key the held writes do not shadow stays out");
        let batch = held.into_batch();
        let last_r1 = batch.ops.iter().rposition(|op| op.key() == b"r1").unwrap();
        let range = batch.ops.iter().position(|op| matches!(op, WriteOp::DeleteRange(..))).unwrap();
        assert!(range < last_r1, "the direct value is written after the range delete");
    }

    #[test]
    fn a_scan_stops_where_the_visitor_says() {
        let mut held = HeldWrites::new(0);
        held.apply(vec![
            WriteOp::Put(b"a".to_vec(), b"1".to_vec().into()),
            WriteOp::Put(b"b".to_vec(), b"2".to_vec().into()),
        ]);
        let mut seen = 0;
        let mut cursor = held.cursor(&range(b"", b"z"));
        let control = cursor
            .visit_below(None, &mut |_, _| {
                seen += 1;
                Ok(ScanControl::Stop)
            })
            .unwrap();
        assert_eq!((control, seen), (ScanControl::Stop, 1));
        assert!(held.bytes() > 0);
    }
}
