//! The index oracle (`catalog::index`): reads that go through an index return exactly the rows
//! of the same reads over an unindexed twin of the relation, after random inserts, upserts,
//! updates and deletes, over a keyed table, a table without a key (duplicate rows) and a
//! materialized view, and after a SIGKILL and restart (the index is restored with its
//! relation, not rebuilt). EXPLAIN golden lines say which index a read uses.

mod common;

use common::{assert_scan_lines, rows, Rng, TestServer};

/// Tables and views in pairs: each indexed one has an unindexed twin fed the same changes.
const SCHEMA: &str = "
    CREATE TABLE s (id INT PRIMARY KEY, g INT, t TEXT, v INT);
    CREATE TABLE s_twin (id INT PRIMARY KEY, g INT, t TEXT, v INT);
    CREATE TABLE bag (x INT, y TEXT);
    CREATE TABLE bag_twin (x INT, y TEXT);
    CREATE MATERIALIZED VIEW per_g AS SELECT g, t, count(*) AS n, sum(v) AS total FROM s GROUP BY g, t;
    CREATE MATERIALIZED VIEW per_g_twin AS SELECT g, t, count(*) AS n, sum(v) AS total FROM s_twin GROUP BY g, t;
";

/// Indexes made after some rows exist (so they are filled), then kept with every change.
const INDEXES: &str = "
    CREATE INDEX s_g_t ON s (g, t) INCLUDE (v);
    CREATE INDEX ON s (t);
    CREATE INDEX bag_y ON bag (y);
    CREATE INDEX per_g_n ON per_g (n, total);
";

fn value(rng: &mut Rng, column: char) -> String {
    match (column, rng.below(10)) {
        (_, 0) => "NULL".into(),
        ('g' | 'x' | 'n' | 'v', _) => (rng.below(8) - 2).to_string(),
        ('t' | 'y', _) => format!("'{}'", ["", "a", "ab", "b", "ä", "a b"][rng.below(6) as usize]),
        _ => unreachable!(),
    }
}

fn condition(rng: &mut Rng, column: char) -> String {
    let c = column;
    let v = |rng: &mut Rng| value(rng, c);
    match rng.below(7) {
        0 | 1 => format!("{c} = {}", v(rng)),
        2 => format!("{c} IN ({}, {})", v(rng), v(rng)),
        3 => format!("{c} < {}", v(rng)),
        4 => format!("{} <= {c}", v(rng)),
        5 => format!("{c} BETWEEN {} AND {}", v(rng), v(rng)),
        _ => format!("{c} IS NULL"),
    }
}

/// A change, written once for the indexed relation and once for its twin.
fn random_change(rng: &mut Rng) -> Vec<String> {
    let on_both =
        |sql: String, table: &str| vec![sql.replace("{}", table), sql.replace("{}", &format!("{table}_twin"))];
    match rng.below(7) {
        0..=2 => {
            let rows: Vec<String> = (0..1 + rng.below(5))
                .map(|_| format!("({}, {}, {}, {})", rng.below(30), value(rng, 'g'), value(rng, 't'), value(rng, 'v')))
                .collect();
            // INSERT upserts on the key: replaced rows leave the index too.
            on_both(format!("INSERT INTO {{}} VALUES {}", rows.join(", ")), "s")
        }
        3 => on_both(format!("UPDATE {{}} SET g = g + 1, t = t || 'a' WHERE {}", condition(rng, 'g')), "s"),
        4 => on_both(format!("DELETE FROM {{}} WHERE {}", condition(rng, 't')), "s"),
        5 => {
            let rows: Vec<String> =
                (0..1 + rng.below(3)).map(|_| format!("({}, {})", value(rng, 'x'), value(rng, 'y'))).collect();
            on_both(format!("INSERT INTO {{}} VALUES {}", rows.join(", ")), "bag")
        }
        _ => on_both(format!("DELETE FROM {{}} WHERE {}", condition(rng, 'y')), "bag"),
    }
}

/// A read of `relation` (or its twin) under random conditions on its indexed columns.
fn random_read(rng: &mut Rng) -> (String, String) {
    let (relation, columns, select, order): (&str, &[char], &str, &str) = match rng.below(5) {
        0 => ("s", &['g', 't'], "g, t, v", "1, 2, 3"),
        1 => ("s", &['t'], "*", "1"),
        2 => ("s", &['g'], "id, g", "1"),
        3 => ("bag", &['y', 'x'], "*", "1, 2"),
        _ => ("per_g", &['n', 'v'], "n, total, g, t", "1, 2, 3, 4"),
    };
    let conditions: Vec<String> = (0..1 + rng.below(2))
        .map(|_| {
            let c = columns[rng.below(columns.len() as u64) as usize];
            condition(rng, c).replace('v', if relation == "per_g" { "total" } else { "v" })
        })
        .collect();
    let query = format!("SELECT {select} FROM {relation} WHERE {} ORDER BY {order}", conditions.join(" AND "));
    let twin = query.replacen(&format!("FROM {relation} "), &format!("FROM {relation}_twin "), 1);
    (query, twin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_indexes_equal_reads_of_an_unindexed_twin() {
    let mut server = TestServer::start();
    let mut client = server.connect().await;
    client.batch_execute(SCHEMA).await.unwrap();
    let mut rng = Rng(1717);
    let mut through_index = 0;
    let mut reads = 0;
    for step in 0..150 {
        if step == 20 {
            client.batch_execute(INDEXES).await.unwrap();
        }
        if step == 90 {
            client = server.sigkill_and_reconnect().await;
        }
        for change in random_change(&mut rng) {
            client.batch_execute(&change).await.unwrap_or_else(|e| panic!("{change}: {e:?}"));
        }
        client.simple_query("FLUSH").await.unwrap();
        for _ in 0..3 {
            let (query, twin) = random_read(&mut rng);
            let plan = rows(&client, &format!("EXPLAIN {query}")).await.join("\n");
            through_index += usize::from(plan.contains("index="));
            reads += 1;
            assert_eq!(rows(&client, &query).await, rows(&client, &twin).await, "step {step}: {query}\n{plan}");
        }
    }
    eprintln!("{through_index} of {reads} reads went through an index");
    assert!(through_index > reads / 3, "only {through_index} of {reads} reads used an index");
    // Whole indexes equal their relations' columns, multiplicities included.
    for (query, twin) in [
        (
            "SELECT g, t, v FROM s WHERE g > -100 OR g IS NULL ORDER BY 1, 2, 3",
            "SELECT g, t, v FROM s_twin ORDER BY 1, 2, 3",
        ),
        ("SELECT y, x FROM bag WHERE y >= '' OR y IS NULL ORDER BY 1, 2", "SELECT y, x FROM bag_twin ORDER BY 1, 2"),
    ] {
        assert_eq!(rows(&client, query).await, rows(&client, twin).await, "{query}");
    }
}

/// EXPLAIN names the index a read uses; reads the relation's own key serves better, or that
/// need a column the index lacks, do not use it (dropping indexes: tests/slt/indexes.slt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_the_index_a_read_uses() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE s (id INT PRIMARY KEY, g INT, t TEXT, v INT);
             CREATE INDEX s_g ON s (g) INCLUDE (t);
             CREATE INDEX s_t ON s (t);
             CREATE MATERIALIZED VIEW per_g AS SELECT g, count(*) AS n FROM s GROUP BY g;
             CREATE INDEX per_g_n ON per_g (n);",
        )
        .await
        .unwrap();
    let golden = [
        ("SELECT t FROM s WHERE g = 5", "RelationScanExec: relation=s, index=s_g, access=ranges(1)"),
        ("SELECT id, t FROM s WHERE g IN (1, 2)", "RelationScanExec: relation=s, index=s_g, access=ranges(2)"),
        ("SELECT * FROM s WHERE t = 'x'", "RelationScanExec: relation=s, index=s_t, access=ranges(1)"),
        ("SELECT * FROM s WHERE id = 1 AND t = 'x'", "RelationScanExec: relation=s, access=keys(1)"),
        ("SELECT v FROM s WHERE g = 5", "RelationScanExec: relation=s, access=all"),
        ("SELECT * FROM s WHERE t > 'a' AND t < 'b'", "RelationScanExec: relation=s, index=s_t, access=ranges(1)"),
        ("SELECT g FROM per_g WHERE n = 3", "RelationScanExec: relation=per_g, index=per_g_n, access=ranges(1)"),
        ("SELECT g FROM per_g WHERE g = 3", "RelationScanExec: relation=per_g, access=ranges(1)"),
    ];
    assert_scan_lines(&client, &golden).await;
}

/// An index built while a writer keeps changing its relations (a keyed table read in many
/// chunks, a view over it, a table without a key) holds exactly what an unindexed twin does:
/// changes to rows the build has read are kept by the writers, the rest are read by the build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_built_beside_a_writer_miss_nothing() {
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE big (id INT PRIMARY KEY, g INT, v INT);
             CREATE TABLE big_twin (id INT PRIMARY KEY, g INT, v INT);
             CREATE TABLE heap (g INT, v INT);
             CREATE TABLE heap_twin (g INT, v INT);
             INSERT INTO big SELECT x, x % 100, x FROM generate_series(1, 150000) AS s(x);
             INSERT INTO big_twin SELECT x, x % 100, x FROM generate_series(1, 150000) AS s(x);
             INSERT INTO heap SELECT x % 50, x FROM generate_series(1, 20000) AS s(x);
             INSERT INTO heap_twin SELECT x % 50, x FROM generate_series(1, 20000) AS s(x);
             CREATE MATERIALIZED VIEW per_v AS SELECT v % 1000 AS b, count(*) AS n FROM big GROUP BY v % 1000;
             CREATE MATERIALIZED VIEW per_v_twin AS SELECT v % 1000 AS b, count(*) AS n FROM big_twin GROUP BY v % 1000;",
        )
        .await
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (client, stop, made) = (server.connect().await, std::sync::Arc::clone(&stop), std::sync::Arc::clone(&made));
        tokio::spawn(async move {
            let mut rng = Rng(99);
            let mut changes = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) || changes < 40 {
                let id = rng.below(160000);
                let (table, statement) = match rng.below(6) {
                    0 => ("big", format!("INSERT INTO {{}} VALUES ({id}, {}, {})", rng.below(100), rng.below(1000))),
                    1 => ("big", format!("UPDATE {{}} SET g = g + 1, v = v + 7 WHERE id = {id}")),
                    2 => ("big", format!("DELETE FROM {{}} WHERE id BETWEEN {id} AND {}", id + rng.below(50))),
                    3 => ("heap", format!("INSERT INTO {{}} VALUES ({}, {id})", rng.below(50))),
                    4 => ("heap", format!("DELETE FROM {{}} WHERE g = {} AND v < {}", rng.below(50), id / 4)),
                    _ => ("heap", format!("UPDATE {{}} SET v = v + 1 WHERE g = {}", rng.below(50))),
                };
                for target in [table.to_string(), format!("{table}_twin")] {
                    client.batch_execute(&statement.replace("{}", &target)).await.unwrap();
                }
                changes += 1;
                made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            changes
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let before = made.load(std::sync::atomic::Ordering::SeqCst);
    client
        .batch_execute(
            "CREATE INDEX big_g ON big (g);
             CREATE INDEX per_v_n ON per_v (n);
             CREATE INDEX heap_g ON heap (g);",
        )
        .await
        .unwrap();
    let during = made.load(std::sync::atomic::Ordering::SeqCst) - before;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let changes = writer.await.unwrap();
    client.simple_query("FLUSH").await.unwrap();
    for (query, twin) in [
        ("SELECT id, g, v FROM big WHERE g >= -1000 ORDER BY 1", "SELECT id, g, v FROM big_twin ORDER BY 1"),
        ("SELECT n, b FROM per_v WHERE n >= 0 ORDER BY 2", "SELECT n, b FROM per_v_twin ORDER BY 2"),
        ("SELECT g, v FROM heap WHERE g >= -1000 ORDER BY 1, 2", "SELECT g, v FROM heap_twin ORDER BY 1, 2"),
    ] {
        let plan = rows(&client, &format!("EXPLAIN {query}")).await.join("\n");
        assert!(plan.contains("index="), "{query} does not read its index:\n{plan}");
        let (got, want) = (rows(&client, query).await, rows(&client, twin).await);
        assert!(
            got == want,
            "{query}: {} rows through the index, {} in the twin ({changes} changes)",
            got.len(),
            want.len()
        );
    }
    eprintln!("{during} of {changes} changes made while the indexes were built");
    // The writer was not held back for the whole build (chunks release the lock).
    assert!(during >= 5, "only {during} changes were made while the indexes were built");
}
