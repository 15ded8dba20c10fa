//! Replayed sources: a source whose connector produces the very same rows again for any range
//! of offsets it has read (the Nexmark generator, from its seed) stores no rows. Per chunk it
//! stores where the chunk began and ended and the chunk's processing-time stamp; reading the
//! source's rows (a view's backfill, a view's rebuild at start, a SELECT) asks the connector for
//! those ranges again and stamps them as they were stamped the first time.
//!
//! That takes the rows out of the state store: no segment per chunk to encode, write, flush
//! and compact, and no store memory growing with the stream, while every reader still sees the
//! rows views saw (`RelationDef::replayed`, decided when the source is created, says which
//! sources are replayed; sources created before keep their stored rows).
//!
//! Invariants: a chunk's entry (its first and next positions and its stamp, a versioned record,
//! `state::record`) is written in the same atomic write as the source's position after it
//! (without the write-ahead log, like stored chunks: a crash loses both or neither), and
//! entries sit in the relation's own key range, in vnode 0 keyed by the records read before the
//! chunk, so a prefix scan reads them in order and dropping the source deletes them.
//!
//! The catalog owns the chunk log; the connectors produce rows again through the [`Replay`]
//! they register at start ([`register`], `connectors::register`), so that the catalog does not
//! import its connectors. Called by the source task (`connectors::source`) to log a chunk
//! ([`put_chunk`]), by [`crate::catalog::Relation::stream_rows`] and the change log to read rows
//! back.

use std::sync::OnceLock;

use datafusion::arrow::array::RecordBatch;

use super::{rows, Relation};
use crate::error::{Result, WeirError};
use crate::state::keys::segment_key;
use crate::state::record::{corrupt, RecordReader, RecordWriter};
use crate::state::store::{ScanControl, StateStore, WriteBatch};

/// Where a source is in its connector's stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// Records read so far; grows with every chunk (a replayed source's chunk log is keyed by
    /// it). For the generator and files it is all the position there is.
    pub records: u64,
    /// The rest, in the connector's own encoding (Kafka: the next offset of each partition).
    pub detail: Vec<u8>,
}

impl Position {
    /// The position after `records` records, for connectors that need nothing else.
    pub fn at(records: u64) -> Position {
        Position { records, detail: vec![] }
    }

    pub fn encode(&self) -> Vec<u8> {
        [&self.records.to_be_bytes()[..], &self.detail].concat()
    }

    /// The position [`Position::encode`] gave; None for bytes that are not one.
    pub fn decode(bytes: &[u8]) -> Option<Position> {
        let (records, detail) = bytes.split_at_checked(8)?;
        Some(Position { records: u64::from_be_bytes(records.try_into().ok()?), detail: detail.to_vec() })
    }
}

/// One logged chunk: from position `from` to `to`, stamped `stamp` (nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkEntry {
    pub from: Position,
    pub to: Position,
    pub stamp: i64,
}

impl ChunkEntry {
    pub fn encode(&self) -> Vec<u8> {
        RecordWriter::default().bytes(&self.from.encode()).bytes(&self.to.encode()).i64(self.stamp).finish()
    }

    /// The entry [`ChunkEntry::encode`] gave; `what` names its source for errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<ChunkEntry> {
        let mut r = RecordReader::new(bytes, what)?;
        let position = |bytes: Vec<u8>| Position::decode(&bytes).ok_or_else(|| corrupt(what, "a bad position"));
        let entry = ChunkEntry { from: position(r.bytes()?)?, to: position(r.bytes()?)?, stamp: r.i64()? };
        r.finish()?;
        Ok(entry)
    }
}

/// A replayed source's connector, opened to produce rows again.
pub trait Replay: Send {
    /// The user columns of the rows of each of `ranges` (from one position to another;
    /// consecutive chunks, in order), as they were read: one batch per range.
    fn rows_of(&mut self, ranges: &[(&Position, &Position)]) -> Result<Vec<RecordBatch>>;
}

/// [`stream_rows`] asks the connector for consecutive chunks together, up to this many chunks
/// or this many records (at least one chunk): a connector whose every read is a round trip
/// (Kafka) then reads an hour of small chunks in a few hundred reads, not tens of thousands.
const CHUNKS_PER_READ: usize = 256;
const RECORDS_PER_READ: u64 = 20_000;

/// Opens the connector of a replayed source for [`Replay`].
pub type OpenReplay = fn(&Relation) -> Result<Box<dyn Replay>>;

static OPEN: OnceLock<OpenReplay> = OnceLock::new();

/// Registers how replayed sources' connectors are opened (the connectors do, once, at start;
/// later calls change nothing).
pub fn register(open: OpenReplay) {
    let _ = OPEN.set(open);
}

/// The connector of replayed source `relation`, opened.
fn open(relation: &Relation) -> Result<Box<dyn Replay>> {
    let open = OPEN.get().ok_or_else(|| WeirError::internal("no connectors registered to replay sources"))?;
    open(relation)
}

/// Adds the log entry of `chunk` to `wb`.
pub fn put_chunk(wb: &mut WriteBatch, relation: &Relation, chunk: &ChunkEntry) {
    wb.put(segment_key(relation.def.id, &chunk.from.records.to_be_bytes()), chunk.encode());
}

/// The logged chunks of `relation`, in order.
fn chunks(relation: &Relation, store: &dyn StateStore) -> Result<Vec<ChunkEntry>> {
    let prefix = segment_key(relation.def.id, &[]);
    let what = format!("the chunk log of source \"{}\"", relation.def.name);
    let mut out = Vec::new();
    store.scan_prefix(&prefix, &mut |_, value| {
        out.push(ChunkEntry::decode(value, &what)?);
        Ok(ScanControl::Continue)
    })?;
    Ok(out)
}

/// Every row of replayed source `relation` (user columns), produced again by its connector
/// from the chunk log as `store` holds it now, handed to `emit` a chunk at a time until it says
/// stop. Chunks are read a group at a time ([`CHUNKS_PER_READ`], [`RECORDS_PER_READ`]): memory
/// is a group, however many chunks there are. Blocking.
pub fn stream_rows(
    relation: &Relation,
    store: &dyn StateStore,
    emit: &mut dyn FnMut(RecordBatch) -> Result<ScanControl>,
) -> Result<()> {
    let mut connector = open(relation)?;
    let chunks = chunks(relation, store)?;
    let mut rest = &chunks[..];
    while !rest.is_empty() {
        let group = read_group(rest);
        let ranges: Vec<(&Position, &Position)> = rest[..group].iter().map(|c| (&c.from, &c.to)).collect();
        let batches = connector.rows_of(&ranges)?;
        if batches.len() != group {
            return Err(WeirError::internal(format!(
                "source \"{}\": {} chunks read again gave {} batches",
                relation.def.name,
                group,
                batches.len()
            )));
        }
        for (c, batch) in rest[..group].iter().zip(&batches) {
            if emit(rows::rows_stamped_at(relation, batch, c.stamp)?)? == ScanControl::Stop {
                return Ok(());
            }
        }
        rest = &rest[group..];
    }
    Ok(())
}

/// How many of `chunks`' first chunks one read takes: consecutive ones (each starting where
/// the one before ended) within the limits, at least one.
fn read_group(chunks: &[ChunkEntry]) -> usize {
    let mut records = 0;
    let mut n = 0;
    while n < chunks.len() && n < CHUNKS_PER_READ {
        let c = &chunks[n];
        records += c.to.records.saturating_sub(c.from.records);
        if n > 0 && (records > RECORDS_PER_READ || chunks[n - 1].to != c.from) {
            break;
        }
        n += 1;
    }
    n.max(1)
}

/// The rows of one chunk of replayed source `relation`, produced again by its connector: how
/// the change log replays a chunk. Blocking.
pub fn chunk_rows(relation: &Relation, chunk: &ChunkEntry) -> Result<RecordBatch> {
    let batch = open(relation)?.rows_of(&[(&chunk.from, &chunk.to)])?.pop().ok_or_else(|| {
        WeirError::internal(format!("source \"{}\": a chunk read again gave no batch", relation.def.name))
    })?;
    rows::rows_stamped_at(relation, &batch, chunk.stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(from: u64, to: u64) -> ChunkEntry {
        ChunkEntry { from: Position::at(from), to: Position::at(to), stamp: 0 }
    }

    /// Consecutive chunks are read together up to the limits; a gap in the log, the record
    /// budget or the chunk count ends a group; one chunk larger than the budget is still read.
    #[test]
    fn consecutive_chunks_are_read_together_within_the_limits() {
        let small: Vec<ChunkEntry> = (0..1000).map(|i| chunk(i * 5, i * 5 + 5)).collect();
        assert_eq!(read_group(&small), CHUNKS_PER_READ);
        assert_eq!(read_group(&[chunk(0, 5), chunk(5, 9), chunk(10, 12)]), 2);
        let budget = RECORDS_PER_READ;
        assert_eq!(read_group(&[chunk(0, budget - 1), chunk(budget - 1, budget + 1)]), 1);
        assert_eq!(read_group(&[chunk(0, 3 * budget), chunk(3 * budget, 3 * budget + 1)]), 1);
        assert_eq!(read_group(&[chunk(0, 1)]), 1);
    }
}
