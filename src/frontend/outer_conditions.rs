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
//! columns all belong to the query the subquery stands in. Registered by `df_context::template_state`.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::logical_expr::expr::Case;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Aggregate, Expr, Filter, LogicalPlan, Projection};
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
            node.map_expressions(|expr| expr.transform_up(|e| lift(e, &schemas)))
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

/// An aggregate without groups whose every function is NULL over no rows (not `count`).
fn null_over_no_rows(aggregate: &Aggregate) -> bool {
    aggregate.group_expr.is_empty()
        && aggregate.aggr_expr.iter().all(|e| match e {
            Expr::AggregateFunction(f) => matches!(f.func.name(), "max" | "min" | "sum" | "avg"),
            Expr::Alias(a) => matches!(a.expr.as_ref(), Expr::AggregateFunction(f) if matches!(f.func.name(), "max" | "min" | "sum" | "avg")),
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
