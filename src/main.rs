//! The `weir` command: `weir` (or `weir serve`) runs the server. See docs/operations.md.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use weir::config::{Config, LogFormat, Overrides};

#[derive(Parser, Debug)]
#[command(name = "weir", version, about = "Weir: a streaming SQL database speaking the Postgres wire protocol")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server (the default).
    Serve(ServeArgs),
    /// Look into the checkpoint store: list, verify, or restore a checkpoint into a new data
    /// directory (a backup's restore). Safe beside a running server.
    Checkpoint {
        #[command(subcommand)]
        what: CheckpointCommand,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Exit 0 if the server on this machine is ready (its /readyz answers 200), else 1: a
    /// container's HEALTHCHECK.
    Ready {
        /// The server's metrics address [default: WEIR_METRICS_LISTEN, or 127.0.0.1:9464; a
        /// wildcard host is asked on loopback]
        #[arg(long, value_name = "HOST:PORT")]
        metrics: Option<String>,
    },
    /// Print the SCRAM-SHA-256 verifier of a password read from standard input (one line), for
    /// `[[auth.users]] password` or `CREATE ROLE ... PASSWORD`: the config then holds no password.
    Password,
    /// Measure throughput on this machine.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Subcommand, Debug)]
enum CheckpointCommand {
    /// The checkpoints in the store, oldest first.
    List,
    /// Read every file of a checkpoint (of all, without --epoch) and check it against its
    /// manifest; exits 1 if one is broken.
    Verify {
        #[arg(long)]
        epoch: Option<u64>,
    },
    /// Download a checkpoint (the newest, without --epoch) into a new data directory; a server
    /// started on it restores that checkpoint.
    Restore {
        #[arg(long)]
        epoch: Option<u64>,
        /// The new data directory (it must hold no store).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
}

/// Which checkpoint store: as the server would find it.
#[derive(clap::Args, Debug, Clone, Default)]
struct StoreArgs {
    /// The store's URL, as `weir --checkpoint-url` [default: DATA_DIR/checkpoints]
    #[arg(long, global = true, env = "WEIR_CHECKPOINT_URL", value_name = "URL")]
    checkpoint_url: Option<String>,
    /// The server's data directory (for the default store)
    #[arg(long, global = true, env = "WEIR_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The server's TOML config file (for [checkpoint] and its S3 settings)
    #[arg(long, global = true, env = "WEIR_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Rows/s through a keyed aggregate, a join, a view's backfill, and tumbling and hopping
    /// event-time windows (see src/bench.rs).
    Streaming {
        /// Rows to insert per scenario.
        #[arg(long, default_value_t = 1_000_000)]
        rows: u64,
        /// Rows per INSERT statement.
        #[arg(long, default_value_t = 100_000)]
        batch: u64,
        /// Shards per view (0: one per core).
        #[arg(long, default_value_t = 0)]
        parallelism: usize,
        /// Scenarios to run: agg, join, backfill, upsert, tumble, hop.
        #[arg(long, value_delimiter = ',', default_value = "agg,join,backfill,upsert")]
        scenarios: Vec<String>,
    },
    /// What a network exchange between two nodes costs: rows/s and CPU per million rows over
    /// one loopback Arrow Flight stream (see src/bench/exchange.rs).
    Exchange {
        /// Nexmark bid rows to send.
        #[arg(long, default_value_t = 10_000_000)]
        rows: u64,
        /// Rows per change batch.
        #[arg(long, default_value_t = 4096)]
        batch: u64,
        /// Rows between two barriers.
        #[arg(long, default_value_t = 100_000)]
        barrier_rows: u64,
        /// Frames the consumer's inbox holds (the producer's credits).
        #[arg(long, default_value_t = 8)]
        window: u32,
    },
    /// A Nexmark query over the built-in generator (see src/bench/nexmark.rs).
    Nexmark {
        /// A query of sql/nexmark/ (q0-q22, or `recent`: a temporal filter), or `generator`
        /// for the generator alone.
        #[arg(long, default_value = "q0")]
        query: String,
        /// Events (persons, auctions and bids together).
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Shards per view (0: one per core).
        #[arg(long, default_value_t = 0)]
        parallelism: usize,
        /// Events per stored chunk.
        #[arg(long, default_value_t = 100_000)]
        chunk: u64,
        /// Events per second the sources produce (0: as fast as they can), for latency runs.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Time between epochs (barriers and commits), as `1s` or `250ms`.
        #[arg(long, default_value = "100ms", value_parser = parse_duration)]
        barrier_interval: std::time::Duration,
        /// Take checkpoints this often (`1s`), as `weir serve` does; off by default, so the
        /// figures show what checkpoints cost.
        #[arg(long, value_parser = parse_duration)]
        checkpoint_interval: Option<std::time::Duration>,
        /// Where checkpoints go (a directory, or s3://bucket/prefix with AWS_* settings);
        /// default: under the benchmark's data directory.
        #[arg(long)]
        checkpoint_url: Option<String>,
        /// Replay the events from files in this directory instead of generating them while
        /// running (the files are written first, untimed, if they are not there).
        #[arg(long)]
        files: Option<std::path::PathBuf>,
        /// Format of those files: parquet, csv or json.
        #[arg(long, default_value = "parquet")]
        format: String,
        /// Store the files' rows as they are read, instead of declaring the files immutable
        /// (`file.immutable`) and keeping offsets only.
        #[arg(long)]
        store_file_rows: bool,
        /// 1 in this many bids goes to a random auction in flight, the rest to the hot one
        /// (2: half the bids, the generator's default; 1: no hot auction).
        #[arg(long, default_value_t = 2)]
        hot_auction_ratio: u64,
        /// Read the bids from a Kafka topic on this broker and write the view to another
        /// (see src/bench/kafka.rs), instead of the built-in generator.
        #[arg(long, value_name = "HOST:PORT")]
        kafka: Option<String>,
        /// With --kafka: the sink's delivery guarantee, exactly-once, at-least-once, or none.
        #[arg(long, default_value = "exactly-once")]
        sink: String,
        /// With --kafka: the sink's shards (`sink.parallelism`), 1 unless given.
        #[arg(long)]
        sink_parallelism: Option<usize>,
        /// With --kafka: produce every bid to the topic before the pipeline starts (the
        /// pipeline alone is timed, reading a topic that is already full), instead of while it
        /// runs.
        #[arg(long)]
        preload: bool,
        /// With --kafka: the bids' encoding on the topic, json or avro (bare Avro bodies under
        /// one fixed schema, `ENCODE AVRO (schema = ...)`).
        #[arg(long, default_value = "json")]
        encode: String,
        /// With --kafka: only produce the bids to this topic (the benchmark's producer process).
        #[arg(long, hide = true)]
        produce_to: Option<String>,
    },
}

#[derive(clap::Args, Debug, Clone, Default)]
struct ServeArgs {
    /// Address for Postgres clients [default: 127.0.0.1:4566]
    #[arg(long, env = "WEIR_LISTEN", value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Where tables, state and the catalog live [default: ./weir-data]
    #[arg(long, env = "WEIR_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// A TOML config file (flags and WEIR_* variables override it)
    #[arg(long, env = "WEIR_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address of the Prometheus /metrics endpoint, or "off" [default: 127.0.0.1:9464]
    #[arg(long, env = "WEIR_METRICS_LISTEN", value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Log filter, e.g. "info" or "weir=debug" [default: info]
    #[arg(long, env = "WEIR_LOG", value_name = "FILTER")]
    log: Option<String>,
    /// Log lines as `text` or `json` (one object a line, with the view, source or sink each
    /// concerns) [default: text]
    #[arg(long, env = "WEIR_LOG_FORMAT", value_name = "FORMAT")]
    log_format: Option<String>,
    /// Milliseconds between barriers: how often views commit their changes [default: 100]
    #[arg(long, env = "WEIR_BARRIER_INTERVAL_MS", value_name = "MS")]
    barrier_interval_ms: Option<u64>,
    /// Milliseconds without rows after which an input no longer holds back the watermark of
    /// the views reading it [default: 10000]
    #[arg(long, env = "WEIR_WATERMARK_IDLE_TIMEOUT_MS", value_name = "MS")]
    watermark_idle_timeout_ms: Option<u64>,
    /// Where checkpoints go: s3://bucket/prefix (endpoint and keys from AWS_* variables or
    /// [checkpoint.s3]), file:///dir or a directory [default: DATA_DIR/checkpoints]
    #[arg(long, env = "WEIR_CHECKPOINT_URL", value_name = "URL")]
    checkpoint_url: Option<String>,
    /// Least time between checkpoints, as `1s` or `500ms`; `off`: only at DDL and at a stop [default: 1s]
    #[arg(long, env = "WEIR_CHECKPOINT_INTERVAL", value_name = "DURATION", value_parser = parse_interval_or_off)]
    checkpoint_interval: Option<std::time::Duration>,
    /// Complete checkpoints kept in the object store [default: 3]
    #[arg(long, env = "WEIR_CHECKPOINT_KEEP", value_name = "N")]
    checkpoint_keep: Option<usize>,
    /// How long a stop (SIGTERM) waits for statements under way, then for sinks to deliver its
    /// last checkpoint, each [default: 10s]
    #[arg(long, env = "WEIR_DRAIN_TIMEOUT", value_name = "DURATION", value_parser = parse_interval_or_off)]
    drain_timeout: Option<std::time::Duration>,
    /// How long a whole stop may take before the server stops at once, as a second SIGTERM
    /// does [default: 60s]
    #[arg(long, env = "WEIR_SHUTDOWN_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    shutdown_timeout: Option<std::time::Duration>,
    /// The directory connector options may read secrets from (`X.ref = 'file:<dir>/...'`)
    /// [default: /etc/weir/secrets]
    #[arg(long, env = "WEIR_SECRETS_DIR", value_name = "DIR")]
    secrets_dir: Option<PathBuf>,
    /// Join a cluster coordinated by etcd: etcd://host:port[,host:port...][/name] (without it,
    /// one process)
    #[arg(long, env = "WEIR_CLUSTER", value_name = "URL")]
    cluster: Option<String>,
    /// This node's name in the cluster, stable across its restarts
    #[arg(long, env = "WEIR_NODE_ID", value_name = "NAME")]
    node_id: Option<String>,
    /// The host other nodes and clients reach this node at [default: the --listen host]
    #[arg(long, env = "WEIR_ADVERTISE", value_name = "HOST")]
    advertise: Option<String>,
    /// Where this node's exchange service (Arrow Flight, rows between nodes) listens, advertised
    /// with the --advertise host [default: the --listen host, port 4567]
    #[arg(long, env = "WEIR_EXCHANGE_LISTEN", value_name = "ADDR")]
    exchange_listen: Option<String>,
    /// How long the cluster waits for a node it no longer hears from before giving its vnodes
    /// to others, in whole seconds [default: 2s]
    #[arg(long, env = "WEIR_CLUSTER_LEASE", value_name = "DURATION", value_parser = parse_duration)]
    cluster_lease: Option<std::time::Duration>,
}

/// jemalloc rather than glibc's malloc: under the streaming workload (batches allocated on one
/// thread, freed on another, shard threads per step) glibc's arenas kept freed memory, and the
/// resident size grew to 2.5 times the live heap (ADR 5).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's defaults keep freed pages for 10 s; a background thread returning them after 1 s
/// cut q5's peak resident memory by 15% at the same speed (docs/benchmarks.md). The
/// `_RJEM_MALLOC_CONF` environment variable still overrides this.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// RocksDB is C++ and allocates through glibc's malloc, which keeps up to eight arenas per core,
/// each holding on to memory it freed (memtables, write batches of whole epochs). Two arenas
/// cut q5's peak resident memory by about 160 MiB (6 M events, 865 -> 704 MiB, ADR 5 addendum).
/// `MALLOC_ARENA_MAX` in the environment still overrides this.
fn limit_glibc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        const M_ARENA_MAX: std::ffi::c_int = -8;
        // SAFETY: mallopt only sets a glibc malloc parameter; it is called before any thread
        // is started.
        unsafe {
            mallopt(M_ARENA_MAX, 2);
        }
    }
}

/// Runs a benchmark to completion; its errors go to stderr.
fn run_bench(bench: impl std::future::Future<Output = weir::error::Result<()>>) -> std::process::ExitCode {
    tracing_subscriber::fmt().with_env_filter(EnvFilter::new("warn")).init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = runtime.block_on(bench);
    // Stopping the runtime drops the tasks that hold the store, which closes it; then its data
    // directory can go for good.
    drop(runtime);
    weir::bench::remove_temp_dirs();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    limit_glibc_arenas();
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => args,
        Some(Command::Checkpoint { what, store }) => return run_checkpoint(what, store),
        Some(Command::Ready { metrics }) => return run_ready(metrics),
        Some(Command::Password) => return run_password(),
        Some(Command::Bench { what: BenchCommand::Streaming { rows, batch, parallelism, scenarios } }) => {
            let options = weir::bench::BenchOptions { rows, batch: batch.max(1), parallelism, scenarios };
            return run_bench(weir::bench::run(options));
        }
        Some(Command::Bench { what: BenchCommand::Exchange { rows, batch, barrier_rows, window } }) => {
            let options =
                weir::bench::exchange::ExchangeBenchOptions { rows, batch: batch.max(1), barrier_rows, window };
            return run_bench(weir::bench::exchange::run(options));
        }
        Some(Command::Bench {
            what:
                BenchCommand::Nexmark {
                    query,
                    events,
                    parallelism,
                    chunk,
                    rate,
                    barrier_interval,
                    checkpoint_interval,
                    checkpoint_url,
                    files,
                    format,
                    store_file_rows,
                    hot_auction_ratio,
                    kafka,
                    sink,
                    sink_parallelism,
                    preload,
                    encode,
                    produce_to,
                },
        }) => {
            let options = weir::bench::nexmark::NexmarkOptions {
                query,
                events,
                parallelism,
                chunk: chunk.max(1),
                rate,
                epoch: barrier_interval,
                checkpoints: checkpoint_interval.map(|interval| weir::config::CheckpointConfig {
                    url: checkpoint_url,
                    interval_ms: interval.as_millis() as u64,
                    ..Default::default()
                }),
                files,
                format,
                store_file_rows,
                hot_auction_ratio,
            };
            if let (Some(servers), Some(topic)) = (&kafka, produce_to) {
                return run_bench(weir::bench::kafka::produce(options, servers.clone(), topic, encode));
            }
            if let Some(servers) = kafka {
                let kafka = weir::bench::kafka::KafkaBenchOptions { servers, sink, sink_parallelism, preload, encode };
                return run_bench(weir::bench::kafka::run(options, kafka));
            }
            return run_bench(weir::bench::nexmark::run(options));
        }
        None => cli.serve,
    };
    let overrides = Overrides {
        listen: args.listen,
        data_dir: args.data_dir,
        metrics_listen: args.metrics_listen,
        log: args.log,
        log_format: args.log_format,
        barrier_interval_ms: args.barrier_interval_ms,
        watermark_idle_timeout_ms: args.watermark_idle_timeout_ms,
        checkpoint_url: args.checkpoint_url,
        checkpoint_interval_ms: args.checkpoint_interval.map(|d| d.as_millis() as u64),
        checkpoint_keep: args.checkpoint_keep,
        drain_timeout_ms: args.drain_timeout.map(|d| d.as_millis() as u64),
        shutdown_timeout_ms: args.shutdown_timeout.map(|d| d.as_millis() as u64),
        secrets_dir: args.secrets_dir,
        cluster: args.cluster,
        node_id: args.node_id,
        advertise: args.advertise,
        exchange_listen: args.exchange_listen,
        cluster_lease: args.cluster_lease,
    };
    let config = match Config::resolve(args.config.as_deref(), overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|_| EnvFilter::new("info"));
    match config.log_format {
        // Colours only for a terminal, not for a container's or a supervisor's log.
        LogFormat::Text => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_env_filter(filter)
            .init(),
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("weir").build().expect("tokio runtime");
    match runtime.block_on(weir::server::run(config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("weir: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `weir ready`: asks the metrics port's /readyz.
fn run_password() -> std::process::ExitCode {
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() || line.trim_end_matches(['\n', '\r']).is_empty() {
        eprintln!("weir password: give the password as one line on standard input");
        return std::process::ExitCode::FAILURE;
    }
    println!("{}", weir::catalog::password::Verifier::from_password(line.trim_end_matches(['\n', '\r'])).to_text());
    std::process::ExitCode::SUCCESS
}

fn run_ready(metrics: Option<String>) -> std::process::ExitCode {
    let text = metrics
        .or_else(|| std::env::var("WEIR_METRICS_LISTEN").ok())
        .unwrap_or_else(|| weir::config::DEFAULT_METRICS_LISTEN.to_string());
    let addr = match std::net::ToSocketAddrs::to_socket_addrs(&text).ok().and_then(|mut a| a.next()) {
        Some(mut addr) => {
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            addr
        }
        None => {
            eprintln!("weir ready: not a HOST:PORT address: {text}");
            return std::process::ExitCode::from(2);
        }
    };
    match weir::metrics::probe_ready(addr) {
        Ok(body) => {
            println!("{body}");
            std::process::ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("weir ready: {why}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `weir checkpoint ...`: prints what it found; exits 1 when it fails or finds a checkpoint
/// broken, 2 for a bad configuration.
fn run_checkpoint(what: CheckpointCommand, store: StoreArgs) -> std::process::ExitCode {
    use weir::checkpoint::admin;
    let overrides = Overrides { data_dir: store.data_dir, checkpoint_url: store.checkpoint_url, ..Default::default() };
    let config = match Config::resolve(store.config.as_deref(), overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt().with_env_filter(EnvFilter::new("warn")).with_writer(std::io::stderr).init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let (checkpoint, data_dir) = (&config.checkpoint, &config.data_dir);
    let result = runtime.block_on(async {
        match what {
            CheckpointCommand::List => admin::list(checkpoint, data_dir).await.map(|out| (out, true)),
            CheckpointCommand::Verify { epoch } => admin::verify(checkpoint, data_dir, epoch).await,
            CheckpointCommand::Restore { epoch, to } => {
                admin::restore(checkpoint, data_dir, epoch, &to).await.map(|out| (out, true))
            }
        }
    });
    match result {
        Ok((out, whole)) => {
            print!("{out}");
            if whole {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("weir checkpoint: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A duration as [`parse_duration`] reads it, or `off` (zero: turned off).
fn parse_interval_or_off(text: &str) -> Result<std::time::Duration, String> {
    match text.trim() {
        "off" | "0" => Ok(std::time::Duration::ZERO),
        other => parse_duration(other),
    }
}

/// `1s`, `250ms` or a number of milliseconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "ms"),
    };
    let n: u64 = number.parse().map_err(|_| format!("not a duration: {text}"))?;
    let duration = match unit {
        "ms" => std::time::Duration::from_millis(n),
        "s" => std::time::Duration::from_secs(n),
        _ => return Err(format!("not a duration: {text} (use s or ms)")),
    };
    if duration.is_zero() {
        return Err("the interval must be positive".into());
    }
    Ok(duration)
}
