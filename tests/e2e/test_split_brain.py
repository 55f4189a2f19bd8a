"""A worker declared dead while it is alive (its heartbeats came late: a busy machine, a
paused VM) must not run its turns beside the worker that took them over: the turn ends once,
each message is sent once, and the late worker stops itself at its next heartbeat.

Made deterministic without freezing a process: worker A beats only every 30 s, worker B
declares a worker dead after 3 s without a beat, so B takes over A's running turn while A is
alive and still running it. Both then run the same steps; whichever records a step second
replays the first one's record instead of failing the turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow

WORKFLOW = "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = :w"


def test_a_worker_declared_dead_while_alive_stops_and_its_turn_ends_once(
    tmp_path: Path,
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "delay": 20,  # long enough for B to start and take over on a loaded machine
                "tool_calls": [{"name": "send_to_user", "arguments": {"text": "working on it"}}],
            },
            {
                "delay": 2,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "done", "final": True}}
                ],
            },
        ],
    )
    with fresh_database("postgresql", tmp_path) as url:
        late = {"NIGHTOWL_HEARTBEAT_INTERVAL_S": "30"}
        a = ServerProcess(tmp_path / "a", url, model=model, executor_id="worker-a", env=late)
        a.start()
        b = ServerProcess(tmp_path / "b", url, model=model, executor_id="worker-b")
        try:
            with a.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "x", "text": "go"},
                )
            turn_id = wait_for(  # running on A, the only worker so far
                lambda: rows(
                    url,
                    "SELECT id FROM turns WHERE conversation_id = :c AND status = 'running'",
                    c=conversation,
                )
            )[0][0]
            b.start()  # A's beat is older than B's 3 s timeout: B takes A's turn over
            wait_for(
                lambda: (
                    rows(url, "SELECT recovered_by FROM workers WHERE executor_id = 'worker-a'")
                    == [("worker-b",)]
                ),
                timeout=60,
            )
            # B took the turn over while A still ran it (its first model call takes 20 s).
            assert rows(url, "SELECT status FROM turns WHERE id = :t", t=turn_id) == [("running",)]
            assert a.process is not None
            # A, alive all along, learns at its next beat that it was taken over and stops.
            a.process.wait(timeout=60)
            wait_for(
                lambda: (
                    rows(url, "SELECT status FROM turns WHERE id = :t", t=turn_id) == [("done",)]
                ),
                timeout=90,
            )
            with b.client() as client:
                messages = client.get(f"/v1/conversations/{conversation}/messages").json()
            assert [m["body"] for m in messages["messages"]] == ["go", "working on it", "done"]
            # Finished once, by whichever execution owned it last (B, or A's own re-run of
            # the re-enqueued turn before it stopped, recovered by B after).
            wait_for(
                lambda: rows(url, WORKFLOW, w=turn_id) == [("SUCCESS",)],
                timeout=60,
            )
            fenced = [
                line
                for line in a.log_lines()
                if "declared dead while it was alive" in str(line.get("message", ""))
            ]
            assert fenced and fenced[0].get("taken_over_by") == "worker-b"
        finally:
            a.stop()
            b.stop()
