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
use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
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

pub fn into_response(result: StatementResult, format: &Format) -> PgWireResult<Response> {
    Ok(match result {
        StatementResult::Rows { schema, stream: batches } => {
            let fields = Arc::new(fields(&schema, format)?);
            let row_fields = Arc::clone(&fields);
            let rows = batches
                .map(move |batch| {
                    let rows: Box<dyn Iterator<Item = PgWireResult<_>> + Send + Sync> =
                        match batch.map_err(WeirError::from).and_then(|b| postgres_text(b, &row_fields)) {
                            Ok(batch) => encode_recordbatch(Arc::clone(&row_fields), batch),
                            Err(e) => Box::new(std::iter::once(Err::<_, PgWireError>(e.into_pg()))),
                        };
                    stream::iter(rows)
                })
                .flatten();
            Response::Query(QueryResponse::new(fields, rows))
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
/// Postgres text form, and `jsonb` columns that go out in binary with theirs (a version byte,
/// 1, before the text).
pub fn postgres_text(batch: RecordBatch, fields: &[FieldInfo]) -> Result<RecordBatch, WeirError> {
    let batch = jsonb_binary(batch, fields)?;
    let needs = |i: usize, dt: &DataType| {
        fields.get(i).is_some_and(|f| f.format() == FieldFormat::Text)
            && matches!(
                dt,
                DataType::Timestamp(..)
                    | DataType::Time32(_)
                    | DataType::Time64(_)
                    | DataType::Float32
                    | DataType::Float64
            )
    };
    if !batch.schema().fields().iter().enumerate().any(|(i, f)| needs(i, f.data_type())) {
        return Ok(batch);
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for (i, (field, column)) in batch.schema().fields().iter().zip(batch.columns()).enumerate() {
        if needs(i, field.data_type()) {
            columns.push(Arc::new(render_times(column)?));
            schema_fields.push(field.as_ref().clone().with_data_type(DataType::Utf8));
        } else {
            columns.push(Arc::clone(column));
            schema_fields.push(field.as_ref().clone());
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)?)
}

/// `batch` with its string columns announced as `jsonb` in binary format as jsonb's binary form.
fn jsonb_binary(batch: RecordBatch, fields: &[FieldInfo]) -> Result<RecordBatch, WeirError> {
    let is_jsonb = |i: usize| {
        fields.get(i).is_some_and(|f| f.format() == FieldFormat::Binary && f.datatype() == &Type::JSONB)
    };
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

fn render_times(column: &ArrayRef) -> Result<StringArray, WeirError> {
    use datafusion::arrow::array::{Float32Array, Float64Array, Time64MicrosecondArray, TimestampMicrosecondArray};
    Ok(match column.data_type() {
        DataType::Float64 => {
            let a = column.as_any().downcast_ref::<Float64Array>().expect("float64");
            a.iter().map(|v| v.map(|v| float_text(v, &v.to_string(), format!("{v:e}"), 15))).collect()
        }
        DataType::Float32 => {
            let a = column.as_any().downcast_ref::<Float32Array>().expect("float32");
            a.iter().map(|v| v.map(|v| float_text(v as f64, &v.to_string(), format!("{v:e}"), 6))).collect()
        }
        DataType::Timestamp(_, tz) => {
            let micros = cast(column, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            let micros = micros.as_any().downcast_ref::<TimestampMicrosecondArray>().expect("cast");
            let suffix = if tz.is_some() { "+00" } else { "" };
            micros
                .iter()
                .map(|v| {
                    v.and_then(chrono::DateTime::from_timestamp_micros).map(|t| {
                        format!("{}{}{suffix}", t.format("%Y-%m-%d %H:%M:%S"), fraction(t.timestamp_subsec_micros()))
                    })
                })
                .collect()
        }
        _ => {
            let micros = cast(column, &DataType::Time64(TimeUnit::Microsecond))?;
            let micros = micros.as_any().downcast_ref::<Time64MicrosecondArray>().expect("cast");
            micros
                .iter()
                .map(|v| {
                    v.map(|us| {
                        let secs = us.div_euclid(1_000_000);
                        format!(
                            "{:02}:{:02}:{:02}{}",
                            secs / 3600,
                            secs / 60 % 60,
                            secs % 60,
                            fraction(us.rem_euclid(1_000_000) as u32)
                        )
                    })
                })
                .collect()
        }
    })
}

/// A float as Postgres prints it (extra_float_digits >= 1): the shortest digits that read back
/// exactly, in positional form unless the decimal exponent is below -4 or at least `precision`
/// (15 for float8, 6 for float4), then as `1.5e+20`. `plain` and `sci` are Rust's shortest
/// positional and scientific renderings of the same value.
fn float_text(v: f64, plain: &str, sci: String, precision: i32) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let (mantissa, exponent) = sci.split_once('e').expect("scientific form");
    let exponent: i32 = exponent.parse().expect("exponent");
    if v != 0.0 && (exponent < -4 || exponent >= precision) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        plain.to_string()
    }
}

/// `.5` for 500000 microseconds, nothing for 0: Postgres trims trailing zeros.
fn fraction(micros: u32) -> String {
    if micros == 0 {
        return String::new();
    }
    let s = format!(".{micros:06}");
    s.trim_end_matches('0').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampNanosecondArray;

    #[test]
    fn timestamps_print_like_postgres() {
        let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![
            Some(1_767_225_601_000_000_000),
            Some(1_767_225_601_500_000_000),
            None,
        ]));
        let rendered = render_times(&ts).unwrap();
        assert_eq!(rendered.value(0), "2026-01-01 00:00:01");
        assert_eq!(rendered.value(1), "2026-01-01 00:00:01.5");
        assert!(rendered.is_null(2));
    }

    #[test]
    fn floats_print_like_postgres() {
        let f = |v: f64| float_text(v, &v.to_string(), format!("{v:e}"), 15);
        assert_eq!(f(3.0), "3");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(-0.00001), "-1e-05");
        assert_eq!(f(1e20), "1e+20");
        assert_eq!(f(123456789012345.0), "123456789012345");
        assert_eq!(f(1e15), "1e+15");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(0.0), "0");
        let g = |v: f32| float_text(v as f64, &v.to_string(), format!("{v:e}"), 6);
        assert_eq!(g(1000000.0), "1e+06");
        assert_eq!(g(1.1), "1.1");
    }
}
