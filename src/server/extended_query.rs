//! The extended query protocol: Parse / Bind / Describe / Execute / Sync with named and unnamed
//! statements and portals (pgwire keeps those stores), `$n` parameters in text or binary, and
//! results in the formats the client binds.
//!
//! Replies to Parse, Bind, Describe, Execute and Close are held in the connection's buffer
//! until Sync or Flush ([`super::held_replies`]), so a pipelined query is answered in one
//! write, as PostgreSQL answers it.
//!
//! A prepared statement keeps its parsed AST and is planned again at Describe and at Execute, so
//! it always sees the current catalog. Parameter types come from the client's Parse message
//! where it gave them, else from DataFusion's inference.

use std::fmt::Debug;
use std::sync::Arc;

use arrow_pg::datatypes::df::deserialize_parameters_with_server_types;
use arrow_pg::datatypes::into_pg_type;
use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo, Response};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::extendedquery::{Bind, Close, Describe, Execute, Parse};
use pgwire::messages::PgWireBackendMessage;

use super::held_replies::HeldReplies;
use super::session::{reject, run_statement, session_of, Block};
use super::WeirHandler;
use crate::error::WeirError;
use crate::frontend::{Frontend, Statement, StatementDescription};

/// A parsed prepared statement.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub sql: String,
    pub statement: Statement,
}

pub struct WeirQueryParser {
    pub frontend: Arc<Frontend>,
}

#[async_trait]
impl QueryParser for WeirQueryParser {
    type Statement = Prepared;

    async fn parse_sql<C>(&self, _client: &C, sql: &str, _types: &[Option<Type>]) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.frontend.parse(sql).map_err(reject)?;
        match statements.len() {
            0 => Ok(None),
            1 => Ok(Some(Prepared { sql: sql.to_string(), statement: statements.remove(0) })),
            _ => Err(reject(WeirError::syntax("cannot insert multiple commands into a prepared statement"))),
        }
    }

    // Describe is answered by the handler below (it needs the session); these are unused.
    fn get_parameter_types(&self, _stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(vec![])
    }

    fn get_result_schema(&self, _stmt: &Prepared, _format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        Ok(vec![])
    }
}

/// The type of each parameter as the client is told in ParameterDescription: the client's own
/// choice from Parse, else `oid` / `oid[]` where the statement casts to those (DataFusion
/// plans them as int4), else the inferred type.
fn parameter_types(described: &StatementDescription, client_types: &[Option<Type>]) -> PgWireResult<Vec<Type>> {
    let n = described.parameters.len().max(client_types.len());
    (0..n)
        .map(|i| match client_types.get(i).cloned().flatten() {
            Some(t) => Ok(t),
            None => match (oid_type(described, i), described.parameters.get(i).cloned().flatten()) {
                (Some((advertised, _)), _) => Ok(advertised),
                (None, Some(dt)) => into_pg_type(&dt),
                (None, None) => Ok(Type::UNKNOWN),
            },
        })
        .collect()
}

/// For a parameter cast to `oid` or `oid[]`: the type to advertise and the int4 type its bytes
/// decode as (an oid is four bytes, like an int4).
fn oid_type(described: &StatementDescription, i: usize) -> Option<(Type, Type)> {
    match described.parameter_casts.get(i).cloned().flatten().as_deref() {
        Some("oid") => Some((Type::OID, Type::INT4)),
        Some("oid[]") => Some((Type::OID_ARRAY, Type::INT4_ARRAY)),
        _ => None,
    }
}

/// `portal` with its `json` and `jsonb` parameters as text, which the JSON functions and
/// columns read (the parameter decoder knows no JSON type; a `jsonb` one sent in binary is a
/// version byte, then the text); None when it has none.
fn json_as_text(portal: &Portal<Prepared>) -> Option<Portal<Prepared>> {
    let types = &portal.statement.parameter_types;
    let json = |i: usize| matches!(types.get(i).cloned().flatten(), Some(Type::JSON | Type::JSONB));
    if !(0..portal.parameter_len()).any(json) {
        return None;
    }
    let parameters = portal
        .parameters
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Some(bytes) if json(i) && portal.parameter_format.is_binary(i) && types[i] == Some(Type::JSONB) => {
                Some(bytes.slice(1.min(bytes.len())..))
            }
            other => other.clone(),
        })
        .collect();
    let types = (0..types.len()).map(|i| if json(i) { Some(Type::TEXT) } else { types[i].clone() }).collect();
    let statement = StoredStatement::new(portal.statement.id.clone(), portal.statement.statement.clone(), types);
    let mut patched = Portal::new_cursor(portal.name.clone(), Arc::new(statement));
    patched.parameter_format = portal.parameter_format.clone();
    patched.parameters = parameters;
    patched.result_column_format = portal.result_column_format.clone();
    Some(patched)
}

impl WeirHandler {
    /// Describes `statement` in the client's session.
    async fn describe_in_session<C: ClientInfo>(
        &self,
        client: &C,
        statement: &Statement,
    ) -> PgWireResult<StatementDescription> {
        let cell = session_of(self, client);
        let mut session = cell.session.lock().await;
        self.frontend.describe(&mut session, statement).await.map_err(reject)
    }
}

/// The most rows one Execute returns before its portal is suspended (see `on_execute`).
const MAX_ROWS_PER_EXECUTE: i32 = 1 << 16;

#[async_trait]
impl ExtendedQueryHandler for WeirHandler {
    type Statement = Prepared;
    type QueryParser = WeirQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::clone(&self.query_parser)
    }

    /// An Execute asks for `max_rows` at most (0: all). pgwire makes room for that many rows
    /// before it reads one, so a client asking for two billion had it allocate 84 GB and abort
    /// the whole server (found by fuzzing, `fuzz/regressions/wire/`). Past [`MAX_ROWS_PER_EXECUTE`]
    /// the portal is suspended there and the client executes it again for the rest, as the
    /// protocol allows any client (JDBC's fetch size works this way).
    async fn on_execute<C>(&self, client: &mut C, mut message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Zero or less: all rows, as in PostgreSQL (pgwire read a negative count as 2^64 - 1).
        message.max_rows = if message.max_rows <= 0 { 0 } else { message.max_rows.min(MAX_ROWS_PER_EXECUTE) };
        self._on_execute(&mut HeldReplies::new(client), message).await
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        PgwireDefaults(self).on_parse(&mut HeldReplies::new(client), message).await
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        PgwireDefaults(self).on_bind(&mut HeldReplies::new(client), message).await
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_describe(&mut HeldReplies::new(client), message).await
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        PgwireDefaults(self).on_close(&mut HeldReplies::new(client), message).await
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<Prepared>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let described = self.describe_in_session(client, &target.statement.statement).await?;
        let params = parameter_types(&described, &target.parameter_types)?;
        let columns = match &described.columns {
            Some(schema) => session_of(self, client).fields.fields(schema, &Format::UnifiedText)?.as_ref().clone(),
            None => vec![],
        };
        Ok(DescribeStatementResponse::new(params, columns))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let described = self.describe_in_session(client, &portal.statement.statement.statement).await?;
        match &described.columns {
            Some(schema) => Ok(DescribePortalResponse::new(
                session_of(self, client).fields.fields(schema, &portal.result_column_format)?.as_ref().clone(),
            )),
            None => Ok(DescribePortalResponse::no_data()),
        }
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<Prepared>, _max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cell = session_of(self, client);
        let mut session = cell.session.lock().await;
        let statement = portal.statement.statement.statement.clone();
        let params = if portal.parameter_len() > 0 {
            let described = self.frontend.describe(&mut session, &statement).await.map_err(reject)?;
            let inferred: Vec<Option<&DataType>> = described.parameters.iter().map(|t| t.as_ref()).collect();
            let decode_as: Vec<Option<Type>> =
                (0..portal.parameter_len()).map(|i| oid_type(&described, i).map(|(_, decode)| decode)).collect();
            let decode_as: Vec<Option<&Type>> = decode_as.iter().map(|t| t.as_ref()).collect();
            match json_as_text(portal) {
                Some(patched) => Some(deserialize_parameters_with_server_types(&patched, &inferred, &decode_as)?),
                None => Some(deserialize_parameters_with_server_types(portal, &inferred, &decode_as)?),
            }
        } else {
            None
        };
        let mut block = Block::from_status(client.transaction_status());
        run_statement(self, &cell, &mut session, client, &mut block, statement, params, &portal.result_column_format)
            .await
    }
}

/// pgwire's own Parse, Bind and Close handling, which [`WeirHandler`] calls with its replies
/// held: a handler that overrides none of them (pgwire exposes no `_on_parse` to call).
struct PgwireDefaults<'a>(&'a WeirHandler);

#[async_trait]
impl ExtendedQueryHandler for PgwireDefaults<'_> {
    type Statement = Prepared;
    type QueryParser = WeirQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.0.query_parser()
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<Prepared>, max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.0.do_query(client, portal, max_rows).await
    }
}
