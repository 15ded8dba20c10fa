//! COPY on the wire. COPY ... TO STDOUT ([`copy_out`]): the statement's query runs as any
//! query does and its rows stream out as CopyData, one message a row, in text, CSV (with a
//! header line when asked) or Postgres's binary format, then CopyDone and `COPY n`.
//!
//! COPY FROM STDIN: the statement (`frontend::handler::copy`) puts the connection
//! in copy-in mode ([`start`]); the client's CopyData messages (`copy_in`) are buffered and stored a batch
//! at a time as whole records arrive; CopyDone stores the rest and reports `COPY n`. An error
//! (a bad value, a row of the wrong width) ends the COPY at CopyDone with that error; rows of
//! batches stored before it stay, as with a multi-statement load. CopyFail discards what is
//! buffered.

use pgwire::api::results::{CopyResponse, Response};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;

use crate::error::WeirError;
use crate::frontend::handler::copy::CopyIn;
use crate::frontend::Frontend;

/// Bytes buffered before the records in them are stored.
pub(super) const BATCH_BYTES: usize = 1 << 20;

/// A COPY FROM STDIN under way on a connection.
pub struct CopyInProgress {
    copy: CopyIn,
    pub(super) buffer: Vec<u8>,
    pub(super) rows: u64,
    header_skipped: bool,
    /// The binary format's header has been read.
    started: bool,
    pub(super) error: Option<WeirError>,
    /// The COPY is a statement under way until its CopyDone or CopyFail.
    _running: super::drain::Running,
    /// The session's open transaction, which the rows go into.
    transaction: Option<std::sync::Arc<crate::catalog::transaction::Transaction>>,
}

/// Starts copy-in mode for `copy`: what the connection keeps while it lasts, and the response
/// announcing it.
pub fn start(
    copy: CopyIn,
    running: super::drain::Running,
    transaction: Option<std::sync::Arc<crate::catalog::transaction::Transaction>>,
) -> (CopyInProgress, Response) {
    let columns = copy.columns.len();
    let binary = copy.binary;
    let progress = CopyInProgress {
        copy,
        buffer: Vec::new(),
        rows: 0,
        header_skipped: false,
        started: false,
        error: None,
        _running: running,
        transaction,
    };
    (progress, Response::CopyIn(CopyResponse::new(i8::from(binary), columns, futures::stream::empty())))
}

impl CopyInProgress {
    /// Stores the whole records buffered (all of it `at_end`).
    pub(super) async fn load(&mut self, fe: &Frontend, at_end: bool) -> crate::error::Result<()> {
        let (mut rows, used) = self.copy.parse(&self.buffer, at_end, &mut self.started)?;
        self.buffer.drain(..used);
        if self.copy.format.header && !self.header_skipped && !rows.is_empty() {
            rows.remove(0);
            self.header_skipped = true;
        }
        self.rows += self.copy.insert(fe, rows, self.transaction.clone()).await?;
        Ok(())
    }
}

/// The CopyOut response of a `COPY ... TO STDOUT` whose query gave `schema` and `rows`: one
/// CopyData a row (the count pgwire reports), text and CSV written by
/// [`CopyFormat::write_record`](crate::frontend::handler::copy::CopyFormat::write_record) from
/// each value's Postgres text form, binary by pgwire's encoder.
pub fn copy_out(
    copy: &crate::frontend::handler::copy::CopyOut,
    schema: datafusion::arrow::datatypes::SchemaRef,
    rows: datafusion::physical_plan::SendableRecordBatchStream,
    zone: Option<String>,
) -> PgWireResult<Response> {
    use futures::StreamExt;
    let wire_format =
        if copy.binary { pgwire::api::portal::Format::UnifiedBinary } else { pgwire::api::portal::Format::UnifiedText };
    let fields = std::sync::Arc::new(super::encode::fields(&schema, &wire_format)?);
    let header = (copy.format.header && !copy.binary).then(|| {
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let mut line = Vec::new();
        copy.format.write_record(names.iter().map(|n| Some(n.as_bytes())), &mut line);
        line
    });
    let writer = CopyOutWriter {
        format: copy.format.clone(),
        binary: copy.binary.then(|| pgwire::api::results::CopyEncoder::new_binary(std::sync::Arc::clone(&fields))),
        fields,
        header,
        wrote_row: false,
        zone,
    };
    let columns = schema.fields().len();
    let chunks = futures::stream::unfold((rows, Some(writer)), |(mut rows, writer)| async move {
        let mut writer = writer?;
        match rows.next().await {
            Some(batch) => {
                let chunk = writer.rows(batch);
                let more = chunk.is_ok();
                Some((chunk, (rows, more.then_some(writer))))
            }
            None => Some((Ok(writer.finish()), (rows, None))),
        }
    });
    let data = chunks.flat_map(|chunk| {
        futures::stream::iter(match chunk {
            Ok(messages) => messages.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })
    });
    Ok(Response::CopyOut(CopyResponse::new(i8::from(copy.binary), columns, data)))
}

/// Writes a COPY's rows as CopyData messages.
struct CopyOutWriter {
    format: crate::frontend::handler::copy::CopyFormat,
    /// pgwire's encoder, for the binary format.
    binary: Option<pgwire::api::results::CopyEncoder>,
    fields: std::sync::Arc<Vec<pgwire::api::results::FieldInfo>>,
    /// The header line, sent with the first row (so it is not counted as one).
    header: Option<Vec<u8>>,
    wrote_row: bool,
    /// The session's time zone, which timestamptz values are written in.
    zone: Option<String>,
}

impl CopyOutWriter {
    /// One CopyData per row of `batch`.
    fn rows(
        &mut self,
        batch: datafusion::error::Result<datafusion::arrow::array::RecordBatch>,
    ) -> PgWireResult<Vec<CopyData>> {
        let batch = batch.map_err(|e| WeirError::from(e).into_pg())?;
        // Times and floats as Postgres writes them in text, jsonb in binary, as in query results.
        let batch = super::encode::postgres_text(batch, &self.fields, self.zone.as_deref()).map_err(|e| e.into_pg())?;
        let schema = batch.schema();
        let mut out = Vec::with_capacity(batch.num_rows());
        let mut text = TextFields::default();
        for row in 0..batch.num_rows() {
            let data = match &mut self.binary {
                Some(encoder) => {
                    for (i, column) in batch.columns().iter().enumerate() {
                        arrow_pg::encoder::encode_value(encoder, column, row, schema.field(i), &self.fields[i])?;
                    }
                    encoder.take_copy()
                }
                None => {
                    for (i, column) in batch.columns().iter().enumerate() {
                        arrow_pg::encoder::encode_value(&mut text, column, row, schema.field(i), &self.fields[i])?;
                    }
                    let values = arrow_pg::encoder::Encoder::take_row(&mut text);
                    let mut line = self.header.take().unwrap_or_default();
                    self.format.write_record(values.iter().map(|v| v.as_deref()), &mut line);
                    CopyData::new(bytes::Bytes::from(line))
                }
            };
            self.wrote_row = true;
            out.push(data);
        }
        Ok(out)
    }

    /// What is owed after the last row: the header of an empty text or CSV result, the
    /// signature of an empty binary one (pgwire adds the trailer). Either is then counted as a
    /// row by pgwire's `COPY n`.
    fn finish(&mut self) -> Vec<CopyData> {
        if self.wrote_row {
            return vec![];
        }
        if self.binary.is_some() {
            let mut signature = b"PGCOPY\n\xff\r\n\0".to_vec();
            signature.extend_from_slice(&0i32.to_be_bytes()); // flags
            signature.extend_from_slice(&0i32.to_be_bytes()); // header extension length
            return vec![CopyData::new(bytes::Bytes::from(signature))];
        }
        self.header.take().map(|h| CopyData::new(bytes::Bytes::from(h))).into_iter().collect()
    }
}

/// Each value of a row in Postgres's text form (None: NULL), as arrow-pg hands them over.
#[derive(Default)]
struct TextFields {
    values: Vec<Option<bytes::BytesMut>>,
}

impl arrow_pg::encoder::Encoder for TextFields {
    type Item = Vec<Option<bytes::BytesMut>>;

    fn encode_field<T>(&mut self, value: &T, field: &pgwire::api::results::FieldInfo) -> PgWireResult<()>
    where
        T: tokio_postgres::types::ToSql + pgwire::types::ToSqlText + Sized,
    {
        let mut text = bytes::BytesMut::new();
        let options = pgwire::types::format::FormatOptions::default();
        let is_null = value.to_sql_text(field.datatype(), &mut text, &options).map_err(PgWireError::ApiError)?;
        self.values.push(matches!(is_null, tokio_postgres::types::IsNull::No).then_some(text));
        Ok(())
    }

    fn take_row(&mut self) -> Self::Item {
        std::mem::take(&mut self.values)
    }
}
