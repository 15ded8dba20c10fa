//! Text read as `bytea` the way Postgres reads it: `'\x4142'::bytea` is the two bytes `AB` (hex
//! format), `'a\\b\101'` the bytes `a`, `\`, `b`, `A` (escape format: `\\` a backslash, `\ooo`
//! an octal byte). DataFusion's cast from text to binary takes the text's own bytes, so
//! `INSERT INTO t VALUES ('\x4142')` stored six bytes.
//!
//! An analyzer rule ([`ByteaInput`], after type coercion, registered by
//! `df_context::template_state`) replaces every cast of text to a binary type, written or
//! implied (an INSERT's text into a bytea column), with [`bytea_in`]; COPY FROM reads its text
//! with [`decode_bytea`]. Expressions keep their names.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult};
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
        plan.transform_up_with_subqueries(|node| {
            let schema = match node.inputs().as_slice() {
                [] => Arc::clone(node.schema()),
                [one] => Arc::clone(one.schema()),
                many => {
                    let mut merged = datafusion::common::DFSchema::empty();
                    for input in many {
                        merged.merge(input.schema());
                    }
                    Arc::new(merged)
                }
            };
            super::keep_names::rewrite_expressions(node, |e| read_as_bytea(e, &schema))
        })
        .data()
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

/// `e` with a cast of text to a binary type replaced by [`bytea_in`].
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

/// `bytea_in(text)`: [`decode_bytea`] of each value; a value that is not bytea input is 22P02.
pub fn bytea_in() -> ScalarUDF {
    ScalarUDF::new_from_impl(ByteaIn { signature: Signature::string(1, Volatility::Immutable) })
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
        let (_, arrays) = super::df_context::argument_arrays(&args.args)?;
        let text = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        let mut out = BinaryBuilder::with_capacity(text.len(), text.value_data().len());
        for value in text.iter() {
            match value {
                Some(v) => out.append_value(decode_bytea(v).map_err(DataFusionError::from)?),
                None => out.append_null(),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish()) as ArrayRef))
    }
}

/// The bytes of `text` read as Postgres reads bytea input: `\x` then hex digit pairs
/// (whitespace between pairs allowed), or else the escape format.
pub fn decode_bytea(text: &str) -> std::result::Result<Vec<u8>, WeirError> {
    let invalid = || WeirError::new(SqlState::INVALID_TEXT_REPRESENTATION, "invalid input syntax for type bytea");
    if let Some(hex) = text.strip_prefix("\\x").or_else(|| text.strip_prefix("\\X")) {
        let mut out = Vec::with_capacity(hex.len() / 2);
        let mut digits = hex.bytes().filter(|b| !b.is_ascii_whitespace());
        let value = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        while let Some(high) = digits.next() {
            let low = digits.next().ok_or_else(|| {
                WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "invalid hexadecimal data: odd number of digits")
            })?;
            match (value(high), value(low)) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => {
                    return Err(WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid hexadecimal digit: \"{}\"", if value(high).is_none() { high } else { low } as char),
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
        assert_eq!(decode_bytea("\\x4g").unwrap_err().state.0, "22023");
        assert_eq!(decode_bytea("a\\q").unwrap_err().state.0, "22P02");
        assert_eq!(decode_bytea("a\\").unwrap_err().state.0, "22P02");
    }
}
