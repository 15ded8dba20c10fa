//! WindowAssign: puts each row of a relation into its `TUMBLE` / `HOP` windows (adding
//! `window_start` and `window_end`), and is where a view judges lateness.
//!
//! A row's copy for a window is *late* when the view's watermark has already passed that
//! window's end plus the allowed lateness: the window's result can no longer change (its state
//! is gone). Late copies do not go on; they are counted (`weir_late_rows_total`) and handed to
//! the runtime ([`Operator::take_late_rows`]) for the view's `LATE ROWS TO` table. Rows are
//! judged against the watermark of the data before them (a statement's rows do not make each
//! other late), so the verdict depends only on the order of the input, not on barrier timing.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use super::lateness::LateRows;
use super::operator::Operator;
use crate::error::Result;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::window::{close_times, TimeColumn, WindowSpec};
use crate::types::{ChangeBatch, Op};

pub struct WindowAssign {
    spec: WindowSpec,
    /// Input columns, `window_start`, `window_end`.
    schema: SchemaRef,
    /// How long after its end a window still takes rows (nanoseconds).
    lateness: i64,
    late: LateRows,
}

impl WindowAssign {
    pub fn new(
        spec: WindowSpec,
        schema: SchemaRef,
        lateness: i64,
        keep_late: bool,
        view: impl Into<ViewStatus>,
    ) -> WindowAssign {
        WindowAssign { spec, schema, lateness, late: LateRows::new(keep_late, view) }
    }
}

impl Operator for WindowAssign {
    fn describe(&self) -> String {
        let lateness = match self.lateness {
            0 => String::new(),
            lateness => format!(", lateness {}s", lateness as f64 / 1e9),
        };
        format!(
            "WindowAssign: {} on {}{lateness}",
            self.spec.describe(),
            self.schema.field(self.spec.time_column).name()
        )
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let (data, origins) = self.spec.assign(&batch.data, &self.schema)?;
        let ops: Vec<Op> = origins.iter().map(|&o| batch.ops[o as usize]).collect();
        let windowed = ChangeBatch::new(data, ops);
        let keep = match clock.final_through(self.lateness) {
            None => None,
            Some(final_through) => {
                // Late: the window is final.
                let end_column = windowed.data.num_columns() - 1;
                let closes = close_times(windowed.data.column(end_column), TimeColumn { close_offset: 0 })?;
                let is_late = |c: &Option<i64>| c.is_some_and(|c| c <= final_through);
                if !closes.iter().any(is_late) {
                    None
                } else {
                    let (late, on_time): (Vec<u32>, Vec<u32>) =
                        (0..windowed.num_rows() as u32).partition(|&i| is_late(&closes[i as usize]));
                    self.late.divert(windowed.take(&late)?)?;
                    Some(on_time)
                }
            }
        };
        match keep {
            Some(keep) if keep.len() < windowed.num_rows() => Ok(vec![windowed.take(&keep)?]),
            _ => Ok(vec![windowed]),
        }
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.late.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::window::{from_nanos, WindowKind};
    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;

    const S: i64 = 1_000_000_000;

    fn rows(times: &[i64]) -> ChangeBatch {
        let time_type = DataType::Timestamp(TimeUnit::Microsecond, None);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("t", time_type.clone(), true),
        ]));
        let ids: ArrayRef = Arc::new(Int64Array::from(times.to_vec()));
        let t = from_nanos(times.iter().map(|&t| Some(t * S)).collect::<Vec<_>>(), &time_type).unwrap();
        ChangeBatch::inserts(RecordBatch::try_new(schema, vec![ids, t]).unwrap())
    }

    fn assigner() -> WindowAssign {
        let spec = WindowSpec::new(WindowKind::Tumble { size: 10 * S }, 0, 1).unwrap();
        let schema = spec.output_schema(&rows(&[]).schema());
        WindowAssign::new(spec, schema, 0, true, "test")
    }

    #[test]
    fn late_rows_are_diverted() {
        let mut a = assigner();
        assert_eq!(a.apply(0, rows(&[1, 12]), &Clock::default()).unwrap()[0].num_rows(), 2);
        // 5 s is in [0, 10): closed; 25 s is not.
        let out = a.apply(0, rows(&[5, 25]), &Clock::at_watermark(20 * S)).unwrap();
        assert_eq!(out[0].num_rows(), 1);
        let late = a.take_late_rows();
        assert_eq!(late.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert!(a.take_late_rows().is_empty());
    }
}
