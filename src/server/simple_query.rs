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
        let cell = session_of(self, client);
        // A dashboard's repeated statement with other literals: run as the prepared statement
        // it stands for (`frontend::literals`).
        if let Some(lifted) = crate::frontend::literals::lift(query) {
            let mut session = cell.session.lock().await;
            if let Some((statement, params)) = self.lifted_statement(&mut session, &lifted).await {
                let mut block = Block::from_status(client.transaction_status());
                let format = Format::UnifiedText;
                return match run_statement(
                    self,
                    &cell,
                    &mut session,
                    client,
                    &mut block,
                    statement,
                    Some(params),
                    &format,
                )
                .await
                {
                    Ok(r) => Ok(vec![r]),
                    Err(PgWireError::UserError(info)) => Ok(vec![Response::Error(info)]),
                    Err(e) => Err(e),
                };
            }
        }
        let statements = self.frontend.parse(query).map_err(reject)?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
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

impl WeirHandler {
    /// The statement `lifted` stands for and its literals as parameter values, when its text
    /// parses to one query, UPDATE or DELETE and each literal converts exactly to its
    /// parameter's planned type; None runs the statement as written.
    async fn lifted_statement(
        &self,
        session: &mut crate::frontend::session::Session,
        lifted: &crate::frontend::literals::Lifted,
    ) -> Option<(crate::frontend::parser::Statement, datafusion::common::ParamValues)> {
        use datafusion::sql::sqlparser::ast::Statement as Sql;
        let mut statements = self.frontend.parse(&lifted.text).ok()?;
        if statements.len() != 1 {
            return None;
        }
        let statement = statements.remove(0);
        let crate::frontend::parser::Statement::Sql(Sql::Query(_) | Sql::Update(_) | Sql::Delete(_)) = &statement
        else {
            return None;
        };
        let described = self.frontend.describe(session, &statement).await.ok()?;
        let values = lifted.values_as(&described.parameters)?;
        Some((statement, datafusion::common::ParamValues::from(values)))
    }
}
