"""Retention: finished workflow records past the retention period are deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


def test_finished_workflows_are_deleted_after_retention(tmp_path: Path, database_url: str) -> None:
    model = write_script(tmp_path / "script.json", [say("hi", final=True)])
    server = ServerProcess(
        tmp_path / "data",
        database_url,
        model=model,
        env={"NIGHTOWL_RETENTION_DAYS": "0.00002", "NIGHTOWL_RETENTION_SWEEP_INTERVAL_S": "0.5"},
    ).start()
    durable = (
        database_url
        if database_url.startswith("postgresql")
        else f"sqlite:///{tmp_path / 'data' / 'durable.sqlite'}"
    )
    table = "dbos.workflow_status" if durable.startswith("postgresql") else "workflow_status"
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages", json={"client_id": "r", "text": "x"}
            )
        turn_id = wait_for(
            lambda: rows(database_url, "SELECT id FROM turns WHERE status = 'done'")
        )[0][0]
        wait_for(
            lambda: (
                not rows(
                    durable,
                    f"SELECT workflow_uuid FROM {table} WHERE workflow_uuid = :w",
                    w=turn_id,
                )
            ),
            timeout=20,
        )
        # The results its steps kept beside their writes (a model call and a tool run, each
        # committed with its result) go with it.
        assert (
            rows(database_url, "SELECT count(*) FROM tool_runs WHERE turn_id = :t", t=turn_id)[0][0]
            == 1
        )
        wait_for(lambda: rows(database_url, "SELECT count(*) FROM step_results") == [(0,)])
        # The app's own record of the turn stays.
        assert rows(database_url, "SELECT status FROM turns WHERE id = :t", t=turn_id) == [
            ("done",)
        ]
    finally:
        server.stop()
