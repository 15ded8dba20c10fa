//! JSON values as Weir keeps them: `json` and `jsonb` columns and expressions are Arrow strings
//! holding JSON text (the declared type says which, `types::pg_type::DeclaredType`). This module
//! parses that text ([`Json::parse`], RFC 8259; a number keeps the digits it was written with),
//! writes it back as Postgres writes `jsonb` ([`Json::to_jsonb_text`]: an object's keys in
//! Postgres's order, shorter keys first, one of each key, the last one written; `", "` and
//! `": "` between items), and walks it the way the JSON operators do ([`Json::get`],
//! [`Json::path`], [`Json::as_text`]). Called by the JSON functions (`frontend::json_functions`)
//! and by the store when a value goes into a `json` or `jsonb` column.

use crate::error::{Result, SqlState, WeirError};

/// A parsed JSON value. Numbers are kept as written (`1.50` stays `1.50`).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Members in the order written (duplicates included until [`Json::to_jsonb`]).
    Object(Vec<(String, Json)>),
}

/// Deeper nesting than this is refused, so a hostile value cannot exhaust the stack.
const MAX_DEPTH: usize = 256;

fn invalid(kind: &str, detail: impl std::fmt::Display) -> WeirError {
    WeirError::new(SqlState::INVALID_TEXT_REPRESENTATION, format!("invalid input syntax for type {kind}: {detail}"))
}

impl Json {
    /// Parses `text` as one JSON value (`kind`, `json` or `jsonb`, names it in errors: 22P02).
    pub fn parse(text: &str, kind: &str) -> Result<Json> {
        let mut parser = Parser { bytes: text.as_bytes(), at: 0, kind };
        let value = parser.value(0)?;
        parser.skip_whitespace();
        if parser.at != parser.bytes.len() {
            return Err(parser.error("text after the JSON value"));
        }
        Ok(value)
    }

    /// The value as `jsonb` holds it: every object's keys sorted as Postgres sorts them
    /// (shorter first, then bytewise) with the last of duplicate keys kept.
    pub fn to_jsonb(self) -> Json {
        match self {
            Json::Array(items) => Json::Array(items.into_iter().map(Json::to_jsonb).collect()),
            Json::Object(members) => {
                let mut kept: Vec<(String, Json)> = Vec::with_capacity(members.len());
                for (key, value) in members {
                    let value = value.to_jsonb();
                    match kept.iter_mut().find(|(k, _)| *k == key) {
                        Some(slot) => slot.1 = value,
                        None => kept.push((key, value)),
                    }
                }
                kept.sort_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| a.as_bytes().cmp(b.as_bytes())));
                Json::Object(kept)
            }
            Json::Number(n) => Json::Number(numeric_text(&n)),
            other => other,
        }
    }

    /// The text Postgres prints for this value as `jsonb` (call on [`Json::to_jsonb`]'s result).
    pub fn to_jsonb_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_string(key, out);
                    out.push_str(": ");
                    value.write(out);
                }
                out.push('}');
            }
        }
    }

    /// `value -> key` for an object (the last member of that name), `value -> n` for an array
    /// (from the end when negative); None when there is no such member or element (a key of an
    /// array too: `'[1]' -> '0'` is NULL, as in Postgres).
    pub fn get(&self, step: &PathStep) -> Option<&Json> {
        match (self, step) {
            (Json::Object(members), PathStep::Key(key)) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            (Json::Array(items), PathStep::Index(i)) => {
                let index = if *i < 0 { items.len() as i64 + i } else { *i };
                usize::try_from(index).ok().and_then(|i| items.get(i))
            }
            _ => None,
        }
    }

    /// `value #> path`: [`Json::get`] step by step, where a path's text step names an array's
    /// element by its number (`'{a,0}'`), as Postgres's path operators read it.
    pub fn path(&self, steps: impl IntoIterator<Item = PathStep>) -> Option<&Json> {
        let mut at = self;
        for step in steps {
            let step = match (at, step) {
                (Json::Array(_), PathStep::Key(key)) => PathStep::Index(key.trim().parse().ok()?),
                (_, step) => step,
            };
            at = at.get(&step)?;
        }
        Some(at)
    }

    /// The value as `->>` gives it: a string's characters, NULL for JSON null, else its text.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Json::Null => None,
            Json::String(s) => Some(s.clone()),
            other => Some(other.to_jsonb_text()),
        }
    }

    /// `jsonb_typeof`: object, array, string, number, boolean or null.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Number(_) => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

/// A JSON number as Postgres's jsonb prints it: as `numeric` does (`1e2` is `100`, `1.50`
/// stays `1.50`, `-0` is `0`): the digits at the scale written, less the exponent. A number
/// with an exponent past 1,000 either way is kept as written.
pub fn numeric_text(text: &str) -> String {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => match unsigned[i + 1..].parse::<i64>() {
            Ok(e) if e.abs() <= 1_000 => (&unsigned[..i], e),
            _ => return text.to_string(),
        },
        None => (unsigned, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    let point = int.len() as i64 + exponent;
    let scale = (frac.len() as i64 - exponent).max(0) as usize;
    let mut integer = if point <= 0 {
        String::new()
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        digits[..point as usize].to_string()
    };
    let trimmed = integer.trim_start_matches('0').len();
    integer = if trimmed == 0 { "0".to_string() } else { integer[integer.len() - trimmed..].to_string() };
    let mut fraction = if point < 0 {
        format!("{}{digits}", "0".repeat((-point) as usize))
    } else if (point as usize) < digits.len() {
        digits[point as usize..].to_string()
    } else {
        String::new()
    };
    fraction.truncate(scale);
    while fraction.len() < scale {
        fraction.push('0');
    }
    let zero = digits.bytes().all(|b| b == b'0');
    let sign = if negative && !zero { "-" } else { "" };
    if scale == 0 {
        format!("{sign}{integer}")
    } else {
        format!("{sign}{integer}.{fraction}")
    }
}

/// Whether two JSON numbers are equal as numbers (`1.0` and `1`), exactly.
pub fn numbers_equal(a: &str, b: &str) -> bool {
    let canonical = |n: &str| {
        let text = numeric_text(n);
        match text.split_once('.') {
            Some((int, frac)) => {
                let frac = frac.trim_end_matches('0');
                if frac.is_empty() {
                    if int == "-0" {
                        "0".to_string()
                    } else {
                        int.to_string()
                    }
                } else {
                    format!("{int}.{frac}")
                }
            }
            None => text,
        }
    };
    canonical(a) == canonical(b)
}

/// One step of a JSON path: an object's key or an array's index.
#[derive(Debug, Clone, PartialEq)]
pub enum PathStep {
    Key(String),
    Index(i64),
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
    kind: &'a str,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> WeirError {
        invalid(self.kind, format!("{what} at character {}", self.at + 1))
    }

    fn skip_whitespace(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, word: &[u8]) -> Result<()> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.error("an unexpected token"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        self.skip_whitespace();
        match self.bytes.get(self.at) {
            None => Err(self.error("the value ends early")),
            Some(b'n') => self.expect(b"null").map(|_| Json::Null),
            Some(b't') => self.expect(b"true").map(|_| Json::Bool(true)),
            Some(b'f') => self.expect(b"false").map(|_| Json::Bool(false)),
            Some(b'"') => self.string().map(Json::String),
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_whitespace();
                if self.bytes.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.skip_whitespace();
                    match self.bytes.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.error("expected \",\" or \"]\"")),
                    }
                }
            }
            Some(b'{') => {
                self.at += 1;
                let mut members = Vec::new();
                self.skip_whitespace();
                if self.bytes.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                loop {
                    self.skip_whitespace();
                    if self.bytes.get(self.at) != Some(&b'"') {
                        return Err(self.error("expected a string key"));
                    }
                    let key = self.string()?;
                    self.skip_whitespace();
                    if self.bytes.get(self.at) != Some(&b':') {
                        return Err(self.error("expected \":\""));
                    }
                    self.at += 1;
                    members.push((key, self.value(depth + 1)?));
                    self.skip_whitespace();
                    match self.bytes.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return Ok(Json::Object(members));
                        }
                        _ => return Err(self.error("expected \",\" or \"}\"")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number().map(Json::Number),
            Some(_) => Err(self.error("an unexpected token")),
        }
    }

    /// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, as written.
    fn number(&mut self) -> Result<String> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while p.bytes.get(p.at).is_some_and(u8::is_ascii_digit) {
                p.at += 1;
            }
            p.at - from
        };
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at) {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.error("a malformed number")),
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.error("a malformed number"));
            }
        }
        if matches!(self.bytes.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.bytes.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return Err(self.error("a malformed number"));
            }
        }
        Ok(String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned())
    }

    fn string(&mut self) -> Result<String> {
        self.at += 1; // the opening quote
        let mut out = String::new();
        loop {
            let start = self.at;
            while self.bytes.get(self.at).is_some_and(|&b| b != b'"' && b != b'\\' && b >= 0x20) {
                self.at += 1;
            }
            out.push_str(std::str::from_utf8(&self.bytes[start..self.at]).map_err(|_| self.error("invalid UTF-8"))?);
            match self.bytes.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let escaped = match self.bytes.get(self.at) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.at += 1;
                            let high = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&high) && self.bytes[self.at..].starts_with(b"\\u")
                            {
                                let at = self.at;
                                self.at += 2;
                                let low = self.hex4()?;
                                if (0xDC00..0xE000).contains(&low) {
                                    0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                                } else {
                                    self.at = at;
                                    high
                                }
                            } else {
                                high
                            };
                            // jsonb refuses \u0000 and lone surrogates (its text cannot hold
                            // them), as Postgres does; json only checks the syntax, and keeps
                            // its text as written (the parsed value has U+FFFD there).
                            match char::from_u32(code).filter(|c| *c != '\0') {
                                Some(c) => out.push(c),
                                None if self.kind == "json" => out.push('\u{fffd}'),
                                None => return Err(self.error("an unsupported Unicode escape")),
                            }
                            continue;
                        }
                        _ => return Err(self.error("an invalid escape")),
                    };
                    out.push(escaped);
                    self.at += 1;
                }
                _ => return Err(self.error("an unterminated string or a control character in it")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits = self.bytes.get(self.at..self.at + 4).ok_or_else(|| self.error("a short Unicode escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("a bad Unicode escape"))?;
        let code = u32::from_str_radix(text, 16).map_err(|_| self.error("a bad Unicode escape"))?;
        self.at += 4;
        Ok(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jsonb(text: &str) -> String {
        Json::parse(text, "jsonb").unwrap().to_jsonb().to_jsonb_text()
    }

    #[test]
    fn jsonb_text_is_postgres_s() {
        assert_eq!(
            jsonb(r#"{"bb":1,"a":[1, 2.50,{"z":null,"y":true}],"bb":2}"#),
            r#"{"a": [1, 2.50, {"y": true, "z": null}], "bb": 2}"#
        );
        assert_eq!(jsonb(" \"x\\u00e9\\n\" "), "\"xé\\n\"");
        assert_eq!(jsonb("-0.5e+3"), "-500");
        assert_eq!(
            jsonb("[1e2, 1.50, 1.0e1, 1e-2, -0, -0.0, 123.456e1, 0.000]"),
            "[100, 1.50, 10, 0.01, 0, 0.0, 1234.56, 0.000]"
        );
        assert_eq!(jsonb("{}"), "{}");
        assert_eq!(jsonb("[]"), "[]");
        assert_eq!(jsonb("\"\\ud83d\\ude00\""), "\"😀\"");
    }

    #[test]
    fn malformed_text_is_22p02() {
        for bad in ["", "{", "[1,]", "{\"a\" 1}", "01", "1.", "tru", "\"a", "{\"a\":1} x", "'a'"] {
            let err = Json::parse(bad, "json").unwrap_err();
            assert_eq!(err.state.0, "22P02", "{bad}: {err:?}");
        }
        // jsonb refuses \u0000 and lone surrogates; json takes them (it keeps its text).
        for escape in ["\"\\u0000\"", "\"\\ud800\"", "\"\\ud800\\u0041\""] {
            assert_eq!(Json::parse(escape, "jsonb").unwrap_err().state.0, "22P02", "{escape}");
            assert!(Json::parse(escape, "json").is_ok(), "{escape}");
        }
        assert!(Json::parse(&"[".repeat(300), "json").is_err());
        assert!(Json::parse(&format!("{}{}", "[".repeat(200), "]".repeat(200)), "json").is_ok());
    }

    #[test]
    fn paths_walk_objects_and_arrays() {
        let v = Json::parse(r#"{"a": {"b": [10, "x", null]}, "k": "v"}"#, "jsonb").unwrap();
        let key = |k: &str| PathStep::Key(k.into());
        assert_eq!(v.get(&key("k")).and_then(Json::as_text).as_deref(), Some("v"));
        assert_eq!(v.path([key("a"), key("b"), PathStep::Index(1)]).and_then(Json::as_text).as_deref(), Some("x"));
        assert_eq!(v.path([key("a"), key("b"), PathStep::Index(-3)]).map(Json::to_jsonb_text).as_deref(), Some("10"));
        assert_eq!(v.path([key("a"), key("b"), key("0")]).map(Json::to_jsonb_text).as_deref(), Some("10"));
        assert!(v.path([key("a"), key("b")]).unwrap().get(&key("0")).is_none(), "-> '0' on an array is NULL");
        assert!(
            numbers_equal("1.0", "1")
                && numbers_equal("1e2", "100.00")
                && !numbers_equal("12345678901234567890", "12345678901234567891")
        );
        assert_eq!(v.path([key("a"), key("b"), PathStep::Index(2)]).and_then(Json::as_text), None);
        assert!(v.path([key("nope")]).is_none());
        assert_eq!(v.get(&key("a")).map(Json::to_jsonb_text).as_deref(), Some(r#"{"b": [10, "x", null]}"#));
    }
}
