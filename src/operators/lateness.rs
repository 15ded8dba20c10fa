//! [`LateRows`]: what the window assigners (`WindowAssign`, `SessionAssign`) do with rows that
//! came too late, in one place.
//!
//! A late row (with the window it was late for) is counted (`weir_late_rows_total`,
//! `weir_catalog.event_time`) and kept for the view's `LATE ROWS TO` table if it has one. Views
//! are restored from checkpoints, never rebuilt (ADR 11), so which rows were late is decided
//! once, when they arrive.

use datafusion::arrow::array::RecordBatch;

use crate::error::Result;
use crate::metrics;
use crate::status::ViewStatus;
use crate::types::ChangeBatch;

pub struct LateRows {
    /// Whether late rows are kept for a `LATE ROWS TO` table.
    keep: bool,
    kept: Vec<RecordBatch>,
    view: ViewStatus,
}

impl LateRows {
    pub fn new(keep: bool, view: impl Into<ViewStatus>) -> LateRows {
        LateRows { keep, kept: Vec::new(), view: view.into() }
    }

    /// Takes the rows of `late` (with their windows, as the assigner outputs them): counts
    /// them and keeps them for the late-rows table.
    pub fn divert(&mut self, late: ChangeBatch) -> Result<()> {
        if late.is_empty() {
            return Ok(());
        }
        metrics::LATE_ROWS_TOTAL.with_label_values(&[&self.view]).inc_by(late.num_rows() as u64);
        self.view.late_rows(late.num_rows() as u64);
        let inserted: Vec<u32> = (0..late.num_rows() as u32).filter(|&i| late.ops[i as usize].sign() > 0).collect();
        let inserted = late.take(&inserted)?;
        if self.keep && inserted.num_rows() > 0 {
            self.kept.push(inserted.data);
        }
        Ok(())
    }

    pub fn take(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.kept)
    }
}
