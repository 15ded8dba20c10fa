//! [`Streaming`]: starts and stops the jobs of materialized views.
//!
//! Starting a new view (CREATE) takes the write lock of each relation it reads, subscribes to
//! them and reads their current rows, all under the coordinator's injection lock; then the view
//! backfills from those rows and commits before CREATE returns, and its job follows every
//! change made after the snapshot. A view therefore never misses or doubles a change.
//!
//! When the server starts, views are restored, never recomputed (ADR 11): the store was
//! restored from the newest checkpoint, where every view is at the same epoch, so a view only
//! subscribes to its inputs and reads its operators' records back ([`ViewJob::restore`]); the
//! inputs' changes after the checkpoint come from the change log, replayed once every view
//! has subscribed (`catalog::change_log`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinHandle;

use super::coordinator::{BarrierCoordinator, EpochBounds};
use super::graph::Built;
use super::job::{InputWatermark, ViewJob};
use crate::catalog::{Catalog, Relation};
use crate::error::{Result, WeirError};
use crate::operators::materialize::Materialize;
use crate::state::keys::TableId;

/// How a view's job begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewStart {
    /// A new view: computed from its inputs' current rows.
    Backfill,
    /// A view in the checkpoint the store was restored from: read back, nothing recomputed.
    Restore,
}

pub struct Streaming {
    catalog: Arc<Catalog>,
    /// How operator state tables cache and flush their writes.
    pub operator_state: crate::state::keyed::OperatorStateSettings,
    /// How long an input without rows is left out of a view's watermark.
    pub watermark_idle_timeout: Duration,
    pub coordinator: Arc<BarrierCoordinator>,
    jobs: parking_lot::Mutex<HashMap<TableId, JoinHandle<()>>>,
    /// The task feeding each source.
    sources: parking_lot::Mutex<HashMap<TableId, JoinHandle<()>>>,
    /// The tasks delivering each sink's outboxes, one per shard.
    deliverers: parking_lot::Mutex<HashMap<TableId, Vec<JoinHandle<()>>>>,
    /// When barriers are injected, once [`Streaming::start_epochs`] starts them.
    epochs: EpochBounds,
    ticking: std::sync::Once,
}

impl Streaming {
    pub fn new(
        catalog: Arc<Catalog>,
        epochs: EpochBounds,
        state_cache_entries: usize,
        watermark_idle_timeout: Duration,
        checkpointer: Option<Arc<crate::checkpoint::Checkpointer>>,
        first_epoch: crate::types::Epoch,
    ) -> Arc<Streaming> {
        let checkpoint_interval = checkpointer.as_ref().map(|c| c.interval).filter(|i| *i != Duration::MAX);
        let coordinator =
            BarrierCoordinator::new(Arc::clone(&catalog.changes), Arc::clone(&catalog), checkpointer, first_epoch);
        Arc::new(Streaming {
            catalog,
            operator_state: crate::state::keyed::OperatorStateSettings::new(
                state_cache_entries,
                epochs.interval,
                checkpoint_interval,
            ),
            watermark_idle_timeout,
            coordinator,
            jobs: parking_lot::Mutex::new(HashMap::new()),
            sources: parking_lot::Mutex::new(HashMap::new()),
            deliverers: parking_lot::Mutex::new(HashMap::new()),
            epochs,
            ticking: std::sync::Once::new(),
        })
    }

    /// Starts injecting barriers (and taking checkpoints) on time. Called once recovery is
    /// over: the change log replayed at start belongs to epochs up to the first one of this
    /// process, so no barrier may come before its last entry is published; a checkpoint taken
    /// earlier would hold the sources' positions after those entries and views without them,
    /// and a crash then would lose them for good (found by `tests/end_to_end.rs`).
    pub fn start_epochs(&self) {
        self.ticking.call_once(|| self.coordinator.start_ticker(self.epochs));
    }

    /// Waits until every change made so far is visible in every view. The barrier is injected
    /// from the dataflow's runtime: it holds the injection lock and tables' write locks the
    /// dataflow waits for, which a session's niced thread would hold longer.
    pub async fn flush(&self) {
        let coordinator = Arc::clone(&self.coordinator);
        let _ = crate::runtime::spawn(async move { coordinator.flush().await }).await;
    }

    /// Takes a checkpoint now (DDL's completion), from the dataflow's runtime as [`Streaming::flush`]
    /// does; false if it failed.
    pub async fn checkpoint_now(&self) -> bool {
        let coordinator = Arc::clone(&self.coordinator);
        crate::runtime::spawn(async move { coordinator.checkpoint_now().await }).await.unwrap_or(false)
    }

    /// Starts following `view`'s inputs' changes, after backfilling it from their current rows
    /// (a new view, `how` [`ViewStart::Backfill`]) or restoring it from the checkpoint in the
    /// store ([`ViewStart::Restore`]); late rows go to `late_table` if given.
    pub async fn start_view(
        &self,
        view: Arc<Relation>,
        built: Built,
        late_table: Option<Arc<Relation>>,
        how: ViewStart,
    ) -> Result<()> {
        let id = view.def.id;
        let inputs: Vec<Arc<Relation>> = built
            .inputs
            .iter()
            .map(|input| {
                self.catalog.by_id(*input).ok_or_else(|| WeirError::internal(format!("input relation {input} is gone")))
            })
            .collect::<Result<_>>()?;
        let catalog = Arc::clone(&self.catalog);
        // Lock each distinct input once, in id order, so two CREATEs cannot deadlock.
        let mut distinct: Vec<&Arc<Relation>> = inputs.iter().collect();
        distinct.sort_by_key(|r| r.def.id);
        distinct.dedup_by_key(|r| r.def.id);
        // An input view still backfilling holds its write lock until it is whole: wait for
        // that here, not under the injection lock, which would stop every barrier meanwhile.
        catalog.wait_until_whole(&distinct).await?;
        let (snapshot, committed) = self
            .coordinator
            .start_job(id, async {
                let mut guards = Vec::new();
                for r in &distinct {
                    guards.push(Arc::clone(&r.write_lock).lock_owned().await);
                }
                // An input may have gone while this waited for it: a view whose own CREATE
                // failed or was cancelled during its backfill.
                catalog.check_live(&distinct)?;
                // The new view's own lock (its id is above its inputs'), before anything can
                // read it: a view made over it waits until the backfill is whole.
                let own = match how {
                    ViewStart::Backfill => Some(Arc::clone(&view.write_lock).lock_owned().await),
                    ViewStart::Restore => None,
                };
                let mut receivers = Vec::new();
                let mut snapshots = Vec::new();
                let mut ended = Vec::new();
                for input in &inputs {
                    receivers.push(catalog.changes.subscribe(input.def.id, id).await);
                    if how == ViewStart::Backfill {
                        // Read after the locks are released, from the snapshot taken here.
                        snapshots.push(input.stream_snapshot(catalog.store()).await);
                        ended.push(input.finished());
                    }
                }
                drop(guards);
                Ok((receivers, snapshots, ended, own))
            })
            .await;
        let (receivers, snapshots, ended, own) = match snapshot {
            Ok(started) => started,
            Err(e) => {
                self.stop_view(id).await;
                return Err(e);
            }
        };
        let watermarks = built
            .watermarks
            .into_iter()
            .zip(&inputs)
            .map(|(expr, input)| {
                let at_barriers = input.def.kind == crate::catalog::RelationKind::MaterializedView;
                expr.map(|e| InputWatermark::new(e, &input.def.name, at_barriers))
            })
            .collect();
        let mut job = ViewJob {
            watermarks,
            watermark: None,
            idle_timeout: self.watermark_idle_timeout,
            late_table,
            unseen: Vec::new(),
            stopped: None,
            materialize: Materialize::new(Arc::clone(&view), Arc::clone(self.catalog.store())),
            relation: view,
            graph: built.graph,
            inputs: receivers,
            store: Arc::clone(self.catalog.store()),
            changes: Arc::clone(&self.catalog.changes),
            committed: Arc::new(committed),
            state_writes: Default::default(),
        };
        // This graph is the view's from now on: EXPLAIN ANALYZE shows its operators.
        job.graph.publish_operators();
        let started = match own {
            Some(own) => job.backfill(snapshots, ended, self.coordinator.clock.current(), own).await,
            None => job.restore(),
        };
        if let Err(e) = started {
            // The job's input queues go first: a publisher blocked on a full one holds the
            // subscriber list that stopping the view needs.
            drop(job);
            self.stop_view(id).await;
            return Err(e);
        }
        let name = job.relation.def.name.clone();
        let status = Arc::clone(self.catalog.status());
        let span = tracing::info_span!("view", view = %name);
        let handle = crate::runtime::spawn(tracing::Instrument::instrument(
            async move {
                // A bug that panics inside a view stops that view, visibly, and nothing else.
                if let Err(panic) = std::panic::AssertUnwindSafe(job.run()).catch_unwind().await {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                    let message =
                        format!("view stopped after an internal error: {}", what.unwrap_or_else(|| "panic".into()));
                    tracing::error!(view = %name, "{message}");
                    status.record_view_error(&name, &message, 1);
                    crate::metrics::VIEW_ERRORS_TOTAL.with_label_values(&[&name]).inc();
                }
            },
            span,
        ));
        self.jobs.lock().insert(id, handle);
        Ok(())
    }

    /// Starts feeding source `relation` from its connector, from its stored offset.
    pub fn start_source(&self, relation: Arc<Relation>) -> Result<()> {
        let options = relation.def.connector.clone().ok_or_else(|| WeirError::internal("not a source"))?;
        let reader =
            crate::connectors::registry::reader(&options, Some(relation.given_schema()), &relation.key_names())?;
        let id = relation.def.id;
        let handle = crate::connectors::source::start(Arc::clone(&self.catalog), relation, reader)?;
        if let Some(previous) = self.sources.lock().insert(id, handle) {
            previous.abort();
        }
        Ok(())
    }

    /// Stops feeding a source.
    pub fn stop_source(&self, id: TableId) {
        if let Some(handle) = self.sources.lock().remove(&id) {
            handle.abort();
        }
        crate::connectors::source::forget(self.catalog.status(), id);
    }

    /// Starts sink `sink`: its job follows its view (a new sink: the view's rows first), and
    /// its deliverer writes each checkpoint's changes to the connector (`connectors::sink`).
    pub async fn start_sink(&self, sink: Arc<Relation>, how: ViewStart) -> Result<()> {
        let id = sink.def.id;
        let view = sink
            .def
            .depends_on
            .first()
            .and_then(|v| self.catalog.by_id(*v))
            .ok_or_else(|| WeirError::internal(format!("the view of sink \"{}\" is gone", sink.def.name)))?;
        let options = sink.def.connector.clone().ok_or_else(|| WeirError::internal("a sink without a connector"))?;
        let append_only = view.def.layout == crate::state::table::Layout::Segments;
        let schema = Arc::new(view.def.schema.clone());
        let shards = crate::connectors::sink::shards_of(&sink) as u16;
        let mut writers = (0..shards)
            .map(|shard| {
                let spec = crate::connectors::sink::WriterSpec {
                    sink_id: id,
                    token: sink.def.sink_token.clone(),
                    shard,
                    schema: Arc::clone(&schema),
                    append_only,
                };
                crate::connectors::registry::sink_writer(&options, &spec)
            })
            .collect::<Result<Vec<_>>>()?;
        if how == ViewStart::Backfill {
            tokio::task::block_in_place(|| writers[0].check())?;
        }
        let catalog = Arc::clone(&self.catalog);
        let restored = self.coordinator.current_epoch();
        // A view still backfilling: wait for it outside the injection lock.
        catalog.wait_until_whole(&[&view]).await?;
        let (started, committed) = self
            .coordinator
            .start_job(id, async {
                let _guard = Arc::clone(&view.write_lock).lock_owned().await;
                catalog.check_live(&[&view])?;
                let input = catalog.changes.subscribe(view.def.id, id).await;
                let rows = match how {
                    // Read after the locks are released, from the snapshot taken here.
                    ViewStart::Backfill => Some(view.stream_snapshot(catalog.store()).await),
                    ViewStart::Restore => None,
                };
                Ok((input, rows))
            })
            .await;
        let (input, rows) = match started {
            Ok(started) => started,
            Err(e) => {
                self.stop_view(id).await;
                return Err(e);
            }
        };
        // The first group: the epoch after the one the job started at (a new sink's starts
        // with the view's rows).
        let group = *committed.borrow() + 1;
        let store = Arc::clone(self.catalog.store());
        let job = crate::connectors::sink::SinkJob::new(
            Arc::clone(&sink),
            input,
            Arc::clone(&store),
            committed,
            group,
            Arc::clone(self.catalog.status()),
        );
        let mut job = match job {
            Ok(job) => job,
            Err(e) => {
                self.stop_view(id).await;
                return Err(e);
            }
        };
        if let Some(rows) = rows {
            let locked = Arc::clone(&sink.write_lock).lock_owned().await;
            if let Err(e) = job.load_snapshot(rows, locked).await {
                // Its input queue first: a publisher blocked on a full one holds the subscriber
                // list that stopping the job needs.
                drop(job);
                self.stop_view(id).await;
                return Err(e);
            }
        }
        let closed = job.closed_groups();
        let span = tracing::info_span!("sink", sink = %sink.def.name);
        self.jobs.lock().insert(id, crate::runtime::spawn(tracing::Instrument::instrument(job.run(), span.clone())));
        let deliverers = writers
            .into_iter()
            .zip(0..)
            .map(|(writer, shard)| {
                let deliver = crate::connectors::sink::deliver(
                    Arc::clone(&sink),
                    shard,
                    Arc::clone(&store),
                    writer,
                    closed.clone(),
                    self.coordinator.checkpointed(),
                    restored,
                    Arc::clone(self.catalog.status()),
                );
                crate::runtime::spawn(tracing::Instrument::instrument(deliver, span.clone()))
            })
            .collect();
        self.deliverers.lock().insert(id, deliverers);
        Ok(())
    }

    /// Stops a sink's job and its deliverer (its outbox is the catalog's to delete).
    pub async fn stop_sink(&self, id: TableId) {
        for deliverer in self.deliverers.lock().remove(&id).into_iter().flatten() {
            deliverer.abort();
        }
        self.stop_view(id).await;
        crate::connectors::sink::forget(self.catalog.status(), id);
    }

    /// Forgets a view's or sink's job whose start was abandoned midway (its CREATE cancelled,
    /// timed out or its client gone during a backfill), from code that cannot wait: checkpoints
    /// stop waiting for it at once, its tasks are aborted and its input queues let go on the
    /// dataflow's runtime. Nothing happens for an id without a job.
    pub fn abandon_job(&self, id: TableId) {
        for deliverer in self.deliverers.lock().remove(&id).into_iter().flatten() {
            deliverer.abort();
        }
        if let Some(job) = self.jobs.lock().remove(&id) {
            job.abort();
        }
        self.coordinator.stop_job(id);
        crate::connectors::sink::forget(self.catalog.status(), id);
        let catalog = Arc::clone(&self.catalog);
        crate::runtime::spawn(async move { catalog.changes.unsubscribe_job(id).await });
    }

    /// Stops a view's job and its subscriptions (its rows are the catalog's to delete).
    pub async fn stop_view(&self, id: TableId) {
        self.coordinator.stop_job(id);
        self.catalog.changes.unsubscribe_job(id).await;
        let handle = self.jobs.lock().remove(&id);
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }
}
