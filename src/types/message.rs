//! What flows on a stream: data, barriers that cut it into epochs, and the end of a bounded
//! input.
//!
//! Data between barrier `e-1` and barrier `e` belongs to epoch `e`. When an operator has seen
//! barrier `e` on every input, everything of epoch `e` has reached it; the runtime then commits
//! its state for `e` and passes the barrier on.

use super::ChangeBatch;

/// A barrier number; increases by one per barrier.
pub type Epoch = u64;

/// What a barrier asks of the operators it passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// End the epoch: emit and commit its changes (view freshness).
    Flush,
    /// End the epoch and make it a checkpoint: besides committing, every operator puts all the
    /// state it needs after a restart into the store (write-back state included), so that a
    /// snapshot of the store taken once every view has committed this epoch is a consistent
    /// cut ([`crate::checkpoint`]).
    Checkpoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub epoch: Epoch,
    /// When the coordinator injected it (views built on views keep the original time).
    pub injected_at: std::time::Instant,
    pub kind: BarrierKind,
    /// The epoch's time (nanoseconds since 1970 UTC, [`crate::dataflow::clock`]): what
    /// `now()` is in every view for the epoch this barrier ends.
    pub now: i64,
}

impl Barrier {
    pub fn is_checkpoint(&self) -> bool {
        self.kind == BarrierKind::Checkpoint
    }
}

#[derive(Debug, Clone)]
pub enum Message {
    Data(ChangeBatch),
    Barrier(Barrier),
    /// The input will have no more rows (a bounded source finished): its watermark passes
    /// every row, so windows waiting for it close, as at the end of bounded input in Flink.
    End,
}
