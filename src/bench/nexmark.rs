//! `weir bench nexmark --query qN --events N`: a Nexmark query over the built-in generator, as
//! a user would run it: the three sources (`sql/nexmark/sources.sql`, bounded to N events)
//! store their rows in RocksDB, the view (`sql/nexmark/qN.sql`) commits every 1 s epoch.
//! Timed from creating the sources until every event is stored and the view has committed it.
//! `--query generator` times the generator alone (all three streams, no storage). With
//! `--files DIR` the same events are replayed from Parquet, CSV or JSON files instead (written
//! to DIR first, untimed, if missing), so other engines can be fed the very same data.
//!
//! Prints one human line and one JSON line: events/s, CPU seconds per million events (user +
//! system, all threads), p50 / p99 latency from the source starting to generate (or read) an
//! event's chunk to the view's commit of it (`weir_view_freshness_seconds`, so to bucket precision, 25%) and
//! peak RSS.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{heap_mib, peak_rss_mib, rss_mib, Harness};
use crate::connectors::nexmark::generator::{self, kind_of, EventKind, Generator, GeneratorConfig};
use crate::connectors::source::stored_position;
use crate::error::{Result, WeirError};

pub struct NexmarkOptions {
    pub query: String,
    pub events: u64,
    /// Shards per view (0: one per core).
    pub parallelism: usize,
    /// Events per stored chunk.
    pub chunk: u64,
    /// Events per second of wall-clock time the sources produce (0: as fast as they can).
    pub rate: u64,
    /// Time between epochs.
    pub epoch: Duration,
    /// Checkpoints as `weir serve` takes them (None: off).
    pub checkpoints: Option<crate::config::CheckpointConfig>,
    /// Replay from files in this directory (written first if missing) instead of generating.
    pub files: Option<PathBuf>,
    /// parquet, csv or json.
    pub format: String,
    /// Store the files' rows instead of declaring the files immutable (offsets only).
    pub store_file_rows: bool,
    /// 1 in this many bids goes to a random auction in flight, the rest to the hot one (the
    /// generator's default is 2; 1: no hot auction).
    pub hot_auction_ratio: u64,
}

const KINDS: [(&str, EventKind); 3] =
    [("person", EventKind::Person), ("auction", EventKind::Auction), ("bid", EventKind::Bid)];

/// How many rows of each kind (person, auction, bid) the first `events` events hold.
fn rows_per_kind(events: u64) -> [u64; 3] {
    let mut rows = [0u64; 3];
    for n in 0..events {
        rows[KINDS.iter().position(|(_, k)| *k == kind_of(n)).unwrap_or(2)] += 1;
    }
    rows
}

/// The file holding `events` events of `kind` in `dir` (written now, untimed, if missing).
fn export(dir: &Path, kind: EventKind, name: &str, events: u64, format: &str) -> Result<PathBuf> {
    use datafusion::arrow::csv::Writer as CsvWriter;
    use datafusion::arrow::json::LineDelimitedWriter;
    use datafusion::parquet::arrow::ArrowWriter;
    let path = dir.join(format!("{name}-{events}.{format}"));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| WeirError::io(format!("cannot create {}: {e}", dir.display())))?;
    let generator = Generator::new(kind, GeneratorConfig::default());
    // Written under another name first, so an interrupted export is not taken for a whole one.
    let partial = path.with_extension("partial");
    let file = std::fs::File::create(&partial)
        .map_err(|e| WeirError::io(format!("cannot create {}: {e}", partial.display())))?;
    let chunks = (0..events).step_by(1_000_000).map(|from| generator.batch(from, (from + 1_000_000).min(events)));
    match format {
        "parquet" => {
            let failed = |e: datafusion::parquet::errors::ParquetError| WeirError::io(format!("writing parquet: {e}"));
            let mut writer =
                ArrowWriter::try_new(file, std::sync::Arc::clone(generator.schema()), None).map_err(failed)?;
            for chunk in chunks {
                writer.write(&chunk?).map_err(failed)?;
            }
            writer.close().map_err(failed)?;
        }
        "csv" => {
            let mut writer = CsvWriter::new(file);
            for chunk in chunks {
                writer.write(&chunk?)?;
            }
        }
        "json" => {
            let mut writer = LineDelimitedWriter::new(file);
            for chunk in chunks {
                writer.write(&chunk?)?;
            }
            writer.finish()?;
        }
        other => return Err(WeirError::syntax(format!("unknown file format {other}: parquet, csv or json"))),
    }
    std::fs::rename(&partial, &path).map_err(|e| WeirError::io(format!("cannot rename {}: {e}", partial.display())))?;
    Ok(path)
}

/// `CREATE SOURCE` statements replaying the files in `dir` (CSV and JSON need the columns).
/// The files are written once and never changed, so unless `store_rows` they are declared
/// `file.immutable` (offsets stored, rows read again when needed), as other engines read files.
fn file_sources(dir: &Path, events: u64, format: &str, chunk: u64, store_rows: bool) -> Result<String> {
    let immutable = if store_rows { "" } else { ", file.immutable = 'true'" };
    let mut sql = String::new();
    for (name, kind) in KINDS {
        let path = export(dir, kind, name, events, format)?;
        let columns: String = match format {
            "parquet" => String::new(),
            _ => generator::schema(kind)
                .fields()
                .iter()
                .map(|f| {
                    let ty = match f.data_type() {
                        datafusion::arrow::datatypes::DataType::Int64 => "BIGINT",
                        datafusion::arrow::datatypes::DataType::Timestamp(..) => "TIMESTAMP",
                        _ => "VARCHAR",
                    };
                    format!("{} {ty}, ", f.name())
                })
                .collect(),
        };
        // As in sources.sql.
        let stamp = if name == "bid" { "p_time AS PROCTIME(), " } else { "" };
        sql.push_str(&format!(
            "CREATE SOURCE {name} ({columns}{stamp}WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) \
             WITH (connector = 'file', path = '{}', batch.size = '{chunk}'{immutable}) FORMAT PLAIN ENCODE {};\n",
            path.display(),
            format.to_uppercase()
        ));
    }
    Ok(sql)
}

/// The queries shipped in `sql/nexmark/`.
pub(crate) const QUERIES: &[(&str, &str)] = &[
    ("q0", include_str!("../../sql/nexmark/q0.sql")),
    ("q1", include_str!("../../sql/nexmark/q1.sql")),
    ("q2", include_str!("../../sql/nexmark/q2.sql")),
    ("q3", include_str!("../../sql/nexmark/q3.sql")),
    ("q4", include_str!("../../sql/nexmark/q4.sql")),
    ("q5", include_str!("../../sql/nexmark/q5.sql")),
    ("q6", include_str!("../../sql/nexmark/q6.sql")),
    ("q7", include_str!("../../sql/nexmark/q7.sql")),
    ("q8", include_str!("../../sql/nexmark/q8.sql")),
    ("q9", include_str!("../../sql/nexmark/q9.sql")),
    ("q10", include_str!("../../sql/nexmark/q10.sql")),
    ("q11", include_str!("../../sql/nexmark/q11.sql")),
    ("q12", include_str!("../../sql/nexmark/q12.sql")),
    ("q13", include_str!("../../sql/nexmark/q13.sql")),
    ("q14", include_str!("../../sql/nexmark/q14.sql")),
    ("q15", include_str!("../../sql/nexmark/q15.sql")),
    ("q16", include_str!("../../sql/nexmark/q16.sql")),
    ("q17", include_str!("../../sql/nexmark/q17.sql")),
    ("q18", include_str!("../../sql/nexmark/q18.sql")),
    ("q19", include_str!("../../sql/nexmark/q19.sql")),
    ("q20", include_str!("../../sql/nexmark/q20.sql")),
    ("q21", include_str!("../../sql/nexmark/q21.sql")),
    ("q22", include_str!("../../sql/nexmark/q22.sql")),
    // Not Nexmark: a temporal filter over the bids' processing time.
    ("recent", include_str!("../../sql/nexmark/recent.sql")),
    // Not Nexmark: bids per auction, where one hot auction takes half the bids (the skew
    // benchmark), in one phase and in two.
    ("hot", include_str!("../../sql/nexmark/hot.sql")),
    ("hot_two_phase", include_str!("../../sql/nexmark/hot_two_phase.sql")),
];
const SOURCES: &str = include_str!("../../sql/nexmark/sources.sql");

/// The `q` quantile of a histogram, as the upper bound of the bucket it falls in.
pub(crate) fn quantile(histogram: &prometheus::Histogram, q: f64) -> f64 {
    use prometheus::core::Metric;
    let metric = histogram.metric();
    let h = metric.get_histogram();
    let target = (h.get_sample_count() as f64 * q).ceil().max(1.0) as u64;
    h.get_bucket().iter().find(|b| b.cumulative_count() >= target).map(|b| b.upper_bound()).unwrap_or(f64::NAN)
}

/// CPU seconds this process has used (user + system).
pub(crate) fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses): utime and stime are 14 and 15.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

pub async fn run(options: NexmarkOptions) -> Result<()> {
    let mut cpu_before = cpu_seconds();
    let mut started = Instant::now();
    if options.query == "generator" {
        let config = GeneratorConfig::default();
        let kinds = [EventKind::Person, EventKind::Auction, EventKind::Bid];
        let generators: Vec<Generator> = kinds.iter().map(|&k| Generator::new(k, config.clone())).collect();
        let mut rows = 0usize;
        let mut from = 0;
        while from < options.events {
            let to = (from + options.chunk).min(options.events);
            for g in &generators {
                rows += g.batch(from, to)?.num_rows();
            }
            from = to;
        }
        if rows as u64 != options.events {
            return Err(WeirError::internal(format!("generated {rows} rows for {} events", options.events)));
        }
    } else {
        let (_, view) = QUERIES.iter().find(|(name, _)| *name == options.query).ok_or_else(|| {
            let names: Vec<&str> = QUERIES.iter().map(|(n, _)| *n).collect();
            WeirError::syntax(format!("unknown query {}: generator, {}", options.query, names.join(", ")))
        })?;
        // Files are written before the clock starts.
        let (sources, done_at) = match &options.files {
            Some(dir) => {
                let sql = file_sources(dir, options.events, &options.format, options.chunk, options.store_file_rows)?;
                (sql, rows_per_kind(options.events))
            }
            None => {
                let sql = SOURCES.replace(
                    "nexmark.event.num = '100000'",
                    &format!(
                        "nexmark.event.num = '{}', nexmark.max.chunk.size = '{}', nexmark.events.per.second = '{}', nexmark.hot.auction.ratio = '{}'",
                        options.events, options.chunk, options.rate, options.hot_auction_ratio
                    ),
                );
                // A generator's offset is the next event number.
                (sql, [options.events; 3])
            }
        };
        started = Instant::now();
        cpu_before = cpu_seconds();
        let mut h = Harness::with_epoch(options.epoch, options.checkpoints.clone()).await?;
        h.run(&format!("SET streaming_parallelism = {}", options.parallelism)).await?;
        h.run(&sources).await?;
        h.run(view).await?;
        // Wait until every source has stored every event, then until the view has them.
        let catalog = std::sync::Arc::clone(h.frontend.catalog());
        // Resident memory sampled every second, with RocksDB's share at the highest sample.
        let mut highest: (f64, Vec<(&'static str, u64)>, (u64, u64)) = (0.0, vec![], (0, 0));
        let mut last_sample = Instant::now();
        for ((source, _), done_at) in KINDS.iter().zip(done_at) {
            let relation = catalog.get(source).ok_or_else(|| WeirError::internal("source missing"))?;
            while stored_position(&catalog, &relation)?.records < done_at {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if last_sample.elapsed() >= Duration::from_secs(1) {
                    last_sample = Instant::now();
                    let rss = rss_mib();
                    if rss > highest.0 {
                        highest = (rss, catalog.store().memory_bytes(), heap_mib());
                    }
                }
            }
        }
        let parts: Vec<String> = highest.1.iter().map(|(part, bytes)| format!("{part} {} MiB", bytes >> 20)).collect();
        let (allocated, resident) = highest.2;
        eprintln!(
            "highest resident sample {:.0} MiB; jemalloc then: {allocated} MiB allocated, {resident} MiB resident; RocksDB then: {}",
            highest.0,
            parts.join(", ")
        );
        h.run("FLUSH").await?;
        let bids = crate::metrics::SOURCE_ROWS_TOTAL.with_label_values(&["bid"]).get();
        if bids != options.events / 50 * 46 + (options.events % 50).saturating_sub(4) {
            return Err(WeirError::internal(format!("bid holds {bids} rows for {} events", options.events)));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let rate = options.events as f64 / seconds;
    let cpu_per_million = cpu / (options.events as f64 / 1e6);
    let rss = peak_rss_mib();
    let freshness = crate::metrics::VIEW_FRESHNESS_SECONDS.with_label_values(&[&options.query]);
    let (p50, p99) = (quantile(&freshness, 0.5) * 1000.0, quantile(&freshness, 0.99) * 1000.0);
    let source = match &options.files {
        Some(_) if options.store_file_rows => format!("{} files, rows stored", options.format),
        Some(_) => format!("{} files", options.format),
        None => "generator".to_string(),
    };
    let checkpoints = crate::metrics::CHECKPOINTS_TOTAL.with_label_values(&["complete"]).get();
    let uploaded_mib = crate::metrics::CHECKPOINT_UPLOADED_BYTES_TOTAL.get() as f64 / (1 << 20) as f64;
    let alignment = &*crate::metrics::CHECKPOINT_ALIGNMENT_SECONDS;
    // Mean and p99 of a checkpoint phase, or "none" when no checkpoint got that far.
    let phase = |h: &prometheus::Histogram| match h.get_sample_count() {
        0 => "none".to_string(),
        n => {
            format!("mean {:.0} ms p99 <= {:.0} ms", h.get_sample_sum() / n as f64 * 1000.0, quantile(h, 0.99) * 1000.0)
        }
    };
    let checkpointed = match &options.checkpoints {
        Some(c) => format!(
            ", checkpoints every {} ms: {checkpoints} uploaded, {uploaded_mib:.1} MiB, alignment {}, snapshot {}",
            c.interval_ms,
            phase(alignment),
            phase(&crate::metrics::CHECKPOINT_SNAPSHOT_SECONDS),
        ),
        None => ", checkpoints off".to_string(),
    };
    println!(
        "nexmark {} ({source}): {} events in {seconds:.2} s = {rate:.0} events/s, {cpu_per_million:.2} CPU s per million events, latency p50 <= {p50:.0} ms p99 <= {p99:.0} ms, peak RSS {rss:.0} MiB{checkpointed} ({} cores)",
        options.query,
        options.events,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    // One JSON line; a figure that does not exist (the generator alone has no latency) is null.
    let whole = |v: f64| v.is_finite().then(|| v.round() as u64);
    let json = serde_json::json!({
        "query": options.query,
        "source": source,
        "events": options.events,
        "parallelism": options.parallelism,
        "epoch_ms": options.epoch.as_millis() as u64,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "events_per_second": whole(rate),
        "cpu_seconds_per_million_events": (cpu_per_million * 1000.0).round() / 1000.0,
        "latency_p50_ms": whole(p50),
        "latency_p99_ms": whole(p99),
        "peak_rss_mib": whole(rss),
        "checkpoint_interval_ms": options.checkpoints.as_ref().map(|c| c.interval_ms),
        "checkpoints": checkpoints,
        "checkpoint_uploaded_mib": (uploaded_mib * 10.0).round() / 10.0,
    });
    println!("{json}");
    Ok(())
}
