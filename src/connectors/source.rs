//! The source runtime: a task per source that asks its connector's [`SourceReader`] for the next
//! chunk of rows and stores it, with the reader's new offset, in one atomic write (through the
//! relation's writer, so views reading the source get the rows as an INSERT's changes). A
//! replayed source ([`super::replay`]) stores the chunk's offsets and stamp instead of its rows.
//!
//! The offset lives at meta key `source_offset/<relation id>`; a restarted source continues
//! from it. Connectors can read again from any offset they reported (a generator regenerates,
//! a file is re-read, a Kafka topic keeps its offsets), so chunks are written without the
//! write-ahead log: a crash may lose the latest chunks together with their offset, never one
//! without the other, and the source reads them again after the restart. Records the reader
//! could not decode go into the same write as dead letters. A bounded source (one that reports
//! it is done) tells the views reading it that no row follows ([`Writer::finish`]: their
//! watermark passes every row) and stops its task; rate limits are the reader's business (it
//! says how long to wait before the next chunk).

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use tokio::task::JoinHandle;

use super::dead_letter::{self, DeadLetter};
use super::replay;
use crate::catalog::dml::{self, Writer};
use crate::catalog::{persist, Catalog, Relation};
use crate::error::Result;
use crate::state::store::WriteBatch;
use crate::types::window::now_nanos;

/// What a reader produced.
pub enum Chunk {
    /// Rows, and the offset after them.
    Rows(RecordBatch, u64),
    /// Nothing now; ask again after this long.
    Wait(Duration),
    /// The source is exhausted.
    Done,
}

/// A connector's reading side.
pub trait SourceReader: Send {
    /// The rows' columns.
    fn schema(&self) -> SchemaRef;

    /// The rows after `offset` (at most the connector's chunk size).
    fn read(&mut self, offset: u64) -> Result<Chunk>;

    /// Whether the connector produces the very same rows again for any range of offsets it has
    /// read ([`SourceReader::replay`]). Such a source stores where each chunk began and ended
    /// instead of its rows ([`super::replay`]).
    fn replayable(&self) -> bool {
        false
    }

    /// The rows from offset `from` to offset `to` again, as [`SourceReader::read`] gave them
    /// (only asked of a replayable connector, for ranges it has read).
    fn replay(&mut self, _from: u64, _to: u64) -> Result<RecordBatch> {
        Err(crate::error::WeirError::internal("this connector cannot produce its rows again"))
    }

    /// The records that could not be decoded while reading the last chunk of rows; they are
    /// stored with that chunk.
    fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        Vec::new()
    }
}

fn offset_key(relation: &Relation) -> Vec<u8> {
    persist::sequence_key(&format!("source_offset/{}", relation.def.id))
}

/// The stored offset of a source (0 for a new one).
pub fn stored_offset(catalog: &Catalog, relation: &Relation) -> Result<u64> {
    persist::load_sequence(catalog.store().as_ref(), &format!("source_offset/{}", relation.def.id))
}

/// Writes the chunk of rows from offset `bounds.0` to `bounds.1` with `wb` (the new offset, the
/// dead letters) in one atomic write: the rows, or a replayed source's log entry, and either
/// way the rows' changes to the views reading the source.
async fn write_chunk(
    writer: &Writer,
    batch: RecordBatch,
    mut wb: WriteBatch,
    (from, to): (u64, u64),
    read_at: std::time::Instant,
) -> Result<u64> {
    if !writer.relation.def.replayed {
        return writer.append(&[batch], wb, read_at).await;
    }
    let stamp = now_nanos();
    // A chunk of no rows (only dead letters) has nothing to read again.
    if batch.num_rows() > 0 {
        replay::put_chunk(&mut wb, &writer.relation, from, to, stamp);
    }
    let rows = dml::rows_stamped_at(&writer.relation, &batch, stamp)?;
    writer.announce(rows, wb, read_at, (from, to, stamp)).await
}

/// Starts the task that feeds `relation` from `reader`.
pub fn start(
    catalog: Arc<Catalog>,
    relation: Arc<Relation>,
    mut reader: Box<dyn SourceReader>,
) -> Result<JoinHandle<()>> {
    let mut offset = stored_offset(&catalog, &relation)?;
    let writer = Writer::new(&catalog, Arc::clone(&relation));
    let name = relation.def.name.clone();
    Ok(tokio::spawn(async move {
        loop {
            let read_at = std::time::Instant::now();
            let chunk = tokio::task::block_in_place(|| reader.read(offset));
            match chunk {
                Ok(Chunk::Rows(batch, next)) => {
                    // The chunk and its offset need no write-ahead log: losing both in a crash
                    // only sends the source back to an earlier offset, and it reads them again.
                    let mut wb = WriteBatch { skip_wal: true, ..Default::default() };
                    wb.put(offset_key(&writer.relation), next.to_be_bytes().to_vec());
                    let dead = reader.take_dead_letters();
                    for letter in &dead {
                        if let Err(e) = dead_letter::put(&mut wb, writer.relation.def.id, letter) {
                            tracing::error!(source = %name, "source stopped: {e}");
                            return;
                        }
                    }
                    let rows = batch.num_rows() as u64;
                    if let Err(e) = write_chunk(&writer, batch, wb, (offset, next), read_at).await {
                        tracing::error!(source = %name, "source stopped: storing rows failed: {e}");
                        return;
                    }
                    crate::metrics::SOURCE_ROWS_TOTAL.with_label_values(&[&name]).inc_by(rows);
                    if !dead.is_empty() {
                        tracing::warn!(source = %name, count = dead.len(), first = %dead[0].error, "records kept as dead letters");
                        crate::metrics::SOURCE_DEAD_LETTERS_TOTAL.with_label_values(&[&name]).inc_by(dead.len() as u64);
                    }
                    offset = next;
                }
                Ok(Chunk::Wait(pause)) => tokio::time::sleep(pause).await,
                Ok(Chunk::Done) => {
                    tracing::info!(source = %name, offset, "source finished");
                    writer.finish().await;
                    return;
                }
                Err(e) => {
                    tracing::error!(source = %name, "source stopped: {e}");
                    return;
                }
            }
        }
    }))
}
