//! The types every streaming layer shares: the changelog ([`ChangeBatch`], [`Op`]), what
//! flows between operators ([`Message`], [`Barrier`], [`Epoch`]) and event-time arithmetic
//! ([`window`]).

pub mod change_batch;
pub mod hash;
pub mod message;
pub mod window;

pub use change_batch::{ChangeBatch, Op};
pub use message::{Barrier, BarrierKind, Epoch, Message};
