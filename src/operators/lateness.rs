//! [`LateRows`]: what the window assigners (`WindowAssign`, `SessionAssign`) do with rows that
//! came too late, in one place.
//!
//! A late row (with the window it was late for) is counted (`weir_late_rows_total`,
//! `weir_catalog.event_time`), kept for the view's `LATE ROWS TO` table if it has one, and
//! recorded in a *ledger* in the view's durable state table, keyed by the row and its window.
//! Views are rebuilt from their inputs at start: every row then arrives at once, before any
//! watermark, so nothing would look late. While rebuilding (until the first watermark) the
//! ledger's rows are left out again, so the rebuilt view equals the one that never stopped.

use crate::types::hash::HashMap;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::error::Result;
use crate::metrics;
use crate::state::keyed::{decode_count, KeyedState};
use crate::state::store::WriteBatch;
use crate::types::ChangeBatch;

pub struct LateRows {
    /// Whether late rows are kept for a `LATE ROWS TO` table.
    keep: bool,
    kept: Vec<RecordBatch>,
    /// Late rows by (row, window), in the view's durable state table under `prefix`.
    ledger: KeyedState,
    prefix: u8,
    /// Rows with their window (the assigner's output columns).
    codec: RowConverter,
    /// The ledger's rows still to leave out while rebuilding.
    to_skip: HashMap<Vec<u8>, i64>,
    rebuilding: bool,
    view: String,
}

impl LateRows {
    /// `schema`: the assigner's output (input columns, `window_start`, `window_end`).
    pub fn new(schema: &SchemaRef, keep: bool, ledger: (KeyedState, u8), view: &str) -> Result<LateRows> {
        let codec = RowConverter::new(schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?;
        let (ledger, prefix) = ledger;
        let to_skip = ledger
            .scan_prefix(&[prefix], 1)?
            .into_iter()
            .map(|(key, value)| Ok((key[1..].to_vec(), decode_count(&value)?)))
            .collect::<Result<_>>()?;
        Ok(LateRows {
            keep,
            kept: Vec::new(),
            ledger,
            prefix,
            codec,
            to_skip,
            rebuilding: true,
            view: view.to_string(),
        })
    }

    /// Whether rows are still to be left out (rebuilding, with late rows in the ledger).
    pub fn skipping(&self) -> bool {
        self.rebuilding && !self.to_skip.is_empty()
    }

    /// The indices of `windowed`'s rows to keep while rebuilding: all but the ledger's; None
    /// when every row stays.
    pub fn not_late_before(&mut self, windowed: &ChangeBatch) -> Result<Option<Vec<u32>>> {
        if !self.skipping() {
            return Ok(None);
        }
        let rows = self.codec.convert_columns(windowed.data.columns())?;
        Ok(Some(
            (0..windowed.num_rows() as u32)
                .filter(|&i| {
                    if windowed.ops[i as usize].sign() < 0 {
                        return true;
                    }
                    match self.to_skip.get_mut(rows.row(i as usize).as_ref()) {
                        Some(n) if *n > 0 => {
                            *n -= 1;
                            false
                        }
                        _ => true,
                    }
                })
                .collect(),
        ))
    }

    /// The first watermark: the rebuild is over.
    pub fn rebuilt(&mut self) {
        self.rebuilding = false;
        self.to_skip = HashMap::default();
    }

    /// Takes the rows of `late` (with their windows, as the assigner outputs them): counts
    /// them, records them in the ledger and keeps them for the late-rows table.
    pub fn divert(&mut self, late: ChangeBatch) -> Result<()> {
        if late.is_empty() {
            return Ok(());
        }
        metrics::LATE_ROWS_TOTAL.with_label_values(&[&self.view]).inc_by(late.num_rows() as u64);
        crate::system::record_late_rows(&self.view, late.num_rows() as u64);
        let inserted: Vec<u32> = (0..late.num_rows() as u32).filter(|&i| late.ops[i as usize].sign() > 0).collect();
        let inserted = late.take(&inserted)?;
        for row in self.codec.convert_columns(inserted.data.columns())?.iter() {
            let mut key = Vec::with_capacity(row.as_ref().len() + 1);
            key.push(self.prefix);
            key.extend_from_slice(row.as_ref());
            self.ledger.add_count(&key, 1, 1)?;
        }
        if self.keep && inserted.num_rows() > 0 {
            self.kept.push(inserted.data);
        }
        Ok(())
    }

    pub fn take(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.kept)
    }

    pub fn flush(&mut self, wb: &mut WriteBatch) {
        self.ledger.flush(wb);
    }
}
