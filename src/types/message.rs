//! What flows on a stream: data, and barriers that cut it into epochs.
//!
//! Data between barrier `e-1` and barrier `e` belongs to epoch `e`. When an operator has seen
//! barrier `e` on every input, everything of epoch `e` has reached it; the runtime then commits
//! its state for `e` and passes the barrier on.

use super::ChangeBatch;

/// A barrier number; increases by one per barrier.
pub type Epoch = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: Epoch,
    /// When the coordinator injected it (views built on views keep the original time).
    pub injected_at: std::time::Instant,
}

#[derive(Debug, Clone)]
pub enum Message {
    Data(ChangeBatch),
    Barrier(Barrier),
}
