//! The sink runtime: exactly-once delivery of a view's changes to an external system, on top of
//! checkpoints (ADR 12).
//!
//! A sink job follows its view like a view follows its inputs. The changes of the epochs since
//! the last checkpoint are held in memory; at a checkpoint barrier `c` they go, as one entry,
//! into the sink's *outbox* in the store (keys `[sink id][0][c]`), in the checkpoint's cut, and
//! the job commits `c` like a view. Once checkpoint `c` is taken, the deliverer hands the
//! outbox's entries up to `c`, in order, to the connector's [`SinkWriter`], which writes each
//! with a marker saying "checkpoint `c` delivered" in one transaction of the external system
//! (a Kafka transaction with a consumer-group offset; a Postgres transaction with a marker row),
//! then deletes the entry. After a crash the store is back at the newest checkpoint, outbox
//! included; entries the marker says were delivered are deleted unsent, the rest are sent. The
//! changes after the checkpoint are computed again by the restored view and reach a later
//! checkpoint's entry, numbered above every earlier one (epochs only grow). So every change
//! reaches the external system once.
//!
//! A connector that cannot be reached is retried with backoff (`weir_catalog.sinks` shows it
//! `retrying`); the outbox grows on disk meanwhile, never in memory, and the rest of the server
//! goes on. Called by `dataflow::manager` (start, restore, stop).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::catalog::changes::ChangeReceiver;
use crate::catalog::Relation;
use crate::error::Result;
use crate::state::index_codec::{IndexReader, IndexWriter};
use crate::state::keys::segment_key;
use crate::state::store::{ScanControl, StateStore, WriteBatch};
use crate::types::{ChangeBatch, Epoch, Message};

/// A connector's writing side.
pub trait SinkWriter: Send {
    /// Checks the external system can be written now (CREATE SINK): it answers, the topic or
    /// table exists.
    fn check(&mut self) -> Result<()> {
        Ok(())
    }

    /// The last checkpoint whose changes the external system holds (its marker); None if none.
    fn delivered(&mut self) -> Result<Option<Epoch>>;

    /// Writes `changes` (a checkpoint's, in order) and the marker `checkpoint` in one
    /// transaction of the external system: both or neither.
    fn deliver(&mut self, checkpoint: Epoch, changes: &[ChangeBatch]) -> Result<()>;
}

/// The columns (indices into `schema`) named by a sink's `primary_key = 'a, b'` option.
pub fn key_columns(names: &str, schema: &datafusion::arrow::datatypes::Schema) -> Result<Vec<usize>> {
    names
        .split(',')
        .map(|name| {
            let name = name.trim();
            schema.index_of(name).map_err(|_| {
                crate::error::WeirError::new(
                    crate::error::SqlState::UNDEFINED_COLUMN,
                    format!("primary_key column \"{name}\" is not in the view"),
                )
            })
        })
        .collect()
}

/// One key's change over a checkpoint: its row before the checkpoint's changes (None: the key
/// did not exist) and after them (None: it is gone).
#[derive(Debug, PartialEq)]
pub struct NetChange<K, R> {
    pub key: K,
    pub before: Option<R>,
    pub after: Option<R>,
}

/// A checkpoint's changes netted per key, for sinks that write by key: each key once, in the
/// order keys first changed. `changes` gives each changed row's key, the row, and whether the
/// row entered; a key whose first change removes a row had that row before.
pub fn net_by_key<K: std::hash::Hash + Eq + Clone, R>(
    changes: impl IntoIterator<Item = (K, R, bool)>,
) -> Vec<NetChange<K, R>> {
    let mut order = Vec::new();
    let mut net: std::collections::HashMap<K, (Option<R>, Option<R>)> = std::collections::HashMap::new();
    for (key, row, entered) in changes {
        match net.get_mut(&key) {
            Some((_, after)) => *after = entered.then_some(row),
            None => {
                order.push(key.clone());
                let (before, after) = if entered { (None, Some(row)) } else { (Some(row), None) };
                net.insert(key, (before, after));
            }
        }
    }
    order
        .into_iter()
        .filter_map(|key| net.remove(&key).map(|(before, after)| NetChange { key, before, after }))
        .collect()
}

/// What a sink is doing, for `weir_catalog.sinks`.
#[derive(Debug, Clone, Default)]
pub struct SinkStatus {
    pub state: String,
    /// The last checkpoint delivered.
    pub delivered: Option<Epoch>,
    /// The last error, while retrying.
    pub error: Option<String>,
}

/// Every running sink's status, by sink id.
pub static STATUS: std::sync::LazyLock<Mutex<std::collections::BTreeMap<u32, (String, SinkStatus)>>> =
    std::sync::LazyLock::new(Default::default);

fn set_status(sink: &Relation, update: impl FnOnce(&mut SinkStatus)) {
    let mut all = STATUS.lock();
    let entry = all.entry(sink.def.id).or_insert_with(|| (sink.def.name.clone(), SinkStatus::default()));
    update(&mut entry.1);
}

/// Forgets a dropped sink's status.
pub fn forget(sink: u32) {
    STATUS.lock().remove(&sink);
}

fn outbox_key(sink: &Relation, checkpoint: Epoch) -> Vec<u8> {
    segment_key(sink.def.id, &checkpoint.to_be_bytes())
}

/// The outbox entries of `sink` up to checkpoint `through`, in order.
fn outbox(store: &dyn StateStore, sink: &Relation, through: Epoch) -> Result<Vec<(Epoch, Vec<ChangeBatch>)>> {
    let prefix = segment_key(sink.def.id, &[]);
    let what = format!("the outbox of sink \"{}\"", sink.def.name);
    let mut entries = Vec::new();
    store.scan_prefix(&prefix, &mut |key, value| {
        let epoch = key
            .get(prefix.len()..)
            .and_then(|k| <[u8; 8]>::try_from(k).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| crate::state::index_codec::corrupt(&what, "a key of the wrong length"))?;
        if epoch > through {
            return Ok(ScanControl::Stop);
        }
        let mut r = IndexReader::new(value, &what)?;
        let changes = (0..r.u64()?).map(|_| ChangeBatch::decode(&mut r, &what)).collect::<Result<Vec<_>>>()?;
        r.finish()?;
        entries.push((epoch, changes));
        Ok(ScanControl::Continue)
    })?;
    Ok(entries)
}

/// How many checkpoints' changes `sink` holds and has not delivered yet (its outbox entries).
pub fn undelivered(store: &dyn StateStore, sink: &Relation) -> Result<usize> {
    let mut count = 0;
    store.scan_prefix(&segment_key(sink.def.id, &[]), &mut |_, _| {
        count += 1;
        Ok(ScanControl::Continue)
    })?;
    Ok(count)
}

/// The job that keeps a sink's outbox: the view's changes, one entry per checkpoint.
pub struct SinkJob {
    pub sink: Arc<Relation>,
    pub input: ChangeReceiver,
    pub store: Arc<dyn StateStore>,
    pub committed: watch::Sender<Epoch>,
    /// Changes since the last checkpoint (a new sink: the view's rows first).
    pub pending: Vec<ChangeBatch>,
}

impl SinkJob {
    pub async fn run(mut self) {
        while let Some((message, _)) = self.input.recv().await {
            match message {
                Message::Data(batch) => self.pending.push(batch),
                Message::Barrier(barrier) => {
                    if barrier.epoch <= *self.committed.borrow() {
                        continue;
                    }
                    if barrier.is_checkpoint() && !self.pending.is_empty() {
                        if let Err(e) = self.put_outbox(barrier.epoch).await {
                            tracing::error!(sink = %self.sink.def.name, "writing the outbox failed: {e}");
                            set_status(&self.sink, |s| s.error = Some(e.message.clone()));
                            continue;
                        }
                    }
                    self.committed.send_replace(barrier.epoch);
                }
                Message::End => {}
            }
        }
        tracing::info!(sink = %self.sink.def.name, "sink stopped");
    }

    async fn put_outbox(&mut self, checkpoint: Epoch) -> Result<()> {
        let mut record = IndexWriter::default();
        record.u64(self.pending.len() as u64);
        for batch in &self.pending {
            batch.encode(&mut record)?;
        }
        let mut wb = WriteBatch { skip_wal: true, ..Default::default() };
        wb.put(outbox_key(&self.sink, checkpoint), record.finish());
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || store.write(wb))
            .await
            .map_err(|e| crate::error::WeirError::internal(e.to_string()))??;
        self.pending.clear();
        Ok(())
    }
}

/// Delivers `sink`'s outbox entries as checkpoints complete (`checkpointed`: the newest epoch
/// whose snapshot is taken; entries already in the store at start were restored from one).
pub async fn deliver(
    sink: Arc<Relation>,
    store: Arc<dyn StateStore>,
    mut writer: Box<dyn SinkWriter>,
    mut checkpointed: watch::Receiver<Epoch>,
    restored: Epoch,
) {
    let name = sink.def.name.clone();
    let mut backoff = Duration::from_millis(200);
    let mut delivered: Option<Option<Epoch>> = None;
    let mut through = restored.max(*checkpointed.borrow());
    set_status(&sink, |s| s.state = "running".into());
    loop {
        let attempt = tokio::task::block_in_place(|| -> Result<()> {
            let marker = match delivered {
                Some(marker) => marker,
                None => *delivered.insert(writer.delivered()?),
            };
            let mut marker = marker;
            let entries = outbox(store.as_ref(), &sink, through)?;
            let pending = crate::metrics::SINK_CHECKPOINTS_PENDING.with_label_values(&[&name]);
            pending.set(entries.iter().filter(|(c, _)| marker.is_none_or(|m| *c > m)).count() as i64);
            for (checkpoint, changes) in entries {
                if marker.is_none_or(|m| checkpoint > m) {
                    crate::fault::point("sink.before_deliver");
                    if let Err(e) = writer.deliver(checkpoint, &changes) {
                        crate::metrics::SINK_DELIVERIES_TOTAL.with_label_values(&[&name, "failed"]).inc();
                        return Err(e);
                    }
                    crate::metrics::SINK_DELIVERIES_TOTAL.with_label_values(&[&name, "committed"]).inc();
                    let rows: usize = changes.iter().map(|c| c.num_rows()).sum();
                    crate::metrics::SINK_ROWS_TOTAL.with_label_values(&[&name]).inc_by(rows as u64);
                    pending.dec();
                    marker = Some(checkpoint);
                    delivered = Some(marker);
                    set_status(&sink, |s| s.delivered = marker);
                    crate::metrics::SINK_CHECKPOINTS_DELIVERED_TOTAL.with_label_values(&[&name]).inc();
                    crate::fault::point("sink.after_commit");
                }
                let mut wb = WriteBatch::default();
                wb.delete(outbox_key(&sink, checkpoint));
                store.write(wb)?;
            }
            Ok(())
        });
        match attempt {
            Ok(()) => {
                backoff = Duration::from_millis(200);
                set_status(&sink, |s| {
                    s.state = "running".into();
                    s.error = None;
                });
                if checkpointed.changed().await.is_err() {
                    return;
                }
                through = *checkpointed.borrow();
            }
            Err(e) => {
                tracing::warn!(sink = %name, "delivery failed, retrying in {backoff:?}: {e}");
                // A writer that failed may have lost its transaction state: ask its marker again.
                delivered = None;
                set_status(&sink, |s| {
                    s.state = "retrying".into();
                    s.error = Some(e.message.clone());
                });
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                through = through.max(*checkpointed.borrow());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_net_to_each_keys_last_in_first_seen_order() {
        let netted = net_by_key([("a", 1, true), ("b", 2, true), ("a", 1, false), ("a", 3, true), ("b", 2, false)]);
        let change = |key, before, after| NetChange { key, before, after };
        assert_eq!(netted, vec![change("a", None, Some(3)), change("b", None, None)]);
        // A key that had a row before: its first change removes it.
        let netted = net_by_key([("c", 5, false), ("c", 6, true), ("d", 7, false)]);
        assert_eq!(netted, vec![change("c", Some(5), Some(6)), change("d", Some(7), None)]);
    }
}
