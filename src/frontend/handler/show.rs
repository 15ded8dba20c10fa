//! `SHOW TABLES`, `SHOW MATERIALIZED VIEWS`, `SHOW SINKS`, `SHOW <setting>`, `SHOW ALL`, and
//! `SHOW CREATE TABLE | SOURCE | VIEW | MATERIALIZED VIEW | SINK name` (the statement as
//! stored, secrets masked: [`crate::catalog::secrets`]).

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::sqlparser::ast::Ident;

use super::rows;
use crate::catalog::options::ConnectorOptions;
use crate::catalog::{secrets, RelationKind};
use crate::error::Result;
use crate::frontend::{Frontend, Session, StatementResult};

fn text_columns(names: &[&str], columns: Vec<Vec<String>>) -> Result<StatementResult> {
    let schema = Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::Utf8, false)).collect::<Vec<_>>()));
    let arrays = columns.into_iter().map(|c| Arc::new(StringArray::from(c)) as _).collect();
    rows(RecordBatch::try_new(schema, arrays)?)
}

fn names_of(fe: &Frontend, kind: RelationKind) -> Result<StatementResult> {
    let mut names: Vec<String> =
        fe.catalog().relations().iter().filter(|r| r.def.kind == kind).map(|r| r.def.name.clone()).collect();
    names.sort();
    text_columns(&["Name"], vec![names])
}

pub fn tables(fe: &Frontend) -> Result<StatementResult> {
    names_of(fe, RelationKind::Table)
}

pub fn materialized_views(fe: &Frontend) -> Result<StatementResult> {
    names_of(fe, RelationKind::MaterializedView)
}

pub fn views(fe: &Frontend) -> Result<StatementResult> {
    names_of(fe, RelationKind::View)
}

pub fn sinks(fe: &Frontend) -> Result<StatementResult> {
    names_of(fe, RelationKind::Sink)
}

/// `SHOW CREATE ... name` for a relation of one of `kinds`: its name and its definition with
/// secret option values and URL passwords masked; 42P01 when there is none of those kinds.
pub fn create(fe: &Frontend, name: &str, kinds: &[RelationKind]) -> Result<StatementResult> {
    let relation = fe
        .catalog()
        .get(name)
        .filter(|r| kinds.contains(&r.def.kind))
        .ok_or_else(|| crate::error::WeirError::undefined_table(name))?;
    let mut definition = secrets::redact_sql(&relation.def.definition).into_owned();
    if let (RelationKind::Table, Some(options)) = (relation.def.kind, &relation.def.connector) {
        definition.push_str(&connector_clauses(options));
    }
    text_columns(&["Name", "Create Sql"], vec![vec![relation.def.name.clone()], vec![definition]])
}

/// A connector-fed table's ` WITH (...) [FORMAT f] [ENCODE e]`, secrets masked (a secret given
/// by reference shows its reference).
fn connector_clauses(options: &ConnectorOptions) -> String {
    let shown: Vec<String> = options
        .0
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "format" | "encode"))
        .map(|(key, value)| {
            let value = if secrets::is_secret(key) { secrets::REDACTED.into() } else { secrets::redact_urls(value) };
            format!("{key} = '{}'", value.replace('\'', "''"))
        })
        .collect();
    let mut out = format!(" WITH ({})", shown.join(", "));
    for clause in ["format", "encode"] {
        if let Some(value) = options.get(clause) {
            out.push_str(&format!(" {} {}", clause.to_ascii_uppercase(), value.to_ascii_uppercase()));
        }
    }
    out
}

pub fn variable(session: &Session, variable: &[Ident]) -> Result<StatementResult> {
    let words: Vec<&str> = variable.iter().map(|i| i.value.as_str()).collect();
    // `SHOW TIME ZONE` arrives as two words, `SHOW myapp.tenant` as two parts of one name.
    let spaced = words.join(" ").to_ascii_lowercase();
    let name = match spaced.as_str() {
        "time zone" | "transaction isolation level" | "session authorization" => spaced.clone(),
        _ => words.join("."),
    };
    if name.eq_ignore_ascii_case("all") {
        let all = session.all();
        let (mut names, mut values, mut descriptions) = (vec![], vec![], vec![]);
        for (n, v, d) in all {
            names.push(n);
            values.push(v);
            descriptions.push(d);
        }
        return text_columns(&["name", "setting", "description"], vec![names, values, descriptions]);
    }
    let name = match name.to_ascii_lowercase().as_str() {
        "time zone" => "TimeZone".to_string(),
        "transaction isolation level" => "transaction_isolation".to_string(),
        "session authorization" => "session_authorization".to_string(),
        _ => name,
    };
    let value = session.get(&name)?;
    text_columns(&[name.to_ascii_lowercase().as_str()], vec![vec![value]])
}
