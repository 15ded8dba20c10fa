//! The Postgres wire protocol as drivers use it: extended protocol with binary results for every
//! supported type, prepared statements with parameters, cancel, SSL negotiation, protocol
//! garbage, many concurrent sessions, authentication and the metrics endpoint.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use common::TestServer;
use rust_decimal::Decimal;
use tokio_postgres::types::{FromSql, Type};

/// A Postgres interval in its binary form.
#[derive(Debug, PartialEq)]
struct Interval {
    micros: i64,
    days: i32,
    months: i32,
}

impl<'a> FromSql<'a> for Interval {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Interval {
            micros: i64::from_be_bytes(raw[0..8].try_into()?),
            days: i32::from_be_bytes(raw[8..12].try_into()?),
            months: i32::from_be_bytes(raw[12..16].try_into()?),
        })
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_results_for_every_type() {
    let server = TestServer::start();
    let c = server.connect().await;
    // tokio-postgres prepares every query and asks for binary results.
    let row = c
        .query_one(
            "SELECT true AS b, CAST(2 AS SMALLINT) AS i2, CAST(4 AS INT) AS i4, CAST(8 AS BIGINT) AS i8,
                    CAST(1.5 AS REAL) AS f4, CAST(2.25 AS DOUBLE PRECISION) AS f8,
                    CAST('12.34' AS NUMERIC(10, 2)) AS num, 'text' AS t, CAST('vc' AS VARCHAR) AS vc,
                    decode('0102', 'hex') AS by, DATE '2026-01-02' AS d, TIME '03:04:05' AS tm,
                    TIMESTAMP '2026-01-02 03:04:05.123456' AS ts,
                    CAST('2026-01-02 03:04:05+00' AS TIMESTAMPTZ) AS tstz,
                    INTERVAL '1 month 2 days 3 seconds' AS iv",
            &[],
        )
        .await
        .unwrap();
    let types: Vec<Type> = row.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(
        types,
        vec![
            Type::BOOL,
            Type::INT2,
            Type::INT4,
            Type::INT8,
            Type::FLOAT4,
            Type::FLOAT8,
            Type::NUMERIC,
            Type::TEXT,
            Type::TEXT,
            Type::BYTEA,
            Type::DATE,
            Type::TIME,
            Type::TIMESTAMP,
            Type::TIMESTAMPTZ,
            Type::INTERVAL
        ]
    );
    assert!(row.get::<_, bool>("b"));
    assert_eq!(row.get::<_, i16>("i2"), 2);
    assert_eq!(row.get::<_, i32>("i4"), 4);
    assert_eq!(row.get::<_, i64>("i8"), 8);
    assert_eq!(row.get::<_, f32>("f4"), 1.5);
    assert_eq!(row.get::<_, f64>("f8"), 2.25);
    assert_eq!(row.get::<_, Decimal>("num"), Decimal::new(1234, 2));
    assert_eq!(row.get::<_, &str>("t"), "text");
    assert_eq!(row.get::<_, &str>("vc"), "vc");
    assert_eq!(row.get::<_, Vec<u8>>("by"), vec![1u8, 2]);
    assert_eq!(row.get::<_, NaiveDate>("d"), NaiveDate::from_ymd_opt(2026, 1, 2).unwrap());
    assert_eq!(row.get::<_, NaiveTime>("tm"), NaiveTime::from_hms_opt(3, 4, 5).unwrap());
    assert_eq!(
        row.get::<_, NaiveDateTime>("ts"),
        NaiveDate::from_ymd_opt(2026, 1, 2).unwrap().and_hms_micro_opt(3, 4, 5, 123456).unwrap()
    );
    assert_eq!(row.get::<_, chrono::DateTime<Utc>>("tstz"), Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap());
    assert_eq!(row.get::<_, Interval>("iv"), Interval { micros: 3_000_000, days: 2, months: 1 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_with_parameters() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE p (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE PRECISION, at TIMESTAMP)")
        .await
        .unwrap();
    let insert = c.prepare("INSERT INTO p VALUES ($1, $2, $3, $4)").await.unwrap();
    assert_eq!(insert.params(), &[Type::INT8, Type::TEXT, Type::FLOAT8, Type::TIMESTAMP]);
    let at = NaiveDate::from_ymd_opt(2026, 3, 4).unwrap().and_hms_opt(5, 6, 7).unwrap();
    for i in 0..10i64 {
        let n = c.execute(&insert, &[&i, &format!("n{i}"), &(i as f64 / 2.0), &at]).await.unwrap();
        assert_eq!(n, 1);
    }
    let select = c.prepare("SELECT name, score FROM p WHERE id >= $1 AND name <> $2 ORDER BY id").await.unwrap();
    assert_eq!(select.params(), &[Type::INT8, Type::TEXT]);
    assert_eq!(select.columns().len(), 2);
    let rows = c.query(&select, &[&7i64, &"n8"]).await.unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(names, vec!["n7", "n9"]);
    // The same statement again, with other values.
    let rows = c.query(&select, &[&0i64, &"x"]).await.unwrap();
    assert_eq!(rows.len(), 10);
    // UPDATE and DELETE with parameters report their counts.
    assert_eq!(c.execute("UPDATE p SET score = $1 WHERE id < $2", &[&0.0f64, &5i64]).await.unwrap(), 5);
    assert_eq!(c.execute("DELETE FROM p WHERE id = $1", &[&9i64]).await.unwrap(), 1);
    let total: f64 = c.query_one("SELECT sum(score) FROM p", &[]).await.unwrap().get(0);
    assert_eq!(total, (5..9).map(|i| i as f64 / 2.0).sum::<f64>());
    // NULL parameters.
    c.execute("INSERT INTO p (id, name) VALUES ($1, $2)", &[&100i64, &None::<String>]).await.unwrap();
    let name: Option<String> = c.query_one("SELECT name FROM p WHERE id = 100", &[]).await.unwrap().get(0);
    assert_eq!(name, None);
    // Into a table with a processing-time column, the parameters are for the other columns.
    c.batch_execute("CREATE TABLE clicks (page TEXT, at AS PROCTIME(), n BIGINT) APPEND ONLY").await.unwrap();
    let click = c.prepare("INSERT INTO clicks VALUES ($1, $2)").await.unwrap();
    assert_eq!(click.params(), &[Type::TEXT, Type::INT8]);
    c.execute(&click, &[&"home", &3i64]).await.unwrap();
    let row = c.query_one("SELECT page, n, at IS NOT NULL FROM clicks", &[]).await.unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, i64>(1), row.get::<_, bool>(2)), ("home".into(), 3, true));
    // A parameter cast to text (written as Postgres writes it), with a key found and with none
    // (an empty batch).
    let labelled = c.prepare("SELECT 'score=' || $2::FLOAT8 FROM p WHERE id = $1").await.unwrap();
    let row = c.query_one(&labelled, &[&5i64, &1.5f64]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "score=1.5");
    assert!(c.query(&labelled, &[&12345i64, &1e20f64]).await.unwrap().is_empty());
    // Errors in the extended protocol carry SQLSTATEs too, and the session goes on.
    let err = c.prepare("SELECT * FROM nope").await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "42P01");
    let err = c.query("SELECT 1 / $1", &[&0i64]).await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "22012");
    // A parameter no Bind can carry (its count is an Int16) is refused as Postgres refuses $0;
    // it once made the server allocate a slot per number up to it, and abort (found by fuzzing).
    for (sql, code) in [("SELECT $7580736854775807 - 2", "42P02"), ("SELECT $70000", "42P02"), ("SELECT $0", "42601")] {
        let err = c.prepare(sql).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some(code), "{sql}: {err:?}");
    }
    c.query_one("SELECT 1", &[]).await.unwrap();
}

/// A connection keeps the RowDescription of a result it sends again (by the plan's result
/// schema and the format): a statement described and run many times is described right each
/// time, in text and in binary, and after its table is made again with another column type the
/// same text is described and answered in the new type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_descriptions_kept_follow_format_and_ddl() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE kept (k INT PRIMARY KEY, v INT); INSERT INTO kept VALUES (1, 10)").await.unwrap();
    let sql = "SELECT v FROM kept WHERE k = $1";
    for _ in 0..3 {
        let select = c.prepare(sql).await.unwrap();
        assert_eq!(select.columns()[0].type_(), &Type::INT4);
        assert_eq!(c.query_one(&select, &[&1i32]).await.unwrap().get::<_, i32>(0), 10);
        // In text (the simple protocol), then in binary again.
        let text = c.simple_query("SELECT v FROM kept WHERE k = 1").await.unwrap();
        let value = text.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some("10"));
    }
    c.batch_execute(
        "DROP TABLE kept; CREATE TABLE kept (k INT PRIMARY KEY, v TEXT); INSERT INTO kept VALUES (1, 'ten')",
    )
    .await
    .unwrap();
    let select = c.prepare(sql).await.unwrap();
    assert_eq!(select.columns()[0].type_(), &Type::TEXT);
    assert_eq!(c.query_one(&select, &[&1i32]).await.unwrap().get::<_, String>(0), "ten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portals_fetch_in_pieces() {
    let server = TestServer::start();
    let mut c = server.connect().await;
    c.batch_execute("CREATE TABLE big AS SELECT * FROM generate_series(1, 1000) AS g(x)").await.unwrap();
    let tx = c.transaction().await.unwrap();
    let stmt = tx.prepare("SELECT x FROM big ORDER BY x").await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut seen = 0i64;
    loop {
        let rows = tx.query_portal(&portal, 300).await.unwrap();
        if rows.is_empty() {
            break;
        }
        for r in rows {
            seen += 1;
            assert_eq!(r.get::<_, i64>(0), seen);
        }
    }
    assert_eq!(seen, 1000);
    tx.commit().await.unwrap();
}

/// One Execute returns at most 65,536 rows (a client asking for two billion once made the server
/// allocate for them and abort: found by fuzzing). A larger request is suspended there, as the
/// protocol allows, and the next Execute goes on; asking for every row (0) still gets them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_asking_for_more_rows_than_the_cap_is_suspended_and_goes_on() {
    let server = TestServer::start();
    let mut c = server.connect().await;
    c.batch_execute("CREATE TABLE big AS SELECT * FROM generate_series(1, 150000) AS g(x)").await.unwrap();
    let tx = c.transaction().await.unwrap();
    let stmt = tx.prepare("SELECT x FROM big ORDER BY x").await.unwrap();
    let portal = tx.bind(&stmt, &[]).await.unwrap();
    let mut pieces = Vec::new();
    let mut seen = 0i64;
    loop {
        let rows = tx.query_portal(&portal, i32::MAX).await.unwrap();
        if rows.is_empty() {
            break;
        }
        pieces.push(rows.len());
        for r in rows {
            seen += 1;
            assert_eq!(r.get::<_, i64>(0), seen);
        }
    }
    assert_eq!(pieces, vec![65_536, 65_536, 18_928]);
    let all = tx.query(&stmt, &[]).await.unwrap();
    assert_eq!(all.len(), 150_000, "max_rows 0: every row");
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_query() {
    let server = TestServer::start();
    let c = server.connect().await;
    let token = c.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    });
    let started = std::time::Instant::now();
    let err = c
        .simple_query("SELECT count(*) FROM generate_series(1, 2000000000) AS g(x) WHERE x % 7 = 3")
        .await
        .unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.code().unwrap().code(), "57014", "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    c.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_is_refused_cleanly_without_tls_config() {
    let server = TestServer::start();
    // Raw SSLRequest: the server must answer 'N' and then speak plain protocol.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], b'N');
    // A client that requires TLS gets an error, not a hang.
    let res = tokio_postgres::connect(&format!("{} sslmode=require", server.conn_str()), tokio_postgres::NoTls).await;
    assert!(res.is_err());
    server.connect().await.query_one("SELECT 1", &[]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_abrupt_disconnects_do_not_hurt_other_sessions() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE g (x INT)").await.unwrap();
    // Garbage instead of a startup message.
    for garbage in
        [&b"GET / HTTP/1.1\r\n\r\n"[..], &[0xff; 64][..], &[0, 0, 0, 3][..], &[0, 0, 0x7f, 0xff, 0, 3, 0, 0][..]]
    {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let _ = s.write_all(garbage);
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
    }
    // A client that vanishes in the middle of a query.
    {
        let (client, connection) = tokio_postgres::connect(&server.conn_str(), tokio_postgres::NoTls).await.unwrap();
        let conn = tokio::spawn(connection);
        let q = tokio::spawn(async move {
            client.simple_query("SELECT count(*) FROM generate_series(1, 200000000) AS g(x)").await
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        conn.abort();
        q.abort();
    }
    // Garbage after a good startup: an unknown message type.
    {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut startup = Vec::new();
        let params = b"user\0root\0database\0dev\0\0";
        startup.extend_from_slice(&((8 + params.len()) as u32).to_be_bytes());
        startup.extend_from_slice(&196608u32.to_be_bytes());
        startup.extend_from_slice(params);
        s.write_all(&startup).unwrap();
        s.write_all(&[b'~', 0, 0, 0, 4]).unwrap();
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
    }
    c.batch_execute("INSERT INTO g VALUES (1)").await.unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM g", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
    server.connect().await.query_one("SELECT 1", &[]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_sessions() {
    let server = TestServer::start();
    server.connect().await.batch_execute("CREATE TABLE c (k INT PRIMARY KEY, s INT)").await.unwrap();
    let mut tasks = Vec::new();
    for session in 0..32 {
        let conn = server.conn_str();
        tasks.push(tokio::spawn(async move {
            let client = common::connect(&conn).await;
            for i in 0..10 {
                client.execute("INSERT INTO c VALUES ($1, $2)", &[&(session * 100 + i), &session]).await.unwrap();
            }
            // Each session sees at least its own rows.
            let n: i64 = client.query_one("SELECT count(*) FROM c WHERE s = $1", &[&session]).await.unwrap().get(0);
            assert_eq!(n, 10);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n: i64 = server.connect().await.query_one("SELECT count(*) FROM c", &[]).await.unwrap().get(0);
    assert_eq!(n, 320);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_lose_nothing() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE counter (k INT PRIMARY KEY, n BIGINT); INSERT INTO counter VALUES (1, 0);")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let conn = server.conn_str();
        tasks.push(tokio::spawn(async move {
            let client = common::connect(&conn).await;
            for _ in 0..25 {
                client.simple_query("UPDATE counter SET n = n + 1 WHERE k = 1").await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n: i64 = c.query_one("SELECT n FROM counter", &[]).await.unwrap().get(0);
    assert_eq!(n, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_and_password_authentication() {
    for method in ["scram", "password"] {
        let server = TestServer::start_with_config(
            &format!("[auth]\nmethod = \"{method}\"\n[[auth.users]]\nname = \"alice\"\npassword = \"s3cret\"\n"),
            &[],
        );
        let good = format!("host=127.0.0.1 port={} user=alice password=s3cret dbname=dev", server.port);
        let client = common::connect(&good).await;
        let who: String = client.query_one("SELECT current_user", &[]).await.unwrap().get(0);
        assert_eq!(who, "alice");
        let bad = format!("host=127.0.0.1 port={} user=alice password=wrong dbname=dev", server.port);
        let err = tokio_postgres::connect(&bad, tokio_postgres::NoTls).await.err().expect("wrong password refused");
        assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{method}: {err}");
        let nobody = format!("host=127.0.0.1 port={} user=mallory password=s3cret dbname=dev", server.port);
        assert!(tokio_postgres::connect(&nobody, tokio_postgres::NoTls).await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_database_is_refused() {
    let server = TestServer::start();
    let err = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=root dbname=other", server.port),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(err.code().map(|c| c.code()), Some("3D000"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_prometheus_text() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.simple_query("SELECT 1").await.unwrap();
    let _ = c.simple_query("SELECT * FROM nope").await;
    let body = server.metrics_text();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("weir_connections_total"), "{body}");
    assert!(body.contains("weir_errors_total{sqlstate=\"42P01\"} 1"), "{body}");
    assert!(body.contains("weir_statement_duration_seconds_count"), "{body}");
    // Streaming metrics appear once a view runs.
    c.batch_execute("CREATE TABLE m (x INT); CREATE MATERIALIZED VIEW mv AS SELECT x FROM m WHERE x > 1; INSERT INTO m VALUES (1), (2); FLUSH;").await.unwrap();
    let body = server.metrics_text();
    assert!(body.contains("weir_operator_rows_total{direction=\"in\",operator=\"1:Filter\",view=\"mv\"} 2"), "{body}");
    assert!(body.contains("weir_operator_rows_total{direction=\"out\",operator=\"1:Filter\",view=\"mv\"} 1"), "{body}");
    assert!(body.contains("weir_barrier_latency_seconds_count{view=\"mv\"}"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_cancels_long_statements() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("SET statement_timeout = '300ms'").await.unwrap();
    let started = std::time::Instant::now();
    let err = c
        .simple_query("SELECT count(*) FROM generate_series(1, 2000000000) AS g(x) WHERE x % 7 = 3")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "57014", "{err}");
    assert!(err.as_db_error().unwrap().message().contains("statement timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    c.batch_execute("SET statement_timeout = 0").await.unwrap();
    c.simple_query("SELECT count(*) FROM generate_series(1, 1000)").await.unwrap();
}

/// Result columns are named as Postgres names them, in RowDescription for the simple and the
/// extended protocol, and two columns may share a name (issue 18, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_have_postgres_names_and_may_repeat() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE t (k INT, v INT); INSERT INTO t VALUES (1, 10), (2, 20);
             CREATE MATERIALIZED VIEW per_t AS SELECT count(*), sum(v), max(t.v) AS top FROM t;
             FLUSH;",
        )
        .await
        .unwrap();
    let names = |columns: &[tokio_postgres::Column]| columns.iter().map(|c| c.name().to_string()).collect::<Vec<_>>();
    let cases: &[(&str, &[&str])] = &[
        (
            "SELECT count(*), sum(v), t.k, 1, NULL::int, k::text, CASE WHEN k > 1 THEN 1 END FROM t GROUP BY k",
            &["count", "sum", "k", "?column?", "int4", "k", "case"],
        ),
        ("SELECT 1 AS a, 2 AS a", &["a", "a"]),
        ("SELECT current_schema(), current_schema", &["current_schema", "current_schema"]),
        ("SELECT NULL::int, NULL::text", &["int4", "text"]),
        // A view's columns are named the same way, so they can be selected by name.
        ("SELECT count, sum, top FROM per_t", &["count", "sum", "top"]),
        // JSON and bytea casts are named by what they cast, else by the type.
        ("SELECT k::text::jsonb, '{}'::jsonb, '\\x41'::bytea FROM t", &["k", "jsonb", "bytea"]),
    ];
    // Window ranks are bigint (OID 20), as in Postgres, not Arrow's unsigned numbers (numeric).
    let ranked =
        client.prepare("SELECT row_number() OVER (ORDER BY k) AS rn, rank() OVER (ORDER BY v) FROM t").await.unwrap();
    assert!(ranked.columns().iter().all(|c| c.type_() == &Type::INT8), "{:?}", ranked.columns());
    let first: i64 = client.query(&ranked, &[]).await.unwrap()[0].get(0);
    assert_eq!(first, 1);
    for (sql, expected) in cases {
        // Extended protocol: Parse / Describe / Bind / Execute.
        let statement = client.prepare(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(names(statement.columns()), *expected, "{sql} (prepared)");
        let rows = client.query(&statement, &[]).await.unwrap();
        assert_eq!(names(rows[0].columns()), *expected, "{sql} (rows)");
        // Simple protocol.
        let messages = client.simple_query(sql).await.unwrap();
        let row = messages.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        });
        let simple: Vec<String> = row.unwrap().columns().iter().map(|c| c.name().to_string()).collect();
        assert_eq!(simple, *expected, "{sql} (simple)");
    }
    let rows = client.query("SELECT 1 AS a, 2 AS a", &[]).await.unwrap();
    // Integer literals are int4, as in Postgres.
    assert_eq!((rows[0].get::<_, i32>(0), rows[0].get::<_, i32>(1)), (1, 2));
    // A view may not have two columns of one name (42701), as in Postgres.
    let err = client.batch_execute("CREATE MATERIALIZED VIEW twice AS SELECT k AS a, v AS a FROM t").await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "42701");
}

/// RowDescription ties a result column taken unchanged from a relation to it (table OID as
/// pg_class has it, column number) and carries its declared type (`VARCHAR(5)` is varchar with
/// typmod 9, not text), as pgjdbc's ResultSetMetaData and Metabase read them (issue 18, item 6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_name_their_table_and_declared_type() {
    let mut server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer VARCHAR(5), note TEXT, amount NUMERIC(10,2));
             INSERT INTO orders VALUES (1, 'ann', 'x', 1.50), (2, 'bob', 'y', 2.25);
             CREATE MATERIALIZED VIEW per_customer AS SELECT customer, sum(amount) AS total FROM orders GROUP BY customer;
             CREATE VIEW named AS SELECT id, customer FROM orders;
             FLUSH;",
        )
        .await
        .unwrap();
    let oid = |name: &str| {
        let client = &client;
        let name = name.to_string();
        async move {
            let row = client
                .query_one("SELECT CAST(oid AS BIGINT) FROM pg_catalog.pg_class WHERE relname = $1", &[&name])
                .await
                .unwrap();
            row.get::<_, i64>(0) as u32
        }
    };
    let (orders, per_customer, named) = (oid("orders").await, oid("per_customer").await, oid("named").await);
    assert!(orders >= 16384 && orders != per_customer && per_customer != named, "{orders} {per_customer} {named}");
    // (name, table OID, column number, type) of each result column.
    let described = |statement: &tokio_postgres::Statement| {
        statement
            .columns()
            .iter()
            .map(|c| (c.name().to_string(), c.table_oid(), c.column_id(), c.type_().name().to_string()))
            .collect::<Vec<_>>()
    };
    let column = |name: &str, table: Option<u32>, attnum: Option<i16>, ty: &str| {
        (name.to_string(), table, attnum, ty.to_string())
    };
    let cases = [
        (
            "SELECT customer, id, amount, note, id + 1 AS next, upper(customer) FROM orders WHERE id > 0 ORDER BY id",
            vec![
                column("customer", Some(orders), Some(2), "varchar"),
                column("id", Some(orders), Some(1), "int8"),
                column("amount", Some(orders), Some(4), "numeric"),
                column("note", Some(orders), Some(3), "text"),
                column("next", None, None, "int8"),
                column("upper", None, None, "text"),
            ],
        ),
        (
            "SELECT o.customer AS who, p.total FROM orders o JOIN per_customer p ON o.customer = p.customer",
            vec![
                column("who", Some(orders), Some(2), "varchar"),
                column("total", Some(per_customer), Some(2), "numeric"),
            ],
        ),
        (
            "SELECT * FROM per_customer",
            vec![
                column("customer", Some(per_customer), Some(1), "varchar"),
                column("total", Some(per_customer), Some(2), "numeric"),
            ],
        ),
        // A plain view is its query: its columns are the table's, as Postgres says of them.
        (
            "SELECT customer, count(*) FROM named GROUP BY customer",
            vec![column("customer", Some(orders), Some(2), "varchar"), column("count", None, None, "int8")],
        ),
        ("SELECT 1 AS one", vec![column("one", None, None, "int4")]),
    ];
    for (sql, expected) in cases {
        let statement = client.prepare(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(described(&statement), expected, "{sql}");
        // The values arrive as the announced types, in binary.
        client.query(&statement, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let row = client.query_one("SELECT customer FROM orders WHERE id = 1", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "ann");
    // The declared length holds: a longer value is refused with 22001; spaces past it are cut.
    let err = client.execute("INSERT INTO orders VALUES (3, 'carolyn', 'z', 1)", &[]).await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "22001", "{err}");
    client.execute("INSERT INTO orders VALUES (3, 'carl    ', 'z', 1)", &[]).await.unwrap();
    let err = client.execute("UPDATE orders SET customer = 'toolong' WHERE id = 3", &[]).await.unwrap_err();
    assert_eq!(err.as_db_error().unwrap().code().code(), "22001", "{err}");
    let row = client.query_one("SELECT customer FROM orders WHERE id = 3", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "carl ");
    // OIDs are the relations' own: the same after a restart.
    drop(client);
    server.restart();
    let client = server.connect().await;
    let row = client
        .query_one("SELECT CAST(oid AS BIGINT) FROM pg_catalog.pg_class WHERE relname = 'orders'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0) as u32, orders);
    let statement = client.prepare("SELECT customer FROM orders").await.unwrap();
    assert_eq!(statement.columns()[0].table_oid(), Some(orders));
    assert_eq!(statement.columns()[0].type_(), &Type::VARCHAR);
}

/// COPY FROM STDIN in text and CSV, through tokio-postgres's copy API (the extended protocol)
/// and in pieces larger than a batch; a bad value fails the COPY with 22P02 and the connection
/// carries on (issue 18, item 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_loads_rows() {
    use futures::SinkExt;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE loaded (id BIGINT PRIMARY KEY, name TEXT, price DOUBLE PRECISION, at TIMESTAMP, d INTERVAL);
             CREATE MATERIALIZED VIEW loaded_total AS SELECT count(*) AS n, sum(price) AS total FROM loaded;",
        )
        .await
        .unwrap();
    // 200,000 rows of text format (over 1 MiB: several batches), sent in uneven pieces.
    let mut text = String::new();
    for i in 0..200_000 {
        let name = if i % 1000 == 0 { "\\N".to_string() } else { format!("n\\t{i}") };
        text.push_str(&format!("{i}\t{name}\t{}.5\t2026-01-01 00:00:{:02}\t1 day 02:03:04\n", i % 100, i % 60));
    }
    let sink = client.copy_in("COPY loaded FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    for piece in text.as_bytes().chunks(70_001) {
        sink.send(bytes::Bytes::copy_from_slice(piece)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), 200_000);
    let row = client.query_one("SELECT count(*), count(name), sum(price), max(d) FROM loaded", &[]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 200_000);
    assert_eq!(row.get::<_, i64>(1), 199_800);
    assert_eq!(row.get::<_, f64>(2), (0..200_000).map(|i| (i % 100) as f64 + 0.5).sum::<f64>());
    let name: String = client.query_one("SELECT name FROM loaded WHERE id = 7", &[]).await.unwrap().get(0);
    assert_eq!(name, "n\t7", "escapes undone");
    // CSV with a header, quotes, a NULL and a key already there (upserted).
    let csv =
        "id,name,price,at,d\n7,\"seven, again\",1,2026-01-02 00:00:00,P1D\n200000,,2,2026-01-02 00:00:00,00:00:01\n";
    let sink =
        client.copy_in("COPY loaded (id, name, price, at, d) FROM STDIN WITH (FORMAT csv, HEADER)").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(csv)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 2);
    let name: String = client.query_one("SELECT name FROM loaded WHERE id = 7", &[]).await.unwrap().get(0);
    assert_eq!(name, "seven, again");
    client.batch_execute("FLUSH").await.unwrap();
    let n: i64 = client.query_one("SELECT n FROM loaded_total", &[]).await.unwrap().get(0);
    assert_eq!(n, 200_001, "the view follows the COPY");
    // A value that is not of its column's type: 22P02, and the session goes on.
    let sink = client.copy_in("COPY loaded FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from("300000\tx\tnot a number\t2026-01-01 00:00:00\t1 day\n")).await.unwrap();
    let err = sink.finish().await.unwrap_err();
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("22P02"), "{err:?}");
    let n: i64 = client.query_one("SELECT count(*) FROM loaded", &[]).await.unwrap().get(0);
    assert_eq!(n, 200_001);
    // COPY into something that is not a table.
    let Err(err) = client.copy_in::<_, bytes::Bytes>("COPY loaded_total FROM STDIN").await else {
        panic!("COPY into a materialized view was accepted");
    };
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("42809"), "{err:?}");
}

/// COPY FROM STDIN in binary format: rows a driver writes with its binary COPY writer, and
/// every column type Weir stores sent out in binary and read back in (a round trip equal to
/// the source); bytea in its text input forms; a truncated stream is 22P04.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_reads_binary() {
    use futures::{SinkExt, TryStreamExt};
    use tokio_postgres::binary_copy::BinaryCopyInWriter;
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE bin (id BIGINT PRIMARY KEY, name TEXT, price DOUBLE PRECISION, at TIMESTAMP, ok BOOLEAN, n INT);
             CREATE MATERIALIZED VIEW bin_count AS SELECT count(*) AS n FROM bin;",
        )
        .await
        .unwrap();
    let sink = client.copy_in("COPY bin FROM STDIN (FORMAT binary)").await.unwrap();
    let types = [Type::INT8, Type::TEXT, Type::FLOAT8, Type::TIMESTAMP, Type::BOOL, Type::INT4];
    let writer = BinaryCopyInWriter::new(sink, &types);
    futures::pin_mut!(writer);
    let at = chrono::NaiveDate::from_ymd_opt(2026, 1, 2).unwrap().and_hms_micro_opt(3, 4, 5, 600_007).unwrap();
    for i in 0..20_000i64 {
        let name = (i % 7 != 0).then(|| format!("name {i}\t\\"));
        let n = i as i32 - 10_000;
        writer.as_mut().write(&[&i, &name, &(i as f64 / 3.0), &at, &(i % 2 == 0), &n]).await.unwrap();
    }
    assert_eq!(writer.finish().await.unwrap(), 20_000);
    let row = client
        .query_one("SELECT count(*), count(name), sum(n), max(at), sum(CASE WHEN ok THEN 1 ELSE 0 END) FROM bin", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 20_000);
    assert_eq!(row.get::<_, i64>(1), 20_000 - 2_858);
    assert_eq!(row.get::<_, i64>(2), (0..20_000i64).map(|i| i - 10_000).sum::<i64>());
    assert_eq!(row.get::<_, chrono::NaiveDateTime>(3), at);
    assert_eq!(row.get::<_, i64>(4), 10_000);
    let third: f64 = client.query_one("SELECT price FROM bin WHERE id = 7", &[]).await.unwrap().get(0);
    assert_eq!(third, 7.0 / 3.0, "floats exact");
    let name: String = client.query_one("SELECT name FROM bin WHERE id = 8", &[]).await.unwrap().get(0);
    assert_eq!(name, "name 8\t\\", "binary text is taken as it is");
    client.batch_execute("FLUSH").await.unwrap();
    let n: i64 = client.query_one("SELECT n FROM bin_count", &[]).await.unwrap().get(0);
    assert_eq!(n, 20_000, "the view follows the COPY");

    // Every type out in binary and back in: the same rows.
    let columns = "id INT PRIMARY KEY, s SMALLINT, b BIGINT, r REAL, d DOUBLE PRECISION, m NUMERIC(12,3), \
                   t TEXT, v VARCHAR(10), ok BOOLEAN, day DATE, at TIMESTAMP, atz TIMESTAMPTZ, tm TIME, \
                   iv INTERVAL, raw BYTEA, doc JSONB, j JSON";
    client
        .batch_execute(&format!(
            "CREATE TABLE every ({columns}); CREATE TABLE every_back ({columns});
             INSERT INTO every VALUES
               (1, -3, 9007199254740993, 1.5, -2.25, 123456789.125, 'x', 'vc', true, DATE '1999-12-31',
                TIMESTAMP '1970-01-01 00:00:00.000001', TIMESTAMPTZ '2026-06-01 12:00:00+00', TIME '23:59:59.5',
                INTERVAL '1 year 2 days 03:04:05.000006', '\\x00ff41', '{{\"b\": [1, 2.50], \"a\": 1e2}}', '{{\"z\" : 1}}'),
               (2, NULL, NULL, NULL, NULL, -0.001, NULL, NULL, NULL, NULL, NULL, NULL, NULL, INTERVAL '-1 day', 'a\\\\b', NULL, NULL),
               (3, 0, 0, 0, 0, 0, '', '', false, DATE '2000-01-01', TIMESTAMP '1900-01-01 00:00:00', NULL, TIME '00:00:00',
                INTERVAL '0 seconds', '\\x', '[]', '\"s\"');"
        ))
        .await
        .unwrap();
    let out = client.copy_out("COPY every TO STDOUT (FORMAT binary)").await.unwrap();
    let data: Vec<bytes::Bytes> = out.try_collect().await.unwrap();
    let sink = client.copy_in("COPY every_back FROM STDIN (FORMAT binary)").await.unwrap();
    futures::pin_mut!(sink);
    for chunk in data.concat().chunks(13) {
        sink.send(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), 3);
    let all = |t: &str| format!("SELECT * FROM {t} ORDER BY id");
    let original = common::rows(&client, &all("every")).await;
    assert_eq!(common::rows(&client, &all("every_back")).await, original);
    assert!(original[0].contains("\\x00ff41"), "bytea read from its hex form: {original:?}");
    assert!(original[1].contains("\\x615c62"), "bytea read from its escape form: {original:?}");

    // A stream cut in the middle of a row: 22P04, nothing of it stored; the session goes on.
    let whole = data.concat();
    client.batch_execute(&format!("CREATE TABLE every_cut ({columns})")).await.unwrap();
    let sink = client.copy_in("COPY every_cut FROM STDIN (FORMAT binary)").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::copy_from_slice(&whole[..whole.len() - 9])).await.unwrap();
    let err = sink.finish().await.unwrap_err();
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("22P04"), "{err:?}");
    common::assert_sqlstate(&client, "COPY bin FROM STDIN (FORMAT binary, HEADER)", "42601").await;
    assert_eq!(common::rows(&client, "SELECT count(*) FROM every_cut").await, ["0"]);
    common::assert_sqlstate(&client, "COPY bin FROM STDIN (FORMAT binary, DELIMITER ',')", "42601").await;
}

/// The value of the Prometheus sample `name` (with its labels, as printed), 0 when absent.
fn sample(server: &TestServer, name: &str) -> f64 {
    server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// A prepared statement is planned once and its plan used for every Execute (key lookups by a
/// parameter included); a changed catalog or setting plans it again; plans that read the
/// system catalogs or the clock are not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_reuse_their_plans_until_the_catalog_changes() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE kv (k INT PRIMARY KEY, v TEXT);
             INSERT INTO kv SELECT x, 'v' || x FROM generate_series(1, 100) AS s(x);",
        )
        .await
        .unwrap();
    let cached = r#"weir_plans_total{plan="cached"}"#;
    let lookup = client.prepare("SELECT v FROM kv WHERE k = $1").await.unwrap();
    let update = client.prepare("UPDATE kv SET v = $2 WHERE k = $1").await.unwrap();
    let before = sample(&server, cached);
    for k in 1..=20 {
        let row = client.query_one(&lookup, &[&k]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), format!("v{k}"));
        client.execute(&update, &[&k, &format!("w{k}")]).await.unwrap();
        let row = client.query_one(&lookup, &[&k]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), format!("w{k}"));
    }
    assert!(client.query_opt(&lookup, &[&1000]).await.unwrap().is_none());
    // 61 runs: the first of each statement planned, the rest from the cache.
    assert!(sample(&server, cached) - before >= 58.0, "plans were not reused");

    // The table is dropped and made again with other rows and another type: planned again.
    client
        .batch_execute("DROP TABLE kv; CREATE TABLE kv (k INT PRIMARY KEY, v INT); INSERT INTO kv VALUES (1, 7);")
        .await
        .unwrap();
    let lookup = client.prepare("SELECT v FROM kv WHERE k = $1").await.unwrap();
    assert_eq!(client.query_one(&lookup, &[&1]).await.unwrap().get::<_, i32>(0), 7);

    // The clock is read at every run.
    let clock = client.prepare("SELECT now() FROM kv WHERE k = $1").await.unwrap();
    let first: std::time::SystemTime = client.query_one(&clock, &[&1]).await.unwrap().get(0);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second: std::time::SystemTime = client.query_one(&clock, &[&1]).await.unwrap().get(0);
    assert!(second > first, "now() came from a cached plan");

    // The system catalogs are read as they are now.
    let tables = client.prepare("SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = $1").await.unwrap();
    assert_eq!(client.query_one(&tables, &[&"later"]).await.unwrap().get::<_, i64>(0), 0);
    client.batch_execute("CREATE TABLE later (x INT)").await.unwrap();
    assert_eq!(client.query_one(&tables, &[&"later"]).await.unwrap().get::<_, i64>(0), 1);

    // A setting the plan depends on: the time zone a timestamptz is shown in.
    let shown =
        client.prepare("SELECT CAST(TIMESTAMPTZ '2026-01-01 00:00:00+00' AS TEXT) FROM kv WHERE k = $1").await.unwrap();
    let utc: String = client.query_one(&shown, &[&1]).await.unwrap().get(0);
    client.batch_execute("SET TIME ZONE 'Europe/Berlin'").await.unwrap();
    let berlin: String = client.query_one(&shown, &[&1]).await.unwrap().get(0);
    assert_ne!(utc, berlin, "the plan made before SET was used after it");
}

/// All of a COPY ... TO STDOUT, as one string.
async fn copied_out(client: &tokio_postgres::Client, sql: &str) -> String {
    use futures::TryStreamExt;
    let stream = client.copy_out(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    String::from_utf8(chunks.concat()).unwrap()
}

/// COPY ... TO STDOUT: a table, some of its columns, a view and a query, in text (escapes,
/// NULL), CSV (header, quotes) and binary; what goes out comes back in unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_stdout_writes_rows() {
    use futures::{SinkExt, TryStreamExt};
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE src (id BIGINT PRIMARY KEY, name TEXT, price DOUBLE PRECISION, at TIMESTAMP);
             INSERT INTO src VALUES (1, 'plain', 1.5, TIMESTAMP '2026-01-01 00:00:01'),
                                    (2, 'tab\there, new\nline \\ and \"quote\"', NULL, NULL),
                                    (3, NULL, -2, TIMESTAMP '2026-01-01 00:00:03');
             CREATE MATERIALIZED VIEW src_count AS SELECT count(*) AS n FROM src;",
        )
        .await
        .unwrap();
    let text = copied_out(&client, "COPY src TO STDOUT").await;
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "1\tplain\t1.5\t2026-01-01 00:00:01",
            "2\ttab\\there, new\\nline \\\\ and \"quote\"\t\\N\t\\N",
            "3\t\\N\t-2\t2026-01-01 00:00:03",
        ]
    );
    assert_eq!(
        copied_out(&client, "COPY src (name, id) TO STDOUT WITH (FORMAT csv, HEADER) ").await.lines().next(),
        Some("name,id")
    );
    let csv = copied_out(&client, "COPY (SELECT id, name FROM src WHERE id = 2) TO STDOUT WITH (FORMAT csv)").await;
    assert_eq!(csv, "2,\"tab\there, new\nline \\ and \"\"quote\"\"\"\n");
    assert_eq!(copied_out(&client, "COPY src_count TO STDOUT").await, "3\n");

    // Round trip: text out, text in, the same rows.
    client
        .batch_execute("CREATE TABLE dst (id BIGINT PRIMARY KEY, name TEXT, price DOUBLE PRECISION, at TIMESTAMP)")
        .await
        .unwrap();
    let sink = client.copy_in("COPY dst FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(text)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 3);
    let all = |t: &str| format!("SELECT id, name, price, at FROM {t} ORDER BY id");
    assert_eq!(common::rows(&client, &all("dst")).await, common::rows(&client, &all("src")).await);

    // Binary, read by the driver's binary COPY reader.
    use tokio_postgres::binary_copy::BinaryCopyOutStream;
    let stream =
        client.copy_out("COPY (SELECT id, name FROM src ORDER BY id) TO STDOUT WITH (FORMAT binary)").await.unwrap();
    let decoded: Vec<_> = BinaryCopyOutStream::new(stream, &[Type::INT8, Type::TEXT]).try_collect().await.unwrap();
    let got: Vec<(i64, Option<String>)> = decoded.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got[0], (1, Some("plain".to_string())));
    assert_eq!(got[2], (3, None));

    // An empty string and NULL differ in CSV; a header goes with the first row (COPY n counts
    // rows); an empty binary result still has its signature; the processing-time column is
    // left out as COPY FROM leaves it out.
    let csv = copied_out(&client, "COPY (SELECT '' AS a, NULL AS b) TO STDOUT WITH (FORMAT csv, HEADER)").await;
    assert_eq!(csv, "a,b\n\"\",\n");
    // (Read as bytes: tokio-postgres's binary reader wants the signature in the chunk of the
    // first row or of the trailer; pgwire sends the trailer on its own.)
    let stream =
        client.copy_out("COPY (SELECT id, name FROM src WHERE id < 0) TO STDOUT WITH (FORMAT binary)").await.unwrap();
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    assert_eq!(chunks.concat(), [&b"PGCOPY\n\xff\r\n\0"[..], &[0; 8], &[0xff, 0xff]].concat());
    client.batch_execute("CREATE TABLE stamped (k INT PRIMARY KEY, at TIMESTAMP AS PROCTIME())").await.unwrap();
    client.batch_execute("INSERT INTO stamped VALUES (1)").await.unwrap();
    assert_eq!(copied_out(&client, "COPY stamped TO STDOUT").await, "1\n");
    common::assert_sqlstate(&client, "COPY src TO STDOUT WITH (FORMAT binary, HEADER)", "42601").await;

    // Errors: a file target, a table that is not there; the session goes on.
    common::assert_sqlstate(&client, "COPY src TO '/tmp/x'", "42501").await;
    common::assert_sqlstate(&client, "COPY nothing TO STDOUT", "42P01").await;
    assert_eq!(copied_out(&client, "COPY (SELECT 1) TO STDOUT").await, "1\n");
}

/// Prepared point lookups (answered without DataFusion, `frontend::point_lookup`) equal the
/// same reads written so they cannot be looked up, for keys present, absent, NULL and of
/// another type, over a composite key, after updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_point_lookups_equal_full_reads() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE pairs (a INT, b TEXT, v BIGINT, PRIMARY KEY (a, b));
             INSERT INTO pairs SELECT x % 50, 'b' || (x % 7), x FROM generate_series(1, 1000) AS s(x);",
        )
        .await
        .unwrap();
    let fast = client.prepare("SELECT v * 2 AS d, b, a FROM pairs WHERE a = $1 AND b = $2").await.unwrap();
    let slow = client.prepare("SELECT v * 2 AS d, b, a FROM pairs WHERE a + 0 = $1 AND b || '' = $2").await.unwrap();
    let whole = client.prepare("SELECT * FROM pairs WHERE b = $2 AND a = $1").await.unwrap();
    let update = client.prepare("UPDATE pairs SET v = v + 1 WHERE a = $1 AND b = $2").await.unwrap();
    let lookups = r#"weir_plans_total{plan="lookup"}"#;
    let before = sample(&server, lookups);
    let show = |rows: Vec<tokio_postgres::Row>| -> Vec<String> {
        rows.iter()
            .map(|r| {
                format!(
                    "{:?} {:?} {:?}",
                    r.get::<_, Option<i64>>(0),
                    r.get::<_, Option<String>>(1),
                    r.get::<_, Option<i32>>(2)
                )
            })
            .collect()
    };
    let mut rng = common::Rng(77);
    for step in 0..200 {
        let a = rng.below(60) as i32 - 5;
        let b = format!("b{}", rng.below(9));
        if step % 5 == 0 {
            client.execute(&update, &[&a, &b]).await.unwrap();
        }
        let got = show(client.query(&fast, &[&a, &b]).await.unwrap());
        let want = show(client.query(&slow, &[&i64::from(a), &b]).await.unwrap());
        assert_eq!(got, want, "a = {a}, b = {b}");
        assert_eq!(client.query(&whole, &[&a, &b]).await.unwrap().len(), want.len());
    }
    let none: Option<i32> = None;
    assert!(client.query(&fast, &[&none, &"b1"]).await.unwrap().is_empty());
    // 401 lookups: all but the first run of each statement (planned) took the fast path.
    assert!(sample(&server, lookups) - before >= 399.0, "the lookups did not take the fast path");
}

/// Simple-protocol statements that differ only in compared literals (what dashboards and
/// `pgbench -M simple` send) run as one lifted statement (`frontend::literals`): planned once,
/// then key lookups take the fast path; their rows equal those of statements written so that no
/// literal is lifted, and a literal that does not fit its column's type keeps its meaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_statements_with_other_literals_share_a_plan() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE accounts (aid INT PRIMARY KEY, abalance INT, at TIMESTAMP, amount NUMERIC(10,2));
             INSERT INTO accounts SELECT x, x * 2, TIMESTAMP '2026-01-01 00:00:00' + x * INTERVAL '1 minute', x * 1.25
             FROM generate_series(1, 500) AS s(x);",
        )
        .await
        .unwrap();
    let rows = |messages: Vec<tokio_postgres::SimpleQueryMessage>| -> Vec<Vec<Option<String>>> {
        messages
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect()
    };
    let lookups = r#"weir_plans_total{plan="lookup"}"#;
    let before = sample(&server, lookups);
    let mut rng = common::Rng(5);
    for step in 0..100 {
        let aid = rng.below(520) as i64 - 10;
        if step % 10 == 0 {
            client
                .simple_query(&format!("UPDATE accounts SET abalance = abalance + 1 WHERE aid = {aid}"))
                .await
                .unwrap();
        }
        let got = rows(client.simple_query(&format!("SELECT abalance FROM accounts WHERE aid = {aid}")).await.unwrap());
        let want = rows(
            client.simple_query(&format!("SELECT abalance FROM accounts WHERE aid + 0 = {aid} + 0")).await.unwrap(),
        );
        assert_eq!(got, want, "aid = {aid}");
        let (from, to) = (rng.below(600), rng.below(600));
        let range = |at: &str| {
            format!("SELECT count(*), sum(amount) FROM accounts WHERE {at} BETWEEN '2026-01-01 00:00:00'::timestamp + INTERVAL '{from} minutes' AND '2026-01-01 00:00:00'::timestamp + INTERVAL '{to} minutes'")
        };
        let lifted = format!(
            "SELECT count(*), sum(amount) FROM accounts WHERE at BETWEEN '{}' AND '{}'",
            chrono_minutes(from),
            chrono_minutes(to)
        );
        assert_eq!(
            rows(client.simple_query(&lifted).await.unwrap()),
            rows(client.simple_query(&range("at")).await.unwrap())
        );
    }
    // 100 lookups: all but the first (planned) took the fast path.
    assert!(sample(&server, lookups) - before >= 99.0, "lifted lookups did not take the fast path");
    // Literals that do not fit the column's type keep their meaning: no key is 1.5, amounts
    // compare as numbers, a word is no integer.
    let none = rows(client.simple_query("SELECT abalance FROM accounts WHERE aid = 1.5").await.unwrap());
    assert!(none.is_empty(), "{none:?}");
    let amount = rows(client.simple_query("SELECT aid FROM accounts WHERE amount = 2.50").await.unwrap());
    assert_eq!(amount, vec![vec![Some("2".to_string())]]);
    let amount = rows(client.simple_query("SELECT aid FROM accounts WHERE amount = 2.505").await.unwrap());
    assert!(amount.is_empty(), "{amount:?}");
    let error = client.simple_query("SELECT abalance FROM accounts WHERE aid = 'nope'").await.unwrap_err();
    assert!(error.as_db_error().is_some(), "{error}");
}

/// `2026-01-01 00:00:00` plus `minutes`, as text.
fn chrono_minutes(minutes: i64) -> String {
    let (h, m) = (minutes / 60, minutes % 60);
    let (d, h) = (1 + h / 24, h % 24);
    format!("2026-01-{d:02} {h:02}:{m:02}:00")
}

/// Prepared lookups through an index (every indexed column given, `frontend::point_lookup`)
/// are answered without DataFusion and equal the same reads written so they cannot use it, on
/// a table and a view, after changes; a dropped index sends them down the normal path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_index_lookups_equal_full_reads() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE items (k INT PRIMARY KEY, g INT, t TEXT, v BIGINT);
             INSERT INTO items SELECT x, x % 40, 't' || (x % 3), x FROM generate_series(1, 2000) AS s(x);
             CREATE INDEX items_g_t ON items (g, t) INCLUDE (v);
             CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM items GROUP BY g;
             CREATE INDEX per_g_n ON per_g (n);",
        )
        .await
        .unwrap();
    let fast = client.prepare("SELECT k, v + 1 AS w FROM items WHERE t = $2 AND g = $1 ORDER BY k").await.unwrap();
    let slow =
        client.prepare("SELECT k, v + 1 AS w FROM items WHERE t || '' = $2 AND g + 0 = $1 ORDER BY k").await.unwrap();
    let by_count = client.prepare("SELECT g FROM per_g WHERE n = $1").await.unwrap();
    let by_count_slow = client.prepare("SELECT g FROM per_g WHERE n + 0 = $1").await.unwrap();
    let update = client.prepare("UPDATE items SET g = g + 1, v = v + 1 WHERE k = $1").await.unwrap();
    let lookups = r#"weir_plans_total{plan="lookup"}"#;
    let before = sample(&server, lookups);
    let show = |rows: Vec<tokio_postgres::Row>| -> Vec<String> {
        let mut out: Vec<String> = rows.iter().map(|r| format!("{:?}", r)).collect();
        out.sort();
        out
    };
    let mut rng = common::Rng(31);
    for step in 0..150 {
        let (g, t) = (rng.below(45) as i32 - 2, format!("t{}", rng.below(4)));
        if step % 3 == 0 {
            client.execute(&update, &[&(rng.below(2000) as i32)]).await.unwrap();
            client.simple_query("FLUSH").await.unwrap();
        }
        // ORDER BY is not part of the fast path's shape: compare sorted rows of both.
        let got: Vec<(i32, i64)> =
            client.query(&fast, &[&g, &t]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
        let want: Vec<(i32, i64)> =
            client.query(&slow, &[&i64::from(g), &t]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(got, want, "g = {g}, t = {t}");
        let n = rng.below(60);
        assert_eq!(
            show(client.query(&by_count, &[&n]).await.unwrap()),
            show(client.query(&by_count_slow, &[&n]).await.unwrap()),
            "n = {n}"
        );
    }
    // The view's lookups take the fast path (the table's have an ORDER BY).
    assert!(sample(&server, lookups) - before >= 149.0, "the index lookups did not take the fast path");
    client.batch_execute("DROP INDEX per_g_n").await.unwrap();
    let n: i64 = 50;
    assert_eq!(
        show(client.query(&by_count, &[&n]).await.unwrap()),
        show(client.query(&by_count_slow, &[&n]).await.unwrap())
    );
}

/// Client sessions run on threads of their own with the configured nice value (`[serving]`),
/// so the dataflow wins the CPU when both want it; sessions work as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_on_the_serving_threads() {
    let server = TestServer::start_with_config("[serving]\nthreads = 3\nnice = 7\n", &[]);
    let client = server.connect().await;
    client.batch_execute("CREATE TABLE t (k INT PRIMARY KEY); INSERT INTO t VALUES (1)").await.unwrap();
    assert_eq!(client.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get::<_, i64>(0), 1);
    let mut serving = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap() {
        let task = task.unwrap().path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
        // The nice value is the 19th field; the name (2nd, in parentheses) has no spaces here.
        let nice: i32 = stat.split_whitespace().nth(18).and_then(|n| n.parse().ok()).unwrap_or(-100);
        if name.trim() == "weir-serving" {
            serving.push(nice);
        }
    }
    assert!(serving.len() >= 3, "serving threads: {serving:?}");
    assert!(serving.iter().all(|&n| n == 7), "serving threads' nice values: {serving:?}");
}

/// A raw protocol connection, for what drivers hide: which replies arrive when.
struct RawConnection {
    stream: std::net::TcpStream,
}

impl RawConnection {
    /// Connects as `root` to `dev` and reads up to the first ReadyForQuery.
    fn open(port: u16) -> RawConnection {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut raw = RawConnection { stream };
        let params = b"user\0root\0database\0dev\0\0";
        let mut startup = Vec::new();
        startup.extend_from_slice(&((8 + params.len()) as u32).to_be_bytes());
        startup.extend_from_slice(&196608u32.to_be_bytes());
        startup.extend_from_slice(params);
        raw.stream.write_all(&startup).unwrap();
        while raw.read().0 != b'Z' {}
        raw
    }

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// Parse, Bind, Describe (portal) and Execute of `sql` as the unnamed statement and portal,
    /// with no parameters: what a driver sends before its Sync.
    fn pipeline(sql: &str) -> Vec<u8> {
        let mut parse = b"\0".to_vec();
        parse.extend_from_slice(sql.as_bytes());
        parse.extend_from_slice(b"\0\0\0");
        let mut out = Self::message(b'P', &parse);
        out.extend(Self::message(b'B', b"\0\0\0\0\0\0\0\0"));
        out.extend(Self::message(b'D', b"P\0"));
        out.extend(Self::message(b'E', b"\0\0\0\0\0"));
        out
    }

    fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next message: its type and body.
    fn read(&mut self) -> (u8, Vec<u8>) {
        let mut head = [0u8; 5];
        self.stream.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        self.stream.read_exact(&mut body).unwrap();
        (head[0], body)
    }

    /// The types of the messages up to and including one of type `last`.
    fn read_through(&mut self, last: u8) -> String {
        let mut kinds = String::new();
        loop {
            let (kind, _) = self.read();
            kinds.push(kind as char);
            if kind == last {
                return kinds;
            }
        }
    }

    /// Whether anything arrives within `wait`.
    fn anything_within(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut byte = [0u8; 1];
        let arrived = match self.stream.peek(&mut byte) {
            Ok(n) => n > 0,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => false,
            Err(e) => panic!("{e}"),
        };
        self.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        arrived
    }
}

/// Extended-protocol replies wait for Sync or Flush, as PostgreSQL's do, so a pipelined query
/// is answered in one write rather than one per message; an error, and a COPY's request for
/// data, are not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_replies_wait_for_sync_or_flush() {
    let server = TestServer::start();
    server.connect().await.batch_execute("CREATE TABLE held (x INT)").await.unwrap();
    let port = server.port;
    tokio::task::spawn_blocking(move || {
        let mut raw = RawConnection::open(port);
        raw.write(&RawConnection::pipeline("SELECT 1 AS one"));
        assert!(!raw.anything_within(Duration::from_millis(300)), "replies before Sync or Flush");
        raw.write(&RawConnection::message(b'H', b""));
        assert_eq!(
            raw.read_through(b'C'),
            "12TDC",
            "ParseComplete, BindComplete, RowDescription, DataRow, CommandComplete"
        );
        raw.write(&RawConnection::message(b'S', b""));
        assert_eq!(raw.read_through(b'Z'), "Z");

        // The whole pipeline with its Sync: every reply, then ReadyForQuery.
        let mut pipelined = RawConnection::pipeline("SELECT x FROM held");
        pipelined.extend(RawConnection::message(b'S', b""));
        raw.write(&pipelined);
        assert_eq!(raw.read_through(b'Z'), "12TCZ");

        // An error is sent at once; the rest of the pipeline is skipped up to Sync.
        raw.write(&RawConnection::pipeline("SELEC 1"));
        assert_eq!(raw.read_through(b'E'), "E");
        raw.write(&RawConnection::message(b'S', b""));
        assert_eq!(raw.read_through(b'Z'), "Z");

        // COPY FROM STDIN: the client waits for CopyInResponse before it sends data.
        raw.write(&RawConnection::pipeline("COPY held FROM STDIN"));
        assert_eq!(raw.read_through(b'G'), "12nG", "ParseComplete, BindComplete, NoData, CopyInResponse");
        raw.write(&RawConnection::message(b'd', b"7\n"));
        raw.write(&RawConnection::message(b'c', b""));
        raw.write(&RawConnection::message(b'S', b""));
        assert_eq!(raw.read_through(b'Z'), "CZ");
    })
    .await
    .unwrap();
    let n: i64 = server.connect().await.query_one("SELECT count(*) FROM held", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
}
