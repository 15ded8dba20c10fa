//! `DROP TABLE [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`.

use datafusion::sql::sqlparser::ast::{ObjectType, Statement};

use super::relation_name;
use crate::catalog::RelationKind;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, StatementResult};

pub fn handle(fe: &Frontend, statement: Statement) -> Result<StatementResult> {
    let Statement::Drop {
        object_type,
        if_exists,
        names,
        ..
    } = statement
    else {
        unreachable!("dispatched on Drop")
    };
    let (kind, tag) = match object_type {
        ObjectType::Table => (RelationKind::Table, "DROP TABLE"),
        other => {
            return Err(WeirError::unsupported(format!(
                "DROP {other} is not supported"
            )))
        }
    };
    // Check every name before dropping any, so a failing statement changes nothing.
    let mut doomed = Vec::new();
    for name in &names {
        let name = relation_name(name)?;
        match fe.catalog().get(&name) {
            Some(rel) if rel.def.kind != kind => {
                return Err(WeirError::new(
                    SqlState::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not a {}", kind_name(kind)),
                ))
            }
            Some(_) => doomed.push(name),
            None if if_exists => {}
            None => return Err(WeirError::undefined_table(&name)),
        }
    }
    for name in doomed {
        fe.catalog().drop_relation(&name, true)?;
    }
    Ok(StatementResult::command(tag))
}

fn kind_name(kind: RelationKind) -> &'static str {
    match kind {
        RelationKind::Table => "table",
    }
}
