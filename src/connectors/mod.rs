//! Connectors: where a source's rows come from. One connector per folder; the runtime that
//! stores what a connector reads is shared ([`source`]).
//!
//! A source is an append-only relation whose rows are produced by its connector instead of by
//! INSERT. Its rows are stored like a table's (so ad-hoc queries read them, and views backfill
//! from them and are rebuilt from them at start), together with the connector's offset, in one
//! atomic write per chunk: after a crash a source resumes exactly after its last stored chunk,
//! nothing lost and nothing doubled. A generator's rows, and an immutable file source's, are
//! not stored but produced again when read ([`replay`]); their chunks' offsets are stored the
//! same way.
//!
//! - [`options`]: the `WITH (key = 'value', ...)` options of `CREATE SOURCE`.
//! - [`source`]: the [`source::SourceReader`] trait and the task that runs a reader.
//! - [`dead_letter`]: records a connector could not decode, kept with the chunk they came in.
//! - [`registry`]: from `connector = '...'` to a reader.
//! - [`replay`]: sources whose connector can produce their rows again (a generator, files
//!   declared immutable) store where each chunk began and ended instead of the rows.
//! - [`nexmark`]: the built-in Nexmark generator (`connector = 'nexmark'`).
//! - [`file`]: CSV, JSON and Parquet files, local or in S3 (`connector = 'file'`).

pub mod dead_letter;
pub mod file;
pub mod nexmark;
pub mod options;
pub mod registry;
pub mod replay;
pub mod source;
