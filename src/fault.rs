//! Fault injection for crash tests: with `WEIR_FAULT=<point>[@<n>]` in its environment, the
//! server dies the `n`-th time (the first, without `@n`) execution reaches
//! `fault::point("<point>")`, as abruptly as SIGKILL (`abort`: no destructor, flush or shutdown
//! code runs). Without the variable a point costs one load of a parsed-once setting.
//!
//! The points sit where a crash is hardest to get right, so tests can land one exactly there
//! instead of hoping a random SIGKILL does:
//! - `sink.before_deliver`: a sink's outbox group is whole (its checkpoint barrier passed, the
//!   checkpoint complete or not), not yet sent;
//! - `sink.before_commit`: a sink's transaction holds the group's changes and marker, not
//!   yet committed (Kafka: an open transaction the next producer must fence and abort);
//! - `sink.after_commit`: the external system committed, the outbox group is not yet deleted.
//!
//! [`fails`] points do not abort: the `n`-th pass fails as an I/O error there would (a disk
//! that is full), so tests see what the server does about it:
//! - `view.commit_write`: a view's write of an epoch's rows to the store;
//! - `view.state_write`: a view's write of an epoch's operator state, off its thread;
//! - `view.commit`: a view's own work at a commit (after its operators took the epoch), as a
//!   value its late-rows table refuses would fail it.
//! - `store.read_only`: a view's or sink's write to the store, refused as by a file system
//!   turned read-only while the data directory itself takes writes again (a volume remounted
//!   read-write under the server, which a real ext4 refuses after an error).
//!
//! [`delay`] points neither abort nor fail: every pass waits there, so a test can widen a
//! window a race would need:
//! - `view.slow_commit`: each view commit waits half a second before its write (a restart's
//!   replay of the change log reaching the views late);
//! - `checkpoint.slow_upload`: each checkpoint upload waits half a second before its first file
//!   (an object store far away, at a clean stop).
//!
//! Called by the sink runtime, its writers and the view jobs; read by the crash tests
//! (`tests/end_to_end.rs`, `tests/checkpoint.rs`, `tests/restart.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

/// The armed point and after how many passes it fires.
static ARMED: LazyLock<Option<(String, u64)>> = LazyLock::new(|| {
    let spec = std::env::var("WEIR_FAULT").ok().filter(|s| !s.is_empty())?;
    let (name, nth) = match spec.split_once('@') {
        Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1)),
        None => (spec, 1),
    };
    tracing::warn!(point = %name, nth, "fault injection armed: the server will abort there");
    Some((name, nth.max(1)))
});

static PASSES: AtomicU64 = AtomicU64::new(0);

/// Whether this is the armed point's `n`-th pass: the caller then fails as its I/O would.
pub fn fails(name: &str) -> bool {
    let Some((armed, nth)) = ARMED.as_ref() else { return false };
    armed == name && PASSES.fetch_add(1, Ordering::SeqCst) + 1 == *nth
}

/// How long to wait here: half a second on every pass when this point is armed.
pub fn delay(name: &str) -> Option<std::time::Duration> {
    let (armed, _) = ARMED.as_ref()?;
    (armed == name).then_some(std::time::Duration::from_millis(500))
}

/// Dies here if this is the armed point's `n`-th pass.
pub fn point(name: &str) {
    let Some((armed, nth)) = ARMED.as_ref() else { return };
    if armed != name {
        return;
    }
    if PASSES.fetch_add(1, Ordering::SeqCst) + 1 == *nth {
        eprintln!("fault injection: aborting at {name} (pass {nth})");
        std::process::abort();
    }
}
