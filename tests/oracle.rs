//! The view oracle: after any sequence of inserts, updates and deletes, every materialized view
//! equals its own SELECT run as a batch query over the tables; and a server killed with
//! SIGKILL and restarted gives the same answers.

mod common;

use common::workload::{
    check_these_event_time_views, check_these_views, create_tables, random_events, random_statement, EVENT_TABLE,
    EVENT_TIME_VIEWS, LATER_EVENT_TIME_VIEWS, LATER_VIEWS, VIEWS,
};
use common::{rows, Rng, TestServer};

/// Views made `WITH (two_phase_aggregation = true)`: partial aggregates per (group, shard)
/// merged per group.
const TWO_PHASE_VIEWS: &[(&str, &str)] = &[
    ("two_phase", "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(k) AS hi, bool_or(v > 90) AS any_huge FROM a GROUP BY g"),
    ("two_phase_join", "SELECT b.w, count(a.v) AS n, sum(a.v) AS s FROM a JOIN b ON a.g = b.k GROUP BY b.w"),
];

async fn setup(client: &tokio_postgres::Client, parallelism: usize) {
    create_tables(client, parallelism, "(1, 1, 10), (2, 1, 20), (3, 2, 30)", "(1, 15), (2, 5)").await;
    for (name, query) in VIEWS.iter().chain(LATER_VIEWS) {
        client.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}")).await.unwrap();
    }
    for (name, query) in TWO_PHASE_VIEWS {
        let create = format!("CREATE MATERIALIZED VIEW {name} WITH (two_phase_aggregation = true) AS {query}");
        client.batch_execute(&create).await.unwrap();
    }
}

/// Every view [`setup`] made equals its query.
async fn check_views(client: &tokio_postgres::Client, context: &str) {
    check_these_views(client, VIEWS, context).await;
    check_these_views(client, LATER_VIEWS, context).await;
    check_these_views(client, TWO_PHASE_VIEWS, context).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_equal_their_queries_after_random_changes() {
    // Each seed at one shard and at four (rows are then routed between shards by key).
    for (seed, parallelism) in [(7u64, 1), (7, 4), (1234567, 1), (1234567, 4)] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("weir.toml");
        // A tiny operator state cache, so state really goes to RocksDB and back.
        std::fs::write(&config, "[storage]\nstate_cache_entries = 16\n").unwrap();
        let server = TestServer::start_with(&["--barrier-interval-ms", "50", "--config", config.to_str().unwrap()]);
        let client = server.connect().await;
        setup(&client, parallelism).await;
        check_views(&client, &format!("after backfill (parallelism {parallelism})")).await;
        let mut rng = Rng(seed);
        for step in 0..150 {
            let sql = random_statement(&mut rng);
            client.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            if step % 15 == 14 {
                check_views(&client, &format!("(seed {seed}, parallelism {parallelism}, step {step}, last: {sql})"))
                    .await;
            }
        }
        check_views(&client, &format!("(seed {seed}, parallelism {parallelism}, end)")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_after_sigkill_equal_views_that_never_stopped() {
    let mut server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
    let mut rng = Rng(99);
    {
        let client = server.connect().await;
        setup(&client, 4).await;
        for _ in 0..60 {
            client.batch_execute(&random_statement(&mut rng)).await.unwrap();
        }
        client.simple_query("FLUSH").await.unwrap();
    }
    let before = {
        let client = server.connect().await;
        let mut all = Vec::new();
        for (name, _) in VIEWS.iter().chain(LATER_VIEWS).chain(TWO_PHASE_VIEWS) {
            all.push(rows(&client, &format!("SELECT * FROM {name}")).await);
        }
        all
    };
    let client = server.sigkill_and_reconnect().await;
    for ((name, _), expected) in VIEWS.iter().chain(LATER_VIEWS).chain(TWO_PHASE_VIEWS).zip(&before) {
        assert_eq!(&rows(&client, &format!("SELECT * FROM {name}")).await, expected, "view {name} after restart");
    }
    // And they keep following changes.
    for _ in 0..40 {
        client.batch_execute(&random_statement(&mut rng)).await.unwrap();
    }
    check_views(&client, "after restart and more changes").await;
}

/// Views whose expressions fail for some rows (division by zero where `v % 5 = 0`): (name, the
/// view's query, the batch query it must equal). A failing expression gives NULL in that row
/// (documented in docs/sql-reference.md): the batch query says so with CASE, which evaluates
/// the division only where it succeeds. Every other row of the same batch is kept.
const FAILING_VIEWS: &[(&str, &str, &str)] = &[
    (
        "f_project",
        "SELECT k, 100 / (v % 5) AS x FROM a",
        "SELECT k, CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END AS x FROM a",
    ),
    (
        "f_filter",
        "SELECT k, v FROM a WHERE 100 / (v % 5) > 30",
        "SELECT k, v FROM a WHERE CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END > 30",
    ),
    (
        "f_aggregate",
        "SELECT g, count(*) AS n, sum(100 / (v % 5)) AS s, count(100 / (v % 5)) AS c, max(100 / (v % 5)) AS top FROM a GROUP BY g",
        "SELECT g, count(*) AS n, sum(CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END) AS s, count(CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END) AS c, max(CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END) AS top FROM a GROUP BY g",
    ),
    (
        "f_group_key",
        "SELECT 100 / (v % 5) AS bucket, count(*) AS n FROM a GROUP BY 100 / (v % 5)",
        "SELECT CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END AS bucket, count(*) AS n FROM a GROUP BY CASE WHEN v % 5 <> 0 THEN 100 / (v % 5) END",
    ),
    (
        "f_join_key",
        "SELECT a.k, b.k AS bk FROM a JOIN b ON a.g = 4 / (b.w % 5)",
        "SELECT a.k, b.k AS bk FROM a JOIN b ON a.g = CASE WHEN b.w % 5 <> 0 THEN 4 / (b.w % 5) END",
    ),
    (
        "f_left_join_key",
        "SELECT a.k, b.w FROM a LEFT JOIN b ON 4 / (a.v % 5) = b.k",
        "SELECT a.k, b.w FROM a LEFT JOIN b ON CASE WHEN a.v % 5 <> 0 THEN 4 / (a.v % 5) END = b.k",
    ),
    (
        "f_top_n",
        "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY 4 / (v % 5) ORDER BY k) AS rn FROM a) t WHERE rn <= 2",
        "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY CASE WHEN v % 5 <> 0 THEN 4 / (v % 5) END ORDER BY k) AS rn FROM a) t WHERE rn <= 2",
    ),
];

async fn check_failing_views(client: &tokio_postgres::Client, context: &str) {
    client.simple_query("FLUSH").await.unwrap();
    for (name, _, batch) in FAILING_VIEWS {
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        let expected = rows(client, batch).await;
        assert_eq!(view, expected, "view {name} differs from its query {context}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_keep_every_good_row_when_an_expression_fails_for_others() {
    for (seed, parallelism) in [(5u64, 1), (31, 4)] {
        let mut server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
        let client = server.connect().await;
        // Rows where `v % 5 = 0` or `w % 5 = 0` fail.
        create_tables(
            &client,
            parallelism,
            "(1, 1, 10), (2, 1, 21), (3, 2, 35), (4, 3, 7)",
            "(1, 15), (2, 6), (4, 11)",
        )
        .await;
        // Created over rows that fail: backfilled, not refused.
        for (name, query, _) in FAILING_VIEWS {
            client
                .batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
                .await
                .unwrap_or_else(|e| panic!("CREATE {name}: {e}"));
        }
        check_failing_views(&client, &format!("after backfill (parallelism {parallelism})")).await;
        let mut rng = Rng(seed);
        for step in 0..120 {
            let sql = random_statement(&mut rng);
            client.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            if step % 20 == 19 {
                check_failing_views(&client, &format!("(seed {seed}, parallelism {parallelism}, step {step})")).await;
            }
        }
        let errors =
            rows(&client, "SELECT count(*) > 0 FROM weir_catalog.view_errors WHERE view_name = 'f_project'").await;
        assert_eq!(errors, vec!["t".to_string()], "the failed rows are counted in view_errors");
        if parallelism == 1 {
            continue;
        }
        drop(client);
        let client = server.sigkill_and_reconnect().await;
        for _ in 0..30 {
            client.batch_execute(&random_statement(&mut rng)).await.unwrap();
        }
        check_failing_views(&client, "after SIGKILL and more changes").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_time_views_equal_batch_over_rows_not_late_and_survive_sigkill() {
    for (seed, parallelism) in [(11u64, 1), (2026, 4)] {
        let mut server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
        let mut rng = Rng(seed);
        let mut next_id = 0i64;
        let client = server.connect().await;
        client.batch_execute(&format!("SET streaming_parallelism = {parallelism}")).await.unwrap();
        client.batch_execute(EVENT_TABLE).await.unwrap();
        // Some rows before the views exist: they backfill.
        for _ in 0..10 {
            client.batch_execute(&random_events(&mut rng, &mut next_id)).await.unwrap();
        }
        let views: Vec<(&str, &str, &str)> = EVENT_TIME_VIEWS.iter().chain(LATER_EVENT_TIME_VIEWS).copied().collect();
        for (name, query, clauses) in &views {
            client.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query} {clauses}")).await.unwrap();
        }
        for step in 0..120 {
            client.batch_execute(&random_events(&mut rng, &mut next_id)).await.unwrap();
            // Epochs end at varying points of the stream (state is freed at barriers).
            if rng.below(3) == 0 {
                client.batch_execute("FLUSH").await.unwrap();
            }
            if step % 30 == 29 {
                let context = format!("(seed {seed}, parallelism {parallelism}, step {step})");
                check_these_event_time_views(&client, &views, &context).await;
            }
        }
        let late = rows(&client, "SELECT count(*) FROM ev_late").await;
        assert_ne!(late, vec!["0".to_string()], "the stream should have late rows for the strict views");
        if parallelism == 1 {
            continue;
        }
        // Killed and restarted: the same views (late rows stay out), and they keep going.
        let before: Vec<Vec<String>> = {
            let mut all = Vec::new();
            for (name, _, _) in &views {
                all.push(rows(&client, &format!("SELECT * FROM {name}")).await);
            }
            all
        };
        drop(client);
        let client = server.sigkill_and_reconnect().await;
        for ((name, _, _), expected) in views.iter().zip(&before) {
            assert_eq!(&rows(&client, &format!("SELECT * FROM {name}")).await, expected, "view {name} after restart");
        }
        for _ in 0..40 {
            client.batch_execute(&random_events(&mut rng, &mut next_id)).await.unwrap();
        }
        check_these_event_time_views(&client, &views, "after restart and more events").await;
    }
}

/// Every query shipped in `sql/nexmark/` equals, as a view, the same SELECT run as a batch over
/// the same generated events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_queries_equal_their_batch_queries() {
    let events = 20_000;
    let server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
    let client = server.connect().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/nexmark");
    let sources = std::fs::read_to_string(dir.join("sources.sql")).unwrap().replace("'100000'", &format!("'{events}'"));
    client.batch_execute(&sources).await.unwrap();
    // The sources are bounded: wait until each has stored its share of the events.
    for (source, expected) in [("person", events / 50), ("auction", events * 3 / 50), ("bid", events * 46 / 50)] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let n = rows(&client, &format!("SELECT count(*) FROM {source}")).await;
            if n == vec![expected.to_string()] {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{source} has {n:?} rows, expected {expected}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name.starts_with('q') || name.starts_with("hot")) && p.extension().is_some_and(|e| e == "sql")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 18, "{files:?}");
    for file in files {
        assert_view_equals_batch(&client, &file).await;
    }
}

/// Creates the view of Nexmark query file `file` (its last statement) and checks that, once
/// flushed, it equals its query run as a batch.
async fn assert_view_equals_batch(client: &tokio_postgres::Client, file: &std::path::Path) {
    let (name, query) = create_view_file(client, file).await;
    client.simple_query("FLUSH").await.unwrap();
    let view = rows(client, &format!("SELECT * FROM {name}")).await;
    let batch = rows(client, &query).await;
    assert!(!batch.is_empty() || name == "q3", "{name} has no rows: the test would not test it");
    assert_eq!(view, batch, "nexmark {name} differs from its query as a batch");
}

/// Runs Nexmark query file `file`; returns its view's name and query.
async fn create_view_file(client: &tokio_postgres::Client, file: &std::path::Path) -> (String, String) {
    let text = std::fs::read_to_string(file).unwrap();
    let body: String = text.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
    client.batch_execute(&body).await.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // The view is the file's last statement: CREATE MATERIALIZED VIEW name AS <query>.
    let view_statement = &body[body.find("CREATE MATERIALIZED VIEW").unwrap()..];
    let (head, query) = view_statement.split_once(" AS\n").or_else(|| view_statement.split_once(" AS ")).unwrap();
    // The name follows VIEW (WITH (...) may follow it).
    let name = head.split_whitespace().nth(3).unwrap().to_string();
    (name, query.trim().trim_end_matches(';').to_string())
}

/// Windowed Nexmark views following the generator live, with a state cache of 64 entries and
/// epochs spanning more event time than the watermark delay (100 events per second of event
/// time, 10,000 per second of wall time: 20 s of event time per 200 ms epoch, as the benchmark
/// runs): q5's aggregate finishes final windows mid-epoch (`weir_groups_finished_early_total`)
/// and state spills to RocksDB, and the views still equal their queries as batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_windowed_views_finishing_windows_mid_epoch_equal_their_batch_queries() {
    let events = 30_000;
    let config = tempfile::tempdir().unwrap();
    let config_file = config.path().join("weir.toml");
    std::fs::write(&config_file, "[storage]\nstate_cache_entries = 64\n").unwrap();
    let server = TestServer::start_with(&["--barrier-interval-ms", "200", "--config", config_file.to_str().unwrap()]);
    let client = server.connect().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/nexmark");
    let sources = std::fs::read_to_string(dir.join("sources.sql")).unwrap().replace(
        "nexmark.event.num = '100000'",
        &format!(
            "nexmark.event.num = '{events}', nexmark.event.rate = '100', nexmark.events.per.second = '10000', \
             nexmark.max.chunk.size = '500'"
        ),
    );
    client.batch_execute(&sources).await.unwrap();
    let mut views = Vec::new();
    for query in ["q5", "q7", "q8"] {
        views.push(create_view_file(&client, &dir.join(format!("{query}.sql"))).await);
    }
    let expected_bids = (events * 46 / 50).to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while rows(&client, "SELECT count(*) FROM bid").await != vec![expected_bids.clone()] {
        assert!(std::time::Instant::now() < deadline, "the bid source did not finish");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    client.simple_query("FLUSH").await.unwrap();
    for (name, query) in &views {
        let view = rows(&client, &format!("SELECT * FROM {name}")).await;
        let batch = rows(&client, query).await;
        assert!(batch.len() > 3, "{name} has {} rows: the test would not test it", batch.len());
        assert_eq!(view, batch, "nexmark {name}, finishing windows mid-epoch, differs from its query as a batch");
    }
    // And windows were finished mid-epoch, by q5's count per auction and window. (q7's
    // aggregate has one group per window, and q8's groupings of this few people and sellers
    // touch fewer groups in an epoch than the cache holds, so they wait for barriers.)
    let metrics = server.metrics_text();
    let finished = metrics
        .lines()
        .find_map(|l| l.strip_prefix("weir_groups_finished_early_total{view=\"q5\"} "))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(finished > 0, "q5 finished no window mid-epoch: the test would not test it");
}

/// Waits (up to 30 s) until `sql` gives the one row `expected`.
async fn wait_for(client: &tokio_postgres::Client, sql: &str, expected: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let got = rows(client, sql).await;
        if got == vec![expected.to_string()] {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{sql}: {got:?}, expected {expected}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A JSON source whose records hold nested objects and arrays: a `JSONB` column takes the
/// nested value (its JSON text; a string as a JSON string), the JSON operators read it, a view
/// over it equals its query, and a record that is not JSON is still a dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_json_records_fill_jsonb_columns() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.json");
    std::fs::write(
        &file,
        concat!(
            "{\"id\": 1, \"payload\": {\"user\": {\"name\": \"ann\"}, \"tags\": [\"a\", \"b\"]}, \"note\": \"plain\"}\n",
            "{\"id\": 2, \"payload\": [1, 2, 3], \"note\": \"42\"}\n",
            "not json at all\n",
            "{\"id\": 3, \"payload\": {\"user\": {\"name\": \"bo\"}}, \"note\": null}\n",
            "{\"id\": 4, \"payload\": \"a string\", \"note\": \"x\"}\n",
        ),
    )
    .unwrap();
    let server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE events (id BIGINT, payload JSONB, note TEXT)
               WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON;
             CREATE MATERIALIZED VIEW names AS
               SELECT payload -> 'user' ->> 'name' AS name, count(*) AS n FROM events GROUP BY payload -> 'user' ->> 'name';",
            file.display()
        ))
        .await
        .unwrap();
    wait_for(&client, "SELECT count(*) FROM events", "4").await;
    assert_eq!(
        rows(&client, "SELECT id, payload -> 'user' ->> 'name', payload #>> '{tags,1}', jsonb_typeof(payload), note FROM events ORDER BY id").await,
        ["1|ann|b|object|plain", "2|NULL|NULL|array|42", "3|bo|NULL|object|NULL", "4|NULL|NULL|string|x"]
    );
    // `->` takes a text step as a key only: NULL on an array, as in Postgres.
    assert_eq!(
        rows(&client, "SELECT payload -> '1', payload -> 1, payload #>> '{1}' FROM events WHERE id = 2").await,
        ["NULL|2|2"]
    );
    client.simple_query("FLUSH").await.unwrap();
    assert_eq!(
        rows(&client, "SELECT name, n FROM names ORDER BY name").await,
        rows(&client, "SELECT payload -> 'user' ->> 'name', count(*) FROM events GROUP BY 1 ORDER BY 1").await
    );
    assert_eq!(rows(&client, "SELECT position FROM weir_catalog.dead_letters").await, ["events.json:3"]);
}

/// File sources: CSV, JSON and Parquet files replayed as streams, new files followed, malformed
/// lines kept as dead letters, nothing read twice after a restart, and an event-time view over
/// one equal to its batch query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sources_replay_csv_json_and_parquet() {
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("bids-1.csv"),
        "auction,price,date_time\n1,10,2026-01-01 00:00:01\n2,20,2026-01-01 00:00:04\n1,30,2026-01-01 00:00:12\n",
    )
    .unwrap();
    std::fs::write(
        d.join("bids-2.csv"),
        // Two malformed lines: they become dead letters, the rest of the file is read.
        "auction,price,date_time\n3,40,2026-01-01 00:00:15\nx,oops,2026-01-01 00:00:20\n5,60\n1,50,2026-01-01 00:00:31\n",
    )
    .unwrap();
    std::fs::write(
        d.join("bids.json"),
        "{\"auction\": 7, \"price\": 70}\nnot json\n{\"auction\": \"nine\", \"price\": 90}\n{\"auction\": 8, \"price\": 80}\n",
    )
    .unwrap();
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            std::sync::Arc::new(Int64Array::from(vec![5, 6, 7])),
            std::sync::Arc::new(Int64Array::from(vec![1, 2, 3])),
        ],
    )
    .unwrap();
    let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(d.join("bids.parquet")).unwrap(),
        schema,
        None,
    )
    .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let mut server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
    let client = server.connect().await;
    let path = |name: &str| d.join(name).to_string_lossy().to_string();
    client
        .batch_execute(&format!(
            "CREATE SOURCE csv_bids (auction BIGINT, price BIGINT, date_time TIMESTAMP,
               WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
             WITH (connector = 'file', path = '{}', file.follow = 'true', file.poll.ms = '50') FORMAT PLAIN ENCODE CSV;
             CREATE SOURCE json_bids (auction BIGINT, price BIGINT) WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE JSON;
             CREATE SOURCE parquet_bids WITH (connector = 'file', path = '{}') FORMAT PLAIN ENCODE PARQUET;
             CREATE MATERIALIZED VIEW per_10s AS SELECT window_start, count(*) AS n, sum(price) AS s
               FROM TUMBLE(csv_bids, date_time, INTERVAL '10' SECOND) GROUP BY window_start EMIT ON WINDOW CLOSE;",
            path("bids-*.csv"),
            path("bids.json"),
            path("bids.parquet")
        ))
        .await
        .unwrap();
    wait_for(&client, "SELECT count(*), sum(price) FROM csv_bids", "5|150").await;
    wait_for(&client, "SELECT count(*), sum(price) FROM json_bids", "2|150").await;
    wait_for(&client, "SELECT count(*), sum(auction) FROM parquet_bids", "3|18").await;
    // The malformed lines, kept where users can see them.
    let dead_letters = "SELECT source_name, position, raw, error <> '' FROM weir_catalog.dead_letters ORDER BY 1, 2";
    let expected_dead = vec![
        "csv_bids|bids-2.csv:3|x,oops,2026-01-01 00:00:20|t".to_string(),
        "csv_bids|bids-2.csv:4|5,60|t".to_string(),
        "json_bids|bids.json:2|not json|t".to_string(),
        "json_bids|bids.json:3|{\"auction\": \"nine\", \"price\": 90}|t".to_string(),
    ];
    assert_eq!(rows(&client, dead_letters).await, expected_dead);
    // A new file is followed.
    std::fs::write(d.join("bids-3.csv"), "auction,price,date_time\n4,60,2026-01-01 00:00:45\n").unwrap();
    wait_for(&client, "SELECT count(*), sum(price) FROM csv_bids", "6|210").await;
    client.simple_query("FLUSH").await.unwrap();
    let view = rows(&client, "SELECT * FROM per_10s").await;
    let batch = rows(
        &client,
        "SELECT window_start, count(*) AS n, sum(price) AS s FROM TUMBLE(csv_bids, date_time, INTERVAL '10' SECOND)
         WHERE window_end <= (SELECT max(date_time) FROM csv_bids) - INTERVAL '1' SECOND GROUP BY window_start",
    )
    .await;
    assert_eq!(view, batch);
    assert_eq!(view.len(), 3, "{view:?}");
    // Restarted: every source resumes after what it stored; nothing is read twice.
    drop(client);
    let client = server.sigkill_and_reconnect().await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(rows(&client, "SELECT count(*) FROM csv_bids").await, vec!["6".to_string()]);
    assert_eq!(rows(&client, "SELECT count(*) FROM json_bids").await, vec!["2".to_string()]);
    assert_eq!(rows(&client, dead_letters).await, expected_dead, "dead letters are kept once across a restart");
    std::fs::write(d.join("bids-4.csv"), "auction,price,date_time\n9,1,2026-01-01 00:00:50\n").unwrap();
    wait_for(&client, "SELECT count(*) FROM csv_bids", "7").await;
}

/// `file.immutable = 'true'`: the source stores offsets, not rows, and its rows are read from
/// the files again, for a SELECT and for views built or rebuilt after a SIGKILL, with the same
/// rows and dead letters; a file changed since it was read is an error (58030), not other rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_file_sources_are_read_again_and_a_changed_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut lines = String::from("auction,price\n");
    for i in 0..25 {
        lines.push_str(&format!("{},{}\n", i % 4, i * 10));
        if i == 7 {
            lines.push_str("seven,oops\n");
        }
    }
    std::fs::write(d.join("bids-1.csv"), &lines).unwrap();
    // A batch (4 lines) of bad lines only: a chunk of no rows, its dead letters stored.
    std::fs::write(d.join("bids-2.csv"), "auction,price\nbad,1\nbad,2\nbad,3\nbad,4\n9,1000\n9,2000\n").unwrap();
    let mut server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bids (auction BIGINT, price BIGINT)
               WITH (connector = 'file', path = '{}', file.immutable = 'true', batch.size = '4') FORMAT PLAIN ENCODE CSV;
             CREATE MATERIALIZED VIEW per_auction AS SELECT auction, count(*) AS n, sum(price) AS s FROM bids GROUP BY auction;",
            d.join("bids-*.csv").display()
        ))
        .await
        .unwrap();
    wait_for(&client, "SELECT count(*), sum(price) FROM bids", "27|6000").await;
    let per_auction = "SELECT * FROM per_auction ORDER BY auction";
    let batch = "SELECT auction, count(*), sum(price) FROM bids GROUP BY auction ORDER BY auction";
    client.simple_query("FLUSH").await.unwrap();
    let expected = rows(&client, batch).await;
    assert_eq!(expected.len(), 5, "{expected:?}");
    assert_eq!(rows(&client, per_auction).await, expected);
    let dead_letters = "SELECT position, raw FROM weir_catalog.dead_letters ORDER BY position";
    let expected_dead: Vec<String> = ["bids-1.csv:10|seven,oops", "bids-2.csv:2|bad,1", "bids-2.csv:3|bad,2"]
        .into_iter()
        .chain(["bids-2.csv:4|bad,3", "bids-2.csv:5|bad,4"])
        .map(String::from)
        .collect();
    assert_eq!(rows(&client, dead_letters).await, expected_dead);
    // A view created now, and every view after a SIGKILL, is built from the files read again.
    client
        .batch_execute("CREATE MATERIALIZED VIEW priced AS SELECT auction, price FROM bids WHERE price >= 100")
        .await
        .unwrap();
    assert_eq!(rows(&client, "SELECT count(*) FROM priced").await, vec!["17".to_string()]);
    drop(client);
    let client = server.sigkill_and_reconnect().await;
    // The latest chunks' offsets may be lost with the kill (they skip the write-ahead log):
    // the source reads those again.
    wait_for(&client, "SELECT count(*), sum(price) FROM bids", "27|6000").await;
    client.simple_query("FLUSH").await.unwrap();
    assert_eq!(rows(&client, per_auction).await, expected);
    assert_eq!(rows(&client, "SELECT count(*) FROM priced").await, vec!["17".to_string()]);
    assert_eq!(rows(&client, dead_letters).await, expected_dead);
    // A file that changed is caught when the rows are read again.
    std::fs::write(d.join("bids-1.csv"), "auction,price\n1,1\n").unwrap();
    let err = client.simple_query("SELECT count(*) FROM bids").await.unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "58030", "{db:?}");
    assert!(db.message().contains("changed since they were read"), "{}", db.message());
}

/// File sources over S3-compatible object storage (scripts/s3-server.sh): objects under a
/// prefix matched by a pattern, new objects followed, a bad line kept as a dead letter, a
/// Parquet object's schema taken at CREATE, a restart resuming after what was stored, and a
/// missing bucket refused at CREATE with 58030.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sources_read_s3_objects() {
    use object_store::{aws::AmazonS3Builder, path::Path as ObjectPath, ObjectStoreExt};
    let (endpoint, bucket) = common::s3_bucket("weir-file-source");
    let store = AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_bucket_name(&bucket)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    let put = |key: &'static str, body: Vec<u8>| {
        let store = &store;
        async move { store.put(&ObjectPath::from(key), body.into()).await.unwrap() }
    };
    put("bids/bids-1.csv", b"auction,price\n1,10\n2,20\n".to_vec()).await;
    put("bids/bids-2.csv", b"auction,price\n3,30\nthree,x\n4,40\n".to_vec()).await;
    put("bids/notes.txt", b"not a bid\n".to_vec()).await;
    put("bids/deeper/bids-9.csv", b"auction,price\n9,9000\n".to_vec()).await;
    let mut parquet = Vec::new();
    {
        use datafusion::arrow::array::{Int64Array, RecordBatch};
        let batch = RecordBatch::try_from_iter(vec![(
            "auction",
            std::sync::Arc::new(Int64Array::from(vec![5, 6, 7])) as datafusion::arrow::array::ArrayRef,
        )])
        .unwrap();
        let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(&mut parquet, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }
    put("parquet/part-0.parquet", parquet).await;

    let mut server = TestServer::start_with(&["--barrier-interval-ms", "50"]);
    let client = server.connect().await;
    let s3 = format!(
        "s3.endpoint = '{endpoint}', s3.region = 'us-east-1', s3.access_key_id = 'test', s3.secret_access_key = 'test'"
    );
    client
        .batch_execute(&format!(
            "CREATE SOURCE s3_bids (auction BIGINT, price BIGINT)
               WITH (connector = 'file', path = 's3://{bucket}/bids/*.csv', file.follow = 'true', file.poll.ms = '50', {s3})
               FORMAT PLAIN ENCODE CSV;
             CREATE SOURCE s3_parquet WITH (connector = 'file', path = 's3://{bucket}/parquet/', {s3}) FORMAT PLAIN ENCODE PARQUET;
             CREATE MATERIALIZED VIEW s3_totals AS SELECT auction % 2 AS parity, count(*) AS n, sum(price) AS s
               FROM s3_bids GROUP BY auction % 2;"
        ))
        .await
        .unwrap();
    wait_for(&client, "SELECT count(*), sum(price) FROM s3_bids", "4|100").await;
    wait_for(&client, "SELECT count(*), sum(auction) FROM s3_parquet", "3|18").await;
    let dead_letters = "SELECT source_name, position, raw FROM weir_catalog.dead_letters ORDER BY 1, 2";
    assert_eq!(rows(&client, dead_letters).await, vec!["s3_bids|bids-2.csv:3|three,x".to_string()]);
    // A new object is followed.
    put("bids/bids-3.csv", b"auction,price\n5,50\n".to_vec()).await;
    wait_for(&client, "SELECT count(*), sum(price) FROM s3_bids", "5|150").await;
    client.simple_query("FLUSH").await.unwrap();
    let totals = "SELECT * FROM s3_totals ORDER BY parity";
    let expected = vec!["0|2|60".to_string(), "1|3|90".to_string()];
    assert_eq!(rows(&client, totals).await, expected);
    assert_eq!(
        rows(&client, "SELECT auction % 2, count(*), sum(price) FROM s3_bids GROUP BY 1 ORDER BY 1").await,
        expected
    );
    // Restarted after SIGKILL: resumes after what it stored.
    drop(client);
    let client = server.sigkill_and_reconnect().await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(rows(&client, "SELECT count(*), sum(price) FROM s3_bids").await, vec!["5|150".to_string()]);
    assert_eq!(rows(&client, "SELECT count(*) FROM s3_parquet").await, vec!["3".to_string()]);
    put("bids/bids-4.csv", b"auction,price\n6,60\n".to_vec()).await;
    wait_for(&client, "SELECT count(*), sum(price) FROM s3_bids", "6|210").await;
    client.simple_query("FLUSH").await.unwrap();
    assert_eq!(rows(&client, totals).await, vec!["0|3|120".to_string(), "1|3|90".to_string()]);
    assert_eq!(rows(&client, dead_letters).await, vec!["s3_bids|bids-2.csv:3|three,x".to_string()]);
    // A bucket that does not exist is refused when the source is created.
    let err = client
        .batch_execute(&format!(
            "CREATE SOURCE nowhere (a BIGINT) WITH (connector = 'file', path = 's3://{bucket}-missing/x/', {s3})
             FORMAT PLAIN ENCODE CSV"
        ))
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "58030", "{db:?}");
    assert!(db.message().contains("-missing"), "{}", db.message());
}

/// Epochs end by size too: with barriers by time only every 10 minutes, a view still follows
/// its table once `epoch_max_rows` rows have come, and the early barriers are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_epoch_holding_epoch_max_rows_ends_early() {
    let config = tempfile::tempdir().unwrap();
    let config_file = config.path().join("weir.toml");
    std::fs::write(&config_file, "epoch_max_rows = 1000\n").unwrap();
    let server =
        TestServer::start_with(&["--barrier-interval-ms", "600000", "--config", config_file.to_str().unwrap()]);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (k INT, v INT); CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM t GROUP BY k;
             INSERT INTO t SELECT x % 3, x FROM generate_series(1, 10) AS g(x);",
        )
        .await
        .unwrap();
    // 10 rows: the epoch is not full, and no barrier comes for 10 minutes.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(rows(&client, "SELECT sum(n) FROM per_k").await, vec!["NULL".to_string()]);
    // 3,000 more rows fill it: the view follows without FLUSH.
    client.batch_execute("INSERT INTO t SELECT x % 3, x FROM generate_series(1, 3000) AS g(x);").await.unwrap();
    wait_for(&client, "SELECT sum(n) FROM per_k", "3010").await;
    let body = server.metrics_text();
    assert!(body.lines().any(|l| l == "weir_early_barriers_total 1"), "{body}");
}

/// Views with temporal filters (`now()`, ADR 13): (name, query).
const TEMPORAL_VIEWS: &[(&str, &str)] = &[
    ("last_10s", "SELECT id, g FROM tev WHERE ts > now() - INTERVAL '10' SECOND"),
    ("sliding", "SELECT id FROM tev WHERE now() - INTERVAL '10' SECOND < ts AND ts <= now()"),
    ("per_g", "SELECT g, count(*) AS n, sum(id) AS s FROM tev WHERE ts + INTERVAL '5' SECOND >= now() GROUP BY g"),
    ("upcoming", "SELECT id FROM tev WHERE ts BETWEEN now() AND now() + INTERVAL '3' SECOND"),
    ("labelled", "SELECT t.id, l.label FROM tev t JOIN tlabel l ON t.g = l.g AND t.ts > now() - INTERVAL '8' SECOND"),
    ("active_g", "SELECT g, max(ts) AS last FROM tev GROUP BY g HAVING max(ts) > now() - INTERVAL '4' SECOND"),
];

/// 2030-01-01 00:00:00 UTC, where the tests' epoch clock starts, in milliseconds.
const CLOCK_START_MS: i64 = 1_893_456_000_000;

fn timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().naive_utc().to_string()
}

/// Each view equals its query run as a batch with now() written out as the pinned time;
/// returns how many rows the views hold.
async fn check_temporal_views(client: &tokio_postgres::Client, now_ms: i64, context: &str) -> usize {
    let mut held = 0;
    client.batch_execute(&format!("SET weir.epoch_clock = '{}'; FLUSH", timestamp(now_ms))).await.unwrap();
    let now = format!("TIMESTAMP '{}'", timestamp(now_ms));
    for (name, query) in TEMPORAL_VIEWS {
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = rows(client, &query.replace("now()", &now)).await;
        assert_eq!(view, batch, "view {name} differs from its query at {now} {context}");
        held += view.len();
    }
    held
}

/// Rows stamped around the clock (15 s before it to 5 s after), deleted and moved at random.
fn random_timed_statement(rng: &mut Rng, now_ms: i64, next_id: &mut i64) -> String {
    match rng.below(6) {
        0..=2 => {
            let rows: Vec<String> = (0..1 + rng.below(4))
                .map(|_| {
                    *next_id += 1;
                    let ts = timestamp(now_ms - 15_000 + rng.below(20_000));
                    format!("({next_id}, {}, '{ts}')", rng.below(4))
                })
                .collect();
            format!("INSERT INTO tev VALUES {}", rows.join(", "))
        }
        3 => format!("DELETE FROM tev WHERE id % 5 = {}", rng.below(5)),
        4 => format!(
            "UPDATE tev SET ts = TIMESTAMP '{}' WHERE id % 7 = {}",
            timestamp(now_ms + rng.below(4000)),
            rng.below(7)
        ),
        _ => format!("UPDATE tlabel SET label = 'l{}' WHERE g = {}", rng.below(100), rng.below(4)),
    }
}

/// A view with a temporal filter equals its query at every epoch's time, under random changes
/// and a clock moved in random steps, at one shard and at four; and after SIGKILL it comes back
/// as it was and keeps expiring rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporal_filters_equal_their_query_at_every_epoch_time() {
    for (seed, parallelism) in [(11u64, 1), (4242, 4)] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("weir.toml");
        // A tiny state cache, so the rows waiting to enter and leave really go through RocksDB.
        std::fs::write(&config, "[storage]\nstate_cache_entries = 16\n").unwrap();
        let mut server = TestServer::start_with(&["--barrier-interval-ms", "50", "--config", config.to_str().unwrap()]);
        let client = server.connect().await;
        let mut now_ms = CLOCK_START_MS;
        client
            .batch_execute(&format!(
                "SET weir.epoch_clock = '{}'; SET streaming_parallelism = {parallelism};
                 CREATE TABLE tev (id BIGINT, g INT, ts TIMESTAMP);
                 CREATE TABLE tlabel (g INT, label TEXT);
                 INSERT INTO tlabel VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three');
                 INSERT INTO tev VALUES (1, 0, '{}'), (2, 1, '{}');",
                timestamp(now_ms),
                timestamp(now_ms - 3_000),
                timestamp(now_ms + 2_000)
            ))
            .await
            .unwrap();
        for (name, query) in TEMPORAL_VIEWS {
            client.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}")).await.unwrap();
        }
        check_temporal_views(&client, now_ms, "after backfill").await;
        let mut rng = Rng(seed);
        let mut next_id = 2;
        // How the views' sizes went: the check means something only if rows came and went.
        let mut sizes = Vec::new();
        for step in 0..120 {
            let sql = random_timed_statement(&mut rng, now_ms, &mut next_id);
            client.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            if step % 6 == 5 {
                now_ms += rng.below(3_000);
                let context = format!("(seed {seed}, parallelism {parallelism}, step {step})");
                sizes.push(check_temporal_views(&client, now_ms, &context).await);
            }
        }
        assert!(sizes.iter().any(|&n| n > 20) && sizes.windows(2).any(|w| w[1] < w[0]), "{sizes:?}");
        // Killed and restarted: the clock is pinned again (a pin is not kept across restarts).
        drop(client);
        let client = server.sigkill_and_reconnect().await;
        check_temporal_views(&client, now_ms, "after SIGKILL").await;
        let mut after = Vec::new();
        for step in 0..10 {
            now_ms += 2_000;
            after.push(check_temporal_views(&client, now_ms, &format!("after SIGKILL, {step} steps on")).await);
        }
        // Everything is past its end by now: the restored views expired what they held.
        assert!(after[0] > 0 && after[9] == 0, "{after:?}");
    }
}

/// Views under a state TTL (`WITH (state_ttl = '5 seconds')`, ADR 30), over the random
/// workload's tables: (name, query).
const TTL_VIEWS: &[(&str, &str)] = &[
    ("ttl_groups", "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM a GROUP BY g"),
    ("ttl_distinct", "SELECT DISTINCT g, v % 3 AS r FROM a"),
    ("ttl_join", "SELECT a.k, a.v, b.w FROM a JOIN b ON a.g = b.k"),
    ("ttl_left_join", "SELECT b.k, b.w, a.v FROM b LEFT JOIN a ON a.g = b.k"),
    ("ttl_join_groups", "SELECT b.w, count(*) AS n FROM a JOIN b ON a.g = b.k GROUP BY b.w"),
];

/// The rows of every view of `views`, in order.
async fn view_rows(client: &tokio_postgres::Client, views: &[(&str, &str)]) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for (name, _) in views {
        all.push(rows(client, &format!("SELECT * FROM {name}")).await);
    }
    all
}

/// A state TTL forgets the same keys in a view killed with SIGKILL and restarted as in one that
/// never stopped: two servers take the same changes at the same pinned epoch times, one is
/// killed midway, and their views are compared at every step. The same queries under a TTL
/// longer than the run equal their batch queries (the index of idle keys changes no result
/// until it forgets), and the TTL views really forget (they hold fewer rows than their queries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_ttl_views_forget_alike_after_sigkill_and_change_nothing_before() {
    let long: Vec<(String, &str)> = TTL_VIEWS.iter().map(|(name, query)| (format!("{name}_long"), *query)).collect();
    let long: Vec<(&str, &str)> = long.iter().map(|(name, query)| (name.as_str(), *query)).collect();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("weir.toml");
    // A tiny state cache, so the index of idle keys really goes through RocksDB.
    std::fs::write(&config, "[storage]\nstate_cache_entries = 16\n").unwrap();
    let args = ["--barrier-interval-ms", "50", "--checkpoint-interval", "200ms", "--config", config.to_str().unwrap()];
    let steady = TestServer::start_with(&args);
    let mut killed = TestServer::start_with(&args);
    let mut clients = [steady.connect().await, killed.connect().await];
    let mut now_ms = CLOCK_START_MS;
    for client in &clients {
        client.batch_execute(&format!("SET weir.epoch_clock = '{}'", timestamp(now_ms))).await.unwrap();
        create_tables(client, 2, "(1, 1, 10), (2, 1, 20), (3, 2, 30)", "(1, 15), (2, 5)").await;
        for (name, query) in TTL_VIEWS {
            let create = format!("CREATE MATERIALIZED VIEW {name} WITH (state_ttl = '5 seconds') AS {query}");
            client.batch_execute(&create).await.unwrap();
        }
        for (name, query) in &long {
            let create = format!("CREATE MATERIALIZED VIEW {name} WITH (state_ttl = '1 day') AS {query}");
            client.batch_execute(&create).await.unwrap();
        }
    }
    let mut rng = Rng(2027);
    let (mut forgot, mut kept) = (false, false);
    for step in 0..40 {
        // The clock moves 0 to 3 s a step, so keys go idle and others are changed in time.
        now_ms += rng.below(3_000);
        let sql = random_statement(&mut rng);
        for client in &clients {
            client.batch_execute(&format!("SET weir.epoch_clock = '{}'; FLUSH", timestamp(now_ms))).await.unwrap();
            client.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            client.simple_query("FLUSH").await.unwrap();
        }
        let context = format!("at step {step} ({sql})");
        let views = [view_rows(&clients[0], TTL_VIEWS).await, view_rows(&clients[1], TTL_VIEWS).await];
        for ((name, _), (one, other)) in TTL_VIEWS.iter().zip(views[0].iter().zip(&views[1])) {
            assert_eq!(one, other, "TTL view {name} differs between the two servers {context}");
        }
        check_these_views(&clients[0], &long, &context).await;
        for ((_, query), held) in TTL_VIEWS.iter().zip(&views[0]) {
            let all = rows(&clients[0], query).await.len();
            forgot |= held.len() < all;
            kept |= !held.is_empty();
        }
        if step == 20 {
            // Killed once a checkpoint holds every change: changes replayed after a restart
            // count as made at the restart (their keys kept longer), which is not what is
            // compared here.
            complete_checkpoints(&clients[1], 2).await;
            clients[1] = killed.sigkill_and_reconnect().await;
            // A pin is not kept across restarts: the next step pins the clock again, before
            // anything changes.
        }
    }
    assert!(forgot && kept, "the TTL views should both hold rows and forget some (forgot {forgot}, kept {kept})");
}

/// Waits until `more` checkpoints complete after now (the second of two began after the first
/// ended, so after everything done before the call).
async fn complete_checkpoints(client: &tokio_postgres::Client, more: usize) {
    let newest = || async {
        let row = client
            .query_one(
                "SELECT CAST(coalesce(max(epoch), 0) AS BIGINT) FROM weir_catalog.checkpoints WHERE status = 'complete'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = newest().await;
    for _ in 0..more {
        loop {
            let now = newest().await;
            if now > last {
                last = now;
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{more} checkpoints did not complete within 60 s");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}
