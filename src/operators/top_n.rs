//! Streaming Top-N: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) AS rn ... WHERE rn <= N`.
//!
//! Keeps, per partition, its rows in the order of `o`, and outputs each partition's first `N`
//! rows with their row number (the input's columns, then `rn`). Changes are applied as they
//! arrive; at each barrier every partition touched in the epoch compares its first `N` rows
//! with those it output before (read at its first touch in the epoch) and emits the rows whose
//! place changed: `U-` / `U+` where a rank's row changed, `-` or `+` where a rank appeared or
//! went. So a row entering the top 10 at rank 3 moves the rows below it down one rank each, as
//! SQL's `rn` says; a query that does not select `rn` sees most of these cancel out.
//!
//! State ([`KeyedState`], one table): `partition ++ order ++ row ++ len(row)` -> the row's
//! multiplicity, all memcomparable (arrow-row), so a partition's rows are one prefix in rank
//! order, ties broken by the whole row, and the row is read back from the key's tail. Over an
//! input that retracts, every row is kept (a deleted leader reveals the next one). Over an
//! append-only input a row that falls below rank `N` can never come back, so each touched
//! partition is cut back to its first `N` rows at the barrier: state is `N` rows per partition.
//!
//! Called by the dataflow builder (`dataflow::build`) for a `WindowAggr` of one `row_number()`
//! under a filter that bounds it.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::operator::Operator;
use crate::error::{Result, WeirError};
use crate::state::keyed::{decode_count, KeyedState};
use crate::state::store::WriteBatch;
use crate::types::hash::HashMap;
use crate::types::{ChangeBatch, Op};

/// One `ORDER BY` key of the window: an expression over the input and its direction.
#[derive(Clone)]
pub struct RankOrder {
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: DataType,
    pub options: SortOptions,
}

pub struct TopN {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    order_by: Vec<RankOrder>,
    /// The most rows each partition outputs.
    limit: usize,
    /// Memcomparable encodings of a row's partition (None without PARTITION BY), its order
    /// (None without ORDER BY) and the whole row.
    partition_codec: Option<RowConverter>,
    order_codec: Option<RowConverter>,
    row_codec: RowConverter,
    /// The input's columns, then the row number.
    schema: SchemaRef,
    state: KeyedState,
    /// Rows below rank `limit` are cut (the input never retracts).
    append_only_input: bool,
    /// Partitions touched this epoch, with the rows (encoded) they output before it, in rank order.
    touched: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    view: String,
}

impl TopN {
    pub fn new(
        partition_by: Vec<(Arc<dyn PhysicalExpr>, DataType)>,
        order_by: Vec<RankOrder>,
        limit: usize,
        schema: SchemaRef,
        state: KeyedState,
        view: &str,
    ) -> Result<TopN> {
        let fields = schema.fields();
        if fields.is_empty() || fields[fields.len() - 1].data_type() != &DataType::UInt64 {
            return Err(WeirError::internal("a Top-N's last output column is its row number"));
        }
        let input_types = fields[..fields.len() - 1].iter().map(|f| SortField::new(f.data_type().clone()));
        let partition_codec = (!partition_by.is_empty())
            .then(|| RowConverter::new(partition_by.iter().map(|(_, t)| SortField::new(t.clone())).collect()))
            .transpose()?;
        let order_codec = (!order_by.is_empty())
            .then(|| {
                RowConverter::new(
                    order_by.iter().map(|o| SortField::new_with_options(o.data_type.clone(), o.options)).collect(),
                )
            })
            .transpose()?;
        Ok(TopN {
            partition_by: partition_by.into_iter().map(|(e, _)| e).collect(),
            order_by,
            limit,
            partition_codec,
            order_codec,
            row_codec: RowConverter::new(input_types.collect())?,
            schema,
            state,
            append_only_input: false,
            touched: HashMap::default(),
            view: view.to_string(),
        })
    }

    /// The input only inserts rows: keep only each partition's first `limit`.
    pub fn with_append_only_input(mut self) -> TopN {
        self.append_only_input = true;
        self
    }

    /// Encodes `exprs` over `batch` with `codec`, or None when there are none.
    fn encode<'a>(
        &self,
        codec: &Option<RowConverter>,
        exprs: impl Iterator<Item = &'a Arc<dyn PhysicalExpr>>,
        batch: &RecordBatch,
    ) -> Result<Option<Rows>> {
        let Some(codec) = codec else { return Ok(None) };
        let columns = exprs.map(|e| evaluate(e, batch, &self.view)).collect::<Result<Vec<ArrayRef>>>()?;
        Ok(Some(codec.convert_columns(&columns)?))
    }

    /// A partition's first `n` rows, each `(state key, multiplicity)`, in rank order; all of
    /// them when `n` is None.
    fn entries(&self, partition: &[u8], n: Option<usize>) -> Result<Vec<(Vec<u8>, i64)>> {
        let entries = match n {
            Some(n) => self.state.first_n_with_prefix(partition, partition.len(), n)?,
            None => self.state.scan_prefix(partition, partition.len())?,
        };
        entries.into_iter().map(|(k, v)| Ok((k, decode_count(&v)?))).collect()
    }

    /// A partition's output: the rows of its first `limit` ranks (encoded), in rank order.
    fn leaders(&self, partition: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(ranked(&self.entries(partition, Some(self.limit))?, self.limit))
    }
}

/// The row (encoded) a state key ends with: `... ++ row ++ len(row)`.
fn row_of(key: &[u8]) -> &[u8] {
    let (rest, len) = key.split_at(key.len() - 4);
    let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
    &rest[rest.len() - len..]
}

/// The rows of the first `limit` ranks of `entries` (in rank order, with multiplicities).
fn ranked(entries: &[(Vec<u8>, i64)], limit: usize) -> Vec<Vec<u8>> {
    entries
        .iter()
        .flat_map(|(key, count)| std::iter::repeat_n(row_of(key), (*count).max(0) as usize))
        .take(limit)
        .map(<[u8]>::to_vec)
        .collect()
}

impl Operator for TopN {
    fn describe(&self) -> String {
        let partition: Vec<String> = self.partition_by.iter().map(|e| e.to_string()).collect();
        let order: Vec<String> = self
            .order_by
            .iter()
            .map(|o| {
                let direction = if o.options.descending { "DESC" } else { "ASC" };
                let nulls = if o.options.nulls_first { "FIRST" } else { "LAST" };
                format!("{} {direction} NULLS {nulls}", o.expr)
            })
            .collect();
        format!(
            "TopN: row_number() <= {} partition by [{}] order by [{}]{}",
            self.limit,
            partition.join(", "),
            order.join(", "),
            if self.append_only_input { " (append-only input)" } else { "" }
        )
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        if batch.is_empty() {
            return Ok(vec![]);
        }
        let partitions = self.encode(&self.partition_codec, self.partition_by.iter(), &batch.data)?;
        let orders = self.encode(&self.order_codec, self.order_by.iter().map(|o| &o.expr), &batch.data)?;
        let rows = self.row_codec.convert_columns(batch.data.columns())?;
        let mut key = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            if !self.touched.contains_key(partition) {
                let before = self.leaders(partition)?;
                self.touched.insert(partition.to_vec(), before);
            }
            let row = rows.row(i);
            key.clear();
            key.extend_from_slice(partition);
            if let Some(orders) = &orders {
                key.extend_from_slice(orders.row(i).data());
            }
            key.extend_from_slice(row.data());
            key.extend_from_slice(&(row.data().len() as u32).to_be_bytes());
            let (_, after) = self.state.add_count(&key, partition.len(), op.sign())?;
            if after < 0 {
                return Err(WeirError::internal("Top-N: a row was deleted that was never inserted"));
            }
        }
        Ok(vec![])
    }

    fn on_barrier(&mut self) -> Result<Vec<ChangeBatch>> {
        let mut touched: Vec<(Vec<u8>, Vec<Vec<u8>>)> = std::mem::take(&mut self.touched).into_iter().collect();
        touched.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // The output, as (row, rank, op).
        let mut out: Vec<(Vec<u8>, u64, Op)> = Vec::new();
        for (partition, before) in touched {
            let after = if self.append_only_input {
                // Everything past rank `limit` goes: no delete can bring it back.
                let entries = self.entries(&partition, None)?;
                let mut kept = 0i64;
                for (key, count) in &entries {
                    let keep = (*count).min(self.limit as i64 - kept).max(0);
                    kept += keep;
                    if keep == 0 {
                        self.state.delete(key, partition.len());
                    } else if keep < *count {
                        self.state.put(key, partition.len(), keep.to_le_bytes().to_vec());
                    }
                }
                ranked(&entries, self.limit)
            } else {
                self.leaders(&partition)?
            };
            for rank in 0..before.len().max(after.len()) {
                let (old, new) = (before.get(rank), after.get(rank));
                if old == new {
                    continue;
                }
                let both = old.is_some() && new.is_some();
                if let Some(old) = old {
                    out.push((old.clone(), rank as u64 + 1, if both { Op::UpdateDelete } else { Op::Delete }));
                }
                if let Some(new) = new {
                    out.push((new.clone(), rank as u64 + 1, if both { Op::UpdateInsert } else { Op::Insert }));
                }
            }
        }
        if out.is_empty() {
            return Ok(vec![]);
        }
        let parser = self.row_codec.parser();
        let mut columns = self.row_codec.convert_rows(out.iter().map(|(row, _, _)| parser.parse(row)))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(out.iter().map(|(_, rank, _)| *rank))));
        let data = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        Ok(vec![ChangeBatch::new(data, out.into_iter().map(|(_, _, op)| op).collect())])
    }

    fn flush_state(&mut self, wb: &mut WriteBatch) {
        self.state.flush(wb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    /// Top `limit` of `c1` descending per `c0`, with a state cache of `capacity` entries.
    fn top(store: &Arc<dyn StateStore>, limit: usize, capacity: usize) -> TopN {
        let input = from_pretty("I I\n+ 1 1").schema();
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("rn", DataType::UInt64, false),
        ]));
        let order = RankOrder {
            expr: col("c1", &input).unwrap(),
            data_type: DataType::Int64,
            options: SortOptions { descending: true, nulls_first: false },
        };
        let partition = vec![(col("c0", &input).unwrap(), DataType::Int64)];
        let state = KeyedState::new(1, Arc::clone(store), capacity);
        TopN::new(partition, vec![order], limit, schema, state, "test").unwrap()
    }

    fn step(op: &mut TopN, store: &Arc<dyn StateStore>, input: &str) -> String {
        op.apply(0, from_pretty(input)).unwrap();
        let out: String = op.on_barrier().unwrap().iter().map(|b| b.to_pretty()).collect();
        let mut wb = WriteBatch::default();
        op.flush_state(&mut wb);
        store.write(wb).unwrap();
        out
    }

    #[test]
    fn ranks_shift_as_rows_enter_and_a_deleted_leader_reveals_the_next() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut t = top(&store, 2, 16);
        assert_eq!(step(&mut t, &store, "I I\n+ 1 10\n+ 1 30\n+ 1 20\n+ 2 5"), "+ 1 30 1\n+ 1 20 2\n+ 2 5 1\n");
        // 25 enters at rank 2, 20 leaves.
        assert_eq!(step(&mut t, &store, "I I\n+ 1 25"), "U- 1 20 2\nU+ 1 25 2\n");
        // The leader goes: 25 moves up, 20 comes back at rank 2.
        assert_eq!(step(&mut t, &store, "I I\n- 1 30"), "U- 1 30 1\nU+ 1 25 1\nU- 1 25 2\nU+ 1 20 2\n");
        // A duplicate row takes two ranks; NULLs sort last.
        assert_eq!(step(&mut t, &store, "I I\n+ 2 5\n+ 2 ."), "+ 2 5 2\n");
        assert_eq!(step(&mut t, &store, "I I\n- 2 5\n- 2 5"), "U- 2 5 1\nU+ 2 NULL 1\n- 2 5 2\n");
        // Changes that cancel within an epoch emit nothing.
        assert_eq!(step(&mut t, &store, "I I\n+ 1 99\n- 1 99"), "");
        // A delete of a row never inserted is a bug upstream, reported as one.
        assert!(t.apply(0, from_pretty("I I\n- 3 1")).is_err());
    }

    /// Random inserts and deletes, through a tiny cache (so state comes back from the store), in
    /// both modes: the view built from the output equals the top rows computed from scratch.
    #[test]
    fn output_equals_top_rows_computed_from_scratch() {
        for append_only in [false, true] {
            let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            let mut t = top(&store, 3, 16);
            if append_only {
                t = t.with_append_only_input();
            }
            let mut rows: Vec<(i64, i64)> = Vec::new();
            let mut view: std::collections::BTreeMap<String, i64> = Default::default();
            let mut seed = 42u64;
            let mut next = |n: u64| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % n) as i64
            };
            for _ in 0..200 {
                let mut input = String::from("I I\n");
                for _ in 0..1 + next(6) {
                    if !append_only && !rows.is_empty() && next(3) == 0 {
                        let (g, v) = rows.swap_remove(next(rows.len() as u64) as usize);
                        input.push_str(&format!("- {g} {v}\n"));
                    } else {
                        let (g, v) = (next(5), next(20));
                        rows.push((g, v));
                        input.push_str(&format!("+ {g} {v}\n"));
                    }
                }
                for line in step(&mut t, &store, &input).lines() {
                    let (op, row) = line.split_once(' ').unwrap();
                    *view.entry(row.to_string()).or_default() += if op.ends_with('-') { -1 } else { 1 };
                }
                view.retain(|_, n| *n != 0);
                let mut expected: std::collections::BTreeMap<String, i64> = Default::default();
                for g in 0..5 {
                    let mut vs: Vec<i64> = rows.iter().filter(|r| r.0 == g).map(|r| r.1).collect();
                    vs.sort_unstable_by(|a, b| b.cmp(a));
                    for (rank, v) in vs.iter().take(3).enumerate() {
                        *expected.entry(format!("{g} {v} {}", rank + 1)).or_default() += 1;
                    }
                }
                assert_eq!(view, expected, "append-only: {append_only}");
            }
        }
    }
}
