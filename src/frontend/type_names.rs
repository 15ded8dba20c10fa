//! Postgres type names DataFusion's SQL planner does not know, rewritten in the parsed statement
//! to names it does:
//! - an array type by its `pg_type.typname` (`_int4`, `_text`: what drivers such as asyncpg
//!   write in casts, `$1::_int4`) becomes `int4[]`, in casts, where clients write them;
//! - the SQL standard's spellings that pg_dump, Hibernate and other tools write
//!   (`CHARACTER VARYING(n)`, `CHAR VARYING`, `CHARACTER(n)`, `DEC(p, s)`, `TIME(p)`, `name`)
//!   become the planner's (`VARCHAR(n)`, `CHAR(n)`, `DECIMAL(p, s)`, `TIME`, `TEXT`), in
//!   casts, column definitions and PREPARE's parameter types. The declared type (`VARCHAR(20)`'s
//!   20) is the same either way.
//!
//! Called by the parser (`frontend::parser`) on every statement.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, ArrayElemTypeDef, DataType, Expr};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Rewrites every cast to a type DataFusion does not know by that name. An array literal in
/// text cast to one (`'{1,2}'::_int4`) is then read as the compatibility parser reads
/// `'{1,2}'::int4[]`.
pub fn rewrite_type_names(statement: &mut ast::Statement) {
    let mut renamed = false;
    let _ = ast::visit_expressions_mut(statement, |expr| {
        if let Expr::Cast { data_type, .. } = expr {
            if let Some(known) = known_name(data_type) {
                *data_type = known;
                renamed = true;
            }
            respell(data_type);
        }
        ControlFlow::<()>::Continue(())
    });
    match statement {
        ast::Statement::CreateTable(create) => create.columns.iter_mut().for_each(|c| respell(&mut c.data_type)),
        ast::Statement::Prepare { data_types, .. } => data_types.iter_mut().for_each(respell),
        _ => {}
    }
    if renamed {
        use datafusion_pg_catalog::sql::rules::{FixArrayLiteral, SqlStatementRewriteRule};
        let taken = std::mem::replace(statement, ast::Statement::Commit { chain: false, end: false, modifier: None });
        *statement = FixArrayLiteral.rewrite(taken);
    }
}

/// `data_type` (an array's elements too) in the planner's spelling, where the SQL standard's
/// differs.
fn respell(data_type: &mut DataType) {
    let planner = match data_type {
        DataType::CharacterVarying(length) | DataType::CharVarying(length) => DataType::Varchar(*length),
        DataType::Character(length) => DataType::Char(*length),
        DataType::Dec(info) => DataType::Decimal(*info),
        // Times are kept to the microsecond whatever the precision asked.
        DataType::Time(Some(_), zone) => DataType::Time(None, zone.clone()),
        DataType::Custom(name, modifiers)
            if modifiers.is_empty()
                && name.0.len() == 1
                && name.0[0].as_ident().is_some_and(|i| i.value.eq_ignore_ascii_case("name")) =>
        {
            DataType::Text
        }
        DataType::Array(ArrayElemTypeDef::SquareBracket(element, _) | ArrayElemTypeDef::AngleBracket(element)) => {
            respell(element);
            return;
        }
        _ => return,
    };
    *data_type = planner;
}

/// `data_type` under a name the planner knows, if it has another one.
fn known_name(data_type: &DataType) -> Option<DataType> {
    let DataType::Custom(name, modifiers) = data_type else { return None };
    if !modifiers.is_empty() || name.0.len() > 2 {
        return None;
    }
    // `pg_catalog._int4` is `_int4`.
    let last = name.0.last()?.as_ident()?;
    if name.0.len() == 2 && !name.0[0].as_ident()?.value.eq_ignore_ascii_case("pg_catalog") {
        return None;
    }
    let element = last.value.strip_prefix('_')?;
    // Only a plain type name (letters, digits), parsed as a type: `_int4` -> `int4`.
    if element.is_empty() || !element.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let element = Parser::new(&PostgreSqlDialect {}).try_with_sql(element).ok()?.parse_data_type().ok()?;
    if matches!(element, DataType::Custom(..)) {
        return None;
    }
    Some(DataType::Array(ArrayElemTypeDef::SquareBracket(Box::new(element), None)))
}

/// `integer`, `pg_catalog.int4` and `INT4` all name `int4`.
pub fn normalize_type_name(name: &str) -> String {
    let n = name.trim().trim_start_matches("pg_catalog.").trim_matches('"').to_ascii_lowercase();
    let base = match n.as_str() {
        "integer" | "int" => "int4",
        "smallint" => "int2",
        "bigint" => "int8",
        "real" => "float4",
        "double precision" | "float" => "float8",
        "boolean" => "bool",
        "character varying" => "varchar",
        "character" | "char" => "bpchar",
        "timestamp without time zone" => "timestamp",
        "timestamp with time zone" => "timestamptz",
        "time without time zone" => "time",
        "time with time zone" => "timetz",
        "decimal" => "numeric",
        other => other,
    };
    base.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0);
        rewrite_type_names(&mut statement);
        statement.to_string()
    }

    #[test]
    fn array_typnames_become_arrays() {
        assert_eq!(rewritten("SELECT $1::_int4"), "SELECT $1::INT4[]");
        assert_eq!(rewritten("SELECT '{1,2}'::_int8"), "SELECT ARRAY[1, 2]::INT8[]");
        assert_eq!(rewritten("SELECT CAST(x AS pg_catalog._text)"), "SELECT CAST(x AS TEXT[])");
        // Unknown element types and other custom names are left for the planner to refuse.
        assert_eq!(rewritten("SELECT x::_nosuchtype"), "SELECT x::_nosuchtype");
        assert_eq!(rewritten("SELECT x::mytype"), "SELECT x::mytype");
    }

    #[test]
    fn standard_spellings_become_the_planners() {
        assert_eq!(
            rewritten("CREATE TABLE t (a CHARACTER VARYING(10), b CHAR VARYING, c CHARACTER(3), d DEC(10,2), e TIME(3), f name, g CHARACTER VARYING[])"),
            "CREATE TABLE t (a VARCHAR(10), b VARCHAR, c CHAR(3), d DECIMAL(10,2), e TIME, f TEXT, g VARCHAR[])"
        );
        assert_eq!(
            rewritten("SELECT CAST(x AS CHARACTER VARYING(5)), y::character(2)"),
            "SELECT CAST(x AS VARCHAR(5)), y::CHAR(2)"
        );
        assert_eq!(rewritten("PREPARE p (CHARACTER VARYING) AS SELECT $1"), "PREPARE p (VARCHAR) AS SELECT $1");
    }
}
