//! [`Clock`]: time as the runtime hands it to an operator on every call (`Operator::apply`,
//! `Operator::on_barrier`): the view's event-time watermark so far and the `now()` of the epoch
//! being ended. The runtime (`dataflow::graph`) keeps the one copy; operators keep none, only
//! what they derived from it and must remember (a temporal filter's time reached).
//!
//! It also holds the one rule every windowed operator applies: a window (or session, or row
//! time) closing at `close` is *final* once `close <= watermark - lateness`, the lateness being
//! the operator's own configuration. No row can change a final window any more, so a row for it
//! is late and its state may go. Before the first watermark nothing is final.

/// The view's watermark and the epoch's time (nanoseconds since 1970 UTC), each None until the
/// runtime has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clock {
    /// No more rows with an event time below it are expected; monotone, follows exactly the
    /// data before it.
    pub watermark: Option<i64>,
    /// `now()` in the view (a temporal filter): the time of the epoch being ended, set before
    /// its barrier and before a new view's first rows; it may be pinned back, so an operator
    /// keeps the latest it acted on.
    pub now: Option<i64>,
}

impl Clock {
    /// A clock with watermark `watermark` and no time.
    pub fn at_watermark(watermark: i64) -> Clock {
        Clock { watermark: Some(watermark), now: None }
    }

    /// Windows closing at or before this take no more rows, for an operator that takes them
    /// `lateness` nanoseconds after their close (None before the first watermark).
    pub fn final_through(&self, lateness: i64) -> Option<i64> {
        self.watermark.map(|w| w.saturating_sub(lateness))
    }

    /// This clock as seen by an operator deaf to the view's watermark (`operators::no_watermark`).
    pub fn without_watermark(&self) -> Clock {
        Clock { watermark: None, ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_final_before_a_watermark_then_windows_close_after_the_lateness() {
        assert_eq!(Clock::default().final_through(10), None);
        let clock = Clock::at_watermark(100);
        assert_eq!((clock.watermark, clock.final_through(10)), (Some(100), Some(90)));
        assert_eq!(Clock::at_watermark(i64::MIN).final_through(10), Some(i64::MIN), "saturates");
        assert_eq!(Clock { now: Some(5), ..clock }.without_watermark(), Clock { watermark: None, now: Some(5) });
    }
}
