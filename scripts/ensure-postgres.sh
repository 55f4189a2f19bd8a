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
for _ in $(seq 1 60); do ready && exit 0; sleep 0.5; done
echo "PostgreSQL did not start on 127.0.0.1:5432" >&2
exit 1
