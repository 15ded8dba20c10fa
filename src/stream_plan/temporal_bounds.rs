//! `now()` in a view (ADR 13): which conditions a temporal filter can keep true, and the
//! marker that stands for the epoch's time in a view's plan.
//!
//! Before a view's query is optimized, every `now()` / `current_timestamp` in it becomes
//! [`epoch_now`] ([`mark_now`]), a volatile function the optimizer neither folds into a
//! constant (as it folds `now()` for a one-off query) nor evaluates. The builder then splits
//! each WHERE / HAVING / inner JOIN ON condition into its conjuncts ([`split`]): those without
//! `now()` stay an ordinary filter; each one with `now()` must compare a row expression with
//! `now()` plus or minus a fixed interval (`ts > now() - INTERVAL '1' HOUR`,
//! `ts + INTERVAL '5' MINUTE >= now()`, `now() BETWEEN a AND b`'s halves...), and becomes a
//! [`TimeBound`]: the time from which, or until which, the row is in the view. Every other use
//! of `now()` in a view is refused (0A000, [`refuse`]): its value would be the time a row
//! happened to be processed, which a restart changes. Ad-hoc queries keep Postgres's `now()`.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, LogicalPlan, Operator as BinaryOp, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

use super::join_interval::interval_nanos;
use crate::error::{Result, WeirError};

/// The marker's name, as EXPLAIN shows it.
pub const EPOCH_NOW: &str = "now";

/// `now()` in a view: the time of the epoch (ADR 13). Never evaluated: a temporal filter reads
/// the time from the barrier.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EpochNow {
    signature: Signature,
    timezone: Option<Arc<str>>,
}

pub fn epoch_now(timezone: Option<Arc<str>>) -> Expr {
    let udf = EpochNow { signature: Signature::nullary(Volatility::Volatile), timezone };
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(ScalarUDF::new_from_impl(udf)), vec![]))
}

impl ScalarUDFImpl for EpochNow {
    fn name(&self) -> &str {
        EPOCH_NOW
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Nanosecond, self.timezone.clone()))
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> datafusion::error::Result<FieldRef> {
        Ok(Arc::new(Field::new(EPOCH_NOW, DataType::Timestamp(TimeUnit::Nanosecond, self.timezone.clone()), false)))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        datafusion::common::not_impl_err!("{}", SUPPORTED)
    }
}

/// Whether `expr` is the marker.
fn is_epoch_now(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.func.inner().is::<EpochNow>())
}

/// Whether `expr` uses `now()` (the marker) anywhere.
pub fn uses_now(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        found |= is_epoch_now(e);
        Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    found
}

/// What a view may do with `now()`, for error messages.
const SUPPORTED: &str = "now() in a materialized view is only supported in WHERE, HAVING or inner JOIN ON \
    conditions that compare a column with now() plus or minus a fixed interval, joined by AND \
    (for example: ts > now() - INTERVAL '1' HOUR, or now() - INTERVAL '1' HOUR < ts AND ts <= now())";

/// The error for `now()` used another way than a temporal filter allows.
pub fn refuse(what: &Expr) -> WeirError {
    WeirError::unsupported(format!("{SUPPORTED}; found: {what}"))
}

/// Replaces every `now()` and `current_timestamp` of `plan` (subqueries included) with the
/// marker, before the view's query is optimized.
pub fn mark_now(plan: LogicalPlan) -> Result<LogicalPlan> {
    let marked = plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|expr| {
            expr.transform_up(|e| match &e {
                Expr::ScalarFunction(f) if f.func.name() == "now" && f.args.is_empty() && !is_epoch_now(&e) => {
                    let timezone =
                        match f.func.return_field_from_args(ReturnFieldArgs { arg_fields: &[], scalar_arguments: &[] })
                        {
                            Ok(field) => match field.data_type() {
                                DataType::Timestamp(_, tz) => tz.clone(),
                                _ => None,
                            },
                            Err(_) => None,
                        };
                    Ok(Transformed::yes(epoch_now(timezone)))
                }
                _ => Ok(Transformed::no(e)),
            })
        })
    })?;
    Ok(marked.data)
}

/// A row is in the view from `start` (inclusive) to `end` (exclusive) of the epoch clock; each
/// bound is the row expression `value` (a time) plus `offset` nanoseconds.
#[derive(Debug, Clone)]
pub struct TimeBound {
    pub value: Expr,
    pub offset: i64,
    /// An end (the row leaves when now() reaches it), else a start (it enters then).
    pub end: bool,
    /// The comparison, as `row op now() ± shift`, for EXPLAIN.
    pub text: String,
}

/// A condition split into its conjuncts without `now()` (None if there are none) and the
/// bounds its conjuncts with `now()` put on the epoch's time.
pub struct Split {
    pub ordinary: Option<Expr>,
    pub bounds: Vec<TimeBound>,
}

/// Splits `predicate` (over rows of `schema`) into ordinary conjuncts and time bounds; any
/// use of `now()` that is not a bound is refused.
pub fn split(predicate: &Expr, schema: &DFSchema) -> Result<Split> {
    let mut ordinary = Vec::new();
    let mut bounds = Vec::new();
    for conjunct in split_conjunction(predicate) {
        if !uses_now(conjunct) {
            ordinary.push(conjunct.clone());
            continue;
        }
        let comparisons = match conjunct {
            Expr::Between(b) if !b.negated => vec![
                ((*b.expr).clone(), BinaryOp::GtEq, (*b.low).clone()),
                ((*b.expr).clone(), BinaryOp::LtEq, (*b.high).clone()),
            ],
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => vec![((**left).clone(), *op, (**right).clone())],
            other => return Err(refuse(other)),
        };
        for (left, op, right) in comparisons {
            if uses_now(&left) || uses_now(&right) {
                bounds.push(bound(&left, op, &right, schema).ok_or_else(|| refuse(conjunct))?);
            } else {
                // The other half of a BETWEEN: an ordinary condition.
                ordinary.push(Expr::BinaryExpr(BinaryExpr::new(Box::new(left), op, Box::new(right))));
            }
        }
    }
    Ok(Split { ordinary: ordinary.into_iter().reduce(Expr::and), bounds })
}

/// `left op right` with `now()` on one side only, as a bound on the epoch's time.
fn bound(left: &Expr, op: BinaryOp, right: &Expr, schema: &DFSchema) -> Option<TimeBound> {
    // As `row op now() + shift`.
    let (row, op, now_side) = match (uses_now(left), uses_now(right)) {
        (false, true) => (left, op, right),
        (true, false) => (right, op.swap()?, left),
        _ => return None,
    };
    let shift = now_plus(now_side)?;
    if !is_time(row, schema) {
        return None;
    }
    // row > now + s  <=>  now < row - s: the row leaves at row - s.
    // row >= now + s <=>  now < row - s + 1.
    // row < now + s  <=>  now >= row - s + 1: the row enters then.
    // row <= now + s <=>  now >= row - s.
    let (offset, end) = match op {
        BinaryOp::Gt => (shift.checked_neg()?, true),
        BinaryOp::GtEq => (shift.checked_neg()?.checked_add(1)?, true),
        BinaryOp::Lt => (shift.checked_neg()?.checked_add(1)?, false),
        BinaryOp::LtEq => (shift.checked_neg()?, false),
        _ => return None,
    };
    let shown = match shift {
        0 => String::new(),
        s if s > 0 => format!(" + {}s", s as f64 / 1e9),
        s => format!(" - {}s", (s as f64 / 1e9).abs()),
    };
    let text = format!("{} {op} now(){shown}", without_casts(row));
    Some(TimeBound { value: row.clone(), offset, end, text })
}

/// `expr` without the casts type coercion put around it, for display.
fn without_casts(expr: &Expr) -> &Expr {
    match expr {
        Expr::Cast(c) => without_casts(&c.expr),
        Expr::TryCast(c) => without_casts(&c.expr),
        other => other,
    }
}

/// `now()` plus or minus fixed intervals (casts aside): the shift in nanoseconds.
fn now_plus(expr: &Expr) -> Option<i64> {
    match expr {
        e if is_epoch_now(e) => Some(0),
        Expr::Cast(c) if matches!(c.field.data_type(), DataType::Timestamp(..)) => now_plus(&c.expr),
        Expr::TryCast(c) if matches!(c.field.data_type(), DataType::Timestamp(..)) => now_plus(&c.expr),
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (BinaryOp::Plus | BinaryOp::Minus), right }) => {
            let (now_side, interval, sign) = match (uses_now(left), uses_now(right), op) {
                (true, false, BinaryOp::Plus) => (left, right, 1),
                (true, false, _) => (left, right, -1),
                (false, true, BinaryOp::Plus) => (right, left, 1),
                _ => return None,
            };
            let Expr::Literal(value, _) = interval.as_ref() else { return None };
            now_plus(now_side)?.checked_add(interval_nanos(value)?.checked_mul(sign)?)
        }
        _ => None,
    }
}

/// Whether `expr` is a time a row can be placed at (a timestamp or a date).
fn is_time(expr: &Expr, schema: &DFSchema) -> bool {
    use datafusion::logical_expr::ExprSchemable;
    matches!(expr.get_type(schema), Ok(DataType::Timestamp(..) | DataType::Date32 | DataType::Date64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::common::ScalarValue;
    use datafusion::prelude::{col, lit};

    const S: i64 = 1_000_000_000;

    fn schema() -> DFSchema {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        DFSchema::try_from(Schema::new(vec![Field::new("ts", ts, true), Field::new("a", DataType::Int64, true)]))
            .unwrap()
    }

    fn seconds(n: i64) -> Expr {
        Expr::Literal(ScalarValue::new_interval_mdn(0, 0, n * S), None)
    }

    fn now() -> Expr {
        epoch_now(None)
    }

    #[test]
    fn comparisons_with_now_become_bounds_and_the_rest_stays_a_filter() {
        let predicate = col("ts")
            .gt(now() - seconds(5))
            .and(col("a").eq(lit(1)))
            .and((now() - seconds(60)).lt_eq(col("ts") + seconds(2)))
            .and(col("ts").between(now() - seconds(10), now()));
        let split = split(&predicate, &schema()).unwrap();
        assert_eq!(split.ordinary, Some(col("a").eq(lit(1))));
        let bounds: Vec<(i64, bool)> = split.bounds.iter().map(|b| (b.offset, b.end)).collect();
        // ts > now - 5 s: leaves at ts + 5 s. now - 60 s <= ts + 2 s: leaves at ts + 2 s + 60 s + 1.
        // ts >= now - 10 s: leaves at ts + 10 s + 1; ts <= now: enters at ts.
        assert_eq!(bounds, vec![(5 * S, true), (60 * S + 1, true), (10 * S + 1, true), (0, false)]);
        assert_eq!(split.bounds[1].value, col("ts") + seconds(2));
        let texts: Vec<&str> = split.bounds.iter().map(|b| b.text.as_str()).collect();
        assert_eq!(texts, vec!["ts > now() - 5s", "ts + IntervalMonthDayNano(\"IntervalMonthDayNano { months: 0, days: 0, nanoseconds: 2000000000 }\") >= now() - 60s", "ts >= now() - 10s", "ts <= now()"]);
    }

    #[test]
    fn the_half_of_a_between_without_now_stays_a_filter() {
        let low = Expr::Literal(ScalarValue::TimestampMicrosecond(Some(0), None), None);
        let split = split(&col("ts").between(low.clone(), now()), &schema()).unwrap();
        assert_eq!(split.ordinary, Some(col("ts").gt_eq(low)));
        assert_eq!(split.bounds.len(), 1);
    }

    #[test]
    fn other_uses_of_now_are_refused() {
        let months = Expr::Literal(ScalarValue::new_interval_mdn(1, 0, 0), None);
        for predicate in [
            col("ts").gt(now()).or(col("a").eq(lit(1))),
            col("ts").eq(now()),
            col("a").gt(now() - seconds(1)),
            col("ts").gt(now() - months),
            (col("ts") - now()).gt(seconds(1)),
            col("ts").not_between(now() - seconds(10), now()),
        ] {
            let err = split(&predicate, &schema()).err().unwrap_or_else(|| panic!("accepted {predicate}"));
            assert_eq!(err.state.0, "0A000", "{predicate}");
        }
    }
}
