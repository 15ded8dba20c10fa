#!/usr/bin/env bash
# A local S3-compatible server for the tests: moto's server (PyPI `moto[server]`, installed by
# scripts/install-deps.sh test), in memory, on 127.0.0.1.
#
#   scripts/s3-server.sh start   # starts it unless it already answers; prints its endpoint
#   scripts/s3-server.sh stop    # stops the one `start` started
#
# The port is $WEIR_S3_PORT (default 9444). Any client takes any access key and secret.
set -euo pipefail
port=${WEIR_S3_PORT:-9444}
endpoint="http://127.0.0.1:${port}"
state=${TMPDIR:-/tmp}/weir-s3-${port}
. "$(dirname "$0")/python-env.sh"
py=$test_python
answers() { "$py" -c "import urllib.request,sys; urllib.request.urlopen('${endpoint}/moto-api/', timeout=1)" 2>/dev/null; }

case "${1:-start}" in
  start)
    if ! answers; then
      nohup "$py" -m moto.server -H 127.0.0.1 -p "$port" >"${state}.log" 2>&1 &
      echo $! >"${state}.pid"
      for _ in $(seq 1 100); do
        answers && break
        sleep 0.1
      done
      answers || { echo "the S3 server did not start; see ${state}.log" >&2; exit 1; }
    fi
    echo "$endpoint"
    ;;
  stop)
    if [ -f "${state}.pid" ]; then
      kill "$(cat "${state}.pid")" 2>/dev/null || true
      rm -f "${state}.pid"
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
