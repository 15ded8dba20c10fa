//! Equi-join of two changelogs: inner, left, right and full outer, semi and anti, each with an
//! optional residual condition besides the key equalities. Without any equality (a scalar
//! subquery's row joined to every row, `a.x < b.y`) the planner gives both sides one constant
//! key, in one shard.
//!
//! A change on one side is joined with the other side's current rows and emitted with the
//! change's op, so `Δ(L ⋈ R) = ΔL ⋈ R + L ⋈ ΔR` holds change by change. A row's *degree* is
//! how many partners it has (rows of the other side with its key that pass the residual), and
//! what a side's rows show alone follows it ([`Alone`]): an outer join's preserved side shows a
//! row NULL-padded while its degree is 0, an anti join's side shows it as it is while its degree
//! is 0, a semi join's side shows it once while its degree is above 0. So when a row's first
//! partner arrives its padded (or anti) row is retracted, or its semi row inserted, and when its
//! last partner leaves that is undone. Without a residual a row's degree is the other side's
//! row count for its key (`key ++ 0`); with one, a side whose rows show alone keeps each row's
//! degree (`key ++ 2 ++ row`), as RisingWave's degree tables do.
//! Rows with a NULL key never match, as in SQL, unless the join compares its keys with
//! `IS NOT DISTINCT FROM` ([`HashJoinConfig::nulls_match`]): then NULL keys match each other.
//! (`NOT IN`'s NULL rules are the planner's: an anti join and a check of the other side.)
//!
//! Each side's state is a [`KeyedState`] in the store (bounded cache), distributed by join key:
//! `key ++ 0` holds how many rows the side has for the key, `key ++ 1 ++ row` each row's
//! multiplicity (rows as arrow-row bytes), so a key's rows are one range read. A side whose
//! input only ever inserts ([`HashJoinConfig::append_only_inputs`]) stores each row once more
//! as `key ++ 1 ++ n -> row` (n numbering its rows, so a new row sorts last among its key's,
//! and the state key stays short: compared in a few bytes, held inline), so adding a row
//! reads nothing; in an inner join (no padding to keep right) it keeps no count either, and
//! its rows are looked up directly. Keys with few rows are also kept in a bounded cache, updated
//! with each change to them.
//!
//! Joined on a window bound of both sides (`l.window_start = r.window_start`), the join knows
//! when each key's window closes ([`JoinWindow`]); once the view's watermark has passed that
//! close plus the allowed lateness, no row for the key can come any more (it would be late),
//! and the key's state on both sides is deleted. The keys are indexed by close time in memory.
//!
//! With a residual bound on the two sides' times ([`JoinInterval`]: q7's
//! `b.date_time > b1.window_end - INTERVAL '10' SECOND AND b.date_time <= b1.window_end`),
//! where the other side's time is a window bound, a row is deleted from the state once the
//! watermark shows that every row still to come on the other side is in a window too late for
//! it: no future partner could pass the bound. Only rows that can never be in the output again
//! go, so the results are the same as without it (a late row still meets every row kept). The
//! rows are indexed by time in memory.
//!
//! Under a view's state TTL ([`HashJoin::with_state_ttl`], `state::idle_keys`), a join key
//! whose rows on one side no change touched for the TTL of epoch time leaves that side: its
//! rows are retracted through the join as deletions would be.
//!
//! What the join keeps in memory besides its state is its checkpoint record
//! ([`Operator::save_record`]): the keys by close time, each side's next row number and its rows
//! by time. The rows cache is only a cache, and starts empty after a restore.
//!
//! A side whose rows expire by such a bound and only ever arrive, in an inner join with no
//! window key (q7's bids), keeps its rows in memory instead ([`ExpiringRows`], ADR 22): each
//! row costs no store write or delete of its own, and a checkpoint writes the rows that arrived
//! since the last one as a few large values. Its part of the record is then that component's.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::logical_expr::JoinType;
use datafusion::physical_expr::PhysicalExpr;

use super::eval::evaluate;
use super::filter::Filter;
use super::operator::Operator;
use crate::error::{Result, WeirError};
use crate::state::entries_by_time::EntriesByTime;
use crate::state::expiring_rows::ExpiringRows;
use crate::state::expiry::{Expiring, Expiry};
use crate::state::idle_keys::IdleKeys;
use crate::state::keyed::{Flush, KeyedState};
use crate::state::keys::{KeyRef, StateKey};
use crate::state::keys_by_time::KeysByTime;
use crate::state::record::{corrupt, RecordReader, RecordWriter};
use crate::state::store::WriteBatch;
use crate::state::value::{decode_count, encode_count};
use crate::state::watermark_pace::WatermarkPace;
use crate::state::MEMORY_LIMIT_BYTES;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::hash::{HashMap, HashSet};
use crate::types::window::{close_times, to_nanos, TimeColumn};
use crate::types::{ChangeBatch, Op};

/// A join on a window bound: which key position, and when its window closes.
#[derive(Debug, Clone, Copy)]
pub struct JoinWindow {
    pub key_index: usize,
    pub column: TimeColumn,
}

/// A bound on the sides' times from the residual condition: `left - right` is within
/// `[lo, hi]` (either end may be open; a strict bound is taken as inclusive, which keeps a row
/// at most one nanosecond longer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JoinInterval {
    /// Each side's time column, in its input.
    pub columns: [usize; 2],
    /// Each side's column as a window bound, if it is one.
    pub windows: [Option<TimeColumn>; 2],
    pub lo: Option<i64>,
    pub hi: Option<i64>,
}

impl JoinInterval {
    /// Whether side `side`'s rows can expire: the other side's time is a window bound, and the
    /// bound limits this side's time from below (left) or above (right).
    pub fn expires(&self, side: usize) -> bool {
        self.windows[1 - side].is_some() && [self.lo, self.hi][side].is_some()
    }

    /// Side `side`'s rows with a time at or before this can never pass the bound with a row
    /// still to come on the other side, when windows closing through `final_through` are final
    /// ([`Expiry::final_through`]); None when that side's rows never expire.
    fn expired_through(&self, side: usize, final_through: i64) -> Option<i64> {
        // The other side's rows still to come are in windows not final yet (a row for a final
        // window is late): their time is at least `floor`.
        let close_offset = self.windows[1 - side]?.close_offset;
        let floor = final_through.saturating_add(1).saturating_sub(close_offset);
        let lowest_kept = match side {
            // left >= right + lo >= floor + lo
            0 => floor.saturating_add(self.lo?),
            // right >= left - hi >= floor - hi
            _ => floor.saturating_sub(self.hi?),
        };
        Some(lowest_kept.saturating_sub(1))
    }
}

/// One input of the join: its columns and its key expressions.
pub type JoinInput = (SchemaRef, Vec<Arc<dyn PhysicalExpr>>);

/// What a [`HashJoin`] computes and what it may assume of its inputs, all given at once (by
/// the stream plan's join node).
#[derive(Clone)]
pub struct HashJoinConfig {
    pub join_type: JoinType,
    /// The left input's keys equal the right input's, position by position.
    pub left: JoinInput,
    pub right: JoinInput,
    pub schema: SchemaRef,
    /// A condition on joined rows besides the key equalities, over the left input's columns
    /// then the right's (whatever the join outputs).
    pub residual: Option<Arc<dyn PhysicalExpr>>,
    /// A NULL key equals a NULL key (`IS NOT DISTINCT FROM`); else it matches nothing.
    pub nulls_match: bool,
    /// Sides whose rows are judged late by their time in [`HashJoinConfig::interval`] (a
    /// watermarked column, not a window bound, whose late rows a window assigner would have
    /// dropped): a row at or behind the final time is dropped and counted, as a window drops
    /// it, so that the other side's rows it could have met may be freed.
    pub late_sides: [bool; 2],
    /// Which inputs only ever insert rows (left, right).
    pub append_only_inputs: [bool; 2],
    /// Joined on a window bound: state is freed as windows become final.
    pub window: Option<JoinWindow>,
    /// A bound on the sides' times, under which rows that can no longer match are deleted as
    /// the watermark moves (an inner join's append-only side without a window key keeps its
    /// rows in memory).
    pub interval: Option<JoinInterval>,
    /// How long after its close a window still takes rows (nanoseconds): when the window's
    /// keys and the interval's rows are final.
    pub lateness: i64,
}

/// What a side's rows show alone, without a partner to pair with, by their degree (how many
/// partners they have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alone {
    /// Nothing: an inner join's sides, a semi or anti join's other side.
    Hidden,
    /// NULL-padded while they have no partner: an outer join's preserved side.
    Padded,
    /// As they are while they have no partner: an anti join's side.
    Unmatched,
    /// As they are, once, while they have a partner: a semi join's side.
    Matched,
}

impl Alone {
    /// Whether a row with `degree` partners shows alone.
    fn shows(self, degree: i64) -> bool {
        match self {
            Alone::Hidden => false,
            Alone::Padded | Alone::Unmatched => degree == 0,
            Alone::Matched => degree > 0,
        }
    }
}

/// What a `join_type` join shows of each side's rows alone (left, right), and whether it outputs
/// the pairs of matched rows; an error for a join this operator does not compute. The planner
/// asks first.
pub fn shape(join_type: JoinType) -> Result<([Alone; 2], bool)> {
    use Alone::*;
    Ok(match join_type {
        JoinType::Inner => ([Hidden, Hidden], true),
        JoinType::Left => ([Padded, Hidden], true),
        JoinType::Right => ([Hidden, Padded], true),
        JoinType::Full => ([Padded, Padded], true),
        JoinType::LeftSemi => ([Matched, Hidden], false),
        JoinType::RightSemi => ([Hidden, Matched], false),
        JoinType::LeftAnti => ([Unmatched, Hidden], false),
        JoinType::RightAnti => ([Hidden, Unmatched], false),
        other => {
            return Err(WeirError::unsupported(format!("{other} JOIN is not supported in a materialized view yet")))
        }
    })
}

impl HashJoinConfig {
    /// A join of inputs that may retract, without a window or a time bound.
    pub fn new(join_type: JoinType, left: JoinInput, right: JoinInput, schema: SchemaRef) -> HashJoinConfig {
        HashJoinConfig {
            join_type,
            left,
            right,
            schema,
            residual: None,
            late_sides: [false, false],
            nulls_match: false,
            append_only_inputs: [false, false],
            window: None,
            interval: None,
            lateness: 0,
        }
    }
}

struct Side {
    /// The input's schema.
    input: SchemaRef,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    key_codec: RowConverter,
    row_codec: RowConverter,
    /// The encoding of a row of NULLs, for padding.
    null_row: Vec<u8>,
    state: KeyedState,
    /// What this side's rows show alone (padded for LEFT's left side).
    alone: Alone,
    /// Keeps each row's degree (`key ++ 2 ++ row`): its rows show alone and the join has a
    /// residual, so the other side's count for the key is not their degree.
    degrees: bool,
    /// The rows of join keys read recently, kept up to date with this side's changes, so a key
    /// the other side hits often (a hot auction) is one range read, not one per hit. Keys with
    /// more than [`CACHED_ROWS_PER_KEY`] rows are not kept; at most the state's cache capacity
    /// in rows and keys is, then the cache starts over.
    rows_cache: HashMap<Vec<u8>, Vec<(Vec<u8>, i64)>>,
    cached_rows: usize,
    /// Rows only ever arrive: each is stored under its own number, without reading a count.
    append_only: bool,
    /// The number of this side's next row (an append-only side's); never one a stored row has.
    next_row: u64,
    /// Keeps `key ++ 0`, its row count per key (all but an inner join's append-only sides).
    counted: bool,
    /// With a [`JoinInterval`] under which this side's rows expire: its time column, and how
    /// its rows are found by time.
    timed: Option<(usize, TimedRows)>,
    /// The key range of segments this side kept before it gave its rows to its table, to
    /// delete at the next flush.
    retired: Option<(Vec<u8>, Vec<u8>)>,
    /// Past this many bytes held in memory the rows go to the table ([`MEMORY_LIMIT_BYTES`]).
    memory_limit: usize,
}

/// How a side whose rows expire by time keeps them.
enum TimedRows {
    /// In its state table, with the state keys of its rows by their time (`key_len` with each),
    /// to delete them by.
    Stored(StateKeysByTime),
    /// In memory, checkpointed in segments: an inner join's append-only side, until it holds
    /// [`MEMORY_LIMIT_BYTES`].
    InMemory(ExpiringRows),
}

/// How a side's part of the join's record holds its rows by time (format 2 on; format 1 has
/// only the first).
const ROWS_BY_TIME: u64 = 0;
const SEGMENTS: u64 = 1;

/// A checkpoint of a side with its rows in its table (a build before format 2 kept them there,
/// or the side had passed its memory limit) moves them into memory at restore if there are at
/// most this many.
const ROWS_MOVED_INTO_MEMORY: u64 = 100_000;

/// State keys of rows (each with its join key's length), by the rows' time ([`EntriesByTime`]:
/// a checkpoint copies each time's list instead of visiting every row, expiring them reads them
/// in order, and a row costs no allocation of its own).
#[derive(Default)]
struct StateKeysByTime(EntriesByTime);

impl StateKeysByTime {
    fn add(&mut self, time: i64, stored: KeyRef<'_>) {
        self.0.push(time).bytes(stored.bytes()).u64(stored.distribution_len() as u64);
    }

    /// Takes out the rows whose time is at or before `through`, in time order.
    fn expire_through(&mut self, through: i64) -> StateKeysByTime {
        StateKeysByTime(self.0.expire_through(through).expect("an index in memory"))
    }

    /// Each row's time, state key and join key length, in time order.
    fn rows(&self) -> impl Iterator<Item = Result<(i64, KeyRef<'_>)>> {
        self.0.lists("a join's rows by time").flat_map(|(time, count, mut reader)| {
            (0..count).map(move |_| {
                let stored = reader.slice()?;
                Ok((time, KeyRef::with_distribution(stored, reader.u64()? as usize)))
            })
        })
    }

    /// Writes the rows into a checkpoint record: how many times, then per time the time, how
    /// many rows and each row's state key and join key length.
    fn write(&self, record: &mut RecordWriter) {
        self.0.write(record)
    }

    /// Reads what [`StateKeysByTime::write`] wrote; `what` names the join, for errors.
    fn read(record: &mut RecordReader, what: &str) -> Result<StateKeysByTime> {
        let mut by_time = StateKeysByTime::default();
        for _ in 0..record.u64()? {
            let time = record.i64()?;
            for _ in 0..record.u64()? {
                let stored = record.slice()?;
                match usize::try_from(record.u64()?) {
                    Ok(key_len) if key_len <= stored.len() => {
                        by_time.add(time, KeyRef::with_distribution(stored, key_len))
                    }
                    _ => return Err(corrupt(what, "a join key longer than its row's state key")),
                }
            }
        }
        Ok(by_time)
    }
}

/// Join keys with more rows than this are read from the state each time.
const CACHED_ROWS_PER_KEY: usize = 64;

fn count_of(bytes: Option<Vec<u8>>) -> Result<i64> {
    bytes.map(|b| decode_count(&b)).unwrap_or(Ok(0))
}

impl Side {
    fn new((input, keys): JoinInput, state: KeyedState, alone: Alone) -> Result<Side> {
        let key_fields = keys.iter().map(|k| Ok(SortField::new(k.data_type(&input)?))).collect::<Result<Vec<_>>>()?;
        let row_codec = crate::state::table::row_codec(&input)?;
        let nulls: Vec<ArrayRef> = input.fields().iter().map(|f| new_null_array(f.data_type(), 1)).collect();
        let null_row = row_codec.convert_columns(&nulls)?.row(0).as_ref().to_vec();
        Ok(Side {
            input,
            keys,
            key_codec: RowConverter::new(key_fields)?,
            row_codec,
            null_row,
            state,
            alone,
            degrees: false,
            rows_cache: HashMap::default(),
            cached_rows: 0,
            append_only: false,
            next_row: 0,
            counted: true,
            timed: None,
            retired: None,
            memory_limit: MEMORY_LIMIT_BYTES,
        })
    }

    fn tagged(key: &[u8], tag: u8, rest: &[u8]) -> StateKey {
        StateKey::under(key, 1 + rest.len()).then(&[tag]).then(rest)
    }

    /// How many rows this side has with join key `key` (a counted side).
    fn partners(&mut self, key: &[u8]) -> Result<i64> {
        count_of(self.state.get(Self::tagged(key, 0, &[]).key())?)
    }

    /// This side's rows with join key `key`, with multiplicities; a counted side reads its
    /// count first, to skip the range read for a key it has no rows for.
    fn partner_rows(&mut self, key: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        if self.counted && self.partners(key)? == 0 {
            return Ok(vec![]);
        }
        self.matches(key)
    }

    /// This side's rows with join key `key`, with multiplicities.
    fn matches(&mut self, key: &[u8]) -> Result<Vec<(Vec<u8>, i64)>> {
        if let Some((_, TimedRows::InMemory(rows))) = &self.timed {
            return Ok(rows.rows(key));
        }
        if let Some(rows) = self.rows_cache.get(key) {
            return Ok(rows.clone());
        }
        let prefix = Self::tagged(key, 1, &[]);
        let rows = self
            .state
            .scan_prefix(prefix.key())?
            .into_iter()
            .map(|(k, v)| match self.append_only {
                // `key ++ 1 ++ n -> row`, once.
                true => Ok((v, 1)),
                false => Ok((k[prefix.bytes().len()..].to_vec(), count_of(Some(v))?)),
            })
            .collect::<Result<Vec<_>>>()?;
        if rows.len() <= CACHED_ROWS_PER_KEY {
            // Each key counts as a row too: a key with no rows (a probe that found nothing)
            // still takes memory.
            if self.cached_rows + self.rows_cache.len() + rows.len() + 1 > self.state.capacity() {
                self.rows_cache.clear();
                self.cached_rows = 0;
            }
            self.cached_rows += rows.len();
            self.rows_cache.insert(key.to_vec(), rows.clone());
        }
        Ok(rows)
    }

    /// Adds (`sign` 1) or removes (`sign` -1) one row with join key `key`, `degree` partners
    /// and, if this side's rows expire, time `time` (None: NULL, which never passes the time
    /// bound, so a row kept in memory is not kept at all).
    fn update(&mut self, key: &[u8], row: &[u8], sign: i64, degree: i64, time: Option<i64>) -> Result<()> {
        if self.append_only && sign < 0 {
            return Err(WeirError::internal("a join input derived as append-only retracted a row"));
        }
        if let Some((_, TimedRows::InMemory(rows))) = &mut self.timed {
            if let Some(time) = time {
                rows.add(time, key, row);
            }
            if rows.bytes_held() > self.memory_limit {
                self.rows_to_table();
            }
            return Ok(());
        }
        let stored = if self.append_only {
            self.put_numbered(key, row.to_vec())
        } else {
            let stored = Self::tagged(key, 1, row);
            let (before, after) = self.state.add_count(stored.key(), sign)?;
            // Every copy of a row has the same partners: its degree is kept while it is there.
            if self.degrees && (before == 0) != (after == 0) {
                let degree_key = Self::tagged(key, 2, row);
                match after == 0 || degree == 0 {
                    true => self.state.delete(degree_key.key()),
                    false => self.state.put(degree_key.key(), encode_count(degree)),
                }
            }
            stored
        };
        if self.counted {
            self.state.add_count(Self::tagged(key, 0, &[]).key(), sign)?;
        }
        if let Some(rows) = self.rows_cache.get_mut(key) {
            match rows.iter().position(|(r, _)| r == row) {
                Some(i) => {
                    rows[i].1 += sign;
                    if rows[i].1 == 0 {
                        rows.remove(i);
                        self.cached_rows -= 1;
                    }
                }
                None => {
                    rows.push((row.to_vec(), sign));
                    self.cached_rows += 1;
                }
            }
            if rows.len() > CACHED_ROWS_PER_KEY {
                self.forget(key);
            }
        }
        if let (Some((_, TimedRows::Stored(by_time))), Some(time), true) = (&mut self.timed, time, sign > 0) {
            by_time.add(time, stored.key());
        }
        Ok(())
    }

    /// Adds `delta` to the degree of this side's row `row` (key `key`); returns it before and
    /// after.
    fn add_degree(&mut self, key: &[u8], row: &[u8], delta: i64) -> Result<(i64, i64)> {
        self.state.add_count(Self::tagged(key, 2, row).key(), delta)
    }

    /// Gives the rows this side keeps in memory to its state table, numbered as an append-only
    /// side's, with their rows by time; its stored segments go at the next flush.
    fn rows_to_table(&mut self) {
        let Some((column, TimedRows::InMemory(rows))) = self.timed.take() else { return };
        self.retired = Some(rows.stored_range());
        let mut by_time = StateKeysByTime::default();
        for (time, key, row) in rows.into_live_rows() {
            let numbered = self.put_numbered(&key, row);
            by_time.add(time, numbered.key());
        }
        self.timed = Some((column, TimedRows::Stored(by_time)));
    }

    /// Stores an append-only side's row under its key and the side's next row number; returns
    /// the state key.
    fn put_numbered(&mut self, key: &[u8], row: Vec<u8>) -> StateKey {
        let numbered = Self::tagged(key, 1, &self.next_row.to_be_bytes());
        self.next_row += 1;
        self.state.put_new(numbered.key(), row);
        numbered
    }

    /// Deletes this side's rows whose time is at or before `through` (see [`Side::timed`]).
    /// `present`: each is certainly still stored, once (an append-only side with nothing else
    /// deleting).
    fn expire_through(&mut self, through: i64, present: bool) -> Result<()> {
        let expired = match &mut self.timed {
            None => return Ok(()),
            Some((_, TimedRows::InMemory(rows))) => return rows.expire_through(through),
            Some((_, TimedRows::Stored(by_time))) => by_time.expire_through(through),
        };
        for row in expired.rows() {
            let (_, stored) = row?;
            let count = match (present, self.append_only) {
                (true, _) => 1,
                (false, true) => self.state.get(stored)?.is_some() as i64,
                (false, false) => count_of(self.state.get(stored)?)?,
            };
            if count == 0 {
                continue;
            }
            self.state.delete(stored);
            let key = stored.distribution();
            if self.counted {
                self.state.add_count(Self::tagged(key, 0, &[]).key(), -count)?;
            }
            self.forget(key);
        }
        Ok(())
    }

    /// Drops `key` from the rows cache.
    fn forget(&mut self, key: &[u8]) {
        if let Some(rows) = self.rows_cache.remove(key) {
            self.cached_rows -= rows.len();
        }
    }

    /// Writes this side's state that is not in its table into `wb`: its writes, and at a
    /// checkpoint the rows it keeps in memory.
    /// Puts the side's state changes into `wb`; keys `expires_first` names stay out of
    /// settling ([`KeyedState::flush_keeping`]).
    fn flush(&mut self, wb: &mut WriteBatch, flush: Flush, expires_first: &dyn Fn(&[u8]) -> bool) {
        if let Some((start, end)) = self.retired.take() {
            wb.delete_range(start, end);
        }
        self.state.flush_keeping(wb, flush, expires_first);
        if let Some((_, TimedRows::InMemory(rows))) = &mut self.timed {
            rows.flush(wb, flush);
        }
    }

    /// Adds this side's part of the join's checkpoint record: its next row number, then how
    /// it holds its rows and its rows by time (none when they do not expire), or what its rows
    /// in memory need.
    fn save_record(&self, record: &mut RecordWriter) {
        record.u64(self.next_row);
        match &self.timed {
            Some((_, TimedRows::Stored(rows))) => rows.write(record.u64(ROWS_BY_TIME)),
            Some((_, TimedRows::InMemory(rows))) => rows.save(record.u64(SEGMENTS)),
            None => StateKeysByTime::default().write(record.u64(ROWS_BY_TIME)),
        }
    }

    /// Reads back what [`Side::save_record`] wrote; `what` names the join, for errors. A side
    /// that keeps its rows in memory may find them in its table (a record of format 1, or one
    /// written after the side passed its memory limit): up to [`ROWS_MOVED_INTO_MEMORY`] move
    /// into memory, and leave the table at the next flush; more stay in the table.
    fn restore_record(&mut self, record: &mut RecordReader, what: &str) -> Result<()> {
        self.next_row = record.u64()?;
        let kind = if record.format() >= 2 { record.u64()? } else { ROWS_BY_TIME };
        if kind == SEGMENTS {
            return match &mut self.timed {
                Some((_, TimedRows::InMemory(rows))) => rows.restore(record),
                _ => Err(corrupt(what, "rows in memory segments for a side that keeps them in its table")),
            };
        }
        if kind != ROWS_BY_TIME {
            return Err(corrupt(what, &format!("a join side's rows held in an unknown way ({kind})")));
        }
        let by_time = StateKeysByTime::read(record, what)?;
        match &mut self.timed {
            Some((_, TimedRows::Stored(stored))) => *stored = by_time,
            Some((column, TimedRows::InMemory(_))) if by_time.0.len() > ROWS_MOVED_INTO_MEMORY => {
                self.timed = Some((*column, TimedRows::Stored(by_time)));
            }
            Some((_, TimedRows::InMemory(kept))) => {
                for row in by_time.rows() {
                    let (time, stored) = row?;
                    let Some(row) = self.state.get(stored)? else { continue };
                    self.state.delete(stored);
                    kept.add(time, stored.distribution(), &row);
                }
            }
            None if by_time.0.is_empty() => {}
            None => return Err(corrupt(what, "rows by time for a side whose rows do not expire")),
        }
        Ok(())
    }
}

/// One output row: each side's row bytes, and its op.
type Pair = (Vec<u8>, Vec<u8>, Op);

pub struct HashJoin {
    sides: [Side; 2],
    join_type: JoinType,
    /// Outputs the pairs of matched rows (not a semi or anti join).
    pairs: bool,
    /// The side whose rows alone are the output (a semi or anti join's).
    output: Option<usize>,
    /// NULL keys match each other (`IS NOT DISTINCT FROM`).
    nulls_match: bool,
    schema: SchemaRef,
    /// The residual condition, over a pair's columns (left then right).
    residual: Option<Filter>,
    /// A pair's columns, as the residual reads them.
    pair_schema: SchemaRef,
    /// The residual is asked of each candidate pair before the rows' degrees are known (a side
    /// shows its rows alone); an inner join filters the pairs it outputs instead.
    residual_first: bool,
    view: ViewStatus,
    window: Option<JoinWindow>,
    interval: Option<JoinInterval>,
    /// How long after its close a window's keys, and rows an interval bounds, are kept (the
    /// allowed lateness).
    expiry: Expiry,
    /// Per side, its time column in the interval when its late rows are dropped here.
    late_columns: [Option<usize>; 2],
    /// Join keys by the close time of their window.
    open: KeysByTime,
    /// How fast the watermark moves (with a window), so that keys final before the next
    /// checkpoint are not settled into the store only to be deleted (`flush_state`).
    pace: WatermarkPace,
    /// The view's state TTL ([`HashJoin::with_state_ttl`]): per side, its keys by last change,
    /// and the keys it changed in this epoch (indexed at the barrier, at the epoch's time).
    idle: Option<[IdleKeys; 2]>,
    changed: [HashSet<Vec<u8>>; 2],
}

impl HashJoin {
    /// Shard `shard` of a join configured by `config`, over its sides' state tables (left,
    /// right).
    pub fn new(
        config: HashJoinConfig,
        state: [KeyedState; 2],
        shard: usize,
        view: impl Into<ViewStatus>,
    ) -> Result<HashJoin> {
        let view: ViewStatus = view.into();
        let HashJoinConfig {
            join_type,
            left,
            right,
            schema,
            residual,
            late_sides,
            nulls_match,
            append_only_inputs,
            window,
            interval,
            lateness,
        } = config;
        let ([left_alone, right_alone], pairs) = shape(join_type)?;
        let [left_state, right_state] = state;
        let fields: Vec<_> = left.0.fields().iter().chain(right.0.fields().iter()).cloned().collect();
        let pair_schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
        let output = match pairs {
            true => None,
            false => Some(if left_alone == Alone::Hidden { 1 } else { 0 }),
        };
        let residual_first = residual.is_some() && (left_alone != Alone::Hidden || right_alone != Alone::Hidden);
        let mut join = HashJoin {
            sides: [Side::new(left, left_state, left_alone)?, Side::new(right, right_state, right_alone)?],
            join_type,
            pairs,
            output,
            nulls_match,
            schema,
            residual: residual.map(|r| Filter::new(r, view.clone())),
            pair_schema,
            residual_first,
            view,
            window,
            interval: None,
            expiry: Expiry::new(lateness),
            late_columns: [0, 1].map(|side| interval.filter(|_| late_sides[side]).map(|i| i.columns[side])),
            open: KeysByTime::default(),
            pace: WatermarkPace::default(),
            idle: None,
            changed: Default::default(),
        };
        let inner = join_type == JoinType::Inner;
        for (side, append_only) in join.sides.iter_mut().zip(append_only_inputs) {
            side.degrees = residual_first && side.alone != Alone::Hidden;
            // A row's degree is kept by its multiplicity, which a numbered row has not.
            side.append_only = append_only && !side.degrees;
            side.counted = !(side.append_only && inner);
        }
        if let Some(interval) = interval {
            let what = join.describe();
            let windowed = join.window.is_some();
            for (side, s) in join.sides.iter_mut().enumerate() {
                if interval.expires(side) {
                    // An append-only side without counts keeps its rows in memory, stored
                    // under this join's shard number.
                    let timed = if s.append_only && !s.counted && !windowed {
                        let (table, store) = s.state.table();
                        TimedRows::InMemory(ExpiringRows::new(table, store, shard as u16, &what))
                    } else {
                        TimedRows::Stored(StateKeysByTime::default())
                    };
                    s.timed = Some((interval.columns[side], timed));
                }
            }
            join.interval = Some(interval);
        }
        Ok(join)
    }

    /// This join under the view's state TTL (`WITH (state_ttl = ...)`), each side's keys
    /// indexed in `idle`: a join key whose rows on one side have not changed for the TTL of
    /// epoch time leaves that side as if its rows had been deleted (their matches retracted,
    /// the other side's partners padded again or shown alone as the join type says), so new
    /// rows on the other side no longer meet them; a retraction of a row a side no longer has
    /// is ignored. The planner gives such a join no append-only side.
    pub fn with_state_ttl(mut self, idle: [IdleKeys; 2]) -> HashJoin {
        self.idle = Some(idle);
        self
    }

    /// Joins side `this`'s changes with the other side's rows and updates `this`'s state.
    /// Under a state TTL the keys changed are noted for the barrier's index (not while the TTL
    /// itself retracts idle keys' rows: `idle` is taken out then).
    fn join_changes(&mut self, this: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let other = 1 - this;
        let key_arrays =
            self.sides[this].keys.iter().map(|k| evaluate(k, &batch.data, &self.view)).collect::<Result<Vec<_>>>()?;
        let keys = self.sides[this].key_codec.convert_columns(&key_arrays)?;
        let rows = self.sides[this].row_codec.convert_columns(batch.data.columns())?;
        let closes = match self.window {
            Some(w) => Some(close_times(&key_arrays[w.key_index], w.column)?),
            None => None,
        };
        let times = match &self.sides[this].timed {
            Some((column, _)) => Some(to_nanos(batch.data.column(*column))?),
            None => None,
        };
        let null_key = |i: usize| !self.nulls_match && key_arrays.iter().any(|k| k.is_null(i));
        // The other side does not change while this batch is applied: each row's partners
        // are read first, so that the residual is asked of them all at once. A semi or anti
        // join without a residual needs only their count, and their rows when they flip.
        let counts_only = !self.pairs && !self.residual_first;
        let mut partners = Vec::with_capacity(batch.num_rows());
        for i in 0..batch.num_rows() {
            partners.push(match null_key(i) || counts_only {
                true => vec![],
                false => self.sides[other].partner_rows(keys.row(i).as_ref())?,
            });
        }
        let passes = match self.residual_first {
            true => Some(self.residual_passes(this, &rows, &partners)?),
            false => None,
        };
        let mut candidate = 0;
        let mut ignored = 0;
        let mut pairs: Vec<Pair> = Vec::new();
        for (i, op) in batch.ops.iter().enumerate() {
            let row = rows.row(i).as_ref().to_vec();
            let sign = op.sign();
            if null_key(i) {
                // Never matches: only a side that shows unmatched rows shows it.
                if self.sides[this].alone.shows(0) {
                    pairs.push(self.alone(this, &row, *op));
                }
                continue;
            }
            let key = keys.row(i).as_ref().to_vec();
            if self.idle.is_some() {
                if sign < 0 && count_of(self.sides[this].state.get(Side::tagged(&key, 1, &row).key())?)? <= 0 {
                    // A row of a key the state TTL forgot: the join holds nothing to take back
                    // (its partners' verdicts, asked with every row's, are passed over).
                    candidate += partners[i].len();
                    ignored += 1;
                    continue;
                }
                self.changed[this].insert(key.clone());
            }
            if let Some(close) = closes.as_ref().and_then(|c| c[i]) {
                self.open.insert(&key, close);
            }
            let mut matched = std::mem::take(&mut partners[i]);
            if let Some(passes) = &passes {
                let from = candidate;
                candidate += matched.len();
                let mut pass = passes[from..candidate].iter();
                matched.retain(|_| *pass.next().expect("one verdict per candidate"));
            }
            let degree: i64 = match counts_only {
                true => self.sides[other].partners(&key)?,
                false => matched.iter().map(|(_, count)| count).sum(),
            };
            if self.pairs {
                for (other_row, count) in &matched {
                    for _ in 0..*count {
                        pairs.push(Self::pair(this, &row, other_row, *op));
                    }
                }
            }
            if self.sides[this].alone.shows(degree) {
                pairs.push(self.alone(this, &row, *op));
            }
            // The other side's partners of this row may start or stop showing alone: with the
            // first partner they gain, or the last they lose.
            let other_alone = self.sides[other].alone;
            if other_alone != Alone::Hidden {
                let flip = |before: i64, after: i64| {
                    (other_alone.shows(before) != other_alone.shows(after)).then_some(if other_alone.shows(after) {
                        Op::Insert
                    } else {
                        Op::Delete
                    })
                };
                if self.sides[other].degrees {
                    for (other_row, count) in &matched {
                        let (before, after) = self.sides[other].add_degree(&key, other_row, sign)?;
                        if let Some(op) = flip(before, after) {
                            for _ in 0..*count {
                                pairs.push(self.alone(other, other_row, op));
                            }
                        }
                    }
                } else {
                    let mine_before = self.sides[this].partners(&key)?;
                    if let Some(op) = flip(mine_before, mine_before + sign) {
                        if counts_only {
                            matched = self.sides[other].partner_rows(&key)?;
                        }
                        for (other_row, count) in &matched {
                            for _ in 0..*count {
                                pairs.push(self.alone(other, other_row, op));
                            }
                        }
                    }
                }
            }
            let time = times.as_ref().and_then(|t| t.is_valid(i).then(|| t.value(i)));
            self.sides[this].update(&key, &row, sign, degree, time)?;
        }
        if ignored > 0 {
            crate::metrics::STATE_TTL_IGNORED_RETRACTIONS_TOTAL.with_label_values(&[&self.view]).inc_by(ignored);
        }
        if pairs.is_empty() {
            return Ok(vec![]);
        }
        let joined = self.to_batch(pairs)?;
        match (&mut self.residual, self.residual_first) {
            // An inner join's pairs are filtered as they leave.
            (Some(filter), false) => filter.apply(0, joined, clock),
            _ => Ok(vec![joined]),
        }
    }

    /// State the watermark ends: keys of final windows, rows no partner still to come can
    /// meet.
    fn expire_by_watermark(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        if self.window.is_some() {
            self.pace.observe(std::time::Instant::now(), clock.watermark);
        }
        let final_through = self.expiry.final_through(clock);
        // Keys whose window is final: nothing can join with them any more.
        if let (Some(_), Some(final_through)) = (self.window, final_through) {
            for key in self.open.expire_through(final_through)?.into_iter().flat_map(|(_, keys)| keys) {
                for side in &mut self.sides {
                    side.forget(&key);
                    // The key's rows (tag 1) and count (tag 0): everything under it.
                    side.state.delete_prefix(KeyRef::whole(&key))?;
                }
            }
        }
        // Rows no partner still to come can pass the time bound with.
        if let (Some(interval), Some(final_through)) = (self.interval, final_through) {
            for (side, s) in self.sides.iter_mut().enumerate() {
                if let Some(through) = interval.expired_through(side, final_through) {
                    // Append-only rows are stored once each, and only this deletes them.
                    s.expire_through(through, s.append_only && self.window.is_none())?;
                }
            }
        }
        Ok(vec![])
    }

    /// Under a state TTL, at a barrier with epoch time `now`: indexes the keys each side
    /// changed in the epoch, then retracts the rows of each side's idle keys through the join,
    /// as deletions of that side would be.
    fn forget_idle_keys(&mut self, now: i64, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let mut idle = self.idle.take().expect("called with a state TTL");
        let result = self.retract_idle(&mut idle, now, clock);
        self.idle = Some(idle);
        result
    }

    fn retract_idle(&mut self, idle: &mut [IdleKeys; 2], now: i64, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let mut out = Vec::new();
        for side in 0..2 {
            idle[side].advance(now)?;
            for key in std::mem::take(&mut self.changed[side]) {
                idle[side].touch(&key)?;
            }
            let mut forgotten = 0;
            let mut rows: Vec<Vec<u8>> = Vec::new();
            for key in idle[side].take_idle(now)? {
                let held = self.sides[side].matches(&key)?;
                forgotten += (!held.is_empty()) as u64;
                for (row, count) in held {
                    rows.extend(std::iter::repeat_n(row, count.max(0) as usize));
                }
            }
            if forgotten > 0 {
                crate::metrics::STATE_TTL_FORGOTTEN_KEYS_TOTAL.with_label_values(&[&self.view]).inc_by(forgotten);
            }
            if rows.is_empty() {
                continue;
            }
            let columns = self.decode(side, rows.iter().map(Vec::as_slice))?;
            let schema = Arc::clone(&self.sides[side].input);
            let deletes = ChangeBatch::new(RecordBatch::try_new(schema, columns)?, vec![Op::Delete; rows.len()]);
            out.extend(self.join_changes(side, deletes, clock)?);
        }
        Ok(out)
    }

    /// The output row joining `this` (on side `this_side`) with `other`.
    fn pair(this_side: usize, this: &[u8], other: &[u8], op: Op) -> Pair {
        if this_side == 0 {
            (this.to_vec(), other.to_vec(), op)
        } else {
            (other.to_vec(), this.to_vec(), op)
        }
    }

    /// The output row showing side `side`'s row `row` alone: padded with the other side's
    /// NULLs (a semi or anti join's output takes this side's columns only, [`HashJoin::to_batch`]).
    fn alone(&self, side: usize, row: &[u8], op: Op) -> Pair {
        Self::pair(side, row, &self.sides[1 - side].null_row, op)
    }

    /// Side `side`'s rows, decoded into columns.
    fn decode<'a>(&self, side: usize, rows: impl Iterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        let codec = &self.sides[side].row_codec;
        let parser = codec.parser();
        Ok(codec.convert_rows(rows.map(|r| parser.parse(r)))?)
    }

    fn to_batch(&self, pairs: Vec<Pair>) -> Result<ChangeBatch> {
        let columns = match self.output {
            Some(0) => self.decode(0, pairs.iter().map(|p| p.0.as_slice()))?,
            Some(_) => self.decode(1, pairs.iter().map(|p| p.1.as_slice()))?,
            None => {
                let left = self.decode(0, pairs.iter().map(|p| p.0.as_slice()))?;
                [left, self.decode(1, pairs.iter().map(|p| p.1.as_slice()))?].concat()
            }
        };
        let ops = pairs.iter().map(|p| p.2).collect();
        Ok(ChangeBatch::new(RecordBatch::try_new(Arc::clone(&self.schema), columns)?, ops))
    }

    /// Whether each candidate pair passes the residual: row `i` of `rows` (side `this`) with
    /// each of `partners[i]`, in that order.
    fn residual_passes(
        &self,
        this: usize,
        rows: &datafusion::arrow::row::Rows,
        partners: &[Vec<(Vec<u8>, i64)>],
    ) -> Result<Vec<bool>> {
        let Some(residual) = &self.residual else { return Ok(vec![]) };
        let candidates: Vec<Pair> = partners
            .iter()
            .enumerate()
            .flat_map(|(i, others)| {
                others.iter().map(move |(other, _)| Self::pair(this, rows.row(i).as_ref(), other, Op::Insert))
            })
            .collect();
        if candidates.is_empty() {
            return Ok(vec![]);
        }
        let left = self.decode(0, candidates.iter().map(|p| p.0.as_slice()))?;
        let columns = [left, self.decode(1, candidates.iter().map(|p| p.1.as_slice()))?].concat();
        let batch = RecordBatch::try_new(Arc::clone(&self.pair_schema), columns)?;
        residual.passes(&batch)
    }
}

impl Operator for HashJoin {
    fn describe(&self) -> String {
        let keys = |s: &Side| s.keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ");
        let residual = self.residual.as_ref().map(|r| format!(", {}", r.describe())).unwrap_or_default();
        let window = match &self.window {
            Some(w) => format!(", window {}", self.sides[0].keys[w.key_index]),
            None => String::new(),
        };
        let expiring: Vec<String> = ["left", "right"]
            .into_iter()
            .zip(&self.sides)
            .filter_map(|(name, side)| match &side.timed {
                Some((_, TimedRows::InMemory(_))) => Some(format!("{name} rows expire by time (in memory)")),
                Some((_, TimedRows::Stored(_))) => Some(format!("{name} rows expire by time")),
                None => None,
            })
            .collect();
        let late: Vec<String> = ["left", "right"]
            .into_iter()
            .zip(self.late_columns)
            .filter_map(|(name, column)| column.map(|_| format!(", {name} rows behind the watermark are late")))
            .collect();
        let interval = expiring.iter().map(|e| format!(", {e}")).chain(late).collect::<String>();
        format!(
            "HashJoin: {} on [{}] = [{}]{residual}{window}{interval}{}",
            self.join_type,
            keys(&self.sides[0]),
            keys(&self.sides[1]),
            IdleKeys::describe(self.idle.as_ref().map(|i| &i[0]))
        )
    }

    fn apply(&mut self, input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let this = if input == 0 { 0 } else { 1 };
        // Rows behind the watermark on a side judged by its time are late: dropped and counted.
        let batch = match (self.late_columns[this], self.expiry.final_through(clock)) {
            (Some(column), Some(final_through)) => {
                let times = to_nanos(batch.data.column(column))?;
                let on_time: Vec<u32> = (0..batch.num_rows())
                    .filter(|&i| !(times.is_valid(i) && times.value(i) <= final_through))
                    .map(|i| i as u32)
                    .collect();
                match batch.num_rows() - on_time.len() {
                    0 => batch,
                    late => {
                        self.view.late_rows(late as u64);
                        if on_time.is_empty() {
                            return Ok(vec![]);
                        }
                        batch.take(&on_time)?
                    }
                }
            }
            _ => batch,
        };
        self.join_changes(this, batch, clock)
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let mut out = match (&self.idle, clock.now) {
            (Some(_), Some(now)) => self.forget_idle_keys(now, clock)?,
            _ => vec![],
        };
        out.extend(self.expire_by_watermark(clock)?);
        Ok(out)
    }

    /// A key whose window will be final before the next checkpoint at the watermark's pace is
    /// not settled between checkpoints: it would be written to the store only to be deleted.
    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        let lateness = self.window.map(|_| self.expiry.lateness());
        let through = lateness.and_then(|l| self.pace.final_by_next_checkpoint(&self.sides[0].state, flush, l));
        let open = &self.open;
        let expires_first = |key: &[u8]| open.due_by(key, through);
        for side in &mut self.sides {
            side.flush(wb, flush, &expires_first);
        }
        for idle in self.idle.iter_mut().flatten() {
            idle.flush(wb, flush);
        }
    }

    /// The keys by close time, then each side's next row number and rows by time; None for a
    /// join that keeps none of these (no window, no expiring or numbered rows).
    fn save_record(&self) -> Option<Vec<u8>> {
        let sides_keep_any = self.sides.iter().any(|s| s.append_only || s.timed.is_some());
        if self.window.is_none() && !sides_keep_any {
            return None;
        }
        let mut record = RecordWriter::default();
        // q7 writes megabytes here at every checkpoint barrier: one allocation, not a doubling.
        let rows: usize = self
            .sides
            .iter()
            .filter_map(|s| match &s.timed {
                Some((_, TimedRows::Stored(rows))) => Some(rows.0.record_len()),
                _ => None,
            })
            .sum();
        record.reserve(rows + 64);
        self.open.write(&mut record);
        for side in &self.sides {
            side.save_record(&mut record);
        }
        Some(record.finish())
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        let what = self.describe();
        let mut record = RecordReader::new(record, &what)?;
        self.open = KeysByTime::read(&mut record)?;
        for side in &mut self.sides {
            side.restore_record(&mut record, &what)?;
        }
        record.finish()
    }

    fn open_windows(&self) -> usize {
        self.open.len()
    }

    fn memory_bytes(&self) -> usize {
        self.sides
            .iter()
            .map(|side| match &side.timed {
                Some((_, TimedRows::InMemory(rows))) => rows.bytes_held(),
                _ => 0,
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    /// Rows by time keep their record form: written, read back and written again they are the
    /// same record, and taking the oldest out gives their rows in time order.
    #[test]
    fn rows_by_time_round_trip_through_a_record_and_expire_in_order() {
        let mut rows = StateKeysByTime::default();
        for (time, stored, key_len) in [(30, &b"k3#1"[..], 2), (10, b"k1#1", 2), (10, b"k1#22", 2), (20, b"", 0)] {
            rows.add(time, KeyRef::with_distribution(stored, key_len));
        }
        let mut record = RecordWriter::default();
        rows.write(&mut record);
        let record = record.finish();
        let mut reader = RecordReader::new(&record, "join").unwrap();
        let mut back = StateKeysByTime::read(&mut reader, "join").unwrap();
        reader.finish().unwrap();
        let mut again = RecordWriter::default();
        back.write(&mut again);
        assert_eq!(again.finish(), record);
        let taken = back.expire_through(29);
        let rows: Vec<(i64, KeyRef)> = taken.rows().collect::<Result<_>>().unwrap();
        let expected = [(10, &b"k1#1"[..], 2), (10, b"k1#22", 2), (20, b"", 0)];
        assert_eq!(rows, expected.map(|(time, stored, key_len)| (time, KeyRef::with_distribution(stored, key_len))));
        assert!(!back.0.is_empty());
        // A join key longer than its state key is a corrupt record, not a bad delete later.
        let mut bad = RecordWriter::default();
        bad.u64(1).i64(5).u64(1).bytes(b"ab").u64(3);
        let bad = bad.finish();
        assert!(StateKeysByTime::read(&mut RecordReader::new(&bad, "join").unwrap(), "join").is_err());
    }

    /// A join of two inputs of columns `types` (as `from_pretty`) on their first column, its
    /// state in `store` (write-back tables, as every operator's).
    fn join_on_first_column(
        store: &Arc<dyn StateStore>,
        join_type: JoinType,
        types: &str,
        capacity: usize,
    ) -> HashJoin {
        join_configured(store, types, capacity, |c| HashJoinConfig { join_type, ..c })
    }

    /// A join of two inputs of `types` on their first columns, as `configure` makes it.
    fn join_configured(
        store: &Arc<dyn StateStore>,
        types: &str,
        capacity: usize,
        configure: impl FnOnce(HashJoinConfig) -> HashJoinConfig,
    ) -> HashJoin {
        let table = |id| KeyedState::new(id, Arc::clone(store), capacity).write_back(None).unwrap();
        let side = from_pretty(&format!("{types}\n")).schema();
        let fields: Vec<Field> = side
            .fields()
            .iter()
            .chain(side.fields().iter())
            .enumerate()
            .map(|(i, f)| Field::new(format!("j{i}"), f.data_type().clone(), true))
            .collect();
        let config = HashJoinConfig::new(
            JoinType::Inner,
            (side.clone(), vec![col("c0", &side).unwrap()]),
            (side.clone(), vec![col("c0", &side).unwrap()]),
            Arc::new(Schema::new(fields)),
        );
        HashJoin::new(configure(config), [table(1), table(2)], 0, "test").unwrap()
    }

    fn new_store() -> Arc<dyn StateStore> {
        Arc::new(MemoryStore::new())
    }

    fn left_join() -> HashJoin {
        join_on_first_column(&new_store(), JoinType::Left, "I T", 2)
    }

    /// A LEFT join whose inputs only insert as `append_only_inputs` says.
    fn left_join_of(append_only_inputs: [bool; 2]) -> HashJoin {
        join_configured(&new_store(), "I T", 2, |c| HashJoinConfig {
            join_type: JoinType::Left,
            append_only_inputs,
            ..c
        })
    }

    fn step(j: &mut HashJoin, input: usize, changes: &str) -> String {
        j.apply(input, from_pretty(changes), &Clock::default()).unwrap().iter().map(|b| b.to_pretty()).collect()
    }

    #[test]
    fn left_join_padding_comes_and_goes() {
        let mut j = left_join();
        assert_eq!(step(&mut j, 0, "I T\n+ 1 a\n+ . n"), "+ 1 a NULL NULL\n+ NULL n NULL NULL\n");
        assert_eq!(step(&mut j, 1, "I T\n+ 1 x"), "+ 1 a 1 x\n- 1 a NULL NULL\n");
        assert_eq!(step(&mut j, 1, "I T\n+ 1 y"), "+ 1 a 1 y\n");
        assert_eq!(step(&mut j, 1, "I T\n- 1 x"), "- 1 a 1 x\n");
        assert_eq!(step(&mut j, 1, "I T\n- 1 y"), "- 1 a 1 y\n+ 1 a NULL NULL\n");
        assert_eq!(step(&mut j, 0, "I T\n- 1 a"), "- 1 a NULL NULL\n");
        // Right rows alone never show in a LEFT join.
        assert_eq!(step(&mut j, 1, "I T\n+ 2 z"), "");
    }

    #[test]
    fn an_append_only_side_keeps_each_row_once_per_arrival() {
        let mut j = left_join_of([true, false]);
        // The same row twice, from the append-only side: two rows, two matches.
        assert_eq!(step(&mut j, 0, "I T\n+ 1 a\n+ 1 a"), "+ 1 a NULL NULL\n+ 1 a NULL NULL\n");
        assert_eq!(step(&mut j, 1, "I T\n+ 1 x"), "+ 1 a 1 x\n+ 1 a 1 x\n- 1 a NULL NULL\n- 1 a NULL NULL\n");
        assert_eq!(step(&mut j, 1, "I T\n- 1 x"), "- 1 a 1 x\n- 1 a 1 x\n+ 1 a NULL NULL\n+ 1 a NULL NULL\n");
        // A retraction on it is a bug upstream, reported as one.
        assert!(j.apply(0, from_pretty("I T\n- 1 a"), &Clock::default()).is_err());
    }

    const S: i64 = 1_000_000_000;

    /// Left: (price, date_time), append-only; right: (maxprice, window_end), a window bound;
    /// joined on price, with left.date_time - right.window_end within [-10 s, 0] (the bound is
    /// not checked: the join has no residual condition, so expired rows would show).
    fn q7_like_join(store: &Arc<dyn StateStore>) -> HashJoin {
        join_configured(store, "I S", 100, |c| HashJoinConfig {
            append_only_inputs: [true, false],
            interval: Some(JoinInterval {
                columns: [1, 1],
                windows: [None, Some(TimeColumn { close_offset: 0 })],
                lo: Some(-10 * S),
                hi: Some(0),
            }),
            ..c
        })
    }

    #[test]
    fn rows_no_future_partner_can_meet_expire() {
        // Left: (price, date_time); right: (maxprice, window_end), a window bound.
        let mut j = q7_like_join(&new_store());
        assert!(j.describe().ends_with("left rows expire by time (in memory)"), "{}", j.describe());
        step(&mut j, 0, "I S\n+ 7 1\n+ 7 15\n+ 8 3");
        // Rows stored on `side` for prices 7 and 8.
        let stored_on = |j: &mut HashJoin, side: usize| -> usize {
            [7i64, 8]
                .into_iter()
                .map(|price| {
                    let price: ArrayRef = Arc::new(datafusion::arrow::array::Int64Array::from(vec![price]));
                    let key = j.sides[side].key_codec.convert_columns(&[price]).unwrap().row(0).as_ref().to_vec();
                    j.sides[side].forget(&key);
                    j.sides[side].matches(&key).unwrap().len()
                })
                .sum()
        };
        let stored = |j: &mut HashJoin| stored_on(j, 0);
        assert_eq!(stored(&mut j), 3);
        // Watermark 12 s: windows ending at or before 12 s are final, so every right row still
        // to come ends after 12 s and meets only left rows after 2 s.
        j.on_barrier(&Clock::at_watermark(12 * S)).unwrap();
        assert_eq!(stored(&mut j), 2);
        // The rows kept still join.
        assert_eq!(step(&mut j, 1, "I S\n+ 7 20"), "+ 7 1970-01-01T00:00:15 7 1970-01-01T00:00:20\n");
        j.on_barrier(&Clock::at_watermark(30 * S)).unwrap();
        assert_eq!(stored(&mut j), 0);
        // The right side's rows never expire: the left side's times are no window bound.
        assert_eq!(stored_on(&mut j, 1), 1);
    }
    /// Restored from a checkpoint, a join numbers an append-only side's rows after the stored
    /// ones (a reused number would overwrite a row) and keeps padding right from the stored
    /// counts: outer joins, and an inner join whose append-only side keeps no counts.
    #[test]
    fn a_restored_join_continues_like_one_that_never_stopped() {
        use crate::operators::operator::testing::{assert_restore_continues, Event::Changes};
        for (join_type, append_only) in
            [(JoinType::Left, [true, false]), (JoinType::Full, [false, false]), (JoinType::Inner, [true, false])]
        {
            assert_restore_continues(
                &|store| {
                    Box::new(join_configured(store, "I T", 2, |c| HashJoinConfig {
                        join_type,
                        append_only_inputs: append_only,
                        ..c
                    }))
                },
                &[
                    &[Changes(0, "I T\n+ 1 a\n+ 1 a\n+ 2 b"), Changes(1, "I T\n+ 1 x")],
                    &[Changes(1, "I T\n+ 2 y"), Changes(0, "I T\n+ 1 c")],
                    &[Changes(0, "I T\n+ 1 d\n+ 3 e")],
                    &[Changes(1, "I T\n+ 1 z\n+ 3 w")],
                    &[Changes(1, "I T\n- 2 y\n+ 4 v"), Changes(0, "I T\n+ 2 f\n+ 1 g")],
                    &[Changes(1, "I T\n- 1 x\n- 3 w")],
                ],
            );
        }
    }

    /// Restored from a checkpoint, a join on a window bound deletes the keys of windows that
    /// become final after the restart (a row arriving for one then meets nothing).
    #[test]
    fn a_restored_windowed_join_forgets_the_windows_it_had() {
        use crate::operators::operator::testing::{assert_restore_continues, Event::Changes, Event::Watermark};
        let window = JoinWindow { key_index: 0, column: TimeColumn { close_offset: 0 } };
        assert_restore_continues(
            &|store| Box::new(join_configured(store, "S T", 4, |c| HashJoinConfig { window: Some(window), ..c })),
            &[
                &[Changes(0, "S T\n+ 10 a\n+ 20 b"), Changes(1, "S T\n+ 10 x")],
                &[Changes(0, "S T\n+ 10 c"), Watermark(5 * S)],
                &[Changes(1, "S T\n+ 20 y"), Watermark(12 * S)],
                &[Changes(1, "S T\n+ 10 z\n+ 30 u"), Watermark(25 * S)],
                &[Changes(0, "S T\n+ 20 d\n+ 30 e")],
            ],
        );
    }

    /// The q7-like join with its left rows in the state table, as builds before format 2 of
    /// the checkpoint record kept them.
    fn q7_like_join_stored(store: &Arc<dyn StateStore>) -> HashJoin {
        let mut j = q7_like_join(store);
        for side in &mut j.sides {
            if let Some((column, TimedRows::InMemory(_))) = side.timed {
                side.timed = Some((column, TimedRows::Stored(StateKeysByTime::default())));
            }
        }
        j
    }

    const Q7_LIKE_EPOCHS: &[&[crate::operators::operator::testing::Event]] = {
        use crate::operators::operator::testing::Event::{Changes, Watermark};
        &[
            &[Changes(0, "I S\n+ 7 1\n+ 7 15\n+ 8 3")],
            &[Changes(1, "I S\n+ 7 10"), Changes(0, "I S\n+ 8 14")],
            &[Watermark(12 * S)],
            &[Changes(1, "I S\n+ 7 20\n+ 8 20"), Changes(0, "I S\n+ 7 25")],
            &[Watermark(30 * S)],
            &[Changes(1, "I S\n+ 7 40\n+ 8 40")],
        ]
    };

    /// Restored from a checkpoint, a join with a time bound deletes the rows stored before the
    /// restart once no future partner can meet them (a row arriving late then meets only the
    /// rows kept), whether it keeps them in its table or in memory, and when it gives them to
    /// its table on the way (a memory limit of a few rows).
    #[test]
    fn a_restored_join_expires_the_rows_it_had() {
        use crate::operators::operator::testing::{assert_restore_continues, assert_restore_continues_in_outputs};
        assert_restore_continues(&|store| Box::new(q7_like_join_stored(store)), Q7_LIKE_EPOCHS);
        assert_restore_continues_in_outputs(&|store| Box::new(q7_like_join(store)), Q7_LIKE_EPOCHS);
        let small = |store: &Arc<dyn StateStore>| {
            let mut j = q7_like_join(store);
            j.sides[0].memory_limit = 200;
            Box::new(j) as Box<dyn Operator>
        };
        assert_restore_continues_in_outputs(&small, Q7_LIKE_EPOCHS);
        // It did give them up: three rows are past 200 bytes.
        let store = new_store();
        let mut j = small(&store);
        for events in Q7_LIKE_EPOCHS {
            for event in *events {
                if let crate::operators::operator::testing::Event::Changes(input, text) = event {
                    j.apply(*input, from_pretty(text), &Clock::default()).unwrap();
                }
            }
        }
        assert!(j.describe().ends_with("left rows expire by time"), "{}", j.describe());
    }

    /// A checkpoint of a build that kept the rows in the state table (record format 1), or of a
    /// side that had given them to its table, restores into a join that keeps them in memory:
    /// it continues like one that never stopped, and its next checkpoint leaves only segments
    /// in the table.
    #[test]
    fn rows_of_a_format_1_checkpoint_move_into_memory() {
        for format_1_record in [true, false] {
            rows_kept_in_the_table_move_into_memory(format_1_record);
        }
    }

    /// A restore of a checkpoint whose side kept its rows in its table (`format_1_record`: as
    /// builds before format 2 wrote it; else as a side past its memory limit writes it).
    fn rows_kept_in_the_table_move_into_memory(format_1_record: bool) {
        use crate::operators::operator::testing::{checkpoint, restore, step};
        use crate::state::store::ScanControl;
        let epochs = ["I S\n+ 7 1\n+ 7 15\n+ 8 3", "I S\n+ 7 16\n+ 9 17"];
        let probes = ["I S\n+ 7 20", "I S\n+ 8 20\n+ 9 20"];
        let never_stopped_store = new_store();
        let mut never_stopped = q7_like_join_stored(&never_stopped_store);
        let store = new_store();
        let mut old = q7_like_join_stored(&store);
        for epoch in epochs {
            step(&mut never_stopped, &never_stopped_store, epoch);
            step(&mut old, &store, epoch);
        }
        let record = checkpoint(&mut old, &store).expect("a record");
        drop(old);
        // Format 1 had no field saying how a side holds its rows: take out both sides' (after
        // the empty keys by close time and each side's next row number; the right side's
        // rows by time are one empty count at the end).
        let mut format_1 = record.clone();
        format_1[0] = 1;
        let right_kind = format_1.len() - 16;
        format_1.drain(right_kind..right_kind + 8);
        format_1.drain(17..25);
        let record = if format_1_record { format_1 } else { record };
        let mut new = q7_like_join(&store);
        restore(&mut new, Some(record));
        for (watermark, probe) in [(12 * S, probes[0]), (14 * S, probes[1])] {
            let clock = Clock::at_watermark(watermark);
            let mut expected: Vec<String> =
                never_stopped.apply(1, from_pretty(probe), &clock).unwrap().iter().map(|b| b.to_pretty()).collect();
            let mut got: Vec<String> =
                new.apply(1, from_pretty(probe), &clock).unwrap().iter().map(|b| b.to_pretty()).collect();
            expected.sort();
            got.sort();
            assert_eq!(got, expected);
            assert!(!got.is_empty());
            never_stopped.on_barrier(&clock).unwrap();
            new.on_barrier(&clock).unwrap();
        }
        checkpoint(&mut new, &store);
        // The left side's table (id 1) holds its segment and nothing else.
        let mut left_keys = Vec::new();
        store
            .scan_prefix(&1u32.to_be_bytes(), &mut |k, _| {
                left_keys.push(k[6]);
                Ok(ScanControl::Continue)
            })
            .unwrap();
        assert_eq!(left_keys, vec![0xff]);
    }
}
