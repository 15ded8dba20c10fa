//! Decoding text records (CSV lines, JSON values) into Arrow rows with arrow's decoders, for
//! every connector that reads them (files, Kafka): a batch of records is decoded at once; if
//! that fails, record by record, and the records that fail become dead letters
//! ([`crate::catalog::dead_letter`]) instead of stopping the source. A `json` / `jsonb` column of a
//! JSON source takes its field's value, whatever it is, as JSON text ([`json_values_as_text`]).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;

use crate::catalog::dead_letter::DeadLetter;

/// How text records are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEncoding {
    /// One CSV line per record (no header).
    Csv,
    /// One JSON object per record.
    Json,
}

type ArrowResult<T> = std::result::Result<T, ArrowError>;

/// The columns a text source reads: `declared` without its declared types (the rows' schema),
/// and the names of its `json` / `jsonb` columns, whose values are read as JSON text.
pub fn text_columns(declared: &SchemaRef) -> (SchemaRef, Vec<String>) {
    use crate::types::pg_type::DeclaredType;
    let json = declared
        .fields()
        .iter()
        .filter(|f| DeclaredType::of(f).is_some_and(|d| d.is_json()))
        .map(|f| f.name().clone())
        .collect();
    (Arc::new(DeclaredType::strip(declared)), json)
}

/// Decodes `text` (whole records, each ending a line) as one batch of `schema`'s columns. JSON
/// records with `json` columns are first given [`json_values_as_text`] by their reader.
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
/// records' metadata to the rows it keeps). JSON records get [`json_values_as_text`] for the
/// `json` columns first.
pub fn decode_each<'a>(
    encoding: TextEncoding,
    schema: &SchemaRef,
    json: &[String],
    records: impl Iterator<Item = (String, &'a [u8])>,
) -> (Vec<(usize, RecordBatch)>, Vec<DeadLetter>) {
    let mut good = Vec::new();
    let mut dead = Vec::new();
    let read_at = chrono::Utc::now().timestamp_micros();
    for (i, (position, record)) in records.enumerate() {
        if record.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let rewritten = match encoding {
            TextEncoding::Json => json_values_as_text(json, record),
            TextEncoding::Csv => None,
        };
        let record_text = rewritten.as_deref().unwrap_or(record);
        let line = if record_text.ends_with(b"\n") { record_text.to_vec() } else { [record_text, b"\n"].concat() };
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

/// `record` (one JSON object) as one line with the value of each of its `json` columns (any
/// but null: an object, an array, a string, a number) replaced by a JSON string holding that
/// value's text as `jsonb` writes it, which the decoder stores as the column's text. None when
/// there are no `json` columns, or it is not a JSON object (the decoder then says why).
/// Sources without `json` columns decode exactly as before they existed.
pub fn json_values_as_text(json: &[String], record: &[u8]) -> Option<Vec<u8>> {
    use crate::types::json::Json;
    if json.is_empty() {
        return None;
    }
    let text = std::str::from_utf8(record).ok()?;
    let Json::Object(mut members) = Json::parse(text.trim_end(), "json").ok()? else { return None };
    for (key, value) in members.iter_mut() {
        if json.contains(key) && !matches!(value, Json::Null) {
            *value = Json::String(value.clone().to_jsonb().to_jsonb_text());
        }
    }
    let mut line = Json::Object(members).to_jsonb_text().into_bytes();
    line.push(b'\n');
    Some(line)
}

/// [`json_values_as_text`] of each line of `text` (JSON lines, as files hold them); None
/// without `json` columns.
pub fn json_lines_as_text(json: &[String], text: &[u8]) -> Option<Vec<u8>> {
    if json.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive(|b| *b == b'\n') {
        match json_values_as_text(json, line) {
            Some(record) => out.extend_from_slice(&record),
            None => out.extend_from_slice(line),
        }
    }
    Some(out)
}

/// Dead letters keep at most this many bytes of their record.
pub const RAW_PREFIX: usize = 4096;

/// A record as a dead letter keeps it: its text, cut at [`RAW_PREFIX`] bytes.
pub fn raw_prefix(record: &[u8]) -> String {
    let cut = &record[..record.len().min(RAW_PREFIX)];
    String::from_utf8_lossy(cut).trim_end_matches(['\r', '\n']).to_string()
}
