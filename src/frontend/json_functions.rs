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
//! - Aggregates: `jsonb_agg(x [ORDER BY ...])` / `json_agg`, rewritten to the JSON array of
//!   `array_agg`'s list (`jsonb_agg_array`), so views keep them as they keep `array_agg`.
//!
//! A result that is JSON carries the declared type `jsonb` (or `json`, after `json_in` or on a
//! `json` input) as field metadata, so clients see OID 3802 / 114 and their drivers decode it.
//! Registered by `pg_catalog::register_functions`; the rewrite is called by `frontend::parser`.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::ScalarValue;
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
            // `jsonb_agg(x [ORDER BY ...])`: the JSON array of `array_agg` of each value's JSON
            // text (made where its type is known: a `jsonb` value is embedded as it is), which
            // views keep incrementally, in any order the call asks for.
            Expr::Function(f) if f.over.is_none() && json_aggregate(f).is_some() => {
                let array = json_aggregate(f).expect("matched");
                let mut list = f.clone();
                list.name = ast::ObjectName::from(vec![ast::Ident::new("array_agg")]);
                if let ast::FunctionArguments::List(args) = &mut list.args {
                    if let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(value))) = args.args.first_mut() {
                        *value = call("to_json_text", vec![value.clone()]);
                    }
                }
                Some(call(array, vec![Expr::Function(list)]))
            }
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

/// The function making the JSON array of `f`'s list, when `f` is `jsonb_agg` or `json_agg`.
fn json_aggregate(f: &ast::Function) -> Option<&'static str> {
    let [part] = f.name.0.as_slice() else { return None };
    match part.as_ident()?.value.to_ascii_lowercase().as_str() {
        "jsonb_agg" => Some("jsonb_agg_array"),
        "json_agg" => Some("json_agg_array"),
        _ => None,
    }
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
        ("jsonb_agg_array", Array { jsonb: true }),
        ("json_agg_array", Array { jsonb: false }),
        ("to_json_text", ToJsonText),
    ]
    .into_iter()
    .map(|(name, op)| {
        let signature = match op {
            Path { .. } => Signature::variadic_any(Volatility::Immutable),
            // Text in: a parameter cast to json (`$1::jsonb`) is text to its client.
            In { .. } => Signature::string(1, Volatility::Immutable),
            TypeOf | ArrayLength | Array { .. } | ToJsonText => Signature::any(1, Volatility::Immutable),
            // Two arrays are coerced to one element type (`JsonFunction::coerce_types`).
            Contains => Signature::user_defined(Volatility::Immutable),
            Get { .. } | Exists => Signature::any(2, Volatility::Immutable),
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
    /// A list of JSON texts (`array_agg`'s) as a JSON array: `jsonb_agg` and `json_agg`.
    Array {
        jsonb: bool,
    },
    /// Any value as the JSON text Postgres's `to_json` gives it (NULL as `null`): what
    /// `jsonb_agg` collects.
    ToJsonText,
}

/// The element type of an array type.
fn list_element(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(f.data_type()),
        _ => None,
    }
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
            JsonOp::In { jsonb } | JsonOp::Array { jsonb } => {
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

    /// Only `@>` / `<@` (the one user-defined signature): two arrays of different element types
    /// are compared as arrays of one type, as Postgres reads `ARRAY[1, 2] @> ARRAY['1']` (the
    /// text side is read as the other's type: an error for text that is not one); arrays with no
    /// common type are refused here, while planning (`integer[] @> boolean[]`). JSON arguments
    /// pass as they are.
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [left, right] = args else {
            return Err(DataFusionError::Plan(format!("function {} takes two arguments", self.name)));
        };
        let (Some(l), Some(r)) = (list_element(left), list_element(right)) else {
            return Ok(args.to_vec());
        };
        if l == r {
            return Ok(args.to_vec());
        }
        let textual = |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
        let common = match (textual(l), textual(r)) {
            (true, false) => Some(r.clone()),
            (false, true) => Some(l.clone()),
            _ => datafusion::logical_expr::type_coercion::binary::comparison_coercion(l, r),
        };
        match common {
            Some(element) => {
                let list = DataType::List(Arc::new(Field::new_list_field(element, true)));
                Ok(vec![list.clone(), list])
            }
            None => {
                let name = |t: &DataType| crate::types::pg_type::postgres_type_name(t).unwrap_or_else(|| t.to_string());
                Err(DataFusionError::External(Box::new(crate::error::WeirError::new(
                    crate::error::SqlState::UNDEFINED_FUNCTION,
                    format!("operator does not exist: {} @> {}", name(left), name(right)),
                ))))
            }
        }
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
        let json = matches!(
            self.op,
            JsonOp::In { .. } | JsonOp::Get { text: false } | JsonOp::Path { text: false, .. } | JsonOp::Array { .. }
        );
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
        if let JsonOp::Array { jsonb } = self.op {
            return json_arrays(&args, jsonb);
        }
        if self.op == JsonOp::ToJsonText {
            return json_texts(&args);
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
            JsonOp::Array { .. } | JsonOp::ToJsonText => {
                return Err(DataFusionError::Internal("JSON arrays and texts are made above".into()))
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

/// `jsonb_agg` / `json_agg`'s result from `array_agg`'s list of JSON texts ([`json_texts`]):
/// each list as a JSON array; a NULL list (no rows) is NULL.
fn json_arrays(args: &ScalarFunctionArgs, jsonb: bool) -> Result<ColumnarValue> {
    let (rows, arrays) = super::function_args::argument_arrays(&args.args)?;
    let mut out = StringBuilder::new();
    for row in 0..rows {
        let list = ScalarValue::try_from_array(&arrays[0], row)?;
        let value = match list {
            // Its elements are JSON texts already.
            ScalarValue::List(l) if l.is_valid(0) => json_of_array(&l.value(0), true)?,
            ScalarValue::LargeList(l) if l.is_valid(0) => json_of_array(&l.value(0), true)?,
            _ => {
                out.append_null();
                continue;
            }
        };
        let value = if jsonb { value.to_jsonb() } else { value };
        out.append_value(value.to_jsonb_text());
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}

/// The JSON array of `values`' elements; `embedded`: they are JSON texts.
fn json_of_array(values: &ArrayRef, embedded: bool) -> Result<Json> {
    (0..values.len())
        .map(|i| json_of(&ScalarValue::try_from_array(values, i)?, embedded))
        .collect::<Result<_>>()
        .map(Json::Array)
}

/// One value as Postgres's `to_json` writes it.
fn json_of(value: &ScalarValue, embedded: bool) -> Result<Json> {
    use ScalarValue as S;
    if value.is_null() {
        return Ok(Json::Null);
    }
    Ok(match value {
        S::Boolean(Some(b)) => Json::Bool(*b),
        S::Int8(_)
        | S::Int16(_)
        | S::Int32(_)
        | S::Int64(_)
        | S::UInt8(_)
        | S::UInt16(_)
        | S::UInt32(_)
        | S::UInt64(_) => Json::Number(value.to_string()),
        S::Decimal128(..) | S::Decimal256(..) => Json::Number(crate::types::json::numeric_text(&value.to_string())),
        S::Float32(_) | S::Float64(_) | S::Float16(_) => {
            let f = value.cast_to(&DataType::Float64)?;
            match f {
                S::Float64(Some(f)) if f.is_finite() => Json::Number(crate::types::json::numeric_text(&f.to_string())),
                other => Json::String(other.to_string()),
            }
        }
        S::Utf8(Some(t)) | S::LargeUtf8(Some(t)) | S::Utf8View(Some(t)) if embedded => {
            Json::parse(t, "json").map_err(DataFusionError::from)?
        }
        S::Utf8(Some(t)) | S::LargeUtf8(Some(t)) | S::Utf8View(Some(t)) => Json::String(t.clone()),
        S::List(l) => json_of_array(&l.value(0), false)?,
        S::LargeList(l) => json_of_array(&l.value(0), false)?,
        S::Struct(s) => {
            let mut members = Vec::with_capacity(s.num_columns());
            for (field, column) in s.fields().iter().zip(s.columns()) {
                members.push((field.name().clone(), json_of(&ScalarValue::try_from_array(column, 0)?, false)?));
            }
            Json::Object(members)
        }
        // Dates, times and the rest as their text (Arrow writes timestamps as ISO 8601, as
        // Postgres's JSON does).
        other => {
            let text = datafusion::arrow::compute::cast(&other.to_array()?, &DataType::Utf8)?;
            Json::String(text.as_string::<i32>().value(0).to_string())
        }
    })
}

/// [`JsonOp::ToJsonText`]: each value as Postgres turns values into JSON (numbers as numbers,
/// text as strings, `json` and `jsonb` values as they are, lists as arrays, records as objects,
/// anything else as its text), NULL as `null`.
fn json_texts(args: &ScalarFunctionArgs) -> Result<ColumnarValue> {
    let (rows, arrays) = super::function_args::argument_arrays(&args.args)?;
    let embedded = args.arg_fields.first().and_then(|f| DeclaredType::of(f)).is_some_and(|d| d == JSON || d == JSONB);
    let mut out = StringBuilder::new();
    for row in 0..rows {
        out.append_value(json_of(&ScalarValue::try_from_array(&arrays[0], row)?, embedded)?.to_jsonb_text());
    }
    Ok(ColumnarValue::Array(Arc::new(out.finish())))
}
