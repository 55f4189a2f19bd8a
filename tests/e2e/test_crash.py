"""Crash tests: SIGKILL a real server mid-turn, restart it, and check what survived."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.store_view import rows
from tests.server import ServerProcess, wait_for, write_script

pytestmark = pytest.mark.slow


def _post(server: ServerProcess, text: str, client_id: str) -> str:
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        sent = client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": client_id, "text": text},
        )
        assert sent.status_code == 201
    return str(conversation)


def _turn_states(url: str, conversation: str) -> list[str]:
    return [
        r[0]
        for r in rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
    ]


def test_sigkill_while_turn_is_queued_or_running(tmp_path: Path, backend_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {
                "delay": 2,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "got it", "final": True}}
                ],
            }
        ],
    )
    server = ServerProcess(tmp_path / "data", backend_url, model=model).start()
    conversation = _post(server, "do the thing", "c1")
    server.kill()
    assert _turn_states(backend_url, conversation) in (["queued"], ["running"])

    server.start()
    try:
        wait_for(lambda: _turn_states(backend_url, conversation) == ["done"], timeout=60)
        with server.client() as client:
            messages = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            # The client retries its send after the crash: still one message.
            again = client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "c1", "text": "do the thing"},
            )
        assert again.status_code == 200
        assert [(m["role"], m["body"]) for m in messages] == [
            ("user", "do the thing"),
            ("agent", "got it"),
        ]
        assert (
            len(
                rows(backend_url, "SELECT id FROM turns WHERE conversation_id = :c", c=conversation)
            )
            == 1
        )
    finally:
        server.stop()


def test_sigkill_during_model_call_reruns_only_the_unfinished_step(
    tmp_path: Path, backend_url: str
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "starting"}}]},
            {
                "delay": 3,
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "finished", "final": True}}
                ],
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", backend_url, model=model).start()
    conversation = _post(server, "go", "c1")

    def second_call_started() -> bool:
        return bool(
            rows(
                backend_url,
                "SELECT id FROM model_calls WHERE conversation_id = :c AND step = 1",
                c=conversation,
            )
        )

    wait_for(second_call_started, timeout=30, interval=0.02)
    server.kill()
    server.start()
    try:
        wait_for(lambda: _turn_states(backend_url, conversation) == ["done"], timeout=60)
        steps = [
            r[0]
            for r in rows(
                backend_url,
                "SELECT step FROM model_calls WHERE conversation_id = :c AND step >= 0",
                c=conversation,
            )
        ]
        assert sorted(steps) == [0, 1, 1]  # step 0 never re-ran; the cut-off call ran again
        tools = rows(
            backend_url, "SELECT call_id FROM tool_runs WHERE conversation_id = :c", c=conversation
        )
        assert len(tools) == 2
        with server.client() as client:
            bodies = [
                m["body"]
                for m in client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            ]
        assert bodies == ["go", "starting", "finished"]
    finally:
        server.stop()


def test_sigkill_during_tool_call_reruns_only_that_tool(tmp_path: Path, backend_url: str) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            {"tool_calls": [{"name": "send_to_user", "arguments": {"text": "on it"}}]},
            {"tool_calls": [{"name": "wait", "arguments": {"seconds": 3}}]},
            {
                "tool_calls": [
                    {"name": "send_to_user", "arguments": {"text": "done", "final": True}}
                ]
            },
        ],
    )
    server = ServerProcess(tmp_path / "data", backend_url, model=model).start()
    conversation = _post(server, "go", "c1")

    def wait_started() -> bool:
        return bool(
            rows(
                backend_url,
                "SELECT id FROM tool_runs WHERE conversation_id = :c AND tool = 'wait'",
                c=conversation,
            )
        )

    wait_for(wait_started, timeout=30, interval=0.02)
    server.kill()
    server.start()
    try:
        wait_for(lambda: _turn_states(backend_url, conversation) == ["done"], timeout=60)
        tools = [
            r[0]
            for r in rows(
                backend_url, "SELECT tool FROM tool_runs WHERE conversation_id = :c", c=conversation
            )
        ]
        assert sorted(tools) == ["send_to_user", "send_to_user", "wait", "wait"]
        steps = sorted(
            r[0]
            for r in rows(
                backend_url,
                "SELECT step FROM model_calls WHERE conversation_id = :c AND step >= 0",
                c=conversation,
            )
        )
        assert steps == [0, 1, 2]  # no model call ran twice
        with server.client() as client:
            bodies = [
                m["body"]
                for m in client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            ]
        assert bodies == ["go", "on it", "done"]
    finally:
        server.stop()


@pytest.mark.timeout(900)
def test_a_turn_that_keeps_killing_its_worker_is_parked(tmp_path: Path, backend_url: str) -> None:
    # The model call never ends before the process dies: every start of the turn dies in the
    # same place, as a native crash inside one step would make it.
    model = write_script(
        tmp_path / "script.json",
        [{"delay": 120, "tool_calls": [{"name": "send_to_user", "arguments": {"text": "x"}}]}],
    )
    server = ServerProcess(
        tmp_path / "data", backend_url, model=model, env={"NIGHTOWL_MAX_TURN_RECOVERIES": "3"}
    ).start()
    conversation = _post(server, "do the thing", "c1")

    def calls() -> int:
        return len(
            rows(
                backend_url,
                "SELECT id FROM model_calls WHERE conversation_id = :c AND step = 0",
                c=conversation,
            )
        )

    for death in range(1, 4):
        wait_for(lambda death=death: calls() == death, timeout=60)
        server.kill()
        server.start()
    try:
        wait_for(lambda: _turn_states(backend_url, conversation) == ["failed"], timeout=60)
        with server.client() as client:
            messages = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            notices = [m["body"] for m in messages if m["role"] == "notice"]
            assert len(notices) == 1
            assert "died 3 times in a row" in notices[0]
            # The server stays up and takes new work.
            assert client.get("/healthz").status_code == 200
            other = client.post("/v1/conversations", json={}).json()["id"]
            sent = client.post(
                f"/v1/conversations/{other}/messages", json={"client_id": "o1", "text": "hello"}
            )
            assert sent.status_code == 201
        error = rows(
            backend_url, "SELECT error FROM turns WHERE conversation_id = :c", c=conversation
        )
        assert "died 3 times in a row" in error[0][0]
        assert calls() == 3  # not tried a fourth time
    finally:
        server.stop()
