//! Streaming operators, one per file, each maintaining its output under retractions: every
//! operator takes [`ChangeBatch`](crate::types::ChangeBatch)es and returns the changes of its
//! own output, so that a view's result always equals its query over the current inputs.
//!
//! - [`operator`]: the [`Operator`](operator::Operator) trait the runtime drives.
//! - [`project`], [`filter`]: stateless, with DataFusion physical expressions.
//! - [`hash_agg`]: grouped aggregates (count, sum, avg, min, max) with retraction.
//! - [`hash_join`]: inner equi-joins with a residual condition.
//! - [`lookup_join`]: `JOIN t FOR SYSTEM_TIME AS OF PROCTIME()`, a table read by key, never followed.
//! - [`union`]: UNION ALL.
//! - [`window_assign`]: rows into `TUMBLE` / `HOP` windows; judges lateness.
//! - [`session_assign`]: rows into `SESSION` windows, re-assigned as sessions grow and merge.
//! - [`no_watermark`]: a window over a column the watermark does not follow.
//! - [`lateness`]: what both assigners do with late rows (count, keep, ledger).
//! - [`top_n`]: `ROW_NUMBER() ... WHERE rn <= N`, each partition's first rows by an order.
//! - [`eowc_buffer`]: `EMIT ON WINDOW CLOSE` for views without a windowed aggregate.
//! - [`materialize`]: a view's rows in a state table, committed per epoch.
//! - [`eval`]: expression evaluation that turns a row's runtime error into NULL and a count.

pub mod eowc_buffer;
pub mod eval;
pub mod filter;
pub mod hash_agg;
pub mod hash_join;
pub mod lateness;
pub mod lookup_join;
pub mod materialize;
pub mod no_watermark;
pub mod operator;
pub mod over_window;
pub mod project;
pub mod session_assign;
pub mod temporal_filter;
pub mod top_n;
pub mod union;
pub mod unnest;
pub mod window_assign;
