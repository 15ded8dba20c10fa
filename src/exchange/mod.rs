//! Network exchanges (issue 46, ADR 39): the rows of a stream plan's exchange whose producer
//! and consumer shards live on different nodes, carried over Arrow Flight.
//!
//! `stream_plan::enforce` puts every exchange; in one process an exchange moves a change
//! between shards by the vnode of its key. In a cluster the same exchange sends the rows whose
//! vnode another node owns to that node: one Flight `DoExchange` stream per (exchange,
//! producing node, consuming node), carrying change batches, watermarks and barriers in the
//! producer's order ([`frame`]), so a consumer aligns a barrier over its producers' streams as
//! a job aligns it over its inputs today.
//!
//! - [`inbox`]: the consuming side: the streams this node's jobs expect, and what a job reads.
//! - [`service`]: this node's Flight service, taking streams into inboxes.
//! - [`outbound`]: the producing side, one stream to one consumer.
//! - [`outbox`]: what a job pushes a consumer's frames into without waiting; it waits for the
//!   outboxes to drain only before reading more input (no distributed deadlock).
//!
//! Invariants: a producer sends a frame only against a credit its consumer granted for a free
//! place in the inbox, so memory is bounded on both sides and a slow consumer slows its
//! producers (credit-based flow control, as Flink's network stack); every stream carries the
//! producer's assignment generation and is taken only into a job under the same one (a fenced
//! producer's frames count nowhere); a stream never resumes after a break: the job restarts
//! from the last global checkpoint (ADR 38). Nothing here knows plans or operators: frames in,
//! frames out. Started by the server in cluster mode; the dataflow's jobs register inboxes
//! and open streams.

pub mod frame;
pub mod inbox;
pub mod outbound;
pub mod outbox;
pub mod service;

#[cfg(test)]
mod tests;

pub use frame::{Frame, StreamHeader};
pub use inbox::{Exchanges, Inbox};
pub use outbound::Outbound;
pub use outbox::Outbox;
