//! The Postgres (JDBC) sink against a real PostgreSQL (scripts/pg-server.sh): a view's changes
//! upserted and deleted by primary key, an append-only view's rows inserted, each exactly once
//! through SIGKILLs; CREATE SINK errors.

mod common;

use std::time::{Duration, Instant};

use common::{assert_sqlstate, postgres_database as database, rows, rows_eventually, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_sink_holds_the_view_exactly_once_across_sigkills() {
    let (pg, jdbc) = database("analytics").await;
    pg.batch_execute(
        "CREATE TABLE per_group (g INT PRIMARY KEY, n BIGINT, total BIGINT);
         CREATE TABLE events (id BIGINT, g INT);",
    )
    .await
    .unwrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE accounts (id INT PRIMARY KEY, g INT, amount BIGINT);
         CREATE TABLE ev (id BIGINT, g INT) APPEND ONLY;
         INSERT INTO accounts VALUES (1, 1, 10), (2, 2, 20);
         CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n, sum(amount) AS total FROM accounts GROUP BY g;
         CREATE SINK to_pg FROM per_group WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'per_group', primary_key = 'g', sink.parallelism = 2);
         CREATE SINK events_to_pg AS SELECT id, g FROM ev WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'events', sink.parallelism = 3);"
    ))
    .await
    .unwrap();
    let mut next = 0i64;
    for round in 0..6u64 {
        for _ in 0..5 {
            let values: Vec<String> = (next..next + 10).map(|id| format!("({id}, {})", id % 3)).collect();
            c.batch_execute(&format!("INSERT INTO ev VALUES {}", values.join(", "))).await.unwrap();
            c.batch_execute(&format!("INSERT INTO accounts VALUES ({}, {}, {next})", next % 23, next % 6))
                .await
                .unwrap();
            if next % 4 == 0 {
                c.batch_execute(&format!("DELETE FROM accounts WHERE g = {}", next % 6)).await.unwrap();
            }
            next += 10;
        }
        tokio::time::sleep(Duration::from_millis(50 * round)).await;
        c = server.sigkill_and_reconnect().await;
    }
    // More after the last restart, so this server delivers (its metrics are checked below).
    let values: Vec<String> = (next..next + 10).map(|id| format!("({id}, {})", id % 3)).collect();
    c.batch_execute(&format!("INSERT INTO ev VALUES {}", values.join(", "))).await.unwrap();
    next += 10;
    c.batch_execute("FLUSH").await.unwrap();
    let view = rows(&c, "SELECT g, n, total FROM per_group").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = rows(&pg, "SELECT count(*) FROM events").await;
        let table = rows(&pg, "SELECT g, n, total FROM per_group").await;
        if (events == [next.to_string()] && table == view) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(rows(&pg, "SELECT g, n, total FROM per_group").await, view, "the table equals the view");
    assert_eq!(
        rows(&pg, "SELECT count(*), count(DISTINCT id) FROM events").await,
        [format!("{next}|{next}")],
        "each event once"
    );
    // A marker row per shard that delivered: the append-only sink gives its batches to its
    // three shards in turn, the keyed one spreads its groups over two.
    // (`weir-sink-<sink id>-<token>` for shard 0, `-s<shard>` appended for the others.)
    let markers = rows(&pg, "SELECT sink FROM weir_sink_marker ORDER BY sink").await;
    assert!((4..=5).contains(&markers.len()), "{markers:?}");
    assert_eq!(
        rows(&pg, "SELECT count(DISTINCT split_part(sink, '-', 3)), count(*) FILTER (WHERE sink !~ '^weir-sink-[0-9]+-[0-9a-f]{12}(-s[12])?$') FROM weir_sink_marker").await,
        ["2|0"],
        "{markers:?}"
    );
    assert_eq!(
        rows(&c, "SELECT sink_name, state, shards FROM weir_catalog.sinks ORDER BY 1").await,
        ["events_to_pg|running|3", "to_pg|running|2"]
    );
    // Metrics of the server since its last restart: transactions committed, rows delivered,
    // nothing left to deliver.
    let metrics = server.metrics_text();
    let value = |name: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("weir_sink_deliveries_total{outcome=\"committed\",sink=\"events_to_pg\"}") >= 1.0, "{metrics}");
    assert!(value("weir_sink_rows_total{sink=\"events_to_pg\"}") >= 1.0, "{metrics}");
    assert_eq!(value("weir_sink_checkpoints_pending{sink=\"events_to_pg\"}"), 0.0, "{metrics}");
}

/// A sink over a view larger than an outbox part (65,536 changes) writes and delivers it part
/// by part: the view's rows when the sink is made, an INSERT of more than a part within one
/// checkpoint interval, and changes across a SIGKILL. The table equals the view, each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_over_a_large_view_delivers_it_part_by_part() {
    let (pg, jdbc) = database("large").await;
    pg.batch_execute("CREATE TABLE big (k BIGINT PRIMARY KEY, v BIGINT)").await.unwrap();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE src (k BIGINT PRIMARY KEY, v BIGINT);
         INSERT INTO src SELECT x, x * 2 FROM generate_series(1, 200000) AS t(x);
         CREATE MATERIALIZED VIEW big AS SELECT k, v FROM src;
         CREATE SINK to_pg FROM big WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'big', primary_key = 'k');
         INSERT INTO src SELECT x, x * 2 FROM generate_series(200001, 350000) AS t(x);
         UPDATE src SET v = 0 WHERE k % 10 = 0;"
    ))
    .await
    .unwrap();
    c = server.sigkill_and_reconnect().await;
    c.batch_execute("DELETE FROM src WHERE k % 7 = 0; FLUSH").await.unwrap();
    let view = rows(&c, "SELECT count(*), sum(v), sum(k) FROM big").await;
    assert_eq!(view, ["300000|94500000000|52500000000"], "the view");
    let table = rows_eventually(&pg, "SELECT count(*), sum(v), sum(k) FROM big", &view, Duration::from_secs(60)).await;
    assert_eq!(table, view, "the table equals the view");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_sink_refuses_what_it_cannot_deliver() {
    let (_pg, jdbc) = database("refusals").await;
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT PRIMARY KEY, v INT); CREATE MATERIALIZED VIEW v AS SELECT k, sum(v) AS s FROM t GROUP BY k",
    )
    .await
    .unwrap();
    assert_sqlstate(&c, &format!(
            "CREATE SINK s FROM v WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'nope', primary_key = 'k')"
        ), "42P01").await;
    assert_sqlstate(
        &c,
        &format!("CREATE SINK s FROM v WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 't')"),
        "0A000",
    )
    .await;
    for shards in ["0", "257", "two"] {
        assert_sqlstate(
            &c,
            &format!(
                "CREATE SINK s FROM v WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 't', primary_key = 'k', sink.parallelism = '{shards}')"
            ),
            "22023",
        )
        .await;
    }
    assert_sqlstate(
        &c,
        &format!("CREATE SINK s FROM t WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 't')"),
        "42809",
    )
    .await;
    assert_sqlstate(&c, "CREATE SINK s FROM v WITH (connector = 'nope')", "0A000").await;
    // Nothing was left behind, and the view still answers.
    assert!(rows(&c, "SHOW SINKS").await.is_empty());
    assert_eq!(rows(&c, "SELECT count(*) FROM v").await, ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_create_makes_the_table_with_the_views_types_and_key() {
    let (pg, jdbc) = database("autocreate").await;
    let server = TestServer::start_with(&["--checkpoint-interval", "200ms"]);
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE t (k INT PRIMARY KEY, name VARCHAR, amount DECIMAL(10, 2), at TIMESTAMP, ok BOOLEAN, x DOUBLE);
         INSERT INTO t VALUES (1, 'a', 1.50, '2026-01-02 03:04:05', true, 0.5), (2, NULL, NULL, NULL, NULL, NULL);
         CREATE MATERIALIZED VIEW v AS SELECT k, name, amount, at, ok, x, k::BIGINT * 10 AS big FROM t;
         CREATE SINK s FROM v WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'made', primary_key = 'k', auto_create = 'true');"
    ))
    .await
    .unwrap();
    let columns = rows(
        &pg,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = 'made'",
    )
    .await;
    assert_eq!(
        columns,
        [
            "amount|numeric|YES",
            "at|timestamp without time zone|YES",
            "big|bigint|YES",
            "k|integer|NO",
            "name|character varying|YES",
            "ok|boolean|YES",
            "x|double precision|YES"
        ]
    );
    let key =
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
               WHERE i.indrelid = 'made'::regclass AND i.indisprimary";
    assert_eq!(rows(&pg, key).await, ["k"]);
    c.batch_execute("UPDATE t SET name = 'b' WHERE k = 2; DELETE FROM t WHERE k = 1").await.unwrap();
    let want = ["2|b|NULL|20".to_string()];
    let made = rows_eventually(&pg, "SELECT k, name, amount, big FROM made", &want, Duration::from_secs(20)).await;
    assert_eq!(made, want);
    assert_sqlstate(&c, &format!(
            "CREATE SINK s2 FROM v WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'x', primary_key = 'k', auto_create = 'yes')"
        ), "22023").await;
}

/// Values arrive as they are, whether a part's rows go by INSERT statements (a few) or by COPY
/// (1,000 and more, into the table or, with a key, through a temporary table): text with
/// quotes, backslashes, tabs, newlines and non-ASCII characters, NULLs, bytes, timestamps and
/// decimals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_arrive_as_they_are_by_insert_and_by_copy() {
    type Row = (i64, Option<String>, Option<Vec<u8>>);
    async fn read(client: &tokio_postgres::Client, sql: &str) -> Vec<Row> {
        let rows = client.query(sql, &[]).await.unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
    }
    let (pg, jdbc) = database("copyvalues").await;
    let server = TestServer::start_with(&["--checkpoint-interval", "200ms"]);
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE ev (id BIGINT, s VARCHAR, b BYTEA, at TIMESTAMP, amount DECIMAL(10, 2)) APPEND ONLY;
         CREATE TABLE kv (id BIGINT PRIMARY KEY, s VARCHAR, b BYTEA);
         CREATE SINK ev_out AS SELECT id, s, b, at, amount FROM ev WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'ev', auto_create = 'true');
         CREATE MATERIALIZED VIEW kv_view AS SELECT id, s, b FROM kv;
         CREATE SINK kv_out FROM kv_view WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'kv', primary_key = 'id', auto_create = 'true');"
    ))
    .await
    .unwrap();
    let awkward =
        ["plain", "it's", "back\\slash", "tab\there", "new\nline", "carriage\rreturn", "\\N", "ünïcødé ✓", ""];
    let mut id = 0i64;
    let mut statements = Vec::new();
    // Three parts' worth by COPY (1,500 rows in one statement), then three rows by INSERT.
    for batch in [1500usize, 3] {
        let mut values = Vec::new();
        for _ in 0..batch {
            let s = awkward[id as usize % awkward.len()];
            let s = if id % 11 == 0 { "NULL".to_string() } else { format!("'{}'", s.replace('\'', "''")) };
            let b = if id % 13 == 0 { "NULL".to_string() } else { format!("'\\x{:02x}00ff5c09'::BYTEA", id % 256) };
            values.push(format!(
                "({id}, {s}, {b}, TIMESTAMP '2026-01-02 03:04:05.123456' + INTERVAL '{id}' SECOND, {id}.25)"
            ));
            id += 1;
        }
        statements.push(values.join(", "));
    }
    let mut from = 0;
    for (values, rows) in statements.iter().zip([1500, 3]) {
        c.batch_execute(&format!("INSERT INTO ev VALUES {values}")).await.unwrap();
        c.batch_execute(&format!("INSERT INTO kv SELECT id, s, b FROM ev WHERE id >= {from} AND id < {}", from + rows))
            .await
            .unwrap();
        from += rows;
    }
    c.batch_execute("FLUSH").await.unwrap();
    let want = read(&c, "SELECT id, s, b FROM ev ORDER BY id").await;
    assert_eq!(want.len(), 1503);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rows(&pg, "SELECT count(*) FROM ev").await != ["1503"]
        || rows(&pg, "SELECT count(*) FROM kv").await != ["1503"]
    {
        assert!(std::time::Instant::now() < deadline, "the sinks did not deliver every row");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(read(&pg, "SELECT id, s, b FROM ev ORDER BY id").await, want, "append-only");
    assert_eq!(read(&pg, "SELECT id, s, b FROM kv ORDER BY id").await, want, "by key");
    let text = "SELECT id, at::TEXT, amount::TEXT FROM ev WHERE id IN (0, 7, 1502)";
    assert_eq!(
        rows(&pg, text).await,
        [
            "0|2026-01-02 03:04:05.123456|0.25",
            "1502|2026-01-02 03:29:07.123456|1502.25",
            "7|2026-01-02 03:04:12.123456|7.25"
        ],
        "timestamps and decimals"
    );
}

/// TLS to PostgreSQL (`ssl = on`, scripts/pg-server.sh; its role weir_tls may connect only over
/// TLS): `verify-full` against the test CA and `require` deliver; `disable` is turned away by the
/// server, a CA that did not issue its certificate by Weir; neither error shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_connects_over_tls_as_sslmode_says() {
    let (pg, jdbc) = database("tls").await;
    pg.batch_execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'weir_tls') THEN \
         CREATE ROLE weir_tls LOGIN SUPERUSER PASSWORD 'tls-secret'; END IF; END $$;
         CREATE TABLE per_group (g INT PRIMARY KEY, n BIGINT)",
    )
    .await
    .unwrap();
    let base = jdbc.split('?').next().unwrap().to_string();
    let url = |params: &str| format!("{base}?user=weir_tls&password=tls-secret&{params}");
    let ca = common::postgres_ca();
    let other_ca = common::test_certs().join("other_ca.pem").display().to_string();
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT PRIMARY KEY, g INT);
         INSERT INTO t VALUES (1, 1), (2, 1), (3, 2);
         CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n FROM t GROUP BY g;",
    )
    .await
    .unwrap();
    let sink = |name: &str, url: &str| {
        format!(
            "CREATE SINK {name} FROM per_group WITH (connector = 'jdbc', jdbc.url = '{url}', \
             table.name = 'per_group', primary_key = 'g')"
        )
    };
    for (sslmode, code) in
        [("sslmode=disable", "08001"), (&*format!("sslmode=verify-full&sslrootcert={other_ca}"), "08001")]
    {
        let e = c.batch_execute(&sink("refused", &url(sslmode))).await.expect_err(sslmode);
        let db = e.as_db_error().unwrap();
        assert_eq!(db.code().code(), code, "{sslmode}: {}", db.message());
        assert!(!db.message().contains("tls-secret"), "{}", db.message());
    }
    c.batch_execute(&sink("verified", &url(&format!("sslmode=verify-full&sslrootcert={ca}")))).await.unwrap();
    let shown = rows(&c, "SHOW CREATE SINK verified").await.join("\n");
    assert!(shown.contains("password=[redacted]&sslmode=verify-full") && !shown.contains("tls-secret"), "{shown}");
    let want = vec!["1|2".to_string(), "2|1".to_string()];
    let got = rows_eventually(&pg, "SELECT g, n FROM per_group", &want, Duration::from_secs(30)).await;
    assert_eq!(got, want);
    c.batch_execute("DROP SINK verified").await.unwrap();
    c.batch_execute(&sink("unverified", &url("sslmode=require"))).await.unwrap();
    c.batch_execute("INSERT INTO t VALUES (4, 2)").await.unwrap();
    let want = vec!["1|2".to_string(), "2|2".to_string()];
    let got = rows_eventually(&pg, "SELECT g, n FROM per_group", &want, Duration::from_secs(30)).await;
    assert_eq!(got, want);
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

/// A sink whose target stalls for a minute (its table locked in PostgreSQL by another session)
/// holds back only its own deliveries: the other view's sink delivers meanwhile, checkpoints
/// complete, writes are acknowledged at once; the stalled sink's changes wait in its outbox in
/// the store (part by part, not in memory), and once the target is free it catches up, each row
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_sink_target_holds_back_only_its_own_sink() {
    let (pg, jdbc) = database("stalls").await;
    pg.batch_execute(
        "CREATE TABLE slow_events (id BIGINT, g INT, pad TEXT);
         CREATE TABLE fast_counts (g INT PRIMARY KEY, n BIGINT);",
    )
    .await
    .unwrap();
    let server = TestServer::start_with(&["--checkpoint-interval", "500ms"]);
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE ev (id BIGINT, g INT, pad TEXT) APPEND ONLY;
         CREATE MATERIALIZED VIEW counts AS SELECT g, count(*) AS n FROM ev GROUP BY g;
         CREATE SINK slow AS SELECT id, g, pad FROM ev WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'slow_events');
         CREATE SINK fast FROM counts WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = 'fast_counts', primary_key = 'g');"
    ))
    .await
    .unwrap();
    // Another session holds the slow sink's table locked: its inserts wait.
    let (host_db, _) = jdbc.trim_start_matches("jdbc:postgresql://").split_once('?').unwrap();
    let locker = common::connect(&format!("postgresql://postgres@{host_db}")).await;
    locker.batch_execute("BEGIN; LOCK TABLE slow_events IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let stalled_at =
        c.query_one("SELECT CAST(CAST(now() AS TIMESTAMP) AS BIGINT)", &[]).await.unwrap().get::<_, i64>(0);
    let rss_before = rss_mib(server.pid());
    let started = Instant::now();
    let (mut next, mut slowest) = (0i64, Duration::ZERO);
    let pad = "x".repeat(1000);
    while started.elapsed() < Duration::from_secs(60) {
        let values: Vec<String> = (next..next + 200).map(|id| format!("({id}, {}, '{pad}')", id % 10)).collect();
        let insert = Instant::now();
        c.batch_execute(&format!("INSERT INTO ev VALUES {}", values.join(", "))).await.unwrap();
        slowest = slowest.max(insert.elapsed());
        next += 200;
    }
    let rss_stalled = rss_mib(server.pid());
    eprintln!("{next} rows of 1 kB in 60 s with the sink stalled: RSS {rss_before} -> {rss_stalled} MiB");
    assert!(slowest < Duration::from_secs(10), "an insert waited {slowest:?} for the stalled sink");
    // The changes held back are not held in memory: the server grew by less than they weigh.
    let held_back_mib = (next as u64 * 1000) >> 20;
    assert!(rss_stalled.saturating_sub(rss_before) < held_back_mib, "{held_back_mib} MiB held back in memory");
    // The other sink delivered meanwhile, and checkpoints completed.
    c.batch_execute("FLUSH").await.unwrap();
    let counts = rows(&c, "SELECT g, n FROM counts").await;
    assert_eq!(rows_eventually(&pg, "SELECT g, n FROM fast_counts", &counts, Duration::from_secs(30)).await, counts);
    let completed: i64 = c
        .query_one(
            "SELECT count(*) FROM weir_catalog.checkpoints WHERE status = 'complete' AND CAST(started_at AS BIGINT) > $1",
            &[&(stalled_at / 1000)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(completed > 0, "no checkpoint completed while a sink's target stalled");
    let waiting: i64 = locker.query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[]).await.unwrap().get(0);
    assert!(waiting > 0, "the slow sink is not waiting on its target");
    // Only the slow sink has checkpoints to deliver.
    let pending = |sink: &str| -> i64 {
        let metrics = server.metrics_text();
        let line = format!("weir_sink_checkpoints_pending{{sink=\"{sink}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(line.as_str())).map_or(0, |v| v.trim().parse().unwrap())
    };
    assert!(pending("slow") > 0, "the stalled sink has nothing pending");
    let fast_deadline = Instant::now() + Duration::from_secs(30);
    while pending("fast") > 1 {
        assert!(Instant::now() < fast_deadline, "the other sink fell behind: {} pending", pending("fast"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The target is free: the slow sink catches up, every row exactly once.
    locker.batch_execute("COMMIT").await.unwrap();
    let want = vec![format!("{next}|{next}")];
    let got =
        rows_eventually(&pg, "SELECT count(*), count(DISTINCT id) FROM slow_events", &want, Duration::from_secs(120))
            .await;
    assert_eq!(got, want);
}

/// A sink's marker (the epoch it delivered last) is its own: a server started on a new data
/// directory (a redeployment, or a second server) whose sink has the same name and catalog id
/// delivers from its first epoch. The marker once went by the sink's id alone, so the new sink
/// took the old one's later epochs as delivered and dropped its first rows (found by the soak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_of_a_new_data_directory_delivers_from_its_first_epoch() {
    let (pg, jdbc) = database("redeployed").await;
    pg.batch_execute(
        "CREATE TABLE first_out (id BIGINT PRIMARY KEY); CREATE TABLE second_out (id BIGINT PRIMARY KEY);",
    )
    .await
    .unwrap();
    let ddl = |table: &str| {
        format!(
            "CREATE TABLE ev (id BIGINT PRIMARY KEY); CREATE MATERIALIZED VIEW ids AS SELECT id FROM ev;
             CREATE SINK out FROM ids WITH (connector = 'jdbc', jdbc.url = '{jdbc}', table.name = '{table}', primary_key = 'id');"
        )
    };
    let args = ["--checkpoint-interval", "100ms", "--barrier-interval-ms", "20"];
    let want = |ids: &[i64]| ids.iter().map(|i| i.to_string()).collect::<Vec<_>>();
    {
        let first = TestServer::start_with(&args);
        let c = first.connect().await;
        c.batch_execute(&ddl("first_out")).await.unwrap();
        c.batch_execute("INSERT INTO ev VALUES (1), (2)").await.unwrap();
        rows_eventually(&pg, "SELECT id FROM first_out ORDER BY id", &want(&[1, 2]), Duration::from_secs(30)).await;
        // Its epochs go on well past where the second server's will be when it delivers.
        tokio::time::sleep(Duration::from_secs(4)).await;
        c.batch_execute("INSERT INTO ev VALUES (3)").await.unwrap();
        rows_eventually(&pg, "SELECT id FROM first_out ORDER BY id", &want(&[1, 2, 3]), Duration::from_secs(30)).await;
    }
    let second = TestServer::start_with(&args);
    let c = second.connect().await;
    c.batch_execute(&ddl("second_out")).await.unwrap();
    c.batch_execute("INSERT INTO ev VALUES (10), (20)").await.unwrap();
    let got =
        rows_eventually(&pg, "SELECT id FROM second_out ORDER BY id", &want(&[10, 20]), Duration::from_secs(30)).await;
    assert_eq!(got, want(&[10, 20]), "the second server's sink delivered its first rows");
    let markers = rows(&pg, "SELECT count(*) FROM weir_sink_marker").await;
    assert_eq!(markers, ["2"], "one marker for each sink");
}
