//! Virtual nodes: every keyed row belongs to one of [`VNODE_COUNT`] vnodes, a stable hash of its
//! key's memcomparable bytes. Shards of a view own vnodes (`key_shards`); stored keys carry
//! theirs (`state::keys`), so that state can be split between workers and machines by vnode
//! range. The hash and the count are part of the on-disk key format: fixed forever.

/// Number of virtual nodes every keyed relation is hashed into. Fixed forever: it is part of the
/// on-disk key format.
pub const VNODE_COUNT: u16 = 256;

/// The starting value of an [`fnv1a`] hash.
pub const FNV1A_START: u64 = 0xcbf29ce484222325;

/// FNV-1a over `bytes`, continuing from `hash` ([`FNV1A_START`] for a new one): stable across
/// builds and platforms.
pub fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// The vnode a memcomparable key belongs to.
pub fn vnode_of(key: &[u8]) -> u16 {
    (fnv1a(FNV1A_START, key) % VNODE_COUNT as u64) as u16
}
