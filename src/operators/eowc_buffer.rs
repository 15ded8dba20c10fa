//! EowcBuffer: `EMIT ON WINDOW CLOSE` for a view without a windowed aggregate (a plain
//! select, or a join, over `TUMBLE` / `HOP`): each row is held until the watermark reaches
//! the end of its window, then emitted once.
//!
//! Rows wait by close time in a [`RowsByTime`]; at each barrier the rows whose window has
//! closed are emitted and deleted. A row arriving for a window already closed (within the
//! allowed lateness) is emitted at the next barrier. All rows go to one shard (shard 0).
//!
//! Over a watermarked column itself (no window assigner upstream, [`EowcBuffer::new`]'s
//! `judges_lateness`), the buffer is where the view judges lateness, as a window assigner does
//! for windows: a row whose time is at or below the watermark when it arrives is late, counted
//! and dropped ([`LateRows`]), never emitted; so a plain select and a windowed view agree on
//! which rows are late.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::RowConverter;

use super::lateness::LateRows;
use super::operator::Operator;
use crate::error::Result;
use crate::state::expiry::Expiry;
use crate::state::keyed::{Flush, KeyedState};
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::rows_by_time::{decode_changes, RowsByTime};
use crate::state::store::WriteBatch;
use crate::state::table::row_codec;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::window::{close_times, TimeColumn};
use crate::types::ChangeBatch;

/// A row leaves the buffer, emitted, once the watermark reaches its window's close: no
/// lateness (a correction within the view's lateness is the aggregate's or assigner's).
const ROWS_CLOSE_AT_THEIR_TIME: Expiry = Expiry::new(0);

pub struct EowcBuffer {
    /// The column telling when a row's window closes.
    column: usize,
    time: TimeColumn,
    rows: RowsByTime,
    codec: RowConverter,
    schema: SchemaRef,
    /// Only shard 0 holds rows (the others see none, and must not emit shard 0's).
    active: bool,
    /// Rows late when they arrive: Some where no window assigner upstream judged them.
    late: Option<LateRows>,
}

impl EowcBuffer {
    /// Holds rows by the close time of `column`; with `judges_lateness` (the column is a
    /// watermarked column, not a window bound) it drops rows late on arrival, counted for `view`.
    pub fn new(
        column: usize,
        time: TimeColumn,
        schema: SchemaRef,
        state: KeyedState,
        active: bool,
        judges_lateness: bool,
        view: impl Into<ViewStatus>,
    ) -> Result<EowcBuffer> {
        let codec = row_codec(&schema)?;
        let rows = RowsByTime::new(state, vec![]);
        let late = judges_lateness.then(|| LateRows::new(false, view));
        Ok(EowcBuffer { column, time, rows, codec, schema, active, late })
    }
}

impl Operator for EowcBuffer {
    fn describe(&self) -> String {
        format!("EmitOnWindowClose: by {}", self.schema.field(self.column).name())
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let closes = close_times(batch.data.column(self.column), self.time)?;
        let rows = self.codec.convert_columns(batch.data.columns())?;
        let final_through = ROWS_CLOSE_AT_THEIR_TIME.final_through(clock).filter(|_| self.late.is_some());
        let mut late = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            // A row without a window never closes.
            let Some(close) = closes[i] else { continue };
            if final_through.is_some_and(|w| close <= w) {
                late.push(i as u32);
                continue;
            }
            self.rows.add(close, rows.row(i).as_ref(), op.sign())?;
        }
        if let (Some(judge), false) = (&mut self.late, late.is_empty()) {
            judge.divert(batch.take(&late)?)?;
        }
        Ok(vec![])
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        if !self.active {
            return Ok(vec![]);
        }
        let Some(taken) = ROWS_CLOSE_AT_THEIR_TIME.expire(clock, &mut self.rows)? else { return Ok(vec![]) };
        Ok(decode_changes(&self.codec, &self.schema, taken, 1)?.into_iter().collect())
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.rows.flush(wb, flush);
    }

    /// How many rows wait.
    fn save_record(&self) -> Option<Vec<u8>> {
        let mut record = RecordWriter::default();
        self.rows.save(&mut record);
        Some(record.finish())
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        let what = self.describe();
        let mut record = RecordReader::new(record, &what)?;
        self.rows.restore(&mut record)?;
        record.finish()
    }

    fn open_windows(&self) -> usize {
        self.rows.waiting()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::operator::testing::{assert_restore_continues, Event::Changes, Event::Watermark};
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use std::sync::Arc;

    const S: i64 = 1_000_000_000;

    /// Restored from a checkpoint, the buffer emits the rows that waited before the restart when
    /// their window closes after it, even in an epoch that brings no rows.
    #[test]
    fn a_restored_buffer_emits_the_rows_waiting_before() {
        let make = |store: &Arc<dyn StateStore>| -> Box<dyn Operator> {
            // (window end, value); rows close at their window end.
            let schema = from_pretty("S I\n").schema();
            let state = KeyedState::new(1, Arc::clone(store), 4).write_back(None).unwrap();
            Box::new(EowcBuffer::new(0, TimeColumn { close_offset: 0 }, schema, state, true, false, "test").unwrap())
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
