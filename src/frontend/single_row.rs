//! A correlated scalar subquery that is not aggregated, `(SELECT g.tag FROM g WHERE g.k = t.k)`,
//! as PostgreSQL runs it: its one row's value, NULL for no row, and for more than one row the
//! error 21000 "more than one row returned by a subquery used as an expression" (for the outer
//! rows that read it only: a group of two rows no outer row matches is no error).
//!
//! DataFusion decorrelates a scalar subquery only when it is aggregated (or its conditions pin a
//! key), and refuses the rest ("Correlated scalar subquery must be aggregated to return at most
//! one row"). This analyzer rule (one of the adapter's planning rules) aggregates such a
//! subquery's one column with `weir_single_row`, whose value is the group's first value and
//! whether there were more ([`ROW`]'s two fields), and reads the subquery's answer with
//! `weir_single_row_value`, which raises the error for an outer row whose group had more. DataFusion
//! then plans the subquery as a join like any aggregated one. Only subqueries with outer columns
//! and a select list of one column over no aggregate, whose conditions do not pin a key, are
//! changed (materialized views refuse them: [`refuse_in_view`]); an uncorrelated subquery keeps
//! DataFusion's own check (also 21000). A correlated condition other than equality still cannot
//! be decorrelated (0A000). Registered by `df_context::template_state`, before `outer_conditions`.

use std::sync::Arc;

use datafusion::arrow::array::{make_array, Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields, UInt64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::scalar::ScalarStructBuilder;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{exec_err, Column, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Expr, LogicalPlan, LogicalPlanBuilder,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Subquery, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{SqlState, WeirError};

/// The aggregate's name, as plans show it.
pub const NAME: &str = "weir_single_row";

/// The fields of what the aggregate returns: the first row's value, and whether more rows came.
pub const ROW: [&str; 2] = ["value", "more"];

fn row_fields(value: &DataType) -> Fields {
    Fields::from(vec![Field::new(ROW[0], value.clone(), true), Field::new(ROW[1], DataType::Boolean, false)])
}

/// `weir_single_row(x)`: `{value: the first row's x, more: whether another row came}`; NULL over no rows.
pub fn single_row_udaf() -> AggregateUDF {
    AggregateUDF::from(SingleRow { signature: Signature::any(1, Volatility::Immutable) })
}

/// `weir_single_row_value(row)`: the row's value; 21000 when more rows came.
pub fn single_row_value_udf() -> ScalarUDF {
    ScalarUDF::from(SingleRowValue { signature: Signature::any(1, Volatility::Immutable) })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SingleRow {
    signature: Signature,
}

impl AggregateUDFImpl for SingleRow {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(row_fields(&arg_types[0])))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(format_state_name(args.name, "value"), args.input_fields[0].data_type().clone(), true)),
            Arc::new(Field::new(format_state_name(args.name, "rows"), DataType::UInt64, false)),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let data_type = args.expr_fields[0].data_type().clone();
        Ok(Box::new(OnlyRow { value: ScalarValue::try_from(&data_type)?, data_type, rows: 0 }))
    }
}

/// The value of the first row seen, and how many rows were.
#[derive(Debug)]
struct OnlyRow {
    data_type: DataType,
    value: ScalarValue,
    rows: u64,
}

impl OnlyRow {
    fn saw(&mut self, value: impl FnOnce() -> Result<ScalarValue>, rows: u64) -> Result<()> {
        if rows > 0 && self.rows == 0 {
            self.value = value()?;
        }
        self.rows += rows;
        Ok(())
    }
}

impl Accumulator for OnlyRow {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let array = &values[0];
        self.saw(|| ScalarValue::try_from_array(array, 0), array.len() as u64)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (values, rows) = (&states[0], states[1].as_primitive::<UInt64Type>());
        for i in 0..rows.len() {
            self.saw(|| ScalarValue::try_from_array(values, i), rows.value(i))?;
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.value.clone(), ScalarValue::UInt64(Some(self.rows))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let fields = row_fields(&self.data_type);
        if self.rows == 0 {
            return Ok(ScalarStructBuilder::new_null(fields));
        }
        ScalarStructBuilder::new()
            .with_scalar(Arc::clone(&fields[0]), self.value.clone())
            .with_scalar(Arc::clone(&fields[1]), ScalarValue::Boolean(Some(self.rows > 1)))
            .build()
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size() - std::mem::size_of_val(&self.value)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SingleRowValue {
    signature: Signature,
}

impl ScalarUDFImpl for SingleRowValue {
    fn name(&self) -> &str {
        "weir_single_row_value"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match &arg_types[0] {
            DataType::Struct(fields) if fields.len() == 2 => Ok(fields[0].data_type().clone()),
            other => exec_err!("weir_single_row_value takes what weir_single_row returns, not {other}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.args[0].to_array(args.number_rows)?;
        let rows = rows.as_struct();
        let more: &BooleanArray = rows.column(1).as_boolean();
        if (0..rows.len()).any(|i| rows.is_valid(i) && more.is_valid(i) && more.value(i)) {
            let error = WeirError::new(
                SqlState::CARDINALITY_VIOLATION,
                "more than one row returned by a subquery used as an expression",
            );
            return Err(error.into());
        }
        // A row that is NULL (no row matched) has no value, whatever its child holds.
        let values = rows.column(0).to_data();
        let nulls = NullBuffer::union(rows.nulls(), values.nulls());
        Ok(ColumnarValue::Array(make_array(values.into_builder().nulls(nulls).build()?)))
    }
}

/// Refuses a view whose (optimized) plan reads a subquery through `weir_single_row`: views keep
/// no such aggregate (0A000, with what to write instead).
pub fn refuse_in_view(plan: &LogicalPlan) -> crate::error::Result<()> {
    let mut found = false;
    plan.apply(|node| {
        found |= matches!(node, LogicalPlan::Aggregate(a) if a.aggr_expr.iter().any(|e| {
            matches!(e.clone().unalias(), Expr::AggregateFunction(f) if f.func.name() == NAME)
        }));
        Ok(if found {
            datafusion::common::tree_node::TreeNodeRecursion::Stop
        } else {
            datafusion::common::tree_node::TreeNodeRecursion::Continue
        })
    })?;
    if found {
        return Err(WeirError::new(
            SqlState::FEATURE_NOT_SUPPORTED,
            "a correlated subquery in a select list whose conditions do not pin one row (a key) is not supported in a materialized view yet",
        )
        .with_hint("aggregate its column (max(...)) or write the subquery as a join"));
    }
    Ok(())
}

#[derive(Debug, Default)]
pub struct SingleRowSubqueries;

impl AnalyzerRule for SingleRowSubqueries {
    fn name(&self) -> &str {
        "weir_single_row_subqueries"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| node.map_expressions(|expr| expr.transform_up(aggregate_one_row)))
            .data()
    }
}

/// A correlated `(SELECT e FROM ...)` without an aggregate as
/// `weir_single_row_value((SELECT weir_single_row(e) FROM ...))`.
fn aggregate_one_row(expr: Expr) -> Result<Transformed<Expr>> {
    let Expr::ScalarSubquery(subquery) = &expr else { return Ok(Transformed::no(expr)) };
    let LogicalPlan::Projection(projection) = subquery.subquery.as_ref() else { return Ok(Transformed::no(expr)) };
    let aggregated = matches!(projection.input.as_ref(), LogicalPlan::Aggregate(_));
    // DataFusion takes a subquery whose conditions pin a key as is (at most one row).
    let one_row = subquery.subquery.max_rows().is_some_and(|rows| rows <= 1);
    if subquery.outer_ref_columns.is_empty() || aggregated || one_row || projection.expr.len() != 1 {
        return Ok(Transformed::no(expr));
    }
    let value = projection.expr[0].clone();
    let row = aggregate_subquery(&projection.input, single_row_udaf().call(vec![value.unalias()]), subquery)?;
    Ok(Transformed::yes(single_row_value_udf().call(vec![row])))
}

/// `(SELECT aggregate FROM input)` as a scalar subquery, with `like`'s spans and the outer
/// columns it reads: how this rule and `outer_conditions` rebuild a subquery over its input.
pub fn aggregate_subquery(input: &LogicalPlan, aggregate: Expr, like: &Subquery) -> Result<Expr> {
    let plan = LogicalPlanBuilder::from(input.clone()).aggregate(Vec::<Expr>::new(), vec![aggregate])?.build()?;
    let column = Expr::Column(Column::from(plan.schema().qualified_field(0)));
    let plan = LogicalPlanBuilder::from(plan).project(vec![column])?.build()?;
    let outer_ref_columns = plan.all_out_ref_exprs();
    Ok(Expr::ScalarSubquery(Subquery { subquery: Arc::new(plan), outer_ref_columns, spans: like.spans.clone() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, UInt64Array};

    fn more(row: ScalarValue) -> Option<bool> {
        match row {
            ScalarValue::Struct(s) if s.is_valid(0) => Some(s.column(1).as_boolean().value(0)),
            _ => None,
        }
    }

    #[test]
    fn the_first_value_and_whether_more_rows_came() {
        let fresh = || OnlyRow { data_type: DataType::Int32, value: ScalarValue::Int32(None), rows: 0 };
        let mut none = fresh();
        none.update_batch(&[Arc::new(Int32Array::from(Vec::<i32>::new()))]).unwrap();
        assert_eq!(more(none.evaluate().unwrap()), None, "no row: NULL");

        let mut one = fresh();
        one.update_batch(&[Arc::new(Int32Array::from(vec![7]))]).unwrap();
        assert_eq!(more(one.evaluate().unwrap()), Some(false));
        // A second row, merged from another partition.
        let state: Vec<ArrayRef> =
            vec![Arc::new(Int32Array::from(vec![Some(8)])), Arc::new(UInt64Array::from(vec![1u64]))];
        one.merge_batch(&state).unwrap();
        assert_eq!(more(one.evaluate().unwrap()), Some(true));
        assert_eq!(one.value, ScalarValue::Int32(Some(7)));
    }
}
