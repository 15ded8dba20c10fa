//! An analyzer rule for DataFusion: an integer literal is an `INT` (int4) when it fits, as in
//! PostgreSQL, not a `BIGINT`.
//!
//! DataFusion types every integer literal `Int64`, so `SELECT 1` came back as int8 (OID 20)
//! and node-postgres handed applications the string `"1"`; `$1::int4 + 1` was int8. Before
//! type coercion, this rule retypes each `Int64` literal in `i32`'s range as `Int32`; type
//! coercion then widens it wherever it meets a `BIGINT` (`bigint_column + 1` stays `BIGINT`),
//! and `1::bigint` stays a `BIGINT` (the cast is kept). Expressions keep their names, so
//! nothing above a retyped node loses its column. Left alone: `LIMIT`/`OFFSET` (DataFusion
//! wants `Int64` there), `VALUES` (its schema is fixed when planned), recursive queries (their
//! work table's likewise) and statements that write rows (their input was shaped to the
//! table's columns when planned), and aggregates over grouping sets (`grouping(g % 2)` must
//! find `g % 2` among the grouping expressions as written). Registered by
//! `df_context::template_state` before DataFusion's own rules.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct Int4Literals;

impl AnalyzerRule for Int4Literals {
    fn name(&self) -> &str {
        "weir_int4_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Copy(_) | LogicalPlan::Ddl(_)) {
            return Ok(plan);
        }
        // A recursive query's work table has the types its first term was planned with.
        let mut recursive = false;
        plan.apply_with_subqueries(|p| {
            recursive |= matches!(p, LogicalPlan::RecursiveQuery(_));
            Ok(if recursive { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        })?;
        if recursive {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| {
            if matches!(node, LogicalPlan::Limit(_) | LogicalPlan::Values(_)) || grouping_sets(&node) {
                return Ok(Transformed::no(node));
            }
            let retyped = super::keep_names::rewrite_expressions(node, int4)?;
            if retyped.transformed {
                retyped.map_data(|p| p.recompute_schema())
            } else {
                Ok(retyped)
            }
        })
        .data()
    }
}

/// An aggregate over grouping sets: `grouping(expr)` must find `expr` among the grouping
/// expressions as written, which a retyped (and renamed back) expression no longer is.
fn grouping_sets(node: &LogicalPlan) -> bool {
    match node {
        LogicalPlan::Aggregate(a) => a.group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))),
        _ => false,
    }
}

fn int4(e: Expr) -> Result<Transformed<Expr>> {
    match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), metadata) if i32::try_from(v).is_ok() => {
            Ok(Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v as i32)), metadata)))
        }
        other => Ok(Transformed::no(other)),
    }
}
