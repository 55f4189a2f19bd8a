"""The window between a step's commit to the app store and DBOS recording the step.

A step that writes commits its work first; DBOS records that the step finished afterwards, in
its own database. Here that record is held open from outside (a lock on DBOS's step outputs),
the server is killed inside the window, and restarted: the re-run step must return what its
first attempt committed instead of calling the model again over a history that already holds
its reply (which made the scripted model answer with its *next* reply: a visible message lost,
another sent in its place).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


@contextmanager
def step_records_held(server: ServerProcess, backend_url: str) -> Iterator[None]:
    """While inside, DBOS cannot record a finished step or workflow (its writes wait on our
    lock)."""
    if backend_url.startswith("sqlite"):
        connection = sqlite3.connect(server.data_dir / "durable.sqlite", timeout=30)
        connection.isolation_level = None
        connection.execute("BEGIN IMMEDIATE")  # the one writer lock of DBOS's database
        try:
            yield
        finally:
            connection.execute("ROLLBACK")
            connection.close()
        return
    url = backend_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as connection:
        # SHARE blocks inserts of step outputs; reads (and our app store) go on.
        connection.execute("LOCK TABLE dbos.operation_outputs, dbos.workflow_status IN SHARE MODE")
        try:
            yield
        finally:
            connection.rollback()


def _model_entry_committed(backend_url: str, conversation: str, step: int) -> bool:
    return bool(
        rows(
            backend_url,
            "SELECT id FROM transcript_entries WHERE conversation_id = :c AND entry_key LIKE :k",
            c=conversation,
            k=f"%:model:{step}",
        )
    )


def test_a_step_killed_after_its_commit_is_not_run_again(tmp_path: Path, backend_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "delay": 1.0,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "first reply"}},
                    {
                        "name": "write_note",
                        "arguments": {"text": "halfway", "expires_in_minutes": 60},
                    },
                ],
            },
            say("second reply", final=True),
        ],
    )
    server = ServerProcess(
        tmp_path / "data", backend_url, model=model, env={"NIGHTOWL_MEMORY_PASS": "off"}
    ).start()
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        sent = client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": "go"}
        )
        assert sent.status_code == 201

    def call_started() -> bool:
        return bool(
            rows(
                backend_url,
                "SELECT id FROM model_calls WHERE conversation_id = :c AND step = 0",
                c=conversation,
            )
        )

    wait_for(call_started, timeout=30, interval=0.02)
    held = threading.Event()
    with step_records_held(server, backend_url):
        held.set()
        # The reply is committed to the app store; DBOS cannot record the step: kill now.
        wait_for(lambda: _model_entry_committed(backend_url, conversation, 0), timeout=30)
        server.kill()
    assert held.is_set()
    server.start()
    try:
        wait_for(
            lambda: (
                rows(
                    backend_url,
                    "SELECT status FROM turns WHERE conversation_id = :c",
                    c=conversation,
                )
                == [("done",)]
            ),
            timeout=60,
        )
        with server.client() as client:
            messages = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
        assert [(m["role"], m["body"]) for m in messages] == [
            ("user", "go"),
            ("agent", "first reply"),
            ("agent", "second reply"),
        ]
        steps = sorted(
            r[0]
            for r in rows(
                backend_url,
                "SELECT step FROM model_calls WHERE conversation_id = :c AND step >= 0",
                c=conversation,
            )
        )
        assert steps == [0, 1]  # the committed call was not made again
        notes = rows(backend_url, "SELECT text FROM memory_notes WHERE text = 'halfway'")
        assert notes == [("halfway",)]
    finally:
        server.stop()


def test_a_turn_killed_after_it_finished_in_the_store_replays_to_its_end(
    tmp_path: Path, backend_url: str
) -> None:
    """The turn's end is committed to the app store; DBOS has not recorded it when the server
    dies. On restart the turn replays its recorded steps to the same end (it once stopped
    itself at its first step, seeing its own status 'done', and its workflow stayed pending:
    the conversation's next message was never answered)."""
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "first reply"}}]},
            {**say("second reply", final=True), "delay": 1.0},
            say("third reply", final=True),
        ],
    )
    server = ServerProcess(
        tmp_path / "data", backend_url, model=model, env={"NIGHTOWL_MEMORY_PASS": "off"}
    ).start()
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        path = f"/v1/conversations/{conversation}/messages"
        assert client.post(path, json={"client_id": "m1", "text": "go"}).status_code == 201

    def status() -> list[tuple[object, ...]]:
        return rows(
            backend_url,
            "SELECT status FROM turns WHERE conversation_id = :c ORDER BY created_at",
            c=conversation,
        )

    wait_for(
        lambda: rows(
            backend_url,
            "SELECT id FROM model_calls WHERE conversation_id = :c AND step = 1",
            c=conversation,
        ),
        timeout=30,
        interval=0.02,
    )
    with step_records_held(server, backend_url):
        # The last step runs and the turn ends in the store; DBOS cannot record it: kill now.
        wait_for(lambda: status() == [("done",)], timeout=30, interval=0.02)
        server.kill()
    server.start()
    try:
        with server.client() as client:
            assert client.post(path, json={"client_id": "m2", "text": "again"}).status_code == 201
            wait_for(lambda: status() == [("done",), ("done",)], timeout=60)
            messages = client.get(path).json()["messages"]
        assert [(m["role"], m["body"]) for m in messages] == [
            ("user", "go"),
            ("agent", "first reply"),
            ("agent", "second reply"),
            ("user", "again"),
            ("agent", "third reply"),
        ]
        steps = rows(
            backend_url,
            "SELECT count(*) FROM model_calls WHERE conversation_id = :c AND step >= 0",
            c=conversation,
        )
        assert steps == [(3,)]  # the replay called the model for nothing
    finally:
        server.stop()
