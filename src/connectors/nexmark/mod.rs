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
//! limit, 0 for none: events come due at that rate from the source's first read, and a
//! restarted source reads at once those that came due while the server was down, as it would
//! from a broker), `nexmark.event.rate` (events per second of *event time*, default 10,000),
//! `nexmark.max.out.of.order.ms` (default 0), `nexmark.seed`, `nexmark.base.time.ms`,
//! `nexmark.hot.auction.ratio` (1 in this many bids goes to a random auction in flight, the rest
//! to the hot one: default 2, half the bids; 1 for no hot auction).
//! The offset is the next event number, so every source with the same seed sees the same
//! events whatever its chunk size. The generator is replayable: its sources store each chunk's
//! offsets, not its rows ([`super::replay`]).

pub mod combined;
pub mod generator;

use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use super::source::{Chunk, SourceReader};
use crate::catalog::options::ConnectorOptions;
use crate::catalog::replay::Position;
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
    "nexmark.hot.auction.ratio",
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
    /// With a rate: when event 0 was due, in microseconds since the Unix epoch. Set at the
    /// first read and kept in the position, so a restarted source finds the events that came
    /// due while the server was down ready at once, as a broker would hold them.
    due_from_micros: Option<i64>,
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
            hot_auction_ratio: options.u64_or("nexmark.hot.auction.ratio", defaults.hot_auction_ratio)?,
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
            due_from_micros: None,
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
        let mut next = Position::at(end);
        if self.rate > 0 {
            let now = unix_micros();
            let rate = self.rate as f64;
            let due_from = *self.due_from_micros.get_or_insert_with(|| {
                // Kept in the position (a restart), else now is when `offset` is due.
                from.detail
                    .as_slice()
                    .try_into()
                    .map(i64::from_be_bytes)
                    .unwrap_or(now - (offset as f64 * 1e6 / rate) as i64)
            });
            // The events due by now, up to a whole chunk, once a tenth of a second's worth is
            // due (or the last of them): a slow rate gives chunks of what fell due, not one
            // chunk once all of it is due, nor a chunk of an event or two at every read.
            let due = ((now - due_from).max(0) as f64 * rate / 1e6) as u64;
            let least = (offset + (self.rate / 10).max(1)).min(end);
            if due < least {
                let least_due = due_from.saturating_add((least as f64 * 1e6 / rate).ceil() as i64);
                let wait = Duration::from_micros((least_due - now).max(1_000) as u64);
                return Ok(Chunk::Wait(wait.min(Duration::from_millis(100))));
            }
            end = end.min(due);
            next = Position::at(end);
            next.detail = due_from.to_be_bytes().to_vec();
        }
        Ok(Chunk::Rows(self.events(offset, end)?, next))
    }

    /// Events are a function of the seed and their number.
    fn replayable(&self) -> bool {
        true
    }

    fn replay(&mut self, from: &Position, to: &Position) -> Result<RecordBatch> {
        self.events(from.records, to.records)
    }
}

/// Microseconds since the Unix epoch, now.
fn unix_micros() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    since.as_micros() as i64
}

pub fn schema(options: &ConnectorOptions) -> Result<SchemaRef> {
    Ok(NexmarkReader::new(options)?.schema())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(rate: u64) -> NexmarkReader {
        let options = ConnectorOptions(
            [
                ("connector", "nexmark".to_string()),
                ("nexmark.table.type", "bid".to_string()),
                ("nexmark.max.chunk.size", "100".to_string()),
                ("nexmark.events.per.second", rate.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        NexmarkReader::new(&options).unwrap()
    }

    /// With a rate, events come due from the first read on, and the position keeps when:
    /// a reader restarted from it finds those due meanwhile ready at once.
    #[test]
    fn a_rate_limited_source_catches_up_after_a_restart() {
        let mut first = reader(1000);
        assert!(matches!(first.read(&Position::at(0)).unwrap(), Chunk::Wait(_)), "100 events take 100 ms");
        // A position written by a run whose event 0 was due 10 s ago: 10,000 events are due.
        let due_from = unix_micros() - 10_000_000;
        let stored = Position { records: 5000, detail: due_from.to_be_bytes().to_vec() };
        let mut restarted = reader(1000);
        match restarted.read(&stored).unwrap() {
            Chunk::Rows(rows, next) => {
                assert!(rows.num_rows() > 0);
                assert_eq!(next.records, 5100);
                assert_eq!(next.detail, due_from.to_be_bytes().to_vec(), "the position keeps when event 0 was due");
            }
            _ => panic!("events due while the server was down are read at once"),
        }
        let ahead = Position { records: 20_000, detail: due_from.to_be_bytes().to_vec() };
        assert!(matches!(restarted.read(&ahead).unwrap(), Chunk::Wait(_)), "events not due yet wait");
        // Events come as they fall due, not once a whole chunk is due (at 2,000 events a
        // second and the default 100,000-event chunks, the first rows came after 50 s), in
        // chunks of at least a tenth of a second's worth (not one or two events at every read).
        let at = |micros_ago: i64| Position { records: 0, detail: (unix_micros() - micros_ago).to_be_bytes().to_vec() };
        assert!(matches!(reader(100).read(&at(50_000)).unwrap(), Chunk::Wait(_)), "5 of 10 events due: wait");
        match reader(100).read(&at(150_000)).unwrap() {
            Chunk::Rows(rows, next) => {
                assert!((15..100).contains(&next.records), "{next:?}");
                assert!(rows.num_rows() > 0);
            }
            _ => panic!("the 15 events due are read"),
        }
        // Without a rate the position is only the offset.
        match reader(0).read(&Position::at(0)).unwrap() {
            Chunk::Rows(_, next) => assert_eq!(next, Position::at(100)),
            _ => panic!("no rate: no wait"),
        }
    }
}
