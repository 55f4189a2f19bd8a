"""The computer through real turns of the real server (scripted model): files outlive a deep
sleep, and the owner's correction kills a running shell command."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.computer.sandboxes import UID_BASE
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _tool_results(database_url: str, conversation: str, tool: str) -> list[dict[str, Any]]:
    found = rows(
        database_url,
        "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
        c=conversation,
    )
    payloads = [p if isinstance(p, dict) else json.loads(p) for (p,) in found]
    return [p for p in payloads if p.get("kind") == "tool_result" and p.get("tool_name") == tool]


def _bodies(client: Any, conversation: str) -> list[str]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m["body"] for m in page["messages"]]


def test_a_file_written_in_one_turn_is_read_back_after_a_deep_sleep(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            _call("write_file", path="notes/plan.txt", content="buy oat milk\n"),
            say("Saved.", final=True),
            _call("read_file", path="notes/plan.txt"),
            say("Your plan: buy oat milk.", final=True),
        ],
    )
    env = {
        "NIGHTOWL_SANDBOX_IDLE_SLEEP_S": "0.5",
        "NIGHTOWL_SANDBOX_NETWORK": "none",
        "NIGHTOWL_SANDBOX_UID_BASE": str(UID_BASE + 50),
    }
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        with server.client() as client:
            owner = client.get("/v1/me").json()["id"]
            home = tmp_path / "data" / "homes" / owner
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "a", "text": "note: buy oat milk"})
            wait_for(lambda: "Saved." in _bodies(client, conversation), timeout=30)
            # (Not read from the disk here: half a second idle, the home may be asleep already.)
            [wrote] = _tool_results(database_url, conversation, "write_file")
            assert "Wrote 13 bytes" in wrote["text"] and not wrote.get("is_error")

            # Idle past the setting: the home goes into a snapshot and leaves the disk.
            wait_for(lambda: not home.exists(), timeout=30)
            state = rows(database_url, "SELECT state, snapshot FROM computers")
            assert state[0][0] == "asleep" and str(state[0][1]).startswith("blob:")

            client.post(path, json={"client_id": "b", "text": "what was my plan?"})
            wait_for(lambda: "Your plan: buy oat milk." in _bodies(client, conversation))
        [read] = _tool_results(database_url, conversation, "read_file")
        assert "buy oat milk" in read["text"] and not read.get("is_error")
        assert (home / "notes" / "plan.txt").read_text() == "buy oat milk\n"
    finally:
        server.stop()


def _sandbox_sleeps(uid: int) -> list[str]:
    found = subprocess.run(
        ["pgrep", "-u", str(uid), "-a", "sleep"], capture_output=True, text=True, check=False
    )
    return found.stdout.splitlines()


def test_the_owners_correction_kills_the_running_shell_command(
    tmp_path: Path, database_url: str
) -> None:
    uid = UID_BASE + 60
    model = write_script(
        tmp_path / "script.json",
        [
            _call("shell", command="echo started; sleep 120; echo finished > late.txt"),
            say("Stopped; what now?", final=True),
        ],
    )
    env = {"NIGHTOWL_SANDBOX_NETWORK": "none", "NIGHTOWL_SANDBOX_UID_BASE": str(uid)}
    server = ServerProcess(tmp_path / "data", database_url, model=model, env=env).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "a", "text": "run the long job"})
            wait_for(lambda: _sandbox_sleeps(uid), timeout=30, interval=0.02)
            sent = time.monotonic()
            client.post(path, json={"client_id": "b", "text": "stop, that's the wrong job"})
            wait_for(lambda: not _sandbox_sleeps(uid), timeout=10, interval=0.01)
            killed_after = time.monotonic() - sent
            wait_for(lambda: "Stopped; what now?" in _bodies(client, conversation))
        assert killed_after < 1.0, f"the command still ran {killed_after:.2f} s after"

        def statuses() -> list[str]:
            found = rows(
                database_url,
                "SELECT status FROM turns WHERE conversation_id = :c ORDER BY created_at",
                c=conversation,
            )
            return [status for (status,) in found]

        wait_for(lambda: statuses()[-1] != "running")  # the reply is out; the turn ends next
        assert statuses() == ["interrupted", "done"]
        assert not list((tmp_path / "data" / "homes").glob("*/late.txt"))
    finally:
        server.stop()
