//! The point-lookup fast path: a kept plan that is one key lookup runs without DataFusion.
//!
//! A dashboard's or an application's most common read is `SELECT cols FROM t WHERE k = $1`
//! (every primary-key column of a table given a parameter or a constant, nothing else). For
//! such a plan DataFusion's physical planning and execution machinery costs many times the
//! lookup itself; [`PointLookup`] recognizes the optimized plan's shape once, when the plan is
//! kept (`frontend::plan_cache`), and at each Execute binds the key, reads it with one
//! `multi_get` and evaluates the select list (physical expressions made once) over the row.
//!
//! Invariants: only `Projection? -> Filter -> TableScan` over a keyed table, the filter a
//! conjunction of one `key column = value` per key column, the select list free of
//! parameters; a value that is not exactly one of the column's (a cast that changes it, a type
//! compared otherwise) sends the Execute down the normal path, so answers are DataFusion's.
//! Used by `handler::query`.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ParamValues, ScalarValue};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::physical_expr::PhysicalExpr;

use crate::catalog::key_access;
use crate::catalog::provider::RelationTable;
use crate::catalog::Relation;
use crate::error::Result;
use crate::state::store::StateStore;

/// Where a key column's value comes from.
#[derive(Debug, Clone)]
enum KeyValue {
    /// Parameter `$n` (1-based).
    Parameter(usize),
    Constant(ScalarValue),
}

pub struct PointLookup {
    relation: Arc<Relation>,
    store: Arc<dyn StateStore>,
    /// The value of each primary-key column, in key order.
    key: Vec<KeyValue>,
    /// The scan's columns (indices into the relation's), which the select list reads.
    scanned: Vec<usize>,
    /// The select list over the scanned columns (None: the scanned columns themselves).
    select: Option<Vec<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
}

impl PointLookup {
    /// The fast path of `plan` (optimized), if it has the shape.
    pub fn of(plan: &LogicalPlan, state: &SessionState) -> Option<PointLookup> {
        let (projection, filter) = match plan {
            LogicalPlan::Projection(p) => match p.input.as_ref() {
                LogicalPlan::Filter(f) => (Some(p), f),
                _ => return None,
            },
            LogicalPlan::Filter(f) => (None, f),
            _ => return None,
        };
        let LogicalPlan::TableScan(scan) = filter.input.as_ref() else {
            return None;
        };
        if scan.fetch.is_some() {
            return None;
        }
        let provider = datafusion::datasource::source_as_provider(&scan.source).ok()?;
        let table = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<RelationTable>()?;
        let relation = Arc::clone(table.relation());
        if !matches!(relation.def.kind, crate::catalog::RelationKind::Table)
            || relation.def.primary_key.is_empty()
            || relation.def.replayed
        {
            return None;
        }
        let mut key: Vec<Option<KeyValue>> = vec![None; relation.def.primary_key.len()];
        for conjunct in datafusion::logical_expr::utils::split_conjunction(&filter.predicate) {
            let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = conjunct else {
                return None;
            };
            let (column, value) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), v) | (v, Expr::Column(c)) if !matches!(v, Expr::Column(_)) => (c, v),
                _ => return None,
            };
            let index = relation.schema.index_of(&column.name).ok()?;
            let position = relation.def.primary_key.iter().position(|&k| k == index)?;
            let value = match value {
                Expr::Placeholder(p) => KeyValue::Parameter(p.id.strip_prefix('$')?.parse().ok()?),
                Expr::Literal(v, _) => KeyValue::Constant(v.clone()),
                _ => return None,
            };
            if key[position].replace(value).is_some() {
                return None;
            }
        }
        let key = key.into_iter().collect::<Option<Vec<_>>>()?;
        let scanned = match &scan.projection {
            Some(columns) => columns.clone(),
            None => (0..relation.schema.fields().len()).collect(),
        };
        let select = match projection {
            None => None,
            Some(p) => {
                let input: &DFSchema = p.input.schema();
                let mut exprs = Vec::with_capacity(p.expr.len());
                for expr in &p.expr {
                    if has_placeholder(expr) {
                        return None;
                    }
                    exprs.push(state.create_physical_expr(expr.clone(), input).ok()?);
                }
                Some(exprs)
            }
        };
        Some(PointLookup {
            relation,
            store: Arc::clone(table.store()),
            key,
            scanned,
            select,
            schema: Arc::clone(plan.schema().inner()),
        })
    }

    /// The rows for `params`, or None when the Execute must take the normal path (a value that
    /// is not exactly one of its column's).
    pub fn run(&self, params: Option<&ParamValues>) -> Result<Option<RecordBatch>> {
        let mut values = Vec::with_capacity(self.key.len());
        for (position, source) in self.key.iter().enumerate() {
            let value = match source {
                KeyValue::Constant(v) => v.clone(),
                KeyValue::Parameter(n) => match params {
                    Some(ParamValues::List(list)) => match list.get(n - 1) {
                        Some(v) => v.value().clone(),
                        None => return Ok(None),
                    },
                    _ => return Ok(None),
                },
            };
            let column = self.relation.def.primary_key[position];
            match key_access::as_column_value(&self.relation, column, value) {
                // NULL, or a value no row can hold: no rows.
                Some(None) => return Ok(Some(RecordBatch::new_empty(Arc::clone(&self.schema)))),
                Some(Some(v)) => values.push(v),
                None => return Ok(None),
            }
        }
        let arrays = values.iter().map(|v| v.to_array()).collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = self.relation.rows_with_keys(self.store.as_ref(), &arrays)?;
        let scanned = rows.project(&self.scanned)?;
        let columns = match &self.select {
            None => scanned.columns().to_vec(),
            Some(exprs) => exprs
                .iter()
                .map(|e| e.evaluate(&scanned).and_then(|v| v.into_array(scanned.num_rows())))
                .collect::<std::result::Result<Vec<_>, _>>()?,
        };
        let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(scanned.num_rows()));
        Ok(Some(RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options)?))
    }
}

fn has_placeholder(expr: &Expr) -> bool {
    let mut found = false;
    let _ = expr.apply(|e| {
        found |= matches!(e, Expr::Placeholder(_));
        Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    found
}
