//! The runtime the dataflow runs on: view jobs, sources, sink deliverers and checkpoint
//! uploads are spawned here, wherever the statement that starts them runs.
//!
//! Client sessions run on a runtime of their own (`server`, `[serving]` in the config); a
//! `CREATE MATERIALIZED VIEW` runs in a session, but the view it starts must not inherit the
//! session runtime's threads (and their nice value). The server records its main runtime at
//! start ([`set_current`]); without one (benchmarks, unit tests) tasks go to the current runtime.
//!
//! Checkpoint uploads run on a small runtime of their own, at a lower CPU priority
//! ([`spawn_upload`]).

use std::future::Future;
use std::sync::{LazyLock, OnceLock};

use tokio::runtime::{Handle, Runtime};
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

/// The Linux nice value of the checkpoint upload runtime's threads.
pub const UPLOAD_NICE: i32 = 10;

/// The upload runtime: one worker, and the blocking threads its file reads and writes start,
/// all at [`UPLOAD_NICE`]. None if it could not be started (uploads then share the dataflow's).
static UPLOADS: LazyLock<Option<Runtime>> = LazyLock::new(|| {
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(4)
        .thread_name("weir-upload")
        .on_thread_start(|| {
            // On Linux a thread's nice value is its own (`who` 0: the calling thread).
            // SAFETY: setpriority has no memory effects; a failure only leaves it at 0.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, UPLOAD_NICE) };
        })
        .enable_all()
        .build();
    match built {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            tracing::warn!("cannot start the checkpoint upload runtime, uploads share the dataflow's: {e}");
            None
        }
    }
});

/// Spawns a checkpoint upload (or another background transfer of checkpoint files) where the
/// CPU it takes (reading, checksumming and writing megabytes of files) does not delay the
/// views: on threads the kernel schedules after the dataflow's when both want a core. An upload
/// that falls behind this way is merged into the next checkpoint's (ADR 11), so nothing queues.
pub fn spawn_upload<F>(task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match UPLOADS.as_ref() {
        Some(runtime) => runtime.spawn(task),
        None => spawn(task),
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn uploads_run_at_a_lower_priority() {
        // SAFETY: getpriority only reads the calling thread's nice value.
        let nice = super::spawn_upload(async { unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) } }).await.unwrap();
        // At least: a process already niced past it cannot lower its threads' nice value.
        assert!(nice >= super::UPLOAD_NICE, "nice {nice}");
        let blocking = super::spawn_upload(async {
            tokio::task::spawn_blocking(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }).await.unwrap()
        });
        let nice = blocking.await.unwrap();
        assert!(nice >= super::UPLOAD_NICE, "its blocking threads too: nice {nice}");
    }
}
