//! `json` and `jsonb` in queries: casts, operators and functions, over JSON text in Arrow
//! strings (`types::json`).
//!
//! - Casts: `x::jsonb` is `jsonb_in(x)` (checked, written as Postgres writes jsonb), `x::json`
//!   `json_in(x)` (checked, kept as written); a malformed value is 22P02.
//! - Operators, rewritten in the parsed statement ([`rewrite_json_syntax`]) to functions:
//!   `->` `json_get`, `->>` `json_get_text`, `#>` `json_get_path`, `#>>` `json_get_path_text`,
//!   `@>` / `<@` `jsonb_contains`, `?` `jsonb_exists`.
//! - Functions: `jsonb_typeof` / `json_typeof`, `jsonb_array_length` / `json_array_length`,
//!   `jsonb_extract_path[_text]` / `json_extract_path[_text]`.
//!
//! A result that is JSON carries the declared type `jsonb` (or `json`, after `json_in` or on a
//! `json` input) as field metadata, so clients see OID 3802 / 114 and their drivers decode it.
//! Registered by `pg_catalog::register_functions`; the rewrite is called by `frontend::parser`.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::{self, BinaryOperator, DataType as SqlType, Expr};

use crate::types::json::{Json, PathStep};
use crate::types::pg_type::DeclaredType;

/// Rewrites JSON casts and operators in `statement` into the functions of this module.
pub fn rewrite_json_syntax(statement: &mut ast::Statement) {
    let _ = ast::visit_expressions_mut(statement, |expr| {
        let rewritten = match expr {
            Expr::Cast { expr: inner, data_type: SqlType::JSONB, .. } => Some(call("jsonb_in", vec![as_text(inner)])),
            Expr::Cast { expr: inner, data_type: SqlType::JSON, .. } => Some(call("json_in", vec![as_text(inner)])),
            Expr::BinaryOp { left, op, right } => {
                let (name, swap) = match op {
                    BinaryOperator::Arrow => ("json_get", false),
                    BinaryOperator::LongArrow => ("json_get_text", false),
                    BinaryOperator::HashArrow => ("json_get_path", false),
                    BinaryOperator::HashLongArrow => ("json_get_path_text", false),
                    BinaryOperator::AtArrow => ("jsonb_contains", false),
                    BinaryOperator::ArrowAt => ("jsonb_contains", true),
                    BinaryOperator::Question => ("jsonb_exists", false),
                    _ => return ControlFlow::<()>::Continue(()),
                };
                let (a, b) = ((**left).clone(), (**right).clone());
                Some(call(name, if swap { vec![b, a] } else { vec![a, b] }))
            }
            _ => None,
        };
        if let Some(rewritten) = rewritten {
            *expr = rewritten;
        }
        ControlFlow::Continue(())
    });
}

/// The name Postgres gives a result column computed by what [`rewrite_json_syntax`] made
/// function `name` of: the cast's type for a cast, none (`?column?`) for an operator. None
/// when `name` is not one of them.
pub fn column_name(name: &str) -> Option<Option<String>> {
    match name {
        "jsonb_in" => Some(Some("jsonb".to_string())),
        "json_in" => Some(Some("json".to_string())),
        "json_get" | "json_get_text" | "json_get_path" | "json_get_path_text" | "jsonb_contains" | "jsonb_exists" => {
            Some(None)
        }
        _ => None,
    }
}

/// The operand of a JSON cast; a parameter (`$1::jsonb`) cast to text, so that it is typed (a
/// client sends JSON as text).
fn as_text(inner: &Expr) -> Expr {
    match inner {
        Expr::Value(v) if matches!(v.value, ast::Value::Placeholder(_)) => Expr::Cast {
            kind: ast::CastKind::DoubleColon,
            expr: Box::new(inner.clone()),
            data_type: SqlType::Text,
            array: false,
            format: None,
        },
        other => other.clone(),
    }
}

/// A call of `name` with `args`, as the parser would have made it.
pub fn call(name: &str, args: Vec<Expr>) -> Expr {
    use ast::{Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, ObjectName};
    Expr::Function(Function {
        name: ObjectName::from(vec![ast::Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args.into_iter().map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a))).collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// Every function of this module, to register.
pub fn json_udfs() -> Vec<ScalarUDF> {
    use JsonOp::*;
    [
        ("jsonb_in", In { jsonb: true }),
        ("json_in", In { jsonb: false }),
        ("json_get", Get { text: false }),
        ("json_get_text", Get { text: true }),
        ("json_get_path", Path { text: false, one_array: true }),
        ("json_get_path_text", Path { text: true, one_array: true }),
        ("jsonb_extract_path", Path { text: false, one_array: false }),
        ("json_extract_path", Path { text: false, one_array: false }),
        ("jsonb_extract_path_text", Path { text: true, one_array: false }),
        ("json_extract_path_text", Path { text: true, one_array: false }),
        ("jsonb_typeof", TypeOf),
        ("json_typeof", TypeOf),
        ("jsonb_array_length", ArrayLength),
        ("json_array_length", ArrayLength),
        ("jsonb_contains", Contains),
        ("jsonb_exists", Exists),
    ]
    .into_iter()
    .map(|(name, op)| {
        let signature = match op {
            Path { .. } => Signature::variadic_any(Volatility::Immutable),
            // Text in: a parameter cast to json (`$1::jsonb`) is text to its client.
            In { .. } => Signature::string(1, Volatility::Immutable),
            TypeOf | ArrayLength => Signature::any(1, Volatility::Immutable),
            Get { .. } | Contains | Exists => Signature::any(2, Volatility::Immutable),
        };
        ScalarUDF::new_from_impl(JsonFunction { name, op, signature })
    })
    .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum JsonOp {
    In {
        jsonb: bool,
    },
    Get {
        text: bool,
    },
    /// `one_array`: the path is one text array (`#>`), else one argument a step.
    Path {
        text: bool,
        one_array: bool,
    },
    TypeOf,
    ArrayLength,
    Contains,
    Exists,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonFunction {
    name: &'static str,
    op: JsonOp,
    signature: Signature,
}

const JSON: DeclaredType = DeclaredType { oid: 114, typmod: -1 };
const JSONB: DeclaredType = DeclaredType { oid: 3802, typmod: -1 };

impl JsonFunction {
    /// The declared type of a JSON result: `json` for `json_in` or when the first argument is
    /// `json`, else `jsonb`.
    fn json_kind(&self, first: Option<&FieldRef>) -> DeclaredType {
        match self.op {
            JsonOp::In { jsonb } => {
                if jsonb {
                    JSONB
                } else {
                    JSON
                }
            }
            _ if first.and_then(|f| DeclaredType::of(f)) == Some(JSON) => JSON,
            _ => JSONB,
        }
    }
}

impl ScalarUDFImpl for JsonFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(match self.op {
            JsonOp::ArrayLength => DataType::Int32,
            JsonOp::Contains | JsonOp::Exists => DataType::Boolean,
            _ => DataType::Utf8,
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let field = Field::new(self.name, self.return_type(&[])?, true);
        let json =
            matches!(self.op, JsonOp::In { .. } | JsonOp::Get { text: false } | JsonOp::Path { text: false, .. });
        Ok(Arc::new(if json { self.json_kind(args.arg_fields.first()).on(field) } else { field }))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // `@>` and `<@` of two arrays are array containment, as before JSON came.
        let is_list = |f: &FieldRef| {
            matches!(f.data_type(), DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..))
        };
        if self.op == JsonOp::Contains && args.arg_fields.iter().all(is_list) {
            return datafusion::functions_nested::array_has::array_has_all_udf().invoke_with_args(args);
        }
        let scalars = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let (rows, arrays) = super::function_args::argument_arrays(&args.args)?;
        // As text: the JSON value, and the right-hand side of `@>` and `?` (paths and steps are
        // read from their own arrays).
        let as_text = if matches!(self.op, JsonOp::Contains | JsonOp::Exists) { 2 } else { 1 };
        let texts: Vec<ArrayRef> = arrays[..as_text]
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<std::result::Result<_, _>>()?;
        let kind = if self.json_kind(args.arg_fields.first()) == JSON { "json" } else { "jsonb" };
        let parse = |row: usize| -> Result<Option<Json>> {
            let values = texts[0].as_string::<i32>();
            if values.is_null(row) {
                return Ok(None);
            }
            Json::parse(values.value(row), kind).map(Some).map_err(DataFusionError::from)
        };
        let result: ArrayRef = match self.op {
            JsonOp::In { jsonb } => {
                let mut out = StringBuilder::new();
                for row in 0..rows {
                    match parse(row)? {
                        None => out.append_null(),
                        Some(_) if !jsonb => out.append_value(texts[0].as_string::<i32>().value(row)),
                        Some(value) => out.append_value(value.to_jsonb().to_jsonb_text()),
                    }
                }
                Arc::new(out.finish())
            }
            JsonOp::Get { text } | JsonOp::Path { text, .. } => {
                let mut out = StringBuilder::new();
                // Each step argument read once, not once a row.
                let step_columns: Vec<Vec<Option<PathStep>>> = match self.op {
                    JsonOp::Path { one_array: true, .. } => vec![],
                    _ => arrays[1..].iter().map(steps).collect::<Result<_>>()?,
                };
                for row in 0..rows {
                    let steps = match self.op {
                        JsonOp::Path { one_array: true, .. } => arrays.get(1).and_then(|a| path_array(a, row)),
                        _ => step_columns.iter().map(|c| c[row].clone()).collect(),
                    };
                    // `->` takes a text step as a key only (`'[1]' -> '0'` is NULL); paths read an
                    // array's element by a number written as text.
                    let found = match (parse(row)?, steps) {
                        (Some(value), Some(steps)) => {
                            let at = match self.op {
                                JsonOp::Get { .. } => steps.first().and_then(|s| value.get(s)),
                                _ => value.path(steps),
                            };
                            at.map(|v| if text { v.as_text() } else { Some(v.to_jsonb_text()) })
                        }
                        _ => None,
                    };
                    out.append_option(found.flatten());
                }
                Arc::new(out.finish())
            }
            JsonOp::TypeOf => {
                let mut out = StringBuilder::new();
                for row in 0..rows {
                    out.append_option(parse(row)?.map(|v| v.type_name()));
                }
                Arc::new(out.finish())
            }
            JsonOp::ArrayLength => {
                let mut out = Int32Builder::new();
                for row in 0..rows {
                    match parse(row)? {
                        None => out.append_null(),
                        Some(Json::Array(items)) => out.append_value(items.len() as i32),
                        Some(_) => {
                            return Err(crate::error::WeirError::new(
                                crate::error::SqlState::INVALID_PARAMETER_VALUE,
                                "cannot get array length of a non-array",
                            )
                            .into())
                        }
                    }
                }
                Arc::new(out.finish())
            }
            // `left @> right` and `value ? key`: one test of the JSON value and the right side.
            JsonOp::Contains | JsonOp::Exists => {
                let right = texts[1].as_string::<i32>();
                let mut out = BooleanBuilder::new();
                for row in 0..rows {
                    match parse(row)? {
                        Some(value) if right.is_valid(row) => out.append_value(match self.op {
                            JsonOp::Contains => contains(&value, &Json::parse(right.value(row), "jsonb")?, true),
                            _ => has_key(&value, right.value(row)),
                        }),
                        _ => out.append_null(),
                    }
                }
                Arc::new(out.finish())
            }
        };
        if scalars {
            return Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&result, 0)?));
        }
        Ok(ColumnarValue::Array(result))
    }
}

/// The path step each row of `array` names: an integer an array index, anything else an
/// object key (None: NULL).
fn steps(array: &ArrayRef) -> Result<Vec<Option<PathStep>>> {
    if array.data_type().is_integer() {
        let as_i64 = datafusion::arrow::compute::cast(array, &DataType::Int64)?;
        return Ok(as_i64
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .iter()
            .map(|i| i.map(PathStep::Index))
            .collect());
    }
    let text = datafusion::arrow::compute::cast(array, &DataType::Utf8)?;
    Ok(text.as_string::<i32>().iter().map(|k| k.map(|k| PathStep::Key(k.to_string()))).collect())
}

/// The path `#>` takes: a text array, or its literal (`'{a,b}'`). None when it is NULL or
/// any step is.
fn path_array(array: &ArrayRef, row: usize) -> Option<Vec<PathStep>> {
    if array.is_null(row) {
        return None;
    }
    let keys: Vec<Option<String>> = match array.data_type() {
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            let list = datafusion::arrow::compute::cast(array, &DataType::new_list(DataType::Utf8, true)).ok()?;
            let steps = list.as_list::<i32>().value(row);
            steps.as_string::<i32>().iter().map(|s| s.map(str::to_string)).collect()
        }
        _ => {
            let text = datafusion::arrow::compute::cast(array, &DataType::Utf8).ok()?;
            array_literal(text.as_string::<i32>().value(row))?
        }
    };
    keys.into_iter().map(|k| k.map(PathStep::Key)).collect()
}

/// The elements of a one-dimensional Postgres array literal (`{a,"b c",NULL}`); None if it is
/// not one.
fn array_literal(text: &str) -> Option<Vec<Option<String>>> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut out = Vec::new();
    if inner.trim().is_empty() {
        return Some(out);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut element = String::new();
        let quoted = chars.next_if_eq(&'"').is_some();
        if quoted {
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => element.push(chars.next()?),
                    c => element.push(c),
                }
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
        } else {
            while let Some(c) = chars.next_if(|&c| c != ',') {
                element.push(c);
            }
            element = element.trim().to_string();
        }
        out.push((quoted || !element.eq_ignore_ascii_case("null")).then_some(element));
        match chars.next() {
            None => return Some(out),
            Some(',') => continue,
            Some(_) => return None,
        }
    }
}

/// Postgres's `value ? key`: an object's key, an array's string element, the string itself.
fn has_key(value: &Json, key: &str) -> bool {
    match value {
        Json::Object(members) => members.iter().any(|(k, _)| k == key),
        Json::Array(items) => items.iter().any(|i| matches!(i, Json::String(s) if s == key)),
        Json::String(s) => s == key,
        _ => false,
    }
}

/// Postgres's jsonb containment: `left @> right`.
fn contains(left: &Json, right: &Json, top: bool) -> bool {
    match (left, right) {
        (Json::Object(l), Json::Object(r)) => r
            .iter()
            .all(|(key, rv)| l.iter().rev().find(|(k, _)| k == key).is_some_and(|(_, lv)| contains(lv, rv, false))),
        (Json::Array(l), Json::Array(r)) => r.iter().all(|rv| l.iter().any(|lv| contains(lv, rv, false))),
        // A top-level array contains a scalar it holds.
        (Json::Array(l), scalar) if top && !matches!(scalar, Json::Object(_) | Json::Array(_)) => {
            l.iter().any(|lv| contains(lv, scalar, false))
        }
        (Json::Number(a), Json::Number(b)) => crate::types::json::numbers_equal(a, b),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_as_postgres() {
        let j = |t: &str| Json::parse(t, "jsonb").unwrap();
        assert!(contains(&j(r#"{"a":1,"b":{"c":[1,2,3]}}"#), &j(r#"{"b":{"c":[3]}}"#), true));
        assert!(!contains(&j(r#"{"a":1}"#), &j(r#"{"a":2}"#), true));
        assert!(contains(&j(r#"[1,2,[3]]"#), &j(r#"[[3],1]"#), true));
        assert!(contains(&j(r#"["a","b"]"#), &j(r#""a""#), true));
        assert!(!contains(&j(r#"{"a":["x"]}"#), &j(r#"{"a":"x"}"#), true));
        assert!(contains(&j("1.0"), &j("1"), true));
    }

    #[test]
    fn path_literals() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(array_literal("{a,b}"), Some(vec![s("a"), s("b")]));
        assert_eq!(array_literal(r#"{ "x y" , "q\"z", NULL, 0}"#), Some(vec![s("x y"), s("q\"z"), None, s("0")]));
        assert_eq!(array_literal("{}"), Some(vec![]));
        assert_eq!(array_literal("a,b"), None);
    }

    #[test]
    fn operators_become_functions() {
        use datafusion::sql::sqlparser::{dialect::PostgreSqlDialect, parser::Parser};
        let mut statement = Parser::parse_sql(
            &PostgreSqlDialect {},
            "SELECT p -> 'a' ->> 0, p #>> '{a,b}', p @> '{}'::jsonb, '{}' <@ p, p ? 'k', x::json FROM t",
        )
        .unwrap()
        .remove(0);
        rewrite_json_syntax(&mut statement);
        assert_eq!(
            statement.to_string(),
            "SELECT json_get_text(json_get(p, 'a'), 0), json_get_path_text(p, '{a,b}'), jsonb_contains(p, jsonb_in('{}')), \
             jsonb_contains(p, '{}'), jsonb_exists(p, 'k'), json_in(x) FROM t"
        );
    }
}
