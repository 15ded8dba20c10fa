//! Decoding text records (CSV lines, JSON values) into Arrow rows with arrow's decoders, for
//! every connector that reads them (files, Kafka): a batch of records is decoded at once; if
//! that fails, record by record, and the records that fail become dead letters
//! ([`super::dead_letter`]) instead of stopping the source. A JSON record with an object,
//! array, number or boolean where a text column (a `jsonb` one) is gets that value's JSON text
//! there.

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

/// Decodes `text` (whole records, each ending a line) as one batch of `schema`'s columns; in
/// JSON, the values of the `json` columns are taken as their JSON text ([`with_text_values`]).
pub fn decode(
    encoding: TextEncoding,
    schema: &SchemaRef,
    json: &[String],
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
            let rewritten: Option<Vec<u8>> = (!json.is_empty()).then(|| {
                let mut out = Vec::with_capacity(text.len() + text.len() / 8);
                for line in text.split_inclusive(|b| *b == b'\n') {
                    match with_text_values(&schema, json, line) {
                        Some(record) => out.extend_from_slice(&record),
                        None => out.extend_from_slice(line),
                    }
                }
                out
            });
            let text = rewritten.as_deref().unwrap_or(text);
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
/// records' metadata to the rows it keeps). A JSON record the decoder refuses because a text
/// column holds an object, array, number or boolean is read with that value's JSON text.
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
        let line = if record.ends_with(b"\n") { record.to_vec() } else { [record, b"\n"].concat() };
        let decoded = match decode(encoding, schema, json, &line, 1) {
            Err(e) if encoding == TextEncoding::Json && json.is_empty() => match with_text_values(schema, json, record) {
                Some(coerced) => decode(encoding, schema, json, &coerced, 1).map_err(|_| e),
                None => Err(e),
            },
            other => other,
        };
        match decoded {
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

/// `record` (one JSON object) as one line with the values of `schema`'s text columns that are
/// not strings given as their JSON text: a `json` column's value (any but null) as `jsonb`
/// writes it, another text column's object, array, number or boolean as written. None when
/// it is not a JSON object or, without `json` columns, nothing changed.
fn with_text_values(schema: &SchemaRef, json: &[String], record: &[u8]) -> Option<Vec<u8>> {
    use crate::types::json::Json;
    use datafusion::arrow::datatypes::DataType;
    let text = std::str::from_utf8(record).ok()?;
    let Json::Object(mut members) = Json::parse(text.trim_end(), "json").ok()? else { return None };
    let is_text = |name: &str| {
        schema
            .field_with_name(name)
            .is_ok_and(|f| matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
    };
    let mut changed = false;
    for (key, value) in members.iter_mut() {
        let taken = match value {
            Json::Null => None,
            _ if json.contains(key) => Some(value.clone().to_jsonb().to_jsonb_text()),
            Json::String(_) => None,
            _ if is_text(key) => Some(value.to_jsonb_text()),
            _ => None,
        };
        if let Some(taken) = taken {
            *value = Json::String(taken);
            changed = true;
        }
    }
    if !changed && json.is_empty() {
        return None;
    }
    let mut line = Json::Object(members).to_jsonb_text().into_bytes();
    line.push(b'\n');
    Some(line)
}

/// Dead letters keep at most this many bytes of their record.
pub const RAW_PREFIX: usize = 4096;

/// A record as a dead letter keeps it: its text, cut at [`RAW_PREFIX`] bytes.
pub fn raw_prefix(record: &[u8]) -> String {
    let cut = &record[..record.len().min(RAW_PREFIX)];
    String::from_utf8_lossy(cut).trim_end_matches(['\r', '\n']).to_string()
}
