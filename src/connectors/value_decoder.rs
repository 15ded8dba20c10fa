//! Values in a binary encoding that a schema describes (`ENCODE AVRO`, `ENCODE PROTOBUF`),
//! decoded a chunk at a time into Arrow rows: the one trait the Kafka source reads them
//! through ([`ValueDecoder`]), and the one place that picks the decoder an `ENCODE` names
//! ([`for_encoding`]) and checks that its options belong to it.
//!
//! Invariants every decoder keeps: each value gives one row or one dead letter, never both and
//! never neither; a registry that cannot be asked is an error with SQLSTATE 08001 (the chunk is
//! read again later), never a dead letter; the columns a decoder gives do not change for the
//! life of the source, because what fixed them at CREATE is kept in the source's options
//! ([`ValueDecoder::settled_options`]). Text encodings (JSON, CSV) do not come here: they are
//! [`crate::connectors::records`].

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use crate::catalog::options::ConnectorOptions;
use crate::connectors::{avro, protobuf, schema_registry};
use crate::error::{Result, SqlState, WeirError};

/// What decoding a chunk's values gives: the rows of the values that decoded (`kept`: their
/// indices), and why each other one did not (`dead`, by index, in order).
pub struct Decoded {
    pub batch: RecordBatch,
    pub kept: Vec<usize>,
    pub dead: Vec<(usize, String)>,
}

/// A decoder of one topic's values.
pub trait ValueDecoder: Send {
    /// The columns values decode to (every field of the value's schema, in its order).
    fn schema(&self) -> SchemaRef;

    /// Decodes `values`; 08001 when the schema registry is needed and cannot be asked.
    fn decode(&mut self, values: &[&[u8]]) -> Result<Decoded>;

    /// The options that fixed this decoder's columns at CREATE (a schema taken from the
    /// registry then), kept with the source so that a restart decodes as before.
    fn settled_options(&self) -> Vec<(String, String)>;
}

/// Whether `key` is an option of some `ENCODE ... (...)` with a schema.
pub fn is_option(key: &str) -> bool {
    avro::OPTIONS.contains(&key) || protobuf::OPTIONS.contains(&key) || schema_registry::OPTIONS.contains(&key)
}

/// The decoder `ENCODE <encode>` takes for values of `subject` (`<topic>-value`), if `encode`
/// is one with a schema; None for a text encoding, which must then have no schema options.
/// 22023 for an option of another encoding.
pub fn for_encoding(encode: &str, options: &ConnectorOptions, subject: &str) -> Result<Option<Box<dyn ValueDecoder>>> {
    let own: &[&str] = match encode {
        "avro" => avro::OPTIONS,
        "protobuf" => protobuf::OPTIONS,
        _ => &[],
    };
    let registry = matches!(encode, "avro" | "protobuf");
    if let Some(stray) = options.0.keys().find(|k| {
        is_option(k) && !own.contains(&k.as_str()) && !(registry && schema_registry::OPTIONS.contains(&k.as_str()))
    }) {
        return Err(WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("option {stray} is not one of ENCODE {}", encode.to_ascii_uppercase()),
        )
        .with_hint(
            "ENCODE AVRO takes schema; ENCODE PROTOBUF message, schema.location and schema.descriptor; \
             both take the schema.registry options",
        ));
    }
    Ok(match encode {
        "avro" => Some(Box::new(avro::AvroDecoder::new(options, subject)?)),
        "protobuf" => Some(Box::new(protobuf::ProtobufDecoder::new(options, subject)?)),
        _ => None,
    })
}
