//! An analyzer rule for DataFusion: a jsonb value compared with a string literal
//! (`doc = '{"a":1}'`, `<>`, `IS [NOT] DISTINCT FROM`, `IN ('...', ...)`) compares as jsonb, as in
//! PostgreSQL, where the literal is of unknown type and takes the column's.
//!
//! Weir stores jsonb as text in jsonb's own form (`{"a": 1}`); compared as text, `{"a":1}` would
//! not equal it. The rule writes each such literal as jsonb writes it (`types::json`), so equal
//! documents compare equal however the literal was spaced or its keys ordered; a literal that is
//! not JSON is 22P02, as in PostgreSQL. A parameter in its place (`doc = $1`) is read by
//! `jsonb_in` as the statement runs. Ordering comparisons (`<`) are left as they are.
//! Registered by `df_context::template_state`; a view made before it is planned without it
//! (`PlanningRules::jsonb_literals`), so its stored rows and new ones agree.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Cast, InList};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

use crate::catalog::Catalog;
use crate::types::json::Json;

/// The rule; it finds jsonb columns by their relations' declared types in `catalog` (plans
/// carry Arrow types only).
pub struct JsonbLiterals {
    pub catalog: Arc<Catalog>,
}

impl std::fmt::Debug for JsonbLiterals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonbLiterals")
    }
}

/// The rule's name (what `PlanningRules` leaves out by).
pub const NAME: &str = "weir_jsonb_literals";

impl AnalyzerRule for JsonbLiterals {
    fn name(&self) -> &str {
        NAME
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        let mut jsonb = HashSet::new();
        self.collect(&plan, &mut jsonb)?;
        if jsonb.is_empty() {
            return Ok(plan);
        }
        plan.transform_up_with_subqueries(|node| {
            let schema = super::keep_names::input_schema(&node);
            super::keep_names::rewrite_expressions(node, |e| jsonb_comparison(e, &jsonb, schema.as_ref()))
        })
        .data()
    }
}

impl JsonbLiterals {
    /// The columns of `plan` and its subqueries that are a relation's jsonb columns, by the
    /// names scans, projections and aliases give them.
    fn collect(&self, plan: &LogicalPlan, out: &mut HashSet<Column>) -> Result<()> {
        for input in plan.inputs() {
            self.collect(input, out)?;
        }
        plan.apply_subqueries(|subquery| {
            self.collect(subquery, out)?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        match plan {
            LogicalPlan::TableScan(scan) => {
                let schema = scan.table_name.schema();
                if schema.is_none() || schema == Some(crate::catalog::DEFAULT_SCHEMA) {
                    if let Some(relation) = self.catalog.get(scan.table_name.table()) {
                        for (i, field) in relation.schema.fields().iter().enumerate() {
                            if relation.declared_type(i).is_some_and(|t| t.is_jsonb()) {
                                out.insert(Column::new(Some(scan.table_name.clone()), field.name()));
                            }
                        }
                    }
                }
            }
            // A jsonb column passed on, renamed or not (`doc AS d`).
            LogicalPlan::Projection(projection) => {
                for (i, e) in projection.expr.iter().enumerate() {
                    let inner = match e {
                        Expr::Alias(alias) => alias.expr.as_ref(),
                        other => other,
                    };
                    if is_jsonb(inner, out) {
                        let (qualifier, field) = projection.schema.qualified_field(i);
                        out.insert(Column::new(qualifier.cloned(), field.name()));
                    }
                }
            }
            LogicalPlan::SubqueryAlias(alias) => {
                for (qualifier, field) in alias.input.schema().iter() {
                    if out.contains(&Column::new(qualifier.cloned(), field.name())) {
                        out.insert(Column::new(Some(alias.alias.clone()), field.name()));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn is_jsonb(e: &Expr, jsonb: &HashSet<Column>) -> bool {
    match e {
        Expr::Column(c) => jsonb.contains(c),
        Expr::Cast(Cast { expr, .. }) => is_jsonb(expr, jsonb),
        _ => false,
    }
}

/// The literal as jsonb writes it, if `e` is a string literal (cast or not); a parameter
/// (`$1`, also a literal the simple protocol lifted) read by `jsonb_in` when it runs.
fn as_jsonb_literal(e: &Expr, column: &Expr, schema: &DFSchema) -> Result<Option<Expr>> {
    if matches!(e, Expr::Placeholder(_))
        || matches!(e, Expr::Cast(Cast { expr, .. }) if matches!(expr.as_ref(), Expr::Placeholder(_)))
    {
        static JSONB_IN: std::sync::LazyLock<Arc<datafusion::logical_expr::ScalarUDF>> =
            std::sync::LazyLock::new(|| {
                let udf = super::json_functions::json_udfs().into_iter().find(|u| u.name() == "jsonb_in");
                Arc::new(udf.expect("json_functions has jsonb_in"))
            });
        let call = datafusion::logical_expr::expr::ScalarFunction::new_udf(Arc::clone(&JSONB_IN), vec![e.clone()]);
        // jsonb_in gives Utf8; the column may be read as Utf8View (type coercion is over).
        let to = column.get_type(schema)?;
        return Ok(Some(datafusion::logical_expr::cast(Expr::ScalarFunction(call), to)));
    }
    let (value, cast) = match e {
        Expr::Literal(v, _) => (v, None),
        Expr::Cast(Cast { expr, field }) => match expr.as_ref() {
            Expr::Literal(v, _) => (v, Some(field.clone())),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let text = match value {
        ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t)) | ScalarValue::LargeUtf8(Some(t)) => t,
        _ => return Ok(None),
    };
    let written = Json::parse(text, "jsonb")?.to_jsonb().to_jsonb_text();
    let literal = match value {
        ScalarValue::Utf8View(_) => ScalarValue::Utf8View(Some(written)),
        ScalarValue::LargeUtf8(_) => ScalarValue::LargeUtf8(Some(written)),
        _ => ScalarValue::Utf8(Some(written)),
    };
    let literal = Expr::Literal(literal, None);
    Ok(Some(match cast {
        Some(field) => Expr::Cast(Cast { expr: Box::new(literal), field }),
        None => literal,
    }))
}

fn jsonb_comparison(e: Expr, jsonb: &HashSet<Column>, schema: &DFSchema) -> Result<Transformed<Expr>> {
    e.transform_up(|e| match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Eq | Operator::NotEq | Operator::IsDistinctFrom | Operator::IsNotDistinctFrom
            ) =>
        {
            if is_jsonb(&left, jsonb) {
                if let Some(literal) = as_jsonb_literal(&right, &left, schema)? {
                    return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr { left, op, right: Box::new(literal) })));
                }
            }
            if is_jsonb(&right, jsonb) {
                if let Some(literal) = as_jsonb_literal(&left, &right, schema)? {
                    return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr { left: Box::new(literal), op, right })));
                }
            }
            Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })))
        }
        Expr::InList(InList { expr, list, negated }) if is_jsonb(&expr, jsonb) => {
            let mut changed = false;
            let mut out = Vec::with_capacity(list.len());
            for item in list {
                match as_jsonb_literal(&item, &expr, schema)? {
                    Some(literal) => {
                        changed = true;
                        out.push(literal)
                    }
                    None => out.push(item),
                }
            }
            let e = Expr::InList(InList { expr, list: out, negated });
            Ok(if changed { Transformed::yes(e) } else { Transformed::no(e) })
        }
        other => Ok(Transformed::no(other)),
    })
}
