"""A real `nightowl serve` whose local model's process is killed mid-call keeps serving, and
the turn is answered after the model step's retry (on a fresh process)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

STANDIN = Path(__file__).with_name("standin_worker.py")


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status.lower()


def _answered(client: httpx.Client, url: str, conversation: str) -> list[dict[str, Any]]:
    """The conversation's messages once its turn is done."""
    wait_for(
        lambda: (
            rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
            == [("done",)]
        ),
        timeout=120,
        interval=0.2,
    )
    return list(client.get(f"/v1/conversations/{conversation}/messages").json()["messages"])


@pytest.mark.parametrize("how", [signal.SIGSEGV, signal.SIGKILL], ids=["SIGSEGV", "SIGKILL"])
def test_the_server_outlives_its_local_model_crashing_mid_call(
    tmp_path: Path, how: signal.Signals
) -> None:
    hung, pids = tmp_path / "hung-pid", tmp_path / "pids"
    command = f"{sys.executable} {STANDIN} --pids {pids} --hang-once {hung}"
    server = ServerProcess(
        tmp_path / "data", model="local", env={"NIGHTOWL_LOCAL_MODEL_COMMAND": command}
    ).start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            first = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{first}/messages",
                json={"client_id": "a", "text": "Hello? [hang]"},
            )
            # The model's process has the turn's request and hangs: kill it there.
            pid = int(wait_for(lambda: hung.exists() and hung.read_text(), timeout=60))
            os.kill(pid, how)
            assert client.get("/healthz").status_code == 200
            second = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{second}/messages"
            posted = client.post(path, json={"client_id": "b", "text": "Still there?"})
            assert posted.status_code in (200, 201, 202), posted.text
            assert "Still there?" in [m["body"] for m in client.get(path).json()["messages"]]
            for conversation in (first, second):
                replies = [
                    m["body"] for m in _answered(client, url, conversation) if m["role"] == "agent"
                ]
                assert replies == ["I am the stand-in."], (conversation, replies)
        failed = rows(
            url,
            "SELECT error FROM model_calls WHERE conversation_id = :c AND error IS NOT NULL",
            c=first,
        )
        assert any(f"the local model crashed (signal {how.name})" in e for (e,) in failed)
        assert server.process is not None and server.process.poll() is None  # never went down
        # The killed process, the one started after it, and the start-up model check's own
        # (the first screen's "ready"), which has ended: only the restarted one lives.
        started = [int(line) for line in pids.read_text().split()]
        alive = [p for p in started if _alive(p)]
        assert len(started) == 3 and pid in started and alive and pid not in alive
        assert len(alive) == 1
    finally:
        server.stop()
    # The server stops its model's process with itself.
    wait_for(lambda: not any(_alive(int(p)) for p in pids.read_text().split()), timeout=15)


@pytest.mark.timeout(240)
def test_a_model_that_keeps_crashing_ends_the_turn_with_a_message_saying_so(
    tmp_path: Path,
) -> None:
    command = f"{sys.executable} {STANDIN} --crash SIGSEGV"
    server = ServerProcess(
        tmp_path / "data", model="local", env={"NIGHTOWL_LOCAL_MODEL_COMMAND": command}
    ).start()
    url = f"sqlite:///{tmp_path / 'data' / 'nightowl.db'}"
    try:
        with server.client() as client:
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            path = f"/v1/conversations/{conversation}/messages"
            client.post(path, json={"client_id": "a", "text": "Hello? [hang]"})
            wait_for(
                lambda: (
                    rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
                    == [("failed",)]
                ),
                timeout=180,
                interval=0.5,
            )
            notices = [
                m["body"] for m in client.get(path).json()["messages"] if m["role"] != "user"
            ]
            assert client.get("/healthz").status_code == 200
        # After its retries (with backoff) the model step gives up, and says why in words.
        assert len(notices) == 1
        assert "the local model crashed (signal SIGSEGV)" in notices[0]
        assert "nightowl doctor" in notices[0]
        calls = rows(
            url, "SELECT error FROM model_calls WHERE conversation_id = :c", c=conversation
        )
        assert len(calls) == 5 and all("SIGSEGV" in str(e) for (e,) in calls)
    finally:
        server.stop()
