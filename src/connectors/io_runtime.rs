//! Async I/O for connectors that block: object-store requests (file sources on S3) and HTTP
//! (the schema registry) run on one small runtime of their own ([`run`]), so a source reader
//! (which blocks, see [`crate::connectors::source`]) and CREATE statements (which check a
//! connector from a session) can wait for them from any thread.

use std::future::Future;
use std::sync::OnceLock;

/// The runtime connector I/O runs on.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-connector-io")
            .enable_all()
            .build()
            .expect("connector I/O runtime")
    })
}

/// Runs `future` on the connector I/O runtime and waits for it.
pub fn run<T: Send + 'static>(future: impl Future<Output = T> + Send + 'static) -> T {
    let task = runtime().spawn(future);
    let wait = || futures::executor::block_on(task).expect("connector I/O task panicked");
    // A worker thread of the server's runtime hands its other tasks on while it waits.
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}
