//! [`ExpiringRows`]: rows that only ever arrive, each leaving when its time falls below a bound
//! that only grows (ADR 22). A time-bounded join's append-only side is one: q7's bids, deleted
//! once no partner still to come can meet them.
//!
//! The rows live in memory: their bytes in *segments* (about [`SEGMENT_BYTES`] of rows one after
//! another, each with its time and key), looked up by key through a map of row positions, and
//! taken out by time through an index of keys by time. A checkpoint writes each segment filled
//! since the last one as one store value (`[0xff][shard][segment number]` in the side's table,
//! under one vnode), into the flush's batch without copying it (the batch shares a sealed
//! segment's bytes: [`WriteBatch::put_shared`]), and deletes the stored segments whose rows have
//! all expired. So a row costs one copy into a segment and its share of one store
//! write, however long it lives; it is never put into the store, or deleted from it, on its own
//! (as Arroyo's expiring time-key tables do, instead of RocksDB's per-row puts and tombstones).
//! Bytes written per checkpoint follow the rows that arrived, not the rows alive.
//!
//! Memory is what the bound keeps alive (the join's time interval of rows), plus the expired
//! rows of segments still holding a live one ([`ExpiringRows::bytes_held`] counts both). The
//! join gives up memory past [`MEMORY_LIMIT_BYTES`](super::MEMORY_LIMIT_BYTES) (a backfill over
//! a long history, a stuck watermark, rows far ahead of the others pinning segments):
//! [`ExpiringRows::into_live_rows`] hands the rows over to its state table, which spills past
//! its cache like any other. With checkpoints off nothing is written and segments are dropped
//! as their rows expire.
//!
//! Restore ([`ExpiringRows::restore`]) reads the shard's stored segments back and indexes the
//! rows at or above the bound the checkpoint had ([`ExpiringRows::save`]); the checkpoint holds
//! exactly the segments sealed by then, since a checkpoint seals the segment being filled.
//!
//! Invariants: every row in the key map is in a segment held in memory (a segment is dropped
//! only once its latest time is below the bound, after the rows below it left the map); a
//! segment number is never reused (the next one is in the checkpoint record); a stored segment
//! is deleted from the store only at a checkpoint, together with the writes that make it dead.
//!
//! Called by `operators::hash_join` for such sides.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::entries_by_time::EntriesByTime;
use super::expiry::Expiring;
use super::keyed::Flush;
use super::keys::{ShardKeys, TableId};
use super::record::{corrupt, RecordReader, RecordWriter};
use super::store::{StateStore, WriteBatch};
use crate::error::Result;
use crate::types::hash::HashMap;

/// A segment is sealed, and written at the next checkpoint, once it holds this many bytes.
pub const SEGMENT_BYTES: usize = 256 * 1024;

/// Rows one after another (time, key, row), as they arrived; a stored one is a record of the
/// index codec (format byte first), so it is versioned like the operators' records. This is the
/// segment being filled; sealed, its bytes never change ([`Segment`]).
struct OpenSegment {
    rows: RecordWriter,
    count: u64,
    /// The latest time of a row in it (MIN when empty).
    latest: i64,
}

impl OpenSegment {
    fn new() -> OpenSegment {
        let mut rows = RecordWriter::default();
        // Filled to the limit and one row past it, without doubling on the way.
        rows.reserve(SEGMENT_BYTES + 4096);
        OpenSegment { rows, count: 0, latest: i64::MIN }
    }

    fn len(&self) -> usize {
        self.rows.as_bytes().len()
    }
}

/// A sealed segment. Its bytes are shared with the write batch that stores it, so a checkpoint
/// hands megabytes of rows to the store without copying them on the view's thread.
struct Segment {
    rows: Bytes,
    /// The latest time of a row in it.
    latest: i64,
    /// Whether the store holds it (written at a checkpoint, or read at a restore).
    stored: bool,
}

/// Where a row is: its segment's number, the offset of its bytes there, and its time.
#[derive(Clone, Copy, Debug)]
struct RowAt {
    segment: u64,
    at: u32,
    time: i64,
}

pub struct ExpiringRows {
    /// Where this shard's segments are stored.
    keys: ShardKeys,
    store: Arc<dyn StateStore>,
    /// Sealed segments, by number.
    sealed: BTreeMap<u64, Segment>,
    /// The segment rows are added to, numbered `open_number`.
    open: OpenSegment,
    open_number: u64,
    /// Each key's rows, in the order they arrived.
    by_key: HashMap<Vec<u8>, Vec<RowAt>>,
    /// The keys of rows by the rows' times (each key once per row), one encoded list per time.
    keys_by_time: EntriesByTime,
    /// Rows with a time below this are gone.
    expired_below: i64,
    /// Stored segments whose rows have all expired, to delete at the next checkpoint.
    dead: Vec<u64>,
    /// Bytes of the sealed segments held.
    sealed_bytes: usize,
    /// What these rows belong to, for errors.
    what: String,
}

impl ExpiringRows {
    /// The rows of shard `shard`, whose segments go into `table_id` of `store`; `what` names
    /// the operator, for errors.
    pub fn new(table_id: TableId, store: Arc<dyn StateStore>, shard: u16, what: &str) -> ExpiringRows {
        ExpiringRows::empty(ShardKeys::new(table_id, shard), store, what)
    }

    fn empty(keys: ShardKeys, store: Arc<dyn StateStore>, what: &str) -> ExpiringRows {
        ExpiringRows {
            keys,
            store,
            sealed: BTreeMap::new(),
            open: OpenSegment::new(),
            open_number: 0,
            by_key: HashMap::default(),
            keys_by_time: EntriesByTime::default(),
            expired_below: i64::MIN,
            dead: Vec::new(),
            sealed_bytes: 0,
            what: what.to_string(),
        }
    }

    /// The store key of segment `number`.
    fn segment_key(&self, number: u64) -> Vec<u8> {
        self.keys.key(&number.to_be_bytes())
    }

    /// The key range of this shard's stored segments, to delete them all.
    pub fn stored_range(&self) -> (Vec<u8>, Vec<u8>) {
        self.keys.range()
    }

    /// Adds a row with join key `key` and time `time`; a row already below the bound is not
    /// kept (no partner still to come can meet it, and a restore would not have it).
    pub fn add(&mut self, time: i64, key: &[u8], row: &[u8]) {
        if time < self.expired_below {
            return;
        }
        let segment = &mut self.open;
        segment.rows.i64(time).bytes(key);
        let at = segment.rows.as_bytes().len() as u32;
        segment.rows.bytes(row);
        segment.count += 1;
        segment.latest = segment.latest.max(time);
        self.index(RowAt { segment: self.open_number, at, time }, key);
        if self.open.rows.as_bytes().len() >= SEGMENT_BYTES {
            self.seal();
        }
    }

    fn index(&mut self, row: RowAt, key: &[u8]) {
        match self.by_key.get_mut(key) {
            Some(rows) => rows.push(row),
            None => {
                self.by_key.insert(key.to_vec(), vec![row]);
            }
        }
        self.keys_by_time.push(row.time).bytes(key);
    }

    /// The open segment becomes sealed (written at the next checkpoint); a new one opens.
    fn seal(&mut self) {
        if self.open.count > 0 {
            let OpenSegment { mut rows, latest, .. } = std::mem::replace(&mut self.open, OpenSegment::new());
            // A checkpoint seals the segment however full: its spare room goes back (a slow
            // stream's segments, each a few rows, live as long as the join's interval).
            let mut bytes = rows.finish();
            bytes.shrink_to_fit();
            let rows = Bytes::from(bytes);
            self.sealed_bytes += rows.len();
            self.sealed.insert(self.open_number, Segment { rows, latest, stored: false });
            self.open_number += 1;
        }
    }

    /// Bytes of rows held in memory, expired ones of live segments included.
    pub fn bytes_held(&self) -> usize {
        self.sealed_bytes + self.open.len()
    }

    fn row(&self, row: &RowAt) -> &[u8] {
        let bytes = match row.segment == self.open_number {
            true => self.open.rows.as_bytes(),
            false => &self.sealed[&row.segment].rows,
        };
        RecordReader::fragment(&bytes[row.at as usize..], &self.what)
            .slice()
            .expect("a row at an offset this index took as it wrote or read it")
    }

    /// The rows with join key `key`, in the order they arrived, each once.
    pub fn rows(&self, key: &[u8]) -> Vec<(Vec<u8>, i64)> {
        match self.by_key.get(key) {
            Some(rows) => rows.iter().map(|r| (self.row(r).to_vec(), 1)).collect(),
            None => vec![],
        }
    }

    /// How many rows are kept.
    pub fn len(&self) -> usize {
        self.by_key.values().map(Vec::len).sum()
    }

    /// The rows kept, as (time, key, row), each key's in the order they arrived; for handing
    /// them to a state table (then [`ExpiringRows::stored_range`] is deleted).
    pub fn into_live_rows(self) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
        let mut rows = Vec::with_capacity(self.len());
        for (key, at) in &self.by_key {
            for r in at {
                rows.push((r.time, key.clone(), self.row(r).to_vec()));
            }
        }
        rows
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Takes out the rows whose time is below `below` (a bound lower than an earlier one
    /// changes nothing). The bound is kept as "below" since it is in checkpoint records.
    fn expire_below(&mut self, below: i64) {
        if below <= self.expired_below {
            return;
        }
        self.expired_below = below;
        let dead: Vec<u64> = self.sealed.iter().filter(|(_, s)| s.latest < below).map(|(n, _)| *n).collect();
        if dead.len() == self.sealed.len() && self.open.latest < below {
            // Every row goes (the end of a bounded input: the bound passes every row): the
            // index is dropped whole, not key by key.
            self.by_key = HashMap::default();
            self.keys_by_time = EntriesByTime::default();
        } else {
            self.expire_by_key(below);
        }
        for number in dead {
            let segment = self.sealed.remove(&number).expect("listed above");
            self.sealed_bytes -= segment.rows.len();
            if segment.stored {
                self.dead.push(number);
            }
        }
        if self.open.count > 0 && self.open.latest < below {
            self.open = OpenSegment::new();
        }
    }

    /// Takes the rows below `below` out of the index, key by key.
    fn expire_by_key(&mut self, below: i64) {
        let expired = self.keys_by_time.expire_through(below.saturating_sub(1)).expect("an index in memory");
        // Each key once, however many of its rows expire (a hot key's list is read once).
        let mut keys: Vec<&[u8]> = Vec::new();
        for (_, count, mut reader) in expired.lists(&self.what) {
            keys.extend((0..count).map(|_| reader.slice().expect("keys this index wrote")));
        }
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            if let Some(rows) = self.by_key.get_mut(key) {
                rows.retain(|r| r.time >= below);
                if rows.is_empty() {
                    self.by_key.remove(key);
                } else if rows.capacity() > 4 * rows.len() {
                    rows.shrink_to_fit();
                }
            }
        }
    }

    /// At a checkpoint: seals the open segment, writes every segment not stored yet and
    /// deletes the dead ones, into `wb`. Other flushes write nothing.
    pub fn flush(&mut self, wb: &mut WriteBatch, flush: Flush) {
        if !flush.checkpoint {
            return;
        }
        self.seal();
        let unstored: Vec<u64> = self.sealed.iter().filter(|(_, s)| !s.stored).map(|(n, _)| *n).collect();
        for number in unstored {
            let key = self.segment_key(number);
            let segment = self.sealed.get_mut(&number).expect("listed above");
            wb.put_shared(key, segment.rows.clone());
            segment.stored = true;
        }
        for number in std::mem::take(&mut self.dead) {
            wb.delete(self.segment_key(number));
        }
    }

    /// Adds what a restore needs besides the stored segments to a checkpoint record (after a
    /// checkpoint's [`ExpiringRows::flush`]): the next segment's number and the bound.
    pub fn save(&self, record: &mut RecordWriter) {
        record.u64(self.open_number).i64(self.expired_below);
    }

    /// Restores the rows of a checkpoint whose record part [`ExpiringRows::save`] wrote: the
    /// shard's stored segments read back, their rows at or above the bound indexed. A segment
    /// that does not decode, or numbered past the record's, is a corrupt checkpoint.
    pub fn restore(&mut self, record: &mut RecordReader) -> Result<()> {
        let next = record.u64()?;
        let below = record.i64()?;
        *self = ExpiringRows::empty(self.keys.clone(), Arc::clone(&self.store), &self.what);
        self.expired_below = below;
        for (key, bytes) in self.store.read_prefix(self.keys.prefix())? {
            let number = match <[u8; 8]>::try_from(key.as_slice()) {
                Ok(n) if u64::from_be_bytes(n) < next => u64::from_be_bytes(n),
                _ => return Err(corrupt(&self.what, "a stored segment the checkpoint does not know")),
            };
            let mut latest = i64::MIN;
            let what = self.what.clone();
            let mut reader = RecordReader::new(&bytes, &what)?;
            while !reader.at_end() {
                let time = reader.i64()?;
                let key = reader.slice()?;
                let at = u32::try_from(bytes.len() - reader.remaining())
                    .map_err(|_| corrupt(&self.what, "a segment past 4 GiB"))?;
                reader.slice()?;
                latest = latest.max(time);
                if time >= below {
                    self.index(RowAt { segment: number, at, time }, key);
                }
            }
            if latest < below {
                self.dead.push(number);
                continue;
            }
            let rows = Bytes::from(bytes);
            self.sealed_bytes += rows.len();
            self.sealed.insert(number, Segment { rows, latest, stored: true });
        }
        self.open_number = next;
        Ok(())
    }
}

/// The rows whose time is at or before the bound leave memory; their segments leave the store
/// at the next checkpoint once all their rows have.
impl Expiring for ExpiringRows {
    type Expired = ();

    fn expire_through(&mut self, through: i64) -> Result<()> {
        self.expire_below(through.saturating_add(1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    fn stored(store: &Arc<dyn StateStore>) -> usize {
        store.read_prefix(&[]).unwrap().len()
    }

    fn checkpoint(rows: &mut ExpiringRows, store: &Arc<dyn StateStore>) -> Vec<u8> {
        let mut wb = WriteBatch::default();
        rows.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        let mut record = RecordWriter::default();
        rows.save(&mut record);
        record.finish()
    }

    fn restored(store: &Arc<dyn StateStore>, record: &[u8]) -> Result<ExpiringRows> {
        let mut rows = ExpiringRows::new(7, Arc::clone(store), 1, "test");
        let mut reader = RecordReader::new(record, "test")?;
        rows.restore(&mut reader)?;
        reader.finish()?;
        Ok(rows)
    }

    /// Rows come back by key in arrival order, leave by time, and a checkpoint restores exactly
    /// the rows alive at it; segments whose rows all left are deleted from the store.
    #[test]
    fn rows_expire_by_time_and_a_checkpoint_restores_the_live_ones() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut rows = ExpiringRows::new(7, Arc::clone(&store), 1, "test");
        // Enough rows to fill several segments: key i % 3, time i.
        let row = |i: i64| format!("row {i:>6} {}", "x".repeat(100)).into_bytes();
        let n = 3 * SEGMENT_BYTES as i64 / 100;
        for i in 0..n {
            rows.add(i, &[(i % 3) as u8], &row(i));
        }
        assert_eq!(rows.len(), n as usize);
        assert_eq!(rows.rows(&[1])[..2], [(row(1), 1), (row(4), 1)]);
        // Nothing is written before a checkpoint, whatever a flush.
        let mut wb = WriteBatch::default();
        rows.flush(&mut wb, Flush::EPOCH);
        assert!(wb.is_empty());
        rows.expire_through(n / 2 - 1).unwrap();
        assert_eq!(rows.len(), (n - n / 2) as usize);
        assert_eq!(rows.rows(&[2])[0].0, row(n / 2 + (2 + 3 - (n / 2) % 3) % 3));
        let record = checkpoint(&mut rows, &store);
        let segments_stored = stored(&store);
        assert!(segments_stored >= 2, "{segments_stored}");
        let back = restored(&store, &record).unwrap();
        for key in 0..3u8 {
            assert_eq!(back.rows(&[key]), rows.rows(&[key]), "key {key}");
        }
        // More rows, then expiry of all but the last: the dead segments leave the store at the
        // next checkpoint, and a restore of it has the rows alive then.
        let mut rows = back;
        for i in n..n + 10 {
            rows.add(i, &[9], &row(i));
        }
        rows.expire_through(n + 4).unwrap();
        let record = checkpoint(&mut rows, &store);
        assert_eq!(stored(&store), 1);
        let back = restored(&store, &record).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(back.rows(&[9]), rows.rows(&[9]));
        assert!(back.rows(&[0]).is_empty());
    }

    /// A bound past every row (a bounded input's end) empties the rows whole; the side goes on
    /// taking rows, and its stored segments leave the store at the next checkpoint.
    #[test]
    fn a_bound_past_every_row_drops_them_all() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut rows = ExpiringRows::new(7, Arc::clone(&store), 1, "test");
        let n = 2 * SEGMENT_BYTES as i64 / 50;
        for i in 0..n {
            rows.add(i, &[(i % 5) as u8], &[b'x'; 40]);
        }
        checkpoint(&mut rows, &store);
        rows.add(n, &[1], b"open");
        assert!(stored(&store) >= 2);
        rows.expire_through(n).unwrap();
        assert!(rows.is_empty());
        assert_eq!(rows.bytes_held(), ExpiringRows::new(7, Arc::clone(&store), 1, "test").bytes_held());
        assert!((0..5u8).all(|k| rows.rows(&[k]).is_empty()));
        rows.add(n + 1, &[1], b"after");
        assert_eq!(rows.rows(&[1]), [(b"after".to_vec(), 1)]);
        let record = checkpoint(&mut rows, &store);
        assert_eq!(stored(&store), 1, "only the segment with the row that came after");
        assert_eq!(restored(&store, &record).unwrap().rows(&[1]), [(b"after".to_vec(), 1)]);
    }

    /// Without checkpoints nothing is written and memory follows the rows alive.
    #[test]
    fn without_checkpoints_segments_leave_with_their_rows() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut rows = ExpiringRows::new(7, Arc::clone(&store), 0, "test");
        for i in 0..100_000i64 {
            rows.add(i, &i.to_be_bytes()[6..], &[0u8; 50]);
            if i % 1000 == 0 {
                rows.expire_through(i - 5001).unwrap();
            }
        }
        assert!(rows.sealed.len() <= 3, "{} segments kept", rows.sealed.len());
        assert!(rows.len() <= 6000 && rows.dead.is_empty());
        assert_eq!(stored(&store), 0);
    }

    /// A damaged segment, or one the record does not know, is a corrupt checkpoint.
    #[test]
    fn a_damaged_segment_is_refused() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut rows = ExpiringRows::new(7, Arc::clone(&store), 1, "test");
        rows.add(5, b"k", b"row");
        let record = checkpoint(&mut rows, &store);
        let key = rows.segment_key(0);
        let value = store.get(&key).unwrap().unwrap();
        let mut wb = WriteBatch::default();
        wb.put(key.clone(), value[..value.len() - 1].to_vec());
        store.write(wb).unwrap();
        assert!(restored(&store, &record).is_err());
        let mut wb = WriteBatch::default();
        wb.put(key, value.clone());
        wb.put(rows.segment_key(1), value);
        store.write(wb).unwrap();
        let err = restored(&store, &record).err().expect("a segment past the record's");
        assert_eq!(err.state, crate::error::SqlState::DATA_CORRUPTED);
    }
}
