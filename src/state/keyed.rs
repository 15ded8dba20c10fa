//! [`KeyedState`]: an operator's state as ordered byte keys and values in the store, with a
//! bounded cache in front.
//!
//! Keys are stored as `[table id][vnode][key]`, where the vnode is the hash of the key's
//! *distribution prefix* (the join key, the group key), so that every entry sharing that prefix
//! sits together in one vnode and [`KeyedState::scan_prefix`] is one range read.
//!
//! Writes stay in `pending` until [`KeyedState::flush`] moves them into an epoch's write batch;
//! reads see them. A durable table's writes are flushed at every epoch. A table the view
//! rebuilds at start ([`KeyedState::write_back`]: all operator state but the late-rows ledger)
//! need not be in the store at an epoch's end, so it is *write-back*: its writes stay in memory
//! across epochs and go to the store only when more than `capacity` are pending, and a key
//! written and deleted again before then, which the store is known not to hold, never reaches
//! it. (State that is created and dropped within a few epochs, such as a window's groups, then
//! costs no store operations.) The cache holds at most `capacity` clean entries and is emptied
//! when it would grow past that, so memory stays bounded however large the state is.
//!
//! Many operators keep multiplicities (a value's count in a multiset, a row's in a join side or
//! a buffer): [`KeyedState::add_count`] and [`decode_count`] are the one encoding of them, an
//! `i64` little-endian, absent meaning 0.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use crate::types::hash::HashMap;
use std::sync::Arc;

use super::keys::{prefix_end, vnode_of, TableId};
use super::store::{ScanControl, StateStore, WriteBatch};
use crate::error::{Result, SqlState, WeirError};

/// A stored multiplicity; bytes of another length are a corrupt store (XX001).
pub fn decode_count(bytes: &[u8]) -> Result<i64> {
    let bytes: [u8; 8] =
        bytes.try_into().map_err(|_| WeirError::new(SqlState::DATA_CORRUPTED, "a stored count is corrupt"))?;
    Ok(i64::from_le_bytes(bytes))
}

/// A write not yet in the store.
#[derive(Debug, Clone)]
struct Pending {
    /// The value (None = delete).
    value: Option<Vec<u8>>,
    /// Whether the store may hold the key (unknown counts as yes).
    maybe_stored: bool,
}

pub struct KeyedState {
    table_id: TableId,
    store: Arc<dyn StateStore>,
    /// Writes not yet in the store, by full store key.
    pending: BTreeMap<Vec<u8>, Pending>,
    /// Keep writes across epochs until `capacity` are pending.
    write_back: bool,
    /// Committed values read recently (None = known absent), by full store key.
    cache: HashMap<Vec<u8>, Option<Vec<u8>>>,
    capacity: usize,
}

impl KeyedState {
    pub fn new(table_id: TableId, store: Arc<dyn StateStore>, capacity: usize) -> KeyedState {
        KeyedState {
            table_id,
            store,
            pending: BTreeMap::new(),
            write_back: false,
            cache: HashMap::default(),
            capacity: capacity.max(16),
        }
    }

    /// Makes this a write-back table: for state the view rebuilds at start, which need not be
    /// in the store when an epoch ends.
    pub fn write_back(mut self) -> KeyedState {
        self.write_back = true;
        self
    }

    /// How many entries the cache holds at most (a budget other caches of the operator follow).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The store key of `key`, whose first `distribution_len` bytes choose its vnode.
    fn full_key(&self, key: &[u8], distribution_len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + key.len());
        out.extend_from_slice(&self.table_id.to_be_bytes());
        out.extend_from_slice(&vnode_of(&key[..distribution_len.min(key.len())]).to_be_bytes());
        out.extend_from_slice(key);
        out
    }

    pub fn get(&mut self, key: &[u8], distribution_len: usize) -> Result<Option<Vec<u8>>> {
        let full = self.full_key(key, distribution_len);
        if let Some(p) = self.pending.get(&full) {
            return Ok(p.value.clone());
        }
        if let Some(v) = self.cache.get(&full) {
            return Ok(v.clone());
        }
        let v = self.store.get(&full)?;
        self.remember(full, v.clone());
        Ok(v)
    }

    pub fn put(&mut self, key: &[u8], distribution_len: usize, value: Vec<u8>) {
        let full = self.full_key(key, distribution_len);
        match self.pending.entry(full) {
            Entry::Occupied(mut pending) => pending.get_mut().value = Some(value),
            Entry::Vacant(vacant) => {
                let maybe_stored = Self::cached_maybe_stored(&self.cache, vacant.key());
                vacant.insert(Pending { value: Some(value), maybe_stored });
            }
        }
    }

    pub fn delete(&mut self, key: &[u8], distribution_len: usize) {
        let full = self.full_key(key, distribution_len);
        match self.pending.entry(full) {
            // Never written to the store: forgetting the pending write is deleting it.
            Entry::Occupied(pending) if !pending.get().maybe_stored => {
                pending.remove();
            }
            Entry::Occupied(mut pending) => pending.get_mut().value = None,
            Entry::Vacant(vacant) => {
                if Self::cached_maybe_stored(&self.cache, vacant.key()) {
                    vacant.insert(Pending { value: None, maybe_stored: true });
                }
            }
        }
    }

    /// Adds `delta` to the multiplicity stored under `key` (deleting it when it reaches 0);
    /// returns it before and after.
    pub fn add_count(&mut self, key: &[u8], distribution_len: usize, delta: i64) -> Result<(i64, i64)> {
        let before = match self.get(key, distribution_len)? {
            Some(bytes) => decode_count(&bytes)?,
            None => 0,
        };
        let after = before + delta;
        if after == 0 {
            self.delete(key, distribution_len);
        } else {
            self.put(key, distribution_len, after.to_le_bytes().to_vec());
        }
        Ok((before, after))
    }

    /// Records that the store does not hold `key` (the caller knows, e.g. state that is rebuilt
    /// at start and was never written in this process), so a write and delete of it before it
    /// is flushed never reach the store.
    pub fn known_absent(&mut self, key: &[u8], distribution_len: usize) {
        let full = self.full_key(key, distribution_len);
        self.remember(full, None);
    }

    /// Whether the store may hold `full`, by the cache (which knows some keys to be absent):
    /// unknown counts as yes.
    fn cached_maybe_stored(cache: &HashMap<Vec<u8>, Option<Vec<u8>>>, full: &[u8]) -> bool {
        cache.get(full).is_none_or(|v| v.is_some())
    }

    /// Every entry whose key starts with `prefix` (which begins with a whole distribution
    /// prefix of `distribution_len` bytes), in key order, this epoch's writes included; keys
    /// are returned without table id and vnode.
    pub fn scan_prefix(&self, prefix: &[u8], distribution_len: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let full = self.full_key(prefix, distribution_len);
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        self.store.scan_prefix(&full, &mut |k, v| {
            merged.insert(k.to_vec(), v.to_vec());
            Ok(ScanControl::Continue)
        })?;
        let end = prefix_end(&full);
        let range = self.pending.range(full.clone()..);
        for (k, p) in range {
            if end.as_ref().is_some_and(|e| k >= e) || !k.starts_with(&full) {
                break;
            }
            match &p.value {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        Ok(merged.into_iter().map(|(k, v)| (k[6..].to_vec(), v)).collect())
    }

    /// The epoch ends: moves the pending writes into `wb` (a write-back table's only when more
    /// than `capacity` are pending) and bounds the cache.
    pub fn flush(&mut self, wb: &mut WriteBatch) {
        if self.write_back && self.pending.len() <= self.capacity {
            return;
        }
        for (k, p) in std::mem::take(&mut self.pending) {
            match &p.value {
                Some(value) => wb.put(k.clone(), value.clone()),
                None if p.maybe_stored => wb.delete(k.clone()),
                None => {}
            }
            self.remember(k, p.value);
        }
    }

    fn remember(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        if self.cache.len() >= self.capacity {
            self.cache.clear();
        }
        self.cache.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    #[test]
    fn reads_see_pending_writes_and_flush_commits_them() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16);
        s.put(b"g1a", 2, b"1".to_vec());
        s.put(b"g1b", 2, b"2".to_vec());
        s.put(b"g2a", 2, b"3".to_vec());
        assert_eq!(s.get(b"g1a", 2).unwrap(), Some(b"1".to_vec()));
        let mut wb = WriteBatch::default();
        s.flush(&mut wb);
        store.write(wb).unwrap();
        s.delete(b"g1a", 2);
        s.put(b"g1c", 2, b"4".to_vec());
        let keys: Vec<Vec<u8>> = s.scan_prefix(b"g1", 2).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"g1b".to_vec(), b"g1c".to_vec()]);
        // A fresh reader sees only what was flushed.
        let mut other = KeyedState::new(7, store, 16);
        assert_eq!(other.get(b"g1a", 2).unwrap(), Some(b"1".to_vec()));
        assert_eq!(other.get(b"g1c", 2).unwrap(), None);
    }

    #[test]
    fn write_back_keeps_writes_in_memory_until_capacity_and_drops_what_never_reached_the_store() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16).write_back();
        let key = |i: usize| format!("k{i:02}").into_bytes();
        for i in 0..10 {
            s.put(&key(i), 1, vec![i as u8]);
        }
        let mut wb = WriteBatch::default();
        s.flush(&mut wb);
        assert!(wb.is_empty(), "10 pending writes fit in memory");
        assert_eq!(s.get(&key(3), 1).unwrap(), Some(vec![3]));
        assert_eq!(s.scan_prefix(b"k0", 1).unwrap().len(), 10);
        // Past the capacity every pending write goes to the store.
        for i in 10..20 {
            s.put(&key(i), 1, vec![i as u8]);
        }
        s.flush(&mut wb);
        assert_eq!(wb.ops.len(), 20);
        store.write(std::mem::take(&mut wb)).unwrap();
        // A key known to be absent, written and deleted before a flush, never reaches the store;
        // a stored key's delete does.
        s.known_absent(b"new", 1);
        s.put(b"new", 1, vec![1]);
        s.delete(b"new", 1);
        s.delete(&key(0), 1);
        assert_eq!(s.get(&key(0), 1).unwrap(), None);
        assert_eq!(s.get(b"new", 1).unwrap(), None);
        for i in 0..20 {
            s.put(format!("x{i:02}").as_bytes(), 1, vec![0]);
        }
        s.flush(&mut wb);
        let keys: Vec<Vec<u8>> = wb.ops.iter().map(|op| op.key()[6..].to_vec()).collect();
        assert!(keys.contains(&key(0)) && !keys.contains(&b"new".to_vec()), "{keys:?}");
        assert_eq!(keys.len(), 21);
    }
}
