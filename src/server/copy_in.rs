//! The messages of a COPY FROM STDIN under way (`server::copy` says what it does): CopyData
//! buffered and stored a batch at a time, CopyDone storing the rest and reporting `COPY n`,
//! CopyFail discarding what is buffered. pgwire calls this handler for them.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::Tag;
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;

use super::copy::BATCH_BYTES;
use super::session::{reject, session_of};
use super::WeirHandler;
use crate::error::{SqlState, WeirError};

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
