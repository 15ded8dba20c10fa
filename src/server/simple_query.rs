//! The simple query protocol: one message, one or more `;`-separated statements, text results.
//! Statements run in order; the first error ends the message, as in Postgres.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::portal::Format;
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;

use super::session::{reject, run_statement, session_of, Block};
use super::WeirHandler;

#[async_trait]
impl SimpleQueryHandler for WeirHandler {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.frontend.parse(query).map_err(reject)?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let cell = session_of(self, client);
        let mut session = cell.session.lock().await;
        let mut block = Block::from_status(client.transaction_status());
        let mut responses = Vec::with_capacity(statements.len());
        for statement in statements {
            match run_statement(self, &cell, &mut session, client, &mut block, statement, None, &Format::UnifiedText)
                .await
            {
                Ok(r) => responses.push(r),
                Err(PgWireError::UserError(info)) => {
                    responses.push(Response::Error(info));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(responses)
    }
}
