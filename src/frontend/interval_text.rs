//! Interval literals in every format Postgres reads, in the one DataFusion reads.
//!
//! Postgres prints intervals as `1 day 02:03:04` (IntervalStyle `postgres`), `P1DT2H3M4S`
//! (`iso_8601`) or `1 2:03:04` (`sql_standard`), and drivers send a duration in those forms
//! (psycopg, node-postgres); it also reads the verbose `@ 1 day 2 hours ago`. DataFusion's
//! parser (arrow's) reads only `<number> <unit>` pairs. [`normalize`] reads any of them and writes
//! the same interval as `<months> months <days> days <microseconds> microseconds`; the parser
//! ([`rewrite_interval_literals`]) applies it to `'...'::interval`, `CAST('...' AS INTERVAL)` and
//! `INTERVAL '...'` (without a unit after the string). Text it cannot read is left as it is, for
//! DataFusion's own error.

use datafusion::sql::sqlparser::ast::{self, DataType, Expr, Value};

/// An interval as Postgres keeps it.
#[derive(Debug, Default, PartialEq, Clone, Copy)]
struct Parts {
    months: i64,
    days: i64,
    micros: i64,
}

const MICROS_PER_SECOND: f64 = 1e6;
const MICROS_PER_DAY: f64 = 86_400e6;

impl Parts {
    /// Adds `amount` of `unit`; fractions spill to the smaller units as Postgres does (a month
    /// is 30 days, a day 24 hours).
    fn add(&mut self, amount: f64, unit: &str) -> Option<()> {
        let (months, days, micros) = match unit {
            "microsecond" | "microseconds" | "us" | "usec" | "usecs" => (0.0, 0.0, amount),
            "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => (0.0, 0.0, amount * 1e3),
            "second" | "seconds" | "s" | "sec" | "secs" => (0.0, 0.0, amount * MICROS_PER_SECOND),
            "minute" | "minutes" | "m" | "min" | "mins" => (0.0, 0.0, amount * 60.0 * MICROS_PER_SECOND),
            "hour" | "hours" | "h" | "hr" | "hrs" => (0.0, 0.0, amount * 3600.0 * MICROS_PER_SECOND),
            "day" | "days" | "d" => (0.0, amount, 0.0),
            "week" | "weeks" | "w" => (0.0, amount * 7.0, 0.0),
            "month" | "months" | "mon" | "mons" => (amount, 0.0, 0.0),
            "year" | "years" | "y" | "yr" | "yrs" => (amount * 12.0, 0.0, 0.0),
            "decade" | "decades" => (amount * 120.0, 0.0, 0.0),
            "century" | "centuries" => (amount * 1200.0, 0.0, 0.0),
            "millennium" | "millennia" | "millenniums" => (amount * 12000.0, 0.0, 0.0),
            _ => return None,
        };
        let whole_months = months.trunc();
        let days = days + (months - whole_months) * 30.0;
        let whole_days = days.trunc();
        let micros = micros + (days - whole_days) * MICROS_PER_DAY;
        self.months = self.months.checked_add(whole_months as i64)?;
        self.days = self.days.checked_add(whole_days as i64)?;
        self.micros = self.micros.checked_add(micros.round() as i64)?;
        Some(())
    }

    fn negated(self) -> Parts {
        Parts { months: -self.months, days: -self.days, micros: -self.micros }
    }
}

/// `[+-]H:M[:S[.f]]` as microseconds.
fn time_of_day(token: &str) -> Option<i64> {
    let (sign, rest) = match token.strip_prefix('-') {
        Some(rest) => (-1.0, rest),
        None => (1.0, token.strip_prefix('+').unwrap_or(token)),
    };
    let fields: Vec<&str> = rest.split(':').collect();
    if fields.len() < 2 || fields.len() > 3 {
        return None;
    }
    let hours: f64 = fields[0].parse().ok()?;
    let minutes: f64 = fields[1].parse().ok()?;
    let seconds: f64 = fields.get(2).map_or(Some(0.0), |s| s.parse().ok())?;
    Some((sign * ((hours * 60.0 + minutes) * 60.0 + seconds) * MICROS_PER_SECOND).round() as i64)
}

/// `[+-]Y-M` (SQL standard years and months) as months.
fn year_month(token: &str) -> Option<i64> {
    let (sign, rest) = match token.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, token.strip_prefix('+').unwrap_or(token)),
    };
    let (years, months) = rest.split_once('-')?;
    if years.is_empty() || !years.bytes().all(|b| b.is_ascii_digit()) || !months.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Checked: a year count past i64 / 12 overflowed (found by fuzzing, fuzz/regressions/values).
    years.parse::<i64>().ok()?.checked_mul(12)?.checked_add(months.parse::<i64>().ok()?)?.checked_mul(sign)
}

/// A number and a unit written together (`5min`, `-1.5h`): (number, unit).
fn glued(token: &str) -> Option<(f64, &str)> {
    let split = token.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = token.split_at(split);
    Some((number.parse().ok()?, unit))
}

/// ISO 8601 durations: `P[nY][nM][nW][nD][T[nH][nM][nS]]`.
fn iso_8601(text: &str) -> Option<Parts> {
    let rest = text.strip_prefix('p')?;
    let (date, time) = match rest.split_once('t') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut parts = Parts::default();
    let mut read = |section: &str, units: &[(char, &str)]| -> Option<()> {
        let mut number = String::new();
        for c in section.chars() {
            if c.is_ascii_digit() || c == '.' || c == '-' || c == '+' {
                number.push(c);
            } else {
                let unit = units.iter().find(|(u, _)| *u == c)?.1;
                parts.add(number.parse().ok()?, unit)?;
                number.clear();
            }
        }
        number.is_empty().then_some(())
    };
    read(date, &[('y', "years"), ('m', "months"), ('w', "weeks"), ('d', "days")])?;
    if let Some(time) = time {
        read(time, &[('h', "hours"), ('m', "minutes"), ('s', "seconds")])?;
    }
    Some(parts)
}

fn parse(text: &str) -> Option<Parts> {
    let text = text.trim().to_ascii_lowercase();
    if text.starts_with('p') {
        return iso_8601(&text);
    }
    let text = text.strip_prefix('@').unwrap_or(&text).trim();
    let (text, ago) = match text.strip_suffix("ago") {
        Some(rest) => (rest.trim(), true),
        None => (text, false),
    };
    let tokens: Vec<&str> = text.split_whitespace().collect();
    if tokens.is_empty() {
        return None;
    }
    let mut parts = Parts::default();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i];
        if let Some(micros) = token.contains(':').then(|| time_of_day(token)).flatten() {
            parts.micros = parts.micros.checked_add(micros)?;
        } else if let Some(months) = year_month(token) {
            parts.months = parts.months.checked_add(months)?;
        } else if let Ok(number) = token.parse::<f64>() {
            match tokens.get(i + 1) {
                // `3 4:05:06` (SQL standard): days before a time of day.
                Some(next) if next.contains(':') => parts.add(number, "days")?,
                Some(unit) if unit.starts_with(|c: char| c.is_ascii_alphabetic()) => {
                    parts.add(number, unit)?;
                    i += 1;
                }
                // A bare number is seconds.
                None => parts.add(number, "seconds")?,
                Some(_) => return None,
            }
        } else if let Some((number, unit)) = glued(token) {
            parts.add(number, unit)?;
        } else {
            return None;
        }
        i += 1;
    }
    Some(if ago { parts.negated() } else { parts })
}

/// `text` in the form DataFusion reads, if it is an interval Postgres reads.
pub fn normalize(text: &str) -> Option<String> {
    let p = parse(text)?;
    Some(format!("{} months {} days {} microseconds", p.months, p.days, p.micros))
}

/// Rewrites the interval literals of `statement` into the form DataFusion reads.
pub fn rewrite_interval_literals(statement: &mut ast::Statement) {
    use std::ops::ControlFlow;
    let rewrite = |value: &mut Expr| {
        if let Expr::Value(v) = value {
            if let Value::SingleQuotedString(text) = &mut v.value {
                if let Some(normal) = normalize(text) {
                    *text = normal;
                }
            }
        }
    };
    let _ = ast::visit_expressions_mut(statement, |expr| {
        match expr {
            Expr::Cast { expr: inner, data_type: DataType::Interval { .. }, .. } => rewrite(inner),
            Expr::Interval(interval) if interval.leading_field.is_none() && interval.last_field.is_none() => {
                rewrite(&mut interval.value)
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::arrow::datatypes::{IntervalMonthDayNanoType, IntervalUnit};

    /// What arrow reads from the normalized text: (months, days, nanoseconds).
    fn read(text: &str) -> (i32, i32, i64) {
        let normal = normalize(text).unwrap_or_else(|| panic!("cannot read {text:?}"));
        let array = StringArray::from(vec![normal.as_str()]);
        let cast = datafusion::arrow::compute::cast(
            &array,
            &datafusion::arrow::datatypes::DataType::Interval(IntervalUnit::MonthDayNano),
        )
        .unwrap();
        let v = cast.as_primitive::<IntervalMonthDayNanoType>();
        assert!(!v.is_null(0), "{text:?} -> {normal:?}");
        let v = v.value(0);
        (v.months, v.days, v.nanoseconds)
    }

    const S: i64 = 1_000_000_000;

    #[test]
    fn every_format_postgres_prints_and_reads() {
        // postgres (IntervalStyle's default), what drivers send for a duration.
        assert_eq!(read("1 day 02:03:04"), (0, 1, (2 * 3600 + 3 * 60 + 4) * S));
        assert_eq!(read("-1 days +02:03:00"), (0, -1, (2 * 3600 + 3 * 60) * S));
        assert_eq!(read("1 year 2 mons -3 days -04:05:06.789"), (14, -3, -(4 * 3600 + 5 * 60 + 6) * S - 789_000_000));
        assert_eq!(read("00:00:01.5"), (0, 0, 1_500_000_000));
        assert_eq!(read("3 days"), (0, 3, 0));
        // iso_8601.
        assert_eq!(read("P1Y2M3DT4H5M6S"), (14, 3, (4 * 3600 + 5 * 60 + 6) * S));
        assert_eq!(read("PT0.5S"), (0, 0, S / 2));
        assert_eq!(read("P2W"), (0, 14, 0));
        // sql_standard.
        assert_eq!(read("1-2 3 4:05:06"), (14, 3, (4 * 3600 + 5 * 60 + 6) * S));
        assert_eq!(read("-1-2"), (-14, 0, 0));
        // postgres_verbose and its abbreviations.
        assert_eq!(read("@ 1 day 2 hours ago"), (0, -1, -2 * 3600 * S));
        assert_eq!(read("@ 3 mins 4.5 secs"), (0, 0, 184_500_000_000));
        assert_eq!(read("5min"), (0, 0, 300 * S));
        // Fractions spill down; a bare number is seconds.
        assert_eq!(read("1.5 days"), (0, 1, 12 * 3600 * S));
        assert_eq!(read("1.5 months"), (1, 15, 0));
        assert_eq!(read("90"), (0, 0, 90 * S));
        for bad in ["", "soon", "1 fortnight", "1:2:3:4", "P1X"] {
            assert_eq!(normalize(bad), None, "{bad:?}");
        }
    }
}
