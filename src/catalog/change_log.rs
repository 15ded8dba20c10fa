//! The change log: every table's and source's writes since the newest checkpoint, by epoch
//! (ADR 11). It is what makes a restart exact without recomputing views.
//!
//! A checkpoint holds every view at epoch `e`, but tables keep taking writes while it is
//! taken, and acknowledged writes after it are only in the live store. So each statement
//! that changes a table (and each chunk a source stores) adds, in the very write batch that
//! changes the table, one entry: the batch's other writes, and the changes it publishes to
//! views. Its key is `[CHANGE_LOG_TABLE][epoch][relation id][sequence]`, where the epoch is the
//! one the change belongs to (`Relation::open_epoch`, read under the relation's write lock,
//! which the coordinator also holds while it moves a relation to the next epoch), so every
//! entry of an epoch `<= e` is in checkpoint `e`'s snapshot, and entries after it follow.
//!
//! At start ([`crate::checkpoint::recovery`]) the store is replaced by the newest checkpoint;
//! entries after it are read from the old store, their writes applied again where the
//! checkpoint lacks them, and ([`replay`]) their changes published to the restored views, in
//! log order, before any new write. When checkpoint `e` is taken, the entries up to the
//! checkpoint before `e` are deleted with one range delete ([`truncate_through`]), so a restart
//! that finds `e` damaged and restores the one before still has every write after it.
//!
//! A replayed source (the generator, immutable files) stores no rows: its entry names the
//! chunk (offsets and stamp) and the rows are produced again by its connector. The log is off
//! where nothing restarts from it (`weir bench`).
//!
//! Entry format: a [`record`](crate::state::record) with the writes, then the changes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Catalog, Relation};
use crate::catalog::replay::ChunkEntry;
use crate::error::{Result, SqlState, WeirError};
use crate::state::keys::{prefix_end, table_prefix, TableId, CHANGE_LOG_TABLE};
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::store::{ScanControl, StateStore, WriteBatch, WriteOp};
use crate::types::{ChangeBatch, Epoch, Message};

/// What views are told about a logged write.
#[derive(Debug, Clone)]
pub enum LoggedChanges {
    /// Nobody listened: no changes.
    None,
    /// The changes as published.
    Rows(ChangeBatch),
    /// A replayed source's chunk; its connector produces the rows again.
    Chunk(ChunkEntry),
}

impl LoggedChanges {
    /// What the entry holds, for logs.
    fn kind(&self) -> &'static str {
        match self {
            LoggedChanges::None => "none",
            LoggedChanges::Rows(_) => "rows",
            LoggedChanges::Chunk(_) => "chunk",
        }
    }
}

/// One entry of the log.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub key: Vec<u8>,
    /// The entry as stored.
    pub value: Vec<u8>,
    pub epoch: Epoch,
    pub relation: TableId,
    /// The statement's writes, without the entry itself.
    pub writes: Vec<WriteOp>,
    pub changes: LoggedChanges,
}

/// Orders entries within an epoch, across relations: commit order (unique within a process;
/// entries of another process are in other epochs, which only grow across restarts).
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

fn key(epoch: Epoch, relation: TableId, sequence: u64) -> Vec<u8> {
    [&table_prefix(CHANGE_LOG_TABLE)[..], &epoch.to_be_bytes(), &relation.to_be_bytes(), &sequence.to_be_bytes()]
        .concat()
}

/// Adds the entry of `wb`'s writes and `changes`, for `relation`'s current epoch, to `wb`.
/// Called under the relation's write lock, as the statement commits.
pub fn append(wb: &mut WriteBatch, relation: &Relation, changes: &LoggedChanges) -> Result<()> {
    let epoch = relation.open_epoch();
    let mut record = RecordWriter::default();
    record.u64(wb.ops.len() as u64);
    for op in &wb.ops {
        match op {
            WriteOp::Put(k, v) => record.u64(0).bytes(k).bytes(v),
            WriteOp::Delete(k) => record.u64(1).bytes(k),
            WriteOp::DeleteRange(start, end) => record.u64(2).bytes(start).bytes(end),
        };
    }
    match changes {
        LoggedChanges::None => {
            record.u64(0);
        }
        LoggedChanges::Rows(batch) => {
            record.u64(1).changes(batch)?;
        }
        LoggedChanges::Chunk(chunk) => {
            record.u64(2).bytes(&chunk.encode());
        }
    }
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(relation = relation.def.id, epoch, sequence, changes = changes.kind(), "logged");
    wb.put(key(epoch, relation.def.id, sequence), record.finish());
    Ok(())
}

fn corrupt(why: impl std::fmt::Display) -> WeirError {
    WeirError::new(SqlState::DATA_CORRUPTED, format!("the change log is corrupt: {why}"))
}

pub(crate) fn decode(key: &[u8], value: &[u8]) -> Result<LogEntry> {
    let rest = &key[4..];
    if rest.len() != 20 {
        return Err(corrupt("a key of the wrong length"));
    }
    let epoch = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
    let relation = u32::from_be_bytes(rest[8..12].try_into().expect("4 bytes"));
    let mut r = RecordReader::new(value, "the change log")?;
    let mut writes = Vec::new();
    for _ in 0..r.u64()? {
        writes.push(match r.u64()? {
            0 => WriteOp::Put(r.bytes()?, r.bytes()?.into()),
            1 => WriteOp::Delete(r.bytes()?),
            2 => WriteOp::DeleteRange(r.bytes()?, r.bytes()?),
            other => return Err(corrupt(format!("write kind {other}"))),
        });
    }
    let changes = match r.u64()? {
        0 => LoggedChanges::None,
        1 => LoggedChanges::Rows(r.changes()?),
        2 => LoggedChanges::Chunk(ChunkEntry::decode(&r.bytes()?, "the change log")?),
        other => return Err(corrupt(format!("changes kind {other}"))),
    };
    r.finish()?;
    Ok(LogEntry { key: key.to_vec(), value: value.to_vec(), epoch, relation, writes, changes })
}

/// The entries of epochs after `epoch`, in log order.
pub fn read_after(store: &dyn StateStore, epoch: Epoch) -> Result<Vec<LogEntry>> {
    let mut entries = Vec::new();
    store.scan_prefix(&table_prefix(CHANGE_LOG_TABLE), &mut |k, v| {
        if k.get(4..12).is_some_and(|e| u64::from_be_bytes(e.try_into().expect("8 bytes")) > epoch) {
            entries.push(decode(k, v)?);
        }
        Ok(ScanControl::Continue)
    })?;
    // In commit order: a transaction's entry carries writes to tables other than its own, so
    // key order (epoch, table, sequence) could apply an earlier write over a later one.
    entries.sort_by_key(|e| (e.epoch, sequence_of(&e.key)));
    Ok(entries)
}

/// The process-wide sequence number at the end of an entry's key.
fn sequence_of(key: &[u8]) -> u64 {
    key.len().checked_sub(8).and_then(|at| key[at..].try_into().ok()).map_or(0, u64::from_be_bytes)
}

/// Writes `entry` (its statement's writes and the entry itself) into `store` if `store` does
/// not hold it yet: a store restored from a checkpoint taken before the statement. Returns
/// whether it did.
pub fn apply_if_missing(store: &dyn StateStore, entry: &LogEntry) -> Result<bool> {
    if store.get(&entry.key)?.is_some() {
        return Ok(false);
    }
    let mut wb = WriteBatch { ops: entry.writes.clone(), skip_wal: false, epoch: None };
    wb.put(entry.key.clone(), entry.value.clone());
    store.write(wb)?;
    Ok(true)
}

/// Deletes the entries of every epoch up to `epoch` (checkpoint `epoch` holds them).
pub fn truncate_through(store: &dyn StateStore, epoch: Epoch) -> Result<()> {
    let start = table_prefix(CHANGE_LOG_TABLE).to_vec();
    let end = match epoch.checked_add(1) {
        Some(next) => [&start[..], &next.to_be_bytes()].concat(),
        None => prefix_end(&start).expect("the log's prefix is not all 0xff"),
    };
    let mut wb = WriteBatch::default();
    wb.delete_range(start, end);
    store.write(wb)
}

/// Publishes the changes of `entries` (read at start, after the checkpoint the store was
/// restored from) to their relations' subscribers, in log order: the restored views catch up
/// with every write made after the checkpoint. Called before sources start and before clients
/// connect.
pub async fn replay(catalog: &Arc<Catalog>, entries: Vec<LogEntry>) -> Result<()> {
    for entry in entries {
        tracing::debug!(relation = entry.relation, epoch = entry.epoch, changes = entry.changes.kind(), "replayed");
        let Some(relation) = catalog.by_id(entry.relation) else {
            // Dropped since (DDL completes with a checkpoint, so only before this one).
            continue;
        };
        let batch = match entry.changes {
            LoggedChanges::None => continue,
            LoggedChanges::Rows(batch) => batch,
            LoggedChanges::Chunk(chunk) => {
                let relation = Arc::clone(&relation);
                let rows = tokio::task::spawn_blocking(move || super::replay::chunk_rows(&relation, &chunk))
                    .await
                    .map_err(|e| WeirError::internal(e.to_string()))??;
                ChangeBatch::inserts(rows)
            }
        };
        if batch.is_empty() {
            continue;
        }
        let _guard = relation.write_lock.lock().await;
        catalog.changes.publish(relation.def.id, vec![Message::Data(batch)]).await;
    }
    Ok(())
}
