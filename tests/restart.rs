//! Durability: what a client was told is written survives `kill -9` and a restart.

mod common;

use common::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_and_catalog_survive_sigkill() {
    let mut server = TestServer::start();
    {
        let c = server.connect().await;
        c.batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION, ts TIMESTAMP);
             INSERT INTO t VALUES (1, 'a', 1.5, '2026-01-01 00:00:01'), (2, 'b', 2.5, now());
             UPDATE t SET price = 3 WHERE id = 1;
             DELETE FROM t WHERE id = 2;
             CREATE TABLE bag (x INT);
             INSERT INTO bag VALUES (1), (1), (2);
             CREATE TABLE gone (x INT);
             DROP TABLE gone;
             CREATE VIEW bag_view (value) AS SELECT x FROM bag WHERE x > 1;
             CREATE OR REPLACE VIEW bag_view (value) AS SELECT x, x * 2 AS twice FROM bag WHERE x > 0;
             CREATE MATERIALIZED VIEW bag_total AS SELECT sum(twice) AS s FROM bag_view;",
        )
        .await
        .unwrap();
    }
    let c = server.sigkill_and_reconnect().await;
    // A plain view survives as it was last replaced, and what reads it restarts.
    let rows = c.query("SELECT value, twice FROM bag_view ORDER BY value", &[]).await.unwrap();
    assert_eq!(
        // `x * 2` of an INT is an INT, as in Postgres.
        rows.iter().map(|r| (r.get::<_, i32>(0), r.get::<_, i32>(1))).collect::<Vec<_>>(),
        [(1, 2), (1, 2), (2, 4)]
    );
    c.batch_execute("FLUSH").await.unwrap();
    let total: i64 = c.query_one("SELECT s FROM bag_total", &[]).await.unwrap().get(0);
    assert_eq!(total, 8);
    let rows = c.query("SELECT id, name, price FROM t ORDER BY id", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i32>(0), 1);
    assert_eq!(rows[0].get::<_, &str>(1), "a");
    assert_eq!(rows[0].get::<_, f64>(2), 3.0);

    let n: i64 = c.query_one("SELECT count(*) FROM bag", &[]).await.unwrap().get(0);
    assert_eq!(n, 3);
    assert!(c.query("SELECT * FROM gone", &[]).await.is_err());

    // Hidden row ids continue after a restart: new rows do not overwrite old ones.
    c.execute("INSERT INTO bag VALUES (3)", &[]).await.unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM bag", &[]).await.unwrap().get(0);
    assert_eq!(n, 4);

    // And the catalog keeps handing out fresh ids: a new table is empty.
    c.batch_execute("CREATE TABLE gone (x INT)").await.unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM gone", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);

    // Twice, to be sure the restarted server's own writes are durable too.
    drop(c);
    server.restart();
    let c = server.connect().await;
    let n: i64 = c.query_one("SELECT count(*) FROM bag", &[]).await.unwrap().get(0);
    assert_eq!(n, 4);
    let total: i64 = c.query_one("SELECT s FROM bag_total", &[]).await.unwrap().get(0);
    assert_eq!(total, 14, "the view follows the row inserted after the first restart");
}

/// A read right after a restart sees every acknowledged write, however slowly the views apply
/// the writes replayed from the change log (`WEIR_FAULT=view.slow_commit`: every view commit
/// waits half a second): the server listens only once they are in the views.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_right_after_a_restart_sees_every_acknowledged_write() {
    // No periodic checkpoint: the writes after the DDL's are only in the change log at the kill.
    let mut server = TestServer::start_with(&["--checkpoint-interval", "3600s"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT PRIMARY KEY, v INT);
         CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(v) AS s FROM t;
         INSERT INTO t SELECT i, i FROM generate_series(1, 1000) AS i;
         UPDATE t SET v = v + 1 WHERE k <= 10;",
    )
    .await
    .unwrap();
    drop(c);
    server.env = vec![("WEIR_FAULT".into(), "view.slow_commit".into())];
    let c = server.sigkill_and_reconnect().await;
    // No FLUSH: the first read after the restart.
    let row = c.query_one("SELECT n, s FROM total", &[]).await.unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, Option<i64>>(1)), (1000, Some(500_510)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_data_dir_is_refused() {
    let server = TestServer::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", common::free_port()))
        .arg("--metrics-listen")
        .arg("off")
        .arg("--data-dir")
        .arg(server.data_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot open state store"), "{stderr}");
    // The first server is unaffected.
    let c = server.connect().await;
    c.query_one("SELECT 1", &[]).await.unwrap();
}

/// A clean stop (SIGTERM) makes the sources' latest chunks durable: after it, nothing is read
/// again, so processing-time stamps stay as they were (after SIGKILL they would be new).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_keeps_a_sources_rows_as_stored() {
    let mut server = TestServer::start();
    let before: Vec<String> = {
        let c = server.connect().await;
        c.batch_execute(
            "CREATE SOURCE b (p_time AS PROCTIME())
               WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '5000')",
        )
        .await
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let n: i64 = c.query_one("SELECT count(*) FROM b", &[]).await.unwrap().get(0);
            if n == 4600 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "b has {n} rows");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let row =
            c.query_one("SELECT CAST(min(p_time) AS VARCHAR), CAST(max(p_time) AS VARCHAR) FROM b", &[]).await.unwrap();
        vec![row.get(0), row.get(1)]
    };
    server.stop();
    assert!(server.log_text().contains("state flushed"), "{}", server.log_text());
    server.start_again();
    let c = server.connect().await;
    let n: i64 = c.query_one("SELECT count(*) FROM b", &[]).await.unwrap().get(0);
    assert_eq!(n, 4600);
    let row =
        c.query_one("SELECT CAST(min(p_time) AS VARCHAR), CAST(max(p_time) AS VARCHAR) FROM b", &[]).await.unwrap();
    assert_eq!(vec![row.get::<_, String>(0), row.get::<_, String>(1)], before);
}

/// Rows `from..to` of table `t` in COPY's text format.
fn copy_rows(from: i64, to: i64) -> bytes::Bytes {
    (from..to).map(|i| format!("{i}\n")).collect::<String>().into()
}

/// SIGTERM lets a statement under way finish (here a COPY whose data is still coming): the
/// server takes no new connection meanwhile, then takes its last checkpoint and exits 0, and
/// the next start has every row with nothing to replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_the_statements_under_way_finish() {
    use futures::SinkExt;
    let mut server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (x BIGINT); CREATE MATERIALIZED VIEW n AS SELECT count(*) AS rows FROM t;")
        .await
        .unwrap();
    let other = server.connect().await;
    let copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
    futures::pin_mut!(copy);
    copy.send(copy_rows(0, 1000)).await.unwrap();
    server.terminate();
    // It stops listening at once, and waits for the COPY.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", server.port)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "the server still takes connections");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(server.exit_status(std::time::Duration::from_millis(500)).is_none(), "it waits for the COPY");
    // Another session's next statement is refused, as Postgres refuses one at a shutdown.
    let refused = other.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(refused.code().map(|c| c.code()), Some("57P01"), "{refused}");
    copy.send(copy_rows(1000, 3000)).await.unwrap();
    assert_eq!(copy.finish().await.unwrap(), 3000);
    let status = server.exit_status(std::time::Duration::from_secs(60)).expect("the server stops");
    let log = server.log_text();
    assert!(status.success(), "a clean stop exits 0 ({status}):\n{log}");
    assert!(log.contains("letting the statements under way finish"), "{log}");
    assert!(!log.lines().any(|l| l.contains("ERROR")), "a clean stop logged errors:\n{log}");
    server.start_again();
    let log = server.log_text();
    assert!(log.contains("restored at start; 0 logged writes after it"), "nothing to replay:\n{log}");
    let c = server.connect().await;
    assert_eq!(c.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get::<_, i64>(0), 3000);
    assert_eq!(c.query_one("SELECT rows FROM n", &[]).await.unwrap().get::<_, i64>(0), 3000);
}

/// A stop that cannot finish (a COPY that never ends) ends at once at a second SIGTERM or at
/// the shutdown timeout, exiting 1; it is as safe as kill -9: every acknowledged row is there
/// after the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_or_the_shutdown_timeout_stops_at_once() {
    use futures::SinkExt;
    for second_sigterm in [true, false] {
        let timeout = if second_sigterm { "600s" } else { "2s" };
        let mut server = TestServer::start_with(&["--drain-timeout", "600s", "--shutdown-timeout", timeout]);
        let c = server.connect().await;
        c.batch_execute("CREATE TABLE t (x BIGINT); INSERT INTO t SELECT * FROM generate_series(1, 500);")
            .await
            .unwrap();
        let copy = c.copy_in("COPY t FROM STDIN").await.unwrap();
        futures::pin_mut!(copy);
        copy.send(copy_rows(0, 10)).await.unwrap();
        let stopping = std::time::Instant::now();
        server.terminate();
        if second_sigterm {
            assert!(server.exit_status(std::time::Duration::from_secs(1)).is_none(), "it waits for the COPY");
            server.terminate();
        }
        let status = server.exit_status(std::time::Duration::from_secs(30)).expect("the server stops");
        let log = server.log_text();
        assert_eq!(status.code(), Some(1), "{log}");
        let why = if second_sigterm { "terminated again" } else { "the stop took longer than the shutdown timeout" };
        assert!(log.lines().any(|l| l.contains(why) && l.contains("stopping at once")), "{log}");
        assert!(stopping.elapsed() < std::time::Duration::from_secs(20));
        drop(copy);
        server.start_again();
        let c = server.connect().await;
        assert_eq!(c.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get::<_, i64>(0), 500);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_create_leaves_the_relation_it_collided_with_across_a_restart() {
    let mut server = TestServer::start();
    {
        let c = server.connect().await;
        c.batch_execute(
            "SET implicit_flush = true;
             CREATE TABLE t (a INT);
             INSERT INTO t VALUES (1), (2);
             CREATE MATERIALIZED VIEW v AS SELECT a FROM t;",
        )
        .await
        .unwrap();
        for collide in [
            "CREATE MATERIALIZED VIEW v AS SELECT a FROM t",
            "CREATE TABLE v (x INT)",
            "CREATE TABLE v AS SELECT 1 AS x",
            "CREATE MATERIALIZED VIEW t AS SELECT a FROM t",
        ] {
            let e = c.batch_execute(collide).await.unwrap_err();
            assert_eq!(e.code().map(|c| c.code()), Some("42P07"), "{collide}: {e:?}");
        }
        c.batch_execute("INSERT INTO t VALUES (3)").await.unwrap();
    }
    let c = server.sigkill_and_reconnect().await;
    c.batch_execute("SET implicit_flush = true; INSERT INTO t VALUES (4)").await.unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM v", &[]).await.unwrap().get(0);
    assert_eq!(n, 4);
    let n: i64 = c.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get(0);
    assert_eq!(n, 4);
    c.batch_execute("DROP MATERIALIZED VIEW v").await.unwrap();
}

/// A view joining a table `FOR SYSTEM_TIME AS OF PROCTIME()` comes back from a SIGKILL as it
/// was, its definition (with the clause) read again, and goes on looking rows up in the table
/// as it is now; what it joined before keeps the table's values of then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_join_survives_sigkill() {
    let mut server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR);
         CREATE TABLE orders (oid BIGINT, customer BIGINT) APPEND ONLY;
         INSERT INTO customers VALUES (1, 'ann'), (2, 'bob');
         CREATE MATERIALIZED VIEW enriched AS SELECT o.oid, c.name FROM orders o
           JOIN customers FOR SYSTEM_TIME AS OF PROCTIME() AS c ON o.customer = c.id;
         INSERT INTO orders VALUES (10, 1), (11, 2), (12, 3);
         FLUSH;",
    )
    .await
    .unwrap();
    drop(c);
    let c = server.sigkill_and_reconnect().await;
    c.batch_execute("UPDATE customers SET name = 'ann2' WHERE id = 1; INSERT INTO orders VALUES (13, 1); FLUSH;")
        .await
        .unwrap();
    let rows = common::rows(&c, "SELECT oid, name FROM enriched").await;
    assert_eq!(rows, ["10|ann", "11|bob", "13|ann2"]);
}

/// A view created over a view still backfilling waits for the whole of it; a CREATE cancelled
/// during its backfill leaves nothing behind, and a view that was waiting for it fails with
/// 42P01 instead of starting over rows that are gone. A restart then finds exactly the views
/// that were made, equal to their queries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_a_backfilling_view_wait_for_it_and_a_cancelled_backfill_leaves_nothing() {
    /// Waits until relation `name` is in the catalog (its CREATE is backfilling it).
    async fn exists(c: &tokio_postgres::Client, name: &str) {
        for _ in 0..500 {
            let n: i64 =
                c.query_one("SELECT count(*) FROM pg_class WHERE relname = $1", &[&name]).await.unwrap().get(0);
            if n == 1 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{name} never appeared");
    }
    async fn views(c: &tokio_postgres::Client) -> Vec<String> {
        let rows = c.query("SELECT matviewname::TEXT FROM pg_matviews ORDER BY 1", &[]).await.unwrap();
        rows.iter().map(|r| r.get::<_, String>(0)).collect()
    }
    let mut server = TestServer::start();
    let a = server.connect().await;
    let b = server.connect().await;
    a.batch_execute(
        "CREATE TABLE big (k BIGINT PRIMARY KEY, v BIGINT);
         INSERT INTO big SELECT x, x % 97 FROM generate_series(1, 2300000) AS t(x);",
    )
    .await
    .unwrap();
    let slow_view = |name: &str| {
        format!("CREATE MATERIALIZED VIEW {name} AS SELECT k % 1000 AS g, count(*) AS n, sum(v) AS s FROM big GROUP BY k % 1000")
    };
    // A view over one backfilling.
    let first = {
        let (a, sql) = (server.connect().await, slow_view("per_g"));
        tokio::spawn(async move { a.batch_execute(&sql).await })
    };
    exists(&b, "per_g").await;
    b.batch_execute("CREATE MATERIALIZED VIEW total AS SELECT sum(n) AS n, count(*) AS groups FROM per_g")
        .await
        .unwrap();
    first.await.unwrap().unwrap();
    let row = b.query_one("SELECT n, groups FROM total", &[]).await.unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (2_300_000, 1000), "the view over it saw all of it");
    // A cancelled backfill, with a view waiting for it.
    let cancel = a.cancel_token();
    let cancelled = {
        let sql = slow_view("per_g2");
        tokio::spawn(async move { a.batch_execute(&sql).await })
    };
    exists(&b, "per_g2").await;
    let waiting = {
        let b2 = server.connect().await;
        tokio::spawn(async move {
            b2.batch_execute("CREATE MATERIALIZED VIEW total2 AS SELECT sum(n) AS n FROM per_g2").await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = cancelled.await.unwrap().expect_err("the CREATE was cancelled");
    assert_eq!(e.code().map(|c| c.code()), Some("57014"), "{e:?}");
    let e = waiting.await.unwrap().expect_err("its input went away");
    assert_eq!(e.code().map(|c| c.code()), Some("42P01"), "{e:?}");
    assert_eq!(views(&b).await, ["per_g", "total"]);
    let c = server.sigkill_and_reconnect().await;
    assert_eq!(views(&c).await, ["per_g", "total"]);
    c.batch_execute("SET implicit_flush = true; DELETE FROM big WHERE k <= 300000").await.unwrap();
    let n: i64 = c.query_one("SELECT n FROM total", &[]).await.unwrap().get(0);
    assert_eq!(n, 2_000_000);
    // The names are free again.
    c.batch_execute(&slow_view("per_g2")).await.unwrap();
    let n: i64 = c.query_one("SELECT sum(n) FROM per_g2", &[]).await.unwrap().get(0);
    assert_eq!(n, 2_000_000);
}
