//! [`RelationScanExec`]: DataFusion's leaf plan over one relation's stored rows.
//!
//! A blocking task reads the rows a [`KeyAccess`] allows from one snapshot of the store and
//! hands them over batch by batch, at most [`READ_AHEAD`] batches ahead of the consumer, so a
//! scan's memory is a few batches whatever the relation's size; the read stops when the
//! consumer goes (a satisfied LIMIT, a cancelled query). EXPLAIN shows which rows it reads:
//! `access=keys(n)` (point lookups), `ranges(n)` (key ranges) or `all`, and `index=name` when
//! it reads an index in the relation's place. Built by
//! [`super::provider::RelationTable::scan`].

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Statistics;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};

use super::index::IndexRead;
use super::key_access::KeyAccess;
use super::Relation;
use crate::state::store::{ScanControl, StateStore};

/// Batches a scan reads ahead of its consumer.
const READ_AHEAD: usize = 2;

/// Keys looked up on the query's own task at most; more go to a blocking thread.
const INLINE_LOOKUPS: usize = 16;

pub struct RelationScanExec {
    relation: Arc<Relation>,
    /// The index read in its place, if one is ([`super::index::choose`]): `projection` then
    /// names the index's columns.
    index: Option<Arc<Relation>>,
    store: Arc<dyn StateStore>,
    access: Arc<KeyAccess>,
    /// The user columns handed on (all when None).
    projection: Option<Vec<usize>>,
    /// Stored entries to read at most (a LIMIT with no condition left to apply).
    limit: Option<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl RelationScanExec {
    pub fn new(
        relation: Arc<Relation>,
        store: Arc<dyn StateStore>,
        access: KeyAccess,
        projection: Option<Vec<usize>>,
        limit: Option<usize>,
    ) -> DfResult<RelationScanExec> {
        let schema = match &projection {
            Some(columns) => Arc::new(relation.schema.project(columns)?),
            None => Arc::clone(&relation.schema),
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(RelationScanExec {
            relation,
            index: None,
            store,
            access: Arc::new(access),
            projection,
            limit,
            schema,
            properties: Arc::new(properties),
        })
    }
}

impl RelationScanExec {
    /// A scan of `relation`'s columns `columns` that reads the index `read` chose instead.
    pub fn through_index(
        relation: Arc<Relation>,
        store: Arc<dyn StateStore>,
        read: IndexRead,
        columns: Vec<usize>,
        limit: Option<usize>,
    ) -> DfResult<RelationScanExec> {
        let mut scan = RelationScanExec::new(relation, store, read.access, Some(columns), limit)?;
        scan.index = Some(read.index);
        scan.projection = Some(read.projection);
        Ok(scan)
    }
}

impl fmt::Debug for RelationScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RelationScanExec({})", self.relation.def.name)
    }
}

impl DisplayAs for RelationScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let access = match self.access.as_ref() {
            KeyAccess::Keys(keys) => format!("keys({})", keys.first().map_or(0, |k| k.len())),
            KeyAccess::Ranges(ranges) => format!("ranges({})", ranges.len()),
            KeyAccess::All => "all".to_string(),
        };
        write!(f, "RelationScanExec: relation={}", self.relation.def.name)?;
        if let Some(index) = &self.index {
            write!(f, ", index={}", index.def.name)?;
        }
        write!(f, ", access={access}")?;
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for RelationScanExec {
    fn name(&self) -> &str {
        "RelationScanExec"
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
    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    /// At most as many rows as keys looked up (or as the limit): DataFusion then reads a
    /// small scan on one task rather than spreading its rows over several.
    fn partition_statistics(&self, _partition: Option<usize>) -> DfResult<Arc<Statistics>> {
        let at_most = match (self.access.as_ref(), self.limit) {
            (KeyAccess::Keys(keys), _) => Some(keys.first().map_or(0, |k| k.len())),
            (_, Some(limit)) => Some(limit),
            _ => None,
        };
        let statistics = Statistics::new_unknown(&self.schema);
        Ok(Arc::new(match at_most {
            Some(rows) => statistics.with_num_rows(Precision::Inexact(rows)),
            None => statistics,
        }))
    }

    fn execute(&self, _partition: usize, _context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        // A few keys are looked up here and now: a handful of point reads cost less than
        // handing them to a blocking thread and back.
        if let KeyAccess::Keys(keys) = self.access.as_ref() {
            if keys.first().is_none_or(|k| k.len() <= INLINE_LOOKUPS) {
                let rows = self.relation.rows_with_keys(self.store.as_ref(), keys)?;
                let rows = match &self.projection {
                    Some(columns) => rows.project(columns)?,
                    None => rows,
                };
                return Ok(Box::pin(RecordBatchStreamAdapter::new(
                    Arc::clone(&self.schema),
                    futures::stream::once(async move { Ok(rows) }),
                )));
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(READ_AHEAD);
        // An index's rows are the relation's columns under the index's schema: handed on
        // under the scan's.
        let relation = Arc::clone(self.index.as_ref().unwrap_or(&self.relation));
        let index_schema = self.index.is_some().then(|| Arc::clone(&self.schema));
        let (store, access) = (Arc::clone(&self.store), Arc::clone(&self.access));
        let (projection, limit) = (self.projection.clone(), self.limit);
        let reader = tokio::task::spawn_blocking(move || {
            let mut emit = |batch: RecordBatch| {
                let batch = match &projection {
                    Some(columns) => batch.project(columns)?,
                    None => batch,
                };
                let batch = match &index_schema {
                    Some(schema) => batch.with_schema(Arc::clone(schema))?,
                    None => batch,
                };
                Ok(match tx.blocking_send(Ok(batch)) {
                    Ok(()) => ScanControl::Continue,
                    // The consumer is gone: nothing more to read.
                    Err(_) => ScanControl::Stop,
                })
            };
            let read = match access.as_ref() {
                KeyAccess::Keys(keys) => {
                    relation.rows_with_keys(store.as_ref(), keys).and_then(|rows| emit(rows).map(drop))
                }
                KeyAccess::Ranges(ranges) => relation.stream_rows(store.as_ref(), Some(ranges), limit, &mut emit),
                KeyAccess::All => relation.stream_rows(store.as_ref(), None, limit, &mut emit),
            };
            if let Err(e) = read {
                let _ = tx.blocking_send(Err(DataFusionError::from(e)));
            }
        });
        // After the last batch, the reader's end: a panic there is an error, not a short read.
        let batches = futures::stream::unfold((rx, Some(reader)), |(mut rx, reader)| async move {
            if let Some(batch) = rx.recv().await {
                return Some((batch, (rx, reader)));
            }
            match reader?.await {
                Ok(()) => None,
                Err(e) => Some((Err(DataFusionError::External(Box::new(e))), (rx, None))),
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&self.schema), batches)))
    }
}
