//! Which connector a source's or sink's `connector = '...'` option names. Every connector is
//! made here, from its options with secret references resolved ([`secrets::resolved`]), so
//! no connector reads a reference itself.

use datafusion::arrow::datatypes::SchemaRef;

use super::file::FileReader;
use super::kafka::{KafkaReader, KafkaSink};
use super::nexmark::NexmarkReader;
use super::postgres::PostgresSink;
use super::sink::{SinkWriter, WriterSpec};
use super::source::SourceReader;
use crate::catalog::options::ConnectorOptions;
use crate::catalog::secrets;
use crate::error::{Result, SqlState, WeirError};

/// A reader for a source with `options`, the columns it declares (if any) and its primary
/// key's columns (a table fed by a connector may have one); fails (and so CREATE fails) on
/// unknown connectors and bad options.
pub fn reader(
    options: &ConnectorOptions,
    declared: Option<SchemaRef>,
    primary_key: &[String],
) -> Result<Box<dyn SourceReader>> {
    let options = &*secrets::resolved(options)?;
    super::source::BadData::of(options)?;
    if options.get("format").is_some_and(|f| f.eq_ignore_ascii_case("upsert"))
        && !options.get("connector").is_some_and(|c| c.eq_ignore_ascii_case("kafka"))
    {
        return Err(WeirError::unsupported("FORMAT UPSERT is for Kafka tables"));
    }
    match options.get("connector").map(str::to_ascii_lowercase).as_deref() {
        Some("nexmark") => Ok(Box::new(NexmarkReader::new(options)?)),
        Some("file") => Ok(Box::new(FileReader::new(options, declared)?)),
        Some("kafka") => Ok(Box::new(KafkaReader::new(options, declared, primary_key)?)),
        Some(other) => Err(WeirError::unsupported(format!(
            "connector '{other}' is not supported yet (nexmark, file and kafka are)"
        ))),
        None => Err(WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "a source needs WITH (connector = '...')")),
    }
}

/// The writer `spec` says through the connector `options` name; fails (and so CREATE SINK
/// fails) on unknown connectors and bad options.
pub fn sink_writer(options: &ConnectorOptions, spec: &WriterSpec) -> Result<Box<dyn SinkWriter>> {
    let options = &*secrets::resolved(options)?;
    match options.get("connector").map(str::to_ascii_lowercase).as_deref() {
        Some("kafka") => Ok(Box::new(KafkaSink::new(options, spec)?)),
        Some("jdbc" | "postgres") => Ok(Box::new(PostgresSink::new(options, spec)?)),
        Some(other) => {
            Err(WeirError::unsupported(format!("sink connector '{other}' is not supported yet (kafka and jdbc are)")))
        }
        None => Err(WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "a sink needs WITH (connector = '...')")),
    }
}
