//! `TUMBLE(rel, col, size [, offset])`, `HOP(rel, col, slide, size [, offset])` and
//! `SESSION(rel, col, gap [, key_col ...])`: table functions over a relation that add
//! `window_start` and `window_end`.
//!
//! DataFusion calls [`WindowFunction`] while planning; it checks the arguments and returns a
//! [`WindowedRelation`]. An ad-hoc query scans it (the relation's rows, each with its windows,
//! via [`WindowSpec::assign`] and [`SessionSpec::assign_all`]); the streaming builder
//! recognises it ([`windowed_relation`]) and reads the relation as a stream through a
//! `WindowAssign` or `SessionAssign` operator instead, so the same arithmetic puts rows into
//! windows in both.

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
use crate::types::window::{
    interval_months, interval_nanos, is_time_type, SessionSpec, WindowKind, WindowSpec, Windowing,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tumble,
    Hop,
    Cumulate,
    Session,
}

/// The table function `TUMBLE`, `HOP` or `SESSION`.
pub struct WindowFunction {
    kind: Kind,
    catalog: Arc<Catalog>,
}

impl std::fmt::Debug for WindowFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.kind)
    }
}

impl WindowFunction {
    pub fn tumble(catalog: Arc<Catalog>) -> WindowFunction {
        WindowFunction { kind: Kind::Tumble, catalog }
    }

    pub fn hop(catalog: Arc<Catalog>) -> WindowFunction {
        WindowFunction { kind: Kind::Hop, catalog }
    }

    pub fn cumulate(catalog: Arc<Catalog>) -> WindowFunction {
        WindowFunction { kind: Kind::Cumulate, catalog }
    }

    pub fn session(catalog: Arc<Catalog>) -> WindowFunction {
        WindowFunction { kind: Kind::Session, catalog }
    }

    fn usage(&self) -> &'static str {
        match self.kind {
            Kind::Tumble => "TUMBLE(relation, time_column, size [, offset])",
            Kind::Hop => "HOP(relation, time_column, slide, size [, offset])",
            Kind::Cumulate => "CUMULATE(relation, time_column, step, size [, offset])",
            Kind::Session => "SESSION(relation, time_column, gap [, key_column ...])",
        }
    }
}

fn error(e: WeirError) -> DataFusionError {
    e.into()
}

impl TableFunctionImpl for WindowFunction {
    fn call_with_args(&self, args: TableFunctionArgs) -> DfResult<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let intervals = if matches!(self.kind, Kind::Hop | Kind::Cumulate) { 2 } else { 1 };
        let fits = match self.kind {
            Kind::Session => exprs.len() >= 3,
            _ => exprs.len() == 2 + intervals || exprs.len() == 3 + intervals,
        };
        if !fits {
            return Err(error(WeirError::syntax(format!("expected {}", self.usage()))));
        }
        let name = |e: &Expr| match e {
            Expr::Column(c) => Ok(c.name.clone()),
            other => Err(error(WeirError::syntax(format!("expected a name in {}, got {other}", self.usage())))),
        };
        let relation_name = name(&exprs[0])?;
        let relation =
            self.catalog.get(&relation_name).ok_or_else(|| error(WeirError::undefined_table(&relation_name)))?;
        if matches!(relation.def.kind, super::RelationKind::Index | super::RelationKind::Sink) {
            return Err(error(WeirError::undefined_table(&relation_name)));
        }
        if relation.def.kind == super::RelationKind::View {
            return Err(error(WeirError::unsupported(format!(
                "{} over the plain view \"{relation_name}\": window a table, a source or a materialized view",
                self.usage()
            ))));
        }
        let column_of = |e: &Expr| {
            let column = name(e)?;
            relation.schema.index_of(&column).map_err(|_| {
                error(WeirError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!("column \"{column}\" of relation \"{relation_name}\" does not exist"),
                ))
            })
        };
        let time_column = column_of(&exprs[1])?;
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
        let spec = match self.kind {
            Kind::Session => {
                let keys = exprs[3..].iter().map(column_of).collect::<DfResult<Vec<_>>>()?;
                Windowing::Session(SessionSpec::new(interval(&exprs[2])?, time_column, keys).map_err(error)?)
            }
            kind => {
                // Sizes counted in months (or years) make calendar windows.
                let months = |e: &Expr| match e {
                    Expr::Literal(v, _) => interval_months(v),
                    Expr::Cast(c) => match c.expr.as_ref() {
                        Expr::Literal(v, _) => interval_months(v),
                        _ => None,
                    },
                    _ => None,
                };
                let window = match kind {
                    Kind::Tumble if months(&exprs[2]).is_some() => {
                        let size = months(&exprs[2]).expect("checked");
                        WindowKind::Months { slide: size, size }
                    }
                    Kind::Hop if months(&exprs[2]).is_some() || months(&exprs[3]).is_some() => {
                        let (Some(slide), Some(size)) = (months(&exprs[2]), months(&exprs[3])) else {
                            return Err(error(WeirError::new(
                                SqlState::INVALID_PARAMETER_VALUE,
                                "HOP by months needs both its slide and its size in months or years",
                            )));
                        };
                        WindowKind::Months { slide, size }
                    }
                    Kind::Hop => WindowKind::Hop { slide: interval(&exprs[2])?, size: interval(&exprs[3])? },
                    Kind::Cumulate => WindowKind::Cumulate { step: interval(&exprs[2])?, size: interval(&exprs[3])? },
                    _ => WindowKind::Tumble { size: interval(&exprs[2])? },
                };
                let offset = exprs.get(2 + intervals).map(interval).transpose()?.unwrap_or(0);
                Windowing::Fixed(WindowSpec::new(window, offset, time_column).map_err(error)?)
            }
        };
        let schema = spec.output_schema(&relation.schema);
        Ok(Arc::new(WindowedRelation { relation, spec, schema, store: Arc::clone(self.catalog.store()) }))
    }
}

/// A relation's rows, each once per window it falls into.
pub struct WindowedRelation {
    pub relation: Arc<Relation>,
    pub spec: Windowing,
    schema: SchemaRef,
    store: Arc<dyn StateStore>,
}

impl std::fmt::Debug for WindowedRelation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} of {}", self.spec, self.relation.def.name)
    }
}

/// The windowed relation a scan reads, if it reads one.
pub fn windowed_relation(source: &Arc<dyn TableSource>) -> Option<(Arc<Relation>, Windowing)> {
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
        let batches = self.relation.read_rows(&self.store, None).await?;
        let windowed = match &self.spec {
            Windowing::Fixed(spec) => batches
                .iter()
                .map(|b| spec.assign(b, &self.schema).map(|(batch, _)| batch))
                .collect::<crate::error::Result<Vec<_>>>()?,
            Windowing::Session(spec) => vec![spec.assign_all(&batches, &self.schema)?],
        };
        Ok(MemorySourceConfig::try_new_exec(&[windowed], self.schema(), projection.cloned())?)
    }
}
