#!/usr/bin/env bash
# Runs Weir's whole test suite: installs what it needs, then `cargo test`.
# Every test starts its own Weir server on a free loopback port with a temporary data directory;
# the services they read from and write to (an S3-compatible server, a Kafka-compatible broker,
# PostgreSQL, etcd for the cluster) are started here, on 127.0.0.1.
# Arguments go to `cargo test` (e.g. scripts/test.sh --test slt). Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
. scripts/python-env.sh
WEIR_TEST_S3_ENDPOINT=$(scripts/s3-server.sh start)
WEIR_TEST_KAFKA=$(scripts/kafka-server.sh start)
WEIR_TEST_POSTGRES=$(scripts/pg-server.sh start)
WEIR_TEST_ETCD=$(scripts/etcd-server.sh start)
export WEIR_TEST_S3_ENDPOINT WEIR_TEST_KAFKA WEIR_TEST_POSTGRES WEIR_TEST_ETCD
log=$(mktemp)
trap 'rm -f "$log"; scripts/s3-server.sh stop; scripts/kafka-server.sh stop; scripts/pg-server.sh stop; scripts/etcd-server.sh stop' EXIT
status=0
cargo test --locked --no-fail-fast --all-targets "$@" 2>&1 | tee "$log" || status=$?
# Each fuzz target briefly, when their instrumented build is at hand: built cold it takes about
# as long as the rest of a cold run (DataFusion and RocksDB again, with coverage), so a cold
# machine leaves it to scripts/fuzz.sh; tests/fuzz_regressions.rs replays what fuzzing found in
# every run either way.
if [ $# -eq 0 ] && [ -d "${WEIR_FUZZ_TARGET_DIR:-/var/tmp/weir-fuzz-target}/x86_64-unknown-linux-gnu/release/deps" ]; then
  # A finding fails the run; its input is in fuzz/artifacts/<target>/ (ADR 36).
  scripts/fuzz.sh --time "${WEIR_CI_FUZZ_SECONDS:-20}" --seed 1 2>&1 | tee -a "$log" || status=1
else
  [ $# -gt 0 ] || echo "fuzzing: skipped, no instrumented build at hand (scripts/fuzz.sh builds it and runs every target)"
fi
# A short soak (scripts/soak.sh: an hour for docs/benchmarks.md) on the debug build: the
# mixed load, the views equal to their queries after it, the sinks delivered.
if [ $# -eq 0 ]; then
  scripts/soak.sh "${CARGO_TARGET_DIR:-target}/debug/weir" "${WEIR_CI_SOAK_SECONDS:-120}" 2>&1 | tee -a "$log" || status=1
fi
passed=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -oE '[0-9]+ failed;' "$log" | awk '{s += $1} END {print s + 0}')
echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
