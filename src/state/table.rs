//! [`StateTable`]: the rows of one relation, stored in a [`StateStore`] under one table id.
//!
//! A row is stored as `row_key(table_id, key) -> value`, where `key` is the memcomparable
//! encoding (arrow-row) of the key columns and `value` the arrow-row encoding of the whole row.
//! arrow-row is reversible, so one codec serves both directions, for every Arrow type DataFusion
//! produces. Keys sort like the key columns; values are opaque.
//!
//! The table itself holds no rows in memory: writes go into a [`WriteBatch`] the caller commits,
//! reads go to the store. Decoding bytes that were not written by this codec (a corrupt file)
//! yields a `XX001` error, never a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use super::keys::{row_key, table_prefix, TableId};
use super::store::{ScanControl, StateStore, WriteBatch};
use crate::error::{Result, SqlState, WeirError};

pub struct StateTable {
    table_id: TableId,
    schema: SchemaRef,
    key_indices: Vec<usize>,
    key_codec: RowConverter,
    value_codec: RowConverter,
}

impl StateTable {
    /// `schema` is every stored column; `key_indices` the columns that identify a row.
    pub fn new(table_id: TableId, schema: SchemaRef, key_indices: Vec<usize>) -> Result<StateTable> {
        let key_fields = key_indices.iter().map(|&i| SortField::new(schema.field(i).data_type().clone())).collect();
        let value_fields = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
        Ok(StateTable {
            table_id,
            key_codec: RowConverter::new(key_fields)?,
            value_codec: RowConverter::new(value_fields)?,
            schema,
            key_indices,
        })
    }

    pub fn table_id(&self) -> TableId {
        self.table_id
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn key_indices(&self) -> &[usize] {
        &self.key_indices
    }

    /// The memcomparable key of every row of `batch` (without table id and vnode).
    pub fn encode_keys(&self, batch: &RecordBatch) -> Result<Rows> {
        let cols: Vec<ArrayRef> = self.key_indices.iter().map(|&i| batch.column(i).clone()).collect();
        Ok(self.key_codec.convert_columns(&cols)?)
    }

    /// Adds a put of every row of `batch` (which has this table's schema) to `wb`.
    pub fn put_batch(&self, batch: &RecordBatch, wb: &mut WriteBatch) -> Result<()> {
        let keys = self.encode_keys(batch)?;
        let values = self.value_codec.convert_columns(batch.columns())?;
        for (k, v) in keys.iter().zip(values.iter()) {
            wb.put(row_key(self.table_id, k.as_ref()), v.as_ref().to_vec());
        }
        Ok(())
    }

    /// Adds a delete of the row with the key of every row of `batch` to `wb`.
    pub fn delete_batch(&self, batch: &RecordBatch, wb: &mut WriteBatch) -> Result<()> {
        for k in self.encode_keys(batch)?.iter() {
            wb.delete(row_key(self.table_id, k.as_ref()));
        }
        Ok(())
    }

    /// Adds the deletion of every row of the table to `wb`.
    pub fn clear(&self, wb: &mut WriteBatch) {
        wb.delete_range(table_prefix(self.table_id).to_vec(), table_prefix(self.table_id + 1).to_vec());
    }

    /// Every row, in key order per vnode, as batches of at most `batch_size` rows, read from one
    /// snapshot.
    pub fn scan(&self, store: &dyn StateStore, batch_size: usize) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        let mut pending: Vec<Vec<u8>> = Vec::with_capacity(batch_size.min(4096));
        store.scan_prefix(&table_prefix(self.table_id), &mut |_, v| {
            pending.push(v.to_vec());
            if pending.len() >= batch_size {
                batches.push(self.decode_values(&pending)?);
                pending.clear();
            }
            Ok(ScanControl::Continue)
        })?;
        if !pending.is_empty() {
            batches.push(self.decode_values(&pending)?);
        }
        Ok(batches)
    }

    /// The rows stored under `keys` (memcomparable, as from [`Self::encode_keys`]), read in one
    /// batched lookup: the found rows, and for each key the index of its row among them.
    pub fn get_many(&self, store: &dyn StateStore, keys: &[Vec<u8>]) -> Result<(RecordBatch, Vec<Option<usize>>)> {
        let full: Vec<Vec<u8>> = keys.iter().map(|k| row_key(self.table_id, k)).collect();
        let mut values = Vec::new();
        let mut index = Vec::with_capacity(keys.len());
        for value in store.multi_get(&full)? {
            index.push(value.map(|v| {
                values.push(v);
                values.len() - 1
            }));
        }
        let rows = if values.is_empty() {
            RecordBatch::new_empty(Arc::clone(&self.schema))
        } else {
            self.decode_values(&values)?
        };
        Ok((rows, index))
    }

    /// Number of rows (a full scan of the keys).
    #[cfg(test)]
    pub fn count(&self, store: &dyn StateStore) -> Result<u64> {
        let mut n = 0u64;
        store.scan_prefix(&table_prefix(self.table_id), &mut |_, _| {
            n += 1;
            Ok(ScanControl::Continue)
        })?;
        Ok(n)
    }

    fn decode_values(&self, values: &[Vec<u8>]) -> Result<RecordBatch> {
        let parser = self.value_codec.parser();
        let decoded =
            catch_unwind(AssertUnwindSafe(|| self.value_codec.convert_rows(values.iter().map(|v| parser.parse(v)))));
        let columns = match decoded {
            Ok(Ok(columns)) => columns,
            Ok(Err(e)) => return Err(self.corrupt(&e.to_string())),
            Err(_) => return Err(self.corrupt("undecodable row")),
        };
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn corrupt(&self, what: &str) -> WeirError {
        WeirError::new(SqlState::DATA_CORRUPTED, format!("stored row of table id {} is corrupt: {what}", self.table_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn people(ids: &[i64], names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(names.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn put_overwrites_by_key_and_delete_removes() {
        let store = MemoryStore::new();
        let table = StateTable::new(1, people(&[], &[]).schema(), vec![0]).unwrap();
        let mut wb = WriteBatch::default();
        table.put_batch(&people(&[1, 2, 3], &["a", "b", "c"]), &mut wb).unwrap();
        table.put_batch(&people(&[2], &["B"]), &mut wb).unwrap();
        table.delete_batch(&people(&[3], &["c"]), &mut wb).unwrap();
        store.write(wb).unwrap();

        let batches = table.scan(&store, 1024).unwrap();
        let mut rows: Vec<(i64, String)> = Vec::new();
        for b in &batches {
            let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let names = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                rows.push((ids.value(i), names.value(i).to_string()));
            }
        }
        rows.sort();
        assert_eq!(rows, vec![(1, "a".to_string()), (2, "B".to_string())]);
        assert_eq!(table.count(&store).unwrap(), 2);
    }

    #[test]
    fn corrupt_values_are_an_error_not_a_panic() {
        let store = MemoryStore::new();
        let table = StateTable::new(1, people(&[], &[]).schema(), vec![0]).unwrap();
        let mut wb = WriteBatch::default();
        wb.put(row_key(1, b"x"), vec![0xde, 0xad]);
        store.write(wb).unwrap();
        let err = table.scan(&store, 16).unwrap_err();
        assert_eq!(err.state, SqlState::DATA_CORRUPTED);
    }

    #[test]
    fn clear_only_touches_its_own_table() {
        let store = MemoryStore::new();
        let schema = people(&[], &[]).schema();
        let a = StateTable::new(1, schema.clone(), vec![0]).unwrap();
        let b = StateTable::new(2, schema, vec![0]).unwrap();
        let mut wb = WriteBatch::default();
        a.put_batch(&people(&[1], &["a"]), &mut wb).unwrap();
        b.put_batch(&people(&[1], &["b"]), &mut wb).unwrap();
        store.write(wb).unwrap();
        let mut wb = WriteBatch::default();
        a.clear(&mut wb);
        store.write(wb).unwrap();
        assert_eq!(a.count(&store).unwrap(), 0);
        assert_eq!(b.count(&store).unwrap(), 1);
    }
}
