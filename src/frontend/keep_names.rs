//! The one way Weir's analyzer rules rewrite a plan node's expressions: bottom-up, each
//! top-level expression keeping the name it had, so the node's schema and whatever reads its
//! columns above see the same names (`comparison_order`, `checked_arithmetic`,
//! `int4_literals`, `text_casts`, `postgres_intervals`, `numeric_arithmetic`); and the schema
//! those expressions are typed by ([`input_schema`]).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DFSchema;
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

/// The schema `node`'s expressions are typed by: its inputs' merged (a leaf's own).
pub fn input_schema(node: &LogicalPlan) -> Arc<DFSchema> {
    match node.inputs().as_slice() {
        [] => Arc::clone(node.schema()),
        [one] => Arc::clone(one.schema()),
        [first, rest @ ..] => {
            let mut merged = first.schema().as_ref().clone();
            rest.iter().for_each(|p| merged.merge(p.schema()));
            Arc::new(merged)
        }
    }
}
