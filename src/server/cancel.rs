//! Cancelling a running statement (the CancelRequest message, psql's Ctrl-C, JDBC's
//! `Statement.cancel`).
//!
//! pgwire cancels the handler future while it runs; but a query's rows are produced after the
//! handler returns, while pgwire streams them. So each session also has a [`CancelSignal`],
//! found through the [`CancelRegistry`] by the connection's process id and secret key, and every
//! result stream is wrapped by [`cancellable`] to end with SQLSTATE 57014 when it fires, or
//! when the session's `statement_timeout` passes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::DataFusionError;
use datafusion::execution::{RecordBatchStream, SendableRecordBatchStream};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::ConnectionManager;
use pgwire::messages::cancel::CancelRequest;
use tokio::sync::watch;

use crate::error::{SqlState, WeirError};

/// Fires once per cancel request; statements watch for a change after they started.
pub struct CancelSignal {
    generation: watch::Sender<u64>,
}

impl Default for CancelSignal {
    fn default() -> Self {
        CancelSignal { generation: watch::channel(0).0 }
    }
}

impl CancelSignal {
    pub fn fire(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Resolves when the signal fires after this call.
    pub fn fired(&self) -> BoxFuture<'static, ()> {
        let mut rx = self.generation.subscribe();
        async move {
            // An error means the session is gone; then nobody reads the stream either.
            let _ = rx.changed().await;
        }
        .boxed()
    }
}

type ConnectionKey = (i32, Vec<u8>);

/// Sessions by the key their client would cancel them with.
#[derive(Default)]
pub struct CancelRegistry {
    sessions: parking_lot::Mutex<HashMap<ConnectionKey, Weak<CancelSignal>>>,
}

impl CancelRegistry {
    pub fn register(&self, pid: i32, secret: Vec<u8>, signal: &Arc<CancelSignal>) {
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, s| s.strong_count() > 0);
        sessions.insert((pid, secret), Arc::downgrade(signal));
    }

    fn fire(&self, pid: i32, secret: Vec<u8>) {
        if let Some(signal) = self.sessions.lock().get(&(pid, secret)).and_then(Weak::upgrade) {
            signal.fire();
        }
    }
}

/// Handles CancelRequest: interrupts the handler (pgwire) and the result stream (Weir).
pub struct WeirCancel {
    pub manager: Arc<ConnectionManager>,
    pub registry: Arc<CancelRegistry>,
}

#[async_trait]
impl CancelHandler for WeirCancel {
    async fn on_cancel_request(&self, request: CancelRequest) {
        self.registry.fire(request.pid, request.secret_key.to_bytes().to_vec());
        self.manager.cancel(request.pid, &request.secret_key).await;
    }
}

/// `stream`, ending with a 57014 error if `signal` fires before it is done.
/// With a `deadline` (statement_timeout), it also ends with 57014 when that passes first.
pub fn cancellable(
    stream: SendableRecordBatchStream,
    signal: &CancelSignal,
    deadline: Option<tokio::time::Instant>,
) -> SendableRecordBatchStream {
    let cancelled = signal.fired();
    let fired = async move {
        match deadline {
            Some(deadline) => tokio::select! {
                _ = cancelled => "canceling statement due to user request",
                _ = tokio::time::sleep_until(deadline) => "canceling statement due to statement timeout",
            },
            None => {
                cancelled.await;
                "canceling statement due to user request"
            }
        }
    }
    .boxed();
    Box::pin(Cancellable { schema: stream.schema(), inner: Some(stream), fired })
}

struct Cancellable {
    schema: SchemaRef,
    inner: Option<SendableRecordBatchStream>,
    /// Resolves, with the reason, when the stream must end.
    fired: BoxFuture<'static, &'static str>,
}

impl Stream for Cancellable {
    type Item = datafusion::error::Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let next = inner.as_mut().poll_next(cx);
        if next.is_ready() {
            return next;
        }
        if let Poll::Ready(reason) = self.fired.as_mut().poll(cx) {
            // Dropping the inner stream stops DataFusion's work on it.
            self.inner = None;
            let e = WeirError::new(SqlState::QUERY_CANCELED, reason);
            return Poll::Ready(Some(Err(DataFusionError::External(Box::new(e)))));
        }
        Poll::Pending
    }
}

impl RecordBatchStream for Cancellable {
    fn schema(&self) -> SchemaRef {
        SchemaRef::clone(&self.schema)
    }
}
