//! Unnest: each row becomes one row per element of its list columns (`SELECT id, unnest(tags)`,
//! and `generate_series` in a select list, which the frontend turns into an unnest of a list).
//!
//! Stateless: a row's output rows are a function of the row alone, so an insert's rows are
//! inserted and a delete's deleted with the same op. Several list columns of one row are unnested
//! side by side, as long as the longest, the shorter padded with NULL (as PostgreSQL and
//! DataFusion do). A NULL or empty list gives no row, or one row of NULL where the query asked
//! for it ([`NullHandling`]). The other columns are the row's, repeated.
//!
//! Planned by `stream_plan::translate` for DataFusion's `Unnest` of lists one level deep.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, GenericListArray, OffsetSizeTrait, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::NullHandling;

use super::operator::Operator;
use crate::error::{Result, WeirError};
use crate::types::clock::Clock;
use crate::types::{ChangeBatch, Op};

/// What an [`Unnest`] computes (from the stream plan's node).
#[derive(Clone)]
pub struct UnnestConfig {
    /// Per output column, the input column it comes from, and whether it is that column's list
    /// unnested (else the column's value, repeated).
    pub columns: Vec<(usize, bool)>,
    pub null_handling: NullHandling,
    pub schema: SchemaRef,
}

pub struct Unnest {
    config: UnnestConfig,
}

impl Unnest {
    pub fn new(config: UnnestConfig) -> Unnest {
        Unnest { config }
    }
}

/// A list column's pieces: each row's first element and length in `values` (None: a NULL list).
struct Spans {
    values: ArrayRef,
    spans: Vec<Option<(usize, usize)>>,
}

fn spans_of<O: OffsetSizeTrait>(list: &GenericListArray<O>) -> Spans {
    let offsets = list.value_offsets();
    let spans = (0..list.len())
        .map(|i| list.is_valid(i).then(|| (offsets[i].as_usize(), (offsets[i + 1] - offsets[i]).as_usize())))
        .collect();
    Spans { values: Arc::clone(list.values()), spans }
}

fn spans(column: &ArrayRef) -> Result<Spans> {
    match column.data_type() {
        DataType::List(_) => Ok(spans_of(column.as_list::<i32>())),
        DataType::LargeList(_) => Ok(spans_of(column.as_list::<i64>())),
        other => Err(WeirError::unsupported(format!("unnest of a {other} column in a materialized view"))),
    }
}

impl Operator for Unnest {
    fn describe(&self) -> String {
        let unnested: Vec<String> =
            self.config.columns.iter().filter(|(_, list)| *list).map(|(c, _)| format!("#{c}")).collect();
        format!("Unnest: [{}] ({:?})", unnested.join(", "), self.config.null_handling)
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let data = &batch.data;
        let mut lists: Vec<(usize, Spans)> = Vec::new();
        for &(c, list) in &self.config.columns {
            if list && !lists.iter().any(|(l, _)| *l == c) {
                lists.push((c, spans(data.column(c))?));
            }
        }
        // Each input row's output rows.
        let mut rows: Vec<u32> = Vec::new();
        let mut element: Vec<u32> = Vec::new();
        for i in 0..data.num_rows() {
            let longest = lists.iter().map(|(_, l)| l.spans[i].map_or(0, |s| s.1)).max().unwrap_or(0);
            let count = match (longest, self.config.null_handling) {
                (0, NullHandling::PreserveAndExpandEmpty) => 1,
                (0, NullHandling::Preserve) => lists.iter().any(|(_, l)| l.spans[i].is_none()) as usize,
                (0, _) => 0,
                (n, _) => n,
            };
            for j in 0..count {
                rows.push(i as u32);
                element.push(j as u32);
            }
        }
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let repeat = UInt32Array::from(rows.clone());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.config.columns.len());
        for &(c, list) in &self.config.columns {
            if !list {
                columns.push(take(data.column(c), &repeat, None)?);
                continue;
            }
            let spans = &lists.iter().find(|(l, _)| *l == c).expect("spans of every list").1;
            let indices: UInt32Array = rows
                .iter()
                .zip(&element)
                .map(|(&i, &j)| match spans.spans[i as usize] {
                    Some((start, len)) if (j as usize) < len => Some((start + j as usize) as u32),
                    _ => None,
                })
                .collect();
            columns.push(take(spans.values.as_ref(), &indices, None)?);
        }
        let columns = columns
            .into_iter()
            .zip(self.config.schema.fields())
            .map(|(column, field)| match column.data_type() == field.data_type() {
                true => Ok(column),
                false => Ok(datafusion::arrow::compute::cast(&column, field.data_type())?),
            })
            .collect::<Result<Vec<_>>>()?;
        // An update's old and new rows may unnest to different numbers of rows: no pairs.
        let ops: Vec<Op> = rows
            .iter()
            .map(|&i| match batch.ops[i as usize] {
                Op::UpdateDelete => Op::Delete,
                Op::UpdateInsert => Op::Insert,
                op => op,
            })
            .collect();
        Ok(vec![ChangeBatch::new(RecordBatch::try_new(Arc::clone(&self.config.schema), columns)?, ops)])
    }
}
