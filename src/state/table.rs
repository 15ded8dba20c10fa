//! [`StateTable`]: the rows of one relation, stored in a [`StateStore`] under one table id, in
//! one of two [`Layout`]s.
//!
//! - [`Layout::Rows`]: a row is stored as `row_key(table_id, key) -> value`, where `key` is the
//!   memcomparable encoding (arrow-row) of the key columns and `value` the arrow-row encoding of
//!   the whole row. arrow-row is reversible, so one codec serves both directions, for every Arrow
//!   type DataFusion produces. Keys sort like the key columns; values are opaque. Rows can be
//!   looked up, replaced and deleted one by one.
//! - [`Layout::Segments`]: for relations that only ever grow (append-only tables, sources and
//!   append-only views). Each written batch is one entry, `segment_key(table_id, key of its
//!   first row) -> Arrow IPC stream`, so storing a row costs a copy of its bytes and no
//!   per-row encoding, hashing or memtable insert. The key column must be unique and increasing
//!   (a hidden row id), so segments are read back in the order they were written. Rows cannot
//!   be looked up or deleted one by one; the whole table can be cleared.
//!
//! A row's vnode is a hash of its whole memcomparable key, unless the table is *distributed by*
//! its leading key columns ([`StateTable::distributed_by`]: an index, keyed by its indexed
//! columns first): then it is a hash of those columns' encoding alone, so the rows sharing
//! their values are one contiguous range in one vnode, and a read that pins them is one seek.
//!
//! The table itself holds no rows in memory: writes go into a [`WriteBatch`] the caller commits,
//! reads go to the store. Decoding bytes that were not written by this codec (a corrupt file)
//! yields a `XX001` error, never a panic.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::StreamDecoder;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;

use serde::{Deserialize, Serialize};

use super::keys::{prefix_end, row_key_in, segment_key, table_prefix, TableId};

use super::store::{KeyRange, PartReader, ScanControl, StateStore, WriteBatch};
use crate::error::{Result, SqlState, WeirError};
use crate::types::vnode::{vnode_of, VNODE_COUNT};

/// How a table's rows are laid out in the store (part of a relation's durable definition).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// One entry per row, by key.
    #[default]
    Rows,
    /// One entry per written batch, in Arrow IPC; rows are only appended.
    Segments,
}

/// The arrow-row codec of whole rows of `schema`: how rows are stored as bytes (a table's
/// values, an operator's rows) and read back.
pub fn row_codec(schema: &datafusion::arrow::datatypes::Schema) -> Result<RowConverter> {
    Ok(RowConverter::new(schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect())?)
}

pub struct StateTable {
    table_id: TableId,
    schema: SchemaRef,
    key_indices: Vec<usize>,
    key_codec: RowConverter,
    value_codec: RowConverter,
    layout: Layout,
    /// The codec of the leading key columns the vnode hashes, for a table distributed by
    /// them (None: the vnode hashes the whole key).
    distribution: Option<(RowConverter, usize)>,
}

/// A range of memcomparable keys of one table, and the one vnode it lies in where the table
/// is distributed by key columns the range pins (None: the range is read in every vnode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRange {
    pub keys: KeyRange,
    pub vnode: Option<u16>,
}

impl StateTable {
    /// `schema` is every stored column; `key_indices` the columns that identify a row.
    pub fn new(table_id: TableId, schema: SchemaRef, key_indices: Vec<usize>) -> Result<StateTable> {
        Self::with_layout(table_id, schema, key_indices, Layout::Rows)
    }

    /// A table in `layout`; a [`Layout::Segments`] table is keyed by one increasing column.
    pub fn with_layout(
        table_id: TableId,
        schema: SchemaRef,
        key_indices: Vec<usize>,
        layout: Layout,
    ) -> Result<StateTable> {
        if layout == Layout::Segments && key_indices.len() != 1 {
            return Err(WeirError::internal("a segmented table is keyed by one increasing column"));
        }
        let key_fields = key_indices.iter().map(|&i| SortField::new(schema.field(i).data_type().clone())).collect();
        Ok(StateTable {
            table_id,
            key_codec: RowConverter::new(key_fields)?,
            value_codec: row_codec(&schema)?,
            schema,
            key_indices,
            layout,
            distribution: None,
        })
    }

    /// The table with each row's vnode a hash of its first `columns` key columns alone.
    pub fn distributed_by(mut self, columns: usize) -> Result<StateTable> {
        if self.layout == Layout::Segments || columns == 0 || columns > self.key_indices.len() {
            return Err(WeirError::internal("a table is distributed by a prefix of its key columns, stored by row"));
        }
        let fields = self.key_indices[..columns]
            .iter()
            .map(|&i| SortField::new(self.schema.field(i).data_type().clone()))
            .collect();
        self.distribution = Some((RowConverter::new(fields)?, columns));
        Ok(self)
    }

    /// How many leading key columns the vnode hashes (0: the whole key).
    pub fn distribution_columns(&self) -> usize {
        self.distribution.as_ref().map_or(0, |(_, columns)| *columns)
    }

    /// The vnode of the rows whose first key columns are `values`, where they are as many as
    /// the table is distributed by (or more); None where the vnode depends on more.
    pub fn vnode_of_prefix(&self, values: &[ScalarValue]) -> Result<Option<u16>> {
        match &self.distribution {
            Some((codec, n)) if values.len() >= *n => {
                let columns = values[..*n].iter().map(|v| v.to_array()).collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(Some(vnode_of(codec.convert_columns(&columns)?.row(0).as_ref())))
            }
            _ => Ok(None),
        }
    }

    /// Every key whose first key columns hold `values`, and the one vnode they are in where
    /// the table is distributed by those columns.
    pub fn prefix_range(&self, values: &[ScalarValue]) -> Result<TableRange> {
        let start = self.encode_key_prefix(values)?;
        Ok(TableRange { keys: KeyRange { end: prefix_end(&start), start }, vnode: self.vnode_of_prefix(values)? })
    }

    /// The full store keys of the rows whose key columns are `key_columns` (one array per key
    /// column, in key order).
    pub fn store_keys(&self, key_columns: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        let keys = self.key_codec.convert_columns(key_columns)?;
        let vnodes: Vec<u16> = match &self.distribution {
            None => keys.iter().map(|k| vnode_of(k.as_ref())).collect(),
            Some((codec, n)) => {
                let leading = codec.convert_columns(&key_columns[..*n])?;
                leading.iter().map(|k| vnode_of(k.as_ref())).collect()
            }
        };
        Ok(keys.iter().zip(vnodes).map(|(k, vnode)| row_key_in(self.table_id, vnode, k.as_ref())).collect())
    }

    fn key_columns_of(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        self.key_indices.iter().map(|&i| Arc::clone(batch.column(i))).collect()
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn table_id(&self) -> TableId {
        self.table_id
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn key_indices(&self) -> &[usize] {
        &self.key_indices
    }

    /// The memcomparable key of every row of `batch` (without table id and vnode).
    pub fn encode_keys(&self, batch: &RecordBatch) -> Result<Rows> {
        let cols: Vec<ArrayRef> = self.key_indices.iter().map(|&i| batch.column(i).clone()).collect();
        Ok(self.key_codec.convert_columns(&cols)?)
    }

    /// Adds a put of every row of `batch` (which has this table's schema) to `wb`; in a
    /// segmented table, `batch` is appended as one segment.
    pub fn put_batch(&self, batch: &RecordBatch, wb: &mut WriteBatch) -> Result<()> {
        if self.layout == Layout::Segments {
            return self.append_segment(batch, wb);
        }
        let keys = self.store_keys(&self.key_columns_of(batch))?;
        let values = self.value_codec.convert_columns(batch.columns())?;
        for (k, v) in keys.into_iter().zip(values.iter()) {
            wb.put(k, v.as_ref().to_vec());
        }
        Ok(())
    }

    /// Adds a delete of the row with the key of every row of `batch` to `wb`.
    pub fn delete_batch(&self, batch: &RecordBatch, wb: &mut WriteBatch) -> Result<()> {
        self.rows_layout("delete rows")?;
        for k in self.store_keys(&self.key_columns_of(batch))? {
            wb.delete(k);
        }
        Ok(())
    }

    /// Adds the deletion of every row of the table to `wb`.
    pub fn clear(&self, wb: &mut WriteBatch) {
        wb.delete_range(table_prefix(self.table_id).to_vec(), table_prefix(self.table_id + 1).to_vec());
    }

    /// Every row, in key order per vnode, as batches of at most `batch_size` rows, read from one
    /// snapshot.
    pub fn scan(&self, store: &dyn StateStore, batch_size: usize) -> Result<Vec<RecordBatch>> {
        self.scan_up_to(store, batch_size, None)
    }

    /// [`StateTable::scan`], stopping once `limit` rows are read (at a segment's end, in a
    /// segmented table).
    pub fn scan_up_to(
        &self,
        store: &dyn StateStore,
        batch_size: usize,
        limit: Option<usize>,
    ) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        self.scan_batches(store, None, batch_size, limit, &mut |batch| {
            batches.push(batch);
            Ok(ScanControl::Continue)
        })?;
        Ok(batches)
    }

    /// Hands `emit` the rows whose memcomparable keys lie in one of `ranges` (None: every row),
    /// as batches of at most `batch_size` rows (about that, in a segmented table), read from one
    /// snapshot, until `limit` rows are read or `emit` says stop. Rows come in key order
    /// within a vnode, vnode after vnode. Only [`Layout::Rows`] tables are read by key range.
    pub fn scan_batches(
        &self,
        store: &dyn StateStore,
        ranges: Option<&[TableRange]>,
        batch_size: usize,
        limit: Option<usize>,
        emit: &mut dyn FnMut(RecordBatch) -> Result<ScanControl>,
    ) -> Result<()> {
        let limit = limit.unwrap_or(usize::MAX);
        if self.layout == Layout::Segments {
            if ranges.is_some() {
                self.rows_layout("read a key range")?;
            }
            return self.scan_segments(store, batch_size, limit, emit);
        }
        let store_ranges = match ranges {
            None => vec![KeyRange {
                start: table_prefix(self.table_id).to_vec(),
                end: prefix_end(&table_prefix(self.table_id)),
            }],
            Some(ranges) => self.store_ranges(ranges),
        };
        let mut gathered = Gathered::new(self, batch_size);
        let (mut read, mut stopped) = (0usize, false);
        let mut visit = |_: &[u8], v: &[u8]| {
            read += 1;
            if let Some(batch) = gathered.push(v)? {
                if emit(batch)? == ScanControl::Stop {
                    stopped = true;
                    return Ok(ScanControl::Stop);
                }
            }
            Ok(if read >= limit { ScanControl::Stop } else { ScanControl::Continue })
        };
        // A whole table is read once: its blocks are not cached.
        match ranges {
            None => store.scan_ranges_once(&store_ranges, &mut visit)?,
            Some(_) => store.scan_ranges(&store_ranges, &mut visit)?,
        }
        match gathered.rest()? {
            Some(batch) if !stopped => emit(batch).map(drop),
            _ => Ok(()),
        }
    }

    /// The whole table's rows in `sinks.len()` parts (at most [`VNODE_COUNT`]), each a range
    /// of vnodes (so about as many rows in each), all read from one snapshot: part `i`'s
    /// batches of at most `batch_size` rows, then its end, go to `sinks[i]`, on the part's own
    /// thread where the store reads parts in parallel ([`StateStore::scan_parts_once`]). A stop
    /// ends that part alone; an error ends every part not yet over. Only [`Layout::Rows`]
    /// tables are read in parts.
    pub fn scan_parts(
        &self,
        store: &dyn StateStore,
        batch_size: usize,
        sinks: &mut [&mut dyn BatchSink],
    ) -> Result<()> {
        self.rows_layout("read in parts")?;
        if sinks.len() > VNODE_COUNT as usize {
            return Err(WeirError::internal(format!("a table is read in {VNODE_COUNT} parts at most")));
        }
        let parts = vnode_parts(self.table_id, sinks.len());
        let mut readers: Vec<PartRows<'_, '_>> = sinks
            .iter_mut()
            .map(|sink| PartRows { gathered: Gathered::new(self, batch_size), sink: &mut **sink, stopped: false })
            .collect();
        let mut readers: Vec<&mut dyn PartReader> = readers.iter_mut().map(|r| r as &mut dyn PartReader).collect();
        store.scan_parts_once(&parts, &mut readers)
    }

    /// The rows stored after store key `after` (from the first when None), in store-key order,
    /// about `max_rows` of them (a segment is not cut), read from one snapshot; and the last
    /// store key read, or None when the table's end was reached.
    pub fn read_after(
        &self,
        store: &dyn StateStore,
        after: Option<&[u8]>,
        max_rows: usize,
    ) -> Result<(RecordBatch, Option<Vec<u8>>)> {
        let prefix = table_prefix(self.table_id);
        let start = match after {
            Some(key) => [key, &[0u8]].concat(),
            None => prefix.to_vec(),
        };
        let (mut values, mut segments, mut rows) = (Vec::new(), Vec::new(), 0usize);
        let (mut last, mut more) = (None, false);
        store.scan_ranges(&[KeyRange { start, end: prefix_end(&prefix) }], &mut |k, v| {
            if rows >= max_rows {
                more = true;
                return Ok(ScanControl::Stop);
            }
            last = Some(k.to_vec());
            match self.layout {
                Layout::Rows => {
                    values.push(v.to_vec());
                    rows += 1;
                }
                Layout::Segments => {
                    for batch in self.decode_segment(v)? {
                        rows += batch.num_rows();
                        segments.push(batch);
                    }
                }
            }
            Ok(ScanControl::Continue)
        })?;
        let batch = match self.layout {
            Layout::Rows if !values.is_empty() => self.decode_values(&values)?,
            Layout::Rows => RecordBatch::new_empty(Arc::clone(&self.schema)),
            Layout::Segments => concat_batches(&self.schema, &segments)?,
        };
        Ok((batch, last.filter(|_| more)))
    }

    /// The greatest store key of the table now (None: it is empty).
    pub fn last_store_key(&self, store: &dyn StateStore) -> Result<Option<Vec<u8>>> {
        let prefix = table_prefix(self.table_id);
        store.last_key(&KeyRange { start: prefix.to_vec(), end: prefix_end(&prefix) })
    }

    /// The store ranges holding the memcomparable keys in `ranges`: a range in its one vnode
    /// where it has one, else in every vnode (a key's vnode is a hash of the whole key).
    fn store_ranges(&self, ranges: &[TableRange]) -> Vec<KeyRange> {
        let in_vnode = |vnode: u16, range: &KeyRange| {
            let mut prefix = table_prefix(self.table_id).to_vec();
            prefix.extend_from_slice(&vnode.to_be_bytes());
            let at = |key: &[u8]| [prefix.as_slice(), key].concat();
            KeyRange {
                start: at(&range.start),
                end: match &range.end {
                    Some(end) => Some(at(end)),
                    None => prefix_end(&prefix),
                },
            }
        };
        let mut out: Vec<KeyRange> = ranges.iter().filter_map(|r| Some(in_vnode(r.vnode?, &r.keys))).collect();
        let spread: Vec<&TableRange> = ranges.iter().filter(|r| r.vnode.is_none()).collect();
        if !spread.is_empty() {
            for vnode in 0..VNODE_COUNT {
                out.extend(spread.iter().map(|r| in_vnode(vnode, &r.keys)));
            }
        }
        out
    }

    /// The memcomparable encoding of `values`, the values of the first `values.len()` key
    /// columns: the start of every key with those values (keys encode column after column).
    pub fn encode_key_prefix(&self, values: &[ScalarValue]) -> Result<Vec<u8>> {
        if values.is_empty() {
            return Ok(vec![]);
        }
        let fields = self.key_indices[..values.len()]
            .iter()
            .map(|&i| SortField::new(self.schema.field(i).data_type().clone()))
            .collect();
        let codec = RowConverter::new(fields)?;
        let columns = values.iter().map(|v| v.to_array()).collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = codec.convert_columns(&columns)?;
        Ok(rows.row(0).as_ref().to_vec())
    }

    /// The memcomparable keys of the key column values `columns` (one array per key column, in
    /// key order).
    pub fn encode_key_columns(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.key_codec.convert_columns(columns)?)
    }

    /// The rows stored under `keys` (memcomparable, as from [`Self::encode_keys`]), read in one
    /// batched lookup: the found rows, and for each key the index of its row among them. Not
    /// for a distributed table, whose vnodes need the key columns ([`Self::get_by_columns`]).
    pub fn get_many(&self, store: &dyn StateStore, keys: &[Vec<u8>]) -> Result<(RecordBatch, Vec<Option<usize>>)> {
        if self.distribution.is_some() {
            return Err(WeirError::internal("a distributed table is read by key columns"));
        }
        let full: Vec<Vec<u8>> = keys.iter().map(|k| row_key_in(self.table_id, vnode_of(k), k)).collect();
        self.get_stored(store, full)
    }

    /// [`Self::get_many`] of the keys whose key columns are `key_columns` (one array per key
    /// column, in key order, a row per key).
    pub fn get_by_columns(
        &self,
        store: &dyn StateStore,
        key_columns: &[ArrayRef],
    ) -> Result<(RecordBatch, Vec<Option<usize>>)> {
        let full = self.store_keys(key_columns)?;
        self.get_stored(store, full)
    }

    fn get_stored(&self, store: &dyn StateStore, full: Vec<Vec<u8>>) -> Result<(RecordBatch, Vec<Option<usize>>)> {
        self.rows_layout("look rows up")?;
        let keys = &full;
        let mut values = Vec::new();
        let mut index = Vec::with_capacity(keys.len());
        for value in store.multi_get(&full)? {
            index.push(value.map(|v| {
                values.push(v);
                values.len() - 1
            }));
        }
        let rows = if values.is_empty() {
            RecordBatch::new_empty(Arc::clone(&self.schema))
        } else {
            self.decode_values(&values)?
        };
        Ok((rows, index))
    }

    /// Number of rows (a full scan of the keys).
    #[cfg(test)]
    pub fn count(&self, store: &dyn StateStore) -> Result<u64> {
        let mut n = 0u64;
        store.scan_prefix(&table_prefix(self.table_id), &mut |_, _| {
            n += 1;
            Ok(ScanControl::Continue)
        })?;
        Ok(n)
    }

    /// Fails unless rows are stored one by one (callers of row operations on a segmented table
    /// are bugs: append-only relations reject UPDATE and DELETE before they get here).
    fn rows_layout(&self, what: &str) -> Result<()> {
        match self.layout {
            Layout::Rows => Ok(()),
            Layout::Segments => {
                Err(WeirError::internal(format!("cannot {what} in append-only table id {}", self.table_id)))
            }
        }
    }

    /// Stores `batch` as one segment, under its first row's key.
    fn append_segment(&self, batch: &RecordBatch, wb: &mut WriteBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let first = self.key_codec.convert_columns(&[batch.column(self.key_indices[0]).slice(0, 1)])?;
        wb.put(segment_key(self.table_id, first.row(0).as_ref()), encode_ipc(batch)?);
        Ok(())
    }

    /// Every segment's rows, in the order written, coalesced into batches of about
    /// `batch_size` rows.
    fn scan_segments(
        &self,
        store: &dyn StateStore,
        batch_size: usize,
        limit: usize,
        emit: &mut dyn FnMut(RecordBatch) -> Result<ScanControl>,
    ) -> Result<()> {
        let mut small: Vec<RecordBatch> = Vec::new();
        let mut small_rows = 0;
        let mut read = 0usize;
        let mut stopped = false;
        let whole =
            KeyRange { start: table_prefix(self.table_id).to_vec(), end: prefix_end(&table_prefix(self.table_id)) };
        store.scan_ranges_once(std::slice::from_ref(&whole), &mut |_, v| {
            if read >= limit {
                return Ok(ScanControl::Stop);
            }
            for batch in self.decode_segment(v)? {
                read += batch.num_rows();
                let full = if batch.num_rows() >= batch_size {
                    Some(batch)
                } else {
                    small_rows += batch.num_rows();
                    small.push(batch);
                    (small_rows >= batch_size)
                        .then(|| {
                            small_rows = 0;
                            concat_batches(&self.schema, &std::mem::take(&mut small))
                        })
                        .transpose()?
                };
                if let Some(batch) = full {
                    if emit(batch)? == ScanControl::Stop {
                        stopped = true;
                        return Ok(ScanControl::Stop);
                    }
                }
            }
            Ok(ScanControl::Continue)
        })?;
        if !small.is_empty() && !stopped {
            emit(concat_batches(&self.schema, &small)?)?;
        }
        Ok(())
    }

    fn decode_segment(&self, bytes: &[u8]) -> Result<Vec<RecordBatch>> {
        decode_ipc(bytes)
            .map_err(|why| self.corrupt(&why))?
            .into_iter()
            .map(|b| {
                if b.schema().fields() != self.schema.fields() {
                    return Err(self.corrupt("segment has other columns than the table"));
                }
                Ok(RecordBatch::try_new(Arc::clone(&self.schema), b.columns().to_vec())?)
            })
            .collect()
    }

    fn decode_values(&self, values: &[Vec<u8>]) -> Result<RecordBatch> {
        self.decode_each(values.iter().map(|v| v.as_slice()))
    }

    /// The rows whose stored values are `values`, in order, as one batch.
    fn decode_each<'v>(&self, values: impl Iterator<Item = &'v [u8]>) -> Result<RecordBatch> {
        let parser = self.value_codec.parser();
        let decoded = catch_unwind(AssertUnwindSafe(|| self.value_codec.convert_rows(values.map(|v| parser.parse(v)))));
        let columns = match decoded {
            Ok(Ok(columns)) => columns,
            Ok(Err(e)) => return Err(self.corrupt(&e.to_string())),
            Err(_) => return Err(self.corrupt("undecodable row")),
        };
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn corrupt(&self, what: &str) -> WeirError {
        WeirError::new(SqlState::DATA_CORRUPTED, format!("stored row of table id {} is corrupt: {what}", self.table_id))
    }
}

/// Where one part of a read in parts ([`StateTable::scan_parts`]) goes, on the part's thread:
/// its batches, each answered with whether to go on, then its end.
pub trait BatchSink: Send {
    fn batch(&mut self, batch: RecordBatch) -> Result<ScanControl>;

    /// The part is over: `Ok` when every row was handed on or the sink said stop, else the
    /// error that ended it. Called once, unless the part could not be started (the read in
    /// parts then returns the error).
    fn end(&mut self, read: Result<()>);
}

/// The stored values a scan reads, gathered into one buffer (no allocation per row) and
/// decoded `batch_size` rows at a time.
struct Gathered<'t> {
    table: &'t StateTable,
    bytes: Vec<u8>,
    /// Where each gathered value ends in `bytes`.
    ends: Vec<usize>,
    batch_size: usize,
}

impl<'t> Gathered<'t> {
    fn new(table: &'t StateTable, batch_size: usize) -> Gathered<'t> {
        Gathered { table, bytes: Vec::new(), ends: Vec::with_capacity(batch_size.min(4096)), batch_size }
    }

    /// Gathers one value; the batch once `batch_size` are gathered.
    fn push(&mut self, value: &[u8]) -> Result<Option<RecordBatch>> {
        self.bytes.extend_from_slice(value);
        self.ends.push(self.bytes.len());
        match self.ends.len() < self.batch_size {
            true => Ok(None),
            false => self.rest(),
        }
    }

    /// The rows gathered and not yet handed out, if any.
    fn rest(&mut self) -> Result<Option<RecordBatch>> {
        if self.ends.is_empty() {
            return Ok(None);
        }
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        let values = starts.zip(self.ends.iter()).map(|(start, &end)| &self.bytes[start..end]);
        let batch = self.table.decode_each(values)?;
        self.bytes.clear();
        self.ends.clear();
        Ok(Some(batch))
    }
}

/// A part of a table read in parts: its values decoded into batches for its sink.
struct PartRows<'t, 's> {
    gathered: Gathered<'t>,
    sink: &'s mut dyn BatchSink,
    /// The sink said stop: nothing more goes to it but its end.
    stopped: bool,
}

impl PartReader for PartRows<'_, '_> {
    fn visit(&mut self, _: &[u8], value: &[u8]) -> Result<ScanControl> {
        let Some(batch) = self.gathered.push(value)? else {
            return Ok(ScanControl::Continue);
        };
        let control = self.sink.batch(batch)?;
        self.stopped = control == ScanControl::Stop;
        Ok(control)
    }

    fn end(&mut self, read: Result<()>) {
        let read = read.and_then(|()| match self.gathered.rest()? {
            Some(batch) if !self.stopped => self.sink.batch(batch).map(drop),
            _ => Ok(()),
        });
        self.sink.end(read);
    }
}

/// The store ranges of table `table_id`'s rows in `parts` ranges of vnodes (1 to
/// [`VNODE_COUNT`]).
fn vnode_parts(table_id: TableId, parts: usize) -> Vec<Vec<KeyRange>> {
    let bound = |part: usize| {
        let vnode = part * VNODE_COUNT as usize / parts;
        match vnode {
            v if v >= VNODE_COUNT as usize => prefix_end(&table_prefix(table_id)),
            v => Some(row_key_in(table_id, v as u16, &[])),
        }
    };
    (0..parts).map(|part| vec![KeyRange { start: bound(part).unwrap_or_default(), end: bound(part + 1) }]).collect()
}

/// `batch` in the Arrow IPC stream format: how stored batches (segments, logged changes) are
/// encoded.
pub fn encode_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut writer =
        StreamWriter::try_new(Vec::with_capacity(batch.get_array_memory_size() + 1024), batch.schema_ref())?;
    writer.write(batch)?;
    writer.finish()?;
    Ok(writer.into_inner()?)
}

/// The batches of an [`encode_ipc`] encoding; why not, for bytes that are not one (a corrupt
/// store: the caller says whose). Read by arrow's push decoder, which takes each message's body
/// from `bytes` as it comes: a damaged length cannot make it allocate what is not there (arrow's
/// `StreamReader` allocates a message's declared body length first, and a length of exabytes
/// aborted the process: found by fuzzing, `fuzz/regressions/stored/`). Arrow's reader may still
/// panic on bytes that are not IPC: that is caught here.
pub fn decode_ipc(bytes: &[u8]) -> std::result::Result<Vec<RecordBatch>, String> {
    let decoded = catch_unwind(AssertUnwindSafe(|| -> std::result::Result<Vec<RecordBatch>, ArrowError> {
        let mut decoder = StreamDecoder::new();
        let mut buffer = Buffer::from(bytes);
        let mut batches = Vec::new();
        while !buffer.is_empty() {
            let before = buffer.len();
            if let Some(batch) = decoder.decode(&mut buffer)? {
                batches.push(batch);
            }
            if buffer.len() == before {
                return Err(ArrowError::IpcError("the IPC decoder took nothing".into()));
            }
        }
        decoder.finish()?;
        Ok(batches)
    }));
    match decoded {
        Ok(Ok(batches)) => Ok(batches),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("undecodable Arrow IPC".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::keys::row_key;
    use crate::state::memory::MemoryStore;
    use crate::state::store::WriteOp;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    fn people(ids: &[i64], names: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(StringArray::from(names.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn put_overwrites_by_key_and_delete_removes() {
        let store = MemoryStore::new();
        let table = StateTable::new(1, people(&[], &[]).schema(), vec![0]).unwrap();
        let mut wb = WriteBatch::default();
        table.put_batch(&people(&[1, 2, 3], &["a", "b", "c"]), &mut wb).unwrap();
        table.put_batch(&people(&[2], &["B"]), &mut wb).unwrap();
        table.delete_batch(&people(&[3], &["c"]), &mut wb).unwrap();
        store.write(wb).unwrap();

        let batches = table.scan(&store, 1024).unwrap();
        let mut rows: Vec<(i64, String)> = Vec::new();
        for b in &batches {
            let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let names = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                rows.push((ids.value(i), names.value(i).to_string()));
            }
        }
        rows.sort();
        assert_eq!(rows, vec![(1, "a".to_string()), (2, "B".to_string())]);
        assert_eq!(table.count(&store).unwrap(), 2);
    }

    #[test]
    fn corrupt_values_are_an_error_not_a_panic() {
        let store = MemoryStore::new();
        let table = StateTable::new(1, people(&[], &[]).schema(), vec![0]).unwrap();
        let mut wb = WriteBatch::default();
        wb.put(row_key(1, b"x"), vec![0xde, 0xad]);
        store.write(wb).unwrap();
        let err = table.scan(&store, 16).unwrap_err();
        assert_eq!(err.state, SqlState::DATA_CORRUPTED);
    }

    fn segmented(id: TableId) -> StateTable {
        StateTable::with_layout(id, people(&[], &[]).schema(), vec![0], Layout::Segments).unwrap()
    }

    #[test]
    fn segments_read_back_in_write_order_and_coalesce() {
        let store = MemoryStore::new();
        let table = segmented(3);
        let mut wb = WriteBatch::default();
        // Written out of key order across batches; each batch's first key orders the segments.
        table.put_batch(&people(&[10, 11], &["j", "k"]), &mut wb).unwrap();
        table.put_batch(&people(&[1, 2, 3], &["a", "b", "c"]), &mut wb).unwrap();
        table.put_batch(&people(&[], &[]), &mut wb).unwrap();
        assert_eq!(wb.len(), 2, "an empty batch writes nothing");
        store.write(wb).unwrap();
        let batches = table.scan(&store, 1024).unwrap();
        assert_eq!(batches.len(), 1, "small segments are coalesced");
        let ids = batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 2, 3, 10, 11]);
        // Row operations are refused, clearing works.
        let mut wb = WriteBatch::default();
        assert!(table.delete_batch(&people(&[1], &["a"]), &mut wb).is_err());
        assert!(table.get_many(&store, &[vec![1]]).is_err());
        table.clear(&mut wb);
        store.write(wb).unwrap();
        assert!(table.scan(&store, 1024).unwrap().is_empty());
    }

    #[test]
    fn corrupt_segments_are_an_error_not_a_panic() {
        let store = MemoryStore::new();
        let table = segmented(4);
        let mut wb = WriteBatch::default();
        table.put_batch(&people(&[1, 2], &["a", "b"]), &mut wb).unwrap();
        let WriteOp::Put(key, value) = wb.ops.pop().unwrap() else { panic!("a put") };
        // Truncated, then garbage, then another table's columns.
        for bad in [value[..value.len() / 2].to_vec(), vec![0xff; 64]] {
            let mut wb = WriteBatch::default();
            wb.put(key.clone(), bad);
            store.write(wb).unwrap();
            assert_eq!(table.scan(&store, 16).unwrap_err().state, SqlState::DATA_CORRUPTED);
        }
        let other = StateTable::with_layout(
            4,
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![0],
            Layout::Segments,
        )
        .unwrap();
        let mut wb = WriteBatch::default();
        other
            .put_batch(
                &RecordBatch::try_new(Arc::clone(other.schema()), vec![Arc::new(Int64Array::from(vec![1]))]).unwrap(),
                &mut wb,
            )
            .unwrap();
        store.write(wb).unwrap();
        assert_eq!(table.scan(&store, 16).unwrap_err().state, SqlState::DATA_CORRUPTED);
    }

    #[test]
    fn clear_only_touches_its_own_table() {
        let store = MemoryStore::new();
        let schema = people(&[], &[]).schema();
        let a = StateTable::new(1, schema.clone(), vec![0]).unwrap();
        let b = StateTable::new(2, schema, vec![0]).unwrap();
        let mut wb = WriteBatch::default();
        a.put_batch(&people(&[1], &["a"]), &mut wb).unwrap();
        b.put_batch(&people(&[1], &["b"]), &mut wb).unwrap();
        store.write(wb).unwrap();
        let mut wb = WriteBatch::default();
        a.clear(&mut wb);
        store.write(wb).unwrap();
        assert_eq!(a.count(&store).unwrap(), 0);
        assert_eq!(b.count(&store).unwrap(), 1);
    }
}
