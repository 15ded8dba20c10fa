//! `DROP TABLE | SOURCE | MATERIALIZED VIEW | SINK [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`.
//!
//! A relation that views or sinks read cannot be dropped without CASCADE (2BP01); with CASCADE
//! its dependents go first, each with its job stopped and its rows (a sink: its outbox) deleted.

use datafusion::sql::sqlparser::ast::{ObjectType, Statement};

use super::relation_name;
use crate::catalog::RelationKind;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, StatementResult};

pub async fn handle(fe: &Frontend, statement: Statement) -> Result<StatementResult> {
    drop_relations(fe, statement, false).await
}

/// `DROP SOURCE`: as DROP TABLE, for sources only.
pub async fn handle_source(fe: &Frontend, statement: Statement) -> Result<StatementResult> {
    drop_relations(fe, statement, true).await
}

/// `DROP SINK [IF EXISTS] name`, and the view a sink `AS query` made for its query.
pub async fn handle_sink(fe: &Frontend, name: &str, if_exists: bool) -> Result<StatementResult> {
    let made_view = fe.catalog().get(name).and_then(|sink| {
        let own = matches!(
            crate::frontend::sink_statement::parse(&sink.def.definition),
            Ok(Some(crate::frontend::sink_statement::SinkStatement::Create {
                input: crate::frontend::sink_statement::SinkInput::Query(_),
                ..
            }))
        );
        own.then(|| sink.def.depends_on.first().and_then(|v| fe.catalog().by_id(*v))).flatten()
    });
    let dropped =
        drop_named(fe, RelationKind::Sink, "DROP SINK", vec![name.to_string()], if_exists, false, false).await?;
    if let Some(view) = made_view.filter(|v| fe.catalog().dependents(v.def.id).is_empty()) {
        drop_named(fe, RelationKind::MaterializedView, "DROP SINK", vec![view.def.name.clone()], true, false, false)
            .await?;
    }
    Ok(dropped)
}

async fn drop_relations(fe: &Frontend, statement: Statement, sources: bool) -> Result<StatementResult> {
    let Statement::Drop { object_type, if_exists, names, cascade, .. } = statement else {
        unreachable!("dispatched on Drop")
    };
    let (kind, tag) = match object_type {
        ObjectType::Table if sources => (RelationKind::Table, "DROP SOURCE"),
        ObjectType::Table => (RelationKind::Table, "DROP TABLE"),
        ObjectType::MaterializedView => (RelationKind::MaterializedView, "DROP MATERIALIZED VIEW"),
        ObjectType::View => (RelationKind::View, "DROP VIEW"),
        other => return Err(WeirError::unsupported(format!("DROP {other} is not supported"))),
    };
    let names = names.iter().map(relation_name).collect::<Result<Vec<_>>>()?;
    drop_named(fe, kind, tag, names, if_exists, cascade, sources).await
}

async fn drop_named(
    fe: &Frontend,
    kind: RelationKind,
    tag: &str,
    names: Vec<String>,
    if_exists: bool,
    cascade: bool,
    sources: bool,
) -> Result<StatementResult> {
    // Check every name before dropping any, so a failing statement changes nothing.
    let mut doomed = Vec::new();
    for name in names {
        match fe.catalog().get(&name) {
            Some(rel) if rel.def.kind != kind => {
                return Err(WeirError::new(
                    SqlState::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not a {}", kind_name(kind)),
                ));
            }
            Some(rel) if sources && rel.def.connector.is_none() => {
                return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("\"{name}\" is not a source")));
            }
            Some(rel) => {
                let dependents = fe.catalog().dependents(rel.def.id);
                if !dependents.is_empty() && !cascade {
                    let names: Vec<&str> = dependents.iter().map(|d| d.def.name.as_str()).collect();
                    return Err(WeirError::new(
                        SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
                        format!(
                            "cannot drop {} {name} because other objects depend on it: {}",
                            kind_name(kind),
                            names.join(", ")
                        ),
                    )
                    .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
                }
                // Dependents first, most dependent first.
                for d in dependents.into_iter().rev() {
                    if !doomed.iter().any(|x: &std::sync::Arc<crate::catalog::Relation>| x.def.id == d.def.id) {
                        doomed.push(d);
                    }
                }
                doomed.push(rel);
            }
            None if if_exists => {}
            None => return Err(WeirError::undefined_table(&name)),
        }
    }
    for relation in doomed {
        match relation.def.kind {
            RelationKind::MaterializedView => {
                fe.streaming().stop_view(relation.def.id).await;
                fe.catalog().status().forget_view(&relation.def.name);
            }
            RelationKind::Sink => fe.streaming().stop_sink(relation.def.id).await,
            RelationKind::Table if relation.def.connector.is_some() => fe.streaming().stop_source(relation.def.id),
            RelationKind::Table | RelationKind::View | RelationKind::Index => {}
        }
        // Its writers (and an index being built on it, and its operator state writes in
        // flight) finish first.
        let _writers = relation.write_lock.lock().await;
        let _state_writes = relation.state_writes.write().await;
        fe.catalog().drop_relation_id(relation.def.id)?;
    }
    Ok(StatementResult::command(tag))
}

pub fn kind_name(kind: RelationKind) -> &'static str {
    match kind {
        RelationKind::Table => "table",
        RelationKind::MaterializedView => "materialized view",
        RelationKind::Sink => "sink",
        RelationKind::View => "view",
        RelationKind::Index => "index",
    }
}
