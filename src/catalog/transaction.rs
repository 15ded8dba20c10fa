//! A transaction block's writes: what INSERT, UPDATE, DELETE, TRUNCATE and COPY do between
//! BEGIN and COMMIT. They go into the transaction's [`Overlay`] of the store, which its own
//! statements read (so an UPDATE after an INSERT finds the row) and nobody else does. COMMIT
//! writes them to the store in one batch, with their change-log entries, and hands their
//! changes to the views in one epoch; ROLLBACK (or a session that goes away) drops them, and
//! nothing was written or published. A savepoint is a copy of the writes so far.
//!
//! Writers of a table take its writer lock ([`Relation::writers`]) for the statement, or, in a
//! transaction, from its first write to the table until COMMIT or ROLLBACK: a second writer
//! waits, as for a row lock in PostgreSQL, so no update is lost. Readers never wait. Waiting
//! in a cycle (two transactions each holding what the other wants) is found when the wait
//! begins, by [`WriterLocks`], and the one that would close it fails with 40P01 instead.
//! The relation's `write_lock`, which barriers take, is held only during the COMMIT, so an
//! open transaction never holds the dataflow back.
//!
//! Isolation is PostgreSQL's read committed: each statement reads the newest committed rows
//! with the transaction's own writes over them. Views are not transactional: a view read
//! inside the block shows what was committed, not the block's writes.
//!
//! Owned by the session (`frontend::session`, through [`TransactionSlot`], which the
//! session's DataFusion context carries to the table providers); used by `dml::Writer`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

use super::change_log::{self, LoggedChanges};
use super::{Catalog, Relation};
use crate::error::{Result, SqlState, WeirError};
use crate::state::held_writes::HeldWrites;
use crate::state::keys::TableId;
use crate::state::overlay::Overlay;
use crate::state::store::{StateStore, WriteBatch};
use crate::types::{ChangeBatch, Message};

/// The session's open transaction, if any: set at BEGIN, taken at COMMIT or ROLLBACK. Carried
/// as an extension of the session's DataFusion configuration.
#[derive(Default)]
pub struct TransactionSlot(Mutex<Option<Arc<Transaction>>>);

impl TransactionSlot {
    pub fn current(&self) -> Option<Arc<Transaction>> {
        self.0.lock().clone()
    }

    pub fn set(&self, transaction: Arc<Transaction>) {
        *self.0.lock() = Some(transaction);
    }

    pub fn take(&self) -> Option<Arc<Transaction>> {
        self.0.lock().take()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub struct Transaction {
    id: u64,
    catalog: Arc<Catalog>,
    overlay: Arc<Overlay>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Each statement's changes to a table, in order: what the views get at COMMIT.
    written: Vec<Written>,
    /// The writer locks held, by relation.
    locks: BTreeMap<TableId, (Arc<Relation>, OwnedMutexGuard<()>)>,
    savepoints: Vec<Savepoint>,
}

struct Written {
    relation: Arc<Relation>,
    changes: ChangeBatch,
    /// The relation's indexes when the statement kept them, and whether each was whole:
    /// COMMIT fails if they changed or one was still being built.
    indexes: Vec<(TableId, bool)>,
}

/// `relation`'s indexes and whether each is whole (readable).
fn index_state(relation: &Relation) -> Vec<(TableId, bool)> {
    relation.indexes().iter().map(|i| (i.def.id, i.readable_index())).collect()
}

struct Savepoint {
    name: String,
    writes: HeldWrites,
    written: usize,
}

impl Transaction {
    pub fn begin(catalog: &Arc<Catalog>) -> Arc<Transaction> {
        Arc::new(Transaction {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            catalog: Arc::clone(catalog),
            overlay: Arc::new(Overlay::new(Arc::clone(catalog.store()))),
            inner: Mutex::new(Inner::default()),
        })
    }

    /// The store as this transaction sees it.
    pub fn store(&self) -> Arc<dyn StateStore> {
        Arc::clone(&self.overlay) as Arc<dyn StateStore>
    }

    /// Whether a statement of the transaction has written rows.
    pub fn has_written(&self) -> bool {
        !self.inner.lock().written.is_empty() || !self.overlay.is_empty()
    }

    /// Takes `relation`'s writer lock for the rest of the transaction (at once if it holds it
    /// already); 40P01 if waiting would close a cycle of transactions waiting for each other.
    pub async fn lock(&self, relation: &Arc<Relation>) -> Result<()> {
        let id = relation.def.id;
        if self.inner.lock().locks.contains_key(&id) {
            return Ok(());
        }
        let guard = self.catalog.writer_locks.acquire(self.id, relation).await?;
        self.inner.lock().locks.insert(id, (Arc::clone(relation), guard));
        Ok(())
    }

    /// A statement's `changes` to `relation`, for the views at COMMIT.
    pub fn record(&self, relation: &Arc<Relation>, changes: ChangeBatch) {
        if changes.is_empty() {
            return;
        }
        let indexes = index_state(relation);
        self.inner.lock().written.push(Written { relation: Arc::clone(relation), changes, indexes });
    }

    /// How many statements' changes the transaction holds: a mark for
    /// [`Transaction::changes_since`].
    pub fn written(&self) -> usize {
        self.inner.lock().written.len()
    }

    /// The changes statements made to relation `relation` after `mark` (`RETURNING` reads them).
    pub fn changes_since(&self, mark: usize, relation: TableId) -> Vec<ChangeBatch> {
        let inner = self.inner.lock();
        inner.written.iter().skip(mark).filter(|w| w.relation.def.id == relation).map(|w| w.changes.clone()).collect()
    }

    pub fn savepoint(&self, name: &str) {
        let mut inner = self.inner.lock();
        let written = inner.written.len();
        inner.savepoints.push(Savepoint { name: name.to_string(), writes: self.overlay.save(), written });
    }

    /// ROLLBACK TO SAVEPOINT: the writes after it are undone; it stays (as in PostgreSQL).
    /// The writer locks taken since are kept until the transaction ends, as PostgreSQL keeps
    /// its locks.
    pub fn rollback_to(&self, name: &str) -> Result<()> {
        let mut inner = self.inner.lock();
        let at = savepoint_index(&inner.savepoints, name)?;
        inner.savepoints.truncate(at + 1);
        let saved = &inner.savepoints[at];
        let (writes, written) = (saved.writes.clone(), saved.written);
        inner.written.truncate(written);
        self.overlay.restore(writes);
        Ok(())
    }

    /// RELEASE SAVEPOINT: it and those after it are forgotten; their writes stay.
    pub fn release(&self, name: &str) -> Result<()> {
        let mut inner = self.inner.lock();
        let at = savepoint_index(&inner.savepoints, name)?;
        inner.savepoints.truncate(at);
        Ok(())
    }

    /// COMMIT: the writes go to the store in one batch, logged, and their changes to the
    /// views, all in one epoch; then the locks go. Fails, having written nothing, when a table
    /// it wrote was dropped or had its indexes changed meanwhile (40001).
    pub async fn commit(&self) -> Result<()> {
        let written = std::mem::take(&mut self.inner.lock().written);
        if written.is_empty() && self.overlay.is_empty() {
            self.end();
            return Ok(());
        }
        let mut relations: BTreeMap<TableId, Arc<Relation>> = BTreeMap::new();
        for w in &written {
            relations.entry(w.relation.def.id).or_insert_with(|| Arc::clone(&w.relation));
        }
        // Every written table's write lock, in id order (as every commit takes them), at one
        // epoch: a barrier that passed some of them and not yet the others is let through.
        let guards = loop {
            let mut guards = Vec::with_capacity(relations.len());
            for relation in relations.values() {
                guards.push(Arc::clone(&relation.write_lock).lock_owned().await);
            }
            let mut epochs = relations.values().map(|r| r.open_epoch());
            let first = epochs.next();
            if epochs.all(|e| Some(e) == first) {
                break guards;
            }
            drop(guards);
            tokio::task::yield_now().await;
        };
        // Under the locks: no table was dropped and no index changed since the statements ran
        // (an index built meanwhile would miss their rows).
        for w in &written {
            let live = self.catalog.by_id(w.relation.def.id);
            let same = live.as_ref().is_some_and(|l| Arc::ptr_eq(l, &w.relation));
            if !same || index_state(&w.relation) != w.indexes || w.indexes.iter().any(|(_, whole)| !whole) {
                drop(guards);
                self.end();
                return Err(WeirError::new(
                    SqlState::SERIALIZATION_FAILURE,
                    format!(
                        "could not commit: table \"{}\" was dropped or its indexes changed during the transaction",
                        w.relation.def.name
                    ),
                )
                .with_hint("The transaction was rolled back; run it again."));
            }
        }
        let mut batch = self.overlay.take_batch();
        // The hidden row-id counters as they are now (a view's late rows may have moved one
        // since the statements ran): never back.
        for relation in relations.values().filter(|r| r.has_hidden_row_id()) {
            relation.persist_row_id(&mut batch);
        }
        if self.catalog.logs_changes() {
            // One entry per table: the first holds every write of the transaction.
            let mut logged = WriteBatch::default();
            let mut writes = Some(std::mem::take(&mut batch.ops));
            for relation in relations.values() {
                let changes: Vec<ChangeBatch> = written
                    .iter()
                    .filter(|w| w.relation.def.id == relation.def.id)
                    .map(|w| w.changes.clone())
                    .collect();
                let changes = ChangeBatch::concat(&relation.schema, &changes)?;
                let mut entry = WriteBatch { ops: writes.take().unwrap_or_default(), ..Default::default() };
                change_log::append(&mut entry, relation, &LoggedChanges::Rows(changes))?;
                logged.ops.extend(entry.ops);
            }
            batch.ops = logged.ops;
        }
        let store = Arc::clone(self.catalog.store());
        let wrote = tokio::task::spawn_blocking(move || store.write(batch))
            .await
            .map_err(|e| WeirError::internal(e.to_string()))
            .and_then(|r| r);
        if let Err(e) = wrote {
            self.end();
            return Err(e);
        }
        let now = std::time::Instant::now();
        for w in written {
            let rows = w.changes.num_rows() as u64;
            self.catalog.changes.publish_since(w.relation.def.id, vec![Message::Data(w.changes)], now).await;
            self.catalog.changes.count_table_rows(rows);
        }
        drop(guards);
        self.end();
        Ok(())
    }

    /// Forgets the writes and lets the locks go (ROLLBACK; also the end of COMMIT).
    pub fn end(&self) {
        let mut inner = self.inner.lock();
        inner.written.clear();
        inner.savepoints.clear();
        let held: Vec<TableId> = inner.locks.keys().copied().collect();
        inner.locks.clear();
        drop(inner);
        self.overlay.restore(HeldWrites::new(0));
        self.catalog.writer_locks.released(self.id, &held);
    }
}

impl Drop for Transaction {
    /// A session gone mid-transaction: rolled back.
    fn drop(&mut self) {
        let held: Vec<TableId> = self.inner.get_mut().locks.keys().copied().collect();
        self.catalog.writer_locks.released(self.id, &held);
    }
}

fn savepoint_index(savepoints: &[Savepoint], name: &str) -> Result<usize> {
    savepoints
        .iter()
        .rposition(|s| s.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| WeirError::new(SqlState::INVALID_SAVEPOINT, format!("savepoint \"{name}\" does not exist")))
}

/// Who holds and who waits for the writer locks transactions take, to find a wait that would
/// never end: a transaction about to wait for a lock follows holder -> what it waits for ->
/// holder ...; coming back to itself, it fails with 40P01 rather than wait. Statements outside
/// a transaction hold one lock at a time and wait for nothing while holding it, so they are
/// never part of a cycle and are not tracked.
#[derive(Default)]
pub struct WriterLocks {
    state: Mutex<LockState>,
}

#[derive(Default)]
struct LockState {
    /// The transaction holding each relation's writer lock.
    holders: HashMap<TableId, u64>,
    /// The relation each waiting transaction waits for.
    waiting: HashMap<u64, TableId>,
}

impl WriterLocks {
    async fn acquire(&self, transaction: u64, relation: &Arc<Relation>) -> Result<OwnedMutexGuard<()>> {
        let id = relation.def.id;
        let lock = Arc::clone(&relation.writers);
        if let Ok(guard) = Arc::clone(&lock).try_lock_owned() {
            self.state.lock().holders.insert(id, transaction);
            return Ok(guard);
        }
        {
            let mut state = self.state.lock();
            let mut wanted = id;
            for _ in 0..=state.waiting.len() {
                let Some(&holder) = state.holders.get(&wanted) else { break };
                if holder == transaction {
                    return Err(WeirError::new(
                        SqlState::DEADLOCK_DETECTED,
                        format!(
                            "deadlock detected: another transaction holds a table this one wrote and waits for \
                             \"{}\", which it holds",
                            relation.def.name
                        ),
                    )
                    .with_hint("The statement failed; ROLLBACK and run the transaction again."));
                }
                let Some(&next) = state.waiting.get(&holder) else { break };
                wanted = next;
            }
            state.waiting.insert(transaction, id);
        }
        // A wait given up (the statement cancelled) is no longer a wait.
        struct Waiting<'a>(&'a WriterLocks, u64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.state.lock().waiting.remove(&self.1);
            }
        }
        let waiting = Waiting(self, transaction);
        let guard = lock.lock_owned().await;
        drop(waiting);
        self.state.lock().holders.insert(id, transaction);
        Ok(guard)
    }

    fn released(&self, transaction: u64, relations: &[TableId]) {
        let mut state = self.state.lock();
        for id in relations {
            if state.holders.get(id) == Some(&transaction) {
                state.holders.remove(id);
            }
        }
        state.waiting.remove(&transaction);
    }
}
