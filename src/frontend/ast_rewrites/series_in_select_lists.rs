//! Set-returning functions in a select list (`SELECT generate_series(1, 3)`,
//! `regexp_matches(s, '(\d+)', 'g')`), as PostgreSQL runs them: each is an array function
//! here (DataFusion's `generate_series`, Weir's `regexp_matches`, `frontend::pg_functions`)
//! unnested. An AST rewrite, run by [`super::rewrite`] on statements parsed for a session.

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::error::{Result, SqlState, WeirError};

/// Set-returning functions: each here returns an array of what PostgreSQL returns as rows.
const SET_RETURNING: [&str; 2] = ["generate_series", "regexp_matches"];

/// A set-returning call ([`SET_RETURNING`]) as a whole select-list item (or one in brackets or
/// cast) yields one row per value, as in Postgres (DataFusion's scalar `generate_series` is one
/// array): the call becomes `unnest(generate_series(...))`, the item named after the function
/// unless aliased, and
/// an ORDER BY repeating the call orders by that item. In every SELECT of the statement, UNION
/// branches and subqueries included. Anywhere else in a select list, WHERE, GROUP BY, HAVING or
/// ORDER BY it is refused (0A000) rather than read as an array.
pub fn series_in_select_lists(statement: &mut ast::Statement) -> Result<()> {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, OrderByKind, SelectItem, SetExpr,
        VisitMut, VisitorMut,
    };
    use std::ops::ControlFlow;
    /// `expr` as a call of the unqualified function `name`.
    fn call_of<'a>(expr: &'a Expr, name: &str) -> Option<&'a ast::Function> {
        let Expr::Function(f) = expr else { return None };
        let named = f.name.0.len() == 1 && f.name.0[0].as_ident().is_some_and(|i| i.value.eq_ignore_ascii_case(name));
        named.then_some(f)
    }
    /// The set-returning function `expr` calls, if it is one.
    fn set_returning(expr: &Expr) -> Option<&'static str> {
        SET_RETURNING.into_iter().find(|name| call_of(expr, name).is_some())
    }
    fn is_series(expr: &Expr) -> bool {
        set_returning(expr).is_some()
    }
    /// `unnest(e)`'s argument when `expr` is one.
    fn unnested(expr: &Expr) -> Option<&Expr> {
        match &call_of(expr, "unnest")?.args {
            FunctionArguments::List(list) if list.args.len() == 1 => match &list.args[0] {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            },
            _ => None,
        }
    }
    fn unnest(expr: Expr) -> Expr {
        Expr::Function(ast::Function {
            name: ast::ObjectName::from(vec![ast::Ident::new("unnest")]),
            uses_odbc_syntax: false,
            parameters: FunctionArguments::None,
            args: FunctionArguments::List(ast::FunctionArgumentList {
                duplicate_treatment: None,
                args: vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(expr))],
                clauses: vec![],
            }),
            filter: None,
            null_treatment: None,
            over: None,
            within_group: vec![],
        })
    }
    /// Wraps the call when `expr` is one, in brackets or cast; the function it wrapped.
    fn wrap_whole(expr: &mut Expr) -> Option<&'static str> {
        match expr {
            Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => wrap_whole(inner),
            e => {
                let function = set_returning(e)?;
                let call = std::mem::replace(e, Expr::value(ast::Value::Null));
                *e = unnest(call);
                Some(function)
            }
        }
    }
    /// Fails when `node` holds a call that is not wrapped.
    fn all_wrapped<V: ast::Visit>(node: &V) -> Result<()> {
        let (mut calls, mut wrapped) = (0usize, 0usize);
        let _ = visit_expressions(node, |e| {
            calls += is_series(e) as usize;
            wrapped += unnested(e).is_some_and(is_series) as usize;
            ControlFlow::<()>::Continue(())
        });
        if calls > wrapped {
            return Err(WeirError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "set-returning functions (generate_series, regexp_matches) are supported as a whole select-list item (generate_series in FROM too), not inside an expression, WHERE, GROUP BY, HAVING or ORDER BY",
            )
            .with_hint("select the call as an item of a subquery and use its column"));
        }
        Ok(())
    }
    /// Rewrites the SELECTs of a body (both sides of a set operation); `renamed` gets each
    /// rewritten call as written with its item's name.
    fn rewrite_body(body: &mut SetExpr, renamed: &mut Vec<(Expr, ast::Ident)>) -> Result<()> {
        match body {
            SetExpr::SetOperation { left, right, .. } => {
                rewrite_body(left, renamed)?;
                rewrite_body(right, renamed)
            }
            SetExpr::Select(select) => {
                let mut wrapped_items = Vec::new();
                for (position, item) in select.projection.iter_mut().enumerate() {
                    let (expr, alias) = match item {
                        SelectItem::UnnamedExpr(expr) => (expr, None),
                        SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.clone())),
                        _ => continue,
                    };
                    let written = expr.clone();
                    let Some(function) = wrap_whole(expr) else { continue };
                    let name = alias.unwrap_or_else(|| ast::Ident::new(function));
                    renamed.push((written, name.clone()));
                    wrapped_items.push((position, name.clone(), function));
                    if let SelectItem::UnnamedExpr(expr) = item {
                        let expr = std::mem::replace(expr, Expr::value(ast::Value::Null));
                        *item = SelectItem::ExprWithAlias { expr, alias: name };
                    }
                }
                all_wrapped(&select.projection)?;
                all_wrapped(&select.selection)?;
                all_wrapped(&select.group_by)?;
                all_wrapped(&select.having)?;
                all_wrapped(&select.distinct)?;
                if let ([(position, name, "generate_series")], true) =
                    (wrapped_items.as_slice(), select.from.is_empty())
                {
                    series_as_table(select, *position, name);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    /// With no FROM and one series whose bounds are number literals (`INSERT INTO t SELECT
    /// generate_series(1, 10000000)`), reads it as the table function: its rows come in
    /// batches instead of one array built first. Other bounds (timestamps, parameters) keep
    /// the unnest form, which the table function does not cover.
    fn series_as_table(select: &mut ast::Select, position: usize, name: &ast::Ident) {
        fn literal(arg: &FunctionArg) -> bool {
            match arg {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => match e {
                    Expr::Value(v) => matches!(v.value, ast::Value::Number(..)),
                    Expr::UnaryOp { op: ast::UnaryOperator::Minus, expr } => {
                        matches!(expr.as_ref(), Expr::Value(v) if matches!(v.value, ast::Value::Number(..)))
                    }
                    _ => false,
                },
                _ => false,
            }
        }
        /// The unnest under brackets and casts, replaced by `name`; its series call's arguments.
        fn take(expr: &mut Expr, name: &ast::Ident) -> Option<Vec<FunctionArg>> {
            match expr {
                Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => take(inner, name),
                e => {
                    let Some(Expr::Function(call)) = unnested(e) else { return None };
                    let FunctionArguments::List(list) = &call.args else { return None };
                    if !list.args.iter().all(literal) {
                        return None;
                    }
                    let args = list.args.clone();
                    *e = Expr::Identifier(name.clone());
                    Some(args)
                }
            }
        }
        let (SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr)) = &mut select.projection[position]
        else {
            return;
        };
        let before = expr.clone();
        let Some(args) = take(expr, name) else { return };
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let from = format!("SELECT 1 FROM generate_series({}) AS {name} ({name})", args.join(", "));
        match Parser::parse_sql(&PostgreSqlDialect {}, &from).ok().and_then(|mut p| p.pop()) {
            Some(ast::Statement::Query(query)) => match *query.body {
                SetExpr::Select(parsed) => select.from = parsed.from,
                _ => *expr = before,
            },
            _ => *expr = before,
        }
    }
    struct Rewrite;
    impl VisitorMut for Rewrite {
        type Break = WeirError;
        fn post_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<WeirError> {
            let mut renamed = Vec::new();
            if let Err(e) = rewrite_body(&mut query.body, &mut renamed) {
                return ControlFlow::Break(e);
            }
            if let Some(ast::OrderBy { kind: OrderByKind::Expressions(order), .. }) = &mut query.order_by {
                for by in order.iter_mut() {
                    if let Some((_, name)) = renamed.iter().find(|(written, _)| *written == by.expr) {
                        by.expr = Expr::Identifier(name.clone());
                    }
                }
            }
            match all_wrapped(&query.order_by) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            }
        }
    }
    match statement.visit(&mut Rewrite) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}
