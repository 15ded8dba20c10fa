//! Relation names as PostgreSQL resolves them. An AST rewrite, run by [`super::rewrite`].

use datafusion::sql::sqlparser::ast;

/// Relation names DataFusion would not find as written: `TUMBLE(...)`, `Hop(...)`,
/// `SESSION(...)` in FROM as the registered table functions (DataFusion looks table functions
/// up by their name as written), and `pg_indexes` in `pg_catalog` (always on the search path;
/// the compatibility parser qualifies only the catalog relations it knows).
pub fn resolve_relation_names(statement: &mut ast::Statement) {
    use datafusion::sql::sqlparser::ast::{visit_relations_mut, Ident, ObjectNamePart};
    use std::ops::ControlFlow;
    let _ = visit_relations_mut(statement, |name| {
        if let [ObjectNamePart::Identifier(ident)] = name.0.as_mut_slice() {
            let lower = ident.value.to_ascii_lowercase();
            if ident.quote_style.is_none() && matches!(lower.as_str(), "tumble" | "hop" | "cumulate" | "session") {
                ident.value = lower;
            } else if ident.quote_style.is_none() && lower == "pg_indexes" {
                name.0.insert(0, ObjectNamePart::Identifier(Ident::new("pg_catalog")));
            }
        }
        ControlFlow::<()>::Continue(())
    });
}
