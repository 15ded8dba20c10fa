//! `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS SELECT ...`.
//!
//! DataFusion plans and optimizes the query; `stream_plan::build` turns the plan into operators;
//! the catalog records the view; the streaming manager backfills it from its inputs' current
//! rows before this statement returns, then keeps it up to date. If any step fails the view
//! does not exist afterwards.
//!
//! Event-time clauses (`EMIT ON WINDOW CLOSE`, `ALLOW LATENESS`, `LATE ROWS TO`) become
//! [`ViewOptions`] for the builder, with the tables it joins `FOR SYSTEM_TIME AS OF PROCTIME()`; `LATE ROWS TO name` creates the append-only table
//! `name` (the windowed input's columns, `view_name`, `window_start`, `window_end`,
//! `arrived_at`) unless it exists with those columns, and the view depends on it.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast::Statement;

use super::unfinished::Unfinished;
use super::{query, relation_name};
use datafusion::logical_expr::LogicalPlan;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;

use crate::catalog::{RelationKind, TableOptions};
use crate::dataflow::graph::Built;
use crate::dataflow::manager::ViewStart;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::clauses::StreamingClauses;
use crate::frontend::{Frontend, Session, StatementResult};
use crate::state::keys::TableId;
use crate::stream_plan::build;
use crate::stream_plan::plan::ViewOptions;
use crate::types::window::interval_nanos;

/// Plans a view's query: its columns and its optimized logical plan.
/// `statement`'s query planned and optimized for a view by `rules` (a view made by an earlier
/// version is planned as it was then: `PlanningRules::of`).
pub async fn plan_view(
    session: &Session,
    statement: &Statement,
    rules: crate::frontend::df_context::PlanningRules,
) -> Result<(Schema, LogicalPlan)> {
    let Statement::CreateView(view) = statement else { unreachable!("dispatched on CreateView") };
    let state = rules.parsing_state(session.ctx.state());
    let (logical, names) = query::plan_named_in(&state, Statement::Query(view.query.clone()), rules).await?;
    // A view's columns are its names: two of one name are refused, as in Postgres.
    if let Some(names) = names {
        crate::frontend::column_names::refuse_repeated(&names)?;
    }
    // now() in a view is the epoch's time, not the time of planning (ADR 13).
    let logical = crate::stream_plan::temporal_bounds::mark_now(logical)?;
    let optimized = crate::frontend::df_context::optimize_for_view(&state, &logical, rules)?;
    crate::frontend::single_row::refuse_in_view(&optimized)?;
    // Names as planned, types as the analyzer rules left them (an integer literal is int4).
    let fields: Vec<Field> = logical
        .schema()
        .fields()
        .iter()
        .zip(optimized.schema().fields())
        .map(|(named, typed)| named.as_ref().clone().with_data_type(typed.data_type().clone()).with_nullable(true))
        .collect();
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

/// Refuses to start a materialized view whose query, planned again at a start, gives other
/// columns than those its stored rows and state have (a plain view it reads now plans
/// differently, or a planner rule changed): maintained on, it would fail at its first change
/// or store rows of another type. The view stays as it was; DROP and CREATE it again.
pub fn check_planned_columns(relation: &crate::catalog::Relation, planned: &Schema) -> Result<()> {
    let stored = relation.schema.fields();
    // A zoned timestamp's zone is the creating session's `TimeZone` setting, a label only.
    let same_type = |a: &DataType, b: &DataType| match (a, b) {
        (DataType::Timestamp(u, Some(_)), DataType::Timestamp(v, Some(_))) => u == v,
        _ => a == b,
    };
    let same = stored.len() == planned.fields().len()
        && stored
            .iter()
            .zip(planned.fields())
            .all(|(s, p)| s.name() == p.name() && same_type(s.data_type(), p.data_type()));
    if same {
        return Ok(());
    }
    let describe = |fields: &datafusion::arrow::datatypes::Fields| {
        fields.iter().map(|f| format!("{} {}", f.name(), f.data_type())).collect::<Vec<_>>().join(", ")
    };
    Err(WeirError::new(
        SqlState::DATATYPE_MISMATCH,
        format!(
            "materialized view \"{}\" now plans to columns ({}) where its stored rows have ({})",
            relation.def.name,
            describe(planned.fields()),
            describe(stored)
        ),
    )
    .with_hint("A relation it reads changed how it plans; DROP the view and CREATE it again."))
}

/// The operators of view `view` (named `name`) for its optimized plan.
pub fn build_view(
    fe: &Frontend,
    session: &Session,
    plan: &LogicalPlan,
    name: &str,
    view: TableId,
    options: &ViewOptions,
) -> Result<Built> {
    let parallelism = fe
        .catalog()
        .by_id(view)
        .map(|r| r.def.parallelism)
        .filter(|p| *p > 0)
        .unwrap_or_else(|| session.streaming_parallelism());
    build(plan, &session.ctx.state(), fe.catalog(), name, view, fe.streaming().operator_state, parallelism, options)
}

/// What the view's clauses ask of its operators: its event-time clauses (`clauses`) and the
/// tables `statement` joins `FOR SYSTEM_TIME AS OF PROCTIME()`.
pub async fn view_options(
    fe: &Frontend,
    session: &Session,
    statement: &Statement,
    clauses: &StreamingClauses,
) -> Result<ViewOptions> {
    let mut lookups = Vec::new();
    for name in crate::frontend::system_time::lookup_tables(statement) {
        let name = relation_name(&name)?;
        let table = fe.catalog().get(&name).ok_or_else(|| WeirError::undefined_table(&name))?;
        if table.def.kind != RelationKind::Table {
            return Err(WeirError::unsupported(format!(
                "FOR SYSTEM_TIME AS OF PROCTIME() reads a table; \"{name}\" is not one"
            )));
        }
        lookups.push(table.def.id);
    }
    let lateness = match &clauses.allow_lateness {
        Some(interval) => constant_interval(session, interval, "ALLOW LATENESS").await?,
        None => 0,
    };
    let with = view_with_options(statement)?;
    let state_ttl = match &with.state_ttl {
        Some(text) => {
            let literal = format!("INTERVAL '{}'", text.replace('\'', "''"));
            let nanos = constant_interval(session, &literal, "state_ttl").await?;
            if nanos == 0 {
                return Err(WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "state_ttl must be longer than zero"));
            }
            Some(nanos)
        }
        None => None,
    };
    Ok(ViewOptions {
        two_phase_aggregation: with.two_phase_aggregation,
        state_ttl,
        emit_on_window_close: clauses.emit_on_window_close,
        lateness,
        keep_late_rows: clauses.late_rows_to.is_some(),
        lookups,
        // A view restored replaces it with the one it recorded.
        state_format: crate::state::value::StateFormat::CURRENT,
        // Views run in one process until the cluster runs them (issue 46).
        cluster: None,
    })
}

/// The nanoseconds of a constant interval expression `interval` given for `what` (days and
/// less; never negative).
async fn constant_interval(session: &Session, interval: &str, what: &str) -> Result<i64> {
    let batches = session.ctx.sql(&format!("SELECT {interval}")).await?.collect().await?;
    let value = batches
        .first()
        .filter(|b| b.num_rows() == 1 && b.num_columns() == 1)
        .map(|b| ScalarValue::try_from_array(b.column(0), 0))
        .transpose()?
        .ok_or_else(|| WeirError::syntax(format!("{what} needs one INTERVAL")))?;
    let nanos = interval_nanos(&value)?;
    if nanos < 0 {
        return Err(WeirError::new(SqlState::INVALID_PARAMETER_VALUE, format!("{what} must not be negative")));
    }
    Ok(nanos)
}

/// A materialized view's `WITH (...)` options, as written.
#[derive(Default)]
struct WithOptions {
    two_phase_aggregation: bool,
    /// The interval's text (`'1 hour'`).
    state_ttl: Option<String>,
}

/// A materialized view's `WITH (...)` options: `two_phase_aggregation = true | false` and
/// `state_ttl = '<interval>'`; any other is 22023, not ignored.
fn view_with_options(statement: &Statement) -> Result<WithOptions> {
    use datafusion::sql::sqlparser::ast::{CreateTableOptions, SqlOption};
    let mut with = WithOptions::default();
    let Statement::CreateView(view) = statement else { return Ok(with) };
    let options = match &view.options {
        CreateTableOptions::None => return Ok(with),
        CreateTableOptions::With(options) => options,
        _ => return Err(WeirError::syntax("a materialized view takes options as WITH (name = value, ...)")),
    };
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(WeirError::syntax(format!("expected name = value in WITH, got {option}")));
        };
        let text = value.to_string().trim_matches('\'').to_string();
        match key.value.to_ascii_lowercase().as_str() {
            "two_phase_aggregation" => {
                with.two_phase_aggregation = match text.to_ascii_lowercase().as_str() {
                    "true" | "on" => true,
                    "false" | "off" => false,
                    other => {
                        return Err(WeirError::new(
                            SqlState::INVALID_PARAMETER_VALUE,
                            format!("two_phase_aggregation is true or false, not {other}"),
                        ))
                    }
                }
            }
            "state_ttl" => with.state_ttl = Some(text),
            other => {
                return Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                    "unknown option \"{other}\" for a materialized view (it takes two_phase_aggregation and state_ttl)"
                ),
                ))
            }
        }
    }
    Ok(with)
}

/// The columns of a `LATE ROWS TO` table for late rows of `late_rows` columns (the windowed
/// input's, then `window_start`, `window_end`).
pub fn late_table_schema(late_rows: &Schema) -> Schema {
    let n = late_rows.fields().len() - 2;
    let mut fields: Vec<Field> =
        late_rows.fields()[..n].iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    fields.push(Field::new("view_name", DataType::Utf8, true));
    fields.extend(late_rows.fields()[n..].iter().map(|f| f.as_ref().clone().with_nullable(true)));
    fields.push(Field::new("arrived_at", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true));
    Schema::new(fields)
}

/// The `LATE ROWS TO` table: created (append-only) if missing, else checked.
fn late_table(fe: &Frontend, name: &str, late_rows: &Schema, owner: &str) -> Result<Arc<crate::catalog::Relation>> {
    let schema = late_table_schema(late_rows);
    if let Some(existing) = fe.catalog().get(name) {
        let same = existing.def.kind == RelationKind::Table
            && existing.def.append_only
            && existing.schema.fields().len() == schema.fields().len()
            && existing
                .schema
                .fields()
                .iter()
                .zip(schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if !same {
            return Err(WeirError::new(
                SqlState::DUPLICATE_TABLE,
                format!("relation \"{name}\" exists and is not a late-rows table with the columns this view needs"),
            )
            .with_hint("Name another table in LATE ROWS TO, or drop this one."));
        }
        return Ok(existing);
    }
    let columns: Vec<String> = schema.fields().iter().map(|f| format!("\"{}\" {}", f.name(), f.data_type())).collect();
    let definition = format!("CREATE TABLE {name} ({}) APPEND ONLY", columns.join(", "));
    let options = TableOptions { append_only: true, ..Default::default() };
    fe.catalog().create_table_with(name, &definition, schema, vec![], options, owner, false)?;
    fe.catalog().get(name).ok_or_else(|| WeirError::internal("late-rows table vanished"))
}

/// `EXPLAIN CREATE MATERIALIZED VIEW ...`: the view's operators, root first, without creating it.
pub async fn explain(
    fe: &Frontend,
    session: &mut Session,
    statement: &Statement,
    clauses: &StreamingClauses,
) -> Result<StatementResult> {
    let Statement::CreateView(view) = statement else { unreachable!("dispatched on CreateView") };
    let name = relation_name(&view.name)?;
    let options = view_options(fe, session, statement, clauses).await?;
    let (_, logical) = plan_view(session, statement, crate::frontend::df_context::PlanningRules::CURRENT).await?;
    let built = build_view(fe, session, &logical, &name, 0, &options)?;
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

/// `CREATE MATERIALIZED VIEW v (a, b) AS query` as `... v AS SELECT * FROM (query) AS v (a, b, ...)`:
/// the list names the query's first columns, the others keep their names, as in Postgres
/// (more names than columns: 42601). The view is then planned, stored and restored as any
/// other.
async fn name_columns(session: &Session, statement: Statement) -> Result<Statement> {
    let Statement::CreateView(mut view) = statement else { unreachable!("dispatched on CreateView") };
    let given: Vec<String> = view.columns.iter().map(|c| c.name.value.clone()).collect();
    view.columns.clear();
    let unnamed = Statement::CreateView(view);
    let (schema, _) = plan_view(session, &unnamed, crate::frontend::df_context::PlanningRules::CURRENT).await?;
    if given.len() > schema.fields().len() {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "CREATE MATERIALIZED VIEW specifies more column names than columns",
        ));
    }
    let kept = schema.fields().iter().skip(given.len()).map(|f| f.name().clone());
    let names: Vec<String> = given.into_iter().chain(kept).collect();
    let Statement::CreateView(mut view) = unnamed else { unreachable!() };
    let quoted = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
    let alias = view.name.0.last().and_then(|p| p.as_ident()).map_or_else(|| "v".to_string(), |i| i.value.clone());
    let columns = names.iter().map(|n| quoted(n)).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT * FROM ({}) AS {} ({columns})", view.query, quoted(&alias));
    let mut parsed = crate::frontend::dialect::parse(&sql).map_err(|e| match e {
        crate::frontend::dialect::ParseFailure::TooComplex => crate::frontend::dialect::too_complex(),
        crate::frontend::dialect::ParseFailure::Syntax(e) => {
            WeirError::internal(format!("naming the view's columns: {e}"))
        }
    })?;
    let Some(Statement::Query(query)) = parsed.pop() else {
        return Err(WeirError::internal("naming the view's columns did not give a query"));
    };
    view.query = query;
    Ok(Statement::CreateView(view))
}

pub async fn handle(
    fe: &Frontend,
    session: &mut Session,
    statement: Statement,
    clauses: StreamingClauses,
) -> Result<StatementResult> {
    let Statement::CreateView(view) = &statement else { unreachable!("dispatched on CreateView") };
    if !view.materialized {
        return super::create_plain_view::handle(fe, session, statement).await;
    }
    if view.or_replace {
        return Err(WeirError::unsupported("CREATE OR REPLACE MATERIALIZED VIEW is not supported; DROP it first"));
    }
    let statement = if view.columns.is_empty() { statement } else { name_columns(session, statement).await? };
    let Statement::CreateView(view) = &statement else { unreachable!("still a CreateView") };
    let name = relation_name(&view.name)?;
    if view.if_not_exists && fe.catalog().get(&name).is_some() {
        return Ok(StatementResult::command("CREATE MATERIALIZED VIEW"));
    }
    let options = view_options(fe, session, &statement, &clauses).await?;
    let (schema, logical) = plan_view(session, &statement, crate::frontend::df_context::PlanningRules::CURRENT).await?;
    // Columns taken unchanged from other relations keep their declared types (`VARCHAR(20)`).
    let schema = crate::frontend::column_origins::with_declared_types(&logical, schema);
    // Check the plan can be maintained before the view exists.
    let checked = build_view(fe, session, &logical, &name, 0, &options)?;
    // What it reads once plain views are inlined, and the plain views it names (they cannot be
    // dropped under it: its definition names them).
    let mut depends_on = checked.inputs;
    depends_on.extend(&options.lookups);
    if let Statement::CreateView(v) = &statement {
        let named = super::create_plain_view::named_relations(fe, &v.query);
        depends_on.extend(
            named.into_iter().filter(|id| fe.catalog().by_id(*id).is_some_and(|r| r.def.kind == RelationKind::View)),
        );
    }
    let late = match (&clauses.late_rows_to, &checked.late_rows_schema) {
        (Some(table), Some(late_rows)) => {
            if *table == name {
                return Err(WeirError::new(
                    SqlState::DUPLICATE_TABLE,
                    "LATE ROWS TO must name another table than the view",
                ));
            }
            let created = fe.catalog().get(table).is_none();
            Some((late_table(fe, table, late_rows, &session.owner())?, created))
        }
        _ => None,
    };
    // From here on a failure, or the statement ending before it finished, undoes exactly what
    // this statement made, by id: never a relation that had the name before (a taken name
    // fails in `create_view`, before anything is made).
    let mut made = Unfinished::new(fe);
    if let Some((table, true)) = &late {
        made.push(table.def.id);
    }
    depends_on.extend(late.as_ref().map(|(t, _)| t.def.id));
    depends_on.sort_unstable();
    depends_on.dedup();
    let suffix = clauses.view_suffix();
    let definition = if suffix.is_empty() { statement.to_string() } else { format!("{statement} {suffix}") };
    let id = match fe.catalog().create_view(
        &name,
        &definition,
        schema,
        depends_on,
        session.streaming_parallelism(),
        checked.append_only,
        checked.watermark.clone(),
        crate::frontend::df_context::PlanningRules::REVISION,
        &session.owner(),
    ) {
        Ok(id) => id,
        Err(e) => return Err(e),
    };
    made.push(id);
    let started = match fe.catalog().by_id(id) {
        Some(relation) => match build_view(fe, session, &logical, &name, id, &options) {
            Ok(built) => {
                fe.streaming()
                    .start_view(relation, built, late.as_ref().map(|(t, _)| Arc::clone(t)), ViewStart::Backfill)
                    .await
            }
            Err(e) => Err(e),
        },
        None => Err(WeirError::internal("view vanished while being created")),
    };
    started?;
    made.finished();
    Ok(StatementResult::command("CREATE MATERIALIZED VIEW"))
}
