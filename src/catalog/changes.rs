//! [`ChangeHub`]: subscriptions to relations' changes. It lives with the catalog because tables
//! (catalog::dml) publish into it; the streaming runtime (`dataflow`) subscribes views.
//!
//! A table publishes each committed statement's changes; a view publishes each epoch's net
//! changes followed by the epoch's barrier. A subscriber is a bounded channel with a memory
//! budget ([`BUDGET_KIB`] of Arrow buffers waiting, however many rows a statement has), so a slow
//! view slows down (back-pressures) the writers of what it reads instead of buffering without
//! bound.
//!
//! The budget in use is sized to time, not only to bytes, as Flink's buffer debloating does: a
//! barrier queued behind the data waits for all of it, so a checkpoint's alignment (and the
//! input a restart replays) grows with the time the queue holds. The receiver measures how long
//! each batch waited in the queue; above [`QUEUE_TARGET`] the subscriber's limit shrinks, below
//! half of it the limit grows back, between [`MIN_LIMIT_KIB`] and [`BUDGET_KIB`]. A batch
//! costs its size in bytes scaled by `BUDGET_KIB / limit`, rounded up (at most the whole
//! budget), so the semaphore keeps its fixed size and a batch larger than the limit waits until
//! the queue is empty; the one being applied and the next queued keep the view busy. At most
//! [`CHANNEL_CAPACITY`] messages are queued besides, which is what bounds a stream of tiny ones
//! (one per INSERT). An input whose barrier came before the other inputs' is not read until
//! they catch up, so its batches wait longer and its limit shrinks: the input ahead is slowed.
//!
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

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::state::keys::TableId;
use crate::types::Message;

/// Messages a subscriber may have queued before publishers wait.
pub const CHANNEL_CAPACITY: usize = 256;

/// KiB of batches a subscriber may have queued before publishers wait (a batch larger than
/// this waits until the queue is empty).
pub const BUDGET_KIB: u32 = 64 * 1024;

/// How long data may wait in a subscriber's queue before its limit shrinks.
pub const QUEUE_TARGET: std::time::Duration = std::time::Duration::from_millis(100);

/// The smallest limit a subscriber's queue shrinks to.
pub const MIN_LIMIT_KIB: u32 = 1024;

/// A message, when its changes came into being, when it was queued, and the share of its
/// subscriber's budget it holds while queued.
struct Envelope {
    message: Message,
    since: std::time::Instant,
    queued: std::time::Instant,
    _permit: Option<OwnedSemaphorePermit>,
}

struct Subscriber {
    job: TableId,
    tx: mpsc::Sender<Envelope>,
    budget: Arc<Semaphore>,
    limit: Arc<QueueLimit>,
}

/// A subscriber's limit on queued KiB, adapted by its receiver to the time data waits.
struct QueueLimit(AtomicU32);

impl QueueLimit {
    fn new() -> QueueLimit {
        QueueLimit(AtomicU32::new(BUDGET_KIB))
    }

    /// The permits (KiB of the budget) a batch of `bytes` takes: its size scaled up as the
    /// limit is below the budget, rounded up, at least 1 and at most the whole budget.
    fn cost(&self, bytes: usize) -> u32 {
        let limit = self.0.load(Ordering::Relaxed).max(1) as u64;
        (bytes as u64).saturating_mul(BUDGET_KIB as u64).div_ceil(limit * 1024).clamp(1, BUDGET_KIB as u64) as u32
    }

    /// A batch waited `waited` in the queue: shrinks the limit by an eighth above the target,
    /// grows it by an eighth below half of it.
    fn observe(&self, waited: std::time::Duration) {
        let limit = self.0.load(Ordering::Relaxed);
        let next = if waited > QUEUE_TARGET {
            (limit - limit / 8).max(MIN_LIMIT_KIB)
        } else if waited < QUEUE_TARGET / 2 {
            limit.saturating_add(limit / 8).min(BUDGET_KIB)
        } else {
            return;
        };
        self.0.store(next, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn kib(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The receiving end of a subscription.
pub struct ChangeReceiver {
    rx: mpsc::Receiver<Envelope>,
    limit: Arc<QueueLimit>,
}

impl ChangeReceiver {
    /// The next message and when its changes came into being; None once the publisher side is
    /// gone. Its budget is released now: the caller applies it before receiving the next.
    pub async fn recv(&mut self) -> Option<(Message, std::time::Instant)> {
        let envelope = self.rx.recv().await?;
        if matches!(envelope.message, Message::Data(_)) {
            self.limit.observe(envelope.queued.elapsed());
        }
        Some((envelope.message, envelope.since))
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
    /// Set when a bounded source has read its last row, until the next checkpoint barrier: that
    /// barrier comes at once instead of after the checkpoint interval (Flink's final
    /// checkpoint), so a finished pipeline's results are durable, and delivered by exactly-once
    /// sinks, without waiting, and a restart has nothing of it to read again.
    checkpoint_wanted: std::sync::atomic::AtomicBool,
    /// Wakes the coordinator when `checkpoint_wanted` is set.
    pub checkpoint_asked: Notify,
}

impl ChangeHub {
    fn list(&self, relation: TableId) -> Arc<tokio::sync::Mutex<Vec<Subscriber>>> {
        Arc::clone(self.relations.lock().entry(relation).or_default())
    }

    /// A new subscription of `job` to `relation`.
    pub async fn subscribe(&self, relation: TableId, job: TableId) -> ChangeReceiver {
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let budget = Arc::new(Semaphore::new(BUDGET_KIB as usize));
        let limit = Arc::new(QueueLimit::new());
        self.list(relation).lock().await.push(Subscriber { job, tx, budget, limit: Arc::clone(&limit) });
        ChangeReceiver { rx, limit }
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
        for (i, s) in subscribers.iter().enumerate() {
            for m in &messages {
                let permit = match m {
                    Message::Data(batch) => {
                        let cost = s.limit.cost(batch.data.get_array_memory_size());
                        Arc::clone(&s.budget).acquire_many_owned(cost).await.ok()
                    }
                    Message::Barrier(_) | Message::End => None,
                };
                let envelope =
                    Envelope { message: m.clone(), since, queued: std::time::Instant::now(), _permit: permit };
                if s.tx.send(envelope).await.is_err() {
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

    /// Asks for a checkpoint at the next barrier (a bounded source finished).
    pub fn want_checkpoint(&self) {
        self.checkpoint_wanted.store(true, Ordering::SeqCst);
        self.checkpoint_asked.notify_one();
    }

    /// Whether a checkpoint was asked for since the last checkpoint barrier.
    pub fn checkpoint_is_wanted(&self) -> bool {
        self.checkpoint_wanted.load(Ordering::SeqCst)
    }

    /// A checkpoint barrier was injected: it answers every request made before.
    pub fn checkpoint_started(&self) {
        self.checkpoint_wanted.store(false, Ordering::SeqCst);
    }

    /// A barrier was injected: a new epoch starts empty.
    pub fn epoch_started(&self) {
        self.rows_since_barrier.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::types::ChangeBatch;

    #[test]
    fn a_queue_limit_shrinks_while_data_waits_long_and_grows_back_when_it_does_not() {
        let limit = QueueLimit::new();
        assert_eq!(limit.cost(1024 * 1024), 1024, "at the full budget a batch costs its size in KiB");
        assert_eq!(limit.cost(100), 1, "rounded up");
        for _ in 0..100 {
            limit.observe(QUEUE_TARGET * 2);
        }
        assert_eq!(limit.kib(), MIN_LIMIT_KIB);
        assert_eq!(limit.cost(1024 * 1024), BUDGET_KIB, "a batch the size of the limit takes the whole budget");
        assert_eq!(limit.cost(512 * 1024), BUDGET_KIB / 2);
        assert_eq!(limit.cost(100), 7, "a small batch costs its share of the limit, rounded up");
        assert_eq!(limit.cost(100 << 20), BUDGET_KIB, "never more than the budget: it fits once the queue is empty");
        limit.observe(QUEUE_TARGET * 3 / 4);
        assert_eq!(limit.kib(), MIN_LIMIT_KIB, "between half the target and the target it stays");
        for _ in 0..100 {
            limit.observe(Duration::ZERO);
        }
        assert_eq!(limit.kib(), BUDGET_KIB);
    }

    #[tokio::test]
    async fn batches_larger_than_a_shrunk_limit_still_pass_one_at_a_time() {
        let hub = ChangeHub::default();
        let mut rx = hub.subscribe(1, 2).await;
        for _ in 0..100 {
            rx.limit.observe(QUEUE_TARGET * 2);
        }
        // 2 MiB of values: more than the shrunk limit.
        let batch = || {
            use datafusion::arrow::array::Int64Array;
            let values = Arc::new(Int64Array::from_iter_values(0..256 * 1024));
            let data = datafusion::arrow::record_batch::RecordBatch::try_from_iter([("a", values as _)]).unwrap();
            Message::Data(ChangeBatch::inserts(data))
        };
        let publisher = async {
            for _ in 0..3 {
                hub.publish(1, vec![batch()]).await;
            }
            hub.publish(1, vec![Message::End]).await;
        };
        let receiver = async {
            let mut data = 0;
            while let Some((m, _)) = rx.recv().await {
                match m {
                    Message::Data(_) => data += 1,
                    _ => break,
                }
            }
            data
        };
        let ((), data) = tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(publisher, receiver) })
            .await
            .expect("no deadlock");
        assert_eq!(data, 3);
    }
}
