//! The view oracle: after any sequence of inserts, updates and deletes, every materialized view
//! equals its own SELECT run as a batch query over the tables; and a server killed with
//! SIGKILL and restarted gives the same answers.

mod common;

use common::TestServer;

/// The views under test: (name, query).
const VIEWS: &[(&str, &str)] = &[
    (
        "by_group",
        "SELECT g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi, round(avg(v), 3) AS mean FROM a GROUP BY g",
    ),
    ("joined", "SELECT a.k, a.v, b.w FROM a JOIN b ON a.g = b.k WHERE b.w > 10"),
    ("join_agg", "SELECT b.w, count(*) AS n, sum(a.v) AS s FROM a JOIN b ON a.g = b.k GROUP BY b.w"),
    ("residual", "SELECT a.k, b.k AS bk FROM a JOIN b ON a.g = b.k AND a.v < b.w"),
    ("projected", "SELECT k, v * 2 + g AS x FROM a WHERE v % 3 <> 0"),
    ("distinct_g", "SELECT DISTINCT g FROM a"),
    ("everything", "SELECT count(*) AS n, sum(v) AS s, max(g) AS top FROM a"),
    ("union", "SELECT x AS y FROM bag UNION ALL SELECT v AS y FROM a WHERE v > 50"),
    ("on_view", "SELECT g, s FROM by_group WHERE n > 1"),
    ("bag_counts", "SELECT x, count(*) AS n FROM bag GROUP BY x"),
    ("left_join", "SELECT a.k, a.g, b.w FROM a LEFT JOIN b ON a.g = b.k"),
    ("right_join", "SELECT a.k, b.k AS bk, b.w FROM a RIGHT JOIN b ON a.g = b.k"),
    ("full_join", "SELECT a.k, b.k AS bk FROM a FULL JOIN b ON a.g = b.k"),
    ("distincts", "SELECT g, count(DISTINCT v % 5) AS d, bool_and(v > 10) AS all_big, bool_or(v > 90) AS any_huge FROM a GROUP BY g"),
    ("names", "SELECT g, string_agg(CAST(v AS VARCHAR), ',' ORDER BY CAST(v AS VARCHAR)) AS vs FROM a GROUP BY g"),
    // Grouped by the join key: the aggregate reads the join's shards without an exchange.
    ("join_then_group", "SELECT a.g, count(*) AS n, sum(b.w) AS s FROM a JOIN b ON a.g = b.k GROUP BY a.g"),
    // Grouped by another column than the join key: the rows must move again.
    ("join_then_regroup", "SELECT a.k, count(*) AS n FROM a JOIN bag ON a.g = bag.x GROUP BY a.k"),
    ("per_b", "SELECT b.k AS bk, count(a.k) AS n, sum(a.v) AS s FROM b LEFT JOIN a ON a.g = b.k GROUP BY b.k"),
];

/// A small deterministic generator (xorshift), so a failing seed can be replayed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }
}

fn random_statement(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=3 => {
            let rows: Vec<String> = (0..1 + rng.below(4))
                .map(|_| {
                    // Group 6 is NULL: keys that never join.
                    let g = match rng.below(7) {
                        6 => "NULL".to_string(),
                        g => g.to_string(),
                    };
                    format!("({}, {g}, {})", rng.below(40), rng.below(100))
                })
                .collect();
            format!("INSERT INTO a VALUES {}", rows.join(", "))
        }
        4 => format!("UPDATE a SET v = v + {} WHERE g = {}", rng.below(20), rng.below(6)),
        5 => format!("UPDATE a SET g = {} WHERE k < {}", rng.below(6), rng.below(40)),
        6 => format!("DELETE FROM a WHERE k % 7 = {}", rng.below(7)),
        7 => format!("INSERT INTO b VALUES ({}, {})", rng.below(6), rng.below(40)),
        8 => format!("DELETE FROM b WHERE k = {}", rng.below(6)),
        _ => {
            if rng.below(2) == 0 {
                format!("INSERT INTO bag VALUES ({}), ({})", rng.below(5), rng.below(5))
            } else {
                format!("DELETE FROM bag WHERE x = {}", rng.below(5))
            }
        }
    }
}

async fn rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut out: Vec<String> = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).unwrap_or("NULL").to_string()).collect::<Vec<_>>().join("|"))
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

async fn check_views(client: &tokio_postgres::Client, context: &str) {
    client.simple_query("FLUSH").await.unwrap();
    for (name, query) in VIEWS {
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = rows(client, query).await;
        assert_eq!(view, batch, "view {name} differs from its query {context}");
    }
}

async fn setup(client: &tokio_postgres::Client, parallelism: usize) {
    client.batch_execute(&format!("SET streaming_parallelism = {parallelism}")).await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE a (k INT PRIMARY KEY, g INT, v INT);
             CREATE TABLE b (k INT PRIMARY KEY, w INT);
             CREATE TABLE bag (x INT);
             INSERT INTO a VALUES (1, 1, 10), (2, 1, 20), (3, 2, 30);
             INSERT INTO b VALUES (1, 15), (2, 5);",
        )
        .await
        .unwrap();
    for (name, query) in VIEWS {
        client.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}")).await.unwrap();
    }
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
        for (name, _) in VIEWS {
            all.push(rows(&client, &format!("SELECT * FROM {name}")).await);
        }
        all
    };
    server.kill();
    server.restart();
    let client = server.connect().await;
    for ((name, _), expected) in VIEWS.iter().zip(&before) {
        assert_eq!(&rows(&client, &format!("SELECT * FROM {name}")).await, expected, "view {name} after restart");
    }
    // And they keep following changes.
    for _ in 0..40 {
        client.batch_execute(&random_statement(&mut rng)).await.unwrap();
    }
    check_views(&client, "after restart and more changes").await;
}
