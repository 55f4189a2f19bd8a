"""A stdio connector's package is pinned at its first start (the time server from PyPI,
inside the owner's computer): after a file of it is changed, the server does not start — the
test says what changed, the connector shows it, `connectors diff` names the file — until the
owner approves the change; then it starts again. Through the real server, SQLite and
PostgreSQL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.server import NIGHTOWL, say
from tests.tools.mcp.servers import TIME
from tests.tools.mcp.test_stdio_in_sandbox import _server, _setup

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_tampered_stdio_package_does_not_start_until_the_owner_approves_it(
    tmp_path: Path, database_url: str
) -> None:
    server = _server(tmp_path, database_url, [say("ok", final=True)])
    try:
        with server.client() as client:
            owner = _setup(server, client, tmp_path, time=TIME)
            first = client.post("/v1/connectors/time/test", timeout=180).json()
            assert first["ok"], first
            pinned = client.get("/v1/connectors/time").json()
            assert pinned["package_pin"].startswith("pypi mcp-server-time ")
            assert pinned["package_change"] == ""
        server.stop()  # sessions end with the process: the next start is a new connect

        source = tmp_path / "data/homes" / owner / ".mcp/python/mcp_server_time/server.py"
        source.write_text(source.read_text() + "\n# a line nobody approved\n")
        server.start()
        with server.client() as client:
            refused = client.post("/v1/connectors/time/test", timeout=180).json()
            assert not refused["ok"]
            assert "time was not started" in refused["error"]
            assert "changed: mcp_server_time/server.py" in refused["error"]
            shown = client.get("/v1/connectors/time").json()
            assert shown["package_change"] == "changed: mcp_server_time/server.py"
            assert shown["status"] == "failed"

            def cli(*args: str) -> subprocess.CompletedProcess[str]:
                return subprocess.run(
                    [NIGHTOWL, "connectors", "--url", server.url, *args],
                    env=server.env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )

            diff = cli("diff", "time")
            assert "== package mcp-server-time (changed; does not start until approved)" in (
                diff.stdout
            ), diff.stderr
            assert "changed: mcp_server_time/server.py" in diff.stdout
            assert "its package changed" in cli("list").stdout
            # Approving a tool by name does not approve the package.
            named = client.post("/v1/connectors/time/approve", json={"tools": ["get_time"]})
            assert named.status_code == 422 and "its package" in named.text
            assert client.post("/v1/connectors/time/test", timeout=180).json()["ok"] is False

            approved = cli("approve", "time")
            assert approved.returncode == 0, approved.stderr
            again = client.post("/v1/connectors/time/test", timeout=180).json()
            assert again["ok"], again
            tools = [t["name"] for t in again["tools"]]
            assert tools == ["time_get_current_time", "time_convert_time"]
            after = client.get("/v1/connectors/time").json()
            assert after["package_change"] == "" and after["status"] == "ok"
    finally:
        server.stop()
