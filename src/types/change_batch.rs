//! [`ChangeBatch`]: an Arrow batch of rows, each with an [`Op`] saying whether it is inserted or
//! deleted. The ops sit beside the columns so DataFusion expressions evaluate on `data`
//! unchanged.
//!
//! `UpdateDelete` / `UpdateInsert` mark the two halves of an update. Weir's operators treat them
//! as a delete and an insert (they never rely on the pairing), so an operator that drops half of
//! a pair leaves a valid changelog.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{concat_batches, take_record_batch};
use datafusion::arrow::datatypes::SchemaRef;

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Insert,
    Delete,
    UpdateDelete,
    UpdateInsert,
}

impl Op {
    /// +1 for rows that enter, -1 for rows that leave.
    pub fn sign(self) -> i64 {
        match self {
            Op::Insert | Op::UpdateInsert => 1,
            Op::Delete | Op::UpdateDelete => -1,
        }
    }

    /// Its byte in stored changes.
    pub fn code(self) -> u8 {
        match self {
            Op::Insert => 0,
            Op::Delete => 1,
            Op::UpdateDelete => 2,
            Op::UpdateInsert => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<Op> {
        Some(match code {
            0 => Op::Insert,
            1 => Op::Delete,
            2 => Op::UpdateDelete,
            3 => Op::UpdateInsert,
            _ => return None,
        })
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Op::Insert => "+",
            Op::Delete => "-",
            Op::UpdateDelete => "U-",
            Op::UpdateInsert => "U+",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ChangeBatch {
    pub data: RecordBatch,
    pub ops: Vec<Op>,
}

impl ChangeBatch {
    pub fn new(data: RecordBatch, ops: Vec<Op>) -> ChangeBatch {
        debug_assert_eq!(data.num_rows(), ops.len());
        ChangeBatch { data, ops }
    }

    /// Every row inserted.
    pub fn inserts(data: RecordBatch) -> ChangeBatch {
        let ops = vec![Op::Insert; data.num_rows()];
        ChangeBatch { data, ops }
    }

    /// Every row deleted.
    pub fn deletes(data: RecordBatch) -> ChangeBatch {
        let ops = vec![Op::Delete; data.num_rows()];
        ChangeBatch { data, ops }
    }

    pub fn num_rows(&self) -> usize {
        self.ops.len()
    }

    /// `len` rows from `offset` (the columns shared, not copied).
    pub fn slice(&self, offset: usize, len: usize) -> ChangeBatch {
        ChangeBatch { data: self.data.slice(offset, len), ops: self.ops[offset..offset + len].to_vec() }
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn schema(&self) -> SchemaRef {
        self.data.schema()
    }

    /// The same rows with other columns (a projection of `data`).
    pub fn with_data(&self, data: RecordBatch) -> ChangeBatch {
        ChangeBatch { data, ops: self.ops.clone() }
    }

    /// The rows at `indices`, in that order.
    pub fn take(&self, indices: &[u32]) -> Result<ChangeBatch> {
        let idx = UInt32Array::from(indices.to_vec());
        let data = take_record_batch(&self.data, &idx)?;
        Ok(ChangeBatch { data, ops: indices.iter().map(|&i| self.ops[i as usize]).collect() })
    }

    /// Several batches of one schema as one.
    pub fn concat(schema: &SchemaRef, batches: &[ChangeBatch]) -> Result<ChangeBatch> {
        let data = concat_batches(schema, batches.iter().map(|b| &b.data))?;
        let ops = batches.iter().flat_map(|b| b.ops.iter().copied()).collect();
        Ok(ChangeBatch { data, ops })
    }

    /// Rows as text with their ops, one per line, for tests and debugging (`+ 1 a`).
    pub fn to_pretty(&self) -> String {
        use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
        let options = FormatOptions::default().with_null("NULL");
        let formatters: Vec<ArrayFormatter> = self
            .data
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        let mut out = String::new();
        for (row, op) in self.ops.iter().enumerate() {
            out.push_str(op.symbol());
            for f in &formatters {
                out.push(' ');
                out.push_str(&f.value(row).to_string());
            }
            out.push('\n');
        }
        out
    }
}

/// A batch for tests from readable text: the first line names column types (`I` Int64, `F`
/// Float64, `T` Utf8), each following line an op (`+`, `-`, `U-`, `U+`) and values (`.` = NULL).
///
/// ```text
/// I T
/// + 1 a
/// U- 2 b
/// U+ 2 c
/// ```
pub fn from_pretty(text: &str) -> ChangeBatch {
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let types: Vec<char> =
        lines.next().expect("type line").split_whitespace().map(|t| t.chars().next().unwrap()).collect();
    let mut ops = Vec::new();
    let mut cells: Vec<Vec<Option<String>>> = vec![Vec::new(); types.len()];
    for line in lines {
        let mut parts = line.split_whitespace();
        ops.push(match parts.next().expect("op") {
            "+" => Op::Insert,
            "-" => Op::Delete,
            "U-" => Op::UpdateDelete,
            "U+" => Op::UpdateInsert,
            other => panic!("unknown op {other}"),
        });
        for (i, v) in parts.enumerate() {
            cells[i].push(if v == "." { None } else { Some(v.to_string()) });
        }
    }
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (i, (t, col)) in types.iter().zip(cells).enumerate() {
        let (dt, array): (DataType, ArrayRef) = match t {
            'I' => (
                DataType::Int64,
                Arc::new(col.iter().map(|v| v.as_ref().map(|s| s.parse::<i64>().unwrap())).collect::<Int64Array>()),
            ),
            'F' => (
                DataType::Float64,
                Arc::new(col.iter().map(|v| v.as_ref().map(|s| s.parse::<f64>().unwrap())).collect::<Float64Array>()),
            ),
            'T' => (DataType::Utf8, Arc::new(col.iter().cloned().collect::<StringArray>())),
            // A TIMESTAMP given in seconds since 1970.
            'S' => (
                DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Second, None),
                Arc::new(
                    col.iter()
                        .map(|v| v.as_ref().map(|s| s.parse::<i64>().unwrap()))
                        .collect::<datafusion::arrow::array::TimestampSecondArray>(),
                ),
            ),
            other => panic!("unknown type {other}"),
        };
        fields.push(Field::new(format!("c{i}"), dt, true));
        columns.push(array);
    }
    ChangeBatch::new(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch"), ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_round_trip() {
        let b = from_pretty(
            "I T
             + 1 a
             U- 2 b
             U+ 2 .",
        );
        assert_eq!(b.to_pretty(), "+ 1 a\nU- 2 b\nU+ 2 NULL\n");
        assert_eq!(b.take(&[2, 0]).unwrap().to_pretty(), "U+ 2 NULL\n+ 1 a\n");
    }
}
