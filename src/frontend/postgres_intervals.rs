//! An analyzer rule for DataFusion: intervals compare, sort and subtract as in PostgreSQL.
//!
//! Arrow keeps an interval as three fields (months, days, nanoseconds) and DataFusion compares
//! and sorts them field by field, so `interval '24 hours' = interval '1 day'` was false and
//! `interval '25 hours' > interval '1 day'` too. PostgreSQL orders intervals by one number, the
//! interval with a month counted as 30 days and a day as 24 hours (`interval_cmp_value`).
//! (`timestamp - timestamp` is an Arrow duration, which reads as PostgreSQL's days and time,
//! `20 days 23:59:59`, in results: `types::pg_text`; casts of it to text do so by this rule.)
//! After type coercion this rule
//! - writes a duration cast to text as PostgreSQL writes the interval (`text_casts`);
//! - compares intervals (`=`, `<>`, `<`, `<=`, `>`, `>=`, `IS [NOT] DISTINCT FROM`) by
//!   [`IntervalOrder`], that one number;
//! - sorts by it (`ORDER BY` an interval);
//! - counts by it (`count(DISTINCT iv)`) and groups by it (`GROUP BY` an interval, `SELECT
//!   DISTINCT` with an interval column): equal
//!   intervals are one group, shown as the least of them by fields (`'24:00:00'` before
//!   `'1 day'`), so that a view and its query show the same one whatever order rows came in
//!   (PostgreSQL shows whichever its plan met first).
//!
//! Expressions keep their names. `min`/`max` of intervals and `IN` lists still compare by
//! fields (docs/sql-reference.md).
//! A view made before the rule existed is planned without it (`PlanningRules::postgres_intervals`),
//! so its stored rows and new ones agree. Registered by `df_context::template_state`.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, IntervalMonthDayNanoArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalMonthDayNano, IntervalUnit, TimeUnit, DECIMAL128_MAX_PRECISION};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Distinct, Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

const NANOS_PER_DAY: i128 = 86_400_000_000_000;
const DAYS_PER_MONTH: i128 = 30;

#[derive(Debug, Default)]
pub struct PostgresIntervals;

impl AnalyzerRule for PostgresIntervals {
    fn name(&self) -> &str {
        "weir_postgres_intervals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = super::keep_names::input_schema(&node);
            let rewritten = super::keep_names::rewrite_expressions(node, |e| rewrite(e, &schema))?;
            rewritten.transform_data(|node| match node {
                LogicalPlan::Distinct(Distinct::All(input))
                    if input.schema().fields().iter().any(|f| interval_type(f.data_type())) =>
                {
                    // As DataFusion's optimizer would make it (`replace_distinct_aggregate`),
                    // now, so that the grouping below applies.
                    let groups: Vec<Expr> = input.schema().columns().into_iter().map(Expr::Column).collect();
                    let aggregate = LogicalPlanBuilder::from(Arc::unwrap_or_clone(input))
                        .aggregate(groups, Vec::<Expr>::new())?
                        .build()?;
                    Ok(Transformed::yes(group_intervals(aggregate)?.data))
                }
                aggregate @ LogicalPlan::Aggregate(_) => group_intervals(aggregate),
                LogicalPlan::Sort(mut sort) => {
                    let mut changed = false;
                    for s in &mut sort.expr {
                        if is_interval(&s.expr, &schema) {
                            s.expr = order_of(s.expr.clone());
                            changed = true;
                        }
                    }
                    let node = LogicalPlan::Sort(sort);
                    Ok(if changed { Transformed::yes(node) } else { Transformed::no(node) })
                }
                other => Ok(Transformed::no(other)),
            })
        })
        .data()
    }
}

/// An aggregate grouping by intervals made one grouping by their [`IntervalOrder`], each
/// interval key shown as the least of its group (`min`), under a projection that gives the
/// columns their names again.
fn group_intervals(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Aggregate(aggregate) = &plan else {
        return Ok(Transformed::no(plan));
    };
    let input_schema = aggregate.input.schema();
    let by_interval: Vec<bool> = aggregate.group_expr.iter().map(|g| is_interval(g, input_schema)).collect();
    let grouping_sets = aggregate.group_expr.iter().any(|g| matches!(g, Expr::GroupingSet(_)));
    if grouping_sets || !by_interval.iter().any(|b| *b) {
        return Ok(Transformed::no(plan));
    }
    let LogicalPlan::Aggregate(aggregate) = plan else { unreachable!("matched above") };
    let mut groups = Vec::new();
    let mut shown = Vec::new();
    for (i, (g, interval)) in aggregate.group_expr.iter().zip(&by_interval).enumerate() {
        if *interval {
            groups.push(order_of(g.clone()).alias(format!("__interval_group_{i}")));
            shown.push(datafusion::functions_aggregate::expr_fn::min(g.clone()).alias(format!("__interval_shown_{i}")));
        } else {
            groups.push(g.clone());
        }
    }
    let n_groups = groups.len();
    let n_aggs = aggregate.aggr_expr.len();
    let aggs: Vec<Expr> = aggregate.aggr_expr.iter().cloned().chain(shown).collect();
    let regrouped = LogicalPlanBuilder::from(Arc::unwrap_or_clone(aggregate.input)).aggregate(groups, aggs)?.build()?;
    let columns = regrouped.schema().columns();
    let mut shown_at = n_groups + n_aggs;
    let mut exprs = Vec::with_capacity(aggregate.schema.fields().len());
    for (j, (qualifier, field)) in aggregate.schema.iter().enumerate() {
        let source = if j < n_groups && by_interval[j] {
            shown_at += 1;
            shown_at - 1
        } else {
            j
        };
        exprs.push(Expr::Column(columns[source].clone()).alias_qualified(qualifier.cloned(), field.name()));
    }
    Ok(Transformed::yes(LogicalPlanBuilder::from(regrouped).project(exprs)?.build()?))
}

/// `e` with a duration's text or an interval comparison made PostgreSQL's.
fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    if let Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) = &e {
        let to = field.data_type();
        if matches!(to, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
            && matches!(expr.get_type(schema), Ok(DataType::Duration(_)))
        {
            return Ok(Transformed::yes(super::text_casts::postgres_text_of(expr.as_ref().clone(), to.clone())));
        }
        return Ok(Transformed::no(e));
    }
    // count(DISTINCT iv): equal intervals count once.
    if let Expr::AggregateFunction(f) = &e {
        let distinct_intervals =
            f.params.distinct && f.func.name() == "count" && f.params.args.iter().any(|a| is_interval(a, schema));
        if !distinct_intervals {
            return Ok(Transformed::no(e));
        }
        let mut counted = f.clone();
        counted.params.args = f
            .params
            .args
            .iter()
            .map(|a| if is_interval(a, schema) { order_of(a.clone()) } else { a.clone() })
            .collect();
        return Ok(Transformed::yes(Expr::AggregateFunction(counted)));
    }
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    let (Ok(l), Ok(r)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(e));
    };
    match op {
        Operator::Eq
        | Operator::NotEq
        | Operator::Lt
        | Operator::LtEq
        | Operator::Gt
        | Operator::GtEq
        | Operator::IsDistinctFrom
        | Operator::IsNotDistinctFrom
            if interval_type(&l) && interval_type(&r) =>
        {
            let compared = BinaryExpr::new(Box::new(order_of(*left.clone())), *op, Box::new(order_of(*right.clone())));
            Ok(Transformed::yes(Expr::BinaryExpr(compared)))
        }
        _ => Ok(Transformed::no(e)),
    }
}

fn interval_type(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_) | DataType::Duration(_))
}

fn is_interval(e: &Expr, schema: &DFSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| interval_type(&t))
}

/// `e` (an interval) as the number PostgreSQL orders intervals by.
fn order_of(e: Expr) -> Expr {
    if matches!(&e, Expr::ScalarFunction(f) if f.name() == INTERVAL_ORDER.name()) {
        return e;
    }
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&INTERVAL_ORDER), vec![e]))
}

/// An interval in nanoseconds, a month counted as 30 days and a day as 24 hours: the value
/// PostgreSQL compares intervals by (`interval_cmp_value`).
pub fn interval_order_nanos(v: IntervalMonthDayNano) -> i128 {
    (v.months as i128 * DAYS_PER_MONTH + v.days as i128) * NANOS_PER_DAY + v.nanoseconds as i128
}

static INTERVAL_ORDER: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| Arc::new(ScalarUDF::new_from_impl(IntervalOrder::new())));

/// `interval_order(iv)`: [`interval_order_nanos`] of an interval or a duration, as a
/// `numeric(38, 0)` (the month-and-day total of an interval does not fit 64 bits).
#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalOrder {
    signature: Signature,
}

impl IntervalOrder {
    fn new() -> IntervalOrder {
        IntervalOrder { signature: Signature::any(1, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for IntervalOrder {
    fn name(&self) -> &str {
        "interval_order"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Decimal128(DECIMAL128_MAX_PRECISION, 0))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let intervals = as_month_day_nano(&arrays[0])?;
        let order: Decimal128Array = intervals.unary_opt(|v| Some(interval_order_nanos(v)));
        let order = order.with_precision_and_scale(DECIMAL128_MAX_PRECISION, 0)?;
        finish(Arc::new(order), scalar)
    }
}

/// Any interval or duration array as months, days and nanoseconds.
fn as_month_day_nano(array: &ArrayRef) -> Result<IntervalMonthDayNanoArray> {
    let array = match array.data_type() {
        DataType::Interval(IntervalUnit::MonthDayNano) => Arc::clone(array),
        DataType::Duration(_) => {
            let nanos = cast(array, &DataType::Duration(TimeUnit::Nanosecond))?;
            let nanos = cast(&nanos, &DataType::Int64)?;
            let nanos = nanos.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            Arc::new(nanos.unary::<_, datafusion::arrow::datatypes::IntervalMonthDayNanoType>(|n| {
                IntervalMonthDayNano::new(0, 0, n)
            })) as ArrayRef
        }
        _ => cast(array, &DataType::Interval(IntervalUnit::MonthDayNano))?,
    };
    Ok(array.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>().clone())
}

fn finish(array: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    if scalar {
        return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?));
    }
    Ok(ColumnarValue::Array(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_is_thirty_days_and_a_day_twenty_four_hours() {
        let day = interval_order_nanos(IntervalMonthDayNano::new(0, 1, 0));
        assert_eq!(day, interval_order_nanos(IntervalMonthDayNano::new(0, 0, 24 * 3_600_000_000_000)));
        assert_eq!(interval_order_nanos(IntervalMonthDayNano::new(1, 0, 0)), 30 * day);
        assert!(interval_order_nanos(IntervalMonthDayNano::new(0, 0, 25 * 3_600_000_000_000)) > day);
    }
}
