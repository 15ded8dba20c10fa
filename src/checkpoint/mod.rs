//! Checkpoints: consistent snapshots of the whole state store at a checkpoint epoch, uploaded
//! to an object store (a local directory by default, S3), and restored from at start (ADR 11).
//!
//! - [`protocol`]: the pure decisions (what to upload, what to keep and delete, which
//!   checkpoint to restore), unit-tested;
//! - [`manifest`]: the versioned, checksummed list of a checkpoint's files, written last;
//! - [`remote`]: the object store, I/O only;
//! - [`checkpointer`]: takes a snapshot when the coordinator has every view at the epoch, and
//!   uploads it in the background;
//! - [`recovery`]: reads the checkpoints at start, downloads one into an empty data directory,
//!   and restores the store from the newest local checkpoint;
//! - [`admin`]: `weir checkpoint list | verify | restore`, for operators.
//!
//! Who calls it: `server::run` calls [`prepare`] before opening the store and
//! [`Prepared::checkpointer`] after; `dataflow::coordinator` calls the checkpointer at every
//! checkpoint barrier. Checkpoints cannot be turned off: a restart restores from them. An
//! interval of 0 takes them only when DDL completes and at a clean stop.

pub mod admin;
pub mod checkpointer;
pub mod manifest;
pub mod protocol;
pub mod recovery;
pub mod remote;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use checkpointer::Checkpointer;

use crate::catalog::change_log::LogEntry;
use crate::config::{CheckpointConfig, StorageConfig};
use crate::error::Result;
use crate::state::store::StateStore;
use crate::status::Status;
use crate::types::Epoch;

/// What start-up learnt from the object store and the local checkpoints before the state
/// store opened.
pub struct Prepared {
    found: Found,
    /// The highest epoch any checkpoint or logged write names: epochs continue after it.
    pub first_epoch: Epoch,
    /// The local restore: the writes after the checkpoint, to replay into the views.
    pub local: recovery::LocalRestore,
}

struct Found {
    remote: Arc<remote::Remote>,
    manifests: Vec<manifest::Manifest>,
    /// The checkpoint in the object store the store was restored from, if it is there.
    lineage: Option<manifest::Manifest>,
    incarnation: String,
    data_dir: PathBuf,
    config: CheckpointConfig,
    status: Arc<Status>,
}

/// Reads the checkpoints in the object store; when the data directory holds no store, downloads
/// the newest whole one into it; then restores the store from the newest local checkpoint.
/// Call before opening the store.
/// What it finds and restores is reported to `status`, which the checkpointer keeps.
pub async fn prepare(
    config: &CheckpointConfig,
    storage: &StorageConfig,
    data_dir: &Path,
    status: Arc<Status>,
) -> Result<Prepared> {
    let remote = Arc::new(remote::Remote::open(&config.url_for(data_dir), &config.s3)?);
    let (manifests, unreadable) = recovery::load_manifests(&remote).await?;
    let snapshots = data_dir.join("snapshots");
    let restored =
        recovery::restore_if_empty(&data_dir.join("state"), &snapshots, &remote, &manifests, &unreadable, &status)
            .await?;
    let (dir, storage_config, reported) = (data_dir.to_path_buf(), storage.clone(), Arc::clone(&status));
    let local = tokio::task::spawn_blocking(move || recovery::restore_local(&dir, &storage_config, &reported))
        .await
        .map_err(|e| crate::error::WeirError::internal(e.to_string()))??;
    let remote_epochs = manifests.iter().map(|m| m.epoch).chain(unreadable.iter().map(|(e, _)| *e));
    let first_epoch = remote_epochs.chain([local.last_epoch]).max().unwrap_or(0);
    let download = restored.as_ref().map(|r| r.seconds).unwrap_or(0.0);
    crate::metrics::RECOVERY_SECONDS.set(download + local.seconds);
    // The store now continues the checkpoint it was restored from: its files reuse that
    // checkpoint's objects, and the files it makes from now on are a new life's, whose numbers
    // may repeat those of files the lost life made (and perhaps uploaded).
    let lineage = match &restored {
        Some(r) => Some(r.manifest.clone()),
        None => local.epoch.and_then(|e| manifests.iter().find(|m| m.epoch == e).cloned()),
    };
    let found = Found {
        incarnation: recovery::incarnation(data_dir, restored.is_some() || local.epoch.is_some())?,
        remote,
        manifests,
        lineage,
        data_dir: data_dir.to_path_buf(),
        config: config.clone(),
        status,
    };
    Ok(Prepared { found, first_epoch, local })
}

impl Prepared {
    /// The checkpointer of the opened `store`, sweeping the objects no manifest names before
    /// its first upload; and the writes to replay into the restored views.
    pub fn checkpointer(self, store: Arc<dyn StateStore>) -> (Arc<Checkpointer>, Vec<LogEntry>) {
        let found = self.found;
        let checkpointer = Checkpointer::new(
            store,
            &found.data_dir,
            found.remote,
            &found.config,
            found.incarnation,
            found.manifests,
            found.lineage.as_ref(),
            found.status,
        );
        checkpointer.start_sweep();
        (checkpointer, self.local.replay)
    }
}
