//! The hash maps and sets of the data path (operators, state caches), keyed by encoded rows.
//!
//! They use foldhash's quality hasher, seeded per process: several times faster than the
//! standard library's SipHash on short byte keys, and still randomly seeded, so crafted keys
//! cannot be aimed at one bucket across restarts. The session's plan cache uses them too (keyed
//! by syntax trees, hashed at each Execute); everything else uses the standard maps.

pub type RandomState = foldhash::quality::RandomState;
pub type HashMap<K, V> = std::collections::HashMap<K, V, RandomState>;
pub type HashSet<K> = std::collections::HashSet<K, RandomState>;
