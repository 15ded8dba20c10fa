//! [`KeyedState`]: an operator's state as ordered byte keys and values in the store, with a
//! bounded cache in front.
//!
//! Keys are stored as `[table id][vnode][key]`, where the vnode is the hash of the key's
//! *distribution prefix* (the join key, the group key), so that every entry sharing that prefix
//! sits together in one vnode and [`KeyedState::scan_prefix`] is one range read. A key comes
//! with its layout ([`KeyRef`]: which of its bytes are the distribution).
//!
//! Writes stay in `pending` until [`KeyedState::flush`] puts them into an epoch's write batch;
//! reads see them, and keep seeing them (in flight) for two more flushes, or one when the flush
//! is told the batch is in (`Flush::landed`: forgotten at the next), so the batch may be
//! written while the operator goes on, and the next epoch's flushed before it is in. A view
//! job gets its `Flush` only from its writes on their way ([`InFlight`](super::in_flight::InFlight)),
//! which lands the batch before last first: the rule this relies on is kept by a type. The cache
//! takes a write's value when it is forgotten; a key written again while in flight leaves the
//! cache, so that it never holds a value older than the store's for a key with no pending
//! write. Operator state is restored from checkpoints (ADR 11), so it needs to be in
//! the store only at a checkpoint barrier: a *write-back* table ([`KeyedState::write_back`],
//! all operator state) keeps its writes in memory across epochs and sends them to the store at
//! a checkpoint, or earlier when more than `capacity` are pending, or, when barriers come
//! more often than checkpoints, once pending for two barrier intervals and not written since
//! ([`KeyedState::write_back`]: a checkpoint barrier then flushes little, and a key still
//! changing, a running count, is not written at every settling, nor one its operator expects
//! to drop before the next checkpoint, [`KeyedState::flush_keeping`]); a key written and deleted
//! again before then, which the store is known not to hold, never reaches it. A write-back
//! table knows *exactly* which keys the store holds while they are few ([`StoredKeys`]: read
//! when it is opened if there are at most a few thousand, kept up to date at each flush; once
//! they pass `capacity`, or a few thousand without answering lookups, it stops tracking them
//! until the next start). A lookup of any
//! other key is then answered from memory, and its write and delete before the next flush
//! never reach the store, however many checkpoints have flushed the table before. (State that
//! is created and dropped between checkpoints, such as a short window's groups, then costs no
//! store operations; a join side holding a few keys answers the other side's many probes
//! without RocksDB.) Past `capacity` stored keys the table stops tracking them and asks the
//! store, with the cache remembering keys found absent. The cache holds at most `capacity`
//! clean entries and is emptied when it would grow past that, so memory stays bounded however
//! large the state is.
//!
//! Pending writes are hashed by distribution prefix and ordered under it (keys up to 32 bytes
//! held inline), so the entries under a prefix can be read first or last
//! ([`KeyedState::first_with_prefix`]) or dropped as one ([`KeyedState::delete_prefix`]).
//!
//! Many operators keep multiplicities (a value's count in a multiset, a row's in a join side or
//! a buffer): [`KeyedState::add_count`] keeps them in the one encoding of them
//! (`state::value::encode_count`), absent meaning 0.

use std::collections::{BTreeMap, VecDeque};

use smallvec::SmallVec;

use crate::types::hash::HashMap;
use std::sync::Arc;

mod pending;
mod stored_keys;

use self::pending::{flush_tag, write_stamp, InlineKey, Pending, Writes, NOT_IN_FLIGHT};
use self::stored_keys::StoredKeys;
use super::keys::{KeyRef, TableId};
use super::value::{decode_count, encode_count};

use super::store::{ScanControl, StateStore, Visitor, WriteBatch};
use crate::error::Result;
use crate::types::vnode::vnode_of;

/// How a view's operator state tables keep their writes (one value per server).
#[derive(Debug, Clone, Copy)]
pub struct OperatorStateSettings {
    /// Entries each table caches in memory (and pending writes before an early flush).
    pub cache_entries: usize,
    /// When pending writes go to the store at a barrier that is not a checkpoint (None: only
    /// at checkpoints, or past `cache_entries`).
    pub settling: Option<Settling>,
}

impl OperatorStateSettings {
    /// The settings for barriers every `barrier_interval` and checkpoints every
    /// `checkpoint_interval` (None: only at DDL and at a stop): write-back state settles after
    /// two barrier intervals when checkpoints are rarer than that, so a checkpoint barrier has
    /// only the last two intervals' writes to flush (ADR 18).
    pub fn new(
        cache_entries: usize,
        barrier_interval: std::time::Duration,
        checkpoint_interval: Option<std::time::Duration>,
    ) -> OperatorStateSettings {
        let after = barrier_interval.saturating_mul(2);
        let settling = checkpoint_interval
            .filter(|c| *c > after)
            .map(|checkpoint_interval| Settling { after, checkpoint_interval });
        OperatorStateSettings { cache_entries, settling }
    }
}

/// When a write-back table's writes settle ([`KeyedState::write_back`], ADR 18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settling {
    /// Writes pending this long, and not written again for as long, go to the store at any
    /// barrier.
    pub after: std::time::Duration,
    /// How often checkpoints come: state its operator expects to drop sooner need not settle
    /// ([`KeyedState::flush_keeping`]).
    pub checkpoint_interval: std::time::Duration,
}

/// What an operator's state flush is for ([`KeyedState::flush`]), as its view job knows. A
/// job gets one only from its [`InFlight`](super::in_flight::InFlight) writes, which keep the
/// rule that makes `landed` and forgetting at the flush after next true; the constants below
/// exist for tests only, so no other code can make one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flush {
    /// A checkpoint barrier: every write still held in memory goes to the store.
    pub checkpoint: bool,
    /// Every batch the earlier flushes handed out is in the store now, so the writes they put
    /// in it may be forgotten at this flush (else at the flush after next: they may still be
    /// on their way).
    pub(in crate::state) landed: bool,
}

impl Flush {
    /// An epoch's barrier, with earlier batches perhaps still on their way.
    #[cfg(test)]
    pub const EPOCH: Flush = Flush { checkpoint: false, landed: false };
    /// A checkpoint barrier, with earlier batches perhaps still on their way.
    #[cfg(test)]
    pub const CHECKPOINT: Flush = Flush { checkpoint: true, landed: false };
    /// An epoch's barrier by a caller that writes each batch before the next flush (tests).
    #[cfg(test)]
    pub const EPOCH_AFTER_WRITES: Flush = Flush { checkpoint: false, landed: true };
    /// A checkpoint barrier by a caller that writes each batch before the next flush (tests).
    #[cfg(test)]
    pub const CHECKPOINT_AFTER_WRITES: Flush = Flush { checkpoint: true, landed: true };
}

/// Past this many stored keys a table whose tracked keys answered no lookup between two
/// flushes that wrote (a join side that is only probed by prefix, rows added and expired) stops
/// tracking them: keeping the set costs a hash update per flushed write, and what else it saves
/// (a tombstone for a key written and deleted between flushes, a prefix read skipped) is rare
/// in such a table. A restored table holding more than this starts untracked.
const UNTRACKED_UNLESS_USED: usize = 4096;

/// A pending map's allocation kept across a flush, in prefixes.
const FEW_PREFIXES: usize = 1024;

pub struct KeyedState {
    table_id: TableId,
    store: Arc<dyn StateStore>,
    /// Writes not yet in the store: by distribution prefix (hashed), then by the rest of the
    /// key in order. A lookup hashes the prefix and searches the few entries sharing it,
    /// instead of comparing whole keys, which share long prefixes, down an ordered map.
    pending: HashMap<InlineKey, Writes>,
    /// How many writes are pending.
    pending_len: usize,
    /// Keep writes across epochs until more than `capacity` are pending.
    write_back: bool,
    /// Barriers this table has seen (its flushes).
    barriers: u64,
    /// When a write-back table's pending writes go to the store at a barrier that is not a
    /// checkpoint (None: only at checkpoints, or past `capacity`).
    settling: Option<Settling>,
    /// When each recent barrier came (while `settling` is set), oldest first.
    barrier_times: VecDeque<(u64, std::time::Instant)>,
    /// A write-back table's prefixes in the order they got pending writes, with the barrier
    /// count then: at a barrier that is not a checkpoint, those pending for longer than
    /// `settling.after` and not written since go to the store (see [`KeyedState::flush_settled`]);
    /// those written since go to the back, with the count of their last write (so the order is
    /// only roughly by count: one may settle a barrier late). Entries for prefixes flushed or
    /// emptied since are passed over.
    pending_since: VecDeque<(u64, InlineKey)>,
    /// Prefixes holding writes in flight, by the tag of the flush that put them into its batch
    /// (`in_flight[tag - 1]`), to forget at the second flush after it (or the next: [`Flush::landed`]).
    in_flight: [Vec<InlineKey>; 2],
    /// Which keys the store holds, when tracked (a write-back table's, while few).
    stored: StoredKeys,
    /// Lookups the tracked keys answered since the last flush: a table past
    /// [`UNTRACKED_UNLESS_USED`] stored keys that answered none stops tracking them.
    answered_absent: usize,
    /// Committed values read recently (None = known absent), by key.
    cache: HashMap<Vec<u8>, Option<Vec<u8>>>,
    capacity: usize,
}

impl KeyedState {
    pub fn new(table_id: TableId, store: Arc<dyn StateStore>, capacity: usize) -> KeyedState {
        KeyedState {
            table_id,
            store,
            pending: HashMap::default(),
            pending_len: 0,
            write_back: false,
            barriers: 0,
            settling: None,
            barrier_times: VecDeque::new(),
            pending_since: VecDeque::new(),
            in_flight: [Vec::new(), Vec::new()],
            stored: StoredKeys::Unknown,
            answered_absent: 0,
            cache: HashMap::default(),
            capacity: capacity.max(16),
        }
    }

    /// Makes this a write-back table: operator state, which needs to be in the store only at
    /// checkpoints. Which keys the store holds (a restored view's) is read once here, if they
    /// are at most [`UNTRACKED_UNLESS_USED`] (every shard's, as the shards share the table: a
    /// superset of this shard's, which is safe), so that a restore reads little; a table holding
    /// more starts untracked. With `settling`, writes pending long enough also go to the store
    /// at barriers that are not checkpoints ([`Settling`], ADR 18).
    pub fn write_back(mut self, settling: Option<Settling>) -> Result<KeyedState> {
        self.write_back = true;
        self.settling = settling;
        self.barrier_times = self.settling.iter().map(|_| (0, std::time::Instant::now())).collect();
        let mut stored = StoredKeys::none();
        let limit = self.capacity.min(UNTRACKED_UNLESS_USED);
        self.store.scan_prefix(&self.table_id.to_be_bytes(), &mut |k, _| {
            let vnode = u16::from_be_bytes([k[4], k[5]]);
            stored.record(&k[6..], vnode, true, limit);
            Ok(if matches!(stored, StoredKeys::Unknown) { ScanControl::Stop } else { ScanControl::Continue })
        })?;
        self.stored = stored;
        Ok(self)
    }

    /// The table's id and store, for a component that keeps some of the table's values itself
    /// and writes them straight into a flush's batch ([`super::expiring_rows::ExpiringRows`]);
    /// its keys must never be written through this table too.
    pub fn table(&self) -> (TableId, Arc<dyn StateStore>) {
        (self.table_id, Arc::clone(&self.store))
    }

    /// How many entries the cache holds at most (a budget other caches of the operator follow).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The store key of `key`, whose first `distribution_len` bytes choose its vnode.
    fn full_key(&self, key: &[u8], distribution_len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + key.len());
        out.extend_from_slice(&self.table_id.to_be_bytes());
        out.extend_from_slice(&vnode_of(&key[..distribution_len.min(key.len())]).to_be_bytes());
        out.extend_from_slice(key);
        out
    }

    /// The pending write of `key`, if any.
    fn pending_write(&self, key: &[u8], distribution_len: usize) -> Option<&Pending> {
        let (prefix, rest) = key.split_at(distribution_len.min(key.len()));
        self.pending.get(prefix)?.get(rest)
    }

    pub fn get(&mut self, key: KeyRef<'_>) -> Result<Option<Vec<u8>>> {
        let (key, distribution_len) = (key.bytes(), key.distribution_len());
        if let Some(p) = self.pending_write(key, distribution_len) {
            return Ok(p.value.clone());
        }
        if let Some(v) = self.cache.get(key) {
            return Ok(v.clone());
        }
        if self.stored.holds(key) == Some(false) {
            self.answered_absent += 1;
            return Ok(None);
        }
        let v = self.store.get(&self.full_key(key, distribution_len))?;
        self.remember(key.to_vec(), v.clone());
        Ok(v)
    }

    pub fn put(&mut self, key: KeyRef<'_>, value: Vec<u8>) {
        self.write(key.bytes(), key.distribution_len(), Some(value), None);
    }

    /// Puts a key the store cannot hold (the caller made it new, as a join numbers its rows), so
    /// no lookup asks whether it is stored, and deleting it before a spill reaches no store.
    pub fn put_new(&mut self, key: KeyRef<'_>, value: Vec<u8>) {
        self.write(key.bytes(), key.distribution_len(), Some(value), Some(false));
    }

    pub fn delete(&mut self, key: KeyRef<'_>) {
        self.write(key.bytes(), key.distribution_len(), None, None);
    }

    /// Puts (`Some`) or deletes (`None`) `key`'s value, in `pending`. `stored` is whether the
    /// store may hold the key, when the caller knows.
    fn write(&mut self, key: &[u8], distribution_len: usize, value: Option<Vec<u8>>, stored: Option<bool>) {
        let (prefix, rest) = key.split_at(distribution_len.min(key.len()));
        if let Some(inner) = self.pending.get_mut(prefix) {
            if let Some(pending) = inner.get_mut(rest) {
                if pending.in_flight != NOT_IN_FLIGHT {
                    // On its way to the store: kept (reads must not fall through to the store
                    // before it is in), pending again. Until the batch is in, the store may
                    // still hold the key's older value (an in-flight delete), so a delete of it
                    // is kept as a delete, not forgotten.
                    pending.in_flight = NOT_IN_FLIGHT;
                    pending.maybe_stored = true;
                    pending.value = value;
                    pending.written_at = write_stamp(self.barriers);
                    self.pending_len += 1;
                    // Its landed value never reaches the cache now (only a write forgotten as
                    // it was flushed does), so the cache must not keep an older one: this write
                    // may be dropped unwritten (`delete_prefix`) and the key read again.
                    self.cache.remove(key);
                    return;
                }
                if value.is_none() && !pending.maybe_stored {
                    // Never written to the store: forgetting the pending write is deleting it.
                    inner.remove(rest);
                    self.pending_len -= 1;
                    if inner.is_empty() {
                        self.pending.remove(prefix);
                    }
                } else {
                    pending.value = value;
                    pending.written_at = write_stamp(self.barriers);
                }
                return;
            }
        }
        debug_assert!(stored != Some(false) || self.stored.holds(key) != Some(true), "a key declared new is stored");
        let maybe_stored = stored.unwrap_or_else(|| Self::may_hold(&self.stored, &self.cache, key));
        if value.is_none() && !maybe_stored {
            return;
        }
        let inner = match self.pending.entry(InlineKey::from_slice(prefix)) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                if self.settling.is_some() {
                    self.pending_since.push_back((self.barriers, v.key().clone()));
                }
                v.insert(Writes::Few(SmallVec::new()))
            }
        };
        let written_at = write_stamp(self.barriers);
        inner
            .insert(InlineKey::from_slice(rest), Pending { value, maybe_stored, in_flight: NOT_IN_FLIGHT, written_at });
        self.pending_len += 1;
    }

    /// Adds `delta` to the multiplicity stored under `key` (deleting it when it reaches 0);
    /// returns it before and after.
    pub fn add_count(&mut self, key: KeyRef<'_>, delta: i64) -> Result<(i64, i64)> {
        let before = self.get(key)?;
        self.set_count(key.bytes(), key.distribution_len(), before, delta, None)
    }

    /// [`KeyedState::add_count`] for a key the store cannot hold (the caller knows: its time is
    /// past every time that has reached the store), so nothing is read from the store, and a
    /// key added and taken away again before a flush never reaches it.
    pub fn add_count_unstored(&mut self, key: KeyRef<'_>, delta: i64) -> Result<(i64, i64)> {
        let (key, distribution_len) = (key.bytes(), key.distribution_len());
        let before = self.pending_write(key, distribution_len).and_then(|p| p.value.clone());
        self.set_count(key, distribution_len, before, delta, Some(false))
    }

    fn set_count(
        &mut self,
        key: &[u8],
        distribution_len: usize,
        before: Option<Vec<u8>>,
        delta: i64,
        stored: Option<bool>,
    ) -> Result<(i64, i64)> {
        let before = match before {
            Some(bytes) => decode_count(&bytes)?,
            None => 0,
        };
        let after = before + delta;
        let value = (after != 0).then(|| encode_count(after));
        self.write(key, distribution_len, value, stored);
        Ok((before, after))
    }

    /// Whether the store may hold `key`: as tracked, else unless the cache knows the key absent;
    /// unknown counts as yes. (Fields passed apart, for callers holding a borrow of `pending`.)
    fn may_hold(stored: &StoredKeys, cache: &HashMap<Vec<u8>, Option<Vec<u8>>>, key: &[u8]) -> bool {
        stored.holds(key).unwrap_or_else(|| cache.get(key).is_none_or(|v| v.is_some()))
    }

    /// Every entry whose key starts with `prefix` (which begins with a whole distribution), in
    /// key order, this epoch's writes included.
    pub fn scan_prefix(&self, prefix: KeyRef<'_>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (prefix, distribution_len) = (prefix.bytes(), prefix.distribution_len());
        let full = self.full_key(prefix, distribution_len);
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        if self.stored.may_hold_prefix(prefix, distribution_len) {
            self.store.scan_prefix(&full, &mut |k, v| {
                merged.insert(k[6..].to_vec(), v.to_vec());
                Ok(ScanControl::Continue)
            })?;
        }
        let (distribution, rest) = prefix.split_at(distribution_len.min(prefix.len()));
        if let Some(inner) = self.pending.get(distribution) {
            for (k, p) in inner.starting_with(rest) {
                let key = [distribution, k.as_slice()].concat();
                match &p.value {
                    Some(v) => merged.insert(key, v.clone()),
                    None => merged.remove(&key),
                };
            }
        }
        Ok(merged.into_iter().collect())
    }

    /// Visits the entries whose key starts with `prefix` (as in [`KeyedState::scan_prefix`]) in
    /// key order, this epoch's writes included, until `visit` says stop: reading an index kept
    /// in time order up to a time costs the entries read, not the table.
    pub fn scan_prefix_while(&self, prefix: KeyRef<'_>, visit: &mut Visitor<'_>) -> Result<()> {
        let (prefix, distribution_len) = (prefix.bytes(), prefix.distribution_len());
        let (distribution, rest) = prefix.split_at(distribution_len.min(prefix.len()));
        let mut pending = self.pending.get(distribution).map(|inner| inner.starting_with(rest).peekable());
        let whole = |rest: &[u8]| [distribution, rest].concat();
        let mut stopped = false;
        if self.stored.may_hold_prefix(prefix, distribution_len) {
            let full = self.full_key(prefix, distribution_len);
            self.store.scan_prefix(&full, &mut |stored_key, stored_value| {
                let stored_rest = &stored_key[6 + distribution.len()..];
                // Pending writes before this stored key come first; one of the key replaces it.
                let mut value = Some(stored_value);
                if let Some(writes) = pending.as_mut() {
                    while let Some((rest, p)) = writes.next_if(|(rest, _)| rest.as_slice() <= stored_rest) {
                        if rest.as_slice() == stored_rest {
                            value = p.value.as_deref();
                            break;
                        }
                        let Some(pending_value) = &p.value else { continue };
                        if visit(&whole(rest), pending_value)? == ScanControl::Stop {
                            stopped = true;
                            return Ok(ScanControl::Stop);
                        }
                    }
                }
                let Some(value) = value else { return Ok(ScanControl::Continue) };
                let control = visit(&stored_key[6..], value)?;
                stopped = control == ScanControl::Stop;
                Ok(control)
            })?;
        }
        if let Some(writes) = pending.filter(|_| !stopped) {
            for (rest, p) in writes {
                let Some(value) = &p.value else { continue };
                if visit(&whole(rest), value)? == ScanControl::Stop {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The first (`last` false) or last entry whose key starts with `prefix` (as in
    /// [`KeyedState::scan_prefix`]): a multiset's minimum or maximum.
    pub fn first_with_prefix(&self, prefix: KeyRef<'_>, last: bool) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let whole_prefix = prefix;
        let (prefix, distribution_len) = (prefix.bytes(), prefix.distribution_len());
        if self.stored.may_hold_prefix(prefix, distribution_len) {
            let mut all = self.scan_prefix(whole_prefix)?;
            return Ok(if last { all.pop() } else { all.into_iter().next() });
        }
        // Nothing under the prefix is stored: its pending writes are all there is (deletes among
        // them, of keys the store may hold or a batch in flight deletes, are skipped).
        let (distribution, rest) = prefix.split_at(distribution_len.min(prefix.len()));
        let Some(inner) = self.pending.get(distribution) else {
            return Ok(None);
        };
        let mut entries = inner.starting_with(rest).filter_map(|(k, p)| p.value.as_ref().map(|v| (k, v)));
        let entry = if last { entries.next_back() } else { entries.next() };
        Ok(entry.map(|(k, v)| ([distribution, k.as_slice()].concat(), v.clone())))
    }

    /// The first `n` entries whose key starts with `prefix` (as in [`KeyedState::scan_prefix`]),
    /// in key order: a Top-N's leaders, read without scanning the rest of a large prefix.
    pub fn first_n_with_prefix(&self, prefix: KeyRef<'_>, n: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (prefix, distribution_len) = (prefix.bytes(), prefix.distribution_len());
        let (distribution, rest) = prefix.split_at(distribution_len.min(prefix.len()));
        let inner = self.pending.get(distribution);
        let join = |k: &InlineKey| [distribution, k.as_slice()].concat();
        if !self.stored.may_hold_prefix(prefix, distribution_len) {
            // Nothing under the prefix is stored: its pending writes are all there is.
            let Some(inner) = inner else { return Ok(vec![]) };
            let live = inner.starting_with(rest).filter_map(|(k, p)| p.value.as_ref().map(|v| (join(k), v.clone())));
            return Ok(live.take(n).collect());
        }
        // Each pending delete may remove one stored entry among the first: read that many more,
        // so that every entry not read comes after `n` that are kept.
        let deletes = inner.map_or(0, |i| i.starting_with(rest).filter(|(_, p)| p.value.is_none()).count());
        let wanted = n + deletes;
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        if wanted > 0 {
            self.store.scan_prefix(&self.full_key(prefix, distribution_len), &mut |k, v| {
                merged.insert(k[6..].to_vec(), v.to_vec());
                Ok(if merged.len() >= wanted { ScanControl::Stop } else { ScanControl::Continue })
            })?;
        }
        if let Some(inner) = inner {
            for (k, p) in inner.starting_with(rest) {
                match &p.value {
                    Some(v) => merged.insert(join(k), v.clone()),
                    None => merged.remove(&join(k)),
                };
            }
        }
        Ok(merged.into_iter().take(n).collect())
    }

    /// Deletes every entry whose key starts with `prefix` (as in [`KeyedState::scan_prefix`]).
    pub fn delete_prefix(&mut self, prefix: KeyRef<'_>) -> Result<()> {
        if self.stored.may_hold_prefix(prefix.bytes(), prefix.distribution_len()) {
            for (key, _) in self.scan_prefix(prefix)? {
                self.delete(prefix.sibling(&key));
            }
            return Ok(());
        }
        let (prefix, distribution_len) = (prefix.bytes(), prefix.distribution_len());
        // Nothing under the prefix is stored: forgetting its waiting writes is deleting them
        // (those in flight stay until forgotten: see `Writes::remove_starting_with`).
        let (distribution, rest) = prefix.split_at(distribution_len.min(prefix.len()));
        if let Some(inner) = self.pending.get_mut(distribution) {
            let fewer = inner.remove_starting_with(rest);
            self.pending_len = self.pending_len.checked_add_signed(-fewer).expect("pending writes counted");
            if inner.is_empty() {
                self.pending.remove(distribution);
            }
        }
        Ok(())
    }

    /// The epoch ends: puts the pending writes into `wb` (a write-back table's only at a
    /// `checkpoint` or when more than `capacity` are pending). Returns
    /// whether anything may have reached the store.
    ///
    /// The writes put into `wb` stay readable here, in flight, until the second flush after
    /// this one, so the caller may write `wb` to the store while the operator goes on, and
    /// flush again before it is in (a view job writes its operators' state off its thread):
    /// **`wb` must be in the store, or the table dropped, before this table's flush after
    /// next**, which forgets them; and the batches must go in in the order they were flushed.
    /// A flush told that every earlier batch is in ([`Flush::landed`]) forgets the last one's
    /// writes too, so that they are held no longer than needed (one barrier interval, not two:
    /// at 1 s checkpoints, what a join keeps for a second less).
    pub fn flush(&mut self, wb: &mut WriteBatch, flush: Flush) -> bool {
        self.flush_keeping(wb, flush, &|_| false)
    }

    /// [`KeyedState::flush`], except that at a barrier that is not a checkpoint the prefixes
    /// for which `expires_first` says yes do not settle: their operator expects to drop them
    /// before the next checkpoint (a window final by then at the watermark's pace), so writing
    /// them to the store now would only be undone. They stay pending, and go with the
    /// checkpoint if they are still there (a guess that only ever costs where the writes
    /// happen, never a value).
    pub fn flush_keeping(&mut self, wb: &mut WriteBatch, flush: Flush, expires_first: &dyn Fn(&[u8]) -> bool) -> bool {
        let Flush { checkpoint, landed } = flush;
        self.forget_landed(flush_tag(self.barriers + 1));
        if landed {
            // The last flush's batch is in as well.
            self.forget_landed(flush_tag(self.barriers));
        }
        self.barriers += 1;
        if self.settling.is_some() {
            self.barrier_times.push_back((self.barriers, std::time::Instant::now()));
        }
        if self.write_back && !checkpoint && self.pending_len <= self.capacity {
            return self.flush_settled(wb, expires_first);
        }
        let flushed = self.pending_len > 0;
        self.pending_len = 0;
        self.pending_since.clear();
        // Nothing is pending: only this barrier's time is needed from now on.
        while self.barrier_times.len() > 1 {
            self.barrier_times.pop_front();
        }
        // Written where they are; prefixes holding only writes in flight are written already.
        let tag = flush_tag(self.barriers);
        let KeyedState { table_id, stored, capacity, pending, in_flight, .. } = self;
        let waiting = pending.iter_mut().filter(|(_, writes)| writes.any_waiting());
        let written = Self::write_prefixes(waiting, *table_id, stored, *capacity, tag, wb);
        for (prefix, emptied) in written {
            match emptied {
                true => drop(pending.remove(&prefix)),
                false => in_flight[tag as usize - 1].push(prefix),
            }
        }
        if let StoredKeys::Exactly { keys, .. } = &self.stored {
            // Judged only over an interval that wrote: an idle table keeps its keys tracked.
            if flushed && keys.len() > UNTRACKED_UNLESS_USED && self.answered_absent == 0 {
                self.stored = StoredKeys::Unknown;
            }
        }
        self.answered_absent = 0;
        flushed
    }

    /// While this table settles its writes: how long until the next checkpoint at most (the
    /// checkpoint interval), the horizon over which its operator may say which state it will
    /// drop first ([`KeyedState::flush_keeping`]).
    pub fn settling_horizon(&self) -> Option<std::time::Duration> {
        self.settling.map(|s| s.checkpoint_interval)
    }

    /// A write-back table at a barrier that is not a checkpoint: the prefixes pending since
    /// before a barrier that came at least `settling.after` ago go into `wb`, unless
    /// `expires_first` says they will be dropped before the next checkpoint.
    fn flush_settled(&mut self, wb: &mut WriteBatch, expires_first: &dyn Fn(&[u8]) -> bool) -> bool {
        let Some(Settling { after: age, .. }) = self.settling else { return false };
        let Some(cutoff) = std::time::Instant::now().checked_sub(age) else { return false };
        // Writes made before barrier k + 1 are settled once it came before the cutoff.
        let mut through = None;
        while self.barrier_times.get(1).is_some_and(|(_, at)| *at <= cutoff) {
            through = self.barrier_times.pop_front().map(|(k, _)| k);
        }
        let Some(through) = through else { return false };
        let mut settled = Vec::new();
        while self.pending_since.front().is_some_and(|(since, _)| *since <= through) {
            let (_, prefix) = self.pending_since.pop_front().expect("a front entry");
            let Some(last) = self.pending.get(&prefix).and_then(|w| w.last_written(self.barriers)) else { continue };
            if last > through {
                // Still being written (a running count, an open window's group): settling it
                // now would write it again and again; it settles once it rests, or goes with
                // the checkpoint, whose barrier then writes only what changed in the last
                // `settling.after`.
                self.pending_since.push_back((last, prefix));
                continue;
            }
            if expires_first(&prefix) {
                // Dropped before the next checkpoint, by its operator's guess: asked again
                // once another `age` has passed.
                self.pending_since.push_back((self.barriers, prefix));
                continue;
            }
            if let Some(writes) = self.pending.remove(&prefix) {
                self.pending_len -= writes.waiting();
                settled.push((prefix, writes));
            }
        }
        let flushed = !settled.is_empty();
        let tag = flush_tag(self.barriers);
        let prefixes = settled.iter_mut().map(|(d, w)| (&*d, w));
        Self::write_prefixes(prefixes, self.table_id, &mut self.stored, self.capacity, tag, wb);
        for (prefix, writes) in settled {
            if !writes.is_empty() {
                self.in_flight[tag as usize - 1].push(prefix.clone());
                self.pending.insert(prefix, writes);
            }
        }
        flushed
    }

    /// Puts `prefixes`' waiting writes into `wb`, in store key order (vnode, prefix, rest):
    /// RocksDB's memtable then inserts a run of ascending keys from where the previous insert
    /// ended instead of searching its skip list from the top for each. Keeps the stored-key
    /// tracking up to date, and the writes where they are, in flight (tagged `tag`), until the
    /// flush after next (or the next, if told the batch is in) ([`KeyedState::forget_landed`]); those in flight already stay as they
    /// are. Returns each prefix written and whether it holds nothing any more (its only writes
    /// were deletes of keys never stored). (Fields passed apart, as the prefixes borrow
    /// `pending`.)
    fn write_prefixes<'a>(
        prefixes: impl Iterator<Item = (&'a InlineKey, &'a mut Writes)>,
        table_id: TableId,
        stored: &mut StoredKeys,
        capacity: usize,
        tag: u8,
        wb: &mut WriteBatch,
    ) -> Vec<(InlineKey, bool)> {
        let mut prefixes: Vec<(u16, &InlineKey, &mut Writes)> = prefixes.map(|(d, w)| (vnode_of(d), d, w)).collect();
        prefixes.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let mut written = Vec::with_capacity(prefixes.len());
        for (vnode, distribution, inner) in prefixes {
            let mut stored_prefix = Vec::with_capacity(6 + distribution.len());
            stored_prefix.extend_from_slice(&table_id.to_be_bytes());
            stored_prefix.extend_from_slice(&vnode.to_be_bytes());
            stored_prefix.extend_from_slice(distribution);
            inner.retain(|rest, p| {
                if p.in_flight != NOT_IN_FLIGHT {
                    // In the previous flush's batch, unchanged since: written already.
                    return true;
                }
                let full = [stored_prefix.as_slice(), rest].concat();
                stored.record(&full[6..], vnode, p.value.is_some(), capacity);
                match &p.value {
                    Some(value) => wb.put(full, value.clone()),
                    None if p.maybe_stored => wb.delete(full),
                    // Never stored: nothing to write, nothing to keep.
                    None => return false,
                }
                p.maybe_stored = p.value.is_some();
                p.in_flight = tag;
                true
            });
            written.push((distribution.clone(), inner.is_empty()));
        }
        written
    }

    /// The writes a flush put into its batch (tagged `tag`) are in the store now (see
    /// [`KeyedState::flush`]: the flush before the last, whose tag the flush about to start
    /// shares, or the last one too when told so): forgets those unchanged since, handing their
    /// values to the cache. A prefix written again meanwhile is pending since the last barrier
    /// (for settling).
    fn forget_landed(&mut self, tag: u8) {
        let KeyedState { pending, in_flight, stored, cache, capacity, settling, pending_since, barriers, .. } = self;
        for prefix in std::mem::take(&mut in_flight[tag as usize - 1]) {
            let Some(inner) = pending.get_mut(&prefix) else { continue };
            inner.retain(|rest, p| {
                if p.in_flight != tag {
                    return true;
                }
                // What the store holds now: values landed are remembered while the cache has
                // room (the next lookup missing a full cache empties it); a tracked table needs
                // no reminder of keys it does not hold, but must forget what it remembered of
                // them.
                let key = [prefix.as_slice(), rest].concat();
                match p.value.take() {
                    Some(value) if cache.len() < *capacity => {
                        cache.insert(key, Some(value));
                    }
                    None if stored.holds(&key).is_none() => Self::remember_in(cache, *capacity, key, None),
                    _ => {
                        cache.remove(&key);
                    }
                }
                false
            });
            if inner.is_empty() {
                pending.remove(&prefix);
            } else if settling.is_some() {
                pending_since.push_back((*barriers, prefix));
            }
        }
        // Keep a small map's allocation for the next epoch, not a large one's.
        if pending.capacity() > 4 * FEW_PREFIXES.max(pending.len()) {
            pending.shrink_to(FEW_PREFIXES.max(pending.len()));
        }
    }

    fn remember(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        Self::remember_in(&mut self.cache, self.capacity, key, value)
    }

    /// Remembers `key`'s committed value in `cache`, emptying it first when full.
    fn remember_in(
        cache: &mut HashMap<Vec<u8>, Option<Vec<u8>>>,
        capacity: usize,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    ) {
        if cache.len() >= capacity {
            cache.clear();
        }
        cache.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::pending::barriers_since;
    use super::*;

    use crate::state::memory::MemoryStore;

    /// Key `bytes` whose first `distribution_len` bytes are its distribution.
    fn k(bytes: &[u8], distribution_len: usize) -> KeyRef<'_> {
        KeyRef::with_distribution(bytes, distribution_len)
    }

    /// The keys `wb` writes or deletes, without table id and vnode, in its order.
    fn written_keys(wb: &WriteBatch) -> Vec<Vec<u8>> {
        wb.ops.iter().map(|op| op.key()[6..].to_vec()).collect()
    }

    /// A write-back table (distribution prefix of two bytes) whose writes settle after 20 ms,
    /// its store and that age.
    fn settling_table() -> (Arc<dyn StateStore>, std::time::Duration, KeyedState) {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let age = std::time::Duration::from_millis(20);
        let table = KeyedState::new(7, Arc::clone(&store), 1024)
            .write_back(Some(Settling { after: age, checkpoint_interval: age * 10 }))
            .unwrap();
        (store, age, table)
    }

    /// Writes pending for longer than `settling.after` go to the store at a barrier that is not a
    /// checkpoint; younger ones wait; a write made and dropped in between never goes.
    #[test]
    fn write_back_writes_settle_into_the_store_after_their_age() {
        let (store, age, mut s) = settling_table();
        s.put(k(b"g1a", 2), b"1".to_vec());
        s.put(k(b"g2a", 2), b"2".to_vec());
        let mut wb = WriteBatch::default();
        assert!(!s.flush(&mut wb, Flush::EPOCH), "nothing is old enough yet");
        std::thread::sleep(age * 2);
        s.put(k(b"g3a", 2), b"3".to_vec());
        s.put(k(b"g4a", 2), b"4".to_vec());
        s.delete(k(b"g4a", 2));
        let mut wb = WriteBatch::default();
        assert!(s.flush(&mut wb, Flush::EPOCH), "the writes made before the first barrier settle");
        let mut keys = written_keys(&wb);
        keys.sort();
        assert_eq!(keys, vec![b"g1a".to_vec(), b"g2a".to_vec()]);
        store.write(wb).unwrap();
        assert_eq!(s.get(k(b"g3a", 2)).unwrap(), Some(b"3".to_vec()), "a younger write is still read from memory");
        let mut wb = WriteBatch::default();
        assert!(s.flush(&mut wb, Flush::CHECKPOINT), "a checkpoint takes everything");
        let keys = written_keys(&wb);
        assert_eq!(keys, vec![b"g3a".to_vec()], "g4a was written and dropped before reaching the store");
        // Without an age (barriers are checkpoints) a barrier writes nothing.
        let mut plain = KeyedState::new(8, Arc::clone(&store), 1024).write_back(None).unwrap();
        plain.put(k(b"g1a", 2), b"1".to_vec());
        std::thread::sleep(age);
        let mut wb = WriteBatch::default();
        assert!(!plain.flush(&mut wb, Flush::EPOCH) && !plain.flush(&mut wb, Flush::EPOCH) && wb.is_empty());
    }

    /// A prefix its operator expects to drop before the next checkpoint does not settle: it
    /// stays in memory, is dropped without reaching the store, or goes with the checkpoint.
    #[test]
    fn write_back_writes_expiring_first_do_not_settle() {
        let (_, age, mut s) = settling_table();
        assert_eq!(s.settling_horizon(), Some(age * 10), "the checkpoint interval");
        s.put(k(b"g1a", 2), b"1".to_vec());
        s.put(k(b"g2a", 2), b"2".to_vec());
        s.put(k(b"g3a", 2), b"3".to_vec());
        let expires_first = |prefix: &[u8]| prefix != b"g1";
        let mut wb = WriteBatch::default();
        assert!(!s.flush_keeping(&mut wb, Flush::EPOCH, &expires_first), "nothing is old enough yet");
        std::thread::sleep(age * 2);
        let mut wb = WriteBatch::default();
        assert!(s.flush_keeping(&mut wb, Flush::EPOCH, &expires_first));
        let keys = written_keys(&wb);
        assert_eq!(keys, vec![b"g1a".to_vec()], "only the prefix not expiring first settles");
        // g2 is dropped as expected; g3 outlives the guess.
        s.delete(k(b"g2a", 2));
        std::thread::sleep(age * 2);
        let mut wb = WriteBatch::default();
        assert!(!s.flush_keeping(&mut wb, Flush::EPOCH, &expires_first) && wb.is_empty(), "still expected to go");
        assert_eq!(s.get(k(b"g3a", 2)).unwrap(), Some(b"3".to_vec()), "read from memory meanwhile");
        let mut wb = WriteBatch::default();
        assert!(s.flush_keeping(&mut wb, Flush::CHECKPOINT, &expires_first), "a checkpoint takes everything");
        let keys = written_keys(&wb);
        assert_eq!(keys, vec![b"g3a".to_vec()], "g2a never reached the store");
    }

    /// A key written again since the settling cutoff is not settled (it would be written
    /// again and again while it changes); it settles once it rests for the age.
    #[test]
    fn write_back_writes_still_changing_do_not_settle() {
        let (_, age, mut s) = settling_table();
        s.put(k(b"g1a", 2), b"1".to_vec());
        let mut wb = WriteBatch::default();
        assert!(!s.flush(&mut wb, Flush::EPOCH), "nothing is old enough yet");
        std::thread::sleep(age * 2);
        s.put(k(b"g1a", 2), b"2".to_vec());
        s.put(k(b"g2a", 2), b"3".to_vec());
        let mut wb = WriteBatch::default();
        assert!(!s.flush(&mut wb, Flush::EPOCH) && wb.is_empty(), "g1a was written again since: it does not settle");
        std::thread::sleep(age * 2);
        let mut wb = WriteBatch::default();
        assert!(s.flush(&mut wb, Flush::EPOCH), "both rested for the age");
        let mut written: Vec<(Vec<u8>, Option<Vec<u8>>)> = wb
            .ops
            .iter()
            .map(|op| match op {
                crate::state::store::WriteOp::Put(k, v) => (k[6..].to_vec(), Some(v.to_vec())),
                crate::state::store::WriteOp::Delete(k) => (k[6..].to_vec(), None),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        written.sort();
        assert_eq!(written, vec![(b"g1a".to_vec(), Some(b"2".to_vec())), (b"g2a".to_vec(), Some(b"3".to_vec()))]);
    }

    #[test]
    fn barriers_since_a_write_wrap_with_its_32_bits() {
        assert_eq!(barriers_since(10, 7), 3);
        let barriers = (1u64 << 32) + 5;
        assert_eq!(barriers_since(barriers, u32::MAX), 6, "written 6 barriers before, across the wrap");
    }

    /// A write-back table (distribution prefix of one byte) whose `entries` are in the store.
    fn stored_write_back_table(entries: &[(&[u8], &[u8])]) -> (Arc<dyn StateStore>, KeyedState) {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16).write_back(None).unwrap();
        entries.iter().for_each(|(key, v)| s.put(k(key, 1), v.to_vec()));
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        (store, s)
    }

    /// A delete put into a batch not yet written, then a put and a delete of the same key
    /// before that batch is in: reads see the key deleted, never the store's older value.
    #[test]
    fn a_key_deleted_in_flight_and_written_again_stays_deleted_until_the_batch_is_in() {
        let (store, mut s) = stored_write_back_table(&[(b"ga", b"old"), (b"gb", b"b")]);
        s.delete(k(b"ga", 1));
        let mut in_flight = WriteBatch::default();
        s.flush(&mut in_flight, Flush::CHECKPOINT);
        s.put(k(b"ga", 1), b"new".to_vec());
        s.delete(k(b"ga", 1));
        let only_b = vec![(b"gb".to_vec(), b"b".to_vec())];
        for _ in 0..2 {
            assert_eq!(s.get(k(b"ga", 1)).unwrap(), None);
            assert_eq!(s.scan_prefix(k(b"g", 1)).unwrap(), only_b);
            assert_eq!(s.first_with_prefix(k(b"g", 1), false).unwrap(), only_b.first().cloned());
            assert_eq!(s.first_n_with_prefix(k(b"g", 1), 2).unwrap(), only_b);
        }
        store.write(in_flight).unwrap();
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        assert_eq!(s.get(k(b"ga", 1)).unwrap(), None);
        assert_eq!(s.scan_prefix(k(b"g", 1)).unwrap(), only_b);
    }

    /// A stored key read (so cached) and deleted, then its prefix dropped while the delete is
    /// in flight (the table knows the vnode holds nothing then), the key perhaps written again
    /// in between (that write is then forgotten unwritten): the key reads absent while and
    /// after the batch goes in, never the value cached before.
    #[test]
    fn a_prefix_dropped_while_its_delete_is_in_flight_never_reads_the_cached_value() {
        for written_again in [false, true] {
            let (store, mut s) = stored_write_back_table(&[(b"ga", b"old")]);
            let mut wb = WriteBatch::default();
            s.flush(&mut wb, Flush::CHECKPOINT);
            s.flush(&mut wb, Flush::CHECKPOINT);
            assert!(wb.is_empty());
            assert_eq!(s.get(k(b"ga", 1)).unwrap(), Some(b"old".to_vec()));
            s.delete(k(b"ga", 1));
            let mut in_flight = WriteBatch::default();
            s.flush(&mut in_flight, Flush::CHECKPOINT);
            if written_again {
                s.put(k(b"ga", 1), b"new".to_vec());
            }
            s.delete_prefix(k(b"g", 1)).unwrap();
            assert_eq!(s.get(k(b"ga", 1)).unwrap(), None, "written again: {written_again}");
            store.write(in_flight).unwrap();
            for landed in [false, true, false] {
                let mut wb = WriteBatch::default();
                s.flush(&mut wb, Flush { checkpoint: true, landed });
                store.write(wb).unwrap();
                assert_eq!(s.get(k(b"ga", 1)).unwrap(), None, "written again: {written_again}");
                assert_eq!(s.scan_prefix(k(b"g", 1)).unwrap(), vec![]);
            }
        }
    }

    /// Two batches in flight (a view job flushes the next epoch before the last one's batch is
    /// in): a delete in the older stays visible through the newer flush, which neither writes
    /// it again nor drops it, until the flush after both are in.
    #[test]
    fn a_delete_stays_visible_while_two_flushes_are_in_flight() {
        let (store, mut s) = stored_write_back_table(&[(b"ga", b"old")]);
        s.delete(k(b"ga", 1));
        let mut first = WriteBatch::default();
        s.flush(&mut first, Flush::CHECKPOINT);
        s.put(k(b"gb", 1), b"b".to_vec());
        let mut second = WriteBatch::default();
        s.flush(&mut second, Flush::CHECKPOINT);
        let keys = written_keys(&second);
        assert_eq!(keys, vec![b"gb".to_vec()], "the delete in flight is not written again");
        let only_b = vec![(b"gb".to_vec(), b"b".to_vec())];
        assert_eq!(s.get(k(b"ga", 1)).unwrap(), None, "not the store's older value");
        assert_eq!(s.scan_prefix(k(b"g", 1)).unwrap(), only_b);
        store.write(first).unwrap();
        store.write(second).unwrap();
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        assert!(wb.is_empty());
        assert_eq!(s.get(k(b"ga", 1)).unwrap(), None);
        assert_eq!(s.scan_prefix(k(b"g", 1)).unwrap(), only_b);
    }

    #[test]
    fn reads_see_pending_writes_and_flush_commits_them() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16);
        s.put(k(b"g1a", 2), b"1".to_vec());
        s.put(k(b"g1b", 2), b"2".to_vec());
        s.put(k(b"g2a", 2), b"3".to_vec());
        assert_eq!(s.get(k(b"g1a", 2)).unwrap(), Some(b"1".to_vec()));
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::EPOCH);
        store.write(wb).unwrap();
        s.delete(k(b"g1a", 2));
        s.put(k(b"g1c", 2), b"4".to_vec());
        let keys: Vec<Vec<u8>> = s.scan_prefix(k(b"g1", 2)).unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"g1b".to_vec(), b"g1c".to_vec()]);
        // A fresh reader sees only what was flushed.
        let mut other = KeyedState::new(7, store, 16);
        assert_eq!(other.get(k(b"g1a", 2)).unwrap(), Some(b"1".to_vec()));
        assert_eq!(other.get(k(b"g1c", 2)).unwrap(), None);
    }

    #[test]
    fn write_back_keeps_writes_in_memory_until_capacity_and_drops_what_never_reached_the_store() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16).write_back(None).unwrap();
        let key = |i: usize| format!("k{i:02}").into_bytes();
        for i in 0..10 {
            s.put(k(&key(i), 1), vec![i as u8]);
        }
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::EPOCH);
        assert!(wb.is_empty(), "10 pending writes fit in memory");
        assert_eq!(s.get(k(&key(3), 1)).unwrap(), Some(vec![3]));
        assert_eq!(s.scan_prefix(k(b"k0", 1)).unwrap().len(), 10);
        // Past the budget every pending write goes to the store.
        for i in 10..17 {
            s.put(k(&key(i), 1), vec![i as u8]);
        }
        s.flush(&mut wb, Flush::EPOCH);
        assert_eq!(wb.ops.len(), 17);
        store.write(std::mem::take(&mut wb)).unwrap();
        // A key put as new and deleted before a flush never reaches the store; a stored key's
        // delete does.
        s.put_new(k(b"made", 1), vec![1]);
        s.delete(k(b"made", 1));
        s.delete(k(&key(0), 1));
        assert_eq!(s.get(k(&key(0), 1)).unwrap(), None);
        assert_eq!(s.get(k(b"made", 1)).unwrap(), None);
        for i in 0..16 {
            s.put(k(format!("x{i:02}").as_bytes(), 1), vec![0]);
        }
        s.flush(&mut wb, Flush::EPOCH);
        let keys = written_keys(&wb);
        assert!(keys.contains(&key(0)) && !keys.contains(&b"made".to_vec()), "{keys:?}");
        assert_eq!(keys.len(), 17);
    }

    #[test]
    fn a_table_knows_its_few_stored_keys_across_checkpoints_and_restores() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16).write_back(None).unwrap();
        s.put(k(b"a1", 1), vec![1]);
        s.put(k(b"b1", 1), vec![2]);
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        // After a checkpoint flush: a key never stored is absent without asking, and written
        // and deleted again before the next flush it never reaches the store.
        assert_eq!(s.get(k(b"c1", 1)).unwrap(), None);
        s.put(k(b"c1", 1), vec![3]);
        s.delete(k(b"c1", 1));
        s.delete(k(b"b1", 1));
        assert_eq!(s.first_with_prefix(k(b"c", 1), false).unwrap(), None);
        s.flush(&mut wb, Flush::CHECKPOINT);
        let keys = written_keys(&wb);
        assert_eq!(keys, vec![b"b1".to_vec()], "only the stored key's delete");
        store.write(std::mem::take(&mut wb)).unwrap();
        // A stored key read (so cached), then deleted and flushed, reads absent after.
        assert_eq!(s.get(k(b"a1", 1)).unwrap(), Some(vec![1]));
        s.delete(k(b"a1", 1));
        s.flush(&mut wb, Flush::CHECKPOINT);
        assert_eq!(s.get(k(b"a1", 1)).unwrap(), None);
        s.put(k(b"a1", 1), vec![1]);
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        // Reopened (a restore): the stored keys are read back, and still known exactly.
        let mut restored = KeyedState::new(7, Arc::clone(&store), 16).write_back(None).unwrap();
        assert_eq!(restored.get(k(b"a1", 1)).unwrap(), Some(vec![1]));
        restored.put(k(b"d1", 1), vec![4]);
        restored.delete(k(b"d1", 1));
        restored.delete(k(b"a1", 1));
        restored.flush(&mut wb, Flush::CHECKPOINT);
        let keys = written_keys(&wb);
        assert_eq!(keys, vec![b"a1".to_vec()]);
        store.write(std::mem::take(&mut wb)).unwrap();
        // Past capacity stored keys it stops tracking them, and reads stay right.
        for i in 0..40u8 {
            restored.put(k(&[b'k', i], 1), vec![i]);
        }
        restored.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        assert!(matches!(restored.stored, StoredKeys::Unknown));
        assert_eq!(restored.get(k(&[b'k', 39], 1)).unwrap(), Some(vec![39]));
        assert_eq!(restored.scan_prefix(k(b"k", 1)).unwrap().len(), 40);
        restored.delete(k(&[b'k', 3], 1));
        restored.flush(&mut wb, Flush::CHECKPOINT);
        assert_eq!(wb.ops.len(), 1, "an untracked table's delete of a stored key reaches the store");
        let reopened = KeyedState::new(7, Arc::clone(&store), 16).write_back(None).unwrap();
        assert!(matches!(reopened.stored, StoredKeys::Unknown), "40 stored keys are more than 16");
    }

    #[test]
    fn a_flush_into_a_full_cache_leaves_no_stale_value_behind() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 16).write_back(None).unwrap();
        let key = |i: u8| vec![b'k', i];
        for i in 0..16 {
            s.put(k(&key(i), 1), vec![0]);
        }
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        // The cache holds the 16 values flushed; new values of all of them, flushed into it
        // while it is full, replace them.
        for i in 0..16 {
            s.put(k(&key(i), 1), vec![1]);
        }
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        for i in 0..16 {
            assert_eq!(s.get(k(&key(i), 1)).unwrap(), Some(vec![1]), "key {i}");
        }
    }

    #[test]
    fn a_large_table_probed_only_by_prefix_stops_tracking_its_keys_but_an_idle_one_keeps_them() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let many = UNTRACKED_UNLESS_USED + 10;
        let mut s = KeyedState::new(7, Arc::clone(&store), 2 * many).write_back(None).unwrap();
        let key = |i: usize| (i as u32).to_be_bytes().to_vec();
        for i in 0..many {
            s.put(k(&key(i), 2), vec![1]);
        }
        assert_eq!(s.get(k(&key(many + 1), 2)).unwrap(), None);
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        assert!(matches!(s.stored, StoredKeys::Exactly { .. }), "a lookup was answered absent");
        // An idle interval changes nothing.
        s.flush(&mut wb, Flush::CHECKPOINT);
        assert!(matches!(s.stored, StoredKeys::Exactly { .. }));
        // An interval with a lookup answered absent keeps them tracked ...
        assert_eq!(s.get(k(&key(many + 1), 2)).unwrap(), None);
        s.put(k(&key(0), 2), vec![2]);
        s.flush(&mut wb, Flush::CHECKPOINT);
        assert!(matches!(s.stored, StoredKeys::Exactly { .. }));
        // ... one that wrote and answered none ends the tracking.
        s.put(k(&key(1), 2), vec![2]);
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        assert!(matches!(s.stored, StoredKeys::Unknown));
        assert_eq!(s.get(k(&key(1), 2)).unwrap(), Some(vec![2]));
        // Reopened, a table this large starts untracked.
        let reopened = KeyedState::new(7, Arc::clone(&store), 2 * many).write_back(None).unwrap();
        assert!(matches!(reopened.stored, StoredKeys::Unknown));
    }

    #[test]
    fn a_prefix_sharing_a_vnode_with_a_stored_one_is_read_right() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 64).write_back(None).unwrap();
        // Two distribution prefixes in one vnode: one stored, one only pending.
        let a = [b'p', 0u8];
        let b = (1..=u8::MAX).map(|i| [b'q', i]).find(|b| vnode_of(b) == vnode_of(&a)).expect("a vnode twin");
        s.put(k(&[a[0], a[1], 1], 2), vec![1]);
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(std::mem::take(&mut wb)).unwrap();
        s.put(k(&[b[0], b[1], 2], 2), vec![2]);
        s.put(k(&[b[0], b[1], 3], 2), vec![3]);
        s.delete(k(&[b[0], b[1], 3], 2));
        assert_eq!(s.scan_prefix(k(&b, 2)).unwrap(), vec![(vec![b[0], b[1], 2], vec![2])]);
        assert_eq!(s.first_with_prefix(k(&b, 2), true).unwrap(), Some((vec![b[0], b[1], 2], vec![2])));
        assert_eq!(s.first_n_with_prefix(k(&a, 2), 5).unwrap(), vec![(vec![a[0], a[1], 1], vec![1])]);
        s.delete_prefix(k(&b, 2)).unwrap();
        s.delete_prefix(k(&a, 2)).unwrap();
        s.flush(&mut wb, Flush::CHECKPOINT);
        let keys = written_keys(&wb);
        assert_eq!(keys, vec![vec![a[0], a[1], 1]], "only the stored key needs a tombstone");
    }

    /// Random puts, deletes, prefix deletes, flushes (checkpoint or not, written to the store
    /// or not yet) and reopens, with small capacities so tables cross from tracking their
    /// stored keys to not: every read agrees with a plain map of what was written.
    #[test]
    fn random_writes_flushes_and_reopens_agree_with_a_model() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for round in 0..60 {
            let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            let capacity = [16, 48, 200][round % 3];
            let key_space = [6, 40, 120][(round / 3) % 3];
            // Odd rounds settle writes at every barrier.
            let settle = (round % 2 == 1).then_some(Settling {
                after: std::time::Duration::ZERO,
                checkpoint_interval: std::time::Duration::from_secs(1),
            });
            let open = |store: &Arc<dyn StateStore>| {
                KeyedState::new(9, Arc::clone(store), capacity).write_back(settle).unwrap()
            };
            let mut s = open(&store);
            // A flush's batch written only before the flush after next (a view job writes it
            // while the operator goes on), in order: reads meanwhile must not fall through to
            // the store.
            let mut unwritten: VecDeque<WriteBatch> = VecDeque::new();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut fresh = 0u16;
            for step in 0..1500 {
                let prefix = b'a' + next(5) as u8;
                let key = vec![prefix, 0, next(key_space) as u8];
                let what = format!("round {round} step {step} key {key:?}");
                match next(100) {
                    0..=34 => {
                        let value = vec![next(250) as u8];
                        s.put(k(&key, 1), value.clone());
                        model.insert(key, value);
                    }
                    35..=44 => {
                        // A key made new by the caller (a join's numbered row).
                        fresh += 1;
                        let key = [&[prefix, 1][..], &fresh.to_be_bytes()].concat();
                        s.put_new(k(&key, 1), vec![7]);
                        model.insert(key, vec![7]);
                    }
                    45..=64 => {
                        let key = match model.keys().nth(next(model.len().max(1) as u64) as usize) {
                            Some(k) if next(2) == 0 => k.clone(),
                            _ => key,
                        };
                        s.delete(k(&key, 1));
                        model.remove(&key);
                    }
                    65..=76 => assert_eq!(s.get(k(&key, 1)).unwrap(), model.get(&key).cloned(), "{what}"),
                    77..=84 => {
                        let want: Vec<_> =
                            model.iter().filter(|(k, _)| k[0] == prefix).map(|(k, v)| (k.clone(), v.clone())).collect();
                        assert_eq!(s.scan_prefix(k(&[prefix], 1)).unwrap(), want, "{what}");
                        let last = next(2) == 0;
                        let edge = if last { want.last() } else { want.first() };
                        assert_eq!(s.first_with_prefix(k(&[prefix], 1), last).unwrap().as_ref(), edge, "{what}");
                        assert_eq!(
                            s.first_n_with_prefix(k(&[prefix], 1), 3).unwrap(),
                            want.iter().take(3).cloned().collect::<Vec<_>>(),
                            "{what}"
                        );
                    }
                    85..=87 => {
                        let sub = [prefix, next(2) as u8];
                        s.delete_prefix(k(&sub, 1)).unwrap();
                        model.retain(|k, _| !k.starts_with(&sub));
                    }
                    88..=96 => {
                        if unwritten.len() == 2 {
                            store.write(unwritten.pop_front().expect("two")).unwrap();
                        }
                        if next(4) == 0 {
                            unwritten.drain(..).for_each(|wb| store.write(wb).unwrap());
                        }
                        // Told when every earlier batch is in, as a view job tells it.
                        let landed = unwritten.is_empty() && next(2) == 0;
                        let mut wb = WriteBatch::default();
                        // Some prefixes kept out of settling, as an operator expecting to drop
                        // them first says: where writes go may change, never what is read.
                        let kept = next(6) as u8;
                        s.flush_keeping(&mut wb, Flush { checkpoint: next(2) == 0, landed }, &|p: &[u8]| {
                            p.first().is_some_and(|&c| c - b'a' < kept)
                        });
                        unwritten.push_back(wb);
                        if next(3) == 0 {
                            unwritten.drain(..).for_each(|wb| store.write(wb).unwrap());
                        }
                    }
                    _ => {
                        // A checkpoint, then a restore from it.
                        unwritten.drain(..).for_each(|wb| store.write(wb).unwrap());
                        let mut wb = WriteBatch::default();
                        s.flush(&mut wb, Flush::CHECKPOINT);
                        store.write(wb).unwrap();
                        s = open(&store);
                    }
                }
            }
            unwritten.drain(..).for_each(|wb| store.write(wb).unwrap());
            let mut wb = WriteBatch::default();
            s.flush(&mut wb, Flush::CHECKPOINT);
            store.write(wb).unwrap();
            let mut stored = Vec::new();
            store
                .scan_prefix(&9u32.to_be_bytes(), &mut |k, v| {
                    stored.push((k[6..].to_vec(), v.to_vec()));
                    Ok(ScanControl::Continue)
                })
                .unwrap();
            stored.sort();
            assert_eq!(stored, model.into_iter().collect::<Vec<_>>(), "round {round}: the store after the last flush");
        }
    }

    #[test]
    fn an_ordered_scan_merges_pending_writes_and_stops_where_told() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 1000).write_back(None).unwrap();
        for i in (0..30u8).step_by(2) {
            s.put(k(&[b'p', i], 1), vec![i]);
        }
        let mut wb = WriteBatch::default();
        s.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        // Pending: odd keys put, some stored keys deleted, one stored key replaced.
        for i in (1..30u8).step_by(2) {
            s.put(k(&[b'p', i], 1), vec![i]);
        }
        for i in [0u8, 4, 28] {
            s.delete(k(&[b'p', i], 1));
        }
        s.put(k(&[b'p', 6], 1), vec![66]);
        s.put(k(&[b'q', 0], 1), vec![0]);
        let all = s.scan_prefix(k(b"p", 1)).unwrap();
        for limit in [0usize, 1, 5, all.len(), all.len() + 3] {
            let mut seen = Vec::new();
            s.scan_prefix_while(k(b"p", 1), &mut |k, v| {
                if seen.len() == limit {
                    return Ok(ScanControl::Stop);
                }
                seen.push((k.to_vec(), v.to_vec()));
                Ok(ScanControl::Continue)
            })
            .unwrap();
            assert_eq!(seen, all[..limit.min(all.len())].to_vec(), "limit {limit}");
        }
        assert_eq!(all.len(), 27);
        assert!(all.contains(&(vec![b'p', 6], vec![66])));
    }

    #[test]
    fn many_writes_under_one_prefix_stay_ordered_and_readable() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut s = KeyedState::new(7, Arc::clone(&store), 1000).write_back(None).unwrap();
        // Past FEW_WRITES the prefix's writes change representation; reads and scans agree.
        for i in (0..40u8).rev() {
            s.put(k(&[b'g', b'a', i], 2), vec![i]);
            s.put(k(&[b'g', b'b', i], 2), vec![i]);
        }
        for i in (0..40u8).filter(|i| i % 3 == 0) {
            s.delete(k(&[b'g', b'a', i], 2));
        }
        assert_eq!(s.get(k(&[b'g', b'a', 4], 2)).unwrap(), Some(vec![4]));
        assert_eq!(s.get(k(&[b'g', b'a', 3], 2)).unwrap(), None);
        let scanned: Vec<u8> = s.scan_prefix(k(b"ga", 2)).unwrap().into_iter().map(|(k, _)| k[2]).collect();
        assert_eq!(scanned, (0..40u8).filter(|i| i % 3 != 0).collect::<Vec<_>>());
        assert_eq!(s.scan_prefix(k(b"gb", 2)).unwrap().len(), 40);
    }

    #[test]
    fn first_last_and_delete_by_prefix_agree_with_a_scan_stored_or_not() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        for write_back in [true, false] {
            let s = KeyedState::new(8, Arc::clone(&store), 1000);
            let mut s = if write_back { s.write_back(None).unwrap() } else { s };
            // Few writes under one prefix, then many (a B-tree); 0xFF bytes at the range's end.
            for (sub, n) in [(b'a', 3u8), (b'b', 40), (0xFF, 2)] {
                for i in (0..n).rev() {
                    s.put(k(&[b'g', sub, i, 0xFF], 1), vec![i]);
                }
            }
            let mut wb = WriteBatch::default();
            if !write_back {
                s.flush(&mut wb, Flush::EPOCH);
                store.write(std::mem::take(&mut wb)).unwrap();
            }
            for sub in [b'a', b'b', 0xFF] {
                let all = s.scan_prefix(k(&[b'g', sub], 1)).unwrap();
                assert_eq!(s.first_with_prefix(k(&[b'g', sub], 1), false).unwrap().as_ref(), all.first());
                assert_eq!(s.first_with_prefix(k(&[b'g', sub], 1), true).unwrap().as_ref(), all.last());
                for n in [0, 1, 2, 5, 100] {
                    let first: Vec<_> = all.iter().take(n).cloned().collect();
                    assert_eq!(s.first_n_with_prefix(k(&[b'g', sub], 1), n).unwrap(), first);
                }
            }
            // Pending deletes and puts over stored entries: the first n still agree with a scan.
            if !write_back {
                for i in [0u8, 1, 5, 7] {
                    s.delete(k(&[b'g', b'b', i, 0xFF], 1));
                }
                s.put(k(&[b'g', b'b', 2, 0], 1), vec![9]);
                let all = s.scan_prefix(k(b"gb", 1)).unwrap();
                for n in [1, 3, 6] {
                    assert_eq!(s.first_n_with_prefix(k(b"gb", 1), n).unwrap(), all[..n].to_vec());
                }
                for i in [0u8, 1, 5, 7] {
                    s.put(k(&[b'g', b'b', i, 0xFF], 1), vec![i]);
                }
                s.delete(k(&[b'g', b'b', 2, 0], 1));
            }
            assert_eq!(s.first_n_with_prefix(k(b"gc", 1), 3).unwrap(), vec![]);
            assert_eq!(s.first_with_prefix(k(b"gc", 1), true).unwrap(), None);
            s.delete_prefix(k(b"gb", 1)).unwrap();
            s.delete_prefix(k(&[b'g', 0xFF], 1)).unwrap();
            assert!(s.scan_prefix(k(b"gb", 1)).unwrap().is_empty());
            assert_eq!(s.scan_prefix(k(b"g", 1)).unwrap().len(), 3, "write_back {write_back}");
            assert_eq!(s.first_with_prefix(k(b"g", 1), true).unwrap().unwrap().0, vec![b'g', b'a', 2, 0xFF]);
            s.delete_prefix(k(b"g", 1)).unwrap();
            assert!(s.scan_prefix(k(b"g", 1)).unwrap().is_empty());
            // Stored: a tombstone per stored key, and one for the key put and deleted above.
            assert_eq!(s.pending_len, if write_back { 0 } else { 46 });
            s.flush(&mut wb, Flush::EPOCH);
            store.write(wb).unwrap();
        }
    }
}
