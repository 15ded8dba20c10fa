#!/usr/bin/env bash
# Installs what building and testing Weir needs on Debian, from Debian's packages and PyPI.
# Idempotent: installs only what is missing. Needs root (or sudo).
#
#   scripts/install-deps.sh build   # what `cargo build` needs: libclang (bindgen for RocksDB),
#                                   # protoc (the etcd client's gRPC code is made at build time)
#   scripts/install-deps.sh test    # plus the clients the tests drive (psql, psycopg, pgjdbc,
#                                   # node-postgres) and
#                                   # the servers they talk to (an S3-compatible one: moto; a
#                                   # Kafka-compatible one: noida-db; PostgreSQL for sinks), the
#                                   # Python ones in virtual environments (scripts/python-env.sh)
set -euo pipefail

what=${1:-test}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_missing=()
need_deb() { dpkg -s "$1" >/dev/null 2>&1 || apt_missing+=("$1"); }

need_deb libclang-dev
need_deb make
# OpenSSL is built from source for librdkafka and the Postgres sink (ADR 32): its Configure is Perl.
need_deb perl
need_deb openssl
# etcd-client compiles etcd's .proto files in its build script (prost-build runs protoc).
need_deb protobuf-compiler
if [ "$what" = test ]; then
  # The cluster tests' coordination service (scripts/etcd-server.sh).
  need_deb etcd-server
  # The Protobuf tests compile their .proto files, which import the well-known types.
  need_deb libprotobuf-dev
  need_deb etcd-client
  need_deb postgresql-client
  need_deb postgresql
  need_deb libpostgresql-jdbc-java
  need_deb default-jdk-headless
  python3 -c 'import venv, ensurepip' 2>/dev/null || need_deb python3-venv
  command -v node >/dev/null || need_deb nodejs
  command -v npm >/dev/null || need_deb npm
  # The container image's test (tests/operations.rs, scripts/container-image.sh).
  need_deb podman
  need_deb runc
  need_deb mmdebstrap
  need_deb uidmap
fi

if [ ${#apt_missing[@]} -gt 0 ]; then
  echo "installing from Debian: ${apt_missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

if [ "$what" = test ]; then
  # Python programs go into virtual environments the project owns (outside the clone, like the
  # build's target directory, so CI reuses them), so a run does not depend on what the machine
  # has installed: scripts/python-env.sh says where. The pinned one runs the test clients
  # and the S3 and Kafka servers; the other holds the clients' current releases, which the
  # client tests run against too (what users install).
  . scripts/python-env.sh
  make_venv() {
    local dir=$1; shift
    local stamp="$dir/.weir-requirements"
    if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$*" ]; then return; fi
    echo "installing from PyPI into $dir: $*"
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    echo "$*" > "$stamp"
  }
  make_venv "$WEIR_TEST_VENV" 'psycopg[binary]==3.2.13' 'SQLAlchemy==2.0.58' 'asyncpg==0.30.0' \
    'moto[server]==5.2.1' 'noida-db==0.2.3' 'kubernetes-validate==1.37.0' 'cryptography==51.0.1' \
    'confluent-kafka[avro,protobuf]==2.16.1'
  # The current releases, looked up again once a day.
  latest_stamp="$WEIR_TEST_VENV_LATEST/.weir-day"
  if [ "$(cat "$latest_stamp" 2>/dev/null)" != "$(date +%F)" ]; then
    rm -rf "$WEIR_TEST_VENV_LATEST"
    make_venv "$WEIR_TEST_VENV_LATEST" 'psycopg[binary]' 'SQLAlchemy' 'asyncpg'
    date +%F > "$latest_stamp"
  fi
fi

if [ "$what" = test ]; then
  # Podman on this kind of machine needs runc and no default ulimits.
  conf=/etc/containers/containers.conf
  if [ ! -e "$conf" ]; then
    $SUDO mkdir -p /etc/containers
    printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n' | $SUDO tee "$conf" >/dev/null
  elif ! grep -q '^default_ulimits = \[\]' "$conf"; then
    echo "warning: $conf has no 'default_ulimits = []' under [containers]: podman may fail to start containers" >&2
  fi
fi

if [ "$what" = test ]; then
  # node-postgres, pinned, in a directory the project owns (WEIR_TEST_NODE, outside the clone).
  node_dir=${WEIR_TEST_NODE:-/var/tmp/weir-test-node}
  node_packages='pg@8.23.1'
  if [ "$(cat "$node_dir/.weir-packages" 2>/dev/null)" != "$node_packages" ]; then
    echo "installing from npm into $node_dir: $node_packages"
    rm -rf "$node_dir"
    mkdir -p "$node_dir"
    npm install --prefix "$node_dir" --no-audit --no-fund --silent $node_packages
    echo "$node_packages" > "$node_dir/.weir-packages"
  fi
fi
