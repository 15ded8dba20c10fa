//! The contract between an operator and the runtime that drives it (`dataflow::job`).
//!
//! The runtime owns the loop: it feeds each input's changes to [`Operator::apply`], aligns
//! barriers, and at each barrier calls [`Operator::on_barrier`] on every operator, children
//! before parents, passing what each returns to its parent. Operators never see channels,
//! barriers or the store: they only turn changes into changes.

use crate::error::Result;
use crate::state::store::WriteBatch;
use crate::types::ChangeBatch;

pub trait Operator: Send {
    /// A one-line description for EXPLAIN and logs.
    fn describe(&self) -> String;

    /// Takes changes on input `input` (0 for single-input operators) and returns the changes
    /// of this operator's output they cause now.
    fn apply(&mut self, input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>>;

    /// The epoch is complete: returns output changes held back until now (aggregates emit
    /// their groups' new values once per epoch).
    fn on_barrier(&mut self) -> Result<Vec<ChangeBatch>> {
        Ok(vec![])
    }

    /// Adds the epoch's state changes to the epoch's write batch (after `on_barrier`).
    fn flush_state(&mut self, _wb: &mut WriteBatch) {}

    /// The view's event-time watermark advanced to `watermark` (nanoseconds): no more rows with
    /// an event time below it are expected. Arrives after the data it follows; monotone.
    fn on_watermark(&mut self, _watermark: i64) {}

    /// Rows that arrived after their window could no longer change, since the last call
    /// (input columns, then `window_start`, `window_end`); the runtime stores and counts them.
    fn take_late_rows(&mut self) -> Vec<datafusion::arrow::array::RecordBatch> {
        vec![]
    }

    /// Windows this operator holds state for (a metric).
    fn open_windows(&self) -> usize {
        0
    }
}

/// Test support shared by the operators' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use super::Operator;
    use crate::state::store::{StateStore, WriteBatch};
    use crate::types::change_batch::from_pretty;

    /// One epoch: applies `input` (`from_pretty` text) on input 0, runs the barrier, commits the
    /// operator's state to `store`; returns the output as `to_pretty` text.
    pub fn step(op: &mut dyn Operator, store: &Arc<dyn StateStore>, input: &str) -> String {
        op.apply(0, from_pretty(input)).unwrap();
        let out: String = op.on_barrier().unwrap().iter().map(|b| b.to_pretty()).collect();
        let mut wb = WriteBatch::default();
        op.flush_state(&mut wb);
        store.write(wb).unwrap();
        out
    }
}
