//! Evaluating DataFusion physical expressions inside a view, and [`OrderKey`], an `ORDER BY`
//! key as operators evaluate it (a Top-N's, a window's, an ordered aggregate's).
//!
//! A runtime error in one row (division by zero, a bad cast, an overflow) must neither stop the
//! view nor drop the row silently: that row's value becomes NULL, and the error is counted in
//! `weir_view_errors_total{view}` and logged. The batch is first evaluated whole; only when that
//! fails is it evaluated row by row to find the failing rows. Errors are listed in
//! `weir_catalog.view_errors`.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::concat;
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError};
use crate::metrics;
use crate::status::ViewStatus;

/// One `ORDER BY` key: an expression over the input, its type and its direction.
#[derive(Clone)]
pub struct OrderKey {
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: datafusion::arrow::datatypes::DataType,
    pub options: datafusion::arrow::compute::SortOptions,
}

pub fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch, view: &ViewStatus) -> Result<ArrayRef> {
    match expr.evaluate(batch).and_then(|v| v.into_array(batch.num_rows())) {
        Ok(array) => Ok(array),
        Err(first) => {
            let data_type = expr.data_type(&batch.schema())?;
            let mut pieces: Vec<ArrayRef> = Vec::with_capacity(batch.num_rows());
            let mut failures = 0u64;
            for row in 0..batch.num_rows() {
                let one = batch.slice(row, 1);
                match expr.evaluate(&one).and_then(|v| v.into_array(1)) {
                    Ok(a) => pieces.push(a),
                    Err(_) => {
                        failures += 1;
                        pieces.push(new_null_array(&data_type, 1));
                    }
                }
            }
            let message = WeirError::from(first).message;
            metrics::VIEW_ERRORS_TOTAL.with_label_values(&[view]).inc_by(failures.max(1));
            view.error(&message, failures.max(1));
            tracing::warn!(view = %view, rows = failures, "expression failed, the rows get NULL: {message}");
            if pieces.is_empty() {
                return Ok(new_null_array(&data_type, 0));
            }
            let refs: Vec<&dyn datafusion::arrow::array::Array> = pieces.iter().map(|a| a.as_ref()).collect();
            Ok(concat(&refs)?)
        }
    }
}
