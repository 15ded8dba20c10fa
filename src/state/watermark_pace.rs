//! How fast an operator's watermark moves in wall-clock time, so that state which expires with
//! the watermark can tell what it will drop before the next checkpoint.
//!
//! A write-back table settles its pending writes between checkpoints (ADR 18), which is wasted
//! on state deleted before any checkpoint needs it: at full speed a window's groups live a few
//! hundred milliseconds of wall time, then are written to RocksDB, then deleted from it. The
//! operator feeds its watermark in at each barrier ([`WatermarkPace::observe`]) and asks where
//! the watermark will be one checkpoint interval on ([`WatermarkPace::forecast`]); state final
//! by then is kept out of settling ([`super::keyed::KeyedState::flush_keeping`]). The forecast
//! is the pace over the last [`SPAN`] carried forward: a guess, which only decides *when* a
//! write reaches the store (settled now, or with the checkpoint), never *whether*.
//!
//! Used by the windowed aggregate (`operators::hash_agg`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::keyed::{Flush, KeyedState};

/// The wall time the pace is measured over.
pub const SPAN: Duration = Duration::from_secs(2);
/// Observations kept at most (barriers every 10 ms would be 200 in [`SPAN`]).
const MAX_OBSERVATIONS: usize = 64;

/// Recent (wall time, watermark) observations, oldest first.
#[derive(Debug, Default)]
pub struct WatermarkPace {
    recent: VecDeque<(Instant, i64)>,
}

impl WatermarkPace {
    /// The watermark at `at` (None: none yet, which is not observed).
    pub fn observe(&mut self, at: Instant, watermark: Option<i64>) {
        let Some(watermark) = watermark else { return };
        self.recent.push_back((at, watermark));
        while self.recent.len() > MAX_OBSERVATIONS
            || self.recent.front().is_some_and(|(t, _)| at.saturating_duration_since(*t) > SPAN)
        {
            self.recent.pop_front();
        }
    }

    /// The watermark expected `ahead` after the last observation at the recent pace, never
    /// behind the last one (None before any observation). With one observation, or a
    /// watermark that stood still, it is the last watermark.
    pub fn forecast(&self, ahead: Duration) -> Option<i64> {
        let &(last_at, last) = self.recent.back()?;
        let &(first_at, first) = self.recent.front()?;
        let elapsed = last_at.saturating_duration_since(first_at).as_secs_f64();
        if elapsed <= 0.0 || last <= first {
            return Some(last);
        }
        // In f64: a watermark jumping to the end of time (a finished source) saturates.
        let advance = (last as f64 - first as f64) * ahead.as_secs_f64() / elapsed;
        Some((last as f64 + advance).min(i64::MAX as f64) as i64)
    }

    /// For a flush of `table`: through which close time windows taking late rows for
    /// `lateness` will be final by the next checkpoint, so that their state need not settle
    /// ([`KeyedState::flush_keeping`]). None at a checkpoint's flush, for a table that does
    /// not settle, or before any watermark.
    pub fn final_by_next_checkpoint(&self, table: &KeyedState, flush: Flush, lateness: i64) -> Option<i64> {
        if flush.checkpoint {
            return None;
        }
        crate::types::clock::Clock::at_watermark(self.forecast(table.settling_horizon()?)?).final_through(lateness)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn the_recent_pace_carries_forward() {
        let start = Instant::now();
        let mut pace = WatermarkPace::default();
        assert_eq!(pace.forecast(Duration::from_secs(1)), None, "nothing observed");
        pace.observe(start, None);
        assert_eq!(pace.forecast(Duration::from_secs(1)), None, "no watermark yet is not a watermark");
        pace.observe(start, Some(100 * SECOND));
        assert_eq!(pace.forecast(Duration::from_secs(1)), Some(100 * SECOND), "one observation: no pace");
        // 40 s of event time per second of wall time.
        pace.observe(start + Duration::from_millis(500), Some(120 * SECOND));
        assert_eq!(pace.forecast(Duration::from_secs(1)), Some(160 * SECOND));
        assert_eq!(pace.forecast(Duration::ZERO), Some(120 * SECOND));
    }

    #[test]
    fn only_the_last_span_counts_and_a_standing_watermark_stands() {
        let start = Instant::now();
        let mut pace = WatermarkPace::default();
        pace.observe(start, Some(0));
        pace.observe(start + Duration::from_secs(1), Some(1000 * SECOND));
        // Three seconds later the watermark has not moved: the fast first second is out of the span.
        pace.observe(start + Duration::from_secs(4), Some(1000 * SECOND));
        assert_eq!(pace.forecast(Duration::from_secs(1)), Some(1000 * SECOND));
    }

    #[test]
    fn a_jump_to_the_end_of_time_saturates() {
        let start = Instant::now();
        let mut pace = WatermarkPace::default();
        pace.observe(start, Some(0));
        pace.observe(start + Duration::from_millis(100), Some(i64::MAX));
        assert_eq!(pace.forecast(Duration::from_secs(1)), Some(i64::MAX));
    }
}
