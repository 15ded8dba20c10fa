//! `connector = 'nexmark'`: the Nexmark benchmark's event streams, generated in process.
//!
//! ```sql
//! CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'bid',
//!                         nexmark.event.num = '10000000');
//! ```
//! Without `nexmark.table.type` the source carries all three kinds in one stream
//! ([`combined`]); with it (person, auction or bid), that kind's rows. `nexmark.event.num`
//! (events of all three kinds to generate; 0, the default, for no end), `nexmark.max.chunk.size`
//! (events per stored chunk, default 100,000), `nexmark.events.per.second` (a wall-clock rate
//! limit, 0 for none), `nexmark.event.rate` (events per second of *event time*, default
//! 10,000), `nexmark.max.out.of.order.ms` (default 0), `nexmark.seed`, `nexmark.base.time.ms`.
//! The offset is the next event number, so every source with the same seed sees the same
//! events whatever its chunk size. The generator is replayable: its sources store each chunk's
//! offsets, not its rows ([`super::replay`]).

pub mod combined;
pub mod generator;

use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use super::options::ConnectorOptions;
use super::source::{Chunk, Position, SourceReader};
use crate::error::Result;
use combined::Combined;
use generator::{EventKind, Generator, GeneratorConfig};

pub const OPTIONS: &[&str] = &[
    "connector",
    "nexmark.table.type",
    "nexmark.event.num",
    "nexmark.max.chunk.size",
    "nexmark.events.per.second",
    "nexmark.event.rate",
    "nexmark.max.out.of.order.ms",
    "nexmark.seed",
    "nexmark.base.time.ms",
];

/// What a source generates: one kind's stream, or all three combined.
enum Stream {
    One(Generator),
    All(Combined),
}

pub struct NexmarkReader {
    stream: Stream,
    /// Events in all (0: no end).
    events: u64,
    chunk: u64,
    /// Wall-clock events per second (0: unlimited).
    rate: u64,
    started: Option<(Instant, u64)>,
}

impl NexmarkReader {
    pub fn new(options: &ConnectorOptions) -> Result<NexmarkReader> {
        options.only(OPTIONS)?;
        let kind = options.get("nexmark.table.type").map(EventKind::parse).transpose()?;
        let defaults = GeneratorConfig::default();
        let config = GeneratorConfig {
            seed: options.u64_or("nexmark.seed", defaults.seed)?,
            base_time_ms: options.i64_or("nexmark.base.time.ms", defaults.base_time_ms)?,
            event_rate: options.u64_or("nexmark.event.rate", defaults.event_rate)?.max(1),
            max_out_of_order_ms: options.u64_or("nexmark.max.out.of.order.ms", defaults.max_out_of_order_ms)?,
            ..defaults
        };
        Ok(NexmarkReader {
            stream: match kind {
                Some(kind) => Stream::One(Generator::new(kind, config)),
                None => Stream::All(Combined::new(config)),
            },
            events: options.u64_or("nexmark.event.num", 0)?,
            chunk: options.u64_or("nexmark.max.chunk.size", 100_000)?.max(1),
            rate: options.u64_or("nexmark.events.per.second", 0)?,
            started: None,
        })
    }
}

impl NexmarkReader {
    /// Events `from..to` as rows, the same at every call.
    fn events(&self, from: u64, to: u64) -> Result<RecordBatch> {
        match &self.stream {
            Stream::One(g) => g.batch(from, to),
            Stream::All(c) => c.batch(from, to),
        }
    }
}

impl SourceReader for NexmarkReader {
    fn schema(&self) -> SchemaRef {
        std::sync::Arc::clone(match &self.stream {
            Stream::One(g) => g.schema(),
            Stream::All(c) => c.schema(),
        })
    }

    fn read(&mut self, from: &Position) -> Result<Chunk> {
        let offset = from.records;
        if self.events > 0 && offset >= self.events {
            return Ok(Chunk::Done);
        }
        let mut end = offset + self.chunk;
        if self.events > 0 {
            end = end.min(self.events);
        }
        if self.rate > 0 {
            let (since, first) = *self.started.get_or_insert((Instant::now(), offset));
            let due = Duration::from_secs_f64((end - first) as f64 / self.rate as f64);
            let elapsed = since.elapsed();
            if due > elapsed {
                return Ok(Chunk::Wait((due - elapsed).min(Duration::from_millis(100))));
            }
        }
        Ok(Chunk::Rows(self.events(offset, end)?, Position::at(end)))
    }

    /// Events are a function of the seed and their number.
    fn replayable(&self) -> bool {
        true
    }

    fn replay(&mut self, from: &Position, to: &Position) -> Result<RecordBatch> {
        self.events(from.records, to.records)
    }
}

pub fn schema(options: &ConnectorOptions) -> Result<SchemaRef> {
    Ok(NexmarkReader::new(options)?.schema())
}
