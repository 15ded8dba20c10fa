//! Epochs and barriers.
//!
//! The coordinator numbers epochs. [`BarrierCoordinator::inject`] sends barrier `e` to every
//! subscriber of every table (views pass barriers on to views built on them, after their own
//! commit), each table under its write lock, moving the table to epoch `e + 1` there: every
//! write of a table is logged with the epoch its changes belong to (`catalog::change_log`); [`BarrierCoordinator::flush`] injects one and waits until every running view has
//! committed it, which is what `FLUSH` and `implicit_flush` mean: every change made before is
//! visible in every view. A ticker injects a barrier every `barrier_interval`, and early when
//! tables and sources have published `epoch_max_rows` rows since the last one: every
//! operator holds an epoch's touched state and output until its barrier, so bounding the rows
//! in an epoch bounds that memory however fast rows come.
//!
//! Each barrier carries the epoch's time from the [`EpochClock`] (`now()` in views' temporal
//! filters, ADR 13), read once per barrier.
//!
//! Checkpoints (ADR 11, ADR 18): the first barrier injected once `checkpoint_interval` has
//! passed since the last checkpoint is a checkpoint barrier, and the first barrier after a
//! bounded source has read its last row is one too (a final checkpoint, as Flink takes at the
//! end of bounded input: nothing of a finished source is read again after a restart, and
//! exactly-once sinks deliver its last rows without waiting for the interval). Injecting
//! checkpoint barrier `e` tells the store the cut (`StateStore::hold_after`): from then until the snapshot is taken,
//! views' commits of later epochs are held in memory, where reads see them. Barriers go on
//! being injected; a task waits until every view has committed `e`, has the [`Checkpointer`]
//! snapshot the store (every view in it exactly at `e`), and releases the held commits into
//! the store. Once the snapshot is taken, the change log up to the snapshot before `e` is
//! deleted: a restart that finds `e` damaged restores the one before and replays the log after
//! it. A checkpoint whose views do not all commit within `checkpoint_timeout` is given up (and
//! recorded as failed); a periodic one due while the previous one is being taken or uploaded
//! is put off to a later barrier, so checkpoints running behind are skipped, not queued.
//!
//! DDL completes with a checkpoint ([`BarrierCoordinator::checkpoint_now`]), so the catalog in
//! the newest checkpoint is the one clients were told about. A statement changing the catalog
//! holds [`BarrierCoordinator::ddl_gate`] shared while it runs; a checkpoint is taken only
//! with the gate held exclusively, so no snapshot holds half a CREATE.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::clock::EpochClock;
use crate::catalog::changes::ChangeHub;
use crate::catalog::{Catalog, RelationKind};
use crate::checkpoint::Checkpointer;
use crate::state::keys::TableId;
use crate::types::{Barrier, BarrierKind, Epoch, Message};

/// When epochs end: every `interval`, or once tables and sources have published `max_rows`
/// rows in one (0: by time only).
#[derive(Debug, Clone, Copy)]
pub struct EpochBounds {
    pub interval: Duration,
    pub max_rows: u64,
}

pub struct BarrierCoordinator {
    hub: Arc<ChangeHub>,
    catalog: Arc<Catalog>,
    epoch: AtomicU64,
    /// Held while injecting, and while a new view subscribes, so a view sees every barrier
    /// after the epoch it started at.
    inject_lock: tokio::sync::Mutex<()>,
    /// The last committed epoch of each running view.
    jobs: parking_lot::Mutex<HashMap<TableId, watch::Receiver<Epoch>>>,
    /// Takes and uploads checkpoints, and says how often (None: checkpoints are off).
    checkpointer: Option<Arc<Checkpointer>>,
    /// When the last checkpoint barrier was injected.
    last_checkpoint: parking_lot::Mutex<std::time::Instant>,
    /// Shared by statements changing the catalog, exclusive from a checkpoint barrier's
    /// injection until its snapshot is taken.
    pub ddl_gate: Arc<tokio::sync::RwLock<()>>,
    /// The newest epoch whose checkpoint snapshot is taken (sinks deliver up to it).
    checkpointed: watch::Sender<Epoch>,
    /// The time each barrier carries.
    pub clock: EpochClock,
    /// The epoch of the last snapshot this process took (0: none yet); the change log is
    /// deleted up to it when the next is taken.
    previous_snapshot: AtomicU64,
    /// The DDL gate, held for good after the last checkpoint of a clean stop.
    closed: parking_lot::Mutex<Option<tokio::sync::OwnedRwLockWriteGuard<()>>>,
}

/// How the checkpoint at a clean stop ended ([`BarrierCoordinator::last_checkpoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastCheckpoint {
    /// In the object store (or no checkpoints are configured): any data directory restores it.
    Uploaded,
    /// Taken, but its upload did not finish in time: this data directory restores it.
    LocalOnly,
    /// Not taken: the next start replays the writes since the last one.
    Failed,
}

impl BarrierCoordinator {
    /// A coordinator whose epochs continue after `first_epoch` (the highest epoch a checkpoint
    /// in the object store names, so checkpoint epochs only grow across restarts).
    pub fn new(
        hub: Arc<ChangeHub>,
        catalog: Arc<Catalog>,
        checkpointer: Option<Arc<Checkpointer>>,
        first_epoch: Epoch,
    ) -> Arc<BarrierCoordinator> {
        // Writes from now on belong to the epoch after the first.
        catalog.set_open_epoch(first_epoch + 1);
        for relation in catalog.relations() {
            relation.set_open_epoch(first_epoch + 1);
        }
        Arc::new(BarrierCoordinator {
            hub,
            catalog,
            epoch: AtomicU64::new(first_epoch),
            inject_lock: tokio::sync::Mutex::new(()),
            jobs: parking_lot::Mutex::new(HashMap::new()),
            checkpointer,
            last_checkpoint: parking_lot::Mutex::new(std::time::Instant::now()),
            ddl_gate: Arc::new(tokio::sync::RwLock::new(())),
            checkpointed: watch::channel(first_epoch).0,
            clock: EpochClock::default(),
            previous_snapshot: AtomicU64::new(0),
            closed: parking_lot::Mutex::new(None),
        })
    }

    /// Injects the next barrier into every table's subscribers; returns its epoch.
    pub async fn inject(&self) -> Epoch {
        self.inject_barrier(BarrierKind::Flush).await.0
    }

    /// Whether the next barrier should be a checkpoint ([`Checkpointer::due`]).
    fn checkpoint_due(&self) -> bool {
        let wanted = self.hub.checkpoint_is_wanted();
        self.checkpointer.as_ref().is_some_and(|c| c.due(self.last_checkpoint.lock().elapsed(), wanted))
    }

    /// Injects a barrier of `kind`. A checkpoint waits for no DDL, nor for a checkpoint being
    /// taken: either turns it into a flush (the next barrier is a checkpoint). The checkpoint's
    /// snapshot is taken by a task of its own while barriers go on.
    async fn inject_kind(self: &Arc<Self>, kind: BarrierKind) -> Epoch {
        let gate = match kind {
            BarrierKind::Checkpoint if self.checkpointer.is_some() => Arc::clone(&self.ddl_gate).try_write_owned().ok(),
            _ => None,
        };
        let Some(gate) = gate else { return self.inject().await };
        let (epoch, injected_at) = self.inject_barrier(BarrierKind::Checkpoint).await;
        let this = Arc::clone(self);
        crate::runtime::spawn(async move {
            this.take_checkpoint(epoch, injected_at, gate).await;
        });
        epoch
    }

    /// Injects a barrier of `kind`; a checkpoint's caller holds the DDL gate exclusively and
    /// then calls [`BarrierCoordinator::take_checkpoint`].
    async fn inject_barrier(&self, kind: BarrierKind) -> (Epoch, std::time::Instant) {
        let _guard = self.inject_lock.lock().await;
        self.hub.epoch_started();
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let injected_at = std::time::Instant::now();
        let barrier = Barrier { epoch, injected_at, kind, now: self.clock.next() };
        if kind == BarrierKind::Checkpoint {
            *self.last_checkpoint.lock() = injected_at;
            self.hub.checkpoint_started();
            // Before any view can see barrier `epoch`, so before any can commit past it.
            if let Err(e) = self.catalog.store().hold_after(epoch) {
                // Commits held for an earlier checkpoint that was never released.
                stop_for_unwritten_commits(epoch.saturating_sub(1), &e);
            }
        }
        self.catalog.set_open_epoch(epoch + 1);
        let tables = self.catalog.relations().into_iter().filter(|r| r.def.kind == RelationKind::Table);
        for table in tables {
            // Under the table's write lock: a write is before the barrier, or logged after it.
            let _write = table.write_lock.lock().await;
            self.hub.publish(table.def.id, vec![Message::Barrier(barrier)]).await;
            table.set_open_epoch(epoch + 1);
        }
        (epoch, injected_at)
    }

    /// Takes a checkpoint now and waits until its snapshot is taken (DDL's completion; the
    /// caller must not hold the DDL gate). False if it failed.
    pub async fn checkpoint_now(&self) -> bool {
        self.checkpoint_now_then(false).await
    }

    /// The checkpoint at a clean stop: after it no checkpoint starts (the DDL gate stays held),
    /// so nothing is held in memory when the store is persisted. An upload under way finishes
    /// first (else the last checkpoint would stay local only), and the last checkpoint's upload
    /// is waited for, each for at most the checkpoint timeout.
    pub async fn last_checkpoint(&self) -> LastCheckpoint {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.wait_idle().await;
        }
        if !self.checkpoint_now_then(true).await {
            return LastCheckpoint::Failed;
        }
        let Some(checkpointer) = &self.checkpointer else { return LastCheckpoint::Uploaded };
        // A periodic checkpoint's upload may have started between the wait above and this
        // one's snapshot, which then stayed local: it goes up once that upload is done.
        let mut idle = checkpointer.wait_idle().await;
        if idle && checkpointer.upload_pending() {
            idle = checkpointer.wait_idle().await;
        }
        let uploaded = idle && checkpointer.uploaded_epoch() >= checkpointer.local_epoch();
        if uploaded {
            LastCheckpoint::Uploaded
        } else {
            LastCheckpoint::LocalOnly
        }
    }

    async fn checkpoint_now_then(&self, close: bool) -> bool {
        let gate = Arc::clone(&self.ddl_gate).write_owned().await;
        if self.checkpointer.is_none() {
            if close {
                *self.closed.lock() = Some(gate);
            }
            return true;
        }
        let (epoch, injected_at) = self.inject_barrier(BarrierKind::Checkpoint).await;
        let gate = self.take_checkpoint(epoch, injected_at, gate).await;
        if close {
            *self.closed.lock() = Some(gate);
        }
        self.checkpointer.as_ref().is_some_and(|c| c.local_epoch() >= epoch)
    }

    /// Waits for every view to commit checkpoint barrier `epoch`, has the checkpointer snapshot
    /// the store and start uploading it, then writes the view commits held meanwhile into the
    /// store. `gate` (the DDL gate, exclusive) is held until then, and handed back.
    async fn take_checkpoint(
        &self,
        epoch: Epoch,
        injected_at: std::time::Instant,
        gate: tokio::sync::OwnedRwLockWriteGuard<()>,
    ) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        let snapshot = self.snapshot(epoch, injected_at).await;
        let store = Arc::clone(self.catalog.store());
        let released = match tokio::task::spawn_blocking(move || store.release_held()).await {
            Ok(released) => released,
            Err(e) => Err(crate::error::WeirError::internal(e.to_string())),
        };
        if let Err(e) = released {
            stop_for_unwritten_commits(epoch, &e);
        }
        if !snapshot {
            return gate;
        }
        self.checkpointed.send_replace(epoch);
        // The log is kept from the snapshot before this one: a restart that finds this snapshot
        // damaged falls back to that one, and replays what came after it from the log.
        let through = self.previous_snapshot.swap(epoch, Ordering::SeqCst);
        if through == 0 {
            return gate;
        }
        let store = Arc::clone(self.catalog.store());
        let truncate = move || crate::catalog::change_log::truncate_through(store.as_ref(), through);
        let failed = match tokio::task::spawn_blocking(truncate).await {
            Ok(Ok(())) => return gate,
            Ok(Err(e)) => e.message,
            Err(e) => e.to_string(),
        };
        tracing::warn!(epoch, "deleting the change log up to the checkpoint before failed: {failed}");
        gate
    }

    /// Waits for every view to commit `epoch`, then snapshots the store. False if the
    /// checkpoint failed (recorded).
    async fn snapshot(&self, epoch: Epoch, injected_at: std::time::Instant) -> bool {
        let Some(checkpointer) = &self.checkpointer else { return false };
        let watchers: Vec<watch::Receiver<Epoch>> = self.jobs.lock().values().cloned().collect();
        let timeout = checkpointer.timeout;
        let aligned = tokio::time::timeout(timeout, async {
            for mut w in watchers {
                // An error means the view was dropped meanwhile: nothing to wait for.
                let _ = w.wait_for(|committed| *committed >= epoch).await;
            }
        })
        .await;
        let alignment = injected_at.elapsed();
        crate::metrics::CHECKPOINT_ALIGNMENT_SECONDS.observe(alignment.as_secs_f64());
        if aligned.is_err() {
            checkpointer.record_failure(epoch, format!("views did not commit the barrier within {timeout:?}"));
            return false;
        }
        // Nothing the snapshot needs waits for a view now: views far ahead may wait for it.
        self.catalog.store().throttle_held();
        let catalog_version = self.catalog.fingerprint();
        if let Err(e) = Arc::clone(checkpointer).take(epoch, catalog_version, injected_at).await {
            tracing::error!(epoch, "checkpoint failed: {e}");
            checkpointer.record_failure(epoch, e.message.clone());
            return false;
        }
        true
    }

    /// Waits until every view has committed a barrier injected after every change made so far.
    pub async fn flush(&self) {
        let epoch = self.inject().await;
        let watchers: Vec<watch::Receiver<Epoch>> = self.jobs.lock().values().cloned().collect();
        for mut w in watchers {
            // An error means the view was dropped meanwhile: nothing to wait for.
            let _ = w.wait_for(|committed| *committed >= epoch).await;
        }
    }

    /// Registers a view that starts after the current epoch; `subscribe` runs under the
    /// injection lock, so no barrier is injected between the view's snapshot and subscription.
    pub async fn start_job<T>(
        &self,
        job: TableId,
        subscribe: impl std::future::Future<Output = T>,
    ) -> (T, watch::Sender<Epoch>) {
        let _guard = self.inject_lock.lock().await;
        let value = subscribe.await;
        let (tx, rx) = watch::channel(self.epoch.load(Ordering::SeqCst));
        self.jobs.lock().insert(job, rx);
        (value, tx)
    }

    /// Follows the newest epoch whose checkpoint snapshot is taken.
    pub fn checkpointed(&self) -> watch::Receiver<Epoch> {
        self.checkpointed.subscribe()
    }

    /// The last epoch injected.
    pub fn current_epoch(&self) -> Epoch {
        self.epoch.load(Ordering::SeqCst)
    }

    pub fn stop_job(&self, job: TableId) {
        self.jobs.lock().remove(&job);
    }

    /// Injects a barrier every `bounds.interval`, and early once tables and sources have
    /// published `bounds.max_rows` rows in the epoch, until the process ends.
    pub fn start_ticker(self: &Arc<Self>, bounds: EpochBounds) {
        let this = Arc::clone(self);
        this.hub.set_epoch_max_rows(bounds.max_rows);
        crate::runtime::spawn(async move {
            let mut tick = tokio::time::interval(bounds.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = this.hub.epoch_full.notified() => {
                        if !this.hub.epoch_is_full() {
                            continue;
                        }
                        // The next barrier by time comes a whole interval after this one.
                        tick.reset();
                        crate::metrics::EARLY_BARRIERS_TOTAL.inc();
                    }
                    // A bounded source finished: its final checkpoint comes now.
                    _ = this.hub.checkpoint_asked.notified() => tick.reset(),
                }
                let kind = if this.checkpoint_due() { BarrierKind::Checkpoint } else { BarrierKind::Flush };
                this.inject_kind(kind).await;
            }
        });
    }
}

/// Writing the view commits held during checkpoint `epoch`'s snapshot failed: views count them
/// as stored ([`crate::state::store::stop_after_refused_write`]).
fn stop_for_unwritten_commits(epoch: Epoch, e: &crate::error::WeirError) -> ! {
    crate::state::store::stop_after_refused_write(&format!("the view commits held during checkpoint {epoch}"), e)
}
