//! An in-memory [`StateStore`] over a `BTreeMap`, for unit tests of the layers above the store.
//! Same contract as RocksDB except durability.

use std::collections::BTreeMap;
use std::ops::Bound;

use parking_lot::RwLock;

use super::store::{KeyRange, ScanControl, StateStore, Visitor, WriteBatch, WriteOp};
use crate::error::Result;

#[derive(Default)]
pub struct MemoryStore {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl StateStore for MemoryStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map.read().get(key).cloned())
    }

    fn scan_ranges(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        let map = self.map.read();
        for range in ranges {
            for (k, v) in map.range::<[u8], _>((Bound::Included(range.start.as_slice()), Bound::Unbounded)) {
                if !range.contains(k) {
                    break;
                }
                if visit(k, v)? == ScanControl::Stop {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn last_key(&self, range: &KeyRange) -> Result<Option<Vec<u8>>> {
        let map = self.map.read();
        let end = match &range.end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        Ok(map.range::<[u8], _>((Bound::Included(range.start.as_slice()), end)).next_back().map(|(k, _)| k.clone()))
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        let mut map = self.map.write();
        for op in batch.ops {
            match op {
                WriteOp::Put(k, v) => {
                    map.insert(k, v.into_vec());
                }
                WriteOp::Delete(k) => {
                    map.remove(&k);
                }
                WriteOp::DeleteRange(start, end) => {
                    let doomed: Vec<Vec<u8>> = map
                        .range::<[u8], _>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in doomed {
                        map.remove(&k);
                    }
                }
            }
        }
        Ok(())
    }
}
