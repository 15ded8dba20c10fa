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

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};

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
    /// The session's state it was planned in (makes the physical plan).
    pub state: SessionState,
    /// The client's names of the result columns where they differ from the plan's.
    pub names: Option<Vec<String>>,
}

impl CachedPlan {
    /// A plan for one run only.
    pub fn new(plan: LogicalPlan, state: SessionState, names: Option<Vec<String>>) -> CachedPlan {
        CachedPlan { catalog_version: None, plan, state, names }
    }
}

#[derive(Default)]
pub struct PlanCache {
    plans: HashMap<String, Arc<CachedPlan>>,
    descriptions: HashMap<String, (u64, StatementDescription)>,
}

impl PlanCache {
    /// The plan of the statement whose text is `sql`, if cached for `catalog_version`.
    pub fn plan(&self, sql: &str, catalog_version: u64) -> Option<Arc<CachedPlan>> {
        self.plans.get(sql).filter(|p| p.catalog_version == Some(catalog_version)).cloned()
    }

    /// Keeps `plan`, the optimized `logical`, for `sql` when it may be run again (see the
    /// module's invariants: functions are judged before the optimizer folded them).
    pub fn keep(
        &mut self,
        sql: String,
        catalog_version: u64,
        logical: &LogicalPlan,
        plan: &LogicalPlan,
        state: &SessionState,
        names: Option<Vec<String>>,
    ) {
        if !cacheable(logical) || !cacheable(plan) {
            return;
        }
        if self.plans.len() >= MAX_PLANS {
            self.plans.clear();
        }
        let cached =
            CachedPlan { catalog_version: Some(catalog_version), plan: plan.clone(), state: state.clone(), names };
        self.plans.insert(sql, Arc::new(cached));
    }

    /// The description of the statement whose text is `sql`, if kept for `catalog_version`.
    pub fn description(&self, sql: &str, catalog_version: u64) -> Option<StatementDescription> {
        self.descriptions.get(sql).filter(|(v, _)| *v == catalog_version).map(|(_, d)| d.clone())
    }

    pub fn keep_description(&mut self, sql: String, catalog_version: u64, description: StatementDescription) {
        if self.descriptions.len() >= MAX_PLANS {
            self.descriptions.clear();
        }
        self.descriptions.insert(sql, (catalog_version, description));
    }

    /// Forgets every plan (the session's settings changed).
    pub fn clear(&mut self) {
        self.plans.clear();
        self.descriptions.clear();
    }
}

/// Whether `plan` reads only Weir's relations and calls only immutable functions.
fn cacheable(plan: &LogicalPlan) -> bool {
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
