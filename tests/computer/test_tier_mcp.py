"""MCP servers inside the computer on a computer tier: the host runs a connector's stdio server
in the user's sandbox and carries its stdio over a websocket that only workers open; a worker's
turn lists, loads and calls its tools (server-everything, real processes and bubblewrap)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.computer.sandboxes import UID_BASE
from tests.computer.tier import TOKEN, ComputerHostProcess
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script
from tests.tools.mcp.servers import EVERYTHING, install_in_home, payloads

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _results(url: str, tool: str) -> list[dict[str, object]]:
    found = payloads(rows(url, "SELECT payload FROM transcript_entries ORDER BY id"))
    return [p for p in found if p.get("kind") == "tool_result" and p.get("tool_name") == tool]


def test_the_stdio_websocket_opens_only_with_the_tier_token(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_SANDBOX_NETWORK": "none"}
    env["NIGHTOWL_SANDBOX_UID_BASE"] = str(UID_BASE + 93)
    host = ComputerHostProcess(tmp_path / "host", url, env=env).start()
    route = host.url.replace("http://", "ws://") + "/v1/computers/someone/stdio?holder=turn"
    try:
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-the-same-size-00"}):
            with pytest.raises(InvalidStatus) as refused:
                connect(route, additional_headers=headers, open_timeout=20)
            assert refused.value.response.status_code == 401
        assert rows(url, "SELECT count(*) FROM computers") == [(0,)]
    finally:
        host.stop()


def test_a_workers_turn_calls_an_mcp_server_running_in_the_computer_on_its_host(
    tmp_path: Path,
) -> None:
    script = [
        _call("load_tools", query="everything_echo"),
        _call("everything_echo", message="hello from the host"),
        _call("load_tools", query="everything_get_env"),
        _call("everything_get_env"),
        say("It echoed.", final=True),
    ]
    model = write_script(tmp_path / "script.json", script)
    with fresh_database("postgresql", tmp_path) as url:
        common = {
            "NIGHTOWL_COMPUTER_TOKEN": TOKEN,
            "NIGHTOWL_SANDBOX_NETWORK": "none",
            "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + 91),
            "NIGHTOWL_SANDBOX_MEMORY_MB": "1024",
        }
        host = ComputerHostProcess(tmp_path / "host", url, env=common)
        worker = ServerProcess(
            tmp_path / "worker",
            url,
            model=model,
            env={"NIGHTOWL_COMPUTER_TOKEN": TOKEN, "NIGHTOWL_COMPUTER_HOSTS": host.url},
        )
        processes = [host.start(), worker.start()]
        try:
            with worker.client() as client:
                owner = client.get("/v1/me").json()["id"]
                install_in_home(host.data_dir / "homes" / owner)  # the server, in the computer
                made = client.post(
                    "/v1/connectors", json={"name": "everything", "command": EVERYTHING}
                )
                assert made.status_code == 201, made.text
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "m1", "text": "try the everything connector"},
                )
                wait_for(
                    lambda: (
                        rows(
                            url,
                            "SELECT count(*) FROM turns WHERE conversation_id = :c "
                            "AND status = 'done'",
                            c=conversation,
                        )[0][0]
                        == 1
                    ),
                    timeout=240,
                )
                listed = client.get("/v1/connectors/everything").json()
            [echo] = _results(url, "everything_echo")
            assert "Echo: hello from the host" in str(echo["text"]), echo
            assert not echo.get("is_error")
            # It ran in the user's computer on the host: its home and user.
            [env] = _results(url, "everything_get_env")
            variables = json.loads(str(env["text"]))
            assert variables["HOME"] == "/home/agent" and variables.get("USER") == "agent"
            assert listed["status"] == "ok" and len(listed["tools"]) >= 10
            # The worker runs no sandbox of its own: no home for the owner there.
            assert not (tmp_path / "worker" / "homes" / owner).exists()
            assert rows(url, "SELECT host FROM computers") == [(host.url,)]
            assert httpx.get(f"{host.url}/healthz", timeout=10).status_code == 200
        finally:
            for process in processes:
                process.stop()
