#!/usr/bin/env bash
# The trace server the tracing tests export to: Arize Phoenix (OTLP over HTTP and gRPC, a REST
# API to read spans back), in a virtualenv of its own in a cache outside the checkout (its
# many dependencies never mix with the project's venv), like the channel servers.
# The version is pinned; a stamp skips a second install.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
CACHE="${NIGHTOWL_TRACE_SERVER:-$HOME/.cache/nightowl/trace-server}"
PHOENIX="arize-phoenix==20.26.1"
STAMP="$CACHE/.installed-$(echo "$PHOENIX" | sha256sum | cut -c1-12)"
[ -f "$STAMP" ] && exit 0
rm -rf "$CACHE/phoenix"
mkdir -p "$CACHE"
"$PYTHON" -m venv "$CACHE/phoenix"
"$CACHE/phoenix/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
"$CACHE/phoenix/bin/pip" install --quiet --disable-pip-version-check --prefer-binary "$PHOENIX"
touch "$STAMP"
