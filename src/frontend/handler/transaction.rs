//! `BEGIN` / `START TRANSACTION`, `COMMIT` / `END`, `ROLLBACK` / `ABORT`, and `SAVEPOINT`,
//! `RELEASE`, `ROLLBACK TO SAVEPOINT` (accepted, with nothing to undo).
//!
//! Accepted so that drivers and BI tools that wrap work in transactions run unchanged. Weir
//! commits each statement on its own (documented in sql-reference.md): a ROLLBACK does not undo
//! earlier statements of the block. The server tracks the block's state, including the failed
//! state in which Postgres refuses statements until the block ends (25P02).

use datafusion::sql::sqlparser::ast::Statement;

use crate::error::Result;
use crate::frontend::StatementResult;

pub fn handle(statement: Statement) -> Result<StatementResult> {
    match statement {
        Statement::StartTransaction { .. } => Ok(StatementResult::TransactionStart { tag: "BEGIN".into() }),
        Statement::Commit { .. } => Ok(StatementResult::TransactionEnd { tag: "COMMIT".into() }),
        // Each statement commits on its own, so there is nothing to roll back to.
        Statement::Savepoint { .. } => Ok(StatementResult::command("SAVEPOINT")),
        Statement::ReleaseSavepoint { .. } => Ok(StatementResult::command("RELEASE")),
        Statement::Rollback { savepoint: Some(_), .. } => Ok(StatementResult::command("ROLLBACK")),
        Statement::Rollback { .. } => Ok(StatementResult::TransactionEnd { tag: "ROLLBACK".into() }),
        _ => unreachable!("dispatched on transaction statements"),
    }
}
