"""An API process and a worker process apart, on one PostgreSQL (`nightowl serve --role`)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from nightowl.config import Settings
from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


def test_a_split_role_needs_postgres(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NIGHTOWL_ROLE=api needs NIGHTOWL_DATABASE_URL"):
        Settings(data_dir=tmp_path, role="api")


def test_the_worker_runs_the_turn_the_api_took_and_the_api_hears_its_reply(
    tmp_path: Path,
) -> None:
    model = write_script(tmp_path / "script.json", [say("hello from the worker", final=True)])
    # The queue polls twice a minute: a turn that starts within 20 s was woken by the API's
    # NOTIFY, not found by a poll.
    slow = {
        "NIGHTOWL_QUEUE_POLLING_INTERVAL_S": "30",
        "NIGHTOWL_QUEUE_IDLE_POLLING_INTERVAL_S": "30",
    }
    with fresh_database("postgresql", tmp_path) as url:
        api = ServerProcess(
            tmp_path / "api",
            url,
            model=model,
            executor_id="api-1",
            env={"NIGHTOWL_ROLE": "api", **slow},
        ).start()
        worker = ServerProcess(
            tmp_path / "worker",
            url,
            model=model,
            executor_id="worker-1",
            env={"NIGHTOWL_ROLE": "worker", **slow},
        ).start()
        try:
            with api.client() as client:
                conversation = client.post("/v1/conversations", json={}).json()["id"]
            heard: list[dict[str, object]] = []
            listening = threading.Event()

            def listen() -> None:
                with (
                    api.client() as client,
                    client.stream("GET", "/v1/events", timeout=60) as stream,
                ):
                    for line in stream.iter_lines():
                        listening.set()
                        if line.startswith("data:"):
                            heard.append(json.loads(line[5:]))
                            if any(c["seq"] >= 2 for c in heard):
                                return

            listener = threading.Thread(target=listen, daemon=True)
            listener.start()
            assert listening.wait(30)
            with api.client() as client:
                client.post(
                    f"/v1/conversations/{conversation}/messages",
                    json={"client_id": "m1", "text": "hi"},
                ).raise_for_status()
            turn = wait_for(
                lambda: rows(
                    url,
                    "SELECT id FROM turns WHERE conversation_id = :c AND status = 'done'",
                    c=conversation,
                ),
                timeout=20,
            )[0][0]
            ran_by = rows(
                url, "SELECT executor_id FROM dbos.workflow_status WHERE workflow_uuid = :w", w=turn
            )
            assert ran_by == [("worker-1",)]
            # The reply the worker wrote reached the API process's SSE client (pg_notify).
            listener.join(timeout=30)
            assert any(c["seq"] == 2 and c["conversation_id"] == conversation for c in heard)
            with api.client() as client:
                bodies = [
                    m["body"]
                    for m in client.get(f"/v1/conversations/{conversation}/messages").json()[
                        "messages"
                    ]
                ]
            assert bodies == ["hi", "hello from the worker"]
        finally:
            api.stop()
            worker.stop()
