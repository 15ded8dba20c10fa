//! What a node of a cluster refuses while views do not yet run across nodes (issue 46, ADR 38):
//! statements that would make or change streaming work (DDL, DML, COPY FROM, roles) on one
//! node alone, which the other nodes would not see. Queries pass, so the cluster's own
//! relations (`weir_catalog.cluster_nodes`, `cluster_events`) and the catalogs answer on any
//! node. Refused with 0A000 and the reason; a single process (no `--cluster`) refuses nothing.
//!
//! Called by `Frontend::execute` for every statement and by the server before COPY FROM STDIN.

use datafusion::sql::sqlparser::ast;

use super::parser::Statement;
use crate::error::{Result, WeirError};
use crate::status::Status;

/// Err (0A000) when this node is in a cluster and `statement` writes; `changes_catalog` is
/// whether it is DDL (the caller knows).
pub fn check(status: &Status, statement: &Statement, changes_catalog: bool) -> Result<()> {
    if status.cluster.lock().is_none() {
        return Ok(());
    }
    let writes = matches!(
        statement,
        Statement::Sql(
            ast::Statement::Insert(_)
                | ast::Statement::Update { .. }
                | ast::Statement::Delete(_)
                | ast::Statement::Truncate { .. }
                | ast::Statement::Merge { .. }
                | ast::Statement::Copy { to: false, .. }
        )
    );
    if changes_catalog || writes {
        return Err(WeirError::unsupported(
            "this node is in a cluster, and this release runs only the cluster's control plane across \
             nodes (membership, election, vnode assignment): tables, sources, views and sinks, and writes \
             to them, are not distributed yet, so they are refused rather than kept on one node \
             (see weir_catalog.cluster_nodes; run without --cluster for a single process)",
        ));
    }
    Ok(())
}
