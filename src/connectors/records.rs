//! Decoding text records (CSV lines, JSON values) into Arrow rows with arrow's decoders, for
//! every connector that reads them (files, Kafka): a batch of records is decoded at once; if
//! that fails, record by record, and the records that fail become dead letters
//! ([`crate::catalog::dead_letter`]) instead of stopping the source. A `json` / `jsonb` column of a
//! JSON source takes its field's value, whatever it is, as JSON text ([`json_values_as_text`]);
//! another text column a number or boolean as its text. Numeric columns are decoded as text and
//! read by [`numeric_text`], not by arrow-cast's decimal parser (see there why). JSON records
//! that are flat objects go through [`crate::connectors::flat_json`] first, in one pass.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Decimal128Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;

use crate::catalog::dead_letter::DeadLetter;
use crate::types::numeric_text;

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
    let numeric = numeric_columns(schema);
    if numeric.is_empty() {
        return decode_as(encoding, schema, text, batch_size);
    }
    // Numeric columns are read as text, then as numbers by `numeric_text`.
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for &(i, _, _) in &numeric {
        fields[i] = fields[i].clone().with_data_type(DataType::Utf8);
    }
    let as_text = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let Some(batch) = decode_as(encoding, &as_text, text, batch_size)? else { return Ok(None) };
    let mut columns = batch.columns().to_vec();
    for (i, precision, scale) in numeric {
        columns[i] = Arc::new(read_numeric(columns[i].as_string::<i32>(), precision, scale, schema.field(i).name())?);
    }
    RecordBatch::try_new(Arc::clone(schema), columns).map(Some)
}

/// The numeric columns of `schema`: their positions, precisions and scales.
fn numeric_columns(schema: &SchemaRef) -> Vec<(usize, u8, i8)> {
    let mut numeric = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        if let DataType::Decimal128(precision, scale) = field.data_type() {
            numeric.push((i, *precision, *scale));
        }
    }
    numeric
}

/// A numeric column's texts as its values (`numeric_text::parse`); the first that is not one
/// fails the batch, naming the column and the text.
fn read_numeric(texts: &StringArray, precision: u8, scale: i8, column: &str) -> ArrowResult<Decimal128Array> {
    let values = texts
        .iter()
        .map(|text| match text {
            None => Ok(None),
            Some(text) => numeric_text::parse(text, precision, scale)
                .map(Some)
                .map_err(|e| ArrowError::ParseError(format!("column {column}: {e}: \"{text}\""))),
        })
        .collect::<ArrowResult<Decimal128Array>>()?;
    values.with_precision_and_scale(precision, scale)
}

/// Decodes `text` with arrow's CSV or JSON decoder into `schema`'s columns.
fn decode_as(
    encoding: TextEncoding,
    schema: &SchemaRef,
    text: &[u8],
    batch_size: usize,
) -> ArrowResult<Option<RecordBatch>> {
    let schema = Arc::clone(schema);
    match encoding {
        TextEncoding::Csv => {
            // arrow-csv checks the UTF-8 of a batch's fields joined, once their delimiters and
            // quotes are gone, and then reads each field as text: `1.5\xc3,\xa9x` became two
            // fields of broken UTF-8 (a panic in a debug build, an invalid string column in a
            // release). Fields are pieces of the text cut at ASCII bytes, so a text that is
            // UTF-8 has fields that are.
            if let Err(e) = std::str::from_utf8(text) {
                let at = e.valid_up_to();
                let line = text[..at].iter().filter(|&&b| b == b'\n').count() + 1;
                return Err(ArrowError::CsvError(format!("invalid UTF-8 on line {line} (byte {at})")));
            }
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
            // Flat objects of the usual types in one pass, when it reads them as arrow-json
            // would (it says when it cannot, and arrow-json decodes them).
            match crate::connectors::flat_json::decode(&schema, text) {
                Some(batch) if batch.num_rows() <= batch_size => Ok(Some(batch)),
                _ => decode_with_arrow_json(&schema, text, batch_size),
            }
        }
    }
}

/// Decodes `text` (JSON values) with arrow-json's decoder into `schema`'s columns. A number or
/// boolean given for a text column is kept as its text, as Postgres's json_populate_record
/// keeps it (numeric columns are read as text: [`decode`]).
pub fn decode_with_arrow_json(schema: &SchemaRef, text: &[u8], batch_size: usize) -> ArrowResult<Option<RecordBatch>> {
    let mut decoder = datafusion::arrow::json::ReaderBuilder::new(Arc::clone(schema))
        .with_batch_size(batch_size)
        .with_coerce_primitive(true)
        .build_decoder()?;
    let used = decoder.decode(text)?;
    if used < text.len() {
        return Err(ArrowError::JsonError(format!("{} bytes left undecoded", text.len() - used)));
    }
    decoder.flush()
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Decimal128Type;

    fn amounts() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("note", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(12, 2), true),
        ]))
    }

    fn amounts_of(batch: &RecordBatch) -> Vec<Option<i128>> {
        batch.column(1).as_primitive::<Decimal128Type>().iter().collect()
    }

    #[test]
    fn numbers_past_a_numeric_are_refused_not_wrapped() {
        // arrow-cast 59's parse_decimal read `1e65537` as 10 (release) or panicked (overflow
        // checks): found by fuzzing.
        for (encoding, text) in [
            (TextEncoding::Csv, &b"a,1e65537\n"[..]),
            (TextEncoding::Csv, b"a,-2.5E+0032769\n"),
            (TextEncoding::Csv, b"a,e26666666666666666666\n"),
            (TextEncoding::Json, br#"{"note": "a", "amount": 1e65537}"#),
            (TextEncoding::Json, br#"{"note": "a", "amount": "11111111111111111111111111111111111111111"}"#),
        ] {
            let e = decode(encoding, &amounts(), text, 8).expect_err("refused");
            assert!(e.to_string().contains("column amount: "), "{e}");
        }
        let (good, dead) =
            decode_each(TextEncoding::Csv, &amounts(), &[], [("0".to_string(), &b"b,1e65537"[..])].into_iter());
        assert!(good.is_empty() && dead.len() == 1, "{dead:?}");
    }

    #[test]
    fn numeric_columns_read_numbers_as_postgres_does() {
        let csv = b"e12345,1.5e2\nbee,0.005\nE,\n,-0.004\n";
        let batch = decode(TextEncoding::Csv, &amounts(), csv, 8).unwrap().unwrap();
        assert_eq!(amounts_of(&batch), vec![Some(15000), Some(1), None, Some(0)]);
        let json = b"{\"note\": 12, \"amount\": 2.125}\n{\"note\": true, \"amount\": \"7\"}\n{\"amount\": null}\n";
        let batch = decode(TextEncoding::Json, &amounts(), json, 8).unwrap().unwrap();
        assert_eq!(amounts_of(&batch), vec![Some(213), Some(700), None]);
        let notes: Vec<_> = batch.column(0).as_string::<i32>().iter().collect();
        assert_eq!(notes, vec![Some("12"), Some("true"), None]);
        assert_eq!(batch.schema(), amounts());
    }

    #[test]
    fn a_csv_record_with_a_character_cut_by_a_delimiter_is_a_dead_letter() {
        // `\xc3` `,` `\xa9`: without the comma the two bytes are `é`, so arrow-csv's check of
        // the joined fields passed and each field was read as broken text (found by fuzzing).
        let (good, dead) = decode_each(
            TextEncoding::Csv,
            &amounts(),
            &[],
            [("0".to_string(), &b"a\xc3,\xa91.5"[..]), ("1".to_string(), &b"caf\xc3\xa9,2.5"[..])].into_iter(),
        );
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!(dead[0].position, "0");
        assert!(dead[0].error.contains("invalid UTF-8 on line 1"), "{}", dead[0].error);
        assert_eq!(good.len(), 1);
        let notes: Vec<_> = good[0].1.column(0).as_string::<i32>().iter().collect();
        assert_eq!(notes, vec![Some("café")]);
        assert_eq!(amounts_of(&good[0].1), vec![Some(250)]);
    }
}
