//! Writes to a table: INSERT, UPDATE, DELETE and TRUNCATE as DataFusion execution plans.
//!
//! DataFusion plans the statement (coercing values to column types, resolving `WHERE` and `SET`
//! expressions) and calls the table's provider; the provider hands the work to [`DmlExec`], a leaf
//! plan that performs it when executed and yields one row, `count`, as DataFusion expects.
//!
//! Each statement holds its table's write lock from planning until it has committed, reads the
//! rows it changes from the store under that lock, and commits all of its changes in one atomic
//! write batch: a statement is applied entirely or not at all, and concurrent writers of one
//! table are serialised.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::future::BoxFuture;
use futures::StreamExt;
use parking_lot::Mutex;

use super::Relation;
use crate::error::{Result, SqlState, WeirError};
use crate::state::store::{StateStore, WriteBatch};

/// The deferred body of a DML statement: given the task context, performs the write and
/// returns how many rows it affected.
pub type DmlWork = Box<dyn FnOnce(Arc<TaskContext>) -> BoxFuture<'static, DfResult<u64>> + Send>;

/// A leaf plan that runs a [`DmlWork`] once, when executed, and yields `count`.
pub struct DmlExec {
    label: String,
    work: Mutex<Option<DmlWork>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl DmlExec {
    pub fn new(label: impl Into<String>, work: DmlWork) -> Arc<DmlExec> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "count",
            DataType::UInt64,
            false,
        )]));
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Arc::new(DmlExec {
            label: label.into(),
            work: Mutex::new(Some(work)),
            schema,
            properties: Arc::new(properties),
        })
    }
}

impl fmt::Debug for DmlExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DmlExec({})", self.label)
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DmlExec: {}", self.label)
    }
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &str {
        "DmlExec"
    }
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let work = self
            .work
            .lock()
            .take()
            .ok_or_else(|| DataFusionError::Internal("a DML plan can run only once".into()))?;
        let schema = Arc::clone(&self.schema);
        let out_schema = Arc::clone(&schema);
        let fut = async move {
            let n = work(context).await?;
            Ok(RecordBatch::try_new(
                out_schema,
                vec![Arc::new(UInt64Array::from(vec![n])) as ArrayRef],
            )?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(fut),
        )))
    }
}

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

/// Turns a batch of user columns into a batch of stored columns, casting each to the column's
/// type and appending fresh hidden row ids where the table has them.
pub fn to_stored(relation: &Relation, batch: &RecordBatch) -> Result<RecordBatch> {
    check_not_null(relation, batch.columns())?;
    let stored = relation.table.schema();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(stored.fields().len());
    for (i, field) in relation.schema.fields().iter().enumerate() {
        let col = batch.column(i);
        columns.push(if col.data_type() == field.data_type() {
            Arc::clone(col)
        } else {
            cast(col, field.data_type())?
        });
    }
    if relation.has_hidden_row_id() {
        let n = batch.num_rows() as u64;
        let first = relation.allocate_row_ids(n) as i64;
        columns.push(Arc::new(Int64Array::from_iter_values(
            first..first + n as i64,
        )));
    }
    Ok(RecordBatch::try_new(Arc::clone(stored), columns)?)
}

/// Scans every stored row of `relation`, blocking (call from a blocking task).
pub fn scan_stored(relation: &Relation, store: &dyn StateStore) -> Result<Vec<RecordBatch>> {
    relation.table.scan(store, 8192)
}

/// Evaluates `filters` (all must hold; none = every row) over a stored batch.
pub fn filter_mask(
    filters: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> DfResult<BooleanArray> {
    let mut mask = BooleanArray::from(vec![true; batch.num_rows()]);
    for f in filters {
        let v = f.evaluate(batch)?.into_array(batch.num_rows())?;
        let b = v
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Plan("WHERE condition must be boolean".into()))?;
        mask = datafusion::arrow::compute::and_kleene(&mask, b)?;
    }
    // NULL means "does not match".
    Ok(mask.iter().map(|v| Some(v == Some(true))).collect())
}

/// Runs INSERT: stores every row of `input` (upserting on the primary key).
pub async fn insert(
    relation: Arc<Relation>,
    store: Arc<dyn StateStore>,
    mut input: SendableRecordBatchStream,
) -> Result<u64> {
    let _guard = relation.write_lock.lock().await;
    let mut wb = WriteBatch::default();
    let mut count = 0u64;
    while let Some(batch) = input.next().await {
        let batch = batch?;
        count += batch.num_rows() as u64;
        relation
            .table
            .put_batch(&to_stored(&relation, &batch)?, &mut wb)?;
    }
    if relation.has_hidden_row_id() {
        relation.persist_row_id(&mut wb);
    }
    commit(store, wb).await?;
    Ok(count)
}

/// Runs DELETE (and TRUNCATE, with no filters).
pub async fn delete(
    relation: Arc<Relation>,
    store: Arc<dyn StateStore>,
    filters: Vec<Arc<dyn PhysicalExpr>>,
) -> Result<u64> {
    let _guard = relation.write_lock.lock().await;
    let rel = Arc::clone(&relation);
    let st = Arc::clone(&store);
    let wb_and_count = tokio::task::spawn_blocking(move || -> Result<(WriteBatch, u64)> {
        let mut wb = WriteBatch::default();
        let mut count = 0u64;
        for batch in scan_stored(&rel, st.as_ref())? {
            let doomed = filter_record_batch(&batch, &filter_mask(&filters, &batch)?)?;
            count += doomed.num_rows() as u64;
            rel.table.delete_batch(&doomed, &mut wb)?;
        }
        Ok((wb, count))
    })
    .await
    .map_err(|e| WeirError::internal(e.to_string()))??;
    let (wb, count) = wb_and_count;
    commit(store, wb).await?;
    Ok(count)
}

/// Runs UPDATE: every matching row is replaced by its updated version (its key may change).
pub async fn update(
    relation: Arc<Relation>,
    store: Arc<dyn StateStore>,
    assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
    filters: Vec<Arc<dyn PhysicalExpr>>,
) -> Result<u64> {
    let _guard = relation.write_lock.lock().await;
    let rel = Arc::clone(&relation);
    let st = Arc::clone(&store);
    let (wb, count) = tokio::task::spawn_blocking(move || -> Result<(WriteBatch, u64)> {
        let mut wb = WriteBatch::default();
        let mut count = 0u64;
        let user_columns = rel.schema.fields().len();
        for batch in scan_stored(&rel, st.as_ref())? {
            let old = filter_record_batch(&batch, &filter_mask(&filters, &batch)?)?;
            if old.num_rows() == 0 {
                continue;
            }
            count += old.num_rows() as u64;
            let mut columns: Vec<ArrayRef> = old.columns().to_vec();
            for (index, expr) in &assignments {
                let target = rel.schema.field(*index).data_type();
                let v = expr.evaluate(&old)?.into_array(old.num_rows())?;
                columns[*index] = if v.data_type() == target {
                    v
                } else {
                    cast(&v, target)?
                };
            }
            check_not_null(&rel, &columns[..user_columns])?;
            let new = RecordBatch::try_new(Arc::clone(old.schema_ref()), columns)?;
            rel.table.delete_batch(&old, &mut wb)?;
            rel.table.put_batch(&new, &mut wb)?;
        }
        Ok((wb, count))
    })
    .await
    .map_err(|e| WeirError::internal(e.to_string()))??;
    commit(store, wb).await?;
    Ok(count)
}

async fn commit(store: Arc<dyn StateStore>, wb: WriteBatch) -> Result<()> {
    if wb.is_empty() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || store.write(wb))
        .await
        .map_err(|e| WeirError::internal(e.to_string()))?
}
