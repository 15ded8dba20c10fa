//! [`Outbox`]: what a job hands frames for one consumer to, without waiting.
//!
//! A job that waited for credit in the middle of an epoch's flush could deadlock a cluster:
//! two nodes each blocked sending to the other, neither reading. So a job never waits to send:
//! it pushes frames into the outbox of each peer, and a task per outbox sends them against
//! the consumer's credits ([`Outbound`]). What the outboxes hold is bounded where the job
//! reads its inputs: before taking more input it waits until every outbox is below its high
//! water mark ([`Outbox::drained_below`]). A slow consumer therefore slows the producers'
//! reading, and an outbox holds at most the mark plus what one input batch and one flush
//! produce (a flush is bounded by the rows of an epoch, `epoch_max_rows`), as every
//! operator's in-memory state is today (ADR 39).
//!
//! Invariant: frames are sent in push order; after the first failure every push and wait
//! returns that failure (the job restarts; nothing is retried here).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::frame::Frame;
use super::outbound::Outbound;
use crate::error::{Result, WeirError};

#[derive(Default)]
struct Queue {
    frames: VecDeque<Frame>,
    /// Arrow memory of the queued frames.
    bytes: usize,
    /// No more pushes: send what is queued, then the end.
    closing: bool,
    failure: Option<String>,
    /// The sender task has sent everything and the end (or failed).
    done: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Told when a frame is pushed or the outbox closes (the sender waits on it).
    pushed: Notify,
    /// Told when frames leave the queue, or on failure or completion (the job waits on it).
    drained: Notify,
}

/// Frames for one consumer, sent in the background.
pub struct Outbox {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

fn bytes_of(frame: &Frame) -> usize {
    match frame {
        Frame::Data(change) => change.data.get_array_memory_size() + change.ops.len(),
        _ => 0,
    }
}

impl Outbox {
    /// Starts sending over `outbound`.
    pub fn start(outbound: Outbound) -> Outbox {
        let shared = Arc::new(Shared { queue: Mutex::default(), pushed: Notify::new(), drained: Notify::new() });
        let task = tokio::spawn(send(outbound, Arc::clone(&shared)));
        Outbox { shared, task }
    }

    /// Queues `frame`; never waits. Fails once sending has failed.
    pub fn push(&self, frame: Frame) -> Result<()> {
        let mut queue = self.shared.queue.lock();
        if let Some(failure) = &queue.failure {
            return Err(WeirError::internal(failure.clone()));
        }
        queue.bytes += bytes_of(&frame);
        queue.frames.push_back(frame);
        drop(queue);
        self.shared.pushed.notify_one();
        Ok(())
    }

    /// Arrow bytes queued and not yet sent.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queue.lock().bytes
    }

    /// Waits until at most `mark` bytes are queued (or fails with the stream's failure).
    pub async fn drained_below(&self, mark: usize) -> Result<()> {
        self.wait_until(|queue| queue.bytes <= mark).await
    }

    /// Sends what is queued and the end, and waits until the consumer has taken it all.
    pub async fn finish(self) -> Result<()> {
        self.shared.queue.lock().closing = true;
        self.shared.pushed.notify_one();
        self.wait_until(|queue| queue.done).await
    }

    /// Waits until `ready` holds of the queue, or sending has failed.
    async fn wait_until(&self, ready: impl Fn(&Queue) -> bool) -> Result<()> {
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let queue = self.shared.queue.lock();
                if let Some(failure) = &queue.failure {
                    return Err(WeirError::internal(failure.clone()));
                }
                if ready(&queue) {
                    return Ok(());
                }
            }
            drained.await;
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // A job that stops without finishing breaks the stream: its consumer sees an error.
        if !self.shared.queue.lock().done {
            self.task.abort();
        }
    }
}

/// Marks the outbox done (failed, if it had not finished) when the sender task ends in any
/// way, a panic or an abort included, so no job waits on it forever.
struct Ended(Arc<Shared>);

impl Drop for Ended {
    fn drop(&mut self) {
        let mut queue = self.0.queue.lock();
        if !queue.done {
            queue.failure.get_or_insert_with(|| "the exchange's sender stopped".into());
            queue.done = true;
        }
        drop(queue);
        self.0.drained.notify_waiters();
    }
}

/// The sender task: frames out in order, against credits.
async fn send(mut outbound: Outbound, shared: Arc<Shared>) {
    let _ended = Ended(Arc::clone(&shared));
    loop {
        let pushed = shared.pushed.notified();
        tokio::pin!(pushed);
        pushed.as_mut().enable();
        let (next, closing) = {
            let mut queue = shared.queue.lock();
            (queue.frames.pop_front(), queue.closing)
        };
        let frame = match next {
            Some(frame) => frame,
            None if closing => break,
            None => {
                pushed.await;
                continue;
            }
        };
        let size = bytes_of(&frame);
        let sent = outbound.send(frame).await;
        let mut queue = shared.queue.lock();
        queue.bytes -= size;
        if let Err(e) = sent {
            queue.failure = Some(e.message.clone());
            queue.done = true;
            drop(queue);
            shared.drained.notify_waiters();
            return;
        }
        drop(queue);
        shared.drained.notify_waiters();
    }
    let finished = outbound.finish().await;
    let mut queue = shared.queue.lock();
    if let Err(e) = finished {
        queue.failure = Some(e.message.clone());
    }
    queue.done = true;
    drop(queue);
    shared.drained.notify_waiters();
}
