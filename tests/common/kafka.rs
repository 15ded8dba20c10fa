//! Kafka helpers for the tests: topics on the test broker, producing, and reading a topic as a
//! `read_committed` consumer does.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::kafka_bootstrap;

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A new topic with `partitions` partitions, kept forever (the broker would otherwise apply
/// time retention to old message timestamps).
pub async fn topic(name: &str, partitions: i32) -> String {
    let topic = format!("{name}_{}_{}", std::process::id(), super::free_port());
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", kafka_bootstrap()).create().unwrap();
    let new = NewTopic::new(&topic, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
    let created = admin.create_topics(&[new], &AdminOptions::new().operation_timeout(Some(TIMEOUT))).await.unwrap();
    assert!(created.iter().all(|r| r.is_ok()), "{created:?}");
    topic
}

pub fn producer(transactional_id: Option<&str>) -> BaseProducer {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", kafka_bootstrap());
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
    }
    config.create().unwrap()
}

/// Sends `(partition, value)` messages and waits until the broker has them.
pub fn send(producer: &BaseProducer, topic: &str, messages: &[(i32, String)]) {
    for (partition, value) in messages {
        let key = format!("k{partition}");
        producer
            .send(BaseRecord::to(topic).key(&key).payload(value).partition(*partition))
            .map_err(|(e, _)| e)
            .unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(TIMEOUT).unwrap();
}

/// Sends `(partition, key, value)` messages (value None: a tombstone) and waits until the
/// broker has them.
pub fn send_keyed(producer: &BaseProducer, topic: &str, messages: &[(i32, Option<String>, Option<String>)]) {
    for (partition, key, value) in messages {
        let mut record: BaseRecord<'_, str, str> = BaseRecord::to(topic).partition(*partition);
        if let Some(key) = key {
            record = record.key(key.as_str());
        }
        if let Some(value) = value {
            record = record.payload(value.as_str());
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(TIMEOUT).unwrap();
}

/// Every message of `topic` as a read_committed consumer sees it: (key, value), value None for
/// a tombstone.
pub fn consume_all(topic: &str) -> Vec<(Option<String>, Option<String>)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", format!("weir-test-reader-{topic}"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), TIMEOUT).unwrap();
    let partitions: Vec<i32> = metadata.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let mut list = TopicPartitionList::new();
    for &p in &partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut at_end = std::collections::HashSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while at_end.len() < partitions.len() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => out.push((
                m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
            )),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            _ => {}
        }
    }
    out
}

/// The rows an UPSERT topic holds: each key's last message (a tombstone removes its key), as
/// `fields` of its JSON value joined by `|`, sorted. Panics if a key's message repeats the one
/// before it: Weir writes a key only when its row changed, so a repeat is a checkpoint
/// delivered twice.
pub fn upsert_rows(topic: &str, fields: &[&str]) -> Vec<String> {
    let mut latest: std::collections::BTreeMap<String, Option<String>> = Default::default();
    for (key, value) in consume_all(topic) {
        let key = key.expect("an upsert message has a key");
        if let Some(previous) = latest.get(&key) {
            assert_ne!(previous, &value, "key {key}: the same message twice in a row");
        }
        latest.insert(key, value);
    }
    let mut rows: Vec<String> = latest
        .values()
        .flatten()
        .map(|v| {
            let row: serde_json::Value = serde_json::from_str(v).unwrap();
            fields.iter().map(|f| row[*f].to_string()).collect::<Vec<_>>().join("|")
        })
        .collect();
    rows.sort();
    rows
}
