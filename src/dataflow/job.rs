//! [`ViewJob`]: the task that keeps one materialized view up to date.
//!
//! It reads one channel per input relation. Changes go through the operator graph into the
//! view's [`Materialize`]. Barriers are aligned: once an input has delivered barrier `e`, the
//! job reads no more from it until every input has; then the epoch is complete, and the job
//! flushes the operators, commits the view's rows for `e` in one write batch, publishes the
//! epoch's net changes and the barrier to views built on this one (under the view's write
//! lock, so their snapshots are exact), and reports `e` committed to the coordinator.
//!
//! A failing operator (a bug, not a row's expression error, which becomes NULL) is logged and
//! counted, and the job carries on; the view is not silently stuck.

use std::sync::Arc;

use futures::future::select_all;
use futures::FutureExt;
use tokio::sync::{mpsc, watch};

use super::graph::Graph;
use crate::catalog::changes::ChangeHub;
use crate::catalog::Relation;
use crate::error::{Result, WeirError};
use crate::metrics;
use crate::operators::materialize::Materialize;
use crate::state::store::{StateStore, WriteBatch};
use crate::types::{Barrier, ChangeBatch, Epoch, Message};

pub struct ViewJob {
    pub relation: Arc<Relation>,
    pub graph: Graph,
    pub inputs: Vec<mpsc::Receiver<Message>>,
    pub materialize: Materialize,
    pub store: Arc<dyn StateStore>,
    pub changes: Arc<ChangeHub>,
    pub committed: watch::Sender<Epoch>,
}

impl ViewJob {
    /// Runs the view over its inputs' current rows (`snapshots[i]` for input `i`) and commits
    /// the result, before the job starts following changes.
    pub async fn backfill(&mut self, snapshots: Vec<Vec<datafusion::arrow::array::RecordBatch>>) -> Result<()> {
        for (input, batches) in snapshots.into_iter().enumerate() {
            for batch in batches {
                if batch.num_rows() > 0 {
                    let out = self.graph.push(input, ChangeBatch::inserts(batch))?;
                    out.into_iter().for_each(|b| self.materialize.apply(b));
                }
            }
        }
        let mut wb = WriteBatch::default();
        let out = self.graph.barrier(&mut wb)?;
        out.into_iter().for_each(|b| self.materialize.apply(b));
        let (view_wb, _) = self.materialize.barrier()?;
        wb.ops.extend(view_wb.ops);
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.write(wb))
            .await
            .map_err(|e| WeirError::internal(e.to_string()))??;
        Ok(())
    }

    pub async fn run(mut self) {
        let name = self.relation.def.name.clone();
        let n = self.inputs.len();
        let mut waiting: Vec<Option<Epoch>> = vec![None; n];
        loop {
            let (input, message) = {
                let receivers = self
                    .inputs
                    .iter_mut()
                    .enumerate()
                    .filter(|(i, _)| waiting[*i].is_none())
                    .map(|(i, rx)| async move { (i, rx.recv().await) }.boxed());
                select_all(receivers).await.0
            };
            match message {
                // An input is gone: the view is being dropped.
                None => break,
                Some(Message::Data(batch)) => match self.graph.push(input, batch) {
                    Ok(out) => out.into_iter().for_each(|b| self.materialize.apply(b)),
                    Err(e) => self.report(&e),
                },
                Some(Message::Barrier(barrier)) => {
                    let epoch = barrier.epoch;
                    // A barrier from before this view started (a view input catching up) only
                    // separates changes the view takes into its first epoch.
                    if epoch <= *self.committed.borrow() {
                        continue;
                    }
                    waiting[input] = Some(epoch);
                    if waiting.iter().all(|w| w.is_some()) {
                        let epoch = waiting.iter().flatten().copied().min().unwrap_or(epoch);
                        if let Err(e) = self.commit(Barrier { epoch, ..barrier }).await {
                            self.report(&e);
                        }
                        waiting.iter_mut().for_each(|w| *w = None);
                    }
                }
            }
        }
        tracing::info!(view = %name, "view stopped");
    }

    async fn commit(&mut self, barrier: Barrier) -> Result<()> {
        let epoch = barrier.epoch;
        let mut wb = WriteBatch::default();
        let out = self.graph.barrier(&mut wb)?;
        out.into_iter().for_each(|b| self.materialize.apply(b));
        let (view_wb, changes) = self.materialize.barrier()?;
        wb.ops.extend(view_wb.ops);
        let _guard = self.relation.write_lock.lock().await;
        if !wb.is_empty() {
            let store = Arc::clone(&self.store);
            tokio::task::spawn_blocking(move || store.write(wb))
                .await
                .map_err(|e| WeirError::internal(e.to_string()))??;
        }
        let mut messages = Vec::with_capacity(2);
        if let Some(changes) = changes {
            messages.push(Message::Data(changes));
        }
        messages.push(Message::Barrier(barrier));
        self.changes.publish(self.relation.def.id, messages).await;
        self.committed.send_replace(epoch);
        let view = self.relation.def.name.as_str();
        metrics::BARRIER_LATENCY_SECONDS
            .with_label_values(&[view])
            .observe(barrier.injected_at.elapsed().as_secs_f64());
        metrics::VIEW_EPOCH.with_label_values(&[view]).set(epoch as i64);
        Ok(())
    }

    fn report(&self, e: &WeirError) {
        metrics::VIEW_ERRORS_TOTAL.with_label_values(&[&self.relation.def.name]).inc();
        crate::system::record_view_error(&self.relation.def.name, &e.message, 1);
        tracing::error!(view = %self.relation.def.name, "view failed to apply changes: {e}");
    }
}
