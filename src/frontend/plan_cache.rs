//! Plans of statements a session runs again and again: a prepared statement's every Execute
//! (`Parse` once, `Bind`/`Execute` many), a dashboard's repeated query.
//!
//! A cached plan is the statement's logical plan after DataFusion's analysis and optimization,
//! with its `$n` parameters still in it; running it again only puts the values in and makes
//! the physical plan, skipping parsing, planning and the optimizer (most of a point lookup's
//! cost). Conditions on parameters are pushed into scans like those on constants
//! (`catalog::key_access`), so `WHERE k = $1` still looks its key up.
//!
//! Invariants: a plan is used only while the catalog is as it was when the plan was made (the
//! catalog's version) and the session's settings unchanged (any `SET` empties the cache); only
//! plans that read Weir's relations (not the system catalogs, planned from a snapshot) and call
//! only immutable functions (`now()` is folded at optimization) are cached. Owned by
//! [`super::Session`]; used by `handler::query`.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::session_state::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::sql::sqlparser::ast;

use super::StatementDescription;
use crate::catalog::provider::RelationTable;

/// Plans kept per session at most; more, and the cache starts again.
const MAX_PLANS: usize = 256;

/// One statement's plan, ready to run with parameter values.
pub struct CachedPlan {
    /// The catalog's version it was planned against (None: not kept).
    catalog_version: Option<u64>,
    /// Optimized, with its parameters as placeholders.
    pub plan: LogicalPlan,
    /// The session's state it was planned in (makes the physical plan); shared by the plans
    /// planned in one state.
    pub state: Arc<SessionState>,
    /// What the plan runs with (made once per state: it copies the function registries).
    pub task: Arc<TaskContext>,
    /// What the client is told of the result columns besides their types.
    pub columns: ClientColumns,
    /// The plan as one key lookup, when it is one (`frontend::point_lookup`).
    pub lookup: Option<super::point_lookup::PointLookup>,
}

impl CachedPlan {
    /// A plan for one run only.
    pub fn new(plan: LogicalPlan, state: SessionState, columns: ClientColumns) -> CachedPlan {
        let task = state.task_ctx();
        CachedPlan { catalog_version: None, plan, state: Arc::new(state), task, columns, lookup: None }
    }
}

/// What the client is told of a query's result columns besides their types: the names it
/// wrote where the plan's differ (two columns of one name), and each column's origin
/// (`super::column_origins`: RowDescription's table OID, column number and declared type).
#[derive(Clone, Default)]
pub struct ClientColumns {
    pub names: Option<Vec<String>>,
    pub origins: Vec<Option<super::column_origins::ColumnOrigin>>,
    /// The last schema made, and the one it was made from: a plan run again hands its client
    /// the same `Arc` each time (by which the connection keeps the columns' RowDescription:
    /// `server::encode::FieldsCache`), and annotates nothing again.
    made: Arc<parking_lot::Mutex<Option<(SchemaRef, SchemaRef)>>>,
}

impl ClientColumns {
    pub fn new(names: Option<Vec<String>>, origins: Vec<Option<super::column_origins::ColumnOrigin>>) -> ClientColumns {
        ClientColumns { names, origins, made: Arc::default() }
    }

    /// The result columns `schema` as the client is to see them.
    pub fn schema(&self, schema: &SchemaRef) -> SchemaRef {
        let mut made = self.made.lock();
        if let Some((from, client)) = made.as_ref() {
            if Arc::ptr_eq(from, schema) || from == schema {
                return Arc::clone(client);
            }
        }
        let named = match &self.names {
            Some(names) => super::column_names::rename(schema, names),
            None => Arc::clone(schema),
        };
        let client = super::column_origins::annotate(&named, &self.origins);
        *made = Some((Arc::clone(schema), Arc::clone(&client)));
        client
    }
}

/// Keyed by the statement's syntax tree (equal trees: the same statement, spans aside), which
/// is hashed and compared at each Execute where printing it took 5 % of the server in prepared
/// lookups (`perf`, 2026-12-07); hashed with foldhash (`types::hash`) rather than SipHash:
/// hashing the tree's many small parts was more than half of the 4.6 % the cache's two lookups
/// per Execute then took.
#[derive(Default)]
pub struct PlanCache {
    plans: crate::types::hash::HashMap<ast::Statement, Arc<CachedPlan>>,
    descriptions: crate::types::hash::HashMap<ast::Statement, (u64, StatementDescription)>,
    /// The states plans were made in (one for queries, one for UPDATE and DELETE), each with
    /// its task context, shared by the plans kept (until a SET empties the cache).
    states: Vec<(Arc<SessionState>, Arc<TaskContext>)>,
}

impl PlanCache {
    /// The plan of `statement`, if cached for `catalog_version`.
    pub fn plan(&self, statement: &ast::Statement, catalog_version: u64) -> Option<Arc<CachedPlan>> {
        self.plans.get(statement).filter(|p| p.catalog_version == Some(catalog_version)).cloned()
    }

    /// Keeps `plan`, the optimized `logical`, for `statement` when it may be run again (see the
    /// module's invariants: functions are judged before the optimizer folded them).
    pub fn keep(
        &mut self,
        statement: ast::Statement,
        catalog_version: u64,
        logical: &LogicalPlan,
        plan: &LogicalPlan,
        state: &SessionState,
        columns: ClientColumns,
    ) {
        if !cacheable(logical) || !cacheable(plan) {
            return;
        }
        if self.plans.len() >= MAX_PLANS {
            self.plans.clear();
        }
        // The same state as a kept plan's (same optimizer rules, same settings): share it.
        let rules = |s: &SessionState| s.optimizers().iter().map(|r| r.name().to_string()).collect::<Vec<_>>();
        let shared = self.states.iter().find(|(s, _)| rules(s) == rules(state)).cloned();
        let (state, task) = shared.unwrap_or_else(|| {
            let made = (Arc::new(state.clone()), state.task_ctx());
            self.states.push(made.clone());
            made
        });
        let lookup = super::point_lookup::PointLookup::of(plan, &state);
        let cached =
            CachedPlan { catalog_version: Some(catalog_version), plan: plan.clone(), state, task, columns, lookup };
        self.plans.insert(statement, Arc::new(cached));
    }

    /// The description of `statement`, if kept for `catalog_version`.
    pub fn description(&self, statement: &ast::Statement, catalog_version: u64) -> Option<StatementDescription> {
        self.descriptions.get(statement).filter(|(v, _)| *v == catalog_version).map(|(_, d)| d.clone())
    }

    pub fn keep_description(
        &mut self,
        statement: ast::Statement,
        catalog_version: u64,
        description: StatementDescription,
    ) {
        if self.descriptions.len() >= MAX_PLANS {
            self.descriptions.clear();
        }
        self.descriptions.insert(statement, (catalog_version, description));
    }

    /// Forgets every plan (the session's settings changed).
    pub fn clear(&mut self) {
        self.plans.clear();
        self.descriptions.clear();
        self.states.clear();
    }
}

/// Whether `plan` reads only Weir's relations and calls only immutable functions: a plan a
/// session keeps.
pub fn cacheable(plan: &LogicalPlan) -> bool {
    let mut ok = matches!(
        plan,
        LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::Sort(_)
            | LogicalPlan::Limit(_)
            | LogicalPlan::TableScan(_)
            | LogicalPlan::Dml(_)
    );
    let _ = plan.apply_with_subqueries(|node| {
        let source = match node {
            LogicalPlan::TableScan(scan) => Some(&scan.source),
            LogicalPlan::Dml(dml) => Some(&dml.target),
            _ => None,
        };
        if let Some(source) = source {
            let provider = datafusion::datasource::source_as_provider(source);
            ok &= provider.is_ok_and(|p| (p.as_ref() as &dyn std::any::Any).downcast_ref::<RelationTable>().is_some());
        }
        let _ = node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    ok &= f.func.signature().volatility == Volatility::Immutable;
                }
                Ok(if ok { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
            })
        });
        Ok(if ok { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
    });
    ok
}
