//! [`ExpiringGroups`]: state values that all leave together at one event time, held in memory
//! and checkpointed as a few large values per time: a windowed aggregate's groups, which all
//! become final when the watermark passes their window's close.
//!
//! Each value is kept by its time (its window's close) and its key (the group key). A
//! checkpoint writes each time's values changed since the last one as one store value per
//! *part* (the keys hashed into [`PARTS`] parts, so a window touched at a few keys rewrites a
//! sixteenth of it): `[0xff][shard][time][part]` in the owner's table, under one vnode. A time
//! that is done ([`Expiring::expire_through`]) leaves memory at once and the store at the
//! next checkpoint, by one delete per part written. So a group costs no store operation of its
//! own, however often it changes, and a window costs a few writes per checkpoint it is open at
//! and a few deletes when it is done, instead of a put per group settled and a tombstone per
//! group deleted (as ADR 22 did for a time-bounded join's rows; Arroyo's expiring time-key
//! tables). Bytes written per checkpoint follow the parts changed, not the state.
//!
//! Memory is the open windows' values ([`ExpiringGroups::bytes_held`]); past
//! [`MEMORY_LIMIT_BYTES`](super::MEMORY_LIMIT_BYTES) the owner hands them to its
//! state table ([`ExpiringGroups::into_entries`]), which spills past its cache like any other.
//! With checkpoints off nothing is written.
//!
//! Restore ([`ExpiringGroups::restore`]) reads the shard's stored parts back: the store holds
//! exactly the parts of the times alive at the checkpoint, as changed parts are written and done
//! times deleted in the checkpoint's own batch.
//!
//! Invariants: a key is in at most one time; every part marked stored is in the store (or its
//! delete is pending in `done`); a key's part is a stable hash of the key, so a key is in the
//! same stored part across restarts.
//!
//! Called by `operators::hash_agg` for a windowed aggregate's groups.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::expiry::Expiring;
use super::keyed::Flush;
use super::keys::{ShardKeys, TableId};
use super::record::{corrupt, RecordReader, RecordWriter};

use super::store::{StateStore, WriteBatch};
use crate::error::Result;
use crate::types::hash::HashMap;
use crate::types::vnode::{fnv1a, FNV1A_START};
use crate::types::window::{time_from_key, time_key};

/// Parts of a time's values, each one stored value.
pub const PARTS: usize = 16;

/// Memory held per value besides its key and value bytes (two vectors and a map slot).
const ENTRY_OVERHEAD: usize = 64;

/// The values of one time.
#[derive(Default)]
struct TimeValues {
    values: HashMap<Vec<u8>, Vec<u8>>,
    /// Parts changed since the last checkpoint, one bit each.
    changed: u16,
    /// Parts the store holds.
    stored: u16,
}

pub struct ExpiringGroups {
    /// Where this shard's parts are stored.
    keys: ShardKeys,
    store: Arc<dyn StateStore>,
    by_time: BTreeMap<i64, TimeValues>,
    /// Stored parts of times that are done, to delete at the next checkpoint.
    done: Vec<(i64, u16)>,
    bytes: usize,
    /// What these values belong to, for errors.
    what: String,
}

/// The part of `key`: stable across builds, as stored parts outlive the binary.
fn part_of(key: &[u8]) -> usize {
    (fnv1a(FNV1A_START, key) % PARTS as u64) as usize
}

fn entry_bytes(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl ExpiringGroups {
    /// The values of shard `shard`, whose parts go into `table_id` of `store`; `what` names the
    /// operator, for errors.
    pub fn new(table_id: TableId, store: Arc<dyn StateStore>, shard: u16, what: &str) -> ExpiringGroups {
        ExpiringGroups::empty(ShardKeys::new(table_id, shard), store, what)
    }

    fn empty(keys: ShardKeys, store: Arc<dyn StateStore>, what: &str) -> ExpiringGroups {
        ExpiringGroups { keys, store, by_time: BTreeMap::new(), done: Vec::new(), bytes: 0, what: what.to_string() }
    }

    /// The store key of part `part` of `time`.
    fn part_key(&self, time: i64, part: usize) -> Vec<u8> {
        let mut suffix = time_key(time).to_vec();
        suffix.push(part as u8);
        self.keys.key(&suffix)
    }

    /// The key range of this shard's stored parts, to delete them all.
    pub fn stored_range(&self) -> (Vec<u8>, Vec<u8>) {
        self.keys.range()
    }

    /// The value of `key` at `time`.
    pub fn get(&self, time: i64, key: &[u8]) -> Option<&[u8]> {
        self.by_time.get(&time)?.values.get(key).map(Vec::as_slice)
    }

    /// Sets the value of `key` at `time` (a key has one time: its owner never puts it at two).
    pub fn put(&mut self, time: i64, key: &[u8], value: Vec<u8>) {
        let at = self.by_time.entry(time).or_default();
        at.changed |= 1 << part_of(key);
        self.bytes += value.len();
        match at.values.get_mut(key) {
            Some(old) => {
                self.bytes -= old.len();
                *old = value;
            }
            None => {
                self.bytes += key.len() + ENTRY_OVERHEAD;
                at.values.insert(key.to_vec(), value);
            }
        }
    }

    /// Removes the value of `key` at `time`.
    pub fn delete(&mut self, time: i64, key: &[u8]) {
        let Some(at) = self.by_time.get_mut(&time) else { return };
        if let Some(old) = at.values.remove(key) {
            self.bytes -= entry_bytes(key, &old);
            at.changed |= 1 << part_of(key);
        }
    }

    /// Bytes of values held in memory, with their keys and bookkeeping.
    pub fn bytes_held(&self) -> usize {
        self.bytes
    }

    /// How many values are held.
    fn len(&self) -> usize {
        self.by_time.values().map(|at| at.values.len()).sum()
    }

    /// The keys held, with their times.
    pub fn entries(&self) -> impl Iterator<Item = (i64, &[u8])> {
        self.by_time.iter().flat_map(|(time, at)| at.values.keys().map(move |k| (*time, k.as_slice())))
    }

    /// The values held, as (time, key, value), for handing them to a state table (then
    /// [`ExpiringGroups::stored_range`] is deleted).
    pub fn into_entries(self) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
        let mut entries = Vec::with_capacity(self.len());
        for (time, at) in self.by_time {
            entries.extend(at.values.into_iter().map(|(k, v)| (time, k, v)));
        }
        entries
    }

    /// At a checkpoint: writes every part changed since the last one (a part left empty is
    /// deleted) and deletes the parts of times done, into `wb`. Other flushes write nothing.
    pub fn flush(&mut self, wb: &mut WriteBatch, flush: Flush) {
        if !flush.checkpoint {
            return;
        }
        for (time, parts) in std::mem::take(&mut self.done) {
            for part in (0..PARTS).filter(|p| parts & (1 << p) != 0) {
                wb.delete(self.part_key(time, part));
            }
        }
        let changed: Vec<i64> = self.by_time.iter().filter(|(_, at)| at.changed != 0).map(|(t, _)| *t).collect();
        for time in changed {
            let at = self.by_time.get_mut(&time).expect("listed above");
            let changed = std::mem::take(&mut at.changed);
            // Each changed part's entries (each key hashed once), in key order, so the same
            // values are the same bytes.
            let mut parts: Vec<Vec<(&Vec<u8>, &Vec<u8>)>> = vec![Vec::new(); PARTS];
            for (key, value) in &at.values {
                let part = part_of(key);
                if changed & (1 << part) != 0 {
                    parts[part].push((key, value));
                }
            }
            let was_stored = at.stored;
            let mut filled = 0u16;
            let mut writes = Vec::new();
            for (part, mut entries) in parts.into_iter().enumerate() {
                if entries.is_empty() {
                    continue;
                }
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut values = RecordWriter::default();
                for (key, value) in entries {
                    values.bytes(key).bytes(value);
                }
                filled |= 1 << part;
                writes.push((part, values.finish()));
            }
            at.stored = (at.stored & !changed) | filled;
            for (part, values) in writes {
                wb.put(self.part_key(time, part), values);
            }
            for part in (0..PARTS).filter(|p| changed & was_stored & !filled & (1 << p) != 0) {
                wb.delete(self.part_key(time, part));
            }
        }
    }

    /// Restores the values of the newest checkpoint: the shard's stored parts read back. A part
    /// that does not decode, or holds a key of another part, is a corrupt checkpoint.
    pub fn restore(&mut self) -> Result<()> {
        *self = ExpiringGroups::empty(self.keys.clone(), Arc::clone(&self.store), &self.what);
        for (key, bytes) in self.store.read_prefix(self.keys.prefix())? {
            let (time, part) = match key.as_slice() {
                [time @ .., part] if time.len() == 8 && (*part as usize) < PARTS => {
                    (time_from_key(time), *part as usize)
                }
                _ => return Err(corrupt(&self.what, "a stored part of windowed groups with a bad key")),
            };
            let mut reader = RecordReader::new(&bytes, &self.what)?;
            let mut values = Vec::new();
            while !reader.at_end() {
                let key = reader.slice()?;
                if part_of(key) != part {
                    return Err(corrupt(&self.what, "a windowed group stored in another part than its key's"));
                }
                values.push((key, reader.slice()?));
            }
            let at = self.by_time.entry(time).or_default();
            at.stored |= 1 << part;
            for (key, value) in values {
                self.bytes += entry_bytes(key, value);
                at.values.insert(key.to_vec(), value.to_vec());
            }
        }
        Ok(())
    }
}

/// The values of every time at or before the bound leave memory, and the store at the next
/// checkpoint.
impl Expiring for ExpiringGroups {
    type Expired = ();

    fn expire_through(&mut self, through: i64) -> Result<()> {
        let keep = self.by_time.split_off(&through.saturating_add(1));
        for (time, at) in std::mem::replace(&mut self.by_time, keep) {
            self.bytes -= at.values.iter().map(|(k, v)| entry_bytes(k, v)).sum::<usize>();
            if at.stored != 0 {
                self.done.push((time, at.stored));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    fn stored(store: &Arc<dyn StateStore>) -> usize {
        store.read_prefix(&[]).unwrap().len()
    }

    fn checkpoint(groups: &mut ExpiringGroups, store: &Arc<dyn StateStore>) -> usize {
        let mut wb = WriteBatch::default();
        groups.flush(&mut wb, Flush::CHECKPOINT);
        let written = wb.len();
        store.write(wb).unwrap();
        written
    }

    fn restored(store: &Arc<dyn StateStore>) -> Result<ExpiringGroups> {
        let mut groups = ExpiringGroups::new(7, Arc::clone(store), 1, "test");
        groups.restore()?;
        Ok(groups)
    }

    fn same(a: &ExpiringGroups, b: &ExpiringGroups) -> bool {
        let flat = |g: &ExpiringGroups| {
            let mut all: Vec<(i64, Vec<u8>, Vec<u8>)> = g
                .by_time
                .iter()
                .flat_map(|(t, at)| at.values.iter().map(|(k, v)| (*t, k.clone(), v.clone())))
                .collect();
            all.sort();
            all
        };
        flat(a) == flat(b)
    }

    /// Values come back by time and key; a checkpoint restores exactly the times alive at it,
    /// rewrites only the parts changed, and a done time leaves the store at the next one.
    #[test]
    fn a_checkpoint_restores_the_live_times_and_writes_only_changed_parts() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut groups = ExpiringGroups::new(7, Arc::clone(&store), 1, "test");
        for time in [-20i64, 10, 20] {
            for k in 0..200u32 {
                groups.put(time, &k.to_be_bytes(), format!("{time}/{k}").into_bytes());
            }
        }
        groups.put(10, &5u32.to_be_bytes(), b"changed".to_vec());
        groups.delete(20, &6u32.to_be_bytes());
        assert_eq!(groups.get(10, &5u32.to_be_bytes()), Some(&b"changed"[..]));
        assert_eq!((groups.get(20, &6u32.to_be_bytes()), groups.len()), (None, 599));
        // Nothing is written before a checkpoint.
        let mut wb = WriteBatch::default();
        groups.flush(&mut wb, Flush::EPOCH);
        assert!(wb.is_empty());
        assert_eq!(checkpoint(&mut groups, &store), 3 * PARTS);
        let back = restored(&store).unwrap();
        assert!(same(&back, &groups));
        assert_eq!(back.bytes_held(), groups.bytes_held());
        // One key changed: one part rewritten. A time done: its parts deleted.
        let mut groups = back;
        groups.put(20, &7u32.to_be_bytes(), b"again".to_vec());
        groups.expire_through(-20).unwrap();
        assert_eq!(checkpoint(&mut groups, &store), 1 + PARTS);
        assert_eq!(stored(&store), 2 * PARTS);
        let back = restored(&store).unwrap();
        assert!(same(&back, &groups));
        assert!(back.get(20, &7u32.to_be_bytes()).is_some() && back.get(-20, &7u32.to_be_bytes()).is_none());
        // A part whose keys all left is deleted, not written empty.
        let mut groups = back;
        for k in (0..200u32).filter(|k| part_of(&k.to_be_bytes()) == part_of(&7u32.to_be_bytes())) {
            groups.delete(20, &k.to_be_bytes());
        }
        assert_eq!(checkpoint(&mut groups, &store), 1);
        assert_eq!(stored(&store), 2 * PARTS - 1);
        assert!(same(&restored(&store).unwrap(), &groups));
        groups.expire_through(i64::MAX).unwrap();
        assert_eq!((groups.len(), groups.bytes_held()), (0, 0));
        checkpoint(&mut groups, &store);
        assert_eq!(stored(&store), 0);
    }

    /// A damaged part, or a key in a part not its own, is a corrupt checkpoint.
    #[test]
    fn a_damaged_part_is_refused() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut groups = ExpiringGroups::new(7, Arc::clone(&store), 1, "test");
        groups.put(5, b"k", b"value".to_vec());
        checkpoint(&mut groups, &store);
        let key = groups.part_key(5, part_of(b"k"));
        let value = store.get(&key).unwrap().unwrap();
        let mut wb = WriteBatch::default();
        wb.put(key.clone(), value[..value.len() - 1].to_vec());
        store.write(wb).unwrap();
        assert!(restored(&store).is_err());
        let mut wb = WriteBatch::default();
        wb.delete(key);
        wb.put(groups.part_key(5, (part_of(b"k") + 1) % PARTS), value.to_vec());
        store.write(wb).unwrap();
        let err = restored(&store).err().expect("a key in another part");
        assert_eq!(err.state, crate::error::SqlState::DATA_CORRUPTED);
    }
}
