//! `BEGIN` / `START TRANSACTION`, `COMMIT` / `END`, `ROLLBACK` / `ABORT`, `SAVEPOINT`,
//! `RELEASE [SAVEPOINT]`, `ROLLBACK TO [SAVEPOINT]`.
//!
//! BEGIN opens a transaction ([`crate::catalog::transaction`]): the block's INSERT, UPDATE,
//! DELETE, TRUNCATE and COPY go into it, its own statements read them, COMMIT makes them
//! durable and visible to everyone and to the views at once, ROLLBACK discards them. A
//! savepoint marks the writes so far; ROLLBACK TO undoes those after it. The server tracks the
//! block's state on the wire, including the failed state in which Postgres refuses statements
//! until the block ends (25P02), where COMMIT rolls back (`server::session`).
//!
//! DDL is not transactional: inside a block it commits on its own, and it is refused (25001)
//! once the block has written rows, whose COMMIT it would otherwise have to come after.

use datafusion::sql::sqlparser::ast::Statement;

use crate::catalog::transaction::Transaction;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, Session, StatementResult};

pub async fn handle(fe: &Frontend, session: &mut Session, statement: Statement) -> Result<StatementResult> {
    let slot = &session.transaction;
    match statement {
        Statement::StartTransaction { .. } => {
            // BEGIN inside a block: Postgres warns and goes on with the block it has.
            if slot.current().is_none() {
                slot.set(Transaction::begin(fe.catalog()));
            }
            Ok(StatementResult::TransactionStart { tag: "BEGIN".into() })
        }
        Statement::Commit { .. } => {
            if let Some(transaction) = slot.take() {
                transaction.commit().await?;
            }
            Ok(StatementResult::TransactionEnd { tag: "COMMIT".into() })
        }
        Statement::Rollback { savepoint: Some(name), .. } => {
            in_block(slot.current(), "ROLLBACK TO SAVEPOINT")?.rollback_to(&name.value)?;
            Ok(StatementResult::command("ROLLBACK"))
        }
        Statement::Rollback { .. } => {
            if let Some(transaction) = slot.take() {
                transaction.end();
            }
            Ok(StatementResult::TransactionEnd { tag: "ROLLBACK".into() })
        }
        Statement::Savepoint { name } => {
            in_block(slot.current(), "SAVEPOINT")?.savepoint(&name.value);
            Ok(StatementResult::command("SAVEPOINT"))
        }
        Statement::ReleaseSavepoint { name } => {
            in_block(slot.current(), "RELEASE SAVEPOINT")?.release(&name.value)?;
            Ok(StatementResult::command("RELEASE"))
        }
        _ => unreachable!("dispatched on transaction statements"),
    }
}

/// The open transaction, or 25P01 as Postgres says for `what` outside a block.
fn in_block(transaction: Option<std::sync::Arc<Transaction>>, what: &str) -> Result<std::sync::Arc<Transaction>> {
    transaction.ok_or_else(|| {
        WeirError::new(SqlState::NO_ACTIVE_SQL_TRANSACTION, format!("{what} can only be used in transaction blocks"))
    })
}

/// 25001 for DDL (`what`) in a block that has written rows.
pub fn refuse_ddl_after_writes(session: &Session) -> Result<()> {
    match session.transaction.current() {
        Some(transaction) if transaction.has_written() => Err(WeirError::new(
            SqlState::ACTIVE_SQL_TRANSACTION,
            "this statement cannot run in a transaction block that has written rows",
        )
        .with_hint("DDL is not transactional in Weir: COMMIT or ROLLBACK the block first.")),
        _ => Ok(()),
    }
}
