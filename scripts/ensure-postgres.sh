#!/usr/bin/env bash
# Make sure the local PostgreSQL (127.0.0.1:5432, user postgres, trust auth) accepts connections.
set -euo pipefail
ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "PostgreSQL is not installed; install the Debian package 'postgresql'." >&2
    exit 1
  fi
fi
if ! ready; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
wait_ready() {
  for _ in $(seq 1 60); do ready && return 0; sleep 0.5; done
  echo "PostgreSQL did not start on 127.0.0.1:5432" >&2
  exit 1
}
wait_ready
# The suite runs several test processes at once, each starting servers with their own
# connection pools: the default 100 connections are not enough.
WANT=400
have=$(psql -h 127.0.0.1 -U postgres -Atc "SHOW max_connections" 2>/dev/null || echo 0)
if [ "${have:-0}" -lt "$WANT" ] && command -v pg_ctlcluster >/dev/null 2>&1; then
  psql -h 127.0.0.1 -U postgres -qc "ALTER SYSTEM SET max_connections = $WANT" >/dev/null
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  wait_ready
fi
