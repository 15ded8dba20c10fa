//! The combined Nexmark stream: every event of all three kinds, in event order, one row each,
//! as RisingWave's combined `nexmark` source has it. Columns: `event_type` (0 person, 1 auction,
//! 2 bid), `person`, `auction` and `bid` (structs of that stream's columns, NULL unless the row
//! is an event of that kind) and `date_time` (the event's time, whatever its kind).
//!
//! Built from the three per-kind [`Generator`]s over the same event range, so the combined
//! stream holds exactly the events the per-kind sources hold, and is as deterministic.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int32Array, RecordBatch, StructArray, UInt32Array};
use datafusion::arrow::compute::{interleave, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::generator::{kind_of, EventKind, Generator, GeneratorConfig};
use crate::error::Result;

const KINDS: [EventKind; 3] = [EventKind::Person, EventKind::Auction, EventKind::Bid];

fn position(kind: EventKind) -> usize {
    match kind {
        EventKind::Person => 0,
        EventKind::Auction => 1,
        EventKind::Bid => 2,
    }
}

pub struct Combined {
    generators: [Generator; 3],
    schema: SchemaRef,
}

impl Combined {
    pub fn new(config: GeneratorConfig) -> Combined {
        let generators = KINDS.map(|kind| Generator::new(kind, config.clone()));
        let mut fields = vec![Field::new("event_type", DataType::Int32, false)];
        for (name, g) in ["person", "auction", "bid"].iter().zip(&generators) {
            fields.push(Field::new(*name, DataType::Struct(g.schema().fields().clone()), true));
        }
        fields.push(Field::new("date_time", DataType::Timestamp(TimeUnit::Millisecond, None), true));
        Combined { generators, schema: Arc::new(Schema::new(fields)) }
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Events `from..to`, in order.
    pub fn batch(&self, from: u64, to: u64) -> Result<RecordBatch> {
        let parts = self.generators.iter().map(|g| g.batch(from, to)).collect::<Result<Vec<_>>>()?;
        let rows = to.saturating_sub(from) as usize;
        let mut event_type = Vec::with_capacity(rows);
        // Per kind: each event's row in that kind's batch, or None (a NULL struct).
        let mut picks: [Vec<Option<u32>>; 3] = Default::default();
        let mut times: Vec<(usize, usize)> = Vec::with_capacity(rows);
        let mut next = [0usize; 3];
        for n in from..to {
            let k = position(kind_of(n));
            event_type.push(k as i32);
            for (j, pick) in picks.iter_mut().enumerate() {
                pick.push((j == k).then_some(next[k] as u32));
            }
            times.push((k, next[k]));
            next[k] += 1;
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(event_type))];
        for (part, pick) in parts.iter().zip(picks) {
            let all = StructArray::from(part.clone());
            columns.push(take(&all, &UInt32Array::from(pick), None)?);
        }
        let date_times: Vec<&dyn Array> = parts
            .iter()
            .map(|p| p.column_by_name("date_time").map(|c| c.as_ref()))
            .collect::<Option<_>>()
            .ok_or_else(|| crate::error::WeirError::internal("a nexmark stream without date_time"))?;
        columns.push(interleave(&date_times, &times)?);
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    #[test]
    fn combined_rows_are_the_per_kind_rows_in_event_order() {
        let config = GeneratorConfig::default();
        let combined = Combined::new(config.clone());
        let batch = combined.batch(100, 300).unwrap();
        assert_eq!(batch.num_rows(), 200);
        let types = batch.column(0).as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        for (k, kind) in KINDS.iter().enumerate() {
            let own = Generator::new(*kind, config.clone()).batch(100, 300).unwrap();
            let column = batch.column(k + 1).as_struct();
            // Exactly the rows of this kind are non-NULL, and they are the kind's rows in order.
            let mine: Vec<u32> =
                (0..batch.num_rows() as u32).filter(|&i| types.value(i as usize) == k as i32).collect();
            assert_eq!(column.null_count(), batch.num_rows() - mine.len());
            let taken = take(column, &UInt32Array::from(mine), None).unwrap();
            assert_eq!(RecordBatch::from(taken.as_struct().clone()).columns(), own.columns());
        }
        // Same range, other chunking: the same rows.
        let parts = [combined.batch(100, 177).unwrap(), combined.batch(177, 300).unwrap()];
        assert_eq!(datafusion::arrow::compute::concat_batches(combined.schema(), &parts).unwrap(), batch);
    }
}
