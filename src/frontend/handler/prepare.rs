//! SQL-level prepared statements: `PREPARE name [(type, ...)] AS statement`, `EXECUTE name
//! [(value, ...)]`, `DEALLOCATE [PREPARE] name | ALL`, as psql scripts and some drivers use
//! them (the extended protocol's Parse/Bind/Execute is the other way in, in `server`).
//!
//! A prepared statement is kept in its session by name, as parsed. EXECUTE evaluates its
//! arguments (constants, each cast to the declared type where PREPARE gave one) and runs the
//! statement with them as `$1..$n`, through the same path as the extended protocol, so it
//! shares that path's kept plans and key lookups. Names are unique per session (42P05 when
//! taken, 26000 when unknown).

use datafusion::arrow::array::Array;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::sql::sqlparser::ast::{DataType, Expr, Ident, Statement};

use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, Session, StatementResult};

/// A statement kept by `PREPARE`.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub statement: Statement,
    /// The declared parameter types, by position.
    pub types: Vec<DataType>,
}

pub fn name_of(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_ascii_lowercase(),
    }
}

/// `PREPARE name [(types)] AS statement`.
pub fn prepare(
    session: &mut Session,
    name: &Ident,
    types: &[DataType],
    statement: &Statement,
) -> Result<StatementResult> {
    if !matches!(statement, Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)) {
        return Err(WeirError::unsupported("PREPARE takes a SELECT, INSERT, UPDATE or DELETE"));
    }
    let name = name_of(name);
    if session.prepared.contains_key(&name) {
        return Err(WeirError::new(SqlState("42P05"), format!("prepared statement \"{name}\" already exists")));
    }
    session.prepared.insert(name, Prepared { statement: statement.clone(), types: types.to_vec() });
    Ok(StatementResult::command("PREPARE"))
}

/// `EXECUTE name [(values)]`.
pub async fn execute(
    fe: &Frontend,
    session: &mut Session,
    name: &Ident,
    arguments: &[Expr],
) -> Result<StatementResult> {
    let name = name_of(name);
    let Some(prepared) = session.prepared.get(&name).cloned() else {
        return Err(WeirError::new(SqlState("26000"), format!("prepared statement \"{name}\" does not exist")));
    };
    if !prepared.types.is_empty() && prepared.types.len() != arguments.len() {
        return Err(WeirError::new(
            SqlState("42601"),
            format!(
                "wrong number of parameters for prepared statement \"{name}\": {} expected, {} given",
                prepared.types.len(),
                arguments.len()
            ),
        ));
    }
    let values = if arguments.is_empty() {
        vec![]
    } else {
        // One row of the arguments, each cast to its declared type.
        let select: Vec<String> = arguments
            .iter()
            .enumerate()
            .map(|(i, a)| match prepared.types.get(i) {
                Some(t) => format!("CAST(({a}) AS {t})"),
                None => format!("({a})"),
            })
            .collect();
        let batches = session.ctx.sql(&format!("SELECT {}", select.join(", "))).await?.collect().await?;
        let row =
            batches.into_iter().find(|b| b.num_rows() > 0).ok_or_else(|| WeirError::internal("no argument row"))?;
        row.columns()
            .iter()
            .map(|c| Ok(ScalarAndMetadata::from(ScalarValue::try_from_array(c.as_ref() as &dyn Array, 0)?)))
            .collect::<Result<Vec<_>>>()?
    };
    Box::pin(super::execute(fe, session, prepared.statement, Some(ParamValues::List(values)))).await
}

/// `DEALLOCATE [PREPARE] name | ALL`.
pub fn deallocate(session: &mut Session, name: &Ident) -> Result<StatementResult> {
    let key = name_of(name);
    if name.quote_style.is_none() && key == "all" {
        session.prepared.clear();
    } else if session.prepared.remove(&key).is_none() {
        return Err(WeirError::new(SqlState("26000"), format!("prepared statement \"{key}\" does not exist")));
    }
    Ok(StatementResult::command("DEALLOCATE"))
}
