//! `COPY table [(columns)] FROM STDIN [WITH (FORMAT text | csv, DELIMITER 'c', NULL 's',
//! HEADER, QUOTE 'c', ESCAPE 'c')]`: bulk loading, as `psql`'s `\copy` and drivers' copy APIs do
//! it; and `COPY table [(columns)] | (query) TO STDOUT [WITH (FORMAT text | csv | binary,
//! ...)]`, the other way ([`copy_out`]: the query whose rows go out, which the server encodes). This handler checks the statement and says what the rows go into ([`CopyIn`]); the
//! server receives the data (`server::copy`), which [`CopyFormat::parse`] splits into rows and
//! [`CopyIn::insert`] stores, a batch at a time, through the table's writer (as INSERT does:
//! the primary key upserts, views follow). Text format: tab-separated, `\N` for NULL,
//! backslash escapes; CSV: quoted fields (which may hold the delimiter and newlines), empty
//! unquoted fields NULL. Values are read as their columns' types (intervals in every format
//! Postgres prints); a value that is not one is 22P02 and nothing of the COPY is stored after
//! the batch it is in.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::sql::sqlparser::ast::{CopyOption, CopySource, CopyTarget, Statement};

use super::relation_name;
use crate::catalog::{Relation, RelationKind};
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{interval_text, Frontend};

/// A COPY FROM STDIN under way: where its rows go and how they are written.
pub struct CopyIn {
    pub relation: Arc<Relation>,
    /// The table's columns the data gives, in the data's order.
    pub columns: Vec<usize>,
    pub format: CopyFormat,
    /// `FORMAT binary`: Postgres's binary COPY format (`format` then does not apply).
    pub binary: bool,
}

/// How COPY data is written: text or CSV and their characters.
#[derive(Debug, Clone)]
pub struct CopyFormat {
    pub csv: bool,
    pub delimiter: u8,
    pub null: String,
    pub header: bool,
    pub quote: u8,
    pub escape: u8,
}

/// A COPY ... TO STDOUT: the query whose rows go out, in what format.
pub struct CopyOut {
    /// `SELECT columns FROM table`, or the statement's query.
    pub query: Statement,
    pub format: CopyFormat,
    /// `FORMAT binary` (Postgres's binary COPY format; `format` then does not apply).
    pub binary: bool,
}

/// Whether `statement` is a COPY ... TO (else FROM).
pub fn is_copy_out(statement: &Statement) -> bool {
    matches!(statement, Statement::Copy { to: true, .. })
}

/// The query and format of a `COPY ... TO STDOUT`.
pub fn copy_out(fe: &Frontend, statement: &Statement) -> Result<CopyOut> {
    let Statement::Copy { source, target, options, legacy_options, .. } = statement else {
        unreachable!("dispatched on Copy")
    };
    client_side_only(target, legacy_options, true)?;
    let query = match source {
        CopySource::Query(query) => Statement::Query(query.clone()),
        CopySource::Table { table_name, columns } => {
            let name = relation_name(table_name)?;
            let relation = fe.catalog().get(&name).ok_or_else(|| WeirError::undefined_table(&name))?;
            if relation.def.kind == RelationKind::Sink {
                return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("cannot copy from sink \"{name}\"")));
            }
            let columns = if columns.is_empty() {
                // As COPY FROM: every column but the processing-time one, which Weir stamps.
                let fields = relation.schema.fields();
                (0..fields.len())
                    .filter(|&i| Some(i) != relation.def.processing_time)
                    .map(|i| datafusion::sql::sqlparser::ast::Ident::with_quote('"', fields[i].name()).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                columns.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
            };
            let mut parsed = fe.parse(&format!("SELECT {columns} FROM {table_name}"))?;
            match parsed.pop() {
                Some(crate::frontend::Statement::Sql(query)) => query,
                _ => return Err(WeirError::internal("COPY's query did not parse")),
            }
        }
    };
    let (format, binary) = copy_format(options, true)?;
    refuse_text_options_in_binary(options, binary)?;
    Ok(CopyOut { query, format, binary })
}

/// What a COPY statement is, if the handler takes it.
pub fn copy_in(fe: &Frontend, statement: &Statement) -> Result<CopyIn> {
    let Statement::Copy { source, target, options, legacy_options, .. } = statement else {
        unreachable!("dispatched on Copy")
    };
    client_side_only(target, legacy_options, false)?;
    let CopySource::Table { table_name, columns } = source else {
        return Err(WeirError::unsupported("COPY (query) FROM STDIN"));
    };
    let name = relation_name(table_name)?;
    let relation = fe.catalog().get(&name).ok_or_else(|| WeirError::undefined_table(&name))?;
    if relation.def.kind != RelationKind::Table || relation.def.connector.is_some() {
        return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("cannot copy to \"{name}\": not a table")));
    }
    let columns = if columns.is_empty() {
        (0..relation.schema.fields().len()).filter(|&i| Some(i) != relation.def.processing_time).collect()
    } else {
        columns
            .iter()
            .map(|c| {
                let column = crate::frontend::column_names::ident_name(c);
                relation.schema.index_of(&column).map_err(|_| {
                    WeirError::new(
                        SqlState::UNDEFINED_COLUMN,
                        format!("column \"{column}\" of relation \"{name}\" does not exist"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    let (format, binary) = copy_format(options, true)?;
    refuse_text_options_in_binary(options, binary)?;
    Ok(CopyIn { relation, columns, format, binary })
}

/// Refuses the options of the text formats in binary mode (42601), as Postgres does.
fn refuse_text_options_in_binary(options: &[CopyOption], binary: bool) -> Result<()> {
    if !binary {
        return Ok(());
    }
    for option in options {
        let name = match option {
            CopyOption::Header(_) => "HEADER",
            CopyOption::Delimiter(_) => "DELIMITER",
            CopyOption::Null(_) => "NULL",
            CopyOption::Quote(_) => "QUOTE",
            CopyOption::Escape(_) => "ESCAPE",
            _ => continue,
        };
        return Err(WeirError::syntax(format!("cannot specify {name} in BINARY mode")));
    }
    Ok(())
}

/// Refuses a COPY to or from a server file or program (as Postgres does for a
/// non-superuser), and the options of the syntax before Postgres 9.0.
fn client_side_only(target: &CopyTarget, legacy_options: &[impl std::fmt::Debug], out: bool) -> Result<()> {
    let (wanted, direction) = if out { (CopyTarget::Stdout, "TO STDOUT") } else { (CopyTarget::Stdin, "FROM STDIN") };
    if *target != wanted {
        return Err(WeirError::new(
            SqlState::INSUFFICIENT_PRIVILEGE,
            format!("COPY with a file or program is not allowed: use COPY ... {direction} (psql's \\copy)"),
        ));
    }
    if !legacy_options.is_empty() {
        return Err(WeirError::unsupported("COPY's options before Postgres 9.0 syntax; use WITH (FORMAT ...)"));
    }
    Ok(())
}

/// The format COPY's `options` ask for, and whether it is binary (`binary_allowed` only).
fn copy_format(options: &[CopyOption], binary_allowed: bool) -> Result<(CopyFormat, bool)> {
    let mut copy =
        CopyFormat { csv: false, delimiter: b'\t', null: "\\N".into(), header: false, quote: b'"', escape: b'"' };
    let mut binary = false;
    let byte = |c: char, what: &str| -> Result<u8> {
        u8::try_from(c).ok().filter(|b| b.is_ascii()).ok_or_else(|| {
            WeirError::new(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("COPY {what} must be a single one-byte character"),
            )
        })
    };
    let mut delimiter = None;
    let mut null = None;
    let mut escape = None;
    for option in options {
        match option {
            CopyOption::Format(f) => match f.value.to_ascii_lowercase().as_str() {
                "text" => copy.csv = false,
                "csv" => copy.csv = true,
                "binary" if binary_allowed => binary = true,
                other => return Err(WeirError::unsupported(format!("COPY format \"{other}\" here"))),
            },
            CopyOption::Delimiter(c) => delimiter = Some(byte(*c, "delimiter")?),
            CopyOption::Null(s) => null = Some(s.clone()),
            CopyOption::Header(h) => copy.header = *h,
            CopyOption::Quote(c) => copy.quote = byte(*c, "quote")?,
            CopyOption::Escape(c) => escape = Some(byte(*c, "escape")?),
            CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => return Err(WeirError::unsupported(format!("COPY option {other}"))),
        }
    }
    copy.delimiter = delimiter.unwrap_or(if copy.csv { b',' } else { b'\t' });
    // As in Postgres, the escape is the quote unless said otherwise.
    copy.escape = escape.unwrap_or(copy.quote);
    copy.null = null.unwrap_or_else(|| if copy.csv { String::new() } else { "\\N".into() });
    Ok((copy, binary))
}

impl CopyFormat {
    /// Appends one record of `values` (None: NULL) to `out` as COPY writes it, which
    /// [`CopyFormat::parse`] reads back: text escapes backslash, newline, carriage return, tab,
    /// backspace, form feed, vertical tab and the delimiter; CSV quotes a value holding the
    /// delimiter, the quote, a newline or carriage return, or equal to the NULL string (so an
    /// empty string is `""` where NULL is nothing), escaping the quote and escape characters.
    pub fn write_record<'a>(&self, values: impl Iterator<Item = Option<&'a [u8]>>, out: &mut Vec<u8>) {
        for (i, value) in values.enumerate() {
            if i > 0 {
                out.push(self.delimiter);
            }
            let Some(value) = value else {
                out.extend_from_slice(self.null.as_bytes());
                continue;
            };
            if self.csv {
                let quoted = value == self.null.as_bytes()
                    || value == b"\\."
                    || value.iter().any(|&b| b == self.delimiter || b == self.quote || b == b'\n' || b == b'\r');
                if !quoted {
                    out.extend_from_slice(value);
                    continue;
                }
                out.push(self.quote);
                for &b in value {
                    if b == self.quote || b == self.escape {
                        out.push(self.escape);
                    }
                    out.push(b);
                }
                out.push(self.quote);
            } else {
                for &b in value {
                    match b {
                        b'\\' => out.extend_from_slice(b"\\\\"),
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b'\r' => out.extend_from_slice(b"\\r"),
                        b'\t' => out.extend_from_slice(b"\\t"),
                        0x08 => out.extend_from_slice(b"\\b"),
                        0x0c => out.extend_from_slice(b"\\f"),
                        0x0b => out.extend_from_slice(b"\\v"),
                        b if b == self.delimiter => out.extend_from_slice(&[b'\\', b]),
                        b => out.push(b),
                    }
                }
            }
        }
        out.push(b'\n');
    }

    /// The complete records at the start of `data` as rows of fields (None: NULL), and how
    /// many bytes they took; a record cut off at the end waits for more data.
    pub fn parse(&self, data: &[u8], at_end: bool, columns: usize) -> Result<(Vec<Vec<Option<String>>>, usize)> {
        let mut rows = Vec::new();
        let mut start = 0;
        while start < data.len() {
            let Some(end) = self.record_end(&data[start..]).map(|e| start + e).or(at_end.then_some(data.len())) else {
                break;
            };
            let line = &data[start..end];
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            start = end;
            // The end-of-data marker of the text protocol.
            if line == b"\\." {
                continue;
            }
            let text = std::str::from_utf8(line)
                .map_err(|_| WeirError::new(SqlState("22021"), "invalid byte sequence for encoding \"UTF8\""))?;
            let fields = if self.csv { self.csv_fields(text) } else { self.text_fields(text) };
            if fields.len() != columns {
                return Err(WeirError::new(
                    SqlState("22P04"),
                    format!("a COPY row has {} fields where {columns} columns were expected: {text}", fields.len()),
                ));
            }
            rows.push(fields);
        }
        Ok((rows, start))
    }

    /// The end (past its newline) of the first complete record of `data`: its first newline,
    /// outside quotes in CSV.
    fn record_end(&self, data: &[u8]) -> Option<usize> {
        if !self.csv {
            return data.iter().position(|&b| b == b'\n').map(|i| i + 1);
        }
        let mut quoted = false;
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            if quoted && b == self.escape && data.get(i + 1) == Some(&self.quote) {
                // An escaped quote (or, when the escape is the quote, a doubled one).
                i += 2;
                continue;
            }
            if b == self.quote {
                quoted = !quoted;
            } else if b == b'\n' && !quoted {
                return Some(i + 1);
            }
            i += 1;
        }
        None
    }

    /// A text-format line's fields: delimited (a backslash before the delimiter keeps it in
    /// the field), `null` for NULL, backslash escapes undone.
    fn text_fields(&self, line: &str) -> Vec<Option<String>> {
        let delimiter = self.delimiter as char;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                field.push(c);
                field.extend(chars.next());
            } else if c == delimiter {
                fields.push(std::mem::take(&mut field));
            } else {
                field.push(c);
            }
        }
        fields.push(field);
        fields.into_iter().map(|field| (field != self.null).then(|| unescape(&field))).collect()
    }

    /// A CSV record's fields: quoted ones as written (a doubled quote, or the escape before a
    /// quote, is one quote), an unquoted one equal to `null` NULL.
    fn csv_fields(&self, record: &str) -> Vec<Option<String>> {
        let (quote, escape, delimiter) = (self.quote as char, self.escape as char, self.delimiter as char);
        // Each field, and whether any of it was quoted (a quoted empty field is not NULL).
        let mut fields: Vec<(String, bool)> = vec![(String::new(), false)];
        let mut quoted = false;
        let mut chars = record.chars().peekable();
        while let Some(c) = chars.next() {
            let (field, was_quoted) = fields.last_mut().expect("one field at least");
            if quoted {
                // As Postgres: the escape makes the quote or the escape after it a character.
                if c == escape && chars.peek().is_some_and(|&n| n == quote || n == escape) {
                    field.extend(chars.next());
                } else if c == quote {
                    quoted = false;
                } else {
                    field.push(c);
                }
            } else if c == quote {
                quoted = true;
                *was_quoted = true;
            } else if c == delimiter {
                fields.push((String::new(), false));
            } else {
                field.push(c);
            }
        }
        fields.into_iter().map(|(field, quoted)| (quoted || field != self.null).then_some(field)).collect()
    }
}

impl CopyIn {
    /// The complete records at the start of `data` ([`CopyFormat::parse`], or
    /// [`parse_binary`] whose header is read once, `started` then set).
    pub fn parse(&self, data: &[u8], at_end: bool, started: &mut bool) -> Result<(Vec<Vec<Option<String>>>, usize)> {
        if !self.binary {
            return self.format.parse(data, at_end, self.columns.len());
        }
        let schema = &self.relation.schema;
        let columns: Vec<BinaryColumn> = self
            .columns
            .iter()
            .map(|&c| BinaryColumn {
                data_type: schema.field(c).data_type(),
                jsonb: self.relation.declared_type(c).is_some_and(|d| d.is_jsonb()),
            })
            .collect();
        parse_binary(data, at_end, started, &columns)
    }

    /// Stores `rows` (as [`CopyIn::parse`] gave them) in the table; returns how many.
    /// Stores `rows` (in `transaction` when the session has one open).
    pub async fn insert(
        &self,
        fe: &Frontend,
        rows: Vec<Vec<Option<String>>>,
        transaction: Option<Arc<crate::catalog::transaction::Transaction>>,
    ) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let schema = Arc::clone(&self.relation.schema);
        let mut columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| datafusion::arrow::array::new_null_array(f.data_type(), rows.len()))
            .collect();
        for (position, &column) in self.columns.iter().enumerate() {
            let field = schema.field(column);
            let texts: StringArray = rows
                .iter()
                .map(|r| match (&r[position], field.data_type()) {
                    (Some(v), DataType::Interval(_)) => Some(interval_text::normalize(v).unwrap_or_else(|| v.clone())),
                    (Some(v), DataType::Timestamp(_, _)) => {
                        Some(crate::frontend::text_casts::with_seconds(v).unwrap_or_else(|| v.clone()))
                    }
                    (v, _) => v.clone(),
                })
                .collect();
            if matches!(field.data_type(), DataType::Binary | DataType::LargeBinary | DataType::BinaryView) {
                // bytea's input forms (`\x4142`), not the text's own bytes.
                let bytes = texts
                    .iter()
                    .map(|v| v.map(crate::frontend::bytea_input::decode_bytea).transpose())
                    .collect::<Result<datafusion::arrow::array::BinaryArray>>()?;
                columns[column] = cast_with_options(&bytes, field.data_type(), &CastOptions::default())?;
                continue;
            }
            let options = CastOptions { safe: false, ..Default::default() };
            columns[column] = cast_with_options(&texts, field.data_type(), &options).map_err(|e| {
                WeirError::new(
                    SqlState::INVALID_TEXT_REPRESENTATION,
                    format!("invalid input for column \"{}\" ({}): {e}", field.name(), field.data_type()),
                )
            })?;
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::clone(&schema)), columns)?;
        let writer = crate::catalog::dml::Writer::within(fe.catalog(), Arc::clone(&self.relation), transaction);
        let stream = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            batch.schema(),
            futures::stream::iter(vec![Ok(batch)]),
        );
        writer.insert(Box::pin(stream)).await
    }
}

/// The binary COPY format's signature, which starts the data.
const BINARY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// A column binary COPY data goes into: its type, and whether it is `jsonb` (whose binary form
/// is a version byte, 1, and the text).
struct BinaryColumn<'a> {
    data_type: &'a DataType,
    jsonb: bool,
}

/// The complete tuples at the start of `data` in Postgres's binary COPY format, each field
/// read into its text form (`types::pg_binary`) for its column of `columns`, and how many bytes
/// they took. The header (signature, flags, extension) comes first, read when `started` is
/// false; the trailer (a field count of -1) ends the data, and nothing may follow it.
fn parse_binary(
    data: &[u8],
    at_end: bool,
    started: &mut bool,
    columns: &[BinaryColumn<'_>],
) -> Result<(Vec<Vec<Option<String>>>, usize)> {
    let malformed = |what: &str| WeirError::new(SqlState("22P04"), format!("invalid COPY file: {what}"));
    let truncated = || malformed("the data ends in the middle of a row");
    let mut at = 0;
    if !*started {
        const FIXED: usize = 11 + 4 + 4;
        if data.len() < FIXED {
            return if at_end { Err(malformed("the binary COPY signature is missing")) } else { Ok((vec![], 0)) };
        }
        if &data[..11] != BINARY_SIGNATURE {
            return Err(malformed("the binary COPY signature is missing"));
        }
        let flags = u32::from_be_bytes(data[11..15].try_into().expect("4 bytes"));
        if flags & (1 << 16) != 0 {
            return Err(malformed("OIDs in the data are not supported"));
        }
        // Bits 17-31 are critical: a reader that does not know them must refuse the file.
        if flags >> 17 != 0 {
            return Err(malformed("unrecognized critical flags in the COPY file header"));
        }
        let extension = u32::from_be_bytes(data[15..19].try_into().expect("4 bytes")) as usize;
        if data.len() < FIXED + extension {
            return if at_end { Err(truncated()) } else { Ok((vec![], 0)) };
        }
        at = FIXED + extension;
        *started = true;
    }
    let mut rows = Vec::new();
    let mut consumed = at;
    'tuples: while at + 2 <= data.len() {
        let count = i16::from_be_bytes([data[at], data[at + 1]]);
        if count == -1 {
            // The trailer ends the data.
            if at + 2 < data.len() {
                return Err(malformed("data after the end-of-data marker"));
            }
            return Ok((rows, data.len()));
        }
        if count as usize != columns.len() {
            return Err(WeirError::new(
                SqlState("22P04"),
                format!("a COPY row has {count} fields where {} columns were expected", columns.len()),
            ));
        }
        let mut cursor = at + 2;
        let mut row = Vec::with_capacity(columns.len());
        for column in columns {
            let Some(length) = data.get(cursor..cursor + 4) else { break 'tuples };
            let length = i32::from_be_bytes(length.try_into().expect("4 bytes"));
            cursor += 4;
            if length == -1 {
                row.push(None);
                continue;
            }
            if length < 0 {
                return Err(malformed("a field length below -1"));
            }
            let Some(bytes) = data.get(cursor..cursor + length as usize) else { break 'tuples };
            cursor += length as usize;
            let bytes = match (column.jsonb, bytes.split_first()) {
                (true, Some((1, text))) => text,
                (true, _) => {
                    return Err(WeirError::new(SqlState("22P03"), "unsupported jsonb version number in binary data"))
                }
                (false, _) => bytes,
            };
            row.push(Some(crate::types::pg_binary::binary_to_text(bytes, column.data_type)?));
        }
        rows.push(row);
        at = cursor;
        consumed = cursor;
    }
    if at_end && consumed < data.len() {
        return Err(truncated());
    }
    Ok((rows, consumed))
}

/// A text-format field with its backslash escapes undone.
fn unescape(field: &str) -> String {
    if !field.contains('\\') {
        return field.to_string();
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some(d @ '0'..='7') => {
                let mut code = d.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(next) => {
                            code = code * 8 + next;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some('x') => {
                let hex: String = std::iter::from_fn(|| chars.next_if(|c| c.is_ascii_hexdigit())).take(2).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(c) => out.push(c),
                    None => out.push('x'),
                }
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(csv: bool, quote: u8, escape: u8) -> CopyFormat {
        let (delimiter, null) = if csv { (b',', String::new()) } else { (b'\t', "\\N".to_string()) };
        CopyFormat { csv, delimiter, null, header: false, quote, escape }
    }

    fn rows(format: &CopyFormat, data: &str) -> Vec<Vec<Option<String>>> {
        format.parse(data.as_bytes(), true, 2).unwrap().0
    }

    /// What COPY TO writes, COPY FROM reads back: every awkward value, in text and in CSV with
    /// the quote as escape and with another escape.
    #[test]
    fn written_records_read_back() {
        let values = [
            None,
            Some(""),
            Some("plain"),
            Some("tab\there"),
            Some("new\nline\r\n"),
            Some("back\\slash \\N"),
            Some("comma, \"quoted\""),
            Some("\\."),
            Some("\\N"),
            Some("\u{8}\u{c}\u{b} controls"),
            Some("ünï"),
        ];
        for format in [format(false, b'"', b'"'), format(true, b'"', b'"'), format(true, b'\'', b'\\')] {
            let mut data = Vec::new();
            for pair in values.windows(2) {
                format.write_record(pair.iter().map(|v| v.map(str::as_bytes)), &mut data);
            }
            let (read, used) = format.parse(&data, true, 2).unwrap();
            assert_eq!(used, data.len());
            let want: Vec<Vec<Option<String>>> =
                values.windows(2).map(|pair| pair.iter().map(|v| v.map(String::from)).collect()).collect();
            assert_eq!(read, want, "{format:?}: {}", String::from_utf8_lossy(&data));
        }
    }

    fn both(a: &str, b: &str) -> Vec<Option<String>> {
        vec![Some(a.into()), Some(b.into())]
    }

    #[test]
    fn text_rows_with_escapes_nulls_and_a_record_cut_off() {
        let text = format(false, b'"', b'"');
        let data = "a\\tb\t\\N\nx\\\ty\t\\x41\\101\r\n\\.\n";
        assert_eq!(rows(&text, data), vec![vec![Some("a\tb".into()), None], both("x\ty", "AA")]);
        // A record without its newline waits for more data, unless the data has ended.
        let (got, used) = text.parse(b"1\t2\n3\t4", false, 2).unwrap();
        assert_eq!((got, used), (vec![both("1", "2")], 4));
        assert_eq!(text.parse(b"1\t2\t3\n", true, 2).unwrap_err().state.0, "22P04");
    }

    #[test]
    fn csv_quotes_escapes_and_newlines_inside_fields() {
        let csv = format(true, b'"', b'"');
        let data = "\"x, \"\"y\"\"\",\n\"multi\nline\",\"\"\n";
        assert_eq!(rows(&csv, data), vec![vec![Some("x, \"y\"".into()), None], both("multi\nline", "")]);
        let single = format(true, b'\'', b'\'');
        assert_eq!(rows(&single, "'it''s','a\"'\n"), vec![both("it's", "a\"")]);
        let backslash = format(true, b'"', b'\\');
        assert_eq!(rows(&backslash, "\"a\\\"b\",c\n\"d\",e\n"), vec![both("a\"b", "c"), both("d", "e")]);
    }

    /// Binary data read whole or cut anywhere gives the same rows; a cut row waits.
    #[test]
    fn binary_tuples_read_in_any_pieces() {
        let mut data = BINARY_SIGNATURE.to_vec();
        data.extend_from_slice(&0u32.to_be_bytes());
        data.extend_from_slice(&0u32.to_be_bytes());
        for (k, name) in [(1i64, Some("one")), (2, None)] {
            data.extend_from_slice(&2i16.to_be_bytes());
            data.extend_from_slice(&8i32.to_be_bytes());
            data.extend_from_slice(&k.to_be_bytes());
            match name {
                Some(n) => {
                    data.extend_from_slice(&(n.len() as i32).to_be_bytes());
                    data.extend_from_slice(n.as_bytes());
                }
                None => data.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        data.extend_from_slice(&(-1i16).to_be_bytes());
        let types = [
            BinaryColumn { data_type: &DataType::Int64, jsonb: false },
            BinaryColumn { data_type: &DataType::Utf8, jsonb: false },
        ];
        let expected = vec![vec![Some("1".to_string()), Some("one".to_string())], vec![Some("2".to_string()), None]];
        for cut in 0..data.len() {
            let mut started = false;
            let (mut rows, used) = parse_binary(&data[..cut], false, &mut started, &types).unwrap();
            let (rest, _) = parse_binary(&data[used..], true, &mut started, &types).unwrap();
            rows.extend(rest);
            assert_eq!(rows, expected, "cut at {cut}");
        }
        let mut started = false;
        assert!(parse_binary(&data[..data.len() - 5], true, &mut started, &types).is_err());
        assert!(parse_binary(b"not a copy file at all", true, &mut false, &types).is_err());
        // Nothing may follow the trailer.
        let mut after = data.clone();
        after.push(0);
        assert!(parse_binary(&after, true, &mut false, &types).is_err());
    }
}
