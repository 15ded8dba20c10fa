//! The [`StateStore`] trait: an ordered key-value store of bytes.
//!
//! Contract: a [`WriteBatch`] is applied atomically and durably (it survives a process crash once
//! `write` returns), unless it is marked [`WriteBatch::skip_wal`]; a prefix scan sees one consistent snapshot of the store. Keys follow the
//! layout in [`super::keys`]. Implementations: [`super::rocks::RocksStore`] (the server) and
//! [`super::memory::MemoryStore`] (unit tests).

use crate::error::Result;

/// One change in a [`WriteBatch`].
#[derive(Debug, Clone)]
pub enum WriteOp {
    Put(Vec<u8>, Value),
    Delete(Vec<u8>),
    /// Deletes every key in `[start, end)`.
    DeleteRange(Vec<u8>, Vec<u8>),
}

impl WriteOp {
    /// The key it writes (the first, for a range).
    pub fn key(&self) -> &[u8] {
        match self {
            WriteOp::Put(k, _) | WriteOp::Delete(k) | WriteOp::DeleteRange(k, _) => k,
        }
    }
}

/// A put's value: owned by the batch, or shared with the operator that keeps it in memory too
/// (a sealed segment of rows, `state::expiring_rows`: megabytes at a checkpoint that the view's
/// thread would otherwise copy into the batch). Either reads as its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Owned(Vec<u8>),
    Shared(bytes::Bytes),
}

impl Value {
    /// The bytes as a vector of their own (a copy only when shared).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Value::Owned(v) => v,
            Value::Shared(b) => b.to_vec(),
        }
    }
}

impl std::ops::Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Value::Owned(v) => v,
            Value::Shared(b) => b,
        }
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Owned(v)
    }
}

/// Changes applied together or not at all.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub ops: Vec<WriteOp>,
    /// Losing these writes in a crash does no harm: a restart restores what they hold from the
    /// newest checkpoint (a view's rows and its operators' state) or reads it again from the
    /// connector (a source's chunk with its offset and change-log entry), so the store may skip
    /// its write-ahead log for them. Atomicity still holds: the batch is applied whole or not
    /// at all. (A checkpoint flushes the memtables, so its snapshot holds them.)
    pub skip_wal: bool,
    /// The epoch whose commit this is, for a view's commit (None: any other write). While a
    /// checkpoint's snapshot is awaited, the store holds the commits of later epochs in memory
    /// ([`StateStore::hold_after`]).
    pub epoch: Option<crate::types::Epoch>,
}

impl WriteBatch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(WriteOp::Put(key, Value::Owned(value)));
    }
    /// A put of bytes the caller keeps too: the batch shares them instead of copying.
    pub fn put_shared(&mut self, key: Vec<u8>, value: bytes::Bytes) {
        self.ops.push(WriteOp::Put(key, Value::Shared(value)));
    }
    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(WriteOp::Delete(key));
    }
    pub fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) {
        self.ops.push(WriteOp::DeleteRange(start, end));
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

/// Whether a scan should go on after the entry it was just given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanControl {
    Continue,
    Stop,
}

/// The keys from `start` (included) to `end` (excluded; None: to the end of the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_ref().is_none_or(|end| key < end.as_slice())
    }
}

/// What a prefix scan calls with each entry's key and value.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<ScanControl> + 'a;

/// One part of a read in parts ([`StateStore::scan_parts_once`]): it is given the part's
/// entries, then the part's end, on the part's own thread where the store reads parts at once.
pub trait PartReader: Send {
    /// An entry of the part, in key order; [`ScanControl::Stop`] ends the part.
    fn visit(&mut self, key: &[u8], value: &[u8]) -> Result<ScanControl>;

    /// The part is over: `Ok` when every entry was given or the reader said stop, else the
    /// error that ended it (one part's error ends every part not yet over, with that error).
    /// Called once, unless the part could not be started at all (no thread for it): the
    /// store's call then returns the error.
    fn end(&mut self, read: Result<()>);
}

pub trait StateStore: Send + Sync + 'static {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Calls `visit` on every entry whose key starts with `prefix`, in key order, over one
    /// consistent snapshot.
    fn scan_prefix(&self, prefix: &[u8], visit: &mut Visitor<'_>) -> Result<()> {
        let range = KeyRange { start: prefix.to_vec(), end: super::keys::prefix_end(prefix) };
        self.scan_ranges(std::slice::from_ref(&range), visit)
    }

    /// Every entry whose key starts with `prefix`, as (the key past the prefix, value), in key
    /// order: a restore reading back a few large values (an operator's segments or parts).
    fn read_prefix(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut entries = Vec::new();
        self.scan_prefix(prefix, &mut |k, v| {
            entries.push((k[prefix.len()..].to_vec(), v.to_vec()));
            Ok(ScanControl::Continue)
        })?;
        Ok(entries)
    }

    /// Calls `visit` on every entry of each of `ranges`, the ranges in the order given and each
    /// in key order, all over one consistent snapshot; a [`ScanControl::Stop`] ends the whole
    /// scan.
    fn scan_ranges(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()>;

    /// [`StateStore::scan_ranges`] for a scan of a whole relation: what it reads is not kept
    /// in the store's caches, where it would push out the entries point reads and operators
    /// use (and a scan of a large relation would grow memory to the cache's size).
    fn scan_ranges_once(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        self.scan_ranges(ranges, visit)
    }

    /// Whether [`StateStore::scan_parts_once`] reads its parts at the same time (else one after
    /// the other, and a reader that waits on one part's consumer holds up the others).
    fn scans_parts_in_parallel(&self) -> bool {
        false
    }

    /// [`StateStore::scan_ranges_once`] of several parts, all from one consistent snapshot:
    /// part `i`'s ranges, in order, go to `readers[i]`, which is then told the part's end. A
    /// stop ends that part alone; an error ends every part not yet over, and is returned.
    /// Disjoint parts of one relation, so a query reads it with several threads. Here: one scan
    /// of every part's ranges in turn.
    fn scan_parts_once(&self, parts: &[Vec<KeyRange>], readers: &mut [&mut dyn PartReader]) -> Result<()> {
        if parts.len() != readers.len() {
            return Err(crate::error::WeirError::internal("a read in parts needs a reader per part"));
        }
        let ranges: Vec<KeyRange> = parts.iter().flatten().cloned().collect();
        let part_of: Vec<usize> = parts.iter().enumerate().flat_map(|(i, p)| std::iter::repeat_n(i, p.len())).collect();
        // The range being read, and the parts told their end (all before the current one).
        let (mut range, mut ended, mut stopped) = (0usize, 0usize, vec![false; parts.len()]);
        let read = self.scan_ranges_once(&ranges, &mut |k, v| {
            // The scan gives each range's entries in turn: the entry is in the first range
            // from the current one that holds it.
            while ranges.get(range).is_some_and(|r| !r.contains(k)) {
                range += 1;
            }
            let Some(&part) = part_of.get(range) else {
                return Err(crate::error::WeirError::internal("a scan gave a key outside its ranges"));
            };
            while ended < part {
                readers[ended].end(Ok(()));
                ended += 1;
            }
            if !stopped[part] && readers[part].visit(k, v)? == ScanControl::Stop {
                stopped[part] = true;
            }
            Ok(if stopped.iter().all(|&s| s) { ScanControl::Stop } else { ScanControl::Continue })
        });
        for reader in &mut readers[ended..] {
            reader.end(read.clone());
        }
        read
    }

    fn write(&self, batch: WriteBatch) -> Result<()>;

    /// Writes `batch`, which what runs in memory already counts as written (a view's commit,
    /// a sink's outbox): while the file system is full it waits and tries again rather than
    /// fail (a store on disk; others write at once). Runs on a blocking thread.
    fn write_waiting(&self, batch: WriteBatch) -> Result<()> {
        self.write(batch)
    }

    /// The greatest key in `range` (None: the range is empty).
    fn last_key(&self, range: &KeyRange) -> Result<Option<Vec<u8>>>;

    /// The values of `keys`, in order, from one snapshot where the store can.
    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Roughly how many bytes the store holds (for metrics).
    fn approximate_bytes(&self) -> u64 {
        0
    }

    /// Roughly how many bytes the store holds in keys from `start` up to `end` (its files'
    /// estimate: recent writes still in memory are not counted).
    fn approximate_range_bytes(&self, _start: &[u8], _end: &[u8]) -> u64 {
        0
    }

    /// Roughly how many bytes table `table`'s rows take in the store's files
    /// ([`StateStore::approximate_range_bytes`] over its key prefix).
    fn approximate_table_bytes(&self, table: super::keys::TableId) -> u64 {
        use super::keys::table_prefix;
        self.approximate_range_bytes(&table_prefix(table), &table_prefix(table + 1))
    }

    /// Memory the store itself uses, by part (for metrics and benchmarks).
    fn memory_bytes(&self) -> Vec<(&'static str, u64)> {
        vec![]
    }

    /// Makes the writes that skipped the write-ahead log durable (at a clean stop), so that
    /// nothing is read again after it.
    fn persist(&self) -> Result<()> {
        Ok(())
    }

    /// From now until [`StateStore::release_held`], batches of epochs after `cut`
    /// ([`WriteBatch::epoch`]) are held in memory, where reads see them, instead of written: a
    /// snapshot taken meanwhile holds every view exactly at `cut`, while views go on committing
    /// (ADR 18). A store that cannot hold writes writes them at once.
    fn hold_after(&self, _cut: crate::types::Epoch) -> Result<()> {
        Ok(())
    }

    /// Every view has committed the cut: from now on held writes past their bound make
    /// committers wait ([`StateStore::has_room`]). Before, nothing the snapshot waits for may
    /// wait for it.
    fn throttle_held(&self) {}

    /// Whether a commit of `epoch` may be written now: false while it would be held, every
    /// view has committed the cut and the held writes are past their bound (the committer
    /// waits, holding no lock, until the snapshot is taken and they are released).
    fn has_room(&self, _epoch: crate::types::Epoch) -> bool {
        true
    }

    /// Writes the held batches into the store, in one batch, and stops holding.
    fn release_held(&self) -> Result<()> {
        Ok(())
    }

    /// Writes a consistent snapshot of the whole store into the new directory `dir`, as a
    /// store that opens on its own (a checkpoint; writes that skipped the write-ahead log are
    /// in it too). Blocking.
    fn checkpoint(&self, dir: &std::path::Path) -> Result<()> {
        Err(crate::error::WeirError::internal(format!("this store cannot snapshot itself into {}", dir.display())))
    }
}

/// Every entry of `[start, end)` in `store`, in key order (tests of the stores).
#[cfg(test)]
pub fn entries_in(store: &dyn StateStore, start: &[u8], end: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let range = KeyRange { start: start.to_vec(), end: Some(end.to_vec()) };
    store
        .scan_ranges(&[range], &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(ScanControl::Continue)
        })
        .unwrap();
    out
}

/// The store refused a write that what runs in memory now counts as done (a view's epoch, the
/// commits held during a snapshot, a sink's outbox at a checkpoint): going on would give wrong
/// answers, or deliver wrong output, without a sign. The process stops, as after a crash, and
/// the next start restores everything from the newest checkpoint and replays what came after
/// it (ADR 11 item 11), losing nothing acknowledged. Exit code 70 (EX_SOFTWARE); a supervisor
/// (systemd, Kubernetes) starts it again. `what` says whose write it was.
pub fn stop_after_refused_write(what: &str, e: &crate::error::WeirError) -> ! {
    tracing::error!("{what} could not be written, so what runs in memory is ahead of the store; stopping the server: a restart restores everything from the newest checkpoint: {e}");
    eprintln!("weir: {what} could not be written: {e}; exiting (code 70)");
    std::process::exit(70);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a part was given, and how it ended.
    #[derive(Default)]
    struct Collected {
        keys: Vec<Vec<u8>>,
        stop_after: Option<usize>,
        fail_at: Option<Vec<u8>>,
        ended: Vec<Result<()>>,
    }

    impl PartReader for Collected {
        fn visit(&mut self, key: &[u8], _: &[u8]) -> Result<ScanControl> {
            if self.fail_at.as_deref() == Some(key) {
                return Err(crate::error::WeirError::new(crate::error::SqlState::DATA_CORRUPTED, "bad row"));
            }
            self.keys.push(key.to_vec());
            Ok(if self.stop_after == Some(self.keys.len()) { ScanControl::Stop } else { ScanControl::Continue })
        }
        fn end(&mut self, read: Result<()>) {
            self.ended.push(read);
        }
    }

    /// The one-after-the-other read in parts: each part's entries to its own reader, a part
    /// that says stop ends alone, every part is told its end once; an error ends the parts not
    /// yet over with it.
    #[test]
    fn parts_read_one_after_the_other_stop_alone_and_end_once() {
        let store = super::super::memory::MemoryStore::new();
        let mut wb = WriteBatch::default();
        for key in [b"a1", b"a2", b"a3", b"b1", b"b2", b"c1"] {
            wb.put(key.to_vec(), b"v".to_vec());
        }
        store.write(wb).unwrap();
        let range = |start: &[u8], end: &[u8]| vec![KeyRange { start: start.to_vec(), end: Some(end.to_vec()) }];
        let parts = [range(b"a", b"b"), range(b"b", b"c"), range(b"c", b"d")];
        let (mut first, mut second, mut third) =
            (Collected { stop_after: Some(1), ..Default::default() }, Collected::default(), Collected::default());
        store.scan_parts_once(&parts, &mut [&mut first, &mut second, &mut third]).unwrap();
        assert_eq!(first.keys, vec![b"a1".to_vec()]);
        assert_eq!(second.keys, vec![b"b1".to_vec(), b"b2".to_vec()]);
        assert_eq!(third.keys, vec![b"c1".to_vec()]);
        for part in [&first, &second, &third] {
            assert!(matches!(part.ended.as_slice(), [Ok(())]), "told its end once");
        }

        let (mut first, mut second, mut third) = (
            Collected::default(),
            Collected { fail_at: Some(b"b2".to_vec()), ..Default::default() },
            Collected::default(),
        );
        let failed = store.scan_parts_once(&parts, &mut [&mut first, &mut second, &mut third]).unwrap_err();
        assert_eq!(failed.state, crate::error::SqlState::DATA_CORRUPTED);
        assert!(matches!(first.ended.as_slice(), [Ok(())]), "over before the error");
        for part in [&second, &third] {
            assert!(matches!(part.ended.as_slice(), [Err(e)] if e.message == "bad row"), "ended by the error");
        }
        assert!(third.keys.is_empty());
    }
}
