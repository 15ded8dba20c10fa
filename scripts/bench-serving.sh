#!/usr/bin/env bash
# Serving reads next to PostgreSQL (issue 19; results in docs/benchmarks.md).
#
#   scripts/bench-serving.sh [WEIR_BINARY] [ROWS] [SECONDS]
#
# Loads the same table, items (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT), of ROWS rows (default
# 10,000,000) into Weir and into PostgreSQL (scripts/pg-server.sh), and in Weir a view of
# ROWS/10 groups over it. Then runs the pgbench scripts of sql/serving/ against both, SECONDS
# each (default 20), prepared statements (-M prepared), 1 client and 16: point lookups by key,
# short key ranges, updates by key, lookups of a group's rows through the secondary index
# items_g (g) INCLUDE (v), made in both after loading, lookups of the view's groups (Weir
# only), and lookups while
# a second pgbench updates the table at a fixed rate (the view kept up to date meanwhile).
# Prints throughput and latency percentiles from pgbench's per-transaction logs. Needs psql and
# pgbench (Debian's postgresql-client). WEIR_BINARY defaults to a release build.
#
# Environment: STEPS=stream runs only the last step (a stream beside readers), without
# PostgreSQL; WEIR_SERVING_NICE sets Weir's `[serving] nice` (default: Weir's own default);
# READER_NICE runs the stream step's readers under `nice -n` (default 0), standing for clients
# on other machines, whose CPU is not the server's.
set -euo pipefail
cd "$(dirname "$0")/.."
weir=${1:-target/release/weir}
rows=${2:-10000000}
seconds=${3:-20}
groups=$((rows / 10))
port=${WEIR_BENCH_PORT:-4579}
dir=$(mktemp -d /tmp/weir-serving.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
pgbench=${PGBENCH:-$bin/pgbench}

steps=${STEPS:-all}
[ "$steps" = all ] && scripts/pg-server.sh start >/dev/null
weir_args=(-h 127.0.0.1 -p "$port" -U root dev)
pg_args=(-h 127.0.0.1 -p "${WEIR_PG_PORT:-5433}" -U postgres postgres)

config=()
if [ -n "${WEIR_SERVING_NICE:-}" ]; then
    printf '[serving]\nnice = %s\n' "$WEIR_SERVING_NICE" >"$dir/weir.toml"
    config=(--config "$dir/weir.toml")
fi
"$weir" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --metrics-listen off "${config[@]}" >>"$dir/log" 2>&1 &
pid=$!
until psql "${weir_args[@]}" -Atc "SELECT 1" >/dev/null 2>&1; do sleep 0.2; done

load="CREATE TABLE items (k BIGINT PRIMARY KEY, g BIGINT, v BIGINT);"
fill() { # $1: psql connection args as a string; inserts rows in batches of a million
    local from=1
    while [ "$from" -le "$rows" ]; do
        local to=$((from + 999999 > rows ? rows : from + 999999))
        psql $1 -q -v ON_ERROR_STOP=1 -c \
            "INSERT INTO items SELECT x, x % $groups, x FROM generate_series($from, $to) AS s(x)"
        from=$((to + 1))
    done
}
echo "loading $rows rows into each"
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 -c "$load"
start=$(date +%s.%N)
fill "${weir_args[*]}"
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 -c \
    "CREATE MATERIALIZED VIEW per_group AS SELECT g, count(*) AS n, sum(v) AS s FROM items GROUP BY g"
echo "weir: loaded and view built in $(echo "$(date +%s.%N) - $start" | bc) s"
index="CREATE INDEX items_g ON items (g) INCLUDE (v)"
if [ "$steps" = all ]; then
start=$(date +%s.%N)
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 -c "$index"
echo "weir: index built in $(echo "$(date +%s.%N) - $start" | bc) s"
psql "${pg_args[@]}" -q -c "DROP TABLE IF EXISTS items" -c "$load"
fill "${pg_args[*]}"
start=$(date +%s.%N)
psql "${pg_args[@]}" -q -v ON_ERROR_STOP=1 -c "$index"
echo "postgres: index built in $(echo "$(date +%s.%N) - $start" | bc) s"
psql "${pg_args[@]}" -q -c "VACUUM ANALYZE items"

# $1 system, $2 script, $3 clients, extra pgbench args after; prints tps and latency percentiles.
run() {
    local system=$1 script=$2 clients=$3
    shift 3
    local args=("${weir_args[@]}")
    [ "$system" = postgres ] && args=("${pg_args[@]}")
    rm -f "$dir"/pgbench_log.*
    local out
    out=$(cd "$dir" && "$pgbench" -n -M prepared -c "$clients" -j "$((clients < 2 ? 1 : 2))" -T "$seconds" \
        -D rows="$rows" -D groups="$groups" -f "$OLDPWD/sql/serving/$script" -l "$@" "${args[@]}" 2>&1) ||
        { echo "$out"; return 1; }
    local tps
    tps=$(echo "$out" | awk '/^tps/ { printf "%.0f", $3 }')
    # Column 3 of pgbench's log: the transaction's latency in microseconds.
    cat "$dir"/pgbench_log.* | awk '{ print $3 }' | sort -n | awk -v sys="$system" -v s="$script" -v c="$clients" -v tps="$tps" '
        { l[NR] = $1 }
        END { printf "%-8s %-16s clients %2d: %7d/s  p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms\n",
              sys, s, c, tps, l[int(NR * 0.5)] / 1000, l[int(NR * 0.99)] / 1000, l[int(NR * 0.999)] / 1000 }'
}

# Memory of a full scan: resident memory sampled while SELECT count(*) reads every row.
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$pid/status"; }
before=$(rss)
psql "${weir_args[@]}" -Atc "SELECT count(*) FROM items" >"$dir/count.out" &
counter=$!
peak=$before
started=$(date +%s.%N)
while kill -0 "$counter" 2>/dev/null; do
    now_rss=$(rss)
    [ "$now_rss" -gt "$peak" ] && peak=$now_rss
    sleep 0.05
done
echo "weir: SELECT count(*) = $(cat "$dir/count.out") in $(echo "$(date +%s.%N) - $started" | bc) s; RSS $((before / 1024)) MiB before, peak +$(((peak - before) / 1024)) MiB"

for script in lookup.sql index_lookup.sql range.sql update.sql; do
    for clients in 1 16; do
        run weir "$script" "$clients"
        run postgres "$script" "$clients"
    done
done
for clients in 1 16; do run weir view_lookup.sql "$clients"; done
# The same lookups through an index on the view's group column: one seek instead of one per
# vnode (the view's own rows are spread by a hash of the whole row).
start=$(date +%s.%N)
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 -c "CREATE INDEX per_group_g ON per_group (g)"
echo "weir: view index built in $(echo "$(date +%s.%N) - $start" | bc) s; view_lookup.sql through it:"
for clients in 1 16; do run weir view_lookup.sql "$clients"; done

# Lookups while a writer updates 1,000 keys a second (each change flows into the view).
echo "with a writer updating 1,000 keys/s:"
(cd "$dir" && "$pgbench" -n -M prepared -c 1 -T "$seconds" -R 1000 -D rows="$rows" \
    -f "$OLDPWD/sql/serving/update.sql" "${weir_args[@]}" >"$dir/writer.out" 2>&1) &
writer=$!
run weir lookup.sql 16
run weir view_lookup.sql 16
wait "$writer"
awk '/^tps/ { printf "writer: %.0f updates/s\n", $3 }' "$dir/writer.out"
echo "view: $(psql "${weir_args[@]}" -Atc "SELECT count(*), sum(n) FROM per_group")  (groups, rows)"
fi

# A stream beside the readers: Nexmark bids, unthrottled, into a view of counts per auction.
# Bids the view has counted per second, alone and while 16 clients look keys up.
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 \
    -c "CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'bid')" \
    -c "CREATE MATERIALIZED VIEW bids_per_auction AS SELECT auction, count(*) AS n FROM bid GROUP BY auction"
counted() { psql "${weir_args[@]}" -Atc "SELECT coalesce(sum(n), 0) FROM bids_per_auction"; }
stream_rate() { # $1: seconds; prints bids counted per second over them
    local first last
    first=$(counted)
    sleep "$1"
    last=$(counted)
    echo $(((last - first) / $1))
}
sleep 3
alone=$(stream_rate "$seconds")
(cd "$dir" && nice -n "${READER_NICE:-0}" "$pgbench" -n -M prepared -c 16 -j 2 -T "$((seconds + 2))" -D rows="$rows" \
    -f "$OLDPWD/sql/serving/lookup.sql" "${weir_args[@]}" >"$dir/readers.out" 2>&1) &
readers=$!
sleep 1
beside=$(stream_rate "$seconds")
wait "$readers"
echo "stream: $alone bids/s alone, $beside bids/s beside 16 readers ($(awk '/^tps/ { printf "%.0f", $3 }' "$dir/readers.out") lookups/s)"
