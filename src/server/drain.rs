//! Statements under way, so a stop can let them finish: every statement a session runs holds
//! a [`Running`] token from [`Drain::enter`] until its last row is sent (a COPY FROM STDIN
//! until its CopyDone). Once [`Drain::close`] is called no statement starts (57P01, as
//! Postgres says to a session at a shutdown), and [`Drain::finished`] waits for those under
//! way.
//!
//! Owned by the server's [`WeirHandler`](super::WeirHandler); entered by
//! [`run_statement`](super::session::run_statement); closed by [`run`](super::run) at SIGTERM.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use tokio::sync::Notify;

use crate::error::{SqlState, WeirError};

#[derive(Default)]
pub struct Drain {
    running: AtomicUsize,
    closed: AtomicBool,
    idle: Notify,
}

/// A statement under way; dropped when it ends.
pub struct Running(Arc<Drain>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    /// A token for a statement about to start, or 57P01 once the server is stopping.
    pub fn enter(self: &Arc<Self>) -> Result<Running, WeirError> {
        self.running.fetch_add(1, Ordering::SeqCst);
        let running = Running(Arc::clone(self));
        if self.closed.load(Ordering::SeqCst) {
            return Err(WeirError::new(
                SqlState::ADMIN_SHUTDOWN,
                "terminating connection due to administrator command: the server is shutting down",
            ));
        }
        Ok(running)
    }

    /// A token for a statement that ends a transaction block, let through after a stop began
    /// (it releases what the block holds).
    pub fn track(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(self))
    }

    /// No statement starts from now on.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Statements under way.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Resolves when no statement is under way (after [`close`](Self::close): for good).
    pub async fn finished(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read, so a statement ending in between wakes it.
            idle.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// `rows`, holding `running` until the stream is dropped (its last row sent, or the client
/// gone).
pub fn holding(rows: SendableRecordBatchStream, running: Running) -> SendableRecordBatchStream {
    let schema = rows.schema();
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        rows.map(move |batch| {
            let _statement = &running;
            batch
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_drain_refuses_statements_and_waits_for_those_under_way() {
        let drain = Arc::new(Drain::default());
        let running = drain.enter().unwrap();
        drain.close();
        let refused = drain.enter().err().unwrap();
        assert_eq!(refused.state, SqlState::ADMIN_SHUTDOWN);
        assert_eq!(drain.running(), 1);
        let waiting = tokio::spawn({
            let drain = Arc::clone(&drain);
            async move { drain.finished().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(running);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap();
    }
}
