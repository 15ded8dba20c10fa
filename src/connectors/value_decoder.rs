//! Values in a binary encoding that a schema describes (`ENCODE AVRO`, `ENCODE PROTOBUF`),
//! decoded a chunk at a time into Arrow rows: the one trait the Kafka source reads them
//! through ([`ValueDecoder`]); [`crate::connectors::encoding`] picks the decoder an `ENCODE`
//! names.
//!
//! Invariants every decoder keeps: each value gives one row or one dead letter, never both and
//! never neither; a registry that cannot be asked is an error with SQLSTATE 08001 (the chunk is
//! read again later), never a dead letter; the columns a decoder gives do not change for the
//! life of the source, because what fixed them at CREATE is kept in the source's options
//! ([`ValueDecoder::settled_options`]). Text encodings (JSON, CSV) do not come here: they are
//! [`crate::connectors::records`].

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use crate::error::Result;

/// What decoding a chunk's values gives: the rows of the values that decoded (`kept`: their
/// indices), and why each other one did not (`dead`, by index, in order).
pub struct Decoded {
    pub batch: RecordBatch,
    pub kept: Vec<usize>,
    pub dead: Vec<(usize, String)>,
}

/// A decoder of one topic's values.
pub trait ValueDecoder: Send {
    /// The columns values decode to (every field of the value's schema, in its order).
    fn schema(&self) -> SchemaRef;

    /// Decodes `values`; 08001 when the schema registry is needed and cannot be asked.
    fn decode(&mut self, values: &[&[u8]]) -> Result<Decoded>;

    /// The options that fixed this decoder's columns at CREATE (a schema taken from the
    /// registry then), kept with the source so that a restart decodes as before.
    fn settled_options(&self) -> Vec<(String, String)>;
}
