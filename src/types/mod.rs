//! The types every streaming layer shares: the changelog ([`ChangeBatch`], [`Op`]) and what
//! flows between operators ([`Message`], [`Barrier`], [`Epoch`]).

pub mod change_batch;
pub mod message;

pub use change_batch::{ChangeBatch, Op};
pub use message::{Barrier, Epoch, Message};
