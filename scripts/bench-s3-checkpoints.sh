#!/usr/bin/env bash
# Throughput with 1 s checkpoints to S3 against checkpoints off (issue 15's target: within 10 %),
# in back-to-back pairs whose order alternates, so the machine's drift falls on both sides.
#
#   scripts/bench-s3-checkpoints.sh WEIR_BINARY [PAIRS] [QUERY] [EVENTS]
#
# The S3 server is s3s-fs (crates.io, a Rust server storing objects as files), installed under
# /var/tmp on first use: on a two-core machine it takes about 2 % of a core during a run, where
# moto's Python server (scripts/s3-server.sh, the tests' server) takes a large share of the
# cores Weir is measured on. Prints each run and each pair's ratio, then their mean.
set -euo pipefail
bin=${1:?usage: $0 WEIR_BINARY [PAIRS] [QUERY] [EVENTS]}
pairs=${2:-5}
query=${3:-q5}
events=${4:-10000000}
port=${WEIR_S3S_PORT:-8014}
root=$(mktemp -d)
install=/var/tmp/weir-s3s-fs
if [ ! -x "$install/bin/s3s-fs" ]; then
  # 0.14.1: the newest release that builds with Rust 1.95.
  CARGO_TARGET_DIR=/var/tmp/weir-s3s-fs-target cargo install s3s-fs@0.14.1 --features binary --locked \
    --root "$install" >&2
fi
mkdir -p "$root/weirbench" # s3s-fs keeps a bucket as a directory under its root
"$install/bin/s3s-fs" --host 127.0.0.1 --port "$port" --access-key weir --secret-key weir-bench-key "$root" \
  >"$root.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$root" "$root.log"' EXIT
for _ in $(seq 1 50); do # any HTTP answer (403 without a signature) means it listens
  curl -s -o /dev/null "http://127.0.0.1:$port/" && break
  sleep 0.2
done
export AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=weir AWS_SECRET_ACCESS_KEY=weir-bench-key \
  AWS_REGION=us-east-1

run() { # $1: s3 or off; prints events/s
  local extra=()
  [ "$1" = s3 ] && extra=(--checkpoint-interval 1s --checkpoint-url "s3://weirbench/run-$RANDOM-$(date +%s%N)")
  local out
  out=$("$bin" bench nexmark --query "$query" --events "$events" "${extra[@]}" 2>&1) ||
    { echo "$out" >&2; echo "the $1 run failed" >&2; exit 1; }
  echo "$out" | grep '^nexmark' >&2
  echo "$out" | grep '^nexmark' | sed -E 's/.*= ([0-9]+) events\/s.*/\1/'
}

ratios=()
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) = 1 ]; then s3=$(run s3); off=$(run off); else off=$(run off); s3=$(run s3); fi
  ratio=$(awk -v a="$s3" -v b="$off" 'BEGIN { printf "%.3f", a / b }')
  echo "pair $i: S3 $s3 / off $off events/s = $ratio"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | awk '{ s += $1 } END { printf "mean of %d pairs: %.3f\n", NR, s / NR }'
