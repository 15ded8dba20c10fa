//! [`KeysByTime`]: which state keys expire at which event time, the one index behind every
//! operator whose state ends with the watermark (a windowed aggregate's groups, a windowed
//! join's keys, a windowed Top-N's partitions, a session assigner's keys).
//!
//! Each key has one time (its window's close, its earliest session's end); the operator takes
//! the keys whose time the watermark has passed ([`Expiring::expire_through`]) and deletes or
//! emits their state. The index lives in memory, next to the state tables, and is kept at every
//! checkpoint as part of the operator's record ([`KeysByTime::write`], [`KeysByTime::read`]),
//! written in a fixed order so the same index is the same bytes. Memory: one entry per key
//! with state, which the watermark bounds to the open windows.

use std::collections::BTreeMap;

use super::expiry::Expiring;
use super::record::{RecordReader, RecordWriter};
use crate::error::Result;
use crate::types::hash::{HashMap, HashSet};

#[derive(Default, Debug)]
pub struct KeysByTime {
    by_time: BTreeMap<i64, HashSet<Vec<u8>>>,
    time_of: HashMap<Vec<u8>, i64>,
}

impl KeysByTime {
    /// Indexes `key` at `time` unless it is indexed already; returns whether it was new.
    pub fn insert(&mut self, key: &[u8], time: i64) -> bool {
        if self.time_of.contains_key(key) {
            return false;
        }
        self.time_of.insert(key.to_vec(), time);
        self.by_time.entry(time).or_default().insert(key.to_vec());
        true
    }

    /// Moves `key` to `time`, or out of the index (None).
    pub fn set(&mut self, key: &[u8], time: Option<i64>) {
        if let Some(old) = self.time_of.remove(key) {
            if let Some(keys) = self.by_time.get_mut(&old) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_time.remove(&old);
                }
            }
        }
        if let Some(time) = time {
            self.insert(key, time);
        }
    }

    pub fn time_of(&self, key: &[u8]) -> Option<i64> {
        self.time_of.get(key).copied()
    }

    /// Whether `key` is held with a time at or before `through` (never, without one).
    pub fn due_by(&self, key: &[u8], through: Option<i64>) -> bool {
        through.is_some_and(|through| self.time_of(key).is_some_and(|time| time <= through))
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.time_of.contains_key(key)
    }

    /// The earliest time of a key, if any.
    pub fn earliest(&self) -> Option<i64> {
        self.by_time.first_key_value().map(|(time, _)| *time)
    }

    pub fn len(&self) -> usize {
        self.time_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time_of.is_empty()
    }

    /// Adds the index to a checkpoint record.
    pub fn write(&self, record: &mut RecordWriter) {
        let sorted: BTreeMap<i64, Vec<Vec<u8>>> = self
            .by_time
            .iter()
            .map(|(&time, keys)| {
                let mut keys: Vec<Vec<u8>> = keys.iter().cloned().collect();
                keys.sort_unstable();
                (time, keys)
            })
            .collect();
        record.keys_by_time(&sorted);
    }

    /// The index [`KeysByTime::write`] added to a record.
    pub fn read(record: &mut RecordReader) -> Result<KeysByTime> {
        let mut index = KeysByTime::default();
        for (time, keys) in record.keys_by_time()? {
            for key in keys {
                index.insert(&key, time);
            }
        }
        Ok(index)
    }
}

/// The keys whose time is at or before the bound leave the index, by time, each time's keys
/// sorted.
impl Expiring for KeysByTime {
    type Expired = Vec<(i64, Vec<Vec<u8>>)>;

    fn expire_through(&mut self, through: i64) -> Result<Self::Expired> {
        let keep = self.by_time.split_off(&through.saturating_add(1));
        let taken = std::mem::replace(&mut self.by_time, keep);
        Ok(taken
            .into_iter()
            .map(|(time, keys)| {
                let mut keys: Vec<Vec<u8>> = keys.into_iter().collect();
                keys.sort_unstable();
                for key in &keys {
                    self.time_of.remove(key);
                }
                (time, keys)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_out_by_time_move_and_survive_a_record() {
        let mut index = KeysByTime::default();
        assert!(index.insert(b"a", 10));
        assert!(!index.insert(b"a", 5), "a key has one time");
        index.insert(b"b", 20);
        index.insert(b"c", 10);
        index.set(b"b", Some(5));
        index.set(b"c", None);
        assert_eq!((index.len(), index.earliest(), index.time_of(b"b")), (2, Some(5), Some(5)));
        let mut record = RecordWriter::default();
        index.write(&mut record);
        let bytes = record.finish();
        let mut reader = RecordReader::new(&bytes, "test").unwrap();
        let mut restored = KeysByTime::read(&mut reader).unwrap();
        reader.finish().unwrap();
        assert_eq!(restored.expire_through(9).unwrap(), vec![(5, vec![b"b".to_vec()])]);
        assert_eq!(restored.expire_through(10).unwrap(), vec![(10, vec![b"a".to_vec()])]);
        assert!(restored.is_empty() && !restored.contains(b"a"));
    }
}
