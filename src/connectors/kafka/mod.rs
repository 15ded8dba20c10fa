//! `connector = 'kafka'`: Kafka topics as sources ([`source`]) and as exactly-once sinks
//! ([`sink`]), through librdkafka (`rdkafka`). Everything here speaks only the Kafka protocol,
//! so it works against Apache Kafka and compatible brokers alike.
//!
//! - [`source`]: every partition of a topic, read from the checkpoint's offsets;
//! - [`offsets`]: a source's position, the next offset of each partition;
//! - [`sink`]: a view's changes written in one Kafka transaction per checkpoint.

pub mod offsets;
pub mod sink;
pub mod source;

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};

use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, SqlState, WeirError};

pub use sink::KafkaSink;
pub use source::KafkaReader;

/// The client context of Weir's consumers: librdkafka's errors go to the log as warnings (the
/// reader retries; its state shows in metrics), except a partition's end, which is news, not
/// an error (`enable.partition.eof` reports it so a reader knows it is caught up). Its
/// warnings name the topic: librdkafka calls from its own threads, outside the source's span.
pub struct QuietContext {
    pub topic: String,
}

impl ClientContext for QuietContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!(target: "librdkafka", topic = %self.topic, "librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for QuietContext {}

/// A consumer with [`QuietContext`].
pub type QuietConsumer = BaseConsumer<QuietContext>;

/// The librdkafka settings a user passes as `properties.<name> = '...'` (security, fetch and
/// buffer sizes; `properties.bootstrap.server` is the broker list), checked against `reserved`:
/// settings Weir sets itself for its guarantees, which a user may not change.
fn client_config(options: &ConnectorOptions, reserved: &[&str]) -> Result<ClientConfig> {
    let mut config = ClientConfig::new();
    for (key, value) in &options.0 {
        let Some(name) = key.strip_prefix("properties.") else { continue };
        if name == "bootstrap.server" {
            config.set("bootstrap.servers", value);
        } else if reserved.contains(&name) {
            return Err(WeirError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("{key} is set by Weir (exactly-once reading and writing depend on it)"),
            ));
        } else {
            config.set(name, value);
        }
    }
    config.set("log_level", "3");
    Ok(config)
}

/// Whether `key` is a librdkafka setting passed through (`properties.*`), which the Kafka
/// connectors take besides their own options.
fn is_passed_through(key: &str) -> bool {
    key.starts_with("properties.")
}

/// A message to write: (key, value), value None for a tombstone.
pub type KafkaMessage = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Hands `messages` to `producer` for `topic`, waiting while its queue is full; `broker` says
/// what any other error means. The sinks and `weir bench --kafka`'s producer send this way.
pub fn send_all<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &BaseProducer<C>,
    topic: &str,
    messages: &[KafkaMessage],
    broker: &dyn Fn(KafkaError) -> WeirError,
) -> Result<()> {
    for (key, value) in messages {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
        if let Some(key) = key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = value {
            record = record.payload(value.as_slice());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    producer.poll(Duration::from_millis(50));
                    record = back;
                }
                Err((e, _)) => return Err(broker(e)),
            }
        }
        producer.poll(Duration::ZERO);
    }
    Ok(())
}

/// Each row of `batch` as one JSON object (ENCODE JSON).
pub fn json_lines(batch: &datafusion::arrow::array::RecordBatch) -> Result<Vec<Vec<u8>>> {
    let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(Vec::new());
    writer.write(batch)?;
    writer.finish()?;
    let bytes = writer.into_inner();
    Ok(bytes.split(|b| *b == b'\n').filter(|line| !line.is_empty()).map(<[u8]>::to_vec).collect())
}

/// The error of a broker that cannot be reached (or refuses a request) for `topic`.
fn unreachable_broker(topic: &str, e: &KafkaError) -> WeirError {
    WeirError::new(SqlState::UNABLE_TO_CONNECT, format!("Kafka topic \"{topic}\": {e}"))
}

/// The partitions of `topic` now; 42704 if it does not exist, 08001 if the broker does not
/// answer within `timeout`.
fn topic_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(|e| unreachable_broker(topic, &e))?;
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().iter().map(|p| p.id()).collect())
        }
        _ => Err(WeirError::new(SqlState::UNDEFINED_PARAMETER, format!("Kafka topic \"{topic}\" does not exist"))),
    }
}
