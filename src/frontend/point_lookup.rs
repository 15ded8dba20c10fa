//! The point-lookup fast path: a kept plan that is one key lookup runs without DataFusion.
//!
//! A dashboard's or an application's most common read is `SELECT cols FROM t WHERE k = $1`
//! (every primary-key column of a table given a parameter or a constant, nothing else). For
//! such a plan DataFusion's physical planning and execution machinery costs many times the
//! lookup itself; [`PointLookup`] recognizes the optimized plan's shape once, when the plan is
//! kept (`frontend::plan_cache`), and at each Execute binds the key, reads it with one
//! `multi_get` and evaluates the select list (physical expressions made once) over the row.
//!
//! The same for `SELECT cols FROM t_or_view WHERE a = $1 [AND b = $2]` where an index's indexed
//! columns are exactly those given and it holds every column read: one range of the index, in
//! one vnode, read without DataFusion.
//!
//! Invariants: only `Projection? -> Filter -> TableScan` over a keyed table (or, for an index,
//! a table or view), the filter a conjunction of one `column = value` per key (or indexed)
//! column, the select list free of parameters; a value that is not exactly one of the column's (a cast that changes it, a type
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
use crate::state::store::{ScanControl, StateStore};

/// Where a key column's value comes from.
#[derive(Debug, Clone)]
enum KeyValue {
    /// Parameter `$n` (1-based).
    Parameter(usize),
    Constant(ScalarValue),
}

/// What a lookup reads.
enum Source {
    /// The table's row of this primary key (a value per key column, in key order).
    Key(Vec<KeyValue>),
    /// The entries of the index with this id whose indexed columns have these values (in
    /// index order), one range in one vnode; `columns`: where each scanned column is among the
    /// index's. By id, not held: a kept plan must not keep a dropped index (DROP INDEX waits
    /// for the reads that hold it).
    Index { index: crate::state::keys::TableId, values: Vec<(usize, KeyValue)>, columns: Vec<usize> },
}

pub struct PointLookup {
    relation: Arc<Relation>,
    store: Arc<dyn StateStore>,
    source: Source,
    /// The scan's columns (indices into the relation's), which the select list reads.
    scanned: Vec<usize>,
    /// The select list over the scanned columns (None: the scanned columns themselves).
    select: Option<Vec<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
}

impl PointLookup {
    /// What EXPLAIN says of the lookup: which relation, by its key or through an index.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Key(_) => format!("one lookup of {} by its primary key", self.relation.def.name),
            Source::Index { .. } => format!("one range of an index of {}", self.relation.def.name),
        }
    }

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
        if relation.def.replayed
            || !matches!(
                relation.def.kind,
                crate::catalog::RelationKind::Table | crate::catalog::RelationKind::MaterializedView
            )
        {
            return None;
        }
        // One `column = value` per conjunct, each column once.
        let mut pinned: Vec<(usize, KeyValue)> = Vec::new();
        for conjunct in datafusion::logical_expr::utils::split_conjunction(&filter.predicate) {
            let Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) = conjunct else {
                return None;
            };
            let (column, value) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), v) | (v, Expr::Column(c)) if !matches!(v, Expr::Column(_)) => (c, v),
                _ => return None,
            };
            let index = relation.schema.index_of(&column.name).ok()?;
            let value = match value {
                Expr::Placeholder(p) => KeyValue::Parameter(p.id.strip_prefix('$')?.parse().ok()?),
                Expr::Literal(v, _) => KeyValue::Constant(v.clone()),
                _ => return None,
            };
            if pinned.iter().any(|(c, _)| *c == index) {
                return None;
            }
            pinned.push((index, value));
        }
        let scanned = match &scan.projection {
            Some(columns) => columns.clone(),
            None => (0..relation.schema.fields().len()).collect(),
        };
        let source = Self::source(&relation, pinned, &scanned)?;
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
            source,
            scanned,
            select,
            schema: Arc::clone(plan.schema().inner()),
        })
    }

    /// The primary key of a table when `pinned` gives every key column, else an index whose
    /// indexed columns `pinned` gives exactly and which holds every scanned column (not over
    /// floating-point columns, whose encoding tells -0 from 0).
    fn source(relation: &Relation, pinned: Vec<(usize, KeyValue)>, scanned: &[usize]) -> Option<Source> {
        let key = &relation.def.primary_key;
        if relation.def.kind == crate::catalog::RelationKind::Table
            && !key.is_empty()
            && pinned.len() == key.len()
            && key.iter().all(|k| pinned.iter().any(|(c, _)| c == k))
        {
            let values: Option<Vec<KeyValue>> =
                key.iter().map(|k| pinned.iter().find(|(c, _)| c == k).map(|(_, v)| v.clone())).collect();
            return values.map(Source::Key);
        }
        let floating = |c: usize| relation.schema.field(c).data_type().is_floating();
        for index in relation.indexes().into_iter().filter(|i| i.readable_index()) {
            let def = index.def.index.as_ref()?;
            let indexed = &def.columns[..def.key_columns];
            if pinned.len() != indexed.len() || indexed.iter().any(|&c| floating(c)) {
                continue;
            }
            let Some(values) = indexed
                .iter()
                .map(|c| pinned.iter().find(|(p, _)| p == c).map(|(_, v)| (*c, v.clone())))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let Some(columns) =
                scanned.iter().map(|c| def.columns.iter().position(|i| i == c)).collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            return Some(Source::Index { index: index.def.id, values, columns });
        }
        None
    }

    /// The value `source` gives, as a value of `column`: None when the Execute must take the
    /// normal path, Some(None) when no row can match (NULL, a value the column cannot hold).
    fn bind(&self, column: usize, source: &KeyValue, params: Option<&ParamValues>) -> Option<Option<ScalarValue>> {
        let value = match source {
            KeyValue::Constant(v) => v.clone(),
            KeyValue::Parameter(n) => match params {
                Some(ParamValues::List(list)) => list.get(n - 1)?.value().clone(),
                _ => return None,
            },
        };
        key_access::as_column_value(&self.relation, column, value)
    }

    /// The rows for `params`, or None when the Execute must take the normal path (a value that
    /// is not exactly one of its column's, an index dropped since).
    /// `transaction`: the session's open transaction's view of the store, read instead.
    pub fn run(
        &self,
        params: Option<&ParamValues>,
        transaction: Option<Arc<dyn StateStore>>,
    ) -> Result<Option<RecordBatch>> {
        let store = transaction.unwrap_or_else(|| Arc::clone(&self.store));
        let no_rows = || Ok(Some(RecordBatch::new_empty(Arc::clone(&self.schema))));
        let scanned = match &self.source {
            Source::Key(key) => {
                let mut values = Vec::with_capacity(key.len());
                for (position, source) in key.iter().enumerate() {
                    match self.bind(self.relation.def.primary_key[position], source, params) {
                        Some(Some(v)) => values.push(v),
                        Some(None) => return no_rows(),
                        None => return Ok(None),
                    }
                }
                let arrays = values.iter().map(|v| v.to_array()).collect::<std::result::Result<Vec<_>, _>>()?;
                self.relation.rows_with_keys(store.as_ref(), &arrays)?.project(&self.scanned)?
            }
            Source::Index { index, values: sources, columns } => {
                let Some(index) =
                    self.relation.indexes().into_iter().find(|i| i.def.id == *index && i.readable_index())
                else {
                    return Ok(None);
                };
                let mut values = Vec::with_capacity(sources.len());
                for (column, source) in sources {
                    match self.bind(*column, source, params) {
                        Some(Some(v)) => values.push(v),
                        Some(None) => return no_rows(),
                        None => return Ok(None),
                    }
                }
                // Every entry starting with the values' encoding has exactly those values.
                let range = index.table.prefix_range(&values)?;
                // The index's columns under the relation's scanned schema.
                let schema = Arc::new(self.relation.schema.project(&self.scanned)?);
                let mut batches = Vec::new();
                index.stream_rows(store.as_ref(), Some(std::slice::from_ref(&range)), None, &mut |rows| {
                    batches.push(rows.project(columns)?.with_schema(Arc::clone(&schema))?);
                    Ok(ScanControl::Continue)
                })?;
                datafusion::arrow::compute::concat_batches(&schema, &batches)?
            }
        };
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
