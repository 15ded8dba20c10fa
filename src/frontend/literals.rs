//! Literals lifted out of a simple-protocol statement into parameters, so that
//! `SELECT v FROM t WHERE k = 42` and `... WHERE k = 43` are one statement, `... WHERE k = $1`,
//! parsed and planned once and then run from the session's plan cache and the key-lookup fast
//! path, as a prepared statement is (PostgreSQL's generic plans; what dashboards and
//! `pgbench -M simple` send).
//!
//! Only literals compared with something are lifted: a number or a quoted string right after
//! `=`, `<>`, `!=`, `<`, `<=`, `>`, `>=` or `BETWEEN` (and the `AND` of that `BETWEEN`), a
//! number with its minus sign, and
//! right before the end of the comparison (`AND`, `OR`, `)`, `,`, the statement's end or its next
//! clause). Anything else (`LIMIT 10`, `GROUP BY 1`, `'x'::date`, `k = 1 + 1`, a select-list
//! constant) stays in the text. Only single `SELECT`, `UPDATE` and `DELETE` statements without
//! parameters of their own are lifted. A lifted value runs only if it converts exactly to the
//! type its parameter was planned with ([`Lifted::values_as`]: `int_col = 1.5` keeps its
//! literal); the caller runs the statement as written otherwise. Used by `server::simple_query`.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// A statement with its compared literals as `$1..$n`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lifted {
    /// The text with parameters in place of the literals.
    pub text: String,
    /// The literals in parameter order.
    pub literals: Vec<Literal>,
}

/// A literal as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Number(String),
    Text(String),
}

/// Whether `token` ends a comparison whose right side is one literal.
fn ends_comparison(token: Option<&Token>) -> bool {
    match token {
        None | Some(Token::EOF | Token::SemiColon | Token::RParen | Token::Comma) => true,
        Some(Token::Word(w)) => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::ORDER
                | Keyword::GROUP
                | Keyword::LIMIT
                | Keyword::OFFSET
                | Keyword::HAVING
                | Keyword::FETCH
                | Keyword::UNION
                | Keyword::EXCEPT
                | Keyword::INTERSECT
                | Keyword::RETURNING
                | Keyword::WHERE
                | Keyword::FROM
        ),
        _ => false,
    }
}

/// `sql` with its compared literals lifted, when it is a statement worth it and has any.
pub fn lift(sql: &str) -> Option<Lifted> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let significant: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i], Token::Whitespace(_))).collect();
    let first = significant.first().map(|&i| &tokens[i])?;
    if !matches!(first, Token::Word(w) if matches!(w.keyword, Keyword::SELECT | Keyword::UPDATE | Keyword::DELETE)) {
        return None;
    }
    // One statement, no parameters of its own.
    let semicolons: Vec<usize> = significant.iter().copied().filter(|&i| tokens[i] == Token::SemiColon).collect();
    let single = semicolons.is_empty() || (semicolons.len() == 1 && semicolons[0] == *significant.last()?);
    if !single || tokens.iter().any(|t| matches!(t, Token::Placeholder(_))) {
        return None;
    }
    // What each token becomes: itself, or a literal lifted (a minus sign goes with its number).
    let mut lifted: Vec<Option<Literal>> = vec![None; tokens.len()];
    let mut dropped = vec![false; tokens.len()];
    let comparison = |t: Option<&Token>| {
        matches!(t, Some(Token::Eq | Token::Neq | Token::Lt | Token::LtEq | Token::Gt | Token::GtEq))
    };
    let keyword = |t: Option<&Token>, k: Keyword| matches!(t, Some(Token::Word(w)) if w.keyword == k);
    // Whether the last literal lifted was a BETWEEN's low bound, whose AND comes next.
    let mut between_low_lifted = false;
    for (n, &i) in significant.iter().enumerate() {
        let at = |m: Option<usize>| m.and_then(|m| significant.get(m)).map(|&j| &tokens[j]);
        let (literal, first) = match &tokens[i] {
            Token::Number(v, _) if matches!(at(n.checked_sub(1)), Some(Token::Minus)) => {
                (Literal::Number(format!("-{v}")), n - 1)
            }
            Token::Number(v, _) => (Literal::Number(v.clone()), n),
            Token::SingleQuotedString(v) => (Literal::Text(v.clone()), n),
            _ => continue,
        };
        let before = at(first.checked_sub(1));
        let after = at(Some(n + 1));
        let between_high = between_low_lifted && keyword(before, Keyword::AND);
        between_low_lifted = false;
        let lift = if keyword(before, Keyword::BETWEEN) && keyword(after, Keyword::AND) {
            between_low_lifted = true;
            true
        } else {
            (comparison(before) || between_high) && ends_comparison(after)
        };
        if lift {
            lifted[i] = Some(literal);
            // The minus sign and any space after it.
            for flag in &mut dropped[significant[first]..i] {
                *flag = true;
            }
        }
    }
    if lifted.iter().all(Option::is_none) {
        return None;
    }
    let mut text = String::with_capacity(sql.len() + 8);
    let mut literals = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if dropped[i] {
            continue;
        }
        match lifted[i].take() {
            Some(literal) => {
                literals.push(literal);
                text.push_str(&format!("${}", literals.len()));
            }
            None => text.push_str(&token.to_string()),
        }
    }
    Some(Lifted { text, literals })
}

impl Lifted {
    /// The literals as values of the types their parameters were planned with, when each
    /// converts exactly (a number into an integer or a decimal of enough scale, a string into
    /// what it spells); None when one does not or has no planned type.
    pub fn values_as(&self, types: &[Option<DataType>]) -> Option<Vec<ScalarValue>> {
        if types.len() != self.literals.len() {
            return None;
        }
        self.literals
            .iter()
            .zip(types)
            .map(|(literal, planned)| {
                let planned = planned.as_ref()?;
                let (text, number) = match literal {
                    Literal::Number(n) => (n, true),
                    Literal::Text(s) => (s, false),
                };
                // A string converts by Arrow's parser: only into types whose text it reads as
                // PostgreSQL does (not intervals, whose forms Weir reads itself).
                let readable = matches!(
                    planned,
                    DataType::Utf8
                        | DataType::Utf8View
                        | DataType::LargeUtf8
                        | DataType::Boolean
                        | DataType::Date32
                        | DataType::Timestamp(..)
                        | DataType::Int8
                        | DataType::Int16
                        | DataType::Int32
                        | DataType::Int64
                        | DataType::Decimal128(..)
                        | DataType::Decimal256(..)
                        | DataType::Float32
                        | DataType::Float64
                );
                if !readable {
                    return None;
                }
                if number {
                    let fraction = text.split_once('.').map(|(_, f)| f.len()).unwrap_or(0);
                    let exact = match planned {
                        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                            fraction == 0 && !text.contains(['e', 'E'])
                        }
                        DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale) => {
                            !text.contains(['e', 'E']) && fraction <= (*scale).max(0) as usize
                        }
                        DataType::Float32 | DataType::Float64 => true,
                        _ => false,
                    };
                    if !exact {
                        return None;
                    }
                }
                ScalarValue::Utf8(Some(text.clone())).cast_to(planned).ok().filter(|v| !v.is_null())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compared_literals_become_parameters() {
        let l = lift("SELECT abalance FROM accounts WHERE aid = 42;").unwrap();
        assert_eq!(l.text, "SELECT abalance FROM accounts WHERE aid = $1;");
        assert_eq!(l.literals, vec![Literal::Number("42".into())]);

        let l =
            lift("SELECT * FROM m WHERE at BETWEEN '2026-01-01' AND '2026-01-02' AND host = 'h1' ORDER BY at").unwrap();
        assert_eq!(l.text, "SELECT * FROM m WHERE at BETWEEN $1 AND $2 AND host = $3 ORDER BY at");

        let l = lift("SELECT v FROM t WHERE k = -7 OR k > - 2.5").unwrap();
        assert_eq!(l.text, "SELECT v FROM t WHERE k = $1 OR k > $2");
        assert_eq!(l.literals, vec![Literal::Number("-7".into()), Literal::Number("-2.5".into())]);

        let l = lift("UPDATE t SET v = 5 WHERE k = 7").unwrap();
        assert_eq!(l.text, "UPDATE t SET v = $1 WHERE k = $2");
    }

    #[test]
    fn other_literals_stay() {
        for sql in [
            "SELECT 1",
            "SELECT * FROM t LIMIT 10",
            "SELECT k FROM t WHERE k = 1 + 1",
            "SELECT k FROM t WHERE d = '2026-01-01'::date",
            "SELECT k FROM t WHERE k = $1",
            "SELECT k FROM t WHERE k = 1; SELECT 2",
            "INSERT INTO t VALUES (1)",
            "CREATE MATERIALIZED VIEW v AS SELECT * FROM t WHERE k = 1",
            "SELECT CASE WHEN k = 1 THEN 2 END FROM t",
        ] {
            assert_eq!(lift(sql), None, "{sql}");
        }
    }

    #[test]
    fn values_convert_only_exactly() {
        let l = lift("SELECT * FROM t WHERE k = 1.5 AND d = 2 AND s = 'x'").unwrap();
        assert_eq!(l.values_as(&[Some(DataType::Int32), Some(DataType::Int64), Some(DataType::Utf8)]), None);
        let v = l.values_as(&[Some(DataType::Decimal128(10, 2)), Some(DataType::Int64), Some(DataType::Utf8)]).unwrap();
        assert_eq!(v[1], ScalarValue::Int64(Some(2)));
        assert_eq!(v[2], ScalarValue::Utf8(Some("x".into())));
        assert_eq!(
            l.values_as(&[Some(DataType::Decimal128(10, 0)), Some(DataType::Int64), Some(DataType::Utf8)]),
            None
        );
        assert_eq!(l.values_as(&[None, Some(DataType::Int64), Some(DataType::Utf8)]), None);
        let t = lift("SELECT * FROM t WHERE k = 'nope'").unwrap();
        assert_eq!(t.values_as(&[Some(DataType::Int32)]), None);
        let i = lift("SELECT * FROM t WHERE span > '1 day'").unwrap();
        let interval = DataType::Interval(datafusion::arrow::datatypes::IntervalUnit::MonthDayNano);
        assert_eq!(i.values_as(&[Some(interval)]), None, "intervals keep Weir's own reading");
    }
}
