//! [`IdleKeys`]: which state keys have not changed for a view's state TTL
//! (`WITH (state_ttl = '...')`), the one index behind every operator whose unbounded state
//! ends by age instead of by the watermark (a plain aggregate's groups, DISTINCT's rows, a
//! join side's keys). Flink's state TTL, measured in *epoch time*: the time each barrier
//! carries (`dataflow::clock`, `now()` in a view), so a view restored after a crash forgets
//! exactly what one that never stopped forgot, and a pinned clock makes it testable.
//!
//! Each key its operator changed in an epoch is *touched* ([`IdleKeys::touch`]) with the
//! epoch's time, rounded down to a *slot* of [`IdleKeys::slot_width`] (a sixteenth of the TTL,
//! at most a second), so a key changed in every epoch is written once per slot, not once per
//! epoch. A key is *idle* once the epoch time has passed the end of its last slot by the TTL:
//! it leaves between the TTL and a sixteenth more after its last change
//! ([`IdleKeys::take_idle`]), and its owner forgets the key's state as if its rows had been
//! deleted (emitting the retractions), so that a view keeps only what its state still knows.
//!
//! The index lives in its own operator state table ([`KeyedState`], write-back like all
//! operator state, so it is restored with the view's checkpoints and costs no memory of its
//! own beyond the cache), as two kinds of entries:
//! - `key -> slot` (the key's last slot, under the key's own vnode), and
//! - `[0xff][shard][time_key(slot)][key] -> ()` (the shard's keys in slot order, under one
//!   vnode: apart from every key, as arrow-row keys never start with 0xff), so taking the
//!   idle keys reads the entries it takes, plus one; and `[0xff][shard] -> slot`, the latest
//!   slot, so time does not go back after a restart.
//!
//! After a restart, changes made since the checkpoint restored are applied again in the first
//! epochs after it, and count as made then: their keys are kept longer (by up to the downtime
//! and the checkpoint interval), never forgotten sooner.
//!
//! Invariant: a key has exactly one index entry, the one of its last slot, and it is present
//! iff `key -> slot` is (a touch in a new slot deletes the old entry; taking a key deletes
//! both). Called by `operators::hash_agg` and `operators::hash_join`.

use super::keyed::{Flush, KeyedState};
use super::keys::{KeyRef, StateKey};
use super::store::{ScanControl, WriteBatch};
use crate::error::Result;
use crate::types::window::{time_from_key, time_key};

/// Widest slot: keys touched within one second share one.
const MAX_SLOT_NANOS: i64 = 1_000_000_000;

pub struct IdleKeys {
    state: KeyedState,
    /// The TTL, nanoseconds of epoch time (> 0).
    ttl: i64,
    /// `[0xff][shard]`: the distribution of the shard's index entries.
    shard_prefix: [u8; 3],
    /// The latest slot (of the latest epoch time given), MIN until read from the store, where
    /// it is kept as `[0xff][shard] -> slot`.
    slot: i64,
    /// Surely no key is indexed (the last scan found none, and nothing was touched since): a
    /// barrier reads nothing. False after a restore, until a scan.
    known_empty: bool,
}

impl IdleKeys {
    /// Shard `shard`'s index over `state` (a table of its own), for a TTL of `ttl` nanoseconds.
    pub fn new(state: KeyedState, ttl: i64, shard: u16) -> IdleKeys {
        let [hi, lo] = shard.to_be_bytes();
        IdleKeys { state, ttl: ttl.max(1), shard_prefix: [0xff, hi, lo], slot: i64::MIN, known_empty: false }
    }

    /// How wide a slot is for a TTL of `ttl`: a sixteenth of it, at most a second, at least a
    /// nanosecond.
    pub fn slot_width(ttl: i64) -> i64 {
        (ttl / 16).clamp(1, MAX_SLOT_NANOS)
    }

    /// How an operator's description shows the TTL (`, state ttl 10s`).
    pub fn describe(idle: Option<&IdleKeys>) -> String {
        idle.map(|i| format!(", state ttl {}s", i.ttl as f64 / 1e9)).unwrap_or_default()
    }

    /// The epoch time is now `now`: keys touched from here on are in its slot. Time never goes
    /// back for the index, across restarts too (the latest slot is stored with it): a clock
    /// pinned back, or a restart's first epochs, keep the latest slot.
    pub fn advance(&mut self, now: i64) -> Result<()> {
        let width = Self::slot_width(self.ttl);
        let slot = now.div_euclid(width).saturating_mul(width);
        if self.slot == i64::MIN {
            let latest = self.state.get(KeyRef::whole(&self.shard_prefix))?;
            self.slot = latest.map(|v| decode_slot(&v)).transpose()?.unwrap_or(i64::MIN);
        }
        if slot > self.slot {
            self.slot = slot;
            self.state.put(KeyRef::whole(&self.shard_prefix), slot.to_be_bytes().to_vec());
        }
        Ok(())
    }

    fn entry(&self, slot: i64, key: &[u8]) -> StateKey {
        StateKey::under(&self.shard_prefix, 8 + key.len()).then(&time_key(slot)).then(key)
    }

    /// `key` changed in the current epoch.
    pub fn touch(&mut self, key: &[u8]) -> Result<()> {
        let slot = self.slot;
        let last = self.state.get(KeyRef::whole(key))?.map(|v| decode_slot(&v)).transpose()?;
        if last == Some(slot) {
            return Ok(());
        }
        if let Some(last) = last {
            self.state.delete(self.entry(last, key).key());
        }
        self.state.put(self.entry(slot, key).key(), Vec::new());
        self.state.put(KeyRef::whole(key), slot.to_be_bytes().to_vec());
        self.known_empty = false;
        Ok(())
    }

    /// `key`'s state is gone for another reason (its last row left): it is no longer indexed.
    pub fn remove(&mut self, key: &[u8]) -> Result<()> {
        if let Some(last) = self.state.get(KeyRef::whole(key))? {
            let last = decode_slot(&last)?;
            self.state.delete(self.entry(last, key).key());
            self.state.delete(KeyRef::whole(key));
        }
        Ok(())
    }

    /// Takes out the keys idle at epoch time `now` (their last slot ended at least the TTL
    /// before it), in slot order then key order; they are no longer indexed.
    pub fn take_idle(&mut self, now: i64) -> Result<Vec<Vec<u8>>> {
        self.advance(now)?;
        if self.known_empty {
            return Ok(vec![]);
        }
        let width = Self::slot_width(self.ttl);
        // A slot starting at `s` ends at `s + width`: idle once `s + width + ttl <= now`.
        let through = now.saturating_sub(self.ttl).saturating_sub(width);
        let mut idle: Vec<(i64, Vec<u8>)> = Vec::new();
        let skip = self.shard_prefix.len() + 8;
        let mut any_left = false;
        self.state.scan_prefix_while(KeyRef::whole(&self.shard_prefix), &mut |entry, _| {
            if entry.len() == self.shard_prefix.len() {
                // The latest slot, stored under the prefix itself.
                return Ok(ScanControl::Continue);
            }
            let slot = time_from_key(&entry[self.shard_prefix.len()..]);
            if slot > through {
                any_left = true;
                return Ok(ScanControl::Stop);
            }
            idle.push((slot, entry[skip..].to_vec()));
            Ok(ScanControl::Continue)
        })?;
        self.known_empty = !any_left;
        let mut keys = Vec::with_capacity(idle.len());
        for (slot, key) in idle {
            self.state.delete(self.entry(slot, &key).key());
            self.state.delete(KeyRef::whole(&key));
            keys.push(key);
        }
        Ok(keys)
    }

    pub fn flush(&mut self, wb: &mut WriteBatch, flush: Flush) {
        self.state.flush(wb, flush);
    }
}

fn decode_slot(bytes: &[u8]) -> Result<i64> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| {
        crate::error::WeirError::new(crate::error::SqlState::DATA_CORRUPTED, "a state TTL entry of the wrong length")
    })?;
    Ok(i64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;

    const SECOND: i64 = 1_000_000_000;

    fn index(store: &Arc<dyn StateStore>, shard: u16) -> IdleKeys {
        IdleKeys::new(KeyedState::new(7, Arc::clone(store), 100), 16 * SECOND, shard)
    }

    #[test]
    fn keys_leave_a_ttl_after_their_last_change_and_survive_the_store() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut idle = index(&store, 0);
        assert_eq!(IdleKeys::slot_width(16 * SECOND), SECOND);
        idle.advance(0).unwrap();
        idle.touch(b"\x01a").unwrap();
        idle.touch(b"\x01b").unwrap();
        idle.advance(5 * SECOND).unwrap();
        idle.touch(b"\x01b").unwrap();
        // a's slot [0, 1 s) is idle from 17 s on; b's [5 s, 6 s) from 22 s.
        assert!(idle.take_idle(16 * SECOND + SECOND / 2).unwrap().is_empty());
        assert_eq!(idle.take_idle(17 * SECOND).unwrap(), vec![b"\x01a".to_vec()]);
        // Written to the store and read back by another shard object over it.
        let mut wb = WriteBatch::default();
        idle.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        let mut again = index(&store, 0);
        assert!(again.take_idle(21 * SECOND).unwrap().is_empty());
        again.touch(b"\x01c").unwrap();
        again.remove(b"\x01c").unwrap();
        assert_eq!(again.take_idle(22 * SECOND).unwrap(), vec![b"\x01b".to_vec()]);
        assert!(again.take_idle(100 * SECOND).unwrap().is_empty(), "c was removed, a and b taken once");
        // Another shard's index is apart.
        let mut other = index(&store, 1);
        other.advance(0).unwrap();
        other.touch(b"\x01a").unwrap();
        let mut wb = WriteBatch::default();
        other.flush(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        assert!(again.take_idle(200 * SECOND).unwrap().is_empty());
        assert_eq!(other.take_idle(200 * SECOND).unwrap(), vec![b"\x01a".to_vec()]);
    }
}
