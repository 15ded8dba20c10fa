//! A [`StatementResult`] as a pgwire [`Response`]: Arrow batches become DataRows in the text or
//! binary format each column was asked for (arrow-pg does the per-type encoding and picks the
//! type OIDs in RowDescription), commands become CommandComplete tags.
//!
//! Text output must read exactly as Postgres writes it, because people and tools compare it:
//! Postgres prints `2026-01-01 00:00:01` and `03:04:05.5`, trimming a zero fraction, where
//! arrow-pg always prints six digits, and it prints floats in their shortest exact form (`3`,
//! `1e+20`) where arrow-pg prints `3.0`. [`postgres_text`] renders such columns that go out as
//! text before encoding; binary output is untouched.

use std::sync::Arc;

use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::{stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::FieldFormat;
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};

use crate::error::WeirError;
use crate::frontend::StatementResult;

/// RowDescription fields for `schema`, each in the format the client asked for.
pub fn fields(schema: &Schema, format: &Format) -> PgWireResult<Vec<FieldInfo>> {
    // An `oid` / `regtype` marker describes an int4 column; a cast (`oid::regtype::text`) can
    // carry it onto a column of another type, whose values must not be announced as oids.
    let cleaned: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut f = f.as_ref().clone();
            if f.data_type() != &DataType::Int32 && f.metadata().contains_key(arrow_pg::datatypes::PG_OID_ALIAS_KEY) {
                let mut metadata = f.metadata().clone();
                metadata.remove(arrow_pg::datatypes::PG_OID_ALIAS_KEY);
                f = f.with_metadata(metadata);
            }
            f
        })
        .collect();
    let fields = arrow_schema_to_pg_fields(&Schema::new(cleaned), format, None)?;
    Ok(fields.into_iter().zip(schema.fields()).map(|(info, field)| with_origin(info, field)).collect())
}

/// `info` with what Postgres also says of a column taken unchanged from a relation
/// (`frontend::column_origins`): the table's OID, the column's number, its declared type
/// (`varchar(20)` for a column stored as text) and type modifier; and the declared type of a
/// computed column that has one (`jsonb` from `->`), if its values can carry it.
fn with_origin(info: FieldInfo, field: &Field) -> FieldInfo {
    use crate::frontend::column_origins::{ATTNUM_KEY, TABLE_OID_KEY};
    let metadata = field.metadata();
    let number = |key: &str| metadata.get(key).and_then(|v| v.parse::<i64>().ok());
    let declared = crate::types::pg_type::DeclaredType::of(field);
    let (table, attnum) = match (number(TABLE_OID_KEY), number(ATTNUM_KEY)) {
        (Some(table), Some(attnum)) => (Some(table as i32), Some(attnum as i16)),
        _ if declared.is_some_and(|d| d.fits(field.data_type())) => (None, None),
        _ => return info,
    };
    let datatype = declared.and_then(|d| Type::from_oid(d.oid)).unwrap_or_else(|| info.datatype().clone());
    FieldInfo::new(info.name().to_string(), table, attnum, datatype, info.format())
        .with_type_modifier(declared.map_or(-1, |d| d.typmod))
}

/// The RowDescription fields a connection made lately, by result schema and format: a
/// statement run again (a prepared statement's Describe and Execute, each time) describes its
/// columns once, where making them was 6.5 % of a prepared key lookup (`perf`, 2026-12-07).
/// Keyed by the schema's `Arc` (a cached plan hands out the same one each run), held here so
/// its address cannot be reused by another schema while it is a key. Each connection has one
/// (`server::session::SessionCell`).
#[derive(Default)]
pub struct FieldsCache(parking_lot::Mutex<Vec<KeptFields>>);

/// A result schema, a format, and the RowDescription fields they make.
type KeptFields = (SchemaRef, Format, Arc<Vec<FieldInfo>>);

/// Schemas a [`FieldsCache`] keeps, the least recently used dropped first.
const KEPT_FIELDS: usize = 8;

impl FieldsCache {
    /// [`fields`] of `schema` in `format`, made once while kept.
    pub fn fields(&self, schema: &SchemaRef, format: &Format) -> PgWireResult<Arc<Vec<FieldInfo>>> {
        let same_format = |kept: &Format| match (kept, format) {
            (Format::UnifiedText, Format::UnifiedText) | (Format::UnifiedBinary, Format::UnifiedBinary) => true,
            (Format::Individual(a), Format::Individual(b)) => a == b,
            _ => false,
        };
        let mut kept = self.0.lock();
        if let Some(at) = kept.iter().position(|(s, f, _)| Arc::ptr_eq(s, schema) && same_format(f)) {
            // The most recently used goes last, the least first (dropped first).
            let entry = kept.remove(at);
            let fields = Arc::clone(&entry.2);
            kept.push(entry);
            return Ok(fields);
        }
        let made = Arc::new(fields(schema, format)?);
        if kept.len() >= KEPT_FIELDS {
            kept.remove(0);
        }
        kept.push((Arc::clone(schema), format.clone(), Arc::clone(&made)));
        Ok(made)
    }
}

pub fn into_response(
    result: StatementResult,
    format: &Format,
    zone: Option<String>,
    described: &FieldsCache,
) -> PgWireResult<Response> {
    Ok(match result {
        StatementResult::Rows { schema, stream: batches } => {
            let fields = described.fields(&schema, format)?;
            let row_fields = Arc::clone(&fields);
            let rows = batches
                .map(move |batch| {
                    let rows: Box<dyn Iterator<Item = PgWireResult<_>> + Send + Sync> = match batch
                        .map_err(WeirError::from)
                        .and_then(|b| postgres_text(b, &row_fields, zone.as_deref()))
                    {
                        Ok(batch) => encode_recordbatch(Arc::clone(&row_fields), batch),
                        Err(e) => Box::new(std::iter::once(Err::<_, PgWireError>(e.into_pg()))),
                    };
                    stream::iter(rows)
                })
                .flatten();
            Response::Query(QueryResponse::new(fields, rows))
        }
        StatementResult::Returned { tag, batch } => {
            let schema = batch.schema();
            let stream = Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
                Arc::clone(&schema),
                stream::iter([Ok(batch)]),
            ));
            let mut response = into_response(StatementResult::Rows { schema, stream }, format, zone, described)?;
            if let Response::Query(query) = &mut response {
                query.set_command_tag(&tag);
            }
            response
        }
        StatementResult::Command { tag, rows } => {
            let mut t = Tag::new(&tag);
            if tag == "INSERT" {
                t = t.with_oid(0);
            }
            if let Some(rows) = rows {
                t = t.with_rows(rows);
            }
            Response::Execution(t)
        }
        StatementResult::TransactionStart { tag } => Response::TransactionStart(Tag::new(&tag)),
        StatementResult::TransactionEnd { tag } => Response::TransactionEnd(Tag::new(&tag)),
    })
}

/// Replaces the time-of-day and timestamp columns of `batch` that go out as text with their
/// Postgres text form, `jsonb` columns that go out in binary with theirs (a version byte,
/// 1, before the text), and decimal columns with `numeric`'s text or binary form.
pub fn postgres_text(batch: RecordBatch, fields: &[FieldInfo], zone: Option<&str>) -> Result<RecordBatch, WeirError> {
    let batch = jsonb_binary(batch, fields)?;
    let batch = numeric(batch, fields)?;
    let needs = |i: usize, dt: &DataType| {
        fields.get(i).is_some_and(|f| f.format() == FieldFormat::Text) && crate::types::pg_text::has_pg_text(dt)
    };
    if !batch.schema().fields().iter().enumerate().any(|(i, f)| needs(i, f.data_type())) {
        return Ok(batch);
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for (i, (field, column)) in batch.schema().fields().iter().zip(batch.columns()).enumerate() {
        if needs(i, field.data_type()) {
            columns.push(Arc::new(crate::types::pg_text::pg_text(column, zone)?));
            schema_fields.push(field.as_ref().clone().with_data_type(DataType::Utf8));
        } else {
            columns.push(Arc::clone(column));
            schema_fields.push(field.as_ref().clone());
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)?)
}

/// `batch` with its decimal columns in `numeric`'s text or binary form, as each goes out: all 38
/// digits a decimal holds (arrow-pg's encoding goes through a 28-digit decimal), printed with
/// the column's scale, or the value's own places where the column's scale is not a declared one
/// (`DeclaredType::prints_own_scale`: `12345.678`, not `12345.6780000000`).
fn numeric(batch: RecordBatch, fields: &[FieldInfo]) -> Result<RecordBatch, WeirError> {
    use crate::types::pg_binary::{decimal_binary, decimal_text};
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| matches!(f.data_type(), DataType::Decimal128(..))) {
        return Ok(batch);
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for (i, (field, column)) in schema.fields().iter().zip(batch.columns()).enumerate() {
        let (DataType::Decimal128(_, scale), Some(info)) = (field.data_type(), fields.get(i)) else {
            columns.push(Arc::clone(column));
            schema_fields.push(field.as_ref().clone());
            continue;
        };
        let decimals = column.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>();
        if info.format() == FieldFormat::Binary {
            let binary: datafusion::arrow::array::BinaryArray =
                decimals.iter().map(|v| v.map(|v| decimal_binary(v, *scale))).collect();
            columns.push(Arc::new(binary));
            schema_fields.push(field.as_ref().clone().with_data_type(DataType::Binary));
        } else {
            let trim = crate::types::pg_type::DeclaredType::prints_own_scale(field);
            let text: StringArray = decimals.iter().map(|v| v.map(|v| decimal_text(v, *scale, trim))).collect();
            columns.push(Arc::new(text));
            schema_fields.push(field.as_ref().clone().with_data_type(DataType::Utf8));
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)?)
}

/// `batch` with its string columns announced as `jsonb` in binary format as jsonb's binary form.
fn jsonb_binary(batch: RecordBatch, fields: &[FieldInfo]) -> Result<RecordBatch, WeirError> {
    let is_jsonb =
        |i: usize| fields.get(i).is_some_and(|f| f.format() == FieldFormat::Binary && f.datatype() == &Type::JSONB);
    if !(0..batch.num_columns()).any(is_jsonb) {
        return Ok(batch);
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for (i, (field, column)) in batch.schema().fields().iter().zip(batch.columns()).enumerate() {
        if is_jsonb(i) {
            let text = cast(column, &DataType::Utf8)?;
            let binary: datafusion::arrow::array::BinaryArray = text
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("cast to Utf8")
                .iter()
                .map(|v| v.map(|v| [&[1u8][..], v.as_bytes()].concat()))
                .collect();
            columns.push(Arc::new(binary));
            schema_fields.push(field.as_ref().clone().with_data_type(DataType::Binary));
        } else {
            columns.push(Arc::clone(column));
            schema_fields.push(field.as_ref().clone());
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampNanosecondArray;

    #[test]
    fn timestamps_go_out_as_postgres_text() {
        let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![Some(1_767_225_601_500_000_000), None]));
        let batch = RecordBatch::try_from_iter([("t", ts)]).unwrap();
        let fields = fields(&batch.schema(), &Format::UnifiedText).unwrap();
        let out = postgres_text(batch, &fields, None).unwrap();
        let text = out.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(text.value(0), "2026-01-01 00:00:01.5");
        assert!(text.is_null(1));
    }

    /// A kept RowDescription is the one its schema and format make: another format, or another
    /// schema with the same columns' names, gets its own; the oldest goes past the limit.
    #[test]
    fn kept_fields_are_by_schema_and_format() {
        let cache = FieldsCache::default();
        let schema = |t: DataType| Arc::new(Schema::new(vec![Field::new("v", t, true)]));
        let ints = schema(DataType::Int32);
        let text = cache.fields(&ints, &Format::UnifiedText).unwrap();
        assert!(Arc::ptr_eq(&text, &cache.fields(&ints, &Format::UnifiedText).unwrap()), "kept");
        let binary = cache.fields(&ints, &Format::UnifiedBinary).unwrap();
        assert_eq!(binary[0].format(), FieldFormat::Binary);
        assert_eq!(cache.fields(&ints, &Format::Individual(vec![1])).unwrap()[0].format(), FieldFormat::Binary);
        let strings = cache.fields(&schema(DataType::Utf8), &Format::UnifiedText).unwrap();
        assert_eq!(text[0].datatype(), &Type::INT4);
        assert_ne!(strings[0].datatype(), &Type::INT4, "another schema, its own fields");
        for _ in 0..KEPT_FIELDS {
            cache.fields(&schema(DataType::Int64), &Format::UnifiedText).unwrap();
        }
        assert!(!Arc::ptr_eq(&text, &cache.fields(&ints, &Format::UnifiedText).unwrap()), "made again once dropped");
    }
}
