//! UNION ALL: the changes of every input, relabelled with the union's column names.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use super::operator::Operator;
use crate::error::Result;
use crate::types::clock::Clock;
use crate::types::ChangeBatch;

pub struct Union {
    schema: SchemaRef,
    inputs: usize,
}

impl Union {
    pub fn new(schema: SchemaRef, inputs: usize) -> Union {
        Union { schema, inputs }
    }
}

impl Operator for Union {
    fn describe(&self) -> String {
        format!("Union: {} inputs", self.inputs)
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let data = RecordBatch::try_new(Arc::clone(&self.schema), batch.data.columns().to_vec())?;
        Ok(vec![batch.with_data(data)])
    }
}
