//! The stream plan: a materialized view's query as streaming operators, between DataFusion's
//! logical plan (`frontend`) and the running graph of operators (`dataflow`).
//!
//! [`build`] runs three passes, each one file:
//! 1. [`translate`]: the optimized logical plan becomes plan nodes, children first. Each node ([`plan`]) is
//!    a [`spec::Spec`] (the operator's whole configuration, its state tables, and the
//!    distribution it requires of each input) and the [`Properties`] of its output, derived once:
//!    where its rows are among the shards, which columns are window bounds, whether it only
//!    inserts and whether its rows come out promptly.
//! 2. [`enforce::enforce_distribution`]: every exchange, where an input's rows are not
//!    where its node requires them. No other code moves rows between shards.
//! 3. [`instantiate`]: one operator per shard for each node, wired into a [`Graph`].
//!
//! Invariant: nodes are planned in the order their operators' state tables and graph nodes are
//! numbered, and both numbers are stored with a view's state (checkpoint records are keyed by
//! graph node), so a view planned again at a restart finds its state. Exchanges take no number.
//!
//! Called by `frontend::handler::create_view` (creating a view, and starting the stored views
//! at a restart).

pub mod distribution;
pub mod enforce;
pub mod instantiate;
pub mod join_interval;
pub mod plan;
pub mod spec;
pub mod spread;
pub mod temporal_bounds;
pub mod translate;

use datafusion::catalog::Session;
use datafusion::logical_expr::LogicalPlan;

use crate::catalog::Catalog;
use crate::dataflow::graph::{Built, Graph};
use crate::error::Result;
use crate::state::keyed::OperatorStateSettings;
use crate::state::keys::TableId;
use plan::ViewOptions;

/// Builds view `view_id`'s operators for `plan`: planned, exchanges put, instantiated in
/// `parallelism` shards; each operator state table caches at most as `operator_state` says.
#[allow(clippy::too_many_arguments)]
pub fn build(
    plan: &LogicalPlan,
    state: &dyn Session,
    catalog: &Catalog,
    view: &str,
    view_id: TableId,
    operator_state: OperatorStateSettings,
    parallelism: usize,
    options: &ViewOptions,
) -> Result<Built> {
    let mut stream = translate::translate(plan, state, catalog, view_id, options)?;
    enforce::enforce_distribution(&mut stream);
    let view = crate::status::ViewStatus::new(view, std::sync::Arc::clone(catalog.status()));
    let home = options.cluster.is_none_or(|share| share.home);
    let context = instantiate::Context { catalog, view, operator_state, home };
    let graph: Graph = instantiate::instantiate(&stream, &context, parallelism)?;
    Ok(Built {
        graph,
        inputs: stream.inputs,
        watermarks: stream.watermarks,
        late_rows_schema: stream.late_rows_schema,
        append_only: stream.append_only,
        watermark: stream.watermark,
    })
}
