//! The sink runtime: exactly-once delivery of a view's changes to an external system, on top of
//! checkpoints (ADR 12).
//!
//! A sink job follows its view like a view follows its inputs. Its changes go into the sink's
//! *outbox* in the store, in *groups*: the changes of one checkpoint interval form one group,
//! numbered by the first epoch after the checkpoint before it (a new sink's first group starts
//! with the view's rows). A group is written in *parts* of at most [`PART_ROWS`] rows (keys
//! `[sink id][0][group][part]`): whenever that many changes are waiting, and the rest at the
//! checkpoint barrier that ends the interval, so the job holds about a part in memory and the
//! deliverer one, whatever the view's size or the backlog. A part written before
//! the checkpoint is tagged with the epoch it belongs to, so a snapshot of an earlier cut being
//! taken meanwhile does not hold it (ADR 18). Once a checkpoint at or past a group is taken, the
//! deliverer hands the group's parts, in order, to the connector's [`SinkWriter`] inside one
//! transaction of the external system, which commits them with a marker saying "group `g`
//! delivered" (a Kafka transaction with a consumer-group offset; a Postgres transaction with a
//! marker row), then deletes the group. After a crash the store is back at the newest
//! checkpoint, outbox included; groups the marker says were delivered are deleted unsent, the
//! rest are sent. The changes after the checkpoint are computed again by the restored view and
//! reach a later group, numbered above every earlier one (epochs only grow). So every change
//! reaches the external system once.
//!
//! A connector that cannot be reached is retried with backoff (`weir_catalog.sinks` shows it
//! `retrying`); the outbox grows on disk meanwhile, never in memory, and the rest of the server
//! goes on. Called by `dataflow::manager` (start, restore, stop).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::catalog::changes::ChangeReceiver;
use crate::catalog::Relation;
use crate::error::Result;
use crate::state::index_codec::{IndexReader, IndexWriter};
use crate::state::keys::{segment_key, TableId};
use crate::state::store::{KeyRange, ScanControl, StateStore, WriteBatch};
use crate::types::{ChangeBatch, Epoch, Message};

/// A connector's writing side: one transaction of the external system per outbox group.
pub trait SinkWriter: Send {
    /// Checks the external system can be written now (CREATE SINK): it answers, the topic or
    /// table exists.
    fn check(&mut self) -> Result<()> {
        Ok(())
    }

    /// The last group whose changes the external system holds (its marker); None if none.
    fn delivered(&mut self) -> Result<Option<Epoch>>;

    /// Starts a group's transaction.
    fn begin(&mut self) -> Result<()>;

    /// Writes the group's next part, inside the transaction.
    fn write(&mut self, changes: &[ChangeBatch]) -> Result<()>;

    /// Writes the marker `group` and commits: the group's changes and the marker, both or
    /// neither.
    fn commit(&mut self, group: Epoch) -> Result<()>;

    /// Gives the transaction up after a failure of `begin`, `write` or `commit` (the next
    /// group starts afresh, on a new connection).
    fn abort(&mut self);
}

/// Changes an outbox part holds at most (a sink job writes a part once this many wait).
pub const PART_ROWS: usize = 65_536;

/// The columns (indices into `schema`) named by a sink's `primary_key = 'a, b'` option.
pub fn key_columns(names: &str, schema: &datafusion::arrow::datatypes::Schema) -> Result<Vec<usize>> {
    names
        .split(',')
        .map(|name| {
            let name = name.trim();
            schema.index_of(name).map_err(|_| {
                crate::error::WeirError::new(
                    crate::error::SqlState::UNDEFINED_COLUMN,
                    format!("primary_key column \"{name}\" is not in the view"),
                )
            })
        })
        .collect()
}

/// One key's change over a checkpoint: its row before the checkpoint's changes (None: the key
/// did not exist) and after them (None: it is gone).
#[derive(Debug, PartialEq)]
pub struct NetChange<K, R> {
    pub key: K,
    pub before: Option<R>,
    pub after: Option<R>,
}

/// A checkpoint's changes netted per key, for sinks that write by key: each key once, in the
/// order keys first changed. `changes` gives each changed row's key, the row, and whether the
/// row entered; a key whose first change removes a row had that row before.
pub fn net_by_key<K: std::hash::Hash + Eq + Clone, R>(
    changes: impl IntoIterator<Item = (K, R, bool)>,
) -> Vec<NetChange<K, R>> {
    // Each key's place in `netted`, which is in the order keys first changed.
    let mut place: crate::types::hash::HashMap<K, usize> = Default::default();
    let mut netted: Vec<NetChange<K, R>> = Vec::new();
    for (key, row, entered) in changes {
        match place.get(&key) {
            Some(&at) => netted[at].after = entered.then_some(row),
            None => {
                place.insert(key.clone(), netted.len());
                let (before, after) = if entered { (None, Some(row)) } else { (Some(row), None) };
                netted.push(NetChange { key, before, after });
            }
        }
    }
    netted
}

/// What a sink is doing, for `weir_catalog.sinks`.
#[derive(Debug, Clone, Default)]
pub struct SinkStatus {
    pub state: String,
    /// The last checkpoint delivered.
    pub delivered: Option<Epoch>,
    /// The last error, while retrying.
    pub error: Option<String>,
}

/// Every running sink's status, by sink id.
pub static STATUS: std::sync::LazyLock<Mutex<std::collections::BTreeMap<u32, (String, SinkStatus)>>> =
    std::sync::LazyLock::new(Default::default);

fn set_status(sink: &Relation, update: impl FnOnce(&mut SinkStatus)) {
    let mut all = STATUS.lock();
    let entry = all.entry(sink.def.id).or_insert_with(|| (sink.def.name.clone(), SinkStatus::default()));
    update(&mut entry.1);
}

/// Forgets a dropped sink's status.
pub fn forget(sink: u32) {
    STATUS.lock().remove(&sink);
}

/// The key of part `part` of outbox group `group`.
fn part_key(sink: TableId, group: Epoch, part: u32) -> Vec<u8> {
    let mut key = group_prefix(sink, group);
    key.extend_from_slice(&part.to_be_bytes());
    key
}

fn group_prefix(sink: TableId, group: Epoch) -> Vec<u8> {
    segment_key(sink, &group.to_be_bytes())
}

/// `changes` cut into parts of at most [`PART_ROWS`] rows, in order.
fn into_parts(changes: Vec<ChangeBatch>) -> Vec<Vec<ChangeBatch>> {
    let mut parts = vec![Vec::new()];
    let mut rows = 0;
    for batch in changes {
        let mut offset = 0;
        while offset < batch.num_rows() {
            if rows == PART_ROWS {
                parts.push(Vec::new());
                rows = 0;
            }
            let len = (batch.num_rows() - offset).min(PART_ROWS - rows);
            let piece = if offset == 0 && len == batch.num_rows() { batch.clone() } else { batch.slice(offset, len) };
            parts.last_mut().expect("a part").push(piece);
            rows += len;
            offset += len;
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// Writes `changes` as part `part` of `group`, tagged with `epoch` (the epoch they belong to).
fn put_part(
    store: &dyn StateStore,
    sink: TableId,
    group: Epoch,
    part: u32,
    epoch: Epoch,
    changes: &[ChangeBatch],
) -> Result<()> {
    let mut record = IndexWriter::default();
    record.u64(changes.len() as u64);
    for batch in changes {
        batch.encode(&mut record)?;
    }
    let mut wb = WriteBatch { skip_wal: true, epoch: Some(epoch), ..Default::default() };
    wb.put(part_key(sink, group, part), record.finish());
    store.write(wb)
}

/// The first outbox group of `sink` at or after `from` and at most `through`.
fn next_group(store: &dyn StateStore, sink: &Relation, from: Epoch, through: Epoch) -> Result<Option<Epoch>> {
    let prefix = segment_key(sink.def.id, &[]);
    let range = KeyRange { start: group_prefix(sink.def.id, from), end: crate::state::keys::prefix_end(&prefix) };
    let what = format!("the outbox of sink \"{}\"", sink.def.name);
    let mut found = None;
    store.scan_ranges(&[range], &mut |key, _| {
        if !key.starts_with(&prefix) {
            return Ok(ScanControl::Stop);
        }
        let group = key
            .get(prefix.len()..prefix.len() + 8)
            .and_then(|k| <[u8; 8]>::try_from(k).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| crate::state::index_codec::corrupt(&what, "a key of the wrong length"))?;
        found = Some(group).filter(|g| *g <= through);
        Ok(ScanControl::Stop)
    })?;
    Ok(found)
}

/// Reads outbox group `group` of `sink` part by part, in order, handing each to `visit`.
fn read_group(
    store: &dyn StateStore,
    sink: &Relation,
    group: Epoch,
    visit: &mut dyn FnMut(Vec<ChangeBatch>) -> Result<()>,
) -> Result<()> {
    let what = format!("the outbox of sink \"{}\"", sink.def.name);
    store.scan_prefix(&group_prefix(sink.def.id, group), &mut |_, value| {
        let mut r = IndexReader::new(value, &what)?;
        let changes = (0..r.u64()?).map(|_| ChangeBatch::decode(&mut r, &what)).collect::<Result<Vec<_>>>()?;
        r.finish()?;
        visit(changes)?;
        Ok(ScanControl::Continue)
    })
}

/// The outbox groups of `sink` up to `through`, oldest first (one seek each).
fn groups(store: &dyn StateStore, sink: &Relation, through: Epoch) -> Result<Vec<Epoch>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(group) = next_group(store, sink, from, through)? {
        out.push(group);
        match group.checked_add(1) {
            Some(next) => from = next,
            None => break,
        }
    }
    Ok(out)
}

/// How many checkpoint intervals' changes `sink` holds and has not delivered yet (its outbox
/// groups).
pub fn undelivered(store: &dyn StateStore, sink: &Relation) -> Result<usize> {
    Ok(groups(store, sink, Epoch::MAX)?.len())
}

/// The job that keeps a sink's outbox: the view's changes, one group per checkpoint interval.
pub struct SinkJob {
    pub sink: Arc<Relation>,
    pub input: ChangeReceiver,
    pub store: Arc<dyn StateStore>,
    pub committed: watch::Sender<Epoch>,
    /// The open group (the first epoch after the last checkpoint this job committed) and its
    /// next part's number (a new sink's first group already holds the view's rows).
    pub group: Epoch,
    pub next_part: u32,
    /// Changes not yet in the outbox, and how many rows they hold.
    pub pending: Vec<ChangeBatch>,
    pub pending_rows: usize,
    /// A write of parts before the checkpoint failed: none is tried again until it.
    pub spill_failed: bool,
}

impl SinkJob {
    pub async fn run(mut self) {
        while let Some((message, _)) = self.input.recv().await {
            match message {
                Message::Data(batch) => {
                    if let Err(e) = self.push(batch, None).await {
                        // Kept in memory until the checkpoint, which tries again.
                        tracing::error!(sink = %self.sink.def.name, "writing the outbox failed: {e}");
                        set_status(&self.sink, |s| s.error = Some(e.message.clone()));
                        self.spill_failed = true;
                    }
                }
                Message::Barrier(barrier) => {
                    if barrier.epoch <= *self.committed.borrow() {
                        continue;
                    }
                    if barrier.is_checkpoint() {
                        // The group must be whole in the checkpoint: a barrier committed without
                        // it would let the deliverer send it short.
                        if let Err(e) = self.put_pending(barrier.epoch, true, None).await {
                            if e.state == crate::error::SqlState::ADMIN_SHUTDOWN {
                                break;
                            }
                            crate::state::store::stop_after_refused_write(
                                &format!("sink \"{}\"'s outbox at checkpoint {}", self.sink.def.name, barrier.epoch),
                                &e,
                            );
                        }
                        self.group = barrier.epoch + 1;
                        self.next_part = 0;
                        self.spill_failed = false;
                    }
                    self.committed.send_replace(barrier.epoch);
                }
                Message::End => {}
            }
        }
        tracing::info!(sink = %self.sink.def.name, "sink stopped");
    }

    /// A new sink's first changes: its view's rows, read from `rows` (a snapshot), into the
    /// open group as they come, a full part at a time (the rest goes with the group at the
    /// checkpoint). `locked`, the sink's write lock, is held by each write until it is done, so
    /// that what undoes a CREATE SINK cancelled meanwhile (`handler::unfinished`) comes after.
    pub async fn load_snapshot(
        &mut self,
        mut rows: tokio::sync::mpsc::Receiver<Result<Option<datafusion::arrow::array::RecordBatch>>>,
        locked: tokio::sync::OwnedMutexGuard<()>,
    ) -> Result<()> {
        let locked = Arc::new(locked);
        loop {
            match rows.recv().await {
                Some(Ok(Some(batch))) => self.push(ChangeBatch::inserts(batch), Some(&locked)).await?,
                Some(Ok(None)) => return Ok(()),
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(crate::error::WeirError::internal(
                        "the reader of the view's rows stopped before their end",
                    ))
                }
            }
        }
    }

    /// Adds changes of the open epoch; once a part's worth waits (and no write failed since the
    /// last checkpoint), writes the full parts. `keep`: held by the write until it is done.
    async fn push(&mut self, batch: ChangeBatch, keep: Option<&Arc<tokio::sync::OwnedMutexGuard<()>>>) -> Result<()> {
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        if self.pending_rows < PART_ROWS || self.spill_failed {
            return Ok(());
        }
        // Changes of the epoch after the last barrier; a part short of full waits for more.
        let epoch = *self.committed.borrow() + 1;
        self.put_pending(epoch, false, keep.cloned()).await
    }

    /// Writes the pending changes as the open group's next parts, tagged with `epoch`: all of
    /// them at a checkpoint (`all`), else only full parts, the rest staying pending. `keep` is
    /// held until the write is done, even if this is no longer awaited.
    async fn put_pending(
        &mut self,
        epoch: Epoch,
        all: bool,
        keep: Option<Arc<tokio::sync::OwnedMutexGuard<()>>>,
    ) -> Result<()> {
        let mut parts = into_parts(std::mem::take(&mut self.pending));
        if !all && parts.last().is_some_and(|p| p.iter().map(|c| c.num_rows()).sum::<usize>() < PART_ROWS) {
            self.pending = parts.pop().unwrap_or_default();
        }
        if parts.is_empty() {
            self.pending_rows = self.pending.iter().map(|c| c.num_rows()).sum();
            return Ok(());
        }
        let (store, sink, group, first) = (Arc::clone(&self.store), self.sink.def.id, self.group, self.next_part);
        let written = tokio::task::spawn_blocking(move || {
            let _keep = keep;
            let written = parts
                .iter()
                .zip(first..)
                .try_for_each(|(part, n)| put_part(store.as_ref(), sink, group, n, epoch, part));
            (written.map(|()| parts.len() as u32), parts)
        })
        .await?;
        match written {
            (Ok(count), _) => {
                self.next_part += count;
                self.pending_rows = self.pending.iter().map(|c| c.num_rows()).sum();
                Ok(())
            }
            // Kept, to be written again (over any parts written) with the next ones.
            (Err(e), parts) => {
                let rest = std::mem::take(&mut self.pending);
                self.pending = parts.into_iter().flatten().chain(rest).collect();
                Err(e)
            }
        }
    }
}

/// Delivers `sink`'s outbox groups as checkpoints complete (`checkpointed`: the newest epoch
/// whose snapshot is taken; groups already in the store at start were restored from one).
pub async fn deliver(
    sink: Arc<Relation>,
    store: Arc<dyn StateStore>,
    mut writer: Box<dyn SinkWriter>,
    mut checkpointed: watch::Receiver<Epoch>,
    restored: Epoch,
) {
    let name = sink.def.name.clone();
    let mut backoff = Duration::from_millis(200);
    let mut delivered: Option<Option<Epoch>> = None;
    let mut through = restored.max(*checkpointed.borrow());
    set_status(&sink, |s| s.state = "running".into());
    loop {
        let attempt = tokio::task::block_in_place(|| -> Result<()> {
            let marker = match delivered {
                Some(marker) => marker,
                None => *delivered.insert(writer.delivered()?),
            };
            let mut marker = marker;
            let groups = groups(store.as_ref(), &sink, through)?;
            let pending = crate::metrics::SINK_CHECKPOINTS_PENDING.with_label_values(&[&name]);
            pending.set(groups.iter().filter(|g| marker.is_none_or(|m| **g > m)).count() as i64);
            for group in groups {
                if marker.is_none_or(|m| group > m) {
                    crate::fault::point("sink.before_deliver");
                    let mut rows = 0;
                    let sent = writer.begin().and_then(|()| {
                        read_group(store.as_ref(), &sink, group, &mut |changes| {
                            rows += changes.iter().map(|c| c.num_rows()).sum::<usize>();
                            writer.write(&changes)
                        })
                    });
                    if let Err(e) = sent.and_then(|()| writer.commit(group)) {
                        writer.abort();
                        crate::metrics::SINK_DELIVERIES_TOTAL.with_label_values(&[&name, "failed"]).inc();
                        return Err(e);
                    }
                    crate::metrics::SINK_DELIVERIES_TOTAL.with_label_values(&[&name, "committed"]).inc();
                    crate::metrics::SINK_ROWS_TOTAL.with_label_values(&[&name]).inc_by(rows as u64);
                    pending.dec();
                    marker = Some(group);
                    delivered = Some(marker);
                    set_status(&sink, |s| s.delivered = marker);
                    crate::metrics::SINK_CHECKPOINTS_DELIVERED_TOTAL.with_label_values(&[&name]).inc();
                    crate::fault::point("sink.after_commit");
                }
                let mut wb = WriteBatch::default();
                let prefix = group_prefix(sink.def.id, group);
                let end = group_prefix(sink.def.id, group.saturating_add(1));
                wb.delete_range(prefix, end);
                store.write(wb)?;
            }
            Ok(())
        });
        match attempt {
            Ok(()) => {
                backoff = Duration::from_millis(200);
                set_status(&sink, |s| {
                    s.state = "running".into();
                    s.error = None;
                });
                if checkpointed.changed().await.is_err() {
                    return;
                }
                through = *checkpointed.borrow();
            }
            Err(e) => {
                tracing::warn!(sink = %name, "delivery failed, retrying in {backoff:?}: {e}");
                // A writer that failed may have lost its transaction state: ask its marker again.
                delivered = None;
                set_status(&sink, |s| {
                    s.state = "retrying".into();
                    s.error = Some(e.message.clone());
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                through = through.max(*checkpointed.borrow());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_cut_into_parts_of_at_most_part_rows_in_order() {
        use datafusion::arrow::array::{Int64Array, RecordBatch};
        let batch = |from: i64, n: i64| {
            ChangeBatch::inserts(
                RecordBatch::try_from_iter([(
                    "v",
                    std::sync::Arc::new(Int64Array::from_iter_values(from..from + n)) as _,
                )])
                .unwrap(),
            )
        };
        let p = PART_ROWS as i64;
        let parts = into_parts(vec![batch(0, 10), batch(10, 2 * p), batch(10 + 2 * p, 5)]);
        let sizes: Vec<usize> = parts.iter().map(|part| part.iter().map(|c| c.num_rows()).sum()).collect();
        assert_eq!(sizes, [PART_ROWS, PART_ROWS, 15]);
        let values: Vec<i64> = parts
            .iter()
            .flatten()
            .flat_map(|c| c.data.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
            .collect();
        assert_eq!(values, (0..2 * p + 15).collect::<Vec<_>>());
        assert!(into_parts(Vec::new()).is_empty());
    }

    /// A writer recording what it was asked to do, with a marker it may start from.
    #[derive(Clone, Default)]
    struct Recorder {
        log: Arc<Mutex<Vec<String>>>,
        rows: Arc<Mutex<Vec<i64>>>,
        marker: Option<Epoch>,
    }

    impl SinkWriter for Recorder {
        fn delivered(&mut self) -> Result<Option<Epoch>> {
            Ok(self.marker)
        }
        fn begin(&mut self) -> Result<()> {
            self.log.lock().push("begin".into());
            Ok(())
        }
        fn write(&mut self, changes: &[ChangeBatch]) -> Result<()> {
            use datafusion::arrow::array::Int64Array;
            let rows: usize = changes.iter().map(|c| c.num_rows()).sum();
            assert!(rows <= PART_ROWS, "a part of {rows} changes");
            self.log.lock().push(format!("write {rows}"));
            for c in changes {
                let values = c.data.column(0).as_any().downcast_ref::<Int64Array>().expect("int64");
                self.rows.lock().extend(values.values().iter());
            }
            Ok(())
        }
        fn commit(&mut self, group: Epoch) -> Result<()> {
            self.log.lock().push(format!("commit {group}"));
            Ok(())
        }
        fn abort(&mut self) {
            self.log.lock().push("abort".into());
        }
    }

    /// A sink job writes an interval's changes as full parts while they come and the rest at
    /// the checkpoint, all in the group the interval opened; the deliverer sends each group
    /// once a checkpoint at or past it is taken, in order, as one transaction, part by part,
    /// then deletes it; a group the external marker already holds is deleted unsent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn groups_go_out_whole_in_parts_once_checkpointed_and_never_twice() {
        use datafusion::arrow::array::{Int64Array, RecordBatch};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};

        use crate::state::memory::MemoryStore;
        use crate::types::{Barrier, BarrierKind, Message};

        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let catalog = crate::catalog::Catalog::open(Arc::clone(&store), "dev").unwrap();
        let schema = Schema::new(vec![Field::new("v", DataType::Int64, false)]);
        let view = catalog.create_table("t", "", schema, vec![], false).unwrap().unwrap();
        let view = catalog.by_id(view).unwrap();
        let sink = catalog.create_sink("s", "", &view, Default::default(), false).unwrap().unwrap();
        let sink = catalog.by_id(sink).unwrap();
        let input = catalog.changes.subscribe(view.def.id, sink.def.id).await;
        let (committed, _) = watch::channel(10);
        let job = SinkJob {
            sink: Arc::clone(&sink),
            input,
            store: Arc::clone(&store),
            committed,
            group: 11,
            next_part: 0,
            pending: Vec::new(),
            pending_rows: 0,
            spill_failed: false,
        };
        let running = tokio::spawn(job.run());
        let rows = |from: i64, n: i64| {
            let values = Int64Array::from_iter_values(from..from + n);
            Message::Data(ChangeBatch::inserts(RecordBatch::try_from_iter([("v", Arc::new(values) as _)]).unwrap()))
        };
        let barrier = |epoch: Epoch, kind: BarrierKind| {
            Message::Barrier(Barrier { epoch, injected_at: std::time::Instant::now(), kind, now: 0 })
        };
        let p = PART_ROWS as i64;
        // Interval 11..=12: a part and a half, a plain barrier, more, then the checkpoint.
        let messages = vec![
            rows(0, p + p / 2),
            barrier(11, BarrierKind::Flush),
            rows(p + p / 2, 10),
            barrier(12, BarrierKind::Checkpoint),
            // Interval 13..=13: a few rows.
            rows(p + p / 2 + 10, 5),
            barrier(13, BarrierKind::Checkpoint),
        ];
        catalog.changes.publish(view.def.id, messages).await;
        let parts = || {
            let mut keys = Vec::new();
            store
                .scan_prefix(&segment_key(sink.def.id, &[]), &mut |k, _| {
                    keys.push(k[6..].to_vec());
                    Ok(ScanControl::Continue)
                })
                .unwrap();
            keys
        };
        let part = |group: Epoch, part: u32| [group.to_be_bytes().as_slice(), &part.to_be_bytes()].concat();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while parts().len() < 3 {
            assert!(std::time::Instant::now() < deadline, "parts written: {:?}", parts());
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Group 11: the full part written as the rows came, the rest at the checkpoint; group 13.
        assert_eq!(parts(), [part(11, 0), part(11, 1), part(13, 0)]);
        assert_eq!(undelivered(store.as_ref(), &sink).unwrap(), 2);

        // Checkpoint 12 taken: group 11 goes, group 13 waits for its checkpoint.
        let recorder = Recorder::default();
        let (checkpointed, watched) = watch::channel(12);
        let delivering =
            tokio::spawn(deliver(Arc::clone(&sink), Arc::clone(&store), Box::new(recorder.clone()), watched, 0));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while parts().len() > 1 {
            assert!(std::time::Instant::now() < deadline, "group 11 was not delivered");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let first = (p + p / 2 + 10) as usize;
        assert_eq!(
            *recorder.log.lock(),
            [
                "begin".to_string(),
                format!("write {PART_ROWS}"),
                format!("write {}", first - PART_ROWS),
                "commit 11".into()
            ]
        );
        assert_eq!(*recorder.rows.lock(), (0..first as i64).collect::<Vec<_>>(), "every row once, in order");
        checkpointed.send_replace(13);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !parts().is_empty() {
            assert!(std::time::Instant::now() < deadline, "group 13 was not delivered");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(recorder.log.lock().last().map(String::as_str), Some("commit 13"));
        assert_eq!(recorder.rows.lock().len(), first + 5);
        delivering.abort();

        // A group the marker holds already (delivered before a crash) is deleted unsent.
        put_part(
            store.as_ref(),
            sink.def.id,
            20,
            0,
            20,
            &[ChangeBatch::inserts(
                RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![1, 2])) as _)]).unwrap(),
            )],
        )
        .unwrap();
        let resent = Recorder { marker: Some(20), ..Default::default() };
        let (_checkpointed, watched) = watch::channel(20);
        let delivering =
            tokio::spawn(deliver(Arc::clone(&sink), Arc::clone(&store), Box::new(resent.clone()), watched, 20));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !parts().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the delivered group was not deleted");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(resent.log.lock().is_empty(), "nothing sent again: {:?}", resent.log.lock());
        delivering.abort();
        running.abort();
    }

    #[test]
    fn changes_net_to_each_keys_last_in_first_seen_order() {
        let netted = net_by_key([("a", 1, true), ("b", 2, true), ("a", 1, false), ("a", 3, true), ("b", 2, false)]);
        let change = |key, before, after| NetChange { key, before, after };
        assert_eq!(netted, vec![change("a", None, Some(3)), change("b", None, None)]);
        // A key that had a row before: its first change removes it.
        let netted = net_by_key([("c", 5, false), ("c", 6, true), ("d", 7, false)]);
        assert_eq!(netted, vec![change("c", Some(5), Some(6)), change("d", Some(7), None)]);
    }
}
