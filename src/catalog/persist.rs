//! How catalog entries are stored: one JSON document per relation at meta key
//! `catalog/<id>`, plus the `catalog/next_id` counter, all in the metadata keyspace of the state
//! store. Changes are made through [`WriteBatch`]es so that an entry and the data it governs
//! change atomically.

use serde::{Deserialize, Serialize};

use datafusion::arrow::datatypes::Schema;

use crate::error::{Result, SqlState, WeirError};
use crate::state::keys::{meta_key, TableId};
use crate::state::store::{ScanControl, StateStore, WriteBatch};
use crate::state::table::Layout;

/// What kind of relation an entry describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelationKind {
    /// A table fed by INSERT / UPDATE / DELETE.
    Table,
    /// A view kept up to date incrementally (`CREATE MATERIALIZED VIEW`).
    MaterializedView,
    /// A view's changes delivered to an external system (`CREATE SINK`); no rows of its own
    /// (its key range holds its outbox, `connectors::sink`).
    Sink,
    /// A stored query (`CREATE VIEW`), run inside each query that reads it; no rows, no state.
    View,
    /// A secondary index of a table or materialized view (`CREATE INDEX`): its rows, keyed by
    /// the indexed columns, kept in the same write batches as the relation's ([`IndexDef`]).
    Index,
}

/// What an index holds: some columns of the relation it indexes, keyed by the first
/// `key_columns` of them (the indexed columns; the rest are those it includes). Its entries are
/// the relation's rows projected to `columns`, each with its multiplicity, so a read of the
/// index gives what a read of the relation's `columns` would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDef {
    /// The indexed relation's id.
    pub on: TableId,
    /// The indexed relation's columns the index holds, in index order.
    pub columns: Vec<usize>,
    /// How many of `columns`, from the first, are the indexed columns.
    pub key_columns: usize,
}

/// The durable description of one relation. Everything else about it is derived from this.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RelationDef {
    pub id: TableId,
    pub name: String,
    pub kind: RelationKind,
    /// The statement that created it, as the user wrote it.
    pub definition: String,
    /// The user-visible columns.
    pub schema: Schema,
    /// Indices into `schema` of the primary key; empty when the table has none (rows are then
    /// keyed by a hidden row id).
    pub primary_key: Vec<usize>,
    /// The relations a view reads.
    #[serde(default)]
    pub depends_on: Vec<TableId>,
    /// How many shards a view's operators run in, or a sink delivers by (0 for tables, and for
    /// a sink recorded before sinks had shards: one).
    #[serde(default)]
    pub parallelism: usize,
    /// A table that takes only INSERT (`APPEND ONLY`).
    #[serde(default)]
    pub append_only: bool,
    /// `WATERMARK FOR column AS expr` of an append-only table.
    #[serde(default)]
    pub watermark: Option<WatermarkDef>,
    /// The column (index into `schema`) each row gets the time it was stored at
    /// (`column AS PROCTIME()`): a processing-time attribute, kept with the row so that a view
    /// rebuilt from the stored rows sees the same times.
    #[serde(default)]
    pub processing_time: Option<usize>,
    /// A source's connector and its options (`CREATE SOURCE ... WITH (connector = ...)`).
    #[serde(default)]
    pub connector: Option<crate::catalog::options::ConnectorOptions>,
    /// A source whose connector produces its rows again when they are read: its chunks' offsets
    /// are stored, not its rows ([`crate::catalog::replay`]).
    #[serde(default)]
    pub replayed: bool,
    /// How its rows are stored: append-only relations created by this version are segmented;
    /// entries written before segments existed have none and keep their rows one by one.
    #[serde(default)]
    pub layout: Layout,
    /// A materialized view planned with integer literals typed int4 (created by this version);
    /// one made before is planned again as it was, literals int8, so its state still decodes.
    #[serde(default)]
    pub int4_literals: bool,
    /// The planner rules a materialized view was made with (`df_context::PlanningRules`): 0
    /// before revision 1, which types `1.5` numeric (not float8) and names the columns of
    /// subqueries as Postgres does. A view is planned again at start by the rules it was made
    /// with, so its columns and stored state agree.
    #[serde(default)]
    pub planner_revision: u32,
    /// The format a materialized view's operator state is written in
    /// (`state::value::StateFormat`): 0 before formats were recorded, which is format 1. The
    /// view keeps it for life; its operators read and write that format.
    #[serde(default)]
    pub state_format: u32,
    /// An index's columns and relation (kind [`RelationKind::Index`]).
    #[serde(default)]
    pub index: Option<IndexDef>,
    /// The role that owns it (`catalog::access`); empty for relations made before roles,
    /// which the superusers own.
    #[serde(default)]
    pub owner: String,
    /// A sink's own part of the name it goes by in the external system (Kafka's transactional
    /// id and marker group, its Postgres marker row: `connectors::sink::identity`): random, made
    /// when the sink is created, so that no other sink shares its marker: not one of another
    /// server, nor one this server had before its data directory was made anew (those got the
    /// same ids, and a new sink took the old one's epochs as delivered). Restoring a checkpoint
    /// keeps it. Empty for sinks made before it existed, which keep the name they had.
    #[serde(default)]
    pub sink_token: String,
}

/// A table's watermark declaration: views reading the table take `max(expr)` over the rows
/// they have seen as the table's watermark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatermarkDef {
    /// Index of the event-time column in the table's schema.
    pub column: usize,
    /// The watermark expression over a row, as SQL (`date_time - INTERVAL '5' SECOND`).
    pub expr: String,
}

const ENTRY_PREFIX: &str = "catalog/rel/";
const NEXT_ID_KEY: &str = "catalog/next_id";

fn entry_key(id: TableId) -> Vec<u8> {
    meta_key(&format!("{ENTRY_PREFIX}{id:010}"))
}

pub fn put_relation(def: &RelationDef, wb: &mut WriteBatch) -> Result<()> {
    let json = serde_json::to_vec(def).map_err(|e| WeirError::internal(format!("encoding catalog entry: {e}")))?;
    wb.put(entry_key(def.id), json);
    Ok(())
}

pub fn delete_relation(id: TableId, wb: &mut WriteBatch) {
    wb.delete(entry_key(id));
}

pub fn put_next_id(next: TableId, wb: &mut WriteBatch) {
    wb.put(meta_key(NEXT_ID_KEY), next.to_be_bytes().to_vec());
}

pub fn load_next_id(store: &dyn StateStore) -> Result<Option<TableId>> {
    match store.get(&meta_key(NEXT_ID_KEY))? {
        None => Ok(None),
        Some(v) => {
            let bytes: [u8; 4] = v.as_slice().try_into().map_err(|_| corrupt("next_id"))?;
            Ok(Some(TableId::from_be_bytes(bytes)))
        }
    }
}

pub fn load_relations(store: &dyn StateStore) -> Result<Vec<RelationDef>> {
    let mut out = Vec::new();
    store.scan_prefix(&meta_key(ENTRY_PREFIX), &mut |k, v| {
        let def: RelationDef =
            serde_json::from_slice(v).map_err(|e| corrupt(&format!("{}: {e}", String::from_utf8_lossy(&k[4..]))))?;
        out.push(def);
        Ok(ScanControl::Continue)
    })?;
    Ok(out)
}

/// A per-table counter (hidden row ids), stored at `seq/<name>`.
pub fn sequence_key(name: &str) -> Vec<u8> {
    meta_key(&format!("seq/{name}"))
}

pub fn load_sequence(store: &dyn StateStore, name: &str) -> Result<u64> {
    match store.get(&sequence_key(name))? {
        None => Ok(0),
        Some(v) => {
            let bytes: [u8; 8] = v.as_slice().try_into().map_err(|_| corrupt(name))?;
            Ok(u64::from_be_bytes(bytes))
        }
    }
}

fn corrupt(what: &str) -> WeirError {
    WeirError::new(SqlState::DATA_CORRUPTED, format!("catalog entry {what} is corrupt"))
}
