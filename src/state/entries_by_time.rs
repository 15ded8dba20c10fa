//! [`EntriesByTime`]: entries indexed by an event time, several per time in the order they
//! came, taken out through a bound that only grows. Each time's entries are one encoded list
//! ([`RecordWriter::fragment`]) with their count, so taking a time out, or copying the index
//! into a checkpoint record, moves one buffer instead of visiting every entry. What an entry
//! holds is its user's: a time-bounded join's rows by time (`operators::hash_join`: each row's
//! state key and join key length) and the keys of rows kept in memory
//! ([`super::expiring_rows`]).
//!
//! Unlike [`super::keys_by_time::KeysByTime`] (one time per key, moved as the key's window
//! changes), an entry is only ever added, and leaves with its time.

use std::collections::BTreeMap;

use super::expiry::Expiring;
use super::record::{RecordReader, RecordWriter};
use crate::error::Result;

#[derive(Default)]
pub struct EntriesByTime(BTreeMap<i64, (u64, RecordWriter)>);

impl EntriesByTime {
    /// Adds an entry at `time`: its fields go into the writer returned.
    pub fn push(&mut self, time: i64) -> &mut RecordWriter {
        let (count, entries) = self.0.entry(time).or_insert_with(|| (0, RecordWriter::fragment()));
        *count += 1;
        entries
    }

    /// Each time, in order, with how many entries it has and a reader over them (`what`
    /// names their owner, for errors).
    pub fn lists<'a>(&'a self, what: &'a str) -> impl Iterator<Item = (i64, u64, RecordReader<'a>)> + 'a {
        self.0
            .iter()
            .map(move |(&time, (count, entries))| (time, *count, RecordReader::fragment(entries.as_bytes(), what)))
    }

    /// How many entries there are.
    pub fn len(&self) -> u64 {
        self.0.values().map(|(count, _)| count).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many bytes [`EntriesByTime::write`] writes.
    pub fn record_len(&self) -> usize {
        8 + self.0.values().map(|(_, entries)| 16 + entries.as_bytes().len()).sum::<usize>()
    }

    /// Writes the index into a checkpoint record: how many times, then per time the time, how
    /// many entries and the entries as their user wrote them (read back by that user, who
    /// checks each).
    pub fn write(&self, record: &mut RecordWriter) {
        record.u64(self.0.len() as u64);
        for (&time, (count, entries)) in &self.0 {
            record.i64(time).u64(*count).raw(entries.as_bytes());
        }
    }
}

/// The entries whose time is at or before the bound leave, as an index of their own.
impl Expiring for EntriesByTime {
    type Expired = EntriesByTime;

    fn expire_through(&mut self, through: i64) -> Result<EntriesByTime> {
        let keep = self.0.split_off(&through.saturating_add(1));
        Ok(EntriesByTime(std::mem::replace(&mut self.0, keep)))
    }
}
