//! Recovery at start: reading the checkpoints in the object store, restoring the newest whole
//! one into an empty data directory, and restoring the state store from the newest local
//! checkpoint ([`restore_local`]) at every start.
//!
//! A checkpoint is restored only if its manifest decodes (checksum, format) and every file it
//! names downloads with the manifest's size and crc32. Otherwise recovery says why, in the log
//! and in `weir_catalog.checkpoints`, and falls back to the previous checkpoint. If checkpoints
//! exist but none is whole, the server refuses to start rather than start empty: it never runs
//! on silently wrong state, and it deletes nothing.

use std::path::Path;
use std::time::Instant;

use futures::TryStreamExt;
use tokio::io::AsyncWriteExt;

use super::manifest::Manifest;
use super::protocol;
use super::remote::Remote;
use crate::catalog::change_log::{self, LogEntry};
use crate::config::StorageConfig;
use crate::error::{Result, SqlState, WeirError};
use crate::state::rocks::RocksStore;
use crate::state::store::StateStore;
use crate::status::{CheckpointRecord, Status};
use crate::types::Epoch;

/// The complete checkpoints in the object store, oldest first, and the reasons others could
/// not be read (epoch, why).
pub async fn load_manifests(remote: &Remote) -> Result<(Vec<Manifest>, Vec<(u64, String)>)> {
    let mut epochs: Vec<u64> =
        remote.list("manifests").await?.iter().filter_map(|k| protocol::manifest_epoch(k)).collect();
    epochs.sort_unstable();
    let mut manifests = Vec::new();
    let mut unreadable = Vec::new();
    for epoch in epochs {
        match remote.get(&protocol::manifest_key(epoch)).await.and_then(|bytes| Manifest::decode(&bytes)) {
            Ok(m) if m.epoch == epoch => manifests.push(m),
            Ok(m) => unreadable.push((epoch, format!("the manifest says epoch {}", m.epoch))),
            Err(e) => unreadable.push((epoch, e.message)),
        }
    }
    Ok((manifests, unreadable))
}

/// What a restore did.
pub struct Restored {
    pub manifest: Manifest,
    pub seconds: f64,
}

/// Downloads the newest whole checkpoint in `remote` as the local snapshot in `snapshots`
/// when the data directory holds neither a store (`state_dir`) nor a local snapshot; None when
/// it does, or when the object store has no checkpoint.
pub async fn restore_if_empty(
    state_dir: &Path,
    snapshots: &Path,
    remote: &Remote,
    manifests: &[Manifest],
    unreadable: &[(u64, String)],
    status: &Status,
) -> Result<Option<Restored>> {
    if state_dir.join("CURRENT").exists() || !super::checkpointer::list_snapshots(snapshots).is_empty() {
        return Ok(None);
    }
    let started = Instant::now();
    let by_epoch: std::collections::HashMap<u64, &Manifest> = manifests.iter().map(|m| (m.epoch, m)).collect();
    let all: Vec<u64> = manifests.iter().map(|m| m.epoch).chain(unreadable.iter().map(|(e, _)| *e)).collect();
    if all.is_empty() {
        return Ok(None);
    }
    let mut reasons = Vec::new();
    for epoch in protocol::recovery_order(all) {
        let outcome = match by_epoch.get(&epoch) {
            Some(manifest) => download_snapshot(remote, manifest, snapshots).await,
            None => Err(unreadable.iter().find(|(e, _)| *e == epoch).map(|(_, why)| why.clone()).unwrap_or_default()),
        };
        match outcome {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(state_dir);
                let manifest = (*by_epoch[&epoch]).clone();
                let seconds = started.elapsed().as_secs_f64();
                let mut detail = format!("downloaded into an empty data directory from {}", remote.url);
                if !reasons.is_empty() {
                    detail.push_str(&format!(" after skipping {}", reasons.join("; ")));
                }
                tracing::info!(epoch, seconds, "{detail}");
                status.record_checkpoint(CheckpointRecord {
                    detail,
                    files: manifest.files.len() as u64,
                    state_bytes: manifest.state_bytes(),
                    ..CheckpointRecord::new(epoch, "downloaded", manifest.taken_at_micros)
                });
                return Ok(Some(Restored { manifest, seconds }));
            }
            Err(why) => {
                tracing::warn!(epoch, "checkpoint cannot be restored, falling back to the previous one: {why}");
                status.record_checkpoint(CheckpointRecord::failed(
                    epoch,
                    chrono::Utc::now().timestamp_micros(),
                    format!("not restorable: {why}"),
                ));
                reasons.push(format!("checkpoint {epoch} ({why})"));
            }
        }
    }
    Err(WeirError::new(
        SqlState::DATA_CORRUPTED,
        format!("no checkpoint in {} can be restored: {}", remote.url, reasons.join("; ")),
    )
    .with_hint("Nothing was deleted. Point --checkpoint-url elsewhere, or repair the object store."))
}

/// Downloads `manifest`'s checkpoint as the local snapshot of its epoch in `snapshots` (a
/// directory beside it first, moved into place once every file checks out; removed if one does
/// not), where the next start restores the store from it.
pub async fn download_snapshot(
    remote: &Remote,
    manifest: &Manifest,
    snapshots: &Path,
) -> std::result::Result<(), String> {
    let target = snapshots.join(super::checkpointer::snapshot_name(manifest.epoch));
    let staging = target.with_extension("tmp");
    if let Err(why) = download(remote, manifest, Some(&staging)).await {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(why);
    }
    std::fs::rename(&staging, &target).map_err(|e| format!("cannot move the downloaded checkpoint into place: {e}"))
}

/// Reads every file of `manifest` from the object store, checking sizes and checksums, and
/// writes them into a fresh `dir` if given (else only checks them: `weir checkpoint verify`).
pub async fn download(remote: &Remote, manifest: &Manifest, dir: Option<&Path>) -> std::result::Result<(), String> {
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    for entry in &manifest.files {
        let mut stream = remote.get_stream(&entry.object).await.map_err(|e| e.message)?;
        let mut file = match dir {
            Some(dir) => {
                let path = dir.join(&entry.name);
                let file = tokio::fs::File::create(&path).await.map_err(|e| format!("{}: {e}", path.display()))?;
                Some((file, path))
            }
            None => None,
        };
        let mut crc = crc32fast::Hasher::new();
        let mut size = 0u64;
        while let Some(chunk) = stream.try_next().await.map_err(|e| format!("{}: {e}", entry.object))? {
            crc.update(&chunk);
            size += chunk.len() as u64;
            if let Some((file, path)) = file.as_mut() {
                file.write_all(&chunk).await.map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        if let Some((file, path)) = file.as_mut() {
            file.flush().await.map_err(|e| format!("{}: {e}", path.display()))?;
        }
        protocol::verify(entry, size, crc.finalize())?;
    }
    Ok(())
}

/// What [`restore_local`] did.
pub struct LocalRestore {
    /// The checkpoint the store now holds; None when there was none (a new data directory).
    pub epoch: Option<Epoch>,
    /// The change log after that checkpoint: the writes to replay into the restored views.
    pub replay: Vec<LogEntry>,
    /// The highest epoch in the store's log or checkpoint: epochs continue after it.
    pub last_epoch: Epoch,
    pub seconds: f64,
}

/// Puts the state store in `data_dir` back at its newest local checkpoint, with every
/// acknowledged write after it (ADR 11). Blocking; call before the store opens.
///
/// The live store holds every acknowledged write (through the write-ahead log) but its views
/// at no one epoch. So: the change log after the newest local snapshot is read from it; the
/// snapshot is hard-linked into `state.restoring`; the logged writes it lacks are applied there;
/// a marker says it is whole; then it replaces `state`. A crash at any point leaves either the
/// old store (the restore runs again) or the whole new one (the marker finishes the swap).
/// A snapshot that cannot be opened is passed over for the one before; if none opens, the
/// server refuses to start and deletes nothing.
pub fn restore_local(data_dir: &Path, storage: &StorageConfig, status: &Status) -> Result<LocalRestore> {
    let started = Instant::now();
    let state = data_dir.join("state");
    let staging = data_dir.join("state.restoring");
    let old = data_dir.join("state.old");
    let snapshots = data_dir.join("snapshots");
    let io = |path: &Path, e: std::io::Error| WeirError::io(format!("{}: {e}", path.display()));
    // A swap a crash interrupted: the new store was whole.
    if !state.join("CURRENT").exists() && staging.join(RESTORED_MARKER).exists() {
        std::fs::rename(&staging, &state).map_err(|e| io(&staging, e))?;
    }
    let _ = std::fs::remove_file(state.join(RESTORED_MARKER));
    for leftover in [&staging, &old] {
        if leftover.exists() {
            std::fs::remove_dir_all(leftover).map_err(|e| io(leftover, e))?;
        }
    }
    if let Ok(entries) = std::fs::read_dir(&snapshots) {
        for entry in entries.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let mut epochs = super::checkpointer::list_snapshots(&snapshots);
    epochs.sort_unstable_by(|a, b| b.cmp(a));
    if epochs.is_empty() {
        return Ok(LocalRestore { epoch: None, replay: vec![], last_epoch: 0, seconds: 0.0 });
    }
    // Every logged write the live store has, oldest first.
    let logged = if state.join("CURRENT").exists() {
        let live = RocksStore::open(&state, storage)?;
        change_log::read_after(&live, 0)?
    } else {
        vec![]
    };
    let mut reasons = Vec::new();
    for &epoch in &epochs {
        let snapshot = snapshots.join(super::checkpointer::snapshot_name(epoch));
        match restore_snapshot(&snapshot, &staging, storage, &logged, epoch) {
            Ok(applied) => {
                let _ = std::fs::remove_dir_all(&old);
                if state.exists() {
                    std::fs::rename(&state, &old).map_err(|e| io(&state, e))?;
                }
                std::fs::rename(&staging, &state).map_err(|e| io(&staging, e))?;
                let _ = std::fs::remove_file(state.join(RESTORED_MARKER));
                let _ = std::fs::remove_dir_all(&old);
                let replay: Vec<LogEntry> = logged.into_iter().filter(|e| e.epoch > epoch).collect();
                let last_epoch = replay.iter().map(|e| e.epoch).max().unwrap_or(epoch).max(epoch);
                let seconds = started.elapsed().as_secs_f64();
                let mut detail = format!(
                    "restored at start; {} logged writes after it ({applied} applied again), replayed into the views",
                    replay.len()
                );
                if !reasons.is_empty() {
                    detail.push_str(&format!("; passed over {}", reasons.join("; ")));
                }
                tracing::info!(epoch, seconds, "{detail}");
                status.record_checkpoint(CheckpointRecord {
                    detail,
                    ..CheckpointRecord::new(epoch, "restored", chrono::Utc::now().timestamp_micros())
                });
                return Ok(LocalRestore { epoch: Some(epoch), replay, last_epoch, seconds });
            }
            Err(e) => {
                tracing::error!(epoch, "local checkpoint cannot be restored, trying the one before: {e}");
                let _ = std::fs::remove_dir_all(&staging);
                reasons.push(format!("checkpoint {epoch} ({})", e.message));
            }
        }
    }
    Err(WeirError::new(
        SqlState::DATA_CORRUPTED,
        format!("no local checkpoint in {} can be restored: {}", snapshots.display(), reasons.join("; ")),
    )
    .with_hint("Nothing was deleted. Move the data directory aside to restore from the object store."))
}

/// The file that says `state.restoring` is whole.
const RESTORED_MARKER: &str = "WEIR_RESTORED";

/// Builds `staging` from `snapshot` (of checkpoint `epoch`) plus the writes of `logged` after
/// it that it lacks; marks it whole. Returns how many writes it applied.
fn restore_snapshot(
    snapshot: &Path,
    staging: &Path,
    storage: &StorageConfig,
    logged: &[LogEntry],
    epoch: Epoch,
) -> Result<usize> {
    let io = |path: &Path, e: std::io::Error| WeirError::io(format!("{}: {e}", path.display()));
    let _ = std::fs::remove_dir_all(staging);
    std::fs::create_dir_all(staging).map_err(|e| io(staging, e))?;
    for entry in std::fs::read_dir(snapshot).map_err(|e| io(snapshot, e))? {
        let entry = entry.map_err(|e| io(snapshot, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let target = staging.join(&name);
        // Table and blob files never change: linked. The rest (MANIFEST, CURRENT, OPTIONS)
        // RocksDB may write to: copied, so the snapshot stays as it was.
        if name.ends_with(".sst") || name.ends_with(".blob") {
            std::fs::hard_link(entry.path(), &target).map_err(|e| io(&target, e))?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(|e| io(&target, e))?;
        }
    }
    let restored = RocksStore::open(staging, storage)?;
    let mut applied = 0;
    for entry in logged.iter().filter(|e| e.epoch > epoch) {
        applied += change_log::apply_if_missing(&restored, entry)? as usize;
    }
    restored.persist()?;
    drop(restored);
    let marker = staging.join(RESTORED_MARKER);
    std::fs::write(&marker, b"").map_err(|e| io(&marker, e))?;
    std::fs::File::open(staging).and_then(|d| d.sync_all()).map_err(|e| io(staging, e))?;
    Ok(applied)
}

/// The life of the store in `data_dir` ([`protocol`]): read from `<data-dir>/incarnation`, or
/// new (and written) when the store was just restored or has none yet.
pub fn incarnation(data_dir: &Path, new_life: bool) -> Result<String> {
    let path = data_dir.join("incarnation");
    if !new_life {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let text = text.trim();
            if !text.is_empty() {
                return Ok(text.to_string());
            }
        }
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let id = format!("{:016x}", (nanos as u64) ^ ((std::process::id() as u64) << 48));
    std::fs::create_dir_all(data_dir).map_err(|e| WeirError::io(format!("{}: {e}", data_dir.display())))?;
    std::fs::write(&path, &id).map_err(|e| WeirError::io(format!("{}: {e}", path.display())))?;
    Ok(id)
}
