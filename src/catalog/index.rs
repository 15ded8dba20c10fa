//! Secondary indexes: `CREATE INDEX name ON relation (columns) [INCLUDE (columns)]` over a
//! table or a materialized view, and the reads that use them.
//!
//! An index is a relation of its own ([`RelationKind::Index`], [`IndexDef`]): the indexed
//! relation's rows projected to the index's columns (the indexed columns first, then the
//! included ones: every other column unless `INCLUDE` names some), stored as a multiset
//! ([`multiset`]: each distinct projected row once, with its multiplicity), keyed by all its
//! columns in that order and distributed by the indexed columns
//! ([`StateTable::distributed_by`](crate::state::table::StateTable::distributed_by)), so the
//! entries whose indexed columns hold given values are one range in one vnode.
//!
//! Invariants:
//! - **Same write batch.** Every writer of a relation ([`super::dml::Writer`] for tables and
//!   sources, the view job for views (its backfill too), the late-rows writer) calls
//!   [`maintain`] with the changes it commits, under the relation's write lock, and commits
//!   the index's writes in the same atomic write batch: a read of the index at any snapshot
//!   equals a read of the relation's columns at that snapshot. The index list is changed only
//!   under that lock too (CREATE INDEX, DROP INDEX, and DROP of the relation).
//! - **Dropped after its readers.** DROP INDEX retires the index (reads stop choosing it,
//!   writers keep it), waits for the reads that chose it before, then removes it.
//! - **Built a chunk at a time.** [`create`] hands the empty index to the relation's writers,
//!   then reads the relation in store order a chunk at a time under its write lock (released
//!   between chunks, so writes and barriers go on); writers keep the index for the rows
//!   already read ([`Filled`]), the build adds the rest; reads choose it once it is whole and
//!   recorded. A crash before the record leaves no entry, and the id's range is cleared
//!   before it is used again.
//! - **Reads choose, DataFusion checks.** [`choose`] picks an index whose key access is
//!   narrower than the relation's own and that holds every column the read needs; like every
//!   narrowed read, the conditions are applied again above the scan.
//!
//! Called by the `CREATE INDEX` / `DROP INDEX` handlers, the writers above, and
//! [`super::provider`] when it plans a scan.

use std::sync::Arc;

use datafusion::logical_expr::Expr;

use super::key_access::{self, KeyAccess};
use super::{persist, Catalog, IndexDef, Relation, RelationKind};
use crate::error::{Result, SqlState, WeirError};
use crate::state::multiset;
use crate::state::store::{StateStore, WriteBatch};
use crate::state::table::Layout;
use crate::types::ChangeBatch;

/// What `CREATE INDEX` asks for.
pub struct IndexRequest {
    pub name: String,
    pub definition: String,
    /// The relation indexed.
    pub on: Arc<Relation>,
    /// Its columns the index holds: the indexed ones first.
    pub columns: Vec<usize>,
    /// How many of `columns` are indexed.
    pub key_columns: usize,
}

/// Builds and records an index; false (nothing changed) when the name is taken and
/// `if_not_exists`.
pub async fn create(catalog: &Arc<Catalog>, request: IndexRequest, if_not_exists: bool) -> Result<bool> {
    let on = &request.on;
    match on.def.kind {
        RelationKind::Table | RelationKind::MaterializedView if !on.def.replayed => {}
        RelationKind::Table | RelationKind::MaterializedView => {
            return Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("cannot index \"{}\": its rows are produced again by its connector, not stored", on.def.name),
            ))
        }
        _ => {
            return Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{}\" is not a table or materialized view", on.def.name),
            ))
        }
    }
    let Some(id) = catalog.reserve(&request.name, if_not_exists)? else {
        return Ok(false);
    };
    // On a task of its own: a statement cancelled or timed out while it waits still ends the
    // build cleanly (an checkpoint recorded, or nothing left of it), never half-way.
    let catalog = Arc::clone(catalog);
    // On the dataflow's runtime: a build holds its relation's write lock a chunk at a time,
    // which the dataflow waits for; at the sessions' nice value it would hold it longer.
    let building = crate::runtime::spawn(async move {
        let built = build(&catalog, &request, id).await;
        catalog.release(&request.name);
        built
    });
    building.await.map_err(|e| WeirError::internal(e.to_string()))?.map(|()| true)
}

/// Rows of the relation an index build reads at a time, under the relation's write lock.
const FILL_CHUNK_ROWS: usize = 8192;

/// How much of its relation an index holds while it is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filled {
    /// Every row: the index is kept with every change, and reads may choose it.
    All,
    /// The relation's rows stored at or before this store key (None: none yet). Its writers
    /// keep the index for changes of those rows only; the build reads the rest.
    UpTo(Option<Vec<u8>>),
}

impl Relation {
    /// Whether reads may choose this index: it is whole and not being dropped.
    pub fn readable_index(&self) -> bool {
        !self.is_retired() && *self.filled.lock() == Filled::All
    }
}

/// Fills index `id` for `request` and records it (the name is reserved); on failure nothing of
/// it stays. The index is handed to the relation's writers at once, holding nothing; the
/// relation is then read a chunk at a time under its write lock, released between chunks (so
/// its writers and barriers go on), and writers keep the index for the rows already read
/// ([`Filled::UpTo`]). A table without a primary key is read under the lock throughout: its
/// changes do not carry the hidden row ids its rows are stored by.
async fn build(catalog: &Arc<Catalog>, request: &IndexRequest, id: crate::state::keys::TableId) -> Result<()> {
    let on = &request.on;
    let mut def = catalog.new_def(
        &request.name,
        RelationKind::Index,
        &request.definition,
        on.def.schema.project(&request.columns)?,
        // An index belongs to its relation's owner, as in PostgreSQL.
        &on.def.owner,
    );
    def.id = id;
    def.index = Some(IndexDef { on: on.def.id, columns: request.columns.clone(), key_columns: request.key_columns });
    let index = Arc::new(Catalog::materialize(catalog.store().as_ref(), def, 0)?);
    *index.filled.lock() = Filled::UpTo(None);
    let mut chunked = on.def.layout == Layout::Segments || on.key_columns().is_some();
    catalog.wait_until_whole(&[on]).await?;
    let mut guard = on.write_lock.lock().await;
    catalog.check_live(&[on])?;
    // Chunks go as far as the relation reached when the build began; what writers add beyond
    // it meanwhile is read in one last hold of the lock, so the build ends however fast they
    // write.
    let end = on.table.last_store_key(catalog.store().as_ref())?;
    // An earlier life of the id may have left rows.
    let mut wb = WriteBatch::default();
    index.table.clear(&mut wb);
    catalog.store().write(wb)?;
    on.attach_index(Arc::clone(&index));
    let filled = loop {
        if catalog.by_id(on.def.id).is_none_or(|now| !Arc::ptr_eq(&now, on)) {
            break Err(WeirError::undefined_table(&on.def.name));
        }
        let (relation, building, store) = (Arc::clone(on), Arc::clone(&index), Arc::clone(catalog.store()));
        let step = tokio::task::spawn_blocking(move || fill_chunk(&relation, &building, store.as_ref()))
            .await
            .map_err(|e| WeirError::internal(e.to_string()))
            .and_then(|step| step);
        if let Filled::UpTo(Some(mark)) = &*index.filled.lock() {
            chunked &= end.as_ref().is_some_and(|end| mark < end);
        }
        match step {
            Ok(true) => {
                let recorded = catalog.record_index(Arc::clone(&index), on);
                if recorded.is_ok() {
                    *index.filled.lock() = Filled::All;
                }
                break recorded;
            }
            Ok(false) if chunked => {
                drop(guard);
                tokio::task::yield_now().await;
                guard = on.write_lock.lock().await;
            }
            Ok(false) => {}
            Err(e) => break Err(e),
        }
    };
    if filled.is_err() {
        // Nothing of it stays: no writer keeps it, its rows go, and no entry was made.
        on.detach_index(index.def.id);
        let mut wb = WriteBatch::default();
        index.table.clear(&mut wb);
        let _ = catalog.store().write(wb);
    }
    drop(guard);
    filled
}

/// Adds the entries of the relation's next chunk of rows to a building index and moves its
/// [`Filled`] mark past them (the caller holds the relation's write lock); true when the
/// relation's end was reached.
fn fill_chunk(on: &Relation, index: &Relation, store: &dyn StateStore) -> Result<bool> {
    let after = match &*index.filled.lock() {
        Filled::UpTo(after) => after.clone(),
        Filled::All => return Ok(true),
    };
    let (stored, last) = on.table.read_after(store, after.as_deref(), FILL_CHUNK_ROWS)?;
    let rows = on.user_rows(&stored)?;
    if rows.num_rows() > 0 {
        let columns = &index.def.index.as_ref().expect("an index").columns;
        let mut wb = WriteBatch::default();
        let rows = with_schema(index, rows.project(columns)?)?;
        write_entries(on, index, store, &ChangeBatch::inserts(rows), &mut wb)?;
        store.write(wb)?;
    }
    match last {
        Some(last) => {
            *index.filled.lock() = Filled::UpTo(Some(last));
            Ok(false)
        }
        None => Ok(true),
    }
}

/// Of `changes` to `relation`, those of rows a building index already holds (stored at or
/// before `up_to`); None when there are none.
fn already_filled(relation: &Relation, changes: &ChangeBatch, up_to: Option<&[u8]>) -> Result<Option<ChangeBatch>> {
    let (Some(up_to), Some(key)) = (up_to, relation.key_columns()) else {
        // Nothing read yet, or appended rows: they are after everything read, the build reads them.
        return Ok(None);
    };
    let key_columns: Vec<_> = key.iter().map(|&c| Arc::clone(changes.data.column(c))).collect();
    let keep: Vec<u32> = relation
        .table
        .store_keys(&key_columns)?
        .iter()
        .enumerate()
        .filter(|(_, k)| k.as_slice() <= up_to)
        .map(|(i, _)| i as u32)
        .collect();
    (!keep.is_empty()).then(|| changes.take(&keep)).transpose()
}

/// `rows` (the index's columns) under the index's own schema (the same types; names and
/// nullability as the index has them).
fn with_schema(
    index: &Relation,
    rows: datafusion::arrow::array::RecordBatch,
) -> Result<datafusion::arrow::array::RecordBatch> {
    Ok(datafusion::arrow::array::RecordBatch::try_new(Arc::clone(&index.schema), rows.columns().to_vec())?)
}

/// Drops index `name`; false when there is none and `if_exists`. The index is retired first
/// (no read chooses it, its relation's writers still keep it); once no read that chose it
/// before is left, its entry and rows go in one write under its relation's write lock.
pub async fn drop_index(catalog: &Arc<Catalog>, name: &str, if_exists: bool) -> Result<bool> {
    let missing = || WeirError::new(SqlState::UNDEFINED_OBJECT, format!("index \"{name}\" does not exist"));
    let index = match catalog.get(name) {
        Some(index) if index.def.kind == RelationKind::Index => index,
        Some(_) => {
            return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("\"{name}\" is not an index")));
        }
        None if if_exists => return Ok(false),
        None => return Err(missing()),
    };
    if !index.retire() {
        // Another session is dropping it.
        return if if_exists { Ok(false) } else { Err(missing()) };
    }
    // On a task of its own: a statement cancelled while it waits still drops the index (it
    // is retired already), never leaves it half-dropped.
    let catalog = Arc::clone(catalog);
    let dropping = crate::runtime::spawn(async move {
        // Held by the catalog, its relation and here; more means a read that chose it is running.
        while Arc::strong_count(&index) > 3 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let on = index.def.index.as_ref().and_then(|i| catalog.by_id(i.on));
        let _guard = match &on {
            Some(on) => Some(on.write_lock.lock().await),
            None => None,
        };
        let dropped = catalog.drop_relation_id(index.def.id);
        if dropped.is_err() {
            index.unretire();
        }
        dropped
    });
    dropping.await.map_err(|e| WeirError::internal(e.to_string()))??;
    Ok(true)
}

/// Adds to `wb` the writes that bring `relation`'s indexes up to date with `changes` (the
/// relation's user columns), which its writer commits in the same batch; under its write lock.
pub fn maintain(relation: &Relation, store: &dyn StateStore, changes: &ChangeBatch, wb: &mut WriteBatch) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    for index in relation.indexes() {
        let filled = index.filled.lock().clone();
        let part = match filled {
            Filled::All => None,
            Filled::UpTo(up_to) => match already_filled(relation, changes, up_to.as_deref())? {
                Some(part) => Some(part),
                None => continue,
            },
        };
        let changes = part.as_ref().unwrap_or(changes);
        let columns = &index.def.index.as_ref().expect("an index").columns;
        let projected = changes.with_data(with_schema(&index, changes.data.project(columns)?)?);
        write_entries(relation, &index, store, &projected, wb)?;
    }
    Ok(())
}

/// Adds the writes of `changes` (in the index's columns) to index `index` of `relation`: an
/// index holding its table's primary key has each entry once, written without reading.
fn write_entries(
    relation: &Relation,
    index: &Relation,
    store: &dyn StateStore,
    changes: &ChangeBatch,
    wb: &mut WriteBatch,
) -> Result<()> {
    let columns = &index.def.index.as_ref().expect("an index").columns;
    let keyed = !relation.def.primary_key.is_empty() && relation.def.primary_key.iter().all(|k| columns.contains(k));
    if keyed {
        multiset::apply_distinct(&index.table, changes, wb)
    } else {
        multiset::apply(&index.table, store, changes, wb).map(drop)
    }
}

/// Whether `relation` has indexes its writers must keep up to date.
pub fn has_indexes(relation: &Relation) -> bool {
    !relation.indexes.read().is_empty()
}

/// Whether `filter` narrows a read of one of `relation`'s indexes.
pub fn narrows(relation: &Relation, filter: &Expr) -> bool {
    relation.indexes().iter().any(|index| index.readable_index() && key_access::narrows(index, filter))
}

/// A read of an index in place of its relation.
pub struct IndexRead {
    pub index: Arc<Relation>,
    pub access: KeyAccess,
    /// Where each column the read hands on is among the index's columns.
    pub projection: Vec<usize>,
}

/// The index to read instead of `relation` under `filters`, when one holds every column in
/// `needed` (the relation's columns the read hands on) and narrows the read more than the
/// relation's own key does (`own`): point lookups beat everything, ranges read in one vnode
/// each beat ranges read in every vnode, which beat reading everything.
pub fn choose(relation: &Relation, filters: &[Expr], needed: &[usize], own: &KeyAccess) -> Result<Option<IndexRead>> {
    let mut best: Option<IndexRead> = None;
    for index in relation.indexes().into_iter().filter(|i| i.readable_index()) {
        let columns = &index.def.index.as_ref().expect("an index").columns;
        let Some(projection) = needed.iter().map(|c| columns.iter().position(|i| i == c)).collect() else {
            continue;
        };
        let access = key_access::key_access(&index, filters)?;
        let beaten = best.as_ref().map_or(cost(own), |b| cost(&b.access));
        if cost(&access) < beaten {
            best = Some(IndexRead { index, access, projection });
        }
    }
    Ok(best)
}

/// How costly an access is, in rank: 0 point lookups, 1 ranges each in one vnode, 2 ranges in
/// every vnode, 3 everything.
fn cost(access: &KeyAccess) -> u8 {
    match access {
        KeyAccess::Keys(_) => 0,
        KeyAccess::Ranges(ranges) if ranges.iter().all(|r| r.vnode.is_some()) => 1,
        KeyAccess::Ranges(_) => 2,
        KeyAccess::All => 3,
    }
}

impl Catalog {
    /// Sets aside `name` and an id for a relation being built (an index while it is filled):
    /// None when the name is taken and `if_not_exists`. Nothing is durable until
    /// [`Catalog::record_index`]; a builder clears the id's range before writing to it, and
    /// gives the name back with [`Catalog::release`] whether it succeeded or not.
    fn reserve(&self, name: &str, if_not_exists: bool) -> Result<Option<crate::state::keys::TableId>> {
        let mut inner = self.inner.write();
        if inner.by_name.contains_key(name) || inner.building.contains(name) {
            if if_not_exists {
                return Ok(None);
            }
            return Err(WeirError::new(SqlState::DUPLICATE_TABLE, format!("relation \"{name}\" already exists")));
        }
        inner.building.insert(name.to_string());
        let id = inner.next_id;
        inner.next_id += 1;
        Ok(Some(id))
    }

    fn release(&self, name: &str) {
        self.inner.write().building.remove(name);
    }

    /// Records a filled index (its relation's writers keep it already; the caller holds their
    /// write lock), unless the relation was dropped meanwhile.
    fn record_index(&self, index: Arc<Relation>, on: &Arc<Relation>) -> Result<()> {
        let mut inner = self.inner.write();
        if !inner.by_name.values().any(|r| r.def.id == on.def.id) {
            return Err(WeirError::undefined_table(&on.def.name));
        }
        let mut wb = WriteBatch::default();
        persist::put_relation(&index.def, &mut wb)?;
        persist::put_next_id(inner.next_id.max(index.def.id + 1), &mut wb);
        self.store.write(wb)?;
        inner.by_name.insert(index.def.name.clone(), index);
        self.version.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
