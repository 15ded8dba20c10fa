//! Reads a time bound between a join's two sides out of its residual condition, for
//! [`JoinInterval`]: q7's `b.date_time > b1.date_time - INTERVAL '10' SECOND AND b.date_time <=
//! b1.date_time`, where `b1.date_time` is a window bound, says `b.date_time - b1.date_time` is
//! within `[-10 s, 0]`, so a bid whose window is final meets no future row and can be deleted.
//!
//! Called by `stream_plan::translate` for inner joins. Only conjuncts comparing a TIMESTAMP column of
//! one side, plus or minus a constant interval, with one of the other side count; anything else
//! in the condition stays a plain filter (this only adds state cleanup, never changes results).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use crate::operators::hash_join::JoinInterval;
use crate::types::window::TimeColumn;

const NANOS_PER_DAY: i64 = 86_400_000_000_000;

/// The bound `filter` (over `schema`: the left input's `left_width` columns, then the right's)
/// puts on a pair of time columns, with one of them a window bound (`times`, by column of
/// `schema`) so that rows of the other side can expire; None when it puts none.
pub fn join_interval(
    filter: &Expr,
    schema: &DFSchema,
    left_width: usize,
    times: &[Option<TimeColumn>],
) -> Option<JoinInterval> {
    // Bounds on left - right, by (left column, right column).
    let mut found: Vec<JoinInterval> = Vec::new();
    for conjunct in split_conjunction(filter) {
        let Some(([l, r], op, bound)) = side_difference(conjunct, schema, left_width) else { continue };
        let entry = match found.iter_mut().position(|i| i.columns == [l, r]) {
            Some(at) => &mut found[at],
            None => {
                let windows = [times[l], times[left_width + r]];
                found.push(JoinInterval { columns: [l, r], windows, lo: None, hi: None });
                found.last_mut().expect("pushed")
            }
        };
        match op {
            Operator::Gt | Operator::GtEq => entry.lo = Some(entry.lo.map_or(bound, |lo| lo.max(bound))),
            _ => entry.hi = Some(entry.hi.map_or(bound, |hi| hi.min(bound))),
        }
    }
    // The first pair under which either side's rows expire.
    found.into_iter().find(|i| i.expires(0) || i.expires(1))
}

/// `conjunct` as `left.l - right.r <op> bound` (op one of <, <=, >, >=; columns in each side's
/// input), if it compares a time of one side with a time of the other.
fn side_difference(conjunct: &Expr, schema: &DFSchema, left_width: usize) -> Option<([usize; 2], Operator, i64)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else { return None };
    if !matches!(op, Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq) {
        return None;
    }
    let ((a, a_offset), (b, b_offset)) = (shifted_time(left, schema)?, shifted_time(right, schema)?);
    // a + a_offset <op> b + b_offset, i.e. a - b <op> b_offset - a_offset.
    let bound = b_offset.checked_sub(a_offset)?;
    match (a < left_width, b < left_width) {
        (true, false) => Some(([a, b - left_width], *op, bound)),
        // b - a <swapped op> -bound.
        (false, true) => Some(([b, a - left_width], op.swap()?, bound.checked_neg()?)),
        _ => None,
    }
}

/// `expr` as a TIMESTAMP column plus a constant interval in nanoseconds: `c`, `c + i`, `c - i`,
/// or a cast of `c` to another TIMESTAMP type.
fn shifted_time(expr: &Expr, schema: &DFSchema) -> Option<(usize, i64)> {
    match expr {
        Expr::Column(c) => {
            let index = schema.index_of_column(c).ok()?;
            matches!(schema.field(index).data_type(), DataType::Timestamp(_, _)).then_some((index, 0))
        }
        Expr::Cast(cast) if matches!(cast.field.data_type(), DataType::Timestamp(_, _)) => {
            shifted_time(&cast.expr, schema)
        }
        Expr::BinaryExpr(BinaryExpr { left, op: op @ (Operator::Plus | Operator::Minus), right }) => {
            let (column, offset) = shifted_time(left, schema)?;
            let Expr::Literal(value, _) = right.as_ref() else { return None };
            let nanos = interval_nanos(value)?;
            let nanos = if *op == Operator::Minus { nanos.checked_neg()? } else { nanos };
            Some((column, offset.checked_add(nanos)?))
        }
        _ => None,
    }
}

/// A fixed-length interval in nanoseconds (not one counted in months, whose length varies).
pub(crate) fn interval_nanos(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            (v.days as i64).checked_mul(NANOS_PER_DAY)?.checked_add(v.nanoseconds)
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            (v.days as i64).checked_mul(NANOS_PER_DAY)?.checked_add((v.milliseconds as i64).checked_mul(1_000_000)?)
        }
        ScalarValue::DurationNanosecond(Some(v)) => Some(*v),
        ScalarValue::DurationMicrosecond(Some(v)) => v.checked_mul(1_000),
        ScalarValue::DurationMillisecond(Some(v)) => v.checked_mul(1_000_000),
        ScalarValue::DurationSecond(Some(v)) => v.checked_mul(1_000_000_000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};
    use datafusion::prelude::{col, lit};

    const S: i64 = 1_000_000_000;

    fn schema() -> DFSchema {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let left = DFSchema::try_from_qualified_schema(
            "b",
            &Schema::new(vec![Field::new("price", DataType::Int64, true), Field::new("date_time", ts.clone(), true)]),
        )
        .unwrap();
        let right =
            DFSchema::try_from_qualified_schema("b1", &Schema::new(vec![Field::new("date_time", ts, true)])).unwrap();
        left.join(&right).unwrap()
    }

    fn ten_seconds() -> Expr {
        lit(ScalarValue::new_interval_mdn(0, 0, 10 * S))
    }

    #[test]
    fn q7s_condition_bounds_the_bid_by_its_window() {
        let schema = schema();
        let window = Some(TimeColumn { close_offset: 0 });
        let filter = col("b.date_time")
            .gt(col("b1.date_time") - ten_seconds())
            .and(col("b.date_time").lt_eq(col("b1.date_time")))
            .and(col("b.price").gt(lit(1i64)));
        let interval = join_interval(&filter, &schema, 2, &[None, None, window]).unwrap();
        assert_eq!(interval.columns, [1, 0]);
        assert_eq!((interval.lo, interval.hi), (Some(-10 * S), Some(0)));
        // Written the other way round, the same bound.
        let flipped = (col("b1.date_time") - ten_seconds())
            .lt(col("b.date_time"))
            .and(col("b1.date_time").gt_eq(col("b.date_time")));
        assert_eq!(join_interval(&flipped, &schema, 2, &[None, None, window]), Some(interval));
    }

    #[test]
    fn no_window_bound_no_expiry() {
        let schema = schema();
        let filter = col("b.date_time").gt(col("b1.date_time") - ten_seconds());
        assert_eq!(join_interval(&filter, &schema, 2, &[None, None, None]), None);
        // The left side is the window: a lower bound alone expires nothing on the right.
        let window = Some(TimeColumn { close_offset: 0 });
        assert_eq!(join_interval(&filter, &schema, 2, &[None, window, None]), None);
        // A month is not a fixed length.
        let month = col("b.date_time").gt(col("b1.date_time") - lit(ScalarValue::new_interval_mdn(1, 0, 0)));
        assert_eq!(join_interval(&month, &schema, 2, &[None, None, window]), None);
    }
}
