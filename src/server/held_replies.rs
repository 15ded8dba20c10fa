//! Extended-protocol replies held until the client asks for them, as PostgreSQL does.
//!
//! A client pipelines Parse, Bind, Describe, Execute and then Sync (or Flush), and reads
//! nothing before the ReadyForQuery that Sync brings. pgwire writes ParseComplete,
//! BindComplete, RowDescription, CommandComplete and CloseComplete each with its own flush, so
//! one unnamed-statement query cost five `sendto` calls where PostgreSQL makes one. The
//! handler in [`super::extended_query`] answers Parse, Bind, Describe, Execute and Close
//! through [`HeldReplies`], a client whose flush does nothing: the messages wait in the
//! connection's write buffer and leave together at Sync or Flush, whose handlers flush the
//! real connection (as do errors, which pgwire answers itself).
//!
//! Invariants: every message is written in order to the connection's buffer (only the flush
//! is held); a Copy*Response is flushed at once, since the client waits for it before it sends
//! COPY data or anything else, and so are an ErrorResponse and a NoticeResponse, which
//! PostgreSQL always flushes; the buffer never grows without bound, since pgwire's framing
//! writes it out when it passes its backpressure limit, whatever the flush.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Sink;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, ProtocolVersion};
use pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer;

/// `client` with its flushes held; see the module documentation.
pub struct HeldReplies<'a, C> {
    client: &'a mut C,
    /// A message that must reach the client now was written since the last flush.
    urgent: bool,
}

impl<'a, C> HeldReplies<'a, C> {
    pub fn new(client: &'a mut C) -> Self {
        HeldReplies { client, urgent: false }
    }
}

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for HeldReplies<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.client).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, message: PgWireBackendMessage) -> Result<(), Self::Error> {
        if matches!(
            message,
            PgWireBackendMessage::CopyInResponse(_)
                | PgWireBackendMessage::CopyOutResponse(_)
                | PgWireBackendMessage::CopyBothResponse(_)
                | PgWireBackendMessage::ErrorResponse(_)
                | PgWireBackendMessage::NoticeResponse(_)
        ) {
            self.urgent = true;
        }
        Pin::new(&mut *self.client).start_send(message)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.urgent {
            return Poll::Ready(Ok(()));
        }
        let flushed = Pin::new(&mut *self.client).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            self.urgent = false;
        }
        flushed
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.client).poll_close(cx)
    }
}

impl<C: ClientPortalStore> ClientPortalStore for HeldReplies<'_, C> {
    type PortalStore = C::PortalStore;

    fn portal_store(&self) -> &Self::PortalStore {
        self.client.portal_store()
    }
}

impl<C: ClientInfo> ClientInfo for HeldReplies<'_, C> {
    fn socket_addr(&self) -> SocketAddr {
        self.client.socket_addr()
    }
    fn is_secure(&self) -> bool {
        self.client.is_secure()
    }
    fn protocol_version(&self) -> ProtocolVersion {
        self.client.protocol_version()
    }
    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.client.set_protocol_version(version)
    }
    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.client.pid_and_secret_key()
    }
    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.client.set_pid_and_secret_key(pid, secret_key)
    }
    fn state(&self) -> PgWireConnectionState {
        self.client.state()
    }
    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.client.set_state(new_state)
    }
    fn transaction_status(&self) -> TransactionStatus {
        self.client.transaction_status()
    }
    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.client.set_transaction_status(new_status)
    }
    fn metadata(&self) -> &HashMap<String, String> {
        self.client.metadata()
    }
    fn metadata_mut(&mut self) -> &mut HashMap<String, String> {
        self.client.metadata_mut()
    }
    fn session_extensions(&self) -> &pgwire::api::SessionExtensions {
        self.client.session_extensions()
    }
    fn sni_server_name(&self) -> Option<&str> {
        self.client.sni_server_name()
    }
    fn client_certificates<'a>(&self) -> Option<&[CertificateDer<'a>]> {
        self.client.client_certificates()
    }
}
