//! The consuming side of network exchanges: [`Exchanges`], this node's registry of the
//! streams its jobs expect, and [`Inbox`], what a job reads one producer's frames from.
//!
//! A job expects, per exchange it consumes, one stream from every producing node
//! ([`Exchanges::expect`]), under the assignment generation it runs under. The Flight service
//! ([`super::service`]) hands an arriving stream to the inbox it names, once: a second stream
//! for the same inbox, a stream under another generation or for another node is refused. The
//! inbox holds at most [`Exchanges::window`] frames: the service grants the producer a credit
//! for each free place, so a job that stops reading (aligning a barrier, or slow) stops its
//! producers, and nothing buffers without bound. Dropping an inbox (the job stopped or
//! restarts under a new assignment) ends its stream with an error the producer sees.
//!
//! Invariant: frames of one stream reach the inbox in the producer's order; a stream that ends
//! without [`Frame::End`] (the producer died, the network broke) leaves an error as its last
//! item, never a silent end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use datafusion::arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use super::frame::Frame;
use crate::error::{Result, WeirError};

/// Frames an inbox holds (and credits a producer has) when none is given.
pub const DEFAULT_WINDOW: u32 = 8;

/// An inbox's name: the exchange and the producing node.
pub type InboxKey = (String, String);

/// What the service needs of an inbox a stream arrives for.
pub(super) struct Expected {
    /// Which registration this is (a job restarted registers the same name again).
    pub serial: u64,
    pub generation: u64,
    pub schema: SchemaRef,
    /// Taken by the stream that connects (`None` once one has).
    pub deliver: Option<Delivery>,
}

/// The service's end of an inbox.
pub(super) struct Delivery {
    pub frames: mpsc::Sender<Result<Frame>>,
    /// Told each time the job takes a frame: a place is free for another credit.
    pub taken: Arc<Notify>,
}

/// This node's expected streams, by inbox.
pub struct Exchanges {
    /// The cluster's etcd prefix and this node's id: what arriving headers must name.
    pub(super) cluster: String,
    pub(super) node_id: String,
    window: u32,
    serials: AtomicU64,
    pub(super) expected: Mutex<HashMap<InboxKey, Expected>>,
    /// Told whenever an inbox is registered (a stream may arrive before its job is ready).
    pub(super) registered: Notify,
}

impl Exchanges {
    pub fn new(cluster: &str, node_id: &str, window: u32) -> Arc<Exchanges> {
        Arc::new(Exchanges {
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
            window: window.max(1),
            serials: AtomicU64::new(0),
            expected: Mutex::new(HashMap::new()),
            registered: Notify::new(),
        })
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Frames an inbox holds: the credits its producer is granted.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// Registers the inbox of `exchange`'s stream from `from_node`, for a job running under
    /// `generation`, whose rows have `schema`. Replaces an inbox of the same name (a job
    /// restarted); its stream, if any, ends.
    pub fn expect(self: &Arc<Self>, exchange: &str, from_node: &str, generation: u64, schema: SchemaRef) -> Inbox {
        let (frames, receiver) = mpsc::channel(self.window as usize);
        let taken = Arc::new(Notify::new());
        let key = (exchange.to_string(), from_node.to_string());
        let delivery = Delivery { frames, taken: taken.clone() };
        let serial = self.serials.fetch_add(1, Ordering::Relaxed);
        self.expected.lock().insert(key.clone(), Expected { serial, generation, schema, deliver: Some(delivery) });
        self.registered.notify_waiters();
        Inbox { key, serial, receiver, taken, exchanges: Arc::downgrade(self) }
    }

    /// Inboxes registered now (for tests and status).
    pub fn expected_count(&self) -> usize {
        self.expected.lock().len()
    }
}

/// One producer's frames, for the job that registered it.
pub struct Inbox {
    key: InboxKey,
    serial: u64,
    receiver: mpsc::Receiver<Result<Frame>>,
    taken: Arc<Notify>,
    exchanges: Weak<Exchanges>,
}

impl Inbox {
    /// The producing node.
    pub fn from_node(&self) -> &str {
        &self.key.1
    }

    /// The next frame, waiting for it. An error ends the stream: the producer broke off or
    /// was fenced, and the job must restart from the last checkpoint. A producer that never
    /// connects is not noticed here: the job waits within its own deadline (a barrier's
    /// checkpoint timeout) and restarts past it.
    pub async fn recv(&mut self) -> Result<Frame> {
        let item = self.receiver.recv().await;
        self.taken.notify_one();
        match item {
            Some(item) => item,
            None => Err(WeirError::internal(format!(
                "the exchange stream {} from {} ended without its end",
                self.key.0, self.key.1
            ))),
        }
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        let Some(exchanges) = self.exchanges.upgrade() else { return };
        let mut expected = exchanges.expected.lock();
        // Only this inbox's registration: a restarted job may have registered the name since.
        if expected.get(&self.key).is_some_and(|e| e.serial == self.serial) {
            expected.remove(&self.key);
        }
    }
}
