//! [`EpochClock`]: the time each epoch carries, which is what `now()` means inside a view
//! (temporal filters, ADR 13).
//!
//! The coordinator reads the clock once per barrier and puts the time in the barrier
//! ([`crate::types::Barrier::now`]), so every operator of every view sees one `now()` per
//! epoch, and a view restored after a crash computes with the times its epochs carried, never
//! with the time a row happened to be processed. The clock is the wall clock (UTC) unless it
//! is pinned (`SET weir.epoch_clock = '<timestamp>'`, server-wide), which makes tests and
//! demonstrations of temporal filters independent of how long they take. Operators never see
//! time go back: each keeps the latest time it was given.

use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;

use crate::error::{Result, SqlState, WeirError};
use crate::types::window::now_nanos;

pub struct EpochClock {
    /// A pinned time (nanoseconds since 1970 UTC), or None for the wall clock.
    pinned: Mutex<Option<i64>>,
    /// The time the last barrier carried.
    last: AtomicI64,
}

impl Default for EpochClock {
    fn default() -> Self {
        EpochClock { pinned: Mutex::new(None), last: AtomicI64::new(now_nanos()) }
    }
}

impl EpochClock {
    /// The time of a barrier being injected now.
    pub fn next(&self) -> i64 {
        let now = self.pinned.lock().unwrap_or_else(now_nanos);
        self.last.store(now, Ordering::SeqCst);
        now
    }

    /// The time the last barrier carried (what a view created now starts from).
    pub fn current(&self) -> i64 {
        self.last.load(Ordering::SeqCst)
    }

    /// Pins the clock at `at` (nanoseconds), or gives it back to the wall clock (None). Takes
    /// effect at the next barrier.
    pub fn pin(&self, at: Option<i64>) {
        *self.pinned.lock() = at;
    }

    /// Pins the clock as `SET weir.epoch_clock` says: a timestamp (UTC), or `wall` / DEFAULT
    /// for the wall clock.
    pub fn set(&self, value: Option<&str>) -> Result<()> {
        let at = match value.map(str::trim) {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("wall") => None,
            Some(v) => Some(parse_utc(v).ok_or_else(|| {
                WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("invalid value for weir.epoch_clock: \"{v}\" (a timestamp such as '2026-12-01 10:00:00', or 'wall')"),
                )
            })?),
        };
        self.pin(at);
        Ok(())
    }
}

/// `2026-12-01 10:00:00[.fff]` (or with a `T`) as nanoseconds since 1970, read as UTC.
fn parse_utc(text: &str) -> Option<i64> {
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|format| chrono::NaiveDateTime::parse_from_str(text, format).ok())
        .and_then(|t| t.and_utc().timestamp_nanos_opt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_clock_gives_its_time_until_released() {
        let clock = EpochClock::default();
        clock.pin(Some(42));
        assert_eq!((clock.next(), clock.current()), (42, 42));
        clock.set(Some("wall")).unwrap();
        assert!(clock.next() > 1_700_000_000_000_000_000);
        clock.set(Some("2026-12-01 10:00:00.5")).unwrap();
        assert_eq!(clock.next(), 1_796_119_200_500_000_000);
        assert_eq!(clock.set(Some("soon")).unwrap_err().state.0, "22023");
    }
}
