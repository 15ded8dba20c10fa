//! `DESCRIBE name` and `SHOW COLUMNS FROM name`: one row per column with its Postgres type,
//! nullability and whether it is part of the primary key.

use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::sqlparser::ast::ObjectName;

use super::{relation_name, rows};
use crate::error::{Result, WeirError};
use crate::frontend::{Frontend, StatementResult};

pub fn handle(fe: &Frontend, name: &ObjectName) -> Result<StatementResult> {
    let name = relation_name(name)?;
    let relation = fe
        .catalog()
        .get(&name)
        .ok_or_else(|| WeirError::undefined_table(&name))?;
    let fields = relation.schema.fields();
    let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
    let types: Vec<String> = fields
        .iter()
        .map(|f| sql_type_name(f.data_type()))
        .collect();
    let nullable: Vec<bool> = fields.iter().map(|f| f.is_nullable()).collect();
    let pk: Vec<bool> = (0..fields.len())
        .map(|i| relation.def.primary_key.contains(&i))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("Name", DataType::Utf8, false),
        Field::new("Type", DataType::Utf8, false),
        Field::new("Nullable", DataType::Boolean, false),
        Field::new("Primary Key", DataType::Boolean, false),
    ]));
    rows(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(StringArray::from(types)),
            Arc::new(BooleanArray::from(nullable)),
            Arc::new(BooleanArray::from(pk)),
        ],
    )?)
}

/// The SQL name Postgres would print for a column of this Arrow type.
pub fn sql_type_name(dt: &DataType) -> String {
    match dt {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "character varying".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".into(),
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", sql_type_name(f.data_type()))
        }
        other => other.to_string().to_lowercase(),
    }
}
