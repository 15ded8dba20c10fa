//! COPY on the wire. COPY ... TO STDOUT ([`copy_out`]): the statement's query runs as any
//! query does and its rows stream out as CopyData, one message a row, in text, CSV (with a
//! header line when asked) or Postgres's binary format, then CopyDone and `COPY n`.
//!
//! COPY FROM STDIN: the statement (`frontend::handler::copy`) puts the connection
//! in copy-in mode ([`start`]); the client's CopyData messages are buffered and stored a batch
//! at a time as whole records arrive; CopyDone stores the rest and reports `COPY n`. An error
//! (a bad value, a row of the wrong width) ends the COPY at CopyDone with that error; rows of
//! batches stored before it stay, as with a multi-statement load. CopyFail discards what is
//! buffered.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::{CopyResponse, Response, Tag};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;

use super::session::{reject, session_of};
use super::WeirHandler;
use crate::error::{SqlState, WeirError};
use crate::frontend::handler::copy::CopyIn;
use crate::frontend::Frontend;

/// Bytes buffered before the records in them are stored.
const BATCH_BYTES: usize = 1 << 20;

/// A COPY FROM STDIN under way on a connection.
pub struct CopyInProgress {
    copy: CopyIn,
    buffer: Vec<u8>,
    rows: u64,
    header_skipped: bool,
    error: Option<WeirError>,
}

/// Starts copy-in mode for `copy` on the connection of `cell`: the response announcing it.
pub async fn start(cell: &super::session::SessionCell, copy: CopyIn) -> Response {
    let columns = copy.columns.len();
    *cell.copy.lock().await =
        Some(CopyInProgress { copy, buffer: Vec::new(), rows: 0, header_skipped: false, error: None });
    Response::CopyIn(CopyResponse::new(0, columns, futures::stream::empty()))
}

impl CopyInProgress {
    /// Stores the whole records buffered (all of it `at_end`).
    async fn load(&mut self, fe: &Frontend, at_end: bool) -> crate::error::Result<()> {
        let (mut rows, used) = self.copy.parse(&self.buffer, at_end)?;
        self.buffer.drain(..used);
        if self.copy.format.header && !self.header_skipped && !rows.is_empty() {
            rows.remove(0);
            self.header_skipped = true;
        }
        self.rows += self.copy.insert(fe, rows).await?;
        Ok(())
    }
}

#[async_trait]
impl CopyHandler for WeirHandler {
    async fn on_copy_data<C>(&self, client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cell = session_of(self, client);
        let mut copy = cell.copy.lock().await;
        let Some(progress) = copy.as_mut().filter(|p| p.error.is_none()) else { return Ok(()) };
        progress.buffer.extend_from_slice(&data.data);
        if progress.buffer.len() >= BATCH_BYTES {
            if let Err(e) = progress.load(&self.frontend, false).await {
                progress.error = Some(e);
            }
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cell = session_of(self, client);
        let Some(mut progress) = cell.copy.lock().await.take() else {
            return Err(reject(WeirError::new(SqlState("08P01"), "CopyDone without a COPY under way")));
        };
        if let Some(e) = progress.error.take() {
            return Err(reject(e));
        }
        progress.load(&self.frontend, true).await.map_err(reject)?;
        let tag = Tag::new("COPY").with_rows(progress.rows as usize);
        client.send(PgWireBackendMessage::CommandComplete(tag.into())).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let cell = session_of(self, client);
        cell.copy.lock().await.take();
        reject(WeirError::new(SqlState::QUERY_CANCELED, format!("COPY from stdin failed: {}", fail.message)))
    }
}

/// The CopyOut response of a `COPY ... TO STDOUT` whose query gave `schema` and `rows`.
pub fn copy_out(
    copy: &crate::frontend::handler::copy::CopyOut,
    schema: datafusion::arrow::datatypes::SchemaRef,
    rows: datafusion::physical_plan::SendableRecordBatchStream,
) -> PgWireResult<Response> {
    use futures::StreamExt;
    use pgwire::api::results::{CopyCsvOptions, CopyEncoder, CopyTextOptions};
    use std::sync::Arc;
    let wire_format =
        if copy.binary { pgwire::api::portal::Format::UnifiedBinary } else { pgwire::api::portal::Format::UnifiedText };
    let fields = Arc::new(super::encode::fields(&schema, &wire_format)?);
    let format = &copy.format;
    let byte = |b: u8| (b as char).to_string();
    let mut encoder = if copy.binary {
        CopyEncoder::new_binary(Arc::clone(&fields))
    } else if format.csv {
        CopyEncoder::new_csv(
            Arc::clone(&fields),
            CopyCsvOptions {
                delimiter: byte(format.delimiter).as_str().into(),
                quote: byte(format.quote).as_str().into(),
                escape: byte(format.escape).as_str().into(),
                null_string: format.null.as_str().into(),
                force_quote: vec![],
            },
        )
    } else {
        CopyEncoder::new_text(
            Arc::clone(&fields),
            CopyTextOptions {
                delimiter: byte(format.delimiter).as_str().into(),
                null_string: format.null.as_str().into(),
            },
        )
    };
    // CSV's HEADER: the column names, quoted where they must be.
    let header = (format.csv && format.header && !copy.binary).then(|| {
        let quote = format.quote as char;
        let names: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| {
                let name = f.name();
                if name.contains([format.delimiter as char, quote, '\n', '\r']) {
                    format!("{quote}{}{quote}", name.replace(quote, &format!("{quote}{quote}")))
                } else {
                    name.clone()
                }
            })
            .collect();
        Ok(CopyData::new(bytes::Bytes::from(format!("{}\n", names.join(&(format.delimiter as char).to_string())))))
    });
    let text = !copy.binary;
    let data = rows.flat_map(move |batch| {
        let rows: Vec<PgWireResult<CopyData>> = match encode_rows(&mut encoder, &fields, batch, text) {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(rows)
    });
    let data = futures::stream::iter(header).chain(data);
    Ok(Response::CopyOut(CopyResponse::new(i8::from(copy.binary), schema.fields().len(), data)))
}

/// One CopyData per row of `batch`.
fn encode_rows(
    encoder: &mut pgwire::api::results::CopyEncoder,
    fields: &[pgwire::api::results::FieldInfo],
    batch: datafusion::error::Result<datafusion::arrow::array::RecordBatch>,
    text: bool,
) -> PgWireResult<Vec<CopyData>> {
    let batch = batch.map_err(|e| WeirError::from(e).into_pg())?;
    // Times and floats as Postgres writes them, as in query results.
    let batch = if text { super::encode::postgres_text(batch, fields).map_err(|e| e.into_pg())? } else { batch };
    let schema = batch.schema();
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for (i, column) in batch.columns().iter().enumerate() {
            arrow_pg::encoder::encode_value(encoder, column, row, schema.field(i), &fields[i])?;
        }
        out.push(encoder.take_copy());
    }
    Ok(out)
}
