//! Rewrites of parsed statements, one per file, in the order [`rewrite`] applies them: forms
//! PostgreSQL accepts and clients send that DataFusion's planner does not take as written,
//! turned into equivalents it plans. Each is a visitor over the sqlparser AST; none sees text
//! (the parser's text-level steps, `system_time` and Grafana's `search_path` test, come before).
//!
//! Called by `frontend::parser` on every statement it parses.

pub mod catalog_idioms;
pub mod exists_in_select_lists;
pub mod functions_in_from;
pub mod relation_names;
pub mod series_in_select_lists;
pub mod unnest_in_from;
pub mod windows_named_by_relation;

use std::collections::HashSet;

use datafusion::sql::sqlparser::ast;

use crate::error::Result;

/// Applies every rewrite to `statement`. `table_functions` (lower-case names), given for
/// statements a session sends, turns on the rewrites of function calls and date patterns; a
/// stored definition parsed again was stored rewritten.
pub fn rewrite(statement: &mut ast::Statement, table_functions: Option<&HashSet<String>>) -> Result<()> {
    catalog_idioms::rewrite_catalog_idioms(statement);
    exists_in_select_lists::exists_in_select_lists(statement);
    relation_names::resolve_relation_names(statement);
    windows_named_by_relation::name_windows_by_relation(statement);
    super::interval_text::rewrite_interval_literals(statement);
    super::type_names::rewrite_type_names(statement);
    super::json_functions::rewrite_json_syntax(statement);
    super::bytea_input::rewrite_casts(statement);
    if let Some(table_functions) = table_functions {
        super::pg_functions::rewrite_datetime_patterns(statement);
        unnest_in_from::unnest_in_from(statement);
        functions_in_from::functions_in_from(statement, table_functions);
        series_in_select_lists::series_in_select_lists(statement)?;
    }
    Ok(())
}
