//! Statement text to sqlparser ASTs.
//!
//! Weir speaks PostgreSQL's dialect. Parsing goes through `datafusion-pg-catalog`'s
//! compatibility parser, which also rewrites the Postgres-only forms that catalog queries from
//! psql, JDBC and BI tools use (`'t'::regclass`, `OPERATOR(pg_catalog.~)`, `COLLATE`, ...) into
//! SQL DataFusion plans. Syntax errors become SQLSTATE 42601 with the character position
//! Postgres would report.

use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::error::{Result, WeirError};

pub struct SqlParser {
    inner: PostgresCompatibilityParser,
}

impl Default for SqlParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SqlParser {
    pub fn new() -> Self {
        SqlParser {
            inner: PostgresCompatibilityParser::new(),
        }
    }

    /// Parses one or more `;`-separated statements.
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        self.inner.parse(sql).map_err(|e| {
            // The compatibility parser's token rewriting drops source locations; sqlparser on
            // the original text reports the same error with its line and column.
            let located = Parser::parse_sql(&PostgreSqlDialect {}, sql)
                .err()
                .unwrap_or(e);
            syntax_error(sql, located)
        })
    }
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
    let line: usize = parts
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    let column: usize = parts
        .next()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(0);
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
    fn several_statements() {
        assert_eq!(
            SqlParser::new().parse("select 1; select 2;").unwrap().len(),
            2
        );
    }
}
