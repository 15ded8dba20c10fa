//! The `records`, `avro` and `protobuf` targets: the decoders a source runs over what a Kafka
//! topic or a file holds, into Arrow batches of a schema with every kind of column. A record
//! that does not decode becomes a dead letter; nothing may panic.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parking_lot::Mutex;

use super::MAX_INPUT;
use crate::catalog::options::ConnectorOptions;
use crate::connectors::avro::AvroDecoder;
use crate::connectors::flat_json;
use crate::connectors::protobuf::{self, ProtobufDecoder};
use crate::connectors::records::{self, TextEncoding};
use crate::connectors::value_decoder::ValueDecoder;

/// A source's columns as its records are decoded: `doc` is a `jsonb` column (read as JSON text).
static COLUMNS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("price", DataType::Float64, true),
        Field::new("qty", DataType::Int32, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("tz", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
        Field::new("d", DataType::Date32, true),
        Field::new("amount", DataType::Decimal128(12, 3), true),
        Field::new("doc", DataType::Utf8, true),
    ]))
});

/// The columns of every type the one-pass JSON decoder ([`flat_json`]) reads.
static FLAT_COLUMNS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("qty", DataType::Int32, true),
        Field::new("small", DataType::Int16, true),
        Field::new("price", DataType::Float64, true),
        Field::new("ratio", DataType::Float32, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("tag", DataType::Utf8View, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("tz", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
        Field::new("at_s", DataType::Timestamp(TimeUnit::Second, Some("UTC".into())), true),
        Field::new("at_ns", DataType::Timestamp(TimeUnit::Nanosecond, Some("+00".into())), true),
    ]))
});

/// JSON (first byte even) or CSV records, one a line: each on its own, as a Kafka source reads
/// messages, then all of them at once, as a file source reads a file. JSON records are also
/// read by the one-pass decoder, whose batch, when it gives one, must be arrow-json's.
pub fn records(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some((&which, text)) = data.split_first() else { return };
    let encoding = if which % 2 == 0 { TextEncoding::Json } else { TextEncoding::Csv };
    if encoding == TextEncoding::Json {
        if let Some(fast) = flat_json::decode(&FLAT_COLUMNS, text) {
            let slow = records::decode_with_arrow_json(&FLAT_COLUMNS, text, text.len().max(1));
            assert_eq!(Some(&fast), slow.as_ref().ok().and_then(Option::as_ref), "flat_json and arrow-json differ");
        }
    }
    let json = vec!["doc".to_string()];
    let each = text.split(|&b| b == b'\n').enumerate().map(|(i, record)| (i.to_string(), record));
    drop(records::decode_each(encoding, &COLUMNS, &json, each));
    drop(records::decode(encoding, &COLUMNS, text, 64));
}

/// The reader schema of the `avro` target: every Avro type a topic's schema may use.
const AVRO_SCHEMA: &str = r#"{"type": "record", "name": "Order", "namespace": "weir.fuzz", "fields": [
  {"name": "id", "type": "long"},
  {"name": "qty", "type": "int"},
  {"name": "name", "type": "string"},
  {"name": "price", "type": "double"},
  {"name": "ratio", "type": "float"},
  {"name": "ok", "type": "boolean"},
  {"name": "note", "type": ["null", "string"], "default": null},
  {"name": "raw", "type": "bytes"},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "attrs", "type": {"type": "map", "values": "long"}},
  {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID", "SHIPPED"]}},
  {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
  {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
  {"name": "day", "type": {"type": "int", "logicalType": "date"}},
  {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
    {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"], "default": null}]}}
]}"#;

static AVRO: LazyLock<Mutex<AvroDecoder>> = LazyLock::new(|| {
    let options = ConnectorOptions(BTreeMap::from([("schema".to_string(), AVRO_SCHEMA.to_string())]));
    Mutex::new(AvroDecoder::new(&options, "fuzz-value").expect("the fuzzing Avro schema"))
});

/// Avro values (of [`AVRO_SCHEMA`], no registry framing), split at each `0xFF 0xFE` pair: one
/// poll's messages, decoded together and, when one is bad, each on its own.
pub fn avro(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    drop(AVRO.lock().decode(&split(data)));
}

/// `data` cut at each `0xFF 0xFE` pair.
fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut values = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < data.len() {
        if data[i] == 0xFF && data[i + 1] == 0xFE {
            values.push(&data[start..i]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    values.push(&data[start..]);
    values
}

/// The `weir.fuzz.Order` message of the `protobuf` target, a field of every kind a topic's
/// schema may use (scalars of each wire type, an enum, a timestamp, wrappers, repeated scalars,
/// timestamps and wrappers, a map, a nested message, repeated messages, a oneof), as a
/// `FileDescriptorSet` over the well-known types.
pub fn protobuf_descriptors() -> Vec<u8> {
    use prost_reflect::prost::Message as _;
    use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
    use prost_reflect::prost_types::{
        DescriptorProto, EnumDescriptorProto, EnumValueDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
        FileDescriptorSet, MessageOptions, OneofDescriptorProto,
    };
    let field = |name: &str, number: i32, kind: Type, label: Label, type_name: &str| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(kind as i32),
        type_name: (!type_name.is_empty()).then(|| type_name.to_string()),
        ..Default::default()
    };
    let one = Label::Optional;
    let many = Label::Repeated;
    let mut code = field("code", 21, Type::String, one, "");
    code.oneof_index = Some(0);
    let mut number = field("number", 22, Type::Int64, one, "");
    number.oneof_index = Some(0);
    let order = DescriptorProto {
        name: Some("Order".into()),
        field: vec![
            field("id", 1, Type::Int64, one, ""),
            field("qty", 2, Type::Int32, one, ""),
            field("name", 3, Type::String, one, ""),
            field("price", 4, Type::Double, one, ""),
            field("ratio", 5, Type::Float, one, ""),
            field("ok", 6, Type::Bool, one, ""),
            field("raw", 7, Type::Bytes, one, ""),
            field("count", 8, Type::Uint32, one, ""),
            field("big", 9, Type::Uint64, one, ""),
            field("signed", 10, Type::Sint64, one, ""),
            field("fixed", 11, Type::Fixed64, one, ""),
            field("state", 12, Type::Enum, one, ".weir.fuzz.State"),
            field("at", 13, Type::Message, one, ".google.protobuf.Timestamp"),
            field("note", 14, Type::Message, one, ".google.protobuf.StringValue"),
            field("tags", 15, Type::String, many, ""),
            field("times", 16, Type::Message, many, ".google.protobuf.Timestamp"),
            field("counts", 17, Type::Message, many, ".google.protobuf.Int64Value"),
            field("attrs", 18, Type::Message, many, ".weir.fuzz.Order.AttrsEntry"),
            field("address", 19, Type::Message, one, ".weir.fuzz.Address"),
            field("lines", 20, Type::Message, many, ".weir.fuzz.Address"),
            code,
            number,
        ],
        nested_type: vec![DescriptorProto {
            name: Some("AttrsEntry".into()),
            field: vec![field("key", 1, Type::String, one, ""), field("value", 2, Type::Int64, one, "")],
            options: Some(MessageOptions { map_entry: Some(true), ..Default::default() }),
            ..Default::default()
        }],
        oneof_decl: vec![OneofDescriptorProto { name: Some("choice".into()), ..Default::default() }],
        ..Default::default()
    };
    let address = DescriptorProto {
        name: Some("Address".into()),
        field: vec![field("city", 1, Type::String, one, ""), field("zip", 2, Type::Int32, one, "")],
        ..Default::default()
    };
    let state = EnumDescriptorProto {
        name: Some("State".into()),
        value: ["NEW", "PAID", "SHIPPED"]
            .iter()
            .enumerate()
            .map(|(n, name)| EnumValueDescriptorProto {
                name: Some(name.to_string()),
                number: Some(n as i32),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let file = FileDescriptorProto {
        name: Some("weir_fuzz.proto".into()),
        package: Some("weir.fuzz".into()),
        syntax: Some("proto3".into()),
        dependency: vec!["google/protobuf/timestamp.proto".into(), "google/protobuf/wrappers.proto".into()],
        message_type: vec![order, address],
        enum_type: vec![state],
        ..Default::default()
    };
    FileDescriptorSet { file: vec![file] }.encode_to_vec()
}

static PROTOBUF: LazyLock<Mutex<ProtobufDecoder>> = LazyLock::new(|| {
    use base64::Engine;
    let descriptors = base64::engine::general_purpose::STANDARD.encode(protobuf_descriptors());
    let options = ConnectorOptions(BTreeMap::from([
        ("message".to_string(), "weir.fuzz.Order".to_string()),
        ("schema.descriptor".to_string(), descriptors),
    ]));
    Mutex::new(ProtobufDecoder::new(&options, "fuzz-value").expect("the fuzzing Protobuf message"))
});

/// The first byte odd: the rest read as a schema registry's framing (id, message index path);
/// even: bare `weir.fuzz.Order` messages split at each `0xFF 0xFE` pair, one poll's messages.
pub fn protobuf(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some((&which, rest)) = data.split_first() else { return };
    if which % 2 == 1 {
        drop(protobuf::unframe(rest));
        return;
    }
    drop(PROTOBUF.lock().decode(&split(rest)));
}
