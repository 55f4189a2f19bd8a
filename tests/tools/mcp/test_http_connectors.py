"""Connectors reached by URL (streamable HTTP): server-everything as a remote server, used in a
turn; a header's value names a secret from the vault, filled in when the session opens, and a
missing secret is reported with what to do."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, free_port, say, wait_for, write_script
from tests.tools.mcp.oauth_server import OAuthMcpServer
from tests.tools.mcp.servers import CACHE, payloads

# A loaded CI machine (four workers on two cores) may take minutes to start sandboxes and servers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
EVERYTHING_JS = CACHE / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _everything_over_http() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        ["node", str(EVERYTHING_JS), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=30, interval=0.2)
    return process, f"http://127.0.0.1:{port}/mcp"


def test_http_connectors_with_secret_headers(tmp_path: Path, database_url: str) -> None:
    script = write_script(
        tmp_path / "script.json",
        [
            _call("load_tools", query="everything_echo"),
            _call("everything_echo", message="hello over HTTP"),
            _call("load_tools", query="notes_latest_note"),
            _call("notes_latest_note"),
            say("Both answered.", final=True),
        ],
    )
    everything, everything_url = _everything_over_http()
    token = "s3cret-api-key-123"
    try:
        with OAuthMcpServer(oauth=False, bearer=token) as notes:
            server = ServerProcess(
                tmp_path / "data", database_url, model=script, env={"NIGHTOWL_MEMORY_PASS": "off"}
            ).start()
            try:
                with server.client() as client:
                    made = client.post(
                        "/v1/connectors", json={"name": "everything", "url": everything_url}
                    )
                    assert made.status_code == 201, made.text
                    header = {"Authorization": "Bearer {{secret:NOTES_KEY}}"}
                    made = client.post(
                        "/v1/connectors",
                        json={"name": "notes", "url": notes.url, "headers": header},
                    )
                    assert made.status_code == 201, made.text
                    # The header names a secret the vault does not hold yet: what to do.
                    report = client.post("/v1/connectors/notes/test", timeout=60).json()
                    assert not report["ok"]
                    assert "nightowl secrets set NOTES_KEY" in report["error"]
                    stored = client.put("/v1/secrets/NOTES_KEY", json={"value": token})
                    assert stored.status_code == 204, stored.text
                    report = client.post("/v1/connectors/notes/test", timeout=60).json()
                    assert report["ok"], report
                    listed = client.get("/v1/connectors/notes").json()
                    # The owner sees the reference, never the value.
                    assert listed["headers"] == header and token not in str(listed)

                    conversation = client.post("/v1/conversations", json={}).json()["id"]
                    client.post(
                        f"/v1/conversations/{conversation}/messages",
                        json={"client_id": "m1", "text": "try both"},
                    )

                    def replied() -> bool:
                        page = client.get(f"/v1/conversations/{conversation}/messages").json()
                        return any(m["body"] == "Both answered." for m in page["messages"])

                    wait_for(replied, timeout=180)
            finally:
                server.stop()
    finally:
        everything.terminate()
        everything.wait(timeout=10)
    found = payloads(rows(database_url, "SELECT payload FROM transcript_entries ORDER BY id"))
    results = {p["tool_name"]: p for p in found if p.get("kind") == "tool_result"}
    assert "Echo: hello over HTTP" in results["everything_echo"]["text"]
    assert "water the plants" in results["notes_latest_note"]["text"]
    assert token not in str(found)  # the secret never reached the transcript
