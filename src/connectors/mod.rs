//! Connectors: where a source's rows come from. One connector per folder; the runtime that
//! stores what a connector reads is shared ([`source`]).
//!
//! A source is an append-only relation whose rows are produced by its connector instead of by
//! INSERT. Its rows are stored like a table's (so ad-hoc queries read them, and new views
//! backfill from them), together with the connector's position, in one atomic write per chunk
//! (with the chunk's change-log entry): after a crash a source resumes from the checkpoint's
//! position, nothing lost and nothing doubled. A generator's rows, an immutable file source's
//! and a Kafka topic's are not stored but read again when needed ([`replay`]); their chunks'
//! positions are stored the same way.
//!
//! - [`options`]: the `WITH (key = 'value', ...)` options of `CREATE SOURCE`.
//! - [`source`]: the [`source::SourceReader`] trait and the task that runs a reader.
//! - [`sink`]: the [`sink::SinkWriter`] trait and the exactly-once delivery of a view's
//!   changes, one outbox group per checkpoint interval.
//! - [`dead_letter`]: records a connector could not decode, kept with the chunk they came in.
//! - [`registry`]: from `connector = '...'` to a reader.
//! - [`replay`]: sources whose connector can produce their rows again (a generator, files
//!   declared immutable) store where each chunk began and ended instead of the rows.
//! - [`nexmark`]: the built-in Nexmark generator (`connector = 'nexmark'`).
//! - [`file`]: CSV, JSON and Parquet files, local or in S3 (`connector = 'file'`).
//! - [`kafka`]: every partition of a Kafka topic (`connector = 'kafka'`).
//! - [`records`]: CSV and JSON records decoded into rows, bad ones into dead letters;
//!   [`flat_json`]: its one-pass decoder of flat JSON objects.
//! - [`value_decoder`]: values in a binary encoding with a schema (Avro, Protobuf) decoded into
//!   rows, through one trait the Kafka source reads with; [`encoding`]: which decoder an
//!   `ENCODE` names.
//! - [`avro`]: Avro values (Confluent's schema-registry framing, or one fixed schema) decoded
//!   into rows and rows encoded as Avro.
//! - [`protobuf`]: Protobuf messages (Confluent's schema-registry framing, or a descriptor
//!   file) decoded into rows.
//! - [`schema_registry`]: the schema registry's client.
//! - [`io_runtime`]: the runtime connectors' async I/O (object stores, HTTP) waits on.
//! - [`postgres`]: a PostgreSQL table as a sink (`connector = 'jdbc'`).

pub mod avro;
pub mod encoding;
pub mod file;
pub mod flat_json;
pub mod io_runtime;
pub mod kafka;
pub mod nexmark;
pub mod postgres;
pub mod protobuf;
pub mod records;
pub mod registry;
pub mod replay;
pub mod schema_registry;
pub mod sink;
pub mod source;
pub mod value_decoder;
