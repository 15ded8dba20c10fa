//! The SQL front end: from statement text to a result.
//!
//! [`Frontend`] is shared by all sessions; it owns the parser, the catalog and the DataFusion
//! template. [`Frontend::execute`] takes one parsed statement and a [`Session`], dispatches it to
//! its handler (one file per statement kind under [`handler`]) and returns a
//! [`StatementResult`]. The server never looks inside a statement: it parses through
//! [`Frontend::parse`], then hands each statement here.

pub mod df_context;
pub mod handler;
pub mod parser;
pub mod pg_catalog;
pub mod session;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ParamValues;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::sql::sqlparser::ast::Statement;

pub use session::Session;

use crate::catalog::Catalog;
use crate::error::Result;

/// What a statement produced.
pub enum StatementResult {
    /// Rows, streamed.
    Rows {
        schema: SchemaRef,
        stream: SendableRecordBatchStream,
    },
    /// A command and its tag (`CREATE TABLE`, `INSERT 0 3`, ...).
    Command { tag: String, rows: Option<usize> },
    /// BEGIN: the session is now in a transaction block.
    TransactionStart { tag: String },
    /// COMMIT or ROLLBACK: the block has ended (`tag` says which, as Postgres does: COMMIT of a
    /// failed block reports ROLLBACK).
    TransactionEnd { tag: String },
}

impl StatementResult {
    pub fn command(tag: &str) -> Self {
        StatementResult::Command {
            tag: tag.to_string(),
            rows: None,
        }
    }
}

/// What a prepared statement takes and returns, for the extended protocol's Describe.
pub struct StatementDescription {
    /// Parameter types in `$1..$n` order (None where DataFusion could not infer one).
    pub parameters: Vec<Option<DataType>>,
    /// The result columns; None for statements that return no rows.
    pub columns: Option<SchemaRef>,
}

pub struct Frontend {
    catalog: Arc<Catalog>,
    parser: parser::SqlParser,
    template: SessionState,
}

impl Frontend {
    pub async fn new(catalog: Arc<Catalog>) -> Result<Frontend> {
        let template = df_context::template_state(Arc::clone(&catalog)).await?;
        Ok(Frontend {
            catalog,
            parser: parser::SqlParser::new(),
            template,
        })
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// A new session for `user`.
    pub fn new_session(&self, user: &str) -> Session {
        Session::new(
            user.to_string(),
            self.catalog.database().to_string(),
            df_context::session_context(&self.template, user),
        )
    }

    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        self.parser.parse(sql)
    }

    /// Runs one statement. `params` are the bound values of `$1..$n` (extended protocol).
    pub async fn execute(
        &self,
        session: &mut Session,
        statement: Statement,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        handler::execute(self, session, statement, params).await
    }

    /// Describes a statement without running it.
    pub async fn describe(
        &self,
        session: &mut Session,
        statement: &Statement,
    ) -> Result<StatementDescription> {
        handler::describe(self, session, statement).await
    }
}
