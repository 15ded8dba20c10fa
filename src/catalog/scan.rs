//! [`RelationScanExec`]: DataFusion's leaf plan over one relation's stored rows.
//!
//! A blocking task reads the rows a [`KeyAccess`] allows from one snapshot of the store and
//! hands them over batch by batch, at most [`READ_AHEAD`] batches ahead of the consumer, so a
//! scan's memory is a few batches whatever the relation's size; the read stops when the
//! consumer goes (a satisfied LIMIT, a cancelled query). EXPLAIN shows which rows it reads:
//! `access=keys(n)` (point lookups), `ranges(n)` (key ranges) or `all`, and `index=name` when
//! it reads an index in the relation's place. A read of every row of a large relation goes in
//! parts (`all in 2 parts`, [`RelationScanExec::in_parts`], ADR 41): one partition per range of
//! vnodes, each read by its own thread, all from one snapshot. Built by
//! [`super::provider::RelationTable::scan`].

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc::{Receiver, Sender};

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
use crate::state::table::BatchSink;
use crate::types::vnode::VNODE_COUNT;

/// Batches a scan reads ahead of its consumer.
const READ_AHEAD: usize = 2;

/// How a session's scans are planned: from how many stored bytes (as the store's files
/// estimate them) a read of every row goes in parts, PostgreSQL's `min_parallel_table_scan_size`
/// (default 8 MB: some 200,000 rows of a few columns, which one thread reads in about 60 ms).
/// Carried as an extension of the session's DataFusion configuration (`frontend::session` sets
/// it), read when a scan is planned.
pub struct ScanSettings {
    parts_from_bytes: AtomicU64,
}

impl ScanSettings {
    pub const DEFAULT_PARTS_FROM_BYTES: u64 = 8 << 20;

    pub fn set_parts_from_bytes(&self, bytes: u64) {
        self.parts_from_bytes.store(bytes, Ordering::Relaxed);
    }

    fn parts_from_bytes(&self) -> u64 {
        self.parts_from_bytes.load(Ordering::Relaxed)
    }
}

impl Default for ScanSettings {
    fn default() -> ScanSettings {
        ScanSettings { parts_from_bytes: AtomicU64::new(ScanSettings::DEFAULT_PARTS_FROM_BYTES) }
    }
}

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
    /// How many parts a read of every row is split into, each a partition of the plan read on
    /// its own thread (1: one partition, read in key order).
    parts: usize,
    /// A read in parts under way: each part's batches, taken by the partition that reads them.
    /// The first partition executed starts every part, so all read one snapshot.
    part_readers: Mutex<Vec<Option<PartReceiver>>>,
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
            parts: 1,
            part_readers: Mutex::new(Vec::new()),
            schema,
            properties: Arc::new(properties),
        })
    }

    /// This scan of every row read in `parts` parts, as many partitions, where the store reads
    /// parts at the same time, the relation's rows can be read in parts and its stored bytes
    /// reach `settings`' bound; else unchanged.
    pub fn in_parts(mut self, parts: usize, settings: &ScanSettings) -> RelationScanExec {
        let whole = matches!(self.access.as_ref(), KeyAccess::All) && self.index.is_none() && self.limit.is_none();
        let parts = parts.min(VNODE_COUNT as usize);
        if parts < 2 || !whole || !self.relation.reads_in_parts() || !self.store.scans_parts_in_parallel() {
            return self;
        }
        // A small relation is read on one thread: a thread per part costs more than it saves.
        let bound = settings.parts_from_bytes();
        if bound > 0 && self.store.approximate_table_bytes(self.relation.table.table_id()) < bound {
            return self;
        }
        self.parts = parts;
        self.properties =
            Arc::new(self.properties.as_ref().clone().with_partitioning(Partitioning::UnknownPartitioning(parts)));
        self
    }

    /// Starts reading every part on a blocking thread: one receiver of batches per part.
    fn start_parts(&self) -> Vec<Option<PartReceiver>> {
        let (mut senders, receivers): (Vec<PartSender>, Vec<Option<PartReceiver>>) = (0..self.parts)
            .map(|_| {
                let (tx, rx) = tokio::sync::mpsc::channel::<DfResult<RecordBatch>>(READ_AHEAD);
                let done = Arc::new(AtomicBool::new(false));
                let sender = PartSender { tx: Some(tx), projection: self.projection.clone(), done: Arc::clone(&done) };
                (sender, Some(PartReceiver { rx, done }))
            })
            .unzip();
        let (relation, store) = (Arc::clone(&self.relation), Arc::clone(&self.store));
        tokio::task::spawn_blocking(move || {
            let read = catch_unwind(AssertUnwindSafe(|| {
                let mut sinks: Vec<&mut dyn BatchSink> = senders.iter_mut().map(|s| s as &mut dyn BatchSink).collect();
                relation.stream_parts(store.as_ref(), &mut sinks)
            }))
            .unwrap_or_else(|_| Err(crate::error::WeirError::internal("a scan in parts panicked")));
            // A part that never started (no thread for it, or the read refused before any)
            // was told nothing: its consumer gets the error.
            if let Err(e) = read {
                for sender in &mut senders {
                    sender.end(Err(e.clone()));
                }
            }
        });
        receivers
    }

    /// This scan as planned, with no read under way: DataFusion re-executes a plan (a recursive
    /// query's rounds) through this.
    fn unstarted(&self) -> RelationScanExec {
        RelationScanExec {
            relation: Arc::clone(&self.relation),
            index: self.index.clone(),
            store: Arc::clone(&self.store),
            access: Arc::clone(&self.access),
            projection: self.projection.clone(),
            limit: self.limit,
            parts: self.parts,
            part_readers: Mutex::new(Vec::new()),
            schema: Arc::clone(&self.schema),
            properties: Arc::clone(&self.properties),
        }
    }
}

/// Where a part of a scan in parts hands its batches: its partition's channel, and whether it
/// ended whole.
struct PartSender {
    /// None once the part ended.
    tx: Option<Sender<DfResult<RecordBatch>>>,
    projection: Option<Vec<usize>>,
    done: Arc<AtomicBool>,
}

impl BatchSink for PartSender {
    fn batch(&mut self, batch: RecordBatch) -> crate::error::Result<ScanControl> {
        let batch = match &self.projection {
            Some(columns) => batch.project(columns)?,
            None => batch,
        };
        Ok(match self.tx.as_ref().map(|tx| tx.blocking_send(Ok(batch))) {
            Some(Ok(())) => ScanControl::Continue,
            // The part's consumer is gone: nothing more to read for it.
            _ => ScanControl::Stop,
        })
    }

    fn end(&mut self, read: crate::error::Result<()>) {
        let Some(tx) = self.tx.take() else { return };
        match read {
            Ok(()) => self.done.store(true, Ordering::Release),
            Err(e) => {
                let _ = tx.blocking_send(Err(DataFusionError::from(e)));
            }
        }
    }
}

/// A partition's end of a part of a scan in parts.
struct PartReceiver {
    rx: Receiver<DfResult<RecordBatch>>,
    /// Set when the part was read whole: a channel that closes without it (the read never
    /// ran, or stopped without a word) is an error, never a short answer taken for a whole one.
    done: Arc<AtomicBool>,
}

impl PartReceiver {
    fn into_stream(self) -> impl futures::Stream<Item = DfResult<RecordBatch>> + Send {
        futures::stream::unfold(Some(self), |part| async move {
            let mut part = part?;
            match part.rx.recv().await {
                Some(batch) => Some((batch, Some(part))),
                None if part.done.load(Ordering::Acquire) => None,
                None => Some((Err(DataFusionError::Execution("a part of the scan ended unread".into())), None)),
            }
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
            KeyAccess::All if self.parts > 1 => format!("all in {} parts", self.parts),
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
    /// A plan run again starts its read again (a scan in parts keeps the parts of its run).
    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.unstarted()))
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

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
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
        if self.parts > 1 {
            let rx = {
                let mut readers = self.part_readers.lock();
                // The first partition executed starts every part; a partition executed again
                // (its part taken) starts them again.
                if readers.get(partition).is_none_or(Option::is_none) {
                    *readers = self.start_parts();
                }
                readers.get_mut(partition).and_then(Option::take)
            };
            let Some(part) = rx else {
                return Err(DataFusionError::Internal(format!(
                    "no part {partition} in a scan of {} parts",
                    self.parts
                )));
            };
            return Ok(Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&self.schema), part.into_stream())));
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
