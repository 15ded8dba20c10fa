#!/usr/bin/env bash
# A local Kafka-compatible broker for the tests: noida-db's Kafka service (PyPI `noida-db`, a
# single native binary; installed by scripts/install-deps.sh test), one broker on 127.0.0.1.
#
#   scripts/kafka-server.sh start   # starts it unless it already answers; prints its bootstrap servers
#   scripts/kafka-server.sh stop    # stops the one `start` started
#
# The port is $WEIR_KAFKA_PORT (default 9092). Topics live in a data dir under $TMPDIR, emptied at
# each fresh start: tests make their own topics (unique names).
set -euo pipefail
port=${WEIR_KAFKA_PORT:-9092}
bootstrap="127.0.0.1:${port}"
state=${TMPDIR:-/tmp}/weir-kafka-${port}
. "$(dirname "$0")/python-env.sh"
py=$test_python
noida() { "$py" -m noida_db.cli "$@" --data-dir "${state}.data" 2>&1 | grep -v "weak version .GLIBC_" || true; }
answers() { "$py" -c "import socket; socket.create_connection(('127.0.0.1', ${port}), timeout=1).close()" 2>/dev/null; }

case "${1:-start}" in
  start)
    if ! answers; then
      rm -rf "${state}.data" && mkdir -p "${state}.data"
      noida up --only kafka --host 127.0.0.1 --kafka-port "$port" >"${state}.log"
      for _ in $(seq 1 100); do
        answers && break
        sleep 0.1
      done
      answers || { echo "the Kafka server did not start; see ${state}.log and ${state}.data/noida.log" >&2; exit 1; }
    fi
    echo "$bootstrap"
    ;;
  stop)
    if [ -f "${state}.data/noida.control.json" ]; then
      noida down >/dev/null
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
