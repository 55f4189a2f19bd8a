#!/usr/bin/env bash
# The browser tests drive Debian's Chromium (no browser can be downloaded at run time).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  }
else
  echo "Chromium is not installed; install the Debian package 'chromium' (as root)." >&2
  exit 1
fi
command -v chromium >/dev/null
