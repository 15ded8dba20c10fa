//! `FROM HOP(bid, date_time, ...)` names its rows `bid`, as RisingWave and Flink read it: an
//! unaliased `TUMBLE`, `HOP`, `CUMULATE` or `SESSION` over a relation gets the relation's name as its
//! alias, so `bid.auction` in the select list means the window's column (DataFusion would call
//! the scan `hop()`). Left alone where that name is taken in the statement already (`FROM
//! HOP(bid, ...) JOIN bid ...` keeps the function's own name). An AST rewrite, run by
//! [`super::rewrite`].

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, FunctionArg, FunctionArgExpr, Ident, TableAlias, TableFactor, Visit, VisitMut, Visitor, VisitorMut,
};

const WINDOW_FUNCTIONS: [&str; 4] = ["tumble", "hop", "cumulate", "session"];

/// The relation a window function call reads: its first argument, a (qualified) name.
fn windowed_relation(args: &[FunctionArg]) -> Option<Ident> {
    match args.first()? {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::Identifier(ident))) => Some(ident.clone()),
        FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::CompoundIdentifier(parts))) => parts.last().cloned(),
        _ => None,
    }
}

fn is_window_function(name: &ast::ObjectName) -> bool {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .is_some_and(|i| WINDOW_FUNCTIONS.contains(&i.value.to_ascii_lowercase().as_str()))
}

pub fn name_windows_by_relation(statement: &mut ast::Statement) {
    // The names tables and aliases already take in the statement.
    struct Taken(HashSet<String>);
    impl Visitor for Taken {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, args, alias, .. } = factor {
                if let Some(alias) = alias {
                    self.0.insert(alias.name.value.to_ascii_lowercase());
                } else if args.is_none() {
                    if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                        self.0.insert(last.value.to_ascii_lowercase());
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut taken = Taken(HashSet::new());
    let _ = Visit::visit(&*statement, &mut taken);

    struct Rewrite(HashSet<String>);
    impl VisitorMut for Rewrite {
        type Break = ();
        fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            let TableFactor::Table { name, args: Some(args), alias: alias @ None, .. } = factor else {
                return ControlFlow::Continue(());
            };
            if !is_window_function(name) {
                return ControlFlow::Continue(());
            }
            let Some(relation) = windowed_relation(&args.args) else { return ControlFlow::Continue(()) };
            if !self.0.contains(&relation.value.to_ascii_lowercase()) {
                *alias = Some(TableAlias { explicit: false, name: relation, columns: vec![], at: None });
            }
            ControlFlow::Continue(())
        }
    }
    // Two unaliased windows over one relation in one statement: neither takes its name.
    let mut windows: Vec<String> = Vec::new();
    struct Windows<'a>(&'a mut Vec<String>);
    impl Visitor for Windows<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, args: Some(args), alias: None, .. } = factor {
                if is_window_function(name) {
                    if let Some(relation) = windowed_relation(&args.args) {
                        self.0.push(relation.value.to_ascii_lowercase());
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = Visit::visit(&*statement, &mut Windows(&mut windows));
    let mut blocked = taken.0;
    for (i, w) in windows.iter().enumerate() {
        if windows[..i].contains(w) {
            blocked.insert(w.clone());
        }
    }
    let _ = VisitMut::visit(statement, &mut Rewrite(blocked));
}
