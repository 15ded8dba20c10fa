//! `EXPLAIN ANALYZE MATERIALIZED VIEW name`: a running view's operators as a tree, each with
//! what it has done since the view's job started (rows in and out, time spent in it over all its
//! shards) and the size of the state it owns, under a line for the view with its epochs and
//! barrier latency (injection to commit). Read while the view runs, from what its graph records
//! in the server's status (`status::OperatorStats`); nothing is stopped or re-run.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

use super::rows;
use crate::catalog::RelationKind;
use crate::error::{Result, SqlState, WeirError};
use crate::frontend::{Frontend, StatementResult};
use crate::state::keys::table_prefix;
use crate::state::store::{ScanControl, StateStore};
use crate::status::OperatorStats;

/// A state table is counted key by key up to this many keys; past them its size is RocksDB's
/// estimate.
const COUNTED_KEYS: u64 = 1_000_000;

pub fn handle(fe: &Frontend, name: &str) -> Result<StatementResult> {
    let unquoted = name.trim_matches('"');
    let relation = fe.catalog().get(unquoted).ok_or_else(|| WeirError::undefined_table(unquoted))?;
    if relation.def.kind != RelationKind::MaterializedView {
        return Err(WeirError::new(SqlState::WRONG_OBJECT_TYPE, format!("\"{unquoted}\" is not a materialized view")));
    }
    let status = fe.catalog().status();
    let operators = status.operators.lock().get(unquoted).cloned().unwrap_or_default();
    let barriers = status.barriers.lock().get(unquoted).copied().unwrap_or_default();
    let mut lines = Vec::new();
    let latency = match barriers.epochs {
        0 => "no epoch committed yet".to_string(),
        n => format!(
            "{n} epochs, barrier latency last {}, mean {}, max {}",
            millis(barriers.last_seconds),
            millis(barriers.total_seconds / n as f64),
            millis(barriers.max_seconds)
        ),
    };
    lines.push(format!("Materialize {unquoted}: {latency}"));
    if let Some(root) = operators.len().checked_sub(1) {
        render(&operators, root, 1, fe.catalog().store().as_ref(), &mut lines)?;
    }
    let schema = Arc::new(Schema::new(vec![Field::new("QUERY PLAN", DataType::Utf8, false)]));
    rows(RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(lines))])?)
}

/// Operator `at` and, below it, its inputs, each line indented by `depth`.
fn render(
    operators: &[Arc<OperatorStats>],
    at: usize,
    depth: usize,
    store: &dyn StateStore,
    lines: &mut Vec<String>,
) -> Result<()> {
    let op = &operators[at];
    let mut figures = format!(
        "rows in {}, out {}, time {}",
        op.rows_in.load(Ordering::Relaxed),
        op.rows_out.load(Ordering::Relaxed),
        millis(op.busy_nanos.load(Ordering::Relaxed) as f64 / 1e9)
    );
    let tables = op.tables.lock().clone();
    if !tables.is_empty() {
        let (mut keys, mut bytes, mut estimated) = (0, 0, false);
        for table in tables {
            let size = table_size(store, table)?;
            keys += size.0;
            bytes += size.1;
            estimated |= size.2;
        }
        let about = if estimated { "about " } else { "" };
        figures.push_str(&format!(", state {about}{keys} keys, {about}{}", bytes_text(bytes)));
    }
    lines.push(format!("{}{}  [{figures}]", "  ".repeat(depth), op.label));
    for &child in &op.children {
        render(operators, child, depth + 1, store, lines)?;
    }
    Ok(())
}

/// A state table's keys and bytes (keys and values), and whether they are estimates: counted up
/// to [`COUNTED_KEYS`], then the store's estimate of the table's bytes.
fn table_size(store: &dyn StateStore, table: u32) -> Result<(u64, u64, bool)> {
    let (mut keys, mut bytes) = (0u64, 0u64);
    store.scan_prefix(&table_prefix(table), &mut |key, value| {
        keys += 1;
        bytes += (key.len() + value.len()) as u64;
        Ok(if keys >= COUNTED_KEYS { ScanControl::Stop } else { ScanControl::Continue })
    })?;
    if keys < COUNTED_KEYS {
        return Ok((keys, bytes, false));
    }
    let estimate = store.approximate_table_bytes(table);
    let estimated_keys = match bytes {
        0 => keys,
        _ => (keys as f64 * estimate.max(bytes) as f64 / bytes as f64) as u64,
    };
    Ok((estimated_keys, estimate.max(bytes), true))
}

fn millis(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1e3)
}

fn bytes_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}
