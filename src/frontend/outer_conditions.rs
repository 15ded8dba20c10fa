//! An analyzer rule for DataFusion (one of the adapter's planning rules): a scalar subquery's
//! conditions on the outer row alone are asked before the subquery instead of inside it.
//!
//! `(SELECT x FROM d WHERE a.flag AND d.id = a.id)` (with `a` the outer row) is NULL when
//! `a.flag` is false, as `CASE WHEN a.flag THEN (SELECT x FROM d WHERE d.id = a.id) END` is.
//! DataFusion cannot decorrelate the first form when it stands inside a `CASE` (the plan fails
//! with "Physical plan does not support logical expression ScalarSubquery"), and SQLAlchemy
//! 2.1's inspector sends exactly that for every column's default; the second form runs. Only
//! subqueries that are a projection over a filter are changed, or over an aggregate of the
//! whole filter that is NULL over no rows (`max`, not `count`), and only conditions whose
//! columns all belong to the query the subquery stands in.
//!
//! Outer columns in what the subquery selects are moved out the same way: DataFusion decorrelates
//! outer columns in conditions only, so `(SELECT max(f(a.x, d.y)) FROM d WHERE ...)` (the parser
//! puts `max` around a pg_catalog subquery's one column) becomes
//! `CASE WHEN (SELECT max(true) FROM d WHERE ...) THEN f(a.x, (SELECT max(d.y) FROM d WHERE ...)) END`:
//! one subquery for whether a row matched and one per column of its own, equal to the original
//! when the subquery yields at most one row, which is what the parser's `max` already assumes
//! (SQLAlchemy 2.1 builds a column's identity options so). Registered by `df_context::template_state`.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::Column;
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::logical_expr::expr::Case;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{lit, Aggregate, Expr, Filter, LogicalPlan, Projection};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct LiftOuterConditions;

impl AnalyzerRule for LiftOuterConditions {
    fn name(&self) -> &str {
        "weir_lift_outer_conditions"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schemas: Vec<Arc<DFSchema>> = node.inputs().iter().map(|i| Arc::clone(i.schema())).collect();
            node.map_expressions(|expr| {
                expr.transform_up(|e| {
                    let split = lift_values(e, &schemas)?;
                    if split.transformed {
                        // The subqueries made carry the original's conditions: lift those too.
                        let lifted = split.data.transform_up(|e| lift(e, &schemas))?;
                        Ok(Transformed::yes(lifted.data))
                    } else {
                        lift(split.data, &schemas)
                    }
                })
            })
        })
        .data()
    }
}

/// Whether `expr` reads the outer row only (outer columns, no column of the subquery's own).
fn outer_only(expr: &Expr) -> bool {
    let mut outer = false;
    let mut inner = false;
    let _ = expr.apply(|e| {
        match e {
            Expr::OuterReferenceColumn(..) => outer = true,
            Expr::Column(_) => inner = true,
            _ => {}
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    outer && !inner
}

/// An aggregate function that is NULL over no rows (`single_row`'s too).
fn null_over_none(name: &str) -> bool {
    matches!(name, "max" | "min" | "sum" | "avg" | super::single_row::NAME)
}

/// An aggregate without groups whose every function is NULL over no rows (not `count`).
fn null_over_no_rows(aggregate: &Aggregate) -> bool {
    aggregate.group_expr.is_empty()
        && aggregate.aggr_expr.iter().all(|e| match e {
            Expr::AggregateFunction(f) => null_over_none(f.func.name()),
            Expr::Alias(a) => matches!(a.expr.as_ref(), Expr::AggregateFunction(f) if null_over_none(f.func.name())),
            _ => false,
        })
}

fn lift(expr: Expr, schemas: &[Arc<DFSchema>]) -> Result<Transformed<Expr>> {
    let Expr::ScalarSubquery(subquery) = &expr else { return Ok(Transformed::no(expr)) };
    let LogicalPlan::Projection(projection) = subquery.subquery.as_ref() else { return Ok(Transformed::no(expr)) };
    // Over the filter, an aggregate of the whole input that is NULL over no rows (the parser
    // puts `max` around pg_catalog subqueries, `parser::rewrite`) keeps the equivalence.
    let (aggregate, filter) = match projection.input.as_ref() {
        LogicalPlan::Filter(filter) => (None, filter),
        LogicalPlan::Aggregate(aggregate) if null_over_no_rows(aggregate) => match aggregate.input.as_ref() {
            LogicalPlan::Filter(filter) => (Some(aggregate), filter),
            _ => return Ok(Transformed::no(expr)),
        },
        _ => return Ok(Transformed::no(expr)),
    };
    let (outer, inner): (Vec<&Expr>, Vec<&Expr>) =
        split_conjunction(&filter.predicate).into_iter().partition(|c| outer_only(c));
    // The outer columns, as columns of the query the subquery stands in.
    let condition = conjunction(outer.into_iter().cloned()).map(|c| {
        c.transform_up(|e| match e {
            Expr::OuterReferenceColumn(_, column) => Ok(Transformed::yes(Expr::Column(column))),
            other => Ok(Transformed::no(other)),
        })
        .data()
    });
    let Some(condition) = condition.transpose()? else { return Ok(Transformed::no(expr)) };
    let resolves = condition.column_refs().iter().all(|c| schemas.iter().any(|s| s.has_column(c)));
    if !resolves {
        return Ok(Transformed::no(expr));
    }
    let input = match conjunction(inner.into_iter().cloned()) {
        Some(predicate) => LogicalPlan::Filter(Filter::try_new(predicate, Arc::clone(&filter.input))?),
        None => filter.input.as_ref().clone(),
    };
    let input = match aggregate {
        Some(aggregate) => LogicalPlan::Aggregate(Aggregate::try_new(
            Arc::new(input),
            aggregate.group_expr.clone(),
            aggregate.aggr_expr.clone(),
        )?),
        None => input,
    };
    let plan = LogicalPlan::Projection(Projection::try_new(projection.expr.clone(), Arc::new(input))?);
    let lifted = Expr::ScalarSubquery(subquery.with_plan(Arc::new(plan)));
    Ok(Transformed::yes(Expr::Case(Case::new(None, vec![(Box::new(condition), Box::new(lifted))], None))))
}

/// `(SELECT max(f(outer, c1, c2)) ...)`, the one aggregate of no groups over outer columns, as
/// `CASE WHEN (SELECT max(true) ...) THEN f(outer, (SELECT max(c1) ...), (SELECT max(c2) ...)) END`
/// (see the module's doc), when every outer column belongs to the query it stands in.
fn lift_values(expr: Expr, schemas: &[Arc<DFSchema>]) -> Result<Transformed<Expr>> {
    let Expr::ScalarSubquery(subquery) = &expr else { return Ok(Transformed::no(expr)) };
    let LogicalPlan::Projection(projection) = subquery.subquery.as_ref() else { return Ok(Transformed::no(expr)) };
    let LogicalPlan::Aggregate(aggregate) = projection.input.as_ref() else { return Ok(Transformed::no(expr)) };
    if !aggregate.group_expr.is_empty() || aggregate.aggr_expr.len() != 1 || projection.expr.len() != 1 {
        return Ok(Transformed::no(expr));
    }
    let Expr::AggregateFunction(function) = aggregate.aggr_expr[0].clone().unalias() else {
        return Ok(Transformed::no(expr));
    };
    let params = &function.params;
    let plain_max = function.func.name() == "max"
        && params.args.len() == 1
        && !params.distinct
        && params.filter.is_none()
        && params.order_by.is_empty();
    // The subquery selects the aggregate itself, not an expression of it.
    let selects_aggregate = matches!(projection.expr[0].clone().unalias(), Expr::Column(_));
    if !plain_max || !selects_aggregate || !params.args[0].contains_outer() {
        return Ok(Transformed::no(expr));
    }
    let value = &params.args[0];
    let mut outer_resolves = true;
    let mut inner_columns: Vec<Column> = Vec::new();
    value.apply(|e| {
        match e {
            Expr::OuterReferenceColumn(_, column) => {
                outer_resolves &= schemas.iter().any(|s| s.has_column(column));
            }
            Expr::Column(column) if !inner_columns.contains(column) => inner_columns.push(column.clone()),
            _ => {}
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    if !outer_resolves {
        return Ok(Transformed::no(expr));
    }
    // `(SELECT max(e) FROM <input>)`, correlated only through the input's conditions.
    // `(SELECT max(e) FROM <input>)`, correlated only through the input's conditions.
    let max_of = |e: Expr| super::single_row::aggregate_subquery(&aggregate.input, max(e), subquery);
    let matched = max_of(lit(true))?;
    let mut values = Vec::with_capacity(inner_columns.len());
    for column in &inner_columns {
        values.push((column.clone(), max_of(Expr::Column(column.clone()))?));
    }
    let outside = value
        .clone()
        .transform_up(|e| match e {
            Expr::OuterReferenceColumn(_, column) => Ok(Transformed::yes(Expr::Column(column))),
            Expr::Column(column) => {
                let found = values.iter().find(|(c, _)| *c == column).map(|(_, v)| v.clone());
                Ok(found.map_or(Transformed::no(Expr::Column(column)), Transformed::yes))
            }
            other => Ok(Transformed::no(other)),
        })
        .data()?;
    Ok(Transformed::yes(Expr::Case(Case::new(None, vec![(Box::new(matched), Box::new(outside))], None))))
}
