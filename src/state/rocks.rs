//! The RocksDB [`StateStore`], one database under `<data-dir>/state`.
//!
//! Every write goes through the write-ahead log, so a batch that `write` acknowledged survives
//! `kill -9`; `storage.sync_writes` adds an fsync per batch for power loss. Batches marked
//! `skip_wal` (view rows and operator state, restored from checkpoints) skip the log. Scans read through an
//! iterator, which RocksDB pins to one implicit snapshot. Large values (segments of append-only
//! relations) live in blob files beside the LSM tree.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, Options, ReadOptions, WriteOptions, DB};

use super::store::{KeyRange, ScanControl, StateStore, Visitor, WriteBatch, WriteOp};
use crate::config::StorageConfig;
use crate::error::{Result, WeirError};

/// Values at least this large are kept in blob files rather than in the LSM tree.
const BLOB_MIN_BYTES: u64 = 64 << 10;

pub struct RocksStore {
    db: DB,
    sync_writes: bool,
    block_cache: Cache,
}

impl RocksStore {
    pub fn open(dir: &Path, config: &StorageConfig) -> Result<RocksStore> {
        std::fs::create_dir_all(dir).map_err(|e| WeirError::io(format!("cannot create {}: {e}", dir.display())))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.set_bottommost_compression_type(rocksdb::DBCompressionType::Zstd);
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
        let mut table_opts = BlockBasedOptions::default();
        let block_cache = Cache::new_lru_cache(config.block_cache_mb.max(8) << 20);
        table_opts.set_block_cache(&block_cache);
        table_opts.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table_opts);
        let db = DB::open(&opts, dir).map_err(|e| {
            WeirError::new(
                crate::error::SqlState::DATA_CORRUPTED,
                format!("cannot open state store at {}: {e}", dir.display()),
            )
        })?;
        Ok(RocksStore { db, sync_writes: config.sync_writes, block_cache })
    }
}

impl StateStore for RocksStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    fn persist(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }

    /// A RocksDB checkpoint: memtables flushed (so writes that skipped the WAL are in it), SST
    /// and blob files hard-linked into `dir`, the MANIFEST copied.
    fn checkpoint(&self, dir: &Path) -> Result<()> {
        let checkpoint = rocksdb::checkpoint::Checkpoint::new(&self.db)?;
        checkpoint.create_checkpoint(dir)?;
        Ok(())
    }

    /// One iterator (so one snapshot) for every range: it seeks to each range's start.
    fn scan_ranges(&self, ranges: &[KeyRange], visit: &mut Visitor<'_>) -> Result<()> {
        let mut read_opts = ReadOptions::default();
        // The iterator stops at the last range's end, not at the next table's first key.
        if ranges.iter().all(|r| r.end.is_some()) {
            if let Some(end) = ranges.iter().filter_map(|r| r.end.clone()).max() {
                read_opts.set_iterate_upper_bound(end);
            }
        }
        let mut iter = self.db.raw_iterator_opt(read_opts);
        for range in ranges {
            iter.seek(&range.start);
            while iter.valid() {
                let (Some(k), Some(v)) = (iter.key(), iter.value()) else {
                    break;
                };
                if !range.contains(k) {
                    break;
                }
                if visit(k, v)? == ScanControl::Stop {
                    return Ok(iter.status()?);
                }
                iter.next();
            }
            iter.status()?;
        }
        Ok(())
    }

    fn last_key(&self, range: &KeyRange) -> Result<Option<Vec<u8>>> {
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
        iter.status()?;
        Ok(iter.key().filter(|k| range.contains(k)).map(|k| k.to_vec()))
    }

    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        self.db.multi_get(keys).into_iter().map(|v| v.map_err(WeirError::from)).collect()
    }

    fn approximate_bytes(&self) -> u64 {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        property("rocksdb.estimate-live-data-size") + property("rocksdb.cur-size-all-mem-tables")
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
        let mut wb = rocksdb::WriteBatch::default();
        let skip_wal = batch.skip_wal;
        for op in batch.ops {
            match op {
                WriteOp::Put(k, v) => wb.put(k, v),
                WriteOp::Delete(k) => wb.delete(k),
                WriteOp::DeleteRange(s, e) => wb.delete_range(s, e),
            }
        }
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
