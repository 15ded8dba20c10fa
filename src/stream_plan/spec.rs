//! What each node of a stream plan computes: one [`Spec`] per operator kind, a typed
//! configuration made whole when the node is planned (no operator is configured by calls made
//! later), with the state tables it owns and the distribution it requires of each input.
//!
//! Built by `translate`, read by `distribution` (what each input must be) and by `instantiate`
//! (one operator per shard from it).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::distribution::Requirement;
use crate::catalog::Relation;
use crate::operators::hash_agg::HashAggConfig;
use crate::operators::hash_join::HashJoinConfig;
use crate::operators::lookup_join::LookupKind;
use crate::operators::over_window::OverWindowConfig;
use crate::operators::top_n::TopNConfig;
use crate::operators::unnest::UnnestConfig;
use crate::state::keys::TableId;
use crate::types::window::{SessionSpec, TimeColumn, WindowSpec};

/// A bound of a temporal filter: its value expression, offset (nanoseconds) and whether it
/// ends the row's span (else starts it).
pub type TemporalBound = (Arc<dyn PhysicalExpr>, i64, bool);

/// A view's state TTL as one operator keeps it: nanoseconds of epoch time, and the table of
/// each index of idle keys it keeps (`state::idle_keys`: one for an aggregate's groups, one per
/// side of a join).
#[derive(Debug, Clone)]
pub struct StateTtl {
    pub nanos: i64,
    pub tables: Vec<TableId>,
}

/// One node's operator, as planned.
pub enum Spec {
    /// Reads a view's input: the relation's columns as the node's.
    Source {
        relation: Arc<Relation>,
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    },
    /// Rows the query itself gives (`VALUES`, `SELECT 1`, a condition that is never true): a
    /// leaf that enters them once, when the view is made.
    Constant {
        rows: datafusion::arrow::array::RecordBatch,
    },
    Project {
        exprs: Vec<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    },
    Filter {
        predicate: Arc<dyn PhysicalExpr>,
    },
    /// Conditions comparing with `now()`: rows enter and leave as time passes.
    TemporalFilter {
        bounds: Vec<TemporalBound>,
        text: String,
        schema: SchemaRef,
        tables: (TableId, TableId),
    },
    /// TUMBLE / HOP; `by_watermark` false: windows over a column without a watermark (no row is
    /// late, no window closes).
    WindowAssign {
        spec: WindowSpec,
        schema: SchemaRef,
        lateness: i64,
        keep_late: bool,
        by_watermark: bool,
    },
    SessionAssign {
        spec: SessionSpec,
        schema: SchemaRef,
        lateness: i64,
        keep_late: bool,
        by_watermark: bool,
        table: TableId,
        /// A session's rows meet in one shard (by its keys, when it has any).
        input: Requirement,
    },
    /// Grouped aggregation and DISTINCT (groups, value multisets); a group's rows meet in one
    /// shard (a global aggregate's in shard 0).
    Aggregate {
        config: HashAggConfig,
        tables: (TableId, TableId),
        input: Requirement,
        /// `WITH (state_ttl = ...)`: groups idle that long are forgotten (a grouped aggregate
        /// without a window).
        ttl: Option<StateTtl>,
    },
    /// An equi-join (or one on a constant key); each side's keys idle for the state TTL are
    /// forgotten, when the view has one.
    Join {
        config: HashJoinConfig,
        tables: (TableId, TableId),
        left: Requirement,
        right: Requirement,
        ttl: Option<StateTtl>,
    },
    /// A join looking its partner up in a table read `FOR SYSTEM_TIME AS OF PROCTIME()`.
    LookupJoin {
        kind: LookupKind,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        table: Arc<Relation>,
        columns: (Vec<usize>, Vec<usize>),
        table_filter: Option<Arc<dyn PhysicalExpr>>,
        residual: Option<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    },
    /// A partition's rows meet in one shard (without PARTITION BY, all in shard 0).
    TopN {
        config: TopNConfig,
        table: TableId,
        input: Requirement,
    },
    Union {
        schema: SchemaRef,
        inputs: usize,
    },
    /// Each row as one row per element of its list columns.
    Unnest(UnnestConfig),
    /// Window functions over partitions in order.
    OverWindow {
        config: OverWindowConfig,
        table: TableId,
        input: Requirement,
    },
    /// `EMIT ON WINDOW CLOSE` without a windowed aggregate: rows held until their time closes.
    EowcBuffer {
        column: usize,
        time: TimeColumn,
        schema: SchemaRef,
        table: TableId,
        judges_lateness: bool,
    },
    /// Moves rows between shards so that its consumer finds them where it requires
    /// (`distribution::enforce_distribution` puts every one). The one place where rows cross
    /// shards, and where a network exchange between processes plugs in.
    Exchange(Requirement),
}

impl Spec {
    /// What the node requires of its input `slot`.
    pub fn requirement(&self, slot: usize) -> Requirement {
        match self {
            Spec::Aggregate { input, .. }
            | Spec::TopN { input, .. }
            | Spec::OverWindow { input, .. }
            | Spec::SessionAssign { input, .. } => input.clone(),
            Spec::Join { left, right, .. } => {
                if slot == 0 {
                    left.clone()
                } else {
                    right.clone()
                }
            }
            Spec::EowcBuffer { .. } => Requirement::Single,
            _ => Requirement::Any,
        }
    }
}

impl Spec {
    /// The state tables this node's operator owns.
    pub fn state_tables(&self) -> Vec<TableId> {
        match self {
            Spec::TemporalFilter { tables, .. } => vec![tables.0, tables.1],
            Spec::Aggregate { tables, ttl, .. } | Spec::Join { tables, ttl, .. } => {
                let idle = ttl.iter().flat_map(|t| t.tables.iter().copied());
                [tables.0, tables.1].into_iter().chain(idle).collect()
            }
            Spec::SessionAssign { table, .. }
            | Spec::TopN { table, .. }
            | Spec::EowcBuffer { table, .. }
            | Spec::OverWindow { table, .. } => {
                vec![*table]
            }
            _ => vec![],
        }
    }
}
