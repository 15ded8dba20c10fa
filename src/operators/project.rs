//! Projection: computes the output columns of each row; ops pass through unchanged.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::operator::Operator;
use crate::error::Result;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::ChangeBatch;

pub struct Project {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    view: ViewStatus,
    /// What EXPLAIN calls it (a view's inputs are projections of their relations).
    label: String,
}

impl Project {
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef, view: impl Into<ViewStatus>) -> Project {
        Project { exprs, schema, view: view.into(), label: "Project".into() }
    }

    pub fn with_label(mut self, label: String) -> Project {
        self.label = label;
        self
    }
}

impl Operator for Project {
    fn describe(&self) -> String {
        let exprs: Vec<String> = self.exprs.iter().map(|e| e.to_string()).collect();
        format!("{}: {}", self.label, exprs.join(", "))
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let columns = self.exprs.iter().map(|e| evaluate(e, &batch.data, &self.view)).collect::<Result<Vec<_>>>()?;
        let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let data = RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)?;
        Ok(vec![batch.with_data(data)])
    }
}
