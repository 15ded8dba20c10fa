//! Weir's sink statements, which sqlparser does not know:
//!
//! ```sql
//! CREATE SINK [IF NOT EXISTS] name FROM view WITH (connector = '...', ...) [FORMAT f ENCODE e];
//! CREATE SINK [IF NOT EXISTS] name AS query WITH (...) [FORMAT f ENCODE e];
//! DROP SINK [IF EXISTS] name;
//! SHOW SINKS;
//! ```
//! Recognised by their first words; the `WITH (...)` and `FORMAT ... ENCODE ...` are read as a
//! source's are (`clauses`). Called by the parser for each statement.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use super::clauses;
use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, WeirError};

#[derive(Debug, Clone)]
pub enum SinkStatement {
    Create {
        name: String,
        if_not_exists: bool,
        input: SinkInput,
        options: ConnectorOptions,
        text: String,
    },
    Drop {
        name: String,
        if_exists: bool,
    },
    Show,
    /// `SHOW CREATE SINK name`.
    ShowCreate(String),
}

/// What a sink delivers.
#[derive(Debug, Clone)]
pub enum SinkInput {
    /// A materialized view's changes.
    View(String),
    /// A query's, kept as a materialized view of the sink's own.
    Query(String),
}

impl std::fmt::Display for SinkStatement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkStatement::Create { text, .. } => f.write_str(text),
            SinkStatement::Drop { name, .. } => write!(f, "DROP SINK {name}"),
            SinkStatement::Show => f.write_str("SHOW SINKS"),
            SinkStatement::ShowCreate(name) => write!(f, "SHOW CREATE SINK {name}"),
        }
    }
}

fn word(t: &Token) -> Option<String> {
    match t {
        Token::Word(w) => Some(w.value.clone()),
        _ => None,
    }
}

/// Whether `sql` may hold a sink statement (a cheap test before tokenizing).
pub fn may_be_one(sql: &str) -> bool {
    sql.to_ascii_uppercase().contains("SINK")
}

/// The sink statement `sql` is, if it is one.
pub fn parse(sql: &str) -> Result<Option<SinkStatement>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(|e| WeirError::syntax(e.to_string()))?;
    let words: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i], Token::Whitespace(_))).collect();
    let upper = |n: usize| words.get(n).and_then(|&i| word(&tokens[i])).map(|w| w.to_ascii_uppercase());
    let name_at = |n: usize| {
        words.get(n).and_then(|&i| word(&tokens[i])).ok_or_else(|| WeirError::syntax("expected the sink's name"))
    };
    match (upper(0).as_deref(), upper(1).as_deref()) {
        (Some("SHOW"), Some("SINKS")) if words.len() == 2 => Ok(Some(SinkStatement::Show)),
        (Some("SHOW"), Some("CREATE")) if upper(2).as_deref() == Some("SINK") && words.len() == 4 => {
            Ok(Some(SinkStatement::ShowCreate(name_at(3)?)))
        }
        (Some("DROP"), Some("SINK")) => {
            let if_exists = upper(2).as_deref() == Some("IF") && upper(3).as_deref() == Some("EXISTS");
            let at = if if_exists { 4 } else { 2 };
            let name = name_at(at)?;
            if words.len() != at + 1 {
                return Err(WeirError::syntax("expected DROP SINK [IF EXISTS] name"));
            }
            Ok(Some(SinkStatement::Drop { name, if_exists }))
        }
        (Some("CREATE"), Some("SINK")) => {
            let if_not_exists = upper(2).as_deref() == Some("IF") && upper(3).as_deref() == Some("NOT");
            let at = if if_not_exists { 5 } else { 2 };
            let name = name_at(at)?;
            let mut keep = vec![true; tokens.len()];
            let (options, with_at, _) = clauses::source_options(&tokens, &words[at + 1..], &mut keep)?;
            let input = match upper(at + 1).as_deref() {
                Some("FROM") => {
                    let view = name_at(at + 2)?;
                    if words.get(at + 3) != Some(&with_at) {
                        return Err(WeirError::syntax("expected WITH (...) after CREATE SINK name FROM view"));
                    }
                    SinkInput::View(view)
                }
                Some("AS") => {
                    let from = words[at + 2];
                    let query: String = tokens[from..with_at].iter().map(|t| t.to_string()).collect();
                    SinkInput::Query(query.trim().to_string())
                }
                _ => return Err(WeirError::syntax("expected FROM view or AS query after CREATE SINK name")),
            };
            Ok(Some(SinkStatement::Create { name, if_not_exists, input, options, text: sql.trim().to_string() }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_statements_parse_and_others_pass() {
        let s = parse("CREATE SINK s FROM v WITH (connector = 'kafka', topic = 't', primary_key = 'a,b') FORMAT UPSERT ENCODE JSON")
            .unwrap()
            .unwrap();
        let SinkStatement::Create { name, input: SinkInput::View(view), options, .. } = s else { panic!("{s:?}") };
        assert_eq!((name.as_str(), view.as_str()), ("s", "v"));
        assert_eq!(
            (options.get("topic"), options.get("format"), options.get("primary_key")),
            (Some("t"), Some("upsert"), Some("a,b"))
        );
        let q =
            parse("CREATE SINK IF NOT EXISTS r AS SELECT * FROM bids WHERE price > 1000 WITH (connector = 'kafka')")
                .unwrap();
        assert!(
            matches!(q, Some(SinkStatement::Create { if_not_exists: true, input: SinkInput::Query(ref q), .. }) if q == "SELECT * FROM bids WHERE price > 1000"),
            "{q:?}"
        );
        assert!(matches!(parse("DROP SINK IF EXISTS s").unwrap(), Some(SinkStatement::Drop { if_exists: true, .. })));
        assert!(matches!(parse("show sinks").unwrap(), Some(SinkStatement::Show)));
        assert!(parse("SELECT 1").unwrap().is_none());
        assert!(parse("CREATE SINK s FROM v").is_err(), "WITH is required");
        assert!(parse("DROP SINK a b").is_err());
    }
}
