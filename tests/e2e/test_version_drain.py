"""A deploy onto a new application version, drained as docs/operations.md says: processes of
the new version start beside the old workers, traffic moves to the new API, the old workers
finish the old version's turns (a new worker never replays an old workflow), and once the
docs' drain query counts none left, the old workers stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.databases import fresh_database
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for

pytestmark = pytest.mark.slow

OLD, NEW = "2026.12.1", "2026.12.2"
# The query docs/operations.md gives for "is the old version drained?"
LEFT = (
    "SELECT count(*) FROM dbos.workflow_status WHERE application_version = :v"
    " AND status IN ('PENDING', 'ENQUEUED')"
)


def _wait(seconds: float) -> str:
    """An owner's message the scripted model obeys: wait this long."""
    return "DO: " + json.dumps({"name": "wait", "arguments": {"seconds": seconds}})


def _turn(url: str, conversation: str) -> tuple[str, str, str]:
    """The conversation's one turn: its status, its workflow's version and executor (empty
    until the turn is stored and its workflow enqueued)."""
    found = rows(
        url,
        "SELECT t.status, w.application_version, w.executor_id FROM turns t"
        " JOIN dbos.workflow_status w ON w.workflow_uuid = t.id WHERE t.conversation_id = :c",
        c=conversation,
    )
    assert len(found) <= 1, found
    if not found:
        return "", "", ""
    status, version, executor = found[0]
    return str(status), str(version), str(executor)


def _send(server: ServerProcess, token: str, text: str) -> str:
    with server.client(token) as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": text}
        ).raise_for_status()
    return str(conversation)


def test_the_old_version_drains_on_its_own_workers_while_the_new_one_takes_new_turns(
    tmp_path: Path,
) -> None:
    script = {"replies": [{"obey": True}, say("done", final=True)], "then": "silent"}
    (tmp_path / "script.json").write_text(json.dumps(script))
    model = f"scripted:{tmp_path / 'script.json'}"

    def process(name: str, role: str, version: str) -> ServerProcess:
        env = {"NIGHTOWL_ROLE": role, "NIGHTOWL_APPLICATION_VERSION": version}
        return ServerProcess(tmp_path / name, url, model=model, executor_id=name, env=env)

    with fresh_database("postgresql", tmp_path) as url:
        old_api, old_worker = process("api-1", "api", OLD), process("worker-1", "worker", OLD)
        new_api, new_worker = process("api-2", "api", NEW), process("worker-2", "worker", NEW)
        processes = [old_api, old_worker, new_api, new_worker]
        try:
            old_api.start()
            old_worker.start()
            token = old_api.token
            # A long turn of the old version is under way when the new version arrives.
            before = _send(old_api, token, _wait(60))
            wait_for(lambda: _turn(url, before)[0] == "running", timeout=120)
            new_worker.start()
            new_api.start()
            old_api.stop()  # traffic moves to the new API
            after = _send(new_api, token, _wait(1))
            wait_for(lambda: _turn(url, after)[0] == "done", timeout=120)
            assert _turn(url, after)[1:] == (NEW, "worker-2")
            # The old turn is still the old workers' to finish: not drained yet.
            assert _turn(url, before)[0] == "running"
            assert rows(url, LEFT, v=OLD) == [(1,)]
            wait_for(lambda: rows(url, LEFT, v=OLD) == [(0,)], timeout=120)
            assert _turn(url, before) == ("done", OLD, "worker-1")
            old_worker.stop()
            # Each owner got one answer, from the version that ran the turn.
            for conversation in (before, after):
                agent = rows(
                    url,
                    "SELECT body FROM messages WHERE conversation_id = :c AND role = 'agent'",
                    c=conversation,
                )
                assert agent == [("done",)]
            # The new version alone serves what comes next.
            later = _send(new_api, token, _wait(1))
            wait_for(lambda: _turn(url, later)[0] == "done", timeout=120)
            assert _turn(url, later)[1:] == (NEW, "worker-2")
        finally:
            for server in processes:
                server.stop()
