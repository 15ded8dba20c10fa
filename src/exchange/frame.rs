//! What travels on one network exchange stream, and how it is written as Arrow Flight messages.
//!
//! A stream is one Flight `DoExchange` call from a producing node to a consuming node. The
//! producer's first message carries the [`StreamHeader`] (JSON, as the Flight descriptor's
//! command, versioned) and the rows' schema (an IPC schema message). Then come [`Frame`]s, in
//! order: a change batch (its dictionaries, if any, then one IPC record batch message whose
//! app metadata holds the frame's tag and the rows' ops), a watermark, a barrier, the end.
//! Control frames are Flight messages with app metadata only. The consumer answers with
//! credit grants ([`credit`]): a producer sends a frame only against a credit it was granted
//! (ADR 39).
//!
//! App metadata layout (little-endian): `1, ops...` a change batch (one op code per row);
//! `2, watermark i64`; `3, epoch u64, kind u8, now i64, age µs u64` a barrier; `4` the end;
//! `5, n u32` a grant of `n` credits and `4` the end's acknowledgement (consumer to producer). A
//! dictionary message has none.
//!
//! Used by [`super::outbound`] (encoding) and [`super::service`] (decoding); pure, so the
//! fuzz-free round trip is unit-tested here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow_flight::utils::flight_data_to_arrow_batch;
use arrow_flight::{FlightData, FlightDescriptor};
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use datafusion::arrow::ipc::{self, MessageHeader};
use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};
use crate::types::change_batch::Op;
use crate::types::{Barrier, BarrierKind, ChangeBatch, Epoch};

/// The version of [`StreamHeader`] and of the frame layout; a node refuses a stream of a
/// version it does not know (nodes of one cluster run one release, except during an upgrade,
/// which restarts the job under a new assignment).
pub const PROTOCOL_VERSION: u32 = 1;

const DATA: u8 = 1;
const WATERMARK: u8 = 2;
const BARRIER: u8 = 3;
const END: u8 = 4;
const CREDIT: u8 = 5;

/// Who sends what to whom, under which assignment: the first message of every stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHeader {
    pub version: u32,
    /// The cluster's etcd prefix: a stream meant for another cluster is refused.
    pub cluster: String,
    /// Which exchange: a name every node derives alike from the job's plan (opaque here).
    pub exchange: String,
    pub from_node: String,
    pub to_node: String,
    /// The assignment generation the producer works under: its fencing token. The consumer
    /// takes the stream only into a job running under the same generation.
    pub generation: u64,
}

/// One thing on a stream, in the producer's order.
#[derive(Debug, Clone)]
pub enum Frame {
    Data(ChangeBatch),
    /// The producer's watermark (nanoseconds of event time) has reached this value.
    Watermark(i64),
    Barrier(Barrier),
    /// The producer sends nothing more (its input ended).
    End,
}

/// The grant of `n` credits, as the consumer sends it.
pub fn credit(n: u32) -> FlightData {
    let mut meta = Vec::with_capacity(5);
    meta.push(CREDIT);
    meta.extend_from_slice(&n.to_le_bytes());
    FlightData::new().with_app_metadata(meta)
}

/// The consumer's answer to [`Frame::End`]: everything sent is in its inbox.
pub fn end_acknowledged() -> FlightData {
    FlightData::new().with_app_metadata(vec![END])
}

/// Whether a consumer's message acknowledges the end.
pub fn acknowledges_end(data: &FlightData) -> bool {
    data.app_metadata.as_ref() == [END]
}

/// The credits a consumer's message grants (0 for anything else).
pub fn credits_in(data: &FlightData) -> u32 {
    match data.app_metadata.as_ref() {
        [CREDIT, n @ ..] if n.len() == 4 => u32::from_le_bytes(n.try_into().expect("four bytes")),
        _ => 0,
    }
}

/// The producer's side: the header and schema once, then frames.
pub struct FrameEncoder {
    options: IpcWriteOptions,
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    context: IpcWriteContext,
}

impl Default for FrameEncoder {
    fn default() -> Self {
        FrameEncoder {
            options: IpcWriteOptions::default(),
            generator: IpcDataGenerator::default(),
            // Dictionaries may change from batch to batch: each new one is sent again.
            dictionaries: DictionaryTracker::new(false),
            context: IpcWriteContext::default(),
        }
    }
}

impl FrameEncoder {
    /// The stream's first message: its header and the rows' schema (which numbers the
    /// dictionaries later batches send).
    pub fn open(&mut self, header: &StreamHeader, schema: &Schema) -> FlightData {
        let descriptor = FlightDescriptor::new_cmd(serde_json::to_vec(header).expect("a header serializes"));
        let encoded =
            self.generator.schema_to_bytes_with_dictionary_tracker(schema, &mut self.dictionaries, &self.options);
        FlightData::from(encoded).with_descriptor(descriptor)
    }

    /// A frame as Flight messages (more than one for a batch with dictionaries).
    pub fn encode(&mut self, frame: &Frame) -> Result<Vec<FlightData>> {
        let control = |meta: Vec<u8>| Ok(vec![FlightData::new().with_app_metadata(meta)]);
        match frame {
            Frame::Data(change) => {
                let (dictionaries, batch) = self
                    .generator
                    .encode(&change.data, &mut self.dictionaries, &self.options, &mut self.context)
                    .map_err(|e| WeirError::internal(format!("encoding an exchange batch: {e}")))?;
                let mut meta = Vec::with_capacity(1 + change.ops.len());
                meta.push(DATA);
                meta.extend(change.ops.iter().map(|op| op.code()));
                let mut out: Vec<FlightData> = dictionaries.into_iter().map(FlightData::from).collect();
                out.push(FlightData::from(batch).with_app_metadata(meta));
                Ok(out)
            }
            Frame::Watermark(w) => {
                let mut meta = vec![WATERMARK];
                meta.extend_from_slice(&w.to_le_bytes());
                control(meta)
            }
            Frame::Barrier(b) => {
                let mut meta = vec![BARRIER];
                meta.extend_from_slice(&b.epoch.to_le_bytes());
                meta.push(matches!(b.kind, BarrierKind::Checkpoint) as u8);
                meta.extend_from_slice(&b.now.to_le_bytes());
                meta.extend_from_slice(&(b.injected_at.elapsed().as_micros() as u64).to_le_bytes());
                control(meta)
            }
            Frame::End => control(vec![END]),
        }
    }
}

/// The header and schema of a stream's first message.
pub fn opening(data: &FlightData) -> Result<(StreamHeader, Schema)> {
    let bad = |why: String| WeirError::internal(format!("an exchange stream's first message: {why}"));
    let descriptor = data.flight_descriptor.as_ref().ok_or_else(|| bad("no descriptor".into()))?;
    let header: StreamHeader = serde_json::from_slice(&descriptor.cmd).map_err(|e| bad(e.to_string()))?;
    let schema = Schema::try_from(data).map_err(|e| bad(e.to_string()))?;
    Ok((header, schema))
}

/// The consumer's side: Flight messages back into frames, against the schema the consuming
/// job expects.
pub struct FrameDecoder {
    schema: SchemaRef,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl FrameDecoder {
    pub fn new(schema: SchemaRef) -> FrameDecoder {
        FrameDecoder { schema, dictionaries: HashMap::new() }
    }

    /// The frame a message completes, or `None` for a dictionary (part of the next batch).
    pub fn decode(&mut self, data: &FlightData) -> Result<Option<Frame>> {
        let bad = |why: String| WeirError::internal(format!("a malformed exchange message: {why}"));
        let meta = data.app_metadata.as_ref();
        let fixed = |at: usize| -> Result<[u8; 8]> {
            meta.get(at..at + 8).and_then(|b| b.try_into().ok()).ok_or_else(|| bad("short metadata".into()))
        };
        match meta.first() {
            None => {
                self.dictionary(data).map_err(|e| bad(e.to_string()))?;
                Ok(None)
            }
            Some(&DATA) => {
                let ops = meta[1..]
                    .iter()
                    .map(|c| Op::from_code(*c).ok_or_else(|| bad(format!("op code {c}"))))
                    .collect::<Result<Vec<Op>>>()?;
                let batch = flight_data_to_arrow_batch(data, self.schema.clone(), &self.dictionaries)
                    .map_err(|e| bad(e.to_string()))?;
                if batch.num_rows() != ops.len() {
                    return Err(bad(format!("{} rows with {} ops", batch.num_rows(), ops.len())));
                }
                Ok(Some(Frame::Data(ChangeBatch::new(batch, ops))))
            }
            Some(&WATERMARK) => Ok(Some(Frame::Watermark(i64::from_le_bytes(fixed(1)?)))),
            Some(&BARRIER) => {
                let epoch: Epoch = u64::from_le_bytes(fixed(1)?);
                let kind = match meta.get(9) {
                    Some(0) => BarrierKind::Flush,
                    Some(1) => BarrierKind::Checkpoint,
                    other => return Err(bad(format!("barrier kind {other:?}"))),
                };
                let now = i64::from_le_bytes(fixed(10)?);
                let age = Duration::from_micros(u64::from_le_bytes(fixed(18)?));
                let injected_at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
                Ok(Some(Frame::Barrier(Barrier { epoch, injected_at, kind, now })))
            }
            Some(&END) => Ok(Some(Frame::End)),
            Some(tag) => Err(bad(format!("frame tag {tag}"))),
        }
    }

    fn dictionary(&mut self, data: &FlightData) -> std::result::Result<(), String> {
        let message = ipc::root_as_message(&data.data_header).map_err(|e| e.to_string())?;
        if message.header_type() != MessageHeader::DictionaryBatch {
            return Err(format!("a {:?} message without a frame tag", message.header_type()));
        }
        let batch = message.header_as_dictionary_batch().ok_or("no dictionary batch")?;
        ipc::reader::read_dictionary(
            &Buffer::from(data.data_body.as_ref()),
            batch,
            &self.schema,
            &mut self.dictionaries,
            &message.version(),
        )
        .map_err(|e| e.to_string())
    }
}

/// Whether rows of `received` can be read as rows of `expected`: the same column types in the
/// same order (names may differ between releases; nullability is checked per batch).
pub fn schema_fits(expected: &Schema, received: &Schema) -> bool {
    expected.fields().len() == received.fields().len()
        && expected.fields().iter().zip(received.fields()).all(|(e, r)| e.data_type() == r.data_type())
}

/// `batch`'s columns under `schema` (which [`schema_fits`] it).
pub fn under_schema(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options)
        .map_err(|e| WeirError::internal(format!("an exchange batch does not fit its schema: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{DictionaryArray, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int32Type};

    /// A message of these metadata bytes only (malformed input).
    fn raw(meta: &[u8]) -> FlightData {
        FlightData::new().with_app_metadata(meta.to_vec())
    }
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), true),
        ]))
    }

    fn batch(keys: &[i64], dict: &[&str]) -> RecordBatch {
        let d: DictionaryArray<Int32Type> = dict.iter().copied().collect();
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(StringArray::from(
                    keys.iter().map(|k| (k % 2 == 0).then(|| format!("s{k}"))).collect::<Vec<_>>(),
                )),
                Arc::new(d),
            ],
        )
        .unwrap()
    }

    #[test]
    fn frames_read_back_as_written_in_order() {
        let header = StreamHeader {
            version: PROTOCOL_VERSION,
            cluster: "/weir/t/".into(),
            exchange: "v7/3".into(),
            from_node: "n1".into(),
            to_node: "n2".into(),
            generation: 4,
        };
        let mut encoder = FrameEncoder::default();
        let first = encoder.open(&header, &schema());
        let (h, s) = opening(&first).unwrap();
        assert_eq!(h, header);
        assert!(schema_fits(&schema(), &s));
        let injected_at = Instant::now() - Duration::from_millis(30);
        let frames = vec![
            Frame::Data(ChangeBatch::new(
                batch(&[1, 2, 3], &["a", "b", "a"]),
                vec![Op::Insert, Op::Delete, Op::UpdateInsert],
            )),
            Frame::Watermark(-5),
            // A second batch with another dictionary: sent again, read with the new values.
            Frame::Data(ChangeBatch::inserts(batch(&[4], &["z"]))),
            Frame::Barrier(Barrier { epoch: 9, injected_at, kind: BarrierKind::Checkpoint, now: 77 }),
            Frame::End,
        ];
        let mut decoder = FrameDecoder::new(schema());
        let mut back = Vec::new();
        for frame in &frames {
            for message in encoder.encode(frame).unwrap() {
                back.extend(decoder.decode(&message).unwrap());
            }
        }
        assert_eq!(back.len(), 5);
        let Frame::Data(first) = &back[0] else { panic!("{:?}", back[0]) };
        assert_eq!(first.data, batch(&[1, 2, 3], &["a", "b", "a"]));
        assert_eq!(first.ops, vec![Op::Insert, Op::Delete, Op::UpdateInsert]);
        assert!(matches!(back[1], Frame::Watermark(-5)));
        let Frame::Data(second) = &back[2] else { panic!() };
        assert_eq!(second.data, batch(&[4], &["z"]));
        let Frame::Barrier(b) = &back[3] else { panic!() };
        assert_eq!((b.epoch, b.kind, b.now), (9, BarrierKind::Checkpoint, 77));
        assert!(b.injected_at.elapsed() >= Duration::from_millis(30), "the barrier keeps its age");
        assert!(matches!(back[4], Frame::End));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let mut decoder = FrameDecoder::new(schema());
        for meta in [&[9u8][..], &[WATERMARK, 1, 2], &[BARRIER, 0, 0, 0, 0, 0, 0, 0, 0, 7], &[DATA, 1]] {
            assert!(decoder.decode(&raw(meta)).is_err(), "{meta:?}");
        }
        assert!(decoder.decode(&FlightData::new()).is_err(), "a message with neither tag nor IPC header");
        assert_eq!(credits_in(&credit(12)), 12);
        assert_eq!(credits_in(&raw(&[CREDIT, 1])), 0);
    }
}
