//! Recovery at start: reading the checkpoints in the object store, and restoring the state
//! store from the newest one that is whole when the data directory has none.
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
use crate::error::{Result, SqlState, WeirError};
use crate::system::{self, CheckpointRecord};

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

/// Restores `state_dir` from the newest whole checkpoint in `remote` when the directory holds
/// no store; None when it holds one, or when the object store has no checkpoint.
pub async fn restore_if_empty(
    state_dir: &Path,
    remote: &Remote,
    manifests: &[Manifest],
    unreadable: &[(u64, String)],
) -> Result<Option<Restored>> {
    if state_dir.join("CURRENT").exists() {
        return Ok(None);
    }
    let started = Instant::now();
    let by_epoch: std::collections::HashMap<u64, &Manifest> = manifests.iter().map(|m| (m.epoch, m)).collect();
    let all: Vec<u64> = manifests.iter().map(|m| m.epoch).chain(unreadable.iter().map(|(e, _)| *e)).collect();
    if all.is_empty() {
        return Ok(None);
    }
    let staging = state_dir.with_extension("restoring");
    let mut reasons = Vec::new();
    for epoch in protocol::recovery_order(all) {
        let outcome = match by_epoch.get(&epoch) {
            Some(manifest) => download(remote, manifest, &staging).await,
            None => Err(unreadable.iter().find(|(e, _)| *e == epoch).map(|(_, why)| why.clone()).unwrap_or_default()),
        };
        match outcome {
            Ok(()) => {
                let _ = std::fs::remove_dir_all(state_dir);
                std::fs::rename(&staging, state_dir)
                    .map_err(|e| WeirError::io(format!("cannot move the restored store into place: {e}")))?;
                let manifest = (*by_epoch[&epoch]).clone();
                let seconds = started.elapsed().as_secs_f64();
                let mut detail = format!("restored into an empty data directory from {}", remote.url);
                if !reasons.is_empty() {
                    detail.push_str(&format!(" after skipping {}", reasons.join("; ")));
                }
                tracing::info!(epoch, seconds, "{detail}");
                system::record_checkpoint(CheckpointRecord {
                    detail,
                    files: manifest.files.len() as u64,
                    state_bytes: manifest.state_bytes(),
                    ..CheckpointRecord::new(epoch, "restored", manifest.taken_at_micros)
                });
                return Ok(Some(Restored { manifest, seconds }));
            }
            Err(why) => {
                tracing::warn!(epoch, "checkpoint cannot be restored, falling back to the previous one: {why}");
                system::record_checkpoint(CheckpointRecord::failed(
                    epoch,
                    chrono::Utc::now().timestamp_micros(),
                    format!("not restorable: {why}"),
                ));
                reasons.push(format!("checkpoint {epoch} ({why})"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&staging);
    Err(WeirError::new(
        SqlState::DATA_CORRUPTED,
        format!("no checkpoint in {} can be restored: {}", remote.url, reasons.join("; ")),
    )
    .with_hint("Nothing was deleted. Point --checkpoint-url elsewhere, or repair the object store."))
}

/// Downloads every file of `manifest` into a fresh `dir`, checking sizes and checksums.
async fn download(remote: &Remote, manifest: &Manifest, dir: &Path) -> std::result::Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in &manifest.files {
        let mut stream = remote.get_stream(&entry.object).await.map_err(|e| e.message)?;
        let path = dir.join(&entry.name);
        let mut file = tokio::fs::File::create(&path).await.map_err(|e| format!("{}: {e}", path.display()))?;
        let mut crc = crc32fast::Hasher::new();
        let mut size = 0u64;
        while let Some(chunk) = stream.try_next().await.map_err(|e| format!("{}: {e}", entry.object))? {
            crc.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk).await.map_err(|e| format!("{}: {e}", path.display()))?;
        }
        file.flush().await.map_err(|e| format!("{}: {e}", path.display()))?;
        protocol::verify(entry, size, crc.finalize())?;
    }
    Ok(())
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
