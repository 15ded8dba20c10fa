//! DataFusion, set up once for the server and cloned per session. This is the adapter between
//! Weir and DataFusion's session machinery: catalog wiring, `pg_catalog`, configuration and the
//! functions Postgres clients expect. A DataFusion upgrade should touch this file, the catalog
//! provider and the query handler, and nothing else.
//!
//! The template [`SessionState`] holds the catalog list (shared: relations created by one session
//! are visible to all), `pg_catalog` (from `datafusion-pg-catalog`, built as real relations over
//! the catalog), `information_schema` (DataFusion's own) and the functions registered here.
//! Each session gets its own copy of the state, so `SET TimeZone` in one does not leak into
//! another.
//!
//! `information_schema` is DataFusion's, wrapped: its `columns.ordinal_position` counts from 0,
//! the SQL standard and every client from 1, and its `columns.data_type` names Arrow types
//! where clients expect Postgres's names (`integer`, `timestamp without time zone`).

use std::sync::Arc;

use datafusion::optimizer::AnalyzerRule;

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::information_schema::InformationSchemaProvider;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider, SchemaProvider, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::{provider_as_source, ViewTable};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{col, lit, Expr, LogicalPlanBuilder};
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;

use super::pg_catalog::{self, WeirPgCatalog};
use super::session::SERVER_VERSION;
use crate::catalog::provider::WeirSchema;
use crate::catalog::{Catalog, DEFAULT_SCHEMA};
use crate::error::{Result, WeirError};

/// What `version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (Weir {}) on x86_64-pc-linux-gnu, a streaming database",
        env!("CARGO_PKG_VERSION")
    )
}

/// Builds the template session state every session starts from.
pub async fn template_state(catalog: Arc<Catalog>) -> Result<SessionState> {
    let database = catalog.database().to_string();
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(&database, DEFAULT_SCHEMA)
        .with_create_default_catalog_and_schema(false)
        // Our own information_schema (below) replaces DataFusion's built-in one.
        .with_information_schema(false)
        .with_target_partitions(2);
    let options = config.options_mut();
    options.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
    // A literal with a decimal point, or an integer past bigint, is numeric, as in Postgres
    // (`1.5` is not float8; `99999999999999999999` is not 1e+20).
    options.sql_parser.parse_float_as_decimal = true;
    options.execution.time_zone = Some("+00:00".to_string());
    // A scan that says it returns few rows (a key lookup: `catalog::scan`) is read on one task,
    // not spread over the partitions by a round-robin repartition.
    options.execution.use_row_number_estimates_to_optimize_partitioning = true;
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        // Integer literals are typed before DataFusion's rules (type coercion) see them.
        .with_analyzer_rules(
            [
                Arc::new(super::int4_literals::Int4Literals) as Arc<dyn AnalyzerRule + Send + Sync>,
                Arc::new(super::int4_literals::Int4Values),
            ]
            .into_iter()
            .chain(datafusion::optimizer::Analyzer::new().rules)
            .collect(),
        )
        .with_analyzer_rule(Arc::new(super::single_row::SingleRowSubqueries))
        .with_analyzer_rule(Arc::new(super::outer_conditions::LiftOuterConditions))
        .with_analyzer_rule(Arc::new(super::comparison_order::ColumnFirstComparisons))
        .with_analyzer_rule(Arc::new(super::checked_arithmetic::CheckedIntegerArithmetic))
        .with_analyzer_rule(Arc::new(super::bytea_input::ByteaInput))
        .with_analyzer_rule(Arc::new(super::text_casts::PostgresTextCasts))
        .with_analyzer_rule(Arc::new(super::jsonb_literals::JsonbLiterals { catalog: Arc::clone(&catalog) }))
        .with_analyzer_rule(Arc::new(super::postgres_intervals::PostgresIntervals))
        .with_analyzer_rule(Arc::new(super::numeric_arithmetic::PostgresNumeric))
        .build();
    let mut state = state;
    // `interval * 2` and the like, which DataFusion's planner refuses.
    datafusion::logical_expr::registry::FunctionRegistry::register_expr_planner(
        &mut state,
        Arc::new(super::interval_arithmetic::IntervalArithmetic),
    )?;
    let ctx = SessionContext::new_with_state(state);

    let db_catalog = Arc::new(MemoryCatalogProvider::new());
    let public = Arc::new(WeirSchema::new(Arc::clone(&catalog)));
    db_catalog
        .register_schema(DEFAULT_SCHEMA, Arc::clone(&public) as Arc<dyn SchemaProvider>)
        .map_err(WeirError::from)?;
    db_catalog
        .register_schema(crate::system::SCHEMA, Arc::new(crate::system::SystemSchema::new(Arc::clone(&catalog))))
        .map_err(WeirError::from)?;
    ctx.register_catalog(&database, Arc::clone(&db_catalog) as Arc<dyn CatalogProvider>);
    let information_schema = InformationSchema {
        inner: InformationSchemaProvider::new(ctx.state().catalog_list().clone()),
        catalog: Arc::clone(&catalog),
    };
    db_catalog.register_schema("information_schema", Arc::new(information_schema)).map_err(WeirError::from)?;

    datafusion_pg_catalog::setup_pg_catalog(&ctx, &database, EmptyContextProvider)
        .map_err(|e| WeirError::internal(format!("setting up pg_catalog: {e}")))?;
    let crate_pg_catalog = db_catalog.schema("pg_catalog").ok_or_else(|| WeirError::internal("pg_catalog missing"))?;
    db_catalog
        .register_schema("pg_catalog", Arc::new(WeirPgCatalog::new(crate_pg_catalog, Arc::clone(&catalog))))
        .map_err(WeirError::from)?;
    pg_catalog::register_functions(&ctx, pg_catalog::type_oids(&ctx).await?, &catalog);

    // Windows over relations (event time): TUMBLE, HOP and SESSION (catalog::windowed).
    ctx.register_udtf("tumble", Arc::new(crate::catalog::windowed::WindowFunction::tumble(Arc::clone(&catalog))));
    ctx.register_udtf("hop", Arc::new(crate::catalog::windowed::WindowFunction::hop(Arc::clone(&catalog))));
    ctx.register_udtf("session", Arc::new(crate::catalog::windowed::WindowFunction::session(Arc::clone(&catalog))));
    ctx.register_udtf("cumulate", Arc::new(crate::catalog::windowed::WindowFunction::cumulate(Arc::clone(&catalog))));

    let version = version_string();
    ctx.register_udf(create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(version.clone()))))),
    ));
    // PostgreSQL's `variance` is the sample variance, DataFusion's `var`.
    let var_samp = datafusion::functions_aggregate::variance::var_samp_udaf();
    ctx.register_udaf(var_samp.as_ref().clone().with_aliases(["variance"]));
    ctx.register_udaf(super::ordered_set_aggregates::percentile_disc());
    ctx.register_udaf(super::ordered_set_aggregates::mode_udaf());
    // Plain views are planned with this state (every function and schema registered above).
    let planner_state = ctx.state();
    public.set_view_planner(Arc::new(move |relation| {
        let state = planner_state.clone();
        Box::pin(async move { plan_plain_view(&state, &relation).await })
    }));
    Ok(ctx.state())
}

/// A plain view's stored query (`CREATE VIEW ... AS query`) as a plan whose columns are the
/// view's (a column list after its name renames them).
async fn plan_plain_view(
    state: &SessionState,
    relation: &crate::catalog::Relation,
) -> datafusion::error::Result<datafusion::logical_expr::LogicalPlan> {
    use datafusion::sql::sqlparser::ast::Statement as Ast;
    let definition = &relation.def.definition;
    let statement = super::parser::SqlParser::new()
        .parse(definition)
        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?
        .pop();
    let Some(super::parser::Statement::Sql(Ast::CreateView(view))) = statement else {
        return datafusion::common::internal_err!("view \"{}\" is not stored as CREATE VIEW", relation.def.name);
    };
    let mut query = view.query;
    super::column_names::name_columns(&mut query);
    let plan =
        state.statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(Ast::Query(query)))).await?;
    let columns: Vec<datafusion::logical_expr::Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .zip(relation.schema.fields())
        .map(|(c, f)| datafusion::logical_expr::Expr::Column(c).alias(f.name()))
        .collect();
    datafusion::logical_expr::LogicalPlanBuilder::from(plan).project(columns)?.build()
}

/// How a materialized view's query is planned: by the rules it was made with, so that planning
/// it again at a start gives the columns and types its stored state has
/// (`RelationDef::int4_literals`, `RelationDef::planner_revision`). Queries use [`CURRENT`].
///
/// [`CURRENT`]: PlanningRules::CURRENT
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanningRules {
    /// `1` is int4 (else int8).
    pub int4_literals: bool,
    /// `1.5` and integers past bigint are numeric (else float8).
    pub numeric_literals: bool,
    /// Unaliased columns of subqueries, CTEs and UNION branches get Postgres's names (else
    /// DataFusion's, `count(*)`).
    pub inner_column_names: bool,
    /// Casts of timestamps, times, floats and intervals to text write them as Postgres does
    /// (`text_casts`; else as Arrow does: `2026-01-01T00:00:01`).
    pub postgres_text_casts: bool,
    /// Intervals compare and sort as one number and `timestamp - timestamp` is days and a rest
    /// (`postgres_intervals`; else field by field, and a duration).
    pub postgres_intervals: bool,
    /// Decimal `+ - * / %` in 256 bits with PostgreSQL's result scales (`numeric_arithmetic`;
    /// else Arrow's kernels and types).
    pub postgres_numeric: bool,
    /// A join planned with NULLs equal (`IS NOT DISTINCT FROM`, and DataFusion's INTERSECT and
    /// EXCEPT) matches NULL keys in a view (else they match nothing, as views made before did:
    /// their stored join state holds no NULL keys).
    pub null_safe_joins: bool,
    /// A `VALUES` column of integer literals that fit is int4 (`int4_literals::Int4Values`; else int8).
    pub int4_values: bool,
    /// A jsonb value compared with a string literal compares as jsonb (`jsonb_literals`; else as
    /// text, which `{"a":1}` and the stored `{"a": 1}` are not).
    pub jsonb_literals: bool,
}

impl PlanningRules {
    /// The revision of the rules views made now are recorded with.
    pub const REVISION: u32 = 5;

    /// The rules of this version.
    pub const CURRENT: PlanningRules = PlanningRules {
        int4_literals: true,
        numeric_literals: true,
        inner_column_names: true,
        postgres_text_casts: true,
        postgres_intervals: true,
        postgres_numeric: true,
        null_safe_joins: true,
        int4_values: true,
        jsonb_literals: true,
    };

    pub fn of(def: &crate::catalog::RelationDef) -> PlanningRules {
        PlanningRules {
            int4_literals: def.int4_literals,
            numeric_literals: def.planner_revision >= 1,
            inner_column_names: def.planner_revision >= 1,
            postgres_text_casts: def.planner_revision >= 2,
            postgres_intervals: def.planner_revision >= 3,
            postgres_numeric: def.planner_revision >= 3,
            null_safe_joins: def.planner_revision >= 3,
            int4_values: def.planner_revision >= 4,
            jsonb_literals: def.planner_revision >= 5,
        }
    }

    /// `state` parsing literals by these rules.
    pub fn parsing_state(self, mut state: SessionState) -> SessionState {
        if !self.numeric_literals {
            state.config_mut().options_mut().sql_parser.parse_float_as_decimal = false;
        }
        state
    }
}

/// Optimizes a materialized view's plan: DataFusion's rules, except `eliminate_join`, which
/// turns an inner join whose other side is unique on the key into a semi join. That is the same
/// result, but a semi join with a condition on the other side's columns needs a different
/// incremental operator than the inner join Weir maintains; the inner join is kept. Scalar
/// subqueries become joins, correlated or not.
pub fn optimize_for_view(
    state: &SessionState,
    plan: &datafusion::logical_expr::LogicalPlan,
    planning: PlanningRules,
) -> Result<datafusion::logical_expr::LogicalPlan> {
    let rules = state.optimizers().iter().filter(|r| r.name() != "eliminate_join").cloned().collect();
    // A view made by an earlier version is planned as it was (`PlanningRules::of`).
    let left_out = |name: &str| {
        (!planning.int4_literals && name == super::int4_literals::Int4Literals.name())
            || (!planning.int4_values && name == super::int4_literals::Int4Values.name())
            || (!planning.postgres_text_casts && name == super::text_casts::PostgresTextCasts.name())
            || (!planning.jsonb_literals && name == super::jsonb_literals::NAME)
            || (!planning.postgres_intervals && name == super::postgres_intervals::PostgresIntervals.name())
            || (!planning.postgres_numeric && name == super::numeric_arithmetic::PostgresNumeric.name())
    };
    let analyzers = state.analyzer().rules.iter().filter(|r| !left_out(r.name())).cloned().collect();
    // A scalar subquery becomes a join with its one row, which a view maintains, also when it
    // is not correlated (DataFusion would run those once, before the query).
    let mut config = state.config().clone();
    config.options_mut().optimizer.enable_physical_uncorrelated_scalar_subquery = false;
    let view_state = SessionStateBuilder::new_from_existing(state.clone())
        .with_config(config)
        .with_optimizer_rules(rules)
        .with_analyzer_rules(analyzers);
    let optimized = view_state.build().optimize(plan)?;
    if planning.null_safe_joins {
        return Ok(optimized);
    }
    // A view made before NULL keys matched in views keeps joining as it did.
    use datafusion::common::tree_node::{Transformed, TransformedResult};
    let unsafe_joins = optimized.transform_up_with_subqueries(|node| match node {
        datafusion::logical_expr::LogicalPlan::Join(mut join)
            if join.null_equality == datafusion::common::NullEquality::NullEqualsNull =>
        {
            join.null_equality = datafusion::common::NullEquality::NullEqualsNothing;
            Ok(Transformed::yes(datafusion::logical_expr::LogicalPlan::Join(join)))
        }
        other => Ok(Transformed::no(other)),
    });
    Ok(unsafe_joins.data()?)
}

/// The session state UPDATE and DELETE run in: DataFusion's rules, except
/// `common_sub_expression_eliminate`. DataFusion hands a table's `update`/`delete_from` the
/// conditions of the plan's filters, and that rule moves a repeated condition
/// (`(c = 1 OR c = 1) AND ...`) into a projection below the filter, leaving the filter a
/// column (`__common_expr_1`) the table does not have.
pub fn state_for_dml(state: &SessionState) -> SessionState {
    let rules = state.optimizers().iter().filter(|r| r.name() != "common_sub_expression_eliminate").cloned().collect();
    SessionStateBuilder::new_from_existing(state.clone()).with_optimizer_rules(rules).build()
}

/// A session's own context, started from the template, knowing who its user is.
pub fn session_context(
    template: &SessionState,
    identity: Arc<crate::frontend::session::Identity>,
    catalog: &Arc<Catalog>,
) -> SessionContext {
    let mut state = SessionStateBuilder::new_from_existing(template.clone()).build();
    // The session's own transaction slot, where the table providers find its open transaction.
    state.config_mut().set_extension(Arc::new(crate::catalog::transaction::TransactionSlot::default()));
    // The session's own scan settings (`min_parallel_table_scan_size`), where the providers
    // read them.
    state.config_mut().set_extension(Arc::new(crate::catalog::scan::ScanSettings::default()));
    let ctx = SessionContext::new_with_state(state);
    // All four are the role statements run as (`SET ROLE`'s): the pg-compatibility parser
    // reads `current_user` as `session_user()`, so the two cannot differ (ADR 35).
    for name in ["current_user", "session_user", "user", "current_role"] {
        let identity = Arc::clone(&identity);
        ctx.register_udf(create_udf(
            name,
            vec![],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(identity.role()))))),
        ));
    }
    crate::frontend::authorize::register_privilege_functions(&ctx, identity, catalog);
    ctx
}

/// DataFusion's information_schema with 1-based `columns.ordinal_position` and Postgres type
/// names.
struct InformationSchema {
    inner: InformationSchemaProvider,
    catalog: Arc<Catalog>,
}

impl std::fmt::Debug for InformationSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InformationSchema")
    }
}

#[async_trait]
impl SchemaProvider for InformationSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.extend(KEY_TABLES.iter().map(|n| n.to_string()));
        names.push("table_privileges".to_string());
        names
    }

    async fn table(&self, name: &str) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        if KEY_TABLES.contains(&name) {
            return Ok(Some(Arc::new(primary_keys(&self.catalog, name)?)));
        }
        if name == "table_privileges" {
            return Ok(Some(Arc::new(super::pg_roles::table_privileges(&self.catalog)?)));
        }
        let table = self.inner.table(name).await?;
        match table {
            Some(columns) if name == "columns" => {
                let [column_type, column_length, column_udt] = pg_catalog::column_type_udfs(&self.catalog);
                let schema = columns.schema();
                let exprs: Vec<_> = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        if f.name() == "ordinal_position" {
                            datafusion::logical_expr::cast(col(f.name()) + lit(1u64), DataType::Int32)
                                .alias("ordinal_position")
                        } else if f.name() == "data_type" {
                            Expr::ScalarFunction(ScalarFunction::new_udf(
                                Arc::new(column_type.clone()),
                                vec![col("table_schema"), col("table_name"), col("column_name"), col(f.name())],
                            ))
                            .alias("data_type")
                        } else if f.name() == "character_maximum_length" {
                            let declared = Expr::ScalarFunction(ScalarFunction::new_udf(
                                Arc::new(column_length.clone()),
                                vec![col("table_schema"), col("table_name"), col("column_name")],
                            ));
                            datafusion::functions::expr_fn::coalesce(vec![
                                datafusion::logical_expr::cast(declared, f.data_type().clone()),
                                col(f.name()),
                            ])
                            .alias("character_maximum_length")
                        } else {
                            col(f.name())
                        }
                    })
                    .collect();
                // Columns of Postgres's view DataFusion's lacks (Metabase's and Grafana's column
                // queries read them): the type's name in pg_type, identity and generation.
                let udt = Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::new(column_udt),
                    vec![col("table_schema"), col("table_name"), col("column_name"), col("data_type")],
                ));
                let mut exprs = exprs;
                for (name, value) in [
                    ("udt_catalog", col("table_catalog")),
                    ("udt_schema", lit("pg_catalog")),
                    ("udt_name", udt),
                    ("is_identity", lit("NO")),
                    ("is_generated", lit("NEVER")),
                ] {
                    if schema.field_with_name(name).is_err() {
                        exprs.push(value.alias(name));
                    }
                }
                let plan =
                    LogicalPlanBuilder::scan("columns", provider_as_source(columns), None)?.project(exprs)?.build()?;
                Ok(Some(Arc::new(ViewTable::new(plan, None))))
            }
            // DataFusion lists every relation as a view; Postgres lists plain views only.
            Some(views) if name == "views" => {
                let plain: Vec<Expr> = self
                    .catalog
                    .relations()
                    .iter()
                    .filter(|r| r.def.kind == crate::catalog::RelationKind::View)
                    .map(|r| lit(r.def.name.clone()))
                    .collect();
                let only_plain =
                    col("table_schema").eq(lit(DEFAULT_SCHEMA)).and(col("table_name").in_list(plain, false));
                let plan =
                    LogicalPlanBuilder::scan("views", provider_as_source(views), None)?.filter(only_plain)?.build()?;
                Ok(Some(Arc::new(ViewTable::new(plan, None))))
            }
            other => Ok(other),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        KEY_TABLES.contains(&name) || name == "table_privileges" || self.inner.table_exist(name)
    }
}

/// The information_schema tables of constraints DataFusion lacks (Metabase's field sync and
/// most tools read primary keys from them).
const KEY_TABLES: [&str; 2] = ["table_constraints", "key_column_usage"];

/// `information_schema.table_constraints` or `key_column_usage` (`name`): each table's primary
/// key, named `<table>_pkey` as in pg_constraint; a row per key, or per key column.
fn primary_keys(catalog: &Catalog, name: &str) -> datafusion::error::Result<datafusion::datasource::MemTable> {
    use crate::catalog::Relation;
    use datafusion::arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema};
    let per_column = name == "key_column_usage";
    let rows: Vec<(Arc<Relation>, usize)> = catalog
        .relations()
        .into_iter()
        .filter(|r| !r.def.primary_key.is_empty())
        .flat_map(|r| {
            let n = if per_column { r.def.primary_key.len() } else { 1 };
            (0..n).map(move |i| (Arc::clone(&r), i))
        })
        .collect();
    let text = |f: &dyn Fn(&Relation, usize) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(r, i)| f(r, *i))))
    };
    let database = catalog.database();
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        ("constraint_catalog", text(&|_, _| database.to_string())),
        ("constraint_schema", text(&|_, _| DEFAULT_SCHEMA.to_string())),
        ("constraint_name", text(&|r, _| format!("{}_pkey", r.def.name))),
        ("table_catalog", text(&|_, _| database.to_string())),
        ("table_schema", text(&|_, _| DEFAULT_SCHEMA.to_string())),
        ("table_name", text(&|r, _| r.def.name.clone())),
    ];
    if per_column {
        columns.push(("column_name", text(&|r, i| r.schema.field(r.def.primary_key[i]).name().clone())));
        let positions = rows.iter().map(|(_, i)| *i as i32 + 1);
        columns.push(("ordinal_position", Arc::new(Int32Array::from_iter_values(positions))));
        columns.push(("position_in_unique_constraint", Arc::new(Int32Array::new_null(rows.len()))));
    } else {
        for (column, value) in [
            ("constraint_type", "PRIMARY KEY"),
            ("is_deferrable", "NO"),
            ("initially_deferred", "NO"),
            ("enforced", "YES"),
        ] {
            columns.push((column, text(&|_, _| value.to_string())));
        }
    }
    let schema = Arc::new(Schema::new(
        columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns.into_iter().map(|(_, a)| a).collect())?;
    datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::common::tree_node::TreeNode;
    use datafusion::common::NullEquality;
    use datafusion::logical_expr::LogicalPlan;

    /// The null equality of every join in `plan`.
    fn join_nulls(plan: &LogicalPlan) -> Vec<NullEquality> {
        let mut found = Vec::new();
        plan.apply(|node| {
            if let LogicalPlan::Join(j) = node {
                found.push(j.null_equality);
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        found
    }

    /// A view made before NULL join keys matched in views (planner revision below 3) keeps
    /// them unequal: its join state holds none.
    #[tokio::test]
    async fn views_made_before_revision_3_keep_null_join_keys_unequal() {
        let ctx = SessionContext::new();
        for name in ["l", "r"] {
            let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int32, true)]));
            ctx.register_table(
                name,
                Arc::new(datafusion::datasource::MemTable::try_new(schema, vec![vec![]]).unwrap()),
            )
            .unwrap();
        }
        let plan =
            ctx.state().create_logical_plan("SELECT * FROM l JOIN r ON l.v IS NOT DISTINCT FROM r.v").await.unwrap();
        let current = optimize_for_view(&ctx.state(), &plan, PlanningRules::CURRENT).unwrap();
        assert_eq!(join_nulls(&current), vec![NullEquality::NullEqualsNull]);
        let old = PlanningRules { null_safe_joins: false, ..PlanningRules::CURRENT };
        let planned = optimize_for_view(&ctx.state(), &plan, old).unwrap();
        assert_eq!(join_nulls(&planned), vec![NullEquality::NullEqualsNothing]);
    }
}
