#!/usr/bin/env bash
# A long run under a mixed load, watching that the server's resources level off (issue 50;
# figures and a plot in docs/benchmarks.md, "Soak").
#
#   scripts/soak.sh [WEIR_BINARY] [SECONDS] [OUT_DIR]
#
# For SECONDS (default 3600) one Weir server, checkpointing every second to S3
# (scripts/s3-server.sh), carries:
#  - sources at a steady rate: Nexmark bids generated at 2,000 a second, and a Kafka topic
#    (scripts/kafka-server.sh) that a producer fills with 500 orders a second;
#  - views of every kind whose state is bounded: a grouped aggregate over a bounded key, DISTINCT,
#    a top-N, an aggregate with a state TTL, a lookup join of the orders with a table, a
#    filter over that table, an EMIT ON WINDOW CLOSE window aggregate, a temporal filter;
#  - sinks: the window aggregate to Kafka, the join's aggregate to PostgreSQL (scripts/pg-server.sh);
#  - 16 pgbench clients, rate-limited together to 200 transactions a second, half updating
#    accounts by key, half reading views and keys.
# Every 10 s it samples the server's resident memory, open files, threads and data directory
# size into OUT_DIR/samples.csv (default: a new directory under /tmp). At the end it stops the
# load, lets the views catch up and checks that each view whose query has a batch answer equals
# it, that the sinks delivered, that pgbench saw no errors and the server is still up; it
# prints each resource's first-half and last-quarter medians (a plateau: the last quarter no
# higher than the first half, give or take). Exits non-zero if a check fails.
# `scripts/soak-plot.py OUT_DIR/samples.csv FILE.svg` draws the samples.
# Needs psql and pgbench (Debian's postgresql-client) and the test Python environment
# (scripts/install-deps.sh test). CI runs it for 120 s on the debug build (scripts/test.sh).
set -euo pipefail
export PGSSLMODE=disable
cd "$(dirname "$0")/.."
weir=${1:-target/release/weir}
seconds=${2:-3600}
out=${3:-$(mktemp -d /tmp/weir-soak.XXXXXX)}
mkdir -p "$out"
port=${WEIR_SOAK_PORT:-4591}
metrics_port=$((port + 1))
. scripts/python-env.sh
py=$test_python
s3=$(scripts/s3-server.sh start)
kafka=$(scripts/kafka-server.sh start)
pg=$(scripts/pg-server.sh start)
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
pgbench=${PGBENCH:-$bin/pgbench}
run_id=$(date +%s)-$$
topic_orders=soak_orders_$run_id
topic_windows=soak_windows_$run_id
bucket=weirsoak
pid="" producer="" bench=""
cleanup() {
    for p in $bench $producer; do kill "$p" 2>/dev/null || true; done
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    # What the data directory held at the end, by part, before it goes.
    [ -d "$out/data" ] && { du -sk "$out/data"/* "$out/data"/*/* 2>/dev/null | sort -rn | head -30 >"$out/data-dir.txt" || true; }
    rm -rf "$out/data"
}
trap cleanup EXIT
weir_args=(-h 127.0.0.1 -p "$port" -U root dev)
sql() { psql "${weir_args[@]}" -q -At -v ON_ERROR_STOP=1 "$@"; }
fail() { echo "soak: FAILED: $*" >&2; exit 1; }

# The S3 bucket, the Kafka topics and the PostgreSQL sink table.
curl -sf -X PUT "$s3/$bucket" >/dev/null || true
"$py" - "$kafka" "$topic_orders" "$topic_windows" <<'EOF'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
for topic, future in admin.create_topics([NewTopic(t, 2, 1) for t in sys.argv[2:]]).items():
    future.result()
EOF
pg_table=soak_branches_${run_id//-/_}
psql "$pg" -q -v ON_ERROR_STOP=1 -c "CREATE TABLE $pg_table (bid INT PRIMARY KEY, orders BIGINT, amount BIGINT)"

AWS_ENDPOINT=$s3 AWS_ACCESS_KEY_ID=weir AWS_SECRET_ACCESS_KEY=weir AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true \
    "$weir" serve --listen "127.0.0.1:$port" --data-dir "$out/data" --metrics-listen "127.0.0.1:$metrics_port" \
    --checkpoint-url "s3://$bucket/soak-$run_id" --checkpoint-interval 1s >"$out/server.log" 2>&1 &
pid=$!
until sql -c "SELECT 1" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || fail "the server did not start (see $out/server.log)"
    sleep 0.2
done

# Orders at a steady rate: customers 1..10000, amounts 1..100.
"$py" - "$kafka" "$topic_orders" <<'EOF' >"$out/producer.log" 2>&1 &
import json, random, sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "linger.ms": 20})
rng, n, start = random.Random(7), 0, time.monotonic()
while True:
    n += 1
    producer.produce(sys.argv[2], json.dumps({"id": n, "customer": rng.randint(1, 10000), "amount": rng.randint(1, 100)}))
    if n % 50 == 0:
        producer.poll(0)
        time.sleep(max(0.0, start + n / 500 - time.monotonic()))
EOF
producer=$!

# The generator ends 15 s before the load does, so that the views over it can be compared with
# their queries at the end.
events=$((2000 * (seconds > 30 ? seconds - 15 : 15)))
sql <<EOF
CREATE TABLE accounts (aid INT PRIMARY KEY, bid INT, abalance INT);
INSERT INTO accounts SELECT x, x % 10, 0 FROM generate_series(1, 10000) AS s(x);
CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND) WITH (connector = 'nexmark',
  nexmark.table.type = 'bid', nexmark.events.per.second = '2000', nexmark.event.rate = '2000',
  nexmark.event.num = '$events');
CREATE SOURCE orders (id BIGINT, customer INT, amount INT) WITH (connector = 'kafka', topic = '$topic_orders',
  properties.bootstrap.server = '$kafka', scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON;
CREATE MATERIALIZED VIEW per_bucket AS
  SELECT auction % 1000 AS bucket, count(*) AS bids, sum(price) AS total FROM bids GROUP BY auction % 1000;
CREATE MATERIALIZED VIEW bidder_buckets AS SELECT DISTINCT bidder % 500 AS b FROM bids;
CREATE MATERIALIZED VIEW top_bids AS
  SELECT auction, bidder, price, date_time FROM bids ORDER BY price DESC, date_time, auction, bidder LIMIT 10;
CREATE MATERIALIZED VIEW busy_bidders WITH (state_ttl = '1 minute') AS
  SELECT bidder, count(*) AS bids FROM bids GROUP BY bidder;
CREATE MATERIALIZED VIEW recent_bids AS
  SELECT auction, price, date_time FROM bids WHERE date_time > now() - INTERVAL '10' SECOND;
CREATE MATERIALIZED VIEW per_branch AS
  SELECT a.bid, count(*) AS orders, sum(o.amount) AS amount
  FROM orders AS o JOIN accounts FOR SYSTEM_TIME AS OF PROCTIME() AS a ON o.customer = a.aid GROUP BY a.bid;
CREATE MATERIALIZED VIEW rich AS SELECT aid, abalance FROM accounts WHERE abalance > 20;
CREATE SINK windows_out AS
  SELECT window_start, auction % 100 AS bucket, count(*) AS bids, max(price) AS top
  FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND) GROUP BY window_start, auction % 100 EMIT ON WINDOW CLOSE
  WITH (connector = 'kafka', topic = '$topic_windows', properties.bootstrap.server = '$kafka',
        primary_key = 'window_start,bucket') FORMAT UPSERT ENCODE JSON;
CREATE SINK branches_out FROM per_branch WITH (connector = 'postgres', url = '$pg', table.name = '$pg_table',
  primary_key = 'bid');
EOF

cat >"$out/write.sql" <<'EOF'
\set aid random(1, 10000)
\set delta random(-5, 10)
UPDATE accounts SET abalance = abalance + :delta WHERE aid = :aid;
EOF
cat >"$out/read.sql" <<'EOF'
\set aid random(1, 10000)
\set b random(0, 9)
SELECT abalance FROM accounts WHERE aid = :aid;
SELECT orders, amount FROM per_branch WHERE bid = :b;
SELECT count(*) FROM top_bids;
SELECT bids FROM per_bucket WHERE bucket = :aid % 1000;
EOF
"$pgbench" -n -M extended -c 16 -j 2 -R 200 -T "$seconds" -P 60 -f "$out/write.sql@1" -f "$out/read.sql@1" \
    "${weir_args[@]}" >"$out/pgbench.log" 2>&1 &
bench=$!

echo "seconds,rss_kib,open_files,threads,data_dir_bytes,cpu_seconds" >"$out/samples.csv"
start=$(date +%s)
while kill -0 "$bench" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "the server exited (see $out/server.log)"
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
    threads=$(awk '/^Threads/ { print $2 }' "/proc/$pid/status")
    files=$(ls "/proc/$pid/fd" | wc -l)
    # du says the total also when a file vanished under it (and then fails).
    bytes=$({ du -sb "$out/data" 2>/dev/null || true; } | cut -f1)
    # The server's CPU time so far (user + system, in clock ticks: /proc/PID/stat fields 14, 15).
    ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    now=$(($(date +%s) - start))
    echo "$now,$rss,$files,$threads,$bytes,$((ticks / $(getconf CLK_TCK)))" >>"$out/samples.csv"
    # Every minute, where the memory and the bytes are: the server's metrics (memory by part,
    # state by view) and the data directory's largest files.
    if [ $((now / 60)) != "${last_minute:-}" ]; then
        last_minute=$((now / 60))
        mkdir -p "$out/minutes"
        curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$out/minutes/$last_minute.metrics" || true
        { du -ak "$out/data" 2>/dev/null || true; } | sort -rn | head -40 >"$out/minutes/$last_minute.files"
    fi
    sleep 10
done
wait "$bench" || fail "pgbench failed (see $out/pgbench.log)"
kill "$producer" 2>/dev/null || true
producer=""
grep -q "number of failed transactions: 0 " "$out/pgbench.log" || fail "pgbench saw failed transactions ($out/pgbench.log)"

# Once the sources have read everything (the generator finished, the topic's orders all read),
# FLUSH lets every view catch up; then each equals its query run as a batch.
settle() { # $1 source: waits until it has finished or read nothing new for 3 s
    local last="" same=0 now
    for _ in $(seq 1 300); do
        now=$(sql -c "SELECT state || ' ' || records_read FROM weir_catalog.sources WHERE source_name = '$1'")
        case "$now" in finished*) return 0 ;; esac
        if [ "$now" = "$last" ]; then same=$((same + 1)); [ "$same" -ge 3 ] && return 0; else same=0; fi
        last=$now
        sleep 1
    done
    fail "source $1 did not settle: $now"
}
settle bids
settle orders
sql -c "FLUSH"
compare() { # $1 view, $2 its query: the same rows, the query run once (it may read a whole topic)
    sql -c "SELECT * FROM $1" | sort >"$out/view.txt"
    sql -c "$2" | sort >"$out/query.txt"
    diff -q "$out/view.txt" "$out/query.txt" >/dev/null ||
        fail "view $1 differs from its query in $(diff "$out/view.txt" "$out/query.txt" | grep -c '^[<>]') rows"
    echo "  $1 equals its query ($(wc -l <"$out/view.txt") rows)"
}
echo "checks:"
compare per_branch "SELECT a.bid, count(*) AS orders, sum(o.amount) AS amount FROM orders AS o JOIN accounts AS a ON o.customer = a.aid GROUP BY a.bid"
compare rich "SELECT aid, abalance FROM accounts WHERE abalance > 20"
compare per_bucket "SELECT auction % 1000 AS bucket, count(*) AS bids, sum(price) AS total FROM bids GROUP BY auction % 1000"
compare bidder_buckets "SELECT DISTINCT bidder % 500 AS b FROM bids"
compare top_bids "SELECT auction, bidder, price, date_time FROM bids ORDER BY price DESC, date_time, auction, bidder LIMIT 10"
# Sinks deliver a checkpoint after it completes, so a little after FLUSH.
for _ in $(seq 1 60); do
    delivered=$(psql "$pg" -At -c "SELECT coalesce(sum(orders), 0) FROM $pg_table")
    [ "$delivered" -gt 0 ] && break
    sleep 1
done
[ "$delivered" -gt 0 ] || fail "the PostgreSQL sink delivered nothing: $(sql -c "SELECT * FROM weir_catalog.sinks")"
echo "  the PostgreSQL sink delivered $delivered orders' totals"
windows=$("$py" - "$kafka" "$topic_windows" <<'EOF2'
import sys
from confluent_kafka import Consumer, TopicPartition
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "soak-check", "isolation.level": "read_committed"})
total = 0
for partition in range(2):
    low, high = consumer.get_watermark_offsets(TopicPartition(sys.argv[2], partition), timeout=10)
    total += high - low
print(total)
EOF2
)
[ "$windows" -gt 0 ] || fail "the Kafka sink delivered nothing"
echo "  the Kafka sink delivered $windows messages (transaction markers included)"
kill -0 "$pid" 2>/dev/null || fail "the server exited"

"$py" - "$out/samples.csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
n = len(rows)
print(f"resources ({n} samples every 10 s): first-half median -> last-quarter median")
for key in ["rss_kib", "open_files", "threads", "data_dir_bytes"]:
    values = [int(r[key]) for r in rows]
    first, last = statistics.median(values[: max(1, n // 2)]), statistics.median(values[-max(1, n // 4):])
    print(f"  {key:15} {first:>14,.0f} -> {last:>14,.0f}  ({last / first if first else 0:.2f}x; max {max(values):,})")
# The server's share of one core over each part of the run.
def share(a, b):
    seconds = int(rows[b]["seconds"]) - int(rows[a]["seconds"])
    return (int(rows[b]["cpu_seconds"]) - int(rows[a]["cpu_seconds"])) / seconds if seconds else 0
if n >= 4:
    print(f"  cpu (cores)     {share(0, n // 2 - 1):>14.2f} -> {share(n - n // 4 - 1, n - 1):>14.2f}")
EOF
echo "samples: $out/samples.csv; soak: ok"
