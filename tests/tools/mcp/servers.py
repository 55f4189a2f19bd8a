"""The reference MCP servers for tests (installed by `make mcp-servers` into a cache outside
the checkout) and how a test puts them in a user's home, where a stdio server runs."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("NIGHTOWL_MCP_SERVERS", Path.home() / ".cache/nightowl/mcp-servers"))
INSIDE = "/home/agent/.mcp"
EVERYTHING = [
    "node",
    f"{INSIDE}/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    "stdio",
]
FILESYSTEM = [
    "node",
    f"{INSIDE}/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
]
TIME = [
    "env",
    f"PYTHONPATH={INSIDE}/python",
    "python3",
    "-m",
    "mcp_server_time",
    "--local-timezone",
    "UTC",
]


def install_in_home(home: Path) -> None:
    """Copy the reference servers into a user's home (`~/.mcp`), as the user would install
    them in their computer; readable by the sandbox's user, owned by root."""
    if not (CACHE / "node_modules").is_dir() or not (CACHE / "python").is_dir():
        raise RuntimeError(f"the reference MCP servers are not in {CACHE}: run `make mcp-servers`")
    home.mkdir(parents=True, exist_ok=True)
    for part in ("node_modules", "python"):
        if not (home / ".mcp" / part).exists():
            shutil.copytree(CACHE / part, home / ".mcp" / part, symlinks=True)


def payloads(rows: list[tuple[Any]]) -> list[dict[str, Any]]:
    """Transcript payloads as dicts (PostgreSQL gives dicts, SQLite strings)."""
    return [p if isinstance(p, dict) else json.loads(p) for (p,) in rows]
