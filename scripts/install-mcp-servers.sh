#!/usr/bin/env bash
# The reference MCP servers the connector tests and bench/connectors.py run, installed from the
# npm registry and PyPI into a cache outside the checkout (like the local model's weights):
#   node_modules/  @modelcontextprotocol/server-everything, @modelcontextprotocol/server-filesystem
#   python/        mcp-server-time (for the system Python the sandbox has: pip --target)
# A test copies what it needs into the user's home, where a stdio server runs (inside the
# user's computer, never on the host). Versions are pinned; a stamp skips a second install.
set -euo pipefail
PIP="${1:-.venv/bin/pip}"
CACHE="${NIGHTOWL_MCP_SERVERS:-$HOME/.cache/nightowl/mcp-servers}"
EVERYTHING="@modelcontextprotocol/server-everything@2026.8.31"
FILESYSTEM="@modelcontextprotocol/server-filesystem@2026.8.31"
TIME="mcp-server-time==2026.10.19"
STAMP="$CACHE/.installed-$(echo "$EVERYTHING $FILESYSTEM $TIME" | sha256sum | cut -c1-12)"
[ -f "$STAMP" ] && exit 0
command -v npm >/dev/null || { echo "npm is missing (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$CACHE"
cd "$CACHE"
[ -f package.json ] || echo '{"private": true}' > package.json
npm install --no-audit --no-fund --silent "$EVERYTHING" "$FILESYSTEM"
# The sandbox runs /usr/bin/python3: wheels for its version, whatever the venv's is.
PY_VERSION="$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
rm -rf python
"$OLDPWD/$PIP" install --quiet --target python --python-version "$PY_VERSION" \
  --only-binary=:all: "$TIME"
touch "$STAMP"
