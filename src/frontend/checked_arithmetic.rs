//! An analyzer rule for DataFusion: integer `+`, `-`, `*` and unary minus raise 22003 on
//! overflow, as in PostgreSQL (`SELECT 2147483647::int + 1` is "integer out of range"),
//! instead of wrapping around.
//!
//! DataFusion 55 evaluates integer arithmetic with Arrow's wrapping kernels (its
//! `BinaryExpr::fail_on_overflow` is off, and its physical planner offers no way to turn it
//! on), so `9223372036854775807 + 1` gave `-9223372036854775808`: a wrong answer, silently, in
//! a query or inside a view. After type coercion, when both sides are integers (of one type by
//! then), this rule replaces the operator with a function computing it with Arrow's checked
//! kernels. Expressions keep their names (the function is named as the operator was), so
//! clients and the plan above see the same columns; EXPLAIN shows `checked_add(a, b)`.
//! Registered by `df_context::template_state`, after type coercion; everything that plans
//! through a session (queries, DML, views) gets it.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Datum};
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{SqlState, WeirError};

#[derive(Debug, Default)]
pub struct CheckedIntegerArithmetic;

impl AnalyzerRule for CheckedIntegerArithmetic {
    fn name(&self) -> &str {
        "weir_checked_integer_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = super::keep_names::input_schema(&node);
            super::keep_names::rewrite_expressions(node, |e| checked(e, &schema))
        })
        .data()
    }
}

/// `e` with its integer operator replaced by the checked function, if it is one.
fn checked(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let op = match &e {
        Expr::BinaryExpr(BinaryExpr { op: Operator::Plus, .. }) => Op::Add,
        Expr::BinaryExpr(BinaryExpr { op: Operator::Minus, .. }) => Op::Sub,
        Expr::BinaryExpr(BinaryExpr { op: Operator::Multiply, .. }) => Op::Mul,
        Expr::Negative(_) => Op::Neg,
        _ => return Ok(Transformed::no(e)),
    };
    let args: Vec<Expr> = match &e {
        Expr::BinaryExpr(BinaryExpr { left, right, .. }) => vec![(**left).clone(), (**right).clone()],
        Expr::Negative(inner) => vec![(**inner).clone()],
        _ => unreachable!("matched above"),
    };
    let mut types = Vec::with_capacity(args.len());
    for arg in &args {
        // An expression whose type cannot be found here (a placeholder without one) is left
        // as it is.
        match arg.get_type(schema) {
            Ok(t) if t.is_integer() => types.push(t),
            _ => return Ok(Transformed::no(e)),
        }
    }
    if types.windows(2).any(|w| w[0] != w[1]) {
        return Ok(Transformed::no(e));
    }
    let udf = Arc::new(ScalarUDF::new_from_impl(CheckedOp::new(op)));
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(udf, args))))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
    Neg,
}

/// An integer operator computed with Arrow's checked kernels.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedOp {
    op: Op,
    signature: Signature,
}

impl CheckedOp {
    fn new(op: Op) -> CheckedOp {
        let arity = if op == Op::Neg { 1 } else { 2 };
        CheckedOp { op, signature: Signature::any(arity, Volatility::Immutable) }
    }

    /// The expression this function stands for (for its name).
    fn original(&self, args: &[Expr]) -> Expr {
        let binary = |op| Expr::BinaryExpr(BinaryExpr::new(Box::new(args[0].clone()), op, Box::new(args[1].clone())));
        match self.op {
            Op::Add => binary(Operator::Plus),
            Op::Sub => binary(Operator::Minus),
            Op::Mul => binary(Operator::Multiply),
            Op::Neg => Expr::Negative(Box::new(args[0].clone())),
        }
    }
}

impl ScalarUDFImpl for CheckedOp {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "checked_add",
            Op::Sub => "checked_sub",
            Op::Mul => "checked_mul",
            Op::Neg => "checked_neg",
        }
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        Ok(self.original(args).schema_name().to_string())
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let data_type = args.return_field.data_type().clone();
        let scalars = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let datums: Vec<Box<dyn Datum>> = args
            .args
            .iter()
            .map(|a| -> Result<Box<dyn Datum>> {
                Ok(match a {
                    ColumnarValue::Array(array) => Box::new(Arc::clone(array)),
                    ColumnarValue::Scalar(s) => Box::new(s.to_scalar()?),
                })
            })
            .collect::<Result<_>>()?;
        let computed: std::result::Result<ArrayRef, _> = match self.op {
            Op::Add => numeric::add(datums[0].as_ref(), datums[1].as_ref()),
            Op::Sub => numeric::sub(datums[0].as_ref(), datums[1].as_ref()),
            Op::Mul => numeric::mul(datums[0].as_ref(), datums[1].as_ref()),
            Op::Neg => {
                let (array, _) = datums[0].get();
                numeric::neg(array)
            }
        };
        let array = computed.map_err(|e| match e {
            datafusion::arrow::error::ArrowError::ArithmeticOverflow(_) => out_of_range(&data_type),
            other => DataFusionError::ArrowError(Box::new(other), None),
        })?;
        if scalars {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?));
        }
        Ok(ColumnarValue::Array(array))
    }
}

/// PostgreSQL's error for an integer result its type cannot hold.
fn out_of_range(data_type: &DataType) -> DataFusionError {
    let name = match data_type {
        DataType::Int16 | DataType::Int8 => "smallint",
        DataType::Int32 => "integer",
        _ => "bigint",
    };
    WeirError::new(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, format!("{name} out of range")).into()
}
