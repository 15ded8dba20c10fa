//! Which keys of an operator state table the store holds, while they are few enough to track:
//! what lets `KeyedState` answer a lookup of any other key from memory.

use crate::types::hash::HashSet;
use crate::types::vnode::{vnode_of, VNODE_COUNT};

/// Which keys of a table the store holds.
#[derive(Debug)]
pub enum StoredKeys {
    /// Exactly `keys` (logical keys, without table id and vnode; at most the table's capacity),
    /// and how many of them are in each vnode, for questions about a prefix.
    Exactly { keys: HashSet<Vec<u8>>, per_vnode: Box<[u32; VNODE_COUNT as usize]> },
    /// Not tracked: any key may be stored.
    Unknown,
}

impl StoredKeys {
    pub fn none() -> StoredKeys {
        StoredKeys::Exactly { keys: HashSet::default(), per_vnode: Box::new([0; VNODE_COUNT as usize]) }
    }

    /// Whether the store holds `key`: None when not tracked.
    pub fn holds(&self, key: &[u8]) -> Option<bool> {
        match self {
            StoredKeys::Exactly { keys, .. } => Some(keys.contains(key)),
            StoredKeys::Unknown => None,
        }
    }

    /// Whether the store may hold a key starting with `prefix`, which begins with a whole
    /// distribution prefix of `distribution_len` bytes: not if no stored key is in its vnode.
    pub fn may_hold_prefix(&self, prefix: &[u8], distribution_len: usize) -> bool {
        match self {
            StoredKeys::Exactly { per_vnode, .. } => {
                per_vnode[vnode_of(&prefix[..distribution_len.min(prefix.len())]) as usize] > 0
            }
            StoredKeys::Unknown => true,
        }
    }

    /// Records a write of `key` (in `vnode`) reaching the store (`stored`: a put; else a
    /// delete); past `limit` keys stops tracking.
    pub fn record(&mut self, key: &[u8], vnode: u16, stored: bool, limit: usize) {
        let StoredKeys::Exactly { keys, per_vnode } = self else { return };
        if !stored {
            if keys.remove(key) {
                per_vnode[vnode as usize] -= 1;
            }
        } else if !keys.contains(key) {
            if keys.len() >= limit {
                *self = StoredKeys::Unknown;
            } else {
                keys.insert(key.to_vec());
                per_vnode[vnode as usize] += 1;
            }
        }
    }
}
