//! The `records` and `avro` targets: the decoders a source runs over what a Kafka topic or a
//! file holds, into Arrow batches of a schema with every kind of column. A record that does not
//! decode becomes a dead letter; nothing may panic.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parking_lot::Mutex;

use super::MAX_INPUT;
use crate::catalog::options::ConnectorOptions;
use crate::connectors::avro::AvroDecoder;
use crate::connectors::records::{self, TextEncoding};

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

/// JSON (first byte even) or CSV records, one a line: each on its own, as a Kafka source reads
/// messages, then all of them at once, as a file source reads a file.
pub fn records(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Some((&which, text)) = data.split_first() else { return };
    let encoding = if which % 2 == 0 { TextEncoding::Json } else { TextEncoding::Csv };
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
    drop(AVRO.lock().decode(&values));
}
