//! Materialize: a view's rows, stored in its state table and changed once per epoch.
//!
//! A view is a multiset of rows: the state table is keyed by all of the view's columns and holds
//! each distinct row with its multiplicity (`_weir_count`). Changes of an epoch are gathered,
//! netted per row, and written in the epoch's one write batch; the net changes are also what
//! the view publishes to views built on it.
//!
//! An append-only view (one whose plan never retracts, see `stream_plan::translate`) is stored as
//! segments instead: the epoch's rows are appended as they are, with fresh row ids, without
//! reading anything back. The next row id is stored with them, so a view restored from a
//! checkpoint never reuses an id (a segment is keyed by its first). A retraction reaching such a view is a planner bug and fails the
//! epoch.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;

use crate::catalog::Relation;
use crate::error::{Result, WeirError};
use crate::state::multiset;
use crate::state::store::{StateStore, WriteBatch};
use crate::state::table::Layout;
use crate::types::{ChangeBatch, Op};

pub struct Materialize {
    relation: Arc<Relation>,
    store: Arc<dyn StateStore>,
    pending: Vec<ChangeBatch>,
}

impl Materialize {
    pub fn new(relation: Arc<Relation>, store: Arc<dyn StateStore>) -> Materialize {
        Materialize { relation, store, pending: Vec::new() }
    }

    pub fn apply(&mut self, batch: ChangeBatch) {
        if !batch.is_empty() {
            self.pending.push(batch);
        }
    }

    /// Nets the epoch's changes: the writes that bring the state table up to date, and the
    /// view's net changes.
    pub fn barrier(&mut self) -> Result<(WriteBatch, Option<ChangeBatch>)> {
        let mut wb = WriteBatch::default();
        if self.pending.is_empty() {
            return Ok((wb, None));
        }
        let schema = Arc::clone(&self.relation.schema);
        let batches: Vec<ChangeBatch> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(|b| {
                // Plans may differ from the view's declared schema only in nullability.
                let data = RecordBatch::try_new(Arc::clone(&schema), b.data.columns().to_vec())?;
                Ok(b.with_data(data))
            })
            .collect::<Result<_>>()?;
        let all = ChangeBatch::concat(&schema, &batches)?;
        if self.relation.def.layout == Layout::Segments {
            return self.append(all, wb);
        }
        let out = multiset::apply(&self.relation.table, self.store.as_ref(), &all, &mut wb)?;
        Ok((wb, out))
    }

    /// The append-only path: every change must be an insert.
    fn append(&self, all: ChangeBatch, mut wb: WriteBatch) -> Result<(WriteBatch, Option<ChangeBatch>)> {
        if all.ops.iter().any(|op| *op != Op::Insert) {
            return Err(WeirError::internal(format!(
                "append-only view \"{}\" received a retraction",
                self.relation.def.name
            )));
        }
        let mut columns = all.data.columns().to_vec();
        columns.push(self.relation.allocate_row_ids(all.data.num_rows()));
        let stored = RecordBatch::try_new(Arc::clone(self.relation.table.schema()), columns)?;
        self.relation.table.put_batch(&stored, &mut wb)?;
        self.relation.persist_row_id(&mut wb);
        Ok((wb, Some(all)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::state::memory::MemoryStore;
    use crate::types::change_batch::from_pretty;

    fn view() -> (Arc<Catalog>, Materialize) {
        view_with(false)
    }

    fn view_with(append_only: bool) -> (Arc<Catalog>, Materialize) {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let catalog = Arc::new(Catalog::open(Arc::clone(&store), "dev", Default::default()).unwrap());
        let schema = from_pretty("I T\n+ 1 a").schema().as_ref().clone();
        catalog
            .create_view("v", "CREATE MATERIALIZED VIEW v AS ...", schema, vec![], 1, append_only, None, 3, "")
            .unwrap();
        let relation = catalog.get("v").unwrap();
        (Arc::clone(&catalog), Materialize::new(relation, store))
    }

    fn epoch(m: &mut Materialize, catalog: &Catalog, changes: &str) -> String {
        m.apply(from_pretty(changes));
        let (wb, out) = m.barrier().unwrap();
        catalog.store().write(wb).unwrap();
        out.map(|b| b.to_pretty()).unwrap_or_default()
    }

    fn rows(catalog: &Catalog) -> Vec<String> {
        let relation = catalog.get("v").unwrap();
        let batches = relation.scan_rows(catalog.store().as_ref()).unwrap();
        let mut out: Vec<String> = batches
            .iter()
            .flat_map(|b| ChangeBatch::inserts(b.clone()).to_pretty().lines().map(String::from).collect::<Vec<_>>())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn changes_net_within_an_epoch_and_duplicates_count() {
        let (catalog, mut m) = view();
        // Inserted and deleted in one epoch: no trace.
        assert_eq!(epoch(&mut m, &catalog, "I T\n+ 1 a\n+ 2 b\n- 1 a\n+ 2 b"), "+ 2 b\n+ 2 b\n");
        assert_eq!(rows(&catalog), vec!["+ 2 b", "+ 2 b"]);
        // An update is a delete and an insert.
        assert_eq!(epoch(&mut m, &catalog, "I T\nU- 2 b\nU+ 2 c"), "- 2 b\n+ 2 c\n");
        assert_eq!(rows(&catalog), vec!["+ 2 b", "+ 2 c"]);
        assert_eq!(epoch(&mut m, &catalog, "I T\n- 2 b\n- 2 c"), "- 2 b\n- 2 c\n");
        assert!(rows(&catalog).is_empty());
        assert_eq!(epoch(&mut m, &catalog, "I T"), "");
    }

    #[test]
    fn append_only_views_keep_duplicates_and_refuse_retractions() {
        let (catalog, mut m) = view_with(true);
        assert_eq!(epoch(&mut m, &catalog, "I T\n+ 1 a\n+ 1 a"), "+ 1 a\n+ 1 a\n");
        assert_eq!(epoch(&mut m, &catalog, "I T\n+ 2 b"), "+ 2 b\n");
        assert_eq!(rows(&catalog), vec!["+ 1 a", "+ 1 a", "+ 2 b"]);
        m.apply(from_pretty("I T\n- 1 a"));
        assert!(m.barrier().is_err());
        assert_eq!(rows(&catalog), vec!["+ 1 a", "+ 1 a", "+ 2 b"]);
    }

    #[test]
    fn an_append_only_view_reopened_from_its_store_never_reuses_a_row_id() {
        let (catalog, mut m) = view_with(true);
        epoch(&mut m, &catalog, "I T\n+ 1 a\n+ 2 b");
        // A restart: the catalog and the view's writer are made again over the same store.
        let reopened = Arc::new(Catalog::open(Arc::clone(catalog.store()), "dev", Default::default()).unwrap());
        let mut m = Materialize::new(reopened.get("v").unwrap(), Arc::clone(catalog.store()));
        epoch(&mut m, &reopened, "I T\n+ 3 c");
        assert_eq!(rows(&reopened), vec!["+ 1 a", "+ 2 b", "+ 3 c"]);
    }
}
