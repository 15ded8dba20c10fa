//! [`NoWatermark`]: runs an operator deaf to the view's watermark.
//!
//! A view's watermark is its inputs' event-time watermark (`WATERMARK FOR column`). A window
//! over another time column of a relation (its processing time, `AS PROCTIME()`, or any other
//! timestamp) is not ordered by that watermark: judging its rows late, or closing its windows,
//! by it would drop rows that are not late. The dataflow builder wraps such a window's assigner
//! in this, and marks its window columns as plain values, so its windows are ordinary groups.

use datafusion::arrow::array::RecordBatch;

use super::operator::Operator;
use crate::error::Result;
use crate::state::keyed::Flush;
use crate::state::store::WriteBatch;
use crate::types::clock::Clock;
use crate::types::ChangeBatch;

pub struct NoWatermark(pub Box<dyn Operator>);

impl Operator for NoWatermark {
    fn describe(&self) -> String {
        format!("{} (not by the watermark)", self.0.describe())
    }

    fn apply(&mut self, input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        self.0.apply(input, batch, &clock.without_watermark())
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        self.0.on_barrier(&clock.without_watermark())
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.0.flush_state(wb, flush)
    }

    fn save_record(&self) -> Option<Vec<u8>> {
        self.0.save_record()
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        self.0.restore_record(record)
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.0.take_late_rows()
    }

    fn open_windows(&self) -> usize {
        self.0.open_windows()
    }
}
