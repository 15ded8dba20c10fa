//! Epochs and barriers.
//!
//! The coordinator numbers epochs. [`BarrierCoordinator::inject`] sends barrier `e` to every
//! subscriber of every table (views pass barriers on to views built on them, after their own
//! commit); [`BarrierCoordinator::flush`] injects one and waits until every running view has
//! committed it, which is what `FLUSH` and `implicit_flush` mean: every change made before is
//! visible in every view. A ticker injects a barrier every `barrier_interval`, and early when
//! tables and sources have published `epoch_max_rows` rows since the last one: every
//! operator holds an epoch's touched state and output until its barrier, so bounding the rows
//! in an epoch bounds that memory however fast rows come.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::changes::ChangeHub;
use crate::catalog::{Catalog, RelationKind};
use crate::state::keys::TableId;
use crate::types::{Barrier, Epoch, Message};

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
}

impl BarrierCoordinator {
    pub fn new(hub: Arc<ChangeHub>, catalog: Arc<Catalog>) -> Arc<BarrierCoordinator> {
        Arc::new(BarrierCoordinator {
            hub,
            catalog,
            epoch: AtomicU64::new(0),
            inject_lock: tokio::sync::Mutex::new(()),
            jobs: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    /// Injects the next barrier into every table's subscribers; returns its epoch.
    pub async fn inject(&self) -> Epoch {
        let _guard = self.inject_lock.lock().await;
        self.hub.epoch_started();
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let injected_at = std::time::Instant::now();
        let tables: std::collections::HashSet<TableId> =
            self.catalog.relations().iter().filter(|r| r.def.kind == RelationKind::Table).map(|r| r.def.id).collect();
        for relation in self.hub.subscribed_relations().into_iter().filter(|r| tables.contains(r)) {
            self.hub.publish(relation, vec![Message::Barrier(Barrier { epoch, injected_at })]).await;
        }
        epoch
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

    pub fn stop_job(&self, job: TableId) {
        self.jobs.lock().remove(&job);
    }

    /// Injects a barrier every `bounds.interval`, and early once tables and sources have
    /// published `bounds.max_rows` rows in the epoch, until the process ends.
    pub fn start_ticker(self: &Arc<Self>, bounds: EpochBounds) {
        let this = Arc::clone(self);
        this.hub.set_epoch_max_rows(bounds.max_rows);
        tokio::spawn(async move {
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
                }
                this.inject().await;
            }
        });
    }
}
