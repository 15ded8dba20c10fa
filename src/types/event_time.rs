//! Event time as an operator follows it: the view's watermark so far and the allowed lateness,
//! with the one rule every windowed operator applies. A window (or session, or row time)
//! closing at `close` is *final* once `close <= watermark - lateness`: no row can change it any
//! more, so a row for it is late and its state may go. Before the first watermark nothing is
//! final.
//!
//! Held by the window assigners, the session assigner, the aggregate, the join, the Top-N and
//! the EOWC buffer, each fed by `Operator::on_watermark`.

/// The watermark an operator has seen and how long after its close a window still takes rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct EventTime {
    watermark: Option<i64>,
    lateness: i64,
}

impl EventTime {
    /// No watermark yet; windows take rows `lateness` nanoseconds after their close.
    pub fn new(lateness: i64) -> EventTime {
        EventTime { watermark: None, lateness }
    }

    /// The view's watermark moved to `watermark` (nanoseconds; monotone).
    pub fn advance(&mut self, watermark: i64) {
        self.watermark = Some(watermark);
    }

    pub fn watermark(&self) -> Option<i64> {
        self.watermark
    }

    /// The allowed lateness, nanoseconds.
    pub fn lateness(&self) -> i64 {
        self.lateness
    }

    /// Windows closing at or before this are final (None before the first watermark).
    pub fn final_through(&self) -> Option<i64> {
        self.watermark.map(|w| w.saturating_sub(self.lateness))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_final_before_a_watermark_then_windows_close_after_the_lateness() {
        let mut time = EventTime::new(10);
        assert_eq!(time.final_through(), None);
        time.advance(100);
        assert_eq!((time.watermark(), time.final_through()), (Some(100), Some(90)));
        time.advance(i64::MIN);
        assert_eq!(time.final_through(), Some(i64::MIN), "saturates");
    }
}
