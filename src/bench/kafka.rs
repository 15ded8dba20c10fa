//! `weir bench nexmark --kafka HOST:PORT --query qN --events N`: a Nexmark query with Kafka
//! in and out, against a real broker. The generator's bids (those among the first N events)
//! are JSON messages on a fresh 4-partition topic; Weir reads it with a Kafka source, keeps the
//! view, and a sink writes the view to another fresh topic, `FORMAT UPSERT` keyed by all its
//! columns, exactly once (`--sink at-least-once`, or `none` for no sink). Checkpoints every
//! `--checkpoint-interval` (1 s unless given): a sink delivers at checkpoints.
//!
//! The bids are produced while the pipeline runs, by a process of its own (`--produce-to`, so
//! its memory is not counted as Weir's; it shares the machine's cores with Weir and the
//! broker), so the source reads near the topic's head, as in production; with `--preload`,
//! all of them before the pipeline starts, so it reads a full topic with no producer running.
//! - Throughput (`--rate 0`): the producer sends as fast as the broker takes; timed from
//!   creating the source until the view holds every bid and the sink has committed every
//!   change (its outbox empty after a final checkpoint).
//! - Latency (`--rate R`): the producer sends R events' bids per second, each bid's
//!   `date_time` set to when it is sent, while a `read_committed` consumer reads the sink's
//!   topic: end-to-end latency is a message's arrival minus its row's `date_time` (the bid it
//!   came from was sent then), p50 and p99 over every message (views with a `date_time`
//!   column: q0's every bid, q7's highest bids). Runs for N / R seconds.
//!
//! `--encode avro` puts the bids on the topic as bare Avro bodies and reads them with
//! `ENCODE AVRO (schema = ...)` (decoding's cost without a registry's framing).
//!
//! Prints one human line and one JSON line, as `weir bench nexmark` does; the JSON has
//! `cpu_seconds_per_million_bids` (Weir's process only, from /proc: the broker's and the
//! producer's cost do not count).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{RecordBatch, TimestampMillisecondArray};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};

use super::nexmark::{cpu_seconds, NexmarkOptions, QUERIES};
use super::{peak_rss_mib, Harness};
use crate::connectors::kafka::{json_lines, send_all, KafkaMessage};
use crate::connectors::nexmark::generator::{EventKind, Generator, GeneratorConfig};
use crate::connectors::source::stored_position;
use crate::error::{Result, WeirError};

/// What the Kafka mode adds to a Nexmark run.
pub struct KafkaBenchOptions {
    /// The broker's bootstrap servers.
    pub servers: String,
    /// `exactly-once`, `at-least-once` or `none` (no sink).
    pub sink: String,
    /// The sink's shards (`sink.parallelism`), if not one.
    pub sink_parallelism: Option<usize>,
    /// Produce every bid before the pipeline starts (throughput of the pipeline alone).
    pub preload: bool,
    /// The bids' encoding: `json` or `avro`.
    pub encode: String,
}

const PARTITIONS: i32 = 4;

fn kafka_error(what: &str) -> impl Fn(rdkafka::error::KafkaError) -> WeirError + '_ {
    move |e| WeirError::new(crate::error::SqlState::UNABLE_TO_CONNECT, format!("{what}: {e}"))
}

fn admin(servers: &str) -> Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new().set("bootstrap.servers", servers).create().map_err(kafka_error("Kafka admin client"))
}

async fn create_topic(servers: &str, name: &str) -> Result<()> {
    let admin = admin(servers)?;
    let topic = NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(1)).set("retention.ms", "-1");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = admin.create_topics(&[topic], &options).await.map_err(kafka_error("creating a topic"))?;
    for result in created {
        result.map_err(|(topic, e)| WeirError::internal(format!("creating topic {topic}: {e}")))?;
    }
    Ok(())
}

fn producer(servers: &str) -> Result<BaseProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .set("compression.type", "lz4")
        .create()
        .map_err(kafka_error("Kafka producer"))
}

/// The Avro schema of the generator's bids.
fn bid_avro_schema(bids: &datafusion::arrow::datatypes::Schema) -> Result<String> {
    crate::connectors::avro::avro_schema_of(bids, "Bid")
}

/// Sends each row of `bids` as one message (JSON, or a bare Avro body); returns how many.
fn send_bids(producer: &BaseProducer, topic: &str, bids: &RecordBatch, encode: &str) -> Result<usize> {
    let values = if encode == "avro" {
        let schema = bids.schema();
        let mut encoder = crate::connectors::avro::encoder(&schema, &bid_avro_schema(&schema)?, 0)?;
        encoder.encode(bids).map_err(|e| WeirError::internal(format!("Avro encoding: {e}")))?;
        // Confluent's framing (a zero byte and the 4-byte id) off: bare bodies.
        encoder.flush().iter().map(|row| row[5..].to_vec()).collect()
    } else {
        json_lines(bids)?
    };
    let messages: Vec<KafkaMessage> = values.into_iter().map(|value| (None, Some(value))).collect();
    send_all(producer, topic, &messages, &kafka_error("producing bids"))?;
    Ok(messages.len())
}

/// `bids` with `date_time` set to now.
fn stamped_now(bids: &RecordBatch) -> Result<RecordBatch> {
    let index = bids.schema().index_of("date_time")?;
    let now = chrono::Utc::now().timestamp_millis();
    let mut columns = bids.columns().to_vec();
    columns[index] = Arc::new(TimestampMillisecondArray::from(vec![now; bids.num_rows()]));
    Ok(RecordBatch::try_new(bids.schema(), columns)?)
}

/// The exact `q` quantile of `values` (sorted).
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values[((values.len() as f64 * q).ceil() as usize).clamp(1, values.len()) - 1]
}

pub async fn run(options: NexmarkOptions, kafka: KafkaBenchOptions) -> Result<()> {
    let (_, view) = QUERIES
        .iter()
        .find(|(name, _)| *name == options.query)
        .ok_or_else(|| WeirError::syntax(format!("unknown query {}", options.query)))?;
    let exactly_once = match kafka.sink.as_str() {
        "exactly-once" => Some(true),
        "at-least-once" => Some(false),
        "none" => None,
        other => return Err(WeirError::syntax(format!("--sink {other}: exactly-once, at-least-once or none"))),
    };
    if kafka.preload && options.rate > 0 {
        return Err(WeirError::syntax("--preload measures throughput: it takes no --rate"));
    }
    let encoding = match kafka.encode.as_str() {
        "json" => "JSON".to_string(),
        "avro" => {
            let generator = Generator::new(EventKind::Bid, GeneratorConfig::default());
            let schema = bid_avro_schema(&generator.batch(0, 1)?.schema())?;
            format!("AVRO (schema = '{schema}')")
        }
        other => return Err(WeirError::syntax(format!("--encode {other}: json or avro"))),
    };
    let suffix = format!("{}-{}", std::process::id(), chrono::Utc::now().timestamp_millis());
    let (input, output) = (format!("weir-bench-bids-{suffix}"), format!("weir-bench-{}-{suffix}", options.query));
    create_topic(&kafka.servers, &input).await?;
    create_topic(&kafka.servers, &output).await?;
    // The bids among the first N events.
    let bids = options.events / 50 * 46 + (options.events % 50).saturating_sub(4);
    let checkpoints = options
        .checkpoints
        .clone()
        .unwrap_or(crate::config::CheckpointConfig { interval_ms: 1000, ..Default::default() });
    let interval_ms = checkpoints.interval_ms;
    // With --preload, every bid is on the topic before the clock starts.
    let mut producer = None;
    if kafka.preload {
        let mut preloading = start_producer(&options, &kafka, &input)?;
        tokio::task::block_in_place(|| preloading.wait())
            .map_err(|e| WeirError::io(format!("waiting for the producer: {e}")))?;
        producer_alive(Some(&mut preloading))?;
    }
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let mut h = Harness::with_epoch(options.epoch, Some(checkpoints)).await?;
    h.run(&format!("SET streaming_parallelism = {}", options.parallelism)).await?;
    // noida-db answers a fetch with everything after its offset, whatever `fetch.max.bytes`
    // says: a full topic needs librdkafka to take responses of any size.
    let receive_limit = if kafka.preload { ", properties.receive.message.max.bytes = '2147483647'" } else { "" };
    h.run(&format!(
        "CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, \
         date_time TIMESTAMP, extra VARCHAR, p_time AS PROCTIME(), \
         WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
         WITH (connector = 'kafka', topic = '{input}', properties.bootstrap.server = '{}', \
         kafka.max.chunk.size = '{}'{receive_limit}) FORMAT PLAIN ENCODE {encoding}",
        kafka.servers, options.chunk
    ))
    .await?;
    h.run(view)
        .await
        .map_err(|e| WeirError::syntax(format!("{} in Kafka mode (only queries over bid run): {e}", options.query)))?;
    let catalog = Arc::clone(h.frontend.catalog());
    let view_relation = catalog.get(&options.query).ok_or_else(|| WeirError::internal("the view is missing"))?;
    let columns: Vec<String> = view_relation.schema.fields().iter().map(|f| f.name().clone()).collect();
    if let Some(exactly_once) = exactly_once {
        let guarantee = if exactly_once { "exactly-once" } else { "at-least-once" };
        h.run(&format!(
            "CREATE SINK bench_out FROM {} WITH (connector = 'kafka', topic = '{output}', \
             properties.bootstrap.server = '{}', primary_key = '{}', sink.delivery_guarantee = '{guarantee}', \
             sink.parallelism = {}) FORMAT UPSERT ENCODE JSON",
            options.query,
            kafka.servers,
            columns.join(","),
            kafka.sink_parallelism.unwrap_or(1)
        ))
        .await?;
    }

    if options.rate > 0 && (!columns.iter().any(|c| c == "date_time") || exactly_once.is_none()) {
        return Err(WeirError::syntax(
            "--rate with --kafka measures end to end through the sink: a query whose view has date_time (q0, q7) and a sink",
        ));
    }
    // Without --preload, the producer starts now that the pipeline runs: the source reads near
    // the topic's head, as in production.
    if !kafka.preload {
        producer = Some(start_producer(&options, &kafka, &input)?);
    }
    let source = catalog.get("bid").ok_or_else(|| WeirError::internal("source missing"))?;
    let mut latencies: Vec<f64> = Vec::new();
    if options.rate == 0 {
        while stored_position(&catalog, &source)?.records < bids {
            producer_alive(producer.as_mut())?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        h.run("FLUSH").await?;
    } else {
        let stop = Arc::new(AtomicBool::new(false));
        let consumer = {
            let (servers, output, stop) = (kafka.servers.clone(), output.clone(), Arc::clone(&stop));
            std::thread::spawn(move || read_latencies(&servers, &output, &stop))
        };
        while stored_position(&catalog, &source)?.records < bids {
            producer_alive(producer.as_mut())?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        h.run("FLUSH").await?;
        wait_delivered(&h, &catalog).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::SeqCst);
        latencies = consumer.join().map_err(|_| WeirError::internal("the consumer thread panicked"))??;
    }
    if exactly_once.is_some() {
        wait_delivered(&h, &catalog).await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(mut producer) = producer {
        let _ = tokio::task::block_in_place(|| producer.wait());
    }
    let cpu = cpu_seconds() - cpu_before;
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (quantile(&latencies, 0.5) * 1000.0, quantile(&latencies, 0.99) * 1000.0);
    let rate = bids as f64 / seconds;
    let rss = peak_rss_mib();
    let sink = kafka.sink.clone();
    let latency = if options.rate > 0 {
        format!(
            ", end to end (sent to committed in the sink's topic, {} messages) p50 {p50:.0} ms p99 {p99:.0} ms",
            latencies.len()
        )
    } else {
        String::new()
    };
    let cpu_per_million = cpu / (bids as f64 / 1e6);
    println!(
        "nexmark {} (Kafka in, {}{}, sink {sink}): {bids} bids in {seconds:.2} s = {rate:.0} bids/s, {:.2} CPU s per million bids{latency}, checkpoints every {interval_ms} ms, peak RSS {rss:.0} MiB ({} cores)",
        options.query,
        kafka.encode,
        if kafka.preload { ", preloaded" } else { "" },
        cpu_per_million,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let whole = |v: f64| v.is_finite().then(|| v.round() as u64);
    let json = serde_json::json!({
        "query": options.query,
        "source": "kafka",
        "encode": kafka.encode,
        "sink": sink,
        "preloaded": kafka.preload,
        "bids": bids,
        "rate": options.rate,
        "parallelism": options.parallelism,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "bids_per_second": whole(rate),
        "cpu_seconds_per_million_bids": (cpu_per_million * 1000.0).round() / 1000.0,
        "end_to_end_p50_ms": whole(p50),
        "end_to_end_p99_ms": whole(p99),
        "peak_rss_mib": whole(rss),
        "checkpoint_interval_ms": interval_ms,
    });
    println!("{json}");
    // Stop the pipeline before the runtime goes: a source's read in progress must not come
    // back to a runtime that is shutting down.
    h.run("DROP SINK IF EXISTS bench_out").await?;
    h.run("DROP SOURCE bid CASCADE").await?;
    delete_topics(&kafka.servers, &[&input, &output]).await;
    Ok(())
}

/// The producer: a process of its own (its memory is not Weir's) running [`produce`] to
/// `topic` with `options`' events and rate.
fn start_producer(options: &NexmarkOptions, kafka: &KafkaBenchOptions, topic: &str) -> Result<std::process::Child> {
    let exe = std::env::current_exe().map_err(|e| WeirError::io(format!("this executable: {e}")))?;
    std::process::Command::new(exe)
        .args(["bench", "nexmark", "--kafka", &kafka.servers, "--produce-to", topic, "--encode", &kafka.encode])
        .args(["--events", &options.events.to_string(), "--rate", &options.rate.to_string()])
        .spawn()
        .map_err(|e| WeirError::io(format!("starting the producer: {e}")))
}

/// Fails if the producer process (if one runs) has exited without success (the bids would
/// never all come).
fn producer_alive(producer: Option<&mut std::process::Child>) -> Result<()> {
    let Some(producer) = producer else { return Ok(()) };
    match producer.try_wait() {
        Ok(Some(status)) if !status.success() => Err(WeirError::internal(format!("the producer failed: {status}"))),
        _ => Ok(()),
    }
}

/// `--produce-to TOPIC` (run by [`run`] as a process of its own): the bids among the first N
/// events as JSON (or Avro) messages to TOPIC, as fast as the broker takes them, or at `--rate` events
/// per second with each bid's `date_time` set to when it is sent.
pub async fn produce(options: NexmarkOptions, servers: String, topic: String, encode: String) -> Result<()> {
    let generator = Generator::new(EventKind::Bid, GeneratorConfig::default());
    let p = producer(&servers)?;
    let started = Instant::now();
    let mut bids = 0u64;
    let mut from = 0u64;
    if options.rate == 0 {
        while from < options.events {
            let to = (from + 100_000).min(options.events);
            bids += tokio::task::block_in_place(|| send_bids(&p, &topic, &generator.batch(from, to)?, &encode))? as u64;
            from = to;
        }
    } else {
        // Every 10 ms, the events due by then.
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while from < options.events {
            tick.tick().await;
            let due = (started.elapsed().as_secs_f64() * options.rate as f64) as u64;
            let to = due.clamp(from, options.events);
            if to > from {
                let batch = stamped_now(&generator.batch(from, to)?)?;
                bids += tokio::task::block_in_place(|| send_bids(&p, &topic, &batch, &encode))? as u64;
                from = to;
            }
        }
    }
    tokio::task::block_in_place(|| p.flush(Duration::from_secs(120))).map_err(kafka_error("flushing bids"))?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("producer: {bids} bids to {topic} in {seconds:.1} s ({:.0} messages/s)", bids as f64 / seconds);
    Ok(())
}

/// Waits until the sink has committed everything the view holds now: a checkpoint taken after
/// the caller's FLUSH, then the sink's outbox empty.
async fn wait_delivered(h: &Harness, catalog: &Arc<crate::catalog::Catalog>) -> Result<()> {
    h.frontend.streaming().coordinator.checkpoint_now().await;
    let sink = catalog.get("bench_out").ok_or_else(|| WeirError::internal("the sink is missing"))?;
    while crate::connectors::sink::undelivered(catalog.store().as_ref(), &sink)? > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Reads `topic` as a `read_committed` consumer until `stop`: for each message with a row, now
/// minus its `date_time` (seconds).
fn read_latencies(servers: &str, topic: &str, stop: &AtomicBool) -> Result<Vec<f64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", format!("weir-bench-reader-{topic}"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .create()
        .map_err(kafka_error("Kafka consumer"))?;
    consumer.subscribe(&[topic]).map_err(kafka_error("subscribing"))?;
    let mut latencies = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) else { continue };
        latencies.extend(latency_of(&message));
    }
    Ok(latencies)
}

/// Now minus the `date_time` of `message`'s row (seconds), if it has one.
fn latency_of(message: &rdkafka::message::BorrowedMessage<'_>) -> Option<f64> {
    let now = chrono::Utc::now().naive_utc();
    let row = serde_json::from_slice::<serde_json::Value>(message.payload()?).ok()?;
    let sent = chrono::NaiveDateTime::parse_from_str(row["date_time"].as_str()?, "%Y-%m-%dT%H:%M:%S%.f").ok()?;
    Some((now - sent).num_microseconds().unwrap_or(0) as f64 / 1e6)
}

/// Deletes the run's topics, so that a broker used for many runs does not keep (and persist)
/// all their messages; a failure only warns.
async fn delete_topics(servers: &str, topics: &[&str]) {
    let deleted = async {
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        admin(servers)?.delete_topics(topics, &options).await.map_err(kafka_error("deleting the topics"))
    };
    if let Err(e) = deleted.await {
        eprintln!("warning: {}", e.message);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantiles_are_exact() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(super::quantile(&values, 0.5), 50.0);
        assert_eq!(super::quantile(&values, 0.99), 99.0);
        assert!(super::quantile(&[], 0.5).is_nan());
    }
}
