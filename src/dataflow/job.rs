//! [`ViewJob`]: the task that keeps one materialized view up to date.
//!
//! It reads one channel per input relation. Changes go through the operator graph into the
//! view's [`Materialize`]. Barriers are aligned: once an input has delivered barrier `e`, the
//! job reads no more from it until every input has; then the epoch is complete, and the job
//! flushes the operators, commits the view's rows for `e` in one write batch, publishes the
//! epoch's net changes and the barrier to views built on this one (under the view's write
//! lock, so their snapshots are exact), and reports `e` committed to the coordinator.
//!
//! An epoch's commit is two writes. The view's rows (with its indexes and late rows) are
//! written before its changes are published, so a reader sees them at once. The operators'
//! state (and, at a checkpoint, the runtime records) is written off the job's thread while the
//! job goes on with the next epoch's changes: the operators keep reading what they flushed
//! for two more flushes (`KeyedState::flush`), so one epoch's state may still be on its way
//! while the next is committed. The job's writes on their way (`state::in_flight::InFlight`)
//! are its only source of the `Flush` the operators flush with: it waits for the write before
//! last first, and says when every write is in already, so they forget it sooner.
//! State writes go in in epoch order, and the epoch counts committed (`committed`, which
//! checkpoints wait for) once both of its writes are in. A barrier's time on the job's thread
//! is then the operators' work, not the store's (ADR 19).
//!
//! Checkpoints (ADR 11): at a checkpoint barrier every operator flushes all the state it holds
//! in memory, and the job stores, in the view's runtime state table, each operator's index
//! record and the watermarks of its inputs and of the view, in the epoch's state batch. A
//! view restored from a checkpoint ([`ViewJob::restore`]) reads them back
//! before its first change and continues as if it had never stopped. View writes skip the
//! write-ahead log: a crash restores them from the checkpoint. A commit's batch carries its
//! epoch, so the store can hold it in memory while an earlier checkpoint's snapshot is taken
//! (ADR 18); barriers never wait for a snapshot.
//!
//! A failing operator (a bug, not a row's expression error, which becomes NULL) is logged and
//! counted, and the job carries on; the view is not silently stuck. A commit that fails leaves
//! the operators ahead of what is stored: if the store refused the write, the server stops
//! and restarts from the checkpoint ([`ViewJob::fail_stop`]); if the view's own work failed,
//! that view stops, for good, passing barriers on ([`ViewJob::stop_diverged`]).
//!
//! Event time: for each input with a `WATERMARK`, the job keeps the largest watermark
//! expression value of the rows it has read. The view's watermark is the least of those over
//! its inputs, leaving out inputs idle (no rows) for longer than the idle timeout, so a quiet
//! input does not hold every window open; an input that has never had a row holds it until it
//! is idle. An input that ends (a bounded source that finished, [`Message::End`]) has a
//! watermark past every row from then on. The watermark is pushed into the graph after the
//! data that moved it, and only forward. Rows that came too late for their windows are written, in the epoch's write batch,
//! to the view's `LATE ROWS TO` table (with the view's name and their arrival time) and
//! published to that table's subscribers like an INSERT.

use std::sync::Arc;

use futures::future::select_all;
use futures::FutureExt;
use tokio::sync::watch;

use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::physical_expr::PhysicalExpr;

use super::graph::Graph;
use crate::catalog::changes::{ChangeHub, ChangeReceiver};
use crate::catalog::Relation;
use crate::error::{Result, SqlState, WeirError};
use crate::metrics;
use crate::operators::eval::evaluate;
use crate::operators::materialize::Materialize;
use crate::state::in_flight::{InFlight, Landed, NotLanded};
use crate::state::keyed::Flush;
use crate::state::keys::{operator_state_table, table_prefix, RUNTIME_STATE_TABLE};
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::store::{stop_after_refused_write, ScanControl, StateStore, WriteBatch};
use crate::status::ViewStatus;
use crate::types::window::{instant_column, now_nanos, to_nanos, PAST_EVERY_ROW};
use crate::types::{Barrier, BarrierKind, ChangeBatch, Epoch, Message};

/// Input rows a backfill reads between two commits of what it produced, bounding the memory
/// a view's creation takes over a large relation.
pub const BACKFILL_COMMIT_ROWS: usize = 1 << 20;

/// One input's watermark: the largest value of its watermark expression seen so far.
pub struct InputWatermark {
    pub expr: Arc<dyn PhysicalExpr>,
    /// The input relation's name (metrics).
    pub source: String,
    pub max: Option<i64>,
    pub last_data: Instant,
    /// The input is a view whose watermark is derived from its rows (windows emitted on close):
    /// its rows of one epoch may come in any order, so what they show counts from the input's
    /// barrier on. `seen` holds it until then.
    pub at_barriers: bool,
    pub seen: Option<i64>,
}

impl InputWatermark {
    pub fn new(expr: Arc<dyn PhysicalExpr>, source: &str, at_barriers: bool) -> InputWatermark {
        InputWatermark {
            expr,
            source: source.to_string(),
            max: None,
            last_data: Instant::now(),
            at_barriers,
            seen: None,
        }
    }

    /// Takes `m`, the largest value of the expression over a batch.
    fn observe(&mut self, m: i64) -> bool {
        if self.at_barriers {
            self.seen = Some(self.seen.map_or(m, |s| s.max(m)));
            return false;
        }
        let advanced = self.max.is_none_or(|current| m > current);
        if advanced {
            self.max = Some(m);
        }
        advanced
    }

    /// The input's barrier: what its rows showed counts now.
    fn at_barrier(&mut self) -> bool {
        match self.seen.take() {
            Some(seen) if self.max.is_none_or(|current| seen > current) => {
                self.max = Some(seen);
                true
            }
            _ => false,
        }
    }
}

pub struct ViewJob {
    pub relation: Arc<Relation>,
    pub graph: Graph,
    pub inputs: Vec<ChangeReceiver>,
    pub materialize: Materialize,
    pub store: Arc<dyn StateStore>,
    pub changes: Arc<ChangeHub>,
    /// The last epoch whose rows and operator state are in the store.
    pub committed: Arc<watch::Sender<Epoch>>,
    /// The operator state writes in flight, off the job's thread, oldest first: at most two
    /// ([`ViewJob::write_state`]); the maker of each barrier's `Flush`.
    pub state_writes: InFlight,
    /// Per input, its watermark if it declares one.
    pub watermarks: Vec<Option<InputWatermark>>,
    /// The view's watermark (nanoseconds), as last pushed into the graph.
    pub watermark: Option<i64>,
    pub idle_timeout: Duration,
    /// The `LATE ROWS TO` table.
    pub late_table: Option<Arc<Relation>>,
    /// When each change applied since the last commit was published by its input.
    pub unseen: Vec<Instant>,
    /// Why the view stopped, if it did ([`ViewJob::stop_diverged`]): it then takes no more
    /// changes and passes barriers on, so views and sinks over it and checkpoints go on.
    pub stopped: Option<String>,
}

impl ViewJob {
    /// Takes the rows of `batch`, from input `input`, into that input's watermark.
    fn observe(&mut self, input: usize, batch: &ChangeBatch) {
        let view = self.graph.view();
        let Some(w) = self.watermarks.get_mut(input).and_then(|w| w.as_mut()) else { return };
        w.last_data = Instant::now();
        let max = evaluate(&w.expr, &batch.data, view)
            .and_then(|values| to_nanos(&values))
            .map(|nanos| datafusion::arrow::compute::max(&nanos));
        match max {
            Ok(Some(m)) => {
                if w.observe(m) {
                    metrics::SOURCE_WATERMARK_SECONDS.with_label_values(&[&**view, &w.source]).set(m as f64 / 1e9);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(view = %view, "watermark expression failed: {e}"),
        }
    }

    /// Input `input` has no more rows: its watermark passes every row.
    fn input_ended(&mut self, input: usize) {
        if let Some(w) = self.watermarks.get_mut(input).and_then(|w| w.as_mut()) {
            w.max = Some(PAST_EVERY_ROW);
        }
    }

    /// Recomputes the view's watermark from its inputs' and pushes it into the graph if it
    /// advanced.
    fn advance_watermark(&mut self) {
        let now = Instant::now();
        let declared: Vec<&InputWatermark> = self.watermarks.iter().flatten().collect();
        if declared.is_empty() {
            return;
        }
        let active: Vec<&InputWatermark> =
            declared.iter().copied().filter(|w| now.duration_since(w.last_data) < self.idle_timeout).collect();
        // Every input idle: the least of them (no progress without new rows).
        let considered = if active.is_empty() { &declared } else { &active };
        let next = if considered.iter().any(|w| w.max.is_none()) {
            None
        } else {
            considered.iter().filter_map(|w| w.max).min()
        };
        if let Some(next) = next {
            if self.watermark.is_none_or(|current| next > current) {
                self.watermark = Some(next);
                self.graph.watermark(next);
                if next != PAST_EVERY_ROW {
                    metrics::VIEW_WATERMARK_SECONDS
                        .with_label_values(&[&self.relation.def.name])
                        .set(next as f64 / 1e9);
                }
            }
        }
    }

    /// The late rows of this epoch as rows of the `LATE ROWS TO` table: their columns and
    /// window, the view's name and the arrival time.
    fn late_rows(&mut self) -> Result<Option<RecordBatch>> {
        let late = self.graph.take_late_rows();
        let Some(table) = &self.late_table else { return Ok(None) };
        if late.is_empty() {
            return Ok(None);
        }
        let schema = late[0].schema();
        let all = datafusion::arrow::compute::concat_batches(&schema, &late)?;
        let n = all.num_columns() - 2;
        let rows = all.num_rows();
        let target = Arc::clone(&table.schema);
        let mut columns: Vec<ArrayRef> = all.columns()[..n].to_vec();
        columns.push(Arc::new(StringArray::from(vec![self.relation.def.name.as_str(); rows])));
        columns.extend_from_slice(&all.columns()[n..]);
        columns.push(instant_column(now_nanos(), target.field(columns.len()).data_type(), rows)?);
        let columns = columns
            .iter()
            .zip(target.fields())
            .map(|(c, f)| Ok(datafusion::arrow::compute::cast(c, f.data_type())?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(RecordBatch::try_new(target, columns)?))
    }

    /// Runs the view over its inputs' rows as of its start (`snapshots[i]`: input `i`'s, read
    /// batch by batch from one snapshot of the store; `ended[i]`: the input has no more) and
    /// commits the result, before the job starts following changes. `now` is the time of the
    /// epoch the view starts at; `whole` is the view's write lock. Memory is a few input
    /// batches and what the operators hold:
    /// every [`BACKFILL_COMMIT_ROWS`] input rows the view commits what it has so far, as an
    /// epoch does.
    pub async fn backfill(
        &mut self,
        snapshots: Vec<tokio::sync::mpsc::Receiver<Result<Option<RecordBatch>>>>,
        ended: Vec<bool>,
        now: i64,
        whole: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<()> {
        let whole = Arc::new(whole);
        self.graph.epoch_time(now);
        // `whole`: the view's write lock, taken with its inputs' snapshot and held for the
        // whole backfill, so a view or an index made over this one waits for all of its rows,
        // not the part committed so far.
        let mut uncommitted = 0;
        for (input, mut rows) in snapshots.into_iter().enumerate() {
            loop {
                let batch = match rows.recv().await {
                    Some(Ok(Some(batch))) => batch,
                    Some(Ok(None)) => break,
                    Some(Err(e)) => return Err(e),
                    // The reader went away without an end or an error (it panicked).
                    None => return Err(WeirError::internal("the backfill's reader of an input stopped early")),
                };
                if batch.num_rows() == 0 {
                    continue;
                }
                uncommitted += batch.num_rows();
                let batch = ChangeBatch::inserts(batch);
                self.observe(input, &batch);
                let out = self.graph.push(input, batch)?;
                out.into_iter().for_each(|b| self.materialize.apply(b));
                if uncommitted >= BACKFILL_COMMIT_ROWS {
                    self.commit_backfill(&whole).await?;
                    uncommitted = 0;
                }
            }
        }
        // Rows the query gives itself (`VALUES`), once.
        let out = self.graph.push_constants()?;
        out.into_iter().for_each(|b| self.materialize.apply(b));
        // The watermark only after every existing row: they all count as on time (a view input's
        // rows are all of epochs it committed).
        for w in self.watermarks.iter_mut().flatten() {
            w.at_barrier();
        }
        for (input, _) in ended.iter().enumerate().filter(|(_, ended)| **ended) {
            self.input_ended(input);
        }
        self.advance_watermark();
        self.commit_backfill(&whole).await?;
        // Before `whole` is released: what waits for it may read the view now.
        self.relation.mark_whole();
        Ok(())
    }

    /// Commits what the backfill has produced so far (the view is not yet visible to anything
    /// following its changes; its indexes are kept with its rows). `locked`: the view's write
    /// lock, held by the backfill and by the write until it is done, so that what undoes a
    /// CREATE cancelled meanwhile (`handler::unfinished`) deletes the view's rows after it.
    async fn commit_backfill(&mut self, locked: &Arc<tokio::sync::OwnedMutexGuard<()>>) -> Result<()> {
        let mut wb = WriteBatch { skip_wal: true, ..Default::default() };
        // The backfill's earlier commits were each awaited.
        let flush = self.next_flush(false).await?;
        let out = self.graph.barrier(&mut wb, flush)?;
        out.into_iter().for_each(|b| self.materialize.apply(b));
        let (view_wb, changes) = self.materialize.barrier()?;
        wb.ops.extend(view_wb.ops);
        // An index may have been made on the view since it was recorded.
        if let Some(changes) = &changes {
            crate::catalog::index::maintain(&self.relation, self.store.as_ref(), changes, &mut wb)?;
        }
        write_off_thread(&self.store, wb, Arc::clone(locked)).await
    }

    /// The key prefix of the view's runtime records.
    fn runtime_prefix(&self) -> Vec<u8> {
        table_prefix(operator_state_table(self.relation.def.id, RUNTIME_STATE_TABLE)).to_vec()
    }

    /// Adds the view's runtime records to checkpoint `wb`: every operator's checkpoint record and
    /// the watermarks, replacing the previous checkpoint's.
    fn save_runtime(&mut self, wb: &mut WriteBatch) -> Result<()> {
        let prefix = self.runtime_prefix();
        if let Some(end) = crate::state::keys::prefix_end(&prefix) {
            wb.delete_range(prefix.clone(), end);
        }
        for (node, shard, record) in self.graph.save_records()? {
            let key = [prefix.as_slice(), b"i", &node.to_be_bytes(), &shard.to_be_bytes()].concat();
            wb.put(key, record);
        }
        let mut watermarks = RecordWriter::default();
        watermarks.opt_i64(self.watermark).u64(self.watermarks.len() as u64);
        for w in &self.watermarks {
            watermarks.opt_i64(w.as_ref().and_then(|w| w.max));
        }
        wb.put([prefix.as_slice(), b"w"].concat(), watermarks.finish());
        Ok(())
    }

    /// Restores the view from the checkpoint its state tables hold (the store was restored
    /// from it): the operators' checkpoint records and the watermarks. No input is read again.
    pub fn restore(&mut self) -> Result<()> {
        let prefix = self.runtime_prefix();
        let mut records = Vec::new();
        self.store.scan_prefix(&prefix, &mut |k, v| {
            records.push((k[prefix.len()..].to_vec(), v.to_vec()));
            Ok(ScanControl::Continue)
        })?;
        let what = format!("view \"{}\"", self.relation.def.name);
        for (key, value) in records {
            match key.split_first() {
                Some((b'i', at)) if at.len() == 4 => {
                    let node = u16::from_be_bytes([at[0], at[1]]);
                    let shard = u16::from_be_bytes([at[2], at[3]]);
                    self.graph.restore_record(node, shard, &value)?;
                }
                // The view had stopped: it stays stopped after a restart.
                Some((b'x', [])) => {
                    let why = String::from_utf8_lossy(&value).into_owned();
                    self.graph.view().error(&why, 1);
                    tracing::error!(view = %self.relation.def.name, "the view stays stopped: {why}");
                    self.stopped = Some(why);
                }
                Some((b'w', [])) => {
                    let mut r = RecordReader::new(&value, &what)?;
                    let view = r.opt_i64()?;
                    let inputs = r.u64()? as usize;
                    let maxima = (0..inputs).map(|_| r.opt_i64()).collect::<Result<Vec<_>>>()?;
                    r.finish()?;
                    if inputs != self.watermarks.len() {
                        return Err(WeirError::new(
                            SqlState::DATA_CORRUPTED,
                            format!(
                                "{what}: the checkpoint has watermarks of {inputs} inputs, the view reads {}",
                                self.watermarks.len()
                            ),
                        ));
                    }
                    for (w, max) in self.watermarks.iter_mut().zip(maxima) {
                        if let Some(w) = w {
                            w.max = max;
                        }
                    }
                    if let Some(view) = view {
                        self.watermark = Some(view);
                        self.graph.watermark(view);
                    }
                }
                _ => {
                    return Err(WeirError::new(
                        SqlState::DATA_CORRUPTED,
                        format!("{what}: an unknown runtime record in the checkpoint"),
                    ))
                }
            }
        }
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
                Some((Message::Data(_), _)) if self.stopped.is_some() => {}
                Some((Message::Data(batch), published)) => {
                    self.unseen.push(published);
                    self.observe(input, &batch);
                    match self.graph.push(input, batch) {
                        Ok(out) => out.into_iter().for_each(|b| self.materialize.apply(b)),
                        Err(e) => self.report(&e),
                    }
                    self.advance_watermark();
                }
                Some((Message::End, _)) => {
                    self.input_ended(input);
                    self.advance_watermark();
                }
                Some((Message::Barrier(barrier), _)) => {
                    let epoch = barrier.epoch;
                    if let Some(w) = self.watermarks.get_mut(input).and_then(|w| w.as_mut()) {
                        if w.at_barrier() {
                            let m = w.max.unwrap_or_default() as f64 / 1e9;
                            metrics::SOURCE_WATERMARK_SECONDS
                                .with_label_values(&[&**self.graph.view(), &w.source])
                                .set(m);
                        }
                    }
                    // A barrier from before this view started (a view input catching up) only
                    // separates changes the view takes into its first epoch.
                    if epoch <= *self.committed.borrow() {
                        continue;
                    }
                    waiting[input] = Some(epoch);
                    if waiting.iter().all(|w| w.is_some()) {
                        let epoch = waiting.iter().flatten().copied().min().unwrap_or(epoch);
                        let barrier = Barrier { epoch, ..barrier };
                        if self.stopped.is_some() {
                            self.pass_barrier(barrier).await;
                        } else {
                            match self.commit(barrier).await {
                                Ok(()) => {}
                                // The runtime is going away; the view restores at the next start.
                                Err(e) if e.state == SqlState::ADMIN_SHUTDOWN => break,
                                // The epoch went through the operators but not into the store:
                                // this view's state and rows no longer agree. It stops (a
                                // restart would meet the same error again: it is the view's,
                                // not the store's), and passes barriers on from now on.
                                Err(e) => {
                                    if self.stop_diverged(epoch, &e).await.is_err() {
                                        break;
                                    }
                                    self.pass_barrier(barrier).await;
                                }
                            }
                        }
                        waiting.iter_mut().for_each(|w| *w = None);
                    }
                }
            }
        }
        // What is dropped with the view is deleted after its last write, not before.
        let _ = self.land_state_writes(0).await;
        tracing::info!(view = %name, "view stopped");
    }

    async fn commit(&mut self, barrier: Barrier) -> Result<()> {
        let epoch = barrier.epoch;
        let checkpoint = barrier.kind == BarrierKind::Checkpoint;
        // The operators flush again below: what they flushed before last must be in the store
        // first (what they flushed last may still be on its way).
        let flush = self.next_flush(checkpoint).await?;
        // Held commits past their bound: wait here, holding no lock, for the snapshot.
        while !self.store.has_room(epoch) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Inputs may have gone idle since the last rows.
        self.advance_watermark();
        self.graph.epoch_time(barrier.now);
        // Tagged with its epoch: while a checkpoint's snapshot is awaited, the store holds the
        // commits of later epochs in memory (ADR 18).
        let mut state = WriteBatch { skip_wal: true, epoch: Some(epoch), ..Default::default() };
        let out = self.graph.barrier(&mut state, flush)?;
        out.into_iter().for_each(|b| self.materialize.apply(b));
        if checkpoint {
            self.save_runtime(&mut state)?;
        }
        let (view_wb, changes) = self.materialize.barrier()?;
        let mut wb = WriteBatch { skip_wal: true, epoch: Some(epoch), ops: view_wb.ops };
        let late = self.late_rows()?;
        let late_table = self.late_table.clone().filter(|_| late.is_some());
        let _late_guard = match &late_table {
            Some(table) => Some(table.write_lock.lock().await),
            None => None,
        };
        if let (Some(table), Some(rows)) = (&late_table, &late) {
            let stored = crate::catalog::rows::to_stored(table, rows)?;
            table.table.put_batch(&stored, &mut wb)?;
            table.persist_row_id(&mut wb);
        }
        let guard = Arc::clone(&self.relation.write_lock).lock_owned().await;
        // The view's indexes change in the batch its rows do (the index list is read under
        // the lock an index build holds).
        if let Some(changes) = &changes {
            crate::catalog::index::maintain(&self.relation, self.store.as_ref(), changes, &mut wb)?;
        }
        if let (Some(table), Some(rows)) = (&late_table, &late) {
            crate::catalog::index::maintain(table, self.store.as_ref(), &ChangeBatch::inserts(rows.clone()), &mut wb)?;
        }
        if let Some(wait) = crate::fault::delay("view.slow_commit") {
            tokio::time::sleep(wait).await;
        }
        if crate::fault::fails("view.commit") {
            return Err(WeirError::internal("fault injection: the view's commit failed (view.commit)"));
        }
        let written = if crate::fault::fails("view.commit_write") {
            Err(WeirError::io("fault injection: the view's write failed (view.commit_write)"))
        } else if wb.is_empty() {
            Ok(())
        } else {
            write_off_thread(&self.store, wb, ()).await
        };
        match written {
            Ok(()) => {}
            Err(e) if e.state == SqlState::ADMIN_SHUTDOWN => return Err(e),
            Err(e) => self.fail_stop(epoch, &e),
        }
        if let (Some(table), Some(rows)) = (&late_table, late) {
            self.changes.publish(table.def.id, vec![Message::Data(ChangeBatch::inserts(rows))]).await;
        }
        let view = self.relation.def.name.as_str();
        let open_windows = self.graph.open_windows();
        self.graph.view().event_time(self.watermark, open_windows);
        if let Some(w) = self.watermark.filter(|w| *w != PAST_EVERY_ROW) {
            let lag = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX).saturating_sub(w);
            metrics::WATERMARK_LAG_SECONDS.with_label_values(&[view]).set(lag as f64 / 1e9);
        }
        metrics::OPEN_WINDOWS.with_label_values(&[view]).set(open_windows as i64);
        metrics::OPERATOR_MEMORY_BYTES.with_label_values(&[view]).set(self.graph.memory_bytes() as i64);
        let mut messages = Vec::with_capacity(2);
        if let Some(changes) = changes {
            messages.push(Message::Data(changes));
        }
        messages.push(Message::Barrier(barrier));
        self.changes.publish(self.relation.def.id, messages).await;
        // Taken before the write lock is let go: what deletes the view's state takes both, in
        // that order, so it cannot come in between.
        let state_lock = Arc::clone(&self.relation.state_writes).read_owned().await;
        drop(guard);
        self.write_state(epoch, state, state_lock);
        // Freshness: from an input's change being published to the view's commit of it.
        let freshness = metrics::VIEW_FRESHNESS_SECONDS.with_label_values(&[&self.relation.def.name]);
        for published in self.unseen.drain(..) {
            freshness.observe(published.elapsed().as_secs_f64());
        }
        let view = self.relation.def.name.as_str();
        let latency = barrier.injected_at.elapsed().as_secs_f64();
        metrics::BARRIER_LATENCY_SECONDS.with_label_values(&[view]).observe(latency);
        self.graph.view().barrier_latency(latency);
        metrics::VIEW_EPOCH.with_label_values(&[view]).set(epoch as i64);
        Ok(())
    }

    /// The store refused a view's write of an epoch (a full disk, an I/O error): the operators
    /// have handed it state they now count as stored, so the process stops
    /// ([`stop_after_refused_write`]).
    fn fail_stop(&self, epoch: Epoch, e: &WeirError) -> ! {
        refused_write(self.graph.view(), epoch, e)
    }

    /// Writes the operators' state of `epoch` (`state`) on a blocking thread while the job goes
    /// on, after the state writes still in flight; the epoch counts committed once it is in (at
    /// once if there is none and nothing is in flight). The write holds `locked`, the view's
    /// state-writes lock (shared), until it is done, so that what deletes the view's state
    /// (DROP, an unfinished CREATE undone) does so after it, even if the job is gone.
    fn write_state(&mut self, epoch: Epoch, state: WriteBatch, locked: tokio::sync::OwnedRwLockReadGuard<()>) {
        let fault = crate::fault::fails("view.state_write");
        if state.is_empty() && !fault && self.state_writes.is_empty() {
            self.committed.send_replace(epoch);
            return;
        }
        let previous = self.state_writes.last().cloned();
        let store = Arc::clone(&self.store);
        let committed = Arc::clone(&self.committed);
        let view = self.graph.view().clone();
        let write = async move {
            if let Some(previous) = previous {
                let landed = previous.await;
                if landed != Landed::In {
                    // Not in, so neither is this one (the job fails on the earlier one).
                    return landed;
                }
            }
            let written = if fault {
                Err(WeirError::io("fault injection: the view's state write failed (view.state_write)"))
            } else if state.is_empty() {
                Ok(())
            } else {
                write_off_thread(&store, state, locked).await
            };
            match written {
                Ok(()) => {
                    committed.send_if_modified(|c| std::mem::replace(c, epoch.max(*c)) < epoch);
                    Landed::In
                }
                // The runtime is going away: the view restores at the next start.
                Err(e) if e.state == SqlState::ADMIN_SHUTDOWN => Landed::Cancelled,
                Err(e) => refused_write(&view, epoch, &e),
            }
        };
        let task = tokio::spawn(write);
        let landed = async move {
            match task.await {
                Ok(landed) => landed,
                Err(e) if e.is_cancelled() => Landed::Cancelled,
                Err(e) => Landed::Failed(e.to_string()),
            }
        };
        self.state_writes.push(epoch, landed.boxed().shared());
    }

    /// Waits until at most `keep` operator state writes are in flight. A write the runtime
    /// cancelled before it ran (it is shutting down) is `57P01`; one that panicked is a write
    /// the store refused ([`ViewJob::fail_stop`]): its state is not in, and the view must not
    /// go on (nor stop alone, reporting later epochs committed without it).
    async fn land_state_writes(&mut self, keep: usize) -> Result<()> {
        let landed = self.state_writes.land(keep).await;
        landed.map_err(|not_in| self.not_landed(not_in))
    }

    /// The flush of the next barrier, from the writes on their way ([`InFlight::next_flush`]);
    /// a write that did not land ends it as [`ViewJob::land_state_writes`] says.
    async fn next_flush(&mut self, checkpoint: bool) -> Result<Flush> {
        let flush = self.state_writes.next_flush(checkpoint).await;
        flush.map_err(|not_in| self.not_landed(not_in))
    }

    /// A state write that did not land: cancelled, the runtime is going away (`57P01`); one
    /// that failed stops the process.
    fn not_landed(&self, not_in: NotLanded) -> WeirError {
        match not_in {
            NotLanded::Failed(epoch, e) => {
                self.fail_stop(epoch, &WeirError::internal(format!("the operator state write failed: {e}")))
            }
            NotLanded::Cancelled(_) => WeirError::new(SqlState::ADMIN_SHUTDOWN, "the server is shutting down"),
        }
    }

    /// A commit failed in the view's own work (an operator, its rows, its late rows), after the
    /// epoch went through its operators: the view stops where it is, rather than go on with
    /// state and rows that disagree. It takes no more changes and passes barriers on, so what
    /// reads it and checkpoints go on; its rows stay readable as of its last commit. The stop
    /// is recorded in the view's runtime records (with the write-ahead log), so a restart finds
    /// the view stopped ([`ViewJob::restore`]) instead of resuming it with a gap. The error is
    /// in `weir_catalog.view_errors` and the log; DROP and CREATE the view again. Err when even
    /// that record cannot be written: the job then ends.
    async fn stop_diverged(&mut self, epoch: Epoch, e: &WeirError) -> Result<()> {
        self.report(e);
        // The state writes in flight replace the runtime records: they go before the stop's.
        self.land_state_writes(0).await?;
        let why = format!("stopped at epoch {epoch}: {}", e.message);
        tracing::error!(
            view = %self.relation.def.name,
            epoch,
            "the view stopped: it could not commit epoch {epoch} and would go on with state and rows \
             that disagree; DROP and CREATE it again: {e}"
        );
        // With its epoch: a snapshot taken meanwhile holds the view as of an earlier epoch, so
        // it must not hold the stop either (the stop is then made again after a restart).
        let mut wb = WriteBatch { epoch: Some(epoch), ..Default::default() };
        wb.put([self.runtime_prefix().as_slice(), b"x"].concat(), why.clone().into_bytes());
        self.stopped = Some(why);
        match write_off_thread(&self.store, wb, ()).await {
            Ok(()) => Ok(()),
            Err(e) if e.state == SqlState::ADMIN_SHUTDOWN => Err(e),
            Err(e) => self.fail_stop(epoch, &e),
        }
    }

    /// A stopped view's barrier: passed on to what reads the view, with no changes, and
    /// reported committed.
    async fn pass_barrier(&mut self, barrier: Barrier) {
        self.changes.publish(self.relation.def.id, vec![Message::Barrier(barrier)]).await;
        self.committed.send_replace(barrier.epoch);
    }

    fn report(&self, e: &WeirError) {
        report(self.graph.view(), e)
    }
}

/// Counts and logs a failure of view `view`.
fn report(view: &ViewStatus, e: &WeirError) {
    metrics::VIEW_ERRORS_TOTAL.with_label_values(&[view]).inc();
    view.error(&e.message, 1);
    tracing::error!(view = %view, "view failed to apply changes: {e}");
}

/// The store refused view `view`'s write of `epoch` (see [`ViewJob::fail_stop`]).
fn refused_write(view: &ViewStatus, epoch: Epoch, e: &WeirError) -> ! {
    report(view, e);
    stop_after_refused_write(&format!("view \"{view}\"'s epoch {epoch}"), e)
}

/// Writes `wb` to the store on a blocking thread (waiting while the disk is full:
/// [`StateStore::write_waiting`]), keeping `keep` (a lock) until the write is done, even when
/// the caller stops waiting for it. A write the runtime cancelled before it ran
/// (it is shutting down) is `57P01`, so the view stops instead of reporting a failure.
async fn write_off_thread<K: Send + 'static>(store: &Arc<dyn StateStore>, wb: WriteBatch, keep: K) -> Result<()> {
    let store = Arc::clone(store);
    let write = move || {
        let written = store.write_waiting(wb);
        drop(keep);
        written
    };
    tokio::task::spawn_blocking(write).await?
}
