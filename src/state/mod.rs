//! The state layer: everything Weir keeps durable goes through here.
//!
//! - [`store`]: the [`StateStore`](store::StateStore) trait, an ordered byte key-value store with
//!   atomic write batches and snapshot-consistent prefix scans.
//! - [`rocks`]: the RocksDB implementation used by the server.
//! - [`held_writes`]: view commits made while a checkpoint's snapshot is awaited, held in
//!   memory (ADR 18).
//! - [`overlay`]: a store as a transaction sees it: its writes in memory over the store's
//!   entries, until COMMIT writes them in one batch.
//! - [`memory`]: an in-memory implementation for unit tests.
//! - [`table`]: [`StateTable`](table::StateTable), rows of one relation keyed by memcomparable key
//!   columns (arrow-row), the form in which table rows and operator state are stored, or, for
//!   relations that only grow, appended as Arrow IPC segments.
//! - [`keyed`]: [`KeyedState`](keyed::KeyedState), an operator's state table with a write-back
//!   cache; [`record`], the records operators checkpoint; [`value`], the one encoding of state
//!   values that are not rows, in the format the view recorded.
//! - State that ends with time: [`expiry`], the one contract ([`Expiring`](expiry::Expiring):
//!   everything through a time leaves) and the one rule ([`Expiry`](expiry::Expiry): the
//!   watermark less the operator's lateness); the stores that keep it: [`keys_by_time`] and
//!   [`entries_by_time`] (indexes of keys and entries by time), [`rows_by_time`] (rows waiting
//!   in a state table for the watermark or `now()`), [`expiring_rows`] (rows that only arrive,
//!   kept in memory and checkpointed as segments: a time-bounded join's append-only side) and
//!   [`expiring_groups`] (values that leave together at one time, kept in memory and
//!   checkpointed a few per time: a windowed aggregate's groups); [`watermark_pace`], which of
//!   that state will be gone by the next checkpoint; [`idle_keys`], state that ends by age
//!   instead (a view's `state_ttl`: keys not changed for that long, in epoch time).
//! - [`multiset`]: rows kept with their multiplicity (a view's rows, an index's entries).
//! - [`keys`]: the key layout shared by all of the above (table id, vnode, key bytes).
//!
//! Callers: the catalog (table rows and catalog entries) and the streaming operators.

pub mod entries_by_time;
pub mod expiring_groups;
pub mod expiring_rows;
pub mod expiry;
pub mod held_writes;
pub mod idle_keys;
pub mod in_flight;
pub mod keyed;
pub mod keys;
pub mod keys_by_time;
pub mod memory;
pub mod multiset;
pub mod overlay;
pub mod record;
pub mod rocks;
pub mod rows_by_time;
pub mod sorted_rows;
pub mod store;
pub mod table;
pub mod value;
pub mod watermark_pace;

pub use store::{StateStore, WriteBatch};
pub use table::StateTable;

/// Past this many bytes held in memory per operator side and shard, state kept in memory goes
/// to its state table instead: a join side's segments ([`expiring_rows`]), a windowed
/// aggregate's groups ([`expiring_groups`]).
pub const MEMORY_LIMIT_BYTES: usize = 128 * 1024 * 1024;
