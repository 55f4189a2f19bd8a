"""Two server processes on one PostgreSQL: a live one finishes the turn of a killed one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow


def test_live_worker_takes_over_a_killed_workers_turn(tmp_path: Path) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "delay": 3,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "done", "final": True}}
                ],
            }
        ],
    )
    with fresh_database("postgresql", tmp_path) as url:
        a = ServerProcess(tmp_path / "a", url, model=model, executor_id="worker-a").start()
        b = ServerProcess(tmp_path / "b", url, model=model, executor_id="worker-b").start()
        servers = {"worker-a": a, "worker-b": b}
        try:
            with a.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "x", "text": "go"},
                )
            turn_id = wait_for(
                lambda: rows(
                    url,
                    "SELECT id FROM turns WHERE conversation_id = :c AND status = 'running'",
                    c=conversation,
                )
            )[0][0]
            runner = wait_for(
                lambda: rows(
                    url,
                    "SELECT executor_id FROM dbos.workflow_status"
                    " WHERE workflow_uuid = :w AND status = 'PENDING'",
                    w=turn_id,
                )
            )[0][0]
            killed_at = time.monotonic()
            servers[runner].kill()
            survivor = b if runner == "worker-a" else a
            wait_for(
                lambda: (
                    rows(url, "SELECT status FROM turns WHERE id = :t", t=turn_id) == [("done",)]
                ),
                timeout=30,
            )
            took = time.monotonic() - killed_at
            # heartbeat timeout (3 s) + the re-run model call (3 s) + polling slack
            assert took < 12, f"takeover took {took:.1f}s"
            with survivor.client() as client:
                bodies = [
                    m["body"]
                    for m in client.get(f"/v1/conversations/{conversation}/messages").json()[
                        "messages"
                    ]
                ]
            assert bodies == ["go", "done"]
            finished_by = rows(
                url,
                "SELECT executor_id FROM dbos.workflow_status WHERE workflow_uuid = :w",
                w=turn_id,
            )
            assert finished_by[0][0] != runner
        finally:
            a.stop()
            b.stop()
