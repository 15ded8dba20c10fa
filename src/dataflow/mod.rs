//! The streaming runtime: how changes get from tables to views.
//!
//! - `catalog::changes`: who listens to which relation; tables and views publish there.
//! - [`clock`]: the time each epoch carries (`now()` in a view's temporal filters).
//! - [`coordinator`]: epochs. Injects a barrier into every table's subscribers each
//!   `barrier_interval` and on FLUSH, and knows when every view has committed an epoch.
//! - [`graph`]: a view's operators as a tree, and how changes and barriers move through it.
//!   Which tree a view runs is planned by `stream_plan` (and built there into a [`graph::Built`]).
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
