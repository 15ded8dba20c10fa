//! `CREATE TABLE name (columns, PRIMARY KEY ...)` and `CREATE TABLE name AS SELECT ...`.
//!
//! DataFusion plans the statement, which gives column types exactly as ad-hoc queries will see
//! them and validates the column list; the catalog then records the table. With a primary key,
//! an INSERT of an existing key replaces that row (upsert); without one, every row is kept,
//! keyed by a hidden row id.
//!
//! `APPEND ONLY` tables take INSERT only; only they may declare `WATERMARK FOR col AS expr`,
//! checked here: the column is a TIMESTAMP and the expression, over that table's row, has the
//! column's type (`date_time - INTERVAL '5' SECOND`).

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::Constraint;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::sqlparser::ast::{ColumnDef, Statement};

use super::{query, relation_name};
use crate::catalog::options::ConnectorOptions;
use crate::catalog::{RelationKind, TableOptions, WatermarkDef};
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::clauses::StreamingClauses;
use crate::frontend::{Frontend, Session, StatementResult};
use crate::types::pg_type::DeclaredType;
use crate::types::window::is_time_type;

/// A source's columns: its connector's (timestamps as TIMESTAMP, nanoseconds, like a table's),
/// or, when the statement lists columns, those, which must have the connector's names in its
/// order (their types are what the connector's values are cast to). And whether the connector
/// can produce its rows again (then they are not stored: [`crate::connectors::replay`]).
fn source_schema(options: &ConnectorOptions, declared: Schema, primary_key: &[String]) -> Result<SourceShape> {
    let declared_schema = Some(std::sync::Arc::new(declared.clone()));
    let mut reader = crate::connectors::registry::reader(options, declared_schema, primary_key)?;
    reader.check()?;
    let (connector, replayable) = (reader.schema(), reader.replayable());
    let settled = reader.settled_options();
    if declared.fields().is_empty() {
        let fields: Vec<Field> = connector
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Timestamp(_, tz) => {
                    Field::new(f.name(), DataType::Timestamp(TimeUnit::Nanosecond, tz.clone()), f.is_nullable())
                }
                _ => f.as_ref().clone(),
            })
            .collect();
        return Ok(SourceShape { schema: Schema::new(fields), replayable, settled });
    }
    let names = |s: &Schema| s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
    if names(&declared) != names(&connector) {
        return Err(WeirError::new(
            SqlState::DATATYPE_MISMATCH,
            format!("this source's columns are ({}), in that order", names(&connector).join(", ")),
        ));
    }
    Ok(SourceShape { schema: declared, replayable, settled })
}

/// What a source's connector says when it is made.
struct SourceShape {
    schema: Schema,
    replayable: bool,
    /// Options to keep with the source's ([`crate::connectors::source::SourceReader::settled_options`]).
    settled: Vec<(String, String)>,
}

/// The columns declared with a type their Arrow type says less than (`VARCHAR(20)`), by the
/// name DataFusion gives them (unquoted names in lower case).
fn declared_types(columns: &[ColumnDef]) -> Vec<(String, DeclaredType)> {
    columns
        .iter()
        .filter_map(|c| {
            let name =
                if c.name.quote_style.is_some() { c.name.value.clone() } else { c.name.value.to_ascii_lowercase() };
            DeclaredType::from_sql(&c.data_type).map(|d| (name, d))
        })
        .collect()
}

/// `statement` with its `json` and `jsonb` columns declared `TEXT`, which DataFusion plans: a
/// JSON value is kept as its text (the declared type, [`declared_types`], says which).
fn json_columns_as_text(mut statement: Statement) -> Statement {
    use datafusion::sql::sqlparser::ast::DataType as Sql;
    if let Statement::CreateTable(create) = &mut statement {
        for column in &mut create.columns {
            if matches!(column.data_type, Sql::JSON | Sql::JSONB) {
                column.data_type = Sql::Text;
            }
        }
    }
    statement
}

/// The statement as stored: the parsed statement with its streaming clauses put back.
fn table_definition(statement: &str, clauses: &StreamingClauses) -> String {
    let mut text = statement.to_string();
    if let (Some(w), Some(close)) = (&clauses.watermark, text.rfind(')')) {
        text.insert_str(close, &format!(", {w}"));
    }
    if clauses.append_only {
        text.push_str(" APPEND ONLY");
    }
    text
}

/// Checks `WATERMARK FOR column AS expr` against the table's columns.
fn check_watermark(session: &Session, schema: &Schema, column: &str, expr: &str) -> Result<WatermarkDef> {
    let index = schema
        .fields()
        .iter()
        .position(|f| f.name() == column || f.name() == &column.to_lowercase())
        .ok_or_else(|| {
            WeirError::new(SqlState::UNDEFINED_COLUMN, format!("column \"{column}\" of the WATERMARK does not exist"))
        })?;
    let time_type = schema.field(index).data_type();
    if !is_time_type(time_type) {
        return Err(WeirError::new(
            SqlState::DATATYPE_MISMATCH,
            format!("the WATERMARK column \"{column}\" must be a TIMESTAMP, not {time_type}"),
        ));
    }
    let df_schema = datafusion::common::DFSchema::try_from(schema.clone())?;
    let planned = session.ctx.parse_sql_expr(expr, &df_schema)?;
    let planned_type = datafusion::logical_expr::ExprSchemable::get_type(&planned, &df_schema)?;
    if !is_time_type(&planned_type) {
        return Err(WeirError::new(
            SqlState::DATATYPE_MISMATCH,
            format!("the WATERMARK expression must give a TIMESTAMP, not {planned_type}"),
        ));
    }
    Ok(WatermarkDef { column: index, expr: expr.to_string() })
}

pub async fn handle(
    fe: &Frontend,
    session: &mut Session,
    statement: Statement,
    clauses: StreamingClauses,
) -> Result<StatementResult> {
    let Statement::CreateTable(create) = &statement else { unreachable!("dispatched on CreateTable") };
    let name = relation_name(&create.name)?;
    if create.external || create.temporary {
        return Err(WeirError::unsupported("TEMPORARY and EXTERNAL tables are not supported"));
    }
    if clauses.has_view_clauses() {
        return Err(WeirError::syntax("EMIT, ALLOW LATENESS and LATE ROWS belong to CREATE MATERIALIZED VIEW"));
    }
    // A name taken by a relation planning cannot see (an index, a sink) is taken all the same.
    if fe.catalog().get(&name).is_some_and(|r| matches!(r.def.kind, RelationKind::Index | RelationKind::Sink)) {
        if create.if_not_exists {
            let source = clauses.source.is_some() && !clauses.table_with_connector;
            return Ok(StatementResult::command(if source { "CREATE SOURCE" } else { "CREATE TABLE" }));
        }
        return Err(WeirError::new(SqlState::DUPLICATE_TABLE, format!("relation \"{name}\" already exists")));
    }
    let definition = table_definition(&statement.to_string(), &clauses);
    let declared = declared_types(&create.columns);
    let plan = query::plan(session, json_columns_as_text(statement)).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(cmt)) = plan else {
        return Err(WeirError::unsupported("this form of CREATE TABLE is not supported"));
    };
    if cmt.or_replace {
        return Err(WeirError::unsupported("CREATE OR REPLACE TABLE is not supported; DROP it first"));
    }
    if !cmt.column_defaults.is_empty() {
        return Err(WeirError::unsupported("column DEFAULT values are not supported yet"));
    }

    let TableShape { schema, primary_key, processing_time, replayed, connector } = table_shape(&cmt, &clauses)?;
    let is_source = clauses.source.is_some();
    // `CREATE TABLE ... WITH (connector = ...)`: the connector's rows stored (and upserted by
    // the primary key, if any), not read again from the connector.
    let stored = clauses.table_with_connector;
    let is_ctas = !matches!(cmt.input.as_ref(), LogicalPlan::EmptyRelation(_));
    let append_only = check_kind(&clauses, &primary_key, is_ctas)?;
    let watermark =
        clauses.watermark.as_ref().map(|w| check_watermark(session, &schema, &w.column, &w.expr)).transpose()?;
    let options = TableOptions { append_only, watermark, processing_time, connector, replayed };
    // Columns keep their declared types (`VARCHAR(20)`): as written, or as the query of a
    // CREATE TABLE AS takes them from other relations.
    let schema = if is_ctas {
        crate::frontend::column_origins::with_declared_types(&cmt.input, schema)
    } else {
        DeclaredType::declare(schema, |_, f| declared.iter().find(|(name, _)| name == f.name()).map(|(_, d)| *d))
    };
    let created = fe.catalog().create_table_with(
        &name,
        &definition,
        schema,
        primary_key,
        options,
        &session.owner(),
        cmt.if_not_exists,
    )?;
    // A failure from here on undoes this statement's creation by id (`undo_create`), so it can
    // never drop a relation of the same name that it did not make.
    if is_source {
        if let Some(id) = created {
            let relation = fe.catalog().by_id(id).ok_or_else(|| WeirError::internal("source vanished"))?;
            if let Err(e) = fe.streaming().start_source(relation) {
                let _ = fe.catalog().undo_create(id);
                return Err(e);
            }
        }
        return Ok(StatementResult::command(if stored { "CREATE TABLE" } else { "CREATE SOURCE" }));
    }
    if !is_ctas {
        return Ok(StatementResult::command("CREATE TABLE"));
    }
    let Some(id) = created else {
        return Ok(StatementResult::Command { tag: "SELECT".into(), rows: Some(0) });
    };
    fill(fe, session, &name, id, cmt.input.as_ref()).await
}

/// A new table's columns and keys as stored: primary key columns NOT NULL, a source's columns
/// as its connector gives them (its processing-time column last).
struct TableShape {
    schema: Schema,
    primary_key: Vec<usize>,
    processing_time: Option<usize>,
    /// A source whose connector produces its rows again (`catalog::replay`).
    replayed: bool,
    /// A source's connector options with what it settled when made.
    connector: Option<ConnectorOptions>,
}

fn table_shape(cmt: &datafusion::logical_expr::CreateMemoryTable, clauses: &StreamingClauses) -> Result<TableShape> {
    let mut primary_key = Vec::new();
    for constraint in cmt.constraints.iter() {
        match constraint {
            Constraint::PrimaryKey(columns) => primary_key = columns.clone(),
            Constraint::Unique(_) => {
                return Err(WeirError::unsupported("UNIQUE constraints are not supported; declare a PRIMARY KEY"))
            }
        }
    }
    let input_schema = cmt.input.schema().as_arrow().clone();
    // Primary key columns are NOT NULL, as in Postgres.
    let fields: Vec<Field> = input_schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = f.as_ref().clone();
            if primary_key.contains(&i) {
                f.with_nullable(false)
            } else {
                f
            }
        })
        .collect();
    let mut schema = Schema::new(fields);
    // The processing-time column: stamped by Weir, not given by a connector (a source's goes
    // after its connector's columns).
    let stamped = match &clauses.processing_time {
        Some(name) => {
            let index = schema.index_of(name).map_err(|_| WeirError::internal("the PROCTIME() column vanished"))?;
            if !matches!(schema.field(index).data_type(), DataType::Timestamp(_, _)) {
                return Err(WeirError::new(
                    SqlState::DATATYPE_MISMATCH,
                    format!("the PROCTIME() column \"{name}\" must be a TIMESTAMPTZ (or TIMESTAMP)"),
                ));
            }
            Some((index, schema.field(index).clone().with_nullable(true)))
        }
        None => None,
    };
    let stored = clauses.table_with_connector;
    let mut processing_time = stamped.as_ref().map(|(index, _)| *index);
    let mut replayed = false;
    let mut connector = None;
    if let Some(options) = &clauses.source {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        let stamped = stamped.map(|(index, field)| {
            fields.remove(index);
            field
        });
        let key_names: Vec<String> = primary_key.iter().map(|&i| schema.field(i).name().clone()).collect();
        let shape = source_schema(options, Schema::new(fields), &key_names)?;
        let (connector_schema, replayable) = (shape.schema, shape.replayable);
        replayed = replayable && !stored;
        let mut options = options.clone();
        options.0.extend(shape.settled);
        connector = Some(options);
        let mut all = connector_schema.fields().to_vec();
        if let Some(field) = stamped {
            processing_time = Some(all.len());
            all.push(std::sync::Arc::new(field));
        }
        schema = Schema::new(all);
        // The key's columns where they are now (the PROCTIME() column moved to the end).
        primary_key = key_names
            .iter()
            .map(|name| schema.index_of(name).map_err(|_| WeirError::internal("a key column vanished")))
            .collect::<Result<Vec<usize>>>()?;
    }
    let sort_fields: Vec<SortField> = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    if !RowConverter::supports_fields(&sort_fields) {
        return Err(WeirError::unsupported("a column type of this table cannot be stored yet"));
    }
    Ok(TableShape { schema, primary_key, processing_time, replayed, connector })
}

/// Whether the table is append-only (declared, or a source without a key), after the checks of
/// what its kind allows.
fn check_kind(clauses: &StreamingClauses, primary_key: &[usize], is_ctas: bool) -> Result<bool> {
    let is_source = clauses.source.is_some();
    let stored = clauses.table_with_connector;
    let append_only = clauses.append_only || (is_source && primary_key.is_empty());
    if is_source && is_ctas {
        return Err(WeirError::unsupported("a table fed by a connector takes no AS SELECT"));
    }
    if is_source && !stored && !primary_key.is_empty() {
        return Err(WeirError::unsupported("a source takes no PRIMARY KEY")
            .with_hint("CREATE TABLE ... (..., PRIMARY KEY (...)) WITH (connector = ...) keeps the rows by key."));
    }
    if append_only && !primary_key.is_empty() {
        return Err(WeirError::unsupported(
            "an APPEND ONLY table cannot have a PRIMARY KEY (an insert would replace a row)",
        ));
    }
    if clauses.watermark.is_some() && !append_only {
        return Err(WeirError::unsupported("WATERMARK FOR needs an APPEND ONLY table")
            .with_hint("Add APPEND ONLY after the column list."));
    }
    Ok(append_only)
}

/// CREATE TABLE AS: the query's rows into new table `id`, or no table if they could not be
/// written (it is one statement).
async fn fill(
    fe: &Frontend,
    session: &mut Session,
    name: &str,
    id: crate::state::keys::TableId,
    input: &LogicalPlan,
) -> Result<StatementResult> {
    let frame = session.ctx.execute_logical_plan(input.clone()).await?;
    let written = frame.write_table(name, DataFrameWriteOptions::new()).await;
    match written {
        Ok(batches) => {
            let rows = batches
                .iter()
                .filter_map(|b| b.column_by_name("count"))
                .filter_map(|c| {
                    c.as_any()
                        .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                        .map(|a| a.iter().flatten().sum::<u64>())
                })
                .sum::<u64>();
            Ok(StatementResult::Command { tag: "SELECT".into(), rows: Some(rows as usize) })
        }
        Err(e) => {
            // CREATE TABLE AS is one statement: no table if its rows could not be written.
            let _ = fe.catalog().undo_create(id);
            Err(e.into())
        }
    }
}
