//! Statements DataFusion plans and runs: SELECT, INSERT, UPDATE, DELETE, TRUNCATE, EXPLAIN.
//!
//! Writes reach the store through the catalog's table provider (`catalog::dml`); this handler
//! only plans, binds parameters, runs, and turns a DML plan's `count` row into the command tag.

use std::sync::Arc;

use datafusion::arrow::array::UInt64Array;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use crate::error::Result;
use crate::frontend::column_origins::column_origins;
use crate::frontend::df_context::PlanningRules;
use crate::frontend::plan_cache::{CachedPlan, ClientColumns};
use crate::frontend::{column_names, Session, StatementDescription, StatementResult};

/// The command tag of a DML statement, None for statements that return rows.
fn dml_tag(statement: &Statement) -> Option<&'static str> {
    match statement {
        Statement::Insert(_) => Some("INSERT"),
        Statement::Update(_) => Some("UPDATE"),
        Statement::Delete(_) => Some("DELETE"),
        Statement::Truncate(_) => Some("TRUNCATE TABLE"),
        _ => None,
    }
}

pub async fn plan(session: &Session, statement: Statement) -> Result<LogicalPlan> {
    Ok(plan_named(session, statement).await?.0)
}

/// Plans `statement`, and tells what the client is to see of its result columns
/// ([`ClientColumns`]: their origins in Weir's relations, and their names).
pub async fn plan_for_client(session: &Session, statement: Statement) -> Result<(LogicalPlan, ClientColumns)> {
    let is_query = matches!(statement, Statement::Query(_));
    let (plan, names) = plan_named(session, statement).await?;
    let plan = if is_query { unsigned_as_bigint(plan)? } else { plan };
    let origins = column_origins(&plan);
    Ok((plan, ClientColumns::new(names, origins)))
}

/// Plans `statement`. A query's unaliased result columns get Postgres's names
/// (`frontend::column_names`); the names the client must see are returned when the plan's
/// differ (two columns of one name).
pub async fn plan_named(session: &Session, statement: Statement) -> Result<(LogicalPlan, Option<Vec<String>>)> {
    plan_named_in(&session.ctx.state(), statement, PlanningRules::CURRENT).await
}

/// [`plan_named`] in `state` by `rules` (a materialized view's by the rules it was made with).
pub async fn plan_named_in(
    state: &datafusion::execution::session_state::SessionState,
    mut statement: Statement,
    rules: PlanningRules,
) -> Result<(LogicalPlan, Option<Vec<String>>)> {
    let names = match &mut statement {
        Statement::Query(query) => column_names::name_columns_by(query, rules.inner_column_names),
        // An INSERT's rows go by position: its query's columns need only names DataFusion
        // takes (`SELECT x, x % 10, x` repeats one).
        Statement::Insert(insert) => {
            if let Some(source) = insert.source.as_mut() {
                column_names::name_columns(source);
            }
            None
        }
        _ => None,
    };
    let plan = state.statement_to_plan(DfStatement::Statement(Box::new(statement))).await?;
    Ok((plan, names))
}

/// `plan` with its unsigned 64-bit result columns (`row_number()`, `rank()`, a Top-N view's
/// rank) cast to bigint, the type Postgres gives them; a value past bigint's range is 22003.
/// Only at the client's edge ([`plan_for_client`]): views keep storing what their operators
/// produce.
fn unsigned_as_bigint(plan: LogicalPlan) -> Result<LogicalPlan> {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{cast, Expr, LogicalPlanBuilder};
    let schema = Arc::clone(plan.schema());
    if !schema.fields().iter().any(|f| f.data_type() == &DataType::UInt64) {
        return Ok(plan);
    }
    let columns = schema.iter().map(|(qualifier, field)| {
        let column = Expr::Column(datafusion::common::Column::new(qualifier.cloned(), field.name()));
        match field.data_type() {
            DataType::UInt64 => cast(column, DataType::Int64).alias_qualified(qualifier.cloned(), field.name()),
            _ => column,
        }
    });
    Ok(LogicalPlanBuilder::from(plan).project(columns)?.build()?)
}

/// Runs a query or DML statement. `catalog_version` is the catalog's
/// ([`crate::catalog::Catalog::version`]): a plan cached for it is used
/// (`frontend::plan_cache`), and a new plan is kept with it.
pub async fn handle(
    session: &mut Session,
    statement: Statement,
    params: Option<ParamValues>,
    catalog_version: u64,
) -> Result<StatementResult> {
    let tag = dml_tag(&statement);
    if matches!(statement, Statement::Explain { .. }) {
        return Box::pin(explain(session, statement, params)).await;
    }
    // Which statements are worth keeping: reads, key updates and deletes, and prepared inserts
    // (not a bulk INSERT of literal rows, run once).
    let worth_keeping = match &statement {
        Statement::Query(_) | Statement::Update(_) | Statement::Delete(_) => true,
        Statement::Insert(_) => params.is_some(),
        _ => false,
    };
    let cached = match worth_keeping.then(|| session.plans.plan(&statement, catalog_version)).flatten() {
        Some(cached) => {
            crate::metrics::PLANS_TOTAL.with_label_values(&["cached"]).inc();
            cached
        }
        None => {
            crate::metrics::PLANS_TOTAL.with_label_values(&["planned"]).inc();
            let key = worth_keeping.then(|| statement.clone());
            // Boxed: planning's future is large, and a cached plan's run need not carry it.
            let (logical, columns) = Box::pin(plan_for_client(session, statement)).await?;
            if matches!(tag, Some("UPDATE" | "DELETE")) {
                conditions_on_the_target_only(&logical)?;
            }
            let state = match tag {
                Some("UPDATE" | "DELETE") => crate::frontend::df_context::state_for_dml(&session.ctx.state()),
                _ => session.ctx.state(),
            };
            // Optimized with its parameters as placeholders, so the plan serves every Execute;
            // a plan that cannot be (an untyped parameter the optimizer must know) is
            // optimized with the values in, once.
            match state.optimize(&logical) {
                Ok(optimized) => {
                    if let Some(key) = key {
                        session.plans.keep(key, catalog_version, &logical, &optimized, &state, columns.clone());
                    }
                    Arc::new(CachedPlan::new(optimized, state, columns))
                }
                Err(e) if params.is_none() => return Err(e.into()),
                Err(_) => {
                    let logical = logical.with_param_values(params.clone().unwrap_or(ParamValues::List(vec![])))?;
                    let optimized = state.optimize(&logical)?;
                    Arc::new(CachedPlan::new(optimized, state, columns))
                }
            }
        }
    };
    if let Some(lookup) = cached.lookup.as_ref().filter(|_| tag.is_none()) {
        let transaction = session.transaction.current().map(|t| t.store());
        if let Some(rows) = lookup.run(params.as_ref(), transaction)? {
            crate::metrics::PLANS_TOTAL.with_label_values(&["lookup"]).inc();
            return crate::frontend::handler::rows(rows).map(|result| match result {
                StatementResult::Rows { schema, stream } => {
                    StatementResult::Rows { schema: cached.columns.schema(&schema), stream }
                }
                other => other,
            });
        }
    }
    let plan = match params {
        Some(params) => bind(&cached.plan, params)?,
        None => cached.plan.clone(),
    };
    let physical = cached.state.query_planner().create_physical_plan(&plan, cached.state.as_ref()).await?;
    let task = Arc::clone(&cached.task);
    match tag {
        Some(tag) => {
            let batches = datafusion::physical_plan::collect(physical, task).await?;
            let count: u64 = batches
                .iter()
                .filter_map(|b| b.column_by_name("count"))
                .filter_map(|c| c.as_any().downcast_ref::<UInt64Array>().map(|a| a.iter().flatten().sum::<u64>()))
                .sum();
            let rows = if tag == "TRUNCATE TABLE" { None } else { Some(count as usize) };
            Ok(StatementResult::Command { tag: tag.to_string(), rows })
        }
        None => {
            let schema = cached.columns.schema(&physical.schema());
            let stream = datafusion::physical_plan::execute_stream(physical, task)?;
            Ok(StatementResult::Rows { schema, stream })
        }
    }
}

/// Refuses an UPDATE or DELETE whose conditions read another relation (a subquery, a join,
/// `UPDATE ... FROM`): DataFusion 55 hands the table's `update`/`delete_from` only the
/// conditions it finds on the table's own scan and drops the rest, so
/// `DELETE FROM t WHERE k IN (SELECT k FROM s)` would delete every row of `t`.
fn conditions_on_the_target_only(plan: &LogicalPlan) -> Result<()> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let LogicalPlan::Dml(dml) = plan else {
        return Ok(());
    };
    let mut beyond = false;
    dml.input.apply_with_subqueries(|node| {
        match node {
            // A LIMIT or ORDER BY would be dropped as well: `DELETE ... LIMIT 1` deleted every
            // matching row.
            LogicalPlan::Join(_) | LogicalPlan::Subquery(_) | LogicalPlan::Limit(_) | LogicalPlan::Sort(_) => {
                beyond = true
            }
            LogicalPlan::TableScan(scan) if !scan.table_name.resolved_eq(&dml.table_name) => beyond = true,
            _ => {}
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                beyond |= matches!(e, Expr::Exists(_) | Expr::InSubquery(_) | Expr::ScalarSubquery(_));
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(if beyond { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    })?;
    if beyond {
        return Err(crate::error::WeirError::unsupported(format!(
            "{} whose conditions read another relation or a subquery, or with LIMIT or ORDER BY",
            dml.op
        ))
        .with_hint("Read the keys first, then change them by key: ... WHERE k IN (1, 2, 3)."));
    }
    Ok(())
}

/// `plan` (optimized) with the values of its parameters put in, each as the type the plan
/// gave its parameter: the client's value for a `text` parameter is a Utf8 string where the
/// plan compares a Utf8View column, and no optimizer runs after this to add the cast.
fn bind(plan: &LogicalPlan, params: ParamValues) -> Result<LogicalPlan> {
    let types = plan.get_parameter_types()?;
    if types.is_empty() {
        return Ok(plan.clone());
    }
    let as_planned = |name: &str, value: datafusion::common::metadata::ScalarAndMetadata| {
        let (v, metadata) = value.into_inner();
        let v = match types.get(name) {
            Some(Some(planned)) if v.data_type() != *planned => v.cast_to(planned)?,
            _ => v,
        };
        Ok::<_, datafusion::error::DataFusionError>(datafusion::common::metadata::ScalarAndMetadata::new(v, metadata))
    };
    let params = match params {
        ParamValues::List(values) => ParamValues::List(
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| as_planned(&format!("${}", i + 1), v))
                .collect::<std::result::Result<_, _>>()?,
        ),
        ParamValues::Map(values) => ParamValues::Map(
            values
                .into_iter()
                .map(|(k, v)| Ok((k.clone(), as_planned(&format!("${k}"), v)?)))
                .collect::<std::result::Result<_, datafusion::error::DataFusionError>>()?,
        ),
    };
    Ok(plan.clone().with_param_values(params)?)
}

/// EXPLAIN: planned and run as DataFusion runs it (its optimizer records each rule's plan).
async fn explain(session: &mut Session, statement: Statement, params: Option<ParamValues>) -> Result<StatementResult> {
    let (mut logical, names) = plan_named(session, statement.clone()).await?;
    if let Some(params) = params {
        logical = logical.with_param_values(params)?;
    }
    // EXPLAIN ANALYZE runs the statement it explains.
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut refused = Ok(());
    logical.apply(|node| {
        if matches!(node, LogicalPlan::Dml(_)) {
            refused = conditions_on_the_target_only(node);
        }
        Ok(if refused.is_ok() { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
    })?;
    refused?;
    let path = match &statement {
        Statement::Explain { statement: inner, analyze: false, .. }
            if matches!(inner.as_ref(), Statement::Query(_) | Statement::Update(_) | Statement::Delete(_)) =>
        {
            Some(run_path(session, inner.as_ref().clone()).await?)
        }
        _ => None,
    };
    let frame = session.ctx.execute_logical_plan(logical).await?;
    let schema = ClientColumns::new(names, vec![]).schema(frame.schema().inner());
    let stream = without_trailing_newlines(frame.execute_stream().await?);
    let Some(path) = path else {
        return Ok(StatementResult::Rows { schema, stream });
    };
    // A last row, `weir_path`: how the statement runs when it runs again.
    let row = datafusion::arrow::record_batch::RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(datafusion::arrow::array::StringArray::from(vec!["weir_path"])),
            Arc::new(datafusion::arrow::array::StringArray::from(vec![path])),
        ],
    )?;
    let stream = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
        Arc::clone(&schema),
        futures::StreamExt::chain(stream, futures::stream::iter([Ok(row)])),
    );
    Ok(StatementResult::Rows { schema, stream: Box::pin(stream) })
}

/// Which path `statement` takes when run again with other values (as a prepared statement, or
/// a simple one whose compared literals are lifted: `frontend::literals`): a key lookup without
/// DataFusion, a plan kept per session, or planning at each run.
async fn run_path(session: &Session, statement: Statement) -> Result<String> {
    let (logical, _) = plan_for_client(session, statement).await?;
    let state = session.ctx.state();
    let optimized = state.optimize(&logical)?;
    if let Some(lookup) = crate::frontend::point_lookup::PointLookup::of(&optimized, &state) {
        return Ok(format!(
            "key lookup: {}, read from the store without a DataFusion plan when the statement is kept \
             (prepared, or simple with its compared literals as parameters)",
            lookup.describe()
        ));
    }
    if crate::frontend::plan_cache::cacheable(&logical) && crate::frontend::plan_cache::cacheable(&optimized) {
        return Ok("DataFusion: planned once per session and kept (prepared, or simple with its compared \
                   literals as parameters)"
            .to_string());
    }
    Ok("DataFusion: planned at each run (it reads the system catalogs or calls functions whose value changes)"
        .to_string())
}

/// The most parameters a statement may have: a Bind message's count is an Int16.
const MAX_PARAMETERS: usize = 65535;

pub async fn describe(session: &Session, statement: &Statement) -> Result<StatementDescription> {
    let returns_rows = dml_tag(statement).is_none();
    let (logical, client_columns) = plan_for_client(session, statement.clone()).await?;
    let mut params: Vec<(usize, Option<_>)> = logical
        .get_parameter_types()?
        .into_iter()
        .filter_map(|(name, ty)| name.trim_start_matches('$').parse::<usize>().ok().map(|i| (i, ty)))
        .collect();
    params.sort_by_key(|(i, _)| *i);
    // A Bind carries at most 65535 values (its count is an Int16), so a higher $n could never
    // be bound; refused as Postgres refuses $0 (and before a vector of $n slots is made).
    if let Some((i, _)) = params.iter().find(|(i, _)| *i == 0 || *i > MAX_PARAMETERS) {
        return Err(crate::error::WeirError::new(
            crate::error::SqlState("42P02"),
            format!("there is no parameter ${i}"),
        ));
    }
    // $n may be used without $1..$n-1; fill the gaps so positions line up.
    let count = params.last().map(|(i, _)| *i).unwrap_or(0);
    let mut parameters = vec![None; count];
    for (i, ty) in params {
        parameters[i - 1] = ty;
    }
    // DataFusion leaves `$1::timestamp` untyped; Postgres types it by the cast.
    for (i, ty) in cast_parameter_types(&logical)? {
        if let Some(slot) = i.checked_sub(1).and_then(|i| parameters.get_mut(i)) {
            slot.get_or_insert(ty);
        }
    }
    let mut parameter_casts = vec![None; parameters.len()];
    for (n, sql_type) in crate::frontend::parser::placeholder_casts(statement) {
        if let Some(slot) = n.checked_sub(1).and_then(|i| parameter_casts.get_mut(i)) {
            *slot = Some(sql_type);
        }
    }
    let columns = analyzed_schema(session, &logical);
    Ok(StatementDescription {
        parameters,
        parameter_casts,
        columns: returns_rows.then(|| client_columns.schema(columns.inner())),
    })
}

/// `plan`'s columns as the query runs them: after the analyzer rules, which type literals and
/// coerce (`SELECT $1::int4 + 1` is int4, not the planner's first int8). The planner's when
/// the analysis fails (the statement fails when it runs).
pub fn analyzed_schema(session: &Session, plan: &LogicalPlan) -> datafusion::common::DFSchemaRef {
    let state = session.ctx.state();
    match state.analyzer().execute_and_check(plan.clone(), state.config_options(), |_, _| {}) {
        Ok(analyzed) => std::sync::Arc::clone(analyzed.schema()),
        Err(_) => std::sync::Arc::clone(plan.schema()),
    }
}

/// `(n, type)` for every `CAST($n AS type)` in the plan.
fn cast_parameter_types(plan: &LogicalPlan) -> Result<Vec<(usize, datafusion::arrow::datatypes::DataType)>> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let mut found = Vec::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Cast(cast) = e {
                    if let Expr::Placeholder(p) = cast.expr.as_ref() {
                        if let Ok(n) = p.id.trim_start_matches('$').parse::<usize>() {
                            found.push((n, cast.field.data_type().clone()));
                        }
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(found)
}

/// EXPLAIN's rows without the newline DataFusion ends a physical plan with (Postgres's plans
/// end without one; psql showed it as an empty line).
fn without_trailing_newlines(
    stream: datafusion::physical_plan::SendableRecordBatchStream,
) -> datafusion::physical_plan::SendableRecordBatchStream {
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use futures::StreamExt;
    let schema = stream.schema();
    let trimmed = Arc::clone(&schema);
    let batches = stream.map(move |batch| {
        let batch = batch?;
        let columns = batch
            .columns()
            .iter()
            .map(|column| match column.as_string_opt::<i32>() {
                Some(text) => {
                    Arc::new(text.iter().map(|v| v.map(|v| v.trim_end_matches('\n'))).collect::<StringArray>())
                        as Arc<dyn Array>
                }
                None => Arc::clone(column),
            })
            .collect();
        Ok(datafusion::arrow::array::RecordBatch::try_new(Arc::clone(&trimmed), columns)?)
    });
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, batches))
}
