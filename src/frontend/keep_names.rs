//! The one way Weir's analyzer rules rewrite a plan node's expressions: bottom-up, each
//! top-level expression keeping the name it had, so the node's schema and whatever reads its
//! columns above see the same names (`comparison_order`, `checked_arithmetic`,
//! `int4_literals`).

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan};

/// `node` with `rewrite` applied to every sub-expression of its expressions, bottom-up.
pub fn rewrite_expressions(
    node: LogicalPlan,
    mut rewrite: impl FnMut(Expr) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    let names = NamePreserver::new(&node);
    node.map_expressions(|expr| {
        let name = names.save(&expr);
        Ok(expr.transform_up(&mut rewrite)?.update_data(|e| name.restore(e)))
    })
}
