#!/usr/bin/env bash
# Runs Weir's whole test suite: installs what it needs, then `cargo test`.
# Every test starts its own Weir server on a free loopback port with a temporary data directory.
# Arguments go to `cargo test` (e.g. scripts/test.sh --test slt).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
exec cargo test --locked "$@"
