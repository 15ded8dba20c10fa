//! Weir's streaming clauses, which Postgres's grammar (and so sqlparser) does not have:
//!
//! ```sql
//! CREATE TABLE bids (..., WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND) APPEND ONLY;
//! CREATE SOURCE bid (p_time AS PROCTIME()) WITH (connector = 'nexmark', ...);
//! CREATE MATERIALIZED VIEW v AS SELECT ...
//!   EMIT ON WINDOW CLOSE ALLOW LATENESS INTERVAL '30' SECOND LATE ROWS TO v_late;
//! ```
//!
//! [`extract`] takes them out of a statement's text, so that the rest parses as ordinary
//! PostgreSQL, and returns them as [`StreamingClauses`]; `Display` writes them back in the
//! canonical form, which is how a view's stored definition keeps them. Clause expressions are
//! kept as SQL text: the handlers plan them with DataFusion against the right schema.

use std::fmt;

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, WeirError};

/// `WATERMARK FOR column AS expression`.
#[derive(Debug, Clone, PartialEq)]
pub struct WatermarkClause {
    pub column: String,
    pub expr: String,
}

/// The streaming clauses found in one statement.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamingClauses {
    pub watermark: Option<WatermarkClause>,
    /// `column [TIMESTAMPTZ] AS PROCTIME()`: the column (left in the column list as a
    /// TIMESTAMPTZ) that each row gets the time it was stored at.
    pub processing_time: Option<String>,
    pub append_only: bool,
    /// `EMIT ON WINDOW CLOSE`.
    pub emit_on_window_close: bool,
    /// The interval of `ALLOW LATENESS INTERVAL ...`, as SQL (`INTERVAL '30' SECOND`).
    pub allow_lateness: Option<String>,
    /// `LATE ROWS TO name`.
    pub late_rows_to: Option<String>,
    /// `CREATE SOURCE ... WITH (connector = '...', ...) [FORMAT f ENCODE e]`: the options (the
    /// statement itself is rewritten to `CREATE TABLE`).
    pub source: Option<ConnectorOptions>,
    /// `CREATE TABLE ... WITH (connector = '...')`: a table fed by a connector (its rows
    /// stored; with a primary key, upserted), where `source` holds the options.
    pub table_with_connector: bool,
    /// `DROP SOURCE` (rewritten to `DROP TABLE`).
    pub drop_source: bool,
}

impl StreamingClauses {
    pub fn is_empty(&self) -> bool {
        *self == StreamingClauses::default()
    }

    /// Whether any clause of a materialized view is present.
    pub fn has_view_clauses(&self) -> bool {
        self.emit_on_window_close || self.allow_lateness.is_some() || self.late_rows_to.is_some()
    }

    /// The view clauses as they are written after the query.
    pub fn view_suffix(&self) -> String {
        let mut parts = Vec::new();
        if self.emit_on_window_close {
            parts.push("EMIT ON WINDOW CLOSE".to_string());
        }
        if let Some(l) = &self.allow_lateness {
            parts.push(format!("ALLOW LATENESS {l}"));
        }
        if let Some(t) = &self.late_rows_to {
            parts.push(format!("LATE ROWS TO {t}"));
        }
        parts.join(" ")
    }
}

impl fmt::Display for WatermarkClause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WATERMARK FOR {} AS {}", self.column, self.expr)
    }
}

fn is_word(t: &Token, keyword: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(keyword))
}

fn text(tokens: &[Token]) -> String {
    tokens.iter().map(|t| t.to_string()).collect::<String>().trim().to_string()
}

/// Whether `sql` may contain a streaming clause (a cheap test before tokenizing).
pub fn may_contain(sql: &str) -> bool {
    let upper = sql.to_ascii_uppercase();
    ["WATERMARK", "PROCTIME", "APPEND", "EMIT", "LATENESS", "LATE", "SOURCE", "CONNECTOR"]
        .iter()
        .any(|k| upper.contains(k))
}

/// Splits the streaming clauses off one statement: the remaining SQL and the clauses.
/// A statement without them comes back unchanged.
pub fn extract(sql: &str) -> Result<(String, StreamingClauses)> {
    let mut clauses = StreamingClauses::default();
    if !may_contain(sql) {
        return Ok((sql.to_string(), clauses));
    }
    // Not unescaped: the tokens are written back as text, and a string must come back as it
    // was written (`'O''Brien'`, not `'O'Brien'`).
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).with_unescape(false).tokenize() else {
        return Ok((sql.to_string(), clauses));
    };
    let words: Vec<usize> =
        tokens.iter().enumerate().filter(|(_, t)| !matches!(t, Token::Whitespace(_))).map(|(i, _)| i).collect();
    let word = |n: usize, k: &str| words.get(n).is_some_and(|&i| is_word(&tokens[i], k));
    // `EXPLAIN CREATE MATERIALIZED VIEW ...` too.
    let first = if word(0, "EXPLAIN") { 1 } else { 0 };
    let is_source = word(first, "CREATE") && word(first + 1, "SOURCE");
    let is_table = word(first, "CREATE") && (word(first + 1, "TABLE") || is_source);
    let is_view = word(first, "CREATE") && word(first + 1, "MATERIALIZED") && word(first + 2, "VIEW");
    // `SOURCE` is written as `TABLE`.
    let mut table_at = None;
    if word(0, "DROP") && word(1, "SOURCE") {
        clauses.drop_source = true;
        let text =
            tokens.iter().enumerate().map(|(i, t)| if i == words[1] { "TABLE".to_string() } else { t.to_string() });
        return Ok((text.collect(), clauses));
    }
    if !is_table && !is_view {
        return Ok((sql.to_string(), clauses));
    }
    let mut keep = vec![true; tokens.len()];
    // Text to put before a token (the empty column list of a source declared without one, the
    // type of a processing-time column declared without one).
    let mut insert_before: Vec<(usize, &str)> = Vec::new();
    if is_source {
        table_at = Some(words[first + 1]);
        let (options, with_at, columns_given) = source_options(&tokens, &words, &mut keep)?;
        if !columns_given {
            insert_before.push((with_at, "() "));
        }
        clauses.source = Some(options);
    } else if is_table && has_connector_options(&tokens, &words) {
        let (options, _, _) = source_options(&tokens, &words, &mut keep)?;
        clauses.source = Some(options);
        clauses.table_with_connector = true;
    }
    let mut depth = 0i32;
    let mut n = 0; // index into `words`
                   // The first word of the current column definition (in `words`).
    let mut column_start = 0;
    while n < words.len() {
        let i = words[n];
        match &tokens[i] {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if depth == 1 && (tokens[i] == Token::Comma || (tokens[i] == Token::LParen)) {
            column_start = n + 1;
        }
        if is_table
            && depth == 1
            && is_word(&tokens[i], "AS")
            && word(n + 1, "PROCTIME")
            && words.get(n + 2).is_some_and(|&p| tokens[p] == Token::LParen)
            && words.get(n + 3).is_some_and(|&p| tokens[p] == Token::RParen)
        {
            if n <= column_start {
                return Err(WeirError::syntax("expected <column> [TIMESTAMPTZ] AS PROCTIME()"));
            }
            if clauses.processing_time.is_some() {
                return Err(WeirError::syntax("a table can have only one PROCTIME() column"));
            }
            clauses.processing_time = Some(tokens[words[column_start]].to_string().trim_matches('"').to_string());
            // `AS PROCTIME()` goes; a column declared without a type gets TIMESTAMPTZ.
            if n == column_start + 1 {
                insert_before.push((i, "TIMESTAMPTZ "));
            }
            keep[i..=words[n + 3]].iter_mut().for_each(|k| *k = false);
            n += 4;
            continue;
        }
        if is_table && depth == 1 && is_word(&tokens[i], "WATERMARK") && word(n + 1, "FOR") {
            // `, WATERMARK FOR col AS expr` up to the next top-level comma or closing paren.
            let column = words.get(n + 2).map(|&c| tokens[c].to_string()).unwrap_or_default();
            if !word(n + 3, "AS") {
                return Err(WeirError::syntax("expected WATERMARK FOR <column> AS <expression>"));
            }
            let start = (0..i)
                .rev()
                .find(|&p| !matches!(tokens[p], Token::Whitespace(_)))
                .filter(|&p| tokens[p] == Token::Comma);
            let expr_start = words[n + 3] + 1;
            let mut end = expr_start;
            let mut d = 0i32;
            while end < tokens.len() {
                match &tokens[end] {
                    Token::LParen => d += 1,
                    Token::RParen if d == 0 => break,
                    Token::RParen => d -= 1,
                    Token::Comma if d == 0 => break,
                    _ => {}
                }
                end += 1;
            }
            let expr = text(&tokens[expr_start..end]);
            if expr.is_empty() {
                return Err(WeirError::syntax("WATERMARK FOR needs an expression after AS"));
            }
            if clauses.watermark.is_some() {
                return Err(WeirError::syntax("a table can have only one WATERMARK"));
            }
            clauses.watermark = Some(WatermarkClause { column: column.trim_matches('"').to_string(), expr });
            let from = start.unwrap_or(i);
            keep[from..end].iter_mut().for_each(|k| *k = false);
            while n < words.len() && words[n] < end {
                n += 1;
            }
            continue;
        }
        if is_table && depth == 0 && is_word(&tokens[i], "APPEND") && word(n + 1, "ONLY") {
            clauses.append_only = true;
            keep[i..=words[n + 1]].iter_mut().for_each(|k| *k = false);
            n += 2;
            continue;
        }
        if is_view
            && depth == 0
            && ((is_word(&tokens[i], "EMIT") && word(n + 1, "ON"))
                || (is_word(&tokens[i], "ALLOW") && word(n + 1, "LATENESS"))
                || (is_word(&tokens[i], "LATE") && word(n + 1, "ROWS")))
        {
            parse_view_clauses(&tokens, &words[n..], &mut clauses)?;
            keep[i..].iter_mut().for_each(|k| *k = false);
            // A trailing semicolon stays.
            if let Some(&last) = words.last() {
                if tokens[last] == Token::SemiColon {
                    keep[last] = true;
                }
            }
            break;
        }
        n += 1;
    }
    let mut rest = String::with_capacity(sql.len());
    for (i, (t, k)) in tokens.iter().zip(&keep).enumerate() {
        for (_, text) in insert_before.iter().filter(|(at, _)| *at == i) {
            rest.push_str(text);
        }
        if table_at == Some(i) {
            rest.push_str("TABLE");
        } else if *k {
            rest.push_str(&t.to_string());
        }
    }
    Ok((rest, clauses))
}

/// Whether a `CREATE TABLE`'s column list is followed by `WITH (connector = ...`.
fn has_connector_options(tokens: &[Token], words: &[usize]) -> bool {
    let mut depth = 0;
    for (n, &i) in words.iter().enumerate() {
        match &tokens[i] {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            t if depth == 0 && is_word(t, "WITH") => {
                let at = |k: usize| words.get(k).map(|&w| &tokens[w]);
                return n > 0
                    && at(n - 1) == Some(&Token::RParen)
                    && at(n + 1) == Some(&Token::LParen)
                    && at(n + 2).is_some_and(|t| is_word(t, "CONNECTOR"));
            }
            t if depth == 0 && is_word(t, "AS") => return false,
            _ => {}
        }
    }
    false
}

/// The `WITH (key = 'value', ...)` of `CREATE SOURCE` and a trailing `FORMAT f ENCODE e`
/// (kept as options `format` and `encode`), marked as not kept. Returns the options, the index
/// of the `WITH` token, and whether a column list comes before it.
pub(crate) fn source_options(
    tokens: &[Token],
    words: &[usize],
    keep: &mut [bool],
) -> Result<(ConnectorOptions, usize, bool)> {
    let mut depth = 0;
    let mut columns_given = false;
    let mut with = None;
    for (n, &i) in words.iter().enumerate() {
        match &tokens[i] {
            Token::LParen => {
                if depth == 0 {
                    columns_given = true;
                }
                depth += 1;
            }
            Token::RParen => depth -= 1,
            t if depth == 0 && is_word(t, "WITH") => {
                with = Some(n);
                break;
            }
            _ => {}
        }
    }
    let Some(w) = with else {
        return Err(WeirError::syntax("CREATE SOURCE needs WITH (connector = '...', ...)"));
    };
    if words.get(w + 1).map(|&i| &tokens[i]) != Some(&Token::LParen) {
        return Err(WeirError::syntax("expected ( after WITH"));
    }
    let mut options = ConnectorOptions::default();
    let mut n = key_values(tokens, words, w + 2, "WITH", &mut options)?;
    let mut end = words[n] + 1;
    // FORMAT f ENCODE e [(key = 'value', ...)]
    let after = |k: usize| words.get(n + k).map(|&i| &tokens[i]);
    if after(1).is_some_and(|t| is_word(t, "FORMAT")) {
        let value = |k: usize| match after(k) {
            Some(Token::Word(word)) => Ok(word.value.to_lowercase()),
            _ => Err(WeirError::syntax("expected FORMAT <format> ENCODE <encoding>")),
        };
        options.0.insert("format".into(), value(2)?);
        if !after(3).is_some_and(|t| is_word(t, "ENCODE")) {
            return Err(WeirError::syntax("expected ENCODE after FORMAT <format>"));
        }
        options.0.insert("encode".into(), value(4)?);
        end = words[n + 4] + 1;
        if after(5) == Some(&Token::LParen) {
            // The encoding's own options (`ENCODE AVRO (schema.registry = '...')`), kept with
            // the connector's.
            n = key_values(tokens, words, n + 6, "ENCODE", &mut options)?;
            end = words[n] + 1;
        }
    }
    keep[words[w]..end].iter_mut().for_each(|k| *k = false);
    Ok((options, words[w], columns_given))
}

/// `key = 'value', ...)` from word `n` (just after the opening parenthesis) into `options`:
/// keys are words joined by dots, values strings, numbers or words. Returns the word index of
/// the closing parenthesis. `clause` names the clause in errors.
fn key_values(
    tokens: &[Token],
    words: &[usize],
    mut n: usize,
    clause: &str,
    options: &mut ConnectorOptions,
) -> Result<usize> {
    loop {
        let mut key = String::new();
        while let Some(&i) = words.get(n) {
            match &tokens[i] {
                Token::Word(word) => key.push_str(&word.value.to_lowercase()),
                Token::Period => key.push('.'),
                _ => break,
            }
            n += 1;
        }
        if words.get(n).map(|&i| &tokens[i]) != Some(&Token::Eq) || key.is_empty() {
            return Err(WeirError::syntax(format!("expected key = 'value' in {clause} (...)")));
        }
        let value = match words.get(n + 1).map(|&i| &tokens[i]) {
            Some(Token::SingleQuotedString(v)) => v.replace("''", "'"),
            Some(Token::Number(v, _)) => v.clone(),
            Some(Token::Word(word)) => word.value.clone(),
            _ => return Err(WeirError::syntax(format!("expected a value for {key} in {clause} (...)"))),
        };
        // Given twice, the last wins (as it always has: stored definitions are parsed again).
        options.0.insert(key, value);
        n += 2;
        match words.get(n).map(|&i| &tokens[i]) {
            Some(Token::Comma) => n += 1,
            Some(Token::RParen) => return Ok(n),
            _ => return Err(WeirError::syntax(format!("expected , or ) in {clause} (...)"))),
        }
    }
}

/// `[EMIT ON WINDOW CLOSE] [ALLOW LATENESS <interval>] [LATE ROWS TO <name>]`, in that order,
/// to the end of the statement.
fn parse_view_clauses(tokens: &[Token], words: &[usize], clauses: &mut StreamingClauses) -> Result<()> {
    let w = |n: usize| words.get(n).map(|&i| &tokens[i]);
    let is = |n: usize, k: &str| w(n).is_some_and(|t| is_word(t, k));
    let mut n = 0;
    if is(n, "EMIT") {
        if !(is(n + 1, "ON") && is(n + 2, "WINDOW") && is(n + 3, "CLOSE")) {
            return Err(WeirError::syntax("expected EMIT ON WINDOW CLOSE"));
        }
        clauses.emit_on_window_close = true;
        n += 4;
    }
    if is(n, "ALLOW") && is(n + 1, "LATENESS") {
        // The interval runs until LATE ROWS or the end.
        let start = n + 2;
        let mut end = start;
        while end < words.len() && !(is(end, "LATE") && is(end + 1, "ROWS")) && w(end) != Some(&Token::SemiColon) {
            end += 1;
        }
        if end == start {
            return Err(WeirError::syntax("ALLOW LATENESS needs an interval, e.g. INTERVAL '30' SECOND"));
        }
        clauses.allow_lateness = Some(text(&tokens[words[start]..=words[end - 1]]));
        n = end;
    }
    if is(n, "LATE") && is(n + 1, "ROWS") {
        if !is(n + 2, "TO") {
            return Err(WeirError::syntax("expected LATE ROWS TO <table>"));
        }
        let name = match w(n + 3) {
            Some(Token::Word(word)) if word.quote_style.is_some() => word.value.clone(),
            Some(Token::Word(word)) => word.value.to_lowercase(),
            _ => return Err(WeirError::syntax("LATE ROWS TO needs a table name")),
        };
        clauses.late_rows_to = Some(name);
        n += 4;
    }
    match w(n) {
        None | Some(Token::SemiColon) => Ok(()),
        Some(other) => Err(WeirError::syntax(format!(
            "unexpected \"{other}\": the clauses after a view's query are EMIT ON WINDOW CLOSE, ALLOW LATENESS <interval>, LATE ROWS TO <table>, in that order"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_clauses_come_out_and_the_rest_parses() {
        let (rest, c) = extract(
            "CREATE TABLE bids (auction BIGINT, date_time TIMESTAMP,\n WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND) APPEND ONLY",
        )
        .unwrap();
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>().join(" "),
            "CREATE TABLE bids (auction BIGINT, date_time TIMESTAMP)"
        );
        assert!(c.append_only);
        assert_eq!(
            c.watermark,
            Some(WatermarkClause { column: "date_time".into(), expr: "date_time - INTERVAL '5' SECOND".into() })
        );
    }

    #[test]
    fn a_processing_time_column_stays_as_timestamptz() {
        let (rest, c) = extract("CREATE TABLE t (a INT, p_time AS PROCTIME(), b TEXT) APPEND ONLY").unwrap();
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>().join(" "),
            "CREATE TABLE t (a INT, p_time TIMESTAMPTZ , b TEXT)"
        );
        assert_eq!(c.processing_time.as_deref(), Some("p_time"));
        let (rest, c) = extract(
            "CREATE SOURCE bid (\"At\" TIMESTAMPTZ AS proctime(), WATERMARK FOR \"At\" AS \"At\") WITH (connector = 'nexmark')",
        )
        .unwrap();
        assert_eq!(rest.split_whitespace().collect::<Vec<_>>().join(" "), "CREATE TABLE bid (\"At\" TIMESTAMPTZ )");
        assert_eq!(c.processing_time.as_deref(), Some("At"));
        assert!(extract("CREATE TABLE t (AS PROCTIME())").is_err());
        assert!(extract("CREATE TABLE t (a AS PROCTIME(), b AS PROCTIME())").is_err());
    }

    #[test]
    fn view_clauses_come_out() {
        let (rest, c) = extract(
            "CREATE MATERIALIZED VIEW v AS SELECT a FROM (SELECT 1 AS a) t EMIT ON WINDOW CLOSE ALLOW LATENESS INTERVAL '30' SECOND LATE ROWS TO Late;",
        )
        .unwrap();
        assert_eq!(rest.trim(), "CREATE MATERIALIZED VIEW v AS SELECT a FROM (SELECT 1 AS a) t ;");
        assert!(c.emit_on_window_close);
        assert_eq!(c.allow_lateness.as_deref(), Some("INTERVAL '30' SECOND"));
        assert_eq!(c.late_rows_to.as_deref(), Some("late"));
        assert_eq!(c.view_suffix(), "EMIT ON WINDOW CLOSE ALLOW LATENESS INTERVAL '30' SECOND LATE ROWS TO late");
        assert!(extract("CREATE MATERIALIZED VIEW v AS SELECT 1 EMIT ON CLOSE").is_err());
        assert!(extract("CREATE MATERIALIZED VIEW v AS SELECT 1 LATE ROWS TO x y").is_err());
    }

    #[test]
    fn create_source_becomes_create_table_with_options() {
        let (rest, c) = extract(
            "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = 100)",
        )
        .unwrap();
        assert_eq!(rest.trim(), "CREATE TABLE bid ()");
        let options = c.source.unwrap();
        assert_eq!(options.get("nexmark.table.type"), Some("bid"));
        assert_eq!(options.get("nexmark.event.num"), Some("100"));
        let (rest, c) = extract(
            "CREATE SOURCE s (a BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (connector = 'x') FORMAT PLAIN ENCODE JSON",
        )
        .unwrap();
        assert_eq!(rest.trim(), "CREATE TABLE s (a BIGINT, ts TIMESTAMP)");
        assert!(c.watermark.is_some());
        assert_eq!(c.source.unwrap().get("encode"), Some("json"));
        let (rest, c) = extract("DROP SOURCE IF EXISTS s").unwrap();
        assert_eq!(rest, "DROP TABLE IF EXISTS s");
        assert!(c.drop_source);
        assert!(extract("CREATE SOURCE s").is_err());
    }

    #[test]
    fn create_table_with_a_connector_keeps_its_key_and_gives_the_options() {
        let (rest, c) = extract(
            "CREATE TABLE t (k BIGINT PRIMARY KEY, v TEXT) WITH (connector = 'kafka', topic = 't') FORMAT UPSERT ENCODE JSON",
        )
        .unwrap();
        assert_eq!(rest.trim(), "CREATE TABLE t (k BIGINT PRIMARY KEY, v TEXT)");
        assert!(c.table_with_connector);
        let options = c.source.unwrap();
        assert_eq!((options.get("topic"), options.get("format")), (Some("t"), Some("upsert")));
        // A CTE after AS and other WITH options are not a connector's.
        let sql = "CREATE TABLE t AS WITH connector AS (SELECT 1) SELECT * FROM connector";
        assert_eq!(extract(sql).unwrap(), (sql.to_string(), StreamingClauses::default()));
    }

    #[test]
    fn other_statements_are_untouched() {
        let sql = "SELECT 'emit late' AS append FROM t";
        assert_eq!(extract(sql).unwrap(), (sql.to_string(), StreamingClauses::default()));
    }
}
