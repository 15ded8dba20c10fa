#!/usr/bin/env bash
# A local PostgreSQL server for the tests (Debian's postgresql package, installed by
# scripts/install-deps.sh test): a throwaway cluster on 127.0.0.1, trust authentication, TLS on
# (`ssl = on`, a certificate for localhost and 127.0.0.1 from the test CA made by
# tests/doubles/certs.py). The role weir_tls may connect only over TLS.
#
#   scripts/pg-server.sh start   # starts it unless it already answers; prints its URL
#   scripts/pg-server.sh ca      # prints the test CA's certificate file (trusted by the tests)
#   scripts/pg-server.sh stop    # stops the one `start` started
#
# The port is $WEIR_PG_PORT (default 5433, beside a system server on 5432). The cluster lives
# under $TMPDIR and is made anew at each fresh start; run as root, it runs as user postgres.
set -euo pipefail
port=${WEIR_PG_PORT:-5433}
state=${TMPDIR:-/tmp}/weir-pg-${port}
url="postgresql://postgres@127.0.0.1:${port}/postgres"
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "PostgreSQL is not installed: scripts/install-deps.sh test" >&2; exit 1; }
as_postgres() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
answers() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; }

case "${1:-start}" in
  start)
    if ! answers; then
      rm -rf "$state" && mkdir -p "$state"
      if [ "$(id -u)" = 0 ]; then chown postgres "$state"; fi
      as_postgres "'$bin/initdb' -D '$state/data' -A trust -U postgres >'$state/initdb.log' 2>&1"
      . "$(dirname "$0")/python-env.sh"
      "$test_python" "$(dirname "$0")/../tests/doubles/certs.py" "$state/certs"
      cp "$state/certs/server.pem" "$state/certs/server.key" "$state/data/"
      hba="$state/data/pg_hba.conf"
      printf 'hostnossl all weir_tls 127.0.0.1/32 reject\nhostssl all weir_tls 127.0.0.1/32 trust\n' | cat - "$hba" >"$hba.new"
      mv "$hba.new" "$hba"
      if [ "$(id -u)" = 0 ]; then chown -R postgres "$state/data"; fi
      as_postgres "'$bin/pg_ctl' -D '$state/data' -l '$state/log' -w -t 30 \
        -o \"-p $port -k '$state' -c listen_addresses=127.0.0.1 -c fsync=off \
        -c ssl=on -c ssl_cert_file=server.pem -c ssl_key_file=server.key\" start >/dev/null"
      answers || { echo "PostgreSQL did not start; see $state/log" >&2; exit 1; }
    fi
    echo "$url"
    ;;
  ca)
    echo "$state/certs/ca.pem"
    ;;
  stop)
    if [ -f "$state/data/postmaster.pid" ]; then
      as_postgres "'$bin/pg_ctl' -D '$state/data' -m fast -w stop >/dev/null" || true
    fi
    ;;
  *)
    echo "usage: $0 start|ca|stop" >&2
    exit 2
    ;;
esac
