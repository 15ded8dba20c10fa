//! An analyzer rule for DataFusion: a comparison with a constant on the left and a column on
//! the right is written the other way round (`10 < c` becomes `c > 10`).
//!
//! DataFusion 55's `push_down_filter` merges a column's conjunctive range conditions
//! (`c >= 10 AND c > 10` into `c > 10`) but reads `10 < c` as if the constant were on the
//! right, so `c >= T AND T < c` over a timestamp column became `c >= T` and returned the row
//! `c = T` (integer columns escaped: the simplifier turns their comparisons round on its own).
//! Its fix for the equality case (apache/datafusion#24763) came after 55. With every such
//! comparison column-first, the merge sees what it expects. Swapping the sides of a
//! comparison never changes its value; the expressions keep their names (an unaliased
//! `0 < v` is still called that, by the client and by the plan above it). Registered by `df_context::template_state`, after type
//! coercion.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct ColumnFirstComparisons;

impl AnalyzerRule for ColumnFirstComparisons {
    fn name(&self) -> &str {
        "weir_column_first_comparisons"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // A swapped comparison is named differently; the plan's schemas (and whatever reads the
        // old name above) keep the name it had.
        plan.transform_up_with_subqueries(|node| super::keep_names::rewrite_expressions(node, column_first)).data()
    }
}

fn column_first(expr: Expr) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &expr else {
        return Ok(Transformed::no(expr));
    };
    let comparison =
        matches!(op, Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq);
    match op.swap() {
        Some(swapped) if comparison && constant(left) && !constant(right) => {
            Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr { left: right.clone(), op: swapped, right: left.clone() })))
        }
        _ => Ok(Transformed::no(expr)),
    }
}

/// Whether `expr` reads no column, no outer row and no subquery (a parameter is a constant).
fn constant(expr: &Expr) -> bool {
    let mut reads = false;
    let _ = expr.apply(|e| {
        reads |= matches!(
            e,
            Expr::Column(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
        );
        Ok(if reads { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    !reads
}
