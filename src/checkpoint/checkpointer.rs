//! [`Checkpointer`]: takes checkpoint `e` once every view has committed it (the coordinator
//! calls [`Checkpointer::take`] under its injection lock), then uploads it in the background.
//!
//! Taking is a RocksDB checkpoint of the whole store into `<data-dir>/snapshots/<e>.tmp`,
//! renamed to `<data-dir>/snapshots/<e>` once whole: memtables flushed, SST and blob files
//! hard-linked, no copying, while the dataflow keeps running. A local snapshot is what a
//! restart restores from (`recovery::restore_local`); the newest [`LOCAL_KEPT`] are kept.
//! Uploading sends only the files the object store does not hold yet
//! ([`protocol::plan_upload`]), then writes the manifest last with a conditional put; only then
//! is the checkpoint complete in the object store. Then the retention rule
//! ([`protocol::retention`]) deletes manifests beyond the newest `keep` and the objects only
//! they named. One upload runs at a time, and none while the start-up sweep of unreferenced
//! objects runs: a snapshot taken meanwhile (DDL asks for checkpoints whenever it completes)
//! stays local only, and the coordinator does not start a periodic checkpoint while the
//! checkpointer is busy ([`Checkpointer::due`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use std::sync::atomic::AtomicU64;

use super::manifest::{FileEntry, Manifest, FORMAT};
use super::protocol::{self, LocalFile};
use super::remote::Remote;
use crate::config::CheckpointConfig;
use crate::error::{Result, WeirError};
use crate::state::store::StateStore;
use crate::status::{CheckpointRecord, Status};
use crate::types::Epoch;

/// What the object store holds, as this store knows it.
#[derive(Default)]
struct Uploaded {
    /// The files of the newest checkpoint of this store's lineage, by local name.
    files: HashMap<String, FileEntry>,
    /// Every complete checkpoint in the object store, oldest first.
    manifests: Vec<Manifest>,
}

pub struct Checkpointer {
    store: Arc<dyn StateStore>,
    snapshots: PathBuf,
    remote: Arc<Remote>,
    keep: usize,
    /// The least time between checkpoints.
    pub interval: Duration,
    /// How long the views may take to commit a checkpoint barrier before it is given up.
    pub timeout: Duration,
    incarnation: String,
    uploaded: Mutex<Uploaded>,
    /// An upload, or the start-up sweep, is running: at most one at a time.
    busy: AtomicBool,
    /// The epoch of the newest local snapshot.
    local_epoch: AtomicU64,
    /// The epoch of the snapshot being uploaded (0: none), kept locally until it is done.
    uploading: AtomicU64,
    /// The newest snapshot, when it was kept local only because an upload was running: what
    /// [`Checkpointer::upload_pending`] uploads at a clean stop.
    pending: Mutex<Option<PendingUpload>>,
    /// Where checkpoints are reported (`weir_catalog.checkpoints`).
    status: Arc<Status>,
}

/// A local snapshot not uploaded: its epoch and what its manifest and record need.
#[derive(Clone, Copy)]
struct PendingUpload {
    epoch: Epoch,
    catalog_version: u64,
    started_at: i64,
    injected_at: Instant,
}

/// Local snapshots kept: the newest, and the one before in case the newest cannot be opened.
pub const LOCAL_KEPT: usize = 2;

/// The directory name of epoch `epoch`'s local snapshot.
pub fn snapshot_name(epoch: Epoch) -> String {
    format!("{epoch:020}")
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Checkpointer {
    /// A checkpointer for `store`, whose life is `incarnation`, uploading to `remote` as
    /// `config` says. `manifests` are the complete checkpoints found there; the newest of them
    /// taken by this incarnation, or `restored` (the one the store was just restored from),
    /// says which files the object store already holds.
    pub fn new(
        store: Arc<dyn StateStore>,
        data_dir: &Path,
        remote: Arc<Remote>,
        config: &CheckpointConfig,
        incarnation: String,
        manifests: Vec<Manifest>,
        restored: Option<&Manifest>,
        status: Arc<Status>,
    ) -> Arc<Checkpointer> {
        let mut manifests = manifests;
        manifests.sort_by_key(|m| m.epoch);
        let lineage = restored.or_else(|| manifests.iter().rev().find(|m| m.incarnation == incarnation));
        let files = lineage.map(|m| m.files.iter().map(|f| (f.name.clone(), f.clone())).collect()).unwrap_or_default();
        let last = manifests.last().map(|m| m.epoch).unwrap_or(0);
        crate::metrics::CHECKPOINT_LAST_COMPLETE_EPOCH.set(last as i64);
        for m in &manifests {
            status.record_checkpoint(CheckpointRecord {
                files: m.files.len() as u64,
                state_bytes: m.state_bytes(),
                detail: "found in the object store at start".into(),
                ..CheckpointRecord::new(m.epoch, "complete", m.taken_at_micros)
            });
        }
        Arc::new(Checkpointer {
            store,
            snapshots: data_dir.join("snapshots"),
            remote,
            keep: config.keep,
            interval: config.interval().unwrap_or(Duration::MAX),
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            incarnation,
            uploaded: Mutex::new(Uploaded { files, manifests }),
            busy: AtomicBool::new(false),
            local_epoch: AtomicU64::new(0),
            uploading: AtomicU64::new(0),
            pending: Mutex::new(None),
            status,
        })
    }

    /// Whether a checkpoint is due, `since_last` after the last checkpoint barrier: the
    /// interval has passed, or one is `wanted` now (a bounded source finished), and no upload
    /// (or sweep) runs, else it is put off, not queued.
    pub fn due(&self, since_last: Duration, wanted: bool) -> bool {
        (wanted || since_last >= self.interval) && !self.busy.load(Ordering::SeqCst)
    }

    /// Waits until no upload (or sweep) runs, for at most the checkpoint timeout; whether none
    /// does. At shutdown: an upload under way would leave the last checkpoint local only, and
    /// the last one must reach the object store before the process ends.
    pub async fn wait_idle(&self) -> bool {
        let deadline = Instant::now() + self.timeout;
        while self.busy.load(Ordering::SeqCst) {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// The newest checkpoint in the object store (0: none).
    pub fn uploaded_epoch(&self) -> Epoch {
        self.uploaded.lock().manifests.last().map_or(0, |m| m.epoch)
    }

    /// Records checkpoint `epoch` as failed before its snapshot was taken.
    pub fn record_failure(&self, epoch: Epoch, why: String) {
        tracing::warn!(epoch, "checkpoint failed: {why}");
        crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["failed"]).inc();
        self.status.record_checkpoint(CheckpointRecord::failed(epoch, now_micros(), why));
    }

    /// The epoch of the newest local snapshot this process took.
    pub fn local_epoch(&self) -> Epoch {
        self.local_epoch.load(Ordering::SeqCst)
    }

    /// Snapshots the store as of now (every view has committed `epoch`) and starts uploading
    /// the snapshot unless an upload runs. Returns once the snapshot is taken.
    pub async fn take(self: Arc<Self>, epoch: Epoch, catalog_version: u64, injected_at: Instant) -> Result<()> {
        let started_at = now_micros();
        let snapshot_started = Instant::now();
        let dir = self.snapshots.join(snapshot_name(epoch));
        let store = Arc::clone(&self.store);
        let target = dir.clone();
        tokio::task::spawn_blocking(move || {
            let staging = target.with_extension("tmp");
            let io = |e: std::io::Error| WeirError::io(format!("{}: {e}", staging.display()));
            // A directory left by a crash during an earlier attempt at this epoch.
            let _ = std::fs::remove_dir_all(&staging);
            let _ = std::fs::remove_dir_all(&target);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io)?;
            }
            store.checkpoint(&staging)?;
            // Whole: only now does it count as a local checkpoint.
            std::fs::rename(&staging, &target).map_err(io)?;
            if let Some(parent) = target.parent() {
                std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(io)?;
            }
            Ok::<_, WeirError>(())
        })
        .await
        .map_err(|e| WeirError::internal(e.to_string()))??;
        crate::metrics::CHECKPOINT_SNAPSHOT_SECONDS.observe(snapshot_started.elapsed().as_secs_f64());
        self.local_epoch.fetch_max(epoch, Ordering::SeqCst);
        let upload = PendingUpload { epoch, catalog_version, started_at, injected_at };
        if self.busy.swap(true, Ordering::SeqCst) {
            self.status.record_checkpoint(CheckpointRecord {
                detail: "local only: an upload was running".into(),
                ..CheckpointRecord::new(epoch, "local", started_at)
            });
            *self.pending.lock() = Some(upload);
            self.remove_old_snapshots();
            return Ok(());
        }
        *self.pending.lock() = None;
        self.start_upload(upload);
        Ok(())
    }

    /// At a clean stop: starts uploading the newest snapshot if it was kept local only (an
    /// upload was running when it was taken) and no upload runs now; whether it did.
    pub fn upload_pending(self: &Arc<Self>) -> bool {
        let Some(upload) = *self.pending.lock() else { return false };
        if upload.epoch != self.local_epoch() || self.busy.swap(true, Ordering::SeqCst) {
            return false;
        }
        *self.pending.lock() = None;
        Arc::clone(self).start_upload(upload);
        true
    }

    /// Uploads snapshot `upload.epoch` in the background (the upload slot, `busy`, is taken).
    fn start_upload(self: Arc<Self>, upload: PendingUpload) {
        let PendingUpload { epoch, catalog_version, started_at, injected_at } = upload;
        let dir = self.snapshots.join(snapshot_name(epoch));
        self.uploading.store(epoch, Ordering::SeqCst);
        self.remove_old_snapshots();
        self.status.record_checkpoint(CheckpointRecord::new(epoch, "uploading", started_at));
        let this = Arc::clone(&self);
        crate::runtime::spawn_upload(async move {
            let outcome = this.upload(epoch, &dir, catalog_version, started_at, injected_at).await;
            let record = match outcome {
                Ok(record) => {
                    crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["complete"]).inc();
                    crate::metrics::CHECKPOINT_SECONDS.observe(injected_at.elapsed().as_secs_f64());
                    crate::metrics::CHECKPOINT_LAST_COMPLETE_EPOCH.set(epoch as i64);
                    record
                }
                Err(e) => {
                    tracing::error!(epoch, "checkpoint upload failed: {e}");
                    crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["failed"]).inc();
                    CheckpointRecord {
                        detail: format!("upload failed (kept locally): {}", e.message),
                        ..CheckpointRecord::failed(epoch, started_at, e.message.clone())
                    }
                }
            };
            this.status.record_checkpoint(record);
            this.uploading.store(0, Ordering::SeqCst);
            this.remove_old_snapshots();
            this.busy.store(false, Ordering::SeqCst);
        });
    }

    /// Uploads snapshot `dir` of `epoch`, writes its manifest, applies retention. Its duration
    /// counts from the barrier's injection, as `weir_checkpoint_duration_seconds` does.
    async fn upload(
        &self,
        epoch: Epoch,
        dir: &Path,
        catalog_version: u64,
        started_at: i64,
        injected_at: Instant,
    ) -> Result<CheckpointRecord> {
        if let Some(wait) = crate::fault::delay("checkpoint.slow_upload") {
            tokio::time::sleep(wait).await;
        }
        let files = list_files(dir)?;
        let plan = {
            let uploaded = self.uploaded.lock();
            protocol::plan_upload(&files, &uploaded.files, &self.incarnation, epoch)
        };
        let mut entries = plan.reuse;
        let mut bytes_uploaded = 0;
        for (file, key) in &plan.upload {
            let (size, crc32) = self.remote.upload_file(&dir.join(&file.name), key).await?;
            bytes_uploaded += size;
            crate::metrics::CHECKPOINT_UPLOADED_BYTES_TOTAL.inc_by(size);
            entries.push(FileEntry { name: file.name.clone(), object: key.clone(), size, crc32 });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let manifest = Manifest {
            format: FORMAT,
            epoch,
            taken_at_micros: started_at,
            catalog_version,
            incarnation: self.incarnation.clone(),
            files: entries,
        };
        self.remote.put_new(&protocol::manifest_key(epoch), manifest.encode()).await?;
        let record = CheckpointRecord {
            finished_at_micros: Some(now_micros()),
            duration_ms: Some(injected_at.elapsed().as_millis() as u64),
            bytes_uploaded: Some(bytes_uploaded),
            files_uploaded: Some(plan.upload.len() as u64),
            files: manifest.files.len() as u64,
            state_bytes: manifest.state_bytes(),
            ..CheckpointRecord::new(epoch, "complete", started_at)
        };
        let retention = {
            let mut uploaded = self.uploaded.lock();
            uploaded.files = manifest.files.iter().map(|f| (f.name.clone(), f.clone())).collect();
            uploaded.manifests.push(manifest);
            let retention = protocol::retention(&uploaded.manifests, self.keep);
            uploaded.manifests.retain(|m| !retention.manifests.contains(&m.epoch));
            retention
        };
        // Manifests first: a crash in between leaves unreferenced objects (swept at the next
        // start), never a manifest without its files.
        for old in &retention.manifests {
            self.remote.delete(&protocol::manifest_key(*old)).await?;
            self.status.forget_checkpoint(*old);
        }
        for object in &retention.objects {
            self.remote.delete(object).await?;
        }
        Ok(record)
    }

    /// Deletes, in the background, the objects no manifest names (left by uploads a crash cut
    /// short). Run once at start; it holds the upload slot, so no checkpoint uploads files it
    /// could take for orphans.
    pub fn start_sweep(self: &Arc<Self>) {
        self.busy.store(true, Ordering::SeqCst);
        let this = Arc::clone(self);
        crate::runtime::spawn_upload(async move {
            match this.sweep_orphans().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(objects = n, "deleted checkpoint files no manifest names"),
                Err(e) => tracing::warn!("sweeping unreferenced checkpoint files failed: {e}"),
            }
            this.busy.store(false, Ordering::SeqCst);
        });
    }

    async fn sweep_orphans(&self) -> Result<usize> {
        let listed = [self.remote.list("files").await?, self.remote.list("epochs").await?].concat();
        let orphans = protocol::orphans(&listed, &self.uploaded.lock().manifests);
        for object in &orphans {
            self.remote.delete(object).await?;
        }
        Ok(orphans.len())
    }

    /// Removes local snapshots but the newest [`LOCAL_KEPT`] and the one being uploaded.
    /// Unfinished ones (`.tmp`) are left: one may be being taken; start-up removes the rest.
    fn remove_old_snapshots(&self) {
        let uploading = self.uploading.load(Ordering::SeqCst);
        let keep = protocol::local_snapshots_kept(&list_snapshots(&self.snapshots), LOCAL_KEPT, uploading);
        if let Ok(entries) = std::fs::read_dir(&self.snapshots) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".tmp") && !keep.iter().any(|e| snapshot_name(*e) == name) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }
}

/// The epochs of the whole local snapshots in `dir`, in no order.
pub fn list_snapshots(dir: &Path) -> Vec<Epoch> {
    let Ok(entries) = std::fs::read_dir(dir) else { return vec![] };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name.len() == 20).then(|| name.parse().ok()).flatten()
        })
        .collect()
}

/// The regular files of snapshot directory `dir`, with their sizes.
fn list_files(dir: &Path) -> Result<Vec<LocalFile>> {
    let io = |e: std::io::Error| WeirError::io(format!("{}: {e}", dir.display()));
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let meta = entry.metadata().map_err(io)?;
        if meta.is_file() {
            files.push(LocalFile { name: entry.file_name().to_string_lossy().into_owned(), size: meta.len() });
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}
