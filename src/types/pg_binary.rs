//! Postgres's binary form of a value (what `COPY ... FROM STDIN (FORMAT binary)` sends, the
//! type's `typsend`), read into the value's text form, which Weir then casts to the column's
//! Arrow type as it does text COPY and literals. One decoder per Postgres type a column of
//! Weir can hold; which one applies follows from the column's Arrow type (and its declared
//! type: a NUMERIC column is a decimal). Called by COPY FROM (`frontend::handler::copy`).

use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::error::{Result, SqlState, WeirError};

/// Days from 1970-01-01 to Postgres's epoch, 2000-01-01.
const POSTGRES_EPOCH_DAYS: i64 = 10_957;
const POSTGRES_EPOCH_MICROS: i64 = POSTGRES_EPOCH_DAYS * 86_400_000_000;

fn malformed(what: &str) -> WeirError {
    WeirError::new(SqlState("22P03"), format!("incorrect binary data format: {what}"))
}

fn fixed<const N: usize>(bytes: &[u8], what: &str) -> Result<[u8; N]> {
    bytes.try_into().map_err(|_| malformed(&format!("{what} takes {N} bytes, got {}", bytes.len())))
}

/// The text form of `bytes`, the binary form of a value of a column of type `data_type`.
pub fn binary_to_text(bytes: &[u8], data_type: &DataType) -> Result<String> {
    Ok(match data_type {
        DataType::Boolean => match fixed::<1>(bytes, "boolean")? {
            [0] => "false".into(),
            _ => "true".into(),
        },
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => i16::from_be_bytes(fixed(bytes, "smallint")?).to_string(),
        DataType::Int32 | DataType::UInt16 => i32::from_be_bytes(fixed(bytes, "integer")?).to_string(),
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => {
            i64::from_be_bytes(fixed(bytes, "bigint")?).to_string()
        }
        DataType::Float16 | DataType::Float32 => f32::from_be_bytes(fixed(bytes, "real")?).to_string(),
        DataType::Float64 => f64::from_be_bytes(fixed(bytes, "double precision")?).to_string(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => String::from_utf8(bytes.to_vec())
            .map_err(|_| WeirError::new(SqlState("22021"), "invalid byte sequence for encoding \"UTF8\""))?,
        DataType::Date32 | DataType::Date64 => {
            let days = i32::from_be_bytes(fixed(bytes, "date")?) as i64 + POSTGRES_EPOCH_DAYS;
            let date =
                chrono::DateTime::from_timestamp(days * 86_400, 0).ok_or_else(|| malformed("date out of range"))?;
            date.format("%Y-%m-%d").to_string()
        }
        DataType::Timestamp(_, tz) => {
            let micros = i64::from_be_bytes(fixed(bytes, "timestamp")?);
            let at = micros
                .checked_add(POSTGRES_EPOCH_MICROS)
                .and_then(chrono::DateTime::from_timestamp_micros)
                .ok_or_else(|| malformed("timestamp out of range"))?;
            let suffix = if tz.is_some() { "+00:00" } else { "" };
            format!("{}{suffix}", at.format("%Y-%m-%dT%H:%M:%S%.6f"))
        }
        DataType::Time32(_) | DataType::Time64(_) => {
            let micros = i64::from_be_bytes(fixed(bytes, "time")?);
            let secs = micros.div_euclid(1_000_000);
            format!("{:02}:{:02}:{:02}.{:06}", secs / 3600, secs / 60 % 60, secs % 60, micros.rem_euclid(1_000_000))
        }
        DataType::Interval(_) | DataType::Duration(TimeUnit::Microsecond) => {
            let micros = i64::from_be_bytes(fixed(&bytes[..bytes.len().min(8)], "interval")?);
            let days = i32::from_be_bytes(fixed(bytes.get(8..12).unwrap_or_default(), "interval")?);
            let months = i32::from_be_bytes(fixed(bytes.get(12..16).unwrap_or_default(), "interval")?);
            if bytes.len() != 16 {
                return Err(malformed("interval takes 16 bytes"));
            }
            format!("{months} mons {days} days {micros} microseconds")
        }
        DataType::Decimal128(..) | DataType::Decimal256(..) => numeric_text(bytes)?,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            // bytea's text input: hex.
            let mut hex = String::with_capacity(2 + bytes.len() * 2);
            hex.push_str("\\x");
            for b in bytes {
                hex.push_str(&format!("{b:02x}"));
            }
            hex
        }
        other => {
            return Err(WeirError::unsupported(format!("COPY FROM in binary format into a column of type {other}")))
        }
    })
}

/// The decimal `value` at `scale` as its integer and fraction digits (no sign), `scale`
/// fraction digits; a negative scale is that many zeros after the integer.
fn decimal_digits(value: i128, scale: i8) -> (String, String) {
    let digits = value.unsigned_abs().to_string();
    if value == 0 {
        return ("0".to_string(), "0".repeat(scale.max(0) as usize));
    }
    if scale <= 0 {
        return (format!("{digits}{}", "0".repeat(scale.unsigned_abs() as usize)), String::new());
    }
    let scale = scale as usize;
    let padded =
        if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
    let (integer, fraction) = padded.split_at(padded.len() - scale);
    (integer.to_string(), fraction.to_string())
}

/// The decimal `value` at `scale` as Postgres writes a numeric: every place of the scale
/// (`12.50` at scale 2), or, with `trim`, the value's own places only (`12.5`): for a column
/// declared `NUMERIC` without a scale, whose stored scale is DataFusion's default (10) rather
/// than the value's.
pub fn decimal_text(value: i128, scale: i8, trim: bool) -> String {
    let (integer, fraction) = decimal_digits(value, scale);
    let fraction = if trim { fraction.trim_end_matches('0') } else { fraction.as_str() };
    let sign = if value < 0 { "-" } else { "" };
    match fraction.is_empty() {
        true => format!("{sign}{integer}"),
        false => format!("{sign}{integer}.{fraction}"),
    }
}

/// The decimal `value` at `scale` in `numeric`'s binary form (its `typsend`), all 38 digits of
/// a decimal: what a NUMERIC result goes out as in binary format (`server::encode`).
pub fn decimal_binary(value: i128, scale: i8) -> Vec<u8> {
    let (integer, fraction) = decimal_digits(value, scale);
    // Base-10,000 digits: the integer's from the point leftwards, the fraction's rightwards.
    let integer = format!("{}{integer}", "0".repeat((4 - integer.len() % 4) % 4));
    let fraction = format!("{fraction}{}", "0".repeat((4 - fraction.len() % 4) % 4));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes().chunks(4).map(|c| std::str::from_utf8(c).expect("digits").parse().expect("digits")).collect()
    };
    let mut digits = group(&integer);
    let mut weight = digits.len() as i16 - 1;
    digits.extend(group(&fraction));
    while digits.first() == Some(&0) {
        digits.remove(0);
        weight -= 1;
    }
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    let sign: u16 = if value < 0 && !digits.is_empty() { 0x4000 } else { 0 };
    let mut out = Vec::with_capacity(8 + 2 * digits.len());
    for w in [digits.len() as i16, weight, sign as i16, scale.max(0) as i16].into_iter().chain(digits) {
        out.extend_from_slice(&w.to_be_bytes());
    }
    out
}

/// `numeric`'s binary form: digit count, weight (of the first digit, in powers of 10,000),
/// sign, display scale, then base-10,000 digits.
fn numeric_text(bytes: &[u8]) -> Result<String> {
    if bytes.len() < 8 {
        return Err(malformed("numeric header"));
    }
    let word = |i: usize| i16::from_be_bytes([bytes[i], bytes[i + 1]]);
    let (ndigits, weight, sign, dscale) = (word(0), word(2), word(4) as u16, word(6));
    if ndigits < 0 || dscale < 0 || bytes.len() != 8 + 2 * ndigits as usize {
        return Err(malformed("numeric digits"));
    }
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return Err(malformed("numeric sign")),
    }
    let digits: Vec<i16> = (0..ndigits as usize).map(|i| word(8 + 2 * i)).collect();
    if digits.iter().any(|d| !(0..10_000).contains(d)) {
        return Err(malformed("numeric digit"));
    }
    let mut text = String::new();
    if sign == 0x4000 {
        text.push('-');
    }
    // The integer part: digit groups 0..=weight.
    if weight < 0 {
        text.push('0');
    } else {
        for group in 0..=weight as usize {
            let d = digits.get(group).copied().unwrap_or(0);
            if group == 0 {
                text.push_str(&d.to_string());
            } else {
                text.push_str(&format!("{d:04}"));
            }
        }
    }
    if dscale > 0 {
        let mut fraction = String::new();
        let mut group = weight as i32 + 1;
        while (fraction.len() as i32) < dscale as i32 {
            let d = if group < 0 { 0 } else { digits.get(group as usize).copied().unwrap_or(0) };
            fraction.push_str(&format!("{d:04}"));
            group += 1;
        }
        fraction.truncate(dscale as usize);
        text.push('.');
        text.push_str(&fraction);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_go_out_as_numeric_text_and_binary_that_reads_back() {
        assert_eq!(decimal_text(2150, 2, false), "21.50");
        assert_eq!(decimal_text(210_000_000_000, 10, true), "21");
        assert_eq!(decimal_text(-5, 3, false), "-0.005");
        assert_eq!(decimal_text(-5, 3, true), "-0.005");
        let big = 12_345_678_901_234_567_890_123_456_789_012_345_678i128;
        for (value, scale) in [(2150i128, 2i8), (-5, 3), (0, 4), (big, 16), (-big, 0), (1_000_000, 0), (7, -2)] {
            let text = numeric_text(&decimal_binary(value, scale)).unwrap();
            assert_eq!(text, decimal_text(value, scale, false), "{value} at scale {scale}");
        }
    }

    fn numeric(ndigits: i16, weight: i16, sign: u16, dscale: i16, digits: &[i16]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [ndigits, weight, sign as i16, dscale].into_iter().chain(digits.iter().copied()) {
            out.extend_from_slice(&w.to_be_bytes());
        }
        out
    }

    #[test]
    fn numerics_read_as_postgres_writes_them() {
        assert_eq!(numeric_text(&numeric(2, 0, 0, 2, &[123, 4500])).unwrap(), "123.45");
        assert_eq!(numeric_text(&numeric(1, -1, 0x4000, 4, &[5])).unwrap(), "-0.0005");
        assert_eq!(numeric_text(&numeric(2, 1, 0, 0, &[1, 0])).unwrap(), "10000");
        assert_eq!(numeric_text(&numeric(0, 0, 0, 0, &[])).unwrap(), "0");
        assert_eq!(numeric_text(&numeric(1, 2, 0, 1, &[7])).unwrap(), "700000000.0");
        assert!(numeric_text(&numeric(1, 0, 0, 0, &[10_000])).is_err());
    }

    #[test]
    fn fixed_width_values_and_times() {
        assert_eq!(binary_to_text(&7i32.to_be_bytes(), &DataType::Int32).unwrap(), "7");
        assert_eq!(binary_to_text(&0i32.to_be_bytes(), &DataType::Date32).unwrap(), "2000-01-01");
        let ts = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(binary_to_text(&1_500_000i64.to_be_bytes(), &ts).unwrap(), "2000-01-01T00:00:01.500000");
        assert!(binary_to_text(&[0, 1], &DataType::Int32).is_err());
        assert_eq!(binary_to_text(&[0xde, 0xad], &DataType::Binary).unwrap(), "\\xdead");
    }
}
