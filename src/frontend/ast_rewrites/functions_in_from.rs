//! Function calls in FROM as PostgreSQL reads them (what BI tools' catalog queries write). An
//! AST rewrite, run by [`super::rewrite`] on statements parsed for a session.

use datafusion::sql::sqlparser::ast;

/// Function calls in FROM as Postgres reads them, for what catalog queries of BI tools write
/// (Grafana's table list: `FROM generate_series(...) AS i, string_to_array(...) s`):
/// - a table function of one column with an alias and no column list names its column by the
///   alias (`generate_series(1, 3) AS i` has a column `i`; DataFusion calls it `value`), and
///   `generate_series` without an alias names it `generate_series`;
/// - any other function (not a table function) is a one-row table of its value, its column
///   named by the alias, or the function: `(SELECT f(...) AS s) AS s`.
pub fn functions_in_from(statement: &mut ast::Statement, table_functions: &std::collections::HashSet<String>) {
    use datafusion::sql::sqlparser::ast::{TableAlias, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    struct Rewrite<'a>(&'a std::collections::HashSet<String>);
    impl VisitorMut for Rewrite<'_> {
        type Break = ();
        fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            let TableFactor::Table {
                name, args: Some(args), alias, with_hints, version, with_ordinality, sample, ..
            } = factor
            else {
                return ControlFlow::Continue(());
            };
            let Some(ident) = name.0.last().and_then(|p| p.as_ident()).cloned() else {
                return ControlFlow::Continue(());
            };
            let function = ident.value.to_ascii_lowercase();
            if self.0.contains(&function) {
                // Unquoted, the name is folded to lower case, as Postgres folds it.
                if let Some(ast::ObjectNamePart::Identifier(written)) = name.0.last_mut() {
                    if written.quote_style.is_none() {
                        written.value = function.clone();
                    }
                }
                let column = |name: &ast::Ident| TableAliasColumnDef { name: name.clone(), data_type: None };
                match alias.as_mut() {
                    Some(alias)
                        if alias.columns.is_empty() && matches!(function.as_str(), "generate_series" | "range") =>
                    {
                        alias.columns = vec![column(&alias.name)];
                    }
                    // Unaliased, Postgres names the table and its column after the function.
                    None if function == "generate_series" => {
                        let name = ast::Ident::new(&function);
                        *alias = Some(TableAlias { explicit: true, columns: vec![column(&name)], name, at: None });
                    }
                    _ => {}
                }
                return ControlFlow::Continue(());
            }
            let plain = with_hints.is_empty()
                && version.is_none()
                && !*with_ordinality
                && sample.is_none()
                && args.settings.as_ref().is_none_or(|s| s.is_empty());
            if !plain {
                return ControlFlow::Continue(());
            }
            // The column is named by the alias, else by the function as written.
            let column = alias.as_ref().map(|a| a.name.clone()).unwrap_or(ident);
            let arguments: Vec<String> = args.args.iter().map(|a| a.to_string()).collect();
            let select = format!("SELECT {name}({}) AS {column}", arguments.join(", "));
            let Ok(mut parsed) = crate::frontend::dialect::parse(&select) else {
                return ControlFlow::Continue(());
            };
            let Some(ast::Statement::Query(query)) = parsed.pop() else { return ControlFlow::Continue(()) };
            let alias = alias.take().unwrap_or(TableAlias { explicit: true, name: column, columns: vec![], at: None });
            // Not lateral: DataFusion 55 cannot plan a lateral one-row projection that reads the
            // FROM items before it (`FROM t, upper(t.name) AS u`, which Postgres allows), and says
            // so more clearly when the column is simply not found.
            *factor = TableFactor::Derived { lateral: false, subquery: query, alias: Some(alias), sample: None };
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Rewrite(table_functions));
}
