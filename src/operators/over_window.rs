//! Window functions over partitions: `lag`, `lead`, `first_value`, `last_value`, running
//! `sum` / `count` / `avg` / `min` / `max`, `row_number`, `rank` and every other function and
//! frame (`ROWS` / `RANGE`) DataFusion computes, in `OVER (PARTITION BY p ORDER BY o ...)`.
//!
//! Keeps each partition's rows in order ([`sorted_rows`]: ties in `o` ranked by the whole row,
//! so the answer does not depend on arrival order). A change touches its partition; at the
//! barrier each partition touched in the epoch is computed again whole, by DataFusion's own
//! window expressions over its rows in order (so a view gives what the query gives), and the
//! output rows that changed are emitted: the rows the partition gave at its first touch in the
//! epoch that it no longer gives are deleted, the new ones inserted. A partition costs a read of
//! its rows and one evaluation before and after each epoch that touches it: fine for partitions of
//! thousands of rows, not for one partition of millions (a Top-N, `WHERE rn <= N`, keeps less).
//!
//! Output: the input's columns, then one column per function. Planned by
//! `stream_plan::translate` for a `WindowAggr` that is not a bounded Top-N.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::WindowExpr;

use super::eval::evaluate;
use super::eval::OrderKey;
use super::operator::Operator;
use crate::error::Result;
use crate::state::keyed::{Flush, KeyedState};
use crate::state::sorted_rows;
use crate::state::store::WriteBatch;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::hash::HashMap;
use crate::types::{ChangeBatch, Op};

/// What an [`OverWindow`] computes (from the stream plan's node).
#[derive(Clone)]
pub struct OverWindowConfig {
    pub partition_by: Vec<(Arc<dyn PhysicalExpr>, DataType)>,
    pub order_by: Vec<OrderKey>,
    /// The window functions, over a partition's rows in order (the input's columns).
    pub functions: Vec<Arc<dyn WindowExpr>>,
    /// The input's columns, then one per function.
    pub schema: SchemaRef,
}

pub struct OverWindow {
    config: OverWindowConfig,
    partition_codec: Option<RowConverter>,
    order_codec: Option<RowConverter>,
    /// The input's rows, and the output's (to compare a partition's output before and after).
    row_codec: RowConverter,
    output_codec: RowConverter,
    input_schema: SchemaRef,
    state: KeyedState,
    /// Partitions touched this epoch, with the output rows they gave before it.
    touched: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    view: ViewStatus,
}

impl OverWindow {
    pub fn new(config: OverWindowConfig, state: KeyedState, view: impl Into<ViewStatus>) -> Result<OverWindow> {
        let fields = config.schema.fields();
        let inputs = fields.len() - config.functions.len();
        let input_schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields[..inputs].to_vec()));
        let sort_fields = |types: Vec<SortField>| (!types.is_empty()).then(|| RowConverter::new(types)).transpose();
        Ok(OverWindow {
            partition_codec: sort_fields(config.partition_by.iter().map(|(_, t)| SortField::new(t.clone())).collect())?,
            order_codec: sort_fields(
                config.order_by.iter().map(|o| SortField::new_with_options(o.data_type.clone(), o.options)).collect(),
            )?,
            row_codec: RowConverter::new(
                input_schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect(),
            )?,
            output_codec: RowConverter::new(fields.iter().map(|f| SortField::new(f.data_type().clone())).collect())?,
            input_schema,
            config,
            state,
            touched: HashMap::default(),
            view: view.into(),
        })
    }

    fn encode(
        &self,
        codec: &Option<RowConverter>,
        exprs: Vec<&Arc<dyn PhysicalExpr>>,
        batch: &RecordBatch,
    ) -> Result<Option<Rows>> {
        let Some(codec) = codec else { return Ok(None) };
        let columns = exprs.into_iter().map(|e| evaluate(e, batch, &self.view)).collect::<Result<Vec<ArrayRef>>>()?;
        Ok(Some(codec.convert_columns(&columns)?))
    }

    /// The output rows `partition` gives now (encoded), its rows in order with each function's
    /// value.
    fn output(&self, partition: &[u8]) -> Result<Vec<Vec<u8>>> {
        let rows = sorted_rows::rows(&self.state, partition)?;
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let parser = self.row_codec.parser();
        let mut columns = self.row_codec.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let batch = RecordBatch::try_new(Arc::clone(&self.input_schema), columns.clone())?;
        let fields = self.config.schema.fields();
        for (i, function) in self.config.functions.iter().enumerate() {
            let values = function.evaluate(&batch)?;
            let field = &fields[self.input_schema.fields().len() + i];
            columns.push(match values.data_type() == field.data_type() {
                true => values,
                false => datafusion::arrow::compute::cast(&values, field.data_type())?,
            });
        }
        let encoded = self.output_codec.convert_columns(&columns)?;
        Ok(encoded.iter().map(|r| r.as_ref().to_vec()).collect())
    }
}

impl Operator for OverWindow {
    fn describe(&self) -> String {
        let partition: Vec<String> = self.config.partition_by.iter().map(|(e, _)| e.to_string()).collect();
        let order: Vec<String> = self.config.order_by.iter().map(|o| o.expr.to_string()).collect();
        let functions: Vec<String> = self.config.functions.iter().map(|f| f.name().to_string()).collect();
        format!(
            "OverWindow: [{}] partition by [{}] order by [{}]",
            functions.join(", "),
            partition.join(", "),
            order.join(", ")
        )
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        if batch.is_empty() {
            return Ok(vec![]);
        }
        let partitions =
            self.encode(&self.partition_codec, self.config.partition_by.iter().map(|(e, _)| e).collect(), &batch.data)?;
        let orders =
            self.encode(&self.order_codec, self.config.order_by.iter().map(|o| &o.expr).collect(), &batch.data)?;
        let rows = self.row_codec.convert_columns(batch.data.columns())?;
        let mut key = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            let order = orders.as_ref().map_or(&[][..], |o| o.row(i).data());
            if !self.touched.contains_key(partition) {
                let before = self.output(partition)?;
                self.touched.insert(partition.to_vec(), before);
            }
            sorted_rows::add(&mut self.state, &mut key, partition, order, rows.row(i).data(), op.sign())?;
        }
        Ok(vec![])
    }

    fn on_barrier(&mut self, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let mut touched: Vec<(Vec<u8>, Vec<Vec<u8>>)> = std::mem::take(&mut self.touched).into_iter().collect();
        touched.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Vec<u8>, Op)> = Vec::new();
        for (partition, before) in touched {
            let after = self.output(&partition)?;
            // The partition's output as multisets: what went, then what came.
            let mut counts: HashMap<&[u8], i64> = HashMap::default();
            for row in &before {
                *counts.entry(row.as_slice()).or_insert(0) -= 1;
            }
            for row in &after {
                *counts.entry(row.as_slice()).or_insert(0) += 1;
            }
            for row in before.iter().chain(&after) {
                let Some(count) = counts.get_mut(row.as_slice()) else { continue };
                let op = if *count < 0 { Op::Delete } else { Op::Insert };
                for _ in 0..count.unsigned_abs() {
                    out.push((row.clone(), op));
                }
                *count = 0;
            }
        }
        if out.is_empty() {
            return Ok(vec![]);
        }
        let parser = self.output_codec.parser();
        let columns = self.output_codec.convert_rows(out.iter().map(|(row, _)| parser.parse(row)))?;
        let data = RecordBatch::try_new(Arc::clone(&self.config.schema), columns)?;
        Ok(vec![ChangeBatch::new(data, out.into_iter().map(|(_, op)| op).collect())])
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.state.flush(wb, flush);
    }
}
