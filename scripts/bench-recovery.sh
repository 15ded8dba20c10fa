#!/usr/bin/env bash
# Recovery time after kill -9 (issue 15; results in docs/benchmarks.md).
#
#   scripts/bench-recovery.sh [WEIR_BINARY] [EVENTS]
#
# Scenarios, each on a fresh data directory:
#   keys: a table of 1,000,000 keys and a view with one group per key, then a few more writes;
#   q5:   Nexmark q5 over EVENTS bid events (default 10,000,000) from the generator, killed
#         right after a FLUSH (the final checkpoint may still be under way: the restart reads
#         again what came after the one before), and killed after the final checkpoint;
#   q5 over a source still running at the kill (below).
# For each: the view's answer is read, the server is killed with SIGKILL, started again, and the
# time from starting it to the view giving the same answer is printed, with the time until the
# server first answers, the server's own figure (weir_recovery_seconds) and the query's own time
# after it (a full scan of a large view is part of the first figure). Needs psql and curl.
# WEIR_BINARY defaults to a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
weir=${1:-target/release/weir}
events=${2:-10000000}
port=${WEIR_BENCH_PORT:-4577}
metrics_port=$((port + 1))
dir=$(mktemp -d /tmp/weir-recovery.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

sql() { psql -h 127.0.0.1 -p "$port" -U root -d dev -At -v ON_ERROR_STOP=1 -c "$1"; }
now() { date +%s.%N; }

start() {
    "$weir" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" \
        --metrics-listen "127.0.0.1:$metrics_port" >>"$dir/log" 2>&1 &
    pid=$!
}

# Waits until `query` answers `expected`; prints the seconds since `since`.
answers_after() {
    local query=$1 expected=$2 since=$3 got
    while true; do
        got=$(sql "$query" 2>/dev/null || true)
        if [ "$got" = "$expected" ]; then
            echo "$(now) - $since" | bc
            return
        fi
        sleep 0.01
    done
}

metric() { curl -s "127.0.0.1:$metrics_port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

# A checkpoint whose snapshot was taken after now is complete (with the sources finished and
# a FLUSH done, it holds every row).
wait_for_a_checkpoint_after_now() {
    local since
    since=$(sql "SELECT now()")
    until [ "$(sql "SELECT count(*) FROM weir_catalog.checkpoints
                    WHERE status = 'complete' AND started_at > '$since'")" != 0 ]; do sleep 0.05; done
}

# Kills the server, starts it again, and reports how long `query` took to answer as before.
# With KILL_AFTER_CHECKPOINT=1 the kill waits for a checkpoint after the FLUSH (the restart
# then only restores); else it comes right after the FLUSH, when the final checkpoint may
# not be complete yet, and the restart also reads again the input after the one before.
kill_and_time() {
    local name=$1 query=$2 expected
    expected=$(sql "FLUSH; $query" | tail -1)
    if [ "${KILL_AFTER_CHECKPOINT:-0}" = 1 ]; then wait_for_a_checkpoint_after_now; fi
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    local since
    since=$(now)
    start
    local ready seconds
    ready=$(answers_after "SELECT 1" 1 "$since")
    seconds=$(answers_after "$query" "$expected" "$since")
    # The query's own time, which `seconds` includes (a full scan of a large view), once more.
    local t0 query_alone
    t0=$(now)
    sql "$query" >/dev/null
    query_alone=$(echo "$(now) - $t0" | bc)
    echo "$name: the view answers as before $seconds s after the restart began (server answering after $ready s, store restored in $(metric weir_recovery_seconds) s, the query alone takes $query_alone s); answer $expected"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir/data"
}

start
answers_after "SELECT 1" 1 "$(now)" >/dev/null
sql "CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT)" >/dev/null
sql "INSERT INTO t SELECT i, i % 1000 FROM generate_series(1, 1000000) AS i" >/dev/null
sql "CREATE MATERIALIZED VIEW per_k AS SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k" >/dev/null
# Writes after the last checkpoint, for the restart to replay.
sql "UPDATE t SET v = v + 1 WHERE k <= 1000; DELETE FROM t WHERE k > 999000" >/dev/null
kill_and_time "keys (1,000,000 groups)" "SELECT count(*), sum(s) FROM per_k"

# q5 over a finished source, killed twice: right after a FLUSH, then (on a fresh directory)
# once a checkpoint after it is complete.
for after_checkpoint in 0 1; do
    start
    answers_after "SELECT 1" 1 "$(now)" >/dev/null
    sql "CREATE SOURCE bid (p_time AS PROCTIME(), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
         WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '$events')" >/dev/null
    sql "$(grep -v '^--' sql/nexmark/q5.sql)" >/dev/null
    bids=$((events / 50 * 46))
    while [ "$(metric 'weir_source_rows_total{source="bid"}')" != "$bids" ]; do sleep 0.5; done
    when=$([ $after_checkpoint = 1 ] && echo "after its final checkpoint" || echo "right after a FLUSH")
    KILL_AFTER_CHECKPOINT=$after_checkpoint kill_and_time "q5 ($events events, killed $when)" \
        "SELECT count(*), sum(num), max(num) FROM q5"
done

# A source still running when the server is killed (WEIR_RECOVERY_RATE events per second of
# wall time, default 200,000: below what q5 keeps up with on 2 cores): the time from starting
# the killed server again until its view has caught up with where the source was at the kill
# (the source's position at least the one read just before the kill, and a FLUSH done).
rate=${WEIR_RECOVERY_RATE:-200000}
start
answers_after "SELECT 1" 1 "$(now)" >/dev/null
sql "CREATE SOURCE bid (p_time AS PROCTIME(), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
     WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.events.per.second = '$rate',
           nexmark.max.chunk.size = '10000')" >/dev/null
sql "$(grep -v '^--' sql/nexmark/q5.sql)" >/dev/null
sleep "$(echo "5 + $RANDOM % 1000 / 1000" | bc -l)"
position() { sql "SELECT records_read FROM weir_catalog.sources WHERE source_name = 'bid'" 2>/dev/null || true; }
at_kill=$(position)
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
since=$(now)
start
while true; do
    got=$(position)
    if [ -n "$got" ] && [ "$got" -ge "$at_kill" ] && sql "FLUSH" >/dev/null 2>&1; then break; fi
    sleep 0.01
done
echo "q5 over a running source ($rate events/s): caught up with the kill's position ($at_kill records) $(echo "$(now) - $since" | bc) s after the restart began (store restored in $(metric weir_recovery_seconds) s)"
kill "$pid"
wait "$pid" 2>/dev/null || true
