//! `TUMBLE(rel, col, size [, offset])` and `HOP(rel, col, slide, size [, offset])`: table
//! functions over a relation that add `window_start` and `window_end`.
//!
//! DataFusion calls [`WindowFunction`] while planning; it checks the arguments and returns a
//! [`WindowedRelation`]. An ad-hoc query scans it (the relation's rows, each with its windows,
//! via [`WindowSpec::assign`]); the streaming builder recognises it ([`windowed_relation`]) and
//! reads the relation as a stream through a `WindowAssign` operator instead, so the same
//! arithmetic puts rows into windows in both.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{Expr, TableSource};
use datafusion::physical_plan::ExecutionPlan;

use super::{Catalog, Relation};
use crate::error::{SqlState, WeirError};
use crate::state::store::StateStore;
use crate::types::window::{interval_nanos, is_time_type, WindowKind, WindowSpec};

/// The table function `TUMBLE` or `HOP`.
pub struct WindowFunction {
    hop: bool,
    catalog: Arc<Catalog>,
}

impl std::fmt::Debug for WindowFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.hop { "HOP" } else { "TUMBLE" })
    }
}

impl WindowFunction {
    pub fn tumble(catalog: Arc<Catalog>) -> WindowFunction {
        WindowFunction { hop: false, catalog }
    }

    pub fn hop(catalog: Arc<Catalog>) -> WindowFunction {
        WindowFunction { hop: true, catalog }
    }

    fn usage(&self) -> &'static str {
        if self.hop {
            "HOP(relation, time_column, slide, size [, offset])"
        } else {
            "TUMBLE(relation, time_column, size [, offset])"
        }
    }
}

fn error(e: WeirError) -> DataFusionError {
    e.into()
}

impl TableFunctionImpl for WindowFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let intervals = if self.hop { 2 } else { 1 };
        if exprs.len() != 2 + intervals && exprs.len() != 3 + intervals {
            return Err(error(WeirError::syntax(format!("expected {}", self.usage()))));
        }
        let name = |e: &Expr| match e {
            Expr::Column(c) => Ok(c.name.clone()),
            other => Err(error(WeirError::syntax(format!("expected a name in {}, got {other}", self.usage())))),
        };
        let relation_name = name(&exprs[0])?;
        let relation =
            self.catalog.get(&relation_name).ok_or_else(|| error(WeirError::undefined_table(&relation_name)))?;
        let column = name(&exprs[1])?;
        let time_column = relation.schema.index_of(&column).map_err(|_| {
            error(WeirError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation \"{relation_name}\" does not exist"),
            ))
        })?;
        let time_type = relation.schema.field(time_column).data_type();
        if !is_time_type(time_type) {
            return Err(error(WeirError::new(
                SqlState::DATATYPE_MISMATCH,
                format!("the time column of {} must be a TIMESTAMP, not {time_type}", self.usage()),
            )));
        }
        let interval = |e: &Expr| match e {
            Expr::Literal(v, _) => interval_nanos(v).map_err(error),
            Expr::Cast(c) => match c.expr.as_ref() {
                Expr::Literal(v, _) => interval_nanos(v).map_err(error),
                other => Err(error(WeirError::syntax(format!("expected a constant INTERVAL, got {other}")))),
            },
            other => Err(error(WeirError::syntax(format!("expected a constant INTERVAL, got {other}")))),
        };
        let kind = if self.hop {
            WindowKind::Hop { slide: interval(&exprs[2])?, size: interval(&exprs[3])? }
        } else {
            WindowKind::Tumble { size: interval(&exprs[2])? }
        };
        let offset = exprs.get(2 + intervals).map(interval).transpose()?.unwrap_or(0);
        let spec = WindowSpec::new(kind, offset, time_column).map_err(error)?;
        let schema = spec.output_schema(&relation.schema);
        Ok(Arc::new(WindowedRelation { relation, spec, schema, store: Arc::clone(self.catalog.store()) }))
    }
}

/// A relation's rows, each once per window it falls into.
pub struct WindowedRelation {
    pub relation: Arc<Relation>,
    pub spec: WindowSpec,
    schema: SchemaRef,
    store: Arc<dyn StateStore>,
}

impl std::fmt::Debug for WindowedRelation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.spec.describe(), self.relation.def.name)
    }
}

/// The windowed relation a scan reads, if it reads one.
pub fn windowed_relation(source: &Arc<dyn TableSource>) -> Option<(Arc<Relation>, WindowSpec)> {
    let provider = datafusion::datasource::source_as_provider(source).ok()?;
    let windowed = provider.downcast_ref::<WindowedRelation>()?;
    Some((Arc::clone(&windowed.relation), windowed.spec.clone()))
}

#[async_trait]
impl TableProvider for WindowedRelation {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let relation = Arc::clone(&self.relation);
        let store = Arc::clone(&self.store);
        let batches = tokio::task::spawn_blocking(move || relation.scan_rows(store.as_ref()))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
        let windowed = batches
            .iter()
            .map(|b| self.spec.assign(b, &self.schema).map(|(batch, _)| batch))
            .collect::<crate::error::Result<Vec<_>>>()?;
        Ok(MemorySourceConfig::try_new_exec(&[windowed], self.schema(), projection.cloned())?)
    }
}
