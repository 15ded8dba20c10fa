//! `unnest` of a FROM item's column, in FROM (`FROM posts p, unnest(p.tags) [WITH ORDINALITY]
//! AS t(tag [, n])`, or `CROSS JOIN [LATERAL] unnest(...)`), as PostgreSQL reads it: one row per
//! element, beside its row, numbered from 1 with `WITH ORDINALITY`. DataFusion 55 plans neither
//! the lateral reference nor the ordinality, but it plans `unnest` in a select list, which views
//! keep incrementally (`operators::unnest`); so the two FROM items become one:
//! `(SELECT p.*, unnest(p.tags) AS tag [, unnest(generate_series(1, cardinality(p.tags))) AS n]
//! FROM posts p) AS p`, and the query's references to `t.tag` (and `t.*`) read `p.tag`. An AST
//! rewrite, run by [`super::rewrite`] on statements parsed for a session, before the rewrites of
//! other functions in FROM.
//!
//! Only the plain form is rewritten: the unnest right after the item it reads (a table or an
//! aliased subquery), its arguments reading that item alone. Any other stays as written (and
//! DataFusion's error says what it cannot plan).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, JoinOperator, SelectItem, SetExpr, TableFactor, TableWithJoins, VisitMut,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

pub fn unnest_in_from(statement: &mut ast::Statement) {
    struct Rewrite;
    impl VisitorMut for Rewrite {
        type Break = ();
        fn post_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
            let mut renamed = Vec::new();
            rewrite_body(&mut query.body, &mut renamed);
            if let Some(order_by) = &mut query.order_by {
                for (from, to, _) in &renamed {
                    requalify(order_by, from, to);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewrite);
}

/// (unnest alias, item alias, columns) of each rewrite.
type Renamed = Vec<(ast::Ident, ast::Ident, Vec<ast::Ident>)>;

fn rewrite_body(body: &mut SetExpr, renamed: &mut Renamed) {
    match body {
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_body(left, renamed);
            rewrite_body(right, renamed);
        }
        SetExpr::Select(select) => {
            let mut here = Vec::new();
            // Names given to relations anywhere in the SELECT (its subqueries too): an unnest
            // whose alias names another relation as well is left alone, as its references could
            // not be told apart.
            let mut aliases = Vec::new();
            let _ = ast::Visit::visit(&**select, &mut Aliases(&mut aliases));
            rewrite_from(&mut select.from, &aliases, &mut here);
            for (from, to, columns) in &here {
                expand_wildcards(&mut select.projection, from, to, columns);
                exclude_from_wildcards(&mut select.projection, to, columns);
                requalify(&mut select.projection, from, to);
                requalify(&mut select.selection, from, to);
                requalify(&mut select.group_by, from, to);
                requalify(&mut select.having, from, to);
            }
            renamed.extend(here);
        }
        _ => {}
    }
}

/// Collects the alias of every table factor it visits.
struct Aliases<'a>(&'a mut Vec<String>);

impl ast::Visitor for Aliases<'_> {
    type Break = ();
    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        let alias = match factor {
            TableFactor::Table { alias, .. }
            | TableFactor::Derived { alias, .. }
            | TableFactor::Function { alias, .. }
            | TableFactor::UNNEST { alias, .. } => alias.as_ref().map(|a| a.name.value.to_ascii_lowercase()),
            _ => None,
        };
        self.0.extend(alias);
        ControlFlow::Continue(())
    }
}

fn rewrite_from(from: &mut Vec<TableWithJoins>, aliases: &[String], renamed: &mut Renamed) {
    // `FROM r, unnest(...)`: the unnest is an item of its own right after r.
    let mut i = 1;
    while i < from.len() {
        if from[i].joins.is_empty() && from[i - 1].joins.is_empty() {
            if let Some(merged) = merge(&from[i - 1].relation, &from[i].relation, aliases, renamed) {
                from[i - 1].relation = merged;
                from.remove(i);
                continue;
            }
        }
        i += 1;
    }
    // `FROM r CROSS JOIN [LATERAL] unnest(...)`: the first join of r's item.
    for item in from.iter_mut() {
        let Some(join) = item.joins.first() else { continue };
        let crossed = matches!(join.join_operator, JoinOperator::CrossJoin(_));
        if crossed {
            if let Some(merged) = merge(&item.relation, &join.relation, aliases, renamed) {
                item.relation = merged;
                item.joins.remove(0);
            }
        }
    }
}

/// The one item reading `left`'s rows with `right`'s unnest beside each, if `right` is an
/// unnest of `left`'s columns alone.
fn merge(left: &TableFactor, right: &TableFactor, aliases: &[String], renamed: &mut Renamed) -> Option<TableFactor> {
    let (args, alias, ordinality) = unnest_call(right)?;
    if let Some(alias) = &alias {
        let name = alias.name.value.to_ascii_lowercase();
        if aliases.iter().filter(|a| **a == name).count() > 1 {
            return None;
        }
    }
    let (left_text, left_name) = match left {
        TableFactor::Table { name, alias, args: None, .. } => {
            let text = left.to_string();
            let named = alias.as_ref().map(|a| a.name.clone()).or_else(|| name.0.last()?.as_ident().cloned())?;
            (text, named)
        }
        TableFactor::Derived { alias: Some(alias), .. } => (left.to_string(), alias.name.clone()),
        _ => return None,
    };
    // Every column the arguments read is the left item's (qualified by it, or not at all).
    let mut foreign = false;
    let _ = ast::visit_expressions(&args, |e| {
        if let Expr::CompoundIdentifier(parts) = e {
            foreign |= parts.len() != 2 || !parts[0].value.eq_ignore_ascii_case(&left_name.value);
        }
        ControlFlow::<()>::Continue(())
    });
    if foreign || args.is_empty() {
        return None;
    }
    // Columns: the alias's list, else the alias's name for one argument, else `unnest`; then
    // the ordinality's, else `ordinality`.
    let table = alias.as_ref().map(|a| a.name.clone()).unwrap_or_else(|| ast::Ident::new("unnest"));
    let listed: Vec<ast::Ident> = alias.iter().flat_map(|a| a.columns.iter().map(|c| c.name.clone())).collect();
    let mut columns: Vec<ast::Ident> = (0..args.len())
        .map(|i| match listed.get(i) {
            Some(name) => name.clone(),
            None if args.len() == 1 && alias.is_some() => table.clone(),
            None if args.len() == 1 => ast::Ident::new("unnest"),
            None => ast::Ident::new(format!("unnest_{}", i + 1)),
        })
        .collect();
    let mut items: Vec<String> = vec![format!("{left_name}.*")];
    items.extend(args.iter().zip(&columns).map(|(arg, column)| format!("unnest({arg}) AS {column}")));
    if ordinality {
        let number = listed.get(args.len()).cloned().unwrap_or_else(|| ast::Ident::new("ordinality"));
        let longest = match args.as_slice() {
            // The first dimension: unnest opens one level of a nested array.
            [one] => format!("array_length({one}, 1)"),
            many => format!(
                "greatest({})",
                many.iter().map(|a| format!("coalesce(array_length({a}, 1), 0)")).collect::<Vec<_>>().join(", ")
            ),
        };
        items.push(format!("unnest(generate_series(1, {longest})) AS {number}"));
        columns.push(number);
    }
    let sql = format!("SELECT * FROM (SELECT {} FROM {left_text}) AS {left_name}", items.join(", "));
    let mut parsed = Parser::parse_sql(&PostgreSqlDialect {}, &sql).ok()?;
    let Some(ast::Statement::Query(query)) = parsed.pop() else { return None };
    let SetExpr::Select(select) = *query.body else { return None };
    let merged = select.from.into_iter().next()?.relation;
    renamed.push((table, left_name, columns));
    Some(merged)
}

/// `factor` as `unnest(args) [WITH ORDINALITY] [AS alias]`: its arguments, alias and ordinality.
fn unnest_call(factor: &TableFactor) -> Option<(Vec<Expr>, Option<ast::TableAlias>, bool)> {
    let (name, args, alias, ordinality) = match factor {
        TableFactor::Table { name, args: Some(args), alias, with_ordinality, .. } => {
            (name, &args.args, alias, *with_ordinality)
        }
        TableFactor::Function { name, args, alias, with_ordinality, .. } => (name, args, alias, *with_ordinality),
        // `unnest(...)` parsed as the UNNEST table factor.
        TableFactor::UNNEST { alias, array_exprs, with_offset: false, with_ordinality, .. } => {
            return Some((array_exprs.clone(), alias.clone(), *with_ordinality));
        }
        _ => return None,
    };
    let called = name.0.len() == 1 && name.0[0].as_ident().is_some_and(|i| i.value.eq_ignore_ascii_case("unnest"));
    if !called {
        return None;
    }
    let exprs = args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((exprs, alias.clone(), ordinality))
}

/// `from.*` in a select list as `to.column` for each of the unnest's columns.
fn expand_wildcards(projection: &mut Vec<SelectItem>, from: &ast::Ident, to: &ast::Ident, columns: &[ast::Ident]) {
    let mut out = Vec::with_capacity(projection.len());
    for item in projection.drain(..) {
        match &item {
            SelectItem::QualifiedWildcard(ast::SelectItemQualifiedWildcardKind::ObjectName(name), _)
                if name.0.len() == 1
                    && name.0[0].as_ident().is_some_and(|i| i.value.eq_ignore_ascii_case(&from.value)) =>
            {
                out.extend(
                    columns
                        .iter()
                        .map(|c| SelectItem::UnnamedExpr(Expr::CompoundIdentifier(vec![to.clone(), c.clone()]))),
                );
            }
            _ => out.push(item),
        }
    }
    *projection = out;
}

/// `to.*` in a select list (the item the unnest went into) without the unnest's columns: the
/// item's own columns, as written.
fn exclude_from_wildcards(projection: &mut [SelectItem], to: &ast::Ident, columns: &[ast::Ident]) {
    for item in projection.iter_mut() {
        if let SelectItem::QualifiedWildcard(ast::SelectItemQualifiedWildcardKind::ObjectName(name), options) = item {
            let named =
                name.0.len() == 1 && name.0[0].as_ident().is_some_and(|i| i.value.eq_ignore_ascii_case(&to.value));
            if named && options.opt_exclude.is_none() {
                let names = columns.iter().map(|c| ast::ObjectName::from(vec![c.clone()])).collect();
                options.opt_exclude = Some(ast::ExcludeSelectItem::Multiple(names));
            }
        }
    }
}

/// References `from.column` in `node` as `to.column`.
fn requalify<V: ast::VisitMut>(node: &mut V, from: &ast::Ident, to: &ast::Ident) {
    let _ = ast::visit_expressions_mut(node, |e| {
        if let Expr::CompoundIdentifier(parts) = e {
            if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case(&from.value) {
                parts[0] = to.clone();
            }
        }
        ControlFlow::<()>::Continue(())
    });
}
