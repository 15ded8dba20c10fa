//! [`RowsByTime`]: rows waiting in the store until a time passes, with their multiplicity; the
//! one component behind operators that hold rows until a clock reaches them (the
//! `EMIT ON WINDOW CLOSE` buffer until the watermark passes a row's window; a temporal filter
//! until `now()` reaches the time a row enters or leaves the view).
//!
//! A row waiting until time `t` is the key `[prefix][time_key(t)][row]` of one state table,
//! whose value is its multiplicity ([`KeyedState::add_count`]); keys sort by time, so
//! [`Expiring::expire_through`] reads only the rows it takes (plus one), however many wait for
//! later. `prefix` keeps apart the rows of operators sharing a table (a shard's number). How
//! many distinct rows wait is counted in memory, so a clock tick with none waiting reads
//! nothing; the count goes into the operator's checkpoint record ([`RowsByTime::save`]).
//!
//! Times mostly grow (a window's close, a row's time plus an interval), so most rows added wait
//! until a time later than any that has reached the store: the index remembers the latest time
//! that may have ([`RowsByTime::flush`]), and a row past it is counted without a read of the
//! store, and if it is taken out before the next flush it never reaches the store at all.

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::RowConverter;

use super::expiry::Expiring;
use super::keyed::{Flush, KeyedState};
use super::keys::{KeyRef, StateKey};
use super::record::{RecordReader, RecordWriter};
use super::store::{ScanControl, WriteBatch};
use super::value::decode_count;
use crate::error::Result;
use crate::types::window::{time_from_key, time_key};
use crate::types::{ChangeBatch, Op};

pub struct RowsByTime {
    state: KeyedState,
    prefix: Vec<u8>,
    /// Distinct rows waiting (each counted once whatever its multiplicity).
    waiting: usize,
    /// The latest time added.
    latest: i64,
    /// The latest time of a row that may be in the store (MAX: unknown, any may be).
    stored_through: i64,
}

/// Rows taken out because their time passed: (time, row bytes, multiplicity), in time order.
pub type TakenRows = Vec<(i64, Vec<u8>, i64)>;

impl RowsByTime {
    pub fn new(state: KeyedState, prefix: Vec<u8>) -> RowsByTime {
        RowsByTime { state, prefix, waiting: 0, latest: i64::MIN, stored_through: i64::MAX }
    }

    /// A row's key: under the prefix (the distribution), its time, then the row.
    fn key(&self, time: i64, row: &[u8]) -> StateKey {
        StateKey::under(&self.prefix, 8 + row.len()).then(&time_key(time)).then(row)
    }

    /// Adds `delta` to how many times `row` waits until `time`.
    pub fn add(&mut self, time: i64, row: &[u8], delta: i64) -> Result<()> {
        let key = self.key(time, row);
        self.latest = self.latest.max(time);
        let (before, after) = if time > self.stored_through {
            self.state.add_count_unstored(key.key(), delta)?
        } else {
            self.state.add_count(key.key(), delta)?
        };
        if after == 0 {
            self.waiting = self.waiting.saturating_sub(1);
        } else if before == 0 {
            self.waiting += 1;
        }
        Ok(())
    }

    /// Distinct rows waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    pub fn flush(&mut self, wb: &mut WriteBatch, flush: Flush) {
        if self.state.flush(wb, flush) {
            self.stored_through = match self.stored_through {
                i64::MAX => self.latest,
                through => through.max(self.latest),
            };
        }
    }

    /// Adds what is kept in memory (the count waiting, the latest time stored) to a checkpoint
    /// record.
    pub fn save(&self, record: &mut RecordWriter) {
        record.u64(self.waiting as u64).i64(self.stored_through);
    }

    /// Reads what [`RowsByTime::save`] added.
    pub fn restore(&mut self, record: &mut RecordReader) -> Result<()> {
        self.waiting = record.u64()? as usize;
        // An EOWC buffer's record written before the latest stored time was kept ends here.
        self.stored_through = if record.at_end() { i64::MAX } else { record.i64()? };
        self.latest = self.stored_through;
        Ok(())
    }
}

/// Every row waiting until the bound or earlier leaves, in time order.
impl Expiring for RowsByTime {
    type Expired = TakenRows;

    fn expire_through(&mut self, through: i64) -> Result<TakenRows> {
        if self.waiting == 0 {
            return Ok(vec![]);
        }
        let mut taken: Vec<(Vec<u8>, i64)> = Vec::new();
        let skip = self.prefix.len();
        let prefix = KeyRef::whole(&self.prefix);
        self.state.scan_prefix_while(prefix, &mut |key, value| {
            if time_from_key(&key[skip..]) > through {
                return Ok(ScanControl::Stop);
            }
            taken.push((key.to_vec(), decode_count(value)?));
            Ok(ScanControl::Continue)
        })?;
        let mut rows = Vec::with_capacity(taken.len());
        for (key, count) in taken {
            self.state.delete(prefix.sibling(&key));
            self.waiting = self.waiting.saturating_sub(1);
            rows.push((time_from_key(&key[skip..]), key[skip + 8..].to_vec(), count));
        }
        Ok(rows)
    }
}

/// The changes for rows taken out of a [`RowsByTime`] (each `sign` times its multiplicity:
/// inserted for a positive count, deleted for a negative), decoded with `codec`; None if no row.
pub fn decode_changes(
    codec: &RowConverter,
    schema: &SchemaRef,
    taken: TakenRows,
    sign: i64,
) -> Result<Option<ChangeBatch>> {
    if taken.is_empty() {
        return Ok(None);
    }
    let parser = codec.parser();
    let columns = codec.convert_rows(taken.iter().map(|(_, row, _)| parser.parse(row)))?;
    let distinct = RecordBatch::try_new(std::sync::Arc::clone(schema), columns)?;
    let mut indices = Vec::new();
    let mut ops = Vec::new();
    for (i, (_, _, count)) in taken.iter().enumerate() {
        let n = count * sign;
        let op = if n > 0 { Op::Insert } else { Op::Delete };
        for _ in 0..n.unsigned_abs() {
            indices.push(i as u32);
            ops.push(op);
        }
    }
    let data = take_record_batch(&distinct, &UInt32Array::from(indices))?;
    Ok(Some(ChangeBatch::new(data, ops)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;

    #[test]
    fn rows_come_out_in_time_order_once_their_time_passes() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let state = KeyedState::new(3, Arc::clone(&store), 16).write_back(None).unwrap();
        let mut rows = RowsByTime::new(state, vec![0, 1]);
        rows.add(20, b"b", 1).unwrap();
        rows.add(-5, b"a", 2).unwrap();
        rows.add(20, b"c", 1).unwrap();
        rows.add(20, b"c", -1).unwrap();
        rows.add(30, b"d", 1).unwrap();
        assert_eq!(rows.waiting(), 3);
        assert_eq!(rows.expire_through(-6).unwrap(), vec![]);
        assert_eq!(rows.expire_through(20).unwrap(), vec![(-5, b"a".to_vec(), 2), (20, b"b".to_vec(), 1)]);
        // Stored at a checkpoint, then read back from the store by a restored copy.
        let mut wb = WriteBatch::default();
        rows.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        let mut record = RecordWriter::default();
        rows.save(&mut record);
        let bytes = record.finish();
        let state = KeyedState::new(3, Arc::clone(&store), 16).write_back(None).unwrap();
        let mut restored = RowsByTime::new(state, vec![0, 1]);
        let mut reader = RecordReader::new(&bytes, "test").unwrap();
        restored.restore(&mut reader).unwrap();
        assert_eq!(restored.waiting(), 1);
        restored.add(25, b"e", -1).unwrap();
        assert_eq!(restored.expire_through(i64::MAX).unwrap(), vec![(25, b"e".to_vec(), -1), (30, b"d".to_vec(), 1)]);
        assert_eq!(restored.waiting(), 0);
    }

    #[test]
    fn rows_later_than_any_stored_are_counted_without_the_store_and_never_reach_it_if_gone() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let state = KeyedState::new(3, Arc::clone(&store), 16).write_back(None).unwrap();
        let mut rows = RowsByTime::new(state, vec![]);
        rows.add(10, b"a", 1).unwrap();
        let mut wb = WriteBatch::default();
        rows.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        // Past time 10: counted in memory; the same row twice is one row counted twice.
        rows.add(20, b"b", 1).unwrap();
        rows.add(20, b"b", 1).unwrap();
        rows.add(30, b"c", 1).unwrap();
        rows.add(30, b"c", -1).unwrap();
        // At or before 10: read from the store.
        rows.add(10, b"a", 1).unwrap();
        assert_eq!(rows.waiting(), 2);
        rows.flush(&mut wb, Flush::CHECKPOINT);
        let written: Vec<Vec<u8>> = wb.ops.iter().map(|op| op.key()[6 + 8..].to_vec()).collect();
        assert_eq!(written, vec![b"a".to_vec(), b"b".to_vec()], "c never reaches the store");
        store.write(wb).unwrap();
        assert_eq!(rows.expire_through(100).unwrap(), vec![(10, b"a".to_vec(), 2), (20, b"b".to_vec(), 2)]);
    }
}
