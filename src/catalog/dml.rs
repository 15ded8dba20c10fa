//! Writes to a table: INSERT, UPDATE, DELETE and TRUNCATE as DataFusion execution plans.
//!
//! DataFusion plans the statement (coercing values to column types, resolving `WHERE` and `SET`
//! expressions) and calls the table's provider; the provider hands the work to [`DmlExec`], a leaf
//! plan that performs it when executed and yields one row, `count`, as DataFusion expects.
//!
//! Each statement holds its table's write lock until it has committed, reads the rows it
//! changes from the store under that lock, and commits all of its changes in one atomic write
//! batch: a statement is applied entirely or not at all, and concurrent writers of one table
//! are serialised. After the commit, still under the lock, the statement's changes go to the
//! table's subscribers (materialized views), so they see every committed change once, in
//! commit order. The table's indexes are kept up to date in the same write batch
//! ([`super::index::maintain`]). Inside a transaction block the statement writes into the
//! transaction instead, under the table's writer lock, which the transaction keeps until it
//! ends; its COMMIT does the rest ([`super::transaction`]).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::future::BoxFuture;
use futures::StreamExt;
use parking_lot::Mutex;

use std::collections::HashMap;

use datafusion::arrow::compute::concat_batches;

use super::change_log::{self, LoggedChanges};
use super::changes::ChangeHub;
use super::index::{self, IndexRead};
use super::key_access::KeyAccess;
use super::rows::{check_not_null, fit_declared_types, to_stored};
use super::transaction::Transaction;
use super::{Catalog, Relation};
use crate::error::{Result, SqlState, WeirError};
use crate::state::store::{StateStore, WriteBatch};
use crate::types::{ChangeBatch, Message, Op};

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
        let schema = Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)]));
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
    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn execute(&self, _partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let work =
            self.work.lock().take().ok_or_else(|| DataFusionError::Internal("a DML plan can run only once".into()))?;
        let schema = Arc::clone(&self.schema);
        let out_schema = Arc::clone(&schema);
        let fut = async move {
            let n = work(context).await?;
            Ok(RecordBatch::try_new(out_schema, vec![Arc::new(UInt64Array::from(vec![n])) as ArrayRef])?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::once(fut))))
    }
}

/// An UPDATE that changes primary keys may not give two rows one key, nor a row the key of a
/// row it does not update (23505, as Postgres): that row would be overwritten.
fn check_moved_keys(relation: &Relation, store: &dyn StateStore, pairs: &[(RecordBatch, RecordBatch)]) -> Result<()> {
    let table = &relation.table;
    let mut leaving = std::collections::HashSet::new();
    for (old, _) in pairs {
        leaving.extend(table.encode_keys(old)?.iter().map(|k| k.as_ref().to_vec()));
    }
    let mut arriving: Vec<Vec<u8>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (_, new) in pairs {
        for key in table.encode_keys(new)?.iter() {
            let key = key.as_ref().to_vec();
            if !seen.insert(key.clone()) {
                return Err(duplicate_key(relation));
            }
            if !leaving.contains(&key) {
                arriving.push(key);
            }
        }
    }
    let (_, found) = table.get_many(store, &arriving)?;
    if found.iter().any(Option::is_some) {
        return Err(duplicate_key(relation));
    }
    Ok(())
}

fn duplicate_key(relation: &Relation) -> WeirError {
    WeirError::new(
        SqlState::UNIQUE_VIOLATION,
        format!("duplicate key value violates unique constraint \"{}_pkey\"", relation.def.name),
    )
}

/// Evaluates `filters` (all must hold; none = every row) over a stored batch.
pub fn filter_mask(filters: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> DfResult<BooleanArray> {
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

/// Writes to one table: each method is one statement, atomic, under the table's write lock,
/// and publishes the statement's changes (user columns) to the table's subscribers after it
/// has committed. The statement's write batch also holds its [`change_log`] entry.
pub struct Writer {
    pub relation: Arc<Relation>,
    /// The store, or the transaction's view of it.
    store: Arc<dyn StateStore>,
    changes: Arc<ChangeHub>,
    /// Whether statements are logged ([`Catalog::logs_changes`]).
    log_changes: bool,
    /// The transaction a user's statement writes in: its writes go there until COMMIT.
    transaction: Option<Arc<Transaction>>,
}

/// The locks a user's statement writes under: the table's writer lock and write lock for
/// the statement, or, in a transaction, its writer lock until the transaction ends (which the
/// transaction holds).
enum StatementLocks {
    Own(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>, #[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>),
    InTransaction,
}

/// Which stored rows a DELETE or UPDATE reads: those its conditions allow by the table's key
/// ([`super::key_access`]), or, for a keyed table, through an index holding every column
/// ([`super::index::choose`]).
pub enum Candidates {
    ByKey(KeyAccess),
    /// Through an index; the key access is what is read if the index is dropped meanwhile.
    ThroughIndex(IndexRead, KeyAccess),
}

/// The stored rows a DELETE or UPDATE may change: those `access` allows, else every row.
fn candidates(relation: &Relation, store: &dyn StateStore, access: Candidates) -> Result<Vec<RecordBatch>> {
    let access = match access {
        Candidates::ByKey(access) => access,
        // The index was chosen when the statement was planned; one retired since (DROP INDEX)
        // is not read: the relation is, whole.
        Candidates::ThroughIndex(read, own) if read.index.is_retired() => own,
        Candidates::ThroughIndex(read, _) => {
            // A keyed table's stored rows are its user columns, which the index holds all of.
            let KeyAccess::Ranges(ranges) = &read.access else {
                return Err(WeirError::internal("an index is read by key ranges"));
            };
            let mut batches = Vec::new();
            read.index.stream_rows(store, Some(ranges), None, &mut |rows| {
                let columns = rows.project(&read.projection)?.columns().to_vec();
                batches.push(RecordBatch::try_new(Arc::clone(relation.table.schema()), columns)?);
                Ok(crate::state::store::ScanControl::Continue)
            })?;
            return Ok(batches);
        }
    };
    let ranges = match access {
        KeyAccess::Keys(keys) => return Ok(vec![relation.rows_with_keys(store, &keys)?]),
        KeyAccess::Ranges(ranges) => Some(ranges),
        KeyAccess::All => None,
    };
    let mut batches = Vec::new();
    relation.table.scan_batches(store, ranges.as_deref(), 8192, None, &mut |batch| {
        batches.push(batch);
        Ok(crate::state::store::ScanControl::Continue)
    })?;
    Ok(batches)
}

impl Writer {
    pub fn new(catalog: &Catalog, relation: Arc<Relation>) -> Writer {
        Writer::within(catalog, relation, None)
    }

    /// A writer of a user's statement, in `transaction` if the session has one open.
    pub fn within(catalog: &Catalog, relation: Arc<Relation>, transaction: Option<Arc<Transaction>>) -> Writer {
        Writer {
            store: transaction.as_ref().map_or_else(|| Arc::clone(catalog.store()), |t| t.store()),
            relation,
            changes: Arc::clone(&catalog.changes),
            log_changes: catalog.logs_changes(),
            transaction,
        }
    }

    /// Takes what a user's statement writes under ([`StatementLocks`]).
    async fn lock_for_statement(&self) -> Result<StatementLocks> {
        if let Some(transaction) = &self.transaction {
            transaction.lock(&self.relation).await?;
            return Ok(StatementLocks::InTransaction);
        }
        let writers = Arc::clone(&self.relation.writers).lock_owned().await;
        let write = Arc::clone(&self.relation.write_lock).lock_owned().await;
        Ok(StatementLocks::Own(writers, write))
    }

    fn user_columns(&self, stored: &RecordBatch) -> Result<RecordBatch> {
        let user: Vec<usize> = (0..self.relation.schema.fields().len()).collect();
        Ok(stored.project(&user)?)
    }

    /// INSERT: stores every row of `input`, upserting on the primary key.
    pub async fn insert(&self, mut input: SendableRecordBatchStream) -> Result<u64> {
        let _locks = self.lock_for_statement().await?;
        let mut batches = Vec::new();
        while let Some(batch) = input.next().await {
            batches.push(batch?);
        }
        self.insert_locked(&batches, WriteBatch::default(), None, None).await
    }

    /// Appends `batches` (user columns) and the writes in `also` in one atomic write: how a
    /// source stores a chunk of rows together with its new offset. `read_at` is when the source
    /// began reading the chunk; views measure their freshness from it.
    pub async fn append(&self, batches: &[RecordBatch], also: WriteBatch, read_at: std::time::Instant) -> Result<u64> {
        let _guard = self.relation.write_lock.lock().await;
        self.insert_locked(batches, also, Some(read_at), None).await
    }

    /// Stores a keyed chunk of a table fed by a connector (`FORMAT UPSERT`) with the writes in
    /// `also`, in one atomic write: the rows of the keys in `deleted` (one array per primary-key
    /// column) removed, `upserts` stored over their keys' rows. No key is in both. `read_at` as
    /// in [`Writer::append`].
    pub async fn apply_keyed(
        &self,
        upserts: &RecordBatch,
        deleted: &[ArrayRef],
        mut also: WriteBatch,
        read_at: std::time::Instant,
    ) -> Result<u64> {
        let _guard = self.relation.write_lock.lock().await;
        let gone = match deleted.first() {
            Some(column) if !column.is_empty() => {
                let gone = self.relation.rows_with_keys(self.store.as_ref(), deleted)?;
                self.relation.table.delete_batch(&gone, &mut also)?;
                Some(gone)
            }
            _ => None,
        };
        let count = gone.as_ref().map_or(0, |g| g.num_rows() as u64);
        Ok(count + self.insert_locked(std::slice::from_ref(upserts), also, Some(read_at), gone).await?)
    }

    /// Commits `also` and publishes `rows` (the relation's rows, as from [`rows_stamped_at`])
    /// as inserts, storing no rows: how a replayed source writes `chunk`, whose rows its
    /// connector produces again when they are read. `read_at` as in [`Writer::append`].
    pub async fn announce(
        &self,
        rows: RecordBatch,
        also: WriteBatch,
        read_at: std::time::Instant,
        chunk: crate::catalog::replay::ChunkEntry,
    ) -> Result<u64> {
        let _guard = self.relation.write_lock.lock().await;
        let count = rows.num_rows() as u64;
        let listening = self.changes.has_subscribers(self.relation.def.id).await;
        let logged = if listening { LoggedChanges::Chunk(chunk) } else { LoggedChanges::None };
        self.commit(also, listening.then(|| ChangeBatch::inserts(rows)), logged, Some(read_at)).await?;
        Ok(count)
    }

    /// Stores `batches` with `wb`'s other writes (which removed the stored rows `removed`, if
    /// any, of keys not in `batches`), then publishes the changelog (under the write lock, held
    /// by the caller).
    async fn insert_locked(
        &self,
        batches: &[RecordBatch],
        mut wb: WriteBatch,
        since: Option<std::time::Instant>,
        removed: Option<RecordBatch>,
    ) -> Result<u64> {
        // A transaction's changes are kept for COMMIT, when a view may listen that does not now.
        let listening = self.transaction.is_some() || self.changes.has_subscribers(self.relation.def.id).await;
        // Indexes are kept from the changes, as views are.
        let indexed = index::has_indexes(&self.relation);
        let mut count = 0u64;
        let mut stored_batches = Vec::new();
        for batch in batches {
            count += batch.num_rows() as u64;
            let stored = to_stored(&self.relation, batch)?;
            self.relation.table.put_batch(&stored, &mut wb)?;
            if listening || indexed {
                stored_batches.push(stored);
            }
        }
        if self.relation.has_hidden_row_id() {
            self.relation.persist_row_id(&mut wb);
        }
        let changes = match (listening || indexed, removed) {
            (false, _) => None,
            (true, None) => Some(self.insert_changes(&stored_batches)?),
            (true, Some(removed)) => {
                let deletes = ChangeBatch::deletes(self.user_columns(&removed)?);
                let inserts = self.insert_changes(&stored_batches)?;
                Some(ChangeBatch::concat(&self.relation.schema, &[deletes, inserts])?)
            }
        };
        if let Some(changes) = changes.as_ref().filter(|_| indexed) {
            index::maintain(&self.relation, self.store.as_ref(), changes, &mut wb)?;
        }
        self.commit_logged(wb, changes.filter(|_| listening), since).await?;
        Ok(count)
    }

    /// The changelog of an insert: `+` for new keys, `U-` old / `U+` new for replaced ones
    /// (earlier rows of the same statement included).
    fn insert_changes(&self, stored: &[RecordBatch]) -> Result<ChangeBatch> {
        let schema = Arc::clone(&self.relation.schema);
        let all = concat_batches(self.relation.table.schema(), stored)?;
        let new_rows = self.user_columns(&all)?;
        if self.relation.def.primary_key.is_empty() {
            return Ok(ChangeBatch::inserts(new_rows));
        }
        // Which rows replace one stored before the statement (looked up in one read), and
        // which replace an earlier row of the same statement.
        let keys = self.relation.table.encode_keys(&all)?;
        let mut earlier: HashMap<&[u8], usize> = HashMap::new();
        let mut replaces: Vec<Option<(usize, usize)>> = Vec::with_capacity(all.num_rows()); // (source, row)
        let mut to_read: Vec<(usize, Vec<u8>)> = Vec::new();
        for i in 0..all.num_rows() {
            let key = keys.row(i).data();
            match earlier.insert(key, i) {
                Some(previous) => replaces.push(Some((1, previous))),
                None => {
                    replaces.push(None);
                    to_read.push((i, key.to_vec()));
                }
            }
        }
        let read_keys: Vec<Vec<u8>> = to_read.iter().map(|(_, k)| k.clone()).collect();
        let (old_rows, found) = self.relation.table.get_many(self.store.as_ref(), &read_keys)?;
        for ((i, _), hit) in to_read.iter().zip(found) {
            if let Some(old) = hit {
                replaces[*i] = Some((0, old));
            }
        }
        // Each new row, preceded by the row it replaces.
        let old_rows = self.user_columns(&old_rows)?;
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(all.num_rows() * 2);
        let mut ops = Vec::with_capacity(all.num_rows() * 2);
        for (i, replaced) in replaces.into_iter().enumerate() {
            match replaced {
                Some(old) => {
                    picks.push(old);
                    ops.push(Op::UpdateDelete);
                    ops.push(Op::UpdateInsert);
                }
                None => ops.push(Op::Insert),
            }
            picks.push((1, i));
        }
        let columns = (0..schema.fields().len())
            .map(|c| {
                let sources: [&dyn datafusion::arrow::array::Array; 2] =
                    [old_rows.column(c).as_ref(), new_rows.column(c).as_ref()];
                datafusion::arrow::compute::interleave(&sources, &picks)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(ChangeBatch::new(RecordBatch::try_new(schema, columns)?, ops))
    }

    /// DELETE (and TRUNCATE, with no filters).
    /// DELETE: every row matching `filters`. `access`: the stored rows that can match (the
    /// filters narrow the key), the only ones read.
    pub async fn delete(&self, filters: Vec<Arc<dyn PhysicalExpr>>, access: Candidates) -> Result<u64> {
        let _locks = self.lock_for_statement().await?;
        let relation = Arc::clone(&self.relation);
        let store = Arc::clone(&self.store);
        let (wb, doomed) = tokio::task::spawn_blocking(move || -> Result<(WriteBatch, Vec<RecordBatch>)> {
            let mut wb = WriteBatch::default();
            let mut doomed = Vec::new();
            for batch in candidates(&relation, store.as_ref(), access)? {
                let gone = filter_record_batch(&batch, &filter_mask(&filters, &batch)?)?;
                relation.table.delete_batch(&gone, &mut wb)?;
                doomed.push(gone);
            }
            Ok((wb, doomed))
        })
        .await
        .map_err(|e| WeirError::internal(e.to_string()))??;
        let count = doomed.iter().map(|b| b.num_rows() as u64).sum();
        let rows = doomed.iter().map(|b| self.user_columns(b)).collect::<Result<Vec<_>>>()?;
        let changes = ChangeBatch::deletes(concat_batches(&self.relation.schema, &rows)?);
        let mut wb = wb;
        index::maintain(&self.relation, self.store.as_ref(), &changes, &mut wb)?;
        self.commit_logged(wb, Some(changes), None).await?;
        Ok(count)
    }

    /// UPDATE: every matching row is replaced by its updated version (its key may change).
    /// `access` as for [`Writer::delete`].
    pub async fn update(
        &self,
        assignments: Vec<(usize, Arc<dyn PhysicalExpr>)>,
        filters: Vec<Arc<dyn PhysicalExpr>>,
        access: Candidates,
    ) -> Result<u64> {
        let _locks = self.lock_for_statement().await?;
        let rel = Arc::clone(&self.relation);
        let st = Arc::clone(&self.store);
        let (wb, pairs) =
            tokio::task::spawn_blocking(move || -> Result<(WriteBatch, Vec<(RecordBatch, RecordBatch)>)> {
                let mut wb = WriteBatch::default();
                let mut pairs = Vec::new();
                let user_columns = rel.schema.fields().len();
                for batch in candidates(&rel, st.as_ref(), access)? {
                    let old = filter_record_batch(&batch, &filter_mask(&filters, &batch)?)?;
                    if old.num_rows() == 0 {
                        continue;
                    }
                    let mut columns: Vec<ArrayRef> = old.columns().to_vec();
                    for (index, expr) in &assignments {
                        let target = rel.schema.field(*index).data_type();
                        let v = expr.evaluate(&old)?.into_array(old.num_rows())?;
                        columns[*index] = if v.data_type() == target { v } else { cast(&v, target)? };
                    }
                    check_not_null(&rel, &columns[..user_columns])?;
                    fit_declared_types(&rel, &mut columns[..user_columns])?;
                    let new = RecordBatch::try_new(Arc::clone(old.schema_ref()), columns)?;
                    pairs.push((old, new));
                }
                // Every old row goes before any new one is stored: a key moved onto a key
                // another updated row leaves (`SET id = id + 1`) is not lost.
                for (old, _) in &pairs {
                    rel.table.delete_batch(old, &mut wb)?;
                }
                for (_, new) in &pairs {
                    rel.table.put_batch(new, &mut wb)?;
                }
                if assignments.iter().any(|(index, _)| rel.def.primary_key.contains(index)) {
                    check_moved_keys(&rel, st.as_ref(), &pairs)?;
                }
                Ok((wb, pairs))
            })
            .await
            .map_err(|e| WeirError::internal(e.to_string()))??;
        let count = pairs.iter().map(|(old, _)| old.num_rows() as u64).sum();
        // Each old row followed by its new version.
        let mut rows = Vec::new();
        let mut ops = Vec::new();
        for (old, new) in &pairs {
            let (old, new) = (self.user_columns(old)?, self.user_columns(new)?);
            for i in 0..old.num_rows() {
                rows.push(old.slice(i, 1));
                rows.push(new.slice(i, 1));
                ops.push(Op::UpdateDelete);
                ops.push(Op::UpdateInsert);
            }
        }
        let changes = ChangeBatch::new(concat_batches(&self.relation.schema, &rows)?, ops);
        let mut wb = wb;
        index::maintain(&self.relation, self.store.as_ref(), &changes, &mut wb)?;
        self.commit_logged(wb, Some(changes), None).await?;
        Ok(count)
    }

    /// Commits a statement's writes `wb` with its change-log entry holding `changes`, then
    /// publishes them (under the write lock, held by the caller).
    async fn commit_logged(
        &self,
        wb: WriteBatch,
        changes: Option<ChangeBatch>,
        since: Option<std::time::Instant>,
    ) -> Result<()> {
        let logged = match &changes {
            Some(c) if !c.is_empty() => LoggedChanges::Rows(c.clone()),
            _ => LoggedChanges::None,
        };
        self.commit(wb, changes, logged, since).await
    }

    /// Commits `wb` with its change-log entry (`logged`), then publishes `changes`.
    async fn commit(
        &self,
        mut wb: WriteBatch,
        changes: Option<ChangeBatch>,
        logged: LoggedChanges,
        since: Option<std::time::Instant>,
    ) -> Result<()> {
        if wb.is_empty() && matches!(logged, LoggedChanges::None) {
            return Ok(());
        }
        if let Some(transaction) = &self.transaction {
            // Into the transaction's overlay; logged and published at its COMMIT.
            self.store.write(wb)?;
            if let Some(changes) = changes {
                transaction.record(&self.relation, changes);
            }
            return Ok(());
        }
        if self.log_changes {
            change_log::append(&mut wb, &self.relation, &logged)?;
        }
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.write(wb))
            .await
            .map_err(|e| WeirError::internal(e.to_string()))??;
        self.publish(changes, since).await;
        Ok(())
    }

    /// A bounded source read its last row: its subscribers learn that nothing follows
    /// ([`Message::End`]), after every row it published.
    pub async fn finish(&self) {
        let _guard = self.relation.write_lock.lock().await;
        self.relation.mark_finished();
        self.changes.publish(self.relation.def.id, vec![Message::End]).await;
        self.changes.want_checkpoint();
    }

    /// Publishes a statement's changes, dated `since` (when they came into being; None: now).
    async fn publish(&self, changes: Option<ChangeBatch>, since: Option<std::time::Instant>) {
        if let Some(changes) = changes.filter(|c| !c.is_empty()) {
            let since = since.unwrap_or_else(std::time::Instant::now);
            let rows = changes.num_rows() as u64;
            self.changes.publish_since(self.relation.def.id, vec![Message::Data(changes)], since).await;
            self.changes.count_table_rows(rows);
        }
    }
}
