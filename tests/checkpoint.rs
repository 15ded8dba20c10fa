//! Checkpoints through the real server: taken every interval into the object store (a local
//! directory, and a real S3-compatible server started by scripts/s3-server.sh), listed in
//! `weir_catalog.checkpoints`, restored into an empty data directory, and a damaged newest
//! checkpoint passed over for the one before it.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;

/// Waits for a complete checkpoint started after `after` (microseconds since the Unix epoch,
/// as the server's clock says); returns its epoch.
async fn complete_checkpoint_after(c: &tokio_postgres::Client, after: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = c
            .query(
                "SELECT CAST(epoch AS BIGINT) AS e FROM weir_catalog.checkpoints
                 WHERE status = 'complete' AND CAST(started_at AS BIGINT) > $1 ORDER BY e DESC LIMIT 1",
                &[&after],
            )
            .await
            .unwrap();
        if let Some(row) = rows.first() {
            return row.get(0);
        }
        assert!(Instant::now() < deadline, "no checkpoint completed within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server's clock now, in microseconds.
async fn server_now(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT CAST(CAST(now() AS TIMESTAMP) AS BIGINT)", &[]).await.unwrap().get::<_, i64>(0) / 1000
}

async fn count(c: &tokio_postgres::Client, relation: &str) -> i64 {
    c.query_one(&format!("SELECT count(*) FROM {relation}"), &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_taken_uploaded_and_listed() {
    let server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--checkpoint-keep", "2"]);
    let c = server.connect().await;
    c.batch_execute(
        "SET implicit_flush = true;
         CREATE TABLE t (k INT PRIMARY KEY, v INT);
         INSERT INTO t VALUES (1, 1), (2, 2);
         CREATE MATERIALIZED VIEW s AS SELECT sum(v) AS total FROM t;",
    )
    .await
    .unwrap();
    let since = server_now(&c).await;
    let first = complete_checkpoint_after(&c, since).await;
    let later = complete_checkpoint_after(&c, server_now(&c).await).await;
    assert!(later > first);
    let row = c
        .query_one(
            "SELECT CAST(files AS BIGINT), CAST(state_bytes AS BIGINT), duration_ms IS NOT NULL
             FROM weir_catalog.checkpoints WHERE status = 'complete' ORDER BY epoch DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, i64>(0) > 0 && row.get::<_, i64>(1) > 0 && row.get::<_, bool>(2));
    // Retention: at most `keep` manifests remain in the store (one more may be mid-upload).
    let manifests = std::fs::read_dir(server.data_dir().join("checkpoints/manifests")).unwrap().count();
    assert!((1..=3).contains(&manifests), "{manifests} manifests");
    let metrics = server.metrics_text();
    assert!(metrics.contains("weir_checkpoints_total{outcome=\"complete\"}"), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("weir_checkpoint_last_complete_epoch ") && !l.ends_with(" 0")));
}

/// A config file pointing checkpoints at `url` on the test S3 server.
fn s3_config(dir: &std::path::Path, endpoint: &str) -> std::path::PathBuf {
    let path = dir.join("weir.toml");
    std::fs::write(
        &path,
        format!(
            "[checkpoint]\ninterval_ms = 200\nkeep = 3\n[checkpoint.s3]\nendpoint = \"{endpoint}\"\n\
             region = \"us-east-1\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_data_directory_is_restored_from_s3() {
    let (endpoint, bucket) = common::s3_bucket("weir-ckpt");
    let config_dir = tempfile::tempdir().unwrap();
    let config = s3_config(config_dir.path(), &endpoint);
    let url = format!("s3://{bucket}/weir");
    let args = ["--config", config.to_str().unwrap(), "--checkpoint-url", &url];
    let mut server = TestServer::start_with(&args);
    {
        let c = server.connect().await;
        c.batch_execute(
            "SET implicit_flush = true;
             CREATE TABLE t (k INT PRIMARY KEY, g INT);
             INSERT INTO t SELECT CAST(i AS INT), CAST(i % 7 AS INT) FROM generate_series(1, 5000) AS i;
             CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM t GROUP BY g;
             DELETE FROM t WHERE k <= 100;",
        )
        .await
        .unwrap();
        let since = server_now(&c).await;
        complete_checkpoint_after(&c, since).await;
    }
    server.kill();
    std::fs::remove_dir_all(server.data_dir()).unwrap();
    server.start_again();
    let c = server.connect().await;
    assert_eq!(count(&c, "t").await, 4900);
    let n: i64 = c.query_one("SELECT sum(n) FROM per_g", &[]).await.unwrap().get(0);
    assert_eq!(n, 4900);
    let restored: Vec<String> = c
        .query(
            "SELECT status FROM weir_catalog.checkpoints WHERE status IN ('downloaded', 'restored') ORDER BY status",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(restored, ["downloaded", "restored"], "downloaded from S3, then restored from the download");
    // The restored server goes on checkpointing, and its view follows new rows.
    c.batch_execute("SET implicit_flush = true; INSERT INTO t VALUES (1, 1)").await.unwrap();
    assert_eq!(c.query_one("SELECT sum(n) FROM per_g", &[]).await.unwrap().get::<_, i64>(0), 4901);
    complete_checkpoint_after(&c, server_now(&c).await).await;
}

/// The checkpoint store unreachable for a minute (the line to the S3 server cut): statements
/// go on (each write acknowledged at once, reads answered, the view following), checkpoints
/// wait or fail and say so, and once the store is back a checkpoint completes that holds every
/// acknowledged write: a server started on an empty data directory restores all of it from S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_checkpoint_store_holds_back_only_checkpoints() {
    let (endpoint, bucket) = common::s3_bucket("weir-outage");
    let line = common::cut_line::CutLine::to(endpoint.trim_start_matches("http://")).await;
    let config_dir = tempfile::tempdir().unwrap();
    let config = s3_config(config_dir.path(), &format!("http://127.0.0.1:{}", line.port));
    let url = format!("s3://{bucket}/weir");
    let mut server = TestServer::start_with(&["--config", config.to_str().unwrap(), "--checkpoint-url", &url]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, g INT);
         CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM t GROUP BY g;",
    )
    .await
    .unwrap();
    complete_checkpoint_after(&c, server_now(&c).await).await;

    line.cut();
    let cut_at = server_now(&c).await;
    let started = Instant::now();
    let (mut k, mut slowest) = (0i64, Duration::ZERO);
    while started.elapsed() < Duration::from_secs(60) {
        let insert = Instant::now();
        c.execute("INSERT INTO t VALUES ($1, $2)", &[&k, &((k % 5) as i32)]).await.unwrap();
        slowest = slowest.max(insert.elapsed());
        k += 1;
        if k % 100 == 0 {
            c.batch_execute("FLUSH").await.unwrap();
            let n: i64 = c.query_one("SELECT sum(n) FROM per_g", &[]).await.unwrap().get(0);
            assert_eq!(n, k, "the view follows its table while the checkpoint store is away");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(slowest < Duration::from_secs(10), "a write waited {slowest:?} for the checkpoint store");
    let completed: i64 = c
        .query_one(
            "SELECT count(*) FROM weir_catalog.checkpoints WHERE status = 'complete' AND CAST(started_at AS BIGINT) > $1",
            &[&cut_at],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(completed, 0, "a checkpoint completed with its store unreachable");
    let unfinished: i64 = c
        .query_one(
            "SELECT count(*) FROM weir_catalog.checkpoints WHERE status IN ('failed', 'uploading')
               AND CAST(started_at AS BIGINT) > $1",
            &[&cut_at],
        )
        .await
        .unwrap()
        .get(0);
    assert!(unfinished > 0, "the checkpoints that could not be uploaded are not shown");

    line.mend();
    complete_checkpoint_after(&c, server_now(&c).await).await;
    drop(c);
    server.kill();
    std::fs::remove_dir_all(server.data_dir()).unwrap();
    server.start_again();
    let c = server.connect().await;
    assert_eq!(count(&c, "t").await, k, "every acknowledged write is in the checkpoint taken after the outage");
    let n: i64 = c.query_one("SELECT sum(n) FROM per_g", &[]).await.unwrap().get(0);
    assert_eq!(n, k);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_checkpoint_is_passed_over_for_the_one_before() {
    let store_dir = tempfile::tempdir().unwrap();
    let url = store_dir.path().to_str().unwrap().to_string();
    let args = ["--checkpoint-url", &url, "--checkpoint-interval", "200ms", "--checkpoint-keep", "100"];
    let mut server = TestServer::start_with(&args);
    let older;
    {
        let c = server.connect().await;
        c.batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2), (3);").await.unwrap();
        older = complete_checkpoint_after(&c, server_now(&c).await).await;
    }
    // A restart on the same data directory: its checkpoints must get higher epochs than the
    // ones already in the store (the damage below picks them by epoch).
    server.kill();
    server.start_again();
    {
        let c = server.connect().await;
        c.batch_execute("INSERT INTO t VALUES (4)").await.unwrap();
        complete_checkpoint_after(&c, server_now(&c).await).await;
    }
    server.kill();
    // Damage every checkpoint newer than `older`: one manifest truncated, the rest's files.
    let manifests = store_dir.path().join("manifests");
    let mut newer: Vec<_> = std::fs::read_dir(&manifests)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let epoch: i64 = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            epoch > older
        })
        .collect();
    newer.sort();
    assert!(!newer.is_empty());
    for (i, manifest) in newer.iter().enumerate() {
        if i % 2 == 0 {
            let bytes = std::fs::read(manifest).unwrap();
            std::fs::write(manifest, &bytes[..bytes.len() / 2]).unwrap();
        } else {
            let epoch = manifest.file_stem().unwrap().to_str().unwrap().to_string();
            for file in std::fs::read_dir(store_dir.path().join("epochs").join(&epoch)).unwrap().flatten() {
                std::fs::write(file.path(), b"garbage").unwrap();
            }
        }
    }
    std::fs::remove_dir_all(server.data_dir()).unwrap();
    server.start_again();
    let c = server.connect().await;
    // Restored from `older`, before row 4: every later checkpoint is damaged.
    assert_eq!(count(&c, "t").await, 3);
    let skipped: i64 = c
        .query_one(
            "SELECT count(*) FROM weir_catalog.checkpoints WHERE status = 'failed' AND detail LIKE 'not restorable%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(skipped, newer.len() as i64);
    drop(c);
    server.kill();

    // With every checkpoint damaged and no local store, the server refuses to start, and
    // deletes nothing.
    for manifest in std::fs::read_dir(&manifests).unwrap().flatten() {
        std::fs::write(manifest.path(), b"{").unwrap();
    }
    std::fs::remove_dir_all(server.data_dir()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port()), "--metrics-listen", "off"])
        .arg("--data-dir")
        .arg(server.data_dir())
        .args(["--checkpoint-url", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no checkpoint"), "{stderr}");
    assert!(std::fs::read_dir(&manifests).unwrap().count() > 0);
}

/// A damaged newest local snapshot is passed over for the one before, and the writes
/// acknowledged between the two come back from the change log: nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_local_snapshot_falls_back_without_losing_writes() {
    // Checkpoints only when DDL completes (and at start).
    let mut server = TestServer::start_with(&["--checkpoint-interval", "0"]);
    {
        let c = server.connect().await;
        c.batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2), (3)").await.unwrap();
        // A checkpoint holding rows 1-3, then row 4 after it.
        c.batch_execute("CREATE TABLE u (y INT); INSERT INTO t VALUES (4)").await.unwrap();
    }
    server.kill();
    let snapshots = server.data_dir().join("snapshots");
    let newest = std::fs::read_dir(&snapshots).unwrap().flatten().map(|e| e.path()).max().unwrap();
    std::fs::write(newest.join("CURRENT"), b"garbage").unwrap();
    server.start_again();
    let c = server.connect().await;
    assert_eq!(count(&c, "t").await, 4, "rows 1-3 (between the snapshots) and 4 (after both)");
    let passed_over: i64 = c
        .query_one("SELECT count(*) FROM weir_catalog.checkpoints WHERE detail LIKE '%passed over%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(passed_over, 1);
}

/// A view whose write of its rows to the store fails (`WEIR_FAULT=view.commit_write`, as a
/// full disk would) stops the server with exit code 70 instead of going on with operators that
/// count state flushed which the store does not hold; the restart restores every view from its
/// checkpoint and replays what came after, so the views equal their queries over exactly the
/// acknowledged rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_view_commit_stops_the_server_and_loses_nothing() {
    a_failed_view_write_stops_the_server_and_loses_nothing("view.commit_write@40", "could not be written").await
}

/// The same for the write of a view's operator state, which runs off the view's thread while
/// the view goes on (`WEIR_FAULT=view.state_write`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_operator_state_write_stops_the_server_and_loses_nothing() {
    a_failed_view_write_stops_the_server_and_loses_nothing("view.state_write@40", "could not be written").await
}

/// A view's write refused as by a file system turned read-only, while the data directory takes
/// writes again (remounted read-write under the server; `WEIR_FAULT=store.read_only`): RocksDB
/// takes no writes again in the process that saw them fail, so the server exits with code 70 at
/// once rather than wait for space, and the restart loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_refusing_writes_to_a_writable_directory_stops_the_server_and_loses_nothing() {
    a_failed_view_write_stops_the_server_and_loses_nothing(
        "store.read_only@40",
        "the data directory takes writes again",
    )
    .await
}

/// `fault` armed, the server stops with code 70, its log saying `says`; restarted, it holds
/// every acknowledged row and its views equal their queries.
async fn a_failed_view_write_stops_the_server_and_loses_nothing(fault: &str, says: &str) {
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer INT, amount BIGINT);
         CREATE MATERIALIZED VIEW per_customer AS
           SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer;
         CREATE MATERIALIZED VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 50;",
    )
    .await
    .unwrap();
    drop(c);
    // The 40th commit of a view (two views, 50 ms barriers: about a second in) fails.
    server.env = vec![("WEIR_FAULT".into(), fault.into())];
    server.restart_armed();
    let deadline = Instant::now() + Duration::from_secs(60);
    let c = loop {
        if let Ok((client, conn)) = tokio_postgres::connect(&server.conn_str(), tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            break client;
        }
        assert!(Instant::now() < deadline, "the armed server did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Inserts and updates until the server stops; those acknowledged must all be there after.
    let mut acknowledged: std::collections::BTreeMap<i64, (i32, i64)> = Default::default();
    for i in 0..100_000i64 {
        let (id, customer, amount) = (i, (i % 7) as i32, i % 100);
        match c.execute("INSERT INTO orders VALUES ($1, $2, $3)", &[&id, &customer, &amount]).await {
            Ok(_) => {
                acknowledged.insert(id, (customer, amount));
            }
            Err(_) => break,
        }
    }
    assert!(server.wait_exit(Duration::from_secs(30)), "the server went on after a failed view commit");
    assert!(server.log_text().contains("exiting (code 70)"), "{}", server.log_text());
    assert!(server.log_text().contains(says), "{}", server.log_text());
    assert!(acknowledged.len() > 10, "the fault fired before any insert: {}", acknowledged.len());
    server.env.clear();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    let table = common::rows(&c, "SELECT id, customer, amount FROM orders ORDER BY id").await;
    let expected: Vec<String> = acknowledged.iter().map(|(id, (c, a))| format!("{id}|{c}|{a}")).collect();
    // An insert whose acknowledgement was lost with the connection may be there too.
    assert!(expected.iter().all(|row| table.contains(row)) && table.len() <= expected.len() + 1, "table lost rows");
    assert_eq!(
        common::rows(&c, "SELECT customer, n, total FROM per_customer ORDER BY customer").await,
        common::rows(&c, "SELECT customer, count(*), sum(amount) FROM orders GROUP BY customer ORDER BY customer")
            .await
    );
    assert_eq!(
        common::rows(&c, "SELECT id, amount FROM big_orders ORDER BY id").await,
        common::rows(&c, "SELECT id, amount FROM orders WHERE amount > 50 ORDER BY id").await
    );
}

/// A view whose own commit fails (`WEIR_FAULT=view.commit`) stops alone: it keeps its rows,
/// takes no more changes and passes barriers on, so FLUSH, checkpoints and a view over it go
/// on; the error is in `weir_catalog.view_errors`; after a restart it is still stopped (not
/// resumed with a gap), and the other view follows every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_whose_commit_fails_stops_alone_and_stays_stopped() {
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT);
         CREATE MATERIALIZED VIEW low AS SELECT k, v FROM t WHERE k < 1000000;
         CREATE MATERIALIZED VIEW low_total AS SELECT count(*) AS n FROM low;
         CREATE MATERIALIZED VIEW all_total AS SELECT count(*) AS n FROM t;",
    )
    .await
    .unwrap();
    drop(c);
    // The 30th commit of any view fails in the view's own work.
    server.env = vec![("WEIR_FAULT".into(), "view.commit@30".into())];
    server.restart();
    let c = server.connect().await;
    let mut stopped = None;
    for i in 0..2_000i64 {
        c.execute("INSERT INTO t VALUES ($1, $1)", &[&i]).await.unwrap();
        let errors = common::rows(&c, "SELECT view_name FROM weir_catalog.view_errors").await;
        if let Some(name) = errors.first() {
            stopped = Some(name.clone());
            break;
        }
    }
    let stopped = stopped.expect("no view stopped");
    assert!(server.log_text().contains("the view stopped"), "{}", server.log_text());
    // FLUSH and checkpoints go on; the stopped view keeps its rows and takes no more.
    let flush = tokio::time::timeout(Duration::from_secs(20), c.batch_execute("FLUSH")).await;
    assert!(matches!(flush, Ok(Ok(()))), "FLUSH after a view stopped: {flush:?}");
    let frozen = common::rows(&c, &format!("SELECT count(*) FROM {stopped}")).await;
    let now = server_now(&c).await;
    c.execute("INSERT INTO t VALUES (999998, 1)", &[]).await.unwrap();
    complete_checkpoint_after(&c, now).await;
    tokio::time::timeout(Duration::from_secs(20), c.batch_execute("FLUSH")).await.unwrap().unwrap();
    assert_eq!(common::rows(&c, &format!("SELECT count(*) FROM {stopped}")).await, frozen);
    // A view beside the stopped one (not reading it) follows every change.
    let (beside, its_query) = if stopped == "all_total" {
        ("SELECT count(*) FROM low", "SELECT count(*) FROM t WHERE k < 1000000")
    } else {
        ("SELECT n FROM all_total", "SELECT count(*) FROM t")
    };
    assert_eq!(common::rows(&c, beside).await, common::rows(&c, its_query).await, "beside {stopped}");
    // A restart (SIGKILL, no fault) finds it stopped still.
    server.env.clear();
    let c = server.sigkill_and_reconnect().await;
    c.execute("INSERT INTO t VALUES (999999, 1)", &[]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), c.batch_execute("FLUSH")).await.unwrap().unwrap();
    assert_eq!(common::rows(&c, &format!("SELECT count(*) FROM {stopped}")).await, frozen, "resumed after a restart");
    assert_eq!(
        common::rows(&c, "SELECT view_name FROM weir_catalog.view_errors").await,
        std::slice::from_ref(&stopped),
        "the stop is shown after a restart"
    );
    assert_eq!(common::rows(&c, beside).await, common::rows(&c, its_query).await, "beside {stopped}, restarted");
    // DROP works on a stopped view (low_total reads low: drop it first).
    if stopped != "low" {
        c.batch_execute(&format!("DROP MATERIALIZED VIEW {stopped}")).await.unwrap();
    } else {
        c.batch_execute("DROP MATERIALIZED VIEW low_total; DROP MATERIALIZED VIEW low").await.unwrap();
    }
}

/// A bounded source's end is checkpointed at once, not an interval later (a final checkpoint):
/// after a SIGKILL the restarted server reads none of the source again, and its view answers as
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_source_is_checkpointed_at_once() {
    let mut server = TestServer::start_with(&["--checkpoint-interval", "3600s"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '20000',
           nexmark.events.per.second = '10000', nexmark.max.chunk.size = '500');
         CREATE MATERIALIZED VIEW n AS SELECT count(*) AS n, sum(price) AS total FROM bid;",
    )
    .await
    .unwrap();
    // The CREATE's own checkpoint is before this; the interval is an hour.
    let since = server_now(&c).await;
    complete_checkpoint_after(&c, since).await;
    let state: String =
        c.query_one("SELECT state FROM weir_catalog.sources WHERE source_name = 'bid'", &[]).await.unwrap().get(0);
    assert_eq!(state, "finished");
    let answer = "SELECT CAST(n AS BIGINT), CAST(total AS BIGINT) FROM n";
    let before: (i64, i64) = c.query_one(answer, &[]).await.map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!(before.0, 20000 / 50 * 46);
    drop(c);
    server.restart();
    let c = server.connect().await;
    let after: (i64, i64) = c.query_one(answer, &[]).await.map(|r| (r.get(0), r.get(1))).unwrap();
    assert_eq!(after, before);
    let metrics = server.metrics_text();
    let read_again = metrics.lines().find(|l| l.starts_with("weir_source_rows_total{source=\"bid\"}"));
    assert!(read_again.is_none_or(|l| l.ends_with(" 0")), "{read_again:?}");
}

/// The metrics port's probes: `/healthz` answers while the process runs; `/readyz` says ready
/// once the server serves, not ready (503, with the reason) while its checkpoint store does not
/// take its checkpoints, and ready again once one is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_checkpoint_store() {
    let store = tempfile::tempdir().unwrap();
    let url = store.path().join("checkpoints");
    let url = url.to_str().unwrap().to_string();
    let server = TestServer::start_with(&["--checkpoint-url", &url, "--checkpoint-interval", "200ms"]);
    let c = server.connect().await;
    c.batch_execute("SET implicit_flush = true; CREATE TABLE t (x INT); INSERT INTO t VALUES (1);").await.unwrap();
    complete_checkpoint_after(&c, server_now(&c).await).await;
    assert!(server.http_get("/healthz").starts_with("HTTP/1.1 200"), "{}", server.http_get("/healthz"));
    let ready = server.http_get("/readyz");
    assert!(ready.starts_with("HTTP/1.1 200") && ready.ends_with("ready\n"), "{ready}");
    // The store's place taken by a file: uploads fail, and the server says it is not ready.
    std::fs::rename(&url, store.path().join("moved")).unwrap();
    std::fs::write(&url, b"not a directory").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let not_ready = loop {
        let answer = server.http_get("/readyz");
        if answer.starts_with("HTTP/1.1 503") {
            break answer;
        }
        assert!(Instant::now() < deadline, "still ready with its checkpoint store gone: {answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(not_ready.contains("not ready: the checkpoint store did not take checkpoint"), "{not_ready}");
    // Alive all along, and its queries still answer.
    assert!(server.http_get("/healthz").starts_with("HTTP/1.1 200"));
    assert_eq!(count(&c, "t").await, 1);
    // The store back: the next checkpoint is taken, and the server is ready again.
    std::fs::remove_file(&url).unwrap();
    std::fs::rename(store.path().join("moved"), &url).unwrap();
    complete_checkpoint_after(&c, server_now(&c).await).await;
    let ready = server.http_get("/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
}

/// SIGTERM: the last checkpoint is taken and reaches the checkpoint store before the process
/// exits, and the stop logs no error: a server on a new, empty data directory restores the rows
/// written just before it (no periodic checkpoint came in between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_uploads_its_last_checkpoint() {
    let store = tempfile::tempdir().unwrap();
    let url = store.path().join("checkpoints");
    let url = url.to_str().unwrap().to_string();
    let mut server = TestServer::start_with(&["--checkpoint-url", &url, "--checkpoint-interval", "3600s"]);
    // Uploads slowed down, as to an object store far away: the stop must wait for its own.
    server.env = vec![("WEIR_FAULT".into(), "checkpoint.slow_upload".into())];
    server.kill();
    server.start_again();
    {
        let c = server.connect().await;
        c.batch_execute(
            "SET implicit_flush = true;
             CREATE TABLE t (x INT);
             CREATE MATERIALIZED VIEW n AS SELECT count(*) AS rows FROM t;
             INSERT INTO t SELECT * FROM generate_series(1, 5000);",
        )
        .await
        .unwrap();
    }
    server.stop();
    let log = server.log_text();
    assert!(log.contains("checkpoint taken at shutdown and uploaded"), "{log}");
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "a clean stop logged errors: {errors:?}");
    let fresh = TestServer::start_with(&["--checkpoint-url", &url]);
    let c = fresh.connect().await;
    assert_eq!(count(&c, "t").await, 5000);
    assert_eq!(c.query_one("SELECT rows FROM n", &[]).await.unwrap().get::<_, i64>(0), 5000);
}
