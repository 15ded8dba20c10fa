//! The oracle's workloads, shared by the oracle and the upgrade test: views over tables changed
//! by random statements, and event-time views over a stream with bounded disorder, each with the
//! check that a view equals its query run as a batch.

use super::{rows, Rng};

/// The views under test: (name, query).
pub const VIEWS: &[(&str, &str)] = &[
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

/// Views of what views learnt after the upgrade fixtures of earlier releases were made (which
/// lack them), over the same tables: subqueries, set operations, joins on other conditions than
/// equalities, ranks.
pub const LATER_VIEWS: &[(&str, &str)] = &[
    // Semi and anti joins (bag's x is sometimes NULL).
    ("semi", "SELECT a.k, a.v FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.g)"),
    ("anti", "SELECT a.k, a.g FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.g)"),
    ("semi_residual", "SELECT a.k FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.g AND b.w > a.v / 3)"),
    (
        "anti_residual",
        "SELECT a.k, a.v FROM a WHERE NOT EXISTS (SELECT 1 FROM bag WHERE bag.x = a.g AND bag.x * 20 < a.v)",
    ),
    ("in_bag", "SELECT k, g FROM a WHERE g IN (SELECT x FROM bag)"),
    ("not_in_bag", "SELECT k, g FROM a WHERE g NOT IN (SELECT x FROM bag)"),
    ("intersected", "SELECT g FROM a INTERSECT SELECT x FROM bag"),
    ("excepted", "SELECT g FROM a EXCEPT SELECT x FROM bag"),
    // A scalar subquery, and joins on conditions other than equalities.
    ("above_max", "SELECT k, v FROM a WHERE v > (SELECT max(w) FROM b)"),
    ("per_group_top", "SELECT k, g, v FROM a WHERE v = (SELECT max(v) FROM a AS a2 WHERE a2.g = a.g)"),
    ("theta", "SELECT a.k, b.k AS bk FROM a JOIN b ON a.v < b.w - 20"),
    ("left_residual", "SELECT a.k, a.v, b.w FROM a LEFT JOIN b ON a.g = b.k AND b.w > a.v / 3"),
    ("full_residual", "SELECT a.k, b.k AS bk FROM a FULL JOIN b ON a.g = b.k AND a.v < b.w * 3"),
    // Top-N by RANK() and DENSE_RANK(): ties share a rank, so more rows than N may pass.
    (
        "ranked",
        "SELECT * FROM (SELECT k, g, v, RANK() OVER (PARTITION BY g ORDER BY v % 10) AS r FROM a) t WHERE r <= 2",
    ),
    ("dense_ranked", "SELECT * FROM (SELECT k, v, DENSE_RANK() OVER (ORDER BY v % 7 DESC) AS r FROM a) t WHERE r <= 3"),
    // Aggregates with FILTER, the second moments and the bitwise ones.
    (
        "spread",
        "SELECT g, count(*) FILTER (WHERE v > 50) AS big, sum(v) FILTER (WHERE v % 2 = 0) AS even_sum, \
         round(stddev(v), 6) AS sd, round(var_pop(v), 6) AS vp, bit_and(v) AS ba, bit_or(v) AS bo, bit_xor(v) AS bx \
         FROM a GROUP BY g",
    ),
    // Aggregates over each group's values in order, and several distinct counts.
    (
        "listed",
        "SELECT g, array_agg(v ORDER BY v) AS vs, percentile_cont(0.25) WITHIN GROUP (ORDER BY v) AS p25, \
         median(v) AS med, approx_distinct(v % 10) AS ad, count(DISTINCT v % 3) AS d3, count(DISTINCT k % 4) AS d4 \
         FROM a GROUP BY g",
    ),
    // Aggregates ordered by another column (k is unique), and the ordered-set aggregates.
    (
        "ordered_by_k",
        "SELECT g, string_agg(CAST(v AS VARCHAR), ',' ORDER BY k DESC) AS by_k, array_agg(v ORDER BY k) AS vs, \
         first_value(v ORDER BY k) AS first_v, last_value(v ORDER BY k) AS last_v, \
         percentile_disc(0.5) WITHIN GROUP (ORDER BY v) AS pd, mode() WITHIN GROUP (ORDER BY v % 5) AS mo \
         FROM a GROUP BY g",
    ),
    // JSON arrays of each group's values, in an order of their own.
    ("json_lists", "SELECT g, jsonb_agg(v ORDER BY k) AS vs, json_agg(k ORDER BY v DESC, k) AS ks FROM a GROUP BY g"),
    // unnest in FROM of the row before it, numbered WITH ORDINALITY.
    ("ordinals", "SELECT a.k, t.x, t.n FROM a, unnest(ARRAY[a.v, a.g, a.k]) WITH ORDINALITY AS t(x, n) WHERE t.x IS NOT NULL"),
    // GROUPING SETS, ROLLUP and CUBE, with grouping().
    ("rolled", "SELECT g, k, sum(v) AS s, count(*) AS n, grouping(g) AS gg FROM a GROUP BY ROLLUP (g, k)"),
    ("cubed", "SELECT g, v % 2 AS odd, max(v) AS hi FROM a GROUP BY CUBE (g, v % 2)"),
    ("cubed_exprs", "SELECT g % 3 AS m, v % 2 AS odd, count(*) AS n, grouping(g % 3, v % 2) AS gb FROM a GROUP BY CUBE (g % 3, v % 2)"),
    ("grouping_sets", "SELECT g, k % 2 AS m, count(*) AS n FROM a GROUP BY GROUPING SETS ((g), (k % 2), ())"),
    // Rows the query gives itself: VALUES, and a condition that is never true.
    (
        "labelled",
        "SELECT a.k, v.label FROM a JOIN (VALUES (1, 'one'), (2, 'two'), (NULL, 'none')) AS v(g, label) ON a.g = v.g",
    ),
    ("with_constants", "SELECT g FROM a UNION ALL VALUES (100), (NULL)"),
    ("never", "SELECT k, count(*) AS n FROM a WHERE 1 = 0 GROUP BY k"),
    // Window functions over partitions: offsets, running aggregates, frames, unbounded ranks.
    (
        "windowed_rows",
        "SELECT k, g, v, lag(v) OVER (PARTITION BY g ORDER BY v, k) AS prev, lead(k, 2) OVER (PARTITION BY g ORDER BY v, k) AS after_next, \
         sum(v) OVER (PARTITION BY g ORDER BY v, k) AS running, row_number() OVER (PARTITION BY g ORDER BY v DESC, k) AS rn FROM a",
    ),
    (
        "windowed_frames",
        "SELECT k, first_value(k) OVER (PARTITION BY g ORDER BY v DESC, k) AS top, count(*) OVER (PARTITION BY g) AS n, \
         max(v) OVER (ORDER BY k ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS near_max, rank() OVER (ORDER BY v % 7) AS r FROM a",
    ),
    // Set-returning functions in the select list.
    ("series", "SELECT k, generate_series(1, v % 4) AS i FROM a"),
    ("unnested", "SELECT k, unnest(ARRAY[g, v]) AS x FROM a"),
];

pub fn random_statement(rng: &mut Rng) -> String {
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
                // 5 is NULL: NOT IN over bag is then empty.
                let x = |rng: &mut Rng| match rng.below(6) {
                    5 => "NULL".to_string(),
                    x => x.to_string(),
                };
                format!("INSERT INTO bag VALUES ({}), ({})", x(rng), x(rng))
            } else {
                match rng.below(6) {
                    5 => "DELETE FROM bag WHERE x IS NULL".to_string(),
                    x => format!("DELETE FROM bag WHERE x = {x}"),
                }
            }
        }
    }
}

pub async fn check_views(client: &tokio_postgres::Client, context: &str) {
    check_these_views(client, VIEWS, context).await
}

/// Each of `views` (name, query) equals its query, once everything written has reached them.
pub async fn check_these_views(client: &tokio_postgres::Client, views: &[(&str, &str)], context: &str) {
    client.simple_query("FLUSH").await.unwrap();
    for (name, query) in views {
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        let batch = rows(client, query).await;
        assert_eq!(view, batch, "view {name} differs from its query {context}");
    }
}

/// Tables `a`, `b` and `bag` (what [`random_statement`] changes), at `parallelism` shards, with
/// the first rows `a_rows` and `b_rows` (VALUES lists).
pub async fn create_tables(client: &tokio_postgres::Client, parallelism: usize, a_rows: &str, b_rows: &str) {
    client.batch_execute(&format!("SET streaming_parallelism = {parallelism}")).await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE a (k INT PRIMARY KEY, g INT, v INT);
             CREATE TABLE b (k INT PRIMARY KEY, w INT);
             CREATE TABLE bag (x INT);
             INSERT INTO a VALUES {a_rows};
             INSERT INTO b VALUES {b_rows};"
        ))
        .await
        .unwrap();
}

/// Event-time views over one append-only stream with bounded disorder: (name, query, clauses).
/// `failing` divides by zero for some rows, in a filter and in an aggregate's argument over
/// windows: its batch query is [`FAILING_WINDOWED_BATCH`].
/// The stream the event-time views read: watermark 2 s behind the newest row.
pub const EVENT_TABLE: &str = "CREATE TABLE ev (id BIGINT, k INT, p INT, ts TIMESTAMP,
   WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) APPEND ONLY";

pub const EVENT_TIME_VIEWS: &[(&str, &str, &str)] = &[
    (
        "failing",
        "SELECT window_start, window_end, k, count(*) AS n, sum(1000 / (p % 7)) AS s FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) WHERE 100 / (p % 11) < 50 GROUP BY window_start, window_end, k",
        "EMIT ON WINDOW CLOSE LATE ROWS TO ev_late",
    ),
    (
        "strict",
        "SELECT window_start, window_end, k, count(*) AS n, sum(p) AS s, max(p) AS top FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) GROUP BY window_start, window_end, k",
        "EMIT ON WINDOW CLOSE LATE ROWS TO ev_late",
    ),
    (
        "lenient",
        "SELECT window_start, window_end, k, count(*) AS n, sum(p) AS s, max(p) AS top FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) GROUP BY window_start, window_end, k",
        "EMIT ON WINDOW CLOSE ALLOW LATENESS INTERVAL '10' SECOND",
    ),
    (
        "hopping",
        "SELECT window_start, window_end, k, count(*) AS n, min(p) AS lo FROM HOP(ev, ts, INTERVAL '2' SECOND, INTERVAL '6' SECOND) GROUP BY window_start, window_end, k",
        "EMIT ON WINDOW CLOSE ALLOW LATENESS INTERVAL '10' SECOND LATE ROWS TO ev_late",
    ),
    (
        "continuous",
        "SELECT window_start, window_end, k, count(*) AS n, sum(p) AS s FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) GROUP BY window_start, window_end, k",
        "LATE ROWS TO ev_late",
    ),
    ("plain", "SELECT id, k, window_start, window_end FROM TUMBLE(ev, ts, INTERVAL '5' SECOND)", "EMIT ON WINDOW CLOSE LATE ROWS TO ev_late"),
    (
        "sessions",
        "SELECT k, window_start, window_end, count(*) AS n, max(p) AS top FROM SESSION(ev, ts, INTERVAL '1' SECOND, k) GROUP BY k, window_start, window_end",
        "EMIT ON WINDOW CLOSE LATE ROWS TO ev_late",
    ),
    (
        "all_sessions",
        "SELECT k, window_start, window_end, count(*) AS n, sum(p) AS s FROM SESSION(ev, ts, INTERVAL '1' SECOND, k) GROUP BY k, window_start, window_end",
        "ALLOW LATENESS INTERVAL '10' SECOND LATE ROWS TO ev_late",
    ),
    (
        "pairs",
        "SELECT a.id AS l, b.id AS r, a.window_end FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) a JOIN TUMBLE(ev, ts, INTERVAL '5' SECOND) b ON a.window_start = b.window_start AND a.k = b.k AND a.id < b.id",
        "EMIT ON WINDOW CLOSE LATE ROWS TO ev_late",
    ),
];

/// Event-time views added after the upgrade fixtures were made (`tests/upgrade.rs` expects
/// exactly [`EVENT_TIME_VIEWS`] in a release's data directory): the oracle checks them too.
pub const LATER_EVENT_TIME_VIEWS: &[(&str, &str, &str)] = &[
    // Window functions over rows released as their windows close.
    (
        "moving",
        "SELECT id, k, window_start, window_end, p - lag(p) OVER (PARTITION BY k ORDER BY window_start, id) AS change, \
         row_number() OVER (PARTITION BY k ORDER BY window_start, id) AS n FROM TUMBLE(ev, ts, INTERVAL '5' SECOND)",
        "EMIT ON WINDOW CLOSE LATE ROWS TO ev_late",
    ),
];

/// `failing`'s query as the view must answer it: a failing expression is NULL for its row.
pub const FAILING_WINDOWED_BATCH: &str = "SELECT window_start, window_end, k, count(*) AS n, sum(CASE WHEN p % 7 <> 0 THEN 1000 / (p % 7) END) AS s FROM TUMBLE(ev, ts, INTERVAL '5' SECOND) WHERE CASE WHEN p % 11 <> 0 THEN 100 / (p % 11) END < 50 GROUP BY window_start, window_end, k";

/// Events: ids in order, times 250 ms apart on average, up to 8 s out of order (the watermark
/// delay is 2 s, so some rows are late unless the view allows 10 s of lateness).
pub fn random_events(rng: &mut Rng, next_id: &mut i64) -> String {
    let rows: Vec<String> = (0..1 + rng.below(5))
        .map(|_| {
            let id = *next_id;
            *next_id += 1;
            let millis = (id * 250 - rng.below(32) * 250).max(0);
            let ts = chrono::DateTime::from_timestamp_millis(1_767_225_600_000 + millis).unwrap().naive_utc();
            format!("({id}, {}, {}, '{ts}')", rng.below(4), rng.below(1000))
        })
        .collect();
    format!("INSERT INTO ev VALUES {}", rows.join(", "))
}

/// Each event-time view equals its query as a batch over the rows that were not late for it
/// (all rows where lateness covers the disorder), over the windows closed by the watermark
/// (all windows when emitting continuously).
pub async fn check_event_time_views(client: &tokio_postgres::Client, context: &str) {
    check_these_event_time_views(client, EVENT_TIME_VIEWS, context).await;
}

/// [`check_event_time_views`] of `views`.
pub async fn check_these_event_time_views(
    client: &tokio_postgres::Client,
    views: &[(&str, &str, &str)],
    context: &str,
) {
    client.simple_query("FLUSH").await.unwrap();
    let watermark = "(SELECT max(ts) FROM ev) - INTERVAL '2' SECOND";
    for (name, query, clauses) in views {
        let kept = format!("kept_{name}");
        client
            .batch_execute(&format!(
                "CREATE TABLE {kept} AS SELECT id, k, p, ts FROM ev EXCEPT SELECT id, k, p, ts FROM ev_late WHERE view_name = '{name}'"
            ))
            .await
            .unwrap();
        let query = if *name == "failing" { FAILING_WINDOWED_BATCH } else { query };
        let batch_query = query.replace("(ev,", &format!("({kept},"));
        // Rows late for this view, in the view's late-rows table: the batch leaves them out.
        let closed = if clauses.contains("EMIT ON WINDOW CLOSE") {
            format!("WHERE window_end <= {watermark}")
        } else {
            String::new()
        };
        let expected = rows(client, &format!("SELECT * FROM ({batch_query}) q {closed}")).await;
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        client.batch_execute(&format!("DROP TABLE {kept}")).await.unwrap();
        assert_eq!(view, expected, "event-time view {name} differs from its query {context}");
    }
    let late_lenient =
        rows(client, "SELECT count(*) FROM ev_late WHERE view_name IN ('lenient', 'hopping', 'all_sessions')").await;
    assert_eq!(late_lenient, vec!["0".to_string()], "no row is late for 10 s of allowed lateness {context}");
}
