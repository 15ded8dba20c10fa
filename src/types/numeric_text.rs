//! Numbers written as text read into a `numeric(p, s)` column's Arrow value (a Decimal128 of
//! precision `p`, scale `s`) the way Postgres reads numeric input: an optional sign, digits with
//! an optional point, an optional exponent (`1.5e-3`), spaces around; rounded to the scale half
//! away from zero; more digits before the point than the precision allows is "numeric field
//! overflow". Every step is checked: any text gives a value or an error, never a wrapped value.
//!
//! Text sources' decoders (`connectors::records`) read numeric columns with it rather than
//! with arrow-cast's `parse_decimal` (arrow 59), whose counters overflow on long digit runs and
//! exponents past an i16: `1e65537` was read as 10 and 256 ones as a negative number (found by
//! fuzzing; apache/arrow-rs#10787, #10788).

use std::fmt;

/// Why a text is not a numeric value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumericTextError {
    /// Not a number at all (Postgres: invalid input syntax for type numeric).
    Syntax,
    /// A number with more digits before the point than the column's precision leaves room for.
    Overflow,
}

impl fmt::Display for NumericTextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumericTextError::Syntax => write!(f, "invalid input syntax for type numeric"),
            NumericTextError::Overflow => write!(f, "numeric field overflow"),
        }
    }
}

/// `text` as a Decimal128 value of `precision` (at most 38) and `scale`.
pub fn parse(text: &str, precision: u8, scale: i8) -> Result<i128, NumericTextError> {
    let text = text.trim();
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Err(NumericTextError::Syntax);
    }
    let exponent = match exponent {
        None => 0,
        Some(e) => read_exponent(e)?,
    };
    // The value is `digits` x 10^shift at the column's scale.
    let digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).map(|b| b - b'0').collect();
    let first = digits.iter().position(|&d| d != 0).unwrap_or(digits.len());
    let digits = &digits[first..];
    if digits.is_empty() {
        return Ok(0);
    }
    let shift = exponent - fraction.len() as i64 + i64::from(scale);
    let kept = digits.len() as i64 + shift;
    let (mut value, round_up) = if shift >= 0 {
        if kept > i64::from(precision) {
            return Err(NumericTextError::Overflow);
        }
        (accumulate(digits)?, false)
    } else if kept <= 0 {
        // Every digit is past the scale: zero, or one unit when the first dropped digit is the
        // first one and at least 5.
        (0, kept == 0 && digits[0] >= 5)
    } else {
        let kept = kept as usize;
        (accumulate(&digits[..kept])?, digits[kept] >= 5)
    };
    if shift > 0 {
        value = value
            .checked_mul(10i128.checked_pow(shift as u32).ok_or(NumericTextError::Overflow)?)
            .ok_or(NumericTextError::Overflow)?;
    }
    if round_up {
        value += 1;
    }
    if value >= 10i128.pow(u32::from(precision.min(38))) {
        return Err(NumericTextError::Overflow);
    }
    Ok(if negative { -value } else { value })
}

/// An exponent's text (`-3`, `+07`); Postgres refuses one past 1000 either way, whatever the
/// digits before it.
fn read_exponent(text: &str) -> Result<i64, NumericTextError> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NumericTextError::Syntax);
    }
    let significant = digits.trim_start_matches('0');
    let magnitude: i64 = if significant.len() > 4 { i64::MAX } else { significant.parse().unwrap_or(0) };
    if magnitude > 1000 {
        return Err(NumericTextError::Overflow);
    }
    Ok(if negative { -magnitude } else { magnitude })
}

/// Decimal digits (at most 38 of them fit) as one integer.
fn accumulate(digits: &[u8]) -> Result<i128, NumericTextError> {
    if digits.len() > 38 {
        return Err(NumericTextError::Overflow);
    }
    Ok(digits.iter().fold(0i128, |acc, &d| acc * 10 + i128::from(d)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use NumericTextError::{Overflow, Syntax};

    #[test]
    fn reads_numbers_as_postgres_does() {
        let cases: &[(&str, u8, i8, Result<i128, NumericTextError>)] = &[
            ("12.5", 12, 2, Ok(1250)),
            (" -0.005 ", 12, 2, Ok(-1)),
            ("0.004", 12, 2, Ok(0)),
            ("1.5e2", 12, 2, Ok(15000)),
            ("+.5E-1", 12, 2, Ok(5)),
            ("0001e-0002", 12, 2, Ok(1)),
            ("9.995", 4, 2, Ok(1000)),
            ("99.995", 4, 2, Err(Overflow)),
            ("9.994", 4, 2, Ok(999)),
            ("99.99", 4, 2, Ok(9999)),
            ("100", 4, 2, Err(Overflow)),
            ("0", 4, 2, Ok(0)),
            ("0e99999999", 4, 2, Err(Overflow)),
            ("1e-1000", 4, 2, Ok(0)),
            ("1e-99999999", 4, 2, Err(Overflow)),
            ("1e65537", 38, 10, Err(Overflow)),
            ("1e32769", 38, 10, Err(Overflow)),
            ("4825037936439135476.2609835314269495255615E-14", 9, 4, Ok(482503794)),
            ("99999999999999999999999999999999999999", 38, 0, Ok(99999999999999999999999999999999999999)),
            ("999999999999999999999999999999999999999e-1", 38, 0, Err(Overflow)),
            ("123", 38, -2, Ok(1)),
            ("", 12, 2, Err(Syntax)),
            (".", 12, 2, Err(Syntax)),
            ("e2", 12, 2, Err(Syntax)),
            ("1e", 12, 2, Err(Syntax)),
            ("1.2.3", 12, 2, Err(Syntax)),
            ("12a", 12, 2, Err(Syntax)),
            ("--1", 12, 2, Err(Syntax)),
            ("NaN", 12, 2, Err(Syntax)),
        ];
        for (text, p, s, expected) in cases {
            assert_eq!(&parse(text, *p, *s), expected, "{text} as numeric({p}, {s})");
        }
        assert_eq!(parse(&"1".repeat(256), 38, 0), Err(Overflow));
        assert_eq!(parse(&format!("0.{}", "1".repeat(256)), 38, 2), Ok(11));
    }
}
