#!/usr/bin/env bash
# Builds and runs Weir with its defaults: Postgres wire on 127.0.0.1:4566, data in ./weir-data,
# metrics on 127.0.0.1:9464. Extra arguments go to `weir` (see `weir --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
exec cargo run --release -- "$@"
