"""Routines: they fire on schedule (also after a restart); unapproved ones never fire."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.server import NIGHTOWL, ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow
EVERY_SECOND = "* * * * * *"


def _routine_messages(server: ServerProcess, conversation: str) -> list[dict[str, Any]]:
    with server.client() as client:
        page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [m for m in page["messages"] if str(m["body"]).startswith("Routine ")]


def test_a_routine_fires_on_schedule_after_a_restart(tmp_path: Path, database_url: str) -> None:
    server = ServerProcess(tmp_path / "data", database_url).start()
    try:
        with server.client() as client:
            created = client.post(
                "/v1/routines",
                json={"name": "check", "prompt": "check the doc", "cron": EVERY_SECOND},
            )
            assert created.status_code == 201 and created.json()["status"] == "active"
            conversation = created.json()["conversation_id"]
        fired = wait_for(lambda: _routine_messages(server, conversation), timeout=60)
        assert fired[0]["trust"] == "owner" and "check the doc" in fired[0]["body"]
        server.kill()
        server.start()
        restarted = time.time()

        def fired_since_restart() -> list[dict[str, Any]]:
            return [
                m
                for m in _routine_messages(server, conversation)
                if datetime.fromisoformat(m["created_at"]).timestamp() > restarted
            ]

        # It fired before the kill (above); the schedule goes on after the restart by itself.
        assert wait_for(fired_since_restart, timeout=60)
        with server.client() as client:
            routine_id = created.json()["id"]
            assert client.post(f"/v1/routines/{routine_id}/pause").json()["status"] == "paused"
            time.sleep(1.5)
            count = len(_routine_messages(server, conversation))
            time.sleep(2.5)
            assert len(_routine_messages(server, conversation)) == count  # paused: silent
            assert client.delete(f"/v1/routines/{routine_id}").status_code == 204
            assert client.get("/v1/routines").json() == []
    finally:
        server.stop()


def test_a_routine_the_agent_creates_waits_for_approval(tmp_path: Path, database_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "load_tools", "arguments": {"query": "create_routine"}}]},
            {
                "tool_calls": [
                    {
                        "name": "create_routine",
                        "arguments": {"name": "daily", "prompt": "summarise", "cron": EVERY_SECOND},
                    }
                ]
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "a", "text": "summarise every morning"},
            )
            routines = wait_for(lambda: client.get("/v1/routines").json(), timeout=30)
            assert routines[0]["status"] == "pending_approval"
            assert routines[0]["created_by"] == "agent"
            time.sleep(3)
            assert _routine_messages(server, conversation) == []  # never fires unapproved
            asked = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            assert any("until you approve" in m["body"] for m in asked)
            approved = client.post(f"/v1/routines/{routines[0]['id']}/approve")
            assert approved.json()["status"] == "active"
            wait_for(lambda: _routine_messages(server, conversation), timeout=30)
    finally:
        server.stop()


def test_bad_schedules_are_refused_with_what_to_write(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        with server.client() as client:
            bad_cron = client.post(
                "/v1/routines", json={"name": "x", "prompt": "y", "cron": "every morning"}
            )
            assert bad_cron.status_code == 422
            assert "0 8 * * 1-5" in bad_cron.json()["error"]["message"]
            bad_zone = client.post(
                "/v1/routines",
                json={"name": "x", "prompt": "y", "cron": "0 8 * * *", "timezone": "Mars/Base"},
            )
            assert bad_zone.status_code == 422 and "IANA" in bad_zone.json()["error"]["message"]
            assert client.get("/v1/routines").json() == []
            assert client.post("/v1/routines/rtn_nope/pause").status_code == 404
    finally:
        server.stop()


def test_routines_from_the_command_line(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [NIGHTOWL, "routines", "--url", server.url, *args],
                env=server.env,
                capture_output=True,
                text=True,
            )

        created = cli("create", "standup", "0 9 * * 1-5", "prepare my standup notes")
        assert created.returncode == 0 and "active" in created.stdout
        routine_id = created.stdout.split()[0]
        assert "paused" in cli("pause", routine_id).stdout
        assert "active" in cli("resume", routine_id).stdout
        assert routine_id in cli("list").stdout
        bad = cli("create", "x", "whenever", "y")
        assert bad.returncode == 2 and "cron expression" in bad.stderr
        assert cli("delete", routine_id).returncode == 0
        assert cli("list").stdout.strip() == ""
    finally:
        server.stop()
