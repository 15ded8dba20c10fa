//! Dead letters: records a source's connector could not decode (a malformed CSV line, a JSON
//! value of the wrong type). They are kept, not lost, and they do not stop the source.
//!
//! Each is stored with the chunk it was found in, in the same atomic write, under meta key
//! `dead_letters/<source id>/<position>`; a position names the record (file and record number),
//! so reading the same record again after a restart rewrites the same entry rather than adding
//! one. They are counted in `weir_source_dead_letters_total{source}` and listed in
//! `weir_catalog.dead_letters`; dropping the source deletes them.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SqlState, WeirError};
use crate::state::keys::{meta_key, prefix_end, TableId};
use crate::state::store::{ScanControl, StateStore, WriteBatch};

/// One record that could not be decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Where it was (`file:record`), unique within its source.
    pub position: String,
    /// Why it could not be decoded.
    pub error: String,
    /// The record as it was read.
    pub raw: String,
    /// When it was read (microseconds since the Unix epoch).
    pub read_at_micros: i64,
}

fn prefix(source: TableId) -> String {
    format!("dead_letters/{source:010}/")
}

/// Adds `letter` of source `source` to `wb`.
pub fn put(wb: &mut WriteBatch, source: TableId, letter: &DeadLetter) -> Result<()> {
    let value = serde_json::to_vec(letter).map_err(|e| WeirError::internal(format!("encoding a dead letter: {e}")))?;
    wb.put(meta_key(&format!("{}{}", prefix(source), letter.position)), value);
    Ok(())
}

/// Adds the deletion of every dead letter of `source` to `wb`.
pub fn delete_all(wb: &mut WriteBatch, source: TableId) {
    let start = meta_key(&prefix(source));
    let end = prefix_end(&start).unwrap_or_default();
    wb.delete_range(start, end);
}

/// Every dead letter, with its source's id, in source and position order.
pub fn load(store: &dyn StateStore) -> Result<Vec<(TableId, DeadLetter)>> {
    let start = meta_key("dead_letters/");
    let mut out = Vec::new();
    store.scan_prefix(&start, &mut |key, value| {
        let name = String::from_utf8_lossy(&key[start.len()..]);
        let source = name.split('/').next().and_then(|id| id.parse::<TableId>().ok());
        let letter = serde_json::from_slice::<DeadLetter>(value).ok();
        match (source, letter) {
            (Some(source), Some(letter)) => out.push((source, letter)),
            _ => return Err(WeirError::new(SqlState::DATA_CORRUPTED, format!("dead letter entry {name} is corrupt"))),
        }
        Ok(ScanControl::Continue)
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    #[test]
    fn stored_per_source_by_position_and_deleted_with_the_source() {
        let store = MemoryStore::new();
        let letter = |position: &str| DeadLetter {
            position: position.into(),
            error: "bad".into(),
            raw: "x,y".into(),
            read_at_micros: 1,
        };
        let mut wb = WriteBatch::default();
        put(&mut wb, 1001, &letter("a.csv:3")).unwrap();
        put(&mut wb, 1001, &letter("a.csv:3")).unwrap();
        put(&mut wb, 1002, &letter("b.csv:1")).unwrap();
        store.write(wb).unwrap();
        let all = load(&store).unwrap();
        assert_eq!(all, vec![(1001, letter("a.csv:3")), (1002, letter("b.csv:1"))]);
        let mut wb = WriteBatch::default();
        delete_all(&mut wb, 1001);
        store.write(wb).unwrap();
        assert_eq!(load(&store).unwrap(), vec![(1002, letter("b.csv:1"))]);
    }
}
