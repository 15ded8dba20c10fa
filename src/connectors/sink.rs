//! The sink runtime: exactly-once delivery of a view's changes to an external system, on top of
//! checkpoints (ADR 12).
//!
//! A sink job follows its view like a view follows its inputs. A sink has *shards*
//! (`sink.parallelism`, one unless given), each delivering the changes of its own keys (the
//! primary key's vnode, [`KeyShards`]; a sink without a key, over a view that only inserts,
//! gives its batches to the shards in turn), so the changes of one key stay in order. The job
//! puts each shard's changes into the shard's *outbox* in the store, in *groups*: the changes
//! of one checkpoint interval form one group, numbered by the first epoch after the checkpoint
//! before it (a new sink's first group starts with the view's rows). A group is written in
//! *parts* of at most [`PART_ROWS`] rows (keys `[sink id][shard][group][part]`; shard 0's are
//! those of a sink of one shard before shards existed): whenever that many changes of a shard
//! are waiting, and the rest at the checkpoint barrier that ends the interval, so the job holds
//! about a part per shard in memory and each deliverer one, whatever the view's size or the
//! backlog. A part written before the checkpoint is tagged with the epoch it belongs to, so a
//! snapshot of an earlier cut being taken meanwhile does not hold it (ADR 18).
//!
//! Delivery is a two-phase commit: once a group is whole (its checkpoint barrier passed the
//! job), the shard's deliverer hands its parts, in order, to the shard's own [`SinkWriter`]
//! inside one transaction of the external system, while the checkpoint completes; once that
//! checkpoint is taken, the transaction commits the parts with the shard's marker saying
//! "group `g` delivered" (a Kafka transaction with its own `transactional.id` and a
//! consumer-group offset; a Postgres transaction with a marker row), then the group is
//! deleted; the shards deliver side by side, each at its own pace. After a crash the store is
//! back at the newest checkpoint, outboxes included; groups a shard's marker says were
//! delivered are deleted unsent, the rest are sent. The changes after the checkpoint are
//! computed again by the restored view and reach a later group, numbered above every earlier
//! one (epochs only grow). So every change reaches the external system once.
//!
//! A connector that cannot be reached is retried with backoff (`weir_catalog.sinks` shows the
//! sink `retrying` while any shard is); the outbox grows on disk meanwhile, never in memory,
//! and the rest of the server goes on. Called by `dataflow::manager` (start, restore, stop).

use std::sync::Arc;
use std::time::Duration;

use crate::status::{ShardStatus, SinkStatus, Status};
use tokio::sync::watch;

use crate::catalog::changes::ChangeReceiver;
use crate::catalog::Relation;
use crate::error::Result;
use crate::state::keys::{row_key_in, TableId};
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::store::{KeyRange, ScanControl, StateStore, WriteBatch};
use crate::types::key_shards::KeyShards;
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

/// What a connector's writer is made for: shard `shard` of sink `sink_id`, over a view whose
/// rows have `schema` and which never retracts if `append_only`.
pub struct WriterSpec {
    pub sink_id: u32,
    /// The sink's `RelationDef::sink_token` (empty for sinks made before tokens).
    pub token: String,
    pub shard: u16,
    pub schema: datafusion::arrow::datatypes::SchemaRef,
    pub append_only: bool,
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

fn set_status(status: &Status, sink: &Relation, update: impl FnOnce(&mut SinkStatus)) {
    let mut all = status.sinks.lock();
    let entry = all.entry(sink.def.id).or_insert_with(|| (sink.def.name.clone(), SinkStatus::default()));
    if entry.1.shards.len() < shards_of(sink) {
        entry.1.shards.resize(shards_of(sink), ShardStatus { state: "running".into(), ..Default::default() });
    }
    update(&mut entry.1);
    let pending = entry.1.shards.iter().map(|s| s.pending_groups).max().unwrap_or(0);
    crate::metrics::SINK_CHECKPOINTS_PENDING.with_label_values(&[&sink.def.name]).set(pending as i64);
}

fn set_shard_status(status: &Status, sink: &Relation, shard: u16, update: impl FnOnce(&mut ShardStatus)) {
    set_status(status, sink, |s| update(&mut s.shards[shard as usize]));
}

/// Most shards a sink may have.
pub const MAX_SHARDS: usize = 256;

/// The shards a new sink delivers by: its `sink.parallelism` option, else one (each
/// checkpoint's changes then appear in the external system at once, in one transaction).
pub fn shards_option(options: &crate::catalog::options::ConnectorOptions) -> Result<usize> {
    let Some(text) = options.get("sink.parallelism") else {
        return Ok(1);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        _ => Err(crate::error::WeirError::new(
            crate::error::SqlState::INVALID_PARAMETER_VALUE,
            format!("sink.parallelism must be a whole number from 1 to {MAX_SHARDS}, not '{text}'"),
        )),
    }
}

/// The name shard `spec.shard` of a sink goes by in the external system (its Kafka
/// `transactional.id` and marker group, its Postgres marker row): `<prefix>-<sink id>-<token>`
/// (`<prefix>-<sink id>` for a sink made before tokens) for shard 0 (the name of a sink of one
/// shard, as before sinks had shards), `-s<shard>` appended for the others (a letter, so that
/// no prefix ending in `-<digits>` makes another sink's name).
pub fn identity(prefix: &str, spec: &WriterSpec) -> String {
    let mut name = format!("{prefix}-{}", spec.sink_id);
    if !spec.token.is_empty() {
        name = format!("{name}-{}", spec.token);
    }
    if spec.shard > 0 {
        name = format!("{name}-s{}", spec.shard);
    }
    name
}

/// How many shards `sink` delivers by (a sink recorded before shards existed: one).
pub fn shards_of(sink: &Relation) -> usize {
    sink.def.parallelism.max(1)
}

/// Forgets a dropped sink's status.
pub fn forget(status: &Status, sink: u32) {
    status.sinks.lock().remove(&sink);
}

/// The key of part `part` of outbox group `group` of shard `shard`.
fn part_key(sink: TableId, shard: u16, group: Epoch, part: u32) -> Vec<u8> {
    let mut key = group_prefix(sink, shard, group);
    key.extend_from_slice(&part.to_be_bytes());
    key
}

fn group_prefix(sink: TableId, shard: u16, group: Epoch) -> Vec<u8> {
    row_key_in(sink, shard, &group.to_be_bytes())
}

/// The prefix of every outbox key of shard `shard`.
fn shard_prefix(sink: TableId, shard: u16) -> Vec<u8> {
    row_key_in(sink, shard, &[])
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

/// Writes `changes` as part `part` of `group` of `shard`, tagged with `epoch` (the epoch they
/// belong to). On a blocking thread.
fn put_part(
    store: &dyn StateStore,
    sink: TableId,
    shard: u16,
    group: Epoch,
    part: u32,
    epoch: Epoch,
    changes: &[ChangeBatch],
) -> Result<()> {
    let mut record = RecordWriter::default();
    record.u64(changes.len() as u64);
    for batch in changes {
        record.changes(batch)?;
    }
    let mut wb = WriteBatch { skip_wal: true, epoch: Some(epoch), ..Default::default() };
    wb.put(part_key(sink, shard, group, part), record.finish());
    // Waits while the disk is full: the sink stalls (and the view feeding it, by its queue),
    // rather than hold ever more changes in memory.
    store.write_waiting(wb)
}

/// The first outbox group of `shard` of `sink` at or after `from` and at most `through`.
fn next_group(
    store: &dyn StateStore,
    sink: &Relation,
    shard: u16,
    from: Epoch,
    through: Epoch,
) -> Result<Option<Epoch>> {
    let prefix = shard_prefix(sink.def.id, shard);
    let range =
        KeyRange { start: group_prefix(sink.def.id, shard, from), end: crate::state::keys::prefix_end(&prefix) };
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
            .ok_or_else(|| crate::state::record::corrupt(&what, "a key of the wrong length"))?;
        found = Some(group).filter(|g| *g <= through);
        Ok(ScanControl::Stop)
    })?;
    Ok(found)
}

/// Reads outbox group `group` of `shard` of `sink` part by part, in order, handing each to
/// `visit`.
fn read_group(
    store: &dyn StateStore,
    sink: &Relation,
    shard: u16,
    group: Epoch,
    visit: &mut dyn FnMut(Vec<ChangeBatch>) -> Result<()>,
) -> Result<()> {
    let what = format!("the outbox of sink \"{}\"", sink.def.name);
    store.scan_prefix(&group_prefix(sink.def.id, shard, group), &mut |_, value| {
        let mut r = RecordReader::new(value, &what)?;
        let changes = (0..r.u64()?).map(|_| r.changes()).collect::<Result<Vec<_>>>()?;
        r.finish()?;
        visit(changes)?;
        Ok(ScanControl::Continue)
    })
}

/// The outbox groups of `shard` of `sink` up to `through`, oldest first (one seek each).
fn groups(store: &dyn StateStore, sink: &Relation, shard: u16, through: Epoch) -> Result<Vec<Epoch>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(group) = next_group(store, sink, shard, from, through)? {
        out.push(group);
        match group.checked_add(1) {
            Some(next) => from = next,
            None => break,
        }
    }
    Ok(out)
}

/// How many checkpoint intervals' changes `sink` holds and has not delivered yet (its outbox
/// groups, of any shard).
pub fn undelivered(store: &dyn StateStore, sink: &Relation) -> Result<usize> {
    let mut all = std::collections::BTreeSet::new();
    for shard in 0..shards_of(sink) as u16 {
        all.extend(groups(store, sink, shard, Epoch::MAX)?);
    }
    Ok(all.len())
}

/// The job that keeps a sink's outboxes: the view's changes, split by shard, one group per
/// checkpoint interval.
pub struct SinkJob {
    sink: Arc<Relation>,
    /// Where the sink's state is reported (`weir_catalog.sinks`).
    status: Arc<Status>,
    input: ChangeReceiver,
    store: Arc<dyn StateStore>,
    committed: watch::Sender<Epoch>,
    /// The newest checkpoint barrier through which the groups are whole in the outbox (every
    /// group numbered at or below it): the deliverers start sending a group then, and commit
    /// it once that checkpoint is complete.
    closed: watch::Sender<Epoch>,
    /// The open group: the first epoch after the last checkpoint this job committed (a new
    /// sink's first group already holds the view's rows).
    group: Epoch,
    /// The primary key's columns, which shard a change by; none: batches go to the shards in
    /// turn, the next one to `next_unkeyed`.
    key: Vec<usize>,
    key_shards: KeyShards,
    next_unkeyed: usize,
    /// Per shard, its open group: changes not yet written, and the next part's number.
    open_groups: Vec<OpenGroup>,
    /// A write of parts before the checkpoint failed: none is tried again until it.
    spill_failed: bool,
}

/// A shard's open group: the changes not yet written to its outbox, and the next part's number.
#[derive(Default)]
struct OpenGroup {
    pending: Vec<ChangeBatch>,
    pending_rows: usize,
    next_part: u32,
}

impl SinkJob {
    /// The job of `sink`, reading the view's changes from `input`, whose open group is
    /// `group`; `committed` says the last barrier it committed. The sink's `primary_key` option
    /// (if any) shards its changes; Err if its columns cannot be (their types have no row
    /// format).
    pub fn new(
        sink: Arc<Relation>,
        input: ChangeReceiver,
        store: Arc<dyn StateStore>,
        committed: watch::Sender<Epoch>,
        group: Epoch,
        status: Arc<Status>,
    ) -> Result<SinkJob> {
        let key = match sink.def.connector.as_ref().and_then(|o| o.get("primary_key")) {
            Some(names) => key_columns(names, &sink.def.schema)?,
            None => Vec::new(),
        };
        let key_types: Vec<_> = key.iter().map(|c| sink.def.schema.field(*c).data_type().clone()).collect();
        let open_groups = (0..shards_of(&sink)).map(|_| OpenGroup::default()).collect();
        Ok(SinkJob {
            sink,
            input,
            store,
            committed,
            closed: watch::channel(group.saturating_sub(1)).0,
            group,
            key,
            key_shards: KeyShards::for_types(&key_types)?,
            next_unkeyed: 0,
            open_groups,
            status,
            spill_failed: false,
        })
    }

    /// Follows the newest epoch through which the outbox groups are whole (see `closed`).
    pub fn closed_groups(&self) -> watch::Receiver<Epoch> {
        self.closed.subscribe()
    }

    pub async fn run(mut self) {
        while let Some((message, _)) = self.input.recv().await {
            match message {
                Message::Data(batch) => {
                    if let Err(e) = self.split(batch) {
                        // Nowhere to keep the changes: a restart computes them again.
                        crate::state::store::stop_after_refused_write(
                            &format!("sink \"{}\"'s changes split by shard", self.sink.def.name),
                            &e,
                        );
                    }
                    if let Err(e) = self.spill(None).await {
                        // Kept in memory until the checkpoint, which tries again.
                        tracing::error!(sink = %self.sink.def.name, "writing the outbox failed: {e}");
                        set_status(&self.status, &self.sink, |s| s.outbox_error = Some(e.message.clone()));
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
                        self.closed.send_replace(barrier.epoch);
                        self.group = barrier.epoch + 1;
                        for open in &mut self.open_groups {
                            open.next_part = 0;
                        }
                        if self.spill_failed {
                            set_status(&self.status, &self.sink, |s| s.outbox_error = None);
                        }
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
                Some(Ok(Some(batch))) => {
                    self.split(ChangeBatch::inserts(batch))?;
                    self.spill(Some(&locked)).await?
                }
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

    /// Adds changes of the open epoch to their shards' open groups.
    fn split(&mut self, batch: ChangeBatch) -> Result<()> {
        let by_shard = if self.key.is_empty() {
            let shard = self.next_unkeyed % self.open_groups.len();
            self.next_unkeyed = self.next_unkeyed.wrapping_add(1);
            vec![(shard, batch)]
        } else {
            let key: Vec<_> = self.key.iter().map(|c| Arc::clone(batch.data.column(*c))).collect();
            self.key_shards.split(&batch, &key, self.open_groups.len())?
        };
        for (shard, changes) in by_shard {
            let open = &mut self.open_groups[shard];
            open.pending_rows += changes.num_rows();
            open.pending.push(changes);
        }
        Ok(())
    }

    /// Once a part's worth of changes waits for a shard (and no write failed since the last
    /// checkpoint), writes the full parts. `keep`: held by the write until it is done.
    async fn spill(&mut self, keep: Option<&Arc<tokio::sync::OwnedMutexGuard<()>>>) -> Result<()> {
        if self.spill_failed || self.open_groups.iter().all(|o| o.pending_rows < PART_ROWS) {
            return Ok(());
        }
        // Changes of the epoch after the last barrier; a part short of full waits for more.
        let epoch = *self.committed.borrow() + 1;
        self.put_pending(epoch, false, keep.cloned()).await
    }

    /// Writes each shard's pending changes as its open group's next parts, tagged with
    /// `epoch`: all of them at a checkpoint (`all`), else only full parts, the rest staying
    /// pending. `keep` is held until the write is done, even if this is no longer awaited.
    async fn put_pending(
        &mut self,
        epoch: Epoch,
        all: bool,
        keep: Option<Arc<tokio::sync::OwnedMutexGuard<()>>>,
    ) -> Result<()> {
        // (shard, its first part's number, its parts)
        let mut writes = Vec::new();
        for (shard, open) in self.open_groups.iter_mut().enumerate() {
            let mut parts = into_parts(std::mem::take(&mut open.pending));
            if !all && parts.last().is_some_and(|p| p.iter().map(|c| c.num_rows()).sum::<usize>() < PART_ROWS) {
                open.pending = parts.pop().unwrap_or_default();
            }
            open.pending_rows = open.pending.iter().map(|c| c.num_rows()).sum();
            if !parts.is_empty() {
                writes.push((shard as u16, open.next_part, parts));
            }
        }
        if writes.is_empty() {
            return Ok(());
        }
        let (store, sink, group) = (Arc::clone(&self.store), self.sink.def.id, self.group);
        // Each shard's parts written, in order, until one write fails: (shard, the parts
        // written, or the error, and the parts).
        let written = tokio::task::spawn_blocking(move || {
            let _keep = keep;
            let mut failed = false;
            writes
                .into_iter()
                .map(|(shard, first, parts)| {
                    let written = if failed {
                        Err(None)
                    } else {
                        parts
                            .iter()
                            .zip(first..)
                            .try_for_each(|(part, n)| put_part(store.as_ref(), sink, shard, group, n, epoch, part))
                            .map(|()| parts.len() as u32)
                            .map_err(Some)
                    };
                    failed |= written.is_err();
                    (shard, written, parts)
                })
                .collect::<Vec<_>>()
        })
        .await?;
        let mut error = None;
        for (shard, written, parts) in written {
            let open = &mut self.open_groups[shard as usize];
            match written {
                Ok(count) => open.next_part += count,
                // Kept, to be written again (over any parts written) with the next ones.
                Err(e) => {
                    error = error.or(e);
                    let rest = std::mem::take(&mut open.pending);
                    open.pending = parts.into_iter().flatten().chain(rest).collect();
                    open.pending_rows = open.pending.iter().map(|c| c.num_rows()).sum();
                }
            }
        }
        error.map_or(Ok(()), Err)
    }
}

/// Delivers the outbox groups of `shard` of `sink` through the shard's own `writer`, in two
/// phases: a group's changes go into a transaction as soon as the group is whole in the outbox
/// (`closed`: written at its checkpoint barrier), while the checkpoint completes; the
/// transaction commits once the checkpoint is taken (`checkpointed`: the newest epoch whose
/// snapshot is taken; groups in the store at start were restored from one, `restored`). A
/// crash before the commit leaves an open transaction the next writer aborts (Kafka fences
/// it; Postgres rolls it back), and the group is in the outbox of the checkpoint restored, or
/// computed again after it.
pub async fn deliver(
    sink: Arc<Relation>,
    shard: u16,
    store: Arc<dyn StateStore>,
    mut writer: Box<dyn SinkWriter>,
    mut closed: watch::Receiver<Epoch>,
    mut checkpointed: watch::Receiver<Epoch>,
    restored: Epoch,
    status: Arc<Status>,
) {
    let name = sink.def.name.clone();
    let mut backoff = Duration::from_millis(200);
    let mut delivered: Option<Option<Epoch>> = None;
    // The group whose changes the writer's open transaction holds, and how many.
    let mut sent: Option<(Epoch, usize)> = None;
    // The sink job still closes groups (its sender not dropped).
    let mut job_running = true;
    set_shard_status(&status, &sink, shard, |s| s.state = "running".into());
    loop {
        let taken = restored.max(*checkpointed.borrow());
        let whole = taken.max(*closed.borrow());
        let attempt = tokio::task::block_in_place(|| -> Result<()> {
            let marker = match delivered {
                Some(marker) => marker,
                None => *delivered.insert(writer.delivered()?),
            };
            let mut marker = marker;
            let groups = groups(store.as_ref(), &sink, shard, whole)?;
            let mut pending = groups.iter().filter(|g| marker.is_none_or(|m| **g > m)).count();
            set_shard_status(&status, &sink, shard, |s| s.pending_groups = pending);
            for group in groups {
                if marker.is_none_or(|m| group > m) {
                    if sent.is_none_or(|(g, _)| g != group) {
                        crate::fault::point("sink.before_deliver");
                        let mut rows = 0;
                        let written = writer.begin().and_then(|()| {
                            read_group(store.as_ref(), &sink, shard, group, &mut |changes| {
                                rows += changes.iter().map(|c| c.num_rows()).sum::<usize>();
                                writer.write(&changes)
                            })
                        });
                        if let Err(e) = written {
                            return Err(failed_delivery(writer.as_mut(), &name, e));
                        }
                        sent = Some((group, rows));
                    }
                    if group > taken {
                        // Sent; committed once its checkpoint is taken.
                        return Ok(());
                    }
                    let rows = sent.take().map_or(0, |(_, rows)| rows);
                    if let Err(e) = writer.commit(group) {
                        return Err(failed_delivery(writer.as_mut(), &name, e));
                    }
                    crate::metrics::SINK_DELIVERIES_TOTAL.with_label_values(&[&name, "committed"]).inc();
                    crate::metrics::SINK_ROWS_TOTAL.with_label_values(&[&name]).inc_by(rows as u64);
                    pending -= 1;
                    marker = Some(group);
                    delivered = Some(marker);
                    set_shard_status(&status, &sink, shard, |s| {
                        s.delivered = marker;
                        s.pending_groups = pending;
                    });
                    crate::metrics::SINK_CHECKPOINTS_DELIVERED_TOTAL.with_label_values(&[&name]).inc();
                    crate::fault::point("sink.after_commit");
                }
                let mut wb = WriteBatch::default();
                let prefix = group_prefix(sink.def.id, shard, group);
                let end = group_prefix(sink.def.id, shard, group.saturating_add(1));
                wb.delete_range(prefix, end);
                store.write(wb)?;
            }
            Ok(())
        });
        match attempt {
            Ok(()) => {
                backoff = Duration::from_millis(200);
                // Groups go in order, and the attempt stops only at one newer than `taken`.
                set_shard_status(&status, &sink, shard, |s| {
                    s.state = "running".into();
                    s.error = None;
                    s.caught_up = taken;
                });
                // The next group whole, or the next checkpoint taken. The job gone (its
                // sender dropped), only checkpoints are left to wait for.
                tokio::select! {
                    changed = checkpointed.changed() => if changed.is_err() { return },
                    changed = closed.changed(), if job_running => job_running = changed.is_ok(),
                }
            }
            Err(e) => {
                tracing::warn!(sink = %name, shard, "delivery failed, retrying in {backoff:?}: {e}");
                // No transaction stays open after a failure (the outbox's read may fail with
                // one open); a writer that failed may have lost its transaction state: ask its
                // marker again.
                if sent.take().is_some() {
                    writer.abort();
                }
                delivered = None;
                set_shard_status(&status, &sink, shard, |s| {
                    s.state = "retrying".into();
                    s.error = Some(e.message.clone());
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// A transaction that failed to take or commit a group: aborted and counted; `e` handed back.
fn failed_delivery(writer: &mut dyn SinkWriter, sink: &str, e: crate::error::WeirError) -> crate::error::WeirError {
    writer.abort();
    crate::metrics::SINK_DELIVERIES_TOTAL.with_label_values(&[sink, "failed"]).inc();
    e
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

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

    /// A deliverer of `shard` of `sink` writing to `recorder`, as the manager starts one.
    fn spawn_deliver(
        sink: &Arc<Relation>,
        shard: u16,
        store: &Arc<dyn StateStore>,
        recorder: &Recorder,
        closed: &watch::Receiver<Epoch>,
        checkpointed: watch::Receiver<Epoch>,
        restored: Epoch,
    ) -> tokio::task::JoinHandle<()> {
        let writer = Box::new(recorder.clone());
        tokio::spawn(deliver(
            Arc::clone(sink),
            shard,
            Arc::clone(store),
            writer,
            closed.clone(),
            checkpointed,
            restored,
            Default::default(),
        ))
    }

    /// Waits (up to 10 s) until `done`; else panics with `what`.
    async fn wait_until(mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{}", what());
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    fn barrier(epoch: Epoch, kind: crate::types::BarrierKind) -> Message {
        Message::Barrier(crate::types::Barrier { epoch, injected_at: std::time::Instant::now(), kind, now: 0 })
    }

    /// A store with a table `t` of `columns` (BIGINT) and a sink `s` of it with `options` and
    /// `shards`; the sink's subscription to the table's changes.
    async fn sink_of_table(
        columns: &[&str],
        options: crate::catalog::options::ConnectorOptions,
        shards: usize,
    ) -> (Arc<dyn StateStore>, crate::catalog::Catalog, Arc<Relation>, Arc<Relation>, ChangeReceiver) {
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let store: Arc<dyn StateStore> = Arc::new(crate::state::memory::MemoryStore::new());
        let catalog = crate::catalog::Catalog::open(Arc::clone(&store), "dev", Default::default()).unwrap();
        let schema = Schema::new(columns.iter().map(|c| Field::new(*c, DataType::Int64, false)).collect::<Vec<_>>());
        let view = catalog.create_table("t", "", schema, vec![], false).unwrap().unwrap();
        let view = catalog.by_id(view).unwrap();
        let sink = catalog.create_sink("s", "", &view, options, shards, "", false).unwrap().unwrap();
        let sink = catalog.by_id(sink).unwrap();
        let input = catalog.changes.subscribe(view.def.id, sink.def.id).await;
        (store, catalog, view, sink, input)
    }

    /// A sink job writes an interval's changes as full parts while they come and the rest at
    /// the checkpoint, all in the group the interval opened; the deliverer sends each group
    /// once it is whole, in order, as one transaction, part by part, commits it once a
    /// checkpoint at or past it is taken, then deletes it; a group the external marker already
    /// holds is deleted unsent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn groups_go_out_whole_in_parts_once_checkpointed_and_never_twice() {
        use datafusion::arrow::array::{Int64Array, RecordBatch};

        use crate::types::BarrierKind;

        let (store, catalog, view, sink, input) = sink_of_table(&["v"], Default::default(), 1).await;
        let (committed, _) = watch::channel(10);
        let job =
            SinkJob::new(Arc::clone(&sink), input, Arc::clone(&store), committed, 11, Default::default()).unwrap();
        let closed = job.closed_groups();
        let running = tokio::spawn(job.run());
        let rows = |from: i64, n: i64| {
            let values = Int64Array::from_iter_values(from..from + n);
            Message::Data(ChangeBatch::inserts(RecordBatch::try_from_iter([("v", Arc::new(values) as _)]).unwrap()))
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
                .scan_prefix(&shard_prefix(sink.def.id, 0), &mut |k, _| {
                    keys.push(k[6..].to_vec());
                    Ok(ScanControl::Continue)
                })
                .unwrap();
            keys
        };
        let part = |group: Epoch, part: u32| [group.to_be_bytes().as_slice(), &part.to_be_bytes()].concat();
        wait_until(|| parts().len() >= 3, || format!("parts written: {:?}", parts())).await;
        // Group 11: the full part written as the rows came, the rest at the checkpoint; group 13.
        assert_eq!(parts(), [part(11, 0), part(11, 1), part(13, 0)]);
        assert_eq!(undelivered(store.as_ref(), &sink).unwrap(), 2);

        // Both groups whole, checkpoint 12 taken: group 11 is committed; group 13 is sent and
        // waits for its checkpoint to commit.
        wait_until(|| *closed.borrow() == 13, || format!("groups whole through {}", *closed.borrow())).await;
        let recorder = Recorder::default();
        let (checkpointed, watched) = watch::channel(12);
        let delivering = spawn_deliver(&sink, 0, &store, &recorder, &closed, watched, 0);
        let first = (p + p / 2 + 10) as usize;
        let expected: Vec<String> = vec![
            "begin".into(),
            format!("write {PART_ROWS}"),
            format!("write {}", first - PART_ROWS),
            "commit 11".into(),
            "begin".into(),
            "write 5".into(),
        ];
        wait_until(|| recorder.log.lock().len() >= expected.len(), || format!("log: {:?}", recorder.log.lock())).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(*recorder.log.lock(), expected, "group 13 sent, not committed before its checkpoint");
        assert_eq!(parts(), [part(13, 0)], "group 11 deleted once committed, group 13 kept");
        assert_eq!(*recorder.rows.lock(), (0..first as i64 + 5).collect::<Vec<_>>(), "every row once, in order");
        checkpointed.send_replace(13);
        wait_until(|| parts().is_empty(), || "group 13 was not delivered".into()).await;
        assert_eq!(recorder.log.lock()[expected.len()..], ["commit 13".to_string()], "committed, not sent again");
        delivering.abort();

        // A group the marker holds already (delivered before a crash) is deleted unsent.
        put_part(
            store.as_ref(),
            sink.def.id,
            0,
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
        let delivering = spawn_deliver(&sink, 0, &store, &resent, &closed, watched, 20);
        wait_until(|| parts().is_empty(), || "the delivered group was not deleted".into()).await;
        assert!(resent.log.lock().is_empty(), "nothing sent again: {:?}", resent.log.lock());
        delivering.abort();
        running.abort();
    }

    /// A sink of three shards keyed by `k`: every change of a key goes through one shard's
    /// outbox, in order; each shard delivers its groups through its own writer, with its own
    /// marker, one transaction per group; a shard whose marker holds a group passes it over
    /// while the others deliver theirs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_shard_delivers_its_own_keys_in_order_with_its_own_marker() {
        use datafusion::arrow::array::{Int64Array, RecordBatch};

        use crate::types::BarrierKind;

        let options = crate::catalog::options::ConnectorOptions(
            [("primary_key".to_string(), "k".to_string())].into_iter().collect(),
        );
        let (store, catalog, view, sink, input) = sink_of_table(&["k", "v"], options, 3).await;
        assert_eq!(shards_of(&sink), 3);
        let (committed, _) = watch::channel(0);
        let job = SinkJob::new(Arc::clone(&sink), input, Arc::clone(&store), committed, 1, Default::default()).unwrap();
        let closed = job.closed_groups();
        let running = tokio::spawn(job.run());
        // Keys 0..30, each changed three times (v = round), over two checkpoint intervals.
        let rows = |round: i64| {
            let k = Int64Array::from_iter_values(0..30);
            let v = Int64Array::from_iter_values(std::iter::repeat_n(round, 30));
            Message::Data(ChangeBatch::inserts(
                RecordBatch::try_from_iter([("k", Arc::new(k) as _), ("v", Arc::new(v) as _)]).unwrap(),
            ))
        };
        catalog
            .changes
            .publish(
                view.def.id,
                vec![
                    rows(0),
                    rows(1),
                    barrier(1, BarrierKind::Checkpoint),
                    rows(2),
                    barrier(2, BarrierKind::Checkpoint),
                ],
            )
            .await;
        wait_until(|| undelivered(store.as_ref(), &sink).unwrap() >= 2, || "the groups were not written".into()).await;
        // Shard 1's marker holds group 1 already (delivered before a crash).
        let recorders: Vec<Recorder> =
            (0..3).map(|shard| Recorder { marker: (shard == 1).then_some(1), ..Default::default() }).collect();
        let (_checkpointed, watched) = watch::channel(2);
        let delivering: Vec<_> = recorders
            .iter()
            .zip(0..)
            .map(|(r, shard)| spawn_deliver(&sink, shard, &store, r, &closed, watched.clone(), 2))
            .collect();
        wait_until(|| undelivered(store.as_ref(), &sink).unwrap() == 0, || "the groups were not delivered".into())
            .await;
        let mut owner = std::collections::HashMap::new();
        for (shard, recorder) in recorders.iter().enumerate() {
            let commits: Vec<String> =
                recorder.log.lock().iter().filter(|l| l.starts_with("commit")).cloned().collect();
            let expected: &[&str] = if shard == 1 { &["commit 2"] } else { &["commit 1", "commit 2"] };
            assert_eq!(commits, expected, "shard {shard}");
            for k in recorder.rows.lock().iter() {
                assert_eq!(*owner.entry(*k).or_insert(shard), shard, "key {k} in two shards");
            }
        }
        assert_eq!(owner.len(), 30, "every key in a shard");
        assert_eq!(owner.values().collect::<std::collections::HashSet<_>>().len(), 3, "keys in every shard");
        for d in delivering {
            d.abort();
        }
        running.abort();
    }

    /// A sink's status from its shards': retrying while any shard is; delivered through the
    /// oldest group of the shards still holding changes, else the newest delivered (a shard
    /// without changes is not behind).
    #[test]
    fn a_sinks_status_follows_its_shards() {
        let shard = |state: &str, delivered: Option<Epoch>, pending_groups: usize| ShardStatus {
            state: state.into(),
            delivered,
            error: (state == "retrying").then(|| "down".to_string()),
            pending_groups,
            caught_up: 0,
        };
        let status = |shards| SinkStatus { shards, outbox_error: None };
        let caught_up =
            status(vec![shard("running", Some(5), 0), shard("running", Some(9), 0), shard("running", None, 0)]);
        assert_eq!((caught_up.state(), caught_up.delivered(), caught_up.error()), ("running", Some(9), None));
        let behind = status(vec![shard("running", Some(9), 0), shard("retrying", Some(5), 2)]);
        assert_eq!((behind.state(), behind.delivered(), behind.error()), ("retrying", Some(5), Some("down")));
        let never = status(vec![shard("running", Some(9), 0), shard("running", None, 1)]);
        assert_eq!(never.delivered(), None);
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
