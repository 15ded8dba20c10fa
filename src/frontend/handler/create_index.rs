//! `CREATE INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON relation [USING btree]
//! (column [ASC | DESC] [NULLS FIRST | LAST], ...) [INCLUDE (column, ...)]` over a table or a
//! materialized view, and `DROP INDEX [IF EXISTS] name [, ...]`.
//!
//! The index holds the indexed columns and the `INCLUDE`d ones, or every column of the relation
//! when `INCLUDE` is not given (as RisingWave's indexes do), and always a table's primary key,
//! so reads that need only those columns are answered from it alone (`catalog::index`). A name left out is made as Postgres
//! makes it (`t_a_b_idx`, then `t_a_b_idx1`, ...). What an index cannot be here is refused with
//! 0A000: UNIQUE, partial (`WHERE`), over expressions, or another access method than btree.
//! `CONCURRENTLY` builds the index as a plain CREATE INDEX does, holding the relation's writers
//! until it is filled. Both statements complete with a checkpoint, as all DDL does.

use datafusion::sql::sqlparser::ast::{Expr, IndexType, Statement};

use super::{identifier, relation_name};
use crate::catalog::index::{self, IndexRequest};
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, StatementResult};

pub async fn handle(fe: &Frontend, statement: Statement) -> Result<StatementResult> {
    let Statement::CreateIndex(create) = &statement else { unreachable!("dispatched on CreateIndex") };
    let unsupported = |what: &str| Err(WeirError::unsupported(format!("{what} is not supported")));
    if create.unique {
        return unsupported("CREATE UNIQUE INDEX");
    }
    if create.predicate.is_some() {
        return unsupported("a partial index (CREATE INDEX ... WHERE)");
    }
    if !matches!(&create.using, None | Some(IndexType::BTree)) {
        return unsupported("an index access method other than btree");
    }
    if !create.with.is_empty() || create.nulls_distinct.is_some() {
        return unsupported("index storage options");
    }
    let on_name = relation_name(&create.table_name)?;
    let on = fe.catalog().get(&on_name).ok_or_else(|| WeirError::undefined_table(&on_name))?;
    let column_of = |name: &str| {
        on.schema
            .index_of(name)
            .map_err(|_| WeirError::new(SqlState::UNDEFINED_COLUMN, format!("column \"{name}\" does not exist")))
    };
    let mut keys = Vec::with_capacity(create.columns.len());
    for column in &create.columns {
        let name = match &column.column.expr {
            Expr::Identifier(ident) => identifier(ident),
            other => return unsupported(&format!("an index over an expression ({other})")),
        };
        let index = column_of(&name)?;
        if keys.contains(&index) {
            return Err(WeirError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{name}\" appears twice in the index"),
            ));
        }
        keys.push(index);
    }
    let mut columns = keys.clone();
    if create.include.is_empty() {
        columns.extend((0..on.schema.fields().len()).filter(|c| !keys.contains(c)));
    } else {
        for ident in &create.include {
            let index = column_of(&identifier(ident))?;
            if !columns.contains(&index) {
                columns.push(index);
            }
        }
    }
    // The primary key too, as Postgres's index leads to the row: a query reading the key
    // beside the included columns is answered from the index.
    for &key in &on.def.primary_key {
        if !columns.contains(&key) {
            columns.push(key);
        }
    }
    let name = match &create.name {
        Some(name) => relation_name(name)?,
        None => {
            let names: Vec<&str> = keys.iter().map(|&c| on.schema.field(c).name().as_str()).collect();
            let base = format!("{}_{}_idx", on.def.name, names.join("_"));
            (0..)
                .map(|n| if n == 0 { base.clone() } else { format!("{base}{n}") })
                .find(|candidate| !fe.catalog().name_taken(candidate))
                .expect("a free name")
        }
    };
    let request = IndexRequest { name, definition: statement.to_string(), on, key_columns: keys.len(), columns };
    index::create(fe.catalog(), request, create.if_not_exists).await?;
    Ok(StatementResult::command("CREATE INDEX"))
}

/// `DROP INDEX [IF EXISTS] name [, ...]`: every name is checked before any is dropped.
pub async fn drop(fe: &Frontend, names: Vec<String>, if_exists: bool) -> Result<StatementResult> {
    for name in &names {
        match fe.catalog().get(name) {
            Some(r) if r.def.kind != crate::catalog::RelationKind::Index => {
                return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("\"{name}\" is not an index"))
                    .with_hint(format!(
                        "Use DROP {} to remove it.",
                        super::drop::kind_name(r.def.kind).to_uppercase()
                    )));
            }
            Some(_) => {}
            None if if_exists => {}
            None => {
                return Err(WeirError::new(SqlState::UNDEFINED_OBJECT, format!("index \"{name}\" does not exist")));
            }
        }
    }
    for name in &names {
        index::drop_index(fe.catalog(), name, if_exists).await?;
    }
    Ok(StatementResult::command("DROP INDEX"))
}
