#!/usr/bin/env bash
# Memory of reading a whole relation (issue 19; results in docs/benchmarks.md).
#
#   scripts/bench-scan-memory.sh [WEIR_BINARY] [ROWS]
#
# Loads items (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT) with ROWS rows (default 10,000,000,
# a million per INSERT), then samples Weir's resident memory every 50 ms while it
#   1. answers SELECT count(*), sum(v) FROM items (a streamed scan);
#   2. creates a view of one row over it (its backfill streams the table);
#   3. creates a view of half its rows (the backfill commits as it goes).
# Prints each step's time and peak resident memory above the step's start.
set -euo pipefail
cd "$(dirname "$0")/.."
weir=${1:-target/release/weir}
rows=${2:-10000000}
port=${WEIR_BENCH_PORT:-4581}
dir=$(mktemp -d /tmp/weir-scan-memory.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
args=(-h 127.0.0.1 -p "$port" -U root dev)
"$weir" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --metrics-listen off >>"$dir/log" 2>&1 &
pid=$!
until psql "${args[@]}" -Atc "SELECT 1" >/dev/null 2>&1; do sleep 0.2; done

psql "${args[@]}" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE items (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT)"
start=$(date +%s.%N)
from=1
while [ "$from" -le "$rows" ]; do
    to=$((from + 999999 > rows ? rows : from + 999999))
    psql "${args[@]}" -q -v ON_ERROR_STOP=1 -c \
        "INSERT INTO items SELECT x, x % 1000, x FROM generate_series($from, $to) AS s(x)"
    from=$((to + 1))
done
echo "loaded $rows rows in $(echo "$(date +%s.%N) - $start" | bc) s"

rss() { awk '/^VmRSS/ { print $2 }' "/proc/$pid/status"; }
# Runs $2 (SQL) and prints its time, answer and peak RSS above the start; $1 names the step.
measure() {
    local before peak now started
    before=$(rss)
    peak=$before
    started=$(date +%s.%N)
    psql "${args[@]}" -Atc "$2" >"$dir/out" 2>&1 &
    local client=$!
    while kill -0 "$client" 2>/dev/null; do
        now=$(rss)
        [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.05
    done
    wait "$client"
    echo "$1: $(echo "$(date +%s.%N) - $started" | bc) s, RSS $((before / 1024)) MiB before, peak +$(((peak - before) / 1024)) MiB ($(tr '\n' ' ' <"$dir/out"))"
}
measure "SELECT count(*), sum(v)" "SELECT count(*), sum(v) FROM items"
measure "CREATE view of one row" "CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(v) AS s FROM items"
measure "CREATE view of half the rows" "CREATE MATERIALIZED VIEW evens AS SELECT k, v FROM items WHERE k % 2 = 0"
psql "${args[@]}" -Atc "SELECT n, s FROM total" -c "SELECT count(*) FROM evens"
