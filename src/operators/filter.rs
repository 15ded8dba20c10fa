//! Filter: keeps the changes of rows for which the condition is true. A row's insert and its
//! later delete are judged by the same condition on the same values, so the output stays a
//! valid changelog.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::operator::Operator;
use crate::error::Result;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::ChangeBatch;

pub struct Filter {
    predicate: Arc<dyn PhysicalExpr>,
    view: ViewStatus,
}

impl Filter {
    pub fn new(predicate: Arc<dyn PhysicalExpr>, view: impl Into<ViewStatus>) -> Filter {
        Filter { predicate, view: view.into() }
    }
}

impl Filter {
    /// Whether each row of `data` passes (a NULL condition does not).
    pub fn passes(&self, data: &RecordBatch) -> Result<Vec<bool>> {
        let mask = evaluate(&self.predicate, data, &self.view)?;
        let mask = mask.as_boolean();
        Ok((0..mask.len()).map(|i| mask.is_valid(i) && mask.value(i)).collect())
    }
}

impl Operator for Filter {
    fn describe(&self) -> String {
        format!("Filter: {}", self.predicate)
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let passes = self.passes(&batch.data)?;
        let keep: Vec<u32> = (0..passes.len()).filter(|&i| passes[i]).map(|i| i as u32).collect();
        if keep.len() == batch.num_rows() {
            return Ok(vec![batch]);
        }
        Ok(vec![batch.take(&keep)?])
    }
}
