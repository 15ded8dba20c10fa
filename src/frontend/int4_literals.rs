//! An analyzer rule for DataFusion: an integer literal is an `INT` (int4) when it fits, as in
//! PostgreSQL, not a `BIGINT`.
//!
//! DataFusion types every integer literal `Int64`, so `SELECT 1` came back as int8 (OID 20)
//! and node-postgres handed applications the string `"1"`; `$1::int4 + 1` was int8. Before
//! type coercion, this rule retypes each `Int64` literal in `i32`'s range as `Int32`; type
//! coercion then widens it wherever it meets a `BIGINT` (`bigint_column + 1` stays `BIGINT`),
//! and `1::bigint` stays a `BIGINT` (the cast is kept). Expressions keep their names, so
//! nothing above a retyped node loses its column. Left alone: `LIMIT`/`OFFSET` (DataFusion
//! wants `Int64` there), `VALUES` (its schema is fixed when planned), recursive queries (their
//! work table's likewise) and statements that write rows (their input was shaped to the
//! table's columns when planned), and aggregates over grouping sets (`grouping(g % 2)` must
//! find `g % 2` among the grouping expressions as written). [`Int4Values`] retypes a `VALUES`
//! column of integer literals that all fit (`SELECT x FROM (VALUES (1), (2)) t(x)` is int4, as
//! in Postgres), a rule of its own so that views made before it plan as they did. Registered by
//! `df_context::template_state` before DataFusion's own rules.

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Expr, LogicalPlan, Values};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct Int4Literals;

impl AnalyzerRule for Int4Literals {
    fn name(&self) -> &str {
        "weir_int4_literals"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if left_alone(&plan)? {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| {
            if matches!(node, LogicalPlan::Limit(_) | LogicalPlan::Values(_)) || grouping_sets(&node) {
                return Ok(Transformed::no(node));
            }
            let retyped = super::keep_names::rewrite_expressions(node, int4)?;
            if retyped.transformed {
                retyped.map_data(|p| p.recompute_schema())
            } else {
                Ok(retyped)
            }
        })
        .data()
    }
}

/// A statement whose literals keep their types: one that writes rows (its input was shaped to
/// the table's columns when planned), and a recursive query (its work table has the types its
/// first term was planned with).
fn left_alone(plan: &LogicalPlan) -> Result<bool> {
    if matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Copy(_) | LogicalPlan::Ddl(_)) {
        return Ok(true);
    }
    let mut recursive = false;
    plan.apply_with_subqueries(|p| {
        recursive |= matches!(p, LogicalPlan::RecursiveQuery(_));
        Ok(if recursive { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    })?;
    Ok(recursive)
}

/// An aggregate over grouping sets: `grouping(expr)` must find `expr` among the grouping
/// expressions as written, which a retyped (and renamed back) expression no longer is.
fn grouping_sets(node: &LogicalPlan) -> bool {
    match node {
        LogicalPlan::Aggregate(a) => a.group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))),
        _ => false,
    }
}

fn int4(e: Expr) -> Result<Transformed<Expr>> {
    match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), metadata) if i32::try_from(v).is_ok() => {
            Ok(Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v as i32)), metadata)))
        }
        other => Ok(Transformed::no(other)),
    }
}

#[derive(Debug, Default)]
pub struct Int4Values;

impl AnalyzerRule for Int4Values {
    fn name(&self) -> &str {
        "weir_int4_values"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if left_alone(&plan)? {
            return Ok(plan);
        }
        let mut retyped = false;
        let plan = plan
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::Values(values) => {
                    let out = int4_columns(values)?;
                    retyped |= out.transformed;
                    Ok(out.update_data(LogicalPlan::Values))
                }
                // What reads a retyped column takes its new type.
                other if retyped => Ok(Transformed::yes(other.recompute_schema()?)),
                other => Ok(Transformed::no(other)),
            })
            .data()?;
        Ok(plan)
    }
}

/// `values` with each Int64 column whose every row is an integer literal in int4's range (or
/// NULL, at least one not) as Int32.
fn int4_columns(mut values: Values) -> Result<Transformed<Values>> {
    let fits = |e: &Expr| match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(i32::try_from(*v).is_ok()),
        Expr::Literal(v, _) if v.is_null() => None,
        Expr::Cast(c) if matches!(c.expr.as_ref(), Expr::Literal(v, _) if v.is_null()) => None,
        _ => Some(false),
    };
    let width = values.schema.fields().len();
    let columns: Vec<usize> = (0..width)
        .filter(|&j| values.schema.field(j).data_type() == &DataType::Int64)
        .filter(|&j| {
            let verdicts: Vec<Option<bool>> = values.values.iter().map(|row| fits(&row[j])).collect();
            verdicts.iter().all(|v| *v != Some(false)) && verdicts.iter().any(|v| *v == Some(true))
        })
        .collect();
    if columns.is_empty() {
        return Ok(Transformed::no(values));
    }
    for row in values.values.iter_mut() {
        for &j in &columns {
            row[j] = match std::mem::replace(&mut row[j], Expr::Literal(ScalarValue::Null, None)) {
                Expr::Literal(ScalarValue::Int64(Some(v)), metadata) => {
                    Expr::Literal(ScalarValue::Int32(Some(v as i32)), metadata)
                }
                _ => Expr::Literal(ScalarValue::Int32(None), None),
            };
        }
    }
    let fields: Vec<_> = values
        .schema
        .iter()
        .enumerate()
        .map(|(j, (qualifier, field))| {
            let field = if columns.contains(&j) {
                field.as_ref().clone().with_data_type(DataType::Int32)
            } else {
                field.as_ref().clone()
            };
            (qualifier.cloned(), Arc::new(field))
        })
        .collect();
    values.schema = Arc::new(DFSchema::new_with_metadata(fields, values.schema.metadata().clone())?);
    Ok(Transformed::yes(values))
}
