//! Weir's layer over `datafusion-pg-catalog`: what that crate cannot know about Weir.
//!
//! - OIDs. The crate numbers relations in the order it meets them; Weir's relations have their
//!   own ([`crate::catalog::Relation::oid`], stable across restarts, the one RowDescription
//!   names), put into `pg_class.oid` and `pg_attribute.attrelid`.
//! - Declared types: `pg_attribute.atttypid` / `atttypmod` of a `VARCHAR(20)` column say
//!   varchar and its length, where the crate sees the text it is stored as.
//! - Primary keys. The crate's `pg_index` and `pg_constraint` hold only Postgres's own system
//!   rows; clients find a table's key there (`\d t`, JDBC `getPrimaryKeys`, SQLAlchemy's
//!   `get_pk_constraint`). [`WeirPgCatalog`] appends one primary-key index per keyed table to
//!   `pg_index`, its index relation to `pg_class`, and its constraint to `pg_constraint`.
//! - Indexes (`CREATE INDEX`): in `pg_index` and `pg_class` (relkind `i`) beside the primary
//!   keys', and in `pg_indexes`, which the crate lacks.
//! - `pg_settings`: the server's settings (the crate lists one); `pg_matviews`: the views.
//! - Functions: `to_regtype` (psycopg's type introspection) and `_pg_expandarray` (JDBC's key
//!   queries, rewritten to `unnest(weir_pg_expandarray(..))` by the parser).
//!
//! Generated rows take the crate's table schemas as they are, so a crate upgrade that adds a
//! column still works (the new column is NULL or zero in Weir's rows).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int32Array, ListArray, RecordBatch, StructArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Int64Type, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{create_udf, ColumnarValue, Expr, Volatility};
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;

use super::function_args::argument_arrays;
use crate::catalog::{Catalog, DEFAULT_SCHEMA};
use crate::frontend::session::all_defaults;
use crate::frontend::type_names::normalize_type_name;

/// OIDs of Weir's primary-key indexes and constraints: far above the crate's dynamic range.
const KEY_OID_BASE: i64 = 1_000_000_000;

pub struct WeirPgCatalog {
    inner: Arc<dyn SchemaProvider>,
    catalog: Arc<Catalog>,
}

impl std::fmt::Debug for WeirPgCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeirPgCatalog")
    }
}

impl WeirPgCatalog {
    pub fn new(inner: Arc<dyn SchemaProvider>, catalog: Arc<Catalog>) -> Self {
        WeirPgCatalog { inner, catalog }
    }
}

#[async_trait]
impl SchemaProvider for WeirPgCatalog {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.push("pg_indexes".to_string());
        for name in super::pg_roles::TABLES {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if name == "pg_indexes" {
            return Ok(Some(Arc::new(pg_indexes(&self.catalog)?)));
        }
        if let Some(table) = super::pg_roles::table(name, &self.catalog)? {
            return Ok(Some(Arc::new(table)));
        }
        let Some(inner) = self.inner.table(name).await? else {
            return Ok(None);
        };
        let extra = match name {
            "pg_index" | "pg_class" | "pg_constraint" => Extra::Keys(name.to_string()),
            "pg_attribute" => Extra::Attributes,
            "pg_settings" => Extra::Settings,
            "pg_matviews" => Extra::Matviews,
            "pg_views" => Extra::Views,
            _ if char_columns(name).is_empty() => return Ok(Some(inner)),
            _ => return Ok(Some(Arc::new(CharColumns { inner, table: name.to_string() }))),
        };
        Ok(Some(Arc::new(Extended {
            inner,
            pg_class: self.inner.table("pg_class").await?,
            pg_namespace: self.inner.table("pg_namespace").await?,
            extra,
            catalog: Arc::clone(&self.catalog),
        })))
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "pg_indexes" || super::pg_roles::TABLES.contains(&name) || self.inner.table_exist(name)
    }
}

#[derive(Debug, Clone)]
enum Extra {
    Keys(String),
    Settings,
    Matviews,
    Views,
    /// pg_attribute: Weir's relations' OIDs and declared types.
    Attributes,
}

/// A crate table with Weir's rows appended.
struct Extended {
    inner: Arc<dyn TableProvider>,
    pg_class: Option<Arc<dyn TableProvider>>,
    pg_namespace: Option<Arc<dyn TableProvider>>,
    extra: Extra,
    catalog: Arc<Catalog>,
}

impl std::fmt::Debug for Extended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Extended({:?})", self.extra)
    }
}

/// One generated row: column name to value; unnamed columns get NULL (or zero if NOT NULL).
type Row = HashMap<&'static str, ScalarValue>;

fn text(s: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

fn int(v: i64) -> ScalarValue {
    ScalarValue::Int64(Some(v))
}

fn boolean(v: bool) -> ScalarValue {
    ScalarValue::Boolean(Some(v))
}

fn rows_to_batch(schema: &SchemaRef, rows: &[Row]) -> DfResult<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values = rows
            .iter()
            .map(|row| match row.get(field.name().as_str()) {
                Some(v) => v.cast_to(field.data_type()),
                None if field.is_nullable() => ScalarValue::try_from(field.data_type()),
                None => ScalarValue::new_default(field.data_type()),
            })
            .collect::<DfResult<Vec<_>>>()?;
        columns.push(if values.is_empty() {
            datafusion::arrow::array::new_empty_array(field.data_type())
        } else {
            ScalarValue::iter_to_array(values)?
        });
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// `int2vector` / `oidvector` / `int2[]` columns: the crate stores them as text (`1 2`,
/// `{1,2}`); clients unnest and subscript them, so Weir serves them as arrays.
const INT_ARRAY_COLUMNS: &[(&str, &str, bool)] = &[
    // (table, column, holds oids rather than small ints)
    ("pg_index", "indkey", false),
    ("pg_index", "indoption", false),
    ("pg_index", "indcollation", true),
    ("pg_index", "indclass", true),
    ("pg_constraint", "conkey", false),
    ("pg_constraint", "confkey", false),
];

fn int_array_type(oids: bool) -> DataType {
    let item = if oids { DataType::Int32 } else { DataType::Int16 };
    DataType::List(Arc::new(Field::new("item", item, true)))
}

/// Text like `1 2`, `{1,2}` or `[1]` as integer lists (NULL stays NULL).
fn int_arrays(column: &ArrayRef, oids: bool) -> DfResult<ArrayRef> {
    let text = datafusion::arrow::compute::cast(column, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    let mut builder = datafusion::arrow::array::ListBuilder::new(datafusion::arrow::array::Int32Builder::new());
    for v in text.iter() {
        match v {
            None => builder.append(false),
            Some(s) => {
                for n in s.split(|c: char| !(c.is_ascii_digit() || c == '-')).filter(|t| !t.is_empty()) {
                    builder.values().append_option(n.parse::<i32>().ok());
                }
                builder.append(true);
            }
        }
    }
    Ok(datafusion::arrow::compute::cast(&builder.finish(), &int_array_type(oids))?)
}

impl Extended {
    /// pg_matviews: the materialized views, with their queries.
    fn matview_rows(&self) -> Vec<Row> {
        self.views_of(crate::catalog::RelationKind::MaterializedView, |name, query| {
            HashMap::from([
                ("schemaname", text(crate::catalog::DEFAULT_SCHEMA)),
                ("matviewname", text(name)),
                ("matviewowner", text("root")),
                ("hasindexes", boolean(self.catalog.get(name).is_some_and(|r| !r.indexes().is_empty()))),
                ("ispopulated", boolean(true)),
                ("definition", text(query)),
            ])
        })
    }

    /// pg_views: the plain views, with their queries.
    fn view_rows(&self) -> Vec<Row> {
        self.views_of(crate::catalog::RelationKind::View, |name, query| {
            HashMap::from([
                ("schemaname", text(crate::catalog::DEFAULT_SCHEMA)),
                ("viewname", text(name)),
                ("viewowner", text("root")),
                ("definition", text(query)),
            ])
        })
    }

    /// A row per relation of `kind`, made from its name and its query (the definition after
    /// `AS`).
    fn views_of(&self, kind: crate::catalog::RelationKind, row: impl Fn(&str, &str) -> Row) -> Vec<Row> {
        self.catalog
            .relations()
            .iter()
            .filter(|r| r.def.kind == kind)
            .map(|r| {
                let query = r.def.definition.split_once(" AS ").map(|(_, q)| q).unwrap_or(&r.def.definition);
                row(&r.def.name, query)
            })
            .collect()
    }

    /// Columns clients read that the crate's table lacks (always NULL).
    fn missing_columns(&self, inner: &SchemaRef) -> Vec<Field> {
        let wanted: &[(&str, &str, DataType)] =
            &[("pg_class", "reloptions", DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))))];
        wanted
            .iter()
            .filter(|(table, column, _)| {
                matches!(&self.extra, Extra::Keys(t) if t == table) && inner.field_with_name(column).is_err()
            })
            .map(|(_, column, data_type)| Field::new(*column, data_type.clone(), true))
            .collect()
    }

    /// For an integer-array column of this table: whether it holds oids.
    fn int_array(&self, column: &str) -> Option<bool> {
        let Extra::Keys(t) = &self.extra else { return None };
        INT_ARRAY_COLUMNS.iter().find(|(table, c, _)| table == t && *c == column).map(|(_, _, oids)| *oids)
    }

    /// The crate reports every relation as a table (`r`) without indexes; materialized views
    /// are `m`, plain views `v`, and tables with a primary key have its index.
    fn mark_views(&self, batch: RecordBatch) -> DfResult<RecordBatch> {
        let views: HashMap<String, &'static str> = self
            .catalog
            .relations()
            .iter()
            .filter_map(|r| match r.def.kind {
                crate::catalog::RelationKind::MaterializedView => Some((r.def.name.clone(), "m")),
                crate::catalog::RelationKind::View => Some((r.def.name.clone(), "v")),
                _ => None,
            })
            .collect();
        let (Ok(name_idx), Ok(kind_idx)) = (batch.schema().index_of("relname"), batch.schema().index_of("relkind"))
        else {
            return Ok(batch);
        };
        let names = datafusion::arrow::compute::cast(batch.column(name_idx), &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let kinds = datafusion::arrow::compute::cast(batch.column(kind_idx), &DataType::Utf8)?;
        let kinds = kinds.as_string::<i32>();
        let patched: datafusion::arrow::array::StringArray = (0..batch.num_rows())
            .map(|i| {
                if kinds.is_null(i) {
                    None
                } else if let Some(kind) =
                    views.get(names.value(i)).filter(|_| !names.is_null(i) && matches!(kinds.value(i), "r" | "v"))
                {
                    Some(*kind)
                } else {
                    Some(kinds.value(i))
                }
            })
            .collect();
        let patched = datafusion::arrow::compute::cast(&patched, batch.column(kind_idx).data_type())?;
        let mut columns = batch.columns().to_vec();
        columns[kind_idx] = patched;
        // Keyed tables have their primary-key index (psql's \d shows it under "Indexes").
        if let Ok(has_index_idx) = batch.schema().index_of("relhasindex") {
            let keyed: std::collections::HashSet<String> = self
                .catalog
                .relations()
                .iter()
                .filter(|r| !r.def.primary_key.is_empty() || !r.indexes().is_empty())
                .map(|r| r.def.name.clone())
                .collect();
            let current = batch.column(has_index_idx).as_boolean();
            let patched: datafusion::arrow::array::BooleanArray = (0..batch.num_rows())
                .map(|i| {
                    let keyed =
                        !names.is_null(i) && keyed.contains(names.value(i)) && matches!(kinds.value(i), "r" | "v");
                    Some(keyed || (current.is_valid(i) && current.value(i)))
                })
                .collect();
            columns[has_index_idx] = Arc::new(patched);
        }
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    }

    /// Weir's relations by the OID the crate's pg_class gives them, and the `public` schema's
    /// OID. The crate numbers relations as it meets them; clients see each relation's own OID
    /// ([`Relation::oid`], the same across restarts), so pg_class and pg_attribute are
    /// renumbered with this map and RowDescription can name a column's table.
    /// `pg_class_rows`: the crate's pg_class when the caller has scanned it already.
    async fn public_relations(
        &self,
        state: &dyn Session,
        pg_class_rows: Option<&[RecordBatch]>,
    ) -> DfResult<PublicRelations> {
        let mut out = PublicRelations { namespace: 0, by_crate_oid: HashMap::new() };
        let (Some(pg_class), Some(pg_namespace)) = (&self.pg_class, &self.pg_namespace) else {
            return Ok(out);
        };
        let scan = |provider: &Arc<dyn TableProvider>| {
            let provider = Arc::clone(provider);
            async move { collect(provider.scan(state, None, &[], None).await?, state.task_ctx()).await }
        };
        let int64 = |c: &ArrayRef| datafusion::arrow::compute::cast(c, &DataType::Int64);
        let utf8 = |c: &ArrayRef| datafusion::arrow::compute::cast(c, &DataType::Utf8);
        for batch in scan(pg_namespace).await? {
            let (Some(oid), Some(name)) = (batch.column_by_name("oid"), batch.column_by_name("nspname")) else {
                continue;
            };
            let (oid, name) = (int64(oid)?, utf8(name)?);
            let (oid, name) = (oid.as_primitive::<Int64Type>(), name.as_string::<i32>());
            if let Some(i) = (0..batch.num_rows()).find(|&i| name.is_valid(i) && name.value(i) == DEFAULT_SCHEMA) {
                out.namespace = oid.value(i);
            }
        }
        let scanned;
        let pg_class_rows = match pg_class_rows {
            Some(rows) => rows,
            None => {
                scanned = scan(pg_class).await?;
                &scanned
            }
        };
        for batch in pg_class_rows {
            let get = |name: &str| batch.column_by_name(name).cloned();
            let (Some(oid), Some(relname), Some(ns)) = (get("oid"), get("relname"), get("relnamespace")) else {
                continue;
            };
            let (oid, ns, relname) = (int64(&oid)?, int64(&ns)?, utf8(&relname)?);
            let (oid, ns, relname) =
                (oid.as_primitive::<Int64Type>(), ns.as_primitive::<Int64Type>(), relname.as_string::<i32>());
            for i in 0..batch.num_rows() {
                if relname.is_valid(i) && ns.value(i) == out.namespace {
                    if let Some(relation) = self.catalog.get(relname.value(i)) {
                        out.by_crate_oid.insert(oid.value(i), relation);
                    }
                }
            }
        }
        Ok(out)
    }

    /// pg_class's `relowner` of Weir's relations: their owners' role OIDs (`pg_roles::owner_oid`).
    fn owners(&self, batch: RecordBatch, relations: &PublicRelations) -> DfResult<RecordBatch> {
        let schema = batch.schema();
        let (Ok(oid), Ok(owner)) = (schema.index_of("oid"), schema.index_of("relowner")) else { return Ok(batch) };
        let oids = datafusion::arrow::compute::cast(batch.column(oid), &DataType::Int64)?;
        let oids = oids.as_primitive::<Int64Type>();
        let mut columns = batch.columns().to_vec();
        columns[owner] = map_integers(&columns[owner], |row, v| match relations.by_crate_oid.get(&oids.value(row)) {
            Some(r) => Some(i64::from(super::pg_roles::owner_oid(&self.catalog, &r.def.owner))),
            None => v,
        })?;
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// `batch` with `column`'s crate relation OIDs replaced by Weir's.
    fn renumber(batch: RecordBatch, column: &str, relations: &PublicRelations) -> DfResult<RecordBatch> {
        let Ok(index) = batch.schema().index_of(column) else { return Ok(batch) };
        let mut columns = batch.columns().to_vec();
        columns[index] = map_integers(&columns[index], |_, oid| {
            oid.map(|oid| relations.by_crate_oid.get(&oid).map_or(oid, |r| r.oid() as i64))
        })?;
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    }

    /// pg_attribute's rows of Weir's relations: their OIDs, and their columns' declared types
    /// (`varchar` with its length, where the crate sees text).
    fn attributes(batch: RecordBatch, relations: &PublicRelations) -> DfResult<RecordBatch> {
        let schema = batch.schema();
        let (Ok(relid), Ok(attnum), Ok(typid), Ok(typmod)) = (
            schema.index_of("attrelid"),
            schema.index_of("attnum"),
            schema.index_of("atttypid"),
            schema.index_of("atttypmod"),
        ) else {
            return Ok(batch);
        };
        let relids = datafusion::arrow::compute::cast(batch.column(relid), &DataType::Int64)?;
        let attnums = datafusion::arrow::compute::cast(batch.column(attnum), &DataType::Int64)?;
        let (relids, attnums) = (relids.as_primitive::<Int64Type>(), attnums.as_primitive::<Int64Type>());
        let declared: Vec<Option<crate::types::pg_type::DeclaredType>> = (0..batch.num_rows())
            .map(|i| {
                let relation = relations.by_crate_oid.get(&relids.value(i))?;
                relation.declared_type(usize::try_from(attnums.value(i) - 1).ok()?)
            })
            .collect();
        let mut columns = batch.columns().to_vec();
        columns[typid] = map_integers(&columns[typid], |row, v| declared[row].map(|d| d.oid as i64).or(v))?;
        columns[typmod] = map_integers(&columns[typmod], |row, v| declared[row].map(|d| d.typmod as i64).or(v))?;
        Self::renumber(RecordBatch::try_new(schema, columns)?, "attrelid", relations)
    }

    /// pg_attribute's rows of the indexes: each a copy of its table's column's row, under the
    /// index's OID and numbered in index order (psql's `\d index`, drivers' index columns).
    /// `tables`: pg_attribute's rows of the relations, renumbered.
    fn index_attributes(&self, tables: &[RecordBatch]) -> DfResult<Option<RecordBatch>> {
        let Some(first) = tables.first() else { return Ok(None) };
        let schema = first.schema();
        let (Ok(relid), Ok(attnum)) = (schema.index_of("attrelid"), schema.index_of("attnum")) else {
            return Ok(None);
        };
        let all = datafusion::arrow::compute::concat_batches(&schema, tables)?;
        let relids = datafusion::arrow::compute::cast(all.column(relid), &DataType::Int64)?;
        let attnums = datafusion::arrow::compute::cast(all.column(attnum), &DataType::Int64)?;
        let (relids, attnums) = (relids.as_primitive::<Int64Type>(), attnums.as_primitive::<Int64Type>());
        let row_of: HashMap<(i64, i64), u32> =
            (0..all.num_rows()).map(|i| ((relids.value(i), attnums.value(i)), i as u32)).collect();
        let (mut picks, mut index_oids, mut positions) = (Vec::new(), Vec::new(), Vec::new());
        for index in index_entries(&self.catalog) {
            for (position, &column) in index.attnums.iter().enumerate() {
                if let Some(&row) = row_of.get(&(index.table.oid() as i64, column as i64)) {
                    picks.push(row);
                    index_oids.push(Some(index.oid));
                    positions.push(Some(position as i64 + 1));
                }
            }
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let taken =
            datafusion::arrow::compute::take_record_batch(&all, &datafusion::arrow::array::UInt32Array::from(picks))?;
        let mut columns = taken.columns().to_vec();
        columns[relid] = map_integers(&columns[relid], |row, _| index_oids[row])?;
        columns[attnum] = map_integers(&columns[attnum], |row, _| positions[row])?;
        Ok(Some(RecordBatch::try_new(schema, columns)?))
    }

    fn extra_rows(&self, relations: &PublicRelations, table: &str) -> Vec<Row> {
        let namespace_oid = relations.namespace;
        let mut rows = Vec::new();
        for index in index_entries(&self.catalog) {
            let n = index.attnums.len() as i64;
            let attnums: Vec<String> = index.attnums.iter().map(|a| a.to_string()).collect();
            let row: Row = match table {
                "pg_index" => HashMap::from([
                    ("indexrelid", int(index.oid)),
                    ("indrelid", int(index.table.oid() as i64)),
                    ("indnatts", int(n)),
                    ("indnkeyatts", int(index.key_columns as i64)),
                    ("indisunique", boolean(index.primary)),
                    ("indisprimary", boolean(index.primary)),
                    ("indimmediate", boolean(true)),
                    ("indisvalid", boolean(true)),
                    ("indisready", boolean(true)),
                    ("indislive", boolean(true)),
                    ("indkey", text(attnums.join(" "))),
                    ("indcollation", text(vec!["0"; attnums.len()].join(" "))),
                    ("indclass", text(vec!["0"; attnums.len()].join(" "))),
                    ("indoption", text(vec!["0"; attnums.len()].join(" "))),
                ]),
                "pg_class" => HashMap::from([
                    ("oid", int(index.oid)),
                    ("relname", text(&index.name)),
                    ("relnamespace", int(namespace_oid)),
                    ("relkind", text("i")),
                    ("relam", int(403)),
                    ("relpersistence", text("p")),
                    ("relnatts", int(n)),
                    ("relowner", int(10)),
                ]),
                _ if !index.primary => continue,
                _ => HashMap::from([
                    ("oid", int(index.oid)),
                    ("conname", text(&index.name)),
                    ("connamespace", int(namespace_oid)),
                    ("contype", text("p")),
                    ("convalidated", boolean(true)),
                    ("conrelid", int(index.table.oid() as i64)),
                    ("conindid", int(index.oid)),
                    ("conislocal", boolean(true)),
                    ("connoinherit", boolean(true)),
                    ("conkey", text(format!("{{{}}}", attnums.join(",")))),
                ]),
            };
            rows.push(row);
        }
        rows
    }
}

/// One index as the system catalogs show it: a keyed table's primary-key index, or an index
/// made by CREATE INDEX.
struct IndexEntry {
    /// The relation indexed.
    table: Arc<crate::catalog::Relation>,
    name: String,
    oid: i64,
    /// The relation's column numbers (from 1) the index holds, its key columns first.
    attnums: Vec<usize>,
    key_columns: usize,
    primary: bool,
}

impl IndexEntry {
    /// `pg_indexes.indexdef` and `pg_get_indexdef`: the statement that would make the index.
    fn definition(&self) -> String {
        let names: Vec<&str> = self.attnums.iter().map(|&a| self.table.schema.field(a - 1).name().as_str()).collect();
        let (keys, included) = names.split_at(self.key_columns);
        let include = if included.is_empty() { String::new() } else { format!(" INCLUDE ({})", included.join(", ")) };
        format!(
            "CREATE {}INDEX {} ON {DEFAULT_SCHEMA}.{} USING btree ({}){include}",
            if self.primary { "UNIQUE " } else { "" },
            self.name,
            self.table.def.name,
            keys.join(", ")
        )
    }
}

/// Every index, in the order of the relations they index: primary keys first, then indexes
/// by creation.
fn index_entries(catalog: &Catalog) -> Vec<IndexEntry> {
    let relations = catalog.relations();
    let mut out = Vec::new();
    for table in relations.iter().filter(|r| r.def.kind != crate::catalog::RelationKind::Index) {
        if !table.def.primary_key.is_empty() {
            out.push(IndexEntry {
                table: Arc::clone(table),
                name: format!("{}_pkey", table.def.name),
                oid: KEY_OID_BASE + table.def.id as i64,
                attnums: table.def.primary_key.iter().map(|c| c + 1).collect(),
                key_columns: table.def.primary_key.len(),
                primary: true,
            });
        }
        for index in table.indexes().into_iter().filter(|i| i.readable_index()) {
            let Some(def) = &index.def.index else { continue };
            out.push(IndexEntry {
                table: Arc::clone(table),
                name: index.def.name.clone(),
                oid: index.oid() as i64,
                attnums: def.columns.iter().map(|c| c + 1).collect(),
                key_columns: def.key_columns,
                primary: false,
            });
        }
    }
    out
}

/// `pg_indexes`: every index with its definition (Postgres's view; the crate has none).
fn pg_indexes(catalog: &Catalog) -> DfResult<datafusion::datasource::MemTable> {
    use datafusion::arrow::array::StringArray;
    use datafusion::arrow::datatypes::Schema;
    let entries = index_entries(catalog);
    let column = |f: &dyn Fn(&IndexEntry) -> Option<String>| -> ArrayRef {
        Arc::new(entries.iter().map(f).collect::<StringArray>())
    };
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("schemaname", column(&|_| Some(DEFAULT_SCHEMA.to_string()))),
        ("tablename", column(&|e| Some(e.table.def.name.clone()))),
        ("indexname", column(&|e| Some(e.name.clone()))),
        ("tablespace", column(&|_| None)),
        ("indexdef", column(&|e| Some(e.definition()))),
    ];
    let schema = Arc::new(Schema::new(
        columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns.into_iter().map(|(_, a)| a).collect())?;
    datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]])
}

/// An integer column with each row's value (as i64) passed through `f(row, value)`, in its own
/// integer type.
fn map_integers(column: &ArrayRef, f: impl Fn(usize, Option<i64>) -> Option<i64>) -> DfResult<ArrayRef> {
    let values = datafusion::arrow::compute::cast(column, &DataType::Int64)?;
    let mapped: datafusion::arrow::array::Int64Array =
        values.as_primitive::<Int64Type>().iter().enumerate().map(|(row, v)| f(row, v)).collect();
    Ok(datafusion::arrow::compute::cast(&mapped, column.data_type())?)
}

/// Weir's relations as the crate's pg_catalog numbers them ([`Extended::public_relations`]).
struct PublicRelations {
    /// The `public` schema's OID.
    namespace: i64,
    by_crate_oid: HashMap<i64, Arc<crate::catalog::Relation>>,
}

fn settings_rows() -> Vec<Row> {
    let mut rows: Vec<Row> = all_defaults()
        .into_iter()
        .map(|(name, value, description)| {
            HashMap::from([
                ("name", text(name)),
                ("setting", text(value)),
                ("short_desc", text(description)),
                ("context", text("user")),
                ("vartype", text("string")),
                ("source", text("default")),
            ])
        })
        .collect();
    for (name, value) in [("max_index_keys", "32"), ("block_size", "8192"), ("max_connections", "1000")] {
        rows.push(HashMap::from([
            ("name", text(name)),
            ("setting", text(value)),
            ("context", text("internal")),
            ("vartype", text("integer")),
            ("source", text("default")),
        ]));
    }
    rows
}

/// The columns PostgreSQL types `"char"` (one byte: `pg_type.typtype` is `b`, `d`, `e`, ...),
/// which the crate keeps as text. Clients that read them in binary (asyncpg's type
/// introspection compares `kind` with `b'b'`) need the type, so they are marked for the wire
/// (`arrow_pg::datatypes::PG_CHAR_KEY`: OID 18, one byte in binary).
fn char_columns(table: &str) -> &'static [&'static str] {
    match table {
        "pg_type" => &["typtype", "typcategory", "typalign", "typstorage", "typdelim"],
        "pg_class" => &["relkind", "relpersistence", "relreplident"],
        "pg_attribute" => &["attalign", "attstorage", "attcompression", "attidentity", "attgenerated"],
        "pg_constraint" => &["contype", "confupdtype", "confdeltype", "confmatchtype"],
        "pg_proc" => &["prokind", "provolatile", "proparallel"],
        "pg_cast" => &["castcontext", "castmethod"],
        "pg_am" => &["amtype"],
        "pg_operator" => &["oprkind"],
        "pg_aggregate" => &["aggkind"],
        "pg_depend" => &["deptype"],
        "pg_trigger" => &["tgenabled"],
        _ => &[],
    }
}

/// `schema` of `table` with its `"char"` columns (that are text) marked.
fn mark_char_columns(table: &str, schema: SchemaRef) -> SchemaRef {
    let chars = char_columns(table);
    if !schema.fields().iter().any(|f| chars.contains(&f.name().as_str())) {
        return schema;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let text = matches!(f.data_type(), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8);
            if !text || !chars.contains(&f.name().as_str()) {
                return f.as_ref().clone();
            }
            let mut metadata = f.metadata().clone();
            metadata.insert(arrow_pg::datatypes::PG_CHAR_KEY.to_string(), "char".to_string());
            f.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A crate table as it is, with its `"char"` columns marked ([`char_columns`]).
#[derive(Debug)]
struct CharColumns {
    inner: Arc<dyn TableProvider>,
    table: String,
}

#[async_trait]
impl TableProvider for CharColumns {
    fn schema(&self) -> SchemaRef {
        mark_char_columns(&self.table, self.inner.schema())
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // The rows as the crate has them, under the marked schema (a catalog table is small).
        let schema = self.schema();
        let batches = collect(self.inner.scan(state, None, &[], None).await?, state.task_ctx())
            .await?
            .into_iter()
            .map(|b| RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MemorySourceConfig::try_new_exec(&[batches], schema, projection.cloned())?)
    }
}

#[async_trait]
impl TableProvider for Extended {
    fn schema(&self) -> SchemaRef {
        let inner = self.inner.schema();
        let fields: Vec<Field> = inner
            .fields()
            .iter()
            .map(|f| {
                if let Some(oids) = self.int_array(f.name()) {
                    Field::new(f.name(), int_array_type(oids), true)
                } else if matches!(self.extra, Extra::Attributes)
                    && matches!(f.name().as_str(), "attrelid" | "atttypid")
                {
                    // Postgres types these `oid`, and clients read them as numbers (the crate
                    // announces regclass and regtype, which drivers read as names).
                    let mut metadata = f.metadata().clone();
                    metadata.insert(arrow_pg::datatypes::PG_OID_ALIAS_KEY.to_string(), "oid".to_string());
                    f.as_ref().clone().with_metadata(metadata)
                } else {
                    f.as_ref().clone()
                }
            })
            .collect::<Vec<_>>()
            .into_iter()
            .chain(self.missing_columns(&inner))
            .collect();
        let table = match &self.extra {
            Extra::Keys(table) => table.as_str(),
            Extra::Attributes => "pg_attribute",
            _ => "",
        };
        mark_char_columns(table, Arc::new(datafusion::arrow::datatypes::Schema::new(fields)))
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = self.inner.schema();
        // The crate's rows, for the tables that keep them (pg_settings' one row is replaced).
        let inner_rows = match &self.extra {
            Extra::Keys(_) | Extra::Attributes => {
                collect(self.inner.scan(state, None, &[], None).await?, state.task_ctx()).await?
            }
            _ => vec![],
        };
        let is_pg_class = matches!(&self.extra, Extra::Keys(t) if t == "pg_class");
        let relations = match &self.extra {
            // pg_class's own rows say how the crate numbered the relations: not scanned twice.
            Extra::Keys(_) | Extra::Attributes => {
                Some(self.public_relations(state, is_pg_class.then_some(inner_rows.as_slice())).await?)
            }
            _ => None,
        };
        let mut batches = match (&self.extra, &relations) {
            (Extra::Keys(_), Some(relations)) if is_pg_class => inner_rows
                .into_iter()
                .map(|b| Self::renumber(self.owners(self.mark_views(b)?, relations)?, "oid", relations))
                .collect::<DfResult<Vec<_>>>()?,
            (Extra::Keys(_), Some(_)) => inner_rows,
            (Extra::Attributes, Some(relations)) => {
                let mut batches =
                    inner_rows.into_iter().map(|b| Self::attributes(b, relations)).collect::<DfResult<Vec<_>>>()?;
                batches.extend(self.index_attributes(&batches)?);
                batches
            }
            // The crate's one pg_settings row is replaced by the full list.
            _ => vec![],
        };
        let rows = match (&self.extra, &relations) {
            (Extra::Settings, _) => settings_rows(),
            (Extra::Matviews, _) => self.matview_rows(),
            (Extra::Views, _) => self.view_rows(),
            (Extra::Keys(table), Some(relations)) => self.extra_rows(relations, table),
            _ => vec![],
        };
        batches.push(rows_to_batch(&schema, &rows)?);
        let schema = self.schema();
        let batches = batches
            .into_iter()
            .map(|b| {
                let mut columns = b
                    .columns()
                    .iter()
                    .zip(schema.fields())
                    .map(|(c, f)| match self.int_array(f.name()) {
                        Some(oids) => int_arrays(c, oids),
                        None => Ok(Arc::clone(c)),
                    })
                    .collect::<DfResult<Vec<_>>>()?;
                // Columns Postgres has and the crate lacks are NULL.
                for f in &schema.fields()[columns.len()..] {
                    columns.push(datafusion::arrow::array::new_null_array(f.data_type(), b.num_rows()));
                }
                Ok(RecordBatch::try_new(Arc::clone(&schema), columns)?)
            })
            .collect::<DfResult<Vec<_>>>()?;
        Ok(MemorySourceConfig::try_new_exec(&[batches], schema, projection.cloned())?)
    }
}

/// `pg_get_indexdef(index_oid [, column, pretty])`: the definition of an index
/// (`CREATE UNIQUE INDEX t_pkey ON public.t USING btree (id)`), or with `column` > 0 that
/// column's name; NULL for indexes Weir does not have.
fn index_definition_udf(catalog: Arc<Catalog>) -> datafusion::logical_expr::ScalarUDF {
    use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
    use datafusion::logical_expr::{Signature, TypeSignature};
    let signature = Signature::one_of(
        vec![
            TypeSignature::Exact(vec![DataType::Int32]),
            // (oid, column, pretty): clients pass the column as int4 or int8, pretty as NULL.
            TypeSignature::Any(3),
        ],
        Volatility::Stable,
    );
    let udf = SimpleScalarUDF::new_with_signature(
        "pg_get_indexdef",
        signature,
        DataType::Utf8,
        Arc::new(move |args| {
            let (n, arrays) = argument_arrays(args)?;
            let oids = arrays[0].as_primitive::<datafusion::arrow::datatypes::Int32Type>();
            let columns = arrays.get(1).map(|c| datafusion::arrow::compute::cast(c, &DataType::Int32)).transpose()?;
            let columns = columns.as_ref().map(|c| c.as_primitive::<datafusion::arrow::datatypes::Int32Type>());
            let indexes = index_entries(&catalog);
            let out: datafusion::arrow::array::StringArray = (0..n)
                .map(|i| {
                    if oids.is_null(i) {
                        return None;
                    }
                    let oid = oids.value(i) as i64;
                    let index = indexes.iter().find(|e| e.oid == oid)?;
                    match columns.filter(|c| c.is_valid(i)).map(|c| c.value(i)).unwrap_or(0) {
                        0 => Some(index.definition()),
                        c => index
                            .attnums
                            .get(usize::try_from(c).ok()?.checked_sub(1)?)
                            .map(|&a| index.table.schema.field(a - 1).name().clone()),
                    }
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    );
    datafusion::logical_expr::ScalarUDF::from(udf)
}

/// `weir_sql_type_name(arrow_type_text)`: an Arrow type's display name as Postgres names the
/// type (information_schema.columns.data_type, see df_context).
pub fn sql_type_name_udf() -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        "weir_sql_type_name",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args| {
            let (_, arrays) = argument_arrays(args)?;
            let names = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
            let out: datafusion::arrow::array::StringArray = names
                .as_string::<i32>()
                .iter()
                .map(|n| {
                    n.map(|n| n.parse::<DataType>().map(|dt| sql_type_name(&dt)).unwrap_or_else(|_| n.to_string()))
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    )
}

/// `information_schema.columns`' `data_type`, `character_maximum_length` and `udt_name` of a
/// column (`weir_column_type(table_schema, table_name, column_name, arrow_type_text)`,
/// `weir_column_max_length(table_schema, table_name, column_name)` and `weir_column_udt(...)` as
/// the first): its declared type where it has one (`character varying`, 20, `varchar`), else its
/// Arrow type's Postgres names (and no length).
pub fn column_type_udfs(catalog: &Arc<Catalog>) -> [datafusion::logical_expr::ScalarUDF; 3] {
    fn declared(catalog: &Catalog, arrays: &[ArrayRef]) -> DfResult<Vec<Option<crate::types::pg_type::DeclaredType>>> {
        let texts = arrays[..3]
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<Vec<_>, _>>()?;
        let (schemas, tables, columns) =
            (texts[0].as_string::<i32>(), texts[1].as_string::<i32>(), texts[2].as_string::<i32>());
        Ok((0..schemas.len())
            .map(|i| {
                if schemas.is_null(i) || schemas.value(i) != DEFAULT_SCHEMA || tables.is_null(i) || columns.is_null(i) {
                    return None;
                }
                let relation = catalog.get(tables.value(i))?;
                relation.declared_type(relation.schema.index_of(columns.value(i)).ok()?)
            })
            .collect())
    }
    // A text column of the declared type's or the Arrow type's name.
    let named = |name: &str,
                 declared_name: fn(crate::types::pg_type::DeclaredType) -> String,
                 arrow_name: fn(&DataType) -> String| {
        let catalog = Arc::clone(catalog);
        create_udf(
            name,
            vec![DataType::Utf8, DataType::Utf8, DataType::Utf8, DataType::Utf8],
            DataType::Utf8,
            Volatility::Stable,
            Arc::new(move |args| {
                let (_, arrays) = argument_arrays(args)?;
                let arrow_types = datafusion::arrow::compute::cast(&arrays[3], &DataType::Utf8)?;
                let arrow_types = arrow_types.as_string::<i32>();
                let out: datafusion::arrow::array::StringArray = declared(&catalog, &arrays)?
                    .into_iter()
                    .enumerate()
                    .map(|(i, d)| match d {
                        Some(d) => Some(declared_name(d)),
                        None if arrow_types.is_null(i) => None,
                        None => Some(
                            arrow_types
                                .value(i)
                                .parse::<DataType>()
                                .map(|dt| arrow_name(&dt))
                                .unwrap_or_else(|_| arrow_types.value(i).to_string()),
                        ),
                    })
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(out)))
            }),
        )
    };
    let type_udf = named("weir_column_type", |d| d.base_name().to_string(), sql_type_name);
    let udt_udf = named(
        "weir_column_udt",
        |d| d.type_name().to_string(),
        |dt| crate::types::pg_type::type_name(dt).unwrap_or_else(|| dt.to_string().to_lowercase()),
    );
    let for_lengths = Arc::clone(catalog);
    let length_udf = create_udf(
        "weir_column_max_length",
        vec![DataType::Utf8, DataType::Utf8, DataType::Utf8],
        DataType::Int64,
        Volatility::Stable,
        Arc::new(move |args| {
            let (_, arrays) = argument_arrays(args)?;
            let out: datafusion::arrow::array::Int64Array = declared(&for_lengths, &arrays)?
                .into_iter()
                .map(|d| d.and_then(|d| d.max_length()).map(|n| n as i64))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    );
    [type_udf, length_udf, udt_udf]
}

/// `weir_regclass(name)`: the OID of the relation `name` (`orders`, `public.orders`,
/// `"public"."Orders"`), what a cast of a computed name to `regclass` gives; NULL for a name that
/// is no relation of Weir's.
fn regclass_udf(catalog: Arc<Catalog>) -> datafusion::logical_expr::ScalarUDF {
    let unquote = |part: &str| {
        let part = part.trim();
        match part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
            Some(quoted) => quoted.replace("\"\"", "\""),
            None => part.to_lowercase(),
        }
    };
    name_lookup_udf("weir_regclass", move |name| {
        // A dot outside double quotes separates the schema from the name.
        let mut quoted = false;
        let split = name.char_indices().find(|(_, c)| {
            if *c == '"' {
                quoted = !quoted;
            }
            *c == '.' && !quoted
        });
        let (schema, relation) = match split {
            Some((i, _)) => (Some(unquote(&name[..i])), unquote(&name[i + 1..])),
            None => (None, unquote(name)),
        };
        if schema.is_some_and(|s| s != DEFAULT_SCHEMA) {
            return None;
        }
        catalog.get(&relation).map(|r| r.oid() as i32)
    })
}

/// A function `name(text) -> int4` looking each name up with `lookup` (NULL where it finds none).
fn name_lookup_udf(
    name: &str,
    lookup: impl Fn(&str) -> Option<i32> + Send + Sync + 'static,
) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(move |args| {
            let (_, arrays) = argument_arrays(args)?;
            let names = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
            let oids: Int32Array = names.as_string::<i32>().iter().map(|n| n.and_then(&lookup)).collect();
            Ok(ColumnarValue::Array(Arc::new(oids)))
        }),
    )
}

/// Registers the functions clients' catalog queries call that the crate does not provide.
pub fn register_functions(ctx: &SessionContext, type_oids: HashMap<String, i32>, catalog: &Arc<Catalog>) {
    ctx.register_udf(index_definition_udf(Arc::clone(catalog)));
    ctx.register_udf(sql_type_name_udf());
    ctx.register_udf(super::pg_functions::format_udf());
    ctx.register_udf(super::pg_functions::regexp_matches_udf());
    ctx.register_udf(super::pg_functions::col_description_udf());
    ctx.register_udf(super::pg_functions::quote_ident_udf());
    ctx.register_udf(super::bytea_input::bytea_in());
    for udf in super::json_functions::json_udfs() {
        ctx.register_udf(udf);
    }
    ctx.register_udf(regclass_udf(Arc::clone(catalog)));
    ctx.register_udf(super::pg_roles::get_userbyid_udf(Arc::clone(catalog)));
    ctx.register_udf(super::pg_roles::role_memberships_udf(Arc::clone(catalog)));
    // Every type and collation is in pg_catalog, which is always on the search path.
    for name in ["pg_type_is_visible", "pg_collation_is_visible"] {
        ctx.register_udf(create_udf(
            name,
            vec![DataType::Int32],
            DataType::Boolean,
            Volatility::Stable,
            Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))),
        ));
    }
    // Weir has no sequences (no serial columns): no column owns one. (SQLAlchemy 2.1's
    // inspector asks for every column.)
    ctx.register_udf(create_udf(
        "pg_get_serial_sequence",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    ));
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(JsonBuildObject::default()));
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(PgTypeof::default()));
    ctx.register_udf(create_udf(
        "weir_like_escape",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args| {
            let (n, arrays) = argument_arrays(args)?;
            let (patterns, escapes) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
            let out: datafusion::arrow::array::StringArray = (0..n)
                .map(|i| (!patterns.is_null(i)).then(|| backslash_escapes(patterns.value(i), escapes.value(i))))
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    ));
    let type_oids = Arc::new(type_oids);
    ctx.register_udf(name_lookup_udf("to_regtype", move |n| type_oids.get(&normalize_type_name(n)).copied()));
    let element = Fields::from(vec![Field::new("x", DataType::Int32, true), Field::new("n", DataType::Int32, false)]);
    let item = Arc::new(Field::new("item", DataType::Struct(element.clone()), false));
    let list_type = DataType::List(Arc::clone(&item));
    ctx.register_udf(create_udf(
        "weir_pg_expandarray",
        vec![DataType::Utf8],
        list_type,
        Volatility::Immutable,
        Arc::new(move |args| {
            let (_, arrays) = argument_arrays(args)?;
            let input = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
            let input = input.as_string::<i32>();
            let (mut xs, mut ns, mut offsets) = (Vec::new(), Vec::new(), vec![0i32]);
            for v in input.iter() {
                for (i, x) in
                    v.unwrap_or("").split([' ', ',', '{', '}', '[', ']']).filter(|s| !s.is_empty()).enumerate()
                {
                    xs.push(x.parse::<i32>().ok());
                    ns.push((i + 1) as i32);
                }
                offsets.push(xs.len() as i32);
            }
            let structs = StructArray::new(
                element.clone(),
                vec![Arc::new(Int32Array::from(xs)) as ArrayRef, Arc::new(Int32Array::from(ns)) as ArrayRef],
                None,
            );
            let list = ListArray::new(Arc::clone(&item), OffsetBuffer::new(offsets.into()), Arc::new(structs), None);
            Ok(ColumnarValue::Array(Arc::new(list)))
        }),
    ));
}

/// The `typname -> oid` map of the crate's pg_type (arrays as `_int4` and `int4[]`).
pub async fn type_oids(ctx: &SessionContext) -> DfResult<HashMap<String, i32>> {
    let batches = ctx
        .sql("SELECT typname, CAST(oid AS INT) AS oid, CAST(typarray AS INT) AS typarray FROM pg_catalog.pg_type")
        .await?
        .collect()
        .await?;
    let mut out = HashMap::new();
    for b in batches {
        let names = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let oids = b.column(1).as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        let arrays = b.column(2).as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        for i in 0..b.num_rows() {
            if names.is_null(i) || oids.is_null(i) {
                continue;
            }
            out.insert(names.value(i).to_string(), oids.value(i));
            if !arrays.is_null(i) && arrays.value(i) != 0 {
                out.insert(format!("{}[]", names.value(i)), arrays.value(i));
            }
        }
    }
    Ok(out)
}

/// The SQL name Postgres would print for a column of this Arrow type (Arrow's own name, lower
/// case, for types Postgres has none for).
pub fn sql_type_name(dt: &DataType) -> String {
    crate::types::pg_type::postgres_type_name(dt).unwrap_or_else(|| dt.to_string().to_lowercase())
}

/// A LIKE pattern written with escape character `escape`, rewritten with backslash escapes.
fn backslash_escapes(pattern: &str, escape: &str) -> String {
    let Some(esc) = escape.chars().next() else { return pattern.replace('\\', "\\\\") };
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == esc {
            if let Some(next) = chars.next() {
                out.push('\\');
                out.push(next);
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

/// `pg_typeof(x)`: the name of the type of `x` as Postgres prints it (`integer`, `bigint`,
/// `text`, `numeric`, `timestamp with time zone`, `integer[]`; `unknown` for a bare NULL): the
/// type the value has on the wire, which is what a user asks it for.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTypeof {
    signature: datafusion::logical_expr::Signature,
}

impl Default for PgTypeof {
    fn default() -> Self {
        PgTypeof { signature: datafusion::logical_expr::Signature::any(1, Volatility::Immutable) }
    }
}

/// Postgres's name of the type a value of `data_type` is sent as.
fn wire_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Null => "unknown".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Decimal128(..) | DataType::Decimal256(..) => "numeric".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", wire_type_name(f.data_type()))
        }
        other => crate::types::pg_type::postgres_type_name(other).unwrap_or_else(|| other.to_string()),
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for PgTypeof {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: datafusion::logical_expr::ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        // A declared type the value still carries (`jsonb` from a cast or `->`) names it.
        let field = &args.arg_fields[0];
        let name = match crate::types::pg_type::DeclaredType::of(field).filter(|d| d.fits(field.data_type())) {
            Some(declared) => declared.sql_name(),
            None => wire_type_name(field.data_type()),
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// `json_build_object(key, value, ...)`: a JSON object as text (SQLAlchemy 2.1's inspector builds
/// column details with it). Keys are text; numbers and booleans stay JSON numbers and booleans,
/// NULL is `null`, anything else a JSON string of its text form.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: datafusion::logical_expr::Signature,
}

impl Default for JsonBuildObject {
    fn default() -> Self {
        JsonBuildObject { signature: datafusion::logical_expr::Signature::variadic_any(Volatility::Immutable) }
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: datafusion::logical_expr::ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return datafusion::common::plan_err!("argument list must have even number of elements");
        }
        let (n, arrays) = argument_arrays(&args.args)?;
        let texts = arrays
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut out = datafusion::arrow::array::StringBuilder::new();
        for row in 0..n {
            let mut object = String::from("{");
            for pair in 0..arrays.len() / 2 {
                let (keys, values) = (texts[2 * pair].as_string::<i32>(), texts[2 * pair + 1].as_string::<i32>());
                if keys.is_null(row) {
                    return datafusion::common::exec_err!("null value not allowed for object key");
                }
                if pair > 0 {
                    object.push_str(", ");
                }
                object.push_str(&serde_json::to_string(keys.value(row)).unwrap_or_default());
                object.push_str(" : ");
                let value_type = arrays[2 * pair + 1].data_type();
                let value = if values.is_null(row) {
                    "null".to_string()
                } else if value_type.is_numeric() || *value_type == DataType::Boolean {
                    values.value(row).to_string()
                } else {
                    serde_json::to_string(values.value(row)).unwrap_or_default()
                };
                object.push_str(&value);
            }
            object.push('}');
            out.append_value(object);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
