//! The types every streaming layer shares: the changelog ([`ChangeBatch`], [`Op`]), what
//! flows between operators ([`Message`], [`Barrier`], [`Epoch`]), event-time arithmetic
//! ([`window`]), which shard owns a key ([`key_shards`]) and PostgreSQL's names of Arrow types ([`pg_type`]).

pub mod change_batch;
pub mod clock;
pub mod exact_sum;
pub mod hash;
pub mod json;
pub mod key_shards;
pub mod message;
pub mod numeric_text;
pub mod ordered_set;
pub mod pg_binary;
pub mod pg_text;
pub mod pg_type;
pub mod vnode;
pub mod window;

pub use change_batch::{ChangeBatch, Op};
pub use message::{Barrier, BarrierKind, Epoch, Message};
