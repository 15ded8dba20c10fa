//! From a stream plan to a view's operator [`Graph`]: one operator per shard for each node, in
//! the order the nodes were planned (children first), each over its state tables.
//!
//! Exchange nodes become the routing of their consumer's input in the graph (rows move to the
//! shard of their key's vnode as they enter it), so they take no graph node: the graph's node
//! numbers, which name operators' checkpoint records, are those of the operators alone, in
//! planning order.
//!
//! Called by `stream_plan::build` once the exchanges are in place.

use std::sync::Arc;

use datafusion::physical_expr::PhysicalExpr;

use super::plan::StreamPlan;
use super::spec::{Spec, StateTtl};
use crate::catalog::Catalog;
use crate::dataflow::graph::Graph;
use crate::error::{Result, WeirError};
use crate::operators::eowc_buffer::EowcBuffer;
use crate::operators::filter::Filter;
use crate::operators::hash_agg::HashAgg;
use crate::operators::hash_join::HashJoin;
use crate::operators::lookup_join::LookupJoin;
use crate::operators::no_watermark::NoWatermark;
use crate::operators::operator::Operator;
use crate::operators::project::Project;
use crate::operators::session_assign::SessionAssign;
use crate::operators::temporal_filter::{RowBound, TemporalFilter};
use crate::operators::top_n::TopN;
use crate::operators::union::Union;
use crate::operators::window_assign::WindowAssign;
use crate::state::idle_keys::IdleKeys;
use crate::state::keyed::{KeyedState, OperatorStateSettings};
use crate::state::keys::TableId;
use crate::state::rows_by_time::RowsByTime;
use crate::status::ViewStatus;

/// What every operator of the view is made with.
pub struct Context<'a> {
    pub catalog: &'a Catalog,
    /// The view, and where its operators report (the catalog's status).
    pub view: ViewStatus,
    pub operator_state: OperatorStateSettings,
    /// This node holds the view's first shard: shard 0 here is where rows that all go to one
    /// place are (always, in one process; on the node owning vnode 0, in a cluster).
    pub home: bool,
}

impl Context<'_> {
    /// Whether `shard` is the view's first shard.
    fn first(&self, shard: usize) -> bool {
        shard == 0 && self.home
    }

    /// A shard's access to state table `id` (write-back: it reaches the store at checkpoints).
    fn keyed(&self, id: TableId) -> Result<KeyedState> {
        let settings = self.operator_state;
        KeyedState::new(id, Arc::clone(self.catalog.store()), settings.cache_entries).write_back(settings.settling)
    }

    /// Shard `shard`'s indexes of idle keys for an operator's state TTL (none without one).
    fn idle_keys(&self, ttl: Option<&StateTtl>, shard: usize) -> Result<Vec<IdleKeys>> {
        let Some(ttl) = ttl else { return Ok(vec![]) };
        ttl.tables.iter().map(|&table| Ok(IdleKeys::new(self.keyed(table)?, ttl.nanos, shard as u16))).collect()
    }

    /// Shard `shard`'s operator for `spec`.
    fn operator(&self, spec: &Spec, shard: usize) -> Result<Box<dyn Operator>> {
        let view = &self.view;
        // Windows over a column without a watermark never hear of one.
        let deaf = |op: Box<dyn Operator>, by_watermark: bool| -> Box<dyn Operator> {
            if by_watermark {
                op
            } else {
                Box::new(NoWatermark(op))
            }
        };
        Ok(match spec {
            Spec::Source { relation, exprs, schema } => Box::new(
                Project::new(exprs.clone(), Arc::clone(schema), view)
                    .with_label(format!("Source {}", relation.def.name)),
            ),
            Spec::Constant { rows } => {
                let schema = rows.schema();
                let exprs = (0..schema.fields().len())
                    .map(|i| Ok(datafusion::physical_expr::expressions::col(schema.field(i).name(), &schema)?))
                    .collect::<Result<Vec<_>>>()?;
                Box::new(Project::new(exprs, schema, view).with_label(format!("Values ({} rows)", rows.num_rows())))
            }
            Spec::Project { exprs, schema } => Box::new(Project::new(exprs.clone(), Arc::clone(schema), view)),
            Spec::Filter { predicate } => Box::new(Filter::new(Arc::clone(predicate), view)),
            Spec::TemporalFilter { bounds, text, schema, tables } => {
                let bounds = bounds.iter().map(|(value, offset, end)| RowBound {
                    value: Arc::clone(value),
                    offset: *offset,
                    end: *end,
                });
                // Each shard's rows under its own prefix of the two tables.
                let prefix = (shard as u16).to_be_bytes().to_vec();
                let tables = (
                    RowsByTime::new(self.keyed(tables.0)?, prefix.clone()),
                    RowsByTime::new(self.keyed(tables.1)?, prefix),
                );
                Box::new(TemporalFilter::new(bounds.collect(), text.clone(), Arc::clone(schema), tables, view)?)
            }
            Spec::WindowAssign { spec, schema, lateness, keep_late, by_watermark } => deaf(
                Box::new(WindowAssign::new(spec.clone(), Arc::clone(schema), *lateness, *keep_late, view)),
                *by_watermark,
            ),
            Spec::SessionAssign { spec, schema, lateness, keep_late, by_watermark, table, .. } => deaf(
                Box::new(SessionAssign::new(
                    spec.clone(),
                    Arc::clone(schema),
                    *lateness,
                    *keep_late,
                    self.keyed(*table)?,
                    view,
                )?),
                *by_watermark,
            ),
            Spec::Aggregate { config, tables, ttl, .. } => {
                let state = (self.keyed(tables.0)?, self.keyed(tables.1)?);
                let agg = HashAgg::new(config.clone(), state, shard, self.first(shard), view)?;
                match self.idle_keys(ttl.as_ref(), shard)?.pop() {
                    Some(idle) => Box::new(agg.with_state_ttl(idle)?),
                    None => Box::new(agg),
                }
            }
            Spec::Join { config, tables, ttl, .. } => {
                let state = [self.keyed(tables.0)?, self.keyed(tables.1)?];
                let join = HashJoin::new(config.clone(), state, shard, view)?;
                match <[IdleKeys; 2]>::try_from(self.idle_keys(ttl.as_ref(), shard)?) {
                    Ok(idle) => Box::new(join.with_state_ttl(idle)),
                    Err(_) => Box::new(join),
                }
            }
            Spec::LookupJoin { kind, keys, table, columns, table_filter, residual, schema } => {
                Box::new(LookupJoin::new(
                    *kind,
                    keys.clone(),
                    Arc::clone(table),
                    Arc::clone(self.catalog.store()),
                    columns.clone(),
                    table_filter.clone(),
                    residual.clone(),
                    Arc::clone(schema),
                    view,
                ))
            }
            Spec::TopN { config, table, .. } => Box::new(TopN::new(config.clone(), self.keyed(*table)?, view)?),
            Spec::OverWindow { config, table, .. } => {
                Box::new(crate::operators::over_window::OverWindow::new(config.clone(), self.keyed(*table)?, view)?)
            }
            Spec::Union { schema, inputs } => Box::new(Union::new(Arc::clone(schema), *inputs)),
            Spec::Unnest(config) => Box::new(crate::operators::unnest::Unnest::new(config.clone())),
            Spec::EowcBuffer { column, time, schema, table, judges_lateness } => Box::new(EowcBuffer::new(
                *column,
                *time,
                Arc::clone(schema),
                self.keyed(*table)?,
                self.first(shard),
                *judges_lateness,
                view,
            )?),
            Spec::Exchange(_) => return Err(WeirError::internal("an exchange is no operator")),
        })
    }
}

/// The graph running `plan` in `parallelism` shards.
pub fn instantiate(plan: &StreamPlan, context: &Context, parallelism: usize) -> Result<Graph> {
    let mut graph = Graph::new(context.view.clone(), parallelism);
    if !context.home {
        graph.made_away_from_home();
    }
    // Each plan node's graph node (None for exchanges).
    let mut at: Vec<Option<usize>> = vec![None; plan.nodes.len()];
    for (index, node) in plan.nodes.iter().enumerate() {
        if matches!(node.spec, Spec::Exchange(_)) {
            continue;
        }
        let ops = (0..graph.parallelism()).map(|shard| context.operator(&node.spec, shard)).collect::<Result<_>>()?;
        if matches!(node.spec, Spec::Source { .. }) {
            at[index] = Some(graph.add_leaf(ops)?);
            continue;
        }
        if let Spec::Constant { rows } = &node.spec {
            at[index] = Some(graph.add_constant(ops, rows.clone())?);
            continue;
        }
        let mut children = Vec::new();
        let mut exchanges: Vec<Option<Vec<Arc<dyn PhysicalExpr>>>> = Vec::new();
        for &input in &node.inputs {
            let (child, exchange) = match &plan.nodes[input].spec {
                Spec::Exchange(requirement) => (plan.nodes[input].inputs[0], Some(requirement.keys())),
                _ => (input, None),
            };
            children.push(at[child].ok_or_else(|| WeirError::internal("a plan node before its input"))?);
            exchanges.push(exchange);
        }
        let added = graph.add(ops, &children, exchanges)?;
        graph.owns_tables(added, node.spec.state_tables());
        at[index] = Some(added);
    }
    Ok(graph)
}
