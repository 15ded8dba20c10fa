//! Postgres type names DataFusion's SQL planner does not know, rewritten in the parsed statement
//! to names it does: an array type by its `pg_type.typname` (`_int4`, `_text`: what drivers
//! such as asyncpg write in casts, `$1::_int4`) becomes `int4[]`. Only in casts, where clients
//! write them. Called by the parser (`frontend::parser`) on every statement.

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
        }
        ControlFlow::<()>::Continue(())
    });
    if renamed {
        use datafusion_pg_catalog::sql::rules::{FixArrayLiteral, SqlStatementRewriteRule};
        let taken = std::mem::replace(statement, ast::Statement::Commit { chain: false, end: false, modifier: None });
        *statement = FixArrayLiteral.rewrite(taken);
    }
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
}
