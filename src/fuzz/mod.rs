//! Fuzz targets' bodies: one function per cargo-fuzz target of `fuzz/` (libFuzzer), each taking
//! the fuzzer's bytes and feeding them to Weir as an outside party would. A target passes when
//! it returns: a panic anywhere in the process aborts it, and libFuzzer keeps the input.
//!
//! - [`sql`]: the frontend (parse, bind, plan, `CREATE MATERIALIZED VIEW` planning) in process;
//! - [`wire`]: a whole server on loopback, fed raw Postgres wire messages (startup, simple and
//!   extended query, COPY data);
//! - [`records`]: the JSON and CSV decoders of sources; [`avro`]: the Avro decoder;
//!   [`protobuf`]: the Protobuf decoder and the schema registry's framing of its values;
//! - [`values`]: COPY's text, CSV and binary formats into a table of every type (the text and
//!   binary value decoders);
//! - [`stored`]: what Weir reads back from disk: checkpoint manifests, change-log and replay
//!   records, source positions, sink outboxes, state records and Arrow IPC.
//!
//! The same functions replay the inputs under `fuzz/regressions/` in the ordinary test build
//! (`tests/fuzz_regressions.rs`), so a crash once found stays found. `scripts/fuzz.sh` builds the
//! targets, seeds their corpora from `tests/slt/` and runs each for a set time.
//!
//! Targets that need a server keep one per process (a temporary data directory under
//! `$TMPDIR`), so inputs run against state earlier inputs left; each stays bounded (the wire
//! target's role may only read and write one table, which is emptied now and then).

mod contained;
mod decoders;
mod seeds;
mod sql;
mod stored;
mod values;
mod wire;

use std::sync::LazyLock;

pub use contained::panics;
pub use decoders::{avro, protobuf, records};
pub use seeds::{init, seeds};
pub use sql::sql;
pub use stored::stored;
pub use values::values;
pub use wire::{exchange, wire};

/// The runtime every target's async work runs on (two workers: the machine's cores).
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    contained::install();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for fuzzing")
});

/// The columns of table `t`, which the `sql`, `values` and `wire` targets' inputs meet: one of
/// every type users store.
macro_rules! every_type {
    () => {
        "id BIGINT PRIMARY KEY, k INT, s TEXT, n NUMERIC(12,3), f DOUBLE PRECISION, b BOOLEAN, \
         ts TIMESTAMP, tz TIMESTAMPTZ, d DATE, iv INTERVAL, j JSONB, raw BYTEA, arr INT[]"
    };
}
use every_type;

/// Inputs longer than this are passed over: the targets look for wrong handling, not for how
/// long large inputs take (libFuzzer's `-max_len` says the same to the fuzzer).
const MAX_INPUT: usize = 8192;
