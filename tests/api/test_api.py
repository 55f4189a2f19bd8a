"""The HTTP API against a real server process, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.server import ServerProcess, wait_for

# This module's servers start on an empty database: a first start migrates it (the other API
# modules' servers start on a migrated copy, tests/databases.py).
pytestmark = pytest.mark.empty_database


def _conversation(client: httpx.Client) -> str:
    response = client.post("/v1/conversations", json={"kind": "direct", "title": "t"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_send_then_read_back_in_order(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        for n in range(3):
            sent = client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": f"m{n}", "text": f"hello {n}"},
            )
            assert sent.status_code == 201
            assert sent.json()["seq"] == n + 1
        page = client.get(f"/v1/conversations/{conversation}/messages", params={"after": 1}).json()
        assert [m["body"] for m in page["messages"]] == ["hello 1", "hello 2"]
        assert page["last_seq"] == 3
        # The turn took the batch and finished (no model configured).
        with server.client() as again:
            listed = again.get("/v1/conversations").json()
        assert conversation in [c["id"] for c in listed]


def test_resend_with_same_client_id_returns_the_original(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        path = f"/v1/conversations/{conversation}/messages"
        first = client.post(path, json={"client_id": "dup", "text": "once"})
        second = client.post(path, json={"client_id": "dup", "text": "once"})
        assert (first.status_code, second.status_code) == (201, 200)
        assert first.json()["id"] == second.json()["id"]
        assert len(client.get(path).json()["messages"]) == 1


def test_a_client_id_reused_for_another_text_is_a_409_that_changes_nothing(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        path = f"/v1/conversations/{conversation}/messages"
        first = client.post(path, json={"client_id": "x9", "text": "Pick one"})
        other = client.post(path, json={"client_id": "x9", "text": "Something else"})
        assert (first.status_code, other.status_code) == (201, 409)
        error = other.json()["error"]
        assert error["code"] == "client_id_reused" and "new client_id" in error["message"]
        # The server's own key forms are a client's ids like any other.
        outbox_shaped = client.post(path, json={"client_id": "out:turn_1:0.0", "text": "ok"})
        assert outbox_shaped.status_code == 201
        bodies = [m["body"] for m in client.get(path).json()["messages"]]
        assert bodies == ["Pick one", "ok"]


def test_two_clients_racing_one_id_with_different_texts_store_one_and_hear_409(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        conversation = _conversation(client)
    path = f"/v1/conversations/{conversation}/messages"

    def post(barrier: threading.Barrier, client_id: str, text: str) -> tuple[int, str]:
        with server.client() as client:
            barrier.wait()
            response = client.post(path, json={"client_id": client_id, "text": text})
            return response.status_code, response.json().get("body", "")

    for round_ in range(5):
        barrier = threading.Barrier(2)
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(
                pool.map(
                    post,
                    [barrier, barrier],
                    [f"race-{round_}"] * 2,
                    [f"left {round_}", f"right {round_}"],
                )
            )
        assert sorted(status for status, _ in results) == [201, 409], results
    with server.client() as client:
        assert len(client.get(path).json()["messages"]) == 5


def test_retry_storm_of_50_concurrent_posts_stores_one_message(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
    path = f"/v1/conversations/{conversation}/messages"
    barrier = threading.Barrier(50)

    def post(_: int) -> tuple[int, str]:
        with server.client() as client:
            barrier.wait()
            response = client.post(path, json={"client_id": "storm", "text": "only one"})
            return response.status_code, response.json()["id"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(post, range(50)))
    assert {status for status, _ in results} <= {200, 201}
    assert sum(1 for status, _ in results if status == 201) == 1
    assert len({message_id for _, message_id in results}) == 1
    with server.client() as client:
        assert len(client.get(path).json()["messages"]) == 1


def test_bad_input_gets_a_clear_error_and_stores_nothing(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        path = f"/v1/conversations/{conversation}/messages"
        malformed = client.post(
            path, content=b'{"client_id": "x",', headers={"Content-Type": "application/json"}
        )
        assert malformed.status_code == 400
        assert "not valid JSON" in malformed.json()["error"]["message"]
        empty = client.post(path, json={"client_id": "e", "text": "   "})
        assert empty.status_code == 422 and "empty" in empty.json()["error"]["message"]
        missing = client.post(path, json={"text": "no id"})
        assert missing.status_code == 422 and "client_id" in missing.json()["error"]["message"]
        bad_id = client.post(path, json={"client_id": "has space", "text": "x"})
        assert bad_id.status_code == 422
        huge = client.post(path, json={"client_id": "big", "text": "x" * 40_000})
        assert huge.status_code == 413 and "limit" in huge.json()["error"]["message"]
        bad_after = client.get(path, params={"after": -1})
        assert bad_after.status_code == 422
        unknown = client.post(
            "/v1/conversations/conv_nope/messages", json={"client_id": "u", "text": "x"}
        )
        assert unknown.status_code == 404
        assert client.get(path).json()["messages"] == []
    anonymous = httpx.post(f"{server.url}{path}", json={"client_id": "a", "text": "x"})
    assert anonymous.status_code == 401 and "token" in anonymous.json()["error"]["message"]
    with server.client(token="nwl_forged") as forged:
        assert forged.get("/v1/conversations").status_code == 401


def test_another_users_conversation_answers_404(server: ServerProcess) -> None:
    with server.client() as owner:
        conversation = _conversation(owner)
        owner.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "p", "text": "mine"}
        )
    with server.client(token=server.member_token(f"dana-{time.monotonic_ns()}")) as other:
        assert other.get(f"/v1/conversations/{conversation}").status_code == 404
        assert other.get(f"/v1/conversations/{conversation}/messages").status_code == 404
        sent = other.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "q", "text": "x"}
        )
        assert sent.status_code == 404
        assert other.post(f"/v1/conversations/{conversation}/typing").status_code == 404
        assert conversation not in [c["id"] for c in other.get("/v1/conversations").json()]


def test_change_notifications_carry_no_content(server: ServerProcess) -> None:
    # The module's server is shared: a turn of an earlier test's conversation may still be
    # announcing its activity, so the listener keeps what concerns this test's conversation.
    received: list[dict[str, object]] = []
    connected = threading.Event()
    mine: list[str] = []

    def listen() -> None:
        with server.client() as client, client.stream("GET", "/v1/events", timeout=20) as stream:
            for line in stream.iter_lines():
                connected.set()
                if line.startswith("data:"):
                    change = json.loads(line[5:])
                    if mine and change.get("conversation_id") == mine[0]:
                        received.append(change)
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert connected.wait(10)
    with server.client() as client:
        conversation = _conversation(client)
        mine.append(conversation)
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "n1", "text": "secret body"},
        )
    wait_for(lambda: received, timeout=10)
    assert received[0] == {"conversation_id": conversation, "seq": 1, "kind": "message"}


def test_health_openapi_and_metrics(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/healthz").json()["status"] == "ok"
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert "/v1/conversations/{conversation_id}/messages" in spec["paths"]
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    with server.client() as client:
        conversation = _conversation(client)
        client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "m", "text": "x"}
        )
        wait_for(lambda: "nightowl_turns_finished_total" in client.get("/metrics").text)
        text = client.get("/metrics").text
    for name in (
        "nightowl_turns_started_total",
        "nightowl_steps_total",
        "nightowl_http_request_seconds",
    ):
        assert name in text


def test_logs_are_json_with_ids_and_no_message_bodies(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        client.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "log", "text": "PRIVATE-BODY-TEXT"},
        )

    def finished_line() -> list[dict[str, object]]:
        return [
            line
            for line in server.log_lines()
            if line.get("message") == "turn finished"
            and line.get("conversation_id") == conversation
        ]

    lines = wait_for(finished_line)
    assert lines[0]["turn_id"]
    assert "PRIVATE-BODY-TEXT" not in server.log_path.read_text()
