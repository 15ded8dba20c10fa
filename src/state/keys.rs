//! The layout of every key in the store:
//!
//! ```text
//! [table id: u32 big-endian][vnode: u16 big-endian][memcomparable key columns]
//! ```
//!
//! (Segments of append-only tables use vnode 0 and their first row's key: [`segment_key`].)
//!
//! Table id 0 is reserved for metadata (the catalog and sequences), whose keys are
//! `[0u32][utf-8 name]`. The vnode is a stable hash of the key bytes into [`VNODE_COUNT`](crate::types::vnode::VNODE_COUNT) virtual
//! nodes (of the bytes of the leading key columns only, for a table distributed by them: an
//! index, `state::table`), so that a table's state can later be split between workers (and machines) by vnode
//! range without rewriting keys.

use crate::types::vnode::vnode_of;

/// A key of an operator state table ([`KeyedState`](super::keyed::KeyedState)), with its layout:
/// its first bytes are its *distribution* (a group's key, a join key, a Top-N partition, a
/// shard's prefix), which picks its vnode and keeps together the writes sharing it; the rest
/// (an aggregate's value, a row, a time) follows. Made by naming the parts ([`StateKey`]) or a
/// key that is all distribution ([`KeyRef::whole`]), so a key cannot meet a table with a length
/// of some other key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    bytes: &'a [u8],
    distribution_len: usize,
}

impl<'a> KeyRef<'a> {
    /// A key that is all distribution.
    pub fn whole(bytes: &'a [u8]) -> KeyRef<'a> {
        KeyRef { bytes, distribution_len: bytes.len() }
    }

    /// A key whose first `distribution_len` bytes are its distribution: built in a buffer the
    /// caller reuses, or read back with its length (a join's record of its rows' keys); a
    /// length past the key is the whole key.
    pub fn with_distribution(bytes: &'a [u8], distribution_len: usize) -> KeyRef<'a> {
        KeyRef { bytes, distribution_len: distribution_len.min(bytes.len()) }
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn distribution(&self) -> &'a [u8] {
        &self.bytes[..self.distribution_len]
    }

    /// How long the distribution is (for the state table's own bookkeeping).
    pub fn distribution_len(&self) -> usize {
        self.distribution_len
    }

    /// `other`, another key's bytes, under this key's distribution (a key found by a prefix
    /// scan under it).
    pub fn sibling(&self, other: &'a [u8]) -> KeyRef<'a> {
        KeyRef::with_distribution(other, self.distribution_len)
    }
}

/// An owned [`KeyRef`]: built from its distribution, then the rest appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateKey {
    bytes: Vec<u8>,
    distribution_len: usize,
}

impl StateKey {
    /// The key `distribution`, ready for the rest (`extra` bytes of it expected).
    pub fn under(distribution: &[u8], extra: usize) -> StateKey {
        let mut bytes = Vec::with_capacity(distribution.len() + extra);
        bytes.extend_from_slice(distribution);
        StateKey { bytes, distribution_len: distribution.len() }
    }

    /// Appends `rest` to the key.
    pub fn then(mut self, rest: &[u8]) -> StateKey {
        self.bytes.extend_from_slice(rest);
        self
    }

    pub fn key(&self) -> KeyRef<'_> {
        KeyRef { bytes: &self.bytes, distribution_len: self.distribution_len }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Table id of the metadata keyspace.
pub const META_TABLE_ID: u32 = 0;

pub type TableId = u32;

/// Operator state tables of view `view_id` have ids `OPERATOR_STATE_BASE | view_id << 8 | n`,
/// `n` < 256, apart from every relation's id; the range is cleared when the view is dropped.
pub const OPERATOR_STATE_BASE: TableId = 0x8000_0000;

/// The state table a view's runtime keeps at checkpoints: its operators' checkpoint records and its
/// inputs' watermarks (`dataflow::job`); operators number theirs below it.
pub const RUNTIME_STATE_TABLE: u8 = 255;

/// The table change log (`catalog::change_log`): every table's and source's changes since the
/// newest checkpoint, by epoch. Below the operator state range and above any relation id.
pub const CHANGE_LOG_TABLE: TableId = 0x7fff_ffff;

/// The id of state table `n` of view `view_id`'s operators.
pub fn operator_state_table(view_id: TableId, n: u8) -> TableId {
    OPERATOR_STATE_BASE | (view_id << 8) | n as TableId
}

/// The key range holding every operator state table of view `view_id`.
pub fn operator_state_range(view_id: TableId) -> (Vec<u8>, Vec<u8>) {
    (
        table_prefix(operator_state_table(view_id, 0)).to_vec(),
        table_prefix(operator_state_table(view_id + 1, 0)).to_vec(),
    )
}

/// The prefix shared by all keys of one table.
pub fn table_prefix(table_id: TableId) -> [u8; 4] {
    table_id.to_be_bytes()
}

/// The full store key of a row of `table_id` whose memcomparable key is `key`.
pub fn row_key(table_id: TableId, key: &[u8]) -> Vec<u8> {
    row_key_in(table_id, vnode_of(key), key)
}

/// The full store key of a row of `table_id` in `vnode` whose memcomparable key is `key`: for
/// tables whose vnode hashes a prefix of the key columns only (`state::table`).
pub fn row_key_in(table_id: TableId, vnode: u16, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(6 + key.len());
    out.extend_from_slice(&table_id.to_be_bytes());
    out.extend_from_slice(&vnode.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The store key of a segment of an append-only table whose first row's memcomparable key is
/// `first_key`. Segments all sit in vnode 0 (a segment is not one key's), so a prefix scan reads
/// them in key order, which is the order they were written.
pub fn segment_key(table_id: TableId, first_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(6 + first_key.len());
    out.extend_from_slice(&table_id.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(first_key);
    out
}

/// The keys one shard of an operator keeps beside its state table's rows, in that table:
/// `[0xff][shard]` under one vnode, then what the operator appends (ADR 22's row segments,
/// ADR 24's group parts). Apart from every row key: arrow-row keys start with a validity byte
/// below 0xff.
#[derive(Clone, Debug)]
pub struct ShardKeys {
    prefix: Vec<u8>,
}

impl ShardKeys {
    /// Shard `shard`'s keys in `table_id`.
    pub fn new(table_id: TableId, shard: u16) -> ShardKeys {
        let tagged = [0xff, (shard >> 8) as u8, shard as u8];
        ShardKeys { prefix: row_key_in(table_id, vnode_of(&tagged), &tagged) }
    }

    /// The prefix of all of the shard's keys.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The shard's key ending in `suffix`.
    pub fn key(&self, suffix: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + suffix.len());
        key.extend_from_slice(&self.prefix);
        key.extend_from_slice(suffix);
        key
    }

    /// The range of all of the shard's keys, to delete them at once.
    pub fn range(&self) -> (Vec<u8>, Vec<u8>) {
        (self.prefix.clone(), prefix_end(&self.prefix).expect("a prefix ending below 0xff"))
    }
}

/// The store key of a metadata entry.
pub fn meta_key(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&META_TABLE_ID.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// The smallest key greater than every key starting with `prefix` (None if there is none).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::vnode::{fnv1a, FNV1A_START, VNODE_COUNT};

    #[test]
    fn vnode_is_stable_and_in_range() {
        // Part of the on-disk format: this value must never change.
        // FNV-1a 64 of "abc" is 0xe71fa2190541574b (the published test vector).
        assert_eq!(fnv1a(FNV1A_START, b"abc"), 0xe71fa2190541574b);
        assert_eq!(vnode_of(b"abc"), 0x4b);
        assert!(vnode_of(b"") < VNODE_COUNT);
        let k = row_key(7, b"k");
        assert_eq!(&k[..4], &7u32.to_be_bytes());
        assert_eq!(&k[6..], b"k");
    }

    #[test]
    fn prefix_end_skips_ff() {
        assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
    }
}
