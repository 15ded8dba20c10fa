//! Rows of partitions in sort order, as a multiset in a [`KeyedState`]: the key is
//! `partition ++ order ++ row ++ len(row)` (each part memcomparable, arrow-row encoded; the order
//! key prefix-free), the value the row's multiplicity. So a partition's rows are one prefix read
//! in order, rows equal in the order ranked by the whole row (deterministic), and a row is read
//! back from its key's tail. The Top-N over an input that retracts (`operators::top_n`) and the
//! window functions (`operators::over_window`) keep their rows so.

use super::keyed::KeyedState;
use super::keys::KeyRef;
use super::value::decode_count;
use crate::error::{Result, WeirError};

/// The state key of `row` in `partition`, at `order`, into `key` (cleared first).
pub fn key_of(key: &mut Vec<u8>, partition: &[u8], order: &[u8], row: &[u8]) {
    key.clear();
    key.extend_from_slice(partition);
    key.extend_from_slice(order);
    key.extend_from_slice(row);
    key.extend_from_slice(&(row.len() as u32).to_be_bytes());
}

/// A state key's order key and row, after its partition's `partition_len` bytes.
pub fn split(key: &[u8], partition_len: usize) -> (&[u8], &[u8]) {
    let (rest, len) = key.split_at(key.len() - 4);
    let row_len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
    let rest = &rest[partition_len..];
    rest.split_at(rest.len() - row_len)
}

/// Adds `sign` copies of `row` (at `order`) to `partition`.
pub fn add(
    state: &mut KeyedState,
    key: &mut Vec<u8>,
    partition: &[u8],
    order: &[u8],
    row: &[u8],
    sign: i64,
) -> Result<()> {
    key_of(key, partition, order, row);
    let (_, after) = state.add_count(KeyRef::with_distribution(key, partition.len()), sign)?;
    if after < 0 {
        return Err(WeirError::internal("a row was deleted from a partition that never held it"));
    }
    Ok(())
}

/// Every row of `partition` in order, each as often as it is there.
pub fn rows(state: &KeyedState, partition: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut rows = Vec::new();
    for (key, count) in state.scan_prefix(KeyRef::whole(partition))? {
        let (_, row) = split(&key, partition.len());
        for _ in 0..decode_count(&count)?.max(0) {
            rows.push(row.to_vec());
        }
    }
    Ok(rows)
}
