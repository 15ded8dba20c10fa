//! The pgwire side of a session: finding the front-end [`Session`] of a connection, running a
//! statement in it with Postgres's transaction-block rules, and the ParameterStatus messages
//! owed after a `SET`.
//!
//! A connection's [`Session`] is created on its first statement and kept in the connection's
//! extension map, so it lives exactly as long as the connection.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast;
use futures::{Sink, SinkExt};
use pgwire::api::portal::Format;
use pgwire::api::results::Response;
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::PgWireBackendMessage;
use tokio::sync::Mutex;

use super::cancel::{cancellable, CancelSignal};
use super::encode::into_response;
use super::WeirHandler;
use crate::error::{SqlState, WeirError};
use crate::frontend::{Session, Statement, StatementResult};
use crate::metrics;

/// The per-connection session, in the connection's extension map.
pub struct SessionCell {
    pub session: Mutex<Session>,
    pub cancel: Arc<CancelSignal>,
    /// A COPY FROM STDIN under way (`server::copy`).
    pub copy: Mutex<Option<super::copy::CopyInProgress>>,
    /// The RowDescriptions of the results it sent lately.
    pub fields: super::encode::FieldsCache,
}

pub fn session_of<C: ClientInfo>(handler: &WeirHandler, client: &C) -> Arc<SessionCell> {
    if let Some(cell) = client.session_extensions().get::<SessionCell>() {
        return cell;
    }
    // As authentication decided (`auth::Login`); a connection without it is no role's. Read
    // before `get_or_insert_with`, which holds the extensions' lock while it makes the cell.
    let unlisted = client.session_extensions().get::<super::auth::Login>().is_some_and(|l| l.unlisted);
    client.session_extensions().get_or_insert_with(|| {
        let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_else(|| "root".into());
        let cancel = Arc::new(CancelSignal::default());
        let (pid, secret) = client.pid_and_secret_key();
        handler.cancels.register(pid, secret.to_bytes().to_vec(), &cancel);
        let session = handler.frontend.new_session_as(&user, unlisted);
        SessionCell { session: Mutex::new(session), cancel, copy: Mutex::new(None), fields: Default::default() }
    })
}

/// The transaction-block state as the statements of one message move it along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    Idle,
    InBlock,
    Failed,
}

impl Block {
    pub fn from_status(status: TransactionStatus) -> Block {
        match status {
            TransactionStatus::Idle => Block::Idle,
            TransactionStatus::Transaction => Block::InBlock,
            TransactionStatus::Error => Block::Failed,
        }
    }
}

/// Runs one statement as Postgres would in `block`: in a failed block only COMMIT/ROLLBACK run
/// (25P02 otherwise) and COMMIT reports ROLLBACK. Updates `block`.
#[allow(clippy::too_many_arguments)]
pub async fn run_statement<C>(
    handler: &WeirHandler,
    cell: &SessionCell,
    session: &mut Session,
    client: &mut C,
    block: &mut Block,
    statement: Statement,
    params: Option<ParamValues>,
    format: &Format,
) -> PgWireResult<Response>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let ends_block =
        matches!(statement, Statement::Sql(ast::Statement::Commit { .. } | ast::Statement::Rollback { .. }));
    if *block == Block::Failed && !ends_block {
        return Err(fail(
            block,
            WeirError::new(
                SqlState::IN_FAILED_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ),
        ));
    }
    // In a failed block COMMIT rolls back, as in Postgres.
    let statement = match statement {
        Statement::Sql(ast::Statement::Commit { .. }) if *block == Block::Failed => {
            Statement::Sql(ast::Statement::Rollback { chain: false, savepoint: None })
        }
        other => other,
    };
    let commits = matches!(statement, Statement::Sql(ast::Statement::Commit { .. }));
    let to_savepoint = matches!(statement, Statement::Sql(ast::Statement::Rollback { savepoint: Some(_), .. }));
    // Ending a block is let through a stop: it releases what the block holds.
    let running = if ends_block { handler.drain.track() } else { handler.drain.enter().map_err(|e| fail(block, e))? };
    let frontend = &handler.frontend;
    tracing::debug!(statement = %crate::catalog::secrets::redact_sql(&statement.to_string()), "run");
    // COPY ... TO STDOUT runs its query as any statement; its rows then go out as copy data.
    let mut copy_out = None;
    let statement = match statement {
        Statement::Sql(copy @ ast::Statement::Copy { .. }) if crate::frontend::handler::copy::is_copy_out(&copy) => {
            let out = crate::frontend::handler::copy::copy_out(frontend, &copy).map_err(|e| fail(block, e))?;
            let query = crate::frontend::Statement::Sql(out.query.clone());
            copy_out = Some(out);
            query
        }
        other => other,
    };
    // COPY FROM STDIN: the connection goes into copy-in mode; the data follows.
    if let Statement::Sql(copy @ ast::Statement::Copy { .. }) = &statement {
        crate::frontend::authorize::check(frontend.catalog(), session, &statement).map_err(|e| fail(block, e))?;
        crate::frontend::cluster_gate::check(frontend.catalog().status(), &statement, false)
            .map_err(|e| fail(block, e))?;
        let copy = crate::frontend::handler::copy::copy_in(frontend, copy).map_err(|e| fail(block, e))?;
        let (progress, response) = super::copy::start(copy, running, session.transaction.current());
        *cell.copy.lock().await = Some(progress);
        return Ok(response);
    }
    let started = Instant::now();
    // A COMMIT is not cut short: its write, once started, completes, and the client must not
    // be told it failed.
    let timeout = if commits { None } else { session.statement_timeout() };
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let result = match timeout {
        // Boxed: see `Frontend::execute`.
        Some(t) => match tokio::time::timeout(t, Box::pin(frontend.execute(session, statement, params))).await {
            Ok(result) => result,
            Err(_) => Err(WeirError::new(SqlState::QUERY_CANCELED, "canceling statement due to statement timeout")),
        },
        None => Box::pin(frontend.execute(session, statement, params)).await,
    };
    metrics::STATEMENT_SECONDS.observe(started.elapsed().as_secs_f64());
    for (name, value) in session.take_reports() {
        client.send(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(name, value))).await?;
    }
    let result = match result {
        Ok(r) => r,
        // A COMMIT that fails has rolled the transaction back: the block is over.
        Err(e) if commits => {
            *block = Block::Idle;
            return Err(reject(e));
        }
        Err(e) => return Err(fail(block, e)),
    };
    // ROLLBACK TO SAVEPOINT leaves a failed block usable again.
    if to_savepoint {
        *block = Block::InBlock;
    }
    metrics::STATEMENTS_TOTAL.with_label_values(&["ok"]).inc();
    // A timestamptz goes out as text in the session's time zone, as in Postgres.
    // (Read in place: `SessionContext::state` copies the whole state, function registries and all.)
    let zone = session.ctx.state_ref().read().config().options().execution.time_zone.clone();
    let result = match result {
        StatementResult::TransactionStart { tag } => {
            *block = Block::InBlock;
            StatementResult::TransactionStart { tag }
        }
        StatementResult::TransactionEnd { tag } => {
            let tag = if *block == Block::Failed { "ROLLBACK".to_string() } else { tag };
            *block = Block::Idle;
            StatementResult::TransactionEnd { tag }
        }
        StatementResult::Rows { schema, stream } => {
            let stream = super::drain::holding(cancellable(stream, &cell.cancel, deadline), running);
            if let Some(out) = &copy_out {
                return super::copy::copy_out(out, schema, stream, zone);
            }
            StatementResult::Rows { schema, stream }
        }
        other => other,
    };
    into_response(result, format, zone, &cell.fields)
}

fn fail(block: &mut Block, e: WeirError) -> PgWireError {
    if *block == Block::InBlock {
        *block = Block::Failed;
    }
    reject(e)
}

/// The ErrorResponse for `e`, counted.
pub fn reject(e: WeirError) -> PgWireError {
    metrics::STATEMENTS_TOTAL.with_label_values(&["error"]).inc();
    metrics::ERRORS_TOTAL.with_label_values(&[e.state.code()]).inc();
    if e.domain() != crate::error::ErrorDomain::User {
        tracing::warn!(sqlstate = e.state.code(), "{}", e.message);
    }
    e.into_pg()
}
