//! SessionAssign: puts each row into its `SESSION` window — per key, rows less than `gap`
//! apart in event time form one session `[first, last + gap)` — and keeps that assignment right
//! as rows arrive: a row that extends a session or bridges two re-assigns every row of them,
//! emitted as retractions of the old windows and inserts of the new ones, so a downstream
//! aggregate grouped by the session is corrected like any other change.
//!
//! State: per key, the rows of its sessions that are not final yet, keyed
//! `[key][event time][row] -> multiplicity` (one range read per key). A row is late when its
//! event time is below the watermark minus the allowed lateness: it could only join a session
//! that may already be final (handled by [`LateRows`], with its would-be window `[t, t + gap)`).
//! A session is final once the watermark passes its end plus the allowed lateness (no row on
//! time can reach it any more); its rows then leave the state. Keys are indexed in memory by
//! the end of their earliest session: the index is the record the assigner keeps with each
//! checkpoint ([`Operator::save_record`]).

use std::collections::BTreeMap;

use crate::types::hash::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};

use super::lateness::LateRows;
use super::operator::Operator;
use crate::error::Result;
use crate::state::expiry::{Expiring, Expiry};
use crate::state::keyed::{Flush, KeyedState};
use crate::state::keys::{KeyRef, StateKey};
use crate::state::keys_by_time::KeysByTime;
use crate::state::record::{RecordReader, RecordWriter};
use crate::state::store::WriteBatch;
use crate::state::value::decode_count;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::window::{from_nanos, time_from_key, time_key, to_nanos, SessionSpec};
use crate::types::{ChangeBatch, Op};

pub struct SessionAssign {
    spec: SessionSpec,
    /// Input columns, `window_start`, `window_end`.
    schema: SchemaRef,
    /// How long after its end a session still takes rows, and its state is kept.
    expiry: Expiry,
    late: LateRows,
    /// Encodes the key columns (None without keys: one key, empty).
    key_codec: Option<RowConverter>,
    row_codec: RowConverter,
    state: KeyedState,
    /// Keys by the end of their earliest session still in state.
    by_end: KeysByTime,
    description: String,
}

/// One key's rows: (event time, row) -> multiplicity.
type Rows = BTreeMap<(i64, Vec<u8>), i64>;

impl SessionAssign {
    pub fn new(
        spec: SessionSpec,
        schema: SchemaRef,
        lateness: i64,
        keep_late: bool,
        state: KeyedState,
        view: impl Into<ViewStatus>,
    ) -> Result<SessionAssign> {
        let n = schema.fields().len() - 2;
        let input: Vec<SortField> =
            schema.fields()[..n].iter().map(|f| SortField::new(f.data_type().clone())).collect();
        let key_codec = if spec.keys.is_empty() {
            None
        } else {
            Some(RowConverter::new(spec.keys.iter().map(|&k| input[k].clone()).collect())?)
        };
        let late = LateRows::new(keep_late, view);
        let description = format!(
            "SessionAssign: {} on {}{}",
            spec.describe(&schema),
            schema.field(spec.time_column).name(),
            if lateness > 0 { format!(", lateness {}s", lateness as f64 / 1e9) } else { String::new() }
        );
        Ok(SessionAssign {
            row_codec: RowConverter::new(input)?,
            spec,
            schema,
            expiry: Expiry::new(lateness),
            late,
            key_codec,
            state,
            by_end: KeysByTime::default(),
            description,
        })
    }

    /// `rows` (input columns) with windows `[start, end)`.
    fn with_windows(&self, rows: RecordBatch, starts: Vec<Option<i64>>, ends: Vec<Option<i64>>) -> Result<RecordBatch> {
        let time_type = self.schema.field(self.spec.time_column).data_type().clone();
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        columns.push(from_nanos(starts, &time_type)?);
        columns.push(from_nanos(ends, &time_type)?);
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    /// `batch`'s rows, at event times `times`, each with its own would-be window
    /// `[t, t + gap)`: how late rows are recorded and kept.
    fn own_windows(&self, batch: &ChangeBatch, times: &[i64]) -> Result<ChangeBatch> {
        let data = self.with_windows(
            batch.data.clone(),
            times.iter().map(|&t| Some(t)).collect(),
            times.iter().map(|&t| Some(t.saturating_add(self.spec.gap))).collect(),
        )?;
        Ok(batch.with_data(data))
    }

    fn decode(&self, rows: &[&[u8]]) -> Result<RecordBatch> {
        let parser = self.row_codec.parser();
        let columns = self.row_codec.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        let n = self.schema.fields().len() - 2;
        let input = Arc::new(datafusion::arrow::datatypes::Schema::new(self.schema.fields()[..n].to_vec()));
        Ok(RecordBatch::try_new(input, columns)?)
    }

    fn load(&self, key: &[u8]) -> Result<Rows> {
        let mut rows = Rows::new();
        for (k, v) in self.state.scan_prefix(KeyRef::whole(key))? {
            let rest = &k[key.len()..];
            let count = decode_count(&v)?;
            rows.insert((time_from_key(rest), rest[8..].to_vec()), count);
        }
        Ok(rows)
    }

    fn sessions(&self, rows: &Rows) -> Vec<(i64, i64)> {
        let mut times: Vec<i64> = rows.keys().map(|(t, _)| *t).collect();
        times.dedup();
        self.spec.sessions(&times)
    }

    fn reindex(&mut self, key: &[u8], earliest: Option<i64>) {
        self.by_end.set(key, earliest);
    }

    fn state_key(key: &[u8], t: i64, row: &[u8]) -> StateKey {
        StateKey::under(key, 8 + row.len()).then(&time_key(t)).then(row)
    }
}

impl Operator for SessionAssign {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let times = to_nanos(batch.data.column(self.spec.time_column))?;
        // Rows without a time have no session.
        let batch = if times.null_count() == 0 {
            batch
        } else {
            let with_time: Vec<u32> = (0..batch.num_rows() as u32).filter(|&i| times.is_valid(i as usize)).collect();
            batch.take(&with_time)?
        };
        let times: Vec<i64> = times.iter().flatten().collect();
        let keep = match self.expiry.final_through(clock) {
            None => None,
            Some(final_through) => {
                let (late, on_time): (Vec<u32>, Vec<u32>) =
                    (0..batch.num_rows() as u32).partition(|&i| times[i as usize] < final_through);
                if late.is_empty() {
                    None
                } else {
                    let late_times: Vec<i64> = late.iter().map(|&i| times[i as usize]).collect();
                    let own = self.own_windows(&batch.take(&late)?, &late_times)?;
                    self.late.divert(own)?;
                    Some(on_time)
                }
            }
        };
        let keep = keep.unwrap_or_else(|| (0..batch.num_rows() as u32).collect());
        let key_columns: Vec<ArrayRef> = self.spec.keys.iter().map(|&k| Arc::clone(batch.data.column(k))).collect();
        let keys = match &self.key_codec {
            Some(codec) => Some(codec.convert_columns(&key_columns)?),
            None => None,
        };
        let rows = self.row_codec.convert_columns(batch.data.columns())?;
        let mut changes_of: HashMap<Vec<u8>, Vec<u32>> = HashMap::default();
        for &i in &keep {
            let key = keys.as_ref().map(|k| k.row(i as usize).as_ref().to_vec()).unwrap_or_default();
            changes_of.entry(key).or_default().push(i);
        }
        // Output: (row bytes, start, end, op).
        let mut out: Vec<(Vec<u8>, i64, i64, Op)> = Vec::new();
        for (key, changed) in changes_of {
            let before = self.load(&key)?;
            let old_sessions = self.sessions(&before);
            let mut after = before.clone();
            for &i in &changed {
                let (t, row) = (times[i as usize], rows.row(i as usize).as_ref().to_vec());
                let sign = batch.ops[i as usize].sign();
                let n = after.entry((t, row.clone())).or_insert(0);
                *n += sign;
                let n = *n;
                let state_key = Self::state_key(&key, t, &row);
                if n == 0 {
                    after.remove(&(t, row));
                    self.state.delete(state_key.key());
                } else {
                    self.state.put(state_key.key(), crate::state::value::encode_count(n));
                }
            }
            let new_sessions = self.sessions(&after);
            let touched: std::collections::BTreeSet<&(i64, Vec<u8>)> = before.keys().chain(after.keys()).collect();
            for entry in touched {
                let old = before.get(entry).copied().unwrap_or(0);
                let new = after.get(entry).copied().unwrap_or(0);
                let old_window = (old != 0).then(|| SessionSpec::session_of(&old_sessions, entry.0));
                let new_window = (new != 0).then(|| SessionSpec::session_of(&new_sessions, entry.0));
                let mut emit = |window: (i64, i64), n: i64, op: Op| {
                    for _ in 0..n {
                        out.push((entry.1.clone(), window.0, window.1, op));
                    }
                };
                match (old_window, new_window) {
                    (Some(o), Some(w)) if o == w => {
                        if new > old {
                            emit(w, new - old, Op::Insert);
                        } else {
                            emit(w, old - new, Op::Delete);
                        }
                    }
                    (o, w) => {
                        if let Some(o) = o {
                            emit(o, old, Op::Delete);
                        }
                        if let Some(w) = w {
                            emit(w, new, Op::Insert);
                        }
                    }
                }
            }
            self.reindex(&key, new_sessions.first().map(|s| s.1));
        }
        if out.is_empty() {
            return Ok(vec![]);
        }
        let row_refs: Vec<&[u8]> = out.iter().map(|o| o.0.as_slice()).collect();
        let data = self.with_windows(
            self.decode(&row_refs)?,
            out.iter().map(|o| Some(o.1)).collect(),
            out.iter().map(|o| Some(o.2)).collect(),
        )?;
        Ok(vec![ChangeBatch::new(data, out.iter().map(|o| o.3).collect())])
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        // Sessions final at this watermark leave the state.
        let Some(final_through) = self.expiry.final_through(clock) else { return Ok(vec![]) };
        let bound = final_through.saturating_add(1);
        for key in self.by_end.expire_through(final_through)?.into_iter().flat_map(|(_, keys)| keys) {
            let rows = self.load(&key)?;
            let sessions = self.sessions(&rows);
            for (t, row) in rows.keys() {
                if SessionSpec::session_of(&sessions, *t).1 < bound {
                    self.state.delete(Self::state_key(&key, *t, row).key());
                }
            }
            let remaining = sessions.iter().find(|s| s.1 >= bound).map(|s| s.1);
            self.reindex(&key, remaining);
        }
        Ok(vec![])
    }

    /// The keys by the end of their earliest session.
    fn save_record(&self) -> Option<Vec<u8>> {
        let mut record = RecordWriter::default();
        self.by_end.write(&mut record);
        Some(record.finish())
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        let mut record = RecordReader::new(record, &self.description)?;
        self.by_end = KeysByTime::read(&mut record)?;
        record.finish()
    }

    fn take_late_rows(&mut self) -> Vec<RecordBatch> {
        self.late.take()
    }

    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.state.flush(wb, flush);
    }

    fn open_windows(&self) -> usize {
        self.by_end.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::operator::testing::{assert_restore_continues, Event::Changes, Event::Watermark};
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use crate::types::window::Windowing;

    const S: i64 = 1_000_000_000;

    /// Sessions with a 10 s gap per `c0` over (key, time): columns `I S`.
    fn sessions(store: &Arc<dyn StateStore>, lateness: i64) -> SessionAssign {
        let spec = SessionSpec::new(10 * S, 1, vec![0]).unwrap();
        let schema = Windowing::Session(spec.clone()).output_schema(&from_pretty("I S\n").schema());
        let state = KeyedState::new(1, Arc::clone(store), 4).write_back(None).unwrap();
        SessionAssign::new(spec, schema, lateness, true, state, "test").unwrap()
    }

    /// Restored from a checkpoint, the assigner re-assigns the rows stored before the restart as
    /// sessions grow, merge and shrink, judges rows late by the watermark pushed again, and
    /// deletes the sessions that become final after the restart.
    #[test]
    fn a_restored_session_assigner_continues_like_one_that_never_stopped() {
        for lateness in [0, 5 * S] {
            assert_restore_continues(
                &|store| Box::new(sessions(store, lateness)),
                &[
                    &[Changes(0, "I S\n+ 1 0\n+ 2 5\n+ 1 3")],
                    &[Changes(0, "I S\n+ 1 12\n+ 1 28"), Watermark(10 * S)],
                    &[Changes(0, "I S\n- 1 3\n+ 1 20\n+ 2 40"), Watermark(14 * S)],
                    &[Changes(0, "I S\n+ 3 28"), Watermark(30 * S)],
                    &[Changes(0, "I S\n+ 1 22\n+ 1 45\n+ 2 8")],
                    &[Changes(0, "I S\n- 1 45\n+ 3 29"), Watermark(60 * S)],
                ],
            );
        }
    }
}
