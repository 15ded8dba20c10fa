//! An analyzer rule for DataFusion: `NUMERIC` arithmetic that does not overflow where
//! PostgreSQL's does not, with PostgreSQL's result scales where a fixed scale can follow them.
//!
//! Arrow's decimal kernels type `a * b` as `numeric(p1 + p2 + 1, s1 + s2)` and `a / b` as a
//! scale of at least `s1 + p2 + 1`, capped at 38 digits, and compute in 128 bits: a revenue
//! share such as `100.00 * sum(x * (1 - d)) / sum(x * (1 - d))` failed with "Arithmetic
//! overflow" once the precisions added up (ad hoc an error, in a view a NULL), and a quotient
//! kept whatever scale the precisions left (`386.14285714285714` for PostgreSQL's
//! `386.1428571428571429`). PostgreSQL's numeric has no such limit. After type coercion this
//! rule replaces `+`, `-`, `*`, `/` and `%` of two decimals with [`NumericOp`], which computes
//! in 256 bits and rounds half away from zero, as PostgreSQL does, into a 38-digit result of
//! - `+`, `-`, `%`: scale `max(s1, s2)`;
//! - `*`: scale `s1 + s2`, at most `max(s1, s2, 20)`;
//! - `/`: scale `max(s1, s2, 20)`, each quotient rounded first to the places PostgreSQL gives
//!   it (`select_div_scale`: at least 16 significant digits, depending on the operands' values:
//!   `386.1428571428571429`, `0.33333333333333333333`, `17636684144620811.1`). An Arrow column
//!   has one scale, so the places PostgreSQL's value does not have are zeros, which results
//!   leave out when printed (`types::pg_type::DeclaredType::prints_own_scale`).
//!
//! It also makes `avg` of a decimal `sum / count` by that division (PostgreSQL's `numeric_avg`),
//! so an average has PostgreSQL's digits, and a view's (kept as its sum and count) equals its
//! query's; and `sum` of integers a sum of `numeric(38, 0)` cast back to the integer type, so
//! that a total past the type is 22003 (a NULL in a view) where DataFusion wrapped around.
//!
//! A result of more than 38 digits is an error (22003), never a NULL or a wrong value; `/` and
//! `%` by zero are 22012. Expressions keep their names. A view made before the rule existed is
//! planned without it (`PlanningRules::postgres_numeric`). Registered by
//! `df_context::template_state`.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use datafusion::arrow::datatypes::{i256, DataType, Decimal128Type, DECIMAL128_MAX_PRECISION};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{SqlState, WeirError};

/// Significant digits a quotient keeps at least (PostgreSQL's `NUMERIC_MIN_SIG_DIGITS`).
const QUOTIENT_DIGITS: i32 = 16;
/// Decimal places of a quotient's column, unless an operand has more.
const QUOTIENT_SCALE: i8 = 20;
/// Decimal places a product keeps at most, unless a factor has more.
const PRODUCT_SCALE: i8 = 20;
const MAX_PRECISION: u8 = DECIMAL128_MAX_PRECISION;

#[derive(Debug, Default)]
pub struct PostgresNumeric;

impl AnalyzerRule for PostgresNumeric {
    fn name(&self) -> &str {
        "weir_postgres_numeric"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        // Once an expression's type changed, every node above is coerced again (a comparison
        // with the result, a CASE branch, a UNION's other side) and its schema recomputed.
        let mut retyped = false;
        plan.transform_up_with_subqueries(|node| {
            let schema = super::keep_names::input_schema(&node);
            let rewritten = super::keep_names::rewrite_expressions(node, |e| numeric(e, &schema))?
                .transform_data(aggregates_as_postgres)?;
            retyped |= rewritten.transformed;
            if !retyped {
                return Ok(rewritten);
            }
            rewritten.transform_data(|node| coerce_again(node).map(Transformed::yes))
        })
        .data()
    }
}

/// `node` with DataFusion's type coercion applied again to its expressions (over its inputs'
/// schema) and its schema recomputed, as DataFusion's own coercion rule leaves a node: its
/// operands' types changed.
fn coerce_again(node: LogicalPlan) -> Result<LogicalPlan> {
    use datafusion::common::tree_node::TreeNode;
    use datafusion::logical_expr::expr_rewriter::NamePreserver;
    use datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter;
    let schema = super::keep_names::input_schema(&node);
    let mut coercion = TypeCoercionRewriter::new(&schema);
    let names = NamePreserver::new(&node);
    let coerced = node.map_expressions(|e| {
        let name = names.save(&e);
        Ok(e.rewrite(&mut coercion)?.update_data(|e| name.restore(e)))
    })?;
    coercion.coerce_plan(coerced.data)?.recompute_schema()
}

/// An aggregate's `avg` of decimals made `sum / count` (by [`NumericOp`]'s division), and its
/// `sum` of integers a sum of `numeric(38, 0)` cast back to the integer type (DataFusion's sums
/// of integers wrap around on overflow; cast back, an overflow is 22003 ad hoc and a NULL in a
/// view, never a wrong total), in a projection over it, the columns keeping their names.
fn aggregates_as_postgres(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    enum Rewrite {
        Average(Expr),
        IntegerSum(Expr),
    }
    let LogicalPlan::Aggregate(aggregate) = &plan else {
        return Ok(Transformed::no(plan));
    };
    // Grouping sets add a grouping id column the rewrite below does not map.
    if aggregate.group_expr.iter().any(|g| matches!(g, Expr::GroupingSet(_))) {
        return Ok(Transformed::no(plan));
    }
    let input = aggregate.input.schema();
    let rewrite = |e: &Expr| -> Option<Rewrite> {
        let Expr::AggregateFunction(f) = unalias(e) else { return None };
        let p = &f.params;
        let plain = !p.distinct && p.filter.is_none() && p.order_by.is_empty() && p.args.len() == 1;
        let arg_type = p.args.first()?.get_type(input).ok()?;
        match f.func.name() {
            "avg" if plain && matches!(arg_type, DataType::Decimal128(..)) => Some(Rewrite::Average(p.args[0].clone())),
            "sum" if plain && arg_type.is_integer() => Some(Rewrite::IntegerSum(p.args[0].clone())),
            _ => None,
        }
    };
    let rewrites: Vec<Option<Rewrite>> = aggregate.aggr_expr.iter().map(rewrite).collect();
    if rewrites.iter().all(Option::is_none) {
        return Ok(Transformed::no(plan));
    }
    let LogicalPlan::Aggregate(aggregate) = plan else { unreachable!("matched above") };
    use datafusion::functions_aggregate::expr_fn::{count, sum};
    use datafusion::logical_expr::cast;
    let groups = aggregate.group_expr.len();
    let mut aggs = Vec::new();
    // Each output column: how it is made of the new aggregate's columns.
    enum Source {
        Column(usize),
        Quotient(usize, usize),
        Narrowed(usize),
    }
    let mut sources: Vec<Source> = (0..groups).map(Source::Column).collect();
    for (i, (e, rewrite)) in aggregate.aggr_expr.iter().zip(rewrites).enumerate() {
        let at = groups + aggs.len();
        match rewrite {
            Some(Rewrite::Average(arg)) => {
                sources.push(Source::Quotient(at, at + 1));
                aggs.push(sum(arg.clone()).alias(format!("__avg_sum_{i}")));
                aggs.push(count(arg).alias(format!("__avg_count_{i}")));
            }
            Some(Rewrite::IntegerSum(arg)) => {
                sources.push(Source::Narrowed(at));
                aggs.push(sum(cast(arg, DataType::Decimal128(38, 0))).alias(format!("__sum_{i}")));
            }
            None => {
                sources.push(Source::Column(at));
                aggs.push(e.clone());
            }
        }
    }
    let split = LogicalPlanBuilder::from(Arc::unwrap_or_clone(aggregate.input))
        .aggregate(aggregate.group_expr.clone(), aggs)?
        .build()?;
    let columns = split.schema().columns();
    let column = |i: usize| Expr::Column(columns[i].clone());
    let exprs: Vec<Expr> = aggregate
        .schema
        .iter()
        .zip(sources)
        .map(|((qualifier, field), source)| {
            let value = match source {
                Source::Column(at) => column(at),
                Source::Quotient(total, n) => {
                    let n = cast(column(n), DataType::Decimal128(20, 0));
                    let udf = Arc::clone(&OPS[Op::Div as usize]);
                    Expr::ScalarFunction(ScalarFunction::new_udf(udf, vec![column(total), n]))
                }
                Source::Narrowed(at) => cast(column(at), field.data_type().clone()),
            };
            value.alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    Ok(Transformed::yes(LogicalPlanBuilder::from(split).project(exprs)?.build()?))
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// `e` with its operator on two decimals made a [`NumericOp`], if it is one.
fn numeric(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    let op = match op {
        Operator::Plus => Op::Add,
        Operator::Minus => Op::Sub,
        Operator::Multiply => Op::Mul,
        Operator::Divide => Op::Div,
        Operator::Modulo => Op::Rem,
        _ => return Ok(Transformed::no(e)),
    };
    match (left.get_type(schema), right.get_type(schema)) {
        (Ok(DataType::Decimal128(..)), Ok(DataType::Decimal128(..))) => {}
        _ => return Ok(Transformed::no(e)),
    }
    let udf = Arc::clone(&OPS[op as usize]);
    let args = vec![left.as_ref().clone(), right.as_ref().clone()];
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(udf, args))))
}

static OPS: LazyLock<[Arc<ScalarUDF>; 5]> = LazyLock::new(|| {
    [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Rem].map(|op| Arc::new(ScalarUDF::new_from_impl(NumericOp::new(op))))
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl Op {
    fn operator(self) -> Operator {
        match self {
            Op::Add => Operator::Plus,
            Op::Sub => Operator::Minus,
            Op::Mul => Operator::Multiply,
            Op::Div => Operator::Divide,
            Op::Rem => Operator::Modulo,
        }
    }

    /// The scale of the result of two operands of scales `a` and `b`.
    pub fn scale(self, a: i8, b: i8) -> i8 {
        let (a, b) = (a.max(0), b.max(0));
        match self {
            Op::Add | Op::Sub | Op::Rem => a.max(b),
            Op::Mul => a.saturating_add(b).min(a.max(b).max(PRODUCT_SCALE)),
            Op::Div => a.max(b).max(QUOTIENT_SCALE),
        }
        .min(MAX_PRECISION as i8)
    }
}

/// A decimal operator computed in 256 bits into a 38-digit result (see the module's text).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NumericOp {
    op: Op,
    signature: Signature,
}

impl NumericOp {
    fn new(op: Op) -> NumericOp {
        NumericOp { op, signature: Signature::any(2, Volatility::Immutable) }
    }
}

fn scale_of(t: &DataType) -> Result<i8> {
    match t {
        DataType::Decimal128(_, s) => Ok(*s),
        other => datafusion::common::internal_err!("a numeric operator got {other}"),
    }
}

impl ScalarUDFImpl for NumericOp {
    fn name(&self) -> &str {
        match self.op {
            Op::Add => "numeric_add",
            Op::Sub => "numeric_sub",
            Op::Mul => "numeric_mul",
            Op::Div => "numeric_div",
            Op::Rem => "numeric_mod",
        }
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let original = BinaryExpr::new(Box::new(args[0].clone()), self.op.operator(), Box::new(args[1].clone()));
        Ok(Expr::BinaryExpr(original).schema_name().to_string())
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let scale = self.op.scale(scale_of(&arg_types[0])?, scale_of(&arg_types[1])?);
        Ok(DataType::Decimal128(MAX_PRECISION, scale))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let rows = arrays[0].len();
        let (sa, sb) = (scale_of(arrays[0].data_type())?, scale_of(arrays[1].data_type())?);
        let scale = self.op.scale(sa, sb);
        let (a, b) = (arrays[0].as_primitive::<Decimal128Type>(), arrays[1].as_primitive::<Decimal128Type>());
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if a.is_null(i) || b.is_null(i) {
                out.push(None);
                continue;
            }
            out.push(Some(compute(self.op, (a.value(i), sa), (b.value(i), sb), scale)?));
        }
        let array: ArrayRef = Arc::new(Decimal128Array::from(out).with_precision_and_scale(MAX_PRECISION, scale)?);
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?));
        }
        Ok(ColumnarValue::Array(array))
    }
}

fn pow10(n: u32) -> Option<i256> {
    i256::from_i128(10).checked_pow(n)
}

/// `value` (at scale `from`) at scale `to`, rounded half away from zero when `to` is smaller.
fn rescale(value: i256, from: i8, to: i8) -> Option<i256> {
    if to >= from {
        return value.checked_mul(pow10((to - from) as u32)?);
    }
    divide_rounded(value, pow10((from - to) as u32)?)
}

/// `n / d` rounded half away from zero (PostgreSQL's numeric rounding).
fn divide_rounded(n: i256, d: i256) -> Option<i256> {
    let q = n.checked_div(d)?;
    let r = n.checked_rem(d)?;
    let twice = r.wrapping_abs().checked_mul(i256::from_i128(2))?;
    if twice >= d.wrapping_abs() {
        let away = if (n < i256::ZERO) != (d < i256::ZERO) { i256::MINUS_ONE } else { i256::ONE };
        return q.checked_add(away);
    }
    Some(q)
}

/// The base-10,000 weight of `value` (at `scale`: the power of 10,000 of its first digit group)
/// and that group's value, as PostgreSQL's numeric keeps them; (0, 0) for zero.
fn weight_and_first_group(value: i256, scale: i8) -> (i32, i32) {
    if value == i256::ZERO {
        return (0, 0);
    }
    let digits = value.wrapping_abs().to_string();
    // The decimal exponent of the first digit.
    let exponent = digits.len() as i32 - 1 - scale as i32;
    let weight = exponent.div_euclid(4);
    let width = (exponent - 4 * weight + 1) as usize;
    let first: String = digits.chars().chain(std::iter::repeat('0')).take(width).collect();
    (weight, first.parse().expect("digits"))
}

/// The decimal places PostgreSQL gives `a / b` (`select_div_scale`): 16 significant digits by
/// the operands' weights, at least the operands' scales.
fn quotient_places((a, sa): (i256, i8), (b, sb): (i256, i8)) -> i32 {
    let (wa, fa) = weight_and_first_group(a, sa);
    let (wb, fb) = weight_and_first_group(b, sb);
    let weight = wa - wb - i32::from(fa <= fb);
    (QUOTIENT_DIGITS - weight * 4).max(sa as i32).max(sb as i32).max(0)
}

/// `a op b` (each an unscaled value with its scale) at scale `scale`, in 38 digits.
fn compute(op: Op, (a, sa): (i128, i8), (b, sb): (i128, i8), scale: i8) -> Result<i128> {
    let (a, b) = (i256::from_i128(a), i256::from_i128(b));
    if matches!(op, Op::Div | Op::Rem) && b == i256::ZERO {
        return Err(WeirError::new(SqlState::DIVISION_BY_ZERO, "division by zero").into());
    }
    let result = match op {
        Op::Add | Op::Sub | Op::Rem => {
            let common = sa.max(sb);
            let (a, b) = (rescale(a, sa, common), rescale(b, sb, common));
            match (a, b) {
                (Some(a), Some(b)) => match op {
                    Op::Add => a.checked_add(b),
                    Op::Sub => a.checked_sub(b),
                    _ => a.checked_rem(b),
                }
                .and_then(|v| rescale(v, common, scale)),
                _ => None,
            }
        }
        Op::Mul => a.checked_mul(b).and_then(|p| rescale(p, sa + sb, scale)),
        // a / b at PostgreSQL's places for these values, then at the column's `scale`.
        Op::Div => {
            let places = quotient_places((a, sa), (b, sb)).min(scale as i32);
            let shift = places - sa as i32 + sb as i32;
            let quotient = if shift >= 0 {
                pow10(shift as u32).and_then(|p| a.checked_mul(p)).and_then(|n| divide_rounded(n, b))
            } else {
                pow10((-shift) as u32).and_then(|p| b.checked_mul(p)).and_then(|d| divide_rounded(a, d))
            };
            quotient.and_then(|q| rescale(q, places as i8, scale))
        }
    };
    result.and_then(|v| v.to_i128()).filter(|v| v.unsigned_abs() < 10u128.pow(MAX_PRECISION as u32)).ok_or_else(
        || -> DataFusionError {
            WeirError::new(
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                format!("numeric field overflow: the result has more than {MAX_PRECISION} digits"),
            )
            .with_hint(format!(
                "A numeric result holds {MAX_PRECISION} digits, {scale} of them after the decimal point here."
            ))
            .into()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: Op, a: (i128, i8), b: (i128, i8)) -> (i128, i8) {
        let scale = op.scale(a.1, b.1);
        (compute(op, a, b, scale).unwrap(), scale)
    }

    #[test]
    fn quotients_keep_sixteen_places_rounded_half_away_from_zero() {
        // PostgreSQL's quotients, at the column's 20 places.
        let at20 = |digits: i128, places: u32| digits * 10i128.pow(20 - places);
        // 2703.00 / 7.00 = 386.1428571428571429
        assert_eq!(run(Op::Div, (270300, 2), (700, 2)), (at20(3861428571428571429, 16), 20));
        // 1 / 3.0 = 0.33333333333333333333; -2 / 3 rounds away from zero: -0.66666666666666666667
        assert_eq!(run(Op::Div, (1, 0), (30, 1)).0, at20(33333333333333333333, 20));
        assert_eq!(run(Op::Div, (-2, 0), (3, 0)).0, at20(-66666666666666666667, 20));
        // 1000000 / 7.0 = 142857.142857142857; 123456789012345678.0 / 7 = 17636684144620811.1
        assert_eq!(run(Op::Div, (1_000_000, 0), (70, 1)).0, at20(142857142857142857, 12));
        assert_eq!(compute(Op::Div, (1_234_567_890_123_456_780, 1), (7, 0), 1).unwrap(), 176_366_841_446_208_111);
    }

    #[test]
    fn products_keep_both_scales_and_sums_the_larger() {
        assert_eq!(run(Op::Mul, (210, 1), (1, 0)), (210, 1));
        assert_eq!(run(Op::Add, (110, 2), (2205, 3)), (3305, 3));
    }

    #[test]
    fn a_revenue_share_does_not_overflow() {
        // 100.00 * s1 / s2 with sums at numeric(38, 4): 10^33-sized sums still divide.
        let s1 = 123_456_789_012_345_678_901_234_567_890_123i128;
        let (product, ps) = run(Op::Mul, (10000, 2), (s1, 4));
        let (share, scale) = run(Op::Div, (product, ps), (s1 * 2, 4));
        assert_eq!(share, 50 * 10i128.pow(scale as u32));
    }

    #[test]
    fn a_result_past_38_digits_is_an_error_and_zero_divides_nothing() {
        let nines = 10i128.pow(38) - 1;
        assert!(compute(Op::Add, (nines, 0), (1, 0), 0).is_err());
        assert!(compute(Op::Div, (1, 0), (0, 0), 16).is_err());
    }
}
