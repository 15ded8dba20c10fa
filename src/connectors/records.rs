//! Decoding text records (CSV lines, JSON values) into Arrow rows with arrow's decoders, for
//! every connector that reads them (files, Kafka): a batch of records is decoded at once; if
//! that fails, record by record, and the records that fail become dead letters
//! ([`super::dead_letter`]) instead of stopping the source.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;

use super::dead_letter::DeadLetter;

/// How text records are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEncoding {
    /// One CSV line per record (no header).
    Csv,
    /// One JSON object per record.
    Json,
}

type ArrowResult<T> = std::result::Result<T, ArrowError>;

/// Decodes `text` (whole records, each ending a line) as one batch of `schema`'s columns.
pub fn decode(
    encoding: TextEncoding,
    schema: &SchemaRef,
    text: &[u8],
    batch_size: usize,
) -> ArrowResult<Option<RecordBatch>> {
    let schema = Arc::clone(schema);
    match encoding {
        TextEncoding::Csv => {
            let mut decoder = datafusion::arrow::csv::ReaderBuilder::new(schema)
                .with_header(false)
                .with_batch_size(batch_size)
                .build_decoder();
            let used = decoder.decode(text)?;
            decoder.decode(&[])?;
            if used < text.len() {
                return Err(ArrowError::CsvError(format!("{} bytes left undecoded", text.len() - used)));
            }
            decoder.flush()
        }
        TextEncoding::Json => {
            let mut decoder =
                datafusion::arrow::json::ReaderBuilder::new(schema).with_batch_size(batch_size).build_decoder()?;
            let used = decoder.decode(text)?;
            if used < text.len() {
                return Err(ArrowError::JsonError(format!("{} bytes left undecoded", text.len() - used)));
            }
            decoder.flush()
        }
    }
}

/// Decodes each of `records` (a position naming it, its bytes) on its own: the rows of those
/// that decode, in order, and a dead letter for each that does not (blank records are passed
/// over). `keep` says which decoded records to keep, by index (a Kafka source adds the
/// records' metadata to the rows it keeps).
pub fn decode_each<'a>(
    encoding: TextEncoding,
    schema: &SchemaRef,
    records: impl Iterator<Item = (String, &'a [u8])>,
) -> (Vec<(usize, RecordBatch)>, Vec<DeadLetter>) {
    let mut good = Vec::new();
    let mut dead = Vec::new();
    let read_at = chrono::Utc::now().timestamp_micros();
    for (i, (position, record)) in records.enumerate() {
        if record.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = if record.ends_with(b"\n") { record.to_vec() } else { [record, b"\n"].concat() };
        match decode(encoding, schema, &line, 1) {
            Ok(Some(batch)) if batch.num_rows() == 1 => good.push((i, batch)),
            Ok(Some(batch)) => dead.push(DeadLetter {
                position,
                error: format!("one record holds {} rows", batch.num_rows()),
                raw: raw_prefix(record),
                read_at_micros: read_at,
            }),
            Ok(None) => {}
            Err(e) => dead.push(DeadLetter {
                position,
                error: e.to_string(),
                raw: raw_prefix(record),
                read_at_micros: read_at,
            }),
        }
    }
    (good, dead)
}

/// Dead letters keep at most this many bytes of their record.
pub const RAW_PREFIX: usize = 4096;

/// A record as a dead letter keeps it: its text, cut at [`RAW_PREFIX`] bytes.
pub fn raw_prefix(record: &[u8]) -> String {
    let cut = &record[..record.len().min(RAW_PREFIX)];
    String::from_utf8_lossy(cut).trim_end_matches(['\r', '\n']).to_string()
}
