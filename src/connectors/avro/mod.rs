//! `ENCODE AVRO`: Avro values decoded into Arrow batches and rows encoded as Avro, by arrow-avro
//! (the arrow-rs crate of Weir's arrow version), never row by row through JSON.
//!
//! Two ways to know a value's schema:
//! - **A schema registry** (`schema.registry = 'http://...'`, [`crate::connectors::schema_registry`]): values are in
//!   Confluent's wire format (a zero byte, the writer schema's 4-byte id, the Avro body). Each
//!   writer schema is fetched by id once and *resolved* against the **reader schema** (Avro's
//!   schema resolution: fields matched by name, a field the writer lacks takes the reader's
//!   default, one the reader lacks is skipped, `int` promotes to `long`, ...), so messages
//!   written with older or newer schemas decode to the same columns. The reader schema is the
//!   `schema` option, or else the subject's latest schema when the source is created, which
//!   is then kept as the `schema` option ([`AvroDecoder::reader_schema`]), so a restart decodes
//!   as before whatever the registry holds by then.
//! - **One fixed schema** (`schema = '<Avro JSON>'`, no registry): values are bare Avro bodies.
//!
//! A value whose schema id the registry does not have, whose writer schema cannot be resolved
//! against the reader schema, or whose body does not decode is a dead letter; a registry that
//! cannot be asked is an error with SQLSTATE 08001, and the source retries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow_avro::reader::{Decoder, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, FingerprintStrategy, SchemaStore};
use arrow_avro::writer::format::AvroSoeFormat;
use arrow_avro::writer::{Encoder, WriterBuilder};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};

use crate::catalog::options::ConnectorOptions;
use crate::connectors::schema_registry::{Form, Lookup, SchemaRegistry};
use crate::connectors::value_decoder::{Decoded, ValueDecoder};
use crate::error::{Result, SqlState, WeirError};

/// The options `ENCODE AVRO (...)` takes besides the registry's.
pub const OPTIONS: &[&str] = &["schema"];

/// Rows a decoder gathers before it hands over a batch.
const BATCH_ROWS: usize = 8192;

/// The id a fixed schema's bodies are decoded under (framed as if a registry had given it).
const FIXED: u32 = 0;

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// Decodes one topic's (or file's) Avro values.
pub struct AvroDecoder {
    registry: Option<SchemaRegistry>,
    reader_schema: String,
    /// The Arrow columns the reader schema decodes to.
    schema: SchemaRef,
    /// Writer schemas by id (a registry's), or the fixed schema under [`FIXED`].
    writers: BTreeMap<u32, String>,
    /// Writer schemas that cannot be resolved against the reader schema, and why.
    unresolvable: BTreeMap<u32, String>,
    /// Ids the registry does not have.
    missing: BTreeSet<u32>,
    /// Made from `writers` when needed, dropped when they change or a value fails.
    decoder: Option<Decoder>,
}

impl AvroDecoder {
    /// The decoder `options` describe, for values of `subject` (`<topic>-value`) when the
    /// reader schema is not given. 22023 for a schema that is not Avro or options that do not
    /// name one; 08001 when the registry cannot be asked; 42704 when it has no such subject.
    pub fn new(options: &ConnectorOptions, subject: &str) -> Result<AvroDecoder> {
        let registry = SchemaRegistry::from_options(options)?;
        let reader_schema = match (options.get("schema"), &registry) {
            (Some(schema), _) => schema.to_string(),
            (None, Some(registry)) => {
                let hint = "Register the topic's value schema, or give ENCODE AVRO (schema = '...').";
                registry.reader(subject, Form::Text, "AVRO", hint)?.schema
            }
            (None, None) => {
                return Err(invalid(
                    "ENCODE AVRO needs schema.registry = 'http://...' or schema = '<Avro schema JSON>'".into(),
                ))
            }
        };
        let mut writers = BTreeMap::new();
        if registry.is_none() {
            writers.insert(FIXED, reader_schema.clone());
        }
        let schema = decoder_of(&reader_schema, &[(FIXED, reader_schema.clone())])
            .map_err(|e| invalid(format!("ENCODE AVRO: the schema cannot be read: {e}")))?
            .schema();
        Ok(AvroDecoder {
            registry,
            reader_schema,
            schema,
            writers,
            unresolvable: BTreeMap::new(),
            missing: BTreeSet::new(),
            decoder: None,
        })
    }

    /// Whether schema id `id` can be decoded: fetched from the registry the first time (and
    /// tried against the reader schema); Err(why) when it cannot.
    fn known(&mut self, id: u32) -> Result<std::result::Result<(), String>> {
        if self.writers.contains_key(&id) {
            return Ok(Ok(()));
        }
        if let Some(why) = self.unresolvable.get(&id) {
            return Ok(Err(why.clone()));
        }
        if self.missing.contains(&id) {
            return Ok(Err(format!("schema id {id} is not in the schema registry")));
        }
        let registry = self.registry.as_ref().expect("a registry frames its values");
        match registry.by_id(id, Form::Text).map(|found| found.and_then(|r| r.of_kind("AVRO"))) {
            Ok(Lookup::Found(registered)) => {
                let schema = registered.schema;
                if let Err(e) = decoder_of(&self.reader_schema, &[(id, schema.clone())]) {
                    let why = format!("schema id {id} cannot be read as the source's schema: {e}");
                    self.unresolvable.insert(id, why.clone());
                    return Ok(Err(why));
                }
                self.writers.insert(id, schema);
                self.decoder = None;
                Ok(Ok(()))
            }
            Ok(Lookup::Missing) => {
                self.missing.insert(id);
                Ok(Err(format!("schema id {id} is not in the schema registry")))
            }
            Ok(Lookup::Unusable(why)) => {
                let why = format!("schema id {id}: {why}");
                self.unresolvable.insert(id, why.clone());
                Ok(Err(why))
            }
            Err(e) => Err(e.while_reading(&registry.url)),
        }
    }

    /// Feeds `values` to the decoder, gathering its batches; the first error stops it.
    fn decode_all(
        &mut self,
        values: &[(usize, std::borrow::Cow<'_, [u8]>)],
        batches: &mut Vec<RecordBatch>,
    ) -> std::result::Result<(), String> {
        if values.is_empty() {
            return Ok(());
        }
        if self.decoder.is_none() {
            let writers: Vec<(u32, String)> = self.writers.iter().map(|(id, s)| (*id, s.clone())).collect();
            self.decoder = Some(decoder_of(&self.reader_schema, &writers).map_err(|e| e.to_string())?);
        }
        let decoder = self.decoder.as_mut().expect("made");
        // Rows decoded so far: those handed over plus those in the decoder's batch. Each value
        // must add exactly one: a frame without a body adds none (and its body would be taken
        // from the next value), a value of two frames adds two.
        let mut flushed = 0usize;
        let decoded = |flushed: usize, decoder: &Decoder| flushed + BATCH_ROWS - decoder.capacity();
        for (_, value) in values {
            let before = decoded(flushed, decoder);
            let mut at = 0;
            while at < value.len() {
                let used = decoder.decode(&value[at..]).map_err(|e| e.to_string())?;
                at += used;
                if decoder.batch_is_full() {
                    let batch = decoder.flush().map_err(|e| e.to_string())?;
                    flushed += batch.as_ref().map_or(0, RecordBatch::num_rows);
                    batches.extend(batch);
                } else if used == 0 {
                    return Err("the value ends inside a field".into());
                }
            }
            match decoded(flushed, decoder) - before {
                1 => {}
                0 => return Err("the value holds a schema id but no body".into()),
                n => return Err(format!("the value holds {n} values")),
            }
        }
        batches.extend(decoder.flush().map_err(|e| e.to_string())?);
        Ok(())
    }
}

impl ValueDecoder for AvroDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// Decodes `values`; 08001 when a schema id is new and the registry cannot be asked for it
    /// (the values are to be read again later).
    fn decode(&mut self, values: &[&[u8]]) -> Result<Decoded> {
        let mut dead: Vec<(usize, String)> = Vec::new();
        let mut framed: Vec<(usize, std::borrow::Cow<'_, [u8]>)> = Vec::with_capacity(values.len());
        for (i, value) in values.iter().enumerate() {
            if self.registry.is_none() {
                let mut bytes = Vec::with_capacity(value.len() + 5);
                bytes.push(0);
                bytes.extend_from_slice(&FIXED.to_be_bytes());
                bytes.extend_from_slice(value);
                framed.push((i, bytes.into()));
                continue;
            }
            if value.len() < 5 || value[0] != 0 {
                dead.push((
                    i,
                    "not in the schema registry's wire format (a zero byte, then a 4-byte schema id)".into(),
                ));
                continue;
            }
            let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
            match self.known(id)? {
                Ok(()) => framed.push((i, (*value).into())),
                Err(why) => dead.push((i, why)),
            }
        }
        let (mut batches, mut kept) = (Vec::new(), Vec::new());
        let whole = self.decode_all(&framed, &mut batches);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if whole.is_ok() && rows == framed.len() {
            kept = framed.iter().map(|(i, _)| *i).collect();
        } else {
            // One bad value spoils the decoder's batch: each value alone, to find it.
            batches.clear();
            self.decoder = None;
            for (i, value) in &framed {
                let mut one = Vec::new();
                match self.decode_all(&[(*i, value.clone())], &mut one) {
                    Ok(()) => {
                        batches.extend(one);
                        kept.push(*i);
                    }
                    Err(why) => {
                        self.decoder = None;
                        dead.push((*i, format!("the Avro value does not decode: {why}")));
                    }
                }
            }
        }
        dead.sort_by_key(|(i, _)| *i);
        let batch = datafusion::arrow::compute::concat_batches(&self.schema, &batches)?;
        Ok(Decoded { batch, kept, dead })
    }

    /// The reader schema (`schema`).
    fn settled_options(&self) -> Vec<(String, String)> {
        vec![("schema".to_string(), self.reader_schema.clone())]
    }
}

/// A decoder of Confluent-framed values by `writers` into `reader_schema`'s columns.
fn decoder_of(reader_schema: &str, writers: &[(u32, String)]) -> std::result::Result<Decoder, String> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    for (id, schema) in writers {
        store.set(Fingerprint::Id(*id), AvroSchema::new(schema.clone())).map_err(|e| e.to_string())?;
    }
    let mut builder = ReaderBuilder::new().with_batch_size(BATCH_ROWS).with_writer_schema_store(store);
    builder = builder.with_reader_schema(AvroSchema::new(reader_schema.to_string()));
    if let Some((id, _)) = writers.first() {
        builder = builder.with_active_fingerprint(Fingerprint::Id(*id));
    }
    builder.build_decoder().map_err(|e| e.to_string())
}

/// How a sink's schemas are named in the registry (`schema.registry.name.strategy`), as
/// Confluent's serializers name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameStrategy {
    /// `<topic>-value` and `<topic>-key` (the default).
    Topic,
    /// The record's name.
    Record,
    /// `<topic>-<record name>`.
    TopicRecord,
}

/// One side of a sink's messages (value or key) as Avro: its columns, their schema, and the
/// schema's id once registered.
struct Side {
    schema: SchemaRef,
    avro: String,
    subject: String,
    id: Option<u32>,
}

/// Rows written as Avro values (and keys) of a Kafka topic through a schema registry, in
/// Confluent's wire format. The schemas are made from the columns (timestamps in
/// microseconds, which Avro libraries read) and registered under their subjects
/// the first time they are needed ([`AvroSink::register`]: CREATE SINK's check, or a
/// restarted sink's first message).
pub struct AvroSink {
    registry: SchemaRegistry,
    value: Side,
    key: Option<Side>,
}

/// The registry and naming options a sink with `ENCODE AVRO` takes.
pub const SINK_OPTIONS: &[&str] = &["schema.registry.name.strategy", "schema.registry.record.name"];

/// `name` as an Avro name (letters, digits and `_`, not starting with a digit).
fn avro_name(name: &str) -> String {
    let mut out: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert(0, '_');
    }
    out
}

/// `schema` with nanosecond timestamps as microseconds.
fn writable(schema: &Schema) -> SchemaRef {
    use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(TimeUnit::Nanosecond, tz) => {
                f.as_ref().clone().with_data_type(DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

impl AvroSink {
    /// The Avro side of a sink to `topic` of rows `value`, keyed by `key` (UPSERT) or not.
    pub fn new(options: &ConnectorOptions, topic: &str, value: &Schema, key: Option<&Schema>) -> Result<AvroSink> {
        let registry = SchemaRegistry::from_options(options)?
            .ok_or_else(|| invalid("a Kafka sink's ENCODE AVRO needs schema.registry = 'http://...'".into()))?;
        let strategy = match options.get("schema.registry.name.strategy").map(str::to_ascii_lowercase).as_deref() {
            None | Some("topic_name_strategy") => NameStrategy::Topic,
            Some("record_name_strategy") => NameStrategy::Record,
            Some("topic_record_name_strategy") => NameStrategy::TopicRecord,
            Some(other) => {
                return Err(invalid(format!(
                    "schema.registry.name.strategy must be topic_name_strategy, record_name_strategy or                      topic_record_name_strategy, not '{other}'"
                )))
            }
        };
        let record = avro_name(options.get("schema.registry.record.name").unwrap_or(topic));
        let side = |columns: &Schema, record: String, suffix: &str| -> Result<Side> {
            let schema = writable(columns);
            let subject = match strategy {
                NameStrategy::Topic => format!("{topic}-{suffix}"),
                NameStrategy::Record => record.clone(),
                NameStrategy::TopicRecord => format!("{topic}-{record}"),
            };
            Ok(Side { avro: avro_schema_of(&schema, &record)?, schema, subject, id: None })
        };
        Ok(AvroSink {
            value: side(value, record.clone(), "value")?,
            key: key.map(|k| side(k, format!("{record}_key"), "key")).transpose()?,
            registry,
        })
    }

    /// Registers the schemas not registered yet: 08001 when the registry cannot be asked,
    /// 22023 when it refuses.
    pub fn register(&mut self) -> Result<()> {
        for side in std::iter::once(&mut self.value).chain(self.key.as_mut()) {
            if side.id.is_none() {
                let id =
                    self.registry.register(&side.subject, &side.avro).map_err(|e| e.into_weir(&self.registry.url))?;
                side.id = Some(id);
            }
        }
        Ok(())
    }

    /// Each row of `batch` as an Avro value.
    pub fn values(&mut self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        self.register()?;
        encode_rows(&self.value, batch)
    }

    /// Each row of `batch` (the key's columns) as an Avro key.
    pub fn keys(&mut self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
        self.register()?;
        encode_rows(self.key.as_ref().expect("a keyed sink has a key schema"), batch)
    }
}

fn encode_rows(side: &Side, batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let columns = batch
        .columns()
        .iter()
        .zip(side.schema.fields())
        .map(|(c, f)| datafusion::arrow::compute::cast(c, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let batch = RecordBatch::try_new(Arc::clone(&side.schema), columns)?;
    let mut encoder = encoder(&side.schema, &side.avro, side.id.expect("registered"))?;
    encoder.encode(&batch).map_err(|e| WeirError::internal(format!("Avro encoding failed: {e}")))?;
    Ok(encoder.flush().iter().map(|row| row.to_vec()).collect())
}

/// The Avro schema (JSON) rows of `schema` are written with, its record named `name`.
pub fn avro_schema_of(schema: &Schema, name: &str) -> Result<String> {
    let mut metadata = schema.metadata().clone();
    metadata.insert(arrow_avro::schema::AVRO_NAME_METADATA_KEY.to_string(), name.to_string());
    let named = Schema::new_with_metadata(schema.fields().clone(), metadata);
    let avro = AvroSchema::try_from(&named)
        .map_err(|e| WeirError::unsupported(format!("these columns cannot be written as Avro: {e}")))?;
    Ok(avro.json_string)
}

/// An encoder of rows of `schema` into values framed with schema id `id` (Confluent's wire
/// format), one per row.
pub fn encoder(schema: &Schema, avro_schema: &str, id: u32) -> Result<Encoder> {
    let mut metadata = schema.metadata().clone();
    metadata.insert(arrow_avro::schema::SCHEMA_METADATA_KEY.to_string(), avro_schema.to_string());
    let with_schema = Schema::new_with_metadata(schema.fields().clone(), metadata);
    WriterBuilder::new(with_schema)
        .with_fingerprint_strategy(FingerprintStrategy::Id(id))
        .build_encoder::<AvroSoeFormat>()
        .map_err(|e| WeirError::unsupported(format!("these columns cannot be written as Avro: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field};

    fn options(pairs: &[(&str, &str)]) -> ConnectorOptions {
        ConnectorOptions(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn encoded_rows_decode_back_and_bad_values_are_dead() {
        let schema =
            Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]);
        let avro = avro_schema_of(&schema, "Row").unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        let mut encoder = encoder(&schema, &avro, 7).unwrap();
        encoder.encode(&batch).unwrap();
        let rows: Vec<Vec<u8>> = encoder.flush().iter().map(|r| r.to_vec()).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(&rows[0][..5], &[0, 0, 0, 0, 7], "Confluent framing with the id");
        // Bare bodies under a fixed schema: the frame taken off.
        let mut decoder = AvroDecoder::new(&options(&[("schema", &avro)]), "t-value").unwrap();
        let bodies: Vec<&[u8]> = vec![&rows[0][5..], b"\x01", &rows[1][5..], &rows[2][5..]];
        let decoded = decoder.decode(&bodies).unwrap();
        assert_eq!(decoded.kept, vec![0, 2, 3]);
        assert_eq!(decoded.dead.len(), 1);
        assert_eq!(decoded.dead[0].0, 1);
        let ids = decoded.batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values(), &[1, 2, 3]);
        assert!(decoded.batch.column(1).is_null(1));
    }

    #[test]
    fn a_fixed_schema_is_needed_without_a_registry() {
        assert_eq!(AvroDecoder::new(&options(&[]), "t-value").err().unwrap().state, SqlState::INVALID_PARAMETER_VALUE);
        let bad = AvroDecoder::new(&options(&[("schema", "{\"type\": \"nonsense\"}")]), "t-value");
        assert_eq!(bad.err().unwrap().state, SqlState::INVALID_PARAMETER_VALUE);
    }
}
