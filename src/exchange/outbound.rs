//! The producing side of a network exchange: [`Outbound`], one stream to one consuming node,
//! sending frames only against credits the consumer granted.
//!
//! Opening retries while the consumer answers `UNAVAILABLE` or cannot be reached (its job
//! may still be starting) until the caller's deadline; `FAILED_PRECONDITION` (this producer
//! is fenced, or the inbox is taken) is final. [`Outbound::send`] waits while it holds no
//! credit: a slow consumer slows its producers, and the producer's own memory holds at most
//! the frame it is sending. A change batch larger than [`FRAME_BYTES`] is cut into several
//! frames. Any error ends the stream: the job it belongs to restarts from the last
//! checkpoint (ADR 38), it never reconnects mid-epoch.
//!
//! One [`tonic::transport::Channel`] per peer ([`channel`]) carries all streams to it (HTTP/2
//! multiplexes them).

use std::time::{Duration, Instant};

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::FlightData;
use datafusion::arrow::datatypes::Schema;
use futures::channel::mpsc as stream_channel;
use futures::{FutureExt, SinkExt};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Streaming};

use super::frame::{acknowledges_end, credits_in, Frame, FrameEncoder, StreamHeader};
use super::service::MAX_MESSAGE;
use crate::error::{Result, SqlState, WeirError};
use crate::metrics;
use crate::types::ChangeBatch;

/// A change batch is sent in frames of about this many bytes at most (Flight's own default
/// message size), so one frame never exceeds what the consumer reads, and credits count
/// memory of a bounded size.
pub const FRAME_BYTES: usize = 2 << 20;

/// A channel to the node whose exchange service is at `address` (`host:port`), connecting
/// on first use and again after a break.
pub fn channel(address: &str) -> Result<Channel> {
    let endpoint = Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| WeirError::new(SqlState::UNABLE_TO_CONNECT, format!("exchange address {address}: {e}")))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true);
    Ok(endpoint.connect_lazy())
}

fn stream_error(what: &str, status: &tonic::Status) -> WeirError {
    let state = match status.code() {
        Code::Unavailable => SqlState::UNABLE_TO_CONNECT,
        _ => SqlState::INTERNAL_ERROR,
    };
    WeirError::new(state, format!("{what}: {}", status.message()))
}

/// One open stream to a consumer.
pub struct Outbound {
    header: StreamHeader,
    requests: stream_channel::Sender<FlightData>,
    responses: Streaming<FlightData>,
    /// Frames this producer may still send.
    credits: u32,
    encoder: FrameEncoder,
}

impl Outbound {
    /// Opens the stream `header` names over `channel`, for rows of `schema`, retrying what is
    /// worth retrying until `deadline` has passed.
    pub async fn open(channel: Channel, header: StreamHeader, schema: &Schema, deadline: Duration) -> Result<Outbound> {
        let until = Instant::now() + deadline;
        let mut pause = Duration::from_millis(20);
        loop {
            match Self::open_once(channel.clone(), header.clone(), schema).await {
                Ok(outbound) => return Ok(outbound),
                Err(status) if status.code() == Code::Unavailable && Instant::now() < until => {
                    tracing::debug!(
                        "opening exchange {} to {}: {}; trying again",
                        header.exchange,
                        header.to_node,
                        status.message()
                    );
                    tokio::time::sleep(pause.min(until.saturating_duration_since(Instant::now()))).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(status) => {
                    let what = format!("opening the exchange {} to node {}", header.exchange, header.to_node);
                    return Err(stream_error(&what, &status));
                }
            }
        }
    }

    async fn open_once(
        channel: Channel,
        header: StreamHeader,
        schema: &Schema,
    ) -> std::result::Result<Outbound, tonic::Status> {
        let mut encoder = FrameEncoder::default();
        let (mut requests, outgoing) = stream_channel::channel(2);
        requests.try_send(encoder.open(&header, schema)).expect("room for the first message");
        let mut client = FlightServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        let mut responses = client.do_exchange(outgoing).await?.into_inner();
        // The consumer's first answer is its first grant: the stream is accepted.
        let credits = match responses.message().await? {
            Some(first) => credits_in(&first),
            None => return Err(tonic::Status::unavailable("the consumer ended the stream at once")),
        };
        Ok(Outbound { header, requests, responses, credits, encoder })
    }

    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// Sends one frame (several, for a large batch), waiting for credit as needed.
    pub async fn send(&mut self, frame: Frame) -> Result<()> {
        match frame {
            Frame::Data(change) if change.data.get_array_memory_size() > FRAME_BYTES && change.data.num_rows() > 1 => {
                let parts = change.data.get_array_memory_size().div_ceil(FRAME_BYTES);
                let rows = change.data.num_rows().div_ceil(parts);
                let mut offset = 0;
                while offset < change.data.num_rows() {
                    let length = rows.min(change.data.num_rows() - offset);
                    let part = ChangeBatch::new(
                        change.data.slice(offset, length),
                        change.ops[offset..offset + length].to_vec(),
                    );
                    self.send_one(Frame::Data(part)).await?;
                    offset += length;
                }
                Ok(())
            }
            frame => self.send_one(frame).await,
        }
    }

    async fn send_one(&mut self, frame: Frame) -> Result<()> {
        self.take_grants()?;
        if self.credits == 0 {
            let waiting = Instant::now();
            while self.credits == 0 {
                match self.responses.message().await {
                    Ok(Some(message)) => self.grant(&message)?,
                    Ok(None) => return Err(self.broken("the consumer ended the stream")),
                    Err(status) => return Err(stream_error(&self.what(), &status)),
                }
            }
            metrics::EXCHANGE_CREDIT_WAIT_SECONDS_TOTAL.inc_by(waiting.elapsed().as_secs_f64());
        }
        if let Frame::Data(change) = &frame {
            metrics::EXCHANGE_ROWS_SENT_TOTAL.inc_by(change.data.num_rows() as u64);
        }
        for message in self.encoder.encode(&frame)? {
            metrics::EXCHANGE_BYTES_SENT_TOTAL.inc_by((message.data_header.len() + message.data_body.len()) as u64);
            if self.requests.send(message).await.is_err() {
                return Err(self.broken("the stream closed"));
            }
        }
        self.credits -= 1;
        Ok(())
    }

    /// Takes grants (or the consumer's error) that have already arrived, without waiting.
    fn take_grants(&mut self) -> Result<()> {
        while let Some(answer) = self.responses.message().now_or_never() {
            match answer {
                Ok(Some(message)) => self.grant(&message)?,
                Ok(None) => return Err(self.broken("the consumer ended the stream")),
                Err(status) => return Err(stream_error(&self.what(), &status)),
            }
        }
        Ok(())
    }

    /// Adds the credits `message` grants; a grant past what a window can hold is a broken peer.
    fn grant(&mut self, message: &arrow_flight::FlightData) -> Result<()> {
        self.credits = self
            .credits
            .checked_add(credits_in(message))
            .ok_or_else(|| self.broken("the consumer granted more credits than can be counted"))?;
        Ok(())
    }

    /// Sends the end and waits until the consumer acknowledges it: everything sent is in its
    /// inbox. A stream that ends without the acknowledgement is an error.
    pub async fn finish(mut self) -> Result<()> {
        self.send_one(Frame::End).await?;
        self.requests.close_channel();
        loop {
            match self.responses.message().await {
                Ok(Some(message)) if acknowledges_end(&message) => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) => return Err(self.broken("the consumer ended the stream without taking the end")),
                Err(status) => return Err(stream_error(&self.what(), &status)),
            }
        }
    }

    fn what(&self) -> String {
        format!("the exchange {} to node {}", self.header.exchange, self.header.to_node)
    }

    fn broken(&self, why: &str) -> WeirError {
        WeirError::internal(format!("{}: {why}", self.what()))
    }
}
