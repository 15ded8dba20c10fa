//! `CREATE SINK name FROM view | AS query WITH (connector = '...', ...) [FORMAT f ENCODE e]`,
//! `DROP SINK`, `SHOW SINKS` and `SHOW CREATE SINK` (see `connectors::sink`).
//!
//! A sink over a query keeps the query as a materialized view of its own, named
//! `<sink>_query` (users can read it too), dropped with the sink. CREATE SINK
//! checks the connector first (the broker answers, the topic exists), then records the sink
//! and starts it; the view's current rows are its first changes. A failure, or the statement
//! ending before it finished, undoes what it made, by id ([`Unfinished`]).

use std::sync::Arc;

use crate::catalog::RelationKind;
use crate::dataflow::manager::ViewStart;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::sink_statement::{SinkInput, SinkStatement};
use crate::frontend::{Frontend, Session, StatementResult};

use super::unfinished::Unfinished;

pub async fn handle(fe: &Frontend, session: &mut Session, statement: SinkStatement) -> Result<StatementResult> {
    match statement {
        SinkStatement::Show => super::show::sinks(fe),
        SinkStatement::ShowCreate(name) => super::show::create(fe, &name, &[RelationKind::Sink]),
        SinkStatement::Drop { name, if_exists } => super::drop::handle_sink(fe, &name, if_exists).await,
        SinkStatement::Create { name, if_not_exists, input, options, text } => {
            if fe.catalog().get(&name).is_some() {
                if if_not_exists {
                    return Ok(StatementResult::command("CREATE SINK"));
                }
                return Err(WeirError::new(SqlState::DUPLICATE_TABLE, format!("relation \"{name}\" already exists")));
            }
            let mut made = Unfinished::new(fe);
            let view = match input {
                SinkInput::View(view) => view,
                SinkInput::Query(query) => {
                    let view = format!("{name}_query");
                    let sql = format!("CREATE MATERIALIZED VIEW {view} AS {query}");
                    for statement in fe.parse(&sql)? {
                        Box::pin(fe.run(session, statement, None)).await?;
                    }
                    made.push(fe.catalog().get(&view).ok_or_else(|| WeirError::undefined_table(&view))?.def.id);
                    view
                }
            };
            let shards = crate::connectors::sink::shards_option(&options)?;
            let created = create(fe, &name, &text, &view, options, shards, &session.owner(), &mut made).await?;
            made.finished();
            Ok(created)
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn create(
    fe: &Frontend,
    name: &str,
    text: &str,
    view: &str,
    options: crate::catalog::options::ConnectorOptions,
    shards: usize,
    owner: &str,
    made: &mut Unfinished<'_>,
) -> Result<StatementResult> {
    let input = fe.catalog().get(view).ok_or_else(|| WeirError::undefined_table(view))?;
    if input.def.kind != RelationKind::MaterializedView {
        return Err(WeirError::new(
            SqlState::WRONG_OBJECT_TYPE,
            format!("\"{view}\" is not a materialized view: a sink delivers a view's changes"),
        )
        .with_hint("CREATE SINK name AS SELECT ... FROM table delivers a query's changes."));
    }
    let Some(id) = fe.catalog().create_sink(name, text, &input, options, shards, owner, false)? else {
        return Ok(StatementResult::command("CREATE SINK"));
    };
    made.push(id);
    let sink = fe.catalog().by_id(id).ok_or_else(|| WeirError::internal("sink vanished while being created"))?;
    fe.streaming().start_sink(Arc::clone(&sink), ViewStart::Backfill).await?;
    Ok(StatementResult::command("CREATE SINK"))
}
