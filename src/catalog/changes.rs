//! [`ChangeHub`]: subscriptions to relations' changes. It lives with the catalog because tables
//! (catalog::dml) publish into it; the streaming runtime (`dataflow`) subscribes views.
//!
//! A table publishes each committed statement's changes; a view publishes each epoch's net
//! changes followed by the epoch's barrier. A subscriber is a bounded channel with a memory
//! budget ([`BUDGET_KIB`] of Arrow buffers waiting, however many rows a statement has), so a slow
//! view slows down (back-pressures) the writers of what it reads instead of buffering without
//! bound.
//! Each relation's subscriber list has its own lock; publishing to one relation never waits for
//! another.
//!
//! The hub also counts the rows tables and sources publish in an epoch, so that the
//! coordinator can end an epoch early once it holds `epoch_max_rows`.
//!
//! Ordering: the caller publishes under the relation's write lock, and subscribes under that
//! same lock while it snapshots the relation, so a subscriber sees exactly the changes after its
//! snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::state::keys::TableId;
use crate::types::Message;

/// Messages a subscriber may have queued before publishers wait.
pub const CHANNEL_CAPACITY: usize = 256;

/// KiB of batches a subscriber may have queued before publishers wait (a batch larger than
/// this waits until the queue is empty).
pub const BUDGET_KIB: u32 = 64 * 1024;

/// A message, when it was published, and the share of its subscriber's budget it holds while
/// queued.
type Envelope = (Message, std::time::Instant, Option<OwnedSemaphorePermit>);

struct Subscriber {
    job: TableId,
    tx: mpsc::Sender<Envelope>,
    budget: Arc<Semaphore>,
}

/// The receiving end of a subscription.
pub struct ChangeReceiver {
    rx: mpsc::Receiver<Envelope>,
}

impl ChangeReceiver {
    /// The next message and when it was published; None once the publisher side is gone. Its
    /// budget is released now: the caller applies it before receiving the next.
    pub async fn recv(&mut self) -> Option<(Message, std::time::Instant)> {
        self.rx.recv().await.map(|(message, published, _permit)| (message, published))
    }
}

#[derive(Default)]
pub struct ChangeHub {
    relations: parking_lot::Mutex<HashMap<TableId, Arc<tokio::sync::Mutex<Vec<Subscriber>>>>>,
    /// Rows tables and sources have published since the last barrier.
    rows_since_barrier: AtomicU64,
    /// Past this many of them (0: never) an epoch is full: `epoch_full` wakes the coordinator.
    epoch_max_rows: AtomicU64,
    pub epoch_full: Notify,
}

impl ChangeHub {
    fn list(&self, relation: TableId) -> Arc<tokio::sync::Mutex<Vec<Subscriber>>> {
        Arc::clone(self.relations.lock().entry(relation).or_default())
    }

    /// A new subscription of `job` to `relation`.
    pub async fn subscribe(&self, relation: TableId, job: TableId) -> ChangeReceiver {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let budget = Arc::new(Semaphore::new(BUDGET_KIB as usize));
        self.list(relation).lock().await.push(Subscriber { job, tx, budget });
        ChangeReceiver { rx }
    }

    /// Removes every subscription of `job`.
    pub async fn unsubscribe_job(&self, job: TableId) {
        let lists: Vec<_> = self.relations.lock().values().cloned().collect();
        for list in lists {
            list.lock().await.retain(|s| s.job != job);
        }
    }

    /// Whether anyone listens to `relation` (tables skip computing changes otherwise).
    pub async fn has_subscribers(&self, relation: TableId) -> bool {
        let list = self.relations.lock().get(&relation).cloned();
        match list {
            Some(list) => !list.lock().await.is_empty(),
            None => false,
        }
    }

    /// Sends `messages` to every subscriber of `relation`, in order, waiting for room.
    /// Subscribers that went away are dropped.
    pub async fn publish(&self, relation: TableId, messages: Vec<Message>) {
        self.publish_since(relation, messages, std::time::Instant::now()).await
    }

    /// [`ChangeHub::publish`] of changes that came into being at `since` (a source chunk's
    /// read), which is what views measure their freshness from.
    pub async fn publish_since(&self, relation: TableId, messages: Vec<Message>, since: std::time::Instant) {
        let list = self.list(relation);
        let mut subscribers = list.lock().await;
        let mut gone = Vec::new();
        let published = since;
        for (i, s) in subscribers.iter().enumerate() {
            for m in &messages {
                let permit = match m {
                    Message::Data(batch) => {
                        let kib = (batch.data.get_array_memory_size() / 1024).clamp(1, BUDGET_KIB as usize) as u32;
                        Arc::clone(&s.budget).acquire_many_owned(kib).await.ok()
                    }
                    Message::Barrier(_) | Message::End => None,
                };
                if s.tx.send((m.clone(), published, permit)).await.is_err() {
                    gone.push(i);
                    break;
                }
            }
        }
        for i in gone.into_iter().rev() {
            subscribers.remove(i);
        }
    }

    /// Sets how many rows from tables and sources fill an epoch (0: no limit).
    pub fn set_epoch_max_rows(&self, rows: u64) {
        self.epoch_max_rows.store(rows, Ordering::Relaxed);
    }

    /// Counts `rows` a table or source published; wakes `epoch_full` when they fill the epoch.
    pub fn count_table_rows(&self, rows: u64) {
        let before = self.rows_since_barrier.fetch_add(rows, Ordering::Relaxed);
        if !self.fills_epoch(before) && self.fills_epoch(before + rows) {
            self.epoch_full.notify_one();
        }
    }

    /// Whether the current epoch holds `epoch_max_rows` rows (a wake-up of `epoch_full` may be
    /// left over from an epoch a barrier has ended since).
    pub fn epoch_is_full(&self) -> bool {
        self.fills_epoch(self.rows_since_barrier.load(Ordering::Relaxed))
    }

    fn fills_epoch(&self, rows: u64) -> bool {
        let max = self.epoch_max_rows.load(Ordering::Relaxed);
        max > 0 && rows >= max
    }

    /// A barrier was injected: a new epoch starts empty.
    pub fn epoch_started(&self) {
        self.rows_since_barrier.store(0, Ordering::Relaxed);
    }
}
