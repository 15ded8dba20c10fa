//! `percentile_disc(f) WITHIN GROUP (ORDER BY x)` and `mode() WITHIN GROUP (ORDER BY x)`:
//! PostgreSQL's ordered-set aggregates DataFusion lacks, as DataFusion aggregate functions, so
//! queries (and the batch query a view must equal) have them. Each keeps its group's non-NULL
//! values and picks one at the end by the one rule views use too (`types::ordered_set`); views
//! maintain them incrementally in `operators::hash_agg`. Ascending order only (DESC is refused
//! when planned). Registered by `df_context::template_state`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Signature, Volatility};

use crate::types::ordered_set::{mode, percentile_disc_index};

/// Which ordered-set aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Pick {
    PercentileDisc,
    Mode,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct OrderedSetAggregate {
    pick: Pick,
    signature: Signature,
}

/// `percentile_disc(fraction) WITHIN GROUP (ORDER BY x)`.
pub fn percentile_disc() -> AggregateUDF {
    AggregateUDF::from(OrderedSetAggregate {
        pick: Pick::PercentileDisc,
        signature: Signature::any(2, Volatility::Immutable),
    })
}

/// `mode() WITHIN GROUP (ORDER BY x)`.
pub fn mode_udaf() -> AggregateUDF {
    AggregateUDF::from(OrderedSetAggregate { pick: Pick::Mode, signature: Signature::any(1, Volatility::Immutable) })
}

impl AggregateUDFImpl for OrderedSetAggregate {
    fn name(&self) -> &str {
        match self.pick {
            Pick::PercentileDisc => "percentile_disc",
            Pick::Mode => "mode",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn supports_within_group_clause(&self) -> bool {
        true
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let item = Field::new_list_field(args.input_fields[0].data_type().clone(), true);
        Ok(vec![Arc::new(Field::new(format_state_name(args.name, "values"), DataType::List(Arc::new(item)), true))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.order_bys.iter().any(|o| o.options.descending) {
            return plan_err!("{} WITHIN GROUP (ORDER BY ... DESC) is not supported", self.name());
        }
        let fraction = match self.pick {
            Pick::Mode => 0.0,
            Pick::PercentileDisc => {
                let fraction = args.exprs.get(1).and_then(|e| {
                    let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
                    match e.evaluate(&empty) {
                        Ok(ColumnarValue::Scalar(value)) => Some(value),
                        _ => None,
                    }
                });
                match fraction.map(|v| v.cast_to(&DataType::Float64)) {
                    Some(Ok(ScalarValue::Float64(Some(f)))) if (0.0..=1.0).contains(&f) => f,
                    _ => return plan_err!("percentile_disc takes a constant fraction between 0 and 1"),
                }
            }
        };
        let data_type = args.expr_fields[0].data_type().clone();
        Ok(Box::new(ValuesInOrder { pick: self.pick, fraction, data_type, values: Vec::new() }))
    }
}

/// A group's non-NULL values, picked from in order at the end.
#[derive(Debug)]
struct ValuesInOrder {
    pick: Pick,
    fraction: f64,
    data_type: DataType,
    values: Vec<ScalarValue>,
}

impl Accumulator for ValuesInOrder {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let array = &values[0];
        for i in 0..array.len() {
            if array.is_valid(i) {
                self.values.push(ScalarValue::try_from_array(array, i)?);
            }
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_valid(i) {
                self.update_batch(&[lists.value(i)])?;
            }
        }
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(&self.values, &self.data_type))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let picked = match self.pick {
            Pick::PercentileDisc => percentile_disc_index(self.values.len(), self.fraction).map(|i| &self.values[i]),
            Pick::Mode => mode(&self.values),
        };
        match picked {
            Some(value) => Ok(value.clone()),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + ScalarValue::size_of_vec(&self.values) - std::mem::size_of_val(&self.values)
    }
}
