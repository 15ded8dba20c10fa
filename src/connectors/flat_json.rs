//! JSON records that are flat objects (what topics of events mostly hold) decoded in one pass
//! straight into the declared columns: the fast path of [`crate::connectors::records`]'s JSON
//! decoding, which costs less than the query over the rows it gives.
//!
//! Invariant: when [`decode`] gives a batch, it is the batch arrow-json's decoder (with
//! `coerce_primitive`, as `records` builds it) gives for the same text; whatever this decoder
//! does not handle exactly so it passes on (None) and the caller decodes the text with
//! arrow-json, which also finds the records that are dead letters. What it handles: a stream of
//! objects (whitespace between); keys without escapes, each at most once; fields of no column
//! skipped whatever they hold; `null` and missing fields as NULL in nullable columns; integer
//! literals for integer columns; numbers for float columns; `true`/`false` for booleans;
//! strings (escapes decoded) for text columns, which also take a number's literal text and
//! `true`/`false`; timestamps written `YYYY-MM-DD[T| ]HH:MM:SS[.fraction][Z]` for timestamp
//! columns without a zone or in UTC. Called by `records::decode` only.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch,
    StringBuilder, StringViewBuilder,
};
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};

/// One column being built.
enum Column {
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Bool(BooleanBuilder),
    Text(StringBuilder),
    TextView(StringViewBuilder),
    /// A timestamp column's values in its unit, made a timestamp array at the end.
    Timestamp(TimeUnit, Int64Builder),
}

/// Why the fast path passes a text on (never shown: the caller decodes it again).
struct Pass;

type Step<T> = Result<T, Pass>;

impl Column {
    fn of(data_type: &DataType, rows: usize) -> Option<Column> {
        Some(match data_type {
            DataType::Int16 => Column::I16(Int16Builder::with_capacity(rows)),
            DataType::Int32 => Column::I32(Int32Builder::with_capacity(rows)),
            DataType::Int64 => Column::I64(Int64Builder::with_capacity(rows)),
            DataType::Float32 => Column::F32(Float32Builder::with_capacity(rows)),
            DataType::Float64 => Column::F64(Float64Builder::with_capacity(rows)),
            DataType::Boolean => Column::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Utf8 => Column::Text(StringBuilder::with_capacity(rows, rows * 16)),
            DataType::Utf8View => Column::TextView(StringViewBuilder::with_capacity(rows)),
            DataType::Timestamp(unit, zone) => {
                // The zones arrow-json reads as UTC ("Z" is none it reads: it refuses the column).
                if !zone.as_deref().is_none_or(|z| matches!(z, "+00:00" | "UTC" | "+00")) {
                    return None;
                }
                Column::Timestamp(*unit, Int64Builder::with_capacity(rows))
            }
            _ => return None,
        })
    }

    fn append_null(&mut self) {
        match self {
            Column::I16(b) => b.append_null(),
            Column::I32(b) => b.append_null(),
            Column::I64(b) => b.append_null(),
            Column::F32(b) => b.append_null(),
            Column::F64(b) => b.append_null(),
            Column::Bool(b) => b.append_null(),
            Column::Text(b) => b.append_null(),
            Column::TextView(b) => b.append_null(),
            Column::Timestamp(_, b) => b.append_null(),
        }
    }

    /// The column as an array of `data_type` (None only if arrow refused the cast of a
    /// timestamp column's integers, which it reinterprets as they are).
    fn finish(self, data_type: &DataType) -> Option<ArrayRef> {
        Some(match self {
            Column::I16(mut b) => Arc::new(b.finish()),
            Column::I32(mut b) => Arc::new(b.finish()),
            Column::I64(mut b) => Arc::new(b.finish()),
            Column::F32(mut b) => Arc::new(b.finish()),
            Column::F64(mut b) => Arc::new(b.finish()),
            Column::Bool(mut b) => Arc::new(b.finish()),
            Column::Text(mut b) => Arc::new(b.finish()),
            Column::TextView(mut b) => Arc::new(b.finish()),
            Column::Timestamp(_, mut b) => {
                let values: ArrayRef = Arc::new(b.finish());
                datafusion::arrow::compute::cast(&values, data_type).ok()?
            }
        })
    }
}

/// The rows of `text` (JSON objects) in `schema`'s columns, when this decoder reads every one
/// of them as arrow-json would; None otherwise (and for no rows).
pub fn decode(schema: &SchemaRef, text: &[u8]) -> Option<RecordBatch> {
    // Strings are taken from the text as it is: it must be UTF-8 (arrow-json checks too), and
    // is checked once here; every piece taken from it starts and ends at an ASCII byte.
    let source = std::str::from_utf8(text).ok()?;
    let rows = text.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut columns: Vec<Column> =
        schema.fields().iter().map(|f| Column::of(f.data_type(), rows)).collect::<Option<_>>()?;
    let names: Vec<&[u8]> = schema.fields().iter().map(|f| f.name().as_bytes()).collect();
    let nullable: Vec<bool> = schema.fields().iter().map(|f| f.is_nullable()).collect();
    let mut reader = Reader { source, text, at: 0, scratch: String::new(), last_date: None };
    let mut seen = vec![false; columns.len()];
    let mut count = 0usize;
    loop {
        reader.skip_space();
        if reader.at == text.len() {
            break;
        }
        reader.object(&names, &mut columns, &mut seen).ok()?;
        for (i, was) in seen.iter_mut().enumerate() {
            if !*was {
                if !nullable[i] {
                    return None;
                }
                columns[i].append_null();
            }
            *was = false;
        }
        count += 1;
    }
    if count == 0 {
        return None;
    }
    let arrays: Vec<ArrayRef> =
        columns.into_iter().zip(schema.fields()).map(|(c, f)| c.finish(f.data_type())).collect::<Option<_>>()?;
    let batch = RecordBatch::try_new(Arc::clone(schema), arrays).ok()?;
    Some(batch)
}

/// How far into `text` a string's plain part goes: the position of the first quote, backslash
/// or control character (which a JSON string may not hold as it is); None if there is none.
fn string_span(text: &[u8]) -> Option<usize> {
    let end = memchr::memchr2(b'"', b'\\', text)?;
    match text[..end].iter().position(|&b| b < 0x20) {
        Some(control) => Some(control),
        None => Some(end),
    }
}

struct Reader<'a> {
    /// The text, checked UTF-8 ...
    source: &'a str,
    /// ... and its bytes.
    text: &'a [u8],
    at: usize,
    /// A string with escapes, decoded.
    scratch: String,
    /// The last timestamp's date and its days since the epoch (records in a row mostly share
    /// their day).
    last_date: Option<((u32, u32, u32), i64)>,
}

impl<'a> Reader<'a> {
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Step<u8> {
        self.text.get(self.at).copied().ok_or(Pass)
    }

    fn expect(&mut self, byte: u8) -> Step<()> {
        self.skip_space();
        if self.peek()? != byte {
            return Err(Pass);
        }
        self.at += 1;
        Ok(())
    }

    /// One object, its fields appended to `columns` (`seen`: which got a value).
    fn object(&mut self, names: &[&[u8]], columns: &mut [Column], seen: &mut [bool]) -> Step<()> {
        self.expect(b'{')?;
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
            return Ok(());
        }
        // Objects mostly hold their fields in the columns' order: the column after the last
        // one found is tried first.
        let mut guess = 0;
        loop {
            self.skip_space();
            let key = self.plain_string()?;
            self.expect(b':')?;
            self.skip_space();
            let found = match names.get(guess) {
                Some(name) if *name == key => Some(guess),
                _ => names.iter().position(|n| *n == key),
            };
            if let Some(i) = found {
                guess = i + 1;
            }
            match found {
                Some(i) => {
                    if seen[i] {
                        return Err(Pass);
                    }
                    seen[i] = true;
                    self.value(&mut columns[i])?;
                }
                None => self.skip_value(0)?,
            }
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Pass),
            }
        }
    }

    /// A string without escapes (an object's key): its bytes.
    fn plain_string(&mut self) -> Step<&'a [u8]> {
        if self.peek()? != b'"' {
            return Err(Pass);
        }
        let start = self.at + 1;
        let len = string_span(&self.text[start..]).ok_or(Pass)?;
        if self.text[start + len] != b'"' {
            return Err(Pass);
        }
        self.at = start + len + 1;
        Ok(&self.text[start..start + len])
    }

    /// A string, escapes decoded: its text (in the text itself, or in `scratch`).
    fn string(&mut self) -> Step<&str> {
        let start = self.at + 1;
        let len = string_span(&self.text[start..]).ok_or(Pass)?;
        match self.text[start + len] {
            b'"' => {
                self.at = start + len + 1;
                // A string starts after and ends before an ASCII quote.
                self.source.get(start..start + len).ok_or(Pass)
            }
            b'\\' => self.escaped_string(start),
            _ => Err(Pass),
        }
    }

    fn escaped_string(&mut self, start: usize) -> Step<&str> {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let mut at = start;
        loop {
            let len = string_span(&self.text[at..]).ok_or(Pass)?;
            out.push_str(self.source.get(at..at + len).ok_or(Pass)?);
            at += len;
            match self.text[at] {
                b'"' => {
                    self.at = at + 1;
                    self.scratch = out;
                    return Ok(&self.scratch);
                }
                b'\\' => {
                    let escape = *self.text.get(at + 1).ok_or(Pass)?;
                    at += 2;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let unit = self.hex4(at)?;
                            at += 4;
                            let c = if (0xD800..0xDC00).contains(&unit) {
                                // A surrogate pair: the low half must follow.
                                if self.text.get(at..at + 2) != Some(b"\\u") {
                                    return Err(Pass);
                                }
                                let low = self.hex4(at + 2)?;
                                at += 6;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(Pass);
                                }
                                char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)).ok_or(Pass)?
                            } else {
                                char::from_u32(unit).ok_or(Pass)?
                            };
                            out.push(c);
                        }
                        _ => return Err(Pass),
                    }
                }
                _ => return Err(Pass),
            }
        }
    }

    fn hex4(&self, at: usize) -> Step<u32> {
        let digits = self.text.get(at..at + 4).ok_or(Pass)?;
        let digits = std::str::from_utf8(digits).map_err(|_| Pass)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Pass);
        }
        u32::from_str_radix(digits, 16).map_err(|_| Pass)
    }

    /// A number literal, as JSON writes one: its text.
    fn number(&mut self) -> Step<&'a str> {
        let start = self.at;
        let mut at = start;
        let digits = |at: &mut usize| {
            let from = *at;
            while self.text.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        if self.text.get(at) == Some(&b'-') {
            at += 1;
        }
        let whole = digits(&mut at);
        if whole == 0 || (whole > 1 && self.text[at - whole] == b'0') {
            return Err(Pass);
        }
        if self.text.get(at) == Some(&b'.') {
            at += 1;
            if digits(&mut at) == 0 {
                return Err(Pass);
            }
        }
        if let Some(b'e' | b'E') = self.text.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = self.text.get(at) {
                at += 1;
            }
            if digits(&mut at) == 0 {
                return Err(Pass);
            }
        }
        self.at = at;
        self.source.get(start..at).ok_or(Pass)
    }

    fn word(&mut self, word: &[u8]) -> Step<()> {
        if self.text.get(self.at..self.at + word.len()) != Some(word) {
            return Err(Pass);
        }
        self.at += word.len();
        Ok(())
    }

    /// A value for `column`.
    fn value(&mut self, column: &mut Column) -> Step<()> {
        let first = self.peek()?;
        if first == b'n' {
            self.word(b"null")?;
            column.append_null();
            return Ok(());
        }
        match column {
            Column::I16(b) => b.append_value(self.integer()?),
            Column::I32(b) => b.append_value(self.integer()?),
            Column::I64(b) => b.append_value(self.integer()?),
            Column::F32(b) => b.append_value(self.float()?),
            Column::F64(b) => b.append_value(self.float()?),
            Column::Bool(b) => b.append_value(self.boolean()?),
            Column::Text(b) => b.append_value(self.text_value(first)?),
            Column::TextView(b) => b.append_value(self.text_value(first)?),
            Column::Timestamp(unit, builder) => {
                if first != b'"' {
                    return Err(Pass);
                }
                let mut last_date = self.last_date;
                let (seconds, nanos) = timestamp(self.string()?, &mut last_date)?;
                self.last_date = last_date;
                let value = match unit {
                    TimeUnit::Second => Some(seconds),
                    TimeUnit::Millisecond => seconds.checked_mul(1_000).and_then(|s| s.checked_add(nanos / 1_000_000)),
                    TimeUnit::Microsecond => seconds.checked_mul(1_000_000).and_then(|s| s.checked_add(nanos / 1_000)),
                    TimeUnit::Nanosecond => seconds.checked_mul(1_000_000_000).and_then(|s| s.checked_add(nanos)),
                }
                .ok_or(Pass)?;
                builder.append_value(value);
            }
        }
        Ok(())
    }

    /// An integer literal that fits `T` (others, fractions and exponents included, pass).
    fn integer<T: std::str::FromStr>(&mut self) -> Step<T> {
        let text = self.number()?;
        if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            return Err(Pass);
        }
        text.parse().map_err(|_| Pass)
    }

    /// A number as a float (one past the type's range, which parses as infinite, passes).
    fn float<T: std::str::FromStr + Into<f64> + Copy>(&mut self) -> Step<T> {
        let value: T = self.number()?.parse().map_err(|_| Pass)?;
        if !value.into().is_finite() {
            return Err(Pass);
        }
        Ok(value)
    }

    fn boolean(&mut self) -> Step<bool> {
        match self.peek()? {
            b't' => self.word(b"true").map(|()| true),
            b'f' => self.word(b"false").map(|()| false),
            _ => Err(Pass),
        }
    }

    /// A text column's value: a string, or a number's or boolean's literal text.
    fn text_value(&mut self, first: u8) -> Step<&str> {
        match first {
            b'"' => self.string(),
            b't' => self.word(b"true").map(|()| "true"),
            b'f' => self.word(b"false").map(|()| "false"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Pass),
        }
    }

    /// Passes over any value (`depth`: how deep in skipped containers).
    fn skip_value(&mut self, depth: usize) -> Step<()> {
        if depth > 64 {
            return Err(Pass);
        }
        self.skip_space();
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'-' | b'0'..=b'9' => self.number().map(|_| ()),
            open @ (b'{' | b'[') => {
                self.at += 1;
                let close = if open == b'{' { b'}' } else { b']' };
                self.skip_space();
                if self.peek()? == close {
                    self.at += 1;
                    return Ok(());
                }
                loop {
                    if open == b'{' {
                        self.skip_space();
                        if self.peek()? != b'"' {
                            return Err(Pass);
                        }
                        self.string()?;
                        self.expect(b':')?;
                    }
                    self.skip_value(depth + 1)?;
                    self.skip_space();
                    match self.peek()? {
                        b',' => self.at += 1,
                        b if b == close => {
                            self.at += 1;
                            return Ok(());
                        }
                        _ => return Err(Pass),
                    }
                }
            }
            _ => Err(Pass),
        }
    }
}

/// `YYYY-MM-DD[T| ]HH:MM:SS[.fraction][Z]` as seconds since the epoch and nanoseconds (the
/// fraction's first nine digits, as arrow reads it).
fn timestamp(text: &str, last_date: &mut Option<((u32, u32, u32), i64)>) -> Step<(i64, i64)> {
    let b = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Step<u32> {
        let digits = b.get(range).ok_or(Pass)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(Pass);
        }
        Ok(digits.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')))
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b' ') || b[13] != b':' || b[16] != b':' {
        return Err(Pass);
    }
    let ymd = (number(0..4)?, number(5..7)?, number(8..10)?);
    let days = match *last_date {
        Some((seen, days)) if seen == ymd => days,
        _ => {
            let date = chrono::NaiveDate::from_ymd_opt(ymd.0 as i32, ymd.1, ymd.2).ok_or(Pass)?;
            let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch");
            let days = date.signed_duration_since(epoch).num_days();
            *last_date = Some((ymd, days));
            days
        }
    };
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if hour > 23 || minute > 59 || second > 59 {
        return Err(Pass);
    }
    let mut at = 19;
    let mut nanos: i64 = 0;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return Err(Pass);
        }
        nanos = i64::from(number(at + 1..at + 1 + digits)?) * 10i64.pow(9 - digits as u32);
        at += 1 + digits;
    }
    if b.get(at) == Some(&b'Z') {
        at += 1;
    }
    if at != b.len() {
        return Err(Pass);
    }
    Ok((days * 86_400 + i64::from(hour * 3600 + minute * 60 + second), nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("qty", DataType::Int32, true),
            Field::new("small", DataType::Int16, true),
            Field::new("price", DataType::Float64, true),
            Field::new("ratio", DataType::Float32, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("tag", DataType::Utf8View, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("tz", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), true),
            Field::new("ns", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
        ]))
    }

    fn arrow_json(schema: &SchemaRef, text: &[u8]) -> Option<RecordBatch> {
        crate::connectors::records::decode_with_arrow_json(schema, text, text.len().max(1)).ok().flatten()
    }

    /// Each record alone and all at once: when the fast path decodes, arrow-json gives the
    /// same batch.
    #[test]
    fn what_it_decodes_arrow_json_decodes_alike() {
        let records: &[&str] = &[
            r#"{"id": 1, "qty": 2, "small": -3, "price": 1.5, "ratio": 0.25, "ok": true, "name": "a", "tag": "t", "at": "2015-07-15T00:00:00.001", "tz": "2026-01-02 03:04:05.123456Z", "ns": "1969-12-31T23:59:59.999999999"}"#,
            r#"{"id":-9223372036854775808,"name":"esc \" \\ \/ \n \u00e9 \ud83d\ude00","tag":12.50,"price":-1e3,"ok":false}"#,
            r#"{"name": 12, "tag": true, "extra": {"nested": [1, "x", {"y": null}]}, "more": [], "id": null}"#,
            r#"  {}  "#,
            r#"{"price": 3, "ratio": 1E-2, "at": "2000-02-29 12:00:00", "name": "ünïcödé", "tag": "a string longer than twelve bytes"}"#,
            r#"{"id": 1.5}"#,
            r#"{"id": "1"}"#,
            r#"{"id": 1, "id": 2}"#,
            r#"{"qty": 3000000000}"#,
            r#"{"small": 40000}"#,
            r#"{"at": "2015-07-15"}"#,
            r#"{"at": "2015-07-15T00:00:00+01:00"}"#,
            r#"{"at": "2015-02-30T00:00:00"}"#,
            r#"{"at": 1000}"#,
            r#"{"ok": "true"}"#,
            r#"{"name": {"a": 1}}"#,
            r#"{"name": "bad \x escape"}"#,
            r#"{"name": "\ud83d alone"}"#,
            r#"{"id": 01}"#,
            r#"{"id": -}"#,
            r#"[1, 2]"#,
            r#"{"id": 1,}"#,
            r#"{"id": 1"#,
            r#"{"na\u006de": "x"}"#,
            r#"{"price": 1.7976931348623157e309}"#,
            r#"{"ns": "2500-01-01T00:00:00"}"#,
        ];
        let schema = schema();
        let mut decoded = 0;
        for record in records {
            let text = format!("{record}\n");
            let fast = decode(&schema, text.as_bytes());
            if let Some(fast) = &fast {
                decoded += 1;
                assert_eq!(Some(fast), arrow_json(&schema, text.as_bytes()).as_ref(), "{record}");
            }
        }
        assert_eq!(decoded, 5, "the first five are read by the fast path");
        let all: String = records[..5].iter().map(|r| format!("{r}\n")).collect();
        let fast = decode(&schema, all.as_bytes()).expect("the five together");
        assert_eq!(fast.num_rows(), 5);
        assert_eq!(Some(fast), arrow_json(&schema, all.as_bytes()));
        assert!(decode(&schema, b"\n  \n").is_none(), "no rows");
        let not_null = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        assert!(decode(&not_null, b"{}\n").is_none(), "a missing NOT NULL value is arrow-json's to refuse");
    }

    /// Records made from pieces that are, and pieces that are not, what the fast path reads:
    /// whatever it decodes, arrow-json decodes alike, record by record and in chunks.
    #[test]
    fn random_records_decode_as_arrow_json_does() {
        let pieces: &[&[&str]] = &[
            &["\"id\": 7", "\"id\": -0", "\"id\": 12345678901", "\"id\": 1.0", "\"id\": null", "\"id\": \"3\""],
            &["\"qty\": 2147483647", "\"qty\": -2147483648", "\"qty\": 2147483648", "\"qty\": 1e1"],
            &["\"small\": 32767", "\"small\": -32769", "\"small\": 0"],
            &["\"price\": 0.1", "\"price\": -2.5e-3", "\"price\": 1E400", "\"price\": 5", "\"price\": true"],
            &["\"ratio\": 3.4028235e38", "\"ratio\": 1e39", "\"ratio\": 0.1"],
            &["\"ok\": true", "\"ok\": false", "\"ok\": 1", "\"ok\": null"],
            &[
                "\"name\": \"plain\"",
                "\"name\": \"tab\\there\"",
                "\"name\": 1.50",
                "\"name\": false",
                "\"name\": \"\\u0041\\u00df\"",
                "\"name\": []",
            ],
            &["\"tag\": \"a view string that is long enough\"", "\"tag\": \"\"", "\"tag\": -7"],
            &[
                "\"at\": \"2015-07-15T00:00:00.001\"",
                "\"at\": \"1960-01-01 00:00:00.5\"",
                "\"at\": \"2015-07-15T25:00:00\"",
                "\"at\": \"2015-07-15T00:00:00.1234567891\"",
            ],
            &[
                "\"tz\": \"2026-12-07T23:59:59Z\"",
                "\"tz\": \"2026-12-07 23:59:59.000001\"",
                "\"tz\": \"2026-12-07T23:59:59+02:00\"",
            ],
            &["\"other\": {\"deep\": [1, {\"x\": \"\\\"\"}]}", "\"other\": [[], {}]", "\"other\": nul"],
        ];
        let schema = schema();
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut fast_ones, mut chunk) = (0, String::new());
        for _ in 0..3000 {
            let mut fields: Vec<&str> = Vec::new();
            for group in pieces {
                if next(3) > 0 {
                    fields.push(group[next(group.len())]);
                }
            }
            let record = format!("{{{}}}\n", fields.join(", "));
            if let Some(fast) = decode(&schema, record.as_bytes()) {
                fast_ones += 1;
                assert_eq!(Some(fast), arrow_json(&schema, record.as_bytes()), "{record}");
                chunk.push_str(&record);
            }
        }
        assert!(fast_ones > 50, "the fast path reads a good share: {fast_ones}");
        let fast = decode(&schema, chunk.as_bytes()).expect("records it read alone, together");
        assert_eq!(Some(fast), arrow_json(&schema, chunk.as_bytes()));
    }
}
