//! `weir bench streaming`: throughput of the streaming core on this machine, in process (no
//! network), with RocksDB state and the default 1 s epochs, as a user would run Weir.
//!
//! Scenarios, each on a fresh temporary data directory:
//! - `agg`: rows inserted into a table while a view keeps `count, sum, max` per key (10,000
//!   keys) up to date; rows/s from the first INSERT until FLUSH returns.
//! - `join`: the same rows joined with a 10,000-row dimension table and aggregated per region.
//! - `backfill`: a view created over a table that already holds the rows.
//! - `upsert`: as `agg`, into a table with a primary key (the changelog needs each key's
//!   previous row).
//! - `tumble`, `hop`: event-time windows. Rows go into an append-only table with a watermark
//!   (1,000 events per second of event time, up to 1.8 s out of order, 5 s watermark delay);
//!   the view counts and takes the max per key (1,000 keys) per 10 s `TUMBLE` window, or counts
//!   per key per `HOP` window (2 s slide, 10 s size: five windows per event), `EMIT ON WINDOW
//!   CLOSE`. Resident memory is sampled after each quarter of the stream (flushed first, so no
//!   rows wait in channels): closed windows free their state, so it must stay flat.
//!
//! Prints one human line and one JSON line per scenario, with peak RSS.

pub mod exchange;
pub mod kafka;
pub mod nexmark;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::catalog::Catalog;
use crate::config::StorageConfig;
use crate::dataflow::coordinator::EpochBounds;
use crate::dataflow::manager::Streaming;
use crate::error::{Result, WeirError};
use crate::frontend::{Frontend, StatementResult};
use crate::state::rocks::RocksStore;

pub struct BenchOptions {
    pub rows: u64,
    pub batch: u64,
    /// Shards per view (0: one per core).
    pub parallelism: usize,
    pub scenarios: Vec<String>,
}

pub(crate) struct Harness {
    pub(crate) frontend: Frontend,
    pub(crate) session: crate::frontend::Session,
    _dir: tempdir::TempDir,
}

mod tempdir {
    use std::path::PathBuf;

    /// Directories of benchmarks that have ended, to remove once nothing writes into them.
    static LEFT: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

    /// A directory removed by [`remove_temp_dirs`], not on drop: the bench's tasks keep the
    /// store open until the runtime stops, and a checkpoint may still be linking its files or
    /// RocksDB flushing into it (removing it then failed that checkpoint, with an error in the
    /// benchmark's output).
    pub struct TempDir(pub PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            LEFT.lock().push(self.0.clone());
        }
    }

    /// Removes the benchmarks' data directories. `weir bench` calls it after its runtime has
    /// stopped.
    pub fn remove_temp_dirs() {
        for dir in LEFT.lock().drain(..) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

pub use tempdir::remove_temp_dirs;

impl Harness {
    pub(crate) async fn new() -> Result<Harness> {
        Self::with_epoch(Duration::from_millis(crate::config::DEFAULT_BARRIER_INTERVAL_MS), None).await
    }

    /// A server whose epochs (barriers, commits) come every `epoch`, taking checkpoints as
    /// `checkpoints` says (None: none, and no change log, since nothing restarts from a
    /// benchmark's store).
    pub(crate) async fn with_epoch(
        epoch: Duration,
        checkpoints: Option<crate::config::CheckpointConfig>,
    ) -> Result<Harness> {
        let dir = std::env::temp_dir().join(format!("weir-bench-{}-{}", std::process::id(), rand_suffix()));
        let storage = StorageConfig::default();
        let status = Arc::new(crate::status::Status::default());
        let prepared = match &checkpoints {
            Some(config) => Some(crate::checkpoint::prepare(config, &storage, &dir, Arc::clone(&status)).await?),
            None => None,
        };
        let store = Arc::new(RocksStore::open(&dir.join("state"), &storage)?);
        crate::connectors::replay::register();
        let catalog = Catalog::open(Arc::clone(&store) as Arc<dyn crate::state::store::StateStore>, "dev", status)?;
        let (catalog, checkpointer) = match prepared {
            Some(prepared) => (catalog, Some(prepared.checkpointer(store).0)),
            None => (catalog.without_change_log(), None),
        };
        let catalog = Arc::new(catalog);
        let streaming = Streaming::new(
            Arc::clone(&catalog),
            EpochBounds { interval: epoch, max_rows: crate::config::DEFAULT_EPOCH_MAX_ROWS },
            storage.state_cache_entries,
            Duration::from_secs(10),
            checkpointer,
            0,
        );
        let frontend = Frontend::new(catalog, streaming, vec![]).await?;
        let session = frontend.new_session("bench");
        Ok(Harness { frontend, session, _dir: tempdir::TempDir(dir) })
    }

    pub(crate) async fn run(&mut self, sql: &str) -> Result<()> {
        for statement in self.frontend.parse(sql)? {
            if let StatementResult::Rows { mut stream, .. } =
                self.frontend.execute(&mut self.session, statement, None).await?
            {
                use futures::StreamExt;
                while let Some(batch) = stream.next().await {
                    batch?;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn scalar_i64(&mut self, sql: &str) -> Result<i64> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::Int64Type;
        use futures::StreamExt;
        let statement = self.frontend.parse(sql)?.remove(0);
        let StatementResult::Rows { mut stream, .. } =
            self.frontend.execute(&mut self.session, statement, None).await?
        else {
            return Err(WeirError::internal("expected rows"));
        };
        let batch = stream.next().await.ok_or_else(|| WeirError::internal("no row"))??;
        let column = datafusion::arrow::compute::cast(batch.column(0), &datafusion::arrow::datatypes::DataType::Int64)?;
        Ok(column.as_primitive::<Int64Type>().value(0))
    }

    async fn insert_events(&mut self, rows: u64, batch: u64) -> Result<()> {
        self.insert_range(0, rows, batch, "value % 10000, value % 997, value").await
    }

    /// Inserts rows `from..to` into `events`, `batch` per statement, each computed from `value`
    /// by `columns`.
    async fn insert_range(&mut self, from: u64, to: u64, batch: u64, columns: &str) -> Result<()> {
        let mut start = from;
        while start < to {
            let end = (start + batch).min(to) - 1;
            self.run(&format!("INSERT INTO events SELECT {columns} FROM generate_series({start}, {end}) AS value"))
                .await?;
            start = end + 1;
        }
        Ok(())
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish() % 1_000_000
}

/// Peak resident set size of this process, in MiB (Linux).
pub(crate) fn peak_rss_mib() -> f64 {
    memory_mib("VmHWM:")
}

/// The process allocator's (jemalloc's) live heap and the pages it keeps resident, in MiB;
/// zeros where jemalloc is not the allocator (tests). The rest of the resident set is RocksDB's
/// C++ allocations (glibc's malloc), code and stacks.
pub(crate) fn heap_mib() -> (u64, u64) {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let mib = |bytes: tikv_jemalloc_ctl::Result<usize>| bytes.map(|b| (b >> 20) as u64).unwrap_or(0);
    (mib(stats::allocated::read()), mib(stats::resident::read()))
}

/// Resident set size now, in MiB (Linux).
fn rss_mib() -> f64 {
    memory_mib("VmRSS:")
}

fn memory_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// An event-time scenario: rows/s and the resident memory after each quarter of the stream.
async fn windowed(name: &str, options: &BenchOptions) -> Result<(f64, f64, Vec<f64>)> {
    let mut h = Harness::new().await?;
    h.run(&format!("SET streaming_parallelism = {}", options.parallelism)).await?;
    h.run(
        "CREATE TABLE events (k BIGINT, v BIGINT, ts TIMESTAMP,
           WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY",
    )
    .await?;
    let (view, copies) = match name {
        "tumble" => ("CREATE MATERIALIZED VIEW per_window AS SELECT window_start, k, count(*) AS n, max(v) AS top FROM TUMBLE(events, ts, INTERVAL '10' SECOND) GROUP BY window_start, k EMIT ON WINDOW CLOSE", 1),
        _ => ("CREATE MATERIALIZED VIEW per_window AS SELECT window_start, k, count(*) AS n FROM HOP(events, ts, INTERVAL '2' SECOND, INTERVAL '10' SECOND) GROUP BY window_start, k EMIT ON WINDOW CLOSE", 5),
    };
    h.run(view).await?;
    // Event time: `value` milliseconds, minus up to 1.8 s of disorder.
    let columns = "value % 1000, value % 997, to_timestamp_millis(value - (value % 7) * 300)";
    let started = Instant::now();
    // Four quarters, each flushed (no rows waiting for the view) before memory is sampled.
    let mut samples = Vec::new();
    let store = Arc::clone(h.frontend.catalog().store());
    let mut done = 0;
    for q in 1..=4u64 {
        let end = options.rows * q / 4;
        h.insert_range(done, end, options.batch, columns).await?;
        done = end;
        h.run("FLUSH").await?;
        samples.push(rss_mib());
        let parts: Vec<String> =
            store.memory_bytes().iter().map(|(part, bytes)| format!("{part} {} MiB", bytes >> 20)).collect();
        eprintln!("{name}: after {done} rows: resident {:.0} MiB; RocksDB {}", rss_mib(), parts.join(", "));
    }
    h.run("FLUSH").await?;
    let seconds = started.elapsed().as_secs_f64();
    // One event long after the stream closes every window; then every event must be counted.
    h.run("INSERT INTO events VALUES (0, 0, to_timestamp_millis(1000000000000)); FLUSH").await?;
    let counted = h.scalar_i64("SELECT sum(n) FROM per_window").await?;
    if counted != (options.rows * copies) as i64 {
        return Err(WeirError::internal(format!(
            "{name}: the view counts {counted} rows, expected {}",
            options.rows * copies
        )));
    }
    Ok((options.rows as f64 / seconds, seconds, samples))
}

const SETUP: &str = "CREATE TABLE dim (k BIGINT PRIMARY KEY, region VARCHAR);
     INSERT INTO dim SELECT i, 'r' || CAST(i % 10 AS VARCHAR) FROM generate_series(0, 9999) AS i;";

async fn scenario(name: &str, options: &BenchOptions) -> Result<(f64, f64)> {
    let mut h = Harness::new().await?;
    h.run(&format!("SET streaming_parallelism = {}", options.parallelism)).await?;
    h.run(SETUP).await?;
    // `upsert` writes to a keyed table: each row's key is looked up to build the changelog.
    let key = if name == "upsert" { " PRIMARY KEY" } else { "" };
    h.run(&format!("CREATE TABLE events (k BIGINT, v BIGINT, seq BIGINT{key})")).await?;
    let view = match name {
        "agg" | "backfill" | "upsert" => "CREATE MATERIALIZED VIEW per_key AS SELECT k, count(*) AS n, sum(v) AS s, max(v) AS top FROM events GROUP BY k",
        "join" => "CREATE MATERIALIZED VIEW per_region AS SELECT d.region, count(*) AS n, sum(e.v) AS s FROM events e JOIN dim d ON e.k = d.k GROUP BY d.region",
        other => {
            return Err(WeirError::syntax(format!("unknown scenario {other}: agg, join, backfill, upsert, tumble, hop")))
        }
    };
    let started;
    if name == "backfill" {
        h.insert_events(options.rows, options.batch).await?;
        started = Instant::now();
        h.run(view).await?;
    } else {
        h.run(view).await?;
        started = Instant::now();
        h.insert_events(options.rows, options.batch).await?;
        h.run("FLUSH").await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    // The view must hold every row, or the figure means nothing.
    let check = if name == "join" { "SELECT sum(n) FROM per_region" } else { "SELECT sum(n) FROM per_key" };
    let counted = h.scalar_i64(check).await?;
    if counted != options.rows as i64 {
        return Err(WeirError::internal(format!("{name}: the view counts {counted} rows, expected {}", options.rows)));
    }
    Ok((options.rows as f64 / seconds, seconds))
}

pub async fn run(options: BenchOptions) -> Result<()> {
    for name in &options.scenarios {
        let (rate, seconds, samples) = if name == "tumble" || name == "hop" {
            windowed(name, &options).await?
        } else {
            let (rate, seconds) = scenario(name, &options).await?;
            (rate, seconds, vec![])
        };
        let rss = peak_rss_mib();
        let by_quarter: Vec<String> = samples.iter().map(|m| format!("{m:.0}")).collect();
        if !samples.is_empty() {
            println!("{name}: resident MiB after each quarter of the stream: {}", by_quarter.join(", "));
        }
        println!(
            "{name}: {} rows in {seconds:.2} s = {:.0} rows/s, peak RSS {rss:.0} MiB (parallelism {}, {} cores)",
            options.rows,
            rate,
            if options.parallelism == 0 { "per core".to_string() } else { options.parallelism.to_string() },
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        );
        println!(
            "{{\"scenario\":\"{name}\",\"rows\":{},\"parallelism\":{},\"seconds\":{seconds:.3},\"rows_per_second\":{rate:.0},\"peak_rss_mib\":{rss:.0},\"rss_mib_by_quarter\":[{}]}}",
            options.rows,
            options.parallelism,
            by_quarter.join(",")
        );
    }
    Ok(())
}
