//! The columns a Protobuf message decodes to, and decoded messages as one Arrow batch.
//!
//! One column per field of the message, in its declaration order, named as the field is:
//!
//! | Protobuf | column |
//! |---|---|
//! | `double`, `float` | `double precision`, `real` |
//! | `int32`, `sint32`, `sfixed32` | `integer` |
//! | `int64`, `sint64`, `sfixed64`, `uint32`, `fixed32` | `bigint` |
//! | `uint64`, `fixed64` | `numeric(20, 0)` |
//! | `bool`, `string`, `bytes` | `boolean`, `text`, `bytea` |
//! | an enum | `text`: the value's name (its number when the enum does not name it) |
//! | `google.protobuf.Timestamp` | `timestamptz` (microseconds) |
//! | `google.protobuf.*Value` wrappers | the wrapped type, NULL when unset |
//! | another message, a map | `jsonb` (Protobuf's JSON mapping, fields by their proto names, 64-bit integers as numbers) |
//! | `repeated` of any of the above but messages | an array of it; of messages: `jsonb` |
//!
//! A field that tracks presence (a message, `optional`, a oneof member, proto2) is NULL when the
//! message does not set it; one that does not (a proto3 scalar) has its default, as every
//! Protobuf reader sees it. What can fail for a value (a timestamp out of range, a message the
//! JSON mapping cannot write) fails for its message alone, before the batch is made
//! ([`Columns::row`]). Called by [`super::ProtobufDecoder`] only.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array,
    ListArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use prost_reflect::{
    DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey, MessageDescriptor, SerializeOptions, Value,
};

use crate::types::pg_type::DeclaredType;

/// What one value of a column is read as.
#[derive(Clone)]
enum Scalar {
    F64,
    F32,
    I32,
    I64,
    /// `uint32`, `fixed32`: read into a `bigint`.
    U32,
    /// `uint64`, `fixed64`: read into a `numeric(20, 0)`.
    U64,
    Bool,
    Text,
    Bytes,
    Enum(EnumDescriptor),
    Timestamp,
    /// A message or map, as its JSON text.
    Json,
}

/// A column's shape: one value (of a wrapper message's `value` field when `wrapped`), an
/// array of values, or the field's JSON.
#[derive(Clone)]
enum Shape {
    One { scalar: Scalar, wrapped: bool },
    List { scalar: Scalar, wrapped: bool },
    Json,
}

/// The columns of one message type.
pub struct Columns {
    fields: Vec<(FieldDescriptor, Shape)>,
    schema: SchemaRef,
}

/// `kind` as a column value: the scalar, and whether it is wrapped in a `google.protobuf.*Value`.
fn scalar_of(kind: &Kind) -> (Scalar, bool) {
    let scalar = match kind {
        Kind::Double => Scalar::F64,
        Kind::Float => Scalar::F32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Scalar::I32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Scalar::I64,
        Kind::Uint32 | Kind::Fixed32 => Scalar::U32,
        Kind::Uint64 | Kind::Fixed64 => Scalar::U64,
        Kind::Bool => Scalar::Bool,
        Kind::String => Scalar::Text,
        Kind::Bytes => Scalar::Bytes,
        Kind::Enum(e) => Scalar::Enum(e.clone()),
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Timestamp" => Scalar::Timestamp,
            "google.protobuf.DoubleValue"
            | "google.protobuf.FloatValue"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.Int32Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue" => {
                let inner = m.get_field(1).expect("a wrapper has its value field").kind();
                return (scalar_of(&inner).0, true);
            }
            _ => Scalar::Json,
        },
    };
    (scalar, false)
}

fn data_type(scalar: &Scalar) -> DataType {
    match scalar {
        Scalar::F64 => DataType::Float64,
        Scalar::F32 => DataType::Float32,
        Scalar::I32 => DataType::Int32,
        Scalar::I64 | Scalar::U32 => DataType::Int64,
        Scalar::U64 => DataType::Decimal128(20, 0),
        Scalar::Bool => DataType::Boolean,
        Scalar::Text | Scalar::Enum(_) | Scalar::Json => DataType::Utf8,
        Scalar::Bytes => DataType::Binary,
        Scalar::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
    }
}

fn jsonb(field: Field) -> Field {
    DeclaredType::from_sql(&datafusion::sql::sqlparser::ast::DataType::JSONB).expect("jsonb is declared").on(field)
}

impl Columns {
    /// The columns of `message`'s fields.
    pub fn of(message: &MessageDescriptor) -> Columns {
        let mut fields = Vec::new();
        let mut arrow = Vec::new();
        for field in message.fields() {
            let (scalar, wrapped) = scalar_of(&field.kind());
            let shape = if field.is_map() || (field.is_list() && matches!(scalar, Scalar::Json)) {
                Shape::Json
            } else if field.is_list() {
                Shape::List { scalar, wrapped }
            } else if matches!(scalar, Scalar::Json) {
                Shape::Json
            } else {
                Shape::One { scalar, wrapped }
            };
            let column = match &shape {
                Shape::One { scalar, .. } => Field::new(field.name(), data_type(scalar), true),
                Shape::List { scalar, .. } => Field::new(
                    field.name(),
                    DataType::List(Arc::new(Field::new("item", data_type(scalar), true))),
                    true,
                ),
                Shape::Json => jsonb(Field::new(field.name(), DataType::Utf8, true)),
            };
            arrow.push(column);
            fields.push((field, shape));
        }
        Columns { fields, schema: Arc::new(Schema::new(arrow)) }
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// `message` ready to be a row: its JSON columns' texts made and its timestamps checked,
    /// which are what can fail (Err: why; the value is then a dead letter), so that
    /// [`Columns::batch`] cannot fail on a value.
    pub fn row(&self, message: DynamicMessage) -> Result<Row, String> {
        let mut json = Vec::new();
        for (field, shape) in &self.fields {
            let unset = field.supports_presence() && !message.has_field(field);
            match shape {
                Shape::Json if unset => json.push(None),
                Shape::Json => {
                    let text = json_of(&message.get_field(field), &field.kind())
                        .map_err(|e| format!("{}: {e}", field.name()))?
                        .to_string();
                    json.push(Some(text));
                }
                Shape::One { scalar: Scalar::Timestamp, wrapped } if !unset => {
                    if let Some(at) = unwrapped(message.get_field(field).into_owned(), *wrapped) {
                        micros(&at).map_err(|e| format!("{}: {e}", field.name()))?;
                    }
                }
                Shape::List { scalar: Scalar::Timestamp, .. } => {
                    if let Value::List(items) = message.get_field(field).as_ref() {
                        for at in items {
                            micros(at).map_err(|e| format!("{}: {e}", field.name()))?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(Row { message, json })
    }

    /// `rows` as one batch (Err only for a fault of Weir's own: an array past 2^31 items).
    pub fn batch(&self, rows: &[Row]) -> Result<RecordBatch, String> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.fields.len());
        let mut json_column = 0;
        for (field, shape) in &self.fields {
            let column: ArrayRef = match shape {
                Shape::One { scalar, wrapped } => {
                    let values: Vec<Option<Value>> = rows
                        .iter()
                        .map(|row| {
                            if field.supports_presence() && !row.message.has_field(field) {
                                return None;
                            }
                            unwrapped(row.message.get_field(field).into_owned(), *wrapped)
                        })
                        .collect();
                    scalars(scalar, values.iter().map(Option::as_ref))
                }
                Shape::List { scalar, wrapped } => {
                    let mut offsets = Vec::with_capacity(rows.len() + 1);
                    offsets.push(0i32);
                    let mut items: Vec<Option<Value>> = Vec::new();
                    for row in rows {
                        if let Value::List(list) = row.message.get_field(field).into_owned() {
                            items.extend(list.into_iter().map(|item| unwrapped(item, *wrapped)));
                        }
                        offsets.push(i32::try_from(items.len()).map_err(|_| "an array past 2^31 items".to_string())?);
                    }
                    let item = Arc::new(Field::new("item", data_type(scalar), true));
                    let items = scalars(scalar, items.iter().map(Option::as_ref));
                    Arc::new(
                        ListArray::try_new(item, OffsetBuffer::new(offsets.into()), items, None)
                            .map_err(|e| e.to_string())?,
                    )
                }
                Shape::Json => {
                    let column = json_column;
                    json_column += 1;
                    Arc::new(StringArray::from_iter(rows.iter().map(|row| row.json[column].as_deref())))
                }
            };
            columns.push(column);
        }
        let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len()));
        RecordBatch::try_new_with_options(self.schema(), columns, &options).map_err(|e| e.to_string())
    }
}

/// A decoded message checked by [`Columns::row`], with its JSON columns' texts (in column
/// order; None: NULL).
pub struct Row {
    message: DynamicMessage,
    json: Vec<Option<String>>,
}

/// `value`, or a wrapper message's (`google.protobuf.*Value`) value when `wrapped`.
fn unwrapped(value: Value, wrapped: bool) -> Option<Value> {
    if !wrapped {
        return Some(value);
    }
    let Value::Message(wrapper) = value else { return None };
    wrapper.get_field_by_number(1).map(|v| v.into_owned())
}

/// A `google.protobuf.Timestamp` in microseconds since the epoch; Err when its nanoseconds are
/// not in 0..1e9 (as the type requires) or it is past the range of microseconds.
fn micros(at: &Value) -> Result<i64, String> {
    let Value::Message(at) = at else { return Err("not a timestamp".into()) };
    let seconds = at.get_field_by_number(1).and_then(|s| s.as_i64()).unwrap_or(0);
    let nanos = at.get_field_by_number(2).and_then(|n| n.as_i32()).unwrap_or(0);
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(format!("a timestamp's nanos must be in 0..999999999, not {nanos}"));
    }
    seconds
        .checked_mul(1_000_000)
        .and_then(|s| s.checked_add(i64::from(nanos) / 1_000))
        .ok_or_else(|| format!("timestamp {seconds} s is out of range"))
}

/// `value` (of a field of `kind`) in Protobuf's JSON mapping: messages with their fields by
/// proto names and 64-bit integers as numbers, maps as objects (keys in order), bytes as
/// base64, enums by name. Err when prost-reflect cannot write a message (a timestamp past
/// year 9999, an `Any` of a type it does not know).
fn json_of(value: &Value, kind: &Kind) -> Result<serde_json::Value, String> {
    use base64::Engine;
    use serde_json::Value as Json;
    const OPTIONS: SerializeOptions =
        SerializeOptions::new().use_proto_field_name(true).stringify_64_bit_integers(false);
    let float = |f: f64| {
        serde_json::Number::from_f64(f).map(Json::Number).unwrap_or_else(|| {
            Json::String(
                if f.is_nan() {
                    "NaN"
                } else if f > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                }
                .into(),
            )
        })
    };
    Ok(match value {
        Value::Message(m) => {
            m.serialize_with_options(serde_json::value::Serializer, &OPTIONS).map_err(|e| e.to_string())?
        }
        Value::List(items) => Json::Array(items.iter().map(|item| json_of(item, kind)).collect::<Result<_, _>>()?),
        Value::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                _ => return Err("a map without its entry type".into()),
            };
            let mut object = serde_json::Map::new();
            for (key, value) in entries {
                let key = match key {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                object.insert(key, json_of(value, &value_kind)?);
            }
            Json::Object(object)
        }
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(f) => float(f64::from(*f)),
        Value::F64(f) => float(*f),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => e.get_value(*n).map_or_else(|| Json::from(*n), |named| Json::String(named.name().into())),
            _ => Json::from(*n),
        },
    })
}

/// One column of `values` read as `scalar` (None: NULL); timestamps were checked by
/// [`Columns::row`].
fn scalars<'a>(scalar: &Scalar, values: impl Iterator<Item = Option<&'a Value>>) -> ArrayRef {
    match scalar {
        Scalar::F64 => Arc::new(Float64Array::from_iter(values.map(|v| v.and_then(Value::as_f64)))),
        Scalar::F32 => Arc::new(Float32Array::from_iter(values.map(|v| v.and_then(Value::as_f32)))),
        Scalar::I32 => Arc::new(Int32Array::from_iter(values.map(|v| v.and_then(Value::as_i32)))),
        Scalar::I64 => Arc::new(Int64Array::from_iter(values.map(|v| v.and_then(Value::as_i64)))),
        Scalar::U32 => Arc::new(Int64Array::from_iter(values.map(|v| v.and_then(Value::as_u32).map(i64::from)))),
        Scalar::U64 => Arc::new(
            Decimal128Array::from_iter(values.map(|v| v.and_then(Value::as_u64).map(i128::from)))
                .with_precision_and_scale(20, 0)
                .expect("numeric(20, 0) is a valid decimal type"),
        ),
        Scalar::Bool => Arc::new(BooleanArray::from_iter(values.map(|v| v.and_then(Value::as_bool)))),
        Scalar::Text => Arc::new(StringArray::from_iter(values.map(|v| v.and_then(Value::as_str)))),
        Scalar::Bytes => {
            Arc::new(BinaryArray::from_iter(values.map(|v| v.and_then(Value::as_bytes).map(|b| b.as_ref()))))
        }
        Scalar::Enum(e) => Arc::new(StringArray::from_iter(values.map(|v| {
            v.and_then(Value::as_enum_number)
                .map(|n| e.get_value(n).map_or_else(|| n.to_string(), |named| named.name().to_string()))
        }))),
        Scalar::Timestamp => Arc::new(
            TimestampMicrosecondArray::from_iter(values.map(|v| v.and_then(|at| micros(at).ok())))
                .with_timezone("+00:00"),
        ),
        // JSON values are columns of their own shape, never scalars of one.
        Scalar::Json => Arc::new(StringArray::from_iter(values.map(|_| None::<&str>))),
    }
}
