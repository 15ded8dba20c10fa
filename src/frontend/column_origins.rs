//! Which relation column each result column of a query is, when it is one unchanged: what
//! Postgres puts in RowDescription (the table's OID and the column's number, which pgjdbc's
//! `ResultSetMetaData`, Metabase and DBeaver read to tie result columns to tables) and how a
//! declared type (`VARCHAR(20)`) reaches a result column or a view's column.
//!
//! A result column has an origin when it is a column reference all the way down to a scan of a
//! Weir relation: through projections (aliases too), filters, sorts, limits, DISTINCT, subquery
//! aliases, the group-by columns of an aggregate, and either side of a join. Anything computed
//! (an expression, a cast, an aggregate, a UNION) has none, as in Postgres.
//!
//! A plain view is its query: DataFusion plans it into the query that reads it, so its columns
//! are the relations' it reads, as Postgres reports them too.
//!
//! Pure functions over a DataFusion logical plan. Called by the query handler (RowDescription) and by CREATE VIEW, CREATE
//! MATERIALIZED VIEW and CREATE TABLE AS (declared types of the new relation's columns).

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan};

use crate::catalog::provider::RelationTable;
use crate::catalog::Relation;
use crate::types::pg_type::DeclaredType;

/// A relation's column: the relation and the column's index in its user columns.
#[derive(Clone)]
pub struct ColumnOrigin {
    pub relation: Arc<Relation>,
    pub index: usize,
}

impl ColumnOrigin {
    /// The column's declared type, if it has one.
    pub fn declared_type(&self) -> Option<DeclaredType> {
        self.relation.declared_type(self.index)
    }
}

/// The origin of each of `plan`'s output columns.
pub fn column_origins(plan: &LogicalPlan) -> Vec<Option<ColumnOrigin>> {
    (0..plan.schema().fields().len()).map(|i| origin(plan, i)).collect()
}

/// The origin of output column `index` of `plan`.
fn origin(plan: &LogicalPlan, index: usize) -> Option<ColumnOrigin> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let name = scan.projected_schema.fields().get(index)?.name();
            let provider = source_as_provider(&scan.source).ok()?;
            let table = (provider.as_ref() as &dyn std::any::Any).downcast_ref::<RelationTable>()?;
            let relation = Arc::clone(table.relation());
            let index = relation.schema.index_of(name).ok()?;
            Some(ColumnOrigin { relation, index })
        }
        LogicalPlan::Projection(projection) => {
            let input = projection.input.as_ref();
            reference(input, projection.expr.get(index)?)
        }
        LogicalPlan::Aggregate(aggregate) => {
            // Group-by columns come first; the aggregates after them are computed.
            let input = aggregate.input.as_ref();
            reference(input, aggregate.group_expr.get(index)?)
        }
        LogicalPlan::Join(join) => {
            let left = join.left.schema().fields().len();
            match join.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti => origin(&join.left, index),
                JoinType::RightSemi | JoinType::RightAnti => origin(&join.right, index),
                // The mark column after one side's columns is computed.
                JoinType::LeftMark if index < left => origin(&join.left, index),
                JoinType::RightMark if index < join.right.schema().fields().len() => origin(&join.right, index),
                JoinType::LeftMark | JoinType::RightMark => None,
                _ if index < left => origin(&join.left, index),
                _ => origin(&join.right, index - left),
            }
        }
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Repartition(_)
        | LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(_)) => origin(plan.inputs().first()?, index),
        // A window adds its columns after its input's.
        LogicalPlan::Window(window) if index < window.input.schema().fields().len() => origin(&window.input, index),
        _ => None,
    }
}

/// The origin of `expr` over `input`'s columns, when it is a column (perhaps aliased).
fn reference(input: &LogicalPlan, expr: &Expr) -> Option<ColumnOrigin> {
    match expr {
        Expr::Alias(alias) => reference(input, &alias.expr),
        Expr::Column(column) => origin(input, input.schema().index_of_column(column).ok()?),
        _ => None,
    }
}

/// Field metadata keys RowDescription is made from (`server::encode`).
pub const TABLE_OID_KEY: &str = "weir.table_oid";
pub const ATTNUM_KEY: &str = "weir.attnum";

/// `schema` with each column's origin (table OID and column number) and declared type noted,
/// for RowDescription. A declared type is kept only while the column still has a type that
/// carries it (a string for `VARCHAR`).
pub fn annotate(schema: &SchemaRef, origins: &[Option<ColumnOrigin>]) -> SchemaRef {
    if origins.iter().all(Option::is_none) {
        return Arc::clone(schema);
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(origins.iter().chain(std::iter::repeat(&None)))
        .map(|(field, origin)| {
            let mut field = field.as_ref().clone();
            if let Some(origin) = origin {
                let mut metadata = field.metadata().clone();
                metadata.insert(TABLE_OID_KEY.to_string(), origin.relation.oid().to_string());
                metadata.insert(ATTNUM_KEY.to_string(), (origin.index + 1).to_string());
                field = field.with_metadata(metadata);
                if let Some(declared) = origin.declared_type().filter(|d| d.fits(field.data_type())) {
                    field = declared.on(field);
                }
            }
            field
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `schema`, a new relation's columns made by `plan`, with the declared types of the columns it
/// takes unchanged from other relations (a view of a `VARCHAR(20)` column is `VARCHAR(20)`).
pub fn with_declared_types(plan: &LogicalPlan, schema: Schema) -> Schema {
    let origins = column_origins(plan);
    DeclaredType::declare(schema, |i, field| {
        origins.get(i)?.as_ref()?.declared_type().filter(|d| d.fits(field.data_type()))
    })
}
