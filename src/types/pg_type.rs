//! How PostgreSQL names the type of a column of an Arrow type: what `\d`, `information_schema`
//! and RowDescription-adjacent catalog queries show (`frontend::pg_catalog`), and the column
//! types a Postgres sink creates its table with (`connectors::postgres`). One mapping, so what
//! a client sees of a view is what a sink makes of it.

use datafusion::arrow::datatypes::DataType;

/// The PostgreSQL name of `data_type`; None for types PostgreSQL has no equivalent of (structs,
/// maps, unions).
pub fn postgres_type_name(data_type: &DataType) -> Option<String> {
    Some(match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "character varying".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            "bytea".into()
        }
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".into(),
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", postgres_type_name(f.data_type())?)
        }
        _ => return None,
    })
}
