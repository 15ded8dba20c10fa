//! The SQL dialect Weir parses with: PostgreSQL's as sqlparser 0.62 knows it, with two changes
//! that keep parsing time in proportion to the text. Every parse of a user's text goes through
//! [`parse`] (the frontend's [`super::parser`], stored view definitions, authorization checks).
//!
//! sqlparser parses some forms speculatively and parses again on failure. For PostgreSQL it
//! first reads each function argument as a whole expression in case a `:` or `=>` follows
//! (`json_object('a': 1)`), so every level of nested calls doubles the work or worse: `SELECT
//! (f (g(h(...` seven levels deep took 3 s, twenty levels of `replace(replace(...))` minutes
//! (upstream: datafusion-sqlparser-rs #2352, #2372, #2378; fuzzing found it here). Weir's
//! dialect reads a named argument's name as an identifier only (`f(name => value)` still
//! parses; an expression as a name, which Weir supports in no function, does not). Other forms
//! still re-parse (`ARRAY[(f(` or `CAST((f(` nested: twice the work a level), so each parse
//! also has a budget of expression steps, counted where sqlparser asks the dialect about every
//! expression it starts ([`Dialect::parse_prefix`]): past [`STEPS_PER_BYTE`] steps per byte of
//! text (and [`STEPS_BASE`] more), the parse stops with sqlparser's recursion error, which no
//! speculative parse swallows, and the statement is refused with 54001, as PostgreSQL refuses
//! one that is too complex. A statement a person or a tool writes takes a few steps a byte.
//!
//! Invariants: [`WeirDialect`] is PostgreSQL's dialect to sqlparser (`dialect_of!` checks
//! answer as for `PostgreSqlDialect`) and differs from it only as above; every other method of
//! `PostgreSqlDialect`'s is passed on (the test parses every statement of `tests/slt` both ways
//! and compares).

use std::cell::Cell;

use datafusion::sql::sqlparser::ast::{Expr, Statement};
use datafusion::sql::sqlparser::dialect::{Dialect, PostgreSqlDialect, Precedence};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};

use crate::error::{SqlState, WeirError};

/// Expression steps a parse may take for each byte of its text.
pub const STEPS_PER_BYTE: usize = 16;
/// Expression steps every parse may take besides.
pub const STEPS_BASE: usize = 10_000;

/// How a parse with [`parse`] failed.
#[derive(Debug)]
pub enum ParseFailure {
    /// The text is not SQL (or nests deeper than sqlparser's recursion limit).
    Syntax(ParserError),
    /// The parse took more steps than its budget.
    TooComplex,
}

impl ParseFailure {
    /// The error a client gets: 42601, or 54001 for a statement past its budget.
    pub fn into_error(self) -> WeirError {
        match self {
            ParseFailure::Syntax(e) => WeirError::syntax(format!("syntax error: {e}")),
            ParseFailure::TooComplex => too_complex(),
        }
    }
}

/// 54001, as PostgreSQL answers a statement too complex for it.
pub fn too_complex() -> WeirError {
    WeirError::new(SqlState::STATEMENT_TOO_COMPLEX, "statement is too complex to parse")
        .with_hint("nest fewer expressions in one another")
}

/// `sql`'s statements, parsed with [`WeirDialect`] within its budget.
pub fn parse(sql: &str) -> Result<Vec<Statement>, ParseFailure> {
    parse_counting(sql).map(|(statements, _)| statements)
}

/// [`parse`], with the expression steps the parse took.
pub fn parse_counting(sql: &str) -> Result<(Vec<Statement>, usize), ParseFailure> {
    let dialect = WeirDialect::for_text(sql);
    let parsed = Parser::new(&dialect).try_with_sql(sql).and_then(|mut parser| parser.parse_statements());
    finish(&dialect, parsed).map(|statements| (statements, dialect.steps()))
}

/// One expression (text Weir writes from a statement it parsed), parsed as [`parse`] parses.
pub fn parse_expr(sql: &str) -> Result<Expr, ParseFailure> {
    let dialect = WeirDialect::for_text(sql);
    let parsed = Parser::new(&dialect).try_with_sql(sql).and_then(|mut parser| parser.parse_expr());
    finish(&dialect, parsed)
}

/// A parse's outcome. A parse that ran out of steps is refused even when sqlparser made
/// something of it: a speculative branch that failed for want of steps may have left a
/// fallback's reading (a keyword read as a name).
fn finish<T>(dialect: &WeirDialect, parsed: Result<T, ParserError>) -> Result<T, ParseFailure> {
    match parsed {
        _ if dialect.exhausted() => Err(ParseFailure::TooComplex),
        Ok(parsed) => Ok(parsed),
        Err(e) => Err(ParseFailure::Syntax(e)),
    }
}

/// How deep function calls nest in `statements` (through subqueries too).
pub fn call_depth(statements: &[Statement]) -> usize {
    use datafusion::sql::sqlparser::ast::{Visit, Visitor};
    use std::ops::ControlFlow;
    #[derive(Default)]
    struct Depth {
        now: usize,
        most: usize,
    }
    impl Visitor for Depth {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if matches!(expr, Expr::Function(_)) {
                self.now += 1;
                self.most = self.most.max(self.now);
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if matches!(expr, Expr::Function(_)) {
                self.now -= 1;
            }
            ControlFlow::Continue(())
        }
    }
    let mut depth = Depth::default();
    for statement in statements {
        let _ = statement.visit(&mut depth);
    }
    depth.most
}

/// PostgreSQL's dialect with a budget of expression steps (see the module's doc).
#[derive(Debug)]
pub struct WeirDialect {
    postgres: PostgreSqlDialect,
    steps: Cell<usize>,
    budget: usize,
}

impl WeirDialect {
    /// The dialect for one parse of `sql`.
    pub fn for_text(sql: &str) -> Self {
        WeirDialect {
            postgres: PostgreSqlDialect {},
            steps: Cell::new(0),
            budget: STEPS_BASE.saturating_add(sql.len().saturating_mul(STEPS_PER_BYTE)),
        }
    }

    /// Whether the parse ran out of steps.
    pub fn exhausted(&self) -> bool {
        self.steps.get() > self.budget
    }

    /// Steps taken so far.
    pub fn steps(&self) -> usize {
        self.steps.get()
    }
}

impl Dialect for WeirDialect {
    fn dialect(&self) -> std::any::TypeId {
        self.postgres.dialect()
    }

    /// Counts a step; past the budget, fails every expression from here on.
    fn parse_prefix(&self, _parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        let steps = self.steps.get() + 1;
        self.steps.set(steps);
        (steps > self.budget).then_some(Err(ParserError::RecursionLimitExceeded))
    }

    /// A named argument's name is an identifier (see the module's doc).
    fn supports_named_fn_args_with_expr_name(&self) -> bool {
        false
    }

    // Everything else as PostgreSQL's (each method `PostgreSqlDialect` defines, in its order).

    fn identifier_quote_style(&self, identifier: &str) -> Option<char> {
        self.postgres.identifier_quote_style(identifier)
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        self.postgres.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        self.postgres.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        self.postgres.is_identifier_part(ch)
    }

    fn supports_unicode_string_literal(&self) -> bool {
        self.postgres.supports_unicode_string_literal()
    }

    fn is_reserved_for_identifier(&self, kw: Keyword) -> bool {
        self.postgres.is_reserved_for_identifier(kw)
    }

    fn is_custom_operator_part(&self, ch: char) -> bool {
        self.postgres.is_custom_operator_part(ch)
    }

    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        self.postgres.get_next_precedence(parser)
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        self.postgres.supports_filter_during_aggregation()
    }

    fn supports_group_by_expr(&self) -> bool {
        self.postgres.supports_group_by_expr()
    }

    fn prec_value(&self, prec: Precedence) -> u8 {
        self.postgres.prec_value(prec)
    }

    fn allow_extract_custom(&self) -> bool {
        self.postgres.allow_extract_custom()
    }

    fn allow_extract_single_quotes(&self) -> bool {
        self.postgres.allow_extract_single_quotes()
    }

    fn supports_create_index_with_clause(&self) -> bool {
        self.postgres.supports_create_index_with_clause()
    }

    fn supports_explain_with_utility_options(&self) -> bool {
        self.postgres.supports_explain_with_utility_options()
    }

    fn supports_listen_notify(&self) -> bool {
        self.postgres.supports_listen_notify()
    }

    fn supports_factorial_operator(&self) -> bool {
        self.postgres.supports_factorial_operator()
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        self.postgres.supports_bitwise_shift_operators()
    }

    fn supports_comment_on(&self) -> bool {
        self.postgres.supports_comment_on()
    }

    fn supports_load_extension(&self) -> bool {
        self.postgres.supports_load_extension()
    }

    fn supports_named_fn_args_with_colon_operator(&self) -> bool {
        self.postgres.supports_named_fn_args_with_colon_operator()
    }

    fn supports_empty_projections(&self) -> bool {
        self.postgres.supports_empty_projections()
    }

    fn supports_nested_comments(&self) -> bool {
        self.postgres.supports_nested_comments()
    }

    fn supports_string_escape_constant(&self) -> bool {
        self.postgres.supports_string_escape_constant()
    }

    fn supports_numeric_literal_underscores(&self) -> bool {
        self.postgres.supports_numeric_literal_underscores()
    }

    fn supports_array_typedef_with_brackets(&self) -> bool {
        self.postgres.supports_array_typedef_with_brackets()
    }

    fn supports_geometric_types(&self) -> bool {
        self.postgres.supports_geometric_types()
    }

    fn supports_set_names(&self) -> bool {
        self.postgres.supports_set_names()
    }

    fn supports_alter_column_type_using(&self) -> bool {
        self.postgres.supports_alter_column_type_using()
    }

    fn supports_notnull_operator(&self) -> bool {
        self.postgres.supports_notnull_operator()
    }

    fn supports_interval_options(&self) -> bool {
        self.postgres.supports_interval_options()
    }

    fn supports_insert_table_alias(&self) -> bool {
        self.postgres.supports_insert_table_alias()
    }

    fn supports_create_table_like_parenthesized(&self) -> bool {
        self.postgres.supports_create_table_like_parenthesized()
    }

    fn supports_select_wildcard_with_alias(&self) -> bool {
        self.postgres.supports_select_wildcard_with_alias()
    }

    fn supports_comma_separated_trim(&self) -> bool {
        self.postgres.supports_comma_separated_trim()
    }

    fn supports_xml_expressions(&self) -> bool {
        self.postgres.supports_xml_expressions()
    }

    fn supports_comment_optimizer_hint(&self) -> bool {
        self.postgres.supports_comment_optimizer_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The SQL of every `statement` and `query` record of `tests/slt`.
    fn slt_statements() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
        let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        let mut statements = Vec::new();
        for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "slt")) {
            let text = std::fs::read_to_string(file).unwrap();
            let mut lines = text.lines();
            while let Some(line) = lines.next() {
                if !(line.starts_with("statement ") || line.starts_with("query ")) {
                    continue;
                }
                let sql: Vec<&str> = lines.by_ref().take_while(|l| !l.trim().is_empty() && *l != "----").collect();
                statements.push(sql.join("\n"));
            }
        }
        statements
    }

    #[test]
    fn weirs_dialect_parses_every_tested_statement_as_postgresqls_does() {
        let statements = slt_statements();
        assert!(statements.len() > 1000, "{} statements", statements.len());
        let mut compared = 0;
        for sql in &statements {
            let weir = parse(sql);
            // PostgreSQL's dialect takes minutes over the statements that test this dialect
            // (deep calls): compared where it parses in time.
            let deep = match &weir {
                Ok(parsed) => call_depth(parsed) > 6,
                Err(_) => sql.matches('(').count() > 12,
            };
            if deep {
                continue;
            }
            let postgres = Parser::parse_sql(&PostgreSqlDialect {}, sql);
            match (postgres, weir) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "{sql}");
                    compared += 1;
                }
                (Err(_), Err(ParseFailure::Syntax(_))) => {}
                (a, b) => panic!("{sql}: PostgreSQL's dialect {a:?}, Weir's {b:?}"),
            }
        }
        assert!(compared > 1000, "{compared} statements parsed");
        // The budget leaves room: the tested statement that takes the most steps a byte (of
        // those that parse: session.slt has one made to run out).
        let (most, sql) = statements
            .iter()
            .filter(|sql| parse(sql).is_ok())
            .map(|sql| {
                let dialect = WeirDialect::for_text(sql);
                let _ = Parser::new(&dialect).try_with_sql(sql).and_then(|mut p| p.parse_statements());
                (dialect.steps() as f64 / sql.len().max(1) as f64, sql)
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap();
        eprintln!("most steps a byte: {most:.2} ({sql})");
        assert!(most * 8.0 < STEPS_PER_BYTE as f64, "{most} steps a byte: {sql}");
    }

    /// How long parsing `sql` takes, and how it ends.
    fn timed(sql: &str) -> (Duration, Result<Vec<Statement>, ParseFailure>) {
        let start = Instant::now();
        let parsed = parse(sql);
        (start.elapsed(), parsed)
    }

    #[test]
    fn nested_calls_parse_in_time_in_proportion_to_the_text() {
        // Valid: 40 levels of replace(...) (PostgreSQL's dialect: twice the time a level).
        let sql = format!("SELECT {}x{}", "replace(".repeat(40), ", 'a', 'b')".repeat(40));
        let (took, parsed) = timed(&sql);
        assert!(parsed.is_ok(), "{parsed:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
        // What the fuzzer found: unclosed nested calls, 30 levels.
        let sql = format!("SELECT {}", "(gT (grat(rEtLA ".repeat(30));
        let (took, parsed) = timed(&sql);
        assert!(matches!(parsed, Err(ParseFailure::Syntax(_))), "{parsed:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }

    #[test]
    fn a_parse_past_its_budget_stops_as_too_complex() {
        // sqlparser re-parses each level of these twice: 2^40 steps unbudgeted.
        for shape in ["ARRAY[(f(", "CAST((f(", "INTERVAL (f("] {
            let sql = format!("SELECT {}", shape.repeat(40));
            let (took, parsed) = timed(&sql);
            assert!(matches!(parsed, Err(ParseFailure::TooComplex)), "{shape}: {parsed:?}");
            assert!(took < Duration::from_secs(1), "{shape}: {took:?}");
        }
        // A parse that exhausts its budget is refused even where sqlparser's fallback reading
        // succeeds (a keyword read as a name once the expression after it had no steps).
        let dialect = WeirDialect { postgres: PostgreSqlDialect {}, steps: Cell::new(0), budget: 3 };
        let parsed =
            Parser::new(&dialect).try_with_sql("SELECT a, b, c, NOT y FROM t").and_then(|mut p| p.parse_statements());
        assert!(matches!(finish(&dialect, parsed), Err(ParseFailure::TooComplex)));
        // Eight levels of the same, closed, is a statement and within its budget.
        let sql = format!("SELECT {}1{}", "ARRAY[(abs(".repeat(8), "))]".repeat(8));
        assert!(parse(&sql).is_ok());
    }
}
