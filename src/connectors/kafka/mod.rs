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
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};

use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, SqlState, WeirError};

pub use sink::KafkaSink;
pub use source::KafkaReader;

/// What librdkafka last said about a client's connections to its brokers, from its error
/// callback: a *refusal* (SASL authentication failed, a TLS handshake failed: a certificate not
/// trusted, a host name it was not issued for), which waiting does not mend, or a transport
/// failure (refused connection, unknown host). A broker error's message ([`broker_error`]) says
/// it, since librdkafka's own error for the request is only "broker transport failure" or a
/// timeout. Every Weir client's context holds one.
/// Clones share what was noted (a sink's producer and consumer note to one).
#[derive(Default, Clone)]
pub struct ConnectionFailures(std::sync::Arc<Noted>);

#[derive(Default)]
struct Noted {
    refusal: parking_lot::Mutex<Option<String>>,
    transport: parking_lot::Mutex<Option<String>>,
}

impl ConnectionFailures {
    /// Notes `error` if it is about connecting; logs it in any case but a partition's end (which
    /// is news, not an error: `enable.partition.eof` reports it so a reader knows it is caught
    /// up). The log names `topic`: librdkafka calls from its own threads, outside any span.
    pub fn note(&self, topic: &str, error: &KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        match code {
            Some(RDKafkaErrorCode::PartitionEOF) => return,
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL) => {
                *self.0.refusal.lock() = Some(readable(reason));
            }
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::Resolve) => {
                *self.0.transport.lock() = Some(readable(reason));
            }
            _ => {}
        }
        tracing::warn!(target: "librdkafka", topic = %topic, "librdkafka: {error}: {reason}");
    }

    /// Notes a librdkafka log line: a `FAIL` line is the clearest account of a failed
    /// connection ("Disconnected: connection closed by peer ... in state APIVERSION_QUERY": a
    /// TLS port spoken to in plain text). Lines go to the log at debug level.
    pub fn note_log(&self, topic: &str, level: RDKafkaLogLevel, facility: &str, line: &str) {
        if facility == "FAIL" && self.0.refusal.lock().is_none() {
            *self.0.transport.lock() = Some(readable(line));
        }
        use RDKafkaLogLevel::{Alert, Critical, Emerg, Error, Warning};
        if matches!(level, Emerg | Alert | Critical | Error | Warning) {
            tracing::warn!(target: "librdkafka", topic = %topic, facility, "{line}");
        } else {
            tracing::debug!(target: "librdkafka", topic = %topic, facility, "{line}");
        }
    }

    /// Forgets what was noted: a sink's new producer starts afresh.
    pub fn clear(&self) {
        *self.0.refusal.lock() = None;
        *self.0.transport.lock() = None;
    }

    /// The last refusal, taken: the broker refused this client's credentials or certificates.
    pub fn take_refusal(&self) -> Option<String> {
        self.0.refusal.lock().take()
    }

    /// The last refusal or else the last transport failure.
    fn last(&self) -> Option<String> {
        self.0.refusal.lock().clone().or_else(|| self.0.transport.lock().clone())
    }
}

/// librdkafka's `reason` without its thread prefix ("[thrd:...]: ") and timing suffix
/// (" (after 21ms in state AUTH_REQ)").
fn readable(reason: &str) -> String {
    let reason = match reason.strip_prefix("[thrd:").and_then(|r| r.split_once("]: ")) {
        Some((_, rest)) => rest,
        None => reason,
    };
    match reason.rfind(" (after ") {
        Some(at) if reason.ends_with(')') => reason[..at].to_string(),
        _ => reason.to_string(),
    }
}

/// The client context of Weir's consumers: librdkafka's errors go to the log as warnings (the
/// reader retries; its state shows in metrics and `weir_catalog.sources`) and connection
/// failures are noted ([`ConnectionFailures`]).
pub struct NotingContext {
    pub topic: String,
    pub failures: ConnectionFailures,
}

impl NotingContext {
    pub fn new(topic: &str) -> NotingContext {
        NotingContext { topic: topic.to_string(), failures: ConnectionFailures::default() }
    }
}

impl ClientContext for NotingContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        self.failures.note_log(&self.topic, level, facility, line);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.failures.note(&self.topic, &error, reason);
    }
}

impl ConsumerContext for NotingContext {}

/// A consumer with [`NotingContext`].
pub type NotingConsumer = BaseConsumer<NotingContext>;

/// The librdkafka settings a user passes as `properties.<name> = '...'` (security: TLS and
/// SASL, ADR 32; fetch and buffer sizes; `properties.bootstrap.server` is the broker list),
/// checked against `reserved`: settings Weir sets itself for its guarantees, which a user may
/// not change. Host names are verified by default (librdkafka's
/// `ssl.endpoint.identification.algorithm = https`).
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
    let protocol = config.get("security.protocol").unwrap_or("plaintext").to_ascii_lowercase();
    let ca_given =
        ["ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores"].iter().any(|k| config.get(k).is_some());
    if protocol.ends_with("ssl") && !ca_given {
        // The machine's trusted certificates: OpenSSL is built into Weir (ADR 32), so its own
        // default directory is not the system's; librdkafka looks in the usual places.
        config.set("ssl.ca.location", "probe");
    }
    // Connection failures are logged at level 6 (FAIL lines): noted whatever the server's own
    // log level (rdkafka would take it from the `log` facade's).
    config.set_log_level(RDKafkaLogLevel::Info);
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

/// The error (08001) of a broker that cannot be reached, refuses the client or a request, for
/// `topic`: what librdkafka said of the request and, when it noted one, of the connection.
fn broker_error(topic: &str, e: &KafkaError, failures: &ConnectionFailures) -> WeirError {
    let message = match failures.last() {
        Some(why) => format!("Kafka topic \"{topic}\": {e}: {why}"),
        None => format!("Kafka topic \"{topic}\": {e}"),
    };
    WeirError::new(SqlState::UNABLE_TO_CONNECT, message)
}

/// Serves an unassigned consumer's pending events (errors, log lines), so that its context
/// notes them: librdkafka hands them over only when the client is polled. An assigned
/// consumer is left alone (a poll could take one of its messages); its reader polls it.
fn serve_events(consumer: &NotingConsumer) {
    if consumer.assignment().is_ok_and(|a| a.count() == 0) {
        for _ in 0..64 {
            let _ = consumer.poll(Duration::ZERO);
        }
    }
}

/// How long one metadata request waits before the client's connection failures are looked at.
const METADATA_STEP: Duration = Duration::from_millis(500);

/// The partitions of `topic` now; 42704 if it does not exist, 08001 if the broker does not
/// answer within `timeout` or refuses the client (at once: a refusal does not pass by waiting).
fn topic_partitions(consumer: &NotingConsumer, topic: &str, timeout: Duration) -> Result<Vec<i32>> {
    let failures = &consumer.context().failures;
    let deadline = std::time::Instant::now() + timeout;
    let metadata = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match consumer.fetch_metadata(Some(topic), left.min(METADATA_STEP)) {
            Ok(metadata) => break metadata,
            Err(e) => {
                serve_events(consumer);
                if let Some(refusal) = failures.take_refusal() {
                    return Err(WeirError::new(
                        SqlState::UNABLE_TO_CONNECT,
                        format!("Kafka topic \"{topic}\": the broker refused the connection: {refusal}"),
                    ));
                }
                if left <= METADATA_STEP {
                    return Err(broker_error(topic, &e, failures));
                }
            }
        }
    };
    match metadata.topics().iter().find(|t| t.name() == topic) {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().iter().map(|p| p.id()).collect())
        }
        _ => Err(WeirError::new(SqlState::UNDEFINED_PARAMETER, format!("Kafka topic \"{topic}\" does not exist"))),
    }
}
