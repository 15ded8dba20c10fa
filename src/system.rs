//! Runtime facts users can query as relations in the `weir_catalog` schema.
//!
//! - `weir_catalog.view_errors`: runtime errors inside materialized views (division by zero,
//!   bad casts, overflows), by view and message, with how often and when last. The failing rows
//!   got NULL for the failing expression; this table says so. Kept in memory: it describes the
//!   running server (and `weir_view_errors_total` counts the same in the metrics).
//! - `weir_catalog.event_time`: per view with event time, its watermark, how many windows it
//!   holds state for and how many rows came too late (since the server started), as of its
//!   last commit.
//! - `weir_catalog.dead_letters`: records sources could not decode, by source and position,
//!   with the error and the record as read. Durable: read from the state store
//!   ([`crate::catalog::dead_letter`]).
//! - `weir_catalog.sources` and `weir_catalog.sinks`: each connector's state (running,
//!   retrying with the reason, failed, finished), kept in memory by their runtimes.
//! - `weir_catalog.checkpoints`: the checkpoints in the object store (listed at start) and those
//!   this server took, restored from or gave up on, newest last ([`crate::checkpoint`]). Kept
//!   in memory, the last [`CHECKPOINT_HISTORY`] entries.
//! - `weir_catalog.cluster_nodes` and `weir_catalog.cluster_events`: the cluster's nodes (role,
//!   state, vnode ranges) and its last events, as this node follows them in etcd
//!   ([`crate::cluster`]); one `standalone` node and no events for a single process.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    BooleanArray, RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::Catalog;
use crate::status::Status;

pub const SCHEMA: &str = "weir_catalog";

fn checkpoints_schema() -> SchemaRef {
    let micros = || DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
    Arc::new(Schema::new(vec![
        Field::new("epoch", DataType::UInt64, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("started_at", micros(), false),
        Field::new("finished_at", micros(), true),
        Field::new("duration_ms", DataType::UInt64, true),
        Field::new("bytes_uploaded", DataType::UInt64, true),
        Field::new("files_uploaded", DataType::UInt64, true),
        Field::new("files", DataType::UInt64, false),
        Field::new("state_bytes", DataType::UInt64, false),
        Field::new("detail", DataType::Utf8, false),
    ]))
}

fn checkpoints_batch(status: &Status) -> DfResult<RecordBatch> {
    let all = status.checkpoints.lock();
    let epochs: UInt64Array = all.iter().map(|r| Some(r.epoch)).collect();
    let status: StringArray = all.iter().map(|r| Some(r.status.as_str())).collect();
    let started: TimestampMicrosecondArray = all.iter().map(|r| Some(r.started_at_micros)).collect();
    let finished: TimestampMicrosecondArray = all.iter().map(|r| r.finished_at_micros).collect();
    let duration: UInt64Array = all.iter().map(|r| r.duration_ms).collect();
    let bytes: UInt64Array = all.iter().map(|r| r.bytes_uploaded).collect();
    let uploaded: UInt64Array = all.iter().map(|r| r.files_uploaded).collect();
    let files: UInt64Array = all.iter().map(|r| Some(r.files)).collect();
    let state: UInt64Array = all.iter().map(|r| Some(r.state_bytes)).collect();
    let detail: StringArray = all.iter().map(|r| Some(r.detail.as_str())).collect();
    Ok(RecordBatch::try_new(
        checkpoints_schema(),
        vec![
            Arc::new(epochs),
            Arc::new(status),
            Arc::new(started.with_timezone("+00:00")),
            Arc::new(finished.with_timezone("+00:00")),
            Arc::new(duration),
            Arc::new(bytes),
            Arc::new(uploaded),
            Arc::new(files),
            Arc::new(state),
            Arc::new(detail),
        ],
    )?)
}

fn event_time_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("watermark", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("open_windows", DataType::UInt64, false),
        Field::new("late_rows", DataType::UInt64, false),
    ]))
}

fn event_time_batch(status: &Status) -> DfResult<RecordBatch> {
    let all = status.event_time.lock();
    let views: StringArray = all.keys().map(|v| Some(v.as_str())).collect();
    let watermarks: TimestampMicrosecondArray = all.values().map(|e| e.watermark_micros).collect();
    let open: UInt64Array = all.values().map(|e| Some(e.open_windows)).collect();
    let late: UInt64Array = all.values().map(|e| Some(e.late_rows)).collect();
    Ok(RecordBatch::try_new(
        event_time_schema(),
        vec![Arc::new(views), Arc::new(watermarks), Arc::new(open), Arc::new(late)],
    )?)
}

fn view_errors_batch(status: &Status) -> DfResult<RecordBatch> {
    let errors = status.view_errors.lock();
    let schema = view_errors_schema();
    let views: StringArray = errors.keys().map(|(v, _)| Some(v.as_str())).collect();
    let messages: StringArray = errors.keys().map(|(_, m)| Some(m.as_str())).collect();
    let counts: UInt64Array = errors.values().map(|e| Some(e.count)).collect();
    let last: TimestampMicrosecondArray = errors.values().map(|e| Some(e.last_micros)).collect();
    Ok(RecordBatch::try_new(
        schema,
        vec![Arc::new(views), Arc::new(messages), Arc::new(counts), Arc::new(last.with_timezone("+00:00"))],
    )?)
}

fn view_errors_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("message", DataType::Utf8, false),
        Field::new("error_count", DataType::UInt64, false),
        Field::new("last_seen", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), false),
    ]))
}

fn dead_letters_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("source_name", DataType::Utf8, false),
        Field::new("position", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, false),
        Field::new("raw", DataType::Utf8, false),
        Field::new("read_at", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), false),
    ]))
}

fn dead_letters_batch(catalog: &Catalog) -> DfResult<RecordBatch> {
    let letters = crate::catalog::dead_letter::load(catalog.store().as_ref())?;
    let name = |id| catalog.by_id(id).map(|r| r.def.name.clone()).unwrap_or_else(|| id.to_string());
    let sources: StringArray = letters.iter().map(|(id, _)| Some(name(*id))).collect();
    let positions: StringArray = letters.iter().map(|(_, l)| Some(l.position.as_str())).collect();
    let errors: StringArray = letters.iter().map(|(_, l)| Some(l.error.as_str())).collect();
    let raw: StringArray = letters.iter().map(|(_, l)| Some(l.raw.as_str())).collect();
    let read_at: TimestampMicrosecondArray = letters.iter().map(|(_, l)| Some(l.read_at_micros)).collect();
    Ok(RecordBatch::try_new(
        dead_letters_schema(),
        vec![
            Arc::new(sources),
            Arc::new(positions),
            Arc::new(errors),
            Arc::new(raw),
            Arc::new(read_at.with_timezone("+00:00")),
        ],
    )?)
}

fn sinks_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("sink_name", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("delivered_epoch", DataType::UInt64, true),
        Field::new("error", DataType::Utf8, true),
        Field::new("shards", DataType::UInt32, false),
    ]))
}

/// Every running sink: running or retrying (any shard), the last checkpoint every shard
/// delivered, its last error, its shards.
fn sinks_batch(status: &Status) -> DfResult<RecordBatch> {
    let all: Vec<(String, crate::status::SinkStatus)> = status.sinks.lock().values().cloned().collect();
    let names: StringArray = all.iter().map(|(n, _)| Some(n.as_str())).collect();
    let states: StringArray = all.iter().map(|(_, s)| Some(s.state())).collect();
    let delivered: UInt64Array = all.iter().map(|(_, s)| s.delivered()).collect();
    let errors: StringArray = all.iter().map(|(_, s)| s.error()).collect();
    let shards: UInt32Array = all.iter().map(|(_, s)| Some(s.shards.len() as u32)).collect();
    Ok(RecordBatch::try_new(
        sinks_schema(),
        vec![Arc::new(names), Arc::new(states), Arc::new(delivered), Arc::new(errors), Arc::new(shards)],
    )?)
}

fn sources_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("source_name", DataType::Utf8, false),
        Field::new("connector", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("records_read", DataType::UInt64, false),
        Field::new("error", DataType::Utf8, true),
    ]))
}

/// Every started source: running, retrying (and why), failed (and why) or finished, and the
/// records it has read.
fn sources_batch(status: &Status) -> DfResult<RecordBatch> {
    let all: Vec<crate::status::SourceStatus> = status.sources.lock().values().cloned().collect();
    let names: StringArray = all.iter().map(|s| Some(s.name.as_str())).collect();
    let connectors: StringArray = all.iter().map(|s| Some(s.connector.as_str())).collect();
    let states: StringArray = all.iter().map(|s| Some(s.state.as_str())).collect();
    let records: UInt64Array = all.iter().map(|s| Some(s.records)).collect();
    let errors: StringArray = all.iter().map(|s| s.error.as_deref()).collect();
    Ok(RecordBatch::try_new(
        sources_schema(),
        vec![Arc::new(names), Arc::new(connectors), Arc::new(states), Arc::new(records), Arc::new(errors)],
    )?)
}

fn cluster_nodes_schema() -> SchemaRef {
    let micros = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
    Arc::new(Schema::new(vec![
        Field::new("node_id", DataType::Utf8, false),
        Field::new("role", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("postgres", DataType::Utf8, false),
        Field::new("exchange", DataType::Utf8, false),
        Field::new("vnodes", DataType::UInt32, false),
        Field::new("vnode_ranges", DataType::Utf8, false),
        Field::new("generation", DataType::UInt64, false),
        Field::new("joined_at", micros, true),
        Field::new("this_node", DataType::Boolean, false),
    ]))
}

/// The cluster's nodes as this node last saw them in etcd; a single process (no `--cluster`)
/// is one `standalone` node owning every vnode.
fn cluster_nodes_batch(status: &Status) -> DfResult<RecordBatch> {
    let picture = status.cluster.lock().clone();
    let (nodes, this) = match picture {
        Some(p) => (p.nodes, p.this_node),
        None => {
            let all = vec![(0, crate::types::vnode::VNODE_COUNT - 1)];
            let node = crate::status::ClusterNode {
                node_id: "local".into(),
                role: "standalone".into(),
                state: "up".into(),
                postgres: String::new(),
                exchange: String::new(),
                vnodes: all,
                generation: 0,
                joined_at_micros: None,
            };
            (vec![node], "local".into())
        }
    };
    let text =
        |f: fn(&crate::status::ClusterNode) -> &str| -> StringArray { nodes.iter().map(|n| Some(f(n))).collect() };
    let counts: UInt32Array =
        nodes.iter().map(|n| Some(n.vnodes.iter().map(|(a, b)| (b - a + 1) as u32).sum::<u32>())).collect();
    let ranges: StringArray = nodes.iter().map(|n| Some(crate::cluster::assignment::ranges_text(&n.vnodes))).collect();
    let generations: UInt64Array = nodes.iter().map(|n| Some(n.generation)).collect();
    let joined = TimestampMicrosecondArray::from(nodes.iter().map(|n| n.joined_at_micros).collect::<Vec<_>>())
        .with_timezone("+00:00");
    let this: BooleanArray = nodes.iter().map(|n| Some(n.node_id == this)).collect();
    Ok(RecordBatch::try_new(
        cluster_nodes_schema(),
        vec![
            Arc::new(text(|n| &n.node_id)),
            Arc::new(text(|n| &n.role)),
            Arc::new(text(|n| &n.state)),
            Arc::new(text(|n| &n.postgres)),
            Arc::new(text(|n| &n.exchange)),
            Arc::new(counts),
            Arc::new(ranges),
            Arc::new(generations),
            Arc::new(joined),
            Arc::new(this),
        ],
    )?)
}

fn cluster_events_schema() -> SchemaRef {
    let micros = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
    Arc::new(Schema::new(vec![
        Field::new("at", micros, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("node_id", DataType::Utf8, false),
        Field::new("detail", DataType::Utf8, false),
    ]))
}

/// The cluster's last events (joins, leaves, elections, assignments, fences), oldest first;
/// none for a single process.
fn cluster_events_batch(status: &Status) -> DfResult<RecordBatch> {
    let events = status.cluster.lock().as_ref().map(|p| p.events.clone()).unwrap_or_default();
    let at =
        TimestampMicrosecondArray::from(events.iter().map(|e| e.at_micros).collect::<Vec<_>>()).with_timezone("+00:00");
    let text =
        |f: fn(&crate::status::ClusterEvent) -> &str| -> StringArray { events.iter().map(|e| Some(f(e))).collect() };
    Ok(RecordBatch::try_new(
        cluster_events_schema(),
        vec![Arc::new(at), Arc::new(text(|e| &e.kind)), Arc::new(text(|e| &e.node_id)), Arc::new(text(|e| &e.detail))],
    )?)
}

const TABLES: [&str; 8] =
    ["view_errors", "event_time", "dead_letters", "checkpoints", "sinks", "sources", "cluster_nodes", "cluster_events"];

/// The `weir_catalog` schema.
pub struct SystemSchema {
    catalog: Arc<Catalog>,
}

impl SystemSchema {
    pub fn new(catalog: Arc<Catalog>) -> SystemSchema {
        SystemSchema { catalog }
    }
}

impl std::fmt::Debug for SystemSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SystemSchema")
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES.iter().map(|t| t.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let table = |schema: SchemaRef, rows: RowsFn| Some(Arc::new(SystemTable { schema, rows }) as _);
        // The running server's reports, read at scan time.
        let status = Arc::clone(self.catalog.status());
        let of = |batch: fn(&Status) -> DfResult<RecordBatch>| -> RowsFn { Arc::new(move || batch(&status)) };
        Ok(match name {
            "view_errors" => table(view_errors_schema(), of(view_errors_batch)),
            "event_time" => table(event_time_schema(), of(event_time_batch)),
            "checkpoints" => table(checkpoints_schema(), of(checkpoints_batch)),
            "sinks" => table(sinks_schema(), of(sinks_batch)),
            "sources" => table(sources_schema(), of(sources_batch)),
            "cluster_nodes" => table(cluster_nodes_schema(), of(cluster_nodes_batch)),
            "cluster_events" => table(cluster_events_schema(), of(cluster_events_batch)),
            "dead_letters" => {
                let catalog = Arc::clone(&self.catalog);
                table(dead_letters_schema(), Arc::new(move || dead_letters_batch(&catalog)))
            }
            _ => None,
        })
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name)
    }
}

type RowsFn = Arc<dyn Fn() -> DfResult<RecordBatch> + Send + Sync>;

/// A system relation: its rows computed at scan time.
struct SystemTable {
    schema: SchemaRef,
    rows: RowsFn,
}

impl std::fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SystemTable({:?})", self.schema)
    }
}

#[async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(MemorySourceConfig::try_new_exec(&[vec![(self.rows)()?]], self.schema(), projection.cloned())?)
    }
}
