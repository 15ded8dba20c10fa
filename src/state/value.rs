//! The one encoding of operator state values that are not rows: an aggregate's group (its
//! counters and accumulators), a Top-N partition's list of rows, a multiplicity. Fields are
//! little-endian fixed-width integers and floats, one-byte tags, and byte strings prefixed by
//! their `u32` length, in the order the operator writes them; a value cut short is corrupt
//! (XX001, naming whose), never read as something else.
//!
//! These bytes are on disk in users' data directories and checkpoints. Values are untagged (a
//! value's layout is its operator's), so the format is the view's: each view records the
//! [`StateFormat`] its state is written in (`RelationDef::state_format`), and its operators
//! read and write that one for as long as the view lives, while new views take the current
//! one. A change to a layout is a new format with the old one's reader kept, and a fixture in
//! `tests/fixtures/upgrade/` proving it (ADR 26).
//!
//! Rows themselves are encoded with arrow-row (`state::table::row_codec`); checkpoint records
//! with `state::record`.

use crate::error::{Result, SqlState, WeirError};
use crate::types::exact_sum::ExactSum;

/// The format of a view's operator state values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StateFormat(u32);

impl StateFormat {
    /// Every release before formats were recorded: `avg` keeps a floating-point running sum,
    /// and so does `sum` over floating-point values (a value taken away may leave a rounding
    /// error behind: `1e17 + 1 - 1e17` is 0).
    pub const FIRST: StateFormat = StateFormat(1);
    /// `avg` and floating-point `sum` keep their sum exactly ([`ExactSum`]).
    pub const EXACT_SUMS: StateFormat = StateFormat(2);
    /// A join whose condition bounds two sides' times, one a watermarked column of an
    /// append-only input (not a window bound), judges that side's rows behind the watermark
    /// late and frees the other side's rows no future partner can meet (`operators::hash_join`).
    /// Before, such a join kept every row and took late ones.
    pub const RAW_INTERVALS_EXPIRE: StateFormat = StateFormat(3);
    /// A two-phase aggregate (`WITH (two_phase_aggregation = true)`) keeps one partial per
    /// group and shard (ADR 31); before, one per group and bucket of 64 (`stream_plan::spread`).
    pub const PARTIALS_PER_SHARD: StateFormat = StateFormat(4);
    /// The format new views write.
    pub const CURRENT: StateFormat = StateFormat::PARTIALS_PER_SHARD;

    /// The format a view recorded (0: recorded before formats were, the first); a format this
    /// release does not know (written by a newer one) is an error naming it.
    pub fn recorded(number: u32) -> Result<StateFormat> {
        match number {
            0 => Ok(StateFormat::FIRST),
            n if n <= StateFormat::CURRENT.0 => Ok(StateFormat(n)),
            n => Err(WeirError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "the view's state is in format {n}, written by a newer release of Weir; this one reads formats up to {}",
                    StateFormat::CURRENT.0
                ),
            )),
        }
    }

    /// The number recorded with the view.
    pub fn number(self) -> u32 {
        self.0
    }
}

/// New views write the current format.
impl Default for StateFormat {
    fn default() -> StateFormat {
        StateFormat::CURRENT
    }
}

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

    /// An exact sum: its lowest limb's index, how many limbs, the limbs, then its counts of
    /// +inf, -inf and NaN.
    pub fn exact_sum(&mut self, v: &ExactSum) -> &mut Self {
        let (lowest, limbs, pos_inf, neg_inf, nan) = v.parts();
        self.u32(lowest).u32(limbs.len() as u32);
        limbs.iter().for_each(|&l| {
            self.i64(l);
        });
        self.i64(pos_inf).i64(neg_inf).i64(nan)
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

    /// An exact sum [`ValueWriter::exact_sum`] wrote.
    pub fn exact_sum(&mut self) -> Result<ExactSum> {
        let lowest = self.u32()?;
        let n = self.u32()? as usize;
        if n > self.bytes.len() / 8 {
            return Err(self.corrupt());
        }
        let limbs = (0..n).map(|_| self.i64()).collect::<Result<Vec<i64>>>()?;
        let parts = (lowest, limbs, self.i64()?, self.i64()?, self.i64()?);
        ExactSum::from_parts(parts).ok_or_else(|| self.corrupt())
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

    #[test]
    fn exact_sums_read_back_and_formats_are_known_or_refused() {
        let mut sum = ExactSum::default();
        sum.add_f64(1e17, 1);
        sum.add_f64(0.125, 1);
        sum.add_f64(f64::INFINITY, 1);
        sum.add_f64(f64::INFINITY, -1);
        let mut w = ValueWriter::default();
        w.exact_sum(&sum).u8(5);
        let bytes = w.finish();
        let mut r = ValueReader::new(&bytes, "a test value");
        assert_eq!((r.exact_sum().unwrap(), r.u8().unwrap()), (sum, 5));
        assert!(ValueReader::new(&bytes[..bytes.len() - 2], "a test value").exact_sum().is_err());
        assert_eq!(StateFormat::recorded(0).unwrap(), StateFormat::FIRST);
        assert_eq!(StateFormat::recorded(2).unwrap(), StateFormat::EXACT_SUMS);
        let newer = StateFormat::recorded(StateFormat::CURRENT.number() + 1).unwrap_err();
        assert!(newer.message.contains("newer release"), "{}", newer.message);
    }
}
