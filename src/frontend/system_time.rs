//! `FOR SYSTEM_TIME AS OF PROCTIME()` after a table in a FROM clause: the table is joined as
//! it is when each row of the other side arrives (a lookup join, `operators::lookup_join`), as
//! RisingWave and Flink write it:
//!
//! ```sql
//! CREATE MATERIALIZED VIEW enriched AS
//!   SELECT o.id, o.amount, c.name FROM orders o
//!   JOIN customers FOR SYSTEM_TIME AS OF PROCTIME() AS c ON o.customer = c.id;
//! ```
//!
//! sqlparser reads the clause only in dialects with table versioning, not PostgreSQL's, and
//! the compatibility parser is PostgreSQL's. So [`strip`] takes the clause out of the text
//! (noting the table it follows), the rest parses as usual, and [`annotate`] puts it back into
//! the AST as the table's `version`, where DataFusion passes over it and a view's stored
//! definition (the statement printed) keeps it. [`lookup_tables`] reads it from there when a
//! view is built. In an ordinary query the table is simply read as it is now.
//!
//! Only `PROCTIME()` is accepted after `AS OF` (0A000 otherwise): Weir keeps no table history.
//! Called by `frontend::parser` (strip, annotate) and the view handlers (lookup_tables).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, Expr, Function, FunctionArgumentList, FunctionArguments, Ident, ObjectName, TableFactor, TableVersion,
    VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Result, WeirError};

/// Whether `sql` may have the clause (a cheap test before tokenizing).
pub fn may_contain(sql: &str) -> bool {
    sql.to_ascii_uppercase().contains("SYSTEM_TIME")
}

fn is_word(t: &Token, keyword: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(keyword))
}

/// Where a clause was: the statement (its index in the text) and what it followed.
#[derive(Debug, Clone, PartialEq)]
pub struct Clause {
    statement: usize,
    /// The table's name (the last part of it), or its alias.
    follows: Ident,
    alias: bool,
}

/// `sql` without its `FOR SYSTEM_TIME AS OF PROCTIME()` clauses, and where each was (in
/// order); None when it has none.
pub fn strip(sql: &str) -> Result<Option<(String, Vec<Clause>)>> {
    if !may_contain(sql) {
        return Ok(None);
    }
    // Not unescaped: the tokens are written back as text, and a string must come back as it
    // was written (`'O''Brien'`, not `'O'Brien'`).
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).with_unescape(false).tokenize() else {
        return Ok(None);
    };
    let words: Vec<usize> =
        tokens.iter().enumerate().filter(|(_, t)| !matches!(t, Token::Whitespace(_))).map(|(i, _)| i).collect();
    let word = |n: usize, k: &str| words.get(n).is_some_and(|&i| is_word(&tokens[i], k));
    let mut keep = vec![true; tokens.len()];
    let mut clauses = Vec::new();
    let mut statement = 0;
    let mut n = 0;
    while n < words.len() {
        if tokens[words[n]] == Token::SemiColon {
            statement += 1;
        }
        if !(word(n, "FOR") && word(n + 1, "SYSTEM_TIME") && word(n + 2, "AS") && word(n + 3, "OF")) {
            n += 1;
            continue;
        }
        let proctime = word(n + 4, "PROCTIME")
            && words.get(n + 5).is_some_and(|&i| tokens[i] == Token::LParen)
            && words.get(n + 6).is_some_and(|&i| tokens[i] == Token::RParen);
        if !proctime {
            return Err(WeirError::unsupported(
                "FOR SYSTEM_TIME AS OF takes PROCTIME() only (the table as it is when each row arrives)",
            ));
        }
        let Some(Token::Word(follows)) = n.checked_sub(1).map(|p| &tokens[words[p]]) else {
            return Err(WeirError::syntax("FOR SYSTEM_TIME AS OF PROCTIME() must follow a table's name"));
        };
        // An alias follows `AS` or the table's name (`dim d`); a name follows `JOIN`, `FROM`,
        // a comma or a dot.
        let before = n.checked_sub(2).map(|p| &tokens[words[p]]);
        let alias = match before {
            Some(Token::Word(w)) if w.quote_style.is_some() => true,
            Some(Token::Word(w)) => {
                !["JOIN", "FROM", "LATERAL", "ONLY"].iter().any(|k| w.value.eq_ignore_ascii_case(k))
            }
            _ => false,
        };
        let follows = match follows.quote_style {
            Some(quote) => Ident::with_quote(quote, follows.value.clone()),
            None => Ident::new(follows.value.clone()),
        };
        clauses.push(Clause { statement, follows, alias });
        keep[words[n]..=words[n + 6]].iter_mut().for_each(|k| *k = false);
        n += 7;
    }
    if clauses.is_empty() {
        return Ok(None);
    }
    let rest = tokens.iter().zip(&keep).filter(|(_, k)| **k).map(|(t, _)| t.to_string()).collect();
    Ok(Some((rest, clauses)))
}

/// `PROCTIME()`.
fn proctime() -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new("PROCTIME")]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// The last part of a table's name, as sqlparser holds it.
fn last_ident(name: &ObjectName) -> Option<&Ident> {
    name.0.last().and_then(|part| part.as_ident())
}

/// Puts the clauses [`strip`] took out back on their tables in `statements`: each on the
/// next table of its statement with that name (or alias), in order.
pub fn annotate(statements: &mut [ast::Statement], clauses: Vec<Clause>) -> Result<()> {
    struct Annotate {
        clauses: std::collections::VecDeque<Clause>,
    }
    impl VisitorMut for Annotate {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, alias, version, .. } = factor {
                let named = |c: &Clause| match c.alias {
                    true => alias.as_ref().is_some_and(|a| a.name == c.follows),
                    false => last_ident(name) == Some(&c.follows),
                };
                if version.is_none() && self.clauses.front().is_some_and(named) {
                    *version = Some(TableVersion::ForSystemTimeAsOf(proctime()));
                    self.clauses.pop_front();
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut by_statement: std::collections::BTreeMap<usize, Vec<Clause>> = Default::default();
    for clause in clauses {
        by_statement.entry(clause.statement).or_default().push(clause);
    }
    for (index, clauses) in by_statement {
        let mut visitor = Annotate { clauses: clauses.into() };
        if let Some(statement) = statements.get_mut(index) {
            let _ = statement.visit(&mut visitor);
        }
        if !visitor.clauses.is_empty() {
            return Err(WeirError::syntax("FOR SYSTEM_TIME AS OF PROCTIME() must follow a table in a FROM clause"));
        }
    }
    Ok(())
}

/// The tables `statement` reads `FOR SYSTEM_TIME AS OF PROCTIME()`, by name as written.
pub fn lookup_tables(statement: &ast::Statement) -> Vec<ObjectName> {
    let mut found = Vec::new();
    struct Find<'a>(&'a mut Vec<ObjectName>);
    impl ast::Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, version: Some(TableVersion::ForSystemTimeAsOf(_)), .. } = factor {
                self.0.push(name.clone());
            }
            ControlFlow::Continue(())
        }
    }
    let _ = ast::Visit::visit(statement, &mut Find(&mut found));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clause_is_taken_out_and_put_back_on_its_table() {
        let sql = "CREATE MATERIALIZED VIEW v AS SELECT o.id, c.name FROM orders o \
                   JOIN customers FOR SYSTEM_TIME AS OF PROCTIME() AS c ON o.c = c.id";
        let (rest, tables) = strip(sql).unwrap().unwrap();
        assert!(!rest.contains("SYSTEM_TIME"));
        assert_eq!(tables, vec![Clause { statement: 0, follows: Ident::new("customers"), alias: false }]);
        let mut statements =
            datafusion::sql::sqlparser::parser::Parser::parse_sql(&PostgreSqlDialect {}, &rest).unwrap();
        annotate(&mut statements, tables).unwrap();
        assert!(statements[0].to_string().contains("JOIN customers AS c FOR SYSTEM_TIME AS OF PROCTIME()"));
        let found = lookup_tables(&statements[0]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].to_string(), "customers");
        // As printed (the alias first), it reads back the same.
        let printed = statements[0].to_string();
        let (rest, tables) = strip(&printed).unwrap().unwrap();
        let mut again = datafusion::sql::sqlparser::parser::Parser::parse_sql(&PostgreSqlDialect {}, &rest).unwrap();
        annotate(&mut again, tables).unwrap();
        assert_eq!(again[0].to_string(), printed);
        assert!(strip("SELECT 1").unwrap().is_none());
        // Strings come back as written; a clause stays in its own statement; an alias named
        // like another table is the alias.
        let sql =
            "SELECT * FROM dim; SELECT 'O''Brien' FROM d AS s JOIN dim d FOR SYSTEM_TIME AS OF PROCTIME() ON s.k = d.k";
        let (rest, clauses) = strip(sql).unwrap().unwrap();
        assert!(rest.contains("'O''Brien'"), "{rest}");
        let mut statements =
            datafusion::sql::sqlparser::parser::Parser::parse_sql(&PostgreSqlDialect {}, &rest).unwrap();
        annotate(&mut statements, clauses).unwrap();
        assert!(lookup_tables(&statements[0]).is_empty());
        let found: Vec<String> = lookup_tables(&statements[1]).iter().map(|n| n.to_string()).collect();
        assert_eq!(found, ["dim"]);
        assert!(strip("SELECT * FROM t FOR SYSTEM_TIME AS OF now()").is_err());
    }
}
