//! Grouped aggregation with retraction: count, count(DISTINCT), sum, avg, min, max, bool_and,
//! bool_or.
//!
//! Per group it keeps the number of input rows and one accumulator per aggregate, each able to
//! take a row back: counts and sums subtract, `min` / `max` keep every value with its
//! multiplicity so that deleting the current extreme reveals the next one. Changes are applied
//! as they arrive; at each barrier every group touched in the epoch emits its change once
//! (`U-` old row, `U+` new row; `-` when its last row left, `+` when it appeared). An aggregate
//! without GROUP BY has one group that always exists, as in SQL (`count(*)` of nothing is 0).
//!
//! State lives in memory for now (see docs/architecture.md, "Streaming").

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::operator::Operator;
use crate::error::{Result, WeirError};
use crate::types::{ChangeBatch, Op};

/// What an aggregate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    /// `count(*)`: rows.
    CountRows,
    /// `count(x)`: non-NULL values.
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// `count(DISTINCT x)`.
    CountDistinct,
    BoolAnd,
    BoolOr,
}

impl AggKind {
    /// The kind for a DataFusion aggregate function name, if Weir can maintain it.
    pub fn from_name(name: &str, has_arg: bool, distinct: bool) -> Option<AggKind> {
        Some(match (name.to_ascii_lowercase().as_str(), has_arg, distinct) {
            ("count", false, false) => AggKind::CountRows,
            ("count", true, false) => AggKind::Count,
            ("count", true, true) => AggKind::CountDistinct,
            ("sum", true, false) => AggKind::Sum,
            ("avg" | "mean", true, false) => AggKind::Avg,
            // DISTINCT does not change an extreme.
            ("min", true, _) => AggKind::Min,
            ("max", true, _) => AggKind::Max,
            ("bool_and", true, _) => AggKind::BoolAnd,
            ("bool_or", true, _) => AggKind::BoolOr,
            _ => return None,
        })
    }
}

pub struct AggSpec {
    pub kind: AggKind,
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    /// The output column's type.
    pub output_type: DataType,
}

/// A ScalarValue with a total order, for min/max multisets.
#[derive(Debug, Clone, PartialEq)]
struct Ordered(ScalarValue);
impl Eq for Ordered {}
impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

enum Acc {
    Count(i64),
    Sum { sum: ScalarValue, values: i64 },
    Avg { sum: f64, values: i64 },
    Extreme { values: BTreeMap<Ordered, i64>, max: bool },
    Distinct(BTreeMap<Ordered, i64>),
    Bools { trues: i64, falses: i64 },
}

impl Acc {
    fn new(spec: &AggSpec) -> Result<Acc> {
        Ok(match spec.kind {
            AggKind::CountRows | AggKind::Count => Acc::Count(0),
            AggKind::Sum => Acc::Sum { sum: ScalarValue::new_zero(&spec.output_type)?, values: 0 },
            AggKind::Avg => Acc::Avg { sum: 0.0, values: 0 },
            AggKind::Min => Acc::Extreme { values: BTreeMap::new(), max: false },
            AggKind::Max => Acc::Extreme { values: BTreeMap::new(), max: true },
            AggKind::CountDistinct => Acc::Distinct(BTreeMap::new()),
            AggKind::BoolAnd | AggKind::BoolOr => Acc::Bools { trues: 0, falses: 0 },
        })
    }

    /// Adds (`sign` 1) or takes back (`sign` -1) one row's value.
    fn update(&mut self, spec: &AggSpec, value: Option<ScalarValue>, sign: i64) -> Result<()> {
        let value = value.filter(|v| !v.is_null());
        match self {
            Acc::Count(n) => {
                if spec.kind == AggKind::CountRows || value.is_some() {
                    *n += sign;
                }
            }
            Acc::Sum { sum, values } => {
                if let Some(v) = value {
                    let v = v.cast_to(&spec.output_type)?;
                    *sum = if sign > 0 { sum.add_checked(&v)? } else { sum.sub_checked(&v)? };
                    *values += sign;
                }
            }
            Acc::Avg { sum, values } => {
                if let Some(v) = value {
                    let ScalarValue::Float64(Some(f)) = v.cast_to(&DataType::Float64)? else {
                        return Err(WeirError::internal("avg of a non-numeric value"));
                    };
                    *sum += sign as f64 * f;
                    *values += sign;
                }
            }
            Acc::Extreme { values, .. } | Acc::Distinct(values) => {
                if let Some(v) = value {
                    let key = Ordered(v);
                    let count = values.entry(key.clone()).or_insert(0);
                    *count += sign;
                    if *count == 0 {
                        values.remove(&key);
                    }
                }
            }
            Acc::Bools { trues, falses } => match value {
                Some(ScalarValue::Boolean(Some(true))) => *trues += sign,
                Some(ScalarValue::Boolean(Some(false))) => *falses += sign,
                _ => {}
            },
        }
        Ok(())
    }

    fn value(&self, spec: &AggSpec) -> Result<ScalarValue> {
        let out = match self {
            Acc::Count(n) => ScalarValue::Int64(Some(*n)),
            Acc::Sum { sum, values } => {
                if *values == 0 {
                    ScalarValue::try_from(&spec.output_type)?
                } else {
                    sum.clone()
                }
            }
            Acc::Avg { sum, values } => {
                if *values == 0 {
                    ScalarValue::Float64(None)
                } else {
                    ScalarValue::Float64(Some(sum / *values as f64))
                }
            }
            Acc::Extreme { values, max } => {
                let v = if *max { values.keys().next_back() } else { values.keys().next() };
                v.map(|o| o.0.clone()).unwrap_or(ScalarValue::Null)
            }
            Acc::Distinct(values) => ScalarValue::Int64(Some(values.len() as i64)),
            Acc::Bools { trues, falses } => {
                if trues + falses == 0 {
                    ScalarValue::Boolean(None)
                } else if spec.kind == AggKind::BoolAnd {
                    ScalarValue::Boolean(Some(*falses == 0))
                } else {
                    ScalarValue::Boolean(Some(*trues > 0))
                }
            }
        };
        if out.is_null() {
            return Ok(ScalarValue::try_from(&spec.output_type)?);
        }
        Ok(out.cast_to(&spec.output_type)?)
    }
}

struct Group {
    rows: i64,
    accs: Vec<Acc>,
    /// The row last emitted for this group.
    emitted: Option<Vec<ScalarValue>>,
}

pub struct HashAgg {
    group_by: Vec<Arc<dyn PhysicalExpr>>,
    aggs: Vec<AggSpec>,
    schema: SchemaRef,
    groups: HashMap<Vec<ScalarValue>, Group>,
    dirty: HashSet<Vec<ScalarValue>>,
    view: String,
}

impl HashAgg {
    pub fn new(group_by: Vec<Arc<dyn PhysicalExpr>>, aggs: Vec<AggSpec>, schema: SchemaRef, view: &str) -> HashAgg {
        let mut agg =
            HashAgg { group_by, aggs, schema, groups: HashMap::new(), dirty: HashSet::new(), view: view.to_string() };
        if agg.group_by.is_empty() {
            // The one group of a global aggregate exists from the start.
            agg.dirty.insert(vec![]);
        }
        agg
    }

    fn group_row(&self, key: &[ScalarValue], group: &Group) -> Result<Vec<ScalarValue>> {
        let mut row = key.to_vec();
        for (acc, spec) in group.accs.iter().zip(&self.aggs) {
            row.push(acc.value(spec)?);
        }
        Ok(row)
    }

    fn rows_to_batch(&self, rows: &[Vec<ScalarValue>], ops: Vec<Op>) -> Result<ChangeBatch> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for (i, field) in self.schema.fields().iter().enumerate() {
            let values =
                rows.iter().map(|r| r[i].cast_to(field.data_type())).collect::<datafusion::error::Result<Vec<_>>>()?;
            columns.push(ScalarValue::iter_to_array(values)?);
        }
        Ok(ChangeBatch::new(RecordBatch::try_new(Arc::clone(&self.schema), columns)?, ops))
    }
}

impl Operator for HashAgg {
    fn describe(&self) -> String {
        let keys: Vec<String> = self.group_by.iter().map(|e| e.to_string()).collect();
        let aggs: Vec<String> = self
            .aggs
            .iter()
            .map(|a| format!("{:?}({})", a.kind, a.arg.as_ref().map(|e| e.to_string()).unwrap_or_else(|| "*".into())))
            .collect();
        format!("HashAgg: group by [{}], [{}]", keys.join(", "), aggs.join(", "))
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch) -> Result<Vec<ChangeBatch>> {
        let keys = self.group_by.iter().map(|e| evaluate(e, &batch.data, &self.view)).collect::<Result<Vec<_>>>()?;
        let args = self
            .aggs
            .iter()
            .map(|a| a.arg.as_ref().map(|e| evaluate(e, &batch.data, &self.view)).transpose())
            .collect::<Result<Vec<_>>>()?;
        for (row, op) in batch.ops.iter().enumerate() {
            let key = keys
                .iter()
                .map(|k| ScalarValue::try_from_array(k, row))
                .collect::<datafusion::error::Result<Vec<_>>>()?;
            if !self.groups.contains_key(&key) {
                let accs = self.aggs.iter().map(Acc::new).collect::<Result<Vec<_>>>()?;
                self.groups.insert(key.clone(), Group { rows: 0, accs, emitted: None });
            }
            let group = self.groups.get_mut(&key).expect("inserted");
            let sign = op.sign();
            group.rows += sign;
            for ((acc, spec), arg) in group.accs.iter_mut().zip(&self.aggs).zip(&args) {
                let value = arg.as_ref().map(|a| ScalarValue::try_from_array(a, row)).transpose()?;
                acc.update(spec, value, sign)?;
            }
            self.dirty.insert(key);
        }
        Ok(vec![])
    }

    fn on_barrier(&mut self) -> Result<Vec<ChangeBatch>> {
        let mut rows = Vec::new();
        let mut ops = Vec::new();
        let global = self.group_by.is_empty();
        for key in std::mem::take(&mut self.dirty) {
            if global && !self.groups.contains_key(&key) {
                let accs = self.aggs.iter().map(Acc::new).collect::<Result<Vec<_>>>()?;
                self.groups.insert(key.clone(), Group { rows: 0, accs, emitted: None });
            }
            let Some(group) = self.groups.get(&key) else {
                continue;
            };
            let new = if group.rows > 0 || global { Some(self.group_row(&key, group)?) } else { None };
            let old = group.emitted.clone();
            if old == new {
                continue;
            }
            match (old, &new) {
                (Some(old), Some(new)) => {
                    rows.push(old);
                    ops.push(Op::UpdateDelete);
                    rows.push(new.clone());
                    ops.push(Op::UpdateInsert);
                }
                (Some(old), None) => {
                    rows.push(old);
                    ops.push(Op::Delete);
                }
                (None, Some(new)) => {
                    rows.push(new.clone());
                    ops.push(Op::Insert);
                }
                (None, None) => {}
            }
            if new.is_none() {
                self.groups.remove(&key);
            } else if let Some(group) = self.groups.get_mut(&key) {
                group.emitted = new;
            }
        }
        if rows.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![self.rows_to_batch(&rows, ops)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::change_batch::from_pretty;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    fn agg() -> HashAgg {
        let input = from_pretty("I I\n+ 1 1").schema();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
            Field::new("top", DataType::Int64, true),
        ]));
        HashAgg::new(
            vec![col("c0", &input).unwrap()],
            vec![
                AggSpec { kind: AggKind::CountRows, arg: None, output_type: DataType::Int64 },
                AggSpec { kind: AggKind::Max, arg: Some(col("c1", &input).unwrap()), output_type: DataType::Int64 },
            ],
            schema,
            "test",
        )
    }

    fn step(agg: &mut HashAgg, input: &str) -> String {
        agg.apply(0, from_pretty(input)).unwrap();
        agg.on_barrier().unwrap().iter().map(|b| b.to_pretty()).collect()
    }

    #[test]
    fn max_survives_deleting_the_extreme_and_empty_groups_vanish() {
        let mut a = agg();
        let mut first: Vec<String> = step(&mut a, "I I\n+ 1 10\n+ 1 30\n+ 2 5").lines().map(String::from).collect();
        first.sort();
        assert_eq!(first, vec!["+ 1 2 30", "+ 2 1 5"]);
        assert_eq!(step(&mut a, "I I\n- 1 30"), "U- 1 2 30\nU+ 1 1 10\n");
        assert_eq!(step(&mut a, "I I\n- 2 5"), "- 2 1 5\n");
        assert_eq!(step(&mut a, "I I\n+ 1 20\n- 1 20"), "");
    }
}
