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
//! | another message, a map | `jsonb` (Protobuf's JSON mapping, fields by their proto names) |
//! | `repeated` of any of the above but messages | an array of it; of messages: `jsonb` |
//!
//! A field that tracks presence (a message, `optional`, a oneof member, proto2) is NULL when the
//! message does not set it; one that does not (a proto3 scalar) has its default, as every
//! Protobuf reader sees it. Called by [`super::ProtobufDecoder`] only.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array,
    ListArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use prost_reflect::{
    DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions, Value,
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
    /// Whether some column is JSON (then each message is written as JSON once).
    any_json: bool,
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
        let any_json = fields.iter().any(|(_, shape)| matches!(shape, Shape::Json));
        Columns { fields, schema: Arc::new(Schema::new(arrow)), any_json }
    }

    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// `messages` as one batch; Err((i, why)) names a message one of whose values no column
    /// can hold (a timestamp past the range of microseconds).
    pub fn batch(&self, messages: &[DynamicMessage]) -> Result<RecordBatch, (usize, String)> {
        let json: Vec<Option<serde_json::Map<String, serde_json::Value>>> = if self.any_json {
            messages.iter().map(|m| Some(as_json(m))).collect()
        } else {
            vec![None; messages.len()]
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.fields.len());
        for (field, shape) in &self.fields {
            let column: ArrayRef = match shape {
                Shape::One { scalar, wrapped } => {
                    let values: Vec<Option<Value>> = messages
                        .iter()
                        .map(|m| {
                            if field.supports_presence() && !m.has_field(field) {
                                return None;
                            }
                            unwrapped(m.get_field(field).into_owned(), *wrapped)
                        })
                        .collect();
                    scalars(scalar, values.iter().map(Option::as_ref))?
                }
                Shape::List { scalar, wrapped } => {
                    let mut offsets = Vec::with_capacity(messages.len() + 1);
                    offsets.push(0i32);
                    let mut items: Vec<Option<Value>> = Vec::new();
                    for (row, m) in messages.iter().enumerate() {
                        if let Value::List(list) = m.get_field(field).into_owned() {
                            items.extend(list.into_iter().map(|item| unwrapped(item, *wrapped)));
                        }
                        let end = i32::try_from(items.len()).map_err(|_| (row, "too many array items".to_string()))?;
                        offsets.push(end);
                    }
                    let item_type = data_type(scalar);
                    let items = scalars(scalar, items.iter().map(Option::as_ref)).map_err(|(item, why)| {
                        // The message whose array holds the item.
                        (offsets.partition_point(|&end| end as usize <= item) - 1, why)
                    })?;
                    Arc::new(ListArray::new(
                        Arc::new(Field::new("item", item_type, true)),
                        OffsetBuffer::new(offsets.into()),
                        items,
                        None,
                    ))
                }
                Shape::Json => {
                    let texts = messages.iter().zip(&json).map(|(m, json)| {
                        if field.supports_presence() && !m.has_field(field) {
                            return None;
                        }
                        let value = json.as_ref().and_then(|j| j.get(field.name()));
                        Some(match value {
                            Some(v) => v.to_string(),
                            None if field.is_map() => "{}".to_string(),
                            None if field.is_list() => "[]".to_string(),
                            None => "{}".to_string(),
                        })
                    });
                    Arc::new(StringArray::from_iter(texts))
                }
            };
            columns.push(column);
        }
        let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(messages.len()));
        RecordBatch::try_new_with_options(self.schema(), columns, &options).map_err(|e| (0, e.to_string()))
    }
}

/// `value`, or a wrapper message's (`google.protobuf.*Value`) value when `wrapped`.
fn unwrapped(value: Value, wrapped: bool) -> Option<Value> {
    if !wrapped {
        return Some(value);
    }
    let Value::Message(wrapper) = value else { return None };
    wrapper.get_field_by_number(1).map(|v| v.into_owned())
}

/// `message` in Protobuf's JSON mapping, its fields by their proto names, defaults included,
/// 64-bit integers as numbers.
fn as_json(message: &DynamicMessage) -> serde_json::Map<String, serde_json::Value> {
    let options =
        SerializeOptions::new().use_proto_field_name(true).stringify_64_bit_integers(false).skip_default_fields(false);
    match message.serialize_with_options(serde_json::value::Serializer, &options) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

/// One column of `values` read as `scalar` (None: NULL). Err((i, why)) for the i-th value.
fn scalars<'a>(
    scalar: &Scalar,
    values: impl ExactSizeIterator<Item = Option<&'a Value>>,
) -> Result<ArrayRef, (usize, String)> {
    Ok(match scalar {
        Scalar::F64 => Arc::new(Float64Array::from_iter(values.map(|v| v.and_then(Value::as_f64)))),
        Scalar::F32 => Arc::new(Float32Array::from_iter(values.map(|v| v.and_then(Value::as_f32)))),
        Scalar::I32 => Arc::new(Int32Array::from_iter(values.map(|v| v.and_then(Value::as_i32)))),
        Scalar::I64 => Arc::new(Int64Array::from_iter(values.map(|v| v.and_then(Value::as_i64)))),
        Scalar::U32 => Arc::new(Int64Array::from_iter(values.map(|v| v.and_then(Value::as_u32).map(i64::from)))),
        Scalar::U64 => Arc::new(
            Decimal128Array::from_iter(values.map(|v| v.and_then(Value::as_u64).map(i128::from)))
                .with_precision_and_scale(20, 0)
                .map_err(|e| (0, e.to_string()))?,
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
        Scalar::Timestamp => {
            let mut micros = Vec::with_capacity(values.len());
            for (i, v) in values.enumerate() {
                let Some(Value::Message(at)) = v else {
                    micros.push(None);
                    continue;
                };
                let seconds = at.get_field_by_number(1).and_then(|s| s.as_i64()).unwrap_or(0);
                let nanos = at.get_field_by_number(2).and_then(|n| n.as_i32()).unwrap_or(0);
                let value = seconds.checked_mul(1_000_000).and_then(|s| s.checked_add(i64::from(nanos) / 1_000));
                match value {
                    Some(value) => micros.push(Some(value)),
                    None => return Err((i, format!("timestamp {seconds} s is out of range"))),
                }
            }
            Arc::new(TimestampMicrosecondArray::from(micros).with_timezone("+00:00"))
        }
        Scalar::Json => unreachable!("JSON values are columns of their own shape"),
    })
}
