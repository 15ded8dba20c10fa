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

/// `sql` without its `FOR SYSTEM_TIME AS OF PROCTIME()` clauses, and the table name or alias
/// each followed (as written, in order); None when it has none.
pub fn strip(sql: &str) -> Result<Option<(String, Vec<Ident>)>> {
    if !may_contain(sql) {
        return Ok(None);
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return Ok(None);
    };
    let words: Vec<usize> =
        tokens.iter().enumerate().filter(|(_, t)| !matches!(t, Token::Whitespace(_))).map(|(i, _)| i).collect();
    let word = |n: usize, k: &str| words.get(n).is_some_and(|&i| is_word(&tokens[i], k));
    let mut keep = vec![true; tokens.len()];
    let mut tables = Vec::new();
    let mut n = 0;
    while n < words.len() {
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
        let table = n.checked_sub(1).map(|p| &tokens[words[p]]);
        let Some(Token::Word(table)) = table else {
            return Err(WeirError::syntax("FOR SYSTEM_TIME AS OF PROCTIME() must follow a table's name"));
        };
        tables.push(match table.quote_style {
            Some(quote) => Ident::with_quote(quote, table.value.clone()),
            None => Ident::new(table.value.clone()),
        });
        keep[words[n]..=words[n + 6]].iter_mut().for_each(|k| *k = false);
        n += 7;
    }
    if tables.is_empty() {
        return Ok(None);
    }
    let rest = tokens.iter().zip(&keep).filter(|(_, k)| **k).map(|(t, _)| t.to_string()).collect();
    Ok(Some((rest, tables)))
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

/// Puts the clauses [`strip`] took out back on their tables in `statements` (each on the next
/// table of that name or alias, in order).
pub fn annotate(statements: &mut [ast::Statement], tables: Vec<Ident>) -> Result<()> {
    struct Annotate {
        tables: std::collections::VecDeque<Ident>,
    }
    impl VisitorMut for Annotate {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, alias, version, .. } = factor {
                // The clause follows the table's name, or its alias (as a stored definition,
                // printed by sqlparser, has it).
                let named = |t: &Ident| last_ident(name) == Some(t) || alias.as_ref().is_some_and(|a| a.name == *t);
                if version.is_none() && self.tables.front().is_some_and(named) {
                    *version = Some(TableVersion::ForSystemTimeAsOf(proctime()));
                    self.tables.pop_front();
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut visitor = Annotate { tables: tables.into() };
    for statement in statements.iter_mut() {
        let _ = statement.visit(&mut visitor);
    }
    if !visitor.tables.is_empty() {
        return Err(WeirError::syntax("FOR SYSTEM_TIME AS OF PROCTIME() must follow a table in a FROM clause"));
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
        assert_eq!(tables, vec![Ident::new("customers")]);
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
        assert!(strip("SELECT * FROM t FOR SYSTEM_TIME AS OF now()").is_err());
    }
}
