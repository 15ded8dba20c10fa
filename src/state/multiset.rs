//! A multiset of rows kept in a [`StateTable`]: each distinct row stored once, keyed by all of
//! its columns, with its multiplicity as a last `Int64` column. A materialized view's rows
//! (`operators::materialize`) and an index's entries (`catalog::index`) are such multisets.
//!
//! [`apply`] nets a batch of changes per distinct row, reads the current multiplicities of the
//! rows that changed in one batched lookup, and adds the puts (new multiplicity) and deletes
//! (none left) to a write batch; it returns the net changes. The caller commits the write batch
//! and is the table's only writer meanwhile (the relation's write lock or its view job), so the
//! multiplicities read are the ones the writes replace.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::Int64Type;

use super::store::{StateStore, WriteBatch};
use super::table::StateTable;
use crate::error::Result;
use crate::types::hash::HashMap;
use crate::types::{ChangeBatch, Op};

/// Brings the multiset `table` up to date with `changes` (rows of the table's columns without
/// the multiplicity) by adding writes to `wb`; returns the net changes, each distinct row as
/// often as its multiplicity changed (None: nothing changed).
pub fn apply(
    table: &StateTable,
    store: &dyn StateStore,
    changes: &ChangeBatch,
    wb: &mut WriteBatch,
) -> Result<Option<ChangeBatch>> {
    if changes.is_empty() {
        return Ok(None);
    }
    let data = &changes.data;
    let keys = table.encode_keys(data)?;

    // Net change per distinct row, in order of first appearance.
    let mut order: Vec<Vec<u8>> = Vec::new();
    let mut net: HashMap<Vec<u8>, (i64, u32)> = HashMap::default();
    for (i, op) in changes.ops.iter().enumerate() {
        let key = keys.row(i).as_ref().to_vec();
        let entry = net.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            (0, i as u32)
        });
        entry.0 += op.sign();
    }

    // Current multiplicities of the changed rows, read in one batched lookup.
    order.retain(|key| net[key].0 != 0);
    let (stored, found) = if table.distribution_columns() == 0 {
        table.get_many(store, &order)?
    } else {
        let changed = take_record_batch(data, &order.iter().map(|key| net[key].1).collect::<UInt32Array>())?;
        table.get_by_columns(store, changed.columns())?
    };
    let counts = stored.column(stored.num_columns() - 1).as_primitive::<Int64Type>();

    let (mut put_rows, mut put_counts, mut delete_rows) = (Vec::new(), Vec::new(), Vec::new());
    let (mut out_rows, mut out_ops) = (Vec::new(), Vec::new());
    for (key, stored_at) in order.iter().zip(found) {
        let (delta, row) = net[key];
        let current = stored_at.map(|i| counts.value(i)).unwrap_or(0);
        let updated = current + delta;
        if updated > 0 {
            put_rows.push(row);
            put_counts.push(updated);
        } else {
            delete_rows.push(row);
        }
        for _ in 0..delta.unsigned_abs() {
            out_rows.push(row);
            out_ops.push(if delta > 0 { Op::Insert } else { Op::Delete });
        }
    }
    if !put_rows.is_empty() {
        let rows = take_record_batch(data, &UInt32Array::from(put_rows))?;
        table.put_batch(&with_counts(table, rows, put_counts)?, wb)?;
    }
    if !delete_rows.is_empty() {
        let n = delete_rows.len();
        let rows = take_record_batch(data, &UInt32Array::from(delete_rows))?;
        table.delete_batch(&with_counts(table, rows, vec![0; n])?, wb)?;
    }
    if out_ops.is_empty() {
        return Ok(None);
    }
    let out = take_record_batch(data, &UInt32Array::from(out_rows))?;
    Ok(Some(ChangeBatch::new(out, out_ops)))
}

/// [`apply`] for rows that are each in the multiset at most once (they hold a unique key of
/// what they come from, an index holding its table's primary key): inserts are put with
/// multiplicity 1 and deletes deleted, in the order given, without reading anything.
pub fn apply_distinct(table: &StateTable, changes: &ChangeBatch, wb: &mut WriteBatch) -> Result<()> {
    let (mut puts, mut deletes) = (Vec::new(), Vec::new());
    // Runs of one kind keep the order of a delete and a put of the same row.
    let flush = |puts: &mut Vec<u32>, deletes: &mut Vec<u32>, wb: &mut WriteBatch| -> Result<()> {
        if !deletes.is_empty() {
            let n = deletes.len();
            let rows = take_record_batch(&changes.data, &UInt32Array::from(std::mem::take(deletes)))?;
            table.delete_batch(&with_counts(table, rows, vec![0; n])?, wb)?;
        }
        if !puts.is_empty() {
            let n = puts.len();
            let rows = take_record_batch(&changes.data, &UInt32Array::from(std::mem::take(puts)))?;
            table.put_batch(&with_counts(table, rows, vec![1; n])?, wb)?;
        }
        Ok(())
    };
    for (i, op) in changes.ops.iter().enumerate() {
        if op.sign() > 0 {
            puts.push(i as u32);
        } else {
            if !puts.is_empty() {
                flush(&mut puts, &mut deletes, wb)?;
            }
            deletes.push(i as u32);
        }
    }
    flush(&mut puts, &mut deletes, wb)
}

/// `rows` with `counts` as their multiplicity column, in the table's stored schema.
fn with_counts(table: &StateTable, rows: RecordBatch, counts: Vec<i64>) -> Result<RecordBatch> {
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(Int64Array::from(counts)) as Arc<dyn Array>);
    Ok(RecordBatch::try_new(Arc::clone(table.schema()), columns)?)
}
