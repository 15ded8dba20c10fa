//! `EXISTS (...)` in a select list. An AST rewrite, run by [`super::rewrite`].

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// `EXISTS (SELECT ... FROM ... WHERE ...)` in a select list (psql's `\d index` asks whether a
/// constraint is deferrable that way) as `(SELECT count(*) FROM ... WHERE ...) > 0` (`= 0` for
/// NOT EXISTS): the same truth, and DataFusion plans a correlated scalar aggregate in a select
/// list where it plans no EXISTS. Only a subquery whose row count is the count of its FROM and
/// WHERE (no grouping, aggregate, set-returning function, DISTINCT, LIMIT or set operation),
/// and only EXISTS directly in the select item (under NOT, AND/OR, comparisons, CASE, casts),
/// not inside further subqueries, which plan theirs as joins.
pub fn exists_in_select_lists(statement: &mut ast::Statement) {
    use datafusion::sql::sqlparser::ast::{Expr, GroupByExpr, Query, SelectItem, SetExpr, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    fn counted(subquery: &Query, negated: bool) -> Option<Expr> {
        let SetExpr::Select(select) = subquery.body.as_ref() else { return None };
        let projection = select.projection.iter().map(|p| p.to_string().to_ascii_lowercase()).collect::<Vec<_>>();
        let rows_change = projection.iter().any(|p| {
            [
                "count(",
                "max(",
                "min(",
                "sum(",
                "avg(",
                "_agg(",
                "bool_and(",
                "bool_or(",
                "every(",
                "unnest(",
                "generate_series(",
            ]
            .iter()
            .any(|f| p.contains(f))
        });
        let plain = matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty())
            && select.having.is_none()
            && select.distinct.is_none()
            && !rows_change
            && subquery.limit_clause.is_none()
            && subquery.fetch.is_none()
            && subquery.with.is_none();
        if !plain {
            return None;
        }
        let mut select = select.clone();
        select.projection = vec![SelectItem::UnnamedExpr(
            Parser::new(&PostgreSqlDialect {}).try_with_sql("count(*)").and_then(|mut p| p.parse_expr()).ok()?,
        )];
        let count = Query { body: Box::new(SetExpr::Select(select)), order_by: None, ..subquery.clone() };
        let text = format!("({count}) {} 0", if negated { "=" } else { ">" });
        Parser::new(&PostgreSqlDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_expr()).ok()
    }
    fn rewrite(expr: &mut Expr) {
        match expr {
            Expr::Exists { subquery, negated } => {
                if let Some(rewritten) = counted(subquery, *negated) {
                    *expr = Expr::Nested(Box::new(rewritten));
                }
            }
            Expr::BinaryOp { left, right, .. } => {
                rewrite(left);
                rewrite(right);
            }
            Expr::UnaryOp { expr, .. } | Expr::Nested(expr) | Expr::Cast { expr, .. } => rewrite(expr),
            Expr::IsTrue(e) | Expr::IsFalse(e) | Expr::IsNull(e) | Expr::IsNotNull(e) => rewrite(e),
            Expr::Case { conditions, else_result, .. } => {
                for when in conditions {
                    rewrite(&mut when.condition);
                    rewrite(&mut when.result);
                }
                if let Some(e) = else_result {
                    rewrite(e);
                }
            }
            _ => {}
        }
    }
    struct Rewrite;
    impl VisitorMut for Rewrite {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_mut() {
                for item in &mut select.projection {
                    if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                        rewrite(e);
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewrite);
}
