#!/usr/bin/env bash
# A local etcd for the cluster tests (Debian's etcd-server package, installed by
# scripts/install-deps.sh test): one member on 127.0.0.1, its data under $TMPDIR, made anew at
# each fresh start.
#
#   scripts/etcd-server.sh start     # starts it unless it already answers; prints its endpoint
#   scripts/etcd-server.sh stop      # stops the one `start` started
#   scripts/etcd-server.sh restart   # stops it and starts it again on the same data (the
#                                    # cluster tests' "etcd restarted" fault)
#
# The client port is $WEIR_ETCD_PORT (default 2379), the peer port the next one.
set -euo pipefail
port=${WEIR_ETCD_PORT:-2379}
peer=$((port + 1))
state=${TMPDIR:-/tmp}/weir-etcd-${port}
endpoint="127.0.0.1:${port}"
command -v etcd >/dev/null || { echo "etcd is not installed: scripts/install-deps.sh test" >&2; exit 1; }
answers() { ETCDCTL_API=3 etcdctl --endpoints="$endpoint" --dial-timeout=1s endpoint health >/dev/null 2>&1; }
launch() {
  mkdir -p "$state"
  # setsid: the server outlives the shell that started it (and a test's process group).
  setsid etcd --name weir-test --data-dir "$state/data" \
    --listen-client-urls "http://${endpoint}" --advertise-client-urls "http://${endpoint}" \
    --listen-peer-urls "http://127.0.0.1:${peer}" --initial-advertise-peer-urls "http://127.0.0.1:${peer}" \
    --initial-cluster "weir-test=http://127.0.0.1:${peer}" \
    >>"$state/log" 2>&1 </dev/null &
  echo $! >"$state/pid"
  for _ in $(seq 1 100); do answers && return 0; sleep 0.1; done
  echo "etcd did not start; see $state/log" >&2
  exit 1
}
halt() {
  if [ -f "$state/pid" ]; then
    kill "$(cat "$state/pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$(cat "$state/pid")" 2>/dev/null || break; sleep 0.1; done
    rm -f "$state/pid"
  fi
}

case "${1:-start}" in
  start)
    if ! answers; then
      halt
      rm -rf "$state"
      launch
    fi
    echo "$endpoint"
    ;;
  stop)
    halt
    ;;
  restart)
    halt
    launch
    echo "$endpoint"
    ;;
  *)
    echo "usage: $0 start|stop|restart" >&2
    exit 2
    ;;
esac
