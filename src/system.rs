//! Runtime facts users can query as relations in the `weir_catalog` schema.
//!
//! - `weir_catalog.view_errors`: runtime errors inside materialized views (division by zero,
//!   bad casts, overflows), by view and message, with how often and when last. The failing rows
//!   got NULL for the failing expression; this table says so. Kept in memory: it describes the
//!   running server (and `weir_view_errors_total` counts the same in the metrics).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, StringArray, TimestampMicrosecondArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::TableType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::Mutex;

pub const SCHEMA: &str = "weir_catalog";

struct ErrorEntry {
    count: u64,
    last_micros: i64,
}

static VIEW_ERRORS: LazyLock<Mutex<BTreeMap<(String, String), ErrorEntry>>> = LazyLock::new(Default::default);

/// Records `count` failures of `message` in `view`.
pub fn record_view_error(view: &str, message: &str, count: u64) {
    let now = chrono::Utc::now().timestamp_micros();
    let mut errors = VIEW_ERRORS.lock();
    let entry =
        errors.entry((view.to_string(), message.to_string())).or_insert(ErrorEntry { count: 0, last_micros: now });
    entry.count += count;
    entry.last_micros = now;
}

/// Forgets the errors of a dropped view.
pub fn forget_view(view: &str) {
    VIEW_ERRORS.lock().retain(|(v, _), _| v != view);
}

fn view_errors_batch() -> DfResult<RecordBatch> {
    let errors = VIEW_ERRORS.lock();
    let schema = view_errors_schema();
    let views: StringArray = errors.keys().map(|(v, _)| Some(v.as_str())).collect();
    let messages: StringArray = errors.keys().map(|(_, m)| Some(m.as_str())).collect();
    let counts: UInt64Array = errors.values().map(|e| Some(e.count)).collect();
    let last: TimestampMicrosecondArray = errors.values().map(|e| Some(e.last_micros)).collect();
    Ok(RecordBatch::try_new(
        schema,
        vec![Arc::new(views), Arc::new(messages), Arc::new(counts), Arc::new(last.with_timezone("+00:00"))],
    )?)
}

fn view_errors_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("view_name", DataType::Utf8, false),
        Field::new("message", DataType::Utf8, false),
        Field::new("error_count", DataType::UInt64, false),
        Field::new("last_seen", DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())), false),
    ]))
}

/// The `weir_catalog` schema.
#[derive(Debug, Default)]
pub struct SystemSchema;

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        vec!["view_errors".into()]
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok((name == "view_errors").then(|| Arc::new(ViewErrorsTable) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "view_errors"
    }
}

#[derive(Debug)]
struct ViewErrorsTable;

#[async_trait]
impl TableProvider for ViewErrorsTable {
    fn schema(&self) -> SchemaRef {
        view_errors_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(MemorySourceConfig::try_new_exec(&[vec![view_errors_batch()?]], self.schema(), projection.cloned())?)
    }
}
