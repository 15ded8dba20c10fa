//! `BEGIN` / `START TRANSACTION`, `COMMIT` / `END`, `ROLLBACK` / `ABORT`.
//!
//! Accepted so that drivers and BI tools that wrap work in transactions run unchanged. Weir
//! commits each statement on its own (documented in sql-reference.md): a ROLLBACK does not undo
//! earlier statements of the block. The server tracks the block's state, including the failed
//! state in which Postgres refuses statements until the block ends (25P02).

use datafusion::sql::sqlparser::ast::Statement;

use crate::error::{Result, WeirError};
use crate::frontend::StatementResult;

pub fn handle(statement: Statement) -> Result<StatementResult> {
    match statement {
        Statement::StartTransaction { .. } => Ok(StatementResult::TransactionStart { tag: "BEGIN".into() }),
        Statement::Commit { .. } => Ok(StatementResult::TransactionEnd { tag: "COMMIT".into() }),
        Statement::Rollback { savepoint: Some(_), .. } => Err(WeirError::unsupported("savepoints are not supported")),
        Statement::Rollback { .. } => Ok(StatementResult::TransactionEnd { tag: "ROLLBACK".into() }),
        _ => unreachable!("dispatched on transaction statements"),
    }
}
