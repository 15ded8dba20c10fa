#!/usr/bin/env bash
# Memory of reading a whole relation (issue 19; results in docs/benchmarks.md).
#
#   scripts/bench-scan-memory.sh [WEIR_BINARY] [ROWS]
#
# Loads items (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT) with ROWS rows (default 10,000,000,
# a million per INSERT), then samples Weir's resident memory every 50 ms while it
#   1. answers SELECT count(*), sum(v) FROM items (a streamed scan);
#   2. creates a view of one row over it (its backfill streams the table);
#   3. creates a view of half its rows (the backfill commits as it goes);
#   4. with WEIR_BENCH_POSTGRES set (a libpq URL, e.g. from scripts/pg-server.sh start), creates
#      a Postgres sink of that view and waits until the table holds every row (the sink's
#      first group: the view's rows, written to its outbox and delivered part by part).
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
if [ -n "${WEIR_BENCH_POSTGRES:-}" ]; then
    pg=${WEIR_BENCH_POSTGRES%/*}
    psql "$WEIR_BENCH_POSTGRES" -q -c "DROP DATABASE IF EXISTS weir_bench_sink" -c "CREATE DATABASE weir_bench_sink"
    psql "$pg/weir_bench_sink" -q -c "CREATE TABLE evens (k BIGINT PRIMARY KEY, v BIGINT)"
    want=$(psql "${args[@]}" -Atc "SELECT count(*) FROM evens")
    before=$(rss)
    peak=$before
    started=$(date +%s.%N)
    psql "${args[@]}" -q -v ON_ERROR_STOP=1 -c "CREATE SINK evens_out FROM evens WITH (connector = 'postgres', url = '$pg/weir_bench_sink', table.name = 'evens', primary_key = 'k')"
    created=$(echo "$(date +%s.%N) - $started" | bc)
    while [ "$(psql "$pg/weir_bench_sink" -Atc "SELECT count(*) FROM evens")" != "$want" ]; do
        now=$(rss)
        [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.2
    done
    echo "CREATE SINK of the half-rows view: created in $created s, all $want rows in Postgres after $(echo "$(date +%s.%N) - $started" | bc) s, RSS $((before / 1024)) MiB before, peak +$(((peak - before) / 1024)) MiB"
fi
