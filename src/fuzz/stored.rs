//! The `stored` target: bytes as Weir reads them back from its data directory or checkpoint
//! store, where a torn write, a bad disk or an older release may have left anything. The first
//! byte says which reader takes the rest; each must return an error (22P02/XX001-style corrupt
//! data), never panic.

use std::collections::BTreeMap;

use super::{contained, MAX_INPUT};

/// Which reader takes the input, by its first byte.
pub fn stored(data: &[u8]) {
    if data.len() <= MAX_INPUT {
        contained::run(|| read(data));
    }
}

fn read(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 10 {
        0 => drop(crate::checkpoint::manifest::Manifest::decode(rest)),
        9 => {
            // A manifest whose checksum holds (a release that wrote it differently, or a
            // checksum that matched by chance): its JSON and format are read.
            let mut bytes = rest.to_vec();
            bytes.extend_from_slice(format!("\n{:08x}\n", crc32fast::hash(rest)).as_bytes());
            drop(crate::checkpoint::manifest::Manifest::decode(&bytes));
        }
        1 => {
            // A change-log value under a well-formed key (keys come from the store's own
            // prefix scan; values are what a crash may have torn).
            let mut key = vec![0u8; 24];
            key[4..12].copy_from_slice(&7u64.to_be_bytes());
            key[12..16].copy_from_slice(&42u32.to_be_bytes());
            drop(crate::catalog::change_log::decode(&key, rest));
        }
        2 => drop(crate::catalog::replay::ChunkEntry::decode(rest, "a fuzzed chunk")),
        3 => {
            let position = crate::catalog::replay::Position { records: 0, detail: rest.to_vec() };
            drop(crate::connectors::kafka::offsets::offsets(&position));
        }
        4 => {
            // A sink's outbox record: a count, then that many change batches.
            let Ok(mut r) = crate::state::record::RecordReader::new(rest, "a fuzzed outbox") else { return };
            if let Ok(n) = r.u64() {
                for _ in 0..n.min(64) {
                    if r.changes().is_err() {
                        return;
                    }
                }
                drop(r.finish());
            }
        }
        5 => {
            let Ok(mut r) = crate::state::record::RecordReader::new(rest, "a fuzzed key list") else { return };
            let keys: crate::error::Result<BTreeMap<i64, Vec<Vec<u8>>>> = r.keys_by_time();
            drop(keys);
        }
        6 => drop(crate::state::table::decode_ipc(rest)),
        7 => drop(serde_json::from_slice::<crate::catalog::persist::RelationDef>(rest)),
        8 => {
            let mut r = crate::state::value::ValueReader::new(rest, "a fuzzed value");
            while !r.at_end() {
                let step = r.u8().map(drop).and_then(|_| r.exact_sum().map(drop)).and_then(|_| r.slice().map(drop));
                if step.is_err() {
                    break;
                }
            }
        }
        _ => unreachable!("which % 10"),
    }
}
