//! Transaction blocks between sessions: a block's writes are seen by nobody else until COMMIT,
//! and then all at once, views included; ROLLBACK, a dropped connection and kill -9 leave
//! nothing; a second writer of a table waits for the block, so no update is lost; two blocks
//! waiting for each other end with one failing 40P01 instead of hanging.

mod common;

use std::time::Duration;

use common::{rows, TestServer};

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_is_seen_by_others_and_by_views_only_at_commit() {
    let server = TestServer::start();
    let (a, b) = (server.connect().await, server.connect().await);
    a.batch_execute(
        "CREATE TABLE acct (id INT PRIMARY KEY, balance INT);
         CREATE TABLE moves (account INT, amount INT);
         CREATE MATERIALIZED VIEW totals AS SELECT sum(balance) AS balance, count(*) AS accounts FROM acct;
         CREATE MATERIALIZED VIEW moved AS SELECT account, sum(amount) AS amount FROM moves GROUP BY account;
         INSERT INTO acct VALUES (1, 100), (2, 50);",
    )
    .await
    .unwrap();
    a.batch_execute(
        "BEGIN;
         UPDATE acct SET balance = balance - 30 WHERE id = 1;
         UPDATE acct SET balance = balance + 30 WHERE id = 2;
         INSERT INTO acct VALUES (3, 7);
         INSERT INTO moves VALUES (1, -30), (2, 30);",
    )
    .await
    .unwrap();
    assert_eq!(rows(&a, "SELECT id, balance FROM acct").await, ["1|70", "2|80", "3|7"], "the block reads its writes");
    b.batch_execute("FLUSH").await.unwrap();
    assert_eq!(rows(&b, "SELECT id, balance FROM acct").await, ["1|100", "2|50"], "others do not");
    assert_eq!(count(&b, "SELECT count(*) FROM moves").await, 0);
    assert_eq!(rows(&b, "SELECT * FROM totals").await, ["150|2"], "nor do views");
    assert_eq!(rows(&b, "SELECT * FROM moved").await, Vec::<String>::new());
    a.batch_execute("COMMIT").await.unwrap();
    b.batch_execute("FLUSH").await.unwrap();
    assert_eq!(rows(&b, "SELECT id, balance FROM acct").await, ["1|70", "2|80", "3|7"]);
    assert_eq!(rows(&b, "SELECT * FROM totals").await, ["157|3"]);
    assert_eq!(rows(&b, "SELECT * FROM moved").await, ["1|-30", "2|30"]);
    // ROLLBACK: nothing, anywhere.
    a.batch_execute("BEGIN; DELETE FROM acct; INSERT INTO moves VALUES (9, 9); ROLLBACK;").await.unwrap();
    b.batch_execute("FLUSH").await.unwrap();
    assert_eq!(rows(&b, "SELECT * FROM totals").await, ["157|3"]);
    assert_eq!(count(&b, "SELECT count(*) FROM moves").await, 2);
    // Each view equals its query.
    assert_eq!(rows(&b, "SELECT * FROM totals").await, rows(&b, "SELECT sum(balance), count(*) FROM acct").await);
    assert_eq!(
        rows(&b, "SELECT * FROM moved").await,
        rows(&b, "SELECT account, sum(amount) FROM moves GROUP BY account").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_waits_for_the_block_and_no_update_is_lost() {
    let server = TestServer::start();
    let (a, b) = (server.connect().await, server.connect().await);
    a.batch_execute("CREATE TABLE counter (id INT PRIMARY KEY, n INT); INSERT INTO counter VALUES (1, 0);")
        .await
        .unwrap();
    a.batch_execute("BEGIN; UPDATE counter SET n = n + 1 WHERE id = 1;").await.unwrap();
    let waiting = tokio::spawn(async move {
        b.batch_execute("UPDATE counter SET n = n + 10 WHERE id = 1").await.unwrap();
        b
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the second writer waits for the block");
    // Readers do not wait.
    assert_eq!(rows(&server.connect().await, "SELECT n FROM counter").await, ["0"]);
    a.batch_execute("COMMIT").await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap();
    assert_eq!(rows(&b, "SELECT n FROM counter").await, ["11"], "both updates count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_blocks_waiting_for_each_other_end_with_one_deadlock_error() {
    let server = TestServer::start();
    let (a, b) = (server.connect().await, server.connect().await);
    a.batch_execute("CREATE TABLE x (v INT); CREATE TABLE y (v INT);").await.unwrap();
    a.batch_execute("BEGIN; INSERT INTO x VALUES (1);").await.unwrap();
    b.batch_execute("BEGIN; INSERT INTO y VALUES (2);").await.unwrap();
    let first = tokio::spawn(async move {
        let waited = a.batch_execute("INSERT INTO y VALUES (1)").await;
        (a, waited)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let error = b.batch_execute("INSERT INTO x VALUES (2)").await.unwrap_err();
    assert_eq!(error.code().map(|c| c.code()), Some("40P01"), "{error}");
    b.batch_execute("ROLLBACK").await.unwrap();
    let (a, waited) = tokio::time::timeout(Duration::from_secs(10), first).await.unwrap().unwrap();
    waited.unwrap();
    a.batch_execute("COMMIT").await.unwrap();
    assert_eq!(rows(&b, "SELECT v FROM x UNION ALL SELECT v FROM y").await, ["1", "1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_left_open_by_a_dropped_connection_or_a_kill_leaves_nothing() {
    let mut server = TestServer::start();
    let a = server.connect().await;
    a.batch_execute("CREATE TABLE t (id INT PRIMARY KEY, v INT); INSERT INTO t VALUES (1, 1);").await.unwrap();
    a.batch_execute("BEGIN; UPDATE t SET v = 2 WHERE id = 1; INSERT INTO t VALUES (2, 2);").await.unwrap();
    drop(a);
    // Its lock went with it: a writer does not wait.
    let b = server.connect().await;
    tokio::time::timeout(Duration::from_secs(10), b.batch_execute("INSERT INTO t VALUES (3, 3)"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows(&b, "SELECT id, v FROM t").await, ["1|1", "3|3"]);
    // Open at a kill: gone after the restart; committed ones stay.
    b.batch_execute("BEGIN; INSERT INTO t VALUES (4, 4); COMMIT; BEGIN; DELETE FROM t;").await.unwrap();
    let c = server.sigkill_and_reconnect().await;
    assert_eq!(rows(&c, "SELECT id, v FROM t").await, ["1|1", "3|3", "4|4"]);
}

/// After a crash the change log is applied again in commit order: a block's entry carries its
/// writes to every table it wrote, so an earlier statement's write to one of them, logged under
/// that table, must not be applied over it (all in one epoch, nothing checkpointed since).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_replays_a_block_after_the_statements_before_it() {
    let mut server = TestServer::start_with(&["--barrier-interval-ms", "600000", "--checkpoint-interval", "off"]);
    let a = server.connect().await;
    a.batch_execute(
        "CREATE TABLE first (k INT PRIMARY KEY, v INT);
         CREATE TABLE second (k INT PRIMARY KEY, v INT);
         INSERT INTO first VALUES (5, 0);
         INSERT INTO second VALUES (5, 0);
         UPDATE second SET v = 1 WHERE k = 5;
         BEGIN;
         UPDATE first SET v = 2 WHERE k = 5;
         UPDATE second SET v = 2 WHERE k = 5;
         COMMIT;",
    )
    .await
    .unwrap();
    let b = server.sigkill_and_reconnect().await;
    assert_eq!(rows(&b, "SELECT v FROM first UNION ALL SELECT v FROM second").await, ["2", "2"]);
}

/// `RETURNING` gives exactly the rows the statement changed (new rows of INSERT and UPDATE, old
/// of DELETE), with the statement's tag, by the extended protocol with parameters too; a view
/// sees the change once; inside a block a ROLLBACK takes the change back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returning_gives_the_rows_changed() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT);
         CREATE MATERIALIZED VIEW total AS SELECT sum(balance) AS s FROM accounts;
         INSERT INTO accounts VALUES (1, 100), (2, 50);",
    )
    .await
    .unwrap();
    let rows = c
        .query("UPDATE accounts SET balance = balance - $1 WHERE id = $2 RETURNING id, balance", &[&30i32, &1i32])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].get::<_, i32>(0), rows[0].get::<_, i32>(1)), (1, 70));
    let inserted =
        c.query("INSERT INTO accounts VALUES (3, 5), (4, 6) RETURNING balance * 10 AS tenfold", &[]).await.unwrap();
    let mut tenfold: Vec<i32> = inserted.iter().map(|r| r.get(0)).collect();
    tenfold.sort();
    assert_eq!(tenfold, vec![50, 60]);
    // The tag counts the rows, as Postgres's does.
    let messages = c.simple_query("DELETE FROM accounts WHERE balance < 10 RETURNING id").await.unwrap();
    let mut deleted: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
            _ => None,
        })
        .collect();
    deleted.sort();
    assert_eq!(deleted, ["3", "4"]);
    assert!(messages.iter().any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::CommandComplete(2))));
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(count(&c, "SELECT s FROM total").await, 120);
    // In a block, rolled back with it.
    c.batch_execute("BEGIN").await.unwrap();
    let gone = c.query("DELETE FROM accounts RETURNING id", &[]).await.unwrap();
    assert_eq!(gone.len(), 2);
    c.batch_execute("ROLLBACK; FLUSH").await.unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM accounts").await, 2);
    assert_eq!(count(&c, "SELECT s FROM total").await, 120);
}
