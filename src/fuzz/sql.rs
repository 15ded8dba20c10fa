//! The `sql` target: the fuzzer's bytes as SQL text, planned by the frontend of one in-process
//! server over a fixed schema (a table of every type, a watermarked append-only table, a view
//! over it, a plain view, an index).
//!
//! Each statement of the text is parsed, described (parameter and result types, as a driver's
//! Parse/Describe asks), then either run if it only reads (a query, with a deadline, its rows
//! read and dropped) or planned without running through `EXPLAIN` if it would change something
//! (`CREATE MATERIALIZED VIEW` and other views, INSERT, UPDATE, DELETE). Other statements (DDL,
//! SET, roles) are parsed and described only, so the schema every input meets stays the same.

use std::sync::LazyLock;
use std::time::Duration;

use datafusion::sql::sqlparser::ast;
use futures::StreamExt;
use parking_lot::Mutex;

use super::{every_type, MAX_INPUT, RUNTIME};
use crate::bench::Harness;
use crate::frontend::{Statement, StatementResult};

/// The schema every input is planned against.
const SCHEMA: &str = concat!(
    "CREATE TABLE t (",
    every_type!(),
    ");
CREATE TABLE u (id INT, k INT, v TEXT);
CREATE TABLE ev (id BIGINT, k INT, v BIGINT, ts TIMESTAMP,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) APPEND ONLY;
CREATE MATERIALIZED VIEW mv AS SELECT k, count(*) AS c, sum(v) AS s FROM ev GROUP BY k;
CREATE VIEW pv AS SELECT id, k, s FROM t WHERE b;
CREATE INDEX t_k ON t (k);
INSERT INTO t VALUES
  (1, 1, 'a', 1.5, 0.5, true, '2026-01-01 00:00:00', '2026-01-01 00:00:00+00', '2026-01-01',
   INTERVAL '1 day', '{\"a\": [1, 2]}', '\\x00ff', ARRAY[1, 2]),
  (2, 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO u VALUES (1, 1, 'x'), (2, NULL, NULL);
INSERT INTO ev VALUES (1, 1, 10, '2026-01-01 00:00:00'), (2, 2, 20, '2026-01-01 00:00:07');
FLUSH;
"
);

/// How long a query may run (a cross join of generated series may run for hours).
const QUERY_TIME: Duration = Duration::from_millis(500);

static SERVER: LazyLock<Mutex<Harness>> = LazyLock::new(|| {
    RUNTIME.block_on(async {
        let mut harness = Harness::new().await.expect("an in-process server");
        harness.run(SCHEMA).await.expect("the fuzzing schema");
        Mutex::new(harness)
    })
});

/// Plans (and runs, if it only reads) each statement of `data`.
pub fn sql(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut server = SERVER.lock();
    RUNTIME.block_on(plan(&mut server, text));
}

async fn plan(server: &mut Harness, text: &str) {
    let Ok(statements) = server.frontend.parse(text) else { return };
    for statement in statements {
        let _ = server.frontend.describe(&mut server.session, &statement).await;
        let statement = if reads_only(&statement) {
            statement
        } else if let Some(explain) = explained(server, &statement) {
            explain
        } else {
            continue;
        };
        let _ = tokio::time::timeout(QUERY_TIME, run(server, statement)).await;
    }
}

/// A query (or the EXPLAIN of one) that changes nothing.
fn reads_only(statement: &Statement) -> bool {
    fn query(q: &ast::Query) -> bool {
        !matches!(&*q.body, ast::SetExpr::Select(s) if s.into.is_some())
    }
    match statement {
        Statement::Sql(ast::Statement::Query(q)) => query(q),
        Statement::Sql(ast::Statement::Explain { statement, analyze, .. }) => match &**statement {
            ast::Statement::Query(q) => query(q),
            _ => !analyze,
        },
        _ => false,
    }
}

/// `EXPLAIN` of a statement that would change the catalog or a table, when it has one.
fn explained(server: &Harness, statement: &Statement) -> Option<Statement> {
    let plannable = match statement {
        Statement::Streaming(ast::Statement::CreateView { .. }, _) => true,
        Statement::Sql(s) => matches!(
            s,
            ast::Statement::CreateView { .. }
                | ast::Statement::Insert(_)
                | ast::Statement::Update { .. }
                | ast::Statement::Delete(_)
        ),
        _ => false,
    };
    if !plannable {
        return None;
    }
    let mut explain = server.frontend.parse(&format!("EXPLAIN {statement}")).ok()?;
    (explain.len() == 1).then(|| explain.remove(0))
}

async fn run(server: &mut Harness, statement: Statement) {
    if let Ok(StatementResult::Rows { mut stream, .. }) =
        server.frontend.execute(&mut server.session, statement, None).await
    {
        while let Some(Ok(_)) = stream.next().await {}
    }
}
