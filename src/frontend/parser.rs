//! Statement text to sqlparser ASTs.
//!
//! Weir speaks PostgreSQL's dialect, parsed by [`super::dialect`] (whose parse time stays in
//! proportion to the text; a statement past its budget is 54001). `datafusion-pg-catalog`'s
//! compatibility parser's rules then rewrite the Postgres-only forms that catalog queries from
//! psql, JDBC and BI tools use (`'t'::regclass`, `OPERATOR(pg_catalog.~)`, `COLLATE`, ...) into
//! SQL DataFusion plans, and a catalog query that names system tables goes through the
//! compatibility parser itself, which replaces some tools' queries whole; `ast_rewrites`
//! rewrites the rest, one rewrite per file. Syntax errors become SQLSTATE 42601 with the
//! character position Postgres would report.
//!
//! One of the compatibility parser's rewrites blanks a correlated subquery in a select list to
//! NULL (and stamps `LIMIT 1` on an uncorrelated one), so that tools' catalog queries plan. On a
//! query over the user's relations that is a wrong answer (`SELECT k, (SELECT name FROM n WHERE
//! n.id = t.n_id) FROM t` was all NULLs), so a statement with a subquery that reads no system
//! catalog is parsed by sqlparser and given every other rewrite of the compatibility parser
//! ([`user_query_rules`]); its subqueries are planned by DataFusion (decorrelated as joins,
//! `frontend::single_row` making an unaggregated one return at most one row).

use datafusion::sql::sqlparser::ast;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use datafusion_pg_catalog::sql::rules::SqlStatementRewriteRule;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use super::access_statement::{self, AccessStatement};
use super::clauses::{self, StreamingClauses};
use super::dialect::{self, ParseFailure};
use super::sink_statement::{self, SinkStatement};
use crate::error::{Result, WeirError};

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
    /// Roles and privileges: `CREATE ROLE`, `GRANT`, `SET ROLE`, ...
    Access(AccessStatement),
    /// `EXPLAIN ANALYZE MATERIALIZED VIEW name`: a running view's operators with what they have
    /// done.
    ExplainAnalyze(String),
}

impl std::fmt::Display for Statement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Statement::Sql(s) => write!(f, "{s}"),
            Statement::Flush => f.write_str("FLUSH"),
            Statement::Streaming(s, c) => write!(f, "{s} {}", c.view_suffix()),
            Statement::Sink(s) => write!(f, "{s}"),
            Statement::Access(s) => write!(f, "{s}"),
            Statement::ExplainAnalyze(name) => write!(f, "EXPLAIN ANALYZE MATERIALIZED VIEW {name}"),
        }
    }
}

/// Texts [`SqlParser::parse`] keeps the statements of, at most.
const PARSED_KEPT: usize = 1024;
/// The longest text whose statements are kept.
const PARSED_TEXT_MAX: usize = 8192;

pub struct SqlParser {
    inner: PostgresCompatibilityParser,
    /// Statements parsed before, by their text (a dashboard's and a driver's statements come
    /// again and again: each `Parse` of an unnamed statement, each lifted simple query);
    /// started again when [`PARSED_KEPT`] texts are kept.
    parsed: std::sync::Mutex<std::collections::HashMap<String, Vec<Statement>>>,
    /// The table functions' names, when known: function calls in FROM are then read as
    /// Postgres reads them (`ast_rewrites::functions_in_from`).
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
        SqlParser { inner: PostgresCompatibilityParser::new(), parsed: Default::default(), table_functions: None }
    }

    /// A parser that reads function calls in FROM as Postgres does, knowing which names are
    /// table functions (`table_functions`, lower case; see `ast_rewrites::functions_in_from`).
    pub fn with_table_functions(table_functions: std::collections::HashSet<String>) -> Self {
        SqlParser {
            inner: PostgresCompatibilityParser::new(),
            parsed: Default::default(),
            table_functions: Some(table_functions),
        }
    }

    /// Parses one or more `;`-separated statements. A text parsed before (up to
    /// [`PARSED_TEXT_MAX`] bytes) is not parsed again: parsing depends on the text alone.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        if sql.len() > PARSED_TEXT_MAX {
            return self.parse_text(sql);
        }
        if let Some(statements) = self.parsed.lock().expect("parse cache").get(sql) {
            return Ok(statements.clone());
        }
        let statements = self.parse_text(sql)?;
        let mut parsed = self.parsed.lock().expect("parse cache");
        if parsed.len() >= PARSED_KEPT {
            parsed.clear();
        }
        parsed.insert(sql.to_string(), statements.clone());
        Ok(statements)
    }

    fn parse_text(&self, sql: &str) -> Result<Vec<Statement>> {
        let streaming =
            clauses::may_contain(sql) || sink_statement::may_be_one(sql) || access_statement::may_be_one(sql);
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
                Piece::ExplainAnalyze(name) => Extracted::ExplainAnalyze(name.clone()),
                Piece::Sql(text) => match sink_statement::parse(text)? {
                    Some(sink) => Extracted::Sink(sink),
                    None => {
                        match access_statement::may_be_one(text).then(|| access_statement::parse(text)).transpose()? {
                            Some(Some(access)) => Extracted::Access(access),
                            _ => Extracted::Sql(clauses::extract(text)?),
                        }
                    }
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
                Extracted::ExplainAnalyze(name) => out.push(Statement::ExplainAnalyze(name)),
                Extracted::Sink(sink) => out.push(Statement::Sink(sink)),
                Extracted::Access(access) => out.push(Statement::Access(access)),
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
        let sql = show_create_spelling(sql);
        let sql: &str = &sql;
        // `FOR SYSTEM_TIME AS OF PROCTIME()` is not PostgreSQL's: out of the text, back into the AST.
        let (sql, lookups) = match super::system_time::strip(sql)? {
            Some((rest, clauses)) => (std::borrow::Cow::Owned(rest), Some(clauses)),
            None => (std::borrow::Cow::Borrowed(sql), None),
        };
        let sql: &str = &sql;
        let rollback = abort_as_rollback(sql);
        let sql: &str = rollback.as_deref().unwrap_or(sql);
        // Weir's dialect first: its parse takes time in proportion to the text (`dialect`).
        let (parsed, steps) = match dialect::parse_counting(sql) {
            Ok(parsed) => parsed,
            Err(ParseFailure::TooComplex) => return Err(dialect::too_complex()),
            Err(ParseFailure::Syntax(e)) => return Err(syntax_error(sql, e)),
        };
        let catalog = reads_system_catalog(sql);
        let mut statements = if keeps_subqueries(sql, catalog) {
            let rules = user_query_rules();
            parsed.into_iter().map(|s| rules.iter().fold(s, |s, rule| rule.rewrite(s))).collect()
        } else if catalog
            && sql.len() <= COMPATIBILITY_TEXT_MAX
            && steps <= sql.len() + 1000
            && dialect::call_depth(&parsed) <= COMPATIBILITY_CALL_DEPTH
        {
            // A tool's catalog query, which the compatibility parser may replace whole. It
            // parses with PostgreSQL's dialect, whose time grows sixfold a level of calls: only
            // short, shallow statements that took few steps in ours go there.
            self.inner.parse(sql).map_err(|e| syntax_error(sql, e))?
        } else {
            parsed.into_iter().map(|s| self.inner.rewrite(s)).collect()
        };
        for statement in &mut statements {
            super::ast_rewrites::rewrite(statement, self.table_functions.as_ref())?;
        }
        if let Some(clauses) = lookups {
            super::system_time::annotate(&mut statements, clauses)?;
        }
        Ok(statements)
    }
}

/// Whether `sql` has a subquery and reads no system catalog (`catalog`, from
/// [`reads_system_catalog`]): such a statement keeps its select-list subqueries (see the
/// module's doc).
fn keeps_subqueries(sql: &str, catalog: bool) -> bool {
    if catalog {
        return false;
    }
    let compact: String = sql.to_ascii_lowercase().split_whitespace().collect();
    compact.contains("(select") || compact.contains("(with")
}

/// Whether `sql` names a system catalog (`pg_*`, `information_schema`) or has a `::reg*` cast
/// (which the compatibility parser turns into a pg_class lookup): the statements tools send.
fn reads_system_catalog(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    // A name starting `pg_` (`pg_class`, `pg_catalog.x`), not `avg_pg_rate`.
    let names_pg = lower
        .match_indices("pg_")
        .any(|(at, _)| !lower[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_'));
    names_pg || lower.contains("information_schema") || lower.split_whitespace().collect::<String>().contains("::reg")
}

/// Catalog queries with calls nested deeper than this, or longer than
/// [`COMPATIBILITY_TEXT_MAX`], are not given to the compatibility parser (they are parsed by
/// Weir's and rewritten by the same rules; the whole queries it replaces nest four deep at most
/// and are a few kilobytes).
const COMPATIBILITY_CALL_DEPTH: usize = 4;
const COMPATIBILITY_TEXT_MAX: usize = 8192;

/// `sql` with `ABORT` starting a statement spelled `ROLLBACK` (its synonym in PostgreSQL,
/// which sqlparser does not parse), or None when no statement starts with it. The word is
/// replaced in the text itself: the rest, literals included, stays as written.
fn abort_as_rollback(sql: &str) -> Option<String> {
    // Tokenized only when the word is there at all: every parse passes here.
    if !sql.as_bytes().windows(5).any(|w| w.eq_ignore_ascii_case(b"abort")) {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).with_unescape(false).tokenize_with_location().ok()?;
    // Where each line starts, in bytes.
    let lines: Vec<usize> = std::iter::once(0).chain(sql.match_indices('\n').map(|(at, _)| at + 1)).collect();
    let byte_at = |line: u64, column: u64| -> Option<usize> {
        let start = *lines.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let column = usize::try_from(column).ok()?.checked_sub(1)?;
        sql[start..].char_indices().nth(column).map(|(at, _)| start + at)
    };
    let mut starts = true;
    let mut aborts = Vec::new();
    for token in &tokens {
        match &token.token {
            Token::Whitespace(_) => {}
            Token::Word(w) if starts && w.quote_style.is_none() && w.value.eq_ignore_ascii_case("abort") => {
                aborts.push(byte_at(token.span.start.line, token.span.start.column)?);
                starts = false;
            }
            Token::SemiColon => starts = true,
            _ => starts = false,
        }
    }
    if aborts.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(sql.len() + 3 * aborts.len());
    let mut copied = 0;
    for at in aborts {
        out.push_str(&sql[copied..at]);
        out.push_str("ROLLBACK");
        copied = at + "abort".len();
    }
    out.push_str(&sql[copied..]);
    Some(out)
}

/// The compatibility parser's statement rewrites (the order of `PostgresCompatibilityParser::new`
/// in datafusion-pg-catalog 0.19, pinned) but for `RemoveSubqueryFromProjection`.
fn user_query_rules() -> &'static [std::sync::Arc<dyn SqlStatementRewriteRule>] {
    use datafusion_pg_catalog::sql::rules::*;
    use std::sync::Arc;
    static RULES: std::sync::OnceLock<Vec<Arc<dyn SqlStatementRewriteRule>>> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        vec![
            Arc::new(AliasDuplicatedProjectionRewrite),
            Arc::new(ResolveUnqualifiedIdentifier),
            Arc::new(RewriteArrayAnyAllOperation),
            Arc::new(PrependUnqualifiedPgTableName),
            Arc::new(StripCallableQualifier),
            Arc::new(FixArrayLiteral),
            Arc::new(CurrentUserVariableToSessionUserFunctionCall),
            Arc::new(StripCollate),
            Arc::new(RewritePgCatalogOperator),
            Arc::new(RewriteRegCastToSubquery::new()),
            Arc::new(FixVersionColumnName),
        ]
    })
}

/// `SHOW CREATE MATERIALIZED VIEW name` and `SHOW CREATE SOURCE name` (RisingWave's and
/// Materialize's spellings) as sqlparser's `SHOW CREATE VIEW` and `SHOW CREATE TABLE`: a source
/// is a table fed by a connector, and SHOW CREATE VIEW answers for materialized views too.
fn show_create_spelling(sql: &str) -> std::borrow::Cow<'_, str> {
    static SPELLING: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let spelling = SPELLING
        .get_or_init(|| regex::Regex::new(r"(?i)^(\s*SHOW\s+CREATE\s+)(MATERIALIZED\s+VIEW|SOURCE)\b").expect("valid"));
    spelling.replace(sql, |c: &regex::Captures<'_>| {
        let object = if c[2].eq_ignore_ascii_case("source") { "TABLE" } else { "VIEW" };
        format!("{}{object}", &c[1])
    })
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

enum Piece<'a> {
    Sql(&'a str),
    Flush,
    ExplainAnalyze(String),
}

/// A piece as parsed: FLUSH, a sink statement, or SQL with its streaming clauses taken out.
enum Extracted {
    Flush,
    ExplainAnalyze(String),
    Sink(SinkStatement),
    Access(AccessStatement),
    Sql((String, StreamingClauses)),
}

/// The statement of Weir's own that `words` (a statement's tokens) are, if any: `FLUSH`, or
/// `EXPLAIN ANALYZE MATERIALIZED VIEW name` (the name as written, quotes and schema included).
fn weir_statement<'a>(words: &[String]) -> Option<Piece<'a>> {
    let is = |i: usize, word: &str| words.get(i).is_some_and(|w| w.eq_ignore_ascii_case(word));
    if words.len() == 1 && is(0, "flush") {
        return Some(Piece::Flush);
    }
    if words.len() > 4 && is(0, "explain") && is(1, "analyze") && is(2, "materialized") && is(3, "view") {
        return Some(Piece::ExplainAnalyze(words[4..].concat()));
    }
    None
}

/// Splits `sql` at top-level semicolons when one of the statements is Weir's own (`FLUSH`,
/// `EXPLAIN ANALYZE MATERIALIZED VIEW`) or `always`; otherwise returns it whole as SQL.
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
                let own = weir_statement(&words);
                any_flush |= own.is_some();
                pieces.push(own.unwrap_or(Piece::Sql(&sql[start..end])));
                start = end + 1;
                words.clear();
            }
            Token::Whitespace(_) => {}
            other => words.push(other.to_string()),
        }
    }
    if !words.is_empty() {
        let own = weir_statement(&words);
        any_flush |= own.is_some();
        pieces.push(own.unwrap_or(Piece::Sql(&sql[start..])));
    }
    if any_flush || always {
        pieces.retain(|p| !matches!(p, Piece::Sql(s) if s.trim().is_empty()));
        pieces
    } else {
        whole
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
    fn abort_is_rollback_and_a_runaway_parse_is_too_complex() {
        let p = SqlParser::new();
        let parsed = p.parse("BEGIN; abort; SELECT abort, 'O''Brien', E'a\\'b' FROM t").unwrap();
        assert_eq!(parsed[1].to_string(), "ROLLBACK");
        // The rest of the text as written: quotes doubled or escaped stay so.
        assert_eq!(parsed[2].to_string(), "SELECT abort, 'O''Brien', E'a\\'b' FROM t");
        let err = p.parse(&format!("SELECT {}", "CAST((f(".repeat(40))).unwrap_err();
        assert_eq!(err.state, SqlState::STATEMENT_TOO_COMPLEX, "{err:?}");
        // Catalog queries with deep calls skip the compatibility parser, rewritten all the same.
        let deep = format!("SELECT {}relname{} FROM pg_catalog.pg_class", "upper(".repeat(30), ")".repeat(30));
        assert!(p.parse(&deep).is_ok());
    }

    #[test]
    fn several_statements() {
        assert_eq!(SqlParser::new().parse("select 1; select 2;").unwrap().len(), 2);
    }
}
