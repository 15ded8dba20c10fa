//! The streaming runtime: how changes get from tables to views.
//!
//! - `catalog::changes`: who listens to which relation; tables and views publish there.
//! - [`clock`]: the time each epoch carries (`now()` in a view's temporal filters).
//! - [`coordinator`]: epochs. Injects a barrier into every table's subscribers each
//!   `barrier_interval` and on FLUSH, and knows when every view has committed an epoch.
//! - [`graph`]: a view's operators as a tree, and how changes and barriers move through it.
//! - [`build`]: from a DataFusion logical plan to that tree ([`join_interval`]: the time bound
//!   a join's condition puts on its sides, for freeing their state).
//! - [`temporal_bounds`]: `now()` in a view: the conditions a temporal filter keeps.
//! - [`job`]: the task that runs one view: aligns barriers across inputs, commits the view's
//!   state per epoch, and publishes its changes to views built on it.
//! - [`manager`]: creates, starts (also after a restart) and drops views' jobs.
//! - [`shard_pool`]: the threads a view's shards other than the first run on.

pub mod clock;
pub mod coordinator;
pub mod graph;
pub mod job;
pub mod manager;
pub mod shard_pool;
