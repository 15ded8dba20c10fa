//! Prometheus metrics: the registry, the server's own metrics, and the HTTP endpoint serving them
//! (`/metrics`) with the health probes (`/healthz`, `/readyz`)
//! (`--metrics-listen`). Each layer registers what it measures here, in one place, so the list
//! below is the list of what Weir exports (documented in docs/operations.md).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::LazyLock;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use prometheus::{Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};
use tokio::net::TcpListener;
use tracing::{info, warn};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(|| Registry::new_custom(None, None).expect("registry"));

/// Every registered family's name, help and type (`counter`, ...), for [`render`].
static DECLARED: LazyLock<parking_lot::Mutex<Vec<(String, String, &'static str)>>> = LazyLock::new(Default::default);

fn register<T: prometheus::core::Collector + Clone + 'static>(metric: T) -> T {
    use prometheus::proto::MetricType;
    for family in metric.collect() {
        let kind = match family.get_field_type() {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::HISTOGRAM => "histogram",
            MetricType::SUMMARY => "summary",
            MetricType::UNTYPED => "untyped",
        };
        // HELP text escapes as the exposition format asks.
        let help = family.help().replace('\\', "\\\\").replace('\n', "\\n");
        DECLARED.lock().push((family.name().to_string(), help, kind));
    }
    REGISTRY.register(Box::new(metric.clone())).expect("metric registered once");
    metric
}

/// Client connections accepted since start.
pub static CONNECTIONS_TOTAL: LazyLock<IntCounter> =
    LazyLock::new(|| register(IntCounter::new("weir_connections_total", "Client connections accepted").unwrap()));

/// Client connections open now.
pub static CONNECTIONS_ACTIVE: LazyLock<IntGauge> =
    LazyLock::new(|| register(IntGauge::new("weir_connections_active", "Client connections open now").unwrap()));

/// Statements run, by outcome (`ok` / `error`).
pub static STATEMENTS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(Opts::new("weir_statements_total", "Statements run, by outcome"), &["outcome"]).unwrap(),
    )
});

/// Queries and DML statements planned, by whether a session's cached plan served them
/// (`frontend::plan_cache`): `cached` or `planned`; `lookup` counts the cached runs that were
/// one key lookup, answered without DataFusion (`frontend::point_lookup`).
pub static PLANS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_plans_total", "Statements planned, by whether a cached plan served them"),
            &["plan"],
        )
        .unwrap(),
    )
});

/// Errors sent to clients, by SQLSTATE.
pub static ERRORS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(Opts::new("weir_errors_total", "Errors sent to clients, by SQLSTATE"), &["sqlstate"])
            .unwrap(),
    )
});

/// Rows or batches a view could not compute, by view (expression errors yield NULL).
pub static VIEW_ERRORS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(Opts::new("weir_view_errors_total", "Errors inside materialized views, by view"), &["view"])
            .unwrap(),
    )
});

/// Rows into and out of each operator of each view.
pub static OPERATOR_ROWS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_operator_rows_total", "Rows into and out of view operators"),
            &["view", "operator", "direction"],
        )
        .unwrap(),
    )
});

/// Keys a view's state TTL forgot (`WITH (state_ttl = ...)`): an aggregate's groups, a join
/// side's keys, idle for the TTL.
pub static STATE_TTL_FORGOTTEN_KEYS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_state_ttl_forgotten_keys_total", "Keys a view's state TTL forgot, idle that long"),
            &["view"],
        )
        .unwrap(),
    )
});

/// Retractions of rows a view's state TTL had already forgotten: nothing left to take them
/// from, so they change nothing (as in Flink).
pub static STATE_TTL_IGNORED_RETRACTIONS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "weir_state_ttl_ignored_retractions_total",
                "Retractions of rows whose state the view's state TTL had already forgotten",
            ),
            &["view"],
        )
        .unwrap(),
    )
});

/// Groups of final windows that windowed aggregates finished (emitted and deleted) before
/// their epoch's barrier.
pub static GROUPS_FINISHED_EARLY_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "weir_groups_finished_early_total",
                "Groups of final windows finished before their epoch's barrier",
            ),
            &["view"],
        )
        .unwrap(),
    )
});

/// Barriers injected before their interval was up, because the epoch held `epoch_max_rows`.
pub static EARLY_BARRIERS_TOTAL: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    register(
        prometheus::IntCounter::new(
            "weir_early_barriers_total",
            "Barriers injected early because an epoch held epoch_max_rows rows",
        )
        .unwrap(),
    )
});

/// Time from a barrier's injection to a view's commit of its epoch.
pub static BARRIER_LATENCY_SECONDS: LazyLock<prometheus::HistogramVec> = LazyLock::new(|| {
    register(
        prometheus::HistogramVec::new(
            HistogramOpts::new("weir_barrier_latency_seconds", "Barrier injection to view commit")
                .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["view"],
        )
        .unwrap(),
    )
});

/// From a change coming into being at a view's input (a table's statement committed, a
/// source starting to read the chunk) to the view's commit that includes it: how stale a view
/// is, end to end.
pub static VIEW_FRESHNESS_SECONDS: LazyLock<prometheus::HistogramVec> = LazyLock::new(|| {
    register(
        prometheus::HistogramVec::new(
            HistogramOpts::new(
                "weir_view_freshness_seconds",
                "Input change (statement commit, source chunk read) to view commit",
            )
            .buckets(prometheus::exponential_buckets(0.001, 1.25, 60).expect("buckets")),
            &["view"],
        )
        .unwrap(),
    )
});

/// The last epoch each view committed.
pub static VIEW_EPOCH: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(Opts::new("weir_view_committed_epoch", "Last committed epoch"), &["view"])
            .unwrap(),
    )
});

/// Event time: each view's watermark (seconds since the epoch).
pub static VIEW_WATERMARK_SECONDS: LazyLock<prometheus::GaugeVec> = LazyLock::new(|| {
    register(
        prometheus::GaugeVec::new(
            Opts::new("weir_view_watermark_seconds", "Event-time watermark of a view"),
            &["view"],
        )
        .unwrap(),
    )
});

/// Event time: the watermark of each watermarked input as a view reads it.
pub static SOURCE_WATERMARK_SECONDS: LazyLock<prometheus::GaugeVec> = LazyLock::new(|| {
    register(
        prometheus::GaugeVec::new(
            Opts::new("weir_source_watermark_seconds", "Event-time watermark of a view's input"),
            &["view", "source"],
        )
        .unwrap(),
    )
});

/// Wall-clock time minus the view's watermark, at its last commit.
pub static WATERMARK_LAG_SECONDS: LazyLock<prometheus::GaugeVec> = LazyLock::new(|| {
    register(
        prometheus::GaugeVec::new(Opts::new("weir_watermark_lag_seconds", "Now minus the view's watermark"), &["view"])
            .unwrap(),
    )
});

/// Row copies that arrived after their window could no longer change, by view.
pub static LATE_ROWS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(Opts::new("weir_late_rows_total", "Rows too late for their window, by view"), &["view"])
            .unwrap(),
    )
});

/// Bytes a view's operators hold in memory outside their state tables' caches (ADR 22, 24).
pub static OPERATOR_MEMORY_BYTES: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(
            Opts::new(
                "weir_operator_memory_bytes",
                "Bytes operators hold in memory outside their state tables' caches, by view",
            ),
            &["view"],
        )
        .unwrap(),
    )
});

/// Windows (or rows waiting for their window to close) a view holds state for.
pub static OPEN_WINDOWS: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(Opts::new("weir_open_windows", "Windows with state, by view"), &["view"]).unwrap(),
    )
});

/// Rows each source's connector has stored.
pub static SOURCE_ROWS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(IntCounterVec::new(Opts::new("weir_source_rows_total", "Rows stored by a source"), &["source"]).unwrap())
});

/// Records a source could not decode, kept as dead letters.
pub static SOURCE_DEAD_LETTERS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_source_dead_letters_total", "Records a source could not decode (kept as dead letters)"),
            &["source"],
        )
        .unwrap(),
    )
});

pub static SOURCE_RETRIES_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "weir_source_retries_total",
                "Reads a source retried because its connector could not be read (a broker or server gone)",
            ),
            &["source"],
        )
        .unwrap(),
    )
});

/// Bytes of each materialized view's state as stored: its rows and its operators' state tables
/// (RocksDB's estimate of its files; recent writes still in memory are not counted).
pub static VIEW_STATE_BYTES: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(
            Opts::new(
                "weir_view_state_bytes",
                "Bytes of a materialized view's rows and operator state as stored, by view",
            ),
            &["view"],
        )
        .unwrap(),
    )
});

/// Bytes in the state store (RocksDB's estimate of live data plus memtables), every 5 s.
pub static STATE_BYTES: LazyLock<IntGauge> =
    LazyLock::new(|| register(IntGauge::new("weir_state_bytes", "Bytes held by the state store").unwrap()));

/// Vnodes this node owns in the cluster's current assignment (0 outside a cluster).
pub static CLUSTER_VNODES: LazyLock<IntGauge> = LazyLock::new(|| {
    register(IntGauge::new("weir_cluster_vnodes", "Vnodes this node owns in the cluster's assignment").unwrap())
});
/// 1 while this node is the cluster's elected coordinator.
pub static CLUSTER_COORDINATOR: LazyLock<IntGauge> = LazyLock::new(|| {
    register(IntGauge::new("weir_cluster_coordinator", "1 while this node is the cluster's coordinator").unwrap())
});
/// Times this node found its etcd lease ended (it stopped acting on its assignment and joined
/// again).
pub static CLUSTER_FENCED_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new("weir_cluster_fenced_total", "Times this node found its cluster lease ended and joined again")
            .unwrap(),
    )
});
/// Network exchanges (`exchange::outbound`): rows and bytes (Arrow IPC) this node sent to
/// other nodes, bytes it received, and the seconds its producers waited for a consumer's
/// credit (backpressure from a slower node).
pub static EXCHANGE_ROWS_SENT_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new("weir_exchange_rows_sent_total", "Rows this node sent to other nodes over exchanges").unwrap(),
    )
});
pub static EXCHANGE_BYTES_SENT_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new("weir_exchange_bytes_sent_total", "Arrow IPC bytes this node sent over exchanges").unwrap(),
    )
});
pub static EXCHANGE_BYTES_RECEIVED_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new("weir_exchange_bytes_received_total", "Arrow IPC bytes this node received over exchanges")
            .unwrap(),
    )
});
pub static EXCHANGE_CREDIT_WAIT_SECONDS_TOTAL: LazyLock<prometheus::Counter> = LazyLock::new(|| {
    register(
        prometheus::Counter::new(
            "weir_exchange_credit_wait_seconds_total",
            "Seconds this node's exchange producers waited for a consumer's credit",
        )
        .unwrap(),
    )
});
/// Exchange streams this node refused, by reason (`fenced`, `unexpected`, `taken`, `schema`,
/// `misdirected`, `version`, `malformed`).
pub static EXCHANGE_STREAMS_REFUSED_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_exchange_streams_refused_total", "Exchange streams this node refused, by reason"),
            &["reason"],
        )
        .unwrap(),
    )
});
/// Memory the state store holds, by part (`memtables`, `block_cache`, `table_readers`), every 5 s:
/// with `weir_operator_memory_bytes`, where a server's resident memory goes.
pub static STATE_MEMORY_BYTES: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(
            Opts::new("weir_state_memory_bytes", "Bytes of memory the state store holds, by part"),
            &["part"],
        )
        .unwrap(),
    )
});

/// Time to run a statement (until its result starts streaming).
pub static STATEMENT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register(
        Histogram::with_opts(HistogramOpts::new("weir_statement_duration_seconds", "Time to run a statement")).unwrap(),
    )
});

/// Checkpoints ended, by outcome (`complete` / `failed`).
pub static CHECKPOINTS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(Opts::new("weir_checkpoints_total", "Checkpoints ended, by outcome"), &["outcome"]).unwrap(),
    )
});

/// From a checkpoint barrier's injection to its manifest in the object store.
pub static CHECKPOINT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register(
        Histogram::with_opts(HistogramOpts::new(
            "weir_checkpoint_duration_seconds",
            "From a checkpoint barrier's injection to its manifest in the object store",
        ))
        .unwrap(),
    )
});

/// From a checkpoint barrier's injection until every view has committed it.
pub static CHECKPOINT_ALIGNMENT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register(
        Histogram::with_opts(HistogramOpts::new(
            "weir_checkpoint_alignment_seconds",
            "From a checkpoint barrier's injection until every view has committed it",
        ))
        .unwrap(),
    )
});

/// Taking a checkpoint's local snapshot (a RocksDB checkpoint: memtables flushed, files
/// hard-linked), once every view has committed its barrier; views' later commits are held in
/// memory meanwhile (`weir_checkpoint_held_bytes`). Snapshots taken, not failed attempts.
pub static CHECKPOINT_SNAPSHOT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register(
        Histogram::with_opts(HistogramOpts::new(
            "weir_checkpoint_snapshot_seconds",
            "Taking a checkpoint's local snapshot, after every view committed its barrier",
        ))
        .unwrap(),
    )
});

/// 1 while a view's or checkpoint's write waits for the data directory's file system to take
/// writes again (full or read-only: statements' writes are refused with 53100 meanwhile).
pub static DISK_FULL: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new("weir_disk_full", "1 while writes wait for the data directory to take writes again").unwrap(),
    )
});

/// View commits held in memory while a checkpoint's snapshot is awaited (ADR 18), at its
/// release: how far the views ran ahead of the snapshot.
pub static CHECKPOINT_HELD_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new("weir_checkpoint_held_bytes", "View commits held in memory until the last snapshot was taken")
            .unwrap(),
    )
});

/// Bytes of checkpoint files uploaded to the object store.
pub static CHECKPOINT_UPLOADED_BYTES_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    register(IntCounter::new("weir_checkpoint_uploaded_bytes_total", "Bytes of checkpoint files uploaded").unwrap())
});

/// The epoch of the newest complete checkpoint.
pub static CHECKPOINT_LAST_COMPLETE_EPOCH: LazyLock<IntGauge> = LazyLock::new(|| {
    register(IntGauge::new("weir_checkpoint_last_complete_epoch", "Epoch of the newest complete checkpoint").unwrap())
});

/// How long the last start took to restore the store from a checkpoint (0: nothing restored).
pub static RECOVERY_SECONDS: LazyLock<prometheus::Gauge> = LazyLock::new(|| {
    register(
        prometheus::Gauge::new("weir_recovery_seconds", "Time the last start took to restore from a checkpoint")
            .unwrap(),
    )
});

/// Checkpoints' changes a sink delivered to its external system.
pub static SINK_CHECKPOINTS_DELIVERED_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_sink_checkpoints_delivered_total", "Checkpoints' changes a sink delivered"),
            &["sink"],
        )
        .unwrap(),
    )
});

/// Rows (changes) a sink delivered to its external system.
pub static SINK_ROWS_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(IntCounterVec::new(Opts::new("weir_sink_rows_total", "Changes a sink delivered"), &["sink"]).unwrap())
});

/// A sink's deliveries (one external transaction per checkpoint), by outcome: `committed`, or
/// `failed` (rolled back or aborted; retried).
pub static SINK_DELIVERIES_TOTAL: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new("weir_sink_deliveries_total", "A sink's transactions (one per checkpoint), by outcome"),
            &["sink", "outcome"],
        )
        .unwrap(),
    )
});

/// Checkpoints whose changes a sink holds and has not delivered yet.
pub static SINK_CHECKPOINTS_PENDING: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(
            Opts::new("weir_sink_checkpoints_pending", "Checkpoints a sink has not delivered yet"),
            &["sink"],
        )
        .unwrap(),
    )
});

/// Messages of a Kafka source's partition not read yet (the partition's high watermark as the
/// consumer last saw it, minus the next offset to read).
pub static KAFKA_SOURCE_LAG: LazyLock<prometheus::IntGaugeVec> = LazyLock::new(|| {
    register(
        prometheus::IntGaugeVec::new(
            Opts::new("weir_kafka_source_lag", "Messages of a Kafka source's partition not read yet"),
            &["topic", "partition"],
        )
        .unwrap(),
    )
});

/// The text exposition of every metric. A family with no sample yet (a per-view counter
/// before the first view) is listed by its HELP and TYPE lines, so dashboards and alerts find
/// every name Weir exports from the start.
pub fn render() -> String {
    // Touch the statics so that every metric is registered even before its first use.
    let _ = (&*CONNECTIONS_TOTAL, &*CONNECTIONS_ACTIVE, &*STATEMENTS_TOTAL, &*PLANS_TOTAL, &*ERRORS_TOTAL);
    let _ = (&*VIEW_ERRORS_TOTAL, &*OPERATOR_ROWS, &*GROUPS_FINISHED_EARLY_TOTAL, &*EARLY_BARRIERS_TOTAL);
    let _ = (&*BARRIER_LATENCY_SECONDS, &*VIEW_FRESHNESS_SECONDS, &*VIEW_EPOCH, &*VIEW_WATERMARK_SECONDS);
    let _ = (&*SOURCE_WATERMARK_SECONDS, &*WATERMARK_LAG_SECONDS, &*LATE_ROWS_TOTAL, &*OPERATOR_MEMORY_BYTES);
    let _ = (&*OPEN_WINDOWS, &*SOURCE_ROWS_TOTAL, &*SOURCE_DEAD_LETTERS_TOTAL, &*SOURCE_RETRIES_TOTAL, &*STATE_BYTES);
    let _ = &*STATE_MEMORY_BYTES;
    let _ = (&*STATEMENT_SECONDS, &*CHECKPOINTS_TOTAL, &*CHECKPOINT_SECONDS, &*CHECKPOINT_ALIGNMENT_SECONDS);
    let _ = (&*CHECKPOINT_SNAPSHOT_SECONDS, &*CHECKPOINT_HELD_BYTES, &*CHECKPOINT_UPLOADED_BYTES_TOTAL, &*DISK_FULL);
    let _ = (&*CHECKPOINT_LAST_COMPLETE_EPOCH, &*RECOVERY_SECONDS, &*SINK_CHECKPOINTS_DELIVERED_TOTAL);
    let _ = (&*SINK_ROWS_TOTAL, &*SINK_DELIVERIES_TOTAL, &*SINK_CHECKPOINTS_PENDING, &*KAFKA_SOURCE_LAG);
    let _ = (&*STATE_TTL_FORGOTTEN_KEYS_TOTAL, &*STATE_TTL_IGNORED_RETRACTIONS_TOTAL);
    let _ = (&*CLUSTER_VNODES, &*CLUSTER_COORDINATOR, &*CLUSTER_FENCED_TOTAL);
    let _ = (&*EXCHANGE_ROWS_SENT_TOTAL, &*EXCHANGE_BYTES_SENT_TOTAL, &*EXCHANGE_BYTES_RECEIVED_TOTAL);
    let _ = (&*EXCHANGE_CREDIT_WAIT_SECONDS_TOTAL, &*EXCHANGE_STREAMS_REFUSED_TOTAL);
    let families = REGISTRY.gather();
    let mut buf = Vec::new();
    TextEncoder::new().encode(&families, &mut buf).expect("text encoding");
    let mut text = String::from_utf8(buf).expect("utf-8 metrics");
    let sampled: std::collections::HashSet<&str> = families.iter().map(|f| f.name()).collect();
    for (name, help, kind) in DECLARED.lock().iter().filter(|(name, ..)| !sampled.contains(name.as_str())) {
        text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
    }
    text
}

/// Whether the server should be sent queries, or why not (`/readyz`).
pub type Readiness = std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Serves on `addr` until the process ends: `GET /metrics` (Prometheus text), `/healthz` (200
/// while the process answers: a liveness probe) and `/readyz` (200 when `readiness` says so,
/// else 503 with the reason: a readiness probe, a load balancer's check).
pub async fn serve(addr: SocketAddr, readiness: Readiness) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, "metrics endpoint listening");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let readiness = std::sync::Arc::clone(&readiness);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let readiness = std::sync::Arc::clone(&readiness);
                    async move {
                        let text = |status: u16, body: String| {
                            Response::builder()
                                .status(status)
                                .header("content-type", "text/plain")
                                .body(Full::new(Bytes::from(body)))
                        };
                        let response = match req.uri().path() {
                            "/metrics" => Response::builder()
                                .header("content-type", "text/plain; version=0.0.4")
                                .body(Full::new(Bytes::from(render()))),
                            "/healthz" => text(200, "ok\n".into()),
                            "/readyz" => match readiness() {
                                Ok(()) => text(200, "ready\n".into()),
                                Err(why) => text(503, format!("not ready: {why}\n")),
                            },
                            _ => text(404, "see /metrics, /healthz, /readyz\n".into()),
                        };
                        Ok::<_, Infallible>(response.expect("valid response"))
                    }
                });
                if let Err(e) =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await
                {
                    warn!("metrics connection: {e}");
                }
            });
        }
    });
    Ok(())
}

/// Asks a server's metrics port whether it is ready (`GET /readyz`), as a container's
/// HEALTHCHECK does with `weir ready`: Ok with the body when it answers 200, else why not.
/// A blocking client of a few lines: the image has no curl.
pub fn probe_ready(addr: SocketAddr) -> Result<String, String> {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{addr}: {e}"))?;
    let _ = stream.set_read_timeout(Some(timeout));
    write!(stream, "GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| format!("{addr}: {e}"))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).trim().to_string();
    match response.split_whitespace().nth(1) {
        Some("200") => Ok(body),
        _ => Err(if body.is_empty() { response } else { body }),
    }
}
