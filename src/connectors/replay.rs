//! Replayed sources, the connectors' side: a connector that produces the very same rows again
//! for any range of offsets it has read (the Nexmark generator, from its seed) serves the
//! catalog's chunk log ([`crate::catalog::replay`], which says how such a source is stored and
//! read back). [`register`] hands the catalog the way to open one; the server and the
//! benchmarks call it at start.

use datafusion::arrow::array::RecordBatch;

use super::source::SourceReader;
use crate::catalog::replay::{Position, Replay};
use crate::catalog::Relation;
use crate::error::{Result, WeirError};

/// A replayed source's reader, replaying.
struct Replaying(Box<dyn SourceReader>);

impl Replay for Replaying {
    fn rows_of(&mut self, ranges: &[(&Position, &Position)]) -> Result<Vec<RecordBatch>> {
        self.0.replay_many(ranges)
    }
}

/// A reader of replayed source `relation`'s connector.
fn open(relation: &Relation) -> Result<Box<dyn Replay>> {
    let options =
        relation.def.connector.as_ref().ok_or_else(|| WeirError::internal("a replayed table without a connector"))?;
    Ok(Box::new(Replaying(super::registry::reader(options, Some(relation.given_schema()), &[])?)))
}

/// Registers the connectors with the catalog's chunk log (once per process; again is harmless).
pub fn register() {
    crate::catalog::replay::register(open);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit, TimestampNanosecondType};

    use super::*;
    use crate::catalog::options::ConnectorOptions;
    use crate::catalog::{Catalog, TableOptions};
    use crate::connectors::nexmark::generator::{EventKind, Generator, GeneratorConfig};
    use crate::state::keys::table_prefix;
    use crate::state::memory::MemoryStore;
    use crate::state::store::{ScanControl, StateStore};

    /// A nexmark bid source run by the source task stores one 16-byte entry per chunk and no
    /// rows, and reading it gives the generator's rows, stamped once per chunk, the same stamps
    /// at every read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replayed_source_stores_offsets_and_reads_its_rows_again() {
        register();
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let catalog = Arc::new(Catalog::open(Arc::clone(&store), "dev", Default::default()).unwrap());
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
        catalog.create_table_with("bid", "", Schema::new(fields), vec![], table_options, "", false).unwrap();
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
