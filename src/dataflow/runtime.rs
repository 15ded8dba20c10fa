//! The runtime the dataflow runs on: view jobs, sources, sink deliverers and checkpoint
//! uploads are spawned here, wherever the statement that starts them runs.
//!
//! Client sessions run on a runtime of their own (`server`, `[serving]` in the config); a
//! `CREATE MATERIALIZED VIEW` runs in a session, but the view it starts must not inherit the
//! session runtime's threads (and their nice value). The server records its main runtime at
//! start ([`set_current`]); without one (benchmarks, unit tests) tasks go to the current runtime.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

static DATAFLOW: OnceLock<Handle> = OnceLock::new();

/// Records the current runtime as the dataflow's (once, by the server at start).
pub fn set_current() {
    let _ = DATAFLOW.set(Handle::current());
}

/// The dataflow's runtime (the current one when none was recorded).
pub fn handle() -> Handle {
    DATAFLOW.get().cloned().unwrap_or_else(Handle::current)
}

/// Spawns `task` on the dataflow's runtime.
pub fn spawn<F>(task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match DATAFLOW.get() {
        Some(runtime) => runtime.spawn(task),
        None => tokio::spawn(task),
    }
}
