//! The key-read oracle: a read whose conditions narrow a relation's key (point lookups, key
//! ranges, prefixes of a composite key; `catalog::key_access`) returns exactly the rows of
//! the same read with the key columns hidden behind expressions no read can narrow by, over
//! a table and a view, after random inserts, updates and deletes (which narrow the same way).

mod common;

use common::{assert_scan_lines, rows, Rng, TestServer};

/// A random value for a column, as SQL: mostly values the data holds, sometimes values
/// between them, NULL, or a value of another type.
fn value(rng: &mut Rng, column: char) -> String {
    match (column, rng.below(12)) {
        (_, 0) => "NULL".into(),
        ('a' | 'x', 1) => format!("{}.5", rng.below(10) - 5),
        ('a' | 'x', 2) => "3000000000".into(),
        ('a' | 'x', _) => (rng.below(12) - 6).to_string(),
        ('b' | 'y', _) => format!("'{}'", ["", "a", "ab", "abc", "b", "ä", "a b", "zz"][rng.below(8) as usize]),
        ('c', _) => format!("TIMESTAMP '2026-01-01 00:00:{:02}'", rng.below(6) * 10),
        _ => unreachable!(),
    }
}

/// One condition on `column`, written over `name` (the column itself or an expression of it).
fn condition(rng: &mut Rng, column: char, name: &str) -> String {
    let v = |rng: &mut Rng| value(rng, column);
    match rng.below(9) {
        0 => format!("{name} = {}", v(rng)),
        1 => format!("{} = {name}", v(rng)),
        2 => format!("{name} IN ({}, {}, {})", v(rng), v(rng), v(rng)),
        3 => format!("({name} = {} OR {name} = {})", v(rng), v(rng)),
        4 => format!("{name} < {}", v(rng)),
        5 => format!("{name} <= {}", v(rng)),
        6 => format!("{} < {name}", v(rng)),
        7 => format!("{name} >= {}", v(rng)),
        _ => format!("{name} BETWEEN {} AND {}", v(rng), v(rng)),
    }
}

/// A random WHERE clause over `columns`, twice: as written (narrowable), and with each column
/// behind an expression of the same value (never narrowed).
fn where_clause(rng: &mut Rng, columns: &[(char, &str)]) -> (String, String) {
    let n = 1 + rng.below(3);
    let (mut plain, mut hidden) = (vec![], vec![]);
    for _ in 0..n {
        let (column, opaque) = columns[rng.below(columns.len() as u64) as usize];
        let seed = rng.0;
        plain.push(condition(rng, column, &column.to_string()));
        // The same condition, from the same random state.
        let mut again = Rng(seed);
        hidden.push(condition(&mut again, column, opaque));
    }
    (plain.join(" AND "), hidden.join(" AND "))
}

fn random_change(rng: &mut Rng) -> String {
    let (cols, _) = where_clause(rng, &[('a', ""), ('b', ""), ('c', "")]);
    match rng.below(6) {
        0..=2 => {
            let rows: Vec<String> = (0..1 + rng.below(6))
                .map(|_| {
                    let pick = |rng: &mut Rng, c| loop {
                        let v = value(rng, c);
                        if v != "NULL" && !v.contains(".5") && v != "3000000000" {
                            return v;
                        }
                    };
                    let (a, b, c) = (pick(rng, 'a'), pick(rng, 'b'), pick(rng, 'c'));
                    format!("({a}, {b}, {c}, {})", rng.below(100))
                })
                .collect();
            format!("INSERT INTO r VALUES {}", rows.join(", "))
        }
        3 => format!("UPDATE r SET v = v + 1 WHERE {cols}"),
        4 => format!("DELETE FROM r WHERE {cols}"),
        _ => format!(
            "INSERT INTO bag VALUES ({}, {}), ({}, {})",
            value(rng, 'x'),
            value(rng, 'y'),
            value(rng, 'x'),
            value(rng, 'y')
        )
        .replace("3000000000", "7")
        .replace(".5", ""),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_narrowed_by_key_equal_full_reads() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE r (a INT, b TEXT, c TIMESTAMP, v INT, PRIMARY KEY (a, b, c));
             CREATE TABLE bag (x INT, y TEXT);
             CREATE MATERIALIZED VIEW per_xy AS SELECT x, y, count(*) AS n FROM bag GROUP BY x, y;",
        )
        .await
        .unwrap();
    let table_columns = [('a', "(a + 0)"), ('b', "(b || '')"), ('c', "(c + INTERVAL '0' SECOND)")];
    let view_columns = [('x', "(x + 0)"), ('y', "(y || '')")];
    let mut rng = Rng(2026);
    let mut narrowed = 0;
    for step in 0..120 {
        let change = random_change(&mut rng);
        client.batch_execute(&change).await.unwrap_or_else(|e| panic!("{change}: {e:?}"));
        client.simple_query("FLUSH").await.unwrap();
        for _ in 0..4 {
            for (relation, columns) in [("r", &table_columns[..]), ("per_xy", &view_columns[..])] {
                let (plain, hidden) = where_clause(&mut rng, columns);
                let limit =
                    if rng.below(3) == 0 { format!(" ORDER BY 1, 2, 3 LIMIT {}", rng.below(5)) } else { String::new() };
                let query = format!("SELECT * FROM {relation} WHERE {plain}{limit}");
                let reference = format!("SELECT * FROM {relation} WHERE {hidden}{limit}");
                let plan = rows(&client, &format!("EXPLAIN {query}")).await.join("\n");
                narrowed += usize::from(!plan.contains("access=all"));
                assert_eq!(
                    rows(&client, &query).await,
                    rows(&client, &reference).await,
                    "step {step} after {change}: {query}\n{plan}"
                );
            }
        }
    }
    eprintln!("{narrowed} of 960 reads narrowed");
    // Most conditions narrow the read: the test compares narrowed reads, not two full ones.
    assert!(narrowed > 400, "only {narrowed} of 960 reads were narrowed");
}

/// EXPLAIN says which rows a scan reads: `keys(n)` looked up, `ranges(n)` of keys, or `all`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_rows_a_scan_reads() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE kv (k INT PRIMARY KEY, v TEXT);
             CREATE TABLE pair (a BIGINT, b TEXT, n INT, PRIMARY KEY (a, b));
             CREATE TABLE plain (x INT);
             CREATE MATERIALIZED VIEW per_a AS SELECT a, count(*) AS n, sum(n) AS s FROM pair GROUP BY a;",
        )
        .await
        .unwrap();
    let golden = [
        ("SELECT v FROM kv WHERE k = 5", "RelationScanExec: relation=kv, access=keys(1)"),
        ("SELECT v FROM kv WHERE k IN (5, 6, 5)", "RelationScanExec: relation=kv, access=keys(2)"),
        ("SELECT v FROM kv WHERE k > 5 AND k <= 9", "RelationScanExec: relation=kv, access=ranges(1)"),
        ("SELECT v FROM kv WHERE k + 0 = 5", "RelationScanExec: relation=kv, access=all"),
        ("SELECT v FROM kv WHERE v = 'x'", "RelationScanExec: relation=kv, access=all"),
        ("SELECT * FROM kv LIMIT 3", "RelationScanExec: relation=kv, access=all, limit=3"),
        ("SELECT * FROM pair WHERE a = 1 AND b = 'x'", "RelationScanExec: relation=pair, access=keys(1)"),
        ("SELECT * FROM pair WHERE a IN (1, 2) AND b > 'x'", "RelationScanExec: relation=pair, access=ranges(2)"),
        ("SELECT * FROM pair WHERE a = 1", "RelationScanExec: relation=pair, access=ranges(1)"),
        ("SELECT * FROM pair WHERE b = 'x'", "RelationScanExec: relation=pair, access=all"),
        ("SELECT * FROM per_a WHERE a > 1", "RelationScanExec: relation=per_a, access=ranges(1)"),
        ("SELECT * FROM per_a WHERE n > 1", "RelationScanExec: relation=per_a, access=all"),
        ("SELECT * FROM plain WHERE x = 1", "RelationScanExec: relation=plain, access=all"),
    ];
    assert_scan_lines(&client, &golden).await;
}

/// EXPLAIN's last row, `weir_path`, says how a statement runs again: a key lookup without
/// DataFusion, a plan kept per session, or planning at each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_which_path_a_statement_takes() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE kv (k INT PRIMARY KEY, g INT, v TEXT);
             CREATE INDEX kv_g ON kv (g) INCLUDE (v);",
        )
        .await
        .unwrap();
    let golden = [
        ("SELECT v FROM kv WHERE k = 5", "weir_path|key lookup: one lookup of kv by its primary key"),
        ("SELECT v FROM kv WHERE g = 5", "weir_path|key lookup: one range of an index of kv"),
        ("SELECT count(*) FROM kv WHERE v > 'a'", "weir_path|DataFusion: planned once per session and kept"),
        ("UPDATE kv SET v = 'x' WHERE k = 1", "weir_path|DataFusion: planned once per session and kept"),
        ("SELECT now(), v FROM kv", "weir_path|DataFusion: planned at each run"),
    ];
    for (query, path) in golden {
        let plan = rows(&client, &format!("EXPLAIN {query}")).await;
        assert!(plan.iter().any(|line| line.starts_with(path)), "EXPLAIN {query}:\n{}", plan.join("\n"));
    }
}

/// A read of every row of a relation whose stored bytes reach `min_parallel_table_scan_size`
/// goes in parts, one per partition, each read by its own thread (`catalog::scan`), and gives
/// the rows a read in one part gives, after changes too; a transaction's reads (its writes over
/// the store) and reads that narrow by key stay whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_in_parts_equal_whole_reads() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE readings (id BIGINT PRIMARY KEY, device INT, value DOUBLE PRECISION);
             CREATE MATERIALIZED VIEW by_device AS SELECT device, count(*) AS n, sum(value) AS s FROM readings GROUP BY device;
             CREATE MATERIALIZED VIEW copied AS SELECT id, device, value FROM readings;
             INSERT INTO readings SELECT x, x % 13, x * 0.5 FROM generate_series(1, 20000) AS s(x);
             FLUSH;",
        )
        .await
        .unwrap();
    assert_eq!(rows(&client, "SHOW min_parallel_table_scan_size").await, ["8MB"]);
    let queries = [
        "SELECT count(*), sum(value), min(id), max(id) FROM copied",
        "SELECT device, count(*), sum(value) FROM copied GROUP BY device ORDER BY device",
        "SELECT * FROM by_device ORDER BY device",
        "SELECT id, value FROM readings WHERE value > 9990 ORDER BY id",
        "SELECT count(*) FROM copied c JOIN by_device d ON c.device = d.device WHERE d.n > 1500",
        // A LIMIT above the parts (not pushed into the scan: a condition is left): the parts
        // whose rows are not needed stop.
        "SELECT count(*) FROM (SELECT id FROM copied WHERE value > 0 LIMIT 5) AS s",
    ];
    let answers = |client| async move {
        let mut out = Vec::new();
        for query in queries {
            out.push(rows(client, query).await);
        }
        out
    };
    for change in [
        "",
        "UPDATE readings SET value = value + 1 WHERE id % 3 = 0",
        "DELETE FROM readings WHERE id % 5 = 0",
        "INSERT INTO readings SELECT x, x % 17, 1.0 FROM generate_series(20001, 21000) AS s(x)",
    ] {
        if !change.is_empty() {
            client.batch_execute(change).await.unwrap();
            client.batch_execute("FLUSH").await.unwrap();
        }
        client.batch_execute("RESET min_parallel_table_scan_size").await.unwrap();
        let whole = answers(&client).await;
        assert_scan_lines(&client, &[("SELECT * FROM copied", "RelationScanExec: relation=copied, access=all")]).await;
        client.batch_execute("SET min_parallel_table_scan_size = 0").await.unwrap();
        assert_scan_lines(
            &client,
            &[
                ("SELECT * FROM copied", "RelationScanExec: relation=copied, access=all in 2 parts"),
                ("SELECT * FROM readings WHERE id < 10", "RelationScanExec: relation=readings, access=ranges(1)"),
                ("SELECT * FROM copied WHERE id = 10", "RelationScanExec: relation=copied, access=ranges(1)"),
            ],
        )
        .await;
        assert_eq!(answers(&client).await, whole, "after {change:?}");
    }
    assert_eq!(rows(&client, "SELECT count(*) FROM copied").await, ["17000"]);
    // A transaction's reads see its own writes: read whole.
    client.batch_execute("BEGIN; DELETE FROM readings WHERE id = 1").await.unwrap();
    assert_scan_lines(&client, &[("SELECT * FROM readings", "RelationScanExec: relation=readings, access=all")]).await;
    client.batch_execute("ROLLBACK").await.unwrap();
    for (value, bytes) in [("'1MB'", "1MB"), ("16", "16")] {
        client.batch_execute(&format!("SET min_parallel_table_scan_size = {value}")).await.unwrap();
        assert_eq!(rows(&client, "SHOW min_parallel_table_scan_size").await, [bytes]);
    }
    let refused = client.batch_execute("SET min_parallel_table_scan_size = '3 parsecs'").await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE), "{refused:?}");
    // set_config, as drivers call it, does what SET does.
    client.batch_execute("RESET min_parallel_table_scan_size").await.unwrap();
    assert_eq!(rows(&client, "SELECT set_config('min_parallel_table_scan_size', '0', false)").await, ["0"]);
    assert_scan_lines(&client, &[("SELECT * FROM copied", "RelationScanExec: relation=copied, access=all in 2 parts")])
        .await;
    let refused =
        client.batch_execute("SELECT set_config('min_parallel_table_scan_size', 'lots', false)").await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE), "{refused:?}");
}
