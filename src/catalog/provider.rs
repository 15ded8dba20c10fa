//! The catalog as DataFusion sees it: [`WeirSchema`] (the `public` schema), [`RelationTable`]
//! (one relation with rows) and, for a plain view, DataFusion's `ViewTable` over its query. This is one of DataFusion's three touch-points in Weir (with
//! `frontend::df_context` and the query handler); nothing else here knows DataFusion's
//! catalog traits.
//!
//! Reads take the relation's rows from the store at scan time (one consistent snapshot per scan);
//! writes are delegated to [`super::dml`].

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{Constraint, Constraints, DFSchema};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlan, TableProviderFilterPushDown};
use datafusion::physical_plan::{execute_stream, ExecutionPlan};

use super::dml::{self, Candidates, DmlExec};
use super::index;
use super::key_access::{self, KeyAccess};
use super::scan::{RelationScanExec, ScanSettings};
use super::{Catalog, Relation, RelationKind};
use crate::error::WeirError;

/// Plans a plain view's stored query (`CREATE VIEW`), given by the frontend, which owns SQL.
pub type ViewPlanner =
    Arc<dyn Fn(Arc<Relation>) -> futures::future::BoxFuture<'static, DfResult<LogicalPlan>> + Send + Sync>;

/// The `public` schema: every relation of the catalog.
#[derive(Clone)]
pub struct WeirSchema {
    catalog: Arc<Catalog>,
    /// How plain views are planned; set once the session state that plans them exists.
    view_planner: Arc<std::sync::OnceLock<ViewPlanner>>,
}

impl WeirSchema {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        WeirSchema { catalog, view_planner: Arc::new(std::sync::OnceLock::new()) }
    }

    /// Sets how plain views are planned (once).
    pub fn set_view_planner(&self, planner: ViewPlanner) {
        let _ = self.view_planner.set(planner);
    }
}

impl std::fmt::Debug for WeirSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeirSchema")
    }
}

#[async_trait]
impl SchemaProvider for WeirSchema {
    /// Tables, sources and views; sinks hold no rows to read, and indexes are read only in
    /// their relations' place.
    fn table_names(&self) -> Vec<String> {
        self.catalog.relations().iter().filter(|r| queryable(r)).map(|r| r.def.name.clone()).collect()
    }

    /// A plain view is its query, planned at each use (so it sees the relations it reads as
    /// they are now), which DataFusion inlines into the query reading it.
    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(relation) = self.catalog.get(name) else {
            return Ok(None);
        };
        if !queryable(&relation) {
            // As Postgres says of an index read as a table (42809), not "does not exist".
            let what = match relation.def.kind {
                RelationKind::Index => "an index",
                _ => "a sink: read the view or query it delivers",
            };
            return Err(crate::error::WeirError::new(
                crate::error::SqlState::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is {what}"),
            )
            .into());
        }
        if relation.def.kind == RelationKind::View {
            let planner = self
                .view_planner
                .get()
                .ok_or_else(|| DataFusionError::Internal("plain views cannot be planned yet".into()))?;
            let definition = relation.def.definition.clone();
            let plan = planner(relation).await?;
            return Ok(Some(Arc::new(ViewTable::new(plan, Some(definition)))));
        }
        Ok(Some(Arc::new(RelationTable::new(relation, Arc::clone(&self.catalog)))))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.catalog.get(name).is_some_and(|r| queryable(&r))
    }

    fn register_table(&self, name: String, _table: Arc<dyn TableProvider>) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Err(DataFusionError::NotImplemented(format!("cannot register {name}: use CREATE TABLE")))
    }
}

/// Whether queries name the relation: not a sink or an index.
fn queryable(relation: &Relation) -> bool {
    !matches!(relation.def.kind, RelationKind::Sink | RelationKind::Index)
}

/// One relation as a DataFusion table.
pub struct RelationTable {
    relation: Arc<Relation>,
    catalog: Arc<Catalog>,
    constraints: Constraints,
}

impl std::fmt::Debug for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Relation({})", self.def.name)
    }
}

impl std::fmt::Debug for RelationTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RelationTable({})", self.relation.def.name)
    }
}

impl RelationTable {
    pub fn new(relation: Arc<Relation>, catalog: Arc<Catalog>) -> Self {
        let constraints = if relation.def.primary_key.is_empty() {
            Constraints::default()
        } else {
            Constraints::new_unverified(vec![Constraint::PrimaryKey(relation.def.primary_key.clone())])
        };
        RelationTable { relation, catalog, constraints }
    }

    pub fn relation(&self) -> &Arc<Relation> {
        &self.relation
    }

    pub fn store(&self) -> &Arc<dyn crate::state::store::StateStore> {
        self.catalog.store()
    }

    /// Only tables take INSERT, UPDATE and DELETE, and not those a connector feeds.
    fn writable(&self) -> DfResult<()> {
        if self.relation.def.kind != RelationKind::Table {
            return Err(WeirError::new(
                crate::error::SqlState::WRONG_OBJECT_TYPE,
                format!("cannot change materialized view \"{}\"", self.relation.def.name),
            )
            .into());
        }
        if self.relation.def.connector.is_some() {
            return Err(WeirError::new(
                crate::error::SqlState::WRONG_OBJECT_TYPE,
                format!("cannot change \"{}\": its rows come from its connector", self.relation.def.name),
            )
            .into());
        }
        Ok(())
    }

    /// Only tables that are not APPEND ONLY take UPDATE, DELETE and TRUNCATE.
    fn changeable(&self, statement: &str) -> DfResult<()> {
        self.writable()?;
        if self.relation.def.append_only {
            return Err(WeirError::new(
                crate::error::SqlState::WRONG_OBJECT_TYPE,
                format!("cannot {statement} table \"{}\": it is APPEND ONLY", self.relation.def.name),
            )
            .with_hint("An append-only table takes INSERT only.")
            .into());
        }
        Ok(())
    }

    /// The rows an UPDATE or DELETE under `filters` reads: by the primary key, or through an
    /// index holding every column where that narrows it more (keyed tables only: their stored
    /// rows are their columns).
    fn candidates(&self, filters: &[Expr]) -> DfResult<Candidates> {
        let own = key_access::key_access(&self.relation, filters)?;
        if self.relation.def.primary_key.is_empty() {
            return Ok(Candidates::ByKey(own));
        }
        let every_column: Vec<usize> = (0..self.relation.schema.fields().len()).collect();
        Ok(match index::choose(&self.relation, filters, &every_column, &own)? {
            Some(read) => Candidates::ThroughIndex(read, own),
            None => Candidates::ByKey(own),
        })
    }

    /// A writer of this table for a statement of the session `state` belongs to (in its
    /// transaction, if one is open).
    fn writer(&self, state: &dyn Session) -> dml::Writer {
        dml::Writer::within(&self.catalog, Arc::clone(&self.relation), transaction(state))
    }

    fn df_schema(&self) -> DfResult<DFSchema> {
        DFSchema::try_from_qualified_schema(self.relation.def.name.as_str(), &self.relation.schema)
    }

    fn physical(
        &self,
        state: &dyn Session,
        exprs: Vec<Expr>,
    ) -> DfResult<Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>> {
        let schema = self.df_schema()?;
        exprs.into_iter().map(|e| state.create_physical_expr(e, &schema)).collect()
    }
}

/// The transaction the session of `state` has open, if any.
pub fn transaction(state: &dyn Session) -> Option<Arc<super::transaction::Transaction>> {
    state.config().get_extension::<super::transaction::TransactionSlot>()?.current()
}

/// The session's [`ScanSettings`] (the defaults where it carries none).
fn scan_settings(state: &dyn Session) -> Arc<ScanSettings> {
    state.config().get_extension::<ScanSettings>().unwrap_or_default()
}

/// `plan` through the session's physical optimizer rules.
fn optimize_physical(state: &dyn Session, plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    let Some(state) = state.as_any().downcast_ref::<datafusion::execution::session_state::SessionState>() else {
        return Ok(plan);
    };
    state.physical_optimizers().iter().try_fold(plan, |plan, rule| rule.optimize(plan, state.config_options()))
}

#[async_trait]
impl TableProvider for RelationTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.relation.schema)
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn table_type(&self) -> TableType {
        match self.relation.def.kind {
            RelationKind::Table => TableType::Base,
            // Sinks and indexes are never handed to DataFusion (`WeirSchema` leaves them out).
            RelationKind::MaterializedView | RelationKind::Sink | RelationKind::View | RelationKind::Index => {
                TableType::View
            }
        }
    }

    fn get_table_definition(&self) -> Option<&str> {
        (self.relation.def.kind == RelationKind::MaterializedView).then_some(self.relation.def.definition.as_str())
    }

    /// Conditions on key columns (`k = 1`, `k IN (1, 2)`, `k > 5`, on a prefix of the key, the
    /// relation's or an index's) are offered to [`scan`], which reads only the keys they allow
    /// ([`key_access`], [`index::choose`]); DataFusion applies them again (inexact), so a scan
    /// that cannot use them stays right.
    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match key_access::narrows(&self.relation, f) || index::narrows(&self.relation, f) {
                true => TableProviderFilterPushDown::Inexact,
                false => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let access = key_access::key_access(&self.relation, filters)?;
        let needed: Vec<usize> = match projection {
            Some(columns) => columns.clone(),
            None => (0..self.relation.schema.fields().len()).collect(),
        };
        // Inside a transaction, its own writes over the store.
        let store = transaction(state).map_or_else(|| Arc::clone(self.catalog.store()), |t| t.store());
        // DataFusion passes a limit only when every row read counts towards it (no condition
        // left to apply): the first rows are enough.
        let scan = match index::choose(&self.relation, filters, &needed, &access)? {
            Some(read) => RelationScanExec::through_index(Arc::clone(&self.relation), store, read, needed, limit)?,
            None => RelationScanExec::new(Arc::clone(&self.relation), store, access, projection.cloned(), limit)?
                .in_parts(state.config().target_partitions(), &scan_settings(state)),
        };
        Ok(Arc::new(scan))
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!("{insert_op} is not supported")));
        }
        self.writable()?;
        // The input runs inside DmlExec, a leaf the physical optimizer does not look into:
        // optimize it here (a join's partition mode is chosen there, for one).
        let input = optimize_physical(state, input)?;
        let writer = self.writer(state);
        Ok(DmlExec::new(
            format!("insert into {}", self.relation.def.name),
            Box::new(move |ctx| {
                Box::pin(async move {
                    let stream = execute_stream(input, ctx)?;
                    Ok(writer.insert(stream).await?)
                })
            }),
        ))
    }

    async fn delete_from(&self, state: &dyn Session, filters: Vec<Expr>) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.changeable("DELETE FROM")?;
        let keys = self.candidates(&filters)?;
        let filters = self.physical(state, filters)?;
        let writer = self.writer(state);
        Ok(DmlExec::new(
            format!("delete from {}", self.relation.def.name),
            Box::new(move |_| Box::pin(async move { Ok(writer.delete(filters, keys).await?) })),
        ))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.changeable("UPDATE")?;
        let keys = self.candidates(&filters)?;
        let filters = self.physical(state, filters)?;
        let mut planned = Vec::with_capacity(assignments.len());
        for (column, expr) in assignments {
            let index = self.relation.schema.index_of(&column).map_err(|_| {
                DataFusionError::Plan(format!(
                    "column \"{column}\" of relation \"{}\" does not exist",
                    self.relation.def.name
                ))
            })?;
            // Assigning a column to itself is what DataFusion does for untouched columns.
            if matches!(&expr, Expr::Column(c) if c.name == column) {
                continue;
            }
            planned.push((index, self.physical(state, vec![expr])?.remove(0)));
        }
        let writer = self.writer(state);
        Ok(DmlExec::new(
            format!("update {}", self.relation.def.name),
            Box::new(move |_| Box::pin(async move { Ok(writer.update(planned, filters, keys).await?) })),
        ))
    }

    async fn truncate(&self, state: &dyn Session) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.changeable("TRUNCATE")?;
        let writer = self.writer(state);
        Ok(DmlExec::new(
            format!("truncate {}", self.relation.def.name),
            Box::new(move |_| {
                Box::pin(async move { Ok(writer.delete(vec![], Candidates::ByKey(KeyAccess::All)).await?) })
            }),
        ))
    }
}
