#!/usr/bin/env bash
# Builds Weir's fuzz targets (fuzz/: cargo-fuzz, libFuzzer, no sanitizer, on the stable
# toolchain) and runs each for a set time, from a corpus seeded by fuzz/seeds.py (the
# statements of tests/slt/, hand-made records) and the targets' own encodings.
#
#   scripts/fuzz.sh [--time SECONDS] [--seed N] [TARGET...]   default: 60 s each, every target
#
# --seed fixes libFuzzer's random seed (CI uses 1: the same binary and seeds then try the same
# inputs, so a run does not fail one time in ten on a finding the next run misses).
#
# Corpora grow in fuzz/corpus/<target>/ and are kept between runs. A crash stops its target and
# is left in fuzz/artifacts/<target>/ (reproduce: cd fuzz && cargo fuzz run -s none TARGET FILE);
# with its fix it goes to fuzz/regressions/<target>/, which tests/fuzz_regressions.rs replays.
# Ends with one line per target: seconds run, executions, corpus size, crash or not.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
seed=()
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) seconds="$2"; shift 2 ;;
    --seed) seed=("-seed=$2"); shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(sql wire records avro protobuf values stored)
if ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --locked --version 0.13.1
fi
# Instrumented builds never share the test build's target directory (other compiler flags).
export CARGO_TARGET_DIR="${WEIR_FUZZ_TARGET_DIR:-/var/tmp/weir-fuzz-target}"
python3 fuzz/seeds.py
(cd fuzz && cargo fuzz build -s none --release)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
summary=()
status=0
for target in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  log="$scratch/$target.log"
  result=ok
  # TMPDIR: the in-process servers' data directories, removed with the scratch directory.
  (cd fuzz && TMPDIR="$scratch" WEIR_FUZZ_SEEDS="corpus/$target" cargo fuzz run -s none --release "$target" \
      "corpus/$target" -- -max_total_time="$seconds" -max_len=8192 -timeout=60 -rss_limit_mb=6144 \
      -print_final_stats=1 "${seed[@]}") >"$log" 2>&1 || { result=CRASH; status=1; }
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  corpus=$(find "fuzz/corpus/$target" -type f | wc -l)
  if [ "$result" = CRASH ]; then
    grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -5 || true
    cp "$log" "fuzz/artifacts/$target/last-run.log"
  fi
  summary+=("$(printf '%-8s %5ss %9s executions %6s inputs in corpus  %s' "$target" "$seconds" "$execs" "$corpus" "$result")")
done
printf '%s\n' "${summary[@]}"
exit "$status"
