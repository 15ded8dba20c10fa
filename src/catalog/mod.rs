//! The catalog: which relations exist, their schemas and keys, and the state tables holding
//! their rows. It is the single owner of that knowledge; DataFusion sees it through
//! [`provider`], the SQL front end changes it through [`Catalog::create_table`] and
//! [`Catalog::drop_relation`].
//!
//! Invariants:
//! - Every entry is durable before the call that made it returns (see [`persist`]); on start the
//!   catalog is rebuilt from the store alone.
//! - Creating or dropping a relation and creating or deleting its rows happen in one atomic
//!   write batch.
//! - Names are unique across all relations of the one schema, `public`.

pub mod access;
pub mod change_log;
pub mod changes;
pub mod dead_letter;
pub mod dml;
pub mod index;
pub mod key_access;
pub mod options;
pub mod password;
pub mod persist;
pub mod provider;
pub mod replay;
pub mod rows;
pub mod scan;
pub mod secrets;
pub mod transaction;
pub mod windowed;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parking_lot::RwLock;

pub use persist::{IndexDef, RelationDef, RelationKind, WatermarkDef};

use crate::error::{Result, SqlState, WeirError};
use crate::state::keys::TableId;
use crate::state::store::{ScanControl, StateStore, WriteBatch};
use crate::state::table::{BatchSink, Layout};
use crate::state::StateTable;

/// Name of the hidden key column of tables without a primary key.
pub const ROW_ID_COLUMN: &str = "_row_id";

/// Name of the hidden multiplicity column of materialized views.
pub const COUNT_COLUMN: &str = "_weir_count";

/// The one schema every relation lives in.
pub const DEFAULT_SCHEMA: &str = "public";

/// What a table is besides its columns and key.
#[derive(Debug, Clone, Default)]
pub struct TableOptions {
    pub append_only: bool,
    pub watermark: Option<WatermarkDef>,
    /// The `AS PROCTIME()` column, an index into the columns.
    pub processing_time: Option<usize>,
    /// A source's connector: its rows come from it, not from INSERT.
    pub connector: Option<crate::catalog::options::ConnectorOptions>,
    /// A source whose connector can produce its rows again: they are not stored.
    pub replayed: bool,
}

/// A live relation: its definition plus what is derived from it.
pub struct Relation {
    pub def: RelationDef,
    /// User-visible columns.
    pub schema: SchemaRef,
    /// Where its rows are (stored columns: the user's, then the hidden row id if any).
    pub table: Arc<StateTable>,
    /// Serialises writers of this relation, so a read-modify-write (UPDATE, DELETE) sees no
    /// concurrent change; barriers take it too (briefly). Held by a statement while it writes.
    pub write_lock: Arc<tokio::sync::Mutex<()>>,
    /// Taken before `write_lock` by users' INSERT, UPDATE, DELETE, TRUNCATE and COPY: for the
    /// statement, or by a transaction from its first write to the table until it ends
    /// ([`transaction`]), so a second writer waits and no update is lost.
    pub writers: Arc<tokio::sync::Mutex<()>>,
    /// A materialized view's operator state writes in flight each hold it shared (a view job
    /// writes them off its thread, possibly after the job is gone); what deletes the view's
    /// state (DROP, an unfinished CREATE undone) takes it exclusively first.
    pub state_writes: Arc<tokio::sync::RwLock<()>>,
    /// Next hidden row id (tables without a primary key); persisted with each insert.
    next_row_id: AtomicU64,
    /// The epoch the changes written now belong to: one more than the last barrier injected
    /// into this relation's subscribers. Changed only under `write_lock` (the coordinator's
    /// barrier injection), read under it (writers logging to [`change_log`]).
    open_epoch: AtomicU64,
    /// A bounded source that has read its last row (set under `write_lock`, with
    /// [`crate::types::Message::End`] published to its subscribers).
    finished: std::sync::atomic::AtomicBool,
    /// Its indexes ([`index`]), kept up to date by its writers under `write_lock` (changed only
    /// under it too).
    indexes: RwLock<Vec<Arc<Relation>>>,
    /// An index being dropped: no read chooses it any more, its relation's writers still keep
    /// it until it goes ([`index::drop_index`]).
    retired: std::sync::atomic::AtomicBool,
    /// How much of its relation an index holds yet ([`index::Filled`]); changed under the
    /// relation's write lock.
    filled: parking_lot::Mutex<index::Filled>,
    /// False for a materialized view from its CREATE until its backfill has committed every row
    /// (set under its write lock, which the backfill holds): one whose CREATE failed or was
    /// cancelled stays so until it is undone. Every other relation is whole.
    whole: std::sync::atomic::AtomicBool,
}

/// Base of the OIDs clients see for relations (`pg_class.oid`, RowDescription's table OID):
/// a relation's OID is this plus its id, the same across restarts. Above the OIDs
/// `datafusion-pg-catalog` hands out to system relations, below primary-key index OIDs.
pub const RELATION_OID_BASE: u32 = 500_000_000;

impl Relation {
    /// Its backfill committed every row (a new materialized view's; see `whole`).
    pub fn mark_whole(&self) {
        self.whole.store(true, Ordering::SeqCst);
    }

    /// A source: a table whose rows come from its connector (`CREATE SOURCE`), not from INSERT.
    pub fn is_source(&self) -> bool {
        self.def.kind == RelationKind::Table && self.def.connector.is_some()
    }

    /// The OID clients see for this relation.
    pub fn oid(&self) -> u32 {
        RELATION_OID_BASE + self.def.id
    }

    /// Column `index`'s declared type (`VARCHAR(20)`), where its Arrow type says less.
    pub fn declared_type(&self, index: usize) -> Option<crate::types::pg_type::DeclaredType> {
        self.def.schema.fields().get(index).and_then(|f| crate::types::pg_type::DeclaredType::of(f))
    }

    /// Whether this is a bounded source that has read its last row (read under `write_lock`
    /// by a view starting on it; a restarted source finds its end again).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }

    /// The source read its last row (under `write_lock`).
    pub fn mark_finished(&self) {
        self.finished.store(true, Ordering::SeqCst);
    }

    /// The epoch the changes written now belong to (read under `write_lock`).
    pub fn open_epoch(&self) -> crate::types::Epoch {
        self.open_epoch.load(Ordering::SeqCst)
    }

    /// Moves the relation to `epoch`, under `write_lock`, as the barrier before it is injected.
    pub fn set_open_epoch(&self, epoch: crate::types::Epoch) {
        self.open_epoch.store(epoch, Ordering::SeqCst);
    }

    /// Its indexes, as of now (read under `write_lock` by writers, which keep them up to date).
    pub fn indexes(&self) -> Vec<Arc<Relation>> {
        self.indexes.read().clone()
    }

    /// Marks an index as being dropped; false when it already was.
    pub(crate) fn retire(&self) -> bool {
        !self.retired.swap(true, Ordering::SeqCst)
    }

    /// A drop that failed: the index is chosen by reads again.
    pub(crate) fn unretire(&self) {
        self.retired.store(false, Ordering::SeqCst);
    }

    /// Whether this index is being dropped (reads no longer choose it).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// Adds or removes (by id) one of its indexes; under `write_lock`.
    pub(crate) fn attach_index(&self, index: Arc<Relation>) {
        self.indexes.write().push(index);
    }

    pub(crate) fn detach_index(&self, id: TableId) {
        self.indexes.write().retain(|i| i.def.id != id);
    }

    pub fn has_hidden_row_id(&self) -> bool {
        self.def.kind == RelationKind::Table && self.def.primary_key.is_empty()
    }

    /// The names of its primary key's columns (none without one).
    pub fn key_names(&self) -> Vec<String> {
        self.def.primary_key.iter().map(|&i| self.schema.field(i).name().clone()).collect()
    }

    /// The columns its writers give: all but the processing-time column, which Weir stamps
    /// (what a source's connector reads), with their declared types (a connector reads a
    /// `jsonb` column's value as JSON text: `connectors::records::text_columns`).
    pub fn given_schema(&self) -> SchemaRef {
        let declared = &self.def.schema;
        match self.def.processing_time {
            Some(stamp) => {
                let given: Vec<usize> = (0..declared.fields().len()).filter(|&i| i != stamp).collect();
                Arc::new(declared.project(&given).expect("columns of the schema"))
            }
            None => Arc::new(declared.clone()),
        }
    }

    /// Whether stored rows carry a multiplicity ([`COUNT_COLUMN`]): a view's rows stored one
    /// by one. A segmented view's rows are each stored as often as they occur.
    pub fn has_counts(&self) -> bool {
        matches!(self.def.kind, RelationKind::MaterializedView | RelationKind::Index) && self.def.layout == Layout::Rows
    }

    /// The rows of a keyed table whose primary key is one of `keys` (one array per key column,
    /// in key order, a row per key): a point lookup per key, from one snapshot.
    pub fn rows_with_keys(
        &self,
        store: &dyn StateStore,
        keys: &[datafusion::arrow::array::ArrayRef],
    ) -> Result<datafusion::arrow::array::RecordBatch> {
        Ok(self.rows_by_key(store, keys)?.0)
    }

    /// [`Relation::rows_with_keys`], and for each key the index of its row among them (None:
    /// no row has it), for callers that pair rows with what asked for them (a lookup join).
    pub fn rows_by_key(
        &self,
        store: &dyn StateStore,
        keys: &[datafusion::arrow::array::ArrayRef],
    ) -> Result<(datafusion::arrow::array::RecordBatch, Vec<Option<usize>>)> {
        self.table.get_by_columns(store, keys)
    }

    /// Every row as users see it, read from one snapshot: a table's rows without the hidden
    /// row id, a view's rows repeated by their multiplicity, a replayed source's rows produced
    /// again by its connector. Blocking.
    pub fn scan_rows(&self, store: &dyn StateStore) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
        self.scan_rows_up_to(store, None)
    }

    /// [`Relation::scan_rows`], reading stored entries only until `limit` rows are read (a
    /// `LIMIT` without conditions: a table's first rows, not all of it).
    pub fn scan_rows_up_to(
        &self,
        store: &dyn StateStore,
        limit: Option<usize>,
    ) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
        let mut batches = Vec::new();
        self.stream_rows(store, None, limit, &mut |batch| {
            batches.push(batch);
            Ok(ScanControl::Continue)
        })?;
        Ok(batches)
    }

    /// Hands `emit` the rows as users see them (see [`Relation::scan_rows`]) batch by batch,
    /// from one snapshot: those whose stored keys lie in `ranges` (memcomparable, over the
    /// stored key columns: [`Relation::key_columns`]) or all when None, until about `limit`
    /// stored entries are read or `emit` says stop. Blocking; memory is a batch or two.
    pub fn stream_rows(
        &self,
        store: &dyn StateStore,
        ranges: Option<&[crate::state::table::TableRange]>,
        limit: Option<usize>,
        emit: &mut dyn FnMut(datafusion::arrow::array::RecordBatch) -> Result<ScanControl>,
    ) -> Result<()> {
        if self.def.replayed {
            return replay::stream_rows(self, store, emit);
        }
        self.table.scan_batches(store, ranges, SCAN_BATCH_ROWS, limit, &mut |batch| emit(self.user_rows(&batch)?))
    }

    /// Whether a read of every row may go in parts ([`Relation::stream_parts`]): rows stored
    /// one by one, not a replayed source's.
    pub fn reads_in_parts(&self) -> bool {
        !self.def.replayed && self.table.layout() == Layout::Rows
    }

    /// Every row as users see them, in `sinks.len()` parts read from one snapshot, part `i`'s
    /// batches and end handed to `sinks[i]` (on its own thread where the store reads in
    /// parallel: [`crate::state::table::StateTable::scan_parts`]). Only where
    /// [`Relation::reads_in_parts`].
    pub fn stream_parts(&self, store: &dyn StateStore, sinks: &mut [&mut dyn BatchSink]) -> Result<()> {
        let mut users: Vec<UserRows<'_, '_>> =
            sinks.iter_mut().map(|sink| UserRows { relation: self, sink: &mut **sink }).collect();
        let mut users: Vec<&mut dyn BatchSink> = users.iter_mut().map(|u| u as &mut dyn BatchSink).collect();
        self.table.scan_parts(store, SCAN_BATCH_ROWS, &mut users)
    }

    /// Stored rows as users see them: without hidden columns, each repeated as often as its
    /// multiplicity says (none when it is not above zero).
    pub fn user_rows(
        &self,
        stored: &datafusion::arrow::array::RecordBatch,
    ) -> Result<datafusion::arrow::array::RecordBatch> {
        use datafusion::arrow::array::{AsArray, UInt32Array};
        use datafusion::arrow::datatypes::Int64Type;
        let user: Vec<usize> = (0..self.schema.fields().len()).collect();
        let rows = stored.project(&user)?;
        if !self.has_counts() {
            return Ok(rows);
        }
        let counts = stored.column(user.len()).as_primitive::<Int64Type>();
        if counts.values().iter().all(|&c| c == 1) {
            return Ok(rows);
        }
        let repeat: UInt32Array = counts
            .values()
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| std::iter::repeat_n(i as u32, c.max(0) as usize))
            .collect();
        Ok(datafusion::arrow::compute::take_record_batch(&rows, &repeat)?)
    }

    /// The user columns its stored rows are keyed by, in key order, where reads may narrow by
    /// key: a keyed table's primary key, a materialized view's or an index's columns (its rows
    /// are keyed by all of them). None where rows are keyed by a hidden row id or not stored by
    /// key.
    pub fn key_columns(&self) -> Option<&[usize]> {
        if self.def.replayed || self.def.layout == Layout::Segments {
            return None;
        }
        match self.def.kind {
            RelationKind::Table if !self.def.primary_key.is_empty() => Some(&self.def.primary_key),
            RelationKind::MaterializedView | RelationKind::Index => Some(self.table.key_indices()),
            _ => None,
        }
    }

    /// [`Relation::scan_rows_up_to`] on a blocking thread, for async callers.
    pub async fn read_rows(
        self: &Arc<Self>,
        store: &Arc<dyn StateStore>,
        limit: Option<usize>,
    ) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
        let (relation, store) = (Arc::clone(self), Arc::clone(store));
        tokio::task::spawn_blocking(move || relation.scan_rows_up_to(store.as_ref(), limit))
            .await
            .map_err(|e| WeirError::internal(e.to_string()))?
    }

    /// The relation's rows from one snapshot, read on a blocking thread and handed over batch
    /// by batch, at most two batches ahead of the receiver, so that reading costs a few
    /// batches of memory whatever the relation's size (a view's backfill). Returns once the
    /// snapshot is taken: a caller holding the locks that make the moment a cut may release
    /// them then. The reader stops when the receiver is dropped. The last item is `Ok(None)`
    /// after every row, or an error: a channel that closes without either lost its reader.
    pub async fn stream_snapshot(
        self: &Arc<Self>,
        store: &Arc<dyn StateStore>,
    ) -> tokio::sync::mpsc::Receiver<Result<Option<datafusion::arrow::array::RecordBatch>>> {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let (taken_tx, taken) = tokio::sync::oneshot::channel::<()>();
        let (relation, store) = (Arc::clone(self), Arc::clone(store));
        tokio::task::spawn_blocking(move || {
            let mut taken_tx = Some(taken_tx);
            // The first batch comes from the scan's iterator (its snapshot), or the scan ended:
            // either way the snapshot is taken; dropping the sender says so.
            let read = relation.stream_rows(store.as_ref(), None, None, &mut |batch| {
                taken_tx.take();
                Ok(match tx.blocking_send(Ok(Some(batch))) {
                    Ok(()) => ScanControl::Continue,
                    Err(_) => ScanControl::Stop,
                })
            });
            drop(taken_tx);
            let _ = tx.blocking_send(read.map(|()| None));
        });
        // Err: the sender is gone, which is the signal (or the reader ended early).
        let _ = taken.await;
        rx
    }

    /// Reserves `n` row ids, as the hidden row id column of `n` new rows; the caller persists
    /// the new high-water mark with [`Relation::persist_row_id`] in the same batch as the rows
    /// (a view's ids need not be persisted: its rows are rebuilt at start).
    pub fn allocate_row_ids(&self, n: usize) -> datafusion::arrow::array::ArrayRef {
        let first = self.next_row_id.fetch_add(n as u64, Ordering::SeqCst) as i64;
        std::sync::Arc::new(datafusion::arrow::array::Int64Array::from_iter_values(first..first + n as i64))
    }

    pub fn persist_row_id(&self, wb: &mut WriteBatch) {
        let next = self.next_row_id.load(Ordering::SeqCst);
        wb.put(persist::sequence_key(&format!("rowid/{}", self.def.id)), next.to_be_bytes().to_vec());
    }
}

/// Rows per batch a scan reads.
const SCAN_BATCH_ROWS: usize = 8192;

/// A sink of a relation's stored rows that hands them on as users see them
/// ([`Relation::user_rows`]).
struct UserRows<'r, 's> {
    relation: &'r Relation,
    sink: &'s mut dyn BatchSink,
}

impl BatchSink for UserRows<'_, '_> {
    fn batch(&mut self, batch: datafusion::arrow::array::RecordBatch) -> Result<ScanControl> {
        self.sink.batch(self.relation.user_rows(&batch)?)
    }

    fn end(&mut self, read: Result<()>) {
        self.sink.end(read);
    }
}

pub struct Catalog {
    store: Arc<dyn StateStore>,
    database: String,
    inner: RwLock<Inner>,
    /// Subscriptions to relations' changes.
    pub changes: Arc<changes::ChangeHub>,
    /// The epoch a relation made now starts in (see [`Relation::open_epoch`]).
    open_epoch: AtomicU64,
    /// Whether writes are logged to [`change_log`] (off only where nothing restarts from the
    /// store: benchmarks).
    log_changes: std::sync::atomic::AtomicBool,
    /// Bumped by every change to the set of relations (what a cached plan was planned against).
    version: AtomicU64,
    /// What the running server reports about itself, handed down to whoever reads the catalog.
    status: Arc<crate::status::Status>,
    /// Who holds and waits for the writer locks transactions take (deadlocks).
    pub writer_locks: transaction::WriterLocks,
    /// Roles and the grants on relations ([`access`]).
    pub access: access::Access,
}

struct Inner {
    by_name: BTreeMap<String, Arc<Relation>>,
    next_id: TableId,
    /// Names of relations being built (an index while it is filled): taken, not yet there.
    building: std::collections::BTreeSet<String>,
}

/// The first id handed to a relation; lower ids are reserved for system use.
const FIRST_RELATION_ID: TableId = 1000;

impl Catalog {
    /// Rebuilds the catalog from the store.
    /// The catalog stored in `store`, for database `database`, its server reporting to `status`.
    pub fn open(store: Arc<dyn StateStore>, database: &str, status: Arc<crate::status::Status>) -> Result<Catalog> {
        let defs = persist::load_relations(store.as_ref())?;
        let mut next_id = persist::load_next_id(store.as_ref())?.unwrap_or(FIRST_RELATION_ID);
        let mut by_name = BTreeMap::new();
        for def in defs {
            next_id = next_id.max(def.id + 1);
            let relation = Self::materialize(store.as_ref(), def, 0)?;
            by_name.insert(relation.def.name.clone(), Arc::new(relation));
        }
        let mut indexes: Vec<Arc<Relation>> =
            by_name.values().filter(|r| r.def.kind == RelationKind::Index).cloned().collect();
        indexes.sort_by_key(|i| i.def.id);
        for index in indexes {
            let on = index.def.index.as_ref().map(|i| i.on);
            match by_name.values().find(|r| Some(r.def.id) == on) {
                Some(relation) => relation.attach_index(index),
                None => {
                    // Made by a build that lost its relation: nothing reads it, no writer keeps it.
                    tracing::warn!(index = %index.def.name, "index of a relation that does not exist is dropped");
                    let mut wb = WriteBatch::default();
                    persist::delete_relation(index.def.id, &mut wb);
                    index.table.clear(&mut wb);
                    store.write(wb)?;
                    by_name.remove(&index.def.name);
                }
            }
        }
        let access = access::Access::open(store.as_ref())?;
        Ok(Catalog {
            access,
            store,
            database: database.to_string(),
            inner: RwLock::new(Inner { by_name, next_id, building: Default::default() }),
            changes: Arc::new(changes::ChangeHub::default()),
            open_epoch: AtomicU64::new(0),
            log_changes: std::sync::atomic::AtomicBool::new(true),
            version: AtomicU64::new(0),
            status,
            writer_locks: Default::default(),
        })
    }

    /// What the running server reports about itself (`weir_catalog`'s runtime relations).
    pub fn status(&self) -> &Arc<crate::status::Status> {
        &self.status
    }

    /// Every relation, and every relation made from now on, starts in `epoch` (the
    /// coordinator's first, at start, and then each barrier's successor).
    pub fn set_open_epoch(&self, epoch: crate::types::Epoch) {
        self.open_epoch.store(epoch, Ordering::SeqCst);
    }

    /// Whether writes are logged to the change log.
    pub fn logs_changes(&self) -> bool {
        self.log_changes.load(Ordering::Relaxed)
    }

    /// Stops logging writes (benchmarks, which never restart from their store).
    pub fn without_change_log(self) -> Catalog {
        self.log_changes.store(false, Ordering::Relaxed);
        self
    }

    fn materialize(store: &dyn StateStore, def: RelationDef, open_epoch: crate::types::Epoch) -> Result<Relation> {
        // Declared types (`VARCHAR(20)`) stay in the definition; queries plan with Arrow types.
        let schema = Arc::new(crate::types::pg_type::DeclaredType::strip(&def.schema));
        let (stored_schema, key) =
            if def.layout == Layout::Segments || def.kind == RelationKind::Table && def.primary_key.is_empty() {
                // Appended rows (and rows of tables without a key) are keyed by a hidden row id.
                let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                fields.push(Field::new(ROW_ID_COLUMN, DataType::Int64, false));
                let n = fields.len();
                (Arc::new(Schema::new(fields)), vec![n - 1])
            } else if matches!(def.kind, RelationKind::MaterializedView | RelationKind::Index) {
                let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
                fields.push(Field::new(COUNT_COLUMN, DataType::Int64, false));
                (Arc::new(Schema::new(fields)), (0..schema.fields().len()).collect())
            } else {
                (Arc::clone(&schema), def.primary_key.clone())
            };
        let next_row_id = persist::load_sequence(store, &format!("rowid/{}", def.id))?;
        let table = StateTable::with_layout(def.id, stored_schema, key, def.layout)?;
        // An index spreads its entries by its indexed columns: a read pinning them is one seek.
        let table = match &def.index {
            Some(index) => table.distributed_by(index.key_columns)?,
            None => table,
        };
        Ok(Relation {
            table: Arc::new(table),
            schema,
            def,
            write_lock: Arc::new(tokio::sync::Mutex::new(())),
            writers: Arc::new(tokio::sync::Mutex::new(())),
            state_writes: Arc::new(tokio::sync::RwLock::new(())),
            next_row_id: AtomicU64::new(next_row_id),
            open_epoch: AtomicU64::new(open_epoch),
            finished: std::sync::atomic::AtomicBool::new(false),
            indexes: RwLock::new(Vec::new()),
            retired: std::sync::atomic::AtomicBool::new(false),
            filled: parking_lot::Mutex::new(index::Filled::All),
            whole: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// A fingerprint of the catalog, its relations' ids and names, for checkpoint manifests.
    pub fn fingerprint(&self) -> u64 {
        use crate::types::vnode::{fnv1a, FNV1A_START};
        self.relations()
            .iter()
            .fold(FNV1A_START, |h, r| fnv1a(fnv1a(h, &r.def.id.to_be_bytes()), r.def.name.as_bytes()))
    }

    /// A number that changes whenever a relation is made or dropped, or roles or grants change.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// Roles or grants changed: plans made before (of `pg_roles`, say) are made again.
    pub fn roles_changed(&self) {
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    pub fn database(&self) -> &str {
        &self.database
    }

    /// Whether `name` is a relation's, or one's being built.
    pub fn name_taken(&self, name: &str) -> bool {
        let inner = self.inner.read();
        inner.by_name.contains_key(name) || inner.building.contains(name)
    }

    pub fn get(&self, name: &str) -> Option<Arc<Relation>> {
        self.inner.read().by_name.get(name).cloned()
    }

    /// Every relation, in order of creation.
    pub fn relations(&self) -> Vec<Arc<Relation>> {
        let mut all: Vec<_> = self.inner.read().by_name.values().cloned().collect();
        all.sort_by_key(|r| r.def.id);
        all
    }

    pub fn by_id(&self, id: TableId) -> Option<Arc<Relation>> {
        self.inner.read().by_name.values().find(|r| r.def.id == id).cloned()
    }

    /// The relations that read `id`, directly or through other views, in dependency order.
    pub fn dependents(&self, id: TableId) -> Vec<Arc<Relation>> {
        let all = self.relations();
        let mut found: Vec<Arc<Relation>> = Vec::new();
        let mut frontier = vec![id];
        while let Some(current) = frontier.pop() {
            for r in &all {
                if r.def.depends_on.contains(&current) && !found.iter().any(|f| f.def.id == r.def.id) {
                    found.push(Arc::clone(r));
                    frontier.push(r.def.id);
                }
            }
        }
        found.sort_by_key(|r| r.def.id);
        found
    }

    /// Creates a table; returns its id, or None (and changes nothing) when it exists and
    /// `if_not_exists`.
    pub fn create_table(
        &self,
        name: &str,
        definition: &str,
        schema: Schema,
        primary_key: Vec<usize>,
        if_not_exists: bool,
    ) -> Result<Option<TableId>> {
        self.create_table_with(name, definition, schema, primary_key, TableOptions::default(), "", if_not_exists)
    }

    /// Creates a table with streaming options (append-only, a watermark), owned by role `owner`.
    #[allow(clippy::too_many_arguments)]
    pub fn create_table_with(
        &self,
        name: &str,
        definition: &str,
        schema: Schema,
        primary_key: Vec<usize>,
        options: TableOptions,
        owner: &str,
        if_not_exists: bool,
    ) -> Result<Option<TableId>> {
        let mut def = self.new_def(name, RelationKind::Table, definition, schema, owner);
        def.primary_key = primary_key;
        def.append_only = options.append_only;
        if options.append_only {
            def.layout = Layout::Segments;
        }
        def.watermark = options.watermark;
        def.processing_time = options.processing_time;
        def.connector = options.connector;
        def.replayed = options.replayed;
        self.create(def, if_not_exists)
    }

    /// Creates a materialized view's entry and empty state; returns its id. An `append_only` view (its plan never retracts a row) stores its rows
    /// as segments and is an append-only input to views built on it.
    pub fn create_view(
        &self,
        name: &str,
        definition: &str,
        schema: Schema,
        depends_on: Vec<TableId>,
        parallelism: usize,
        append_only: bool,
        watermark: Option<WatermarkDef>,
        planner_revision: u32,
        owner: &str,
    ) -> Result<TableId> {
        let mut def = self.new_def(name, RelationKind::MaterializedView, definition, schema, owner);
        def.depends_on = depends_on;
        def.parallelism = parallelism;
        def.append_only = append_only;
        def.watermark = watermark;
        def.int4_literals = true;
        def.planner_revision = planner_revision;
        def.state_format = crate::state::value::StateFormat::CURRENT.number();
        if append_only {
            def.layout = Layout::Segments;
        }
        self.create(def, false)?.ok_or_else(|| WeirError::internal("a view was not created"))
    }

    /// Creates a plain view (a stored query, `CREATE VIEW`) reading `depends_on`; with
    /// `replace`, an existing plain view of that name gets the new query and columns instead.
    pub fn create_plain_view(
        &self,
        name: &str,
        definition: &str,
        schema: Schema,
        depends_on: Vec<TableId>,
        replace: bool,
        owner: &str,
    ) -> Result<TableId> {
        let mut def = self.new_def(name, RelationKind::View, definition, schema, owner);
        def.depends_on = depends_on;
        if replace {
            let mut inner = self.inner.write();
            if let Some(existing) = inner.by_name.get(name).cloned() {
                def.id = existing.def.id;
                // OR REPLACE keeps the view's owner (only its owner may replace it).
                def.owner = existing.def.owner.clone();
                let relation = Self::materialize(self.store.as_ref(), def, self.open_epoch.load(Ordering::SeqCst))?;
                let mut wb = WriteBatch::default();
                persist::put_relation(&relation.def, &mut wb)?;
                self.store.write(wb)?;
                let id = relation.def.id;
                inner.by_name.insert(name.to_string(), Arc::new(relation));
                self.version.fetch_add(1, Ordering::SeqCst);
                return Ok(id);
            }
        }
        self.create(def, false)?.ok_or_else(|| WeirError::internal("a view was not created"))
    }

    /// A definition with defaults, its id assigned by [`Catalog::create`].
    fn new_def(&self, name: &str, kind: RelationKind, definition: &str, schema: Schema, owner: &str) -> RelationDef {
        RelationDef {
            owner: owner.to_string(),
            id: 0,
            name: name.to_string(),
            kind,
            definition: definition.to_string(),
            schema,
            primary_key: vec![],
            depends_on: vec![],
            parallelism: 0,
            append_only: false,
            watermark: None,
            processing_time: None,
            connector: None,
            replayed: false,
            layout: Layout::Rows,
            int4_literals: false,
            planner_revision: 0,
            state_format: 0,
            index: None,
            sink_token: String::new(),
        }
    }

    /// Records `def` under a new id; None when its name is taken and `if_not_exists`.
    fn create(&self, mut def: RelationDef, if_not_exists: bool) -> Result<Option<TableId>> {
        let mut inner = self.inner.write();
        let name = def.name.clone();
        if inner.by_name.contains_key(&name) || inner.building.contains(&name) {
            if if_not_exists {
                return Ok(None);
            }
            return Err(WeirError::new(SqlState::DUPLICATE_TABLE, format!("relation \"{name}\" already exists")));
        }
        let id = inner.next_id;
        def.id = id;
        let relation = Self::materialize(self.store.as_ref(), def, self.open_epoch.load(Ordering::SeqCst))?;
        if relation.def.kind == RelationKind::MaterializedView {
            // Until its CREATE has backfilled it.
            relation.whole.store(false, Ordering::SeqCst);
        }
        let mut wb = WriteBatch::default();
        persist::put_relation(&relation.def, &mut wb)?;
        persist::put_next_id(id + 1, &mut wb);
        // A reused id must not see rows of an earlier life (ids are never reused, but be safe).
        relation.table.clear(&mut wb);
        self.store.write(wb)?;
        inner.next_id = id + 1;
        inner.by_name.insert(name, Arc::new(relation));
        self.version.fetch_add(1, Ordering::SeqCst);
        Ok(Some(id))
    }

    /// A sink of view `input` through the connector `options`, delivering by `shards` shards
    /// (see `connectors::sink`); None when it exists and `if_not_exists`.
    pub fn create_sink(
        &self,
        name: &str,
        definition: &str,
        input: &Relation,
        options: crate::catalog::options::ConnectorOptions,
        shards: usize,
        owner: &str,
        if_not_exists: bool,
    ) -> Result<Option<TableId>> {
        let mut def = self.new_def(name, RelationKind::Sink, definition, input.schema.as_ref().clone(), owner);
        def.depends_on = vec![input.def.id];
        def.connector = Some(options);
        def.parallelism = shards;
        def.layout = Layout::Segments;
        def.sink_token = crate::catalog::password::random_bytes::<6>().iter().map(|b| format!("{b:02x}")).collect();
        self.create(def, if_not_exists)
    }

    /// Drops a relation and its rows. Returns false when it does not exist and `if_exists`.
    pub fn drop_relation(&self, name: &str, if_exists: bool) -> Result<bool> {
        let mut inner = self.inner.write();
        let Some(relation) = inner.by_name.get(name).cloned() else {
            if if_exists {
                return Ok(false);
            }
            return Err(WeirError::undefined_table(name));
        };
        self.remove(&mut inner, &relation)?;
        Ok(true)
    }

    /// Undoes a creation that failed part-way: drops the relation with id `id` if it exists,
    /// whatever its name. A failing CREATE undoes by the id it was given, never by name, so it
    /// cannot touch a relation of the same name that existed before (or was made meanwhile).
    pub fn undo_create(&self, id: TableId) -> Result<()> {
        self.drop_relation_id(id)
    }

    /// Deletes whatever the store holds of `relation`, dropped already, again: writes that
    /// were in flight when it was dropped (an abandoned CREATE's, `handler::unfinished`) may
    /// have landed after the first deletion.
    pub fn delete_dropped_again(&self, relation: &Relation) -> Result<()> {
        let mut wb = WriteBatch::default();
        Self::delete_all_of(relation, &mut wb);
        self.store.write(wb)
    }

    /// Adds the deletion of everything the store holds of `relation` (its definition, rows,
    /// indexes, operator state, row-id sequence, dead letters) to `wb`.
    fn delete_all_of(relation: &Relation, wb: &mut WriteBatch) {
        for index in relation.indexes() {
            persist::delete_relation(index.def.id, wb);
            index.table.clear(wb);
        }
        persist::delete_relation(relation.def.id, wb);
        let (start, end) = crate::state::keys::operator_state_range(relation.def.id);
        wb.delete_range(start, end);
        wb.delete(persist::sequence_key(&format!("rowid/{}", relation.def.id)));
        crate::catalog::dead_letter::delete_all(wb, relation.def.id);
        access::delete_grants(relation.def.id, wb);
        relation.table.clear(wb);
    }

    /// Waits, holding no lock, until each of `relations` is whole (a view whose CREATE is still
    /// backfilling it holds its write lock until then; one just recorded has not taken it yet);
    /// Err (42P01) once one is gone. Called by whatever is made over them (a view, a sink, an
    /// index) before it takes their locks, then [`Catalog::check_live`] under them.
    pub async fn wait_until_whole(&self, relations: &[&Arc<Relation>]) -> Result<()> {
        loop {
            for r in relations {
                drop(Arc::clone(&r.write_lock).lock_owned().await);
            }
            self.check_present(relations)?;
            if relations.iter().all(|r| r.whole.load(Ordering::SeqCst)) {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Err (42P01) unless each of `relations` is still this catalog's and whole, checked under
    /// their write locks, after [`Catalog::wait_until_whole`]: a view whose own CREATE failed or
    /// was cancelled during its backfill releases its lock before it is undone, and what waited
    /// for that lock must not start over its partial rows, nor follow a relation about to go.
    pub fn check_live(&self, relations: &[&Arc<Relation>]) -> Result<()> {
        self.check_present(relations)?;
        match relations.iter().find(|r| !r.whole.load(Ordering::SeqCst)) {
            None => Ok(()),
            Some(r) => Err(dropped_meanwhile(r)),
        }
    }

    /// Err (42P01) unless each of `relations` is still this catalog's.
    fn check_present(&self, relations: &[&Arc<Relation>]) -> Result<()> {
        match relations.iter().find(|r| !self.by_id(r.def.id).is_some_and(|now| Arc::ptr_eq(&now, r))) {
            None => Ok(()),
            Some(r) => Err(dropped_meanwhile(r)),
        }
    }

    /// Drops the relation with id `id`, if it exists, whatever its name is now.
    pub fn drop_relation_id(&self, id: TableId) -> Result<()> {
        let mut inner = self.inner.write();
        let relation = inner.by_name.values().find(|r| r.def.id == id).cloned();
        match relation {
            Some(relation) => self.remove(&mut inner, &relation),
            None => Ok(()),
        }
    }

    /// Drops `relation` and its rows, with its indexes, in one write; an index is also detached
    /// from its relation (callers hold the write lock of the relation it indexes, so no writer
    /// is updating it: `index::drop_index` and `DROP`).
    fn remove(&self, inner: &mut Inner, relation: &Arc<Relation>) -> Result<()> {
        let mut wb = WriteBatch::default();
        Self::delete_all_of(relation, &mut wb);
        self.store.write(wb)?;
        for index in relation.indexes() {
            inner.by_name.remove(&index.def.name);
        }
        if let Some(on) = relation.def.index.as_ref().and_then(|i| inner.by_name.values().find(|r| r.def.id == i.on)) {
            on.detach_index(relation.def.id);
        }
        inner.by_name.remove(&relation.def.name);
        self.access.forget(relation.def.id);
        self.version.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The error of something made over `relation`, which went while it was being made (its own
/// CREATE failed or was cancelled during its backfill, or it was dropped).
fn dropped_meanwhile(relation: &Relation) -> WeirError {
    WeirError::new(
        SqlState::UNDEFINED_TABLE,
        format!(
            "\"{}\" was dropped while this was being created over it (its own CREATE failed or was cancelled \
             during its backfill)",
            relation.def.name
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    fn schema() -> Schema {
        Schema::new(vec![Field::new("id", DataType::Int32, false), Field::new("v", DataType::Utf8, true)])
    }

    #[test]
    fn catalog_survives_reopen_and_ids_are_not_reused() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let cat = Catalog::open(store.clone(), "dev", Default::default()).unwrap();
        assert!(cat.create_table("a", "CREATE TABLE a (...)", schema(), vec![0], false).unwrap().is_some());
        assert!(cat.create_table("a", "", schema(), vec![0], true).unwrap().is_none());
        let err = cat.create_table("a", "", schema(), vec![0], false).unwrap_err();
        assert_eq!(err.state, SqlState::DUPLICATE_TABLE);
        let a_id = cat.get("a").unwrap().def.id;
        cat.drop_relation("a", false).unwrap();
        assert!(cat.create_table("b", "", schema(), vec![], false).unwrap().is_some());

        let reopened = Catalog::open(store, "dev", Default::default()).unwrap();
        assert!(reopened.get("a").is_none());
        let b = reopened.get("b").unwrap();
        assert!(b.def.id > a_id);
        assert!(b.has_hidden_row_id());
        assert_eq!(b.table.schema().fields().len(), 3);
        assert_eq!(reopened.drop_relation("a", false).unwrap_err().state, SqlState::UNDEFINED_TABLE);
    }
}
