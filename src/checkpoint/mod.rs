//! Checkpoints: consistent snapshots of the whole state store at a checkpoint epoch, uploaded
//! to an object store (a local directory by default, S3), and restored from at start (ADR 11).
//!
//! - [`protocol`]: the pure decisions (what to upload, what to keep and delete, which
//!   checkpoint to restore), unit-tested;
//! - [`manifest`]: the versioned, checksummed list of a checkpoint's files, written last;
//! - [`remote`]: the object store, I/O only;
//! - [`checkpointer`]: takes a snapshot when the coordinator has every view at the epoch, and
//!   uploads it in the background;
//! - [`recovery`]: reads the checkpoints at start and restores an empty data directory.
//!
//! Who calls it: `server::run` calls [`prepare`] before opening the store and
//! [`Prepared::checkpointer`] after; `dataflow::coordinator` calls the checkpointer at every
//! checkpoint barrier.

pub mod checkpointer;
pub mod manifest;
pub mod protocol;
pub mod recovery;
pub mod remote;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use checkpointer::Checkpointer;

use crate::error::Result;
use crate::state::store::StateStore;
use crate::types::Epoch;

/// `[checkpoint]` settings (flags `--checkpoint-url`, `--checkpoint-interval`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Where checkpoints go: `s3://bucket/prefix`, `file:///dir` or a directory; default
    /// `<data-dir>/checkpoints`.
    pub url: Option<String>,
    /// Least milliseconds between checkpoints; 0 turns checkpoints off.
    pub interval_ms: u64,
    /// Complete checkpoints kept in the object store (at least 1).
    pub keep: usize,
    /// Milliseconds the views may take to commit a checkpoint barrier before it is given up.
    pub timeout_ms: u64,
    /// Endpoint and credentials for an `s3://` URL (else the `AWS_*` environment variables).
    pub s3: remote::S3Settings,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig { url: None, interval_ms: 1000, keep: 3, timeout_ms: 60_000, s3: Default::default() }
    }
}

impl CheckpointConfig {
    pub fn interval(&self) -> Option<Duration> {
        (self.interval_ms > 0).then(|| Duration::from_millis(self.interval_ms))
    }

    /// The object store URL, the default resolved against `data_dir`.
    pub fn url_for(&self, data_dir: &Path) -> String {
        self.url.clone().unwrap_or_else(|| data_dir.join("checkpoints").to_string_lossy().into_owned())
    }
}

/// What start-up learnt from the object store before the state store opened.
pub struct Prepared {
    /// None when checkpoints are off.
    found: Option<Found>,
    /// The highest epoch any checkpoint names: epochs continue after it.
    pub first_epoch: Epoch,
}

struct Found {
    remote: Arc<remote::Remote>,
    manifests: Vec<manifest::Manifest>,
    restored: Option<recovery::Restored>,
    incarnation: String,
    data_dir: PathBuf,
    config: CheckpointConfig,
}

/// Reads the checkpoints in the object store and, when the data directory holds no store,
/// restores the newest whole one into it. Call before opening the store.
pub async fn prepare(config: &CheckpointConfig, data_dir: &Path) -> Result<Prepared> {
    if config.interval().is_none() {
        return Ok(Prepared { found: None, first_epoch: 0 });
    }
    let remote = Arc::new(remote::Remote::open(&config.url_for(data_dir), &config.s3)?);
    let (manifests, unreadable) = recovery::load_manifests(&remote).await?;
    let restored = recovery::restore_if_empty(&data_dir.join("state"), &remote, &manifests, &unreadable).await?;
    let first_epoch = manifests.iter().map(|m| m.epoch).chain(unreadable.iter().map(|(e, _)| *e)).max().unwrap_or(0);
    crate::metrics::RECOVERY_SECONDS.set(restored.as_ref().map(|r| r.seconds).unwrap_or(0.0));
    let found = Found {
        incarnation: recovery::incarnation(data_dir, restored.is_some())?,
        remote,
        manifests,
        restored,
        data_dir: data_dir.to_path_buf(),
        config: config.clone(),
    };
    Ok(Prepared { found: Some(found), first_epoch })
}

impl Prepared {
    /// The checkpointer of the opened `store` (None when checkpoints are off), sweeping the
    /// objects no manifest names before its first upload.
    pub fn checkpointer(self, store: Arc<dyn StateStore>) -> Option<Arc<Checkpointer>> {
        let found = self.found?;
        let checkpointer = Checkpointer::new(
            store,
            &found.data_dir,
            found.remote,
            &found.config,
            found.incarnation,
            found.manifests,
            found.restored.as_ref().map(|r| &r.manifest),
        );
        checkpointer.start_sweep();
        Some(checkpointer)
    }
}
