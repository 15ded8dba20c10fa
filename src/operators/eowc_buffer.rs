//! EowcBuffer: `EMIT ON WINDOW CLOSE` for a view without a windowed aggregate (a plain
//! select, or a join, over `TUMBLE` / `HOP`): each row is held until the watermark reaches
//! the end of its window, then emitted once.
//!
//! Rows wait in a state table keyed by close time (big-endian, sign flipped, so keys sort by
//! time) and the row, with their multiplicity; at each barrier the rows whose window has closed
//! are emitted and deleted. A row arriving for a window already closed (within the allowed
//! lateness) is emitted at the next barrier. All rows go to one shard (shard 0). How many rows
//! wait is counted in memory (a barrier with none waiting reads nothing) and kept with each
//! checkpoint ([`Operator::save_index`]).

use std::sync::Arc;

use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};

use super::operator::Operator;
use crate::error::Result;
use crate::state::index_codec::{IndexReader, IndexWriter};
use crate::state::keyed::{decode_count, KeyedState};
use crate::state::store::WriteBatch;
use crate::types::window::{close_times, time_key, TimeColumn};
use crate::types::{ChangeBatch, Op};

pub struct EowcBuffer {
    /// The column telling when a row's window closes.
    column: usize,
    time: TimeColumn,
    state: KeyedState,
    codec: RowConverter,
    schema: SchemaRef,
    watermark: Option<i64>,
    /// Only shard 0 holds rows (the others see none, and must not emit shard 0's).
    active: bool,
    /// Rows waiting, each counted once whatever its multiplicity: a metric, and with none a
    /// barrier reads nothing.
    waiting: usize,
}

impl EowcBuffer {
    pub fn new(
        column: usize,
        time: TimeColumn,
        schema: SchemaRef,
        state: KeyedState,
        active: bool,
    ) -> Result<EowcBuffer> {
        let codec = RowConverter::new(schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        Ok(EowcBuffer { column, time, state, codec, schema, watermark: None, active, waiting: 0 })
    }
}

impl Operator for EowcBuffer {
    fn describe(&self) -> String {
        format!("EmitOnWindowClose: by {}", self.schema.field(self.column).name())
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        let closes = close_times(batch.data.column(self.column), self.time)?;
        let rows = self.codec.convert_columns(batch.data.columns())?;
        for (i, op) in batch.ops.iter().enumerate() {
            // A row without a window never closes.
            let Some(close) = closes[i] else { continue };
            let mut key = time_key(close).to_vec();
            key.extend_from_slice(rows.row(i).as_ref());
            let (before, after) = self.state.add_count(&key, 0, op.sign())?;
            if after == 0 {
                self.waiting = self.waiting.saturating_sub(1);
            } else if before == 0 {
                self.waiting += 1;
            }
        }
        Ok(vec![])
    }

    fn on_barrier(&mut self) -> Result<Vec<ChangeBatch>> {
        let Some(watermark) = self.watermark.filter(|_| self.active && self.waiting > 0) else {
            return Ok(vec![]);
        };
        let limit = time_key(watermark);
        let mut rows = Vec::new();
        let mut counts = Vec::new();
        for (key, value) in self.state.scan_prefix(&[], 0)? {
            if key[..8] > limit[..] {
                break;
            }
            self.state.delete(&key, 0);
            self.waiting = self.waiting.saturating_sub(1);
            rows.push(key[8..].to_vec());
            counts.push(decode_count(&value)?);
        }
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let parser = self.codec.parser();
        let columns = self.codec.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let distinct = datafusion::arrow::array::RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let mut indices = Vec::new();
        let mut ops = Vec::new();
        for (i, &n) in counts.iter().enumerate() {
            let op = if n > 0 { Op::Insert } else { Op::Delete };
            for _ in 0..n.unsigned_abs() {
                indices.push(i as u32);
                ops.push(op);
            }
        }
        let data = take_record_batch(&distinct, &UInt32Array::from(indices))?;
        Ok(vec![ChangeBatch::new(data, ops)])
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, checkpoint: bool) {
        self.state.flush(wb, checkpoint);
    }

    /// How many rows wait.
    fn save_index(&self) -> Option<Vec<u8>> {
        Some(IndexWriter::default().u64(self.waiting as u64).finish())
    }

    fn restore_index(&mut self, record: &[u8]) -> Result<()> {
        let what = self.describe();
        let mut record = IndexReader::new(record, &what)?;
        self.waiting = record.u64()? as usize;
        record.finish()
    }

    fn on_watermark(&mut self, watermark: i64) {
        self.watermark = Some(watermark);
    }

    fn open_windows(&self) -> usize {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::operator::testing::{assert_restore_continues, Event::Changes, Event::Watermark};
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;

    const S: i64 = 1_000_000_000;

    /// Restored from a checkpoint, the buffer emits the rows that waited before the restart when
    /// their window closes after it, even in an epoch that brings no rows.
    #[test]
    fn a_restored_buffer_emits_the_rows_waiting_before() {
        let make = |store: &Arc<dyn StateStore>| -> Box<dyn Operator> {
            // (window end, value); rows close at their window end.
            let schema = from_pretty("S I\n").schema();
            let state = KeyedState::new(1, Arc::clone(store), 4).write_back().unwrap();
            Box::new(EowcBuffer::new(0, TimeColumn { close_offset: 0 }, schema, state, true).unwrap())
        };
        assert_restore_continues(
            &make,
            &[
                &[Changes(0, "S I\n+ 10 1\n+ 20 2\n+ 10 3\n+ 10 1")],
                &[Changes(0, "S I\n- 10 3\n+ 30 5"), Watermark(5 * S)],
                &[Watermark(12 * S)],
                &[Changes(0, "S I\n+ 20 4")],
                &[Watermark(22 * S)],
                &[Changes(0, "S I\n+ 30 6\n- 30 5\n+ 40 7"), Watermark(40 * S)],
            ],
        );
    }
}
