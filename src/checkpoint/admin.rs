//! `weir checkpoint list | verify | restore`: an operator's view of the checkpoint store, apart
//! from any running server. `list` shows the checkpoints there; `verify` reads every file of
//! one (or all) and checks it against its manifest; `restore` downloads a chosen checkpoint
//! into a new data directory, where a server started on it restores that checkpoint (the
//! start-up restore, [`super::recovery::restore_local`], does the rest).
//!
//! It reads the store only (restore writes only into the new directory), so it is safe beside
//! a running server. Called by `main` for the `checkpoint` command.

use std::path::Path;

use super::manifest::Manifest;
use super::recovery::{download, download_snapshot, load_manifests};
use super::remote::Remote;
use crate::config::CheckpointConfig;
use crate::error::{Result, SqlState, WeirError};
use crate::types::Epoch;

/// The store `config` names (for `data_dir`: its default place).
fn open(config: &CheckpointConfig, data_dir: &Path) -> Result<Remote> {
    Remote::open(&config.url_for(data_dir), &config.s3)
}

/// One line per checkpoint, oldest first: epoch, when taken, files, bytes, and whether its
/// manifest reads (a checkpoint whose manifest does not is listed with why).
pub async fn list(config: &CheckpointConfig, data_dir: &Path) -> Result<String> {
    let remote = open(config, data_dir)?;
    let (manifests, unreadable) = load_manifests(&remote).await?;
    let mut rows: Vec<(Epoch, String)> = manifests
        .iter()
        .map(|m| {
            let taken = chrono::DateTime::from_timestamp_micros(m.taken_at_micros)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            (m.epoch, format!("{:>20}  {taken:<19}  {:>6}  {:>14}  complete", m.epoch, m.files.len(), m.state_bytes()))
        })
        .collect();
    rows.extend(unreadable.iter().map(|(epoch, why)| (*epoch, format!("{epoch:>20}  unreadable: {why}"))));
    rows.sort_by_key(|(epoch, _)| *epoch);
    let mut out = format!("checkpoints in {}\n", remote.url);
    out.push_str(&format!("{:>20}  {:<19}  {:>6}  {:>14}  status\n", "epoch", "taken at (UTC)", "files", "bytes"));
    for (_, row) in rows {
        out.push_str(&row);
        out.push('\n');
    }
    Ok(out)
}

/// Checks `epoch` (every checkpoint when None) file by file against its manifest: one line
/// each, and whether all are whole.
pub async fn verify(config: &CheckpointConfig, data_dir: &Path, epoch: Option<Epoch>) -> Result<(String, bool)> {
    let remote = open(config, data_dir)?;
    let (manifests, unreadable) = load_manifests(&remote).await?;
    let mut out = String::new();
    let mut whole = true;
    let chosen: Vec<&Manifest> = manifests.iter().filter(|m| epoch.is_none_or(|e| m.epoch == e)).collect();
    for (e, why) in unreadable.iter().filter(|(e, _)| epoch.is_none_or(|want| *e == want)) {
        out.push_str(&format!("checkpoint {e}: broken: {why}\n"));
        whole = false;
    }
    if chosen.is_empty() && whole {
        return Err(no_checkpoint(&remote, epoch));
    }
    for manifest in chosen {
        match download(&remote, manifest, None).await {
            Ok(()) => out.push_str(&format!(
                "checkpoint {}: whole ({} files, {} bytes match their sizes and checksums)\n",
                manifest.epoch,
                manifest.files.len(),
                manifest.state_bytes()
            )),
            Err(why) => {
                out.push_str(&format!("checkpoint {}: broken: {why}\n", manifest.epoch));
                whole = false;
            }
        }
    }
    Ok((out, whole))
}

/// Downloads checkpoint `epoch` (the newest when None) into `to`, a data directory that holds
/// no store yet; says which and how to start a server on it.
pub async fn restore(config: &CheckpointConfig, data_dir: &Path, epoch: Option<Epoch>, to: &Path) -> Result<String> {
    let state = to.join("state");
    let snapshots = to.join("snapshots");
    let has_snapshots = std::fs::read_dir(&snapshots).is_ok_and(|mut entries| entries.next().is_some());
    if state.join("CURRENT").exists() || has_snapshots {
        return Err(WeirError::new(
            SqlState("55000"),
            format!("{} already holds a store: restore into a new data directory", to.display()),
        ));
    }
    let remote = open(config, data_dir)?;
    let (manifests, _) = load_manifests(&remote).await?;
    let manifest = match epoch {
        Some(e) => manifests.iter().find(|m| m.epoch == e),
        None => manifests.last(),
    }
    .ok_or_else(|| no_checkpoint(&remote, epoch))?;
    download_snapshot(&remote, manifest, &snapshots).await.map_err(|why| {
        WeirError::new(SqlState::DATA_CORRUPTED, format!("checkpoint {} cannot be restored: {why}", manifest.epoch))
    })?;
    Ok(format!(
        "restored checkpoint {} ({} files, {} bytes) into {}\nstart a server on it: weir --data-dir {} \
         --checkpoint-url <a store for its own checkpoints>\n",
        manifest.epoch,
        manifest.files.len(),
        manifest.state_bytes(),
        to.display(),
        to.display()
    ))
}

fn no_checkpoint(remote: &Remote, epoch: Option<Epoch>) -> WeirError {
    let what = epoch.map_or("no complete checkpoint".to_string(), |e| format!("no complete checkpoint {e}"));
    WeirError::new(SqlState("42704"), format!("{what} in {}", remote.url))
}
