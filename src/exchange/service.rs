//! This node's Arrow Flight service: it takes network exchange streams (`DoExchange`) into the
//! inboxes its jobs registered ([`super::inbox`]), granting credits as the jobs read.
//!
//! An arriving stream is checked before anything of it is taken: its protocol version, that it
//! is meant for this cluster and this node, that an inbox of its name is registered (waiting
//! [`REGISTER_WAIT`] for a job still starting), under the producer's assignment generation,
//! with rows of the inbox's column types, and that no other stream holds the inbox. A refusal
//! is a gRPC status the producer sees at once: `UNAVAILABLE` (worth retrying: the job here is
//! not ready, or still runs under an older assignment), `FAILED_PRECONDITION` (final: the
//! producer is fenced, its generation is over, or the inbox is taken), `INVALID_ARGUMENT`
//! (malformed). Every other Flight call is `UNIMPLEMENTED`.
//!
//! Started by the server in cluster mode (`--exchange-listen`); tests and `weir bench exchange`
//! start it on a loopback port.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse,
    PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::channel::mpsc as stream_channel;
use futures::{SinkExt, Stream};
use tokio::sync::mpsc::error::TrySendError;
use tonic::{Request, Response, Status, Streaming};

use super::frame::{self, credit, schema_fits, under_schema, Frame, FrameDecoder, StreamHeader, PROTOCOL_VERSION};
use super::inbox::{Delivery, Exchanges};
use crate::error::{Result, WeirError};
use crate::metrics;

/// How long an arriving stream waits for its inbox to be registered.
pub const REGISTER_WAIT: Duration = Duration::from_secs(1);

/// The largest message either side reads (a frame is split well below it by the producer).
pub const MAX_MESSAGE: usize = 64 << 20;

/// What every Flight call but DoExchange answers.
const ONLY_DO_EXCHANGE: &str = "a Weir node serves only DoExchange";

type BoxStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send + 'static>>;

/// Serves `exchanges` on `listener` until `stop` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    exchanges: Arc<Exchanges>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let service = FlightServiceServer::new(ExchangeService { exchanges })
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    // Without TCP_NODELAY on the accepted sockets (the builder's setting covers only the
    // listener it binds itself), a credit grant waits for Nagle and the peer's delayed ACK:
    // 40 ms per window of frames.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        // A peer that vanished without closing (a killed machine) is noticed within seconds.
        .http2_keepalive_interval(Some(Duration::from_secs(1)))
        .http2_keepalive_timeout(Some(Duration::from_secs(5)))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stop)
        .await
        .map_err(|e| WeirError::io(format!("the exchange service stopped: {e}")))
}

struct ExchangeService {
    exchanges: Arc<Exchanges>,
}

fn refused(reason: &'static str, status: Status) -> Status {
    metrics::EXCHANGE_STREAMS_REFUSED_TOTAL.with_label_values(&[reason]).inc();
    status
}

impl ExchangeService {
    /// Checks a stream's header, then takes its inbox's delivery end (waiting for a job still
    /// registering it).
    async fn claim(
        &self,
        header: &StreamHeader,
        schema: &datafusion::arrow::datatypes::Schema,
    ) -> std::result::Result<(Delivery, datafusion::arrow::datatypes::SchemaRef), Status> {
        let x = &self.exchanges;
        if header.version != PROTOCOL_VERSION {
            let why = format!("exchange protocol version {} (this node speaks {PROTOCOL_VERSION})", header.version);
            return Err(refused("version", Status::failed_precondition(why)));
        }
        if header.cluster != x.cluster || header.to_node != x.node_id {
            let why = format!(
                "a stream for node {} of cluster {}, this is node {} of {}",
                header.to_node, header.cluster, x.node_id, x.cluster
            );
            return Err(refused("misdirected", Status::failed_precondition(why)));
        }
        let key = (header.exchange.clone(), header.from_node.clone());
        let deadline = Instant::now() + REGISTER_WAIT;
        loop {
            let registered = x.registered.notified();
            tokio::pin!(registered);
            registered.as_mut().enable();
            if let Some(expected) = x.expected.lock().get_mut(&key) {
                if header.generation < expected.generation {
                    let why = format!(
                        "fenced: a stream from {} under assignment generation {}, the job here runs under {}",
                        header.from_node, header.generation, expected.generation
                    );
                    return Err(refused("fenced", Status::failed_precondition(why)));
                }
                if header.generation == expected.generation {
                    // Checked before the inbox is taken: a stream of other columns must not use
                    // up the inbox its real producer will open.
                    if !schema_fits(&expected.schema, schema) {
                        let why = format!(
                            "the exchange {} carries {schema:?}, the job here expects {:?}",
                            header.exchange, expected.schema
                        );
                        return Err(refused("schema", Status::invalid_argument(why)));
                    }
                    let Some(delivery) = expected.deliver.take() else {
                        let why = format!("the exchange {} from {} is connected already", key.0, key.1);
                        return Err(refused("taken", Status::failed_precondition(why)));
                    };
                    return Ok((delivery, expected.schema.clone()));
                }
                // A newer generation than the job here: it restarts under it soon.
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, registered).await.is_err() {
                let why = format!(
                    "no job here expects the exchange {} from {} under generation {} (yet)",
                    key.0, key.1, header.generation
                );
                return Err(refused("unexpected", Status::unavailable(why)));
            }
        }
    }
}

#[tonic::async_trait]
impl FlightService for ExchangeService {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        let mut incoming = request.into_inner();
        let first = match tokio::time::timeout(REGISTER_WAIT, incoming.message()).await {
            Ok(Ok(Some(first))) => first,
            Ok(Ok(None)) => return Err(refused("malformed", Status::invalid_argument("an empty exchange stream"))),
            Ok(Err(status)) => return Err(status),
            Err(_) => return Err(refused("malformed", Status::invalid_argument("no first message"))),
        };
        let (header, schema) =
            frame::opening(&first).map_err(|e| refused("malformed", Status::invalid_argument(e.to_string())))?;
        let (delivery, expected) = self.claim(&header, &schema).await?;
        let window = self.exchanges.window();
        let (responses, answer) = stream_channel::channel(window as usize + 2);
        let name = format!("{} from {}", header.exchange, header.from_node);
        tokio::spawn(relay(incoming, delivery, FrameDecoder::new(schema.into()), expected, window, responses, name));
        Ok(Response::new(Box::pin(answer)))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn get_flight_info(&self, _: Request<FlightDescriptor>) -> std::result::Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn poll_flight_info(&self, _: Request<FlightDescriptor>) -> std::result::Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn get_schema(&self, _: Request<FlightDescriptor>) -> std::result::Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn do_get(&self, _: Request<Ticket>) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn do_action(&self, _: Request<Action>) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
    async fn list_actions(&self, _: Request<Empty>) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented(ONLY_DO_EXCHANGE))
    }
}

/// Moves one accepted stream's frames into its inbox, granting a credit for every place the
/// job frees, until the stream's end, its failure, or the inbox being dropped.
async fn relay(
    mut incoming: Streaming<FlightData>,
    delivery: Delivery,
    mut decoder: FrameDecoder,
    schema: datafusion::arrow::datatypes::SchemaRef,
    window: u32,
    mut responses: stream_channel::Sender<std::result::Result<FlightData, Status>>,
    name: String,
) {
    // Credits the producer holds: never more than the inbox's free places.
    let mut outstanding = window;
    if responses.send(Ok(credit(window))).await.is_err() {
        return;
    }
    let failure = loop {
        tokio::select! {
            message = incoming.message() => {
                let data = match message {
                    Ok(Some(data)) => data,
                    Ok(None) => break format!("the exchange stream {name} ended without its end"),
                    Err(status) => break format!("the exchange stream {name} broke: {}", status.message()),
                };
                metrics::EXCHANGE_BYTES_RECEIVED_TOTAL.inc_by((data.data_header.len() + data.data_body.len()) as u64);
                // Arrow's IPC reader panics on some malformed bodies (a buffer shorter than its
                // header says): a peer's bad message is this stream's error, not a dead relay.
                let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoder.decode(&data)))
                    .unwrap_or_else(|_| Err(WeirError::internal("an exchange message Arrow could not read")));
                let frame = match decoded {
                    Ok(None) => continue,
                    Ok(Some(Frame::Data(change))) => match under_schema(change.data, &schema) {
                        Ok(data) => Frame::Data(crate::types::ChangeBatch::new(data, change.ops)),
                        Err(e) => break format!("{name}: {e}"),
                    },
                    Ok(Some(frame)) => frame,
                    Err(e) => break format!("{name}: {e}"),
                };
                if outstanding == 0 {
                    break format!("{name}: a frame sent without credit");
                }
                outstanding -= 1;
                let end = matches!(frame, Frame::End);
                match delivery.frames.try_send(Ok(frame)) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => break format!("{name}: more frames than credits"),
                    Err(TrySendError::Closed(_)) => {
                        let _ = responses.send(Err(Status::failed_precondition("the consuming job stopped"))).await;
                        return;
                    }
                }
                if end {
                    // Acknowledged, so the producer tells this end from a relay that died; the
                    // response stream then ends with OK when `responses` drops.
                    let _ = responses.send(Ok(frame::end_acknowledged())).await;
                    return;
                }
            }
            () = delivery.taken.notified() => {
                let free = delivery.frames.capacity() as u32;
                if free > outstanding {
                    let grant = free - outstanding;
                    outstanding += grant;
                    if responses.send(Ok(credit(grant))).await.is_err() {
                        break format!("the exchange stream {name}'s producer went away");
                    }
                }
            }
            () = delivery.frames.closed() => {
                let _ = responses.send(Err(Status::failed_precondition("the consuming job stopped"))).await;
                return;
            }
        }
    };
    let _ = responses.send(Err(Status::aborted(failure.clone()))).await;
    // The job learns of it as the stream's last item (it may have to wait for a place).
    let _ = delivery.frames.send(Err(WeirError::internal(failure))).await;
}
