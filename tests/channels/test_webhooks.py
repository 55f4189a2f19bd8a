"""Webhooks against a real server: signatures, replays, untrusted content, batching."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nightowl.channels.webhooks import sign
from tests.e2e.store_view import rows
from tests.server import NIGHTOWL, ServerProcess, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", database_url).start()
    yield process
    process.stop()


def _deliver(
    server: ServerProcess,
    hook: dict[str, str],
    payload: dict[str, object],
    delivery: str,
    *,
    secret: str | None = None,
    timestamp: int | None = None,
) -> httpx.Response:
    body = json.dumps(payload).encode()
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    return httpx.post(
        f"{server.url}{hook['url_path']}",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-Nightowl-Timestamp": stamp,
            "X-Nightowl-Signature": sign(secret or hook["secret"], stamp, body),
            "X-Nightowl-Delivery": delivery,
        },
    )


def _messages(server: ServerProcess, hook: dict[str, str]) -> list[dict[str, object]]:
    with server.client() as client:
        page = client.get(f"/v1/conversations/{hook['conversation_id']}/messages").json()
    return list(page["messages"])


def _hook(server: ServerProcess) -> dict[str, str]:
    with server.client() as client:
        created = client.post("/v1/hooks", json={"name": "billing"})
    assert created.status_code == 201
    hook: dict[str, str] = created.json()
    assert hook["secret"].startswith("whsec_")
    return hook


def test_bad_or_stale_signatures_are_refused_and_store_nothing(server: ServerProcess) -> None:
    hook = _hook(server)
    forged = _deliver(server, hook, {"amount": 1}, "d1", secret="whsec_wrong")
    assert forged.status_code == 401 and "signature" in forged.json()["error"]["message"]
    stale = _deliver(server, hook, {"amount": 1}, "d2", timestamp=int(time.time()) - 600)
    assert stale.status_code == 401 and "5 minutes" in stale.json()["error"]["message"]
    unsigned = httpx.post(f"{server.url}{hook['url_path']}", content=b"{}")
    assert unsigned.status_code == 401
    assert _messages(server, hook) == []


def test_a_delivery_is_stored_once_as_untrusted_content(server: ServerProcess) -> None:
    hook = _hook(server)
    first = _deliver(server, hook, {"event": "invoice.paid", "id": 7}, "evt-7")
    replay = _deliver(server, hook, {"event": "invoice.paid", "id": 7}, "evt-7")
    assert (first.status_code, replay.status_code) == (202, 202)
    assert (first.json()["duplicate"], replay.json()["duplicate"]) == (False, True)
    messages = _messages(server, hook)
    assert len(messages) == 1
    assert messages[0]["trust"] == "untrusted" and '"invoice.paid"' in str(messages[0]["body"])
    no_id = _deliver(server, hook, {"x": 1}, "")
    assert no_id.status_code == 400


def test_a_burst_of_deliveries_is_answered_by_one_turn(
    server: ServerProcess, database_url: str
) -> None:
    hook = _hook(server)
    for n in range(3):
        assert _deliver(server, hook, {"n": n}, f"burst-{n}").status_code == 202
    wait_for(
        lambda: (
            rows(
                database_url,
                "SELECT status FROM turns WHERE conversation_id = :c",
                c=hook["conversation_id"],
            )
            == [("done",)]
        ),
        timeout=30,
    )
    batch = rows(
        database_url,
        "SELECT batch_first_seq, batch_last_seq FROM turns WHERE conversation_id = :c",
        c=hook["conversation_id"],
    )
    assert batch == [(1, 3)]


def test_the_owners_direct_message_does_not_wait_for_a_batching_window(
    server: ServerProcess, database_url: str
) -> None:
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        sent_at = time.monotonic()
        client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "o", "text": "now"}
        )
        wait_for(
            lambda: (
                rows(
                    database_url,
                    "SELECT status FROM turns WHERE conversation_id = :c",
                    c=conversation,
                )
                == [("done",)]
            ),
            timeout=30,
            interval=0.01,
        )
    assert time.monotonic() - sent_at < 1.5  # the group/webhook window is 1.5 s


def test_hooks_are_listed_and_deleted_from_the_api_and_the_cli(server: ServerProcess) -> None:
    hook = _hook(server)
    with server.client() as client:
        listed = client.get("/v1/hooks").json()
        assert [h["id"] for h in listed] == [hook["id"]] and listed[0]["secret"] is None
        assert client.delete(f"/v1/hooks/{hook['id']}").status_code == 204
        assert client.delete(f"/v1/hooks/{hook['id']}").status_code == 404
    assert _deliver(server, hook, {"late": True}, "after-delete").status_code == 404
    created = subprocess.run(
        [NIGHTOWL, "hooks", "create", "ci"], env=server.env, capture_output=True, text=True
    )
    assert created.returncode == 0 and "secret (shown once): whsec_" in created.stdout
    listed_cli = subprocess.run(
        [NIGHTOWL, "hooks", "list"], env=server.env, capture_output=True, text=True
    )
    assert " ci " in listed_cli.stdout
