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
use datafusion::logical_expr::{Expr, GroupingSet, LogicalPlan};

/// `node` with `rewrite` applied to every sub-expression of its expressions, bottom-up.
pub fn rewrite_expressions(
    node: LogicalPlan,
    mut rewrite: impl FnMut(Expr) -> Result<Transformed<Expr>>,
) -> Result<Transformed<LogicalPlan>> {
    let names = NamePreserver::new(&node);
    node.map_expressions(|expr| {
        // A grouping set is no column of its own: each expression in it keeps its name (an
        // alias around the whole set would break it).
        if let Expr::GroupingSet(set) = expr {
            let mut keep = |e: Expr| -> Result<Transformed<Expr>> {
                let name = names.save(&e);
                Ok(e.transform_up(&mut rewrite)?.update_data(|e| name.restore(e)))
            };
            let mut each = |exprs: Vec<Expr>| -> Result<(Vec<Expr>, bool)> {
                let mut changed = false;
                let exprs = exprs
                    .into_iter()
                    .map(|e| {
                        let t = keep(e)?;
                        changed |= t.transformed;
                        Ok(t.data)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok((exprs, changed))
            };
            let (set, changed) = match set {
                GroupingSet::Rollup(exprs) => each(exprs).map(|(e, c)| (GroupingSet::Rollup(e), c))?,
                GroupingSet::Cube(exprs) => each(exprs).map(|(e, c)| (GroupingSet::Cube(e), c))?,
                GroupingSet::GroupingSets(sets) => {
                    let mut changed = false;
                    let sets = sets
                        .into_iter()
                        .map(|s| {
                            let (s, c) = each(s)?;
                            changed |= c;
                            Ok(s)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    (GroupingSet::GroupingSets(sets), changed)
                }
            };
            return Ok(Transformed::new_transformed(Expr::GroupingSet(set), changed));
        }
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
