#!/usr/bin/env bash
# Dashboards' queries next to PostgreSQL (issue 49; results in docs/benchmarks.md).
#
#   scripts/bench-dashboards.sh [WEIR_BINARY] [SECONDS]
#
# What BI tools send, measured in Weir and in PostgreSQL (scripts/pg-server.sh) in the same run:
#  1. key lookups on a 10,000-row table by 16 pgbench clients in each protocol mode
#     (`-M simple`: literals in the text, as Grafana and psycopg2 send; `-M extended`: unnamed
#     statements, as most drivers send; `-M prepared`), SECONDS each (default 15);
#  2. `SELECT count(*)` and a grouped aggregate over a 3,000,000-row relation (in Weir a
#     materialized view, in PostgreSQL a table with the same rows), best of three, one client;
#  3. a Grafana time-series panel's query (`$__timeFilter` over the time column, `GROUP BY`
#     a one-minute bucket) over a 1,000,000-row relation with an index on the time column in
#     both, 4 pgbench clients, SECONDS.
# Needs psql and pgbench (Debian's postgresql-client). WEIR_BINARY defaults to a release build.
# STEPS=lookups runs step 1 only, STEPS=aggregates step 2 only; STEPS=sends counts the
# server's sends per lookup instead (needs strace).
set -euo pipefail
# Both without TLS (the test PostgreSQL has ssl = on; pgbench would take it).
export PGSSLMODE=disable
cd "$(dirname "$0")/.."
weir=${1:-target/release/weir}
seconds=${2:-15}
port=${WEIR_BENCH_PORT:-4581}
dir=$(mktemp -d /tmp/weir-dashboards.XXXXXX)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
pgbench=${PGBENCH:-$bin/pgbench}
scripts/pg-server.sh start >/dev/null
weir_args=(-h 127.0.0.1 -p "$port" -U root dev)
pg_args=(-h 127.0.0.1 -p "${WEIR_PG_PORT:-5433}" -U postgres postgres)

"$weir" serve --listen "127.0.0.1:$port" --data-dir "$dir/data" --metrics-listen off >>"$dir/log" 2>&1 &
pid=$!
until psql "${weir_args[@]}" -Atc "SELECT 1" >/dev/null 2>&1; do sleep 0.2; done
both() { # $@: psql arguments, run against each
    psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 "$@"
    psql "${pg_args[@]}" -q -v ON_ERROR_STOP=1 "$@"
}

echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo); PostgreSQL $("$bin/postgres" --version | awk '{ print $3 }')"
psql "${pg_args[@]}" -q -c "DROP TABLE IF EXISTS accounts, events, readings, metrics" 2>/dev/null
both -c "CREATE TABLE accounts (aid INT PRIMARY KEY, bid INT, abalance INT, filler TEXT)" \
     -c "INSERT INTO accounts SELECT x, x % 10, 0, 'x' FROM generate_series(1, 10000) AS s(x)"

# $1 system, $2 protocol mode, $3 clients, $4 script file; prints transactions per second.
tps() {
    local args=("${weir_args[@]}")
    [ "$1" = postgres ] && args=("${pg_args[@]}")
    local out
    out=$("$pgbench" -n -M "$2" -c "$3" -j "$(($3 < 2 ? 1 : 2))" -T "$seconds" -f "$4" "${args[@]}" 2>&1) ||
        { echo "$out" >&2; return 1; }
    echo "$out" | awk '/^tps/ { printf "%.0f", $3 }'
}
cat >"$dir/lookup.sql" <<'EOF'
\set aid random(1, 10000)
SELECT abalance FROM accounts WHERE aid = :aid;
EOF
# STEPS=sends: how many writes the server makes per lookup in each mode (one client, 2,000
# lookups, `strace -c` on the server; PostgreSQL makes one), then stop.
if [ "${STEPS:-all}" = sends ]; then
    for mode in simple extended prepared; do
        strace -f -c -e trace=sendto,write,writev,sendmsg -p "$pid" -o "$dir/sends.$mode" 2>/dev/null &
        tracer=$!
        sleep 1
        "$pgbench" -n -M "$mode" -c 1 -t 2000 -f "$dir/lookup.sql" "${weir_args[@]}" >/dev/null 2>&1
        kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
        awk -v mode="$mode" '$NF == "sendto" { printf "  %-9s %.2f sendto per lookup\n", mode, $4 / 2000 }' "$dir/sends.$mode"
    done
    exit 0
fi
if [ "${STEPS:-all}" != aggregates ]; then
    echo "key lookups, 16 clients, ${seconds} s each:"
    for mode in simple extended prepared; do
        w=$(tps weir "$mode" 16 "$dir/lookup.sql")
        p=$(tps postgres "$mode" 16 "$dir/lookup.sql")
        printf '  %-9s weir %7d/s  postgres %7d/s  ratio %.2f\n' "$mode" "$w" "$p" "$(echo "$w / $p" | bc -l)"
    done
fi

[ "${STEPS:-all}" = lookups ] && exit 0

# Aggregates over 3 M rows: a view in Weir (its rows as a dashboard reads them), a table in
# PostgreSQL.
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 \
    -c "CREATE TABLE events (id BIGINT PRIMARY KEY, device INT, value DOUBLE PRECISION)" \
    -c "CREATE MATERIALIZED VIEW readings AS SELECT id, device, value FROM events"
psql "${pg_args[@]}" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE readings (id BIGINT PRIMARY KEY, device INT, value DOUBLE PRECISION)"
for from in 1 1000001 2000001; do
    psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 -c \
        "INSERT INTO events SELECT x, x % 1000, x * 0.5 FROM generate_series($from, $((from + 999999))) AS s(x)"
    psql "${pg_args[@]}" -q -v ON_ERROR_STOP=1 -c \
        "INSERT INTO readings SELECT x, x % 1000, x * 0.5 FROM generate_series($from, $((from + 999999))) AS s(x)"
done
psql "${weir_args[@]}" -q -c "FLUSH"
psql "${pg_args[@]}" -q -c "VACUUM ANALYZE readings"
best() { # $1 system, $2 query: the best of three runs' seconds
    local args=("${weir_args[@]}")
    [ "$1" = postgres ] && args=("${pg_args[@]}")
    for _ in 1 2 3; do
        local start
        start=$(date +%s.%N)
        psql "${args[@]}" -Atq -c "$2" >/dev/null
        echo "$(date +%s.%N) - $start" | bc
    done | sort -n | head -1
}
echo "over 3,000,000 rows, best of 3:"
for query in "SELECT count(*) FROM readings" \
    "SELECT device, count(*), sum(value), max(value) FROM readings GROUP BY device ORDER BY device"; do
    w=$(best weir "$query")
    p=$(best postgres "$query")
    printf '  %-90s weir %.3f s  postgres %.3f s  ratio (postgres / weir) %.2f\n' "$query" "$w" "$p" "$(echo "$p / $w" | bc -l)"
done
[ "${STEPS:-all}" = aggregates ] && exit 0

# A Grafana time-series panel over 1 M rows: a metric each second for 1,000,000 seconds.
psql "${weir_args[@]}" -q -v ON_ERROR_STOP=1 \
    -c "CREATE TABLE samples (id BIGINT PRIMARY KEY, at TIMESTAMP, host TEXT, cpu DOUBLE PRECISION)" \
    -c "CREATE MATERIALIZED VIEW metrics AS SELECT id, at, host, cpu FROM samples" \
    -c "INSERT INTO samples SELECT x, TIMESTAMP '2026-01-01 00:00:00' + x * INTERVAL '1 second', 'h' || (x % 8), (x % 100) * 1.0 FROM generate_series(1, 1000000) AS s(x)" \
    -c "FLUSH" -c "CREATE INDEX metrics_at ON metrics (at) INCLUDE (cpu)"
psql "${pg_args[@]}" -q -v ON_ERROR_STOP=1 \
    -c "CREATE TABLE metrics (id BIGINT PRIMARY KEY, at TIMESTAMP, host TEXT, cpu DOUBLE PRECISION)" \
    -c "INSERT INTO metrics SELECT x, TIMESTAMP '2026-01-01 00:00:00' + x * INTERVAL '1 second', 'h' || (x % 8), (x % 100) * 1.0 FROM generate_series(1, 1000000) AS s(x)" \
    -c "CREATE INDEX metrics_at ON metrics (at)" -c "VACUUM ANALYZE metrics"
# What Grafana sends for `SELECT $__timeGroupAlias(at, 1m), avg(cpu) ... WHERE $__timeFilter(at)`
# over a six-hour dashboard range that moves.
cat >"$dir/grafana.sql" <<'EOF'
\set from random(0, 900000)
SELECT floor(extract(epoch from at) / 60) * 60 AS "time", avg(cpu) AS cpu FROM metrics WHERE at BETWEEN TIMESTAMP '2026-01-01 00:00:00' + :from * INTERVAL '1 second' AND TIMESTAMP '2026-01-01 06:00:00' + :from * INTERVAL '1 second' GROUP BY 1 ORDER BY 1;
EOF
echo "Grafana time series (6 h of 1 M rows, 1-minute buckets), 4 clients, ${seconds} s:"
w=$(tps weir simple 4 "$dir/grafana.sql")
p=$(tps postgres simple 4 "$dir/grafana.sql")
printf '  weir %d/s  postgres %d/s  ratio %.2f\n' "$w" "$p" "$(echo "$w / $p" | bc -l)"
psql "${pg_args[@]}" -q -c "DROP TABLE IF EXISTS accounts, readings, metrics"
