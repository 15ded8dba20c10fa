//! Panics Weir catches on purpose: reading Arrow IPC from the store runs under `catch_unwind`
//! (arrow's reader may panic on bytes that are not IPC) and reports a corrupt store. libFuzzer's
//! panic hook aborts at every panic, caught or not; under [`run`] the hook installed here only
//! prints it and lets it unwind. One that Weir catches is then handled as in production; one it
//! does not reaches libfuzzer-sys's own `catch_unwind` around the target, which aborts: still a
//! crash. The decoder targets run under it; `sql` and `wire` do not (there a caught panic is an
//! operator's bug, which Weir only contains).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// Panics not marked contained, since the hook was installed: under the fuzzer each aborts;
/// in the test build ([`panics`]) one in a server's task (which tokio would swallow, dropping a
/// connection) is still seen.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// How many panics outside [`run`] there have been in this process.
pub fn panics() -> usize {
    PANICS.load(Ordering::SeqCst)
}

/// Where contained panics have been seen (each is printed the first time only).
static SEEN: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

thread_local! {
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Wraps the panic hook in place (libFuzzer's, under the fuzzer) once.
pub(super) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let outer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CONTAINED.with(Cell::get) {
                // Once per place: the wire target passes over pgwire's panicking decoders for
                // every input that holds one, which would fill the log.
                let place = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
                if SEEN.lock().map(|mut seen| seen.insert(place)).unwrap_or(false) {
                    eprintln!(
                        "{info} (a panic Weir may catch: a crash only if it is not caught; shown once per place)"
                    );
                }
            } else {
                PANICS.fetch_add(1, Ordering::SeqCst);
                outer(info);
            }
        }));
    });
}

/// Runs `f`, letting its panics unwind (see the module's comment).
pub(super) fn run<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CONTAINED.with(|c| c.set(false));
        }
    }
    install();
    CONTAINED.with(|c| c.set(true));
    let _reset = Reset;
    f()
}
