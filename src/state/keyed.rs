//! [`KeyedState`]: an operator's state as ordered byte keys and values in the store, with a
//! bounded cache in front.
//!
//! Keys are stored as `[table id][vnode][key]`, where the vnode is the hash of the key's
//! *distribution prefix* (the join key, the group key), so that every entry sharing that prefix
//! sits together in one vnode and [`KeyedState::scan_prefix`] is one range read.
//!
//! Writes of the current epoch stay in `pending` until [`KeyedState::flush`] moves them into the
//! epoch's write batch; reads see them. The cache holds at most `capacity` clean entries and is
//! emptied when it would grow past that, so memory stays bounded however large the state is.
//!
//! Many operators keep multiplicities (a value's count in a multiset, a row's in a join side or
//! a buffer): [`KeyedState::add_count`] and [`decode_count`] are the one encoding of them, an
//! `i64` little-endian, absent meaning 0.

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

pub struct KeyedState {
    table_id: TableId,
    store: Arc<dyn StateStore>,
    /// This epoch's writes (None = delete), by full store key.
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Committed values read recently (None = known absent), by full store key.
    cache: HashMap<Vec<u8>, Option<Vec<u8>>>,
    capacity: usize,
}

impl KeyedState {
    pub fn new(table_id: TableId, store: Arc<dyn StateStore>, capacity: usize) -> KeyedState {
        KeyedState { table_id, store, pending: BTreeMap::new(), cache: HashMap::default(), capacity: capacity.max(16) }
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
        if let Some(v) = self.pending.get(&full) {
            return Ok(v.clone());
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
        self.pending.insert(full, Some(value));
    }

    pub fn delete(&mut self, key: &[u8], distribution_len: usize) {
        let full = self.full_key(key, distribution_len);
        self.pending.insert(full, None);
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
        for (k, v) in range {
            if end.as_ref().is_some_and(|e| k >= e) || !k.starts_with(&full) {
                break;
            }
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        Ok(merged.into_iter().map(|(k, v)| (k[6..].to_vec(), v)).collect())
    }

    /// Moves this epoch's writes into `wb` and bounds the cache.
    pub fn flush(&mut self, wb: &mut WriteBatch) {
        for (k, v) in std::mem::take(&mut self.pending) {
            match &v {
                Some(value) => wb.put(k.clone(), value.clone()),
                None => wb.delete(k.clone()),
            }
            self.remember(k, v);
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
}
