//! `INSERT`, `UPDATE` and `DELETE ... RETURNING`: the statement runs as it would without the
//! clause, inside a transaction (the session's block, or one of its own committed after it),
//! and the RETURNING list is evaluated over the rows the statement wrote to its table: the new
//! rows of an INSERT or UPDATE, the old rows of a DELETE, as the transaction recorded them
//! (`catalog::transaction`). So the rows returned are exactly the rows changed, whatever
//! another session does meanwhile (the statement holds the table's writer lock until the
//! transaction ends). The command tag is the statement's (`UPDATE 2`), as in PostgreSQL.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::sql::sqlparser::ast::{self, SelectItem, Statement};

use crate::catalog::transaction::Transaction;
use crate::catalog::Relation;
use crate::error::{Result, WeirError};
use crate::frontend::{Frontend, Session, StatementDescription, StatementResult};

/// A DML statement with RETURNING, taken apart.
struct Returning {
    /// The statement without the clause.
    statement: Statement,
    items: Vec<SelectItem>,
    table: ast::ObjectName,
    /// The name the items may qualify columns by (the table's alias, else its name).
    alias: Option<ast::Ident>,
    /// Which rows the items read: the new ones (INSERT, UPDATE) or the old (DELETE).
    new_rows: bool,
    tag: &'static str,
}

/// `statement` taken apart, if it is a DML statement with RETURNING.
fn split(statement: &Statement) -> Option<Returning> {
    let mut stripped = statement.clone();
    let (items, table, alias, new_rows, tag) = match &mut stripped {
        Statement::Insert(insert) => {
            let ast::TableObject::TableName(name) = &insert.table else { return None };
            let alias = insert.table_alias.as_ref().map(|a| a.alias.clone());
            (insert.returning.take()?, name.clone(), alias, true, "INSERT 0")
        }
        Statement::Update(update) => {
            let ast::TableFactor::Table { name, alias, .. } = &update.table.relation else { return None };
            let alias = alias.as_ref().map(|a| a.name.clone());
            (update.returning.take()?, name.clone(), alias, true, "UPDATE")
        }
        Statement::Delete(delete) => {
            let tables = match &delete.from {
                ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
            };
            let ast::TableFactor::Table { name, alias, .. } = &tables.first()?.relation else { return None };
            let (name, alias) = (name.clone(), alias.as_ref().map(|a| a.name.clone()));
            (delete.returning.take()?, name, alias, false, "DELETE")
        }
        _ => return None,
    };
    Some(Returning { statement: stripped, items, table, alias, new_rows, tag })
}

/// Whether `statement` is INSERT, UPDATE or DELETE with RETURNING.
pub fn has_returning(statement: &Statement) -> bool {
    match statement {
        Statement::Insert(i) => i.returning.is_some(),
        Statement::Update(u) => u.returning.is_some(),
        Statement::Delete(d) => d.returning.is_some(),
        _ => false,
    }
}

fn relation(fe: &Frontend, name: &ast::ObjectName) -> Result<Arc<Relation>> {
    let name = super::relation_name(name)?;
    fe.catalog().get(&name).ok_or_else(|| WeirError::undefined_table(&name))
}

/// The RETURNING list as a query over `from` (a table of the relation's columns, named as the
/// statement names it).
fn returning_query(returning: &Returning, from: &str) -> String {
    let items: Vec<String> = returning.items.iter().map(|i| i.to_string()).collect();
    let name = returning.alias.clone().or_else(|| returning.table.0.last().and_then(|p| p.as_ident()).cloned());
    let alias = name.map(|n| format!(" AS {n}")).unwrap_or_default();
    format!("SELECT {} FROM {from}{alias}", items.join(", "))
}

pub async fn handle(
    fe: &Frontend,
    session: &mut Session,
    statement: Statement,
    params: Option<datafusion::common::ParamValues>,
) -> Result<StatementResult> {
    let returning = split(&statement).ok_or_else(|| WeirError::internal("RETURNING without a DML statement"))?;
    let relation = relation(fe, &returning.table)?;
    // In the session's block, or in one of the statement's own.
    let own = session.transaction.current().is_none();
    if own {
        session.transaction.set(Transaction::begin(fe.catalog()));
    }
    let transaction = session.transaction.current().expect("a transaction");
    let mark = transaction.written();
    let ran = Box::pin(super::execute(fe, session, returning.statement.clone(), params)).await;
    let result = match ran {
        Ok(_) => rows(session, &returning, &relation, &transaction, mark).await,
        Err(e) => Err(e),
    };
    if own {
        let transaction = session.transaction.take().expect("the statement's own transaction");
        match &result {
            Ok(_) => transaction.commit().await?,
            Err(_) => transaction.end(),
        }
    }
    result
}

/// The RETURNING rows of what the statement wrote to `relation` after `mark`.
async fn rows(
    session: &Session,
    returning: &Returning,
    relation: &Arc<Relation>,
    transaction: &Transaction,
    mark: usize,
) -> Result<StatementResult> {
    let columns = relation.schema.fields().len();
    let schema = Arc::clone(&relation.schema);
    let mut written = Vec::new();
    for changes in transaction.changes_since(mark, relation.def.id) {
        let keep: Vec<u32> = (0..changes.num_rows())
            .filter(|&i| (changes.ops[i].sign() > 0) == returning.new_rows)
            .map(|i| i as u32)
            .collect();
        let taken = changes.take(&keep)?;
        let user: Vec<_> = taken.data.columns()[..columns].to_vec();
        written.push(RecordBatch::try_new(Arc::clone(&schema), user)?);
    }
    let batch = concat_batches(&schema, &written)?;
    // The items evaluated by DataFusion over the rows: the session's functions, and a catalog
    // holding the rows alone.
    let from = "weir_returning_rows";
    let table = datafusion::datasource::MemTable::try_new(Arc::clone(&schema), vec![vec![batch]])?;
    let local = datafusion::catalog::MemorySchemaProvider::new();
    datafusion::catalog::SchemaProvider::register_table(&local, from.to_string(), Arc::new(table))?;
    let catalog = datafusion::catalog::MemoryCatalogProvider::new();
    datafusion::catalog::CatalogProvider::register_schema(&catalog, "returning", Arc::new(local))?;
    let catalogs = Arc::new(datafusion::catalog::MemoryCatalogProviderList::new());
    datafusion::catalog::CatalogProviderList::register_catalog(
        catalogs.as_ref(),
        "returning".into(),
        Arc::new(catalog),
    );
    let state = datafusion::execution::SessionStateBuilder::new_from_existing(session.ctx.state())
        .with_catalog_list(catalogs)
        .build();
    let ctx = datafusion::prelude::SessionContext::new_with_state(state);
    let frame = ctx.sql(&returning_query(returning, &format!("returning.returning.{from}"))).await?;
    let planned = Arc::new(frame.clone().into_optimized_plan()?.schema().as_arrow().clone());
    let batches = frame.collect().await?;
    // The batches' own schema: the optimizer may have typed a column more narrowly.
    let out_schema = batches.first().map(|b| b.schema()).unwrap_or(planned);
    let batch = concat_batches(&out_schema, &batches)?;
    // The tag's row count is the rows returned: the rows changed.
    Ok(StatementResult::Returned { tag: returning.tag.to_string(), batch })
}

/// The columns `statement`'s RETURNING list gives, without running it.
pub async fn describe(fe: &Frontend, session: &mut Session, statement: &Statement) -> Result<StatementDescription> {
    let returning = split(statement).ok_or_else(|| WeirError::internal("RETURNING without a DML statement"))?;
    relation(fe, &returning.table)?;
    let name = super::relation_name(&returning.table)?;
    let frame =
        session.ctx.sql(&format!("{} WHERE false", returning_query(&returning, &format!("\"{name}\"")))).await?;
    // The statement's parameters, as without the clause; the columns as the rows will come
    // (typed by the analyzer rules: `1` is an int4).
    let mut described = Box::pin(super::describe(fe, session, &returning.statement)).await?;
    described.columns = Some(Arc::new(frame.into_optimized_plan()?.schema().as_arrow().clone()));
    Ok(described)
}
