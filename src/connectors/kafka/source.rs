//! `connector = 'kafka'`: rows from every partition of a Kafka topic, one record per message,
//! `FORMAT PLAIN ENCODE JSON` (one object per message) or `ENCODE CSV` (one line).
//!
//! ```sql
//! CREATE SOURCE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP,
//!   _kafka_partition INT, _kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, _kafka_key VARCHAR,
//!   WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND)
//! WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = '127.0.0.1:9092',
//!       scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON;
//! ```
//! The source's position ([`offsets`]) is the next offset of every partition, part of every
//! checkpoint; it starts at `scan.startup.mode` (`earliest`, `latest`, or `timestamp` with
//! `scan.startup.timestamp.millis`), resolved to offsets at the first read, so a restart goes
//! on exactly from the checkpoint. Partitions added to the topic later are found (metadata is
//! read again every `kafka.metadata.refresh.ms`, by the consumer already reading) and read from
//! their start. Messages are read with `isolation.level = read_committed`, so aborted
//! transactions are never seen.
//!
//! The rows are not stored: Kafka keeps the messages, so the source is *replayed*
//! ([`crate::connectors::replay`]): it logs each chunk's positions and reads the same offsets again when its
//! rows are needed (a new view's backfill, a restart's replay). A chunk's messages are put in
//! (partition, offset) order before decoding, so reading them again gives the same rows in the
//! same order. What a new view sees is therefore what the topic still retains (ADR 11).
//!
//! Columns named `_kafka_partition`, `_kafka_offset`, `_kafka_timestamp` (the message's
//! timestamp, for event time) and `_kafka_key` are filled from each message; the others are
//! decoded from its value ([`crate::connectors::records`]). A message that does not decode is a dead letter
//! (`topic:partition:offset`, its first bytes, the error), not a stopped source; an empty value
//! (a tombstone) is passed over. A broker that cannot be reached when the source is created
//! fails CREATE SOURCE (08001), as does a topic that does not exist (42704); one lost later is
//! retried every `kafka.retry.ms` while the rest of the server goes on.
//!
//! Every `kafka.group.commit.ms` (1000; 0: never) the position is also committed to the
//! consumer group `weir-<topic>`, for monitoring tools only: Weir never reads it back.
//!
//! An idle source waits in its poll (librdkafka long-polls the broker). Partitions are never
//! paused: pausing drops the messages librdkafka prefetched, and the fetcher resumed past
//! them, so views missed messages the source's position had passed (found by
//! `tests/end_to_end.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, Timestamp};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::offsets::{self, Offsets};
use super::{
    broker_error, client_config, is_passed_through, topic_partitions, ConnectionFailures, NotingConsumer, NotingContext,
};
use crate::catalog::dead_letter::DeadLetter;
use crate::catalog::options::ConnectorOptions;
use crate::catalog::replay::Position;
use crate::connectors::records::{self, TextEncoding};
use crate::connectors::source::{Chunk, SourceReader};
use crate::connectors::value_decoder::ValueDecoder;
use crate::error::{Result, SqlState, WeirError};

pub const OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "properties.bootstrap.server",
    "scan.startup.mode",
    "scan.startup.timestamp.millis",
    "kafka.max.chunk.size",
    "kafka.poll.ms",
    "kafka.linger.ms",
    "kafka.metadata.refresh.ms",
    "kafka.retry.ms",
    "kafka.timeout.ms",
    "kafka.group.commit.ms",
    "format",
    "encode",
    "bad_data",
];

/// How many messages a chunk's poll takes between reads of the clock.
const CLOCK_EVERY: usize = 64;

/// The most messages a chunk's list is made room for at once.
const MAX_CHUNK_CAPACITY: usize = 65_536;

/// The longest wait between reads while the schema registry cannot be asked.
const REGISTRY_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Metadata columns a source may declare, filled from each message instead of its value.
const PARTITION: &str = "_kafka_partition";
const OFFSET: &str = "_kafka_offset";
const TIMESTAMP: &str = "_kafka_timestamp";
const KEY: &str = "_kafka_key";

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// Where a source with no position yet starts.
#[derive(Debug, Clone, Copy)]
enum Startup {
    Earliest,
    Latest,
    /// The first offset whose timestamp is at or after this (milliseconds).
    Timestamp(i64),
}

/// One message, as read.
struct Record {
    partition: i32,
    offset: i64,
    timestamp: Option<i64>,
    key: Option<String>,
    value: Vec<u8>,
}

pub struct KafkaReader {
    topic: String,
    config: ClientConfig,
    startup: Startup,
    encoding: TextEncoding,
    /// `ENCODE AVRO` and `PROTOBUF`: the values' decoder (JSON and CSV go through [`records`]).
    binary: Option<Box<dyn ValueDecoder>>,
    /// The declared columns.
    schema: SchemaRef,
    /// The columns decoded from values, and each declared column's source: Some(i) for the
    /// i-th decoded column, None for a metadata column.
    value_schema: SchemaRef,
    /// The `json` / `jsonb` columns: a message's value there is kept as its JSON text.
    json: Vec<String>,
    /// `FORMAT UPSERT`: the primary key's columns (indices into `schema`) and their schema,
    /// which a message key decodes to (a JSON object of those columns, as Weir's own UPSERT
    /// sinks write it).
    upsert_key: Option<(Vec<usize>, SchemaRef)>,
    chunk: usize,
    poll: Duration,
    /// How long a chunk caught up with the topic's end waits for more messages.
    linger: Duration,
    /// The partitions read to their end (librdkafka says so once per end reached), until a
    /// message of theirs arrives.
    at_end: std::collections::HashSet<i32>,
    refresh: Duration,
    retry: Duration,
    /// Reads in a row the schema registry could not be asked for: their waits grow.
    registry_failures: u32,
    timeout: Duration,
    /// The consumer and the offsets it is assigned at (the next to read, by partition).
    consumer: Option<(NotingConsumer, Offsets)>,
    /// The consumer that reads logged chunks again, kept between reads (a new one per chunk
    /// costs a connection and a metadata round trip each).
    replay_consumer: Option<NotingConsumer>,
    last_refresh: Instant,
    /// How often the position is committed to the consumer group `weir-<topic>`, for
    /// monitoring tools (never read back: a restart goes on from the checkpoint); zero: never.
    group_commit: Duration,
    last_group_commit: Instant,
    /// What was last committed to the group.
    group_committed: Offsets,
    dead: Vec<DeadLetter>,
}

impl KafkaReader {
    /// A reader of the topic `options` name, decoding the `declared` columns; `primary_key`:
    /// the key's column names of a table fed by the topic (`FORMAT UPSERT` needs one).
    pub fn new(options: &ConnectorOptions, declared: Option<SchemaRef>, primary_key: &[String]) -> Result<KafkaReader> {
        options.only_or(OPTIONS, |k| is_passed_through(k) || crate::connectors::encoding::is_option(k))?;
        let topic = options.get("topic").ok_or_else(|| invalid("a Kafka source needs topic = '...'".into()))?;
        if options.get("properties.bootstrap.server").is_none() {
            return Err(invalid("a Kafka source needs properties.bootstrap.server = 'host:port'".into()));
        }
        let startup = match options.get("scan.startup.mode").unwrap_or("earliest").to_ascii_lowercase().as_str() {
            "earliest" => Startup::Earliest,
            "latest" => Startup::Latest,
            "timestamp" => Startup::Timestamp(options.i64_or("scan.startup.timestamp.millis", -1).and_then(|t| {
                if t < 0 {
                    Err(invalid("scan.startup.mode = 'timestamp' needs scan.startup.timestamp.millis".into()))
                } else {
                    Ok(t)
                }
            })?),
            other => {
                return Err(invalid(format!("scan.startup.mode must be earliest, latest or timestamp, not '{other}'")))
            }
        };
        let upsert =
            match options.get("format").map(str::to_ascii_lowercase).as_deref() {
                None | Some("plain") => false,
                Some("upsert") if primary_key.is_empty() => return Err(WeirError::new(
                    SqlState::INVALID_TABLE_DEFINITION,
                    "FORMAT UPSERT needs a table with a PRIMARY KEY (the message key's columns)",
                )
                .with_hint(
                    "CREATE TABLE t (..., PRIMARY KEY (k)) WITH (connector = 'kafka', ...) FORMAT UPSERT ENCODE JSON",
                )),
                Some("upsert") => true,
                Some(other) => {
                    return Err(WeirError::unsupported(format!(
                        "FORMAT {other} for a Kafka source (FORMAT PLAIN and, for tables, UPSERT are)"
                    )))
                }
            };
        let encode = options.get("encode").unwrap_or("json").to_ascii_lowercase();
        let encoding = match encode.as_str() {
            "json" | "avro" | "protobuf" => TextEncoding::Json,
            "csv" => TextEncoding::Csv,
            other => {
                return Err(invalid(format!(
                    "a Kafka source's ENCODE must be JSON, CSV, AVRO or PROTOBUF, not {other}"
                )))
            }
        };
        if upsert && matches!(encode.as_str(), "avro" | "protobuf") {
            return Err(WeirError::unsupported(format!(
                "FORMAT UPSERT ENCODE {} (UPSERT is JSON for now)",
                encode.to_ascii_uppercase()
            )));
        }
        let binary = crate::connectors::encoding::for_encoding(&encode, options, &format!("{topic}-value"))?;
        let schema = match (declared, &binary) {
            (Some(s), _) if !s.fields().is_empty() => s,
            // Avro and Protobuf values say their columns: the reader schema's.
            (_, Some(binary)) => binary.schema(),
            _ => return Err(invalid("a Kafka source needs its column list".into())),
        };
        if let Some(binary) = &binary {
            let decoded = binary.schema();
            let missing: Vec<&str> = schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .filter(|n| ![PARTITION, OFFSET, TIMESTAMP, KEY].contains(n) && decoded.index_of(n).is_err())
                .collect();
            if !missing.is_empty() {
                let names: Vec<&str> = decoded.fields().iter().map(|f| f.name().as_str()).collect();
                return Err(WeirError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!(
                        "the {} schema has no field {} (it has {})",
                        if encode == "avro" { "Avro" } else { "Protobuf" },
                        missing.join(", "),
                        names.join(", ")
                    ),
                ));
            }
        }
        let (schema, json) = records::text_columns(&schema);
        let key_columns = primary_key
            .iter()
            .map(|name| {
                schema
                    .index_of(name)
                    .map_err(|_| WeirError::internal(format!("primary key column {name} not declared")))
            })
            .collect::<Result<Vec<usize>>>()?;
        let value_fields: Vec<Field> = schema
            .fields()
            .iter()
            .filter(|f| ![PARTITION, OFFSET, TIMESTAMP, KEY].contains(&f.name().as_str()))
            .map(|f| f.as_ref().clone())
            .collect();
        let reserved = [
            "group.id",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "isolation.level",
            "enable.partition.eof",
            "auto.offset.reset",
        ];
        let mut config = client_config(options, &reserved)?;
        config
            .set("group.id", format!("weir-{topic}"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            // A position the topic no longer retains is an error (the source retries at that
            // position and says why in weir_catalog.sources), never a silent jump.
            .set("auto.offset.reset", "error");
        // Bounded prefetch (librdkafka's defaults queue 100,000 messages per partition, and a
        // queued message pins its whole fetch response): memory stays near what a chunk needs.
        // `properties.*` may raise them.
        for (name, value) in [("queued.min.messages", "20000"), ("queued.max.messages.kbytes", "32768")] {
            if config.get(name).is_none() {
                config.set(name, value);
            }
        }
        Ok(KafkaReader {
            topic: topic.to_string(),
            config,
            startup,
            encoding,
            binary,
            value_schema: Arc::new(Schema::new(value_fields)),
            json,
            upsert_key: upsert.then(|| {
                let key_fields: Vec<Field> = key_columns.iter().map(|&i| schema.field(i).clone()).collect();
                (key_columns, Arc::new(Schema::new(key_fields)))
            }),
            schema,
            chunk: options.u64_or("kafka.max.chunk.size", 10_000)?.max(1) as usize,
            poll: Duration::from_millis(options.u64_or("kafka.poll.ms", 100)?.max(1)),
            linger: Duration::from_millis(options.u64_or("kafka.linger.ms", 10)?),
            at_end: Default::default(),
            refresh: Duration::from_millis(options.u64_or("kafka.metadata.refresh.ms", 5_000)?),
            retry: Duration::from_millis(options.u64_or("kafka.retry.ms", 1_000)?.max(1)),
            registry_failures: 0,
            timeout: Duration::from_millis(options.u64_or("kafka.timeout.ms", 10_000)?.max(1)),
            consumer: None,
            replay_consumer: None,
            last_refresh: Instant::now(),
            group_commit: Duration::from_millis(options.u64_or("kafka.group.commit.ms", 1_000)?),
            last_group_commit: Instant::now(),
            group_committed: Offsets::new(),
            dead: Vec::new(),
        })
    }

    fn consumer(&self) -> Result<NotingConsumer> {
        self.config
            .create_with_context(NotingContext::new(&self.topic))
            .map_err(|e| broker_error(&self.topic, &e, &ConnectionFailures::default()))
    }

    /// The topic's partitions now.
    fn partitions(&self, consumer: &NotingConsumer) -> Result<Vec<i32>> {
        topic_partitions(consumer, &self.topic, self.timeout)
    }

    /// The offset a partition with no position starts at.
    fn start_offset(&self, consumer: &NotingConsumer, partition: i32) -> Result<i64> {
        let broker = |e: KafkaError| broker_error(&self.topic, &e, &consumer.context().failures);
        let (low, high) = consumer.fetch_watermarks(&self.topic, partition, self.timeout).map_err(broker)?;
        Ok(match self.startup {
            Startup::Earliest => low,
            Startup::Latest => high,
            Startup::Timestamp(millis) => {
                let mut wanted = TopicPartitionList::new();
                wanted.add_partition_offset(&self.topic, partition, Offset::Offset(millis)).map_err(broker)?;
                let found = consumer.offsets_for_times(wanted, self.timeout).map_err(broker)?;
                match found.find_partition(&self.topic, partition).map(|p| p.offset()) {
                    Some(Offset::Offset(o)) => o,
                    _ => high,
                }
            }
        })
    }

    /// Assigns a new consumer to every partition at `known` offsets, new partitions at their
    /// start.
    fn assign(&mut self, known: Offsets) -> Result<()> {
        let consumer = self.consumer()?;
        let offsets = self.with_new_partitions(&consumer, known)?;
        self.assign_at(consumer, offsets)
    }

    /// Looks for partitions added to the topic, with the consumer already assigned (its
    /// prefetched messages stay where they are unless partitions were added): true if it was
    /// assigned again with them.
    fn add_new_partitions(&mut self) -> Result<bool> {
        let Some((consumer, offsets)) = self.consumer.take() else { return Ok(false) };
        self.last_refresh = Instant::now();
        let found = self.with_new_partitions(&consumer, offsets.clone())?;
        if found == offsets {
            self.consumer = Some((consumer, offsets));
            return Ok(false);
        }
        self.assign_at(consumer, found)?;
        Ok(true)
    }

    /// `offsets` with every partition of the topic not in it yet, at its start offset.
    fn with_new_partitions(&self, consumer: &NotingConsumer, mut offsets: Offsets) -> Result<Offsets> {
        for partition in self.partitions(consumer)? {
            if let std::collections::btree_map::Entry::Vacant(new) = offsets.entry(partition) {
                new.insert(self.start_offset(consumer, partition)?);
            }
        }
        Ok(offsets)
    }

    fn assign_at(&mut self, consumer: NotingConsumer, offsets: Offsets) -> Result<()> {
        let mut list = TopicPartitionList::new();
        for (&partition, &offset) in &offsets {
            list.add_partition_offset(&self.topic, partition, Offset::Offset(offset))
                .map_err(|e| broker_error(&self.topic, &e, &consumer.context().failures))?;
        }
        consumer.assign(&list).map_err(|e| broker_error(&self.topic, &e, &consumer.context().failures))?;
        self.consumer = Some((consumer, offsets));
        self.at_end.clear();
        self.last_refresh = Instant::now();
        Ok(())
    }

    /// Polls up to a chunk of messages within `kafka.poll.ms`, stopping early once every
    /// partition is at its end.
    fn poll_chunk(&mut self) -> std::result::Result<Vec<Record>, KafkaError> {
        let Some((consumer, offsets)) = &mut self.consumer else { return Ok(vec![]) };
        let started = Instant::now();
        let mut deadline = started + self.poll;
        let mut records = Vec::with_capacity(self.chunk.min(MAX_CHUNK_CAPACITY));
        let at_end = &mut self.at_end;
        // The clock is read once per CLOCK_EVERY messages (a read per message was 3 % of a
        // source's time): a poll may wait past the deadline by what those messages took.
        let mut left = Duration::ZERO;
        let mut until_clock = 0usize;
        while records.len() < self.chunk {
            if until_clock == 0 {
                left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                until_clock = CLOCK_EVERY;
            }
            until_clock -= 1;
            match consumer.poll(left) {
                None => break,
                Some(Ok(m)) => {
                    if !at_end.is_empty() {
                        at_end.remove(&m.partition());
                    }
                    offsets.insert(m.partition(), m.offset() + 1);
                    records.push(record_of(&m));
                }
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    at_end.insert(partition);
                    if at_end.len() >= offsets.len() {
                        if records.is_empty() {
                            break;
                        }
                        // Caught up: what arrives within the linger joins this chunk (fewer,
                        // fuller chunks at a steady rate; each has a fixed cost).
                        deadline = deadline.min(started + self.linger);
                        until_clock = 0;
                    }
                }
                Some(Err(e)) => return Err(e),
            }
        }
        // Lag, from the high watermarks the consumer last saw (no request to the broker).
        for (&partition, &next) in offsets.iter() {
            if let Some(high) = cached_high_watermark(consumer, &self.topic, partition) {
                crate::metrics::KAFKA_SOURCE_LAG
                    .with_label_values(&[self.topic.as_str(), &partition.to_string()])
                    .set((high - next).max(0));
            }
        }
        Ok(records)
    }

    /// The rows of `records` (in partition and offset order); those that do not decode become
    /// dead letters when `keep_dead` (a first read), and are passed over when reading again.
    fn rows(&mut self, mut records: Vec<Record>, keep_dead: bool) -> Result<RecordBatch> {
        records.sort_by_key(|r| (r.partition, r.offset));
        records.retain(|r| !r.value.is_empty());
        Ok(self.decode_rows(&records, keep_dead)?.0)
    }

    /// The rows of `records`, in their order, and which records they are (indices).
    fn decode_rows(&mut self, records: &[Record], keep_dead: bool) -> Result<(RecordBatch, Vec<usize>)> {
        if let Some(binary) = &mut self.binary {
            let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
            // A registry that cannot be asked: 08001, which `read` retries.
            let decoded = binary.decode(&values)?;
            let mut dead = decoded.dead;
            let (values, kept) = declared_values(&self.value_schema, decoded.batch, decoded.kept, &mut dead)?;
            if keep_dead {
                let read_at = chrono::Utc::now().timestamp_micros();
                self.dead.extend(dead.into_iter().map(|(i, error)| DeadLetter {
                    position: format!("{}:{}:{}", self.topic, records[i].partition, records[i].offset),
                    error,
                    raw: records::raw_prefix(&records[i].value),
                    read_at_micros: read_at,
                }));
            }
            return self.with_metadata_columns(values, records, kept);
        }
        let mut text = Vec::with_capacity(records.iter().map(|r| r.value.len() + 1).sum());
        for r in records {
            // A message's `json` columns take its fields' values as JSON text.
            match records::json_values_as_text(&self.json, &r.value) {
                Some(rewritten) if self.encoding == TextEncoding::Json => text.extend_from_slice(&rewritten),
                _ => {
                    text.extend_from_slice(&r.value);
                    text.push(b'\n');
                }
            }
        }
        let (values, kept): (RecordBatch, Vec<usize>) =
            match records::decode(self.encoding, &self.value_schema, &text, records.len().max(1)) {
                Ok(Some(batch)) if batch.num_rows() == records.len() => (batch, (0..records.len()).collect()),
                Ok(None) if records.is_empty() => (RecordBatch::new_empty(Arc::clone(&self.value_schema)), vec![]),
                _ => {
                    let each = records
                        .iter()
                        .map(|r| (format!("{}:{}:{}", self.topic, r.partition, r.offset), r.value.as_slice()));
                    let (good, dead) = records::decode_each(self.encoding, &self.value_schema, &self.json, each);
                    if keep_dead {
                        self.dead.extend(dead);
                    }
                    let kept = good.iter().map(|(i, _)| *i).collect();
                    let batches: Vec<RecordBatch> = good.into_iter().map(|(_, b)| b).collect();
                    (datafusion::arrow::compute::concat_batches(&self.value_schema, &batches)?, kept)
                }
            };
        self.with_metadata_columns(values, records, kept)
    }

    /// The declared columns of the `kept` records: their decoded `values`, and the metadata
    /// columns (`_kafka_partition`, ...) from the records.
    fn with_metadata_columns(
        &self,
        values: RecordBatch,
        records: &[Record],
        kept: Vec<usize>,
    ) -> Result<(RecordBatch, Vec<usize>)> {
        let kept_records: Vec<&Record> = kept.iter().map(|&i| &records[i]).collect();
        let mut decoded = values.columns().iter();
        let columns = self
            .schema
            .fields()
            .iter()
            .map(|field| {
                let column: ArrayRef = match field.name().as_str() {
                    PARTITION => Arc::new(Int32Array::from_iter_values(kept_records.iter().map(|r| r.partition))),
                    OFFSET => Arc::new(Int64Array::from_iter_values(kept_records.iter().map(|r| r.offset))),
                    TIMESTAMP => {
                        Arc::new(TimestampMillisecondArray::from_iter(kept_records.iter().map(|r| r.timestamp)))
                    }
                    KEY => Arc::new(StringArray::from_iter(kept_records.iter().map(|r| r.key.as_deref()))),
                    _ => return Ok(Arc::clone(decoded.next().expect("a decoded column per value field"))),
                };
                Ok(datafusion::arrow::compute::cast(&column, field.data_type())?)
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok((RecordBatch::try_new(Arc::clone(&self.schema), columns)?, kept))
    }

    /// `FORMAT UPSERT`: a chunk's messages netted per key, the last one winning: the rows to
    /// store and the keys (columns `key_schema`) to delete (empty values: tombstones). A message
    /// without a key, or with a key or value that does not decode, is a dead letter.
    fn keyed_rows(
        &mut self,
        mut records: Vec<Record>,
        (key_columns, key_schema): &(Vec<usize>, SchemaRef),
    ) -> Result<(RecordBatch, RecordBatch)> {
        use datafusion::arrow::row::{RowConverter, SortField};
        records.sort_by_key(|r| (r.partition, r.offset));
        let read_at = chrono::Utc::now().timestamp_micros();
        let topic = self.topic.clone();
        let position = |r: &Record| format!("{topic}:{}:{}", r.partition, r.offset);
        let dead_letter = |r: &Record, error: &str| DeadLetter {
            position: position(r),
            error: error.into(),
            raw: String::from_utf8_lossy(&r.value[..r.value.len().min(1024)]).into_owned(),
            read_at_micros: read_at,
        };
        let (keyed, keyless): (Vec<Record>, Vec<Record>) = records.into_iter().partition(|r| r.key.is_some());
        self.dead.extend(keyless.iter().map(|r| dead_letter(r, "a message of a FORMAT UPSERT topic needs a key")));
        let (tombstones, values): (Vec<Record>, Vec<Record>) = keyed.into_iter().partition(|r| r.value.is_empty());
        // A tombstone must name its key (the decoder would pass an empty one over).
        let (tombstones, blank): (Vec<Record>, Vec<Record>) =
            tombstones.into_iter().partition(|r| r.key.as_deref().is_some_and(|k| !k.trim().is_empty()));
        self.dead
            .extend(blank.iter().map(|r| dead_letter(r, "a tombstone of a FORMAT UPSERT topic with an empty key")));
        let (rows, row_records) = self.decode_rows(&values, true)?;
        let keys_text = tombstones.iter().map(|r| (position(r), r.key.as_deref().unwrap_or_default().as_bytes()));
        let (good, dead) = records::decode_each(TextEncoding::Json, key_schema, &[], keys_text);
        self.dead.extend(dead);
        let key_records: Vec<usize> = good.iter().map(|(i, _)| *i).collect();
        let keys = datafusion::arrow::compute::concat_batches(key_schema, good.iter().map(|(_, b)| b))?;
        // Each key's last message, in (partition, offset) order.
        let fields = key_schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
        let converter = RowConverter::new(fields)?;
        let row_keys = converter.convert_columns(rows.project(key_columns)?.columns())?;
        let tombstone_keys = converter.convert_columns(keys.columns())?;
        let mut events: Vec<((i32, i64), bool, usize)> = Vec::new();
        events.extend(
            row_records.iter().enumerate().map(|(row, &r)| ((values[r].partition, values[r].offset), true, row)),
        );
        events.extend(
            key_records
                .iter()
                .enumerate()
                .map(|(key, &r)| ((tombstones[r].partition, tombstones[r].offset), false, key)),
        );
        events.sort_unstable_by_key(|(at, _, _)| *at);
        let mut last: crate::types::hash::HashMap<&[u8], (bool, usize)> = Default::default();
        for &(_, is_row, index) in &events {
            let key = if is_row { row_keys.row(index) } else { tombstone_keys.row(index) };
            last.insert(key.data(), (is_row, index));
        }
        let mut upserts: Vec<u32> = last.values().filter(|(is_row, _)| *is_row).map(|(_, i)| *i as u32).collect();
        let mut deletes: Vec<u32> = last.values().filter(|(is_row, _)| !*is_row).map(|(_, i)| *i as u32).collect();
        upserts.sort_unstable();
        deletes.sort_unstable();
        let take = |batch: &RecordBatch, picks: Vec<u32>| -> Result<RecordBatch> {
            Ok(datafusion::arrow::compute::take_record_batch(
                batch,
                &datafusion::arrow::array::UInt32Array::from(picks),
            )?)
        };
        Ok((take(&rows, upserts)?, take(&keys, deletes)?))
    }
}

impl KafkaReader {
    /// Commits `position` (the stored position: every message before it is in the source) to
    /// the consumer group, at most every `kafka.group.commit.ms`, without waiting: so that
    /// `kafka-consumer-groups --describe --group weir-<topic>` and lag exporters see how far
    /// Weir has read. A failed commit only shows in the debug log.
    fn commit_to_group(&mut self, position: &Offsets) {
        let due = !self.group_commit.is_zero() && self.last_group_commit.elapsed() >= self.group_commit;
        if !due || position.is_empty() || *position == self.group_committed {
            return;
        }
        let Some((consumer, _)) = &self.consumer else { return };
        self.last_group_commit = Instant::now();
        let mut list = TopicPartitionList::new();
        for (&partition, &offset) in position {
            if list.add_partition_offset(&self.topic, partition, Offset::Offset(offset)).is_err() {
                return;
            }
        }
        match consumer.commit(&list, rdkafka::consumer::CommitMode::Async) {
            Ok(()) => self.group_committed = position.clone(),
            Err(e) => tracing::debug!(topic = %self.topic, "committing the position to the consumer group failed: {e}"),
        }
    }
}

/// The high watermark of `partition` the consumer last saw in a fetch response, without a
/// request to the broker (librdkafka's `rd_kafka_get_watermark_offsets`, which rdkafka does not
/// wrap); None until one is known.
/// The declared value columns (`schema`) of decoded Avro rows (`batch`, the rows of records
/// `kept`), by name, cast to their declared types; a row a cast refuses (an overflow, a value
/// of another type) or with NULL in a NOT NULL column goes to `dead` instead. Returns the
/// columns and the records they are.
fn declared_values(
    schema: &SchemaRef,
    batch: RecordBatch,
    kept: Vec<usize>,
    dead: &mut Vec<(usize, String)>,
) -> Result<(RecordBatch, Vec<usize>)> {
    let strict = datafusion::arrow::compute::CastOptions { safe: false, ..Default::default() };
    let cast = |batch: &RecordBatch| -> Result<RecordBatch> {
        let columns = schema
            .fields()
            .iter()
            .map(|field| {
                let column = batch.column_by_name(field.name()).expect("checked when the source was made");
                let column = datafusion::arrow::compute::cast_with_options(column, field.data_type(), &strict)?;
                if !field.is_nullable() && column.null_count() > 0 {
                    return Err(WeirError::new(
                        SqlState::NOT_NULL_VIOLATION,
                        format!("column \"{}\" is NOT NULL, the value has none", field.name()),
                    ));
                }
                Ok(column)
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let rows = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Ok(RecordBatch::try_new_with_options(Arc::clone(schema), columns, &rows)?)
    };
    if let Ok(values) = cast(&batch) {
        return Ok((values, kept));
    }
    // Row by row, to find the ones refused.
    let mut good = Vec::new();
    for row in 0..batch.num_rows() {
        match cast(&batch.slice(row, 1)) {
            Ok(_) => good.push(row as u32),
            Err(e) => dead.push((kept[row], format!("the value does not fit the source's columns: {}", e.message))),
        }
    }
    dead.sort_by_key(|(i, _)| *i);
    let taken = datafusion::arrow::compute::take_record_batch(
        &batch,
        &datafusion::arrow::array::UInt32Array::from(good.clone()),
    )?;
    Ok((cast(&taken)?, good.iter().map(|&row| kept[row as usize]).collect()))
}

fn cached_high_watermark(consumer: &NotingConsumer, topic: &str, partition: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; the topic is a NUL-terminated
    // string that outlives the call; `low` and `high` are valid for writes.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

fn record_of(m: &rdkafka::message::BorrowedMessage<'_>) -> Record {
    Record {
        partition: m.partition(),
        offset: m.offset(),
        timestamp: match m.timestamp() {
            Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => Some(ms),
            Timestamp::NotAvailable => None,
        },
        key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
        value: m.payload().unwrap_or_default().to_vec(),
    }
}

impl SourceReader for KafkaReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// An Avro or Protobuf source's reader schema, kept: the registry's latest schema may
    /// change, the source's columns may not.
    fn settled_options(&self) -> Vec<(String, String)> {
        self.binary.iter().flat_map(|binary| binary.settled_options()).collect()
    }

    /// The broker answers and the topic exists (CREATE SOURCE).
    fn check(&mut self) -> Result<()> {
        let consumer = self.consumer()?;
        self.partitions(&consumer).map(|_| ())
    }

    fn read(&mut self, from: &Position) -> Result<Chunk> {
        let known = offsets::offsets(from)?;
        self.commit_to_group(&known);
        let assigned = matches!(&self.consumer, Some((_, at)) if *at == known && !known.is_empty());
        // A new consumer only when the position is not where the current one reads (the first
        // read, a restart, a retry); a metadata refresh keeps it and its prefetched messages.
        let reassigned = if !assigned {
            self.assign(known.clone()).map(|()| true)
        } else if self.last_refresh.elapsed() >= self.refresh {
            self.add_new_partitions()
        } else {
            Ok(false)
        };
        match reassigned {
            Err(e) => {
                self.consumer = None;
                return Ok(Chunk::Retry(self.retry, e.message));
            }
            Ok(true) => {
                // New partitions (or the first read): their start offsets become the position
                // before anything is read from them, so every chunk's first offsets are explicit.
                let assigned = self.consumer.as_ref().map(|(_, o)| o.clone()).unwrap_or_default();
                if assigned != known {
                    let empty = RecordBatch::new_empty(Arc::clone(&self.schema));
                    return Ok(Chunk::Rows(empty, offsets::position(from.records, &assigned)));
                }
            }
            Ok(false) => {}
        }
        let records = match self.poll_chunk() {
            Ok(records) => records,
            Err(e) => {
                let consumer = self.consumer.take().map(|(c, _)| c);
                let noted = consumer.as_ref().map(|c| &c.context().failures);
                let error = broker_error(&self.topic, &e, noted.unwrap_or(&ConnectionFailures::default()));
                return Ok(Chunk::Retry(self.retry, error.message));
            }
        };
        let refusal = match records.is_empty() {
            true => self.consumer.as_ref().and_then(|(c, _)| c.context().failures.take_refusal()),
            false => None,
        };
        if let Some(refusal) = refusal {
            // The broker took this client's credentials or certificates once and refuses them
            // now: the source retries with a new client and says why in the meantime.
            self.consumer = None;
            let message = format!("Kafka topic \"{}\": the broker refused the connection: {refusal}", self.topic);
            return Ok(Chunk::Retry(self.retry, message));
        }
        if records.is_empty() {
            // The poll waited already.
            return Ok(Chunk::Wait(Duration::ZERO));
        }
        let read = records.len() as u64;
        let offsets = self.consumer.as_ref().map(|(_, o)| o.clone()).unwrap_or_default();
        tracing::debug!(topic = %self.topic, read, from = ?known, to = ?offsets, "chunk read");
        let position = offsets::position(from.records + read, &offsets);
        if let Some(key) = self.upsert_key.take() {
            let keyed = self.keyed_rows(records, &key);
            self.upsert_key = Some(key);
            let (upserts, deleted) = keyed?;
            return Ok(Chunk::Keyed { upserts, deleted, position });
        }
        match self.rows(records, true) {
            Ok(rows) => {
                self.registry_failures = 0;
                Ok(Chunk::Rows(rows, position))
            }
            // The schema registry could not be asked: the same messages are read again later,
            // after a wait that doubles with each failure in a row (up to REGISTRY_BACKOFF_MAX).
            Err(e) if e.state == SqlState::UNABLE_TO_CONNECT => {
                self.consumer = None;
                let pause = self.retry.saturating_mul(1 << self.registry_failures.min(16)).min(REGISTRY_BACKOFF_MAX);
                self.registry_failures += 1;
                Ok(Chunk::Retry(pause.max(self.retry), e.message))
            }
            Err(e) => Err(e),
        }
    }

    fn replayable(&self) -> bool {
        true
    }

    /// The messages from `from`'s offsets up to `to`'s, read again.
    fn replay(&mut self, from: &Position, to: &Position) -> Result<RecordBatch> {
        let records = self.read_again(&[(from, to)])?.pop().unwrap_or_default();
        self.rows(records, false)
    }

    /// Consecutive chunks read again in one pass over the topic.
    fn replay_many(&mut self, ranges: &[(&Position, &Position)]) -> Result<Vec<RecordBatch>> {
        self.read_again(ranges)?.into_iter().map(|records| self.rows(records, false)).collect()
    }

    fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead)
    }
}

impl KafkaReader {
    /// The messages of each of `ranges` (from one position's offsets up to another's), read
    /// again with one assignment of every partition from the first range's offset to the last
    /// one's: consecutive chunks cost one pass, not a round trip each. A message goes to the
    /// range whose offsets hold it; one no range holds (between ranges not consecutive) is
    /// passed over.
    fn read_again(&mut self, ranges: &[(&Position, &Position)]) -> Result<Vec<Vec<Record>>> {
        // Per partition, each range's offsets [first, last) and its index, in offset order.
        let mut bounds: BTreeMap<i32, Vec<(i64, i64, usize)>> = BTreeMap::new();
        for (i, (from, to)) in ranges.iter().enumerate() {
            let (start, end) = (offsets::offsets(from)?, offsets::offsets(to)?);
            for (&partition, &last) in &end {
                // A partition found during the chunk starts where the chunk first read it.
                let first = start.get(&partition).copied().unwrap_or(0);
                if first < last {
                    bounds.entry(partition).or_default().push((first, last, i));
                }
            }
        }
        for list in bounds.values_mut() {
            list.sort_unstable();
        }
        tracing::debug!(topic = %self.topic, chunks = ranges.len(), "chunks read again");
        let mut records: Vec<Vec<Record>> = ranges.iter().map(|_| Vec::new()).collect();
        if bounds.is_empty() {
            return Ok(records);
        }
        let consumer = match self.replay_consumer.take() {
            Some(consumer) => consumer,
            None => self.consumer()?,
        };
        let broker = |e: &KafkaError| broker_error(&self.topic, e, &consumer.context().failures);
        let mut list = TopicPartitionList::new();
        let mut wanted: BTreeMap<i32, i64> = BTreeMap::new();
        for (&partition, ranges) in &bounds {
            // Sorted and not overlapping: the first range starts the pass, the last ends it.
            let (first, last) = (ranges[0].0, ranges[ranges.len() - 1].1);
            list.add_partition_offset(&self.topic, partition, Offset::Offset(first)).map_err(|e| broker(&e))?;
            wanted.insert(partition, last);
        }
        let gone = |why: String| {
            WeirError::new(
                SqlState::IO_ERROR,
                format!("Kafka topic \"{}\": messages of a logged chunk cannot be read again: {why}", self.topic),
            )
        };
        consumer.assign(&list).map_err(|e| broker(&e))?;
        let deadline = Instant::now() + self.timeout;
        while !wanted.is_empty() {
            if Instant::now() >= deadline {
                return Err(gone(format!("partitions {:?} did not reach their offsets in time", wanted.keys())));
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => {
                    let (partition, offset) = (m.partition(), m.offset());
                    if let Some(&last) = wanted.get(&partition) {
                        let ranges = &bounds[&partition];
                        let at = ranges.partition_point(|r| r.1 <= offset);
                        if let Some(&(_, _, i)) = ranges.get(at).filter(|r| r.0 <= offset) {
                            records[i].push(record_of(&m));
                        }
                        if offset + 1 >= last {
                            wanted.remove(&partition);
                        }
                    }
                }
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    if let Some(last) = wanted.get(&partition) {
                        // At its end before the last offset wanted: only control records
                        // (transaction markers) can lie between, or the messages are gone.
                        let position = consumer.position().ok().and_then(|p| {
                            p.find_partition(&self.topic, partition).and_then(|e| match e.offset() {
                                Offset::Offset(o) => Some(o),
                                _ => None,
                            })
                        });
                        if position.is_some_and(|p| p >= *last) {
                            wanted.remove(&partition);
                        } else {
                            return Err(gone(format!("partition {partition} ends before offset {last}")));
                        }
                    }
                }
                Some(Err(e)) => return Err(broker(&e)),
            }
        }
        // Kept for the next read only after one that went well.
        self.replay_consumer = Some(consumer);
        Ok(records)
    }
}
