//! Inner equi-join of two changelogs, with an optional residual condition.
//!
//! Each side keeps its rows (as arrow-row bytes, with multiplicities) by join key. A change on
//! one side is joined with the other side's current rows and emitted with the change's op, so
//! `Δ(L ⋈ R) = ΔL ⋈ R + L ⋈ ΔR` holds change by change. Rows with a NULL key never match, as in
//! SQL. State lives in memory for now.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::filter::Filter;
use super::operator::Operator;
use crate::error::Result;
use crate::types::{ChangeBatch, Op};

struct Side {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    key_codec: RowConverter,
    row_codec: RowConverter,
    /// join key -> row -> multiplicity
    rows: HashMap<Vec<u8>, HashMap<Vec<u8>, i64>>,
}

pub struct HashJoin {
    sides: [Side; 2],
    schema: SchemaRef,
    residual: Option<Filter>,
    view: String,
}

impl HashJoin {
    /// `left_keys[i] = right_keys[i]` are the equi-join conditions.
    pub fn new(
        left: (SchemaRef, Vec<Arc<dyn PhysicalExpr>>),
        right: (SchemaRef, Vec<Arc<dyn PhysicalExpr>>),
        schema: SchemaRef,
        residual: Option<Arc<dyn PhysicalExpr>>,
        view: &str,
    ) -> Result<HashJoin> {
        let side = |(input, keys): (SchemaRef, Vec<Arc<dyn PhysicalExpr>>)| -> Result<Side> {
            let key_fields = keys
                .iter()
                .map(|k| Ok(SortField::new(k.data_type(&input)?)))
                .collect::<Result<Vec<_>>>()?;
            let row_fields = input
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            Ok(Side {
                keys,
                key_codec: RowConverter::new(key_fields)?,
                row_codec: RowConverter::new(row_fields)?,
                rows: HashMap::new(),
            })
        };
        Ok(HashJoin {
            sides: [side(left)?, side(right)?],
            schema,
            residual: residual.map(|r| Filter::new(r, view)),
            view: view.to_string(),
        })
    }
}

impl Operator for HashJoin {
    fn describe(&self) -> String {
        let keys = |s: &Side| {
            s.keys
                .iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let residual = self
            .residual
            .as_ref()
            .map(|r| format!(", {}", r.describe()))
            .unwrap_or_default();
        format!(
            "HashJoin: inner on [{}] = [{}]{residual}",
            keys(&self.sides[0]),
            keys(&self.sides[1])
        )
    }

    fn apply(&mut self, input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        let (this, other) = if input == 0 { (0, 1) } else { (1, 0) };
        let key_arrays = self.sides[this]
            .keys
            .iter()
            .map(|k| evaluate(k, &batch.data, &self.view))
            .collect::<Result<Vec<_>>>()?;
        let keys = self.sides[this].key_codec.convert_columns(&key_arrays)?;
        let rows = self.sides[this]
            .row_codec
            .convert_columns(batch.data.columns())?;

        // Matches: (row of this batch, bytes of the other side's row, op), one per multiplicity.
        let mut this_rows: Vec<u32> = Vec::new();
        let mut other_rows: Vec<Vec<u8>> = Vec::new();
        let mut ops: Vec<Op> = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            if key_arrays.iter().any(|k| k.is_null(i)) {
                continue;
            }
            let key = keys.row(i).as_ref().to_vec();
            if let Some(matches) = self.sides[other].rows.get(&key) {
                for (other_row, count) in matches {
                    for _ in 0..*count {
                        this_rows.push(i as u32);
                        other_rows.push(other_row.clone());
                        ops.push(*op);
                    }
                }
            }
            let bucket = self.sides[this].rows.entry(key.clone()).or_default();
            let count = bucket.entry(rows.row(i).as_ref().to_vec()).or_insert(0);
            *count += op.sign();
            if *count == 0 {
                bucket.remove(rows.row(i).as_ref());
                if bucket.is_empty() {
                    self.sides[this].rows.remove(&key);
                }
            }
        }
        if ops.is_empty() {
            return Ok(vec![]);
        }
        let idx = UInt32Array::from(this_rows);
        let this_columns: Vec<ArrayRef> = batch
            .data
            .columns()
            .iter()
            .map(|c| take(c, &idx, None))
            .collect::<std::result::Result<_, _>>()?;
        let parser = self.sides[other].row_codec.parser();
        let other_columns = self.sides[other]
            .row_codec
            .convert_rows(other_rows.iter().map(|r| parser.parse(r)))?;
        let columns = if this == 0 {
            [this_columns, other_columns].concat()
        } else {
            [other_columns, this_columns].concat()
        };
        let joined = ChangeBatch::new(
            RecordBatch::try_new(Arc::clone(&self.schema), columns)?,
            ops,
        );
        match &mut self.residual {
            Some(filter) => filter.apply(0, joined),
            None => Ok(vec![joined]),
        }
    }
}
