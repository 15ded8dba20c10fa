//! `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS SELECT ...`.
//!
//! DataFusion plans and optimizes the query; `dataflow::build` turns the plan into operators;
//! the catalog records the view; the streaming manager backfills it from its inputs' current
//! rows before this statement returns, then keeps it up to date. If any step fails the view
//! does not exist afterwards.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast::Statement;

use super::{query, relation_name};
use datafusion::logical_expr::LogicalPlan;

use crate::dataflow::build::{build, Built};
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, Session, StatementResult};
use crate::state::keys::TableId;

/// Plans a view's query: its columns and its optimized logical plan.
pub async fn plan_view(session: &Session, statement: &Statement) -> Result<(Schema, LogicalPlan)> {
    let Statement::CreateView(view) = statement else { unreachable!("dispatched on CreateView") };
    let logical = query::plan(session, Statement::Query(view.query.clone())).await?;
    let state = session.ctx.state();
    let optimized = state.optimize(&logical)?;
    let fields: Vec<Field> = logical.schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    for (i, f) in fields.iter().enumerate() {
        if fields[..i].iter().any(|g| g.name() == f.name()) {
            return Err(WeirError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{}\" specified more than once", f.name()),
            )
            .with_hint("Give the columns distinct names with AS."));
        }
    }
    Ok((Schema::new(fields), optimized))
}

/// The operators of view `view` (named `name`) for its optimized plan.
pub fn build_view(fe: &Frontend, session: &Session, plan: &LogicalPlan, name: &str, view: TableId) -> Result<Built> {
    let parallelism = fe
        .catalog()
        .by_id(view)
        .map(|r| r.def.parallelism)
        .filter(|p| *p > 0)
        .unwrap_or_else(|| session.streaming_parallelism());
    build(plan, &session.ctx.state(), fe.catalog(), name, view, fe.streaming().state_cache_entries, parallelism)
}

/// `EXPLAIN CREATE MATERIALIZED VIEW ...`: the view's operators, root first, without creating it.
pub async fn explain(fe: &Frontend, session: &mut Session, statement: &Statement) -> Result<StatementResult> {
    let Statement::CreateView(view) = statement else { unreachable!("dispatched on CreateView") };
    let name = relation_name(&view.name)?;
    let (_, logical) = plan_view(session, statement).await?;
    let built = build_view(fe, session, &logical, &name, 0)?;
    let plan = format!("Materialize {name}\n{}", indent(&built.graph.explain()));
    let schema =
        Arc::new(Schema::new(vec![Field::new("QUERY PLAN", datafusion::arrow::datatypes::DataType::Utf8, false)]));
    let lines: Vec<String> = plan.lines().map(String::from).collect();
    super::rows(datafusion::arrow::array::RecordBatch::try_new(
        schema,
        vec![Arc::new(datafusion::arrow::array::StringArray::from(lines))],
    )?)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
}

pub async fn handle(fe: &Frontend, session: &mut Session, statement: Statement) -> Result<StatementResult> {
    let Statement::CreateView(view) = &statement else { unreachable!("dispatched on CreateView") };
    if !view.materialized {
        return Err(WeirError::unsupported("plain views are not supported yet; use CREATE MATERIALIZED VIEW"));
    }
    if view.or_replace {
        return Err(WeirError::unsupported("CREATE OR REPLACE MATERIALIZED VIEW is not supported; DROP it first"));
    }
    if !view.columns.is_empty() {
        return Err(WeirError::unsupported("a column list after the view name is not supported; name columns with AS"));
    }
    let name = relation_name(&view.name)?;
    if view.if_not_exists && fe.catalog().get(&name).is_some() {
        return Ok(StatementResult::command("CREATE MATERIALIZED VIEW"));
    }
    let (schema, logical) = plan_view(session, &statement).await?;
    // Check the plan can be maintained before the view exists.
    let mut depends_on = build_view(fe, session, &logical, &name, 0)?.inputs;
    depends_on.sort_unstable();
    depends_on.dedup();
    fe.catalog().create_view(&name, &statement.to_string(), schema, depends_on, session.streaming_parallelism())?;
    let relation = fe.catalog().get(&name).ok_or_else(|| WeirError::internal("view vanished while being created"))?;
    let started = match build_view(fe, session, &logical, &name, relation.def.id) {
        Ok(built) => fe.streaming().start_view(Arc::clone(&relation), built).await,
        Err(e) => Err(e),
    };
    if let Err(e) = started {
        let _ = fe.catalog().drop_relation(&name, true);
        return Err(e);
    }
    Ok(StatementResult::command("CREATE MATERIALIZED VIEW"))
}
