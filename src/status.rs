//! What the running server reports about itself, kept in memory while it runs: whether it is
//! ready to serve ([`Status::readiness`], the metrics port's `/readyz`), runtime errors inside
//! views, each view's event time, the checkpoints taken and restored, and each source's and
//! sink's state. The operators, the checkpointer and the connectors record here; `system`
//! presents it as the `weir_catalog` relations (and it describes this process only, so it is
//! not stored).
//!
//! One [`Status`] per server, made by the server at start and handed down: the catalog holds it
//! (`Catalog::status`), so everything that reads the catalog can report; the checkpoint
//! recovery, which runs before the catalog opens, is handed it too. An operator reports through
//! its view's [`ViewStatus`]. Nothing here is a process global: two servers in one process (the
//! unit tests) keep apart.
//!
//! A bottom-floor module: it imports only `types`, so anything may report to it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::types::Epoch;

pub struct ErrorEntry {
    pub count: u64,
    pub last_micros: i64,
}

#[derive(Default)]
pub struct EventTimeEntry {
    pub watermark_micros: Option<i64>,
    pub open_windows: u64,
    pub late_rows: u64,
}

/// One operator of a running view, for `EXPLAIN ANALYZE`: what it is, which operators feed it
/// and which state tables it owns, and what it has done since the view's job started.
pub struct OperatorStats {
    /// Its description, as EXPLAIN shows it.
    pub label: String,
    /// Its inputs, as indexes of the view's operators.
    pub children: Vec<usize>,
    pub tables: Mutex<Vec<u32>>,
    pub rows_in: AtomicU64,
    pub rows_out: AtomicU64,
    /// Time spent in it, summed over its shards.
    pub busy_nanos: AtomicU64,
}

impl OperatorStats {
    pub fn new(label: String, children: Vec<usize>) -> OperatorStats {
        OperatorStats {
            label,
            children,
            tables: Mutex::new(Vec::new()),
            rows_in: AtomicU64::new(0),
            rows_out: AtomicU64::new(0),
            busy_nanos: AtomicU64::new(0),
        }
    }

    /// Counts `n` rows in or out, and `nanos` of work.
    pub fn record(&self, rows_in: u64, rows_out: u64, nanos: u64) {
        self.rows_in.fetch_add(rows_in, Ordering::Relaxed);
        self.rows_out.fetch_add(rows_out, Ordering::Relaxed);
        self.busy_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// A view's epochs, for `EXPLAIN ANALYZE`: barrier injection to commit.
#[derive(Debug, Clone, Copy, Default)]
pub struct BarrierEntry {
    pub epochs: u64,
    pub last_seconds: f64,
    pub max_seconds: f64,
    pub total_seconds: f64,
}

/// How many checkpoint records `weir_catalog.checkpoints` keeps.
pub const CHECKPOINT_HISTORY: usize = 200;

/// One row of `weir_catalog.checkpoints`.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    pub epoch: u64,
    /// `uploading`, `complete`, `failed` or `restored`.
    pub status: String,
    pub started_at_micros: i64,
    pub finished_at_micros: Option<i64>,
    pub duration_ms: Option<u64>,
    pub bytes_uploaded: Option<u64>,
    pub files_uploaded: Option<u64>,
    pub files: u64,
    pub state_bytes: u64,
    /// Why it failed, or where it was restored from.
    pub detail: String,
}

impl CheckpointRecord {
    /// A record with nothing measured yet.
    pub fn new(epoch: u64, status: &str, started_at_micros: i64) -> CheckpointRecord {
        CheckpointRecord {
            epoch,
            status: status.to_string(),
            started_at_micros,
            finished_at_micros: None,
            duration_ms: None,
            bytes_uploaded: None,
            files_uploaded: None,
            files: 0,
            state_bytes: 0,
            detail: String::new(),
        }
    }

    /// A failed checkpoint, and why.
    pub fn failed(epoch: u64, started_at_micros: i64, detail: String) -> CheckpointRecord {
        CheckpointRecord { detail, ..CheckpointRecord::new(epoch, "failed", started_at_micros) }
    }
}

/// What a sink is doing, for `weir_catalog.sinks`: the sink as a whole, from its shards'.
#[derive(Debug, Clone, Default)]
pub struct SinkStatus {
    pub shards: Vec<ShardStatus>,
    /// The job's last failure to write the outbox (tried again at the checkpoint).
    pub outbox_error: Option<String>,
}

/// What one shard's deliverer is doing.
#[derive(Debug, Clone, Default)]
pub struct ShardStatus {
    /// `running` or `retrying`.
    pub state: String,
    /// The last checkpoint the shard delivered.
    pub delivered: Option<Epoch>,
    /// The last error, while retrying.
    pub error: Option<String>,
    /// Checkpoints whose changes the shard holds and has not delivered.
    pub pending_groups: usize,
    /// Every change of checkpoints through this epoch is delivered (a clean stop waits for
    /// its last checkpoint's).
    pub caught_up: Epoch,
}

impl SinkStatus {
    /// `retrying` while any shard is, else `running`.
    pub fn state(&self) -> &str {
        if self.shards.iter().any(|s| s.state == "retrying") {
            "retrying"
        } else {
            "running"
        }
    }

    /// The last checkpoint the sink has delivered: the oldest of the shards still holding
    /// changes (None while one of them has delivered none), else the newest any shard
    /// delivered (a shard without changes for a while is not behind).
    pub fn delivered(&self) -> Option<Epoch> {
        let behind = self.shards.iter().filter(|s| s.pending_groups > 0);
        if self.shards.iter().any(|s| s.pending_groups > 0) {
            behind.map(|s| s.delivered).min().flatten()
        } else {
            self.shards.iter().filter_map(|s| s.delivered).max()
        }
    }

    /// A retrying shard's error, else the outbox's.
    pub fn error(&self) -> Option<&str> {
        self.shards.iter().find_map(|s| s.error.as_deref()).or(self.outbox_error.as_deref())
    }
}

/// What a source is doing, for `weir_catalog.sources`.
#[derive(Debug, Clone, Default)]
pub struct SourceStatus {
    pub name: String,
    pub connector: String,
    /// running, retrying, failed or finished.
    pub state: String,
    /// Records read (its position).
    pub records: u64,
    /// Why it is retrying or failed.
    pub error: Option<String>,
}

/// Where the server is in its life, for readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Restoring from its checkpoint, opening its catalog, restarting its views.
    Starting = 0,
    /// Listening, every view restored.
    Serving = 1,
    /// Told to stop: taking its last checkpoint and closing.
    Stopping = 2,
}

/// One node of the cluster, as `weir_catalog.cluster_nodes` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterNode {
    pub node_id: String,
    /// `coordinator` (elected: it assigns vnodes) or `worker`.
    pub role: String,
    /// `up` (registered, holding vnodes), `joining` (registered, none assigned yet) or `gone`
    /// (its lease ended; its vnodes wait to be given to others).
    pub state: String,
    /// Where clients reach it (Postgres wire).
    pub postgres: String,
    /// Where other nodes send it rows (Arrow Flight).
    pub exchange: String,
    /// Its vnode ranges, inclusive (`[(0, 85), (200, 210)]`).
    pub vnodes: Vec<(u16, u16)>,
    /// The assignment generation these vnodes are from.
    pub generation: u64,
    pub joined_at_micros: Option<i64>,
}

/// Something that happened to the cluster, as `weir_catalog.cluster_events` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterEvent {
    pub at_micros: i64,
    /// `joined`, `stopped` (a clean stop), `left` (its lease ended), `elected`, `assigned`,
    /// `fenced`.
    pub kind: String,
    pub node_id: String,
    pub detail: String,
}

/// The cluster as one node sees it (`cluster::watch` keeps it).
#[derive(Debug, Clone, Default)]
pub struct ClusterPicture {
    /// This node's id.
    pub this_node: String,
    pub nodes: Vec<ClusterNode>,
    /// Oldest first, at most the last few hundred.
    pub events: Vec<ClusterEvent>,
}

/// What the running server reports about itself (see the module's doc).
#[derive(Default)]
pub struct Status {
    /// The [`Phase`] (as its number).
    phase: AtomicU8,
    /// Runtime errors inside views, by view and message.
    pub view_errors: Mutex<BTreeMap<(String, String), ErrorEntry>>,
    /// Each view with event time, as of its last commit.
    pub event_time: Mutex<BTreeMap<String, EventTimeEntry>>,
    /// The checkpoints listed at start and taken since, newest last (at most
    /// [`CHECKPOINT_HISTORY`]).
    pub checkpoints: Mutex<VecDeque<CheckpointRecord>>,
    /// Every running sink's status, by sink id: (name, status).
    pub sinks: Mutex<BTreeMap<u32, (String, SinkStatus)>>,
    /// Every started source's status, by relation id.
    pub sources: Mutex<BTreeMap<u32, SourceStatus>>,
    /// Each running view's operators, in the order its graph added them (the root last).
    pub operators: Mutex<BTreeMap<String, Vec<Arc<OperatorStats>>>>,
    /// Each running view's barrier latency.
    pub barriers: Mutex<BTreeMap<String, BarrierEntry>>,
    /// The cluster as this node last saw it in etcd; `None` for a single process (no
    /// `--cluster`).
    pub cluster: Mutex<Option<ClusterPicture>>,
}

impl Status {
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::SeqCst);
    }

    /// Whether the server should be sent queries: it serves, and its checkpoint store took the
    /// last checkpoint it finished uploading (a store it cannot reach means no recovery point
    /// newer than the last one there). Else why not.
    pub fn readiness(&self) -> std::result::Result<(), String> {
        match self.phase.load(Ordering::SeqCst) {
            p if p == Phase::Starting as u8 => return Err("starting: restoring from the checkpoint".into()),
            p if p == Phase::Stopping as u8 => return Err("stopping".into()),
            _ => {}
        }
        let checkpoints = self.checkpoints.lock();
        let last_upload = checkpoints.iter().rev().find(|c| c.status == "complete" || c.status == "failed");
        match last_upload {
            Some(failed) if failed.status == "failed" => {
                Err(format!("the checkpoint store did not take checkpoint {}: {}", failed.epoch, failed.detail))
            }
            _ => Ok(()),
        }
    }

    /// The sinks with a shard that has not delivered every change of checkpoints through
    /// `epoch`.
    pub fn sinks_behind(&self, epoch: Epoch) -> Vec<String> {
        let sinks = self.sinks.lock();
        sinks
            .values()
            .filter(|(_, s)| s.shards.iter().any(|shard| shard.caught_up < epoch))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Records `count` failures of `message` in `view`.
    pub fn record_view_error(&self, view: &str, message: &str, count: u64) {
        let now = chrono::Utc::now().timestamp_micros();
        let mut errors = self.view_errors.lock();
        let entry =
            errors.entry((view.to_string(), message.to_string())).or_insert(ErrorEntry { count: 0, last_micros: now });
        entry.count += count;
        entry.last_micros = now;
    }

    /// Counts `count` late row copies of `view`.
    pub fn record_late_rows(&self, view: &str, count: u64) {
        self.event_time.lock().entry(view.to_string()).or_default().late_rows += count;
    }

    /// A view's watermark (nanoseconds) and open windows at its last commit.
    pub fn record_event_time(&self, view: &str, watermark: Option<i64>, open_windows: usize) {
        let mut all = self.event_time.lock();
        // Views without event time (no watermark, no windows, no late rows) are not listed.
        if watermark.is_none() && open_windows == 0 && !all.contains_key(view) {
            return;
        }
        let entry = all.entry(view.to_string()).or_default();
        // Past every row (every input ended) is shown as NULL, like no watermark yet.
        entry.watermark_micros =
            watermark.filter(|w| *w != crate::types::window::PAST_EVERY_ROW).map(|w| w.div_euclid(1000));
        entry.open_windows = open_windows as u64;
    }

    /// Records what happened to a checkpoint; a record of the same epoch and an unfinished
    /// status (`uploading`) is replaced.
    pub fn record_checkpoint(&self, record: CheckpointRecord) {
        let mut all = self.checkpoints.lock();
        all.retain(|r| !(r.epoch == record.epoch && r.status == "uploading"));
        all.push_back(record);
        while all.len() > CHECKPOINT_HISTORY {
            all.pop_front();
        }
    }

    /// A checkpoint was deleted by retention: it is no longer listed as complete.
    pub fn forget_checkpoint(&self, epoch: u64) {
        self.checkpoints.lock().retain(|r| !(r.epoch == epoch && r.status == "complete"));
    }

    /// Forgets the errors and event time of a dropped view.
    pub fn forget_view(&self, view: &str) {
        self.view_errors.lock().retain(|(v, _), _| v != view);
        self.event_time.lock().remove(view);
        self.operators.lock().remove(view);
        self.barriers.lock().remove(view);
    }
}

/// A view's name and the status its operators report to.
#[derive(Clone)]
pub struct ViewStatus {
    name: Arc<str>,
    status: Arc<Status>,
}

impl ViewStatus {
    pub fn new(name: &str, status: Arc<Status>) -> ViewStatus {
        ViewStatus { name: name.into(), status }
    }

    /// `count` rows of the view failed `message`.
    pub fn error(&self, message: &str, count: u64) {
        self.status.record_view_error(&self.name, message, count);
    }

    /// `count` row copies came too late for the view's windows.
    pub fn late_rows(&self, count: u64) {
        self.status.record_late_rows(&self.name, count);
    }

    /// The operators of the graph the view runs now (its barrier latency starts anew).
    pub fn publish_operators(&self, operators: Vec<Arc<OperatorStats>>) {
        self.status.operators.lock().insert(self.name.to_string(), operators);
        self.status.barriers.lock().remove(&*self.name);
    }

    /// The view committed an epoch `seconds` after its barrier was injected.
    pub fn barrier_latency(&self, seconds: f64) {
        let mut barriers = self.status.barriers.lock();
        let entry = barriers.entry(self.name.to_string()).or_default();
        entry.epochs += 1;
        entry.last_seconds = seconds;
        entry.max_seconds = entry.max_seconds.max(seconds);
        entry.total_seconds += seconds;
    }

    /// The view's watermark (nanoseconds) and open windows at its last commit.
    pub fn event_time(&self, watermark: Option<i64>, open_windows: usize) {
        self.status.record_event_time(&self.name, watermark, open_windows);
    }
}

impl std::ops::Deref for ViewStatus {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for ViewStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", &*self.name)
    }
}

impl AsRef<str> for ViewStatus {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for ViewStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl From<&ViewStatus> for ViewStatus {
    fn from(view: &ViewStatus) -> ViewStatus {
        view.clone()
    }
}

/// A view reporting to a status of its own (operators' unit tests).
impl From<&str> for ViewStatus {
    fn from(name: &str) -> ViewStatus {
        ViewStatus::new(name, Arc::new(Status::default()))
    }
}
