//! Kafka sources against a real Kafka-compatible broker (scripts/kafka-server.sh; the tests use
//! only the Kafka protocol, so they run against Apache Kafka too): every partition read,
//! metadata columns, dead letters for bad messages, aborted transactions never seen, partitions
//! added later picked up, CREATE errors, and a source killed with SIGKILL mid-stream that ends
//! with every message exactly once.

mod common;

use std::time::{Duration, Instant};

use common::kafka::{consume_all, producer, send, send_keyed, topic, upsert_rows, TIMEOUT};
use common::{assert_sqlstate, kafka_bootstrap, rows, rows_eventually, TestServer};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::Producer;

/// Bids `first..first + n` as JSON, spread over `partitions`.
fn bids(first: i64, n: i64, partitions: i32) -> Vec<(i32, String)> {
    (first..first + n)
        .map(|id| {
            ((id % partitions as i64) as i32, format!(r#"{{"id": {id}, "auction": {}, "price": {}}}"#, id % 7, id * 3))
        })
        .collect()
}

fn source_sql(name: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE SOURCE {name} (id BIGINT, auction BIGINT, price BIGINT, _kafka_partition INT, _kafka_offset BIGINT, \
         _kafka_timestamp TIMESTAMP, _kafka_key VARCHAR) WITH (connector = 'kafka', topic = '{topic}', \
         properties.bootstrap.server = '{}', kafka.metadata.refresh.ms = '300'{extra}) FORMAT PLAIN ENCODE JSON",
        kafka_bootstrap()
    )
}

/// Waits until `sql` answers `expected` (one row, columns joined by `|`).
async fn eventually(client: &tokio_postgres::Client, sql: &str, expected: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = rows(client, sql).await;
        if got == [expected.to_string()] {
            return;
        }
        assert!(Instant::now() < deadline, "{sql}: {got:?}, expected {expected}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_source_reads_every_partition_keeps_bad_messages_and_follows_new_partitions() {
    let topic = topic("bids", 3).await;
    let p = producer(None);
    let mut messages = bids(0, 300, 3);
    // Three bad messages: not JSON, a wrong type, a truncated object.
    messages.push((0, "not json".into()));
    messages.push((1, r#"{"id": "x", "auction": 1, "price": 2}"#.into()));
    messages.push((2, r#"{"id": 5, "auc"#.into()));
    send(&p, &topic, &messages);

    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(&source_sql("bids", &topic, "")).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n, sum(price) AS volume FROM bids GROUP BY auction",
    )
    .await
    .unwrap();
    eventually(&c, "SELECT count(*), sum(price) FROM bids", &format!("300|{}", (0..300).map(|i| i * 3).sum::<i64>()))
        .await;
    c.batch_execute("FLUSH").await.unwrap();
    let batch = "SELECT auction, count(*), sum(price) FROM bids GROUP BY auction";
    assert_eq!(rows(&c, "SELECT * FROM per_auction").await, rows(&c, batch).await);
    // Metadata columns: each message's partition, offset, key and timestamp.
    assert_eq!(rows(&c, "SELECT count(*) FROM bids WHERE _kafka_partition <> id % 3").await, ["0"]);
    assert_eq!(rows(&c, "SELECT count(DISTINCT (_kafka_partition, _kafka_offset)) FROM bids").await, ["300"]);
    assert_eq!(rows(&c, "SELECT count(*) FROM bids WHERE _kafka_key <> 'k' || _kafka_partition").await, ["0"]);
    assert_eq!(
        rows(&c, "SELECT count(*) FROM bids WHERE _kafka_timestamp > now() + INTERVAL '1' MINUTE OR _kafka_timestamp < now() - INTERVAL '1' HOUR").await,
        ["0"]
    );
    // The bad messages are dead letters, with where they were.
    let dead = rows(&c, "SELECT position, raw FROM weir_catalog.dead_letters WHERE source_name = 'bids'").await;
    assert_eq!(dead.len(), 3, "{dead:?}");
    assert!(dead.iter().any(|d| d.ends_with("|not json")), "{dead:?}");
    assert!(dead.iter().all(|d| d.starts_with(&format!("{topic}:"))), "{dead:?}");
    // Each partition's lag, in the metrics: all read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let lag_lines: Vec<String> =
        (0..3).map(|p| format!("weir_kafka_source_lag{{partition=\"{p}\",topic=\"{topic}\"}} 0")).collect();
    loop {
        let metrics = server.metrics_text();
        if lag_lines.iter().all(|l| metrics.lines().any(|m| m == l)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{lag_lines:?} not in\n{metrics}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // A partition added to the topic is read from its start.
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", kafka_bootstrap()).create().unwrap();
    admin.create_partitions(&[NewPartitions::new(&topic, 4)], &AdminOptions::new()).await.unwrap();
    // A new producer, which knows the fourth partition.
    send(&producer(None), &topic, &bids(300, 40, 4));
    eventually(&c, "SELECT count(*) FROM bids WHERE _kafka_partition = 3", "10").await;
    eventually(&c, "SELECT count(*) FROM bids", "340").await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(rows(&c, "SELECT * FROM per_auction").await, rows(&c, batch).await);
    // A view made now backfills from what the topic retains.
    c.batch_execute("CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n FROM bids").await.unwrap();
    assert_eq!(rows(&c, "SELECT n FROM total").await, ["340"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_transactions_are_never_read() {
    let topic = topic("tx", 2).await;
    let p = producer(Some(&format!("weir-test-{topic}")));
    p.init_transactions(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, &topic, &bids(0, 10, 2));
    p.commit_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, &topic, &bids(100, 10, 2));
    p.abort_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, &topic, &bids(10, 5, 2));
    p.commit_transaction(TIMEOUT).unwrap();

    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(&source_sql("tx", &topic, "")).await.unwrap();
    eventually(&c, "SELECT count(*), max(id) FROM tx", "15|14").await;
    // Read again (a SELECT replays the logged chunks) past the transaction markers: the same.
    assert_eq!(rows(&c, "SELECT count(*) FROM tx WHERE id >= 100").await, ["0"]);
}

/// A source read in chunks of at most seven messages, with a bad message and an aborted
/// transaction among them. Reading it back (a SELECT, a new view's backfill) takes consecutive
/// chunks together in one pass over the topic: every good message comes back once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_of_many_small_chunks_reads_back_every_message_once() {
    let topic = topic("small_chunks", 2).await;
    let p = producer(Some(&format!("weir-test-{topic}")));
    p.init_transactions(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    let mut first = bids(0, 100, 2);
    first.insert(40, (1, "not json".into()));
    send(&p, &topic, &first);
    p.commit_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, &topic, &bids(1000, 20, 2));
    p.abort_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, &topic, &bids(100, 50, 2));
    p.commit_transaction(TIMEOUT).unwrap();

    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(&source_sql("s", &topic, ", kafka.max.chunk.size = '7'")).await.unwrap();
    let sum: i64 = (0..150).map(|i| i * 3).sum();
    eventually(&c, "SELECT count(*), count(DISTINCT id), max(id), sum(price) FROM s", &format!("150|150|149|{sum}"))
        .await;
    assert_eq!(rows(&c, "SELECT count(DISTINCT (_kafka_partition, _kafka_offset)) FROM s").await, ["150"]);
    assert_eq!(rows(&c, "SELECT count(*) FROM weir_catalog.dead_letters WHERE source_name = 's'").await, ["1"]);
    c.batch_execute("CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n, sum(price) AS volume FROM s GROUP BY auction")
        .await
        .unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        rows(&c, "SELECT * FROM per_auction ORDER BY auction").await,
        rows(&c, "SELECT auction, count(*), sum(price) FROM s GROUP BY auction ORDER BY auction").await
    );
    assert_eq!(rows(&c, "SELECT sum(n) FROM per_auction").await, ["150"]);
}

/// JSON values into declared column types, over the wire: a number or boolean in a text column
/// is read as its text; NUMERIC follows PostgreSQL (a string or a number, exponents, rounded
/// half away from zero to the declared scale), and a value beyond its precision is a dead letter
/// saying so, the other messages read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_values_are_read_into_text_and_numeric_columns_as_postgres_reads_them() {
    let topic = topic("json_types", 1).await;
    let messages = [
        r#"{"id": 1, "name": 42, "flag": true, "amount": 12.345}"#,
        r#"{"id": 2, "name": "x", "flag": null, "amount": "-0.005"}"#,
        r#"{"id": 3, "name": "y", "flag": "f", "amount": 1e3}"#,
        r#"{"id": 4, "name": "z", "flag": "t", "amount": 123456789012}"#,
        r#"{"id": 5, "name": 1.5, "flag": false, "amount": "2.5E-1"}"#,
    ];
    send(&producer(None), &topic, &messages.iter().map(|m| (0, m.to_string())).collect::<Vec<_>>());
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE SOURCE j (id BIGINT, name VARCHAR, flag TEXT, amount NUMERIC(10, 2)) WITH (connector = 'kafka', \
         topic = '{topic}', properties.bootstrap.server = '{}') FORMAT PLAIN ENCODE JSON",
        kafka_bootstrap()
    ))
    .await
    .unwrap();
    eventually(&c, "SELECT count(*) FROM j", "4").await;
    assert_eq!(
        rows(&c, "SELECT id, name, flag, amount FROM j ORDER BY id").await,
        ["1|42|true|12.35", "2|x|NULL|-0.01", "3|y|f|1000.00", "5|1.5|false|0.25"]
    );
    let dead = rows(&c, "SELECT error FROM weir_catalog.dead_letters WHERE source_name = 'j'").await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].contains("numeric field overflow") && dead[0].contains("123456789012"), "{dead:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_source_fails_clearly_without_a_broker_or_a_topic() {
    let server = TestServer::start();
    let c = server.connect().await;
    assert_sqlstate(&c, &source_sql("nope", "no_such_topic_weir", ""), "42704").await;
    let nowhere = format!(
        "CREATE SOURCE nowhere (id BIGINT) WITH (connector = 'kafka', topic = 't', \
         properties.bootstrap.server = '127.0.0.1:{}', kafka.timeout.ms = '1500') FORMAT PLAIN ENCODE JSON",
        common::free_port()
    );
    assert_sqlstate(&c, &nowhere, "08001").await;
    assert_sqlstate(&c, &source_sql("bad", "t", ", scan.startup.mode = 'whenever'"), "22023").await;
    // The server still serves.
    assert_eq!(rows(&c, "SELECT 1").await, ["1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_killed_mid_stream_ends_with_every_message_exactly_once() {
    let topic = topic("stream", 3).await;
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let c = server.connect().await;
    c.batch_execute(&source_sql("stream", &topic, ", kafka.max.chunk.size = '50'")).await.unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n, sum(price) AS volume FROM stream GROUP BY auction")
        .await
        .unwrap();
    let p = producer(None);
    let mut sent = 0;
    let mut c = c;
    for round in 0..6 {
        send(&p, &topic, &bids(sent, 200, 3));
        sent += 200;
        tokio::time::sleep(Duration::from_millis(50 * round as u64)).await;
        c = server.sigkill_and_reconnect().await;
    }
    eventually(&c, "SELECT count(*), count(DISTINCT id) FROM stream", &format!("{sent}|{sent}")).await;
    c.batch_execute("FLUSH").await.unwrap();
    let batch = "SELECT auction, count(*), sum(price) FROM stream GROUP BY auction";
    assert_eq!(rows(&c, "SELECT * FROM per_auction").await, rows(&c, batch).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_sink_delivers_every_change_exactly_once_across_sigkills() {
    let plain = topic("plain_out", 2).await;
    let upsert = topic("upsert_out", 2).await;
    let cdc = topic("cdc_out", 2).await;
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE events (id BIGINT, g INT) APPEND ONLY;
         CREATE TABLE accounts (id INT PRIMARY KEY, g INT, amount BIGINT);
         CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n, sum(amount) AS total FROM accounts GROUP BY g;",
    )
    .await
    .unwrap();
    let servers = kafka_bootstrap();
    c.batch_execute(&format!(
        "CREATE SINK events_out AS SELECT id, g FROM events WITH (connector = 'kafka', topic = '{plain}', \
         properties.bootstrap.server = '{servers}', sink.parallelism = 3) FORMAT PLAIN ENCODE JSON;
         CREATE SINK groups_out FROM per_group WITH (connector = 'kafka', topic = '{upsert}', \
         properties.bootstrap.server = '{servers}', primary_key = 'g', sink.parallelism = 1) FORMAT UPSERT ENCODE JSON;
         CREATE SINK groups_cdc FROM per_group WITH (connector = 'kafka', topic = '{cdc}', \
         properties.bootstrap.server = '{servers}', primary_key = 'g', sink.parallelism = 3) FORMAT DEBEZIUM ENCODE JSON;"
    ))
    .await
    .unwrap();
    assert_eq!(rows(&c, "SHOW SINKS").await, ["events_out", "groups_cdc", "groups_out"]);
    let mut next = 0i64;
    for round in 0..8 {
        for _ in 0..5 {
            let values: Vec<String> = (next..next + 20).map(|id| format!("({id}, {})", id % 4)).collect();
            c.batch_execute(&format!("INSERT INTO events VALUES {}", values.join(", "))).await.unwrap();
            let id = next % 37;
            // A key the table holds already: its row replaced (a primary key upserts).
            c.batch_execute(&format!("INSERT INTO accounts VALUES ({id}, {}, {next})", next % 5)).await.unwrap();
            if next % 3 == 0 {
                c.batch_execute(&format!("DELETE FROM accounts WHERE id = {}", (next + 7) % 37)).await.unwrap();
            }
            next += 20;
        }
        tokio::time::sleep(Duration::from_millis(40 * round)).await;
        c = server.sigkill_and_reconnect().await;
    }
    c.batch_execute("FLUSH").await.unwrap();
    let view = rows(&c, "SELECT g, n, total FROM per_group").await;
    // Everything delivered: each sink (they deliver apart) has caught up with the checkpoint
    // after the FLUSH.
    let deadline = Instant::now() + Duration::from_secs(30);
    while (consume_all(&plain).len() as i64) < next
        || upsert_rows(&upsert, &["g", "n", "total"]) != view
        || debezium_rows(&cdc) != view
    {
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // PLAIN over an append-only view: every row exactly once.
    let messages = consume_all(&plain);
    let ids: std::collections::BTreeSet<i64> = messages
        .iter()
        .map(|(_, v)| serde_json::from_str::<serde_json::Value>(v.as_deref().unwrap()).unwrap()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(messages.len() as i64, next, "each event once (distinct ids {})", ids.len());
    assert_eq!(ids.len() as i64, next);
    // UPSERT: the last message of each key is the view's row (or a tombstone for a gone group).
    assert_eq!(upsert_rows(&upsert, &["g", "n", "total"]), view);
    // DEBEZIUM: each change's before is the key's after in the change before it, and the
    // changes replayed give the view.
    assert_eq!(debezium_rows(&cdc), view);
    // Each shard is its own transactional producer; a key's changes stay in one shard, so the
    // Debezium changes above chain per key.
    let sinks = rows(&c, "SELECT sink_name, state, shards FROM weir_catalog.sinks").await;
    assert_eq!(sinks, ["events_out|running|3", "groups_cdc|running|3", "groups_out|running|1"]);
    c.batch_execute("DROP SINK groups_out; DROP SINK events_out; DROP SINK groups_cdc").await.unwrap();
    assert!(rows(&c, "SHOW SINKS").await.is_empty());
    // The view made for the query went with its sink; the user's view stays.
    assert_eq!(rows(&c, "SHOW MATERIALIZED VIEWS").await, ["per_group"]);
}

/// The rows a Debezium topic's changes give (`g|n|total`, sorted), replayed in order; panics
/// unless each change's `before` is what the key held (the previous change's `after`), its `op`
/// says what it did, and a tombstone follows each delete.
fn debezium_rows(topic: &str) -> Vec<String> {
    let mut state: std::collections::BTreeMap<String, serde_json::Value> = Default::default();
    // Keys deleted and waiting for their tombstone (a key's messages are in order: one partition).
    let mut deleted: std::collections::BTreeSet<String> = Default::default();
    for (key, value) in consume_all(topic) {
        let key = key.unwrap();
        let Some(value) = value else {
            assert!(deleted.remove(&key), "a tombstone without a delete before it: {key}");
            continue;
        };
        assert!(!deleted.contains(&key), "a delete without its tombstone: {key}");
        let change: serde_json::Value = serde_json::from_str(&value).unwrap();
        let held = state.get(&key).cloned().unwrap_or(serde_json::Value::Null);
        assert_eq!(change["before"], held, "{key}: {value}");
        let op = match (&change["before"], &change["after"]) {
            (serde_json::Value::Null, _) => "c",
            (_, serde_json::Value::Null) => "d",
            _ => "u",
        };
        assert_eq!(change["op"], op, "{value}");
        if op == "d" {
            state.remove(&key);
            deleted.insert(key);
        } else {
            state.insert(key, change["after"].clone());
        }
    }
    assert!(deleted.is_empty(), "deletes without tombstones: {deleted:?}");
    let mut rows: Vec<String> = state.values().map(|v| format!("{}|{}|{}", v["g"], v["n"], v["total"])).collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_data_fail_stops_a_source_at_its_first_bad_message_and_says_so() {
    let topic = topic("strict", 1).await;
    let server = TestServer::start();
    let c = server.connect().await;
    assert_sqlstate(&c, &source_sql("s", &topic, ", bad_data = 'ignore'"), "22023").await;
    c.batch_execute(&source_sql("strict", &topic, ", bad_data = 'fail', kafka.max.chunk.size = '1'")).await.unwrap();
    c.batch_execute(&source_sql("lenient", &topic, ", kafka.max.chunk.size = '1'")).await.unwrap();
    c.batch_execute("CREATE MATERIALIZED VIEW strict_n AS SELECT count(*) AS n FROM strict").await.unwrap();
    let mut messages = bids(0, 5, 1);
    messages.push((0, "not json".into()));
    messages.extend(bids(5, 5, 1));
    send(&producer(None), &topic, &messages);
    eventually(&c, "SELECT state, records_read FROM weir_catalog.sources WHERE source_name = 'strict'", "failed|5")
        .await;
    eventually(&c, "SELECT state, records_read FROM weir_catalog.sources WHERE source_name = 'lenient'", "running|11")
        .await;
    let error = rows(&c, "SELECT error FROM weir_catalog.sources WHERE source_name = 'strict'").await;
    assert!(error[0].contains(&format!("{topic}:0:5")) && error[0].contains("bad_data = 'fail'"), "{error:?}");
    // The strict source stopped before the bad message: nothing after it, no dead letter.
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(rows(&c, "SELECT n FROM strict_n").await, ["5"]);
    assert_eq!(rows(&c, "SELECT count(*) FROM weir_catalog.dead_letters WHERE source_name = 'strict'").await, ["0"]);
    assert_eq!(rows(&c, "SELECT count(*) FROM weir_catalog.dead_letters WHERE source_name = 'lenient'").await, ["1"]);
    c.batch_execute("DROP MATERIALIZED VIEW strict_n; DROP SOURCE strict").await.unwrap();
    assert_eq!(rows(&c, "SELECT source_name FROM weir_catalog.sources").await, ["lenient"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_least_once_kafka_sink_loses_nothing_across_sigkills() {
    let out = topic("alo_out", 2).await;
    let servers = kafka_bootstrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    let sink = |guarantee: &str| {
        format!(
            "CREATE SINK ev_out AS SELECT id FROM ev WITH (connector = 'kafka', topic = '{out}', \
             properties.bootstrap.server = '{servers}', sink.delivery_guarantee = '{guarantee}') FORMAT PLAIN ENCODE JSON"
        )
    };
    c.batch_execute("CREATE TABLE ev (id BIGINT) APPEND ONLY").await.unwrap();
    assert_sqlstate(&c, &sink("at-most-once"), "22023").await;
    c.batch_execute(&sink("at-least-once")).await.unwrap();
    let mut next = 0i64;
    for round in 0..5u64 {
        let values: Vec<String> = (next..next + 50).map(|id| format!("({id})")).collect();
        c.batch_execute(&format!("INSERT INTO ev VALUES {}", values.join(", "))).await.unwrap();
        next += 50;
        tokio::time::sleep(Duration::from_millis(60 * round)).await;
        c = server.sigkill_and_reconnect().await;
    }
    c.batch_execute("FLUSH").await.unwrap();
    let ids = || -> std::collections::BTreeSet<i64> {
        consume_all(&out)
            .into_iter()
            .map(|(_, v)| serde_json::from_str::<serde_json::Value>(&v.unwrap()).unwrap()["id"].as_i64().unwrap())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while (ids().len() as i64) < next && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(ids(), (0..next).collect(), "every row at least once");
    assert_eq!(rows(&c, "SELECT state FROM weir_catalog.sinks").await, ["running"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_table_with_a_primary_key_upserts_and_tombstones_delete() {
    let input = topic("accounts", 2).await;
    let servers = kafka_bootstrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    let table = |name: &str, columns: &str, topic: &str, format: &str| {
        format!(
            "CREATE TABLE {name} ({columns}) WITH (connector = 'kafka', topic = '{topic}', \
             properties.bootstrap.server = '{servers}', kafka.max.chunk.size = '7') FORMAT {format} ENCODE JSON"
        )
    };
    // Refusals: UPSERT without a key, on a source, or on another connector.
    for (sql, code) in [
        (table("t", "id BIGINT, owner VARCHAR", &input, "UPSERT"), "42P16"),
        (source_sql("s", &input, "").replace("FORMAT PLAIN", "FORMAT UPSERT"), "42P16"),
        (
            "CREATE TABLE n (id BIGINT PRIMARY KEY) WITH (connector = 'nexmark', nexmark.table.type = 'bid') \
             FORMAT UPSERT ENCODE JSON"
                .to_string(),
            "0A000",
        ),
    ] {
        assert_sqlstate(&c, &sql, code).await;
    }
    // The processing-time column first: the key is still `id` (the stamp goes last).
    c.batch_execute(&table(
        "accounts",
        "seen AS PROCTIME(), id BIGINT PRIMARY KEY, owner VARCHAR, balance BIGINT",
        &input,
        "UPSERT",
    ))
    .await
    .unwrap();
    // A table without a key keeps every message's row (and is append-only).
    c.batch_execute(&table("history", "id BIGINT, owner VARCHAR, balance BIGINT", &input, "PLAIN")).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW per_owner AS SELECT owner, sum(balance) AS total, count(*) AS n FROM accounts GROUP BY owner",
    )
    .await
    .unwrap();
    let p = producer(None);
    let mut expected: std::collections::BTreeMap<i64, (String, i64)> = Default::default();
    let mut plain_rows = 0;
    let mut rng = common::Rng(7);
    for round in 0..6 {
        let mut messages = Vec::new();
        for _ in 0..40 {
            let id = rng.below(30);
            let key = Some(format!(r#"{{"id": {id}}}"#));
            if rng.below(4) == 0 {
                expected.remove(&id);
                messages.push(((id % 2) as i32, key, None));
            } else {
                let (owner, balance) = (format!("o{}", rng.below(5)), rng.below(1000));
                let value = format!(r#"{{"id": {id}, "owner": "{owner}", "balance": {balance}}}"#);
                expected.insert(id, (owner, balance));
                messages.push(((id % 2) as i32, key, Some(value)));
                plain_rows += 1;
            }
        }
        // A message without a key, and a tombstone whose key does not decode: dead letters.
        messages.push((0, None, Some(r#"{"id": 99, "owner": "x", "balance": 1}"#.to_string())));
        messages.push((1, Some("not json".to_string()), None));
        plain_rows += 1;
        send_keyed(&p, &input, &messages);
        if round % 2 == 1 {
            c = server.sigkill_and_reconnect().await;
        }
    }
    let mut want: Vec<String> =
        expected.iter().map(|(id, (owner, balance))| format!("{id}|{owner}|{balance}")).collect();
    want.sort();
    let got = rows_eventually(&c, "SELECT id, owner, balance FROM accounts", &want, Duration::from_secs(30)).await;
    assert_eq!(got, want, "each key's last message, deleted keys gone");
    eventually(&c, "SELECT count(*) FROM history", &plain_rows.to_string()).await;
    c.batch_execute("FLUSH").await.unwrap();
    let batch = "SELECT owner, sum(balance), count(*) FROM accounts GROUP BY owner";
    assert_eq!(rows(&c, "SELECT * FROM per_owner").await, rows(&c, batch).await);
    let dead = rows(&c, "SELECT count(*) FROM weir_catalog.dead_letters WHERE source_name = 'accounts'").await;
    assert_eq!(dead, ["12"], "a keyless message and a bad key per round");
    // A table fed by a connector takes no DML, as a source takes none.
    for dml in [
        "INSERT INTO accounts VALUES (1, 'a', 1)",
        "UPDATE accounts SET balance = 0",
        "DELETE FROM accounts",
        "TRUNCATE accounts",
    ] {
        assert_sqlstate(&c, dml, "42809").await;
    }
}

/// The source's position is committed to the consumer group `weir-<topic>` (for monitoring
/// tools), every partition at its end once everything is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_position_is_committed_to_the_consumer_group() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::topic_partition_list::Offset;
    let topic = topic("grouped", 2).await;
    send(&producer(None), &topic, &bids(0, 50, 2));
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(&source_sql("bids", &topic, ", kafka.group.commit.ms = '100'")).await.unwrap();
    eventually(&c, "SELECT count(*) FROM bids", "50").await;
    let group: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", format!("weir-{topic}"))
        .create()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let mut list = rdkafka::TopicPartitionList::new();
        list.add_partition(&topic, 0);
        list.add_partition(&topic, 1);
        let committed = group.committed_offsets(list, std::time::Duration::from_secs(5)).unwrap();
        let offsets: Vec<Offset> = committed.elements().iter().map(|e| e.offset()).collect();
        if offsets == [Offset::Offset(25), Offset::Offset(25)] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "committed offsets {offsets:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A Kafka sink's writer dropped with a transaction open (its sink stopped or dropped while a
/// group waited for its checkpoint, which the two-phase delivery makes a common moment) aborts
/// it: a `read_committed` reader reads what is committed after it at once, instead of waiting
/// for the transaction's timeout (15 minutes by default; for ever on a broker that does not
/// expire transactions, since a dropped sink's transactional id never comes back to fence it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_sink_writer_dropped_mid_transaction_aborts_it() {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use weir::catalog::options::ConnectorOptions;
    use weir::connectors::kafka::sink::KafkaSink;
    use weir::connectors::sink::{SinkWriter, WriterSpec};
    use weir::types::ChangeBatch;

    let topic = topic("dropped_tx", 1).await;
    let options = ConnectorOptions(
        [
            ("topic", topic.as_str()),
            ("properties.bootstrap.server", kafka_bootstrap().as_str()),
            ("format", "plain"),
            ("transactional.id.prefix", topic.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    let rows = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)]).unwrap();
    let spec = WriterSpec { sink_id: 1, token: "test".into(), shard: 0, schema: rows.schema(), append_only: true };
    let mut writer = KafkaSink::new(&options, &spec).unwrap();
    tokio::task::block_in_place(|| {
        writer.begin().unwrap();
        writer.write(&[ChangeBatch::inserts(rows)]).unwrap();
        // The messages reach the broker inside the open transaction (librdkafka sends them
        // within its linger time).
        std::thread::sleep(Duration::from_secs(1));
        drop(writer);
        send(&producer(None), &topic, &[(0, r#"{"id": 100}"#.to_string())]);
        // The abort is on its way (the writer does not wait for the broker when dropped).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let read: Vec<Option<String>> = consume_all(&topic).into_iter().map(|(_, value)| value).collect();
            if !read.is_empty() || Instant::now() > deadline {
                assert_eq!(read, [Some(r#"{"id": 100}"#.to_string())], "only the committed message, within seconds");
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
}
