//! TemporalFilter: keeps exactly the rows whose time bounds hold at the epoch's `now()`
//! (`WHERE ts > now() - INTERVAL '1' HOUR`, ADR 13).
//!
//! Each row is in the view from `start` (inclusive) to `end` (exclusive), the latest of its
//! start bounds and the earliest of its end bounds (`stream_plan::temporal_bounds`); a NULL bound
//! keeps it out. A change arriving is judged against the current `now()`: passed on if its
//! row is in, held in `entering` (by start) if it is early, dropped if it is past its end. A row
//! passed on with a finite end is held in `leaving` (by end). At each barrier the epoch's time
//! (the [`Clock`]'s `now`) moves the filter on: it retracts the rows whose end it reached and emits
//! those whose start it reached, so at every commit the output is what the batch query gives
//! at that epoch's `now()`, and the work is proportional to the rows that enter or leave, not
//! to the rows held. Both indexes are [`RowsByTime`] tables; `now()` and their counts go into
//! the checkpoint record. Rows stay in their shard (each shard's rows under its own prefix).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::row::RowConverter;
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::operator::Operator;
use crate::error::Result;
use crate::state::expiry::Expiring;
use crate::state::keyed::Flush;
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::rows_by_time::{decode_changes, RowsByTime, TakenRows};
use crate::state::store::WriteBatch;
use crate::state::table::row_codec;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::window::{time_from_key, time_key, to_nanos};
use crate::types::ChangeBatch;

/// One bound: the row expression (a time) plus `offset` nanoseconds is where the row enters
/// (`end` false) or leaves.
pub struct RowBound {
    pub value: Arc<dyn PhysicalExpr>,
    pub offset: i64,
    pub end: bool,
}

pub struct TemporalFilter {
    bounds: Vec<RowBound>,
    /// The conditions, for EXPLAIN.
    text: String,
    codec: RowConverter,
    schema: SchemaRef,
    /// The epoch time changes are judged against: the latest the filter moved to at a barrier
    /// (None before the first).
    now: Option<i64>,
    /// Rows not in yet, by start; each row's bytes follow its end (`time_key`).
    entering: RowsByTime,
    /// Rows in, with a finite end, by end.
    leaving: RowsByTime,
    view: ViewStatus,
}

impl TemporalFilter {
    pub fn new(
        bounds: Vec<RowBound>,
        text: String,
        schema: SchemaRef,
        (entering, leaving): (RowsByTime, RowsByTime),
        view: impl Into<ViewStatus>,
    ) -> Result<TemporalFilter> {
        let codec = row_codec(&schema)?;
        Ok(TemporalFilter { bounds, text, codec, schema, now: None, entering, leaving, view: view.into() })
    }

    /// Each row's `[start, end)`, None where a bound is NULL.
    fn spans(&self, batch: &ChangeBatch) -> Result<Vec<Option<(i64, i64)>>> {
        let mut spans = vec![Some((i64::MIN, i64::MAX)); batch.num_rows()];
        for bound in &self.bounds {
            let values = nanos(&evaluate(&bound.value, &batch.data, &self.view)?)?;
            for (span, value) in spans.iter_mut().zip(values.iter()) {
                *span = match (*span, value) {
                    (Some((start, end)), Some(v)) => {
                        let at = v.saturating_add(bound.offset);
                        Some(if bound.end { (start, end.min(at)) } else { (start.max(at), end) })
                    }
                    _ => None,
                };
            }
        }
        Ok(spans)
    }

    /// Moves the time to `now`: rows whose end it reached leave, rows whose start it reached
    /// enter (unless their end is reached too).
    fn advance(&mut self, now: i64) -> Result<Vec<ChangeBatch>> {
        let left = self.leaving.expire_through(now)?;
        let mut entered: TakenRows = Vec::new();
        for (_, bytes, count) in self.entering.expire_through(now)? {
            let end = time_from_key(&bytes);
            if end > now {
                let row = bytes[8..].to_vec();
                if end != i64::MAX {
                    self.leaving.add(end, &row, count)?;
                }
                entered.push((end, row, count));
            }
        }
        self.now = Some(now);
        let left = decode_changes(&self.codec, &self.schema, left, -1)?;
        let entered = decode_changes(&self.codec, &self.schema, entered, 1)?;
        Ok(left.into_iter().chain(entered).collect())
    }
}

/// A time column as nanoseconds since 1970 (dates at midnight UTC).
fn nanos(values: &ArrayRef) -> Result<datafusion::arrow::array::TimestampNanosecondArray> {
    let values = match values.data_type() {
        DataType::Date32 | DataType::Date64 => cast(values, &DataType::Timestamp(TimeUnit::Nanosecond, None))?,
        _ => Arc::clone(values),
    };
    to_nanos(&values)
}

impl Operator for TemporalFilter {
    fn describe(&self) -> String {
        format!("TemporalFilter: {}", self.text)
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        // A new view's first rows come after its first time (its backfill).
        let now = self.now.or(clock.now).unwrap_or(i64::MIN);
        let spans = self.spans(&batch)?;
        let rows = self.codec.convert_columns(batch.data.columns())?;
        let mut keep = Vec::new();
        for (i, span) in spans.iter().enumerate() {
            let Some((start, end)) = *span else { continue };
            let sign = batch.ops[i].sign();
            if end <= start || end <= now {
                continue;
            }
            let row = rows.row(i);
            if now < start {
                let mut waiting = time_key(end).to_vec();
                waiting.extend_from_slice(row.as_ref());
                self.entering.add(start, &waiting, sign)?;
                continue;
            }
            if end != i64::MAX {
                self.leaving.add(end, row.as_ref(), sign)?;
            }
            keep.push(i as u32);
        }
        if keep.len() == batch.num_rows() {
            return Ok(vec![batch]);
        }
        if keep.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![batch.take(&keep)?])
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        match clock.now {
            // The clock may be pinned back: the filter never goes back.
            Some(now) if self.now.is_none_or(|current| now > current) => self.advance(now),
            _ => Ok(vec![]),
        }
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.entering.flush(wb, flush);
        self.leaving.flush(wb, flush);
    }

    fn save_record(&self) -> Option<Vec<u8>> {
        let mut record = RecordWriter::default();
        record.opt_i64(self.now);
        self.entering.save(&mut record);
        self.leaving.save(&mut record);
        Some(record.finish())
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        let what = self.describe();
        let mut record = RecordReader::new(record, &what)?;
        self.now = record.opt_i64()?;
        self.entering.restore(&mut record)?;
        self.leaving.restore(&mut record)?;
        record.finish()
    }

    /// Rows held (waiting to enter or to leave).
    fn open_windows(&self) -> usize {
        self.entering.waiting() + self.leaving.waiting()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::operator::testing::assert_restore_continues;
    use crate::state::keyed::KeyedState;
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use datafusion::physical_expr::expressions::Column;

    const S: i64 = 1_000_000_000;

    /// `ts > now() - 10 s AND ts <= now()` over rows (ts, id): in from ts to ts + 10 s.
    fn sliding(store: &Arc<dyn StateStore>) -> TemporalFilter {
        let schema = from_pretty("S I\n").schema();
        let ts: Arc<dyn PhysicalExpr> = Arc::new(Column::new("c0", 0));
        let bounds = vec![
            RowBound { value: Arc::clone(&ts), offset: 10 * S, end: true },
            RowBound { value: ts, offset: 0, end: false },
        ];
        let table =
            |id| RowsByTime::new(KeyedState::new(id, Arc::clone(store), 4).write_back(None).unwrap(), vec![0, 0]);
        TemporalFilter::new(bounds, "sliding".into(), schema, (table(1), table(2)), "v").unwrap()
    }

    /// Changes as `to_pretty` shows them, from `from_pretty` rows (times in seconds).
    fn pretty(rows: &str) -> String {
        from_pretty(&format!("S I\n{rows}")).to_pretty()
    }

    fn at(now: i64) -> Clock {
        Clock { watermark: None, now: Some(now * S) }
    }

    fn barrier(f: &mut TemporalFilter, now: i64) -> Vec<String> {
        f.on_barrier(&at(now)).unwrap().iter().map(|b| b.to_pretty()).collect()
    }

    #[test]
    fn rows_enter_at_their_start_and_leave_at_their_end() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut f = sliding(&store);
        // At 100 s: 95 is in, 105 is early, 80 is past; 99 comes and goes.
        let out = f.apply(0, from_pretty("S I\n+ 95 1\n+ 105 2\n+ 80 3\n+ 99 4"), &at(100)).unwrap();
        assert_eq!(out[0].to_pretty(), pretty("+ 95 1\n+ 99 4"));
        f.apply(0, from_pretty("S I\n- 99 4"), &at(100)).unwrap();
        assert!(barrier(&mut f, 100).is_empty());
        assert_eq!(f.open_windows(), 2);
        // At 106 s: 95 leaves (its end, 105 s, passed); 105 enters.
        assert_eq!(barrier(&mut f, 106), vec![pretty("- 95 1"), pretty("+ 105 2")]);
        // The clock pinned back changes nothing.
        assert!(barrier(&mut f, 50).is_empty());
        // Past both ends at once: a row that had not entered never shows.
        f.apply(0, from_pretty("S I\n+ 110 5"), &at(50)).unwrap();
        assert_eq!(barrier(&mut f, 200), vec![pretty("- 105 2")]);
        assert_eq!(f.open_windows(), 0);
    }

    #[test]
    fn a_restored_filter_continues_as_one_that_never_stopped() {
        use crate::operators::operator::testing::Event::{Changes, Time};
        let make = |store: &Arc<dyn StateStore>| -> Box<dyn Operator> { Box::new(sliding(store)) };
        assert_restore_continues(
            &make,
            &[
                &[Time(100 * S), Changes(0, "S I\n+ 95 1\n+ 103 2\n+ 120 3")],
                &[Changes(0, "S I\n- 103 2\n+ 104 4\n+ 104 4"), Time(104 * S)],
                &[Time(106 * S)],
                &[Changes(0, "S I\n+ 125 5\n- 104 4"), Time(121 * S)],
                &[Time(140 * S)],
            ],
        );
    }
}
