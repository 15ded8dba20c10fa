#!/usr/bin/env bash
# Installs what building and testing Weir needs on Debian, from Debian's packages and PyPI.
# Idempotent: installs only what is missing. Needs root (or sudo).
#
#   scripts/install-deps.sh build   # what `cargo build` needs: libclang (bindgen for RocksDB)
#   scripts/install-deps.sh test    # plus the clients the tests drive (psql, psycopg, pgjdbc) and
#                                   # the servers they talk to (an S3-compatible one: moto; a
#                                   # Kafka-compatible one: noida-db; PostgreSQL for sinks)
set -euo pipefail

what=${1:-test}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_missing=()
need_deb() { dpkg -s "$1" >/dev/null 2>&1 || apt_missing+=("$1"); }

need_deb libclang-dev
need_deb make
need_deb openssl
if [ "$what" = test ]; then
  need_deb postgresql-client
  need_deb postgresql
  need_deb libpostgresql-jdbc-java
  need_deb default-jdk-headless
fi

if [ ${#apt_missing[@]} -gt 0 ]; then
  echo "installing from Debian: ${apt_missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

if [ "$what" = test ]; then
  if ! python3 -c 'import psycopg, sqlalchemy, asyncpg' 2>/dev/null; then
    echo "installing from PyPI: psycopg, sqlalchemy, asyncpg"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      'psycopg[binary]==3.2.*' 'sqlalchemy==2.0.*' 'asyncpg==0.30.*'
  fi
  if ! python3 -c 'import moto.server' 2>/dev/null; then
    echo "installing from PyPI: moto[server] (the S3-compatible server of scripts/s3-server.sh)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore 'moto[server]==5.2.*'
  fi
  if ! python3 -c 'import noida_db' 2>/dev/null; then
    echo "installing from PyPI: noida-db (the Kafka-compatible broker of scripts/kafka-server.sh)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore 'noida-db==0.2.3'
  fi
fi
