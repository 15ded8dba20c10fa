//! [`LookupJoin`]: `JOIN dim FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.k = d.k` — each row of
//! the stream side joined with the row of table `dim` that has its key, as the table is when
//! the row arrives (RisingWave's and Flink's temporal join over processing time).
//!
//! The table is read, never followed: each batch's keys are looked up in one `multi_get` of
//! the table's stored rows (its primary key, which the join condition must pin), so the
//! operator keeps no state, and a later change to the table changes no row already joined.
//! The stream side is append-only (checked when the view is built): a retraction would have to
//! be joined with the table as it was when the row came, which is not kept. Inner joins drop
//! rows without a partner, LEFT joins pad them with NULLs. Conditions of the join besides the
//! key equalities (`residual`) are evaluated on the joined rows; a LEFT join pads the rows they
//! reject. Conditions on the table's own columns (pushed by the optimizer under the join)
//! reject table rows as if they were absent.
//!
//! After a restart, the rows the change log replays into the view are joined with the table as
//! it is then (processing time).
//!
//! Planned by `stream_plan::translate` for a join one of whose sides scans a table named in
//! `FOR SYSTEM_TIME AS OF` (`frontend::system_time`).

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt32Array,
};
use datafusion::arrow::compute::{cast_with_options, take, CastOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::operator::Operator;
use crate::catalog::Relation;
use crate::error::Result;
use crate::state::store::StateStore;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::ChangeBatch;

/// Which side the table is on, and whether rows without a partner stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupKind {
    /// `stream JOIN table`: only rows with a partner.
    Inner { table_on_left: bool },
    /// `stream LEFT JOIN table`: every stream row, padded with NULLs without a partner.
    Left,
}

pub struct LookupJoin {
    kind: LookupKind,
    /// Over the stream's rows: the value of each of the table's primary key columns, in key
    /// order.
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The types of the table's primary key columns, in key order.
    key_types: Vec<DataType>,
    table: Arc<Relation>,
    store: Arc<dyn StateStore>,
    /// The table's columns read (indices into its rows), and which of those the join outputs.
    columns: (Vec<usize>, Vec<usize>),
    /// Over the columns read: table rows it rejects count as absent.
    table_filter: Option<Arc<dyn PhysicalExpr>>,
    /// Over the joined rows.
    residual: Option<Arc<dyn PhysicalExpr>>,
    output: SchemaRef,
    view: ViewStatus,
}

impl LookupJoin {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: LookupKind,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        table: Arc<Relation>,
        store: Arc<dyn StateStore>,
        columns: (Vec<usize>, Vec<usize>),
        table_filter: Option<Arc<dyn PhysicalExpr>>,
        residual: Option<Arc<dyn PhysicalExpr>>,
        output: SchemaRef,
        view: impl Into<ViewStatus>,
    ) -> LookupJoin {
        let key_types = table.def.primary_key.iter().map(|&c| table.schema.field(c).data_type().clone()).collect();
        LookupJoin { kind, keys, key_types, table, store, columns, table_filter, residual, output, view: view.into() }
    }

    /// For each stream row, the index of its partner among the returned table rows (the
    /// columns the join outputs), if it has one.
    fn partners(&self, stream: &RecordBatch) -> Result<(RecordBatch, Vec<Option<usize>>)> {
        // Stream values cast to the key columns' types; a value a column cannot hold becomes
        // NULL, which no row has.
        let safe = CastOptions { safe: true, ..Default::default() };
        let mut key_columns: Vec<ArrayRef> = Vec::with_capacity(self.keys.len());
        for (expr, data_type) in self.keys.iter().zip(&self.key_types) {
            let values = evaluate(expr, stream, &self.view)?;
            key_columns.push(cast_with_options(&values, data_type, &safe)?);
        }
        let missing_key: Vec<bool> =
            (0..stream.num_rows()).map(|row| key_columns.iter().any(|c| c.is_null(row))).collect();
        let (rows, mut index) = self.table.rows_by_key(self.store.as_ref(), &key_columns)?;
        let (read, output) = &self.columns;
        let rows = rows.project(read)?;
        for (row, missing) in missing_key.into_iter().enumerate() {
            if missing {
                index[row] = None;
            }
        }
        if let Some(filter) = &self.table_filter {
            let kept = evaluate(filter, &rows, &self.view)?;
            let kept = kept.as_boolean();
            for i in index.iter_mut() {
                if i.is_some_and(|r| !(kept.is_valid(r) && kept.value(r))) {
                    *i = None;
                }
            }
        }
        Ok((rows.project(output)?, index))
    }

    /// The stream rows at `stream_rows` beside the table rows at `table_rows` (a null index:
    /// NULLs), in the output's column order.
    fn joined(
        &self,
        stream: &RecordBatch,
        table: &RecordBatch,
        stream_rows: &UInt32Array,
        table_rows: &UInt32Array,
    ) -> Result<RecordBatch> {
        let taken = |batch: &RecordBatch, rows: &UInt32Array| -> Result<Vec<ArrayRef>> {
            batch
                .columns()
                .iter()
                .map(|c| {
                    if batch.num_rows() == 0 {
                        return Ok(new_null_array(c.data_type(), rows.len()));
                    }
                    Ok(take(c.as_ref(), rows, None)?)
                })
                .collect()
        };
        let (stream_columns, table_columns) = (taken(stream, stream_rows)?, taken(table, table_rows)?);
        let columns = match self.kind {
            LookupKind::Inner { table_on_left: true } => [table_columns, stream_columns].concat(),
            _ => [stream_columns, table_columns].concat(),
        };
        let options = RecordBatchOptions::new().with_row_count(Some(stream_rows.len()));
        Ok(RecordBatch::try_new_with_options(Arc::clone(&self.output), columns, &options)?)
    }
}

impl Operator for LookupJoin {
    fn describe(&self) -> String {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        let kind = match self.kind {
            LookupKind::Inner { .. } => "Inner",
            LookupKind::Left => "Left",
        };
        format!("LookupJoin: {kind}, {} by ({})", self.table.def.name, keys.join(", "))
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        if batch.is_empty() {
            return Ok(vec![]);
        }
        let (table, index) = self.partners(&batch.data)?;
        // The pairs found, joined; the residual conditions pick among them.
        let matched: Vec<u32> = (0..index.len()).filter(|&r| index[r].is_some()).map(|r| r as u32).collect();
        let partners: Vec<u32> = index.iter().flatten().map(|&t| t as u32).collect();
        let (matched, partners) = (UInt32Array::from(matched), UInt32Array::from(partners));
        let mut pairs = self.joined(&batch.data, &table, &matched, &partners)?;
        let mut kept: Vec<u32> = matched.values().to_vec();
        if let Some(residual) = &self.residual {
            let mask = evaluate(residual, &pairs, &self.view)?;
            let mask = mask.as_boolean();
            let pass: Vec<u32> =
                (0..mask.len()).filter(|&i| mask.is_valid(i) && mask.value(i)).map(|i| i as u32).collect();
            pairs = datafusion::arrow::compute::take_record_batch(&pairs, &UInt32Array::from(pass.clone()))?;
            kept = pass.iter().map(|&i| kept[i as usize]).collect();
        }
        let ops = |rows: &[u32]| rows.iter().map(|&r| batch.ops[r as usize]).collect::<Vec<_>>();
        if self.kind != LookupKind::Left {
            return Ok(vec![ChangeBatch::new(pairs, ops(&kept))]);
        }
        // LEFT: the rows without a partner that passed, padded.
        let mut has_partner = vec![false; batch.num_rows()];
        for &r in &kept {
            has_partner[r as usize] = true;
        }
        let alone: Vec<u32> = (0..batch.num_rows() as u32).filter(|&r| !has_partner[r as usize]).collect();
        let mut out = vec![ChangeBatch::new(pairs, ops(&kept))];
        if !alone.is_empty() {
            let nobody = UInt32Array::from(vec![None::<u32>; alone.len()]);
            let padded = self.joined(&batch.data, &table, &UInt32Array::from(alone.clone()), &nobody)?;
            out.push(ChangeBatch::new(padded, ops(&alone)));
        }
        out.retain(|b| !b.is_empty());
        Ok(out)
    }
}
