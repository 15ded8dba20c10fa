//! The write-back buffer's parts: one pending write ([`Pending`]), when it was written and
//! which flush put it in flight, and one distribution prefix's pending writes in key order
//! ([`Writes`]). `KeyedState` holds them by prefix and decides when they go to the store.

use std::collections::BTreeMap;
use std::ops::Bound;

use smallvec::SmallVec;

use crate::state::keys::prefix_end;

/// A key (or part of one) held inline up to 32 bytes: most are shorter, and a map's search then
/// compares bytes next to each other instead of following a pointer per entry.
pub type InlineKey = SmallVec<[u8; 32]>;

/// A write not yet in the store, or on its way there.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The value (None = delete).
    pub value: Option<Vec<u8>>,
    /// Whether the store may hold the key (unknown counts as yes); for a write in flight,
    /// whether it will once the write is in.
    pub maybe_stored: bool,
    /// Handed to the store's batch at one of the last two flushes and unchanged since: kept
    /// so that reads see it while that batch is written, and dropped at the second flush after
    /// it, or the next one if told the batch is in (see [`KeyedState::flush`]). `NOT_IN_FLIGHT`, or the [`flush_tag`] of that flush. Not
    /// counted in `pending_len`.
    pub in_flight: u8,
    /// The table's barrier count when the value was last written (its low 32 bits: see
    /// [`barriers_since`]), so that settling passes over keys still being written.
    pub written_at: u32,
}

pub const NOT_IN_FLIGHT: u8 = 0;

/// A write's `written_at`: the low 32 bits of the table's barrier count `barriers` then.
pub fn write_stamp(barriers: u64) -> u32 {
    barriers as u32
}

/// Barriers from a write's `written_at` ([`write_stamp`]) to `barriers` (now): exact while
/// fewer than 2^32 barriers passed since (years of 10 ms barriers), which a pending write
/// never outlives, as checkpoints flush them.
pub fn barriers_since(barriers: u64, written_at: u32) -> u64 {
    u64::from(write_stamp(barriers).wrapping_sub(written_at))
}

/// Which of the two flushes whose batches may be in flight flush number `n` is: 1 or 2. The
/// writes of flush `n - 2` have the tag of flush `n`.
pub fn flush_tag(n: u64) -> u8 {
    1 + (n % 2) as u8
}

/// One distribution prefix's pending writes, by the rest of the key in order: a sorted vector
/// while there are few (most groups and join keys have one or two; one is held inline), a
/// B-tree past that.
#[derive(Debug)]
pub enum Writes {
    Few(SmallVec<[(InlineKey, Pending); 1]>),
    Many(BTreeMap<InlineKey, Pending>),
}

/// Past this many writes a prefix's vector becomes a B-tree.
pub const FEW_WRITES: usize = 16;

impl Writes {
    pub fn get_mut(&mut self, rest: &[u8]) -> Option<&mut Pending> {
        match self {
            Writes::Few(v) => v.binary_search_by(|(k, _)| k.as_slice().cmp(rest)).ok().map(|i| &mut v[i].1),
            Writes::Many(m) => m.get_mut(rest),
        }
    }

    pub fn get(&self, rest: &[u8]) -> Option<&Pending> {
        match self {
            Writes::Few(v) => v.binary_search_by(|(k, _)| k.as_slice().cmp(rest)).ok().map(|i| &v[i].1),
            Writes::Many(m) => m.get(rest),
        }
    }

    pub fn insert(&mut self, rest: InlineKey, pending: Pending) {
        match self {
            Writes::Few(v) => match v.binary_search_by(|(k, _)| k.as_slice().cmp(&rest)) {
                Ok(i) => v[i].1 = pending,
                Err(_) if v.len() >= FEW_WRITES => {
                    let mut many: BTreeMap<InlineKey, Pending> = std::mem::take(v).into_iter().collect();
                    many.insert(rest, pending);
                    *self = Writes::Many(many);
                }
                Err(i) => v.insert(i, (rest, pending)),
            },
            Writes::Many(m) => {
                m.insert(rest, pending);
            }
        }
    }

    pub fn remove(&mut self, rest: &[u8]) {
        match self {
            Writes::Few(v) => {
                if let Ok(i) = v.binary_search_by(|(k, _)| k.as_slice().cmp(rest)) {
                    v.remove(i);
                }
            }
            Writes::Many(m) => {
                m.remove(rest);
            }
        }
    }

    /// The table's barrier count (now `barriers`) at the newest waiting write, if any waits.
    pub fn last_written(&self, barriers: u64) -> Option<u64> {
        let since = |p: &Pending| barriers_since(barriers, p.written_at);
        let fewest = match self {
            Writes::Few(v) => v.iter().map(|(_, p)| p).filter(|p| p.in_flight == NOT_IN_FLIGHT).map(since).min(),
            Writes::Many(m) => m.values().filter(|p| p.in_flight == NOT_IN_FLIGHT).map(since).min(),
        };
        fewest.map(|n| barriers - n)
    }

    /// Whether any is waiting for a flush (not in flight).
    pub fn any_waiting(&self) -> bool {
        match self {
            Writes::Few(v) => v.iter().any(|(_, p)| p.in_flight == NOT_IN_FLIGHT),
            Writes::Many(m) => m.values().any(|p| p.in_flight == NOT_IN_FLIGHT),
        }
    }

    /// How many are waiting for a flush (not in flight): what counts in `pending_len`.
    pub fn waiting(&self) -> usize {
        match self {
            Writes::Few(v) => v.iter().filter(|(_, p)| p.in_flight == NOT_IN_FLIGHT).count(),
            Writes::Many(m) => m.values().filter(|p| p.in_flight == NOT_IN_FLIGHT).count(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Writes::Few(v) => v.is_empty(),
            Writes::Many(m) => m.is_empty(),
        }
    }

    /// The writes whose key rest starts with `start`, in order (either way).
    pub fn starting_with<'a>(
        &'a self,
        start: &'a [u8],
    ) -> Box<dyn DoubleEndedIterator<Item = (&'a InlineKey, &'a Pending)> + 'a> {
        let end = prefix_end(start);
        match self {
            Writes::Few(v) => {
                let first = v.partition_point(|(k, _)| k.as_slice() < start);
                let last = match &end {
                    Some(end) => v.partition_point(|(k, _)| k.as_slice() < end.as_slice()),
                    None => v.len(),
                };
                Box::new(v[first..last].iter().map(|(k, p)| (k, p)))
            }
            Writes::Many(m) => {
                let upper = match end {
                    Some(end) => Bound::Excluded(end),
                    None => Bound::Unbounded,
                };
                Box::new(m.range::<[u8], _>((Bound::Included(start), upper.as_ref().map(|e| e.as_slice()))))
            }
        }
    }

    /// Drops the writes whose key rest starts with `start`, which the store does not hold: those
    /// waiting are forgotten, those in flight stay until their batch is in (and is forgotten by
    /// [`KeyedState::forget_landed`], which updates the cache): a delete as it is, a put as a
    /// delete waiting again. Returns how many fewer writes are waiting.
    pub fn remove_starting_with(&mut self, start: &[u8]) -> isize {
        let mut fewer = 0;
        self.retain(|k, p| {
            if !k.starts_with(start) {
                return true;
            }
            if p.in_flight == NOT_IN_FLIGHT {
                fewer += 1;
                return false;
            }
            if p.value.is_some() {
                p.value = None;
                p.maybe_stored = true;
                p.in_flight = NOT_IN_FLIGHT;
                fewer -= 1;
            }
            true
        });
        fewer
    }

    /// Keeps the writes `f` says to keep (it may change them), visiting them in key order.
    pub fn retain(&mut self, mut f: impl FnMut(&InlineKey, &mut Pending) -> bool) {
        match self {
            Writes::Few(v) => v.retain(|(k, p)| f(k, p)),
            Writes::Many(m) => m.retain(|k, p| f(k, p)),
        }
    }
}
