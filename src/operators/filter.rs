//! Filter: keeps the changes of rows for which the condition is true. A row's insert and its
//! later delete are judged by the same condition on the same values, so the output stays a
//! valid changelog.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
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

impl Operator for Filter {
    fn describe(&self) -> String {
        format!("Filter: {}", self.predicate)
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let mask = evaluate(&self.predicate, &batch.data, &self.view)?;
        let mask = mask.as_boolean();
        let keep: Vec<u32> = (0..mask.len()).filter(|&i| mask.is_valid(i) && mask.value(i)).map(|i| i as u32).collect();
        if keep.len() == batch.num_rows() {
            return Ok(vec![batch]);
        }
        Ok(vec![batch.take(&keep)?])
    }
}
