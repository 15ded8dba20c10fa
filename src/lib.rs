//! # Weir: a streaming SQL database that speaks the Postgres wire protocol
//!
//! This crate is one server. A statement travels one way through it, and the modules are laid out
//! in that order; each depends only on the ones below it in this list:
//!
//! ```text
//! psql / JDBC / BI tool
//!   -> server/       pgwire session: startup and auth, simple + extended query protocol,
//!                    Arrow -> Postgres encoding, the session's settings and transaction state
//!   -> frontend/     parse (sqlparser, Postgres dialect), then one handler per statement kind;
//!                    DataFusion plans and runs queries and DML (behind `frontend::df_context`)
//!   -> stream_plan/  a view's query as streaming operators: typed specs, every exchange put
//!                    by one distribution pass, instantiated per shard
//!   -> dataflow/     a view's graph of operators in shards, its job, epochs and barriers
//!   -> operators/    one operator per file, over changes (Arrow batches with ops)
//!   -> checkpoint/   snapshots of the store at checkpoint epochs, uploaded to an object store
//!   -> connectors/   sources and sinks
//!   -> exchange/     network exchanges: a plan's exchange between nodes as Arrow Flight
//!                    streams with credit-based backpressure and fenced headers (ADR 39)
//!   -> cluster/      cluster mode's control plane over etcd: membership, election, vnode
//!                    assignment, fencing (issue 46, ADR 38); started by the server
//!   -> catalog/      the durable list of relations, and the DataFusion TableProvider over them
//!   -> state/        keyed state tables (memcomparable keys from arrow-row) over RocksDB
//!   bottom floor:    types, config, error, runtime (where tasks run), status (what the
//!                    running server reports), metrics, fault
//!   beside:          system, bench (`weir bench`), fuzz (the fuzz targets' bodies)
//! ```
//!
//! `python3 ../shared/tools/import-circles.py .` checks that imports point down (ADR 26).
//! Cross-cutting pieces: [`config`] (flags, environment and TOML file), [`error`] (one error type
//! whose kind maps to a SQLSTATE at the wire), [`metrics`] (the Prometheus registry and its
//! `/metrics` endpoint), [`fault`] (crash points for tests).
//!
//! Invariants worth knowing before you change anything:
//! - Nothing lives only in memory: every table row and catalog entry is written to RocksDB (with
//!   its write-ahead log) before the statement that wrote it completes, so `kill -9` loses nothing
//!   that a client was told succeeded.
//! - A user-visible error always carries a SQLSTATE; a failing statement never takes the server
//!   or another session down.

pub mod bench;
pub mod catalog;
pub mod checkpoint;
pub mod cluster;
pub mod config;
pub mod connectors;
pub mod dataflow;
pub mod error;
pub mod exchange;
pub mod fault;
pub mod frontend;
pub mod fuzz;
pub mod metrics;
pub mod operators;
pub mod runtime;
pub mod server;
pub mod state;
pub mod status;
pub mod stream_plan;
pub mod system;
pub mod types;
