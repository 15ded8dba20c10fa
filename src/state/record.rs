//! The one encoding of what operators keep in memory besides their state tables and store at
//! checkpoints ([`crate::operators::operator::Operator::save_record`]): windows by close time,
//! row numbers, rows by expiry time.
//!
//! A record starts with a format byte ([`FORMAT`]); fields follow as fixed-width big-endian
//! integers and length-prefixed byte strings, in the order the operator wrote them. A record
//! that is cut short, has bytes left over or another format is a corrupt checkpoint (XX001),
//! never silently read as something else: a checkpoint outlives the binary that wrote it, so
//! a later format gets a new number and a decoder for the old one.
//!
//! Written by operators at checkpoint barriers, read once when a view is restored.

use std::collections::BTreeMap;

use datafusion::arrow::array::RecordBatch;

use super::table::{decode_ipc, encode_ipc};
use crate::error::{Result, SqlState, WeirError};
use crate::types::{ChangeBatch, Op};

/// The record format this build writes. Format 2 (ADR 22) changed the hash join's part only:
/// each side says how it holds its rows (rows by time in its table, or segments in memory);
/// every other operator's fields are as in format 1, which is still read. A build reading only
/// format 1 refuses format-2 records.
pub const FORMAT: u8 = 2;

/// The oldest record format this build reads.
pub const OLDEST_FORMAT: u8 = 1;

/// Builds one record.
pub struct RecordWriter {
    bytes: Vec<u8>,
}

impl Default for RecordWriter {
    fn default() -> Self {
        RecordWriter { bytes: vec![FORMAT] }
    }
}

impl RecordWriter {
    /// A part of a record, without the format byte, kept encoded ahead by an operator whose
    /// index is mostly appended to (a join's rows by time): copied into a record with
    /// [`RecordWriter::raw`], read back with [`RecordReader::fragment`].
    pub fn fragment() -> RecordWriter {
        RecordWriter { bytes: Vec::new() }
    }

    /// Appends `part` (a fragment's bytes) as it is.
    pub fn raw(&mut self, part: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(part);
        self
    }

    /// Makes room for `additional` more bytes at once (a large record written piece by piece
    /// would otherwise be copied each time its buffer doubles).
    pub fn reserve(&mut self, additional: usize) -> &mut Self {
        self.bytes.reserve(additional);
        self
    }

    /// What has been written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.bytes.extend_from_slice(v);
        self
    }

    /// An optional `i64` (a watermark).
    pub fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(v) => self.u64(1).i64(v),
            None => self.u64(0),
        }
    }

    /// Keys by time (windows by close time, rows by expiry).
    pub fn keys_by_time(&mut self, map: &BTreeMap<i64, Vec<Vec<u8>>>) -> &mut Self {
        self.u64(map.len() as u64);
        for (time, keys) in map {
            self.i64(*time).u64(keys.len() as u64);
            for k in keys {
                self.bytes(k);
            }
        }
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

/// Reads one record, in the order it was written.
pub struct RecordReader<'a> {
    rest: &'a [u8],
    what: &'a str,
    format: u8,
}

impl<'a> RecordReader<'a> {
    /// A reader of a fragment's bytes ([`RecordWriter::fragment`]).
    pub fn fragment(part: &'a [u8], what: &'a str) -> RecordReader<'a> {
        RecordReader { rest: part, what, format: FORMAT }
    }

    /// A reader of `record`, which belongs to `what` (an operator's description, for errors).
    pub fn new(record: &'a [u8], what: &'a str) -> Result<RecordReader<'a>> {
        match record.split_first() {
            Some((&format, rest)) if (OLDEST_FORMAT..=FORMAT).contains(&format) => {
                Ok(RecordReader { rest, what, format })
            }
            Some((other, _)) => {
                Err(corrupt(what, &format!("record format {other}, this build reads {OLDEST_FORMAT} to {FORMAT}")))
            }
            None => Err(corrupt(what, "an empty record")),
        }
    }

    /// The format the record was written in (a fragment's: this build's).
    pub fn format(&self) -> u8 {
        self.format
    }

    /// How many bytes are left to read (the offset of what comes next is the record's length
    /// less this).
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(corrupt(self.what, "a record cut short"));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>> {
        Ok(self.slice()?.to_vec())
    }

    /// A byte string, borrowed from the record.
    pub fn slice(&mut self) -> Result<&'a [u8]> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| corrupt(self.what, "a length past the address space"))?;
        self.take(n)
    }

    pub fn opt_i64(&mut self) -> Result<Option<i64>> {
        match self.u64()? {
            0 => Ok(None),
            1 => Ok(Some(self.i64()?)),
            _ => Err(corrupt(self.what, "a bad option tag")),
        }
    }

    pub fn keys_by_time(&mut self) -> Result<BTreeMap<i64, Vec<Vec<u8>>>> {
        let mut map = BTreeMap::new();
        for _ in 0..self.u64()? {
            let time = self.i64()?;
            let n = self.u64()?;
            let keys = (0..n).map(|_| self.bytes()).collect::<Result<Vec<_>>>()?;
            map.insert(time, keys);
        }
        Ok(map)
    }

    /// Whether the record has been read to its end (a field added later is absent from
    /// records written before).
    pub fn at_end(&self) -> bool {
        self.rest.is_empty()
    }

    /// The record is read: bytes left over mean it was not what the reader expected.
    pub fn finish(self) -> Result<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(corrupt(self.what, "bytes left over"))
        }
    }
}

/// The error of a record of `what` that is not what its reader expects.
pub fn corrupt(what: &str, why: &str) -> WeirError {
    WeirError::new(SqlState::DATA_CORRUPTED, format!("the checkpointed index of {what} is corrupt: {why}"))
}

impl RecordWriter {
    /// Adds `changes`: the one encoding of stored changes (the change log, a sink's outbox), the
    /// ops, one byte each, then the rows in Arrow IPC.
    pub fn changes(&mut self, changes: &ChangeBatch) -> Result<&mut Self> {
        let ops: Vec<u8> = changes.ops.iter().map(|op| op.code()).collect();
        self.bytes(&ops).bytes(&encode_ipc(&changes.data)?);
        Ok(self)
    }
}

impl RecordReader<'_> {
    /// The changes [`RecordWriter::changes`] added.
    pub fn changes(&mut self) -> Result<ChangeBatch> {
        let what = self.what;
        let corrupt = |why: &str| corrupt(what, why);
        let ops = self
            .bytes()?
            .into_iter()
            .map(|code| Op::from_code(code).ok_or_else(|| corrupt("an unknown change kind")))
            .collect::<Result<Vec<_>>>()?;
        let batches = decode_ipc(&self.bytes()?).map_err(|why| corrupt(&why))?;
        let [data]: [RecordBatch; 1] = batches.try_into().map_err(|_| corrupt("not one batch of changes"))?;
        if data.num_rows() != ops.len() {
            return Err(corrupt("changes and their kinds differ in number"));
        }
        Ok(ChangeBatch::new(data, ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_damage_is_refused() {
        let mut map = BTreeMap::new();
        map.insert(-5, vec![b"a".to_vec(), vec![]]);
        map.insert(9, vec![vec![0xff; 40]]);
        let record = RecordWriter::default().u64(7).opt_i64(Some(-1)).opt_i64(None).keys_by_time(&map).finish();
        let mut r = RecordReader::new(&record, "test").unwrap();
        assert_eq!(r.u64().unwrap(), 7);
        assert_eq!(r.opt_i64().unwrap(), Some(-1));
        assert_eq!(r.opt_i64().unwrap(), None);
        assert_eq!(r.keys_by_time().unwrap(), map);
        r.finish().unwrap();
        // Cut short, extended, another format: each an error, never a different index.
        for bad in [&record[..record.len() - 1], &[record.as_slice(), &[0]].concat()[..], &[FORMAT + 1, 0][..], &[][..]]
        {
            let read = RecordReader::new(bad, "test").and_then(|mut r| {
                r.u64()?;
                r.opt_i64()?;
                r.opt_i64()?;
                r.keys_by_time()?;
                r.finish()
            });
            assert_eq!(read.unwrap_err().state, SqlState::DATA_CORRUPTED);
        }
    }
}
