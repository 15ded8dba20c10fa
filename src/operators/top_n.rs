//! Streaming Top-N: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) AS rn ... WHERE rn <= N`,
//! and the same with `RANK()` or `DENSE_RANK()` ([`Ranking`]).
//!
//! Keeps, per partition, its rows in the order of `o` (ties broken by the whole row, so the
//! answer is deterministic), and outputs each partition's rows ranked `N` or better with their
//! rank (the input's columns, then `rn`): the first `N` by row number; by `RANK()` (rows equal
//! in `o` share a rank, the next rank skips) every row tied with the `N`-th too; by
//! `DENSE_RANK()` (no skips) the rows of the first `N` distinct values of `o`. Changes are applied as they arrive; at each barrier every
//! partition touched in the epoch compares its first `N` rows with those it output before (read
//! at its first touch in the epoch) and emits the rows whose place changed: `U-` / `U+` where a
//! place's row or rank changed, `-` or `+` where a place appeared or went. So a row entering the top 10 at
//! rank 3 moves the rows below it down one rank each, as SQL's `rn` says; a query that does not
//! select `rn` sees most of these cancel out.
//!
//! State ([`KeyedState`], one table), in one of two layouts, all encodings memcomparable
//! (arrow-row):
//! - over an input that retracts, every row is kept (a deleted leader reveals the next one), as
//!   [`sorted_rows`] keeps them: a partition's rows are one prefix in rank order;
//! - over an append-only input a row that falls below rank `N` can never come back, so a
//!   partition is one entry, `partition` -> its rows ranked `N` or better, held in memory while the epoch
//!   touches it: a row that ranks below them costs one comparison, and a partition no row
//!   entered emits and writes nothing.
//!
//! Partitioned by a window bound ([`TopNConfig::window`], "the top 10 of each window"): once
//! the watermark passes a window's close plus the allowed lateness, no row can reach its
//! partitions any more, so their state is deleted (their rows stay in the view), and state is
//! bounded by the open windows. Which partitions are open is indexed in memory by close time:
//! the index is the record the Top-N keeps with each checkpoint ([`Operator::save_record`]).
//!
//! Planned by `stream_plan::translate` for a `WindowAggr` of one `row_number()`, `rank()` or
//! `dense_rank()` under a filter that bounds it.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::eval::{evaluate, OrderKey};
use super::operator::Operator;
use crate::error::{Result, WeirError};
use crate::state::expiry::Expiry;
use crate::state::keyed::{Flush, KeyedState};
use crate::state::keys::KeyRef;
use crate::state::keys_by_time::KeysByTime;
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::sorted_rows;
use crate::state::store::{ScanControl, WriteBatch};
use crate::state::value::decode_count;
use crate::state::value::{ValueReader, ValueWriter};
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::hash::HashMap;
use crate::types::window::{close_times, TimeColumn};
use crate::types::{ChangeBatch, Op};

/// Which rank a Top-N gives its rows, and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// 1, 2, 3, ... whatever the ties (ties ranked by the whole row).
    RowNumber,
    /// Rows equal in the order share a rank; the next rank skips as many (1, 1, 3).
    Rank,
    /// Rows equal in the order share a rank; the next is one more (1, 1, 2).
    DenseRank,
}

impl Ranking {
    /// The window function this ranking is, by DataFusion's name.
    pub fn from_name(name: &str) -> Option<Ranking> {
        match name {
            "row_number" => Some(Ranking::RowNumber),
            "rank" => Some(Ranking::Rank),
            "dense_rank" => Some(Ranking::DenseRank),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Ranking::RowNumber => "row_number",
            Ranking::Rank => "rank",
            Ranking::DenseRank => "dense_rank",
        }
    }
}

/// Ranks rows given in rank order, one at a time, by their order keys.
struct Ranker {
    ranking: Ranking,
    /// Rows seen, distinct orders seen, and the last row's order and rank.
    rows: u64,
    distinct: u64,
    last: Option<(Vec<u8>, u64)>,
}

impl Ranker {
    fn new(ranking: Ranking) -> Ranker {
        Ranker { ranking, rows: 0, distinct: 0, last: None }
    }

    /// The rank of the next row, whose order key is `order`.
    fn next(&mut self, order: &[u8]) -> u64 {
        self.rows += 1;
        let tie = self.last.as_ref().filter(|(last, _)| last.as_slice() == order).map(|(_, rank)| *rank);
        if tie.is_none() {
            self.distinct += 1;
        }
        let rank = match (self.ranking, tie) {
            (Ranking::RowNumber, _) => self.rows,
            (_, Some(rank)) => rank,
            (Ranking::Rank, None) => self.rows,
            (Ranking::DenseRank, None) => self.distinct,
        };
        self.last = Some((order.to_vec(), rank));
        rank
    }
}

/// The ranks of `rows`, given in rank order.
fn ranks(rows: &[Ranked], ranking: Ranking) -> Vec<u64> {
    let mut ranker = Ranker::new(ranking);
    rows.iter().map(|r| ranker.next(r.order())).collect()
}

pub struct TopN {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    order_by: Vec<OrderKey>,
    ranking: Ranking,
    /// The worst rank a partition outputs.
    limit: usize,
    /// Memcomparable encodings of a row's partition (None without PARTITION BY), its order
    /// (None without ORDER BY) and the whole row.
    partition_codec: Option<RowConverter>,
    order_codec: Option<RowConverter>,
    row_codec: RowConverter,
    /// The input's columns, then the row number.
    schema: SchemaRef,
    state: KeyedState,
    /// Rows below rank `limit` are cut (the input never retracts): the second state layout.
    append_only_input: bool,
    /// Partitions touched this epoch.
    touched: HashMap<Vec<u8>, Touched>,
    /// Partitioned by a window bound: which partition expression it is, when its window closes,
    /// and the allowed lateness (nanoseconds).
    window: Option<(usize, TimeColumn, i64)>,
    /// The partitions of open windows, by close time.
    open: KeysByTime,
    view: ViewStatus,
}

/// What a [`TopN`] computes and what it may assume of its input, all given at once (by the
/// stream plan's Top-N node).
#[derive(Clone)]
pub struct TopNConfig {
    pub partition_by: Vec<(Arc<dyn PhysicalExpr>, DataType)>,
    pub order_by: Vec<OrderKey>,
    pub ranking: Ranking,
    /// The worst rank a partition outputs.
    pub limit: usize,
    /// The input's columns, then the row number.
    pub schema: SchemaRef,
    /// Partition expression `.0` is a window bound (`.1`): a window's partitions are deleted
    /// once the watermark passes its close plus the allowed lateness (`.2`, nanoseconds).
    pub window: Option<(usize, TimeColumn, i64)>,
    /// The input only inserts rows: keep only each partition's first `limit`.
    pub append_only_input: bool,
}

impl TopN {
    pub fn new(config: TopNConfig, state: KeyedState, view: impl Into<ViewStatus>) -> Result<TopN> {
        let TopNConfig { partition_by, order_by, ranking, limit, schema, window, append_only_input } = config;
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
            ranking,
            limit,
            partition_codec,
            order_codec,
            row_codec: RowConverter::new(input_types.collect())?,
            schema,
            state,
            append_only_input,
            touched: HashMap::default(),
            window,
            open: KeysByTime::default(),
            view: view.into(),
        })
    }

    /// Deletes the state of every partition whose window `clock` made final (its close plus
    /// the allowed lateness reached).
    fn forget_final_windows(&mut self, clock: &Clock) -> Result<()> {
        let Some((_, _, lateness)) = self.window else { return Ok(()) };
        let Some(final_windows) = Expiry::new(lateness).expire(clock, &mut self.open)? else { return Ok(()) };
        for partition in final_windows.into_iter().flat_map(|(_, keys)| keys) {
            if self.append_only_input {
                self.state.delete(KeyRef::whole(&partition));
            } else {
                self.state.delete_prefix(KeyRef::whole(&partition))?;
            }
        }
        Ok(())
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

    /// A partition's rows ranked `limit` or better now, in rank order.
    fn leaders(&mut self, partition: &[u8]) -> Result<Vec<Ranked>> {
        if self.append_only_input {
            return match self.state.get(KeyRef::whole(partition))? {
                Some(bytes) => Ranked::decode_list(&bytes),
                None => Ok(vec![]),
            };
        }
        let mut rows = Vec::with_capacity(self.limit.min(1024));
        if self.ranking == Ranking::RowNumber {
            // The multiset layout: the first `limit` keys hold the first `limit` rows or more.
            for (key, count) in self.state.first_n_with_prefix(KeyRef::whole(partition), self.limit)? {
                for _ in 0..decode_count(&count)?.max(0) {
                    if rows.len() == self.limit {
                        return Ok(rows);
                    }
                    rows.push(Ranked::from_key(&key, partition.len()));
                }
            }
            return Ok(rows);
        }
        // Ties may pass any number of rows: read in order until a rank is past the limit.
        let mut ranker = Ranker::new(self.ranking);
        let limit = self.limit as u64;
        self.state.scan_prefix_while(KeyRef::whole(partition), &mut |key, count| {
            let row = Ranked::from_key(key, partition.len());
            for _ in 0..decode_count(count)?.max(0) {
                if ranker.next(row.order()) > limit {
                    return Ok(ScanControl::Stop);
                }
                rows.push(Ranked { bytes: row.bytes.clone(), order_len: row.order_len });
            }
            Ok(ScanControl::Continue)
        })?;
        Ok(rows)
    }

    /// `partition` as touched in this epoch, tracked from now if it is not yet (and, in a
    /// window closing at `close`, remembered among the open windows' partitions).
    fn touch(&mut self, partition: &[u8], close: Option<i64>) -> Result<&mut Touched> {
        if !self.touched.contains_key(partition) {
            if let Some(close) = close {
                self.open.insert(partition, close);
            }
            let rows = self.leaders(partition)?;
            let touched = if self.append_only_input {
                Touched::Leaders { now: rows, changed: false }
            } else {
                Touched::Multiset { before: rows }
            };
            self.touched.insert(partition.to_vec(), touched);
        }
        Ok(self.touched.get_mut(partition).expect("just tracked"))
    }
}

/// A partition touched in the current epoch.
enum Touched {
    /// Its first rows when the epoch began: what it output last (the rows themselves are in
    /// the state, read at the barrier).
    Multiset { before: Vec<Ranked> },
    /// Over an append-only input, its first rows now, and whether a row entered them; what it
    /// output last is still its state entry until the barrier.
    Leaders { now: Vec<Ranked>, changed: bool },
}

/// A row as ranked: its order key, then the row itself (both memcomparable, the order key
/// prefix-free, so comparing the two together compares by order, then by row).
struct Ranked {
    bytes: Vec<u8>,
    order_len: usize,
}

impl Ranked {
    fn new(order: &[u8], row: &[u8]) -> Ranked {
        Ranked { bytes: [order, row].concat(), order_len: order.len() }
    }

    fn row(&self) -> &[u8] {
        &self.bytes[self.order_len..]
    }

    fn order(&self) -> &[u8] {
        &self.bytes[..self.order_len]
    }

    /// The rank of this row against `(order, row)`.
    fn cmp_with(&self, order: &[u8], row: &[u8]) -> Ordering {
        (&self.bytes[..self.order_len], self.row()).cmp(&(order, row))
    }

    /// The row a multiset state key holds ([`sorted_rows`]).
    fn from_key(key: &[u8], partition_len: usize) -> Ranked {
        let (order, row) = sorted_rows::split(key, partition_len);
        Ranked::new(order, row)
    }

    /// A partition's rows as one state value: per row, `len(order) len(row) order row`.
    fn encode_list(rows: &[Ranked]) -> Vec<u8> {
        let mut out = ValueWriter::with_capacity(rows.iter().map(|r| 8 + r.bytes.len()).sum());
        for r in rows {
            out.u32(r.order_len as u32).u32((r.bytes.len() - r.order_len) as u32).raw(&r.bytes);
        }
        out.finish()
    }

    fn decode_list(bytes: &[u8]) -> Result<Vec<Ranked>> {
        let mut r = ValueReader::new(bytes, "a Top-N partition's list of rows");
        let mut rows = Vec::new();
        while !r.at_end() {
            let order_len = r.u32()? as usize;
            let row_len = r.u32()? as usize;
            let body = r.take(order_len + row_len)?;
            rows.push(Ranked { bytes: body.to_vec(), order_len });
        }
        Ok(rows)
    }
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
            "TopN: {}() <= {} partition by [{}] order by [{}]{}",
            self.ranking.name(),
            self.limit,
            partition.join(", "),
            order.join(", "),
            if self.append_only_input { " (append-only input)" } else { "" }
        )
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        if batch.is_empty() {
            return Ok(vec![]);
        }
        let partitions = self.encode(&self.partition_codec, self.partition_by.iter(), &batch.data)?;
        let orders = self.encode(&self.order_codec, self.order_by.iter().map(|o| &o.expr), &batch.data)?;
        let rows = self.row_codec.convert_columns(batch.data.columns())?;
        let closes = match self.window {
            Some((index, column, _)) => {
                Some(close_times(&evaluate(&self.partition_by[index], &batch.data, &self.view)?, column)?)
            }
            None => None,
        };
        let (append_only, limit, ranking) = (self.append_only_input, self.limit, self.ranking);
        let mut key = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            let order = orders.as_ref().map_or(&[][..], |o| o.row(i).data());
            let row = rows.row(i);
            let row = row.data();
            let touched = self.touch(partition, closes.as_ref().and_then(|c| c[i]))?;
            if append_only {
                if op.sign() < 0 {
                    return Err(WeirError::internal("Top-N over an append-only input got a retraction"));
                }
                let Touched::Leaders { now, changed } = touched else {
                    return Err(WeirError::internal("Top-N: an append-only partition without its rows"));
                };
                if ranking == Ranking::RowNumber {
                    // A row that ranks after the last of a full list never enters.
                    if now.len() >= limit && now.last().is_none_or(|l| l.cmp_with(order, row).is_le()) {
                        continue;
                    }
                    let at = now.partition_point(|l| l.cmp_with(order, row).is_le());
                    now.insert(at, Ranked::new(order, row));
                    now.truncate(limit);
                    *changed = true;
                    continue;
                }
                // By rank: in, then every row past the limit out. If the new row is out, so
                // is nothing else (a row after it ranks no better and was in).
                let at = now.partition_point(|l| l.cmp_with(order, row).is_le());
                now.insert(at, Ranked::new(order, row));
                let kept = ranks(now, ranking).iter().take_while(|&&r| r <= limit as u64).count();
                now.truncate(kept);
                *changed |= at < kept;
                continue;
            }
            sorted_rows::add(&mut self.state, &mut key, partition, order, row, op.sign())?;
        }
        Ok(vec![])
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let mut touched: Vec<(Vec<u8>, Touched)> = std::mem::take(&mut self.touched).into_iter().collect();
        touched.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // The output, as (row, rank, op).
        let mut out: Vec<(Vec<u8>, u64, Op)> = Vec::new();
        for (partition, touched) in touched {
            let (before, after) = match touched {
                Touched::Multiset { before } => (before, self.leaders(&partition)?),
                Touched::Leaders { changed: false, .. } => continue,
                Touched::Leaders { now, changed: true } => {
                    let before = self.leaders(&partition)?;
                    self.state.put(KeyRef::whole(&partition), Ranked::encode_list(&now));
                    (before, now)
                }
            };
            // Place by place: where the row or its rank changed, the old one goes and the new
            // one comes.
            let (ranks_before, ranks_after) = (ranks(&before, self.ranking), ranks(&after, self.ranking));
            for place in 0..before.len().max(after.len()) {
                let old = before.get(place).map(|r| (r.row(), ranks_before[place]));
                let new = after.get(place).map(|r| (r.row(), ranks_after[place]));
                if old == new {
                    continue;
                }
                let both = old.is_some() && new.is_some();
                if let Some((old, rank)) = old {
                    out.push((old.to_vec(), rank, if both { Op::UpdateDelete } else { Op::Delete }));
                }
                if let Some((new, rank)) = new {
                    out.push((new.to_vec(), rank, if both { Op::UpdateInsert } else { Op::Insert }));
                }
            }
        }
        self.forget_final_windows(clock)?;
        if out.is_empty() {
            return Ok(vec![]);
        }
        let parser = self.row_codec.parser();
        let mut columns = self.row_codec.convert_rows(out.iter().map(|(row, _, _)| parser.parse(row)))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(out.iter().map(|(_, rank, _)| *rank))));
        let data = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        Ok(vec![ChangeBatch::new(data, out.into_iter().map(|(_, _, op)| op).collect())])
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.state.flush(wb, flush);
    }

    /// A windowed Top-N's partitions by close time; the partitions touched in the epoch are
    /// all stored by now (the barrier took them).
    fn save_record(&self) -> Option<Vec<u8>> {
        debug_assert!(self.touched.is_empty(), "a checkpoint follows the barrier, which takes every touched partition");
        self.window?;
        let mut record = RecordWriter::default();
        self.open.write(&mut record);
        Some(record.finish())
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        let what = self.describe();
        let mut record = RecordReader::new(record, &what)?;
        self.open = KeysByTime::read(&mut record)?;
        record.finish()
    }

    fn open_windows(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::operator::testing::step;
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use datafusion::arrow::compute::SortOptions;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    /// Top `limit` of `c1` descending per `c0`, with a state cache of `capacity` entries.
    fn top(store: &Arc<dyn StateStore>, limit: usize, capacity: usize) -> TopN {
        top_of("I I", KeyedState::new(1, Arc::clone(store), capacity), limit)
    }

    /// Top `limit` of `c1` (an integer) descending per `c0`, over columns `types` (as
    /// `from_pretty`), its state in `state`.
    fn top_of(types: &str, state: KeyedState, limit: usize) -> TopN {
        top_configured(types, state, limit, |c| c)
    }

    /// [`top_of`], as `configure` makes it.
    fn top_configured(
        types: &str,
        state: KeyedState,
        limit: usize,
        configure: impl FnOnce(TopNConfig) -> TopNConfig,
    ) -> TopN {
        let input = from_pretty(&format!("{types}\n")).schema();
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", input.field(0).data_type().clone(), true),
            Field::new("v", DataType::Int64, true),
            Field::new("rn", DataType::UInt64, false),
        ]));
        let order = OrderKey {
            expr: col("c1", &input).unwrap(),
            data_type: DataType::Int64,
            options: SortOptions { descending: true, nulls_first: false },
        };
        let partition = vec![(col("c0", &input).unwrap(), input.field(0).data_type().clone())];
        let config = TopNConfig {
            ranking: Ranking::RowNumber,
            partition_by: partition,
            order_by: vec![order],
            limit,
            schema,
            window: None,
            append_only_input: false,
        };
        TopN::new(configure(config), state, "test").unwrap()
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
        assert!(t.apply(0, from_pretty("I I\n- 3 1"), &Clock::default()).is_err());
    }

    /// Random inserts and deletes, through a tiny cache (so state comes back from the store), in
    /// both modes: the view built from the output equals the top rows computed from scratch.
    #[test]
    fn output_equals_top_rows_computed_from_scratch() {
        for append_only in [false, true] {
            let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            let state = KeyedState::new(1, Arc::clone(&store), 16);
            let mut t = top_configured("I I", state, 3, |c| TopNConfig { append_only_input: append_only, ..c });
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
    /// A write-back state table in `store`, as every operator's.
    fn write_back_table(store: &Arc<dyn StateStore>) -> KeyedState {
        KeyedState::new(1, Arc::clone(store), 4).write_back(None).unwrap()
    }

    /// Restored from a checkpoint, a Top-N reads its partitions back from the store: a deleted
    /// leader reveals the stored next one; over an append-only input the stored leaders decide
    /// what enters.
    #[test]
    fn a_restored_top_n_continues_like_one_that_never_stopped() {
        use crate::operators::operator::testing::{assert_restore_continues, Event::Changes};
        assert_restore_continues(
            &|store| Box::new(top_of("I I", write_back_table(store), 2)),
            &[
                &[Changes(0, "I I\n+ 1 10\n+ 1 30\n+ 1 20\n+ 2 5")],
                &[Changes(0, "I I\n+ 1 25\n+ 2 5")],
                &[Changes(0, "I I\n- 1 30\n+ 3 1")],
                &[Changes(0, "I I\n- 1 25\n- 2 5\n+ 3 2")],
                &[Changes(0, "I I\n- 1 20\n- 2 5")],
            ],
        );
        assert_restore_continues(
            &|store| {
                Box::new(top_configured("I I", write_back_table(store), 2, |c| TopNConfig {
                    append_only_input: true,
                    ..c
                }))
            },
            &[
                &[Changes(0, "I I\n+ 1 10\n+ 1 30\n+ 2 5")],
                &[Changes(0, "I I\n+ 1 20\n+ 2 5")],
                &[Changes(0, "I I\n+ 1 15\n+ 3 1")],
                &[Changes(0, "I I\n+ 1 40\n+ 2 9\n+ 3 2")],
            ],
        );
    }

    /// Restored from a checkpoint, a Top-N per window deletes the partitions of windows that
    /// become final after the restart (a row arriving for one then starts it anew).
    #[test]
    fn a_restored_windowed_top_n_forgets_the_windows_it_had() {
        use crate::operators::operator::testing::{assert_restore_continues, Event::Changes, Event::Watermark};
        const S: i64 = 1_000_000_000;
        for append_only in [false, true] {
            let make = |store: &Arc<dyn StateStore>| -> Box<dyn Operator> {
                Box::new(top_configured("S I", write_back_table(store), 2, |c| TopNConfig {
                    window: Some((0, TimeColumn { close_offset: 0 }, 0)),
                    append_only_input: append_only,
                    ..c
                }))
            };
            assert_restore_continues(
                &make,
                &[
                    &[Changes(0, "S I\n+ 10 5\n+ 10 7\n+ 20 1")],
                    &[Changes(0, "S I\n+ 10 9"), Watermark(5 * S)],
                    &[Changes(0, "S I\n+ 20 3"), Watermark(12 * S)],
                    &[Changes(0, "S I\n+ 10 1\n+ 30 2"), Watermark(25 * S)],
                    &[Changes(0, "S I\n+ 30 4\n+ 20 8")],
                ],
            );
        }
    }
}
