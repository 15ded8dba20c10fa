//! `interval * number`, `number * interval` and `interval / number`, which DataFusion's planner
//! refuses ("Cannot get result type for temporal operation"): an [`ExprPlanner`] turns each into
//! a call of [`INTERVAL_SCALE`] while the SQL is planned, when the operands' types are known,
//! and the function scales as PostgreSQL's `interval_mul` and `interval_div` do: months and
//! days are scaled and truncated, and what they leave over carries down (a month is 30 days, a
//! day 24 hours) into days and then into the time, rounded to the microsecond. Registered by
//! `df_context::template_state`.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit};
use datafusion::common::DFSchema;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast::BinaryOperator;

use crate::error::{SqlState, WeirError};

#[derive(Debug, Default)]
pub struct IntervalArithmetic;

impl ExprPlanner for IntervalArithmetic {
    fn plan_binary_op(&self, expr: RawBinaryExpr, schema: &DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
        let interval = |e: &Expr| e.get_type(schema).is_ok_and(|t| matches!(t, DataType::Interval(_)));
        let number = |e: &Expr| e.get_type(schema).is_ok_and(|t| t.is_numeric());
        let (span, factor, divide) = match expr.op {
            BinaryOperator::Multiply if interval(&expr.left) && number(&expr.right) => (&expr.left, &expr.right, false),
            BinaryOperator::Multiply if number(&expr.left) && interval(&expr.right) => (&expr.right, &expr.left, false),
            BinaryOperator::Divide if interval(&expr.left) && number(&expr.right) => (&expr.left, &expr.right, true),
            _ => return Ok(PlannerResult::Original(expr)),
        };
        let args = vec![
            span.clone(),
            factor.clone().cast_to(&DataType::Float64, schema)?,
            Expr::Literal(datafusion::common::ScalarValue::Boolean(Some(divide)), None),
        ];
        Ok(PlannerResult::Planned(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&INTERVAL_SCALE), args))))
    }
}

/// `interval_scale(interval, factor, divide)`: the interval times `factor` (divided by it when
/// `divide`), as PostgreSQL computes it.
pub static INTERVAL_SCALE: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::new_from_impl(IntervalScale { signature: Signature::any(3, Volatility::Immutable) }))
});

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalScale {
    signature: Signature,
}

impl ScalarUDFImpl for IntervalScale {
    fn name(&self) -> &str {
        "interval_scale"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Interval(IntervalUnit::MonthDayNano))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [span, factor, divide] = args.args.as_slice() else {
            return Err(DataFusionError::Internal("interval_scale takes three arguments".into()));
        };
        let scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let span = cast(&span.to_array(rows)?, &DataType::Interval(IntervalUnit::MonthDayNano))?;
        let span = span.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        let factor = factor.to_array(rows)?;
        let factor = factor.as_primitive::<datafusion::arrow::datatypes::Float64Type>();
        let divide = match divide {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::Boolean(Some(d))) => *d,
            _ => return Err(DataFusionError::Internal("interval_scale: divide is a constant".into())),
        };
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            out.push(if span.is_null(i) || factor.is_null(i) {
                None
            } else {
                Some(
                    scale(span.value(i), factor.value(i), divide)
                        .map_err(|e| DataFusionError::External(Box::new(e)))?,
                )
            });
        }
        let result: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(out));
        Ok(if scalar {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&result, 0)?)
        } else {
            ColumnarValue::Array(result)
        })
    }
}

const DAYS_PER_MONTH: f64 = 30.0;
const SECONDS_PER_DAY: f64 = 86_400.0;

/// Rounded to the microsecond, as PostgreSQL's `TSROUND`.
fn to_micros(x: f64) -> f64 {
    (x * 1e6).round_ties_even() / 1e6
}

/// PostgreSQL's `interval_mul` (or `interval_div`) of `v` by `factor`.
pub fn scale(v: IntervalMonthDayNano, factor: f64, divide: bool) -> Result<IntervalMonthDayNano, WeirError> {
    if divide && factor == 0.0 {
        return Err(WeirError::new(SqlState::DIVISION_BY_ZERO, "division by zero"));
    }
    let by = |x: f64| if divide { x / factor } else { x * factor };
    let out_of_range = || WeirError::new(SqlState("22008"), "interval out of range");
    let fits = |x: f64| x.is_finite() && x > i32::MIN as f64 - 1.0 && x < i32::MAX as f64 + 1.0;
    let months = by(v.months as f64);
    let days = by(v.days as f64);
    if !fits(months) || !fits(days) {
        return Err(out_of_range());
    }
    let (whole_months, mut whole_days) = (months.trunc() as i32, days.trunc() as i32);
    let month_remainder_days = to_micros((months - whole_months as f64) * DAYS_PER_MONTH);
    let mut seconds =
        to_micros((days - whole_days as f64 + month_remainder_days - month_remainder_days.trunc()) * SECONDS_PER_DAY);
    if seconds.abs() >= SECONDS_PER_DAY {
        let carried = (seconds / SECONDS_PER_DAY).trunc();
        whole_days = whole_days.checked_add(carried as i32).ok_or_else(out_of_range)?;
        seconds -= carried * SECONDS_PER_DAY;
    }
    whole_days = whole_days.checked_add(month_remainder_days.trunc() as i32).ok_or_else(out_of_range)?;
    // The time, in microseconds as PostgreSQL keeps it, then back to nanoseconds.
    let micros = (by(v.nanoseconds as f64 / 1000.0) + seconds * 1e6).round_ties_even();
    if !micros.is_finite() || micros.abs() > (i64::MAX / 1000) as f64 {
        return Err(out_of_range());
    }
    Ok(IntervalMonthDayNano::new(whole_months, whole_days, micros as i64 * 1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(months: i32, days: i32, seconds: i64) -> IntervalMonthDayNano {
        IntervalMonthDayNano::new(months, days, seconds * 1_000_000_000)
    }

    #[test]
    fn scaling_carries_what_months_and_days_leave_over_as_postgres_does() {
        // SELECT interval '1 hour' * 3 = 03:00:00
        assert_eq!(scale(iv(0, 0, 3600), 3.0, false).unwrap(), iv(0, 0, 3 * 3600));
        // interval '1 month' * 1.5 = 1 mon 15 days
        assert_eq!(scale(iv(1, 0, 0), 1.5, false).unwrap(), iv(1, 15, 0));
        // interval '1 day' / 4 = 06:00:00
        assert_eq!(scale(iv(0, 1, 0), 4.0, true).unwrap(), iv(0, 0, 6 * 3600));
        // interval '1 mon 1 day' * 0.5 = 15 days 12:00:00
        assert_eq!(scale(iv(1, 1, 0), 0.5, false).unwrap(), iv(0, 15, 12 * 3600));
        // interval '3 days' * -1 = -3 days
        assert_eq!(scale(iv(0, 3, 0), -1.0, false).unwrap(), iv(0, -3, 0));
        assert_eq!(scale(iv(0, 1, 0), 0.0, true).unwrap_err().state, SqlState::DIVISION_BY_ZERO);
        assert_eq!(scale(iv(1, 0, 0), 1e12, false).unwrap_err().state, SqlState("22008"));
    }
}
