//! [`Overlay`]: a store as a transaction sees it. Writes go into memory, not into the store;
//! reads merge them over the store's entries, so the transaction reads what it wrote while
//! nobody else does. At COMMIT the writes leave as one batch ([`Overlay::take_batch`]); at
//! ROLLBACK they are dropped with the overlay. A savepoint is a copy of the writes so far
//! ([`Overlay::save`], [`Overlay::restore`]).
//!
//! The writes are kept as [`HeldWrites`], whose net-effect and merge rules (the last value of a
//! key wins, range deletes hide the store's keys but not entries written after them) are the
//! ones a transaction needs too. The store underneath goes on changing with others' commits:
//! reads see those, except where the transaction wrote (read committed, as in PostgreSQL).
//!
//! Owned by `catalog::transaction::Transaction`; read and written through [`StateStore`] by the
//! same code that reads and writes tables outside a transaction.

use std::sync::Arc;

use parking_lot::RwLock;

use super::held_writes::{Held, HeldWrites};
use super::store::{KeyRange, ScanControl, StateStore, Visitor, WriteBatch};
use crate::error::Result;

pub struct Overlay {
    base: Arc<dyn StateStore>,
    writes: RwLock<HeldWrites>,
}

impl Overlay {
    pub fn new(base: Arc<dyn StateStore>) -> Overlay {
        Overlay { base, writes: RwLock::new(HeldWrites::new(0)) }
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.read().is_empty()
    }

    /// The writes so far, for a savepoint.
    pub fn save(&self) -> HeldWrites {
        self.writes.read().clone()
    }

    /// Back to the writes `saved` (ROLLBACK TO SAVEPOINT).
    pub fn restore(&self, saved: HeldWrites) {
        *self.writes.write() = saved;
    }

    /// Every write, as one batch for the store (through its write-ahead log); the overlay is
    /// left empty.
    pub fn take_batch(&self) -> WriteBatch {
        let writes = std::mem::replace(&mut *self.writes.write(), HeldWrites::new(0));
        WriteBatch { skip_wal: false, ..writes.into_batch() }
    }

    fn merged_scan(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>, fill_cache: bool) -> Result<()> {
        for range in ranges {
            let mut cursor = self.writes.read().cursor(range);
            let mut stopped = false;
            let mut merge = |k: &[u8], v: &[u8]| -> Result<ScanControl> {
                if cursor.visit_below(Some(k), visit)? == ScanControl::Stop {
                    stopped = true;
                    return Ok(ScanControl::Stop);
                }
                let control = match cursor.at(k) {
                    Held::Value(mine) => visit(k, mine)?,
                    Held::Deleted => ScanControl::Continue,
                    Held::NotHeld => visit(k, v)?,
                };
                stopped = control == ScanControl::Stop;
                Ok(control)
            };
            let one = std::slice::from_ref(range);
            if fill_cache {
                self.base.scan_ranges(one, &mut merge)?;
            } else {
                self.base.scan_ranges_once(one, &mut merge)?;
            }
            drop(merge);
            if stopped || cursor.visit_below(None, visit)? == ScanControl::Stop {
                return Ok(());
            }
        }
        Ok(())
    }
}

impl StateStore for Overlay {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.writes.read().lookup(key) {
            Held::Value(v) => Ok(Some(v.to_vec())),
            Held::Deleted => Ok(None),
            Held::NotHeld => self.base.get(key),
        }
    }

    fn scan_ranges(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        self.merged_scan(ranges, visit, true)
    }

    fn scan_ranges_once(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        self.merged_scan(ranges, visit, false)
    }

    /// Into the overlay, never into the store.
    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.writes.write().apply(batch.ops);
        Ok(())
    }

    fn last_key(&self, range: &KeyRange) -> Result<Option<Vec<u8>>> {
        // The store's last key the transaction did not delete, or its own last, whichever is
        // greater: walk the store's keys down from the end while they are deleted here.
        let writes = self.writes.read();
        let mut end = range.end.clone();
        let stored = loop {
            let Some(key) = self.base.last_key(&KeyRange { start: range.start.clone(), end: end.clone() })? else {
                break None;
            };
            if writes.lookup(&key) != Held::Deleted {
                break Some(key);
            }
            end = Some(key);
        };
        Ok(stored.max(writes.last_key(range)))
    }

    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let writes = self.writes.read();
        let mut values = vec![None; keys.len()];
        let mut stored = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match writes.lookup(key) {
                Held::Value(v) => values[i] = Some(v.to_vec()),
                Held::Deleted => {}
                Held::NotHeld => stored.push(i),
            }
        }
        let read: Vec<Vec<u8>> = stored.iter().map(|&i| keys[i].clone()).collect();
        for (i, value) in stored.into_iter().zip(self.base.multi_get(&read)?) {
            values[i] = value;
        }
        Ok(values)
    }

    fn approximate_range_bytes(&self, start: &[u8], end: &[u8]) -> u64 {
        self.base.approximate_range_bytes(start, end)
    }

    fn approximate_bytes(&self) -> u64 {
        self.base.approximate_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    use crate::state::store::entries_in as entries;

    fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn the_transaction_reads_its_writes_over_the_store_and_nobody_else_does() {
        let base: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let mut wb = WriteBatch::default();
        for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
            wb.put(k.into(), v.into());
        }
        base.write(wb).unwrap();
        let overlay = Overlay::new(Arc::clone(&base));
        let mut wb = WriteBatch::default();
        wb.put("b".into(), "20".into());
        wb.delete("c".into());
        wb.put("d".into(), "4".into());
        overlay.write(wb).unwrap();
        assert_eq!(entries(&overlay, b"a", b"z"), [kv("a", "1"), kv("b", "20"), kv("d", "4")]);
        assert_eq!(entries(base.as_ref(), b"a", b"z"), [kv("a", "1"), kv("b", "2"), kv("c", "3")]);
        assert_eq!(overlay.get(b"c").unwrap(), None);
        assert_eq!(
            overlay.multi_get(&[b"a".to_vec(), b"c".to_vec(), b"d".to_vec()]).unwrap(),
            [Some(b"1".to_vec()), None, Some(b"4".to_vec())]
        );
        let range = KeyRange { start: b"a".to_vec(), end: Some(b"d".to_vec()) };
        assert_eq!(overlay.last_key(&range).unwrap(), Some(b"b".to_vec()), "c is deleted here");
        // A savepoint, a write after it, and back.
        let saved = overlay.save();
        let mut wb = WriteBatch::default();
        wb.delete_range(b"a".to_vec(), b"z".to_vec());
        overlay.write(wb).unwrap();
        assert!(entries(&overlay, b"a", b"z").is_empty());
        overlay.restore(saved);
        assert_eq!(entries(&overlay, b"a", b"z").len(), 3);
        // COMMIT: the net effect goes to the store in one batch.
        base.write(overlay.take_batch()).unwrap();
        assert!(overlay.is_empty());
        assert_eq!(entries(base.as_ref(), b"a", b"z"), [kv("a", "1"), kv("b", "20"), kv("d", "4")]);
    }

    #[test]
    fn a_scan_that_stops_stops_in_the_overlay_too() {
        let base: Arc<dyn StateStore> = Arc::new(MemoryStore::default());
        let mut wb = WriteBatch::default();
        wb.put("b".into(), "2".into());
        base.write(wb).unwrap();
        let overlay = Overlay::new(base);
        let mut wb = WriteBatch::default();
        wb.put("a".into(), "1".into());
        wb.put("c".into(), "3".into());
        overlay.write(wb).unwrap();
        let mut seen = Vec::new();
        let range = KeyRange { start: Vec::new(), end: None };
        overlay
            .scan_ranges(&[range], &mut |k, _| {
                seen.push(k.to_vec());
                Ok(if seen.len() == 2 { ScanControl::Stop } else { ScanControl::Continue })
            })
            .unwrap();
        assert_eq!(seen, [b"a".to_vec(), b"b".to_vec()]);
    }
}
