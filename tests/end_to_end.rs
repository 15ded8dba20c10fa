//! The headline pipeline end to end through crashes, against a real Kafka-compatible broker
//! and a real PostgreSQL (scripts/kafka-server.sh, scripts/pg-server.sh; only their protocols
//! are used, so the test runs against Apache Kafka too).
//!
//! A producer writes bids, malformed messages among them, to a 4-partition topic; Weir reads it
//! (a Kafka source, rows not stored), keeps a view that both inserts and deletes groups, and
//! delivers it to a Kafka topic (FORMAT UPSERT, exactly once) and to a Postgres table, and
//! the expensive bids, a query over the source, to a FORMAT PLAIN topic and an append-only table. Weir is
//! killed 24 times: by SIGKILL at random moments, and by each fault point of the sink protocol
//! in turn (`src/fault.rs`: a checkpoint complete and nothing sent, a transaction written and
//! not committed, committed and not yet forgotten). Afterwards the view, what a
//! `read_committed` consumer of the sink topic holds, and the Postgres table each equal the
//! view's query computed here over the produced input: nothing lost, nothing doubled, nothing
//! of an aborted transaction visible; and each malformed message is one dead letter.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::kafka::{consume_all, producer, send, topic, upsert_rows};
use common::{kafka_bootstrap, postgres_database, rows, Rng, TestServer};

const GROUPS: i64 = 13;

/// Message `id`: a bid as JSON, or (every 37th) one that does not decode.
fn message(id: i64) -> (i32, String) {
    let partition = (id % 4) as i32;
    if id % 37 == 5 {
        return (partition, format!(r#"{{"id": {id}, "auction": "not a number""#));
    }
    (partition, format!(r#"{{"id": {id}, "auction": {}, "price": {}}}"#, id % GROUPS, (id * 7919) % 1000))
}

/// The view's rows (`auction|n|top`, sorted) over messages `0..sent`, computed here.
fn expected(sent: i64) -> Vec<String> {
    let mut groups: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for id in (0..sent).filter(|id| id % 37 != 5) {
        let g = groups.entry(id % GROUPS).or_insert((0, i64::MIN));
        g.0 += 1;
        g.1 = g.1.max((id * 7919) % 1000);
    }
    let mut out: Vec<String> =
        groups.into_iter().filter(|(_, (n, _))| n % 4 != 0).map(|(a, (n, top))| format!("{a}|{n}|{top}")).collect();
    out.sort();
    out
}

/// The ids of the bids over 500 among messages `0..sent`, computed here.
fn expensive(sent: i64) -> Vec<i64> {
    (0..sent).filter(|id| id % 37 != 5 && (id * 7919) % 1000 > 500).collect()
}

/// Ids as numbers, sorted.
fn sorted_ids(ids: impl IntoIterator<Item = String>) -> Vec<i64> {
    let mut out: Vec<i64> = ids.into_iter().map(|id| id.parse().unwrap()).collect();
    out.sort();
    out
}

/// The pipeline both tests run, on topics and a database of their own: bids from a 4-partition
/// topic; `per_auction`, a view that inserts and deletes groups, to an upsert topic and a
/// Postgres table; the expensive bids, a query over the source, to a PLAIN topic and an
/// append-only table.
struct Pipeline {
    /// Its sinks' transactional ids start with it: two servers on one broker need their own.
    prefix: String,
    input: String,
    output: String,
    raw: String,
    pg: tokio_postgres::Client,
    jdbc: String,
}

impl Pipeline {
    async fn new(name: &str) -> Pipeline {
        let input = topic(&format!("{name}_bids"), 4).await;
        let output = topic(&format!("{name}_per_auction"), 2).await;
        let raw = topic(&format!("{name}_expensive"), 3).await;
        let (pg, jdbc) = postgres_database(name).await;
        pg.batch_execute(
            "CREATE TABLE per_auction (auction BIGINT PRIMARY KEY, n BIGINT, top BIGINT);
             CREATE TABLE expensive (id BIGINT, price BIGINT);",
        )
        .await
        .unwrap();
        let prefix = format!("{name}-{}", std::process::id());
        Pipeline { prefix, input, output, raw, pg, jdbc }
    }

    /// The ids a `read_committed` consumer reads from the PLAIN topic, sorted.
    fn expensive_in_topic(&self) -> Vec<i64> {
        sorted_ids(
            consume_all(&self.raw)
                .into_iter()
                .map(|(_, v)| serde_json::from_str::<serde_json::Value>(&v.unwrap()).unwrap()["id"].to_string()),
        )
    }

    /// Its source, view and sinks.
    fn sql(&self) -> String {
        let (input, output, raw, jdbc, servers) = (&self.input, &self.output, &self.raw, &self.jdbc, kafka_bootstrap());
        let prefix = &self.prefix;
        format!(
            "CREATE SOURCE bids (id BIGINT, auction BIGINT, price BIGINT) WITH (connector = 'kafka', topic = '{input}', \
               properties.bootstrap.server = '{servers}', kafka.max.chunk.size = '64') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n, max(price) AS top FROM bids \
               GROUP BY auction HAVING count(*) % 4 <> 0;
             CREATE SINK to_kafka FROM per_auction WITH (connector = 'kafka', topic = '{output}', \
               properties.bootstrap.server = '{servers}', primary_key = 'auction', transactional.id.prefix = '{prefix}') \
               FORMAT UPSERT ENCODE JSON;
             CREATE SINK to_pg FROM per_auction WITH (connector = 'jdbc', jdbc.url = '{jdbc}', \
               table.name = 'per_auction', primary_key = 'auction');
             CREATE SINK expensive_to_kafka AS SELECT id, price FROM bids WHERE price > 500 WITH (connector = 'kafka', \
               topic = '{raw}', properties.bootstrap.server = '{servers}', transactional.id.prefix = '{prefix}') \
               FORMAT PLAIN ENCODE JSON;
             CREATE SINK expensive_to_pg AS SELECT id, price FROM bids WHERE price > 500 WITH (connector = 'jdbc', \
               jdbc.url = '{jdbc}', table.name = 'expensive');"
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_to_a_view_to_kafka_and_postgres_exactly_once_through_crashes() {
    let pipeline = Pipeline::new("e2e").await;
    let (output, pg, input) = (&pipeline.output, &pipeline.pg, &pipeline.input);
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    c.batch_execute(&format!("{}\n CREATE MATERIALIZED VIEW bid_ids AS SELECT id FROM bids;", pipeline.sql()))
        .await
        .unwrap();
    let p = producer(None);
    let mut rng = Rng(0x05ee_de2e);
    let mut sent = 0i64;
    let points = ["sink.before_deliver", "sink.before_commit", "sink.after_commit"];
    for round in 0..24 {
        let batch: Vec<(i32, String)> = (sent..sent + 150).map(message).collect();
        if round % 4 == 0 {
            send(&p, &input, &batch);
            sent += 150;
            tokio::time::sleep(Duration::from_millis(rng.below(400) as u64)).await;
            c = server.sigkill_and_reconnect().await;
            continue;
        }
        // Armed with a fault point, the server dies there on its own once the new messages
        // reach the sinks.
        let point = points[round % 3];
        server.env = vec![("WEIR_FAULT".into(), format!("{point}@{}", 1 + rng.below(2)))];
        let log_before = server.log_text().len();
        server.restart_armed();
        send(&p, &input, &batch);
        sent += 150;
        assert!(server.wait_exit(Duration::from_secs(60)), "round {round}: the server did not die at {point}");
        let log = server.log_text();
        assert!(log[log_before..].contains(&format!("fault injection: aborting at {point}")), "round {round}");
        server.env.clear();
        server.start_again();
        c = server.connect().await;
    }
    let want = expected(sent);
    let deadline = Instant::now() + Duration::from_secs(60);
    let view = loop {
        c.batch_execute("FLUSH").await.unwrap();
        let view = rows(&c, "SELECT auction, n, top FROM per_auction").await;
        if view == want || Instant::now() > deadline {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if view != want {
        let log = server.log_text();
        let stored = rows(&c, "SELECT count(*), count(DISTINCT id) FROM bids").await;
        let status = rows(&c, "SELECT * FROM weir_catalog.checkpoints").await;
        // Which bids the views missed (a view of the ids, for this message).
        let seen: std::collections::BTreeSet<i64> =
            rows(&c, "SELECT id FROM bid_ids").await.iter().map(|s| s.parse().unwrap()).collect();
        let missing: Vec<i64> = (0..sent).filter(|id| id % 37 != 5 && !seen.contains(id)).collect();
        panic!(
            "the view differs from its query over every produced bid once:\n{view:?}\n{want:?}\n\
             the source's rows {stored:?}; bids the views missed {missing:?}\ncheckpoints {status:?}\nlog:\n{}",
            &log[log.len().saturating_sub(20000)..]
        );
    }
    // Every sink catches up: the keyed ones hold the view, the append-only ones each
    // expensive bid exactly once.
    let want_ids = expensive(sent);
    let topic_ids = || pipeline.expensive_in_topic();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (kafka, table) = (
            upsert_rows(&output, &["auction", "n", "top"]),
            rows(&pg, "SELECT auction, n, top FROM per_auction").await,
        );
        let (kafka_ids, table_ids) = (topic_ids(), sorted_ids(rows(&pg, "SELECT id FROM expensive").await));
        let done = kafka == want && table == want && kafka_ids == want_ids && table_ids == want_ids;
        if done || Instant::now() > deadline {
            assert_eq!(kafka, want, "the upsert topic holds the view");
            assert_eq!(table, want, "the Postgres table holds the view");
            assert_eq!(kafka_ids, want_ids, "the PLAIN topic has each expensive bid once");
            assert_eq!(table_ids, want_ids, "the append-only table has each expensive bid once");
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let malformed = (0..sent).filter(|id| id % 37 == 5).count();
    assert_eq!(
        rows(&c, "SELECT count(*), count(DISTINCT position) FROM weir_catalog.dead_letters WHERE source_name = 'bids'")
            .await,
        [format!("{malformed}|{malformed}")]
    );
    let states = rows(&c, "SELECT sink_name, state FROM weir_catalog.sinks").await;
    assert_eq!(states, ["expensive_to_kafka|running", "expensive_to_pg|running", "to_kafka|running", "to_pg|running"]);
}

/// The same pipeline stopped with SIGTERM ten times while bids keep coming, and started again
/// each time (a rolling restart): every stop exits 0 with no error logged, its sinks deliver
/// its last checkpoint before it exits, and the next start restores that checkpoint with no
/// logged write to replay (rows a table took just before the stop are in it). Afterwards the
/// view, the upsert topic and table hold the view's query over every bid, and the append-only
/// topic and table each expensive bid once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_stopped_with_sigterm_ten_times_delivers_exactly_once() {
    let pipeline = Pipeline::new("term").await;
    let (output, pg, input, jdbc) = (&pipeline.output, &pipeline.pg, &pipeline.input, &pipeline.jdbc);
    pg.batch_execute("CREATE TABLE noted (n BIGINT PRIMARY KEY, total BIGINT);").await.unwrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    c.batch_execute(&format!(
        "{}
         CREATE TABLE notes (x BIGINT);
         CREATE MATERIALIZED VIEW noted AS SELECT 1::BIGINT AS n, sum(x) AS total FROM notes;
         CREATE SINK noted_to_pg FROM noted WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'noted', \
           primary_key = 'n');",
        pipeline.sql()
    ))
    .await
    .unwrap();
    let p = producer(None);
    let mut rng = Rng(0x5167_e2e);
    let mut sent = 0i64;
    let mut noted = 0i64;
    for round in 0..10 {
        let batch: Vec<(i32, String)> = (sent..sent + 150).map(message).collect();
        send(&p, &input, &batch);
        sent += 150;
        tokio::time::sleep(Duration::from_millis(rng.below(400) as u64)).await;
        // Rows written just before the stop: its last checkpoint must hold them.
        c.batch_execute(&format!("INSERT INTO notes SELECT * FROM generate_series({}, {})", noted + 1, noted + 100))
            .await
            .unwrap();
        noted += 100;
        let log_before = server.log_text().len();
        let status = server.stop().expect("the server ran");
        let log = server.log_text()[log_before..].to_string();
        assert!(status.success(), "round {round}: a clean stop exits 0 ({status}):\n{log}");
        let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR") || l.contains("WARN")).collect();
        assert!(errors.is_empty(), "round {round}: the stop logged {errors:?}");
        assert!(log.contains("checkpoint taken at shutdown and uploaded"), "round {round}:\n{log}");
        assert!(log.contains("sinks delivered the last checkpoint"), "round {round}:\n{log}");
        // Delivered before the process exited: the table's sink holds every row written.
        let total = (noted * (noted + 1) / 2).to_string();
        assert_eq!(rows(&pg, "SELECT total FROM noted").await, [total], "round {round}: delivered at the stop");
        server.start_again();
        let log = server.log_text()[log_before..].to_string();
        assert!(log.contains("restored at start; 0 logged writes after it"), "round {round}: a replay:\n{log}");
        c = server.connect().await;
    }
    let want = expected(sent);
    let total = noted * (noted + 1) / 2;
    let want_ids = expensive(sent);
    let topic_ids = || pipeline.expensive_in_topic();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.batch_execute("FLUSH").await.unwrap();
        let view = rows(&c, "SELECT auction, n, top FROM per_auction").await;
        let (kafka, table) = (
            upsert_rows(&output, &["auction", "n", "top"]),
            rows(&pg, "SELECT auction, n, top FROM per_auction").await,
        );
        let (kafka_ids, table_ids) = (topic_ids(), sorted_ids(rows(&pg, "SELECT id FROM expensive").await));
        let noted = rows(&pg, "SELECT total FROM noted").await;
        let done = view == want
            && kafka == want
            && table == want
            && kafka_ids == want_ids
            && table_ids == want_ids
            && noted == [total.to_string()];
        if done || Instant::now() > deadline {
            assert_eq!(view, want, "the view is its query over every bid");
            assert_eq!(kafka, want, "the upsert topic holds the view");
            assert_eq!(table, want, "the Postgres table holds the view");
            assert_eq!(kafka_ids, want_ids, "the PLAIN topic has each expensive bid once");
            assert_eq!(table_ids, want_ids, "the append-only table has each expensive bid once");
            assert_eq!(noted, [total.to_string()], "the table's rows, through its sink");
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
