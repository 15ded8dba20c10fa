//! Postgres functions DataFusion lacks, or has with other conventions, that clients' queries
//! call: `format(fmt, args...)` (Metabase's column sync builds type names and `regclass` casts
//! with it), `col_description` (no comments: NULL), and Postgres's date/time patterns in
//! `to_char`, `to_timestamp` and `to_date` (`'YYYY-MM-DD HH24:MI:SS'`, what Superset, Metabase
//! and people write), which DataFusion reads as chrono's (`%Y-%m-%d`): a pattern written as a
//! literal is translated when the statement is parsed ([`rewrite_datetime_patterns`]).
//!
//! The functions are registered on every session by `pg_catalog::register_functions`; the
//! rewrite is called by `frontend::parser`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

use super::df_context::argument_arrays;

/// `format(formatstr, args...)`: `%s` an argument as text (NULL as nothing), `%I` as an
/// identifier (quoted when it must be), `%L` as a literal (NULL as `NULL`), `%%` a percent sign;
/// `%n$s` takes argument `n`. A NULL format gives NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

pub fn format_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Format { signature: Signature::variadic_any(Volatility::Immutable) })
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if args.args.is_empty() {
            return datafusion::common::plan_err!("format needs a format string");
        }
        let (rows, arrays) = argument_arrays(&args.args)?;
        let texts = arrays
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<Vec<_>, _>>()?;
        let texts: Vec<_> = texts.iter().map(|t| t.as_string::<i32>()).collect();
        let mut out = StringBuilder::new();
        for row in 0..rows {
            if texts[0].is_null(row) {
                out.append_null();
                continue;
            }
            let values: Vec<Option<&str>> =
                texts[1..].iter().map(|t| (!t.is_null(row)).then(|| t.value(row))).collect();
            out.append_value(format_one(texts[0].value(row), &values)?);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// One `format` call.
fn format_one(format: &str, values: &[Option<&str>]) -> DfResult<String> {
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    let mut next = 0;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // `%n$` picks argument n (1-based); otherwise the next one.
        let mut digits = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        let index = if digits.is_empty() {
            None
        } else if chars.next_if_eq(&'$').is_some() {
            Some(digits.parse::<usize>().unwrap_or(0))
        } else {
            return datafusion::common::exec_err!("format: widths are not supported (\"%{digits}\")");
        };
        let Some(kind) = chars.next() else {
            return datafusion::common::exec_err!("unterminated format() type specifier");
        };
        if kind == '%' {
            out.push('%');
            continue;
        }
        let at = match index {
            Some(0) => {
                return datafusion::common::exec_err!("format specifies argument 0, but arguments are numbered from 1")
            }
            Some(n) => n - 1,
            None => next,
        };
        next = at + 1;
        let Some(value) = values.get(at) else {
            return datafusion::common::exec_err!("too few arguments for format()");
        };
        match (kind, value) {
            ('s', Some(v)) => out.push_str(v),
            ('s', None) => {}
            ('I', Some(v)) => out.push_str(&quote_ident(v)),
            ('I', None) => {
                return datafusion::common::exec_err!("null values cannot be formatted as an SQL identifier")
            }
            ('L', Some(v)) => out.push_str(&format!("'{}'", v.replace('\'', "''"))),
            ('L', None) => out.push_str("NULL"),
            (other, _) => return datafusion::common::exec_err!("unrecognized format() type specifier \"{other}\""),
        }
    }
    Ok(out)
}

/// `name` as an identifier: as it is when it reads as one unquoted, else in double quotes.
fn quote_ident(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// `col_description(table_oid, column)`: a column's comment. Weir keeps none: NULL.
pub fn col_description_udf() -> ScalarUDF {
    ScalarUDF::from(datafusion::logical_expr::expr_fn::SimpleScalarUDF::new_with_signature(
        "col_description",
        Signature::any(2, Volatility::Stable),
        DataType::Utf8,
        Arc::new(|_| Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::Utf8(None)))),
    ))
}

/// Postgres date/time pattern fields and their chrono equivalents, longest first.
const FIELDS: &[(&str, &str)] = &[
    ("HH24", "%H"),
    ("SSSS", ""),
    ("HH12", "%I"),
    ("IYYY", "%G"),
    ("YYYY", "%Y"),
    ("MONTH", "%B"),
    ("DDD", "%j"),
    ("MON", "%b"),
    ("DAY", "%A"),
    ("YY", "%y"),
    ("MM", "%m"),
    ("DD", "%d"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MS", "%3f"),
    ("US", "%6f"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("DY", "%a"),
    ("IW", "%V"),
];

/// A Postgres date/time pattern (`YYYY-MM-DD HH24:MI:SS.US`) as chrono's (`%Y-%m-%d
/// %H:%M:%S.%6f`); fields match in any case, `FM` drops a field's padding, double-quoted text and
/// anything else is literal. None for a pattern with a field chrono has no equivalent of
/// (`Q`, `CC`, `J`...), which is left as it is.
pub fn chrono_pattern(pattern: &str) -> Option<String> {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let (literal, after) = match rest[1..].find('"') {
                Some(i) => (&rest[1..1 + i], &rest[i + 2..]),
                None => (&rest[1..], ""),
            };
            out.push_str(&literal.replace('%', "%%"));
            rest = after;
            continue;
        }
        let (fill_mode, after_fm) = match rest.get(..2) {
            Some(fm) if fm.eq_ignore_ascii_case("FM") => (true, &rest[2..]),
            _ => (false, rest),
        };
        // Lower-case am/pm asks for lower-case output; other fields match in any case.
        if after_fm.starts_with("am") || after_fm.starts_with("pm") {
            out.push_str("%P");
            rest = &after_fm[2..];
            continue;
        }
        let field =
            FIELDS.iter().find(|(name, _)| after_fm.get(..name.len()).is_some_and(|p| p.eq_ignore_ascii_case(name)));
        if let Some((_, "")) = field {
            // SSSS (seconds past midnight): chrono has no such field.
            return None;
        }
        if let Some((name, chrono)) = field {
            let chrono = if fill_mode && matches!(*name, "HH24" | "HH12" | "HH" | "MM" | "DD" | "DDD" | "MI" | "SS") {
                format!("%-{}", &chrono[1..])
            } else {
                chrono.to_string()
            };
            out.push_str(&chrono);
            rest = &after_fm[name.len()..];
            continue;
        }
        if c.is_ascii_alphabetic() {
            // A letter that starts no field chrono can write: a field Weir cannot translate
            // (`Q`, `CC`, `J`, `W`, `D`...), or a letter Postgres would also take as a field.
            return None;
        }
        if c == '%' {
            out.push_str("%%");
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// `to_char(x, 'pattern')`, `to_timestamp(text, 'pattern')` and `to_date(text, 'pattern')` with a
/// literal Postgres pattern get its chrono form; a pattern with a `%` in it is chrono's already
/// and stays.
pub fn rewrite_datetime_patterns(statement: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value,
    };
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Function(f) = expr {
            let name = f.name.to_string().to_ascii_lowercase();
            let name = name.trim_start_matches("pg_catalog.");
            if matches!(name, "to_char" | "to_timestamp" | "to_date") {
                if let FunctionArguments::List(list) = &mut f.args {
                    if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))) = list.args.get_mut(1)
                    {
                        if let Value::SingleQuotedString(pattern) = &mut value.value {
                            if !pattern.contains('%') {
                                if let Some(translated) = chrono_pattern(pattern) {
                                    *pattern = translated;
                                }
                            }
                        }
                    }
                }
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use super::{chrono_pattern, format_one};

    #[test]
    fn postgres_datetime_patterns_as_chrono() {
        let t = |p: &str| chrono_pattern(p);
        assert_eq!(t("YYYY-MM-DD HH24:MI:SS.US").as_deref(), Some("%Y-%m-%d %H:%M:%S.%6f"));
        assert_eq!(t("yyyy-mm-dd").as_deref(), Some("%Y-%m-%d"));
        assert_eq!(t("FMDD Mon YYYY, HH12:MI AM").as_deref(), Some("%-d %b %Y, %I:%M %p"));
        assert_eq!(t("\"week\" IW, YYYY").as_deref(), Some("week %V, %Y"));
        assert_eq!(t("YYYY-MM-DD\"T\"HH24:MI:SS.MS").as_deref(), Some("%Y-%m-%dT%H:%M:%S.%3f"));
        assert_eq!(t("YYYY \"Q\"Q"), None);
        assert_eq!(t("100%").as_deref(), Some("100%%"));
        assert_eq!(t("HH12:MI am").as_deref(), Some("%I:%M %P"));
        assert_eq!(t("HH12:MI PM").as_deref(), Some("%I:%M %p"));
        assert_eq!(t("SSSS"), None);
        assert_eq!(t("YYYY TZ"), None);
    }

    #[test]
    fn formats_as_postgres_does() {
        let f = |fmt: &str, values: &[Option<&str>]| format_one(fmt, values).unwrap();
        assert_eq!(f("%s.%I", &[Some("public"), Some("Orders x")]), "public.\"Orders x\"");
        assert_eq!(f("%I.%I", &[Some("public"), Some("orders")]), "public.orders");
        assert_eq!(f("%L and %L", &[Some("it's"), None]), "'it''s' and NULL");
        assert_eq!(f("[%s]%%", &[None]), "[]%");
        assert_eq!(f("%2$s %1$s %s", &[Some("a"), Some("b")]), "b a b");
        assert!(format_one("%s %s", &[Some("a")]).is_err());
        assert!(format_one("%x", &[Some("a")]).is_err());
    }
}
