//! The names of a query's result columns, as Postgres gives them.
//!
//! Postgres names an unaliased result column after what it computes: a column after the
//! column (`t.v` is `v`), a function call after the function (`count(*)` is `count`), a cast
//! after what it casts, or its type when that has no name (`NULL::int` is `int4`), `CASE` is
//! `case`, anything else `?column?`; and two result columns may have one name (`SELECT 1 AS a,
//! 2 AS a`). DataFusion names columns after their whole expression (`count(*)`, `sum(t.v)`) and
//! refuses duplicates. [`name_columns`] rewrites a query before DataFusion plans it: every
//! unaliased item gets its Postgres name as an alias, and a name already taken gets a unique one
//! inside the plan; the names the client must see are returned when they differ from the plan's
//! (duplicates), for the handler to put on the result ([`rename`]). A view's columns are the
//! names themselves, so a view with two columns of one name is refused (42701), as in Postgres.
//! Called by `handler::query` for every query it plans.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr};

use super::type_names::normalize_type_name;

/// What Postgres calls a column it cannot name.
const NO_NAME: &str = "?column?";

/// Names the unaliased result columns of `query` as Postgres does (as aliases); returns the
/// client's names when the plan must use others (two columns of one name). Queries with `*`
/// keep their names. The columns of the queries inside it (derived tables, CTEs, subqueries,
/// the branches of a UNION) are named too ([`name_inner_columns`]), so `SELECT x.count FROM
/// (SELECT count(*) FROM t) x` reads the column Postgres would call `count`.
pub fn name_columns(query: &mut Query) -> Option<Vec<String>> {
    name_columns_by(query, true)
}

/// [`name_columns`], naming the inner queries' columns only if `inner` (a view made before
/// that rule is planned without it: `df_context::PlanningRules`).
pub fn name_columns_by(query: &mut Query, inner: bool) -> Option<Vec<String>> {
    let names = name_top_columns(query);
    if inner {
        name_inner_columns(query);
    }
    names
}

/// Gives each unaliased column of every SELECT in `query` (nested ones included) its Postgres
/// name as an alias, where that name is one of its SELECT's (no other column has it, and no `*`
/// could bring one): inside a plan, names must be unique; a duplicate keeps DataFusion's name.
fn name_inner_columns(query: &mut Query) {
    use datafusion::sql::sqlparser::ast::{Select, VisitMut, VisitorMut};
    struct Namer;
    impl VisitorMut for Namer {
        type Break = ();
        fn pre_visit_select(&mut self, select: &mut Select) -> std::ops::ControlFlow<()> {
            let items = &mut select.projection;
            if items.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) {
                return std::ops::ControlFlow::Continue(());
            }
            let names: Vec<Option<String>> = items
                .iter()
                .map(|item| match item {
                    SelectItem::UnnamedExpr(expr) => postgres_name(expr),
                    SelectItem::ExprWithAlias { alias, .. } => Some(ident_name(alias)),
                    _ => None,
                })
                .collect();
            for (i, item) in items.iter_mut().enumerate() {
                let Some(name) = &names[i] else { continue };
                let unique = names.iter().filter(|n| n.as_ref() == Some(name)).count() == 1;
                if unique && matches!(item, SelectItem::UnnamedExpr(_)) {
                    if let SelectItem::UnnamedExpr(expr) =
                        std::mem::replace(item, SelectItem::UnnamedExpr(Expr::Value(placeholder())))
                    {
                        *item = SelectItem::ExprWithAlias { expr, alias: Ident::with_quote('"', name.clone()) };
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = query.visit(&mut Namer);
}

/// [`name_columns`] of the query's own (outermost) SELECT.
fn name_top_columns(query: &mut Query) -> Option<Vec<String>> {
    let select = match query.body.as_mut() {
        SetExpr::Select(select) => select,
        _ => return None,
    };
    let items = &mut select.projection;
    if items.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) {
        return None;
    }
    let names: Vec<String> = items
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(expr) => postgres_name(expr).unwrap_or_else(|| NO_NAME.to_string()),
            SelectItem::ExprWithAlias { alias, .. } => ident_name(alias),
            _ => NO_NAME.to_string(),
        })
        .collect();
    let mut taken: HashSet<String> = HashSet::new();
    let mut renamed = false;
    for (i, (item, name)) in items.iter_mut().zip(&names).enumerate() {
        let mut plan_name = name.clone();
        if !taken.insert(name.clone()) {
            // Two columns of one name: a unique one inside the plan.
            renamed = true;
            plan_name = (i..).map(|n| format!("{name}#{n}")).find(|n| !taken.contains(n)).expect("a free name");
            taken.insert(plan_name.clone());
        }
        let alias = Ident::with_quote('"', plan_name);
        *item = match std::mem::replace(item, SelectItem::UnnamedExpr(Expr::Value(placeholder()))) {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                SelectItem::ExprWithAlias { expr, alias }
            }
            other => other,
        };
    }
    renamed.then_some(names)
}

fn placeholder() -> datafusion::sql::sqlparser::ast::ValueWithSpan {
    datafusion::sql::sqlparser::ast::Value::Null.into()
}

/// Refuses two columns of one name (a view's columns are its names), as Postgres does: 42701.
pub fn refuse_repeated(names: &[String]) -> crate::error::Result<()> {
    let Some(twice) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)).map(|(_, n)| n) else {
        return Ok(());
    };
    Err(crate::error::WeirError::new(
        crate::error::SqlState::DUPLICATE_COLUMN,
        format!("column \"{twice}\" specified more than once"),
    )
    .with_hint("Give the columns distinct names with AS."))
}

/// An identifier as a name: as written when quoted, else in lower case.
pub fn ident_name(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The name Postgres gives an unaliased result column computing `expr`, if it has one.
fn postgres_name(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Identifier(ident) => Some(ident_name(ident)),
        Expr::CompoundIdentifier(parts) => parts.last().map(ident_name),
        Expr::Function(f) => {
            let name = f.name.0.last().and_then(|p| p.as_ident()).map(ident_name)?;
            // JSON casts and operators, rewritten to functions when parsed, keep the names
            // Postgres gives the cast (what it casts, else the type) and the operator.
            let cast_named = match name.as_str() {
                "bytea_in" => Some(Some("bytea".to_string())),
                // `jsonb_agg(x)`, planned as the JSON array of an `array_agg`.
                "jsonb_agg_array" | "json_agg_array" => return Some(name.trim_end_matches("_array").to_string()),
                other => super::json_functions::column_name(other),
            };
            match cast_named {
                Some(Some(type_name)) => {
                    // `$1::jsonb` is planned as `jsonb_in($1::text)`: a parameter has no name.
                    let parameter = |e: &&Expr| matches!(e, Expr::Cast { expr, .. } if matches!(**expr, Expr::Value(ref v) if matches!(v.value, datafusion::sql::sqlparser::ast::Value::Placeholder(_))));
                    first_argument(f).filter(|e| !parameter(e)).and_then(postgres_name).or(Some(type_name))
                }
                Some(None) => None,
                None => Some(name),
            }
        }
        Expr::Nested(inner) => postgres_name(inner),
        Expr::Cast { expr, data_type, .. } => postgres_name(expr).or_else(|| Some(type_name(data_type))),
        Expr::TypedString(typed) => Some(type_name(&typed.data_type)),
        Expr::Interval(_) => Some("interval".to_string()),
        Expr::Case { .. } => Some("case".to_string()),
        Expr::Exists { .. } => Some("exists".to_string()),
        Expr::Extract { .. } => Some("extract".to_string()),
        Expr::Substring { .. } => Some("substring".to_string()),
        Expr::Position { .. } => Some("position".to_string()),
        Expr::Trim { .. } => Some("btrim".to_string()),
        Expr::Ceil { .. } => Some("ceil".to_string()),
        Expr::Floor { .. } => Some("floor".to_string()),
        Expr::Subquery(query) => match query.body.as_ref() {
            SetExpr::Select(select) => match select.projection.as_slice() {
                [SelectItem::UnnamedExpr(e)] => postgres_name(e),
                [SelectItem::ExprWithAlias { alias, .. }] => Some(ident_name(alias)),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// The first argument of a call, if it is an expression.
fn first_argument(f: &datafusion::sql::sqlparser::ast::Function) -> Option<&Expr> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    match &f.args {
        FunctionArguments::List(list) => match list.args.first() {
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => Some(e),
            _ => None,
        },
        _ => None,
    }
}

/// A type's Postgres name (`INTEGER` is `int4`, `VARCHAR(10)` is `varchar`).
fn type_name(data_type: &datafusion::sql::sqlparser::ast::DataType) -> String {
    let text = data_type.to_string();
    let base = text.split('(').next().unwrap_or(&text);
    normalize_type_name(base)
}

/// `schema` with the client's column `names`.
pub fn rename(schema: &SchemaRef, names: &[String]) -> SchemaRef {
    let fields: Vec<Field> =
        schema.fields().iter().zip(names).map(|(f, n)| f.as_ref().clone().with_name(n.clone())).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn named(sql: &str) -> (String, Option<Vec<String>>) {
        let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let datafusion::sql::sqlparser::ast::Statement::Query(query) = &mut statements[0] else { panic!() };
        let names = name_columns(query);
        (query.to_string(), names)
    }

    #[test]
    fn unaliased_columns_get_postgres_names_and_duplicates_unique_ones_in_the_plan() {
        let (sql, names) =
            named("SELECT count(*), sum(t.v), t.V, 1, NULL::int, x::text, CASE WHEN true THEN 1 END FROM t");
        assert_eq!(
            sql,
            "SELECT count(*) AS \"count\", sum(t.v) AS \"sum\", t.V AS \"v\", 1 AS \"?column?\", NULL::INT AS \"int4\", \
             x::TEXT AS \"x\", CASE WHEN true THEN 1 END AS \"case\" FROM t"
        );
        assert_eq!(names, None);
        let (sql, names) = named("SELECT 1 AS a, 2 AS a, current_schema(), current_schema");
        assert_eq!(sql, "SELECT 1 AS \"a\", 2 AS \"a#1\", current_schema() AS \"current_schema\", current_schema AS \"current_schema#3\"");
        assert_eq!(names.unwrap(), vec!["a", "a", "current_schema", "current_schema"]);
        assert_eq!(named("SELECT *, 1 FROM t").1, None);
        assert_eq!(named("SELECT \"Mixed\" FROM t").0, "SELECT \"Mixed\" AS \"Mixed\" FROM t");
    }

    #[test]
    fn inner_queries_and_union_branches_get_postgres_names_where_unique() {
        assert_eq!(
            named("SELECT x.count FROM (SELECT count(*), sum(v), max(v), max(w) FROM t) x").0,
            "SELECT x.count AS \"count\" FROM (SELECT count(*) AS \"count\", sum(v) AS \"sum\", max(v), max(w) FROM t) x"
        );
        assert_eq!(
            named("WITH c AS (SELECT upper(n) FROM t) SELECT * FROM c").0,
            "WITH c AS (SELECT upper(n) AS \"upper\" FROM t) SELECT * FROM c"
        );
        assert_eq!(
            named("SELECT count(*) FROM a UNION ALL SELECT count(*) FROM b").0,
            "SELECT count(*) AS \"count\" FROM a UNION ALL SELECT count(*) AS \"count\" FROM b"
        );
        assert_eq!(named("SELECT * FROM (SELECT *, 1 FROM t) s").0, "SELECT * FROM (SELECT *, 1 FROM t) s");
    }
}
