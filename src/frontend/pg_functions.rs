//! Postgres functions DataFusion lacks, or has with other conventions, that clients' queries
//! call: `format(fmt, args...)` (Metabase's column sync builds type names and `regclass` casts
//! with it), `col_description` (no comments: NULL), and Postgres's date/time patterns in
//! `to_char`, `to_timestamp` and `to_date` (`'YYYY-MM-DD HH24:MI:SS'`, what Superset, Metabase
//! and people write), which DataFusion reads as chrono's (`%Y-%m-%d`): a pattern written as a
//! literal is translated when the statement is parsed ([`rewrite_datetime_patterns`]); and
//! `regexp_matches(text, pattern [, flags])`, here the array of its rows, which the select-list
//! rewrite unnests (`ast_rewrites::series_in_select_lists`).
//!
//! The functions are registered on every session by `pg_catalog::register_functions`; the
//! rewrite is called by `frontend::parser`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, StringBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

use super::function_args::argument_arrays;
use crate::error::{SqlState, WeirError};

/// `regexp_matches(string, pattern [, flags])`: PostgreSQL's set-returning function as the
/// array of its rows (each a `text[]` of the match's capture groups, or of the whole match
/// without groups; a group that matched nothing is NULL): the first match, or with flag `g`
/// every one; none without a match, and for a NULL argument. Flags: `g`, `i` (case-insensitive),
/// `c` (case-sensitive, the default), `n` (newline-sensitive: `.` and `[^...]` stop at
/// newlines, `^` and `$` match at them), `s` (the default: not newline-sensitive), `x`
/// (expanded: whitespace and `#` comments ignored); another is 22023.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RegexpMatches {
    signature: Signature,
}

pub fn regexp_matches_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(RegexpMatches { signature: Signature::variadic_any(Volatility::Immutable) })
}

/// The type of one match: `text[]`.
fn match_type() -> DataType {
    DataType::List(Arc::new(datafusion::arrow::datatypes::Field::new_list_field(DataType::Utf8, true)))
}

impl ScalarUDFImpl for RegexpMatches {
    fn name(&self) -> &str {
        "regexp_matches"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::List(Arc::new(datafusion::arrow::datatypes::Field::new_list_field(match_type(), true))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        use datafusion::arrow::array::{ListBuilder, StringBuilder};
        if !(2..=3).contains(&args.args.len()) {
            return datafusion::common::plan_err!("regexp_matches takes a string, a pattern and optional flags");
        }
        let (rows, arrays) = argument_arrays(&args.args)?;
        let texts = arrays
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<Vec<_>, _>>()?;
        let texts: Vec<_> = texts.iter().map(|t| t.as_string::<i32>()).collect();
        let mut out = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
        let mut compiled: Option<(String, String, regex::Regex, bool)> = None;
        for row in 0..rows {
            if texts.iter().any(|t| t.is_null(row)) {
                out.append(true);
                continue;
            }
            let (pattern, flags) = (texts[1].value(row), texts.get(2).map_or("", |f| f.value(row)));
            if compiled.as_ref().is_none_or(|(p, f, _, _)| p != pattern || f != flags) {
                let (regex, global) = regex_with_flags(pattern, flags)?;
                compiled = Some((pattern.to_string(), flags.to_string(), regex, global));
            }
            let (_, _, regex, global) = compiled.as_ref().expect("compiled above");
            for captures in regex.captures_iter(texts[0].value(row)) {
                let groups = out.values();
                match captures.len() {
                    1 => groups.values().append_value(captures.get(0).map_or("", |m| m.as_str())),
                    n => {
                        for i in 1..n {
                            groups.values().append_option(captures.get(i).map(|m| m.as_str()));
                        }
                    }
                }
                groups.append(true);
                if !global {
                    break;
                }
            }
            out.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `pattern` compiled under PostgreSQL's `flags`, and whether `g` asks for every match.
fn regex_with_flags(pattern: &str, flags: &str) -> DfResult<(regex::Regex, bool)> {
    let mut builder = regex::RegexBuilder::new(pattern);
    let mut global = false;
    for flag in flags.chars() {
        match flag {
            'g' => global = true,
            'i' => _ = builder.case_insensitive(true),
            'c' => _ = builder.case_insensitive(false),
            'n' => _ = builder.multi_line(true).dot_matches_new_line(false),
            's' => _ = builder.multi_line(false).dot_matches_new_line(true),
            'x' => _ = builder.ignore_whitespace(true),
            other => {
                return Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("invalid regular expression option: \"{other}\""),
                )
                .into())
            }
        }
    }
    // PostgreSQL's default: `.` matches a newline.
    if !flags.contains('n') && !flags.contains('s') {
        builder.dot_matches_new_line(true);
    }
    let regex = builder.build().map_err(|e| {
        WeirError::new(SqlState::INVALID_REGULAR_EXPRESSION, format!("invalid regular expression: {e}"))
    })?;
    Ok((regex, global))
}

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
        // %[n$][-][width | * | *m$]type: `n$` picks argument n (1-based), otherwise the next
        // one; a width pads to that many characters, on the left unless `-`; `*` takes the
        // width from an argument (a negative one left-aligns).
        let argument = |n: usize| -> DfResult<usize> {
            match n {
                0 => datafusion::common::exec_err!("format specifies argument 0, but arguments are numbered from 1"),
                n => Ok(n - 1),
            }
        };
        let mut index = None;
        let mut width: Option<i64> = None;
        let digits = take_digits(&mut chars);
        if !digits.is_empty() {
            if chars.next_if_eq(&'$').is_some() {
                index = Some(argument(digits.parse::<usize>().unwrap_or(0))?);
            } else {
                width = Some(digits.parse::<i64>().unwrap_or(i64::MAX));
            }
        }
        let mut left = false;
        if width.is_none() {
            while chars.next_if_eq(&'-').is_some() {
                left = true;
            }
            if chars.next_if_eq(&'*').is_some() {
                let digits = take_digits(&mut chars);
                let at = if digits.is_empty() {
                    next
                } else if chars.next_if_eq(&'$').is_some() {
                    argument(digits.parse::<usize>().unwrap_or(0))?
                } else {
                    return datafusion::common::exec_err!("unterminated format() type specifier");
                };
                next = at + 1;
                let Some(value) = values.get(at) else {
                    return datafusion::common::exec_err!("too few arguments for format()");
                };
                let Some(value) = value else {
                    return datafusion::common::exec_err!("width argument must not be NULL");
                };
                width = match value.trim().parse::<i64>() {
                    Ok(w) => Some(w),
                    Err(_) => return datafusion::common::exec_err!("invalid width argument \"{value}\""),
                };
            } else {
                let digits = take_digits(&mut chars);
                if !digits.is_empty() {
                    width = Some(digits.parse::<i64>().unwrap_or(i64::MAX));
                }
            }
        }
        if width.is_some_and(|w| w < 0) {
            left = true;
        }
        let Some(kind) = chars.next() else {
            return datafusion::common::exec_err!("unterminated format() type specifier");
        };
        if kind == '%' {
            out.push('%');
            continue;
        }
        let at = index.unwrap_or(next);
        next = at + 1;
        let Some(value) = values.get(at) else {
            return datafusion::common::exec_err!("too few arguments for format()");
        };
        let text = match (kind, value) {
            ('s', Some(v)) => v.to_string(),
            ('s', None) => String::new(),
            ('I', Some(v)) => quote_ident(v),
            ('I', None) => {
                return datafusion::common::exec_err!("null values cannot be formatted as an SQL identifier")
            }
            ('L', Some(v)) => format!("'{}'", v.replace('\'', "''")),
            ('L', None) => "NULL".to_string(),
            (other, _) => return datafusion::common::exec_err!("unrecognized format() type specifier \"{other}\""),
        };
        // Postgres: a width past int's range is an error; Weir also bounds the padding.
        if width.is_some_and(|w| w.unsigned_abs() > i32::MAX as u64) {
            return Err(crate::error::WeirError::new(
                crate::error::SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                "number is out of range",
            )
            .into());
        }
        let pad = width.map_or(0, |w| (w.unsigned_abs() as usize).saturating_sub(text.chars().count()));
        if pad > MAX_FORMAT_PADDING {
            return Err(crate::error::WeirError::new(
                crate::error::SqlState("54000"),
                format!("format() width {} is past the limit of {MAX_FORMAT_PADDING} characters", pad),
            )
            .into());
        }
        if left {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&text);
        }
    }
    Ok(out)
}

/// Postgres 15's keywords that are not unreserved (reserved, type or function names, column
/// names), sorted: an identifier spelled like one must be quoted.
const RESERVED_KEYWORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
];

/// `quote_ident(text)`: [`quote_ident`] of each value.
pub fn quote_ident_udf() -> ScalarUDF {
    ScalarUDF::from(datafusion::logical_expr::expr_fn::SimpleScalarUDF::new_with_signature(
        "quote_ident",
        Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        DataType::Utf8,
        Arc::new(|args: &[ColumnarValue]| {
            let (_, arrays) = argument_arrays(args)?;
            let names = arrays[0].as_string::<i32>();
            let quoted: datafusion::arrow::array::StringArray =
                names.iter().map(|name| name.map(quote_ident)).collect();
            Ok(ColumnarValue::Array(Arc::new(quoted)))
        }),
    ))
}

/// The most padding one `format()` field may add (Postgres stops at its 1 GB allocation limit;
/// a width that large from a row's data must not take the server's memory).
const MAX_FORMAT_PADDING: usize = 64 << 20;

/// The digits at the front of `chars`, taken.
fn take_digits(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> String {
    let mut digits = String::new();
    while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
        digits.push(d);
    }
    digits
}

/// `name` as an identifier: as it is when it reads as one unquoted (lower case, not a keyword
/// Postgres reserves in any way), else in double quotes. What `quote_ident` and `%I` give.
pub fn quote_ident(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$')
        && RESERVED_KEYWORDS.binary_search(&name).is_err();
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

/// A piece of a translated date/time pattern: chrono's text for it, and for a month or day
/// name the case and width Postgres gives it, which chrono cannot.
#[derive(Debug, Clone, PartialEq)]
struct PatternPiece {
    chrono: String,
    /// `MONTH` upper-cases the name, `month` lower-cases it (`Month`: as chrono writes it).
    case: NameCase,
    /// Month and day names are blank-padded to 9 characters unless `FM` precedes them.
    width: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum NameCase {
    AsWritten,
    Upper,
    Lower,
}

/// A Postgres date/time pattern (`YYYY-MM-DD HH24:MI:SS.US`) as chrono's (`%Y-%m-%d
/// %H:%M:%S.%6f`); fields match in any case, `FM` drops a field's padding, double-quoted text and
/// anything else is literal. None for a pattern with a field chrono has no equivalent of
/// (`Q`, `CC`, `J`...), which is left as it is. Month and day names' case and padding are
/// not in it ([`pattern_pieces`] has them).
pub fn chrono_pattern(pattern: &str) -> Option<String> {
    Some(pattern_pieces(pattern)?.into_iter().map(|p| p.chrono).collect())
}

/// [`chrono_pattern`] in pieces: consecutive fields and text in one piece, each month or day
/// name field whose output chrono does not write as Postgres does in a piece of its own.
fn pattern_pieces(pattern: &str) -> Option<Vec<PatternPiece>> {
    let mut pieces: Vec<PatternPiece> = Vec::new();
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
            let written = &after_fm[..name.len()];
            rest = &after_fm[name.len()..];
            if matches!(*name, "MONTH" | "MON" | "DAY" | "DY") {
                // `MONTH`, `Month`, `month` (Postgres reads the case from the first two letters).
                let mut letters = written.chars();
                let case = match (letters.next(), letters.next()) {
                    (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_uppercase() => NameCase::Upper,
                    (Some(a), _) if a.is_ascii_lowercase() => NameCase::Lower,
                    _ => NameCase::AsWritten,
                };
                let width = (!fill_mode && matches!(*name, "MONTH" | "DAY")).then_some(9);
                if case != NameCase::AsWritten || width.is_some() {
                    if !out.is_empty() {
                        pieces.push(PatternPiece {
                            chrono: std::mem::take(&mut out),
                            case: NameCase::AsWritten,
                            width: None,
                        });
                    }
                    pieces.push(PatternPiece { chrono: chrono.to_string(), case, width });
                    continue;
                }
            }
            let chrono = if fill_mode && matches!(*name, "HH24" | "HH12" | "HH" | "MM" | "DD" | "DDD" | "MI" | "SS") {
                format!("%-{}", &chrono[1..])
            } else {
                chrono.to_string()
            };
            out.push_str(&chrono);
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
    if !out.is_empty() || pieces.is_empty() {
        pieces.push(PatternPiece { chrono: out, case: NameCase::AsWritten, width: None });
    }
    Some(pieces)
}

/// `to_char(x, 'pattern')`, `to_timestamp(text, 'pattern')` and `to_date(text, 'pattern')` with a
/// literal Postgres pattern get its chrono form; a pattern with a `%` in it is chrono's already
/// and stays. A `to_char` whose month or day names chrono writes otherwise than Postgres
/// (`MONTH` upper-case, `Month` padded to 9) becomes a concatenation of `to_char` calls, each
/// name's wrapped in `upper`/`lower` and `rpad`.
pub fn rewrite_datetime_patterns(statement: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{
        visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, SelectItem, Value,
        VisitMut, VisitorMut,
    };
    /// Names an unaliased select item that is such a `to_char` call `to_char`, as Postgres
    /// names it, before it becomes a concatenation.
    struct KeepToCharNames;
    impl VisitorMut for KeepToCharNames {
        type Break = ();
        fn pre_visit_select(
            &mut self,
            select: &mut datafusion::sql::sqlparser::ast::Select,
        ) -> std::ops::ControlFlow<()> {
            // Only where `to_char` is no other column's name (names in a plan are unique).
            let named_to_char = |item: &SelectItem| match item {
                SelectItem::UnnamedExpr(Expr::Function(f)) => {
                    f.name.to_string().to_ascii_lowercase().trim_start_matches("pg_catalog.") == "to_char"
                }
                SelectItem::ExprWithAlias { alias, .. } => alias.value.eq_ignore_ascii_case("to_char"),
                _ => false,
            };
            if select.projection.iter().filter(|i| named_to_char(i)).count() > 1 {
                return std::ops::ControlFlow::Continue(());
            }
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(expr) = item {
                    if split_to_char(expr).is_some() {
                        let expr = std::mem::replace(expr, Expr::value(Value::Null));
                        *item = SelectItem::ExprWithAlias { expr, alias: Ident::new("to_char") };
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    /// The pieces of `expr` if it is a `to_char` with a literal pattern that takes more than
    /// one `to_char` to write.
    fn split_to_char(expr: &Expr) -> Option<Vec<PatternPiece>> {
        let Expr::Function(f) = expr else { return None };
        let name = f.name.to_string().to_ascii_lowercase();
        if name.trim_start_matches("pg_catalog.") != "to_char" {
            return None;
        }
        let FunctionArguments::List(list) = &f.args else { return None };
        let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))) = list.args.get(1) else {
            return None;
        };
        let Value::SingleQuotedString(pattern) = &value.value else { return None };
        if pattern.contains('%') {
            return None;
        }
        pattern_pieces(pattern)
            .filter(|pieces| !(pieces.len() == 1 && pieces[0].case == NameCase::AsWritten && pieces[0].width.is_none()))
    }
    let _ = statement.visit(&mut KeepToCharNames);
    let _ = visit_expressions_mut(statement, |expr| {
        if let Some(pieces) = split_to_char(expr) {
            let Expr::Function(f) = expr else { unreachable!("split_to_char matched a call") };
            let FunctionArguments::List(list) = &f.args else { unreachable!("split_to_char matched arguments") };
            let FunctionArg::Unnamed(FunctionArgExpr::Expr(value)) = &list.args[0] else {
                return std::ops::ControlFlow::Continue(());
            };
            let parts: Vec<String> = pieces
                .iter()
                .map(|piece| {
                    let call = format!("to_char(({value}), '{}')", piece.chrono.replace('\'', "''"));
                    let call = match piece.width {
                        Some(width) => format!("rpad({call}, {width})"),
                        None => call,
                    };
                    match piece.case {
                        NameCase::Upper => format!("upper({call})"),
                        NameCase::Lower => format!("lower({call})"),
                        NameCase::AsWritten => call,
                    }
                })
                .collect();
            // `concat` skips NULLs; Postgres gives NULL for a NULL value.
            let sql = format!("CASE WHEN ({value}) IS NULL THEN NULL ELSE concat({}) END", parts.join(", "));
            let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
            let parsed = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
                .try_with_sql(&sql)
                .and_then(|mut p| p.parse_expr());
            if let Ok(rewritten) = parsed {
                *expr = rewritten;
            }
            return std::ops::ControlFlow::Continue(());
        }
        let Expr::Function(f) = expr else { return std::ops::ControlFlow::<()>::Continue(()) };
        let name = f.name.to_string().to_ascii_lowercase();
        if !matches!(name.trim_start_matches("pg_catalog."), "to_char" | "to_timestamp" | "to_date") {
            return std::ops::ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &mut f.args else { return std::ops::ControlFlow::Continue(()) };
        let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))) = list.args.get_mut(1) else {
            return std::ops::ControlFlow::Continue(());
        };
        let Value::SingleQuotedString(pattern) = &mut value.value else { return std::ops::ControlFlow::Continue(()) };
        if !pattern.contains('%') {
            if let Some(translated) = chrono_pattern(pattern) {
                *pattern = translated;
            }
        }
        std::ops::ControlFlow::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use super::{chrono_pattern, format_one, rewrite_datetime_patterns};

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
    fn month_and_day_names_get_postgres_case_and_padding() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let rewritten = |sql: &str| {
            let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0);
            rewrite_datetime_patterns(&mut statement);
            statement.to_string()
        };
        assert_eq!(rewritten("SELECT to_char(d, 'FMMonth YYYY')"), "SELECT to_char(d, '%B %Y')");
        assert_eq!(rewritten("SELECT to_char(d, 'Mon DD')"), "SELECT to_char(d, '%b %d')");
        assert_eq!(
            rewritten("SELECT to_char(d, 'MONTH DD')"),
            "SELECT CASE WHEN (d) IS NULL THEN NULL ELSE concat(upper(rpad(to_char((d), '%B'), 9)), to_char((d), ' %d')) END AS to_char"
        );
        assert_eq!(
            rewritten("SELECT to_char(d, 'dy, FMday')"),
            "SELECT CASE WHEN (d) IS NULL THEN NULL ELSE concat(lower(to_char((d), '%a')), to_char((d), ', '), lower(to_char((d), '%A'))) END AS to_char"
        );
        // Parsing is case-blind: to_date keeps one pattern.
        assert_eq!(rewritten("SELECT to_date(s, 'DD MONTH YYYY')"), "SELECT to_date(s, '%d %B %Y')");
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
        assert_eq!(f("|%5s|%-5s|%-3s|", &[Some("ab"), Some("cd"), Some("long")]), "|   ab|cd   |long|");
        assert_eq!(f("|%*s|%-*s|", &[Some("4"), Some("x"), Some("-3"), Some("y")]), "|   x|y  |");
        assert_eq!(f("|%*s|", &[Some("-3"), Some("z")]), "|z  |");
        assert_eq!(f("|%1$5s|%1$-5L|", &[Some("v")]), "|    v|'v'  |");
        assert_eq!(f("|%3s|", &[None]), "|   |");
        assert_eq!(f("%I %I %I", &[Some("select"), Some("Ab"), Some("name")]), "\"select\" \"Ab\" name");
        assert!(super::RESERVED_KEYWORDS.windows(2).all(|w| w[0] < w[1]));
    }
}
