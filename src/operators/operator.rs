//! The contract between an operator and the runtime that drives it (`dataflow::job`).
//!
//! The runtime owns the loop: it feeds each input's changes to [`Operator::apply`], aligns
//! barriers, and at each barrier calls [`Operator::on_barrier`] on every operator, children
//! before parents, passing what each returns to its parent. Operators never see channels,
//! barriers or the store: they only turn changes into changes.
//!
//! Time comes with every call as a [`Clock`] (the view's watermark, the epoch's `now()`): the
//! runtime keeps the one copy, moves the watermark as the data before it is applied (mid-epoch
//! too) and sets `now()` before each barrier; an operator keeps no copy of either.
//!
//! Checkpoints (ADR 11): at a checkpoint barrier [`Operator::flush_state`] is told so and must
//! put every write it still holds in memory into the batch, and the runtime stores what
//! [`Operator::save_record`] returns next to the operator's state. After a restart the runtime
//! builds a fresh operator over the checkpoint's state tables and hands it that record
//! ([`Operator::restore_record`]) before any change: the operator then continues exactly as
//! the one that never stopped. No operator assumes its state starts empty.

use crate::error::Result;
use crate::state::keyed::Flush;
use crate::state::store::WriteBatch;
use crate::types::clock::Clock;
use crate::types::ChangeBatch;

pub trait Operator: Send {
    /// A one-line description for EXPLAIN and logs.
    fn describe(&self) -> String;

    /// Takes changes on input `input` (0 for single-input operators) and returns the changes
    /// of this operator's output they cause now; `clock` is the time they arrive at (a row for
    /// a window final by its watermark is late).
    fn apply(&mut self, input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>>;

    /// The epoch is complete at `clock` (its `now()` set): returns output changes held back
    /// until now (aggregates emit their groups' new values once per epoch, windows the
    /// watermark made final close).
    fn on_barrier(&mut self, _clock: &Clock) -> Result<Vec<ChangeBatch>> {
        Ok(vec![])
    }

    /// Adds the epoch's state changes to the epoch's write batch (after `on_barrier`). At a
    /// checkpoint ([`Flush::checkpoint`]) every write still held in memory goes in.
    fn flush_state(&mut self, _wb: &mut WriteBatch, _flush: Flush) {}

    /// What the operator keeps in memory besides its state tables and needs after a restart
    /// (windows by close time, the next row number, the watermark), encoded with
    /// [`crate::state::record`]; asked at checkpoint barriers, after `flush_state`. None
    /// when the state tables are everything.
    fn save_record(&self) -> Option<Vec<u8>> {
        None
    }

    /// Restores what [`Operator::save_record`] returned at the checkpoint, into a fresh
    /// operator whose state tables hold that checkpoint's state. Called once, before any change.
    fn restore_record(&mut self, _record: &[u8]) -> Result<()> {
        Ok(())
    }

    /// Rows that arrived after their window could no longer change, since the last call
    /// (input columns, then `window_start`, `window_end`); the runtime stores and counts them.
    fn take_late_rows(&mut self) -> Vec<datafusion::arrow::array::RecordBatch> {
        vec![]
    }

    /// Windows this operator holds state for (a metric).
    fn open_windows(&self) -> usize {
        0
    }

    /// Bytes of state this operator holds in memory outside its state tables' bounded caches
    /// (a join's rows kept in memory, ADR 22; a windowed aggregate's groups, ADR 24; a metric).
    fn memory_bytes(&self) -> usize {
        0
    }
}

/// Test support shared by the operators' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use super::Operator;
    use crate::state::keyed::Flush;
    use crate::state::memory::MemoryStore;
    use crate::state::store::{ScanControl, StateStore, WriteBatch};
    use crate::types::change_batch::from_pretty;
    use crate::types::clock::Clock;

    /// One epoch: applies `input` (`from_pretty` text) on input 0, runs the barrier, commits the
    /// operator's state to `store`; returns the output as `to_pretty` text.
    pub fn step(op: &mut dyn Operator, store: &Arc<dyn StateStore>, input: &str) -> String {
        step_at(op, store, &Clock::default(), input)
    }

    /// [`step`] with the runtime's clock at `clock`.
    pub fn step_at(op: &mut dyn Operator, store: &Arc<dyn StateStore>, clock: &Clock, input: &str) -> String {
        op.apply(0, from_pretty(input), clock).unwrap();
        let out: String = op.on_barrier(clock).unwrap().iter().map(|b| b.to_pretty()).collect();
        let mut wb = WriteBatch::default();
        op.flush_state(&mut wb, Flush::EPOCH_AFTER_WRITES);
        store.write(wb).unwrap();
        out
    }

    /// A checkpoint of `op`: its state flushed whole into `store` and its checkpoint record.
    pub fn checkpoint(op: &mut dyn Operator, store: &Arc<dyn StateStore>) -> Option<Vec<u8>> {
        let mut wb = WriteBatch::default();
        op.flush_state(&mut wb, Flush::CHECKPOINT_AFTER_WRITES);
        store.write(wb).unwrap();
        op.save_record()
    }

    /// Restores `record` (from [`checkpoint`]) into the fresh operator `op`.
    pub fn restore(op: &mut dyn Operator, record: Option<Vec<u8>>) {
        if let Some(record) = record {
            op.restore_record(&record).unwrap();
        }
    }

    // The check each stateful operator's tests make of checkpoints (ADR 11): an operator
    // checkpointed after any epoch, dropped, and restored into a fresh one over the checkpoint's
    // state continues exactly like one that never stopped ([`assert_restore_continues`]).

    /// What happens to an operator within an epoch, in order; the barrier follows.
    pub enum Event<'a> {
        /// Changes (`from_pretty` text) on an input.
        Changes(usize, &'a str),
        /// The view's watermark advanced (nanoseconds).
        Watermark(i64),
        /// The epoch's time (`now()`, nanoseconds).
        Time(i64),
    }

    /// What the runtime sees of one epoch of an operator.
    #[derive(Debug, PartialEq)]
    struct Seen {
        /// The output changes, sorted: operators that keep groups or keys in hash maps may emit
        /// an epoch's changes in another order after a restart.
        changes: Vec<String>,
        late_rows: usize,
        open_windows: usize,
    }

    /// Makes a fresh operator over a store.
    type MakeOperator<'a> = dyn Fn(&Arc<dyn StateStore>) -> Box<dyn Operator> + 'a;

    /// An operator and the store its state tables are in.
    struct Running {
        op: Box<dyn Operator>,
        store: Arc<dyn StateStore>,
        /// The runtime's clock, as last set.
        clock: Clock,
    }

    impl Running {
        fn new(make: &MakeOperator<'_>) -> Running {
            let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            Running { op: make(&store), store, clock: Clock::default() }
        }

        /// One epoch, then its barrier, whose state changes are committed as the runtime does.
        fn epoch(&mut self, events: &[Event]) -> Seen {
            let mut out = Vec::new();
            for event in events {
                match event {
                    Event::Changes(input, text) => {
                        out.extend(self.op.apply(*input, from_pretty(text), &self.clock).unwrap())
                    }
                    Event::Watermark(w) => self.clock.watermark = Some(*w),
                    Event::Time(now) => self.clock.now = Some(*now),
                }
            }
            out.extend(self.op.on_barrier(&self.clock).unwrap());
            let mut wb = WriteBatch::default();
            self.op.flush_state(&mut wb, Flush::EPOCH_AFTER_WRITES);
            self.store.write(wb).unwrap();
            let mut changes: Vec<String> =
                out.iter().flat_map(|b| b.to_pretty().lines().map(String::from).collect::<Vec<_>>()).collect();
            changes.sort();
            let late_rows = self.op.take_late_rows().iter().map(|b| b.num_rows()).sum();
            Seen { changes, late_rows, open_windows: self.op.open_windows() }
        }

        /// Drops the operator after a checkpoint and builds a fresh one over its state, as a
        /// restart does: the record restored; the runtime's clock has the view's watermark (kept
        /// in the view's checkpoint) and no time until the next barrier.
        fn restart(self, make: &MakeOperator<'_>) -> Running {
            let Running { mut op, store, clock } = self;
            let record = checkpoint(op.as_mut(), &store);
            drop(op);
            let mut op = make(&store);
            restore(op.as_mut(), record);
            Running { op, store, clock: Clock { now: None, ..clock } }
        }

        /// Everything the store holds after a checkpoint: the operator's whole state.
        fn checkpointed_state(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
            checkpoint(self.op.as_mut(), &self.store);
            let mut state = Vec::new();
            self.store
                .scan_prefix(&[], &mut |k, v| {
                    state.push((k.to_vec(), v.to_vec()));
                    Ok(ScanControl::Continue)
                })
                .unwrap();
            state
        }
    }

    /// Runs `epochs` through an operator made by `make` (over a store, as the dataflow builder
    /// does) that never stops, and, for every epoch boundary, through one restarted there from a
    /// checkpoint: each epoch after the restart sees the same changes, late rows and open
    /// windows, and the state the two checkpoint at the end is the same.
    pub fn assert_restore_continues(make: &MakeOperator<'_>, epochs: &[&[Event]]) {
        restore_continues(make, epochs, true)
    }

    /// [`assert_restore_continues`] for an operator whose stored state depends on when
    /// checkpoints were taken, not only on what it holds (rows kept in segments written at
    /// each checkpoint, `state::expiring_rows`): the epochs after each restart see the same
    /// changes, late rows and open windows; the stored state at the end is not compared.
    pub fn assert_restore_continues_in_outputs(make: &MakeOperator<'_>, epochs: &[&[Event]]) {
        restore_continues(make, epochs, false)
    }

    fn restore_continues(make: &MakeOperator<'_>, epochs: &[&[Event]], same_final_state: bool) {
        let mut never_stopped = Running::new(make);
        let seen: Vec<Seen> = epochs.iter().map(|events| never_stopped.epoch(events)).collect();
        let final_state = never_stopped.checkpointed_state();
        for restart_after in 1..epochs.len() {
            let mut run = Running::new(make);
            for events in &epochs[..restart_after] {
                run.epoch(events);
            }
            let mut restarted = run.restart(make);
            for (i, events) in epochs.iter().enumerate().skip(restart_after) {
                let epoch = i + 1;
                assert_eq!(restarted.epoch(events), seen[i], "epoch {epoch}, restarted after epoch {restart_after}");
            }
            assert!(
                !same_final_state || restarted.checkpointed_state() == final_state,
                "the state at the end differs, restarted after epoch {restart_after}"
            );
        }
    }
}
