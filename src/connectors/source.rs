//! The source runtime: a task per source that asks its connector's [`SourceReader`] for the next
//! chunk of rows and stores it, with the reader's new offset, in one atomic write (through the
//! relation's writer, so views reading the source get the rows as an INSERT's changes). A
//! replayed source ([`super::replay`]) stores the chunk's offsets and stamp instead of its rows.
//!
//! The position ([`Position`]: records read so far, and what else the connector needs, such as
//! Kafka's offset per partition) lives at meta key `source_offset/<relation id>`; a restarted
//! source continues from it. Connectors can read again from any offset they reported (a generator regenerates,
//! a file is re-read, a Kafka topic keeps its offsets), so chunks are written without the
//! write-ahead log: a crash may lose the latest chunks together with their offset, never one
//! without the other, and the source reads them again after the restart. Records the reader
//! could not decode go into the same write as dead letters. A bounded source (one that reports
//! it is done) tells the views reading it that no row follows ([`Writer::finish`]: their
//! watermark passes every row) and stops its task; rate limits are the reader's business (it
//! says how long to wait before the next chunk).
//!
//! Records that do not decode are dead letters by default; with `bad_data = 'fail'` the first
//! one stops the source instead (its position stays before the chunk, so a restart stops there
//! again), as a pipeline that must not run on partial input wants. Each source's state
//! (running, retrying with the reason, failed, finished) is in `weir_catalog.sources`.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use tokio::task::JoinHandle;

use crate::catalog::dead_letter::{self, DeadLetter};
use crate::catalog::dml::Writer;
use crate::catalog::replay::{self, Position};
use crate::catalog::rows;
use crate::catalog::{persist, Catalog, Relation};
use crate::error::{Result, SqlState, WeirError};
use crate::state::store::WriteBatch;
use crate::status::{SourceStatus, Status};
use crate::types::window::now_nanos;

/// What a reader produced.
pub enum Chunk {
    /// Rows, and the position after them.
    Rows(RecordBatch, Position),
    /// For a table with a primary key (`FORMAT UPSERT`): rows to store, replacing those of
    /// their keys; keys (the primary key's columns) whose rows go; the position after them. No
    /// key is in both.
    Keyed { upserts: RecordBatch, deleted: RecordBatch, position: Position },
    /// Nothing now; ask again after this long.
    Wait(Duration),
    /// The connector cannot be read now (a broker or server gone, say why); ask again after
    /// this long.
    Retry(Duration, String),
    /// The source is exhausted.
    Done,
}

/// A connector's reading side.
pub trait SourceReader: Send {
    /// The rows' columns.
    fn schema(&self) -> SchemaRef;

    /// Checks that the connector can be read now (CREATE SOURCE): a broker that answers, a
    /// topic that exists. Later failures are retried by the reader.
    fn check(&mut self) -> Result<()> {
        Ok(())
    }

    /// Options the connector settled when it was made, to be kept with the source's options so
    /// that it reads the same way after a restart (an Avro source's reader schema, taken from
    /// the schema registry at CREATE).
    fn settled_options(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The rows after `from` (at most the connector's chunk size).
    fn read(&mut self, from: &Position) -> Result<Chunk>;

    /// Whether the connector produces the very same rows again for any range of offsets it has
    /// read ([`SourceReader::replay`]). Such a source stores where each chunk began and ended
    /// instead of its rows ([`super::replay`]).
    fn replayable(&self) -> bool {
        false
    }

    /// The rows from position `from` to position `to` again, as [`SourceReader::read`] gave
    /// them (only asked of a replayable connector, for ranges it has read).
    fn replay(&mut self, _from: &Position, _to: &Position) -> Result<RecordBatch> {
        Err(crate::error::WeirError::internal("this connector cannot produce its rows again"))
    }

    /// The rows of each of `ranges` (consecutive chunks, in order) again, one batch per range.
    /// A connector for which each read is a round trip (Kafka) reads them in one pass.
    fn replay_many(&mut self, ranges: &[(&Position, &Position)]) -> Result<Vec<RecordBatch>> {
        ranges.iter().map(|(from, to)| self.replay(from, to)).collect()
    }

    /// The records that could not be decoded while reading the last chunk of rows; they are
    /// stored with that chunk.
    fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        Vec::new()
    }
}

/// What a source does with a record its connector cannot decode (`bad_data = '...'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadData {
    /// Keep it in `weir_catalog.dead_letters` and go on (the default).
    DeadLetter,
    /// Stop the source.
    Fail,
}

impl BadData {
    pub fn of(options: &crate::catalog::options::ConnectorOptions) -> Result<BadData> {
        match options.get("bad_data").map(str::to_ascii_lowercase).as_deref() {
            None | Some("dead_letter") => Ok(BadData::DeadLetter),
            Some("fail") => Ok(BadData::Fail),
            Some(other) => Err(crate::error::WeirError::new(
                crate::error::SqlState::INVALID_PARAMETER_VALUE,
                format!("bad_data must be 'dead_letter' or 'fail', not '{other}'"),
            )),
        }
    }
}

/// Updates a running source's status (none once [`forget`] ran: a dropped source's task may
/// still finish a read).
fn set_status(status: &Status, relation: &Relation, records: u64, state: &str, error: Option<String>) {
    if let Some(status) = status.sources.lock().get_mut(&relation.def.id) {
        (status.records, status.state, status.error) = (records, state.to_string(), error);
    }
}

/// Forgets a dropped source's status.
pub fn forget(status: &Status, source: u32) {
    status.sources.lock().remove(&source);
}

fn offset_key(relation: &Relation) -> Vec<u8> {
    persist::sequence_key(&format!("source_offset/{}", relation.def.id))
}

/// The stored position of a source (the start for a new one).
pub fn stored_position(catalog: &Catalog, relation: &Relation) -> Result<Position> {
    match catalog.store().get(&offset_key(relation))? {
        None => Ok(Position::default()),
        Some(bytes) => Position::decode(&bytes).ok_or_else(|| {
            crate::error::WeirError::new(
                crate::error::SqlState::DATA_CORRUPTED,
                format!("the stored position of source \"{}\" is corrupt", relation.def.name),
            )
        }),
    }
}

/// Writes the chunk of rows from position `from` to `to` with `wb` (the new position, the dead
/// letters) in one atomic write: the rows, or a replayed source's log entry, and either way the
/// rows' changes to the views reading the source.
async fn write_chunk(
    writer: &Writer,
    (batch, deleted): (RecordBatch, Option<RecordBatch>),
    mut wb: WriteBatch,
    (from, to): (&Position, &Position),
    read_at: std::time::Instant,
) -> Result<u64> {
    if let Some(deleted) = deleted {
        return writer.apply_keyed(&batch, deleted.columns(), wb, read_at).await;
    }
    if !writer.relation.def.replayed {
        return writer.append(&[batch], wb, read_at).await;
    }
    let chunk = replay::ChunkEntry { from: from.clone(), to: to.clone(), stamp: now_nanos() };
    // A chunk of no rows (only dead letters) has nothing to read again.
    if batch.num_rows() > 0 {
        replay::put_chunk(&mut wb, &writer.relation, &chunk);
    }
    let rows = rows::rows_stamped_at(&writer.relation, &batch, chunk.stamp)?;
    writer.announce(rows, wb, read_at, chunk).await
}

/// Stores a chunk read from position `from` up to `to`: its rows (and, for a keyed chunk, the
/// keys it deletes) with the new position and the chunk's dead letters `dead`, in one atomic
/// write; or, with `bad_data = 'fail'` and a dead letter, nothing. Err says why the source
/// must stop, or (53100) that it must wait for the disk to take writes again.
async fn store_chunk(
    writer: &Writer,
    rows: (RecordBatch, Option<RecordBatch>),
    dead: Vec<DeadLetter>,
    bad_data: BadData,
    (from, to): (&Position, &Position),
    read_at: std::time::Instant,
) -> Result<()> {
    if let (BadData::Fail, Some(first)) = (bad_data, dead.first()) {
        return Err(WeirError::new(
            SqlState::INVALID_TEXT_REPRESENTATION,
            format!("record {} could not be decoded (bad_data = 'fail'): {}", first.position, first.error),
        ));
    }
    // The chunk and its offset need no write-ahead log: losing both in a crash only sends the
    // source back to an earlier offset, and it reads them again.
    let mut wb = WriteBatch { skip_wal: true, ..Default::default() };
    wb.put(offset_key(&writer.relation), to.encode());
    for letter in &dead {
        dead_letter::put(&mut wb, writer.relation.def.id, letter)?;
    }
    let count = (rows.0.num_rows() + rows.1.as_ref().map_or(0, |d| d.num_rows())) as u64;
    write_chunk(writer, rows, wb, (from, to), read_at).await.map_err(|e| match e.state {
        SqlState::DISK_FULL => e,
        _ => WeirError::new(e.state, format!("storing rows failed: {}", e.message)),
    })?;
    let name = &writer.relation.def.name;
    crate::metrics::SOURCE_ROWS_TOTAL.with_label_values(&[name]).inc_by(count);
    if !dead.is_empty() {
        tracing::warn!(source = %name, count = dead.len(), first = %dead[0].error, "records kept as dead letters");
        crate::metrics::SOURCE_DEAD_LETTERS_TOTAL.with_label_values(&[name]).inc_by(dead.len() as u64);
    }
    Ok(())
}

/// Starts the task that feeds `relation` from `reader`.
pub fn start(
    catalog: Arc<Catalog>,
    relation: Arc<Relation>,
    mut reader: Box<dyn SourceReader>,
) -> Result<JoinHandle<()>> {
    let mut position = stored_position(&catalog, &relation)?;
    let bad_data = BadData::of(relation.def.connector.as_ref().expect("a source has options"))?;
    let writer = Writer::new(&catalog, Arc::clone(&relation));
    let name = relation.def.name.clone();
    let connector = relation.def.connector.as_ref().and_then(|o| o.get("connector")).unwrap_or_default();
    let status = Arc::clone(catalog.status());
    status.sources.lock().insert(
        relation.def.id,
        SourceStatus {
            name: name.clone(),
            connector: connector.to_string(),
            state: "running".into(),
            records: position.records,
            error: None,
        },
    );
    let span = tracing::info_span!("source", source = %name);
    Ok(crate::runtime::spawn(tracing::Instrument::instrument(
        async move {
            let failed = |position: &Position, why: String| {
                tracing::error!(source = %name, "source stopped: {why}");
                set_status(&status, &relation, position.records, "failed", Some(why));
            };
            let mut retrying = false;
            loop {
                let read_at = std::time::Instant::now();
                let chunk = tokio::task::block_in_place(|| reader.read(&position));
                let (rows, next) = match chunk {
                    Ok(Chunk::Rows(batch, next)) => ((batch, None), next),
                    Ok(Chunk::Keyed { upserts, deleted, position: next }) => ((upserts, Some(deleted)), next),
                    Ok(Chunk::Wait(pause)) => {
                        // No timer for no pause (a reader whose read waited already): a source
                        // stopped while reading must not make one as the runtime shuts down.
                        if pause.is_zero() {
                            tokio::task::yield_now().await;
                        } else {
                            tokio::time::sleep(pause).await;
                        }
                        continue;
                    }
                    Ok(Chunk::Retry(pause, why)) => {
                        if !retrying {
                            tracing::warn!(source = %name, "source cannot read, retrying every {pause:?}: {why}");
                        }
                        retrying = true;
                        crate::metrics::SOURCE_RETRIES_TOTAL.with_label_values(&[&name]).inc();
                        set_status(&status, &writer.relation, position.records, "retrying", Some(why));
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    Ok(Chunk::Done) => {
                        tracing::info!(source = %name, records = position.records, "source finished");
                        writer.finish().await;
                        set_status(&status, &writer.relation, position.records, "finished", None);
                        return;
                    }
                    Err(e) => return failed(&position, e.message),
                };
                let dead = reader.take_dead_letters();
                // While the disk is full the source waits (its input waits where it is: the
                // topic, the file), trying the same chunk again each second.
                loop {
                    let stored =
                        store_chunk(&writer, rows.clone(), dead.clone(), bad_data, (&position, &next), read_at).await;
                    match stored {
                        Ok(()) => break,
                        Err(e) if e.state == SqlState::DISK_FULL => {
                            set_status(&status, &writer.relation, position.records, "retrying", Some(e.message));
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                        Err(e) => return failed(&position, e.message),
                    }
                }
                position = next;
                if retrying {
                    retrying = false;
                    tracing::info!(source = %name, "source reading again");
                }
                set_status(&status, &writer.relation, position.records, "running", None);
            }
        },
        span,
    )))
}
