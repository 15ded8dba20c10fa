//! From a DataFusion logical plan (optimized) to a view's operator [`Graph`].
//!
//! Supported: table and view scans, projection, filter, equi-joins (inner with a residual
//! condition; left, right and full outer), grouped and global aggregates (count, sum, avg, min, max), DISTINCT, UNION ALL,
//! and subquery aliases; ORDER BY is ignored (a view is a set of rows). Anything else is
//! SQLSTATE 0A000, naming what is missing.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Distinct, Expr, ExprSchemable, JoinType, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;

use super::graph::Graph;
use crate::catalog::Catalog;
use crate::error::{Result, WeirError};
use crate::operators::filter::Filter;
use crate::operators::hash_agg::{AggKind, AggSpec, HashAgg};
use crate::operators::hash_join::HashJoin;
use crate::operators::operator::Operator;
use crate::operators::project::Project;
use crate::operators::union::Union;
use crate::state::keyed::KeyedState;
use crate::state::keys::{operator_state_table, TableId};

pub struct Built {
    pub graph: Graph,
    /// The relation each graph input reads, in input order.
    pub inputs: Vec<TableId>,
}

struct Builder<'a> {
    state: &'a dyn Session,
    catalog: &'a Catalog,
    view: String,
    view_id: TableId,
    graph: Graph,
    inputs: Vec<TableId>,
    /// The next operator state table number of this view.
    next_state_table: u8,
    cache_entries: usize,
}

type Ops = Vec<Box<dyn Operator>>;

/// Builds view `view_id`'s operators for `plan`; each operator state table caches at most
/// `cache_entries` entries in memory.
pub fn build(
    plan: &LogicalPlan,
    state: &dyn Session,
    catalog: &Catalog,
    view: &str,
    view_id: TableId,
    cache_entries: usize,
    parallelism: usize,
) -> Result<Built> {
    let mut b = Builder {
        state,
        catalog,
        view: view.to_string(),
        view_id,
        graph: Graph::new(view, parallelism),
        inputs: Vec::new(),
        next_state_table: 0,
        cache_entries,
    };
    b.node(plan)?;
    Ok(Built { graph: b.graph, inputs: b.inputs })
}

/// Where a node's output rows are among a view's shards; derived once per node while
/// building, and used to put exchanges only where rows are not already where an operator needs
/// them.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// All in shard 0 (a view's inputs, a global aggregate).
    Single,
    /// In any shard.
    Any,
    /// Rows with equal values in these output columns are in one shard, `vnode % shards`.
    Hash(Vec<usize>),
}

/// The input column `expr` is, if it is a plain column.
fn column_index(expr: &Expr, schema: &DFSchema) -> Option<usize> {
    match expr {
        Expr::Column(c) => schema.index_of_column(c).ok(),
        _ => None,
    }
}

/// The distribution rows keyed by `keys` must have, when the keys are plain columns.
fn hash_of(keys: &[Expr], schema: &DFSchema) -> Option<Distribution> {
    keys.iter().map(|k| column_index(k, schema)).collect::<Option<Vec<_>>>().map(Distribution::Hash)
}

fn unsupported(what: &str) -> WeirError {
    WeirError::unsupported(format!("{what} is not supported in a materialized view yet"))
}

impl Builder<'_> {
    /// A new state table for an operator of this view (shared by its shards, whose keys differ).
    fn state_table(&mut self) -> Result<TableId> {
        let n = self.next_state_table;
        self.next_state_table =
            n.checked_add(1).ok_or_else(|| unsupported("a view with this many stateful operators"))?;
        Ok(operator_state_table(self.view_id, n))
    }

    /// A shard's access to state table `id`.
    fn keyed(&self, id: TableId) -> KeyedState {
        KeyedState::new(id, Arc::clone(self.catalog.store()), self.cache_entries)
    }

    /// One operator per shard, made by `make(shard)`.
    fn each(&self, mut make: impl FnMut(usize) -> Result<Box<dyn Operator>>) -> Result<Ops> {
        (0..self.graph.parallelism()).map(&mut make).collect()
    }

    fn physical(&self, expr: &Expr, input: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self.state.create_physical_expr(expr.clone(), input)?)
    }

    fn schema(plan: &LogicalPlan) -> SchemaRef {
        Arc::new(plan.schema().as_arrow().clone())
    }

    /// Adds `plan`'s operators; returns the index of its top node and where its rows are.
    fn node(&mut self, plan: &LogicalPlan) -> Result<(usize, Distribution)> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                if scan.fetch.is_some() {
                    return Err(unsupported("LIMIT"));
                }
                let name = scan.table_name.table();
                let relation = self.catalog.get(name).ok_or_else(|| WeirError::undefined_table(name))?;
                let source = relation.schema.clone();
                let indices: Vec<usize> = match &scan.projection {
                    Some(p) => p.clone(),
                    None => (0..source.fields().len()).collect(),
                };
                let exprs: Vec<Arc<dyn PhysicalExpr>> = indices
                    .iter()
                    .map(|&i| {
                        Ok(Arc::new(datafusion::physical_expr::expressions::Column::new(source.field(i).name(), i))
                            as Arc<dyn PhysicalExpr>)
                    })
                    .collect::<Result<_>>()?;
                let label = format!("Source {}", relation.def.name);
                let schema = Self::schema(plan);
                let ops = self.each(|_| {
                    Ok(Box::new(Project::new(exprs.clone(), Arc::clone(&schema), &self.view).with_label(label.clone())))
                })?;
                let leaf = self.graph.add_leaf(ops)?;
                self.inputs.push(relation.def.id);
                if let Some(predicate) = scan.filters.iter().cloned().reduce(|a, b| a.and(b)) {
                    let predicate = self.physical(&predicate, scan.projected_schema.as_ref())?;
                    let ops = self.each(|_| Ok(Box::new(Filter::new(Arc::clone(&predicate), &self.view))))?;
                    return Ok((self.graph.add(ops, &[leaf], vec![None])?, Distribution::Single));
                }
                Ok((leaf, Distribution::Single))
            }
            LogicalPlan::Projection(p) => {
                let (child, distribution) = self.node(&p.input)?;
                let exprs = p.expr.iter().map(|e| self.physical(e, p.input.schema())).collect::<Result<Vec<_>>>()?;
                // Where a column moves to, if it is passed on unchanged.
                let moved = |c: usize| p.expr.iter().position(|e| column_index(e, p.input.schema()) == Some(c));
                let distribution = match distribution {
                    Distribution::Hash(cols) => match cols.iter().map(|&c| moved(c)).collect::<Option<Vec<_>>>() {
                        Some(cols) => Distribution::Hash(cols),
                        None => Distribution::Any,
                    },
                    other => other,
                };
                let schema = Self::schema(plan);
                let ops = self.each(|_| Ok(Box::new(Project::new(exprs.clone(), Arc::clone(&schema), &self.view))))?;
                Ok((self.graph.add(ops, &[child], vec![None])?, distribution))
            }
            LogicalPlan::Filter(f) => {
                let (child, distribution) = self.node(&f.input)?;
                let predicate = self.physical(&f.predicate, f.input.schema())?;
                let ops = self.each(|_| Ok(Box::new(Filter::new(Arc::clone(&predicate), &self.view))))?;
                Ok((self.graph.add(ops, &[child], vec![None])?, distribution))
            }
            LogicalPlan::Aggregate(a) => {
                let (child, input_distribution) = self.node(&a.input)?;
                let group_types =
                    a.group_expr.iter().map(|e| Ok(e.get_type(a.input.schema())?)).collect::<Result<Vec<_>>>()?;
                let group_by = a
                    .group_expr
                    .iter()
                    .map(|e| {
                        if matches!(e, Expr::GroupingSet(_)) {
                            return Err(unsupported("GROUPING SETS"));
                        }
                        self.physical(e, a.input.schema())
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut aggs = Vec::new();
                for (i, expr) in a.aggr_expr.iter().enumerate() {
                    let output_type = a.schema.field(a.group_expr.len() + i).data_type().clone();
                    let inner = match expr {
                        Expr::Alias(alias) => alias.expr.as_ref(),
                        e => e,
                    };
                    let Expr::AggregateFunction(f) = inner else {
                        return Err(unsupported(&format!("aggregate {expr}")));
                    };
                    let params = &f.params;
                    // ORDER BY only as string_agg(x, d ORDER BY x): the order Weir keeps values in.
                    let ordered_by_arg = params.order_by.len() == 1
                        && params.order_by[0].asc
                        && params.args.first().is_some_and(|a| *a == params.order_by[0].expr);
                    if params.filter.is_some() || !(params.order_by.is_empty() || ordered_by_arg) {
                        return Err(unsupported("FILTER or ORDER BY inside an aggregate"));
                    }
                    let kind = AggKind::from_name(f.func.name(), !params.args.is_empty(), params.distinct).ok_or_else(
                        || {
                            let distinct = if params.distinct { "DISTINCT " } else { "" };
                            unsupported(&format!("the aggregate {}({distinct}...)", f.func.name()))
                        },
                    )?;
                    let arg = params.args.first().map(|e| self.physical(e, a.input.schema())).transpose()?;
                    let arg_type = params.args.first().map(|e| e.get_type(a.input.schema())).transpose()?;
                    let delimiter = match (kind, params.args.get(1)) {
                        (AggKind::StringAgg, Some(Expr::Literal(v, _))) => Some(v.to_string()),
                        (AggKind::StringAgg, _) => {
                            return Err(unsupported("string_agg with a delimiter that is not a constant"))
                        }
                        _ => None,
                    };
                    aggs.push(AggSpec { kind, arg, arg_type, output_type, delimiter });
                }
                let (groups, values) = (self.state_table()?, self.state_table()?);
                let schema = Self::schema(plan);
                let ops = self.each(|shard| {
                    let state = (self.keyed(groups), self.keyed(values));
                    let op = HashAgg::new(
                        group_by.clone(),
                        group_types.clone(),
                        aggs.clone(),
                        Arc::clone(&schema),
                        state,
                        &self.view,
                    )?;
                    // A global aggregate's one group lives in shard 0 (where all its rows go).
                    Ok(Box::new(if shard == 0 { op } else { op.without_initial_group() }))
                })?;
                let groups = a.group_expr.len();
                let (needed, output) = if groups == 0 {
                    (Some(Distribution::Single), Distribution::Single)
                } else {
                    (hash_of(&a.group_expr, a.input.schema()), Distribution::Hash((0..groups).collect()))
                };
                let exchange = (needed != Some(input_distribution)).then_some(group_by);
                Ok((self.graph.add(ops, &[child], vec![exchange])?, output))
            }
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let (child, input_distribution) = self.node(input)?;
                let keys = (0..input.schema().fields().len())
                    .map(|i| {
                        Ok(Arc::new(datafusion::physical_expr::expressions::Column::new(
                            input.schema().field(i).name(),
                            i,
                        )) as Arc<dyn PhysicalExpr>)
                    })
                    .collect::<Result<Vec<_>>>()?;
                let types: Vec<_> = input.schema().fields().iter().map(|f| f.data_type().clone()).collect();
                let (groups, values) = (self.state_table()?, self.state_table()?);
                let schema = Self::schema(plan);
                let ops = self.each(|_| {
                    let state = (self.keyed(groups), self.keyed(values));
                    Ok(Box::new(HashAgg::new(
                        keys.clone(),
                        types.clone(),
                        vec![],
                        Arc::clone(&schema),
                        state,
                        &self.view,
                    )?))
                })?;
                let all = Distribution::Hash((0..input.schema().fields().len()).collect());
                let exchange = (input_distribution != all).then_some(keys);
                Ok((self.graph.add(ops, &[child], vec![exchange])?, all))
            }
            LogicalPlan::Join(j) => {
                if j.on.is_empty() {
                    return Err(unsupported("a join without an equality condition"));
                }
                let (left, left_distribution) = self.node(&j.left)?;
                let (right, right_distribution) = self.node(&j.right)?;
                let left_on: Vec<Expr> = j.on.iter().map(|(l, _)| l.clone()).collect();
                let right_on: Vec<Expr> = j.on.iter().map(|(_, r)| r.clone()).collect();
                let (left_needed, right_needed) =
                    (hash_of(&left_on, j.left.schema()), hash_of(&right_on, j.right.schema()));
                // Inner join rows are where their left key put them; outer joins pad keys with NULL.
                let output = match (&left_needed, j.join_type) {
                    (Some(needed), JoinType::Inner) => needed.clone(),
                    _ => Distribution::Any,
                };
                let left_keys =
                    j.on.iter().map(|(l, _)| self.physical(l, j.left.schema())).collect::<Result<Vec<_>>>()?;
                let right_keys =
                    j.on.iter().map(|(_, r)| self.physical(r, j.right.schema())).collect::<Result<Vec<_>>>()?;
                let residual = j.filter.as_ref().map(|f| self.physical(f, &j.schema)).transpose()?;
                let (left_state, right_state) = (self.state_table()?, self.state_table()?);
                let ops = self.each(|_| {
                    Ok(Box::new(HashJoin::new(
                        j.join_type,
                        (Self::schema(&j.left), left_keys.clone(), self.keyed(left_state)),
                        (Self::schema(&j.right), right_keys.clone(), self.keyed(right_state)),
                        Self::schema(plan),
                        residual.clone(),
                        &self.view,
                    )?))
                })?;
                let exchanges = vec![
                    (left_needed != Some(left_distribution)).then_some(left_keys),
                    (right_needed != Some(right_distribution)).then_some(right_keys),
                ];
                Ok((self.graph.add(ops, &[left, right], exchanges)?, output))
            }
            LogicalPlan::Union(u) => {
                let (children, distributions): (Vec<usize>, Vec<Distribution>) =
                    u.inputs.iter().map(|i| self.node(i)).collect::<Result<Vec<_>>>()?.into_iter().unzip();
                let output = if distributions.iter().all(|d| *d == Distribution::Single) {
                    Distribution::Single
                } else {
                    Distribution::Any
                };
                let schema = Self::schema(plan);
                let ops = self.each(|_| Ok(Box::new(Union::new(Arc::clone(&schema), children.len()))))?;
                let none = vec![None; children.len()];
                Ok((self.graph.add(ops, &children, none)?, output))
            }
            LogicalPlan::SubqueryAlias(s) => self.node(&s.input),
            LogicalPlan::Sort(s) if s.fetch.is_none() => self.node(&s.input),
            other => Err(unsupported(other.display().to_string().split(':').next().unwrap_or("this plan"))),
        }
    }
}
