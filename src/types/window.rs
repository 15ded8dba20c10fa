//! Event time and windows: the arithmetic every event-time piece shares.
//!
//! Event times are handled as `i64` nanoseconds since 1970-01-01 UTC (a TIMESTAMP column of
//! any unit is converted; TIMESTAMPTZ values are instants, so the zone does not matter).
//! Windows are aligned to the epoch plus an offset: the tumbling window of `t` starts at
//! `t - (t - offset) mod size`, and contains `[start, start + size)`, so an event exactly at a
//! window's end belongs to the next window. A hopping window of `size` every `slide` holds
//! `size / slide` overlapping windows per event.
//!
//! [`WindowSpec::assign`] is used both by ad-hoc queries over `TUMBLE(...)` / `HOP(...)`
//! (`catalog::windowed`) and by the streaming `WindowAssign` operator, so a view and its
//! query as a batch put every row in the same windows.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, TimestampNanosecondArray, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit, TimestampNanosecondType};
use datafusion::common::ScalarValue;

use crate::error::{Result, SqlState, WeirError};

pub const WINDOW_START: &str = "window_start";
pub const WINDOW_END: &str = "window_end";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Tumble {
        size: i64,
    },
    Hop {
        slide: i64,
        size: i64,
    },
    /// Flink's cumulating windows: from each `size`-aligned start, windows ending every `step`
    /// until `size` (`[0, 1h)`, `[0, 2h)`, ... `[0, 1d)`), a row in each that ends after it.
    Cumulate {
        step: i64,
        size: i64,
    },
    /// Windows counted in calendar months (UTC), aligned to January 1970: `TUMBLE` by months
    /// (`slide` = `size`) or years, and `HOP` by them. Their lengths vary with the months.
    Months {
        slide: i64,
        size: i64,
    },
}

/// The first instant (nanoseconds) of month `index` counted from January 1970 (UTC).
fn month_start(index: i64) -> i64 {
    let (year, month) = (1970 + index.div_euclid(12), index.rem_euclid(12) as u32 + 1);
    chrono::NaiveDate::from_ymd_opt(year as i32, month, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|d| d.and_utc().timestamp_nanos_opt())
        .unwrap_or(if index < 0 { i64::MIN } else { i64::MAX })
}

/// The month (from January 1970, UTC) instant `t` is in.
fn month_of(t: i64) -> i64 {
    use chrono::Datelike;
    let date = chrono::DateTime::from_timestamp_nanos(t).date_naive();
    (date.year() as i64 - 1970) * 12 + date.month0() as i64
}

/// A constant interval counted in months only (`INTERVAL '1' MONTH`, `'1' YEAR`), as months.
pub fn interval_months(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months != 0 && v.days == 0 && v.nanoseconds == 0 => {
            Some(v.months as i64)
        }
        ScalarValue::IntervalYearMonth(Some(months)) if *months != 0 => Some(*months as i64),
        _ => None,
    }
}

/// Which windows the rows of a relation fall into, by which column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    pub kind: WindowKind,
    pub offset: i64,
    /// The event-time column of the input.
    pub time_column: usize,
}

fn invalid(message: impl Into<String>) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// Whether a column can carry event time.
pub fn is_time_type(t: &DataType) -> bool {
    matches!(t, DataType::Timestamp(_, _))
}

/// A constant interval as nanoseconds; months are refused (they have no fixed length).
pub fn interval_nanos(value: &ScalarValue) -> Result<i64> {
    let nanos = match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            (v.days as i64).checked_mul(86_400_000_000_000).and_then(|d| d.checked_add(v.nanoseconds))
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            Some(v.days as i64 * 86_400_000_000_000 + v.milliseconds as i64 * 1_000_000)
        }
        ScalarValue::IntervalYearMonth(Some(0)) => Some(0),
        ScalarValue::IntervalMonthDayNano(Some(_)) | ScalarValue::IntervalYearMonth(Some(_)) => {
            return Err(invalid(
                "an interval of months or years has no fixed length; use days, hours, minutes or seconds",
            ))
        }
        other => return Err(invalid(format!("expected a constant INTERVAL, got {other}"))),
    };
    nanos.ok_or_else(|| invalid("interval out of range"))
}

/// Event times of `array` (a TIMESTAMP column) in nanoseconds; NULL stays NULL.
pub fn to_nanos(array: &ArrayRef) -> Result<TimestampNanosecondArray> {
    let DataType::Timestamp(_, tz) = array.data_type() else {
        return Err(invalid(format!("event time must be a TIMESTAMP, not {}", array.data_type())));
    };
    let converted = cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, tz.clone()))?;
    Ok(converted.as_primitive::<TimestampNanosecondType>().clone())
}

/// The watermark of an input that has ended (a bounded source that read its last row): past
/// every row's time. Shown as no watermark (NULL, no metric) where a time is displayed.
pub const PAST_EVERY_ROW: i64 = i64::MAX;

/// The current time in nanoseconds since the epoch.
pub fn now_nanos() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// One instant (`nanos` since the epoch), `rows` times, as `data_type` (a timestamp): when rows
/// were stored (a processing-time column) or judged late (a late-rows table's `arrived_at`).
pub fn instant_column(nanos: i64, data_type: &DataType, rows: usize) -> Result<ArrayRef> {
    Ok(cast(&TimestampNanosecondArray::from_value(nanos, rows).with_timezone("+00:00"), data_type)?)
}

/// Nanoseconds back to the type of a TIMESTAMP column.
pub fn from_nanos<T>(values: T, data_type: &DataType) -> Result<ArrayRef>
where
    TimestampNanosecondArray: From<T>,
{
    let DataType::Timestamp(_, tz) = data_type else {
        return Err(invalid(format!("event time must be a TIMESTAMP, not {data_type}")));
    };
    let array: ArrayRef = Arc::new(TimestampNanosecondArray::from(values).with_timezone_opt(tz.clone()));
    Ok(cast(&array, data_type)?)
}

/// An event time as 8 bytes that sort like the time (big-endian, sign bit flipped), for state
/// keys ordered by time.
pub fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// The event time at the start of a [`time_key`]-prefixed key.
pub fn time_from_key(key: &[u8]) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&key[..8]);
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// Nanoseconds as text, for messages (`2026-01-01 00:00:10`).
pub fn format_nanos(nanos: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(nanos).naive_utc().to_string()
}

impl WindowSpec {
    /// A checked window: sizes positive, a hop's size a multiple of its slide.
    pub fn new(kind: WindowKind, offset: i64, time_column: usize) -> Result<WindowSpec> {
        match kind {
            WindowKind::Tumble { size } if size <= 0 => return Err(invalid("TUMBLE's size must be positive")),
            WindowKind::Hop { slide, size } => {
                if slide <= 0 || size <= 0 {
                    return Err(invalid("HOP's slide and size must be positive"));
                }
                if size % slide != 0 {
                    return Err(invalid(format!(
                        "HOP's size must be a multiple of its slide (size {} s, slide {} s)",
                        size as f64 / 1e9,
                        slide as f64 / 1e9
                    )));
                }
            }
            WindowKind::Months { slide, size } => {
                if slide <= 0 || size <= 0 || size % slide != 0 {
                    return Err(invalid("a window of months needs positive sizes, its size a multiple of its slide"));
                }
            }
            WindowKind::Cumulate { step, size } => {
                if step <= 0 || size <= 0 {
                    return Err(invalid("CUMULATE's step and size must be positive"));
                }
                if size % step != 0 {
                    return Err(invalid(format!(
                        "CUMULATE's size must be a multiple of its step (size {} s, step {} s)",
                        size as f64 / 1e9,
                        step as f64 / 1e9
                    )));
                }
            }
            _ => {}
        }
        Ok(WindowSpec { kind, offset, time_column })
    }

    pub fn size(&self) -> i64 {
        match self.kind {
            WindowKind::Tumble { size }
            | WindowKind::Hop { size, .. }
            | WindowKind::Cumulate { size, .. }
            | WindowKind::Months { size, .. } => size,
        }
    }

    /// How long after its `window_start` a window closes: its size, the same for every window
    /// but a cumulating one's (their ends differ from one start).
    pub fn start_closes_after(&self) -> Option<i64> {
        match self.kind {
            WindowKind::Cumulate { .. } | WindowKind::Months { .. } => None,
            _ => Some(self.size()),
        }
    }

    fn slide(&self) -> i64 {
        match self.kind {
            WindowKind::Tumble { size } | WindowKind::Cumulate { size, .. } => size,
            WindowKind::Hop { slide, .. } | WindowKind::Months { slide, .. } => slide,
        }
    }

    /// The input's columns, then `window_start` and `window_end` (of the time column's type).
    pub fn output_schema(&self, input: &Schema) -> SchemaRef {
        Windowing::Fixed(self.clone()).output_schema(input)
    }

    /// The start of the last window containing `t` (the only one for a tumbling window).
    fn last_start(&self, t: i64) -> i64 {
        let slide = self.slide();
        t - (t - self.offset).rem_euclid(slide)
    }

    /// Every window of `t` as (start, end), earliest start (and end) first.
    pub fn windows(&self, t: i64) -> Vec<(i64, i64)> {
        if let WindowKind::Months { slide, size } = self.kind {
            // Months of the time less the offset; each bound then moved by the offset.
            let month = month_of(t.saturating_sub(self.offset));
            let last = month - month.rem_euclid(slide);
            let at = |index: i64| month_start(index).saturating_add(self.offset);
            return (0..size / slide).rev().map(|k| (at(last - k * slide), at(last - k * slide + size))).collect();
        }
        let last = self.last_start(t);
        match self.kind {
            WindowKind::Cumulate { step, size } => {
                let first = (t - last) / step + 1;
                (first..=size / step).map(|k| (last, last + k * step)).collect()
            }
            _ => {
                let (slide, size) = (self.slide(), self.size());
                (0..self.windows_per_time()).rev().map(|k| (last - k * slide, last - k * slide + size)).collect()
            }
        }
    }

    /// How many windows each time is in, at most.
    fn windows_per_time(&self) -> i64 {
        match self.kind {
            WindowKind::Cumulate { step, size } => size / step,
            _ => self.size() / self.slide(),
        }
    }

    /// `batch`'s rows with their windows (`output_schema`): one row per row and window, rows
    /// with a NULL time left out. Also returns, per output row, the input row it came from.
    pub fn assign(&self, batch: &RecordBatch, schema: &SchemaRef) -> Result<(RecordBatch, Vec<u32>)> {
        let times = to_nanos(batch.column(self.time_column))?;
        let rows = times.len() * self.windows_per_time() as usize;
        let mut origins: Vec<u32> = Vec::with_capacity(rows);
        let mut starts: Vec<i64> = Vec::with_capacity(rows);
        let mut ends: Vec<i64> = Vec::with_capacity(rows);
        for (row, t) in times.iter().enumerate() {
            let Some(t) = t else { continue };
            for (start, end) in self.windows(t) {
                origins.push(row as u32);
                starts.push(start);
                ends.push(end);
            }
        }
        let time_type = batch.schema().field(self.time_column).data_type().clone();
        let indices = UInt32Array::from(origins.clone());
        let mut columns: Vec<ArrayRef> = if origins.len() == batch.num_rows()
            && origins.iter().enumerate().all(|(i, &o)| i as u32 == o)
        {
            batch.columns().to_vec()
        } else {
            batch.columns().iter().map(|c| take(c.as_ref(), &indices, None)).collect::<std::result::Result<_, _>>()?
        };
        columns.push(from_nanos(starts, &time_type)?);
        columns.push(from_nanos(ends, &time_type)?);
        Ok((RecordBatch::try_new(Arc::clone(schema), columns)?, origins))
    }

    /// `TUMBLE(size => 10s)` for EXPLAIN.
    pub fn describe(&self) -> String {
        let secs = |n: i64| format!("{}s", n as f64 / 1e9);
        let offset = if self.offset != 0 { format!(", offset {}", secs(self.offset)) } else { String::new() };
        match self.kind {
            WindowKind::Tumble { size } => format!("TUMBLE(size {}{offset})", secs(size)),
            WindowKind::Hop { slide, size } => format!("HOP(slide {}, size {}{offset})", secs(slide), secs(size)),
            WindowKind::Cumulate { step, size } => {
                format!("CUMULATE(step {}, size {}{offset})", secs(step), secs(size))
            }
            WindowKind::Months { slide, size } if slide == size => format!("TUMBLE(size {size} months{offset})"),
            WindowKind::Months { slide, size } => format!("HOP(slide {slide} months, size {size} months{offset})"),
        }
    }
}

/// Session windows: rows with the same key values whose event times are less than `gap`
/// apart form a session `[first time, last time + gap)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    pub gap: i64,
    pub time_column: usize,
    /// The columns sessions are kept per (none: one series of sessions for all rows).
    pub keys: Vec<usize>,
}

impl SessionSpec {
    pub fn new(gap: i64, time_column: usize, keys: Vec<usize>) -> Result<SessionSpec> {
        if gap <= 0 {
            return Err(invalid("SESSION's gap must be positive"));
        }
        Ok(SessionSpec { gap, time_column, keys })
    }

    /// The sessions of one key's event times (sorted ascending): `(start, end)` per session.
    pub fn sessions(&self, sorted_times: &[i64]) -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = Vec::new();
        for &t in sorted_times {
            match out.last_mut() {
                Some((_, end)) if t < *end => *end = (*end).max(t.saturating_add(self.gap)),
                _ => out.push((t, t.saturating_add(self.gap))),
            }
        }
        out
    }

    /// The session of each time in `sorted_times`, given its sessions.
    pub fn session_of(sessions: &[(i64, i64)], t: i64) -> (i64, i64) {
        let i = sessions.partition_point(|&(start, _)| start <= t);
        sessions[i.saturating_sub(1)]
    }

    /// Every row of `batches` (all rows of a relation) with its session, for ad-hoc queries;
    /// rows with a NULL time are left out.
    pub fn assign_all(&self, batches: &[RecordBatch], schema: &SchemaRef) -> Result<RecordBatch> {
        use datafusion::arrow::row::{RowConverter, SortField};
        use std::collections::HashMap;
        let input = match batches.first() {
            Some(b) => b.schema(),
            None => return Ok(RecordBatch::new_empty(Arc::clone(schema))),
        };
        let all = datafusion::arrow::compute::concat_batches(&input, batches)?;
        let times = to_nanos(all.column(self.time_column))?;
        let key_columns: Vec<ArrayRef> = self.keys.iter().map(|&k| Arc::clone(all.column(k))).collect();
        let codec = RowConverter::new(key_columns.iter().map(|c| SortField::new(c.data_type().clone())).collect())?;
        let keys = codec.convert_columns(&key_columns)?;
        let mut by_key: HashMap<&[u8], Vec<(i64, u32)>> = HashMap::new();
        for (row, t) in times.iter().enumerate() {
            if let Some(t) = t {
                by_key.entry(keys.row(row).data()).or_default().push((t, row as u32));
            }
        }
        let (mut origins, mut starts, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for (_, mut rows) in by_key {
            rows.sort_unstable();
            let sorted: Vec<i64> = rows.iter().map(|(t, _)| *t).collect();
            let sessions = self.sessions(&sorted);
            for (t, row) in rows {
                let (start, end) = Self::session_of(&sessions, t);
                origins.push(row);
                starts.push(Some(start));
                ends.push(Some(end));
            }
        }
        let time_type = input.field(self.time_column).data_type().clone();
        let indices = UInt32Array::from(origins);
        let mut columns: Vec<ArrayRef> =
            all.columns().iter().map(|c| take(c.as_ref(), &indices, None)).collect::<std::result::Result<_, _>>()?;
        columns.push(from_nanos(starts, &time_type)?);
        columns.push(from_nanos(ends, &time_type)?);
        Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
    }

    pub fn describe(&self, input: &Schema) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|&k| input.field(k).name().as_str()).collect();
        let by = if keys.is_empty() { String::new() } else { format!(" per [{}]", keys.join(", ")) };
        format!("SESSION(gap {}s){by}", self.gap as f64 / 1e9)
    }
}

/// The windows of a `TUMBLE`, `HOP` or `SESSION` relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Windowing {
    Fixed(WindowSpec),
    Session(SessionSpec),
}

impl Windowing {
    /// The same windows over an input narrowed to `columns` (of the original input), which hold
    /// the time column and any session keys.
    pub fn narrowed(&self, columns: &[usize]) -> Windowing {
        let at = |c: usize| columns.iter().position(|&k| k == c).expect("a narrowed input keeps the window's columns");
        match self {
            Windowing::Fixed(w) => Windowing::Fixed(WindowSpec { time_column: at(w.time_column), ..w.clone() }),
            Windowing::Session(s) => Windowing::Session(SessionSpec {
                time_column: at(s.time_column),
                keys: s.keys.iter().map(|&k| at(k)).collect(),
                ..s.clone()
            }),
        }
    }

    /// The input columns the windows are computed from: the time column and session keys.
    pub fn columns(&self) -> Vec<usize> {
        match self {
            Windowing::Fixed(w) => vec![w.time_column],
            Windowing::Session(s) => std::iter::once(s.time_column).chain(s.keys.iter().copied()).collect(),
        }
    }

    pub fn time_column(&self) -> usize {
        match self {
            Windowing::Fixed(w) => w.time_column,
            Windowing::Session(s) => s.time_column,
        }
    }

    /// The input's columns, then `window_start` and `window_end` (of the time column's type).
    pub fn output_schema(&self, input: &Schema) -> SchemaRef {
        let time_type = input.field(self.time_column()).data_type().clone();
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(WINDOW_START, time_type.clone(), true));
        fields.push(Field::new(WINDOW_END, time_type, true));
        Arc::new(Schema::new(fields))
    }
}

/// How a column tells when its row's window closes: at its value plus `close_offset`
/// (`window_start` + size, `window_end` + 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeColumn {
    pub close_offset: i64,
}

/// The close time of each row by column `array` (a window column), NULL where it is NULL.
pub fn close_times(array: &ArrayRef, column: TimeColumn) -> Result<Vec<Option<i64>>> {
    Ok(to_nanos(array)?.iter().map(|v| v.map(|v| v.saturating_add(column.close_offset))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn windows_align_to_the_epoch_and_the_end_belongs_to_the_next() {
        let starts = |spec: &WindowSpec, t: i64| spec.windows(t).into_iter().map(|(s, _)| s).collect::<Vec<_>>();
        let tumble = WindowSpec::new(WindowKind::Tumble { size: 10 * S }, 0, 0).unwrap();
        assert_eq!(starts(&tumble, 15 * S), vec![10 * S]);
        assert_eq!(starts(&tumble, 20 * S), vec![20 * S]);
        assert_eq!(starts(&tumble, -1), vec![-10 * S]);
        assert_eq!(tumble.windows(15 * S), vec![(10 * S, 20 * S)]);
        let shifted = WindowSpec::new(WindowKind::Tumble { size: 10 * S }, 3 * S, 0).unwrap();
        assert_eq!(starts(&shifted, 12 * S), vec![3 * S]);
        let hop = WindowSpec::new(WindowKind::Hop { slide: 2 * S, size: 6 * S }, 0, 0).unwrap();
        assert_eq!(starts(&hop, 7 * S), vec![2 * S, 4 * S, 6 * S]);
        assert!(WindowSpec::new(WindowKind::Hop { slide: 4 * S, size: 6 * S }, 0, 0).is_err());
        assert!(WindowSpec::new(WindowKind::Tumble { size: 0 }, 0, 0).is_err());
    }

    /// Windows of months follow the calendar (UTC), aligned to January 1970.
    #[test]
    fn windows_of_months_follow_the_calendar() {
        let at = |y, m, d| {
            chrono::NaiveDate::from_ymd_opt(y, m, d)
                .unwrap()
                .and_hms_opt(0, 0, 0)
                .unwrap()
                .and_utc()
                .timestamp_nanos_opt()
                .unwrap()
        };
        let monthly = WindowSpec::new(WindowKind::Months { slide: 1, size: 1 }, 0, 0).unwrap();
        assert_eq!(monthly.windows(at(2024, 2, 29)), vec![(at(2024, 2, 1), at(2024, 3, 1))]);
        assert_eq!(monthly.windows(at(2024, 3, 1) - 1), vec![(at(2024, 2, 1), at(2024, 3, 1))]);
        let quarters = WindowSpec::new(WindowKind::Months { slide: 3, size: 3 }, 0, 0).unwrap();
        assert_eq!(quarters.windows(at(2026, 5, 20)), vec![(at(2026, 4, 1), at(2026, 7, 1))]);
        let yearly = WindowSpec::new(WindowKind::Months { slide: 12, size: 12 }, 0, 0).unwrap();
        assert_eq!(yearly.windows(at(1969, 7, 4)), vec![(at(1969, 1, 1), at(1970, 1, 1))]);
        let rolling = WindowSpec::new(WindowKind::Months { slide: 1, size: 2 }, 0, 0).unwrap();
        assert_eq!(
            rolling.windows(at(2026, 1, 15)),
            vec![(at(2025, 12, 1), at(2026, 2, 1)), (at(2026, 1, 1), at(2026, 3, 1))]
        );
        assert_eq!(monthly.start_closes_after(), None);
    }

    /// A cumulating window's row is in every window of its `size`-aligned start that ends after
    /// it: one at the end of its step, then one per step up to the size.
    #[test]
    fn cumulating_windows_grow_by_steps_from_one_start() {
        let cumulate = WindowSpec::new(WindowKind::Cumulate { step: 2 * S, size: 6 * S }, 0, 0).unwrap();
        assert_eq!(cumulate.windows(S / 2), vec![(0, 2 * S), (0, 4 * S), (0, 6 * S)]);
        assert_eq!(cumulate.windows(2 * S), vec![(0, 4 * S), (0, 6 * S)]);
        assert_eq!(cumulate.windows(5 * S), vec![(0, 6 * S)]);
        assert_eq!(cumulate.windows(9 * S), vec![(6 * S, 10 * S), (6 * S, 12 * S)]);
        assert_eq!(cumulate.start_closes_after(), None);
        assert!(WindowSpec::new(WindowKind::Cumulate { step: 4 * S, size: 6 * S }, 0, 0).is_err());
    }

    #[test]
    fn sessions_split_at_gaps_of_at_least_the_gap() {
        let s = SessionSpec::new(10, 0, vec![]).unwrap();
        assert_eq!(s.sessions(&[0, 5, 14, 23, 40]), vec![(0, 33), (40, 50)]);
        // Exactly `gap` apart: two sessions.
        assert_eq!(s.sessions(&[0, 10]), vec![(0, 10), (10, 20)]);
        assert_eq!(SessionSpec::session_of(&[(0, 33), (40, 50)], 23), (0, 33));
        assert_eq!(SessionSpec::session_of(&[(0, 33), (40, 50)], 40), (40, 50));
        assert!(SessionSpec::new(0, 0, vec![]).is_err());
    }
}
