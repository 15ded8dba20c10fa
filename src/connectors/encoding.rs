//! Which decoder a source's `ENCODE <encoding> (...)` names, and whether its options belong to
//! it: the one place the Kafka source (its only caller) turns an encoding's name into a
//! [`ValueDecoder`]. Text encodings (JSON, CSV) have none: they are
//! [`crate::connectors::records`]. Kept apart from [`crate::connectors::value_decoder`], which
//! the decoders themselves import, so that imports only point down.

use crate::catalog::options::ConnectorOptions;
use crate::connectors::value_decoder::ValueDecoder;
use crate::connectors::{avro, protobuf, schema_registry};
use crate::error::{Result, SqlState, WeirError};

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
