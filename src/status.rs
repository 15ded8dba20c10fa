//! What the running server reports about itself, kept in memory while it runs: runtime errors
//! inside views, each view's event time, the checkpoints taken and restored, and each source's
//! and sink's state. The operators, the checkpointer and the connectors record here; `system`
//! presents it as the `weir_catalog` relations (and it describes this process only, so it is
//! not stored).
//!
//! A bottom-floor module: it imports only `types`, so anything may report to it.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use parking_lot::Mutex;

use crate::types::Epoch;

pub struct ErrorEntry {
    pub count: u64,
    pub last_micros: i64,
}

pub static VIEW_ERRORS: LazyLock<Mutex<BTreeMap<(String, String), ErrorEntry>>> = LazyLock::new(Default::default);

/// Records `count` failures of `message` in `view`.
pub fn record_view_error(view: &str, message: &str, count: u64) {
    let now = chrono::Utc::now().timestamp_micros();
    let mut errors = VIEW_ERRORS.lock();
    let entry =
        errors.entry((view.to_string(), message.to_string())).or_insert(ErrorEntry { count: 0, last_micros: now });
    entry.count += count;
    entry.last_micros = now;
}

#[derive(Default)]
pub struct EventTimeEntry {
    pub watermark_micros: Option<i64>,
    pub open_windows: u64,
    pub late_rows: u64,
}

pub static EVENT_TIME: LazyLock<Mutex<BTreeMap<String, EventTimeEntry>>> = LazyLock::new(Default::default);

/// Counts `count` late row copies of `view`.
pub fn record_late_rows(view: &str, count: u64) {
    EVENT_TIME.lock().entry(view.to_string()).or_default().late_rows += count;
}

/// A view's watermark (nanoseconds) and open windows at its last commit.
pub fn record_event_time(view: &str, watermark: Option<i64>, open_windows: usize) {
    let mut all = EVENT_TIME.lock();
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

pub static CHECKPOINTS: LazyLock<Mutex<std::collections::VecDeque<CheckpointRecord>>> = LazyLock::new(Default::default);

/// Records what happened to a checkpoint; a record of the same epoch and an unfinished status
/// (`uploading`) is replaced.
pub fn record_checkpoint(record: CheckpointRecord) {
    let mut all = CHECKPOINTS.lock();
    all.retain(|r| !(r.epoch == record.epoch && r.status == "uploading"));
    all.push_back(record);
    while all.len() > CHECKPOINT_HISTORY {
        all.pop_front();
    }
}

/// A checkpoint was deleted by retention: it is no longer listed as complete.
pub fn forget_checkpoint(epoch: u64) {
    CHECKPOINTS.lock().retain(|r| !(r.epoch == epoch && r.status == "complete"));
}

/// Forgets the errors of a dropped view.
pub fn forget_view(view: &str) {
    VIEW_ERRORS.lock().retain(|(v, _), _| v != view);
    EVENT_TIME.lock().remove(view);
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

/// Every running sink's status, by sink id: (name, status).
pub static SINKS: std::sync::LazyLock<Mutex<std::collections::BTreeMap<u32, (String, SinkStatus)>>> =
    std::sync::LazyLock::new(Default::default);

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

/// Every started source's status, by relation id.
pub static SOURCES: std::sync::LazyLock<parking_lot::Mutex<std::collections::BTreeMap<u32, SourceStatus>>> =
    std::sync::LazyLock::new(Default::default);
