//! A batch as a relation's rows: user columns cast to the columns' types, NOT NULL checked,
//! values fitted to declared types, the processing-time column stamped and hidden row ids added.
//! Every way rows enter a relation passes here: statements (`dml`), sources
//! (`connectors::source`), a replayed source's chunks read again (`replay`) and views' late-row
//! tables (`dataflow::job`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;

use super::Relation;
use crate::error::{Result, SqlState, WeirError};
use crate::types::window::{instant_column, now_nanos};

/// Rejects NULLs in NOT NULL (and primary key) columns with SQLSTATE 23502.
pub fn check_not_null(relation: &Relation, user_columns: &[ArrayRef]) -> Result<()> {
    for (field, column) in relation.schema.fields().iter().zip(user_columns) {
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(WeirError::new(
                SqlState::NOT_NULL_VIOLATION,
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    field.name(),
                    relation.def.name
                ),
            ));
        }
    }
    Ok(())
}

/// Fits values to their columns' declared types (`VARCHAR(3)`: 22001 for a longer value,
/// trailing spaces past the length cut; `jsonb`: JSON, written as jsonb is), as Postgres does
/// when it stores them.
pub fn fit_declared_types(relation: &Relation, user_columns: &mut [ArrayRef]) -> Result<()> {
    for (index, column) in user_columns.iter_mut().enumerate() {
        if let Some(fitted) = relation.declared_type(index).map(|t| t.fit(column.as_ref())).transpose()?.flatten() {
            *column = fitted;
        }
    }
    Ok(())
}

/// Turns a batch of user columns into a batch of stored columns, casting each to the column's
/// type and appending fresh hidden row ids where the table has them.
///
/// A table's processing-time column (`AS PROCTIME()`) gets the current time, whatever the
/// batch holds there; a connector's batches lack it (it is a source's last column).
pub fn to_stored(relation: &Relation, batch: &RecordBatch) -> Result<RecordBatch> {
    let mut columns = user_columns_at(relation, batch, now_nanos())?;
    if relation.has_hidden_row_id() {
        columns.push(relation.allocate_row_ids(batch.num_rows()));
    }
    Ok(RecordBatch::try_new(Arc::clone(relation.table.schema()), columns)?)
}

/// A batch of user columns as the relation's rows, each cast to its column's type, with the
/// processing-time column (if any) stamped `stamp` (nanoseconds): how a replayed source's
/// chunk is read, now and again later ([`crate::catalog::replay`]).
pub fn rows_stamped_at(relation: &Relation, batch: &RecordBatch, stamp: i64) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(Arc::clone(&relation.schema), user_columns_at(relation, batch, stamp)?)?)
}

/// The user columns of [`to_stored`] and [`rows_stamped_at`].
fn user_columns_at(relation: &Relation, batch: &RecordBatch, stamp_nanos: i64) -> Result<Vec<ArrayRef>> {
    check_not_null(relation, batch.columns())?;
    let stamp = relation.def.processing_time;
    // Whether the batch has a column where the stamp goes.
    let stamp_given = batch.num_columns() == relation.schema.fields().len();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(relation.table.schema().fields().len());
    for (i, field) in relation.schema.fields().iter().enumerate() {
        if stamp == Some(i) {
            columns.push(instant_column(stamp_nanos, field.data_type(), batch.num_rows())?);
            continue;
        }
        let col = batch.column(if stamp.is_some_and(|s| i > s) && !stamp_given { i - 1 } else { i });
        columns.push(if col.data_type() == field.data_type() {
            Arc::clone(col)
        } else {
            cast(col, field.data_type())?
        });
    }
    // A connector's rows are as the source has them (a value refused here would stop the
    // source at that offset for good); statements' rows fit their declared lengths.
    if relation.def.connector.is_none() {
        fit_declared_types(relation, &mut columns)?;
    }
    Ok(columns)
}
