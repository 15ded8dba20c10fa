//! `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] name [(columns)] AS query`: a plain view, a stored
//! query run inside each query that reads it, as in Postgres (`catalog::provider` plans it at
//! each use and DataFusion inlines it). It holds no rows and no state and is never maintained:
//! reading it reads what it reads now; a materialized view over it is maintained over the
//! relations the view reads. Its columns get Postgres's names (`frontend::column_names`), a
//! column list renames the first ones, and two of one name are refused (42701). `OR REPLACE`
//! keeps the existing columns (names and types, in order) and may add more after them, as
//! Postgres allows, unless a materialized view or sink is maintained over it (2BP01: it keeps
//! what it was built from); a view may not read itself. The relations the query names, tables
//! windowed by TUMBLE / HOP / SESSION included, are the view's dependencies
//! ([`named_relations`]): they cannot be dropped while it exists.

use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, ObjectName, Query, Statement, TableFactor, Visitor,
};

use super::{query, relation_name};
use crate::catalog::RelationKind;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{column_names, Frontend, Session, StatementResult};
use crate::state::keys::TableId;

pub async fn handle(fe: &Frontend, session: &mut Session, statement: Statement) -> Result<StatementResult> {
    let Statement::CreateView(view) = &statement else { unreachable!("dispatched on CreateView") };
    let name = relation_name(&view.name)?;
    let existing = fe.catalog().get(&name);
    match &existing {
        Some(_) if view.if_not_exists => return Ok(StatementResult::command("CREATE VIEW")),
        Some(r) if view.or_replace && r.def.kind != RelationKind::View => {
            return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("\"{name}\" is not a view")))
        }
        Some(_) if !view.or_replace => {
            return Err(WeirError::new(SqlState::DUPLICATE_TABLE, format!("relation \"{name}\" already exists")))
        }
        _ => {}
    }
    let depends_on = named_relations(fe, &view.query);
    if let Some(old) = existing.as_ref() {
        // A materialized view or sink over it keeps what it was built from; the new query
        // would change what it reads after a restart.
        let maintained = fe.catalog().dependents(old.def.id);
        if let Some(m) =
            maintained.iter().find(|d| matches!(d.def.kind, RelationKind::MaterializedView | RelationKind::Sink))
        {
            return Err(WeirError::new(
                SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
                format!("cannot replace view \"{name}\": \"{}\" is maintained over it", m.def.name),
            )
            .with_hint(
                "Drop what is maintained over it first (DROP ... CASCADE), or create a view with another name.",
            ));
        }
        let loops = depends_on.contains(&old.def.id)
            || fe.catalog().dependents(old.def.id).iter().any(|d| depends_on.contains(&d.def.id));
        if loops {
            return Err(WeirError::new(SqlState("42P17"), format!("view \"{name}\" would read itself")));
        }
    }
    let (plan, names) = query::plan_named(session, Statement::Query(view.query.clone())).await?;
    let mut fields: Vec<Field> = query::analyzed_schema(session, &plan)
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    if let Some(names) = names {
        for (field, name) in fields.iter_mut().zip(names) {
            *field = field.clone().with_name(name);
        }
    }
    if view.columns.len() > fields.len() {
        return Err(WeirError::new(SqlState::SYNTAX_ERROR, "CREATE VIEW specifies more column names than columns"));
    }
    for (field, column) in fields.iter_mut().zip(&view.columns) {
        *field = field.clone().with_name(column_names::ident_name(&column.name));
    }
    let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
    column_names::refuse_repeated(&names)?;
    if let Some(old) = existing.as_ref() {
        for (i, old_field) in old.schema.fields().iter().enumerate() {
            match fields.get(i) {
                None => return Err(WeirError::new(SqlState("42P16"), "cannot drop columns from view")),
                Some(f) if f.name() != old_field.name() => {
                    return Err(WeirError::new(
                        SqlState("42P16"),
                        format!("cannot change name of view column \"{}\" to \"{}\"", old_field.name(), f.name()),
                    ))
                }
                Some(f) if f.data_type() != old_field.data_type() => {
                    return Err(WeirError::new(
                        SqlState("42P16"),
                        format!("cannot change data type of view column \"{}\"", f.name()),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    let schema = crate::frontend::column_origins::with_declared_types(&plan, Schema::new(fields));
    fe.catalog().create_plain_view(
        &name,
        &statement.to_string(),
        schema,
        depends_on,
        view.or_replace,
        &session.owner(),
    )?;
    Ok(StatementResult::command("CREATE VIEW"))
}

/// The relations of the catalog `query` names (tables, sources, views), by id, those windowed
/// by `TUMBLE(t, ...)` and the like included.
pub fn named_relations(fe: &Frontend, query: &Query) -> Vec<TableId> {
    use datafusion::sql::sqlparser::ast::Visit;
    let mut names = Names(Vec::new());
    let _ = query.visit(&mut names);
    let mut ids: Vec<TableId> = names
        .0
        .iter()
        .filter_map(|name| relation_name(name).ok().and_then(|n| fe.catalog().get(&n)))
        .map(|relation| relation.def.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The names a query reads from: its relations, and a table function's first argument (the
/// relation `TUMBLE(t, ...)` windows).
struct Names(Vec<ObjectName>);

impl Visitor for Names {
    type Break = ();

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> std::ops::ControlFlow<()> {
        self.0.push(relation.clone());
        std::ops::ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> std::ops::ControlFlow<()> {
        if let TableFactor::Table { args: Some(args), .. } = factor {
            if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(ident)))) = args.args.first() {
                self.0.push(ObjectName::from(vec![ident.clone()]));
            }
        }
        std::ops::ControlFlow::Continue(())
    }
}
