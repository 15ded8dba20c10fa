//! The RocksDB [`StateStore`], one database under `<data-dir>/state`.
//!
//! Every write goes through the write-ahead log, so a batch that `write` acknowledged survives
//! `kill -9`; `storage.sync_writes` adds an fsync per batch for power loss. Batches marked
//! `skip_wal` (view rows and operator state, restored from checkpoints) skip the log. Scans read through an
//! iterator, which RocksDB pins to one implicit snapshot. Large values (segments of append-only
//! relations) live in blob files beside the LSM tree.
//!
//! While a checkpoint's snapshot is awaited, views' commits of later epochs are held in memory
//! ([`HeldWrites`], ADR 18): reads merge them over the database. They are released by writing
//! them to the database while they are still held (a reader sees the same value either way),
//! then dropping them; writers wait for that (`write_order`), readers do not.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rocksdb::{BlockBasedOptions, Cache, Options, ReadOptions, WriteOptions, DB};

use parking_lot::RwLock;

use super::held_writes::{Held, HeldCursor, HeldWrites};
use super::store::{KeyRange, PartReader, ScanControl, StateStore, Visitor, WriteBatch, WriteOp};
use crate::config::StorageConfig;
use crate::error::{Result, SqlState, WeirError};
use crate::types::Epoch;

/// Past this many bytes of held view commits, a view's next commit waits for the snapshot
/// ([`StateStore::has_room`]): views running ahead of a slow snapshot are slowed, memory does
/// not grow without bound.
const HELD_BYTES_LIMIT: usize = 256 << 20;

/// Values at least this large are kept in blob files rather than in the LSM tree.
const BLOB_MIN_BYTES: u64 = 64 << 10;

pub struct RocksStore {
    /// The database's directory (what [`RocksStore::writable`] probes).
    dir: PathBuf,
    db: DB,
    sync_writes: bool,
    block_cache: Cache,
    /// View commits after the cut of the checkpoint being snapshotted (None: none awaited).
    held: RwLock<Option<HeldWrites>>,
    /// Taken shared by every write and exclusively while held writes go into the database, so
    /// that no write comes between them and the database or is lost when they are dropped.
    /// Always taken before `held`.
    write_order: RwLock<()>,
}

impl RocksStore {
    pub fn open(dir: &Path, config: &StorageConfig) -> Result<RocksStore> {
        std::fs::create_dir_all(dir).map_err(|e| WeirError::io(format!("cannot create {}: {e}", dir.display())))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
        // Compactions run at a lower CPU priority than the views: on a machine the dataflow
        // keeps busy, the compactions after a checkpoint otherwise take the cores from the
        // views just when the checkpoint barrier passes (their freshness). They catch up in the
        // gaps; a backlog slows writes, RocksDB's own backpressure. Flushes keep the normal
        // priority: a checkpoint's snapshot waits for its memtable flush, and a sink commits
        // only once the snapshot is taken (at the lowest priority, a busy machine made that
        // wait 300 ms of a Kafka sink's end-to-end latency).
        let mut env = rocksdb::Env::new()?;
        env.lower_thread_pool_cpu_priority();
        opts.set_env(&env);
        opts.increase_parallelism(2);
        // Segments of append-only relations (megabytes each) go to blob files, uncompressed:
        // compaction then moves only keys, and storing a row costs no compression CPU.
        opts.set_enable_blob_files(true);
        opts.set_min_blob_size(BLOB_MIN_BYTES);
        opts.set_enable_blob_gc(true);
        // Operators look up many keys that do not exist yet (a new join row, a new group): a
        // bloom filter over the memtable answers those without searching its skip list.
        opts.set_memtable_prefix_bloom_ratio(0.1);
        opts.set_memtable_whole_key_filtering(true);
        // Every checkpoint flushes and snapshots the database, and each of those leaves lines in
        // RocksDB's own log and an edit in its MANIFEST. Left at RocksDB's defaults both grow for
        // as long as the server runs (the soak measured 17 MB of log in 20 minutes at one
        // checkpoint a second), and the MANIFEST, which every checkpoint uploads whole, would
        // only roll over at 1 GB. The log rolls over at 8 MiB and four files are kept; the
        // MANIFEST is rewritten compacted past 256 KiB (RocksDB then also bounds its space
        // amplification itself, `max_manifest_space_amp_pct`).
        opts.set_max_log_file_size(8 << 20);
        opts.set_keep_log_file_num(4);
        opts.set_max_manifest_file_size(256 << 10);
        let mut table_opts = BlockBasedOptions::default();
        let block_cache = Cache::new_lru_cache(config.block_cache_mb.max(8) << 20);
        table_opts.set_block_cache(&block_cache);
        table_opts.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table_opts);
        let db = DB::open(&opts, dir).map_err(|e| match WeirError::from(e.clone()) {
            full if full.state == SqlState::DISK_FULL => full,
            _ => WeirError::new(SqlState::DATA_CORRUPTED, format!("cannot open state store at {}: {e}", dir.display())),
        })?;
        Ok(RocksStore {
            dir: dir.to_path_buf(),
            db,
            sync_writes: config.sync_writes,
            block_cache,
            held: RwLock::new(None),
            write_order: RwLock::new(()),
        })
    }
}

impl StateStore for RocksStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let held = self.held.read();
        match held.as_ref().map_or(Held::NotHeld, |h| h.lookup(key)) {
            Held::Value(v) => Ok(Some(v.to_vec())),
            Held::Deleted => Ok(None),
            Held::NotHeld => Ok(self.db.get(key)?),
        }
    }

    fn persist(&self) -> Result<()> {
        self.release_held()?;
        Ok(self.db.flush()?)
    }

    fn hold_after(&self, cut: Epoch) -> Result<()> {
        {
            let mut held = self.held.write();
            if held.is_none() {
                *held = Some(HeldWrites::new(cut));
                return Ok(());
            }
        }
        // Not released (a checkpoint task that ended early): written now, before the cut, with
        // no write coming in between.
        self.until_space("the view commits held during a checkpoint", || {
            let _order = self.write_order.write();
            let mut held = self.held.write();
            if let Some(previous) = held.as_ref() {
                self.write_held(previous)?;
            }
            *held = Some(HeldWrites::new(cut));
            Ok(())
        })
    }

    fn throttle_held(&self) {
        if let Some(h) = self.held.write().as_mut() {
            h.aligned = true;
        }
    }

    fn has_room(&self, epoch: Epoch) -> bool {
        self.held
            .read()
            .as_ref()
            .is_none_or(|h| !h.aligned || !h.holds_epoch(Some(epoch)) || h.bytes() <= HELD_BYTES_LIMIT)
    }

    fn release_held(&self) -> Result<()> {
        // No write comes in until the held writes are in the database and dropped; reads go
        // on, and see the held values, which are the ones being written. While the disk is
        // full, other writes come in between attempts (and are refused, or held).
        self.until_space("the view commits held during a checkpoint", || {
            let _order = self.write_order.write();
            {
                let held = self.held.read();
                let Some(writes) = held.as_ref() else { return Ok(()) };
                crate::metrics::CHECKPOINT_HELD_BYTES.set(writes.bytes() as i64);
                self.write_held(writes)?;
            }
            *self.held.write() = None;
            Ok(())
        })
    }

    /// A RocksDB checkpoint: memtables flushed (so writes that skipped the WAL are in it), SST
    /// and blob files hard-linked into `dir`, the MANIFEST copied.
    fn checkpoint(&self, dir: &Path) -> Result<()> {
        let checkpoint = rocksdb::checkpoint::Checkpoint::new(&self.db)?;
        checkpoint.create_checkpoint(dir)?;
        Ok(())
    }

    fn scan_ranges(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        self.scan(ranges, visit, true)
    }

    fn scan_ranges_once(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        self.scan(ranges, visit, false)
    }

    fn scans_parts_in_parallel(&self) -> bool {
        true
    }

    /// One RocksDB snapshot, and the held writes, taken under their lock; each part read by
    /// its own iterator over that snapshot on its own thread (the first on the caller's). The
    /// first error (or panic) in a part stops the others at their next entry, with it.
    fn scan_parts_once(&self, parts: &[Vec<KeyRange>], readers: &mut [&mut dyn PartReader]) -> Result<()> {
        if parts.len() != readers.len() {
            return Err(WeirError::internal("a read in parts needs a reader per part"));
        }
        let (snapshot, mut cursors) = {
            let held = self.held.read();
            let cursors: Vec<Option<Vec<HeldCursor>>> = parts
                .iter()
                .map(|ranges| held.as_ref().map(|h| ranges.iter().map(|r| h.cursor(r)).collect()))
                .collect();
            (self.db.snapshot(), cursors)
        };
        let (failed, failure) = (AtomicBool::new(false), parking_lot::Mutex::new(None::<WeirError>));
        let read_part = |ranges: &[KeyRange], cursors: Option<Vec<HeldCursor>>, reader: &mut dyn PartReader| {
            let read = {
                let mut visit = |k: &[u8], v: &[u8]| match failed.load(Ordering::Acquire) {
                    // Another part failed: this one ends with its error.
                    true => {
                        Err(failure.lock().clone().unwrap_or_else(|| WeirError::internal("a part of a read failed")))
                    }
                    false => reader.visit(k, v),
                };
                let mut options = scan_options(ranges, false);
                options.set_snapshot(&snapshot);
                let iter = self.db.raw_iterator_opt(options);
                catch_unwind(AssertUnwindSafe(|| walk(iter, ranges, cursors, &mut visit)))
                    .unwrap_or_else(|_| Err(WeirError::internal("a part of a read panicked")))
            };
            if let Err(e) = &read {
                failure.lock().get_or_insert_with(|| e.clone());
                failed.store(true, Ordering::Release);
            }
            reader.end(read.clone());
            read
        };
        std::thread::scope(|scope| {
            let mut work = parts.iter().zip(cursors.drain(..)).zip(readers.iter_mut());
            let Some(((first, first_cursors), first_reader)) = work.next() else {
                return Ok(());
            };
            let others: Vec<_> = work
                .map(|((ranges, cursors), reader)| {
                    let reader: &mut dyn PartReader = &mut **reader;
                    let spawned = std::thread::Builder::new()
                        .name("weir-scan".into())
                        .spawn_scoped(scope, || read_part(ranges, cursors, &mut *reader));
                    spawned.map_err(WeirError::from)
                })
                .collect();
            let mut result = read_part(first, first_cursors, &mut **first_reader);
            for other in others {
                let read = other.and_then(|thread| {
                    thread.join().unwrap_or_else(|_| Err(WeirError::internal("a part of a read panicked")))
                });
                result = result.and(read);
            }
            result
        })
    }

    fn last_key(&self, range: &KeyRange) -> Result<Option<Vec<u8>>> {
        let held = self.held.read();
        let mut iter = self.db.raw_iterator();
        match &range.end {
            // The last key before the end: seek_for_prev lands at or before it.
            Some(end) => {
                iter.seek_for_prev(end);
                if iter.valid() && iter.key() == Some(end.as_slice()) {
                    iter.prev();
                }
            }
            None => iter.seek_to_last(),
        }
        // Passing keys that held writes delete.
        let mut stored = None;
        while let Some(k) = iter.key().filter(|k| range.contains(k)) {
            if held.as_ref().is_none_or(|h| h.lookup(k) != Held::Deleted) {
                stored = Some(k.to_vec());
                break;
            }
            iter.prev();
        }
        iter.status()?;
        let held_last = held.as_ref().and_then(|h| h.last_key(range));
        Ok(stored.max(held_last))
    }

    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        let held = self.held.read();
        let Some(h) = held.as_ref() else {
            return self.db.multi_get(keys).into_iter().map(|v| v.map_err(WeirError::from)).collect();
        };
        let mut values = vec![None; keys.len()];
        let mut stored = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            match h.lookup(key) {
                Held::Value(v) => values[i] = Some(v.to_vec()),
                Held::Deleted => {}
                Held::NotHeld => stored.push(i),
            }
        }
        let read = self.db.multi_get(stored.iter().map(|&i| &keys[i]));
        for (i, value) in stored.into_iter().zip(read) {
            values[i] = value?;
        }
        Ok(values)
    }

    fn approximate_bytes(&self) -> u64 {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        property("rocksdb.estimate-live-data-size") + property("rocksdb.cur-size-all-mem-tables")
    }

    fn approximate_range_bytes(&self, start: &[u8], end: &[u8]) -> u64 {
        self.db.get_approximate_sizes(&[rocksdb::Range::new(start, end)]).first().copied().unwrap_or(0)
    }

    fn memory_bytes(&self) -> Vec<(&'static str, u64)> {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        vec![
            ("memtables", property("rocksdb.cur-size-all-mem-tables")),
            ("block_cache", self.block_cache.get_usage() as u64),
            ("table_readers", property("rocksdb.estimate-table-readers-mem")),
        ]
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_attempt(&mut Some(batch))
    }

    fn write_waiting(&self, batch: WriteBatch) -> Result<()> {
        let mut batch = Some(batch);
        self.until_space("a view's or sink's commit", || {
            if crate::fault::fails("store.read_only") {
                // What RocksDB reports once the file system turned read-only under it.
                return Err(std::io::Error::from_raw_os_error(libc::EROFS).into());
            }
            self.write_attempt(&mut batch)
        })
    }
}

impl RocksStore {
    /// One iterator (so one snapshot) for every range: it seeks to each range's start. Held
    /// writes are taken with the iterator, under their lock, and merged in. `fill_cache`:
    /// whether the blocks read go into the block cache.
    fn scan(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>, fill_cache: bool) -> Result<()> {
        let (iter, cursors) = {
            let held = self.held.read();
            let cursors = held.as_ref().map(|h| ranges.iter().map(|r| h.cursor(r)).collect::<Vec<_>>());
            (self.db.raw_iterator_opt(scan_options(ranges, fill_cache)), cursors)
        };
        walk(iter, ranges, cursors, visit)
    }

    /// One attempt at writing `slot`'s batch: into the held writes if they hold its epoch
    /// (the batch is then taken), otherwise to the database (and over any held write it
    /// shadows, once it is in). Locks are let go before it returns, so a caller may try again.
    fn write_attempt(&self, slot: &mut Option<WriteBatch>) -> Result<()> {
        let batch = slot.as_ref().expect("a batch not yet written");
        let _order = self.write_order.read();
        {
            let held = self.held.read();
            match held.as_ref() {
                None => {
                    drop(held);
                    return self.write_now(batch);
                }
                // Written to the database under the read lock, so no held write of the same
                // keys comes in between.
                Some(h) if !h.holds_epoch(batch.epoch) && !h.shadows_any(&batch.ops) => return self.write_now(batch),
                Some(_) => {}
            }
        }
        let mut held = self.held.write();
        match held.as_mut() {
            Some(h) if h.holds_epoch(batch.epoch) => {
                h.apply(slot.take().expect("a batch").ops);
                Ok(())
            }
            Some(h) => {
                // A write of the store's own (a table, the log) or of an epoch up to the cut:
                // to the database now, and over any held write it shadows (after: a refused
                // write must not show through the held writes).
                self.write_now(batch)?;
                h.apply_direct(&batch.ops);
                Ok(())
            }
            None => {
                drop(held);
                self.write_now(batch)
            }
        }
    }

    /// Writes `batch` to the database.
    fn write_now(&self, batch: &WriteBatch) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::default();
        for op in &batch.ops {
            match op {
                WriteOp::Put(k, v) => wb.put(k, v),
                WriteOp::Delete(k) => wb.delete(k),
                WriteOp::DeleteRange(s, e) => wb.delete_range(s, e),
            }
        }
        self.write_rocks(wb, batch.skip_wal)
    }

    /// Runs `attempt` (a write what runs in memory already counts as done: `what`) until it is
    /// not refused for want of space (53100), once a second, locks let go in between: the view
    /// or checkpoint waits while reads go on, and statements' own writes are refused. RocksDB
    /// takes writes again by itself once space is freed (its free-space check runs every 5 s).
    /// A file system that was read-only, or a store still refusing a minute after the
    /// directory takes writes again, does not come back in this process: it stops, as after a
    /// crash ([`super::store::stop_after_refused_write`]), to be started again by its
    /// supervisor and lose nothing.
    fn until_space(&self, what: &str, mut attempt: impl FnMut() -> Result<()>) -> Result<()> {
        let mut waiting = false;
        let mut writable_since: Option<Instant> = None;
        loop {
            match attempt() {
                Err(e) if e.state == SqlState::DISK_FULL => {
                    if !waiting {
                        waiting = true;
                        crate::metrics::DISK_FULL.set(1);
                        tracing::error!("{what} waits for the data directory to take writes: {}", e.message);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    if !self.writable() {
                        writable_since = None;
                        continue;
                    }
                    let since = *writable_since.get_or_insert_with(Instant::now);
                    if e.message.contains("read-only") || since.elapsed() > Duration::from_secs(60) {
                        super::store::stop_after_refused_write(
                            &format!(
                                "{what} (the data directory takes writes again, the store does not until a restart)"
                            ),
                            &e,
                        );
                    }
                }
                done => {
                    if waiting {
                        crate::metrics::DISK_FULL.set(0);
                        tracing::info!("{what} written: the data directory takes writes again");
                    }
                    return done;
                }
            }
        }
    }

    /// Whether the database's directory takes a write now: a file of 256 KiB written, synced
    /// and removed.
    fn writable(&self) -> bool {
        use std::io::Write;
        let probe = self.dir.join(".weir-write-probe");
        let written =
            std::fs::File::create(&probe).and_then(|mut f| f.write_all(&[0u8; 256 << 10]).and_then(|()| f.sync_all()));
        let _ = std::fs::remove_file(&probe);
        written.is_ok()
    }

    /// Writes held view commits to the database (skipping the log, as view commits do).
    fn write_held(&self, held: &HeldWrites) -> Result<()> {
        if held.is_empty() {
            return Ok(());
        }
        let mut wb = rocksdb::WriteBatch::default();
        held.ranges().for_each(|(start, end)| wb.delete_range(start, end));
        for (k, v) in held.entries() {
            match v {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            }
        }
        self.write_rocks(wb, true)
    }

    fn write_rocks(&self, wb: rocksdb::WriteBatch, skip_wal: bool) -> Result<()> {
        let mut opts = WriteOptions::default();
        if skip_wal {
            opts.disable_wal(true);
        } else {
            opts.set_sync(self.sync_writes);
        }
        self.db.write_opt(wb, &opts)?;
        Ok(())
    }
}

/// Read options for a scan of `ranges`: the iterator stops at the last range's end, not at
/// the next table's first key.
fn scan_options(ranges: &[KeyRange], fill_cache: bool) -> ReadOptions {
    let mut read_opts = ReadOptions::default();
    read_opts.fill_cache(fill_cache);
    if ranges.iter().all(|r| r.end.is_some()) {
        if let Some(end) = ranges.iter().filter_map(|r| r.end.clone()).max() {
            read_opts.set_iterate_upper_bound(end);
        }
    }
    read_opts
}

/// Gives `visit` the entries of `ranges` from `iter`, in order, with the held writes
/// (`cursors`, one per range, taken with the iterator's snapshot) merged in.
fn walk(
    mut iter: rocksdb::DBRawIterator<'_>,
    ranges: &[KeyRange],
    mut cursors: Option<Vec<HeldCursor>>,
    visit: &mut Visitor<'_>,
) -> Result<()> {
    for (i, range) in ranges.iter().enumerate() {
        let mut cursor = cursors.as_mut().map(|c| &mut c[i]);
        iter.seek(&range.start);
        while iter.valid() {
            let (Some(k), Some(v)) = (iter.key(), iter.value()) else {
                break;
            };
            if !range.contains(k) {
                break;
            }
            let control = match cursor.as_deref_mut() {
                None => visit(k, v)?,
                Some(cursor) => {
                    if cursor.visit_below(Some(k), visit)? == ScanControl::Stop {
                        return Ok(iter.status()?);
                    }
                    match cursor.at(k) {
                        Held::Value(held) => visit(k, held)?,
                        Held::Deleted => ScanControl::Continue,
                        Held::NotHeld => visit(k, v)?,
                    }
                }
            };
            if control == ScanControl::Stop {
                return Ok(iter.status()?);
            }
            iter.next();
        }
        iter.status()?;
        if let Some(cursor) = cursor {
            if cursor.visit_below(None, visit)? == ScanControl::Stop {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(epoch: Option<Epoch>, key: &[u8], value: &[u8]) -> WriteBatch {
        let mut wb = WriteBatch { skip_wal: true, epoch, ..Default::default() };
        wb.put(key.to_vec(), value.to_vec());
        wb
    }

    fn scan(store: &RocksStore, start: &[u8], end: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        crate::state::store::entries_in(store, start, end)
    }

    /// A part's reader that keeps what it is given; the first one, at its first entry, writes
    /// into the second part's range and tells the second, which waits for that.
    struct Reader<'a> {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        ended: Option<Result<()>>,
        writer: Option<(&'a RocksStore, std::sync::mpsc::Sender<()>)>,
        waits: Option<std::sync::mpsc::Receiver<()>>,
    }

    impl PartReader for Reader<'_> {
        fn visit(&mut self, key: &[u8], value: &[u8]) -> Result<ScanControl> {
            if let Some((store, wrote)) = self.writer.take() {
                store.write(put(None, &[b'k', 60], b"late")).unwrap();
                let mut delete = WriteBatch::default();
                delete.delete(vec![b'k', 70]);
                store.write(delete).unwrap();
                wrote.send(()).unwrap();
            }
            if let Some(written) = self.waits.take() {
                written.recv().unwrap();
            }
            self.entries.push((key.to_vec(), value.to_vec()));
            Ok(ScanControl::Continue)
        }
        fn end(&mut self, read: Result<()>) {
            assert!(self.ended.replace(read).is_none(), "told its end once");
        }
    }

    /// A read in parts gives every entry once, each part's held writes merged in, all from
    /// the snapshot taken when it began: a write and a delete made while it runs, in a part
    /// not yet read, are not seen.
    #[test]
    fn parts_read_every_entry_once_from_one_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(&dir.path().join("state"), &StorageConfig::default()).unwrap();
        let key = |i: u8| vec![b'k', i];
        for i in 0..100 {
            store.write(put(Some(1), &key(i), b"1")).unwrap();
        }
        store.hold_after(2).unwrap();
        let mut held = WriteBatch { skip_wal: true, epoch: Some(2), ..Default::default() };
        held.put(key(5), b"2".to_vec());
        held.delete(key(7));
        held.put(key(55), b"2".to_vec());
        held.delete(key(57));
        store.write(held).unwrap();
        let parts = vec![
            vec![KeyRange { start: key(0), end: Some(key(50)) }],
            vec![KeyRange { start: key(50), end: Some(key(255)) }],
        ];
        let (wrote, written) = std::sync::mpsc::channel();
        let mut first = Reader { entries: vec![], ended: None, writer: Some((&store, wrote)), waits: None };
        let mut second = Reader { entries: vec![], ended: None, writer: None, waits: Some(written) };
        store.scan_parts_once(&parts, &mut [&mut first, &mut second]).unwrap();
        let expected = |range: std::ops::Range<u8>| -> Vec<(Vec<u8>, Vec<u8>)> {
            range
                .filter(|&i| i != 7 && i != 57)
                .map(|i| (key(i), if i == 5 || i == 55 { b"2".to_vec() } else { b"1".to_vec() }))
                .collect()
        };
        assert_eq!(first.entries, expected(0..50), "the first part, with its held writes");
        assert_eq!(second.entries, expected(50..100), "the second, with its own, as it was when the read began");
        assert!(matches!((&first.ended, &second.ended), (Some(Ok(())), Some(Ok(())))));
        assert_eq!(store.get(&key(60)).unwrap(), Some(b"late".to_vec()));
    }

    /// A flush per checkpoint, for as long as the server runs, leaves the MANIFEST (uploaded
    /// whole with every checkpoint) bounded: RocksDB rewrites it compacted past 256 KiB.
    #[test]
    fn the_manifest_stays_small_however_many_checkpoints_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let store = RocksStore::open(&path, &StorageConfig::default()).unwrap();
        let manifest_bytes = || -> u64 {
            std::fs::read_dir(&path)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("MANIFEST-"))
                .map(|e| e.metadata().unwrap().len())
                .max()
                .unwrap_or(0)
        };
        let mut largest = 0;
        for i in 0u32..3000 {
            store.write(put(None, &i.to_be_bytes(), b"v")).unwrap();
            store.persist().unwrap();
            largest = largest.max(manifest_bytes());
        }
        assert!(largest > 128 << 10, "the test wrote too few edits to reach the limit: {largest} bytes");
        assert!(largest < 320 << 10, "the MANIFEST grew to {largest} bytes");
    }

    /// A snapshot taken while commits after the cut are held holds the store exactly at the
    /// cut; reads see the held commits all along; releasing them writes them.
    #[test]
    fn commits_after_the_cut_stay_out_of_the_snapshot_and_reads_see_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(&dir.path().join("state"), &StorageConfig::default()).unwrap();
        store.write(put(Some(1), b"v/a", b"1")).unwrap();
        store.write(put(Some(1), b"v/b", b"1")).unwrap();
        store.hold_after(2).unwrap();
        store.write(put(Some(2), b"v/c", b"2")).unwrap();
        store.write(put(Some(3), b"v/a", b"3")).unwrap();
        let mut delete = WriteBatch { skip_wal: true, epoch: Some(3), ..Default::default() };
        delete.delete(b"v/b".to_vec());
        delete.put(b"v/d".to_vec(), b"3".to_vec());
        store.write(delete).unwrap();
        // A table's write, not a view's: to the database at once.
        store.write(put(None, b"t/x", b"9")).unwrap();

        let live =
            vec![(b"v/a".to_vec(), b"3".to_vec()), (b"v/c".to_vec(), b"2".to_vec()), (b"v/d".to_vec(), b"3".to_vec())];
        assert_eq!(scan(&store, b"v/", b"v0"), live);
        assert_eq!(store.get(b"v/a").unwrap(), Some(b"3".to_vec()));
        assert_eq!(store.get(b"v/b").unwrap(), None);
        let keys = [b"v/a".to_vec(), b"v/b".to_vec(), b"v/c".to_vec(), b"t/x".to_vec()];
        assert_eq!(
            store.multi_get(&keys).unwrap(),
            vec![Some(b"3".to_vec()), None, Some(b"2".to_vec()), Some(b"9".to_vec())]
        );
        let range = KeyRange { start: b"v/".to_vec(), end: Some(b"v/c".to_vec()) };
        assert_eq!(store.last_key(&range).unwrap(), Some(b"v/a".to_vec()), "v/b is deleted by a held write");
        let all_v = KeyRange { start: b"v/".to_vec(), end: Some(b"v0".to_vec()) };
        assert_eq!(store.last_key(&all_v).unwrap(), Some(b"v/d".to_vec()), "v/d exists only held");

        let snapshot_dir = dir.path().join("snapshot");
        store.checkpoint(&snapshot_dir).unwrap();
        store.release_held().unwrap();
        assert_eq!(scan(&store, b"v/", b"v0"), live, "the same after the release");
        drop(store);

        let snapshot = RocksStore::open(&snapshot_dir, &StorageConfig::default()).unwrap();
        assert_eq!(
            scan(&snapshot, b"", b"z"),
            vec![
                (b"t/x".to_vec(), b"9".to_vec()),
                (b"v/a".to_vec(), b"1".to_vec()),
                (b"v/b".to_vec(), b"1".to_vec()),
                (b"v/c".to_vec(), b"2".to_vec()),
            ],
            "the snapshot holds every view write up to the cut, none after it"
        );
    }
}
