"""The real local model uses a connector: it loads the tool's schema on demand, calls it and
tells the owner what it returned."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from nightowl.models.weights import weights_path
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for
from tests.tools.mcp.oauth_server import OAuthMcpServer

# The real model takes both cores: its tests run one after another on one worker (as in
# tests/models/test_local_model.py), and a loaded machine may take several minutes per test.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("local-model"), pytest.mark.timeout(900)]


def test_the_local_model_loads_and_calls_a_connector_tool(tmp_path: Path) -> None:
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    word = f"code-{secrets.token_hex(3)}"
    with OAuthMcpServer(oauth=False, note=f"the door code is {word}") as notes:
        server = ServerProcess(
            tmp_path / "data", model="local", env={"NIGHTOWL_MEMORY_PASS": "off"}
        ).start()
        url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
        try:
            with server.client() as client:
                made = client.post(
                    "/v1/connectors",
                    json={"name": "notes", "url": notes.url, "description": "My notes."},
                )
                assert made.status_code == 201, made.text
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                path = f"/v1/conversations/{conversation}/messages"
                client.post(
                    path,
                    json={
                        "client_id": "q",
                        "text": "What is my latest note? My notes connector has a tool "
                        "notes_latest_note: first load it with load_tools (query "
                        "notes_latest_note) and wait for the result, then call it, then send me "
                        "exactly what it returned. One tool call at a time.",
                    },
                )
                wait_for(
                    lambda: (
                        rows(
                            url,
                            "SELECT status FROM turns WHERE conversation_id = :c",
                            c=conversation,
                        )
                        == [("done",)]
                    ),
                    timeout=600,
                    interval=1,
                )
                messages = client.get(path).json()["messages"]
        finally:
            server.stop()
    ran = [
        tool
        for (tool,) in rows(
            url, "SELECT tool FROM tool_runs WHERE conversation_id = :c", c=conversation
        )
    ]
    assert "load_tools" in ran and "notes_latest_note" in ran, ran
    replies = " ".join(m["body"] for m in messages if m["role"] == "agent")
    assert word in replies, f"the reply does not carry the tool's answer: {replies!r}"
