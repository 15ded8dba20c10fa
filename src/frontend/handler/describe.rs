//! `DESCRIBE name` and `SHOW COLUMNS FROM name`: one row per column with its Postgres type,
//! nullability and whether it is part of the primary key.

use std::sync::Arc;

use datafusion::arrow::array::{BooleanArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::sqlparser::ast::ObjectName;

use super::{relation_name, rows};
use crate::error::{Result, WeirError};
use crate::frontend::pg_catalog::sql_type_name;
use crate::frontend::{Frontend, StatementResult};

pub fn handle(fe: &Frontend, name: &ObjectName) -> Result<StatementResult> {
    let name = relation_name(name)?;
    let relation = fe.catalog().get(&name).ok_or_else(|| WeirError::undefined_table(&name))?;
    // The definition's columns carry their declared types (`character varying(20)`).
    let fields = relation.def.schema.fields();
    let names: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
    let types: Vec<String> = fields
        .iter()
        .map(|f| crate::types::pg_type::column_type_name(f).unwrap_or_else(|| sql_type_name(f.data_type())))
        .collect();
    let nullable: Vec<bool> = fields.iter().map(|f| f.is_nullable()).collect();
    let pk: Vec<bool> = (0..fields.len()).map(|i| relation.def.primary_key.contains(&i)).collect();
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
