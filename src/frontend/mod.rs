//! The SQL front end: from statement text to a result.
//!
//! [`Frontend`] is shared by all sessions; it owns the parser, the catalog and the DataFusion
//! template. [`Frontend::execute`] takes one parsed statement and a [`Session`], dispatches it to
//! its handler (one file per statement kind under [`handler`]) and returns a
//! [`StatementResult`]. The server never looks inside a statement: it parses through
//! [`Frontend::parse`], then hands each statement here.

pub mod access_statement;
pub mod ast_rewrites;
pub mod authorize;
pub mod bytea_input;
pub mod checked_arithmetic;
pub mod clauses;
pub mod cluster_gate;
pub mod column_names;
pub mod column_origins;
pub mod comparison_order;
pub mod df_context;
pub mod dialect;
#[cfg(test)]
mod distributed_view_tests;
pub mod function_args;
pub mod handler;
pub mod int4_literals;
pub mod interval_arithmetic;
pub mod interval_text;
pub mod json_functions;
pub mod jsonb_literals;
pub mod keep_names;
pub mod literals;
pub mod numeric_arithmetic;
pub mod ordered_set_aggregates;
pub mod outer_conditions;
pub mod parser;
pub mod pg_catalog;
pub mod pg_functions;
pub mod pg_roles;
pub mod plan_cache;
pub mod point_lookup;
pub mod postgres_intervals;
pub mod session;
pub mod single_row;
pub mod sink_statement;
pub mod system_time;
pub mod text_casts;
pub mod type_names;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ParamValues;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::SendableRecordBatchStream;
pub use parser::Statement;
pub use session::Session;

use crate::catalog::{Catalog, RelationKind};
use crate::dataflow::manager::{Streaming, ViewStart};
use crate::error::Result;

/// What a statement produced.
pub enum StatementResult {
    /// Rows, streamed.
    Rows { schema: SchemaRef, stream: SendableRecordBatchStream },
    /// A command and its tag (`CREATE TABLE`, `INSERT 0 3`, ...).
    Command { tag: String, rows: Option<usize> },
    /// The rows a statement with `RETURNING` gave, and its tag without the count
    /// (`UPDATE`: the rows returned are the rows changed).
    Returned { tag: String, batch: datafusion::arrow::array::RecordBatch },
    /// BEGIN: the session is now in a transaction block.
    TransactionStart { tag: String },
    /// COMMIT or ROLLBACK: the block has ended (`tag` says which, as Postgres does: COMMIT of a
    /// failed block reports ROLLBACK).
    TransactionEnd { tag: String },
}

impl StatementResult {
    pub fn command(tag: &str) -> Self {
        StatementResult::Command { tag: tag.to_string(), rows: None }
    }
}

/// What a prepared statement takes and returns, for the extended protocol's Describe.
#[derive(Default, Clone)]
pub struct StatementDescription {
    /// Parameter types in `$1..$n` order (None where DataFusion could not infer one).
    pub parameters: Vec<Option<DataType>>,
    /// The SQL type a parameter is cast to (`oid[]` for `$1::oid[]`), by position.
    pub parameter_casts: Vec<Option<String>>,
    /// The result columns; None for statements that return no rows.
    pub columns: Option<SchemaRef>,
}

pub struct Frontend {
    catalog: Arc<Catalog>,
    parser: parser::SqlParser,
    template: SessionState,
    streaming: Arc<Streaming>,
}

impl Frontend {
    /// Sets up DataFusion over `catalog`, restores every materialized view it has from the
    /// checkpoint the store holds, replays into them the writes logged after it (`replay`,
    /// from `checkpoint::recovery`), and only then starts barriers and the sources again. On a
    /// new data directory it takes the first checkpoint.
    pub async fn new(
        catalog: Arc<Catalog>,
        streaming: Arc<Streaming>,
        replay: Vec<crate::catalog::change_log::LogEntry>,
    ) -> Result<Frontend> {
        let template = df_context::template_state(Arc::clone(&catalog)).await?;
        let table_functions = template.table_functions().keys().map(|k| k.to_ascii_lowercase()).collect();
        let parser = parser::SqlParser::with_table_functions(table_functions);
        let frontend = Frontend { catalog, parser, template, streaming };
        frontend.restart_views().await;
        crate::catalog::change_log::replay(&frontend.catalog, replay).await?;
        frontend.streaming.start_epochs();
        // Every acknowledged write replayed from the log is in the views before the server
        // listens: a read after a restart sees what it saw before the crash.
        frontend.streaming.coordinator.flush().await;
        frontend.restart_sources();
        // This run's first checkpoint, taken in the background: its barrier waits behind
        // whatever the sources replay, and the restored views serve reads meanwhile (DDL
        // waits for it at the DDL gate, as for any checkpoint).
        let coordinator = Arc::clone(&frontend.streaming.coordinator);
        drop(crate::runtime::spawn(async move { coordinator.checkpoint_now().await }));
        Ok(frontend)
    }

    /// Starts every source's connector again, from its stored offset.
    fn restart_sources(&self) {
        let sources = self.catalog.relations().into_iter();
        for relation in sources.filter(|r| r.is_source()) {
            let name = relation.def.name.clone();
            if let Err(e) = self.streaming.start_source(relation) {
                tracing::error!(source = %name, "source could not be restarted: {e}");
            }
        }
    }

    /// Restores every view from the checkpoint the store holds (see `dataflow::manager`), in
    /// creation order so a view's inputs are running before it.
    async fn restart_views(&self) {
        let session = self.new_session("weir");
        // Materialized views and sinks run; tables and plain views have nothing to run.
        let relations = self
            .catalog
            .relations()
            .into_iter()
            .filter(|r| matches!(r.def.kind, RelationKind::MaterializedView | RelationKind::Sink));
        for relation in relations {
            let name = relation.def.name.clone();
            if relation.def.kind == RelationKind::Sink {
                match self.streaming.start_sink(Arc::clone(&relation), ViewStart::Restore).await {
                    Ok(()) => tracing::info!(sink = %name, "sink restored"),
                    Err(e) => tracing::error!(sink = %name, "sink could not be restarted: {e}"),
                }
                continue;
            }
            let started = async {
                // Without rewriting functions in FROM or generate_series in select lists: a
                // definition is stored as it was planned
                // (rewritten already, or from before the rewrite existed, when it meant otherwise).
                let (statement, clauses) = match parser::SqlParser::new().parse(&relation.def.definition)?.pop() {
                    Some(Statement::Sql(s)) => (s, Default::default()),
                    Some(Statement::Streaming(s, c)) => (s, c),
                    _ => return Err(crate::error::WeirError::internal("view definition is not a statement")),
                };
                let options = handler::create_view::view_options(self, &session, &statement, &clauses).await?;
                // Its state stays in the format it was written in.
                let state_format = crate::state::value::StateFormat::recorded(relation.def.state_format)?;
                let options = crate::stream_plan::plan::ViewOptions { state_format, ..options };
                let (planned, logical) =
                    handler::create_view::plan_view(&session, &statement, df_context::PlanningRules::of(&relation.def))
                        .await?;
                handler::create_view::check_planned_columns(&relation, &planned)?;
                let built =
                    handler::create_view::build_view(self, &session, &logical, &name, relation.def.id, &options)?;
                let late_table = clauses.late_rows_to.as_deref().and_then(|t| self.catalog.get(t));
                self.streaming.start_view(Arc::clone(&relation), built, late_table, ViewStart::Restore).await
            };
            match started.await {
                Ok(()) => tracing::info!(view = %name, "view restored"),
                Err(e) => {
                    tracing::error!(view = %name, "view could not be restarted and stays empty: {e}")
                }
            }
        }
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn streaming(&self) -> &Arc<Streaming> {
        &self.streaming
    }

    /// A session of the server's own (restoring views, benchmarks): a superuser's.
    pub fn new_session(&self, user: &str) -> Session {
        self.new_session_as(user, true)
    }

    /// A new session for `user`; `unlisted`: it is no role (trust authentication let it in)
    /// and acts as a superuser.
    pub fn new_session_as(&self, user: &str, unlisted: bool) -> Session {
        let identity = Arc::new(session::Identity::new(user, unlisted));
        Session::new(
            Arc::clone(&identity),
            self.catalog.database().to_string(),
            df_context::session_context(&self.template, identity, &self.catalog),
        )
    }

    /// The statements of `sql`. A syntax error quotes the text near it: secret option values
    /// in it are masked ([`crate::catalog::secrets`]).
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>> {
        self.parser.parse(sql).map_err(|mut e| {
            e.message = crate::catalog::secrets::scrub(&e.message, &crate::catalog::secrets::secret_values(sql));
            e
        })
    }

    /// Runs one statement. `params` are the bound values of `$1..$n` (extended protocol).
    /// A statement that changes the catalog runs under the coordinator's DDL gate and
    /// completes with a checkpoint (ADR 11): what a client was told exists is in the checkpoint
    /// a restart restores.
    pub async fn execute(
        &self,
        session: &mut Session,
        statement: Statement,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        authorize::check(&self.catalog, session, &statement)?;
        let ddl = match &statement {
            Statement::Flush | Statement::ExplainAnalyze(_) => false,
            Statement::Access(access) => access.changes_catalog(),
            Statement::Sink(sink) => !matches!(sink, sink_statement::SinkStatement::Show),
            Statement::Streaming(statement, _) | Statement::Sql(statement) => handler::changes_catalog(statement),
        };
        cluster_gate::check(self.catalog.status(), &statement, ddl)?;
        if !ddl {
            // Boxed, here and below: a statement's future is tens of kilobytes, and each
            // caller that holds it inline copies all of it at every await that starts it (a
            // tenth of a key lookup's time went to those copies, `perf`).
            return Box::pin(self.run(session, statement, params)).await;
        }
        handler::transaction::refuse_ddl_after_writes(session)?;
        // DDL commits on its own: what it writes (CREATE TABLE AS's rows) is not the block's.
        let block = session.transaction.take();
        let result = {
            let _gate = self.streaming.coordinator.ddl_gate.read().await;
            Box::pin(self.run(session, statement, params)).await
        };
        if let Some(block) = block {
            session.transaction.set(block);
        }
        if result.is_ok() && !self.streaming.checkpoint_now().await {
            tracing::warn!("the checkpoint completing a DDL statement failed: see weir_catalog.checkpoints");
        }
        result
    }

    pub(crate) async fn run(
        &self,
        session: &mut Session,
        statement: Statement,
        params: Option<ParamValues>,
    ) -> Result<StatementResult> {
        match statement {
            Statement::Flush => {
                self.streaming.flush().await;
                Ok(StatementResult::command("FLUSH"))
            }
            Statement::Streaming(statement, clauses) => {
                Box::pin(handler::execute_streaming(self, session, statement, clauses)).await
            }
            Statement::Sink(sink) => Box::pin(handler::execute_sink(self, session, sink)).await,
            Statement::Access(access) => Box::pin(handler::execute_access(self, session, access)).await,
            Statement::ExplainAnalyze(name) => handler::explain_analyze::handle(self, &name),
            Statement::Sql(statement) => {
                let writes = handler::writes_rows(&statement)
                    || matches!(statement, datafusion::sql::sqlparser::ast::Statement::Commit { .. });
                let result = Box::pin(handler::execute(self, session, statement, params)).await?;
                if writes && session.implicit_flush() {
                    self.streaming.flush().await;
                }
                Ok(result)
            }
        }
    }

    /// Describes a statement without running it.
    pub async fn describe(&self, session: &mut Session, statement: &Statement) -> Result<StatementDescription> {
        match statement {
            Statement::Flush | Statement::Streaming(..) | Statement::Sink(_) | Statement::Access(_) => {
                Ok(StatementDescription::default())
            }
            // It only reads the status: running it is the simplest exact answer.
            Statement::ExplainAnalyze(name) => {
                let columns = match handler::explain_analyze::handle(self, name)? {
                    StatementResult::Rows { schema, .. } => Some(schema),
                    _ => None,
                };
                Ok(StatementDescription { columns, ..Default::default() })
            }
            Statement::Sql(statement) => handler::describe(self, session, statement).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;
    use crate::catalog::change_log::{LogEntry, LoggedChanges};
    use crate::catalog::TableOptions;
    use crate::dataflow::coordinator::EpochBounds;
    use crate::state::memory::MemoryStore;
    use crate::types::{ChangeBatch, Message};

    /// The change log replayed at start reaches the views before any barrier: it belongs to
    /// epochs before this process's first, and a checkpoint at a barrier among it would hold
    /// the sources' positions after the log and views without it. More entries than a
    /// subscription queues, read slowly: a ticker running during the replay gets in between.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_replayed_log_comes_before_the_first_barrier() {
        const ENTRIES: usize = crate::catalog::changes::CHANNEL_CAPACITY + 100;
        let store = Arc::new(MemoryStore::new());
        let catalog = Arc::new(Catalog::open(store, "dev", Default::default()).unwrap());
        let schema = Schema::new(vec![Field::new("a", DataType::Int64, true)]);
        catalog.create_table_with("t", "", schema, vec![], TableOptions::default(), "", false).unwrap();
        let t = catalog.get("t").unwrap();
        let mut subscriber = catalog.changes.subscribe(t.def.id, 9_999).await;
        let bounds = EpochBounds { interval: Duration::from_millis(1), max_rows: 0 };
        let streaming = Streaming::new(Arc::clone(&catalog), bounds, 1_000, Duration::from_secs(10), None, 7);
        let entries: Vec<LogEntry> = (0..ENTRIES as i64)
            .map(|i| {
                let rows = RecordBatch::try_new(Arc::clone(&t.schema), vec![Arc::new(Int64Array::from(vec![i]))]);
                LogEntry {
                    key: vec![],
                    value: vec![],
                    epoch: 7,
                    relation: t.def.id,
                    writes: vec![],
                    changes: LoggedChanges::Rows(ChangeBatch::inserts(rows.unwrap())),
                }
            })
            .collect();
        let started = tokio::spawn(Frontend::new(Arc::clone(&catalog), streaming, entries));
        for i in 0..ENTRIES {
            let (message, _) = subscriber.recv().await.unwrap();
            assert!(matches!(message, Message::Data(_)), "message {i} is a logged change, not {message:?}");
            if i % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let (message, _) = tokio::time::timeout(Duration::from_secs(5), subscriber.recv()).await.unwrap().unwrap();
        assert!(matches!(message, Message::Barrier(b) if b.epoch == 8), "then the first barrier: {message:?}");
        assert!(started.await.unwrap().is_ok());
    }
}
