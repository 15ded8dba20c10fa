//! State that ends with time: the one contract of every store an operator keeps by time, and
//! the one rule of when the watermark ends it.
//!
//! [`Expiring`] is what a time-indexed store offers: everything held for a time at or before a
//! bound leaves at once ([`Expiring::expire_through`]), and the store hands back what its owner
//! must still act on (keys whose other state to delete, rows to emit). The five stores differ
//! only in how they keep things, chosen for their owners' costs:
//! [`KeysByTime`](super::keys_by_time::KeysByTime) (one time per key: windowed groups, Top-N
//! partitions, join keys, sessions), [`EntriesByTime`](super::entries_by_time::EntriesByTime)
//! (entries only added, several per time: a time-bounded join's rows),
//! [`RowsByTime`](super::rows_by_time::RowsByTime) (rows with multiplicities in a state table:
//! the EOWC buffer, a temporal filter), [`ExpiringRows`](super::expiring_rows::ExpiringRows)
//! (rows in memory, checkpointed in segments) and
//! [`ExpiringGroups`](super::expiring_groups::ExpiringGroups) (values in memory, checkpointed a
//! few per time). Bounds are inclusive everywhere: "through `t`".
//!
//! [`Expiry`] is the retention an operator declares (its allowed lateness): state for a time
//! (a window's close) is final once the view's watermark, less the lateness, has reached it
//! ([`Clock::final_through`]), and then it leaves ([`Expiry::expire`]). The runtime hands the
//! clock to every operator call; an operator keeps no watermark of its own.

use crate::error::Result;
use crate::types::clock::Clock;

/// A store of state kept by time.
pub trait Expiring {
    /// What leaves, for the owner to act on.
    type Expired;

    /// Takes out everything held for a time at or before `through` (a bound lower than an
    /// earlier one takes nothing more).
    fn expire_through(&mut self, through: i64) -> Result<Self::Expired>;
}

/// How long after its time an operator keeps state for it: its allowed lateness
/// (nanoseconds; 0 when state ends the moment the watermark reaches its time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    lateness: i64,
}

impl Expiry {
    pub const fn new(lateness: i64) -> Expiry {
        Expiry { lateness }
    }

    pub fn lateness(&self) -> i64 {
        self.lateness
    }

    /// State for times at or before this is final at `clock` (None before the first
    /// watermark: nothing is).
    pub fn final_through(&self, clock: &Clock) -> Option<i64> {
        clock.final_through(self.lateness)
    }

    /// Takes out of `store` what `clock` made final (None before the first watermark).
    pub fn expire<S: Expiring>(&self, clock: &Clock, store: &mut S) -> Result<Option<S::Expired>> {
        self.final_through(clock).map(|through| store.expire_through(through)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::keys_by_time::KeysByTime;

    #[test]
    fn state_leaves_once_the_watermark_less_the_lateness_reaches_its_time() {
        let mut keys = KeysByTime::default();
        keys.insert(b"a", 10);
        keys.insert(b"b", 20);
        let expiry = Expiry::new(5);
        assert!(expiry.expire(&Clock::default(), &mut keys).unwrap().is_none(), "no watermark yet");
        assert_eq!(expiry.expire(&Clock::at_watermark(14), &mut keys).unwrap(), Some(vec![]));
        assert_eq!(expiry.expire(&Clock::at_watermark(15), &mut keys).unwrap(), Some(vec![(10, vec![b"a".to_vec()])]));
        assert_eq!(keys.len(), 1);
    }
}
