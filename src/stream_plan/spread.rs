//! `spread_bucket(columns)`: a row's bucket among [`BUCKETS`], from a hash of its columns: what a
//! two-phase aggregate's partial phase grouped by besides the group keys in views of state
//! formats before `PARTIALS_PER_SHARD` (ADR 31), kept for them: one hot group's rows are spread
//! over the shards, deterministically (a row's delete meets its insert: the same columns, the
//! same bucket), whatever the parallelism. Newer views group partials by shard instead.
//!
//! A physical expression of its own: DataFusion has no row hash among its functions.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::error::Result;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;

use crate::types::vnode::{fnv1a, FNV1A_START};

/// How many buckets a hot group's rows are spread over.
pub const BUCKETS: u64 = 64;

#[derive(Debug, Hash, PartialEq, Eq)]
pub struct SpreadBucket {
    columns: Vec<Arc<dyn PhysicalExpr>>,
}

impl SpreadBucket {
    pub fn new(columns: Vec<Arc<dyn PhysicalExpr>>) -> Arc<dyn PhysicalExpr> {
        Arc::new(SpreadBucket { columns })
    }
}

impl fmt::Display for SpreadBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let columns: Vec<String> = self.columns.iter().map(|c| c.to_string()).collect();
        write!(f, "spread_bucket({})", columns.join(", "))
    }
}

impl PhysicalExpr for SpreadBucket {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::UInt64)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let arrays = self
            .columns
            .iter()
            .map(|c| c.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let fields = arrays.iter().map(|a| SortField::new(a.data_type().clone())).collect();
        let rows = RowConverter::new(fields)?.convert_columns(&arrays)?;
        let buckets: UInt64Array = rows.iter().map(|row| fnv1a(FNV1A_START, row.as_ref()) % BUCKETS).collect();
        Ok(ColumnarValue::Array(Arc::new(buckets)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.columns.iter().collect()
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn PhysicalExpr>>) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(SpreadBucket { columns: children }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}
