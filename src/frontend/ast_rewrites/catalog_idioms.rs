//! The catalog queries of JDBC, asyncpg and BI tools that DataFusion cannot plan as written,
//! rewritten into equivalents it can. An AST rewrite, run by [`super::rewrite`].

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Whether `expr` makes text: a call of a string function, a `||`, a cast to text.
fn makes_text(expr: &ast::Expr) -> bool {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};
    match expr {
        Expr::Nested(inner) => makes_text(inner),
        Expr::Function(f) => {
            let name = f.name.to_string().to_ascii_lowercase();
            matches!(
                name.trim_start_matches("pg_catalog."),
                "format" | "concat" | "concat_ws" | "quote_ident" | "lower" | "upper"
            )
        }
        Expr::BinaryOp { op: BinaryOperator::StringConcat, .. } => true,
        Expr::Cast { data_type, .. } => {
            matches!(data_type.to_string().to_ascii_lowercase().as_str(), "text" | "varchar")
        }
        _ => false,
    }
}

/// The role whose memberships `ARRAY(SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b ON
/// m.roleid = b.oid WHERE m.member = <role>)` lists (psql's `\du`), as SQL.
fn memberships_of(f: &ast::Function) -> Option<String> {
    let ast::FunctionArguments::Subquery(query) = &f.args else { return None };
    let ast::SetExpr::Select(select) = query.body.as_ref() else { return None };
    let from = select.from.first()?.to_string().to_ascii_lowercase();
    if !(from.contains("pg_auth_members") && from.contains("pg_roles")) || select.projection.len() != 1 {
        return None;
    }
    let ast::Expr::BinaryOp { left, op: ast::BinaryOperator::Eq, right } = select.selection.as_ref()? else {
        return None;
    };
    left.to_string().to_ascii_lowercase().ends_with(".member").then(|| right.to_string())
}

/// Postgres idioms of catalog queries that DataFusion cannot plan, in forms it can:
/// - psql's `\du` array of a role's memberships becomes `weir_role_memberships(oid)`;
/// - the set-returning `information_schema._pg_expandarray(a)` (JDBC key queries) becomes
///   `unnest(weir_pg_expandarray(a))`, whose rows are the same `(x, n)` records;
/// - a correlated scalar subquery over `pg_catalog` without an aggregate (JDBC's
///   `getTypeInfo`), which DataFusion requires to be aggregated, gets `max(...)` around its one
///   column: the subqueries select by OID, so they yield at most one row and `max` is that row;
/// - `(record).field` becomes `(record)['field']`, the form DataFusion reads;
/// - asyncpg's domain and composite lookups become typed NULLs ([`domain_or_composite_lookup`]);
/// - `pg_get_viewdef(oid)` becomes the view's query from `pg_views`;
/// - `information_schema.columns` in a UNION with a branch listing materialized views' columns
///   from `pg_attribute` itself (Metabase's field sync: PostgreSQL's information_schema leaves
///   materialized views out, Weir's lists them for Grafana's pickers) leaves them out there, so
///   each column comes once ([`columns_without_materialized_views`]);
/// - a function looked up by name, `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'f')`
///   (how the compatibility parser expands `'f'::regproc`), becomes `'f'`: this pg_catalog
///   names functions in `pg_type.typinput` and the like rather than numbering them.
pub fn rewrite_catalog_idioms(statement: &mut ast::Statement) {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions_mut, AccessExpr, Expr, Function, FunctionArguments, Ident, ObjectName, SelectItem, SetExpr,
        Subscript, Value,
    };
    use std::ops::ControlFlow;
    columns_without_materialized_views(statement);
    let parse = |text: String| crate::frontend::dialect::parse_expr(&text).ok();
    let _ = visit_expressions_mut(statement, |expr| {
        let name = match expr {
            Expr::Function(f) => f.name.to_string().to_ascii_lowercase(),
            _ => String::new(),
        };
        let single_arg = match expr {
            Expr::Function(f) => match &f.args {
                FunctionArguments::List(list) if !list.args.is_empty() => Some(list.args[0].to_string()),
                _ => None,
            },
            _ => None,
        };
        match expr {
            Expr::Function(f) if name == "array" && memberships_of(f).is_some() => {
                // psql's `\du`: the roles a role is a member of, as an array.
                let role = memberships_of(f).expect("checked");
                if let Some(e) = parse(format!("weir_role_memberships({role})")) {
                    *expr = e;
                }
            }
            Expr::Case { .. } if domain_or_composite_lookup(expr).is_some() => {
                let typed_null = domain_or_composite_lookup(expr).expect("checked");
                if let Some(e) = parse(typed_null.to_string()) {
                    *expr = e;
                }
            }
            Expr::Function(_) if name.ends_with("generate_subscripts") && single_arg.is_some() => {
                // The subscripts of a one-dimensional array, as rows next to unnest(array).
                let array = single_arg.expect("checked");
                if let Some(e) = parse(format!("unnest(range(1, CAST(cardinality({array}) AS BIGINT) + 1))")) {
                    *expr = e;
                }
            }
            Expr::Function(_)
                if name.ends_with("pg_table_is_visible")
                    && single_arg.as_deref().is_some_and(|a| a.to_ascii_lowercase().ends_with(".oid")) =>
            {
                // Visible = in a schema of the search path.
                let arg = single_arg.expect("checked");
                let namespace = format!("{}.relnamespace", &arg[..arg.len() - 4]);
                if let Some(e) = parse(format!("{namespace} IN (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname IN ('public', 'pg_catalog'))")) {
                    *expr = e;
                }
            }
            Expr::Function(_) if name.ends_with("pg_get_viewdef") && single_arg.is_some() => {
                // A view's query, by the view's oid (pg_views has it by name).
                let oid = single_arg.expect("checked");
                if let Some(e) = parse(format!(
                    "(SELECT max(v.definition) FROM pg_catalog.pg_views v JOIN pg_catalog.pg_class c \
                     ON c.relname = v.viewname WHERE c.oid = {oid})"
                )) {
                    *expr = e;
                }
            }
            Expr::Like { pattern, escape_char, .. } | Expr::ILike { pattern, escape_char, .. }
                if escape_char.as_ref().is_some_and(|c| c.to_string() != "'\\\\'" && c.to_string() != "'\\'") =>
            {
                // DataFusion escapes with a backslash only: translate the pattern.
                let c = escape_char.take().expect("checked");
                if let Some(e) = parse(format!("weir_like_escape({pattern}, {c})")) {
                    **pattern = e;
                }
            }
            Expr::Function(f) if name.ends_with("_pg_expandarray") => {
                let mut inner = f.clone();
                inner.name = ObjectName::from(vec![Ident::new("weir_pg_expandarray")]);
                // Its argument (an int2vector, an array here) as text `1 2`.
                if let (FunctionArguments::List(list), Some(arg)) = (&mut inner.args, single_arg.as_deref()) {
                    if let Some(e) = parse(format!("array_to_string({arg}, ' ')")) {
                        list.args = vec![datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(
                            datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(e),
                        )];
                    }
                }
                let mut outer: Function = f.clone();
                outer.name = ObjectName::from(vec![Ident::new("unnest")]);
                if let FunctionArguments::List(list) = &mut outer.args {
                    list.args = vec![datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(
                        datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(Expr::Function(inner)),
                    )];
                }
                *expr = Expr::Function(outer);
            }
            // A relation's name made by an expression, cast to regclass (Metabase's
            // `CAST(FORMAT('%I.%I', schema, table) AS REGCLASS)`): looked up by `weir_regclass`.
            // (A literal name is looked up by the compatibility parser; an oid cast to regclass
            // stays a number.)
            Expr::Cast { expr: inner, data_type, .. }
                if data_type.to_string().eq_ignore_ascii_case("regclass") && makes_text(inner) =>
            {
                if let Some(e) = parse(format!("weir_regclass({inner})")) {
                    *expr = e;
                }
            }
            // `(unnest(x)).n` is a field of a record; `con.conkey[1]` is a column of a table.
            Expr::CompoundFieldAccess { root, access_chain }
                if !matches!(root.as_ref(), Expr::Identifier(_) | Expr::CompoundIdentifier(_)) =>
            {
                for access in access_chain.iter_mut() {
                    if let AccessExpr::Dot(Expr::Identifier(field)) = access {
                        let name =
                            if field.quote_style.is_some() { field.value.clone() } else { field.value.to_lowercase() };
                        *access = AccessExpr::Subscript(Subscript::Index {
                            index: Expr::value(Value::SingleQuotedString(name)),
                        });
                    }
                }
            }
            Expr::Subquery(query) if proc_lookup(query).is_some() => {
                let name = proc_lookup(query).expect("checked");
                *expr = Expr::value(Value::SingleQuotedString(name));
            }
            Expr::Subquery(query) => {
                if let SetExpr::Select(select) = query.body.as_mut() {
                    let from =
                        select.from.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" ").to_ascii_lowercase();
                    let grouped = !matches!(&select.group_by, datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty());
                    if from.contains("pg_catalog.") && !grouped && select.projection.len() == 1 {
                        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } =
                            &mut select.projection[0]
                        {
                            let text = e.to_string().to_ascii_lowercase();
                            let aggregated = [
                                "count(",
                                "max(",
                                "min(",
                                "sum(",
                                "avg(",
                                "array_agg(",
                                "string_agg(",
                                "bool_and(",
                                "bool_or(",
                            ]
                            .iter()
                            .any(|a| text.contains(a));
                            if !aggregated {
                                let wrapped = format!("max({e})");
                                if let Ok(parsed) = crate::frontend::dialect::parse_expr(&wrapped) {
                                    *e = parsed;
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

/// In a `UNION` one branch of which lists materialized views' columns from `pg_attribute`
/// (`relkind = 'm'`), `information_schema.columns` in the other branches as
/// `(SELECT * FROM information_schema.columns WHERE table_name NOT IN (materialized views)) alias`.
fn columns_without_materialized_views(statement: &mut ast::Statement) {
    use datafusion::sql::sqlparser::ast::{SetExpr, TableFactor, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    const COLUMNS: &str = "(SELECT * FROM information_schema.columns WHERE table_name NOT IN \
        (SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'm'))";
    fn lists_materialized_columns(body: &SetExpr) -> bool {
        let text = body.to_string().to_ascii_lowercase().replace('"', "");
        text.contains("pg_attribute") && text.contains("relkind = 'm'")
    }
    /// Whether a leaf of the set operation `body` lists materialized views' columns.
    fn any_lists(body: &SetExpr) -> bool {
        match body {
            SetExpr::SetOperation { left, right, .. } => any_lists(left) || any_lists(right),
            leaf => lists_materialized_columns(leaf),
        }
    }
    /// Puts `columns` in place of information_schema.columns in every leaf SELECT of `body`.
    fn replace_columns(body: &mut SetExpr, columns: &ast::Query) {
        match body {
            SetExpr::SetOperation { left, right, .. } => {
                replace_columns(left, columns);
                replace_columns(right, columns);
            }
            SetExpr::Select(select) => {
                for table in select.from.iter_mut() {
                    let TableFactor::Table { name, alias, .. } = &table.relation else { continue };
                    if name.to_string().to_ascii_lowercase().replace('"', "") == "information_schema.columns" {
                        let alias = alias.clone();
                        let subquery = Box::new(columns.clone());
                        table.relation = TableFactor::Derived { lateral: false, subquery, alias, sample: None };
                    }
                }
            }
            _ => {}
        }
    }
    struct Rewrite;
    impl VisitorMut for Rewrite {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
            if !matches!(query.body.as_ref(), SetExpr::SetOperation { .. }) || !any_lists(&query.body) {
                return ControlFlow::Continue(());
            }
            if let Ok(columns) =
                Parser::new(&PostgreSqlDialect {}).try_with_sql(COLUMNS).and_then(|mut p| p.parse_query())
            {
                replace_columns(&mut query.body, &columns);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewrite);
}

/// `CASE WHEN t.typtype = 'd' THEN (SELECT ...) ELSE NULL END` (and `'c'`) is how asyncpg's
/// type introspection finds a domain's base type or a composite's fields, with correlated
/// subqueries DataFusion cannot plan. Weir never sends domain or composite values, so the
/// answer is NULL for every type a client asks about: returns that NULL, typed as asyncpg
/// decodes without further introspection (an `oid` base type as int4, field lists as text[]).
fn domain_or_composite_lookup(expr: &ast::Expr) -> Option<&'static str> {
    let text = expr.to_string();
    if !text.starts_with("CASE WHEN ") || !text.ends_with("ELSE NULL END") {
        return None;
    }
    if text.contains(".typtype = 'd' THEN (") {
        Some("CAST(NULL AS INT)")
    } else if text.contains(".typtype = 'c' THEN (") {
        Some("CAST(NULL AS TEXT[])")
    } else {
        None
    }
}

/// `f` if `query` is `SELECT [max(]oid[)] FROM pg_catalog.pg_proc WHERE proname = '[pg_catalog.]f'`.
fn proc_lookup(query: &datafusion::sql::sqlparser::ast::Query) -> Option<String> {
    let text = query.to_string();
    let rest = text
        .strip_prefix("SELECT oid FROM pg_catalog.pg_proc WHERE proname = '")
        .or_else(|| text.strip_prefix("SELECT max(oid) FROM pg_catalog.pg_proc WHERE proname = '"))?;
    let name = rest.strip_suffix('\'')?;
    (!name.contains('\'')).then(|| name.trim_start_matches("pg_catalog.").to_string())
}
