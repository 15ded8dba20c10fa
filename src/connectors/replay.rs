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
//! `state::index_codec`) is written in the same atomic write as the source's position after it
//! (without the write-ahead log, like stored chunks: a crash loses both or neither), and
//! entries sit in the relation's own key range, in vnode 0 keyed by the records read before the
//! chunk, so a prefix scan reads them in order and dropping the source deletes them.
//!
//! Called by the source task ([`super::source`]) to log a chunk and by
//! [`crate::catalog::Relation::scan_rows`] to read the rows back.

use datafusion::arrow::array::RecordBatch;

use super::source::Position;
use crate::catalog::{dml, Relation};
use crate::error::{Result, WeirError};
use crate::state::index_codec::{corrupt, IndexReader, IndexWriter};
use crate::state::keys::segment_key;
use crate::state::store::{ScanControl, StateStore, WriteBatch};

/// One logged chunk: from position `from` to `to`, stamped `stamp` (nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkEntry {
    pub from: Position,
    pub to: Position,
    pub stamp: i64,
}

impl ChunkEntry {
    pub fn encode(&self) -> Vec<u8> {
        IndexWriter::default().bytes(&self.from.encode()).bytes(&self.to.encode()).i64(self.stamp).finish()
    }

    /// The entry [`ChunkEntry::encode`] gave; `what` names its source for errors.
    pub fn decode(bytes: &[u8], what: &str) -> Result<ChunkEntry> {
        let mut r = IndexReader::new(bytes, what)?;
        let position = |bytes: Vec<u8>| Position::decode(&bytes).ok_or_else(|| corrupt(what, "a bad position"));
        let entry = ChunkEntry { from: position(r.bytes()?)?, to: position(r.bytes()?)?, stamp: r.i64()? };
        r.finish()?;
        Ok(entry)
    }
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
/// from the chunk log as `store` holds it now, handed to `emit` a chunk at a time (memory is a
/// chunk, however many there are) until it says stop. Blocking.
pub fn stream_rows(
    relation: &Relation,
    store: &dyn StateStore,
    emit: &mut dyn FnMut(RecordBatch) -> Result<ScanControl>,
) -> Result<()> {
    let mut reader = reader_of(relation)?;
    for c in chunks(relation, store)? {
        let rows = dml::rows_stamped_at(relation, &reader.replay(&c.from, &c.to)?, c.stamp)?;
        if emit(rows)? == ScanControl::Stop {
            break;
        }
    }
    Ok(())
}

/// The rows of one chunk of replayed source `relation`, produced again by its connector: how
/// the change log replays a chunk. Blocking.
pub fn chunk_rows(relation: &Relation, chunk: &ChunkEntry) -> Result<RecordBatch> {
    dml::rows_stamped_at(relation, &reader_of(relation)?.replay(&chunk.from, &chunk.to)?, chunk.stamp)
}

/// A reader of replayed source `relation`'s connector.
fn reader_of(relation: &Relation) -> Result<Box<dyn super::source::SourceReader>> {
    let options =
        relation.def.connector.as_ref().ok_or_else(|| WeirError::internal("a replayed table without a connector"))?;
    super::registry::reader(options, Some(relation.given_schema()), &[])
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit, TimestampNanosecondType};

    use super::*;
    use crate::catalog::{Catalog, TableOptions};
    use crate::connectors::nexmark::generator::{EventKind, Generator, GeneratorConfig};
    use crate::connectors::options::ConnectorOptions;
    use crate::state::keys::table_prefix;
    use crate::state::memory::MemoryStore;

    /// A nexmark bid source run by the source task stores one 16-byte entry per chunk and no
    /// rows, and reading it gives the generator's rows, stamped once per chunk, the same stamps
    /// at every read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replayed_source_stores_offsets_and_reads_its_rows_again() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let catalog = Arc::new(Catalog::open(Arc::clone(&store), "dev").unwrap());
        let options = ConnectorOptions(
            [
                ("connector", "nexmark"),
                ("nexmark.table.type", "bid"),
                ("nexmark.event.num", "5000"),
                ("nexmark.max.chunk.size", "1000"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let generator = Generator::new(EventKind::Bid, GeneratorConfig::default());
        let mut fields: Vec<Field> = generator.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("p_time", DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())), true));
        let stamp = fields.len() - 1;
        let table_options = TableOptions {
            append_only: true,
            processing_time: Some(stamp),
            connector: Some(options.clone()),
            replayed: true,
            ..Default::default()
        };
        catalog.create_table_with("bid", "", Schema::new(fields), vec![], table_options, false).unwrap();
        let relation = catalog.get("bid").unwrap();
        let reader = crate::connectors::registry::reader(&options, Some(relation.given_schema()), &[]).unwrap();
        super::super::source::start(Arc::clone(&catalog), Arc::clone(&relation), reader).unwrap().await.unwrap();

        let mut entries = Vec::new();
        store
            .scan_prefix(&table_prefix(relation.def.id), &mut |k, v| {
                entries.push((k.to_vec(), v.len()));
                Ok(ScanControl::Continue)
            })
            .unwrap();
        assert_eq!(entries.len(), 5, "one entry per chunk");
        assert!(entries.iter().all(|(_, len)| *len < 64), "positions and a stamp, no rows");

        let rows = relation.scan_rows(store.as_ref()).unwrap();
        let all = datafusion::arrow::compute::concat_batches(&relation.schema, &rows).unwrap();
        let expected = generator.batch(0, 5000).unwrap();
        assert_eq!(all.num_rows(), expected.num_rows());
        assert_eq!(&all.columns()[..stamp], expected.columns());
        // One stamp per chunk, the chunks in order.
        let stamps: Vec<i64> = rows
            .iter()
            .map(|b| {
                let column = b.column(stamp).as_primitive::<TimestampNanosecondType>();
                assert!(column.values().iter().all(|&v| v == column.value(0)));
                column.value(0)
            })
            .collect();
        assert_eq!(stamps.len(), 5);
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(relation.scan_rows(store.as_ref()).unwrap(), rows, "the same rows at every read");
    }
}
