//! The stream plan's data: nodes children first, each an operator's [`Spec`], its inputs and
//! the [`Properties`] of its output; and the view's clauses that shape it ([`ViewOptions`]).
//! Made by `translate`, completed by `enforce`, read by `instantiate`.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::distribution::Distribution;
use super::spec::Spec;
use crate::state::keys::TableId;
use crate::state::value::StateFormat;
use crate::types::window::TimeColumn;

/// What a view asks of its operators: its event-time clauses, the tables it joins
/// `FOR SYSTEM_TIME AS OF PROCTIME()`, and the format its state is in.
#[derive(Debug, Clone, Default)]
pub struct ViewOptions {
    pub emit_on_window_close: bool,
    /// `ALLOW LATENESS`, nanoseconds.
    pub lateness: i64,
    /// `LATE ROWS TO`: late rows are kept for a table.
    pub keep_late_rows: bool,
    /// Tables read `FOR SYSTEM_TIME AS OF PROCTIME()`: joined by lookups, never followed.
    pub lookups: Vec<TableId>,
    /// The format the view's operator state is written in: the current one for a new view,
    /// the one it recorded for a view restored (`RelationDef::state_format`).
    pub state_format: StateFormat,
    /// `WITH (two_phase_aggregation = true)`: grouped aggregates in two phases, for hot keys.
    pub two_phase_aggregation: bool,
    /// `WITH (state_ttl = '...')`, nanoseconds of epoch time: unbounded aggregates, DISTINCT
    /// and joins forget keys idle that long (`state::idle_keys`).
    pub state_ttl: Option<i64>,
    /// This node's share of a view that runs on several nodes of a cluster; `None` in one
    /// process.
    pub cluster: Option<ClusterShare>,
}

/// What a node's output rows are like.
#[derive(Clone)]
pub struct Properties {
    /// Where its rows are among the shards.
    pub distribution: Distribution,
    /// Per output column: whether it is a window bound, and when its window closes.
    pub times: Vec<Option<TimeColumn>>,
    /// Only inserts come out: it reads append-only relations through operators that never
    /// retract (projections, filters, window assignment, inner joins, unions, and aggregates
    /// that emit each window once, on close, with no lateness).
    pub append_only: bool,
    /// No change for a window can come out after the watermark made the window final: every
    /// row comes from window assignment (which drops late rows) through operators that pass
    /// rows on as they come (projections, filters, unions). Not after an aggregate or a Top-N
    /// (they hold changes for the barrier), session windows (they re-assign rows as sessions
    /// merge), or a join (a row arriving on one side matches rows of a final window still held
    /// on the other). A windowed aggregate over such an input may finish final windows before
    /// the barrier (`HashAggConfig::prompt_input`).
    pub prompt: bool,
}

/// One node: its operator, its inputs (node numbers) and its output's properties.
pub struct PlanNode {
    pub spec: Spec,
    pub inputs: Vec<usize>,
    pub out: Properties,
}

/// A view's stream plan: nodes children first, the last operator node its root.
pub struct StreamPlan {
    pub nodes: Vec<PlanNode>,
    /// The relation each source node reads, in the order of the sources.
    pub inputs: Vec<TableId>,
    /// Per input: its watermark expression over the input's rows, if it declares one.
    pub watermarks: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// The columns of late rows (a windowed input's columns and its window), if the view
    /// windows its input.
    pub late_rows_schema: Option<SchemaRef>,
    /// The view only ever inserts rows.
    pub append_only: bool,
    /// The watermark views over this one may take from its rows ([`crate::catalog::persist::WatermarkDef`]).
    pub watermark: Option<crate::catalog::persist::WatermarkDef>,
}

/// A view's share on one node of a cluster (issue 46). Each node reads its part of the view's
/// inputs, so input rows are anywhere, not all in shard 0: the distribution pass puts an
/// exchange before every node that needs rows together (a global aggregate, Top-N, a keyless
/// session window, an EMIT ON WINDOW CLOSE buffer), and what must happen in one place happens
/// on the home node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterShare {
    /// This node owns vnode 0, where rows that all go to one place are: its shard 0 is the
    /// view's first (a global aggregate's one group, the EOWC buffer's judge).
    pub home: bool,
}
