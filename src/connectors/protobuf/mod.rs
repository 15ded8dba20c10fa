//! `ENCODE PROTOBUF (message = 'pkg.Msg', ...)`: Protobuf messages decoded into Arrow rows by
//! their descriptors at run time (prost-reflect's dynamic messages), columns as [`columns`]
//! maps them.
//!
//! Where the **reader's** descriptors (the message the source reads, and the files it
//! imports) come from, first found first:
//! - `schema.descriptor`: a base64 `FileDescriptorSet`. Weir keeps the one it read at CREATE
//!   here ([`ProtobufDecoder::settled_options`]), so a restart decodes to the same columns
//!   whatever the registry or the file holds by then.
//! - `schema.location = 'file:///path/set.pb'`: a `FileDescriptorSet` as `protoc
//!   --include_imports --descriptor_set_out` writes it.
//! - `schema.registry = 'http://...'`: the latest schema of the subject `<topic>-value`, asked
//!   for in the registry's serialized form, with the files it imports (its references).
//!
//! With a registry, values are in Confluent's wire format: a zero byte, the writer schema's
//! 4-byte id, the message's index path in that schema's file (zigzag varints; a lone 0 means the
//! first message), then the message. Each writer schema is fetched once; a value framed as
//! another message than the source's, or with an id the registry does not have, is a dead
//! letter. The body is read with the reader's descriptor, by field numbers, which is
//! Protobuf's own schema evolution: a field the writer added is skipped, one it deleted reads
//! as unset, `int32` widened to `int64` reads alike. Without a registry, values are bare
//! messages. A value that does not decode is a dead letter; a registry that cannot be asked
//! is 08001 and the source retries. Called through [`crate::connectors::value_decoder`].

mod columns;

use std::collections::BTreeMap;

use base64::Engine;
use datafusion::arrow::datatypes::SchemaRef;
use prost_reflect::prost::Message as _;
use prost_reflect::prost_types::{FileDescriptorProto, FileDescriptorSet};
use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor};

use crate::catalog::options::ConnectorOptions;
use crate::connectors::schema_registry::{Form, Lookup, Registered, RegistryError, SchemaRegistry};
use crate::connectors::value_decoder::{Decoded, ValueDecoder};
use crate::error::{Result, SqlState, WeirError};

/// The options `ENCODE PROTOBUF (...)` takes besides the registry's.
pub const OPTIONS: &[&str] = &["message", "schema.location", "schema.descriptor"];

/// How deep a registry schema's imports may go.
const MAX_IMPORT_DEPTH: usize = 32;

/// How many indexes a framed value's message path may hold.
const MAX_PATH: i64 = 64;

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// Decodes one topic's (or file's) Protobuf values.
pub struct ProtobufDecoder {
    registry: Option<SchemaRegistry>,
    /// The message the source reads.
    message: MessageDescriptor,
    columns: columns::Columns,
    /// The reader's file and every file it imports, as `schema.descriptor` keeps them.
    descriptor: String,
    /// Each writer schema id seen: its file, or why values framed with it cannot be read.
    writers: BTreeMap<u32, std::result::Result<FileDescriptor, String>>,
}

impl ProtobufDecoder {
    /// The decoder `options` describe, for values of `subject` (`<topic>-value`) when the
    /// reader's descriptors come from the registry. 22023 for options that name no message or
    /// no descriptors, or descriptors that are not a `FileDescriptorSet`; 42704 for a message
    /// they do not hold, or a subject the registry does not have; 08001 when the registry
    /// cannot be asked.
    pub fn new(options: &ConnectorOptions, subject: &str) -> Result<ProtobufDecoder> {
        let registry = SchemaRegistry::from_options(options)?;
        let name = options.get("message").ok_or_else(|| {
            invalid("ENCODE PROTOBUF needs message = '<package>.<Message>' (the message values hold)".into())
        })?;
        let pool = if let Some(kept) = options.get("schema.descriptor") {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(kept.trim())
                .map_err(|e| invalid(format!("schema.descriptor is not base64: {e}")))?;
            pool_of_set(&bytes).map_err(|e| invalid(format!("schema.descriptor: {e}")))?
        } else if let Some(location) = options.get("schema.location") {
            let path = location.strip_prefix("file://").unwrap_or(location);
            let bytes =
                std::fs::read(path).map_err(|e| invalid(format!("schema.location: cannot read {location}: {e}")))?;
            pool_of_set(&bytes).map_err(|e| {
                invalid(format!(
                    "schema.location {location}: {e} (protoc --include_imports --descriptor_set_out writes one)"
                ))
            })?
        } else if let Some(registry) = &registry {
            let hint = "Register the topic's value schema, or give ENCODE PROTOBUF (schema.location = 'file:///...').";
            let registered = registry.reader(subject, Form::Serialized, "PROTOBUF", hint)?;
            match file_of(registry, &registered).map_err(|e| e.into_weir(&registry.url))? {
                Ok(file) => file.parent_pool().clone(),
                Err(why) => return Err(invalid(format!("schema registry {}: subject {subject}: {why}", registry.url))),
            }
        } else {
            return Err(invalid(
                "ENCODE PROTOBUF needs schema.registry = 'http://...' or schema.location = 'file:///...'".into(),
            ));
        };
        let message = pool.get_message_by_name(name).ok_or_else(|| {
            let held: Vec<String> = pool
                .all_messages()
                .filter(|m| !m.full_name().starts_with("google.protobuf."))
                .map(|m| m.full_name().to_string())
                .collect();
            WeirError::new(
                SqlState::UNDEFINED_OBJECT,
                format!("the Protobuf schema has no message {name} (it has {})", held.join(", ")),
            )
        })?;
        let descriptor =
            base64::engine::general_purpose::STANDARD.encode(set_of(&message.parent_file()).encode_to_vec());
        Ok(ProtobufDecoder {
            registry,
            columns: columns::Columns::of(&message),
            message,
            descriptor,
            writers: BTreeMap::new(),
        })
    }

    /// The full name of the message a value framed with schema `id` and message path `path`
    /// holds; Err(why) when that cannot be read (the registry has no such id, ...).
    fn framed_message(&mut self, id: u32, path: &[i64]) -> Result<std::result::Result<String, String>> {
        if !self.writers.contains_key(&id) {
            let registry = self.registry.as_ref().expect("a registry frames its values");
            let file = match registry.by_id(id, Form::Serialized).map(|found| found.and_then(|r| r.of_kind("PROTOBUF")))
            {
                Ok(Lookup::Found(registered)) => file_of(registry, &registered),
                Ok(Lookup::Missing) => Ok(Err(format!("schema id {id} is not in the schema registry"))),
                Ok(Lookup::Unusable(why)) => Ok(Err(format!("schema id {id}: {why}"))),
                Err(e) => Err(e),
            };
            let file = file.map_err(|e| e.while_reading(&registry.url))?;
            self.writers.insert(id, file.map_err(|why| format!("schema id {id}: {why}")));
        }
        let file = match &self.writers[&id] {
            Ok(file) => file,
            Err(why) => return Ok(Err(why.clone())),
        };
        let mut at: Option<MessageDescriptor> = None;
        for &index in path {
            let nth = usize::try_from(index).ok();
            at = match (&at, nth) {
                (None, Some(n)) => file.messages().nth(n),
                (Some(parent), Some(n)) => parent.child_messages().nth(n),
                (_, None) => None,
            };
            if at.is_none() {
                return Ok(Err(format!("schema id {id} has no message at index path {path:?}")));
            }
        }
        Ok(at.map(|m| m.full_name().to_string()).ok_or_else(|| "an empty message index path".to_string()))
    }
}

impl ValueDecoder for ProtobufDecoder {
    fn schema(&self) -> SchemaRef {
        self.columns.schema()
    }

    fn decode(&mut self, values: &[&[u8]]) -> Result<Decoded> {
        let mut dead: Vec<(usize, String)> = Vec::new();
        let mut rows = Vec::with_capacity(values.len());
        let mut kept = Vec::with_capacity(values.len());
        for (i, value) in values.iter().enumerate() {
            let body = if self.registry.is_some() {
                let (id, path, body) = match unframe(value) {
                    Ok(framed) => framed,
                    Err(why) => {
                        dead.push((i, why));
                        continue;
                    }
                };
                match self.framed_message(id, &path)? {
                    Ok(name) if name == self.message.full_name() => body,
                    Ok(name) => {
                        dead.push((i, format!("the value is a {name}; the source reads {}", self.message.full_name())));
                        continue;
                    }
                    Err(why) => {
                        dead.push((i, why));
                        continue;
                    }
                }
            } else {
                value
            };
            let row = DynamicMessage::decode(self.message.clone(), body)
                .map_err(|e| format!("the Protobuf value does not decode: {e}"))
                .and_then(|message| {
                    self.columns
                        .row(message)
                        .map_err(|why| format!("the Protobuf value does not fit its columns: {why}"))
                });
            match row {
                Ok(row) => {
                    rows.push(row);
                    kept.push(i);
                }
                Err(why) => dead.push((i, why)),
            }
        }
        let batch = self
            .columns
            .batch(&rows)
            .map_err(|why| WeirError::internal(format!("Protobuf values into a batch: {why}")))?;
        dead.sort_by_key(|(i, _)| *i);
        Ok(Decoded { batch, kept, dead })
    }

    /// The reader's descriptors (`schema.descriptor`).
    fn settled_options(&self) -> Vec<(String, String)> {
        vec![("schema.descriptor".to_string(), self.descriptor.clone())]
    }
}

/// A pool of the well-known types and the files of a serialized `FileDescriptorSet`.
fn pool_of_set(bytes: &[u8]) -> std::result::Result<DescriptorPool, String> {
    let set = FileDescriptorSet::decode(bytes).map_err(|e| format!("not a FileDescriptorSet: {e}"))?;
    let mut pool = DescriptorPool::global();
    pool.add_file_descriptor_set(set).map_err(|e| e.to_string())?;
    Ok(pool)
}

/// `file` and every file it imports, each once, imports first.
fn set_of(file: &FileDescriptor) -> FileDescriptorSet {
    fn visit(file: &FileDescriptor, seen: &mut Vec<String>, set: &mut FileDescriptorSet) {
        if seen.iter().any(|name| name == file.name()) {
            return;
        }
        seen.push(file.name().to_string());
        for import in file.dependencies() {
            visit(&import, seen, set);
        }
        set.file.push(file.file_descriptor_proto().clone());
    }
    let mut set = FileDescriptorSet::default();
    visit(file, &mut Vec::new(), &mut set);
    set
}

/// The file a registry schema (serialized) holds, built with the files it imports (fetched by
/// its references, recursively); Err(why) when the registry's answers are not such files, or
/// the imports go round in a cycle or deeper than [`MAX_IMPORT_DEPTH`].
fn file_of(
    registry: &SchemaRegistry,
    registered: &Registered,
) -> std::result::Result<std::result::Result<FileDescriptor, String>, RegistryError> {
    /// Adds `registered` to `pool` under `imported_as` (the name its importer uses, which a
    /// registry's own copy need not carry) or its own name; `path`: the imports it is reached
    /// through.
    fn add(
        registry: &SchemaRegistry,
        registered: &Registered,
        imported_as: Option<&str>,
        pool: &mut DescriptorPool,
        path: &mut Vec<String>,
    ) -> std::result::Result<std::result::Result<String, String>, RegistryError> {
        if path.len() > MAX_IMPORT_DEPTH {
            return Ok(Err(format!("imports nest deeper than {MAX_IMPORT_DEPTH}")));
        }
        for reference in &registered.references {
            if pool.get_file_by_name(&reference.name).is_some() {
                continue;
            }
            if path.contains(&reference.name) {
                return Ok(Err(format!("its imports go round in a cycle through {}", reference.name)));
            }
            let imported = match registry
                .version(&reference.subject, Some(reference.version), Form::Serialized)?
                .and_then(|r| r.of_kind("PROTOBUF"))
            {
                Lookup::Found(imported) => imported,
                Lookup::Missing => {
                    return Ok(Err(format!(
                        "its import {} (subject {}, version {}) is not in the registry",
                        reference.name, reference.subject, reference.version
                    )))
                }
                Lookup::Unusable(why) => return Ok(Err(format!("its import {}: {why}", reference.name))),
            };
            path.push(reference.name.clone());
            let added = add(registry, &imported, Some(&reference.name), pool, path)?;
            path.pop();
            if let Err(why) = added {
                return Ok(Err(why));
            }
        }
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(registered.schema.trim()) else {
            return Ok(Err("the registry gave the schema as .proto text, not in its serialized form \
                 (format=serialized): Weir reads Protobuf schemas serialized"
                .to_string()));
        };
        let mut proto = match FileDescriptorProto::decode(bytes.as_slice()) {
            Ok(proto) => proto,
            Err(e) => return Ok(Err(format!("not a serialized FileDescriptorProto: {e}"))),
        };
        if let Some(name) = imported_as {
            proto.name = Some(name.to_string());
        }
        let name = proto.name().to_string();
        Ok(pool.add_file_descriptor_proto(proto).map(|()| name).map_err(|e| e.to_string()))
    }
    let mut pool = DescriptorPool::global();
    Ok(add(registry, registered, None, &mut pool, &mut Vec::new())?
        .and_then(|name| pool.get_file_by_name(&name).ok_or_else(|| format!("no file {name} after adding it"))))
}

/// A framed value's schema id, message index path and body (public for the fuzz target).
pub fn unframe(value: &[u8]) -> std::result::Result<(u32, Vec<i64>, &[u8]), String> {
    const NOT_FRAMED: &str =
        "not in the schema registry's wire format (a zero byte, a 4-byte schema id, the message's index path)";
    if value.len() < 6 || value[0] != 0 {
        return Err(NOT_FRAMED.into());
    }
    let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
    let mut rest = &value[5..];
    let count = zigzag(&mut rest).ok_or(NOT_FRAMED)?;
    if count == 0 {
        return Ok((id, vec![0], rest));
    }
    if !(1..=MAX_PATH).contains(&count) {
        return Err(format!("a message index path of {count} indexes"));
    }
    let mut path = Vec::with_capacity(count as usize);
    for _ in 0..count {
        path.push(zigzag(&mut rest).ok_or(NOT_FRAMED)?);
    }
    Ok((id, path, rest))
}

/// A zigzag-encoded varint from the front of `bytes` (taken off), as Confluent's serializers
/// write message indexes; None when `bytes` end inside it or it runs past 64 bits.
fn zigzag(bytes: &mut &[u8]) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, Int32Type, Int64Type};
    use prost_reflect::prost_types::{field_descriptor_proto, DescriptorProto, FieldDescriptorProto};

    fn field(
        name: &str,
        number: i32,
        kind: field_descriptor_proto::Type,
        type_name: Option<&str>,
    ) -> FieldDescriptorProto {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(field_descriptor_proto::Label::Optional as i32),
            r#type: Some(kind as i32),
            type_name: type_name.map(str::to_string),
            ..Default::default()
        }
    }

    /// `demo.Reading { int64 id = 1; string name = 2; google.protobuf.Timestamp at = 3;
    /// repeated int32 counts = 4; demo.Place place = 5 }`, as a FileDescriptorSet.
    fn descriptors() -> Vec<u8> {
        use field_descriptor_proto::Type;
        let mut counts = field("counts", 4, Type::Int32, None);
        counts.label = Some(field_descriptor_proto::Label::Repeated as i32);
        let file = FileDescriptorProto {
            name: Some("demo.proto".into()),
            package: Some("demo".into()),
            syntax: Some("proto3".into()),
            dependency: vec!["google/protobuf/timestamp.proto".into()],
            message_type: vec![
                DescriptorProto {
                    name: Some("Reading".into()),
                    field: vec![
                        field("id", 1, Type::Int64, None),
                        field("name", 2, Type::String, None),
                        field("at", 3, Type::Message, Some(".google.protobuf.Timestamp")),
                        counts,
                        field("place", 5, Type::Message, Some(".demo.Place")),
                    ],
                    ..Default::default()
                },
                DescriptorProto {
                    name: Some("Place".into()),
                    field: vec![field("city", 1, Type::String, None)],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        FileDescriptorSet { file: vec![file] }.encode_to_vec()
    }

    #[test]
    fn bare_messages_decode_to_columns_and_bad_ones_are_dead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.pb");
        std::fs::write(&path, descriptors()).unwrap();
        let options = ConnectorOptions(
            [("message", "demo.Reading"), ("schema.location", &format!("file://{}", path.display()))]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let mut decoder = ProtobufDecoder::new(&options, "t-value").unwrap();
        let schema = decoder.schema();
        let types: Vec<&DataType> = schema.fields().iter().map(|f| f.data_type()).collect();
        assert_eq!(types[0], &DataType::Int64);
        assert!(matches!(types[2], DataType::Timestamp(_, Some(_))));
        assert!(matches!(types[3], DataType::List(_)));
        let pool = decoder.message.parent_pool().clone();
        let reading = pool.get_message_by_name("demo.Reading").unwrap();
        let mut one = DynamicMessage::new(reading.clone());
        one.set_field_by_name("id", prost_reflect::Value::I64(7));
        one.set_field_by_name(
            "counts",
            prost_reflect::Value::List(vec![prost_reflect::Value::I32(1), prost_reflect::Value::I32(2)]),
        );
        let mut place = DynamicMessage::new(pool.get_message_by_name("demo.Place").unwrap());
        place.set_field_by_name("city", prost_reflect::Value::String("Oslo".into()));
        one.set_field_by_name("place", prost_reflect::Value::Message(place));
        let mut at = DynamicMessage::new(pool.get_message_by_name("google.protobuf.Timestamp").unwrap());
        at.set_field_by_name("seconds", prost_reflect::Value::I64(1_700_000_000));
        at.set_field_by_name("nanos", prost_reflect::Value::I32(5_000));
        one.set_field_by_name("at", prost_reflect::Value::Message(at));
        let first = one.encode_to_vec();
        let empty = DynamicMessage::new(reading).encode_to_vec();
        // A timestamp whose nanos are out of their range: its message alone is a dead letter.
        let mut wrong_at = DynamicMessage::new(pool.get_message_by_name("google.protobuf.Timestamp").unwrap());
        wrong_at.set_field_by_name("nanos", prost_reflect::Value::I32(-5));
        one.set_field_by_name("at", prost_reflect::Value::Message(wrong_at));
        let bad_at = one.encode_to_vec();
        let decoded = decoder.decode(&[&first, b"\xff\xff", &empty, &bad_at]).unwrap();
        assert_eq!(decoded.kept, vec![0, 2]);
        assert_eq!(decoded.dead.len(), 2);
        assert!(decoded.dead[1].1.contains("at: a timestamp's nanos"), "{:?}", decoded.dead);
        let batch = decoded.batch;
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[7, 0]);
        assert_eq!(batch.column(1).as_string::<i32>().value(1), "", "proto3 scalars read their default");
        assert!(batch.column(2).is_null(1), "an unset message is NULL");
        let at = batch.column(2).as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(at.value(0), 1_700_000_000_000_005);
        let counts = batch.column(3).as_list::<i32>();
        assert_eq!(counts.value(0).as_primitive::<Int32Type>().values(), &[1, 2]);
        assert_eq!(counts.value(1).len(), 0);
        assert_eq!(batch.column(4).as_string::<i32>().value(0), r#"{"city":"Oslo"}"#);
        assert!(batch.column(4).is_null(1));
        // What CREATE keeps decodes alike without the file.
        let kept: Vec<(String, String)> = decoder.settled_options();
        let mut again = kept.clone();
        again.push(("message".into(), "demo.Reading".into()));
        let mut restored = ProtobufDecoder::new(&ConnectorOptions(again.into_iter().collect()), "t-value").unwrap();
        assert_eq!(restored.decode(&[&first]).unwrap().batch, batch.slice(0, 1));
        // The message must be one the file holds.
        let mut wrong = options.clone();
        wrong.0.insert("message".into(), "demo.Nope".into());
        let e = ProtobufDecoder::new(&wrong, "t-value").err().unwrap();
        assert_eq!(e.state, SqlState::UNDEFINED_OBJECT);
        assert!(e.message.contains("demo.Reading, demo.Place"), "{}", e.message);
    }

    #[test]
    fn framing_reads_the_id_and_the_message_path() {
        let (id, path, body) = unframe(&[0, 0, 0, 0, 9, 0, 0xAA]).unwrap();
        assert_eq!((id, path, body), (9, vec![0], &[0xAA][..]));
        // [1, 0]: count 2 (zigzag 4), 1 (zigzag 2), 0.
        let (_, path, body) = unframe(&[0, 0, 0, 1, 0, 4, 2, 0, 0xBB]).unwrap();
        assert_eq!((path, body), (vec![1, 0], &[0xBB][..]));
        assert!(unframe(&[1, 0, 0, 0, 9, 0]).is_err());
        assert!(unframe(&[0, 0, 0, 0, 9, 0x80]).is_err(), "a varint cut short");
        assert!(unframe(&[0, 0, 0, 0, 9, 0x7f]).is_err(), "a negative count");
    }
}
