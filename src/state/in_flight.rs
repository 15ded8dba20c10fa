//! [`InFlight`]: a view's operator state writes on their way to the store, oldest first, and
//! the one maker of the [`Flush`] its operators' tables flush with.
//!
//! A view job writes each epoch's operator state off its thread while it goes on with the next
//! epoch (ADR 19). A table keeps what a flush handed out readable, in flight, and forgets it at
//! its flush after next, or at the next one when told every batch is in
//! ([`KeyedState::flush`](super::keyed::KeyedState::flush)): so that batch must be in by then.
//! That rule used to be the job's to remember at each call; here it is a type. The only way a
//! job gets a `Flush` is [`InFlight::next_flush`], which first waits until at most the last
//! flush's batch is on its way and says whether none is. (Tests that write each batch before
//! the next flush use the constants on `Flush`.)
//!
//! Writes land in the order they were pushed: each waits for the one before it.
//!
//! Called by `dataflow::job`.

use std::collections::VecDeque;

use futures::future::{BoxFuture, FutureExt, Shared};

use super::keyed::Flush;
use crate::types::Epoch;

/// An operator state write in flight, as it comes out.
pub type StateWrite = Shared<BoxFuture<'static, Landed>>;

/// How an operator state write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landed {
    In,
    /// The runtime is shutting down: it was not written (nor will any later one be).
    Cancelled,
    /// It panicked: its state is not in.
    Failed(String),
}

/// A write that did not land, with its epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotLanded {
    /// The runtime is shutting down.
    Cancelled(Epoch),
    /// It failed (panicked): its state is not in.
    Failed(Epoch, String),
}

#[derive(Default)]
pub struct InFlight {
    writes: VecDeque<(Epoch, StateWrite)>,
}

impl InFlight {
    /// Adds epoch `epoch`'s write, pushed after every write before it.
    pub fn push(&mut self, epoch: Epoch, write: StateWrite) {
        self.writes.push_back((epoch, write));
    }

    /// The newest write on its way, for the next one to wait for.
    pub fn last(&self) -> Option<&StateWrite> {
        self.writes.back().map(|(_, write)| write)
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Waits until at most `keep` writes are on their way; the first that did not land ends it.
    pub async fn land(&mut self, keep: usize) -> Result<(), NotLanded> {
        while self.writes.len() > keep {
            let (epoch, write) = self.writes.pop_front().expect("a write in flight");
            match write.await {
                Landed::In => {}
                Landed::Cancelled => return Err(NotLanded::Cancelled(epoch)),
                Landed::Failed(e) => return Err(NotLanded::Failed(epoch, e)),
            }
        }
        Ok(())
    }

    /// The flush of the next barrier (`checkpoint`: a checkpoint's): the batch of the flush
    /// before last is in first (the tables forget it now), and the last one too if it is in
    /// already, so that the tables are told none is on its way and forget it sooner.
    pub async fn next_flush(&mut self, checkpoint: bool) -> Result<Flush, NotLanded> {
        self.land(1).await?;
        if self.writes.front().is_some_and(|(_, write)| write.clone().now_or_never().is_some()) {
            self.land(0).await?;
        }
        Ok(Flush { checkpoint, landed: self.writes.is_empty() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(landed: Landed) -> StateWrite {
        async move { landed }.boxed().shared()
    }

    #[tokio::test]
    async fn a_flush_comes_after_the_write_before_last_and_says_whether_any_is_on_its_way() {
        let mut in_flight = InFlight::default();
        assert_eq!(in_flight.next_flush(false).await.unwrap(), Flush { checkpoint: false, landed: true });
        // One on its way, not done yet: the flush may go on beside it.
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        in_flight.push(1, async move { rx.await.map_or(Landed::Cancelled, |()| Landed::In) }.boxed().shared());
        assert_eq!(in_flight.next_flush(true).await.unwrap(), Flush { checkpoint: true, landed: false });
        // A second one: the first must be in before the next flush.
        in_flight.push(2, write(Landed::In));
        tx.send(()).unwrap();
        assert_eq!(in_flight.next_flush(false).await.unwrap(), Flush { checkpoint: false, landed: true });
        assert!(in_flight.is_empty());
        in_flight.push(3, write(Landed::Cancelled));
        in_flight.push(4, write(Landed::In));
        assert_eq!(in_flight.next_flush(false).await.unwrap_err(), NotLanded::Cancelled(3));
    }
}
