//! The Kafka sink: a view's changes written to a topic exactly once (the runtime is
//! [`crate::connectors::sink`]).
//!
//! ```sql
//! CREATE SINK to_kafka FROM per_auction WITH (connector = 'kafka', topic = 'per_auction',
//!   properties.bootstrap.server = '127.0.0.1:9092', primary_key = 'window_start,auction')
//!   FORMAT UPSERT ENCODE JSON;
//! ```
//! Each checkpoint's changes of each sink shard are one Kafka transaction (`transactional.id` =
//! the shard's `connectors::sink::identity`, `<prefix>-<sink id>-<token>[-s<shard>]`, the
//! prefix `weir-sink` unless `transactional.id.prefix` says otherwise; the token keeps sinks of
//! other servers and data directories apart: ADR 37), committed together with the shard's marker: the offset of partition 0 of
//! the topic, for the consumer group of the same name, set to the checkpoint's epoch
//! (`send_offsets_to_transaction`). Reading that group's committed offset says which checkpoint
//! was delivered last. Consumers with `isolation.level = read_committed` see every change once.
//!
//! `sink.delivery_guarantee = 'at-least-once'` trades that for cheaper writes: no transaction,
//! the idempotent producer (no duplicates from its own retries), the marker committed to the
//! consumer group after the messages are flushed. A crash between the flush and the marker
//! sends that checkpoint's messages again, so consumers may see them twice (an UPSERT topic's
//! compacted state is the same either way).
//!
//! `FORMAT UPSERT`: the key is the primary key's columns as a JSON object, the value the row as
//! a JSON object, or empty (a tombstone) when the row was deleted; a checkpoint's changes are
//! netted per key first. `FORMAT DEBEZIUM`: the same key; the value Debezium's change envelope,
//! `{"before": row | null, "after": row | null, "op": "c" | "u" | "d"}` (the key's row at the
//! previous checkpoint and at this one), and after a delete a tombstone, as Debezium writes
//! them, so its consumers (and Kafka Connect sinks) read Weir's changes unchanged. `FORMAT PLAIN`:
//! every row is a message (no key); only over a view that never retracts (CREATE SINK checks).

use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext, PurgeConfig};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{
    broker_error, client_config, is_passed_through, json_lines, send_all, topic_partitions, ConnectionFailures,
    KafkaMessage, NotingConsumer, NotingContext,
};
use crate::catalog::options::ConnectorOptions;
use crate::connectors::avro::AvroSink;
use crate::connectors::sink::{key_columns, net_by_key, SinkWriter, WriterSpec};
use crate::error::{Result, SqlState, WeirError};
use crate::types::{ChangeBatch, Epoch};

pub const OPTIONS: &[&str] = &[
    "connector",
    "topic",
    "properties.bootstrap.server",
    "primary_key",
    "kafka.timeout.ms",
    "transactional.id.prefix",
    "sink.delivery_guarantee",
    "sink.parallelism",
    "format",
    "encode",
];

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// What the messages are.
enum Format {
    /// Every row a message, no key.
    Plain,
    /// Keyed by these columns: the row, or a tombstone.
    Upsert(Vec<usize>),
    /// Keyed by these columns: Debezium's before/after envelope.
    Debezium(Vec<usize>),
}

/// A producer's client context that remembers messages the broker refused (after librdkafka's
/// own retries): without a transaction to fail, an at-least-once delivery checks it before
/// committing its marker. Connection failures are noted as a consumer's are.
pub struct DeliveryErrors {
    failed: std::sync::atomic::AtomicU64,
    last: parking_lot::Mutex<Option<String>>,
    topic: String,
    failures: ConnectionFailures,
}

impl ClientContext for DeliveryErrors {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, line: &str) {
        self.failures.note_log(&self.topic, level, facility, line);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.failures.note(&self.topic, &error, reason);
    }
}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            *self.last.lock() = Some(e.to_string());
        }
    }
}

type SinkProducer = BaseProducer<DeliveryErrors>;

pub struct KafkaSink {
    topic: String,
    /// The broker and the user's `properties.*`.
    client: ClientConfig,
    /// `connectors::sink::identity`: the transactional id and the marker's consumer group.
    identity: String,
    format: Format,
    /// `ENCODE AVRO`: keys and values as Avro through a schema registry (else JSON).
    avro: Option<AvroSink>,
    /// One transaction per checkpoint (the default); else at-least-once.
    exactly_once: bool,
    timeout: Duration,
    producer: Option<SinkProducer>,
    marker: Option<NotingConsumer>,
    /// What the producer's and the marker's connections last failed with.
    failures: ConnectionFailures,
    /// Messages the producer had failed to deliver when the group began (at-least-once).
    failed_before: u64,
    /// A transaction is open (begun, neither committed nor aborted).
    in_transaction: bool,
}

impl KafkaSink {
    /// The writer `spec` says (FORMAT PLAIN needs its view append-only), as `options` say.
    pub fn new(options: &ConnectorOptions, spec: &WriterSpec) -> Result<KafkaSink> {
        let WriterSpec { ref schema, append_only, .. } = *spec;
        options.only_or(OPTIONS, |k| {
            is_passed_through(k)
                || crate::connectors::schema_registry::OPTIONS.contains(&k)
                || crate::connectors::avro::SINK_OPTIONS.contains(&k)
        })?;
        let topic = options.get("topic").ok_or_else(|| invalid("a Kafka sink needs topic = '...'".into()))?;
        if options.get("properties.bootstrap.server").is_none() {
            return Err(invalid("a Kafka sink needs properties.bootstrap.server = 'host:port'".into()));
        }
        let client = client_config(
            options,
            &["transactional.id", "enable.idempotence", "group.id", "enable.auto.commit", "isolation.level"],
        )?;
        let encode = options.get("encode").unwrap_or("json").to_ascii_lowercase();
        if !matches!(encode.as_str(), "json" | "avro") {
            return Err(WeirError::unsupported(format!("ENCODE {encode} for a Kafka sink (ENCODE JSON and AVRO are)")));
        }
        if encode != "avro" && options.0.keys().any(|k| k.starts_with("schema.registry")) {
            return Err(invalid("schema.registry options are for ENCODE AVRO".into()));
        }
        let format_name = options.get("format").unwrap_or("upsert").to_ascii_lowercase();
        let keyed = |what: &str| -> Result<Vec<usize>> {
            let names = options
                .get("primary_key")
                .ok_or_else(|| invalid(format!("FORMAT {what} needs primary_key = 'column, ...' (the message key)")))?;
            key_columns(names, schema)
        };
        let format = match format_name.as_str() {
            "upsert" => Format::Upsert(keyed("UPSERT")?),
            "debezium" => Format::Debezium(keyed("DEBEZIUM")?),
            "plain" if append_only => Format::Plain,
            "plain" => {
                return Err(WeirError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "FORMAT PLAIN needs a view that only ever inserts rows; this one updates or deletes them",
                )
                .with_hint("Use FORMAT UPSERT with primary_key = '...': deletes become tombstones."))
            }
            other => {
                return Err(invalid(format!("a Kafka sink's FORMAT must be UPSERT, DEBEZIUM or PLAIN, not {other}")))
            }
        };
        let avro = match (&format, encode.as_str()) {
            (_, "json") => None,
            (Format::Debezium(_), _) => {
                return Err(WeirError::unsupported("FORMAT DEBEZIUM ENCODE AVRO (DEBEZIUM is JSON for now)"))
            }
            (Format::Plain, _) => Some(AvroSink::new(options, topic, schema, None)?),
            (Format::Upsert(key), _) => {
                let key_schema = schema.project(key)?;
                Some(AvroSink::new(options, topic, schema, Some(&key_schema))?)
            }
        };
        let exactly_once =
            match options.get("sink.delivery_guarantee").map(|g| g.to_ascii_lowercase().replace('_', "-")) {
                None => true,
                Some(g) if g == "exactly-once" => true,
                Some(g) if g == "at-least-once" => false,
                Some(other) => {
                    return Err(invalid(format!(
                        "sink.delivery_guarantee must be 'exactly-once' or 'at-least-once', not '{other}'"
                    )))
                }
            };
        Ok(KafkaSink {
            topic: topic.to_string(),
            client,
            identity: crate::connectors::sink::identity(
                options.get("transactional.id.prefix").unwrap_or("weir-sink"),
                spec,
            ),
            format,
            avro,
            exactly_once,
            timeout: Duration::from_millis(options.u64_or("kafka.timeout.ms", 10_000)?.max(1)),
            producer: None,
            marker: None,
            failures: ConnectionFailures::default(),
            failed_before: 0,
            in_transaction: false,
        })
    }

    /// A client of this sink's broker.
    fn client(&self) -> ClientConfig {
        self.client.clone()
    }

    fn broker(&self) -> impl Fn(KafkaError) -> WeirError + '_ {
        move |e| broker_error(&self.topic, &e, &self.failures)
    }

    /// A client context noting to this sink's [`ConnectionFailures`].
    fn context(&self) -> NotingContext {
        NotingContext { topic: self.topic.clone(), failures: self.failures.clone() }
    }

    /// The producer, made if there is none: transactional (fencing any earlier one with the
    /// same id, and aborting its open transaction), or idempotent for at-least-once.
    fn producer(&mut self) -> Result<&SinkProducer> {
        if self.producer.is_none() {
            self.failures.clear();
            let mut config = self.client();
            if self.exactly_once {
                config.set("transactional.id", &self.identity);
                // A new sink's first transaction holds its view's every row: the brokers' usual
                // maximum (transaction.max.timeout.ms), not librdkafka's minute.
                if config.get("transaction.timeout.ms").is_none() {
                    config.set("transaction.timeout.ms", "900000");
                }
            } else {
                config.set("enable.idempotence", "true");
            }
            let context = DeliveryErrors {
                failed: Default::default(),
                last: Default::default(),
                topic: self.topic.clone(),
                failures: self.failures.clone(),
            };
            let producer: SinkProducer = config.create_with_context(context).map_err(self.broker())?;
            if self.exactly_once {
                if let Err(e) = producer.init_transactions(self.timeout) {
                    // Its events (why the broker did not answer) are handed over by a poll.
                    for _ in 0..64 {
                        producer.poll(Duration::ZERO);
                    }
                    return Err(self.broker()(e));
                }
            }
            self.producer = Some(producer);
        }
        Ok(self.producer.as_ref().expect("made"))
    }

    fn marker(&mut self) -> Result<&NotingConsumer> {
        if self.marker.is_none() {
            let consumer: NotingConsumer = self
                .client()
                .set("group.id", &self.identity)
                .set("enable.auto.commit", "false")
                .create_with_context(self.context())
                .map_err(self.broker())?;
            self.marker = Some(consumer);
        }
        Ok(self.marker.as_ref().expect("made"))
    }

    /// Each row of `batch` as a message value (JSON, or Avro).
    fn values(&mut self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        match &mut self.avro {
            Some(avro) => avro.values(batch),
            None => json_lines(batch),
        }
    }

    /// Each row of `batch` (the key's columns) as a message key.
    fn keys(&mut self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        match &mut self.avro {
            Some(avro) => avro.keys(batch),
            None => json_lines(batch),
        }
    }

    /// The messages of an outbox part's changes: (key, value), value None for a tombstone.
    fn messages(&mut self, changes: &[ChangeBatch]) -> Result<Vec<KafkaMessage>> {
        let key_columns = match &self.format {
            Format::Plain => {
                let mut out = Vec::new();
                for batch in changes {
                    if batch.ops.iter().any(|op| op.sign() < 0) {
                        return Err(WeirError::internal("a FORMAT PLAIN Kafka sink received a retraction"));
                    }
                    out.extend(self.values(&batch.data)?.into_iter().map(|v| (None, Some(v))));
                }
                return Ok(out);
            }
            Format::Upsert(key) | Format::Debezium(key) => key.clone(),
        };
        let mut keyed = Vec::new();
        for batch in changes {
            let keys = self.keys(&batch.data.project(&key_columns)?)?;
            let values = self.values(&batch.data)?;
            keyed.extend(keys.into_iter().zip(values).zip(&batch.ops).map(|((k, v), op)| (k, v, op.sign() > 0)));
        }
        let netted = net_by_key(keyed);
        if matches!(self.format, Format::Upsert(_)) {
            // A key that came and went within the checkpoint, or came back as it was, has
            // nothing to say.
            let changed = netted.into_iter().filter(|c| c.before != c.after);
            return Ok(changed.map(|c| (Some(c.key), c.after)).collect());
        }
        let mut out = Vec::new();
        for change in netted {
            let op = match (&change.before, &change.after) {
                (None, None) => continue,
                (Some(before), Some(after)) if before == after => continue,
                (None, Some(_)) => "c",
                (Some(_), Some(_)) => "u",
                (Some(_), None) => "d",
            };
            let row = |r: &Option<Vec<u8>>| {
                r.as_deref().map_or_else(|| "null".to_string(), |r| String::from_utf8_lossy(r).into_owned())
            };
            let envelope =
                format!(r#"{{"before":{},"after":{},"op":"{op}"}}"#, row(&change.before), row(&change.after));
            out.push((Some(change.key.clone()), Some(envelope.into_bytes())));
            if op == "d" {
                out.push((Some(change.key), None));
            }
        }
        Ok(out)
    }
}

impl SinkWriter for KafkaSink {
    /// The broker answers and the topic exists (CREATE SINK).
    fn check(&mut self) -> Result<()> {
        let consumer: NotingConsumer = self.client().create_with_context(self.context()).map_err(self.broker())?;
        topic_partitions(&consumer, &self.topic, self.timeout)?;
        // The schemas go to the registry now, so that one that cannot take them fails CREATE.
        match &mut self.avro {
            Some(avro) => avro.register(),
            None => Ok(()),
        }
    }

    fn delivered(&mut self) -> Result<Option<Epoch>> {
        self.producer()?;
        let (topic, timeout) = (self.topic.clone(), self.timeout);
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition(&topic, 0);
        let committed =
            self.marker()?.committed_offsets(wanted, timeout).map_err(|e| broker_error(&topic, &e, &self.failures))?;
        Ok(match committed.find_partition(&topic, 0).map(|p| p.offset()) {
            Some(Offset::Offset(epoch)) if epoch >= 0 => Some(epoch as Epoch),
            _ => None,
        })
    }

    fn begin(&mut self) -> Result<()> {
        let broker = broker_error_of(self.topic.clone(), self.failures.clone());
        let exactly_once = self.exactly_once;
        let producer = self.producer()?;
        if exactly_once {
            producer.begin_transaction().map_err(broker)?;
        }
        self.failed_before = producer.context().failed.load(std::sync::atomic::Ordering::SeqCst);
        self.in_transaction = exactly_once;
        Ok(())
    }

    fn write(&mut self, changes: &[ChangeBatch]) -> Result<()> {
        let messages = self.messages(changes)?;
        let topic = self.topic.clone();
        let broker = broker_error_of(topic.clone(), self.failures.clone());
        let producer = self.producer()?;
        send_all(producer, &topic, &messages, &broker)
    }

    fn commit(&mut self, group: Epoch) -> Result<()> {
        let topic = self.topic.clone();
        let timeout = self.timeout;
        let broker = broker_error_of(topic.clone(), self.failures.clone());
        let mut marker = TopicPartitionList::new();
        marker.add_partition_offset(&topic, 0, Offset::Offset(group as i64)).map_err(&broker)?;
        let group_metadata =
            self.marker()?.group_metadata().ok_or_else(|| WeirError::internal("no consumer group metadata"))?;
        let (exactly_once, failed_before) = (self.exactly_once, self.failed_before);
        let producer = self.producer()?;
        if !exactly_once {
            producer.flush(timeout).map_err(&broker)?;
            let errors = producer.context();
            if errors.failed.load(std::sync::atomic::Ordering::SeqCst) != failed_before {
                let why = errors.last.lock().clone().unwrap_or_default();
                return Err(WeirError::new(
                    SqlState::IO_ERROR,
                    format!("Kafka topic \"{topic}\": a message was refused: {why}"),
                ));
            }
            crate::fault::point("sink.before_commit");
            return self.marker()?.commit(&marker, CommitMode::Sync).map_err(broker);
        }
        producer.send_offsets_to_transaction(&marker, &group_metadata, timeout).map_err(&broker)?;
        crate::fault::point("sink.before_commit");
        producer.commit_transaction(timeout).map_err(broker)?;
        self.in_transaction = false;
        Ok(())
    }

    /// The transaction is aborted (or its producer was fenced), or an at-least-once group's
    /// messages may be half sent: a new producer next time.
    fn abort(&mut self) {
        self.in_transaction = false;
        if let Some(producer) = self.producer.take() {
            if self.exactly_once {
                abort_transaction(&producer, self.timeout);
            }
        }
    }
}

/// Aborts `producer`'s open transaction. librdkafka aborts only once every message's delivery
/// report is served, and nothing else polls this producer: the messages are purged (not sent)
/// and their reports served first. A failure is left to the next producer with the same
/// transactional id, which fences the transaction.
fn abort_transaction(producer: &SinkProducer, timeout: Duration) {
    producer.purge(PurgeConfig::default().queue().inflight());
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
        producer.poll(Duration::from_millis(10));
    }
    if let Err(e) = producer.abort_transaction(timeout) {
        tracing::debug!("aborting a Kafka sink's transaction failed: {e}");
    }
}

/// A writer dropped with a transaction open (its sink stopped or dropped while a group waited
/// for its checkpoint) aborts it, on a thread of its own (it waits for the broker): readers
/// `read_committed` of the topic would otherwise wait for it until `transaction.timeout.ms`,
/// and for ever on a broker that does not expire transactions, since a dropped sink's
/// transactional id is never used again to fence it.
impl Drop for KafkaSink {
    fn drop(&mut self) {
        if let (true, Some(producer)) = (self.in_transaction, self.producer.take()) {
            let timeout = self.timeout;
            std::thread::spawn(move || abort_transaction(&producer, timeout));
        }
    }
}

/// The error of a broker that refused or did not answer, for `topic`.
fn broker_error_of(topic: String, failures: ConnectionFailures) -> impl Fn(KafkaError) -> WeirError {
    move |e| broker_error(&topic, &e, &failures)
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KafkaSink({})", self.topic)
    }
}
