//! Crash recovery with views restored from checkpoints (issue 15, ADR 11): a server taking a
//! checkpoint every 200 ms is SIGKILLed again and again at random moments (right after a write
//! was acknowledged, while a write is in flight, or after a pause that lands in a checkpoint or
//! its upload). After every restart:
//! - the tables hold exactly the acknowledged writes, and a write in flight at the kill either
//!   whole or not at all;
//! - every view (an aggregate, a join, an EMIT ON WINDOW CLOSE window, Top-N over a keyed and an
//!   append-only table) equals its own query run as a batch over the tables, and no row was late;
//! - the start restored a checkpoint (`weir_catalog.checkpoints` says `restored`).
//!
//! A rate-limited Nexmark source keeps generating across the first kills; once it has finished,
//! it holds every event exactly once (the same rows as a source that was never interrupted), and
//! its aggregate view equals its batch query.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{rows, Rng, TestServer};

/// The PRNG's seed: the same writes in the same order at every run (the kills' timing varies).
const SEED: u64 = 1_500_015;
const KILLS: usize = 30;
const PARALLELISM: usize = 2;

/// The Nexmark bid source: events of all kinds, of which 46 in 50 are bids.
const NEXMARK_EVENTS: u64 = 15_000;
const NEXMARK_BIDS: u64 = NEXMARK_EVENTS * 46 / 50;
/// Wall-clock events per second: the source is still generating across the first kills (15 s
/// from its creation: a restart reads at once what came due while the server was down).
const NEXMARK_RATE: u64 = 1_000;

/// CREATE SOURCE for a bid source of [`NEXMARK_EVENTS`] events, generating `rate` events per
/// second of wall-clock time (0: as fast as it can).
fn create_bid_source(name: &str, rate: u64) -> String {
    format!(
        "CREATE SOURCE {name} WITH (connector = 'nexmark', nexmark.table.type = 'bid', \
         nexmark.event.num = '{NEXMARK_EVENTS}', nexmark.max.chunk.size = '200', nexmark.events.per.second = '{rate}')"
    )
}

/// Event times start here; the event table's watermark is 2 s behind its largest time.
const EVENT_TIME_BASE_MS: i64 = 1_767_225_600_000;
const WATERMARK: &str = "(SELECT max(ts) FROM events) - INTERVAL '2' SECOND";

const TABLES: &str = "CREATE TABLE accounts (id INT PRIMARY KEY, grp INT, amount INT);
     CREATE TABLE regions (grp INT PRIMARY KEY, weight INT);
     CREATE TABLE events (id BIGINT, acct INT, amount INT, ts TIMESTAMP,
       WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) APPEND ONLY;";

/// A materialized view: its name, its query and the clauses after it.
struct View {
    name: &'static str,
    query: &'static str,
    clauses: &'static str,
}

impl View {
    /// What the view must hold: its query as a batch, over the windows the watermark has
    /// closed when it emits on window close.
    fn batch_query(&self) -> String {
        if self.clauses.contains("EMIT ON WINDOW CLOSE") {
            format!("SELECT * FROM ({}) q WHERE window_end <= {WATERMARK}", self.query)
        } else {
            self.query.to_string()
        }
    }
}

const TABLE_VIEWS: &[View] = &[
    View {
        name: "per_group",
        query: "SELECT grp, count(*) AS n, sum(amount) AS total, max(amount) AS top FROM accounts GROUP BY grp",
        clauses: "",
    },
    View {
        name: "weighted",
        query: "SELECT a.id, a.amount, r.weight FROM accounts a JOIN regions r ON a.grp = r.grp",
        clauses: "",
    },
    View {
        name: "per_second",
        query: "SELECT window_start, window_end, acct, count(*) AS n, sum(amount) AS total, max(amount) AS top
                FROM TUMBLE(events, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end, acct",
        clauses: "EMIT ON WINDOW CLOSE LATE ROWS TO events_late",
    },
    View {
        name: "richest",
        query: "SELECT * FROM (
                  SELECT id, grp, amount, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY amount DESC, id) AS rn FROM accounts
                ) WHERE rn <= 3",
        clauses: "",
    },
    View {
        // Nexmark q7's shape: each second's top events, joined back within their window; the
        // events' side keeps its rows in memory, checkpointed in segments (ADR 22).
        name: "top_events",
        query: "SELECT e.id, e.acct, e.amount, m.window_end FROM events e JOIN (
                  SELECT window_end, max(amount) AS top FROM TUMBLE(events, ts, INTERVAL '1' SECOND) GROUP BY window_end
                ) m ON e.amount = m.top WHERE e.ts >= m.window_end - INTERVAL '1' SECOND AND e.ts < m.window_end",
        clauses: "",
    },
    View {
        name: "biggest_events",
        query: "SELECT * FROM (
                  SELECT id, acct, amount, ROW_NUMBER() OVER (PARTITION BY acct ORDER BY amount DESC, id) AS rn FROM events
                ) WHERE rn <= 2",
        clauses: "",
    },
];

const BID_VIEW: View = View {
    name: "per_auction",
    query: "SELECT auction, count(*) AS n, sum(price) AS volume, max(price) AS top FROM bid GROUP BY auction",
    clauses: "",
};

/// What the tables must hold: every acknowledged write applied.
#[derive(Clone, Default)]
struct Tables {
    /// id -> (grp, amount)
    accounts: BTreeMap<i32, (Option<i32>, i32)>,
    /// grp -> weight
    regions: BTreeMap<i32, i32>,
    /// id -> (acct, amount)
    events: BTreeMap<i64, (i32, i32)>,
}

/// Each table's contents as `rows` gives them: (table, query).
const TABLE_CONTENTS: &[(&str, &str)] = &[
    ("accounts", "SELECT id, grp, amount FROM accounts"),
    ("regions", "SELECT grp, weight FROM regions"),
    ("events", "SELECT id, acct, amount FROM events"),
];

impl Tables {
    /// The rows of each table of [`TABLE_CONTENTS`], in its order, sorted as `rows` sorts them.
    fn contents(&self) -> Vec<Vec<String>> {
        let sorted = |mut rows: Vec<String>| {
            rows.sort();
            rows
        };
        vec![
            sorted(
                self.accounts.iter().map(|(id, (grp, amount))| format!("{id}|{}|{amount}", sql_int(*grp))).collect(),
            ),
            sorted(self.regions.iter().map(|(grp, weight)| format!("{grp}|{weight}")).collect()),
            sorted(self.events.iter().map(|(id, (acct, amount))| format!("{id}|{acct}|{amount}")).collect()),
        ]
    }
}

fn sql_int(value: Option<i32>) -> String {
    value.map_or("NULL".to_string(), |v| v.to_string())
}

/// One write statement, and what it does to the tables.
#[derive(Debug, Clone)]
enum Write {
    /// INSERT into the keyed table: an existing key's row is replaced, the last of a key wins.
    UpsertAccounts(Vec<(i32, Option<i32>, i32)>),
    AddToGroup {
        grp: i32,
        delta: i32,
    },
    MoveToGroup {
        id_mod_5: i32,
        grp: i32,
    },
    DeleteAccounts {
        id_mod_7: i32,
    },
    UpsertRegion {
        grp: i32,
        weight: i32,
    },
    DeleteRegion {
        grp: i32,
    },
    /// (id, acct, amount, event time in ms after the base)
    AppendEvents(Vec<(i64, i32, i32, i64)>),
}

/// The next event's id and time: times never go back, so no event is late.
struct EventClock {
    next_id: i64,
    millis: i64,
}

impl Write {
    fn random(rng: &mut Rng, clock: &mut EventClock) -> Write {
        match rng.below(20) {
            0..=5 => Write::UpsertAccounts(
                (0..1 + rng.below(4))
                    .map(|_| {
                        let grp = if rng.below(8) == 0 { None } else { Some(rng.below(5) as i32) };
                        (rng.below(25) as i32, grp, rng.below(1000) as i32)
                    })
                    .collect(),
            ),
            6 | 7 => Write::AddToGroup { grp: rng.below(5) as i32, delta: rng.below(101) as i32 - 50 },
            8 => Write::MoveToGroup { id_mod_5: rng.below(5) as i32, grp: rng.below(5) as i32 },
            9 => Write::DeleteAccounts { id_mod_7: rng.below(7) as i32 },
            10 | 11 => Write::UpsertRegion { grp: rng.below(5) as i32, weight: rng.below(100) as i32 },
            12 => Write::DeleteRegion { grp: rng.below(5) as i32 },
            _ => Write::AppendEvents(
                (0..1 + rng.below(5))
                    .map(|_| {
                        let id = clock.next_id;
                        clock.next_id += 1;
                        clock.millis += rng.below(300);
                        (id, rng.below(4) as i32, rng.below(100) as i32, clock.millis)
                    })
                    .collect(),
            ),
        }
    }

    fn sql(&self) -> String {
        match self {
            Write::UpsertAccounts(rows) => {
                let values: Vec<String> =
                    rows.iter().map(|(id, grp, amount)| format!("({id}, {}, {amount})", sql_int(*grp))).collect();
                format!("INSERT INTO accounts VALUES {}", values.join(", "))
            }
            Write::AddToGroup { grp, delta } => {
                format!("UPDATE accounts SET amount = amount + {delta} WHERE grp = {grp}")
            }
            Write::MoveToGroup { id_mod_5, grp } => {
                format!("UPDATE accounts SET grp = {grp} WHERE id % 5 = {id_mod_5}")
            }
            Write::DeleteAccounts { id_mod_7 } => format!("DELETE FROM accounts WHERE id % 7 = {id_mod_7}"),
            Write::UpsertRegion { grp, weight } => format!("INSERT INTO regions VALUES ({grp}, {weight})"),
            Write::DeleteRegion { grp } => format!("DELETE FROM regions WHERE grp = {grp}"),
            Write::AppendEvents(rows) => {
                let values: Vec<String> = rows
                    .iter()
                    .map(|(id, acct, amount, millis)| {
                        let ts =
                            chrono::DateTime::from_timestamp_millis(EVENT_TIME_BASE_MS + millis).unwrap().naive_utc();
                        format!("({id}, {acct}, {amount}, '{ts}')")
                    })
                    .collect();
                format!("INSERT INTO events VALUES {}", values.join(", "))
            }
        }
    }

    fn apply(&self, tables: &mut Tables) {
        match self {
            Write::UpsertAccounts(rows) => {
                for (id, grp, amount) in rows {
                    tables.accounts.insert(*id, (*grp, *amount));
                }
            }
            Write::AddToGroup { grp, delta } => {
                for (row_grp, amount) in tables.accounts.values_mut() {
                    if *row_grp == Some(*grp) {
                        *amount += delta;
                    }
                }
            }
            Write::MoveToGroup { id_mod_5, grp } => {
                for (id, (row_grp, _)) in tables.accounts.iter_mut() {
                    if id % 5 == *id_mod_5 {
                        *row_grp = Some(*grp);
                    }
                }
            }
            Write::DeleteAccounts { id_mod_7 } => tables.accounts.retain(|id, _| id % 7 != *id_mod_7),
            Write::UpsertRegion { grp, weight } => {
                tables.regions.insert(*grp, *weight);
            }
            Write::DeleteRegion { grp } => {
                tables.regions.remove(grp);
            }
            Write::AppendEvents(rows) => {
                for (id, acct, amount, _) in rows {
                    tables.events.insert(*id, (*acct, *amount));
                }
            }
        }
    }
}

/// When the server is killed, after a batch of acknowledged writes.
#[derive(Debug)]
enum KillMoment {
    /// Right after the last write was acknowledged.
    AfterAcknowledgement,
    /// After a pause, so the kill lands anywhere in a checkpoint, its upload or between them.
    AfterPause(Duration),
    /// While another connection's write is on its way (with `implicit_flush`, it is durable
    /// while it waits for the views, before it is acknowledged), this long after it was sent.
    DuringWrite { implicit_flush: bool, after: Duration },
}

impl KillMoment {
    fn random(rng: &mut Rng) -> KillMoment {
        match rng.below(3) {
            0 => KillMoment::AfterAcknowledgement,
            1 => KillMoment::AfterPause(Duration::from_millis(rng.below(401) as u64)),
            _ => KillMoment::DuringWrite {
                implicit_flush: rng.below(2) == 0,
                after: Duration::from_millis(rng.below(40) as u64),
            },
        }
    }
}

/// The rows `actual` lacks and the rows it has too many of, against `expected` (as multisets).
fn difference(expected: &[String], actual: &[String]) -> String {
    let mut surplus: BTreeMap<&str, i64> = BTreeMap::new();
    for row in actual {
        *surplus.entry(row).or_default() += 1;
    }
    for row in expected {
        *surplus.entry(row).or_default() -= 1;
    }
    let missing: Vec<(&str, i64)> = surplus.iter().filter(|(_, &n)| n < 0).map(|(&row, &n)| (row, -n)).collect();
    let extra: Vec<(&str, i64)> = surplus.iter().filter(|(_, &n)| n > 0).map(|(&row, &n)| (row, n)).collect();
    format!(
        "{} rows expected, {} found; missing (row, times) {missing:?}; unexpected (row, times) {extra:?}",
        expected.len(),
        actual.len()
    )
}

/// Asserts that `view` equals its query run as a batch over its inputs' current contents.
async fn assert_view_equals_its_query(
    server: &TestServer,
    client: &tokio_postgres::Client,
    view: &View,
    context: &str,
) {
    let expected = rows(client, &view.batch_query()).await;
    let actual = rows(client, &format!("SELECT * FROM {}", view.name)).await;
    assert!(
        actual == expected,
        "view {} differs from its query as a batch {context}: {}\nserver log (last lines):\n{}",
        view.name,
        difference(&expected, &actual),
        log_tail(server)
    );
}

/// The server log's last 40 lines, without terminal colours.
fn log_tail(server: &TestServer) -> String {
    let text = server.log_text();
    let mut log = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            log.push(c);
        }
    }
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The tables as stored after a restart, which must be `acknowledged`, or `acknowledged` with
/// `unacknowledged` (a write in flight at the kill) applied whole. Returns what they hold.
async fn stored_tables(
    server: &TestServer,
    client: &tokio_postgres::Client,
    acknowledged: &Tables,
    unacknowledged: Option<&Write>,
    context: &str,
) -> Tables {
    let mut stored = Vec::new();
    for (_, query) in TABLE_CONTENTS {
        stored.push(rows(client, query).await);
    }
    let mut candidates = vec![acknowledged.clone()];
    if let Some(write) = unacknowledged {
        let mut with_write = acknowledged.clone();
        write.apply(&mut with_write);
        candidates.push(with_write);
    }
    if let Some(matching) = candidates.into_iter().find(|c| c.contents() == stored) {
        return matching;
    }
    let differences: Vec<String> = TABLE_CONTENTS
        .iter()
        .zip(acknowledged.contents().iter().zip(&stored))
        .filter(|(_, (expected, actual))| expected != actual)
        .map(|((table, _), (expected, actual))| format!("{table}: {}", difference(expected, actual)))
        .collect();
    panic!(
        "the tables do not hold the acknowledged writes {context} (write in flight, either outcome allowed: \
         {unacknowledged:?}):\n{}\nserver log (last lines):\n{}",
        differences.join("\n"),
        log_tail(server)
    );
}

/// The checks after every restart: the tables hold what was acknowledged, every view over them
/// equals its query, no event was late, and the start (after `killed_at`, microseconds since the
/// Unix epoch) restored a checkpoint. Returns the tables as stored, and the restore's description.
async fn check_after_restart(
    server: &TestServer,
    client: &tokio_postgres::Client,
    killed_at: i64,
    acknowledged: &Tables,
    unacknowledged: Option<&Write>,
    context: &str,
) -> (Tables, String) {
    let tables = stored_tables(server, client, acknowledged, unacknowledged, context).await;
    client.batch_execute("FLUSH").await.unwrap();
    for view in TABLE_VIEWS {
        assert_view_equals_its_query(server, client, view, context).await;
    }
    let late = rows(client, "SELECT count(*) FROM events_late").await;
    assert_eq!(late, ["0"], "event times never go back, yet rows were late {context}");
    let restores: Vec<String> = client
        .query("SELECT CAST(started_at AS BIGINT), detail FROM weir_catalog.checkpoints WHERE status = 'restored'", &[])
        .await
        .unwrap()
        .iter()
        .filter(|row| row.get::<_, i64>(0) > killed_at)
        .map(|row| row.get(1))
        .collect();
    assert_eq!(restores.len(), 1, "one checkpoint restored at this start {context}: {restores:?}");
    (tables, restores.into_iter().next().unwrap())
}

/// The first number in a restore's description: how many logged writes it replayed.
fn replayed_writes(restore: &str) -> u64 {
    let digits: String =
        restore.chars().skip_while(|c| !c.is_ascii_digit()).take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap_or(0)
}

async fn wait_for_rows(client: &tokio_postgres::Client, sql: &str, expected: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = rows(client, sql).await;
        if got == [expected] {
            return;
        }
        assert!(Instant::now() < deadline, "{sql}: {got:?} after {within:?}, expected {expected}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_random_moments_keeps_acknowledged_writes_and_views_equal_to_their_queries() {
    let started = Instant::now();
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms", "--barrier-interval-ms", "50"]);
    let mut client = server.connect().await;
    client.batch_execute(&format!("SET streaming_parallelism = {PARALLELISM}")).await.unwrap();
    client.batch_execute(TABLES).await.unwrap();
    client.batch_execute(&create_bid_source("bid", NEXMARK_RATE)).await.unwrap();
    for view in TABLE_VIEWS.iter().chain([&BID_VIEW]) {
        client
            .batch_execute(&format!("CREATE MATERIALIZED VIEW {} AS {} {}", view.name, view.query, view.clauses))
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", view.name));
    }
    // The q7-shaped view keeps its events' side in memory, the path under test here.
    let top_events = TABLE_VIEWS.iter().find(|v| v.name == "top_events").expect("the view");
    let plan = client
        .simple_query(&format!("EXPLAIN CREATE MATERIALIZED VIEW x AS {}", top_events.query))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("left rows expire by time (in memory)"), "{plan}");

    let mut rng = Rng(SEED);
    let mut clock = EventClock { next_id: 0, millis: 0 };
    let mut acknowledged = Tables::default();
    let mut kills_while_generating = 0;
    let mut restores = Vec::new();
    // What became of the writes in flight at a kill.
    let mut in_flight_outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for kill in 0..KILLS {
        let mut last = String::new();
        for _ in 0..1 + rng.below(8) {
            let write = Write::random(&mut rng, &mut clock);
            last = write.sql();
            client.batch_execute(&last).await.unwrap_or_else(|e| panic!("{last}: {e}"));
            write.apply(&mut acknowledged);
            if rng.below(5) == 0 {
                client.batch_execute("FLUSH").await.unwrap();
            }
        }
        // The source is still generating if it has not stored all its rows yet.
        let bids_before_kill: i64 = client.query_one("SELECT count(*) FROM bid", &[]).await.unwrap().get(0);
        if bids_before_kill < NEXMARK_BIDS as i64 {
            kills_while_generating += 1;
        }
        let moment = KillMoment::random(&mut rng);
        let in_flight = match moment {
            KillMoment::AfterAcknowledgement => None,
            KillMoment::AfterPause(pause) => {
                tokio::time::sleep(pause).await;
                None
            }
            KillMoment::DuringWrite { implicit_flush, after } => {
                let write = Write::random(&mut rng, &mut clock);
                let writer = server.connect().await;
                writer.batch_execute(&format!("SET implicit_flush = {implicit_flush}")).await.unwrap();
                let sql = write.sql();
                let statement = tokio::spawn(async move { writer.batch_execute(&sql).await.map(|_| ()) });
                tokio::time::sleep(after).await;
                Some((write, statement))
            }
        };
        drop(client);
        let killed_at = chrono::Utc::now().timestamp_micros();
        client = server.sigkill_and_reconnect().await;
        let mut unacknowledged = None;
        if let Some((write, statement)) = in_flight {
            match statement.await.unwrap() {
                Ok(()) => {
                    write.apply(&mut acknowledged);
                    *in_flight_outcomes.entry("acknowledged").or_default() += 1;
                }
                Err(_) => unacknowledged = Some(write),
            }
        }
        let context =
            format!("after kill {kill} (seed {SEED}, {moment:?}; last acknowledged write: {last}; in flight: {unacknowledged:?})");
        let (tables, restore) =
            check_after_restart(&server, &client, killed_at, &acknowledged, unacknowledged.as_ref(), &context).await;
        if unacknowledged.is_some() {
            let kept = tables.contents() != acknowledged.contents();
            *in_flight_outcomes
                .entry(if kept { "unacknowledged, kept" } else { "unacknowledged, lost or no change" })
                .or_default() += 1;
        }
        acknowledged = tables;
        restores.push(restore);
    }

    // The q7-shaped view's events side holds its rows in memory, and says how much (events are
    // appended until the end, so rows of the last windows are alive).
    let held = server
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix("weir_operator_memory_bytes{view=\"top_events\"} ").map(str::to_string));
    assert!(held.as_deref().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.0), "{held:?}");

    // The Nexmark source, once finished, holds every event once: the rows of a source that was
    // never interrupted, and its view equals its query.
    wait_for_rows(&client, "SELECT count(*) FROM bid", &NEXMARK_BIDS.to_string(), Duration::from_secs(60)).await;
    client.batch_execute("FLUSH").await.unwrap();
    assert_view_equals_its_query(&server, &client, &BID_VIEW, "after the source finished").await;
    client.batch_execute(&create_bid_source("bid_uninterrupted", 0)).await.unwrap();
    let uninterrupted = "SELECT count(*) FROM bid_uninterrupted";
    wait_for_rows(&client, uninterrupted, &NEXMARK_BIDS.to_string(), Duration::from_secs(60)).await;
    let bids = rows(&client, "SELECT * FROM bid").await;
    let expected_bids = rows(&client, "SELECT * FROM bid_uninterrupted").await;
    assert!(bids == expected_bids, "the bid source after {KILLS} kills: {}", difference(&expected_bids, &bids));

    let replayed: Vec<u64> = restores.iter().map(|r| replayed_writes(r)).collect();
    let replaying_restores = replayed.iter().filter(|&&n| n > 0).count();
    eprintln!(
        "{KILLS} kills in {:?}: {kills_while_generating} while the Nexmark source was generating; writes in flight: \
         {in_flight_outcomes:?}; logged writes replayed at each start: {replayed:?}",
        started.elapsed()
    );
    assert!(kills_while_generating >= 3, "only {kills_while_generating} kills while the source was generating");
    assert!(replaying_restores >= 3, "only {replaying_restores} restores replayed logged writes: {restores:?}");
}
