//! Which shard owns a row: the vnode of its key's memcomparable form (`types::vnode`)
//! modulo the shard count, so every change of one key lands in one shard, whatever batch it
//! comes in. A view's exchanges route rows between its operators' shards with it
//! (`dataflow::graph`), and a sink splits its changes over its shards with it
//! (`connectors::sink`), so each shard of a sink delivers every change of its keys, in order.

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::row::{RowConverter, SortField};

use super::vnode::vnode_of;
use super::ChangeBatch;
use crate::error::Result;

/// Splits batches by the shard their rows' keys belong to; remembers the key's row format
/// (built from the first batch's key types, or given at the start).
#[derive(Default)]
pub struct KeyShards {
    codec: Option<RowConverter>,
}

impl KeyShards {
    /// For keys of `types`, known at the start: Err now if they have no row format.
    pub fn for_types(types: &[datafusion::arrow::datatypes::DataType]) -> Result<KeyShards> {
        if types.is_empty() {
            return Ok(KeyShards::default());
        }
        let codec = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        Ok(KeyShards { codec: Some(codec) })
    }

    /// `batch`'s rows grouped by the shard their key (`keys`, one array per key column, the
    /// batch's length) belongs to, out of `shards`; shards without rows are left out. No key
    /// columns: every row in shard 0.
    pub fn split(
        &mut self,
        batch: &ChangeBatch,
        keys: &[ArrayRef],
        shards: usize,
    ) -> Result<Vec<(usize, ChangeBatch)>> {
        if keys.is_empty() || shards <= 1 {
            return Ok(vec![(0, batch.clone())]);
        }
        self.split_by(batch, keys, shards, |vnode| vnode as usize % shards)
    }

    /// `batch`'s rows grouped by `place(vnode of their key)`, one of `places` (shards here and
    /// nodes elsewhere, in a cluster: `dataflow::graph`); places without rows are left out. No
    /// key columns: every row where vnode 0 goes.
    pub fn split_by(
        &mut self,
        batch: &ChangeBatch,
        keys: &[ArrayRef],
        places: usize,
        place: impl Fn(u16) -> usize,
    ) -> Result<Vec<(usize, ChangeBatch)>> {
        if keys.is_empty() {
            return Ok(vec![(place(0), batch.clone())]);
        }
        if self.codec.is_none() {
            self.codec = Some(RowConverter::new(keys.iter().map(|k| SortField::new(k.data_type().clone())).collect())?);
        }
        let rows = self.codec.as_ref().expect("built").convert_columns(keys)?;
        let mut by_place: Vec<Vec<u32>> = vec![Vec::new(); places];
        for i in 0..batch.num_rows() {
            by_place[place(vnode_of(rows.row(i).data()))].push(i as u32);
        }
        let mut parts = Vec::new();
        for (at, indices) in by_place.into_iter().enumerate().filter(|(_, i)| !i.is_empty()) {
            let part = if indices.len() == batch.num_rows() { batch.clone() } else { batch.take(&indices)? };
            parts.push((at, part));
        }
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};

    use super::*;

    #[test]
    fn every_row_of_a_key_lands_in_one_shard_whatever_its_batch() {
        let batch = |keys: Vec<i64>| {
            let names: Vec<String> = keys.iter().map(|k| format!("row{k}")).collect();
            ChangeBatch::inserts(
                RecordBatch::try_from_iter([
                    ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
                    ("name", Arc::new(StringArray::from(names)) as ArrayRef),
                ])
                .unwrap(),
            )
        };
        let mut shards = KeyShards::default();
        let mut owner = std::collections::HashMap::new();
        for keys in [(0..100).collect::<Vec<i64>>(), (50..150).rev().collect(), vec![7, 7, 7]] {
            let b = batch(keys);
            let parts = shards.split(&b, &[Arc::clone(b.data.column(0))], 3).unwrap();
            assert_eq!(parts.iter().map(|(_, p)| p.num_rows()).sum::<usize>(), b.num_rows());
            for (shard, part) in parts {
                assert!(shard < 3 && !part.is_empty());
                let ks = part.data.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                for k in ks.values() {
                    assert_eq!(*owner.entry(*k).or_insert(shard), shard, "key {k}");
                }
            }
        }
        // Keys spread over every shard.
        assert_eq!(owner.values().collect::<std::collections::HashSet<_>>().len(), 3);
        // No key, or one shard: the batch as it is.
        let b = batch(vec![1, 2, 3]);
        assert_eq!(shards.split(&b, &[], 3).unwrap().len(), 1);
        assert_eq!(shards.split(&b, &[Arc::clone(b.data.column(0))], 1).unwrap()[0].0, 0);
    }
}
