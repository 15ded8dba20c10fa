//! [`Checkpointer`]: takes checkpoint `e` once every view has committed it (the coordinator
//! calls [`Checkpointer::take`] under its injection lock), then uploads it in the background.
//!
//! Taking is a RocksDB checkpoint of the whole store into `<data-dir>/snapshots/<e>`: memtables
//! flushed, SST and blob files hard-linked, no copying, while the dataflow keeps running.
//! Uploading sends only the files the object store does not hold yet
//! ([`protocol::plan_upload`]), then writes the manifest last with a conditional put; only then
//! is the checkpoint complete. Then the retention rule ([`protocol::retention`]) deletes
//! manifests beyond the newest `keep` and the objects only they named, and local snapshots
//! other than the newest are removed. One upload runs at a time; the coordinator does not ask
//! for a checkpoint while one runs ([`Checkpointer::upload_running`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::manifest::{FileEntry, Manifest, FORMAT};
use super::protocol::{self, LocalFile};
use super::remote::Remote;
use crate::error::{Result, WeirError};
use crate::state::store::StateStore;
use crate::system::{self, CheckpointRecord};
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
    incarnation: String,
    uploaded: Mutex<Uploaded>,
    uploading: AtomicBool,
    last_taken: AtomicU64,
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Checkpointer {
    /// A checkpointer for `store`, whose life is `incarnation`, uploading to `remote`.
    /// `manifests` are the complete checkpoints found there; the newest of them taken by this
    /// incarnation, or `restored` (the one the store was just restored from), says which files
    /// the object store already holds.
    pub fn new(
        store: Arc<dyn StateStore>,
        data_dir: &Path,
        remote: Arc<Remote>,
        keep: usize,
        incarnation: String,
        manifests: Vec<Manifest>,
        restored: Option<&Manifest>,
    ) -> Arc<Checkpointer> {
        let mut manifests = manifests;
        manifests.sort_by_key(|m| m.epoch);
        let lineage = restored.or_else(|| manifests.iter().rev().find(|m| m.incarnation == incarnation));
        let files = lineage.map(|m| m.files.iter().map(|f| (f.name.clone(), f.clone())).collect()).unwrap_or_default();
        let last = manifests.last().map(|m| m.epoch).unwrap_or(0);
        crate::metrics::CHECKPOINT_LAST_COMPLETE_EPOCH.set(last as i64);
        for m in &manifests {
            system::record_checkpoint(CheckpointRecord {
                epoch: m.epoch,
                status: "complete".into(),
                started_at_micros: m.taken_at_micros,
                finished_at_micros: None,
                duration_ms: None,
                bytes_uploaded: None,
                files_uploaded: None,
                files: m.files.len() as u64,
                state_bytes: m.state_bytes(),
                detail: "found in the object store at start".into(),
            });
        }
        Arc::new(Checkpointer {
            store,
            snapshots: data_dir.join("snapshots"),
            remote,
            keep: keep.max(1),
            incarnation,
            uploaded: Mutex::new(Uploaded { files, manifests }),
            uploading: AtomicBool::new(false),
            last_taken: AtomicU64::new(last),
        })
    }

    /// Whether an upload is running (a checkpoint asked for now would queue behind it).
    pub fn upload_running(&self) -> bool {
        self.uploading.load(Ordering::SeqCst)
    }

    /// The epoch of the newest checkpoint taken (snapshot made; maybe not uploaded yet).
    pub fn last_taken(&self) -> Epoch {
        self.last_taken.load(Ordering::SeqCst)
    }

    /// The epoch of the newest complete checkpoint (0: none).
    pub fn last_complete(&self) -> Epoch {
        self.uploaded.lock().manifests.last().map(|m| m.epoch).unwrap_or(0)
    }

    /// Records checkpoint `epoch` as failed before its snapshot was taken.
    pub fn record_failure(&self, epoch: Epoch, why: String) {
        tracing::warn!(epoch, "checkpoint failed: {why}");
        crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["failed"]).inc();
        system::record_checkpoint(CheckpointRecord::failed(epoch, now_micros(), why));
    }

    /// Snapshots the store as of now (every view has committed `epoch`) and starts uploading
    /// the snapshot. Returns once the snapshot is taken.
    pub async fn take(self: Arc<Self>, epoch: Epoch, catalog_version: u64, injected_at: Instant) -> Result<()> {
        let started_at = now_micros();
        let dir = self.snapshots.join(format!("{epoch:020}"));
        let store = Arc::clone(&self.store);
        let target = dir.clone();
        tokio::task::spawn_blocking(move || {
            // A directory left by a crash during an earlier attempt at this epoch.
            let _ = std::fs::remove_dir_all(&target);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| WeirError::io(format!("{}: {e}", parent.display())))?;
            }
            store.checkpoint(&target)
        })
        .await
        .map_err(|e| WeirError::internal(e.to_string()))??;
        self.last_taken.store(epoch, Ordering::SeqCst);
        self.uploading.store(true, Ordering::SeqCst);
        system::record_checkpoint(CheckpointRecord {
            epoch,
            status: "uploading".into(),
            started_at_micros: started_at,
            ..CheckpointRecord::failed(epoch, started_at, String::new())
        });
        let this = Arc::clone(&self);
        tokio::spawn(async move {
            let outcome = this.upload(epoch, &dir, catalog_version, started_at).await;
            let record = match outcome {
                Ok(record) => {
                    crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["complete"]).inc();
                    crate::metrics::CHECKPOINT_SECONDS.observe(injected_at.elapsed().as_secs_f64());
                    crate::metrics::CHECKPOINT_LAST_COMPLETE_EPOCH.set(epoch as i64);
                    this.remove_snapshots_but(epoch);
                    record
                }
                Err(e) => {
                    tracing::error!(epoch, "checkpoint upload failed: {e}");
                    crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["failed"]).inc();
                    let _ = tokio::fs::remove_dir_all(&dir).await;
                    CheckpointRecord::failed(epoch, started_at, e.message)
                }
            };
            system::record_checkpoint(record);
            this.uploading.store(false, Ordering::SeqCst);
        });
        Ok(())
    }

    /// Uploads snapshot `dir` of `epoch`, writes its manifest, applies retention.
    async fn upload(
        &self,
        epoch: Epoch,
        dir: &Path,
        catalog_version: u64,
        started_at: i64,
    ) -> Result<CheckpointRecord> {
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
            epoch,
            status: "complete".into(),
            started_at_micros: started_at,
            finished_at_micros: Some(now_micros()),
            duration_ms: Some(((now_micros() - started_at) / 1000).max(0) as u64),
            bytes_uploaded: Some(bytes_uploaded),
            files_uploaded: Some(plan.upload.len() as u64),
            files: manifest.files.len() as u64,
            state_bytes: manifest.state_bytes(),
            detail: String::new(),
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
            system::forget_checkpoint(*old);
        }
        for object in &retention.objects {
            self.remote.delete(object).await?;
        }
        Ok(record)
    }

    /// Deletes objects no manifest names, left by uploads a crash cut short (run once at start).
    pub async fn sweep_orphans(&self) -> Result<usize> {
        let listed = [self.remote.list("files").await?, self.remote.list("epochs").await?].concat();
        let orphans = {
            let uploaded = self.uploaded.lock();
            protocol::orphans(&listed, &uploaded.manifests, &self.incarnation)
        };
        for object in &orphans {
            self.remote.delete(object).await?;
        }
        Ok(orphans.len())
    }

    /// Removes local snapshots other than `epoch`'s (the newest complete one).
    fn remove_snapshots_but(&self, epoch: Epoch) {
        let keep = format!("{epoch:020}");
        if let Ok(entries) = std::fs::read_dir(&self.snapshots) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy() != keep {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
    }
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
