//! Statement text to sqlparser ASTs.
//!
//! Weir speaks PostgreSQL's dialect. Parsing goes through `datafusion-pg-catalog`'s
//! compatibility parser, which also rewrites the Postgres-only forms that catalog queries from
//! psql, JDBC and BI tools use (`'t'::regclass`, `OPERATOR(pg_catalog.~)`, `COLLATE`, ...) into
//! SQL DataFusion plans; [`rewrite_catalog_idioms`] adds two more that JDBC needs. Syntax errors
//! become SQLSTATE 42601 with the character position Postgres would report.

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use super::clauses::{self, StreamingClauses};
use super::sink_statement::{self, SinkStatement};
use crate::error::{Result, SqlState, WeirError};

/// A parsed statement: Postgres SQL, or one of Weir's own.
#[derive(Debug, Clone)]
pub enum Statement {
    Sql(ast::Statement),
    /// `FLUSH`: wait until every change made so far is visible in every view.
    Flush,
    /// `CREATE TABLE` or `CREATE MATERIALIZED VIEW` with Weir's streaming clauses
    /// (`WATERMARK FOR`, `APPEND ONLY`, `EMIT ON WINDOW CLOSE`, ...), taken out by [`clauses`].
    Streaming(ast::Statement, StreamingClauses),
    /// `CREATE SINK`, `DROP SINK`, `SHOW SINKS`.
    Sink(SinkStatement),
}

impl std::fmt::Display for Statement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Statement::Sql(s) => write!(f, "{s}"),
            Statement::Flush => f.write_str("FLUSH"),
            Statement::Streaming(s, c) => write!(f, "{s} {}", c.view_suffix()),
            Statement::Sink(s) => write!(f, "{s}"),
        }
    }
}

pub struct SqlParser {
    inner: PostgresCompatibilityParser,
    /// The table functions' names, when known: function calls in FROM are then read as
    /// Postgres reads them ([`functions_in_from`]).
    table_functions: Option<std::collections::HashSet<String>>,
}

impl Default for SqlParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SqlParser {
    /// A parser that leaves function calls in FROM as they are written.
    pub fn new() -> Self {
        SqlParser { inner: PostgresCompatibilityParser::new(), table_functions: None }
    }

    /// A parser that reads function calls in FROM as Postgres does, knowing which names are
    /// table functions (`table_functions`, lower case; see [`functions_in_from`]).
    pub fn with_table_functions(table_functions: std::collections::HashSet<String>) -> Self {
        SqlParser { inner: PostgresCompatibilityParser::new(), table_functions: Some(table_functions) }
    }

    /// Parses one or more `;`-separated statements.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        let streaming = clauses::may_contain(sql) || sink_statement::may_be_one(sql);
        let pieces = split_weir_statements(sql, streaming);
        if pieces.iter().all(|p| matches!(p, Piece::Sql(_))) && !streaming {
            return Ok(self.parse_sql(sql)?.into_iter().map(Statement::Sql).collect());
        }
        // Statement by statement, taking out streaming clauses; when there were none (and no
        // FLUSH), the text is parsed whole as usual.
        let mut extracted = Vec::with_capacity(pieces.len());
        for piece in &pieces {
            extracted.push(match piece {
                Piece::Flush => Extracted::Flush,
                Piece::Sql(text) => match sink_statement::parse(text)? {
                    Some(sink) => Extracted::Sink(sink),
                    None => Extracted::Sql(clauses::extract(text)?),
                },
            });
        }
        let plain = extracted.iter().all(|e| matches!(e, Extracted::Sql((_, found)) if found.is_empty()));
        if plain {
            return Ok(self.parse_sql(sql)?.into_iter().map(Statement::Sql).collect());
        }
        let mut out = Vec::new();
        for piece in extracted {
            match piece {
                Extracted::Flush => out.push(Statement::Flush),
                Extracted::Sink(sink) => out.push(Statement::Sink(sink)),
                Extracted::Sql((rest, found)) => {
                    let mut statements = self.parse_sql(&rest)?;
                    if found.is_empty() {
                        out.extend(statements.into_iter().map(Statement::Sql));
                    } else if statements.len() == 1 {
                        out.push(Statement::Streaming(statements.remove(0), found));
                    } else {
                        return Err(WeirError::syntax("streaming clauses must end a CREATE statement"));
                    }
                }
            }
        }
        Ok(out)
    }

    fn parse_sql(&self, sql: &str) -> Result<Vec<ast::Statement>> {
        let grafana = search_path_membership(sql);
        let sql: &str = grafana.as_deref().unwrap_or(sql);
        // `FOR SYSTEM_TIME AS OF PROCTIME()` is not PostgreSQL's: out of the text, back into the AST.
        let (sql, lookups) = match super::system_time::strip(sql)? {
            Some((rest, clauses)) => (std::borrow::Cow::Owned(rest), Some(clauses)),
            None => (std::borrow::Cow::Borrowed(sql), None),
        };
        let sql: &str = &sql;
        let mut statements = self.inner.parse(sql).map_err(|e| {
            // The compatibility parser's token rewriting drops source locations; sqlparser on
            // the original text reports the same error with its line and column.
            let located = Parser::parse_sql(&PostgreSqlDialect {}, sql).err().unwrap_or(e);
            syntax_error(sql, located)
        })?;
        for statement in &mut statements {
            rewrite_catalog_idioms(statement);
            exists_in_select_lists(statement);
            resolve_relation_names(statement);
            super::interval_text::rewrite_interval_literals(statement);
            super::type_names::rewrite_type_names(statement);
            super::json_functions::rewrite_json_syntax(statement);
            super::bytea_input::rewrite_casts(statement);
            if let Some(table_functions) = &self.table_functions {
                // Not when a stored definition is parsed again: it was stored rewritten.
                super::pg_functions::rewrite_datetime_patterns(statement);
                functions_in_from(statement, table_functions);
                series_in_select_lists(statement)?;
            }
        }
        if let Some(clauses) = lookups {
            super::system_time::annotate(&mut statements, clauses)?;
        }
        Ok(statements)
    }
}

/// Function calls in FROM as Postgres reads them, for what catalog queries of BI tools write
/// (Grafana's table list: `FROM generate_series(...) AS i, string_to_array(...) s`):
/// - a table function of one column with an alias and no column list names its column by the
///   alias (`generate_series(1, 3) AS i` has a column `i`; DataFusion calls it `value`), and
///   `generate_series` without an alias names it `generate_series`;
/// - any other function (not a table function) is a one-row table of its value, its column
///   named by the alias, or the function: `(SELECT f(...) AS s) AS s`.
fn functions_in_from(statement: &mut ast::Statement, table_functions: &std::collections::HashSet<String>) {
    use datafusion::sql::sqlparser::ast::{TableAlias, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    struct Rewrite<'a>(&'a std::collections::HashSet<String>);
    impl VisitorMut for Rewrite<'_> {
        type Break = ();
        fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            let TableFactor::Table {
                name, args: Some(args), alias, with_hints, version, with_ordinality, sample, ..
            } = factor
            else {
                return ControlFlow::Continue(());
            };
            let Some(ident) = name.0.last().and_then(|p| p.as_ident()).cloned() else {
                return ControlFlow::Continue(());
            };
            let function = ident.value.to_ascii_lowercase();
            if self.0.contains(&function) {
                // Unquoted, the name is folded to lower case, as Postgres folds it.
                if let Some(ast::ObjectNamePart::Identifier(written)) = name.0.last_mut() {
                    if written.quote_style.is_none() {
                        written.value = function.clone();
                    }
                }
                let column = |name: &ast::Ident| TableAliasColumnDef { name: name.clone(), data_type: None };
                match alias.as_mut() {
                    Some(alias)
                        if alias.columns.is_empty() && matches!(function.as_str(), "generate_series" | "range") =>
                    {
                        alias.columns = vec![column(&alias.name)];
                    }
                    // Unaliased, Postgres names the table and its column after the function.
                    None if function == "generate_series" => {
                        let name = ast::Ident::new(&function);
                        *alias = Some(TableAlias { explicit: true, columns: vec![column(&name)], name, at: None });
                    }
                    _ => {}
                }
                return ControlFlow::Continue(());
            }
            let plain = with_hints.is_empty()
                && version.is_none()
                && !*with_ordinality
                && sample.is_none()
                && args.settings.as_ref().is_none_or(|s| s.is_empty());
            if !plain {
                return ControlFlow::Continue(());
            }
            // The column is named by the alias, else by the function as written.
            let column = alias.as_ref().map(|a| a.name.clone()).unwrap_or(ident);
            let arguments: Vec<String> = args.args.iter().map(|a| a.to_string()).collect();
            let select = format!("SELECT {name}({}) AS {column}", arguments.join(", "));
            let Ok(mut parsed) = Parser::parse_sql(&PostgreSqlDialect {}, &select) else {
                return ControlFlow::Continue(());
            };
            let Some(ast::Statement::Query(query)) = parsed.pop() else { return ControlFlow::Continue(()) };
            let alias = alias.take().unwrap_or(TableAlias { explicit: true, name: column, columns: vec![], at: None });
            // Not lateral: DataFusion 55 cannot plan a lateral one-row projection that reads the
            // FROM items before it (`FROM t, upper(t.name) AS u`, which Postgres allows), and says
            // so more clearly when the column is simply not found.
            *factor = TableFactor::Derived { lateral: false, subquery: query, alias: Some(alias), sample: None };
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewrite(table_functions));
}

/// `generate_series(...)` as a whole select-list item (or one in brackets or cast) yields one
/// row per value, as in Postgres (DataFusion's scalar `generate_series` is one array): the call
/// becomes `unnest(generate_series(...))`, the item named `generate_series` unless aliased, and
/// an ORDER BY repeating the call orders by that item. In every SELECT of the statement, UNION
/// branches and subqueries included. Anywhere else in a select list, WHERE, GROUP BY, HAVING or
/// ORDER BY it is refused (0A000) rather than read as an array.
fn series_in_select_lists(statement: &mut ast::Statement) -> Result<()> {
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
    fn is_series(expr: &Expr) -> bool {
        call_of(expr, "generate_series").is_some()
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
    /// Wraps the call when `expr` is one, in brackets or cast; whether it did.
    fn wrap_whole(expr: &mut Expr) -> bool {
        match expr {
            Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => wrap_whole(inner),
            e if is_series(e) => {
                let call = std::mem::replace(e, Expr::value(ast::Value::Null));
                *e = unnest(call);
                true
            }
            _ => false,
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
                "generate_series(...) is supported as a whole select-list item or in FROM, not inside an expression, WHERE, GROUP BY, HAVING or ORDER BY",
            )
            .with_hint("write FROM generate_series(...) AS g and use g"));
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
                    if !wrap_whole(expr) {
                        continue;
                    }
                    let name = alias.unwrap_or_else(|| ast::Ident::new("generate_series"));
                    renamed.push((written, name.clone()));
                    wrapped_items.push((position, name.clone()));
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
                if let ([(position, name)], true) = (wrapped_items.as_slice(), select.from.is_empty()) {
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

/// Relation names DataFusion would not find as written: `TUMBLE(...)`, `Hop(...)`,
/// `SESSION(...)` in FROM as the registered table functions (DataFusion looks table functions
/// up by their name as written), and `pg_indexes` in `pg_catalog` (always on the search path;
/// the compatibility parser qualifies only the catalog relations it knows).
fn resolve_relation_names(statement: &mut ast::Statement) {
    use datafusion::sql::sqlparser::ast::{visit_relations_mut, Ident, ObjectNamePart};
    use std::ops::ControlFlow;
    let _ = visit_relations_mut(statement, |name| {
        if let [ObjectNamePart::Identifier(ident)] = name.0.as_mut_slice() {
            let lower = ident.value.to_ascii_lowercase();
            if ident.quote_style.is_none() && matches!(lower.as_str(), "tumble" | "hop" | "session") {
                ident.value = lower;
            } else if ident.quote_style.is_none() && lower == "pg_indexes" {
                name.0.insert(0, ObjectNamePart::Identifier(Ident::new("pg_catalog")));
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// `EXISTS (SELECT ... FROM ... WHERE ...)` in a select list (psql's `\d index` asks whether a
/// constraint is deferrable that way) as `(SELECT count(*) FROM ... WHERE ...) > 0` (`= 0` for
/// NOT EXISTS): the same truth, and DataFusion plans a correlated scalar aggregate in a select
/// list where it plans no EXISTS. Only a subquery whose row count is the count of its FROM and
/// WHERE (no grouping, aggregate, set-returning function, DISTINCT, LIMIT or set operation),
/// and only EXISTS directly in the select item (under NOT, AND/OR, comparisons, CASE, casts),
/// not inside further subqueries, which plan theirs as joins.
fn exists_in_select_lists(statement: &mut ast::Statement) {
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

/// Grafana's "is this schema on the search path" test, `quote_ident(table_schema) IN (SELECT CASE
/// WHEN trim(s[i]) = '"$user"' ... FROM generate_series(...) AS i, string_to_array(...) s)`, as
/// `= ANY(current_schemas(false))`: the same schemas, without a subquery inside CASE, which
/// DataFusion cannot run (the compatibility parser would make it match nothing, and Grafana's
/// table and column pickers would come up empty); `NOT IN (...)` as `<> ALL(...)`. Matched
/// whatever the whitespace and case.
fn search_path_membership(sql: &str) -> Option<String> {
    const SUBQUERY: &str = "IN(SELECTCASEWHENtrim(s[i])='\"$user\"'THENuserELSEtrim(s[i])ENDFROMgenerate_series(\
        array_lower(string_to_array(current_setting('search_path'),','),1),\
        array_upper(string_to_array(current_setting('search_path'),','),1))asi,\
        string_to_array(current_setting('search_path'),',')s)";
    if !sql.contains("current_setting('search_path')") {
        return None;
    }
    // The text without whitespace, each character with its place in `sql`.
    let compact: Vec<(usize, char)> = sql.char_indices().filter(|(_, c)| !c.is_whitespace()).collect();
    let pattern: Vec<char> = SUBQUERY.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = String::with_capacity(sql.len());
    let (mut copied, mut i) = (0, 0);
    while i + pattern.len() <= compact.len() {
        let matches = compact[i..i + pattern.len()].iter().zip(&pattern).all(|((_, a), b)| a.eq_ignore_ascii_case(b));
        if matches {
            // `NOT IN (...)` (Grafana's list of tables off the search path) is `<> ALL(...)`.
            let word = |at: usize| compact[at].1.is_alphanumeric() || compact[at].1 == '_';
            let negated = i >= 3
                && compact[i - 3..i].iter().map(|(_, c)| c).collect::<String>().eq_ignore_ascii_case("NOT")
                && (i == 3 || !word(i - 4));
            let (start, (end, last)) = (compact[if negated { i - 3 } else { i }].0, compact[i + pattern.len() - 1]);
            out.push_str(&sql[copied..start]);
            out.push_str(if negated { "<> ALL(current_schemas(false))" } else { "= ANY(current_schemas(false))" });
            copied = end + last.len_utf8();
            i += pattern.len();
        } else {
            i += 1;
        }
    }
    (copied > 0).then(|| {
        out.push_str(&sql[copied..]);
        out
    })
}

/// Postgres idioms of catalog queries that DataFusion cannot plan, in forms it can:
/// - the set-returning `information_schema._pg_expandarray(a)` (JDBC key queries) becomes
///   `unnest(weir_pg_expandarray(a))`, whose rows are the same `(x, n)` records;
/// - a correlated scalar subquery over `pg_catalog` without an aggregate (JDBC's
///   `getTypeInfo`), which DataFusion requires to be aggregated, gets `max(...)` around its one
///   column: the subqueries select by OID, so they yield at most one row and `max` is that row;
/// - `(record).field` becomes `(record)['field']`, the form DataFusion reads;
/// - asyncpg's domain and composite lookups become typed NULLs ([`domain_or_composite_lookup`]);
/// - `pg_get_viewdef(oid)` becomes the view's query from `pg_views`;
/// - a function looked up by name, `(SELECT oid FROM pg_catalog.pg_proc WHERE proname = 'f')`
///   (how the compatibility parser expands `'f'::regproc`), becomes `'f'`: this pg_catalog
///   names functions in `pg_type.typinput` and the like rather than numbering them.
pub fn rewrite_catalog_idioms(statement: &mut ast::Statement) {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions_mut, AccessExpr, Expr, Function, FunctionArguments, Ident, ObjectName, SelectItem, SetExpr,
        Subscript, Value,
    };
    use std::ops::ControlFlow;
    let parse =
        |text: String| Parser::new(&PostgreSqlDialect {}).try_with_sql(&text).and_then(|mut p| p.parse_expr()).ok();
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
                                if let Ok(parsed) = Parser::new(&PostgreSqlDialect {})
                                    .try_with_sql(&wrapped)
                                    .and_then(|mut p| p.parse_expr())
                                {
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

enum Piece<'a> {
    Sql(&'a str),
    Flush,
}

/// A piece as parsed: FLUSH, a sink statement, or SQL with its streaming clauses taken out.
enum Extracted {
    Flush,
    Sink(SinkStatement),
    Sql((String, StreamingClauses)),
}

/// Splits `sql` at top-level semicolons when one of the statements is Weir's own (`FLUSH`) or
/// `always`; otherwise returns it whole as SQL.
fn split_weir_statements(sql: &str, always: bool) -> Vec<Piece<'_>> {
    let whole = vec![Piece::Sql(sql)];
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        return whole;
    };
    // Byte offsets of statement boundaries (the semicolons).
    let offset = |line: u64, column: u64| -> usize {
        let mut at = 0usize;
        for (i, l) in sql.split_inclusive('\n').enumerate() {
            if i + 1 == line as usize {
                return at + l.char_indices().nth(column.saturating_sub(1) as usize).map(|(b, _)| b).unwrap_or(l.len());
            }
            at += l.len();
        }
        sql.len()
    };
    let mut pieces = Vec::new();
    let mut start = 0usize;
    let mut words: Vec<String> = Vec::new();
    let mut any_flush = false;
    for t in &tokens {
        match &t.token {
            Token::SemiColon => {
                let end = offset(t.span.start.line, t.span.start.column);
                let is_flush = words.len() == 1 && words[0].eq_ignore_ascii_case("flush");
                any_flush |= is_flush;
                pieces.push(if is_flush { Piece::Flush } else { Piece::Sql(&sql[start..end]) });
                start = end + 1;
                words.clear();
            }
            Token::Whitespace(_) => {}
            other => words.push(other.to_string()),
        }
    }
    if !words.is_empty() {
        let is_flush = words.len() == 1 && words[0].eq_ignore_ascii_case("flush");
        any_flush |= is_flush;
        pieces.push(if is_flush { Piece::Flush } else { Piece::Sql(&sql[start..]) });
    }
    if any_flush || always {
        pieces.retain(|p| !matches!(p, Piece::Sql(s) if s.trim().is_empty()));
        pieces
    } else {
        whole
    }
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

/// The SQL type each placeholder is cast to in `statement` (`$1::oid[]` -> `oid[]`), by
/// position; DataFusion plans `oid` as int4, but clients must be told `oid`.
pub fn placeholder_casts(statement: &ast::Statement) -> Vec<(usize, String)> {
    use datafusion::sql::sqlparser::ast::{visit_expressions, Expr, Value};
    use std::ops::ControlFlow;
    let mut found = Vec::new();
    let _ = visit_expressions(statement, |expr| {
        if let Expr::Cast { expr: inner, data_type, .. } = expr {
            if let Expr::Value(v) = inner.as_ref() {
                if let Value::Placeholder(p) = &v.value {
                    if let Ok(n) = p.trim_start_matches('$').parse::<usize>() {
                        found.push((n, data_type.to_string().to_ascii_lowercase()));
                    }
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found
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

fn syntax_error(sql: &str, e: ParserError) -> WeirError {
    let text = match &e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => "statement is nested too deeply".to_string(),
    };
    let (message, position) = split_location(sql, &text);
    let err = WeirError::syntax(format!("syntax error: {message}"));
    match position {
        Some(p) => err.with_position(p),
        None => err,
    }
}

/// sqlparser appends " at Line: L, Column: C"; Postgres reports a 1-based character offset.
fn split_location(sql: &str, text: &str) -> (String, Option<usize>) {
    let Some(at) = text.rfind(" at Line: ") else {
        return (text.to_string(), None);
    };
    let loc = &text[at + " at Line: ".len()..];
    let mut parts = loc.split(", Column: ");
    let line: usize = parts.next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    let column: usize = parts.next().and_then(|c| c.trim().parse().ok()).unwrap_or(0);
    if line == 0 || column == 0 {
        return (text[..at].to_string(), None);
    }
    let mut offset = 0usize;
    for (i, l) in sql.split('\n').enumerate() {
        if i + 1 == line {
            return (text[..at].to_string(), Some(offset + column));
        }
        offset += l.chars().count() + 1;
    }
    (text[..at].to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SqlState;

    #[test]
    fn syntax_errors_carry_sqlstate_and_position() {
        let p = SqlParser::new();
        let err = p.parse("SELECT 1;\nSELEC 2").unwrap_err();
        assert_eq!(err.state, SqlState::SYNTAX_ERROR);
        assert_eq!(err.position, Some(11), "{err:?}");
    }

    #[test]
    fn streaming_clauses_are_taken_out_and_other_text_parses_whole() {
        let p = SqlParser::new();
        let parsed = p
            .parse("CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR ts AS ts) APPEND ONLY; SELECT 'too late'; FLUSH")
            .unwrap();
        assert!(matches!(&parsed[0], Statement::Streaming(_, c) if c.append_only && c.watermark.is_some()));
        assert!(matches!(&parsed[1], Statement::Sql(_)));
        assert!(matches!(&parsed[2], Statement::Flush));
        // Words like "late" in ordinary SQL change nothing, positions included.
        let err = p.parse("SELECT 'late';\nSELEC 2").unwrap_err();
        assert_eq!(err.position, Some(16), "{err:?}");
    }

    #[test]
    fn several_statements() {
        assert_eq!(SqlParser::new().parse("select 1; select 2;").unwrap().len(), 2);
    }
}
