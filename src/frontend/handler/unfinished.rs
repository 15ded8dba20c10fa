//! [`Unfinished`]: what a CREATE statement has made so far, undone unless it finishes.
//!
//! A CREATE MATERIALIZED VIEW or CREATE SINK records its relation in the catalog, then starts
//! its job, which may backfill for a long time. The statement can end midway in two ways: an
//! error, and its future being dropped (the statement cancelled, past its `statement_timeout`,
//! its client gone). Both must undo what it made; without the second, a half-built view would
//! stay in the catalog with no job, the next checkpoint would record it so, and a restart would
//! restore it half built. The handlers push each relation they make and call
//! [`Unfinished::finished`] once the statement succeeded; dropping it otherwise stops the
//! relations' jobs and drops them, newest first, by id (never a relation that had the name
//! before: a taken name fails before anything is made).

use crate::frontend::Frontend;
use crate::state::keys::TableId;

pub struct Unfinished<'a> {
    fe: &'a Frontend,
    /// The relations made so far, oldest first.
    made: Vec<TableId>,
}

impl<'a> Unfinished<'a> {
    pub fn new(fe: &'a Frontend) -> Unfinished<'a> {
        Unfinished { fe, made: Vec::new() }
    }

    /// The statement made relation `id` (a relation made later may depend on it).
    pub fn push(&mut self, id: TableId) {
        self.made.push(id);
    }

    /// The statement succeeded: nothing is undone.
    pub fn finished(mut self) {
        self.made.clear();
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        for id in self.made.drain(..).rev() {
            let relation = self.fe.catalog().by_id(id);
            self.fe.streaming().abandon_job(id);
            if let Err(e) = self.fe.catalog().undo_create(id) {
                tracing::error!(relation = id, "could not undo what an unfinished CREATE made: {e}");
                continue;
            }
            // A write of its backfill may still be in flight: it holds the relation's write lock
            // until done (an operator state write, its state-writes lock). Once they are, what
            // they wrote goes too.
            if let Some(relation) = relation {
                let catalog = std::sync::Arc::clone(self.fe.catalog());
                crate::runtime::spawn(async move {
                    let _written = std::sync::Arc::clone(&relation.write_lock).lock_owned().await;
                    let _state_written = relation.state_writes.write().await;
                    if let Err(e) = catalog.delete_dropped_again(&relation) {
                        tracing::error!(relation = id, "could not delete what an unfinished CREATE wrote: {e}");
                    }
                });
            }
        }
    }
}
