"""The owner's correction cuts into a running turn, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow


def _when(value: Any) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def test_owner_correction_ends_a_30s_tool_and_the_next_turn_sees_what_was_cut(
    tmp_path: Path, database_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "load_tools", "arguments": {"query": "wait"}}]},
            {"tool_calls": [{"name": "wait", "arguments": {"seconds": 30}}]},
            {
                "tool_calls": [
                    {
                        "name": "send_to_user",
                        "arguments": {"text": "Moved to Friday", "final": True},
                    }
                ]
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "a", "text": "schedule the meeting"})
            wait_for(
                lambda: rows(
                    database_url,
                    "SELECT id FROM tool_runs WHERE conversation_id = :c AND tool = 'wait'",
                    c=conversation,
                ),
                timeout=30,
                interval=0.01,
            )
            time.sleep(0.3)  # the wait tool is now in flight
            sent = time.time()
            client.post(path, json={"client_id": "b", "text": "actually move it to Friday"})
            wait_for(
                lambda: rows(
                    database_url,
                    "SELECT status FROM turns WHERE conversation_id = :c AND status = 'done'",
                    c=conversation,
                ),
                timeout=30,
            )
            messages = client.get(path).json()["messages"]
        turns = rows(
            database_url,
            "SELECT id, status, started_at, finished_at, batch_first_seq FROM turns"
            " WHERE conversation_id = :c ORDER BY created_at",
            c=conversation,
        )
        assert [t[1] for t in turns] == ["interrupted", "done"]
        first, second = turns
        cut_after = _when(first[3]).timestamp() - sent
        assert cut_after < 0.25, (
            f"the running turn stopped {cut_after * 1000:.0f} ms after the correction"
        )
        assert _when(first[3]) <= _when(second[2])  # never two turns at once
        assert second[4] == 2  # the new turn took the correction
        entries = [
            json.loads(p) if isinstance(p, str) else p
            for (p,) in rows(
                database_url,
                "SELECT payload FROM transcript_entries WHERE conversation_id = :c ORDER BY id",
                c=conversation,
            )
        ]
        cut = [e for e in entries if e["kind"] == "tool_result" and e["tool_name"] == "wait"]
        assert cut and "Cancelled" in cut[0]["text"]
        notes = [e["text"] for e in entries if e["kind"] == "notice" and "interrupted" in e["text"]]
        assert notes and "Finished before the interruption: load_tools" in notes[0]
        assert "Cut off: wait" in notes[0]
        assert [m["body"] for m in messages][-1] == "Moved to Friday"
    finally:
        server.stop()


def test_a_preempted_turn_is_not_resumed_after_a_restart(tmp_path: Path, database_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "wait", "arguments": {"seconds": 20}}]},
            {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "ok", "final": True}}]},
        ],
    )
    server = ServerProcess(tmp_path / "data", database_url, model=model).start()
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "a", "text": "long job"})
            wait_for(
                lambda: rows(
                    database_url,
                    "SELECT id FROM tool_runs WHERE conversation_id = :c",
                    c=conversation,
                ),
                timeout=30,
                interval=0.01,
            )
            client.post(path, json={"client_id": "b", "text": "stop, do this instead"})
            wait_for(
                lambda: rows(
                    database_url,
                    "SELECT id FROM turns WHERE conversation_id = :c AND status = 'done'",
                    c=conversation,
                ),
                timeout=30,
            )
        server.kill()
        server.start()
        time.sleep(3)
        waits = rows(
            database_url,
            "SELECT id FROM tool_runs WHERE conversation_id = :c AND tool = 'wait'",
            c=conversation,
        )
        assert len(waits) == 1  # the cut-off turn did not come back to life
    finally:
        server.stop()
