//! A Kafka source's position detail: the next offset of each partition of its topic, as one
//! versioned record (`state::record`) inside the source's [`Position`].

use std::collections::BTreeMap;

use crate::catalog::replay::Position;
use crate::error::Result;
use crate::state::record::{RecordReader, RecordWriter};

/// Next offset to read, by partition.
pub type Offsets = BTreeMap<i32, i64>;

/// The position after `records` records with `offsets` next.
pub fn position(records: u64, offsets: &Offsets) -> Position {
    let mut record = RecordWriter::default();
    record.u64(offsets.len() as u64);
    for (&partition, &offset) in offsets {
        record.i64(partition as i64).i64(offset);
    }
    Position { records, detail: record.finish() }
}

/// The offsets in `position` (none for a source that has read nothing yet).
pub fn offsets(position: &Position) -> Result<Offsets> {
    if position.detail.is_empty() {
        return Ok(Offsets::new());
    }
    let mut r = RecordReader::new(&position.detail, "a Kafka source's position")?;
    let mut offsets = Offsets::new();
    for _ in 0..r.u64()? {
        let partition = r.i64()?;
        let partition = i32::try_from(partition)
            .map_err(|_| crate::state::record::corrupt("a Kafka source's position", "a partition past i32"))?;
        offsets.insert(partition, r.i64()?);
    }
    r.finish()?;
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_survive_their_position_and_damage_is_refused() {
        let offsets: Offsets = [(0, 17), (2, 0), (5, i64::MAX)].into_iter().collect();
        let p = position(42, &offsets);
        let decoded = Position::decode(&p.encode()).unwrap();
        assert_eq!((decoded.records, super::offsets(&decoded).unwrap()), (42, offsets));
        assert!(super::offsets(&Position::at(3)).unwrap().is_empty());
        let cut = Position { records: 1, detail: p.detail[..p.detail.len() - 1].to_vec() };
        assert!(super::offsets(&cut).is_err());
    }
}
