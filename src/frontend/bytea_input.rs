//! Text read as `bytea` the way Postgres reads it: `'\x4142'::bytea` is the two bytes `AB` (hex
//! format), `'a\\b\101'` the bytes `a`, `\`, `b`, `A` (escape format: `\\` a backslash, `\ooo`
//! an octal byte). DataFusion's cast from text to binary takes the text's own bytes, so
//! `INSERT INTO t VALUES ('\x4142')` stored six bytes.
//!
//! Where text becomes bytea, [`bytea_in`] reads it:
//! - a cast to bytea written in the statement, when it is parsed ([`rewrite_casts`]);
//! - a value an INSERT or UPDATE stores in a bytea column: an analyzer rule ([`ByteaInput`],
//!   registered by `df_context::template_state`) replaces the casts DataFusion puts on the
//!   rows a DML statement writes;
//! - COPY FROM's text ([`decode_bytea`]).
//!
//! Other casts of text to binary are left as DataFusion makes them: those it adds to call a
//! function on binary (`decode(text, 'escape')` reads the text's bytes, as in Postgres).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{SqlState, WeirError};

#[derive(Debug, Default)]
pub struct ByteaInput;

impl AnalyzerRule for ByteaInput {
    fn name(&self) -> &str {
        "weir_bytea_input"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !matches!(plan, LogicalPlan::Dml(_)) {
            return Ok(plan);
        }
        plan.map_children(shape_rows).data()
    }
}

/// The rows a DML statement writes, with their casts of text to bytea read by [`bytea_in`]: the
/// projection shaping them to the table's columns (INSERT ... SELECT, UPDATE), and the rows of
/// an INSERT's VALUES, which DataFusion casts to the columns' types itself.
fn shape_rows(input: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    match input {
        LogicalPlan::Projection(projection) => {
            let schema = Arc::clone(projection.input.schema());
            let mut changed = false;
            let exprs = top_level(projection.expr, &schema, &mut changed)?;
            let below = match projection.input.as_ref() {
                LogicalPlan::Values(_) => shape_rows(Arc::unwrap_or_clone(projection.input))?,
                _ => Transformed::no(Arc::unwrap_or_clone(projection.input)),
            };
            changed |= below.transformed;
            let rebuilt =
                LogicalPlan::Projection(datafusion::logical_expr::Projection::try_new(exprs, Arc::new(below.data))?);
            Ok(if changed { Transformed::yes(rebuilt) } else { Transformed::no(rebuilt) })
        }
        LogicalPlan::Values(values) => {
            let mut changed = false;
            let empty = datafusion::common::DFSchema::empty();
            let rows = values
                .values
                .into_iter()
                .map(|row| top_level(row, &empty, &mut changed))
                .collect::<Result<Vec<_>>>()?;
            let rebuilt = LogicalPlan::Values(datafusion::logical_expr::Values { schema: values.schema, values: rows });
            Ok(if changed { Transformed::yes(rebuilt) } else { Transformed::no(rebuilt) })
        }
        other => Ok(Transformed::no(other)),
    }
}

/// `exprs` with each one that is (under an alias) a cast of text to bytea read by [`bytea_in`].
fn top_level(exprs: Vec<Expr>, schema: &datafusion::common::DFSchema, changed: &mut bool) -> Result<Vec<Expr>> {
    exprs
        .into_iter()
        .map(|e| {
            let rewritten = match e {
                Expr::Alias(alias) => {
                    let inner = read_as_bytea(*alias.expr, schema)?;
                    *changed |= inner.transformed;
                    Expr::Alias(datafusion::logical_expr::expr::Alias { expr: Box::new(inner.data), ..alias })
                }
                other => {
                    let t = read_as_bytea(other, schema)?;
                    *changed |= t.transformed;
                    t.data
                }
            };
            Ok(rewritten)
        })
        .collect()
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

/// `e` read by [`bytea_in`] if it is a cast of text to a binary type.
fn read_as_bytea(e: Expr, schema: &datafusion::common::DFSchema) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::ExprSchemable;
    let (inner, target) = match &e {
        Expr::Cast(Cast { expr, field, .. }) | Expr::TryCast(TryCast { expr, field, .. })
            if is_binary(field.data_type()) =>
        {
            (expr.as_ref(), field.data_type().clone())
        }
        _ => return Ok(Transformed::no(e)),
    };
    match inner.get_type(schema) {
        Ok(t) if is_text(&t) => {}
        _ => return Ok(Transformed::no(e)),
    }
    let call = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(bytea_in()), vec![inner.clone()]));
    Ok(Transformed::yes(match target {
        DataType::Binary => call,
        other => Expr::Cast(Cast::new(Box::new(call), other)),
    }))
}

/// Every cast to `bytea` written in the statement (`x::bytea`, `CAST(x AS bytea)`, `bytea
/// '...'`) as `bytea_in(x)`, which reads text as Postgres's bytea input and passes bytes
/// through. A parameter's cast (`$1::bytea`) stays: its client sends bytes.
pub fn rewrite_casts(statement: &mut datafusion::sql::sqlparser::ast::Statement) {
    use datafusion::sql::sqlparser::ast::{self, DataType as Sql, Expr as SqlExpr, Value};
    let _ = ast::visit_expressions_mut(statement, |expr| {
        let operand = match expr {
            SqlExpr::Cast { expr: inner, data_type: Sql::Bytea, .. } if !matches!(inner.as_ref(), SqlExpr::Value(v) if matches!(v.value, Value::Placeholder(_))) => {
                Some((**inner).clone())
            }
            SqlExpr::TypedString(typed) if typed.data_type == Sql::Bytea => Some(SqlExpr::Value(typed.value.clone())),
            _ => None,
        };
        if let Some(operand) = operand {
            *expr = super::json_functions::call("bytea_in", vec![operand]);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// `bytea_in(x)`: text read by [`decode_bytea`] (a value that is not bytea input is 22P02 or
/// 22023), bytes as they are.
pub fn bytea_in() -> ScalarUDF {
    ScalarUDF::new_from_impl(ByteaIn { signature: Signature::any(1, Volatility::Immutable) })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ByteaIn {
    signature: Signature,
}

impl ScalarUDFImpl for ByteaIn {
    fn name(&self) -> &str {
        "bytea_in"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let ColumnarValue::Scalar(value) = &args.args[0] {
            // One value, as one value (a literal the optimizer did not fold).
            let array = value.to_array_of_size(1)?;
            let one = ByteaIn::read(&array)?;
            return Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&one, 0)?));
        }
        let (_, arrays) = super::function_args::argument_arrays(&args.args)?;
        Ok(ColumnarValue::Array(ByteaIn::read(&arrays[0])?))
    }
}

impl ByteaIn {
    /// `values` as bytes: text read as bytea input, bytes as they are.
    fn read(values: &ArrayRef) -> Result<ArrayRef> {
        if is_binary(values.data_type()) {
            return Ok(datafusion::arrow::compute::cast(values, &DataType::Binary)?);
        }
        let text = datafusion::arrow::compute::cast(values, &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        let mut out = BinaryBuilder::with_capacity(text.len(), text.value_data().len());
        for value in text.iter() {
            match value {
                Some(v) => out.append_value(decode_bytea(v).map_err(DataFusionError::from)?),
                None => out.append_null(),
            }
        }
        Ok(Arc::new(out.finish()) as ArrayRef)
    }
}

/// The bytes of `text` read as Postgres reads bytea input: `\x` then hex digit pairs
/// (whitespace between pairs allowed), or else the escape format.
pub fn decode_bytea(text: &str) -> std::result::Result<Vec<u8>, WeirError> {
    let invalid = || WeirError::new(SqlState::INVALID_TEXT_REPRESENTATION, "invalid input syntax for type bytea");
    if let Some(hex) = text.strip_prefix("\\x") {
        let mut out = Vec::with_capacity(hex.len() / 2);
        // Whitespace may come between digit pairs, not inside one.
        let mut bytes = hex.bytes().peekable();
        let value = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        loop {
            while bytes.next_if(u8::is_ascii_whitespace).is_some() {}
            let Some(high) = bytes.next() else { break };
            let low = bytes.next().filter(|b| !b.is_ascii_whitespace()).ok_or_else(|| {
                WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "invalid hexadecimal data: odd number of digits")
            })?;
            match (value(high), value(low)) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => {
                    return Err(WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!(
                            "invalid hexadecimal digit: \"{}\"",
                            if value(high).is_none() { high } else { low } as char
                        ),
                    ))
                }
            }
        }
        return Ok(out);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let octal = bytes.get(i + 1..i + 4).ok_or_else(invalid)?;
            if !(b'0'..=b'3').contains(&octal[0]) || !octal[1..].iter().all(|b| (b'0'..=b'7').contains(b)) {
                return Err(invalid());
            }
            out.push((octal[0] - b'0') << 6 | (octal[1] - b'0') << 3 | (octal[2] - b'0'));
            i += 4;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::decode_bytea;

    #[test]
    fn reads_hex_and_escape_formats() {
        assert_eq!(decode_bytea("\\x4142").unwrap(), b"AB");
        assert_eq!(decode_bytea("\\x41 42").unwrap(), b"AB");
        assert_eq!(decode_bytea("\\x").unwrap(), b"");
        assert_eq!(decode_bytea("ab").unwrap(), b"ab");
        assert_eq!(decode_bytea("a\\\\b\\101").unwrap(), b"a\\bA");
        assert_eq!(decode_bytea("\\x414").unwrap_err().state.0, "22023");
        assert_eq!(decode_bytea("\\x4 142").unwrap_err().state.0, "22023", "whitespace inside a pair");
        assert_eq!(decode_bytea("\\X41").unwrap_err().state.0, "22P02", "\\X is the escape format");
        assert_eq!(decode_bytea("\\x4g").unwrap_err().state.0, "22023");
        assert_eq!(decode_bytea("a\\q").unwrap_err().state.0, "22P02");
        assert_eq!(decode_bytea("a\\").unwrap_err().state.0, "22P02");
    }
}
