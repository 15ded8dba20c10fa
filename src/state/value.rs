//! The one encoding of operator state values that are not rows: an aggregate's group (its
//! counters and accumulators), a Top-N partition's list of rows, a multiplicity. Fields are
//! little-endian fixed-width integers and floats, one-byte tags, and byte strings prefixed by
//! their `u32` length, in the order the operator writes them; a value cut short is corrupt
//! (XX001, naming whose), never read as something else.
//!
//! These bytes are on disk in users' data directories and checkpoints. The encoding is the one
//! every release so far wrote (format 1, untagged: a value's layout is its operator's); a
//! change to a layout must come with a reader of the old one, chosen by the format the view's
//! state was written in, and a fixture in `tests/fixtures/upgrade/` proving it (ADR 26).
//!
//! Rows themselves are encoded with arrow-row (`state::table::row_codec`); checkpoint records
//! with `state::record`.

use crate::error::{Result, SqlState, WeirError};

/// Builds one value.
#[derive(Default)]
pub struct ValueWriter {
    bytes: Vec<u8>,
}

impl ValueWriter {
    pub fn with_capacity(capacity: usize) -> ValueWriter {
        ValueWriter { bytes: Vec::with_capacity(capacity) }
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }

    /// A byte string, prefixed by its length.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32).raw(v)
    }

    /// Bytes as they are (their length known to the reader some other way).
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(v);
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads one value's fields in the order they were written.
pub struct ValueReader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Whose value it is, for errors.
    what: &'static str,
}

impl<'a> ValueReader<'a> {
    pub fn new(bytes: &'a [u8], what: &'static str) -> ValueReader<'a> {
        ValueReader { bytes, at: 0, what }
    }

    fn corrupt(&self) -> WeirError {
        WeirError::new(SqlState::DATA_CORRUPTED, format!("{} is corrupt", self.what))
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or_else(|| self.corrupt())?;
        let out = self.bytes.get(self.at..end).ok_or_else(|| self.corrupt())?;
        self.at = end;
        Ok(out)
    }

    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub fn f64(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    /// A byte string [`ValueWriter::bytes`] wrote.
    pub fn slice(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// Whether every byte has been read.
    pub fn at_end(&self) -> bool {
        self.at == self.bytes.len()
    }
}

/// A multiplicity as stored (absent means 0): the value of [`KeyedState::add_count`]'s keys,
/// a join side's row counts, a session's row counts.
///
/// [`KeyedState::add_count`]: super::keyed::KeyedState::add_count
pub fn encode_count(n: i64) -> Vec<u8> {
    n.to_le_bytes().to_vec()
}

/// The multiplicity [`encode_count`] stored.
pub fn decode_count(bytes: &[u8]) -> Result<i64> {
    let bytes: [u8; 8] =
        bytes.try_into().map_err(|_| WeirError::new(SqlState::DATA_CORRUPTED, "a stored count is corrupt"))?;
    Ok(i64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_in_order_and_a_short_value_is_corrupt() {
        let mut w = ValueWriter::default();
        w.i64(-3).f64(1.5).u8(7).bytes(b"abc").u32(9);
        let bytes = w.finish();
        let mut r = ValueReader::new(&bytes, "a test value");
        assert_eq!((r.i64().unwrap(), r.f64().unwrap(), r.u8().unwrap()), (-3, 1.5, 7));
        assert_eq!((r.slice().unwrap(), r.u32().unwrap()), (&b"abc"[..], 9));
        assert!(r.at_end());
        let err = ValueReader::new(&bytes[..5], "a test value").i64().unwrap_err();
        assert_eq!(err.state, SqlState::DATA_CORRUPTED);
        assert_eq!(decode_count(&encode_count(42)).unwrap(), 42);
        assert!(decode_count(&[1, 2]).is_err());
    }
}
