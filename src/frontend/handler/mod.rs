//! Statement dispatch: one handler file per statement kind. [`execute`] runs a statement,
//! [`describe`] tells the extended protocol what it takes and returns without running it.
//!
//! Statement kinds and their handlers:
//! - `CREATE TABLE [AS]` -> [`create_table`]; `CREATE MATERIALIZED VIEW` -> [`create_view`];
//!   `DROP` -> [`drop`]; `CREATE INDEX`, `DROP INDEX` -> [`create_index`]
//! - `SELECT`, `INSERT`, `UPDATE`, `DELETE`, `TRUNCATE`, `EXPLAIN` -> [`query`] (DataFusion)
//! - `SHOW TABLES`, `SHOW MATERIALIZED VIEWS`, `SHOW <setting>`, `SHOW ALL` -> [`show`]; `DESCRIBE t`, `SHOW COLUMNS` -> [`describe`]
//! - `SET`, `RESET` -> [`set`]; `BEGIN`, `COMMIT`, `ROLLBACK` -> [`transaction`]
//! - `CREATE`/`ALTER`/`DROP ROLE`, `SET ROLE` -> [`roles`]; `GRANT`, `REVOKE` -> [`grant`]
//!
//! Anything else is SQLSTATE 0A000, said plainly.

pub mod copy;
pub mod create_index;
pub mod create_plain_view;
pub mod create_sink;
pub mod create_table;
pub mod create_view;
pub mod describe;
pub mod drop;
pub mod explain_analyze;
pub mod grant;
pub mod prepare;
pub mod query;
pub mod returning;
pub mod roles;
pub mod set;
pub mod show;
pub mod transaction;
pub mod unfinished;

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart, ObjectType, ShowCreateObject, Statement};

use super::clauses::StreamingClauses;
use super::{Frontend, Session, StatementDescription, StatementResult};
use crate::catalog::{RelationKind, DEFAULT_SCHEMA};
use crate::error::{Result, SqlState, WeirError};

/// The statements DataFusion plans and runs ([`query`]): the one list both [`execute`] and
/// [`describe`] go by. (`EXPLAIN CREATE MATERIALIZED VIEW` runs by `create_view`, matched
/// before this.)
fn planned_by_datafusion(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_)
            | Statement::Truncate(_)
            | Statement::Explain { .. }
    )
}

/// Runs `statement`. The arms other than queries and DML (`query::handle`) are boxed: an async
/// function's future is as large as its largest arm, and the hot path's futures are moved at
/// every call (a profile of prepared point lookups showed an eighth of the time in memmove,
/// callers unresolved; boxing these arms and the parse cache together gained 7-13 % in lookups/s, one noisy run).
pub async fn execute(
    fe: &Frontend,
    session: &mut Session,
    statement: Statement,
    params: Option<ParamValues>,
) -> Result<StatementResult> {
    match statement {
        Statement::CreateTable(_) => {
            Box::pin(create_table::handle(fe, session, statement, StreamingClauses::default())).await
        }
        Statement::Drop { object_type: ObjectType::Index, names, if_exists, .. } => {
            let names = names.iter().map(relation_name).collect::<Result<Vec<_>>>()?;
            Box::pin(create_index::drop(fe, names, if_exists)).await
        }
        Statement::Drop { .. } => Box::pin(drop::handle(fe, statement)).await,
        Statement::CreateIndex(_) => Box::pin(create_index::handle(fe, statement)).await,
        Statement::CreateView(_) => {
            Box::pin(create_view::handle(fe, session, statement, StreamingClauses::default())).await
        }
        Statement::Explain { statement: inner, .. } if matches!(inner.as_ref(), Statement::CreateView(_)) => {
            Box::pin(create_view::explain(fe, session, &inner, &StreamingClauses::default())).await
        }
        Statement::ShowViews { materialized: true, .. } => show::materialized_views(fe),
        Statement::ShowViews { materialized: false, .. } => show::views(fe),
        statement if returning::has_returning(&statement) => {
            Box::pin(returning::handle(fe, session, statement, params)).await
        }
        statement if planned_by_datafusion(&statement) => {
            Box::pin(query::handle(session, name_given_columns(fe, statement), params, fe.catalog().version())).await
        }
        Statement::ShowTables { .. } => show::tables(fe),
        Statement::ShowCreate { obj_type, obj_name } => {
            let kinds: &[RelationKind] = match obj_type {
                ShowCreateObject::Table => &[RelationKind::Table],
                ShowCreateObject::View => &[RelationKind::View, RelationKind::MaterializedView],
                other => return Err(WeirError::unsupported(format!("SHOW CREATE {other}"))),
            };
            show::create(fe, &relation_name(&obj_name)?, kinds)
        }
        Statement::ShowVariable { variable } => show::variable(session, &variable),
        Statement::ExplainTable { table_name, .. } => describe::handle(fe, &table_name),
        Statement::ShowColumns { show_options, .. } => match show_options.show_in.and_then(|s| s.parent_name) {
            Some(name) => describe::handle(fe, &name),
            None => Err(WeirError::syntax("SHOW COLUMNS needs FROM <table>")),
        },
        Statement::Set(set) => set::handle(fe, session, set),
        Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. }
        | Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. } => Box::pin(transaction::handle(fe, session, statement)).await,
        Statement::Reset(reset) => set::reset(fe, session, reset.reset),
        Statement::Discard { object_type } => set::discard(fe, session, object_type),
        Statement::Prepare { name, data_types, statement } => prepare::prepare(session, &name, &data_types, &statement),
        Statement::Execute { name: Some(name), parameters, immediate: false, .. } if name.0.len() == 1 => {
            let Some(ident) = name.0[0].as_ident() else { return Err(WeirError::syntax("EXECUTE needs a name")) };
            Box::pin(prepare::execute(fe, session, &ident.clone(), &parameters)).await
        }
        Statement::Deallocate { name, .. } => prepare::deallocate(session, &name),
        other => Err(WeirError::unsupported(format!("statement not supported: {}", first_words(&other.to_string())))),
    }
}

/// Runs CREATE SINK, DROP SINK or SHOW SINKS.
pub async fn execute_sink(
    fe: &Frontend,
    session: &mut Session,
    statement: crate::frontend::sink_statement::SinkStatement,
) -> Result<StatementResult> {
    create_sink::handle(fe, session, statement).await
}

/// Runs a role or privilege statement (`CREATE ROLE`, `GRANT`, `SET ROLE`, ...).
pub async fn execute_access(
    fe: &Frontend,
    session: &mut Session,
    statement: crate::frontend::access_statement::AccessStatement,
) -> Result<StatementResult> {
    roles::handle(fe, session, statement).await
}

/// Runs a CREATE statement that has Weir's streaming clauses.
pub async fn execute_streaming(
    fe: &Frontend,
    session: &mut Session,
    statement: Statement,
    clauses: StreamingClauses,
) -> Result<StatementResult> {
    match statement {
        Statement::Drop { .. } if clauses.drop_source => drop::handle_source(fe, statement).await,
        Statement::CreateTable(_) => create_table::handle(fe, session, statement, clauses).await,
        Statement::CreateView(_) => create_view::handle(fe, session, statement, clauses).await,
        Statement::Explain { statement: inner, .. } if matches!(inner.as_ref(), Statement::CreateView(_)) => {
            create_view::explain(fe, session, &inner, &clauses).await
        }
        _ => Err(WeirError::syntax(
            "WATERMARK and APPEND ONLY belong to CREATE TABLE; EMIT, ALLOW LATENESS and LATE ROWS to CREATE MATERIALIZED VIEW",
        )),
    }
}

pub async fn describe(fe: &Frontend, session: &mut Session, statement: &Statement) -> Result<StatementDescription> {
    match statement {
        statement if returning::has_returning(statement) => Box::pin(returning::describe(fe, session, statement)).await,
        statement if planned_by_datafusion(statement) => {
            // Described once per catalog version (a prepared statement is described at each
            // Execute that binds parameters).
            let version = fe.catalog().version();
            if let Some(described) = session.plans.description(statement, version) {
                return Ok(described);
            }
            let described = Box::pin(query::describe(session, &name_given_columns(fe, statement.clone()))).await?;
            session.plans.keep_description(statement.clone(), version, described.clone());
            Ok(described)
        }
        // These only read the catalog or the session: running them is the simplest exact answer.
        Statement::ShowTables { .. }
        | Statement::ShowViews { .. }
        | Statement::ShowVariable { .. }
        | Statement::ExplainTable { .. }
        | Statement::ShowColumns { .. } => {
            let columns = match Box::pin(execute(fe, session, statement.clone(), None)).await? {
                StatementResult::Rows { schema, .. } => Some(schema),
                _ => None,
            };
            Ok(StatementDescription { columns, ..Default::default() })
        }
        _ => Ok(StatementDescription::default()),
    }
}

/// `INSERT INTO t VALUES (...)` (or `SELECT ...`) without a column list, into a table with a
/// processing-time column, giving one value fewer than the table has columns: the values are
/// for the other columns, in order, and the stamp is Weir's to give (`rows::to_stored`). The
/// statement gets those columns named; anything else is left for DataFusion to judge.
fn name_given_columns(fe: &Frontend, statement: Statement) -> Statement {
    use datafusion::sql::sqlparser::ast::{SelectItem, SetExpr, TableObject};
    let Statement::Insert(mut insert) = statement else { return statement };
    let relation = match &insert.table {
        TableObject::TableName(name) => relation_name(name).ok().and_then(|n| fe.catalog().get(&n)),
        _ => None,
    };
    let (Some(relation), Some(source)) = (relation, insert.source.as_ref()) else {
        return Statement::Insert(insert);
    };
    let Some(stamp) = relation.def.processing_time else { return Statement::Insert(insert) };
    let given = match source.body.as_ref() {
        SetExpr::Values(values) => values.rows.first().map(|row| row.len()),
        SetExpr::Select(select)
            if !select
                .projection
                .iter()
                .any(|item| matches!(item, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) =>
        {
            Some(select.projection.len())
        }
        _ => None,
    };
    let columns = relation.schema.fields().len();
    if insert.columns.is_empty() && given == Some(columns - 1) {
        insert.columns = relation
            .schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != stamp)
            .map(|(_, f)| ObjectName(vec![ObjectNamePart::Identifier(Ident::with_quote('"', f.name()))]))
            .collect();
    }
    Statement::Insert(insert)
}

/// Whether `statement` changes the catalog (it completes with a checkpoint).
pub fn changes_catalog(statement: &Statement) -> bool {
    matches!(
        statement,
        Statement::CreateTable(_) | Statement::CreateView(_) | Statement::CreateIndex(_) | Statement::Drop { .. }
    )
}

/// Whether a statement changes table rows (and so must be visible after `implicit_flush`).
pub fn writes_rows(statement: &Statement) -> bool {
    matches!(statement, Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) | Statement::Truncate(_))
        || matches!(statement, Statement::CreateTable(c) if c.query.is_some())
}

/// A rows result from batches already in memory.
pub fn rows(batch: RecordBatch) -> Result<StatementResult> {
    let schema = batch.schema();
    let stream = MemoryStream::try_new(vec![batch], Arc::clone(&schema), None)?;
    Ok(StatementResult::Rows { schema, stream: Box::pin(stream) })
}

/// The relation name an object name refers to: unquoted identifiers fold to lower case, and the
/// only schema is `public`.
pub fn relation_name(name: &ObjectName) -> Result<String> {
    let idents: Vec<&Ident> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Ok(i),
            other => Err(WeirError::syntax(format!("unexpected name part {other}"))),
        })
        .collect::<Result<_>>()?;
    let fold = identifier;
    match idents.as_slice() {
        [table] => Ok(fold(table)),
        [schema, table] | [_, schema, table] => {
            if fold(schema) != DEFAULT_SCHEMA {
                return Err(WeirError::new(SqlState("3F000"), format!("schema \"{}\" does not exist", fold(schema))));
            }
            Ok(fold(table))
        }
        _ => Err(WeirError::syntax(format!("improper qualified name: {name}"))),
    }
}

/// An identifier as Postgres reads it: unquoted ones fold to lower case.
pub fn identifier(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
