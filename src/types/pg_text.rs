//! Values as PostgreSQL writes them as text, where Arrow writes them otherwise: timestamps
//! (`2026-01-01 00:00:01.5`, a space and no trailing zeros, where Arrow writes
//! `2026-01-01T00:00:01.500`), times of day, floats in their shortest exact form (`3`,
//! `1e+20`, where Arrow writes `3.0` and `100000000000000000000`) and intervals (`1 day
//! 02:00:00`, where Arrow writes `1 days 2 hours`). One rendering serves the
//! wire's text format (`server::encode`) and casts to text in SQL (`frontend::text_casts`).

use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};

use crate::error::WeirError;

/// Whether Postgres writes values of `dt` otherwise than Arrow does (then [`pg_text`] does).
pub fn has_pg_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Timestamp(..)
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Float32
            | DataType::Float64
            | DataType::Interval(_)
            | DataType::Duration(_)
    )
}

/// `column` (a timestamp, time of day, float or interval column: [`has_pg_text`]) as Postgres
/// writes it; a timestamptz in `zone` (the session's `TimeZone`, as DataFusion has it), else
/// in its column's zone.
pub fn pg_text(column: &ArrayRef, zone: Option<&str>) -> Result<StringArray, WeirError> {
    use datafusion::arrow::array::{Float32Array, Float64Array, Time64MicrosecondArray, TimestampMicrosecondArray};
    Ok(match column.data_type() {
        DataType::Float64 => {
            let a = column.as_any().downcast_ref::<Float64Array>().expect("float64");
            a.iter().map(|v| v.map(|v| float_text(v, &v.to_string(), format!("{v:e}"), 15))).collect()
        }
        DataType::Float32 => {
            let a = column.as_any().downcast_ref::<Float32Array>().expect("float32");
            a.iter().map(|v| v.map(|v| float_text(v as f64, &v.to_string(), format!("{v:e}"), 6))).collect()
        }
        DataType::Timestamp(_, tz) => {
            // The same instants in microseconds, in the column's zone (the session's, for a
            // timestamptz DataFusion computed), which Postgres shows them in with its offset.
            let micros = cast(column, &DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))?;
            let micros = micros.as_any().downcast_ref::<TimestampMicrosecondArray>().expect("cast");
            // A zone Arrow cannot read (the session's `SET TIME ZONE '+5'`) is shown as UTC.
            let zone: Option<Tz> =
                tz.as_ref().map(|tz| zone.unwrap_or(tz).parse().unwrap_or_else(|_| "+00:00".parse().expect("UTC")));
            micros
                .iter()
                .map(|v| {
                    let t = v.and_then(chrono::DateTime::from_timestamp_micros)?;
                    let fraction = fraction(t.timestamp_subsec_micros());
                    Some(match &zone {
                        None => format!("{}{fraction}", t.format("%Y-%m-%d %H:%M:%S")),
                        Some(zone) => {
                            let local = t.with_timezone(zone);
                            let offset = chrono::Offset::fix(local.offset()).local_minus_utc();
                            format!("{}{fraction}{}", local.format("%Y-%m-%d %H:%M:%S"), offset_text(offset))
                        }
                    })
                })
                .collect()
        }
        // A duration (`timestamp - timestamp`) as the interval Postgres's difference is: whole
        // days and a time of the same sign (`20 days 23:59:59`, not `503:59:59`).
        DataType::Duration(_) => {
            use datafusion::arrow::datatypes::Int64Type;
            let micros = cast(column, &DataType::Duration(TimeUnit::Microsecond))?;
            let micros = cast(&micros, &DataType::Int64)?;
            const MICROS_PER_DAY: i64 = 86_400_000_000;
            micros
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|us| interval_text(0, (us / MICROS_PER_DAY) as i32, us % MICROS_PER_DAY)))
                .collect()
        }
        DataType::Interval(_) => {
            use datafusion::arrow::datatypes::{IntervalMonthDayNanoType, IntervalUnit};
            let intervals = cast(column, &DataType::Interval(IntervalUnit::MonthDayNano))?;
            let intervals = intervals.as_primitive::<IntervalMonthDayNanoType>();
            intervals.iter().map(|v| v.map(|v| interval_text(v.months, v.days, v.nanoseconds / 1_000))).collect()
        }
        _ => {
            let micros = cast(column, &DataType::Time64(TimeUnit::Microsecond))?;
            let micros = micros.as_any().downcast_ref::<Time64MicrosecondArray>().expect("cast");
            micros
                .iter()
                .map(|v| {
                    v.map(|us| {
                        let secs = us.div_euclid(1_000_000);
                        format!(
                            "{:02}:{:02}:{:02}{}",
                            secs / 3600,
                            secs / 60 % 60,
                            secs % 60,
                            fraction(us.rem_euclid(1_000_000) as u32)
                        )
                    })
                })
                .collect()
        }
    })
}

/// A float as Postgres prints it (extra_float_digits >= 1): the shortest digits that read back
/// exactly, in positional form unless the decimal exponent is below -4 or at least `precision`
/// (15 for float8, 6 for float4), then as `1.5e+20`. `plain` and `sci` are Rust's shortest
/// positional and scientific renderings of the same value.
fn float_text(v: f64, plain: &str, sci: String, precision: i32) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let (mantissa, exponent) = sci.split_once('e').expect("scientific form");
    let exponent: i32 = exponent.parse().expect("exponent");
    if v != 0.0 && (exponent < -4 || exponent >= precision) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        plain.to_string()
    }
}

/// An interval as Postgres writes it (IntervalStyle `postgres`): `1 year 2 mons 3 days
/// 04:05:06.5`, each part only when not zero (the time when nothing else is), `s` unless the
/// count is exactly 1, and a part after a negative one signed (`-1 days +02:00:00`).
fn interval_text(months: i32, days: i32, micros: i64) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut after_negative = false;
    let mut add = |count: i64, unit: &str, parts: &mut Vec<String>| {
        if count == 0 {
            return;
        }
        let sign = if count > 0 && after_negative { "+" } else { "" };
        let plural = if count == 1 { "" } else { "s" };
        parts.push(format!("{sign}{count} {unit}{plural}"));
        after_negative = count < 0;
    };
    add(i64::from(months / 12), "year", &mut parts);
    add(i64::from(months % 12), "mon", &mut parts);
    add(i64::from(days), "day", &mut parts);
    if micros != 0 || parts.is_empty() {
        let sign = if micros < 0 {
            "-"
        } else if after_negative {
            "+"
        } else {
            ""
        };
        let abs = micros.unsigned_abs();
        let secs = abs / 1_000_000;
        parts.push(format!(
            "{sign}{:02}:{:02}:{:02}{}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            fraction((abs % 1_000_000) as u32)
        ));
    }
    parts.join(" ")
}

/// A UTC offset as Postgres writes it after a timestamptz: `+00`, `-05`, `+05:30`.
fn offset_text(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let (hours, minutes, rest) = (seconds.abs() / 3600, seconds.abs() / 60 % 60, seconds.abs() % 60);
    match (minutes, rest) {
        (0, 0) => format!("{sign}{hours:02}"),
        (_, 0) => format!("{sign}{hours:02}:{minutes:02}"),
        _ => format!("{sign}{hours:02}:{minutes:02}:{rest:02}"),
    }
}

/// `.5` for 500000 microseconds, nothing for 0: Postgres trims trailing zeros.
fn fraction(micros: u32) -> String {
    if micros == 0 {
        return String::new();
    }
    let s = format!(".{micros:06}");
    s.trim_end_matches('0').to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use datafusion::arrow::array::TimestampNanosecondArray;

    #[test]
    fn timestamps_print_like_postgres() {
        let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![
            Some(1_767_225_601_000_000_000),
            Some(1_767_225_601_500_000_000),
            None,
        ]));
        let rendered = pg_text(&ts, None).unwrap();
        assert_eq!(rendered.value(0), "2026-01-01 00:00:01");
        assert_eq!(rendered.value(1), "2026-01-01 00:00:01.5");
        assert!(rendered.is_null(2));
    }

    #[test]
    fn timestamptz_prints_in_its_zone_with_the_offset() {
        use datafusion::arrow::array::TimestampMicrosecondArray;
        let at = 1_767_225_601_500_000; // 2026-01-01 00:00:01.5 UTC
        let text = |tz: &str| {
            let ts: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![at]).with_timezone(tz));
            pg_text(&ts, None).unwrap().value(0).to_string()
        };
        assert_eq!(text("+00:00"), "2026-01-01 00:00:01.5+00");
        assert_eq!(text("Europe/Berlin"), "2026-01-01 01:00:01.5+01");
        assert_eq!(text("Asia/Kolkata"), "2026-01-01 05:30:01.5+05:30");
        assert_eq!(text("America/New_York"), "2025-12-31 19:00:01.5-05");
        assert_eq!(offset_text(19 * 60 + 32), "+00:19:32");
        // A zone Arrow cannot read is shown as UTC rather than failing the result.
        assert_eq!(text("Not/AZone"), "2026-01-01 00:00:01.5+00");
        // The session's zone, when given, over the column's.
        let ts: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![at]).with_timezone("+00:00"));
        assert_eq!(pg_text(&ts, Some("Asia/Kolkata")).unwrap().value(0), "2026-01-01 05:30:01.5+05:30");
    }

    #[test]
    fn intervals_print_like_postgres() {
        let hour = 3_600_000_000;
        assert_eq!(interval_text(0, 1, 2 * hour + 3 * 60_000_000 + 4_500_000), "1 day 02:03:04.5");
        assert_eq!(interval_text(14, 3, 0), "1 year 2 mons 3 days");
        assert_eq!(interval_text(1, 0, 0), "1 mon");
        assert_eq!(interval_text(0, 0, 0), "00:00:00");
        assert_eq!(interval_text(0, 0, -hour), "-01:00:00");
        assert_eq!(interval_text(0, -1, 2 * hour), "-1 days +02:00:00");
        assert_eq!(interval_text(-13, 5, 0), "-1 years -1 mons +5 days");
        assert_eq!(interval_text(0, 0, 30 * hour), "30:00:00");
    }

    #[test]
    fn floats_print_like_postgres() {
        let f = |v: f64| float_text(v, &v.to_string(), format!("{v:e}"), 15);
        assert_eq!(f(3.0), "3");
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(-0.00001), "-1e-05");
        assert_eq!(f(1e20), "1e+20");
        assert_eq!(f(123456789012345.0), "123456789012345");
        assert_eq!(f(1e15), "1e+15");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(0.0), "0");
        let g = |v: f32| float_text(v as f64, &v.to_string(), format!("{v:e}"), 6);
        assert_eq!(g(1000000.0), "1e+06");
        assert_eq!(g(1.1), "1.1");
    }
}
